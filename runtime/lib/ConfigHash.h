//===- ConfigHash.h - SHA-256 and the k3c config hash -----------*- C++ -*-===//
//
// k3c records model.config_sha256 in the manifest: the SHA-256 of
// nlohmann::json(text_config).dump() (compact, keys sorted), where
// text_config is the "text_config" object of a kimi_k3 config or the whole
// object of a bare kimi_linear config (lib/Frontend/HF/Config.cpp,
// parseConfig). The runtime computes the same hash without LLVM.
//
//===----------------------------------------------------------------------===//

#ifndef K3RT_LIB_CONFIGHASH_H
#define K3RT_LIB_CONFIGHASH_H

#include "Status.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace k3rt {

/// FIPS 180-4 SHA-256, incremental.
class Sha256 {
public:
  Sha256();
  void update(const void *data, size_t size);
  /// The digest as 64 lower-case hex digits; the object is spent after.
  std::string hexDigest();

private:
  void block(const uint8_t *p);
  uint32_t h[8];
  uint8_t buffer[64];
  size_t buffered = 0;
  uint64_t total = 0;
};

/// SHA-256 hex of `data`.
std::string sha256Hex(const void *data, size_t size);

/// The config hash of config.json text (see above). `display` names the
/// text in messages.
k3rt_status *configSha256(const char *text, size_t size,
                          const std::string &display, std::string &out);

/// Reads the config.json at `path` and compares its hash with `expected`
/// (a manifest's model.config_sha256): FAILED_PRECONDITION naming both on
/// a mismatch.
k3rt_status *checkConfigFile(const std::string &path,
                             const std::string &expected,
                             const std::string &library);

} // namespace k3rt

#endif // K3RT_LIB_CONFIGHASH_H
