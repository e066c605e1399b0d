//===- GPUTileAndMap.cpp - parallel loops to blocks and threads ----------===//
//
// Each outermost scf.parallel becomes one kernel: its innermost (contiguous)
// dimension is tiled by `tile-size` and that tile maps to thread x; the grid
// takes the dimensions innermost first (block x, y, z), so the widest extent
// of a kernel's output, e.g. the 163,840-token vocabulary of the LM head,
// lands on block x (limit 2^31 - 1; y and z are limited to 65535). Further
// grid dimensions and nested parallel loops run sequentially in each thread.
// A loop from k3-gpu-warp-reduce (k3.warp_lanes) keeps its lane dimension
// whole on thread x and takes 8 outputs per block on thread y. The tile
// sizes chosen are recorded on the grid loop (k3.tile_sizes).
//
//===----------------------------------------------------------------------===//

#include "k3/Conversion/Passes.h"

#include "mlir/Dialect/Affine/IR/AffineOps.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/GPU/Transforms/ParallelLoopMapper.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/SCF/Transforms/Transforms.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3GPUTILEANDMAPPASS
#include "k3/Conversion/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;
using gpu::Processor;

/// Warps (outputs) per block for a k3-gpu-warp-reduce loop.
static constexpr int64_t kWarpsPerBlock = 8;

namespace {
struct K3GPUTileAndMapPass
    : k3::impl::K3GPUTileAndMapPassBase<K3GPUTileAndMapPass> {
  using Base::Base;

  LogicalResult map(scf::ParallelOp op, function_ref<Processor(unsigned)> f) {
    MLIRContext *ctx = op.getContext();
    AffineMap id = AffineMap::getMultiDimIdentityMap(1, ctx);
    SmallVector<gpu::ParallelLoopDimMappingAttr> m;
    for (unsigned i = 0, e = op.getNumLoops(); i != e; ++i)
      m.push_back(gpu::ParallelLoopDimMappingAttr::get(ctx, f(i), id, id));
    return gpu::setMappingAttr(op, m);
  }

  void runOnOperation() override {
    if (tileSize <= 0 || tileSize > 1024) {
      getOperation()->emitError("k3-gpu-tile-and-map: tile-size must be in "
                                "[1, 1024], got ")
          << static_cast<int64_t>(tileSize);
      return signalPassFailure();
    }
    SmallVector<scf::ParallelOp> roots;
    getOperation()->walk([&](scf::ParallelOp op) {
      if (!op->getParentOfType<scf::ParallelOp>())
        roots.push_back(op);
    });
    for (scf::ParallelOp root : roots) {
      unsigned n = root.getNumLoops();
      // Warp loops: the lane dimension (last) is thread x, whole; the one
      // before it thread y.
      bool warp = root->hasAttr("k3.warp_lanes") && n >= 2;
      SmallVector<int64_t> tiles(n, 1);
      if (warp) {
        tiles[n - 1] = cast<IntegerAttr>(root->getAttr("k3.warp_lanes")).getInt();
        tiles[n - 2] = kWarpsPerBlock;
      } else {
        tiles.back() = tileSize;
      }
      auto [grid, block] =
          scf::tileParallelLoop(root, tiles, /*noMinMaxBounds=*/true);
      grid->setAttr("k3.tile_sizes",
                    DenseI64ArrayAttr::get(grid.getContext(), tiles));
      // Grid dimensions innermost first (a warp loop's lane tile is one).
      unsigned inner = warp ? n - 2 : n - 1;
      auto gridProc = [inner](unsigned i) {
        if (i > inner)
          return Processor::Sequential;
        unsigned fromInner = inner - i;
        return fromInner < 3 ? static_cast<Processor>(
                                   static_cast<unsigned>(Processor::BlockX) +
                                   fromInner)
                             : Processor::Sequential;
      };
      auto threadProc = [n, warp](unsigned i) {
        if (i == n - 1)
          return Processor::ThreadX;
        return warp && i == n - 2 ? Processor::ThreadY : Processor::Sequential;
      };
      if (failed(map(grid, gridProc)) || failed(map(block, threadProc))) {
        grid.emitError("k3-gpu-tile-and-map: invalid mapping");
        return signalPassFailure();
      }
      block.getBody()->walk([&](scf::ParallelOp nested) {
        (void)map(nested, [](unsigned) { return Processor::Sequential; });
      });
    }
  }
};
} // namespace
