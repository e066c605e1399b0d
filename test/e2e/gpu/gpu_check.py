#!/usr/bin/env python3
"""GPU numerics check for a k3c library built with --target=sm_90.

Runs on a machine with an NVIDIA GPU and PyTorch (for device buffers only):
loads libk3rt_cuda.so (the mgpu* runtime calls) and the GPU library, drives
k3_forward with device buffers built from a checkpoint, and compares the
logits (prompt, then decode steps) and the state after the prompt with the
NumPy reference (test/reference/k3ref.py).

  gpu_check.py --lib LIB --cuda-rt libk3rt_cuda.so --config C --weights W
               --mode f32|bf16 --prompt 1,2,3 --decode 4,5 [--rtol R]
"""
import argparse
import ctypes
import json
import os
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "reference"))
from safetensors_np import Checkpoint  # noqa: E402
import k3ref  # noqa: E402


def desc_type(rank):
    class D(ctypes.Structure):
        _fields_ = [("allocated", ctypes.c_void_p), ("aligned", ctypes.c_void_p),
                    ("offset", ctypes.c_int64), ("sizes", ctypes.c_int64 * rank),
                    ("strides", ctypes.c_int64 * rank)]
    return D


def bf16_bits(a):
    a = np.ascontiguousarray(a, dtype=np.float32)
    return (a.view(np.uint32) >> 16).astype(np.uint16).view(np.int16)


class GPUModel:
    def __init__(self, lib, cuda_rt, weights, num_pages=64):
        self.rt = ctypes.CDLL(cuda_rt, mode=ctypes.RTLD_GLOBAL)
        self.rt.k3rt_cuda_last_error.restype = ctypes.c_char_p
        torch.cuda.init()
        self.lib = ctypes.CDLL(lib)
        self.lib.k3_manifest_json.restype = ctypes.c_char_p
        self.m = json.loads(self.lib.k3_manifest_json().decode())
        self.args = self.m["abi"]["args"]
        ck = Checkpoint(weights)
        self.w = {}
        for i, a in enumerate(self.args):
            if a["role"] != "weight":
                continue
            name = a["name"]
            if a.get("part"):
                name += ".weight_packed" if a["part"] == "packed" else ".weight_scale"
            if "{e}" in name:
                arr = np.stack([ck.get(name.replace("{e}", str(e))) for e in range(a["shape"][0])])
            else:
                arr = ck.get(name)
            if a["dtype"] == "bf16":
                arr = bf16_bits(arr)
            elif a["dtype"] == "f32":
                arr = np.ascontiguousarray(arr, dtype=np.float32)
            else:
                arr = np.ascontiguousarray(arr, dtype=np.uint8).view(np.int8)
            assert list(arr.shape) == a["shape"], (name, arr.shape)
            self.w[i] = torch.from_numpy(arr.copy()).cuda()
        self.num_pages = num_pages

    def new_state(self):
        st = {"len": 0, "arrs": {}}
        table = torch.arange(self.num_pages, dtype=torch.int32).pin_memory()
        length = torch.zeros(1, dtype=torch.int64).pin_memory()
        st["table"], st["length"] = table, length
        for i, a in enumerate(self.args):
            if a["role"] != "state":
                continue
            part = a.get("part")
            dt = torch.float32 if a["dtype"] == "f32" else torch.int16
            if part == "pool":
                st["arrs"][i] = torch.zeros([self.num_pages] + a["shape"][1:], dtype=dt, device="cuda")
            elif part == "page_table":
                st["arrs"][i] = table
            elif part == "length":
                st["arrs"][i] = length
            else:
                st["arrs"][i] = torch.zeros(a["shape"], dtype=dt, device="cuda")
        return st

    def forward(self, tokens, st):
        T = len(tokens)
        V = self.args[-1]["shape"][1]
        tok = torch.tensor(tokens, dtype=torch.int32).pin_memory()
        logits = torch.full([T, V], float("nan"), dtype=torch.float32, device="cuda")
        st["length"][0] = st["len"]
        keep, ptrs = [], (ctypes.c_void_p * len(self.args))()
        for i, a in enumerate(self.args):
            t = {"tokens": tok, "weight": self.w.get(i), "logits": logits}.get(a["role"])
            if a["role"] == "state":
                t = st["arrs"][i]
            d = desc_type(t.dim())()
            d.allocated = d.aligned = t.data_ptr()
            d.offset = 0
            for k in range(t.dim()):
                d.sizes[k] = t.shape[k]
                d.strides[k] = t.stride(k)
            keep.append(d)
            ptrs[i] = ctypes.cast(ctypes.pointer(d), ctypes.c_void_p)
        torch.cuda.synchronize()
        self.lib.k3_forward(ptrs)
        torch.cuda.synchronize()
        self.rt.k3rt_cuda_workspace_reset()
        err = self.rt.k3rt_cuda_last_error()
        if err:
            raise RuntimeError(err.decode())
        st["len"] += T
        return logits.cpu().numpy()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lib", required=True)
    p.add_argument("--cuda-rt", required=True)
    p.add_argument("--config", required=True)
    p.add_argument("--weights", required=True)
    p.add_argument("--mode", default="f32")
    p.add_argument("--prompt", required=True)
    p.add_argument("--decode", required=True)
    p.add_argument("--rtol", type=float, default=1e-4)
    a = p.parse_args()
    prompt = [int(x) for x in a.prompt.split(",")]
    decode = [int(x) for x in a.decode.split(",")]
    g = GPUModel(a.lib, a.cuda_rt, a.weights)
    r = k3ref.Model(a.config, a.weights, mode=a.mode)
    sg, sr = g.new_state(), r.new_state()
    t0 = time.time()
    rows_g = [g.forward(prompt, sg)[-1]]
    t1 = time.time()
    rows_r = [r.forward(prompt, sr)[-1]]
    for t in decode:
        rows_g.append(g.forward([t], sg)[-1])
        rows_r.append(r.forward([t], sr)[-1])
    t2 = time.time()
    lg, lr = np.array(rows_g, dtype=np.float64), np.array(rows_r)
    ok = np.isfinite(lg).all()
    err = float((np.abs(lg - lr).max(1) / np.abs(lr).max(1)).max())
    corr = min(float(np.corrcoef(lg[i], lr[i])[0, 1]) for i in range(len(lg)))
    print("gpu %s: %d rows, max rel err %.3g (rtol %g), min corr %.5f, finite %s"
          % (a.mode, len(lg), err, a.rtol, corr, ok))
    print("gpu prefill %.1f ms (first call includes module load), run %.2f s"
          % ((t1 - t0) * 1e3, t2 - t0))
    ok = ok and err <= a.rtol
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
