//===- GPUExpertsMMA.cpp - MXFP4 routed experts on tensor cores -----------===//
//
// The routed experts of K3 are MXFP4 (K3_SPEC §7.2): 32 E2M1 codes of 4 bits
// share one E8M0 scale. On CUDA cores each (row, entry) decodes its codes
// and widens them to f32 for one FMA each: about 5 instructions per weight
// element and entry (Nsight Compute: issue-bound, DRAM 18-31% busy,
// BENCHMARKS.md seventh session). Here the codes are decoded once per
// segment of up to 8 entries of one expert, to bf16 in the registers that
// mma.sync m16n8k16 takes, and the tensor cores do the products.
//
// Loads: reading each lane's words straight into registers, a warp had
// about 2 KB in flight, and Nsight Compute found the kernel waiting on them
// (B = 64 gate/up stage: 65% of stall cycles on global loads, 42.7%
// occupancy at 72 registers; a prefetch into registers cost occupancy and
// was slower: BENCHMARKS.md eleventh session). With the pass's `staged`
// option each warp copies its rows into a ring in workgroup memory with
// cp.async, units of 4 groups, three in flight, and reads its words from
// there; the decode, products and group order are the same, and so were
// the outputs on the H200, but it was slower (gate/up at B = 1 0.430
// against 0.398 ms, B = 64 13.19 against 12.64: BENCHMARKS.md twelfth
// session), so it is off.
//
// Instructions: the kernel issues 0.25 warp instructions per weight byte,
// about 55% of them the decode and 15% the E8M0 scales (Nsight Compute,
// B = 1 gate/up: issue slots 49% busy, 1.07 eligible warps per scheduler).
// With the pass's `fold-scales` option a warp whose scale bytes are all in
// [2, 127] (every real or generated weight; the test is one pass over its
// rows' scale words and a vote) folds each scale into the decode's
// multiply: the bf16 2^(e-1) instead of 2^126 gives E2M1 · 2^(e-127),
// exact and normal, so the mma accumulates the row sums across groups and
// the E8M0 decode and the per-group scaling go (586 -> 499 PTX
// instructions per unit of 4 groups of the up stage). The row's sum is then
// taken in the tensor cores' order across groups, not group by group. On by
// default since the thirteenth session (H200 B = 1 gate/up 0.400 -> 0.375
// ms). With `wide-groups` (on) the folded loop gives lane t of a quad all
// of group c0 + t: one 16-byte load per row (a quad reads 64 contiguous
// bytes, whole sectors, instead of 16 bytes of 4 groups), its 32
// activations, one scale per row; the mma's k order then mixes 4 groups in
// a step, which only folded scales allow (gate/up 0.370 -> 0.346 ms, down
// 0.188 -> 0.168). `prefetch` (off) loads each iteration's words one
// iteration ahead: the same sums, no faster. With `lane-groups=2` (on
// since the fourteenth session) each lane takes two consecutive groups, so
// a quad reads 128 contiguous bytes of a row (B = 8 gate/up 2.491 -> 1.744
// ms, B = 1 0.346 -> 0.326; the same bytes in flight as two groups c0 + t
// and c0 + 4 + t, `groups-in-flight=16`, measured slower: the longer
// contiguous run is what helps). At 96 registers that kernel leaves 5
// blocks per SM and K3's batch-1 gate/up grid (768 blocks) 1.16 waves
// (Nsight Compute: 24% occupancy, DRAM 48% busy); `up-min-blocks=6`
// bounds it to 80 registers (ptxas spills 60 bytes) and one wave: B = 1
// gate/up 0.328 -> 0.260 ms.
//
// Rows per warp: a warp reads its 8 entries' activations (its B
// fragments) for every 16 rows it takes, twice the bytes of the codes
// they meet, and the L1 was the limit (Nsight Compute, B = 64 down stage:
// L1/TEX 95% busy, DRAM 54%). With `down-tiles=2` (one-matrix stages) and
// `up-tiles=2` (two-matrix ones), both the default, a warp takes two m
// tiles, 32 rows, against the same fragments: half the activation loads
// per weight byte.
// A row's sum is taken as before (same bits); the fold test then covers the
// warp's 32 rows. H200: down B = 8 1.074 -> 0.866 ms, B = 64 6.02 -> 4.83
// (116 registers, 4 blocks per SM). The gate/up stage at 140 registers
// (no `up-min-blocks`): B = 64 9.17 -> 8.94 ms, B = 1 0.261 -> 0.253 in
// one run, 9.10 -> 8.80 and 0.258 -> 0.254 in another: the default since
// the sixteenth session (with 4 blocks per SM, 128 registers, slower).
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16", .bf16):
// lane = 4 g + t; A (16 x 16, row) a0 = A[g][2t, 2t+1], a1 = A[g+8][2t, 2t+1],
// a2 = A[g][2t+8, 2t+9], a3 = A[g+8][2t+8, 2t+9]; B (16 x 8, col)
// b0 = B[2t, 2t+1][g], b1 = B[2t+8, 2t+9][g]; D (16 x 8 f32) d0, d1 =
// D[g][2t, 2t+1], d2, d3 = D[g+8][2t, 2t+1]. A group's 32 elements are two
// mma steps. Lane t owns word t (bytes 4t..4t+3, elements 8t..8t+7, element
// 8t+i in nibble i) of the group in rows g and g+8, and the mma's k order is
// permuted so that this word is all the lane needs: step 0 takes the element
// pairs (8t, 8t+4) as k = (2t, 2t+1) and (8t+1, 8t+5) as (2t+8, 2t+9); step 1
// (8t+2, 8t+6) and (8t+3, 8t+7). Shifts, selects and masks (decodeWord: 11
// integer operations for the word's 4 pairs) move the codes of elements
// 8t+j and 8t+j+4 into the bf16 pair of E2M1 · 2^-126 (the code's sign at
// bit 15, e1 e0 m as exponent bits 1..0 and mantissa bit 6, subnormal for
// e = 0), and a bf16 multiply by 2^126 makes it exact. The activations are
// permuted alike: the lane loads its entry's 8 elements 8t..8t+7 (16 bytes)
// and pairs (0, 4), (1, 5), (2, 6), (3, 7).
//
// Numerics (docs/NUMERICS.md, "MXFP4 groups"): a group's sum is taken by the
// tensor cores (E2M1 x bf16 products are exact in f32; the order of their
// sum is the hardware's), scaled, and added to the row's sum in group order,
// as on CUDA cores. An output depends on its entry and expert only, not on
// the other entries of the segment, so a decode batch and one call per
// sequence agree bit for bit.
//
//===----------------------------------------------------------------------===//

#include "TensorCore.h"
#include "k3/Conversion/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/LLVMIR/NVVMDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/Dialect/NVGPU/IR/NVGPUDialect.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/Support/SaveAndRestore.h"

namespace mlir::k3 {
#define GEN_PASS_DEF_K3GPUEXPERTSMMAPASS
#include "k3/Conversion/Passes.h.inc"
} // namespace mlir::k3

using namespace mlir;

namespace {
// Entries per segment (the mma's n), rows of an m tile (the mma's m), warps
// per block. A warp takes `tiles` m tiles (the up-tiles and down-tiles
// options): 16, 32 or 64 rows against the same activation fragments.
constexpr int64_t kEntries = 8, kRowsPerWarp = 16, kWarps = 4;
// Each warp streams its 16 rows through a ring of kStages stages in
// workgroup memory with cp.async, kStageGroups groups per stage: per matrix
// 16 rows x 64 bytes of codes and 16 x 4 bytes of scales; three stages in
// flight while the fourth is computed (a warp of the up stage keeps 6 KB of
// weights in flight without holding them in registers).
constexpr int64_t kStageGroups = 4, kStages = 4;
constexpr llvm::StringLiteral kAttr = "k3.mxfp4_experts";

/// The operands of a marked stage function (see the pass description).
struct Stage {
  Value src, idx, order, rank, out;
  SmallVector<std::pair<Value, Value>> matrices; // (packed, scales)
  SmallVector<Value> scalars;
  func::FuncOp scale, outFn;
};

/// Reads `func`'s signature as an expert stage, or explains why not.
FailureOr<Stage> readStage(func::FuncOp func, DictionaryAttr spec) {
  auto fail = [&](const Twine &why) {
    func.emitError() << kAttr << ": " << why;
    return failure();
  };
  Stage st;
  Block &body = func.getBody().front();
  ArrayRef<BlockArgument> args = body.getArguments();
  auto memref = [](Value v) { return dyn_cast<MemRefType>(v.getType()); };
  if (args.size() < 7)
    return fail("expected (activations, idx, order, rank, packed, scales, "
                "..., output) arguments");
  st.src = args[0];
  st.idx = args[1];
  st.order = args[2];
  st.rank = args[3];
  st.out = args.back();
  auto src = memref(st.src), idx = memref(st.idx), out = memref(st.out);
  auto entries = [&](Value v) {
    auto t = memref(v);
    return t && t.getRank() == 1 && t.getElementType().isInteger(64);
  };
  if (!src || (src.getRank() != 2 && src.getRank() != 3) || !idx ||
      idx.getRank() != 2 || !idx.getElementType().isInteger(64) ||
      !entries(st.order) || !entries(st.rank) || !out || out.getRank() != 3)
    return fail("expected memrefs activations [T, K] or [T, topk, K], "
                "idx [T, topk] i64, order and rank [T*topk] i64, output "
                "[T, topk, N]");
  size_t a = 4;
  auto isCodes = [&](Value v) {
    auto t = memref(v);
    return t && t.getRank() == 3 && t.getElementType().isInteger(8) &&
           t.getLayout().isIdentity();
  };
  while (a + 1 < args.size() - 1 && isCodes(args[a]) && isCodes(args[a + 1])) {
    st.matrices.push_back({args[a], args[a + 1]});
    a += 2;
  }
  if (st.matrices.empty())
    return fail("expected at least one (packed, scales) pair of i8 memrefs");
  for (; a < args.size() - 1; ++a) {
    if (memref(args[a]))
      return fail("expected scalars between the weights and the output");
    st.scalars.push_back(args[a]);
  }
  auto lookup = [&](StringRef key) -> func::FuncOp {
    auto ref = spec.getAs<FlatSymbolRefAttr>(key);
    return ref ? SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(func, ref)
               : nullptr;
  };
  st.scale = lookup("scale");
  st.outFn = lookup("out");
  Builder b(func.getContext());
  if (!st.scale || st.scale.getFunctionType() !=
                       b.getFunctionType({b.getI8Type()}, {b.getF32Type()}))
    return fail("'scale' must name a function (i8) -> f32");
  SmallVector<Type> outArgs(st.matrices.size(), b.getF32Type());
  for (Value v : st.scalars)
    outArgs.push_back(v.getType());
  if (!st.outFn || st.outFn.getFunctionType() !=
                       b.getFunctionType(outArgs, {out.getElementType()}))
    return fail("'out' must name a function of one f32 sum per matrix and "
                "the scalars, returning the output's element type");
  return st;
}

/// Builds the tensor-core body of a stage in the current block.
class ExpertsKernel : k3::IndexMath {
public:
  /// With null globals the rows are read straight from global memory.
  ExpertsKernel(OpBuilder &b, Location loc, const Stage &st,
                memref::GlobalOp codesGlobal, memref::GlobalOp scalesGlobal,
                bool fold, bool wide, bool prefetch, int64_t laneGroups,
                int64_t inFlight, int64_t minBlocks, int64_t tiles,
                int64_t l2Ahead)
      : IndexMath{b, loc}, st(st), codesGlobal(codesGlobal),
        scalesGlobal(scalesGlobal), fold(fold), wide(wide), prefetch(prefetch),
        laneGroups(laneGroups), inFlight(inFlight), minBlocks(minBlocks),
        tiles(tiles), l2Ahead(l2Ahead) {}

  /// scf.if (runnable) { kernel } else { `rest` }: `rest` is moved there.
  void build(SmallVectorImpl<Operation *> &rest);
  /// The kernel's launch (over `entries` x row blocks of `rows`, `depth`
  /// elements per row) at the builder's position.
  void buildLaunch(Value entries, Value rows, Value depth);

private:
  Value i32(int64_t v) {
    return arith::ConstantIntOp::create(b, loc, b.getI32Type(), v);
  }
  /// An i32 from PTX `text` (no side effects).
  Value asmI32(StringRef text, StringRef constraints, ValueRange operands) {
    return LLVM::InlineAsmOp::create(
               b, loc, b.getI32Type(), operands, text, constraints,
               /*has_side_effects=*/false, /*is_align_stack=*/false,
               LLVM::tailcallkind::TailCallKind::None,
               /*asm_dialect=*/LLVM::AsmDialectAttr(),
               /*operand_attrs=*/ArrayAttr())
        .getResult(0);
  }

  /// Whether position `p` of `order` starts a segment: an expert's entries
  /// are consecutive in `order` (sorted by expert), and its segments are
  /// their first kEntries, the next kEntries, and so on, by the entry's
  /// `rank` among them. (Cut at multiples of kEntries of the position
  /// instead, an expert whose entries straddle one was read twice: 8% more
  /// weight bytes at a batch of 64 tokens, 28% in a 512-token prefill
  /// chunk. Counting the entries before p in the kernel instead of reading
  /// the rank made the blocks that find no segment, most of the grid in a
  /// prefill, live longer: slower, BENCHMARKS.md twenty-fifth session.)
  Value segmentStart(Value p);
  /// (token, slot, expert) of the entry at position `q` of `order`.
  std::array<Value, 3> entry(Value q);
  /// The bf16 pairs of elements (8t+j, 8t+j+4), j = 0..3, of a lane's word
  /// (see top), times `scale` (a bf16 pair; null: 2^126, the plain codes).
  std::array<Value, 4> decodeWord(Value word, Value scale = nullptr);

  /// What a lane needs for consecutive groups: per group the B registers
  /// (steps 0 and 1), per slot (matrix and m tile) and group the words and
  /// scales of the tile's rows g and g+8.
  struct Loaded {
    SmallVector<std::array<Value, 4>> x;
    SmallVector<SmallVector<std::array<Value, 2>>> word, scale;
    /// loadFour: per slot, rows g and g+8's 4 scales as one i32.
    SmallVector<std::array<Value, 2>> scaleWord;
  };
  /// The entry's B registers for `group` (its elements 8t .. 8t + 7), or
  /// for the 8 elements from `k` on.
  std::array<Value, 4> loadX(Value group);
  std::array<Value, 4> loadXAt(Value k);
  /// One group, 4-byte words and 1-byte scales.
  Loaded loadOne(Value group);
  /// Groups c0..c0+3 (c0 % 4 == 0, 4 | groups) from global memory: the
  /// words as in loadOne, the row's 4 scales in one 4-byte load. (Loading
  /// 16 bytes per row and transposing them over the quad with shuffles
  /// measured no faster, BENCHMARKS.md eighth session.)
  Loaded loadFour(Value c0);
  /// fold-scales: groups c0..c0+3, lane t taking all of group c0 + t (16
  /// bytes per row, its 32 activations): the "groups" of the result are
  /// the group's 4 words, each with the words' and activations' layout of
  /// a lane's word (the quad's 4 lanes then cover 4 groups in one mma
  /// step, which only folded scales allow).
  Loaded loadFourWide(Value c0, bool withX = true);
  /// loadFourWide's activations: the lane's 4 B registers of each word of
  /// group c0 + t, appended to in.x.
  void loadWideX(Loaded &in, Value c0);
  /// `prefetch`: the wide folded unit loop with each iteration's code and
  /// scale words loaded one iteration ahead (carried in registers), the
  /// activations where they are used, one unit per iteration. From `acc`
  /// over the first `whole` groups (a multiple of 4).
  SmallVector<Value> prefetchedWide(Value whole, ValueRange acc);
  /// The k loop over units of 4 groups (the first 4 * floor(groups / 4)
  /// groups when 4 divides them, else none) from `acc`: through the rings
  /// (`staged`) or from global memory. Returns the sums and the groups done.
  std::pair<SmallVector<Value>, Value> units4(Value groups, ValueRange acc);
  /// Copies unit `u` (groups 4u .. 4u + 3; nothing past the last unit) of
  /// this warp's rows into stage u % kStages, as one cp.async group.
  Value issue(Value u);
  /// The 4-byte scale words of unit `u` (its 4 groups) per matrix and row,
  /// read once from the unit's stage.
  SmallVector<std::array<Value, 2>> stageScales(Value u);
  /// Group j of unit `u` from its stage, with the unit's `scaleWords`: the
  /// words and scales as in loadOne.
  Loaded fromStage(Value u, int64_t j,
                   ArrayRef<std::array<Value, 2>> scaleWords);
  /// One group of rows g, g+8 (words `w`) against the entries' B registers
  /// `x`: its two mma steps into `d`, the codes decoded with `scales` per
  /// row (empty: the plain 2^126).
  SmallVector<Value> groupProduct(const std::array<Value, 2> &w,
                                  const std::array<Value, 4> &x,
                                  ArrayRef<Value> scales, SmallVector<Value> d);
  SmallVector<Value> accumulate(const Loaded &in, ValueRange acc);
  /// `fold-scales`: whether every scale byte of the warp's rows (of the
  /// first 4 * floor(groups / 4) groups) is in [2, 127], in every lane.
  Value foldable(Value groups);
  /// accumulate() with each scale folded into its codes' decode (the
  /// bf16 2^(e-1) instead of 2^126: E2M1 · 2^(e-127), exact for e in
  /// [2, 127]), the mma accumulating the row's sums across groups.
  /// `wide`: `in` from loadFourWide (one scale per row: group c0 + t's).
  SmallVector<Value> accumulateFolded(const Loaded &in, ValueRange acc,
                                      bool wide = false);

  const Stage &st;
  // Inside the launch.
  memref::GlobalOp codesGlobal, scalesGlobal;
  Value t, expert, srcToken, srcSlot;
  /// Per m tile of the warp, its rows g and g + 8.
  SmallVector<std::array<Value, 2>> tileRows;
  Value warp, lane, g, rowBase, units, codes, scaleRing;
  bool fold, wide, prefetch;
  /// wide: consecutive groups per lane (1 or 2; a unit is 4 of them).
  int64_t laneGroups;
  /// Without the rings: groups whose loads a warp issues together (over
  /// the matrices; 8: 2 KB of a warp's weights in flight).
  int64_t inFlight;
  /// Resident blocks per SM a kernel of two matrices must allow (0: any).
  int64_t minBlocks;
  /// m tiles per warp (1, 2 or 4) and the sums' slots: (matrix, tile) pairs,
  /// slot m * tiles + tile, 4 accumulators each.
  int64_t tiles;
  size_t slots() const { return st.matrices.size() * tiles; }
  /// `prefetch-l2`: loop iterations ahead whose codes the warp asks L2 for
  /// (0: none).
  int64_t l2Ahead;
  /// `prefetch-l2`: lane r < the warp's rows asks L2 for `bytes` of its
  /// row's codes from group `group` on, in every matrix, if group < `end`
  /// (the bytes cut at `end`).
  void prefetchCodes(Value group, Value end, int64_t bytes);
};

std::array<Value, 3> ExpertsKernel::entry(Value q) {
  Value topk = memref::DimOp::create(b, loc, st.idx, 1);
  Value v = memref::LoadOp::create(b, loc, st.order, q);
  v = arith::IndexCastOp::create(b, loc, b.getIndexType(), v);
  Value token = arith::DivUIOp::create(b, loc, v, topk);
  Value slot = arith::RemUIOp::create(b, loc, v, topk);
  Value e = memref::LoadOp::create(b, loc, st.idx, ValueRange{token, slot});
  e = arith::IndexCastOp::create(b, loc, b.getIndexType(), e);
  return {token, slot, e};
}

Value ExpertsKernel::segmentStart(Value p) {
  Value rank = memref::LoadOp::create(b, loc, st.rank, p);
  return rem0(arith::IndexCastOp::create(b, loc, b.getIndexType(), rank),
              kEntries);
}

std::array<Value, 4> ExpertsKernel::decodeWord(Value word, Value scale) {
  // Pair j needs nibbles j and j + 4 with e1 e0 m at bits 8..6 / 24..22
  // and the sign at bit 15 / 31: the sign 9 bits above e1 e0 m, not 3 as in
  // the word. Two words hold two pairs each so: qa (j = 0, 1) keeps e1 e0 m
  // and takes the signs from the word shifted up by 6; qb (j = 2, 3) keeps
  // the signs and takes e1 e0 m from the word shifted down by 6 (a select
  // by a mask each: one LOP3). A shift of qa by 6 or 2, of qb by 4 or 0,
  // and a mask then make the pairs: 11 integer operations a word (with a
  // multiply per pair, 13). The bits of qa and qb outside the masked
  // positions do not matter.
  auto shl = [&](Value v, int64_t n) {
    return n ? arith::ShLIOp::create(b, loc, v, i32(n)).getResult() : v;
  };
  // (keep & ~mask) | (take & mask) as one lop3 (LUT 0xD8 of a = keep, b =
  // take, c = mask): written as PTX because LLVM canonicalizes every form
  // of it to two masks, which ptxas makes two LOP3s.
  auto select = [&](Value keep, Value take, uint32_t mask) {
    return asmI32("lop3.b32 $0, $1, $2, $3, 0xD8;", "=r,r,r,r",
                  {keep, take, i32(int32_t(mask))});
  };
  Value qa = select(word, shl(word, 6), 0x22002200);
  Value qb = select(word, arith::ShRUIOp::create(b, loc, word, i32(6)),
                    0x01DC01DC);
  std::array<std::pair<Value, int64_t>, 4> from = {
      {{qa, 6}, {qa, 2}, {qb, 4}, {qb, 0}}};
  std::array<Value, 4> pairs;
  for (int64_t j = 0; j < 4; ++j) {
    Value tiny = arith::AndIOp::create(b, loc, shl(from[j].first,
                                                   from[j].second),
                                       i32(int32_t(0x81C081C0)));
    // × 2^126 (bf16 0x7E80) + -0: exact, subnormals included (PTX ISA: the
    // bf16x2 fma keeps subnormal operands). Written as PTX because the bf16
    // arithmetic of the pipeline is expanded to integer code (arith-expand).
    pairs[j] = asmI32("fma.rn.bf16x2 $0, $1, $2, $3;", "=r,r,r,r",
                      {tiny, scale ? scale : i32(0x7E807E80),
                       i32(int32_t(0x80008000))});
  }
  return pairs;
}

std::array<Value, 4> ExpertsKernel::loadX(Value group) {
  // The entry's elements 32 group + 8t .. + 7.
  return loadXAt(add(mul(group, idx(32)), mul(t, idx(8))));
}

std::array<Value, 4> ExpertsKernel::loadXAt(Value k) {
  // The entry's elements k .. k + 7, paired (0, 4), (1, 5), ...
  auto bf16x8 = VectorType::get({8}, b.getBF16Type());
  SmallVector<Value> at = {srcToken};
  if (cast<MemRefType>(st.src.getType()).getRank() == 3)
    at.push_back(srcSlot);
  at.push_back(k);
  Value xv = vector::LoadOp::create(b, loc, bf16x8, st.src, at,
                                    /*nontemporal=*/false,
                                    llvm::MaybeAlign(16));
  xv = vector::ShuffleOp::create(b, loc, xv, xv,
                                 ArrayRef<int64_t>{0, 4, 1, 5, 2, 6, 3, 7});
  Value xw = vector::BitCastOp::create(
      b, loc, VectorType::get({4}, b.getI32Type()), xv);
  std::array<Value, 4> x;
  for (int64_t r = 0; r < 4; ++r)
    x[r] = vector::ExtractOp::create(b, loc, xw, ArrayRef<int64_t>{r});
  return x;
}

ExpertsKernel::Loaded ExpertsKernel::loadOne(Value group) {
  Loaded in;
  in.x.push_back(loadX(group));
  auto i8x4 = VectorType::get({4}, b.getI8Type());
  Value byte = add(mul(group, idx(16)), mul(t, idx(4)));
  for (size_t q = 0; q < slots(); ++q) {
    auto [packed, scales] = st.matrices[q / tiles];
    std::array<Value, 2> w, s;
    for (int r = 0; r < 2; ++r) {
      Value row = tileRows[q % tiles][r];
      Value bytes = vector::LoadOp::create(b, loc, i8x4, packed,
                                           ValueRange{expert, row, byte},
                                           /*nontemporal=*/false,
                                           llvm::MaybeAlign(4));
      Value asWord = vector::BitCastOp::create(
          b, loc, VectorType::get({1}, b.getI32Type()), bytes);
      w[r] = vector::ExtractOp::create(b, loc, asWord, ArrayRef<int64_t>{0});
      s[r] = memref::LoadOp::create(b, loc, scales,
                                    ValueRange{expert, row, group});
    }
    in.word.push_back({w});
    in.scale.push_back({s});
  }
  return in;
}

ExpertsKernel::Loaded ExpertsKernel::loadFour(Value c0) {
  Loaded in;
  for (int64_t u = 0; u < 4; ++u)
    in.x.push_back(loadX(add(c0, u)));
  auto i8x4 = VectorType::get({4}, b.getI8Type());
  auto i32x1 = VectorType::get({1}, b.getI32Type());
  for (size_t q = 0; q < slots(); ++q) {
    auto [packed, scales] = st.matrices[q / tiles];
    SmallVector<std::array<Value, 2>> w(4), s(4);
    std::array<Value, 2> sw;
    for (int r = 0; r < 2; ++r) {
      Value row = tileRows[q % tiles][r];
      for (int64_t u = 0; u < 4; ++u) {
        Value byte = add(mul(add(c0, u), idx(16)), mul(t, idx(4)));
        Value bytes = vector::LoadOp::create(b, loc, i8x4, packed,
                                             ValueRange{expert, row, byte},
                                             /*nontemporal=*/false,
                                             llvm::MaybeAlign(4));
        w[u][r] = vector::ExtractOp::create(
            b, loc, vector::BitCastOp::create(b, loc, i32x1, bytes),
            ArrayRef<int64_t>{0});
      }
      Value sc = vector::LoadOp::create(b, loc, i8x4, scales,
                                        ValueRange{expert, row, c0},
                                        /*nontemporal=*/false,
                                        llvm::MaybeAlign(4));
      for (int64_t u = 0; u < 4; ++u)
        s[u][r] = vector::ExtractOp::create(b, loc, sc, ArrayRef<int64_t>{u});
      sw[r] = vector::ExtractOp::create(
          b, loc, vector::BitCastOp::create(b, loc, i32x1, sc),
          ArrayRef<int64_t>{0});
    }
    in.word.push_back(w);
    in.scale.push_back(s);
    in.scaleWord.push_back(sw);
  }
  return in;
}

void ExpertsKernel::loadWideX(Loaded &in, Value c0) {
  Value group = add(c0, laneGroups == 1 ? t : mul(t, idx(laneGroups)));
  for (int64_t i = 0; i < 4 * laneGroups; ++i)
    in.x.push_back(loadXAt(add(mul(group, idx(32)), idx(8 * i))));
}

ExpertsKernel::Loaded ExpertsKernel::loadFourWide(Value c0, bool withX) {
  Loaded in;
  if (withX)
    loadWideX(in, c0);
  int64_t n = 4 * laneGroups; // the lane's words per row
  Value group = add(c0, laneGroups == 1 ? t : mul(t, idx(laneGroups)));
  // Its groups' scales: bytes t (1 group per lane) or 2 (t % 2), + 1 of the
  // word at c0 + 4 (t / 2) (2 groups; see accumulateFolded).
  Value scaleAt = laneGroups == 1 ? c0 : add(c0, mul(div(t, 2), idx(4)));
  auto i8x4 = VectorType::get({4}, b.getI8Type());
  auto i8xn = VectorType::get({4 * n}, b.getI8Type());
  auto i32x1 = VectorType::get({1}, b.getI32Type());
  auto i32xn = VectorType::get({n}, b.getI32Type());
  for (size_t q = 0; q < slots(); ++q) {
    auto [packed, scales] = st.matrices[q / tiles];
    SmallVector<std::array<Value, 2>> w(n);
    std::array<Value, 2> sw;
    for (int r = 0; r < 2; ++r) {
      Value row = tileRows[q % tiles][r];
      Value bytes = vector::LoadOp::create(
          b, loc, i8xn, packed, ValueRange{expert, row, mul(group, idx(16))},
          /*nontemporal=*/false, llvm::MaybeAlign(16));
      Value words = vector::BitCastOp::create(b, loc, i32xn, bytes);
      for (int64_t i = 0; i < n; ++i)
        w[i][r] = vector::ExtractOp::create(b, loc, words, ArrayRef<int64_t>{i});
      Value sc = vector::LoadOp::create(b, loc, i8x4, scales,
                                        ValueRange{expert, row, scaleAt},
                                        /*nontemporal=*/false,
                                        llvm::MaybeAlign(4));
      sw[r] = vector::ExtractOp::create(
          b, loc, vector::BitCastOp::create(b, loc, i32x1, sc),
          ArrayRef<int64_t>{0});
    }
    in.word.push_back(w);
    in.scaleWord.push_back(sw);
  }
  return in;
}

SmallVector<Value> ExpertsKernel::prefetchedWide(Value whole,
                                                 ValueRange acc) {
  // Unit c0's words, flat: per slot, the 4 words of rows g and g+8, then
  // the 2 scale words.
  auto fetch = [&](Value c0) {
    SmallVector<Value> flat;
    Loaded in = loadFourWide(c0, /*withX=*/false);
    for (size_t m = 0; m < slots(); ++m) {
      for (int64_t i = 0; i < 4; ++i)
        llvm::append_range(flat, in.word[m][i]);
      llvm::append_range(flat, in.scaleWord[m]);
    }
    return flat;
  };
  auto unpack = [&](ValueRange flat, Value c0) {
    Loaded in;
    loadWideX(in, c0);
    for (size_t m = 0; m < slots(); ++m) {
      SmallVector<std::array<Value, 2>> w(4);
      for (int64_t i = 0; i < 4; ++i)
        w[i] = {flat[0], flat[1]}, flat = flat.drop_front(2);
      in.word.push_back(w);
      in.scaleWord.push_back({flat[0], flat[1]});
      flat = flat.drop_front(2);
    }
    return in;
  };
  // Nothing is read unless a unit is there (a short row).
  auto any = scf::IfOp::create(b, loc, acc.getTypes(), lt(idx(0), whole),
                               /*withElse=*/true);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(any.thenBlock());
  SmallVector<Value> init(acc);
  size_t accs = init.size();
  llvm::append_range(init, fetch(idx(0)));
  Value last = arith::SubIOp::create(b, loc, whole, idx(4));
  auto loop = scf::ForOp::create(
      b, loc, idx(0), whole, idx(4), init,
      [&](OpBuilder &fb, Location, Value c0, ValueRange in) {
        OpBuilder::InsertionGuard inner(b);
        b.setInsertionPoint(fb.getInsertionBlock(), fb.getInsertionPoint());
        // The next iteration's words first (the last reloads its own).
        SmallVector<Value> ahead =
            fetch(arith::MinUIOp::create(b, loc, add(c0, 4), last));
        SmallVector<Value> next = accumulateFolded(
            unpack(in.drop_front(accs), c0), in.take_front(accs),
            /*wide=*/true);
        llvm::append_range(next, ahead);
        scf::YieldOp::create(b, loc, next);
      });
  scf::YieldOp::create(
      b, loc, ValueRange(loop.getResults()).take_front(accs));
  b.setInsertionPointToStart(any.elseBlock());
  scf::YieldOp::create(b, loc, acc);
  return SmallVector<Value>(any.getResults());
}

Value ExpertsKernel::issue(Value u) {
  Value valid = lt(u, units);
  Value src16 = pick(valid, idx(16), idx(0));
  Value src4 = pick(valid, idx(4), idx(0));
  Value stage = rem(u, kStages);
  Value piece = rem(lane, 4);
  // Past the last unit: zero bytes read from the row's start.
  Value group = pick(valid, add(mul(u, kStageGroups), piece), idx(0));
  Value scaleAt = pick(valid, mul(u, kStageGroups), idx(0));
  SmallVector<Value> tokens;
  for (auto [m, pair] : llvm::enumerate(st.matrices)) {
    auto [packed, scales] = pair;
    for (int64_t q = 0; q < 2; ++q) {
      Value r = add(div(lane, 4), 8 * q);
      Value slot = arith::XOrIOp::create(b, loc, piece, rem(div(r, 2), 4));
      tokens.push_back(nvgpu::DeviceAsyncCopyOp::create(
          b, loc, codes, ValueRange{warp, stage, idx(m), r, mul(slot, 16)},
          packed, ValueRange{expert, add(rowBase, r), mul(group, 16)},
          b.getIndexAttr(16), src16, b.getUnitAttr()));
    }
  }
  // Scales: lane l copies row l % 16's 4 bytes of matrix l / 16 (of matrix
  // 0 again, into an unused slot, for a one-matrix stage).
  Value r = rem(lane, 16);
  Value m = div(lane, 16);
  Value scales = st.matrices.front().second;
  if (st.matrices.size() == 2)
    scales = arith::SelectOp::create(b, loc, eq(m, idx(1)),
                                     st.matrices[1].second, scales);
  tokens.push_back(nvgpu::DeviceAsyncCopyOp::create(
      b, loc, scaleRing, ValueRange{warp, stage, m, r, idx(0)}, scales,
      ValueRange{expert, add(rowBase, r), scaleAt}, b.getIndexAttr(4), src4,
      UnitAttr()));
  return nvgpu::DeviceAsyncCreateGroupOp::create(
      b, loc, nvgpu::DeviceAsyncTokenType::get(b.getContext()), tokens);
}

SmallVector<std::array<Value, 2>> ExpertsKernel::stageScales(Value u) {
  auto i8x4 = VectorType::get({4}, b.getI8Type());
  Value stage = rem(u, kStages);
  SmallVector<std::array<Value, 2>> words(st.matrices.size());
  for (size_t m = 0; m < st.matrices.size(); ++m)
    for (int r = 0; r < 2; ++r)
      words[m][r] = vector::LoadOp::create(
          b, loc, i8x4, scaleRing,
          ValueRange{warp, stage, idx(m), add(g, 8 * r), idx(0)},
          /*nontemporal=*/false, llvm::MaybeAlign(4));
  return words;
}

ExpertsKernel::Loaded
ExpertsKernel::fromStage(Value u, int64_t j,
                         ArrayRef<std::array<Value, 2>> scaleWords) {
  Loaded in;
  in.x.push_back(loadX(add(mul(u, kStageGroups), j)));
  auto i8x4 = VectorType::get({4}, b.getI8Type());
  auto i32x1 = VectorType::get({1}, b.getI32Type());
  Value stage = rem(u, kStages);
  for (size_t m = 0; m < st.matrices.size(); ++m) {
    std::array<Value, 2> w, s;
    for (int r = 0; r < 2; ++r) {
      Value row = add(g, 8 * r);
      s[r] = vector::ExtractOp::create(b, loc, scaleWords[m][r],
                                       ArrayRef<int64_t>{j});
      Value slot = arith::XOrIOp::create(b, loc, idx(j), rem(div(row, 2), 4));
      Value bytes = vector::LoadOp::create(
          b, loc, i8x4, codes,
          ValueRange{warp, stage, idx(m), row, add(mul(slot, 16), mul(t, 4))},
          /*nontemporal=*/false, llvm::MaybeAlign(4));
      w[r] = vector::ExtractOp::create(
          b, loc, vector::BitCastOp::create(b, loc, i32x1, bytes),
          ArrayRef<int64_t>{0});
    }
    in.word.push_back({w});
    in.scale.push_back({s});
  }
  return in;
}

SmallVector<Value> ExpertsKernel::groupProduct(const std::array<Value, 2> &w,
                                               const std::array<Value, 4> &x,
                                               ArrayRef<Value> scales,
                                               SmallVector<Value> d) {
  auto scale = [&](int64_t r) { return scales.empty() ? Value() : scales[r]; };
  std::array<Value, 4> p0 = decodeWord(w[0], scale(0)),
                       p1 = decodeWord(w[1], scale(1));
  for (int64_t step = 0; step < 2; ++step) {
    std::array<Value, 4> a = {p0[2 * step], p1[2 * step], p0[2 * step + 1],
                              p1[2 * step + 1]};
    std::array<Value, 2> bx = {x[2 * step], x[2 * step + 1]};
    llvm::copy(k3::mmaSyncBF16(b, loc, a, bx, d), d.begin());
  }
  return d;
}

SmallVector<Value> ExpertsKernel::accumulate(const Loaded &in,
                                             ValueRange acc) {
  Value zero =
      arith::ConstantFloatOp::create(b, loc, b.getF32Type(), APFloat(0.0f));
  SmallVector<Value> next(acc);
  for (size_t c = 0; c < in.x.size(); ++c)
    for (size_t m = 0; m < in.word.size(); ++m) {
      SmallVector<Value> d =
          groupProduct(in.word[m][c], in.x[c], {}, SmallVector<Value>(4, zero));
      // sum += scale · group sum (a power of two: the product is exact).
      for (int64_t r = 0; r < 2; ++r) {
        Value s = func::CallOp::create(b, loc, st.scale, in.scale[m][c][r])
                      .getResult(0);
        for (int64_t col = 0; col < 2; ++col) {
          Value &sum = next[m * 4 + 2 * r + col];
          auto contract = arith::FastMathFlags::contract;
          sum = arith::AddFOp::create(
              b, loc, sum,
              arith::MulFOp::create(b, loc, d[2 * r + col], s, contract),
              contract);
        }
      }
    }
  return next;
}

Value ExpertsKernel::foldable(Value groups) {
  // A byte is outside [2, 127] iff it is below 2 ((x - 2) borrows into bit
  // 7 while x's bit 7 is clear: "hasless", Anderson's Bit Twiddling Hacks)
  // or its bit 7 is set; a borrow out of a byte below 2 can only flag more.
  // Lane t reads words t, t + 4, ... of rows g and g + 8 of each matrix
  // (none unless 4 | groups: the rows' words are 4-byte aligned then, and
  // the unit loops run).
  auto i8x4 = VectorType::get({4}, b.getI8Type());
  auto i32x1 = VectorType::get({1}, b.getI32Type());
  Value words = pick(rem0(groups, 4), div(groups, 4), idx(0));
  auto scan = scf::ForOp::create(
      b, loc, t, words, idx(4), ValueRange{i32(0)},
      [&](OpBuilder &fb, Location, Value q, ValueRange acc) {
        OpBuilder::InsertionGuard inner(b);
        b.setInsertionPoint(fb.getInsertionBlock(), fb.getInsertionPoint());
        Value bad = acc[0];
        for (auto [packed, scales] : st.matrices)
          for (const std::array<Value, 2> &rows : tileRows)
            for (Value row : rows) {
              Value s = vector::ExtractOp::create(
                  b, loc,
                  vector::BitCastOp::create(
                      b, loc, i32x1,
                      vector::LoadOp::create(b, loc, i8x4, scales,
                                             ValueRange{expert, row, mul(q, 4)},
                                             /*nontemporal=*/false,
                                             llvm::MaybeAlign(4))),
                  ArrayRef<int64_t>{0});
              Value below = arith::AndIOp::create(
                  b, loc, arith::SubIOp::create(b, loc, s, i32(0x02020202)),
                  arith::XOrIOp::create(b, loc, s, i32(-1)));
              bad = arith::OrIOp::create(
                  b, loc, bad, arith::OrIOp::create(b, loc, below, s));
            }
        scf::YieldOp::create(b, loc, bad);
      });
  Value bad =
      arith::AndIOp::create(b, loc, scan.getResult(0), i32(0x80808080));
  Value mine =
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, bad, i32(0));
  return NVVM::VoteSyncOp::create(b, loc, b.getI1Type(), i32(-1), mine,
                                  NVVM::VoteSyncKind::all);
}

SmallVector<Value> ExpertsKernel::accumulateFolded(const Loaded &in,
                                                   ValueRange acc, bool wide) {
  SmallVector<Value> next(acc);
  // Per slot and row, the 4 groups' bf16 2^(e-1) = (e + 126) << 7 in both
  // halves: bytes e + 126 (no carry: e <= 127), byte c put at bytes 1 and 3
  // and zeros at bytes 0 and 2 (prmt selector 4 c 4 c), shifted down by one.
  size_t slots = in.word.size();
  SmallVector<std::array<Value, 2>> biased(slots), scale(slots);
  for (size_t m = 0; m < slots; ++m)
    for (int64_t r = 0; r < 2; ++r)
      biased[m][r] =
          arith::AddIOp::create(b, loc, in.scaleWord[m][r], i32(0x7E7E7E7E));
  // wide: each group's 4 words take byte t (one group per lane) or
  // 2 (t % 2) + c / 4 (two) of the lane's scale word.
  Value ti =
      wide ? arith::IndexCastOp::create(b, loc, b.getI32Type(), t) : Value();
  auto selector = [&](size_t c) -> Value {
    if (!wide)
      return i32(0x0404 + 0x1010 * c);
    Value odd = arith::AndIOp::create(b, loc, ti, i32(1));
    Value byte = laneGroups == 1
                     ? ti
                     : arith::AddIOp::create(
                           b, loc, arith::MulIOp::create(b, loc, odd, i32(2)),
                           i32(c / 4));
    return arith::AddIOp::create(
        b, loc, i32(0x0404), arith::MulIOp::create(b, loc, i32(0x1010), byte));
  };
  // The products in slot order, or, with several matrices, group by group
  // and each slot's in turn; either way each slot's sums in group order.
  // The order only steers ptxas's schedule: with the slot order it issued
  // the two-matrix loop's loads later and that loop ran 17% slower; the
  // one-matrix loop was slower the other way (H200, BENCHMARKS.md
  // twenty-second session).
  bool byGroup = st.matrices.size() > 1;
  size_t groups = in.x.size();
  for (size_t outer = 0; outer < (byGroup ? groups : slots); ++outer)
    for (size_t inner = 0; inner < (byGroup ? slots : groups); ++inner) {
      size_t c = byGroup ? outer : inner, m = byGroup ? inner : outer;
      for (int64_t r = 0; r < 2 && (!wide || c % 4 == 0); ++r) {
        Value both16 = asmI32("prmt.b32 $0, $1, $2, $3;", "=r,r,r,r",
                              {biased[m][r], i32(0), selector(c)});
        scale[m][r] = arith::ShRUIOp::create(b, loc, both16, i32(1));
      }
      SmallVector<Value> d = groupProduct(
          in.word[m][c], in.x[c], scale[m],
          SmallVector<Value>(next.begin() + m * 4, next.begin() + m * 4 + 4));
      llvm::copy(d, next.begin() + m * 4);
    }
  return next;
}

void ExpertsKernel::prefetchCodes(Value group, Value end, int64_t bytes) {
  Value go = both(lt(lane, idx(kRowsPerWarp * tiles)), lt(group, end));
  scf::IfOp::create(b, loc, go, [&](OpBuilder &tb, Location) {
    OpBuilder::InsertionGuard inner(b);
    b.setInsertionPoint(tb.getInsertionBlock(), tb.getInsertionPoint());
    // 16 bytes of codes per group; a row's codes are contiguous.
    Value row = add(rowBase, lane);
    Value column = mul(group, idx(16));
    Value size = arith::MinUIOp::create(b, loc, idx(bytes),
                                        mul(sub(end, group), idx(16)));
    for (auto [packed, scales] : st.matrices)
      k3::prefetchL2(b, loc, packed, {expert, row, column}, size);
    scf::YieldOp::create(b, loc);
  });
}

std::pair<SmallVector<Value>, Value>
ExpertsKernel::units4(Value groups, ValueRange acc) {
  if (!codesGlobal) {
    // 1-4 units per iteration (loads first; with `prefetch`, which the pass
    // allows with one group per lane only, one, its words loaded an
    // iteration ahead).
    bool ahead = fold && wide && prefetch;
    int64_t per = ahead ? 1
                        : std::max<int64_t>(1, inFlight / 4 /
                                                   (int64_t)st.matrices.size());
    // The folded wide loop's units per iteration: whole lanes' groups
    // (`per` divides it).
    int64_t span = fold && wide
                       ? (int64_t)llvm::alignTo(std::max(per, laneGroups),
                                                laneGroups)
                       : per;
    Value whole = pick(rem0(groups, 4), groups, idx(0));
    auto unitLoop = [&](bool folded) -> SmallVector<Value> {
      if (folded && ahead)
        return prefetchedWide(whole, acc);
      // `step` units per iteration up to a multiple of them, then the
      // rest one unit (one group per lane) at a time: the same sums in the
      // same order as a loop of single units, whatever `inFlight` is.
      auto loop = [&](Value from, Value to, int64_t step, int64_t each,
                      ValueRange init) {
        return scf::ForOp::create(
                   b, loc, from, to, idx(4 * step), init,
                   [&](OpBuilder &fb, Location, Value c0, ValueRange sums) {
                     OpBuilder::InsertionGuard inner(b);
                     b.setInsertionPoint(fb.getInsertionBlock(),
                                         fb.getInsertionPoint());
                     llvm::SaveAndRestore<int64_t> lanes(laneGroups, each);
                     // The codes l2Ahead iterations on, while this one's
                     // loads wait.
                     if (l2Ahead)
                       prefetchCodes(add(c0, idx(4 * step * l2Ahead)), whole,
                                     64 * step);
                     SmallVector<Loaded, 4> in;
                     for (int64_t u = 0; u < step; u += each)
                       in.push_back(folded && wide
                                        ? loadFourWide(add(c0, 4 * u))
                                        : loadFour(add(c0, 4 * u)));
                     SmallVector<Value> next(sums);
                     for (const Loaded &l : in)
                       next = folded ? accumulateFolded(l, next, wide)
                                     : accumulate(l, next);
                     scf::YieldOp::create(b, loc, next);
                   })
            .getResults();
      };
      int64_t step = folded && wide ? span : per;
      if (step == 1)
        return loop(idx(0), whole, 1, 1, acc);
      Value most = mul(div(whole, 4 * step), 4 * step);
      SmallVector<Value> sums =
          loop(idx(0), most, step, folded && wide ? laneGroups : 1, acc);
      return loop(most, whole, 1, 1, sums);
    };
    if (!fold)
      return {unitLoop(false), whole};
    // fold-scales: one loop or the other for the whole row block, as the
    // warp's scales allow (two loops, so that neither holds the other's
    // registers).
    auto choice = scf::IfOp::create(b, loc, acc.getTypes(),
                                    foldable(groups), /*withElse=*/true);
    for (bool folded : {true, false}) {
      OpBuilder::InsertionGuard branch(b);
      b.setInsertionPointToStart(folded ? choice.thenBlock()
                                        : choice.elseBlock());
      scf::YieldOp::create(b, loc, unitLoop(folded));
    }
    return {SmallVector<Value>(choice.getResults()), whole};
  }
  // Through the rings: copies issued three units ahead.
  units = pick(rem0(groups, kStageGroups), div(groups, kStageGroups), idx(0));
  auto staged = scf::IfOp::create(b, loc, acc.getTypes(), lt(idx(0), units),
                                  /*withElse=*/true);
  {
    OpBuilder::InsertionGuard inner(b);
    b.setInsertionPointToStart(staged.thenBlock());
    codes = memref::GetGlobalOp::create(b, loc, codesGlobal.getType(),
                                        codesGlobal.getSymName());
    scaleRing = memref::GetGlobalOp::create(b, loc, scalesGlobal.getType(),
                                            scalesGlobal.getSymName());
    Value group;
    for (int64_t u = 0; u + 1 < kStages; ++u)
      group = issue(idx(u));
    scf::ForOp loop = k3::warpRingLoop(
        b, loc, units, acc, kStages, [&](Value u, ValueRange) { return issue(u); },
        [&](Value u, ValueRange sums) {
          SmallVector<std::array<Value, 2>> scaleWords = stageScales(u);
          SmallVector<Value> next(sums);
          for (int64_t j = 0; j < kStageGroups; ++j)
            next = accumulate(fromStage(u, j, scaleWords), next);
          return next;
        });
    // (cp.async.wait_group 0: the token only orders the op.)
    nvgpu::DeviceAsyncWaitOp::create(b, loc, group, b.getI32IntegerAttr(0));
    scf::YieldOp::create(b, loc, loop.getResults());
    b.setInsertionPointToStart(staged.elseBlock());
    scf::YieldOp::create(b, loc, acc);
  }
  return {SmallVector<Value>(staged.getResults()), mul(units, kStageGroups)};
}

void ExpertsKernel::build(SmallVectorImpl<Operation *> &rest) {
  auto src = cast<MemRefType>(st.src.getType());
  int64_t kDim = src.getRank() - 1;
  Value packed0 = st.matrices.front().first;
  Value rows = memref::DimOp::create(b, loc, packed0, 1);
  Value depth = memref::DimOp::create(b, loc, st.src, kDim);
  Value entries = memref::DimOp::create(b, loc, st.order, 0);
  Value ok = both(rem0(depth, 32), rem0(rows, kRowsPerWarp * tiles));
  ok = both(ok, cmp(arith::CmpIPredicate::ugt, entries, idx(0)));
  ok = both(ok, aligned(st.src));
  // The scales are read 4 at a time (4-byte loads) when 4 | groups.
  for (auto [packed, scales] : st.matrices) {
    ok = both(ok, both(aligned(packed), aligned(scales, 4)));
    Value half = memref::DimOp::create(b, loc, packed, 2);
    ok = both(ok, cmp(arith::CmpIPredicate::eq, mul(half, idx(2)), depth));
  }
  k3::guardBody(b, loc, rest, ok);
  buildLaunch(entries, rows, depth);
}

void ExpertsKernel::buildLaunch(Value entries, Value rows, Value depth) {
  Value c1 = idx(1);
  Value gridY = arith::CeilDivUIOp::create(b, loc, rows,
                                           idx(kWarps * kRowsPerWarp * tiles));
  auto launch = gpu::LaunchOp::create(b, loc, entries, gridY, c1,
                                      idx(kWarps * 32), c1, c1);
  launch->setAttr("k3.mma_shape", b.getDenseI64ArrayAttr({16, 8, 16}));
  if (minBlocks && st.matrices.size() > 1)
    k3::boundLaunch(launch, minBlocks);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(&launch.getBody().front());

  Value p = launch.getBlockIds().x;
  Value tid = launch.getThreadIds().x;
  warp = arith::DivUIOp::create(b, loc, tid, idx(32));
  lane = arith::RemUIOp::create(b, loc, tid, idx(32));
  g = arith::DivUIOp::create(b, loc, lane, idx(4));
  t = arith::RemUIOp::create(b, loc, lane, idx(4));
  // Many blocks start no segment (a decode batch of 64 tokens: 40%; a
  // 512-token prefill chunk: 80%): they read the rank alone and end.
  Value starts = segmentStart(p);
  rowBase = add(mul(launch.getBlockIds().y, idx(kWarps * kRowsPerWarp * tiles)),
                mul(warp, idx(kRowsPerWarp * tiles)));
  Value active =
      both(starts, cmp(arith::CmpIPredicate::ult, rowBase, rows));
  auto body = scf::IfOp::create(b, loc, active, /*withElseRegion=*/false);
  b.setInsertionPoint(body.thenBlock()->getTerminator());
  auto [token, slot, e] = entry(p);
  expert = e;
  Value end = arith::MinUIOp::create(b, loc, entries, add(p, kEntries));
  // Entry p + n of the segment, if it is one (n < kEntries).
  auto member = [&](Value n) {
    Value q = add(p, n);
    Value in = cmp(arith::CmpIPredicate::ult, q, end);
    auto [tq, sq, eq] = entry(pick(in, q, p));
    Value same = both(in, cmp(arith::CmpIPredicate::eq, eq, expert));
    return std::array<Value, 3>{tq, sq, same};
  };
  // The B column of this lane is entry g (a column past the segment reads
  // entry p's activations; its results are not stored).
  auto [tb, sb, inB] = member(g);
  srcToken = pick(inB, tb, token);
  srcSlot = pick(inB, sb, slot);
  // Tile i's rows from rowBase + 16 i (16 x tiles divides N: all tiles
  // stay one base plus constants. Letting the last warp of other N move
  // down, or clamping its tiles, made the same loops 14% slower on the H200
  // at B = 64, 8.65 against 9.96 ms of gate/up, BENCHMARKS.md seventeenth
  // session.)
  for (int64_t i = 0; i < tiles; ++i) {
    Value row = add(rowBase, add(g, idx(kRowsPerWarp * i)));
    tileRows.push_back({row, add(row, 8)});
  }

  // Row sums, matrix by matrix: rows g, g (col 2t, 2t+1), g+8, g+8.
  Value zero =
      arith::ConstantFloatOp::create(b, loc, b.getF32Type(), APFloat(0.0f));
  SmallVector<Value> acc(4 * slots(), zero);
  Value groups = arith::DivUIOp::create(b, loc, depth, idx(32));
  auto [sums, whole] = units4(groups, acc);
  auto tail = scf::ForOp::create(
      b, loc, whole, groups, c1, sums,
      [&](OpBuilder &fb, Location, Value c, ValueRange sums) {
        OpBuilder::InsertionGuard inner(b);
        b.setInsertionPoint(fb.getInsertionBlock(), fb.getInsertionPoint());
        scf::YieldOp::create(b, loc, accumulate(loadOne(c), sums));
      });

  // out[t, s, row] = out(sums..., scalars...) for the lane's two entries.
  for (int64_t c = 0; c < 2; ++c) {
    std::array<Value, 3> dst = member(add(mul(t, idx(2)), c));
    Value tq = dst[0], sq = dst[1], in = dst[2];
    scf::IfOp::create(b, loc, in, [&](OpBuilder &tb, Location l) {
      for (int64_t i = 0; i < tiles; ++i)
        for (int64_t r = 0; r < 2; ++r) {
          SmallVector<Value> args;
          for (size_t m = 0; m < st.matrices.size(); ++m)
            args.push_back(tail.getResult((m * tiles + i) * 4 + 2 * r + c));
          llvm::append_range(args, st.scalars);
          Value v = func::CallOp::create(tb, l, st.outFn, args).getResult(0);
          memref::StoreOp::create(tb, l, v, st.out,
                                  ValueRange{tq, sq, tileRows[i][r]});
        }
      scf::YieldOp::create(tb, l);
    });
  }
  b.setInsertionPointToEnd(&launch.getBody().front());
  gpu::TerminatorOp::create(b, loc);
}

struct K3GPUExpertsMMAPass
    : k3::impl::K3GPUExpertsMMAPassBase<K3GPUExpertsMMAPass> {
  using Base::Base;

  void runOnOperation() override {
    if (laneGroups != 1 && laneGroups != 2) {
      getOperation().emitError()
          << "k3-gpu-experts-mma: lane-groups must be 1 or 2, not "
          << static_cast<int64_t>(laneGroups);
      return signalPassFailure();
    }
    if (prefetchWords && laneGroups != 1) {
      getOperation().emitError()
          << "k3-gpu-experts-mma: prefetch needs lane-groups=1, not "
          << static_cast<int64_t>(laneGroups);
      return signalPassFailure();
    }
    if (upMinBlocks < 0 || upMinBlocks > 16) {
      getOperation().emitError()
          << "k3-gpu-experts-mma: up-min-blocks must be 0 to 16, not "
          << static_cast<int64_t>(upMinBlocks);
      return signalPassFailure();
    }
    // cp.async.bulk.prefetch.L2: PTX ISA 8.0, sm_90.
    if (prefetchL2 < 0 || prefetchL2 > 16 || (prefetchL2 && sm < 90)) {
      getOperation().emitError()
          << "k3-gpu-experts-mma: prefetch-l2 must be 0 to 16 and needs "
             "sm_90 (cp.async.bulk.prefetch), not "
          << static_cast<int64_t>(prefetchL2) << " for sm_"
          << static_cast<int64_t>(sm);
      return signalPassFailure();
    }
    if (groupsInFlight < 4 || groupsInFlight > 32 || groupsInFlight % 4) {
      getOperation().emitError()
          << "k3-gpu-experts-mma: groups-in-flight must be a multiple of 4 "
             "from 4 to 32, not "
          << static_cast<int64_t>(groupsInFlight);
      return signalPassFailure();
    }
    for (auto [name, value] : {std::pair{"up-tiles", int64_t(upTiles)},
                               std::pair{"down-tiles", int64_t(downTiles)}})
      if (value != 1 && value != 2 && value != 4) {
        getOperation().emitError() << "k3-gpu-experts-mma: " << name
                                   << " must be 1, 2 or 4, not " << value;
        return signalPassFailure();
      } else if (value != 1 && staged) {
        getOperation().emitError()
            << "k3-gpu-experts-mma: " << name << "=" << value
            << " needs staged=false (the rings hold 16 rows per warp)";
        return signalPassFailure();
      }
    for (func::FuncOp f : k3::markedFunctions(getOperation(), kAttr)) {
      auto spec = f->getAttrOfType<DictionaryAttr>(kAttr);
      if (!spec) {
        f.emitError() << kAttr << " must be a dictionary {scale, out}";
        return signalPassFailure();
      }
      FailureOr<Stage> st = readStage(f, spec);
      if (failed(st))
        return signalPassFailure();
      // bf16 activations only (an f32 library keeps its CUDA-core kernel);
      // PTX ISA: mma.sync with .bf16 operands needs sm_80.
      auto src = cast<MemRefType>(st->src.getType());
      if (!src.getElementType().isBF16() || sm < 80)
        continue;
      Block &body = f.getBody().front();
      if (!k3::returnsNothing(body)) {
        f.emitError() << kAttr << ": the stage must return nothing";
        return signalPassFailure();
      }
      SmallVector<Operation *> rest = k3::bodyOps(body);
      OpBuilder b(f.getContext());
      b.setInsertionPointToStart(&body);
      // The warps' rings (16-byte aligned workgroup buffers, one pair per
      // number of matrices; scales: two matrix slots always, see issue).
      memref::GlobalOp codes, scales;
      if (staged) {
        int64_t m = st->matrices.size();
        std::string suffix = std::to_string(m);
        ModuleOp module = getOperation();
        codes = k3::workgroupBuffer(
            module, "k3k_experts_codes" + suffix,
            {kWarps, kStages, m, kRowsPerWarp, kStageGroups * 16},
            b.getI8Type());
        scales = k3::workgroupBuffer(
            module, "k3k_experts_scales" + suffix,
            {kWarps, kStages, 2, kRowsPerWarp, kStageGroups}, b.getI8Type());
      }
      ExpertsKernel(b, f.getLoc(), *st, codes, scales, foldScales, wideGroups,
                    prefetchWords, laneGroups, groupsInFlight, upMinBlocks,
                    st->matrices.size() > 1 ? upTiles : downTiles, prefetchL2)
          .build(rest);
    }
  }
};
} // namespace
