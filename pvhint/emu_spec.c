/* SPDX-License-Identifier: MIT */
/* Parsing of the emulator spec ("vcpus=4,pcpus=2,quantum=3ms") and of durations. */
#define _GNU_SOURCE
#include "emu.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int pvhint__parse_ns(const char *s, uint64_t *out)
{
	char *end;

	if (!s || !*s || *s == '-')
		return -EINVAL;
	errno = 0;
	double v = strtod(s, &end);
	/* !(v >= 0) also rejects nan, whose conversion to an integer is undefined. */
	if (errno || end == s || !(v >= 0))
		return -EINVAL;
	double mul;
	if (!*end || !strcmp(end, "ns"))
		mul = 1;
	else if (!strcmp(end, "us"))
		mul = 1e3;
	else if (!strcmp(end, "ms"))
		mul = 1e6;
	else if (!strcmp(end, "s"))
		mul = 1e9;
	else
		return -EINVAL;
	if (!(v * mul <= 1e15)) /* about 11 days: anything longer is a typo; inf too */
		return -EINVAL;
	*out = (uint64_t)(v * mul + 0.5);
	return 0;
}

static int parse_uint(const char *s, unsigned lo, unsigned hi, unsigned *out)
{
	char *end;

	if (!*s || *s == '-')
		return -EINVAL;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (errno || *end || v < lo || v > hi)
		return -EINVAL;
	*out = (unsigned)v;
	return 0;
}

/* "rtmin+K", "rtmax-K" or an absolute real-time signal number. */
static int parse_signal(const char *s, int *out)
{
	unsigned k;
	int sig;

	if (!strncasecmp(s, "rtmin+", 6) && !parse_uint(s + 6, 0, 64, &k))
		sig = SIGRTMIN + (int)k;
	else if (!strncasecmp(s, "rtmax-", 6) && !parse_uint(s + 6, 0, 64, &k))
		sig = SIGRTMAX - (int)k;
	else if (!parse_uint(s, 1, 64, &k))
		sig = (int)k;
	else
		return -EINVAL;
	if (sig < SIGRTMIN || sig > SIGRTMAX)
		return -EINVAL;
	*out = sig;
	return 0;
}

static const char *const keys = "vcpus, pcpus, mode, quantum, duty, period, noisy_vcpus, seed, "
				"signal, ack_timeout, rt, ksleep, "
				"export";

int pvhint__emu_parse(const char *spec, const char *label, struct emu_conf *c)
{
	c->vcpus = pvhint__affinity_cpus();
	c->pcpus = 0; /* = vcpus */
	c->mode = EMU_SLICE;
	c->quantum = 3000000;
	c->duty = 0.3;
	c->period = 10000000;
	c->seed = 1;
	c->noisy_lo = 0;
	c->noisy_hi = UINT32_MAX; /* every vCPU: set below, once vcpus is known */
	c->sig = 0;		  /* choose */
	c->ack_timeout = 50000000;
	c->rt = 1;
	c->ksleep = 1000000;
	c->export_path[0] = 0;
	if (!spec)
		goto done;

	char *dup = strdup(spec), *save = NULL;
	if (!dup)
		return pvhint__fail(-ENOMEM, "out of memory");
	int err = 0;
	for (char *kv = strtok_r(dup, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
		while (*kv == ' ')
			kv++;
		if (!*kv)
			continue;
		char *val = strchr(kv, '=');
		if (!val) {
			err = pvhint__fail(-EINVAL, "%s: '%s' is not key=value (keys: %s)", label,
					   kv, keys);
			break;
		}
		*val++ = 0;
		const char *want = NULL;
		if (!strcmp(kv, "vcpus")) {
			if (parse_uint(val, 1, EMU_MAX_VCPUS, &c->vcpus))
				want = "an integer 1..1024";
		} else if (!strcmp(kv, "pcpus")) {
			if (parse_uint(val, 1, EMU_MAX_VCPUS, &c->pcpus))
				want = "an integer 1..1024";
		} else if (!strcmp(kv, "mode")) {
			if (!strcmp(val, "slice"))
				c->mode = EMU_SLICE;
			else if (!strcmp(val, "noisy"))
				c->mode = EMU_NOISY;
			else if (!strcmp(val, "script"))
				c->mode = EMU_SCRIPT;
			else if (!strcmp(val, "random"))
				c->mode = EMU_RANDOM;
			else
				want = "slice, noisy, script or random";
		} else if (!strcmp(kv, "noisy_vcpus")) {
			/* "V" or "A-B": a range, as ',' separates the keys. */
			char *dash = strchr(val, '-');
			if (dash)
				*dash = 0;
			if (parse_uint(val, 0, EMU_MAX_VCPUS - 1, &c->noisy_lo) ||
			    parse_uint(dash ? dash + 1 : val, 0, EMU_MAX_VCPUS - 1, &c->noisy_hi) ||
			    c->noisy_hi < c->noisy_lo)
				want = "a vCPU V or a range A-B (A <= B)";
			if (dash)
				*dash = '-'; /* the error message shows the value as given */
		} else if (!strcmp(kv, "quantum")) {
			if (pvhint__parse_ns(val, &c->quantum) || c->quantum < 10000)
				want = "a duration >= 10us (ns, us, ms, s)";
		} else if (!strcmp(kv, "period")) {
			if (pvhint__parse_ns(val, &c->period) || c->period < 10000)
				want = "a duration >= 10us (ns, us, ms, s)";
		} else if (!strcmp(kv, "ack_timeout")) {
			if (pvhint__parse_ns(val, &c->ack_timeout) || c->ack_timeout < 1000000)
				want = "a duration >= 1ms (ns, us, ms, s)";
		} else if (!strcmp(kv, "ksleep")) {
			if (pvhint__parse_ns(val, &c->ksleep) || (c->ksleep && c->ksleep < 100000))
				want = "0 (off) or a duration >= 100us (ns, us, ms, s)";
		} else if (!strcmp(kv, "duty")) {
			char *end;
			errno = 0;
			c->duty = strtod(val, &end);
			if (errno || end == val || *end || !(c->duty >= 0 && c->duty <= 1))
				want = "a fraction 0..1";
		} else if (!strcmp(kv, "seed")) {
			char *end;
			errno = 0;
			/* strtoull would take "-1" (and " -1") as 2^64 - 1. */
			c->seed = strtoull(val, &end, 0);
			if (errno || end == val || *end || val[0] < '0' || val[0] > '9')
				want = "an integer >= 0";
		} else if (!strcmp(kv, "signal")) {
			if (parse_signal(val, &c->sig))
				want = "a real-time signal: rtmin+K, rtmax-K or its number";
		} else if (!strcmp(kv, "export")) {
			if (val[0] != '/' || strlen(val) >= sizeof(c->export_path))
				want = "an absolute file path (e.g. /dev/shm/pvrt-emu)";
			else
				strcpy(c->export_path, val);
		} else if (!strcmp(kv, "rt")) {
			if (parse_uint(val, 0, 1, &c->rt))
				want = "0 or 1";
		} else {
			err = pvhint__fail(-EINVAL, "%s: unknown key '%s' (keys: %s)", label, kv,
					   keys);
			break;
		}
		if (want) {
			err = pvhint__fail(-EINVAL, "%s: bad value '%s' for '%s' (want %s)", label,
					   val, kv, want);
			break;
		}
	}
	free(dup);
	if (err)
		return err;
done:
	if (c->pcpus > c->vcpus)
		return pvhint__fail(-EINVAL, "%s: pcpus=%u exceeds vcpus=%u (want pcpus <= vcpus)",
				    label, c->pcpus, c->vcpus);
	/* At duty 1 the neighbour takes every pCPU for good: no vCPU ever runs again. */
	if (c->mode == EMU_NOISY && c->duty >= 1)
		return pvhint__fail(-EINVAL,
				    "%s: duty=%g with mode=noisy never lets a vCPU run (want 0..1, "
				    "below 1)",
				    label, c->duty);
	if (c->noisy_hi == UINT32_MAX) {
		c->noisy_hi = c->vcpus - 1;
	} else if (c->noisy_hi >= c->vcpus) {
		return pvhint__fail(-EINVAL, "%s: noisy_vcpus=%u-%u names a vCPU beyond vcpus=%u",
				    label, c->noisy_lo, c->noisy_hi, c->vcpus);
	}
	if (!c->pcpus || c->mode == EMU_NOISY)
		c->pcpus = c->vcpus; /* noisy: every vCPU shares its own pCPU with the neighbour */
	return 0;
}
