#!/bin/sh
# The fork scenarios of fork.c with glibc's locks, with the preload, and with the native API:
# every child must finish, and print what it prints under glibc. (States that glibc's child
# cannot use -- a rwlock with parent waiters, a condvar signal while a parent waiter is
# queued, relocking an errorcheck mutex held across fork -- are left out, or pvrt-only.)
# usage: fork.sh LOCKS_FORK LOCKS_FORK_NATIVE PRELOAD
set -u
prog=$1 native=$2 preload=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
"$prog" glibc >"$dir/glibc" || { echo "FAIL: glibc run"; fail=1; }
LD_PRELOAD=$preload "$prog" pvrt >"$dir/preload" || { echo "FAIL: preload run"; fail=1; }
"$native" >"$dir/native" || { echo "FAIL: native run"; fail=1; }
cat "$dir/glibc"
for v in preload native; do
	# Lines marked pvrt-only are where glibc's child hangs: pvrt's must do as it says.
	grep -v '^pvrt-only' "$dir/$v" >"$dir/$v.cmp"
	if ! diff -u "$dir/glibc" "$dir/$v.cmp"; then
		echo "FAIL: $v differs from glibc"
		fail=1
	fi
	if ! grep -qx 'pvrt-only cond_signal: woken=1' "$dir/$v"; then
		echo "FAIL: $v: a signal in the child did not reach the child's waiter"
		grep '^pvrt-only' "$dir/$v"
		fail=1
	fi
done
[ $fail = 0 ] && echo "fork: preload and native API behave as glibc in every scenario"
exit $fail
