//===- Npy.cpp - NumPy .npy / .npz writers for k3-run ---------------------===//

#include "Npy.h"

#include <cstdio>
#include <cstring>

using namespace k3run;

std::string k3run::npyBytes(const std::vector<int64_t> &shape,
                            const std::vector<float> &data) {
  // "(3,)" for rank 1, "(2, 3)" otherwise.
  std::string tuple = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    tuple += std::to_string(shape[i]);
    if (shape.size() == 1)
      tuple += ",";
    else if (i + 1 < shape.size())
      tuple += ", ";
  }
  tuple += ")";
  std::string header =
      "{'descr': '<f4', 'fortran_order': False, 'shape': " + tuple + ", }";
  // Magic (6) + version (2) + length (2) + header + '\n', padded with
  // spaces to a multiple of 64 bytes (NEP 1).
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += char(1);
  out += char(0);
  uint16_t n = uint16_t(header.size());
  out += char(n & 0xff);
  out += char(n >> 8);
  out += header;
  size_t at = out.size();
  out.resize(at + data.size() * sizeof(float));
  if (!data.empty())
    std::memcpy(&out[at], data.data(), data.size() * sizeof(float));
  return out;
}

static uint32_t crc32(const std::string &bytes) {
  static uint32_t table[256];
  static bool ready = false;
  if (!ready) {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k)
        c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
      table[i] = c;
    }
    ready = true;
  }
  uint32_t c = 0xffffffffu;
  for (unsigned char b : bytes)
    c = table[(c ^ b) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

static void put16(std::string &out, uint32_t v) {
  out += char(v & 0xff);
  out += char((v >> 8) & 0xff);
}

static void put32(std::string &out, uint32_t v) {
  put16(out, v & 0xffff);
  put16(out, v >> 16);
}

std::string k3run::npzBytes(const std::vector<NpzMember> &members) {
  const uint32_t dosTime = 0, dosDate = (0 << 9) | (1 << 5) | 1; // 1980-01-01
  std::string out, central;
  for (const NpzMember &m : members) {
    std::string name = m.name + ".npy";
    std::string data = npyBytes(m.shape, m.data);
    if (data.size() >= 0xffffffffu || out.size() >= 0xffffffffu)
      return std::string();
    uint32_t crc = crc32(data);
    uint32_t offset = uint32_t(out.size());
    // Local file header.
    put32(out, 0x04034b50);
    put16(out, 20); // version needed
    put16(out, 0);  // flags
    put16(out, 0);  // stored
    put16(out, dosTime);
    put16(out, dosDate);
    put32(out, crc);
    put32(out, uint32_t(data.size()));
    put32(out, uint32_t(data.size()));
    put16(out, uint32_t(name.size()));
    put16(out, 0); // extra
    out += name;
    out += data;
    // Central directory entry.
    put32(central, 0x02014b50);
    put16(central, 20); // made by
    put16(central, 20); // needed
    put16(central, 0);
    put16(central, 0);
    put16(central, dosTime);
    put16(central, dosDate);
    put32(central, crc);
    put32(central, uint32_t(data.size()));
    put32(central, uint32_t(data.size()));
    put16(central, uint32_t(name.size()));
    put16(central, 0); // extra
    put16(central, 0); // comment
    put16(central, 0); // disk
    put16(central, 0); // internal attributes
    put32(central, 0); // external attributes
    put32(central, offset);
    central += name;
  }
  if (out.size() >= 0xffffffffu)
    return std::string();
  uint32_t centralOffset = uint32_t(out.size());
  out += central;
  put32(out, 0x06054b50);
  put16(out, 0);
  put16(out, 0);
  put16(out, uint32_t(members.size()));
  put16(out, uint32_t(members.size()));
  put32(out, uint32_t(central.size()));
  put32(out, centralOffset);
  put16(out, 0);
  return out;
}

bool k3run::writeFile(const std::string &path, const std::string &bytes) {
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f)
    return false;
  bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  return std::fclose(f) == 0 && ok;
}
