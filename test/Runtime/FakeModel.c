/*===- FakeModel.c - a fake k3c library for the runtime tests -------------===*
 *
 * A test fixture, not a runtime component: it exports the three symbols of
 * docs/ABI.md with a small hand-written manifest in the k3c format (tokens,
 * weights incl. an MXFP4 expert stack and an unused tensor, two KDA layers
 * with recurrent state and conv tails (slot pools and slots), two MLA
 * layers with pool, page tables and lengths, logits), and a k3_forward
 * that takes a segment of one sequence or a decode batch (docs/ABI.md) that is simple and deterministic but
 * exposes orchestration bugs: every logit row is a vector of features that
 * depend on the whole history of the sequence as seen through its state
 * (KDA slot, conv tails, MLA pages via the page table), plus checks of every
 * descriptor and of the "zeroed when handed out" rule. FakeModelRef.h
 * computes the same features from the token history alone.
 *
 * Per token `tok` at position p = len + t of its sequence (t = 0 in a
 * decode batch), in that sequence's slot and page table:
 *   KDA layer: S[0] += tok; S[1] += 1; S[2] = S[2] * 0.5 + tok; S[3] += p;
 *              conv_q[c] shifts in tok + c, conv_k[c] 2 tok + c,
 *              conv_v[c] p + c (bf16, oldest first).
 *   MLA layer l: row p of the cache (page_table[p / P], slot p % P) must be
 *              zero together with the rest of its page, then becomes
 *              [tok, p, l, tok + p, 1, 0]; the layer then "attends" over
 *              rows 0..p.
 *
 * Test hooks: K3FAKE_MANIFEST (text) or K3FAKE_MANIFEST_FILE (a path, read
 * once) and K3FAKE_ABI_VERSION in the environment replace the manifest and
 * ABI version; k3fake_set_forward_hook installs a
 * function called on entry to k3_forward; k3fake_forward_calls counts calls.
 * Built with -DK3FAKE_NO_FORWARD it lacks k3_forward.
 *
 *===----------------------------------------------------------------------===*/

#include "FakeModel.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

static const char manifest[] =
    "{\n"
    "  \"format\": \"k3c-manifest\",\n"
    "  \"version\": 1,\n"
    "  \"compiler\": {\"name\": \"k3c\", \"version\": \"" K3FAKE_K3C_VERSION "\"},\n"
    "  \"model\": {\"name\": \"fake-tiny\", \"model_type\": \"kimi_k3\", "
    "\"config_sha256\": \"" FAKE_CONFIG_SHA256 "\", \"vocab_size\": 32, \"hidden_size\": 4, "
    "\"num_layers\": 4, \"max_context\": 64},\n"
    "  \"targets\": [\"host\"],\n"
    "  \"layers\": [{\"index\": 0, \"mixer\": \"kda\", \"ffn\": \"dense\"}, "
    "{\"index\": 1, \"mixer\": \"mla\", \"ffn\": \"moe\"}, "
    "{\"index\": 2, \"mixer\": \"kda\", \"ffn\": \"moe\"}, "
    "{\"index\": 3, \"mixer\": \"mla\", \"ffn\": \"moe\"}],\n"
    "  \"moe\": {\"num_experts\": 3, \"top_k\": 1, \"expert_format\": "
    "\"mxfp4\"},\n"
    "  \"state\": {\"groups\": [\n"
    "    {\"kind\": \"kda.recurrent\", \"layers\": [0, 2], \"shape\": [2, 2, "
    "2], \"dims\": [\"heads\", \"value\", \"key\"], \"dtype\": \"f32\", "
    "\"layout\": \"value_first\", \"bytes_per_sequence_per_layer\": 32, "
    "\"bytes_per_sequence\": 64},\n"
    "    {\"kind\": \"kda.conv_q\", \"layers\": [0, 2], \"shape\": [4, 3], "
    "\"dims\": [\"channels\", \"taps\"], \"dtype\": \"bf16\", \"layout\": "
    "\"channels_major\", \"bytes_per_sequence_per_layer\": 24, "
    "\"bytes_per_sequence\": 48},\n"
    "    {\"kind\": \"kda.conv_k\", \"layers\": [0, 2], \"shape\": [4, 3], "
    "\"dims\": [\"channels\", \"taps\"], \"dtype\": \"bf16\", \"layout\": "
    "\"channels_major\", \"bytes_per_sequence_per_layer\": 24, "
    "\"bytes_per_sequence\": 48},\n"
    "    {\"kind\": \"kda.conv_v\", \"layers\": [0, 2], \"shape\": [4, 3], "
    "\"dims\": [\"channels\", \"taps\"], \"dtype\": \"bf16\", \"layout\": "
    "\"channels_major\", \"bytes_per_sequence_per_layer\": 24, "
    "\"bytes_per_sequence\": 48},\n"
    "    {\"kind\": \"mla.latent\", \"layers\": [1, 3], \"shape\": [6], "
    "\"dims\": [\"latent+rope\"], \"dtype\": \"bf16\", \"layout\": "
    "\"latent_then_rope\", \"page_size\": 4, \"bytes_per_token_per_layer\": "
    "12, \"bytes_per_token\": 24}],\n"
    "    \"bytes_per_sequence\": 208, \"bytes_per_token\": 24},\n"
    "  \"weights\": {\"tensor_count\": 10, \"bytes\": 858, "
    "\"expert_placeholder\": \"{e}\", \"tensors\": [\n"
    "    {\"name\": \"language_model.model.embed_tokens.weight\", \"shape\": "
    "[32, 4], \"dtype\": \"bf16\", \"bytes\": 256},\n"
    "    {\"name\": \"language_model.model.layers.0.self_attn.q_conv1d.weight\""
    ", \"shape\": [4, 1, 4], \"dtype\": \"f32\", \"bytes\": 64},\n"
    "    {\"name\": "
    "\"language_model.model.layers.0.self_attention_res_norm.weight\", "
    "\"shape\": [4], \"dtype\": \"bf16\", \"used\": false, \"bytes\": 8},\n"
    "    {\"name\": "
    "\"language_model.model.layers.1.block_sparse_moe.experts.{e}.w1."
    "weight_packed\", \"shape\": [4, 16], \"dtype\": \"u8\", "
    "\"quantization\": \"mxfp4.packed\", \"experts\": 3, \"bytes\": 64},\n"
    "    {\"name\": "
    "\"language_model.model.layers.1.block_sparse_moe.experts.{e}.w1."
    "weight_scale\", \"shape\": [4, 1], \"dtype\": \"u8\", "
    "\"quantization\": \"mxfp4.scale\", \"experts\": 3, \"bytes\": 4},\n"
    "    {\"name\": \"language_model.lm_head.weight\", \"shape\": [32, 4], "
    "\"dtype\": \"bf16\", \"bytes\": 256}]},\n"
    "  \"abi\": {\"version\": 2, \"entry\": \"k3_forward\", \"args\": [\n"
    "    {\"role\": \"tokens\", \"shape\": [-1], \"dtype\": \"i32\"},\n"
    "    {\"role\": \"weight\", \"name\": "
    "\"language_model.model.embed_tokens.weight\", \"shape\": [32, 4], "
    "\"dtype\": \"bf16\"},\n"
    "    {\"role\": \"weight\", \"name\": "
    "\"language_model.model.layers.0.self_attn.q_conv1d.weight\", \"shape\": "
    "[4, 1, 4], \"dtype\": \"f32\"},\n"
    "    {\"role\": \"weight\", \"name\": "
    "\"language_model.model.layers.1.block_sparse_moe.experts.{e}.w1\", "
    "\"part\": \"packed\", \"shape\": [3, 4, 16], \"dtype\": \"u8\"},\n"
    "    {\"role\": \"weight\", \"name\": "
    "\"language_model.model.layers.1.block_sparse_moe.experts.{e}.w1\", "
    "\"part\": \"scale\", \"shape\": [3, 4, 1], \"dtype\": \"u8\"},\n"
    "    {\"role\": \"weight\", \"name\": \"language_model.lm_head.weight\", "
    "\"shape\": [32, 4], \"dtype\": \"bf16\"},\n"
    "    {\"role\": \"state\", \"name\": \"kda.recurrent\", \"part\": "
    "\"pool\", \"layer\": 0, \"shape\": [-1, 2, 2, 2], \"dtype\": \"f32\"},\n"
    "    {\"role\": \"state\", \"name\": \"kda.recurrent\", \"part\": "
    "\"slots\", \"layer\": 0, \"shape\": [-1], \"dtype\": \"i32\"},\n"
    "    {\"role\": \"state\", \"name\": \"kda.conv_q\", \"part\": \"pool\", "
    "\"layer\": 0, \"shape\": [-1, 4, 3], \"dtype\": \"bf16\"},\n"
    "    {\"role\": \"state\", \"name\": \"kda.conv_q\", \"part\": \"slots\", "
    "\"layer\": 0, \"shape\": [-1], \"dtype\": \"i32\"},\n"
    "    {\"role\": \"state\", \"name\": \"kda.conv_k\", \"part\": \"pool\", "
    "\"layer\": 0, \"shape\": [-1, 4, 3], \"dtype\": \"bf16\"},\n"
    "    {\"role\": \"state\", \"name\": \"kda.conv_k\", \"part\": \"slots\", "
    "\"layer\": 0, \"shape\": [-1], \"dtype\": \"i32\"},\n"
    "    {\"role\": \"state\", \"name\": \"kda.conv_v\", \"part\": \"pool\", "
    "\"layer\": 0, \"shape\": [-1, 4, 3], \"dtype\": \"bf16\"},\n"
    "    {\"role\": \"state\", \"name\": \"kda.conv_v\", \"part\": \"slots\", "
    "\"layer\": 0, \"shape\": [-1], \"dtype\": \"i32\"},\n"
    "    {\"role\": \"state\", \"name\": \"mla.latent\", \"part\": \"pool\", "
    "\"layer\": 1, \"shape\": [-1, 4, 6], \"dtype\": \"bf16\"},\n"
    "    {\"role\": \"state\", \"name\": \"mla.latent\", \"part\": "
    "\"page_table\", \"layer\": 1, \"shape\": [-1, -1], \"dtype\": \"i32\"},\n"
    "    {\"role\": \"state\", \"name\": \"mla.latent\", \"part\": \"length\", "
    "\"layer\": 1, \"shape\": [-1], \"dtype\": \"i64\"},\n"
    "    {\"role\": \"state\", \"name\": \"kda.recurrent\", \"part\": "
    "\"pool\", \"layer\": 2, \"shape\": [-1, 2, 2, 2], \"dtype\": \"f32\"},\n"
    "    {\"role\": \"state\", \"name\": \"kda.recurrent\", \"part\": "
    "\"slots\", \"layer\": 2, \"shape\": [-1], \"dtype\": \"i32\"},\n"
    "    {\"role\": \"state\", \"name\": \"kda.conv_q\", \"part\": \"pool\", "
    "\"layer\": 2, \"shape\": [-1, 4, 3], \"dtype\": \"bf16\"},\n"
    "    {\"role\": \"state\", \"name\": \"kda.conv_q\", \"part\": \"slots\", "
    "\"layer\": 2, \"shape\": [-1], \"dtype\": \"i32\"},\n"
    "    {\"role\": \"state\", \"name\": \"kda.conv_k\", \"part\": \"pool\", "
    "\"layer\": 2, \"shape\": [-1, 4, 3], \"dtype\": \"bf16\"},\n"
    "    {\"role\": \"state\", \"name\": \"kda.conv_k\", \"part\": \"slots\", "
    "\"layer\": 2, \"shape\": [-1], \"dtype\": \"i32\"},\n"
    "    {\"role\": \"state\", \"name\": \"kda.conv_v\", \"part\": \"pool\", "
    "\"layer\": 2, \"shape\": [-1, 4, 3], \"dtype\": \"bf16\"},\n"
    "    {\"role\": \"state\", \"name\": \"kda.conv_v\", \"part\": \"slots\", "
    "\"layer\": 2, \"shape\": [-1], \"dtype\": \"i32\"},\n"
    "    {\"role\": \"state\", \"name\": \"mla.latent\", \"part\": \"pool\", "
    "\"layer\": 3, \"shape\": [-1, 4, 6], \"dtype\": \"bf16\"},\n"
    "    {\"role\": \"state\", \"name\": \"mla.latent\", \"part\": "
    "\"page_table\", \"layer\": 3, \"shape\": [-1, -1], \"dtype\": \"i32\"},\n"
    "    {\"role\": \"state\", \"name\": \"mla.latent\", \"part\": \"length\", "
    "\"layer\": 3, \"shape\": [-1], \"dtype\": \"i64\"},\n"
    "    {\"role\": \"logits\", \"shape\": [-1, 32], \"dtype\": \"f32\"}]},\n"
    "  \"parameters\": {\"total\": 1, \"active_per_token\": 1, "
    "\"active_excludes\": [\"embedding\"]}\n"
    "}\n";

EXPORT const char *k3fake_builtin_manifest(void) { return manifest; }

EXPORT uint32_t k3_abi_version(void) {
  const char *v = getenv("K3FAKE_ABI_VERSION");
  return v ? (uint32_t)atoi(v) : 2u;
}

EXPORT const char *k3_manifest_json(void) {
  const char *m = getenv("K3FAKE_MANIFEST");
  if (m)
    return m;
  /* A manifest too large for the environment (e.g. the real K3 one). */
  const char *path = getenv("K3FAKE_MANIFEST_FILE");
  static char *fromFile;
  if (path && !fromFile) {
    FILE *f = fopen(path, "rb");
    if (f) {
      fseek(f, 0, SEEK_END);
      long n = ftell(f);
      fseek(f, 0, SEEK_SET);
      fromFile = calloc((size_t)n + 1, 1);
      if (fromFile && fread(fromFile, 1, (size_t)n, f) != (size_t)n) {
        free(fromFile);
        fromFile = NULL;
      }
      fclose(f);
    }
  }
  return path && fromFile ? fromFile : manifest;
}

#ifndef K3FAKE_NO_FORWARD

static void (*forwardHook)(void *);
static void *forwardHookUser;
static long forwardCalls;

EXPORT void k3fake_set_forward_hook(void (*hook)(void *), void *user) {
  forwardHook = hook;
  forwardHookUser = user;
}

EXPORT long k3fake_forward_calls(void) {
  return __atomic_load_n(&forwardCalls, __ATOMIC_SEQ_CST);
}

/* A ranked memref descriptor read generically (docs/ABI.md). */
typedef struct {
  void *allocated;
  void *aligned;
  int64_t offset;
  int64_t dims[]; /* sizes[rank], strides[rank] */
} Desc;

static float bf16ToFloat(uint16_t v) {
  uint32_t bits = (uint32_t)v << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

static uint16_t floatToBF16(float f) { /* exact for the small integers used */
  uint32_t bits;
  memcpy(&bits, &f, 4);
  return (uint16_t)(bits >> 16);
}

/* Nonzero unless `d` is a row-major descriptor of `rank` with `sizes`
 * (a negative size accepts any positive size). */
static int badDesc(const Desc *d, int rank, const int64_t *sizes) {
  if (!d->allocated || d->allocated != d->aligned || d->offset != 0)
    return 1;
  int64_t stride = 1;
  for (int i = rank - 1; i >= 0; --i) {
    int64_t size = d->dims[i];
    if (size <= 0 || (sizes[i] >= 0 && size != sizes[i]))
      return 1;
    if (d->dims[rank + i] != stride)
      return 1;
    stride *= size;
  }
  return 0;
}

/* Nonzero unless `d` is a pool [any, sizes...] of `rank` whose inner
 * dimensions are contiguous and whose slots (dimension 0) do not overlap. */
static int badPool(const Desc *d, int rank, const int64_t *sizes) {
  if (!d->allocated || d->allocated != d->aligned || d->offset < 0 ||
      d->dims[0] <= 0)
    return 1;
  int64_t stride = 1;
  for (int i = rank - 1; i >= 1; --i) {
    if (d->dims[i] != sizes[i] || d->dims[rank + i] != stride)
      return 1;
    stride *= sizes[i];
  }
  return d->dims[rank] < stride;
}

enum {
  ArgTokens = 0,
  ArgEmbed = 1,
  ArgConvWeight = 2,
  ArgPacked = 3,
  ArgScale = 4,
  ArgLmHead = 5,
  ArgFirstKda = 6,  /* (pool, slots) of rec, conv_q, conv_k, conv_v, layer 0 */
  ArgFirstMla = 14, /* pool, page_table, length of layer 1 */
  ArgSecondKda = 17,
  ArgSecondMla = 25,
  ArgLogits = 28,
};

/* A pool argument: element e of slot k is base[offset + k * stride + e]. */
typedef struct {
  char *base;
  int64_t offset, stride, slots;
} Pool;

static Pool pool(const Desc *d, int rank) {
  Pool p = {(char *)d->aligned, d->offset, d->dims[rank], d->dims[0]};
  return p;
}

typedef struct {
  Pool rec;
  Pool conv[3];
} KdaArgs;

typedef struct {
  uint16_t *pool;
  int64_t numPages;
  const int32_t *table; /* [rows, width] */
  int64_t width;
  const int64_t *length; /* [rows] */
  int layer;
} MlaArgs;

static void shiftIn(uint16_t *tail, int channel, float value) {
  uint16_t *row = tail + channel * FAKE_TAPS;
  row[0] = row[1];
  row[1] = row[2];
  row[2] = floatToBF16(value);
}

EXPORT void k3_forward(void **args) {
  __atomic_add_fetch(&forwardCalls, 1, __ATOMIC_SEQ_CST);
  if (forwardHook)
    forwardHook(forwardHookUser);
  Desc *const *d = (Desc *const *)args;
  int errors = 0;

  static const int64_t any1[1] = {-1};
  if (badDesc(d[ArgTokens], 1, any1))
    errors |= FAKE_BAD_TOKENS;
  int64_t T = d[ArgTokens]->dims[0];
  const int32_t *tokens = (const int32_t *)d[ArgTokens]->aligned;

  static const int64_t embedShape[2] = {FAKE_VOCAB, 4};
  static const int64_t convWShape[3] = {4, 1, 4};
  static const int64_t packedShape[3] = {FAKE_EXPERTS, 4, 16};
  static const int64_t scaleShape[3] = {FAKE_EXPERTS, 4, 1};
  if (badDesc(d[ArgEmbed], 2, embedShape) ||
      badDesc(d[ArgConvWeight], 3, convWShape) ||
      badDesc(d[ArgPacked], 3, packedShape) ||
      badDesc(d[ArgScale], 3, scaleShape) ||
      badDesc(d[ArgLmHead], 2, embedShape))
    errors |= FAKE_BAD_WEIGHTS;
  const uint16_t *embed = (const uint16_t *)d[ArgEmbed]->aligned;
  const float *convW = (const float *)d[ArgConvWeight]->aligned;
  const uint8_t *packed = (const uint8_t *)d[ArgPacked]->aligned;
  const uint8_t *scale = (const uint8_t *)d[ArgScale]->aligned;
  const uint16_t *lmHead = (const uint16_t *)d[ArgLmHead]->aligned;

  /* The call's sequences (docs/ABI.md): one (a segment of T tokens) or T
   * (one token each), from the slots, page tables and lengths. */
  const Desc *slotsDesc = d[ArgFirstKda + 1];
  if (badDesc(slotsDesc, 1, any1))
    errors |= FAKE_BAD_KDA;
  int64_t R = slotsDesc->dims[0];
  const int32_t *slots = (const int32_t *)slotsDesc->aligned;
  if (R != 1 && R != T)
    errors |= FAKE_BAD_KDA;

  KdaArgs kda[2];
  MlaArgs mla[2];
  static const int64_t recShape[4] = {-1, 2, 2, 2};
  static const int64_t convShape[3] = {-1, 4, FAKE_TAPS};
  static const int64_t poolShape[3] = {-1, FAKE_PAGE, FAKE_WIDTH};
  static const int64_t any2[2] = {-1, -1};
  for (int k = 0; k < 2; ++k) {
    int base = k == 0 ? ArgFirstKda : ArgSecondKda;
    for (int c = 0; c < 4; ++c) {
      const Desc *pd = d[base + 2 * c], *sd = d[base + 2 * c + 1];
      if (c == 0 ? badPool(pd, 4, recShape) : badPool(pd, 3, convShape))
        errors |= FAKE_BAD_KDA;
      if (sd->aligned != slots || sd->dims[0] != R)
        errors |= FAKE_BAD_KDA;
      if (c == 0)
        kda[k].rec = pool(pd, 4);
      else
        kda[k].conv[c - 1] = pool(pd, 3);
    }
  }
  for (int64_t r = 0; r < R && !(errors & FAKE_BAD_KDA); ++r)
    if (slots[r] < 0 || slots[r] >= kda[0].rec.slots)
      errors |= FAKE_BAD_KDA;
  for (int k = 0; k < 2; ++k) {
    int base = k == 0 ? ArgFirstMla : ArgSecondMla;
    if (badDesc(d[base], 3, poolShape))
      errors |= FAKE_BAD_POOL;
    if (badDesc(d[base + 1], 2, any2) || d[base + 1]->dims[0] != R)
      errors |= FAKE_BAD_PAGE_TABLE;
    if (badDesc(d[base + 2], 1, any1) || d[base + 2]->dims[0] != R)
      errors |= FAKE_BAD_LENGTH;
    mla[k].pool = (uint16_t *)d[base]->aligned;
    mla[k].numPages = d[base]->dims[0];
    mla[k].table = (const int32_t *)d[base + 1]->aligned;
    mla[k].width = d[base + 1]->dims[1];
    mla[k].length = (const int64_t *)d[base + 2]->aligned;
    mla[k].layer = k == 0 ? 1 : 3;
  }
  if (mla[0].length != mla[1].length || mla[0].numPages != mla[1].numPages ||
      mla[0].pool == mla[1].pool || mla[0].table != mla[1].table)
    errors |= FAKE_BAD_LENGTH;
  int64_t seg = R == 1 ? T : 1; /* tokens per sequence */
  if (!(errors & (FAKE_BAD_PAGE_TABLE | FAKE_BAD_LENGTH)))
    for (int64_t r = 0; r < R; ++r) {
      if (mla[0].width < (mla[0].length[r] + seg + FAKE_PAGE - 1) / FAKE_PAGE)
        errors |= FAKE_BAD_PAGE_TABLE;
      for (int64_t i = 0; i < mla[0].width; ++i) {
        int32_t page = mla[0].table[r * mla[0].width + i];
        if (page < 0 || page >= mla[0].numPages)
          errors |= FAKE_BAD_PAGE_INDEX;
      }
    }
  static const int64_t logitsShape[2] = {-1, FAKE_VOCAB};
  if (badDesc(d[ArgLogits], 2, logitsShape) || d[ArgLogits]->dims[0] != T)
    errors |= FAKE_BAD_LOGITS;
  float *logits = (float *)d[ArgLogits]->aligned;
  if (errors &
      (FAKE_BAD_TOKENS | FAKE_BAD_LOGITS | FAKE_BAD_PAGE_TABLE |
       FAKE_BAD_PAGE_INDEX | FAKE_BAD_POOL | FAKE_BAD_KDA | FAKE_BAD_LENGTH)) {
    /* Not safe to touch memory; flag every row we may write. */
    if (!(errors & (FAKE_BAD_TOKENS | FAKE_BAD_LOGITS)))
      for (int64_t t = 0; t < T; ++t)
        for (int v = 0; v < FAKE_VOCAB; ++v)
          logits[t * FAKE_VOCAB + v] = v == FAKE_F_ERRORS ? (float)errors : 0;
    return;
  }

  /* Weight checksums (the test recomputes them from the file it wrote). */
  float expertSum = 0;
  for (int e = 0; e < FAKE_EXPERTS; ++e) {
    for (int i = 0; i < 4 * 16; ++i)
      expertSum += (float)packed[e * 64 + i] * (float)(e + 1);
    for (int i = 0; i < 4; ++i)
      expertSum += (float)scale[e * 4 + i] * (float)(e + 1) * 1000.0f;
  }
  float convWSum = 0;
  for (int i = 0; i < 16; ++i)
    convWSum += convW[i];

  for (int64_t t = 0; t < T; ++t) {
    int32_t tok = tokens[t];
    int64_t r = R == 1 ? 0 : t;   /* the token's sequence in the call */
    int64_t index = t - r;        /* its index in its segment */
    int64_t p = mla[0].length[r] + index;
    int32_t slot = slots[r];
    float *S[2];
    uint16_t *conv[2][3];
    for (int k = 0; k < 2; ++k) {
      Pool *rp = &kda[k].rec;
      S[k] = (float *)rp->base + rp->offset + slot * rp->stride;
      for (int c = 0; c < 3; ++c) {
        Pool *cp = &kda[k].conv[c];
        conv[k][c] = (uint16_t *)cp->base + cp->offset + slot * cp->stride;
      }
    }
    for (int k = 0; k < 2; ++k) {
      float *S0 = S[k];
      S0[0] += (float)tok;
      S0[1] += 1.0f;
      S0[2] = S0[2] * 0.5f + (float)tok;
      S0[3] += (float)p;
      for (int c = 0; c < 4; ++c) {
        shiftIn(conv[k][0], c, (float)(tok + c));
        shiftIn(conv[k][1], c, (float)(2 * tok + c));
        shiftIn(conv[k][2], c, (float)(p + c));
      }
    }
    float stale = 0, mlaTokens[2] = {0, 0}, mlaPositions[2] = {0, 0},
          mlaRows[2] = {0, 0};
    for (int k = 0; k < 2; ++k) {
      MlaArgs *m = &mla[k];
      const int32_t *table = m->table + r * m->width;
      int32_t page = table[p / FAKE_PAGE];
      uint16_t *pageData = m->pool + (int64_t)page * FAKE_PAGE * FAKE_WIDTH;
      /* Rows p .. end of page must still be zero (zeroed on hand-out, never
       * written by another sequence). */
      for (int64_t q = p % FAKE_PAGE; q < FAKE_PAGE; ++q)
        for (int w = 0; w < FAKE_WIDTH; ++w)
          if (pageData[q * FAKE_WIDTH + w] != 0)
            stale = 1;
      uint16_t *row = pageData + (p % FAKE_PAGE) * FAKE_WIDTH;
      row[0] = floatToBF16((float)tok);
      row[1] = floatToBF16((float)p);
      row[2] = floatToBF16((float)m->layer);
      row[3] = floatToBF16((float)(tok + p));
      row[4] = floatToBF16(1.0f);
      row[5] = 0;
      for (int64_t q = 0; q <= p; ++q) {
        const uint16_t *r =
            m->pool +
            ((int64_t)table[q / FAKE_PAGE] * FAKE_PAGE + q % FAKE_PAGE) *
                FAKE_WIDTH;
        mlaTokens[k] += bf16ToFloat(r[0]);
        mlaPositions[k] += bf16ToFloat(r[1]);
        mlaRows[k] += bf16ToFloat(r[4]);
      }
    }
    float *out = logits + t * FAKE_VOCAB;
    for (int v = 0; v < FAKE_VOCAB; ++v)
      out[v] = (float)v * 0.5f + (float)tok;
    const float *S0 = S[0], *S2 = S[1];
    out[FAKE_F_TOKEN] = (float)tok;
    out[FAKE_F_POSITION] = (float)p;
    out[FAKE_F_SUM] = S0[0];
    out[FAKE_F_COUNT] = S0[1];
    out[FAKE_F_HASH] = S0[2];
    out[FAKE_F_POSITION_SUM] = S0[3];
    out[FAKE_F_LAYER2] = S2[0] + S2[1] * 1000.0f + S2[2] * 0.25f;
    for (int i = 0; i < 3; ++i)
      out[FAKE_F_CONV_Q + i] = bf16ToFloat(conv[0][0][1 * FAKE_TAPS + i]);
    out[FAKE_F_CONV_K2] = bf16ToFloat(conv[1][1][0 * FAKE_TAPS + 0]);
    out[FAKE_F_CONV_V2] = bf16ToFloat(conv[1][2][3 * FAKE_TAPS + 2]);
    out[FAKE_F_MLA_TOKENS] = mlaTokens[0];
    out[FAKE_F_MLA_POSITIONS] = mlaPositions[1];
    out[FAKE_F_MLA_ROWS] = mlaRows[0] + mlaRows[1] * 100.0f;
    out[FAKE_F_STALE] = stale;
    out[FAKE_F_ERRORS] = (float)errors;
    out[FAKE_F_EMBED] =
        bf16ToFloat(embed[tok * 4 + 0]) + bf16ToFloat(embed[tok * 4 + 3]);
    out[FAKE_F_LM_HEAD] = bf16ToFloat(lmHead[tok * 4 + 1]);
    out[FAKE_F_EXPERTS] = expertSum;
    out[FAKE_F_CONV_WEIGHT] = convWSum;
    out[FAKE_F_PAGES] =
        (float)((mla[0].length[r] + seg + FAKE_PAGE - 1) / FAKE_PAGE);
    out[FAKE_F_SEGMENT] = (float)seg;
    out[FAKE_F_INDEX] = (float)index;
  }
}

#endif /* K3FAKE_NO_FORWARD */
