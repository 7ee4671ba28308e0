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
echo "install ok"
