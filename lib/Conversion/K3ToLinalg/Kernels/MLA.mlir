// Gated MLA kernel (K3_SPEC §5): projections, the paged latent cache, and
// attention in the naive form (§5.2, T > 1: prefill) or the weight-absorbed
// form (§5.3, T = 1: decode). No positional encoding (NoPE).

// Softmax-weighted attention of one query head over cache rows 0..n-1 is
// computed in two passes (max, then exp/sum) in the callers below.

// Cache rows token i attends over at decode: its own n_i (read from `ntk`)
// in a decode batch, else the call's one sequence's n (`n`, known on the
// host, so no kernel reads it from memory).
func.func private @k3k_mla_rows(%ntk: memref<?xindex>, %i: index, %pertoken: i1, %n: index) -> index {
  %r = scf.if %pertoken -> (index) {
    %v = memref.load %ntk[%i] : memref<?xindex>
    scf.yield %v : index
  } else {
    scf.yield %n : index
  }
  return %r : index
}

// Column %col of q for tokens %i0 .. %i0 + 7, widened (a token past %tlast
// reads %tlast: computed, never stored).
func.func private @k3k_mla_q8(%q: tensor<?x?x!act>, %i0: index, %tlast: index, %col: index) -> vector<8xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c4 = arith.constant 4 : index
  %c5 = arith.constant 5 : index
  %c6 = arith.constant 6 : index
  %c7 = arith.constant 7 : index
  %j0a = arith.addi %i0, %c0 : index
  %j0 = arith.minui %j0a, %tlast : index
  %v0 = tensor.extract %q[%j0, %col] : tensor<?x?x!act>
  %f0 = func.call @k3k_widen(%v0) : (!act) -> f32
  %j1a = arith.addi %i0, %c1 : index
  %j1 = arith.minui %j1a, %tlast : index
  %v1 = tensor.extract %q[%j1, %col] : tensor<?x?x!act>
  %f1 = func.call @k3k_widen(%v1) : (!act) -> f32
  %j2a = arith.addi %i0, %c2 : index
  %j2 = arith.minui %j2a, %tlast : index
  %v2 = tensor.extract %q[%j2, %col] : tensor<?x?x!act>
  %f2 = func.call @k3k_widen(%v2) : (!act) -> f32
  %j3a = arith.addi %i0, %c3 : index
  %j3 = arith.minui %j3a, %tlast : index
  %v3 = tensor.extract %q[%j3, %col] : tensor<?x?x!act>
  %f3 = func.call @k3k_widen(%v3) : (!act) -> f32
  %j4a = arith.addi %i0, %c4 : index
  %j4 = arith.minui %j4a, %tlast : index
  %v4 = tensor.extract %q[%j4, %col] : tensor<?x?x!act>
  %f4 = func.call @k3k_widen(%v4) : (!act) -> f32
  %j5a = arith.addi %i0, %c5 : index
  %j5 = arith.minui %j5a, %tlast : index
  %v5 = tensor.extract %q[%j5, %col] : tensor<?x?x!act>
  %f5 = func.call @k3k_widen(%v5) : (!act) -> f32
  %j6a = arith.addi %i0, %c6 : index
  %j6 = arith.minui %j6a, %tlast : index
  %v6 = tensor.extract %q[%j6, %col] : tensor<?x?x!act>
  %f6 = func.call @k3k_widen(%v6) : (!act) -> f32
  %j7a = arith.addi %i0, %c7 : index
  %j7 = arith.minui %j7a, %tlast : index
  %v7 = tensor.extract %q[%j7, %col] : tensor<?x?x!act>
  %f7 = func.call @k3k_widen(%v7) : (!act) -> f32
  %r = vector.from_elements %f0, %f1, %f2, %f3, %f4, %f5, %f6, %f7 : vector<8xf32>
  return %r : vector<8xf32>
}

// Four terms of q̂[i, h, e] (§5.3) for 8 tokens, one in each lane of %a:
// %a + q0 W[row, e] + ... + q3 W[row + 3, e], added in that order, for the
// tokens' q elements q0 .. q3 (widened).
func.func private @k3k_mla_wk4x8(%w: tensor<?x?xbf16>, %row: index, %e: index, %q0: vector<8xf32>,
                                 %q1: vector<8xf32>, %q2: vector<8xf32>, %q3: vector<8xf32>,
                                 %a: vector<8xf32>) -> vector<8xf32> {
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %wv0 = tensor.extract %w[%row, %e] : tensor<?x?xbf16>
  %wf0 = arith.extf %wv0 : bf16 to f32
  %wb0 = vector.broadcast %wf0 : f32 to vector<8xf32>
  %pr0 = arith.mulf %q0, %wb0 : vector<8xf32>
  %rk1 = arith.addi %row, %c1 : index
  %wv1 = tensor.extract %w[%rk1, %e] : tensor<?x?xbf16>
  %wf1 = arith.extf %wv1 : bf16 to f32
  %wb1 = vector.broadcast %wf1 : f32 to vector<8xf32>
  %pr1 = arith.mulf %q1, %wb1 : vector<8xf32>
  %rk2 = arith.addi %row, %c2 : index
  %wv2 = tensor.extract %w[%rk2, %e] : tensor<?x?xbf16>
  %wf2 = arith.extf %wv2 : bf16 to f32
  %wb2 = vector.broadcast %wf2 : f32 to vector<8xf32>
  %pr2 = arith.mulf %q2, %wb2 : vector<8xf32>
  %rk3 = arith.addi %row, %c3 : index
  %wv3 = tensor.extract %w[%rk3, %e] : tensor<?x?xbf16>
  %wf3 = arith.extf %wv3 : bf16 to f32
  %wb3 = vector.broadcast %wf3 : f32 to vector<8xf32>
  %pr3 = arith.mulf %q3, %wb3 : vector<8xf32>
  %s0 = arith.addf %a, %pr0 : vector<8xf32>
  %s1 = arith.addf %s0, %pr1 : vector<8xf32>
  %s2 = arith.addf %s1, %pr2 : vector<8xf32>
  %s3 = arith.addf %s2, %pr3 : vector<8xf32>
  return %s3 : vector<8xf32>
}

// Four terms of q̂[i, h, e] for tokens %i0 .. %i0 + 7: q[., qi .. qi + 3]
// (@k3k_mla_q8) against W rows %row .. %row + 3 (@k3k_mla_wk4x8). Its loads
// depend on nothing before them, so that four calls in one loop body put
// sixteen terms' loads in flight together.
func.func private @k3k_mla_qk4x8(%q: tensor<?x?x!act>, %w: tensor<?x?xbf16>, %i0: index, %tlast: index,
                                 %qi: index, %row: index, %e: index, %a: vector<8xf32>) -> vector<8xf32> {
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %qv0 = func.call @k3k_mla_q8(%q, %i0, %tlast, %qi) : (tensor<?x?x!act>, index, index, index) -> vector<8xf32>
  %qk1 = arith.addi %qi, %c1 : index
  %qv1 = func.call @k3k_mla_q8(%q, %i0, %tlast, %qk1) : (tensor<?x?x!act>, index, index, index) -> vector<8xf32>
  %qk2 = arith.addi %qi, %c2 : index
  %qv2 = func.call @k3k_mla_q8(%q, %i0, %tlast, %qk2) : (tensor<?x?x!act>, index, index, index) -> vector<8xf32>
  %qk3 = arith.addi %qi, %c3 : index
  %qv3 = func.call @k3k_mla_q8(%q, %i0, %tlast, %qk3) : (tensor<?x?x!act>, index, index, index) -> vector<8xf32>
  %r = func.call @k3k_mla_wk4x8(%w, %row, %e, %qv0, %qv1, %qv2, %qv3, %a) : (tensor<?x?xbf16>, index, index, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>) -> vector<8xf32>
  return %r : vector<8xf32>
}

// Eight terms of q̂[i, h, e] for tokens %i0 .. %i0 + 7, as @k3k_mla_qk4x8
// twice (the same products, added in d order), but each token's 8 elements
// q[., qi .. qi + 7] come in one 16-byte load (the caller has checked that
// q allows it: rows of a multiple of 8 elements, base aligned, qi % 8 ==
// 0), 8 loads instead of 64, then transposed to one vector per element.
func.func private @k3k_mla_qk8x8(%qm: memref<?x?x!act>, %w: tensor<?x?xbf16>, %i0: index, %tlast: index,
                                 %qi: index, %row: index, %e: index, %a: vector<8xf32>) -> vector<8xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c4 = arith.constant 4 : index
  %c5 = arith.constant 5 : index
  %c6 = arith.constant 6 : index
  %c7 = arith.constant 7 : index
  %j0a = arith.addi %i0, %c0 : index
  %j0 = arith.minui %j0a, %tlast : index
  %v0 = vector.load %qm[%j0, %qi] {alignment = 16 : i64} : memref<?x?x!act>, vector<8x!act>
  %f0 = func.call @k3k_widen8(%v0) : (vector<8x!act>) -> vector<8xf32>
  %j1a = arith.addi %i0, %c1 : index
  %j1 = arith.minui %j1a, %tlast : index
  %v1 = vector.load %qm[%j1, %qi] {alignment = 16 : i64} : memref<?x?x!act>, vector<8x!act>
  %f1 = func.call @k3k_widen8(%v1) : (vector<8x!act>) -> vector<8xf32>
  %j2a = arith.addi %i0, %c2 : index
  %j2 = arith.minui %j2a, %tlast : index
  %v2 = vector.load %qm[%j2, %qi] {alignment = 16 : i64} : memref<?x?x!act>, vector<8x!act>
  %f2 = func.call @k3k_widen8(%v2) : (vector<8x!act>) -> vector<8xf32>
  %j3a = arith.addi %i0, %c3 : index
  %j3 = arith.minui %j3a, %tlast : index
  %v3 = vector.load %qm[%j3, %qi] {alignment = 16 : i64} : memref<?x?x!act>, vector<8x!act>
  %f3 = func.call @k3k_widen8(%v3) : (vector<8x!act>) -> vector<8xf32>
  %j4a = arith.addi %i0, %c4 : index
  %j4 = arith.minui %j4a, %tlast : index
  %v4 = vector.load %qm[%j4, %qi] {alignment = 16 : i64} : memref<?x?x!act>, vector<8x!act>
  %f4 = func.call @k3k_widen8(%v4) : (vector<8x!act>) -> vector<8xf32>
  %j5a = arith.addi %i0, %c5 : index
  %j5 = arith.minui %j5a, %tlast : index
  %v5 = vector.load %qm[%j5, %qi] {alignment = 16 : i64} : memref<?x?x!act>, vector<8x!act>
  %f5 = func.call @k3k_widen8(%v5) : (vector<8x!act>) -> vector<8xf32>
  %j6a = arith.addi %i0, %c6 : index
  %j6 = arith.minui %j6a, %tlast : index
  %v6 = vector.load %qm[%j6, %qi] {alignment = 16 : i64} : memref<?x?x!act>, vector<8x!act>
  %f6 = func.call @k3k_widen8(%v6) : (vector<8x!act>) -> vector<8xf32>
  %j7a = arith.addi %i0, %c7 : index
  %j7 = arith.minui %j7a, %tlast : index
  %v7 = vector.load %qm[%j7, %qi] {alignment = 16 : i64} : memref<?x?x!act>, vector<8x!act>
  %f7 = func.call @k3k_widen8(%v7) : (vector<8x!act>) -> vector<8xf32>
  %x0_0 = vector.extract %f0[0] : f32 from vector<8xf32>
  %x0_1 = vector.extract %f1[0] : f32 from vector<8xf32>
  %x0_2 = vector.extract %f2[0] : f32 from vector<8xf32>
  %x0_3 = vector.extract %f3[0] : f32 from vector<8xf32>
  %x0_4 = vector.extract %f4[0] : f32 from vector<8xf32>
  %x0_5 = vector.extract %f5[0] : f32 from vector<8xf32>
  %x0_6 = vector.extract %f6[0] : f32 from vector<8xf32>
  %x0_7 = vector.extract %f7[0] : f32 from vector<8xf32>
  %q0 = vector.from_elements %x0_0, %x0_1, %x0_2, %x0_3, %x0_4, %x0_5, %x0_6, %x0_7 : vector<8xf32>
  %x1_0 = vector.extract %f0[1] : f32 from vector<8xf32>
  %x1_1 = vector.extract %f1[1] : f32 from vector<8xf32>
  %x1_2 = vector.extract %f2[1] : f32 from vector<8xf32>
  %x1_3 = vector.extract %f3[1] : f32 from vector<8xf32>
  %x1_4 = vector.extract %f4[1] : f32 from vector<8xf32>
  %x1_5 = vector.extract %f5[1] : f32 from vector<8xf32>
  %x1_6 = vector.extract %f6[1] : f32 from vector<8xf32>
  %x1_7 = vector.extract %f7[1] : f32 from vector<8xf32>
  %q1 = vector.from_elements %x1_0, %x1_1, %x1_2, %x1_3, %x1_4, %x1_5, %x1_6, %x1_7 : vector<8xf32>
  %x2_0 = vector.extract %f0[2] : f32 from vector<8xf32>
  %x2_1 = vector.extract %f1[2] : f32 from vector<8xf32>
  %x2_2 = vector.extract %f2[2] : f32 from vector<8xf32>
  %x2_3 = vector.extract %f3[2] : f32 from vector<8xf32>
  %x2_4 = vector.extract %f4[2] : f32 from vector<8xf32>
  %x2_5 = vector.extract %f5[2] : f32 from vector<8xf32>
  %x2_6 = vector.extract %f6[2] : f32 from vector<8xf32>
  %x2_7 = vector.extract %f7[2] : f32 from vector<8xf32>
  %q2 = vector.from_elements %x2_0, %x2_1, %x2_2, %x2_3, %x2_4, %x2_5, %x2_6, %x2_7 : vector<8xf32>
  %x3_0 = vector.extract %f0[3] : f32 from vector<8xf32>
  %x3_1 = vector.extract %f1[3] : f32 from vector<8xf32>
  %x3_2 = vector.extract %f2[3] : f32 from vector<8xf32>
  %x3_3 = vector.extract %f3[3] : f32 from vector<8xf32>
  %x3_4 = vector.extract %f4[3] : f32 from vector<8xf32>
  %x3_5 = vector.extract %f5[3] : f32 from vector<8xf32>
  %x3_6 = vector.extract %f6[3] : f32 from vector<8xf32>
  %x3_7 = vector.extract %f7[3] : f32 from vector<8xf32>
  %q3 = vector.from_elements %x3_0, %x3_1, %x3_2, %x3_3, %x3_4, %x3_5, %x3_6, %x3_7 : vector<8xf32>
  %x4_0 = vector.extract %f0[4] : f32 from vector<8xf32>
  %x4_1 = vector.extract %f1[4] : f32 from vector<8xf32>
  %x4_2 = vector.extract %f2[4] : f32 from vector<8xf32>
  %x4_3 = vector.extract %f3[4] : f32 from vector<8xf32>
  %x4_4 = vector.extract %f4[4] : f32 from vector<8xf32>
  %x4_5 = vector.extract %f5[4] : f32 from vector<8xf32>
  %x4_6 = vector.extract %f6[4] : f32 from vector<8xf32>
  %x4_7 = vector.extract %f7[4] : f32 from vector<8xf32>
  %q4 = vector.from_elements %x4_0, %x4_1, %x4_2, %x4_3, %x4_4, %x4_5, %x4_6, %x4_7 : vector<8xf32>
  %x5_0 = vector.extract %f0[5] : f32 from vector<8xf32>
  %x5_1 = vector.extract %f1[5] : f32 from vector<8xf32>
  %x5_2 = vector.extract %f2[5] : f32 from vector<8xf32>
  %x5_3 = vector.extract %f3[5] : f32 from vector<8xf32>
  %x5_4 = vector.extract %f4[5] : f32 from vector<8xf32>
  %x5_5 = vector.extract %f5[5] : f32 from vector<8xf32>
  %x5_6 = vector.extract %f6[5] : f32 from vector<8xf32>
  %x5_7 = vector.extract %f7[5] : f32 from vector<8xf32>
  %q5 = vector.from_elements %x5_0, %x5_1, %x5_2, %x5_3, %x5_4, %x5_5, %x5_6, %x5_7 : vector<8xf32>
  %x6_0 = vector.extract %f0[6] : f32 from vector<8xf32>
  %x6_1 = vector.extract %f1[6] : f32 from vector<8xf32>
  %x6_2 = vector.extract %f2[6] : f32 from vector<8xf32>
  %x6_3 = vector.extract %f3[6] : f32 from vector<8xf32>
  %x6_4 = vector.extract %f4[6] : f32 from vector<8xf32>
  %x6_5 = vector.extract %f5[6] : f32 from vector<8xf32>
  %x6_6 = vector.extract %f6[6] : f32 from vector<8xf32>
  %x6_7 = vector.extract %f7[6] : f32 from vector<8xf32>
  %q6 = vector.from_elements %x6_0, %x6_1, %x6_2, %x6_3, %x6_4, %x6_5, %x6_6, %x6_7 : vector<8xf32>
  %x7_0 = vector.extract %f0[7] : f32 from vector<8xf32>
  %x7_1 = vector.extract %f1[7] : f32 from vector<8xf32>
  %x7_2 = vector.extract %f2[7] : f32 from vector<8xf32>
  %x7_3 = vector.extract %f3[7] : f32 from vector<8xf32>
  %x7_4 = vector.extract %f4[7] : f32 from vector<8xf32>
  %x7_5 = vector.extract %f5[7] : f32 from vector<8xf32>
  %x7_6 = vector.extract %f6[7] : f32 from vector<8xf32>
  %x7_7 = vector.extract %f7[7] : f32 from vector<8xf32>
  %q7 = vector.from_elements %x7_0, %x7_1, %x7_2, %x7_3, %x7_4, %x7_5, %x7_6, %x7_7 : vector<8xf32>
  %s4 = func.call @k3k_mla_wk4x8(%w, %row, %e, %q0, %q1, %q2, %q3, %a) : (tensor<?x?xbf16>, index, index, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>) -> vector<8xf32>
  %row4 = arith.addi %row, %c4 : index
  %s8 = func.call @k3k_mla_wk4x8(%w, %row4, %e, %q4, %q5, %q6, %q7, %s4) : (tensor<?x?xbf16>, index, index, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>) -> vector<8xf32>
  return %s8 : vector<8xf32>
}

// Stores element k of %v at qt[%i0 + k, %e, %hp] for the tokens below %t.
func.func private @k3k_mla_qt8(%qt: memref<?x?x?xf32>, %v: vector<8xf32>, %i0: index, %t: index, %e: index, %hp: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c4 = arith.constant 4 : index
  %c5 = arith.constant 5 : index
  %c6 = arith.constant 6 : index
  %c7 = arith.constant 7 : index
  %j0 = arith.addi %i0, %c0 : index
  %in0 = arith.cmpi ult, %j0, %t : index
  scf.if %in0 {
    %x0 = vector.extract %v[0] : f32 from vector<8xf32>
    memref.store %x0, %qt[%j0, %e, %hp] : memref<?x?x?xf32>
  }
  %j1 = arith.addi %i0, %c1 : index
  %in1 = arith.cmpi ult, %j1, %t : index
  scf.if %in1 {
    %x1 = vector.extract %v[1] : f32 from vector<8xf32>
    memref.store %x1, %qt[%j1, %e, %hp] : memref<?x?x?xf32>
  }
  %j2 = arith.addi %i0, %c2 : index
  %in2 = arith.cmpi ult, %j2, %t : index
  scf.if %in2 {
    %x2 = vector.extract %v[2] : f32 from vector<8xf32>
    memref.store %x2, %qt[%j2, %e, %hp] : memref<?x?x?xf32>
  }
  %j3 = arith.addi %i0, %c3 : index
  %in3 = arith.cmpi ult, %j3, %t : index
  scf.if %in3 {
    %x3 = vector.extract %v[3] : f32 from vector<8xf32>
    memref.store %x3, %qt[%j3, %e, %hp] : memref<?x?x?xf32>
  }
  %j4 = arith.addi %i0, %c4 : index
  %in4 = arith.cmpi ult, %j4, %t : index
  scf.if %in4 {
    %x4 = vector.extract %v[4] : f32 from vector<8xf32>
    memref.store %x4, %qt[%j4, %e, %hp] : memref<?x?x?xf32>
  }
  %j5 = arith.addi %i0, %c5 : index
  %in5 = arith.cmpi ult, %j5, %t : index
  scf.if %in5 {
    %x5 = vector.extract %v[5] : f32 from vector<8xf32>
    memref.store %x5, %qt[%j5, %e, %hp] : memref<?x?x?xf32>
  }
  %j6 = arith.addi %i0, %c6 : index
  %in6 = arith.cmpi ult, %j6, %t : index
  scf.if %in6 {
    %x6 = vector.extract %v[6] : f32 from vector<8xf32>
    memref.store %x6, %qt[%j6, %e, %hp] : memref<?x?x?xf32>
  }
  %j7 = arith.addi %i0, %c7 : index
  %in7 = arith.cmpi ult, %j7, %t : index
  scf.if %in7 {
    %x7 = vector.extract %v[7] : f32 from vector<8xf32>
    memref.store %x7, %qt[%j7, %e, %hp] : memref<?x?x?xf32>
  }
  return
}

// Eight consecutive elements of cache row %row from column %col, widened,
// as one 16-byte vector load: the caller has checked that the pool's rows
// allow it (rows of a multiple of 8 elements, base aligned).
func.func private @k3k_mla_row8(%c: memref<?x?x!act>, %row: index, %col: index) -> vector<8xf32> {
  %v = vector.load %c[%row, %col] {alignment = 16 : i64} : memref<?x?x!act>, vector<8x!act>
  %f = func.call @k3k_widen8(%v) : (vector<8x!act>) -> vector<8xf32>
  return %f : vector<8xf32>
}

// Whether every cache row of the pool can be read 8 elements at a time as
// 16-byte vectors (@k3k_mla_row8): rows of a multiple of 8 elements, the
// pool's base 16-byte aligned.
func.func private @k3k_mla_row8_ok(%pool2: memref<?x?x!act>) -> i1 {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
  %w = memref.dim %pool2, %c1 : memref<?x?x!act>
  %wrem = arith.remui %w, %c8 : index
  %wok = arith.cmpi eq, %wrem, %c0 : index
  %pbase = memref.extract_aligned_pointer_as_index %pool2 : memref<?x?x!act> -> index
  %prem = arith.remui %pbase, %c16 : index
  %pok = arith.cmpi eq, %prem, %c0 : index
  %al = arith.andi %wok, %pok : i1
  return %al : i1
}

// The same, element by element, 0.0 past column %lim (any row length).
func.func private @k3k_mla_row8_any(%c: memref<?x?x!act>, %row: index, %col: index, %lim: index) -> vector<8xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %z = arith.constant dense<0.0> : vector<8xf32>
  %f = scf.for %k = %c0 to %c8 step %c1 iter_args(%acc = %z) -> (vector<8xf32>) {
    %ck = arith.addi %col, %k : index
    %in = arith.cmpi ult, %ck, %lim : index
    %x = scf.if %in -> (f32) {
      %v = memref.load %c[%row, %ck] : memref<?x?x!act>
      %xf = func.call @k3k_widen(%v) : (!act) -> f32
      scf.yield %xf : f32
    } else {
      %zero = arith.constant 0.0 : f32
      scf.yield %zero : f32
    }
    %n = vector.insert %x, %acc[%k] : f32 into vector<8xf32>
    scf.yield %n : vector<8xf32>
  }
  return %f : vector<8xf32>
}

// Eight terms e .. e+7 of the scores of 8 heads (from %h0; q̂ transposed,
// heads innermost) against 4 cache rows (%f0 .. %f3): a_r[h] += q̂[h, e+k] ·
// c_r[e+k] for k in order, so each score is the same sequential sum as one
// thread's loop over the row.
func.func private @k3k_mla_score8(%qt: memref<?x?x?xf32>, %i: index, %e: index, %h0: index,
                                  %f0: vector<8xf32>, %f1: vector<8xf32>, %f2: vector<8xf32>, %f3: vector<8xf32>,
                                  %a0: vector<8xf32>, %a1: vector<8xf32>, %a2: vector<8xf32>, %a3: vector<8xf32>)
    -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>) {
  %q0 = vector.load %qt[%i, %e, %h0] {alignment = 16 : i64} : memref<?x?x?xf32>, vector<8xf32>
  %x0_0 = vector.extract %f0[0] : f32 from vector<8xf32>
  %b0_0 = vector.broadcast %x0_0 : f32 to vector<8xf32>
  %m0_0 = arith.mulf %q0, %b0_0 fastmath<contract> : vector<8xf32>
  %s0_0 = arith.addf %a0, %m0_0 fastmath<contract> : vector<8xf32>
  %x0_1 = vector.extract %f1[0] : f32 from vector<8xf32>
  %b0_1 = vector.broadcast %x0_1 : f32 to vector<8xf32>
  %m0_1 = arith.mulf %q0, %b0_1 fastmath<contract> : vector<8xf32>
  %s0_1 = arith.addf %a1, %m0_1 fastmath<contract> : vector<8xf32>
  %x0_2 = vector.extract %f2[0] : f32 from vector<8xf32>
  %b0_2 = vector.broadcast %x0_2 : f32 to vector<8xf32>
  %m0_2 = arith.mulf %q0, %b0_2 fastmath<contract> : vector<8xf32>
  %s0_2 = arith.addf %a2, %m0_2 fastmath<contract> : vector<8xf32>
  %x0_3 = vector.extract %f3[0] : f32 from vector<8xf32>
  %b0_3 = vector.broadcast %x0_3 : f32 to vector<8xf32>
  %m0_3 = arith.mulf %q0, %b0_3 fastmath<contract> : vector<8xf32>
  %s0_3 = arith.addf %a3, %m0_3 fastmath<contract> : vector<8xf32>
  %c1 = arith.constant 1 : index
  %e1 = arith.addi %e, %c1 : index
  %q1 = vector.load %qt[%i, %e1, %h0] {alignment = 16 : i64} : memref<?x?x?xf32>, vector<8xf32>
  %x1_0 = vector.extract %f0[1] : f32 from vector<8xf32>
  %b1_0 = vector.broadcast %x1_0 : f32 to vector<8xf32>
  %m1_0 = arith.mulf %q1, %b1_0 fastmath<contract> : vector<8xf32>
  %s1_0 = arith.addf %s0_0, %m1_0 fastmath<contract> : vector<8xf32>
  %x1_1 = vector.extract %f1[1] : f32 from vector<8xf32>
  %b1_1 = vector.broadcast %x1_1 : f32 to vector<8xf32>
  %m1_1 = arith.mulf %q1, %b1_1 fastmath<contract> : vector<8xf32>
  %s1_1 = arith.addf %s0_1, %m1_1 fastmath<contract> : vector<8xf32>
  %x1_2 = vector.extract %f2[1] : f32 from vector<8xf32>
  %b1_2 = vector.broadcast %x1_2 : f32 to vector<8xf32>
  %m1_2 = arith.mulf %q1, %b1_2 fastmath<contract> : vector<8xf32>
  %s1_2 = arith.addf %s0_2, %m1_2 fastmath<contract> : vector<8xf32>
  %x1_3 = vector.extract %f3[1] : f32 from vector<8xf32>
  %b1_3 = vector.broadcast %x1_3 : f32 to vector<8xf32>
  %m1_3 = arith.mulf %q1, %b1_3 fastmath<contract> : vector<8xf32>
  %s1_3 = arith.addf %s0_3, %m1_3 fastmath<contract> : vector<8xf32>
  %c2 = arith.constant 2 : index
  %e2 = arith.addi %e, %c2 : index
  %q2 = vector.load %qt[%i, %e2, %h0] {alignment = 16 : i64} : memref<?x?x?xf32>, vector<8xf32>
  %x2_0 = vector.extract %f0[2] : f32 from vector<8xf32>
  %b2_0 = vector.broadcast %x2_0 : f32 to vector<8xf32>
  %m2_0 = arith.mulf %q2, %b2_0 fastmath<contract> : vector<8xf32>
  %s2_0 = arith.addf %s1_0, %m2_0 fastmath<contract> : vector<8xf32>
  %x2_1 = vector.extract %f1[2] : f32 from vector<8xf32>
  %b2_1 = vector.broadcast %x2_1 : f32 to vector<8xf32>
  %m2_1 = arith.mulf %q2, %b2_1 fastmath<contract> : vector<8xf32>
  %s2_1 = arith.addf %s1_1, %m2_1 fastmath<contract> : vector<8xf32>
  %x2_2 = vector.extract %f2[2] : f32 from vector<8xf32>
  %b2_2 = vector.broadcast %x2_2 : f32 to vector<8xf32>
  %m2_2 = arith.mulf %q2, %b2_2 fastmath<contract> : vector<8xf32>
  %s2_2 = arith.addf %s1_2, %m2_2 fastmath<contract> : vector<8xf32>
  %x2_3 = vector.extract %f3[2] : f32 from vector<8xf32>
  %b2_3 = vector.broadcast %x2_3 : f32 to vector<8xf32>
  %m2_3 = arith.mulf %q2, %b2_3 fastmath<contract> : vector<8xf32>
  %s2_3 = arith.addf %s1_3, %m2_3 fastmath<contract> : vector<8xf32>
  %c3 = arith.constant 3 : index
  %e3 = arith.addi %e, %c3 : index
  %q3 = vector.load %qt[%i, %e3, %h0] {alignment = 16 : i64} : memref<?x?x?xf32>, vector<8xf32>
  %x3_0 = vector.extract %f0[3] : f32 from vector<8xf32>
  %b3_0 = vector.broadcast %x3_0 : f32 to vector<8xf32>
  %m3_0 = arith.mulf %q3, %b3_0 fastmath<contract> : vector<8xf32>
  %s3_0 = arith.addf %s2_0, %m3_0 fastmath<contract> : vector<8xf32>
  %x3_1 = vector.extract %f1[3] : f32 from vector<8xf32>
  %b3_1 = vector.broadcast %x3_1 : f32 to vector<8xf32>
  %m3_1 = arith.mulf %q3, %b3_1 fastmath<contract> : vector<8xf32>
  %s3_1 = arith.addf %s2_1, %m3_1 fastmath<contract> : vector<8xf32>
  %x3_2 = vector.extract %f2[3] : f32 from vector<8xf32>
  %b3_2 = vector.broadcast %x3_2 : f32 to vector<8xf32>
  %m3_2 = arith.mulf %q3, %b3_2 fastmath<contract> : vector<8xf32>
  %s3_2 = arith.addf %s2_2, %m3_2 fastmath<contract> : vector<8xf32>
  %x3_3 = vector.extract %f3[3] : f32 from vector<8xf32>
  %b3_3 = vector.broadcast %x3_3 : f32 to vector<8xf32>
  %m3_3 = arith.mulf %q3, %b3_3 fastmath<contract> : vector<8xf32>
  %s3_3 = arith.addf %s2_3, %m3_3 fastmath<contract> : vector<8xf32>
  %c4 = arith.constant 4 : index
  %e4 = arith.addi %e, %c4 : index
  %q4 = vector.load %qt[%i, %e4, %h0] {alignment = 16 : i64} : memref<?x?x?xf32>, vector<8xf32>
  %x4_0 = vector.extract %f0[4] : f32 from vector<8xf32>
  %b4_0 = vector.broadcast %x4_0 : f32 to vector<8xf32>
  %m4_0 = arith.mulf %q4, %b4_0 fastmath<contract> : vector<8xf32>
  %s4_0 = arith.addf %s3_0, %m4_0 fastmath<contract> : vector<8xf32>
  %x4_1 = vector.extract %f1[4] : f32 from vector<8xf32>
  %b4_1 = vector.broadcast %x4_1 : f32 to vector<8xf32>
  %m4_1 = arith.mulf %q4, %b4_1 fastmath<contract> : vector<8xf32>
  %s4_1 = arith.addf %s3_1, %m4_1 fastmath<contract> : vector<8xf32>
  %x4_2 = vector.extract %f2[4] : f32 from vector<8xf32>
  %b4_2 = vector.broadcast %x4_2 : f32 to vector<8xf32>
  %m4_2 = arith.mulf %q4, %b4_2 fastmath<contract> : vector<8xf32>
  %s4_2 = arith.addf %s3_2, %m4_2 fastmath<contract> : vector<8xf32>
  %x4_3 = vector.extract %f3[4] : f32 from vector<8xf32>
  %b4_3 = vector.broadcast %x4_3 : f32 to vector<8xf32>
  %m4_3 = arith.mulf %q4, %b4_3 fastmath<contract> : vector<8xf32>
  %s4_3 = arith.addf %s3_3, %m4_3 fastmath<contract> : vector<8xf32>
  %c5 = arith.constant 5 : index
  %e5 = arith.addi %e, %c5 : index
  %q5 = vector.load %qt[%i, %e5, %h0] {alignment = 16 : i64} : memref<?x?x?xf32>, vector<8xf32>
  %x5_0 = vector.extract %f0[5] : f32 from vector<8xf32>
  %b5_0 = vector.broadcast %x5_0 : f32 to vector<8xf32>
  %m5_0 = arith.mulf %q5, %b5_0 fastmath<contract> : vector<8xf32>
  %s5_0 = arith.addf %s4_0, %m5_0 fastmath<contract> : vector<8xf32>
  %x5_1 = vector.extract %f1[5] : f32 from vector<8xf32>
  %b5_1 = vector.broadcast %x5_1 : f32 to vector<8xf32>
  %m5_1 = arith.mulf %q5, %b5_1 fastmath<contract> : vector<8xf32>
  %s5_1 = arith.addf %s4_1, %m5_1 fastmath<contract> : vector<8xf32>
  %x5_2 = vector.extract %f2[5] : f32 from vector<8xf32>
  %b5_2 = vector.broadcast %x5_2 : f32 to vector<8xf32>
  %m5_2 = arith.mulf %q5, %b5_2 fastmath<contract> : vector<8xf32>
  %s5_2 = arith.addf %s4_2, %m5_2 fastmath<contract> : vector<8xf32>
  %x5_3 = vector.extract %f3[5] : f32 from vector<8xf32>
  %b5_3 = vector.broadcast %x5_3 : f32 to vector<8xf32>
  %m5_3 = arith.mulf %q5, %b5_3 fastmath<contract> : vector<8xf32>
  %s5_3 = arith.addf %s4_3, %m5_3 fastmath<contract> : vector<8xf32>
  %c6 = arith.constant 6 : index
  %e6 = arith.addi %e, %c6 : index
  %q6 = vector.load %qt[%i, %e6, %h0] {alignment = 16 : i64} : memref<?x?x?xf32>, vector<8xf32>
  %x6_0 = vector.extract %f0[6] : f32 from vector<8xf32>
  %b6_0 = vector.broadcast %x6_0 : f32 to vector<8xf32>
  %m6_0 = arith.mulf %q6, %b6_0 fastmath<contract> : vector<8xf32>
  %s6_0 = arith.addf %s5_0, %m6_0 fastmath<contract> : vector<8xf32>
  %x6_1 = vector.extract %f1[6] : f32 from vector<8xf32>
  %b6_1 = vector.broadcast %x6_1 : f32 to vector<8xf32>
  %m6_1 = arith.mulf %q6, %b6_1 fastmath<contract> : vector<8xf32>
  %s6_1 = arith.addf %s5_1, %m6_1 fastmath<contract> : vector<8xf32>
  %x6_2 = vector.extract %f2[6] : f32 from vector<8xf32>
  %b6_2 = vector.broadcast %x6_2 : f32 to vector<8xf32>
  %m6_2 = arith.mulf %q6, %b6_2 fastmath<contract> : vector<8xf32>
  %s6_2 = arith.addf %s5_2, %m6_2 fastmath<contract> : vector<8xf32>
  %x6_3 = vector.extract %f3[6] : f32 from vector<8xf32>
  %b6_3 = vector.broadcast %x6_3 : f32 to vector<8xf32>
  %m6_3 = arith.mulf %q6, %b6_3 fastmath<contract> : vector<8xf32>
  %s6_3 = arith.addf %s5_3, %m6_3 fastmath<contract> : vector<8xf32>
  %c7 = arith.constant 7 : index
  %e7 = arith.addi %e, %c7 : index
  %q7 = vector.load %qt[%i, %e7, %h0] {alignment = 16 : i64} : memref<?x?x?xf32>, vector<8xf32>
  %x7_0 = vector.extract %f0[7] : f32 from vector<8xf32>
  %b7_0 = vector.broadcast %x7_0 : f32 to vector<8xf32>
  %m7_0 = arith.mulf %q7, %b7_0 fastmath<contract> : vector<8xf32>
  %s7_0 = arith.addf %s6_0, %m7_0 fastmath<contract> : vector<8xf32>
  %x7_1 = vector.extract %f1[7] : f32 from vector<8xf32>
  %b7_1 = vector.broadcast %x7_1 : f32 to vector<8xf32>
  %m7_1 = arith.mulf %q7, %b7_1 fastmath<contract> : vector<8xf32>
  %s7_1 = arith.addf %s6_1, %m7_1 fastmath<contract> : vector<8xf32>
  %x7_2 = vector.extract %f2[7] : f32 from vector<8xf32>
  %b7_2 = vector.broadcast %x7_2 : f32 to vector<8xf32>
  %m7_2 = arith.mulf %q7, %b7_2 fastmath<contract> : vector<8xf32>
  %s7_2 = arith.addf %s6_2, %m7_2 fastmath<contract> : vector<8xf32>
  %x7_3 = vector.extract %f3[7] : f32 from vector<8xf32>
  %b7_3 = vector.broadcast %x7_3 : f32 to vector<8xf32>
  %m7_3 = arith.mulf %q7, %b7_3 fastmath<contract> : vector<8xf32>
  %s7_3 = arith.addf %s6_3, %m7_3 fastmath<contract> : vector<8xf32>
  return %s7_0, %s7_1, %s7_2, %s7_3 : vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>
}

// Stores the scores of 8 heads (from %h0) against cache row %j, scaled:
// p[i, h, j] for the heads below %nh, if %j is one of token i's rows.
func.func private @k3k_mla_store_scores(%p: memref<?x?x?xf32>, %v: vector<8xf32>, %i: index, %h0: index,
                                        %j: index, %nh: index, %ntok: index, %scale: f32) {
  %jin = arith.cmpi ult, %j, %ntok : index
  scf.if %jin {
    %in0 = arith.cmpi ult, %h0, %nh : index
    scf.if %in0 {
      %x0 = vector.extract %v[0] : f32 from vector<8xf32>
      %s0 = arith.mulf %x0, %scale : f32
      memref.store %s0, %p[%i, %h0, %j] : memref<?x?x?xf32>
    }
    %c1 = arith.constant 1 : index
    %h1 = arith.addi %h0, %c1 : index
    %in1 = arith.cmpi ult, %h1, %nh : index
    scf.if %in1 {
      %x1 = vector.extract %v[1] : f32 from vector<8xf32>
      %s1 = arith.mulf %x1, %scale : f32
      memref.store %s1, %p[%i, %h1, %j] : memref<?x?x?xf32>
    }
    %c2 = arith.constant 2 : index
    %h2 = arith.addi %h0, %c2 : index
    %in2 = arith.cmpi ult, %h2, %nh : index
    scf.if %in2 {
      %x2 = vector.extract %v[2] : f32 from vector<8xf32>
      %s2 = arith.mulf %x2, %scale : f32
      memref.store %s2, %p[%i, %h2, %j] : memref<?x?x?xf32>
    }
    %c3 = arith.constant 3 : index
    %h3 = arith.addi %h0, %c3 : index
    %in3 = arith.cmpi ult, %h3, %nh : index
    scf.if %in3 {
      %x3 = vector.extract %v[3] : f32 from vector<8xf32>
      %s3 = arith.mulf %x3, %scale : f32
      memref.store %s3, %p[%i, %h3, %j] : memref<?x?x?xf32>
    }
    %c4 = arith.constant 4 : index
    %h4 = arith.addi %h0, %c4 : index
    %in4 = arith.cmpi ult, %h4, %nh : index
    scf.if %in4 {
      %x4 = vector.extract %v[4] : f32 from vector<8xf32>
      %s4 = arith.mulf %x4, %scale : f32
      memref.store %s4, %p[%i, %h4, %j] : memref<?x?x?xf32>
    }
    %c5 = arith.constant 5 : index
    %h5 = arith.addi %h0, %c5 : index
    %in5 = arith.cmpi ult, %h5, %nh : index
    scf.if %in5 {
      %x5 = vector.extract %v[5] : f32 from vector<8xf32>
      %s5 = arith.mulf %x5, %scale : f32
      memref.store %s5, %p[%i, %h5, %j] : memref<?x?x?xf32>
    }
    %c6 = arith.constant 6 : index
    %h6 = arith.addi %h0, %c6 : index
    %in6 = arith.cmpi ult, %h6, %nh : index
    scf.if %in6 {
      %x6 = vector.extract %v[6] : f32 from vector<8xf32>
      %s6 = arith.mulf %x6, %scale : f32
      memref.store %s6, %p[%i, %h6, %j] : memref<?x?x?xf32>
    }
    %c7 = arith.constant 7 : index
    %h7 = arith.addi %h0, %c7 : index
    %in7 = arith.cmpi ult, %h7, %nh : index
    scf.if %in7 {
      %x7 = vector.extract %v[7] : f32 from vector<8xf32>
      %s7 = arith.mulf %x7, %scale : f32
      memref.store %s7, %p[%i, %h7, %j] : memref<?x?x?xf32>
    }
  }
  return
}

// Stores head %h's partial weighted sum over one slice of its cache rows,
// columns %col .. %col+7 below %r, at partial[i, h, pt, col ..].
func.func private @k3k_mla_store_part(%partial: memref<?x?x?x?xf32>, %v: vector<8xf32>, %i: index,
                                      %h: index, %pt: index, %col: index, %nh: index, %r: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %hin = arith.cmpi ult, %h, %nh : index
  scf.if %hin {
    %end = arith.addi %col, %c8 : index
    %whole = arith.cmpi ule, %end, %r : index
    scf.if %whole {
      vector.store %v, %partial[%i, %h, %pt, %col] : memref<?x?x?x?xf32>, vector<8xf32>
    } else {
      scf.for %k = %c0 to %c8 step %c1 {
        %ck = arith.addi %col, %k : index
        %in = arith.cmpi ult, %ck, %r : index
        scf.if %in {
          %x = vector.extract %v[%k] : f32 from vector<8xf32>
          memref.store %x, %partial[%i, %h, %pt, %ck] : memref<?x?x?x?xf32>
        }
      }
    }
  }
  return
}


// One cached row's terms of the weighted sums of 8 heads (%hu0 .. %hu7)
// over 8 columns (%cv): a_h += p[i, h, j] · c_j, in row order.
func.func private @k3k_mla_wsum8(%p: memref<?x?x?xf32>, %i: index, %j: index,
                                 %hu0: index, %hu1: index, %hu2: index, %hu3: index,
                                 %hu4: index, %hu5: index, %hu6: index, %hu7: index, %cv: vector<8xf32>,
                                 %a0: vector<8xf32>, %a1: vector<8xf32>, %a2: vector<8xf32>, %a3: vector<8xf32>,
                                 %a4: vector<8xf32>, %a5: vector<8xf32>, %a6: vector<8xf32>, %a7: vector<8xf32>)
    -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>) {
  %p0 = memref.load %p[%i, %hu0, %j] : memref<?x?x?xf32>
  %b0 = vector.broadcast %p0 : f32 to vector<8xf32>
  %m0 = arith.mulf %b0, %cv fastmath<contract> : vector<8xf32>
  %n0 = arith.addf %a0, %m0 fastmath<contract> : vector<8xf32>
  %p1 = memref.load %p[%i, %hu1, %j] : memref<?x?x?xf32>
  %b1 = vector.broadcast %p1 : f32 to vector<8xf32>
  %m1 = arith.mulf %b1, %cv fastmath<contract> : vector<8xf32>
  %n1 = arith.addf %a1, %m1 fastmath<contract> : vector<8xf32>
  %p2 = memref.load %p[%i, %hu2, %j] : memref<?x?x?xf32>
  %b2 = vector.broadcast %p2 : f32 to vector<8xf32>
  %m2 = arith.mulf %b2, %cv fastmath<contract> : vector<8xf32>
  %n2 = arith.addf %a2, %m2 fastmath<contract> : vector<8xf32>
  %p3 = memref.load %p[%i, %hu3, %j] : memref<?x?x?xf32>
  %b3 = vector.broadcast %p3 : f32 to vector<8xf32>
  %m3 = arith.mulf %b3, %cv fastmath<contract> : vector<8xf32>
  %n3 = arith.addf %a3, %m3 fastmath<contract> : vector<8xf32>
  %p4 = memref.load %p[%i, %hu4, %j] : memref<?x?x?xf32>
  %b4 = vector.broadcast %p4 : f32 to vector<8xf32>
  %m4 = arith.mulf %b4, %cv fastmath<contract> : vector<8xf32>
  %n4 = arith.addf %a4, %m4 fastmath<contract> : vector<8xf32>
  %p5 = memref.load %p[%i, %hu5, %j] : memref<?x?x?xf32>
  %b5 = vector.broadcast %p5 : f32 to vector<8xf32>
  %m5 = arith.mulf %b5, %cv fastmath<contract> : vector<8xf32>
  %n5 = arith.addf %a5, %m5 fastmath<contract> : vector<8xf32>
  %p6 = memref.load %p[%i, %hu6, %j] : memref<?x?x?xf32>
  %b6 = vector.broadcast %p6 : f32 to vector<8xf32>
  %m6 = arith.mulf %b6, %cv fastmath<contract> : vector<8xf32>
  %n6 = arith.addf %a6, %m6 fastmath<contract> : vector<8xf32>
  %p7 = memref.load %p[%i, %hu7, %j] : memref<?x?x?xf32>
  %b7 = vector.broadcast %p7 : f32 to vector<8xf32>
  %m7 = arith.mulf %b7, %cv fastmath<contract> : vector<8xf32>
  %n7 = arith.addf %a7, %m7 fastmath<contract> : vector<8xf32>
  return %n0, %n1, %n2, %n3, %n4, %n5, %n6, %n7 : vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>
}

// The scores of every (token, head, cached row) of a decode step, scaled:
// p[i, h, j] = scale · (q̂_h · c_j) for j < n_i (q̂ transposed in qt [T, R + dr,
// heads padded to 8]; the cache rows of token i at pool2[rows[i, j]]).
// `k3.mla_scores`: k3-gpu-mla-mma gives it a tensor-core body on sm_80+.
func.func private @k3k_mla_scores(%qt: memref<?x?x?xf32>, %pool2: memref<?x?x!act>, %rows: memref<?x?xindex>,
                                  %ntk: memref<?xindex>, %p: memref<?x?x?xf32>, %scale: f32)
    attributes {k3.mla_scores} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %yes = arith.constant true
  %hblk = arith.constant 8 : index
  %rblk = arith.constant 4 : index
  %t = memref.dim %p, %c0 : memref<?x?x?xf32>
  %nh = memref.dim %p, %c1 : memref<?x?x?xf32>
  %cap = memref.dim %p, %c2 : memref<?x?x?xf32>
  %w = memref.dim %pool2, %c1 : memref<?x?x!act>
  %nhb = arith.ceildivui %nh, %hblk : index
  %hlast = arith.subi %nh, %c1 : index
  // Cache rows as 16-byte vectors where the row length and the pool's base
  // allow it (K3: rows of 576 elements).
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
  %wrem = arith.remui %w, %c8 : index
  %al = func.call @k3k_mla_row8_ok(%pool2) : (memref<?x?x!act>) -> i1
  // Scores of %hblk heads and %rblk cached tokens per thread, 8 elements
  // of a row at a time: each cache element is read once for the 8 heads,
  // each q̂ element once for the 4 rows (tokens past n_i are computed on
  // token n_i - 1 and not stored). Each score sums its terms in order.
  %nrb = arith.ceildivui %cap, %rblk : index
  %wfull = arith.subi %w, %wrem : index
  %vzero = arith.constant dense<0.0> : vector<8xf32>
  // (row block, head block) as one dimension, head blocks innermost: the
  // threads of a warp share a few row blocks, so a cache row comes from
  // memory once for all the head blocks.
  %nrhb = arith.muli %nrb, %nhb : index
  scf.parallel (%i, %jh) = (%c0, %c0) to (%t, %nrhb) step (%c1, %c1) {
    %jb = arith.divui %jh, %nhb : index
    %hb = arith.remui %jh, %nhb : index
    %ntok = func.call @k3k_mla_rows(%ntk, %i, %yes, %cap) : (memref<?xindex>, index, i1, index) -> index
    %jlast = arith.subi %ntok, %c1 : index
    %j0 = arith.muli %jb, %rblk : index
    %jc0 = arith.minui %j0, %jlast : index
    %row0 = memref.load %rows[%i, %jc0] : memref<?x?xindex>
    %j1 = arith.addi %j0, %c1 : index
    %jc1 = arith.minui %j1, %jlast : index
    %row1 = memref.load %rows[%i, %jc1] : memref<?x?xindex>
    %j2 = arith.addi %j0, %c2 : index
    %jc2 = arith.minui %j2, %jlast : index
    %row2 = memref.load %rows[%i, %jc2] : memref<?x?xindex>
    %c3 = arith.constant 3 : index
    %j3 = arith.addi %j0, %c3 : index
    %jc3 = arith.minui %j3, %jlast : index
    %row3 = memref.load %rows[%i, %jc3] : memref<?x?xindex>
    %h0 = arith.muli %hb, %hblk : index
    %v0, %v1, %v2, %v3 = scf.if %al -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>) {
      // Two steps of 8 elements per iteration (the loads of both in
      // flight together, each score still summed in element order), then
      // a last single step.
      %w16r = arith.remui %wfull, %c16 : index
      %w16 = arith.subi %wfull, %w16r : index
      %t0, %t1, %t2, %t3 = scf.for %e = %c0 to %w16 step %c16 iter_args(%a0 = %vzero, %a1 = %vzero, %a2 = %vzero, %a3 = %vzero) -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>) {
        %e8 = arith.addi %e, %c8 : index
        %f0 = func.call @k3k_mla_row8(%pool2, %row0, %e) : (memref<?x?x!act>, index, index) -> vector<8xf32>
        %f1 = func.call @k3k_mla_row8(%pool2, %row1, %e) : (memref<?x?x!act>, index, index) -> vector<8xf32>
        %f2 = func.call @k3k_mla_row8(%pool2, %row2, %e) : (memref<?x?x!act>, index, index) -> vector<8xf32>
        %f3 = func.call @k3k_mla_row8(%pool2, %row3, %e) : (memref<?x?x!act>, index, index) -> vector<8xf32>
        %g0 = func.call @k3k_mla_row8(%pool2, %row0, %e8) : (memref<?x?x!act>, index, index) -> vector<8xf32>
        %g1 = func.call @k3k_mla_row8(%pool2, %row1, %e8) : (memref<?x?x!act>, index, index) -> vector<8xf32>
        %g2 = func.call @k3k_mla_row8(%pool2, %row2, %e8) : (memref<?x?x!act>, index, index) -> vector<8xf32>
        %g3 = func.call @k3k_mla_row8(%pool2, %row3, %e8) : (memref<?x?x!act>, index, index) -> vector<8xf32>
        %m0, %m1, %m2, %m3 = func.call @k3k_mla_score8(%qt, %i, %e, %h0, %f0, %f1, %f2, %f3, %a0, %a1, %a2, %a3) : (memref<?x?x?xf32>, index, index, index, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>) -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>)
        %n0, %n1, %n2, %n3 = func.call @k3k_mla_score8(%qt, %i, %e8, %h0, %g0, %g1, %g2, %g3, %m0, %m1, %m2, %m3) : (memref<?x?x?xf32>, index, index, index, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>) -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>)
        scf.yield %n0, %n1, %n2, %n3 : vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>
      }
      %r0, %r1, %r2, %r3 = scf.for %e = %w16 to %wfull step %c8 iter_args(%a0 = %t0, %a1 = %t1, %a2 = %t2, %a3 = %t3) -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>) {
        %f0 = func.call @k3k_mla_row8(%pool2, %row0, %e) : (memref<?x?x!act>, index, index) -> vector<8xf32>
        %f1 = func.call @k3k_mla_row8(%pool2, %row1, %e) : (memref<?x?x!act>, index, index) -> vector<8xf32>
        %f2 = func.call @k3k_mla_row8(%pool2, %row2, %e) : (memref<?x?x!act>, index, index) -> vector<8xf32>
        %f3 = func.call @k3k_mla_row8(%pool2, %row3, %e) : (memref<?x?x!act>, index, index) -> vector<8xf32>
        %n0, %n1, %n2, %n3 = func.call @k3k_mla_score8(%qt, %i, %e, %h0, %f0, %f1, %f2, %f3, %a0, %a1, %a2, %a3) : (memref<?x?x?xf32>, index, index, index, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>) -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>)
        scf.yield %n0, %n1, %n2, %n3 : vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>
      }
      scf.yield %r0, %r1, %r2, %r3 : vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>
    } else {
      %r0, %r1, %r2, %r3 = scf.for %e = %c0 to %wfull step %c8 iter_args(%a0 = %vzero, %a1 = %vzero, %a2 = %vzero, %a3 = %vzero) -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>) {
        %f0 = func.call @k3k_mla_row8_any(%pool2, %row0, %e, %w) : (memref<?x?x!act>, index, index, index) -> vector<8xf32>
        %f1 = func.call @k3k_mla_row8_any(%pool2, %row1, %e, %w) : (memref<?x?x!act>, index, index, index) -> vector<8xf32>
        %f2 = func.call @k3k_mla_row8_any(%pool2, %row2, %e, %w) : (memref<?x?x!act>, index, index, index) -> vector<8xf32>
        %f3 = func.call @k3k_mla_row8_any(%pool2, %row3, %e, %w) : (memref<?x?x!act>, index, index, index) -> vector<8xf32>
        %n0, %n1, %n2, %n3 = func.call @k3k_mla_score8(%qt, %i, %e, %h0, %f0, %f1, %f2, %f3, %a0, %a1, %a2, %a3) : (memref<?x?x?xf32>, index, index, index, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>) -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>)
        scf.yield %n0, %n1, %n2, %n3 : vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>
      }
      scf.yield %r0, %r1, %r2, %r3 : vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>
    }
    // Rows whose length is not a multiple of 8: the last terms one by one.
    %s0, %s1, %s2, %s3 = scf.for %e = %wfull to %w step %c1 iter_args(%a0 = %v0, %a1 = %v1, %a2 = %v2, %a3 = %v3) -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>) {
      %qv = vector.load %qt[%i, %e, %h0] {alignment = 16 : i64} : memref<?x?x?xf32>, vector<8xf32>
      %x0 = memref.load %pool2[%row0, %e] : memref<?x?x!act>
      %y0 = func.call @k3k_widen(%x0) : (!act) -> f32
      %b0 = vector.broadcast %y0 : f32 to vector<8xf32>
      %m0 = arith.mulf %qv, %b0 fastmath<contract> : vector<8xf32>
      %n0 = arith.addf %a0, %m0 fastmath<contract> : vector<8xf32>
      %x1 = memref.load %pool2[%row1, %e] : memref<?x?x!act>
      %y1 = func.call @k3k_widen(%x1) : (!act) -> f32
      %b1 = vector.broadcast %y1 : f32 to vector<8xf32>
      %m1 = arith.mulf %qv, %b1 fastmath<contract> : vector<8xf32>
      %n1 = arith.addf %a1, %m1 fastmath<contract> : vector<8xf32>
      %x2 = memref.load %pool2[%row2, %e] : memref<?x?x!act>
      %y2 = func.call @k3k_widen(%x2) : (!act) -> f32
      %b2 = vector.broadcast %y2 : f32 to vector<8xf32>
      %m2 = arith.mulf %qv, %b2 fastmath<contract> : vector<8xf32>
      %n2 = arith.addf %a2, %m2 fastmath<contract> : vector<8xf32>
      %x3 = memref.load %pool2[%row3, %e] : memref<?x?x!act>
      %y3 = func.call @k3k_widen(%x3) : (!act) -> f32
      %b3 = vector.broadcast %y3 : f32 to vector<8xf32>
      %m3 = arith.mulf %qv, %b3 fastmath<contract> : vector<8xf32>
      %n3 = arith.addf %a3, %m3 fastmath<contract> : vector<8xf32>
      scf.yield %n0, %n1, %n2, %n3 : vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>
    }
    func.call @k3k_mla_store_scores(%p, %s0, %i, %h0, %j0, %nh, %ntok, %scale) : (memref<?x?x?xf32>, vector<8xf32>, index, index, index, index, index, f32) -> ()
    func.call @k3k_mla_store_scores(%p, %s1, %i, %h0, %j1, %nh, %ntok, %scale) : (memref<?x?x?xf32>, vector<8xf32>, index, index, index, index, index, f32) -> ()
    func.call @k3k_mla_store_scores(%p, %s2, %i, %h0, %j2, %nh, %ntok, %scale) : (memref<?x?x?xf32>, vector<8xf32>, index, index, index, index, index, f32) -> ()
    func.call @k3k_mla_store_scores(%p, %s3, %i, %h0, %j3, %nh, %ntok, %scale) : (memref<?x?x?xf32>, vector<8xf32>, index, index, index, index, index, f32) -> ()
  }
  return
}

// Softmax of a decode step's scores per (token, head), in place over the
// token's n_i rows of p [T, NH, CAP]: the maximum, p = exp(s - max), the sum
// in rowsum [T, NH]. pmax, rowmax and psum ([T, NH, ⌈CAP / 512⌉], [T, NH],
// [T, NH, ⌈CAP / 512⌉]) hold the chunks' maxima, the maxima and the chunks'
// sums. `k3.mla_softmax`: k3-gpu-mla-softmax gives it a one-kernel body.
func.func private @k3k_mla_softmax(%p: memref<?x?x?xf32>, %ntk: memref<?xindex>, %pmax: memref<?x?x?xf32>,
                                   %rowmax: memref<?x?xf32>, %psum: memref<?x?x?xf32>, %rowsum: memref<?x?xf32>)
    attributes {k3.mla_softmax} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c8 = arith.constant 8 : index
  %yes = arith.constant true
  %zero = arith.constant 0.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %chunk = arith.constant 512 : index
  %t = memref.dim %p, %c0 : memref<?x?x?xf32>
  %nh = memref.dim %p, %c1 : memref<?x?x?xf32>
  %cap = memref.dim %p, %c2 : memref<?x?x?xf32>
  %nch = memref.dim %pmax, %c2 : memref<?x?x?xf32>
  // Softmax per (token, head): the maximum, exp(s - max) in place, the sum.
  // The maximum and the sum in chunks of 512 rows (one kernel over every
  // (token, head, chunk), so that a batch-1 step's few rows still make
  // many warps), then the chunks' results in chunk order; a chunk past the
  // token's n_i gives -inf or 0, which change nothing, so the result
  // depends on n_i only.
  scf.parallel (%i, %h, %ch) = (%c0, %c0, %c0) to (%t, %nh, %nch) step (%c1, %c1, %c1) {
    %ntok = func.call @k3k_mla_rows(%ntk, %i, %yes, %cap) : (memref<?xindex>, index, i1, index) -> index
    %lo = arith.muli %ch, %chunk : index
    %lo2 = arith.addi %lo, %chunk : index
    %hi = arith.minui %lo2, %ntok : index
    %mx = scf.for %j = %lo to %hi step %c1 iter_args(%m = %ninf) -> (f32) {
      %sc = memref.load %p[%i, %h, %j] : memref<?x?x?xf32>
      %m2 = arith.maximumf %m, %sc : f32
      scf.yield %m2 : f32
    }
    memref.store %mx, %pmax[%i, %h, %ch] : memref<?x?x?xf32>
  }
  scf.parallel (%i, %h) = (%c0, %c0) to (%t, %nh) step (%c1, %c1) {
    %mx = scf.for %ch = %c0 to %nch step %c1 iter_args(%m = %ninf) -> (f32) {
      %pm = memref.load %pmax[%i, %h, %ch] : memref<?x?x?xf32>
      %m2 = arith.maximumf %m, %pm : f32
      scf.yield %m2 : f32
    }
    memref.store %mx, %rowmax[%i, %h] : memref<?x?xf32>
  }
  // exp in place, 8 rows per thread (row jt + k·⌈n/8⌉: the threads of a
  // warp on consecutive rows), so that a batch's many rows make a grid of
  // tens of thousands of blocks, not of millions.
  %nj8 = arith.ceildivui %cap, %c8 : index
  scf.parallel (%i, %h, %jt) = (%c0, %c0, %c0) to (%t, %nh, %nj8) step (%c1, %c1, %c1) {
    %ntok = func.call @k3k_mla_rows(%ntk, %i, %yes, %cap) : (memref<?xindex>, index, i1, index) -> index
    %mx = memref.load %rowmax[%i, %h] : memref<?x?xf32>
    scf.for %k = %c0 to %c8 step %c1 {
      %jk = arith.muli %k, %nj8 : index
      %j = arith.addi %jk, %jt : index
      %jin = arith.cmpi ult, %j, %ntok : index
      scf.if %jin {
        %s = memref.load %p[%i, %h, %j] : memref<?x?x?xf32>
        %d = arith.subf %s, %mx : f32
        %e = math.exp %d : f32
        memref.store %e, %p[%i, %h, %j] : memref<?x?x?xf32>
      }
    }
  }
  scf.parallel (%i, %h, %ch) = (%c0, %c0, %c0) to (%t, %nh, %nch) step (%c1, %c1, %c1) {
    %ntok = func.call @k3k_mla_rows(%ntk, %i, %yes, %cap) : (memref<?xindex>, index, i1, index) -> index
    %lo = arith.muli %ch, %chunk : index
    %lo2 = arith.addi %lo, %chunk : index
    %hi = arith.minui %lo2, %ntok : index
    %sum = scf.for %j = %lo to %hi step %c1 iter_args(%a = %zero) -> (f32) {
      %e = memref.load %p[%i, %h, %j] : memref<?x?x?xf32>
      %s2 = arith.addf %a, %e : f32
      scf.yield %s2 : f32
    }
    memref.store %sum, %psum[%i, %h, %ch] : memref<?x?x?xf32>
  }
  scf.parallel (%i, %h) = (%c0, %c0) to (%t, %nh) step (%c1, %c1) {
    %sum = scf.for %ch = %c0 to %nch step %c1 iter_args(%a = %zero) -> (f32) {
      %ps = memref.load %psum[%i, %h, %ch] : memref<?x?x?xf32>
      %s2 = arith.addf %a, %ps : f32
      scf.yield %s2 : f32
    }
    memref.store %sum, %rowsum[%i, %h] : memref<?x?xf32>
  }
  return
}

// The weighted sums of a decode step over slices of each token's cached rows:
// partial[i, h, pt, e] = Σ_{j in slice pt} p[i, h, j] · c_j[e] (e < R).
// `k3.mla_wsum`: k3-gpu-mla-mma gives it a tensor-core body on sm_80+.
func.func private @k3k_mla_wsum(%p: memref<?x?x?xf32>, %pool2: memref<?x?x!act>, %rows: memref<?x?xindex>,
                                %ntk: memref<?xindex>, %partial: memref<?x?x?x?xf32>)
    attributes {k3.mla_wsum} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %yes = arith.constant true
  %hblk = arith.constant 8 : index
  %t = memref.dim %p, %c0 : memref<?x?x?xf32>
  %nh = memref.dim %p, %c1 : memref<?x?x?xf32>
  %cap = memref.dim %p, %c2 : memref<?x?x?xf32>
  %w = memref.dim %pool2, %c1 : memref<?x?x!act>
  %nhb = arith.ceildivui %nh, %hblk : index
  %hlast = arith.subi %nh, %c1 : index
  %parts = memref.dim %partial, %c2 : memref<?x?x?x?xf32>
  %c3w = arith.constant 3 : index
  %r = memref.dim %partial, %c3w : memref<?x?x?x?xf32>
  %vzero = arith.constant dense<0.0> : vector<8xf32>
  %c8 = arith.constant 8 : index
  %al = func.call @k3k_mla_row8_ok(%pool2) : (memref<?x?x!act>) -> i1
  // ō over each token's cached rows in slices of about %rows_per_part
  // (at most %parts; flash-decoding style: each slice a partial sum, the
  // slices added in order, unused ones zero), for parallelism over a long
  // context. A thread takes 8 heads and 8 consecutive columns: per row one
  // vector load of the cache (consecutive threads, consecutive columns) and
  // 64 products. A token's slices depend on its own context only, not on
  // the other tokens of the call.
  %cw1 = arith.constant 1 : index
  %cw2 = arith.constant 2 : index
  %cw3 = arith.constant 3 : index
  %cw4 = arith.constant 4 : index
  %cw5 = arith.constant 5 : index
  %cw6 = arith.constant 6 : index
  %cw7 = arith.constant 7 : index
  %rows_per_part = arith.constant 256 : index
  %ncb = arith.ceildivui %r, %c8 : index
  %rrem = arith.remui %r, %c8 : index
  %rok = arith.cmpi eq, %rrem, %c0 : index
  %alr = arith.andi %al, %rok : i1
  // (head block, slice) as one dimension: the token, it and the column
  // block are the three grid dimensions.
  %nhbp = arith.muli %nhb, %parts : index
  scf.parallel (%i, %hbpt, %cb) = (%c0, %c0, %c0) to (%t, %nhbp, %ncb) step (%c1, %c1, %c1) {
    %hb = arith.divui %hbpt, %parts : index
    %pt = arith.remui %hbpt, %parts : index
    %ntok = func.call @k3k_mla_rows(%ntk, %i, %yes, %cap) : (memref<?xindex>, index, i1, index) -> index
    %nparts0 = arith.ceildivui %ntok, %rows_per_part : index
    %nparts = arith.minui %nparts0, %parts : index
    %slice = arith.ceildivui %ntok, %nparts : index
    %col = arith.muli %cb, %c8 : index
    %h0 = arith.muli %hb, %hblk : index
    %hu0 = arith.minui %h0, %hlast : index
    %hk1 = arith.addi %h0, %c1 : index
    %hu1 = arith.minui %hk1, %hlast : index
    %hk2 = arith.addi %h0, %c2 : index
    %hu2 = arith.minui %hk2, %hlast : index
    %c3 = arith.constant 3 : index
    %hk3 = arith.addi %h0, %c3 : index
    %hu3 = arith.minui %hk3, %hlast : index
    %c4 = arith.constant 4 : index
    %hk4 = arith.addi %h0, %c4 : index
    %hu4 = arith.minui %hk4, %hlast : index
    %c5 = arith.constant 5 : index
    %hk5 = arith.addi %h0, %c5 : index
    %hu5 = arith.minui %hk5, %hlast : index
    %c6 = arith.constant 6 : index
    %hk6 = arith.addi %h0, %c6 : index
    %hu6 = arith.minui %hk6, %hlast : index
    %c7 = arith.constant 7 : index
    %hk7 = arith.addi %h0, %c7 : index
    %hu7 = arith.minui %hk7, %hlast : index
    %j0 = arith.muli %pt, %slice : index
    %j1u = arith.addi %j0, %slice : index
    %j1 = arith.minui %j1u, %ntok : index
    // Eight rows per iteration (their loads in flight together; four
    // where the rows need element loads), the sums still in row order;
    // then the rest of the slice one by one.
    %jpos = arith.cmpi ugt, %j1, %j0 : index
    %jlen0 = arith.subi %j1, %j0 : index
    %jlen = arith.select %jpos, %jlen0, %c0 : index
    %jrem = arith.remui %jlen, %c8 : index
    %jlen4 = arith.subi %jlen, %jrem : index
    %jm = arith.addi %j0, %jlen4 : index
    %s0, %s1, %s2, %s3, %s4, %s5, %s6, %s7 = scf.if %alr -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>) {
      %q0, %q1, %q2, %q3, %q4, %q5, %q6, %q7 = scf.for %j = %j0 to %jm step %c8 iter_args(%a0 = %vzero, %a1 = %vzero, %a2 = %vzero, %a3 = %vzero, %a4 = %vzero, %a5 = %vzero, %a6 = %vzero, %a7 = %vzero) -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>) {
          %row0 = memref.load %rows[%i, %j] : memref<?x?xindex>
          %ju1 = arith.addi %j, %cw1 : index
          %row1 = memref.load %rows[%i, %ju1] : memref<?x?xindex>
          %ju2 = arith.addi %j, %cw2 : index
          %row2 = memref.load %rows[%i, %ju2] : memref<?x?xindex>
          %ju3 = arith.addi %j, %cw3 : index
          %row3 = memref.load %rows[%i, %ju3] : memref<?x?xindex>
          %ju4 = arith.addi %j, %cw4 : index
          %row4 = memref.load %rows[%i, %ju4] : memref<?x?xindex>
          %ju5 = arith.addi %j, %cw5 : index
          %row5 = memref.load %rows[%i, %ju5] : memref<?x?xindex>
          %ju6 = arith.addi %j, %cw6 : index
          %row6 = memref.load %rows[%i, %ju6] : memref<?x?xindex>
          %ju7 = arith.addi %j, %cw7 : index
          %row7 = memref.load %rows[%i, %ju7] : memref<?x?xindex>
          %cv0 = func.call @k3k_mla_row8(%pool2, %row0, %col) : (memref<?x?x!act>, index, index) -> vector<8xf32>
          %cv1 = func.call @k3k_mla_row8(%pool2, %row1, %col) : (memref<?x?x!act>, index, index) -> vector<8xf32>
          %cv2 = func.call @k3k_mla_row8(%pool2, %row2, %col) : (memref<?x?x!act>, index, index) -> vector<8xf32>
          %cv3 = func.call @k3k_mla_row8(%pool2, %row3, %col) : (memref<?x?x!act>, index, index) -> vector<8xf32>
          %cv4 = func.call @k3k_mla_row8(%pool2, %row4, %col) : (memref<?x?x!act>, index, index) -> vector<8xf32>
          %cv5 = func.call @k3k_mla_row8(%pool2, %row5, %col) : (memref<?x?x!act>, index, index) -> vector<8xf32>
          %cv6 = func.call @k3k_mla_row8(%pool2, %row6, %col) : (memref<?x?x!act>, index, index) -> vector<8xf32>
          %cv7 = func.call @k3k_mla_row8(%pool2, %row7, %col) : (memref<?x?x!act>, index, index) -> vector<8xf32>
          %u0_0, %u0_1, %u0_2, %u0_3, %u0_4, %u0_5, %u0_6, %u0_7 = func.call @k3k_mla_wsum8(%p, %i, %j, %hu0, %hu1, %hu2, %hu3, %hu4, %hu5, %hu6, %hu7, %cv0, %a0, %a1, %a2, %a3, %a4, %a5, %a6, %a7) : (memref<?x?x?xf32>, index, index, index, index, index, index, index, index, index, index, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>) -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>)
          %u1_0, %u1_1, %u1_2, %u1_3, %u1_4, %u1_5, %u1_6, %u1_7 = func.call @k3k_mla_wsum8(%p, %i, %ju1, %hu0, %hu1, %hu2, %hu3, %hu4, %hu5, %hu6, %hu7, %cv1, %u0_0, %u0_1, %u0_2, %u0_3, %u0_4, %u0_5, %u0_6, %u0_7) : (memref<?x?x?xf32>, index, index, index, index, index, index, index, index, index, index, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>) -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>)
          %u2_0, %u2_1, %u2_2, %u2_3, %u2_4, %u2_5, %u2_6, %u2_7 = func.call @k3k_mla_wsum8(%p, %i, %ju2, %hu0, %hu1, %hu2, %hu3, %hu4, %hu5, %hu6, %hu7, %cv2, %u1_0, %u1_1, %u1_2, %u1_3, %u1_4, %u1_5, %u1_6, %u1_7) : (memref<?x?x?xf32>, index, index, index, index, index, index, index, index, index, index, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>) -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>)
          %u3_0, %u3_1, %u3_2, %u3_3, %u3_4, %u3_5, %u3_6, %u3_7 = func.call @k3k_mla_wsum8(%p, %i, %ju3, %hu0, %hu1, %hu2, %hu3, %hu4, %hu5, %hu6, %hu7, %cv3, %u2_0, %u2_1, %u2_2, %u2_3, %u2_4, %u2_5, %u2_6, %u2_7) : (memref<?x?x?xf32>, index, index, index, index, index, index, index, index, index, index, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>) -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>)
          %u4_0, %u4_1, %u4_2, %u4_3, %u4_4, %u4_5, %u4_6, %u4_7 = func.call @k3k_mla_wsum8(%p, %i, %ju4, %hu0, %hu1, %hu2, %hu3, %hu4, %hu5, %hu6, %hu7, %cv4, %u3_0, %u3_1, %u3_2, %u3_3, %u3_4, %u3_5, %u3_6, %u3_7) : (memref<?x?x?xf32>, index, index, index, index, index, index, index, index, index, index, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>) -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>)
          %u5_0, %u5_1, %u5_2, %u5_3, %u5_4, %u5_5, %u5_6, %u5_7 = func.call @k3k_mla_wsum8(%p, %i, %ju5, %hu0, %hu1, %hu2, %hu3, %hu4, %hu5, %hu6, %hu7, %cv5, %u4_0, %u4_1, %u4_2, %u4_3, %u4_4, %u4_5, %u4_6, %u4_7) : (memref<?x?x?xf32>, index, index, index, index, index, index, index, index, index, index, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>) -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>)
          %u6_0, %u6_1, %u6_2, %u6_3, %u6_4, %u6_5, %u6_6, %u6_7 = func.call @k3k_mla_wsum8(%p, %i, %ju6, %hu0, %hu1, %hu2, %hu3, %hu4, %hu5, %hu6, %hu7, %cv6, %u5_0, %u5_1, %u5_2, %u5_3, %u5_4, %u5_5, %u5_6, %u5_7) : (memref<?x?x?xf32>, index, index, index, index, index, index, index, index, index, index, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>) -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>)
          %u7_0, %u7_1, %u7_2, %u7_3, %u7_4, %u7_5, %u7_6, %u7_7 = func.call @k3k_mla_wsum8(%p, %i, %ju7, %hu0, %hu1, %hu2, %hu3, %hu4, %hu5, %hu6, %hu7, %cv7, %u6_0, %u6_1, %u6_2, %u6_3, %u6_4, %u6_5, %u6_6, %u6_7) : (memref<?x?x?xf32>, index, index, index, index, index, index, index, index, index, index, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>) -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>)
          scf.yield %u7_0, %u7_1, %u7_2, %u7_3, %u7_4, %u7_5, %u7_6, %u7_7 : vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>
      }
      %r0, %r1, %r2, %r3, %r4, %r5, %r6, %r7 = scf.for %j = %jm to %j1 step %c1 iter_args(%a0 = %q0, %a1 = %q1, %a2 = %q2, %a3 = %q3, %a4 = %q4, %a5 = %q5, %a6 = %q6, %a7 = %q7) -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>) {
          %row = memref.load %rows[%i, %j] : memref<?x?xindex>
          %cv = func.call @k3k_mla_row8(%pool2, %row, %col) : (memref<?x?x!act>, index, index) -> vector<8xf32>
          %n0, %n1, %n2, %n3, %n4, %n5, %n6, %n7 = func.call @k3k_mla_wsum8(%p, %i, %j, %hu0, %hu1, %hu2, %hu3, %hu4, %hu5, %hu6, %hu7, %cv, %a0, %a1, %a2, %a3, %a4, %a5, %a6, %a7) : (memref<?x?x?xf32>, index, index, index, index, index, index, index, index, index, index, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>) -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>)
          scf.yield %n0, %n1, %n2, %n3, %n4, %n5, %n6, %n7 : vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>
      }
      scf.yield %r0, %r1, %r2, %r3, %r4, %r5, %r6, %r7 : vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>
    } else {
      %q0, %q1, %q2, %q3, %q4, %q5, %q6, %q7 = scf.for %j = %j0 to %jm step %c4 iter_args(%a0 = %vzero, %a1 = %vzero, %a2 = %vzero, %a3 = %vzero, %a4 = %vzero, %a5 = %vzero, %a6 = %vzero, %a7 = %vzero) -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>) {
          %row0 = memref.load %rows[%i, %j] : memref<?x?xindex>
          %ju1 = arith.addi %j, %c1 : index
          %row1 = memref.load %rows[%i, %ju1] : memref<?x?xindex>
          %ju2 = arith.addi %j, %c2 : index
          %row2 = memref.load %rows[%i, %ju2] : memref<?x?xindex>
          %ju3 = arith.addi %j, %c3 : index
          %row3 = memref.load %rows[%i, %ju3] : memref<?x?xindex>
          %cv0 = func.call @k3k_mla_row8_any(%pool2, %row0, %col, %r) : (memref<?x?x!act>, index, index, index) -> vector<8xf32>
          %cv1 = func.call @k3k_mla_row8_any(%pool2, %row1, %col, %r) : (memref<?x?x!act>, index, index, index) -> vector<8xf32>
          %cv2 = func.call @k3k_mla_row8_any(%pool2, %row2, %col, %r) : (memref<?x?x!act>, index, index, index) -> vector<8xf32>
          %cv3 = func.call @k3k_mla_row8_any(%pool2, %row3, %col, %r) : (memref<?x?x!act>, index, index, index) -> vector<8xf32>
          %u0_0, %u0_1, %u0_2, %u0_3, %u0_4, %u0_5, %u0_6, %u0_7 = func.call @k3k_mla_wsum8(%p, %i, %j, %hu0, %hu1, %hu2, %hu3, %hu4, %hu5, %hu6, %hu7, %cv0, %a0, %a1, %a2, %a3, %a4, %a5, %a6, %a7) : (memref<?x?x?xf32>, index, index, index, index, index, index, index, index, index, index, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>) -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>)
          %u1_0, %u1_1, %u1_2, %u1_3, %u1_4, %u1_5, %u1_6, %u1_7 = func.call @k3k_mla_wsum8(%p, %i, %ju1, %hu0, %hu1, %hu2, %hu3, %hu4, %hu5, %hu6, %hu7, %cv1, %u0_0, %u0_1, %u0_2, %u0_3, %u0_4, %u0_5, %u0_6, %u0_7) : (memref<?x?x?xf32>, index, index, index, index, index, index, index, index, index, index, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>) -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>)
          %u2_0, %u2_1, %u2_2, %u2_3, %u2_4, %u2_5, %u2_6, %u2_7 = func.call @k3k_mla_wsum8(%p, %i, %ju2, %hu0, %hu1, %hu2, %hu3, %hu4, %hu5, %hu6, %hu7, %cv2, %u1_0, %u1_1, %u1_2, %u1_3, %u1_4, %u1_5, %u1_6, %u1_7) : (memref<?x?x?xf32>, index, index, index, index, index, index, index, index, index, index, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>) -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>)
          %u3_0, %u3_1, %u3_2, %u3_3, %u3_4, %u3_5, %u3_6, %u3_7 = func.call @k3k_mla_wsum8(%p, %i, %ju3, %hu0, %hu1, %hu2, %hu3, %hu4, %hu5, %hu6, %hu7, %cv3, %u2_0, %u2_1, %u2_2, %u2_3, %u2_4, %u2_5, %u2_6, %u2_7) : (memref<?x?x?xf32>, index, index, index, index, index, index, index, index, index, index, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>) -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>)
          scf.yield %u3_0, %u3_1, %u3_2, %u3_3, %u3_4, %u3_5, %u3_6, %u3_7 : vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>
      }
      %r0, %r1, %r2, %r3, %r4, %r5, %r6, %r7 = scf.for %j = %jm to %j1 step %c1 iter_args(%a0 = %q0, %a1 = %q1, %a2 = %q2, %a3 = %q3, %a4 = %q4, %a5 = %q5, %a6 = %q6, %a7 = %q7) -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>) {
          %row = memref.load %rows[%i, %j] : memref<?x?xindex>
          %cv = func.call @k3k_mla_row8_any(%pool2, %row, %col, %r) : (memref<?x?x!act>, index, index, index) -> vector<8xf32>
          %n0, %n1, %n2, %n3, %n4, %n5, %n6, %n7 = func.call @k3k_mla_wsum8(%p, %i, %j, %hu0, %hu1, %hu2, %hu3, %hu4, %hu5, %hu6, %hu7, %cv, %a0, %a1, %a2, %a3, %a4, %a5, %a6, %a7) : (memref<?x?x?xf32>, index, index, index, index, index, index, index, index, index, index, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>) -> (vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>)
          scf.yield %n0, %n1, %n2, %n3, %n4, %n5, %n6, %n7 : vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>
      }
      scf.yield %r0, %r1, %r2, %r3, %r4, %r5, %r6, %r7 : vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>, vector<8xf32>
    }
    func.call @k3k_mla_store_part(%partial, %s0, %i, %h0, %pt, %col, %nh, %r) : (memref<?x?x?x?xf32>, vector<8xf32>, index, index, index, index, index, index) -> ()
    func.call @k3k_mla_store_part(%partial, %s1, %i, %hk1, %pt, %col, %nh, %r) : (memref<?x?x?x?xf32>, vector<8xf32>, index, index, index, index, index, index) -> ()
    func.call @k3k_mla_store_part(%partial, %s2, %i, %hk2, %pt, %col, %nh, %r) : (memref<?x?x?x?xf32>, vector<8xf32>, index, index, index, index, index, index) -> ()
    func.call @k3k_mla_store_part(%partial, %s3, %i, %hk3, %pt, %col, %nh, %r) : (memref<?x?x?x?xf32>, vector<8xf32>, index, index, index, index, index, index) -> ()
    func.call @k3k_mla_store_part(%partial, %s4, %i, %hk4, %pt, %col, %nh, %r) : (memref<?x?x?x?xf32>, vector<8xf32>, index, index, index, index, index, index) -> ()
    func.call @k3k_mla_store_part(%partial, %s5, %i, %hk5, %pt, %col, %nh, %r) : (memref<?x?x?x?xf32>, vector<8xf32>, index, index, index, index, index, index) -> ()
    func.call @k3k_mla_store_part(%partial, %s6, %i, %hk6, %pt, %col, %nh, %r) : (memref<?x?x?x?xf32>, vector<8xf32>, index, index, index, index, index, index) -> ()
    func.call @k3k_mla_store_part(%partial, %s7, %i, %hk7, %pt, %col, %nh, %r) : (memref<?x?x?x?xf32>, vector<8xf32>, index, index, index, index, index, index) -> ()
  }
  return
}

// k3.gated_mla. x: [T, D]; the caches are (pool [pages, P, R+dr], page
// tables [S, n], lengths [S]) of S = 1 sequence (the T tokens are one
// segment, written at positions len .. len+T-1) or of S = T sequences (a
// decode batch: token i is the next token of sequence i, written at
// position len_i). Returns concat_h o_h ⊙ gate, [T, H·dv].
func.func private @k3k_gated_mla(%x: tensor<?x?x!act>, %wqa: tensor<?x?xbf16>, %gqa: tensor<?xbf16>,
                                 %wqb: tensor<?x?xbf16>, %wkva: tensor<?x?xbf16>, %gkva: tensor<?xbf16>,
                                 %wkvb: tensor<?x?xbf16>, %wg: tensor<?x?xbf16>, %hasgate: i1,
                                 %pool: memref<?x?x?x!act>, %table: memref<?x?xi32>, %lenm: memref<?xi64>,
                                 %nh: index, %dn: index, %dr: index, %dvh: index,
                                 %scale: f32, %qeps: f32, %kveps: f32) -> tensor<?x?x!act> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %ninf = arith.constant 0xFF800000 : f32
  %t = tensor.dim %x, %c0 : tensor<?x?x!act>
  %r = tensor.dim %gkva, %c0 : tensor<?xbf16>
  %psz = memref.dim %pool, %c1 : memref<?x?x?x!act>
  %nseq = memref.dim %lenm, %c0 : memref<?xi64>
  %pertoken = arith.cmpi ugt, %nseq, %c1 : index
  // The first sequence's length, read by the host code for the prefill
  // stages (the decode stages and the cache append read the lengths in
  // their kernels).
  %len064 = memref.load %lenm[%c0] : memref<?xi64>
  %len0 = arith.index_cast %len064 : i64 to index
  // The page tables and lengths are host memory mapped into the device
  // (docs/ABI.md), which a GPU kernel reads over the bus. One parallel loop
  // (one kernel) copies the lengths and the pages in use (through position
  // len_s + T - 1, or the whole row if that is past it) to temporaries,
  // which the kernels below read; the host code keeps reading %lenm.
  %nrow = memref.dim %table, %c0 : memref<?x?xi32>
  %npg = memref.dim %table, %c1 : memref<?x?xi32>
  %lend = memref.alloc(%nseq) : memref<?xi64>
  %tabd = memref.alloc(%nrow, %npg) : memref<?x?xi32>
  %ncopy = arith.maxui %nrow, %nseq : index
  %npg1 = arith.addi %npg, %c1 : index
  scf.parallel (%s, %g) = (%c0, %c0) to (%ncopy, %npg1) step (%c1, %c1) {
    %sin = arith.cmpi ult, %s, %nseq : index
    %sl = arith.select %sin, %s, %c0 : index
    %l64 = memref.load %lenm[%sl] : memref<?xi64>
    %isl = arith.cmpi eq, %g, %npg : index
    scf.if %isl {
      scf.if %sin {
        memref.store %l64, %lend[%s] : memref<?xi64>
      }
    } else {
      // Pages 0 .. (len + T - 1) / P of the row.
      %l = arith.index_cast %l64 : i64 to index
      %end = arith.addi %l, %t : index
      %pgs = arith.ceildivui %end, %psz : index
      %use = arith.cmpi ult, %g, %pgs : index
      %row = arith.cmpi ult, %s, %nrow : index
      %copy = arith.andi %use, %row : i1
      scf.if %copy {
        %pid = memref.load %table[%s, %g] : memref<?x?xi32>
        memref.store %pid, %tabd[%s, %g] : memref<?x?xi32>
      }
    }
  }
  %dq = arith.addi %dn, %dr : index
  %dkv = arith.addi %dn, %dvh : index

  // §5.1: c_q, q, [c̃ ; k_r], c.
  %qa = func.call @k3k_linear(%x, %wqa) : (tensor<?x?x!act>, tensor<?x?xbf16>) -> tensor<?x?x!act>
  // The output gate's W_G x (§5.2) with the other products of x, so that
  // k3-group-calls makes them one call (without a gate W_G is [0, 0] and
  // this is [T, 0], not read).
  %gl = func.call @k3k_linear(%x, %wg) : (tensor<?x?x!act>, tensor<?x?xbf16>) -> tensor<?x?x!act>
  %cq = func.call @k3k_rms_norm(%qa, %gqa, %qeps) : (tensor<?x?x!act>, tensor<?xbf16>, f32) -> tensor<?x?x!act>
  %q = func.call @k3k_linear(%cq, %wqb) : (tensor<?x?x!act>, tensor<?x?xbf16>) -> tensor<?x?x!act>
  %kva = func.call @k3k_linear(%x, %wkva) : (tensor<?x?x!act>, tensor<?x?xbf16>) -> tensor<?x?x!act>
  %ct = tensor.extract_slice %kva[0, 0] [%t, %r] [1, 1] : tensor<?x?x!act> to tensor<?x?x!act>
  %c = func.call @k3k_rms_norm(%ct, %gkva, %kveps) : (tensor<?x?x!act>, tensor<?xbf16>, f32) -> tensor<?x?x!act>

  // Append [c ; k_r] of every new token to the cache pages, one element
  // per thread: token i is position i - s of sequence s (s = i per token,
  // else 0).
  %wa = arith.addi %r, %dr : index
  scf.parallel (%i, %e) = (%c0, %c0) to (%t, %wa) step (%c1, %c1) {
    %sq = arith.select %pertoken, %i, %c0 : index
    // The length from memory, not from the host code: the kernel's
    // arguments stay the same from one decode step to the next.
    %l64 = memref.load %lend[%sq] : memref<?xi64>
    %len = arith.index_cast %l64 : i64 to index
    %rel = arith.subi %i, %sq : index
    %pos = arith.addi %len, %rel : index
    %pg = arith.divui %pos, %psz : index
    %off = arith.remui %pos, %psz : index
    %pid32 = memref.load %tabd[%sq, %pg] : memref<?x?xi32>
    %pid = arith.index_cast %pid32 : i32 to index
    %latent = arith.cmpi ult, %e, %r : index
    %v = scf.if %latent -> (!act) {
      %xv = tensor.extract %c[%i, %e] : tensor<?x?x!act>
      scf.yield %xv : !act
    } else {
      %xv = tensor.extract %kva[%i, %e] : tensor<?x?x!act>
      scf.yield %xv : !act
    }
    memref.store %v, %pool[%pid, %off, %e] : memref<?x?x?x!act>
  }

  %w = arith.addi %r, %dr : index

  %hv = arith.muli %nh, %dvh : index
  %o = memref.alloc(%t, %hv) : memref<?x?xf32>
  %decode = arith.cmpi eq, %t, %c1 : index
  %own = arith.ori %pertoken, %decode : i1
  scf.if %own {
    // §5.3 absorbed, per token i (its sequence's len_i cached tokens and
    // itself: n_i = len_i + 1 rows): q̂_h = W_UK[h]ᵀ q_n[h];
    // s_j = (q̂_h·c_j + q_r[h]·k_r,j)·scale; ō_h = Σ_j p_j c_j; o_h = W_UV[h] ō_h.
    // One parallel loop per stage (one GPU kernel each): q̂ [T, H, R],
    // scores [T, H, n], max/exp/sum per (token, head), ō [T, H, R],
    // o [T, H, dv]. Each sum runs in an order fixed by the shapes and the
    // token's own context, never by the batch (docs/NUMERICS.md, "MLA
    // decode"). The stages are sized by the longest n_i (%maxn); a token of
    // a batch reads its n_i from %ntk.
    %maxn = scf.for %i = %c0 to %nseq step %c1 iter_args(%m = %c0) -> (index) {
      %l64 = memref.load %lenm[%i] : memref<?xi64>
      %l = arith.index_cast %l64 : i64 to index
      %n = arith.addi %l, %c1 : index
      %m2 = arith.maxui %m, %n : index
      scf.yield %m2 : index
    }
    // Buffers and grids sized by %maxn rounded up to %kcap rows: the same
    // for 256 consecutive decode steps, so that a step's kernels see the
    // same arguments and grids as the step before (libk3rt_cuda replays
    // its CUDA graph without updating them); rows past a token's n_i are
    // skipped or computed on row n_i - 1 and not stored, as before.
    %kcap = arith.constant 256 : index
    %capb = arith.ceildivui %maxn, %kcap : index
    %cap = arith.muli %capb, %kcap : index
    // Every kernel reads n_i from %ntk (one sequence too), not from an
    // argument that changes every step.
    %yes = arith.constant true
    %ntk = memref.alloc(%t) : memref<?xindex>
    scf.parallel (%i) = (%c0) to (%t) step (%c1) {
      %l64 = memref.load %lend[%i] : memref<?xi64>
      %l = arith.index_cast %l64 : i64 to index
      %n = arith.addi %l, %c1 : index
      memref.store %n, %ntk[%i] : memref<?xindex>
    }
    // q̂ and q_r per token, transposed: qt[i, e, h] for the R + dr elements e
    // of a cache row and the heads h padded to a multiple of %hblk (a padded
    // head repeats head H-1 and is never stored), so that the scores below
    // load the q̂ of 8 heads at once: one kernel, a thread per (token or 8
    // tokens, head, element), the threads of a warp along the weight row
    // (below); the elements past R copy q_r.
    %hblk = arith.constant 8 : index
    %rblk = arith.constant 4 : index
    %nhb = arith.ceildivui %nh, %hblk : index
    %nhp = arith.muli %nhb, %hblk : index
    %hlast = arith.subi %nh, %c1 : index
    %c1q = arith.constant 1 : index
    %c2q = arith.constant 2 : index
    %c3q = arith.constant 3 : index
    %c4q = arith.constant 4 : index
    %qt = memref.alloc(%t, %w, %nhp) {alignment = 64 : i64} : memref<?x?x?xf32>
    %ob = memref.alloc(%t, %nh, %r) : memref<?x?x?xf32>
    %p = memref.alloc(%t, %nh, %cap) : memref<?x?x?xf32>
    %rowsum = memref.alloc(%t, %nh) : memref<?x?xf32>
    // Fewer than 4 tokens: a thread per token (8 tokens per thread would
    // compute the last token up to 7 more times: +0.03 ms at batch 1 on the
    // H200).
    %tlast = arith.subi %t, %c1 : index
    %few = arith.cmpi ult, %t, %c4q : index
    scf.if %few {
      scf.parallel (%i, %hp, %e) = (%c0, %c0, %c0) to (%t, %nhp, %w) step (%c1, %c1, %c1) {
        %h = arith.minui %hp, %hlast : index
        %qbase = arith.muli %h, %dq : index
        %kvbase = arith.muli %h, %dkv : index
        %isq = arith.cmpi ult, %e, %r : index
        scf.if %isq {
          // Four terms per iteration, their loads issued together (the sum
          // still in d order), then the rest one by one.
          %dnr = arith.remui %dn, %c4q : index
          %dn4 = arith.subi %dn, %dnr : index
          %s4 = scf.for %d = %c0 to %dn4 step %c4q iter_args(%a = %zero) -> (f32) {
            %qi0 = arith.addi %qbase, %d : index
            %qv0 = tensor.extract %q[%i, %qi0] : tensor<?x?x!act>
            %qf0 = func.call @k3k_widen(%qv0) : (!act) -> f32
            %row0 = arith.addi %kvbase, %d : index
            %wv0 = tensor.extract %wkvb[%row0, %e] : tensor<?x?xbf16>
            %wf0 = arith.extf %wv0 : bf16 to f32
            %pr0 = arith.mulf %qf0, %wf0 : f32
            %dk1 = arith.addi %d, %c1q : index
            %qi1 = arith.addi %qbase, %dk1 : index
            %qv1 = tensor.extract %q[%i, %qi1] : tensor<?x?x!act>
            %qf1 = func.call @k3k_widen(%qv1) : (!act) -> f32
            %row1 = arith.addi %kvbase, %dk1 : index
            %wv1 = tensor.extract %wkvb[%row1, %e] : tensor<?x?xbf16>
            %wf1 = arith.extf %wv1 : bf16 to f32
            %pr1 = arith.mulf %qf1, %wf1 : f32
            %dk2 = arith.addi %d, %c2q : index
            %qi2 = arith.addi %qbase, %dk2 : index
            %qv2 = tensor.extract %q[%i, %qi2] : tensor<?x?x!act>
            %qf2 = func.call @k3k_widen(%qv2) : (!act) -> f32
            %row2 = arith.addi %kvbase, %dk2 : index
            %wv2 = tensor.extract %wkvb[%row2, %e] : tensor<?x?xbf16>
            %wf2 = arith.extf %wv2 : bf16 to f32
            %pr2 = arith.mulf %qf2, %wf2 : f32
            %dk3 = arith.addi %d, %c3q : index
            %qi3 = arith.addi %qbase, %dk3 : index
            %qv3 = tensor.extract %q[%i, %qi3] : tensor<?x?x!act>
            %qf3 = func.call @k3k_widen(%qv3) : (!act) -> f32
            %row3 = arith.addi %kvbase, %dk3 : index
            %wv3 = tensor.extract %wkvb[%row3, %e] : tensor<?x?xbf16>
            %wf3 = arith.extf %wv3 : bf16 to f32
            %pr3 = arith.mulf %qf3, %wf3 : f32
            %s1 = arith.addf %a, %pr0 : f32
            %s2 = arith.addf %s1, %pr1 : f32
            %s3 = arith.addf %s2, %pr2 : f32
            %s4n = arith.addf %s3, %pr3 : f32
            scf.yield %s4n : f32
          }
          %s = scf.for %d = %dn4 to %dn step %c1 iter_args(%a = %s4) -> (f32) {
            %qi = arith.addi %qbase, %d : index
            %qv = tensor.extract %q[%i, %qi] : tensor<?x?x!act>
            %qf = func.call @k3k_widen(%qv) : (!act) -> f32
            %row = arith.addi %kvbase, %d : index
            %wv = tensor.extract %wkvb[%row, %e] : tensor<?x?xbf16>
            %wf = arith.extf %wv : bf16 to f32
            %pr = arith.mulf %qf, %wf : f32
            %s2 = arith.addf %a, %pr : f32
            scf.yield %s2 : f32
          }
          memref.store %s, %qt[%i, %e, %hp] : memref<?x?x?xf32>
        } else {
          // q_r (element e - R of the head's rope part) as it is.
          %qr0 = arith.addi %qbase, %dn : index
          %qr1 = arith.addi %qr0, %e : index
          %qi = arith.subi %qr1, %r : index
          %qv = tensor.extract %q[%i, %qi] : tensor<?x?x!act>
          %qf = func.call @k3k_widen(%qv) : (!act) -> f32
          memref.store %qf, %qt[%i, %e, %hp] : memref<?x?x?xf32>
        }
      }
    } else {
      // Eight tokens per thread (token block %ib: tokens 8 ib .. 8 ib + 7; a
      // slot past the last token computes the last one again and stores
      // nothing), so that a weight element read serves 8 tokens: a batch of
      // 64 reads W_UK 8 times, not 64. Each token's sum is taken in d order,
      // as by a thread of its own.
      %tb = arith.constant 8 : index
      %ntb = arith.ceildivui %t, %tb : index
      %zero8 = arith.constant dense<0.0> : vector<8xf32>
      // q's rows read 8 elements at a time (@k3k_mla_qk8x8) where q's row
      // length, base and the heads' offsets allow it.
      %qm = bufferization.to_buffer %q read_only : tensor<?x?x!act> to memref<?x?x!act>
      %qrow8 = func.call @k3k_mla_row8_ok(%qm) : (memref<?x?x!act>) -> i1
      %dqr = arith.remui %dq, %tb : index
      %dq8 = arith.cmpi eq, %dqr, %c0 : index
      %qvec = arith.andi %qrow8, %dq8 : i1
      scf.parallel (%ib, %hp, %e) = (%c0, %c0, %c0) to (%ntb, %nhp, %w) step (%c1, %c1, %c1) {
        %h = arith.minui %hp, %hlast : index
        %qbase = arith.muli %h, %dq : index
        %kvbase = arith.muli %h, %dkv : index
        %i0 = arith.muli %ib, %tb : index
        %isq = arith.cmpi ult, %e, %r : index
        scf.if %isq {
          // Sixteen terms per iteration, their loads issued together (the sum
          // still in d order), then the rest one by one. H200 against four:
          // the MLA layer's small kernels 0.122 -> 0.116 ms at batch 8 and
          // 0.683 -> 0.663 at batch 64; the loop above, with sixteen, went
          // 0.043 -> 0.052 at batch 1 and keeps four (BENCHMARKS.md,
          // twenty-fourth session).
          %c8q = arith.constant 8 : index
          %c12q = arith.constant 12 : index
          %c16q = arith.constant 16 : index
          %dnr = arith.remui %dn, %c16q : index
          %dn4 = arith.subi %dn, %dnr : index
          %s4 = scf.for %d = %c0 to %dn4 step %c16q iter_args(%a = %zero8) -> (vector<8xf32>) {
            %qi0 = arith.addi %qbase, %d : index
            %row0 = arith.addi %kvbase, %d : index
            %a4 = scf.if %qvec -> (vector<8xf32>) {
              %b1 = func.call @k3k_mla_qk8x8(%qm, %wkvb, %i0, %tlast, %qi0, %row0, %e, %a) : (memref<?x?x!act>, tensor<?x?xbf16>, index, index, index, index, index, vector<8xf32>) -> vector<8xf32>
              %qi8 = arith.addi %qi0, %c8q : index
              %row8 = arith.addi %row0, %c8q : index
              %b2 = func.call @k3k_mla_qk8x8(%qm, %wkvb, %i0, %tlast, %qi8, %row8, %e, %b1) : (memref<?x?x!act>, tensor<?x?xbf16>, index, index, index, index, index, vector<8xf32>) -> vector<8xf32>
              scf.yield %b2 : vector<8xf32>
            } else {
              %a1 = func.call @k3k_mla_qk4x8(%q, %wkvb, %i0, %tlast, %qi0, %row0, %e, %a) : (tensor<?x?x!act>, tensor<?x?xbf16>, index, index, index, index, index, vector<8xf32>) -> vector<8xf32>
              %qi1 = arith.addi %qi0, %c4q : index
              %row1 = arith.addi %row0, %c4q : index
              %a2 = func.call @k3k_mla_qk4x8(%q, %wkvb, %i0, %tlast, %qi1, %row1, %e, %a1) : (tensor<?x?x!act>, tensor<?x?xbf16>, index, index, index, index, index, vector<8xf32>) -> vector<8xf32>
              %qi2 = arith.addi %qi0, %c8q : index
              %row2 = arith.addi %row0, %c8q : index
              %a3 = func.call @k3k_mla_qk4x8(%q, %wkvb, %i0, %tlast, %qi2, %row2, %e, %a2) : (tensor<?x?x!act>, tensor<?x?xbf16>, index, index, index, index, index, vector<8xf32>) -> vector<8xf32>
              %qi3 = arith.addi %qi0, %c12q : index
              %row3 = arith.addi %row0, %c12q : index
              %a4s = func.call @k3k_mla_qk4x8(%q, %wkvb, %i0, %tlast, %qi3, %row3, %e, %a3) : (tensor<?x?x!act>, tensor<?x?xbf16>, index, index, index, index, index, vector<8xf32>) -> vector<8xf32>
              scf.yield %a4s : vector<8xf32>
            }
            scf.yield %a4 : vector<8xf32>
          }
          %s = scf.for %d = %dn4 to %dn step %c1 iter_args(%a = %s4) -> (vector<8xf32>) {
            %qi = arith.addi %qbase, %d : index
            %qv = func.call @k3k_mla_q8(%q, %i0, %tlast, %qi) : (tensor<?x?x!act>, index, index, index) -> vector<8xf32>
            %row = arith.addi %kvbase, %d : index
            %wv = tensor.extract %wkvb[%row, %e] : tensor<?x?xbf16>
            %wf = arith.extf %wv : bf16 to f32
            %wb = vector.broadcast %wf : f32 to vector<8xf32>
            %pr = arith.mulf %qv, %wb : vector<8xf32>
            %s2 = arith.addf %a, %pr : vector<8xf32>
            scf.yield %s2 : vector<8xf32>
          }
          func.call @k3k_mla_qt8(%qt, %s, %i0, %t, %e, %hp) : (memref<?x?x?xf32>, vector<8xf32>, index, index, index, index) -> ()
        } else {
          // q_r of the block's tokens as it is (the q̂ path's load and store
          // of 8 tokens).
          %qr0 = arith.addi %qbase, %dn : index
          %qr1 = arith.addi %qr0, %e : index
          %qi = arith.subi %qr1, %r : index
          %qv = func.call @k3k_mla_q8(%q, %i0, %tlast, %qi) : (tensor<?x?x!act>, index, index, index) -> vector<8xf32>
          func.call @k3k_mla_qt8(%qt, %qv, %i0, %t, %e, %hp) : (memref<?x?x?xf32>, vector<8xf32>, index, index, index, index) -> ()
        }
      }
    }
    // The cache rows of each token's sequence in order (its page table), and
    // the pool as rows [pages · P, R + dr]: the stages below read the cache
    // in place.
    %rows = memref.alloc(%t, %cap) : memref<?x?xindex>
    scf.parallel (%i, %j) = (%c0, %c0) to (%t, %cap) step (%c1, %c1) {
      %ntok = func.call @k3k_mla_rows(%ntk, %i, %yes, %cap) : (memref<?xindex>, index, i1, index) -> index
      %jin = arith.cmpi ult, %j, %ntok : index
      scf.if %jin {
        %pg = arith.divui %j, %psz : index
        %off = arith.remui %j, %psz : index
        %pid32 = memref.load %tabd[%i, %pg] : memref<?x?xi32>
        %pid = arith.index_cast %pid32 : i32 to index
        %base = arith.muli %pid, %psz : index
        %row = arith.addi %base, %off : index
        memref.store %row, %rows[%i, %j] : memref<?x?xindex>
      }
    }
    %pool2 = memref.collapse_shape %pool [[0, 1], [2]] : memref<?x?x?x!act> into memref<?x?x!act>
    %c8 = arith.constant 8 : index
    func.call @k3k_mla_scores(%qt, %pool2, %rows, %ntk, %p, %scale) : (memref<?x?x?xf32>, memref<?x?x!act>, memref<?x?xindex>, memref<?xindex>, memref<?x?x?xf32>, f32) -> ()
    // Softmax per (token, head) (@k3k_mla_softmax): p = exp(s - max) in
    // place, the sums in rowsum.
    %chunk = arith.constant 512 : index
    %nch = arith.ceildivui %cap, %chunk : index
    %pmax = memref.alloc(%t, %nh, %nch) : memref<?x?x?xf32>
    %rowmax = memref.alloc(%t, %nh) : memref<?x?xf32>
    %psum = memref.alloc(%t, %nh, %nch) : memref<?x?x?xf32>
    func.call @k3k_mla_softmax(%p, %ntk, %pmax, %rowmax, %psum, %rowsum) : (memref<?x?x?xf32>, memref<?xindex>, memref<?x?x?xf32>, memref<?x?xf32>, memref<?x?x?xf32>, memref<?x?xf32>) -> ()
    %parts = arith.constant 32 : index
    // ō in slices of the context (@k3k_mla_wsum).
    %partial = memref.alloc(%t, %nh, %parts, %r) : memref<?x?x?x?xf32>
    func.call @k3k_mla_wsum(%p, %pool2, %rows, %ntk, %partial) : (memref<?x?x?xf32>, memref<?x?x!act>, memref<?x?xindex>, memref<?xindex>, memref<?x?x?x?xf32>) -> ()
    // The slices in order, each element's sum by one thread (the threads of
    // a warp along the row), normalised by the softmax sum.
    scf.parallel (%i, %h, %e) = (%c0, %c0, %c0) to (%t, %nh, %r) step (%c1, %c1, %c1) {
      %acc = scf.for %pt = %c0 to %parts step %c1 iter_args(%a = %zero) -> (f32) {
        %v = memref.load %partial[%i, %h, %pt, %e] : memref<?x?x?x?xf32>
        %s2 = arith.addf %a, %v : f32
        scf.yield %s2 : f32
      }
      %sum = memref.load %rowsum[%i, %h] : memref<?x?xf32>
      %nrm = arith.divf %acc, %sum : f32
      memref.store %nrm, %ob[%i, %h, %e] : memref<?x?x?xf32>
    }
    // o_h = W_UV[h] ō_h. Fewer than 4 tokens: a warp per output element
    // (token, head, d), the warps of a block along d (4 tokens per warp
    // would compute the last token up to 3 more times).
    scf.if %few {
      scf.parallel (%i, %h, %d) = (%c0, %c0, %c0) to (%t, %nh, %dvh) step (%c1, %c1, %c1) {
        %kvbase = arith.muli %h, %dkv : index
        %row0 = arith.addi %kvbase, %dn : index
        %row = arith.addi %row0, %d : index
        %acc = scf.for %e = %c0 to %r step %c1 iter_args(%a = %zero) -> (f32) {
          %wv = tensor.extract %wkvb[%row, %e] : tensor<?x?xbf16>
          %wf = arith.extf %wv : bf16 to f32
          %ov = memref.load %ob[%i, %h, %e] : memref<?x?x?xf32>
          %pr = arith.mulf %wf, %ov : f32
          %s2 = arith.addf %a, %pr : f32
          scf.yield %s2 : f32
        }
        %hb = arith.muli %h, %dvh : index
        %col = arith.addi %hb, %d : index
        memref.store %acc, %o[%i, %col] : memref<?x?xf32>
      }
    } else {
      // Else a warp per 4 tokens x 4 output elements (token block %ob4,
      // head, element block %db), the warps of a block along the elements:
      // a lane reads each W_UV element it needs once for 4 tokens and each
      // ō element once for 4 outputs (with a warp per output, a batch of 64
      // read W_UV 64 times and each ō once per output element: 0.8 and 1.6
      // GB per K3 MLA layer). With 4 x 8 outputs per warp a lane held 130
      // registers, one block of 8 warps fit an SM and the warps waited on
      // their loads: H200, batch 64, 181 -> about 125 us per MLA layer
      // (BENCHMARKS.md, thirty-third session). k3-gpu-warp-reduce splits
      // each of the 16 sums over the lanes as it splits one, so each
      // output's sum is taken as before. A token or element past the last
      // computes the last one again and stores nothing.
      %tk = arith.constant 4 : index
      %dj = arith.constant 4 : index
      %c0u = arith.constant 0 : index
      %c1u = arith.constant 1 : index
      %c2u = arith.constant 2 : index
      %c3u = arith.constant 3 : index
      %ntb4 = arith.ceildivui %t, %tk : index
      %ndb = arith.ceildivui %dvh, %dj : index
      %dlast = arith.subi %dvh, %c1 : index
      scf.parallel (%ob4, %h, %db) = (%c0, %c0, %c0) to (%ntb4, %nh, %ndb) step (%c1, %c1, %c1) {
        %kvbase = arith.muli %h, %dkv : index
        %row0 = arith.addi %kvbase, %dn : index
        %ti0 = arith.muli %ob4, %tk : index
        %dbase = arith.muli %db, %dj : index
        %tk0a = arith.addi %ti0, %c0u : index
        %tk0 = arith.minui %tk0a, %tlast : index
        %tk1a = arith.addi %ti0, %c1u : index
        %tk1 = arith.minui %tk1a, %tlast : index
        %tk2a = arith.addi %ti0, %c2u : index
        %tk2 = arith.minui %tk2a, %tlast : index
        %tk3a = arith.addi %ti0, %c3u : index
        %tk3 = arith.minui %tk3a, %tlast : index
        %dd0a = arith.addi %dbase, %c0u : index
        %dd0 = arith.minui %dd0a, %dlast : index
        %wr0 = arith.addi %row0, %dd0 : index
        %dd1a = arith.addi %dbase, %c1u : index
        %dd1 = arith.minui %dd1a, %dlast : index
        %wr1 = arith.addi %row0, %dd1 : index
        %dd2a = arith.addi %dbase, %c2u : index
        %dd2 = arith.minui %dd2a, %dlast : index
        %wr2 = arith.addi %row0, %dd2 : index
        %dd3a = arith.addi %dbase, %c3u : index
        %dd3 = arith.minui %dd3a, %dlast : index
        %wr3 = arith.addi %row0, %dd3 : index
        %acc:16 = scf.for %e = %c0 to %r step %c1 iter_args(%a0_0 = %zero, %a0_1 = %zero, %a0_2 = %zero, %a0_3 = %zero, %a1_0 = %zero, %a1_1 = %zero, %a1_2 = %zero, %a1_3 = %zero, %a2_0 = %zero, %a2_1 = %zero, %a2_2 = %zero, %a2_3 = %zero, %a3_0 = %zero, %a3_1 = %zero, %a3_2 = %zero, %a3_3 = %zero) -> (f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32) {
          %wv0 = tensor.extract %wkvb[%wr0, %e] : tensor<?x?xbf16>
          %wf0 = arith.extf %wv0 : bf16 to f32
          %wv1 = tensor.extract %wkvb[%wr1, %e] : tensor<?x?xbf16>
          %wf1 = arith.extf %wv1 : bf16 to f32
          %wv2 = tensor.extract %wkvb[%wr2, %e] : tensor<?x?xbf16>
          %wf2 = arith.extf %wv2 : bf16 to f32
          %wv3 = tensor.extract %wkvb[%wr3, %e] : tensor<?x?xbf16>
          %wf3 = arith.extf %wv3 : bf16 to f32
          %ov0 = memref.load %ob[%tk0, %h, %e] : memref<?x?x?xf32>
          %ov1 = memref.load %ob[%tk1, %h, %e] : memref<?x?x?xf32>
          %ov2 = memref.load %ob[%tk2, %h, %e] : memref<?x?x?xf32>
          %ov3 = memref.load %ob[%tk3, %h, %e] : memref<?x?x?xf32>
          %p0_0 = arith.mulf %wf0, %ov0 : f32
          %s0_0 = arith.addf %a0_0, %p0_0 : f32
          %p0_1 = arith.mulf %wf0, %ov1 : f32
          %s0_1 = arith.addf %a0_1, %p0_1 : f32
          %p0_2 = arith.mulf %wf0, %ov2 : f32
          %s0_2 = arith.addf %a0_2, %p0_2 : f32
          %p0_3 = arith.mulf %wf0, %ov3 : f32
          %s0_3 = arith.addf %a0_3, %p0_3 : f32
          %p1_0 = arith.mulf %wf1, %ov0 : f32
          %s1_0 = arith.addf %a1_0, %p1_0 : f32
          %p1_1 = arith.mulf %wf1, %ov1 : f32
          %s1_1 = arith.addf %a1_1, %p1_1 : f32
          %p1_2 = arith.mulf %wf1, %ov2 : f32
          %s1_2 = arith.addf %a1_2, %p1_2 : f32
          %p1_3 = arith.mulf %wf1, %ov3 : f32
          %s1_3 = arith.addf %a1_3, %p1_3 : f32
          %p2_0 = arith.mulf %wf2, %ov0 : f32
          %s2_0 = arith.addf %a2_0, %p2_0 : f32
          %p2_1 = arith.mulf %wf2, %ov1 : f32
          %s2_1 = arith.addf %a2_1, %p2_1 : f32
          %p2_2 = arith.mulf %wf2, %ov2 : f32
          %s2_2 = arith.addf %a2_2, %p2_2 : f32
          %p2_3 = arith.mulf %wf2, %ov3 : f32
          %s2_3 = arith.addf %a2_3, %p2_3 : f32
          %p3_0 = arith.mulf %wf3, %ov0 : f32
          %s3_0 = arith.addf %a3_0, %p3_0 : f32
          %p3_1 = arith.mulf %wf3, %ov1 : f32
          %s3_1 = arith.addf %a3_1, %p3_1 : f32
          %p3_2 = arith.mulf %wf3, %ov2 : f32
          %s3_2 = arith.addf %a3_2, %p3_2 : f32
          %p3_3 = arith.mulf %wf3, %ov3 : f32
          %s3_3 = arith.addf %a3_3, %p3_3 : f32
          scf.yield %s0_0, %s0_1, %s0_2, %s0_3, %s1_0, %s1_1, %s1_2, %s1_3, %s2_0, %s2_1, %s2_2, %s2_3, %s3_0, %s3_1, %s3_2, %s3_3 : f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32
        }
        %hb = arith.muli %h, %dvh : index
        %din0 = arith.cmpi ult, %dd0a, %dvh : index
        %col0 = arith.addi %hb, %dd0 : index
        %din1 = arith.cmpi ult, %dd1a, %dvh : index
        %col1 = arith.addi %hb, %dd1 : index
        %din2 = arith.cmpi ult, %dd2a, %dvh : index
        %col2 = arith.addi %hb, %dd2 : index
        %din3 = arith.cmpi ult, %dd3a, %dvh : index
        %col3 = arith.addi %hb, %dd3 : index
        %tin0 = arith.cmpi ult, %tk0a, %t : index
        %tin1 = arith.cmpi ult, %tk1a, %t : index
        %tin2 = arith.cmpi ult, %tk2a, %t : index
        %tin3 = arith.cmpi ult, %tk3a, %t : index
        %in0_0 = arith.andi %din0, %tin0 : i1
        scf.if %in0_0 {
          memref.store %acc#0, %o[%tk0, %col0] : memref<?x?xf32>
        }
        %in0_1 = arith.andi %din0, %tin1 : i1
        scf.if %in0_1 {
          memref.store %acc#1, %o[%tk1, %col0] : memref<?x?xf32>
        }
        %in0_2 = arith.andi %din0, %tin2 : i1
        scf.if %in0_2 {
          memref.store %acc#2, %o[%tk2, %col0] : memref<?x?xf32>
        }
        %in0_3 = arith.andi %din0, %tin3 : i1
        scf.if %in0_3 {
          memref.store %acc#3, %o[%tk3, %col0] : memref<?x?xf32>
        }
        %in1_0 = arith.andi %din1, %tin0 : i1
        scf.if %in1_0 {
          memref.store %acc#4, %o[%tk0, %col1] : memref<?x?xf32>
        }
        %in1_1 = arith.andi %din1, %tin1 : i1
        scf.if %in1_1 {
          memref.store %acc#5, %o[%tk1, %col1] : memref<?x?xf32>
        }
        %in1_2 = arith.andi %din1, %tin2 : i1
        scf.if %in1_2 {
          memref.store %acc#6, %o[%tk2, %col1] : memref<?x?xf32>
        }
        %in1_3 = arith.andi %din1, %tin3 : i1
        scf.if %in1_3 {
          memref.store %acc#7, %o[%tk3, %col1] : memref<?x?xf32>
        }
        %in2_0 = arith.andi %din2, %tin0 : i1
        scf.if %in2_0 {
          memref.store %acc#8, %o[%tk0, %col2] : memref<?x?xf32>
        }
        %in2_1 = arith.andi %din2, %tin1 : i1
        scf.if %in2_1 {
          memref.store %acc#9, %o[%tk1, %col2] : memref<?x?xf32>
        }
        %in2_2 = arith.andi %din2, %tin2 : i1
        scf.if %in2_2 {
          memref.store %acc#10, %o[%tk2, %col2] : memref<?x?xf32>
        }
        %in2_3 = arith.andi %din2, %tin3 : i1
        scf.if %in2_3 {
          memref.store %acc#11, %o[%tk3, %col2] : memref<?x?xf32>
        }
        %in3_0 = arith.andi %din3, %tin0 : i1
        scf.if %in3_0 {
          memref.store %acc#12, %o[%tk0, %col3] : memref<?x?xf32>
        }
        %in3_1 = arith.andi %din3, %tin1 : i1
        scf.if %in3_1 {
          memref.store %acc#13, %o[%tk1, %col3] : memref<?x?xf32>
        }
        %in3_2 = arith.andi %din3, %tin2 : i1
        scf.if %in3_2 {
          memref.store %acc#14, %o[%tk2, %col3] : memref<?x?xf32>
        }
        %in3_3 = arith.andi %din3, %tin3 : i1
        scf.if %in3_3 {
          memref.store %acc#15, %o[%tk3, %col3] : memref<?x?xf32>
        }
      }
    }
  } else {
    // §5.2 naive: per head key [k_n ; k_r] and value v from W_UKV c, causal
    // softmax over the cached tokens and the segment.
    // One sequence: its length and page table row 0. The whole cache, in
    // order: [len + T, R + dr] (f32 values of the cache).
    %ntok = arith.addi %len0, %t : index
    %all = memref.alloc(%ntok, %w) : memref<?x?xf32>
    scf.parallel (%j, %e) = (%c0, %c0) to (%ntok, %w) step (%c1, %c1) {
      %pg = arith.divui %j, %psz : index
      %off = arith.remui %j, %psz : index
      %pid32 = memref.load %tabd[%c0, %pg] : memref<?x?xi32>
      %pid = arith.index_cast %pid32 : i32 to index
      %v = memref.load %pool[%pid, %off, %e] : memref<?x?x?x!act>
      %vf = func.call @k3k_widen(%v) : (!act) -> f32
      memref.store %vf, %all[%j, %e] : memref<?x?xf32>
    }

    %callt = bufferization.to_tensor %all restrict : memref<?x?xf32> to tensor<?x?xf32>
    %cl = tensor.extract_slice %callt[0, 0] [%ntok, %r] [1, 1] : tensor<?x?xf32> to tensor<?x?xf32>
    %ca = func.call @k3k_narrow2(%cl) : (tensor<?x?xf32>) -> tensor<?x?x!act>
    %kv = func.call @k3k_linear(%ca, %wkvb) : (tensor<?x?x!act>, tensor<?x?xbf16>) -> tensor<?x?x!act>
    // In parallel stages as at decode: the scores of every (query, head,
    // cached token) (those after the query are computed and not used), the
    // maximum, exp in place (0 after the query), the sum, and each output
    // element's sum over the visible tokens.
    %p = memref.alloc(%t, %nh, %ntok) : memref<?x?x?xf32>
    scf.parallel (%i, %h, %j) = (%c0, %c0, %c0) to (%t, %nh, %ntok) step (%c1, %c1, %c1) {
      %qbase = arith.muli %h, %dq : index
      %kvbase = arith.muli %h, %dkv : index
      %s1 = scf.for %d = %c0 to %dn step %c1 iter_args(%a = %zero) -> (f32) {
        %qi = arith.addi %qbase, %d : index
        %qv = tensor.extract %q[%i, %qi] : tensor<?x?x!act>
        %qf = func.call @k3k_widen(%qv) : (!act) -> f32
        %ki = arith.addi %kvbase, %d : index
        %kvv = tensor.extract %kv[%j, %ki] : tensor<?x?x!act>
        %kf = func.call @k3k_widen(%kvv) : (!act) -> f32
        %pr = arith.mulf %qf, %kf : f32
        %s2 = arith.addf %a, %pr : f32
        scf.yield %s2 : f32
      }
      %s = scf.for %e = %c0 to %dr step %c1 iter_args(%a = %s1) -> (f32) {
        %qi0 = arith.addi %qbase, %dn : index
        %qi = arith.addi %qi0, %e : index
        %qv = tensor.extract %q[%i, %qi] : tensor<?x?x!act>
        %qf = func.call @k3k_widen(%qv) : (!act) -> f32
        %re = arith.addi %r, %e : index
        %kr = memref.load %all[%j, %re] : memref<?x?xf32>
        %pr = arith.mulf %qf, %kr : f32
        %s2 = arith.addf %a, %pr : f32
        scf.yield %s2 : f32
      }
      %sc = arith.mulf %s, %scale : f32
      memref.store %sc, %p[%i, %h, %j] : memref<?x?x?xf32>
    }
    %pmax = memref.alloc(%t, %nh) : memref<?x?xf32>
    scf.parallel (%i, %h) = (%c0, %c0) to (%t, %nh) step (%c1, %c1) {
      %qpos = arith.addi %len0, %i : index
      %nvis = arith.addi %qpos, %c1 : index
      %mx = scf.for %j = %c0 to %nvis step %c1 iter_args(%m = %ninf) -> (f32) {
        %sc = memref.load %p[%i, %h, %j] : memref<?x?x?xf32>
        %m2 = arith.maximumf %m, %sc : f32
        scf.yield %m2 : f32
      }
      memref.store %mx, %pmax[%i, %h] : memref<?x?xf32>
    }
    scf.parallel (%i, %h, %j) = (%c0, %c0, %c0) to (%t, %nh, %ntok) step (%c1, %c1, %c1) {
      %qpos = arith.addi %len0, %i : index
      %vis = arith.cmpi ule, %j, %qpos : index
      %sc = memref.load %p[%i, %h, %j] : memref<?x?x?xf32>
      %mx = memref.load %pmax[%i, %h] : memref<?x?xf32>
      %d = arith.subf %sc, %mx : f32
      %e = math.exp %d : f32
      %v = arith.select %vis, %e, %zero : f32
      memref.store %v, %p[%i, %h, %j] : memref<?x?x?xf32>
    }
    %psum = memref.alloc(%t, %nh) : memref<?x?xf32>
    scf.parallel (%i, %h) = (%c0, %c0) to (%t, %nh) step (%c1, %c1) {
      %qpos = arith.addi %len0, %i : index
      %nvis = arith.addi %qpos, %c1 : index
      %sum = scf.for %j = %c0 to %nvis step %c1 iter_args(%a = %zero) -> (f32) {
        %e = memref.load %p[%i, %h, %j] : memref<?x?x?xf32>
        %s2 = arith.addf %a, %e : f32
        scf.yield %s2 : f32
      }
      memref.store %sum, %psum[%i, %h] : memref<?x?xf32>
    }
    scf.parallel (%i, %h, %d) = (%c0, %c0, %c0) to (%t, %nh, %dvh) step (%c1, %c1, %c1) {
      %qpos = arith.addi %len0, %i : index
      %nvis = arith.addi %qpos, %c1 : index
      %kvbase = arith.muli %h, %dkv : index
      %vi0 = arith.addi %kvbase, %dn : index
      %vi = arith.addi %vi0, %d : index
      %acc = scf.for %j = %c0 to %nvis step %c1 iter_args(%a = %zero) -> (f32) {
        %pj = memref.load %p[%i, %h, %j] : memref<?x?x?xf32>
        %vv = tensor.extract %kv[%j, %vi] : tensor<?x?x!act>
        %vf = func.call @k3k_widen(%vv) : (!act) -> f32
        %pr = arith.mulf %pj, %vf : f32
        %s2 = arith.addf %a, %pr : f32
        scf.yield %s2 : f32
      }
      %sum = memref.load %psum[%i, %h] : memref<?x?xf32>
      %nrm = arith.divf %acc, %sum : f32
      %hb = arith.muli %h, %dvh : index
      %col = arith.addi %hb, %d : index
      memref.store %nrm, %o[%i, %col] : memref<?x?xf32>
    }
  }

  // Output gate σ(W_G x) and the product, each rounded (docs/NUMERICS.md).
  %out = memref.alloc(%t, %hv) : memref<?x?x!act>
  scf.parallel (%i, %col) = (%c0, %c0) to (%t, %hv) step (%c1, %c1) {
    %ov = memref.load %o[%i, %col] : memref<?x?xf32>
    %orr = func.call @k3k_round(%ov) : (f32) -> f32
    %gate = scf.if %hasgate -> (f32) {
      %gv = tensor.extract %gl[%i, %col] : tensor<?x?x!act>
      %gf = func.call @k3k_widen(%gv) : (!act) -> f32
      %sg = func.call @k3k_sigmoid(%gf) : (f32) -> f32
      %sr = func.call @k3k_round(%sg) : (f32) -> f32
      scf.yield %sr : f32
    } else {
      scf.yield %one : f32
    }
    %y = arith.mulf %orr, %gate : f32
    %ya = func.call @k3k_narrow(%y) : (f32) -> !act
    memref.store %ya, %out[%i, %col] : memref<?x?x!act>
  }
  %res = bufferization.to_tensor %out restrict : memref<?x?x!act> to tensor<?x?x!act>
  return %res : tensor<?x?x!act>
}
