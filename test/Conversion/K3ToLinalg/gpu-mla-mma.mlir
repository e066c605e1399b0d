// RUN: k3-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(k3-gpu-mla-mma,canonicalize,cse)' | FileCheck %s
// RUN: k3-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(k3-gpu-mla-mma{score-stages=3 sum-stages=2},canonicalize,cse)' | FileCheck %s --check-prefix=ALT
// RUN: not k3-opt %s --split-input-file --pass-pipeline='builtin.module(k3-gpu-mla-mma{sum-stages=5})' 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not k3-opt %s --split-input-file --pass-pipeline='builtin.module(k3-gpu-mla-mma{score-stages=4})' 2>&1 | FileCheck %s --check-prefix=BADSCORE
// BAD: error: k3-gpu-mla-mma: sum-stages must be in [2, 4], got 5
// BADSCORE: error: k3-gpu-mla-mma: score-stages must be in [2, 3], got 4

// @k3k_mla_scores after bufferization: q̂ transposed [T, W, HP], the cache
// pool as rows [rows, W] (bf16), the token's rows, n_i, p [T, NH, CAP].
// CHECK-LABEL: func.func @scores
// CHECK-SAME: (%[[QT:[^:]+]]: memref<?x?x?xf32>, %[[POOL:[^:]+]]: memref<?x?xbf16>, %[[ROWS:[^:]+]]: memref<?x?xindex>, %[[NTK:[^:]+]]: memref<?xindex>, %[[P:[^:]+]]: memref<?x?x?xf32>, %[[SCALE:[^:]+]]: f32)
// Run-time choice: W % 32 == 0, the pool 16-byte aligned, CAP % 128 == 0,
// p 8-byte aligned.
// CHECK-DAG: %[[W:.+]] = memref.dim %[[POOL]], %c1
// CHECK-DAG: arith.remui %[[W]], %c32
// CHECK-DAG: memref.extract_aligned_pointer_as_index %[[POOL]]
// CHECK-DAG: arith.remui %{{.+}}, %c128
// CHECK-DAG: %[[PADDR:.+]] = memref.extract_aligned_pointer_as_index %[[P]]
// CHECK-DAG: arith.remui %[[PADDR]], %c8
// CHECK: scf.if
// The q̂ parts hi, mid, lo: [T, 3, heads padded to 32, W] bf16.
// CHECK: %[[QS:.+]] = memref.alloc({{.*}}) {alignment = 16 : i64} : memref<?x3x?x?xbf16>
// CHECK: scf.parallel
// CHECK: memref.load %[[QT]]
// CHECK-COUNT-3: arith.truncf
// CHECK: gpu.launch {{.*}} threads({{.*}}) in (%{{.+}} = %c128,
// The block's ring: 2 stages of 128 cache rows and 3 x 32 part rows.
// CHECK: %[[RING:.+]] = memref.get_global @k3k_mla_scores_ring2 : memref<2x224x32xbf16, #gpu.address_space<workgroup>>
// The pool rows of the thread's 4 copies, loaded once.
// CHECK-COUNT-4: memref.load %[[ROWS]]
// Step 0 in flight before the loop: 4 cache copies (zeros past the
// token's rows), 3 part copies of 16 bytes.
// CHECK-COUNT-4: nvgpu.device_async_copy %[[POOL]]{{.*}}, %[[RING]]{{.*}}, 8, %{{.+}} {bypassL1}
// CHECK-COUNT-3: nvgpu.device_async_copy %[[QS]]{{.*}}, %[[RING]]{{.*}}, 8, %{{.+}} {bypassL1}
// CHECK: %[[G1:.+]] = nvgpu.device_async_create_group
// CHECK-NOT: nvgpu.device_async_create_group
// CHECK: scf.for
// Step s waits for its copies, a barrier, then step s + 1's copies into
// the stage step s - 1 used.
// CHECK: nvgpu.device_async_wait %[[G1]] {numGroups = 0 : i32}
// CHECK-NEXT: gpu.barrier
// CHECK-COUNT-4: nvgpu.device_async_copy %[[POOL]]
// CHECK-COUNT-3: nvgpu.device_async_copy %[[QS]]
// CHECK: nvgpu.device_async_create_group
// The lane's 4 cache rows and, per (m tile, part), two part rows from the
// ring: 2 m tiles x 4 n tiles x 3 parts x 2 mma.
// CHECK-COUNT-4: vector.load %[[RING]]{{.*}} vector<8xbf16>
// CHECK-COUNT-2: vector.load %[[RING]]
// CHECK-COUNT-8: nvvm.mma.sync {{.*}}shape = #nvvm.shape<m = 16, n = 8, k = 16>
// CHECK-COUNT-2: vector.load %[[RING]]
// CHECK-COUNT-8: nvvm.mma.sync
// CHECK-COUNT-2: vector.load %[[RING]]
// CHECK-COUNT-8: nvvm.mma.sync
// CHECK-COUNT-2: vector.load %[[RING]]
// CHECK-COUNT-8: nvvm.mma.sync
// CHECK-COUNT-2: vector.load %[[RING]]
// CHECK-COUNT-8: nvvm.mma.sync
// CHECK-COUNT-2: vector.load %[[RING]]
// CHECK-COUNT-8: nvvm.mma.sync
// CHECK-NOT: nvvm.mma.sync
// CHECK: scf.yield
// The copies past the last step land before the block ends.
// CHECK: nvgpu.device_async_wait %[[G1]] {numGroups = 0 : i32}
// Scaled, stored for heads < NH and rows < n_i: a pair of rows in one
// 8-byte store, the first alone where the second is past n_i (2 m tiles x
// 4 n tiles x 2 heads).
// CHECK: arith.mulf %{{.+}}, %[[SCALE]]
// CHECK: arith.mulf %{{.+}}, %[[SCALE]]
// CHECK: scf.if
// CHECK: vector.store %{{.+}}, %[[P]]{{.*}} {alignment = 8 : i64} : memref<?x?x?xf32>, vector<2xf32>
// CHECK: } else {
// CHECK: scf.if
// CHECK: memref.store %{{.+}}, %[[P]]
// CHECK-COUNT-15: vector.store %{{.+}}, %[[P]]
// CHECK-NOT: vector.store
// Otherwise the CUDA-core body.
// CHECK: } else {
// CHECK: memref.store %[[SCALE]], %[[P]][%c0, %c0, %c0]
// CHECK: return
func.func @scores(%qt: memref<?x?x?xf32>, %pool: memref<?x?xbf16>, %rows: memref<?x?xindex>,
                  %ntk: memref<?xindex>, %p: memref<?x?x?xf32>, %scale: f32)
    attributes {k3.mla_scores} {
  %c0 = arith.constant 0 : index
  memref.store %scale, %p[%c0, %c0, %c0] : memref<?x?x?xf32>
  return
}

// @k3k_mla_wsum: p, pool, rows, ntk, partial [T, NH, S, R].
// CHECK-LABEL: func.func @sums
// CHECK-SAME: (%[[P:[^:]+]]: memref<?x?x?xf32>, %[[POOL:[^:]+]]: memref<?x?xbf16>, %[[ROWS:[^:]+]]: memref<?x?xindex>, %[[NTK:[^:]+]]: memref<?xindex>, %[[PART:[^:]+]]: memref<?x?x?x?xf32>)
// Run-time choice: R % 64 == 0, W % 8 == 0, the pool and the partial sums
// aligned.
// CHECK-DAG: %[[R:.+]] = memref.dim %[[PART]], %c3
// CHECK-DAG: arith.remui %[[R]], %c64
// CHECK-DAG: memref.extract_aligned_pointer_as_index %[[POOL]]
// CHECK-DAG: memref.extract_aligned_pointer_as_index %[[PART]]
// CHECK: scf.if
// A block of 4 warps per (slice, column block), 32 heads, token; the
// warps' rings and the step's A words (two stages) in workgroup memory.
// CHECK: gpu.launch {{.*}} threads({{.*}}) in (%{{.+}} = %c128,
// CHECK-DAG: %[[SH:.+]] = memref.get_global @k3k_mla_wsum_split : memref<2x2x3x32x4xi32, #gpu.address_space<workgroup>>
// CHECK-DAG: %[[CR:.+]] = memref.get_global @k3k_mla_wsum_cache4 : memref<4x4x16x64xbf16, #gpu.address_space<workgroup>>
// CHECK-DAG: %[[PR:.+]] = memref.get_global @k3k_mla_wsum_p4 : memref<4x4x32x4xf32, #gpu.address_space<workgroup>>
// Steps 0 .. 2 in flight before the loop: per step the pool rows of 4
// copies, 4 copies of 16 bytes (zeros past the slice), 4 of one p.
// CHECK-COUNT-4: memref.load %[[ROWS]]
// CHECK-COUNT-4: nvgpu.device_async_copy %[[POOL]]{{.*}}, %[[CR]]{{.*}}, 8, %{{.+}} {bypassL1}
// CHECK-COUNT-4: nvgpu.device_async_copy %[[P]]{{.*}}, %[[PR]]{{.*}}, 1, %{{.+}} :
// CHECK: nvgpu.device_async_create_group
// CHECK-COUNT-4: nvgpu.device_async_copy %[[POOL]]
// CHECK: nvgpu.device_async_create_group
// CHECK-COUNT-4: nvgpu.device_async_copy %[[POOL]]
// CHECK: nvgpu.device_async_create_group
// The pool rows of step 3, carried into the loop.
// CHECK-COUNT-4: memref.load %[[ROWS]]
// CHECK: scf.for
// Step s issues step s + 3 and loads the pool rows of step s + 4, waits
// for step s (3 groups pending).
// CHECK: nvvm.bar.warp.sync
// CHECK-COUNT-4: nvgpu.device_async_copy %[[POOL]]
// CHECK-COUNT-4: nvgpu.device_async_copy %[[P]]
// CHECK: nvgpu.device_async_create_group
// CHECK-COUNT-4: memref.load %[[ROWS]]
// CHECK: nvgpu.device_async_wait %{{.+}} {numGroups = 3 : i32}
// Each lane splits one word of each m tile's fragments (3 parts) from its
// p in the ring (one 16-byte read), stores them for the block; after the
// barrier each lane reads its 4 cache rows from the ring and, per (m tile,
// part), its 4 words (one 16-byte read) and runs 8 mma with them.
// CHECK: vector.load %[[PR]]{{.*}} {alignment = 16 : i64} : memref<4x4x32x4xf32, #gpu.address_space<workgroup>>, vector<4xf32>
// CHECK-COUNT-3: nvvm.convert.f32x2.to.bf16x2 {{.*}} {rnd = #nvvm.fp_rnd_mode<rn>} : vector<2xbf16>
// CHECK-COUNT-3: memref.store %{{.+}}, %[[SH]]
// CHECK-COUNT-3: nvvm.convert.f32x2.to.bf16x2
// CHECK-COUNT-3: memref.store %{{.+}}, %[[SH]]
// CHECK: gpu.barrier
// CHECK-COUNT-4: vector.load %[[CR]]{{.*}} vector<8xbf16>
// CHECK: vector.load %[[SH]]{{.*}} {alignment = 16 : i64} : memref<2x2x3x32x4xi32, #gpu.address_space<workgroup>>, vector<4xi32>
// CHECK-COUNT-8: nvvm.mma.sync
// CHECK: vector.load %[[SH]]{{.*}} {alignment = 16 : i64} : memref<2x2x3x32x4xi32, #gpu.address_space<workgroup>>, vector<4xi32>
// CHECK-COUNT-8: nvvm.mma.sync
// CHECK: vector.load %[[SH]]{{.*}} {alignment = 16 : i64} : memref<2x2x3x32x4xi32, #gpu.address_space<workgroup>>, vector<4xi32>
// CHECK-COUNT-8: nvvm.mma.sync
// CHECK: vector.load %[[SH]]{{.*}} {alignment = 16 : i64} : memref<2x2x3x32x4xi32, #gpu.address_space<workgroup>>, vector<4xi32>
// CHECK-COUNT-8: nvvm.mma.sync
// CHECK: vector.load %[[SH]]{{.*}} {alignment = 16 : i64} : memref<2x2x3x32x4xi32, #gpu.address_space<workgroup>>, vector<4xi32>
// CHECK-COUNT-8: nvvm.mma.sync
// CHECK: vector.load %[[SH]]{{.*}} {alignment = 16 : i64} : memref<2x2x3x32x4xi32, #gpu.address_space<workgroup>>, vector<4xi32>
// CHECK-COUNT-8: nvvm.mma.sync
// CHECK-NOT: nvvm.mma.sync
// CHECK: scf.yield
// The copies past the last step land before the block ends.
// CHECK: nvgpu.device_async_wait %{{.+}} {numGroups = 0 : i32}
// Each (m tile, value) is 8 consecutive columns of one head: two 16-byte
// stores.
// CHECK-COUNT-16: vector.store %{{.+}}, %[[PART]]{{.*}} {alignment = 16 : i64} : memref<?x?x?x?xf32>, vector<4xf32>
// CHECK-NOT: vector.store
// CHECK-NOT: memref.store %{{.+}}, %[[PART]]
// Three stages of the scores' ring (two steps in flight before the loop,
// one group left pending in each step), two of the sums' (one step ahead).
// ALT-LABEL: func.func @scores
// ALT: memref.get_global @k3k_mla_scores_ring3 : memref<3x224x32xbf16, #gpu.address_space<workgroup>>
// ALT: nvgpu.device_async_create_group
// ALT: %[[G:.+]] = nvgpu.device_async_create_group
// ALT-NOT: nvgpu.device_async_create_group
// ALT: scf.for
// ALT: nvgpu.device_async_wait %[[G]] {numGroups = 1 : i32}
// ALT-LABEL: func.func @sums
// ALT: memref.get_global @k3k_mla_wsum_cache2 : memref<4x2x16x64xbf16, #gpu.address_space<workgroup>>
// ALT: nvgpu.device_async_create_group
// ALT-NOT: nvgpu.device_async_create_group
// ALT: scf.for
// ALT: nvgpu.device_async_wait %{{.+}} {numGroups = 1 : i32}
// CHECK: } else {
// CHECK: memref.store %{{.+}}, %[[PART]][%c0, %c0, %c0, %c0]
// CHECK: return
func.func @sums(%p: memref<?x?x?xf32>, %pool: memref<?x?xbf16>, %rows: memref<?x?xindex>,
                %ntk: memref<?xindex>, %partial: memref<?x?x?x?xf32>)
    attributes {k3.mla_wsum} {
  %c0 = arith.constant 0 : index
  %z = arith.constant 0.0 : f32
  memref.store %z, %partial[%c0, %c0, %c0, %c0] : memref<?x?x?x?xf32>
  return
}

// -----

// An f32 cache (an f32 library) keeps the CUDA-core body.
// CHECK-LABEL: func.func @f32_cache
// CHECK-NOT: gpu.launch
// CHECK-NOT: nvvm.mma.sync
// CHECK: return
func.func @f32_cache(%p: memref<?x?x?xf32>, %pool: memref<?x?xf32>, %rows: memref<?x?xindex>,
                     %ntk: memref<?xindex>, %partial: memref<?x?x?x?xf32>)
    attributes {k3.mla_wsum} {
  %c0 = arith.constant 0 : index
  %z = arith.constant 0.0 : f32
  memref.store %z, %partial[%c0, %c0, %c0, %c0] : memref<?x?x?x?xf32>
  return
}

// -----

// expected-error @+1 {{k3.mla_scores: expected (qt [T, W, HP] f32, pool [rows, W], rows [T, CAP] index, ntk [T] index, p [T, NH, CAP] f32, scale f32)}}
func.func @bad_scores(%qt: memref<?x?xf32>, %pool: memref<?x?xbf16>, %rows: memref<?x?xindex>,
                      %ntk: memref<?xindex>, %p: memref<?x?x?xf32>, %scale: f32)
    attributes {k3.mla_scores} {
  return
}

// -----

// expected-error @+1 {{k3.mla_wsum: expected (p [T, NH, CAP] f32, pool [rows, W], rows [T, CAP] index, ntk [T] index, partial [T, NH, S, R] f32)}}
func.func @bad_sums(%p: memref<?x?x?xf32>, %pool: memref<?x?xbf16>, %rows: memref<?x?xindex>,
                    %ntk: memref<?xindex>, %partial: memref<?x?x?xf32>)
    attributes {k3.mla_wsum} {
  return
}
