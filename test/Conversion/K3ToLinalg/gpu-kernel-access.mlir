// RUN: k3-opt %s --split-input-file --k3-gpu-kernel-access | FileCheck %s

// One character for the module, then one per parameter as launched: a
// memref of rank R is 3 + 2R of them (its pointers get `r`, `w` or `-`),
// any other argument one `-`. A memref read through a subview is read; one
// written through a reinterpret_cast or an atomic is written; one whose
// pointer is taken counts as written; one never used is `-`.
// CHECK-LABEL: gpu.module @k
// CHECK: llvm.mlir.global external constant @k_k3_access("-rr-----ww----ww---ww---------------")
// CHECK-SAME: addr_space = 1
module attributes {gpu.container_module} {
  gpu.module @k {
    gpu.func @k(%x: memref<?x?xf32>, %y: memref<?xf32>, %n: index, %z: memref<?xi32>, %p: memref<4x4xf32>,
                %unused: memref<8xf32>, %q: memref<?xf32>) kernel {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %one = arith.constant 1 : i32
      %sub = memref.subview %x[0, 0] [1, 1] [1, 1] : memref<?x?xf32> to memref<1x1xf32, strided<[?, 1]>>
      %v = memref.load %sub[%c0, %c0] : memref<1x1xf32, strided<[?, 1]>>
      %cast = memref.reinterpret_cast %y to offset: [0], sizes: [%n], strides: [1] : memref<?xf32> to memref<?xf32>
      memref.store %v, %cast[%c1] : memref<?xf32>
      %old = memref.atomic_rmw addi %one, %z[%c0] : (i32, memref<?xi32>) -> i32
      %ptr = memref.extract_aligned_pointer_as_index %p : memref<4x4xf32> -> index
      %d = memref.dim %q, %c0 : memref<?xf32>
      gpu.return
    }
  }
}

// -----

// A pointer marked `k3.read_only` (k3-gpu-skinny-mma's L2 prefetch, through
// its strided metadata or directly) leaves the memref a read; an unmarked
// one is a write.
// CHECK-LABEL: gpu.module @prefetch
// CHECK: llvm.mlir.global external constant @prefetch_k3_access("-rr-----ww-----")
module attributes {gpu.container_module} {
  gpu.module @prefetch {
    gpu.func @prefetch(%w: memref<?x?xbf16>, %v: memref<?x?xbf16>) kernel {
      %base, %off, %sizes:2, %strides:2 = memref.extract_strided_metadata %w : memref<?x?xbf16> -> memref<bf16>, index, index, index, index, index
      %p = memref.extract_aligned_pointer_as_index %w : memref<?x?xbf16> -> index {k3.read_only}
      %q = memref.extract_aligned_pointer_as_index %v : memref<?x?xbf16> -> index
      gpu.return
    }
  }
}

// -----

// A kernel that writes a global of its module in global memory (split-K
// counters) starts with `g`; one that writes only workgroup memory, or only
// reads a constant, with `-`. Each kernel of a module gets its own.
// CHECK-LABEL: gpu.module @counted
// CHECK-DAG: llvm.mlir.global external constant @counts_k3_access("g---")
// CHECK-DAG: llvm.mlir.global external constant @shared_k3_access("-rr---")
module attributes {gpu.container_module} {
  gpu.module @counted {
    memref.global "private" @count : memref<16xi32, #gpu.address_space<global>> = dense<0>
    memref.global "private" @ring : memref<16xf32, #gpu.address_space<workgroup>>
    memref.global "private" constant @table : memref<2xf32, #gpu.address_space<global>> = dense<[1.0, 2.0]>
    gpu.func @counts(%i: index, %j: index, %k: index) kernel {
      %one = arith.constant 1 : i32
      %c = memref.get_global @count : memref<16xi32, #gpu.address_space<global>>
      %old = memref.atomic_rmw addi %one, %c[%i] : (i32, memref<16xi32, #gpu.address_space<global>>) -> i32
      gpu.return
    }
    gpu.func @shared(%x: memref<?xf32>) kernel {
      %c0 = arith.constant 0 : index
      %r = memref.get_global @ring : memref<16xf32, #gpu.address_space<workgroup>>
      %t = memref.get_global @table : memref<2xf32, #gpu.address_space<global>>
      %v = memref.load %x[%c0] : memref<?xf32>
      %w = memref.load %t[%c0] : memref<2xf32, #gpu.address_space<global>>
      %s = arith.addf %v, %w : f32
      memref.store %s, %r[%c0] : memref<16xf32, #gpu.address_space<workgroup>>
      gpu.return
    }
  }
}

// -----

// A use this pass cannot follow (a call) counts as a write.
// CHECK-LABEL: gpu.module @calls
// CHECK: llvm.mlir.global external constant @c_k3_access("-ww---")
module attributes {gpu.container_module} {
  gpu.module @calls {
    func.func private @opaque(memref<?xf32>)
    gpu.func @c(%x: memref<?xf32>) kernel {
      func.call @opaque(%x) : (memref<?xf32>) -> ()
      gpu.return
    }
  }
}

// -----

// A kernel with an argument that is neither a memref nor a number (a raw
// pointer) gets no constant: the runtime orders it after every kernel
// before it.
// CHECK-LABEL: gpu.module @raw
// CHECK-NOT: k3_access
module attributes {gpu.container_module} {
  gpu.module @raw {
    gpu.func @r(%p: !llvm.ptr<1>) kernel {
      gpu.return
    }
  }
}
