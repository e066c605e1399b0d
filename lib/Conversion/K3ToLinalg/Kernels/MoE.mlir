// Stable LatentMoE kernel (K3_SPEC §6, §7): sigmoid router with selection
// bias, top-k, renormalisation and scaling, the latent down projection,
// routed experts with MXFP4 weights dequantised on the fly (§7.2), the
// weighted sum, the latent RMSNorm, the up projection and shared experts.

// E8M0 biased exponent to 2^(s − 127); 255 is NaN (OCP MX v1.0).
func.func private @k3k_e8m0(%s: i8) -> f32 {
  %e = arith.extui %s : i8 to i32
  %c23 = arith.constant 23 : i32
  %zero = arith.constant 0 : i32
  %c255 = arith.constant 255 : i32
  %sub = arith.constant 4194304 : i32       // 0x00400000: 2^-127
  %nan = arith.constant 2143289344 : i32    // 0x7FC00000
  %bits0 = arith.shli %e, %c23 : i32
  %isz = arith.cmpi eq, %e, %zero : i32
  %isnan = arith.cmpi eq, %e, %c255 : i32
  %b1 = arith.select %isz, %sub, %bits0 : i32
  %b2 = arith.select %isnan, %nan, %b1 : i32
  %f = arith.bitcast %b2 : i32 to f32
  return %f : f32
}

// One MXFP4 group of a weight row against 32 activations (§7.2; OCP MX
// v1.0: 32 elements share one E8M0 scale): 16 packed bytes, the even
// element in the low nibble, dotted in element order, then scaled:
//   scale · Σ_j E2M1(code_j) · x_j.
// The scale is a power of two, so this is Σ_j (E2M1(code_j) · scale) · x_j
// with the f32 sum grouped by 32 (docs/NUMERICS.md, "MXFP4 groups"); the
// scale is decoded once per group, not once per element.
// Decoding without a table: a code's magnitude bits (e1 e0 m) at bits
// 11..9 of an f16 and its sign at bit 15 make the f16 E2M1(code) · 2^-14
// exactly (e = 0 lands on the f16 subnormals, which scale the same way).
// Word k of the group (elements 8k..8k+7, element 8k+i in nibble i) shifted
// right by 4j gives the f16 pair of elements 8k+j and 8k+j+4 with two
// masks and two shifts; the shuffle puts the 32 values back in element
// order and the 2^14 comes back on the group sum.
func.func private @k3k_mxfp4_group(%bytes: vector<16xi8>, %s: i8, %x: vector<32xf32>) -> f32 {
  %mag = arith.constant dense<458759> : vector<4xi32>      // 0x00070007
  %sgn = arith.constant dense<524296> : vector<4xi32>      // 0x00080008
  %s4 = arith.constant dense<4> : vector<4xi32>
  %s9 = arith.constant dense<9> : vector<4xi32>
  %s12 = arith.constant dense<12> : vector<4xi32>
  %two14 = arith.constant 16384.0 : f32
  %w0 = vector.bitcast %bytes : vector<16xi8> to vector<4xi32>
  %w1 = arith.shrui %w0, %s4 : vector<4xi32>
  %w2 = arith.shrui %w1, %s4 : vector<4xi32>
  %w3 = arith.shrui %w2, %s4 : vector<4xi32>
  %m0 = arith.andi %w0, %mag : vector<4xi32>
  %m1 = arith.andi %w1, %mag : vector<4xi32>
  %m2 = arith.andi %w2, %mag : vector<4xi32>
  %m3 = arith.andi %w3, %mag : vector<4xi32>
  %n0 = arith.andi %w0, %sgn : vector<4xi32>
  %n1 = arith.andi %w1, %sgn : vector<4xi32>
  %n2 = arith.andi %w2, %sgn : vector<4xi32>
  %n3 = arith.andi %w3, %sgn : vector<4xi32>
  %a0 = arith.shli %m0, %s9 : vector<4xi32>
  %a1 = arith.shli %m1, %s9 : vector<4xi32>
  %a2 = arith.shli %m2, %s9 : vector<4xi32>
  %a3 = arith.shli %m3, %s9 : vector<4xi32>
  %b0 = arith.shli %n0, %s12 : vector<4xi32>
  %b1 = arith.shli %n1, %s12 : vector<4xi32>
  %b2 = arith.shli %n2, %s12 : vector<4xi32>
  %b3 = arith.shli %n3, %s12 : vector<4xi32>
  %p0 = arith.ori %a0, %b0 : vector<4xi32>
  %p1 = arith.ori %a1, %b1 : vector<4xi32>
  %p2 = arith.ori %a2, %b2 : vector<4xi32>
  %p3 = arith.ori %a3, %b3 : vector<4xi32>
  %h0 = vector.bitcast %p0 : vector<4xi32> to vector<8xf16>
  %h1 = vector.bitcast %p1 : vector<4xi32> to vector<8xf16>
  %h2 = vector.bitcast %p2 : vector<4xi32> to vector<8xf16>
  %h3 = vector.bitcast %p3 : vector<4xi32> to vector<8xf16>
  %h01 = vector.shuffle %h0, %h1 [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] : vector<8xf16>, vector<8xf16>
  %h23 = vector.shuffle %h2, %h3 [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15] : vector<8xf16>, vector<8xf16>
  %h = vector.shuffle %h01, %h23 [0, 8, 16, 24, 1, 9, 17, 25, 2, 10, 18, 26, 3, 11, 19, 27, 4, 12, 20, 28, 5, 13, 21, 29, 6, 14, 22, 30, 7, 15, 23, 31] : vector<16xf16>, vector<16xf16>
  %v = arith.extf %h : vector<32xf16> to vector<32xf32>
  // Σ_j v_j x_j in element order, each step a fused multiply-add where
  // the target has one (`contract`): the product of an E2M1 value and a
  // bf16 activation is exact in f32, so this is the sum of the exact
  // products, rounded once per step, either way.
  %v0 = vector.extract %v[0] : f32 from vector<32xf32>
  %x0 = vector.extract %x[0] : f32 from vector<32xf32>
  %q0 = arith.mulf %v0, %x0 fastmath<contract> : f32
  %v1 = vector.extract %v[1] : f32 from vector<32xf32>
  %x1 = vector.extract %x[1] : f32 from vector<32xf32>
  %q1 = arith.mulf %v1, %x1 fastmath<contract> : f32
  %c1 = arith.addf %q0, %q1 fastmath<contract> : f32
  %v2 = vector.extract %v[2] : f32 from vector<32xf32>
  %x2 = vector.extract %x[2] : f32 from vector<32xf32>
  %q2 = arith.mulf %v2, %x2 fastmath<contract> : f32
  %c2 = arith.addf %c1, %q2 fastmath<contract> : f32
  %v3 = vector.extract %v[3] : f32 from vector<32xf32>
  %x3 = vector.extract %x[3] : f32 from vector<32xf32>
  %q3 = arith.mulf %v3, %x3 fastmath<contract> : f32
  %c3 = arith.addf %c2, %q3 fastmath<contract> : f32
  %v4 = vector.extract %v[4] : f32 from vector<32xf32>
  %x4 = vector.extract %x[4] : f32 from vector<32xf32>
  %q4 = arith.mulf %v4, %x4 fastmath<contract> : f32
  %c4 = arith.addf %c3, %q4 fastmath<contract> : f32
  %v5 = vector.extract %v[5] : f32 from vector<32xf32>
  %x5 = vector.extract %x[5] : f32 from vector<32xf32>
  %q5 = arith.mulf %v5, %x5 fastmath<contract> : f32
  %c5 = arith.addf %c4, %q5 fastmath<contract> : f32
  %v6 = vector.extract %v[6] : f32 from vector<32xf32>
  %x6 = vector.extract %x[6] : f32 from vector<32xf32>
  %q6 = arith.mulf %v6, %x6 fastmath<contract> : f32
  %c6 = arith.addf %c5, %q6 fastmath<contract> : f32
  %v7 = vector.extract %v[7] : f32 from vector<32xf32>
  %x7 = vector.extract %x[7] : f32 from vector<32xf32>
  %q7 = arith.mulf %v7, %x7 fastmath<contract> : f32
  %c7 = arith.addf %c6, %q7 fastmath<contract> : f32
  %v8 = vector.extract %v[8] : f32 from vector<32xf32>
  %x8 = vector.extract %x[8] : f32 from vector<32xf32>
  %q8 = arith.mulf %v8, %x8 fastmath<contract> : f32
  %c8 = arith.addf %c7, %q8 fastmath<contract> : f32
  %v9 = vector.extract %v[9] : f32 from vector<32xf32>
  %x9 = vector.extract %x[9] : f32 from vector<32xf32>
  %q9 = arith.mulf %v9, %x9 fastmath<contract> : f32
  %c9 = arith.addf %c8, %q9 fastmath<contract> : f32
  %v10 = vector.extract %v[10] : f32 from vector<32xf32>
  %x10 = vector.extract %x[10] : f32 from vector<32xf32>
  %q10 = arith.mulf %v10, %x10 fastmath<contract> : f32
  %c10 = arith.addf %c9, %q10 fastmath<contract> : f32
  %v11 = vector.extract %v[11] : f32 from vector<32xf32>
  %x11 = vector.extract %x[11] : f32 from vector<32xf32>
  %q11 = arith.mulf %v11, %x11 fastmath<contract> : f32
  %c11 = arith.addf %c10, %q11 fastmath<contract> : f32
  %v12 = vector.extract %v[12] : f32 from vector<32xf32>
  %x12 = vector.extract %x[12] : f32 from vector<32xf32>
  %q12 = arith.mulf %v12, %x12 fastmath<contract> : f32
  %c12 = arith.addf %c11, %q12 fastmath<contract> : f32
  %v13 = vector.extract %v[13] : f32 from vector<32xf32>
  %x13 = vector.extract %x[13] : f32 from vector<32xf32>
  %q13 = arith.mulf %v13, %x13 fastmath<contract> : f32
  %c13 = arith.addf %c12, %q13 fastmath<contract> : f32
  %v14 = vector.extract %v[14] : f32 from vector<32xf32>
  %x14 = vector.extract %x[14] : f32 from vector<32xf32>
  %q14 = arith.mulf %v14, %x14 fastmath<contract> : f32
  %c14 = arith.addf %c13, %q14 fastmath<contract> : f32
  %v15 = vector.extract %v[15] : f32 from vector<32xf32>
  %x15 = vector.extract %x[15] : f32 from vector<32xf32>
  %q15 = arith.mulf %v15, %x15 fastmath<contract> : f32
  %c15 = arith.addf %c14, %q15 fastmath<contract> : f32
  %v16 = vector.extract %v[16] : f32 from vector<32xf32>
  %x16 = vector.extract %x[16] : f32 from vector<32xf32>
  %q16 = arith.mulf %v16, %x16 fastmath<contract> : f32
  %c16 = arith.addf %c15, %q16 fastmath<contract> : f32
  %v17 = vector.extract %v[17] : f32 from vector<32xf32>
  %x17 = vector.extract %x[17] : f32 from vector<32xf32>
  %q17 = arith.mulf %v17, %x17 fastmath<contract> : f32
  %c17 = arith.addf %c16, %q17 fastmath<contract> : f32
  %v18 = vector.extract %v[18] : f32 from vector<32xf32>
  %x18 = vector.extract %x[18] : f32 from vector<32xf32>
  %q18 = arith.mulf %v18, %x18 fastmath<contract> : f32
  %c18 = arith.addf %c17, %q18 fastmath<contract> : f32
  %v19 = vector.extract %v[19] : f32 from vector<32xf32>
  %x19 = vector.extract %x[19] : f32 from vector<32xf32>
  %q19 = arith.mulf %v19, %x19 fastmath<contract> : f32
  %c19 = arith.addf %c18, %q19 fastmath<contract> : f32
  %v20 = vector.extract %v[20] : f32 from vector<32xf32>
  %x20 = vector.extract %x[20] : f32 from vector<32xf32>
  %q20 = arith.mulf %v20, %x20 fastmath<contract> : f32
  %c20 = arith.addf %c19, %q20 fastmath<contract> : f32
  %v21 = vector.extract %v[21] : f32 from vector<32xf32>
  %x21 = vector.extract %x[21] : f32 from vector<32xf32>
  %q21 = arith.mulf %v21, %x21 fastmath<contract> : f32
  %c21 = arith.addf %c20, %q21 fastmath<contract> : f32
  %v22 = vector.extract %v[22] : f32 from vector<32xf32>
  %x22 = vector.extract %x[22] : f32 from vector<32xf32>
  %q22 = arith.mulf %v22, %x22 fastmath<contract> : f32
  %c22 = arith.addf %c21, %q22 fastmath<contract> : f32
  %v23 = vector.extract %v[23] : f32 from vector<32xf32>
  %x23 = vector.extract %x[23] : f32 from vector<32xf32>
  %q23 = arith.mulf %v23, %x23 fastmath<contract> : f32
  %c23 = arith.addf %c22, %q23 fastmath<contract> : f32
  %v24 = vector.extract %v[24] : f32 from vector<32xf32>
  %x24 = vector.extract %x[24] : f32 from vector<32xf32>
  %q24 = arith.mulf %v24, %x24 fastmath<contract> : f32
  %c24 = arith.addf %c23, %q24 fastmath<contract> : f32
  %v25 = vector.extract %v[25] : f32 from vector<32xf32>
  %x25 = vector.extract %x[25] : f32 from vector<32xf32>
  %q25 = arith.mulf %v25, %x25 fastmath<contract> : f32
  %c25 = arith.addf %c24, %q25 fastmath<contract> : f32
  %v26 = vector.extract %v[26] : f32 from vector<32xf32>
  %x26 = vector.extract %x[26] : f32 from vector<32xf32>
  %q26 = arith.mulf %v26, %x26 fastmath<contract> : f32
  %c26 = arith.addf %c25, %q26 fastmath<contract> : f32
  %v27 = vector.extract %v[27] : f32 from vector<32xf32>
  %x27 = vector.extract %x[27] : f32 from vector<32xf32>
  %q27 = arith.mulf %v27, %x27 fastmath<contract> : f32
  %c27 = arith.addf %c26, %q27 fastmath<contract> : f32
  %v28 = vector.extract %v[28] : f32 from vector<32xf32>
  %x28 = vector.extract %x[28] : f32 from vector<32xf32>
  %q28 = arith.mulf %v28, %x28 fastmath<contract> : f32
  %c28 = arith.addf %c27, %q28 fastmath<contract> : f32
  %v29 = vector.extract %v[29] : f32 from vector<32xf32>
  %x29 = vector.extract %x[29] : f32 from vector<32xf32>
  %q29 = arith.mulf %v29, %x29 fastmath<contract> : f32
  %c29 = arith.addf %c28, %q29 fastmath<contract> : f32
  %v30 = vector.extract %v[30] : f32 from vector<32xf32>
  %x30 = vector.extract %x[30] : f32 from vector<32xf32>
  %q30 = arith.mulf %v30, %x30 fastmath<contract> : f32
  %c30 = arith.addf %c29, %q30 fastmath<contract> : f32
  %v31 = vector.extract %v[31] : f32 from vector<32xf32>
  %x31 = vector.extract %x[31] : f32 from vector<32xf32>
  %q31 = arith.mulf %v31, %x31 fastmath<contract> : f32
  %c31 = arith.addf %c30, %q31 fastmath<contract> : f32
  %up = arith.mulf %c31, %two14 : f32
  %sf = func.call @k3k_e8m0(%s) : (i8) -> f32
  %r = arith.mulf %up, %sf : f32
  return %r : f32
}

// σ of every element of %out, in place.
func.func private @k3k_sigmoid_rows(%out: memref<?x?xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %t = memref.dim %out, %c0 : memref<?x?xf32>
  %n = memref.dim %out, %c1 : memref<?x?xf32>
  scf.parallel (%i, %e) = (%c0, %c0) to (%t, %n) step (%c1, %c1) {
    %l = memref.load %out[%i, %e] : memref<?x?xf32>
    %sg = func.call @k3k_sigmoid(%l) : (f32) -> f32
    memref.store %sg, %out[%i, %e] : memref<?x?xf32>
  }
  return
}

// The scores of 16 tokens and more (or none).
func.func private @k3k_router_many(%x: tensor<?x?x!act>, %w: tensor<?x?xbf16>, %out: memref<?x?xf32>) {
  func.call @k3k_matmul_many(%x, %w, %out) : (tensor<?x?x!act>, tensor<?x?xbf16>, memref<?x?xf32>) -> ()
  func.call @k3k_sigmoid_rows(%out) : (memref<?x?xf32>) -> ()
  return
}

// The scores of 1 to 15 tokens (`k3.skinny_matmul`, as @k3k_matmul_few:
// on a GPU each sum's sigmoid as it is stored).
func.func private @k3k_router_few(%x: tensor<?x?x!act>, %w: tensor<?x?xbf16>, %out: memref<?x?xf32>)
    attributes {k3.skinny_matmul = {out = @k3k_sigmoid}} {
  func.call @k3k_matmul_few(%x, %w, %out) : (tensor<?x?x!act>, tensor<?x?xbf16>, memref<?x?xf32>) -> ()
  func.call @k3k_sigmoid_rows(%out) : (memref<?x?xf32>) -> ()
  return
}

// The router's scores s = σ(x Wᵀ) (§6.1: the f32 sum of each logit, then
// the sigmoid) and the selection of every token's top-k experts by the
// keys s + b (the bias only selects) into %idx and %wts [T, k]: weights
// ω = s / (Σ_sel s + 1e-20) · scaling when `renorm`, and the (token,
// slot) entries grouped by expert into %order and %rank [T · k] for the
// experts' kernels (@k3k_group_by_expert_into). A product function with the routing's operands after
// (x, W): k3-group-calls joins it to a MoE layer's other products of x,
// and for a decode step k3-gpu-skinny-mma's kernel for all of them also
// routes (`route`).
func.func private @k3k_router_route(%x: tensor<?x?x!act>, %w: tensor<?x?xbf16>, %bias: tensor<?xf32>,
    %renorm: i1, %scaling: f32, %idx: memref<?x?xi64>, %wts: memref<?x?xf32>,
    %order: memref<?xi64>, %rank: memref<?xi64>) -> tensor<?x?xf32>
    attributes {k3.product_group = {few = @k3k_router_route_few, many = @k3k_router_route_many,
                                    few_tokens = @k3k_few_tokens}} {
  %c0 = arith.constant 0 : index
  %t = tensor.dim %x, %c0 : tensor<?x?x!act>
  %n = tensor.dim %w, %c0 : tensor<?x?xbf16>
  %out = memref.alloc(%t, %n) : memref<?x?xf32>
  %few = func.call @k3k_few_tokens(%t) : (index) -> i1
  scf.if %few {
    func.call @k3k_router_route_few(%x, %w, %out, %bias, %renorm, %scaling, %idx, %wts, %order, %rank)
        : (tensor<?x?x!act>, tensor<?x?xbf16>, memref<?x?xf32>, tensor<?xf32>, i1, f32, memref<?x?xi64>, memref<?x?xf32>, memref<?xi64>, memref<?xi64>) -> ()
  } else {
    func.call @k3k_router_route_many(%x, %w, %out, %bias, %renorm, %scaling, %idx, %wts, %order, %rank)
        : (tensor<?x?x!act>, tensor<?x?xbf16>, memref<?x?xf32>, tensor<?xf32>, i1, f32, memref<?x?xi64>, memref<?x?xf32>, memref<?xi64>, memref<?xi64>) -> ()
  }
  %r = bufferization.to_tensor %out restrict : memref<?x?xf32> to tensor<?x?xf32>
  return %r : tensor<?x?xf32>
}

// 16 tokens and more (or none): the scores' kernels, then the routing's.
func.func private @k3k_router_route_many(%x: tensor<?x?x!act>, %w: tensor<?x?xbf16>, %out: memref<?x?xf32>,
    %bias: tensor<?xf32>, %renorm: i1, %scaling: f32, %idx: memref<?x?xi64>, %wts: memref<?x?xf32>,
    %order: memref<?xi64>, %rank: memref<?xi64>) {
  func.call @k3k_router_many(%x, %w, %out) : (tensor<?x?x!act>, tensor<?x?xbf16>, memref<?x?xf32>) -> ()
  %s = bufferization.to_tensor %out restrict : memref<?x?xf32> to tensor<?x?xf32>
  func.call @k3k_route_rows(%s, %bias, %renorm, %scaling, %idx, %wts)
      : (tensor<?x?xf32>, tensor<?xf32>, i1, f32, memref<?x?xi64>, memref<?x?xf32>) -> ()
  func.call @k3k_group_by_expert_into(%idx, %order, %rank) : (memref<?x?xi64>, memref<?xi64>, memref<?xi64>) -> ()
  return
}

// 1 to 15 tokens (`k3.skinny_matmul` with `route`: on a GPU the scores'
// kernel's last blocks select the experts as k3-gpu-route's kernel does,
// and the last of them groups the entries).
func.func private @k3k_router_route_few(%x: tensor<?x?x!act>, %w: tensor<?x?xbf16>, %out: memref<?x?xf32>,
    %bias: tensor<?xf32>, %renorm: i1, %scaling: f32, %idx: memref<?x?xi64>, %wts: memref<?x?xf32>,
    %order: memref<?xi64>, %rank: memref<?xi64>)
    attributes {k3.skinny_matmul = {out = @k3k_sigmoid, route = true}} {
  func.call @k3k_router_few(%x, %w, %out) : (tensor<?x?x!act>, tensor<?x?xbf16>, memref<?x?xf32>) -> ()
  %s = bufferization.to_tensor %out restrict : memref<?x?xf32> to tensor<?x?xf32>
  func.call @k3k_route_rows(%s, %bias, %renorm, %scaling, %idx, %wts)
      : (tensor<?x?xf32>, tensor<?xf32>, i1, f32, memref<?x?xi64>, memref<?x?xf32>) -> ()
  func.call @k3k_group_by_expert_into(%idx, %order, %rank) : (memref<?x?xi64>, memref<?xi64>, memref<?xi64>) -> ()
  return
}

// Routing (§6.1) in parallel: an expert's slot is its rank, the number of
// experts before it in the keys' order (descending; equal keys by expert
// index), as picking the best remaining expert k times would give them,
// counted by one loop (a warp's lanes split it on a GPU) that makes each
// key as it reads it. A NaN key takes no rank; the slots past the ranked
// experts hold expert 0 with weight 0, each written by the NaN key that as
// many NaN keys precede.
// Into %idx and %wts [T, k], in the order of the keys (`k3.route`: on a
// GPU, k3-gpu-route gives each token one block that picks the best
// remaining expert k times and scales the weights, one kernel; the body
// below is what runs elsewhere).
func.func private @k3k_route_rows(%scores: tensor<?x?xf32>, %bias: tensor<?xf32>, %renorm: i1, %scaling: f32,
                                  %idx: memref<?x?xi64>, %wts: memref<?x?xf32>)
    attributes {k3.route} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %tiny = arith.constant 1.0e-20 : f32
  %zero64 = arith.constant 0 : i64
  %t = tensor.dim %scores, %c0 : tensor<?x?xf32>
  %ne = tensor.dim %scores, %c1 : tensor<?x?xf32>
  %topk = memref.dim %idx, %c1 : memref<?x?xi64>
  scf.parallel (%i, %e) = (%c0, %c0) to (%t, %ne) step (%c1, %c1) {
    %sg = tensor.extract %scores[%i, %e] : tensor<?x?xf32>
    %b = tensor.extract %bias[%e] : tensor<?xf32>
    %key = arith.addf %sg, %b : f32
    // Two counts in f32 (exact below 2^24 experts): for a key that is a
    // number, the keys before it (a NaN key is never before one); for a NaN
    // key, the NaN keys of lower experts. And the NaN keys.
    %valid = arith.cmpf ord, %key, %key : f32
    %countf, %nanf = scf.for %o = %c0 to %ne step %c1
        iter_args(%r = %zero, %m = %zero) -> (f32, f32) {
      %so = tensor.extract %scores[%i, %o] : tensor<?x?xf32>
      %bo = tensor.extract %bias[%o] : tensor<?xf32>
      %ko = arith.addf %so, %bo : f32
      %gt = arith.cmpf ogt, %ko, %key : f32
      %eq = arith.cmpf oeq, %ko, %key : f32
      %lower = arith.cmpi ult, %o, %e : index
      %tie = arith.andi %eq, %lower : i1
      %before = arith.ori %gt, %tie : i1
      %nan = arith.cmpf uno, %ko, %ko : f32
      %nanlow = arith.andi %nan, %lower : i1
      %counts = arith.select %valid, %before, %nanlow : i1
      %inc = arith.select %counts, %one, %zero : f32
      %r2 = arith.addf %r, %inc : f32
      %ninc = arith.select %nan, %one, %zero : f32
      %m2 = arith.addf %m, %ninc : f32
      scf.yield %r2, %m2 : f32, f32
    }
    %count32 = arith.fptoui %countf : f32 to i32
    %count = arith.index_cast %count32 : i32 to index
    %nan32 = arith.fptoui %nanf : f32 to i32
    %nans = arith.index_cast %nan32 : i32 to index
    // A NaN key's slot: past the ne - nans ranked experts.
    %ranked = arith.subi %ne, %nans : index
    %past = arith.addi %ranked, %count : index
    %slot = arith.select %valid, %count, %past : index
    %in = arith.cmpi ult, %slot, %topk : index
    scf.if %in {
      %e64 = arith.index_cast %e : index to i64
      %ev = arith.select %valid, %e64, %zero64 : i64
      %sv = arith.select %valid, %sg, %zero : f32
      memref.store %ev, %idx[%i, %slot] : memref<?x?xi64>
      memref.store %sv, %wts[%i, %slot] : memref<?x?xf32>
    }
  }
  scf.parallel (%i) = (%c0) to (%t) step (%c1) {
    %total = scf.for %s = %c0 to %topk step %c1 iter_args(%tot = %zero) -> (f32) {
      %w = memref.load %wts[%i, %s] : memref<?x?xf32>
      %tot2 = arith.addf %tot, %w : f32
      scf.yield %tot2 : f32
    }
    %den = arith.addf %total, %tiny : f32
    scf.for %s = %c0 to %topk step %c1 {
      %w = memref.load %wts[%i, %s] : memref<?x?xf32>
      %wn = scf.if %renorm -> (f32) {
        %q = arith.divf %w, %den : f32
        scf.yield %q : f32
      } else {
        scf.yield %w : f32
      }
      %ws = arith.mulf %wn, %scaling : f32
      memref.store %ws, %wts[%i, %s] : memref<?x?xf32>
    }
  }
  return
}

// The (token, slot) entries of a step grouped by expert, into order and
// rank [T · topk] (made with the routing: @k3k_router_route): order[g] =
// t·topk + s, experts ascending, entries in order within one expert. The
// expert stages below walk the entries in this order, so that the warps of a
// block and neighbouring blocks work on one expert's weight rows together
// (read from memory once per group instead of once per token in a prefill);
// each output element is computed exactly as before. Parallel over entries:
// entry q goes to position #{q' : e_q' < e_q, or e_q' = e_q and q' < q},
// a count (in f32, exact below 2^24 entries) that a warp splits. rank[p] is
// the second term, the entry's place among its expert's: the expert stages'
// tensor-core kernels cut an expert's entries into segments of 8 by it.
func.func private @k3k_group_by_expert_into(%idx: memref<?x?xi64>, %order: memref<?xi64>, %rank: memref<?xi64>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %t = memref.dim %idx, %c0 : memref<?x?xi64>
  %topk = memref.dim %idx, %c1 : memref<?x?xi64>
  %nq = arith.muli %t, %topk : index
  scf.parallel (%q) = (%c0) to (%nq) step (%c1) {
    %qi = arith.divui %q, %topk : index
    %qs = arith.remui %q, %topk : index
    %eq = memref.load %idx[%qi, %qs] : memref<?x?xi64>
    %below, %ties = scf.for %r = %c0 to %nq step %c1 iter_args(%a = %zero, %b = %zero) -> (f32, f32) {
      %i = arith.divui %r, %topk : index
      %s = arith.remui %r, %topk : index
      %v = memref.load %idx[%i, %s] : memref<?x?xi64>
      %lt = arith.cmpi slt, %v, %eq : i64
      %same = arith.cmpi eq, %v, %eq : i64
      %earlier = arith.cmpi ult, %r, %q : index
      %tie = arith.andi %same, %earlier : i1
      %inc = arith.select %lt, %one, %zero : f32
      %tinc = arith.select %tie, %one, %zero : f32
      %a2 = arith.addf %a, %inc : f32
      %b2 = arith.addf %b, %tinc : f32
      scf.yield %a2, %b2 : f32, f32
    }
    %lower = arith.fptoui %below : f32 to i64
    %r64 = arith.fptoui %ties : f32 to i64
    %pos = arith.addi %lower, %r64 : i64
    %p = arith.index_cast %pos : i64 to index
    %q64 = arith.index_cast %q : index to i64
    memref.store %q64, %order[%p] : memref<?xi64>
    memref.store %r64, %rank[%p] : memref<?xi64>
  }
  return
}

// The two MXFP4 expert stages below run over the (token, slot) entries in
// expert order (`order` and `rank`, from @k3k_group_by_expert_into; `rank` is
// only for the tensor-core kernels' segments). Each is a function of
// its own that `k3.mxfp4_experts` describes to k3-gpu-experts-mma, which
// gives it a tensor-core kernel on the GPU: the attribute names the stage's
// scale decoding and the function that makes an output from the f32 row
// sums (one per weight matrix, then the stage's scalar arguments), so the
// math of both kernels is written once, here.

// h[t,s,n] from the rounded sums of W1 and W3 rows (§6.2).
func.func private @k3k_experts_h(%g: f32, %u: f32, %silu: i1, %b1: f32, %b2: f32) -> !act {
  %gr = func.call @k3k_round(%g) : (f32) -> f32
  %ur = func.call @k3k_round(%u) : (f32) -> f32
  %h = func.call @k3k_glu_act(%gr, %ur, %silu, %b1, %b2) : (f32, f32, i1, f32, f32) -> f32
  %hn = func.call @k3k_narrow(%h) : (f32) -> !act
  return %hn : !act
}

// y[t,s,j], rounded and kept in f32 for the weighted sum (§6.2).
func.func private @k3k_experts_y(%y: f32) -> f32 {
  %r = func.call @k3k_round(%y) : (f32) -> f32
  return %r : f32
}

//   h[t,s,n] = round(act(round(W1_e ξ_t), round(W3_e ξ_t)))   (n, entry) in parallel
func.func private @k3k_experts_up_mxfp4(%xi: tensor<?x?x!act>, %idx: memref<?x?xi64>, %order: memref<?xi64>, %rank: memref<?xi64>,
                                        %w1p: tensor<?x?x?xi8>, %w1s: tensor<?x?x?xi8>,
                                        %w3p: tensor<?x?x?xi8>, %w3s: tensor<?x?x?xi8>,
                                        %silu: i1, %b1: f32, %b2: f32, %hid: memref<?x?x?x!act>)
    attributes {k3.mxfp4_experts = {scale = @k3k_e8m0, out = @k3k_experts_h}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %c32 = arith.constant 32 : index
  %zero = arith.constant 0.0 : f32
  %pad = arith.constant 0.0 : !act
  %pad8 = arith.constant 0 : i8
  %l = tensor.dim %xi, %c1 : tensor<?x?x!act>
  %ni = tensor.dim %w1p, %c1 : tensor<?x?x?xi8>
  %nq = memref.dim %order, %c0 : memref<?xi64>
  %topk = memref.dim %idx, %c1 : memref<?x?xi64>
  // MXFP4 widths are multiples of the 32-element group (the k3 verifier).
  %lg = arith.divui %l, %c32 : index
  scf.parallel (%n, %q) = (%c0, %c0) to (%ni, %nq) step (%c1, %c1) {
    %q64 = memref.load %order[%q] : memref<?xi64>
    %qi = arith.index_cast %q64 : i64 to index
    %i = arith.divui %qi, %topk : index
    %s = arith.remui %qi, %topk : index
    %e64 = memref.load %idx[%i, %s] : memref<?x?xi64>
    %e = arith.index_cast %e64 : i64 to index
    // Group by group (32 elements), in element order; x read 32 at a time.
    %g, %u = scf.for %k = %c0 to %lg step %c1 iter_args(%ga = %zero, %ua = %zero) -> (f32, f32) {
      %k0 = arith.muli %k, %c32 : index
      %b0 = arith.muli %k, %c16 : index
      %xv = vector.transfer_read %xi[%i, %k0], %pad {in_bounds = [true]} : tensor<?x?x!act>, vector<32x!act>
      %xf = func.call @k3k_widen32(%xv) : (vector<32x!act>) -> vector<32xf32>
      %pa = vector.transfer_read %w1p[%e, %n, %b0], %pad8 {in_bounds = [true]} : tensor<?x?x?xi8>, vector<16xi8>
      %sa = tensor.extract %w1s[%e, %n, %k] : tensor<?x?x?xi8>
      %pb = vector.transfer_read %w3p[%e, %n, %b0], %pad8 {in_bounds = [true]} : tensor<?x?x?xi8>, vector<16xi8>
      %sb = tensor.extract %w3s[%e, %n, %k] : tensor<?x?x?xi8>
      %ta = func.call @k3k_mxfp4_group(%pa, %sa, %xf) : (vector<16xi8>, i8, vector<32xf32>) -> f32
      %tb = func.call @k3k_mxfp4_group(%pb, %sb, %xf) : (vector<16xi8>, i8, vector<32xf32>) -> f32
      %ga2 = arith.addf %ga, %ta : f32
      %ua2 = arith.addf %ua, %tb : f32
      scf.yield %ga2, %ua2 : f32, f32
    }
    %hn = func.call @k3k_experts_h(%g, %u, %silu, %b1, %b2) : (f32, f32, i1, f32, f32) -> !act
    memref.store %hn, %hid[%i, %s, %n] : memref<?x?x?x!act>
  }
  return
}

//   y[t,s,j] = round(W2_e h[t,s])                             (j, entry) in parallel
// Two output rows (j, j + L/2) per entry and iteration: each h group is
// read once for both.
func.func private @k3k_experts_down_mxfp4(%hid: memref<?x?x?x!act>, %idx: memref<?x?xi64>, %order: memref<?xi64>, %rank: memref<?xi64>,
                                          %w2p: tensor<?x?x?xi8>, %w2s: tensor<?x?x?xi8>, %ys: memref<?x?x?xf32>)
    attributes {k3.mxfp4_experts = {scale = @k3k_e8m0, out = @k3k_experts_y}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c16 = arith.constant 16 : index
  %c32 = arith.constant 32 : index
  %zero = arith.constant 0.0 : f32
  %pad = arith.constant 0.0 : !act
  %pad8 = arith.constant 0 : i8
  %l = tensor.dim %w2p, %c1 : tensor<?x?x?xi8>
  %ni = memref.dim %hid, %c2 : memref<?x?x?x!act>
  %nq = memref.dim %order, %c0 : memref<?xi64>
  %topk = memref.dim %idx, %c1 : memref<?x?xi64>
  %ig = arith.divui %ni, %c32 : index
  %lh = arith.divui %l, %c2 : index
  scf.parallel (%j, %q) = (%c0, %c0) to (%lh, %nq) step (%c1, %c1) {
    %q64 = memref.load %order[%q] : memref<?xi64>
    %qi = arith.index_cast %q64 : i64 to index
    %i = arith.divui %qi, %topk : index
    %s = arith.remui %qi, %topk : index
    %e64 = memref.load %idx[%i, %s] : memref<?x?xi64>
    %e = arith.index_cast %e64 : i64 to index
    %j2 = arith.addi %j, %lh : index
    %y, %y2 = scf.for %n = %c0 to %ig step %c1 iter_args(%a = %zero, %a1 = %zero) -> (f32, f32) {
      %n0 = arith.muli %n, %c32 : index
      %b0 = arith.muli %n, %c16 : index
      %hv = vector.transfer_read %hid[%i, %s, %n0], %pad {in_bounds = [true]} : memref<?x?x?x!act>, vector<32x!act>
      %hf = func.call @k3k_widen32(%hv) : (vector<32x!act>) -> vector<32xf32>
      %pw = vector.transfer_read %w2p[%e, %j, %b0], %pad8 {in_bounds = [true]} : tensor<?x?x?xi8>, vector<16xi8>
      %sw = tensor.extract %w2s[%e, %j, %n] : tensor<?x?x?xi8>
      %pw2 = vector.transfer_read %w2p[%e, %j2, %b0], %pad8 {in_bounds = [true]} : tensor<?x?x?xi8>, vector<16xi8>
      %sw2 = tensor.extract %w2s[%e, %j2, %n] : tensor<?x?x?xi8>
      %tw = func.call @k3k_mxfp4_group(%pw, %sw, %hf) : (vector<16xi8>, i8, vector<32xf32>) -> f32
      %tw2 = func.call @k3k_mxfp4_group(%pw2, %sw2, %hf) : (vector<16xi8>, i8, vector<32xf32>) -> f32
      %a2 = arith.addf %a, %tw : f32
      %a3 = arith.addf %a1, %tw2 : f32
      scf.yield %a2, %a3 : f32, f32
    }
    %yr = func.call @k3k_experts_y(%y) : (f32) -> f32
    %yr2 = func.call @k3k_experts_y(%y2) : (f32) -> f32
    memref.store %yr, %ys[%i, %s, %j] : memref<?x?x?xf32>
    memref.store %yr2, %ys[%i, %s, %j2] : memref<?x?x?xf32>
  }
  return
}

// The selected experts in latent space (§6.2), with MXFP4 experts dequantised on the fly (§7.2): w1, w3 [E, I, L], w2 [E, L, I]:
//   h[t,s] = round(act(round(W1_e ξ_t), round(W3_e ξ_t)))   (n, entry) in parallel
//   y[t,s] = round(W2_e h[t,s])                             (j, entry) in parallel
// returning y [T, topk, L]; @k3k_latent_up makes r from it.
func.func private @k3k_experts_mxfp4(%xi: tensor<?x?x!act>, %idx: memref<?x?xi64>,
                                     %order: memref<?xi64>, %rank: memref<?xi64>,
                                     %w1p: tensor<?x?x?xi8>, %w1s: tensor<?x?x?xi8>,
                                     %w3p: tensor<?x?x?xi8>, %w3s: tensor<?x?x?xi8>,
                                     %w2p: tensor<?x?x?xi8>, %w2s: tensor<?x?x?xi8>,
                                     %silu: i1, %b1: f32, %b2: f32) -> memref<?x?x?xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %t = tensor.dim %xi, %c0 : tensor<?x?x!act>
  %l = tensor.dim %xi, %c1 : tensor<?x?x!act>
  %ni = tensor.dim %w1p, %c1 : tensor<?x?x?xi8>
  %topk = memref.dim %idx, %c1 : memref<?x?xi64>
  // h is rounded to the activation type, so it is stored in it.
  %hid = memref.alloc(%t, %topk, %ni) : memref<?x?x?x!act>
  func.call @k3k_experts_up_mxfp4(%xi, %idx, %order, %rank, %w1p, %w1s, %w3p, %w3s, %silu, %b1, %b2, %hid) : (tensor<?x?x!act>, memref<?x?xi64>, memref<?xi64>, memref<?xi64>, tensor<?x?x?xi8>, tensor<?x?x?xi8>, tensor<?x?x?xi8>, tensor<?x?x?xi8>, i1, f32, f32, memref<?x?x?x!act>) -> ()
  %ys = memref.alloc(%t, %topk, %l) : memref<?x?x?xf32>
  func.call @k3k_experts_down_mxfp4(%hid, %idx, %order, %rank, %w2p, %w2s, %ys) : (memref<?x?x?x!act>, memref<?x?xi64>, memref<?xi64>, memref<?xi64>, tensor<?x?x?xi8>, tensor<?x?x?xi8>, memref<?x?x?xf32>) -> ()
  return %ys : memref<?x?x?xf32>
}

// The selected experts in latent space (§6.2), with bf16 experts: w1, w3 [E, I, L], w2 [E, L, I]:
//   h[t,s] = round(act(round(W1_e ξ_t), round(W3_e ξ_t)))   (n, entry) in parallel
//   y[t,s] = round(W2_e h[t,s])                             (j, entry) in parallel
// returning y [T, topk, L]; @k3k_latent_up makes r from it.
func.func private @k3k_experts_bf16(%xi: tensor<?x?x!act>, %idx: memref<?x?xi64>,
                                     %order: memref<?xi64>, %rank: memref<?xi64>,
                                     %w1: tensor<?x?x?xbf16>, %w3: tensor<?x?x?xbf16>, %w2: tensor<?x?x?xbf16>,
                                     %silu: i1, %b1: f32, %b2: f32) -> memref<?x?x?xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0.0 : f32
  %t = tensor.dim %xi, %c0 : tensor<?x?x!act>
  %l = tensor.dim %xi, %c1 : tensor<?x?x!act>
  %ni = tensor.dim %w1, %c1 : tensor<?x?x?xbf16>
  %topk = memref.dim %idx, %c1 : memref<?x?xi64>
  %nq = arith.muli %t, %topk : index
  %hid = memref.alloc(%t, %topk, %ni) : memref<?x?x?xf32>
  scf.parallel (%n, %q) = (%c0, %c0) to (%ni, %nq) step (%c1, %c1) {
    %q64 = memref.load %order[%q] : memref<?xi64>
    %qi = arith.index_cast %q64 : i64 to index
    %i = arith.divui %qi, %topk : index
    %s = arith.remui %qi, %topk : index
    %e64 = memref.load %idx[%i, %s] : memref<?x?xi64>
    %e = arith.index_cast %e64 : i64 to index
    %g, %u = scf.for %k = %c0 to %l step %c1 iter_args(%ga = %zero, %ua = %zero) -> (f32, f32) {
      %xv = tensor.extract %xi[%i, %k] : tensor<?x?x!act>
      %xf = func.call @k3k_widen(%xv) : (!act) -> f32
      %av = tensor.extract %w1[%e, %n, %k] : tensor<?x?x?xbf16>
            %a = arith.extf %av : bf16 to f32
      %bv = tensor.extract %w3[%e, %n, %k] : tensor<?x?x?xbf16>
            %b = arith.extf %bv : bf16 to f32
      %pa = arith.mulf %a, %xf : f32
      %pb = arith.mulf %b, %xf : f32
      %ga2 = arith.addf %ga, %pa : f32
      %ua2 = arith.addf %ua, %pb : f32
      scf.yield %ga2, %ua2 : f32, f32
    }
    %gr = func.call @k3k_round(%g) : (f32) -> f32
    %ur = func.call @k3k_round(%u) : (f32) -> f32
    %h = func.call @k3k_glu_act(%gr, %ur, %silu, %b1, %b2) : (f32, f32, i1, f32, f32) -> f32
    %hr = func.call @k3k_round(%h) : (f32) -> f32
    memref.store %hr, %hid[%i, %s, %n] : memref<?x?x?xf32>
  }
  %ys = memref.alloc(%t, %topk, %l) : memref<?x?x?xf32>
  scf.parallel (%j, %q) = (%c0, %c0) to (%l, %nq) step (%c1, %c1) {
    %q64 = memref.load %order[%q] : memref<?xi64>
    %qi = arith.index_cast %q64 : i64 to index
    %i = arith.divui %qi, %topk : index
    %s = arith.remui %qi, %topk : index
    %e64 = memref.load %idx[%i, %s] : memref<?x?xi64>
    %e = arith.index_cast %e64 : i64 to index
    %y = scf.for %n = %c0 to %ni step %c1 iter_args(%a = %zero) -> (f32) {
      %hv = memref.load %hid[%i, %s, %n] : memref<?x?x?xf32>
      %wb = tensor.extract %w2[%e, %j, %n] : tensor<?x?x?xbf16>
          %wv = arith.extf %wb : bf16 to f32
      %p = arith.mulf %wv, %hv : f32
      %a2 = arith.addf %a, %p : f32
      scf.yield %a2 : f32
    }
    %yr = func.call @k3k_round(%y) : (f32) -> f32
    memref.store %yr, %ys[%i, %s, %j] : memref<?x?x?xf32>
  }
  return %ys : memref<?x?x?xf32>
}

// The experts' weighted sum (§6.2): r[t] = round(Σ_s ω[t,s] y[t,s]), the
// entries of a token in slot order.
func.func private @k3k_experts_combine(%ys: memref<?x?x?xf32>, %wts: memref<?x?xf32>) -> tensor<?x?x!act> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %zero = arith.constant 0.0 : f32
  %t = memref.dim %ys, %c0 : memref<?x?x?xf32>
  %topk = memref.dim %ys, %c1 : memref<?x?x?xf32>
  %l = memref.dim %ys, %c2 : memref<?x?x?xf32>
  %out = memref.alloc(%t, %l) : memref<?x?x!act>
  scf.parallel (%i, %j) = (%c0, %c0) to (%t, %l) step (%c1, %c1) {
    %acc = scf.for %s = %c0 to %topk step %c1 iter_args(%a = %zero) -> (f32) {
      %w = memref.load %wts[%i, %s] : memref<?x?xf32>
      %yv = memref.load %ys[%i, %s, %j] : memref<?x?x?xf32>
      %p = arith.mulf %w, %yv : f32
      %a2 = arith.addf %a, %p : f32
      scf.yield %a2 : f32
    }
    %r = func.call @k3k_narrow(%acc) : (f32) -> !act
    memref.store %r, %out[%i, %j] : memref<?x?x!act>
  }
  %res = bufferization.to_tensor %out restrict : memref<?x?x!act> to tensor<?x?x!act>
  return %res : tensor<?x?x!act>
}

// The latent RMSNorm of the weighted sum (§6.2), RMSNorm(r; γ_lat), into
// %out (`k3.rms_norm` with the sum's arguments: on a GPU,
// k3-gpu-attn-res-norm gives each token one block that makes r and its
// norm in one kernel; the body below is what runs elsewhere).
func.func private @k3k_experts_combine_norm_rows(%ys: memref<?x?x?xf32>, %wts: memref<?x?xf32>,
                                                 %norm: tensor<?xbf16>, %eps: f32, %out: memref<?x?x!act>)
    attributes {k3.rms_norm = {widen = @k3k_widen, narrow = @k3k_narrow, round = @k3k_round}} {
  %r = func.call @k3k_experts_combine(%ys, %wts) : (memref<?x?x?xf32>, memref<?x?xf32>) -> tensor<?x?x!act>
  func.call @k3k_rms_norm_rows(%r, %norm, %eps, %out) : (tensor<?x?x!act>, tensor<?xbf16>, f32, memref<?x?x!act>) -> ()
  return
}

// The latent part after the experts (§6.2): R = W_up RMSNorm(r; γ_lat),
// r the weighted sum of the experts' y; without a latent space R = r. (ξ =
// W_down x is one of the products of x in @k3k_moe_front.) With the shared
// experts' Sh (`hasshared`) the result is round(R + Sh) (§6.3), made as R
// is stored (@k3k_linear_add); with all three, K3's MoE, the weighted
// sum, its norm, W_up and the sum are @k3k_latent_up_add.
func.func private @k3k_latent_up(%ys: memref<?x?x?xf32>, %wts: memref<?x?xf32>, %norm: tensor<?xbf16>, %hasnorm: i1, %eps: f32,
                                 %up: tensor<?x?xbf16>, %haslatent: i1, %sh: tensor<?x?x!act>, %hasshared: i1) -> tensor<?x?x!act> {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %both = arith.andi %haslatent, %hasshared : i1
  %all = arith.andi %both, %hasnorm : i1
  %res = scf.if %all -> (tensor<?x?x!act>) {
    %s = func.call @k3k_latent_up_add(%ys, %wts, %norm, %eps, %up, %sh) : (memref<?x?x?xf32>, memref<?x?xf32>, tensor<?xbf16>, f32, tensor<?x?xbf16>, tensor<?x?x!act>) -> tensor<?x?x!act>
    scf.yield %s : tensor<?x?x!act>
  } else {
    %n = scf.if %hasnorm -> (tensor<?x?x!act>) {
      %t = memref.dim %ys, %c0 : memref<?x?x?xf32>
      %l = memref.dim %ys, %c2 : memref<?x?x?xf32>
      %out = memref.alloc(%t, %l) : memref<?x?x!act>
      func.call @k3k_experts_combine_norm_rows(%ys, %wts, %norm, %eps, %out) : (memref<?x?x?xf32>, memref<?x?xf32>, tensor<?xbf16>, f32, memref<?x?x!act>) -> ()
      %y = bufferization.to_tensor %out restrict : memref<?x?x!act> to tensor<?x?x!act>
      scf.yield %y : tensor<?x?x!act>
    } else {
      %r = func.call @k3k_experts_combine(%ys, %wts) : (memref<?x?x?xf32>, memref<?x?xf32>) -> tensor<?x?x!act>
      scf.yield %r : tensor<?x?x!act>
    }
    %u = scf.if %haslatent -> (tensor<?x?x!act>) {
      %y = scf.if %hasshared -> (tensor<?x?x!act>) {
        %s = func.call @k3k_linear_add(%n, %up, %sh) : (tensor<?x?x!act>, tensor<?x?xbf16>, tensor<?x?x!act>) -> tensor<?x?x!act>
        scf.yield %s : tensor<?x?x!act>
      } else {
        %r = func.call @k3k_linear(%n, %up) : (tensor<?x?x!act>, tensor<?x?xbf16>) -> tensor<?x?x!act>
        scf.yield %r : tensor<?x?x!act>
      }
      scf.yield %y : tensor<?x?x!act>
    } else {
      %y = scf.if %hasshared -> (tensor<?x?x!act>) {
        %s = func.call @k3k_add(%n, %sh) : (tensor<?x?x!act>, tensor<?x?x!act>) -> tensor<?x?x!act>
        scf.yield %s : tensor<?x?x!act>
      } else {
        scf.yield %n : tensor<?x?x!act>
      }
      scf.yield %y : tensor<?x?x!act>
    }
    scf.yield %u : tensor<?x?x!act>
  }
  return %res : tensor<?x?x!act>
}

// round(W_up RMSNorm(Σ_s ω_s y_s; γ) + Sh) (§6.2, §6.3): for 1 to 15
// tokens one kernel (@k3k_latent_up_add_few), else the weighted sum and
// norm, then the product and the sum.
func.func private @k3k_latent_up_add(%ys: memref<?x?x?xf32>, %wts: memref<?x?xf32>, %norm: tensor<?xbf16>, %eps: f32,
                                     %up: tensor<?x?xbf16>, %sh: tensor<?x?x!act>) -> tensor<?x?x!act> {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %t = memref.dim %ys, %c0 : memref<?x?x?xf32>
  %l = memref.dim %ys, %c2 : memref<?x?x?xf32>
  %n = tensor.dim %up, %c0 : tensor<?x?xbf16>
  %few = func.call @k3k_few_tokens(%t) : (index) -> i1
  %out = memref.alloc(%t, %n) : memref<?x?x!act>
  scf.if %few {
    func.call @k3k_latent_up_add_few(%ys, %wts, %norm, %eps, %up, %sh, %out) : (memref<?x?x?xf32>, memref<?x?xf32>, tensor<?xbf16>, f32, tensor<?x?xbf16>, tensor<?x?x!act>, memref<?x?x!act>) -> ()
  } else {
    %nb = memref.alloc(%t, %l) : memref<?x?x!act>
    func.call @k3k_experts_combine_norm_rows(%ys, %wts, %norm, %eps, %nb) : (memref<?x?x?xf32>, memref<?x?xf32>, tensor<?xbf16>, f32, memref<?x?x!act>) -> ()
    %nt = bufferization.to_tensor %nb restrict : memref<?x?x!act> to tensor<?x?x!act>
    func.call @k3k_linear_many(%nt, %up, %out) : (tensor<?x?x!act>, tensor<?x?xbf16>, memref<?x?x!act>) -> ()
    func.call @k3k_add_into(%out, %sh) : (memref<?x?x!act>, tensor<?x?x!act>) -> ()
  }
  %y = bufferization.to_tensor %out restrict : memref<?x?x!act> to tensor<?x?x!act>
  return %y : tensor<?x?x!act>
}

// @k3k_latent_up_add of 1 to 15 tokens into %out (`k3.skinny_matmul` with
// an addend and `combine_norm`: on a GPU with a bf16 library,
// k3-gpu-skinny-mma's kernel makes the weighted sum and its norm in its
// first blocks and the product and the sum in the others; the body below
// is what runs elsewhere).
func.func private @k3k_latent_up_add_few(%ys: memref<?x?x?xf32>, %wts: memref<?x?xf32>, %norm: tensor<?xbf16>, %eps: f32,
                                         %up: tensor<?x?xbf16>, %sh: tensor<?x?x!act>, %out: memref<?x?x!act>)
    attributes {k3.skinny_matmul = {out = @k3k_narrow_add, addend,
                                    combine_norm = {widen = @k3k_widen, narrow = @k3k_narrow, round = @k3k_round}}} {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %t = memref.dim %ys, %c0 : memref<?x?x?xf32>
  %l = memref.dim %ys, %c2 : memref<?x?x?xf32>
  %nb = memref.alloc(%t, %l) : memref<?x?x!act>
  func.call @k3k_experts_combine_norm_rows(%ys, %wts, %norm, %eps, %nb) : (memref<?x?x?xf32>, memref<?x?xf32>, tensor<?xbf16>, f32, memref<?x?x!act>) -> ()
  %nt = bufferization.to_tensor %nb restrict : memref<?x?x!act> to tensor<?x?x!act>
  func.call @k3k_linear_add_few(%nt, %up, %sh, %out) : (tensor<?x?x!act>, tensor<?x?xbf16>, tensor<?x?x!act>, memref<?x?x!act>) -> ()
  return
}

// The part of k3.latent_moe before the experts (§6.1–6.3): the products
// of x in one block, so that k3-group-calls makes them one call (one
// kernel for a decode step): the router's scores and the routing, ξ's
// projection and the shared experts' gate and up (each [T, 0] when the
// model has no latent space or no shared experts); then ξ (x without a
// latent space).
func.func private @k3k_moe_front(%x: tensor<?x?x!act>, %wr: tensor<?x?xbf16>, %bias: tensor<?xf32>,
    %down: tensor<?x?xbf16>, %haslatent: i1, %sg: tensor<?x?xbf16>, %su: tensor<?x?xbf16>,
    %topk: index, %renorm: i1, %scaling: f32)
    -> (memref<?x?xi64>, memref<?x?xf32>, memref<?xi64>, memref<?xi64>, tensor<?x?x!act>, tensor<?x?x!act>, tensor<?x?x!act>) {
  %c0 = arith.constant 0 : index
  %t = tensor.dim %x, %c0 : tensor<?x?x!act>
  %idx = memref.alloc(%t, %topk) : memref<?x?xi64>
  %wts = memref.alloc(%t, %topk) : memref<?x?xf32>
  %nq = arith.muli %t, %topk : index
  %order = memref.alloc(%nq) : memref<?xi64>
  %rank = memref.alloc(%nq) : memref<?xi64>
  %scores = func.call @k3k_router_route(%x, %wr, %bias, %renorm, %scaling, %idx, %wts, %order, %rank)
      : (tensor<?x?x!act>, tensor<?x?xbf16>, tensor<?xf32>, i1, f32, memref<?x?xi64>, memref<?x?xf32>, memref<?xi64>, memref<?xi64>) -> tensor<?x?xf32>
  %xd = func.call @k3k_linear(%x, %down) : (tensor<?x?x!act>, tensor<?x?xbf16>) -> tensor<?x?x!act>
  %sa = func.call @k3k_linear(%x, %sg) : (tensor<?x?x!act>, tensor<?x?xbf16>) -> tensor<?x?x!act>
  %sb = func.call @k3k_linear(%x, %su) : (tensor<?x?x!act>, tensor<?x?xbf16>) -> tensor<?x?x!act>
  %xi = arith.select %haslatent, %xd, %x : tensor<?x?x!act>
  return %idx, %wts, %order, %rank, %xi, %sa, %sb : memref<?x?xi64>, memref<?x?xf32>, memref<?xi64>, memref<?xi64>, tensor<?x?x!act>, tensor<?x?x!act>, tensor<?x?x!act>
}

// The shared experts' output Sh (§6.3) from their gate and up products a
// and b (a when there are none: [T, 0]). Called right after the front: it
// does not need the routed experts, and on a GPU the runtime's graphs run
// the two side by side (k3-gpu-kernel-access).
func.func private @k3k_moe_shared(%sa: tensor<?x?x!act>, %sb: tensor<?x?x!act>,
    %sd: tensor<?x?xbf16>, %hasshared: i1, %silu: i1, %b1: f32, %b2: f32) -> tensor<?x?x!act> {
  %sh = scf.if %hasshared -> (tensor<?x?x!act>) {
    %y = func.call @k3k_glu_down(%sa, %sb, %sd, %silu, %b1, %b2) : (tensor<?x?x!act>, tensor<?x?x!act>, tensor<?x?xbf16>, i1, f32, f32) -> tensor<?x?x!act>
    scf.yield %y : tensor<?x?x!act>
  } else {
    scf.yield %sa : tensor<?x?x!act>
  }
  return %sh : tensor<?x?x!act>
}

// The part after the experts' y (§6.2, §6.3): round(R + Sh), Sh from
// @k3k_moe_shared.
func.func private @k3k_moe_back(%ys: memref<?x?x?xf32>, %wts: memref<?x?xf32>, %norm: tensor<?xbf16>, %hasnorm: i1, %eps: f32,
    %up: tensor<?x?xbf16>, %haslatent: i1, %sh: tensor<?x?x!act>, %hasshared: i1) -> tensor<?x?x!act> {
  %y = func.call @k3k_latent_up(%ys, %wts, %norm, %hasnorm, %eps, %up, %haslatent, %sh, %hasshared) : (memref<?x?x?xf32>, memref<?x?xf32>, tensor<?xbf16>, i1, f32, tensor<?x?xbf16>, i1, tensor<?x?x!act>, i1) -> tensor<?x?x!act>
  return %y : tensor<?x?x!act>
}

// k3.latent_moe with mxfp4 experts (§6.1–6.3): out = round(R + Sh).
func.func private @k3k_latent_moe_mxfp4(%x: tensor<?x?x!act>, %wr: tensor<?x?xbf16>, %bias: tensor<?xf32>,
    %down: tensor<?x?xbf16>, %up: tensor<?x?xbf16>, %haslatent: i1,
    %w1p: tensor<?x?x?xi8>, %w1s: tensor<?x?x?xi8>, %w3p: tensor<?x?x?xi8>, %w3s: tensor<?x?x?xi8>, %w2p: tensor<?x?x?xi8>, %w2s: tensor<?x?x?xi8>,
    %norm: tensor<?xbf16>, %hasnorm: i1, %eps: f32,
    %sg: tensor<?x?xbf16>, %su: tensor<?x?xbf16>, %sd: tensor<?x?xbf16>, %hasshared: i1,
    %topk: index, %renorm: i1, %scaling: f32, %silu: i1, %b1: f32, %b2: f32) -> tensor<?x?x!act> {
  %idx, %wts, %order, %rank, %xi, %sa, %sb = func.call @k3k_moe_front(%x, %wr, %bias, %down, %haslatent, %sg, %su, %topk, %renorm, %scaling) : (tensor<?x?x!act>, tensor<?x?xbf16>, tensor<?xf32>, tensor<?x?xbf16>, i1, tensor<?x?xbf16>, tensor<?x?xbf16>, index, i1, f32) -> (memref<?x?xi64>, memref<?x?xf32>, memref<?xi64>, memref<?xi64>, tensor<?x?x!act>, tensor<?x?x!act>, tensor<?x?x!act>)
  %sh = func.call @k3k_moe_shared(%sa, %sb, %sd, %hasshared, %silu, %b1, %b2) : (tensor<?x?x!act>, tensor<?x?x!act>, tensor<?x?xbf16>, i1, i1, f32, f32) -> tensor<?x?x!act>
  %ys = func.call @k3k_experts_mxfp4(%xi, %idx, %order, %rank, %w1p, %w1s, %w3p, %w3s, %w2p, %w2s, %silu, %b1, %b2) : (tensor<?x?x!act>, memref<?x?xi64>, memref<?xi64>, memref<?xi64>, tensor<?x?x?xi8>, tensor<?x?x?xi8>, tensor<?x?x?xi8>, tensor<?x?x?xi8>, tensor<?x?x?xi8>, tensor<?x?x?xi8>, i1, f32, f32) -> memref<?x?x?xf32>
  %y = func.call @k3k_moe_back(%ys, %wts, %norm, %hasnorm, %eps, %up, %haslatent, %sh, %hasshared) : (memref<?x?x?xf32>, memref<?x?xf32>, tensor<?xbf16>, i1, f32, tensor<?x?xbf16>, i1, tensor<?x?x!act>, i1) -> tensor<?x?x!act>
  return %y : tensor<?x?x!act>
}

// k3.latent_moe with bf16 experts (§6.1–6.3): out = round(R + Sh).
func.func private @k3k_latent_moe_bf16(%x: tensor<?x?x!act>, %wr: tensor<?x?xbf16>, %bias: tensor<?xf32>,
    %down: tensor<?x?xbf16>, %up: tensor<?x?xbf16>, %haslatent: i1,
    %w1: tensor<?x?x?xbf16>, %w3: tensor<?x?x?xbf16>, %w2: tensor<?x?x?xbf16>,
    %norm: tensor<?xbf16>, %hasnorm: i1, %eps: f32,
    %sg: tensor<?x?xbf16>, %su: tensor<?x?xbf16>, %sd: tensor<?x?xbf16>, %hasshared: i1,
    %topk: index, %renorm: i1, %scaling: f32, %silu: i1, %b1: f32, %b2: f32) -> tensor<?x?x!act> {
  %idx, %wts, %order, %rank, %xi, %sa, %sb = func.call @k3k_moe_front(%x, %wr, %bias, %down, %haslatent, %sg, %su, %topk, %renorm, %scaling) : (tensor<?x?x!act>, tensor<?x?xbf16>, tensor<?xf32>, tensor<?x?xbf16>, i1, tensor<?x?xbf16>, tensor<?x?xbf16>, index, i1, f32) -> (memref<?x?xi64>, memref<?x?xf32>, memref<?xi64>, memref<?xi64>, tensor<?x?x!act>, tensor<?x?x!act>, tensor<?x?x!act>)
  %sh = func.call @k3k_moe_shared(%sa, %sb, %sd, %hasshared, %silu, %b1, %b2) : (tensor<?x?x!act>, tensor<?x?x!act>, tensor<?x?xbf16>, i1, i1, f32, f32) -> tensor<?x?x!act>
  %ys = func.call @k3k_experts_bf16(%xi, %idx, %order, %rank, %w1, %w3, %w2, %silu, %b1, %b2) : (tensor<?x?x!act>, memref<?x?xi64>, memref<?xi64>, memref<?xi64>, tensor<?x?x?xbf16>, tensor<?x?x?xbf16>, tensor<?x?x?xbf16>, i1, f32, f32) -> memref<?x?x?xf32>
  %y = func.call @k3k_moe_back(%ys, %wts, %norm, %hasnorm, %eps, %up, %haslatent, %sh, %hasshared) : (memref<?x?x?xf32>, memref<?x?xf32>, tensor<?xbf16>, i1, f32, tensor<?x?xbf16>, i1, tensor<?x?x!act>, i1) -> tensor<?x?x!act>
  return %y : tensor<?x?x!act>
}
