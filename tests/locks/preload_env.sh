#!/bin/sh
# libpvrt-preload.so and bad settings in the environment (set by hand, without pvrt-run): each
# bad variable gives exactly one stderr line naming it, its value and the accepted values, and
# the program still runs, with the documented fallback, and gives glibc's results.
# usage: preload_env.sh PRELOAD PARITY
set -u
preload=$1 parity=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "preload_env: FAIL: $*"; exit 1; }

unset PVRT_LOCKS PVRT_HINTS PVRT_EMU PVRT_STATS_FILE
"$parity" >"$tmp/glibc.txt" || fail "parity without the preload failed"

# run NAME [VAR=VALUE ...]: PARITY under the preload with these settings and statistics on;
# stdout must be glibc's; stderr is left in $tmp/NAME.err, pvrt's mutex acquisitions in $acq.
run() {
	name=$1
	shift
	rm -f "$tmp/stats"
	env "$@" PVRT_STATS_FILE="$tmp/stats" LD_PRELOAD="$preload" "$parity" \
		>"$tmp/$name.out" 2>"$tmp/$name.err" || fail "$name: the program failed: $(cat "$tmp/$name.err")"
	diff -u "$tmp/glibc.txt" "$tmp/$name.out" || fail "$name: results differ from glibc's (above)"
	acq=$(awk '$1 == "mutex" { print $2 }' "$tmp/stats" 2>/dev/null)
	acq=${acq:-0}
}
# expect_one NAME PATTERN...: stderr is exactly one line and it contains every PATTERN.
expect_one() {
	name=$1
	shift
	[ "$(wc -l <"$tmp/$name.err")" -eq 1 ] || fail "$name: expected one stderr line, got: $(cat "$tmp/$name.err")"
	for pat in "$@"; do
		grep -qF -- "$pat" "$tmp/$name.err" || fail "$name: '$pat' missing in: $(cat "$tmp/$name.err")"
	done
	cat "$tmp/$name.err"
}
expect_silent() {
	[ ! -s "$tmp/$1.err" ] || fail "$1: unexpected stderr: $(cat "$tmp/$1.err")"
}

# Valid values are silent; pvrt's locks count acquisitions, glibc's do not.
run unset
expect_silent unset
[ "$acq" -gt 100 ] || fail "unset: pvrt's locks not in use ($acq mutex acquisitions)"
run empty PVRT_LOCKS=
expect_silent empty
[ "$acq" -gt 100 ] || fail "PVRT_LOCKS='': pvrt's locks not in use"
run pvrt PVRT_LOCKS=pvrt
expect_silent pvrt
[ "$acq" -gt 100 ] || fail "PVRT_LOCKS=pvrt: pvrt's locks not in use"
run glibc PVRT_LOCKS=glibc
expect_silent glibc
[ "$acq" -eq 0 ] || fail "PVRT_LOCKS=glibc: pvrt counted $acq mutex acquisitions"

# A bad PVRT_LOCKS: one line, and the documented fallback is pvrt's locks.
run locks_bogus PVRT_LOCKS=bogus
expect_one locks_bogus "PVRT_LOCKS='bogus'" "pvrt, glibc" "using pvrt"
[ "$acq" -gt 100 ] || fail "PVRT_LOCKS=bogus: did not fall back to pvrt's locks"
run locks_case PVRT_LOCKS=GLIBC
expect_one locks_case "PVRT_LOCKS='GLIBC'" "using pvrt"
[ "$acq" -gt 100 ] || fail "PVRT_LOCKS=GLIBC: did not fall back to pvrt's locks"

# A bad hint source or emulator spec: one line, pvrt's locks on hint source none.
run hints_bogus PVRT_HINTS=bogus
expect_one hints_bogus "PVRT_HINTS='bogus'" "auto, kvm, bpf, emu, none" "using hint source none"
[ "$acq" -gt 100 ] || fail "PVRT_HINTS=bogus: pvrt's locks not in use"
run emu_bogus PVRT_HINTS=emu PVRT_EMU=vcpus=banana
expect_one emu_bogus "PVRT_EMU" "banana" "using hint source none"

# Both bad: one line each.
run both PVRT_LOCKS=x PVRT_HINTS=y
[ "$(wc -l <"$tmp/both.err")" -eq 2 ] || fail "two bad variables: expected two lines: $(cat "$tmp/both.err")"

# An unwritable statistics file: said at exit, the program's status is unchanged.
LD_PRELOAD="$preload" PVRT_STATS_FILE="$tmp/no/such/dir/stats" "$parity" >/dev/null 2>"$tmp/stats.err" ||
	fail "PVRT_STATS_FILE unwritable: the program failed"
expect_one stats "PVRT_STATS_FILE='$tmp/no/such/dir/stats'" "cannot open"
echo "preload_env: OK"
