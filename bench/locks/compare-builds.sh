#!/bin/sh
# Two builds' locks side by side: bench_locks of BEFORE and AFTER (build directories) in
# interleaved rounds (each round runs both builds at every setting, so a slow stretch of a
# shared machine hits both alike), then a markdown table of medians and per-round ratio ranges:
# pvrt (hints on and off) throughput after/before and against glibc's mutex of the same run,
# fairness (min/max per-thread acquisitions) and p99 acquisition latency.
# usage: compare-builds.sh BEFORE AFTER [ROUNDS] [SECONDS-PER-RUN]
#   Settings: under = 2 threads, hints none; real2/real3 = 4/6 threads on the machine's CPUs,
#   hints bpf (root, or pvhintd running); emu2 = --emu vcpus=4,pcpus=2, quantum 3 ms.
#   Meant for a 2-CPU machine; SETTINGS (default "under real2 real3 emu2") picks some.
#   Both builds should have the same bench/locks/lockwork.h (an older one put the pvrt mutex on
#   the cache line of a flag every iteration reads): build BEFORE from a tree whose lockwork.h
#   is this one's.
set -eu
before=$1 after=$2 rounds=${3:-5} secs=${4:-0.3}
settings=${SETTINGS:-"under real2 real3 emu2"}
for b in "$before" "$after"; do
	[ -x "$b/bench/locks/bench_locks" ] || {
		echo "compare-builds: $b/bench/locks/bench_locks is not built" >&2
		exit 2
	}
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for r in $(seq "$rounds"); do
	for s in $settings; do
		case $s in
		under) env="PVRT_HINTS=none PVRT_BENCH_THREADS=2" ;;
		real2) env="PVRT_HINTS=bpf PVRT_BENCH_THREADS=4" ;;
		real3) env="PVRT_HINTS=bpf PVRT_BENCH_THREADS=6" ;;
		emu2) env="PVRT_HINTS=emu PVRT_EMU=vcpus=4,pcpus=2,quantum=3ms" ;;
		*)
			echo "compare-builds: unknown setting '$s'" >&2
			exit 2
			;;
		esac
		for side in before after; do
			[ $side = before ] && b=$before || b=$after
			echo "== round $r/$rounds, $s, $side" >&2
			# shellcheck disable=SC2086 # $env is a list of assignments
			env $env PVRT_BENCH_LATENCY=1 PVRT_BENCH_SECONDS="$secs" \
				"$b/bench/locks/bench_locks" \
				--benchmark_filter='lock/(pvrt|pvrt_nohints|glibc)/' \
				--benchmark_format=json >"$tmp/$r.$s.$side.json"
		done
	done
done
python3 - "$tmp" "$rounds" "$settings" <<'EOF'
import json, statistics as st, sys
tmp, rounds, settings = sys.argv[1], int(sys.argv[2]), sys.argv[3].split()
d = {}
for r in range(1, rounds + 1):
    for s in settings:
        for side in ("before", "after"):
            for b in json.load(open(f"{tmp}/{r}.{s}.{side}.json"))["benchmarks"]:
                k, cs = b["name"].split("/")[1:3]
                d[(s, cs, k, side, r)] = (b["ops_per_s"], b["fairness"], b["lat_p99_us"])
med = st.median
R = range(1, rounds + 1)
def rng(xs):
    return f"{med(xs):.2f} [{min(xs):.2f}-{max(xs):.2f}]"
print("| setting | section | pvrt | Mops/s before -> after | after/before | after/glibc | "
      "before/glibc | fairness before -> after (glibc) | p99 us before -> after (glibc) |")
print("|---|---|---|---|---|---|---|---|---|")
for s in settings:
    for cs in ("short", "long"):
        for k in ("pvrt", "pvrt_nohints"):
            o = [d[(s, cs, k, "before", r)] for r in R]
            n = [d[(s, cs, k, "after", r)] for r in R]
            go = [d[(s, cs, "glibc", "before", r)] for r in R]
            gn = [d[(s, cs, "glibc", "after", r)] for r in R]
            print(f"| {s} | {cs} | {'hints off' if k == 'pvrt_nohints' else 'hints on'} "
                  f"| {med([x[0] for x in o]) / 1e6:.3g} -> {med([x[0] for x in n]) / 1e6:.3g} "
                  f"| {rng([b[0] / a[0] for a, b in zip(o, n)])} "
                  f"| {rng([a[0] / g[0] for a, g in zip(n, gn)])} "
                  f"| {rng([a[0] / g[0] for a, g in zip(o, go)])} "
                  f"| {med([x[1] for x in o]):.2f} -> {med([x[1] for x in n]):.2f} "
                  f"({med([x[1] for x in gn]):.2f}) "
                  f"| {med([x[2] for x in o]):.3g} -> {med([x[2] for x in n]):.3g} "
                  f"({med([x[2] for x in gn]):.3g}) |")
EOF
