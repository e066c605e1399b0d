#!/usr/bin/env python3
"""Overwrites elements of f32 tensors of a safetensors checkpoint in place:

  set-values.py DIR NAME_REGEX VALUE INDEX...

Every F32 tensor of DIR's model*.safetensors whose name matches NAME_REGEX
(re.search) gets VALUE ("nan", "inf", a number) at the flat indices INDEX.
Prints each tensor it changed; fails if none matched."""
import glob
import json
import re
import struct
import sys

import numpy as np


def main():
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    where, pattern, value = sys.argv[1], re.compile(sys.argv[2]), float(sys.argv[3])
    indices = [int(i) for i in sys.argv[4:]]
    changed = 0
    for path in sorted(glob.glob(where + "/model*.safetensors")):
        with open(path, "r+b") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(n))
            for name, t in header.items():
                if name == "__metadata__" or not pattern.search(name):
                    continue
                if t["dtype"] != "F32":
                    sys.exit("%s is %s, not F32" % (name, t["dtype"]))
                begin, end = t["data_offsets"]
                f.seek(8 + n + begin)
                a = np.frombuffer(f.read(end - begin), dtype="<f4").copy()
                a[indices] = value
                f.seek(8 + n + begin)
                f.write(a.tobytes())
                print("set", name, indices, value)
                changed += 1
    if not changed:
        sys.exit("no F32 tensor matches %s in %s" % (sys.argv[2], where))


if __name__ == "__main__":
    main()
