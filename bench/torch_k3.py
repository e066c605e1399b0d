"""torch_k3: an eager PyTorch implementation of the Kimi K3 forward pass (benchmark peer).

Written from shared/spec/K3_SPEC.md with the semantics of test/reference/k3ref.py and the
rounding points of docs/NUMERICS.md: activations live in `compute_dtype` (bf16 = K3's own,
or f32); "R" below = cast to compute_dtype. Batched over B sequences of equal length.

  w = load_safetensors(dir)                 # checkpoint names -> tensors (stored dtypes)
  w = stack_experts(w, Config(cfg))         # optional: per-layer [E, ...] expert stacks
  m = TorchK3(cfg, w, "cuda")
  st = m.new_state(B, max_len)
  logits = m.forward(tokens[B, T], st)      # float32 [B, T, V]; st updated
  m.forward(tok, st, torch.compile(m.step)) # decode with a compiled step (static shapes)
  make_peer(cfg, w).time_decode(B, ctx, reps, "eager"|"compile") / .time_prefill(T, reps)

Validated against k3ref by bench/check_torch_k3.py (f32 ~1e-5, bf16 <= 0.15 per row).
"""

import json
import math
import os
import struct

import torch
import torch.nn.functional as F


# ---------------------------------------------------------------------------
# Config (§1.1, §1.2)
# ---------------------------------------------------------------------------

class Config:
    def __init__(self, path):
        top = json.load(open(path))
        if top.get("model_type") == "kimi_k3":
            t, self.prefix, tie = top["text_config"], "language_model.", bool(top.get("tie_word_embeddings", False))
        else:
            t, self.prefix, tie = top, "", False
        self.tie = bool(t.get("tie_word_embeddings", tie))
        self.vocab, self.d, self.L = int(t["vocab_size"]), int(t["hidden_size"]), int(t["num_hidden_layers"])
        self.eps, self.act = float(t["rms_norm_eps"]), t["hidden_act"]
        self.beta1 = float(t.get("activation_situ_beta", 4.0))
        self.beta2 = float(t.get("activation_situ_linear_beta", 25.0))
        self.block_size = int(t["attn_res_block_size"])
        first_dense, freq = int(t.get("first_k_dense_replace", 0)), int(t.get("moe_layer_freq", 1))
        self.mla_heads, self.q_rank, self.kv_rank = int(t["num_attention_heads"]), int(t["q_lora_rank"]), int(t["kv_lora_rank"])
        self.nope, self.rope, self.vdim = int(t["qk_nope_head_dim"]), int(t.get("qk_rope_head_dim", 0)), int(t["v_head_dim"])
        self.mla_gate = bool(t.get("mla_use_output_gate", False))
        lin = t["linear_attn_config"]
        self.kda_heads, self.kda_dim, self.conv_w = int(lin["num_heads"]), int(lin["head_dim"]), int(lin["short_conv_kernel_size"])
        self.full_rank_gate = bool(lin.get("use_full_rank_gate", False))
        self.gate_lb = float(lin["gate_lower_bound"]) if "gate_lower_bound" in lin else None
        kda = set(lin["kda_layers"])
        self.mixer = ["kda" if (l + 1) in kda else "mla" for l in range(self.L)]   # §1.2
        self.ffn = ["moe" if (l >= first_dense and l % freq == 0) else "dense" for l in range(self.L)]
        if "moe" in self.ffn:
            self.E, self.topk = int(t["num_experts"]), int(t["num_experts_per_token"])
            self.n_shared, self.latent = int(t.get("num_shared_experts", 0)), int(t.get("routed_expert_hidden_size", 0))
            self.latent_norm = bool(t.get("latent_moe_use_norm", False))
            self.renorm, self.rsf = bool(t.get("moe_renormalize", True)), float(t.get("routed_scaling_factor", 1.0))
        q = t.get("quantization_config") or top.get("quantization_config")
        self.mxfp4 = bool(q) and q.get("format") == "mxfp4-pack-quantized"


# ---------------------------------------------------------------------------
# Checkpoint loading (safetensors, no extra dependency) and expert stacking
# ---------------------------------------------------------------------------

_DT = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "F64": torch.float64,
       "U8": torch.uint8, "I8": torch.int8, "I32": torch.int32, "I64": torch.int64}


def load_safetensors(path):
    """Directory (model.safetensors or sharded index) or file -> {name: tensor} in stored dtypes."""
    if os.path.isdir(path):
        idx = os.path.join(path, "model.safetensors.index.json")
        files = sorted(set(json.load(open(idx))["weight_map"].values())) if os.path.exists(idx) else ["model.safetensors"]
        files = [os.path.join(path, f) for f in files]
    else:
        files = [path]
    out = {}
    for fn in files:
        with open(fn, "rb") as f:
            (n,) = struct.unpack("<Q", f.read(8))
            hdr = json.loads(f.read(n))
            buf = bytearray(f.read())
        hdr.pop("__metadata__", None)
        for name, h in hdr.items():
            b, e = h["data_offsets"]
            dt = _DT[h["dtype"]]
            out[name] = torch.frombuffer(buf, dtype=torch.uint8, count=e - b, offset=b).view(dt).reshape(h["shape"]).clone()
    return out


def _expert_key(cfg, l, which, e=None):
    return "%smodel.layers.%d.block_sparse_moe.experts.%s%s" % (cfg.prefix, l, "" if e is None else "%d." % e, which)


def stack_experts(weights, cfg):
    """Per-layer stacks [E, ...] of the expert tensors (done once); per-expert entries are dropped.
    MXFP4: experts.{w1,w2,w3}.weight_packed / .weight_scale; else experts.{w1,w2,w3}.weight."""
    if isinstance(cfg, str):
        cfg = Config(cfg)
    w = {k.replace(".experts.{e}.", ".experts."): v for k, v in weights.items()}   # k3rt stack names
    sfx = ("weight_packed", "weight_scale") if cfg.mxfp4 else ("weight",)
    for l in range(cfg.L):
        if cfg.ffn[l] != "moe":
            continue
        for which in ("w1", "w2", "w3"):
            for s in sfx:
                key = _expert_key(cfg, l, "%s.%s" % (which, s))
                if key not in w:
                    w[key] = torch.stack([w.pop(_expert_key(cfg, l, "%s.%s" % (which, s), e)) for e in range(cfg.E)])
    return w


_E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]


def dequant_mxfp4(packed, scale, lut, slut, dtype):
    """§7.2: packed U8 [..., N, K/2] (element 2i = LOW nibble), scale U8 [..., N, K/32] E8M0
    2^(s-127) (255 = NaN). Exact in f32 and bf16."""
    codes = torch.stack((packed & 15, packed >> 4), dim=-1).flatten(-2).long()
    s = slut[scale.long()].repeat_interleave(32, dim=-1)
    return (lut[codes] * s).to(dtype)


# ---------------------------------------------------------------------------
# KDA cores (§4.5, §4.6); q,k,g [B,H,T,K], v [B,H,T,V], beta [B,H,T], S [B,H,K,V] key-first, f32
# ---------------------------------------------------------------------------

def kda_recurrent(q, k, v, g, beta, S):
    """§4.5: S = Diag(α) S; S += β k (v - Sᵀk)ᵀ; o = Sᵀ q."""
    o = []
    for t in range(q.shape[2]):
        Sd = g[:, :, t].exp().unsqueeze(-1) * S
        kt = k[:, :, t]
        u = v[:, :, t] - torch.einsum("bhkv,bhk->bhv", Sd, kt)
        S = Sd + (beta[:, :, t, None] * kt).unsqueeze(-1) * u.unsqueeze(-2)
        o.append(torch.einsum("bhkv,bhk->bhv", S, q[:, :, t]))
    return torch.stack(o, 2), S


def kda_chunked(q, k, v, g, beta, S, chunk=64):
    """§4.6 chunkwise WY/UT form (as k3ref.kda_chunked); exp only of masked non-positive
    log-decay differences. Intra-chunk tensors are [B,H,n,n,K]."""
    T = q.shape[2]
    o = []
    for c0 in range(0, T, chunk):
        c1 = min(T, c0 + chunk)
        n = c1 - c0
        Q, Kc, Vc, b = q[:, :, c0:c1], k[:, :, c0:c1], v[:, :, c0:c1], beta[:, :, c0:c1]
        G = g[:, :, c0:c1].cumsum(2)                                      # Γ [B,H,n,K]
        incl = torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
        E = (G.unsqueeze(3) - G.unsqueeze(2)).masked_fill(~incl[:, :, None], -math.inf).exp()
        KsE = Kc.unsqueeze(2) * E                                         # k_s ⊙ exp(Γr-Γs)
        L = (b.unsqueeze(-1) * torch.einsum("bhrj,bhrsj->bhrs", Kc, KsE)).tril(-1)
        Aqk = torch.einsum("bhrj,bhrsj->bhrs", Q, KsE)
        eye = torch.eye(n, device=q.device, dtype=q.dtype)
        Tm = torch.linalg.solve_triangular(eye + L, eye.expand_as(L), upper=False, unitriangular=True) * b.unsqueeze(-2)
        eG = G.exp()
        W = Tm @ (eG * Kc)
        Vnew = Tm @ Vc - W @ S
        o.append((Q * eG) @ S + Aqk @ Vnew)
        S = eG[:, :, -1].unsqueeze(-1) * S + ((G[:, :, -1:] - G).exp() * Kc).transpose(-1, -2) @ Vnew
    return torch.cat(o, 2), S


# ---------------------------------------------------------------------------
# State (§4.8, §5.3)
# ---------------------------------------------------------------------------

class State:
    """kda[l] [B,H,K,V] f32 key-first; conv[l][s] [B,W-1,C] raw inputs (oldest first);
    mla[l] [B,max_len,kv_rank+rope] latent cache [c ; k_r]; pos = current length."""

    def __init__(self, cfg, B, max_len, device, cd):
        H, K, C = cfg.kda_heads, cfg.kda_dim, cfg.kda_heads * cfg.kda_dim
        self.kda, self.conv, self.mla, self.pos, self.max_len = {}, {}, {}, 0, max_len
        self.pos_t = torch.zeros(1, dtype=torch.long, device=device)   # = pos, for static-shape decode
        for l in range(cfg.L):
            if cfg.mixer[l] == "kda":
                self.kda[l] = torch.zeros(B, H, K, K, device=device)
                self.conv[l] = {s: torch.zeros(B, cfg.conv_w - 1, C, device=device, dtype=cd) for s in "qkv"}
            else:
                self.mla[l] = torch.zeros(B, max_len, cfg.kv_rank + cfg.rope, device=device, dtype=cd)

    @property
    def lengths(self):
        return [self.pos] * next(iter(self.mla.values())).shape[0] if self.mla else None


# ---------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------

class TorchK3:
    def __init__(self, config_path, weights, device="cpu", compute_dtype=torch.bfloat16,
                 kda_chunk=64, kda_form="chunked", absorbed_decode=True, moe_gather_max=64,
                 kda_backend="torch"):
        self.cfg = c = Config(config_path)
        self.dev, self.cd = torch.device(device), compute_dtype
        self.kda_chunk, self.kda_form, self.absorbed = kda_chunk, kda_form, absorbed_decode
        self.kda_backend = kda_backend         # "torch" or "fla" (fla.ops.kda Triton kernels, CUDA)
        self.moe_gather_max = moe_gather_max   # tokens*topk up to which experts are gathered per token
        if "moe" in c.ffn:
            weights = stack_experts(weights, c)
        # BF16/F16 tensors -> compute dtype, F32/F64 -> f32 (§1.4), integers as stored.
        def conv(t):
            t = torch.as_tensor(t)
            if t.is_floating_point():
                t = t.to(self.cd if t.dtype in (torch.bfloat16, torch.float16) else torch.float32)
            return t.to(self.dev)
        p = c.prefix
        self.w = {k[len(p):] if k.startswith(p) else k: conv(v) for k, v in weights.items()}
        self.lut = torch.tensor(_E2M1, dtype=torch.float32, device=self.dev)
        self.slut = torch.tensor([2.0 ** (i - 127) for i in range(255)] + [math.nan], dtype=torch.float64).float().to(self.dev)
        # §5.3 absorbed decode: W_UK [H, nope, Lr], W_UV [H, dv, Lr] (f32)
        self.wuk, self.wuv = {}, {}
        for l in range(c.L):
            if c.mixer[l] == "mla":
                kvb = self.LW(l, "self_attn.kv_b_proj.weight").float().reshape(c.mla_heads, c.nope + c.vdim, c.kv_rank)
                self.wuk[l], self.wuv[l] = kvb[:, :c.nope], kvb[:, c.nope:].to(self.cd)

    def LW(self, l, s):
        return self.w["model.layers.%d.%s" % (l, s)]

    def R(self, x):
        return x.to(self.cd)

    def new_state(self, batch, max_len):
        return State(self.cfg, batch, max_len, self.dev, self.cd)

    @torch.no_grad()
    def fill_random(self, st, length, generator=None):
        """Fills the MLA caches with `length` tokens of random latents and the KDA states /
        conv tails with random-ish values (for timing decode at long context)."""
        kw = dict(generator=generator, device=generator.device if generator is not None else self.dev)
        for l, cache in st.mla.items():
            for b in range(cache.shape[0]):
                cache[b, :length] = torch.randn(length, cache.shape[2], **kw).to(cache)
        for l, S in st.kda.items():
            S.copy_(torch.randn(S.shape, **kw) * 0.05)
            for s, t in st.conv[l].items():
                t.copy_(torch.randn(t.shape, **kw))
        st.pos = length
        st.pos_t.fill_(length)

    def reset(self, st):
        """Empties a state in place (length 0, zero KDA state and conv tails)."""
        for S in st.kda.values():
            S.zero_()
        for d in st.conv.values():
            for t in d.values():
                t.zero_()
        st.pos = 0
        st.pos_t.zero_()

    # --- primitives (§2) ---------------------------------------------------

    def linear(self, x, w):
        return F.linear(x, w)                                  # f32 accumulate, one round

    def rms_norm(self, x, w, eps):
        xf = x.float()
        xb = self.R(xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps))
        return self.R(xb * w)

    def act(self, a, b):
        a, b = a.float(), b.float()
        c = self.cfg
        if c.act == "silu":
            return F.silu(a) * b
        return (c.beta1 * torch.tanh(a / c.beta1) * torch.sigmoid(a)) * (c.beta2 * torch.tanh(b / c.beta2))

    def glu_mlp(self, x, wg, wu, wd):
        return self.linear(self.R(self.act(self.linear(x, wg), self.linear(x, wu))), wd)

    def attn_res(self, cands, gamma, proj):
        """§3.1 softmax over depth of r_i (γ⊙p)·v_i; raw candidates mixed in f32, one round."""
        V = torch.stack([v.float() for v in cands])            # [n,B,T,d]
        r = torch.rsqrt(V.pow(2).mean(-1) + self.cfg.eps)
        s = r * (V @ (gamma.float() * proj.float().reshape(-1)))
        a = torch.softmax(s, 0)
        return self.R((a.unsqueeze(-1) * V).sum(0))

    # --- KDA (§4) ----------------------------------------------------------

    def short_conv(self, u, w, tail):
        """§4.2 depthwise causal conv over [tail ; u] in f32, SiLU, round; tail = raw inputs."""
        Wk = w.shape[-1]
        full = torch.cat([tail, u], 1)                         # [B, W-1+T, C]
        y = F.conv1d(full.float().transpose(1, 2), w.float(), groups=w.shape[0]).transpose(1, 2)
        return self.R(F.silu(y)), full[:, full.shape[1] - (Wk - 1):]

    def kda_layer(self, l, x, st):
        c = self.cfg
        H, K = c.kda_heads, c.kda_dim
        B, T, _ = x.shape
        a = lambda s: self.LW(l, "self_attn." + s)
        qc, st.conv[l]["q"] = self.short_conv(self.linear(x, a("q_proj.weight")), a("q_conv1d.weight"), st.conv[l]["q"])
        kc, st.conv[l]["k"] = self.short_conv(self.linear(x, a("k_proj.weight")), a("k_conv1d.weight"), st.conv[l]["k"])
        vc, st.conv[l]["v"] = self.short_conv(self.linear(x, a("v_proj.weight")), a("v_conv1d.weight"), st.conv[l]["v"])
        f = self.linear(self.linear(x, a("f_a_proj.weight")), a("f_b_proj.weight"))
        b = self.linear(x, a("b_proj.weight"))
        z = self.linear(x, a("g_proj.weight")) if c.full_rank_gate else \
            self.linear(self.linear(x, a("g_a_proj.weight")), a("g_b_proj.weight"))
        if self.kda_backend == "fla":
            return self.kda_fla(l, qc, kc, vc, f, b, z, st)
        # §4.3 gate (f32)
        eA = a("A_log")[:H].float().exp()[:, None]
        fd = f.float().reshape(B, T, H, K) + a("dt_bias").float().reshape(H, K)
        g = c.gate_lb * torch.sigmoid(eA * fd) if c.gate_lb is not None else -eA * F.softplus(fd)
        beta = torch.sigmoid(b.float())                        # [B,T,H]
        # §4.4 L2 norms (f32)
        q = qc.float().reshape(B, T, H, K)
        k = kc.float().reshape(B, T, H, K)
        q = q * torch.rsqrt(q.pow(2).sum(-1, keepdim=True) + 1e-6) * K ** -0.5
        k = k * torch.rsqrt(k.pow(2).sum(-1, keepdim=True) + 1e-6)
        v = vc.float().reshape(B, T, H, K)
        tr = lambda t: t.transpose(1, 2)
        core = kda_recurrent if (T == 1 or self.kda_form == "recurrent") else \
            (lambda *args: kda_chunked(*args, chunk=self.kda_chunk))
        o, st.kda[l] = core(tr(q), tr(k), tr(v), tr(g), tr(beta), st.kda[l])
        o = self.R(tr(o)).float()                              # [B,T,H,V]
        # §4.7 gated RMSNorm in f32, one round
        on = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + c.eps)
        y = self.R(on * a("o_norm.weight").float() * torch.sigmoid(z.float().reshape(B, T, H, K)))
        return self.linear(y.reshape(B, T, H * K), a("o_proj.weight"))

    def kda_fla(self, l, qc, kc, vc, f, b, z, st):
        """§4.3-4.6 through fla-core's kernels, called as the official KimiDeltaAttention layer
        does (gate, beta sigmoid and q/k L2 norm + K^-1/2 scale inside the kernel); the state
        stays key-first [B,H,K,V] f32 (state_v_first=False). fused_recurrent for T <= 64."""
        from fla.ops.kda import chunk_kda, fused_recurrent_kda
        c = self.cfg
        H, K = c.kda_heads, c.kda_dim
        B, T, _ = qc.shape
        sh = lambda t: t.reshape(B, T, H, K)
        a = lambda s: self.LW(l, "self_attn." + s)
        kw = dict(A_log=a("A_log")[:H].float().contiguous(), dt_bias=a("dt_bias").float(),
                  initial_state=st.kda[l], output_final_state=True, use_qk_l2norm_in_kernel=True,
                  use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True, lower_bound=c.gate_lb)
        if T <= 64:
            o, st.kda[l] = fused_recurrent_kda(sh(qc), sh(kc), sh(vc), sh(f), b, **kw)
        else:
            o, st.kda[l] = chunk_kda(sh(qc), sh(kc), sh(vc), sh(f), b, safe_gate=c.gate_lb is not None, **kw)
        o = self.R(o).float()
        on = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + c.eps)     # §4.7
        y = self.R(on * a("o_norm.weight").float() * torch.sigmoid(z.float().reshape(B, T, H, K)))
        return self.linear(y.reshape(B, T, H * K), a("o_proj.weight"))

    # --- Gated MLA (§5) ----------------------------------------------------

    def mla_layer(self, l, x, st):
        c = self.cfg
        H, nope, rope, dv, Lr = c.mla_heads, c.nope, c.rope, c.vdim, c.kv_rank
        B, T, _ = x.shape
        a = lambda s: self.LW(l, "self_attn." + s)
        cq = self.rms_norm(self.linear(x, a("q_a_proj.weight")), a("q_a_layernorm.weight"), 1e-6)
        q = self.linear(cq, a("q_b_proj.weight")).reshape(B, T, H, nope + rope)
        kv = self.linear(x, a("kv_a_proj_with_mqa.weight"))
        cc = self.rms_norm(kv[..., :Lr], a("kv_a_layernorm.weight"), 1e-6)
        cache = st.mla[l]
        scale = (nope + rope) ** -0.5
        if T == 1 and self.absorbed:
            # §5.3 absorbed: MQA over [c ; k_r] with 576-d queries, scores/softmax in f32.
            # Static shapes (whole preallocated cache, masked beyond pos_t) for torch.compile.
            cache.index_copy_(1, st.pos_t, torch.cat([cc, kv[..., Lr:]], -1))
            qf = q[:, 0].float()
            qa = torch.cat([torch.einsum("bhn,hnl->bhl", qf[..., :nope], self.wuk[l]), qf[..., nope:]], -1)
            ctx = cache.float()                                # [B,max_len,Lr+rope]
            live = torch.arange(cache.shape[1], device=x.device) <= st.pos_t
            p = torch.softmax((qa @ ctx.transpose(1, 2) * scale).masked_fill(~live, -math.inf), -1)
            ob = p @ ctx[..., :Lr]                             # [B,H,Lr]
            o = self.R(torch.einsum("bhl,hvl->bhv", ob, self.wuv[l].float())).unsqueeze(1)
        else:
            # §5.2 naive: expand keys/values from the latent, causal attention
            p0 = st.pos
            cache[:, p0:p0 + T] = torch.cat([cc, kv[..., Lr:]], -1)
            N = p0 + T
            kvb = self.linear(cache[:, :N, :Lr], a("kv_b_proj.weight")).reshape(B, N, H, nope + dv)
            key = torch.cat([kvb[..., :nope], cache[:, :N, None, Lr:].expand(B, N, H, rope)], -1)
            val = kvb[..., nope:]
            # SDPA (flash / mem-efficient); v padded to the q/k width for flash eligibility
            qt, kt = q.transpose(1, 2), key.transpose(1, 2)
            vt = F.pad(val.transpose(1, 2), (0, nope + rope - dv))
            if p0 == 0:
                o = F.scaled_dot_product_attention(qt, kt, vt, is_causal=True, scale=scale)
            else:
                allowed = torch.arange(N, device=x.device)[None, :] <= (p0 + torch.arange(T, device=x.device))[:, None]
                o = F.scaled_dot_product_attention(qt, kt, vt, attn_mask=allowed, scale=scale)
            o = self.R(o[..., :dv]).transpose(1, 2)
        if c.mla_gate:
            gate = self.R(torch.sigmoid(self.linear(x, a("g_proj.weight")).float()))
            o = self.R(o * gate.reshape(B, T, H, dv))
        return self.linear(o.reshape(B, T, H * dv), a("o_proj.weight"))

    # --- FFNs (§6) ---------------------------------------------------------

    def expert_w(self, l, which, idx):
        """Dequantised weights of experts idx (any shape) -> [*idx.shape, N, K] (§7.2)."""
        base = "model.layers.%d.block_sparse_moe.experts.%s." % (l, which)
        if self.cfg.mxfp4:
            return dequant_mxfp4(self.w[base + "weight_packed"][idx], self.w[base + "weight_scale"][idx],
                                 self.lut, self.slut, self.cd)
        return self.w[base + "weight"][idx]

    def moe_ffn(self, l, x):
        c = self.cfg
        m = lambda s: self.LW(l, "block_sparse_moe." + s)
        B, T, d = x.shape
        xt = x.reshape(B * T, d)
        # §6.1 router in f32, sigmoid, biased top-k selection, unbiased weights
        s = torch.sigmoid(xt.float() @ m("gate.weight").float().T)
        sel = torch.topk(s + m("gate.e_score_correction_bias").float(), c.topk, -1).indices
        ssel = s.gather(1, sel)
        omega = (ssel / (ssel.sum(-1, keepdim=True) + 1e-20) if c.renorm else ssel) * c.rsf
        # §6.2 latent experts
        xi = self.linear(xt, m("routed_expert_down_proj.weight")) if c.latent else xt
        if B * T * c.topk <= self.moe_gather_max:
            # decode: gather + dequantise the selected experts, batched matmuls
            W1, W3, W2 = (self.expert_w(l, w, sel) for w in ("w1", "w3", "w2"))   # [N,k,out,in]
            xe = xi[:, None, :, None]
            h = self.R(self.act((W1 @ xe).squeeze(-1).to(self.cd), (W3 @ xe).squeeze(-1).to(self.cd)))
            y = self.R((W2 @ h.unsqueeze(-1)).squeeze(-1)).float()                # [N,k,latent]
            r = (omega.unsqueeze(-1) * y).sum(1)
        else:
            # prefill: loop over the distinct selected experts
            r = torch.zeros(xi.shape[0], xi.shape[1], device=x.device)
            for e in torch.unique(sel).tolist():
                rows, cols = (sel == e).nonzero(as_tuple=True)
                W1, W3, W2 = (self.expert_w(l, w, e) for w in ("w1", "w3", "w2"))
                xe = xi[rows]
                h = self.R(self.act(self.linear(xe, W1), self.linear(xe, W3)))
                r.index_add_(0, rows, omega[rows, cols, None] * self.linear(h, W2).float())
        r = self.R(r)
        if c.latent_norm:
            r = self.rms_norm(r, m("routed_expert_norm.weight"), c.eps)
        out = self.linear(r, m("routed_expert_up_proj.weight")) if c.latent else r
        if c.n_shared:   # §6.3
            sh = self.glu_mlp(xt, m("shared_experts.gate_proj.weight"), m("shared_experts.up_proj.weight"),
                              m("shared_experts.down_proj.weight"))
            out = self.R(out + sh)
        return out.reshape(B, T, -1)

    # --- the whole model (§3.2) --------------------------------------------

    @torch.no_grad()
    def forward(self, tokens, st, step=None):
        """tokens [B,T] -> logits f32 [B,T,V]. `step` may be a torch.compile'd self.step
        (decode: no python int of the state is read inside it)."""
        tokens = tokens.to(self.dev)
        T = tokens.shape[1]
        assert st.pos + T <= st.max_len or not st.mla, "MLA cache full"
        out = (step or self.step)(tokens, st)
        st.pos += T
        st.pos_t += T
        return out

    def step(self, tokens, st):
        c = self.cfg
        blocks, P = [], self.w["model.embed_tokens.weight"][tokens]
        for l in range(c.L):
            P_in = P
            h = self.attn_res(blocks + [P_in], self.LW(l, "self_attention_res_norm.weight"),
                              self.LW(l, "self_attention_res_proj.weight")) if blocks else P_in
            if l % c.block_size == 0:
                blocks.append(P_in)
                P = None
            xn = self.rms_norm(h, self.LW(l, "input_layernorm.weight"), c.eps)
            a = self.kda_layer(l, xn, st) if c.mixer[l] == "kda" else self.mla_layer(l, xn, st)
            P = a if P is None else self.R(P + a)
            h2 = self.attn_res(blocks + [P], self.LW(l, "mlp_res_norm.weight"), self.LW(l, "mlp_res_proj.weight"))
            xn2 = self.rms_norm(h2, self.LW(l, "post_attention_layernorm.weight"), c.eps)
            if c.ffn[l] == "dense":
                mo = self.glu_mlp(xn2, self.LW(l, "mlp.gate_proj.weight"), self.LW(l, "mlp.up_proj.weight"),
                                  self.LW(l, "mlp.down_proj.weight"))
            else:
                mo = self.moe_ffn(l, xn2)
            P = self.R(P + mo)
        h = self.attn_res(blocks + [P], self.w["model.output_attn_res_norm.weight"],
                          self.w["model.output_attn_res_proj.weight"])
        y = self.rms_norm(h, self.w["model.norm.weight"], c.eps)
        head = self.w["model.embed_tokens.weight" if c.tie else "lm_head.weight"]
        return self.linear(y, head).float()


# ---------------------------------------------------------------------------
# Benchmark interface (bench/k3_bench.py): make_peer(config, weights).time_decode / time_prefill
# ---------------------------------------------------------------------------

def _stats(ts):
    ts = sorted(ts)
    q = lambda p: ts[min(len(ts) - 1, int(round(p * (len(ts) - 1))))]
    return {"median_s": ts[len(ts) // 2] if len(ts) % 2 else 0.5 * (ts[len(ts) // 2 - 1] + ts[len(ts) // 2]),
            "p10_s": q(0.1), "p90_s": q(0.9), "n": len(ts)}


class Peer:
    def __init__(self, config, weights, device="cuda", **kw):
        self.m = TorchK3(config, weights, device, **kw)
        self.compiled = None

    def _timed(self, fn, reps, warmup):
        import time
        sync = torch.cuda.synchronize if self.m.dev.type == "cuda" else (lambda: None)
        for _ in range(warmup):
            fn()
        ts = []
        for _ in range(reps):
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            ts.append(time.perf_counter() - t0)
        return _stats(ts)

    def time_decode(self, B, context, reps, mode="eager"):
        """B sequences with `context` random tokens in the caches; one decode step per call."""
        m = self.m
        warm = 3 if mode == "compile" else 2
        st = m.new_state(B, context + reps + warm + 1)
        gen = torch.Generator(device=m.dev).manual_seed(0)
        m.fill_random(st, context, gen)
        tok = torch.randint(3, m.cfg.vocab, (B, 1), device=m.dev, generator=gen)
        step = None
        if mode == "compile":
            self.compiled = self.compiled or torch.compile(m.step)
            step = self.compiled
        with torch.no_grad():
            return self._timed(lambda: m.forward(tok, st, step), reps, warm)

    def time_prefill(self, T, reps, mode="eager"):
        """One sequence of T tokens from an empty state per call."""
        m = self.m
        st = m.new_state(1, T)
        gen = torch.Generator(device=m.dev).manual_seed(1)
        tok = torch.randint(3, m.cfg.vocab, (1, T), device=m.dev, generator=gen)

        def once():
            m.reset(st)
            m.forward(tok, st)
        with torch.no_grad():
            return self._timed(once, reps, 1)


def make_peer(config, weights, device="cuda", **kw):
    return Peer(config, weights, device, **kw)
