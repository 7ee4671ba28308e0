# SPDX-License-Identifier: MIT
"""gdb commands for pvrt ULTs.

Load with:  (gdb) source tools/gdb/pvrt.py
Commands:
  pvrt ults [bt]   list every ULT (id, state, worker, what it waits on, entry function);
                   with 'bt', a frame-pointer backtrace of each suspended ULT
  pvrt workers     list workers (CPU, vCPU, running ULT, queue lengths, parked)
  pvrt signals     let the runtime's preemption signal through without stopping (done when
                   this file is sourced into a live runtime; run it again after pvrt_init)

Descriptors are found through rt_state.chunks (every descriptor lives in a chunk for the life
of the runtime). A suspended ULT's registers are on its stack at its saved stack pointer, in
the layout of runtime/arch/<arch>/switch.S.
"""
import gdb

STATES = {0: "free", 1: "running", 2: "ready", 3: "ready(inject)", 4: "blocked", 5: "done"}
FLAGS = {1: "primary", 2: "detached"}


def _sym(pc):
    try:
        b = gdb.block_for_pc(pc)
        while b is not None and b.function is None:
            b = b.superblock
        if b is not None and b.function is not None:
            sal = gdb.find_pc_line(pc)
            where = ""
            if sal.symtab is not None:
                where = " at %s:%d" % (sal.symtab.filename, sal.line)
            return "%s%s" % (b.function.print_name, where)
    except RuntimeError:
        pass
    out = gdb.execute("info symbol 0x%x" % pc, to_string=True).strip()
    return out.split(" in section")[0] if "No symbol" not in out else "??"


def _read_u64(addr):
    inf = gdb.selected_inferior()
    return int.from_bytes(bytes(inf.read_memory(addr, 8)), "little")


def _arch():
    return gdb.selected_frame().architecture().name()


def _saved_frame(sp):
    """(pc, fp) where a suspended context resumes, from its saved stack pointer."""
    if "aarch64" in _arch():
        return _read_u64(sp + 88), _read_u64(sp + 80)  # x30, x29
    return _read_u64(sp + 56), _read_u64(sp + 48)  # return address, rbp


def _backtrace(sp, limit=32):
    pc, fp = _saved_frame(sp)
    frames = [pc]
    while fp and len(frames) < limit:
        try:
            ret = _read_u64(fp + 8)
            fp = _read_u64(fp)
        except gdb.MemoryError:
            break
        if not ret:
            break
        frames.append(ret)
    return frames


def _ults():
    rt = gdb.parse_and_eval("rt_state")
    if not int(rt["running"]):
        return
    c = rt["chunks"]
    while int(c):
        n = int(c["n"])
        for i in range(n):
            u = c["u"][i]
            if int(u["state"]) != 0:
                yield u
        c = c["next"]


class Pvrt(gdb.Command):
    """pvrt ults [bt] | pvrt workers"""

    def __init__(self):
        super().__init__("pvrt", gdb.COMMAND_USER, prefix=True)


class PvrtUlts(gdb.Command):
    """List all ULTs; 'pvrt ults bt' adds backtraces of suspended ones."""

    def __init__(self):
        super().__init__("pvrt ults", gdb.COMMAND_USER)

    def invoke(self, arg, from_tty):
        bt = arg.strip() == "bt"
        rt = gdb.parse_and_eval("rt_state")
        running = {}
        for w in range(int(rt["nw"])):
            cur = rt["w"][w]["cur"]
            if int(cur):
                running[int(cur)] = w
        count = 0
        for u in _ults():
            count += 1
            addr = int(u.address)
            st = STATES.get(int(u["state"]), str(int(u["state"])))
            flags = ",".join(v for k, v in FLAGS.items() if int(u["flags"]) & k)
            fn = int(u["fn"])
            entry = _sym(fn) if fn else "(main)"
            wait = int(u["wait_addr"])
            line = "ULT %-8d %-13s last worker %-3d" % (int(u["id"]), st, int(u["last"]))
            if addr in running:
                line += " ON worker %d" % running[addr]
            if int(u["bound"]) >= 0:
                line += " bound %d" % int(u["bound"])
            if flags:
                line += " [%s]" % flags
            if wait:
                line += " waits on 0x%x" % wait
            line += "  fn %s  (struct pvrt_ult *)0x%x" % (entry.split(" at ")[0], addr)
            print(line)
            if bt and st in ("ready", "ready(inject)", "blocked") and addr not in running:
                sp = int(u["ctx"]["sp"])
                for k, pc in enumerate(_backtrace(sp)):
                    print("    #%-2d 0x%016x in %s" % (k, pc, _sym(pc)))
        print("%d ULT(s)" % count)


class PvrtWorkers(gdb.Command):
    """List the runtime's workers."""

    def __init__(self):
        super().__init__("pvrt workers", gdb.COMMAND_USER)

    def invoke(self, arg, from_tty):
        rt = gdb.parse_and_eval("rt_state")
        if not int(rt["running"]):
            print("pvrt is not running")
            return
        for i in range(int(rt["nw"])):
            w = rt["w"][i].dereference()
            ring = int(w["ring"]["tail"]) - int(w["ring"]["head"])
            cur = w["cur"]
            curs = "ULT %d" % int(cur["id"]) if int(cur) else "scheduler/idle"
            print("worker %-3d cpu %-3d vcpu %-3d %-16s ring %-4d inject %-4d parked %d timers %d"
                  % (i, int(w["cpu"]), int(w["vcpu"]), curs, ring, int(w["inj"]["n"]),
                     int(w["park_word"]), int(w["nheap"])))


class PvrtSignals(gdb.Command):
    """Pass the runtime's preemption signal to the program without stopping or printing."""

    def __init__(self):
        super().__init__("pvrt signals", gdb.COMMAND_USER)

    def invoke(self, arg, from_tty):
        sig = _preempt_signal()
        if not sig:
            print("pvrt: no preemption signal installed (not running, or PVRT_SLICE_NS=off)")
            return
        gdb.execute("handle SIG%d nostop noprint pass" % sig, to_string=not from_tty)


def _preempt_signal():
    """The real-time signal the runtime preempts ULTs with (0 if none or no live process)."""
    try:
        return int(gdb.parse_and_eval("rt_state.preempt_sig"))
    except gdb.error:
        return 0


Pvrt()
PvrtUlts()
PvrtWorkers()
PvrtSignals()
# A preempting runtime signals its workers every time slice: stopping at each would make
# stepping through a program impossible.
if _preempt_signal():
    gdb.execute("pvrt signals", to_string=True)
