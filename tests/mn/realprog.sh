#!/bin/sh
# Real threaded programs under pvrt-run --mn, output compared with a native run: sort
# --parallel, zstd -T, xz -T, python3 threading, sqlite3 with threads (bench/locks), sysbench.
# Programs that are not installed are skipped; exit 77 when none is.
# usage: realprog.sh PVRT-RUN [SQLITE_THREADS]
set -u
run="$1 --mn --workers=2"
sqlite=${2:-}
ran=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "mn realprog: FAIL: $*"; exit 1; }
same() { # NAME COMMAND...: identical stdout with and without M:N mode
	name=$1
	shift
	"$@" >"$tmp/native" 2>&1 || fail "$name: native run failed"
	$run "$@" >"$tmp/mn" 2>&1 || fail "$name: exit status $? under --mn: $(tail -3 "$tmp/mn")"
	cmp -s "$tmp/native" "$tmp/mn" || fail "$name: output differs: $(tail -3 "$tmp/mn")"
	echo "$name: OK"
	ran=1
}
awk 'BEGIN { srand(7); for (i = 0; i < 200000; i++) printf "%d %x\n", int(rand() * 1e9), i }' \
	>"$tmp/in.txt"
command -v sort >/dev/null && same "sort --parallel=4" sort --parallel=4 -S 8M "$tmp/in.txt"
command -v zstd >/dev/null && same "zstd -T4" sh -c "zstd -T4 -q -c '$tmp/in.txt' | md5sum"
command -v xz >/dev/null && same "xz -T4" sh -c "xz -T4 -1 -c '$tmp/in.txt' | md5sum"
if command -v python3 >/dev/null; then
	cat >"$tmp/t.py" <<'PY'
import threading, queue
q, out, lock = queue.Queue(), [], threading.Lock()
def work():
    s = 0
    while (v := q.get()) is not None:
        s += v
    with lock:
        out.append(s)
ts = [threading.Thread(target=work) for _ in range(8)]
for t in ts: t.start()
for i in range(20000): q.put(i)
for t in ts: q.put(None)
for t in ts: t.join()
print(sum(out), len(out))
PY
	same "python3 threading" python3 "$tmp/t.py"
fi
[ -n "$sqlite" ] && same "sqlite3 threads" sh -c "'$sqlite' | grep result:"
if command -v sysbench >/dev/null; then
	same "sysbench threads" sh -c "sysbench --threads=8 --events=2000 --time=0 threads --thread-yields=100 \
		--thread-locks=4 run | grep 'total number of events'"
fi
[ $ran -eq 1 ] || exit 77
