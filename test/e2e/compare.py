#!/usr/bin/python3
"""End-to-end comparison of a k3c library (run through k3rt by k3-run) with
the NumPy reference (test/reference/k3ref.py), or of two k3-run runs.

  compare.py ref  --k3-run BIN --lib LIB --config C --weights W --mode f32|bf16
                  --prompt 1,2,3 --decode 4,5 [--chunks 2,1] [--rtol R]
                  [--states] [--variant V --expect-miss]
  compare.py self --k3-run BIN --lib LIB --weights W --prompt ... --decode ...
                  --chunks-a 12 --chunks-b 1,1,... [--rtol R]

--batch B runs B identical sequences in every k3-run call (the batched
kernels of a decode step); k3-run reports the first one's logits and states.

Errors are relative to the largest magnitude of each logits row (and of each
state tensor). Prints one line per comparison and exits non-zero on failure.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REF = os.path.join(HERE, "..", "reference", "k3ref.py")


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write("command failed: %s\n%s%s" % (" ".join(cmd), r.stdout, r.stderr))
        sys.exit(2)
    return r.stdout


def k3run(a, tmp, tag, chunks, lib=None):
    logits = os.path.join(tmp, tag + ".npy")
    states = os.path.join(tmp, tag + ".npz")
    source = (["--random-weights", a.weights[len("seed:"):]] if a.weights.startswith("seed:")
              else ["--weights", a.weights])
    cmd = [a.k3_run, lib or a.lib] + source + ["--prompt-ids", a.prompt,
           "--max-new-tokens", str(len(a.decode.split(","))), "--decode-ids", a.decode,
           "--logits-out", logits, "--state-out", states]
    if chunks:
        cmd += ["--chunks", chunks]
    if a.batch > 1:
        cmd += ["--batch", str(a.batch)]
    run(cmd)
    return np.load(logits), dict(np.load(states))


def reference(a, tmp, variant=None):
    logits = os.path.join(tmp, "ref.npy")
    states = os.path.join(tmp, "ref.npz")
    cmd = [sys.executable, REF, "--config", a.config, "--weights", a.weights, "--mode", a.mode,
           "--prompt-ids", a.prompt, "--decode-ids", a.decode,
           "--logits-out", logits, "--state-out", states]
    if variant:
        cmd += ["--variant", variant]
    run(cmd)
    return np.load(logits), dict(np.load(states))


def min_corr(x, y, floor):
    corr = min(float(np.corrcoef(x[i].astype(np.float64), y[i].astype(np.float64))[0, 1])
               for i in range(x.shape[0]))
    print("logits rows: min correlation %.5f (at least %g)" % (corr, floor))
    return corr >= floor


def per_row(x, y):
    for i in range(x.shape[0]):
        xi, yi = x[i].astype(np.float64), y[i].astype(np.float64)
        print("row %2d: rel err %.3g, correlation %.5f, argmax %s" % (
            i, np.abs(xi - yi).max() / np.abs(yi).max(), np.corrcoef(xi, yi)[0, 1],
            "same" if xi.argmax() == yi.argmax() else "differs"))


def row_error(x, y):
    x = x.astype(np.float64)
    y = y.astype(np.float64)
    return float((np.abs(x - y).max(axis=-1) / np.maximum(np.abs(y).max(axis=-1), 1e-30)).max())


def tensor_error(x, y):
    x = x.astype(np.float64)
    y = y.astype(np.float64)
    if x.shape != y.shape:
        return float("inf")
    return float(np.abs(x - y).max() / max(np.abs(y).max(), 1e-30))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["ref", "self"])
    p.add_argument("--k3-run", required=True)
    p.add_argument("--lib", required=True)
    p.add_argument("--config")
    p.add_argument("--weights", required=True,
                   help="a checkpoint, or seed:N (self: weights the library makes from N)")
    p.add_argument("--mode", default="f32")
    p.add_argument("--prompt", required=True)
    p.add_argument("--decode", required=True)
    p.add_argument("--chunks")
    p.add_argument("--chunks-a")
    p.add_argument("--chunks-b")
    p.add_argument("--lib-b", help="self: run chunks-b with this library")
    p.add_argument("--per-row", action="store_true",
                   help="print each logits row's error and correlation")
    p.add_argument("--batch", type=int, default=1,
                   help="identical sequences per k3-run call (the first is compared)")
    p.add_argument("--rtol", type=float, default=1e-4)
    p.add_argument("--min-corr", type=float,
                   help="also require this correlation of every logits row")
    p.add_argument("--states", action="store_true")
    p.add_argument("--kda-key-first", action="store_true",
                   help="the library keeps KDA states key-first [H, K, V] (ref: compared "
                        "transposed to the reference's [H, V, K]; self: --lib-b's)")
    p.add_argument("--variant")
    p.add_argument("--expect-miss", action="store_true")
    a = p.parse_args()
    ok = True

    def value_first(states):
        """The KDA states of a key-first library in the reference's layout."""
        if not a.kda_key_first:
            return states
        return {k: (np.swapaxes(v, -1, -2) if k.startswith("kda.recurrent.") else v)
                for k, v in states.items()}

    with tempfile.TemporaryDirectory() as tmp:
        if a.what == "self":
            la, sa = k3run(a, tmp, "a", a.chunks_a)
            lb, sb = k3run(a, tmp, "b", a.chunks_b, a.lib_b)
            sb = value_first(sb)
            if a.per_row:
                per_row(la, lb)
            e = row_error(la, lb)
            print("logits %s vs %s: max rel err %.3g (rtol %g)" % (a.chunks_a, a.chunks_b, e, a.rtol))
            ok &= e <= a.rtol
            if a.min_corr is not None:
                ok &= min_corr(la, lb, a.min_corr)
            for k in sorted(sa):
                e = tensor_error(sa[k], sb[k])
                if e > a.rtol:
                    print("state %s: max rel err %.3g" % (k, e))
                    ok = False
        else:
            lo, so = k3run(a, tmp, "lib", a.chunks)
            so = value_first(so)
            lr, sr = reference(a, tmp, a.variant)
            if lo.shape != lr.shape:
                print("logits shapes differ: %s vs %s" % (lo.shape, lr.shape))
                return 1
            if a.per_row:
                per_row(lo, lr)
            e = row_error(lo, lr)
            label = "variant %s" % a.variant if a.variant else "reference"
            print("logits vs %s (%s, %d rows): max rel err %.3g (rtol %g)" % (label, a.mode, lo.shape[0], e, a.rtol))
            if a.min_corr is not None:
                ok &= min_corr(lo, lr, a.min_corr)
            if a.expect_miss:
                # A wrong reference must miss the tolerance by a wide margin.
                ok &= e > 100 * a.rtol
            else:
                ok &= e <= a.rtol
            if a.states:
                worst = 0.0
                for k in sorted(sr):
                    if k not in so:
                        print("state %s missing from k3-run" % k)
                        ok = False
                        continue
                    e = tensor_error(so[k], sr[k])
                    worst = max(worst, e)
                    if e > a.rtol:
                        print("state %s: max rel err %.3g" % (k, e))
                        ok = False
                print("states after prefill (%d tensors): max rel err %.3g" % (len(sr), worst))
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
