#!/usr/bin/env python3
"""The host's time in `k3_forward` of a GPU library, on any machine: the
library runs against libk3rt_cuda with the stand-in CUDA driver
(test/Runtime/FakeCudaDriver.c, built as build/lib/libk3-fake-cuda.so), so
its kernels are recorded and queued as graphs but never run. Weights and
state pools get fake device addresses (the host never reads them); the page
tables and lengths are host memory, as bench/k3_bench.py passes them.

  K3RT_CUDA_DRIVER=build/lib/libk3-fake-cuda.so FAKE_CUDA_LAUNCH=ok \\
  FAKE_CUDA_MEM_MB=40000 K3RT_CUDA_WORKSPACE_MB=20000 \\
  python3 bench/host_bench.py LIB.so build/lib/libk3rt_cuda.so [--batch B]

Prints the median, p10 and p90 of the time in `k3_forward` per decode call
(B sequences of one token each, every context CONTEXT tokens long). A
measurement of this machine's host, not of the GPU machine's: compare
libraries in the same run, several runs each (hosts have fast and slow
modes). Needs numpy only."""
import argparse
import ctypes
import json
import time

import numpy as np

from abi import desc_type, stats


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("lib")
    ap.add_argument("cuda_rt")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--context", type=int, default=8192)
    ap.add_argument("--calls", type=int, default=2000)
    a = ap.parse_args()

    rt = ctypes.CDLL(a.cuda_rt, mode=ctypes.RTLD_GLOBAL)
    rt.k3rt_cuda_last_error.restype = ctypes.c_char_p
    lib = ctypes.CDLL(a.lib)
    lib.k3_manifest_json.restype = ctypes.c_char_p
    args = json.loads(lib.k3_manifest_json().decode())["abi"]["args"]
    pools = [x for x in args if x.get("part") == "pool" and x["name"] == "mla.latent"]
    if not pools:
        raise SystemExit("host_bench: %s has no MLA page pool (mla.latent)" % a.lib)
    page = pools[0]["shape"][1]
    B = a.batch
    pages = (a.context + 1 + page - 1) // page
    host = {"page_table": np.arange(B * pages, dtype=np.int32).reshape(B, pages),
            "length": np.full(B, a.context, dtype=np.int64)}

    keep, ptrs = [], (ctypes.c_void_p * len(args))()
    fake = 0x7F0000000000
    for i, x in enumerate(args):
        shape, arr = list(x["shape"]), None
        if x["role"] == "tokens":
            shape = [B]
        elif x["role"] == "logits":
            shape = [B, shape[1]]
        elif x["role"] == "state":
            part = x.get("part")
            if part in host:
                arr = host[part]
                shape = list(arr.shape)
            elif part == "pool":
                shape = [B * pages if x["name"] == "mla.latent" else B] + shape[1:]
            elif part == "slots":
                shape = [B]
        d = desc_type(len(shape))()
        # A fake device address per argument, 64 GiB apart.
        d.allocated = d.aligned = arr.ctypes.data if arr is not None else fake + (i << 36)
        d.offset = 0
        stride = 1
        for k in reversed(range(len(shape))):
            d.sizes[k], d.strides[k] = shape[k], stride
            stride *= shape[k]
        keep.append(d)
        ptrs[i] = ctypes.cast(ctypes.pointer(d), ctypes.c_void_p)

    ts = []
    for _ in range(a.calls):
        t0 = time.perf_counter()
        lib.k3_forward(ptrs)
        ts.append(time.perf_counter() - t0)
        rt.k3rt_cuda_workspace_reset()
        err = rt.k3rt_cuda_last_error()
        if err:
            raise SystemExit("host_bench: " + err.decode())
    s = stats(ts)
    print("k3_forward on the host, batch %d: median %.1f us, p10 %.1f, p90 %.1f (%d calls)"
          % (B, 1e6 * s["median_s"], 1e6 * s["p10_s"], 1e6 * s["p90_s"], s["n"]))


if __name__ == "__main__":
    main()
