//===- K3.h - the k3 dialect, its types, attributes and ops -----*- C++ -*-===//
//
// Include this to use the k3 dialect.
//
//===----------------------------------------------------------------------===//

#ifndef K3_DIALECT_K3_IR_K3_H
#define K3_DIALECT_K3_IR_K3_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "k3/Dialect/K3/IR/K3Enums.h.inc"

#include "k3/Dialect/K3/IR/K3Dialect.h.inc"

#define GET_ATTRDEF_CLASSES
#include "k3/Dialect/K3/IR/K3Attrs.h.inc"

#define GET_TYPEDEF_CLASSES
#include "k3/Dialect/K3/IR/K3Types.h.inc"

#define GET_OP_CLASSES
#include "k3/Dialect/K3/IR/K3Ops.h.inc"

#endif // K3_DIALECT_K3_IR_K3_H
