#!/bin/sh
# pvrt-run's bpf server: one bpf instance for the whole process tree it starts (pvrt_run.c,
# start_bpf_server). PROGRAM's processes find it through PVHINT_BPF_SOCKET; it is no child of
# theirs (a shell's `wait` returns), and it leaves no socket behind once PROGRAM is done.
# usage: pvrt_run_bpf.sh PVRT-RUN TEST-PVHINT-BPF THREADED-PROGRAM WANT
set -u
run=$1 bpf=$2 prog=$3 want=$4
fail() { echo "pvrt_run_bpf: FAIL: $*"; exit 1; }
"$bpf" --usable >/dev/null 2>&1 || { echo "pvrt_run_bpf: the bpf source is unusable here: skipped"; exit 77; }

sock=$("$run" --hints=bpf -- sh -c 'echo "$PVHINT_BPF_SOCKET"') || fail "pvrt-run failed"
case $sock in
/*/pvrt-run.*/bpf) ;;
*) fail "no server socket for PROGRAM: '$sock'" ;;
esac
# Gone once PROGRAM has exited and nothing is attached (the server polls every 200 ms).
i=0
while [ -e "$(dirname "$sock")" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
[ -e "$(dirname "$sock")" ] && fail "$(dirname "$sock") is left behind"

# Several processes of one tree, threaded and in M:N mode, attach to it (every runtime thread
# registers a slot through the socket at once: the claims contend). `wait` waits for PROGRAM's
# children only: the server is none of them.
out=$(timeout 120 "$run" --mn --workers=2 --hints=bpf -- sh -c "'$prog' & '$prog'; wait" 2>&1) ||
	fail "two threaded processes under one server: $out"
n=$(printf '%s\n' "$out" | grep -c "ok")
[ "$n" -ge 2 ] || fail "expected two programs' ok: $out"
out=$(PVRT_WORKERS=2 timeout 120 "$run" --mn --hints=bpf -- "$prog" 2>&1) || fail "one process: $out"

# Not started where the user named an instance, nor for another source.
s=$(PVHINT_BPF_SOCKET=/nonexistent/sock "$run" --hints=bpf -- sh -c 'echo "$PVHINT_BPF_SOCKET"')
[ "$s" = /nonexistent/sock ] || fail "a PVHINT_BPF_SOCKET of the user's was replaced: '$s'"
s=$("$run" --hints=none -- sh -c 'echo "${PVHINT_BPF_SOCKET:-}"')
[ -z "$s" ] || fail "a server for --hints=none: '$s'"
# The server follows threads only while PROGRAM's locks contend (tests/tools/want.c).
out=$(timeout 120 "$run" --hints=bpf -- "$want" 2>&1) || fail "following on want: $out"
echo "pvrt_run_bpf: ok"
