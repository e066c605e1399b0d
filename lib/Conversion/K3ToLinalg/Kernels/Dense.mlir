// Dense kernels of the k3 ops (K3_SPEC §2, §3, §4.7, §6.4): linear layers,
// norms, AttnRes, the embedding and the gated MLP. Activations are
// tensor<..x!act>; arithmetic is f32; rounding points follow
// docs/NUMERICS.md. Shapes are dynamic: one kernel serves every layer.

#map_mk = affine_map<(i, j, k) -> (i, k)>
#map_nk = affine_map<(i, j, k) -> (j, k)>
#map_mn = affine_map<(i, j, k) -> (i, j)>
#id2 = affine_map<(i, j) -> (i, j)>
#row2 = affine_map<(i, j) -> (i)>
#col2 = affine_map<(i, j) -> (j)>

// y[T, N] = x[T, K] · W[N, K]ᵀ accumulated in f32 (no rounding). 16 tokens
// and more (tensor cores on a GPU: k3-gpu-mma) as one contraction
// (@k3k_matmul_many); 1 to 15 (a decode step or batch) in @k3k_matmul_few.
// Every sum runs over k in order on the host. `k3.product_group`: the calls
// with one x, with those of @k3k_linear, become one call (k3-group-calls).
func.func private @k3k_matmul_f32(%x: tensor<?x?x!act>, %w: tensor<?x?xbf16>) -> tensor<?x?xf32>
    attributes {k3.product_group = {few = @k3k_matmul_few, many = @k3k_matmul_many,
                                    few_tokens = @k3k_few_tokens}} {
  %c0 = arith.constant 0 : index
  %t = tensor.dim %x, %c0 : tensor<?x?x!act>
  %n = tensor.dim %w, %c0 : tensor<?x?xbf16>
  %out = memref.alloc(%t, %n) : memref<?x?xf32>
  %few = func.call @k3k_few_tokens(%t) : (index) -> i1
  scf.if %few {
    func.call @k3k_matmul_few(%x, %w, %out) : (tensor<?x?x!act>, tensor<?x?xbf16>, memref<?x?xf32>) -> ()
  } else {
    func.call @k3k_matmul_many(%x, %w, %out) : (tensor<?x?x!act>, tensor<?x?xbf16>, memref<?x?xf32>) -> ()
  }
  %r = bufferization.to_tensor %out restrict : memref<?x?xf32> to tensor<?x?xf32>
  return %r : tensor<?x?xf32>
}

// The product of 16 tokens and more (or none) as one contraction.
func.func private @k3k_matmul_many(%x: tensor<?x?x!act>, %w: tensor<?x?xbf16>, %out: memref<?x?xf32>) {
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%out : memref<?x?xf32>)
  %xm = bufferization.to_buffer %x read_only : tensor<?x?x!act> to memref<?x?x!act>
  %wm = bufferization.to_buffer %w read_only : tensor<?x?xbf16> to memref<?x?xbf16>
  linalg.generic {indexing_maps = [#map_mk, #map_nk, #map_mn],
                  iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%xm, %wm : memref<?x?x!act>, memref<?x?xbf16>) outs(%out : memref<?x?xf32>) {
  ^bb0(%a: !act, %b: bf16, %s: f32):
    %af = func.call @k3k_widen(%a) : (!act) -> f32
    %bf = arith.extf %b : bf16 to f32
    %p = arith.mulf %af, %bf : f32
    %q = arith.addf %s, %p : f32
    linalg.yield %q : f32
  }
  return
}

// An output of the few-token products as it is stored: the f32 sum.
func.func private @k3k_sum_f32(%a: f32) -> f32 {
  return %a : f32
}

// The product for 1 to 15 tokens (`k3.skinny_matmul`: on a GPU with a bf16
// library, k3-gpu-skinny-mma gives it a tensor-core kernel that reads each
// weight row once for all the tokens; the body below is what runs
// elsewhere): one token as one contraction, 2 to 15 in blocks of 8 per
// output row, so that each weight row is read once per 8 tokens instead of
// once per token.
func.func private @k3k_matmul_few(%x: tensor<?x?x!act>, %w: tensor<?x?xbf16>, %out: memref<?x?xf32>)
    attributes {k3.skinny_matmul = {out = @k3k_sum_f32}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %t = tensor.dim %x, %c0 : tensor<?x?x!act>
  %one = arith.cmpi eq, %t, %c1 : index
  scf.if %one {
    %zero = arith.constant 0.0 : f32
    linalg.fill ins(%zero : f32) outs(%out : memref<?x?xf32>)
    %xm = bufferization.to_buffer %x read_only : tensor<?x?x!act> to memref<?x?x!act>
    %wm = bufferization.to_buffer %w read_only : tensor<?x?xbf16> to memref<?x?xbf16>
    linalg.generic {indexing_maps = [#map_mk, #map_nk, #map_mn],
                    iterator_types = ["parallel", "parallel", "reduction"]}
        ins(%xm, %wm : memref<?x?x!act>, memref<?x?xbf16>) outs(%out : memref<?x?xf32>) {
    ^bb0(%a: !act, %b: bf16, %s: f32):
      %af = func.call @k3k_widen(%a) : (!act) -> f32
      %bf = arith.extf %b : bf16 to f32
      %p = arith.mulf %af, %bf : f32
      %q = arith.addf %s, %p : f32
      linalg.yield %q : f32
    }
  } else {
    func.call @k3k_matmul_tok8(%x, %w, %out) : (tensor<?x?x!act>, tensor<?x?xbf16>, memref<?x?xf32>) -> ()
  }
  return
}

// The same product for blocks of 8 tokens: each (block, pair of output
// rows j and j + ⌈N/2⌉) sums the two rows against its 8 tokens, so that a
// token's activation is read and widened once for both rows (a block past T
// repeats token T-1, a row past N repeats row N-1; neither is stored).
func.func private @k3k_matmul_tok8(%x: tensor<?x?x!act>, %w: tensor<?x?xbf16>, %out: memref<?x?xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c8 = arith.constant 8 : index
  %c1_t = arith.constant 1 : index
  %c2_t = arith.constant 2 : index
  %c3_t = arith.constant 3 : index
  %c4_t = arith.constant 4 : index
  %c5_t = arith.constant 5 : index
  %c6_t = arith.constant 6 : index
  %c7_t = arith.constant 7 : index
  %zero = arith.constant 0.0 : f32
  %t = tensor.dim %x, %c0 : tensor<?x?x!act>
  %kk = tensor.dim %x, %c1 : tensor<?x?x!act>
  %n = tensor.dim %w, %c0 : tensor<?x?xbf16>
  %tlast = arith.subi %t, %c1 : index
  %nlast = arith.subi %n, %c1 : index
  %nb = arith.ceildivui %t, %c8 : index
  %nh = arith.ceildivui %n, %c2 : index
  scf.parallel (%b, %j) = (%c0, %c0) to (%nb, %nh) step (%c1, %c1) {
    %ju = arith.addi %j, %nh : index
    %j2 = arith.minui %ju, %nlast : index
    %t0 = arith.muli %b, %c8 : index
    %tu0 = arith.minui %t0, %tlast : index
    %tk1 = arith.addi %t0, %c1_t : index
    %tu1 = arith.minui %tk1, %tlast : index
    %tk2 = arith.addi %t0, %c2_t : index
    %tu2 = arith.minui %tk2, %tlast : index
    %tk3 = arith.addi %t0, %c3_t : index
    %tu3 = arith.minui %tk3, %tlast : index
    %tk4 = arith.addi %t0, %c4_t : index
    %tu4 = arith.minui %tk4, %tlast : index
    %tk5 = arith.addi %t0, %c5_t : index
    %tu5 = arith.minui %tk5, %tlast : index
    %tk6 = arith.addi %t0, %c6_t : index
    %tu6 = arith.minui %tk6, %tlast : index
    %tk7 = arith.addi %t0, %c7_t : index
    %tu7 = arith.minui %tk7, %tlast : index
    %s0, %s1, %s2, %s3, %s4, %s5, %s6, %s7, %r0, %r1, %r2, %r3, %r4, %r5, %r6, %r7 = scf.for %k = %c0 to %kk step %c1 iter_args(%a0 = %zero, %a1 = %zero, %a2 = %zero, %a3 = %zero, %a4 = %zero, %a5 = %zero, %a6 = %zero, %a7 = %zero, %b0 = %zero, %b1 = %zero, %b2 = %zero, %b3 = %zero, %b4 = %zero, %b5 = %zero, %b6 = %zero, %b7 = %zero) -> (f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32) {
      %wv = tensor.extract %w[%j, %k] : tensor<?x?xbf16>
      %wf = arith.extf %wv : bf16 to f32
      %wv2 = tensor.extract %w[%j2, %k] : tensor<?x?xbf16>
      %wf2 = arith.extf %wv2 : bf16 to f32
      %x0 = tensor.extract %x[%tu0, %k] : tensor<?x?x!act>
      %xf0 = func.call @k3k_widen(%x0) : (!act) -> f32
      %m0 = arith.mulf %xf0, %wf : f32
      %n0 = arith.addf %a0, %m0 : f32
      %p0 = arith.mulf %xf0, %wf2 : f32
      %q0 = arith.addf %b0, %p0 : f32
      %x1 = tensor.extract %x[%tu1, %k] : tensor<?x?x!act>
      %xf1 = func.call @k3k_widen(%x1) : (!act) -> f32
      %m1 = arith.mulf %xf1, %wf : f32
      %n1 = arith.addf %a1, %m1 : f32
      %p1 = arith.mulf %xf1, %wf2 : f32
      %q1 = arith.addf %b1, %p1 : f32
      %x2 = tensor.extract %x[%tu2, %k] : tensor<?x?x!act>
      %xf2 = func.call @k3k_widen(%x2) : (!act) -> f32
      %m2 = arith.mulf %xf2, %wf : f32
      %n2 = arith.addf %a2, %m2 : f32
      %p2 = arith.mulf %xf2, %wf2 : f32
      %q2 = arith.addf %b2, %p2 : f32
      %x3 = tensor.extract %x[%tu3, %k] : tensor<?x?x!act>
      %xf3 = func.call @k3k_widen(%x3) : (!act) -> f32
      %m3 = arith.mulf %xf3, %wf : f32
      %n3 = arith.addf %a3, %m3 : f32
      %p3 = arith.mulf %xf3, %wf2 : f32
      %q3 = arith.addf %b3, %p3 : f32
      %x4 = tensor.extract %x[%tu4, %k] : tensor<?x?x!act>
      %xf4 = func.call @k3k_widen(%x4) : (!act) -> f32
      %m4 = arith.mulf %xf4, %wf : f32
      %n4 = arith.addf %a4, %m4 : f32
      %p4 = arith.mulf %xf4, %wf2 : f32
      %q4 = arith.addf %b4, %p4 : f32
      %x5 = tensor.extract %x[%tu5, %k] : tensor<?x?x!act>
      %xf5 = func.call @k3k_widen(%x5) : (!act) -> f32
      %m5 = arith.mulf %xf5, %wf : f32
      %n5 = arith.addf %a5, %m5 : f32
      %p5 = arith.mulf %xf5, %wf2 : f32
      %q5 = arith.addf %b5, %p5 : f32
      %x6 = tensor.extract %x[%tu6, %k] : tensor<?x?x!act>
      %xf6 = func.call @k3k_widen(%x6) : (!act) -> f32
      %m6 = arith.mulf %xf6, %wf : f32
      %n6 = arith.addf %a6, %m6 : f32
      %p6 = arith.mulf %xf6, %wf2 : f32
      %q6 = arith.addf %b6, %p6 : f32
      %x7 = tensor.extract %x[%tu7, %k] : tensor<?x?x!act>
      %xf7 = func.call @k3k_widen(%x7) : (!act) -> f32
      %m7 = arith.mulf %xf7, %wf : f32
      %n7 = arith.addf %a7, %m7 : f32
      %p7 = arith.mulf %xf7, %wf2 : f32
      %q7 = arith.addf %b7, %p7 : f32
      scf.yield %n0, %n1, %n2, %n3, %n4, %n5, %n6, %n7, %q0, %q1, %q2, %q3, %q4, %q5, %q6, %q7 : f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32
    }
    %second = arith.cmpi ult, %ju, %n : index
    %in0 = arith.cmpi ult, %t0, %t : index
    scf.if %in0 {
      memref.store %s0, %out[%t0, %j] : memref<?x?xf32>
      scf.if %second {
        memref.store %r0, %out[%t0, %ju] : memref<?x?xf32>
      }
    }
    %in1 = arith.cmpi ult, %tk1, %t : index
    scf.if %in1 {
      memref.store %s1, %out[%tk1, %j] : memref<?x?xf32>
      scf.if %second {
        memref.store %r1, %out[%tk1, %ju] : memref<?x?xf32>
      }
    }
    %in2 = arith.cmpi ult, %tk2, %t : index
    scf.if %in2 {
      memref.store %s2, %out[%tk2, %j] : memref<?x?xf32>
      scf.if %second {
        memref.store %r2, %out[%tk2, %ju] : memref<?x?xf32>
      }
    }
    %in3 = arith.cmpi ult, %tk3, %t : index
    scf.if %in3 {
      memref.store %s3, %out[%tk3, %j] : memref<?x?xf32>
      scf.if %second {
        memref.store %r3, %out[%tk3, %ju] : memref<?x?xf32>
      }
    }
    %in4 = arith.cmpi ult, %tk4, %t : index
    scf.if %in4 {
      memref.store %s4, %out[%tk4, %j] : memref<?x?xf32>
      scf.if %second {
        memref.store %r4, %out[%tk4, %ju] : memref<?x?xf32>
      }
    }
    %in5 = arith.cmpi ult, %tk5, %t : index
    scf.if %in5 {
      memref.store %s5, %out[%tk5, %j] : memref<?x?xf32>
      scf.if %second {
        memref.store %r5, %out[%tk5, %ju] : memref<?x?xf32>
      }
    }
    %in6 = arith.cmpi ult, %tk6, %t : index
    scf.if %in6 {
      memref.store %s6, %out[%tk6, %j] : memref<?x?xf32>
      scf.if %second {
        memref.store %r6, %out[%tk6, %ju] : memref<?x?xf32>
      }
    }
    %in7 = arith.cmpi ult, %tk7, %t : index
    scf.if %in7 {
      memref.store %s7, %out[%tk7, %j] : memref<?x?xf32>
      scf.if %second {
        memref.store %r7, %out[%tk7, %ju] : memref<?x?xf32>
      }
    }
  }
  return
}

// Narrows an f32 tensor to the activation dtype (one rounding).
func.func private @k3k_narrow2(%x: tensor<?x?xf32>) -> tensor<?x?x!act> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %t = tensor.dim %x, %c0 : tensor<?x?xf32>
  %n = tensor.dim %x, %c1 : tensor<?x?xf32>
  %o = tensor.empty(%t, %n) : tensor<?x?x!act>
  %y = linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<?x?xf32>) outs(%o : tensor<?x?x!act>) {
  ^bb0(%a: f32, %b: !act):
    %v = func.call @k3k_narrow(%a) : (f32) -> !act
    linalg.yield %v : !act
  } -> tensor<?x?x!act>
  return %y : tensor<?x?x!act>
}

// Whether a product of %t tokens takes the few-token kernel: 1 to 15.
func.func private @k3k_few_tokens(%t: index) -> i1 {
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %some = arith.cmpi uge, %t, %c1 : index
  %notmany = arith.cmpi ult, %t, %c16 : index
  %few = arith.andi %some, %notmany : i1
  return %few : i1
}

// k3.linear: round(x Wᵀ). `k3.product_group`: k3-group-calls makes the
// calls with one x and several W one call, whose few-token products are
// one kernel (the same sums as these calls).
func.func private @k3k_linear(%x: tensor<?x?x!act>, %w: tensor<?x?xbf16>) -> tensor<?x?x!act>
    attributes {k3.product_group = {few = @k3k_linear_few, many = @k3k_linear_many,
                                    few_tokens = @k3k_few_tokens}} {
  %c0 = arith.constant 0 : index
  %t = tensor.dim %x, %c0 : tensor<?x?x!act>
  %n = tensor.dim %w, %c0 : tensor<?x?xbf16>
  %few = func.call @k3k_few_tokens(%t) : (index) -> i1
  // Both branches write the one result buffer (a tensor-valued scf.if
  // would cost a copy of it).
  %out = memref.alloc(%t, %n) : memref<?x?x!act>
  scf.if %few {
    func.call @k3k_linear_few(%x, %w, %out) : (tensor<?x?x!act>, tensor<?x?xbf16>, memref<?x?x!act>) -> ()
  } else {
    func.call @k3k_linear_many(%x, %w, %out) : (tensor<?x?x!act>, tensor<?x?xbf16>, memref<?x?x!act>) -> ()
  }
  %y = bufferization.to_tensor %out restrict : memref<?x?x!act> to tensor<?x?x!act>
  return %y : tensor<?x?x!act>
}

// k3.linear of 16 tokens and more (or none), rounded (`k3.mma_matmul`: on a
// GPU with a bf16 library, k3-gpu-mma gives it a tensor-core kernel that
// stores each output's rounded sum, with no zeroed f32 product in memory
// first; the body below is what runs elsewhere).
func.func private @k3k_linear_many(%x: tensor<?x?x!act>, %w: tensor<?x?xbf16>, %out: memref<?x?x!act>)
    attributes {k3.mma_matmul = {out = @k3k_narrow}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %t = tensor.dim %x, %c0 : tensor<?x?x!act>
  %n = tensor.dim %w, %c0 : tensor<?x?xbf16>
  %acc = func.call @k3k_matmul_f32(%x, %w) : (tensor<?x?x!act>, tensor<?x?xbf16>) -> tensor<?x?xf32>
  scf.parallel (%i, %j) = (%c0, %c0) to (%t, %n) step (%c1, %c1) {
    %v = tensor.extract %acc[%i, %j] : tensor<?x?xf32>
    %r = func.call @k3k_narrow(%v) : (f32) -> !act
    memref.store %r, %out[%i, %j] : memref<?x?x!act>
  }
  return
}

// k3.linear of 1 to 15 tokens, rounded (`k3.skinny_matmul`, as
// @k3k_matmul_few): one token with each output's sum and its rounding in one
// kernel (no f32 round trip through memory), 2 to 15 through
// @k3k_matmul_few's blocks of 8.
func.func private @k3k_linear_few(%x: tensor<?x?x!act>, %w: tensor<?x?xbf16>, %out: memref<?x?x!act>)
    attributes {k3.skinny_matmul = {out = @k3k_narrow}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %t = tensor.dim %x, %c0 : tensor<?x?x!act>
  %n = tensor.dim %w, %c0 : tensor<?x?xbf16>
  %one = arith.cmpi eq, %t, %c1 : index
  scf.if %one {
    %kk = tensor.dim %x, %c1 : tensor<?x?x!act>
    %zero = arith.constant 0.0 : f32
    %xm = bufferization.to_buffer %x read_only : tensor<?x?x!act> to memref<?x?x!act>
    %wm = bufferization.to_buffer %w read_only : tensor<?x?xbf16> to memref<?x?xbf16>
    scf.parallel (%i, %j) = (%c0, %c0) to (%c1, %n) step (%c1, %c1) {
      %sum = scf.for %k = %c0 to %kk step %c1 iter_args(%a = %zero) -> (f32) {
        %xv = memref.load %xm[%i, %k] : memref<?x?x!act>
        %xf = func.call @k3k_widen(%xv) : (!act) -> f32
        %wv = memref.load %wm[%j, %k] : memref<?x?xbf16>
        %wf = arith.extf %wv : bf16 to f32
        %p = arith.mulf %xf, %wf : f32
        %q = arith.addf %a, %p : f32
        scf.yield %q : f32
      }
      %r = func.call @k3k_narrow(%sum) : (f32) -> !act
      memref.store %r, %out[%i, %j] : memref<?x?x!act>
    }
  } else {
    %acc = memref.alloc(%t, %n) : memref<?x?xf32>
    func.call @k3k_matmul_few(%x, %w, %acc) : (tensor<?x?x!act>, tensor<?x?xbf16>, memref<?x?xf32>) -> ()
    scf.parallel (%i, %j) = (%c0, %c0) to (%t, %n) step (%c1, %c1) {
      %v = memref.load %acc[%i, %j] : memref<?x?xf32>
      %r = func.call @k3k_narrow(%v) : (f32) -> !act
      memref.store %r, %out[%i, %j] : memref<?x?x!act>
    }
  }
  return
}

// k3.linear with a residual term (the MoE's round(R + Sh), §6.3):
// round(round(x Wᵀ) + r), r [T, N]. For 1 to 15 tokens the product's
// kernel adds r as it stores each output (@k3k_linear_add_few); the add's
// own kernel goes.
func.func private @k3k_linear_add(%x: tensor<?x?x!act>, %w: tensor<?x?xbf16>, %r: tensor<?x?x!act>) -> tensor<?x?x!act> {
  %c0 = arith.constant 0 : index
  %t = tensor.dim %x, %c0 : tensor<?x?x!act>
  %n = tensor.dim %w, %c0 : tensor<?x?xbf16>
  %few = func.call @k3k_few_tokens(%t) : (index) -> i1
  %out = memref.alloc(%t, %n) : memref<?x?x!act>
  scf.if %few {
    func.call @k3k_linear_add_few(%x, %w, %r, %out) : (tensor<?x?x!act>, tensor<?x?xbf16>, tensor<?x?x!act>, memref<?x?x!act>) -> ()
  } else {
    func.call @k3k_linear_many(%x, %w, %out) : (tensor<?x?x!act>, tensor<?x?xbf16>, memref<?x?x!act>) -> ()
    func.call @k3k_add_into(%out, %r) : (memref<?x?x!act>, tensor<?x?x!act>) -> ()
  }
  %y = bufferization.to_tensor %out restrict : memref<?x?x!act> to tensor<?x?x!act>
  return %y : tensor<?x?x!act>
}

// @k3k_linear_add of 1 to 15 tokens into %out (`k3.skinny_matmul` with an
// addend: k3-gpu-skinny-mma's kernel stores @k3k_narrow_add(sum, r) of each
// output; the body below is what runs elsewhere).
func.func private @k3k_linear_add_few(%x: tensor<?x?x!act>, %w: tensor<?x?xbf16>, %r: tensor<?x?x!act>, %out: memref<?x?x!act>)
    attributes {k3.skinny_matmul = {out = @k3k_narrow_add, addend}} {
  func.call @k3k_linear_few(%x, %w, %out) : (tensor<?x?x!act>, tensor<?x?xbf16>, memref<?x?x!act>) -> ()
  func.call @k3k_add_into(%out, %r) : (memref<?x?x!act>, tensor<?x?x!act>) -> ()
  return
}

// %out = round(%out + %r), element by element (@k3k_add1).
func.func private @k3k_add_into(%out: memref<?x?x!act>, %r: tensor<?x?x!act>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %t = memref.dim %out, %c0 : memref<?x?x!act>
  %n = memref.dim %out, %c1 : memref<?x?x!act>
  scf.parallel (%i, %j) = (%c0, %c0) to (%t, %n) step (%c1, %c1) {
    %o = memref.load %out[%i, %j] : memref<?x?x!act>
    %v = tensor.extract %r[%i, %j] : tensor<?x?x!act>
    %s = func.call @k3k_add1(%o, %v) : (!act, !act) -> !act
    memref.store %s, %out[%i, %j] : memref<?x?x!act>
  }
  return
}

// An output of @k3k_linear_add_few as it is stored: round(round(sum) + r),
// the two roundings of @k3k_linear_few's store and @k3k_add1.
func.func private @k3k_narrow_add(%sum: f32, %r: !act) -> !act {
  %y = func.call @k3k_narrow(%sum) : (f32) -> !act
  %s = func.call @k3k_add1(%y, %r) : (!act, !act) -> !act
  return %s : !act
}

// k3.lm_head: logits rounded to the activation dtype, returned as f32.
func.func private @k3k_lm_head(%x: tensor<?x?x!act>, %w: tensor<?x?xbf16>) -> tensor<?x?xf32> {
  %c0 = arith.constant 0 : index
  %t = tensor.dim %x, %c0 : tensor<?x?x!act>
  %n = tensor.dim %w, %c0 : tensor<?x?xbf16>
  %out = memref.alloc(%t, %n) : memref<?x?xf32>
  func.call @k3k_lm_head_rounded(%x, %w, %out) : (tensor<?x?x!act>, tensor<?x?xbf16>, memref<?x?xf32>) -> ()
  %y = bufferization.to_tensor %out restrict : memref<?x?xf32> to tensor<?x?xf32>
  return %y : tensor<?x?xf32>
}

// The logits of 1 to 15 tokens (`k3.skinny_matmul`, as @k3k_linear_few):
// each sum and its rounding in one kernel, no second pass over the
// T x vocabulary f32 logits.
func.func private @k3k_lm_head_few(%x: tensor<?x?x!act>, %w: tensor<?x?xbf16>, %out: memref<?x?xf32>)
    attributes {k3.skinny_matmul = {out = @k3k_round}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %t = tensor.dim %x, %c0 : tensor<?x?x!act>
  %n = tensor.dim %w, %c0 : tensor<?x?xbf16>
  %acc = memref.alloc(%t, %n) : memref<?x?xf32>
  func.call @k3k_matmul_few(%x, %w, %acc) : (tensor<?x?x!act>, tensor<?x?xbf16>, memref<?x?xf32>) -> ()
  scf.parallel (%i, %j) = (%c0, %c0) to (%t, %n) step (%c1, %c1) {
    %v = memref.load %acc[%i, %j] : memref<?x?xf32>
    %r = func.call @k3k_round(%v) : (f32) -> f32
    memref.store %r, %out[%i, %j] : memref<?x?xf32>
  }
  return
}

// The logits of k3.lm_head (`k3.mma_matmul`, as @k3k_linear_many: from 16
// tokens on, the GPU's tensor-core kernel stores each rounded sum; 1 to 15
// tokens are @k3k_lm_head_few's).
func.func private @k3k_lm_head_rounded(%x: tensor<?x?x!act>, %w: tensor<?x?xbf16>, %out: memref<?x?xf32>)
    attributes {k3.mma_matmul = {out = @k3k_round}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %t = tensor.dim %x, %c0 : tensor<?x?x!act>
  %some = arith.cmpi uge, %t, %c1 : index
  %notmany = arith.cmpi ult, %t, %c16 : index
  %few = arith.andi %some, %notmany : i1
  scf.if %few {
    func.call @k3k_lm_head_few(%x, %w, %out) : (tensor<?x?x!act>, tensor<?x?xbf16>, memref<?x?xf32>) -> ()
  } else {
    %acc = func.call @k3k_matmul_f32(%x, %w) : (tensor<?x?x!act>, tensor<?x?xbf16>) -> tensor<?x?xf32>
    %n = tensor.dim %acc, %c1 : tensor<?x?xf32>
    scf.parallel (%i, %j) = (%c0, %c0) to (%t, %n) step (%c1, %c1) {
      %v = tensor.extract %acc[%i, %j] : tensor<?x?xf32>
      %r = func.call @k3k_round(%v) : (f32) -> f32
      memref.store %r, %out[%i, %j] : memref<?x?xf32>
    }
  }
  return
}

// k3.embedding: x0[t] = table[tokens[t]] (§3.2).
func.func private @k3k_embedding(%tok: tensor<?xi32>, %table: tensor<?x?xbf16>) -> tensor<?x?x!act> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %t = tensor.dim %tok, %c0 : tensor<?xi32>
  %d = tensor.dim %table, %c1 : tensor<?x?xbf16>
  // The token ids are host memory mapped into the device (docs/ABI.md),
  // which a GPU kernel reads over the bus: a copy first (one read per
  // token), so that the gather's threads read the ids from device memory
  // (H200: 16 us for one token, 76 us for 64, BENCHMARKS.md fourteenth
  // session).
  %tokm = bufferization.to_buffer %tok read_only : tensor<?xi32> to memref<?xi32>
  %tokd = memref.alloc(%t) : memref<?xi32>
  scf.parallel (%i) = (%c0) to (%t) step (%c1) {
    %v = memref.load %tokm[%i] : memref<?xi32>
    memref.store %v, %tokd[%i] : memref<?xi32>
  }
  %toks = bufferization.to_tensor %tokd restrict : memref<?xi32> to tensor<?xi32>
  %o = tensor.empty(%t, %d) : tensor<?x?x!act>
  %y = linalg.generic {indexing_maps = [#row2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%toks : tensor<?xi32>) outs(%o : tensor<?x?x!act>) {
  ^bb0(%id: i32, %b: !act):
    %j = linalg.index 1 : index
    %row = arith.index_cast %id : i32 to index
    %v = tensor.extract %table[%row, %j] : tensor<?x?xbf16>
    %vf = arith.extf %v : bf16 to f32
    %va = func.call @k3k_narrow(%vf) : (f32) -> !act
    linalg.yield %va : !act
  } -> tensor<?x?x!act>
  return %y : tensor<?x?x!act>
}

// Per-row sum of squares in f32.
func.func private @k3k_rms_sumsq(%x: tensor<?x?x!act>) -> tensor<?xf32> {
  %c0 = arith.constant 0 : index
  %t = tensor.dim %x, %c0 : tensor<?x?x!act>
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%t) : tensor<?xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e : tensor<?xf32>) -> tensor<?xf32>
  %ss = linalg.generic {indexing_maps = [#id2, #row2], iterator_types = ["parallel", "reduction"]}
      ins(%x : tensor<?x?x!act>) outs(%acc : tensor<?xf32>) {
  ^bb0(%a: !act, %s: f32):
    %af = func.call @k3k_widen(%a) : (!act) -> f32
    %sq = arith.mulf %af, %af : f32
    %r = arith.addf %s, %sq : f32
    linalg.yield %r : f32
  } -> tensor<?xf32>
  return %ss : tensor<?xf32>
}

// k3.rms_norm (§2): y = round(round(x · inv) · γ), inv = 1 / sqrt(mean(x²)
// + eps) in f32.
func.func private @k3k_rms_norm(%x: tensor<?x?x!act>, %g: tensor<?xbf16>, %eps: f32) -> tensor<?x?x!act> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %t = tensor.dim %x, %c0 : tensor<?x?x!act>
  %d = tensor.dim %x, %c1 : tensor<?x?x!act>
  %out = memref.alloc(%t, %d) : memref<?x?x!act>
  func.call @k3k_rms_norm_rows(%x, %g, %eps, %out) : (tensor<?x?x!act>, tensor<?xbf16>, f32, memref<?x?x!act>) -> ()
  %y = bufferization.to_tensor %out restrict : memref<?x?x!act> to tensor<?x?x!act>
  return %y : tensor<?x?x!act>
}

// The same into %out (`k3.rms_norm`: on a GPU, k3-gpu-attn-res-norm gives
// each token one block; the body below is what runs elsewhere), inv
// computed by each element's thread from its row's sum of squares (a few
// operations instead of a kernel of its own).
func.func private @k3k_rms_norm_rows(%x: tensor<?x?x!act>, %g: tensor<?xbf16>, %eps: f32, %out: memref<?x?x!act>)
    attributes {k3.rms_norm = {widen = @k3k_widen, narrow = @k3k_narrow, round = @k3k_round}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %t = tensor.dim %x, %c0 : tensor<?x?x!act>
  %d = tensor.dim %x, %c1 : tensor<?x?x!act>
  %ss = func.call @k3k_rms_sumsq(%x) : (tensor<?x?x!act>) -> tensor<?xf32>
  %di = arith.index_cast %d : index to i64
  %df = arith.sitofp %di : i64 to f32
  %o = tensor.empty(%t, %d) : tensor<?x?x!act>
  %y = linalg.generic {indexing_maps = [#id2, #row2, #col2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%x, %ss, %g : tensor<?x?x!act>, tensor<?xf32>, tensor<?xbf16>) outs(%o : tensor<?x?x!act>) {
  ^bb0(%a: !act, %sq: f32, %w: bf16, %b: !act):
    %m = arith.divf %sq, %df : f32
    %me = arith.addf %m, %eps : f32
    %r_sqrt = math.sqrt %me : f32
    %r_one = arith.constant 1.0 : f32
    %s = arith.divf %r_one, %r_sqrt : f32
    %af = func.call @k3k_widen(%a) : (!act) -> f32
    %n = arith.mulf %af, %s : f32
    %nr = func.call @k3k_round(%n) : (f32) -> f32
    %wf = arith.extf %w : bf16 to f32
    %p = arith.mulf %nr, %wf : f32
    %r = func.call @k3k_narrow(%p) : (f32) -> !act
    linalg.yield %r : !act
  } -> tensor<?x?x!act>
  %ym = bufferization.to_buffer %y read_only : tensor<?x?x!act> to memref<?x?x!act>
  memref.copy %ym, %out : memref<?x?x!act> to memref<?x?x!act>
  return
}

// k3.gated_rms_norm (§4.7): per head, RMSNorm(o) · γ · σ(z), one rounding.
func.func private @k3k_gated_rms_norm(%o: tensor<?x?x?x!act>, %z: tensor<?x?x?x!act>, %g: tensor<?xf32>, %eps: f32) -> tensor<?x?x?x!act> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %t = tensor.dim %o, %c0 : tensor<?x?x?x!act>
  %h = tensor.dim %o, %c1 : tensor<?x?x?x!act>
  %d = tensor.dim %o, %c2 : tensor<?x?x?x!act>
  %out = memref.alloc(%t, %h, %d) : memref<?x?x?x!act>
  func.call @k3k_gated_rms_norm_rows(%o, %z, %g, %eps, %out) : (tensor<?x?x?x!act>, tensor<?x?x?x!act>, tensor<?xf32>, f32, memref<?x?x?x!act>) -> ()
  %y = bufferization.to_tensor %out restrict : memref<?x?x?x!act> to tensor<?x?x?x!act>
  return %y : tensor<?x?x?x!act>
}

// The same into %out (`k3.gated_rms_norm`: on a GPU, k3-gpu-gated-norm gives
// each (token, head) one warp; the body below is what runs elsewhere).
func.func private @k3k_gated_rms_norm_rows(%o: tensor<?x?x?x!act>, %z: tensor<?x?x?x!act>, %g: tensor<?xf32>, %eps: f32, %outm: memref<?x?x?x!act>)
    attributes {k3.gated_rms_norm = {widen = @k3k_widen, narrow = @k3k_narrow}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %t = tensor.dim %o, %c0 : tensor<?x?x?x!act>
  %h = tensor.dim %o, %c1 : tensor<?x?x?x!act>
  %d = tensor.dim %o, %c2 : tensor<?x?x?x!act>
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %e2 = tensor.empty(%t, %h) : tensor<?x?xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e2 : tensor<?x?xf32>) -> tensor<?x?xf32>
  %ss = linalg.generic {indexing_maps = [affine_map<(i, j, k) -> (i, j, k)>, affine_map<(i, j, k) -> (i, j)>],
                        iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%o : tensor<?x?x?x!act>) outs(%acc : tensor<?x?xf32>) {
  ^bb0(%a: !act, %s: f32):
    %af = func.call @k3k_widen(%a) : (!act) -> f32
    %sq = arith.mulf %af, %af : f32
    %r = arith.addf %s, %sq : f32
    linalg.yield %r : f32
  } -> tensor<?x?xf32>
  %di = arith.index_cast %d : index to i64
  %df = arith.sitofp %di : i64 to f32
  %out = tensor.empty(%t, %h, %d) : tensor<?x?x?x!act>
  %y = linalg.generic {indexing_maps = [affine_map<(i, j, k) -> (i, j, k)>, affine_map<(i, j, k) -> (i, j, k)>,
                                        affine_map<(i, j, k) -> (i, j)>, affine_map<(i, j, k) -> (k)>,
                                        affine_map<(i, j, k) -> (i, j, k)>],
                       iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%o, %z, %ss, %g : tensor<?x?x?x!act>, tensor<?x?x?x!act>, tensor<?x?xf32>, tensor<?xf32>)
      outs(%out : tensor<?x?x?x!act>) {
  ^bb0(%a: !act, %zz: !act, %s: f32, %w: f32, %b: !act):
    %af = func.call @k3k_widen(%a) : (!act) -> f32
    %zf = func.call @k3k_widen(%zz) : (!act) -> f32
    %m = arith.divf %s, %df : f32
    %me = arith.addf %m, %eps : f32
    %inv_sqrt = math.sqrt %me : f32
    %inv_one = arith.constant 1.0 : f32
    %inv = arith.divf %inv_one, %inv_sqrt : f32
    %n = arith.mulf %af, %inv : f32
    %nw = arith.mulf %n, %w : f32
    %nz = arith.negf %zf : f32
    %ex = math.exp %nz : f32
    %den = arith.addf %one, %ex : f32
    %sig = arith.divf %one, %den : f32
    %r = arith.mulf %nw, %sig : f32
    %ra = func.call @k3k_narrow(%r) : (f32) -> !act
    linalg.yield %ra : !act
  } -> tensor<?x?x?x!act>
  %ym = bufferization.to_buffer %y read_only : tensor<?x?x?x!act> to memref<?x?x?x!act>
  memref.copy %ym, %outm : memref<?x?x?x!act> to memref<?x?x?x!act>
  return
}

// k3.attn_res (§3.1) over the candidates v = blocks [n - 1, T, D] then last
// [1, T, D] (k3-to-linalg stacks a block's outputs once for all of its
// AttnRes and passes the partial sum apart, so no call copies them):
//   s_i = (Σ_j γ_j p_j v_i[j]) / sqrt(mean(v_i²) + eps), α = softmax(s),
//   h = round(Σ_i α_i v_i).
func.func private @k3k_attn_res(%blocks: tensor<?x?x?x!act>, %last: tensor<?x?x?x!act>, %g: tensor<?xbf16>, %p: tensor<?x?xbf16>, %eps: f32) -> tensor<?x?x!act> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %nb = tensor.dim %blocks, %c0 : tensor<?x?x?x!act>
  %n = arith.addi %nb, %c1 : index
  %t = tensor.dim %blocks, %c1 : tensor<?x?x?x!act>
  %d = tensor.dim %blocks, %c2 : tensor<?x?x?x!act>
  %e3 = tensor.empty(%n, %t, %d) : tensor<?x?x?x!act>
  %v0 = tensor.insert_slice %blocks into %e3[0, 0, 0] [%nb, %t, %d] [1, 1, 1] : tensor<?x?x?x!act> into tensor<?x?x?x!act>
  %v = tensor.insert_slice %last into %v0[%nb, 0, 0] [%c1, %t, %d] [1, 1, 1] : tensor<?x?x?x!act> into tensor<?x?x?x!act>
  %zero = arith.constant 0.0 : f32
  %e2 = tensor.empty(%n, %t) : tensor<?x?xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%e2 : tensor<?x?xf32>) -> tensor<?x?xf32>
  // Sum of squares and the projection onto γ ⊙ p, per candidate and token.
  %ss, %dot = linalg.generic {indexing_maps = [affine_map<(i, t, j) -> (i, t, j)>, affine_map<(i, t, j) -> (j)>,
                                               affine_map<(i, t, j) -> (0, j)>, affine_map<(i, t, j) -> (i, t)>,
                                               affine_map<(i, t, j) -> (i, t)>],
                              iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%v, %g, %p : tensor<?x?x?x!act>, tensor<?xbf16>, tensor<?x?xbf16>) outs(%acc, %acc : tensor<?x?xf32>, tensor<?x?xf32>) {
  ^bb0(%a: !act, %gw: bf16, %pw: bf16, %s: f32, %q: f32):
    %af = func.call @k3k_widen(%a) : (!act) -> f32
    %gf = arith.extf %gw : bf16 to f32
    %pf = arith.extf %pw : bf16 to f32
    %sq = arith.mulf %af, %af : f32
    %s2 = arith.addf %s, %sq : f32
    %gp = arith.mulf %gf, %pf : f32
    %pr = arith.mulf %gp, %af : f32
    %q2 = arith.addf %q, %pr : f32
    linalg.yield %s2, %q2 : f32, f32
  } -> (tensor<?x?xf32>, tensor<?x?xf32>)
  %di = arith.index_cast %d : index to i64
  %df = arith.sitofp %di : i64 to f32
  // Scores, the softmax over candidates and h = Σ_i α_i v_i, α_i = ex_i /
  // sum, one thread per (token, element): each thread takes the n
  // candidates' few operations in order itself (one kernel per step instead
  // of two; every thread computes the same α_i, bit for bit).
  %ssm = bufferization.to_buffer %ss read_only : tensor<?x?xf32> to memref<?x?xf32>
  %dotm = bufferization.to_buffer %dot read_only : tensor<?x?xf32> to memref<?x?xf32>
  %ninf = arith.constant 0xFF800000 : f32
  %out = memref.alloc(%t, %d) : memref<?x?x!act>
  scf.parallel (%tt, %j) = (%c0, %c0) to (%t, %d) step (%c1, %c1) {
    %mx = scf.for %i = %c0 to %n step %c1 iter_args(%m = %ninf) -> (f32) {
      %s = func.call @k3k_attn_res_score(%ssm, %dotm, %i, %tt, %df, %eps) : (memref<?x?xf32>, memref<?x?xf32>, index, index, f32, f32) -> f32
      %m2 = arith.maximumf %s, %m : f32
      scf.yield %m2 : f32
    }
    %sum = scf.for %i = %c0 to %n step %c1 iter_args(%sa = %zero) -> (f32) {
      %s = func.call @k3k_attn_res_score(%ssm, %dotm, %i, %tt, %df, %eps) : (memref<?x?xf32>, memref<?x?xf32>, index, index, f32, f32) -> f32
      %dd = arith.subf %s, %mx : f32
      %x = math.exp %dd : f32
      %r = arith.addf %sa, %x : f32
      scf.yield %r : f32
    }
    %h = scf.for %i = %c0 to %n step %c1 iter_args(%ha = %zero) -> (f32) {
      %s = func.call @k3k_attn_res_score(%ssm, %dotm, %i, %tt, %df, %eps) : (memref<?x?xf32>, memref<?x?xf32>, index, index, f32, f32) -> f32
      %dd = arith.subf %s, %mx : f32
      %x = math.exp %dd : f32
      %al = arith.divf %x, %sum : f32
      %a = tensor.extract %v[%i, %tt, %j] : tensor<?x?x?x!act>
      %af = func.call @k3k_widen(%a) : (!act) -> f32
      %pr = arith.mulf %al, %af : f32
      %r = arith.addf %ha, %pr : f32
      scf.yield %r : f32
    }
    %hn = func.call @k3k_narrow(%h) : (f32) -> !act
    memref.store %hn, %out[%tt, %j] : memref<?x?x!act>
  }
  %res = bufferization.to_tensor %out restrict : memref<?x?x!act> to tensor<?x?x!act>
  return %res : tensor<?x?x!act>
}

// k3.attn_res and the k3.rms_norm of its result (§3.1, §2): the norm before
// each mixer and FFN and the final norm, joined by k3-to-linalg where the
// norm is the AttnRes output's only use. The two kernels, in order.
// `k3.into`: the same into a buffer, after the operands (k3-group-calls
// joins it to the products that alone read its output).
func.func private @k3k_attn_res_norm(%blocks: tensor<?x?x?x!act>, %last: tensor<?x?x?x!act>, %g: tensor<?xbf16>, %p: tensor<?x?xbf16>,
                                     %eps: f32, %gn: tensor<?xbf16>, %eps2: f32) -> tensor<?x?x!act>
    attributes {k3.into = @k3k_attn_res_norm_rows} {
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %t = tensor.dim %last, %c1 : tensor<?x?x?x!act>
  %d = tensor.dim %last, %c2 : tensor<?x?x?x!act>
  %out = memref.alloc(%t, %d) : memref<?x?x!act>
  func.call @k3k_attn_res_norm_rows(%blocks, %last, %g, %p, %eps, %gn, %eps2, %out)
      : (tensor<?x?x?x!act>, tensor<?x?x?x!act>, tensor<?xbf16>, tensor<?x?xbf16>, f32, tensor<?xbf16>, f32, memref<?x?x!act>) -> ()
  %y = bufferization.to_tensor %out restrict : memref<?x?x!act> to tensor<?x?x!act>
  return %y : tensor<?x?x!act>
}

// The same into %out (`k3.attn_res_norm`: on a GPU, k3-gpu-attn-res-norm
// gives each token one block that reads its candidates and writes only the
// normalised row; the body below is what runs elsewhere).
func.func private @k3k_attn_res_norm_rows(%blocks: tensor<?x?x?x!act>, %last: tensor<?x?x?x!act>, %g: tensor<?xbf16>, %p: tensor<?x?xbf16>, %eps: f32,
                                          %gn: tensor<?xbf16>, %eps2: f32, %out: memref<?x?x!act>)
    attributes {k3.attn_res_norm = {widen = @k3k_widen, narrow = @k3k_narrow, round = @k3k_round}} {
  %h = func.call @k3k_attn_res(%blocks, %last, %g, %p, %eps) : (tensor<?x?x?x!act>, tensor<?x?x?x!act>, tensor<?xbf16>, tensor<?x?xbf16>, f32) -> tensor<?x?x!act>
  %y = func.call @k3k_rms_norm(%h, %gn, %eps2) : (tensor<?x?x!act>, tensor<?xbf16>, f32) -> tensor<?x?x!act>
  %ym = bufferization.to_buffer %y read_only : tensor<?x?x!act> to memref<?x?x!act>
  memref.copy %ym, %out : memref<?x?x!act> to memref<?x?x!act>
  return
}

// @k3k_attn_res_norm whose last candidate is a residual sum round(a + b)
// (§3.2 steps 4 and 7, as @k3k_add): the sum is made and returned here too
// ([1, T, D]), so that it needs no kernel of its own (k3-to-linalg joins
// them where the sum's other uses come after).
func.func private @k3k_attn_res_norm_add(%blocks: tensor<?x?x?x!act>, %a: tensor<?x?x?x!act>, %b: tensor<?x?x?x!act>,
                                         %g: tensor<?xbf16>, %p: tensor<?x?xbf16>, %eps: f32, %gn: tensor<?xbf16>, %eps2: f32)
    -> (tensor<?x?x!act>, tensor<?x?x?x!act>) attributes {k3.into = @k3k_attn_res_norm_add_rows} {
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %t = tensor.dim %a, %c1 : tensor<?x?x?x!act>
  %d = tensor.dim %a, %c2 : tensor<?x?x?x!act>
  %out = memref.alloc(%t, %d) : memref<?x?x!act>
  %sum = memref.alloc(%c1, %t, %d) : memref<?x?x?x!act>
  func.call @k3k_attn_res_norm_add_rows(%blocks, %a, %b, %g, %p, %eps, %gn, %eps2, %out, %sum)
      : (tensor<?x?x?x!act>, tensor<?x?x?x!act>, tensor<?x?x?x!act>, tensor<?xbf16>, tensor<?x?xbf16>, f32, tensor<?xbf16>, f32,
         memref<?x?x!act>, memref<?x?x?x!act>) -> ()
  %y = bufferization.to_tensor %out restrict : memref<?x?x!act> to tensor<?x?x!act>
  %s = bufferization.to_tensor %sum restrict : memref<?x?x?x!act> to tensor<?x?x?x!act>
  return %y, %s : tensor<?x?x!act>, tensor<?x?x?x!act>
}

// The same into %out and %sum (`k3.attn_res_norm` with a and b: on a GPU
// the block of each token makes and stores its row of the sum first).
func.func private @k3k_attn_res_norm_add_rows(%blocks: tensor<?x?x?x!act>, %a: tensor<?x?x?x!act>, %b: tensor<?x?x?x!act>,
                                              %g: tensor<?xbf16>, %p: tensor<?x?xbf16>, %eps: f32, %gn: tensor<?xbf16>, %eps2: f32,
                                              %out: memref<?x?x!act>, %sum: memref<?x?x?x!act>)
    attributes {k3.attn_res_norm = {widen = @k3k_widen, narrow = @k3k_narrow, round = @k3k_round}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %t = tensor.dim %a, %c1 : tensor<?x?x?x!act>
  %d = tensor.dim %a, %c2 : tensor<?x?x?x!act>
  scf.parallel (%i, %j) = (%c0, %c0) to (%t, %d) step (%c1, %c1) {
    %x = tensor.extract %a[%c0, %i, %j] : tensor<?x?x?x!act>
    %y = tensor.extract %b[%c0, %i, %j] : tensor<?x?x?x!act>
    %sa = func.call @k3k_add1(%x, %y) : (!act, !act) -> !act
    memref.store %sa, %sum[%c0, %i, %j] : memref<?x?x?x!act>
  }
  %last = bufferization.to_tensor %sum restrict : memref<?x?x?x!act> to tensor<?x?x?x!act>
  func.call @k3k_attn_res_norm_rows(%blocks, %last, %g, %p, %eps, %gn, %eps2, %out)
      : (tensor<?x?x?x!act>, tensor<?x?x?x!act>, tensor<?xbf16>, tensor<?x?xbf16>, f32, tensor<?xbf16>, f32, memref<?x?x!act>) -> ()
  return
}

// AttnRes score of candidate %i for token %t (§3.1): the projection onto
// γ ⊙ p over the candidate's RMS, s = dot / sqrt(mean(v²) + eps).
func.func private @k3k_attn_res_score(%ss: memref<?x?xf32>, %dot: memref<?x?xf32>, %i: index, %t: index,
                                      %df: f32, %eps: f32) -> f32 {
  %s = memref.load %ss[%i, %t] : memref<?x?xf32>
  %q = memref.load %dot[%i, %t] : memref<?x?xf32>
  %m = arith.divf %s, %df : f32
  %me = arith.addf %m, %eps : f32
  %inv_sqrt = math.sqrt %me : f32
  %inv_one = arith.constant 1.0 : f32
  %inv = arith.divf %inv_one, %inv_sqrt : f32
  %r = arith.mulf %q, %inv : f32
  return %r : f32
}

// SiTU-GLU (§2) in f32: [β₁ tanh(a/β₁) σ(a)] · [β₂ tanh(b/β₂)]; `silu`
// selects SwiGLU a σ(a) b instead.
func.func private @k3k_glu_act(%a: f32, %b: f32, %silu: i1, %b1: f32, %b2: f32) -> f32 {
  %one = arith.constant 1.0 : f32
  %na = arith.negf %a : f32
  %ea = math.exp %na : f32
  %den = arith.addf %one, %ea : f32
  %sig = arith.divf %one, %den : f32
  %r = scf.if %silu -> f32 {
    %g = arith.mulf %a, %sig : f32
    %y = arith.mulf %g, %b : f32
    scf.yield %y : f32
  } else {
    %a1 = arith.divf %a, %b1 : f32
    %t1 = math.tanh %a1 : f32
    %g0 = arith.mulf %b1, %t1 : f32
    %g = arith.mulf %g0, %sig : f32
    %bb = arith.divf %b, %b2 : f32
    %t2 = math.tanh %bb : f32
    %u = arith.mulf %b2, %t2 : f32
    %y = arith.mulf %g, %u : f32
    scf.yield %y : f32
  }
  return %r : f32
}

// k3.glu_mlp (§6.4): W_down · round(act(W_gate x, W_up x)).
func.func private @k3k_glu_mlp(%x: tensor<?x?x!act>, %wg: tensor<?x?xbf16>, %wu: tensor<?x?xbf16>, %wd: tensor<?x?xbf16>,
                               %silu: i1, %b1: f32, %b2: f32) -> tensor<?x?x!act> {
  %a = func.call @k3k_linear(%x, %wg) : (tensor<?x?x!act>, tensor<?x?xbf16>) -> tensor<?x?x!act>
  %b = func.call @k3k_linear(%x, %wu) : (tensor<?x?x!act>, tensor<?x?xbf16>) -> tensor<?x?x!act>
  %y = func.call @k3k_glu_down(%a, %b, %wd, %silu, %b1, %b2) : (tensor<?x?x!act>, tensor<?x?x!act>, tensor<?x?xbf16>, i1, f32, f32) -> tensor<?x?x!act>
  return %y : tensor<?x?x!act>
}

// The rest of k3.glu_mlp from a = W_gate x and b = W_up x: W_down ·
// round(act(a, b)).
func.func private @k3k_glu_down(%a: tensor<?x?x!act>, %b: tensor<?x?x!act>, %wd: tensor<?x?xbf16>,
                                %silu: i1, %b1: f32, %b2: f32) -> tensor<?x?x!act> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %t = tensor.dim %a, %c0 : tensor<?x?x!act>
  %i = tensor.dim %a, %c1 : tensor<?x?x!act>
  %o = tensor.empty(%t, %i) : tensor<?x?x!act>
  %h = linalg.generic {indexing_maps = [#id2, #id2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%a, %b : tensor<?x?x!act>, tensor<?x?x!act>) outs(%o : tensor<?x?x!act>) {
  ^bb0(%ga: !act, %ub: !act, %r: !act):
    %gf = func.call @k3k_widen(%ga) : (!act) -> f32
    %uf = func.call @k3k_widen(%ub) : (!act) -> f32
    %y = func.call @k3k_glu_act(%gf, %uf, %silu, %b1, %b2) : (f32, f32, i1, f32, f32) -> f32
    %ya = func.call @k3k_narrow(%y) : (f32) -> !act
    linalg.yield %ya : !act
  } -> tensor<?x?x!act>
  %y = func.call @k3k_linear(%h, %wd) : (tensor<?x?x!act>, tensor<?x?xbf16>) -> tensor<?x?x!act>
  return %y : tensor<?x?x!act>
}

// Residual add (§3.2 steps 4, 7): round(a + b).
func.func private @k3k_add(%a: tensor<?x?x!act>, %b: tensor<?x?x!act>) -> tensor<?x?x!act> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %t = tensor.dim %a, %c0 : tensor<?x?x!act>
  %d = tensor.dim %a, %c1 : tensor<?x?x!act>
  %o = tensor.empty(%t, %d) : tensor<?x?x!act>
  %y = linalg.generic {indexing_maps = [#id2, #id2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%a, %b : tensor<?x?x!act>, tensor<?x?x!act>) outs(%o : tensor<?x?x!act>) {
  ^bb0(%x: !act, %y: !act, %r: !act):
    %sa = func.call @k3k_add1(%x, %y) : (!act, !act) -> !act
    linalg.yield %sa : !act
  } -> tensor<?x?x!act>
  return %y : tensor<?x?x!act>
}

// One element of the residual add: round(x + y) (also
// @k3k_attn_res_norm_add_rows's sum).
func.func private @k3k_add1(%x: !act, %y: !act) -> !act {
  %xf = func.call @k3k_widen(%x) : (!act) -> f32
  %yf = func.call @k3k_widen(%y) : (!act) -> f32
  %s = arith.addf %xf, %yf : f32
  %sa = func.call @k3k_narrow(%s) : (f32) -> !act
  return %sa : !act
}
