#!/bin/sh
# Run one M:N test program: exit status 0 and EXPECT (a grep pattern) somewhere in its output.
# usage: run.sh EXPECT COMMAND [ARGS...]
set -u
expect=$1
shift
out=$("$@" 2>&1)
rc=$?
printf '%s\n' "$out"
[ $rc -eq 0 ] || { echo "run.sh: FAIL: exit status $rc"; exit 1; }
printf '%s\n' "$out" | grep -q -- "$expect" || { echo "run.sh: FAIL: no '$expect' in the output"; exit 1; }
