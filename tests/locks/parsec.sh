#!/bin/sh
# The PARSEC-shaped kernels (bench/parsec) at short sizes, each once with glibc's locks and once
# under pvrt-run (and under the emulator with pvrt's locks): every run must pass the kernel's
# own check and print the same checksum as glibc's. Correctness only; timing is run.sh's.
# usage: parsec.sh PVRT-RUN KERNEL-DIR
set -u
run=$1 dir=$2
fail() { echo "parsec: FAIL: $*"; exit 1; }
# kernel, then its arguments after THREADS (short sizes)
check() {
	k=$1 t=$2
	shift 2
	g=$("$dir/parsec_$k" "$t" "$@" 2>/dev/null) || fail "$k (glibc): exit $?"
	p=$("$run" -- "$dir/parsec_$k" "$t" "$@" 2>/dev/null) || fail "$k (pvrt-run): exit $?"
	e=$("$run" --emu=vcpus=4,pcpus=2 -- "$dir/parsec_$k" "$t" "$@" 2>/dev/null) ||
		fail "$k (pvrt-run --emu): exit $?"
	case $g in checksum:*) ;; *) fail "$k: no checksum in '$g'" ;; esac
	[ "$g" = "$p" ] || fail "$k $t: glibc '$g' vs pvrt-run '$p'"
	[ "$g" = "$e" ] || fail "$k $t: glibc '$g' vs pvrt-run --emu '$e'"
	echo "$k $t threads: OK ($g)"
}
for t in 2 5; do
	check streamcluster_cond $t 256 200
	check streamcluster_barrier $t 256 200
	check fluidanimate $t 64 100
	check dedup $t 3000 4
	check bodytrack $t 64 100
done
echo "parsec: OK"
