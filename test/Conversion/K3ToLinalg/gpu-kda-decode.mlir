// RUN: k3-opt %s --split-input-file --verify-diagnostics --allow-unregistered-dialect --pass-pipeline='builtin.module(k3-gpu-kda-decode,canonicalize,cse)' | FileCheck %s
// RUN: k3-opt %s --split-input-file --verify-diagnostics --allow-unregistered-dialect --pass-pipeline='builtin.module(k3-gpu-kda-decode{rows=4 max-tokens=0},canonicalize,cse)' | FileCheck %s --check-prefix=R4
// RUN: not k3-opt %s --split-input-file --allow-unregistered-dialect --pass-pipeline='builtin.module(k3-gpu-kda-decode{rows=3})' 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: k3-opt %s --split-input-file --verify-diagnostics --allow-unregistered-dialect --pass-pipeline='builtin.module(k3-gpu-kda-decode{prefetch-next=1},canonicalize,cse)' | FileCheck %s --check-prefix=NEXT
// RUN: k3-opt %s --split-input-file --verify-diagnostics --allow-unregistered-dialect --pass-pipeline='builtin.module(k3-gpu-kda-decode,canonicalize,cse)' | FileCheck %s --check-prefix=NONEXT
// NONEXT-NOT: nvvm.cp.async.bulk.prefetch
// RUN: not k3-opt %s --split-input-file --allow-unregistered-dialect --pass-pipeline='builtin.module(k3-gpu-kda-decode{sm=80 prefetch-next=1})' 2>&1 | FileCheck %s --check-prefix=BADNEXT
// BADNEXT: error: k3-gpu-kda-decode: prefetch-next needs sm_90 (cp.async.bulk.prefetch), not sm_80
// prefetch-next: once its state rows are loaded, warp 0 of block b asks L2
// for the state of block b + nsmid (if there is one): token (b + nsmid) /
// H's slot, head (b + nsmid) % H, a row of K f32 per lane, V / 32 times
// (K = 128, V = 64: twice).
// NEXT-LABEL: func.func @decode
// NEXT: gpu.launch blocks(%[[BX:[^,]+]], %{{[^,]+}}, %{{[^)]+}}) in (%{{[^ ]+}} = %[[NB:[^,]+]], {{.*}} threads(%[[LANE:[^,]+]], %[[WY:[^,]+]], {{.*}} in (%{{.+}} = %c32, %{{.+}} = %c8,
// NEXT: %[[H:.+]] = arith.remui %[[BX]], %[[HEADS:[^ ]+]] : index
// NEXT: %[[SMS:.+]] = nvvm.read.ptx.sreg.nsmid : i32
// NEXT-NEXT: %[[SMSI:.+]] = arith.index_cast %[[SMS]] : i32 to index
// NEXT-NEXT: %[[NEXTB:.+]] = arith.addi %[[BX]], %[[SMSI]]
// NEXT-NEXT: %[[IN:.+]] = arith.cmpi ult, %[[NEXTB]], %[[NB]]
// NEXT-NEXT: %[[W0:.+]] = arith.cmpi eq, %[[WY]], %c0
// NEXT-NEXT: %[[GO:.+]] = arith.andi %[[W0]], %[[IN]]
// NEXT-NEXT: scf.if %[[GO]] {
// NEXT-NEXT: %[[NI:.+]] = arith.divui %[[NEXTB]], %[[HEADS]]
// NEXT-NEXT: %[[NH:.+]] = arith.remui %[[NEXTB]], %[[HEADS]]
// NEXT-NEXT: memref.load %{{.+}}[%[[NI]]] : memref<?xi32>
// NEXT: memref.extract_aligned_pointer_as_index %{{.+}} {k3.read_only}
// NEXT: arith.muli %[[NH]],
// NEXT: arith.muli %[[LANE]],
// NEXT: nvvm.cp.async.bulk.prefetch
// NEXT-NEXT: arith.addi %[[LANE]], %c32
// NEXT: nvvm.cp.async.bulk.prefetch
// NEXT-NEXT: }

// Options: 4 rows per warp (V / 4 warps: 16 for V = 64, 32 for V = 128)
// and no bound on the tokens; rows other than 4 and 8 are refused.
// R4-LABEL: func.func @decode
// R4-NOT: arith.cmpi ule
// R4: gpu.launch {{.*}} threads({{.*}} in (%{{.+}} = %c32, %{{.+}} = %c16,
// R4: gpu.launch {{.*}} threads({{.*}} in (%{{.+}} = %c32, %{{.+}} = %c32,
// BAD: k3-gpu-kda-decode: rows must be 4 or 8

// @k3k_kda_decode after bufferization (K3_SPEC §4.2–4.7): x, w, tails and
// slots of the q, k and v convolutions; f [T, H, K], the pre-sigmoid beta
// [T, H], A_log, δ, the state pool [S, H, V, K] as a strided view, slots,
// z [T, H, V], γ, eps, out [T, H, V], softplus, lower bound, scale, L2
// eps, value-first; the library's functions named by the attribute.
func.func private @widen(%a: bf16) -> f32 {
  %f = arith.extf %a : bf16 to f32
  return %f : f32
}
func.func private @narrow(%a: f32) -> bf16 {
  %b = arith.truncf %a : f32 to bf16
  return %b : bf16
}
func.func private @inv(%s: f32, %e: f32) -> f32 {
  %r = arith.addf %s, %e : f32
  return %r : f32
}
func.func private @gate(%f: f32, %d: f32, %a: f32, %sp: i1, %lb: f32) -> f32 {
  %r = arith.addf %f, %d : f32
  return %r : f32
}
func.func private @sigmoid(%x: f32) -> f32 {
  return %x : f32
}
// CHECK: memref.global "private" @k3k_kda_decode_head : memref<512xf32, #gpu.address_space<workgroup>> {alignment = 16 : i64}
// CHECK-LABEL: func.func @decode
// CHECK-SAME: (%[[XQ:[^:]+]]: memref<?x?xbf16>, %[[WQ:[^:]+]]: memref<?x?x?xf32>, %[[PQ:[^:]+]]: memref<?x?x?xbf16, strided<[?, ?, ?], offset: ?>>, %[[SQ:[^:]+]]: memref<?xi32>,
// CHECK-SAME: %[[F:[^:]+]]: memref<?x?x?xbf16>, %[[BETA:[^:]+]]: memref<?x?xbf16>, %[[AL:[^:]+]]: memref<?xf32>, %[[DT:[^:]+]]: memref<?xf32>, %[[POOL:[^:]+]]: memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>, %[[SLOTS:[^:]+]]: memref<?xi32>, %[[Z:[^:]+]]: memref<?x?x?xbf16>, %[[G:[^:]+]]: memref<?xf32>, %[[EPS:[^:]+]]: f32, %[[OUT:[^:]+]]: memref<?x?x?xbf16>, %[[SP:[^:]+]]: i1, %[[LB:[^:]+]]: f32, %[[SC:[^:]+]]: f32, %[[L2:[^:]+]]: f32, %[[VF:[^:]+]]: i1)
// Run-time choice: k3-gpu-kda-recurrent's pool (value-first, unit row
// stride) of [S, H, V, K], K = 64 or 128, V = 64 or 128, ...
// CHECK-DAG: %[[T:.+]] = memref.dim %[[F]], %c0
// CHECK-DAG: %[[H:.+]] = memref.dim %[[F]], %c1
// CHECK-DAG: %[[DK:.+]] = memref.dim %[[F]], %c2
// CHECK-DAG: %[[DV:.+]] = memref.dim %[[Z]], %c2
// CHECK-DAG: %{{.+}}, %[[OFF:.+]], %[[SZ:.+]]:4, %[[ST:.+]]:4 = memref.extract_strided_metadata %[[POOL]]
// CHECK-DAG: %[[UNIT:.+]] = arith.cmpi eq, %[[ST]]#3, %c1
// CHECK-DAG: arith.andi %[[VF]], %[[UNIT]]
// CHECK-DAG: arith.cmpi eq, %[[SZ]]#1, %[[H]]
// CHECK-DAG: arith.cmpi eq, %[[SZ]]#2, %[[DV]]
// CHECK-DAG: arith.cmpi eq, %[[SZ]]#3, %[[DK]]
// CHECK-DAG: %[[IS128:.+]] = arith.cmpi eq, %[[DK]], %c128
// CHECK-DAG: %[[IS64V:.+]] = arith.cmpi eq, %[[DV]], %c64
// CHECK-DAG: %[[IS128V:.+]] = arith.cmpi eq, %[[DV]], %c128
// ... each convolution's channels H·K (H·V for v), its weights [C, 1, 4]
// and tails [S, C, 3], and as many slots as the state.
// CHECK-DAG: %[[CQ:.+]] = arith.muli %[[H]], %[[DK]]
// CHECK-DAG: %[[XQC:.+]] = memref.dim %[[XQ]], %c1
// CHECK-DAG: arith.cmpi eq, %[[XQC]], %[[CQ]]
// CHECK-DAG: %[[W:.+]] = memref.dim %[[WQ]], %c2
// CHECK-DAG: arith.cmpi eq, %[[W]], %c4
// CHECK-DAG: %[[PQW:.+]] = memref.dim %[[PQ]], %c2
// CHECK-DAG: arith.cmpi eq, %[[PQW]], %c3
// At most 8 tokens (max-tokens).
// CHECK-DAG: arith.cmpi ule, %[[T]], %c8
// CHECK-DAG: %[[NSQ:.+]] = memref.dim %[[SQ]], %c0
// CHECK-DAG: %[[NS:.+]] = memref.dim %[[SLOTS]], %c0
// CHECK-DAG: arith.cmpi eq, %[[NSQ]], %[[NS]]
// CHECK: scf.if
// CHECK: %[[ROWS:.+]] = memref.reinterpret_cast %[[POOL]] to offset: [%[[OFF]]], sizes: [%[[SZ]]#0, %[[SZ]]#1, %[[SZ]]#2, %[[SZ]]#3], strides: [%[[ST]]#0, %[[ST]]#1, %[[ST]]#2, 1]
// CHECK: scf.if %[[IS128]] {
// A launch of static size per (K, V): a block per (token, head), V / 8
// warps of 32 lanes (rows = 8; K = 128, V = 64 first).
// CHECK: scf.if %[[IS64V]] {
// CHECK: %[[NB:.+]] = arith.muli %[[T]], %[[H]]
// CHECK: gpu.launch blocks({{.*}} in (%{{.+}} = %[[NB]], {{.*}} threads({{.*}} in (%{{.+}} = %c32, %{{.+}} = %c8,
// CHECK: gpu.terminator
// CHECK: scf.if %[[IS128V]] {
// CHECK: gpu.launch blocks(%[[BX:[^,]+]], {{.*}} in (%{{.+}} = %[[NB]], {{.*}} threads(%[[LANE:[^,]+]], %[[WY:[^,]+]], {{.*}} in (%{{.+}} = %c32, %{{.+}} = %c16,
// CHECK: %[[BUF:.+]] = memref.get_global @k3k_kda_decode_head
// CHECK: %[[I:.+]] = arith.divui %[[BX]], %[[H]]
// CHECK: %[[HD:.+]] = arith.remui %[[BX]], %[[H]]
// CHECK: %[[SL32:.+]] = memref.load %[[SLOTS]][%[[I]]]
// CHECK: %[[SL:.+]] = arith.index_cast %[[SL32]]
// 1. The warp's 8 rows (v = 8 w .. 8 w + 7), lane l elements 4 l .. 4 l + 3.
// CHECK: %[[FIRST:.+]] = arith.muli %[[WY]], %c8
// CHECK: %[[J0:.+]] = arith.muli %[[LANE]], %c4
// CHECK: vector.load %[[ROWS]][%[[SL]], %[[HD]], %[[FIRST]], %[[J0]]] {alignment = 16 : i64} {{.*}} vector<4xf32>
// CHECK-COUNT-7: vector.load %[[ROWS]]
// α = exp(g) of the lane's elements, β, and the norm's z and γ of value
// 8 w + min(lane, 7), loaded with the rows (none waits for the
// convolutions).
// CHECK: vector.load %[[F]][%[[I]], %[[HD]], %[[J0]]] {alignment = 8 : i64} : memref<?x?x?xbf16>, vector<4xbf16>
// CHECK: func.call @gate
// CHECK: func.call @sigmoid
// CHECK: %[[MINL:.+]] = arith.minui %[[LANE]], %c7
// CHECK: %[[MINE:.+]] = arith.addi %[[FIRST]], %[[MINL]]
// CHECK: %[[ZB:.+]] = memref.load %[[Z]][%[[I]], %[[HD]], %[[MINE]]]
// CHECK: %[[GM:.+]] = memref.load %[[G]][%[[MINE]]]
// 2. A thread per channel of the head's q, k (K each) and v (V): q's
// channel h·K + e from the tail's 3 entries and the token, Σ_j w[c, 0, j]·u_j
// from 0 in j order, SiLU, rounded into the buffer, then the tail shifted.
// CHECK: scf.for %[[E:.+]] = %{{.+}} to %{{.+}} step %c512 {
// CHECK: %[[ISQ:.+]] = arith.cmpi ult, %[[E]], %[[DK]]
// CHECK: scf.if %[[ISQ]] {
// CHECK: %[[C:.+]] = arith.addi %{{.+}}, %[[E]]
// CHECK: %[[CS32:.+]] = memref.load %[[SQ]][%[[I]]]
// CHECK: %[[CS:.+]] = arith.index_cast %[[CS32]]
// CHECK: %[[U0:.+]] = memref.load %[[PQ]][%[[CS]], %[[C]], %c0]
// CHECK: %[[U1:.+]] = memref.load %[[PQ]][%[[CS]], %[[C]], %c1]
// CHECK: %[[U2:.+]] = memref.load %[[PQ]][%[[CS]], %[[C]], %c2]
// CHECK: %[[U3:.+]] = memref.load %[[XQ]][%[[I]], %[[C]]]
// CHECK: %[[W0:.+]] = memref.load %[[WQ]][%[[C]], %c0, %c0]
// CHECK: %[[W1:.+]] = memref.load %[[WQ]][%[[C]], %c0, %c1]
// CHECK: %[[W2:.+]] = memref.load %[[WQ]][%[[C]], %c0, %c2]
// CHECK: %[[W3:.+]] = memref.load %[[WQ]][%[[C]], %c0, %c3]
// CHECK: %[[F0:.+]] = func.call @widen(%[[U0]])
// CHECK: %[[P0:.+]] = arith.mulf %[[W0]], %[[F0]]
// CHECK: %[[A0:.+]] = arith.addf %[[P0]], %cst
// CHECK: %[[F1:.+]] = func.call @widen(%[[U1]])
// CHECK: %[[P1:.+]] = arith.mulf %[[W1]], %[[F1]]
// CHECK: %[[A1:.+]] = arith.addf %[[A0]], %[[P1]]
// CHECK: func.call @widen(%[[U2]])
// CHECK: func.call @widen(%[[U3]])
// CHECK: %[[P3:.+]] = arith.mulf %[[W3]],
// CHECK: %[[ACC:.+]] = arith.addf %{{.+}}, %[[P3]]
// CHECK: %[[SIG:.+]] = func.call @sigmoid(%[[ACC]])
// CHECK: %[[Y:.+]] = arith.mulf %[[ACC]], %[[SIG]]
// CHECK: %[[YB:.+]] = func.call @narrow(%[[Y]])
// CHECK: %[[YF:.+]] = func.call @widen(%[[YB]])
// CHECK: memref.store %[[YF]], %[[BUF]][%[[E]]]
// CHECK: memref.store %[[U1]], %[[PQ]][%[[CS]], %[[C]], %c0]
// CHECK: memref.store %[[U2]], %[[PQ]][%[[CS]], %[[C]], %c1]
// CHECK: memref.store %[[U3]], %[[PQ]][%[[CS]], %[[C]], %c2]
// CHECK: gpu.barrier
// 3. k3-gpu-kda-recurrent's warp on the buffer's q and k (at 128) and v (at
// 256): the norms' sums of squares, lane l's elements l, l + 32, ... in
// order, then the xor tree.
// CHECK: %[[Q0:.+]] = memref.load %[[BUF]][%[[LANE]]]
// CHECK: %[[K0A:.+]] = arith.addi %[[LANE]], %c128
// CHECK: memref.load %[[BUF]][%[[K0A]]]
// CHECK: gpu.shuffle  xor %{{.+}}, %c16_i32, %c32_i32
// CHECK: func.call @inv
// Each row: S ← αS + k u stored, o rounded into the buffer at 384 + v.
// CHECK: %[[V0:.+]] = arith.addi %[[FIRST]], %c256
// CHECK: memref.load %[[BUF]][%[[V0]]]
// CHECK: vector.store %{{.+}}, %[[ROWS]][%[[SL]], %[[HD]], %[[FIRST]], %[[J0]]] {alignment = 16 : i64}
// CHECK: %[[L0:.+]] = arith.cmpi eq, %[[LANE]], %c0
// CHECK: scf.if %[[L0]] {
// CHECK: %[[O0:.+]] = arith.addi %[[FIRST]], %c384
// CHECK: %[[OB:.+]] = func.call @narrow
// CHECK: %[[OF:.+]] = func.call @widen(%[[OB]])
// CHECK: memref.store %[[OF]], %[[BUF]][%[[O0]]]
// CHECK-COUNT-7: vector.store %{{.+}}, %[[ROWS]]
// CHECK: gpu.barrier
// 4. The gated norm: the head's sum of squares of o (lane l: values l,
// l + 32, ... from 0), the xor tree, and lane r < 8 normalises value
// 8 w + r as k3-gpu-gated-norm does.
// CHECK: %[[SS:.+]] = scf.for %[[COL:.+]] = %[[LANE]] to %c128 step %c32 iter_args(%[[SA:.+]] = %cst
// CHECK: %[[OC:.+]] = arith.addi %[[COL]], %c384
// CHECK: %[[X:.+]] = memref.load %[[BUF]][%[[OC]]]
// CHECK: %[[X2:.+]] = arith.mulf %[[X]], %[[X]]
// CHECK: arith.addf %[[SA]], %[[X2]]
// CHECK: gpu.shuffle  xor %[[SS]], %c16_i32, %c32_i32
// CHECK: %[[MYLANE:.+]] = arith.cmpi ult, %[[LANE]], %c8
// CHECK: scf.if %[[MYLANE]] {
// CHECK: %[[ZF:.+]] = func.call @widen(%[[ZB]])
// CHECK: math.sqrt
// CHECK: math.exp
// CHECK: %[[YN:.+]] = func.call @narrow
// CHECK: memref.store %[[YN]], %[[OUT]][%[[I]], %[[HD]], %[[MINE]]]
// CHECK: gpu.terminator
// K = 64: the same with 2 elements per lane.
// CHECK: } else {
// CHECK: gpu.launch
// CHECK: vector.load %[[ROWS]]{{.*}} vector<2xf32>
// Otherwise the generic body, as it was.
// CHECK: "test.generic_body"
func.func @decode(%xq: memref<?x?xbf16>, %wq: memref<?x?x?xf32>, %pq: memref<?x?x?xbf16, strided<[?, ?, ?], offset: ?>>, %sq: memref<?xi32>,
                  %xk: memref<?x?xbf16>, %wk: memref<?x?x?xf32>, %pk: memref<?x?x?xbf16, strided<[?, ?, ?], offset: ?>>, %sk: memref<?xi32>,
                  %xv: memref<?x?xbf16>, %wv: memref<?x?x?xf32>, %pv: memref<?x?x?xbf16, strided<[?, ?, ?], offset: ?>>, %sv: memref<?xi32>,
                  %f: memref<?x?x?xbf16>, %beta: memref<?x?xbf16>, %alog: memref<?xf32>, %dt: memref<?xf32>,
                  %pool: memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>, %slots: memref<?xi32>,
                  %z: memref<?x?x?xbf16>, %g: memref<?xf32>, %eps: f32, %out: memref<?x?x?xbf16>,
                  %sp: i1, %lb: f32, %scale: f32, %l2eps: f32, %vfirst: i1)
    attributes {k3.kda_decode = {widen = @widen, narrow = @narrow, inv = @inv, gate = @gate, sigmoid = @sigmoid}} {
  "test.generic_body"() : () -> ()
  return
}

// -----

func.func private @widen(%a: bf16) -> f32 {
  %f = arith.extf %a : bf16 to f32
  return %f : f32
}
// expected-error @+1 {{k3.kda_decode: must be a dictionary naming functions widen (act) -> f32, narrow (f32) -> act, inv (f32, f32) -> f32, gate (f32, f32, f32, i1, f32) -> f32 and sigmoid (f32) -> f32}}
func.func @unnamed(%xq: memref<?x?xbf16>, %wq: memref<?x?x?xf32>, %pq: memref<?x?x?xbf16, strided<[?, ?, ?], offset: ?>>, %sq: memref<?xi32>,
                  %xk: memref<?x?xbf16>, %wk: memref<?x?x?xf32>, %pk: memref<?x?x?xbf16, strided<[?, ?, ?], offset: ?>>, %sk: memref<?xi32>,
                  %xv: memref<?x?xbf16>, %wv: memref<?x?x?xf32>, %pv: memref<?x?x?xbf16, strided<[?, ?, ?], offset: ?>>, %sv: memref<?xi32>,
                  %f: memref<?x?x?xbf16>, %beta: memref<?x?xbf16>, %alog: memref<?xf32>, %dt: memref<?xf32>,
                  %pool: memref<?x?x?x?xf32, strided<[?, ?, ?, ?], offset: ?>>, %slots: memref<?xi32>,
                  %z: memref<?x?x?xbf16>, %g: memref<?xf32>, %eps: f32, %out: memref<?x?x?xbf16>,
                  %sp: i1, %lb: f32, %scale: f32, %l2eps: f32, %vfirst: i1)
    attributes {k3.kda_decode = {widen = @widen}} {
  "test.generic_body"() : () -> ()
  return
}

// -----

// expected-error @+1 {{k3.kda_decode: expected (x [T, C], w [C, 1, W], tails [S, C, W - 1], slots) of q, k and v, then f [T, H, K], beta [T, H], a_log, dt, pool [S, H, V, K], slots, z [T, H, V], gamma, eps, out [T, H, V], softplus, lower bound, scale, l2 eps, value-first}}
func.func @short(%x: memref<?x?xbf16>) attributes {k3.kda_decode = {}} {
  return
}

// -----

// Unmarked functions are left alone.
// CHECK-LABEL: func.func @plain
// CHECK-NEXT: "test.generic_body"
func.func @plain(%x: memref<?x?xbf16>) {
  "test.generic_body"() : () -> ()
  return
}
