/*
 * Promela model of pvrt_cond (locks/cond.c): the waiter queue, signal, the
 * broadcast (one wake-up for the thread waiters, the chain for ULT waiters),
 * timeouts, cancellation and destroy's reference count. Each wait queues a
 * node of its own, and the node's state (WAITING, CHAINED, SIGNALED) is a
 * one-shot event that only the queue owner starts and only one signaller
 * completes. Two kinds of node (KERNEL_WAITERS, a bit mask of waiters):
 *  - a thread's (kernel) node sleeps in the kernel futex on the shared word
 *    'kseq': it reads kseq, then its state, and sleeps while kseq is
 *    unchanged. A signal or broadcast stores SIGNALED and bumps kseq in its
 *    lock section (WAITING -> SIGNALED directly) and wakes kseq after it: a
 *    signal the node's bit (which may wake other kernel waiters whose bit is
 *    the same: a spurious wake-up, one per signal at most), a broadcast all;
 *  - a ULT's node parks on its own state (rt_futex); a signal marks it
 *    CHAINED and stores SIGNALED after the section; a broadcast chains the
 *    ULT nodes and signals the first, and each woken ULT waiter signals the
 *    next before it relocks the mutex.
 * cond_kernel.pml checks the same with every waiter a kernel node.
 *
 * Checked (locks/model/check.sh, a ctest):
 *  - no lost wake-up: waiters wait under the mutex for a token that the
 *    signaller adds under the mutex before each signal or broadcast; a waiter
 *    without a timeout that never gets its token stays blocked, and Spin
 *    reports the blocked state as an invalid end state. So does a destroy
 *    left waiting for a reference that is never dropped, and a waiter left
 *    waiting for the mutex.
 *  - what a wake-up means (assertions): a wait returns 0 only if a signal or
 *    a broadcast took its node; a signal makes at most one wait return 0; a
 *    wait whose node a signal or broadcast took never returns ETIMEDOUT (it
 *    would have consumed the wake-up), so every waiter a broadcast finds
 *    queued returns 0 (and, by the end-state check, does return); a node is
 *    only ever signalled while it is alive and expects it (CHAINED), so a
 *    SIGNALED store never lands on a node whose waiter has left; no waiter
 *    touches the condvar after destroy has returned 0.
 *
 * Model: three waiters, the signaller and the mutex. Waiters 0 and 1 are ULTs
 * and waiter 2 a thread (KERNEL_WAITERS 4), so broadcast both chains and
 * wakes in one call. Waiter 0 waits without
 * a limit; waiter 1 uses a timed wait (it may time out at any moment, also
 * when a signal takes it at the same time, and then gives up without looking
 * at the predicate: a timed-out wait that had consumed a signal would leave a
 * token no one is woken for); waiter 2 uses the preload's cancellable wait (a
 * cancel may act anywhere in its futex call: pending before it, while asleep,
 * or after it returned, woken or not; the cleanup handler withdraws, relocks
 * the mutex, and the thread exits). The signaller runs one round per waiter
 * that has not given up: lock, add a token, then signal or broadcast, with
 * the mutex held or after unlocking it (every choice explored); so a signal
 * that a cancelled waiter consumed is the one another waiter needs. Then it
 * destroys the condvar, holding the mutex or not (destroy right after a
 * broadcast under the mutex is why the chain is passed on before relocking).
 * The mutex is an atomic lock: its own protocol is mutex.pml's business.
 * Size: ~1.1e7 states, 10-30 s and 0.6 GB on the 2-core test machine.
 *
 * Granularity. Each section under the condvar's internal lock is one atomic
 * step. A section writes each node's state at most once and the only
 * unlocked reader of a node's state is its waiter, so this hides no
 * interleaving; the unlocked peek at 'head' is folded into the section (a
 * peek that sees an empty queue is a section that finds it empty then).
 * Separate steps: a waiter's read of its node's state, its futex wait, the
 * SIGNALED store and the wake that follows it, the refs decrement and its
 * wake, destroy's reads, CAS and wait. Reductions (Lipton movers): a mutex
 * acquisition moves right and a release left, and the predicate is only
 * touched under the mutex, so "lock, test, queue, unlock" is one step, as is
 * "relock, return, test, queue, unlock" and the signaller's "lock, add a
 * token, lock section". A timeout or cancel and the lock section that follows
 * are one step: in between only the waiter's own variables differ. Memory
 * is sequentially consistent: cond.c's relaxed accesses are ordered by the
 * internal lock or the mutex, its acquire/release pairs by the node state
 * and refs (see the comments there).
 *
 * Futexes: wait(addr, val) atomically compares and blocks (pk[]); a wake
 * clears the flag. Only a node's waiter waits on the node's state and only
 * destroy on refs, so "wake 1" and "wake all" are the same here. A node is
 * indexed by its waiter, as a stack node reuses its address, so a wake that
 * arrives after its waiter left and queued again is a spurious wake-up of the
 * new wait. No other spurious return: an unbounded one would let a blocked
 * waiter run for ever and hide it from the end-state check.
 *
 * Seeded faults it catches (checked by hand, each on a scratch copy, each
 * reported within a second):
 *  - a woken waiter does not pass the broadcast wake-up on (invalid end
 *    state: the rest of the chain sleeps);
 *  - it passes the wake-up on only once it holds the mutex again (wait
 *    morphing): destroy under the mutex right after a broadcast waits for
 *    the chained waiters' references while the first waiter waits for the
 *    mutex (invalid end state);
 *  - a timed-out wait returns ETIMEDOUT without asking under the queue lock
 *    whether a signal took it (assertion: it consumed a wake-up);
 *  - a cancelled waiter that a signal took does not signal again (invalid
 *    end state: the waiter that needed that signal sleeps);
 *  - the last reference does not wake destroy (it tests r == 1, not
 *    DESTROYING | 1: invalid end state);
 *  - a waiter queues without taking a reference (assertion: it touches the
 *    condvar after destroy returned);
 *  - broadcast marks only the first node CHAINED (assertion: a node is
 *    signalled while WAITING; a later chained waiter that timed out would
 *    think itself still queued).
 */
#define NW	   3
#ifndef KERNEL_WAITERS
#define KERNEL_WAITERS 4 /* waiter 2 is a thread, 0 and 1 are ULTs */
#endif
#define KERN(w) (((KERNEL_WAITERS) >> (w)) & 1)
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
#define ALL	   254 /* kw: a broadcast's wake of every kernel waiter */

byte mtx = 0;      /* the mutex: 0 or holder's pid + 1 */
byte tok = 0;      /* the predicate: tokens added by the signaller */
byte q[NW] = NONE; /* the FIFO of queued nodes, head at q[0]; NONE past ql */
byte ql = 0;
byte st[NW];       /* node state, node i belongs to waiter i */
byte chain[NW];    /* broadcast: the node to signal after this one */
bool pk[NW];       /* waiter i is parked: on st[i] (ULT) or on kseq (kernel) */
byte kseq = 0;     /* the kernel nodes' futex word */
byte refs = 0;     /* waiters that may touch the condvar, | DESTROYING */
bool pkr = 0;      /* destroy is parked on refs */
bool destroyed = 0;
/* ghosts, for the assertions */
byte taker[NW];    /* what took node i out of WAITING: 0, BY_SIG, BY_BC */
byte sigcredit = 0; /* nodes taken by signals whose wait has not returned yet */
byte gone = 0;     /* waiters that gave up (timed out or cancelled): they take no token */

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

/* pvrt_cond_signal's lock section. The unlocked peek at 'head' is part of it: a
 * peek that sees an empty queue is the same as a lock section that finds it
 * empty at that moment, and one that sees a waiter is followed by the section. */
inline signal_section()
{
	assert(!destroyed);
	if
	:: ql > 0 ->
		/* pick(): any queued node (the hints choose among the oldest; any
		 * choice is allowed here, which covers theirs) */
		k = 0;
		do
		:: k + 1 < ql -> k++
		:: true -> break
		od;
		n = q[k];
		qremove(k);
		k = 0;
		chain[n] = NONE;
		taker[n] = BY_SIG;
		sigcredit++;
		if
		:: KERN(n) -> st[n] = SIGNALED; kseq++; kw = n; n = NONE
		:: else -> st[n] = CHAINED
		fi
	:: else -> n = NONE
	fi
}

/* pvrt_cond_broadcast's lock section: detach the queue; kernel nodes SIGNALED
 * (one kseq bump), ULT nodes linked through chain in queue order. */
inline broadcast_section()
{
	assert(!destroyed);
	n = NONE;
	k = NONE; /* the last ULT node linked */
	i = 0;
	do
	:: i < ql ->
		taker[q[i]] = BY_BC;
		chain[q[i]] = NONE;
		if
		:: KERN(q[i]) -> st[q[i]] = SIGNALED; kw = ALL
		:: else ->
			st[q[i]] = CHAINED;
			if
			:: k == NONE -> n = q[i]
			:: else -> chain[k] = q[i]
			fi;
			k = q[i]
		fi;
		i++
	:: else -> break
	od;
	if
	:: kw == ALL -> kseq++
	:: else -> skip
	fi;
	k = 0;
	do
	:: ql > 0 -> ql--; q[ql] = NONE
	:: else -> break
	od;
	i = 0
}

/* kwake after a section: FUTEX_WAKE_BITSET on kseq, outside the lock (it uses the
 * address only, so it may follow destroy's return). A signal's bit wakes its
 * node's waiter and may wake other kernel waiters with the same bit; a
 * broadcast's wakes every kernel waiter. */
inline kwake()
{
	if
	:: kw == NONE -> skip
	:: else ->
		atomic {
			i = 0;
			do
			:: i < NW ->
				if
				:: KERN(i) && (kw == ALL || kw == i) -> pk[i] = 0
				:: KERN(i) && !(kw == ALL || kw == i) -> skip
				:: KERN(i) && !(kw == ALL || kw == i) -> pk[i] = 0 /* same bit */
				:: !KERN(i) -> skip
				fi;
				i++
			:: else -> break
			od;
			i = 0;
			kw = NONE
		}
	fi
}

/* After either section: wake the kernel nodes taken, signal the ULT node taken
 * (the first of a chain). */
inline signal_taken()
{
	kwake();
	if
	:: n != NONE -> signal_node(n)
	:: else -> skip
	fi
}

inline cond_signal()
{
	atomic { signal_section() }
	signal_taken()
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

/* pvrt_cond_destroy, after its lock section found the queue empty (busy: -EBUSY) */
inline cond_destroy()
{
	if
	:: busy -> skip
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

/* With the mutex held: take a token, or queue a new node and unlock (the
 * first half of lk_cond_wait). */
inline take_or_queue()
{
	if
	:: tok > 0 -> tok--; fin = 1
	:: else ->
		assert(!destroyed);
		st[me] = WAITING;   /* a new node: state and chain zero-initialised */
		chain[me] = NONE;
		taker[me] = 0;
		q[ql] = me;
		ql++;
		refs++;
		timed = (me == 1)
	fi;
	unlock()
}

/* Waiter 0 waits without a limit, 1 with a timeout, 2 is cancellable. Each runs
 *	lock; while (!tok) { r = cond_wait; if (r) break; } if (!r) tok--; unlock
 * (a timed-out or cancelled waiter gives up; the cancelled one exits from its
 * cleanup handler, which unlocks the mutex its withdrawal relocked). */
active [NW] proctype Waiter()
{
	byte me, s, r, i, k, n, pr, kv, kw = NONE;
	bool timed, fin;

	me = _pid;
	assert(me != 2 || KERN(me)); /* cancellation is for threads */
	atomic { lock(); take_or_queue() }
	do
	:: fin -> break
	:: else ->
		/* wait_signal */
ws:
		s = st[me];
		if
		:: s == SIGNALED -> s = 0; r = OK; goto woken
		:: else -> skip
		fi;
		if
		:: KERN(me) ->
			/* kwait: kseq, then the state, then sleep while kseq is unchanged */
			kv = kseq;
			if
			:: st[me] == SIGNALED -> kv = 0; s = 0; r = OK; goto woken
			:: else -> skip
			fi;
			atomic {
				if
				:: kseq == kv -> pk[me] = 1
				:: else -> skip   /* -EAGAIN */
				fi;
				kv = 0;
				s = 0
			}
		:: else ->
			/* lk_park(st[me], s): blocks only while the state is still s */
			atomic {
				if
				:: st[me] == s -> pk[me] = 1
				:: else -> skip   /* -EAGAIN */
				fi;
				s = 0
			}
		fi;
		/* The futex's return and the lock section that follows a timeout or
		 * cancel are one step: in between only the waiter's own state and
		 * pk[me] (which a wake can only clear) differ. */
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
				r = CANCELED;
				assert(!destroyed);
				if
				:: st[me] == WAITING -> unqueue_me(); goto left
				:: else -> skip
				fi
			}
			goto withdraw
		fi;
		goto ws;

withdraw:
		/* taken by a signal or broadcast: wait for the SIGNALED store (park_chained;
		 * a kernel node was SIGNALED in the section that took it) */
		assert(!KERN(me) || st[me] == SIGNALED);
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
		goto left;

woken:
		/* broadcast: wake the next chained waiter before dropping the reference
		 * and before relocking the mutex */
		if
		:: chain[me] != NONE -> n = chain[me]; signal_node(n)
		:: else -> skip
		fi;
left:
		put_ref();
		/* relock, return, and the caller's loop up to the next queueing */
		atomic {
			lock();
			if
			:: r == OK ->
				/* no wake-up without a signal or broadcast, and a signal
				 * makes at most one wait return */
				assert(taker[me] != 0);
				if
				:: taker[me] == BY_SIG -> assert(sigcredit > 0); sigcredit--
				:: else -> skip
				fi;
				take_or_queue()
			:: r == TIMEDOUT ->
				assert(taker[me] == 0);   /* it did not consume a wake-up */
				unlock();
				gone++;
				fin = 1
			:: r == CANCELED ->
				unlock();
				gone++;
				fin = 1
			fi;
			r = 0
		}
	od
}

/* One round per waiter that has not given up (as seen at the start of the
 * round) of: lock, add a token, signal or broadcast with the mutex held or
 * after unlocking it. So a signal that a cancelled waiter consumes and does not
 * pass on may be the one another waiter needed. Then destroy, holding the
 * mutex or not: every waiter will find a token, so none waits any more and
 * destroy is allowed. */
active proctype Signaller()
{
	byte round, n, i, k, dr, kw = NONE;
	bool busy, cas;

	round = 0;
	do
	:: round + gone < NW ->
		if
		:: atomic { lock(); tok++; unlock() };
			if
			:: cond_signal()
			:: atomic { broadcast_section() }; signal_taken()
			fi
		:: atomic { lock(); tok++; signal_section() }; signal_taken(); unlock()
		:: atomic { lock(); tok++; broadcast_section() }; signal_taken(); unlock()
		fi;
		round++
	:: else -> break
	od;
	if
	:: atomic { lock(); busy = (ql > 0) }; cond_destroy(); unlock()
	:: atomic { busy = (ql > 0) }; cond_destroy()
	fi
}
