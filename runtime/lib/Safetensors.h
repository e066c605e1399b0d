//===- Safetensors.h - validated safetensors headers, mappings --*- C++ -*-===//
//
// Reads a .safetensors header and checks it against its file before anything
// is mapped (design/RUNTIME_NOTES.md §3, items 8-12 and 15; the rules of
// huggingface/safetensors `tensor.rs`): the header length is capped and
// inside the file, the header is a UTF-8 JSON object without duplicate keys,
// every tensor has a known dtype, two data_offsets inside the data region and
// exactly shape x dtype bytes, and the tensors tile the data region with no
// hole or overlap.
//
//===----------------------------------------------------------------------===//

#ifndef K3RT_LIB_SAFETENSORS_H
#define K3RT_LIB_SAFETENSORS_H

#include "Manifest.h"
#include "Status.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace k3rt {

/// safetensors `MAX_HEADER_SIZE`.
constexpr uint64_t kMaxHeaderBytes = 100000000;

struct StTensor {
  std::string name;
  DType dtype = DType::U8;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0; ///< relative to the data region
};

struct StFile {
  std::string path;
  uint64_t fileSize = 0;
  uint64_t dataOffset = 0; ///< 8 + header length
  std::vector<StTensor> tensors;
};

/// Reads and validates the header of `path` (nothing is mapped).
k3rt_status *readSafetensorsHeader(const std::string &path, StFile &out);

/// Validates a header given as bytes, for a file of `fileSize` bytes whose
/// first 8 bytes held `headerLength` (exposed for tests).
k3rt_status *parseSafetensorsHeader(const std::string &path, const char *header,
                                    uint64_t headerLength, uint64_t fileSize,
                                    StFile &out);

/// A read-only private mapping of a whole file.
class MappedFile {
public:
  MappedFile() = default;
  MappedFile(const MappedFile &) = delete;
  MappedFile &operator=(const MappedFile &) = delete;
  MappedFile(MappedFile &&other) noexcept;
  MappedFile &operator=(MappedFile &&other) noexcept;
  ~MappedFile();

  /// Maps `path`, which must still be `expectedSize` bytes long.
  static k3rt_status *map(const std::string &path, uint64_t expectedSize,
                          MappedFile &out);

  const uint8_t *data() const { return static_cast<const uint8_t *>(addr); }
  uint64_t size() const { return length; }

private:
  void *addr = nullptr;
  uint64_t length = 0;
};

/// Zeroed, page-aligned anonymous memory.
class Buffer {
public:
  Buffer() = default;
  Buffer(const Buffer &) = delete;
  Buffer &operator=(const Buffer &) = delete;
  Buffer(Buffer &&other) noexcept;
  Buffer &operator=(Buffer &&other) noexcept;
  ~Buffer();

  /// RESOURCE_EXHAUSTED (naming `what`) if the memory is not available.
  static k3rt_status *allocate(uint64_t bytes, const char *what, Buffer &out);

  uint8_t *data() const { return static_cast<uint8_t *>(addr); }
  uint64_t size() const { return length; }

private:
  void *addr = nullptr;
  uint64_t length = 0;
};

} // namespace k3rt

#endif // K3RT_LIB_SAFETENSORS_H
