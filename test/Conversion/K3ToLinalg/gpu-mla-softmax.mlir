// RUN: k3-opt %s --split-input-file --verify-diagnostics --pass-pipeline='builtin.module(k3-gpu-mla-softmax,canonicalize,cse)' | FileCheck %s

// @k3k_mla_softmax: p [T, NH, CAP], ntk [T], pmax, rowmax, psum [T, NH, C],
// rowsum [T, NH].
// CHECK: memref.global "private" @k3k_mla_softmax_maxima : memref<16xf32, #gpu.address_space<workgroup>>
// CHECK-LABEL: func.func @softmax
// CHECK-SAME: (%[[P:[^:]+]]: memref<?x?x?xf32>, %[[NTK:[^:]+]]: memref<?xindex>, %{{[^:]+}}: memref<?x?x?xf32>, %{{[^:]+}}: memref<?x?xf32>, %[[PSUM:[^:]+]]: memref<?x?x?xf32>, %[[ROWSUM:[^:]+]]: memref<?x?xf32>)
// Run-time choice: C == ⌈CAP / 512⌉ and the shapes of psum and rowsum.
// CHECK-DAG: %[[C:.+]] = memref.dim %[[PSUM]], %c2
// CHECK-DAG: %[[CAP:.+]] = memref.dim %[[P]], %c2
// CHECK-DAG: %[[NC:.+]] = arith.ceildivui %[[CAP]], %c512
// CHECK-DAG: arith.cmpi eq, %[[C]], %[[NC]]
// CHECK: scf.if
// A block of 16 warps per (head, token).
// CHECK: gpu.launch blocks(%[[H:.+]], %[[I:.+]], %{{.+}}) in ({{.*}}) threads({{.*}}) in (%{{.+}} = %c512, %{{.+}} = %c1, %{{.+}} = %c1)
// CHECK: %[[MAXIMA:.+]] = memref.get_global @k3k_mla_softmax_maxima
// The rows below n_i and inside the chunks.
// CHECK: %[[N0:.+]] = memref.load %[[NTK]][%[[I]]]
// CHECK: %[[N:.+]] = arith.minui %[[N0]]
// Warp w's chunks w, w + 16, ...: a lane's 16 rows loaded first, then
// their maximum.
// CHECK: scf.for %{{.+}} = %{{.+}} to %[[C]] step %c16
// CHECK-COUNT-16: memref.load %[[P]][%[[I]], %[[H]], %{{.+}}]
// CHECK-COUNT-16: arith.maximumf
// CHECK: scf.yield
// The warp's max tree (xor 16 .. 1), the warps' maxima through workgroup
// memory, a barrier, the block's maximum.
// CHECK-COUNT-5: gpu.shuffle  xor
// CHECK: memref.store %{{.+}}, %[[MAXIMA]]
// CHECK: gpu.barrier
// CHECK-COUNT-16: memref.load %[[MAXIMA]]
// exp(s - max) of the 16 rows, stored where below n, added in row order.
// CHECK: scf.for %{{.+}} = %{{.+}} to %[[C]] step %c16
// CHECK-COUNT-16: memref.load %[[P]]
// CHECK: arith.subf
// CHECK-NEXT: math.exp
// CHECK: memref.store %{{.+}}, %[[P]]
// CHECK: arith.addf
// CHECK: arith.select
// The chunk's sum: the warp's tree, stored by lane 0.
// CHECK: gpu.shuffle  xor
// CHECK: memref.store %{{.+}}, %[[PSUM]]
// CHECK: gpu.barrier
// Warp 0 adds the chunks' sums: lane l takes l, l + 32, ..., then the tree.
// CHECK: scf.for %{{.+}} = %{{.+}} to %[[C]] step %c32
// CHECK: memref.load %[[PSUM]]
// CHECK-COUNT-5: gpu.shuffle  xor
// CHECK: memref.store %{{.+}}, %[[ROWSUM]][%[[I]], %[[H]]]
// Otherwise the generic body.
// CHECK: } else {
// CHECK: memref.store %{{.+}}, %[[ROWSUM]][%c0, %c0]
// CHECK: return
func.func @softmax(%p: memref<?x?x?xf32>, %ntk: memref<?xindex>, %pmax: memref<?x?x?xf32>,
                   %rowmax: memref<?x?xf32>, %psum: memref<?x?x?xf32>, %rowsum: memref<?x?xf32>)
    attributes {k3.mla_softmax} {
  %c0 = arith.constant 0 : index
  %one = arith.constant 1.0 : f32
  memref.store %one, %rowsum[%c0, %c0] : memref<?x?xf32>
  return
}

// -----

// A mark on a function of other arguments is an error that names it.
// expected-error @+1 {{k3.mla_softmax: expected (p [T, NH, CAP] f32, ntk [T] index, pmax [T, NH, C] f32, rowmax [T, NH] f32, psum [T, NH, C] f32, rowsum [T, NH] f32) and no results}}
func.func @wrong(%p: memref<?x?x?xf32>, %ntk: memref<?xindex>) attributes {k3.mla_softmax} {
  return
}
