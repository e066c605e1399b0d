/*===- linked-check.c - open the k3c library linked into the program ------===*
 *
 * A C program linked against libk3_tiny_linked.so (made by k3c) and k3rt
 * opens the model with k3rt_library_open(NULL) and prints what the
 * manifest says.
 *
 *===----------------------------------------------------------------------===*/

#include "k3rt/k3rt.h"

#include <stdio.h>

int main(void) {
  k3rt_library *lib = NULL;
  k3rt_status *s = k3rt_library_open(NULL, &lib);
  if (s) {
    fprintf(stderr, "linked-check: %s\n", k3rt_status_message(s));
    k3rt_status_free(s);
    return 1;
  }
  k3rt_model_info info = {0};
  info.struct_size = sizeof(info);
  s = k3rt_library_get_info(lib, &info);
  if (s) {
    fprintf(stderr, "linked-check: %s\n", k3rt_status_message(s));
    k3rt_status_free(s);
    return 1;
  }
  printf("linked model %s: %lld layers, vocab %lld, %lld ABI arguments\n",
         info.name, (long long)info.num_layers, (long long)info.vocab_size,
         (long long)info.num_abi_args);
  k3rt_library_release(lib);
  return 0;
}
