#!/bin/sh
# glibc parity: PARITY's output must be identical with and without the preload PRELOAD,
# and under the preload pthread_mutex_lock, pthread_cond_wait (GLIBC_2.3.2) and the old
# pthread_cond_wait@GLIBC_2.2.5 must all come from PRELOAD.
# usage: parity.sh PARITY PRELOAD
set -eu
prog=$1 preload=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$prog" > "$tmp/glibc.txt"
LD_PRELOAD="$preload" "$prog" > "$tmp/pvrt.txt"
LD_PRELOAD="$preload" "$prog" --which > "$tmp/which.txt"
if [ "$(grep -c "$(basename "$preload")" "$tmp/which.txt")" != 3 ]; then
	echo "parity: the preload did not provide the pthread functions:"; cat "$tmp/which.txt"; exit 1
fi
if ! diff -u "$tmp/glibc.txt" "$tmp/pvrt.txt"; then
	echo "parity: results differ between glibc and pvrt (above)"; exit 1
fi
echo "parity: $(wc -l < "$tmp/glibc.txt") results identical (hints: ${PVRT_HINTS:-auto})"
