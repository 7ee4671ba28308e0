/* SPDX-License-Identifier: MIT */
/*
 * Source selection: API option and PVRT_HINTS, auto fallback, bad values and their messages, the
 * none source's well-defined answers, emulator spec errors, the default handle, random mode.
 */
#define _GNU_SOURCE
#include "check.h"
#include "pvrt_os.h"

#include <pvrt/pvhint.h>

#include <errno.h>
#include <string.h>
#include <unistd.h>

static pvhint_t *open_src(const char *src, const char *emu, int *err)
{
	pvhint_t *h = NULL;
	*err = pvhint_open(
	    &(struct pvhint_options){.source = src, .emu = emu, .kvm_path = "/nonexistent/pvhint"},
	    &h);
	return h;
}

static void check_bad_spec(const char *spec, const char *needle)
{
	int err;
	pvhint_t *h = open_src("emu", spec, &err);
	CHECK(h == NULL);
	CHECK_EQ(err, -EINVAL);
	if (!strstr(pvhint_errmsg(), needle)) {
		fprintf(stderr, "spec '%s': message '%s' lacks '%s'\n", spec, pvhint_errmsg(),
			needle);
		exit(1);
	}
}

int main(void)
{
	int err;
	pvhint_t *h;

	/* none: one zero record per possible CPU; every query false and in range */
	h = open_src("none", NULL, &err);
	CHECK(h && !err);
	CHECK(!strcmp(pvhint_source_name(h), "none"));
	CHECK_EQ(pvhint_nr_vcpus(h), sysconf(_SC_NPROCESSORS_CONF));
	CHECK_EQ(pvhint_header(h)->valid, 0);
	for (unsigned v = 0; v < pvhint_nr_vcpus(h) + 2; v++) {
		CHECK(!pvhint_vcpu_preempted(h, v));
		CHECK(!pvhint_pcpu_idle(h, v));
		CHECK_EQ(pvhint_steal(h, v), 0);
	}
	CHECK((unsigned)pvhint_self_vcpu() < pvhint_nr_vcpus(h));
	CHECK_EQ(pvhint_emu_attach(h, 0), -ENOTSUP);
	CHECK(strstr(pvhint_errmsg(), "not emu"));
	CHECK_EQ(pvhint_emu_deschedule(h, 0, 0), -ENOTSUP);
	pvhint_thread_park(h); /* no-ops for none */
	pvhint_thread_unpark(h);
	pvhint_close(h);

	/* auto without a kernel page: bpf where it loads, else none, with the reason in the note */
	h = open_src("auto", NULL, &err);
	CHECK(h && !err);
	CHECK(!strcmp(pvhint_source_name(h), test_auto_fallback()));
	CHECK(strstr(pvhint_note(h), "/nonexistent/pvhint"));
	pvhint_close(h);

	/* kvm explicitly, absent: an error, not a fallback */
	h = open_src("kvm", NULL, &err);
	CHECK(!h && err == -ENOENT);
	CHECK(strstr(pvhint_errmsg(), "/nonexistent/pvhint"));

	/* bad source by API and by environment: -EINVAL listing accepted values */
	h = open_src("bogus", NULL, &err);
	CHECK(!h && err == -EINVAL);
	CHECK(strstr(pvhint_errmsg(), "auto, kvm, bpf, emu, none"));
	CHECK(strstr(pvhint_errmsg(), "bogus"));
	setenv("PVRT_HINTS", "kvmm", 1);
	err = pvhint_open(NULL, &h);
	CHECK_EQ(err, -EINVAL);
	CHECK(strstr(pvhint_errmsg(), "PVRT_HINTS='kvmm'"));
	CHECK(strstr(pvhint_errmsg(), "auto, kvm, bpf, emu, none"));

	/* environment: PVRT_HINTS + PVRT_EMU + PVRT_HINT_DEV */
	setenv("PVRT_HINTS", "none", 1);
	CHECK(!pvhint_open(NULL, &h) && !strcmp(pvhint_source_name(h), "none"));
	pvhint_close(h);
	setenv("PVRT_HINTS", "emu", 1);
	setenv("PVRT_EMU", "vcpus=3,pcpus=1,mode=script", 1);
	CHECK(!pvhint_open(NULL, &h));
	CHECK(!strcmp(pvhint_source_name(h), "emu"));
	CHECK_EQ(pvhint_nr_vcpus(h), 3);
	CHECK(!strcmp(pvhint_emu_mode(h), "script"));
	CHECK_EQ(pvhint_header(h)->valid,
		 PVHINT_VALID_STEAL | PVHINT_VALID_PREEMPTED | PVHINT_VALID_IS_IDLE);
	pvhint_close(h);
	setenv("PVRT_EMU", "vcpus=3,frobs=2", 1);
	CHECK_EQ(pvhint_open(NULL, &h), -EINVAL);
	CHECK(strstr(pvhint_errmsg(), "PVRT_EMU: unknown key 'frobs'"));
	setenv("PVRT_HINTS", "auto", 1);
	setenv("PVRT_HINT_DEV", "/nonexistent/dev", 1);
	CHECK(!pvhint_open(NULL, &h) && !strcmp(pvhint_source_name(h), test_auto_fallback()));
	CHECK(strstr(pvhint_note(h), "/nonexistent/dev"));
	pvhint_close(h);

	/* emulator spec errors name the field */
	check_bad_spec("vcpus=0", "'vcpus'");
	check_bad_spec("vcpus=x", "'vcpus'");
	check_bad_spec("pcpus=-1", "'pcpus'");
	check_bad_spec("mode=fast", "'mode'");
	check_bad_spec("quantum=3 parsecs", "'quantum'");
	check_bad_spec("quantum=1us", "'quantum'");
	check_bad_spec("duty=1.5", "'duty'");
	check_bad_spec("period=abc", "'period'");
	check_bad_spec("signal=rtmin+99", "'signal'");
	check_bad_spec("mode=noisy,noisy_vcpus=2-1", "'noisy_vcpus'");
	check_bad_spec("mode=noisy,noisy_vcpus=a", "'noisy_vcpus'");
	check_bad_spec("mode=noisy,noisy_vcpus=-1", "'noisy_vcpus'");
	check_bad_spec("vcpus=2,mode=noisy,noisy_vcpus=1-2", "beyond vcpus=2");
	/* issue 9: nan and inf durations (undefined conversions), negative seeds (wrapped),
	 * more pCPUs than vCPUs, and a noisy neighbour that never lets a vCPU run. */
	check_bad_spec("quantum=nan", "'quantum'");
	check_bad_spec("ksleep=nan", "'ksleep'");
	check_bad_spec("period=NaNms", "'period'");
	check_bad_spec("ack_timeout=inf", "'ack_timeout'");
	check_bad_spec("quantum=infinity", "'quantum'");
	check_bad_spec("seed=-1", "'seed'");
	check_bad_spec("seed= -5", "'seed'");
	check_bad_spec("vcpus=2,pcpus=3", "pcpus=3 exceeds vcpus=2");
	check_bad_spec("mode=noisy,duty=1", "never lets a vCPU run");
	check_bad_spec("duty=1,mode=noisy", "never lets a vCPU run");
	check_bad_spec("vcpus", "not key=value");
	check_bad_spec("vcpus=2,colour=blue", "unknown key 'colour'");

	/* the default handle: opened once from the environment, thread-safe */
	setenv("PVRT_HINTS", "none", 1);
	pvhint_t *d1, *d2;
	CHECK(!pvhint_default(&d1) && !pvhint_default(&d2) && d1 == d2);
	CHECK(!strcmp(pvhint_source_name(d1), "none"));

	/* random mode: flags move, no thread is stopped, steal grows */
	h = open_src("emu", "vcpus=4,mode=random,period=100us,duty=0.5,seed=7", &err);
	CHECK(h && !err);
	CHECK(!pvhint_emu_attach(h, 2));
	CHECK_EQ(pvhint_self_vcpu(), 2);
	unsigned seen_pre = 0, seen_run = 0, seen_idle = 0, seen_busy = 0;
	uint64_t t_end = os_now_ns() + 300000000;
	while (os_now_ns() < t_end && !(seen_pre && seen_run && seen_idle && seen_busy)) {
		for (unsigned v = 0; v < 4; v++) {
			/* this thread keeps running although its vCPU may read as preempted */
			if (pvhint_vcpu_preempted(h, v))
				seen_pre++;
			else
				seen_run++;
			if (pvhint_pcpu_idle(h, v))
				seen_idle++;
			else
				seen_busy++;
		}
	}
	CHECK(seen_pre && seen_run && seen_idle && seen_busy);
	struct pvhint_emu_stats st;
	CHECK(!pvhint_emu_stats(h, 2, &st));
	CHECK_EQ(st.stops, 0);
	CHECK_EQ(st.threads, 1);
	uint64_t steal = 0;
	for (unsigned v = 0; v < 4; v++)
		steal += pvhint_steal(h, v);
	CHECK(steal > 0);
	CHECK_EQ(pvhint_emu_deschedule(h, 0, 0), -EINVAL); /* scripted calls need mode=script */
	CHECK(strstr(pvhint_errmsg(), "not script"));
	CHECK(!pvhint_emu_detach(h));
	CHECK_EQ(pvhint_tls_vcpu, -1);
	pvhint_close(h);

	printf("select ok\n");
	return 0;
}
