// RUN: k3-opt %s --split-input-file --verify-diagnostics --k3-group-calls=attn-res=1 | FileCheck %s
// RUN: k3-opt %s --split-input-file --verify-diagnostics --k3-group-calls | FileCheck %s --check-prefix=OFF
// Without `attn-res` (the default) no AttnRes is joined.
// OFF-NOT: attn_res =
// OFF-NOT: @mixer_norm_0

// The calls of @lin with one x (up to casts) in one block become one call
// of @lin_x3 at the first; a weight cast after the first call is cast
// again before it. A call with another x, a weight computed after the
// first call, and a call in another block keep their own calls.
// CHECK-LABEL: func.func @layer
// CHECK-SAME: (%[[X:[^:]+]]: tensor<?x64xbf16>, %[[A:[^:]+]]: tensor<32x64xbf16>, %[[B:[^:]+]]: tensor<16x64xbf16>, %[[C:[^:]+]]: tensor<?x?xbf16>, %[[Y:[^:]+]]: tensor<?x?xbf16>, %[[P:[^:]+]]: i1)
// CHECK: %[[XA:.+]] = tensor.cast %[[X]] : tensor<?x64xbf16> to tensor<?x?xbf16>
// CHECK: %[[WA:.+]] = tensor.cast %[[A]] : tensor<32x64xbf16> to tensor<?x?xbf16>
// CHECK: %[[WB:.+]] = tensor.cast %[[B]] : tensor<16x64xbf16> to tensor<?x?xbf16>
// CHECK: %[[G:.+]]:3 = call @lin_x3(%[[XA]], %[[WA]], %[[WB]], %[[C]])
// CHECK: %[[ALONE:.+]] = call @lin(%[[Y]], %[[C]])
// CHECK: %[[LATE:.+]] = call @lin(%[[XA]], %[[ALONE]])
// CHECK: scf.if %[[P]]
// CHECK: call @lin(%[[XA]], %[[C]])
// CHECK: return %[[G]]#0, %[[G]]#1, %[[G]]#2, %[[ALONE]], %[[LATE]]
// The group: the few-token products in one call (the few function's
// marks), else one call of @many each.
// CHECK: func.func private @few_x3(%[[FX:[^:]+]]: tensor<?x?xbf16>, %[[F1:[^:]+]]: tensor<?x?xbf16>, %[[F2:[^:]+]]: tensor<?x?xbf16>, %[[F3:[^:]+]]: tensor<?x?xbf16>, %[[O1:[^:]+]]: memref<?x?xbf16>, %[[O2:[^:]+]]: memref<?x?xbf16>, %[[O3:[^:]+]]: memref<?x?xbf16>)
// CHECK-SAME: attributes {k3.skinny_matmul = {out = @o}}
// CHECK-NEXT: call @few(%[[FX]], %[[F1]], %[[O1]])
// CHECK-NEXT: call @few(%[[FX]], %[[F2]], %[[O2]])
// CHECK-NEXT: call @few(%[[FX]], %[[F3]], %[[O3]])
// CHECK-NEXT: return
// CHECK: func.func private @lin_x3(%[[GX:[^:]+]]: tensor<?x?xbf16>, %[[G1:[^:]+]]: tensor<?x?xbf16>, %[[G2:[^:]+]]: tensor<?x?xbf16>, %[[G3:[^:]+]]: tensor<?x?xbf16>) -> (tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?x?xbf16>)
// CHECK: %[[T:.+]] = tensor.dim %[[GX]], %c0
// CHECK: %[[N1:.+]] = tensor.dim %[[G1]], %c0
// CHECK: %[[B1:.+]] = memref.alloc(%[[T]], %[[N1]]) : memref<?x?xbf16>
// CHECK: %[[B2:.+]] = memref.alloc
// CHECK: %[[B3:.+]] = memref.alloc
// CHECK: %[[FEW:.+]] = call @few_tokens(%[[T]])
// CHECK: scf.if %[[FEW]] {
// CHECK-NEXT: func.call @few_x3(%[[GX]], %[[G1]], %[[G2]], %[[G3]], %[[B1]], %[[B2]], %[[B3]])
// CHECK-NEXT: } else {
// CHECK-NEXT: func.call @many(%[[GX]], %[[G1]], %[[B1]])
// CHECK-NEXT: func.call @many(%[[GX]], %[[G2]], %[[B2]])
// CHECK-NEXT: func.call @many(%[[GX]], %[[G3]], %[[B3]])
// CHECK: %[[Y1:.+]] = bufferization.to_tensor %[[B1]] restrict
// CHECK: %[[Y2:.+]] = bufferization.to_tensor %[[B2]] restrict
// CHECK: %[[Y3:.+]] = bufferization.to_tensor %[[B3]] restrict
// CHECK: return %[[Y1]], %[[Y2]], %[[Y3]]
func.func private @o(%a: f32) -> bf16 {
  %r = arith.truncf %a : f32 to bf16
  return %r : bf16
}
func.func private @few_tokens(%t: index) -> i1 {
  %c16 = arith.constant 16 : index
  %few = arith.cmpi ult, %t, %c16 : index
  return %few : i1
}
func.func private @few(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %out: memref<?x?xbf16>)
    attributes {k3.skinny_matmul = {out = @o}} {
  return
}
func.func private @many(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %out: memref<?x?xbf16>) {
  return
}
func.func private @lin(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>) -> tensor<?x?xbf16>
    attributes {k3.product_group = {few = @few, many = @many, few_tokens = @few_tokens}} {
  %c0 = arith.constant 0 : index
  %t = tensor.dim %x, %c0 : tensor<?x?xbf16>
  %n = tensor.dim %w, %c0 : tensor<?x?xbf16>
  %out = memref.alloc(%t, %n) : memref<?x?xbf16>
  func.call @few(%x, %w, %out) : (tensor<?x?xbf16>, tensor<?x?xbf16>, memref<?x?xbf16>) -> ()
  %y = bufferization.to_tensor %out restrict : memref<?x?xbf16> to tensor<?x?xbf16>
  return %y : tensor<?x?xbf16>
}
func.func @layer(%x: tensor<?x64xbf16>, %a: tensor<32x64xbf16>, %b: tensor<16x64xbf16>,
                 %c: tensor<?x?xbf16>, %y: tensor<?x?xbf16>, %p: i1)
    -> (tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?x?xbf16>) {
  %xa = tensor.cast %x : tensor<?x64xbf16> to tensor<?x?xbf16>
  %wa = tensor.cast %a : tensor<32x64xbf16> to tensor<?x?xbf16>
  %0 = call @lin(%xa, %wa) : (tensor<?x?xbf16>, tensor<?x?xbf16>) -> tensor<?x?xbf16>
  %1 = call @lin(%y, %c) : (tensor<?x?xbf16>, tensor<?x?xbf16>) -> tensor<?x?xbf16>
  %xb = tensor.cast %x : tensor<?x64xbf16> to tensor<?x?xbf16>
  %wb = tensor.cast %b : tensor<16x64xbf16> to tensor<?x?xbf16>
  %2 = call @lin(%xb, %wb) : (tensor<?x?xbf16>, tensor<?x?xbf16>) -> tensor<?x?xbf16>
  %3 = call @lin(%xa, %1) : (tensor<?x?xbf16>, tensor<?x?xbf16>) -> tensor<?x?xbf16>
  %4 = call @lin(%xa, %c) : (tensor<?x?xbf16>, tensor<?x?xbf16>) -> tensor<?x?xbf16>
  scf.if %p {
    %5 = func.call @lin(%xa, %c) : (tensor<?x?xbf16>, tensor<?x?xbf16>) -> tensor<?x?xbf16>
  }
  return %0, %2, %4, %1, %3 : tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?x?xbf16>
}

// -----

func.func private @few(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %out: memref<?x?xbf16>) {
  return
}
// expected-error @+1 {{k3.product_group: expected {few = @f, many = @m, few_tokens = @p} naming functions}}
func.func private @lin(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>) -> tensor<?x?xbf16>
    attributes {k3.product_group = {few = @few, many = @missing, few_tokens = @few}} {
  return %x : tensor<?x?xbf16>
}

// -----

func.func private @few_tokens(%t: index) -> i1 {
  %true = arith.constant true
  return %true : i1
}
func.func private @few(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %out: memref<?x?xf32>) {
  return
}
// expected-error @+1 {{k3.product_group: 'few' and 'many' must take (x, W, y's buffer) and then the product's other operands}}
func.func private @lin(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>) -> tensor<?x?xbf16>
    attributes {k3.product_group = {few = @few, many = @few, few_tokens = @few_tokens}} {
  return %x : tensor<?x?xbf16>
}

// -----

func.func private @few(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %out: memref<?x?xbf16>) {
  return
}
// expected-error @+1 {{k3.product_group: 'few_tokens' must be (index) -> i1}}
func.func private @lin(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>) -> tensor<?x?xbf16>
    attributes {k3.product_group = {few = @few, many = @few, few_tokens = @few}} {
  return %x : tensor<?x?xbf16>
}

// -----

// A fixed group (`k3.call_group = @conv2`): the calls two at a time, in
// program order, each two one call of @conv2 with their operands one after
// the other, at the first (casts of earlier values cast again there); the
// odd one out keeps its call.
// CHECK-LABEL: func.func @streams
// CHECK-SAME: (%[[A:[^:]+]]: tensor<4xf32>, %[[B:[^:]+]]: tensor<?xf32>, %[[C:[^:]+]]: tensor<?xf32>, %[[M:[^:]+]]: memref<4xf32>)
// CHECK: %[[AC:.+]] = tensor.cast %[[A]] : tensor<4xf32> to tensor<?xf32>
// CHECK: %[[MC:.+]] = memref.cast %[[M]] : memref<4xf32> to memref<?xf32>
// CHECK: %[[MC2:.+]] = memref.cast %[[M]] : memref<4xf32> to memref<?xf32>
// CHECK: %[[G:.+]]:2 = call @conv2(%[[AC]], %[[MC]], %[[B]], %[[MC2]])
// CHECK: %[[ODD:.+]] = call @conv(%[[C]], %{{.+}})
// CHECK: return %[[G]]#0, %[[G]]#1, %[[ODD]]
func.func private @conv(%x: tensor<?xf32>, %m: memref<?xf32>) -> tensor<?xf32>
    attributes {k3.call_group = @conv2} {
  return %x : tensor<?xf32>
}
func.func private @conv2(%x0: tensor<?xf32>, %m0: memref<?xf32>, %x1: tensor<?xf32>, %m1: memref<?xf32>)
    -> (tensor<?xf32>, tensor<?xf32>) {
  return %x0, %x1 : tensor<?xf32>, tensor<?xf32>
}
func.func @streams(%a: tensor<4xf32>, %b: tensor<?xf32>, %c: tensor<?xf32>, %m: memref<4xf32>)
    -> (tensor<?xf32>, tensor<?xf32>, tensor<?xf32>) {
  %ac = tensor.cast %a : tensor<4xf32> to tensor<?xf32>
  %mc = memref.cast %m : memref<4xf32> to memref<?xf32>
  %0 = call @conv(%ac, %mc) : (tensor<?xf32>, memref<?xf32>) -> tensor<?xf32>
  %mc2 = memref.cast %m : memref<4xf32> to memref<?xf32>
  %1 = call @conv(%b, %mc2) : (tensor<?xf32>, memref<?xf32>) -> tensor<?xf32>
  %2 = call @conv(%c, %mc2) : (tensor<?xf32>, memref<?xf32>) -> tensor<?xf32>
  return %0, %1, %2 : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>
}

// -----

// A call that reads the result of the one before starts a new group.
// CHECK-LABEL: func.func @chain
// CHECK: %[[X:.+]] = call @conv(%arg0, %arg1)
// CHECK: %[[G:.+]]:2 = call @conv2(%[[X]], %arg1, %arg0, %arg1)
func.func private @conv(%x: tensor<?xf32>, %m: memref<?xf32>) -> tensor<?xf32>
    attributes {k3.call_group = @conv2} {
  return %x : tensor<?xf32>
}
func.func private @conv2(%x0: tensor<?xf32>, %m0: memref<?xf32>, %x1: tensor<?xf32>, %m1: memref<?xf32>)
    -> (tensor<?xf32>, tensor<?xf32>) {
  return %x0, %x1 : tensor<?xf32>, tensor<?xf32>
}
func.func @chain(%a: tensor<?xf32>, %m: memref<?xf32>) -> (tensor<?xf32>, tensor<?xf32>, tensor<?xf32>) {
  %0 = call @conv(%a, %m) : (tensor<?xf32>, memref<?xf32>) -> tensor<?xf32>
  %1 = call @conv(%0, %m) : (tensor<?xf32>, memref<?xf32>) -> tensor<?xf32>
  %2 = call @conv(%a, %m) : (tensor<?xf32>, memref<?xf32>) -> tensor<?xf32>
  return %0, %1, %2 : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>
}

// -----

// expected-error @+1 {{k3.call_group: expected a function that takes the arguments of n >= 2 calls and returns their results}}
func.func private @conv(%x: tensor<?xf32>) -> tensor<?xf32>
    attributes {k3.call_group = @conv2} {
  return %x : tensor<?xf32>
}
func.func private @conv2(%x0: tensor<?xf32>, %x1: tensor<?xf32>) -> tensor<?xf32> {
  return %x0 : tensor<?xf32>
}

// -----

func.func private @few_tokens(%t: index) -> i1 {
  %true = arith.constant true
  return %true : i1
}
func.func private @few(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %out: memref<?x?xbf16>) {
  return
}
// expected-error @+1 {{k3.product_group: expected (x, W, ...) -> y}}
func.func private @lin(%x: tensor<?x?xbf16>) -> tensor<?x?xbf16>
    attributes {k3.product_group = {few = @few, many = @few, few_tokens = @few_tokens}} {
  return %x : tensor<?x?xbf16>
}

// -----

// A fixed group's calls may update buffers in place: an operation that may
// touch memory between two calls starts a new group.
// CHECK-LABEL: func.func @store_between
// CHECK: call @conv(
// CHECK: memref.store
// CHECK: call @conv2(
func.func private @conv(%x: tensor<?xf32>, %m: memref<?xf32>) -> tensor<?xf32>
    attributes {k3.call_group = @conv2} {
  return %x : tensor<?xf32>
}
func.func private @conv2(%x0: tensor<?xf32>, %m0: memref<?xf32>, %x1: tensor<?xf32>, %m1: memref<?xf32>)
    -> (tensor<?xf32>, tensor<?xf32>) {
  return %x0, %x1 : tensor<?xf32>, tensor<?xf32>
}
func.func @store_between(%a: tensor<?xf32>, %m: memref<?xf32>, %v: f32)
    -> (tensor<?xf32>, tensor<?xf32>, tensor<?xf32>) {
  %c0 = arith.constant 0 : index
  %0 = call @conv(%a, %m) : (tensor<?xf32>, memref<?xf32>) -> tensor<?xf32>
  memref.store %v, %m[%c0] : memref<?xf32>
  %1 = call @conv(%a, %m) : (tensor<?xf32>, memref<?xf32>) -> tensor<?xf32>
  %2 = call @conv(%a, %m) : (tensor<?xf32>, memref<?xf32>) -> tensor<?xf32>
  return %0, %1, %2 : tensor<?xf32>, tensor<?xf32>, tensor<?xf32>
}

// -----

// Different products of one x (the same few-token predicate) are one group,
// in call order: @acc_x1_lin_x2, whose few-token function carries the
// members' marks with the entries that differ as arrays, one per matrix
// (`out = [@s, @o, @o]`), and whose results have each member's type. A
// product with another few-token predicate keeps its own call.
// CHECK-LABEL: func.func @mixed
// CHECK: %[[G:.+]]:3 = call @acc_x1_lin_x2(%arg0, %arg1, %arg2, %arg3) : (tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?x?xbf16>) -> (tensor<?x?xf32>, tensor<?x?xbf16>, tensor<?x?xbf16>)
// CHECK: %[[OTHER:.+]] = call @other(%arg0, %arg1)
// CHECK: return %[[G]]#0, %[[G]]#1, %[[G]]#2, %[[OTHER]]
// CHECK: func.func private @accfew_x1_few_x2(%{{.+}}: tensor<?x?xbf16>, %{{.+}}: tensor<?x?xbf16>, %{{.+}}: tensor<?x?xbf16>, %{{.+}}: tensor<?x?xbf16>, %{{.+}}: memref<?x?xf32>, %{{.+}}: memref<?x?xbf16>, %{{.+}}: memref<?x?xbf16>)
// CHECK-SAME: attributes {k3.skinny_matmul = {out = [@s, @o, @o]}}
// CHECK-NEXT: call @accfew(
// CHECK-NEXT: call @few(
// CHECK-NEXT: call @few(
// CHECK: func.func private @acc_x1_lin_x2(
// CHECK: memref.alloc({{.+}}) : memref<?x?xf32>
// CHECK: memref.alloc({{.+}}) : memref<?x?xbf16>
// CHECK: memref.alloc({{.+}}) : memref<?x?xbf16>
// CHECK: func.call @accfew_x1_few_x2(
// CHECK: } else {
// CHECK-NEXT: func.call @accmany(
// CHECK-NEXT: func.call @many(
// CHECK-NEXT: func.call @many(
func.func private @o(%a: f32) -> bf16 {
  %r = arith.truncf %a : f32 to bf16
  return %r : bf16
}
func.func private @s(%a: f32) -> f32 {
  return %a : f32
}
func.func private @few_tokens(%t: index) -> i1 {
  %c16 = arith.constant 16 : index
  %few = arith.cmpi ult, %t, %c16 : index
  return %few : i1
}
func.func private @few_tokens8(%t: index) -> i1 {
  %c8 = arith.constant 8 : index
  %few = arith.cmpi ult, %t, %c8 : index
  return %few : i1
}
func.func private @few(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %out: memref<?x?xbf16>)
    attributes {k3.skinny_matmul = {out = @o}} {
  return
}
func.func private @many(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %out: memref<?x?xbf16>) {
  return
}
func.func private @accfew(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %out: memref<?x?xf32>)
    attributes {k3.skinny_matmul = {out = @s}} {
  return
}
func.func private @accmany(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %out: memref<?x?xf32>) {
  return
}
func.func private @lin(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>) -> tensor<?x?xbf16>
    attributes {k3.product_group = {few = @few, many = @many, few_tokens = @few_tokens}} {
  return %x : tensor<?x?xbf16>
}
func.func private @acc(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>) -> tensor<?x?xf32>
    attributes {k3.product_group = {few = @accfew, many = @accmany, few_tokens = @few_tokens}} {
  %c0 = arith.constant 0 : index
  %t = tensor.dim %x, %c0 : tensor<?x?xbf16>
  %out = memref.alloc(%t, %t) : memref<?x?xf32>
  %y = bufferization.to_tensor %out restrict : memref<?x?xf32> to tensor<?x?xf32>
  return %y : tensor<?x?xf32>
}
func.func private @other(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>) -> tensor<?x?xbf16>
    attributes {k3.product_group = {few = @few, many = @many, few_tokens = @few_tokens8}} {
  return %x : tensor<?x?xbf16>
}
func.func @mixed(%x: tensor<?x?xbf16>, %r: tensor<?x?xbf16>, %a: tensor<?x?xbf16>, %b: tensor<?x?xbf16>)
    -> (tensor<?x?xf32>, tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?x?xbf16>) {
  %0 = call @acc(%x, %r) : (tensor<?x?xbf16>, tensor<?x?xbf16>) -> tensor<?x?xf32>
  %1 = call @lin(%x, %a) : (tensor<?x?xbf16>, tensor<?x?xbf16>) -> tensor<?x?xbf16>
  %2 = call @other(%x, %r) : (tensor<?x?xbf16>, tensor<?x?xbf16>) -> tensor<?x?xbf16>
  %3 = call @lin(%x, %b) : (tensor<?x?xbf16>, tensor<?x?xbf16>) -> tensor<?x?xbf16>
  return %0, %1, %3, %2 : tensor<?x?xf32>, tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?x?xbf16>
}

// -----

// Products whose few-token functions carry different marks are not
// grouped (their kernels could not be one).
// CHECK-LABEL: func.func @unmergeable
// CHECK: call @lin(
// CHECK: call @plain(
func.func private @o(%a: f32) -> bf16 {
  %r = arith.truncf %a : f32 to bf16
  return %r : bf16
}
func.func private @few_tokens(%t: index) -> i1 {
  %c16 = arith.constant 16 : index
  %few = arith.cmpi ult, %t, %c16 : index
  return %few : i1
}
func.func private @few(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %out: memref<?x?xbf16>)
    attributes {k3.skinny_matmul = {out = @o}} {
  return
}
func.func private @plainfew(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %out: memref<?x?xbf16>) {
  return
}
func.func private @lin(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>) -> tensor<?x?xbf16>
    attributes {k3.product_group = {few = @few, many = @few, few_tokens = @few_tokens}} {
  return %x : tensor<?x?xbf16>
}
func.func private @plain(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>) -> tensor<?x?xbf16>
    attributes {k3.product_group = {few = @plainfew, many = @plainfew, few_tokens = @few_tokens}} {
  return %x : tensor<?x?xbf16>
}
func.func @unmergeable(%x: tensor<?x?xbf16>, %a: tensor<?x?xbf16>, %b: tensor<?x?xbf16>)
    -> (tensor<?x?xbf16>, tensor<?x?xbf16>) {
  %0 = call @lin(%x, %a) : (tensor<?x?xbf16>, tensor<?x?xbf16>) -> tensor<?x?xbf16>
  %1 = call @plain(%x, %b) : (tensor<?x?xbf16>, tensor<?x?xbf16>) -> tensor<?x?xbf16>
  return %0, %1 : tensor<?x?xbf16>, tensor<?x?xbf16>
}

// -----

// A product with operands after (x, W) (the router's routing operands)
// joins the others of its x: the group takes them after the matrices'
// operands in call order, the few function after the outputs, and each
// member's few and many call gets its own. A mark entry that only one
// member has (`route`) becomes an array with `false` for the others. A
// call whose extra operand is made after the first call keeps its own.
// CHECK-LABEL: func.func @routed_front
// CHECK-SAME: (%[[X:[^:]+]]: tensor<?x?xbf16>, %[[R:[^:]+]]: tensor<?x?xbf16>, %[[A:[^:]+]]: tensor<?x?xbf16>, %[[B:[^:]+]]: tensor<?xf32>, %[[N:[^:]+]]: i1, %[[S:[^:]+]]: f32, %[[I:[^:]+]]: memref<?x?xi64>, %[[W:[^:]+]]: memref<?x?xf32>)
// CHECK: %[[G:.+]]:2 = call @route_x1_lin_x1(%[[X]], %[[R]], %[[B]], %[[N]], %[[S]], %[[I]], %[[W]], %[[A]])
// CHECK: %[[LATE:.+]] = memref.alloc
// CHECK: call @route(%[[X]], %[[R]], %[[B]], %[[N]], %[[S]], %[[LATE]], %[[W]])
// CHECK: func.func private @rfew_x1_few_x1(%[[FX:[^:]+]]: tensor<?x?xbf16>, %[[F1:[^:]+]]: tensor<?x?xbf16>, %[[F2:[^:]+]]: tensor<?x?xbf16>, %[[O1:[^:]+]]: memref<?x?xf32>, %[[O2:[^:]+]]: memref<?x?xbf16>, %[[FB:[^:]+]]: tensor<?xf32>, %[[FN:[^:]+]]: i1, %[[FS:[^:]+]]: f32, %[[FI:[^:]+]]: memref<?x?xi64>, %[[FW:[^:]+]]: memref<?x?xf32>)
// CHECK-SAME: attributes {k3.skinny_matmul = {out = [@s, @o], route = [true, false]}}
// CHECK-NEXT: call @rfew(%[[FX]], %[[F1]], %[[O1]], %[[FB]], %[[FN]], %[[FS]], %[[FI]], %[[FW]])
// CHECK-NEXT: call @few(%[[FX]], %[[F2]], %[[O2]])
// CHECK: func.func private @route_x1_lin_x1(%[[GX:[^:]+]]: tensor<?x?xbf16>, %[[G1:[^:]+]]: tensor<?x?xbf16>, %[[GB:[^:]+]]: tensor<?xf32>, %[[GN:[^:]+]]: i1, %[[GS:[^:]+]]: f32, %[[GI:[^:]+]]: memref<?x?xi64>, %[[GW:[^:]+]]: memref<?x?xf32>, %[[G2:[^:]+]]: tensor<?x?xbf16>) -> (tensor<?x?xf32>, tensor<?x?xbf16>)
// CHECK: %[[B1:.+]] = memref.alloc({{.+}}) : memref<?x?xf32>
// CHECK: %[[B2:.+]] = memref.alloc({{.+}}) : memref<?x?xbf16>
// CHECK: func.call @rfew_x1_few_x1(%[[GX]], %[[G1]], %[[G2]], %[[B1]], %[[B2]], %[[GB]], %[[GN]], %[[GS]], %[[GI]], %[[GW]])
// CHECK: } else {
// CHECK-NEXT: func.call @rmany(%[[GX]], %[[G1]], %[[B1]], %[[GB]], %[[GN]], %[[GS]], %[[GI]], %[[GW]])
// CHECK-NEXT: func.call @many(%[[GX]], %[[G2]], %[[B2]])
func.func private @o(%a: f32) -> bf16 {
  %r = arith.truncf %a : f32 to bf16
  return %r : bf16
}
func.func private @s(%a: f32) -> f32 {
  return %a : f32
}
func.func private @few_tokens(%t: index) -> i1 {
  %c16 = arith.constant 16 : index
  %few = arith.cmpi ult, %t, %c16 : index
  return %few : i1
}
func.func private @few(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %out: memref<?x?xbf16>)
    attributes {k3.skinny_matmul = {out = @o}} {
  return
}
func.func private @many(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %out: memref<?x?xbf16>) {
  return
}
func.func private @rfew(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %out: memref<?x?xf32>, %bias: tensor<?xf32>,
                        %renorm: i1, %scaling: f32, %idx: memref<?x?xi64>, %wts: memref<?x?xf32>)
    attributes {k3.skinny_matmul = {out = @s, route = true}} {
  return
}
func.func private @rmany(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %out: memref<?x?xf32>, %bias: tensor<?xf32>,
                         %renorm: i1, %scaling: f32, %idx: memref<?x?xi64>, %wts: memref<?x?xf32>) {
  return
}
func.func private @lin(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>) -> tensor<?x?xbf16>
    attributes {k3.product_group = {few = @few, many = @many, few_tokens = @few_tokens}} {
  return %x : tensor<?x?xbf16>
}
func.func private @route(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %bias: tensor<?xf32>, %renorm: i1, %scaling: f32,
                         %idx: memref<?x?xi64>, %wts: memref<?x?xf32>) -> tensor<?x?xf32>
    attributes {k3.product_group = {few = @rfew, many = @rmany, few_tokens = @few_tokens}} {
  %c0 = arith.constant 0 : index
  %t = tensor.dim %x, %c0 : tensor<?x?xbf16>
  %out = memref.alloc(%t, %t) : memref<?x?xf32>
  %y = bufferization.to_tensor %out restrict : memref<?x?xf32> to tensor<?x?xf32>
  return %y : tensor<?x?xf32>
}
func.func @routed_front(%x: tensor<?x?xbf16>, %r: tensor<?x?xbf16>, %a: tensor<?x?xbf16>, %bias: tensor<?xf32>,
                        %renorm: i1, %scaling: f32, %idx: memref<?x?xi64>, %wts: memref<?x?xf32>)
    -> (tensor<?x?xf32>, tensor<?x?xbf16>, tensor<?x?xf32>) {
  %0 = call @route(%x, %r, %bias, %renorm, %scaling, %idx, %wts)
      : (tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xf32>, i1, f32, memref<?x?xi64>, memref<?x?xf32>) -> tensor<?x?xf32>
  %1 = call @lin(%x, %a) : (tensor<?x?xbf16>, tensor<?x?xbf16>) -> tensor<?x?xbf16>
  %c2 = arith.constant 2 : index
  %late = memref.alloc(%c2, %c2) : memref<?x?xi64>
  %2 = call @route(%x, %r, %bias, %renorm, %scaling, %late, %wts)
      : (tensor<?x?xbf16>, tensor<?x?xbf16>, tensor<?xf32>, i1, f32, memref<?x?xi64>, memref<?x?xf32>) -> tensor<?x?xf32>
  return %0, %1, %2 : tensor<?x?xf32>, tensor<?x?xbf16>, tensor<?x?xf32>
}

// -----

// Only a flag that some members lack defaults to false: a mark entry of
// another kind (here a unit `addend`) that one member lacks leaves the
// products ungrouped.
// CHECK-LABEL: func.func @entry_not_a_flag
// CHECK: call @lin(
// CHECK: call @other(
// CHECK-NOT: _x1_
func.func private @o(%a: f32) -> bf16 {
  %r = arith.truncf %a : f32 to bf16
  return %r : bf16
}
func.func private @few_tokens(%t: index) -> i1 {
  %c16 = arith.constant 16 : index
  %few = arith.cmpi ult, %t, %c16 : index
  return %few : i1
}
func.func private @few(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %out: memref<?x?xbf16>)
    attributes {k3.skinny_matmul = {out = @o}} {
  return
}
func.func private @ofew(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %out: memref<?x?xbf16>)
    attributes {k3.skinny_matmul = {out = @o, addend}} {
  return
}
func.func private @lin(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>) -> tensor<?x?xbf16>
    attributes {k3.product_group = {few = @few, many = @few, few_tokens = @few_tokens}} {
  return %x : tensor<?x?xbf16>
}
func.func private @other(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>) -> tensor<?x?xbf16>
    attributes {k3.product_group = {few = @ofew, many = @ofew, few_tokens = @few_tokens}} {
  return %x : tensor<?x?xbf16>
}
func.func @entry_not_a_flag(%x: tensor<?x?xbf16>, %a: tensor<?x?xbf16>, %b: tensor<?x?xbf16>)
    -> (tensor<?x?xbf16>, tensor<?x?xbf16>) {
  %0 = call @lin(%x, %a) : (tensor<?x?xbf16>, tensor<?x?xbf16>) -> tensor<?x?xbf16>
  %1 = call @other(%x, %b) : (tensor<?x?xbf16>, tensor<?x?xbf16>) -> tensor<?x?xbf16>
  return %0, %1 : tensor<?x?xbf16>, tensor<?x?xbf16>
}

// -----

// An AttnRes with its norm (`k3.into = @rows`) whose output a layer
// function passes to its products only: the entry point calls a copy of
// the layer that takes the AttnRes operands instead of x, and there the
// AttnRes and the grouped products are one call. Few tokens: one call of
// @rows_few_x2 (the products' marks and `attn_res`: @rows's, not
// residual) on x's buffer; else @rows into it, then the products. A dim of
// x is taken from the last candidate [1, T, D] instead.
// CHECK-LABEL: func.func @entry
// CHECK-SAME: (%[[V:[^:]+]]: tensor<?x?x?xbf16>, %[[L:[^:]+]]: tensor<?x?x?xbf16>, %[[G:[^:]+]]: tensor<?xbf16>, %[[P:[^:]+]]: tensor<?x?xbf16>, %[[GN:[^:]+]]: tensor<?xbf16>, %[[A:[^:]+]]: tensor<32x64xbf16>, %[[B:[^:]+]]: tensor<16x64xbf16>)
// CHECK-NOT: call @norm(
// CHECK: %[[T:.+]] = tensor.dim %[[L]], %c1
// CHECK: %[[R:.+]]:2 = call @mixer_norm_0(%[[V]], %[[L]], %[[G]], %[[P]], %[[EPS:[^,]+]], %[[GN]], %[[EPS]], %[[A]], %[[B]]) {k3.layer = 3 : i64}
// CHECK: return %[[R]]#0, %[[R]]#1, %[[T]]
// CHECK: func.func private @mixer_norm_0(%[[MV:[^:]+]]: tensor<?x?x?xbf16>, %[[ML:[^:]+]]: tensor<?x?x?xbf16>, %[[MG:[^:]+]]: tensor<?xbf16>, %[[MP:[^:]+]]: tensor<?x?xbf16>, %[[ME:[^:]+]]: f32, %[[MGN:[^:]+]]: tensor<?xbf16>, %[[ME2:[^:]+]]: f32, %[[MA:[^:]+]]: tensor<32x64xbf16>, %[[MB:[^:]+]]: tensor<16x64xbf16>)
// CHECK-NOT: call @norm(
// CHECK: %[[WA:.+]] = tensor.cast %[[MA]]
// CHECK: %[[WB:.+]] = tensor.cast %[[MB]]
// CHECK: %[[J:.+]]:2 = call @norm_lin_x2(%[[MV]], %[[ML]], %[[MG]], %[[MP]], %[[ME]], %[[MGN]], %[[ME2]], %[[WA]], %[[WB]])
// CHECK: return %[[J]]#0, %[[J]]#1
// CHECK: func.func private @rows_few_x2(%[[FX:[^:]+]]: memref<?x?xbf16>, %[[F1:[^:]+]]: tensor<?x?xbf16>, %[[F2:[^:]+]]: tensor<?x?xbf16>, %[[O1:[^:]+]]: memref<?x?xbf16>, %[[O2:[^:]+]]: memref<?x?xbf16>, %[[FV:[^:]+]]: tensor<?x?x?xbf16>, %[[FL:[^:]+]]: tensor<?x?x?xbf16>, %[[FG:[^:]+]]: tensor<?xbf16>, %[[FP:[^:]+]]: tensor<?x?xbf16>, %[[FE:[^:]+]]: f32, %[[FGN:[^:]+]]: tensor<?xbf16>, %[[FE2:[^:]+]]: f32)
// CHECK-SAME: attributes {k3.skinny_matmul = {attn_res = {narrow = @narrow, residual = false, round = @round, widen = @widen}, out = @o}}
// CHECK-NEXT: call @rows(%[[FV]], %[[FL]], %[[FG]], %[[FP]], %[[FE]], %[[FGN]], %[[FE2]], %[[FX]])
// CHECK-NEXT: %[[FXT:.+]] = bufferization.to_tensor %[[FX]] restrict
// CHECK-NEXT: call @few_x2(%[[FXT]], %[[F1]], %[[F2]], %[[O1]], %[[O2]])
// CHECK: func.func private @norm_lin_x2(%[[NV:[^:]+]]: tensor<?x?x?xbf16>, %[[NL:[^:]+]]: tensor<?x?x?xbf16>, %{{.+}}: tensor<?xbf16>, %{{.+}}: tensor<?x?xbf16>, %{{.+}}: f32, %{{.+}}: tensor<?xbf16>, %{{.+}}: f32, %[[N1:[^:]+]]: tensor<?x?xbf16>, %[[N2:[^:]+]]: tensor<?x?xbf16>) -> (tensor<?x?xbf16>, tensor<?x?xbf16>)
// CHECK: %[[NT:.+]] = tensor.dim %[[NL]], %c1
// CHECK: %[[ND:.+]] = tensor.dim %[[NL]], %c2
// CHECK: %[[XB:.+]] = memref.alloc(%[[NT]], %[[ND]]) : memref<?x?xbf16>
// CHECK: %[[B1:.+]] = memref.alloc(%[[NT]], %{{.+}}) : memref<?x?xbf16>
// CHECK: %[[B2:.+]] = memref.alloc(%[[NT]], %{{.+}}) : memref<?x?xbf16>
// CHECK: %[[FEW:.+]] = call @few_tokens(%[[NT]])
// CHECK: scf.if %[[FEW]] {
// CHECK-NEXT: func.call @rows_few_x2(%[[XB]], %[[N1]], %[[N2]], %[[B1]], %[[B2]], %[[NV]], %[[NL]],
// CHECK-NEXT: } else {
// CHECK-NEXT: func.call @rows(%[[NV]], %[[NL]], {{.*}}, %[[XB]])
// CHECK-NEXT: %[[XT:.+]] = bufferization.to_tensor %[[XB]] restrict
// CHECK-NEXT: func.call @many(%[[XT]], %[[N1]], %[[B1]])
// CHECK-NEXT: func.call @many(%[[XT]], %[[N2]], %[[B2]])
func.func private @o(%a: f32) -> bf16 {
  %r = arith.truncf %a : f32 to bf16
  return %r : bf16
}
func.func private @widen(%a: bf16) -> f32
func.func private @narrow(%a: f32) -> bf16
func.func private @round(%a: f32) -> f32
func.func private @few_tokens(%t: index) -> i1 {
  %c16 = arith.constant 16 : index
  %few = arith.cmpi ult, %t, %c16 : index
  return %few : i1
}
func.func private @few(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %out: memref<?x?xbf16>)
    attributes {k3.skinny_matmul = {out = @o}} {
  return
}
func.func private @many(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %out: memref<?x?xbf16>) {
  return
}
func.func private @lin(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>) -> tensor<?x?xbf16>
    attributes {k3.product_group = {few = @few, many = @many, few_tokens = @few_tokens}} {
  return %x : tensor<?x?xbf16>
}
func.func private @rows(%v: tensor<?x?x?xbf16>, %last: tensor<?x?x?xbf16>, %g: tensor<?xbf16>, %p: tensor<?x?xbf16>,
                        %eps: f32, %gn: tensor<?xbf16>, %eps2: f32, %out: memref<?x?xbf16>)
    attributes {k3.attn_res_norm = {widen = @widen, narrow = @narrow, round = @round}} {
  return
}
func.func private @norm(%v: tensor<?x?x?xbf16>, %last: tensor<?x?x?xbf16>, %g: tensor<?xbf16>, %p: tensor<?x?xbf16>,
                        %eps: f32, %gn: tensor<?xbf16>, %eps2: f32) -> tensor<?x?xbf16>
    attributes {k3.into = @rows} {
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %t = tensor.dim %last, %c1 : tensor<?x?x?xbf16>
  %d = tensor.dim %last, %c2 : tensor<?x?x?xbf16>
  %out = memref.alloc(%t, %d) : memref<?x?xbf16>
  call @rows(%v, %last, %g, %p, %eps, %gn, %eps2, %out)
      : (tensor<?x?x?xbf16>, tensor<?x?x?xbf16>, tensor<?xbf16>, tensor<?x?xbf16>, f32, tensor<?xbf16>, f32, memref<?x?xbf16>) -> ()
  %y = bufferization.to_tensor %out restrict : memref<?x?xbf16> to tensor<?x?xbf16>
  return %y : tensor<?x?xbf16>
}
func.func private @mixer(%x: tensor<?x64xbf16>, %a: tensor<32x64xbf16>, %b: tensor<16x64xbf16>)
    -> (tensor<?x?xbf16>, tensor<?x?xbf16>) {
  %xa = tensor.cast %x : tensor<?x64xbf16> to tensor<?x?xbf16>
  %wa = tensor.cast %a : tensor<32x64xbf16> to tensor<?x?xbf16>
  %wb = tensor.cast %b : tensor<16x64xbf16> to tensor<?x?xbf16>
  %0 = call @lin(%xa, %wa) : (tensor<?x?xbf16>, tensor<?x?xbf16>) -> tensor<?x?xbf16>
  %1 = call @lin(%xa, %wb) : (tensor<?x?xbf16>, tensor<?x?xbf16>) -> tensor<?x?xbf16>
  return %0, %1 : tensor<?x?xbf16>, tensor<?x?xbf16>
}
func.func @entry(%v: tensor<?x?x?xbf16>, %last: tensor<?x?x?xbf16>, %g: tensor<?xbf16>, %p: tensor<?x?xbf16>,
                 %gn: tensor<?xbf16>, %a: tensor<32x64xbf16>, %b: tensor<16x64xbf16>)
    -> (tensor<?x?xbf16>, tensor<?x?xbf16>, index) {
  %c0 = arith.constant 0 : index
  %eps = arith.constant 1.0e-06 : f32
  %x = call @norm(%v, %last, %g, %p, %eps, %gn, %eps)
      : (tensor<?x?x?xbf16>, tensor<?x?x?xbf16>, tensor<?xbf16>, tensor<?x?xbf16>, f32, tensor<?xbf16>, f32) -> tensor<?x?xbf16>
  %t = tensor.dim %x, %c0 : tensor<?x?xbf16>
  %xc = tensor.cast %x : tensor<?x?xbf16> to tensor<?x64xbf16>
  %r:2 = call @mixer(%xc, %a, %b) {k3.layer = 3 : i64} : (tensor<?x64xbf16>, tensor<32x64xbf16>, tensor<16x64xbf16>) -> (tensor<?x?xbf16>, tensor<?x?xbf16>)
  return %r#0, %r#1, %t : tensor<?x?xbf16>, tensor<?x?xbf16>, index
}

// -----

// With the residual sum (@norm_add -> (x, sum), into @rows_add): the copy
// of the layer returns the sum last, and the sum's reshape between the
// AttnRes and the layer's call moves after the call. One product: its own
// few function, `residual = true`, the sum's buffer last.
// CHECK-LABEL: func.func @entry_residual
// CHECK: %[[R:.+]]:2 = call @mixer_one_norm_add_0(
// CHECK-NEXT: %[[S:.+]] = tensor.collapse_shape %[[R]]#1
// CHECK: return %[[R]]#0, %[[S]]
// CHECK: func.func private @mixer_one_norm_add_0(
// CHECK: %[[J:.+]]:2 = call @norm_add_lin(
// CHECK: return %[[J]]#0, %[[J]]#1 : tensor<?x?xbf16>, tensor<?x?x?xbf16>
// CHECK: func.func private @rows_add_few(%[[FX:[^:]+]]: memref<?x?xbf16>, %{{.+}}: tensor<?x?xbf16>, %{{.+}}: memref<?x?xbf16>, %[[FV:[^:]+]]: tensor<?x?x?xbf16>, %[[FA:[^:]+]]: tensor<?x?x?xbf16>, %[[FB:[^:]+]]: tensor<?x?x?xbf16>, %{{.+}}: tensor<?xbf16>, %{{.+}}: tensor<?x?xbf16>, %{{.+}}: f32, %{{.+}}: tensor<?xbf16>, %{{.+}}: f32, %[[FS:[^:]+]]: memref<?x?x?xbf16>)
// CHECK-SAME: attn_res = {narrow = @narrow, residual = true, round = @round, widen = @widen}
// CHECK-NEXT: call @rows_add(%[[FV]], %[[FA]], %[[FB]], {{.*}}, %[[FX]], %[[FS]])
// CHECK: func.func private @norm_add_lin({{.*}}) -> (tensor<?x?xbf16>, tensor<?x?x?xbf16>)
// CHECK: %[[SB:.+]] = memref.alloc(%c1{{[_0-9]*}}, %{{.+}}, %{{.+}}) : memref<?x?x?xbf16>
// CHECK: func.call @rows_add_few({{.*}}, %[[SB]])
// CHECK: func.call @rows_add({{.*}}, %[[SB]])
// CHECK: %[[SUM:.+]] = bufferization.to_tensor %[[SB]] restrict
// CHECK: return %{{.+}}, %[[SUM]]
func.func private @o(%a: f32) -> bf16 {
  %r = arith.truncf %a : f32 to bf16
  return %r : bf16
}
func.func private @widen(%a: bf16) -> f32
func.func private @narrow(%a: f32) -> bf16
func.func private @round(%a: f32) -> f32
func.func private @few_tokens(%t: index) -> i1 {
  %c16 = arith.constant 16 : index
  %few = arith.cmpi ult, %t, %c16 : index
  return %few : i1
}
func.func private @few(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %out: memref<?x?xbf16>)
    attributes {k3.skinny_matmul = {out = @o}} {
  return
}
func.func private @many(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %out: memref<?x?xbf16>) {
  return
}
func.func private @lin(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>) -> tensor<?x?xbf16>
    attributes {k3.product_group = {few = @few, many = @many, few_tokens = @few_tokens}} {
  return %x : tensor<?x?xbf16>
}
func.func private @rows_add(%v: tensor<?x?x?xbf16>, %a: tensor<?x?x?xbf16>, %b: tensor<?x?x?xbf16>, %g: tensor<?xbf16>,
                            %p: tensor<?x?xbf16>, %eps: f32, %gn: tensor<?xbf16>, %eps2: f32,
                            %out: memref<?x?xbf16>, %sum: memref<?x?x?xbf16>)
    attributes {k3.attn_res_norm = {widen = @widen, narrow = @narrow, round = @round}} {
  return
}
func.func private @norm_add(%v: tensor<?x?x?xbf16>, %a: tensor<?x?x?xbf16>, %b: tensor<?x?x?xbf16>, %g: tensor<?xbf16>,
                            %p: tensor<?x?xbf16>, %eps: f32, %gn: tensor<?xbf16>, %eps2: f32)
    -> (tensor<?x?xbf16>, tensor<?x?x?xbf16>) attributes {k3.into = @rows_add} {
  %y = tensor.empty() : tensor<1x1xbf16>
  %s = tensor.empty() : tensor<1x1x1xbf16>
  %yc = tensor.cast %y : tensor<1x1xbf16> to tensor<?x?xbf16>
  %sc = tensor.cast %s : tensor<1x1x1xbf16> to tensor<?x?x?xbf16>
  return %yc, %sc : tensor<?x?xbf16>, tensor<?x?x?xbf16>
}
func.func private @mixer_one(%x: tensor<?x?xbf16>, %a: tensor<?x?xbf16>) -> tensor<?x?xbf16> {
  %0 = call @lin(%x, %a) : (tensor<?x?xbf16>, tensor<?x?xbf16>) -> tensor<?x?xbf16>
  return %0 : tensor<?x?xbf16>
}
func.func @entry_residual(%v: tensor<?x?x?xbf16>, %a: tensor<?x?x?xbf16>, %b: tensor<?x?x?xbf16>, %g: tensor<?xbf16>,
                          %p: tensor<?x?xbf16>, %gn: tensor<?xbf16>, %w: tensor<?x?xbf16>)
    -> (tensor<?x?xbf16>, tensor<?x?xbf16>) {
  %eps = arith.constant 1.0e-06 : f32
  %x:2 = call @norm_add(%v, %a, %b, %g, %p, %eps, %gn, %eps)
      : (tensor<?x?x?xbf16>, tensor<?x?x?xbf16>, tensor<?x?x?xbf16>, tensor<?xbf16>, tensor<?x?xbf16>, f32, tensor<?xbf16>, f32)
      -> (tensor<?x?xbf16>, tensor<?x?x?xbf16>)
  %s = tensor.collapse_shape %x#1 [[0, 1], [2]] : tensor<?x?x?xbf16> into tensor<?x?xbf16>
  %r = call @mixer_one(%x#0, %w) : (tensor<?x?xbf16>, tensor<?x?xbf16>) -> tensor<?x?xbf16>
  return %r, %s : tensor<?x?xbf16>, tensor<?x?xbf16>
}

// -----

// An AttnRes output that something else reads too stays apart.
// CHECK-LABEL: func.func @entry_shared
// CHECK: %[[X:.+]] = call @norm(
// CHECK: call @mixer_one(%[[X]],
// CHECK: return %{{.+}}, %[[X]]
func.func private @o(%a: f32) -> bf16 {
  %r = arith.truncf %a : f32 to bf16
  return %r : bf16
}
func.func private @few_tokens(%t: index) -> i1 {
  %c16 = arith.constant 16 : index
  %few = arith.cmpi ult, %t, %c16 : index
  return %few : i1
}
func.func private @few(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>, %out: memref<?x?xbf16>)
    attributes {k3.skinny_matmul = {out = @o}} {
  return
}
func.func private @lin(%x: tensor<?x?xbf16>, %w: tensor<?x?xbf16>) -> tensor<?x?xbf16>
    attributes {k3.product_group = {few = @few, many = @few, few_tokens = @few_tokens}} {
  return %x : tensor<?x?xbf16>
}
func.func private @rows(%v: tensor<?x?x?xbf16>, %last: tensor<?x?x?xbf16>, %out: memref<?x?xbf16>)
    attributes {k3.attn_res_norm = {}} {
  return
}
func.func private @norm(%v: tensor<?x?x?xbf16>, %last: tensor<?x?x?xbf16>) -> tensor<?x?xbf16>
    attributes {k3.into = @rows} {
  %y = tensor.empty() : tensor<1x1xbf16>
  %yc = tensor.cast %y : tensor<1x1xbf16> to tensor<?x?xbf16>
  return %yc : tensor<?x?xbf16>
}
func.func private @mixer_one(%x: tensor<?x?xbf16>, %a: tensor<?x?xbf16>) -> tensor<?x?xbf16> {
  %0 = call @lin(%x, %a) : (tensor<?x?xbf16>, tensor<?x?xbf16>) -> tensor<?x?xbf16>
  return %0 : tensor<?x?xbf16>
}
func.func @entry_shared(%v: tensor<?x?x?xbf16>, %last: tensor<?x?x?xbf16>, %w: tensor<?x?xbf16>)
    -> (tensor<?x?xbf16>, tensor<?x?xbf16>) {
  %x = call @norm(%v, %last) : (tensor<?x?x?xbf16>, tensor<?x?x?xbf16>) -> tensor<?x?xbf16>
  %r = call @mixer_one(%x, %w) : (tensor<?x?xbf16>, tensor<?x?xbf16>) -> tensor<?x?xbf16>
  return %r, %x : tensor<?x?xbf16>, tensor<?x?xbf16>
}
