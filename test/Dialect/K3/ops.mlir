// RUN: k3-opt %s | k3-opt | FileCheck %s
// RUN: k3-opt %s --mlir-print-op-generic | k3-opt | FileCheck %s
// RUN: k3-opt %s --verify-roundtrip

// Round trip of every k3 op and type (custom and generic forms).

// CHECK-LABEL: func.func @types
// CHECK-SAME: !k3.kda_state<heads = 2, key_dim = 8, value_dim = 4, element_type = f32, layout = value_first>
// CHECK-SAME: !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = key_first>
// CHECK-SAME: !k3.conv_state<channels = 16, width = 3, element_type = bf16>
// CHECK-SAME: !k3.mla_cache<latent_dim = 32, rope_dim = 8, element_type = bf16, page_size = 16>
// CHECK-SAME: !k3.mxfp4<4x8x64>
func.func @types(
    %a: !k3.kda_state<heads = 2, key_dim = 8, value_dim = 4, element_type = f32, layout = value_first>,
    %b: !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = key_first>,
    %c: !k3.conv_state<channels = 16, width = 3, element_type = bf16>,
    %d: !k3.mla_cache<latent_dim = 32, rope_dim = 8, element_type = bf16, page_size = 16>,
    %e: !k3.mxfp4<4x8x64>) {
  return
}

// CHECK: k3.unused_weight "layers.0.self_attention_res_norm.weight" : tensor<16xbf16>
k3.unused_weight "layers.0.self_attention_res_norm.weight" : tensor<16xbf16>

// CHECK-LABEL: func.func @weights
// CHECK: k3.weight "model.embed_tokens.weight" : tensor<64x16xbf16>
// CHECK: k3.weight "experts.{e}.w1" : !k3.mxfp4<4x8x32>
// CHECK: k3.weight "experts.{e}.w2.weight" : tensor<4x32x8xbf16>
func.func @weights() -> (tensor<64x16xbf16>, !k3.mxfp4<4x8x32>, tensor<4x32x8xbf16>) {
  %0 = k3.weight "model.embed_tokens.weight" : tensor<64x16xbf16>
  %1 = k3.weight "experts.{e}.w1" : !k3.mxfp4<4x8x32>
  %2 = k3.weight "experts.{e}.w2.weight" : tensor<4x32x8xbf16>
  return %0, %1, %2 : tensor<64x16xbf16>, !k3.mxfp4<4x8x32>, tensor<4x32x8xbf16>
}

// CHECK-LABEL: func.func @embedding_norms_head
// CHECK: k3.embedding %{{.*}}, %{{.*}} : (tensor<?xi32>, tensor<64x16xbf16>) -> tensor<?x16xbf16>
// CHECK: k3.rms_norm %{{.*}}, %{{.*}} {eps = 1.000000e-05 : f64}
// CHECK: k3.linear %{{.*}}, %{{.*}} : (tensor<?x16xbf16>, tensor<8x16xbf16>) -> tensor<?x8xbf16>
// CHECK: k3.lm_head %{{.*}}, %{{.*}} : (tensor<?x16xbf16>, tensor<64x16xbf16>) -> tensor<?x64xf32>
func.func @embedding_norms_head(%tok: tensor<?xi32>, %table: tensor<64x16xbf16>,
    %g: tensor<16xbf16>, %w: tensor<8x16xbf16>) -> (tensor<?x8xbf16>, tensor<?x64xf32>) {
  %x = k3.embedding %tok, %table : (tensor<?xi32>, tensor<64x16xbf16>) -> tensor<?x16xbf16>
  %y = k3.rms_norm %x, %g {eps = 1.0e-5 : f64} : (tensor<?x16xbf16>, tensor<16xbf16>) -> tensor<?x16xbf16>
  %p = k3.linear %y, %w : (tensor<?x16xbf16>, tensor<8x16xbf16>) -> tensor<?x8xbf16>
  %l = k3.lm_head %y, %table : (tensor<?x16xbf16>, tensor<64x16xbf16>) -> tensor<?x64xf32>
  return %p, %l : tensor<?x8xbf16>, tensor<?x64xf32>
}

// CHECK-LABEL: func.func @gated_norm
// CHECK: k3.gated_rms_norm %{{.*}}, %{{.*}}, %{{.*}} {eps = 1.000000e-05 : f64} : (tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<8xf32>) -> tensor<?x2x8xbf16>
func.func @gated_norm(%o: tensor<?x2x8xbf16>, %z: tensor<?x2x8xbf16>, %g: tensor<8xf32>) -> tensor<?x2x8xbf16> {
  %y = k3.gated_rms_norm %o, %z, %g {eps = 1.0e-5 : f64} : (tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<8xf32>) -> tensor<?x2x8xbf16>
  return %y : tensor<?x2x8xbf16>
}

// CHECK-LABEL: func.func @attn_res
// CHECK: k3.attn_res %{{.*}}, %{{.*}}, %{{.*}} norm %{{.*}} proj %{{.*}} {eps = 1.000000e-05 : f64}
func.func @attn_res(%b0: tensor<?x16xbf16>, %b1: tensor<?x16xbf16>, %p: tensor<?x16xbf16>,
    %g: tensor<16xbf16>, %w: tensor<1x16xbf16>) -> tensor<?x16xbf16> {
  %h = k3.attn_res %b0, %b1, %p norm %g proj %w {eps = 1.0e-5 : f64}
      : (tensor<?x16xbf16>, tensor<?x16xbf16>, tensor<?x16xbf16>, tensor<16xbf16>, tensor<1x16xbf16>) -> tensor<?x16xbf16>
  return %h : tensor<?x16xbf16>
}

// CHECK-LABEL: func.func @kda
// CHECK: k3.short_conv
// CHECK: k3.kda
// CHECK-SAME: chunk_size = 16 : i64
// CHECK-SAME: gate_form = #k3.kda_gate_form<lower_bound_sigmoid>
// CHECK-SAME: lower_bound = -5.000000e+00 : f64
// CHECK: k3.kda {{.*}}gate_form = #k3.kda_gate_form<softplus>, l2_eps = {{[^,]*}}, scale = 
func.func @kda(%u: tensor<?x16xbf16>, %cw: tensor<16x1x4xf32>,
    %tail: !k3.conv_state<channels = 16, width = 3, element_type = bf16>,
    %q: tensor<?x2x8xbf16>, %k: tensor<?x2x8xbf16>, %v: tensor<?x2x8xbf16>,
    %f: tensor<?x2x8xbf16>, %b: tensor<?x2xbf16>, %alog: tensor<128xf32>, %dt: tensor<16xf32>,
    %s: !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>) {
  %y, %t1 = k3.short_conv %u, %cw, %tail
      : (tensor<?x16xbf16>, tensor<16x1x4xf32>, !k3.conv_state<channels = 16, width = 3, element_type = bf16>)
      -> (tensor<?x16xbf16>, !k3.conv_state<channels = 16, width = 3, element_type = bf16>)
  %o, %s1 = k3.kda %q, %k, %v, %f, %b, %alog, %dt, %s
      {gate_form = #k3.kda_gate_form<lower_bound_sigmoid>, lower_bound = -5.0 : f64,
       scale = 0.35355339059327373 : f64, l2_eps = 1.0e-6 : f64, chunk_size = 16 : i64}
      : (tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2xbf16>,
         tensor<128xf32>, tensor<16xf32>,
         !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>)
      -> (tensor<?x2x8xbf16>, !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>)
  %o2, %s2 = k3.kda %q, %k, %v, %f, %b, %alog, %dt, %s1
      {gate_form = #k3.kda_gate_form<softplus>,
       scale = 0.35355339059327373 : f64, l2_eps = 1.0e-6 : f64, chunk_size = 64 : i64}
      : (tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2xbf16>,
         tensor<128xf32>, tensor<16xf32>,
         !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>)
      -> (tensor<?x2x8xbf16>, !k3.kda_state<heads = 2, key_dim = 8, value_dim = 8, element_type = f32, layout = value_first>)
  return
}

// CHECK-LABEL: func.func @mla
// CHECK: k3.gated_mla {{.*}} gate %{{.*}} {heads = 2 : i64
// CHECK: k3.gated_mla{{( %[a-z0-9_]+,){7} %[a-z0-9_]+}} {heads = 2 : i64
func.func @mla(%x: tensor<?x16xbf16>, %qa: tensor<8x16xbf16>, %qan: tensor<8xbf16>,
    %qb: tensor<48x8xbf16>, %kva: tensor<20x16xbf16>, %kvan: tensor<16xbf16>,
    %kvb: tensor<72x16xbf16>, %g: tensor<32x16xbf16>,
    %c: !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>) {
  %a, %c1 = k3.gated_mla %x, %qa, %qan, %qb, %kva, %kvan, %kvb, %c gate %g
      {heads = 2 : i64, nope_dim = 20 : i64, rope_dim = 4 : i64, v_dim = 16 : i64,
       scale = 0.2041241452319315 : f64, q_norm_eps = 1.0e-6 : f64, kv_norm_eps = 1.0e-6 : f64}
      : (tensor<?x16xbf16>, tensor<8x16xbf16>, tensor<8xbf16>, tensor<48x8xbf16>, tensor<20x16xbf16>,
         tensor<16xbf16>, tensor<72x16xbf16>,
         !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>, tensor<32x16xbf16>)
      -> (tensor<?x32xbf16>, !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>)
  %a2, %c2 = k3.gated_mla %x, %qa, %qan, %qb, %kva, %kvan, %kvb, %c1
      {heads = 2 : i64, nope_dim = 20 : i64, rope_dim = 4 : i64, v_dim = 16 : i64,
       scale = 0.2041241452319315 : f64, q_norm_eps = 1.0e-6 : f64, kv_norm_eps = 1.0e-6 : f64}
      : (tensor<?x16xbf16>, tensor<8x16xbf16>, tensor<8xbf16>, tensor<48x8xbf16>, tensor<20x16xbf16>,
         tensor<16xbf16>, tensor<72x16xbf16>,
         !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>)
      -> (tensor<?x32xbf16>, !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>)
  return
}

// CHECK-LABEL: func.func @mlps
// CHECK: k3.glu_mlp {{.*}}activation = #k3.glu_activation<situ>
// CHECK: k3.latent_moe %{{.*}} router %{{.*}}, %{{.*}} latent %{{.*}}, %{{.*}} experts %{{.*}}, %{{.*}}, %{{.*}} norm %{{.*}} shared %{{.*}}, %{{.*}}, %{{.*}} {
// CHECK-SAME: num_experts = 4 : i64
// CHECK-SAME: top_k = 2 : i64
// CHECK: k3.latent_moe %{{.*}} router %{{.*}}, %{{.*}} experts %{{.*}}, %{{.*}}, %{{.*}} {
// CHECK-SAME: activation = #k3.glu_activation<silu>
func.func @mlps(%x: tensor<?x16xbf16>, %dg: tensor<32x16xbf16>, %du: tensor<32x16xbf16>, %dd: tensor<16x32xbf16>,
    %wr: tensor<4x16xbf16>, %br: tensor<4xf32>, %down: tensor<32x16xbf16>, %up: tensor<16x32xbf16>,
    %w1: !k3.mxfp4<4x32x32>, %w3: !k3.mxfp4<4x32x32>, %w2: !k3.mxfp4<4x32x32>, %ln: tensor<32xbf16>,
    %sg: tensor<32x16xbf16>, %su: tensor<32x16xbf16>, %sd: tensor<16x32xbf16>,
    %e1: tensor<4x8x16xbf16>, %e3: tensor<4x8x16xbf16>, %e2: tensor<4x16x8xbf16>) {
  %m = k3.glu_mlp %x, %dg, %du, %dd {activation = #k3.glu_activation<situ>, beta = 4.0 : f64, linear_beta = 25.0 : f64}
      : (tensor<?x16xbf16>, tensor<32x16xbf16>, tensor<32x16xbf16>, tensor<16x32xbf16>) -> tensor<?x16xbf16>
  %y = k3.latent_moe %x router %wr, %br latent %down, %up experts %w1, %w3, %w2 norm %ln shared %sg, %su, %sd
      {num_experts = 4 : i64, top_k = 2 : i64, routed_scaling_factor = 1.0 : f64, renormalize = true,
       norm_eps = 1.0e-5 : f64, activation = #k3.glu_activation<situ>, beta = 4.0 : f64, linear_beta = 25.0 : f64}
      : (tensor<?x16xbf16>, tensor<4x16xbf16>, tensor<4xf32>, tensor<32x16xbf16>, tensor<16x32xbf16>,
         !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>, tensor<32xbf16>,
         tensor<32x16xbf16>, tensor<32x16xbf16>, tensor<16x32xbf16>) -> tensor<?x16xbf16>
  %z = k3.latent_moe %x router %wr, %br experts %e1, %e3, %e2
      {num_experts = 4 : i64, top_k = 2 : i64, routed_scaling_factor = 2.5 : f64, renormalize = false,
       norm_eps = 1.0e-5 : f64, activation = #k3.glu_activation<silu>, beta = 1.0 : f64, linear_beta = 1.0 : f64}
      : (tensor<?x16xbf16>, tensor<4x16xbf16>, tensor<4xf32>, tensor<4x8x16xbf16>, tensor<4x8x16xbf16>,
         tensor<4x16x8xbf16>) -> tensor<?x16xbf16>
  return
}
