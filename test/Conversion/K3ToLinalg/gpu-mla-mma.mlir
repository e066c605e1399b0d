// RUN: k3-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(func.func(k3-gpu-mla-mma),canonicalize,cse)' | FileCheck %s

// @k3k_mla_scores after bufferization: q̂ transposed [T, W, HP], the cache
// pool as rows [rows, W] (bf16), the token's rows, n_i, p [T, NH, CAP].
// CHECK-LABEL: func.func @scores
// CHECK-SAME: (%[[QT:[^:]+]]: memref<?x?x?xf32>, %[[POOL:[^:]+]]: memref<?x?xbf16>, %[[ROWS:[^:]+]]: memref<?x?xindex>, %[[NTK:[^:]+]]: memref<?xindex>, %[[P:[^:]+]]: memref<?x?x?xf32>, %[[SCALE:[^:]+]]: f32)
// Run-time choice: W % 32 == 0, the pool 16-byte aligned, CAP % 128 == 0.
// CHECK-DAG: %[[W:.+]] = memref.dim %[[POOL]], %c1
// CHECK-DAG: arith.remui %[[W]], %c32
// CHECK-DAG: memref.extract_aligned_pointer_as_index %[[POOL]]
// CHECK-DAG: arith.remui %{{.+}}, %c128
// CHECK: scf.if
// The q̂ parts hi, mid, lo: [T, 3, heads padded to 32, W] bf16.
// CHECK: %[[QS:.+]] = memref.alloc({{.*}}) {alignment = 16 : i64} : memref<?x3x?x?xbf16>
// CHECK: scf.parallel
// CHECK: memref.load %[[QT]]
// CHECK-COUNT-3: arith.truncf
// CHECK: gpu.launch {{.*}} threads({{.*}}) in (%{{.+}} = %c128,
// Step 0's operands before the loop: 4 cache rows, 12 part rows.
// CHECK-COUNT-4: vector.load %[[POOL]]{{.*}} {alignment = 16 : i64} : memref<?x?xbf16>, vector<8xbf16>
// CHECK-COUNT-12: vector.load %[[QS]]{{.*}} vector<8xbf16>
// CHECK: scf.for
// The next step's, then 2 m tiles x 4 n tiles x 3 parts x 2 mma.
// CHECK-COUNT-4: vector.load %[[POOL]]
// CHECK-COUNT-12: vector.load %[[QS]]
// CHECK-COUNT-48: nvvm.mma.sync {{.*}}shape = #nvvm.shape<m = 16, n = 8, k = 16>
// CHECK: scf.yield
// Scaled, stored for heads < NH and rows < n_i.
// CHECK: arith.mulf %{{.+}}, %[[SCALE]]
// CHECK: scf.if
// CHECK: memref.store %{{.+}}, %[[P]]
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
// Run-time choice: R % 64 == 0, W % 8 == 0, the pool aligned.
// CHECK-DAG: %[[R:.+]] = memref.dim %[[PART]], %c3
// CHECK-DAG: arith.remui %[[R]], %c64
// CHECK-DAG: memref.extract_aligned_pointer_as_index %[[POOL]]
// CHECK: scf.if
// A block of 4 warps per (slice, column block), 32 heads, token, with the
// step's A words in workgroup memory (two stages).
// CHECK: gpu.launch {{.*}} threads({{.*}}) in (%{{.+}} = %c128, {{.*}} workgroup(%[[SH:.+]] : memref<2x2x3x4x32xi32, #gpu.address_space<workgroup>>)
// Step 0: 4 cache rows (16 bytes of each), the 2 p pairs this lane splits.
// CHECK-COUNT-4: vector.load %[[POOL]]{{.*}} vector<8xbf16>
// CHECK-COUNT-4: memref.load %[[P]]
// CHECK: scf.for
// CHECK-COUNT-4: vector.load %[[POOL]]
// CHECK-COUNT-4: memref.load %[[P]]
// Each lane splits one word of each m tile's fragments (3 parts), stores
// them for the block; after the barrier each lane reads its 4 words per
// (m tile, part) and runs 8 mma with them.
// CHECK-COUNT-3: nvvm.convert.f32x2.to.bf16x2 {{.*}} {rnd = #nvvm.fp_rnd_mode<rn>} : vector<2xbf16>
// CHECK-COUNT-3: memref.store %{{.+}}, %[[SH]]
// CHECK-COUNT-3: nvvm.convert.f32x2.to.bf16x2
// CHECK-COUNT-3: memref.store %{{.+}}, %[[SH]]
// CHECK: gpu.barrier
// CHECK-COUNT-4: memref.load %[[SH]]
// CHECK-COUNT-8: nvvm.mma.sync
// CHECK-COUNT-4: memref.load %[[SH]]
// CHECK-COUNT-8: nvvm.mma.sync
// CHECK-COUNT-4: memref.load %[[SH]]
// CHECK-COUNT-8: nvvm.mma.sync
// CHECK-COUNT-4: memref.load %[[SH]]
// CHECK-COUNT-8: nvvm.mma.sync
// CHECK-COUNT-4: memref.load %[[SH]]
// CHECK-COUNT-8: nvvm.mma.sync
// CHECK-COUNT-4: memref.load %[[SH]]
// CHECK-COUNT-8: nvvm.mma.sync
// CHECK-NOT: nvvm.mma.sync
// CHECK: scf.yield
// CHECK: memref.store %{{.+}}, %[[PART]]
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
