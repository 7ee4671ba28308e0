#!/bin/sh
# Lock benchmark across overcommit levels: undercommitted (no emulator, one thread per CPU) and
# 1.5x, 2x, 3x emulated overcommit (vCPUs = factor x pCPUs, one thread per vCPU). Prints the
# median acquisitions/s of every lock variant and the ratios pvrt/glibc and pvrt/pthread_spin.
# The machine's load drifts, so repetitions are rounds: each round runs every level once, and the
# medians are taken over the rounds (a level is never measured only in a noisy stretch).
# usage: overcommit.sh BENCH_LOCKS [ROUNDS] [SECONDS-PER-RUN]
#   PCPUS (default 2) emulated physical CPUs; LEVELS (default "1 1.5 2 3");
#   QUANTUM (default 3ms) the emulated host time slice; FILTER a --benchmark_filter regex.
#   REAL=1: real CFS overcommit instead of the emulator: factor x PCPUS threads pinned to CPUs
#   0..PCPUS-1 (taskset), hints from HINTS (default bpf: thread-slot hints of the bpf source).
set -eu
bench=$1 reps=${2:-3} secs=${3:-0.5}
pcpus=${PCPUS:-2}
levels=${LEVELS:-"1 1.5 2 3"}
quantum=${QUANTUM:-3ms}
filter=${FILTER:-.}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for r in $(seq "$reps"); do
for f in $levels; do
	vcpus=$(awk -v f="$f" -v p="$pcpus" 'BEGIN { printf "%d", f * p + 0.5 }')
	out="$tmp/$f.$r.json"
	if [ "$f" = 1 ]; then
		echo "== round $r, undercommitted: $pcpus threads, no emulator" >&2
		PVRT_HINTS=none PVRT_BENCH_THREADS=$pcpus PVRT_BENCH_SECONDS=$secs "$bench" \
			--benchmark_filter="$filter" --benchmark_format=json >"$out" 2>"$tmp/err" ||
			{ cat "$tmp/err" >&2; exit 1; }
	elif [ "${REAL:-0}" = 1 ]; then
		echo "== round $r, ${f}x real overcommit: $vcpus threads on CPUs 0-$((pcpus - 1)), hints ${HINTS:-bpf}" >&2
		PVRT_HINTS=${HINTS:-bpf} PVRT_BENCH_THREADS=$vcpus PVRT_BENCH_SECONDS=$secs \
			taskset -c "0-$((pcpus - 1))" "$bench" --benchmark_filter="$filter" \
			--benchmark_format=json >"$out" 2>"$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
	else
		echo "== round $r, ${f}x overcommit: vcpus=$vcpus,pcpus=$pcpus,quantum=$quantum" >&2
		PVRT_HINTS=emu PVRT_EMU="vcpus=$vcpus,pcpus=$pcpus,quantum=$quantum" \
			PVRT_BENCH_SECONDS=$secs "$bench" --benchmark_filter="$filter" \
			--benchmark_format=json >"$out" 2>"$tmp/err" || { cat "$tmp/err" >&2; exit 1; }
	fi
done
done
python3 - "$tmp" $levels <<'PY'
import glob, json, sys, statistics
tmp, levels = sys.argv[1], sys.argv[2:]
kinds = ["pvrt", "pvrt_nohints", "glibc", "glibc_adaptive", "pthread_spin", "ticket", "mcs",
         "pvrt_spin", "pvrt_spin_nohints"]
def ratio_cell(rs):
    # median of the per-round ratios and their range: both sides of a ratio ran in one round
    if not rs:
        return "-"
    return f"{statistics.median(rs):.2f} [{min(rs):.2f}-{max(rs):.2f}]"
for cs in ["short", "long"]:
    print(f"\n{cs} critical sections: median acquisitions/s (fairness = min/max per-thread count);"
          " ratios: median of the per-round ratios [range]")
    print(f"{'level':>6} " + " ".join(f"{k:>15}" for k in kinds) +
          f" {'pvrt/glibc':>18} {'pvrt/spin':>18}")
    for f in levels:
        rounds = [{b["name"].split("/")[1]: b for b in json.load(open(p))["benchmarks"]
                   if b.get("run_type") == "iteration" and b["name"].split("/")[2] == cs}
                  for p in sorted(glob.glob(f"{tmp}/{f}.*.json"))]
        ops, fair = {}, {}
        for k in kinds:
            rs = [r[k] for r in rounds if k in r]
            if rs:
                ops[k] = statistics.median(b["ops_per_s"] for b in rs)
                fair[k] = statistics.median(b["fairness"] for b in rs)
        cell = lambda k: f"{ops[k]/1e6:7.3f}M f{fair[k]:4.2f}" if k in ops else f"{'-':>15}"
        per = lambda a, b: [r[a]["ops_per_s"] / r[b]["ops_per_s"] for r in rounds
                            if a in r and b in r and r[b]["ops_per_s"] > 0]
        lab = "under" if f == "1" else f + "x"
        print(f"{lab:>6} " + " ".join(f"{cell(k):>15}" for k in kinds) +
              f" {ratio_cell(per('pvrt', 'glibc')):>18} {ratio_cell(per('pvrt', 'pthread_spin')):>18}")
PY
