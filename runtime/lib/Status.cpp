//===- Status.cpp - k3rt status objects and helpers -----------------------===//

#include "Status.h"

#include <cstdarg>
#include <cstdio>
#include <new>

using namespace k3rt;

static std::string vformat(const char *fmt, va_list args) {
  va_list copy;
  va_copy(copy, args);
  int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  if (n <= 0)
    return std::string();
  std::string out(size_t(n) + 1, '\0');
  std::vsnprintf(&out[0], out.size(), fmt, args);
  out.resize(size_t(n));
  return out;
}

std::string k3rt::format(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::string s = vformat(fmt, args);
  va_end(args);
  return s;
}

/// Returned when a status itself cannot be allocated (never freed).
static k3rt_status outOfMemory{K3RT_RESOURCE_EXHAUSTED, "out of host memory"};

void k3rt::freeStatus(k3rt_status *status) {
  if (status != &outOfMemory)
    delete status;
}

k3rt_status *k3rt::makeStatus(k3rt_code code, std::string message) {
  // A status must never be nullptr (that would read as OK).
  k3rt_status *s = new (std::nothrow) k3rt_status;
  if (!s)
    return &outOfMemory;
  s->code = code;
  s->message = std::move(message);
  return s;
}

k3rt_status *k3rt::makeStatus(k3rt_code code, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::string s = vformat(fmt, args);
  va_end(args);
  return makeStatus(code, std::move(s));
}

k3rt_status *k3rt::annotate(k3rt_status *status, const std::string &context) {
  if (status && status != &outOfMemory)
    status->message = context + ": " + status->message;
  return status;
}

std::string k3rt::joinCapped(const std::vector<std::string> &items,
                             size_t cap) {
  std::string out;
  size_t shown = items.size() < cap ? items.size() : cap;
  for (size_t i = 0; i < shown; ++i) {
    if (i)
      out += ", ";
    out += items[i];
  }
  if (items.size() > shown)
    out += format(" and %zu more", items.size() - shown);
  return out;
}

std::string k3rt::shapeString(const std::vector<int64_t> &shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}
