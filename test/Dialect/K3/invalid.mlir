// RUN: k3-opt %s --split-input-file --verify-diagnostics

// Every verifier message of the k3 dialect's types and ops.

//===----------------------------------------------------------------------===//
// Types
//===----------------------------------------------------------------------===//

// expected-error @+1 {{KDA state needs positive heads, key_dim and value_dim, got 0, 128, 128}}
func.func @kda_state_heads(%s: !k3.kda_state<heads = 0, key_dim = 128, value_dim = 128, element_type = f32, layout = value_first>)

// -----

// expected-error @+1 {{KDA state element type must be f32, f16 or bf16, got 'i32'}}
func.func @kda_state_type(%s: !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = i32, layout = key_first>)

// -----

// expected-error @+1 {{conv state needs positive channels, got 0}}
func.func @conv_channels(%s: !k3.conv_state<channels = 0, width = 3, element_type = bf16>)

// -----

// expected-error @+1 {{conv state width (kernel size - 1) must be >= 0, got -1}}
func.func @conv_width(%s: !k3.conv_state<channels = 8, width = -1, element_type = bf16>)

// -----

// expected-error @+1 {{conv state element type must be f32, f16 or bf16, got 'i8'}}
func.func @conv_type(%s: !k3.conv_state<channels = 8, width = 3, element_type = i8>)

// -----

// expected-error @+1 {{MLA cache needs latent_dim > 0 and rope_dim >= 0, got 0 and 64}}
func.func @mla_latent(%c: !k3.mla_cache<latent_dim = 0, rope_dim = 64, element_type = bf16, page_size = 64>)

// -----

// expected-error @+1 {{MLA cache page_size must be positive, got 0}}
func.func @mla_page(%c: !k3.mla_cache<latent_dim = 512, rope_dim = 64, element_type = bf16, page_size = 0>)

// -----

// expected-error @+1 {{MLA cache element type must be f32, f16 or bf16, got 'i32'}}
func.func @mla_type(%c: !k3.mla_cache<latent_dim = 512, rope_dim = 64, element_type = i32, page_size = 64>)

// -----

// expected-error @+1 {{MXFP4 weight must have rank >= 2, got rank 1}}
func.func @mxfp4_rank(%w: !k3.mxfp4<64>)

// -----

// expected-error @+1 {{MXFP4 weight dimensions must be positive}}
func.func @mxfp4_zero(%w: !k3.mxfp4<0x64>)

// -----

// The latent (reduction) width of an MXFP4 expert must be a multiple of the
// 32-element scale group (K3_SPEC §7.2).
// expected-error @+1 {{MXFP4 reduction dimension 48 is not a multiple of the 32-element scale group}}
func.func @mxfp4_group(%w: !k3.mxfp4<8x16x48>)

//===----------------------------------------------------------------------===//
// Weights
//===----------------------------------------------------------------------===//

// -----

func.func @weight_name() {
  // expected-error @+1 {{'k3.weight' op needs a checkpoint tensor name}}
  %0 = k3.weight "" : tensor<4xbf16>
  return
}

// -----

func.func @weight_two_placeholders() {
  // expected-error @+1 {{'k3.weight' op name 'a.{e}.{e}' has more than one '{e}'}}
  %0 = k3.weight "a.{e}.{e}" : tensor<4x4xbf16>
  return
}

// -----

func.func @weight_stack_rank() {
  // expected-error @+1 {{'k3.weight' op expert stack 'experts.{e}.b' needs a leading expert dimension}}
  %0 = k3.weight "experts.{e}.b" : tensor<4xbf16>
  return
}

// -----

func.func @weight_dtype() {
  // expected-error @+1 {{'k3.weight' op weight 'w' must be bf16, f16, f32 or !k3.mxfp4, got 'i8'}}
  %0 = k3.weight "w" : tensor<4xi8>
  return
}

// -----

// expected-error @+1 {{'k3.unused_weight' op needs a checkpoint tensor name}}
k3.unused_weight "" : tensor<4xbf16>

// -----

// expected-error @+1 {{'k3.unused_weight' op weight 'w' must be bf16, f16 or f32, got 'i32'}}
k3.unused_weight "w" : tensor<4xi32>

// -----

func.func @unused_weight_in_function() {
  // expected-error @+1 {{'k3.unused_weight' op expects parent op 'builtin.module'}}
  k3.unused_weight "w" : tensor<4xbf16>
  return
}

//===----------------------------------------------------------------------===//
// Embedding, linear, LM head
//===----------------------------------------------------------------------===//

// -----

func.func @embedding_width(%t: tensor<?xi32>, %e: tensor<64x16xbf16>) {
  // expected-error @+1 {{'k3.embedding' op result must have shape [?, 16], got [?, 8]}}
  %0 = k3.embedding %t, %e : (tensor<?xi32>, tensor<64x16xbf16>) -> tensor<?x8xbf16>
  return
}

// -----

func.func @embedding_type(%t: tensor<?xi32>, %e: tensor<64x16xbf16>) {
  // expected-error @+1 {{'k3.embedding' op result element type must be the table's or f32}}
  %0 = k3.embedding %t, %e : (tensor<?xi32>, tensor<64x16xbf16>) -> tensor<?x16xf16>
  return
}

// -----

func.func @linear_transposed(%x: tensor<?x16xbf16>, %w: tensor<16x8xbf16>) {
  // A weight stored [in, out] instead of the checkpoint's [out, in].
  // expected-error @+1 {{'k3.linear' op input width 16 does not match the weight's in-features 8 (weights are [out, in])}}
  %0 = k3.linear %x, %w : (tensor<?x16xbf16>, tensor<16x8xbf16>) -> tensor<?x16xbf16>
  return
}

// -----

func.func @linear_result(%x: tensor<?x16xbf16>, %w: tensor<8x16xbf16>) {
  // expected-error @+1 {{'k3.linear' op result must have shape [?, 8], got [?, 16]}}
  %0 = k3.linear %x, %w : (tensor<?x16xbf16>, tensor<8x16xbf16>) -> tensor<?x16xbf16>
  return
}

// -----

func.func @lm_head_vocab(%x: tensor<?x16xbf16>, %w: tensor<64x16xbf16>) {
  // expected-error @+1 {{'k3.lm_head' op result must have shape [?, 64], got [?, 32]}}
  %0 = k3.lm_head %x, %w : (tensor<?x16xbf16>, tensor<64x16xbf16>) -> tensor<?x32xf32>
  return
}

//===----------------------------------------------------------------------===//
// Norms and AttnRes
//===----------------------------------------------------------------------===//

// -----

func.func @rms_norm_type(%x: tensor<?x16xbf16>, %g: tensor<16xbf16>) {
  // expected-error @+1 {{'k3.rms_norm' op result type must equal the input type}}
  %0 = k3.rms_norm %x, %g {eps = 1.0e-5 : f64} : (tensor<?x16xbf16>, tensor<16xbf16>) -> tensor<?x16xf32>
  return
}

// -----

func.func @rms_norm_weight(%x: tensor<?x16xbf16>, %g: tensor<8xbf16>) {
  // expected-error @+1 {{'k3.rms_norm' op weight must have shape [16], got [8]}}
  %0 = k3.rms_norm %x, %g {eps = 1.0e-5 : f64} : (tensor<?x16xbf16>, tensor<8xbf16>) -> tensor<?x16xbf16>
  return
}

// -----

func.func @rms_norm_eps(%x: tensor<?x16xbf16>, %g: tensor<16xbf16>) {
  // expected-error @+1 {{'k3.rms_norm' op eps must be positive, got 0}}
  %0 = k3.rms_norm %x, %g {eps = 0.0 : f64} : (tensor<?x16xbf16>, tensor<16xbf16>) -> tensor<?x16xbf16>
  return
}

// -----

func.func @gated_norm_gate(%o: tensor<?x2x8xbf16>, %z: tensor<?x2x4xbf16>, %g: tensor<8xf32>) {
  // expected-error @+1 {{'k3.gated_rms_norm' op gate must have shape [?, 2, 8], got [?, 2, 4]}}
  %0 = k3.gated_rms_norm %o, %z, %g {eps = 1.0e-5 : f64} : (tensor<?x2x8xbf16>, tensor<?x2x4xbf16>, tensor<8xf32>) -> tensor<?x2x8xbf16>
  return
}

// -----

func.func @gated_norm_weight(%o: tensor<?x2x8xbf16>, %z: tensor<?x2x8xbf16>, %g: tensor<16xf32>) {
  // The norm weight is per head dim, shared by all heads (K3_SPEC §4.7).
  // expected-error @+1 {{'k3.gated_rms_norm' op weight must have shape [8], got [16]}}
  %0 = k3.gated_rms_norm %o, %z, %g {eps = 1.0e-5 : f64} : (tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<16xf32>) -> tensor<?x2x8xbf16>
  return
}

// -----

func.func @gated_norm_eps(%o: tensor<?x2x8xbf16>, %z: tensor<?x2x8xbf16>, %g: tensor<8xf32>) {
  // expected-error @+1 {{'k3.gated_rms_norm' op eps must be positive, got -1}}
  %0 = k3.gated_rms_norm %o, %z, %g {eps = -1.0 : f64} : (tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<8xf32>) -> tensor<?x2x8xbf16>
  return
}

// -----

func.func @attn_res_empty(%g: tensor<16xbf16>, %w: tensor<1x16xbf16>) {
  // expected-error @+1 {{'k3.attn_res' op needs at least one candidate}}
  %0 = "k3.attn_res"(%g, %w) {eps = 1.0e-5 : f64} : (tensor<16xbf16>, tensor<1x16xbf16>) -> tensor<?x16xbf16>
  return
}

// -----

func.func @attn_res_candidates(%a: tensor<?x16xbf16>, %b: tensor<?x8xbf16>, %g: tensor<16xbf16>, %w: tensor<1x16xbf16>) {
  // expected-error @+1 {{'k3.attn_res' op candidate 1 has type 'tensor<?x8xbf16>' but candidate 0 has 'tensor<?x16xbf16>'}}
  %0 = k3.attn_res %a, %b norm %g proj %w {eps = 1.0e-5 : f64} : (tensor<?x16xbf16>, tensor<?x8xbf16>, tensor<16xbf16>, tensor<1x16xbf16>) -> tensor<?x16xbf16>
  return
}

// -----

func.func @attn_res_result(%a: tensor<?x16xbf16>, %g: tensor<16xbf16>, %w: tensor<1x16xbf16>) {
  // expected-error @+1 {{'k3.attn_res' op result type must equal the candidates' type}}
  %0 = k3.attn_res %a norm %g proj %w {eps = 1.0e-5 : f64} : (tensor<?x16xbf16>, tensor<16xbf16>, tensor<1x16xbf16>) -> tensor<?x16xf32>
  return
}

// -----

func.func @attn_res_norm(%a: tensor<?x16xbf16>, %g: tensor<8xbf16>, %w: tensor<1x16xbf16>) {
  // expected-error @+1 {{'k3.attn_res' op norm weight must have shape [16], got [8]}}
  %0 = k3.attn_res %a norm %g proj %w {eps = 1.0e-5 : f64} : (tensor<?x16xbf16>, tensor<8xbf16>, tensor<1x16xbf16>) -> tensor<?x16xbf16>
  return
}

// -----

func.func @attn_res_proj(%a: tensor<?x16xbf16>, %g: tensor<16xbf16>, %w: tensor<16x1xbf16>) {
  // expected-error @+1 {{'k3.attn_res' op pseudo-query projection must have shape [1, 16], got [16, 1]}}
  %0 = k3.attn_res %a norm %g proj %w {eps = 1.0e-5 : f64} : (tensor<?x16xbf16>, tensor<16xbf16>, tensor<16x1xbf16>) -> tensor<?x16xbf16>
  return
}

// -----

func.func @attn_res_eps(%a: tensor<?x16xbf16>, %g: tensor<16xbf16>, %w: tensor<1x16xbf16>) {
  // expected-error @+1 {{'k3.attn_res' op eps must be positive, got 0}}
  %0 = k3.attn_res %a norm %g proj %w {eps = 0.0 : f64} : (tensor<?x16xbf16>, tensor<16xbf16>, tensor<1x16xbf16>) -> tensor<?x16xbf16>
  return
}

//===----------------------------------------------------------------------===//
// Short convolution and KDA
//===----------------------------------------------------------------------===//

// -----

func.func @short_conv_channels(%u: tensor<?x8xbf16>, %w: tensor<16x1x4xf32>, %t: !k3.conv_state<channels = 16, width = 3, element_type = bf16>) {
  // expected-error @+1 {{'k3.short_conv' op input must have shape [?, 16], got [?, 8]}}
  %0:2 = k3.short_conv %u, %w, %t : (tensor<?x8xbf16>, tensor<16x1x4xf32>, !k3.conv_state<channels = 16, width = 3, element_type = bf16>) -> (tensor<?x8xbf16>, !k3.conv_state<channels = 16, width = 3, element_type = bf16>)
  return
}

// -----

func.func @short_conv_kernel(%u: tensor<?x16xbf16>, %w: tensor<16x1x3xf32>, %t: !k3.conv_state<channels = 16, width = 3, element_type = bf16>) {
  // A kernel of width 4 keeps a tail of 3 inputs.
  // expected-error @+1 {{'k3.short_conv' op weight must have shape [16, 1, 4], got [16, 1, 3]}}
  %0:2 = k3.short_conv %u, %w, %t : (tensor<?x16xbf16>, tensor<16x1x3xf32>, !k3.conv_state<channels = 16, width = 3, element_type = bf16>) -> (tensor<?x16xbf16>, !k3.conv_state<channels = 16, width = 3, element_type = bf16>)
  return
}

// -----

func.func @short_conv_tail(%u: tensor<?x16xbf16>, %w: tensor<16x1x4xf32>, %t: !k3.conv_state<channels = 16, width = 3, element_type = bf16>) {
  // expected-error @+1 {{'k3.short_conv' op new tail type must equal the tail type}}
  %0:2 = k3.short_conv %u, %w, %t : (tensor<?x16xbf16>, tensor<16x1x4xf32>, !k3.conv_state<channels = 16, width = 3, element_type = bf16>) -> (tensor<?x16xbf16>, !k3.conv_state<channels = 16, width = 3, element_type = f32>)
  return
}

// -----

func.func @short_conv_result(%u: tensor<?x16xbf16>, %w: tensor<16x1x4xf32>, %t: !k3.conv_state<channels = 16, width = 3, element_type = bf16>) {
  // expected-error @+1 {{'k3.short_conv' op result must have shape [?, 16], got [?, 8]}}
  %0:2 = k3.short_conv %u, %w, %t : (tensor<?x16xbf16>, tensor<16x1x4xf32>, !k3.conv_state<channels = 16, width = 3, element_type = bf16>) -> (tensor<?x8xbf16>, !k3.conv_state<channels = 16, width = 3, element_type = bf16>)
  return
}

// -----

// A conv tail where the KDA recurrent state belongs: the wrong state type for
// the op.
func.func @kda_wrong_state(%q: tensor<?x2x8xbf16>, %b: tensor<?x2xbf16>, %a: tensor<128xf32>, %dt: tensor<16xf32>, %s: !k3.conv_state<channels = 16, width = 3, element_type = bf16>) {
  // expected-error @+1 {{'k3.kda' op operand #7 must be KDA recurrent state of one sequence and layer (K3_SPEC §4.5)}}
  %0:2 = "k3.kda"(%q, %q, %q, %q, %b, %a, %dt, %s) {gate_form = #k3.kda_gate_form<lower_bound_sigmoid>, lower_bound = -5.0 : f64, scale = 0.35 : f64, l2_eps = 1.0e-6 : f64, chunk_size = 64 : i64} : (tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2xbf16>, tensor<128xf32>, tensor<16xf32>, !k3.conv_state<channels = 16, width = 3, element_type = bf16>) -> (tensor<?x2x8xbf16>, !k3.conv_state<channels = 16, width = 3, element_type = bf16>)
  return
}

// -----

func.func @kda_heads(%q: tensor<?x4x8xbf16>, %b: tensor<?x2xbf16>, %a: tensor<128xf32>, %dt: tensor<16xf32>, %s: !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>) {
  // expected-error @+1 {{'k3.kda' op query has 4 heads but the state has 2}}
  %0:2 = k3.kda %q, %q, %q, %q, %b, %a, %dt, %s {gate_form = #k3.kda_gate_form<lower_bound_sigmoid>, lower_bound = -5.0 : f64, scale = 0.35 : f64, l2_eps = 1.0e-6 : f64, chunk_size = 64 : i64} : (tensor<?x4x8xbf16>, tensor<?x4x8xbf16>, tensor<?x4x8xbf16>, tensor<?x4x8xbf16>, tensor<?x2xbf16>, tensor<128xf32>, tensor<16xf32>, !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>) -> (tensor<?x4x8xbf16>, !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>)
  return
}

// -----

func.func @kda_head_dim(%q: tensor<?x2x4xbf16>, %b: tensor<?x2xbf16>, %a: tensor<128xf32>, %dt: tensor<16xf32>, %s: !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>) {
  // expected-error @+1 {{'k3.kda' op query head dim 4 does not match the state's key_dim 8}}
  %0:2 = k3.kda %q, %q, %q, %q, %b, %a, %dt, %s {gate_form = #k3.kda_gate_form<lower_bound_sigmoid>, lower_bound = -5.0 : f64, scale = 0.35 : f64, l2_eps = 1.0e-6 : f64, chunk_size = 64 : i64} : (tensor<?x2x4xbf16>, tensor<?x2x4xbf16>, tensor<?x2x4xbf16>, tensor<?x2x4xbf16>, tensor<?x2xbf16>, tensor<128xf32>, tensor<16xf32>, !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>) -> (tensor<?x2x4xbf16>, !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>)
  return
}

// -----

func.func @kda_value(%q: tensor<?x2x8xbf16>, %v: tensor<?x2x4xbf16>, %b: tensor<?x2xbf16>, %a: tensor<128xf32>, %dt: tensor<16xf32>, %s: !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>) {
  // expected-error @+1 {{'k3.kda' op value must have shape [?, 2, 8], got [?, 2, 4]}}
  %0:2 = k3.kda %q, %q, %v, %q, %b, %a, %dt, %s {gate_form = #k3.kda_gate_form<lower_bound_sigmoid>, lower_bound = -5.0 : f64, scale = 0.35 : f64, l2_eps = 1.0e-6 : f64, chunk_size = 64 : i64} : (tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2x4xbf16>, tensor<?x2x8xbf16>, tensor<?x2xbf16>, tensor<128xf32>, tensor<16xf32>, !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>) -> (tensor<?x2x8xbf16>, !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>)
  return
}

// -----

func.func @kda_key_tokens(%q: tensor<3x2x8xbf16>, %k: tensor<4x2x8xbf16>, %b: tensor<3x2xbf16>, %a: tensor<128xf32>, %dt: tensor<16xf32>, %s: !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>) {
  // expected-error @+1 {{'k3.kda' op key must have shape [3, 2, 8], got [4, 2, 8]}}
  %0:2 = k3.kda %q, %k, %q, %q, %b, %a, %dt, %s {gate_form = #k3.kda_gate_form<lower_bound_sigmoid>, lower_bound = -5.0 : f64, scale = 0.35 : f64, l2_eps = 1.0e-6 : f64, chunk_size = 64 : i64} : (tensor<3x2x8xbf16>, tensor<4x2x8xbf16>, tensor<3x2x8xbf16>, tensor<3x2x8xbf16>, tensor<3x2xbf16>, tensor<128xf32>, tensor<16xf32>, !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>) -> (tensor<3x2x8xbf16>, !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>)
  return
}

// -----

func.func @kda_gate(%q: tensor<?x2x8xbf16>, %f: tensor<?x2x4xbf16>, %b: tensor<?x2xbf16>, %a: tensor<128xf32>, %dt: tensor<16xf32>, %s: !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>) {
  // expected-error @+1 {{'k3.kda' op gate must have shape [?, 2, 8], got [?, 2, 4]}}
  %0:2 = k3.kda %q, %q, %q, %f, %b, %a, %dt, %s {gate_form = #k3.kda_gate_form<lower_bound_sigmoid>, lower_bound = -5.0 : f64, scale = 0.35 : f64, l2_eps = 1.0e-6 : f64, chunk_size = 64 : i64} : (tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2x4xbf16>, tensor<?x2xbf16>, tensor<128xf32>, tensor<16xf32>, !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>) -> (tensor<?x2x8xbf16>, !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>)
  return
}

// -----

func.func @kda_beta(%q: tensor<?x2x8xbf16>, %b: tensor<?x3xbf16>, %a: tensor<128xf32>, %dt: tensor<16xf32>, %s: !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>) {
  // expected-error @+1 {{'k3.kda' op beta must have shape [?, 2], got [?, 3]}}
  %0:2 = k3.kda %q, %q, %q, %q, %b, %a, %dt, %s {gate_form = #k3.kda_gate_form<lower_bound_sigmoid>, lower_bound = -5.0 : f64, scale = 0.35 : f64, l2_eps = 1.0e-6 : f64, chunk_size = 64 : i64} : (tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x3xbf16>, tensor<128xf32>, tensor<16xf32>, !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>) -> (tensor<?x2x8xbf16>, !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>)
  return
}

// -----

func.func @kda_dt_bias(%q: tensor<?x2x8xbf16>, %b: tensor<?x2xbf16>, %a: tensor<128xf32>, %dt: tensor<8xf32>, %s: !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>) {
  // expected-error @+1 {{'k3.kda' op dt_bias must have shape [16], got [8]}}
  %0:2 = k3.kda %q, %q, %q, %q, %b, %a, %dt, %s {gate_form = #k3.kda_gate_form<lower_bound_sigmoid>, lower_bound = -5.0 : f64, scale = 0.35 : f64, l2_eps = 1.0e-6 : f64, chunk_size = 64 : i64} : (tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2xbf16>, tensor<128xf32>, tensor<8xf32>, !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>) -> (tensor<?x2x8xbf16>, !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>)
  return
}

// -----

func.func @kda_result(%q: tensor<?x2x8xbf16>, %b: tensor<?x2xbf16>, %a: tensor<128xf32>, %dt: tensor<16xf32>, %s: !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>) {
  // expected-error @+1 {{'k3.kda' op result must have shape [?, 2, 8], got [?, 2, 4]}}
  %0:2 = "k3.kda"(%q, %q, %q, %q, %b, %a, %dt, %s) {gate_form = #k3.kda_gate_form<lower_bound_sigmoid>, lower_bound = -5.0 : f64, scale = 0.35 : f64, l2_eps = 1.0e-6 : f64, chunk_size = 64 : i64} : (tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2xbf16>, tensor<128xf32>, tensor<16xf32>, !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>) -> (tensor<?x2x4xbf16>, !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>)
  return
}

// -----

func.func @kda_a_log(%q: tensor<?x2x8xbf16>, %b: tensor<?x2xbf16>, %a: tensor<1xf32>, %dt: tensor<16xf32>, %s: !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>) {
  // expected-error @+1 {{'k3.kda' op a_log has 1 entries, fewer than the 2 heads}}
  %0:2 = k3.kda %q, %q, %q, %q, %b, %a, %dt, %s {gate_form = #k3.kda_gate_form<lower_bound_sigmoid>, lower_bound = -5.0 : f64, scale = 0.35 : f64, l2_eps = 1.0e-6 : f64, chunk_size = 64 : i64} : (tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2xbf16>, tensor<1xf32>, tensor<16xf32>, !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>) -> (tensor<?x2x8xbf16>, !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>)
  return
}

// -----

// The state comes back in the layout it went in: a key-first state returned
// as value-first would be silently transposed (d_k = d_v).
func.func @kda_layout(%q: tensor<?x2x8xbf16>, %b: tensor<?x2xbf16>, %a: tensor<128xf32>, %dt: tensor<16xf32>, %s: !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = key_first>) {
  // expected-error @+1 {{'k3.kda' op new state type must equal the state type}}
  %0:2 = k3.kda %q, %q, %q, %q, %b, %a, %dt, %s {gate_form = #k3.kda_gate_form<lower_bound_sigmoid>, lower_bound = -5.0 : f64, scale = 0.35 : f64, l2_eps = 1.0e-6 : f64, chunk_size = 64 : i64} : (tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2xbf16>, tensor<128xf32>, tensor<16xf32>, !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = key_first>) -> (tensor<?x2x8xbf16>, !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>)
  return
}

// -----

func.func @kda_no_lower_bound(%q: tensor<?x2x8xbf16>, %b: tensor<?x2xbf16>, %a: tensor<128xf32>, %dt: tensor<16xf32>, %s: !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>) {
  // expected-error @+1 {{'k3.kda' op gate form lower_bound_sigmoid needs a lower_bound}}
  %0:2 = k3.kda %q, %q, %q, %q, %b, %a, %dt, %s {gate_form = #k3.kda_gate_form<lower_bound_sigmoid>, scale = 0.35 : f64, l2_eps = 1.0e-6 : f64, chunk_size = 64 : i64} : (tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2xbf16>, tensor<128xf32>, tensor<16xf32>, !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>) -> (tensor<?x2x8xbf16>, !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>)
  return
}

// -----

func.func @kda_positive_lower_bound(%q: tensor<?x2x8xbf16>, %b: tensor<?x2xbf16>, %a: tensor<128xf32>, %dt: tensor<16xf32>, %s: !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>) {
  // expected-error @+1 {{'k3.kda' op lower_bound must be negative, got 5}}
  %0:2 = k3.kda %q, %q, %q, %q, %b, %a, %dt, %s {gate_form = #k3.kda_gate_form<lower_bound_sigmoid>, lower_bound = 5.0 : f64, scale = 0.35 : f64, l2_eps = 1.0e-6 : f64, chunk_size = 64 : i64} : (tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2xbf16>, tensor<128xf32>, tensor<16xf32>, !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>) -> (tensor<?x2x8xbf16>, !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>)
  return
}

// -----

func.func @kda_softplus_lower_bound(%q: tensor<?x2x8xbf16>, %b: tensor<?x2xbf16>, %a: tensor<128xf32>, %dt: tensor<16xf32>, %s: !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>) {
  // expected-error @+1 {{'k3.kda' op gate form softplus takes no lower_bound}}
  %0:2 = k3.kda %q, %q, %q, %q, %b, %a, %dt, %s {gate_form = #k3.kda_gate_form<softplus>, lower_bound = -5.0 : f64, scale = 0.35 : f64, l2_eps = 1.0e-6 : f64, chunk_size = 64 : i64} : (tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2xbf16>, tensor<128xf32>, tensor<16xf32>, !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>) -> (tensor<?x2x8xbf16>, !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>)
  return
}

// -----

func.func @kda_scale(%q: tensor<?x2x8xbf16>, %b: tensor<?x2xbf16>, %a: tensor<128xf32>, %dt: tensor<16xf32>, %s: !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>) {
  // expected-error @+1 {{'k3.kda' op scale must be positive, got 0}}
  %0:2 = k3.kda %q, %q, %q, %q, %b, %a, %dt, %s {gate_form = #k3.kda_gate_form<lower_bound_sigmoid>, lower_bound = -5.0 : f64, scale = 0.0 : f64, l2_eps = 1.0e-6 : f64, chunk_size = 64 : i64} : (tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2xbf16>, tensor<128xf32>, tensor<16xf32>, !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>) -> (tensor<?x2x8xbf16>, !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>)
  return
}

// -----

func.func @kda_l2_eps(%q: tensor<?x2x8xbf16>, %b: tensor<?x2xbf16>, %a: tensor<128xf32>, %dt: tensor<16xf32>, %s: !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>) {
  // expected-error @+1 {{'k3.kda' op l2_eps must be positive, got 0}}
  %0:2 = k3.kda %q, %q, %q, %q, %b, %a, %dt, %s {gate_form = #k3.kda_gate_form<lower_bound_sigmoid>, lower_bound = -5.0 : f64, scale = 0.35 : f64, l2_eps = 0.0 : f64, chunk_size = 64 : i64} : (tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2xbf16>, tensor<128xf32>, tensor<16xf32>, !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>) -> (tensor<?x2x8xbf16>, !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>)
  return
}

// -----

func.func @kda_chunk(%q: tensor<?x2x8xbf16>, %b: tensor<?x2xbf16>, %a: tensor<128xf32>, %dt: tensor<16xf32>, %s: !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>) {
  // expected-error @+1 {{'k3.kda' op chunk_size must be a positive power of two, got 48}}
  %0:2 = k3.kda %q, %q, %q, %q, %b, %a, %dt, %s {gate_form = #k3.kda_gate_form<lower_bound_sigmoid>, lower_bound = -5.0 : f64, scale = 0.35 : f64, l2_eps = 1.0e-6 : f64, chunk_size = 48 : i64} : (tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2xbf16>, tensor<128xf32>, tensor<16xf32>, !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>) -> (tensor<?x2x8xbf16>, !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>)
  return
}

//===----------------------------------------------------------------------===//
// Gated MLA
//===----------------------------------------------------------------------===//

// -----

func.func @mla_dims(%x: tensor<?x16xbf16>, %qa: tensor<8x16xbf16>, %qan: tensor<8xbf16>, %qb: tensor<48x8xbf16>, %kva: tensor<20x16xbf16>, %kvan: tensor<16xbf16>, %kvb: tensor<72x16xbf16>, %g: tensor<32x16xbf16>, %c: !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>) {
  // expected-error @+1 {{'k3.gated_mla' op needs heads, nope_dim, v_dim > 0 and rope_dim >= 0, got 0, 20, 16, 4}}
  %0:2 = k3.gated_mla %x, %qa, %qan, %qb, %kva, %kvan, %kvb, %c gate %g {heads = 0 : i64, nope_dim = 20 : i64, rope_dim = 4 : i64, v_dim = 16 : i64, scale = 0.2 : f64, q_norm_eps = 1.0e-6 : f64, kv_norm_eps = 1.0e-6 : f64} : (tensor<?x16xbf16>, tensor<8x16xbf16>, tensor<8xbf16>, tensor<48x8xbf16>, tensor<20x16xbf16>, tensor<16xbf16>, tensor<72x16xbf16>, !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>, tensor<32x16xbf16>) -> (tensor<?x32xbf16>, !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>)
  return
}

// -----

func.func @mla_cache_rope(%x: tensor<?x16xbf16>, %qa: tensor<8x16xbf16>, %qan: tensor<8xbf16>, %qb: tensor<48x8xbf16>, %kva: tensor<20x16xbf16>, %kvan: tensor<16xbf16>, %kvb: tensor<72x16xbf16>, %g: tensor<32x16xbf16>, %c: !k3.mla_cache<latent_dim = 16, rope_dim = 8, element_type = bf16, page_size = 16>) {
  // expected-error @+1 {{'k3.gated_mla' op cache rope_dim 8 does not match rope_dim 4}}
  %0:2 = k3.gated_mla %x, %qa, %qan, %qb, %kva, %kvan, %kvb, %c gate %g {heads = 2 : i64, nope_dim = 20 : i64, rope_dim = 4 : i64, v_dim = 16 : i64, scale = 0.2 : f64, q_norm_eps = 1.0e-6 : f64, kv_norm_eps = 1.0e-6 : f64} : (tensor<?x16xbf16>, tensor<8x16xbf16>, tensor<8xbf16>, tensor<48x8xbf16>, tensor<20x16xbf16>, tensor<16xbf16>, tensor<72x16xbf16>, !k3.mla_cache<latent_dim = 16, rope_dim = 8, element_type = bf16, page_size = 16>, tensor<32x16xbf16>) -> (tensor<?x32xbf16>, !k3.mla_cache<latent_dim = 16, rope_dim = 8, element_type = bf16, page_size = 16>)
  return
}

// -----

func.func @mla_q_a(%x: tensor<?x16xbf16>, %qa: tensor<8x12xbf16>, %qan: tensor<8xbf16>, %qb: tensor<48x8xbf16>, %kva: tensor<20x16xbf16>, %kvan: tensor<16xbf16>, %kvb: tensor<72x16xbf16>, %g: tensor<32x16xbf16>, %c: !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>) {
  // expected-error @+1 {{'k3.gated_mla' op q_a weight must have shape [8, 16], got [8, 12]}}
  %0:2 = k3.gated_mla %x, %qa, %qan, %qb, %kva, %kvan, %kvb, %c gate %g {heads = 2 : i64, nope_dim = 20 : i64, rope_dim = 4 : i64, v_dim = 16 : i64, scale = 0.2 : f64, q_norm_eps = 1.0e-6 : f64, kv_norm_eps = 1.0e-6 : f64} : (tensor<?x16xbf16>, tensor<8x12xbf16>, tensor<8xbf16>, tensor<48x8xbf16>, tensor<20x16xbf16>, tensor<16xbf16>, tensor<72x16xbf16>, !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>, tensor<32x16xbf16>) -> (tensor<?x32xbf16>, !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>)
  return
}

// -----

func.func @mla_q_b(%x: tensor<?x16xbf16>, %qa: tensor<8x16xbf16>, %qan: tensor<8xbf16>, %qb: tensor<40x8xbf16>, %kva: tensor<20x16xbf16>, %kvan: tensor<16xbf16>, %kvb: tensor<72x16xbf16>, %g: tensor<32x16xbf16>, %c: !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>) {
  // expected-error @+1 {{'k3.gated_mla' op q_b weight must have shape [48, 8], got [40, 8]}}
  %0:2 = k3.gated_mla %x, %qa, %qan, %qb, %kva, %kvan, %kvb, %c gate %g {heads = 2 : i64, nope_dim = 20 : i64, rope_dim = 4 : i64, v_dim = 16 : i64, scale = 0.2 : f64, q_norm_eps = 1.0e-6 : f64, kv_norm_eps = 1.0e-6 : f64} : (tensor<?x16xbf16>, tensor<8x16xbf16>, tensor<8xbf16>, tensor<40x8xbf16>, tensor<20x16xbf16>, tensor<16xbf16>, tensor<72x16xbf16>, !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>, tensor<32x16xbf16>) -> (tensor<?x32xbf16>, !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>)
  return
}

// -----

func.func @mla_kv_a(%x: tensor<?x16xbf16>, %qa: tensor<8x16xbf16>, %qan: tensor<8xbf16>, %qb: tensor<48x8xbf16>, %kva: tensor<16x16xbf16>, %kvan: tensor<16xbf16>, %kvb: tensor<72x16xbf16>, %g: tensor<32x16xbf16>, %c: !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>) {
  // expected-error @+1 {{'k3.gated_mla' op kv_a weight must have shape [20, 16], got [16, 16]}}
  %0:2 = k3.gated_mla %x, %qa, %qan, %qb, %kva, %kvan, %kvb, %c gate %g {heads = 2 : i64, nope_dim = 20 : i64, rope_dim = 4 : i64, v_dim = 16 : i64, scale = 0.2 : f64, q_norm_eps = 1.0e-6 : f64, kv_norm_eps = 1.0e-6 : f64} : (tensor<?x16xbf16>, tensor<8x16xbf16>, tensor<8xbf16>, tensor<48x8xbf16>, tensor<16x16xbf16>, tensor<16xbf16>, tensor<72x16xbf16>, !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>, tensor<32x16xbf16>) -> (tensor<?x32xbf16>, !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>)
  return
}

// -----

func.func @mla_kv_a_norm(%x: tensor<?x16xbf16>, %qa: tensor<8x16xbf16>, %qan: tensor<8xbf16>, %qb: tensor<48x8xbf16>, %kva: tensor<20x16xbf16>, %kvan: tensor<20xbf16>, %kvb: tensor<72x16xbf16>, %g: tensor<32x16xbf16>, %c: !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>) {
  // expected-error @+1 {{'k3.gated_mla' op kv_a norm must have shape [16], got [20]}}
  %0:2 = k3.gated_mla %x, %qa, %qan, %qb, %kva, %kvan, %kvb, %c gate %g {heads = 2 : i64, nope_dim = 20 : i64, rope_dim = 4 : i64, v_dim = 16 : i64, scale = 0.2 : f64, q_norm_eps = 1.0e-6 : f64, kv_norm_eps = 1.0e-6 : f64} : (tensor<?x16xbf16>, tensor<8x16xbf16>, tensor<8xbf16>, tensor<48x8xbf16>, tensor<20x16xbf16>, tensor<20xbf16>, tensor<72x16xbf16>, !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>, tensor<32x16xbf16>) -> (tensor<?x32xbf16>, !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>)
  return
}

// -----

func.func @mla_kv_b(%x: tensor<?x16xbf16>, %qa: tensor<8x16xbf16>, %qan: tensor<8xbf16>, %qb: tensor<48x8xbf16>, %kva: tensor<20x16xbf16>, %kvan: tensor<16xbf16>, %kvb: tensor<64x16xbf16>, %g: tensor<32x16xbf16>, %c: !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>) {
  // expected-error @+1 {{'k3.gated_mla' op kv_b weight must have shape [72, 16], got [64, 16]}}
  %0:2 = k3.gated_mla %x, %qa, %qan, %qb, %kva, %kvan, %kvb, %c gate %g {heads = 2 : i64, nope_dim = 20 : i64, rope_dim = 4 : i64, v_dim = 16 : i64, scale = 0.2 : f64, q_norm_eps = 1.0e-6 : f64, kv_norm_eps = 1.0e-6 : f64} : (tensor<?x16xbf16>, tensor<8x16xbf16>, tensor<8xbf16>, tensor<48x8xbf16>, tensor<20x16xbf16>, tensor<16xbf16>, tensor<64x16xbf16>, !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>, tensor<32x16xbf16>) -> (tensor<?x32xbf16>, !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>)
  return
}

// -----

func.func @mla_result(%x: tensor<?x16xbf16>, %qa: tensor<8x16xbf16>, %qan: tensor<8xbf16>, %qb: tensor<48x8xbf16>, %kva: tensor<20x16xbf16>, %kvan: tensor<16xbf16>, %kvb: tensor<72x16xbf16>, %g: tensor<32x16xbf16>, %c: !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>) {
  // expected-error @+1 {{'k3.gated_mla' op result must have shape [?, 32], got [?, 16]}}
  %0:2 = k3.gated_mla %x, %qa, %qan, %qb, %kva, %kvan, %kvb, %c gate %g {heads = 2 : i64, nope_dim = 20 : i64, rope_dim = 4 : i64, v_dim = 16 : i64, scale = 0.2 : f64, q_norm_eps = 1.0e-6 : f64, kv_norm_eps = 1.0e-6 : f64} : (tensor<?x16xbf16>, tensor<8x16xbf16>, tensor<8xbf16>, tensor<48x8xbf16>, tensor<20x16xbf16>, tensor<16xbf16>, tensor<72x16xbf16>, !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>, tensor<32x16xbf16>) -> (tensor<?x16xbf16>, !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>)
  return
}

// -----

func.func @mla_gate(%x: tensor<?x16xbf16>, %qa: tensor<8x16xbf16>, %qan: tensor<8xbf16>, %qb: tensor<48x8xbf16>, %kva: tensor<20x16xbf16>, %kvan: tensor<16xbf16>, %kvb: tensor<72x16xbf16>, %g: tensor<16x16xbf16>, %c: !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>) {
  // expected-error @+1 {{'k3.gated_mla' op output gate weight must have shape [32, 16], got [16, 16]}}
  %0:2 = k3.gated_mla %x, %qa, %qan, %qb, %kva, %kvan, %kvb, %c gate %g {heads = 2 : i64, nope_dim = 20 : i64, rope_dim = 4 : i64, v_dim = 16 : i64, scale = 0.2 : f64, q_norm_eps = 1.0e-6 : f64, kv_norm_eps = 1.0e-6 : f64} : (tensor<?x16xbf16>, tensor<8x16xbf16>, tensor<8xbf16>, tensor<48x8xbf16>, tensor<20x16xbf16>, tensor<16xbf16>, tensor<72x16xbf16>, !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>, tensor<16x16xbf16>) -> (tensor<?x32xbf16>, !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>)
  return
}

// -----

func.func @mla_new_cache(%x: tensor<?x16xbf16>, %qa: tensor<8x16xbf16>, %qan: tensor<8xbf16>, %qb: tensor<48x8xbf16>, %kva: tensor<20x16xbf16>, %kvan: tensor<16xbf16>, %kvb: tensor<72x16xbf16>, %g: tensor<32x16xbf16>, %c: !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>) {
  // expected-error @+1 {{'k3.gated_mla' op new cache type must equal the cache type}}
  %0:2 = k3.gated_mla %x, %qa, %qan, %qb, %kva, %kvan, %kvb, %c gate %g {heads = 2 : i64, nope_dim = 20 : i64, rope_dim = 4 : i64, v_dim = 16 : i64, scale = 0.2 : f64, q_norm_eps = 1.0e-6 : f64, kv_norm_eps = 1.0e-6 : f64} : (tensor<?x16xbf16>, tensor<8x16xbf16>, tensor<8xbf16>, tensor<48x8xbf16>, tensor<20x16xbf16>, tensor<16xbf16>, tensor<72x16xbf16>, !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>, tensor<32x16xbf16>) -> (tensor<?x32xbf16>, !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = f32, page_size = 16>)
  return
}

// -----

func.func @mla_scale(%x: tensor<?x16xbf16>, %qa: tensor<8x16xbf16>, %qan: tensor<8xbf16>, %qb: tensor<48x8xbf16>, %kva: tensor<20x16xbf16>, %kvan: tensor<16xbf16>, %kvb: tensor<72x16xbf16>, %g: tensor<32x16xbf16>, %c: !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>) {
  // expected-error @+1 {{'k3.gated_mla' op scale must be positive, got 0}}
  %0:2 = k3.gated_mla %x, %qa, %qan, %qb, %kva, %kvan, %kvb, %c gate %g {heads = 2 : i64, nope_dim = 20 : i64, rope_dim = 4 : i64, v_dim = 16 : i64, scale = 0.0 : f64, q_norm_eps = 1.0e-6 : f64, kv_norm_eps = 1.0e-6 : f64} : (tensor<?x16xbf16>, tensor<8x16xbf16>, tensor<8xbf16>, tensor<48x8xbf16>, tensor<20x16xbf16>, tensor<16xbf16>, tensor<72x16xbf16>, !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>, tensor<32x16xbf16>) -> (tensor<?x32xbf16>, !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>)
  return
}

// -----

func.func @mla_q_eps(%x: tensor<?x16xbf16>, %qa: tensor<8x16xbf16>, %qan: tensor<8xbf16>, %qb: tensor<48x8xbf16>, %kva: tensor<20x16xbf16>, %kvan: tensor<16xbf16>, %kvb: tensor<72x16xbf16>, %g: tensor<32x16xbf16>, %c: !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>) {
  // expected-error @+1 {{'k3.gated_mla' op q_norm_eps must be positive, got 0}}
  %0:2 = k3.gated_mla %x, %qa, %qan, %qb, %kva, %kvan, %kvb, %c gate %g {heads = 2 : i64, nope_dim = 20 : i64, rope_dim = 4 : i64, v_dim = 16 : i64, scale = 0.2 : f64, q_norm_eps = 0.0 : f64, kv_norm_eps = 1.0e-6 : f64} : (tensor<?x16xbf16>, tensor<8x16xbf16>, tensor<8xbf16>, tensor<48x8xbf16>, tensor<20x16xbf16>, tensor<16xbf16>, tensor<72x16xbf16>, !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>, tensor<32x16xbf16>) -> (tensor<?x32xbf16>, !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>)
  return
}

// -----

func.func @mla_kv_eps(%x: tensor<?x16xbf16>, %qa: tensor<8x16xbf16>, %qan: tensor<8xbf16>, %qb: tensor<48x8xbf16>, %kva: tensor<20x16xbf16>, %kvan: tensor<16xbf16>, %kvb: tensor<72x16xbf16>, %g: tensor<32x16xbf16>, %c: !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>) {
  // expected-error @+1 {{'k3.gated_mla' op kv_norm_eps must be positive, got 0}}
  %0:2 = k3.gated_mla %x, %qa, %qan, %qb, %kva, %kvan, %kvb, %c gate %g {heads = 2 : i64, nope_dim = 20 : i64, rope_dim = 4 : i64, v_dim = 16 : i64, scale = 0.2 : f64, q_norm_eps = 1.0e-6 : f64, kv_norm_eps = 0.0 : f64} : (tensor<?x16xbf16>, tensor<8x16xbf16>, tensor<8xbf16>, tensor<48x8xbf16>, tensor<20x16xbf16>, tensor<16xbf16>, tensor<72x16xbf16>, !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>, tensor<32x16xbf16>) -> (tensor<?x32xbf16>, !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>)
  return
}

//===----------------------------------------------------------------------===//
// MLPs and LatentMoE
//===----------------------------------------------------------------------===//

// -----

func.func @glu_gate(%x: tensor<?x16xbf16>, %g: tensor<32x8xbf16>, %u: tensor<32x16xbf16>, %d: tensor<16x32xbf16>) {
  // expected-error @+1 {{'k3.glu_mlp' op gate weight must have shape [32, 16], got [32, 8]}}
  %0 = k3.glu_mlp %x, %g, %u, %d {activation = #k3.glu_activation<situ>, beta = 4.0 : f64, linear_beta = 25.0 : f64} : (tensor<?x16xbf16>, tensor<32x8xbf16>, tensor<32x16xbf16>, tensor<16x32xbf16>) -> tensor<?x16xbf16>
  return
}

// -----

func.func @glu_up(%x: tensor<?x16xbf16>, %g: tensor<32x16xbf16>, %u: tensor<16x16xbf16>, %d: tensor<16x32xbf16>) {
  // expected-error @+1 {{'k3.glu_mlp' op up weight must have shape [32, 16], got [16, 16]}}
  %0 = k3.glu_mlp %x, %g, %u, %d {activation = #k3.glu_activation<situ>, beta = 4.0 : f64, linear_beta = 25.0 : f64} : (tensor<?x16xbf16>, tensor<32x16xbf16>, tensor<16x16xbf16>, tensor<16x32xbf16>) -> tensor<?x16xbf16>
  return
}

// -----

func.func @glu_down(%x: tensor<?x16xbf16>, %g: tensor<32x16xbf16>, %u: tensor<32x16xbf16>, %d: tensor<32x16xbf16>) {
  // expected-error @+1 {{'k3.glu_mlp' op down weight must have shape [16, 32], got [32, 16]}}
  %0 = k3.glu_mlp %x, %g, %u, %d {activation = #k3.glu_activation<situ>, beta = 4.0 : f64, linear_beta = 25.0 : f64} : (tensor<?x16xbf16>, tensor<32x16xbf16>, tensor<32x16xbf16>, tensor<32x16xbf16>) -> tensor<?x16xbf16>
  return
}

// -----

func.func @glu_result(%x: tensor<?x16xbf16>, %g: tensor<32x16xbf16>, %u: tensor<32x16xbf16>, %d: tensor<16x32xbf16>) {
  // expected-error @+1 {{'k3.glu_mlp' op result must have shape [?, 16], got [?, 32]}}
  %0 = k3.glu_mlp %x, %g, %u, %d {activation = #k3.glu_activation<situ>, beta = 4.0 : f64, linear_beta = 25.0 : f64} : (tensor<?x16xbf16>, tensor<32x16xbf16>, tensor<32x16xbf16>, tensor<16x32xbf16>) -> tensor<?x32xbf16>
  return
}

// -----

func.func @glu_beta(%x: tensor<?x16xbf16>, %g: tensor<32x16xbf16>, %u: tensor<32x16xbf16>, %d: tensor<16x32xbf16>) {
  // expected-error @+1 {{'k3.glu_mlp' op beta must be positive, got 0}}
  %0 = k3.glu_mlp %x, %g, %u, %d {activation = #k3.glu_activation<situ>, beta = 0.0 : f64, linear_beta = 25.0 : f64} : (tensor<?x16xbf16>, tensor<32x16xbf16>, tensor<32x16xbf16>, tensor<16x32xbf16>) -> tensor<?x16xbf16>
  return
}

// -----

func.func @moe_experts(%x: tensor<?x16xbf16>, %wr: tensor<4x16xbf16>, %br: tensor<4xf32>, %down: tensor<32x16xbf16>, %up: tensor<16x32xbf16>, %w1: !k3.mxfp4<4x32x32>, %w3: !k3.mxfp4<4x32x32>, %w2: !k3.mxfp4<4x32x32>, %ln: tensor<32xbf16>, %sg: tensor<32x16xbf16>, %su: tensor<32x16xbf16>, %sd: tensor<16x32xbf16>) {
  // expected-error @+1 {{'k3.latent_moe' op num_experts must be positive, got 0}}
  %0 = k3.latent_moe %x router %wr, %br latent %down, %up experts %w1, %w3, %w2 norm %ln shared %sg, %su, %sd {num_experts = 0 : i64, top_k = 2 : i64, routed_scaling_factor = 1.0 : f64, renormalize = true, norm_eps = 1.0e-5 : f64, activation = #k3.glu_activation<situ>, beta = 4.0 : f64, linear_beta = 25.0 : f64} : (tensor<?x16xbf16>, tensor<4x16xbf16>, tensor<4xf32>, tensor<32x16xbf16>, tensor<16x32xbf16>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, tensor<32xbf16>, tensor<32x16xbf16>, tensor<32x16xbf16>, tensor<16x32xbf16>) -> tensor<?x16xbf16>
  return
}

// -----

func.func @moe_top_k(%x: tensor<?x16xbf16>, %wr: tensor<4x16xbf16>, %br: tensor<4xf32>, %down: tensor<32x16xbf16>, %up: tensor<16x32xbf16>, %w1: !k3.mxfp4<4x32x32>, %w3: !k3.mxfp4<4x32x32>, %w2: !k3.mxfp4<4x32x32>, %ln: tensor<32xbf16>, %sg: tensor<32x16xbf16>, %su: tensor<32x16xbf16>, %sd: tensor<16x32xbf16>) {
  // expected-error @+1 {{'k3.latent_moe' op top_k 5 must be in [1, num_experts = 4]}}
  %0 = k3.latent_moe %x router %wr, %br latent %down, %up experts %w1, %w3, %w2 norm %ln shared %sg, %su, %sd {num_experts = 4 : i64, top_k = 5 : i64, routed_scaling_factor = 1.0 : f64, renormalize = true, norm_eps = 1.0e-5 : f64, activation = #k3.glu_activation<situ>, beta = 4.0 : f64, linear_beta = 25.0 : f64} : (tensor<?x16xbf16>, tensor<4x16xbf16>, tensor<4xf32>, tensor<32x16xbf16>, tensor<16x32xbf16>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, tensor<32xbf16>, tensor<32x16xbf16>, tensor<32x16xbf16>, tensor<16x32xbf16>) -> tensor<?x16xbf16>
  return
}

// -----

func.func @moe_top_k_zero(%x: tensor<?x16xbf16>, %wr: tensor<4x16xbf16>, %br: tensor<4xf32>, %down: tensor<32x16xbf16>, %up: tensor<16x32xbf16>, %w1: !k3.mxfp4<4x32x32>, %w3: !k3.mxfp4<4x32x32>, %w2: !k3.mxfp4<4x32x32>, %ln: tensor<32xbf16>, %sg: tensor<32x16xbf16>, %su: tensor<32x16xbf16>, %sd: tensor<16x32xbf16>) {
  // expected-error @+1 {{'k3.latent_moe' op top_k 0 must be in [1, num_experts = 4]}}
  %0 = k3.latent_moe %x router %wr, %br latent %down, %up experts %w1, %w3, %w2 norm %ln shared %sg, %su, %sd {num_experts = 4 : i64, top_k = 0 : i64, routed_scaling_factor = 1.0 : f64, renormalize = true, norm_eps = 1.0e-5 : f64, activation = #k3.glu_activation<situ>, beta = 4.0 : f64, linear_beta = 25.0 : f64} : (tensor<?x16xbf16>, tensor<4x16xbf16>, tensor<4xf32>, tensor<32x16xbf16>, tensor<16x32xbf16>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, tensor<32xbf16>, tensor<32x16xbf16>, tensor<32x16xbf16>, tensor<16x32xbf16>) -> tensor<?x16xbf16>
  return
}

// -----

func.func @moe_router(%x: tensor<?x16xbf16>, %wr: tensor<8x16xbf16>, %br: tensor<4xf32>, %down: tensor<32x16xbf16>, %up: tensor<16x32xbf16>, %w1: !k3.mxfp4<4x32x32>, %w3: !k3.mxfp4<4x32x32>, %w2: !k3.mxfp4<4x32x32>, %ln: tensor<32xbf16>, %sg: tensor<32x16xbf16>, %su: tensor<32x16xbf16>, %sd: tensor<16x32xbf16>) {
  // expected-error @+1 {{'k3.latent_moe' op router weight must have shape [4, 16], got [8, 16]}}
  %0 = k3.latent_moe %x router %wr, %br latent %down, %up experts %w1, %w3, %w2 norm %ln shared %sg, %su, %sd {num_experts = 4 : i64, top_k = 2 : i64, routed_scaling_factor = 1.0 : f64, renormalize = true, norm_eps = 1.0e-5 : f64, activation = #k3.glu_activation<situ>, beta = 4.0 : f64, linear_beta = 25.0 : f64} : (tensor<?x16xbf16>, tensor<8x16xbf16>, tensor<4xf32>, tensor<32x16xbf16>, tensor<16x32xbf16>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, tensor<32xbf16>, tensor<32x16xbf16>, tensor<32x16xbf16>, tensor<16x32xbf16>) -> tensor<?x16xbf16>
  return
}

// -----

func.func @moe_bias(%x: tensor<?x16xbf16>, %wr: tensor<4x16xbf16>, %br: tensor<8xf32>, %down: tensor<32x16xbf16>, %up: tensor<16x32xbf16>, %w1: !k3.mxfp4<4x32x32>, %w3: !k3.mxfp4<4x32x32>, %w2: !k3.mxfp4<4x32x32>, %ln: tensor<32xbf16>, %sg: tensor<32x16xbf16>, %su: tensor<32x16xbf16>, %sd: tensor<16x32xbf16>) {
  // expected-error @+1 {{'k3.latent_moe' op router bias must have shape [4], got [8]}}
  %0 = k3.latent_moe %x router %wr, %br latent %down, %up experts %w1, %w3, %w2 norm %ln shared %sg, %su, %sd {num_experts = 4 : i64, top_k = 2 : i64, routed_scaling_factor = 1.0 : f64, renormalize = true, norm_eps = 1.0e-5 : f64, activation = #k3.glu_activation<situ>, beta = 4.0 : f64, linear_beta = 25.0 : f64} : (tensor<?x16xbf16>, tensor<4x16xbf16>, tensor<8xf32>, tensor<32x16xbf16>, tensor<16x32xbf16>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, tensor<32xbf16>, tensor<32x16xbf16>, tensor<32x16xbf16>, tensor<16x32xbf16>) -> tensor<?x16xbf16>
  return
}

// -----

func.func @moe_down(%x: tensor<?x16xbf16>, %wr: tensor<4x16xbf16>, %br: tensor<4xf32>, %down: tensor<32x8xbf16>, %up: tensor<16x32xbf16>, %w1: !k3.mxfp4<4x32x32>, %w3: !k3.mxfp4<4x32x32>, %w2: !k3.mxfp4<4x32x32>, %ln: tensor<32xbf16>, %sg: tensor<32x16xbf16>, %su: tensor<32x16xbf16>, %sd: tensor<16x32xbf16>) {
  // expected-error @+1 {{'k3.latent_moe' op latent down weight must have shape [32, 16], got [32, 8]}}
  %0 = k3.latent_moe %x router %wr, %br latent %down, %up experts %w1, %w3, %w2 norm %ln shared %sg, %su, %sd {num_experts = 4 : i64, top_k = 2 : i64, routed_scaling_factor = 1.0 : f64, renormalize = true, norm_eps = 1.0e-5 : f64, activation = #k3.glu_activation<situ>, beta = 4.0 : f64, linear_beta = 25.0 : f64} : (tensor<?x16xbf16>, tensor<4x16xbf16>, tensor<4xf32>, tensor<32x8xbf16>, tensor<16x32xbf16>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, tensor<32xbf16>, tensor<32x16xbf16>, tensor<32x16xbf16>, tensor<16x32xbf16>) -> tensor<?x16xbf16>
  return
}

// -----

func.func @moe_up(%x: tensor<?x16xbf16>, %wr: tensor<4x16xbf16>, %br: tensor<4xf32>, %down: tensor<32x16xbf16>, %up: tensor<32x16xbf16>, %w1: !k3.mxfp4<4x32x32>, %w3: !k3.mxfp4<4x32x32>, %w2: !k3.mxfp4<4x32x32>, %ln: tensor<32xbf16>, %sg: tensor<32x16xbf16>, %su: tensor<32x16xbf16>, %sd: tensor<16x32xbf16>) {
  // expected-error @+1 {{'k3.latent_moe' op latent up weight must have shape [16, 32], got [32, 16]}}
  %0 = k3.latent_moe %x router %wr, %br latent %down, %up experts %w1, %w3, %w2 norm %ln shared %sg, %su, %sd {num_experts = 4 : i64, top_k = 2 : i64, routed_scaling_factor = 1.0 : f64, renormalize = true, norm_eps = 1.0e-5 : f64, activation = #k3.glu_activation<situ>, beta = 4.0 : f64, linear_beta = 25.0 : f64} : (tensor<?x16xbf16>, tensor<4x16xbf16>, tensor<4xf32>, tensor<32x16xbf16>, tensor<32x16xbf16>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, tensor<32xbf16>, tensor<32x16xbf16>, tensor<32x16xbf16>, tensor<16x32xbf16>) -> tensor<?x16xbf16>
  return
}

// -----

func.func @moe_w1(%x: tensor<?x16xbf16>, %wr: tensor<4x16xbf16>, %br: tensor<4xf32>, %down: tensor<32x16xbf16>, %up: tensor<16x32xbf16>, %w1: !k3.mxfp4<8x32x32>, %w3: !k3.mxfp4<4x32x32>, %w2: !k3.mxfp4<4x32x32>, %ln: tensor<32xbf16>, %sg: tensor<32x16xbf16>, %su: tensor<32x16xbf16>, %sd: tensor<16x32xbf16>) {
  // expected-error @+1 {{'k3.latent_moe' op expert gate weights must have shape [4, 32, 32], got [8, 32, 32]}}
  %0 = k3.latent_moe %x router %wr, %br latent %down, %up experts %w1, %w3, %w2 norm %ln shared %sg, %su, %sd {num_experts = 4 : i64, top_k = 2 : i64, routed_scaling_factor = 1.0 : f64, renormalize = true, norm_eps = 1.0e-5 : f64, activation = #k3.glu_activation<situ>, beta = 4.0 : f64, linear_beta = 25.0 : f64} : (tensor<?x16xbf16>, tensor<4x16xbf16>, tensor<4xf32>, tensor<32x16xbf16>, tensor<16x32xbf16>, !k3.mxfp4<8x32x32>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, tensor<32xbf16>, tensor<32x16xbf16>, tensor<32x16xbf16>, tensor<16x32xbf16>) -> tensor<?x16xbf16>
  return
}

// -----

func.func @moe_w3(%x: tensor<?x16xbf16>, %wr: tensor<4x16xbf16>, %br: tensor<4xf32>, %down: tensor<32x16xbf16>, %up: tensor<16x32xbf16>, %w1: !k3.mxfp4<4x32x32>, %w3: !k3.mxfp4<4x64x32>, %w2: !k3.mxfp4<4x32x32>, %ln: tensor<32xbf16>, %sg: tensor<32x16xbf16>, %su: tensor<32x16xbf16>, %sd: tensor<16x32xbf16>) {
  // expected-error @+1 {{'k3.latent_moe' op expert up weights must have shape [4, 32, 32], got [4, 64, 32]}}
  %0 = k3.latent_moe %x router %wr, %br latent %down, %up experts %w1, %w3, %w2 norm %ln shared %sg, %su, %sd {num_experts = 4 : i64, top_k = 2 : i64, routed_scaling_factor = 1.0 : f64, renormalize = true, norm_eps = 1.0e-5 : f64, activation = #k3.glu_activation<situ>, beta = 4.0 : f64, linear_beta = 25.0 : f64} : (tensor<?x16xbf16>, tensor<4x16xbf16>, tensor<4xf32>, tensor<32x16xbf16>, tensor<16x32xbf16>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x64x32>, !k3.mxfp4<4x32x32>, tensor<32xbf16>, tensor<32x16xbf16>, tensor<32x16xbf16>, tensor<16x32xbf16>) -> tensor<?x16xbf16>
  return
}

// -----

func.func @moe_w2(%x: tensor<?x16xbf16>, %wr: tensor<4x16xbf16>, %br: tensor<4xf32>, %down: tensor<32x16xbf16>, %up: tensor<16x32xbf16>, %w1: !k3.mxfp4<4x32x32>, %w3: !k3.mxfp4<4x32x32>, %w2: !k3.mxfp4<4x32x64>, %ln: tensor<32xbf16>, %sg: tensor<32x16xbf16>, %su: tensor<32x16xbf16>, %sd: tensor<16x32xbf16>) {
  // expected-error @+1 {{'k3.latent_moe' op expert down weights must have shape [4, 32, 32], got [4, 32, 64]}}
  %0 = k3.latent_moe %x router %wr, %br latent %down, %up experts %w1, %w3, %w2 norm %ln shared %sg, %su, %sd {num_experts = 4 : i64, top_k = 2 : i64, routed_scaling_factor = 1.0 : f64, renormalize = true, norm_eps = 1.0e-5 : f64, activation = #k3.glu_activation<situ>, beta = 4.0 : f64, linear_beta = 25.0 : f64} : (tensor<?x16xbf16>, tensor<4x16xbf16>, tensor<4xf32>, tensor<32x16xbf16>, tensor<16x32xbf16>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x64>, tensor<32xbf16>, tensor<32x16xbf16>, tensor<32x16xbf16>, tensor<16x32xbf16>) -> tensor<?x16xbf16>
  return
}

// -----

func.func @moe_norm(%x: tensor<?x16xbf16>, %wr: tensor<4x16xbf16>, %br: tensor<4xf32>, %down: tensor<32x16xbf16>, %up: tensor<16x32xbf16>, %w1: !k3.mxfp4<4x32x32>, %w3: !k3.mxfp4<4x32x32>, %w2: !k3.mxfp4<4x32x32>, %ln: tensor<16xbf16>, %sg: tensor<32x16xbf16>, %su: tensor<32x16xbf16>, %sd: tensor<16x32xbf16>) {
  // expected-error @+1 {{'k3.latent_moe' op latent norm weight must have shape [32], got [16]}}
  %0 = k3.latent_moe %x router %wr, %br latent %down, %up experts %w1, %w3, %w2 norm %ln shared %sg, %su, %sd {num_experts = 4 : i64, top_k = 2 : i64, routed_scaling_factor = 1.0 : f64, renormalize = true, norm_eps = 1.0e-5 : f64, activation = #k3.glu_activation<situ>, beta = 4.0 : f64, linear_beta = 25.0 : f64} : (tensor<?x16xbf16>, tensor<4x16xbf16>, tensor<4xf32>, tensor<32x16xbf16>, tensor<16x32xbf16>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, tensor<16xbf16>, tensor<32x16xbf16>, tensor<32x16xbf16>, tensor<16x32xbf16>) -> tensor<?x16xbf16>
  return
}

// -----

func.func @moe_norm_eps(%x: tensor<?x16xbf16>, %wr: tensor<4x16xbf16>, %br: tensor<4xf32>, %down: tensor<32x16xbf16>, %up: tensor<16x32xbf16>, %w1: !k3.mxfp4<4x32x32>, %w3: !k3.mxfp4<4x32x32>, %w2: !k3.mxfp4<4x32x32>, %ln: tensor<32xbf16>, %sg: tensor<32x16xbf16>, %su: tensor<32x16xbf16>, %sd: tensor<16x32xbf16>) {
  // expected-error @+1 {{'k3.latent_moe' op norm_eps must be positive, got 0}}
  %0 = k3.latent_moe %x router %wr, %br latent %down, %up experts %w1, %w3, %w2 norm %ln shared %sg, %su, %sd {num_experts = 4 : i64, top_k = 2 : i64, routed_scaling_factor = 1.0 : f64, renormalize = true, norm_eps = 0.0 : f64, activation = #k3.glu_activation<situ>, beta = 4.0 : f64, linear_beta = 25.0 : f64} : (tensor<?x16xbf16>, tensor<4x16xbf16>, tensor<4xf32>, tensor<32x16xbf16>, tensor<16x32xbf16>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, tensor<32xbf16>, tensor<32x16xbf16>, tensor<32x16xbf16>, tensor<16x32xbf16>) -> tensor<?x16xbf16>
  return
}

// -----

func.func @moe_shared_gate(%x: tensor<?x16xbf16>, %wr: tensor<4x16xbf16>, %br: tensor<4xf32>, %down: tensor<32x16xbf16>, %up: tensor<16x32xbf16>, %w1: !k3.mxfp4<4x32x32>, %w3: !k3.mxfp4<4x32x32>, %w2: !k3.mxfp4<4x32x32>, %ln: tensor<32xbf16>, %sg: tensor<32x8xbf16>, %su: tensor<32x16xbf16>, %sd: tensor<16x32xbf16>) {
  // expected-error @+1 {{'k3.latent_moe' op shared gate weight must have shape [32, 16], got [32, 8]}}
  %0 = k3.latent_moe %x router %wr, %br latent %down, %up experts %w1, %w3, %w2 norm %ln shared %sg, %su, %sd {num_experts = 4 : i64, top_k = 2 : i64, routed_scaling_factor = 1.0 : f64, renormalize = true, norm_eps = 1.0e-5 : f64, activation = #k3.glu_activation<situ>, beta = 4.0 : f64, linear_beta = 25.0 : f64} : (tensor<?x16xbf16>, tensor<4x16xbf16>, tensor<4xf32>, tensor<32x16xbf16>, tensor<16x32xbf16>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, tensor<32xbf16>, tensor<32x8xbf16>, tensor<32x16xbf16>, tensor<16x32xbf16>) -> tensor<?x16xbf16>
  return
}

// -----

func.func @moe_shared_up(%x: tensor<?x16xbf16>, %wr: tensor<4x16xbf16>, %br: tensor<4xf32>, %down: tensor<32x16xbf16>, %up: tensor<16x32xbf16>, %w1: !k3.mxfp4<4x32x32>, %w3: !k3.mxfp4<4x32x32>, %w2: !k3.mxfp4<4x32x32>, %ln: tensor<32xbf16>, %sg: tensor<32x16xbf16>, %su: tensor<16x16xbf16>, %sd: tensor<16x32xbf16>) {
  // expected-error @+1 {{'k3.latent_moe' op shared up weight must have shape [32, 16], got [16, 16]}}
  %0 = k3.latent_moe %x router %wr, %br latent %down, %up experts %w1, %w3, %w2 norm %ln shared %sg, %su, %sd {num_experts = 4 : i64, top_k = 2 : i64, routed_scaling_factor = 1.0 : f64, renormalize = true, norm_eps = 1.0e-5 : f64, activation = #k3.glu_activation<situ>, beta = 4.0 : f64, linear_beta = 25.0 : f64} : (tensor<?x16xbf16>, tensor<4x16xbf16>, tensor<4xf32>, tensor<32x16xbf16>, tensor<16x32xbf16>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, tensor<32xbf16>, tensor<32x16xbf16>, tensor<16x16xbf16>, tensor<16x32xbf16>) -> tensor<?x16xbf16>
  return
}

// -----

func.func @moe_shared_down(%x: tensor<?x16xbf16>, %wr: tensor<4x16xbf16>, %br: tensor<4xf32>, %down: tensor<32x16xbf16>, %up: tensor<16x32xbf16>, %w1: !k3.mxfp4<4x32x32>, %w3: !k3.mxfp4<4x32x32>, %w2: !k3.mxfp4<4x32x32>, %ln: tensor<32xbf16>, %sg: tensor<32x16xbf16>, %su: tensor<32x16xbf16>, %sd: tensor<32x16xbf16>) {
  // expected-error @+1 {{'k3.latent_moe' op shared down weight must have shape [16, 32], got [32, 16]}}
  %0 = k3.latent_moe %x router %wr, %br latent %down, %up experts %w1, %w3, %w2 norm %ln shared %sg, %su, %sd {num_experts = 4 : i64, top_k = 2 : i64, routed_scaling_factor = 1.0 : f64, renormalize = true, norm_eps = 1.0e-5 : f64, activation = #k3.glu_activation<situ>, beta = 4.0 : f64, linear_beta = 25.0 : f64} : (tensor<?x16xbf16>, tensor<4x16xbf16>, tensor<4xf32>, tensor<32x16xbf16>, tensor<16x32xbf16>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, tensor<32xbf16>, tensor<32x16xbf16>, tensor<32x16xbf16>, tensor<32x16xbf16>) -> tensor<?x16xbf16>
  return
}

// -----

func.func @moe_scaling(%x: tensor<?x16xbf16>, %wr: tensor<4x16xbf16>, %br: tensor<4xf32>, %down: tensor<32x16xbf16>, %up: tensor<16x32xbf16>, %w1: !k3.mxfp4<4x32x32>, %w3: !k3.mxfp4<4x32x32>, %w2: !k3.mxfp4<4x32x32>, %ln: tensor<32xbf16>, %sg: tensor<32x16xbf16>, %su: tensor<32x16xbf16>, %sd: tensor<16x32xbf16>) {
  // expected-error @+1 {{'k3.latent_moe' op routed_scaling_factor must be positive, got 0}}
  %0 = k3.latent_moe %x router %wr, %br latent %down, %up experts %w1, %w3, %w2 norm %ln shared %sg, %su, %sd {num_experts = 4 : i64, top_k = 2 : i64, routed_scaling_factor = 0.0 : f64, renormalize = true, norm_eps = 1.0e-5 : f64, activation = #k3.glu_activation<situ>, beta = 4.0 : f64, linear_beta = 25.0 : f64} : (tensor<?x16xbf16>, tensor<4x16xbf16>, tensor<4xf32>, tensor<32x16xbf16>, tensor<16x32xbf16>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, tensor<32xbf16>, tensor<32x16xbf16>, tensor<32x16xbf16>, tensor<16x32xbf16>) -> tensor<?x16xbf16>
  return
}

// -----

func.func @moe_result(%x: tensor<?x16xbf16>, %wr: tensor<4x16xbf16>, %br: tensor<4xf32>, %down: tensor<32x16xbf16>, %up: tensor<16x32xbf16>, %w1: !k3.mxfp4<4x32x32>, %w3: !k3.mxfp4<4x32x32>, %w2: !k3.mxfp4<4x32x32>, %ln: tensor<32xbf16>, %sg: tensor<32x16xbf16>, %su: tensor<32x16xbf16>, %sd: tensor<16x32xbf16>) {
  // expected-error @+1 {{'k3.latent_moe' op result must have shape [?, 16], got [?, 32]}}
  %0 = k3.latent_moe %x router %wr, %br latent %down, %up experts %w1, %w3, %w2 norm %ln shared %sg, %su, %sd {num_experts = 4 : i64, top_k = 2 : i64, routed_scaling_factor = 1.0 : f64, renormalize = true, norm_eps = 1.0e-5 : f64, activation = #k3.glu_activation<situ>, beta = 4.0 : f64, linear_beta = 25.0 : f64} : (tensor<?x16xbf16>, tensor<4x16xbf16>, tensor<4xf32>, tensor<32x16xbf16>, tensor<16x32xbf16>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, tensor<32xbf16>, tensor<32x16xbf16>, tensor<32x16xbf16>, tensor<16x32xbf16>) -> tensor<?x32xbf16>
  return
}

// -----

func.func @moe_beta(%x: tensor<?x16xbf16>, %wr: tensor<4x16xbf16>, %br: tensor<4xf32>, %down: tensor<32x16xbf16>, %up: tensor<16x32xbf16>, %w1: !k3.mxfp4<4x32x32>, %w3: !k3.mxfp4<4x32x32>, %w2: !k3.mxfp4<4x32x32>, %ln: tensor<32xbf16>, %sg: tensor<32x16xbf16>, %su: tensor<32x16xbf16>, %sd: tensor<16x32xbf16>) {
  // expected-error @+1 {{'k3.latent_moe' op linear_beta must be positive, got 0}}
  %0 = k3.latent_moe %x router %wr, %br latent %down, %up experts %w1, %w3, %w2 norm %ln shared %sg, %su, %sd {num_experts = 4 : i64, top_k = 2 : i64, routed_scaling_factor = 1.0 : f64, renormalize = true, norm_eps = 1.0e-5 : f64, activation = #k3.glu_activation<situ>, beta = 4.0 : f64, linear_beta = 0.0 : f64} : (tensor<?x16xbf16>, tensor<4x16xbf16>, tensor<4xf32>, tensor<32x16xbf16>, tensor<16x32xbf16>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, tensor<32xbf16>, tensor<32x16xbf16>, tensor<32x16xbf16>, tensor<16x32xbf16>) -> tensor<?x16xbf16>
  return
}

// -----

func.func @gated_norm_result(%o: tensor<?x2x8xbf16>, %z: tensor<?x2x8xbf16>, %g: tensor<8xf32>) {
  // expected-error @+1 {{'k3.gated_rms_norm' op result must have shape [?, 2, 8], got [?, 2, 4]}}
  %0 = k3.gated_rms_norm %o, %z, %g {eps = 1.0e-5 : f64} : (tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<8xf32>) -> tensor<?x2x4xbf16>
  return
}
