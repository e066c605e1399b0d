"""k3-gpu-experts-mma's `fold-scales` (GPUExpertsMMA.cpp, foldable and
accumulateFolded), checked exhaustively:
- the scale test: a 4-byte scale word passes
  (((s - 0x02020202) & ~s) | s) & 0x80808080 == 0 exactly when every byte
  is in [2, 127] (all 256 values at every byte position, the other bytes
  in range, 0, 1 or 255);
- the multiplier: bytes s + 0x7E7E7E7E, byte c put at bytes 1 and 3 (prmt
  selector 0x0404 + 0x1010 c), shifted right by one, is the bf16 pair
  2^(e - 1), 2^(e - 1);
- the folded decode: every E2M1 code · 2^-126 (the decode's bf16) times
  2^(e - 1) is E2M1 · 2^(e - 127) exactly, a normal bf16 or zero, for
  every e in [2, 127] (so the mma sums exact products of normal values)."""
import struct

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
M32 = 0xFFFFFFFF


def bf16(bits):
    return struct.unpack("<f", struct.pack("<I", (bits & 0xFFFF) << 16))[0]


def to_bf16_exact(x):
    """The bf16 bits of x, or None if x is not a bf16 value."""
    b = struct.unpack("<I", struct.pack("<f", x))[0]
    return b >> 16 if b & 0xFFFF == 0 else None


def passes(s):
    return ((((s - 0x02020202) & M32 & ~s) | s) & 0x80808080) == 0


def prmt(a, b, sel):
    src = [(a >> (8 * i)) & 0xFF for i in range(4)] + [(b >> (8 * i)) & 0xFF for i in range(4)]
    return sum(src[(sel >> (4 * k)) & 7] << (8 * k) for k in range(4))


words = 0
for pos in range(4):
    for other in (2, 64, 127, 0, 1, 255):
        for v in range(256):
            s = 0
            for k in range(4):
                s |= (v if k == pos else other) << (8 * k)
            want = 2 <= v <= 127 and 2 <= other <= 127
            assert passes(s) == want, (hex(s), passes(s), want)
            words += 1

for e in range(2, 128):
    s = e * 0x01010101
    biased = (s + 0x7E7E7E7E) & M32
    for c in range(4):
        m = prmt(biased, 0, 0x0404 + 0x1010 * c) >> 1
        assert bf16(m) == bf16(m >> 16) == 2.0 ** (e - 1), (e, c, hex(m))
    for code in range(16):
        tiny = E2M1[code & 7] * 2.0**-126 * (-1 if code & 8 else 1)
        prod = tiny * 2.0 ** (e - 1)
        assert prod == E2M1[code & 7] * 2.0 ** (e - 127) * (-1 if code & 8 else 1)
        bits = to_bf16_exact(prod)
        assert bits is not None and (bits & 0x7F80 != 0 or prod == 0), (e, code)
print("fold-scales: %d scale words tested, 126 scales x 16 codes exact" % words)
