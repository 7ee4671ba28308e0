#!/bin/sh
# Build the libFuzzer targets with clang-14 (ASan + UBSan) and run each for SECONDS over the
# checked-in corpus (new inputs go to a scratch directory, not into the repository).
# usage: run-fuzz.sh SOURCE-DIR WORK-DIR [SECONDS]   (exit 77 when clang-14/libFuzzer is missing)
set -u
src=$1 work=$2 secs=${3:-5}
cc=$(command -v clang-14 || command -v clang || true)
if [ -z "$cc" ]; then
	echo "fuzz: skipped: clang-14 not installed (tools/setup installs it)"
	exit 77
fi
mkdir -p "$work"
if ! echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }' |
	"$cc" -x c -fsanitize=fuzzer -o "$work/probe" - 2>/dev/null; then
	echo "fuzz: skipped: $cc cannot link libFuzzer (libclang-rt-14-dev)"
	exit 77
fi
flags="-g -O1 -std=gnu11 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
	-I$src/include -I$src/os -I$src/pvhint"
lib=$(echo "$src"/pvhint/*.c) # all of libpvhint; src_bpf.c without PVRT_HAVE_BPF: the stub
fail=0
for t in emu_spec hint_page; do
	# shellcheck disable=SC2086
	if ! "$cc" $flags -o "$work/fuzz_$t" "$src/tests/fuzz/fuzz_$t.c" $lib -lpthread -lm; then
		echo "fuzz: cannot build fuzz_$t"
		exit 1
	fi
	mkdir -p "$work/new_$t"
	if ! "$work/fuzz_$t" -max_total_time="$secs" -print_final_stats=1 -artifact_prefix="$work/" \
		"$work/new_$t" "$src/tests/fuzz/corpus/$t" >"$work/$t.log" 2>&1; then
		echo "fuzz: fuzz_$t found a failure:"
		tail -40 "$work/$t.log"
		fail=1
	else
		echo "fuzz_$t: $(grep -E 'stat::number_of_executed_units' "$work/$t.log" | awk '{print $2}') runs in ${secs}s, no failure"
	fi
done
exit $fail
