#!/usr/bin/env python3
"""Whether two libraries compute the same bits for a batch: k3-run runs
each with the same random weights, prompt and batch (B identical sequences
in every call: the prompt's prefill, then decode steps of B tokens), and
what it writes, the first sequence's logits (the prompt's last position
and each decode step) and its state arrays after the prefill, is compared
byte for byte. The A/B check of a change that must not change the numerics
of the batched kernels (test/e2e/compare.py `self` checks one sequence);
bench/device-run.sh `same` runs it with SAMEB="B ...".

  python3 bench/same_batch.py --k3-run build/bin/k3-run --batch 8 A.so B.so

Prints PASS, or FAIL with the first array that differs, and exits non-zero
on FAIL or when k3-run fails (its output then follows). Needs numpy."""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np


def run(a, lib, out):
    cmd = [a.k3_run, lib, "--random-weights", str(a.seed), "--prompt-ids",
           a.prompt, "--max-new-tokens", str(a.new_tokens), "--batch",
           str(a.batch), "--logits-out", out + ".npy", "--state-out",
           out + ".npz"]
    if a.config:
        cmd[4:4] = ["--config", a.config]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        raise SystemExit("same_batch: k3-run failed on %s (exit %d)"
                         % (lib, r.returncode))
    return np.load(out + ".npy"), np.load(out + ".npz")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lib_a")
    ap.add_argument("lib_b")
    ap.add_argument("--k3-run", required=True)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--prompt", default=",".join(str(i) for i in range(3, 43)))
    ap.add_argument("--new-tokens", type=int, default=4)
    ap.add_argument("--config", help="for libraries without an embedded one")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        la, sa = run(a, a.lib_a, os.path.join(tmp, "a"))
        lb, sb = run(a, a.lib_b, os.path.join(tmp, "b"))
        arrays = [("logits", la, lb)]
        if sorted(sa.files) != sorted(sb.files):
            print("FAIL: the state arrays differ in name: %s against %s"
                  % (sorted(sa.files), sorted(sb.files)))
            return 1
        arrays += [("state " + k, sa[k], sb[k]) for k in sorted(sa.files)]
        for name, x, y in arrays:
            if x.shape != y.shape or x.dtype != y.dtype or \
                    x.tobytes() != y.tobytes():
                print("FAIL: %s differs (batch %d)" % (name, a.batch))
                return 1
    print("PASS: batch %d, logits %s and %d state arrays byte-equal"
          % (a.batch, "x".join(map(str, la.shape)), len(arrays) - 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
