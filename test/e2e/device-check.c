/*===- device-check.c - one session's calls on a library, status by status ===*
 *
 *   k3-device-check LIB WEIGHTS
 *
 * Opens LIB, loads WEIGHTS, creates a session (max_step_tokens 16) and
 * makes these calls, printing "<call>: <CODE>[: message]" for each: add
 * sequence 1, a 4-token step, read its KDA state, a 17-token step (over
 * max_step_tokens), add sequence 2, session info. On a GPU that works
 * every call but the fourth is OK; after a device failure, the failing call
 * and every later one is ABORTED (RUNTIME_NOTES §3 item 24). Exit status:
 * 0 when the library and weights loaded, else 1.
 *===----------------------------------------------------------------------===*/

#include "k3rt/k3rt.h"

#include <stdio.h>
#include <stdlib.h>

static void show(const char *call, k3rt_status *s) {
  if (!s) {
    printf("%s: OK\n", call);
  } else {
    printf("%s: %s: %s\n", call, k3rt_code_name(k3rt_status_code(s)),
           k3rt_status_message(s));
    k3rt_status_free(s);
  }
  fflush(stdout);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: k3-device-check LIB WEIGHTS\n");
    return 2;
  }
  k3rt_library *lib = NULL;
  k3rt_weights *weights = NULL;
  show("open", k3rt_library_open(argv[1], &lib));
  if (!lib)
    return 1;
  show("weights", k3rt_weights_load(lib, argv[2], NULL, &weights));
  if (!weights) {
    k3rt_library_release(lib);
    return 1;
  }
  k3rt_model_info li = {.struct_size = sizeof(li)};
  k3rt_status_free(k3rt_library_get_info(lib, &li));

  k3rt_session_options o = {.struct_size = sizeof(o)};
  o.max_sequences = 4;
  o.state_budget_bytes = (uint64_t)64 << 20;
  o.max_step_tokens = 16;
  k3rt_session *session = NULL;
  show("session", k3rt_session_create(lib, weights, &o, &session));
  if (!session) {
    k3rt_weights_release(weights);
    k3rt_library_release(lib);
    return 1;
  }
  k3rt_session_info si = {.struct_size = sizeof(si)};
  k3rt_status_free(k3rt_session_get_info(session, &si));
  printf("device: %s\n", si.device ? si.device : "?");

  float *logits = malloc(sizeof(float) * (size_t)li.vocab_size);
  int32_t tokens[17] = {5, 17, 300, 42};
  show("add 1", k3rt_sequence_add(session, 1));
  k3rt_step_entry e = {1, 4, tokens, K3RT_LOGITS_LAST};
  show("step 4 tokens", k3rt_session_step(session, &e, 1, logits,
                                          (size_t)li.vocab_size));
  k3rt_state_shape shape = {.struct_size = sizeof(shape)};
  k3rt_status *rs =
      k3rt_sequence_read_state(session, 1, "kda.recurrent", 0, NULL, 0, &shape);
  if (!rs) {
    float *all = malloc(sizeof(float) * (size_t)shape.count);
    rs = k3rt_sequence_read_state(session, 1, "kda.recurrent", 0, all,
                                  (size_t)shape.count, NULL);
    double sum = 0;
    for (int64_t i = 0; !rs && i < shape.count; ++i)
      sum += all[i] < 0 ? -all[i] : all[i];
    if (!rs)
      printf("kda state of layer 0: %lld values, sum |x| %s 0\n",
             (long long)shape.count, sum > 0 ? ">" : "=");
    free(all);
  }
  show("read state", rs);
  e.n_tokens = 17;
  show("step 17 tokens", k3rt_session_step(session, &e, 1, logits,
                                           (size_t)li.vocab_size));
  show("add 2", k3rt_sequence_add(session, 2));
  si.struct_size = sizeof(si);
  show("info", k3rt_session_get_info(session, &si));
  free(logits);
  k3rt_session_release(session);
  k3rt_weights_release(weights);
  k3rt_library_release(lib);
  return 0;
}
