"""The library ABI's argument (docs/ABI.md): a memref descriptor of rank R,
{allocated, aligned, offset, sizes[R], strides[R]}, as ctypes passes it to
k3_forward (bench/k3_bench.py, bench/host_bench.py)."""
import ctypes


def desc_type(rank):
    class D(ctypes.Structure):
        _fields_ = [("allocated", ctypes.c_void_p), ("aligned", ctypes.c_void_p),
                    ("offset", ctypes.c_int64), ("sizes", ctypes.c_int64 * rank),
                    ("strides", ctypes.c_int64 * rank)]
    return D
