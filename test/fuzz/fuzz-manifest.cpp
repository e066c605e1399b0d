//===- fuzz-manifest.cpp - libFuzzer target: a library's manifest ---------===//
//
// Feeds the input to k3rt's manifest parser and validator (what
// k3rt_library_open runs on k3_manifest_json()). Either it is rejected with
// a status carrying a message, or it is accepted and the derived sizes are
// consistent; anything else (a crash, a sanitizer report) is a finding.
//
//===----------------------------------------------------------------------===//

#include "Manifest.h"
#include "Status.h"

#include "k3rt/k3rt.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  k3rt::Manifest m;
  k3rt_status *s = k3rt::parseManifest(text.c_str(), m);
  if (s) {
    const char *msg = k3rt_status_message(s);
    if (k3rt_status_code(s) == K3RT_OK || !msg || !*msg) {
      std::fprintf(stderr, "rejected without a message\n");
      std::abort();
    }
    k3rt_status_free(s);
    return 0;
  }
  // Accepted: every tensor's byte size is what its shape and dtype say.
  for (const k3rt::TensorSpec &t : m.tensors) {
    uint64_t bytes = 0;
    if (!k3rt::tensorBytes(t.shape, t.dtype, bytes) || bytes != t.bytes) {
      std::fprintf(stderr, "tensor '%s': inconsistent byte size\n", t.name.c_str());
      std::abort();
    }
  }
  return 0;
}
