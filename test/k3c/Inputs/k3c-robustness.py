#!/usr/bin/env python3
"""Runs k3c on every config in models/ and on mutated copies of the
k3-tiny and kimi-k3 configs (deleted keys, wrong types, extreme values,
random byte flips). k3c must never crash: exit 0, or exit 1 with exactly one
'k3c: error:' line on stderr and no output file left behind.

usage: k3c-robustness.py K3C MODELS_DIR WORK_DIR [--count N] [--seed S]
Prints one line per failure and a summary; exits 1 on any failure.
"""
import argparse
import copy
import json
import os
import random
import subprocess
import sys

EXTREMES = [0, -1, 1, 2**31, 2**63 - 1, -2**63, 2**64 - 1, 1e308, -1e308, 1e-320,
            0.5, "", "x", None, True, [], {}, [1, 2], {"a": 1}]


def paths(node, prefix=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield prefix + (k,)
            yield from paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield prefix + (i,)
            yield from paths(v, prefix + (i,))


def setp(root, path, value=None, delete=False):
    node = root
    for k in path[:-1]:
        node = node[k]
    if delete:
        del node[path[-1]]
    else:
        node[path[-1]] = value


def mutate(config, text, rng):
    kind = rng.randrange(4)
    if kind == 3:  # random byte flips of the text
        b = bytearray(text, "utf-8")
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(b))
            b[i] = rng.randrange(256)
        return bytes(b), "bytes"
    c = copy.deepcopy(config)
    ps = list(paths(c))
    for _ in range(rng.randint(1, 3)):
        p = rng.choice(ps)
        try:
            if kind == 0:
                setp(c, p, delete=True)
            elif kind == 1:
                setp(c, p, rng.choice(EXTREMES))
            else:
                setp(c, p, rng.choice([rng.randint(-4, 300), rng.randint(0, 2**40)]))
        except (KeyError, IndexError, TypeError):
            pass
    return json.dumps(c).encode(), ("delete", "type", "value")[kind]


def run(k3c, path, out, emit):
    if os.path.exists(out):
        os.remove(out)
    try:
        p = subprocess.run([k3c, path, "--quiet", "--emit=" + emit, "-o", out],
                           capture_output=True, timeout=120)
    except subprocess.TimeoutExpired:
        return "timeout (120 s)"
    err = p.stderr.decode("utf-8", "replace")
    if p.returncode < 0:
        return "killed by signal %d: %s" % (-p.returncode, err[-400:])
    if p.returncode == 0:
        return None
    if p.returncode != 1:
        return "exit %d: %s" % (p.returncode, err[-400:])
    lines = [l for l in err.splitlines() if l.strip()]
    if len(lines) != 1 or not lines[0].startswith("k3c: error: "):
        return "not one 'k3c: error:' line: %r" % err[-400:]
    if os.path.exists(out):
        return "output file left behind after an error"
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("k3c")
    ap.add_argument("models")
    ap.add_argument("work")
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    out = os.path.join(a.work, "out")
    failures = 0
    runs = 0
    for m in sorted(os.listdir(a.models)):
        cfg = os.path.join(a.models, m, "config.json")
        if os.path.exists(cfg):
            for emit in ("k3", "manifest"):
                runs += 1
                r = run(a.k3c, cfg, out, emit)
                if r:
                    failures += 1
                    print("FAIL %s --emit=%s: %s" % (cfg, emit, r))
    rng = random.Random(a.seed)
    bases = []
    for m in ("k3-tiny", "kimi-k3"):
        p = os.path.join(a.models, m, "config.json")
        text = open(p).read()
        bases.append((m, json.loads(text), text))
    kinds = {}
    for i in range(a.count):
        name, config, text = bases[i % len(bases)]
        data, kind = mutate(config, text, rng)
        path = os.path.join(a.work, "%s-%d.json" % (name, i))
        with open(path, "wb") as f:
            f.write(data)
        runs += 1
        # k3-tiny compiles through the host lowering (--emit=linalg); the
        # full K3 only imports (its lowering takes seconds).
        r = run(a.k3c, path, out, "linalg" if name == "k3-tiny" else "manifest")
        kinds[kind] = kinds.get(kind, 0) + 1
        if r:
            failures += 1
            print("FAIL %s (%s): %s" % (path, kind, r))
        else:
            os.remove(path)
    print("k3c-robustness: %d runs (%s), %d failures" % (
        runs, ", ".join("%s %d" % kv for kv in sorted(kinds.items())), failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
