/* SPDX-License-Identifier: MIT */
/*
 * pvhint_default(): opened once, lazily, from the environment, by whichever of many threads
 * asks first; all get the same handle. Run twice by ctest: with PVRT_HINTS=emu (a valid
 * environment) and with PVRT_HINTS=bogus, where every caller gets -EINVAL with the message and
 * still a usable handle of source none.
 */
#define _GNU_SOURCE
#include "check.h"

#include <pvrt/pvhint.h>

#include <errno.h>
#include <pthread.h>
#include <string.h>

#define N 8
static pvhint_t *got[N];
static int err[N];
static pthread_barrier_t bar;

static void *asker(void *arg)
{
	int i = (int)(intptr_t)arg;
	pthread_barrier_wait(&bar);
	err[i] = pvhint_default(&got[i]);
	if (err[i])
		CHECK(strstr(pvhint_errmsg(), "accepted: auto, kvm, bpf, emu, none"));
	return NULL;
}

int main(void)
{
	const char *env = getenv("PVRT_HINTS");
	bool bad = env && !strcmp(env, "bogus");
	pthread_t th[N];
	pthread_barrier_init(&bar, NULL, N);
	for (int i = 0; i < N; i++)
		CHECK(!pthread_create(&th[i], NULL, asker, (void *)(intptr_t)i));
	for (int i = 0; i < N; i++)
		CHECK(!pthread_join(th[i], NULL));
	for (int i = 0; i < N; i++) {
		CHECK(got[i] && got[i] == got[0]);
		CHECK_EQ(err[i], bad ? -EINVAL : 0);
	}
	CHECK(!strcmp(pvhint_source_name(got[0]), bad ? "none" : env));
	CHECK(!pvhint_vcpu_preempted(got[0], 0));
	printf("default handle ok (%s)\n", pvhint_source_name(got[0]));
	return 0;
}
