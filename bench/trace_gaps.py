#!/usr/bin/env python3
"""Launches, kernel time and idle time between kernels of one step, from the
Chrome trace that `k3_bench.py --trace` writes (torch.profiler's export; plain
or gzipped JSON):

  trace_gaps.py TRACE.json[.gz]

The idle time is the span from the first kernel's start to the last one's end
minus the time some kernel runs: launch gaps (the GPU waiting for the host)
when one stream runs the step. No GPU or PyTorch needed."""
import argparse
import gzip
import json
import statistics
import sys


def summary(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        trace = json.load(f)
    kernels = sorted((e for e in trace.get("traceEvents", []) if e.get("cat") == "kernel"),
                     key=lambda e: e["ts"])
    if not kernels:
        raise ValueError("%s has no kernel events" % path)
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
    return ("%d launches, %.3f ms of kernels in a %.3f ms span, %.3f ms idle between "
            "kernels (median gap %.2f us)" % (s["launches"], s["kernel_ms"], s["span_ms"],
                                             s["idle_ms"], s["median_gap_us"]))


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
