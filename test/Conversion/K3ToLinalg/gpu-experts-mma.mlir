// RUN: k3-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(k3-gpu-experts-mma{fold-scales=0 up-tiles=1})' | FileCheck %s
// RUN: k3-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(k3-gpu-experts-mma{sm=75})' | FileCheck %s --check-prefix=OLD
// RUN: %python %S/Inputs/e2m1_bf16_decode.py | FileCheck %s --check-prefix=DECODE
// RUN: k3-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(k3-gpu-experts-mma{staged=1 fold-scales=0 down-tiles=1 up-tiles=1})' | FileCheck %s --check-prefix=STAGED
// RUN: k3-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(k3-gpu-experts-mma{wide-groups=0 up-tiles=1})' | FileCheck %s --check-prefix=FOLD
// RUN: k3-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(k3-gpu-experts-mma{lane-groups=1 up-tiles=1})' | FileCheck %s --check-prefix=WIDE
// RUN: k3-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(k3-gpu-experts-mma{lane-groups=1 prefetch=1 up-tiles=1})' | FileCheck %s --check-prefix=PREFETCH
// RUN: k3-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(k3-gpu-experts-mma{lane-groups=1 groups-in-flight=16 up-tiles=1})' | FileCheck %s --check-prefix=FLIGHT
// RUN: k3-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(k3-gpu-experts-mma{up-tiles=1 up-min-blocks=6})' | FileCheck %s --check-prefix=LANES2
// RUN: k3-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(k3-gpu-experts-mma{up-min-blocks=0})' | FileCheck %s --check-prefix=NOBOUND
// RUN: not k3-opt %s --split-input-file --pass-pipeline='builtin.module(k3-gpu-experts-mma{prefetch=1})' 2>&1 | FileCheck %s --check-prefix=BADPREFETCH
// BADPREFETCH: error: k3-gpu-experts-mma: prefetch needs lane-groups=1, not 2
// RUN: not k3-opt %s --split-input-file --pass-pipeline='builtin.module(k3-gpu-experts-mma{lane-groups=0})' 2>&1 | FileCheck %s --check-prefix=BADLANES
// BADLANES: error: k3-gpu-experts-mma: lane-groups must be 1 or 2, not 0
// RUN: not k3-opt %s --split-input-file --pass-pipeline='builtin.module(k3-gpu-experts-mma{groups-in-flight=6})' 2>&1 | FileCheck %s --check-prefix=BADFLIGHT
// BADFLIGHT: error: k3-gpu-experts-mma: groups-in-flight must be a multiple of 4 from 4 to 32, not 6
// RUN: not k3-opt %s --split-input-file --pass-pipeline='builtin.module(k3-gpu-experts-mma{up-min-blocks=17})' 2>&1 | FileCheck %s --check-prefix=BADBLOCKS
// RUN: k3-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(k3-gpu-experts-mma)' | FileCheck %s --check-prefix=TILES
// RUN: not k3-opt %s --split-input-file --pass-pipeline='builtin.module(k3-gpu-experts-mma{down-tiles=3})' 2>&1 | FileCheck %s --check-prefix=BADTILES
// BADTILES: error: k3-gpu-experts-mma: down-tiles must be 1, 2 or 4, not 3
// RUN: k3-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(k3-gpu-experts-mma{down-tiles=4})' | FileCheck %s --check-prefix=TILES4
// RUN: not k3-opt %s --split-input-file --pass-pipeline='builtin.module(k3-gpu-experts-mma{staged=1 up-tiles=1})' 2>&1 | FileCheck %s --check-prefix=STAGEDTILES
// STAGEDTILES: error: k3-gpu-experts-mma: down-tiles=2 needs staged=false (the rings hold 16 rows per warp)
// BADBLOCKS: error: k3-gpu-experts-mma: up-min-blocks must be 0 to 16, not 17
// RUN: %python %S/Inputs/e2m1_bf16_fold.py | FileCheck %s --check-prefix=FOLDMATH
// RUN: k3-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(k3-gpu-experts-mma{prefetch-l2=2},canonicalize,cse)' | FileCheck %s --check-prefix=L2
// RUN: not k3-opt %s --split-input-file --pass-pipeline='builtin.module(k3-gpu-experts-mma{prefetch-l2=17})' 2>&1 | FileCheck %s --check-prefix=BADL2
// BADL2: error: k3-gpu-experts-mma: prefetch-l2 must be 0 to 16 and needs sm_90 (cp.async.bulk.prefetch), not 17 for sm_90
// RUN: not k3-opt %s --split-input-file --pass-pipeline='builtin.module(k3-gpu-experts-mma{sm=80 prefetch-l2=1})' 2>&1 | FileCheck %s --check-prefix=BADL2SM
// BADL2SM: error: k3-gpu-experts-mma: prefetch-l2 must be 0 to 16 and needs sm_90 (cp.async.bulk.prefetch), not 1 for sm_80
// prefetch-l2=2: in the wide loop (8 groups, 128 bytes of a row per
// iteration) lanes 0-31, the warp's 32 rows, ask L2 for the codes of the
// iteration two on (groups c0 + 16 ..), cut at the loop's end, in each
// matrix, the pointers marked as only read.
// L2-LABEL: func.func @up
// L2-SAME: %[[GATE:[^:]+]]: memref<?x?x?xi8>, %{{[^:]+}}: memref<?x?x?xi8>, %[[UP:[^:]+]]: memref<?x?x?xi8>
// L2: scf.for %[[C0:.+]] = %c0 to %{{.+}} step %c8 iter_args(
// L2-NEXT: %[[AHEAD:.+]] = arith.addi %[[C0]], %c16
// L2-NEXT: %[[IN:.+]] = arith.cmpi ult, %[[AHEAD]], %[[WHOLE:[^ ]+]] : index
// L2-NEXT: %[[LANE:.+]] = arith.cmpi ult, %{{.+}}, %c32
// L2-NEXT: %[[GO:.+]] = arith.andi %[[LANE]], %[[IN]]
// L2-NEXT: scf.if %[[GO]] {
// L2: %[[LEFT:.+]] = arith.subi %[[WHOLE]], %[[AHEAD]]
// L2-NEXT: %[[LEFTB:.+]] = arith.muli %[[LEFT]], %c16
// L2-NEXT: %[[SIZE:.+]] = arith.minui %[[LEFTB]], %c128
// L2: memref.extract_aligned_pointer_as_index %[[GATE]] : memref<?x?x?xi8> -> index {k3.read_only}
// L2: %[[SIZE32:.+]] = arith.index_cast %[[SIZE]] : index to i32
// L2: nvvm.cp.async.bulk.prefetch %{{.+}}, %[[SIZE32]]
// L2: memref.extract_aligned_pointer_as_index %[[UP]] : memref<?x?x?xi8> -> index {k3.read_only}
// L2: nvvm.cp.async.bulk.prefetch %{{.+}}, %[[SIZE32]]
// L2-NEXT: }
// CHECK-NOT: k3k_experts_codes
// OLD-NOT: gpu.launch
// OLD-NOT: nvvm.mma.sync
// The decode's bit arithmetic (the constants below), exact for every code
// pair at every position:
// DECODE: e2m1 -> bf16: 4096 code pairs exact

// With `fold-scales` (off by default until measured on a GPU): each warp
// first tests its rows' scale bytes (lane t: words t, t + 4, ... of rows g
// and g + 8; in [2, 127] iff ((s - 0x02020202) & ~s | s) & 0x80808080 is
// 0) and takes one of two loops for all of them: the scales folded into
// the decode (bytes + 0x7E7E7E7E, byte c to bytes 1 and 3 by prmt 0x0404 +
// 0x1010 c, shifted down one: the bf16 2^(e-1) that replaces 2^126), the
// mma accumulating the row sums across groups, no E8M0 decode; or the
// default loop.
// FOLDMATH: fold-scales: 6144 scale words tested, 126 scales x 16 codes exact
// FOLD-LABEL: func.func @up
// FOLD: scf.for {{.*}} iter_args(%{{.+}} = %c0_i32) -> (i32) {
// FOLD: arith.subi %{{.+}}, %c33686018_i32
// FOLD: arith.xori %{{.+}}, %c-1_i32
// FOLD: nvvm.vote.sync  all
// FOLD-NEXT: scf.if %{{.+}} -> (f32, f32, f32, f32, f32, f32, f32, f32) {
// FOLD: scf.for %{{.+}} iter_args(%[[A0:[^ ]+]] = %cst, %[[A1:[^ ]+]] = %cst, %[[A2:[^ ]+]] = %cst, %[[A3:[^ ]+]] = %cst,
// FOLD-NOT: func.call @e8m0
// FOLD: arith.addi %{{.+}}, %c2122219134_i32
// FOLD: llvm.inline_asm "prmt.b32 $0, $1, $2, $3;", "=r,r,r,r" %{{.+}}, %{{.+}}, %c1028_i32
// FOLD: arith.shrui
// FOLD: llvm.inline_asm "fma.rn.bf16x2
// FOLD: nvvm.mma.sync A[{{.*}}]  B[{{.*}}]  C[%[[A0]], %[[A1]], %[[A2]], %[[A3]]]
// FOLD: %c5140_i32
// FOLD: %c9252_i32
// FOLD-NOT: func.call @e8m0
// FOLD: } else {
// FOLD: scf.for
// FOLD: func.call @e8m0
// With `wide-groups` (the default): in the folded loop, lane t of a quad
// reads all of group c0 + t, 16 bytes per row, and its 32 activations (4
// loads at element 32 (c0 + t) + 8i), and takes one scale per row, byte t
// of the row's 4 (prmt selector 0x0404 + 0x1010 t); the default loop keeps
// a lane's word of each group.
// WIDE-LABEL: func.func @up
// WIDE-NOT: arith.cmpi ule
// WIDE: gpu.launch
// WIDE: nvvm.vote.sync  all
// WIDE-NEXT: scf.if %{{.+}} -> (f32, f32, f32, f32, f32, f32, f32, f32) {
// WIDE: scf.for %[[C0:[^ ]+]] = %{{.+}} iter_args(%[[A0:[^ ]+]] = %cst,
// WIDE: %[[G:.+]] = arith.addi %[[C0]], %[[T:[^ ]+]] : index
// WIDE-COUNT-4: vector.load %arg0[{{.+}}] {alignment = 16 : i64} : memref<?x?xbf16>, vector<8xbf16>
// WIDE: vector.load %arg4[{{.+}}] {alignment = 16 : i64} : memref<?x?x?xi8>, vector<16xi8>
// WIDE: vector.load %arg5[{{.+}}, %[[C0]]] {alignment = 4 : i64} : memref<?x?x?xi8>, vector<4xi8>
// WIDE: vector.load %arg4[{{.+}}] {alignment = 16 : i64} : memref<?x?x?xi8>, vector<16xi8>
// WIDE: %[[TI:.+]] = arith.index_cast %[[T]] : index to i32
// WIDE: arith.muli %c4112_i32, %[[TI]] : i32
// WIDE: llvm.inline_asm "prmt.b32 $0, $1, $2, $3;"
// WIDE: nvvm.mma.sync A[{{.*}}]  B[{{.*}}]  C[%[[A0]],
// WIDE-COUNT-7: nvvm.mma.sync
// WIDE-NOT: vector<16xi8>
// WIDE: } else {
// WIDE: scf.for
// WIDE-NOT: vector<16xi8>
// WIDE: func.call @e8m0
// With groups-in-flight 16 (one group per lane): two units (8 groups) of
// loads per iteration, groups c0 + t and c0 + 4 + t, then the last unit
// alone when 8 does not divide the groups: the same mma steps in the same
// order as one unit per iteration, so the same sums.
// FLIGHT-LABEL: func.func @up
// FLIGHT: gpu.launch
// FLIGHT: nvvm.vote.sync  all
// FLIGHT: %[[MOST:.+]] = arith.muli %{{.+}}, %c8{{.*}} : index
// FLIGHT: %[[S:.+]]:8 = scf.for %{{.+}} = %{{.+}} to %[[MOST]] step %c8{{.*}} iter_args(
// FLIGHT-COUNT-4: vector.load %arg0[{{.+}}] {alignment = 16 : i64} : memref<?x?xbf16>, vector<8xbf16>
// FLIGHT-COUNT-4: vector<16xi8>
// FLIGHT-COUNT-4: vector.load %arg0[{{.+}}] {alignment = 16 : i64} : memref<?x?xbf16>, vector<8xbf16>
// FLIGHT-COUNT-4: vector<16xi8>
// FLIGHT-COUNT-32: nvvm.mma.sync
// FLIGHT: scf.for %{{.+}} = %[[MOST]] to %{{.+}} step %c4{{.*}} iter_args(%{{.+}} = %[[S]]#0,
// FLIGHT-COUNT-4: vector<16xi8>
// FLIGHT-COUNT-16: nvvm.mma.sync
// FLIGHT: } else {
// FLIGHT-NOT: vector<16xi8>
// FLIGHT: func.call @e8m0
// By default (lane-groups 2): groups c0 + 2t and c0 + 2t + 1, 32 bytes per
// row, 8 loads of activations, 8 groups per iteration, the scales from the
// word at c0 + 4 (t / 2); the last 4 groups, where 8 does not divide them,
// one group per lane. With up-tiles=1 and up-min-blocks=6 the two-matrix
// kernel is named and bounded to 6 resident blocks per SM (for
// k3-gpu-launch-bounds); the one-matrix kernel is left alone.
// LANES2-LABEL: func.func @up
// LANES2-SAME: k3.launch_bounds = {up_mma_kernel = 6 : i64}
// LANES2-NOT: arith.cmpi ule
// LANES2: gpu.launch {{.*}} function(@up_mma_kernel) {
// LANES2: nvvm.vote.sync  all
// LANES2: %[[MOST:.+]] = arith.muli %{{.+}}, %c8{{.*}} : index
// LANES2: scf.for %{{.+}} = %{{.+}} to %[[MOST]] step %c8{{.*}} iter_args(
// LANES2-COUNT-8: vector.load %arg0[{{.+}}] {alignment = 16 : i64} : memref<?x?xbf16>, vector<8xbf16>
// LANES2: vector.load %arg4[{{.+}}] {alignment = 16 : i64} : memref<?x?x?xi8>, vector<32xi8>
// LANES2: vector.load %arg5[{{.+}}] {alignment = 4 : i64} : memref<?x?x?xi8>, vector<4xi8>
// LANES2: vector.load %arg4[{{.+}}] {alignment = 16 : i64} : memref<?x?x?xi8>, vector<32xi8>
// LANES2-COUNT-32: nvvm.mma.sync
// LANES2: scf.for %{{.+}} = %[[MOST]] to %{{.+}} step %c4{{.*}} iter_args(
// LANES2-NOT: vector<32xi8>
// LANES2: vector<16xi8>
// LANES2: } else {
// LANES2-NOT: vector<32xi8>
// LANES2: func.call @e8m0
// With `prefetch` (off: no faster on the H200): the wide loop, one unit per
// iteration, carries the next unit's code and scale words (2 matrices x (2
// rows x 4 words + 2 scale words) = 20 i32), loaded at the top of the
// iteration from min(c0 + 4, last unit), before the activations it uses.
// PREFETCH-LABEL: func.func @up
// PREFETCH: nvvm.vote.sync  all
// PREFETCH: scf.if %{{.+}} -> (f32, f32, f32, f32, f32, f32, f32, f32) {
// PREFETCH: vector.load %arg4[{{.+}}] {alignment = 16 : i64} : memref<?x?x?xi8>, vector<16xi8>
// PREFETCH: scf.for %{{.+}} = %{{.+}} to %{{.+}} step %c4{{.*}} -> (f32, f32, f32, f32, f32, f32, f32, f32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32) {
// PREFETCH: %[[NEXT:.+]] = arith.minui
// PREFETCH: vector.load %arg4[{{.+}}] {alignment = 16 : i64} : memref<?x?x?xi8>, vector<16xi8>
// PREFETCH: vector.load %arg0[{{.+}}] {alignment = 16 : i64} : memref<?x?xbf16>, vector<8xbf16>
// PREFETCH: nvvm.mma.sync
// PREFETCH: scf.yield

// With `staged` (off by default until measured on a GPU): the warps'
// rings, 4 warps x 4 stages x 2 matrices x 16 rows x (64 bytes of codes, 4
// of scales), 16-byte aligned; a one-matrix stage has its own.
// STAGED-DAG: memref.global "private" @k3k_experts_codes2 : memref<4x4x2x16x64xi8, #gpu.address_space<workgroup>> {alignment = 16 : i64}
// STAGED-DAG: memref.global "private" @k3k_experts_scales2 : memref<4x4x2x16x4xi8, #gpu.address_space<workgroup>> {alignment = 16 : i64}
// STAGED-LABEL: func.func @up
// STAGED-SAME: (%[[X:[^:]+]]: memref<?x?xbf16>, %{{[^:]+}}: memref<?x?xi64>, %{{[^:]+}}: memref<?xi64>, %{{[^:]+}}: memref<?xi64>, %[[W1:[^:]+]]: memref<?x?x?xi8>
// STAGED: gpu.launch
// Units of four groups when 4 divides the groups, through each warp's ring:
// per unit and matrix two 16-byte cp.async of codes per lane (16 rows x 64
// bytes), and 4 bytes of one row's scales per lane (matrix lane / 16), one
// group per unit; three units issued ahead.
// STAGED: %[[STAGED:.+]] = arith.cmpi ult, %c0{{[_0-9]*}}, %[[UNITS:[^ ]+]] : index
// STAGED: scf.if %[[STAGED]]
// STAGED: %[[CODES:.+]] = memref.get_global @k3k_experts_codes2 : memref<4x4x2x16x64xi8, #gpu.address_space<workgroup>>
// STAGED: %[[SCALES:.+]] = memref.get_global @k3k_experts_scales2 : memref<4x4x2x16x4xi8, #gpu.address_space<workgroup>>
// STAGED: nvgpu.device_async_copy %[[W1]][{{.+}}], %[[CODES]][{{.+}}], 16, %{{.+}} {bypassL1}
// STAGED: nvgpu.device_async_copy %[[W1]]
// STAGED: nvgpu.device_async_copy %arg6
// STAGED: nvgpu.device_async_copy %arg6
// STAGED: nvgpu.device_async_copy %{{.+}}, %[[SCALES]][{{.+}}], 4, %{{.+}} :
// STAGED-NEXT: nvgpu.device_async_create_group
// STAGED-COUNT-2: nvgpu.device_async_create_group
// STAGED: scf.for %{{.+}} = %{{.+}} to %[[UNITS]]
// STAGED: nvvm.bar.warp.sync
// STAGED-COUNT-5: nvgpu.device_async_copy
// STAGED: %[[G:.+]] = nvgpu.device_async_create_group
// STAGED-NEXT: nvgpu.device_async_wait %[[G]] {numGroups = 3 : i32}
// STAGED-NEXT: nvvm.bar.warp.sync
// The unit from its stage: each row's 4 scales once (one 4-byte read per
// matrix and row), then group by group (fewer live registers) the
// activations paired (0, 4), (1, 5), ... from global memory and a lane's
// word of each row in one read (group j's 16 bytes of row r at piece
// j ^ (r / 2 % 4)); then as without the rings.
// STAGED-COUNT-4: vector.load %[[SCALES]]{{.*}} {alignment = 4 : i64} : memref<4x4x2x16x4xi8, #gpu.address_space<workgroup>>, vector<4xi8>
// STAGED-NOT: vector.load %[[SCALES]]
// STAGED: vector.load %[[X]]{{.*}} : memref<?x?xbf16>, vector<8xbf16>
// STAGED: vector.shuffle {{.*}} [0, 4, 1, 5, 2, 6, 3, 7]
// STAGED: vector.load %[[CODES]]{{.*}} {alignment = 4 : i64} : memref<4x4x2x16x64xi8, #gpu.address_space<workgroup>>, vector<4xi8>
// STAGED: nvvm.mma.sync
// STAGED: arith.xori %c1{{[_0-9]*}}, %
// STAGED: nvgpu.device_async_wait %{{.+}} {numGroups = 0 : i32}
// The remaining groups one at a time from global memory.
// STAGED: scf.for
// STAGED: vector.load {{.*}} : memref<?x?x?xi8>, vector<4xi8>
// STAGED: gpu.terminator
// The first expert stage (Kernels/MoE.mlir after bufferization): activations
// [T, K], two MXFP4 matrices, three scalars, output [T, topk, N].
// CHECK-LABEL: func.func @up
// CHECK-SAME: (%[[X:[^:]+]]: memref<?x?xbf16>, %[[IDX:[^:]+]]: memref<?x?xi64>, %[[ORDER:[^:]+]]: memref<?xi64>, %[[RANKS:[^:]+]]: memref<?xi64>, %[[W1:[^:]+]]: memref<?x?x?xi8>
// Run-time choice: K % 32, N % 16, some entries, 16-byte aligned activations
// and packed weights, 4-byte aligned scales.
// CHECK-DAG: %[[N:.+]] = memref.dim %[[W1]], %c1
// CHECK-DAG: %[[K:.+]] = memref.dim %[[X]], %c1
// CHECK-DAG: %[[Q:.+]] = memref.dim %[[ORDER]], %c0
// CHECK-DAG: arith.remui %[[K]], %c32
// CHECK-DAG: arith.remui %[[N]], %c16
// CHECK-DAG: memref.extract_aligned_pointer_as_index %[[X]]
// CHECK-DAG: memref.extract_aligned_pointer_as_index %[[W1]]
// CHECK-DAG: %[[S1:.+]] = memref.extract_aligned_pointer_as_index %arg5
// CHECK-DAG: arith.remui %[[S1]], %c4
// CHECK-DAG: memref.extract_aligned_pointer_as_index %arg7
// CHECK: scf.if
// One block per (entry position, 64 rows), four warps.
// CHECK: %[[GY:.+]] = arith.ceildivui %[[N]], %c64
// CHECK: gpu.launch blocks(%{{.+}}, %{{.+}}, %{{.+}}) in (%{{.+}} = %[[Q]], %{{.+}} = %[[GY]], %{{.+}} = %c1{{.*}}) threads(%{{.+}}, %{{.+}}, %{{.+}}) in (%{{.+}} = %c128
// A segment starts where the entry's rank among its expert's entries is a
// multiple of 8, and ends 8 positions on or where the expert does; a block
// that starts none reads only the rank (the entry's order and idx loads are
// inside the test).
// CHECK: %[[RANK:.+]] = memref.load %[[RANKS]][%[[P:[a-zA-Z0-9_]+]]] : memref<?xi64>
// CHECK: %[[R:.+]] = arith.index_cast %[[RANK]] : i64 to index
// CHECK: arith.remui %[[R]], %c8
// CHECK-NOT: memref.load %[[ORDER]]
// CHECK: scf.if
// CHECK: memref.load %[[ORDER]][%[[P]]] : memref<?xi64>
// CHECK: %[[END:.+]] = arith.addi %[[P]], %c8
// CHECK: arith.minui %{{.+}}, %[[END]]
// Units of four groups: a lane's word of each row and group, the row's four
// scales in one load; the activations paired (0, 4), (1, 5), ...
// CHECK: scf.for
// CHECK: vector.load %[[X]]{{.*}} : memref<?x?xbf16>, vector<8xbf16>
// CHECK: vector.shuffle {{.*}} [0, 4, 1, 5, 2, 6, 3, 7]
// CHECK: vector.load %[[W1]]{{.*}} {alignment = 4 : i64} : memref<?x?x?xi8>, vector<4xi8>
// CHECK: vector.load %arg5{{.*}} {alignment = 4 : i64} : memref<?x?x?xi8>, vector<4xi8>
// Codes to bf16 pairs (E2M1 · 2^-126, then × 2^126 exactly), two mma steps
// from zero per group, then the group's scale.
// CHECK-DAG: arith.constant 570434048 : i32
// CHECK-DAG: arith.constant 31195612 : i32
// CHECK-DAG: arith.constant -2118090304 : i32
// CHECK-DAG: arith.constant 2122350208 : i32
// CHECK: llvm.inline_asm "lop3.b32 $0, $1, $2, $3, 0xD8;", "=r,r,r,r"
// CHECK: llvm.inline_asm "lop3.b32 $0, $1, $2, $3, 0xD8;", "=r,r,r,r"
// CHECK: llvm.inline_asm "fma.rn.bf16x2 $0, $1, $2, $3;", "=r,r,r,r"
// CHECK: nvvm.mma.sync A[{{.*}}] B[{{.*}}] C[%[[Z:[^,]+]], %[[Z]], %[[Z]], %[[Z]]]
// CHECK-SAME: shape = #nvvm.shape<m = 16, n = 8, k = 16>
// CHECK: nvvm.mma.sync
// CHECK: func.call @e8m0
// CHECK: arith.mulf {{.*}} fastmath<contract>
// The remaining groups one at a time (4-byte words, 1-byte scales).
// CHECK: scf.for
// CHECK: vector.load {{.*}} : memref<?x?x?xi8>, vector<4xi8>
// CHECK: memref.load {{.*}} : memref<?x?x?xi8>
// Outputs through the stage's own function, inside the segment only.
// CHECK: scf.if
// CHECK: func.call @h(%{{.+}}, %{{.+}}, %arg8, %arg9, %arg10) : (f32, f32, i1, f32, f32) -> bf16
// CHECK: memref.store
// CHECK: gpu.terminator
// CHECK-NEXT: } {k3.mma_shape = array<i64: 16, 8, 16>}
// Otherwise the stage's own body.
// CHECK: } else {
// CHECK: memref.store %{{.+}}, %arg11
// CHECK: return

func.func private @e8m0(%s: i8) -> f32 {
  %r = arith.uitofp %s : i8 to f32
  return %r : f32
}
func.func private @h(%g: f32, %u: f32, %silu: i1, %b1: f32, %b2: f32) -> bf16 {
  %s = arith.addf %g, %u : f32
  %r = arith.truncf %s : f32 to bf16
  return %r : bf16
}
func.func @up(%xi: memref<?x?xbf16>, %idx: memref<?x?xi64>, %order: memref<?xi64>, %rank: memref<?xi64>,
              %w1p: memref<?x?x?xi8>, %w1s: memref<?x?x?xi8>, %w3p: memref<?x?x?xi8>, %w3s: memref<?x?x?xi8>,
              %silu: i1, %b1: f32, %b2: f32, %hid: memref<?x?x?xbf16>)
    attributes {k3.mxfp4_experts = {scale = @e8m0, out = @h}} {
  %c0 = arith.constant 0 : index
  %z = arith.constant 0.0 : bf16
  memref.store %z, %hid[%c0, %c0, %c0] : memref<?x?x?xbf16>
  return
}

// -----

// The second stage: activations [T, topk, K] (one row per entry), one
// matrix, an f32 output.
// STAGED-DAG: memref.global "private" @k3k_experts_codes1 : memref<4x4x1x16x64xi8, #gpu.address_space<workgroup>> {alignment = 16 : i64}
// STAGED-DAG: memref.global "private" @k3k_experts_scales1 : memref<4x4x2x16x4xi8, #gpu.address_space<workgroup>> {alignment = 16 : i64}
// STAGED-LABEL: func.func @down
// LANES2-LABEL: func.func @down
// LANES2-NOT: launch_bounds
// LANES2-NOT: function(@
// A one-matrix stage takes two m tiles per warp by default (down-tiles=2):
// N % 32, blocks of 128 rows, the four rows g, g+8, g+16, g+24 of a lane
// read against the same 8 activation loads, 8 sums.
// LANES2: arith.remui %{{.+}}, %c32 : index
// LANES2: arith.ceildivui %{{.+}}, %c128 : index
// LANES2: scf.for {{.+}} -> (f32, f32, f32, f32, f32, f32, f32, f32) {
// LANES2-COUNT-8: vector.load %arg0[{{.+}}] {alignment = 16 : i64} : memref<?x?x?xbf16>, vector<8xbf16>
// LANES2-COUNT-4: vector.load %arg4[{{.+}}] {alignment = 16 : i64} : memref<?x?x?xi8>, vector<32xi8>
// LANES2-NOT: vector.load %arg4{{.+}}vector<32xi8>
// LANES2-COUNT-32: nvvm.mma.sync
// LANES2-NOT: nvvm.mma.sync
// LANES2: scf.yield
// Each of the lane's two entries stores its four rows under one test.
// LANES2: scf.if
// LANES2-COUNT-4: memref.store
// LANES2: scf.if
// LANES2-COUNT-4: memref.store
// By default (up-tiles=2, up-min-blocks=0) the gate/up stage alike: no
// bound, 16 sums, both matrices' four rows.
// TILES-LABEL: func.func @up
// TILES-NOT: launch_bounds
// TILES: arith.remui %{{.+}}, %c32 : index
// TILES: arith.ceildivui %{{.+}}, %c128 : index
// TILES: scf.for {{.+}} -> (f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32)
// TILES-COUNT-8: vector.load %arg0[{{.+}}] {alignment = 16 : i64} : memref<?x?xbf16>, vector<8xbf16>
// TILES-COUNT-4: vector.load %arg4[{{.+}}] {alignment = 16 : i64} : memref<?x?x?xi8>, vector<32xi8>
// TILES-COUNT-4: vector.load %arg6[{{.+}}] {alignment = 16 : i64} : memref<?x?x?xi8>, vector<32xi8>
// TILES-COUNT-64: nvvm.mma.sync
// TILES-NOT: nvvm.mma.sync
// TILES: scf.yield
// TILES-LABEL: func.func @down
// TILES: arith.ceildivui %{{.+}}, %c128 : index
// down-tiles=4: 64 rows per warp (N % 64, blocks of 256 rows), 8 rows of
// codes per lane against the same 8 activation loads, 16 sums.
// TILES4-LABEL: func.func @down
// TILES4: arith.remui %{{.+}}, %c64 : index
// TILES4: arith.ceildivui %{{.+}}, %c256 : index
// TILES4: scf.for {{.+}} -> (f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32) {
// TILES4-COUNT-8: vector.load %arg0[{{.+}}] {alignment = 16 : i64} : memref<?x?x?xbf16>, vector<8xbf16>
// TILES4-COUNT-8: vector.load %arg4[{{.+}}] {alignment = 16 : i64} : memref<?x?x?xi8>, vector<32xi8>
// TILES4-NOT: vector.load %arg4{{.+}}vector<32xi8>
// TILES4-COUNT-64: nvvm.mma.sync
// TILES4-NOT: nvvm.mma.sync
// TILES4: scf.yield
// With up-min-blocks=0 (the default) the kernel keeps its default name and
// no bound.
// NOBOUND-LABEL: func.func @up
// NOBOUND-NOT: launch_bounds
// NOBOUND-NOT: function(@
// STAGED: nvgpu.device_async_copy
// CHECK-LABEL: func.func @down
// CHECK: gpu.launch
// CHECK: vector.load %arg0[{{.+}}, {{.+}}, {{.+}}] {alignment = 16 : i64} : memref<?x?x?xbf16>, vector<8xbf16>
// CHECK: nvvm.mma.sync
// CHECK: func.call @y(%{{.+}}) : (f32) -> f32
// CHECK: memref.store %{{.+}}, %arg6[%{{.+}}, %{{.+}}, %{{.+}}] : memref<?x?x?xf32>
func.func private @e8m0(%s: i8) -> f32 {
  %r = arith.uitofp %s : i8 to f32
  return %r : f32
}
func.func private @y(%a: f32) -> f32 {
  return %a : f32
}
func.func @down(%hid: memref<?x?x?xbf16>, %idx: memref<?x?xi64>, %order: memref<?xi64>, %rank: memref<?xi64>,
                %w2p: memref<?x?x?xi8>, %w2s: memref<?x?x?xi8>, %ys: memref<?x?x?xf32>)
    attributes {k3.mxfp4_experts = {scale = @e8m0, out = @y}} {
  return
}

// -----

// f32 activations (an f32 library): the CUDA-core body stays alone.
// CHECK-LABEL: func.func @f32_stage
// CHECK-NOT: gpu.launch
// CHECK: return
func.func private @e8m0(%s: i8) -> f32 {
  %r = arith.uitofp %s : i8 to f32
  return %r : f32
}
func.func private @y(%a: f32) -> f32 {
  return %a : f32
}
func.func @f32_stage(%hid: memref<?x?x?xf32>, %idx: memref<?x?xi64>, %order: memref<?xi64>, %rank: memref<?xi64>,
                     %w2p: memref<?x?x?xi8>, %w2s: memref<?x?x?xi8>, %ys: memref<?x?x?xf32>)
    attributes {k3.mxfp4_experts = {scale = @e8m0, out = @y}} {
  return
}

// -----

func.func private @y(%a: f32) -> f32 {
  return %a : f32
}
// expected-error @+1 {{k3.mxfp4_experts: 'scale' must name a function (i8) -> f32}}
func.func @no_scale(%hid: memref<?x?x?xbf16>, %idx: memref<?x?xi64>, %order: memref<?xi64>, %rank: memref<?xi64>,
                    %w2p: memref<?x?x?xi8>, %w2s: memref<?x?x?xi8>, %ys: memref<?x?x?xf32>)
    attributes {k3.mxfp4_experts = {scale = @missing, out = @y}} {
  return
}

// -----

func.func private @e8m0(%s: i8) -> f32 {
  %r = arith.uitofp %s : i8 to f32
  return %r : f32
}
func.func private @y(%a: f32) -> f32 {
  return %a : f32
}
// expected-error @+1 {{k3.mxfp4_experts: 'out' must name a function of one f32 sum per matrix and the scalars, returning the output's element type}}
func.func @two_matrices_one_sum(%x: memref<?x?xbf16>, %idx: memref<?x?xi64>, %order: memref<?xi64>, %rank: memref<?xi64>,
                                %w1p: memref<?x?x?xi8>, %w1s: memref<?x?x?xi8>, %w3p: memref<?x?x?xi8>, %w3s: memref<?x?x?xi8>,
                                %ys: memref<?x?x?xf32>)
    attributes {k3.mxfp4_experts = {scale = @e8m0, out = @y}} {
  return
}

// -----

func.func private @e8m0(%s: i8) -> f32 {
  %r = arith.uitofp %s : i8 to f32
  return %r : f32
}
func.func private @y(%a: f32) -> f32 {
  return %a : f32
}
// expected-error @+1 {{k3.mxfp4_experts: expected at least one (packed, scales) pair of i8 memrefs}}
func.func @no_weights(%hid: memref<?x?x?xbf16>, %idx: memref<?x?xi64>, %order: memref<?xi64>, %rank: memref<?xi64>,
                      %w2p: memref<?x?x?xf32>, %w2s: memref<?x?x?xi8>, %ys: memref<?x?x?xf32>)
    attributes {k3.mxfp4_experts = {scale = @e8m0, out = @y}} {
  return
}

// -----

func.func private @e8m0(%s: i8) -> f32 {
  %r = arith.uitofp %s : i8 to f32
  return %r : f32
}
func.func private @y(%a: f32) -> f32 {
  return %a : f32
}
// expected-error @+1 {{k3.mxfp4_experts: expected memrefs activations [T, K] or [T, topk, K], idx [T, topk] i64, order and rank [T*topk] i64, output [T, topk, N]}}
func.func @rank_i32(%hid: memref<?x?x?xbf16>, %idx: memref<?x?xi64>, %order: memref<?xi64>, %rank: memref<?xi32>,
                    %w2p: memref<?x?x?xi8>, %w2s: memref<?x?x?xi8>, %ys: memref<?x?x?xf32>)
    attributes {k3.mxfp4_experts = {scale = @e8m0, out = @y}} {
  return
}

// -----

func.func private @e8m0(%s: i8) -> f32 {
  %r = arith.uitofp %s : i8 to f32
  return %r : f32
}
func.func private @y(%a: f32) -> f32 {
  return %a : f32
}
// expected-error @+1 {{k3.mxfp4_experts: expected (activations, idx, order, rank, packed, scales, ..., output) arguments}}
func.func @no_rank(%hid: memref<?x?x?xbf16>, %idx: memref<?x?xi64>, %order: memref<?xi64>,
                   %w2p: memref<?x?x?xi8>, %w2s: memref<?x?x?xi8>, %ys: memref<?x?x?xf32>)
    attributes {k3.mxfp4_experts = {scale = @e8m0, out = @y}} {
  return
}

// -----

// expected-error @+1 {{k3.mxfp4_experts must be a dictionary {scale, out}}}
func.func @not_a_dict(%hid: memref<?x?x?xbf16>) attributes {k3.mxfp4_experts = "up"} {
  return
}
