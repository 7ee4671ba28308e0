#!/bin/sh
# Every public header compiles alone, as strict C11 and as C++17, with warnings as errors; and
# every initialiser macro works in both (C++ before C++20 has no designated initialisers).
# usage: headers.sh CC CXX INCLUDE_DIR
set -eu
cc=$1 cxx=$2 inc=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
flags="-Wall -Wextra -Werror -pedantic-errors -I$inc"
bad=0
compile() { # LANG STD FILE: the compiler's complaint, if any, is printed
	if [ "$1" = c ]; then
		"$cc" -std="$2" $flags -fsyntax-only -x c "$3" 2> "$tmp/err" && return 0
	else
		"$cxx" -std="$2" $flags -fsyntax-only -x c++ "$3" 2> "$tmp/err" && return 0
	fi
	echo "--- $(head -1 "$3") as $2:"
	cat "$tmp/err"
	bad=1
}
n=0
for h in "$inc"/pvrt/*.h; do
	name=pvrt/$(basename "$h")
	printf '/* %s */\n#include <%s>\ntypedef int headers_sh_not_empty;\n' "$name" "$name" > "$tmp/one.c"
	compile c c11 "$tmp/one.c"
	compile cxx c++17 "$tmp/one.c"
	n=$((n + 1))
done
# Each initialiser macro of the public headers, as a program would use it.
macros=$(cat "$inc"/pvrt/*.h | sed -n 's/^#define \(PVRT_[A-Z_]*_INIT\(IALIZER\)\{0,1\}\)\b.*/\1/p' | sort -u)
{
	echo "/* the initialiser macros */"
	for h in "$inc"/pvrt/*.h; do echo "#include <pvrt/$(basename "$h")>"; done
	i=0
	for m in $macros; do
		case $m in
		PVRT_*MUTEX_INITIALIZER) t=pvrt_mutex_t ;;
		PVRT_COND_INITIALIZER) t=pvrt_cond_t ;;
		PVRT_RWLOCK_INITIALIZER) t=pvrt_rwlock_t ;;
		PVRT_SPINLOCK_INITIALIZER) t=pvrt_spinlock_t ;;
		PVRT_ONCE_INIT) t=pvrt_once_t ;;
		PVRT_CONFIG_INIT) t="struct pvrt_config" ;;
		PVRT_THREAD_ATTR_INIT) t=pvrt_thread_attr_t ;;
		PVRT_ZERO_INITIALIZER) continue ;; # the others use it
		*) echo "#error headers.sh: which type does $m initialise?"; continue ;;
		esac
		# Alone, in an array and as a member of an enclosing initialiser (-Wmissing-braces).
		echo "$t v$i = $m;"
		echo "$t a$i[2] = {$m, $m};"
		echo "struct s$i { int x; $t v; } n$i = {1, $m};"
		i=$((i + 1))
	done
	echo "int main(void) { return 0; }"
} > "$tmp/init.c"
compile c c11 "$tmp/init.c"
compile cxx c++11 "$tmp/init.c"
compile cxx c++17 "$tmp/init.c"
# Every public function says where it may be called: its comment has a "Context:" line
# (include/pvrt/export.h defines the contexts).
for h in "$inc"/pvrt/*.h; do
	awk -v f="$h" '
		/^\/\*/ { c = "" }
		/^\/\*|^ \*/ { c = c $0 }
		/^(PVRT_API|static inline) / && /\(/ && !/extern/ {
			if (c !~ /Context:/) { print f ": no Context: line for " $0; bad = 1 }
			c = ""
		}
		END { exit bad }' "$h" || bad=1
done
[ $bad = 0 ] && echo "headers: $n public headers and $(echo $macros | wc -w) initialisers compile as C11 and C++17"
exit $bad
