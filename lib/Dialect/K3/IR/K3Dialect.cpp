//===- K3Dialect.cpp - the k3 dialect, its types and attributes -----------===//

#include "k3/Dialect/K3/IR/K3.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::k3;

#include "k3/Dialect/K3/IR/K3Dialect.cpp.inc"
#include "k3/Dialect/K3/IR/K3Enums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "k3/Dialect/K3/IR/K3Attrs.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "k3/Dialect/K3/IR/K3Types.cpp.inc"

void K3Dialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "k3/Dialect/K3/IR/K3Ops.cpp.inc"
      >();
  addTypes<
#define GET_TYPEDEF_LIST
#include "k3/Dialect/K3/IR/K3Types.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "k3/Dialect/K3/IR/K3Attrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// Types
//===----------------------------------------------------------------------===//

static bool isStateFloat(Type t) { return t.isBF16() || t.isF16() || t.isF32(); }

LogicalResult
KDAStateType::verify(function_ref<InFlightDiagnostic()> emitError,
                     int64_t heads, int64_t keyDim, int64_t valueDim,
                     Type elementType, KDAStateLayout) {
  if (heads <= 0 || keyDim <= 0 || valueDim <= 0)
    return emitError() << "KDA state needs positive heads, key_dim and "
                          "value_dim, got "
                       << heads << ", " << keyDim << ", " << valueDim;
  if (!isStateFloat(elementType))
    return emitError() << "KDA state element type must be f32, f16 or bf16, got "
                       << elementType;
  return success();
}

LogicalResult ConvStateType::verify(function_ref<InFlightDiagnostic()> emitError,
                                    int64_t channels, int64_t width,
                                    Type elementType) {
  if (channels <= 0)
    return emitError() << "conv state needs positive channels, got " << channels;
  if (width < 0)
    return emitError() << "conv state width (kernel size - 1) must be >= 0, got "
                       << width;
  if (!isStateFloat(elementType))
    return emitError() << "conv state element type must be f32, f16 or bf16, got "
                       << elementType;
  return success();
}

LogicalResult MLACacheType::verify(function_ref<InFlightDiagnostic()> emitError,
                                   int64_t latentDim, int64_t ropeDim,
                                   Type elementType, int64_t pageSize) {
  if (latentDim <= 0 || ropeDim < 0)
    return emitError() << "MLA cache needs latent_dim > 0 and rope_dim >= 0, got "
                       << latentDim << " and " << ropeDim;
  if (pageSize <= 0)
    return emitError() << "MLA cache page_size must be positive, got "
                       << pageSize;
  if (!isStateFloat(elementType))
    return emitError() << "MLA cache element type must be f32, f16 or bf16, got "
                       << elementType;
  return success();
}

LogicalResult MXFP4Type::verify(function_ref<InFlightDiagnostic()> emitError,
                                ArrayRef<int64_t> shape) {
  if (shape.size() < 2)
    return emitError() << "MXFP4 weight must have rank >= 2, got rank "
                       << shape.size();
  for (int64_t d : shape)
    if (d <= 0)
      return emitError() << "MXFP4 weight dimensions must be positive";
  if (shape.back() % kGroupSize != 0)
    return emitError() << "MXFP4 reduction dimension " << shape.back()
                       << " is not a multiple of the " << kGroupSize
                       << "-element scale group";
  return success();
}

int64_t MXFP4Type::getNumElements() const {
  int64_t n = 1;
  for (int64_t d : getShape())
    n *= d;
  return n;
}

Type MXFP4Type::parse(AsmParser &parser) {
  SmallVector<int64_t> shape;
  SMLoc loc = parser.getCurrentLocation();
  if (parser.parseLess() ||
      parser.parseDimensionList(shape, /*allowDynamic=*/false,
                                /*withTrailingX=*/false) ||
      parser.parseGreater())
    return {};
  return getChecked([&] { return parser.emitError(loc); },
                    parser.getContext(), shape);
}

void MXFP4Type::print(AsmPrinter &printer) const {
  printer << "<";
  printer.printDimensionList(getShape());
  printer << ">";
}
