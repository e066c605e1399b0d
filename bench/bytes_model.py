"""What a K3 step must move and compute, from a library's manifest
(`k3c CONFIG --emit=manifest`): the byte and FLOP model of k3-bench
(BENCHMARKS.md) and of the roofline picture (roofline.py). No torch here.
"""
import math

# K3's attention heads (K3_SPEC: num_attention_heads, KDA num_heads): 96.
K3_HEADS = 96

def weight_bytes(args):
    dense = expert = 0
    per_expert = 0
    for a in args:
        if a["role"] != "weight":
            continue
        n = math.prod(a["shape"]) * (4 if a["dtype"] == "f32" else 2 if a["dtype"] == "bf16" else 1)
        if "{e}" in a["name"]:
            per_expert += n // a["shape"][0]
        elif "embed_tokens" in a["name"]:
            continue
        else:
            dense += n
    return dense, per_expert


def decode_bytes(m, batch, context):
    args = m["abi"]["args"]
    E, k = m["moe"]["num_experts"], m["moe"]["top_k"]
    dense, per_expert_all_layers = weight_bytes(args)
    distinct = E * (1 - (1 - k / E) ** batch)
    hidden = next(a for a in args if "embed_tokens" in a.get("name", ""))["shape"][1]
    st = m["state"]
    state_rw = 0
    for g in st["groups"]:
        if "bytes_per_sequence" in g:
            state_rw += 2 * g["bytes_per_sequence"]
        else:
            state_rw += g["bytes_per_token"] * (context + 1)
    return dense + distinct * per_expert_all_layers + batch * (2 * hidden + state_rw)


def prefill_flops(m, T):
    p = m["parameters"]
    active = p["active_per_token"]
    lay = m["layers"]
    attn = 0
    for L in lay:
        if L.get("mixer") == "mla":
            attn += 2 * K3_HEADS * (T * T / 2) * (192 + 128)
        elif L.get("mixer") == "kda":
            attn += 2 * 3 * K3_HEADS * 128 * 128 * T
    return 2 * active * T + attn


def kernel_model(m, context):
    """Batch-1 decode: per kernel family of the library (its kernels' names
    start with one of the family's prefixes, separated by "|"), (bytes it
    must read or write, FLOPs), for the families whose traffic is weights
    or state."""
    args = m["abi"]["args"]
    k = m["moe"]["top_k"]
    dense, per_expert_all_layers = weight_bytes(args)
    groups = {g["kind"]: g for g in m["state"]["groups"]}
    out = {}
    # Linear layers (every dense projection, the router, the LM head): each
    # bf16 weight element read once, one multiply-add: the kernels of
    # k3k_linear(_few), k3k_matmul_* (16 tokens and more: k3k_matmul_f32),
    # k3k_router_* (the router's scores; few tokens: grouped with the MoE
    # layer's projections of x and with the routing,
    # k3k_router_route_few_x1_linear_few_x3),
    # k3k_latent_up_* (few tokens: the latent up projection with the
    # experts' weighted sum, its norm and the shared experts' add,
    # k3k_latent_up_add_few) and k3k_lm_head_* (the LM head:
    # k3k_lm_head_few for few tokens).
    out["k3k_linear|k3k_matmul|k3k_router|k3k_latent_up|k3k_lm_head"] = (
        dense, dense)
    # The selected experts: MXFP4 (half a byte per element, scales aside):
    # every k3k_experts_* kernel (the two stages and the weighted sum).
    experts = k * per_expert_all_layers
    out["k3k_experts"] = (experts, 4 * experts)
    # Absorbed MLA decode: the latent cache of every MLA layer read once;
    # scores and the weighted sum over it for every head: the kernels of
    # k3k_gated_mla and of its two stages k3k_mla_scores / k3k_mla_wsum.
    mla = groups.get("mla.latent")
    if mla:
        cache = mla["bytes_per_token"] * (context + 1)
        out["k3k_gated_mla|k3k_mla"] = (cache, 2 * 2 * K3_HEADS * cache // 2)
    # KDA: the fp32 state of every KDA layer read and written once, a few
    # operations per element (decay, delta update, read-out).
    kda = groups.get("kda.recurrent")
    if kda:
        state = kda["bytes_per_sequence"]
        out["k3k_kda"] = (2 * state, state)
    return out
