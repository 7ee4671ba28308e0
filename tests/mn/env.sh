#!/bin/sh
# M:N switches: pvrt-run's --mn/--workers usage errors, and a bad PVRT_MN: one stderr line,
# M:N mode off, the program unaffected.
# usage: env.sh PVRT-RUN PRELOAD MN_TLS
set -u
run=$1 preload=$2 prog=$3
fail() { echo "mn env: FAIL: $*"; exit 1; }
for a in --workers=0 --workers=257 --workers=x --workers=; do
	"$run" --mn "$a" -- true >/dev/null 2>&1
	[ $? -eq 2 ] || fail "'$a' is not a usage error"
done
"$run" --mn --locks=glibc -- true >/dev/null 2>&1
[ $? -eq 2 ] || fail "--mn --locks=glibc is not a usage error"
out=$(PVRT_MN=bogus LD_PRELOAD=$preload sh -c 'echo ran' 2>&1)
[ "$(echo "$out" | grep -c "PVRT_MN='bogus' is not valid")" -eq 1 ] || fail "bad PVRT_MN: $out"
echo "$out" | grep -q '^ran$' || fail "bad PVRT_MN: the program did not run: $out"
# Lock-only mode with PVRT_MN=0: threads are kernel threads, which the M:N test detects.
PVRT_MN=0 PVRT_WORKERS=2 LD_PRELOAD=$preload "$prog" >/dev/null 2>&1 && fail "PVRT_MN=0 ran M:N"
# --workers=1: all threads on one kernel thread
"$run" --mn --workers=1 -- "$prog" | grep -q "mn_tls: ok" || fail "--workers=1"
echo "mn env: OK"
