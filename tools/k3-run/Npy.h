//===- Npy.h - NumPy .npy / .npz writers for k3-run -------------*- C++ -*-===//
//
// .npy format version 1.0 (little-endian float32, C order) and .npz as an
// uncompressed ("stored") zip of .npy members, as numpy.load reads them.
//
//===----------------------------------------------------------------------===//

#ifndef K3RUN_NPY_H
#define K3RUN_NPY_H

#include <cstdint>
#include <string>
#include <vector>

namespace k3run {

/// The bytes of a .npy file holding `data` with `shape` (float32).
std::string npyBytes(const std::vector<int64_t> &shape,
                     const std::vector<float> &data);

struct NpzMember {
  std::string name; ///< without ".npy"
  std::vector<int64_t> shape;
  std::vector<float> data;
};

/// The bytes of a stored (uncompressed) .npz archive; empty on a member
/// over 4 GiB (no zip64).
std::string npzBytes(const std::vector<NpzMember> &members);

/// Writes `bytes` to `path`; false on error.
bool writeFile(const std::string &path, const std::string &bytes);

} // namespace k3run

#endif // K3RUN_NPY_H
