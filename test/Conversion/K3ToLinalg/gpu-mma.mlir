// The 64 x 64 tiles of 4 warps, whose rings fit static workgroup memory:
// RUN: k3-opt %s --pass-pipeline='builtin.module(k3-gpu-mma{tile-n=64})' | FileCheck %s
// The default, 64 x 128 tiles of 8 warps, rings in dynamic workgroup memory:
// RUN: k3-opt %s --pass-pipeline='builtin.module(k3-gpu-mma,canonicalize,cse)' | FileCheck %s --check-prefix=DYN
// RUN: k3-opt %s --pass-pipeline='builtin.module(k3-gpu-mma{tile-n=64 min-rows=64})' | FileCheck %s --check-prefix=ROWS
// RUN: k3-opt %s --pass-pipeline='builtin.module(k3-gpu-mma{tile-n=64 fuse-slices=1},canonicalize,cse)' | FileCheck %s --check-prefix=FUSED
// RUN: k3-opt %s --pass-pipeline='builtin.module(k3-gpu-mma{sm=75})' | FileCheck %s --check-prefix=OLD
// OLD-NOT: gpu.launch
// OLD-NOT: nvvm.mma.sync
// RUN: not k3-opt %s --pass-pipeline='builtin.module(k3-gpu-mma{min-rows=0})' 2>&1 | FileCheck %s --check-prefix=BAD
// BAD: k3-gpu-mma: min-rows must be at least 1, got 0
// RUN: not k3-opt %s --pass-pipeline='builtin.module(k3-gpu-mma{tile-m=96})' 2>&1 | FileCheck %s --check-prefix=BADTILE
// BADTILE: k3-gpu-mma: tile-m must be 64, 128 or 256, got 96
// RUN: not k3-opt %s --pass-pipeline='builtin.module(k3-gpu-mma{tile-m=256 tile-n=128})' 2>&1 | FileCheck %s --check-prefix=BADTHREADS
// BADTHREADS: k3-gpu-mma: a tile of 256 x 128 needs 1024 threads, more than 512
// RUN: not k3-opt %s --pass-pipeline='builtin.module(k3-gpu-mma{tile-m=128 tile-n=128 stages=7})' 2>&1 | FileCheck %s --check-prefix=BADSTAGES
// BADSTAGES: k3-gpu-mma: stages must be at least 2 and the rings at most 232448 bytes (sm_90); 7 stages of 128 x 128 tiles are 258048
// The oldest target's limit: 99 KB on sm_86, so 4 stages of 64 x 128 (108 KB) do not fit there.
// RUN: not k3-opt %s --pass-pipeline='builtin.module(k3-gpu-mma{sm=86 stages=4})' 2>&1 | FileCheck %s --check-prefix=BADSM86
// BADSM86: k3-gpu-mma: stages must be at least 2 and the rings at most 101376 bytes (sm_86); 4 stages of 64 x 128 tiles are 110592
// RUN: k3-opt %s --pass-pipeline='builtin.module(k3-gpu-mma{sm=80 stages=4})' | FileCheck %s --check-prefix=SM80
// SM80: dynamic_shared_memory_size %c110592_i32
// RUN: not k3-opt %s --pass-pipeline='builtin.module(k3-gpu-mma{stages=1})' 2>&1 | FileCheck %s --check-prefix=BADSTAGES1
// BADSTAGES1: k3-gpu-mma: stages must be at least 2
// RUN: not k3-opt %s --pass-pipeline='builtin.module(k3-gpu-mma{target-blocks=0})' 2>&1 | FileCheck %s --check-prefix=BADBLOCKS
// BADBLOCKS: k3-gpu-mma: target-blocks must be at least 1, got 0
// RUN: k3-opt %s --pass-pipeline='builtin.module(k3-gpu-mma{min-blocks=4})' | FileCheck %s --check-prefix=MINB
// RUN: k3-opt %s --pass-pipeline='builtin.module(k3-gpu-mma{ldmatrix=1},canonicalize,cse)' | FileCheck %s --check-prefix=LDM
// RUN: not k3-opt %s --pass-pipeline='builtin.module(k3-gpu-mma{min-blocks=33})' 2>&1 | FileCheck %s --check-prefix=BADMINB
// BADMINB: k3-gpu-mma: min-blocks must be from 0 to 32, got 33
// RUN: not k3-opt %S/Inputs/gpu-mma-bad.mlir --split-input-file --pass-pipeline='builtin.module(k3-gpu-mma)' 2>&1 | FileCheck %s --check-prefix=BADFN
// BADFN: error: k3.mma_matmul: expected (x [T, K], bf16 W [N, K], output [T, N]) memrefs
// BADFN: error: k3.mma_matmul: expected a dictionary {out = @function}
// BADFN: error: k3.mma_matmul: 'out' must name a function (f32) -> the output's element type
// BADFN: error: k3.mma_matmul: the function must return nothing
// ROWS-LABEL: func.func @matmul
// ROWS: %[[C64:.+]] = arith.constant 64 : index
// ROWS: arith.cmpi sge, %{{.+}}, %[[C64]] : index

#map_mk = affine_map<(i, j, k) -> (i, k)>
#map_nk = affine_map<(i, j, k) -> (j, k)>
#map_mn = affine_map<(i, j, k) -> (i, j)>

func.func private @widen(%a: bf16) -> f32 {
  %r = arith.extf %a : bf16 to f32
  return %r : f32
}

// k3k_matmul_f32 of a bf16 library: chosen at run time, tensor cores for
// 16 rows or more (K a multiple of 64, X and W 16-byte aligned), else the
// generic unchanged.
// CHECK-DAG: memref.global "private" @k3k_mma_w : memref<2x64x72xbf16, #gpu.address_space<workgroup>> {alignment = 16 : i64}
// CHECK-DAG: memref.global "private" @k3k_mma_x : memref<2x64x72xbf16, #gpu.address_space<workgroup>> {alignment = 16 : i64}
// CHECK-LABEL: func.func @matmul
// CHECK-SAME: (%[[X:.+]]: memref<?x?xbf16>, %[[W:.+]]: memref<?x?xbf16>, %[[C:.+]]: memref<?x?xf32>)
// CHECK-DAG: %[[T:.+]] = memref.dim %[[X]], %c0
// CHECK-DAG: %[[K:.+]] = memref.dim %[[X]], %c1
// CHECK-DAG: %[[N:.+]] = memref.dim %[[W]], %c0
// CHECK: arith.cmpi sge, %[[T]], %c16 : index
// CHECK: arith.remui %[[K]], %c64
// CHECK: memref.extract_aligned_pointer_as_index %[[X]]
// CHECK: memref.extract_aligned_pointer_as_index %[[W]]
// CHECK: scf.if %[[OK:.+]] {
// CHECK:   %[[GX:.+]] = arith.ceildivui %[[T]], %c64
// CHECK:   %[[GY:.+]] = arith.ceildivui %[[N]], %c64
// Split-K: slices = max(min(floor(396 / tiles), k steps / 8), 1), rounded to
// whole k steps; the partial tiles [slices, T, N] only with a split.
// CHECK:   %[[STEPS:.+]] = arith.ceildivui %[[K]], %c64{{[_0-9]*}}
// CHECK:   %[[TILES:.+]] = arith.muli %[[GX]], %[[GY]]
// CHECK:   %[[WANT:.+]] = arith.divui %c396, %[[TILES]]
// CHECK:   %[[MOST:.+]] = arith.divui %[[STEPS]], %c8
// CHECK:   %[[MIN:.+]] = arith.minui %[[WANT]], %[[MOST]]
// CHECK:   %[[S0:.+]] = arith.maxui %[[MIN]], %c1{{[_0-9]*}}
// CHECK:   %[[PER:.+]] = arith.ceildivui %[[STEPS]], %[[S0]]
// CHECK:   %[[SK:.+]] = arith.muli %[[PER]], %c64{{[_0-9]*}}
// CHECK:   %[[S:.+]] = arith.ceildivui %[[K]], %[[SK]]
// CHECK:   %[[SPLIT:.+]] = arith.cmpi ugt, %[[S]], %c1{{[_0-9]*}}
// CHECK:   %[[NP:.+]] = arith.select %[[SPLIT]], %[[S]], %c0{{[_0-9]*}}
// CHECK:   %[[P:.+]] = memref.alloc(%[[NP]], %[[T]], %[[N]]) : memref<?x?x?xf32>
// CHECK:   gpu.launch blocks({{[^,]*}}, {{[^,]*}}, %[[Z:[^)]+]]) in ({{[^)]*}} = %[[GX]], {{[^)]*}} = %[[GY]], {{[^)]*}} = %[[S]]) threads({{[^)]*}}) in ({{[^)]*}} = %c128, {{[^)]*}})
// Two stages of X and W tiles (64 x 64) in workgroup memory (16-byte
// aligned globals, the rows padded to 72).
// CHECK:   %[[XS:.+]] = memref.get_global @k3k_mma_x : memref<2x64x72xbf16, #gpu.address_space<workgroup>>
// CHECK:   %[[WS:.+]] = memref.get_global @k3k_mma_w : memref<2x64x72xbf16, #gpu.address_space<workgroup>>
// The block's slice of K.
// CHECK:   %[[KB:.+]] = arith.muli %[[Z]], %[[SK]]
// CHECK:   %[[KE0:.+]] = arith.addi %[[KB]], %[[SK]]
// CHECK:   %[[KE:.+]] = arith.minui %[[KE0]], %[[K]]
// The first k step copied before the loop: four 16-byte pieces of X and
// four of W per thread (cp.async, no bytes read past the last row or the
// slice: zeros).
// CHECK:   arith.minui
// CHECK:   nvgpu.device_async_copy %[[X]][{{.*}}], %[[XS]][{{.*}}], 8, %{{.+}} {bypassL1} : memref<?x?xbf16> to memref<2x64x72xbf16, #gpu.address_space<workgroup>>
// CHECK-COUNT-3: nvgpu.device_async_copy %[[X]]
// CHECK:   nvgpu.device_async_copy %[[W]][{{.*}}], %[[WS]]
// CHECK-COUNT-3: nvgpu.device_async_copy %[[W]]
// CHECK-NOT: nvgpu.device_async_copy
// CHECK:   %[[LAST:.+]] = nvgpu.device_async_create_group
// 32 accumulators per lane (2 x 4 tiles of 16 x 8, 4 per lane each).
// CHECK: scf.for %[[K0:.+]] = %[[KB]] to %[[KE]] step %{{.+}} iter_args({{.*}}) -> (f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32) {
// Every thread done with the stage that step + 1 refills, its copies, then
// this step's stage complete (at most one group pending) and seen by all.
// CHECK:   gpu.barrier
// CHECK-COUNT-8: nvgpu.device_async_copy
// CHECK:   %[[G:.+]] = nvgpu.device_async_create_group
// CHECK:   nvgpu.device_async_wait %[[G]] {numGroups = 1 : i32}
// CHECK:   gpu.barrier
// CHECK:   %[[STAGE:.+]] = arith.remui %{{.+}}, %c2
// Fragments: two adjacent bf16 of a shared row per register.
// CHECK:   vector.load %[[XS]][%[[STAGE]], {{.*}}] {alignment = 4 : i64} : memref<2x64x72xbf16, #gpu.address_space<workgroup>>, vector<2xbf16>
// CHECK:   vector.bitcast %{{.+}} : vector<2xbf16> to vector<1xi32>
// CHECK-COUNT-8: nvvm.mma.sync A[{{.*}}] B[{{.*}}] C[{{.*}}] {layoutA = #nvvm.mma_layout<row>, layoutB = #nvvm.mma_layout<col>, multiplicandAPtxType = #nvvm.mma_type<bf16>, multiplicandBPtxType = #nvvm.mma_type<bf16>, shape = #nvvm.shape<m = 16, n = 8, k = 16>}
// CHECK-COUNT-24: nvvm.mma.sync
// CHECK-NOT: nvvm.mma.sync
// CHECK:   scf.yield
// CHECK: nvgpu.device_async_wait %[[LAST]] {numGroups = 0 : i32}
// Inside the bounds: the slice's partial tile = D with a split, else C +=
// D; a lane's two adjacent columns in one 8-byte store where both are
// inside, N is even and the buffer aligned, else one store each.
// CHECK: arith.remui %[[N]], %c2
// CHECK: memref.extract_aligned_pointer_as_index %[[C]]
// CHECK: memref.extract_aligned_pointer_as_index %[[P]]
// CHECK: scf.if
// CHECK:   scf.if %[[SPLIT]] {
// CHECK:     vector.store %{{.+}}, %[[P]][%[[Z]], {{.*}}] {alignment = 8 : i64} : memref<?x?x?xf32>, vector<2xf32>
// CHECK:   } else {
// CHECK:     memref.load %[[C]]
// CHECK:     memref.load %[[C]]
// CHECK:     vector.store %{{.+}}, %[[C]]{{.*}} {alignment = 8 : i64} : memref<?x?xf32>, vector<2xf32>
// CHECK: } else {
// CHECK:   scf.if
// CHECK:     scf.if %[[SPLIT]] {
// CHECK:       memref.store %{{.+}}, %[[P]][%[[Z]], {{.*}}]
// CHECK:     } else {
// CHECK:       memref.load %[[C]]
// CHECK:       arith.addf
// CHECK:       memref.store %{{.+}}, %[[C]]
// CHECK: gpu.terminator
// CHECK: } {k3.mma_shape = array<i64: 16, 8, 16>, k3.tile_sizes = array<i64: 64, 64, 64>}
// With a split: C += the partial tiles, slice by slice in order.
// CHECK: scf.if %[[SPLIT]] {
// CHECK:   scf.parallel (%[[I:.+]], %[[J:.+]]) = ({{.*}}) to (%[[T]], %[[N]])
// CHECK:     %[[C0V:.+]] = memref.load %[[C]][%[[I]], %[[J]]]
// CHECK:     %[[SUM:.+]] = scf.for %[[ZZ:.+]] = %{{.+}} to %[[S]] step %{{.+}} iter_args(%[[A:.+]] = %[[C0V]]) -> (f32)
// CHECK:       memref.load %[[P]][%[[ZZ]], %[[I]], %[[J]]]
// CHECK:     memref.store %[[SUM]], %[[C]][%[[I]], %[[J]]]
// CHECK: } else {
// CHECK:   linalg.generic
// CHECK:     func.call @widen
// CHECK: }
// fuse-slices (off by default until measured on a GPU): no second kernel;
// with a split each block stores its partial tile, counts itself in its
// tile's counter (zeroed device memory, an atomic add between fences), and
// the tile's last block adds C and the slices in slice order, as the
// second kernel did, then resets the counter.
// FUSED-DAG: memref.global "private" @k3k_mma_count : memref<396xi32, #gpu.address_space<global>> = dense<0> {alignment = 4 : i64}
// FUSED-LABEL: func.func @matmul
// FUSED-SAME: %{{[^:]+}}: memref<?x?xbf16>, %{{[^:]+}}: memref<?x?xbf16>, %[[C:[^:]+]]: memref<?x?xf32>
// FUSED: %[[SPLIT:.+]] = arith.cmpi ugt, %[[S:.+]], %c1 : index
// FUSED: %[[P:.+]] = memref.alloc
// FUSED: gpu.launch blocks(%[[BX:[^,]+]], %[[BY:[^,]+]], %{{[^)]+}}) in (%{{[^=]+}}= %{{[^,]+}}, %{{[^=]+}}= %[[GY:[^,]+]],
// FUSED: %[[XS:.+]] = memref.get_global @k3k_mma_x
// FUSED: memref.store %{{.+}}, %[[P]]
// FUSED: %[[ROW:.+]] = arith.muli %[[BX]], %[[GY]]
// FUSED-NEXT: %[[TILE:.+]] = arith.addi %[[ROW]], %[[BY]]
// FUSED-NEXT: nvvm.memory.barrier <gpu>
// FUSED-NEXT: gpu.barrier
// FUSED-NEXT: %[[CNT:.+]] = memref.get_global @k3k_mma_count
// FUSED: memref.atomic_rmw addi %c1_i32, %[[CNT]][%[[TILE]]]
// FUSED: memref.store %{{.+}}, %[[XS]][%c0, %c0, %c0]
// FUSED: gpu.barrier
// FUSED-NEXT: %[[FLAG:.+]] = memref.load %[[XS]][%c0, %c0, %c0]
// FUSED-NEXT: %[[LAST:.+]] = arith.cmpf oeq, %[[FLAG]]
// FUSED-NEXT: scf.if %[[LAST]] {
// FUSED-NEXT: nvvm.memory.barrier <gpu>
// FUSED: %[[C0V:.+]] = memref.load %[[C]]
// FUSED-NEXT: %[[SUM:.+]] = scf.for %[[Z:.+]] = %c0 to %[[S]] step %c1 iter_args(%[[A:.+]] = %[[C0V]]) -> (f32)
// FUSED-NEXT: %[[V:.+]] = memref.load %[[P]][%[[Z]],
// FUSED-NEXT: arith.addf %[[A]], %[[V]]
// FUSED: memref.store %[[SUM]], %[[C]]
// FUSED: memref.store %c0_i32, %[[CNT]][%[[TILE]]]
// FUSED: gpu.terminator
// FUSED-NOT: scf.parallel
// FUSED: linalg.generic
func.func @matmul(%x: memref<?x?xbf16>, %w: memref<?x?xbf16>, %c: memref<?x?xf32>) {
  linalg.generic {indexing_maps = [#map_mk, #map_nk, #map_mn],
                  iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<?x?xbf16>, memref<?x?xbf16>) outs(%c : memref<?x?xf32>) {
  ^bb0(%a: bf16, %b: bf16, %s: f32):
    %af = func.call @widen(%a) : (bf16) -> f32
    %bf = arith.extf %b : bf16 to f32
    %p = arith.mulf %af, %bf : f32
    %r = arith.addf %s, %p : f32
    linalg.yield %r : f32
  }
  return
}

// The default tile: 8 warps (256 threads) per 64 x 128 of C; the X and W
// rings (2 x 64 and 2 x 128 rows of 72 bf16: 18 KB and 36 KB) are views of
// the kernel's dynamic workgroup memory, whose size the launch gives.
// DYN-NOT: memref.global "private" @k3k_mma_x
// DYN-LABEL: func.func @matmul
// DYN: %[[GY:.+]] = arith.ceildivui %{{.+}}, %c128 : index
// DYN: gpu.launch blocks({{.*}}) in ({{[^)]*}} = %[[GY]], {{[^)]*}}) threads({{[^)]*}}) in ({{[^)]*}} = %c256, {{[^)]*}}) dynamic_shared_memory_size %c55296_i32
// DYN: %[[DSM:.+]] = gpu.dynamic_shared_memory : memref<?xi8, #gpu.address_space<workgroup>>
// DYN: memref.view %[[DSM]][%c0{{.*}}][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<2x64x72xbf16, #gpu.address_space<workgroup>>
// DYN: memref.view %[[DSM]][%c18432][] : memref<?xi8, #gpu.address_space<workgroup>> to memref<2x128x72xbf16, #gpu.address_space<workgroup>>
// Each thread stages two 16-byte pieces of the X tile and four of W's.
// DYN-COUNT-2: nvgpu.device_async_copy %arg0
// DYN-COUNT-4: nvgpu.device_async_copy %arg1
// DYN-NOT: nvgpu.device_async_copy
// DYN: nvgpu.device_async_create_group
// DYN: } {k3.mma_shape = array<i64: 16, 8, 16>, k3.tile_sizes = array<i64: 64, 128, 64>}

// Not a bf16 product: f32 activations (an f32 library) stay scalar, as
// does a product whose operands are not simply widened.
// CHECK-LABEL: func.func @f32_activations
// CHECK-NOT: gpu.launch
// CHECK: linalg.generic
func.func @f32_activations(%x: memref<?x?xf32>, %w: memref<?x?xbf16>, %c: memref<?x?xf32>) {
  linalg.generic {indexing_maps = [#map_mk, #map_nk, #map_mn],
                  iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<?x?xf32>, memref<?x?xbf16>) outs(%c : memref<?x?xf32>) {
  ^bb0(%a: f32, %b: bf16, %s: f32):
    %bf = arith.extf %b : bf16 to f32
    %p = arith.mulf %a, %bf : f32
    %r = arith.addf %s, %p : f32
    linalg.yield %r : f32
  }
  return
}

// CHECK-LABEL: func.func @scaled
// CHECK-NOT: gpu.launch
// CHECK: linalg.generic
func.func @scaled(%x: memref<?x?xbf16>, %w: memref<?x?xbf16>, %c: memref<?x?xf32>) {
  linalg.generic {indexing_maps = [#map_mk, #map_nk, #map_mn],
                  iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<?x?xbf16>, memref<?x?xbf16>) outs(%c : memref<?x?xf32>) {
  ^bb0(%a: bf16, %b: bf16, %s: f32):
    %af = arith.extf %a : bf16 to f32
    %bf = arith.extf %b : bf16 to f32
    %two = arith.constant 2.0 : f32
    %bs = arith.mulf %bf, %two : f32
    %p = arith.mulf %af, %bs : f32
    %r = arith.addf %s, %p : f32
    linalg.yield %r : f32
  }
  return
}

// A transposed W ([K, N]) is a different product.
// CHECK-LABEL: func.func @transposed
// CHECK-NOT: gpu.launch
// CHECK: linalg.generic
func.func @transposed(%x: memref<?x?xbf16>, %w: memref<?x?xbf16>, %c: memref<?x?xf32>) {
  linalg.generic {indexing_maps = [#map_mk, affine_map<(i, j, k) -> (k, j)>, #map_mn],
                  iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<?x?xbf16>, memref<?x?xbf16>) outs(%c : memref<?x?xf32>) {
  ^bb0(%a: bf16, %b: bf16, %s: f32):
    %af = arith.extf %a : bf16 to f32
    %bf = arith.extf %b : bf16 to f32
    %p = arith.mulf %af, %bf : f32
    %r = arith.addf %s, %p : f32
    linalg.yield %r : f32
  }
  return
}

// A `k3.mma_matmul` function: its whole body (the zeroed f32 product, the
// generic, the rounding loop) is what runs when the kernel cannot; the
// kernel stores out(sum) itself: one slice's sum at once, a split's slices
// added from the first one's in slice order; C is never read. The generic
// inside keeps no kernel of its own here (the pass leaves it to the body).
// CHECK-LABEL: func.func @linear_many
// CHECK-SAME: (%[[X:[^:]+]]: memref<?x?xbf16>, %[[W:[^:]+]]: memref<?x?xbf16>, %[[O:[^:]+]]: memref<?x?xbf16>)
// CHECK: %[[K:.+]] = memref.dim %[[X]], %c1{{.*}}
// CHECK: %[[KW:.+]] = memref.dim %[[W]], %c1{{.*}}
// CHECK: arith.cmpi eq, %[[K]], %[[KW]]
// CHECK: scf.if
// CHECK-NOT: linalg.fill
// CHECK: %[[SPLIT:.+]] = arith.cmpi ugt
// CHECK: gpu.launch
// A pair of columns: two rounded values in one 4-byte store.
// CHECK: scf.if %[[SPLIT]] {
// CHECK:   vector.store %{{.+}} : memref<?x?x?xf32>, vector<2xf32>
// CHECK: } else {
// CHECK-NOT: memref.load %[[O]]
// CHECK:   func.call @narrow(%{{.+}}) : (f32) -> bf16
// CHECK:   func.call @narrow(%{{.+}}) : (f32) -> bf16
// CHECK:   vector.store %{{.+}}, %[[O]]{{.*}} {alignment = 4 : i64} : memref<?x?xbf16>, vector<2xbf16>
// One at a time.
// CHECK: scf.if %[[SPLIT]] {
// CHECK:   memref.store
// CHECK: } else {
// CHECK-NOT: memref.load %[[O]]
// CHECK:   %[[R:.+]] = func.call @narrow(%{{.+}}) : (f32) -> bf16
// CHECK:   memref.store %[[R]], %[[O]]
// CHECK: gpu.terminator
// CHECK: scf.if %[[SPLIT]] {
// CHECK:   scf.parallel (%[[I:.+]], %[[J:.+]]) =
// CHECK:     %[[P0:.+]] = memref.load %[[P:.+]][%c0{{.*}}, %[[I]], %[[J]]]
// CHECK:     %[[SUM:.+]] = scf.for %[[Z:.+]] = %c1{{.*}} to %{{.+}} step %{{.+}} iter_args(%{{.+}} = %[[P0]]) -> (f32)
// CHECK:       memref.load %[[P]][%[[Z]], %[[I]], %[[J]]]
// CHECK:     %[[RS:.+]] = func.call @narrow(%[[SUM]]) : (f32) -> bf16
// CHECK:     memref.store %[[RS]], %[[O]][%[[I]], %[[J]]]
// CHECK: } else {
// CHECK:   linalg.fill
// CHECK-NOT: gpu.launch
// CHECK:   linalg.generic
// CHECK:   scf.parallel
// CHECK:     func.call @narrow
// CHECK: }
// CHECK: return
// The split's slices also go to out with fuse-slices.
// FUSED-LABEL: func.func @linear_many
// FUSED: scf.if %{{.+}} {
// FUSED: %[[P0:.+]] = memref.load %[[P:alloc[_0-9]*]][%c0,
// FUSED-NEXT: %[[SUM:.+]] = scf.for %[[Z:.+]] = %c1 to %{{.+}} step %c1 iter_args(%{{.+}} = %[[P0]]) -> (f32)
// FUSED: func.call @narrow(%[[SUM]])
// OLD-LABEL: func.func @linear_many
// OLD-NOT: gpu.launch
func.func private @narrow(%v: f32) -> bf16 {
  %r = arith.truncf %v : f32 to bf16
  return %r : bf16
}

func.func @linear_many(%x: memref<?x?xbf16>, %w: memref<?x?xbf16>, %out: memref<?x?xbf16>)
    attributes {k3.mma_matmul = {out = @narrow}} {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %t = memref.dim %x, %c0 : memref<?x?xbf16>
  %n = memref.dim %w, %c0 : memref<?x?xbf16>
  %acc = memref.alloc(%t, %n) : memref<?x?xf32>
  %zero = arith.constant 0.0 : f32
  linalg.fill ins(%zero : f32) outs(%acc : memref<?x?xf32>)
  linalg.generic {indexing_maps = [#map_mk, #map_nk, #map_mn],
                  iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<?x?xbf16>, memref<?x?xbf16>) outs(%acc : memref<?x?xf32>) {
  ^bb0(%a: bf16, %b: bf16, %s: f32):
    %af = arith.extf %a : bf16 to f32
    %bf = arith.extf %b : bf16 to f32
    %p = arith.mulf %af, %bf : f32
    %r = arith.addf %s, %p : f32
    linalg.yield %r : f32
  }
  scf.parallel (%i, %j) = (%c0, %c0) to (%t, %n) step (%c1, %c1) {
    %v = memref.load %acc[%i, %j] : memref<?x?xf32>
    %r = func.call @narrow(%v) : (f32) -> bf16
    memref.store %r, %out[%i, %j] : memref<?x?xbf16>
  }
  return
}

// min-blocks: each launch names its kernel, one name per launch of the
// function, and the function records the bound of each for
// k3-gpu-launch-bounds; without the option no launch is named.
// MINB-LABEL: func.func @two_products
// MINB-SAME: k3.launch_bounds = {two_products_mma_kernel = 4 : i64, two_products_mma_kernel_1 = 4 : i64}
// MINB: gpu.launch {{.*}} function(@two_products_mma_kernel) {
// MINB: gpu.launch {{.*}} function(@two_products_mma_kernel_1) {
// CHECK-LABEL: func.func @two_products
// CHECK-NOT: launch_bounds
// CHECK-NOT: function(@
// CHECK: return
func.func @two_products(%x: memref<?x?xbf16>, %w: memref<?x?xbf16>,
                        %c: memref<?x?xf32>, %d: memref<?x?xf32>) {
  linalg.generic {indexing_maps = [#map_mk, #map_nk, #map_mn],
                  iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<?x?xbf16>, memref<?x?xbf16>) outs(%c : memref<?x?xf32>) {
  ^bb0(%a: bf16, %b: bf16, %s: f32):
    %af = arith.extf %a : bf16 to f32
    %bf = arith.extf %b : bf16 to f32
    %p = arith.mulf %af, %bf : f32
    %r = arith.addf %s, %p : f32
    linalg.yield %r : f32
  }
  linalg.generic {indexing_maps = [#map_mk, #map_nk, #map_mn],
                  iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %w : memref<?x?xbf16>, memref<?x?xbf16>) outs(%d : memref<?x?xf32>) {
  ^bb0(%a: bf16, %b: bf16, %s: f32):
    %af = arith.extf %a : bf16 to f32
    %bf = arith.extf %b : bf16 to f32
    %p = arith.mulf %af, %bf : f32
    %r = arith.addf %s, %p : f32
    linalg.yield %r : f32
  }
  return
}

// ldmatrix: per k16 step a warp reads its two A tiles (X, 64-row ring) and
// its four B tiles (W, 128-row ring, two per ldmatrix) with four x4
// ldmatrix and no 4-byte loads of workgroup memory, then 8 mma.
// LDM-LABEL: func.func @matmul
// LDM: scf.for
// LDM-NOT: vector.load {{.*}}workgroup
// LDM-COUNT-2: nvgpu.ldmatrix %{{.+}} {numTiles = 4 : i32, transpose = false} : memref<2x64x72xbf16, #gpu.address_space<workgroup>> -> vector<4x2xbf16>
// LDM-COUNT-2: nvgpu.ldmatrix %{{.+}} {numTiles = 4 : i32, transpose = false} : memref<2x128x72xbf16, #gpu.address_space<workgroup>> -> vector<4x2xbf16>
// LDM-COUNT-8: nvvm.mma.sync
// LDM-NOT: vector.load {{.*}}workgroup
// LDM: gpu.terminator
