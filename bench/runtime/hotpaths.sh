#!/bin/bash
# Instructions per operation of the hot paths (uncontended mutex lock+unlock, yield, create+join,
# per ULT of batches of B ULTs created then joined (batchB), hint query), counted by callgrind
# inside bench_hotpaths' work(): (Ir(2N) - Ir(N)) / N, so set-up costs (and the first burst's
# stack mappings) cancel. HOTPATHS_MODES="yield batch64" picks modes. With two build trees it runs the same binary against each one's libraries and
# prints both; deterministic, unlike timings on a loaded machine.
# usage: bench/runtime/hotpaths.sh BUILD [OTHER-BUILD]
set -euo pipefail
bin=$1/bench/runtime/bench_hotpaths
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ir() { # LIBDIR MODE COUNT
	PVRT_WORKERS=1 PVRT_HINTS=none LD_LIBRARY_PATH=$1:$1/pvhint valgrind --tool=callgrind \
		--toggle-collect=work --callgrind-out-file="$tmp/cg" "$bin" "$2" "$3" >/dev/null 2>&1
	callgrind_annotate "$tmp/cg" | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}'
}
n=20000
printf '%-12s' op
for d in "$@"; do
	name=$d
	[ ${#name} -gt 14 ] && name=...${name: -11}
	printf ' %14s' "$name"
done
echo "   (instructions per op)"
modes=${HOTPATHS_MODES:-mutex yield create_join batch1 batch16 batch17 batch64 batch1000 hint}
for mode in $modes; do
	printf '%-12s' "$mode"
	for d in "$@"; do
		a=$(ir "$d" $mode $n)
		b=$(ir "$d" $mode $((2 * n)))
		ops=$n
		[ $mode = yield ] && ops=$((2 * n)) # two ULTs yield n times each
		printf ' %14s' $(((b - a) / ops))
	done
	echo
done
