/*===- FakeModel.h - constants of the fake k3c test library ---------------===*
 *
 * Shared by FakeModel.c and the tests: sizes of the fake model, the feature
 * index of each logit, and the descriptor error bits.
 *
 *===----------------------------------------------------------------------===*/

#ifndef K3RT_TEST_FAKEMODEL_H
#define K3RT_TEST_FAKEMODEL_H

#define FAKE_VOCAB 32
#define FAKE_MAX_CONTEXT 64
#define FAKE_PAGE 4
#define FAKE_WIDTH 6
#define FAKE_TAPS 3
#define FAKE_EXPERTS 3

/* A config.json whose hash (k3rt_config_sha256) the fake manifest records:
 * SHA-256 of {"hidden_size":4,"model_type":"kimi_linear",
 * "num_hidden_layers":4,"vocab_size":32}. */
#define FAKE_CONFIG_JSON                                                       \
  "{\"model_type\": \"kimi_k3\", \"text_config\": {\"vocab_size\": 32, "       \
  "\"num_hidden_layers\": 4, \"model_type\": \"kimi_linear\", "                \
  "\"hidden_size\": 4}, \"architectures\": [\"Fake\"]}"
#define FAKE_CONFIG_SHA256                                                     \
  "c3ff01d457805f0c69075dfd2ccbad6fa3ccce2b9a279ba332abeb6a90e56eb2"

/* Logit v of each position holds feature v (the rest: v * 0.5 + token). */
enum {
  FAKE_F_TOKEN = 0,          /* the token                                  */
  FAKE_F_POSITION = 1,       /* its position                               */
  FAKE_F_SUM = 2,            /* KDA layer 0: sum of tokens so far          */
  FAKE_F_COUNT = 3,          /*   tokens so far                            */
  FAKE_F_HASH = 4,           /*   h = h * 0.5 + token (order-sensitive)    */
  FAKE_F_POSITION_SUM = 5,   /*   sum of positions                          */
  FAKE_F_LAYER2 = 6,         /* KDA layer 2: sum + 1000 count + hash / 4   */
  FAKE_F_CONV_Q = 7,         /* 7..9: conv_q tail, layer 0, channel 1      */
  FAKE_F_CONV_K2 = 10,       /* conv_k tail, layer 2, channel 0, oldest    */
  FAKE_F_CONV_V2 = 11,       /* conv_v tail, layer 2, channel 3, newest    */
  FAKE_F_MLA_TOKENS = 12,    /* MLA layer 1: sum of cached tokens 0..p     */
  FAKE_F_MLA_POSITIONS = 13, /* MLA layer 3: sum of cached positions 0..p  */
  FAKE_F_MLA_ROWS = 14,      /* rows seen: layer 1 + 100 x layer 3         */
  FAKE_F_STALE = 15,         /* 1 if a page was not zero where unwritten   */
  FAKE_F_ERRORS = 16,        /* descriptor error bits below                */
  FAKE_F_EMBED = 17,         /* embed[tok][0] + embed[tok][3]              */
  FAKE_F_LM_HEAD = 18,       /* lm_head[tok][1]                            */
  FAKE_F_EXPERTS = 19,       /* sum (e+1) packed + 1000 (e+1) scale        */
  FAKE_F_CONV_WEIGHT = 20,   /* sum of q_conv1d.weight                     */
  FAKE_F_PAGES = 21,         /* pages the sequence's segment needs         */
  FAKE_F_SEGMENT = 22,       /* tokens of the sequence in this call        */
  FAKE_F_INDEX = 23,         /* t within the sequence's segment            */
  FAKE_F_FIRST_FILLER = 24
};

enum {
  FAKE_BAD_TOKENS = 1,
  FAKE_BAD_WEIGHTS = 2,
  FAKE_BAD_KDA = 4,
  FAKE_BAD_POOL = 8,
  FAKE_BAD_PAGE_TABLE = 16,
  FAKE_BAD_LENGTH = 32,
  FAKE_BAD_LOGITS = 64,
  FAKE_BAD_PAGE_INDEX = 128
};

#endif /* K3RT_TEST_FAKEMODEL_H */
