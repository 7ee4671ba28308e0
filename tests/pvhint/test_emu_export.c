/* SPDX-License-Identifier: MIT */
/*
 * export=PATH: the emulator also publishes its page in a file, which another handle (here the
 * kvm source, as another process would) reads: it sees the emulated flags change; the file is
 * removed at close; a bad path is an error naming the key.
 */
#define _GNU_SOURCE
#include "check.h"

#include <pvrt/pvhint.h>

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

static pvhint_t *emu;
static int stop;

static void *spin(void *arg)
{
	(void)arg;
	CHECK(!pvhint_emu_attach(emu, 1));
	while (!__atomic_load_n(&stop, __ATOMIC_ACQUIRE)) {
#ifdef PVRT_TSAN
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts); /* TSan delivers signals here */
#endif
	}
	CHECK(!pvhint_emu_detach(emu));
	return NULL;
}

int main(void)
{
	char path[64], spec[128];
	snprintf(path, sizeof(path), "/tmp/pvhint-export-%d", (int)getpid());
	snprintf(spec, sizeof(spec), "vcpus=3,pcpus=1,mode=script,export=%s", path);
	CHECK(!pvhint_open(&(struct pvhint_options){.source = "emu", .emu = spec}, &emu));
	CHECK(access(path, R_OK) == 0);

	pvhint_t *rd;
	CHECK(!pvhint_open(&(struct pvhint_options){.source = "kvm", .kvm_path = path}, &rd));
	CHECK(!strcmp(pvhint_source_name(rd), "emu")); /* the page says who produced it */
	CHECK_EQ(pvhint_nr_vcpus(rd), 3);
	CHECK_EQ(pvhint_header(rd)->valid,
		 PVHINT_VALID_STEAL | PVHINT_VALID_PREEMPTED | PVHINT_VALID_IS_IDLE);

	pthread_t th;
	CHECK(!pthread_create(&th, NULL, spin, NULL));
	while (pvhint_pcpu_idle(rd, 1)) /* vCPU 1 runs on pCPU 0: not idle once attached */
		test_sleep_us(100);
	CHECK(!pvhint_vcpu_preempted(rd, 1));
	CHECK(!pvhint_emu_deschedule(emu, 1, 0));
	CHECK(pvhint_vcpu_preempted(rd, 1));
	CHECK(pvhint_pcpu_idle(rd, 0)); /* nothing runs on pCPU 0 now */
	test_sleep_us(5000);
	CHECK(!pvhint_emu_resume(emu, 1));
	CHECK(!pvhint_vcpu_preempted(rd, 1));
	CHECK(pvhint_steal(rd, 1) >= 5000000);
	__atomic_store_n(&stop, 1, __ATOMIC_RELEASE);
	CHECK(!pthread_join(th, NULL));
	pvhint_close(rd);
	pvhint_close(emu);
	CHECK(access(path, F_OK) != 0 && errno == ENOENT);

	CHECK_EQ(
	    pvhint_open(&(struct pvhint_options){.source = "emu", .emu = "export=relative"}, &emu),
	    -EINVAL);
	CHECK(strstr(pvhint_errmsg(), "'export'"));
	CHECK_EQ(pvhint_open(
		     &(struct pvhint_options){.source = "emu", .emu = "export=/nonexistent/dir/x"},
		     &emu),
		 -ENOENT);
	CHECK(strstr(pvhint_errmsg(), "export"));
	printf("emu export ok\n");
	return 0;
}
