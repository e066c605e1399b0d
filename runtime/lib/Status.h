//===- Status.h - k3rt status objects and helpers ---------------*- C++ -*-===//
//
// Every fallible internal function returns a `k3rt_status *` like the C API:
// nullptr is OK, anything else is an owned error that travels up unchanged.
//
//===----------------------------------------------------------------------===//

#ifndef K3RT_LIB_STATUS_H
#define K3RT_LIB_STATUS_H

#include "k3rt/k3rt.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

struct k3rt_status {
  k3rt_code code;
  std::string message;
};

namespace k3rt {

/// printf into a std::string.
std::string format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/// A new status with a printf-formatted message.
k3rt_status *makeStatus(k3rt_code code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/// A new status with `message`.
k3rt_status *makeStatus(k3rt_code code, std::string message);

/// Frees a status made by makeStatus (nullptr is a no-op).
void freeStatus(k3rt_status *status);

/// Prefixes the message of `status` with `context + ": "` (no-op on OK).
k3rt_status *annotate(k3rt_status *status, const std::string &context);

/// "a, b, c and 7 more" for at most `cap` of `items`.
std::string joinCapped(const std::vector<std::string> &items, size_t cap = 20);

/// "[1, 2, 3]".
std::string shapeString(const std::vector<int64_t> &shape);

/// Copies `full` to the caller's `out`, whose struct_size may be smaller
/// (built against an older header): only the fields it has are written.
/// False if `out` is NULL or its struct_size is not set.
template <typename T> bool copyOut(const T &full, T *out) {
  if (!out || out->struct_size < sizeof(size_t))
    return false;
  size_t size = out->struct_size;
  std::memcpy(static_cast<void *>(out), &full,
              size < sizeof(T) ? size : sizeof(T));
  out->struct_size = size;
  return true;
}

} // namespace k3rt

#define K3RT_RETURN_IF_ERROR(expr)                                             \
  do {                                                                         \
    if (k3rt_status *k3rtStatus_ = (expr))                                     \
      return k3rtStatus_;                                                      \
  } while (false)

#endif // K3RT_LIB_STATUS_H
