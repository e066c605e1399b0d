//===- fuzz-safetensors.cpp - libFuzzer target: safetensors and index ------===//
//
// The first byte picks what the rest of the input is:
//  * even: a whole .safetensors file (8-byte length, JSON header, data),
//    given to the runtime's header reader as a file;
//  * odd: a model.safetensors.index.json, alone in a directory, loaded
//    with k3rt_weights_load for the fake model
//    library (the index reader, shard resolution and validation).
// Either is rejected with a status that has a message, or accepted; a crash
// or a sanitizer report is a finding.
//
//===----------------------------------------------------------------------===//

#include "Safetensors.h"
#include "Status.h"

#include "k3rt/k3rt.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

static std::string dir() {
  static std::string d = [] {
    char tmpl[] = "/tmp/k3-fuzz-safetensors.XXXXXX";
    if (!mkdtemp(tmpl))
      std::abort();
    return std::string(tmpl);
  }();
  return d;
}

static void writeFile(const std::string &path, const uint8_t *data, size_t size) {
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f)
    std::abort();
  if (size)
    std::fwrite(data, 1, size, f);
  std::fclose(f);
}

static void check(k3rt_status *s) {
  if (!s)
    return;
  const char *msg = k3rt_status_message(s);
  if (!msg || !*msg) {
    std::fprintf(stderr, "rejected without a message\n");
    std::abort();
  }
  k3rt_status_free(s);
}

static k3rt_library *fake() {
  static k3rt_library *lib = [] {
    k3rt_library *l = nullptr;
    if (k3rt_status *s = k3rt_library_open(K3_FUZZ_FAKE_MODEL, &l)) {
      std::fprintf(stderr, "%s\n", k3rt_status_message(s));
      std::abort();
    }
    return l;
  }();
  return lib;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  bool index = data[0] & 1;
  ++data, --size;
  if (!index) {
    std::string path = dir() + "/st.safetensors";
    writeFile(path, data, size);
    k3rt::StFile file;
    check(k3rt::readSafetensorsHeader(path, file));
    return 0;
  }
  // The index alone in its directory: its shards are whatever it names
  // (absent, or escaping the directory).
  std::string indexDir = dir() + "/index";
  static bool made = mkdir(indexDir.c_str(), 0700) == 0;
  (void)made;
  std::string path = indexDir + "/model.safetensors.index.json";
  writeFile(path, data, size);
  k3rt_weights_options o{};
  o.struct_size = sizeof(o);
  o.skip_config_check = 1;
  k3rt_weights *w = nullptr;
  k3rt_status *s = k3rt_weights_load(fake(), indexDir.c_str(), &o, &w);
  check(s);
  k3rt_weights_release(w);
  return 0;
}
