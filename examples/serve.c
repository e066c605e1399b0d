/*===- serve.c - serve two sequences with k3rt (C) -------------------------===*
 *
 * A small application of the installed k3rt. It is linked against a model
 * library made by k3c (found through k3rt_library_open(NULL)), loads a
 * checkpoint, and serves two sequences in the same steps:
 *   sequence 0: greedy decoding, one token per step;
 *   sequence 1: forked from sequence 0 after the prompt, joins a few steps
 *     later and decodes speculatively: each step verifies its last token
 *     plus 3 drafted ones (K3RT_STEP_VERIFY keeps a state checkpoint per
 *     token), keeps the drafts that greedy decoding produces and rolls the
 *     others back with k3rt_sequence_rollback. The drafts stand in for a
 *     draft model: sequence 0's tokens, every 4th one deliberately wrong.
 * Rollback is exact, so both print the same tokens.
 *
 *   serve_c WEIGHTS_DIR [N_TOKENS]
 *
 *===----------------------------------------------------------------------===*/

#include <k3rt/k3rt.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DRAFTS 3 /* drafted tokens per verify step (plus the last token) */
#define MAX_TOKENS 256

static void check(k3rt_status *s, const char *what) {
  if (!s)
    return;
  fprintf(stderr, "serve_c: %s: %s: %s\n", what,
          k3rt_code_name(k3rt_status_code(s)), k3rt_status_message(s));
  k3rt_status_free(s);
  exit(1);
}

static int32_t argmax(const float *row, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (row[i] > row[best])
      best = i;
  return (int32_t)best;
}

#define HEAD_START 12 /* steps sequence 0 runs alone */

/* The draft for position `pos` of sequence 1: sequence 0's token there if
 * it has one (every 4th one off by one), else `last`. */
static int32_t draft(const int32_t *hist0, int n0, int pos, int32_t last,
                     int64_t vocab) {
  if (pos >= n0)
    return last;
  return pos % 4 == 0 ? (int32_t)((hist0[pos] + 1) % vocab) : hist0[pos];
}

static void print(const char *label, const int32_t *t, int n) {
  printf("%s:", label);
  for (int i = 0; i < n; ++i)
    printf(" %d", t[i]);
  printf("\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: serve_c WEIGHTS_DIR [N_TOKENS]\n");
    return 2;
  }
  int want = argc > 2 ? atoi(argv[2]) : 24;
  if (want < 1 || want > 128)
    want = 24;
  check(k3rt_check_api_version(K3RT_API_VERSION), "api version");

  k3rt_library *lib = NULL;
  check(k3rt_library_open(NULL, &lib), "open the linked model");
  k3rt_model_info info = {0};
  info.struct_size = sizeof(info);
  check(k3rt_library_get_info(lib, &info), "model info");
  int64_t V = info.vocab_size;
  printf("model %s: %lld layers, vocab %lld\n", info.name,
         (long long)info.num_layers, (long long)V);

  k3rt_weights *weights = NULL;
  check(k3rt_weights_load(lib, argv[1], NULL, &weights), "load weights");

  k3rt_session_options o = {0};
  o.struct_size = sizeof(o);
  o.max_sequences = 2;
  o.state_budget_bytes = (uint64_t)64 << 20;
  o.snapshot_slots = DRAFTS + 1;
  o.max_verify_tokens = DRAFTS + 1;
  k3rt_session *s = NULL;
  check(k3rt_session_create(lib, weights, &o, &s), "session");

  /* The prompt; its last logits give the first token. */
  int32_t hist0[MAX_TOKENS], hist1[MAX_TOKENS];
  int32_t prompt[8] = {1, 17, 42, 99, 256, 311, 7, 64};
  int np = 8;
  float *logits = malloc(sizeof(float) * (size_t)V * (DRAFTS + 2));
  check(k3rt_sequence_add(s, 0), "add");
  k3rt_step_entry e = {0, np, prompt, K3RT_LOGITS_LAST};
  check(k3rt_session_step(s, &e, 1, logits, (size_t)V), "prefill");
  check(k3rt_sequence_fork(s, 0, 1), "fork");
  memcpy(hist0, prompt, sizeof(prompt));
  memcpy(hist1, prompt, sizeof(prompt));
  int n0 = np, n1 = np;
  int32_t last0 = argmax(logits, V), last1 = last0;
  print("prompt", prompt, np);

  int steps = 0, accepted = 0, rolled = 0;
  while (n0 - np < want || n1 - np < want) {
    /* One step: a decode token of sequence 0 and a verify entry of
     * sequence 1 ([last, 3 drafts]), each while it needs tokens. */
    k3rt_step_entry batch[2];
    int nb = 0, row1 = 0;
    int32_t verify[DRAFTS + 1];
    int run0 = n0 - np < want, run1 = n1 - np < want && steps >= HEAD_START;
    if (run0)
      batch[nb++] = (k3rt_step_entry){0, 1, &last0, K3RT_LOGITS_LAST};
    if (run1) {
      verify[0] = last1;
      for (int i = 1; i <= DRAFTS; ++i)
        verify[i] = draft(hist0, n0, n1 + i, last1, V);
      row1 = nb;
      batch[nb++] = (k3rt_step_entry){1, DRAFTS + 1, verify,
                                      K3RT_LOGITS_ALL | K3RT_STEP_VERIFY};
    }
    check(k3rt_session_step(s, batch, (size_t)nb, logits,
                            (size_t)V * (DRAFTS + 2)),
          "step");
    ++steps;
    if (run0) {
      hist0[n0++] = last0;
      last0 = argmax(logits, V);
    }
    if (!run1)
      continue;
    /* Row row1 + i: the logits after verify[0 .. i]. */
    hist1[n1++] = last1;
    int j = 0;
    while (j < DRAFTS &&
           verify[1 + j] == argmax(logits + (row1 + j) * V, V)) {
      hist1[n1++] = verify[1 + j];
      ++j;
    }
    last1 = argmax(logits + (row1 + j) * V, V);
    accepted += j;
    rolled += DRAFTS - j;
    check(k3rt_sequence_rollback(s, 1, DRAFTS - j), "rollback");
  }
  print("sequence 0 (greedy)", hist0 + np, want);
  print("sequence 1 (fork, speculative)", hist1 + np, want);
  printf("%d steps; sequence 1: %d drafts accepted, %d rolled back\n", steps,
         accepted, rolled);
  int same = memcmp(hist0 + np, hist1 + np, sizeof(int32_t) * (size_t)want) == 0;
  printf("identical: %s\n", same ? "yes" : "no");

  free(logits);
  k3rt_session_release(s);
  k3rt_weights_release(weights);
  k3rt_library_release(lib);
  return same ? 0 : 1;
}
