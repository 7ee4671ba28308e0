#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""ctest tools.bench_report: `tools/bench-report --smoke` produces a report, not particular numbers.

Checks: exit status 0 and a progress line per step with the time left; report.md with the machine
section and a section for every part of the matrix; at least one PNG (real PNG data) when
matplotlib imports here, each one linked from report.md; results.json and every raw Google
Benchmark JSON parse, and the lock benchmark's JSON has the fairness and latency counters; bad
options are errors. usage: bench_report.py TOOLS/BENCH-REPORT BUILD-DIR
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

tool, build = sys.argv[1], sys.argv[2]
tmp = tempfile.mkdtemp(prefix="pvrt-bench-report.")


def fail(msg):
    print(f"tools.bench_report: FAIL: {msg}")
    sys.exit(1)


try:
    out = os.path.join(tmp, "report")
    r = subprocess.run([tool, "--smoke", "--build", build, "--out", out], capture_output=True,
                       text=True, timeout=600)
    sys.stdout.write(r.stderr)
    if r.returncode != 0:
        fail(f"--smoke exited {r.returncode}")
    steps = re.findall(r"^\[\s*(\d+)/(\d+)\] round .* left$", r.stderr, re.M)
    if not steps or int(steps[-1][0]) != int(steps[-1][1]) or len(steps) != int(steps[-1][1]):
        fail("not one progress line (with the time left) per step")

    md = open(os.path.join(out, "report.md")).read()
    for head in ("## Machine", "## Hint query cost", "## ULT create+join",
                 "## Lock throughput, short", "## Lock throughput, long", "Fairness, short",
                 "Acquisition latency, long", "## Condvar broadcast", "## Scheduler policies",
                 "## PARSEC-shaped kernels", "## Plots"):
        if head not in md:
            fail(f"report.md has no '{head}'")
    if shutil.which("sysbench") and "## Real programs: sysbench" not in md:
        fail("sysbench is installed but report.md has no sysbench section")
    for fact in ("CPUs", "kernel", "steal time", "load average", "hint source"):
        if f"| {fact}" not in md:
            fail(f"report.md's machine table has no '{fact}' row")

    pngs = glob.glob(os.path.join(out, "*.png"))
    have_mpl = subprocess.run(["/usr/bin/python3", "-c", "import matplotlib"],
                              capture_output=True).returncode == 0
    if have_mpl and not pngs:
        fail("matplotlib is installed but no PNG was written")
    if not have_mpl and "No plots: matplotlib cannot be imported" not in md:
        fail("no matplotlib and report.md does not say so")
    for p in pngs:
        with open(p, "rb") as f:
            if f.read(8) != b"\x89PNG\r\n\x1a\n":
                fail(f"{p} is not PNG data")
        if f"]({os.path.basename(p)})" not in md:
            fail(f"report.md does not link {os.path.basename(p)}")

    res = json.load(open(os.path.join(out, "results.json")))
    for k in ("machine", "results", "config", "errors"):
        if k not in res:
            fail(f"results.json has no '{k}'")
    raws = glob.glob(os.path.join(out, "raw", "*.json"))
    if not raws:
        fail("no raw JSON")
    for p in raws:
        j = json.load(open(p))
        if "context" not in j or not j.get("benchmarks"):
            fail(f"{p} is not Google Benchmark JSON with results")
    locks = json.load(open(sorted(glob.glob(os.path.join(out, "raw", "locks.*.json")))[0]))
    for b in locks["benchmarks"]:
        for c in ("ops_per_s", "fairness", "thread_min_ops", "thread_max_ops", "lat_p50_us",
                  "lat_p99_us", "lat_p999_us"):
            if c not in b:
                fail(f"{b['name']} has no counter {c}")
        if not 0 <= b["lat_p50_us"] <= b["lat_p99_us"] <= b["lat_p999_us"] or not b["lat_p999_us"]:
            fail(f"{b['name']}: latency percentiles not ordered")
        if not b["thread_min_ops"] <= b["thread_max_ops"]:
            fail(f"{b['name']}: slowest thread above the fastest")

    # Bad input is a clear error: status 2 and the reason.
    for args, why in ((["--rounds", "0"], "--rounds"), (["--out", out], "not empty"),
                      (["--build", os.path.join(tmp, "nope")], "no build directory")):
        r = subprocess.run([tool, "--smoke", *args], capture_output=True, text=True, cwd=tmp)
        if r.returncode != 2 or why not in r.stderr:
            fail(f"{args}: status {r.returncode}, stderr {r.stderr.strip()!r}")
    print("tools.bench_report: PASS")
finally:
    shutil.rmtree(tmp, ignore_errors=True)
