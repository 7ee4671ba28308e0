#!/bin/sh
# ctest pvhint.pvhintd: the daemon as an administrator runs it. It creates its socket 0660 in the
# group it is given, serves the bpf source to a member of that group (pvhint-top as nobody shows
# source bpf), refuses a second daemon on the same socket, and removes the socket on SIGTERM.
# usage: pvhintd.sh PVHINTD PVHINT-TOP USABLE-CHECK
set -u
d=$1 top=$2 usable=$3
[ "$(id -u)" -eq 0 ] || { echo "needs root: skipped"; exit 77; }
"$usable" --usable >/dev/null || { echo "bpf source unavailable: skipped"; exit 77; }
dir=$(mktemp -d) && chmod 755 "$dir"
sock=$dir/d.sock
fail() {
	echo "pvhintd.sh: FAIL: $*"
	kill "$pid" 2>/dev/null
	rm -rf "$dir"
	exit 1
}
"$d" --socket "$sock" --group nogroup >"$dir/log" 2>&1 &
pid=$!
i=0
until [ -S "$sock" ] || [ $i -ge 300 ]; do sleep 0.1; i=$((i + 1)); done
[ -S "$sock" ] || fail "no socket: $(cat "$dir/log")"
[ "$(stat -c '%a %U %G' "$sock")" = "660 root nogroup" ] || fail "socket is $(stat -c '%a %U %G' "$sock")"
"$d" --socket "$sock" >/dev/null 2>&1 && fail "a second daemon took the socket"
out=$(setpriv --reuid=65534 --regid=65534 --clear-groups env PVRT_HINTS=bpf PVHINT_BPF_SOCKET="$sock" \
	"$top" --once --json 2>&1) || fail "pvhint-top as nobody: $out"
echo "$out" | grep -q '"source":"bpf"' || fail "not the bpf source: $out"
kill -TERM "$pid"
wait "$pid" || fail "exit status $? after SIGTERM: $(cat "$dir/log")"
[ -e "$sock" ] && fail "the socket is left behind"
rm -rf "$dir"
echo "pvhintd.sh: OK"
