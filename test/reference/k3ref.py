#!/usr/bin/python3
"""k3ref: a NumPy float64 reference of the Kimi K3 language model.

Written from ../../../shared/spec/K3_SPEC.md (equation by equation) and the
rounding contract of docs/NUMERICS.md ("Rounding points"); it shares no code
with the compiler. Only numpy is needed.

  mode="f32":  every value float64, no rounding anywhere.
  mode="bf16": float64 arithmetic, values rounded to bf16 (round to nearest
               even) at exactly the NUMERICS.md rounding points.

API:
  m = Model(config_path, weights_path, mode="f32", variant=None)
  st = m.new_state()
  logits = m.forward(token_ids, st)      # float64 [T, vocab]; st is updated

State per sequence (class State):
  st.kda[l]          float64 [H, V, K]: the KDA delta-rule state S_t^T (value
                     first, the official layout); st.kda_key_first(l) is S_t.
  st.conv[l][s]      s in "q", "k", "v": [C, W-1], the last W-1 raw (pre-conv)
                     inputs of the short convolution, oldest first.
  st.mla[l]          [len, kv_lora_rank + qk_rope_head_dim]: [c ; k_r] per
                     cached token (c after kv_a_layernorm), rounded in bf16 mode.

Deliberately wrong variants (for sensitivity tests), variant=
  "swiglu"       SwiGLU instead of SiTU in every MLP
  "block_size"   attn_res_block_size + 1
  "nibble_swap"  MXFP4 high/low nibbles swapped
  "gate_bound"   KDA gate lower bound -4 instead of the config's value

CLI: see `k3ref.py --help`; `k3ref.py --self-test` checks the KDA chunked
(WY/UT) form against the recurrence and the bf16 rounding.
"""

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_np import Checkpoint  # noqa: E402

VARIANTS = ("swiglu", "block_size", "nibble_swap", "gate_bound")

# ---------------------------------------------------------------------------
# Rounding to bf16
# ---------------------------------------------------------------------------


def round_bf16(x):
    """Rounds float64 values to bf16 (round to nearest, ties to even) and
    returns them as float64.

    Done with float32 bit manipulation: float64 -> float32 with round-to-odd
    (RNE, then one ulp back toward zero when RNE rounded away, and the sticky
    bit set when inexact), then the classic f32 -> bf16 RNE on the bits. The
    round-to-odd step (24 >= 8 + 2 bits) makes the two-step rounding equal to a
    single correct rounding of the float64 value. Overflow gives +-inf."""
    x = np.asarray(x, dtype=np.float64)
    shape = x.shape
    xf = x.reshape(-1)
    with np.errstate(over="ignore", invalid="ignore"):
        f = xf.astype(np.float32)
    back = f.astype(np.float64)
    u = f.view(np.uint32).copy()
    finite = np.isfinite(xf)
    away = finite & (np.abs(back) > np.abs(xf))
    inexact = finite & (back != xf)
    u[away] -= np.uint32(1)
    u[inexact] |= np.uint32(1)
    u = u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))
    u &= np.uint32(0xFFFF0000)
    r = u.view(np.float32).astype(np.float64)
    r[np.isnan(xf)] = np.nan
    return r.reshape(shape)


def _round_bf16_direct(x):
    """Independent check of round_bf16: RNE of float64 to 8 significant bits
    in float64 bits (normal range), scaled np.round for bf16 subnormals."""
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    b = x.view(np.uint64).copy()
    mask = np.uint64((1 << 45) - 1)
    half = np.uint64((1 << 44) - 1)
    lsb = (b >> np.uint64(45)) & np.uint64(1)
    b = (b + half + lsb) & ~mask
    r = b.view(np.float64)
    tiny = np.abs(x) < 2.0 ** -126
    r[tiny] = np.round(x[tiny] * 2.0 ** 133) * 2.0 ** -133
    big = np.abs(r) >= 2.0 ** 128
    r[big] = np.copysign(np.inf, x[big])
    return r


# ---------------------------------------------------------------------------
# Elementary functions (float64)
# ---------------------------------------------------------------------------


def sigmoid(x):
    return np.exp(-np.logaddexp(0.0, -x))


def softplus(x):
    return np.logaddexp(0.0, x)


def silu(x):
    return x * sigmoid(x)


def softmax(s, axis):
    m = np.max(s, axis=axis, keepdims=True)
    e = np.exp(s - m)
    return e / np.sum(e, axis=axis, keepdims=True)


E2M1 = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0,
                 -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def dequant_mxfp4(packed, scale, swap_nibbles=False):
    """K3_SPEC §7.2: packed U8 [N, K/2] (element 2i in the LOW nibble, 2i+1 in
    the HIGH nibble), scale U8 [N, K/32] E8M0 2^(s-127) (255 = NaN)."""
    packed = np.asarray(packed, dtype=np.uint8)
    scale = np.asarray(scale, dtype=np.uint8)
    n, k2 = packed.shape
    k = 2 * k2
    if scale.shape != (n, k // 32) or k % 32:
        raise ValueError("MXFP4 scale shape %s does not match packed %s" %
                         (scale.shape, packed.shape))
    lo = packed & np.uint8(0x0F)
    hi = packed >> np.uint8(4)
    if swap_nibbles:
        lo, hi = hi, lo
    codes = np.empty((n, k), dtype=np.uint8)
    codes[:, 0::2] = lo
    codes[:, 1::2] = hi
    s = scale.astype(np.float64)
    sv = np.where(scale == 255, np.nan, np.exp2(s - 127.0))
    return E2M1[codes] * np.repeat(sv, 32, axis=1)


# ---------------------------------------------------------------------------
# KDA cores (§4.5 recurrent, §4.6 chunked). Inputs per token t and head h:
# q [T,H,K] (L2-normalised and scaled), k [T,H,K] (L2-normalised), v [T,H,V],
# g [T,H,K] log-decay (<= 0), beta [T,H]; S0 [H,K,V] key-first.
# Returns o [T,H,V] and the final key-first state [H,K,V].
# ---------------------------------------------------------------------------


def kda_recurrent(q, k, v, g, beta, S0):
    """The token recurrence of §4.5 (the reference form):
        S_t = Diag(α_t) S_{t-1};  S_t += β_t k_t (v_t - S_t^T k_t)^T;  o_t = S_t^T q_t."""
    T, H, _ = q.shape
    S = np.array(S0, dtype=np.float64, copy=True)
    o = np.empty((T, H, v.shape[2]))
    for t in range(T):
        for h in range(H):
            Sd = np.exp(g[t, h])[:, None] * S[h]
            kt = k[t, h]
            S[h] = Sd + beta[t, h] * np.outer(kt, v[t, h] - Sd.T @ kt)
            o[t, h] = S[h].T @ q[t, h]
    return o, S


def kda_chunked(q, k, v, g, beta, S0, chunk=64):
    """The chunkwise WY / UT-transform form of §4.6, chunk length `chunk`
    (the last chunk may be partial). exp is only taken of non-positive
    log-decay differences (masked entries are set to -inf first)."""
    T, H, K = q.shape
    V = v.shape[2]
    S = np.array(S0, dtype=np.float64, copy=True)
    o = np.empty((T, H, V))
    for c0 in range(0, T, chunk):
        c1 = min(T, c0 + chunk)
        n = c1 - c0
        r_idx = np.arange(n)[:, None]
        s_idx = np.arange(n)[None, :]
        strict = s_idx < r_idx
        incl = s_idx <= r_idx
        for h in range(H):
            Q, Kc, Vc = q[c0:c1, h], k[c0:c1, h], v[c0:c1, h]
            b = beta[c0:c1, h]
            G = np.cumsum(g[c0:c1, h], axis=0)                 # Γ [n, K]
            D = G[:, None, :] - G[None, :, :]                  # Γ_r - Γ_s
            D = np.where(incl[:, :, None], D, -np.inf)
            E = np.exp(D)                                      # 0 where s > r
            L = b[:, None] * np.einsum("rj,sj,rsj->rs", Kc, Kc, E) * strict
            Aqk = np.einsum("rj,sj,rsj->rs", Q, Kc, E)
            # T = (I + L)^{-1} Diag(β) by forward substitution.
            Tm = np.zeros((n, n))
            for r in range(n):
                row = np.zeros(n)
                row[r] = b[r]
                row -= L[r, :r] @ Tm[:r, :]
                Tm[r] = row
            eG = np.exp(G)
            W = Tm @ (eG * Kc)
            U = Tm @ Vc
            Vnew = U - W @ S[h]
            o[c0:c1, h] = (Q * eG) @ S[h] + Aqk @ Vnew
            S[h] = eG[-1][:, None] * S[h] + (np.exp(G[-1][None, :] - G) * Kc).T @ Vnew
    return o, S


def self_test_kda(seed=0, verbose=True):
    """Recurrent vs chunked on random inputs (several shapes, chunk sizes,
    partial chunks, non-zero entering state, gates spanning (-5, 0))."""
    rng = np.random.default_rng(seed)
    worst = 0.0
    cases = [(1, 1, 4, 4, 16), (37, 2, 8, 8, 16), (70, 3, 16, 12, 64),
             (130, 2, 32, 32, 64), (45, 2, 16, 16, 7)]
    for T, H, K, V, C in cases:
        q = rng.standard_normal((T, H, K))
        k = rng.standard_normal((T, H, K))
        q = q / np.sqrt(np.sum(q * q, -1, keepdims=True) + 1e-6) * K ** -0.5
        k = k / np.sqrt(np.sum(k * k, -1, keepdims=True) + 1e-6)
        v = rng.standard_normal((T, H, V)) * 2
        g = -5.0 * sigmoid(rng.standard_normal((T, H, K)) * 4)
        beta = sigmoid(rng.standard_normal((T, H)) * 2)
        S0 = rng.standard_normal((H, K, V))
        o1, s1 = kda_recurrent(q, k, v, g, beta, S0)
        o2, s2 = kda_chunked(q, k, v, g, beta, S0, chunk=C)
        d = max(np.max(np.abs(o1 - o2)), np.max(np.abs(s1 - s2)))
        worst = max(worst, d)
        if verbose:
            print("kda self-test T=%d H=%d K=%d V=%d C=%d: max |recurrent - chunked| = %.3e"
                  % (T, H, K, V, C, d))
    assert worst < 1e-10, "KDA recurrent and chunked forms disagree: %g" % worst
    return worst


def self_test_rounding(seed=0, verbose=True):
    rng = np.random.default_rng(seed)
    x = np.concatenate([
        rng.standard_normal(200000) * np.exp2(rng.integers(-140, 130, 200000)),
        # exact bf16 midpoints and values next to them
        (np.arange(-3000, 3000) + 0.5) * 2.0 ** -7,
        np.nextafter((np.arange(1, 3000) + 0.5) * 2.0 ** -7, np.inf),
        np.nextafter((np.arange(1, 3000) + 0.5) * 2.0 ** -7, -np.inf),
        # midpoints that float64->float32 RNE would turn into false ties
        (1 + 2.0 ** -8 + 2.0 ** -30) * np.ones(3), (1 + 2.0 ** -8 - 2.0 ** -30) * np.ones(3),
        [0.0, -0.0, 3.3895e38, 3.3961e38, -3.4e38, 1e39, 2.0 ** -133, 2.0 ** -134,
         3 * 2.0 ** -135, 1e-300],
    ])
    with np.errstate(over="ignore"):
        a = round_bf16(x)
        b = _round_bf16_direct(x)
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    assert same.all(), "round_bf16 disagrees at %s" % x[~same][:5]
    assert round_bf16(np.float64(1 + 2.0 ** -8)) == 1.0           # tie to even
    assert round_bf16(np.float64(1 + 3 * 2.0 ** -8)) == 1 + 2.0 ** -6
    assert round_bf16(np.float64(1 + 2.0 ** -8 + 2.0 ** -40)) == 1 + 2.0 ** -7
    if verbose:
        print("bf16 rounding self-test: %d values agree with direct RNE" % x.size)


# ---------------------------------------------------------------------------
# Configuration (§1.1, §1.2, docs/NUMERICS.md)
# ---------------------------------------------------------------------------


class Config:
    def __init__(self, path):
        with open(path) as f:
            top = json.load(f)
        mt = top.get("model_type")
        if mt == "kimi_k3":
            t = top["text_config"]
            self.prefix = "language_model."
            tie = bool(top.get("tie_word_embeddings", False))
        elif mt == "kimi_linear":
            t = top
            self.prefix = ""
            tie = False
        else:
            raise ValueError("%s: unknown model_type %r" % (path, mt))
        self.tie = bool(t.get("tie_word_embeddings", tie))
        self.vocab = int(t["vocab_size"])
        self.d = int(t["hidden_size"])
        self.L = int(t["num_hidden_layers"])
        self.eps = float(t["rms_norm_eps"])
        self.act = t["hidden_act"]
        if self.act not in ("situ", "silu"):
            raise ValueError("unknown hidden_act %r" % self.act)
        self.beta1 = float(t.get("activation_situ_beta", 4.0))
        self.beta2 = float(t.get("activation_situ_linear_beta", 25.0))
        self.block_size = int(t["attn_res_block_size"])
        self.first_dense = int(t.get("first_k_dense_replace", 0))
        self.moe_freq = int(t.get("moe_layer_freq", 1))
        # MLA (§5)
        self.mla_heads = int(t["num_attention_heads"])
        self.q_rank = int(t["q_lora_rank"])
        self.kv_rank = int(t["kv_lora_rank"])
        self.nope = int(t["qk_nope_head_dim"])
        self.rope = int(t.get("qk_rope_head_dim", 0))
        self.vdim = int(t["v_head_dim"])
        self.mla_gate = bool(t.get("mla_use_output_gate", False))
        if not t.get("mla_use_nope", False):
            raise ValueError("mla_use_nope must be true (NoPE MLA, §5.2)")
        # KDA (§4)
        lin = t["linear_attn_config"]
        self.kda_heads = int(lin["num_heads"])
        self.kda_dim = int(lin["head_dim"])
        self.conv_w = int(lin["short_conv_kernel_size"])
        self.full_rank_gate = bool(lin.get("use_full_rank_gate", False))
        self.gate_lb = float(lin["gate_lower_bound"]) if "gate_lower_bound" in lin else None
        kda = set(int(n) for n in lin["kda_layers"])
        full = set(int(n) for n in lin["full_attn_layers"])
        self.mixer = []
        for l in range(self.L):
            if (l + 1) in kda and (l + 1) not in full:
                self.mixer.append("kda")
            elif (l + 1) in full and (l + 1) not in kda:
                self.mixer.append("mla")
            else:
                raise ValueError("layer %d (1-based %d) must be in exactly one of "
                                 "kda_layers / full_attn_layers" % (l, l + 1))
        self.ffn = ["moe" if (l >= self.first_dense and l % self.moe_freq == 0) else "dense"
                    for l in range(self.L)]
        if "dense" in self.ffn:
            self.inter = int(t["intermediate_size"])
        # MoE (§6)
        if "moe" in self.ffn:
            self.E = int(t["num_experts"])
            self.topk = int(t["num_experts_per_token"])
            self.n_shared = int(t.get("num_shared_experts", 0))
            self.moe_inter = int(t["moe_intermediate_size"])
            self.latent = int(t.get("routed_expert_hidden_size", 0))
            self.latent_norm = bool(t.get("latent_moe_use_norm", False))
            self.renorm = bool(t.get("moe_renormalize", True))
            self.rsf = float(t.get("routed_scaling_factor", 1.0))
            if t.get("moe_router_activation_func", "sigmoid") != "sigmoid":
                raise ValueError("router activation must be sigmoid")
            if int(t.get("num_expert_group", 1)) != 1 or int(t.get("topk_group", 1)) != 1:
                raise ValueError("grouped top-k is not supported")
        q = t.get("quantization_config")
        if q is None and t is not top:
            q = top.get("quantization_config")
        self.mxfp4 = bool(q) and q.get("format") == "mxfp4-pack-quantized"


# ---------------------------------------------------------------------------
# Per-sequence state
# ---------------------------------------------------------------------------


class State:
    def __init__(self, cfg):
        H, K = cfg.kda_heads, cfg.kda_dim
        C = H * K
        self.kda = {}
        self.conv = {}
        self.mla = {}
        for l in range(cfg.L):
            if cfg.mixer[l] == "kda":
                self.kda[l] = np.zeros((H, K, K))      # value first [H, V, K]
                self.conv[l] = {s: np.zeros((C, cfg.conv_w - 1)) for s in "qkv"}
            else:
                self.mla[l] = np.zeros((0, cfg.kv_rank + cfg.rope))

    def kda_value_first(self, l):
        return self.kda[l]

    def kda_key_first(self, l):
        return self.kda[l].transpose(0, 2, 1)

    def length(self):
        return max((c.shape[0] for c in self.mla.values()), default=None)

    def to_arrays(self):
        out = {}
        for l, s in self.kda.items():
            out["kda.recurrent.%d" % l] = s.copy()
        for l, d in self.conv.items():
            for s in "qkv":
                out["kda.conv_%s.%d" % (s, l)] = d[s].copy()
        for l, c in self.mla.items():
            out["mla.latent.%d" % l] = c.copy()
        return out


# ---------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------


class Model:
    def __init__(self, config_path, weights_path, mode="f32", variant=None,
                 kda_form="recurrent", kda_chunk=64):
        if mode not in ("f32", "bf16"):
            raise ValueError("mode must be f32 or bf16")
        if variant is not None and variant not in VARIANTS:
            raise ValueError("unknown variant %r (one of %s)" % (variant, ", ".join(VARIANTS)))
        if kda_form not in ("recurrent", "chunked"):
            raise ValueError("kda_form must be recurrent or chunked")
        self.cfg = Config(config_path)
        self.ckpt = Checkpoint(weights_path)
        self.mode = mode
        self.variant = variant
        self.kda_form = kda_form
        self.kda_chunk = kda_chunk
        self.R = round_bf16 if mode == "bf16" else (lambda x: x)
        self.block_size = self.cfg.block_size + (1 if variant == "block_size" else 0)
        self._w = {}
        self._experts = {}

    # --- weights -----------------------------------------------------------

    def W(self, name):
        if name not in self._w:
            self._w[name] = self.ckpt.get(self.cfg.prefix + name)
        return self._w[name]

    def LW(self, l, suffix):
        return self.W("model.layers.%d.%s" % (l, suffix))

    def expert(self, l, e, which):
        key = (l, e, which)
        if key not in self._experts:
            base = "%smodel.layers.%d.block_sparse_moe.experts.%d.%s" % (self.cfg.prefix, l, e, which)
            if self.cfg.mxfp4:
                w = dequant_mxfp4(self.ckpt.get(base + ".weight_packed"),
                                  self.ckpt.get(base + ".weight_scale"),
                                  swap_nibbles=(self.variant == "nibble_swap"))
            else:
                w = self.ckpt.get(base + ".weight")
            self._experts[key] = w
        return self._experts[key]

    def new_state(self):
        return State(self.cfg)

    # --- primitives (§2) -----------------------------------------------------

    def linear(self, x, w):
        """y = W x, W [out, in]; f32 products and sums, one round."""
        return self.R(x @ w.T)

    def rms_norm(self, x, w, eps):
        """§2: x̄ = x / sqrt(mean(x²) + eps), round, then round(x̄ · γ)."""
        xb = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
        return self.R(self.R(xb) * w)

    def act(self, a, b):
        """SiTU-GLU (§2) or, for hidden_act "silu" / variant swiglu, SwiGLU."""
        c = self.cfg
        if c.act == "silu" or self.variant == "swiglu":
            return silu(a) * b
        return (c.beta1 * np.tanh(a / c.beta1) * sigmoid(a)) * (c.beta2 * np.tanh(b / c.beta2))

    def glu_mlp(self, x, wg, wu, wd):
        a = self.linear(x, wg)
        b = self.linear(x, wu)
        return self.linear(self.R(self.act(a, b)), wd)

    def attn_res(self, cands, gamma, proj):
        """§3.1: softmax over depth candidates of r_i (γ⊙p)·v_i; raw values mixed."""
        Vs = np.stack(cands)                                   # [n, T, d]
        r = 1.0 / np.sqrt(np.mean(Vs * Vs, axis=-1) + self.cfg.eps)   # [n, T]
        w = gamma * proj.reshape(-1)
        s = r * (Vs @ w)                                       # [n, T]
        a = softmax(s, axis=0)
        return self.R(np.sum(a[:, :, None] * Vs, axis=0))

    # --- KDA (§4) ------------------------------------------------------------

    def short_conv(self, u, w, tail):
        """§4.2: y_t[c] = SiLU(Σ_j w[c,j] u_{t-W+1+j}[c]); w[c, W-1] multiplies
        the current token. Returns (round(y), new tail of raw inputs)."""
        C, _, Wk = w.shape
        w2 = w.reshape(C, Wk)
        T = u.shape[0]
        full = np.concatenate([tail, u.T], axis=1)             # [C, W-1+T]
        y = np.empty((T, C))
        for t in range(T):
            y[t] = np.sum(w2 * full[:, t:t + Wk], axis=1)
        return self.R(silu(y)), full[:, full.shape[1] - (Wk - 1):].copy()

    def kda_gate(self, f, A, dt):
        """§4.3: g = λ σ(exp(A_h)(f + δ)); Kimi Linear without a bound:
        g = -exp(A_h) softplus(f + δ)."""
        eA = np.exp(A)[None, :, None]
        if self.variant == "gate_bound":
            return -4.0 * sigmoid(eA * (f + dt[None]))
        if self.cfg.gate_lb is not None:
            return self.cfg.gate_lb * sigmoid(eA * (f + dt[None]))
        return -eA * softplus(f + dt[None])

    def kda_layer(self, l, x, st):
        c = self.cfg
        H, K = c.kda_heads, c.kda_dim
        T = x.shape[0]
        a = "self_attn."
        qh = self.linear(x, self.LW(l, a + "q_proj.weight"))
        kh = self.linear(x, self.LW(l, a + "k_proj.weight"))
        vh = self.linear(x, self.LW(l, a + "v_proj.weight"))
        qc, st.conv[l]["q"] = self.short_conv(qh, self.LW(l, a + "q_conv1d.weight"), st.conv[l]["q"])
        kc, st.conv[l]["k"] = self.short_conv(kh, self.LW(l, a + "k_conv1d.weight"), st.conv[l]["k"])
        vc, st.conv[l]["v"] = self.short_conv(vh, self.LW(l, a + "v_conv1d.weight"), st.conv[l]["v"])
        f = self.linear(self.linear(x, self.LW(l, a + "f_a_proj.weight")),
                        self.LW(l, a + "f_b_proj.weight"))
        b = self.linear(x, self.LW(l, a + "b_proj.weight"))
        if c.full_rank_gate:
            z = self.linear(x, self.LW(l, a + "g_proj.weight"))
        else:
            z = self.linear(self.linear(x, self.LW(l, a + "g_a_proj.weight")),
                            self.LW(l, a + "g_b_proj.weight"))
        A = self.LW(l, a + "A_log")[:H]
        dt = self.LW(l, a + "dt_bias").reshape(H, K)
        g = self.kda_gate(f.reshape(T, H, K), A, dt)
        beta = sigmoid(b)
        q3 = qc.reshape(T, H, K)
        k3 = kc.reshape(T, H, K)
        q = q3 / np.sqrt(np.sum(q3 * q3, axis=-1, keepdims=True) + 1e-6) * K ** -0.5
        k = k3 / np.sqrt(np.sum(k3 * k3, axis=-1, keepdims=True) + 1e-6)
        v = vc.reshape(T, H, K)
        S0 = st.kda_key_first(l)
        if self.kda_form == "chunked":
            o, S = kda_chunked(q, k, v, g, beta, S0, self.kda_chunk)
        else:
            o, S = kda_recurrent(q, k, v, g, beta, S0)
        st.kda[l] = np.ascontiguousarray(S.transpose(0, 2, 1))
        o = self.R(o)
        # §4.7 gated norm: RMSNorm(o) γ σ(z) in f32, one round.
        z3 = z.reshape(T, H, K)
        on = o / np.sqrt(np.mean(o * o, axis=-1, keepdims=True) + c.eps)
        y = self.R(on * self.LW(l, a + "o_norm.weight") * sigmoid(z3))
        return self.linear(y.reshape(T, H * K), self.LW(l, a + "o_proj.weight"))

    # --- Gated MLA (§5), naive form -------------------------------------------

    def mla_layer(self, l, x, st):
        c = self.cfg
        H, nope, rope, dv, Lr = c.mla_heads, c.nope, c.rope, c.vdim, c.kv_rank
        T = x.shape[0]
        a = "self_attn."
        cq = self.rms_norm(self.linear(x, self.LW(l, a + "q_a_proj.weight")),
                           self.LW(l, a + "q_a_layernorm.weight"), 1e-6)
        q = self.linear(cq, self.LW(l, a + "q_b_proj.weight")).reshape(T, H, nope + rope)
        kv = self.linear(x, self.LW(l, a + "kv_a_proj_with_mqa.weight"))
        cc = self.rms_norm(kv[:, :Lr], self.LW(l, a + "kv_a_layernorm.weight"), 1e-6)
        new = np.concatenate([cc, kv[:, Lr:]], axis=1)         # [c ; k_r], rounded
        len0 = st.mla[l].shape[0]
        cache = np.concatenate([st.mla[l], new], axis=0)
        st.mla[l] = cache
        N = cache.shape[0]
        kvb = self.linear(cache[:, :Lr], self.LW(l, a + "kv_b_proj.weight")).reshape(N, H, nope + dv)
        kn, v = kvb[:, :, :nope], kvb[:, :, nope:]
        kr = np.broadcast_to(cache[:, None, Lr:], (N, H, rope))
        key = np.concatenate([kn, kr], axis=2)                 # [N, H, nope+rope]
        s = np.einsum("thd,nhd->htn", q, key) * (nope + rope) ** -0.5
        allowed = np.arange(N)[None, :] <= (len0 + np.arange(T))[:, None]   # [T, N]
        s = np.where(allowed[None], s, -np.inf)
        p = softmax(s, axis=2)
        o = self.R(np.einsum("htn,nhd->thd", p, v))            # [T, H, dv]
        if c.mla_gate:
            gate = self.R(sigmoid(self.linear(x, self.LW(l, a + "g_proj.weight"))))
            o = self.R(o * gate.reshape(T, H, dv))
        return self.linear(o.reshape(T, H * dv), self.LW(l, a + "o_proj.weight"))

    # --- FFNs (§6) -------------------------------------------------------------

    def dense_ffn(self, l, x):
        return self.glu_mlp(x, self.LW(l, "mlp.gate_proj.weight"),
                            self.LW(l, "mlp.up_proj.weight"),
                            self.LW(l, "mlp.down_proj.weight"))

    def moe_ffn(self, l, x):
        c = self.cfg
        m = "block_sparse_moe."
        T = x.shape[0]
        # §6.1 router: fp32 logits from the (rounded) input, sigmoid, biased top-k.
        logits = x @ self.LW(l, m + "gate.weight").T           # [T, E]
        s = sigmoid(logits)
        sel_score = s + self.LW(l, m + "gate.e_score_correction_bias")[None, :]
        sel = np.argsort(-sel_score, axis=1, kind="stable")[:, :c.topk]   # ties: lower index
        ssel = np.take_along_axis(s, sel, axis=1)
        # A NaN key is never selected: a slot that only a NaN key could fill
        # (fewer than top-k keys are numbers; argsort puts NaN last) adds
        # nothing. §6.1 has no rule for NaN; this is k3c's (Kernels/MoE.mlir,
        # @k3k_route: expert 0 with weight 0).
        ssel = np.where(np.isnan(np.take_along_axis(sel_score, sel, axis=1)), 0.0, ssel)
        if c.renorm:
            omega = ssel / (np.sum(ssel, axis=1, keepdims=True) + 1e-20) * c.rsf
        else:
            omega = ssel * c.rsf
        # §6.2 latent experts
        if c.latent:
            xi = self.linear(x, self.LW(l, m + "routed_expert_down_proj.weight"))
        else:
            xi = x
        r = np.zeros((T, xi.shape[1]))
        for e in np.unique(sel):
            rows, cols = np.nonzero(sel == e)
            xe = xi[rows]
            h = self.R(self.act(self.linear(xe, self.expert(l, e, "w1")),
                                self.linear(xe, self.expert(l, e, "w3"))))
            y = self.linear(h, self.expert(l, e, "w2"))
            r[rows] += omega[rows, cols][:, None] * y
        r = self.R(r)
        if c.latent_norm:
            r = self.rms_norm(r, self.LW(l, m + "routed_expert_norm.weight"), c.eps)
        if c.latent:
            out = self.linear(r, self.LW(l, m + "routed_expert_up_proj.weight"))
        else:
            out = r
        # §6.3 shared experts
        if c.n_shared:
            sh = self.glu_mlp(x, self.LW(l, m + "shared_experts.gate_proj.weight"),
                              self.LW(l, m + "shared_experts.up_proj.weight"),
                              self.LW(l, m + "shared_experts.down_proj.weight"))
            out = self.R(out + sh)
        return out

    # --- the whole model (§3.2) ----------------------------------------------

    def forward(self, token_ids, state):
        c = self.cfg
        ids = np.asarray(token_ids, dtype=np.int64).reshape(-1)
        if ids.size == 0:
            raise ValueError("forward needs at least one token")
        if ids.min() < 0 or ids.max() >= c.vocab:
            raise ValueError("token id outside [0, %d)" % c.vocab)
        x0 = self.W("model.embed_tokens.weight")[ids]          # exact table rows
        B = []
        P = x0
        for l in range(c.L):
            P_in = P
            if B:
                h = self.attn_res(B + [P_in], self.LW(l, "self_attention_res_norm.weight"),
                                  self.LW(l, "self_attention_res_proj.weight"))
            else:
                h = P_in
            if l % self.block_size == 0:
                B.append(P_in)
                P = None
            else:
                P = P_in
            xn = self.rms_norm(h, self.LW(l, "input_layernorm.weight"), c.eps)
            if c.mixer[l] == "kda":
                a = self.kda_layer(l, xn, state)
            else:
                a = self.mla_layer(l, xn, state)
            P = a if P is None else self.R(P + a)
            h2 = self.attn_res(B + [P], self.LW(l, "mlp_res_norm.weight"),
                               self.LW(l, "mlp_res_proj.weight"))
            xn2 = self.rms_norm(h2, self.LW(l, "post_attention_layernorm.weight"), c.eps)
            if c.ffn[l] == "dense":
                m = self.dense_ffn(l, xn2)
            else:
                m = self.moe_ffn(l, xn2)
            P = self.R(P + m)
        h = self.attn_res(B + [P], self.W("model.output_attn_res_norm.weight"),
                          self.W("model.output_attn_res_proj.weight"))
        y = self.rms_norm(h, self.W("model.norm.weight"), c.eps)
        head = self.W("model.embed_tokens.weight") if c.tie else self.W("lm_head.weight")
        return self.linear(y, head)


# ---------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------


def _ids(s):
    return [int(v) for v in s.split(",") if v.strip() != ""] if s else []


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="k3ref.py",
        description="NumPy float64 reference of the Kimi K3 language model (K3_SPEC.md, "
                    "docs/NUMERICS.md). Prefills the prompt (in --chunks sizes, else in one "
                    "call), then feeds each decode id one at a time.")
    ap.add_argument("--config", help="config.json (K3 wrapper or bare kimi_linear)")
    ap.add_argument("--weights", help="model.safetensors, or a directory with it or with "
                                      "model.safetensors.index.json")
    ap.add_argument("--mode", choices=("f32", "bf16"), default="f32")
    ap.add_argument("--variant", choices=VARIANTS, default=None,
                    help="a deliberately wrong model (sensitivity tests)")
    ap.add_argument("--prompt-ids", help="comma-separated token ids (at least one)")
    ap.add_argument("--decode-ids", default="", help="comma-separated ids, fed one at a time")
    ap.add_argument("--chunks", default="", help="prefill chunk sizes, summing to the prompt length")
    ap.add_argument("--logits-out", help="float32 .npy [1 + n_decode, vocab]: row 0 = logits of "
                                         "the last prompt position, row i = after decode token i")
    ap.add_argument("--state-out", help=".npz of the state right after the prompt prefill: "
                                        "kda.recurrent.<l> [H,V,K], kda.conv_{q,k,v}.<l> [C,W-1], "
                                        "mla.latent.<l> [len, L+R]")
    ap.add_argument("--kda-form", choices=("recurrent", "chunked"), default="recurrent",
                    help="KDA core: the token recurrence (the reference, default) or the "
                         "chunked WY/UT form")
    ap.add_argument("--kda-chunk-size", type=int, default=64)
    ap.add_argument("--self-test", action="store_true",
                    help="check KDA recurrent == chunked (1e-10) and the bf16 rounding, then exit")
    args = ap.parse_args(argv)

    if args.self_test:
        worst = self_test_kda()
        self_test_rounding()
        print("self-test passed (KDA worst difference %.3e)" % worst)
        return 0
    for req in ("config", "weights", "prompt_ids", "logits_out"):
        if getattr(args, req) is None:
            ap.error("--%s is required" % req.replace("_", "-"))

    prompt = _ids(args.prompt_ids)
    decode = _ids(args.decode_ids)
    if not prompt:
        ap.error("--prompt-ids needs at least one id")
    chunks = _ids(args.chunks) or [len(prompt)]
    if any(ch <= 0 for ch in chunks) or sum(chunks) != len(prompt):
        ap.error("--chunks must be positive and sum to the prompt length %d" % len(prompt))

    t0 = time.time()
    model = Model(args.config, args.weights, mode=args.mode, variant=args.variant,
                  kda_form=args.kda_form, kda_chunk=args.kda_chunk_size)
    st = model.new_state()
    pos = 0
    for ch in chunks:
        lg = model.forward(prompt[pos:pos + ch], st)
        pos += ch
    rows = [lg[-1]]
    if args.state_out:
        np.savez(args.state_out, **st.to_arrays())
    for tok in decode:
        rows.append(model.forward([tok], st)[-1])
    out = np.stack(rows).astype(np.float32)
    np.save(args.logits_out, out)
    print("k3ref: mode %s%s, %d prompt + %d decode tokens, logits std %.4g, %.2f s" %
          (args.mode, (", variant " + args.variant) if args.variant else "",
           len(prompt), len(decode), float(np.std(out)), time.time() - t0), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
