#!/usr/bin/env python3
"""Where the host holds a decode step's GPU back, from the stderr of a run with
K3RT_CUDA_GRAPH_LOG=1 (libk3rt_cuda's graph log; plain or .xz):

  graph_log.py LOG[.xz]

For each batch of a k3_bench.py run (its calls end at the bench's
"decode   B=..." line), the medians over the calls that replayed every
segment: when the call's first launch came, when its first segment was
queued (the GPU starts on it), when the whole call was queued, each relative
to the last call's end, and how many replayed nodes were updated per call
(only the kernels whose grid or arguments changed should be). Calls that
built a graph (a new batch composition) are counted, not summarised. No GPU
needed."""
import argparse
import lzma
import re
import statistics
import sys

PREFIX = "k3rt-cuda graph: "
SEGMENT = re.compile(r"launches (\d+)-(\d+) (built|replayed), (\d+) nodes updated; "
                     r"host \+([\d.]+) us at the segment, \+([\d.]+) at cuGraphLaunch")
ALONE = re.compile(r"launches \d+-\d+ one by one")
CALL = re.compile(r"call of (\d+) launches queued, host \+([\d.]+) us"
                  r"(?: \(its first launch at \+([\d.]+)\))?")
BATCH = re.compile(r"^decode\s+B=(\d+)\s")


def calls(lines):
    """(batch, [call, ...]) groups; a call is a dict of its segments and
    totals."""
    groups, current, segs = [], [], []
    for line in lines:
        m = BATCH.match(line)
        if m:
            groups.append((int(m.group(1)), current))
            current = []
            continue
        if not line.startswith(PREFIX):
            continue
        text = line[len(PREFIX):]
        m = SEGMENT.match(text)
        if m:
            segs.append({"built": m.group(3) == "built", "updated": int(m.group(4)),
                         "queued": float(m.group(6))})
            continue
        if ALONE.match(text):
            segs.append({"built": False, "updated": 0, "queued": None})
            continue
        m = CALL.match(text)
        if m:
            current.append({"launches": int(m.group(1)), "done": float(m.group(2)),
                            "first_launch": float(m.group(3)) if m.group(3) else None,
                            "segments": segs})
            segs = []
    if current:
        groups.append((None, current))
    return groups


def describe(batch, group):
    replayed = [c for c in group if c["segments"] and not any(s["built"] for s in c["segments"])]
    name = "B=%d" % batch if batch is not None else "calls after the last batch"
    if not replayed:
        return "%s: %d calls, none replayed every segment" % (name, len(group))
    med = statistics.median
    first = [c["first_launch"] for c in replayed if c["first_launch"] is not None]
    queued = [c["segments"][0]["queued"] for c in replayed if c["segments"][0]["queued"] is not None]
    n = len(replayed[-1]["segments"])
    out = "%s: %d of %d calls replayed, %d launches in %d segment%s; medians: " % (
        name, len(replayed), len(group), replayed[-1]["launches"], n, "" if n == 1 else "s")
    if first:
        out += "first launch +%.1f us, " % med(first)
    out += "first segment queued +%.1f us, call queued +%.1f us after the last call's end; " % (
        med(queued), med([c["done"] for c in replayed]))
    out += "%g nodes updated per call" % med([sum(s["updated"] for s in c["segments"])
                                               for c in replayed])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log")
    a = ap.parse_args()
    opener = lzma.open if a.log.endswith(".xz") else open
    try:
        with opener(a.log, "rt", errors="replace") as f:
            groups = calls(f)
    except (OSError, lzma.LZMAError) as e:
        sys.exit("graph_log.py: cannot read %s: %s" % (a.log, e))
    if not any(group for _, group in groups):
        sys.exit("graph_log.py: %s has no calls of libk3rt_cuda's graph log "
                 "(run with K3RT_CUDA_GRAPH_LOG=1)" % a.log)
    for batch, group in groups:
        if group:
            print(describe(batch, group))


if __name__ == "__main__":
    main()
