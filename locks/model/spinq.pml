/*
 * Promela model of the mutex's spinner queue (locks/spinq.h): the kernel's OSQ
 * with give-ups from anywhere in the queue (unqueue steps A, B, C).
 *
 * Checked (locks/model/check.sh, a ctest): at most one head at a time
 * (assertion); every hand-shake completes (a process left waiting for a
 * neighbour that will never act is an invalid end state); and once everyone
 * has finished, the queue is empty and no node links to another (assertion).
 *
 * Model: N processes, each with its own node (type-stable and reused: a
 * process queues ITER times with the same node, so a neighbour may meet a node
 * that has left and queued again, as with the per-thread nodes). Each C atomic
 * operation is one atomic step (they are all sequentially consistent in the C
 * code); plain loads that only gate a CAS are folded into it. A waiter may give
 * up at any moment while queued (its budget, a preempted predecessor: any
 * give-up test). The C code's busy-wait loops are blocking guards here: "poll
 * until one of these holds" becomes an 'if' over those conditions, so a wait
 * that can never end shows as a blocked process rather than a silent loop.
 *
 * Seeded faults it catches (checked by hand): step C without relinking the
 * predecessor to the successor (invalid end state: a successor waits for
 * ever); step A unlinking with a plain store instead of the CAS (the queue is
 * left non-empty); unlock reading 'next' without taking it off (a stale link is
 * left behind). Exhaustive: 1.0M states, every statement reached, under a
 * second.
 */
#define N    3
#define ITER 2
#define NONE 255

byte tail = NONE;
byte next[N] = NONE; /* every element */
byte prev[N] = NONE;
bool locked[N];
byte heads = 0;
byte finished = 0;

/* lk_spinq_wait_next: until the tail moves back from me to 'to', or a
 * successor has linked itself (then detached and returned in 'nx'). */
inline wait_next(me, to, nx)
{
	if
	:: atomic { tail == me -> tail = to; nx = NONE }
	:: atomic { next[me] != NONE -> nx = next[me]; next[me] = NONE }
	fi
}

active [N] proctype P()
{
	byte me = _pid, pr, nx, it = 0;

again:
	if
	:: it == ITER -> goto done
	:: else -> it++
	fi;

	/* ---- lk_spinq_lock ---- */
	next[me] = NONE;
	locked[me] = 0;
	atomic { pr = tail; tail = me }
	if
	:: pr == NONE -> goto head
	:: else -> skip
	fi;
	prev[me] = pr;
	next[pr] = me;
	/* wait to become the head, or give up */
	if
	:: locked[me] -> goto head
	:: true -> skip
	fi;

	/* Step A: unlink from the predecessor unless it is making us the head. */
stepA:
	if
	:: atomic { next[pr] == me -> next[pr] = NONE }; goto stepB
	:: locked[me] -> goto head
	:: prev[me] != pr -> pr = prev[me]; goto stepA
	fi;
stepB:
	wait_next(me, pr, nx);
	if
	:: nx == NONE -> goto again /* gave up; the queue ends at pr */
	:: else -> skip
	fi;
	/* Step C */
	prev[nx] = pr;
	next[pr] = nx;
	goto again;

head:
	atomic { heads++; assert(heads == 1) }
	heads--;

	/* ---- lk_spinq_unlock ---- */
	if
	:: atomic { tail == me -> tail = NONE }; goto again
	:: else -> skip
	fi;
	atomic { nx = next[me]; next[me] = NONE }
	if
	:: nx == NONE -> wait_next(me, NONE, nx)
	:: else -> skip
	fi;
	if
	:: nx != NONE -> locked[nx] = 1
	:: else -> skip
	fi;
	goto again;

done:
	atomic {
		finished++;
		if
		:: finished == N ->
			assert(tail == NONE);
			assert(next[0] == NONE && next[1] == NONE && next[2] == NONE)
		:: else -> skip
		fi
	}
}
