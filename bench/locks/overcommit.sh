#!/bin/sh
# Lock benchmark across overcommit levels: undercommitted (no emulator, one thread per CPU) and
# 1.5x, 2x, 3x emulated overcommit (vCPUs = factor x pCPUs, one thread per vCPU). Prints the
# median acquisitions/s of every lock variant and the ratios pvrt/glibc and pvrt/pthread_spin.
# usage: overcommit.sh BENCH_LOCKS [REPETITIONS] [SECONDS-PER-RUN]
#   PCPUS (default 2) emulated physical CPUs; LEVELS (default "1 1.5 2 3");
#   QUANTUM (default 3ms) the emulated host time slice; FILTER a --benchmark_filter regex.
set -eu
bench=$1 reps=${2:-3} secs=${3:-0.5}
pcpus=${PCPUS:-2}
levels=${LEVELS:-"1 1.5 2 3"}
quantum=${QUANTUM:-3ms}
filter=${FILTER:-.}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for f in $levels; do
	vcpus=$(awk -v f="$f" -v p="$pcpus" 'BEGIN { printf "%d", f * p + 0.5 }')
	if [ "$f" = 1 ]; then
		echo "== undercommitted: $pcpus threads, no emulator" >&2
		PVRT_HINTS=none PVRT_BENCH_THREADS=$pcpus PVRT_BENCH_SECONDS=$secs "$bench" \
			--benchmark_repetitions="$reps" --benchmark_filter="$filter" \
			--benchmark_format=json >"$tmp/$f.json" 2>"$tmp/$f.err" || { cat "$tmp/$f.err" >&2; exit 1; }
	else
		echo "== ${f}x overcommit: vcpus=$vcpus,pcpus=$pcpus,quantum=$quantum" >&2
		PVRT_HINTS=emu PVRT_EMU="vcpus=$vcpus,pcpus=$pcpus,quantum=$quantum" \
			PVRT_BENCH_SECONDS=$secs "$bench" --benchmark_repetitions="$reps" \
			--benchmark_filter="$filter" --benchmark_format=json >"$tmp/$f.json" \
			2>"$tmp/$f.err" || { cat "$tmp/$f.err" >&2; exit 1; }
	fi
done
python3 - "$tmp" $levels <<'PY'
import json, sys, statistics
tmp, levels = sys.argv[1], sys.argv[2:]
kinds = ["pvrt", "pvrt_nohints", "glibc", "glibc_adaptive", "pthread_spin", "ticket", "mcs"]
for cs in ["short", "long"]:
    print(f"\n{cs} critical sections: median acquisitions/s (fairness = min/max per-thread count)")
    print(f"{'level':>6} " + " ".join(f"{k:>15}" for k in kinds) + f" {'pvrt/glibc':>11} {'pvrt/spin':>10}")
    for f in levels:
        runs = json.load(open(f"{tmp}/{f}.json"))["benchmarks"]
        ops, fair = {}, {}
        for k in kinds:
            rs = [b for b in runs if b.get("run_type") == "iteration" and b["name"].startswith(f"lock/{k}/{cs}/")]
            if rs:
                ops[k] = statistics.median(b["ops_per_s"] for b in rs)
                fair[k] = statistics.median(b["fairness"] for b in rs)
        cell = lambda k: f"{ops[k]/1e6:7.3f}M f{fair[k]:4.2f}" if k in ops else f"{'-':>15}"
        ratio = lambda a, b: f"{ops[a]/ops[b]:.2f}" if a in ops and b in ops and ops[b] > 0 else "-"
        lab = "under" if f == "1" else f + "x"
        print(f"{lab:>6} " + " ".join(f"{cell(k):>15}" for k in kinds) +
              f" {ratio('pvrt','glibc'):>11} {ratio('pvrt','pthread_spin'):>10}")
PY
