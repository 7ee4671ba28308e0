#!/bin/sh
# Real programs with glibc's locks and with pvrt's, undercommitted and under emulated
# overcommit, printing each program's own throughput figure. Programs that are not installed
# are skipped. Under the emulator both sides run through pvrt-run (--locks=glibc for the
# baseline) so that the application's threads sit on emulated vCPUs in both.
# usage: realprogs.sh PVRT-RUN [EMU-SPEC]   (default EMU-SPEC: vcpus=4,pcpus=2)
#   SECS: seconds per timed run (default 5); SQLITE_THREADS: the sqlite_threads binary
#   (default: build/bench/locks/sqlite_threads).
set -u
run=$1
emu=${2:-vcpus=4,pcpus=2}
secs=${SECS:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# measure NAME EXTRACT-AWK CMD...: runs CMD four ways, prints the figure extracted by EXTRACT-AWK.
measure() {
	name=$1 ext=$2
	shift 2
	printf '%-34s' "$name"
	for mode in glibc pvrt emu-glibc emu-pvrt; do
		case $mode in
		glibc) "$@" >"$tmp/out" 2>&1 ;;
		pvrt) "$run" --hints=none -- "$@" >"$tmp/out" 2>&1 ;;
		emu-glibc) "$run" --emu="$emu" --locks=glibc -- "$@" >"$tmp/out" 2>&1 ;;
		emu-pvrt) "$run" --emu="$emu" -- "$@" >"$tmp/out" 2>&1 ;;
		esac
		rc=$?
		v=$(awk "$ext" "$tmp/out" | head -1)
		[ $rc -eq 0 ] || v="FAIL($rc)"
		printf ' %14s' "${v:--}"
		eval "res_$(echo "$mode" | tr - _)=\${v:-0}"
	done
	awk -v a="$res_glibc" -v b="$res_pvrt" -v c="$res_emu_glibc" -v d="$res_emu_pvrt" \
		'BEGIN { printf "   %6.2f %6.2f\n", (a > 0 ? b / a : 0), (c > 0 ? d / c : 0) }'
}

printf '%-34s %14s %14s %14s %14s   %6s %6s\n' "program (figure)" glibc pvrt "emu glibc" "emu pvrt" \
	"ratio" "emu-r"
if command -v sysbench >/dev/null 2>&1; then
	measure "sysbench mutex 4t (1/s)" '/total time:/ { sub("s", "", $3); printf "%.3f", 1 / $3 }' \
		sysbench --threads=4 mutex --mutex-num=4 --mutex-locks=20000 --mutex-loops=50 run
	measure "sysbench threads 4t (events/s)" \
		'/total time:/ { sub("s", "", $3); t = $3 } /total number of events:/ { e = $5 }
		 END { if (t > 0) printf "%.0f", e / t }' \
		sysbench --threads=4 --time="$secs" threads --thread-locks=2 --thread-yields=10 run
fi
if command -v stress-ng >/dev/null 2>&1; then
	for s in mutex futex pthread; do
		measure "stress-ng --$s 4 (bogo ops/s)" '$4 == "'$s'" && $5 ~ /^[0-9]/ { print $9 }' \
			stress-ng --$s 4 --timeout "${secs}s" --metrics-brief
	done
fi
sq=$(dirname "$0")/../../build/bench/locks/sqlite_threads
sq=${SQLITE_THREADS:-$sq}
if [ -x "$sq" ]; then
	measure "sqlite3 4 threads (txn/s)" '/^throughput:/ { print $2 }' "$sq" 4 20000
fi
if command -v db_bench >/dev/null 2>&1; then
	db="$tmp/db"
	for b in fillrandom readrandom readwhilewriting; do
		use=$([ $b = fillrandom ] && echo 0 || echo 1)
		measure "db_bench $b 4t (ops/s)" '/^'$b' / { print $5 }' \
			db_bench --db="$db" --benchmarks=$b --threads=4 --num=100000 \
			--use_existing_db=$use --duration="$secs" --value_size=100 --compression_type=none
	done
fi
