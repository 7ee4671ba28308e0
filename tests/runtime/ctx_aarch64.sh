#!/bin/sh
# Cross-build runtime/arch/aarch64 with test_ctx.c and run it under qemu-user.
# Exit 77 (ctest: skipped) when the tools are missing.
src=$1
out=$2
cc=aarch64-linux-gnu-gcc
command -v $cc >/dev/null 2>&1 || { echo "skip: $cc not installed"; exit 77; }
$cc -O2 -Wall -Wextra -Werror -static -I"$src/runtime" -o "$out/test_ctx_aarch64" \
	"$src/tests/runtime/test_ctx.c" "$src/runtime/arch/aarch64/switch.S" \
	"$src/runtime/arch/aarch64/ctx.c" -lm || exit 1
command -v qemu-aarch64 >/dev/null 2>&1 || { echo "built; skip run: qemu-aarch64 not installed"; exit 77; }
exec qemu-aarch64 -L /usr/aarch64-linux-gnu "$out/test_ctx_aarch64"
