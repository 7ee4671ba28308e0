#!/bin/sh
# Real threaded programs under pvrt-run --mn, output compared with a native run: sort
# --parallel, zstd -T, xz -T, python3 threading (only with MN_ONLY=python), sqlite3 with threads
# (bench/locks), sysbench, x264 --threads, 7z -mmt, pigz -p, RocksDB's db_bench --threads, and
# programs of ours on libraries with thread pools (tests/mn, from the environment): OpenBLAS dgemm ($MN_BLAS),
# OpenMP ($MN_OMP, 4 and 8 threads, passive and active waits; only with MN_ONLY=omp), Open MPI
# with threads in each rank ($MN_MPI with $MN_MPIEXEC: 2 ranks, each under pvrt-run --mn on a
# CPU of its own).
# Programs that are not installed are skipped (a line says so); exit 77 when none ran.
# usage: realprog.sh PVRT-RUN [SQLITE_THREADS]
set -u
pvrt_run=$1
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
	# A hang fails here, with its name, not at ctest's timeout of the whole list.
	timeout -k 5 150 $run "$@" >"$tmp/mn" 2>&1 ||
		fail "$name: exit status $? under --mn (124: hung): $(tail -3 "$tmp/mn")"
	cmp -s "$tmp/native" "$tmp/mn" || fail "$name: output differs: $(tail -3 "$tmp/mn")"
	echo "$name: OK"
	ran=1
}
omp() { # OpenMP: libgomp spins (GOMP_SPINCOUNT), then waits with raw futex calls
	for n in 4 8; do
		for p in passive active; do
			same "OpenMP, $n threads, $p waits" env OMP_NUM_THREADS=$n OMP_WAIT_POLICY=$p \
				"$MN_OMP"
		done
	done
}
py() { # python3 threading: 8 threads on a queue
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
	# The interpreter itself: a version manager's shell shim (pyenv) would put a chain of bash
	# scripts, each exec'ing the next, under --mn too.
	py=$(python3 -c 'import sys; print(sys.executable)') || py=python3
	same "python3 threading" "$py" "$tmp/t.py"
}
# MN_ONLY=omp or python: that case alone (ctest mn.openmp, mn.python, which run beside the rest
# of the list). Left out of the full list.
case ${MN_ONLY:-} in
omp)
	[ -n "${MN_OMP:-}" ] || exit 77
	omp
	exit 0
	;;
python)
	command -v python3 >/dev/null || exit 77
	py
	exit 0
	;;
esac
awk 'BEGIN { srand(7); for (i = 0; i < 200000; i++) printf "%d %x\n", int(rand() * 1e9), i }' \
	>"$tmp/in.txt"
command -v sort >/dev/null && same "sort --parallel=4" sort --parallel=4 -S 8M "$tmp/in.txt"
command -v zstd >/dev/null && same "zstd -T4" sh -c "zstd -T4 -q -c '$tmp/in.txt' | md5sum"
command -v xz >/dev/null && same "xz -T4" sh -c "xz -T4 -1 -c '$tmp/in.txt' | md5sum"
[ -n "$sqlite" ] && same "sqlite3 threads" sh -c "'$sqlite' | grep result:"
if command -v sysbench >/dev/null; then
	same "sysbench threads" sh -c "sysbench --threads=8 --events=2000 --time=0 threads --thread-yields=100 \
		--thread-locks=4 run | grep 'total number of events'"
fi
skip() { echo "$1: SKIP ($2)"; }
skip "python3 threading" "run alone by ctest mn.python"
if ! command -v x264 >/dev/null; then
	skip x264 "not installed (Debian x264)"
elif ! command -v python3 >/dev/null; then
	skip x264 "no python3 to make the clip"
else
	# A 30-frame 160x96 clip; frame threads (x264's default) and sliced threads are both
	# deterministic (checked natively: the same bytes every run).
	python3 - >"$tmp/in.y4m" <<'PY'
import sys
w, h, n = 160, 96, 30
o = sys.stdout.buffer
o.write(b"YUV4MPEG2 W%d H%d F25:1 Ip A1:1 C420jpeg\n" % (w, h))
for f in range(n):
    o.write(b"FRAME\n")
    o.write(bytes(((x * 3 + y * 2 + f * 5) ^ (x * y >> 3)) & 255 for y in range(h) for x in range(w)))
    o.write(bytes((x + f * 2) & 255 for y in range(h // 2) for x in range(w // 2)))
    o.write(bytes((y * 4 + f) & 255 for y in range(h // 2) for x in range(w // 2)))
PY
	for m in "" --sliced-threads; do
		same "x264 --threads 4 $m" sh -c "x264 --threads 4 $m --no-progress --quiet \
			-o '$tmp/o.264' '$tmp/in.y4m' 2>/dev/null && md5sum <'$tmp/o.264'"
	done
fi
if command -v 7z >/dev/null; then
	# Compress, test and extract: the archive's bytes and the round trip.
	same "7z a -mmt4" sh -c "rm -f '$tmp/a.7z' && 7z a -mmt4 -bso0 -bsp0 '$tmp/a.7z' \
		'$tmp/in.txt' && md5sum <'$tmp/a.7z' && 7z t -mmt4 -bso0 -bsp0 '$tmp/a.7z' && \
		7z x -so '$tmp/a.7z' | cmp - '$tmp/in.txt' && echo round trip ok"
else
	skip 7z "not installed (Debian p7zip-full)"
fi
if command -v pigz >/dev/null; then
	same "pigz -p 4" sh -c "pigz -p 4 -c '$tmp/in.txt' | md5sum && \
		pigz -p 4 -c '$tmp/in.txt' | pigz -p 4 -dc | cmp - '$tmp/in.txt' && echo round trip ok"
else
	skip pigz "not installed (Debian pigz)"
fi
if command -v db_bench >/dev/null; then
	# Random keys from a fixed seed: the set written and the number found are the same.
	same "db_bench --threads=4" sh -c "db_bench --benchmarks=fillrandom,readrandom --num=20000 \
		--threads=4 --seed=1 --compression_type=none --db='$tmp/db' 2>&1 | \
		grep -o '([0-9]* of [0-9]* found)'"
else
	skip db_bench "not installed (Debian rocksdb-tools)"
fi
if [ -n "${MN_BLAS:-}" ]; then
	same "OpenBLAS dgemm, 4 threads" env OPENBLAS_NUM_THREADS=4 "$MN_BLAS"
else
	skip "OpenBLAS dgemm" "not built (Debian libopenblas-dev)"
fi
if [ -n "${MN_OMP:-}" ]; then
	skip OpenMP "run alone by ctest mn.openmp"
else
	skip OpenMP "not built (the compiler has no OpenMP)"
fi
if [ -n "${MN_MPI:-}" ] && [ -n "${MN_MPIEXEC:-}" ]; then
	# Open MPI refuses root without these; every rank on a CPU of its own (of those we may use).
	export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
	awk '/^Cpus_allowed_list/ { n = split($2, r, ","); for (i = 1; i <= n; i++) {
		m = split(r[i], ab, "-"); for (c = ab[1]; c <= ab[m]; c++) printf "%d ", c } }' \
		/proc/self/status >"$tmp/cpus"
	# One rank: on CPU (its rank modulo the CPUs we may use), run its arguments.
	cat >"$tmp/rank.sh" <<EOF
c=\$(awk -v r="\${OMPI_COMM_WORLD_RANK:-0}" '{ print \$(r % NF + 1) }' '$tmp/cpus')
command -v taskset >/dev/null && exec taskset -c "\$c" "\$@"
exec "\$@"
EOF
	mpi() { # PREFIX...: 2 ranks of MN_MPI, each run as PREFIX MN_MPI on a CPU of its own
		timeout -k 5 150 "$MN_MPIEXEC" --oversubscribe -np 2 sh "$tmp/rank.sh" "$@" "$MN_MPI" 2>&1 |
			grep '^mn_mpi'
	}
	mpi >"$tmp/native" || fail "MPI: native run failed"
	mpi "$pvrt_run" --mn --workers=1 >"$tmp/mn" || fail "MPI: failed under --mn: $(tail -3 "$tmp/mn")"
	cmp -s "$tmp/native" "$tmp/mn" || fail "MPI: output differs: $(cat "$tmp/mn")"
	echo "MPI, 2 ranks, threads in each: OK ($(cat "$tmp/mn"))"
	ran=1
else
	skip MPI "not built (Debian libopenmpi-dev openmpi-bin)"
fi
[ $ran -eq 1 ] || exit 77
