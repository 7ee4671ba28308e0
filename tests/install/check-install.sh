#!/usr/bin/env bash
# check-install.sh BUILD-DIR CONSUMER-SRC WORK-DIR: install BUILD-DIR into a scratch prefix, then
# build and run a consumer through find_package(pvrt) and through pkg-config.
set -euo pipefail
build=$1 src=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
libdir=$(dirname "$(find "$work/prefix" -name 'libpvrt.so' | head -1)")

cmake -S "$src" -B "$work/cmake" -DCMAKE_PREFIX_PATH="$work/prefix" >/dev/null
cmake --build "$work/cmake" >/dev/null
PVRT_HINTS=none LD_LIBRARY_PATH="$libdir" "$work/cmake/consumer"

PKG_CONFIG_PATH="$libdir/pkgconfig" cc -o "$work/pc-consumer" "$src/main.c" \
	$(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs pvrt)
PVRT_HINTS=none LD_LIBRARY_PATH="$libdir" "$work/pc-consumer"

# The installed programs run with no LD_LIBRARY_PATH (RUNPATH relative to the binary): pvrt-run
# with its preload into a threaded program, pvhint-top, the preload injected by hand.
prefix=$work/prefix
env -u LD_LIBRARY_PATH "$prefix/bin/pvrt-run" -- true
out=$(env -u LD_LIBRARY_PATH "$prefix/bin/pvrt-run" --hints=none --stats -- \
	"$prefix/bin/pvhint-top" --once --json --interval 0.05 2>&1)
grep -q '"source":"none"' <<<"$out" || { echo "installed pvrt-run + pvhint-top: $out"; exit 1; }
grep -q '^mutex' <<<"$out" || { echo "the preloaded program wrote no statistics: $out"; exit 1; }
env -u LD_LIBRARY_PATH PVRT_HINTS=emu PVRT_EMU=vcpus=2,pcpus=1 "$prefix/bin/pvhint-top" --once \
	--json --interval 0.1 | grep -q '"source":"emu"'
preload=$(find "$prefix" -name 'libpvrt-preload.so' | head -1)
env -u LD_LIBRARY_PATH LD_PRELOAD="$preload" PVRT_LOCKS=bogus /bin/true 2>&1 |
	grep -q "PVRT_LOCKS='bogus'" || { echo "the installed preload did not load"; exit 1; }
echo "install ok"
