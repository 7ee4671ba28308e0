#!/bin/sh
# Locks under real CFS overcommit, no emulator: glibc against pvrt with the bpf source's thread
# hints and with none, in interleaved rounds (each round runs every setting and side once).
#   bench_locks   pvrt (bpf), pvrt hints off, glibc's mutex, pthread_spin; short and long sections
#   sysbench mutex, one mutex            glibc | pvrt-run --hints=bpf | pvrt-run --hints=none
#   db_bench readwhilewriting (RocksDB)  the same three
# Settings (all on CPUs 0-1, taskset): under = 2 threads, 2x = 4 threads, 4x = 8 threads,
# hog = 4 threads beside a process spinning on CPU 0. Prints medians and per-round ratio ranges.
# Needs root (or pvhintd running) for the bpf source; programs that are not installed are skipped.
# usage: real-overcommit.sh BUILD-DIR [ROUNDS] [SECONDS-PER-RUN]
#   SETTINGS (default "under 2x 4x hog")
set -eu
[ $# -ge 1 ] || {
	echo "usage: real-overcommit.sh BUILD-DIR [ROUNDS] [SECONDS-PER-RUN]" >&2
	exit 2
}
command -v python3 >/dev/null || {
	echo "real-overcommit: python3 is needed for the summary" >&2
	exit 2
}
build=$1 rounds=${2:-3} secs=${3:-0.4}
settings=${SETTINGS:-"under 2x 4x hog"}
bench=$build/bench/locks/bench_locks
run=$build/bin/pvrt-run
for f in "$bench" "$run"; do
	[ -x "$f" ] || {
		echo "real-overcommit: $f is not built" >&2
		exit 2
	}
done
"$run" --hints=bpf -- true || {
	echo "real-overcommit: the bpf source is not usable here (root, BTF)" >&2
	exit 2
}
tmp=$(mktemp -d)
hog=
cleanup() {
	[ -n "$hog" ] && kill "$hog" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
have_sysbench=$(command -v sysbench || true)
have_db=$(command -v db_bench || true)
if [ -n "$have_db" ]; then
	db_bench --db="$tmp/db" --benchmarks=fillrandom --num=100000 --value_size=100 \
		--compression_type=none >/dev/null 2>&1 || have_db=
fi
# side -> the command prefix
pre() {
	case $1 in
	glibc) echo "" ;;
	bpf) echo "$run --hints=bpf --" ;;
	none) echo "$run --hints=none --" ;;
	esac
}
for r in $(seq "$rounds"); do
	for s in $settings; do
		case $s in
		under) t=2 ;;
		2x | hog) t=4 ;;
		4x) t=8 ;;
		*)
			echo "real-overcommit: unknown setting '$s'" >&2
			exit 2
			;;
		esac
		if [ "$s" = hog ]; then
			taskset -c 0 sh -c 'while :; do :; done' &
			hog=$!
		fi
		echo "== round $r/$rounds, $s: $t threads" >&2
		PVRT_HINTS=bpf PVRT_BENCH_THREADS=$t PVRT_BENCH_SECONDS=$secs PVRT_BENCH_LATENCY=1 \
			taskset -c 0-1 "$bench" \
			--benchmark_filter='lock/(pvrt|pvrt_nohints|glibc|pthread_spin)/' \
			--benchmark_format=json >"$tmp/bl.$s.$r.json"
		# The sides in a rotated order, so that none always runs first in a setting.
		case $((r % 3)) in
		0) sides="glibc bpf none" ;;
		1) sides="bpf none glibc" ;;
		2) sides="none glibc bpf" ;;
		esac
		for side in $sides; do
			if [ -n "$have_sysbench" ]; then
				# shellcheck disable=SC2046 # pre's words
				taskset -c 0-1 $(pre $side) sysbench --threads=$t mutex --mutex-num=1 \
					--mutex-locks=5000000 --mutex-loops=20 run >"$tmp/sb.$s.$side.$r" 2>&1 || true
			fi
			if [ -n "$have_db" ]; then
				# shellcheck disable=SC2046
				taskset -c 0-1 $(pre $side) db_bench --db="$tmp/db" \
					--benchmarks=readwhilewriting --use_existing_db=1 --threads=$t \
					--num=100000 --duration=2 --value_size=100 --compression_type=none \
					>"$tmp/db.$s.$side.$r" 2>&1 || true
			fi
		done
		if [ -n "$hog" ]; then
			kill "$hog"
			wait "$hog" 2>/dev/null || true
			hog=
		fi
	done
done
python3 - "$tmp" "$rounds" "$settings" <<'EOF'
import json, re, statistics as st, sys
tmp, rounds, settings = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
R = range(1, rounds + 1)
med = st.median
def rng(xs):
    xs = [x for x in xs if x]
    return f"{med(xs):.2f} [{min(xs):.2f}-{max(xs):.2f}]" if xs else "-"
def read(path, rx):
    try:
        m = re.search(rx, open(path).read())
        return float(m.group(1)) if m else None
    except OSError:
        return None
print("bench_locks (acquisitions/s; ratios: median of per-round ratios [range])\n")
print("| setting | section | pvrt (bpf) | hints off | glibc | pthread_spin | pvrt/glibc "
      "| hints off/glibc | pvrt/pthread_spin | p99 us pvrt (glibc) |")
print("|---|---|---|---|---|---|---|---|---|---|")
for s in settings:
    d = {}
    for r in R:
        for b in json.load(open(f"{tmp}/bl.{s}.{r}.json"))["benchmarks"]:
            k, cs = b["name"].split("/")[1:3]
            d[(cs, k, r)] = b
    for cs in ("short", "long"):
        v = lambda k: [d[(cs, k, r)]["ops_per_s"] for r in R]
        p99 = lambda k: med([d[(cs, k, r)].get("lat_p99_us", 0) for r in R])
        ratio = lambda a, b: rng([x / y for x, y in zip(v(a), v(b))])
        print(f"| {s} | {cs} | {med(v('pvrt'))/1e6:.3g}M | {med(v('pvrt_nohints'))/1e6:.3g}M "
              f"| {med(v('glibc'))/1e6:.3g}M | {med(v('pthread_spin'))/1e6:.3g}M "
              f"| {ratio('pvrt', 'glibc')} | {ratio('pvrt_nohints', 'glibc')} "
              f"| {ratio('pvrt', 'pthread_spin')} | {p99('pvrt'):.3g} ({p99('glibc'):.3g}) |")
for name, tag, rx, higher in (
        ("sysbench mutex, 1 mutex (total time, s)", "sb", r"total time:\s+([\d.]+)s", False),
        ("db_bench readwhilewriting (ops/s)", "db", r"readwhilewriting\s*:.*?([\d.]+) ops/sec",
         True)):
    rows = []
    for s in settings:
        v = {side: [read(f"{tmp}/{tag}.{s}.{side}.{r}", rx) for r in R]
             for side in ("glibc", "bpf", "none")}
        if not any(v["glibc"]):
            continue
        # speed against glibc: > 1 is faster than glibc
        sp = lambda side: rng([(x / g if higher else g / x) if x and g else None
                               for x, g in zip(v[side], v["glibc"])])
        m = lambda side: f"{med([x for x in v[side] if x]):.4g}" if any(v[side]) else "-"
        rows.append(f"| {s} | {m('glibc')} | {m('bpf')} | {m('none')} | {sp('bpf')} "
                    f"| {sp('none')} |")
    if rows:
        print(f"\n{name}; speed = against glibc, > 1 faster\n")
        print("| setting | glibc | pvrt bpf | pvrt none | bpf speed | none speed |")
        print("|---|---|---|---|---|---|")
        print("\n".join(rows))
EOF
