/*
 * Promela model of pvrt_cond (locks/cond.c): the waiter queue, signal, the
 * broadcast chain, timeouts, cancellation and destroy's reference count.
 *
 * Checked (locks/model/check.sh, a ctest):
 *  - no lost wake-up: waiters wait under the mutex for a token that the
 *    signaller adds under the mutex before each signal or broadcast; a waiter
 *    without a timeout that never gets its token stays blocked, and Spin
 *    reports the blocked state as an invalid end state. So does a destroy
 *    left waiting for a reference that is never dropped.
 *  - what a wake-up means (assertions): a wait returns 0 only if a signal or
 *    a broadcast took its node; a signal makes at most one wait return 0;
 *    a wait whose node a signal or broadcast took never returns ETIMEDOUT
 *    (it would have consumed the wake-up), so every waiter a broadcast finds
 *    queued returns 0 (and, by the end-state check, does return); a node is
 *    only ever signalled while it is alive and expects it (CHAINED), so a
 *    SIGNALED store never lands on a node whose waiter has left; no waiter
 *    touches the condvar after destroy has returned 0.
 *
 * Model: three waiters, the signaller and the mutex. Waiter 0 waits without
 * a limit; waiter 1 uses a timed wait (its wait may time out at any moment,
 * and it gives up without looking at the predicate: a timed-out wait that
 * had consumed a signal would leave a token no one is woken for); waiter 2
 * uses the cancellable wait of the preload (a cancel may act at any moment of
 * its futex call, after which the cleanup handler withdraws, relocks the
 * mutex, and the thread exits). The signaller runs three rounds of: lock,
 * add a token, then signal or broadcast (each choice explored) with the
 * mutex held or after unlocking it; then it destroys the condvar, holding
 * the mutex or not (destroy right after a broadcast under the mutex is what
 * the early pass-on of the chain is for). The mutex is an atomic lock: its
 * own protocol is mutex.pml's business.
 *
 * Granularity. Each section under the condvar's internal lock is one atomic
 * step; the lock-free accesses are separate steps: the signal/broadcast peek
 * at 'head' (the queue length here), a waiter's reads of its node's state,
 * the SIGNALED store and the futex wake that follows it, the refs
 * decrement and its wake, destroy's reads and CAS of refs. A lock section
 * writes each node's state at most once and the only unlocked reader of a
 * node's state is its waiter, so making the section atomic hides no
 * interleaving. Everything is sequentially consistent: cond.c's relaxed
 * accesses are ordered by the internal lock or the mutex, and its acquire /
 * release pairs by the node state and refs (see the comments there).
 *
 * Futexes: park(addr, val) atomically compares and blocks (pk[]); wake(addr,
 * n) clears the parked flag. Only a node's waiter parks on the node's state
 * and only destroy on refs, so "wake one" and "wake all" are the same here.
 * Spurious wake-ups come from wakes that arrive after a waiter has left its
 * node and started a new wait (node index = waiter, as a stack node reuses
 * its address); nothing else makes a futex return without cause, since an
 * unbounded spurious return would hide a lost wake-up from the end-state
 * check.
 *
 * Seeded faults it catches (checked by hand, each on a scratch copy): see
 * the list at the end of this comment.
 */
#define NW	   3
#define NONE	   255
#define WAITING	   0
#define CHAINED	   1
#define SIGNALED   2
#define DESTROYING 128
#define OK	   0
#define TIMEDOUT   1
#define CANCELED   2
#define BY_SIG	   1
#define BY_BC	   2

byte mtx = 0;     /* the mutex: 0 or holder's pid + 1 */
byte tok = 0;     /* the predicate: tokens added by the signaller */
byte q[NW] = NONE; /* the FIFO of queued nodes, head at q[0]; NONE past ql */
byte ql = 0;
byte st[NW];      /* node state, node i belongs to waiter i */
byte chain[NW];   /* broadcast: the node to signal after this one */
bool pk[NW];      /* waiter i is parked on st[i] */
byte refs = 0;    /* waiters that may touch the condvar, | DESTROYING */
bool pkr = 0;     /* destroy is parked on refs */
bool destroyed = 0;
/* ghosts, for the assertions */
byte taker[NW];   /* what took node i out of WAITING: 0, BY_SIG, BY_BC */
byte nsig = 0;    /* signals that took a node */
byte sigret = 0;  /* waits that returned 0 after a signal took their node */

inline lock()
{
	atomic { mtx == 0 -> mtx = _pid + 1 }
}

inline unlock()
{
	assert(mtx == _pid + 1);
	mtx = 0
}

/* Remove q[k], keeping the order (unqueue, signal). */
inline qremove(k)
{
	i = k;
	do
	:: i + 1 < ql -> q[i] = q[i + 1]; i++
	:: else -> break
	od;
	ql--;
	q[ql] = NONE;
	i = 0
}

/* signal_node: the release store, then the wake. The node must still wait for
 * exactly this store: after it, its waiter may return and reuse the address. */
inline signal_node(x)
{
	atomic {
		assert(st[x] == CHAINED);
		st[x] = SIGNALED
	}
	atomic { pk[x] = 0; x = NONE }
}

/* pvrt_cond_signal. The unlocked peek at 'head' is part of the lock section: a
 * peek that sees an empty queue is the same as a lock section that finds it
 * empty at that moment, and one that sees a waiter is followed by the section. */
inline cond_signal()
{
	atomic {
		assert(!destroyed);
		if
		:: ql > 0 ->
			n = q[0];
			qremove(0);
			chain[n] = NONE;
			st[n] = CHAINED;
			taker[n] = BY_SIG;
			nsig++
		:: else -> n = NONE
		fi
	}
	if
	:: n != NONE -> signal_node(n)
	:: else -> skip
	fi
}

/* pvrt_cond_broadcast: detach the queue, link it through chain, signal the first. */
inline cond_broadcast()
{
	atomic {
		assert(!destroyed);
		n = q[0];
		i = 0;
		do
		:: i < ql ->
			chain[q[i]] = (i + 1 < NW -> q[i + 1] : NONE);
			st[q[i]] = CHAINED;
			taker[q[i]] = BY_BC;
			i++
		:: else -> break
		od;
		do
		:: ql > 0 -> ql--; q[ql] = NONE
		:: else -> break
		od;
		i = 0
	}
	if
	:: n != NONE -> signal_node(n)
	:: else -> skip
	fi
}

/* put_ref: the decrement, then (if destroy waits for the last one) the wake. The wake
 * uses only the address, so it may follow destroy's return (as a futex wake may). */
inline put_ref()
{
	atomic {
		assert(!destroyed);
		pr = refs;
		refs--
	}
	atomic {
		if
		:: pr == (DESTROYING | 1) -> pkr = 0
		:: else -> skip
		fi;
		pr = 0
	}
}

/* pvrt_cond_destroy */
inline cond_destroy()
{
	atomic { busy = (ql > 0) }
	if
	:: busy -> skip   /* -EBUSY */
	:: else ->
		do
		:: dr = refs;
			if
			:: (dr & ~DESTROYING) == 0 -> destroyed = 1; break
			:: else -> skip
			fi;
			if
			:: (dr & DESTROYING) == 0 ->
				atomic {
					if
					:: refs == dr -> refs = dr | DESTROYING; cas = 1
					:: else -> cas = 0
					fi
				}
			:: else -> cas = 1
			fi;
			if
			:: cas ->
				atomic {
					if
					:: refs == (dr | DESTROYING) -> pkr = 1
					:: else -> skip
					fi
				}
				!pkr
			:: else -> skip
			fi
		od;
		dr = 0;
		cas = 0
	fi;
	busy = 0
}

/* Remove this waiter's node from the queue (it is there: state WAITING). */
inline unqueue_me()
{
	k = 0;
	do
	:: q[k] == me -> break
	:: else -> k++
	od;
	qremove(k);
	k = 0
}

/* lk_cond_wait, from the queueing to the relock; r: OK, TIMEDOUT or CANCELED. */
inline cond_wait()
{
	atomic {
		assert(!destroyed);
		st[me] = WAITING;   /* a new node: state and chain zero-initialised */
		chain[me] = NONE;
		taker[me] = 0;
		q[ql] = me;
		ql++;
		refs++;
		timed = (me == 1);
		r = NONE
	}
	unlock();
	/* wait_signal */
ws:
	s = st[me];
	if
	:: s == SIGNALED -> s = 0; r = OK; goto woken
	:: else -> skip
	fi;
	/* lk_park / kwait(st[me], s): blocks only while the state is still s */
	atomic {
		if
		:: st[me] == s -> pk[me] = 1
		:: else -> skip   /* -EAGAIN */
		fi;
		s = 0
	}
	/* The futex's return and the lock section that follows a timeout or cancel
	 * are one step: in between only the waiter's own state and pk[me] (which
	 * a wake can only clear) differ. */
	if
	:: !pk[me] -> skip   /* woken, or not parked */
	:: timed ->
		/* ETIMEDOUT, then unqueue: still queued, so no signal took us: leave */
		atomic {
			pk[me] = 0;
			assert(!destroyed);
			if
			:: st[me] == WAITING ->
				unqueue_me();
				r = TIMEDOUT;
				goto left
			:: else -> timed = 0   /* being woken: wait for it without a limit */
			fi
		}
	:: me == 2 ->
		/* asynchronous cancel: anywhere inside kwait's futex call, before
		 * (pending), during, or after it returned (woken or not); the
		 * cleanup handler withdraws: leave the queue if still there */
		atomic {
			pk[me] = 0;
			assert(!destroyed);
			if
			:: st[me] == WAITING -> unqueue_me(); goto gone
			:: else -> skip
			fi
		}
		goto withdraw
	fi;
	goto ws;

withdraw:
	/* taken by a signal or broadcast: wait for the SIGNALED store (park_chained) */
	do
	:: st[me] == SIGNALED -> break
	:: else ->
		atomic {
			if
			:: st[me] == CHAINED -> pk[me] = 1
			:: else -> skip
			fi
		}
		!pk[me]
	od;
	/* pass the consumed wake-up on: the rest of the chain, and one more signal */
	if
	:: chain[me] != NONE -> n = chain[me]; signal_node(n)
	:: else -> skip
	fi;
	cond_signal();
gone:
	put_ref();
	r = CANCELED;
	lock();
	goto ret;

woken:
	/* broadcast: wake the next chained waiter before dropping the reference
	 * and before relocking the mutex */
	if
	:: chain[me] != NONE -> n = chain[me]; signal_node(n)
	:: else -> skip
	fi;
left:
	put_ref();
	lock();
ret:
	if
	:: r == OK ->
		assert(taker[me] != 0);   /* no wake-up without a signal or broadcast */
		if
		:: taker[me] == BY_SIG -> sigret++; assert(sigret <= nsig)
		:: else -> skip
		fi
	:: r == TIMEDOUT -> assert(taker[me] == 0)   /* did not consume a wake-up */
	:: r == CANCELED -> skip
	fi
}

active [NW] proctype Waiter()
{
	byte me, s, r, i, k, n, pr;
	bool timed;

	me = _pid;
	lock();
	do
	:: tok > 0 -> tok--; break
	:: else ->
		cond_wait();
		if
		:: r == TIMEDOUT || r == CANCELED -> break   /* gives up (holds the mutex) */
		:: else -> skip
		fi
	od;
	unlock()
}

active proctype Signaller()
{
	byte round, n, i, pr, dr;
	bool held, busy, cas;

	round = 0;
	do
	:: round < NW ->
		lock();
		tok++;
		if
		:: unlock(); held = 0
		:: held = 1
		fi;
		if
		:: cond_signal()
		:: cond_broadcast()
		fi;
		if
		:: held -> unlock(); held = 0
		:: else -> skip
		fi;
		round++
	:: else -> break
	od;
	/* no thread waits any more (every waiter will find a token): destroy is allowed */
	if
	:: lock(); cond_destroy(); unlock()
	:: cond_destroy()
	fi
}
