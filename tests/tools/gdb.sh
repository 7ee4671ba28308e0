#!/bin/sh
# ctest tools.gdb: run the target under gdb to its breakpoint, load tools/gdb/pvrt.py, and check
# what `pvrt workers` and `pvrt ults bt` print against what the target set up (gdb_target.c).
# usage: gdb.sh PVRT.PY TARGET
set -u
py=$1 target=$2
command -v gdb >/dev/null 2>&1 || { echo "gdb not installed (tools/setup installs it): skipped"; exit 77; }
out=$(mktemp) && trap 'rm -f "$out"' EXIT
# Until the breakpoint: the runtime's preemption signal may stop the program before it (gdb
# stops at real-time signals by default; the script is sourced only once the runtime runs).
gdb -batch -nx -ex "set pagination off" -ex "break gdb_stop_here" -ex run \
	-ex 'python while gdb.selected_frame().name() != "gdb_stop_here": gdb.execute("continue")' \
	-ex "source $py" -ex "pvrt workers" -ex "pvrt ults bt" -ex continue \
	--args "$target" >"$out" 2>&1
cat "$out"
fail() {
	echo "tools.gdb: FAIL: $*"
	exit 1
}
# count REGEX: lines of the output that match
count() { grep -c -E "$1" "$out"; }
grep -q "Breakpoint 1, gdb_stop_here" "$out" || fail "the target did not reach its breakpoint"
[ "$(count '^worker [0-9]+ +cpu')" -eq 2 ] || fail "pvrt workers: not two workers"
grep -q "^5 ULT(s)$" "$out" || fail "pvrt ults: not 5 ULTs (primary, two mutex waiters, joiner, yielder)"
[ "$(count '^ULT .* blocked .* waits on 0x.*fn gdb_blocked_on_mutex')" -eq 2 ] ||
	fail "pvrt ults: two mutex waiters should show blocked with the address they wait on"
[ "$(count '^ULT .* blocked .*fn gdb_joiner')" -eq 1 ] || fail "pvrt ults: the joiner is not blocked"
[ "$(count '^ULT .*\[primary\].*fn \(main\)')" -eq 1 ] || fail "pvrt ults: no primary ULT"
grep -q "ON worker .*fn (main)" "$out" || fail "pvrt ults: the primary is not shown on its worker"
[ "$(count '^ULT .*fn gdb_yielder')" -eq 1 ] || fail "pvrt ults: no yielder"
# Backtraces of suspended ULTs: each mutex waiter's passes through the mutex and its function.
[ "$(count '#[0-9]+ +0x[0-9a-f]+ in gdb_blocked_on_mutex')" -eq 2 ] ||
	fail "pvrt ults bt: the mutex waiters' backtraces do not reach gdb_blocked_on_mutex"
[ "$(count '#[0-9]+ +0x[0-9a-f]+ in .* at .*locks/mutex\.c')" -ge 2 ] ||
	fail "pvrt ults bt: the mutex waiters' backtraces do not pass through locks/mutex.c"
grep -q "#[0-9]* *0x[0-9a-f]* in gdb_joiner" "$out" || fail "pvrt ults bt: no joiner frame"
# Sourced into the live runtime, the script lets the preemption signal through: without that, the
# first time slice that ends after `continue` stops the program again.
grep -q "exited normally" "$out" || fail "the target did not finish normally after gdb let it go"
echo "tools.gdb: OK"
