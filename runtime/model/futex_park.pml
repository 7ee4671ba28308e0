/*
 * Promela model of a ULT's rt_futex wait (runtime/futex.c): the waiter queues itself as
 * ULT_PARKING under the bucket lock, drops the lock, and only then switches away; the switch's
 * post action moves PARKING to BLOCKED. A waker, and the wait's timer, dequeue it under the lock
 * and move PARKING to WOKEN (the post action then readies it) or ready a BLOCKED one themselves.
 *
 * Checked (locks/model/check.sh, a ctest): a ULT is made ready only once its context is saved
 * (never while it still runs on its stack) and exactly once per wait (assertions); every wait
 * ends, since the waker changes the word (a waiter left blocked is an invalid end state).
 *
 * Model: one waiter waiting ITER times for the word to leave its value, one waker changing the
 * word and waking each round, and a timer that may fire at any moment of each wait. Each C atomic
 * operation (the state compare-and-swaps) is one atomic step; the bucket lock is a blocking
 * guard. Seeded faults it catches (checked by hand): the post action storing BLOCKED without the
 * compare-and-swap (the waiter is never readied: invalid end state); a waker readying without
 * looking at PARKING (readied while on its stack: assertion); the waiter dropping the lock
 * before it has queued itself (a lost wake-up: invalid end state).
 */
#define ITER 2

mtype = { RUNNING, PARKING, BLOCKED, WOKEN, READY };
mtype state = RUNNING;
bool lk;
bool queued;
bool saved;	  /* the waiter's context is saved: it runs on no stack */
byte readies;	  /* readies of the current wait */
byte word;	  /* the futex word; the waiter waits while it equals its 'expected' */
byte round;	  /* waits completed */

inline lock() { atomic { !lk -> lk = 1 } }
inline unlock() { lk = 0 }

/* rt_ult_ready: the ULT goes to a run queue; a worker may resume it at once. */
inline ready()
{
	assert(saved);
	assert(state != READY);
	state = READY;
	readies++
}

/* futex.c ready_waiter */
inline ready_waiter()
{
	atomic {
		if
		:: state == PARKING -> state = WOKEN
		:: else -> ready()
		fi
	}
}

/* The waker's (or the timer's) part of a wake: dequeue under the lock, then ready. */
inline wake()
{
	lock();
	if
	:: queued -> queued = 0; unlock(); ready_waiter()
	:: else -> unlock()
	fi
}

active proctype Waiter()
{
	byte expected;
	do
	:: round < ITER ->
		expected = round; /* the word's value before this round's change */
		lock();
		if
		:: word != expected -> unlock() /* -EAGAIN: the caller re-checks */
		:: else ->
			queued = 1;
			state = PARKING;
			unlock();
			saved = 1; /* the switch away */
			/* post_parked, in the next context */
			atomic {
				if
				:: state == PARKING -> state = BLOCKED
				:: else -> assert(state == WOKEN); ready()
				fi
			}
			/* resumed by a worker */
			atomic { state == READY -> state = RUNNING; saved = 0 }
			assert(!queued && readies == 1);
			readies = 0
		fi;
		/* a timed-out wait leaves the word unchanged: wait again (as the callers do) */
		if
		:: word != expected -> round++
		:: else -> skip
		fi
	:: round == ITER -> break
	od
}

active proctype Waker()
{
	byte r = 0;
	do
	:: r < ITER ->
		(round >= r); /* a round's change once the waiter has seen the last one */
		word++; wake(); r++
	:: r == ITER -> break
	od
}

active proctype Timer()
{
	do
	:: round < ITER -> wake()
	:: round == ITER -> break
	:: skip -> break
	od
}
