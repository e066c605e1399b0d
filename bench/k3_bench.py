#!/usr/bin/env python3
"""k3-bench: decode and prefill timing of a k3c GPU library and its peers.

Runs on the GPU machine (PyTorch is used for device buffers, the random
weights and the peers; the model math under test is the k3c library's).
One run measures, on the same GPU and with the same weights and inputs:

  * the hardware references: device-to-device copy bandwidth (torch copy_,
    bytes read + written) and a bf16 GEMM rate (8192^3 torch.matmul);
  * the k3c library: decode steps at batch 1, 8, 64 with CONTEXT tokens
    already in the MLA cache, and prefill of 4k / 32k tokens;
  * the PyTorch peer (bench/torch_k3.py, written from the spec), eager and
    under torch.compile, on the same shapes; logits compared with ours.

Timing (PERF_NOTES.md): warm-up calls first, then REPS timed calls, each
bracketed by torch.cuda.synchronize(); median and p10/p90 are reported.
Bytes that had to move per decode step = every non-expert weight once + the
embedding row per sequence + the expected distinct routed experts of the
batch (896 * (1 - (1 - 16/896)^B), uniform routing) + per sequence the KDA
state read and written and the MLA cache read.  A batch-B decode step is
one k3_forward call over B sequences (library ABI 2, docs/ABI.md); the
fraction of the copy bandwidth is computed from the bytes that had to move,
not from what our kernels re-read.

  k3_bench.py --lib k3-group.so --cuda-rt libk3rt_cuda.so --config C
              [--batches 1,8,64] [--prefill 4096,32768] [--context 8192]
              [--reps 10] [--peer] [--json OUT]
"""
import argparse
import ctypes
import json
import math
import os
import statistics
import sys
import time

import torch

from abi import desc_type, stats
from bytes_model import decode_bytes, prefill_flops
from trace_gaps import describe, summary

HERE = os.path.dirname(os.path.abspath(__file__))


def timed(fn, reps, warmup=2):
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        out.append(time.perf_counter() - t0)
    return stats(out)


def kernel_profile(fn, steps=3, top=20, trace=None, trace_steps=1):
    """Per-kernel GPU time of `fn` (one decode step) from the CUDA activity
    trace (torch.profiler / CUPTI sees the library's driver-API launches):
    [(kernel, ms per step, launches per step, share of the kernel time)].
    `trace`: also write the trace of `trace_steps` more steps there (every
    launch with its grid, block, registers and duration, and each step on
    the host as the user annotation "k3c step", which trace_gaps.py reads;
    Chrome trace JSON)."""
    from torch.profiler import ProfilerActivity, profile, record_function
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            fn()
        torch.cuda.synchronize()
    if trace:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as one:
            for _ in range(trace_steps):
                with record_function("k3c step"):
                    fn()
                torch.cuda.synchronize()
        one.export_chrome_trace(trace)
    rows = []
    for e in prof.key_averages():
        us = getattr(e, "device_time_total", None)
        if us is None:
            us = getattr(e, "cuda_time_total", 0)
        if us > 0 and not e.key.startswith("Memcpy") and not e.key.startswith("Memset"):
            rows.append((e.key, us / 1e3 / steps, e.count / steps))
    total = sum(r[1] for r in rows) or 1.0
    rows.sort(key=lambda r: -r[1])
    return [(k, ms, n, ms / total) for k, ms, n in rows[:top]], total


def copy_bandwidth(gib=4, reps=20):
    n = gib << 30
    a = torch.empty(n, dtype=torch.uint8, device="cuda").random_()
    b = torch.empty_like(a)
    s = timed(lambda: b.copy_(a), reps, warmup=3)
    del a, b
    return 2 * n / s["median_s"], s


def gemm_rate(n=8192, reps=20):
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    s = timed(lambda: a @ b, reps, warmup=3)
    return 2 * n ** 3 / s["median_s"], s


def random_weight(a, g):
    """Device-generated weights with the shapes and dtypes of the ABI."""
    shape, name = a["shape"], a["name"]
    if a["dtype"] == "u8":
        if a.get("part") == "scale":  # e8m0 around 2^-3 (spec: MXFP4 block scale)
            t = torch.randint(122, 126, shape, dtype=torch.uint8, device="cuda", generator=g)
        else:
            t = torch.randint(0, 256, shape, dtype=torch.uint8, device="cuda", generator=g)
        return t
    dt = torch.float32 if a["dtype"] == "f32" else torch.bfloat16
    if name.endswith("norm.weight"):
        t = torch.ones(shape, dtype=dt, device="cuda")
    elif name.endswith("e_score_correction_bias"):
        t = torch.zeros(shape, dtype=dt, device="cuda")
    elif name.endswith("A_log"):
        t = torch.empty(shape, dtype=dt, device="cuda").uniform_(0.0, 2.0, generator=g)
    elif name.endswith("dt_bias"):
        t = torch.empty(shape, dtype=dt, device="cuda").uniform_(-4.0, -1.0, generator=g)
    else:
        fan_in = shape[-1] if len(shape) > 1 else 1
        t = torch.empty(shape, dtype=dt, device="cuda").normal_(0.0, fan_in ** -0.5, generator=g)
    return t


class K3Lib:
    """The k3c library driven with device buffers (ABI: docs/ABI.md)."""

    def __init__(self, lib, cuda_rt, seed=0):
        self.rt = ctypes.CDLL(cuda_rt, mode=ctypes.RTLD_GLOBAL)
        self.rt.k3rt_cuda_last_error.restype = ctypes.c_char_p
        self.lib = ctypes.CDLL(lib)
        self.lib.k3_manifest_json.restype = ctypes.c_char_p
        self.m = json.loads(self.lib.k3_manifest_json().decode())
        self.args = self.m["abi"]["args"]
        g = torch.Generator(device="cuda").manual_seed(seed)
        self.w = {}
        for i, a in enumerate(self.args):
            if a["role"] == "weight":
                self.w[i] = random_weight(a, g)
        self.vocab = self.args[-1]["shape"][1]
        self.host_s = []  # per call: host time to enqueue k3_forward's work
        # per call: (before k3_forward, k3_forward, the reset's wait for the
        # GPU, after it) in seconds: where a step's wall time goes on the host
        self.host_parts = []

    def graph_stats(self):
        """libk3rt_cuda's graph counters (built, launched, nodes updated,
        kernels queued alone), or None for a runtime without them."""
        if not hasattr(self.rt, "k3rt_cuda_graph_stats"):
            return None
        out = (ctypes.c_uint64 * 4)()
        self.rt.k3rt_cuda_graph_stats(out)
        return list(out)

    def weight_dict(self):
        """Checkpoint-named views of the same device tensors (experts stacked)."""
        out = {}
        for i, a in enumerate(self.args):
            if a["role"] != "weight":
                continue
            key = a["name"]
            if a.get("part"):
                key += ".weight_packed" if a["part"] == "packed" else ".weight_scale"
            out[key] = self.w[i]
        return out

    def page_size(self):
        """Rows per MLA cache page: the MLA pool's [pages, P, R + dr]. (Since
        ABI 2 the KDA states have pools too; taking the first pool's second
        dimension, the KDA head count, sized the page tables and MLA pools
        for 96-row pages instead of 64: every call past the tables read and
        wrote out of bounds, which surfaced as CUDA 700/717 faults depending
        on the process's memory layout.)"""
        for a in self.args:
            if a.get("part") == "pool" and a["name"] == "mla.latent":
                return a["shape"][1]
        raise RuntimeError("the library has no MLA page pool (mla.latent)")

    def new_state(self, seqs, pages):
        """State of `seqs` sequences (docs/ABI.md): a slot pool per KDA state
        and conv tail, MLA page pools of `pages` pages per sequence, page
        tables (sequence i owns pages i*pages ..) and lengths."""
        st = {"arrs": {}, "seqs": seqs}
        st["table"] = torch.arange(seqs * pages, dtype=torch.int32).reshape(seqs, pages).pin_memory()
        st["length"] = torch.zeros(seqs, dtype=torch.int64).pin_memory()
        st["slots"] = torch.arange(seqs, dtype=torch.int32, device="cuda")
        for i, a in enumerate(self.args):
            if a["role"] != "state" or a.get("part") not in ("pool",):
                continue
            dt = torch.float32 if a["dtype"] == "f32" else torch.bfloat16
            n = seqs * pages if a["name"] == "mla.latent" else seqs
            st["arrs"][i] = torch.zeros([n] + a["shape"][1:], dtype=dt, device="cuda")
        return st

    def fill_random(self, st, length, g):
        """CONTEXT tokens of latent cache and a KDA state of typical size."""
        for i, a in enumerate(self.args):
            if i in st["arrs"]:
                st["arrs"][i].normal_(0.0, 0.05 if a["name"] == "kda.recurrent" else 1.0, generator=g)
        st["length"][:] = length

    def call(self, tokens, st, first=0):
        """Builds the argument list once; returns (run, logits). One sequence
        (`first`) and its next T tokens, or with T = st["seqs"] > 1 one
        token of every sequence (a decode batch)."""
        T = tokens.numel()
        rows = slice(0, T) if T == st["seqs"] and T > 1 else slice(first, first + 1)
        each = 1 if rows.stop - rows.start == T and T > 1 else T
        per_call = {"slots": st["slots"][rows], "page_table": st["table"][rows],
                    "length": st["length"][rows]}
        logits = torch.empty([T, self.vocab], dtype=torch.float32, device="cuda")
        keep, ptrs = [], (ctypes.c_void_p * len(self.args))()
        for i, a in enumerate(self.args):
            t = {"tokens": tokens, "weight": self.w.get(i), "logits": logits}.get(a["role"])
            if a["role"] == "state":
                t = st["arrs"][i] if a.get("part") == "pool" else per_call[a["part"]]
            d = desc_type(t.dim())()
            d.allocated = d.aligned = t.data_ptr()
            d.offset = 0
            for k in range(t.dim()):
                d.sizes[k] = t.shape[k]
                d.strides[k] = t.stride(k)
            keep.append(d)
            ptrs[i] = ctypes.cast(ctypes.pointer(d), ctypes.c_void_p)

        P, n = self.page_size(), per_call["page_table"].shape[1]
        lengths = per_call["length"].numpy()  # a view: no torch op per step

        def run():
            start = time.perf_counter()
            # The ABI's precondition (docs/ABI.md): the page tables cover
            # every row the call writes.
            need = (int(lengths.max()) + each + P - 1) // P
            if need > n:
                raise RuntimeError("page table of %d pages, the call needs %d" % (n, need))
            t0 = time.perf_counter()
            self.lib.k3_forward(ptrs)
            t1 = time.perf_counter()
            self.host_s.append(t1 - t0)
            self.rt.k3rt_cuda_workspace_reset()
            t2 = time.perf_counter()
            err = self.rt.k3rt_cuda_last_error()
            if err:
                raise RuntimeError(err.decode())
            lengths[:] += each  # st["length"][rows]'s memory, without a torch op
            self.host_parts.append((t0 - start, t1 - t0, t2 - t1, time.perf_counter() - t2))

        # The library writes `logits` on every call: the buffer lives as long
        # as the call does, whether the caller keeps it or not.
        run.keep = (keep, ptrs, per_call, logits)
        return run, logits


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--cuda-rt", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--batches", default="1,8,64")
    ap.add_argument("--prefill", default="4096,32768")
    ap.add_argument("--context", type=int, default=8192)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--peer", action="store_true")
    ap.add_argument("--k3c-max-batch", type=int, default=64,
                    help="decode batches above this run the peers only")
    ap.add_argument("--compare-prompt", type=int, default=16)
    ap.add_argument("--peer-dtype", default="bfloat16",
                    help="the peer's activation dtype: bfloat16, or float32 with an f32 library")
    ap.add_argument("--prefill-budget-s", type=float, default=120.0)
    ap.add_argument("--no-k3c-prefill", action="store_true",
                    help="prefill rows of the peers only")
    ap.add_argument("--prefill-chunk", type=int, default=4096,
                    help="k3c prefill in calls of at most this many tokens (0: one call)")
    ap.add_argument("--fla", action="store_true",
                    help="also the peer with fla-core's KDA kernels (needs fla-core)")
    ap.add_argument("--profile", action="store_true",
                    help="per-kernel breakdown of each k3c decode batch and prefill")
    ap.add_argument("--trace", help="with --profile: the launch trace of one decode step "
                    "(Chrome trace JSON: grid, block, registers, duration)")
    ap.add_argument("--trace-batch", type=int, default=1,
                    help="the decode batch whose step --trace records")
    ap.add_argument("--trace-steps", type=int, default=1,
                    help="decode steps --trace records (trace_gaps.py reports their medians)")
    ap.add_argument("--json")
    a = ap.parse_args()
    dev = torch.cuda.get_device_name()
    res = {"gpu": dev, "date": time.strftime("%Y-%m-%d"), "rows": []}
    bw, bws = copy_bandwidth()
    fl, fls = gemm_rate()
    res["copy_GBps"], res["gemm_bf16_TFLOPs"] = bw / 1e9, fl / 1e12
    print("%s: d2d copy %.0f GB/s (p10-p90 %.2f-%.2f ms), bf16 GEMM 8192^3 %.0f TFLOP/s"
          % (dev, bw / 1e9, bws["p10_s"] * 1e3, bws["p90_s"] * 1e3, fl / 1e12), flush=True)

    t0 = time.time()
    lib = K3Lib(a.lib, a.cuda_rt)
    torch.cuda.synchronize()
    print("weights: %.1f GiB generated on the device in %.1f s"
          % (sum(t.numel() * t.element_size() for t in lib.w.values()) / 2**30, time.time() - t0),
          flush=True)
    m = lib.m
    ps = lib.page_size()
    g = torch.Generator(device="cuda").manual_seed(1)
    gen = torch.Generator().manual_seed(2)

    peer = fla = None
    if a.peer or a.fla:
        sys.path.insert(0, HERE)
        import torch_k3
    if a.peer:
        peer = torch_k3.make_peer(a.config, lib.weight_dict(),
                                  compute_dtype=getattr(torch, a.peer_dtype))
    if a.fla:
        # The same PyTorch peer with its KDA core in fla-core's Triton kernels
        # (chunk_kda for prefill, fused_recurrent_kda for decode).
        fla = torch_k3.make_peer(a.config, lib.weight_dict(),
                                 compute_dtype=getattr(torch, a.peer_dtype),
                                 kda_backend="fla")

    def row(kind, shape, impl, s, nbytes=None, flops=None, tokens=1):
        r = {"kind": kind, "shape": shape, "impl": impl, **s,
             "tokens_per_s": tokens / s["median_s"]}
        txt = "%-8s %-14s %-16s median %9.3f ms  p10-p90 %9.3f-%9.3f ms  %10.1f tok/s" % (
            kind, shape, impl, s["median_s"] * 1e3, s["p10_s"] * 1e3, s["p90_s"] * 1e3,
            r["tokens_per_s"])
        if nbytes is not None:
            r["bytes"] = nbytes
            r["GBps"] = nbytes / s["median_s"] / 1e9
            r["frac_copy_bw"] = r["GBps"] * 1e9 / bw
            txt += "  %.2f GB moved, %7.1f GB/s = %.3f of copy bw" % (nbytes / 1e9, r["GBps"], r["frac_copy_bw"])
        if flops is not None:
            r["TFLOPs"] = flops / s["median_s"] / 1e12
            r["frac_gemm"] = flops / s["median_s"] / fl
            txt += "  %.1f TFLOP/s = %.4f of bf16 GEMM" % (r["TFLOPs"], r["frac_gemm"])
        res["rows"].append(r)
        print(txt, flush=True)
        if a.json:  # after every row: a run cut short keeps what it measured
            with open(a.json, "w") as f:
                json.dump(res, f, indent=1)

    # Same weights, same tokens, fresh state: our logits against the peer's.
    def compare(p, name):
        toks = torch.randint(3, lib.vocab, (a.compare_prompt + 2,), dtype=torch.int32, generator=gen)
        st = lib.new_state(1, a.compare_prompt // ps + 2)
        pst = p.m.new_state(1, a.compare_prompt + 4)
        ours, theirs = [], []
        with torch.no_grad():
            for part in (toks[:-2], toks[-2:-1], toks[-1:]):
                run, logits = lib.call(part.clone().pin_memory(), st)
                run()
                ours.append(logits[-1].double())
                theirs.append(p.m.forward(part.long()[None].cuda(), pst)[0, -1].double())
        errs = [float((o - t).abs().max() / t.abs().max()) for o, t in zip(ours, theirs)]
        corr = [float(torch.corrcoef(torch.stack([o, t]))[0, 1]) for o, t in zip(ours, theirs)]
        agree = [int(o.argmax()) == int(t.argmax()) for o, t in zip(ours, theirs)]
        res["compare" + ("" if name == "torch" else "_" + name)] = {
            "prompt": a.compare_prompt, "rel_err": errs, "corr": corr, "argmax_agree": agree}
        print("k3c vs %s (%s, %d-token prompt then 2 decode steps): max rel err %s, corr %s, argmax agree %s"
              % (name, a.peer_dtype, a.compare_prompt, ["%.3g" % e for e in errs],
                 ["%.4f" % c for c in corr], agree), flush=True)
        del st, pst
        torch.cuda.empty_cache()

    if a.compare_prompt > 0:
        for p, name in ((peer, "torch"), (fla, "torch-fla")):
            if p is not None:
                compare(p, name)

    # Decode: B sequences, CONTEXT tokens each already in the cache, one
    # call per step.
    def k3c_decode(B):
        pages = (a.context + a.reps + 8) // ps + 2
        st = lib.new_state(B, pages)
        lib.fill_random(st, a.context, g)
        toks = torch.randint(3, lib.vocab, (B,), dtype=torch.int32, generator=gen).pin_memory()
        runs = [lib.call(toks, st)[0]]
        lib.host_s.clear()
        lib.host_parts.clear()
        g0 = lib.graph_stats()
        s = timed(lambda: [r() for r in runs], a.reps, warmup=1)
        g1 = lib.graph_stats()
        # The host's share: k3_forward returns once its kernels are queued
        # (recorded, with graphs: libk3rt_cuda queues them at the reset).
        s["host_enqueue_s"] = statistics.median(lib.host_s[1:] or lib.host_s)
        print("decode B=%d: host enqueue %.3f ms per step (median)"
              % (B, s["host_enqueue_s"] * 1e3), flush=True)
        parts = lib.host_parts[1:] or lib.host_parts
        if parts:
            med = [statistics.median(p[k] for p in parts) for k in range(4)]
            s["host_parts_s"] = dict(zip(("before", "enqueue", "wait", "after"), med))
            print("decode B=%d: per call, medians: %.3f ms before k3_forward, %.3f in it, "
                  "%.3f waiting for the GPU (k3rt_cuda_workspace_reset), %.3f after"
                  % (B, *(x * 1e3 for x in med)), flush=True)
        if g0 is not None:
            d = [y - x for x, y in zip(g0, g1)]
            s["graphs"] = {"built": d[0], "launched": d[1], "nodes_updated": d[2],
                           "kernels_alone": d[3]}
            print("decode B=%d: graphs built %d, launched %d, nodes updated %d, "
                  "kernels queued alone %d" % (B, *d), flush=True)
        if a.profile:
            trace = a.trace if B == a.trace_batch else None
            kernels, total = kernel_profile(lambda: [r() for r in runs], trace=trace,
                                            trace_steps=a.trace_steps)
            print("decode B=%d kernels: %.3f ms of kernel time per step (wall %.3f ms)"
                  % (B, total, s["median_s"] * 1e3))
            for k, ms, n, share in kernels:
                print("  %-44s %9.3f ms %5.0f launches %5.1f%%" % (k[:44], ms, n, 100 * share))
            key = "profile_decode_b%d" % B
            res[key] = {"kernel_ms": total, "kernels": [
                {"name": k, "ms": ms, "launches": n, "share": share} for k, ms, n, share in kernels]}
            if trace:
                gaps = summary(trace)
                print("decode B=%d trace: " % B + describe(gaps))
                res[key]["trace"] = gaps
        return s

    for B in [int(x) for x in a.batches.split(",") if x]:
        shape, nbytes = "B=%d ctx=%d" % (B, a.context), decode_bytes(m, B, a.context)
        if B <= a.k3c_max_batch:
            row("decode", shape, "k3c", k3c_decode(B), nbytes=nbytes, tokens=B)
        else:
            print("decode %s k3c: skipped (--k3c-max-batch %d)" % (shape, a.k3c_max_batch))
        peers = [(peer, "eager", "torch-eager"), (peer, "compile", "torch-compile"),
                 (fla, "eager", "torch-fla-eager")]
        for p, mode, name in peers:
            if p is None:
                continue
            try:
                s = p.time_decode(B, a.context, a.reps, mode)
                row("decode", shape, name, s, nbytes=nbytes, tokens=B)
            except Exception as e:  # report, keep measuring the rest
                print("decode %s %s: failed: %s" % (shape, name, str(e)[:300]), flush=True)
        torch.cuda.empty_cache()

    # Prefill: one sequence of T tokens from an empty state.
    last = None

    def k3c_prefill(T):
        nonlocal last
        st = lib.new_state(1, T // ps + 2)
        tok = torch.randint(3, lib.vocab, (T,), dtype=torch.int32, generator=gen).pin_memory()
        # Chunked prefill (as a serving engine runs a long prompt): calls of
        # at most --prefill-chunk tokens, each continuing the last.
        chunk = a.prefill_chunk or T
        runs = [lib.call(tok[i:i + chunk], st)[0] for i in range(0, T, chunk)]

        def once():
            st["length"][0] = 0
            for run in runs:
                run()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        once()
        torch.cuda.synchronize()
        first = time.perf_counter() - t0
        # A call of 10 s or more is its own measurement (no second run).
        reps = 3 if first < 10 else 1
        s = timed(once, reps, warmup=0) if reps > 1 else stats([first])
        row("prefill", "T=%d" % T, "k3c", s, flops=prefill_flops(m, T), tokens=T)
        if len(runs) > 1:
            print("  (k3c: %d calls of %d tokens)" % (len(runs), chunk), flush=True)
        last = (T, s["median_s"])
        if a.profile and reps > 1:  # not for calls of 10 s and more
            kernels, total = kernel_profile(once, steps=1, top=12)
            print("prefill T=%d kernels: %.1f ms of kernel time" % (T, total))
            for k, ms, n, share in kernels:
                print("  %-44s %9.3f ms %5.0f launches %5.1f%%" % (k[:44], ms, n, 100 * share))
            res["profile_prefill_%d" % T] = {"kernel_ms": total, "kernels": [
                {"name": k, "ms": ms, "launches": n, "share": share} for k, ms, n, share in kernels]}
        del runs, st
        torch.cuda.empty_cache()
        return reps

    for T in [int(x) for x in a.prefill.split(",") if x]:
        reps = 3
        est = last[1] * (T / last[0]) ** 2 if last is not None else 0.0
        if a.no_k3c_prefill:
            reps = 1
        elif est > a.prefill_budget_s:
            print("prefill T=%d k3c: skipped, estimated %.0f s per call from T=%d (budget %.0f s)"
                  % (T, est, last[0], a.prefill_budget_s), flush=True)
        else:
            reps = k3c_prefill(T)
        for p, name in ((peer, "torch-eager"), (fla, "torch-fla-eager")):
            if p is None:
                continue
            try:
                s = p.time_prefill(T, reps, "eager")
                row("prefill", "T=%d" % T, name, s, flops=prefill_flops(m, T), tokens=T)
            except Exception as e:
                print("prefill T=%d %s: failed: %s" % (T, name, str(e)[:300]), flush=True)
            torch.cuda.empty_cache()

    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
