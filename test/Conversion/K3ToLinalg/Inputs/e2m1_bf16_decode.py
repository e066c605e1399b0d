"""The E2M1 -> bf16 decode of k3-gpu-experts-mma (GPUExpertsMMA.cpp,
decodeWord), checked for every pair of codes at every position, among
other nibbles of several patterns, against the E2M1 values of OCP MX v1.0
(K3_SPEC §7.2). With w the word, qa = select(w, w << 6, 0x22002200) and
qb = select(w, w >> 6, 0x01DC01DC) (select(keep, take, m): take's bits
where m is set, keep's elsewhere: lop3 0xD8), the pairs j = 0..3 are
(qa << 6, qa << 2, qb << 4, qb) & 0x81C081C0: the bf16 pair E2M1 · 2^-126
of elements j and j + 4, and the bf16 multiply by 2^126 (0x7E80) is exact."""
import struct

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]
MASK = 0xFFFFFFFF


def e2m1(code):
    v = E2M1[code & 7]
    return -v if code & 8 else v


def bf16(bits):
    return struct.unpack("<f", struct.pack("<I", (bits & 0xFFFF) << 16))[0]


def select(keep, take, m):
    lut = 0xD8  # lop3 of a = keep (0xF0), b = take (0xCC), c = m (0xAA)
    r = 0
    for bit in range(32):
        i = ((keep >> bit & 1) << 2) | ((take >> bit & 1) << 1) | (m >> bit & 1)
        r |= (lut >> i & 1) << bit
    return r


def decode(w):
    qa = select(w, (w << 6) & MASK, 0x22002200)
    qb = select(w, w >> 6, 0x01DC01DC)
    return [((q << s) & MASK) & 0x81C081C0
            for q, s in ((qa, 6), (qa, 2), (qb, 4), (qb, 0))]


checked = 0
for fill in range(4):
    for j in range(4):
        for lo in range(16):
            for hi in range(16):
                # Other nibbles hold junk that the selects and masks must drop.
                w = 0
                for n in range(8):
                    w |= ((n * 5 + j + 3 + 7 * fill) & 15) << (4 * n)
                w &= ~((15 << (4 * j)) | (15 << (4 * (j + 4))))
                w |= (lo << (4 * j)) | (hi << (4 * (j + 4)))
                r = decode(w)[j]
                scale = bf16(0x7E80)
                assert scale == 2.0**126
                got = (bf16(r) * scale, bf16(r >> 16) * scale)
                want = (e2m1(lo), e2m1(hi))
                # -0 and +0 both decode to a zero of the code's sign.
                assert got == want and all(
                    str(g)[0] == str(x)[0] for g, x in zip(got, want)), (j, lo, hi, got, want)
                checked += 1
print("e2m1 -> bf16: %d code pairs exact" % checked)
