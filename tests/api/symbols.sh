#!/bin/sh
# Every symbol a library exports carries its version node (the version scripts are applied), and
# the exported set is the public one: nothing outside the library's prefix.
# usage: symbols.sh LIBRARY VERSION PREFIX
set -eu
lib=$1 ver=$2 prefix=$3
# objdump -T: defined dynamic symbols have a section other than *UND*; the version is the column
# before the name.
syms=$(objdump -T "$lib" | awk '$0 ~ /^[0-9a-f]+ / && $0 !~ /\*UND\*/ { print $(NF-1), $NF }')
[ -n "$syms" ] || { echo "$lib: no exported symbols"; exit 1; }
bad=$(echo "$syms" | awk -v v="$ver" -v p="$prefix" '
	$2 == v { next }                 # the version node itself
	$1 != v || index($2, p) != 1 { print }')
if [ -n "$bad" ]; then
	echo "$lib: exported symbols without version $ver or outside $prefix*:"
	echo "$bad"
	exit 1
fi
echo "$lib: $(echo "$syms" | grep -c " $prefix") symbols, all at $ver"
