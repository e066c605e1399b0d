"""What the benchmarks that call k3_forward through ctypes share
(bench/k3_bench.py, bench/host_bench.py): the library ABI's argument
(docs/ABI.md), a memref descriptor of rank R {allocated, aligned, offset,
sizes[R], strides[R]}, and the summary of a list of call times."""
import ctypes
import statistics


def desc_type(rank):
    class D(ctypes.Structure):
        _fields_ = [("allocated", ctypes.c_void_p), ("aligned", ctypes.c_void_p),
                    ("offset", ctypes.c_int64), ("sizes", ctypes.c_int64 * rank),
                    ("strides", ctypes.c_int64 * rank)]
    return D


def stats(ts):
    """Median, p10 and p90 (seconds) of the times `ts`, and their count."""
    ts = sorted(ts)
    q = lambda p: ts[min(len(ts) - 1, int(round(p * (len(ts) - 1))))]
    return {"median_s": statistics.median(ts), "p10_s": q(0.1), "p90_s": q(0.9), "n": len(ts)}
