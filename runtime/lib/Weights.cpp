//===- Weights.cpp - a checkpoint bound to a library's manifest -----------===//
//
// Loading runs in three phases so that a bad checkpoint is rejected before
// anything is mapped or allocated (design/RUNTIME_NOTES.md §3, 8-15):
//   1. find the shards (index or single file) and validate every header;
//   2. match the tensors against the manifest, collecting every missing,
//      unexpected, duplicated or mismatching tensor into one message;
//   3. map the shards and bind each ABI weight argument: in place, or an
//      expert stack assembled into one [E, ...] buffer, or a misaligned
//      tensor copied.
//
//===----------------------------------------------------------------------===//

#include "Weights.h"

#include "ConfigHash.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <functional>
#include <memory>
#include <new>
#include <set>
#include <sys/stat.h>
#include <unistd.h>
#include <unordered_map>

using namespace k3rt;
using json = nlohmann::json;

/// Cap on the size of model.safetensors.index.json.
static constexpr uint64_t kMaxIndexBytes = 1ull << 30;

bool k3rt::isVisionTensor(const std::string &name) {
  size_t start = 0;
  while (true) {
    size_t dot = name.find('.', start);
    std::string part = name.substr(
        start, dot == std::string::npos ? std::string::npos : dot - start);
    if (part == "vision_tower" || part == "mm_projector" ||
        part == "multi_modal_projector")
      return true;
    if (dot == std::string::npos)
      return false;
    start = dot + 1;
  }
}

//===----------------------------------------------------------------------===//
// Finding the shards
//===----------------------------------------------------------------------===//

static bool isDirectory(const std::string &p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

static bool exists(const std::string &p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

static bool endsWith(const std::string &s, const char *suffix) {
  size_t n = std::strlen(suffix);
  return s.size() >= n && s.compare(s.size() - n, n, suffix) == 0;
}

static std::string realPath(const std::string &p) {
  char buf[PATH_MAX];
  if (!::realpath(p.c_str(), buf))
    return std::string();
  return buf;
}

static k3rt_status *readSmallFile(const std::string &path, uint64_t cap,
                                  std::string &out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return makeStatus(K3RT_NOT_FOUND, "%s: cannot open: %s", path.c_str(),
                      std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || uint64_t(st.st_size) > cap) {
    ::close(fd);
    return makeStatus(K3RT_INVALID_ARGUMENT, "%s: larger than %llu bytes",
                      path.c_str(), (unsigned long long)cap);
  }
  out.assign(size_t(st.st_size), '\0');
  size_t done = 0;
  while (done < out.size()) {
    ssize_t n = ::read(fd, &out[done], out.size() - done);
    if (n <= 0) {
      ::close(fd);
      return makeStatus(K3RT_DATA_LOSS, "%s: read error", path.c_str());
    }
    done += size_t(n);
  }
  ::close(fd);
  return nullptr;
}

namespace {
struct Checkpoint {
  /// The shard files, in index order.
  std::vector<std::string> shards;
  /// From the index: tensor name -> shard position in `shards`.
  std::vector<std::pair<std::string, size_t>> indexEntries;
};
} // namespace

/// A shard name from the index must stay inside the model directory
/// (promptfoo/modelaudit#1667): relative, no "..", and no symlink out.
static k3rt_status *resolveShard(const std::string &indexPath,
                                 const std::string &dir,
                                 const std::string &realDir,
                                 const std::string &name, std::string &out) {
  bool dotdot = false;
  size_t start = 0;
  while (true) {
    size_t slash = name.find('/', start);
    if (name.compare(start,
                     slash == std::string::npos ? std::string::npos
                                                : slash - start,
                     "..") == 0)
      dotdot = true;
    if (slash == std::string::npos)
      break;
    start = slash + 1;
  }
  if (name.empty() || name[0] == '/' || dotdot)
    return makeStatus(K3RT_INVALID_ARGUMENT,
                      "%s: shard path '%s' escapes the model directory %s",
                      indexPath.c_str(), name.c_str(), dir.c_str());
  std::string path = dir + "/" + name;
  std::string real = realPath(path);
  if (real.empty())
    return makeStatus(K3RT_NOT_FOUND,
                      "%s: shard '%s' listed in the index does not exist",
                      indexPath.c_str(), path.c_str());
  if (real.compare(0, realDir.size() + 1, realDir + "/") != 0)
    return makeStatus(K3RT_INVALID_ARGUMENT,
                      "%s: shard path '%s' escapes the model directory %s "
                      "(it resolves to %s)",
                      indexPath.c_str(), name.c_str(), dir.c_str(),
                      real.c_str());
  out = path;
  return nullptr;
}

static k3rt_status *readIndex(const std::string &indexPath,
                              const std::string &dir, Checkpoint &ckpt) {
  std::string text;
  K3RT_RETURN_IF_ERROR(readSmallFile(indexPath, kMaxIndexBytes, text));
  json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object())
    return makeStatus(K3RT_INVALID_ARGUMENT, "%s: not a JSON object",
                      indexPath.c_str());
  auto map = root.find("weight_map");
  if (map == root.end() || !map->is_object())
    return makeStatus(K3RT_INVALID_ARGUMENT, "%s: no \"weight_map\" object",
                      indexPath.c_str());
  std::string realDir = realPath(dir);
  std::unordered_map<std::string, size_t> shardIndex;
  for (auto it = map->begin(); it != map->end(); ++it) {
    if (!it.value().is_string())
      return makeStatus(K3RT_INVALID_ARGUMENT,
                        "%s: weight_map entry '%s' is not a string",
                        indexPath.c_str(), it.key().c_str());
    std::string name = it.value().get<std::string>();
    auto found = shardIndex.find(name);
    if (found == shardIndex.end()) {
      std::string path;
      K3RT_RETURN_IF_ERROR(resolveShard(indexPath, dir, realDir, name, path));
      found = shardIndex.emplace(name, ckpt.shards.size()).first;
      ckpt.shards.push_back(path);
    }
    ckpt.indexEntries.emplace_back(it.key(), found->second);
  }
  if (ckpt.shards.empty())
    return makeStatus(K3RT_INVALID_ARGUMENT, "%s: the weight_map is empty",
                      indexPath.c_str());
  return nullptr;
}

static k3rt_status *findCheckpoint(const std::string &path, Checkpoint &ckpt) {
  if (!exists(path))
    return makeStatus(K3RT_NOT_FOUND, "weights path %s does not exist",
                      path.c_str());
  if (isDirectory(path)) {
    std::string index = path + "/model.safetensors.index.json";
    if (exists(index))
      return readIndex(index, path, ckpt);
    std::string single = path + "/model.safetensors";
    if (exists(single)) {
      ckpt.shards.push_back(single);
      return nullptr;
    }
    return makeStatus(K3RT_NOT_FOUND,
                      "%s holds neither model.safetensors.index.json nor "
                      "model.safetensors",
                      path.c_str());
  }
  if (endsWith(path, ".json")) {
    size_t slash = path.rfind('/');
    std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
    return readIndex(path, dir.empty() ? "/" : dir, ckpt);
  }
  ckpt.shards.push_back(path);
  return nullptr;
}

//===----------------------------------------------------------------------===//
// Matching against the manifest
//===----------------------------------------------------------------------===//

namespace {
struct Location {
  int64_t shard = -1;
  int64_t tensor = -1;
};
} // namespace

static std::string expertName(const std::string &name, int64_t e) {
  size_t at = name.find("{e}");
  return name.substr(0, at) + std::to_string(e) + name.substr(at + 3);
}

static bool isTranspose(const std::vector<int64_t> &a,
                        const std::vector<int64_t> &b) {
  return a.size() == 2 && b.size() == 2 && a[0] == b[1] && a[1] == b[0];
}

/// Fills `where` (per manifest tensor spec, per expert) or reports every
/// problem in one status.
static k3rt_status *matchManifest(const std::string &path, const Manifest &m,
                                  const std::vector<StFile> &files,
                                  const Checkpoint &ckpt,
                                  std::vector<std::vector<Location>> &where,
                                  int64_t &ignored) {
  struct Expected {
    size_t spec;
    int64_t expert;
  };
  std::unordered_map<std::string, Expected> expected;
  expected.reserve(size_t(m.numCheckpointTensors));
  where.assign(m.tensors.size(), {});
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    const TensorSpec &spec = m.tensors[i];
    if (spec.experts) {
      where[i].resize(size_t(spec.experts));
      for (int64_t e = 0; e < spec.experts; ++e)
        expected.emplace(expertName(spec.name, e), Expected{i, e});
    } else {
      where[i].resize(1);
      expected.emplace(spec.name, Expected{i, -1});
    }
  }

  std::vector<std::string> unexpected, duplicated, badDtype, badShape,
      notInShard;
  std::vector<std::vector<bool>> present(m.tensors.size());
  for (size_t i = 0; i < m.tensors.size(); ++i)
    present[i].assign(where[i].size(), false);
  std::unordered_map<std::string, size_t> firstShard;
  ignored = 0;
  for (size_t s = 0; s < files.size(); ++s) {
    for (size_t t = 0; t < files[s].tensors.size(); ++t) {
      const StTensor &tensor = files[s].tensors[t];
      if (isVisionTensor(tensor.name)) {
        ++ignored;
        continue;
      }
      auto [first, fresh] = firstShard.emplace(tensor.name, s);
      if (!fresh) {
        duplicated.push_back(tensor.name + " (in " + files[first->second].path +
                             " and " + files[s].path + ")");
        continue;
      }
      auto it = expected.find(tensor.name);
      if (it == expected.end()) {
        unexpected.push_back(tensor.name);
        continue;
      }
      const TensorSpec &spec = m.tensors[it->second.spec];
      size_t slot = it->second.expert < 0 ? 0 : size_t(it->second.expert);
      present[it->second.spec][slot] = true;
      bool ok = true;
      if (tensor.dtype != spec.dtype) {
        badDtype.push_back(format("%s (%s, expected %s)", tensor.name.c_str(),
                                  safetensorsName(tensor.dtype),
                                  safetensorsName(spec.dtype)));
        ok = false;
      }
      if (tensor.shape != spec.shape) {
        badShape.push_back(
            tensor.name + " (" + shapeString(tensor.shape) + ", expected " +
            shapeString(spec.shape) +
            (isTranspose(tensor.shape, spec.shape) ? "; transposed?" : "") +
            ")");
        ok = false;
      }
      if (ok)
        where[it->second.spec][slot] = Location{int64_t(s), int64_t(t)};
    }
  }
  std::vector<std::string> missing;
  for (size_t i = 0; i < m.tensors.size(); ++i)
    for (size_t e = 0; e < present[i].size(); ++e)
      if (!present[i][e])
        missing.push_back(m.tensors[i].experts
                              ? expertName(m.tensors[i].name, int64_t(e))
                              : m.tensors[i].name);

  // The index must tell the truth about where each tensor is.
  if (!ckpt.indexEntries.empty()) {
    std::vector<std::unordered_map<std::string, bool>> names(files.size());
    for (size_t s = 0; s < files.size(); ++s)
      for (const StTensor &t : files[s].tensors)
        names[s].emplace(t.name, true);
    for (const auto &[name, shard] : ckpt.indexEntries)
      if (!names[shard].count(name))
        notInShard.push_back(name + " (index says " + files[shard].path + ")");
  }

  std::string problems;
  auto section = [&](const std::vector<std::string> &items, const char *what) {
    if (items.empty())
      return;
    if (!problems.empty())
      problems += "; ";
    problems += format("%zu %s: ", items.size(), what) + joinCapped(items);
  };
  section(missing, "missing");
  section(unexpected, "unexpected");
  section(duplicated, "duplicated across shards");
  section(badDtype, "with the wrong dtype");
  section(badShape, "with the wrong shape");
  section(notInShard, "listed in the index but absent from their shard");
  if (problems.empty())
    return nullptr;
  return makeStatus(K3RT_INVALID_ARGUMENT,
                    "checkpoint %s does not match library model '%s': %s",
                    path.c_str(), m.name.c_str(), problems.c_str());
}

//===----------------------------------------------------------------------===//
// Loading
//===----------------------------------------------------------------------===//

#define WEIGHTS_OPTION(opts, field, fallback)                                  \
  ((opts) && (opts)->struct_size >=                                            \
                 offsetof(k3rt_weights_options, field) + sizeof((opts)->field) \
       ? (opts)->field                                                         \
       : (fallback))

static void progress(const k3rt_weights_options *options, const char *stage,
                     uint64_t done, uint64_t total) {
  if (k3rt_progress_fn fn = WEIGHTS_OPTION(options, progress, nullptr))
    fn(options->progress_user, stage, done, total);
}

/// Index of the first NaN/Inf among `count` elements, or -1.
static int64_t firstNonFinite(const uint8_t *p, DType dtype,
                              const std::string &quantization, uint64_t count) {
  for (uint64_t i = 0; i < count; ++i) {
    bool bad = false;
    switch (dtype) {
    case DType::F32: {
      uint32_t v;
      std::memcpy(&v, p + 4 * i, 4);
      bad = (v & 0x7f800000u) == 0x7f800000u;
      break;
    }
    case DType::F64: {
      uint64_t v;
      std::memcpy(&v, p + 8 * i, 8);
      bad = (v & 0x7ff0000000000000ull) == 0x7ff0000000000000ull;
      break;
    }
    case DType::BF16: {
      uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      bad = (v & 0x7f80u) == 0x7f80u;
      break;
    }
    case DType::F16: {
      uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      bad = (v & 0x7c00u) == 0x7c00u;
      break;
    }
    case DType::U8: // E8M0 scales: 0xFF is NaN (K3_SPEC §7.2).
      bad = quantization == "mxfp4.scale" && p[i] == 0xff;
      break;
    default:
      return -1;
    }
    if (bad)
      return int64_t(i);
  }
  return -1;
}

/// RUNTIME_NOTES §3, 16: the opt-in scan for NaN/Inf.
static k3rt_status *
checkFinite(const std::string &path, const Manifest &m,
            const std::vector<std::vector<Location>> &where,
            const std::function<const uint8_t *(const Location &)> &dataOf) {
  std::vector<std::string> bad;
  for (size_t i = 0; i < m.tensors.size(); ++i) {
    const TensorSpec &spec = m.tensors[i];
    uint64_t count = spec.bytes * 8 / dtypeBits(spec.dtype);
    for (size_t e = 0; e < where[i].size(); ++e) {
      int64_t at = firstNonFinite(dataOf(where[i][e]), spec.dtype,
                                  spec.quantization, count);
      if (at >= 0)
        bad.push_back(format("%s (element %lld)",
                             spec.experts
                                 ? expertName(spec.name, int64_t(e)).c_str()
                                 : spec.name.c_str(),
                             (long long)at));
    }
  }
  if (bad.empty())
    return nullptr;
  return makeStatus(K3RT_DATA_LOSS,
                    "checkpoint %s: %zu tensors hold NaN or Inf: %s",
                    path.c_str(), bad.size(), joinCapped(bad).c_str());
}

k3rt_status *k3rt::loadWeights(k3rt_library *library, const char *pathArg,
                               const k3rt_weights_options *options,
                               k3rt_weights **out) {
  if (!library || !pathArg || !out)
    return makeStatus(K3RT_INVALID_ARGUMENT,
                      "k3rt_weights_load: library, path and out must not be "
                      "NULL");
  *out = nullptr;
  std::string path = pathArg;
  while (path.size() > 1 && path.back() == '/')
    path.pop_back();
  const Manifest &m = library->manifest;

  // Phase 0: a config.json next to the weights must be the library's
  // (RUNTIME_NOTES §3, 7: checked before anything is allocated).
  if (!WEIGHTS_OPTION(options, skip_config_check, 0) &&
      !m.configSha256.empty()) {
    std::string dir;
    if (isDirectory(path))
      dir = path;
    else if (endsWith(path, ".json"))
      dir = path.rfind('/') == std::string::npos
                ? "."
                : path.substr(0, std::max<size_t>(path.rfind('/'), 1));
    if (!dir.empty() && exists(dir + "/config.json"))
      K3RT_RETURN_IF_ERROR(
          checkConfigFile(dir + "/config.json", m.configSha256, library->path));
  }

  // Phase 1: headers.
  Checkpoint ckpt;
  K3RT_RETURN_IF_ERROR(findCheckpoint(path, ckpt));
  std::vector<StFile> files(ckpt.shards.size());
  for (size_t i = 0; i < ckpt.shards.size(); ++i) {
    K3RT_RETURN_IF_ERROR(readSafetensorsHeader(ckpt.shards[i], files[i]));
    progress(options, "validate", i + 1, ckpt.shards.size());
  }

  // Phase 2: the manifest.
  std::vector<std::vector<Location>> where;
  int64_t ignored = 0;
  K3RT_RETURN_IF_ERROR(matchManifest(path, m, files, ckpt, where, ignored));

  // Phase 3: map and bind.
  std::unique_ptr<k3rt_weights> w(new (std::nothrow) k3rt_weights);
  if (!w)
    return makeStatus(K3RT_RESOURCE_EXHAUSTED, "out of host memory");
  w->maps.resize(files.size());
  uint64_t mapped = 0;
  for (size_t i = 0; i < files.size(); ++i) {
    K3RT_RETURN_IF_ERROR(
        MappedFile::map(files[i].path, files[i].fileSize, w->maps[i]));
    mapped += files[i].fileSize;
    progress(options, "map", i + 1, files.size());
  }
  auto dataOf = [&](const Location &loc) -> const uint8_t * {
    const StFile &f = files[size_t(loc.shard)];
    return w->maps[size_t(loc.shard)].data() + f.dataOffset +
           f.tensors[size_t(loc.tensor)].begin;
  };

  if (WEIGHTS_OPTION(options, check_finite, 0))
    K3RT_RETURN_IF_ERROR(checkFinite(path, m, where, dataOf));

  uint64_t stacks = 0, copied = 0;
  for (const AbiArg &arg : m.args)
    if (arg.role == ArgRole::Weight && m.tensors[size_t(arg.ref)].experts)
      ++stacks;
  uint64_t stacksDone = 0;
  w->argData.assign(m.args.size(), nullptr);
  if (m.gpu) {
    // A GPU library: every weight argument gets device memory, streamed
    // from the mapping (expert stacks assembled in place); the mappings
    // are dropped afterwards.
    uint64_t weightArgs = 0, uploaded = 0;
    for (const AbiArg &arg : m.args)
      weightArgs += arg.role == ArgRole::Weight;
    for (size_t a = 0; a < m.args.size(); ++a) {
      const AbiArg &arg = m.args[a];
      if (arg.role != ArgRole::Weight)
        continue;
      const TensorSpec &spec = m.tensors[size_t(arg.ref)];
      const std::vector<Location> &locs = where[size_t(arg.ref)];
      Memory d;
      K3RT_RETURN_IF_ERROR(Memory::allocate(
          arg.bytes, ("weight " + spec.name).c_str(), Memory::Place::Device,
          d));
      int64_t parts = std::max<int64_t>(spec.experts, 1);
      for (int64_t e = 0; e < parts; ++e)
        copyBytes(true, d.data() + uint64_t(e) * spec.bytes,
                  dataOf(locs[size_t(e)]), spec.bytes);
      if (const char *err = cudaError())
        return makeStatus(K3RT_ABORTED, "uploading weight %s: %s",
                          spec.name.c_str(), err);
      w->argData[a] = d.data();
      w->device.push_back(std::move(d));
      copied += arg.bytes;
      progress(options, "upload", ++uploaded, weightArgs);
    }
    w->maps.clear();
  }
  for (size_t a = 0; a < m.args.size() && !m.gpu; ++a) {
    const AbiArg &arg = m.args[a];
    if (arg.role != ArgRole::Weight)
      continue;
    const TensorSpec &spec = m.tensors[size_t(arg.ref)];
    const std::vector<Location> &locs = where[size_t(arg.ref)];
    if (spec.experts) {
      // docs/ABI.md: a stack is one contiguous [E, ...] buffer.
      Buffer b;
      K3RT_RETURN_IF_ERROR(Buffer::allocate(arg.bytes, spec.name.c_str(), b));
      for (int64_t e = 0; e < spec.experts; ++e)
        std::memcpy(b.data() + uint64_t(e) * spec.bytes,
                    dataOf(locs[size_t(e)]), size_t(spec.bytes));
      w->argData[a] = b.data();
      w->buffers.push_back(std::move(b));
      copied += arg.bytes;
      progress(options, "assemble", ++stacksDone, stacks);
      continue;
    }
    const uint8_t *p = dataOf(locs[0]);
    uint64_t align = arg.alignment;
    if (align > 1 && reinterpret_cast<uintptr_t>(p) % align != 0) {
      Buffer b;
      K3RT_RETURN_IF_ERROR(Buffer::allocate(arg.bytes, spec.name.c_str(), b));
      std::memcpy(b.data(), p, size_t(arg.bytes));
      p = b.data();
      w->buffers.push_back(std::move(b));
      copied += arg.bytes;
    }
    w->argData[a] = p;
  }

  w->info.struct_size = sizeof(k3rt_weights_info);
  w->info.num_shards = int64_t(files.size());
  w->info.num_tensors = m.numCheckpointTensors;
  w->info.num_ignored = ignored;
  w->info.mapped_bytes = mapped;
  w->info.copied_bytes = copied;
  retain(library);
  w->library = library;
  *out = w.release();
  return nullptr;
}

//===----------------------------------------------------------------------===//
// Weights generated from a seed
//===----------------------------------------------------------------------===//

namespace {
/// Arguments of k3_fill_random (Kernels/Random.mlir): an element is
/// float((h mod range) + off) * scale (bytes: (h mod range) + off).
struct FillParams {
  int32_t kind; ///< 0: bf16, 1: f32, 2: bytes
  int32_t range;
  int32_t off;
  float scale;
};

/// Uniform on [lo, hi) in 2^24 steps.
FillParams uniform(int32_t kind, double lo, double hi) {
  double scale = (hi - lo) / double(1 << 24);
  return {kind, 1 << 24, int32_t(std::llround(lo / scale)), float(scale)};
}

/// Uniform with mean `mean` and standard deviation `sd` (half-width √3 sd).
FillParams spread(int32_t kind, double mean, double sd) {
  double a = std::sqrt(3.0) * sd;
  return uniform(kind, mean - a, mean + a);
}

/// The distribution of a generated weight: k3-weights' (a checkpoint for
/// the tests) with its spreads as uniform distributions and gain 1 for
/// linear layers: norm gains around 1, KDA decay and bias ranges that keep
/// the gates in (lower bound, 0), MXFP4 codes uniform with scales around
/// 1/sqrt(K), everything else around 0 with spread 1/sqrt(fan-in).
FillParams fillParams(const TensorSpec &t) {
  auto endsWith = [&](const char *suffix) {
    size_t n = std::strlen(suffix);
    return t.name.size() >= n &&
           t.name.compare(t.name.size() - n, n, suffix) == 0;
  };
  if (t.quantization == "mxfp4.packed")
    return {2, 256, 0, 0.0f};
  if (t.quantization == "mxfp4.scale") {
    // E8M0 127 - round(log2 sqrt(K)) + {-1, 0, 1}.
    double k = 32.0 * double(t.shape.empty() ? 1 : t.shape.back());
    int32_t base = 127 - int32_t(std::floor(std::log2(std::sqrt(k)) + 0.5));
    return {2, 3, base - 1, 0.0f};
  }
  if (t.dtype == DType::U8 || t.dtype == DType::I8)
    return {2, 256, 0, 0.0f};
  int32_t kind = t.dtype == DType::F32 ? 1 : 0;
  double fanIn = t.shape.size() >= 2 ? double(t.shape.back()) : 1.0;
  if (endsWith("norm.weight"))
    return spread(kind, 1.0, 0.1);
  if (endsWith("A_log"))
    return uniform(kind, std::log(0.5), std::log(16.0));
  if (endsWith("dt_bias") || endsWith("embed_tokens.weight"))
    return spread(kind, 0.0, 1.0);
  if (endsWith("conv1d.weight") || endsWith("e_score_correction_bias"))
    return spread(kind, 0.0, 0.5);
  if (endsWith("_res_proj.weight"))
    return spread(kind, 0.0, 2.0 / std::sqrt(fanIn));
  return spread(kind, 0.0, 1.0 / std::sqrt(fanIn));
}

/// FNV-1a of a tensor name: its stream of random numbers, the same in
/// every library of the model.
uint64_t streamOf(const std::string &name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name)
    h = (h ^ c) * 1099511628211ull;
  return h;
}

/// A rank-1 memref descriptor (docs/ABI.md) of `words` i32.
struct Words {
  void *allocated;
  void *aligned;
  int64_t offset;
  int64_t size;
  int64_t stride;
};
} // namespace

k3rt_status *k3rt::generateWeights(k3rt_library *library, uint64_t seed,
                                   const k3rt_weights_options *options,
                                   k3rt_weights **out) {
  if (!library || !out)
    return makeStatus(K3RT_INVALID_ARGUMENT,
                      "k3rt_weights_generate: library and out must not be "
                      "NULL");
  *out = nullptr;
  if (!library->fillRandom)
    return makeStatus(K3RT_FAILED_PRECONDITION,
                      "library %s has no k3_fill_random (compiled by a k3c "
                      "without generated weights): use k3rt_weights_load",
                      library->path.c_str());
  const Manifest &m = library->manifest;
  auto w = std::make_unique<k3rt_weights>();
  w->argData.assign(m.args.size(), nullptr);
  uint64_t total = 0, done = 0, generated = 0;
  for (const AbiArg &arg : m.args)
    total += arg.role == ArgRole::Weight;
  // The library's kernels fill the weights: GPU work (Device.h, lockGpu).
  std::unique_lock<std::recursive_mutex> gpu;
  if (m.gpu) {
    gpu = lockGpu();
    cudaSetStream(nullptr);
  }
  for (size_t a = 0; a < m.args.size(); ++a) {
    const AbiArg &arg = m.args[a];
    if (arg.role != ArgRole::Weight)
      continue;
    const TensorSpec &spec = m.tensors[size_t(arg.ref)];
    // Whole 32-bit words: a bf16 or byte tensor of odd size gets padding.
    uint64_t bytes = (arg.bytes + 3) / 4 * 4;
    std::string what = "weight " + spec.name;
    uint8_t *data = nullptr;
    if (m.gpu) {
      Memory d;
      K3RT_RETURN_IF_ERROR(
          Memory::allocate(bytes, what.c_str(), Memory::Place::Device, d));
      data = d.data();
      w->device.push_back(std::move(d));
    } else {
      Buffer b;
      K3RT_RETURN_IF_ERROR(Buffer::allocate(bytes, what.c_str(), b));
      data = b.data();
      w->buffers.push_back(std::move(b));
    }
    FillParams p = fillParams(spec);
    Words words{data, data, 0, int64_t(bytes / 4), 1};
    library->fillRandom(&words, seed, streamOf(spec.name), p.kind, p.range,
                        p.off, p.scale);
    if (m.gpu) {
      cudaWorkspaceReset();
      if (const char *err = cudaError())
        return makeStatus(K3RT_ABORTED, "generating weight %s: %s",
                          spec.name.c_str(), err);
    }
    w->argData[a] = data;
    generated += arg.bytes;
    progress(options, "generate", ++done, total);
  }
  w->info.struct_size = sizeof(k3rt_weights_info);
  w->info.num_tensors = m.numCheckpointTensors;
  w->info.generated_bytes = generated;
  retain(library);
  w->library = library;
  *out = w.release();
  return nullptr;
}

void k3rt::retain(k3rt_weights *weights) {
  weights->refs.fetch_add(1, std::memory_order_relaxed);
}

void k3rt::release(k3rt_weights *weights) {
  if (!weights || weights->refs.fetch_sub(1, std::memory_order_acq_rel) != 1)
    return;
  k3rt_library *library = weights->library;
  delete weights;
  release(library);
}
