/* SPDX-License-Identifier: MIT */
/*
 * A program linked with libpvrt-preload.so (as a system-wide preload would put it into a
 * setuid program) and libpvrt: it takes a pthread mutex (the preload's), runs one ULT (the
 * runtime reads PVRT_WORKERS and friends) and says which hint source the locks use and its
 * effective uid. tests/locks/hostile.sh runs it setuid root as an unprivileged user with a
 * hostile environment.
 */
#define _GNU_SOURCE
#include <pvrt/lockstat.h>
#include <pvrt/pvhint.h>
#include <pvrt/runtime.h>
#include <pvrt/thread.h>

#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static void *ult(void *arg)
{
	(void)arg;
	return NULL;
}

int main(void)
{
	static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
	pthread_mutex_lock(&m);
	pthread_mutex_unlock(&m);
	pvhint_t *h = NULL;
	int err = pvhint_default(&h);
	int rt = pvrt_init(NULL);
	if (!rt) {
		pvrt_thread_t t;
		if (!pvrt_thread_create(&t, NULL, ult, NULL))
			pvrt_thread_join(t, NULL);
		pvrt_finalize();
	}
	printf("euid=%d source=%s hints_err=%d runtime=%d\n", (int)geteuid(),
	       h ? pvhint_source_name(h) : "?", err, rt);
	return 0;
}
