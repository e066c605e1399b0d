// RUN: k3-opt %s --pass-pipeline='builtin.module(func.func(k3-gpu-warp-reduce{vectorize=0 split-k=0}))' | FileCheck %s
// RUN: k3-opt %s --pass-pipeline='builtin.module(func.func(k3-gpu-warp-reduce{unroll=1 vectorize=0 split-k=0}))' | FileCheck %s --check-prefix=U1
// RUN: not k3-opt %s --pass-pipeline='builtin.module(func.func(k3-gpu-warp-reduce{unroll=0}))' 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: k3-opt %s --pass-pipeline='builtin.module(func.func(k3-gpu-warp-reduce{split-k=0}))' | FileCheck %s --check-prefix=VEC
// RUN: k3-opt %s --pass-pipeline='builtin.module(func.func(k3-gpu-warp-reduce{vectorize=0}))' | FileCheck %s --check-prefix=SPLITK
// U1-LABEL: func.func @matvec
// U1: k3.warp_unroll = 1 : i64
// BAD: unroll must be in [1, 16], got 0

// The linalg form (a matrix-vector product after
// convert-linalg-to-parallel-loops): lane l sums k = l, l + 32, ...: four
// terms per iteration (loads first) while all four are in range, then one
// at a time; five xor shuffles combine the lanes; lane 0 adds the sum to the
// output element.
// CHECK-LABEL: func.func @matvec
// CHECK: %[[C32:.+]] = arith.constant 32 : index
// CHECK: scf.parallel (%[[J:.+]], %[[LANE:.+]]) = ({{.*}}) to (%{{.+}}, %[[C32]])
// CHECK:   %[[LB:.+]] = arith.addi %c0, %{{.+}} : index
// CHECK:   %[[STRIDE:.+]] = arith.muli %c1, %[[C32]] : index
// CHECK:   %[[STRIDE4:.+]] = arith.muli %[[STRIDE]], %c4 : index
// CHECK:   %[[MAIN:.+]] = scf.for %[[K:.+]] = %[[LB]] to %{{.+}} step %[[STRIDE4]] iter_args(%{{.+}} = %{{.+}}) -> (f32)
// CHECK:     memref.load %{{.+}}[%[[J]], %[[K]]]
// CHECK:     memref.load
// CHECK:     memref.load
// CHECK:     memref.load
// CHECK:     memref.load
// CHECK:     memref.load
// CHECK:     memref.load
// CHECK:     memref.load
// CHECK:     arith.addf
// CHECK:     arith.addf
// CHECK:     arith.addf
// CHECK:     arith.addf
// CHECK-NOT: memref.store
// CHECK:     scf.yield
// CHECK:   %[[PART:.+]] = scf.for %{{.+}} = %{{.+}} to %{{.+}} step %[[STRIDE]] iter_args(%{{.+}} = %[[MAIN]]) -> (f32)
// CHECK:   gpu.shuffle  xor %[[PART]], %c16_i32, %c32_i32 : f32
// CHECK:   gpu.shuffle  xor {{.*}}, %c8_i32, %c32_i32
// CHECK:   gpu.shuffle  xor {{.*}}, %c4_i32, %c32_i32
// CHECK:   gpu.shuffle  xor {{.*}}, %c2_i32, %c32_i32
// CHECK:   gpu.shuffle  xor {{.*}}, %c1_i32, %c32_i32
// CHECK:   %[[SUM:.+]] = arith.addf
// CHECK:   %[[FIRST:.+]] = arith.cmpi eq, %[[LANE]], %c0
// CHECK:   scf.if %[[FIRST]] {
// CHECK:     %[[OLD:.+]] = memref.load %{{.+}}[%[[J]]]
// CHECK:     %[[NEW:.+]] = arith.addf %[[OLD]], %[[SUM]] : f32
// CHECK:     memref.store %[[NEW]], %{{.+}}[%[[J]]]
// CHECK: } {k3.warp_lanes = 32 : i64, k3.warp_unroll = 4 : i64}
func.func @matvec(%w: memref<?x?xf32>, %x: memref<?xf32>, %y: memref<?xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %w, %c0 : memref<?x?xf32>
  %k = memref.dim %w, %c1 : memref<?x?xf32>
  scf.parallel (%j) = (%c0) to (%n) step (%c1) {
    scf.for %i = %c0 to %k step %c1 {
      %a = memref.load %w[%j, %i] : memref<?x?xf32>
      %b = memref.load %x[%i] : memref<?xf32>
      %p = arith.mulf %a, %b : f32
      %c = memref.load %y[%j] : memref<?xf32>
      %s = arith.addf %c, %p : f32
      memref.store %s, %y[%j] : memref<?xf32>
    }
    scf.reduce
  }
  return
}

// The iter_args form with two sums and an epilogue: the epilogue (a call and
// a store) runs in lane 0 on the combined sums.
// CHECK-LABEL: func.func @two_sums
// CHECK: scf.parallel
// CHECK:   %[[M:.+]]:2 = scf.for {{.*}} iter_args(%{{.+}} = %{{.+}}, %{{.+}} = %{{.+}}) -> (f32, f32)
// CHECK:   %[[P:.+]]:2 = scf.for {{.*}} iter_args(%{{.+}} = %[[M]]#0, %{{.+}} = %[[M]]#1) -> (f32, f32)
// CHECK:   gpu.shuffle  xor %[[P]]#0, %c16_i32
// CHECK:   gpu.shuffle  xor %[[P]]#1, %c16_i32
// CHECK:   scf.if
// CHECK:     func.call @act
// CHECK:     memref.store
// CHECK: } {k3.warp_lanes = 32 : i64, k3.warp_unroll = 4 : i64}
func.func private @act(%a: f32, %b: f32) -> f32 {
  %p = arith.mulf %a, %b : f32
  return %p : f32
}
func.func @two_sums(%w: memref<?x?xf32>, %x: memref<?xf32>, %y: memref<?xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0.0 : f32
  %n = memref.dim %w, %c0 : memref<?x?xf32>
  %k = memref.dim %w, %c1 : memref<?x?xf32>
  scf.parallel (%j) = (%c0) to (%n) step (%c1) {
    %g, %u = scf.for %i = %c0 to %k step %c1 iter_args(%ga = %zero, %ua = %zero) -> (f32, f32) {
      %a = memref.load %w[%j, %i] : memref<?x?xf32>
      %b = memref.load %x[%i] : memref<?xf32>
      %p = arith.mulf %a, %b : f32
      %g2 = arith.addf %ga, %p : f32
      %u2 = arith.addf %a, %ua : f32
      scf.yield %g2, %u2 : f32, f32
    }
    %h = func.call @act(%g, %u) : (f32, f32) -> f32
    memref.store %h, %y[%j] : memref<?xf32>
    scf.reduce
  }
  return
}

// Two outputs of one linalg.generic (AttnRes: sum of squares and a
// projection): two partial sums, both combined, both stored by lane 0.
// CHECK-LABEL: func.func @two_outputs
// CHECK: %{{.+}}:2 = scf.for {{.*}} -> (f32, f32)
// CHECK: scf.if
// CHECK:   memref.store {{.*}}[%{{.+}}] : memref<?xf32>
// CHECK:   memref.store {{.*}}[%{{.+}}] : memref<?xf32>
// CHECK: } {k3.warp_lanes = 32 : i64, k3.warp_unroll = 4 : i64}
func.func @two_outputs(%w: memref<?x?xf32>, %ss: memref<?xf32>, %q: memref<?xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %w, %c0 : memref<?x?xf32>
  %k = memref.dim %w, %c1 : memref<?x?xf32>
  scf.parallel (%j) = (%c0) to (%n) step (%c1) {
    scf.for %i = %c0 to %k step %c1 {
      %a = memref.load %w[%j, %i] : memref<?x?xf32>
      %sq = arith.mulf %a, %a : f32
      %s0 = memref.load %ss[%j] : memref<?xf32>
      %s1 = arith.addf %s0, %sq : f32
      %q0 = memref.load %q[%j] : memref<?xf32>
      %q1 = arith.addf %q0, %a : f32
      memref.store %s1, %ss[%j] : memref<?xf32>
      memref.store %q1, %q[%j] : memref<?xf32>
    }
    scf.reduce
  }
  return
}

// A maximum (exact in any order): lanes start at -inf and combine with
// maximumf; the loop's own start value joins in lane 0.
// CHECK-LABEL: func.func @row_max
// CHECK: %[[NINF:.+]] = arith.constant 0xFF800000 : f32
// CHECK: scf.for {{.*}} iter_args(%{{.+}} = %[[NINF]]) -> (f32)
// CHECK:   arith.maximumf
// CHECK: %[[S:.+]], %{{.+}} = gpu.shuffle  xor
// CHECK: arith.maximumf %{{.+}}, %[[S]] : f32
// CHECK: scf.if
// CHECK:   arith.maximumf %{{.+}}, %{{.+}} : f32
// CHECK:   memref.store
// CHECK: } {k3.warp_lanes = 32 : i64, k3.warp_unroll = 4 : i64}
func.func @row_max(%w: memref<?x?xf32>, %y: memref<?xf32>, %m0: f32) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %w, %c0 : memref<?x?xf32>
  %k = memref.dim %w, %c1 : memref<?x?xf32>
  scf.parallel (%j) = (%c0) to (%n) step (%c1) {
    %m = scf.for %i = %c0 to %k step %c1 iter_args(%a = %m0) -> (f32) {
      %v = memref.load %w[%j, %i] : memref<?x?xf32>
      %b = arith.maximumf %a, %v : f32
      scf.yield %b : f32
    }
    memref.store %m, %y[%j] : memref<?xf32>
    scf.reduce
  }
  return
}

// Thread x already reads contiguously (o[e] = Σ_j p[j] c[j, e], e innermost):
// splitting j over lanes would make the reads strided, so no split.
// CHECK-LABEL: func.func @strided
// CHECK-NOT: gpu.shuffle
// CHECK: return
func.func @strided(%p: memref<?xf32>, %c: memref<?x?xf32>, %o: memref<?xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0.0 : f32
  %t = memref.dim %c, %c0 : memref<?x?xf32>
  %r = memref.dim %c, %c1 : memref<?x?xf32>
  scf.parallel (%e) = (%c0) to (%r) step (%c1) {
    %acc = scf.for %j = %c0 to %t step %c1 iter_args(%a = %zero) -> (f32) {
      %pj = memref.load %p[%j] : memref<?xf32>
      %cv = memref.load %c[%j, %e] : memref<?x?xf32>
      %pr = arith.mulf %pj, %cv : f32
      %a2 = arith.addf %a, %pr : f32
      scf.yield %a2 : f32
    }
    memref.store %acc, %o[%e] : memref<?xf32>
    scf.reduce
  }
  return
}

// Not a sum or a maximum (a product), a loop that writes memory, and setup
// that writes memory: left alone.
// CHECK-LABEL: func.func @not_sums
// CHECK-NOT: gpu.shuffle
// CHECK-NOT: k3.warp_lanes
// CHECK: return
func.func @not_sums(%w: memref<?x?xf32>, %y: memref<?xf32>, %z: memref<?x?xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %ninf = arith.constant 0xFF800000 : f32
  %n = memref.dim %w, %c0 : memref<?x?xf32>
  %k = memref.dim %w, %c1 : memref<?x?xf32>
  scf.parallel (%j) = (%c0) to (%n) step (%c1) {
    %m = scf.for %i = %c0 to %k step %c1 iter_args(%a = %ninf) -> (f32) {
      %v = memref.load %w[%j, %i] : memref<?x?xf32>
      %b = arith.mulf %a, %v : f32
      scf.yield %b : f32
    }
    memref.store %m, %y[%j] : memref<?xf32>
    scf.reduce
  }
  scf.parallel (%j) = (%c0) to (%n) step (%c1) {
    %s = scf.for %i = %c0 to %k step %c1 iter_args(%a = %ninf) -> (f32) {
      %v = memref.load %w[%j, %i] : memref<?x?xf32>
      memref.store %v, %z[%j, %i] : memref<?x?xf32>
      %b = arith.addf %a, %v : f32
      scf.yield %b : f32
    }
    memref.store %s, %y[%j] : memref<?xf32>
    scf.reduce
  }
  scf.parallel (%j) = (%c0) to (%n) step (%c1) {
    memref.store %ninf, %y[%j] : memref<?xf32>
    %s = scf.for %i = %c0 to %k step %c1 iter_args(%a = %ninf) -> (f32) {
      %v = memref.load %w[%j, %i] : memref<?x?xf32>
      %b = arith.addf %a, %v : f32
      scf.yield %b : f32
    }
    memref.store %s, %y[%j] : memref<?xf32>
    scf.reduce
  }
  return
}

// The vector form (the default): a bf16 matrix-vector product whose loads
// walk their rows with the loop. When the row pointers allow it (base
// pointers 16-byte aligned, row length and lb multiples of 8), lane l takes
// the 8 terms at lb + 8 l + 256 m with one 16-byte load of each operand,
// two chunks per iteration (half the unroll), then the rest one term at a
// time; otherwise the one-term form. Rows of f32 (@matvec above) keep the
// one-term form.
// VEC-LABEL: func.func @matvec(
// VEC-NOT: vector.load
// VEC: k3.warp_lanes
// VEC-LABEL: func.func @matvec_bf16
// VEC: scf.parallel (%[[J:.+]], %[[LANE:.+]]) =
// VEC:   memref.extract_aligned_pointer_as_index %[[W:[^ ]+]] :
// VEC:   arith.remui %{{.+}}, %c16
// VEC:   %[[ROW:.+]] = memref.dim %[[W]], %c1
// VEC:   arith.remui %[[ROW]], %c8
// VEC:   memref.extract_aligned_pointer_as_index %[[X:[^ ]+]] :
// VEC:   %[[PART:.+]] = scf.if %[[OK:.+]] -> (f32) {
// VEC:     %[[FIRST:.+]] = arith.muli %[[LANE]], %c8
// VEC:     %[[MAIN:.+]] = scf.for %[[K:.+]] = %{{.+}} to %{{.+}} step %{{.+}} iter_args
// VEC:       vector.load %[[W]][%[[J]], %[[K]]] {alignment = 16 : i64} : memref<?x?xbf16>, vector<8xbf16>
// VEC:       vector.load %[[X]][%[[K]]] {alignment = 16 : i64} : memref<?xbf16>, vector<8xbf16>
// VEC:       %[[K2:.+]] = arith.addi %[[K]], %{{.+}} : index
// VEC:       vector.load %[[W]][%[[J]], %[[K2]]]
// VEC:       vector.load %[[X]][%[[K2]]]
// VEC-NOT:   vector.load
// VEC:       vector.extract %{{.+}}[7] : bf16 from vector<8xbf16>
// VEC:       scf.yield
// VEC:     %[[REST:.+]] = scf.for {{.*}} iter_args(%{{.+}} = %[[MAIN]])
// VEC:       vector.load
// VEC:     scf.for {{.*}} iter_args(%{{.+}} = %[[REST]])
// VEC:       memref.load %[[W]]
// VEC:   } else {
// VEC:     scf.for
// VEC:       memref.load %[[W]]
// VEC:   } {k3.warp_vector = 8 : i64}
// VEC:   gpu.shuffle  xor %[[PART]], %c16_i32, %c32_i32 : f32
// VEC: } {k3.warp_lanes = 32 : i64, k3.warp_unroll = 4 : i64}
func.func @matvec_bf16(%w: memref<?x?xbf16>, %x: memref<?xbf16>, %y: memref<?xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %w, %c0 : memref<?x?xbf16>
  %k = memref.dim %w, %c1 : memref<?x?xbf16>
  scf.parallel (%j) = (%c0) to (%n) step (%c1) {
    scf.for %i = %c0 to %k step %c1 {
      %a = memref.load %w[%j, %i] : memref<?x?xbf16>
      %b = memref.load %x[%i] : memref<?xbf16>
      %af = arith.extf %a : bf16 to f32
      %bf = arith.extf %b : bf16 to f32
      %p = arith.mulf %af, %bf : f32
      %c = memref.load %y[%j] : memref<?xf32>
      %s = arith.addf %c, %p : f32
      memref.store %s, %y[%j] : memref<?xf32>
    }
    scf.reduce
  }
  return
}

// A load whose rows are not contiguous in memory (a strided layout) keeps
// the one-term form.
// VEC-LABEL: func.func @strided_rows
// VEC-NOT: vector.load
// VEC: } {k3.warp_lanes = 32 : i64, k3.warp_unroll = 4 : i64}
func.func @strided_rows(%w: memref<?x?xbf16, strided<[?, 2], offset: ?>>, %y: memref<?xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %w, %c0 : memref<?x?xbf16, strided<[?, 2], offset: ?>>
  %k = memref.dim %w, %c1 : memref<?x?xbf16, strided<[?, 2], offset: ?>>
  scf.parallel (%j) = (%c0) to (%n) step (%c1) {
    scf.for %i = %c0 to %k step %c1 {
      %a = memref.load %w[%j, %i] : memref<?x?xbf16, strided<[?, 2], offset: ?>>
      %af = arith.extf %a : bf16 to f32
      %c = memref.load %y[%j] : memref<?xf32>
      %s = arith.addf %c, %af : f32
      memref.store %s, %y[%j] : memref<?xf32>
    }
    scf.reduce
  }
  return
}

// Chunk reads (an MXFP4 group per iteration: 16 packed bytes at g · 16 and
// 32 activations at g · 32, read as 1-D vectors in the kernel source): one
// group per lane and iteration (unroll 1), lanes on consecutive groups.
// Where both bases are 16-byte aligned and their rows a multiple of 16
// bytes, each read is a 16-byte aligned vector.load (ld.global.v4);
// otherwise a vector.load of element alignment. Any other in-bounds row
// read (@row_read, no reduction) is a plain vector.load.
// CHECK-LABEL: func.func @mxfp4_groups
// CHECK: scf.parallel (%[[J:.+]], %[[LANE:.+]]) =
// CHECK:   memref.extract_aligned_pointer_as_index %[[W:[^ ]+]] :
// CHECK:   arith.remui %{{.+}}, %c16
// CHECK:   %[[ROW:.+]] = memref.dim %[[W]], %c1
// CHECK:   arith.remui %[[ROW]], %c16
// CHECK:   memref.extract_aligned_pointer_as_index %[[X:[^ ]+]] :
// CHECK:   %[[PART:.+]] = scf.if %{{.+}} -> (f32) {
// CHECK:     scf.for %[[G:.+]] = %{{.+}} to %{{.+}} step %{{.+}} iter_args
// CHECK:       %[[B0:.+]] = arith.muli %[[G]], %c16
// CHECK:       vector.load %[[W]][%[[J]], %[[B0]]] {alignment = 16 : i64} : memref<?x?xi8>, vector<16xi8>
// CHECK:       vector.load %[[X]][%{{.+}}] {alignment = 16 : i64} : memref<?xbf16>, vector<32xbf16>
// CHECK:       memref.load %{{.+}}[%[[J]], %[[G]]] : memref<?x?xi8>
// CHECK:   } else {
// CHECK:       vector.load %[[W]][%[[J]], %{{.+}}] {alignment = 1 : i64} : memref<?x?xi8>, vector<16xi8>
// CHECK:       vector.load %[[X]][%{{.+}}] {alignment = 2 : i64} : memref<?xbf16>, vector<32xbf16>
// CHECK:   } {k3.warp_aligned_chunks = 2 : i64}
// CHECK:   gpu.shuffle xor
// CHECK: k3.warp_lanes = 32 : i64, k3.warp_unroll = 1 : i64
// CHECK-NOT: vector.transfer_read
// CHECK-LABEL: func.func @row_read
// CHECK: vector.load %{{.+}}[%{{.+}}] : memref<?xf32>, vector<4xf32>
// CHECK-NOT: vector.transfer_read
func.func @mxfp4_groups(%w: memref<?x?xi8>, %s: memref<?x?xi8>, %x: memref<?xbf16>, %y: memref<?xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %c32 = arith.constant 32 : index
  %zero = arith.constant 0.0 : f32
  %pad = arith.constant 0 : i8
  %padx = arith.constant 0.0 : bf16
  %n = memref.dim %w, %c0 : memref<?x?xi8>
  %ng = memref.dim %s, %c1 : memref<?x?xi8>
  scf.parallel (%j) = (%c0) to (%n) step (%c1) {
    %acc = scf.for %g = %c0 to %ng step %c1 iter_args(%a = %zero) -> (f32) {
      %b0 = arith.muli %g, %c16 : index
      %k0 = arith.muli %g, %c32 : index
      %bytes = vector.transfer_read %w[%j, %b0], %pad {in_bounds = [true]} : memref<?x?xi8>, vector<16xi8>
      %xs = vector.transfer_read %x[%k0], %padx {in_bounds = [true]} : memref<?xbf16>, vector<32xbf16>
      %sc = memref.load %s[%j, %g] : memref<?x?xi8>
      %b = vector.extract %bytes[0] : i8 from vector<16xi8>
      %bf = arith.uitofp %b : i8 to f32
      %xv = vector.extract %xs[0] : bf16 from vector<32xbf16>
      %xf = arith.extf %xv : bf16 to f32
      %scf = arith.uitofp %sc : i8 to f32
      %t0 = arith.mulf %bf, %xf : f32
      %t = arith.mulf %t0, %scf : f32
      %a2 = arith.addf %a, %t : f32
      scf.yield %a2 : f32
    }
    memref.store %acc, %y[%j] : memref<?xf32>
    scf.reduce
  }
  return
}
func.func @row_read(%x: memref<?xf32>, %i: index) -> vector<4xf32> {
  %pad = arith.constant 0.0 : f32
  %v = vector.transfer_read %x[%i], %pad {in_bounds = [true]} : memref<?xf32>, vector<4xf32>
  return %v : vector<4xf32>
}

// A linalg.fill right before (as convert-linalg-to-parallel-loops leaves
// it, only side-effect-free ops in between) that writes a constant into
// every element the reduction accumulates into: lane 0 adds the sum to the
// constant instead of loading the element, and the fill loop goes.
// CHECK-LABEL: func.func @filled
// CHECK-NOT: memref.store %{{.+}}, %{{.+}}[%{{.+}}] : memref<?xf32>
// CHECK: scf.parallel (%[[J:.+]], %[[LANE:.+]]) =
// CHECK:   scf.if
// CHECK-NEXT: %[[C:.+]] = arith.constant 0.000000e+00 : f32
// CHECK-NEXT: %[[S:.+]] = arith.addf %[[C]], %{{.+}} : f32
// CHECK-NEXT: memref.store %[[S]], %{{.+}}[%[[J]]] : memref<?xf32>
// CHECK: k3.warp_fused_fill
// CHECK-LABEL: func.func @not_filled
// CHECK: scf.parallel (%{{.+}}) = (%c0) to (%{{.+}}) step (%c1) {
// CHECK-NEXT: memref.store
// CHECK: memref.load %{{.+}}[%{{.+}}] : memref<?xf32>
// CHECK-NOT: k3.warp_fused_fill
func.func @filled(%w: memref<?x?xf32>, %y: memref<?xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0.0 : f32
  %n = memref.dim %w, %c0 : memref<?x?xf32>
  %k = memref.dim %w, %c1 : memref<?x?xf32>
  scf.parallel (%j) = (%c0) to (%n) step (%c1) {
    memref.store %zero, %y[%j] : memref<?xf32>
    scf.reduce
  }
  %n2 = memref.dim %w, %c0 : memref<?x?xf32>
  scf.parallel (%j) = (%c0) to (%n) step (%c1) {
    scf.for %i = %c0 to %k step %c1 {
      %v = memref.load %w[%j, %i] : memref<?x?xf32>
      %c = memref.load %y[%j] : memref<?xf32>
      %s = arith.addf %c, %v : f32
      memref.store %s, %y[%j] : memref<?xf32>
    }
    scf.reduce
  }
  return
}
// The fill covers other elements (a different bound): kept, and the
// element is loaded.
func.func @not_filled(%w: memref<?x?xf32>, %y: memref<?xf32>, %m: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0.0 : f32
  %n = memref.dim %w, %c0 : memref<?x?xf32>
  %k = memref.dim %w, %c1 : memref<?x?xf32>
  scf.parallel (%j) = (%c0) to (%m) step (%c1) {
    memref.store %zero, %y[%j] : memref<?xf32>
    scf.reduce
  }
  scf.parallel (%j) = (%c0) to (%n) step (%c1) {
    scf.for %i = %c0 to %k step %c1 {
      %v = memref.load %w[%j, %i] : memref<?x?xf32>
      %c = memref.load %y[%j] : memref<?xf32>
      %s = arith.addf %c, %v : f32
      memref.store %s, %y[%j] : memref<?xf32>
    }
    scf.reduce
  }
  return
}

// Split-K (the default): when a step has fewer than 64 outputs and at
// least 2048 terms per sum, chosen at run time, each output's terms are cut
// into 8 slices of a multiple of 256 terms, summed by a warp each into a
// partial-sum buffer [outputs, 8], and a second loop (k3.split_k, no lanes)
// adds the slices in order and finishes the output as before; otherwise
// one warp per output.
// SPLITK-LABEL: func.func @matvec(
// SPLITK: %[[FEW:.+]] = arith.cmpi ult, %{{.+}}, %c64
// SPLITK: %[[LONG:.+]] = arith.cmpi uge, %{{.+}}, %c2048
// SPLITK: %[[BOTH:.+]] = arith.andi %[[FEW]], %[[LONG]]
// SPLITK: scf.if %[[BOTH]] {
// SPLITK:   %[[PART:.+]] = memref.alloc(%{{.+}}, %c8) : memref<?x?xf32>
// SPLITK:   scf.parallel (%[[J:.+]], %[[S:.+]], %[[LANE:.+]]) =
// SPLITK:     gpu.shuffle xor
// SPLITK:     memref.store %{{.+}}, %[[PART]][%{{.+}}, %[[S]]]
// SPLITK:   } {k3.warp_lanes = 32 : i64, k3.warp_unroll = 4 : i64}
// SPLITK:   scf.parallel (%[[J2:.+]]) =
// SPLITK:     %[[TOT:.+]] = scf.for %[[S2:.+]] = %{{.+}} to %c8 step
// SPLITK:       memref.load %[[PART]][%{{.+}}, %[[S2]]]
// SPLITK:     %[[C:.+]] = memref.load %{{.+}}[%[[J2]]] : memref<?xf32>
// SPLITK:     arith.addf %[[C]], %[[TOT]] : f32
// SPLITK:   } {k3.split_k = 8 : i64}
// SPLITK: } else {
// SPLITK:   scf.parallel (%{{.+}}, %{{.+}}) =
// SPLITK:   } {k3.warp_lanes = 32 : i64, k3.warp_unroll = 4 : i64}
