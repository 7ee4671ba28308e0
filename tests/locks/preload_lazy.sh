#!/bin/sh
# Source auto under the preload opens the hint source with the process's second thread, not at
# load: a single-threaded program run under the preload holds no bpf object (the program load
# costs the kernel's verification in every process: locks/preload.c, hints_deferred), and a
# threaded one gets the bpf source's maps once its first thread exists (where bpf is usable;
# opened on a thread of its own, so they appear a little later).
# usage: preload_lazy.sh PRELOAD TEST_PVHINT_BPF
set -u
preload=$1 bpftest=$2
fail() { echo "preload_lazy: FAIL: $*"; exit 1; }
unset PVRT_HINTS PVRT_EMU PVRT_MN
command -v python3 >/dev/null || { echo "preload_lazy: no python3: skipped"; exit 77; }

n=$(LD_PRELOAD="$preload" ls -l /proc/self/fd/ | grep -c bpf)
[ "$n" -eq 0 ] || fail "a single-threaded program holds $n bpf objects"
echo "single-threaded: no bpf object"

out=$(LD_PRELOAD="$preload" python3 -c '
import os, threading
def nbpf():
    n = 0
    for f in os.listdir("/proc/self/fd"):
        try:
            n += "bpf" in os.readlink("/proc/self/fd/" + f)
        except OSError:
            pass
    return n
before = nbpf()
t = threading.Thread(target=lambda: None)
t.start()
t.join()
# The source opens on a thread of its own (locks/preload.c, hints_open_async): wait for it, as
# long as a loaded machine needs.
import time
end = time.monotonic() + 60
while nbpf() == 0 and time.monotonic() < end:
    time.sleep(0.01)
print(before, nbpf())
') || fail "python3 under the preload failed"
set -- $out
[ "$1" -eq 0 ] || fail "bpf objects before the second thread: $1"
if "$bpftest" --usable >/dev/null 2>&1; then
	[ "$2" -gt 0 ] || fail "bpf is usable but no bpf object after the second thread"
	echo "threaded: $2 bpf objects after the first pthread_create"
else
	echo "threaded: bpf not usable here; only the single-threaded half checked"
fi
