#!/usr/bin/env python3
"""The roofline picture of a k3-bench run (PERF_NOTES.md: every kernel and
the whole step against the ceilings measured in the same run).

  roofline.py --json decode.json --manifest manifest.json -o roofline.png

decode.json is k3_bench.py's output of a run with --profile (the batch-1
kernel profile, the copy bandwidth and the bf16 GEMM rate it measured);
manifest.json is `k3c CONFIG --emit=manifest` of the benchmarked library.
Each kernel whose traffic is weights or state (bytes_model.kernel_model) is
placed at its arithmetic intensity and achieved FLOP/s, the whole batch-1
step at the bytes it must move (k3-bench's model) over its median time.
Prints the same numbers as a table. Needs matplotlib.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bytes_model import decode_bytes, kernel_model  # noqa: E402


def points(run, manifest):
    context = next(int(r["shape"].split("ctx=")[1]) for r in run["rows"]
                   if r["kind"] == "decode" and r["impl"] == "k3c" and r["shape"].startswith("B=1 "))
    step = next(r for r in run["rows"] if r["kind"] == "decode" and r["impl"] == "k3c"
                and r["shape"].startswith("B=1 "))
    model = kernel_model(manifest, context)
    prof = run["profile_decode_b1"]["kernels"]
    pts = []
    for family, (nbytes, flops) in model.items():
        prefixes = tuple(f + "_" for f in family.split("|"))
        ms = sum(k["ms"] for k in prof if k["name"].startswith(prefixes))
        if ms > 0:
            pts.append((family, nbytes, flops, ms * 1e-3))
    nbytes = decode_bytes(manifest, 1, context)
    flops = sum(f for _, _, f, _ in pts)
    pts.append(("whole step (batch 1)", nbytes, flops, step["median_s"]))
    return pts, context


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--manifest", required=True)
    ap.add_argument("-o", "--out", required=True)
    a = ap.parse_args()
    with open(a.json) as f:
        run = json.load(f)
    with open(a.manifest) as f:
        manifest = json.load(f)
    if "profile_decode_b1" not in run:
        sys.exit("roofline.py: %s has no batch-1 kernel profile (run k3_bench.py with --profile)"
                 % a.json)
    bw = run["copy_GBps"] * 1e9
    peak = run["gemm_bf16_TFLOPs"] * 1e12
    pts, context = points(run, manifest)

    print("%-34s %10s %10s %9s %9s %8s" % ("kernel", "bytes", "ms", "GB/s", "of copy", "FLOP/B"))
    for name, nbytes, flops, t in pts:
        print("%-34s %10.3g %10.3f %9.1f %9.3f %8.2f"
              % (name, nbytes, t * 1e3, nbytes / t / 1e9, nbytes / t / bw, flops / nbytes))

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=120)
    x = [10 ** (i / 20) for i in range(-40, 81)]
    ax.loglog(x, [min(bw * xi, peak) / 1e12 for xi in x], "k-", lw=1.5)
    ax.text(0.012, bw * 0.012 / 1e12 * 1.3, "copy %.0f GB/s" % (bw / 1e9), rotation=0, fontsize=8)
    ax.text(2e3, peak / 1e12 * 1.1, "bf16 GEMM %.0f TFLOP/s" % (peak / 1e12), fontsize=8, ha="right")
    for i, (name, nbytes, flops, t) in enumerate(pts):
        ai, perf = flops / nbytes, flops / t / 1e12
        whole = name.startswith("whole")
        ax.loglog([ai], [perf], "*" if whole else "o", ms=14 if whole else 8,
                  color="tab:red" if whole else "tab:blue")
        # Labels to the left of the step and of the far-right points (the
        # latter further down), above the points of intensity > 2, below the
        # others.
        left = whole or ai > 100
        above = not left and ai > 2
        ax.annotate("%s: %.2f ms, %.1f%% of copy bw" % (name, t * 1e3, 100 * nbytes / t / bw),
                    (ai, perf), textcoords="offset points", ha="right" if left else "left",
                    xytext=(-10 if left else 8,
                            10 if above else -28 if left and not whole else -14),
                    fontsize=7)
    ax.set_xlim(0.01, 2e3)
    ax.set_ylim(1e-3, 2 * peak / 1e12)
    ax.set_xlabel("arithmetic intensity (FLOP per byte that must move)")
    ax.set_ylabel("TFLOP/s achieved")
    ax.set_title("k3c decode, batch 1, ctx %d, %s, %s" % (context, run.get("gpu", "GPU"), run.get("date", "")),
                 fontsize=10)
    ax.grid(True, which="both", lw=0.3)
    fig.tight_layout()
    fig.savefig(a.out)
    print("wrote %s" % a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
