//===- fuzz-config.cpp - libFuzzer target: config.json -> k3 module -------===//
//
// Parses the input as a config.json (mlir::k3::hf::parseConfig); a config
// that validates is imported into a k3 module, which must verify. Any crash,
// sanitizer report, or a validated config whose module does not verify is a
// finding.
//
//===----------------------------------------------------------------------===//

#include "k3/Dialect/K3/IR/K3.h"
#include "k3/Frontend/HF/Config.h"
#include "k3/Frontend/HF/Importer.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>

using namespace mlir;

static MLIRContext *context() {
  static MLIRContext *ctx = [] {
    auto *c = new MLIRContext(MLIRContext::Threading::DISABLED);
    c->loadDialect<k3::K3Dialect, func::FuncDialect, tensor::TensorDialect,
                   arith::ArithDialect>();
    // Diagnostics of a failing verification are printed by the finding.
    return c;
  }();
  return ctx;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  auto config = k3::hf::parseConfig(text, "fuzz.json");
  if (!config) {
    std::string message = llvm::toString(config.takeError());
    if (message.empty() || message.find('\n') != std::string::npos) {
      std::fprintf(stderr, "bad error message: '%s'\n", message.c_str());
      std::abort();
    }
    return 0;
  }
  // Models of real size import in milliseconds; a fuzzed config with huge
  // layer counts would only measure the importer's speed.
  if (config->numLayers > 128)
    return 0;
  k3::hf::ImportOptions options;
  OwningOpRef<ModuleOp> module = k3::hf::importModel(*context(), *config, options);
  if (!module || failed(verify(*module))) {
    std::fprintf(stderr, "a validated config gives a module that does not verify\n");
    std::abort();
  }
  return 0;
}
