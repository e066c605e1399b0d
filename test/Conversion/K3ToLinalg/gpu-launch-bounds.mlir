// RUN: k3-opt %s --split-input-file --verify-diagnostics --k3-gpu-launch-bounds | FileCheck %s

// The kernel that the function names gets nvvm.minctasm (PTX
// .minnctapersm); another kernel it launches, and the attribute, go
// unchanged and away.
// CHECK-LABEL: func.func @stage
// CHECK-NOT: k3.launch_bounds
// CHECK: gpu.launch_func @stage_mma_kernel::@stage_mma_kernel
// CHECK: gpu.launch_func @stage_kernel::@stage_kernel
// CHECK: gpu.func @stage_mma_kernel() kernel attributes {known_block_size = array<i32: 128, 1, 1>, nvvm.minctasm = 6 : i32}
// CHECK: gpu.func @stage_kernel() kernel attributes {known_block_size = array<i32: 256, 1, 1>}
module attributes {gpu.container_module} {
  func.func @stage(%c: i1) attributes {k3.launch_bounds = {stage_mma_kernel = 6 : i64}} {
    %c1 = arith.constant 1 : index
    %c128 = arith.constant 128 : index
    %c256 = arith.constant 256 : index
    scf.if %c {
      gpu.launch_func @stage_mma_kernel::@stage_mma_kernel blocks in (%c1, %c1, %c1) threads in (%c128, %c1, %c1)
    } else {
      gpu.launch_func @stage_kernel::@stage_kernel blocks in (%c1, %c1, %c1) threads in (%c256, %c1, %c1)
    }
    return
  }
  gpu.module @stage_mma_kernel {
    gpu.func @stage_mma_kernel() kernel attributes {known_block_size = array<i32: 128, 1, 1>} {
      gpu.return
    }
  }
  gpu.module @stage_kernel {
    gpu.func @stage_kernel() kernel attributes {known_block_size = array<i32: 256, 1, 1>} {
      gpu.return
    }
  }
}

// -----

module attributes {gpu.container_module} {
  // expected-error @+1 {{k3.launch_bounds: expected a dictionary {kernel name = blocks per SM}}}
  func.func @f() attributes {k3.launch_bounds = array<i64: 128, 6>} {
    return
  }
}

// -----

module attributes {gpu.container_module} {
  // expected-error @+1 {{k3.launch_bounds: blocks per SM of 'k' must be an integer from 1 to 32}}
  func.func @f() attributes {k3.launch_bounds = {k = 0 : i64}} {
    return
  }
}

// -----

module attributes {gpu.container_module} {
  // expected-error @+1 {{k3.launch_bounds: the function launches no kernel 'other'}}
  func.func @f() attributes {k3.launch_bounds = {other = 6 : i64}} {
    %c1 = arith.constant 1 : index
    gpu.launch_func @k::@k blocks in (%c1, %c1, %c1) threads in (%c1, %c1, %c1)
    return
  }
  gpu.module @k {
    gpu.func @k() kernel {
      gpu.return
    }
  }
}
