/*
 * Promela model of pvrt_barrier_wait (locks/barrier.c): arrivals by a swap on one state word
 * (arrivals | round << 2 | kinds asleep), waiters that set their kind's bit and sleep on the
 * word's high half, the last arrival that ends the round and wakes the kinds it took.
 *
 * Checked (locks/model/check.sh, a ctest): nobody returns before its round has ended and each
 * round has exactly COUNT arrivals (assertions); no lost wake-up (when nothing can move, nobody
 * sleeps in a round that has ended: the Monitor's assertion); at the end one serial return per
 * round (assertion).
 *
 * Model: N processes, each arriving ITER times; with N > COUNT the arrivals of the next round
 * race with the end of the current one (barrier_overlap.pml: a process that has left arrives
 * again while waiters of the overlapping round still sleep). Even processes are threads (the
 * kernel futex), odd ones ULTs (rt_futex): two wait queues, one bit each. A futex wait is one
 * atomic step that compares the high half (round and both bits) and queues, then a block until
 * woken: no spurious wake-ups, so a missed wake-up shows as a blocked process. A compare-and-swap
 * is a load (one step) and a swap that succeeds only if the whole word is unchanged (the next
 * step). The arrival's swap loop is one atomic step: a failed swap only retries. The spin before
 * sleeping is left out: it only returns early when the round has ended.
 *
 * Seeded faults it catches (checked by hand): the last arrival reading the bits before its swap
 * (a waiter that set its bit in between sleeps for ever); the bit set with a plain store of the
 * word it loaded (a concurrent arrival is lost, so its round never ends); the kernel waiters not
 * woken. Each fails all three configurations (0.4M, 1.5M and 0.55M states, 13 s in all). Not
 * modelled: the round number's wrap (barrier.c), weak memory (one word: coherence is enough),
 * spurious wake-ups (the loop looks again), 'inside' and destroy.
 */
#ifndef N
#define N 4
#define COUNT 2
#define ITER 1
#define DRAINS 1
#endif
#define KBIT 1
#define UBIT 2

/* The state word. */
byte arr = 0;
byte rnd = 0;
byte bits = 0;

byte gg[N]; /* the round each process arrived in */
bool kq[N]; /* queued on the kernel futex */
bool uq[N]; /* queued on rt_futex */
byte ended = 0;	  /* rounds ended */
byte serials = 0;
byte finished = 0;

/* Wake every process queued on the futex of kind k. */
inline wake_all(k)
{
	atomic {
		i = 0;
		do
		:: i < N && k == KBIT -> kq[i] = 0; i++
		:: i < N && k == UBIT -> uq[i] = 0; i++
		:: else -> break
		od
	}
}

active [N] proctype P()
{
	byte me = _pid, g, took, it = 0, i;
	byte la, lr, lb; /* a loaded word */
	byte kind = (_pid % 2 == 0 -> KBIT : UBIT);

again:
	if
	:: it == ITER -> goto done
	:: else -> it++
	fi;

	/* Arrive: one swap reads the round and counts us in it. */
	atomic {
		g = rnd;
		gg[me] = g;
		if
		:: arr + 1 == COUNT ->
			took = bits;
			arr = 0;
			rnd++;
			bits = 0;
			ended++;
			assert(ended == rnd)
		:: else ->
			took = 255;
			arr++;
			assert(arr < COUNT)
		fi
	}
	if
	:: took != 255 ->
		serials++;
		if
		:: took & KBIT -> wake_all(KBIT)
		:: else -> skip
		fi;
		if
		:: took & UBIT -> wake_all(UBIT)
		:: else -> skip
		fi;
		goto again
	:: else -> skip
	fi;

wait:
	atomic { la = arr; lr = rnd; lb = bits };
	if
	:: lr != g -> goto back
	:: else -> skip
	fi;
	if
	:: (lb & kind) == 0 ->
		if
		:: atomic { arr == la && rnd == lr && bits == lb -> bits = bits | kind };
			lb = lb | kind
		:: atomic { !(arr == la && rnd == lr && bits == lb) -> skip }; goto wait
		fi
	:: else -> skip
	fi;
	/* Sleep while the high half (round and bits) is what we set. */
	if
	:: kind == KBIT ->
		atomic {
			if
			:: rnd == lr && bits == lb -> kq[me] = 1
			:: else -> skip
			fi
		};
end_k:		kq[me] == 0
	:: else ->
		atomic {
			if
			:: rnd == lr && bits == lb -> uq[me] = 1
			:: else -> skip
			fi
		};
end_u:		uq[me] == 0
	fi;
	goto wait;

back:
	assert(ended > g);
	goto again;

done:
	atomic {
		finished++;
		if
		:: finished == N -> assert(serials * COUNT == N * ITER && arr == 0 && bits == 0)
		:: else -> skip
		fi
	}
}

/*
 * When nothing can move: nobody sleeps in a round that has ended (a lost wake-up). Sleepers of
 * the current round are the harness's, not the barrier's, when more processes than COUNT run
 * ahead (two finish, the third is alone in a round); where the harness always drains
 * (DRAINS), everyone must have finished.
 */
active proctype Monitor()
{
	byte j = 0;
	timeout ->
	do
	:: j < N -> assert(!(kq[j] || uq[j]) || gg[j] == rnd); j++
	:: else -> break
	od;
	assert(!DRAINS || finished == N)
}
