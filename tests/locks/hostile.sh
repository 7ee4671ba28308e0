#!/bin/sh
# Hostile paths and environments (issue 9, bugs 2 and 7):
#  1. pvrt-run --emu=...,export=PATH: only the program's own process exports; the programs it
#     starts do not see export= (each used to truncate the shared file: SIGBUS in the others);
#     the file is there while it runs and gone after.
#  2. PVRT_STATS_FILE naming a symbolic link: not followed, the target is untouched.
#  3. (root) A setuid-root program linked with the preload and libpvrt, run by an unprivileged
#     user with PVRT_STATS_FILE, PVRT_EMU=...,export=, PVRT_HINT_DEV, PVRT_WORKERS set: every
#     PVRT_* variable is ignored (AT_SECURE), no file is written, the program runs normally.
# usage: hostile.sh PVRT_RUN PRELOAD SETUID_PROBE
set -u
run=$1 preload=$2 probe=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
chmod 755 "$dir"
fail=0
bad() { echo "FAIL: $*"; fail=1; }

# 1. export from the owner only
out=$("$run" --emu="vcpus=2,pcpus=1,export=$dir/page" -- sh -c '
	for i in 1 2 3 4 5 6 7 8 9 10; do /bin/true; done
	[ -f "$0" ] && echo present
	echo "child sees $(env | grep ^PVRT_EMU=)"' "$dir/page" 2>&1)
echo "$out"
echo "$out" | grep -q '^present$' || bad "export file missing while the program runs"
echo "$out" | grep -q 'exists' && bad "a program started under the emulator tried to export"
echo "$out" | grep -q 'child sees PVRT_EMU=.*export=' && bad "programs started under the emulator still get export="
[ -e "$dir/page" ] && bad "export file left after exit"

# 2. PVRT_STATS_FILE through a symbolic link
printf 'victim\n' >"$dir/victim"
chmod 600 "$dir/victim"
ln -s "$dir/victim" "$dir/link"
err=$(PVRT_STATS_FILE="$dir/link" LD_PRELOAD=$preload /bin/true 2>&1)
[ "$(cat "$dir/victim")" = victim ] || bad "PVRT_STATS_FILE followed a symbolic link"
echo "$err" | grep -q "PVRT_STATS_FILE=.*cannot open" || bad "no warning for the symbolic link: $err"

# 3. setuid
if [ "$(id -u)" != 0 ]; then
	echo "setuid part skipped: needs root"
	[ $fail = 0 ] && exit 77
	exit $fail
fi
runas=
if command -v setpriv >/dev/null; then
	runas="setpriv --reuid=65534 --regid=65534 --clear-groups"
elif command -v runuser >/dev/null; then
	runas="runuser -u nobody --"
else
	echo "setuid part skipped: neither setpriv nor runuser"
	[ $fail = 0 ] && exit 77
	exit $fail
fi
cp "$probe" "$dir/probe"
chown root "$dir/probe"
chmod 4755 "$dir/probe"
printf 'root only\n' >"$dir/secret"
chmod 600 "$dir/secret"
mkfifo "$dir/fifo"
plain=$($runas "$dir/probe" 2>&1)
case $plain in
*euid=0*) ;;
*)
	echo "setuid part skipped: the setuid probe does not run as root here ($plain)"
	[ $fail = 0 ] && exit 77
	exit $fail
	;;
esac
chmod 1777 "$dir"
out=$(cd "$dir" && timeout 60 env PVRT_STATS_FILE="$dir/secret" PVRT_HINTS=emu \
	PVRT_EMU="vcpus=2,pcpus=1,export=$dir/made-by-root" PVRT_HINT_DEV="$dir/fifo" \
	PVRT_WORKERS=bogus PVRT_LOCKS=bogus $runas "$dir/probe" 2>&1)
st=$?
echo "setuid probe: $out (status $st)"
[ $st = 0 ] || bad "setuid probe failed"
echo "$out" | grep -q 'source=none hints_err=0 runtime=0' || bad "a PVRT_* variable was read under AT_SECURE"
echo "$out" | grep -q libpvrt-preload && bad "the preload read its variables under AT_SECURE"
[ "$(cat "$dir/secret")" = "root only" ] || bad "PVRT_STATS_FILE written by a setuid program"
[ -e "$dir/made-by-root" ] && bad "export= file created by a setuid program"
[ $fail = 0 ] && echo "hostile: all refused"
exit $fail
