#!/bin/sh
# The PARSEC-shaped kernels under glibc, lock-only `pvrt-run` and (when pvrt-run has it)
# `pvrt-run --mn`, in interleaved rounds: each round runs every kernel x setting x variant once
# (variant order rotated per round), so a slow stretch of the machine hits all sides alike.
# Settings: under (threads = CPUs), 2x and 4x (threads = 2 and 4 x CPUs), emu (4 threads under
# --emu=vcpus=4,pcpus=2; the glibc side is `pvrt-run --locks=glibc` under the same emulator),
# hog (threads = 2 x CPUs beside a process spinning on one CPU).
# Prints, per kernel x setting, the median elapsed time [range] of each variant and the speed
# ratio to glibc (glibc time / variant time, median of the per-round ratios [range]: > 1 is
# faster than glibc), and fails if any run's checksum differs from the others of its kernel.
#
# usage: run.sh BUILD-DIR [ROUNDS]
#   KERNELS   (default: all five) e.g. "streamcluster_cond fluidanimate"
#   SETTINGS  (default "under 2x 4x emu hog")
#   SIZE_<kernel> arguments after THREADS (defaults below: about 0.2-1 s each here)
#   BASE_BUILD another build dir: adds variant "base" (its pvrt-run), to compare two versions
#              of pvrt in the same rounds
#   CPUS      (default nproc)
#   PVRT_EMU_KSTATE  passed on to the emu setting's runs: events (default), sample or proc
#              (pvhint/README.md "Exact halts and wake-ups"); compare emu figures within one
#   FIRST_ROUND (default 1) the number of the first round (it sets the variant order): a caller
#              running one round at a time (tools/bench-report) still rotates the order
set -eu
build=$1 rounds=${2:-3}
run=$build/bin/pvrt-run
bin=$build/bench/parsec
cpus=${CPUS:-$(nproc)}
kernels=${KERNELS:-"streamcluster_cond streamcluster_barrier fluidanimate dedup bodytrack"}
settings=${SETTINGS:-"under 2x 4x emu hog"}
emu=vcpus=4,pcpus=2
variants="glibc pvrt"
"$run" --help 2>/dev/null | grep -q -- '--mn' && variants="$variants mn"
base=${BASE_BUILD:+$BASE_BUILD/bin/pvrt-run}
[ -n "$base" ] && variants="$variants base"
: "${SIZE_streamcluster_cond:=2048 6000}" "${SIZE_streamcluster_barrier:=2048 6000}"
: "${SIZE_fluidanimate:=512 2000}" "${SIZE_dedup:=200000 16}" "${SIZE_bodytrack:=256 2000}"
tmp=$(mktemp -d)
hog=
cleanup() {
	[ -n "$hog" ] && kill "$hog" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

threads_of() {
	case $1 in
	under) echo "$cpus" ;;
	2x | hog) echo $((2 * cpus)) ;;
	4x) echo $((4 * cpus)) ;;
	emu) echo 4 ;;
	esac
}

# run_one SETTING VARIANT KERNEL THREADS -> "elapsed checksum"
run_one() {
	s=$1 v=$2 k=$3 t=$4
	eval "extra=\${SIZE_$k:-}"
	case $s:$v in
	emu:glibc) set -- "$run" --locks=glibc --emu=$emu -- ;;
	emu:pvrt) set -- "$run" --emu=$emu -- ;;
	emu:mn) set -- "$run" --mn --emu=$emu -- ;;
	emu:base) set -- "$base" --emu=$emu -- ;;
	*:glibc) set -- ;;
	*:pvrt) set -- "$run" -- ;;
	*:mn) set -- "$run" --mn -- ;;
	*:base) set -- "$base" -- ;;
	esac
	# shellcheck disable=SC2086 # extra is a list of arguments
	if ! "$@" "$bin/parsec_$k" "$t" $extra >"$tmp/out" 2>"$tmp/err"; then
		echo "run.sh: $k $t ($s, $v) failed:" >&2
		cat "$tmp/out" "$tmp/err" >&2
		exit 1
	fi
	el=$(sed -n 's/^elapsed: //p' "$tmp/err")
	ck=$(sed -n 's/^checksum: //p' "$tmp/out")
	echo "$el $ck"
}

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg); cpus $cpus; variants: $variants" >&2
first=${FIRST_ROUND:-1}
case $first in
'' | *[!0-9]*) echo "run.sh: FIRST_ROUND must be a number, not '$first'" >&2; exit 2 ;;
esac
for r in $(seq "$first" $((first + rounds - 1))); do
	for s in $settings; do
		if [ "$s" = hog ]; then
			sh -c 'while :; do :; done' &
			hog=$!
		fi
		t=$(threads_of "$s")
		for k in $kernels; do
			# Rotate the variant order by the round number.
			order=$variants
			i=0
			while [ $i -lt $((r % $(echo $variants | wc -w))) ]; do
				order="$(echo $order | cut -d' ' -f2-) $(echo $order | cut -d' ' -f1)"
				i=$((i + 1))
			done
			for v in $order; do
				res=$(run_one "$s" "$v" "$k" "$t")
				echo "$r $s $k $t $v $res" >>"$tmp/results"
				echo "round $r $s $k t=$t $v: $res" >&2
			done
		done
		if [ -n "$hog" ]; then
			kill "$hog"
			wait "$hog" 2>/dev/null || true
			hog=
		fi
	done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
python3 - "$tmp/results" "$variants" <<'PY'
import sys, statistics
from collections import defaultdict
rows = [l.split() for l in open(sys.argv[1])]
variants = sys.argv[2].split()
times = defaultdict(dict)  # (kernel, setting, threads) -> {(round, variant): t}
cks = defaultdict(set)
for r, s, k, t, v, el, ck in rows:
    times[(k, s, t)][(r, v)] = float(el)
    cks[k].add(ck)
bad = [k for k in cks if len(cks[k]) != 1]
def cell(xs):
    return f"{statistics.median(xs):.3f} [{min(xs):.3f}-{max(xs):.3f}]"
hdr = "| kernel | setting | threads | " + " | ".join(f"{v} s" for v in variants) + " | " + \
      " | ".join(f"{v}/glibc speed" for v in variants[1:]) + " |"
print(hdr)
print("|" + "---|" * (hdr.count("|") - 1))
for (k, s, t), d in times.items():
    rs = sorted({r for r, _ in d})
    tcells = [cell([d[(r, v)] for r in rs if (r, v) in d]) for v in variants]
    rcells = []
    for v in variants[1:]:
        q = [d[(r, "glibc")] / d[(r, v)] for r in rs if (r, v) in d and (r, "glibc") in d]
        rcells.append(f"{statistics.median(q):.2f} [{min(q):.2f}-{max(q):.2f}]")
    print(f"| {k} | {s} | {t} | " + " | ".join(tcells) + " | " + " | ".join(rcells) + " |")
for k in sorted(cks):
    print(f"checksum {k}: {' '.join(sorted(cks[k]))}" + ("  MISMATCH" if k in bad else ""))
sys.exit(1 if bad else 0)
PY
