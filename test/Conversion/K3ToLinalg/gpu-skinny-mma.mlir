// RUN: k3-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(k3-gpu-skinny-mma,canonicalize,cse)' | FileCheck %s
// RUN: k3-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(k3-gpu-skinny-mma{sm=75})' | FileCheck %s --check-prefix=OLD
// OLD-NOT: gpu.launch
// OLD-NOT: nvvm.mma.sync
// OLD-NOT: memref.global
// RUN: k3-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(k3-gpu-skinny-mma{m-tiles=2},canonicalize,cse)' | FileCheck %s --check-prefix=MT
// RUN: not k3-opt %s --split-input-file --pass-pipeline='builtin.module(k3-gpu-skinny-mma{m-tiles=3})' 2>&1 | FileCheck %s --check-prefix=BADM
// BADM: k3-gpu-skinny-mma: m-tiles must be 1 or 2, got 3
// RUN: k3-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(k3-gpu-skinny-mma{prefetch-l2=4096},canonicalize,cse)' | FileCheck %s --check-prefix=PF
// RUN: k3-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(k3-gpu-skinny-mma,canonicalize,cse)' | FileCheck %s --check-prefix=NOPF
// NOPF-NOT: nvvm.cp.async.bulk.prefetch
// RUN: not k3-opt %s --split-input-file --pass-pipeline='builtin.module(k3-gpu-skinny-mma{prefetch-l2=1000})' 2>&1 | FileCheck %s --check-prefix=BADPF
// BADPF: k3-gpu-skinny-mma: prefetch-l2 must be a multiple of 256 from 0 to 65536, got 1000
// RUN: not k3-opt %s --split-input-file --pass-pipeline='builtin.module(k3-gpu-skinny-mma{sm=80 prefetch-l2=256})' 2>&1 | FileCheck %s --check-prefix=PF80
// PF80: k3-gpu-skinny-mma: prefetch-l2 needs sm_90 (cp.async.bulk.prefetch), the library targets sm_80

// k3k_linear_few after bufferization: x [T, K], W [N, K], the rounded
// output [T, N].
// The warps' rings: 4 warps x 3 stages x 16 rows x 128 elements, 48 KB,
// 16-byte aligned.
// The split products' counters (one per row block, zeroed at load).
// CHECK-DAG: memref.global "private" @k3k_skinny_count : memref<4096xi32, #gpu.address_space<global>> = dense<0> {alignment = 4 : i64}
// CHECK-DAG: memref.global "private" @k3k_skinny_ring : memref<4x3x16x128xbf16, #gpu.address_space<workgroup>> {alignment = 16 : i64}
// CHECK-LABEL: func.func @linear
// CHECK-SAME: (%[[X:[^:]+]]: memref<?x?xbf16>, %[[W:[^:]+]]: memref<?x?xbf16>, %[[OUT:[^:]+]]: memref<?x?xbf16>)
// Run-time choice, by N and K (and T within 1..16): N % 16, K % 128,
// K of x == K of W, 16-byte aligned x and W.
// CHECK-DAG: %[[T:.+]] = memref.dim %[[X]], %c0
// CHECK-DAG: %[[K:.+]] = memref.dim %[[X]], %c1
// CHECK-DAG: %[[N:.+]] = memref.dim %[[W]], %c0
// CHECK-DAG: arith.remui %[[N]], %c16
// CHECK-DAG: arith.remui %[[K]], %c128
// CHECK-DAG: arith.cmpi uge, %[[T]], %c1
// CHECK-DAG: arith.cmpi ule, %[[T]], %c16
// CHECK-DAG: memref.extract_aligned_pointer_as_index %[[X]]
// CHECK-DAG: memref.extract_aligned_pointer_as_index %[[W]]
// One block of four warps per 16 rows and slice of K: S = max(1,
// min(528 / (N / 16), K / 128 / 4)); the split rows' counters must fit.
// CHECK: %[[CH:.+]] = arith.divui %[[K]], %c128
// CHECK: %[[GX:.+]] = arith.divui %[[N]], %c16
// CHECK: %[[CH4:.+]] = arith.divui %[[CH]], %c4
// CHECK: %[[GX1:.+]] = arith.maxui %[[GX]], %c1
// CHECK: %[[WANT:.+]] = arith.divui %c528, %[[GX1]]
// CHECK: %[[FEW:.+]] = arith.minui %[[WANT]], %[[CH4]]
// CHECK: %[[S:.+]] = arith.maxui %[[FEW]], %c1
// CHECK: %[[BLOCKS:.+]] = arith.muli %[[GX]], %[[S]]
// CHECK: %[[SPLITS:.+]] = arith.cmpi ugt, %[[S]], %c1
// CHECK: %[[NCOUNT:.+]] = arith.select %[[SPLITS]], %[[GX]], %c0
// CHECK: arith.cmpi ule, %[[NCOUNT]], %c4096
// CHECK: scf.if
// The slices' sums in a [S, T, N] workspace (empty for S = 1).
// CHECK: %[[PARTS:.+]] = arith.select %[[SPLITS]], %[[S]], %c0
// CHECK: %[[PART:.+]] = memref.alloc(%[[PARTS]], %[[T]], %[[N]]) : memref<?x?x?xf32>
// A grid of row blocks x slices, the row block fastest.
// CHECK: gpu.launch blocks(%[[B:[^,]+]], %{{.+}}, %{{.+}}) in (%{{.+}} = %[[BLOCKS]], %{{.+}} = %c1, %{{.+}} = %c1{{.*}}) threads(%{{.+}}, %{{.+}}, %{{.+}}) in (%{{.+}} = %c128
// CHECK: %[[RB:.+]] = arith.remui %[[B]], %[[GX]]
// CHECK: %[[SL:.+]] = arith.divui %[[B]], %[[GX]]
// CHECK: %[[RING:.+]] = memref.get_global @k3k_skinny_ring
// Slice s: chunks [s C / S, (s + 1) C / S); a warp's: (that + 3 - warp) / 4.
// CHECK: %[[C0:.+]] = arith.muli %[[SL]], %[[CH]]
// CHECK: arith.divui %[[C0]], %[[S]]
// CHECK: arith.divui %{{.+}}, %[[S]]
// CHECK: arith.subi
// CHECK: %[[LEFT:.+]] = arith.subi
// CHECK: %[[MINE:.+]] = arith.divui %[[LEFT]], %c4
// Two stages issued before the loop, 8 copies of 16 bytes per lane each (16
// rows, 2 per copy), zero bytes past the warp's last chunk; odd rows with
// bit 2 of the piece flipped.
// CHECK: arith.xori
// CHECK: nvgpu.device_async_copy %[[W]][{{.+}}], %[[RING]][%{{.+}}, %c0, %{{.+}}, %{{.+}}], 8, %{{.+}} {bypassL1}
// CHECK-COUNT-7: nvgpu.device_async_copy %[[W]]
// CHECK: nvgpu.device_async_create_group
// CHECK-COUNT-8: nvgpu.device_async_copy %[[W]][{{.+}}], %[[RING]][%{{.+}}, %c1,
// CHECK: %[[G1:.+]] = nvgpu.device_async_create_group
// T <= 8: one n8 tile of tokens.
// CHECK: arith.cmpi ule, %[[T]], %c8
// CHECK: scf.if
// CHECK: scf.for %{{.+}} = %c0 to %[[MINE]] step %c1 iter_args({{[^)]+}}) -> (f32, f32, f32, f32)
// Each iteration: the warp is done with the stage it refills, the copies of
// chunk i + 2, then chunk i is in once at most two groups are pending.
// CHECK: nvvm.bar.warp.sync
// CHECK-COUNT-8: nvgpu.device_async_copy
// CHECK: %[[G:.+]] = nvgpu.device_async_create_group
// CHECK: nvgpu.device_async_wait %[[G]] {numGroups = 2 : i32}
// CHECK: nvvm.bar.warp.sync
// CHECK: %[[STAGE:.+]] = arith.remui %{{.+}}, %c3
// Fragments of rows g and g + 8 from the ring, the tokens from x, two mma
// per 32 elements (4 steps per chunk).
// CHECK: vector.load %[[RING]][%{{.+}}, %[[STAGE]], %{{.+}}, %{{.+}}] {alignment = 16 : i64} : memref<4x3x16x128xbf16, #gpu.address_space<workgroup>>, vector<8xbf16>
// CHECK: vector.load %[[RING]][%{{.+}}, %[[STAGE]], %{{.+}}, %{{.+}}] {alignment = 16 : i64}
// CHECK: vector.load %[[X]][%{{.+}}, %{{.+}}] {alignment = 16 : i64} : memref<?x?xbf16>, vector<8xbf16>
// CHECK: nvvm.mma.sync A[{{.*}}] B[{{.*}}] C[{{.*}}]
// CHECK-SAME: shape = #nvvm.shape<m = 16, n = 8, k = 16>
// CHECK: nvvm.mma.sync
// CHECK-COUNT-6: nvvm.mma.sync
// CHECK-NOT: nvvm.mma.sync
// CHECK: scf.yield
// CHECK: } else {
// T > 8: two tiles, 16 mma per chunk.
// CHECK: scf.for {{.*}} -> (f32, f32, f32, f32, f32, f32, f32, f32)
// CHECK-COUNT-16: nvvm.mma.sync
// CHECK-NOT: nvvm.mma.sync
// CHECK: scf.yield
// The warps' 8 sums per lane through stage 0 of their rings, then each
// warp adds two entries over the 4 warps in order: o(sum) for tokens < T.
// CHECK: nvgpu.device_async_wait %[[G1]] {numGroups = 0 : i32}
// CHECK-NEXT: gpu.barrier
// CHECK: vector.store %{{.+}}, %[[RING]][%{{.+}}, %c0, %{{.+}}, %{{.+}}] {alignment = 16 : i64} : memref<4x3x16x128xbf16, #gpu.address_space<workgroup>>, vector<16xbf16>
// CHECK-NEXT: gpu.barrier
// CHECK-NEXT: %[[ONE:.+]] = arith.cmpi eq, %[[S]], %c1
// CHECK: vector.load %[[RING]][%c0, %c0,
// CHECK: vector.load %[[RING]][%c1, %c0,
// CHECK: arith.addf
// CHECK: vector.load %[[RING]][%c2, %c0,
// CHECK: arith.addf
// CHECK: vector.load %[[RING]][%c3, %c0,
// CHECK: %[[SUM:.+]] = arith.addf
// S == 1: o(sum) for tokens < T; else the slice's sum in the workspace.
// CHECK: arith.cmpi ult, %{{.+}}, %[[T]]
// CHECK: scf.if %[[ONE]]
// CHECK: func.call @o(%[[SUM]]) : (f32) -> bf16
// CHECK: memref.store %{{.+}}, %[[OUT]]
// CHECK: } else {
// CHECK: memref.store %[[SUM]], %[[PART]][%[[SL]],
// CHECK: func.call @o
// CHECK: memref.store %{{.+}}, %[[PART]][%[[SL]],
// S > 1: fence, count the block in its row block's counter (thread 0),
// tell the block through the ring whether it was the last; the last block
// fences again, adds the slices in order from slice 0, stores o(total) and
// resets the counter.
// CHECK: scf.if %[[SPLITS]] {
// CHECK-NEXT: nvvm.memory.barrier <gpu>
// CHECK-NEXT: gpu.barrier
// CHECK-NEXT: %[[CNT:.+]] = memref.get_global @k3k_skinny_count : memref<4096xi32, #gpu.address_space<global>>
// CHECK: scf.if %[[T0:.+]] {
// CHECK-NEXT: %[[PRIOR:.+]] = memref.atomic_rmw addi %c1_i32, %[[CNT]][%[[RB]]]
// CHECK: arith.cmpi eq, %[[PRIOR]],
// CHECK: memref.store %{{.+}}, %[[RING]][%c0, %c0, %c0, %c0]
// CHECK: gpu.barrier
// CHECK-NEXT: %[[FLAG:.+]] = memref.load %[[RING]][%c0, %c0, %c0, %c0]
// CHECK-NEXT: %[[LAST:.+]] = arith.cmpf oeq, %[[FLAG]]
// CHECK-NEXT: scf.if %[[LAST]]
// CHECK-NEXT: nvvm.memory.barrier <gpu>
// CHECK: %[[P0:.+]] = memref.load %[[PART]][%c0,
// CHECK-NEXT: %[[TOT:.+]] = scf.for %[[I:.+]] = %c1 to %[[S]] step %c1 iter_args(%[[ACC:.+]] = %[[P0]]) -> (f32)
// CHECK-NEXT: %[[P:.+]] = memref.load %[[PART]][%[[I]],
// CHECK-NEXT: arith.addf %[[ACC]], %[[P]]
// CHECK: func.call @o(%[[TOT]])
// CHECK: memref.store %{{.+}}, %[[OUT]]
// CHECK: func.call @o
// CHECK: scf.if %[[T0]]
// CHECK-NEXT: memref.store %c0_i32, %[[CNT]][%[[RB]]]
// CHECK: gpu.terminator
// CHECK-NEXT: } {k3.mma_shape = array<i64: 16, 8, 16>}
// Otherwise the function's own body.
// CHECK: } else {
// CHECK: memref.store %{{.+}}, %[[OUT]][%c0, %c0]
// CHECK: return

// m-tiles=2: from 4 tokens, a matrix not split over K (S == 1) with N % 32
// == 0 has blocks of 32 rows; S as before (from N / 16); a split one keeps
// 16.
// MT-LABEL: func.func @linear
// MT-SAME: (%[[X:[^:]+]]: memref<?x?xbf16>, %[[W:[^:]+]]: memref<?x?xbf16>
// MT-DAG: %[[T:.+]] = memref.dim %[[X]], %c0
// MT-DAG: %[[N:.+]] = memref.dim %[[W]], %c0
// MT: %[[GX16:.+]] = arith.divui %[[N]], %c16
// MT: %[[GX1:.+]] = arith.maxui %[[GX16]], %c1
// MT: arith.divui %c528, %[[GX1]]
// MT: %[[S:.+]] = arith.maxui %{{.+}}, %c1
// MT-NEXT: %[[T4:.+]] = arith.cmpi uge, %[[T]], %c4
// MT-NEXT: %[[R32:.+]] = arith.remui %[[N]], %c32
// MT-NEXT: %[[N32:.+]] = arith.cmpi eq, %[[R32]], %c0
// MT-NEXT: %[[S1:.+]] = arith.cmpi eq, %[[S]], %c1
// MT-NEXT: %[[WIDE:.+]] = arith.andi %[[S1]], %[[N32]]
// MT-NEXT: %[[TWO:.+]] = arith.andi %[[WIDE]], %[[T4]]
// MT: %[[GX32:.+]] = arith.divui %[[N]], %c32
// MT: %[[GX:.+]] = arith.select %[[TWO]], %[[GX32]], %[[GX16]]
// MT: %[[BLOCKS:.+]] = arith.muli %[[GX]], %[[S]]
// MT: gpu.launch blocks({{.+}}) in (%{{.+}} = %[[BLOCKS]],
// MT: arith.remui %{{.+}}, %[[GX]]
// MT: %[[RING:.+]] = memref.get_global @k3k_skinny_ring
// MT: arith.select %[[TWO]], %c32, %c16
// MT: arith.addi %{{.+}}, %c3
// MT-NEXT: %[[LEFT:.+]] = arith.subi
// MT-NEXT: %[[MINE:.+]] = arith.divui %[[LEFT]], %c4
// 32 rows: the ring as stages of 32 rows x 64 elements (the same 48 KB).
// prefetch-l2: past the two stages' 8 chunks of the slice, threads 0-15
// each ask L2 for the next min(4096, rest) bytes of their row of W, with
// W's pointer marked as only read (k3-gpu-kernel-access: still `r`).
// PF-LABEL: func.func @linear
// PF-SAME: (%{{[^:]+}}: memref<?x?xbf16>, %[[W:[^:]+]]: memref<?x?xbf16>
// PF: gpu.launch
// PF-SAME: threads(%[[TID:[^,]+]],
// PF: nvgpu.device_async_create_group
// PF: nvgpu.device_async_create_group
// PF-NEXT: %[[REST:.+]] = arith.subi %{{.+}}, %c8
// PF-NEXT: %[[MORE:.+]] = arith.cmpi sgt, %[[REST]], %c0
// PF-NEXT: %[[ROW:.+]] = arith.cmpi slt, %[[TID]], %c16
// PF-NEXT: %[[GO:.+]] = arith.andi %[[ROW]], %[[MORE]]
// PF-NEXT: scf.if %[[GO]] {
// PF-NEXT: %[[ROW:.+]] = arith.addi %{{.+}}, %[[TID]]
// PF: %[[BYTES:.+]] = arith.muli %[[REST]], %c256
// PF-NEXT: %[[SIZE:.+]] = arith.minsi %[[BYTES]], %c4096
// PF-NEXT: %{{.+}}, %{{.+}}, %{{.+}}:2, %[[STRIDES:.+]]:2 = memref.extract_strided_metadata %[[W]]
// PF-NEXT: %[[BASE:.+]] = memref.extract_aligned_pointer_as_index %[[W]] : memref<?x?xbf16> -> index {k3.read_only}
// PF-NEXT: arith.muli %[[ROW]], %[[STRIDES]]#0
// PF: %[[AT:.+]] = arith.addi %[[BASE]],
// PF-NEXT: %[[AT64:.+]] = arith.index_cast %[[AT]] : index to i64
// PF-NEXT: %[[SIZE32:.+]] = arith.index_cast %[[SIZE]] : index to i32
// PF-NEXT: %[[PTR:.+]] = llvm.inttoptr %[[AT64]] : i64 to !llvm.ptr<1>
// PF-NEXT: nvvm.cp.async.bulk.prefetch %[[PTR]], %[[SIZE32]]
// PF-NEXT: }
// PF-NEXT: arith.cmpi ule
// MT: scf.if %[[TWO]] -> (f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32)
// MT-NEXT: %[[ST:.+]] = memref.reinterpret_cast %[[RING]] to offset: [0], sizes: [4, 3, 32, 64], strides: [6144, 2048, 64, 1]
// 8 copies of 16 bytes per lane and stage (32 rows, 4 per copy).
// MT-COUNT-8: nvgpu.device_async_copy %[[W]][{{.+}}], %[[ST]][%{{.+}}, %c0,
// MT-NEXT: nvgpu.device_async_create_group
// MT-COUNT-8: nvgpu.device_async_copy %[[W]][{{.+}}], %[[ST]][%{{.+}}, %c1,
// Two stages per chunk; per 32 elements the rows g, g + 8 of both m tiles,
// then one read of the tokens for 4 mma.
// MT: %[[STAGES:.+]] = arith.muli %[[MINE]], %c2
// MT: scf.for %{{.+}} = %c0 to %[[STAGES]] step %c1 iter_args({{[^)]+}}) -> (f32, f32, f32, f32, f32, f32, f32, f32)
// MT: nvgpu.device_async_wait %{{.+}} {numGroups = 2 : i32}
// MT-COUNT-4: vector.load %[[ST]]
// MT: vector.load %[[X]]
// MT-COUNT-4: nvvm.mma.sync
// MT-COUNT-4: vector.load %[[ST]]
// MT: vector.load %[[X]]
// MT-COUNT-4: nvvm.mma.sync
// MT-NOT: nvvm.mma.sync
// MT: scf.yield
// T > 8: 16 accumulators, 16 mma per stage.
// MT: scf.for {{.*}} -> (f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32)
// MT-COUNT-16: nvvm.mma.sync
// MT-NOT: nvvm.mma.sync
// MT: scf.yield
// 16 rows (a split matrix): the m-tiles=1 body, the second tile's sums zero.
// MT: } else {
// MT-NOT: memref.reinterpret_cast
// MT: nvgpu.device_async_copy %[[W]][{{.+}}], %[[RING]][
// MT: scf.for {{.*}} -> (f32, f32, f32, f32)
// MT-COUNT-8: nvvm.mma.sync
// MT-NOT: nvvm.mma.sync
// MT: scf.yield
// MT: scf.for {{.*}} -> (f32, f32, f32, f32, f32, f32, f32, f32)
// MT-COUNT-16: nvvm.mma.sync
// MT-NOT: nvvm.mma.sync
// MT: scf.yield
// Each m tile's sums through rows lane / 4 + 8 m of stage 0; 4 entries per
// warp, those of m tile 1 16 rows down and stored only with 32-row blocks
// (never into the slices' sums).
// MT: vector.store %{{.+}}, %[[RING]][%{{.+}}, %c0, %[[Q:[^,]+]], %[[COL:[0-9a-z_]+]]]
// MT: vector.store %{{.+}}, %[[RING]][%{{.+}}, %c0, %[[Q8:[^,]+]], %[[COL]]]
// MT-COUNT-2: func.call @o(
// MT: arith.addi %{{.+}}, %c16
// MT: arith.andi %{{.+}}, %[[TWO]]
// MT-NEXT: scf.if
// MT: func.call @o(
// MT: arith.andi %{{.+}}, %[[TWO]]
// MT-NEXT: scf.if
// MT: func.call @o(
// MT: gpu.terminator
func.func private @o(%a: f32) -> bf16 {
  %r = arith.truncf %a : f32 to bf16
  return %r : bf16
}
func.func @linear(%x: memref<?x?xbf16>, %w: memref<?x?xbf16>, %out: memref<?x?xbf16>)
    attributes {k3.skinny_matmul = {out = @o}} {
  %c0 = arith.constant 0 : index
  %z = arith.constant 0.0 : bf16
  memref.store %z, %out[%c0, %c0] : memref<?x?xbf16>
  return
}

// -----

// Two matrices against one x (k3-group-calls' @k3k_linear_few_x2): one
// launch over the row blocks of both, each matrix split as it would be
// alone; a block past the first matrix's blocks takes the second's W,
// output, workspace and counters (after the first's split rows).
// CHECK-LABEL: func.func @pair
// CHECK-SAME: (%[[X:[^:]+]]: memref<?x?xbf16>, %[[W0:[^:]+]]: memref<?x?xbf16>, %[[W1:[^:]+]]: memref<?x?xbf16>, %[[O0:[^:]+]]: memref<?x?xbf16>, %[[O1:[^:]+]]: memref<?x?xbf16>)
// CHECK-DAG: %[[N0:.+]] = memref.dim %[[W0]], %c0
// CHECK-DAG: %[[N1:.+]] = memref.dim %[[W1]], %c0
// CHECK-DAG: memref.extract_aligned_pointer_as_index %[[W0]]
// CHECK-DAG: memref.extract_aligned_pointer_as_index %[[W1]]
// CHECK: %[[R0:.+]] = arith.divui %[[N0]], %c16
// CHECK: arith.minui
// CHECK-NEXT: %[[S0:.+]] = arith.maxui %{{.+}}, %c1
// CHECK: %[[B0:.+]] = arith.muli %[[R0]], %[[S0]]
// CHECK: %[[SPLIT0:.+]] = arith.cmpi ugt, %[[S0]], %c1
// CHECK: %[[C1:.+]] = arith.select %[[SPLIT0]], %[[R0]], %c0
// CHECK: %[[R1:.+]] = arith.divui %[[N1]], %c16
// CHECK: arith.minui
// CHECK-NEXT: %[[S1:.+]] = arith.maxui %{{.+}}, %c1
// CHECK: %[[B1:.+]] = arith.muli %[[R1]], %[[S1]]
// CHECK: %[[ALL:.+]] = arith.addi %[[B0]], %[[B1]]
// CHECK: scf.if
// CHECK: %[[P0:.+]] = memref.alloc(%{{.+}}, %{{.+}}, %[[N0]]) : memref<?x?x?xf32>
// CHECK: %[[P1:.+]] = memref.alloc(%{{.+}}, %{{.+}}, %[[N1]]) : memref<?x?x?xf32>
// CHECK: gpu.launch blocks(%[[B:[^,]+]], %{{.+}}, %{{.+}}) in (%{{.+}} = %[[ALL]], %{{.+}} = %c1, %{{.+}} = %c1{{.*}})
// CHECK: %[[HERE:.+]] = arith.cmpi uge, %[[B]], %[[B0]]
// CHECK-DAG: %[[W:.+]] = arith.select %[[HERE]], %[[W1]], %[[W0]] : memref<?x?xbf16>
// CHECK-DAG: %[[O:.+]] = arith.select %[[HERE]], %[[O1]], %[[O0]] : memref<?x?xbf16>
// CHECK-DAG: %[[RB:.+]] = arith.select %[[HERE]], %[[R1]], %[[R0]] : index
// CHECK-DAG: %[[FIRST:.+]] = arith.select %[[HERE]], %[[B0]], %c0 : index
// CHECK-DAG: %[[CBASE:.+]] = arith.select %[[HERE]], %[[C1]], %c0 : index
// CHECK-DAG: arith.select %[[HERE]], %[[P1]], %[[P0]] : memref<?x?x?xf32>
// CHECK: %[[LOCAL:.+]] = arith.subi %[[B]], %[[FIRST]]
// CHECK: %[[ROW:.+]] = arith.remui %[[LOCAL]], %[[RB]]
// CHECK: arith.divui %[[LOCAL]], %[[RB]]
// CHECK: arith.addi %[[CBASE]], %[[ROW]]
// CHECK: nvgpu.device_async_copy %[[W]]
// CHECK: memref.store %{{.+}}, %[[O]]
// Otherwise the function's own body.
// CHECK: } else {
// CHECK: memref.store %{{.+}}, %[[O0]][%c0, %c0]
// CHECK: memref.store %{{.+}}, %[[O1]][%c0, %c0]
func.func private @o(%a: f32) -> bf16 {
  %r = arith.truncf %a : f32 to bf16
  return %r : bf16
}
func.func @pair(%x: memref<?x?xbf16>, %w0: memref<?x?xbf16>, %w1: memref<?x?xbf16>,
                %out0: memref<?x?xbf16>, %out1: memref<?x?xbf16>)
    attributes {k3.skinny_matmul = {out = @o}} {
  %c0 = arith.constant 0 : index
  %z = arith.constant 0.0 : bf16
  memref.store %z, %out0[%c0, %c0] : memref<?x?xbf16>
  memref.store %z, %out1[%c0, %c0] : memref<?x?xbf16>
  return
}

// -----

// Products of one x with outputs of different types (k3-group-calls'
// @k3k_matmul_few_x1_linear_few_x1: an f32 router beside a bf16
// projection), `out` one function per matrix: a block stores o_i of its
// sums into output i, chosen by a switch on its matrix.
// CHECK-LABEL: func.func @router_and_projection
// CHECK: gpu.launch
// CHECK: %[[HERE:.+]] = arith.cmpi uge
// CHECK: %[[M:.+]] = arith.select %[[HERE]], %c1, %c0 : index
// CHECK: scf.index_switch %[[M]]
// CHECK-NEXT: case 0 {
// CHECK-NEXT: %[[S:.+]] = func.call @sum(%{{.+}}) : (f32) -> f32
// CHECK-NEXT: memref.store %[[S]], %arg3[%{{.+}}, %{{.+}}] : memref<?x?xf32>
// CHECK: case 1 {
// CHECK-NEXT: %[[R:.+]] = func.call @o(%{{.+}}) : (f32) -> bf16
// CHECK-NEXT: memref.store %[[R]], %arg4[%{{.+}}, %{{.+}}] : memref<?x?xbf16>
func.func private @sum(%a: f32) -> f32 {
  return %a : f32
}
func.func private @o(%a: f32) -> bf16 {
  %r = arith.truncf %a : f32 to bf16
  return %r : bf16
}
func.func @router_and_projection(%x: memref<?x?xbf16>, %w0: memref<?x?xbf16>, %w1: memref<?x?xbf16>,
                                 %out0: memref<?x?xf32>, %out1: memref<?x?xbf16>)
    attributes {k3.skinny_matmul = {out = [@sum, @o]}} {
  return
}

// -----

func.func private @sum(%a: f32) -> f32 {
  return %a : f32
}
// expected-error @+1 {{k3.skinny_matmul: expected one 'out' function per matrix (2), not 3}}
func.func @too_many_outs(%x: memref<?x?xbf16>, %w0: memref<?x?xbf16>, %w1: memref<?x?xbf16>,
                         %out0: memref<?x?xf32>, %out1: memref<?x?xf32>)
    attributes {k3.skinny_matmul = {out = [@sum, @sum, @sum]}} {
  return
}

// -----

// An f32 output (k3k_matmul_few): the same kernel, o = the sum itself.
// CHECK-LABEL: func.func @matmul
// CHECK: gpu.launch
// CHECK: func.call @sum(%{{.+}}) : (f32) -> f32
// CHECK: memref.store %{{.+}}, %arg2[%{{.+}}, %{{.+}}] : memref<?x?xf32>
func.func private @sum(%a: f32) -> f32 {
  return %a : f32
}
func.func @matmul(%x: memref<?x?xbf16>, %w: memref<?x?xbf16>, %out: memref<?x?xf32>)
    attributes {k3.skinny_matmul = {out = @sum}} {
  return
}

// -----

// f32 activations (an f32 library): the CUDA-core body stays alone.
// CHECK-NOT: memref.global
// CHECK-LABEL: func.func @f32_tokens
// CHECK-NOT: gpu.launch
// CHECK: return
func.func private @sum(%a: f32) -> f32 {
  return %a : f32
}
func.func @f32_tokens(%x: memref<?x?xf32>, %w: memref<?x?xbf16>, %out: memref<?x?xf32>)
    attributes {k3.skinny_matmul = {out = @sum}} {
  return
}

// -----

// expected-error @+1 {{k3.skinny_matmul: expected a dictionary {out = @function}}}
func.func @not_a_dict(%x: memref<?x?xbf16>, %w: memref<?x?xbf16>, %out: memref<?x?xf32>)
    attributes {k3.skinny_matmul = "few"} {
  return
}

// -----

func.func private @sum(%a: f32) -> f32 {
  return %a : f32
}
// expected-error @+1 {{k3.skinny_matmul: expected (x [T, K], bf16 W_1 [N_1, K] ..., outputs [T, N_1] ...) memrefs, as many outputs as W}}
func.func @f32_weights(%x: memref<?x?xbf16>, %w: memref<?x?xf32>, %out: memref<?x?xf32>)
    attributes {k3.skinny_matmul = {out = @sum}} {
  return
}

// -----

func.func private @sum(%a: f32) -> f32 {
  return %a : f32
}
// expected-error @+1 {{k3.skinny_matmul: 'out' must name a function (f32) -> the output's element type}}
func.func @wrong_out(%x: memref<?x?xbf16>, %w: memref<?x?xbf16>, %out: memref<?x?xbf16>)
    attributes {k3.skinny_matmul = {out = @sum}} {
  return
}

// -----

func.func private @sum(%a: f32) -> f32 {
  return %a : f32
}
// expected-error @+1 {{k3.skinny_matmul: the function must return nothing}}
func.func @returns(%x: memref<?x?xbf16>, %w: memref<?x?xbf16>, %out: memref<?x?xf32>) -> index
    attributes {k3.skinny_matmul = {out = @sum}} {
  %c0 = arith.constant 0 : index
  return %c0 : index
}

// -----

func.func private @sum(%a: f32) -> f32 {
  return %a : f32
}
// Outputs of two types.
// expected-error @+1 {{k3.skinny_matmul: expected (x [T, K], bf16 W_1 [N_1, K] ..., outputs [T, N_1] ...) memrefs, as many outputs as W}}
func.func @mixed_outputs(%x: memref<?x?xbf16>, %w0: memref<?x?xbf16>, %w1: memref<?x?xbf16>,
                         %out0: memref<?x?xf32>, %out1: memref<?x?xbf16>)
    attributes {k3.skinny_matmul = {out = @sum}} {
  return
}

// -----

// With an addend r [T, N] (k3k_linear_add_few: the MoE's round(round(R) +
// Sh)): the same kernel; its shape is part of the run-time choice, and each
// stored output is o(sum, r[t, n]), also where a split row block's last
// block stores the slices' total.
// CHECK-LABEL: func.func @linear_add
// CHECK-SAME: (%[[X:[^:]+]]: memref<?x?xbf16>, %[[W:[^:]+]]: memref<?x?xbf16>, %[[R:[^:]+]]: memref<?x?xbf16>, %[[OUT:[^:]+]]: memref<?x?xbf16>)
// CHECK-DAG: %[[T:.+]] = memref.dim %[[X]], %c0
// CHECK-DAG: %[[N:.+]] = memref.dim %[[W]], %c0
// CHECK-DAG: %[[RT:.+]] = memref.dim %[[R]], %c0
// CHECK-DAG: %[[RN:.+]] = memref.dim %[[R]], %c1
// CHECK-DAG: arith.cmpi eq, %[[RT]], %[[T]]
// CHECK-DAG: arith.cmpi eq, %[[RN]], %[[N]]
// CHECK: gpu.launch
// CHECK: %[[RV:.+]] = memref.load %[[R]][%[[TOK:.+]], %[[ROW:.+]]] : memref<?x?xbf16>
// CHECK: %[[V:.+]] = func.call @o_add(%{{.+}}, %[[RV]]) : (f32, bf16) -> bf16
// CHECK: memref.store %[[V]], %[[OUT]][%[[TOK]], %[[ROW]]]
// CHECK: %[[RV2:.+]] = memref.load %[[R]]
// CHECK: func.call @o_add(%{{.+}}, %[[RV2]]) : (f32, bf16) -> bf16
// CHECK: gpu.terminator
// The generic body in the else.
// CHECK: } else {
// CHECK: func.call @generic
func.func private @o_add(%a: f32, %r: bf16) -> bf16 {
  %t = arith.truncf %a : f32 to bf16
  %x = arith.extf %t : bf16 to f32
  %y = arith.extf %r : bf16 to f32
  %s = arith.addf %x, %y : f32
  %o = arith.truncf %s : f32 to bf16
  return %o : bf16
}
func.func private @generic(%x: memref<?x?xbf16>)
func.func @linear_add(%x: memref<?x?xbf16>, %w: memref<?x?xbf16>, %r: memref<?x?xbf16>, %out: memref<?x?xbf16>)
    attributes {k3.skinny_matmul = {out = @o_add, addend}} {
  func.call @generic(%x) : (memref<?x?xbf16>) -> ()
  return
}

// -----

func.func private @o(%a: f32) -> bf16 {
  %r = arith.truncf %a : f32 to bf16
  return %r : bf16
}
// expected-error @+1 {{k3.skinny_matmul: with 'addend', 'out' must name a function (f32, the addend's element type) -> the output's element type}}
func.func @addend_out_takes_one(%x: memref<?x?xbf16>, %w: memref<?x?xbf16>, %r: memref<?x?xbf16>, %out: memref<?x?xbf16>)
    attributes {k3.skinny_matmul = {out = @o, addend}} {
  return
}

// -----

func.func private @o_add(%a: f32, %r: bf16) -> bf16 {
  %t = arith.truncf %a : f32 to bf16
  return %t : bf16
}
// Two matrices and an addend.
// expected-error @+1 {{k3.skinny_matmul: with 'addend', expected (x [T, K], bf16 W [N, K], addend [T, N], output [T, N]) memrefs and one 'out' function}}
func.func @addend_two_matrices(%x: memref<?x?xbf16>, %w0: memref<?x?xbf16>, %w1: memref<?x?xbf16>,
                               %r: memref<?x?xbf16>, %out: memref<?x?xbf16>)
    attributes {k3.skinny_matmul = {out = @o_add, addend}} {
  return
}

// -----

// With `combine_norm` (k3k_latent_up_add_few: round(W RMSNorm(Σ_s ω_s y_s;
// γ) + r)): one launch of 8 T producer blocks, then the product's blocks.
// CHECK-DAG: memref.global "private" @k3k_skinny_norm_ready : memref<2xi32, #gpu.address_space<global>> = dense<0>
// CHECK-LABEL: func.func @latent_up
// CHECK-SAME: (%[[YS:[^:]+]]: memref<?x?x?xf32>, %[[WTS:[^:]+]]: memref<?x?xf32>, %[[G:[^:]+]]: memref<?xbf16>, %[[EPS:[^:]+]]: f32, %[[W:[^:]+]]: memref<?x?xbf16>, %[[R:[^:]+]]: memref<?x?xbf16>, %[[OUT:[^:]+]]: memref<?x?xbf16>)
// T and D from y; y 32-byte and γ 16-byte aligned, ω as y, γ of D.
// CHECK-DAG: %[[T:.+]] = memref.dim %[[YS]], %c0
// CHECK-DAG: %[[D:.+]] = memref.dim %[[YS]], %c2
// CHECK-DAG: arith.remui %[[D]], %c128
// CHECK-DAG: memref.extract_aligned_pointer_as_index %[[YS]]
// CHECK-DAG: arith.remui %{{.+}}, %c32
// CHECK-DAG: memref.dim %[[G]], %c0
// CHECK: scf.if
// r [T, D] and the warps' sums of squares [T, 32] in the workspace.
// CHECK: %[[RB:.+]] = memref.alloc(%[[T]], %[[D]]) : memref<?x?xbf16>
// CHECK: %[[SQ:.+]] = memref.alloc(%[[T]]) : memref<?x32xf32>
// CHECK: %[[PROD:.+]] = arith.muli %[[T]], %c8
// CHECK: %[[GRID:.+]] = arith.addi %[[PROD]], %{{.+}}
// CHECK: gpu.launch blocks(%[[B:[^,]+]], {{.*}} in (%{{.+}} = %[[GRID]], {{.*}} threads(%[[TID:[^,]+]], {{.*}} in (%{{.+}} = %c128
// Producer block p of token t: thread v = 128 p + tid of the norm kernel,
// its pieces 8 v, 8 v + 8192, ...; r = round(Σ_s ω_s y_s) from 0.
// CHECK: %[[ISP:.+]] = arith.cmpi ult, %[[B]], %[[PROD]]
// CHECK: scf.if %[[ISP]] {
// CHECK-DAG: %[[TOK:.+]] = arith.divui %[[B]], %c8
// CHECK-DAG: %[[PART:.+]] = arith.remui %[[B]], %c8
// CHECK: %[[V0:.+]] = arith.muli %[[PART]], %c128
// CHECK: %[[V:.+]] = arith.addi %[[V0]], %[[TID]]
// CHECK: %[[J0:.+]] = arith.muli %[[V]], %c8
// The loads of 8 entries together, added in order; then the rest.
// CHECK: scf.for %[[J:.+]] = %[[J0]] to %[[D]] step %c8192 iter_args(%[[SS:.+]] = %cst
// CHECK: %[[K8:.+]] = arith.divui %[[K:.+]], %c8
// CHECK: %[[MOST:.+]] = arith.muli %[[K8]], %c8
// CHECK: scf.for %[[S:.+]] = %c0 to %[[MOST]] step %c8 iter_args
// CHECK: memref.load %[[WTS]][%[[TOK]], %[[S]]]
// CHECK: vector.load %[[YS]][%[[TOK]], %[[S]], %[[J]]] {alignment = 32 : i64} : memref<?x?x?xf32>, vector<8xf32>
// CHECK-COUNT-7: vector.load %[[YS]]
// CHECK-COUNT-64: arith.mulf
// CHECK: scf.for %[[S1:.+]] = %[[MOST]] to %[[K]] step %c1 iter_args
// CHECK: vector.load %[[YS]][%[[TOK]], %[[S1]], %[[J]]]
// CHECK-COUNT-8: arith.mulf
// CHECK: func.call @narrow
// CHECK: func.call @widen
// CHECK: vector.store %{{.+}}, %[[RB]][%[[TOK]], %[[J]]] {alignment = 16 : i64}
// Its warp's tree, lane 0's sum at [t, 4 p + warp]; fence, barrier, count.
// CHECK-COUNT-5: gpu.shuffle  xor
// CHECK: memref.store %{{.+}}, %[[SQ]][%[[TOK]], %{{.+}}]
// CHECK: nvvm.memory.barrier <gpu>
// CHECK: gpu.barrier
// CHECK: %[[READY:.+]] = memref.get_global @k3k_skinny_norm_ready
// CHECK: memref.atomic_rmw addi %c1_i32, %[[READY]][%c0]
// The product blocks (block - 8 T): the first two stages, then thread 0
// waits for all 8 T counts.
// CHECK: } else {
// CHECK: arith.subi %[[B]], %[[PROD]]
// CHECK-COUNT-16: nvgpu.device_async_copy
// CHECK: %[[NEED:.+]] = arith.index_cast %[[PROD]] : index to i32
// CHECK: %[[READY2:.+]] = memref.get_global @k3k_skinny_norm_ready
// CHECK: memref.extract_aligned_pointer_as_index %[[READY2]]
// CHECK: scf.while
// CHECK: %[[COUNT:.+]] = llvm.inline_asm has_side_effects "ld.acquire.gpu.global.b32 $0, [$1];"
// CHECK: arith.cmpi ult, %[[COUNT]], %[[NEED]]
// CHECK: nvvm.nanosleep
// CHECK: gpu.barrier
// CHECK: nvvm.memory.barrier <gpu>
// Each token's 1 / sqrt(ss / D + eps) from its 32 sums: warp w takes
// tokens w, w + 4, w + 8, w + 12 (their loads first, the index clamped to
// T - 1), lane 0 keeps each of those below T in the third stage of warp
// 0's ring.
// CHECK-COUNT-4: memref.load %[[SQ]][%{{.+}}, %{{.+}}] : memref<?x32xf32>
// CHECK-COUNT-5: gpu.shuffle  xor
// CHECK: arith.divf
// CHECK: arith.addf %{{.+}}, %[[EPS]]
// CHECK: math.sqrt
// CHECK: %[[BELOW:.+]] = arith.cmpi ult, %{{.+}}, %[[T]]
// CHECK: %[[LANE0:.+]] = arith.cmpi eq, %{{.+}}, %c0
// CHECK: %[[KEEP:.+]] = arith.andi %[[LANE0]], %[[BELOW]]
// CHECK: scf.if %[[KEEP]] {
// CHECK: vector.store %{{.+}}, %{{.+}}[%c0, %c2, %c0, %{{.+}}] {alignment = 4 : i64}
// CHECK-COUNT-3: math.sqrt
// CHECK: gpu.barrier
// CHECK: %[[INV0:.+]] = vector.extract
// CHECK: gpu.barrier
// Tokens as mma B fragments: round(round(r · inv) · γ) of 8 elements.
// CHECK: vector.load %[[RB]]
// CHECK: vector.load %[[G]]
// CHECK: func.call @widen
// CHECK: arith.mulf %{{.+}}, %[[INV0]]
// CHECK: func.call @round
// CHECK: func.call @narrow
// CHECK: nvvm.mma.sync
// Outputs o(sum, r[t, n]).
// CHECK: func.call @o_add
// The last product block resets both counts.
// CHECK: memref.atomic_rmw addi %c1_i32, %[[READY2]][%c1]
// CHECK: memref.store %c0_i32, %[[READY2]][%c0]
// CHECK: memref.store %c0_i32, %[[READY2]][%c1]
// CHECK: gpu.terminator
// CHECK: } else {
// CHECK: func.call @generic
func.func private @widen(%a: bf16) -> f32 {
  %r = arith.extf %a : bf16 to f32
  return %r : f32
}
func.func private @narrow(%a: f32) -> bf16 {
  %r = arith.truncf %a : f32 to bf16
  return %r : bf16
}
func.func private @round(%a: f32) -> f32 {
  %r = arith.truncf %a : f32 to bf16
  %e = arith.extf %r : bf16 to f32
  return %e : f32
}
func.func private @o_add(%a: f32, %r: bf16) -> bf16 {
  %t = arith.truncf %a : f32 to bf16
  return %t : bf16
}
func.func private @generic(%x: memref<?x?x?xf32>)
func.func @latent_up(%ys: memref<?x?x?xf32>, %wts: memref<?x?xf32>, %g: memref<?xbf16>, %eps: f32,
                     %w: memref<?x?xbf16>, %r: memref<?x?xbf16>, %out: memref<?x?xbf16>)
    attributes {k3.skinny_matmul = {out = @o_add, addend, combine_norm = {widen = @widen, narrow = @narrow, round = @round}}} {
  func.call @generic(%ys) : (memref<?x?x?xf32>) -> ()
  return
}

// -----

func.func private @o_add(%a: f32, %r: bf16) -> bf16 {
  %t = arith.truncf %a : f32 to bf16
  return %t : bf16
}
// expected-error @+1 {{k3.skinny_matmul: 'combine_norm' must be {widen = (act) -> f32, narrow = (f32) -> act, round = (f32) -> f32}}}
func.func @no_conversions(%ys: memref<?x?x?xf32>, %wts: memref<?x?xf32>, %g: memref<?xbf16>, %eps: f32,
                          %w: memref<?x?xbf16>, %r: memref<?x?xbf16>, %out: memref<?x?xbf16>)
    attributes {k3.skinny_matmul = {out = @o_add, addend, combine_norm = {}}} {
  return
}

// -----

func.func private @o_add(%a: f32, %r: bf16) -> bf16 {
  %t = arith.truncf %a : f32 to bf16
  return %t : bf16
}
// Without the addend.
// expected-error @+1 {{k3.skinny_matmul: with 'combine_norm', expected 'addend' and (y [T, k, D] f32, weights [T, k] f32, bf16 gamma [D], f32 eps, bf16 W [N, D], addend [T, N], output [T, N]) memrefs}}
func.func @no_addend(%ys: memref<?x?x?xf32>, %wts: memref<?x?xf32>, %g: memref<?xbf16>, %eps: f32,
                     %w: memref<?x?xbf16>, %r: memref<?x?xbf16>, %out: memref<?x?xbf16>)
    attributes {k3.skinny_matmul = {out = @o_add, combine_norm = {}}} {
  return
}

// -----

// `route` on the router (k3-group-calls' merge: one flag per matrix): the
// launch also selects each token's experts. The guard adds 1 <= k <= 32,
// k <= E <= 1024, the bias [E] and the outputs [T, k]; the grid is the
// router's blocks, then T routing blocks, then the other matrices'.
// CHECK-LABEL: func.func @front
// CHECK-SAME: (%[[X:[^:]+]]: memref<?x?xbf16>, %[[WR:[^:]+]]: memref<?x?xbf16>, %{{[^:]+}}: memref<?x?xbf16>, %[[S:[^:]+]]: memref<?x?xf32>, %{{[^:]+}}: memref<?x?xbf16>, %[[B:[^:]+]]: memref<?xf32>, %[[RN:[^:]+]]: i1, %[[SC:[^:]+]]: f32, %[[I:[^:]+]]: memref<?x?xi64>, %[[W:[^:]+]]: memref<?x?xf32>, %[[ORD:[^:]+]]: memref<?xi64>, %[[RK:[^:]+]]: memref<?xi64>)
// CHECK: %[[T:.+]] = memref.dim %[[X]], %c0
// CHECK: %[[E:.+]] = memref.dim %[[WR]], %c0
// CHECK: %[[RB:.+]] = arith.muli %{{.+}}, %{{.+}} : index
// CHECK: %[[RE:.+]] = arith.addi %[[RB]], %[[T]] : index
// CHECK: %[[GRID:.+]] = arith.addi %[[RE]], %{{.+}} : index
// CHECK: %[[K:.+]] = memref.dim %[[I]], %c1
// CHECK: arith.cmpi ult, %[[K]], %c33
// CHECK: arith.cmpi ult, %[[E]], %c1025
// CHECK: arith.cmpi ule, %[[K]], %[[E]]
// CHECK: gpu.launch blocks(%[[BLK:[^,]+]], {{.*}} in (%{{.+}} = %[[GRID]], %{{.+}} = %c1, %{{.+}} = %c1) threads(%[[TID:[^,]+]], {{.*}} in (%{{.+}} = %c128,
// Routing block b - RB (token): thread 0 waits until the RB router blocks
// have counted, then the selection, 8 experts a thread (e, e + 128, ...).
// CHECK: %[[LATE:.+]] = arith.cmpi ult, %[[BLK]], %[[RE]]
// CHECK: %[[EARLY:.+]] = arith.cmpi uge, %[[BLK]], %[[RB]]
// CHECK: %[[ROUTING:.+]] = arith.andi %[[EARLY]], %[[LATE]]
// CHECK: scf.if %[[ROUTING]] {
// CHECK: %[[NEED:.+]] = arith.index_cast %[[RB]] : index to i32
// CHECK: %[[TOK:.+]] = arith.subi %[[BLK]], %[[RB]]
// CHECK: %[[READY:.+]] = memref.get_global @k3k_skinny_route_ready
// CHECK: scf.while
// CHECK: %[[COUNT:.+]] = llvm.inline_asm has_side_effects "ld.acquire.gpu.global.b32 $0, [$1];"
// CHECK: arith.cmpi ult, %[[COUNT]], %[[NEED]]
// CHECK: nvvm.nanosleep
// CHECK: gpu.barrier
// CHECK: nvvm.memory.barrier <gpu>
// CHECK: %[[RING:.+]] = memref.get_global @k3k_skinny_ring
// CHECK: memref.load %[[S]][%[[TOK]], %{{.+}}]
// CHECK: memref.load %[[B]][
// CHECK: arith.addi %[[TID]], %c128
// CHECK-COUNT-7: memref.load %[[S]][%[[TOK]], %{{.+}}]
// CHECK: scf.for %[[R:.+]] = %c0 to %[[K]] step %c1 iter_args({{.+}}) -> (i32, i32, i32, i32, i32, i32, i32, i32) {
// The thread's best word, the warp's largest and lowest index holding it,
// the 4 warps' pairs through the ring, the winner's stores.
// CHECK-COUNT-7: arith.cmpi ugt
// CHECK: nvvm.redux.sync  umax
// CHECK: nvvm.redux.sync  umin
// CHECK: vector.store %{{.+}}, %[[RING]][%c0, %c0,
// CHECK: vector.store %{{.+}}, %[[RING]][%c0, %c0,
// CHECK: gpu.barrier
// CHECK: arith.minui %{{.+}}, %c3 : index
// CHECK: nvvm.redux.sync  umax
// CHECK: nvvm.redux.sync  umin
// CHECK-COUNT-8: memref.store %{{.+}}, %[[I]][%[[TOK]], %[[R]]]
// CHECK: scf.yield
// Warp 0: the weights' sum (xor tree), s / (sum + 1e-20) with renorm,
// times scaling.
// CHECK: gpu.barrier
// CHECK-COUNT-5: gpu.shuffle  xor
// CHECK: arith.divf
// CHECK: arith.select %[[RN]]
// CHECK: arith.mulf %{{.+}}, %[[SC]]
// CHECK: memref.store %{{.+}}, %[[W]][%[[TOK]],
// The routing blocks' count once their experts are stored; the last
// (told through the ring) groups the T k entries by expert, entry q by
// thread q % 128 (the count of lower experts and of earlier equal ones),
// then resets both counts.
// CHECK: nvvm.memory.barrier <gpu>
// CHECK-NEXT: gpu.barrier
// CHECK: %[[BEFORE:.+]] = memref.atomic_rmw addi %c1_i32, %[[READY]][%c1]
// CHECK: %[[BI:.+]] = arith.index_cast %[[BEFORE]] : i32 to index
// CHECK: %[[ISLAST:.+]] = arith.cmpi eq, %[[BI]],
// CHECK: arith.extui %[[ISLAST]] : i1 to i32
// CHECK: vector.store %{{.+}}, %[[RING]][%c0, %c1, %c1, %c0]
// CHECK: gpu.barrier
// CHECK: %[[FLAG:.+]] = vector.load %[[RING]][%c0, %c1, %c1, %c0]
// CHECK: scf.if %{{.+}} {
// CHECK-NEXT: nvvm.memory.barrier <gpu>
// CHECK: scf.for %[[Q:.+]] = %[[TID]] to %{{.+}} step %c128 {
// CHECK: %[[EQ:.+]] = memref.load %[[I]][
// CHECK: scf.for
// CHECK: scf.for
// CHECK: %[[V:.+]] = memref.load %[[I]][
// CHECK-DAG: arith.cmpi slt, %[[V]], %[[EQ]] : i64
// CHECK-DAG: arith.cmpi eq, %[[V]], %[[EQ]] : i64
// CHECK: scf.yield %{{.+}}#0, %{{.+}}#1 : index, index
// CHECK: %[[POS:.+]] = arith.addi %[[C:[0-9]+]]#0, %[[C]]#1 : index
// CHECK: %[[Q64:.+]] = arith.index_cast %[[Q]] : index to i64
// CHECK: memref.store %[[Q64]], %[[ORD]][%[[POS]]]
// CHECK: %[[T64:.+]] = arith.index_cast %[[C]]#1 : index to i64
// CHECK: memref.store %[[T64]], %[[RK]][%[[POS]]]
// CHECK: memref.store %c0_i32, %[[READY]][%c0]
// CHECK: memref.store %c0_i32, %[[READY]][%c1]
// The product blocks; a router block counts itself once its scores are
// stored.
// CHECK: } else {
// CHECK: scf.index_switch
// CHECK: memref.store %{{.+}}, %[[S]]
// CHECK: %[[READY3:.+]] = memref.get_global @k3k_skinny_route_ready
// CHECK: memref.atomic_rmw addi %c1_i32, %[[READY3]][%c0]
func.func private @s(%a: f32) -> f32 {
  return %a : f32
}
func.func private @o(%a: f32) -> bf16 {
  %r = arith.truncf %a : f32 to bf16
  return %r : bf16
}
func.func private @generic(%x: memref<?x?xbf16>) {
  return
}
func.func @front(%x: memref<?x?xbf16>, %wr: memref<?x?xbf16>, %wa: memref<?x?xbf16>,
                 %scores: memref<?x?xf32>, %ya: memref<?x?xbf16>, %bias: memref<?xf32>,
                 %renorm: i1, %scaling: f32, %idx: memref<?x?xi64>, %wts: memref<?x?xf32>,
                 %order: memref<?xi64>, %rank: memref<?xi64>)
    attributes {k3.skinny_matmul = {out = [@s, @o], route = [true, false]}} {
  func.call @generic(%x) : (memref<?x?xbf16>) -> ()
  return
}

// -----

func.func private @s(%a: f32) -> f32 {
  return %a : f32
}
// expected-error @+1 {{k3.skinny_matmul: 'route' may flag one matrix only}}
func.func @two_routers(%x: memref<?x?xbf16>, %w1: memref<?x?xbf16>, %w2: memref<?x?xbf16>,
                       %s1: memref<?x?xf32>, %s2: memref<?x?xf32>, %bias: memref<?xf32>,
                       %renorm: i1, %scaling: f32, %idx: memref<?x?xi64>, %wts: memref<?x?xf32>,
                       %order: memref<?xi64>, %rank: memref<?xi64>)
    attributes {k3.skinny_matmul = {out = @s, route = [true, true]}} {
  return
}

// -----

func.func private @s(%a: f32) -> f32 {
  return %a : f32
}
// expected-error @+1 {{k3.skinny_matmul: 'route' must be a bool or one bool per matrix}}
func.func @not_a_flag(%x: memref<?x?xbf16>, %w: memref<?x?xbf16>, %s: memref<?x?xf32>)
    attributes {k3.skinny_matmul = {out = @s, route = "yes"}} {
  return
}

// -----

func.func private @s2(%a: f32, %r: f32) -> f32 {
  return %a : f32
}
// expected-error @+1 {{k3.skinny_matmul: 'route' and 'addend' do not go together}}
func.func @with_addend(%x: memref<?x?xbf16>, %w: memref<?x?xbf16>, %r: memref<?x?xf32>, %s: memref<?x?xf32>,
                       %bias: memref<?xf32>, %renorm: i1, %scaling: f32, %idx: memref<?x?xi64>, %wts: memref<?x?xf32>,
                       %order: memref<?xi64>, %rank: memref<?xi64>)
    attributes {k3.skinny_matmul = {out = @s2, addend, route = true}} {
  return
}

// -----

func.func private @s(%a: f32) -> f32 {
  return %a : f32
}
// expected-error @+1 {{k3.skinny_matmul: with 'route', expected the routed matrix's output [T, E] f32 and after the outputs (bias [E] f32, renorm i1, scaling f32, idx [T, k] i64, weights [T, k] f32, order [T k] i64, rank [T k] i64)}}
func.func @f32_indices(%x: memref<?x?xbf16>, %w: memref<?x?xbf16>, %s: memref<?x?xf32>,
                       %bias: memref<?xf32>, %renorm: i1, %scaling: f32, %idx: memref<?x?xf32>, %wts: memref<?x?xf32>,
                       %order: memref<?xi64>, %rank: memref<?xi64>)
    attributes {k3.skinny_matmul = {out = @s, route = true}} {
  return
}

// -----

// With `attn_res` (k3-group-calls' few-token call of an AttnRes and the
// products of its normalised output): the launch's first 8 T blocks are
// k3-gpu-attn-res-norm's block of each token, in three steps joined by
// counts 2 and 0 (each candidate's warp sums [T, 2n, 32]; the scores, the
// softmax, h and its warps' sums of squares; the normalised piece into x's
// buffer, count 3); the product blocks wait for count 3 and read x.
// CHECK-DAG: memref.global "private" @k3k_skinny_attn_res_ready : memref<4xi32, #gpu.address_space<global>> = dense<0>
// CHECK-LABEL: func.func @attn_lin
// CHECK-SAME: (%[[X:[^:]+]]: memref<?x?xbf16>, %[[W:[^:]+]]: memref<?x?xbf16>, %[[OUT:[^:]+]]: memref<?x?xbf16>, %[[V:[^:]+]]: memref<?x?x?xbf16>, %[[L:[^:]+]]: memref<?x?x?xbf16>, %[[G:[^:]+]]: memref<?xbf16>, %[[P:[^:]+]]: memref<?x?xbf16>, %[[E:[^:]+]]: f32, %[[GN:[^:]+]]: memref<?xbf16>, %[[E2:[^:]+]]: f32)
// CHECK-DAG: %[[T:.+]] = memref.dim %[[L]], %c1
// CHECK-DAG: %[[D:.+]] = memref.dim %[[L]], %c2
// CHECK-DAG: arith.cmpi ule, %[[D]], %c8192
// CHECK: scf.if
// CHECK: %[[CS:.+]] = memref.alloc(%[[T]], %{{.+}}) : memref<?x?x32xf32>
// CHECK: %[[SQ:.+]] = memref.alloc(%[[T]]) : memref<?x32xf32>
// CHECK: %[[PROD:.+]] = arith.muli %[[T]], %c8
// CHECK: gpu.launch blocks(%[[B:[^,]+]], {{.*}} threads(%[[TID:[^,]+]],
// CHECK: scf.if %{{.+}} {
// γ, p and the last candidate's piece, then each candidate's two sums.
// CHECK: vector.load %[[G]]
// CHECK: vector.load %[[P]]
// CHECK: vector.load %[[L]]
// CHECK: scf.for
// CHECK: vector.load %[[V]]
// CHECK-COUNT-10: gpu.shuffle  xor
// CHECK: memref.store %{{.+}}, %[[CS]]
// CHECK: memref.store %{{.+}}, %[[CS]]
// CHECK: %[[RD:.+]] = memref.get_global @k3k_skinny_attn_res_ready
// CHECK: memref.atomic_rmw addi %c1_i32, %[[RD]][%c2]
// CHECK: ld.acquire.gpu.global.b32
// The scores from the 32 warps' sums, the softmax, h's sums of squares;
// then the token's 1 / rms and the normalised piece into x.
// CHECK: memref.load %[[CS]]
// CHECK: math.sqrt
// CHECK: math.exp
// CHECK: math.exp
// CHECK: memref.store %{{.+}}, %[[SQ]]
// CHECK: memref.atomic_rmw addi %c1_i32, %{{.+}}[%c0]
// CHECK: ld.acquire.gpu.global.b32
// CHECK: memref.load %[[SQ]]
// CHECK: vector.store %{{.+}}, %[[X]]
// CHECK: memref.atomic_rmw addi %c1_i32, %{{.+}}[%c3]
// The product blocks: the first stages, then wait for count 3 (8 T), and
// x's fragments read as they are.
// CHECK: } else {
// CHECK: nvgpu.device_async_copy
// CHECK: %[[RD3:.+]] = memref.extract_aligned_pointer_as_index
// CHECK: arith.addi %[[RD3]], %c12
// CHECK: ld.acquire.gpu.global.b32
// CHECK: vector.load %[[X]]
// CHECK: nvvm.mma.sync
// CHECK: memref.atomic_rmw addi %c1_i32, %{{.+}}[%c1]
func.func private @o(%a: f32) -> bf16 {
  %t = arith.truncf %a : f32 to bf16
  return %t : bf16
}
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
func.func private @generic(%x: memref<?x?xbf16>)
func.func @attn_lin(%x: memref<?x?xbf16>, %w: memref<?x?xbf16>, %out: memref<?x?xbf16>,
                    %v: memref<?x?x?xbf16>, %last: memref<?x?x?xbf16>, %g: memref<?xbf16>, %p: memref<?x?xbf16>,
                    %eps: f32, %gn: memref<?xbf16>, %eps2: f32)
    attributes {k3.skinny_matmul = {out = @o, attn_res = {widen = @widen, narrow = @narrow, round = @round, residual = false}}} {
  func.call @generic(%x) : (memref<?x?xbf16>) -> ()
  return
}

// -----

func.func private @o(%a: f32) -> bf16 {
  %t = arith.truncf %a : f32 to bf16
  return %t : bf16
}
// expected-error @+1 {{k3.skinny_matmul: 'attn_res' must be {widen = (act) -> f32, narrow = (f32) -> act, round = (f32) -> f32, residual = bool}}}
func.func @attn_no_conversions(%x: memref<?x?xbf16>, %w: memref<?x?xbf16>, %out: memref<?x?xbf16>,
                               %v: memref<?x?x?xbf16>, %last: memref<?x?x?xbf16>, %g: memref<?xbf16>, %p: memref<?x?xbf16>,
                               %eps: f32, %gn: memref<?xbf16>, %eps2: f32)
    attributes {k3.skinny_matmul = {out = @o, attn_res = {}}} {
  return
}

// -----

func.func private @o(%a: f32) -> bf16 {
  %t = arith.truncf %a : f32 to bf16
  return %t : bf16
}
func.func private @widen(%a: bf16) -> f32
func.func private @narrow(%a: f32) -> bf16
func.func private @round(%a: f32) -> f32
// The residual's sum buffer missing (an f32 last).
// expected-error @+1 {{k3.skinny_matmul: with 'attn_res', expected after the other operands the blocks [n - 1, T, D], the last candidate [1, T, D] (with 'residual' its terms a and b), gamma [D] bf16, p [1, D] bf16, eps f32, the norm's gamma [D] bf16 and eps f32 (with 'residual' then the sum's buffer [1, T, D])}}
func.func @attn_no_sum(%x: memref<?x?xbf16>, %w: memref<?x?xbf16>, %out: memref<?x?xbf16>,
                       %v: memref<?x?x?xbf16>, %a: memref<?x?x?xbf16>, %b: memref<?x?x?xbf16>, %g: memref<?xbf16>,
                       %p: memref<?x?xbf16>, %eps: f32, %gn: memref<?xbf16>, %eps2: f32, %s: f32)
    attributes {k3.skinny_matmul = {out = @o, attn_res = {widen = @widen, narrow = @narrow, round = @round, residual = true}}} {
  return
}
