/* SPDX-License-Identifier: MIT */
/*
 * With thread slots (bpf hints) a worker's record is the slot of the kernel thread that runs it.
 * After a hand-off (sysmon.c) that is the spare's, not the slot of the thread that blocked: else
 * the hints policy, sysmon and the lock owner records of the worker's ULTs read a thread asleep
 * in the kernel. One worker: ULT A blocks in a pipe read, sysmon hands the worker to a spare,
 * ULT B runs there and compares the worker's record with its own thread's slot.
 * Run with PVRT_HINTS=bpf (ctest skips it where the source is unusable).
 */
#define _GNU_SOURCE
#include "check.h"
#include "internal.h"
#include "wait.h"

#include <pvrt/thread.h>

#include <sys/syscall.h>
#include <unistd.h>

static int fds[2];
static int main_slot, main_tid;

static void *reader(void *arg)
{
	(void)arg;
	char c;
	CHECK_EQ(read(fds[0], &c, 1), 1); /* not announced: sysmon finds it blocked */
	return NULL;
}

static void *checker(void *arg)
{
	(void)arg;
	/* Runs only once the reader's thread lost the worker. */
	CHECK((int)syscall(SYS_gettid) != main_tid);
	int own = pvhint_self_vcpu();
	CHECK(own > 0);
	CHECK(own != main_slot);
	CHECK_EQ(rt_worker_vcpu(), own);
	CHECK_EQ(write(fds[1], "x", 1), 1);
	return NULL;
}

int main(void)
{
	struct pvrt_config c;
	pvrt_config_init(&c);
	c.workers = 1;
	CHECK_EQ(pvrt_init(&c), 0);
	if (!rt_state.slots) {
		printf("runtime.handoff_slot: the hint source has no thread slots: skipped\n");
		CHECK_EQ(pvrt_finalize(), 0);
		return 77;
	}
	main_tid = (int)syscall(SYS_gettid);
	main_slot = rt_worker_vcpu();
	CHECK(main_slot > 0);
	CHECK_EQ(pipe(fds), 0);
	pvrt_thread_t a, b;
	CHECK_EQ(pvrt_thread_create(&a, NULL, reader, NULL), 0);
	CHECK_EQ(pvrt_thread_create(&b, NULL, checker, NULL), 0);
	CHECK_EQ(pvrt_thread_join(a, NULL), 0);
	CHECK_EQ(pvrt_thread_join(b, NULL), 0);
	struct pvrt_stats st;
	CHECK_EQ(pvrt_stats_get(&st), 0);
	CHECK(st.handoffs >= 1);
	CHECK_EQ(pvrt_finalize(), 0);
	puts("runtime.handoff_slot: the worker's record followed it to the spare");
	return 0;
}
