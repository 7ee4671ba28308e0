#!/bin/sh
# pvrt-run --stats: the lock table after PROGRAM exits, and in M:N mode the per-worker runtime
# table (switches, steals, rescues, preemptions, hand-offs, ULTs, lends) with a row per worker.
# usage: pvrt_run_stats.sh PVRT-RUN THREADED-PROGRAM
set -u
run=$1 prog=$2
fail() { echo "pvrt_run_stats: FAIL: $*"; exit 1; }

out=$(PVRT_HINTS=none timeout 120 "$run" --mn --workers=2 --stats -- "$prog" 2>&1) ||
	fail "pvrt-run --mn --stats: $out"
printf '%s\n' "$out" | grep -q '^pvrt-run: lock statistics$' || fail "no lock table: $out"
printf '%s\n' "$out" | grep -Eq '^mutex +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+$' ||
	fail "no mutex row: $out"
printf '%s\n' "$out" | grep -q '^pvrt-run: runtime statistics$' || fail "no runtime table: $out"
printf '%s\n' "$out" | grep -Eq '^worker +switches +steals +rescues +preemptions +hand-offs +ULTs +lends$' ||
	fail "runtime table header: $out"
rows=$(printf '%s\n' "$out" | grep -Ec '^[01]( +[0-9]+){7}$')
[ "$rows" -eq 2 ] || fail "expected a row for each of 2 workers: $out"
sw=$(printf '%s\n' "$out" | awk '/^[01] / {s += $2} END {print s + 0}')
[ "$sw" -gt 0 ] || fail "no ULT switches counted: $out"
lends=$(printf '%s\n' "$out" | awk '/^[01] / {s += $8} END {print s + 0}')
[ "$lends" -eq 0 ] || fail "lends without a hint source that can yield: $out"
rescues=$(printf '%s\n' "$out" | awk '/^[01] / {s += $4} END {print s + 0}')
[ "$rescues" -eq 0 ] || fail "rescues without preemption hints: $out"

# Lock-only: the lock table, no runtime table (no ULTs ran). (PROGRAM checks that it runs M:N.)
out=$(PVRT_HINTS=none timeout 120 "$run" --stats -- sh -c : 2>&1) || fail "pvrt-run --stats: $out"
printf '%s\n' "$out" | grep -q '^pvrt-run: lock statistics$' || fail "lock-only: no lock table: $out"
printf '%s\n' "$out" | grep -q 'runtime statistics' && fail "lock-only: a runtime table: $out"
echo "pvrt_run_stats: PASS"
