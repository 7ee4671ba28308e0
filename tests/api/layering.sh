#!/bin/sh
# The include rules of README.md ("Layering"): each part includes the public headers, the OS
# layer and, of the parts below it, one header only. Prints every include that breaks them.
# usage: layering.sh SOURCE_DIR
set -eu
cd "$1"
bad=0
# check PART ALLOWED...: every #include "x" in PART/ names a file of PART/ (or its arch/) or one
# of ALLOWED.
check() {
	part=$1
	shift
	for f in $(find "$part" -name '*.[ch]' | sort); do
		for inc in $(sed -n 's/^#[ \t]*include[ \t]*"\([^"]*\)".*/\1/p' "$f"); do
			[ -e "$part/$inc" ] || [ -e "$(dirname "$f")/$inc" ] && continue
			ok=0
			for a in "$@"; do [ "$inc" = "$a" ] && ok=1; done
			[ $ok = 1 ] || { echo "$f includes \"$inc\" (allowed: $part/ and $*)"; bad=1; }
		done
	done
}
check os
check pvhint pvrt_os.h
check sched pvrt_os.h
check runtime pvrt_os.h pvrt_sched.h
check locks pvrt_os.h wait.h
# Public headers: only <pvrt/...> and system headers, never the private ones.
for f in include/pvrt/*.h; do
	if grep -n '^#[ \t]*include[ \t]*"' "$f"; then
		echo "$f: a public header includes a private one"
		bad=1
	fi
done
[ $bad = 0 ] && echo "layering: ok"
exit $bad
