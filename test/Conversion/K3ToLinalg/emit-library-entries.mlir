// RUN: k3-opt %s --k3-emit-library-entries | FileCheck %s
// RUN: not k3-opt %S/Inputs/no-manifest.mlir --k3-emit-library-entries 2>&1 | FileCheck %s --check-prefix=ERR

// The exported C entry points of the library (docs/ABI.md): the ABI version,
// the manifest, and k3_forward(void **) calling _mlir_ciface_forward with
// one descriptor pointer per argument. The glue is left unoptimized.

// CHECK: llvm.func @forward(%{{.+}}: !llvm.ptr) attributes {passthrough = ["noinline", "optnone"]}
// CHECK: llvm.func @k3_abi_version() -> i32
// CHECK: llvm.mlir.constant(2 : i32) : i32
// CHECK: llvm.mlir.global internal constant @k3_manifest_text("{\22format\22: \22k3c-manifest\22}\00")
// CHECK: llvm.func @k3_manifest_json() -> !llvm.ptr
// CHECK: llvm.mlir.addressof @k3_manifest_text
// CHECK: llvm.func @k3_forward(%[[ARGS:.+]]: !llvm.ptr)
// CHECK: %[[P0:.+]] = llvm.getelementptr %[[ARGS]][0] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr
// CHECK: %[[A0:.+]] = llvm.load %[[P0]] : !llvm.ptr -> !llvm.ptr
// CHECK: %[[P1:.+]] = llvm.getelementptr %[[ARGS]][1] : (!llvm.ptr) -> !llvm.ptr, !llvm.ptr
// CHECK: %[[A1:.+]] = llvm.load %[[P1]] : !llvm.ptr -> !llvm.ptr
// CHECK: llvm.call @_mlir_ciface_forward(%[[A0]], %[[A1]]) : (!llvm.ptr, !llvm.ptr) -> ()
module attributes {k3.manifest = "{\"format\": \"k3c-manifest\"}"} {
  llvm.func @forward(%arg0: !llvm.ptr) {
    llvm.return
  }
  llvm.func @_mlir_ciface_forward(%arg0: !llvm.ptr, %arg1: !llvm.ptr) {
    llvm.return
  }
}

// ERR: error: k3-emit-library-entries needs _mlir_ciface_forward and the k3.manifest attribute
