#!/usr/bin/env python3
"""Launches, kernel time and idle time between kernels of one step, from the
Chrome trace that `k3_bench.py --trace` writes (torch.profiler's export; plain
or gzipped JSON):

  trace_gaps.py TRACE.json[.gz]

The idle time is the span from the first kernel's start to the last one's end
minus the time some kernel runs: launch gaps (the GPU waiting for the host)
when one stream runs the step. When the trace marks each step on the host
(user annotations named "k3c step", k3_bench.py since the twenty-eighth
session), the figures are the median over the steps, with the host's share:
from the step's start on the host to its first kernel (the GPU waiting for
the first launches) and from its last kernel's end to the step's end on the
host (the wait's return and the caller's work after it). No GPU or PyTorch
needed."""
import argparse
import gzip
import json
import statistics
import sys


STEP = "k3c step"


def summary(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        trace = json.load(f)
    events = trace.get("traceEvents", [])
    kernels = sorted((e for e in events if e.get("cat") == "kernel"), key=lambda e: e["ts"])
    if not kernels:
        raise ValueError("%s has no kernel events" % path)
    steps = sorted((e for e in events if e.get("name") == STEP and e.get("ph") == "X"
                    and e.get("cat") == "user_annotation"),
                   key=lambda e: e["ts"])
    if not steps:
        return one_step(kernels)
    per = []
    for i, st in enumerate(steps):
        stop = steps[i + 1]["ts"] if i + 1 < len(steps) else float("inf")
        mine = [e for e in kernels if st["ts"] <= e["ts"] < stop]
        if not mine:
            raise ValueError("%s: step %d has no kernel events" % (path, i))
        s = one_step(mine)
        s["start_us"] = mine[0]["ts"] - st["ts"]
        s["tail_us"] = st["ts"] + st["dur"] - max(e["ts"] + e["dur"] for e in mine)
        s["step_ms"] = st["dur"] / 1e3
        per.append(s)
    out = {k: statistics.median(s[k] for s in per) for k in per[0]}
    out["launches"] = int(out["launches"])
    out["steps"] = len(per)
    return out


def one_step(kernels):
    """The figures of one step's kernels, sorted by start."""
    busy, end = 0.0, kernels[0]["ts"]
    gaps = []
    for e in kernels:
        start, stop = e["ts"], e["ts"] + e["dur"]
        if start > end:
            gaps.append(start - end)
        busy += max(0.0, stop - max(start, end))
        end = max(end, stop)
    span = end - kernels[0]["ts"]
    return {"launches": len(kernels), "kernel_ms": sum(e["dur"] for e in kernels) / 1e3,
            "span_ms": span / 1e3, "idle_ms": (span - busy) / 1e3,
            "median_gap_us": statistics.median(gaps) if gaps else 0.0}


def describe(s):
    text = ("%d launches, %.3f ms of kernels in a %.3f ms span, %.3f ms idle between "
            "kernels (median gap %.2f us)" % (s["launches"], s["kernel_ms"], s["span_ms"],
                                             s["idle_ms"], s["median_gap_us"]))
    if "steps" in s:
        text += ("; medians of %d steps, each %.3f ms on the host: its first kernel "
                 "%.1f us after the step's start, its end %.1f us after its last kernel's"
                 % (s["steps"], s["step_ms"], s["start_us"], s["tail_us"]))
    return text


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    a = ap.parse_args()
    try:
        s = summary(a.trace)
    except (OSError, ValueError) as e:
        sys.stderr.write("trace_gaps.py: %s\n" % e)
        return 1
    print(describe(s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
