/* SPDX-License-Identifier: MIT */
/* Configuration: bad environment values and config fields are clear errors, good ones work. */
#define _GNU_SOURCE
#include "check.h"

#include <pvrt/thread.h>

#include <errno.h>
#include <sched.h>
#include <stddef.h>
#include <string.h>

static void bad_env(const char *var, const char *val, const char *needle)
{
	setenv(var, val, 1);
	int r = pvrt_init(NULL);
	if (r != -EINVAL || !strstr(pvrt_errmsg(), needle)) {
		fprintf(stderr, "%s=%s: got %d '%s', wanted -EINVAL naming '%s'\n", var, val, r,
			pvrt_errmsg(), needle);
		exit(1);
	}
	unsetenv(var);
}

static void *where(void *a)
{
	(void)a;
	return (void *)(intptr_t)sched_getcpu();
}

/* Sized structs (include/pvrt/version.h): not initialised is an error; a program built with
 * an older, shorter struct gets the defaults for the fields it does not have, and an out-struct
 * is written no further than the program's size. */
static void sized_structs(void)
{
	struct pvrt_config c = PVRT_CONFIG_INIT;
	CHECK_EQ(c.size, sizeof(c));
	c.size = 0;
	CHECK_EQ(pvrt_init(&c), -EINVAL);
	CHECK(strstr(pvrt_errmsg(), "pvrt_config_init"));
	/* Only 'workers' known: what lies past it is never read (0xff: bad pointers and values). */
	pvrt_config_init(&c);
	c.workers = 2;
	c.size = offsetof(struct pvrt_config, cpus);
	memset((char *)&c + c.size, 0xff, sizeof(c) - c.size);
	CHECK_EQ(pvrt_init(&c), 0);
	CHECK_EQ(pvrt_nworkers(), 2);

	pvrt_thread_attr_t a = PVRT_THREAD_ATTR_INIT, b;
	CHECK_EQ(a.size, sizeof(a));
	CHECK_EQ(a.worker, -1);
	pvrt_thread_attr_init(&b);
	CHECK(a.size == b.size && a.detached == b.detached && a.stack_size == b.stack_size &&
	      a.worker == b.worker);
	pvrt_thread_t t;
	a.size = 0;
	CHECK_EQ(pvrt_thread_create(&t, &a, where, NULL), -EINVAL);
	a.size = offsetof(pvrt_thread_attr_t, stack_size); /* knows 'detached' only */
	memset((char *)&a + a.size, 0xff, sizeof(a) - a.size);
	CHECK_EQ(pvrt_thread_create(&t, &a, where, NULL), 0);
	CHECK_EQ(pvrt_thread_join(t, NULL), 0);

	struct pvrt_stats s;
	memset(&s, 0xab, sizeof(s));
	CHECK_EQ(pvrt_stats_read(&s, 4), -EINVAL);
	size_t part = offsetof(struct pvrt_stats, switches); /* up to ults_created */
	CHECK_EQ(pvrt_stats_read(&s, part), 0);
	CHECK_EQ(s.size, part);
	CHECK_EQ(s.flags, 0);
	CHECK(s.ults_created >= 1);
	CHECK_EQ(s.switches, 0xababababababababull); /* past the size: untouched */
	CHECK_EQ(pvrt_stats_get(&s), 0);
	CHECK_EQ(s.size, sizeof(s));
	CHECK_EQ(pvrt_finalize(), 0);
	CHECK_EQ(pvrt_stats_get(&s), -ENXIO);
	CHECK_EQ(s.size, sizeof(s));
	CHECK_EQ(s.ults_created, 0);
}

int main(void)
{
	static const char *const vars[] = {"PVRT_WORKERS", "PVRT_CPUS",		 "PVRT_STACK_SIZE",
					   "PVRT_SCHED",   "PVRT_POLL_MIN_NS",	 "PVRT_POLL_MAX_NS",
					   "PVRT_TIMER",   "PVRT_TIMER_SLACK_NS"};
	for (unsigned i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);
	bad_env("PVRT_WORKERS", "0", "PVRT_WORKERS");
	bad_env("PVRT_WORKERS", "-2", "PVRT_WORKERS");
	bad_env("PVRT_WORKERS", "4x", "PVRT_WORKERS");
	bad_env("PVRT_WORKERS", "100000", "PVRT_WORKERS");
	bad_env("PVRT_CPUS", "zero", "PVRT_CPUS");
	bad_env("PVRT_CPUS", "3-1", "PVRT_CPUS");
	bad_env("PVRT_CPUS", "0,", "PVRT_CPUS");
	bad_env("PVRT_CPUS", "1000", "PVRT_CPUS");
	bad_env("PVRT_STACK_SIZE", "12", "PVRT_STACK_SIZE");
	bad_env("PVRT_STACK_SIZE", "64q", "PVRT_STACK_SIZE");
	bad_env("PVRT_SCHED", "fastest", "random");
	bad_env("PVRT_POLL_MAX_NS", "soon", "PVRT_POLL_MAX_NS");
	bad_env("PVRT_POLL_MIN_NS", "-1", "PVRT_POLL_MIN_NS");
	bad_env("PVRT_TIMER", "sometimes", "lazy");
	bad_env("PVRT_TIMER_SLACK_NS", "x", "PVRT_TIMER_SLACK_NS");
	/* A CPU outside the affinity mask. */
	cpu_set_t m;
	sched_getaffinity(0, sizeof(m), &m);
	int out = -1;
	for (int c = 0; c < 1000 && out < 0; c++)
		if (!CPU_ISSET(c, &m))
			out = c;
	char buf[16];
	snprintf(buf, sizeof(buf), "%d", out);
	bad_env("PVRT_CPUS", buf, "affinity mask");

	struct pvrt_config c;
	pvrt_config_init(&c);
	c.workers = 100000;
	CHECK_EQ(pvrt_init(&c), -EINVAL);
	pvrt_config_init(&c);
	c.timer_slack_ns = -5;
	CHECK_EQ(pvrt_init(&c), -EINVAL);
	sized_structs();

	/* Good: one CPU, three workers sharing it, 8 MiB default stacks. */
	int first = -1;
	for (int i = 0; i < CPU_SETSIZE && first < 0; i++)
		if (CPU_ISSET(i, &m))
			first = i;
	snprintf(buf, sizeof(buf), "%d", first);
	setenv("PVRT_CPUS", buf, 1);
	setenv("PVRT_WORKERS", "3", 1);
	setenv("PVRT_STACK_SIZE", "8m", 1);
	setenv("PVRT_TIMER", "eager", 1);
	CHECK_EQ(pvrt_init(NULL), 0);
	CHECK_EQ(pvrt_nworkers(), 3);
	pvrt_thread_attr_t a;
	pvrt_thread_attr_init(&a);
	for (int w = 0; w < 3; w++) {
		a.worker = w;
		pvrt_thread_t t;
		void *cpu;
		CHECK_EQ(pvrt_thread_create(&t, &a, where, NULL), 0);
		CHECK_EQ(pvrt_thread_join(t, &cpu), 0);
		CHECK_EQ((intptr_t)cpu, first); /* every worker is pinned to the one CPU */
	}
	CHECK_EQ(pvrt_finalize(), 0);
	printf("ok\n");
	return 0;
}
