"""The E2M1 -> bf16 decode of k3-gpu-experts-mma (GPUExpertsMMA.cpp,
decodePair), checked for every pair of codes at every position against the
E2M1 values of OCP MX v1.0 (K3_SPEC §7.2): a word shifted left by 12 - 4j,
then (v & 0x80008000) | ((v & 0x70007000) >> 6) is the bf16 pair
E2M1 · 2^-126 of elements j and j + 4, and the bf16 multiply by 2^126
(0x7E80) is exact."""
import struct

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def e2m1(code):
    v = E2M1[code & 7]
    return -v if code & 8 else v


def bf16(bits):
    return struct.unpack("<f", struct.pack("<I", (bits & 0xFFFF) << 16))[0]


checked = 0
for j in range(4):
    for lo in range(16):
        for hi in range(16):
            # Other nibbles hold junk that the masks must drop.
            w = 0
            for n in range(8):
                w |= ((n * 5 + j + 3) & 15) << (4 * n)
            w &= ~((15 << (4 * j)) | (15 << (4 * (j + 4))))
            w |= (lo << (4 * j)) | (hi << (4 * (j + 4)))
            v = (w << (12 - 4 * j)) & 0xFFFFFFFF
            r = (v & 0x80008000) | ((v & 0x70007000) >> 6)
            scale = bf16(0x7E80)
            assert scale == 2.0**126
            got = (bf16(r) * scale, bf16(r >> 16) * scale)
            want = (e2m1(lo), e2m1(hi))
            # -0 and +0 both decode to a zero of the code's sign.
            assert got == want and all(
                str(g)[0] == str(x)[0] for g, x in zip(got, want)), (j, lo, hi, got, want)
            checked += 1
print("e2m1 -> bf16: %d code pairs exact" % checked)
