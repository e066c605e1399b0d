// RUN: k3-opt %s --split-input-file --convert-k3-to-linalg | FileCheck %s

// Every k3 op becomes a call to its kernel on dynamically shaped operands;
// state types become buffers updated in place; MXFP4 weights become
// (packed, scale) tensors; the kernels themselves are in linalg/scf/memref.

// CHECK-LABEL: func.func @dense
// CHECK: %[[X:.+]] = call @k3k_embedding(%{{.+}}, %{{.+}}) : (tensor<?xi32>, tensor<?x?xbf16>) -> tensor<?x?xbf16>
// CHECK: call @k3k_rms_norm({{.*}}) : (tensor<?x?xbf16>, tensor<?xbf16>, f32) -> tensor<?x?xbf16>
// CHECK: call @k3k_linear({{.*}}) : (tensor<?x?xbf16>, tensor<?x?xbf16>) -> tensor<?x?xbf16>
// CHECK: call @k3k_add(
// AttnRes: one block and the last candidate, both views (nothing copied).
// CHECK-NOT: tensor.insert_slice
// CHECK: tensor.expand_shape %{{.+}} into tensor<1x?x16xbf16>
// CHECK: tensor.expand_shape %{{.+}} into tensor<1x?x16xbf16>
// CHECK: call @k3k_attn_res({{.*}}) : (tensor<?x?x?xbf16>, tensor<?x?x?xbf16>, tensor<?xbf16>, tensor<?x?xbf16>, f32) -> tensor<?x?xbf16>
// CHECK: call @k3k_glu_mlp({{.*}}) : (tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?x?xbf16>, i1, f32, f32) -> tensor<?x?xbf16>
// CHECK: call @k3k_lm_head({{.*}}) -> tensor<?x?xf32>
// No k3 op is left (the kernels' `k3.` attributes are for later passes).
// CHECK-NOT: = k3.
// CHECK-NOT: {{^ *}}k3.
// CHECK: func.func private @k3k_linear(
// CHECK: linalg.generic
func.func @dense(%tok: tensor<?xi32>, %e: tensor<64x16xbf16>, %g: tensor<16xbf16>, %w: tensor<16x16xbf16>,
                 %p: tensor<1x16xbf16>, %dg: tensor<32x16xbf16>, %du: tensor<32x16xbf16>, %dd: tensor<16x32xbf16>)
    -> tensor<?x64xf32> {
  %x = k3.embedding %tok, %e : (tensor<?xi32>, tensor<64x16xbf16>) -> tensor<?x16xbf16>
  %n = k3.rms_norm %x, %g {eps = 1.0e-5 : f64} : (tensor<?x16xbf16>, tensor<16xbf16>) -> tensor<?x16xbf16>
  %y = k3.linear %n, %w : (tensor<?x16xbf16>, tensor<16x16xbf16>) -> tensor<?x16xbf16>
  %s = arith.addf %x, %y : tensor<?x16xbf16>
  %h = k3.attn_res %x, %s norm %g proj %p {eps = 1.0e-5 : f64}
      : (tensor<?x16xbf16>, tensor<?x16xbf16>, tensor<16xbf16>, tensor<1x16xbf16>) -> tensor<?x16xbf16>
  %m = k3.glu_mlp %h, %dg, %du, %dd {activation = #k3.glu_activation<situ>, beta = 4.0 : f64, linear_beta = 25.0 : f64}
      : (tensor<?x16xbf16>, tensor<32x16xbf16>, tensor<32x16xbf16>, tensor<16x32xbf16>) -> tensor<?x16xbf16>
  %l = k3.lm_head %m, %e : (tensor<?x16xbf16>, tensor<64x16xbf16>) -> tensor<?x64xf32>
  return %l : tensor<?x64xf32>
}

// -----

// §3.2: an RMSNorm whose input is an AttnRes used only there is one call of
// @k3k_attn_res_norm; an AttnRes with another use keeps both calls. The
// library's own @k3k_attn_res_norm_rows is the two kernels.
// CHECK-LABEL: func.func @joined
// CHECK: %[[Y:.+]] = call @k3k_attn_res_norm({{.*}}) : (tensor<?x?x?xbf16>, tensor<?x?x?xbf16>, tensor<?xbf16>, tensor<?x?xbf16>, f32, tensor<?xbf16>, f32) -> tensor<?x?xbf16>
// CHECK-NOT: call @k3k_attn_res(
// CHECK-NOT: call @k3k_rms_norm(
// CHECK: return
// CHECK-LABEL: func.func @shared
// CHECK: call @k3k_attn_res(
// CHECK: call @k3k_rms_norm(
// CHECK-NOT: call @k3k_attn_res_norm(
// CHECK: return
// CHECK-LABEL: func.func private @k3k_attn_res_norm_rows
// CHECK-SAME: attributes {k3.attn_res_norm = {narrow = @k3k_narrow, round = @k3k_round, widen = @k3k_widen}}
// CHECK: call @k3k_attn_res(
// CHECK: call @k3k_rms_norm(
func.func @joined(%x: tensor<?x16xbf16>, %s: tensor<?x16xbf16>, %g: tensor<16xbf16>, %p: tensor<1x16xbf16>,
                  %gn: tensor<16xbf16>) -> tensor<?x16xbf16> {
  %h = k3.attn_res %x, %s norm %g proj %p {eps = 1.0e-5 : f64}
      : (tensor<?x16xbf16>, tensor<?x16xbf16>, tensor<16xbf16>, tensor<1x16xbf16>) -> tensor<?x16xbf16>
  %n = k3.rms_norm %h, %gn {eps = 1.0e-6 : f64} : (tensor<?x16xbf16>, tensor<16xbf16>) -> tensor<?x16xbf16>
  return %n : tensor<?x16xbf16>
}
func.func @shared(%x: tensor<?x16xbf16>, %s: tensor<?x16xbf16>, %g: tensor<16xbf16>, %p: tensor<1x16xbf16>,
                  %gn: tensor<16xbf16>) -> (tensor<?x16xbf16>, tensor<?x16xbf16>) {
  %h = k3.attn_res %x, %s norm %g proj %p {eps = 1.0e-5 : f64}
      : (tensor<?x16xbf16>, tensor<?x16xbf16>, tensor<16xbf16>, tensor<1x16xbf16>) -> tensor<?x16xbf16>
  %n = k3.rms_norm %h, %gn {eps = 1.0e-6 : f64} : (tensor<?x16xbf16>, tensor<16xbf16>) -> tensor<?x16xbf16>
  return %h, %n : tensor<?x16xbf16>, tensor<?x16xbf16>
}

// -----

// §3.2 steps 4 and 7: a residual sum that is the last candidate of the
// AttnRes (and norm) after it is made by @k3k_attn_res_norm_add, from views
// of its two terms, and its later uses read the sum that call returns; a
// sum also read before the AttnRes keeps its own @k3k_add.
// CHECK-LABEL: func.func @residual
// CHECK-SAME: (%[[X:[^:]+]]: tensor<?x16xbf16>, %[[Y:[^:]+]]: tensor<?x16xbf16>
// CHECK-NOT: call @k3k_add(
// The block %x, then the two terms, as [1, T, D] views.
// CHECK: tensor.expand_shape %[[X]]
// CHECK: %[[XV:.+]] = tensor.expand_shape %[[X]]
// CHECK: %[[XC:.+]] = tensor.cast %[[XV]] : tensor<1x?x16xbf16> to tensor<?x?x?xbf16>
// CHECK: %[[YV:.+]] = tensor.expand_shape %[[Y]]
// CHECK: %[[YC:.+]] = tensor.cast %[[YV]] : tensor<1x?x16xbf16> to tensor<?x?x?xbf16>
// CHECK: %[[R:.+]]:2 = call @k3k_attn_res_norm_add(%{{.+}}, %[[XC]], %[[YC]], %{{.+}}) : (tensor<?x?x?xbf16>, tensor<?x?x?xbf16>, tensor<?x?x?xbf16>, tensor<?xbf16>, tensor<?x?xbf16>, f32, tensor<?xbf16>, f32) -> (tensor<?x?xbf16>, tensor<?x?x?xbf16>)
// CHECK: %[[S:.+]] = tensor.collapse_shape %[[R]]#1 {{\[}}[0, 1], [2]] : tensor<?x?x?xbf16> into tensor<?x?xbf16>
// CHECK: %[[SC:.+]] = tensor.cast %[[S]] : tensor<?x?xbf16> to tensor<?x16xbf16>
// The later add reads the returned sum.
// CHECK: %[[SD:.+]] = tensor.cast %[[SC]] : tensor<?x16xbf16> to tensor<?x?xbf16>
// CHECK: call @k3k_add(%[[SD]],
// CHECK: return
// CHECK-LABEL: func.func @early
// CHECK: call @k3k_add(
// CHECK: call @k3k_add(
// CHECK: call @k3k_attn_res_norm(
// CHECK-NOT: call @k3k_attn_res_norm_add(
// CHECK: return
// CHECK-LABEL: func.func private @k3k_attn_res_norm_add_rows
// CHECK-SAME: attributes {k3.attn_res_norm = {narrow = @k3k_narrow, round = @k3k_round, widen = @k3k_widen}}
// CHECK: scf.parallel
// CHECK: call @k3k_add1(
// CHECK: call @k3k_attn_res_norm_rows(
func.func @residual(%x: tensor<?x16xbf16>, %y: tensor<?x16xbf16>, %g: tensor<16xbf16>, %p: tensor<1x16xbf16>,
                    %gn: tensor<16xbf16>) -> (tensor<?x16xbf16>, tensor<?x16xbf16>) {
  %s = arith.addf %x, %y : tensor<?x16xbf16>
  %h = k3.attn_res %x, %s norm %g proj %p {eps = 1.0e-5 : f64}
      : (tensor<?x16xbf16>, tensor<?x16xbf16>, tensor<16xbf16>, tensor<1x16xbf16>) -> tensor<?x16xbf16>
  %n = k3.rms_norm %h, %gn {eps = 1.0e-6 : f64} : (tensor<?x16xbf16>, tensor<16xbf16>) -> tensor<?x16xbf16>
  %t = arith.addf %s, %n : tensor<?x16xbf16>
  return %n, %t : tensor<?x16xbf16>, tensor<?x16xbf16>
}
func.func @early(%x: tensor<?x16xbf16>, %y: tensor<?x16xbf16>, %g: tensor<16xbf16>, %p: tensor<1x16xbf16>,
                 %gn: tensor<16xbf16>) -> (tensor<?x16xbf16>, tensor<?x16xbf16>) {
  %s = arith.addf %x, %y : tensor<?x16xbf16>
  %u = arith.addf %s, %y : tensor<?x16xbf16>
  %h = k3.attn_res %x, %s norm %g proj %p {eps = 1.0e-5 : f64}
      : (tensor<?x16xbf16>, tensor<?x16xbf16>, tensor<16xbf16>, tensor<1x16xbf16>) -> tensor<?x16xbf16>
  %n = k3.rms_norm %h, %gn {eps = 1.0e-6 : f64} : (tensor<?x16xbf16>, tensor<16xbf16>) -> tensor<?x16xbf16>
  return %n, %u : tensor<?x16xbf16>, tensor<?x16xbf16>
}

// -----

// §3.2: AttnRes with the same blocks before their last candidate share one
// stack of them (two copies for the two AttnRes over blocks %a, %b, three
// for the one over %a, %b, %c); the last candidate is a view.
// CHECK-LABEL: func.func @blocks
// CHECK-SAME: (%[[A:[^:]+]]: tensor<?x16xbf16>, %[[B:[^:]+]]: tensor<?x16xbf16>, %[[C:[^:]+]]: tensor<?x16xbf16>, %[[P:[^:]+]]: tensor<?x16xbf16>, %[[Q:[^:]+]]: tensor<?x16xbf16>
// CHECK: %[[E2:.+]] = tensor.empty(%{{.+}}) : tensor<2x?x16xbf16>
// CHECK: %[[S20:.+]] = tensor.insert_slice %[[A]] into %[[E2]][0, 0, 0]
// CHECK: %[[S2:.+]] = tensor.insert_slice %[[B]] into %[[S20]][1, 0, 0]
// CHECK: tensor.expand_shape %[[P]]
// CHECK: %[[B2:.+]] = tensor.cast %[[S2]] : tensor<2x?x16xbf16> to tensor<?x?x?xbf16>
// CHECK: call @k3k_attn_res_norm(%[[B2]],
// CHECK-NOT: tensor.insert_slice
// CHECK: tensor.expand_shape %[[Q]]
// CHECK: %[[B2B:.+]] = tensor.cast %[[S2]] : tensor<2x?x16xbf16> to tensor<?x?x?xbf16>
// CHECK: call @k3k_attn_res_norm(%[[B2B]],
// CHECK: tensor.empty(%{{.+}}) : tensor<3x?x16xbf16>
// CHECK-COUNT-3: tensor.insert_slice
// CHECK-NOT: tensor.insert_slice
// CHECK: call @k3k_attn_res_norm(
// CHECK: return
func.func @blocks(%a: tensor<?x16xbf16>, %b: tensor<?x16xbf16>, %c: tensor<?x16xbf16>, %p: tensor<?x16xbf16>,
                  %q: tensor<?x16xbf16>, %g: tensor<16xbf16>, %w: tensor<1x16xbf16>)
    -> (tensor<?x16xbf16>, tensor<?x16xbf16>, tensor<?x16xbf16>) {
  %h1 = k3.attn_res %a, %b, %p norm %g proj %w {eps = 1.0e-5 : f64}
      : (tensor<?x16xbf16>, tensor<?x16xbf16>, tensor<?x16xbf16>, tensor<16xbf16>, tensor<1x16xbf16>) -> tensor<?x16xbf16>
  %n1 = k3.rms_norm %h1, %g {eps = 1.0e-6 : f64} : (tensor<?x16xbf16>, tensor<16xbf16>) -> tensor<?x16xbf16>
  %h2 = k3.attn_res %a, %b, %q norm %g proj %w {eps = 1.0e-5 : f64}
      : (tensor<?x16xbf16>, tensor<?x16xbf16>, tensor<?x16xbf16>, tensor<16xbf16>, tensor<1x16xbf16>) -> tensor<?x16xbf16>
  %n2 = k3.rms_norm %h2, %g {eps = 1.0e-6 : f64} : (tensor<?x16xbf16>, tensor<16xbf16>) -> tensor<?x16xbf16>
  %h3 = k3.attn_res %a, %b, %c, %q norm %g proj %w {eps = 1.0e-5 : f64}
      : (tensor<?x16xbf16>, tensor<?x16xbf16>, tensor<?x16xbf16>, tensor<?x16xbf16>, tensor<16xbf16>, tensor<1x16xbf16>) -> tensor<?x16xbf16>
  %n3 = k3.rms_norm %h3, %g {eps = 1.0e-6 : f64} : (tensor<?x16xbf16>, tensor<16xbf16>) -> tensor<?x16xbf16>
  return %n1, %n2, %n3 : tensor<?x16xbf16>, tensor<?x16xbf16>, tensor<?x16xbf16>
}

// -----

// One candidate: no blocks (an empty stack), the candidate the last one.
// CHECK-LABEL: func.func @one
// CHECK: %[[E:.+]] = tensor.empty(%{{.+}}) : tensor<0x?x16xbf16>
// CHECK-NOT: tensor.insert_slice
// CHECK: %[[L:.+]] = tensor.expand_shape %arg0
// CHECK: %[[EC:.+]] = tensor.cast %[[E]] : tensor<0x?x16xbf16> to tensor<?x?x?xbf16>
// CHECK: %[[LC:.+]] = tensor.cast %[[L]] : tensor<1x?x16xbf16> to tensor<?x?x?xbf16>
// CHECK: call @k3k_attn_res(%[[EC]], %[[LC]],
func.func @one(%a: tensor<?x16xbf16>, %g: tensor<16xbf16>, %w: tensor<1x16xbf16>) -> tensor<?x16xbf16> {
  %h = k3.attn_res %a norm %g proj %w {eps = 1.0e-5 : f64}
      : (tensor<?x16xbf16>, tensor<16xbf16>, tensor<1x16xbf16>) -> tensor<?x16xbf16>
  return %h : tensor<?x16xbf16>
}

// -----

// KDA: a state converts 1:2 (docs/ABI.md): the pool of every sequence's
// state ([S, H, V, K] f32 value-first, [S, C, W-1] conv tails; strided, as
// slots of the runtime's slot memory) and the call's slots; both are updated
// in place by the kernels and returned as they came. The chunk size, gate
// form and layout are passed to the kernel.
// CHECK-LABEL: func.func @kda
// CHECK-SAME: %[[TAIL:[a-z0-9]+]]: memref<?x16x3xbf16, strided<[?, ?, ?], offset: ?>>, %[[TS:[a-z0-9]+]]: memref<?xi32>
// CHECK-SAME: %[[S:[a-z0-9]+]]: memref<?x2x4x8xf32, strided<[?, ?, ?, ?], offset: ?>>, %[[SS:[a-z0-9]+]]: memref<?xi32>
// CHECK-SAME: -> (tensor<?x2x4xbf16>, memref<?x2x4x8xf32, strided<[?, ?, ?, ?], offset: ?>>, memref<?xi32>, memref<?x16x3xbf16, strided<[?, ?, ?], offset: ?>>, memref<?xi32>)
// CHECK: %[[DT:.+]] = memref.cast %[[TAIL]] : memref<?x16x3xbf16, strided<[?, ?, ?], offset: ?>> to memref<?x?x?xbf16, strided<[?, ?, ?], offset: ?>>
// CHECK: call @k3k_short_conv({{.*}}, %[[DT]], %[[TS]])
// CHECK-DAG: %[[SP:.+]] = arith.constant false
// CHECK-DAG: %[[LB:.+]] = arith.constant -5.000000e+00 : f32
// CHECK-DAG: %[[C16:.+]] = arith.constant 16 : index
// CHECK-DAG: %[[VF:.+]] = arith.constant true
// CHECK-DAG: %[[DS:.+]] = memref.cast %[[S]] : memref<?x2x4x8xf32, strided<[?, ?, ?, ?], offset: ?>> to memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>
// CHECK: call @k3k_kda({{.*}}, %[[DS]], %[[SS]], %[[SP]], %[[LB]], %{{.+}}, %{{.+}}, %[[C16]], %[[VF]])
// CHECK: return %{{.+}}, %[[S]], %[[SS]], %[[TAIL]], %[[TS]]
// CHECK: func.func private @k3k_kda_recurrent(
// CHECK: func.func private @k3k_kda_chunked(
func.func @kda(%u: tensor<?x16xbf16>, %cw: tensor<16x1x4xf32>,
    %tail: !k3.conv_state<channels = 16, width = 3, element_type = bf16>,
    %q: tensor<?x2x8xbf16>, %v: tensor<?x2x4xbf16>, %b: tensor<?x2xbf16>, %alog: tensor<128xf32>, %dt: tensor<16xf32>,
    %s: !k3.kda_state<heads = 2, key_dim = 8, value_dim = 4, element_type = f32, layout = value_first>)
    -> (tensor<?x2x4xbf16>, !k3.kda_state<heads = 2, key_dim = 8, value_dim = 4, element_type = f32, layout = value_first>,
        !k3.conv_state<channels = 16, width = 3, element_type = bf16>) {
  %y, %t1 = k3.short_conv %u, %cw, %tail
      : (tensor<?x16xbf16>, tensor<16x1x4xf32>, !k3.conv_state<channels = 16, width = 3, element_type = bf16>)
      -> (tensor<?x16xbf16>, !k3.conv_state<channels = 16, width = 3, element_type = bf16>)
  %o, %s1 = k3.kda %q, %q, %v, %q, %b, %alog, %dt, %s
      {gate_form = #k3.kda_gate_form<lower_bound_sigmoid>, lower_bound = -5.0 : f64,
       scale = 0.35355339059327373 : f64, l2_eps = 1.0e-6 : f64, chunk_size = 16 : i64}
      : (tensor<?x2x8xbf16>, tensor<?x2x8xbf16>, tensor<?x2x4xbf16>, tensor<?x2x8xbf16>, tensor<?x2xbf16>,
         tensor<128xf32>, tensor<16xf32>,
         !k3.kda_state<heads = 2, key_dim = 8, value_dim = 4, element_type = f32, layout = value_first>)
      -> (tensor<?x2x4xbf16>, !k3.kda_state<heads = 2, key_dim = 8, value_dim = 4, element_type = f32, layout = value_first>)
  return %o, %s1, %t1 : tensor<?x2x4xbf16>, !k3.kda_state<heads = 2, key_dim = 8, value_dim = 4, element_type = f32, layout = value_first>,
      !k3.conv_state<channels = 16, width = 3, element_type = bf16>
}

// -----

// MLA: the cache converts 1:3 (page pool, page tables [S, n], lengths [S])
// through the function signature, the call and the return.
// CHECK-LABEL: func.func private @mla_body
// CHECK-SAME: %[[POOL:[a-z0-9]+]]: memref<?x16x20xbf16>, %[[TAB:[a-z0-9]+]]: memref<?x?xi32>, %[[LEN:[a-z0-9]+]]: memref<?xi64>
// CHECK-SAME: -> (tensor<?x32xbf16>, memref<?x16x20xbf16>, memref<?x?xi32>, memref<?xi64>)
// CHECK: %[[DP:.+]] = memref.cast %[[POOL]] : memref<?x16x20xbf16> to memref<?x?x?xbf16>
// CHECK: call @k3k_gated_mla({{.*}}, %true, %[[DP]], %[[TAB]], %[[LEN]],
// CHECK: return %{{.+}}, %[[POOL]], %[[TAB]], %[[LEN]]
// CHECK-LABEL: func.func @mla_caller
// CHECK: call @mla_body({{.*}}) : ({{.*}}, memref<?x16x20xbf16>, memref<?x?xi32>, memref<?xi64>) -> (tensor<?x32xbf16>, memref<?x16x20xbf16>, memref<?x?xi32>, memref<?xi64>)
func.func private @mla_body(%x: tensor<?x16xbf16>, %qa: tensor<8x16xbf16>, %qan: tensor<8xbf16>,
    %qb: tensor<48x8xbf16>, %kva: tensor<20x16xbf16>, %kvan: tensor<16xbf16>,
    %kvb: tensor<72x16xbf16>, %g: tensor<32x16xbf16>,
    %c: !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>)
    -> (tensor<?x32xbf16>, !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>) {
  %a, %c1 = k3.gated_mla %x, %qa, %qan, %qb, %kva, %kvan, %kvb, %c gate %g
      {heads = 2 : i64, nope_dim = 20 : i64, rope_dim = 4 : i64, v_dim = 16 : i64,
       scale = 0.2041241452319315 : f64, q_norm_eps = 1.0e-6 : f64, kv_norm_eps = 1.0e-6 : f64}
      : (tensor<?x16xbf16>, tensor<8x16xbf16>, tensor<8xbf16>, tensor<48x8xbf16>, tensor<20x16xbf16>,
         tensor<16xbf16>, tensor<72x16xbf16>,
         !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>, tensor<32x16xbf16>)
      -> (tensor<?x32xbf16>, !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>)
  return %a, %c1 : tensor<?x32xbf16>, !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>
}
func.func @mla_caller(%x: tensor<?x16xbf16>, %qa: tensor<8x16xbf16>, %qan: tensor<8xbf16>,
    %qb: tensor<48x8xbf16>, %kva: tensor<20x16xbf16>, %kvan: tensor<16xbf16>,
    %kvb: tensor<72x16xbf16>, %g: tensor<32x16xbf16>,
    %c: !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>) -> tensor<?x32xbf16> {
  %a, %c1 = func.call @mla_body(%x, %qa, %qan, %qb, %kva, %kvan, %kvb, %g, %c)
      : (tensor<?x16xbf16>, tensor<8x16xbf16>, tensor<8xbf16>, tensor<48x8xbf16>, tensor<20x16xbf16>,
         tensor<16xbf16>, tensor<72x16xbf16>, tensor<32x16xbf16>,
         !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>)
      -> (tensor<?x32xbf16>, !k3.mla_cache<latent_dim = 16, rope_dim = 4, element_type = bf16, page_size = 16>)
  return %a : tensor<?x32xbf16>
}

// -----

// LatentMoE with MXFP4 experts: each expert stack is a (packed, scale) pair
// of i8 tensors; absent optional parts are empty tensors with a false flag.
// CHECK-LABEL: func.func @moe
// CHECK-SAME: %[[W1P:[a-z0-9]+]]: tensor<4x32x16xi8>, %[[W1S:[a-z0-9]+]]: tensor<4x32x1xi8>
// CHECK: %[[EMPTY:.+]] = tensor.empty() : tensor<0x0xbf16>
// CHECK: call @k3k_latent_moe_mxfp4(
// CHECK-SAME: %false
// CHECK: func.func private @k3k_mxfp4_group(%{{.*}}: vector<16xi8>, %{{.*}}: i8, %{{.*}}: vector<32xf32>) -> f32
// CHECK: func.func private @k3k_experts_mxfp4(
func.func @moe(%x: tensor<?x32xbf16>, %wr: tensor<4x32xbf16>, %br: tensor<4xf32>,
    %w1: !k3.mxfp4<4x32x32>, %w3: !k3.mxfp4<4x32x32>, %w2: !k3.mxfp4<4x32x32>, %ln: tensor<32xbf16>) -> tensor<?x32xbf16> {
  %y = k3.latent_moe %x router %wr, %br experts %w1, %w3, %w2 norm %ln
      {num_experts = 4 : i64, top_k = 2 : i64, routed_scaling_factor = 1.0 : f64, renormalize = true,
       norm_eps = 1.0e-5 : f64, activation = #k3.glu_activation<situ>, beta = 4.0 : f64, linear_beta = 25.0 : f64}
      : (tensor<?x32xbf16>, tensor<4x32xbf16>, tensor<4xf32>, !k3.mxfp4<4x32x32>, !k3.mxfp4<4x32x32>,
         !k3.mxfp4<4x32x32>, tensor<32xbf16>) -> tensor<?x32xbf16>
  return %y : tensor<?x32xbf16>
}
