#!/usr/bin/env python3
"""k3_fill_random of a k3c library (docs/ABI.md) against an independent
NumPy implementation of its definition: SplitMix64's finaliser of
seed * 0x9E3779B97F4A7C15 + stream * 0xD1B54A32D192ED03 + element, top 24
bits h; bytes (h mod range) + off, floats float((h mod range) + off) * scale
(bf16 rounded to nearest even), packed little-endian into 32-bit words.

  random-fill.py LIB   -> PASS, or the first mismatching case and exit 1
"""
import ctypes
import sys

import numpy as np

M64 = (1 << 64) - 1


def bits(seed, stream, n):
    e = np.arange(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = (np.uint64(seed * 0x9E3779B97F4A7C15 & M64)
             + np.uint64(stream * 0xD1B54A32D192ED03 & M64) + e)
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(40)).astype(np.int64)


def expected(words, seed, stream, kind, rng, off, scale):
    per = {0: 2, 1: 1, 2: 4}[kind]
    h = bits(seed, stream, words * per)
    v = (h % rng if rng else np.zeros_like(h)) + off
    if kind == 2:
        return (v & 0xFF).astype(np.uint8).view(np.uint32)
    f = v.astype(np.int32).astype(np.float32) * np.float32(scale)
    if kind == 1:
        return f.view(np.uint32)
    u = f.view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)
    return u.astype(np.uint16).view(np.uint32)


class Desc(ctypes.Structure):
    _fields_ = [("allocated", ctypes.c_void_p), ("aligned", ctypes.c_void_p),
                ("offset", ctypes.c_int64), ("size", ctypes.c_int64),
                ("stride", ctypes.c_int64)]


def main():
    lib = ctypes.CDLL(sys.argv[1])
    fill = lib.k3_fill_random
    fill.argtypes = [ctypes.POINTER(Desc), ctypes.c_uint64, ctypes.c_uint64,
                     ctypes.c_int32, ctypes.c_int32, ctypes.c_int32, ctypes.c_float]
    fill.restype = None
    cases = [  # (words, seed, stream, kind, range, off, scale)
        (1000, 7, 0x1234567890ABCDEF, 0, 1 << 24, -(1 << 23), 2.0 ** -23),  # bf16 in [-1, 1)
        (777, 0, 3, 1, 1 << 24, 40000000, 1e-8),                            # f32 around 0.4
        (513, 2 ** 63 + 5, 2 ** 64 - 1, 2, 256, 0, 0.0),                    # MXFP4 codes
        (64, 9, 11, 2, 3, 121, 0.0),                                        # E8M0 scales
        (65, 9, 11, 1, 0, 3, 0.5),                                          # constant 1.5
    ]
    for case in cases:
        n = case[0]
        buf = np.zeros(n, dtype=np.uint32)
        d = Desc(buf.ctypes.data, buf.ctypes.data, 0, n, 1)
        fill(ctypes.byref(d), *case[1:])
        want = expected(*case)
        bad = np.nonzero(buf != want)[0]
        if bad.size:
            i = bad[0]
            print("FAIL %r: word %d is %#010x, expected %#010x (%d of %d differ)"
                  % (case, i, buf[i], want[i], bad.size, n))
            return 1
        print("ok   kind %d, %d words, range %d, off %d: identical" % (case[3], n, case[4], case[5]))
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
