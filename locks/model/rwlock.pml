/*
 * Promela model of pvrt_rwlock's park/unpark protocol (locks/rwlock.c).
 *
 * Checked (locks/model/check.sh, a ctest): exclusion (never a writer with
 * anyone else inside: assertion) and no lost wake-up (no reachable state where
 * a process that has not finished is blocked for ever: Spin's invalid end
 * state check), under both preferences (chosen at start: Spin tries both).
 *
 * Model: two readers and two writers take the lock once each (a second round
 * for any of them multiplies the 1.8e7 states past what a ctest may take).
 * Reader 0 and writer 0 use timed waits (a wait may time out at any moment: the withdrawal
 * paths, among them a writer that leaves under writer preference and must let
 * the readers it held back go); the others wait without limit, so a lost
 * wake-up leaves them blocked. A contender that finds the lock busy may retry
 * at once (the bounded spin) or park; Spin tries both. The futex: wait(addr,
 * val) atomically compares and queues; wake(addr, n) dequeues up to n waiters
 * (Spin tries every choice of whom). Each C atomic operation is one step; the
 * waiter's loads of state and of nwwait (in reader_may_enter) are separate
 * steps, as in the C code. The hints only decide whether to spin, which the
 * free choice between retry and park covers.
 *
 * Seeded faults it catches (checked by hand): the last reader's unlock not
 * waking a waiting writer; a writer's unlock not waking readers under reader
 * preference; a timed-out writer leaving without waking the readers held back
 * by writer preference; the waiter reading the event counter after its state
 * re-check instead of before. Exhaustive: 1.8e7 states, about 20 s.
 */
#define WRITER	1
#define READER	2
#define OK	0
#define TIMEOUT 2

bool wpref;        /* PVRT_RWLOCK_PREFER_WRITER_NONRECURSIVE */
byte state = 0;    /* bit 0: a writer holds it; readers in units of 2 */
byte nrwait = 0, nwwait = 0;
byte rseq = 0, wseq = 0; /* event counters (wrap like the C code's: byte) */
byte rin = 0, win = 0;   /* readers and writers inside */
bool rq[2];             /* parked on rseq */
bool wq[2];             /* parked on wseq */
bool go = 0;

/* futex wake of every reader parked on rseq */
inline wake_readers()
{
	atomic { rq[0] = 0; rq[1] = 0 }
}

/* futex wake of one writer parked on wseq (any one: the runtime chooses) */
inline wake_writer()
{
	atomic {
		if
		:: wq[0] -> wq[0] = 0
		:: wq[1] -> wq[1] = 0
		:: else -> skip
		fi
	}
}

/* futex wait on a counter: returns at once if it moved, else sleeps until woken
 * or (timed) until it gives up; r = OK or TIMEOUT. */
inline park(q, ctr, seq, timed, r)
{
	r = OK;
	atomic {
		if
		:: ctr == seq -> q = 1
		:: else -> skip
		fi
	}
	if
	:: !q -> skip
	:: timed -> atomic { if :: q -> q = 0; r = TIMEOUT :: else -> skip fi }
	fi
}

/* writer_left: a writer gave up waiting */
inline writer_left()
{
	nwwait--;
	if
	:: wpref && nrwait > 0 -> rseq++; wake_readers()
	:: else -> skip
	fi
}

/* pvrt_rwlock_unlock after the state change left s */
inline unlock_wake(s, was_writer)
{
	if
	:: s != 0 -> goto unlocked /* readers remain: the last one wakes */
	:: else -> skip
	fi;
	if
	:: nwwait > 0 ->
		wseq++;
		wake_writer();
		if
		:: wpref -> goto unlocked
		:: else -> skip
		fi
	:: else -> skip
	fi;
	if
	:: (was_writer || wpref) && nrwait > 0 -> rseq++; wake_readers()
	:: else -> skip
	fi;
unlocked:
	skip
}

proctype Reader(byte me; byte iters)
{
	byte it = 0, s, seq, r;
	bool timed = (me == 0);
	go;
next:
	if
	:: it == iters -> goto done
	:: else -> it++
	fi;
retry:
	/* fast path: s = state; reader_may_enter(s) (loads nwwait); CAS */
	s = state;
	if
	:: !(s & WRITER) && (!wpref || nwwait == 0) ->
		atomic {
			if
			:: state == s -> state = state + READER; goto inside
			:: else -> goto retry
			fi
		}
	:: else -> skip
	fi;
	if
	:: goto retry /* spin */
	:: skip
	fi;
	nrwait++;
	seq = rseq;
	s = state;
	if
	:: !(s & WRITER) && (!wpref || nwwait == 0) -> r = OK
	:: else -> park(rq[me], rseq, seq, timed, r)
	fi;
	nrwait--;
	if
	:: r == TIMEOUT -> goto next
	:: else -> goto retry
	fi;
inside:
	rin++;
	assert(win == 0);
	rin--;
	atomic { state = state - READER; s = state }
	unlock_wake(s, 0);
	goto next;
done:
	skip
}

proctype Writer(byte me; byte iters)
{
	byte it = 0, s, seq, r;
	bool timed = (me == 0);
	go;
next:
	if
	:: it == iters -> goto done
	:: else -> it++
	fi;
retry:
	atomic {
		if
		:: state == 0 -> state = WRITER; goto inside
		:: else -> skip
		fi
	}
	if
	:: goto retry /* spin */
	:: skip
	fi;
	nwwait++;
	seq = wseq;
	s = state;
	if
	:: s == 0 -> r = OK
	:: else -> park(wq[me], wseq, seq, timed, r)
	fi;
	if
	:: r == TIMEOUT -> writer_left(); goto next
	:: else -> nwwait--; goto retry
	fi;
inside:
	win++;
	assert(win == 1 && rin == 0);
	win--;
	atomic { state = state & ~WRITER; s = state }
	unlock_wake(s, 1);
	goto next;
done:
	skip
}

init
{
	atomic {
		if
		:: wpref = 0
		:: wpref = 1
		fi;
		run Reader(0, 1);
		run Reader(1, 1);
		run Writer(0, 1);
		run Writer(1, 1);
		go = 1
	}
}
