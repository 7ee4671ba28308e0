#!/bin/sh
# pvrt-run: usage errors, exit status, the preload in the child, --stats, --emu.
# usage: pvrt_run.sh PVRT-RUN PARITY
set -u
run=$1 parity=$2
fail() { echo "pvrt_run: FAIL: $*"; exit 1; }
expect_usage() { # expect exit 2 and a usage line for these arguments
	out=$("$run" "$@" 2>&1); rc=$?
	[ $rc -eq 2 ] || fail "'$*' exited $rc, expected 2 (usage error)"
	echo "$out" | grep -q "usage: pvrt-run" || fail "'$*' printed no usage: $out"
}
expect_usage
expect_usage --bogus -- true
expect_usage --hints=bogus -- true
expect_usage --hints= -- true
expect_usage --emu= -- true
expect_usage --emu=vcpus=banana -- true
expect_usage --hints=none --emu=vcpus=2 -- true
expect_usage --locks=bogus -- true
"$run" --help | grep -q "usage: pvrt-run" || fail "--help"

"$run" -- sh -c 'exit 7'; rc=$?
[ $rc -eq 7 ] || fail "exit status $rc, expected 7"
"$run" --stats -- sh -c 'exit 5' 2>/dev/null; rc=$?
[ $rc -eq 5 ] || fail "exit status with --stats $rc, expected 5"
"$run" -- /nonexistent/prog 2>/dev/null; rc=$?
[ $rc -eq 127 ] || fail "missing program: $rc, expected 127"

# The child really runs with the preload and the hint source.
"$run" --hints=none -- sh -c 'case "$LD_PRELOAD" in *libpvrt-preload.so*) ;; *) exit 3;; esac; [ "$PVRT_HINTS" = none ]' ||
	fail "LD_PRELOAD/PVRT_HINTS not set in the child"
"$run" --hints=none -- "$parity" --which | grep -c libpvrt-preload.so | grep -q 3 ||
	fail "pthread functions not interposed under pvrt-run"

# --stats: a table with a mutex line showing acquisitions.
out=$("$run" --stats --hints=none -- "$parity" 2>&1 >/dev/null) || fail "parity under --stats failed"
echo "$out"
acq=$(echo "$out" | awk '$1 == "mutex" { print $2 }')
[ -n "$acq" ] && [ "$acq" -gt 100 ] || fail "--stats: no mutex acquisitions counted"
echo "$out" | grep -q "^barrier " || fail "--stats: no barrier line"
# --stats counts forked children too, also those that leave with _exit.
out=$("$run" --stats --hints=none -- "$parity" --fork-locks 5000 2>&1) || fail "--fork-locks failed"
acq=$(echo "$out" | awk '$1 == "mutex" { print $2 }')
[ -n "$acq" ] && [ "$acq" -ge 5000 ] || fail "--stats: a forked child's 5000 acquisitions not counted ($acq)"
[ "$acq" -lt 10000 ] || fail "--stats: a forked child's acquisitions counted twice ($acq)"
# 1500 children, one after another (more than the 1024 counter blocks: the blocks of reaped
# children are reclaimed), 10 acquisitions each: counted exactly.
out=$("$run" --stats --hints=none -- "$parity" --fork-locks 10 1500 2>&1) || fail "1500 forks failed"
acq=$(echo "$out" | awk '$1 == "mutex" { print $2 }')
[ "$acq" = 15000 ] || fail "--stats: 1500 children x 10 acquisitions counted as $acq"
# A child that outlives the process that loaded the preload writes its own counts at exit.
sf=$(mktemp)
PVRT_STATS_FILE=$sf PVRT_HINTS=none LD_PRELOAD=$(dirname "$run")/libpvrt-preload.so \
	"$parity" --orphan-locks 7000 || fail "--orphan-locks failed"
for _ in $(seq 100); do [ "$(grep -c '^mutex' "$sf")" -ge 2 ] && break; sleep 0.1; done
acq=$(awk '$1 == "mutex" { s += $2 } END { print s + 0 }' "$sf")
rm -f "$sf"
[ "$acq" = 7000 ] || fail "PVRT_STATS_FILE: an orphaned child's 7000 acquisitions counted as $acq"

# --emu: application threads run on emulated vCPUs; results stay right.
out=$("$run" --stats --emu=vcpus=4,pcpus=2,quantum=2ms -- "$parity" 2>/dev/null) || fail "--emu run failed"
echo "$out" | grep -q "cond broadcast woke *6" || fail "--emu: wrong results"
# --locks=glibc: the same setup with glibc's locks (nothing counted, same results).
res=$(mktemp)
out=$("$run" --stats --locks=glibc -- "$parity" 2>&1 >"$res") || fail "--locks=glibc run failed"
grep -q "cond broadcast woke *6" "$res" || fail "--locks=glibc: wrong results"
rm -f "$res"
acq=$(echo "$out" | awk '$1 == "mutex" { print $2 }')
[ "${acq:-0}" -eq 0 ] || fail "--locks=glibc: pvrt counted $acq mutex acquisitions"
echo "pvrt_run: OK"
