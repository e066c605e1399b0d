// RUN: k3-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(k3-gpu-attn-res-norm,canonicalize,cse)' | FileCheck %s

// @k3k_attn_res_norm_rows after bufferization: the candidates as blocks
// [n - 1, T, D] and last [1, T, D], γ, p [1, D], eps, the norm's γ, its eps,
// the output [T, D]; the library's widen / narrow / round of the activation
// dtype.
// CHECK-LABEL: memref.global "private" @k3k_attn_res_sums : memref<64x32xf32, #gpu.address_space<workgroup>>
// CHECK: memref.global "private" @k3k_attn_res_scores : memref<32xf32, #gpu.address_space<workgroup>>
// CHECK-LABEL: func.func @arn
// CHECK-SAME: (%[[V:[^:]+]]: memref<?x?x?xbf16>, %[[L:[^:]+]]: memref<?x?x?xbf16>, %[[G:[^:]+]]: memref<?xbf16>, %[[P:[^:]+]]: memref<?x?xbf16>, %[[EPS:[^:]+]]: f32, %[[GN:[^:]+]]: memref<?xbf16>, %[[EPS2:[^:]+]]: f32, %[[OUT:[^:]+]]: memref<?x?xbf16>)
// Run-time choice: D a multiple of 8 (16-byte pieces), T >= 1, one last
// row, blocks of the last one's T and D, n <= 32, every buffer 16-byte
// aligned.
// CHECK-DAG: %[[NB:.+]] = memref.dim %[[V]], %c0
// CHECK-DAG: %[[N:.+]] = arith.addi %[[NB]], %c1
// CHECK-DAG: %[[T:.+]] = memref.dim %[[L]], %c1
// CHECK-DAG: %[[D:.+]] = memref.dim %[[L]], %c2
// CHECK-DAG: arith.cmpi ugt, %[[T]], %c0
// CHECK-DAG: arith.remui %[[D]], %c8
// CHECK-DAG: %[[L0:.+]] = memref.dim %[[L]], %c0
// CHECK-DAG: arith.cmpi eq, %[[L0]], %c1
// CHECK-DAG: %[[VD:.+]] = memref.dim %[[V]], %c2
// CHECK-DAG: arith.cmpi eq, %[[VD]], %[[D]]
// CHECK-DAG: %[[VT:.+]] = memref.dim %[[V]], %c1
// CHECK-DAG: arith.cmpi eq, %[[VT]], %[[T]]
// CHECK-DAG: arith.cmpi ult, %[[N]], %c33
// CHECK-DAG: memref.extract_aligned_pointer_as_index %[[V]]
// CHECK-DAG: memref.extract_aligned_pointer_as_index %[[L]]
// CHECK-DAG: memref.extract_aligned_pointer_as_index %[[OUT]]
// CHECK-DAG: memref.extract_aligned_pointer_as_index %[[G]]
// CHECK-DAG: memref.extract_aligned_pointer_as_index %[[P]]
// CHECK-DAG: memref.extract_aligned_pointer_as_index %[[GN]]
// CHECK: scf.if
// One block of 1024 threads per token.
// CHECK: gpu.launch blocks(%[[TOK:[^,]+]], {{.*}} in (%{{.+}} = %[[T]], %{{.+}} = %c1, %{{.+}} = %c1) threads(%[[TID:[^,]+]], {{.*}} in (%{{.+}} = %c1024,
// CHECK: %[[DF:.+]] = arith.sitofp
// CHECK: %[[SUMS:.+]] = memref.get_global @k3k_attn_res_sums
// CHECK: %[[SC:.+]] = memref.get_global @k3k_attn_res_scores
// Where every 16-byte piece of a row has a thread (D <= 1024 x 8): γ, p,
// the norm's γ and the last candidate loaded first; candidate 0 before the
// loop, each next one's load before this one's sums; the row kept in
// registers. A thread without a piece reads piece 0 and adds zeros.
// CHECK: %[[ONE:.+]] = arith.cmpi ule, %[[D]], %c8192
// CHECK: scf.if %[[ONE]] {
// CHECK: %[[J0P:.+]] = arith.muli %[[TID]], %c8
// CHECK: %[[HAS:.+]] = arith.cmpi ult, %[[J0P]], %[[D]]
// CHECK: %[[JP:.+]] = arith.select %[[HAS]], %[[J0P]], %c0
// CHECK: vector.load %[[G]][%[[JP]]]
// CHECK: vector.load %[[P]][%c0, %[[JP]]]
// CHECK: vector.load %[[GN]][%[[JP]]]
// CHECK: %[[LV:.+]] = vector.load %[[L]][%c0, %[[TOK]], %[[JP]]]
// CHECK: %[[X0:.+]] = scf.if %{{.+}} -> (vector<8xbf16>) {
// CHECK: vector.load %[[V]][%c0, %[[TOK]], %[[JP]]]
// CHECK: scf.yield %[[LV]]
// CHECK: scf.for %[[IP:.+]] = %c0 to %[[N]] step %c1 iter_args(%[[XC:.+]] = %[[X0]]) -> (vector<8xbf16>) {
// CHECK: %[[IN:.+]] = arith.addi %[[IP]], %c1
// CHECK: %[[INC:.+]] = arith.minui %[[IN]], %[[NB]]
// CHECK: %[[NX:.+]] = scf.if %{{.+}} -> (vector<8xbf16>) {
// CHECK: vector.load %[[V]][%[[INC]], %[[TOK]], %[[JP]]]
// CHECK: vector.extract %[[XC]][0]
// CHECK: arith.select %[[HAS]]
// CHECK: arith.select %[[HAS]]
// CHECK-COUNT-10: gpu.shuffle xor
// CHECK: scf.yield %[[NX]] : vector<8xbf16>
// CHECK: gpu.barrier
// CHECK: memref.store %{{.+}}, %[[SC]]
// CHECK: gpu.barrier
// CHECK: math.exp
// The mix: α_i v_i added to h in registers, the next candidate loaded
// first; round(h) stored where the thread has its piece, then its norm.
// CHECK: scf.for %{{.+}} = %c0 to %[[N]] step %c1 iter_args({{.*}}) -> (f32, f32, f32, f32, f32, f32, f32, f32, vector<8xbf16>) {
// CHECK: arith.minui
// CHECK: math.exp
// CHECK: arith.divf
// CHECK: scf.if %[[HAS]] {
// CHECK: vector.store %{{.+}}, %[[OUT]][%[[TOK]], %[[JP]]]
// CHECK: gpu.barrier
// CHECK: gpu.barrier
// CHECK: func.call @round(
// CHECK: scf.if %[[HAS]] {
// CHECK: vector.store %{{.+}}, %[[OUT]][%[[TOK]], %[[JP]]]
// Any D: each thread loops over its pieces.
// CHECK: } else {
// Per candidate: the thread's pieces (16-byte loads of v, γ and p) ...
// CHECK: scf.for %[[I:.+]] = %c0 to %[[N]] step %c1 {
// CHECK: %[[J0:.+]] = arith.muli %[[TID]], %c8
// CHECK: scf.for %[[J:.+]] = %[[J0]] to %[[D]] step %c8192 iter_args
// Candidate i is row i of the blocks, i = n - 1 the last.
// CHECK: %[[ISB:.+]] = arith.cmpi ult, %[[I]], %[[NB]]
// CHECK: %[[CM:.+]] = arith.select %[[ISB]], %[[V]], %[[L]] : memref<?x?x?xbf16>
// CHECK: %[[CI:.+]] = arith.select %[[ISB]], %[[I]], %c0 : index
// CHECK: vector.load %[[CM]][%[[CI]], %[[TOK]], %[[J]]] {alignment = 16 : i64} : memref<?x?x?xbf16>, vector<8xbf16>
// CHECK: vector.load %[[G]][%[[J]]] {alignment = 16 : i64}
// CHECK: vector.load %[[P]][%c0, %[[J]]] {alignment = 16 : i64}
// CHECK: %[[A:.+]] = func.call @widen(
// CHECK: arith.mulf %[[A]], %[[A]]
// CHECK-COUNT-7: func.call @widen(
// CHECK: scf.yield
// ... then its two warp trees, lane 0 of each warp storing its warp's sums
// in rows 2i and 2i + 1, with no barrier between candidates ...
// CHECK: %[[ROW:.+]] = arith.muli %[[I]], %c2
// CHECK-NOT: gpu.barrier
// CHECK-COUNT-10: gpu.shuffle xor
// CHECK: scf.if
// CHECK: memref.store %{{.+}}, %[[SUMS]][%[[ROW]], %[[WARP:.+]]] :
// CHECK: %[[ROW1:.+]] = arith.addi %[[ROW]], %c1
// CHECK: memref.store %{{.+}}, %[[SUMS]][%[[ROW1]], %[[WARP]]] :
// ... then one barrier and, per candidate, the trees over the 32 warps'
// sums ...
// CHECK: gpu.barrier
// CHECK: scf.for %[[I2:.+]] = %c0 to %[[N]] step %c1 {
// CHECK: %[[R2:.+]] = arith.muli %[[I2]], %c2
// CHECK: memref.load %[[SUMS]][%[[R2]], %[[LANE:.+]]] :
// CHECK-COUNT-5: gpu.shuffle xor
// CHECK: memref.load %[[SUMS]][%{{.+}}, %[[LANE]]] :
// CHECK-COUNT-5: gpu.shuffle xor
// ... and the score dot / sqrt(ss / D + eps), kept by thread 0.
// CHECK: %[[M:.+]] = arith.divf %{{.+}}, %[[DF]]
// CHECK: %[[ME:.+]] = arith.addf %[[M]], %[[EPS]]
// CHECK: %[[R:.+]] = math.sqrt %[[ME]]
// CHECK: %[[INV:.+]] = arith.divf %{{.+}}, %[[R]]
// CHECK: %[[S:.+]] = arith.mulf %{{.+}}, %[[INV]]
// CHECK: arith.cmpi eq, %[[TID]], %c0
// CHECK: memref.store %[[S]], %[[SC]][%[[I2]]]
// CHECK: gpu.barrier
// The softmax in every thread: the maximum, the sum of exponentials ...
// CHECK: %[[MX:.+]] = scf.for
// CHECK: arith.maximumf
// CHECK: %[[TOT:.+]] = scf.for
// CHECK: math.exp
// ... h = Σ α_i v_i per piece, rounded, stored, its squares summed ...
// CHECK: scf.for %[[J:.+]] = %{{.+}} to %[[D]] step %c8192 iter_args
// CHECK: scf.for %[[I:.+]] = %c0 to %[[N]] step %c1 iter_args
// CHECK: %[[EX:.+]] = math.exp
// CHECK: %[[AL:.+]] = arith.divf %[[EX]], %[[TOT]]
// CHECK: %[[ISB2:.+]] = arith.cmpi ult, %[[I]], %[[NB]]
// CHECK: %[[CM2:.+]] = arith.select %[[ISB2]], %[[V]], %[[L]]
// CHECK: %[[CI2:.+]] = arith.select %[[ISB2]], %[[I]], %c0
// CHECK: vector.load %[[CM2]][%[[CI2]], %[[TOK]], %[[J]]]
// CHECK: %[[X:.+]] = func.call @widen(
// CHECK: arith.mulf %[[AL]], %[[X]]
// CHECK: func.call @narrow(
// CHECK: vector.store %{{.+}}, %[[OUT]][%[[TOK]], %[[J]]] {alignment = 16 : i64}
// CHECK: gpu.barrier
// CHECK-COUNT-5: gpu.shuffle xor
// CHECK: gpu.barrier
// CHECK-COUNT-5: gpu.shuffle xor
// ... and the norm of what the thread stored: round(round(h · inv) · γ).
// CHECK: %[[M2:.+]] = arith.divf %{{.+}}, %[[DF]]
// CHECK: arith.addf %[[M2]], %[[EPS2]]
// CHECK: scf.for %[[J:.+]] = %{{.+}} to %[[D]] step %c8192 {
// CHECK: vector.load %[[OUT]][%[[TOK]], %[[J]]]
// CHECK: vector.load %[[GN]][%[[J]]]
// CHECK: %[[H:.+]] = func.call @widen(
// CHECK: %[[HN:.+]] = arith.mulf %[[H]],
// CHECK: %[[RD:.+]] = func.call @round(%[[HN]])
// CHECK: %[[W:.+]] = arith.extf
// CHECK: %[[Y:.+]] = arith.mulf %[[RD]], %[[W]]
// CHECK: func.call @narrow(%[[Y]])
// CHECK: vector.store %{{.+}}, %[[OUT]][%[[TOK]], %[[J]]]
// Otherwise the generic kernels.
// CHECK: } else {
// CHECK: memref.store %{{.+}}, %[[OUT]][%c0, %c0]
// CHECK: return
func.func private @widen(%a: bf16) -> f32 {
  %r = arith.extf %a : bf16 to f32
  return %r : f32
}
func.func private @narrow(%a: f32) -> bf16 {
  %r = arith.truncf %a : f32 to bf16
  return %r : bf16
}
func.func private @round(%a: f32) -> f32 {
  %n = arith.truncf %a : f32 to bf16
  %r = arith.extf %n : bf16 to f32
  return %r : f32
}
func.func @arn(%v: memref<?x?x?xbf16>, %last: memref<?x?x?xbf16>, %g: memref<?xbf16>, %p: memref<?x?xbf16>, %eps: f32,
               %gn: memref<?xbf16>, %eps2: f32, %out: memref<?x?xbf16>)
    attributes {k3.attn_res_norm = {widen = @widen, narrow = @narrow, round = @round}} {
  %c0 = arith.constant 0 : index
  %z = arith.constant 0.0 : bf16
  memref.store %z, %out[%c0, %c0] : memref<?x?xbf16>
  return
}

// -----

// The last candidate a residual sum (@k3k_attn_res_norm_add_rows): a and b
// [1, T, D] after the blocks, the sum [1, T, D] after the output. Each
// thread first stores its pieces of round(a + b) (the library's widen, an
// f32 add, narrow) into the sum, which is then the last candidate; a and b
// are 16-byte aligned and of the sum's shape.
// CHECK-LABEL: func.func @arn_add
// CHECK-SAME: (%[[V:[^:]+]]: memref<?x?x?xbf16>, %[[A:[^:]+]]: memref<?x?x?xbf16>, %[[B:[^:]+]]: memref<?x?x?xbf16>, %{{[^:]+}}: memref<?xbf16>, %{{[^:]+}}: memref<?x?xbf16>, %{{[^:]+}}: f32, %{{[^:]+}}: memref<?xbf16>, %{{[^:]+}}: f32, %[[OUT:[^:]+]]: memref<?x?xbf16>, %[[SUM:[^:]+]]: memref<?x?x?xbf16>)
// CHECK-DAG: memref.extract_aligned_pointer_as_index %[[A]]
// CHECK-DAG: memref.extract_aligned_pointer_as_index %[[B]]
// CHECK-DAG: memref.dim %[[A]], %c0
// CHECK-DAG: memref.dim %[[B]], %c2
// CHECK: gpu.launch
// One piece per thread: the sum made from a and b, stored where the thread
// has its piece, and kept in registers as the last candidate.
// CHECK: scf.if %{{.+}} {
// CHECK: %[[HASA:.+]] = arith.cmpi ult
// CHECK: %[[JA:.+]] = arith.select %[[HASA]]
// CHECK: vector.load %[[A]][%c0, %{{.+}}, %[[JA]]]
// CHECK: vector.load %[[B]][%c0, %{{.+}}, %[[JA]]]
// CHECK-COUNT-8: func.call @narrow
// CHECK: scf.if %[[HASA]] {
// CHECK: vector.store %{{.+}}, %[[SUM]][%c0, %{{.+}}, %[[JA]]]
// CHECK: %[[LASTA:.+]] = vector.from_elements
// CHECK-NOT: vector.load %[[SUM]]
// CHECK: scf.yield %[[LASTA]] : vector<8xbf16>
// CHECK-NOT: %[[SUM]]
// Any D (the loop over the thread's pieces): the sum stored first, then
// read back as the last candidate.
// CHECK: scf.for %{{.+}} = %{{.+}} to %{{.+}} step %c8192
// CHECK: %[[XA:.+]] = vector.load %[[A]][%c0, %{{.+}}, %{{.+}}] {alignment = 16 : i64} : memref<?x?x?xbf16>, vector<8xbf16>
// CHECK: %[[XB:.+]] = vector.load %[[B]][%c0, %{{.+}}, %{{.+}}] {alignment = 16 : i64} : memref<?x?x?xbf16>, vector<8xbf16>
// CHECK: func.call @widen
// CHECK: func.call @widen
// CHECK: arith.addf
// CHECK: func.call @narrow
// CHECK: vector.store %{{.+}}, %[[SUM]][%c0, %{{.+}}, %{{.+}}] {alignment = 16 : i64} : memref<?x?x?xbf16>, vector<8xbf16>
// The candidates: the blocks, else the sum.
// CHECK: arith.select %{{.+}}, %[[V]], %[[SUM]] : memref<?x?x?xbf16>
// CHECK: gpu.terminator
func.func private @widen(%a: bf16) -> f32 {
  %r = arith.extf %a : bf16 to f32
  return %r : f32
}
func.func private @narrow(%a: f32) -> bf16 {
  %r = arith.truncf %a : f32 to bf16
  return %r : bf16
}
func.func private @round(%a: f32) -> f32 {
  %n = arith.truncf %a : f32 to bf16
  %r = arith.extf %n : bf16 to f32
  return %r : f32
}
func.func @arn_add(%v: memref<?x?x?xbf16>, %a: memref<?x?x?xbf16>, %b: memref<?x?x?xbf16>, %g: memref<?xbf16>,
                   %p: memref<?x?xbf16>, %eps: f32, %gn: memref<?xbf16>, %eps2: f32, %out: memref<?x?xbf16>,
                   %sum: memref<?x?x?xbf16>)
    attributes {k3.attn_res_norm = {widen = @widen, narrow = @narrow, round = @round}} {
  return
}

// -----

// f32 activations: pieces of 4 (16 bytes), the bf16 weights' 8 bytes.
// CHECK-LABEL: func.func @arn_f32
// CHECK: arith.remui %{{.+}}, %c4
// CHECK: gpu.launch
// CHECK: vector.load {{.*}} {alignment = 16 : i64} : memref<?x?x?xf32>, vector<4xf32>
// CHECK: vector.load {{.*}} {alignment = 8 : i64} : memref<?xbf16>, vector<4xbf16>
// CHECK: vector.store {{.*}} {alignment = 16 : i64} : memref<?x?xf32>, vector<4xf32>
func.func private @id(%a: f32) -> f32 {
  return %a : f32
}
func.func @arn_f32(%v: memref<?x?x?xf32>, %last: memref<?x?x?xf32>, %g: memref<?xbf16>, %p: memref<?x?xbf16>, %eps: f32,
                   %gn: memref<?xbf16>, %eps2: f32, %out: memref<?x?xf32>)
    attributes {k3.attn_res_norm = {widen = @id, narrow = @id, round = @id}} {
  return
}

// -----

// An unmarked function is left alone.
// CHECK-LABEL: func.func @plain
// CHECK-NOT: gpu.launch
// CHECK: return
func.func @plain(%v: memref<?x?x?xbf16>) {
  return
}

// -----

// expected-error @+1 {{k3.attn_res_norm: expected identity-layout memrefs blocks [n - 1, T, D], last [1, T, D] (or a, b and sum), γ [D], p [1, D], norm γ [D], output [T, D] and f32 eps}}
func.func @strided(%v: memref<?x?x?xbf16, strided<[?, ?, 1], offset: ?>>, %last: memref<?x?x?xbf16>, %g: memref<?xbf16>, %p: memref<?x?xbf16>, %eps: f32,
                   %gn: memref<?xbf16>, %eps2: f32, %out: memref<?x?xbf16>)
    attributes {k3.attn_res_norm = {}} {
  return
}

// -----

// expected-error @+1 {{k3.attn_res_norm: expected bf16 or f32 activations and bf16 weights}}
func.func @mixed(%v: memref<?x?x?xbf16>, %last: memref<?x?x?xbf16>, %g: memref<?xbf16>, %p: memref<?x?xbf16>, %eps: f32,
                 %gn: memref<?xbf16>, %eps2: f32, %out: memref<?x?xf32>)
    attributes {k3.attn_res_norm = {}} {
  return
}

// -----

// The last candidate in another dtype than the blocks.
// expected-error @+1 {{k3.attn_res_norm: expected bf16 or f32 activations and bf16 weights}}
func.func @mixed_last(%v: memref<?x?x?xbf16>, %last: memref<?x?x?xf32>, %g: memref<?xbf16>, %p: memref<?x?xbf16>, %eps: f32,
                      %gn: memref<?xbf16>, %eps2: f32, %out: memref<?x?xbf16>)
    attributes {k3.attn_res_norm = {}} {
  return
}

// -----

func.func private @widen(%a: bf16) -> f32 {
  %r = arith.extf %a : bf16 to f32
  return %r : f32
}
// expected-error @+1 {{k3.attn_res_norm: 'widen', 'narrow' and 'round' must name functions (act) -> f32, (f32) -> act and (f32) -> f32}}
func.func @no_round(%v: memref<?x?x?xbf16>, %last: memref<?x?x?xbf16>, %g: memref<?xbf16>, %p: memref<?x?xbf16>, %eps: f32,
                    %gn: memref<?xbf16>, %eps2: f32, %out: memref<?x?xbf16>)
    attributes {k3.attn_res_norm = {widen = @widen, narrow = @widen}} {
  return
}

// -----

// expected-error @+1 {{k3.attn_res_norm: expected (blocks [n - 1, T, D], last [1, T, D], γ [D], p [1, D], eps, norm γ [D], norm eps, output [T, D]) arguments, or (blocks, a, b, γ, p, eps, norm γ, norm eps, output, sum [1, T, D])}}
func.func @short(%v: memref<?x?x?xbf16>) attributes {k3.attn_res_norm = {}} {
  return
}

// -----

func.func private @widen(%a: bf16) -> f32 {
  %r = arith.extf %a : bf16 to f32
  return %r : f32
}
func.func private @narrow(%a: f32) -> bf16 {
  %r = arith.truncf %a : f32 to bf16
  return %r : bf16
}
// expected-error @+1 {{k3.attn_res_norm: the function must return nothing}}
func.func @returns(%v: memref<?x?x?xbf16>, %last: memref<?x?x?xbf16>, %g: memref<?xbf16>, %p: memref<?x?xbf16>, %eps: f32,
                   %gn: memref<?xbf16>, %eps2: f32, %out: memref<?x?xbf16>) -> f32
    attributes {k3.attn_res_norm = {widen = @widen, narrow = @narrow, round = @widen_f}} {
  return %eps : f32
}
func.func private @widen_f(%a: f32) -> f32 {
  return %a : f32
}

// -----

// @k3k_rms_norm_rows (`k3.rms_norm`) after bufferization: x [T, D], γ, eps,
// the output [T, D]. Run-time choice: D a multiple of 8, T >= 1, x, the
// output and γ 16-byte aligned.
// CHECK-LABEL: func.func @rn
// CHECK-SAME: (%[[X:[^:]+]]: memref<?x?xbf16>, %[[G:[^:]+]]: memref<?xbf16>, %[[EPS:[^:]+]]: f32, %[[OUT:[^:]+]]: memref<?x?xbf16>)
// CHECK-DAG: %[[T:.+]] = memref.dim %[[X]], %c0
// CHECK-DAG: %[[D:.+]] = memref.dim %[[X]], %c1
// CHECK-DAG: arith.remui %[[D]], %c8
// CHECK-DAG: arith.cmpi ugt, %[[T]], %c0
// CHECK-DAG: memref.extract_aligned_pointer_as_index %[[X]]
// CHECK-DAG: memref.extract_aligned_pointer_as_index %[[OUT]]
// CHECK-DAG: memref.extract_aligned_pointer_as_index %[[G]]
// CHECK: scf.if
// One block of 1024 threads per token: the sum of squares of the thread's
// pieces ...
// CHECK: gpu.launch blocks(%[[TOK:[^,]+]], {{.*}} in (%{{.+}} = %[[T]], %{{.+}} = %c1, %{{.+}} = %c1) threads(%[[TID:[^,]+]], {{.*}} in (%{{.+}} = %c1024,
// CHECK: %[[DF:.+]] = arith.sitofp
// CHECK: %[[SUMS:.+]] = memref.get_global @k3k_attn_res_sums
// Where every piece has a thread (D <= 8192): γ and x loaded first, x kept
// in registers for the norm.
// CHECK: %[[ONE:.+]] = arith.cmpi ule, %[[D]], %c8192
// CHECK: scf.if %[[ONE]] {
// CHECK: %[[HAS:.+]] = arith.cmpi ult, %{{.+}}, %[[D]]
// CHECK: %[[JP:.+]] = arith.select %[[HAS]]
// CHECK: vector.load %[[G]][%[[JP]]]
// CHECK: vector.load %[[X]][%[[TOK]], %[[JP]]]
// CHECK-COUNT-5: gpu.shuffle xor
// CHECK: gpu.barrier
// CHECK-COUNT-5: gpu.shuffle xor
// CHECK: func.call @round(
// CHECK-NOT: vector.load
// CHECK: scf.if %[[HAS]] {
// CHECK: vector.store %{{.+}}, %[[OUT]][%[[TOK]], %[[JP]]]
// Any D: loops over the thread's pieces.
// CHECK: } else {
// CHECK: %[[J0:.+]] = arith.muli %[[TID]], %c8
// CHECK: scf.for %[[J:.+]] = %[[J0]] to %[[D]] step %c8192 iter_args
// CHECK: vector.load %[[X]][%[[TOK]], %[[J]]] {alignment = 16 : i64} : memref<?x?xbf16>, vector<8xbf16>
// CHECK: %[[A:.+]] = func.call @widen(
// CHECK: arith.mulf %[[A]], %[[A]]
// CHECK-COUNT-7: func.call @widen(
// CHECK: scf.yield
// ... the block's sum (one warp tree, then the tree over the 32 warps) ...
// CHECK: gpu.barrier
// CHECK-COUNT-5: gpu.shuffle xor
// CHECK: memref.store %{{.+}}, %[[SUMS]][%c0, %[[WARP:.+]]] :
// CHECK: gpu.barrier
// CHECK: memref.load %[[SUMS]][%c0, %[[LANE:.+]]] :
// CHECK-COUNT-5: gpu.shuffle xor
// CHECK-NOT: gpu.shuffle
// ... and round(round(x · inv) · γ) of the same pieces.
// CHECK: %[[M:.+]] = arith.divf %{{.+}}, %[[DF]]
// CHECK: %[[ME:.+]] = arith.addf %[[M]], %[[EPS]]
// CHECK: %[[R:.+]] = math.sqrt %[[ME]]
// CHECK: %[[INV:.+]] = arith.divf %{{.+}}, %[[R]]
// CHECK: scf.for %[[J2:.+]] = %{{.+}} to %[[D]] step %c8192 {
// CHECK: vector.load %[[X]][%[[TOK]], %[[J2]]]
// CHECK: vector.load %[[G]][%[[J2]]]
// CHECK: %[[H:.+]] = func.call @widen(
// CHECK: %[[HN:.+]] = arith.mulf %[[H]], %[[INV]]
// CHECK: %[[RD:.+]] = func.call @round(%[[HN]])
// CHECK: %[[W:.+]] = arith.extf
// CHECK: %[[Y:.+]] = arith.mulf %[[RD]], %[[W]]
// CHECK: func.call @narrow(%[[Y]])
// CHECK: vector.store %{{.+}}, %[[OUT]][%[[TOK]], %[[J2]]] {alignment = 16 : i64}
// Otherwise the generic kernels.
// CHECK: } else {
// CHECK: memref.store %{{.+}}, %[[OUT]][%c0, %c0]
// CHECK: return
func.func private @widen(%a: bf16) -> f32 {
  %r = arith.extf %a : bf16 to f32
  return %r : f32
}
func.func private @narrow(%a: f32) -> bf16 {
  %r = arith.truncf %a : f32 to bf16
  return %r : bf16
}
func.func private @round(%a: f32) -> f32 {
  %n = arith.truncf %a : f32 to bf16
  %r = arith.extf %n : bf16 to f32
  return %r : f32
}
func.func @rn(%x: memref<?x?xbf16>, %g: memref<?xbf16>, %eps: f32, %out: memref<?x?xbf16>)
    attributes {k3.rms_norm = {widen = @widen, narrow = @narrow, round = @round}} {
  %c0 = arith.constant 0 : index
  %z = arith.constant 0.0 : bf16
  memref.store %z, %out[%c0, %c0] : memref<?x?xbf16>
  return
}

// -----

// The latent RMSNorm of the experts' weighted sum
// (@k3k_experts_combine_norm_rows, `k3.rms_norm` with y [T, k, D] f32 and ω
// [T, k] instead of x): each thread makes its pieces of r = round(Σ_s ω_s
// y_s) (from 0, s ascending, a product then a sum), stores them in the
// output and sums their squares; the norm then reads them back. Run-time
// choice as above, y 32-byte aligned (8 f32 per piece) and ω [T, k].
// CHECK-LABEL: func.func @rnc
// CHECK-SAME: (%[[Y:[^:]+]]: memref<?x?x?xf32>, %[[W:[^:]+]]: memref<?x?xf32>, %[[G:[^:]+]]: memref<?xbf16>, %[[EPS:[^:]+]]: f32, %[[OUT:[^:]+]]: memref<?x?xbf16>)
// CHECK-DAG: %[[T:.+]] = memref.dim %[[Y]], %c0
// CHECK-DAG: %[[D:.+]] = memref.dim %[[Y]], %c2
// CHECK-DAG: %[[YP:.+]] = memref.extract_aligned_pointer_as_index %[[Y]]
// CHECK-DAG: arith.remui %[[YP]], %c32
// CHECK-DAG: memref.dim %[[W]], %c1
// CHECK: scf.if
// CHECK: gpu.launch blocks(%[[TOK:[^,]+]], {{.*}} in (%{{.+}} = %[[T]], %{{.+}} = %c1, %{{.+}} = %c1) threads(%[[TID:[^,]+]], {{.*}} in (%{{.+}} = %c1024,
// One piece per thread: r made, stored where the thread has its piece, and
// kept in registers for the norm.
// CHECK: scf.if %{{.+}} {
// CHECK: %[[HASC:.+]] = arith.cmpi ult, %{{.+}}, %[[D]]
// CHECK: %[[JC:.+]] = arith.select %[[HASC]]
// CHECK: vector.load %[[G]][%[[JC]]]
// CHECK: vector.load %[[Y]][%[[TOK]], %{{.+}}, %[[JC]]]
// CHECK: scf.if %[[HASC]] {
// CHECK: vector.store %{{.+}}, %[[OUT]][%[[TOK]], %[[JC]]]
// CHECK: func.call @round(
// CHECK-NOT: vector.load
// CHECK: scf.if %[[HASC]] {
// CHECK: vector.store %{{.+}}, %[[OUT]][%[[TOK]], %[[JC]]]
// CHECK: } else {
// CHECK: scf.for %[[J:.+]] = %{{.+}} to %[[D]] step %c8192 iter_args
// CHECK: scf.for %[[S:.+]] = %{{.+}} to %{{.+}} step %{{.+}} iter_args
// CHECK: %[[WS:.+]] = memref.load %[[W]][%[[TOK]], %[[S]]]
// CHECK: vector.load %[[Y]][%[[TOK]], %[[S]], %[[J]]] {alignment = 32 : i64} : memref<?x?x?xf32>, vector<8xf32>
// CHECK: %[[P:.+]] = arith.mulf %[[WS]], %{{.+}}
// CHECK: arith.addf %{{.+}}, %[[P]]
// CHECK-COUNT-8: func.call @narrow(
// CHECK: vector.store %{{.+}}, %[[OUT]][%[[TOK]], %[[J]]] {alignment = 16 : i64}
// CHECK: %[[A:.+]] = func.call @widen(
// CHECK: arith.mulf %[[A]], %[[A]]
// CHECK: gpu.barrier
// CHECK: scf.for %[[J2:.+]] = %{{.+}} to %[[D]] step %c8192 {
// CHECK: vector.load %[[OUT]][%[[TOK]], %[[J2]]]
// CHECK: vector.store %{{.+}}, %[[OUT]][%[[TOK]], %[[J2]]] {alignment = 16 : i64}
// CHECK: } else {
// CHECK: return
func.func private @widen(%a: bf16) -> f32 {
  %r = arith.extf %a : bf16 to f32
  return %r : f32
}
func.func private @narrow(%a: f32) -> bf16 {
  %r = arith.truncf %a : f32 to bf16
  return %r : bf16
}
func.func private @round(%a: f32) -> f32 {
  %n = arith.truncf %a : f32 to bf16
  %r = arith.extf %n : bf16 to f32
  return %r : f32
}
func.func @rnc(%y: memref<?x?x?xf32>, %w: memref<?x?xf32>, %g: memref<?xbf16>, %eps: f32, %out: memref<?x?xbf16>)
    attributes {k3.rms_norm = {widen = @widen, narrow = @narrow, round = @round}} {
  %c0 = arith.constant 0 : index
  %z = arith.constant 0.0 : bf16
  memref.store %z, %out[%c0, %c0] : memref<?x?xbf16>
  return
}

// -----

// expected-error @+1 {{k3.rms_norm: expected identity-layout memrefs x [T, D] (or f32 y [T, k, D] and ω [T, k]), γ [D], output [T, D] and f32 eps}}
func.func @rnc_bf16_weights(%y: memref<?x?x?xf32>, %w: memref<?x?xbf16>, %g: memref<?xbf16>, %eps: f32, %out: memref<?x?xbf16>)
    attributes {k3.rms_norm = {}} {
  return
}

// -----

// expected-error @+1 {{k3.rms_norm: expected (x [T, D], γ [D], eps, output [T, D]) or (y [T, k, D], ω [T, k], γ [D], eps, output [T, D]) arguments}}
func.func @rn_short(%x: memref<?x?xbf16>) attributes {k3.rms_norm = {}} {
  return
}

// -----

// expected-error @+1 {{k3.rms_norm: expected identity-layout memrefs x [T, D] (or f32 y [T, k, D] and ω [T, k]), γ [D], output [T, D] and f32 eps}}
func.func @rn_strided(%x: memref<?x?xbf16, strided<[?, 1], offset: ?>>, %g: memref<?xbf16>, %eps: f32, %out: memref<?x?xbf16>)
    attributes {k3.rms_norm = {}} {
  return
}

// -----

// expected-error @+1 {{k3.rms_norm: expected bf16 or f32 activations and bf16 weights}}
func.func @rn_mixed(%x: memref<?x?xbf16>, %g: memref<?xf32>, %eps: f32, %out: memref<?x?xbf16>)
    attributes {k3.rms_norm = {}} {
  return
}

// -----

func.func private @widen(%a: bf16) -> f32 {
  %r = arith.extf %a : bf16 to f32
  return %r : f32
}
// expected-error @+1 {{k3.rms_norm: 'widen', 'narrow' and 'round' must name functions (act) -> f32, (f32) -> act and (f32) -> f32}}
func.func @rn_no_round(%x: memref<?x?xbf16>, %g: memref<?xbf16>, %eps: f32, %out: memref<?x?xbf16>)
    attributes {k3.rms_norm = {widen = @widen, narrow = @widen}} {
  return
}

// -----

func.func private @widen(%a: bf16) -> f32 {
  %r = arith.extf %a : bf16 to f32
  return %r : f32
}
func.func private @narrow(%a: f32) -> bf16 {
  %r = arith.truncf %a : f32 to bf16
  return %r : bf16
}
func.func private @round(%a: f32) -> f32 {
  return %a : f32
}
// expected-error @+1 {{k3.rms_norm: the function must return nothing}}
func.func @rn_returns(%x: memref<?x?xbf16>, %g: memref<?xbf16>, %eps: f32, %out: memref<?x?xbf16>) -> f32
    attributes {k3.rms_norm = {widen = @widen, narrow = @narrow, round = @round}} {
  return %eps : f32
}

// -----

// expected-error @+1 {{k3.rms_norm: must be a dictionary {widen, narrow, round}}}
func.func @rn_not_dict(%x: memref<?x?xbf16>, %g: memref<?xbf16>, %eps: f32, %out: memref<?x?xbf16>)
    attributes {k3.rms_norm = 1 : i64} {
  return
}
