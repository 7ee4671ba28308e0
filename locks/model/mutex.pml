/*
 * Promela model of pvrt_mutex's park/unpark and hand-off protocol (locks/mutex.c).
 *
 * Checked (locks/model/check.sh, a ctest): mutual exclusion (assertion) and no
 * lost wake-up: every process that parks without a timeout is eventually woken,
 * i.e. there is no reachable state where all processes that have not finished
 * are blocked for ever (Spin's invalid end state check).
 *
 * Model: N processes lock and unlock once; process 1 does it ITER times (more
 * rounds for every process multiply the states past what a ctest may take:
 * all three at 2 rounds is 2.3e8 states, 12 GB). Process 0 uses a timed
 * lock (its waits may time out at any moment, which exercises the hand-off
 * withdrawal); the others wait without limit, so a lost wake-up leaves them
 * blocked. Two kinds of waiter, as in the C code: a ULT (sets WAITERS, parks
 * through rt_futex) or a thread (sets KWAITERS, sleeps in the kernel futex);
 * processes 1 and 2 take either kind (Spin tries all four pairs), process 0
 * is a thread; an unlock wakes one waiter of each kind whose bit it cleared. The futex: wait(addr, val) atomically compares
 * and queues; wake dequeues any one waiter of the kind (rt_futex chooses by
 * the hints within a bound, the kernel by the waiters' vCPU bits; Spin tries
 * every choice). Each C atomic operation is one atomic step here; plain reads of
 * 'word' and 'handoff' are separate steps, so every interleaving the C code
 * allows (all its accesses are sequentially consistent or ordered by the
 * CASes modelled) is explored. Hints are nondeterministic: at each unlock the
 * hand-off target may or may not be "preempted" (which also stands for the C
 * code's "asleep below the hard bound": both make the unlocker release and
 * cancel instead of granting); a waiter may request the hand-off at any time
 * after it first parked (the C code's trigger is 20 us or 1 ms after its first
 * wake-up, starve_bound(); a hand-off target's spin for its grant before it
 * parks is a delay, which the interleavings already cover). With N = 3 the
 * model cannot reach a second target registering between a cancel and its
 * wake-up; the C code wakes every sleeper on 'handoff' at a cancel for that. The spinner queue
 * is not modelled here: it only decides which waiter may spin, and a spinner
 * that gives up parks as any waiter; spinq.pml checks the queue itself.
 *
 * Seeded faults it catches (checked by hand): an unlock that cancels a
 * hand-off registration without waking the target; a woken waiter that
 * acquires without setting WAITERS again; an unlock that wakes only one
 * kind when both bits are set; a hand-off target that sets WAITERS instead
 * of its own kind's bit.
 */
#define N	3
#define ITER	2
#define LOCKED	1
#define WAITERS 2
#define HANDOFF 4
#define GRANT	8
#define KWAITERS 16
byte kind[N];       /* each process's waiter bit: WAITERS (a ULT) or KWAITERS (a thread) */
#define OK	0
#define EAGAIN	1
#define TIMEOUT 2

byte word = 0;
byte handoff = 0;   /* 0, a target (pid+1), or target|GRANT */
byte incs = 0;      /* processes in the critical section */
bool wq_word[N];    /* parked on 'word' */
bool wq_ho[N];      /* parked on 'handoff' */

inline wake_word(k)
{
	atomic {
		if
		:: wq_word[0] && kind[0] == k -> wq_word[0] = 0
		:: wq_word[1] && kind[1] == k -> wq_word[1] = 0
		:: wq_word[2] && kind[2] == k -> wq_word[2] = 0
		:: else -> skip
		fi
	}
}

inline wake_ho()
{
	atomic {
		if
		:: wq_ho[0] -> wq_ho[0] = 0
		:: wq_ho[1] -> wq_ho[1] = 0
		:: wq_ho[2] -> wq_ho[2] = 0
		:: else -> skip
		fi
	}
}

active [N] proctype P()
{
	byte w, hw, t, h, extra, it, wbit;
	bool lost, registered, timed;
	byte r;

	timed = (_pid == 0);
	if
	:: _pid == 0 -> wbit = KWAITERS
	:: _pid != 0 -> wbit = KWAITERS
	:: _pid != 0 -> wbit = WAITERS
	fi;
	kind[_pid] = wbit;
	it = 0;
next:
	if
	:: it == (_pid == 1 -> ITER : 1) -> goto done
	:: else -> skip
	fi;
	it++;

	/* ---- lock ---- */
	atomic {
		if
		:: word == 0 -> word = LOCKED; goto locked
		:: else -> skip
		fi
	}
	lost = 0;
	extra = 0;
loop:
	w = word;
	if
	:: (w & LOCKED) == 0 ->
		atomic {
			if
			:: word == w -> word = w | LOCKED | extra; goto locked
			:: else -> skip
			fi
		}
		goto loop
	:: else -> skip
	fi;
	if
	:: lost -> goto hand   /* starving: ask for the hand-off */
	:: true -> skip
	fi;
park_word:
	if
	:: (w & wbit) == 0 ->
		atomic {
			if
			:: word == w -> word = w | wbit
			:: else -> goto loop
			fi
		}
		w = w | wbit
	:: else -> skip
	fi;
	extra = wbit;
	/* futex wait on word == w */
	atomic {
		if
		:: word == w -> wq_word[_pid] = 1; r = OK
		:: else -> r = EAGAIN
		fi
	}
	if
	:: r == OK ->
		if
		:: wq_word[_pid] == 0 -> lost = 1
		:: timed ->
			atomic {
				if
				:: wq_word[_pid] -> wq_word[_pid] = 0; r = TIMEOUT
				:: else -> lost = 1
				fi
			}
		fi
	:: else -> skip
	fi;
	if
	:: r == TIMEOUT -> goto next   /* gave up: ETIMEDOUT */
	:: else -> goto loop
	fi;

hand:
	/* handoff_acquire */
	t = _pid + 1;
	registered = 0;
hloop:
	h = handoff;
	if
	:: h == (t | GRANT) -> handoff = 0; goto locked
	:: else -> skip
	fi;
	if
	:: registered && h != t -> registered = 0
	:: else -> skip
	fi;
	if
	:: !registered ->
		if
		:: h != 0 -> goto park_word   /* someone else is the target: -EAGAIN */
		:: else -> skip
		fi;
		atomic {
			if
			:: handoff == 0 -> handoff = t
			:: else -> goto park_word
			fi
		}
		registered = 1
	:: else -> skip
	fi;
	hw = word;
	if
	:: (hw & LOCKED) == 0 ->
		atomic {
			if
			:: word == hw -> word = hw | LOCKED | wbit;
				if
				:: handoff == t -> handoff = 0
				:: else -> skip
				fi;
				goto locked
			:: else -> skip
			fi
		}
		goto hloop
	:: else -> skip
	fi;
	if
	:: (hw & (HANDOFF | wbit)) != (HANDOFF | wbit) ->
		atomic {
			if
			:: word == hw -> word = hw | HANDOFF | wbit
			:: else -> goto hloop
			fi
		}
	:: else -> skip
	fi;
	/* futex wait on handoff == t */
	atomic {
		if
		:: handoff == t -> wq_ho[_pid] = 1; r = OK
		:: else -> r = EAGAIN
		fi
	}
	if
	:: r == OK ->
		if
		:: wq_ho[_pid] == 0 -> skip
		:: timed ->
			atomic {
				if
				:: wq_ho[_pid] -> wq_ho[_pid] = 0; r = TIMEOUT
				:: else -> skip
				fi
			}
		fi
	:: else -> skip
	fi;
	if
	:: r == TIMEOUT ->
		/* withdraw: CAS(t -> 0); on failure it may be our grant */
		atomic {
			if
			:: handoff == t -> handoff = 0; goto next
			:: handoff == (t | GRANT) -> handoff = 0; goto locked
			:: else -> goto next
			fi
		}
	:: else -> goto hloop
	fi;

locked:
	incs++;
	assert(incs == 1);
	incs--;

	/* ---- unlock ---- */
	atomic {
		if
		:: word == LOCKED -> word = 0; goto next
		:: else -> skip
		fi
	}
rloop:
	w = word;
	t = handoff;
	if
	:: t != 0 && (t & GRANT) == 0 ->
		if
		:: true ->   /* the target's vCPU runs: grant */
			atomic {
				if
				:: word == w -> word = w & (255 - HANDOFF)
				:: else -> goto rloop
				fi
			}
			atomic {
				if
				:: handoff == t -> handoff = t | GRANT
				:: else -> goto rloop
				fi
			}
			wake_ho();
			goto next
		:: true -> skip   /* preempted, or asleep below the hard bound: release normally */
		fi
	:: else -> skip
	fi;
	atomic {
		if
		:: word == w -> word = 0
		:: else -> goto rloop
		fi
	}
	t = handoff;
	if
	:: t != 0 && (t & GRANT) == 0 ->
		atomic {
			if
			:: handoff == t -> handoff = 0; r = OK
			:: else -> r = EAGAIN
			fi
		}
		if
		:: r == OK -> wake_ho()
		:: else -> skip
		fi
	:: else -> skip
	fi;
	if
	:: (w & KWAITERS) != 0 -> wake_word(KWAITERS)
	:: else -> skip
	fi;
	if
	:: (w & WAITERS) != 0 -> wake_word(WAITERS)
	:: else -> skip
	fi;
	goto next;
done:
	skip
}
