//===- Safetensors.cpp - validated safetensors headers, mappings ----------===//

#include "Safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <limits>
#include <set>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace k3rt;
using json = nlohmann::json;

//===----------------------------------------------------------------------===//
// Header syntax: a SAX pass for the error position and duplicate keys
//===----------------------------------------------------------------------===//

namespace {
/// Accepts any JSON and remembers the first syntax error and the first
/// duplicated key of the top-level object (a DOM parse would silently keep
/// the last of two entries of the same tensor).
class HeaderSyntax : public nlohmann::json_sax<json> {
public:
  std::string error;

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t &) override { return true; }
  bool string(string_t &) override { return true; }
  bool binary(binary_t &) override { return true; }
  bool start_object(std::size_t) override {
    ++depth;
    return true;
  }
  bool key(string_t &k) override {
    if (depth == 1 && !keys.insert(k).second) {
      error = "duplicate key '" + k + "'";
      return false;
    }
    return true;
  }
  bool end_object() override {
    --depth;
    return true;
  }
  bool start_array(std::size_t) override {
    ++depth;
    return true;
  }
  bool end_array() override {
    --depth;
    return true;
  }
  bool parse_error(std::size_t, const std::string &,
                   const nlohmann::detail::exception &ex) override {
    error = ex.what();
    return false;
  }

private:
  int depth = 0;
  std::set<std::string> keys;
};
} // namespace

static k3rt_status *headerError(k3rt_code code, const std::string &path,
                                const std::string &what) {
  return makeStatus(code, "%s: %s", path.c_str(), what.c_str());
}

static bool asUInt(const json &j, uint64_t &out) {
  if (j.is_number_unsigned()) {
    out = j.get<uint64_t>();
    return true;
  }
  if (j.is_number_integer() && j.get<int64_t>() >= 0) {
    out = uint64_t(j.get<int64_t>());
    return true;
  }
  return false;
}

k3rt_status *k3rt::parseSafetensorsHeader(const std::string &path,
                                          const char *header,
                                          uint64_t headerLength,
                                          uint64_t fileSize, StFile &out) {
  auto invalid = [&](const std::string &what) {
    return headerError(K3RT_INVALID_ARGUMENT, path, what);
  };
  if (headerLength == 0 || header[0] != '{')
    return invalid("the header does not start with '{' (not a safetensors "
                   "file?)");
  HeaderSyntax syntax;
  bool ok = json::sax_parse(header, header + headerLength, &syntax,
                            json::input_format_t::json, /*strict=*/true);
  if (!ok || !syntax.error.empty())
    return invalid(
        "the header is not valid UTF-8 JSON: " +
        (syntax.error.empty() ? std::string("parse error") : syntax.error));
  json root = json::parse(header, header + headerLength, nullptr,
                          /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object())
    return invalid("the header is not a JSON object");

  StFile file;
  file.path = path;
  file.fileSize = fileSize;
  file.dataOffset = 8 + headerLength;
  uint64_t dataSize = fileSize - file.dataOffset;
  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string &name = it.key();
    const json &v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object())
        return invalid("__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m)
        if (!m.value().is_string())
          return invalid("__metadata__ entry '" + m.key() +
                         "' is not a string");
      continue;
    }
    std::string where = "tensor '" + name + "'";
    if (!v.is_object())
      return invalid(where + " is not an object");
    auto dtypeIt = v.find("dtype");
    auto shapeIt = v.find("shape");
    auto offsetsIt = v.find("data_offsets");
    if (dtypeIt == v.end() || !dtypeIt->is_string())
      return invalid(where + ": dtype missing or not a string");
    if (shapeIt == v.end() || !shapeIt->is_array())
      return invalid(where + ": shape missing or not an array");
    if (offsetsIt == v.end() || !offsetsIt->is_array())
      return invalid(where + ": data_offsets missing or not an array");
    StTensor t;
    t.name = name;
    std::string dtype = dtypeIt->get<std::string>();
    if (!parseSafetensorsDType(dtype, t.dtype))
      return invalid(where + ": unknown dtype '" + dtype + "'");
    for (const json &d : *shapeIt) {
      uint64_t u;
      if (!asUInt(d, u) || u > uint64_t(std::numeric_limits<int64_t>::max()))
        return invalid(where + ": shape entries must be non-negative "
                               "integers");
      t.shape.push_back(int64_t(u));
    }
    if (offsetsIt->size() != 2)
      return invalid(where + format(": data_offsets has %zu entries, "
                                    "expected 2 (InvalidOffset)",
                                    offsetsIt->size()));
    if (!asUInt((*offsetsIt)[0], t.begin) || !asUInt((*offsetsIt)[1], t.end))
      return invalid(where + ": data_offsets must be non-negative integers");
    if (t.begin > t.end)
      return invalid(where + format(": data_offsets [%llu, %llu] are "
                                    "inverted (InvalidOffset)",
                                    (unsigned long long)t.begin,
                                    (unsigned long long)t.end));
    if (t.end > dataSize)
      return headerError(
          K3RT_DATA_LOSS, path,
          where + format(": data_offsets end %llu is past the end of the "
                         "%llu-byte data region (truncated file?)",
                         (unsigned long long)t.end,
                         (unsigned long long)dataSize));
    // Checked shape x dtype arithmetic (ValidationOverflow, MisalignedSlice,
    // TensorInvalidInfo).
    uint64_t bits = dtypeBits(t.dtype);
    for (int64_t d : t.shape)
      if (mulOverflow(bits, uint64_t(d), bits))
        return invalid(where + ": shape x dtype size overflows");
    if (bits % 8 != 0)
      return invalid(where + format(": %s %s is not a whole number of bytes "
                                    "(MisalignedSlice)",
                                    shapeString(t.shape).c_str(),
                                    dtype.c_str()));
    if (bits / 8 != t.end - t.begin)
      return invalid(where + format(": shape %s x %s is %llu bytes but "
                                    "data_offsets [%llu, %llu] span %llu "
                                    "(TensorInvalidInfo)",
                                    shapeString(t.shape).c_str(), dtype.c_str(),
                                    (unsigned long long)(bits / 8),
                                    (unsigned long long)t.begin,
                                    (unsigned long long)t.end,
                                    (unsigned long long)(t.end - t.begin)));
    file.tensors.push_back(std::move(t));
  }

  // The tensors must tile [0, dataSize) exactly (InvalidOffset,
  // MetadataIncompleteBuffer).
  std::vector<const StTensor *> order;
  order.reserve(file.tensors.size());
  for (const StTensor &t : file.tensors)
    order.push_back(&t);
  std::sort(
      order.begin(), order.end(), [](const StTensor *a, const StTensor *b) {
        return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
      });
  uint64_t expected = 0;
  const StTensor *previous = nullptr;
  for (const StTensor *t : order) {
    if (t->begin < expected)
      return invalid(format("tensor '%s' [%llu, %llu) overlaps tensor '%s' "
                            "[%llu, %llu) (InvalidOffset)",
                            t->name.c_str(), (unsigned long long)t->begin,
                            (unsigned long long)t->end, previous->name.c_str(),
                            (unsigned long long)previous->begin,
                            (unsigned long long)previous->end));
    if (t->begin > expected)
      return invalid(format("data bytes [%llu, %llu) before tensor '%s' "
                            "belong to no tensor (InvalidOffset)",
                            (unsigned long long)expected,
                            (unsigned long long)t->begin, t->name.c_str()));
    expected = t->end;
    previous = t;
  }
  if (expected != dataSize)
    return invalid(format("the tensors cover %llu of the %llu data bytes "
                          "(MetadataIncompleteBuffer)",
                          (unsigned long long)expected,
                          (unsigned long long)dataSize));
  out = std::move(file);
  return nullptr;
}

k3rt_status *k3rt::readSafetensorsHeader(const std::string &path, StFile &out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    return headerError(err == ENOENT ? K3RT_NOT_FOUND : K3RT_INVALID_ARGUMENT,
                       path, std::string("cannot open: ") + std::strerror(err));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};

  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    return headerError(K3RT_INVALID_ARGUMENT, path, "not a regular file");
  uint64_t fileSize = uint64_t(st.st_size);
  if (fileSize < 8)
    return headerError(K3RT_DATA_LOSS, path,
                       format("the file is %llu bytes, too short for the "
                              "8-byte header length (truncated?)",
                              (unsigned long long)fileSize));
  uint8_t lengthBytes[8];
  if (::pread(fd, lengthBytes, 8, 0) != 8)
    return headerError(K3RT_DATA_LOSS, path, "cannot read the header length");
  uint64_t headerLength = 0;
  for (int i = 7; i >= 0; --i)
    headerLength = (headerLength << 8) | lengthBytes[i];
  if (headerLength > kMaxHeaderBytes)
    return headerError(K3RT_INVALID_ARGUMENT, path,
                       format("header length %llu exceeds the cap of %llu "
                              "bytes (HeaderTooLarge)",
                              (unsigned long long)headerLength,
                              (unsigned long long)kMaxHeaderBytes));
  if (headerLength > fileSize - 8)
    return headerError(K3RT_DATA_LOSS, path,
                       format("header length %llu runs past the end of the "
                              "%llu-byte file (InvalidHeaderLength; "
                              "truncated?)",
                              (unsigned long long)headerLength,
                              (unsigned long long)fileSize));
  std::string header(size_t(headerLength), '\0');
  uint64_t done = 0;
  while (done < headerLength) {
    ssize_t n = ::pread(fd, &header[done], size_t(headerLength - done),
                        off_t(8 + done));
    if (n <= 0)
      return headerError(K3RT_DATA_LOSS, path, "cannot read the header");
    done += uint64_t(n);
  }
  return parseSafetensorsHeader(path, header.data(), headerLength, fileSize,
                                out);
}

//===----------------------------------------------------------------------===//
// MappedFile, Buffer
//===----------------------------------------------------------------------===//

MappedFile::MappedFile(MappedFile &&other) noexcept
    : addr(other.addr), length(other.length) {
  other.addr = nullptr;
  other.length = 0;
}

MappedFile &MappedFile::operator=(MappedFile &&other) noexcept {
  std::swap(addr, other.addr);
  std::swap(length, other.length);
  return *this;
}

MappedFile::~MappedFile() {
  if (addr)
    ::munmap(addr, length);
}

k3rt_status *MappedFile::map(const std::string &path, uint64_t expectedSize,
                             MappedFile &out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return headerError(K3RT_NOT_FOUND, path,
                       std::string("cannot open: ") + std::strerror(errno));
  struct stat st;
  // The size is checked again right before mapping: touching a mapping past
  // the end of a file raises SIGBUS instead of an error.
  if (::fstat(fd, &st) != 0 || uint64_t(st.st_size) != expectedSize ||
      expectedSize == 0) {
    ::close(fd);
    return headerError(K3RT_DATA_LOSS, path,
                       "the file changed size since it was validated");
  }
  void *p =
      ::mmap(nullptr, size_t(expectedSize), PROT_READ, MAP_PRIVATE, fd, 0);
  int err = errno;
  ::close(fd);
  if (p == MAP_FAILED)
    return headerError(K3RT_RESOURCE_EXHAUSTED, path,
                       std::string("cannot map: ") + std::strerror(err));
  MappedFile m;
  m.addr = p;
  m.length = expectedSize;
  out = std::move(m);
  return nullptr;
}

Buffer::Buffer(Buffer &&other) noexcept
    : addr(other.addr), length(other.length) {
  other.addr = nullptr;
  other.length = 0;
}

Buffer &Buffer::operator=(Buffer &&other) noexcept {
  std::swap(addr, other.addr);
  std::swap(length, other.length);
  return *this;
}

Buffer::~Buffer() {
  if (addr)
    ::munmap(addr, length);
}

k3rt_status *Buffer::allocate(uint64_t bytes, const char *what, Buffer &out) {
  Buffer b;
  if (bytes == 0) {
    out = std::move(b);
    return nullptr;
  }
  if (bytes > uint64_t(std::numeric_limits<size_t>::max() / 2))
    return makeStatus(K3RT_RESOURCE_EXHAUSTED,
                      "cannot allocate %llu bytes for %s",
                      (unsigned long long)bytes, what);
  void *p = ::mmap(nullptr, size_t(bytes), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return makeStatus(K3RT_RESOURCE_EXHAUSTED,
                      "cannot allocate %llu bytes for %s: %s",
                      (unsigned long long)bytes, what, std::strerror(errno));
  b.addr = p;
  b.length = bytes;
  out = std::move(b);
  return nullptr;
}
