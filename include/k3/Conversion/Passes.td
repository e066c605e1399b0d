//===- Passes.td - k3 conversion passes --------------------*- tablegen -*-===//

#ifndef K3_CONVERSION_PASSES_TD
#define K3_CONVERSION_PASSES_TD

include "mlir/Pass/PassBase.td"

def ConvertK3ToLinalgPass : Pass<"convert-k3-to-linalg", "::mlir::ModuleOp"> {
  let summary = "Lower every k3 op to linalg/tensor/scf/memref/arith/math";
  let description = [{
    Replaces each k3 op by a call to a kernel function written in
    linalg/tensor/scf/memref/arith/math (lib/Conversion/K3ToLinalg/Kernels):
    one kernel per op, with dynamic shapes so that every layer of a kind
    shares it. The kernels compute in f32 and round to the activation dtype
    (bf16 or f32, taken from the module) where docs/NUMERICS.md says.

    State types become buffers updated in place: `!k3.kda_state` a memref in
    its recorded layout, `!k3.conv_state` a [channels, width] memref,
    `!k3.mla_cache` three memrefs (page pool, page table, length).
    `!k3.mxfp4` weights become two i8 tensors (packed nibbles, E8M0 scales).
    Function signatures, calls and returns are converted 1:N accordingly.
    KDA is lowered in both forms (token recurrence for T = 1, chunked WY/UT
    form with the op's chunk size otherwise); MLA in the naive form for
    T > 1 and the weight-absorbed form for T = 1.
    An RMSNorm whose input is an AttnRes used only there (K3_SPEC §3.2: the
    input of every mixer and FFN, and the output) becomes one call of
    @k3k_attn_res_norm; where its last candidate is a residual sum
    (@k3k_add, §3.2 steps 4 and 7) read otherwise only after it, of
    @k3k_attn_res_norm_add, which makes and returns the sum as well.
  }];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::bufferization::BufferizationDialect",
    "::mlir::func::FuncDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::math::MathDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect",
    "::mlir::vector::VectorDialect"
  ];
}

def K3ExposeABIPass : Pass<"k3-expose-abi", "::mlir::ModuleOp"> {
  let summary = "Give @forward the library's calling convention (docs/ABI.md)";
  let description = [{
    After `convert-k3-to-linalg`: every tensor argument of @forward becomes a
    memref of the same shape read through `bufferization.to_tensor`, the
    state results (the argument buffers, updated in place) are dropped, and
    the logits are written into a new trailing memref argument: by the call
    that computes them when their producer is a destination-passing wrapper
    (a function that only allocates its result, passes it to one call with
    its own arguments and returns it, as `@k3k_lm_head`), else through
    `bufferization.materialize_in_destination` (a copy). The function
    gets `llvm.emit_c_interface`, so `_mlir_ciface_forward` takes one
    memref descriptor pointer per argument.
  }];
  let dependentDialects = [
    "::mlir::bufferization::BufferizationDialect",
    "::mlir::memref::MemRefDialect"
  ];
}

def K3GroupCallsPass : Pass<"k3-group-calls", "::mlir::ModuleOp"> {
  let summary = "Independent calls of a kernel function as one call (one launch)";
  let description = [{
    Calls in one block whose operands are all defined before the first of
    them (or are `tensor.cast`s of such values, cast again there) become
    one call at the first, so that a decode step launches one kernel where
    it launched several. Every output is computed as by its own call.

    Products: a function marked `k3.product_group = {few = @f, many = @m,
    few_tokens = @p}` (`Kernels/Dense.mlir`: @k3k_linear, @k3k_matmul_f32)
    computes `(x [T, K], W [N, K]) -> [T, N]` as `@f(x, W, out)` when
    `@p(T)` holds and `@m(x, W, out)` otherwise. Calls of such functions
    with the same x (up to `tensor.cast`) and the same `@p` become one call
    of a function made here, `<name>_x<m>(x, W_1 .. W_m) -> (y_1 .. y_m)`
    for m calls of one function (`<a>_x<i>_<b>_x<j>` for runs of
    different ones, in call order): when `@p(T)` one call of
    `<f>_x<m>(x, W_1 .. W_m, out_1 .. out_m)`, whose body is the m calls of
    the members' `@f` and which carries their attributes (a dictionary
    attribute whose entries differ between members gets those entries as
    arrays, one value per member: `k3.skinny_matmul = {out = [@k3k_sum_f32,
    @k3k_narrow, ...]}`; members whose attributes cannot be merged so stay
    apart), else the m calls of the members' `@m`. k3-gpu-skinny-mma makes
    the few-token call one kernel: K3's KDA projections q, k, v, f_a, b and
    g; the MLA's q_a, kv_a and output gate; a MoE layer's router logits
    (f32), latent projection and shared experts' gate and up.

    Fixed groups: a function marked `k3.call_group = @g`, where `@g` takes
    the arguments of n calls one after the other and returns their results
    likewise (`Kernels/KDA.mlir`: @k3k_short_conv and @k3k_short_conv3, a
    KDA layer's three convolutions), has its calls taken n at a time, in
    program order, and each n made one call of `@g`.

    AttnRes into the products (`attn-res`, off by default; `k3c
    --join-attn-res`): where the x of a product call or group is the
    normalised AttnRes output of a call of a function
    marked `k3.into = @r` (`Kernels/Dense.mlir`: @k3k_attn_res_norm and
    @k3k_attn_res_norm_add, joined by k3-to-linalg; `@r` writes the
    results into buffers after its operands and is marked
    `k3.attn_res_norm`) and nothing else reads x, both become one call of
    `<a>_<g>(AttnRes operands, the group's operands after x) -> (y_1 ..
    y_m[, sum])`: when `@p(T)` one call of `<r>_<few>(x's buffer, W_1 ..
    W_m, out_1 .. out_m, ..., AttnRes operands[, sum's buffer])`, whose
    body is `@r` then the group's few-token call and whose
    `k3.skinny_matmul` mark gains `attn_res = {widen, narrow, round,
    residual}` (`@r`'s mark; `residual` with the sum): k3-gpu-skinny-mma
    makes the AttnRes in the product kernel's first blocks. Otherwise `@r`
    then the members' `@m`. The same sums either way. Off by default: the
    first form (products normalising h in every block) measured slower
    than the two kernels (BENCHMARKS.md, fortieth session); this one is
    yet to be measured.
  }];
  let options = [
    Option<"attnRes", "attn-res", "bool", "false",
           "Join an AttnRes with its norm to the products of its output">
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::bufferization::BufferizationDialect",
    "::mlir::func::FuncDialect",
    "::mlir::memref::MemRefDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect"
  ];
}

def K3FuseKDALayerPass : Pass<"k3-fuse-kda-layer", "::mlir::ModuleOp"> {
  let summary = "A KDA layer's convolutions, KDA core and gated norm as one call";
  let description = [{
    A function marked `k3.kda_layer = {conv = @c, kda = @k, norm = @n}`
    (`Kernels/KDA.mlir`: @k3k_kda_layer over @k3k_short_conv, @k3k_kda and
    @k3k_gated_rms_norm, K3_SPEC §4.2–4.7) takes the arguments of three
    calls of `@c`, then those of `@k` after its first three (q, k, v), then
    those of `@n` after its first (o), and returns what `@n` returns. A call
    of `@n` whose o is the only use of a call of `@k`, whose q, k and v are
    each the only use of a call of `@c` (through `tensor.cast`s and one
    `tensor.expand_shape` of the last dimension in two: [T, H·D] ->
    [T, H, D]), all in one block, becomes one call of the marked function
    at the norm's place, and the five calls, with the casts and reshapes
    between them, go. The memref arguments of the five calls (convolution
    tails, KDA states, slots) may have no other users, so that moving the
    calls keeps the order of every access to them; otherwise, and where
    the argument types do not match, the calls stay. The marked function
    computes what the calls did (a decode step in one kernel on a GPU,
    `k3-gpu-kda-decode`).
  }];
  let dependentDialects = [
    "::mlir::func::FuncDialect",
    "::mlir::tensor::TensorDialect"
  ];
}

def K3EmitLibraryEntriesPass : Pass<"k3-emit-library-entries", "::mlir::ModuleOp"> {
  let summary = "Add the library's exported C entry points (LLVM dialect)";
  let description = [{
    On a module lowered to the LLVM dialect: adds `k3_abi_version()`,
    `k3_manifest_json()` (the module's `k3.manifest` string) and
    `k3_forward(void **args)`, which calls `_mlir_ciface_forward` with
    args[0], args[1], ... (docs/ABI.md).
  }];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect"];
}

def K3MemRefCopyToLinalgPass : Pass<"k3-memref-copy-to-linalg", "::mlir::ModuleOp"> {
  let summary = "Rewrite memref.copy as linalg.copy";
  let description = [{
    After bufferization: copies between strided buffers would otherwise
    lower to a call into MLIR's C runner library (`memrefCopy`); as
    `linalg.copy` they become loops, so the library needs only libc and libm.
    Copies between contiguous (identity-layout) buffers are made over the
    buffers collapsed to one dimension, so that on the GPU they are one
    kernel over all elements rather than one thread per element of a short
    innermost dimension.
  }];
  let dependentDialects = ["::mlir::linalg::LinalgDialect"];
}

def K3GPUDeviceAllocPass : Pass<"k3-gpu-device-alloc", "::mlir::ModuleOp"> {
  let summary = "Allocate the kernels' temporaries in device memory";
  let description = [{
    After the parallel loops became GPU kernels: every host-side
    `memref.alloc` (temporaries of the kernels: projections, norms, routing
    buffers, KDA and MLA scratch) becomes a `gpu.alloc` in device memory. No
    deallocation is emitted: the runtime serves these allocations from a
    per-step workspace arena that it resets after each forward.
  }];
  let dependentDialects = ["::mlir::gpu::GPUDialect"];
}

def K3GPUWarpReducePass : Pass<"k3-gpu-warp-reduce"> {
  let summary = "Split each kernel's reduction loop over the 32 lanes of a warp";
  let description = [{
    Before `k3-gpu-tile-and-map`: an outermost `scf.parallel` whose body is
    side-effect-free setup, one `scf.for` that only sums (the linalg form:
    `C[i] = C[i] + x(k)` through a load and a store of the same element, or
    `iter_args` started at 0.0 and yielding `arg + x(k)`), then anything
    using the sums, gets a new innermost dimension `lane` in [0, 32): lane
    `l` sums the iterations `k = lb + l·step, lb + (l + 32)·step, ...`, the
    32 partial sums are combined with `gpu.shuffle xor` (offsets 16 to 1),
    and lane 0 alone runs what followed the loop. A warp then reads 32
    consecutive elements of a weight row per iteration (coalesced) instead
    of 32 rows, and a decode-time GEMV, RMS norm or attention score is
    spread over 32 threads instead of one. Each lane takes `unroll` of its
    terms per iteration while they are all in range (their loads issued
    together, so that a lane has that many in flight), then the rest one at
    a time. The new loop carries `k3.warp_lanes = 32` and `k3.warp_unroll`;
    `k3-gpu-tile-and-map` maps the lane dimension to thread x.

    Where the body loads `A[..., k]` directly (unit step, A of identity
    layout, the other indices from outside the loop), a lane instead takes
    8 consecutive terms `k = lb + 8 l + 256 m + j` with one `vector.load` of
    8 elements per such load (16 bytes of bf16, aligned: ld.global.v4),
    while whole chunks of 256 terms remain, and the rest as above; chosen at
    run time (`scf.if`, marked `k3.warp_vector = 8`) when every such A's base
    pointer, row length and `lb` allow aligned vectors, else the one-term
    form.

    Where the body instead reads whole chunks per iteration as 1-D vectors
    in the kernel source (`vector.transfer_read A[..., k·C]`, in bounds, C
    elements a multiple of 16 bytes: an MXFP4 group's 16 packed bytes and
    its 32 activations), lanes take consecutive chunks, one per iteration,
    and the reads become `vector.load`s: 16-byte aligned (ld.global.v4)
    when every such A's base pointer and row length allow it, checked at run
    time (`scf.if`, marked `k3.warp_aligned_chunks`), else of element
    alignment. Every other in-bounds row read becomes a plain
    `vector.load`. f32 sums are reassociated (a different, not a less exact,
    order); maxima are exact in any order.

    Split-K (`split-k`, default on): a step with fewer than 64 outputs and
    at least 2048 terms per sum (a decode step's AttnRes scores) would keep
    a few warps of the whole GPU busy. Chosen
    at run time (`scf.if`), each output's terms are cut into 8 consecutive
    slices (a multiple of 256 terms each, keeping the vector form's
    alignment), a warp sums each slice into a partial-sum buffer
    `[outputs, 8]`, and a second loop (`k3.split_k`) adds the slices in
    order and runs what followed the sum. The order of the f32 sum then
    depends on the number of outputs of the step as well as on K.
    A reduction into elements that a fill loop right before set to a
    constant (a `linalg.fill`) adds its sum to that constant and the fill
    loop goes (`k3.warp_fused_fill`).

    ```mlir
    scf.parallel (%j) = (%c0) to (%n) step (%c1) {
      scf.for %k = %c0 to %K step %c1 {
        %c = memref.load %C[%j]
        ... %x = ...
        %s = arith.addf %c, %x : f32
        memref.store %s, %C[%j]
      }
    }
    // becomes
    scf.parallel (%j, %lane) = (%c0, %c0) to (%n, %c32) step (%c1, %c1) {
      %part = scf.for %k = %lane to %K step %c32 iter_args(%a = %zero) {
        ... scf.yield (%a + %x)
      }
      %sum = ... gpu.shuffle xor ... (5 times)
      scf.if (%lane == 0) { C[%j] = C[%j] + %sum }
    } {k3.warp_lanes = 32 : i64}
    ```
  }];
  let options = [
    Option<"unroll", "unroll", "int64_t", "4",
           "Terms (vectors in the vector form) per lane per iteration of the "
           "main loop">,
    Option<"vectorize", "vectorize", "bool", "true",
           "Generate the vector form where the loads allow it">,
    Option<"splitK", "split-k", "bool", "true",
           "Split the sums of steps with few outputs over slices (run-time "
           "choice)">
  ];
  let dependentDialects = ["::mlir::gpu::GPUDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::vector::VectorDialect",
                           "::mlir::scf::SCFDialect"];
}

def K3GPUMMAPass : Pass<"k3-gpu-mma", "::mlir::ModuleOp"> {
  let summary = "bf16 matrix products of many rows on the tensor cores";
  let description = [{
    Before `convert-linalg-to-parallel-loops`: a `linalg.generic` that is
    `C[i, j] += extf(X[i, k]) * extf(W[j, k])` with bf16 X [T, K] and W [N, K]
    and f32 C (a linear layer of a bf16 library; `extf` directly or through a
    function that is only `arith.extf`) gets a second kernel, chosen at run
    time by `scf.if`: when T >= `min-rows`, K % 64 == 0 and X and W are
    16-byte aligned, a `gpu.launch` with one block per `tile-m` x `tile-n`
    tile of C (64 x 128 by default: 8 warps of 32 x 32), the tiles of X and
    W (64 elements of K) copied into rings of `stages` stages in workgroup
    memory (rows padded to 72 elements against bank conflicts; 16-byte
    aligned `memref.global`s when the rings fit 48 KB, else views of
    `gpu.dynamic_shared_memory`, the launch's dynamic size) with
    `nvgpu.device_async_copy` (cp.async, 16 bytes per thread, zeros past the
    last row; the next stages - 1 k steps in flight while the current one's
    mma run), and each warp computing 32 x 32 of C with `nvvm.mma.sync`
    m16n8k16 (bf16 operands, f32 accumulators); otherwise the generic as
    before (a decode step's few rows go to `k3-gpu-skinny-mma`). A product
    of at most half `target-blocks` tiles is split over K too, into as many
    slices as keep its blocks within `target-blocks`; a second loop adds
    the slices in order (or, with `fuse-slices`, the tile's last block).

    A function marked `k3.mma_matmul = {out = @f}` with arguments X [T, K],
    bf16 W [N, K] and the output [T, N] (Kernels/Dense.mlir: the rounded
    products of 16 tokens and more) gets the same kernel for its whole body,
    storing `f(sum)` into the output, with no zeroed f32 product first (the
    sum starts at the first slice's: the same value but for the sign of an
    exact zero); the body runs when the kernel cannot (also W's K must be
    X's).

    bf16 mma.sync needs sm_80: with `sm` below 80 (the oldest target of the
    library) nothing changes. The launch records `k3.tile_sizes = [tile-m,
    tile-n, 64]` and `k3.mma_shape = [16, 8, 16]`. The products are exact in
    f32; the f32 sums are taken in a different order than the scalar
    kernel's.

    ```mlir
    linalg.generic {C[i, j] += extf(X[i, k]) * extf(W[j, k])}
    // becomes
    scf.if %T >= 16 && %K % 64 == 0 && aligned(X) && aligned(W) {
      gpu.launch blocks(ceil(T / 64), ceil(N / 128), slices) threads(256, 1, 1)
          dynamic_shared_memory_size 55296 {
        %xs, %ws = views of gpu.dynamic_shared_memory: [2, 64, 72], [2, 128, 72]
        scf.for %k0 in the slice step 64 { stage X, W; barrier; 32 mma.sync; barrier }
        C[m, n] += D, or the slice's partial tile = D  (inside the bounds)
      } {k3.tile_sizes = array<i64: 64, 128, 64>}
      C[m, n] += the partial tiles in slice order  (with a split)
    } else {
      linalg.generic ...
    }
    ```
  }];
  let options = [
    Option<"minRows", "min-rows", "int64_t", "16",
           "Fewest rows (tokens in the step) that take the tensor-core kernel">,
    Option<"sm", "sm", "int64_t", "90",
           "Oldest compute capability the library targets (x10); below 80 "
           "there is no bf16 mma.sync and the pass changes nothing">,
    Option<"fuseSlices", "fuse-slices", "bool", "false",
           "Split products: the last block of each tile adds the slices (a "
           "counter per tile) instead of a second kernel (H200: slower, "
           "BENCHMARKS.md twelfth session; off)">,
    Option<"tileM", "tile-m", "int64_t", "64",
           "Rows of X (tokens) per block: 64, 128 or 256 (one warp per 32 x "
           "32 of the block tile, at most 512 threads)">,
    Option<"tileN", "tile-n", "int64_t", "128",
           "Rows of W (outputs) per block: 64, 128 or 256 (H200: 128 read X "
           "half as often as 64 and was faster, BENCHMARKS.md fifteenth "
           "session)">,
    Option<"stages", "stages", "int64_t", "2",
           "Stages of the X and W rings (at least 2); rings of more than 48 KB "
           "(9 KB per 64 rows a stage) go in dynamic workgroup memory, at "
           "most what a block of the oldest target may have (227 KB on "
           "sm_90, 163 KB on sm_80, 99 KB on sm_86)">,
    Option<"targetBlocks", "target-blocks", "int64_t", "396",
           "Most blocks of a split-K product (the slices: as many as keep "
           "the blocks within it, each at least 8 k steps; 396: three "
           "blocks of 64 x 128 per SM of an H200, one wave)">,
    Option<"minBlocks", "min-blocks", "int64_t", "0",
           "Resident blocks per SM that the kernel's registers must allow "
           "(0: no bound): its launch names the kernel "
           "`<function>_mma_kernel` and the function gets k3.launch_bounds, "
           "which k3-gpu-launch-bounds turns into .minnctapersm after "
           "outlining (64 x 128 tiles: 69 registers allow 3 blocks, 4 need "
           "at most 64)">,
    Option<"ldmatrix", "ldmatrix", "bool", "false",
           "Read the mma fragments from workgroup memory with ldmatrix.x4 "
           "(4 instructions per warp and k16 step instead of 16 4-byte "
           "loads; the same values, so the same bits)">
  ];
  let dependentDialects = ["::mlir::gpu::GPUDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::LLVM::LLVMDialect",
                           "::mlir::NVVM::NVVMDialect",
                           "::mlir::nvgpu::NVGPUDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::vector::VectorDialect",
                           "::mlir::scf::SCFDialect"];
}

def K3GPUExpertsMMAPass : Pass<"k3-gpu-experts-mma", "::mlir::ModuleOp"> {
  let summary = "MXFP4 routed experts of a bf16 library on the tensor cores";
  let description = [{
    A function marked `k3.mxfp4_experts = {scale = @s, out = @o}` is an
    expert stage over the (token, slot) entries of a step in expert order
    (`Kernels/MoE.mlir`): its arguments are the activations (bf16
    `[T, K]`, or `[T, topk, K]`: one row per entry), the selected experts
    `idx [T, topk]`, the entries in expert order `order [T * topk]`, each
    position's rank among its expert's entries `rank [T * topk]`, one or
    two MXFP4 matrices as (packed `[E, N, K/2]`, scales `[E, N, K/32]`) i8
    pairs, scalars, and the output `[T, topk, N]`. Output element
    `[t, s, n]` is `o(acc_1, ..., scalars)`, `acc_m` the f32 sum of row n of
    matrix m of expert `idx[t, s]` against the entry's activations, taken
    group by group: `Σ_g s(scale_g) · (Σ_{j in g} E2M1(code_j) · x_j)`.

    The pass gives the function a second body, chosen at run time by
    `scf.if` (activations and packed weights 16-byte aligned, scales 4-byte
    aligned, K % 32 == 0, N % (16 x tiles) == 0, at least one entry): a
    `gpu.launch` with a block of four warps per (segment, 64 x tiles rows), a
    segment being up to 8 consecutive entries of `order` with one expert
    that start where `rank` is a multiple of 8 (cut at multiples of 8 of
    the position instead, an expert whose entries straddle one was read
    twice: 8% more weight bytes at a batch of 64). Each warp computes
    16 x tiles rows x 8 entries with `nvvm.mma.sync` m16n8k16 (bf16
    operands, f32 accumulators), its `tiles` m tiles (`up-tiles` of a
    two-matrix stage, `down-tiles` of a one-matrix stage, 2 by default)
    against the same activation fragments: every 32-element group is two
    mma steps from a zero accumulator, scaled and added to the row sums in
    group order. A lane reads its words of 4 groups at a time (when 4
    divides the groups) straight from global memory, or with `staged` (slower on the H200: off by default) each
    warp streams its 16 rows in units of 4 groups through a 4-stage ring in
    workgroup memory (`memref.global`s of i8, 16-byte aligned: per stage
    and matrix 16 x 64 bytes of codes, group j of row r at 16-byte piece
    j ^ (r / 2 % 4) against bank conflicts, and 16 x 4 bytes of scales)
    with `nvgpu.device_async_copy`, three units in flight; the remaining
    groups are read from global memory one at a time. A lane reads one
    4-byte word of each of its two rows per group (codes decoded to bf16 in
    registers:
    the code's bits placed as a bf16 of value E2M1 · 2^-126 and multiplied
    by 2^126, exact), and its entry's 8 activations of the same elements
    with one 16-byte load; the mma's k order is permuted alike in both
    operands. With `fold-scales` (on by default) a warp whose rows' scale
    bytes are all in [2, 127] (one pass over its scale words, `nvvm.vote`
    all) takes a second loop that folds each scale into the decode (the
    bf16 2^(e-1) instead of 2^126) and lets the mma accumulate the row
    sums across groups, without the E8M0 decode; with `wide-groups` (on by
    default) that loop gives each lane whole groups: with `lane-groups=2`
    (the default) lane t of a quad takes groups c0 + 2t and c0 + 2t + 1 (32
    bytes per row, its 64 activations, one scale word per row), so the
    quad reads 128 contiguous bytes of a row; with `lane-groups=1` group
    c0 + t (64 bytes per quad). With `prefetch` (one group per lane only;
    off: no faster on the H200) each iteration's words are loaded one
    iteration ahead. An expert's weights are
    read once per segment instead of once per entry. The launch records
    `k3.mma_shape = [16, 8, 16]`, as
    k3-gpu-mma's. With `up-min-blocks` above 0 (0 by default) the kernel of
    a two-matrix (gate/up) stage is named `<function>_mma_kernel` and its
    function gets `k3.launch_bounds`, which k3-gpu-launch-bounds turns
    into `.minnctapersm` after outlining. Other functions and bodies are left alone (f32
    activations: no change). Needs sm_80 (bf16 mma.sync): with `sm` below
    80 nothing changes.
  }];
  let options = [
    Option<"sm", "sm", "int64_t", "90",
           "Oldest compute capability the library targets (x10)">,
    Option<"staged", "staged", "bool", "false",
           "Stream each warp's rows through cp.async rings in workgroup "
           "memory (H200: slower, BENCHMARKS.md twelfth session; off)">,
    Option<"foldScales", "fold-scales", "bool", "true",
           "Where every scale of a warp's 4-group unit is in [2, 127], fold "
           "the scales into the codes' decode and let the mma accumulate "
           "across groups (fewer instructions per weight byte; a different "
           "order of the row's sum; H200 B = 1 gate/up 0.400 -> 0.375 ms, "
           "BENCHMARKS.md thirteenth session)">,
    Option<"wideGroups", "wide-groups", "bool", "true",
           "With fold-scales: each lane of a quad reads whole groups of a "
           "row (lane-groups of them: 16 or 32 bytes, full 32-byte sectors "
           "per quad), so one mma step sums 4 groups (another order of the "
           "row's sum; H200, one group per lane, B = 1 gate/up 0.370 -> "
           "0.346 ms, down 0.188 -> 0.168)">,
    Option<"prefetchWords", "prefetch", "bool", "false",
           "With wide-groups: load each unit's code and scale words one "
           "loop iteration ahead (the same sums; H200: no faster, B = 1 "
           "gate/up 0.351 against 0.346 ms, BENCHMARKS.md thirteenth "
           "session: off)">,
    Option<"laneGroups", "lane-groups", "int64_t", "2",
           "With wide-groups: consecutive groups per lane, 1 or 2 (2: each "
           "quad reads 128 contiguous bytes of a row, another order of the "
           "row's sum; H200 B = 8 gate/up 2.491 -> 1.744 ms, B = 1 0.346 "
           "-> 0.326, BENCHMARKS.md fourteenth session; prefetch needs 1)">,
    Option<"upMinBlocks", "up-min-blocks", "int64_t", "0",
           "Resident blocks of 128 threads per SM that the registers of a "
           "two-matrix (gate/up) kernel must allow (k3.launch_bounds for "
           "k3-gpu-launch-bounds; ptxas caps the registers, 80 for 6, and "
           "may spill; 0: no bound). 6 puts K3's batch-1 gate/up grid (768 "
           "blocks) in one wave on 132 SMs: H200 B = 1 gate/up 0.328 -> "
           "0.260 ms with up-tiles=1 (fourteenth session). With up-tiles=2, "
           "the default, that grid is 384 blocks, one wave at 3 blocks per "
           "SM, and a bound of 4 was slower (BENCHMARKS.md sixteenth "
           "session)">,
    Option<"upTiles", "up-tiles", "int64_t", "2",
           "m16 row tiles per warp of a two-matrix (gate/up) stage, 1, 2 or "
           "4 (2: 32 rows per warp against the same activation fragments, "
           "half the activation loads per weight byte; needs staged=false; "
           "140 registers; H200 gate/up B = 64 9.10 -> 8.80 ms, B = 1 "
           "0.258 -> 0.254, BENCHMARKS.md sixteenth session)">,
    Option<"downTiles", "down-tiles", "int64_t", "2",
           "m16 row tiles per warp of a one-matrix (down) stage, 1, 2 or 4, "
           "as up-tiles (H200, 2: down B = 8 1.074 -> 0.866 ms, B = 64 6.02 "
           "-> 4.83, B = 1 0.163 -> 0.150, sixteenth session; 4, 142 "
           "registers, was slower: B = 8 0.956, B = 64 4.60 against 0.866, "
           "4.49, seventeenth session)">,
    Option<"groupsInFlight", "groups-in-flight", "int64_t", "8",
           "Without staged: groups whose loads a warp issues together, "
           "over the matrices (a multiple of 4 from 4 to 32; the same sums; "
           "H200, one group per lane: 16 is slower than 8 at B = 1 and "
           "slower than lane-groups=2 at B = 8)">,
    Option<"prefetchL2", "prefetch-l2", "int64_t", "0",
           "Without staged: in each iteration of the unit loop, lane r of a "
           "warp asks L2 (one cp.async.bulk.prefetch per matrix, sm_90) for "
           "the codes of its row r that the iteration this many ahead reads "
           "(0 to 16; 0: none; the same sums)">
  ];
  let dependentDialects = ["::mlir::gpu::GPUDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::LLVM::LLVMDialect",
                           "::mlir::NVVM::NVVMDialect",
                           "::mlir::nvgpu::NVGPUDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::vector::VectorDialect",
                           "::mlir::scf::SCFDialect"];
}

def K3GPUAttnResNormPass : Pass<"k3-gpu-attn-res-norm", "::mlir::ModuleOp"> {
  let summary = "AttnRes with the RMSNorm after it, and RMSNorm, in one kernel per token";
  let description = [{
    A function marked `k3.attn_res_norm = {widen = @w, narrow = @n, round =
    @r}` (`Kernels/Dense.mlir`: @k3k_attn_res_norm_rows) with arguments the
    candidates v as the blocks `[n - 1, T, D]` and the last one `[1, T, D]`,
    γ `[D]`, p `[1, D]`, eps, the norm's γ `[D]`, its eps and the output
    `[T, D]` computes RMSNorm(AttnRes(v)) (K3_SPEC
    §3.1, §2) as the two generic kernels: about ten launches, each of a few
    blocks, per sublayer of a decode step. The pass gives it a second body,
    chosen at run time by `scf.if` (D a multiple of 16 bytes of activations,
    n <= 32, the buffers aligned for 16-byte loads): a `gpu.launch` with one
    block of 1024 threads per token. Per candidate the threads sum v² and
    (γ ⊙ p)·v over their elements and an xor-shuffle tree per warp; after
    one barrier for all the candidates, a tree over the 32 warps' sums
    gives each score in every thread (thread 0 keeps it in workgroup
    memory); every thread takes the softmax itself, mixes its elements of h
    in candidate order, stores round(h) and sums its squares (the same
    reduction), and normalises what it stored. The element operations are
    the generic kernels' (@w, @n, @r for the activation dtype); only the
    order of the three sums over D differs (docs/NUMERICS.md). Other shapes
    keep the generic kernels. With arguments (blocks, a, b, γ, p, eps, norm
    γ, norm eps, output, sum `[1, T, D]`) (@k3k_attn_res_norm_add_rows) the
    last candidate is round(a + b): each thread first stores its pieces of
    it into the sum (the generic add's element operations) and reads them
    back as the last candidate, so the residual add needs no kernel.
    Where every 16-byte piece of a row has a thread (D <= 1024 pieces),
    the kernel takes a second body: γ, p and the norm's γ loaded first,
    the thread's piece of each row (the sum, h) kept in registers rather
    than read back, and each next candidate loaded before the sums of this
    one; the same terms and stores (the same bits).

    A function marked `k3.rms_norm` alike (`Kernels/Dense.mlir`:
    @k3k_rms_norm_rows) with arguments x `[T, D]`, γ `[D]`, eps and the
    output `[T, D]` computes RMSNorm(x) (§2) in four launches of the generic
    kernels; it gets the same block per token (D a multiple of 16 bytes,
    x, γ and the output aligned for 16-byte loads): the block's sum of
    squares, then round(round(x · inv) · γ) of each thread's pieces. With
    arguments y `[T, k, D]` (f32) and ω `[T, k]` in place of x
    (`Kernels/MoE.mlir`: @k3k_experts_combine_norm_rows, the latent RMSNorm
    of the MoE's weighted sum, §6.2) x is r = round(Σ_s ω_s y_s): each
    thread first makes its pieces of r (the sum from 0, s ascending, as the
    generic weighted sum) and stores them into the output, where the norm
    reads them back, so the weighted sum needs no kernel of its own (y
    aligned for loads of as many f32 as a 16-byte piece of activations
    holds: 32 bytes for bf16). With one piece per thread, the norm's γ is
    loaded first and x (or r) stays in registers for the norm.
  }];
  let dependentDialects = ["::mlir::gpu::GPUDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::func::FuncDialect",
                           "::mlir::math::MathDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::vector::VectorDialect",
                           "::mlir::scf::SCFDialect"];
}

def K3GPURoutePass : Pass<"k3-gpu-route", "::mlir::ModuleOp"> {
  let summary = "Each token's top-k experts and their weights in one kernel";
  let description = [{
    A function marked `k3.route` (`Kernels/MoE.mlir`: @k3k_route_rows) with
    arguments the router's scores `[T, E]` and bias `[E]` (f32), `renorm`
    (i1), `scaling` (f32) and the outputs idx `[T, k]` (i64) and ω `[T, k]`
    (f32) selects each token's k experts by the keys s + b, best first,
    equal keys by expert index, NaN keys last (expert 0, weight 0), and
    writes ω = s / (Σ_sel s + 1e-20) · scaling (without `renorm`, s ·
    scaling) (K3_SPEC §6.1). Its generic kernels rank every expert against
    all E keys, then scale the weights in a second kernel. The pass gives it
    a second body, chosen at run time by `scf.if` (T >= 1, 1 <= k <= 32,
    k <= E <= 1024, outputs `[T, k]`, bias `[E]`): a `gpu.launch` with one
    block of 1024 threads per token, thread e holding expert e as an
    unsigned word that orders as the keys do (then 1 for a NaN key, 0 once
    taken). Each of k rounds takes the largest word and the lowest index
    holding it with `nvvm.redux.sync` over each warp, then over the 32
    warps' pairs (workgroup memory, two buffers, one barrier per round); the
    winner writes its slot. Then lane l of warp 0 takes slot l's weight,
    the warp sums them as the generic kernel does on a GPU (each lane's
    term added to 0, then the xor-shuffle tree of `k3-gpu-warp-reduce`),
    and each lane scales its own: the same operations in the same order,
    the same bits. Other shapes keep the generic kernels, and
    so do libraries for a target below sm_80 (no `redux.sync`).
  }];
  let options = [
    Option<"sm", "sm", "int64_t", "90",
           "Oldest compute capability the library targets (x10); below 80 "
           "there is no redux.sync and the pass changes nothing">
  ];
  let dependentDialects = ["::mlir::gpu::GPUDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::NVVM::NVVMDialect",
                           "::mlir::scf::SCFDialect"];
}

def K3GPUKDARecurrentPass : Pass<"k3-gpu-kda-recurrent", "::mlir::func::FuncOp"> {
  let summary = "The KDA decode step in one kernel, one pass over the state";
  let description = [{
    A function marked `k3.kda_recurrent = {widen, narrow, inv, gate,
    sigmoid}` (`Kernels/KDA.mlir`: @k3k_kda_step, tokens that each have
    their own state) with arguments q, k, v, f `[T, H, D]`, the pre-sigmoid
    β `[T, H]` (the activation type), A_log, the gate bias δ `[H·D]`, the
    f32 state pool `[S, H, V, K]` (a strided view), i32 slots, out
    `[T, H, V]` and the scalars (softplus gate, lower bound, q scale, L2
    eps, value-first layout) makes q and k L2-normalised, g and β (K3_SPEC
    §4.3–4.4), then S ← (I − β k kᵀ) Diag(α) S + β k vᵀ and o = Sᵀ q (§4.5),
    rounded into out: two loops for the prologue, three parallel loops each
    reading every state row, and the rounding. The pass gives it a second
    body, chosen at run time by `scf.if` (a value-first pool whose rows are
    contiguous and 16-byte aligned, K = 64 or 128, V a multiple of 4, k and f
    of q's shape, q, k and f aligned for P-element loads): one `gpu.launch`
    with one warp per (token, head) and 4 consecutive v, each lane holding
    P = K / 32 consecutive elements of each of the 4 rows in registers
    (loaded first), which makes its head's normalised q and k, α = exp(g)
    and β through the named functions (each norm's sum of squares as the
    generic kernels' warp split takes it: lane l's terms l, l + 32, ... in
    order, then an xor-shuffle tree), so that the state is read once and
    written once: per row u = β (v − k·(αS)[:, v]) and o = q·S[:, v] as each
    lane's terms in order and an xor-shuffle tree over the warp
    (`gpu.shuffle`, the same in every lane), o narrowed as it is stored.
    Other layouts and widths keep the loops.
  }];
  let dependentDialects = ["::mlir::gpu::GPUDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::math::MathDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::vector::VectorDialect",
                           "::mlir::scf::SCFDialect"];
}

def K3GPUGatedNormPass : Pass<"k3-gpu-gated-norm", "::mlir::func::FuncOp"> {
  let summary = "KDA's gated RMSNorm in one kernel, a warp per head";
  let description = [{
    A function marked `k3.gated_rms_norm = {widen, narrow}`
    (`Kernels/Dense.mlir`: @k3k_gated_rms_norm_rows, K3_SPEC §4.7) with
    arguments o and z `[T, H, V]` (the activation type), f32 γ `[V]`, f32
    eps and out `[T, H, V]` stores round(o / sqrt(mean(o²) + eps) · γ ·
    σ(z)) per (token, head): the generic kernels' sums of squares, then the
    elementwise norm (two launches). The pass gives it a second body, chosen
    at run time by `scf.if` (V a multiple of 32, z, out and γ of o's
    shape): one `gpu.launch` with a warp per (token, head), lane l holding
    values l, l + 32, ...; the sum of squares is each lane's terms in that
    order, then an xor-shuffle tree over the warp (`gpu.shuffle`, the
    generic kernels' warp split), and each lane normalises its values with
    the generic body's operations in its order (the same bits). Other widths
    keep the loops.
  }];
  let dependentDialects = ["::mlir::gpu::GPUDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::math::MathDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::scf::SCFDialect"];
}

def K3GPUKDADecodePass : Pass<"k3-gpu-kda-decode", "::mlir::ModuleOp"> {
  let summary = "A KDA layer's decode step (convolutions, step, gated norm) in one kernel";
  let description = [{
    A function marked `k3.kda_decode = {widen, narrow, inv, gate, sigmoid}`
    (`Kernels/KDA.mlir`: @k3k_kda_decode, tokens that each have their own
    state, K3_SPEC §4.2–4.7) with arguments (x `[T, C]`, w `[C, 1, W]`,
    tails `[S, C, W - 1]`, i32 slots) of the q, k and v convolutions, f
    `[T, H, K]`, the pre-sigmoid β `[T, H]`, A_log, the gate bias δ, the
    f32 state pool `[S, H, V, K]`, slots, the gate z `[T, H, V]`, f32 γ
    `[V]`, eps, out `[T, H, V]` and the scalars (softplus gate, lower
    bound, q scale, L2 eps, value-first layout) convolves q, k and v and
    shifts their tails, runs the KDA step and stores the gated RMSNorm of
    its output: three kernels (the convolutions, `k3-gpu-kda-recurrent`'s,
    `k3-gpu-gated-norm`'s). The pass gives it a second body, chosen at run
    time by `scf.if` (a value-first pool of rows contiguous and 16-byte
    aligned, K = 64 or 128, V = 64 or 128, the convolutions' channels H·K,
    H·K and H·V with as many slots as the state, f aligned for P-element
    loads, at most `max-tokens` tokens): one `gpu.launch` with a block per
    (token, head) of V / `rows` warps (a launch of static size per K and
    V, so that ptxas fits the registers to the block). Each warp loads its
    `rows` state rows (lane l elements P l ..
    P l + P - 1, P = K / 32); the block's threads convolve the head's 2K + V
    channels, one each, with the generic kernel's operations in its order,
    into a workgroup buffer (`memref.global` `k3k_kda_decode_head`) and
    shift each channel's tail; after a barrier each warp makes q, k, g and
    β and updates its rows as `k3-gpu-kda-recurrent`'s warps do, o rounded
    into the buffer; after another each warp takes the head's sum of
    squares of o as `k3-gpu-gated-norm`'s warp does (lane l's values l,
    l + 32, ..., then an xor-shuffle tree) and normalises its rows. The
    same bits as the three kernels, in one launch. Other shapes and larger
    batches keep the generic body.
  }];
  let options = [
    Option<"rows", "rows", "int64_t", "8",
           "State rows per warp, 4 or 8: a block of V / rows warps (H200, "
           "4 of 64 registers was slower at every batch than 8 of 128: "
           "B = 8 0.138 against 0.129 ms, B = 64 1.116 against 1.038; "
           "BENCHMARKS.md twenty-ninth session)">,
    Option<"sm", "sm", "int64_t", "90",
           "Oldest compute capability the library targets (x10)">,
    Option<"prefetchNext", "prefetch-next", "bool", "false",
           "Warp 0 of each block asks L2 (cp.async.bulk.prefetch, sm_90) "
           "for the state of the block that runs next on its SM (the block "
           "index plus the SMs), while its own loads wait (the same bits)">,
    Option<"maxTokens", "max-tokens", "int64_t", "8",
           "Most tokens the kernel takes (0: any); more take the generic "
           "body's three kernels (H200, the three layers' KDA: B = 1 0.043 "
           "-> 0.026 ms, B = 4 0.075 -> 0.067; B = 8 0.134 -> 0.123 since "
           "the early loads (BENCHMARKS.md, thirty-second session); B = 64 "
           "0.92 -> 1.05: one block per SM, its registers, so each SM runs "
           "a batch's blocks one after another)">
  ];
  let dependentDialects = ["::mlir::gpu::GPUDialect",
                           "::mlir::LLVM::LLVMDialect",
                           "::mlir::NVVM::NVVMDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::math::MathDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::vector::VectorDialect",
                           "::mlir::scf::SCFDialect"];
}

def K3GPUSkinnyMMAPass : Pass<"k3-gpu-skinny-mma", "::mlir::ModuleOp"> {
  let summary = "Products of a few tokens (a decode step) on the tensor cores";
  let description = [{
    A function marked `k3.skinny_matmul = {out = @o}` with arguments x
    `[T, K]`, bf16 W `[N, K]` and an output `[T, N]` (`Kernels/Dense.mlir`:
    the products of 1 to 15 tokens) computes `out[t, n] = o(Σ_k x[t, k] ·
    W[n, k])` with f32 sums; with arguments x, W_1 .. W_m, out_1 .. out_m
    (k3-group-calls' `<few>_x<m>`) the m products of x. With bf16 x, the
    pass gives it a second body, chosen at run time by `scf.if` (1 <= T <=
    16, K % 128 == 0, every N % 16 == 0, x and every W 16-byte aligned, the
    split matrices' row blocks within the counters): one `gpu.launch` (a
    1-D grid over the matrices' blocks in turn, each block selecting its
    W, output, workspace and counters; with `out = [@o_1, ..., @o_m]`, one
    function per matrix, the outputs may differ in element type and a block
    stores through a `scf.index_switch` on its matrix) with a block of four warps per 16
    rows of W and slice of K (S slices of whole chunks, S = max(1, min(528
    / (N / 16), K / 512)) per matrix: narrow outputs such as a router's
    fill the GPU), the warps taking the slice's 128-element chunks in turn
    (w, w + 4, ...). Each warp copies its chunks into a 3-stage ring in
    workgroup memory (one 48 KB `memref.global`, 16-byte aligned) with
    `nvgpu.device_async_copy` (cp.async, 16 bytes per lane, whole 256-byte
    row pieces, bit 2 of the piece index flipped in odd rows against bank
    conflicts), waits for the oldest with `nvgpu.device_async_wait`, and
    runs `nvvm.mma.sync` m16n8k16 (bf16, f32 accumulators) with W as A and
    the tokens as one (T <= 8) or two n8 tiles of B read from global memory,
    the k order permuted alike in both operands so that each lane reads 8
    consecutive elements. The warps' sums meet in the ring and each output
    is `o` of their sum in warp order; with S > 1 the block stores that sum
    in an `[S, T, N]` workspace, counts itself in a per-row-block counter
    (a zeroed `memref.global` in device memory, `memref.atomic_rmw`
    between `nvvm.memory.barrier`s), and the last block of the row block
    adds the slices' sums in slice order, stores `o` of the total and
    resets the counter. The split depends on N and K only and a token's
    outputs on its own column only. f32 activations or `sm` below 80: no
    change.

    With the key `addend` (arguments x, W, r `[T, N]`, output; `o` takes
    the sum and `r[t, n]`) each stored output is `o(sum, r[t, n])`
    (`@k3k_linear_add_few`: the MoE's round(round(R) + Sh)). With
    `addend` and `combine_norm = {widen, narrow, round}` (arguments the
    experts' y `[T, k, D]` f32, ω `[T, k]` f32, γ `[D]`, eps, W, r,
    output: `@k3k_latent_up_add_few`) x is RMSNorm(Σ_s ω_s y_s; γ), made in
    the same launch (also needing y 32-byte and γ 16-byte aligned): its
    first 8 T blocks are, per token, the 32 warps of
    k3-gpu-attn-res-norm's block for that norm (the same terms and trees),
    each storing r = round(Σ_s ω_s y_s) and its warps' sums of squares in
    the workspace and counting itself in a zeroed device `memref.global`;
    the product blocks start their first stages, wait for the count
    (`ld.acquire.gpu`, `nvvm.nanosleep` between reads), take each token's
    1 / rms from the 32 sums with the norm kernel's tree and normalise r
    as they read it; the last product block resets the counts.

    With `attn_res = {widen, narrow, round, residual}` (k3-group-calls: an
    AttnRes with its norm joined to the products of its output; after the
    other arguments the blocks `[n - 1, T, D]`, the last candidate `[1, T,
    D]` or with `residual` the terms a and b of that sum, γ `[D]`, p `[1,
    D]`, eps, the norm's γ and eps, and with `residual` the sum's buffer)
    x is RMSNorm(AttnRes(...)), made in the same launch for D <= 8192: its
    first 8 T blocks are, per token, the 32 warps of
    k3-gpu-attn-res-norm's block for the AttnRes (the same terms and
    trees), one 16-byte piece of the row per thread: the residual sum
    stored, each candidate's warp sums stored and counted (count 2 of a
    zeroed device global of 4), then, once all 8 T have counted, the
    scores, the softmax, h and the warps' sums of squares (count 0), then,
    once all have counted again, the normalised piece into x's buffer
    (count 3); the product blocks wait for count 3 and read x as it is.

    With `m-tiles=2` (`k3c --gpu-skinny-m-tiles=2`), from 4 tokens, a
    matrix not split over K (S = 1) with N % 32 == 0 has blocks of four
    warps over 32 rows of W (two m16 tiles per warp, each B fragment of
    the tokens read once for both), whose ring stages are the two
    64-element halves of each 128-element chunk (the same 48 KB): half the
    reads of x per byte of W. Other matrices keep 16-row blocks; a block
    takes its body by its matrix. The chunks, their order per warp, the
    warps' order and S (from blocks of 16 rows) are those of `m-tiles=1`,
    so the sums are the same bits. Measured slower (H100, forty-second
    session: batch-8 products 1.573 -> 1.671 ms per step), so off.

    With `prefetch-l2=B` (`k3c --gpu-skinny-prefetch-l2=B`, sm_90) each
    product block, once its warps have issued their first stages, has
    thread r of its rows issue one `nvvm.cp.async.bulk.prefetch` (L2) of
    the next min(B, rest) bytes of row r of its slice: the bytes a block
    reads later are on their way while it waits for the producers
    (`combine_norm`, `attn_res`) and while the ring fills. A prefetch
    changes no value.
  }];
  let options = [
    Option<"sm", "sm", "int64_t", "90",
           "Oldest compute capability the library targets (x10)">,
    Option<"mTiles", "m-tiles", "int64_t", "1",
           "m16 tiles of W per warp (1 or 2): a block's rows are 16 m-tiles "
           "(2: slower on the H100, BENCHMARKS.md forty-second session)">,
    Option<"prefetchL2", "prefetch-l2", "int64_t", "0",
           "Bytes of each of its rows a block asks L2 for, past its ring's "
           "first stages, before it waits for anything (0: none; a multiple "
           "of 256 up to 65536; sm_90)">
  ];
  let dependentDialects = ["::mlir::gpu::GPUDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::math::MathDialect",
                           "::mlir::LLVM::LLVMDialect",
                           "::mlir::NVVM::NVVMDialect",
                           "::mlir::nvgpu::NVGPUDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::vector::VectorDialect",
                           "::mlir::scf::SCFDialect"];
}

def K3GPUMLASoftmaxPass : Pass<"k3-gpu-mla-softmax", "::mlir::ModuleOp"> {
  let summary = "The MLA decode softmax in one kernel, a block per head";
  let description = [{
    A function marked `k3.mla_softmax` (`Kernels/MLA.mlir`:
    @k3k_mla_softmax; arguments p `[T, NH, CAP]` f32, ntk `[T]` index, pmax
    `[T, NH, C]`, rowmax `[T, NH]`, psum `[T, NH, C]`, rowsum `[T, NH]` f32,
    C = ⌈CAP / 512⌉) gets a second body, chosen at run time by `scf.if`
    (those shapes): one `gpu.launch` of 16 warps per (head, token). Warp w
    takes the 512-row chunks w, w + 16, ... (a lane's 16 rows of a chunk
    loaded together): the maximum over rows below n_i (lane, xor-shuffle
    tree, the warps' maxima through workgroup memory, global
    `k3k_mla_softmax_maxima`, one barrier), then per chunk exp(s - max)
    stored in place and summed per lane in row order, the warp's tree into
    psum; after a barrier warp 0 sums the chunks (lane l: l, l + 32, ...,
    then the tree) into rowsum. These are the orders of the generic body's
    kernels after `k3-gpu-warp-reduce`, so p and rowsum have their bits;
    pmax and rowmax are not written. Runs before `k3-gpu-warp-reduce`.
  }];
  let dependentDialects = ["::mlir::gpu::GPUDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::math::MathDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::scf::SCFDialect"];
}

def K3GPUMLAMMAPass : Pass<"k3-gpu-mla-mma", "::mlir::ModuleOp"> {
  let summary = "MLA decode scores and weighted sums on the tensor cores";
  let description = [{
    `Kernels/MLA.mlir` computes the absorbed decode attention's two heavy
    stages in functions of their own: `k3.mla_scores` (qt `[T, W, HP]` f32,
    the cache pool `[rows, W]`, rows `[T, CAP]`, ntk `[T]`, p `[T, NH, CAP]`
    f32, scale) and `k3.mla_wsum` (p, pool, rows, ntk, partial
    `[T, NH, S, R]` f32). With a bf16 cache the pass gives each a second
    body, chosen at run time by `scf.if` (16-byte aligned pool; scores:
    W % 32 == 0, CAP % 128 == 0; sums: R % 64 == 0):
    `nvvm.mma.sync` m16n8k16 with f32 accumulators and the f32 operand (q̂,
    p) split into three bf16 parts (hi, mid, lo), so that each product is
    exact and only the order of the sum changes. Scores: a parallel loop
    writes the q̂ parts (`[T, 3, heads padded to 32, W]` bf16), then a
    `gpu.launch` of 4 warps per 128 rows and 32 heads, each warp 32 heads x
    32 rows (two m16 tiles, four n8 tiles), the block streaming each step's
    32 elements of its rows and of the q̂ parts through a cp.async ring of
    `score-stages` stages in workgroup memory (global
    `k3k_mla_scores_ring<stages>`), one barrier per step. Sums: a
    `gpu.launch` of 4 warps per (slice, 256 columns, 32 heads, token), a
    warp per 64 columns, each streaming 16 cache rows and its p per step
    through a cp.async ring of `sum-stages` stages in workgroup memory
    (globals `k3k_mla_wsum_cache<stages>` and `k3k_mla_wsum_p<stages>`);
    each step's p is split once per block (`nvvm.convert.f32x2.to.bf16x2`)
    into the A words of two steps in turn (global `k3k_mla_wsum_split`), a
    barrier between; the CUDA-core body's slices. f32 caches or `sm` below
    80: no change.
  }];
  let options = [
    Option<"sm", "sm", "int64_t", "90",
           "Oldest compute capability the library targets (x10)">,
    Option<"scoreStages", "score-stages", "int64_t", "2",
           "Stages of the scores' cp.async ring (2 or 3; on the H200 2 "
           "measured faster, BENCHMARKS.md, nineteenth session)">,
    Option<"sumStages", "sum-stages", "int64_t", "4",
           "Stages of the weighted sums' cp.async rings (2 to 4; on the "
           "H200 4 measured faster than 3)">
  ];
  let dependentDialects = ["::mlir::gpu::GPUDialect",
                           "::mlir::arith::ArithDialect",
                           "::mlir::LLVM::LLVMDialect",
                           "::mlir::NVVM::NVVMDialect",
                           "::mlir::nvgpu::NVGPUDialect",
                           "::mlir::memref::MemRefDialect",
                           "::mlir::vector::VectorDialect",
                           "::mlir::scf::SCFDialect"];
}

def K3GPUTileAndMapPass : Pass<"k3-gpu-tile-and-map"> {
  let summary = "Tile parallel loops and map them to GPU blocks and threads";
  let description = [{
    Each outermost `scf.parallel` (one kernel after
    `convert-parallel-loops-to-gpu`) has its innermost dimension tiled by
    `tile-size`, the tile mapped to thread x. The grid takes the dimensions
    innermost first: block x, y, z (y and z are limited to 65535 blocks, x to
    2^31 - 1, so the widest, contiguous output dimension such as the
    vocabulary goes on x); further dimensions and nested parallel loops are
    sequential in each thread. Writes the `mapping` attribute that
    `convert-parallel-loops-to-gpu` reads.
  }];
  let options = [
    Option<"tileSize", "tile-size", "int64_t", "64",
           "Threads per block along the innermost dimension">
  ];
  let dependentDialects = ["::mlir::gpu::GPUDialect",
                           "::mlir::affine::AffineDialect",
                           "::mlir::arith::ArithDialect"];
}

def K3GPULaunchBoundsPass : Pass<"k3-gpu-launch-bounds", "::mlir::ModuleOp"> {
  let summary = "Give kernels the occupancy their launching pass asked for";
  let description = [{
    A pass that builds a `gpu.launch` may ask that its kernel leave room for
    a number of resident blocks per SM: it names the kernel (the launch's
    `function` attribute) and puts `k3.launch_bounds = {name = blocks}` on
    the function that holds the launch (gpu-kernel-outlining drops the
    launch's own attributes). Run after outlining, this pass gives each
    kernel so named that the function launches `nvvm.minctasm = blocks`:
    PTX `.minnctapersm`, which with the `.maxntid` of the kernel's known
    block size lets ptxas cap the registers per thread (65536 / (threads x
    blocks), spilling what does not fit; PTX ISA, "Performance-Tuning
    Directives"). The attribute is then removed. An attribute that is not
    such a dictionary, a count outside 1-32, or a name the function does
    not launch is an error.
}];
}

def K3GPUKernelAccessPass : Pass<"k3-gpu-kernel-access", "::mlir::ModuleOp"> {
  let summary = "Tell the runtime which buffers each kernel reads and writes";
  let description = [{
    A decode step's kernels form chains with side branches (a MoE layer's
    shared experts beside its routed ones); the runtime (libk3rt_cuda)
    replays a call's launches as CUDA graphs and can let independent
    kernels run side by side, if it knows what each kernel touches. After
    outlining, this pass defines for each kernel `@k` of each `gpu.module`
    the device constant `k_k3_access`: a string with one character for
    the kernel's module, then one per parameter of the kernel as launched
    (a memref of rank R is 3 + 2R parameters: its two pointers, offset,
    sizes and strides):

    - first: `g` if the kernel writes a global of its module in global
      memory (k3-gpu-skinny-mma's and k3-gpu-mma's split-K counters, so two
      launches of it must not overlap), else `-`;
    - a memref's two pointers: `w` if the kernel may write through it, `r`
      if it only reads, `-` if it does not use it; every other parameter
      `-`.

    A memref is followed through view-like ops (subview, cast,
    reinterpret_cast, collapse/expand_shape, extract_strided_metadata's
    base); a use whose effects are not known (a call, a pointer taken
    with extract_aligned_pointer_as_index) counts as a write. A kernel
    with an argument that is neither a ranked memref nor a number gets no
    constant (the runtime then orders it after every kernel before it).

    ```mlir
    gpu.func @k(%x: memref<?xf32>, %y: memref<?xf32>, %n: index) kernel
    // gets, beside it,
    llvm.mlir.global external constant @k_k3_access("-rr---ww----") {addr_space = 1 : i32}
    ```
  }];
  let dependentDialects = ["::mlir::LLVM::LLVMDialect"];
}

def K3GPUDependentLaunchPass : Pass<"k3-gpu-dependent-launch", "::mlir::ModuleOp"> {
  let summary = "Let each kernel launch while the kernel before it finishes";
  let description = [{
    Programmatic dependent launch (sm_90; CUDA Programming Guide,
    "Programmatic Dependent Launch and Synchronization"). A decode step is
    a chain of about 190 kernels (K3's widths at batch 1), most of them a
    few microseconds long; between two of them the GPU drains the first
    grid before it dispatches the second. With a programmatic edge from one
    kernel to the next, the next grid's blocks are dispatched while the
    first one's last blocks run, and wait there for its results.

    After outlining, each kernel of each `gpu.module` starts with
    `griddepcontrol.wait` (every thread: nothing it reads or writes before
    the kernel before it has finished and its writes are visible) and then
    `griddepcontrol.launch_dependents` (the next kernel may be dispatched).
    The wait comes before any branch, so a kernel with nothing to do still
    ends after its predecessor, and a chain of kernels stays ordered.

    Because a kernel launched with a programmatic edge races with its
    predecessor unless it waits, the pass also defines, in each
    `gpu.module`, the device global `k3_dependent_launch` (an i32, 1): the
    runtime (libk3rt_cuda) joins the kernels of a module with programmatic
    edges only when the module has it, and any other kernel with an
    ordinary edge. With `sm` below 90 the pass does nothing.

    Not in k3c's default pipeline (`k3c --gpu-dependent-launch` adds it):
    on the H200 the graphs already leave about 0.02 ms of gaps per batch-1
    step, and the same library with ordinary edges was as fast or faster
    (BENCHMARKS.md, thirteenth session).

    ```mlir
    gpu.func @k(...) kernel { ... }
    // becomes
    gpu.func @k(...) kernel {
      nvvm.griddepcontrol wait
      nvvm.griddepcontrol launch_dependents
      ...
    }
    llvm.mlir.global external @k3_dependent_launch(1 : i32) {addr_space = 1 : i32} : i32
    ```
  }];
  let options = [
    Option<"sm", "sm", "int64_t", "90",
           "Oldest compute capability the library targets (x10)">
  ];
  let dependentDialects = ["::mlir::gpu::GPUDialect",
                           "::mlir::LLVM::LLVMDialect",
                           "::mlir::NVVM::NVVMDialect"];
}

def K3GPUFatbinPass : Pass<"k3-gpu-fatbin", "::mlir::ModuleOp"> {
  let summary = "One fatbin per GPU binary: a cubin and PTX for each target";
  let description = [{
    Runs after `gpu-module-to-binary{format=isa}`: each `gpu.binary` then
    holds the PTX of its `gpu.module` for every `#nvvm.target` attached to it
    (`--target=sm_90,sm_100` attaches two). For each target the PTX is
    assembled with the CUDA toolkit's `ptxas` into a cubin; `fatbinary`
    packs all cubins together with all PTX (uncompressed, the JIT fallback
    for newer GPUs) into one fatbin, which replaces the objects. The driver
    picks the cubin of the GPU it runs on. The toolkit is found through
    CUDA_HOME, CUDA_ROOT or CUDA_PATH, else /usr/local/cuda, else PATH.
    Compiling needs no GPU and no driver.

    ```mlir
    gpu.binary @k [#gpu.object<#nvvm.target<chip = "sm_90">, assembly = "...">,
                   #gpu.object<#nvvm.target<chip = "sm_100">, assembly = "...">]
    // becomes
    gpu.binary @k [#gpu.object<#nvvm.target<chip = "sm_90">, "fatbin bytes">]
    ```
  }];
  let options = [
    Option<"optLevel", "opt-level", "unsigned", "3",
           "ptxas optimisation level">
  ];
  let dependentDialects = ["::mlir::gpu::GPUDialect"];
}

#endif // K3_CONVERSION_PASSES_TD
