#!/bin/sh
# Model-check locks/model/*.pml with Spin: safety (assertions) and invalid end states (a process
# blocked for ever: a lost wake-up). Exit 0 when every model verifies with no errors; 77 (skip)
# when spin or a C compiler is missing.
# usage: check.sh [WORKDIR [MODEL...]]   (MODEL: a name such as mutex, or the path of a .pml file
# elsewhere, such as runtime/model/futex_park.pml; default every model here)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
work=${1:-$(mktemp -d)}
[ $# -gt 0 ] && shift
mkdir -p "$work"
command -v spin >/dev/null 2>&1 || { echo "spin not installed: skipped"; exit 77; }
command -v cc >/dev/null 2>&1 || { echo "no C compiler: skipped"; exit 77; }
status=0
models=
for m in "$@"; do
	case $m in *.pml) f=$m ;; *) f=$here/$m.pml ;; esac
	[ -f "$f" ] || { echo "check.sh: no model $f"; exit 2; }
	models="$models $(cd "$(dirname "$f")" && pwd)/$(basename "$f")"
done
[ -n "$models" ] || models=$(ls "$here"/*.pml)
for model in $models; do
	name=$(basename "$model" .pml)
	dir="$work/$name"
	rm -rf "$dir" && mkdir -p "$dir" && cd "$dir"
	cp "$(dirname "$model")"/*.pml . && model=$(basename "$model")
	spin -a "$model" >spin.log 2>&1 || { cat spin.log; echo "$name: spin -a failed"; status=1; continue; }
	cc -O2 -DSAFETY -DCOLLAPSE -DVECTORSZ=4096 -o pan pan.c 2>cc.log || {
		cat cc.log; echo "$name: cannot compile pan.c"; status=1; continue; }
	./pan -m1000000 >pan.log 2>&1 || true
	if grep -q "errors: 0" pan.log && ! grep -q "max search depth too small" pan.log; then
		echo "$name: verified ($(grep -m1 'states, stored' pan.log | sed 's/^ *//'))"
	else
		cat pan.log
		[ -f "$model.trail" ] && spin -t -p -g -l "$model" | tail -60
		echo "$name: ERRORS"
		status=1
	fi
done
exit $status
