"""The E2M1 -> bf16 decode of k3-gpu-experts-mma (GPUExpertsMMA.cpp,
decodePair), checked for every pair of codes at every position against the
E2M1 values of OCP MX v1.0 (K3_SPEC §7.2): with v the word (shifted right
by 8 for j >= 2), ((v & M) * K) & 0x81C081C0, M = 0x000F000F and K = 0x1040
for even j, 0x00F000F0 and 0x0104 for odd j, is the bf16 pair E2M1 · 2^-126
of elements j and j + 4 (the product's two shifted copies never overlap, so
it adds no carries), and the bf16 multiply by 2^126 (0x7E80) is exact."""
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
            v = w if j < 2 else w >> 8
            m, k = (0x00F000F0, 0x0104) if j % 2 else (0x000F000F, 0x1040)
            r = (((v & m) * k) & 0xFFFFFFFF) & 0x81C081C0
            scale = bf16(0x7E80)
            assert scale == 2.0**126
            got = (bf16(r) * scale, bf16(r >> 16) * scale)
            want = (e2m1(lo), e2m1(hi))
            # -0 and +0 both decode to a zero of the code's sign.
            assert got == want and all(
                str(g)[0] == str(x)[0] for g, x in zip(got, want)), (j, lo, hi, got, want)
            checked += 1
print("e2m1 -> bf16: %d code pairs exact" % checked)
