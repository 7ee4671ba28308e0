/* SPDX-License-Identifier: MIT */
/*
 * Configuration: the fields of struct pvrt_config and the PVRT_* environment variables, checked
 * and turned into the settings pvrt_init() applies (struct rt_settings).
 */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- configuration */

static int parse_u64(const char *s, uint64_t *out, bool suffixes)
{
	char *end;
	if (!s || !*s || *s == '-' || *s == ' ')
		return -EINVAL;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s)
		return -EINVAL;
	uint64_t mul = 1;
	if (suffixes && *end) {
		if ((*end == 'k' || *end == 'K') && !end[1])
			mul = 1024;
		else if ((*end == 'm' || *end == 'M') && !end[1])
			mul = 1024 * 1024;
		else
			return -EINVAL;
	} else if (*end) {
		return -EINVAL;
	}
	if (v > UINT64_MAX / mul)
		return -EINVAL;
	*out = v * mul;
	return 0;
}

/* "0-3,6": CPUs into set. -EINVAL on syntax errors. */
static int parse_cpus(const char *s, cpu_set_t *set)
{
	CPU_ZERO(set);
	const char *p = s;
	if (!*p)
		return -EINVAL;
	while (*p) {
		char *end;
		if (*p < '0' || *p > '9')
			return -EINVAL;
		unsigned long a = strtoul(p, &end, 10), b = a;
		p = end;
		if (*p == '-') {
			p++;
			if (*p < '0' || *p > '9')
				return -EINVAL;
			b = strtoul(p, &end, 10);
			p = end;
		}
		if (a > b || b >= CPU_SETSIZE)
			return -EINVAL;
		for (unsigned long c = a; c <= b; c++)
			CPU_SET(c, set);
		if (*p == ',' && p[1])
			p++;
		else if (*p)
			return -EINVAL;
	}
	return 0;
}

static const char *env_or(const char *given, const char *name)
{
	if (given)
		return given;
	const char *e = secure_getenv(name); /* none under AT_SECURE (setuid) */
	return e && *e ? e : NULL;
}

/* PVRT_SLICE_NS / PVRT_HANDOFF_NS: a number of ns in [min, 10 s], or 0 / "off". */
static int parse_ns_off(int64_t given, const char *name, uint64_t def, uint64_t min, uint64_t *out)
{
	const char *e;
	*out = def;
	if (given == -1) {
		*out = 0;
	} else if (given) {
		*out = (uint64_t)given;
	} else if ((e = env_or(NULL, name))) {
		if (!strcmp(e, "off"))
			*out = 0;
		else if (parse_u64(e, out, false))
			return rt_failf(-EINVAL, "%s: '%s' is not a number of ns (or 0, off)", name,
					e);
	}
	if (given < -1 || (*out && (*out < min || *out > 10000000000ull)))
		return rt_failf(-EINVAL, "%s: out of range (%s)", name,
				min == 100000 ? "100 us .. 10 s, or 0/off"
					      : "50 us .. 10 s, or 0/off");
	return 0;
}

int rt_configure(const struct pvrt_config *c, struct rt_settings *s)
{
	struct pvrt_config z;
	if (!c) {
		pvrt_config_init(&z);
	} else {
		if (c->size < sizeof(c->size))
			return rt_fail(-EINVAL, "pvrt_init: config not initialised "
						"(pvrt_config_init or PVRT_CONFIG_INIT)");
		os_sized_in(&z, sizeof(z), c, c->size); /* fields past the program's: default */
	}
	c = &z;
	cpu_set_t mask, want;
	if (sched_getaffinity(0, sizeof(mask), &mask))
		return rt_fail(-errno, "pvrt_init: cannot read the affinity mask");
	const char *cpus = env_or(c->cpus, "PVRT_CPUS");
	if (cpus) {
		if (parse_cpus(cpus, &want))
			return rt_failf(-EINVAL, "PVRT_CPUS: bad CPU list '%s' (e.g. \"0-3,6\")%s",
					cpus, "");
		for (int i = 0; i < CPU_SETSIZE; i++)
			if (CPU_ISSET(i, &want) && !CPU_ISSET(i, &mask))
				return rt_failf(-EINVAL,
						"PVRT_CPUS: '%s' names a CPU outside the process's "
						"affinity mask%s",
						cpus, "");
	} else {
		want = mask;
	}
	s->ncpus = 0;
	for (int i = 0; i < CPU_SETSIZE && s->ncpus < PVRT_MAX_WORKERS; i++)
		if (CPU_ISSET(i, &want))
			s->cpus[s->ncpus++] = i;
	if (!s->ncpus)
		return rt_fail(-EINVAL, "PVRT_CPUS: no CPU selected");

	s->nw = c->workers;
	const char *e;
	if (!s->nw && (e = env_or(NULL, "PVRT_WORKERS"))) {
		uint64_t v;
		if (parse_u64(e, &v, false) || v < 1 || v > PVRT_MAX_WORKERS)
			return rt_failf(-EINVAL, "PVRT_WORKERS: '%s' is not a number in 1..%s", e,
					"256");
		s->nw = (unsigned)v;
	}
	if (!s->nw)
		s->nw = s->ncpus;
	if (s->nw > PVRT_MAX_WORKERS)
		return rt_fail(-EINVAL, "pvrt_init: workers must be in 1..256");

	size_t ps = rt_page_size();
	uint64_t st = c->stack_size;
	if (!st && (e = env_or(NULL, "PVRT_STACK_SIZE")) && (parse_u64(e, &st, true) || !st))
		return rt_failf(
		    -EINVAL, "PVRT_STACK_SIZE: '%s' is not a size (bytes, or with k/m)%s", e, "");
	if (!st)
		st = 64 * 1024;
	if (st < PVRT_STACK_MIN || st > PVRT_STACK_MAX)
		return rt_fail(-EINVAL, "PVRT_STACK_SIZE: out of range (16 KiB .. 1 GiB)");
	s->stack = (st + ps - 1) / ps * ps + ps; /* usable size plus the guard page */

	const char *pol = env_or(c->sched, "PVRT_SCHED");
	s->pol = rt_sched_find(pol);
	if (!s->pol)
		return rt_failf(-EINVAL, "PVRT_SCHED: unknown policy '%s' (accepted: %s)", pol,
				rt_sched_names());

	s->poll_min = c->poll_min_ns;
	if (!s->poll_min && (e = env_or(NULL, "PVRT_POLL_MIN_NS")) &&
	    parse_u64(e, &s->poll_min, false))
		return rt_failf(-EINVAL, "PVRT_POLL_MIN_NS: '%s' is not a number of ns%s", e, "");
	if (!s->poll_min)
		s->poll_min = 10000;
	s->poll_max = c->poll_max_ns;
	bool max_given = s->poll_max != 0;
	if (!max_given && (e = env_or(NULL, "PVRT_POLL_MAX_NS"))) {
		if (parse_u64(e, &s->poll_max, false))
			return rt_failf(-EINVAL, "PVRT_POLL_MAX_NS: '%s' is not a number of ns%s",
					e, "");
		max_given = true;
	}
	if (!max_given)
		s->poll_max = 200000;
	if (s->poll_max > 1000000000ull)
		return rt_fail(-EINVAL, "PVRT_POLL_MAX_NS: at most 1 s");
	if (s->poll_min > s->poll_max)
		s->poll_min = s->poll_max;

	const char *tm = env_or(c->timer, "PVRT_TIMER");
	if (!tm || !strcmp(tm, "lazy"))
		s->eager = 0;
	else if (!strcmp(tm, "eager"))
		s->eager = 1;
	else
		return rt_failf(-EINVAL, "PVRT_TIMER: unknown mode '%s' (accepted: lazy, eager)%s",
				tm, "");
	if (c->timer_slack_ns < -1 || c->timer_slack_ns > 1000000000)
		return rt_fail(-EINVAL, "pvrt_init: timer_slack_ns must be -1 or 0..1 s");
	s->ult_tls = c->ult_tls;
	if (!s->ult_tls && (e = env_or(NULL, "PVRT_ULT_TLS"))) {
		if (strcmp(e, "0") && strcmp(e, "1"))
			return rt_failf(-EINVAL, "PVRT_ULT_TLS: '%s' is not 0 or 1%s", e, "");
		s->ult_tls = *e == '1';
	}
	if (s->ult_tls) {
#if defined(PVRT_ASAN) || defined(PVRT_TSAN)
		/* The sanitizers keep their per-thread state in the thread's TLS. */
		return rt_fail(-ENOTSUP, "pvrt_init: per-ULT TLS does not work under a sanitizer");
#else
		const char *why = NULL;
		if (rt_tls_init(&why))
			return rt_failf(-ENOSYS, "pvrt_init: per-ULT TLS: %s%s", why, "");
		s->stack += rt_tls_reserve();
#endif
	}
	s->slack = c->timer_slack_ns == -1 ? 0 : (uint64_t)c->timer_slack_ns;
	if (!c->timer_slack_ns) {
		s->slack = 50000;
		if ((e = env_or(NULL, "PVRT_TIMER_SLACK_NS")) &&
		    (parse_u64(e, &s->slack, false) || s->slack > 1000000000))
			return rt_failf(-EINVAL,
					"PVRT_TIMER_SLACK_NS: '%s' is not a number of ns%s", e, "");
	}
	/* Preemption: 10 ms, Go's forcePreemptNS (see README). TSan: off, see preempt.c. */
	int r = parse_ns_off(c->slice_ns, "PVRT_SLICE_NS", 10000000, 100000, &s->slice);
	if (r)
		return r;
#if defined(PVRT_TSAN)
	s->slice = 0;
#endif
	/* valgrind's signal frames hold the whole guest state, thread pointer included: a ULT
	 * preempted on one thread would return from the handler with that thread's TLS on another.
	 */
	if (rt_san_on_valgrind())
		s->slice = 0;
	return parse_ns_off(c->handoff_ns, "PVRT_HANDOFF_NS", 1000000, 50000, &s->handoff);
}
