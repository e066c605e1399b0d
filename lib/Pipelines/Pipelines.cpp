//===- Pipelines.cpp - the pass pipelines k3c runs ------------------------===//

#include "k3/Pipelines/Pipelines.h"
#include "k3/Conversion/Passes.h"
#include "k3/Dialect/K3/Transforms/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/StringExtras.h"

using namespace mlir;

void mlir::k3::buildK3TransformPipeline(OpPassManager &pm) {
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
}

void mlir::k3::buildK3ToLinalgPipeline(OpPassManager &pm,
                                       const LoweringOptions &options) {
  pm.addPass(createK3WeightsToArgumentsPass());
  pm.addPass(createConvertK3ToLinalgPass());
  pm.addPass(createK3ExposeABIPass());
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createK3FuseKDALayerPass());
  K3GroupCallsPassOptions group;
  group.attnRes = options.joinAttnRes;
  pm.addPass(createK3GroupCallsPass(group));
  pm.addPass(createSymbolDCEPass());
}

// Upstream passes by their registered names, in the order they run.
static const char *const kBufferize =
    "one-shot-bufferize{bufferize-function-boundaries=1 "
    "function-boundary-type-conversion=identity-layout-map},"
    "buffer-deallocation-pipeline,convert-bufferization-to-memref";
static const char *const kToLLVM =
    "convert-linalg-to-loops,expand-strided-metadata,lower-affine,"
    "convert-scf-to-cf,arith-expand{include-bf16=1},convert-vector-to-llvm,"
    "convert-math-to-llvm,"
    "convert-math-to-libm,finalize-memref-to-llvm,convert-arith-to-llvm,"
    "convert-index-to-llvm,convert-func-to-llvm,convert-cf-to-llvm,"
    "reconcile-unrealized-casts";

LogicalResult
mlir::k3::buildHostLoweringPipeline(OpPassManager &pm,
                                    const LoweringOptions &options) {
  registerUpstreamPasses();
  buildK3ToLinalgPipeline(pm, options);
  if (failed(parsePassPipeline(kBufferize, pm)))
    return failure();
  pm.addPass(createK3MemRefCopyToLinalgPass());
  if (failed(parsePassPipeline(kToLLVM, pm)))
    return failure();
  pm.addPass(createK3EmitLibraryEntriesPass());
  return success();
}

// GPU: the same kernels, their parallel loops tiled and mapped to blocks and
// threads, temporaries in device memory, NVVM and a fatbin per module.
static const char *const kGPUBufferize =
    "one-shot-bufferize{bufferize-function-boundaries=1 "
    "function-boundary-type-conversion=identity-layout-map},"
    "convert-bufferization-to-memref";
static const char *const kGPUMap =
    "convert-linalg-to-parallel-loops,canonicalize,cse";

/// The compute capability of "sm_NN[a]" (x10).
static int64_t smOf(StringRef chip) {
  int64_t sm = 0;
  chip.drop_front(3).take_while(llvm::isDigit).getAsInteger(10, sm);
  return sm;
}

/// The PTX ISA version a chip needs (PTX ISA release notes: sm_90 from 7.8,
/// sm_100 from 8.6, sm_120 from 8.7).
static std::string ptxFeatures(StringRef chip) {
  int64_t sm = smOf(chip);
  return sm >= 120 ? "+ptx87" : sm >= 100 ? "+ptx86" : "+ptx80";
}

LogicalResult
mlir::k3::buildGPULoweringPipeline(OpPassManager &pm,
                                   ArrayRef<std::string> chips, bool stopAtPTX,
                                   const LoweringOptions &options) {
  if (chips.empty())
    return failure();
  registerUpstreamPasses();
  buildK3ToLinalgPipeline(pm, options);
  if (failed(parsePassPipeline(kGPUBufferize, pm)))
    return failure();
  pm.addPass(createK3MemRefCopyToLinalgPass());
  K3GPUMMAPassOptions mma;
  mma.sm = smOf(chips[0]);
  mma.stages = options.mmaStages;
  mma.targetBlocks = options.mmaTargetBlocks;
  mma.minBlocks = options.mmaMinBlocks;
  mma.ldmatrix = options.mmaLdmatrix;
  for (const std::string &chip : chips)
    mma.sm = std::min(mma.sm, smOf(chip));
  pm.addPass(createK3GPUMMAPass(mma));
  K3GPUExpertsMMAPassOptions experts;
  experts.sm = mma.sm;
  experts.prefetchL2 = options.expertsPrefetchL2;
  pm.addPass(createK3GPUExpertsMMAPass(experts));
  K3GPUSkinnyMMAPassOptions skinny;
  skinny.sm = mma.sm;
  skinny.mTiles = options.skinnyMTiles;
  skinny.prefetchL2 = options.skinnyPrefetchL2;
  pm.addPass(createK3GPUSkinnyMMAPass(skinny));
  pm.addNestedPass<func::FuncOp>(createK3GPUKDARecurrentPass());
  pm.addNestedPass<func::FuncOp>(createK3GPUGatedNormPass());
  K3GPUKDADecodePassOptions kdaDecode;
  kdaDecode.sm = mma.sm;
  kdaDecode.prefetchNext = options.kdaPrefetchNext;
  pm.addPass(createK3GPUKDADecodePass(kdaDecode));
  pm.addPass(createK3GPUAttnResNormPass());
  K3GPURoutePassOptions route;
  route.sm = mma.sm;
  pm.addPass(createK3GPURoutePass(route));
  K3GPUMLAMMAPassOptions mla;
  mla.sm = mma.sm;
  pm.addPass(createK3GPUMLAMMAPass(mla));
  pm.addPass(createK3GPUMLASoftmaxPass());
  if (failed(parsePassPipeline(kGPUMap, pm)))
    return failure();
  pm.addNestedPass<func::FuncOp>(createK3GPUWarpReducePass());
  pm.addNestedPass<func::FuncOp>(createK3GPUTileAndMapPass());
  if (failed(parsePassPipeline("func.func(convert-parallel-loops-to-gpu,"
                               "canonicalize)",
                               pm)))
    return failure();
  pm.addPass(createK3GPUDeviceAllocPass());
  // Launches and allocations in a stream per function, synchronized at its
  // end, so kernels of consecutive calls run in program order.
  // Host copies of functions now only called from kernels go.
  // Constants and index computations move into the launch bodies right
  // before outlining (a later canonicalization would hoist them out again),
  // so that kernels see constants (folded loop bounds, shifts instead of
  // divisions) rather than kernel arguments. bf16 conversions are expanded
  // to integer code on the host; in the kernels too below sm_80, which has
  // no f32 -> bf16 conversion instruction, while sm_80 and later round with
  // one cvt.rn.bf16.f32 (the same bits but for a NaN's payload) instead of
  // about eight integer instructions per element.
  std::string expandBF16 = mma.sm >= 80
                               ? "func.func(arith-expand{include-bf16=1}),"
                                 "gpu.module(arith-expand)"
                               : "arith-expand{include-bf16=1}";
  if (failed(parsePassPipeline("func.func(gpu-launch-sink-index-computations),"
                               "gpu-kernel-outlining,symbol-dce,"
                               "func.func(gpu-async-region)," +
                                   expandBF16,
                               pm)))
    return failure();
  pm.addPass(createK3GPULaunchBoundsPass());
  // What each kernel reads and writes, for the runtime's graphs.
  pm.addPass(createK3GPUKernelAccessPass());
  // Off by default: on the H200 it measured no faster (BENCHMARKS.md,
  // thirteenth session).
  if (options.dependentLaunch) {
    K3GPUDependentLaunchPassOptions dependent;
    dependent.sm = mma.sm;
    pm.addPass(createK3GPUDependentLaunchPass(dependent));
  }
  // One #nvvm.target per chip (the pipeline attaches the first), the PTX of
  // each, then one fatbin with every cubin and PTX (k3-gpu-fatbin).
  for (const std::string &chip : chips.drop_front())
    if (failed(parsePassPipeline("nvvm-attach-target{chip=" + chip +
                                     " features=" + ptxFeatures(chip) + "}",
                                 pm)))
      return failure();
  std::string lower = "gpu-lower-to-nvvm-pipeline{cubin-chip=" + chips[0] +
                      " cubin-features=" + ptxFeatures(chips[0]) +
                      " cubin-format=isa}";
  if (failed(parsePassPipeline(lower, pm)))
    return failure();
  if (stopAtPTX)
    return success();
  pm.addPass(createK3GPUFatbinPass());
  pm.addPass(createK3EmitLibraryEntriesPass());
  return success();
}

void mlir::k3::registerUpstreamPasses() {
  static bool once = [] {
    registerAllPasses();
    return true;
  }();
  (void)once;
}

void mlir::k3::registerK3Passes() {
  registerK3TransformsPasses();
  registerK3ConversionPasses();
}

void mlir::k3::registerK3Pipelines() {
  PassPipelineRegistration<>(
      "k3-transform-pipeline",
      "The k3 transform phase of k3c (canonicalize, CSE) on an imported module",
      [](OpPassManager &pm) { buildK3TransformPipeline(pm); });
  PassPipelineRegistration<>(
      "k3-to-linalg-pipeline",
      "k3 -> linalg/scf/memref with the library ABI (before bufferization)",
      [](OpPassManager &pm) { buildK3ToLinalgPipeline(pm); });
  PassPipelineRegistration<>(
      "k3-host-lowering-pipeline",
      "k3 -> LLVM dialect with the library entry points (k3c --target=host)",
      [](OpPassManager &pm) { (void)buildHostLoweringPipeline(pm); });
}
