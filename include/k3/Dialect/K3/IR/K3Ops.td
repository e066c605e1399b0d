//===- K3Ops.td - k3 operations ----------------------------*- tablegen -*-===//
//
// One op per mechanism of K3_SPEC.md. Every op computes on one sequence
// segment of T tokens (T dynamic); state operands carry what earlier segments
// left behind and results carry it forward.
//
//===----------------------------------------------------------------------===//

#ifndef K3_DIALECT_K3_IR_K3OPS_TD
#define K3_DIALECT_K3_IR_K3OPS_TD

include "k3/Dialect/K3/IR/K3Dialect.td"
include "k3/Dialect/K3/IR/K3Attrs.td"
include "k3/Dialect/K3/IR/K3Types.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/BuiltinAttributes.td"

def K3_FloatTensor : RankedTensorOf<[BF16, F16, F32]>;
def K3_TokenTensor : 1DTensorOf<[I32, I64]>;
def K3_ExpertWeight : AnyTypeOf<[RankedTensorOf<[BF16, F16, F32]>, K3_MXFP4Type]>;

//===----------------------------------------------------------------------===//
// Weights
//===----------------------------------------------------------------------===//

def K3_WeightOp : K3_Op<"weight", [Pure]> {
  let summary = "symbolic reference to a checkpoint tensor";
  let description = [{
    Names a tensor of the checkpoint (K3_SPEC §1.4) with its shape, dtype and
    quantization. Nothing is embedded: the runtime binds the bytes by name.

    A name containing `{e}` is an expert stack: the leading dimension of the
    type is the expert count and `{e}` stands for 0 .. count-1. An MXFP4
    weight (`!k3.mxfp4`) names the prefix shared by its `.weight_packed` and
    `.weight_scale` tensors; any other weight names one tensor.

    ```mlir
    %wq = k3.weight "language_model.model.layers.0.self_attn.q_proj.weight"
        : tensor<12288x7168xbf16>
    %w1 = k3.weight "language_model.model.layers.1.block_sparse_moe.experts.{e}.w1"
        : !k3.mxfp4<896x3072x3584>
    ```
  }];
  let arguments = (ins StrAttr:$name);
  let results = (outs AnyTypeOf<[AnyStaticShapeTensor, K3_MXFP4Type]>:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// True if the name ranges over experts (`{e}`).
    bool isExpertStack() { return getName().contains("{e}"); }
  }];
}

def K3_UnusedWeightOp : K3_Op<"unused_weight", [HasParent<"::mlir::ModuleOp">]> {
  let summary = "a checkpoint tensor that the model never reads";
  let description = [{
    Declares a tensor that the checkpoint holds but the computation does not
    read, so that the runtime expects it (and can validate its shape and
    dtype) instead of reporting it as unexpected. In K3 these are layer 0's
    pre-mixer AttnRes weights: the AttnRes before the first mixer is skipped
    because no block is stored yet (K3_SPEC §3.2–3.3).

    ```mlir
    k3.unused_weight "language_model.model.layers.0.self_attention_res_norm.weight"
        : tensor<7168xbf16>
    ```
  }];
  let arguments = (ins StrAttr:$name, TypeAttrOf<AnyStaticShapeTensor>:$type);
  let assemblyFormat = "$name attr-dict `:` $type";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Embedding, LM head, projections
//===----------------------------------------------------------------------===//

def K3_EmbeddingOp : K3_Op<"embedding", [Pure]> {
  let summary = "token embedding lookup (K3_SPEC §3.2)";
  let description = [{
    `x0[t] = table[tokens[t]]`, no scaling. Token ids must lie in
    [0, vocab); the runtime checks them before the lookup.

    ```mlir
    %x0 = k3.embedding %tokens, %table
        : (tensor<?xi32>, tensor<163840x7168xbf16>) -> tensor<?x7168xbf16>
    ```
  }];
  let arguments = (ins K3_TokenTensor:$tokens, 2DTensorOf<[BF16, F16, F32]>:$table);
  let results = (outs 2DTensorOf<[BF16, F16, F32]>:$result);
  let assemblyFormat = "$tokens `,` $table attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def K3_LinearOp : K3_Op<"linear", [Pure]> {
  let summary = "bias-free linear layer y = W x (K3_SPEC §1.4, §2)";
  let description = [{
    `x` is [T, K], `weight` is [N, K] as stored in the checkpoint
    (`[out, in]`); the result is [T, N]. Products accumulate in fp32 and are
    rounded once to the result element type.

    ```mlir
    %q = k3.linear %x, %wq
        : (tensor<?x7168xbf16>, tensor<12288x7168xbf16>) -> tensor<?x12288xbf16>
    ```
  }];
  let arguments = (ins 2DTensorOf<[BF16, F16, F32]>:$input,
                       2DTensorOf<[BF16, F16, F32]>:$weight);
  let results = (outs 2DTensorOf<[BF16, F16, F32]>:$result);
  let assemblyFormat = "$input `,` $weight attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def K3_LMHeadOp : K3_Op<"lm_head", [Pure]> {
  let summary = "logits over the vocabulary (K3_SPEC §3.2)";
  let description = [{
    `logits = W_lm y` for the final-normed hidden state y [T, D], `weight`
    [V, D] (untied from the embedding in K3). Accumulation is fp32; the result
    element type is the logits dtype.

    ```mlir
    %logits = k3.lm_head %y, %w
        : (tensor<?x7168xbf16>, tensor<163840x7168xbf16>) -> tensor<?x163840xf32>
    ```
  }];
  let arguments = (ins 2DTensorOf<[BF16, F16, F32]>:$input,
                       2DTensorOf<[BF16, F16, F32]>:$weight);
  let results = (outs 2DTensorOf<[BF16, F16, F32]>:$result);
  let assemblyFormat = "$input `,` $weight attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Norms
//===----------------------------------------------------------------------===//

def K3_RMSNormOp : K3_Op<"rms_norm", [Pure]> {
  let summary = "RMSNorm over the last dimension (K3_SPEC §2)";
  let description = [{
    `y = γ · cast_in(x_f32 / sqrt(mean(x_f32²) + eps))`: normalised in fp32,
    cast back to the input dtype, then multiplied by γ in that dtype (the
    order HF uses).

    ```mlir
    %y = k3.rms_norm %x, %gamma {eps = 1.0e-05 : f64}
        : (tensor<?x7168xbf16>, tensor<7168xbf16>) -> tensor<?x7168xbf16>
    ```
  }];
  let arguments = (ins K3_FloatTensor:$input, 1DTensorOf<[BF16, F16, F32]>:$weight,
                       F64Attr:$eps);
  let results = (outs K3_FloatTensor:$result);
  let assemblyFormat = "$input `,` $weight attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def K3_GatedRMSNormOp : K3_Op<"gated_rms_norm", [Pure]> {
  let summary = "per-head RMSNorm with a sigmoid output gate (K3_SPEC §4.7)";
  let description = [{
    For every token and head: `y = RMSNorm_eps(o; γ) ⊙ σ(z)`, computed in
    fp32 and cast once to the result type (fla `FusedRMSNormGated` with
    `activation='sigmoid'`). `input` and `gate` are [T, H, D], γ is [D] and
    shared by all heads.

    ```mlir
    %y = k3.gated_rms_norm %o, %z, %gamma {eps = 1.0e-05 : f64}
        : (tensor<?x96x128xbf16>, tensor<?x96x128xbf16>, tensor<128xf32>)
        -> tensor<?x96x128xbf16>
    ```
  }];
  let arguments = (ins 3DTensorOf<[BF16, F16, F32]>:$input,
                       3DTensorOf<[BF16, F16, F32]>:$gate,
                       1DTensorOf<[BF16, F16, F32]>:$weight, F64Attr:$eps);
  let results = (outs 3DTensorOf<[BF16, F16, F32]>:$result);
  let assemblyFormat = "$input `,` $gate `,` $weight attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Block Attention Residuals
//===----------------------------------------------------------------------===//

def K3_AttnResOp : K3_Op<"attn_res", [Pure]> {
  let summary = "softmax attention over depth candidates (K3_SPEC §3.1)";
  let description = [{
    For every token, over the candidates v_1..v_n (stored block vectors and
    the current partial sum, in that order):

        r_i = 1 / sqrt(mean(v_i²) + eps)            (fp32)
        s_i = r_i · Σ_j (γ_j · p_j) · v_i[j]        (fp32)
        h   = cast( Σ_i softmax(s)_i · v_i )

    `norm_weight` is γ (`*_res_norm.weight`, [D]) and `proj_weight` is p
    (`*_res_proj.weight`, [1, D]). The values mixed are the raw candidates.

    ```mlir
    %h = k3.attn_res %b0, %p norm %gamma proj %w {eps = 1.0e-05 : f64}
        : (tensor<?x7168xbf16>, tensor<?x7168xbf16>, tensor<7168xbf16>,
           tensor<1x7168xbf16>) -> tensor<?x7168xbf16>
    ```
  }];
  let arguments = (ins Variadic<2DTensorOf<[BF16, F16, F32]>>:$candidates,
                       1DTensorOf<[BF16, F16, F32]>:$norm_weight,
                       2DTensorOf<[BF16, F16, F32]>:$proj_weight, F64Attr:$eps);
  let results = (outs 2DTensorOf<[BF16, F16, F32]>:$result);
  let assemblyFormat = [{
    $candidates `norm` $norm_weight `proj` $proj_weight attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Kimi Delta Attention
//===----------------------------------------------------------------------===//

def K3_ShortConvOp : K3_Op<"short_conv", [Pure]> {
  let summary = "depthwise causal short convolution with SiLU (K3_SPEC §4.2)";
  let description = [{
    `y_t[c] = SiLU(Σ_{j<W} w[c, 0, j] · u_{t-W+1+j}[c])` with kernel width
    W = `tail.width + 1`; inputs before the segment come from `tail` (zeros
    for a fresh sequence). `new_tail` holds the last W-1 raw inputs.

    ```mlir
    %y, %tail1 = k3.short_conv %u, %w, %tail0
        : (tensor<?x12288xbf16>, tensor<12288x1x4xf32>,
           !k3.conv_state<channels = 12288, width = 3, element_type = bf16>)
        -> (tensor<?x12288xbf16>,
            !k3.conv_state<channels = 12288, width = 3, element_type = bf16>)
    ```
  }];
  let arguments = (ins 2DTensorOf<[BF16, F16, F32]>:$input,
                       3DTensorOf<[BF16, F16, F32]>:$weight,
                       K3_ConvStateType:$tail);
  let results = (outs 2DTensorOf<[BF16, F16, F32]>:$result,
                      K3_ConvStateType:$new_tail);
  let assemblyFormat = "$input `,` $weight `,` $tail attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def K3_KDAOp : K3_Op<"kda", [Pure]> {
  let summary = "Kimi Delta Attention core: gate, beta, L2 norm, delta rule (K3_SPEC §4.3–4.6)";
  let description = [{
    Inputs per token t and head h (after the short convolutions):
    `query`, `key` [T, H, dk], `value` [T, H, dv], the forget-gate
    pre-activation `gate` = W_fb W_fa x [T, H, dk], the beta logits `beta`
    [T, H], `a_log` (at least H entries; entry h is used) and `dt_bias`
    [H*dk]. The op computes

        g    = λ·σ(exp(A_h)·(f + δ))        (gate_form = lower_bound_sigmoid, K3)
             = −exp(A_h)·softplus(f + δ)    (gate_form = softplus, Kimi Linear)
        β    = σ(b)
        q, k = L2-normalised (eps `l2_eps` inside the root); q scaled by `scale`
        S_t  = (I − β k kᵀ) Diag(exp g) S_{t−1} + β k vᵀ,   o_t = S_tᵀ q

    all in fp32, from the entering `state` to the returned `new_state`. The
    output is cast to the element type of `value`. `chunk_size` is the chunk
    length C of the WY/UT prefill form (§4.6); the recurrence (§4.5) and the
    chunked form are equal up to rounding.

    ```mlir
    %o, %s1 = k3.kda %q, %k, %v, %f, %b, %alog, %dt, %s0
        {gate_form = #k3.kda_gate_form<lower_bound_sigmoid>, lower_bound = -5.0 : f64,
         scale = 0.088388347648318447 : f64, l2_eps = 1.0e-06 : f64, chunk_size = 64 : i64}
        : (tensor<?x96x128xbf16>, tensor<?x96x128xbf16>, tensor<?x96x128xbf16>,
           tensor<?x96x128xbf16>, tensor<?x96xbf16>, tensor<128xf32>, tensor<12288xf32>,
           !k3.kda_state<heads = 96, key_dim = 128, value_dim = 128, element_type = f32, layout = value_first>)
        -> (tensor<?x96x128xbf16>,
            !k3.kda_state<heads = 96, key_dim = 128, value_dim = 128, element_type = f32, layout = value_first>)
    ```
  }];
  let arguments = (ins 3DTensorOf<[BF16, F16, F32]>:$query,
                       3DTensorOf<[BF16, F16, F32]>:$key,
                       3DTensorOf<[BF16, F16, F32]>:$value,
                       3DTensorOf<[BF16, F16, F32]>:$gate,
                       2DTensorOf<[BF16, F16, F32]>:$beta,
                       1DTensorOf<[F32]>:$a_log,
                       1DTensorOf<[F32]>:$dt_bias,
                       K3_KDAStateType:$state,
                       K3_KDAGateFormAttr:$gate_form,
                       OptionalAttr<F64Attr>:$lower_bound,
                       F64Attr:$scale, F64Attr:$l2_eps,
                       I64Attr:$chunk_size);
  let results = (outs 3DTensorOf<[BF16, F16, F32]>:$result,
                      K3_KDAStateType:$new_state);
  let assemblyFormat = [{
    $query `,` $key `,` $value `,` $gate `,` $beta `,` $a_log `,` $dt_bias `,`
    $state attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Gated MLA
//===----------------------------------------------------------------------===//

def K3_GatedMLAOp : K3_Op<"gated_mla", [Pure]> {
  let summary = "gated multi-head latent attention without positional encoding (K3_SPEC §5)";
  let description = [{
    From the normed layer input x [T, D]:

        c_q = RMSNorm(W_DQ x; γ_q)          q = W_UQ c_q, per head [q_n ; q_r]
        [c̃ ; k_r] = W_DKV x                 c = RMSNorm(c̃; γ_kv)
        [k_n ; v] = W_UKV c per head        gate = σ(W_G x)
        o_h(t) = Σ_j softmax_j(q_h(t)·[k_n,h(j) ; k_r(j)] · scale + causal) v_h(j)
        result = concat_h o_h ⊙ gate        ([T, H·dv], before o_proj)

    No rotary embedding: the `rope_dim` parts are extra unrotated content
    dimensions (`mla_use_nope`). The cache holds [c ; k_r] per token
    (`latent_dim + rope_dim` values); the op appends the segment's tokens and
    attends over the whole cache, so j ranges over earlier segments too.
    `scale` is 1/sqrt(nope_dim + rope_dim). `output_gate` is absent when the
    config disables the gate.

    ```mlir
    %a, %c1 = k3.gated_mla %x, %wqa, %gqa, %wqb, %wkva, %gkva, %wkvb, %c0 gate %wg
        {heads = 96 : i64, nope_dim = 128 : i64, rope_dim = 64 : i64, v_dim = 128 : i64,
         scale = 0.072168783648703216 : f64, q_norm_eps = 1.0e-06 : f64,
         kv_norm_eps = 1.0e-06 : f64}
        : (...) -> (tensor<?x12288xbf16>, !k3.mla_cache<...>)
    ```
  }];
  let arguments = (ins 2DTensorOf<[BF16, F16, F32]>:$input,
                       2DTensorOf<[BF16, F16, F32]>:$q_a_weight,
                       1DTensorOf<[BF16, F16, F32]>:$q_a_norm,
                       2DTensorOf<[BF16, F16, F32]>:$q_b_weight,
                       2DTensorOf<[BF16, F16, F32]>:$kv_a_weight,
                       1DTensorOf<[BF16, F16, F32]>:$kv_a_norm,
                       2DTensorOf<[BF16, F16, F32]>:$kv_b_weight,
                       K3_MLACacheType:$cache,
                       Optional<2DTensorOf<[BF16, F16, F32]>>:$output_gate,
                       I64Attr:$heads, I64Attr:$nope_dim, I64Attr:$rope_dim,
                       I64Attr:$v_dim, F64Attr:$scale, F64Attr:$q_norm_eps,
                       F64Attr:$kv_norm_eps);
  let results = (outs 2DTensorOf<[BF16, F16, F32]>:$result,
                      K3_MLACacheType:$new_cache);
  let assemblyFormat = [{
    $input `,` $q_a_weight `,` $q_a_norm `,` $q_b_weight `,` $kv_a_weight `,`
    $kv_a_norm `,` $kv_b_weight `,` $cache (`gate` $output_gate^)? attr-dict
    `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// MLPs and Stable LatentMoE
//===----------------------------------------------------------------------===//

def K3_GLUMLPOp : K3_Op<"glu_mlp", [Pure]> {
  let summary = "gated MLP W_down · act(W_gate x, W_up x) (K3_SPEC §2, §6.4)";
  let description = [{
    `activation = situ`: SiTU(a, b) = [β₁·tanh(a/β₁)·σ(a)]·[β₂·tanh(b/β₂)]
    (K3, β₁ = `beta`, β₂ = `linear_beta`); `silu`: a·σ(a)·b (SwiGLU). The
    activation is computed in fp32 and cast to the input type. Used for the
    dense layer 0 (intermediate_size wide).

    ```mlir
    %m = k3.glu_mlp %x, %wg, %wu, %wd
        {activation = #k3.glu_activation<situ>, beta = 4.0 : f64, linear_beta = 25.0 : f64}
        : (tensor<?x7168xbf16>, tensor<33792x7168xbf16>, tensor<33792x7168xbf16>,
           tensor<7168x33792xbf16>) -> tensor<?x7168xbf16>
    ```
  }];
  let arguments = (ins 2DTensorOf<[BF16, F16, F32]>:$input,
                       2DTensorOf<[BF16, F16, F32]>:$gate_weight,
                       2DTensorOf<[BF16, F16, F32]>:$up_weight,
                       2DTensorOf<[BF16, F16, F32]>:$down_weight,
                       K3_GLUActivationAttr:$activation,
                       F64Attr:$beta, F64Attr:$linear_beta);
  let results = (outs 2DTensorOf<[BF16, F16, F32]>:$result);
  let assemblyFormat = [{
    $input `,` $gate_weight `,` $up_weight `,` $down_weight attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def K3_LatentMoEOp : K3_Op<"latent_moe", [Pure, AttrSizedOperandSegments]> {
  let summary = "Stable LatentMoE: router, top-k, latent experts, norm, up, shared (K3_SPEC §6, §7)";
  let description = [{
    For every token x [D] (the output of `post_attention_layernorm`):

        s_e = σ(w_e · x)                     (fp32 logits, `router_weight` [E, D])
        sel = top-k of s_e + b_e             (`router_bias` [E], selection only)
        ω_e = s_e / (Σ_sel s + 1e-20) · routed_scaling_factor   (renormalize)
        ξ   = W_down x                       (`latent_down` [L, D])
        y_e = W2_e · act(W1_e ξ, W3_e ξ)     (experts [E, I, L], [E, I, L], [E, L, I])
        r   = cast(Σ_sel ω_e y_e)            (fp32 sum)
        R   = W_up RMSNorm(r; γ_lat)         (`latent_norm` optional, `latent_up` [D, L])
        out = R + W_sd act(W_sg x, W_su x)   (shared experts, optional)

    Expert weights are bf16 tensors or `!k3.mxfp4` stacks, dequantised on use
    (W4A16, §7.2). Without `latent_down`/`latent_up` the experts work at full
    width (L = D) as in Kimi Linear.

    ```mlir
    %y = k3.latent_moe %x router %wr, %bias latent %wdown, %wup
        experts %w1, %w3, %w2 norm %gl shared %sg, %su, %sd
        {num_experts = 896 : i64, top_k = 16 : i64, routed_scaling_factor = 1.0 : f64,
         renormalize = true, norm_eps = 1.0e-05 : f64,
         activation = #k3.glu_activation<situ>, beta = 4.0 : f64, linear_beta = 25.0 : f64}
        : (...) -> tensor<?x7168xbf16>
    ```
  }];
  let arguments = (ins 2DTensorOf<[BF16, F16, F32]>:$input,
                       2DTensorOf<[BF16, F16, F32]>:$router_weight,
                       1DTensorOf<[F32]>:$router_bias,
                       Optional<2DTensorOf<[BF16, F16, F32]>>:$latent_down,
                       Optional<2DTensorOf<[BF16, F16, F32]>>:$latent_up,
                       K3_ExpertWeight:$expert_gate,
                       K3_ExpertWeight:$expert_up,
                       K3_ExpertWeight:$expert_down,
                       Optional<1DTensorOf<[BF16, F16, F32]>>:$latent_norm,
                       Optional<2DTensorOf<[BF16, F16, F32]>>:$shared_gate,
                       Optional<2DTensorOf<[BF16, F16, F32]>>:$shared_up,
                       Optional<2DTensorOf<[BF16, F16, F32]>>:$shared_down,
                       I64Attr:$num_experts, I64Attr:$top_k,
                       F64Attr:$routed_scaling_factor, BoolAttr:$renormalize,
                       F64Attr:$norm_eps, K3_GLUActivationAttr:$activation,
                       F64Attr:$beta, F64Attr:$linear_beta);
  let results = (outs 2DTensorOf<[BF16, F16, F32]>:$result);
  let assemblyFormat = [{
    $input `router` $router_weight `,` $router_bias
    (`latent` $latent_down^ `,` $latent_up)?
    `experts` $expert_gate `,` $expert_up `,` $expert_down
    (`norm` $latent_norm^)?
    (`shared` $shared_gate^ `,` $shared_up `,` $shared_down)?
    attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

#endif // K3_DIALECT_K3_IR_K3OPS_TD
