#!/usr/bin/env python3
"""Per-kernel decode times of one library on two GPUs, side by side: which
kernels gain from the second GPU's bandwidth and which do not. Reads the
JSON that bench/k3_bench.py --profile --json writes (its per-batch
`profile_decode_bB` entries and `copy_GBps`); each side may name several
files (runs of one machine), whose times are averaged.

  kernel_scaling.py --a H100-RUN.json ... --b H200-RUN.json ...

Prints, per decode batch both sides profiled, a Markdown table: each
kernel's ms per step on A and on B and the ratio A / B, heaviest on B
first, under the ratio of the two copy bandwidths. A kernel bound by DRAM
bandwidth speeds up about as much as the copy does; a ratio near 1 is a
kernel bound by something the second GPU does not have more of (latency,
instruction issue, the tensor cores' rate). Needs no GPU."""
import argparse
import json
import statistics
import sys


def side(paths):
    """(gpu name, mean copy GB/s, {batch: {kernel: mean ms, '': kernel total}})."""
    runs = []
    for p in paths:
        with open(p) as f:
            runs.append(json.load(f))
    names = sorted({r.get("gpu", "?") for r in runs})
    if len(names) > 1:
        raise ValueError("runs of different GPUs on one side: %s" % ", ".join(names))
    times = {}
    for r in runs:
        for key, prof in r.items():
            if not key.startswith("profile_decode_b") or not isinstance(prof, dict):
                continue
            batch = int(key[len("profile_decode_b"):])
            per = times.setdefault(batch, {})
            per.setdefault("", []).append(prof["kernel_ms"])
            for k in prof["kernels"]:
                per.setdefault(k["name"], []).append(k["ms"])
    means = {b: {k: statistics.mean(v) for k, v in per.items()} for b, per in times.items()}
    return names[0], statistics.mean(r["copy_GBps"] for r in runs), means


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", nargs="+", required=True, help="k3_bench.py JSON of GPU A")
    ap.add_argument("--b", nargs="+", required=True, help="k3_bench.py JSON of GPU B")
    a = ap.parse_args()
    try:
        (na, ca, ta), (nb, cb, tb) = side(a.a), side(a.b)
    except (OSError, ValueError, KeyError) as e:
        sys.exit("kernel_scaling.py: %s" % e)
    batches = sorted(set(ta) & set(tb))
    if not batches:
        sys.exit("kernel_scaling.py: no decode batch profiled on both sides")
    print("A: %s, copy %.0f GB/s; B: %s, copy %.0f GB/s; copy ratio B / A %.2f"
          % (na, ca, nb, cb, cb / ca))
    for batch in batches:
        print("\nB=%d\n\n| kernel | A ms | B ms | A / B |\n|---|---|---|---|" % batch)
        rows = sorted((k for k in tb[batch] if k in ta[batch]), key=lambda k: (k != "", -tb[batch][k]))
        for k in rows:
            print("| %s | %.3f | %.3f | %.2f |" % (k or "all kernels", ta[batch][k], tb[batch][k],
                                                  ta[batch][k] / tb[batch][k]))


if __name__ == "__main__":
    main()
