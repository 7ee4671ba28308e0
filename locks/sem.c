/* SPDX-License-Identifier: MIT */
/*
 * pvrt_sem: waiters count themselves in 'nwait' and park on 'value' == 0;
 * post increments 'value' and wakes one if 'nwait' says someone may sleep.
 * Waiter (nwait++, then read value) and poster (value++, then read nwait) are
 * sequentially consistent, so one always sees the other.
 */
#define _GNU_SOURCE
#include <pvrt/sem.h>

#include "lk.h"
#include "lk_wait.h"

#include <errno.h>

#define C PVRT_LOCK_SEM

int pvrt_sem_init(pvrt_sem_t *ps, unsigned value)
{
	lk_sem_t *s = lk_sem_of(ps);
	if (value > PVRT_SEM_VALUE_MAX)
		return -EINVAL;
	*s = (lk_sem_t){.value = value};
	return 0;
}

int pvrt_sem_destroy(pvrt_sem_t *s)
{
	(void)s;
	return 0;
}

int pvrt_sem_post(pvrt_sem_t *ps)
{
	lk_sem_t *s = lk_sem_of(ps);
	uint32_t v = __atomic_load_n(&s->value, __ATOMIC_RELAXED);
	do {
		if (v >= PVRT_SEM_VALUE_MAX)
			return -EOVERFLOW;
		/* Seq_cst: release of the poster's writes, and ordered before the nwait load. */
	} while (!__atomic_compare_exchange_n(&s->value, &v, v + 1, false, __ATOMIC_SEQ_CST,
					      __ATOMIC_RELAXED));
	if (__atomic_load_n(&s->nwait, __ATOMIC_SEQ_CST))
		lk_wake_one(&s->value);
	return 0;
}

static int sem_trywait(lk_sem_t *s)
{
	uint32_t v = __atomic_load_n(&s->value, __ATOMIC_RELAXED);
	while (v > 0) {
		/* Acquire: the poster's writes happen-before our return. */
		if (__atomic_compare_exchange_n(&s->value, &v, v - 1, false, __ATOMIC_ACQUIRE,
						__ATOMIC_RELAXED)) {
			lk_stat(C, LK_ACQ);
			return 0;
		}
	}
	return -EAGAIN;
}

int pvrt_sem_trywait(pvrt_sem_t *s)
{
	return sem_trywait(lk_sem_of(s));
}

int lk_sem_wait(lk_sem_t *s, clockid_t clk, const struct timespec *abs, bool cancellable)
{
	if (sem_trywait(s) == 0)
		return 0;
	lk_stat(C, LK_CONTENDED);
	struct lk_spin sp;
	lk_spin_init(&sp, LK_SPIN_BLIND_NS);
	while (lk_spin_more(&sp))
		if (sem_trywait(s) == 0)
			return 0;
	if (abs && !os_timespec_valid(abs))
		return -EINVAL;
	for (;;) {
		if (sem_trywait(s) == 0)
			return 0;
		if (abs && abs->tv_sec < 0)
			return -ETIMEDOUT;
		__atomic_fetch_add(&s->nwait, 1, __ATOMIC_SEQ_CST);
		int r = 0;
		if (__atomic_load_n(&s->value, __ATOMIC_SEQ_CST) == 0)
			r = lk_park_as(&s->value, 0, abs ? clk : CLOCK_MONOTONIC, abs, C,
				       cancellable);
		__atomic_fetch_sub(&s->nwait, 1, __ATOMIC_SEQ_CST);
		if (r == -ECANCELED)
			return r; /* took nothing: no post to pass on */
		if (r == -ETIMEDOUT || r == -EINVAL)
			return sem_trywait(s) == 0 ? 0 : r;
	}
}

int pvrt_sem_wait(pvrt_sem_t *ps)
{
	lk_sem_t *s = lk_sem_of(ps);
	return lk_sem_wait(s, CLOCK_MONOTONIC, NULL, false);
}

int pvrt_sem_timedwait(pvrt_sem_t *ps, clockid_t clk, const struct timespec *abstime)
{
	lk_sem_t *s = lk_sem_of(ps);
	if (!lk_valid_clock(clk) || !abstime)
		return -EINVAL;
	return lk_sem_wait(s, clk, abstime, false);
}

int pvrt_sem_getvalue(pvrt_sem_t *ps, int *out)
{
	lk_sem_t *s = lk_sem_of(ps);
	*out = (int)__atomic_load_n(&s->value, __ATOMIC_RELAXED);
	return 0;
}
