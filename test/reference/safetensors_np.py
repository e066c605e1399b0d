"""Minimal safetensors reader for the k3 NumPy reference (numpy only).

A checkpoint is one `.safetensors` file, or a directory holding either
`model.safetensors.index.json` (sharded; its "weight_map" names the file of
every tensor) or a single `model.safetensors`.

File format: 8-byte little-endian header length n, n bytes of JSON
({name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": ...}),
then the data; offsets are relative to the start of the data.
"""

import json
import os
import struct

import numpy as np

_ITEMSIZE = {"BF16": 2, "F16": 2, "F32": 4, "F64": 8, "U8": 1, "I8": 1,
             "I32": 4, "I64": 8}


class SafetensorsFile:
    def __init__(self, path):
        self.path = path
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            raw = f.read(8)
            if len(raw) != 8:
                raise ValueError("%s: too short for a safetensors file" % path)
            (n,) = struct.unpack("<Q", raw)
            if n > size - 8:
                raise ValueError("%s: header length %d exceeds the file" % (path, n))
            header = json.loads(f.read(n).decode("utf-8"))
        self.data_start = 8 + n
        self.data_size = size - self.data_start
        header.pop("__metadata__", None)
        self.header = header
        for name, h in header.items():
            dt = h["dtype"]
            if dt not in _ITEMSIZE:
                raise ValueError("%s: tensor %s has unsupported dtype %s" % (path, name, dt))
            b, e = h["data_offsets"]
            want = int(np.prod(h["shape"], dtype=np.int64)) * _ITEMSIZE[dt]
            if e - b != want or b < 0 or e > self.data_size:
                raise ValueError("%s: tensor %s: bad data_offsets %s for %s %s" %
                                 (path, name, h["data_offsets"], dt, h["shape"]))
        self._mm = None

    def _map(self):
        if self._mm is None:
            self._mm = np.memmap(self.path, dtype=np.uint8, mode="r")
        return self._mm

    def names(self):
        return list(self.header)

    def info(self, name):
        h = self.header[name]
        return h["dtype"], list(h["shape"])

    def raw(self, name):
        """The tensor as stored: uint16 for BF16, else the native dtype."""
        h = self.header[name]
        b, e = h["data_offsets"]
        buf = self._map()[self.data_start + b:self.data_start + e]
        dt = h["dtype"]
        npdt = {"BF16": "<u2", "F16": "<f2", "F32": "<f4", "F64": "<f8",
                "U8": "u1", "I8": "i1", "I32": "<i4", "I64": "<i8"}[dt]
        return np.frombuffer(buf.tobytes(), dtype=npdt).reshape(h["shape"])


def bf16_bits_to_f32(u16):
    """bf16 bit patterns (uint16) -> float32, exactly (u16 << 16)."""
    return (np.asarray(u16, dtype=np.uint32) << np.uint32(16)).view(np.float32)


class Checkpoint:
    """Name -> tensor over one file or a (sharded) directory."""

    def __init__(self, path):
        self.files = {}
        self.where = {}
        if os.path.isdir(path):
            index = os.path.join(path, "model.safetensors.index.json")
            single = os.path.join(path, "model.safetensors")
            if os.path.exists(index):
                with open(index) as f:
                    wm = json.load(f)["weight_map"]
                for name, fname in wm.items():
                    if fname not in self.files:
                        self.files[fname] = SafetensorsFile(os.path.join(path, fname))
                    self.where[name] = fname
                for fname, sf in self.files.items():
                    for name in sf.names():
                        if self.where.get(name) != fname:
                            raise ValueError("%s: tensor %s is not mapped to it by the index"
                                             % (fname, name))
            elif os.path.exists(single):
                self._add_file(single)
            else:
                raise FileNotFoundError("%s: no model.safetensors(.index.json)" % path)
        else:
            self._add_file(path)

    def _add_file(self, p):
        sf = SafetensorsFile(p)
        self.files[p] = sf
        for name in sf.names():
            self.where[name] = p

    def __contains__(self, name):
        return name in self.where

    def names(self):
        return list(self.where)

    def info(self, name):
        return self.files[self.where[name]].info(name)

    def get(self, name):
        """Floating tensors as float64 (exact), integer tensors as stored."""
        if name not in self.where:
            raise KeyError("checkpoint has no tensor %s" % name)
        sf = self.files[self.where[name]]
        dt, _ = sf.info(name)
        a = sf.raw(name)
        if dt == "BF16":
            return bf16_bits_to_f32(a).astype(np.float64)
        if dt in ("F16", "F32", "F64"):
            return a.astype(np.float64)
        return a.copy()
