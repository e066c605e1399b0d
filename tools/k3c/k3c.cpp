//===- k3c.cpp - the Kimi K3 ahead-of-time compiler -----------------------===//
//
// Parses flags into mlir::k3::CompileOptions and calls the driver library.
// Standard MLIR options (--mlir-timing, --mlir-print-ir-after-all, ...) work.
//
//===----------------------------------------------------------------------===//

#include "k3/Driver/Driver.h"
#include "k3/Version.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/Timing.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;
using namespace mlir;

static cl::OptionCategory k3cCategory("k3c options");

static cl::opt<std::string> inputPath(cl::Positional, cl::Required,
                                      cl::desc("<config.json | module.mlir>"),
                                      cl::cat(k3cCategory));
static cl::opt<std::string> outputPath("o", cl::desc("Output file ('-': stdout)"),
                                       cl::value_desc("file"), cl::init("-"),
                                       cl::cat(k3cCategory));
static cl::opt<std::string>
    targetSpec("target",
               cl::desc("Code targets: host, or a comma list of sm_<NN>"),
               cl::init("host"), cl::cat(k3cCategory));
static cl::opt<k3::EmitKind> emitKind(
    "emit", cl::desc("What to write"), cl::init(k3::EmitKind::K3),
    cl::values(
        clEnumValN(k3::EmitKind::K3, "k3", "the k3 module after k3 transforms"),
        clEnumValN(k3::EmitKind::Manifest, "manifest", "the manifest JSON"),
        clEnumValN(k3::EmitKind::Weights, "weights",
                   "every checkpoint tensor, one per line"),
        clEnumValN(k3::EmitKind::Summary, "summary",
                   "layer map, parameter counts, state sizes"),
        clEnumValN(k3::EmitKind::Linalg, "linalg",
                   "after lowering to linalg/scf/memref (library ABI)"),
        clEnumValN(k3::EmitKind::LLVMIR, "llvm", "LLVM IR of the library"),
        clEnumValN(k3::EmitKind::PTX, "ptx",
                   "the PTX of every kernel module (GPU targets)"),
        clEnumValN(k3::EmitKind::Library, "library",
                   "the shared library (default when -o ends in .so)")),
    cl::cat(k3cCategory));
static cl::opt<int64_t> kdaChunkSize(
    "kda-chunk-size", cl::desc("KDA prefill chunk length (power of two)"),
    cl::init(64), cl::cat(k3cCategory));
static cl::opt<int64_t> mlaPageSize("mla-page-size",
                                    cl::desc("Tokens per MLA cache page"),
                                    cl::init(64), cl::cat(k3cCategory));
static cl::opt<std::string> kdaStateLayout(
    "kda-state-layout",
    cl::desc("KDA state layout: value_first ([H,V,K], official) or key_first"),
    cl::init("value_first"), cl::cat(k3cCategory));
static cl::opt<std::string> modelName("model-name",
                                      cl::desc("Model name (default: the "
                                               "config's folder name)"),
                                      cl::cat(k3cCategory));
static cl::opt<std::string> activationDtype(
    "activation-dtype",
    cl::desc("Activation dtype: bf16 (as K3) or f32 (docs/NUMERICS.md)"),
    cl::init("bf16"), cl::cat(k3cCategory));
static cl::opt<bool> strictConfig(
    "strict-config",
    cl::desc("Reject config keys that neither k3c nor the published K3 "
             "config knows (misspelt optional keys)"),
    cl::cat(k3cCategory));
static cl::opt<int64_t> epDegree(
    "ep-degree",
    cl::desc("Expert-parallel degree (must divide the experts; only 1, every "
             "expert in one library, is implemented)"),
    cl::init(1), cl::cat(k3cCategory));
static cl::opt<bool> dependentLaunch(
    "gpu-dependent-launch",
    cl::desc("GPU: let each kernel be dispatched while the one before it "
             "finishes (programmatic dependent launch, sm_90; measured no "
             "faster on the H200, so off)"),
    cl::cat(k3cCategory));
static cl::opt<bool> joinAttnRes(
    "join-attn-res",
    cl::desc("Make each sublayer's input AttnRes and norm in the kernel of "
             "the products that read it (k3-group-calls attn-res; measured "
             "slower in a first form, so off)"),
    cl::cat(k3cCategory));
static cl::opt<int64_t> skinnyMTiles(
    "gpu-skinny-m-tiles",
    cl::desc("GPU: W rows per warp of the few-token products, in m16 tiles: "
             "1, or 2 from 4 tokens for matrices not split over K "
             "(k3-gpu-skinny-mma m-tiles; measured slower, so 1)"),
    cl::init(1), cl::cat(k3cCategory));
static cl::opt<int64_t> mmaStages(
    "gpu-mma-stages",
    cl::desc("GPU: stages of the products of 16 tokens and more, 2 to 8 "
             "(k3-gpu-mma stages: k steps of 64 in flight per block, 27 KB "
             "of workgroup memory each)"),
    cl::init(2), cl::cat(k3cCategory));
static cl::opt<int64_t> mmaTargetBlocks(
    "gpu-mma-target-blocks",
    cl::desc("GPU: most blocks of a product of 16 tokens and more split over "
             "K (k3-gpu-mma target-blocks; 396: three blocks per SM of an "
             "H200, one wave)"),
    cl::init(396), cl::cat(k3cCategory));
static cl::opt<int64_t> skinnyPrefetchL2(
    "gpu-skinny-prefetch-l2",
    cl::desc("GPU: bytes of each row of W a block of the products of 1 to 15 "
             "tokens asks L2 for before it waits, a multiple of 256 up to "
             "65536 (k3-gpu-skinny-mma prefetch-l2; 0: none; sm_90)"),
    cl::init(0), cl::cat(k3cCategory));
static cl::opt<int64_t> expertsPrefetchL2(
    "gpu-experts-prefetch-l2",
    cl::desc("GPU: loop iterations ahead whose codes the MXFP4 experts' "
             "warps ask L2 for, 0 to 16 (k3-gpu-experts-mma prefetch-l2; 0: "
             "none; sm_90)"),
    cl::init(0), cl::cat(k3cCategory));
static cl::opt<bool> kdaPrefetchNext(
    "gpu-kda-prefetch-next",
    cl::desc("GPU: each block of the KDA decode asks L2 for the state of the "
             "block that runs next on its SM (k3-gpu-kda-decode "
             "prefetch-next; sm_90)"),
    cl::init(false), cl::cat(k3cCategory));
static cl::opt<int64_t> mmaMinBlocks(
    "gpu-mma-min-blocks",
    cl::desc("GPU: blocks per SM the registers of the products of 16 tokens "
             "and more must allow, 0 to 32 (k3-gpu-mma min-blocks; 0: no "
             "bound, 3 fit)"),
    cl::init(0), cl::cat(k3cCategory));
static cl::opt<bool> mmaLdmatrix(
    "gpu-mma-ldmatrix",
    cl::desc("GPU: the products of 16 tokens and more read their mma "
             "fragments with ldmatrix (k3-gpu-mma ldmatrix; the same bits)"),
    cl::cat(k3cCategory));
static cl::opt<bool> quiet("quiet", cl::desc("No progress lines on stderr"),
                           cl::cat(k3cCategory));

static int fail(const Twine &msg) {
  errs() << "k3c: error: " << msg << "\n";
  return 1;
}

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  registerAsmPrinterCLOptions();
  registerMLIRContextCLOptions();
  // The passes by name, for --mlir-print-ir-after=PASS and the like (the
  // pass manager's options list the passes registered before them).
  k3::registerK3Passes();
  k3::registerUpstreamPasses();
  registerPassManagerCLOptions();
  registerDefaultTimingManagerCLOptions();
  cl::SetVersionPrinter([](raw_ostream &os) {
    os << "k3c " << K3C_VERSION << " (LLVM/MLIR " << LLVM_VERSION_STRING
       << ")\n";
  });
  // --help shows k3c's own options; LLVM's and MLIR's (e.g.
  // --mlir-pass-pipeline-crash-reproducer, --mlir-timing) still work and are
  // listed by --help-hidden.
  cl::HideUnrelatedOptions(k3cCategory);
  cl::ParseCommandLineOptions(
      argc, argv,
      "k3c: the Kimi K3 compiler\n\n"
      "  k3c CONFIG.json [--target=host|sm_90[,sm_100...]] -o LIB.so\n\n"
      "LLVM and MLIR options (--mlir-timing, "
      "--mlir-pass-pipeline-crash-reproducer=FILE, ...): --help-hidden\n");

  k3::CompileOptions options;
  options.inputPath = inputPath;
  options.outputPath = outputPath;
  options.emit = emitKind;
  if (emitKind.getNumOccurrences() == 0 &&
      StringRef(outputPath).ends_with(".so"))
    options.emit = k3::EmitKind::Library;
  options.modelName = modelName;
  options.strictConfig = strictConfig;
  options.epDegree = epDegree;
  options.progress = !quiet;
  options.lowering.dependentLaunch = dependentLaunch;
  options.lowering.joinAttnRes = joinAttnRes;
  if (skinnyMTiles != 1 && skinnyMTiles != 2)
    return fail("--gpu-skinny-m-tiles must be 1 or 2, got " +
                Twine(skinnyMTiles));
  options.lowering.skinnyMTiles = skinnyMTiles;
  if (mmaStages < 2 || mmaStages > 8)
    return fail("--gpu-mma-stages must be in [2, 8], got " + Twine(mmaStages));
  options.lowering.mmaStages = mmaStages;
  if (mmaTargetBlocks < 1)
    return fail("--gpu-mma-target-blocks must be at least 1, got " +
                Twine(mmaTargetBlocks));
  options.lowering.mmaTargetBlocks = mmaTargetBlocks;
  if (mmaMinBlocks < 0 || mmaMinBlocks > 32)
    return fail("--gpu-mma-min-blocks must be in [0, 32], got " +
                Twine(mmaMinBlocks));
  options.lowering.mmaMinBlocks = mmaMinBlocks;
  options.lowering.mmaLdmatrix = mmaLdmatrix;
  if (skinnyPrefetchL2 < 0 || skinnyPrefetchL2 > 65536 ||
      skinnyPrefetchL2 % 256)
    return fail("--gpu-skinny-prefetch-l2 must be a multiple of 256 in [0, "
                "65536], got " +
                Twine(skinnyPrefetchL2));
  options.lowering.skinnyPrefetchL2 = skinnyPrefetchL2;
  if (expertsPrefetchL2 < 0 || expertsPrefetchL2 > 16)
    return fail("--gpu-experts-prefetch-l2 must be in [0, 16], got " +
                Twine(expertsPrefetchL2));
  options.lowering.expertsPrefetchL2 = expertsPrefetchL2;
  options.lowering.kdaPrefetchNext = kdaPrefetchNext;
  Expected<std::vector<std::string>> targets = k3::parseTargets(targetSpec);
  if (!targets)
    return fail(toString(targets.takeError()));
  options.targets = *targets;
  if (kdaChunkSize < 1 || kdaChunkSize > 1024 || !isPowerOf2_64(kdaChunkSize))
    return fail("--kda-chunk-size must be a power of two in [1, 1024], got " +
                Twine(kdaChunkSize));
  if (mlaPageSize < 1 || mlaPageSize > 65536)
    return fail("--mla-page-size must be in [1, 65536], got " +
                Twine(mlaPageSize));
  if (kdaStateLayout != "value_first" && kdaStateLayout != "key_first")
    return fail("--kda-state-layout must be 'value_first' or 'key_first', got '" +
                kdaStateLayout + "'");
  if (activationDtype != "bf16" && activationDtype != "f32")
    return fail("--activation-dtype must be 'bf16' or 'f32', got '" +
                activationDtype + "'");
  options.import.f32Activations = activationDtype == "f32";
  options.import.kdaChunkSize = kdaChunkSize;
  options.import.mlaPageSize = mlaPageSize;
  options.import.kdaStateValueFirst = kdaStateLayout == "value_first";

  MLIRContext context;
  SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler located(sourceMgr, &context);
  // Messages without a location (config and flag errors) name their file.
  ScopedDiagnosticHandler plain(&context, [](Diagnostic &diag) {
    if (!isa<UnknownLoc>(diag.getLocation()))
      return failure();
    errs() << "k3c: "
           << (diag.getSeverity() == DiagnosticSeverity::Error ? "error: " : "")
           << diag << "\n";
    return success();
  });

  DefaultTimingManager tm;
  applyDefaultTimingManagerCLOptions(tm);
  TimingScope timing = tm.getRootScope();
  return failed(k3::compile(context, options, timing)) ? 1 : 0;
}
