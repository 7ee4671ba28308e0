#!/bin/sh
# Real programs under the preload: sysbench (mutex, threads) and stress-ng (mutex, futex,
# pthread) run briefly under pvrt-run, must succeed, and must really go through pvrt's locks
# (pvrt-run --stats counts them). Skips (77) when neither program is installed.
# With SQLITE-THREADS (bench/locks/sqlite_threads), also sqlite3 shared by several threads, whose
# result line must be identical with glibc's and pvrt's locks.
# usage: realprog.sh PVRT-RUN [SQLITE-THREADS]
set -u
run=$1
sqlite=${2:-}
ran=0
fail() { echo "realprog: FAIL: $*"; exit 1; }
mutex_acq() { awk '$1 == "mutex" { print $2 }'; }

if command -v sysbench >/dev/null 2>&1; then
	out=$("$run" --stats -- sysbench --threads=4 mutex --mutex-num=16 --mutex-locks=2000 \
		--mutex-loops=100 run 2>&1) || fail "sysbench mutex: $out"
	echo "$out" | grep -q "total number of events: *4$" || fail "sysbench mutex: $out"
	acq=$(echo "$out" | mutex_acq)
	[ "${acq:-0}" -ge 8000 ] || fail "sysbench mutex: only ${acq:-0} pvrt mutex acquisitions"
	echo "sysbench mutex: OK ($acq pvrt mutex acquisitions)"
	out=$("$run" --stats -- sysbench --threads=4 --events=2000 --time=0 threads --thread-yields=100 \
		--thread-locks=4 run 2>&1) || fail "sysbench threads: $out"
	echo "$out" | grep -q "total number of events: *2000$" || fail "sysbench threads: $out"
	echo "sysbench threads: OK"
	ran=1
fi
if command -v stress-ng >/dev/null 2>&1; then
	for s in mutex futex pthread; do
		# A loaded machine can refuse stress-ng's threads ("out of system resources"): retry.
		for try in 1 2 3; do
			out=$("$run" --stats -- stress-ng --$s 2 --$s-ops 2000 --timeout 20s 2>&1) && break
			echo "$out" | grep -q "out of system resources" || fail "stress-ng --$s: $out"
			sleep 1
		done
		echo "$out" | grep -q "successful run completed" || fail "stress-ng --$s: $out"
		echo "stress-ng --$s: OK"
	done
	ran=1
fi
if [ -n "$sqlite" ]; then
	a=$("$sqlite" 4 5000 | grep '^result:') || fail "sqlite_threads (glibc)"
	b=$("$run" -- "$sqlite" 4 5000 | grep '^result:') || fail "sqlite_threads (pvrt)"
	[ "$a" = "$b" ] || fail "sqlite_threads: glibc '$a' vs pvrt '$b'"
	echo "sqlite_threads: OK, identical ($a)"
	ran=1
fi
[ $ran -eq 1 ] || { echo "realprog: neither sysbench nor stress-ng installed: skipped"; exit 77; }
echo "realprog: OK"
