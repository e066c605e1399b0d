//===- Manifest.cpp - the compiled library's manifest, validated ----------===//
//
// Built without exceptions: every JSON access is type-checked first and the
// text is parsed with allow_exceptions = false.
//
//===----------------------------------------------------------------------===//

#include "Manifest.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <limits>
#include <set>
#include <tuple>

using namespace k3rt;
using json = nlohmann::json;

//===----------------------------------------------------------------------===//
// Element types
//===----------------------------------------------------------------------===//

namespace {
struct DTypeEntry {
  DType type;
  const char *manifest;
  const char *safetensors;
  unsigned bits;
};
} // namespace

// safetensors dtypes (huggingface/safetensors `Dtype`), sub-byte ones in bits.
static const DTypeEntry dtypeTable[] = {
    {DType::BF16, "bf16", "BF16", 16},
    {DType::F16, "f16", "F16", 16},
    {DType::F32, "f32", "F32", 32},
    {DType::F64, "f64", "F64", 64},
    {DType::U8, "u8", "U8", 8},
    {DType::I8, "i8", "I8", 8},
    {DType::U16, "u16", "U16", 16},
    {DType::I16, "i16", "I16", 16},
    {DType::U32, "u32", "U32", 32},
    {DType::I32, "i32", "I32", 32},
    {DType::U64, "u64", "U64", 64},
    {DType::I64, "i64", "I64", 64},
    {DType::Bool, "bool", "BOOL", 8},
    {DType::F8E4M3, "f8_e4m3", "F8_E4M3", 8},
    {DType::F8E5M2, "f8_e5m2", "F8_E5M2", 8},
    {DType::F8E8M0, "f8_e8m0", "F8_E8M0", 8},
    {DType::F6E2M3, "f6_e2m3", "F6_E2M3", 6},
    {DType::F6E3M2, "f6_e3m2", "F6_E3M2", 6},
    {DType::F4, "f4", "F4", 4},
};

static const DTypeEntry &entryOf(DType t) {
  for (const DTypeEntry &e : dtypeTable)
    if (e.type == t)
      return e;
  return dtypeTable[0];
}

unsigned k3rt::dtypeBits(DType t) { return entryOf(t).bits; }
const char *k3rt::manifestName(DType t) { return entryOf(t).manifest; }
const char *k3rt::safetensorsName(DType t) { return entryOf(t).safetensors; }

bool k3rt::parseManifestDType(const std::string &s, DType &out) {
  for (const DTypeEntry &e : dtypeTable)
    if (s == e.manifest) {
      out = e.type;
      return true;
    }
  return false;
}

bool k3rt::parseSafetensorsDType(const std::string &s, DType &out) {
  for (const DTypeEntry &e : dtypeTable)
    if (s == e.safetensors) {
      out = e.type;
      return true;
    }
  return false;
}

bool k3rt::mulOverflow(uint64_t a, uint64_t b, uint64_t &out) {
  return __builtin_mul_overflow(a, b, &out);
}

bool k3rt::tensorBytes(const std::vector<int64_t> &shape, DType dtype,
                       uint64_t &bytes) {
  uint64_t bits = dtypeBits(dtype);
  for (int64_t d : shape) {
    if (d < 0 || mulOverflow(bits, uint64_t(d), bits))
      return false;
  }
  if (bits % 8 != 0) // safetensors `MisalignedSlice`
    return false;
  bytes = bits / 8;
  return true;
}

int64_t Manifest::findGroup(const std::string &kind) const {
  for (size_t i = 0; i < groups.size(); ++i)
    if (groups[i].kind == kind)
      return int64_t(i);
  return -1;
}

//===----------------------------------------------------------------------===//
// Typed JSON access
//===----------------------------------------------------------------------===//

static k3rt_status *bad(const std::string &path, const std::string &what) {
  const char *key = path.c_str();
  if (*key == '.') // a top-level key
    ++key;
  return makeStatus(K3RT_INVALID_ARGUMENT, "manifest %s: %s", key,
                    what.c_str());
}

static const json *member(const json &obj, const char *key) {
  if (!obj.is_object())
    return nullptr;
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

static bool asInt(const json &j, int64_t &out) {
  if (j.is_number_unsigned()) {
    uint64_t u = j.get<uint64_t>();
    if (u > uint64_t(std::numeric_limits<int64_t>::max()))
      return false;
    out = int64_t(u);
    return true;
  }
  if (!j.is_number_integer())
    return false;
  out = j.get<int64_t>();
  return true;
}

static k3rt_status *getString(const json &obj, const std::string &path,
                              const char *key, std::string &out,
                              bool optional = false) {
  const json *j = member(obj, key);
  if (!j) {
    if (optional)
      return nullptr;
    return bad(path + "." + key, "missing");
  }
  if (!j->is_string())
    return bad(path + "." + key, "not a string");
  out = j->get<std::string>();
  return nullptr;
}

static k3rt_status *getInt(const json &obj, const std::string &path,
                           const char *key, int64_t &out, int64_t min,
                           bool optional = false) {
  const json *j = member(obj, key);
  if (!j) {
    if (optional)
      return nullptr;
    return bad(path + "." + key, "missing");
  }
  if (!asInt(*j, out))
    return bad(path + "." + key, "not an integer");
  if (out < min)
    return bad(path + "." + key,
               format("%lld is below %lld", (long long)out, (long long)min));
  return nullptr;
}

static k3rt_status *getInts(const json &obj, const std::string &path,
                            const char *key, std::vector<int64_t> &out,
                            int64_t min) {
  const json *j = member(obj, key);
  if (!j)
    return bad(path + "." + key, "missing");
  if (!j->is_array())
    return bad(path + "." + key, "not an array");
  out.clear();
  for (const json &e : *j) {
    int64_t v;
    if (!asInt(e, v) || v < min)
      return bad(path + "." + key,
                 format("entries must be integers >= %lld", (long long)min));
    out.push_back(v);
  }
  return nullptr;
}

static k3rt_status *getDType(const json &obj, const std::string &path,
                             DType &out) {
  std::string s;
  K3RT_RETURN_IF_ERROR(getString(obj, path, "dtype", s));
  if (!parseManifestDType(s, out))
    return bad(path + ".dtype", "unknown dtype '" + s + "'");
  return nullptr;
}

//===----------------------------------------------------------------------===//
// Sections
//===----------------------------------------------------------------------===//

static k3rt_status *parseModel(const json &root, Manifest &m) {
  const json *model = member(root, "model");
  if (!model || !model->is_object())
    return bad("model", "missing or not an object");
  K3RT_RETURN_IF_ERROR(getString(*model, "model", "name", m.name));
  K3RT_RETURN_IF_ERROR(
      getString(*model, "model", "model_type", m.modelType, true));
  K3RT_RETURN_IF_ERROR(
      getString(*model, "model", "config_sha256", m.configSha256, true));
  if (!m.configSha256.empty()) {
    bool hex = m.configSha256.size() == 64;
    for (char c : m.configSha256)
      hex = hex && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
    if (!hex)
      return bad("model.config_sha256",
                 "'" + m.configSha256 + "' is not 64 lower-case hex digits");
  }
  K3RT_RETURN_IF_ERROR(getInt(*model, "model", "vocab_size", m.vocabSize, 1));
  if (m.vocabSize > std::numeric_limits<int32_t>::max())
    return bad("model.vocab_size", "token ids are i32");
  K3RT_RETURN_IF_ERROR(
      getInt(*model, "model", "hidden_size", m.hiddenSize, 1, true));
  K3RT_RETURN_IF_ERROR(
      getInt(*model, "model", "num_layers", m.numLayers, 1, true));
  K3RT_RETURN_IF_ERROR(getInt(*model, "model", "max_context", m.maxContext, 1));
  return nullptr;
}

static k3rt_status *
parseWeights(const json &root, Manifest &m,
             std::unordered_map<std::string, size_t> &byName) {
  const json *weights = member(root, "weights");
  const json *tensors = weights ? member(*weights, "tensors") : nullptr;
  if (!tensors || !tensors->is_array())
    return bad("weights.tensors", "missing or not an array");
  for (size_t i = 0; i < tensors->size(); ++i) {
    const json &t = (*tensors)[i];
    std::string path = format("weights.tensors[%zu]", i);
    if (!t.is_object())
      return bad(path, "not an object");
    TensorSpec spec;
    K3RT_RETURN_IF_ERROR(getString(t, path, "name", spec.name));
    if (spec.name.empty())
      return bad(path + ".name", "empty");
    path += " (" + spec.name + ")";
    K3RT_RETURN_IF_ERROR(getInts(t, path, "shape", spec.shape, 0));
    if (spec.shape.size() + 1 > size_t(kMaxRank))
      return bad(path + ".shape", "rank too large");
    K3RT_RETURN_IF_ERROR(getDType(t, path, spec.dtype));
    K3RT_RETURN_IF_ERROR(getInt(t, path, "experts", spec.experts, 1, true));
    K3RT_RETURN_IF_ERROR(
        getString(t, path, "quantization", spec.quantization, true));
    if (const json *used = member(t, "used")) {
      if (!used->is_boolean())
        return bad(path + ".used", "not a boolean");
      spec.used = used->get<bool>();
    }
    size_t at = spec.name.find("{e}");
    bool placeholder = at != std::string::npos;
    if (placeholder != (spec.experts > 0) ||
        (placeholder && spec.name.find("{e}", at + 3) != std::string::npos))
      return bad(path, "an expert stack needs exactly one '{e}' in its name "
                       "and \"experts\", and only a stack may have them");
    if (!tensorBytes(spec.shape, spec.dtype, spec.bytes))
      return bad(path, "size overflows or is not a whole number of bytes");
    uint64_t all;
    if (mulOverflow(spec.bytes, uint64_t(std::max<int64_t>(spec.experts, 1)),
                    all))
      return bad(path, "size overflows");
    if (!byName.emplace(spec.name, m.tensors.size()).second)
      return bad(path, "duplicate tensor name");
    m.numCheckpointTensors += std::max<int64_t>(spec.experts, 1);
    m.tensors.push_back(std::move(spec));
  }
  return nullptr;
}

/// "major.minor" of a "major.minor.patch" version, or "" if it is not one.
static std::string majorMinor(const std::string &v) {
  size_t a = v.find('.');
  size_t b = a == std::string::npos ? a : v.find('.', a + 1);
  if (a == 0 || a == std::string::npos || b == a + 1)
    return std::string();
  std::string mm = v.substr(0, b);
  for (char c : mm)
    if (c != '.' && !std::isdigit((unsigned char)c))
      return std::string();
  return mm;
}

/// The k3c that compiled the library: this runtime opens libraries of the
/// k3c it was released with, up to the patch level (RUNTIME_NOTES §3
/// item 7; MLC's _metadata, TensorRT's engine version check).
static k3rt_status *parseCompiler(const json &root, Manifest &m) {
  const json *c = member(root, "compiler");
  if (!c)
    return makeStatus(K3RT_FAILED_PRECONDITION,
                      "the manifest has no 'compiler' (a library from a k3c "
                      "before 0.5); recompile it with k3c %s",
                      K3RT_K3C_VERSION);
  if (!c->is_object())
    return bad("compiler", "not an object");
  std::string name;
  K3RT_RETURN_IF_ERROR(getString(*c, "compiler", "name", name));
  K3RT_RETURN_IF_ERROR(getString(*c, "compiler", "version", m.compilerVersion));
  if (name != "k3c")
    return bad("compiler.name", "'" + name + "', expected 'k3c'");
  std::string mm = majorMinor(m.compilerVersion);
  if (mm.empty())
    return bad("compiler.version",
               "'" + m.compilerVersion + "' is not MAJOR.MINOR.PATCH");
  if (mm != majorMinor(K3RT_K3C_VERSION))
    return makeStatus(K3RT_FAILED_PRECONDITION,
                      "the library was compiled by k3c %s; this runtime opens "
                      "libraries of k3c %s.x (recompile it with k3c %s)",
                      m.compilerVersion.c_str(),
                      majorMinor(K3RT_K3C_VERSION).c_str(), K3RT_K3C_VERSION);
  return nullptr;
}

/// moe.ep_degree: the expert-parallel degree the library was compiled for.
/// This runtime runs every expert in one process (RUNTIME_NOTES §3 item 25).
static k3rt_status *parseExpertParallel(const json &root) {
  const json *moe = member(root, "moe");
  if (!moe)
    return nullptr;
  int64_t degree = 1;
  K3RT_RETURN_IF_ERROR(getInt(*moe, "moe", "ep_degree", degree, 1,
                              /*optional=*/true));
  if (degree != 1)
    return makeStatus(K3RT_FAILED_PRECONDITION,
                      "the library was compiled for expert parallelism over "
                      "%lld ranks (moe.ep_degree); this runtime runs every "
                      "expert in one process",
                      (long long)degree);
  return nullptr;
}

/// The targets the library holds code for: "host" or NVIDIA GPUs.
static k3rt_status *parseTargets(const json &root, Manifest &m) {
  const json *targets = member(root, "targets");
  if (!targets || !targets->is_array() || targets->empty())
    return bad("targets", "missing, not an array or empty");
  for (const json &t : *targets) {
    if (!t.is_string())
      return bad("targets", "entries must be strings");
    m.targets.push_back(t.get<std::string>());
    m.targetList += (m.targetList.empty() ? "" : ",") + m.targets.back();
  }
  // "host", or NVIDIA GPUs ("sm_90", "sm_90,sm_100"): one kind per library.
  bool host = false, gpu = false;
  for (const std::string &t : m.targets) {
    bool sm = t.size() > 3 && t.compare(0, 3, "sm_") == 0 &&
              std::isdigit((unsigned char)t[3]);
    if (t == "host")
      host = true;
    else if (sm)
      gpu = true;
    else
      return makeStatus(K3RT_FAILED_PRECONDITION,
                        "the library was compiled for target '%s' (targets "
                        "[%s]); this runtime runs 'host' and NVIDIA 'sm_NN' "
                        "code",
                        t.c_str(), m.targetList.c_str());
  }
  if (host && gpu)
    return bad("targets", "mixes host and GPU targets");
  m.gpu = gpu;
  return nullptr;
}

/// The state layouts this runtime knows, with the dims each implies
/// (RUNTIME_NOTES §1.4: a state layout mix-up corrupts silently).
static k3rt_status *checkLayout(const json &g, const std::string &path,
                                StateGroup &group) {
  struct Known {
    const char *kindPrefix;
    const char *layout;
    std::vector<std::string> dims;
  };
  static const Known known[] = {
      {"kda.recurrent", "value_first", {"heads", "value", "key"}},
      {"kda.recurrent", "key_first", {"heads", "key", "value"}},
      {"kda.conv_", "channels_major", {"channels", "taps"}},
      {"mla.latent", "latent_then_rope", {"latent+rope"}},
  };
  bool kindKnown = false;
  for (const Known &k : known)
    if (group.kind.rfind(k.kindPrefix, 0) == 0)
      kindKnown = true;
  if (!kindKnown || group.layout.empty())
    return nullptr;
  std::vector<std::string> dims;
  if (const json *d = member(g, "dims")) {
    if (!d->is_array())
      return bad(path + ".dims", "not an array");
    for (const json &e : *d) {
      if (!e.is_string())
        return bad(path + ".dims", "entries must be strings");
      dims.push_back(e.get<std::string>());
    }
  }
  std::vector<std::string> layouts;
  for (const Known &k : known) {
    if (group.kind.rfind(k.kindPrefix, 0) != 0)
      continue;
    layouts.push_back(k.layout);
    if (group.layout != k.layout)
      continue;
    if (!dims.empty() && dims != k.dims) {
      std::string got, want;
      for (const std::string &x : dims)
        got += (got.empty() ? "" : ", ") + x;
      for (const std::string &x : k.dims)
        want += (want.empty() ? "" : ", ") + x;
      return makeStatus(K3RT_FAILED_PRECONDITION,
                        "manifest %s: layout '%s' means dims [%s], the "
                        "manifest says [%s] (a state layout mix-up)",
                        path.c_str(), group.layout.c_str(), want.c_str(),
                        got.c_str());
    }
    if (group.shape.size() != k.dims.size())
      return makeStatus(K3RT_FAILED_PRECONDITION,
                        "manifest %s: layout '%s' has rank %zu, the shape "
                        "%s",
                        path.c_str(), group.layout.c_str(), k.dims.size(),
                        shapeString(group.shape).c_str());
    return nullptr;
  }
  return makeStatus(K3RT_FAILED_PRECONDITION,
                    "manifest %s: state layout '%s' is not one this runtime "
                    "implements (%s)",
                    path.c_str(), group.layout.c_str(),
                    joinCapped(layouts).c_str());
}

static k3rt_status *parseState(const json &root, Manifest &m) {
  const json *state = member(root, "state");
  const json *groups = state ? member(*state, "groups") : nullptr;
  if (!groups || !groups->is_array())
    return bad("state.groups", "missing or not an array");
  for (size_t i = 0; i < groups->size(); ++i) {
    const json &g = (*groups)[i];
    std::string path = format("state.groups[%zu]", i);
    if (!g.is_object())
      return bad(path, "not an object");
    StateGroup group;
    K3RT_RETURN_IF_ERROR(getString(g, path, "kind", group.kind));
    path += " (" + group.kind + ")";
    if (m.findGroup(group.kind) >= 0)
      return bad(path, "duplicate state group");
    K3RT_RETURN_IF_ERROR(getInts(g, path, "layers", group.layers, 0));
    K3RT_RETURN_IF_ERROR(getInts(g, path, "shape", group.shape, 1));
    // k3rt_state_shape reports up to 4 dimensions.
    if (group.shape.empty() || group.shape.size() > 4)
      return bad(path + ".shape", "rank must be 1 to 4");
    K3RT_RETURN_IF_ERROR(getDType(g, path, group.dtype));
    if (dtypeBits(group.dtype) % 8 != 0)
      return bad(path + ".dtype", "state must be whole bytes per element");
    K3RT_RETURN_IF_ERROR(getString(g, path, "layout", group.layout, true));
    K3RT_RETURN_IF_ERROR(getInt(g, path, "page_size", group.pageSize, 1, true));
    K3RT_RETURN_IF_ERROR(
        getInt(g, path, "chunk_size", group.chunkSize, 1, true));
    K3RT_RETURN_IF_ERROR(checkLayout(g, path, group));
    if (group.kind == "kda.recurrent") {
      m.kdaLayout = group.layout;
      m.kdaChunkSize = group.chunkSize;
    }
    if (group.pageSize) {
      if (group.shape.size() != 1)
        return bad(path + ".shape", "a paged group stores one vector per "
                                    "token: shape must be [width]");
      if (m.pagedGroup >= 0)
        return bad(path, "more than one paged state group (the page table "
                         "is shared by all paged layers)");
      m.pagedGroup = int64_t(m.groups.size());
      m.pageSize = group.pageSize;
    }
    std::set<int64_t> unique(group.layers.begin(), group.layers.end());
    if (unique.size() != group.layers.size())
      return bad(path + ".layers", "a layer is listed twice");
    m.groups.push_back(std::move(group));
  }
  return nullptr;
}

static bool shapeEq(const std::vector<int64_t> &a,
                    const std::vector<int64_t> &b) {
  return a == b;
}

static k3rt_status *
parseAbi(const json &root, Manifest &m,
         const std::unordered_map<std::string, size_t> &byName) {
  const json *abi = member(root, "abi");
  if (!abi || !abi->is_object())
    return bad("abi", "missing or not an object");
  int64_t version;
  K3RT_RETURN_IF_ERROR(getInt(*abi, "abi", "version", version, 0));
  if (version != K3RT_LIBRARY_ABI_VERSION)
    return makeStatus(K3RT_FAILED_PRECONDITION,
                      "manifest abi.version is %lld; this runtime implements "
                      "library ABI %d",
                      (long long)version, K3RT_LIBRARY_ABI_VERSION);
  std::string entry;
  K3RT_RETURN_IF_ERROR(getString(*abi, "abi", "entry", entry));
  if (entry != "k3_forward")
    return bad("abi.entry", "'" + entry + "', expected 'k3_forward'");
  const json *args = member(*abi, "args");
  if (!args || !args->is_array())
    return bad("abi.args", "missing or not an array");

  int tokens = 0, logits = 0;
  // (group, layer, part) seen, to find duplicates and gaps.
  std::set<std::tuple<int64_t, int64_t, std::string>> stateSeen;
  std::set<size_t> weightSeen;
  for (size_t i = 0; i < args->size(); ++i) {
    const json &a = (*args)[i];
    std::string path = format("abi.args[%zu]", i);
    if (!a.is_object())
      return bad(path, "not an object");
    AbiArg arg;
    std::string role;
    K3RT_RETURN_IF_ERROR(getString(a, path, "role", role));
    K3RT_RETURN_IF_ERROR(getString(a, path, "name", arg.name, true));
    K3RT_RETURN_IF_ERROR(getString(a, path, "part", arg.part, true));
    K3RT_RETURN_IF_ERROR(getInt(a, path, "layer", arg.layer, 0, true));
    K3RT_RETURN_IF_ERROR(getInts(a, path, "shape", arg.shape, -1));
    if (arg.shape.size() > size_t(kMaxRank))
      return bad(path + ".shape", "rank too large");
    K3RT_RETURN_IF_ERROR(getDType(a, path, arg.dtype));
    int64_t alignment = 0;
    K3RT_RETURN_IF_ERROR(getInt(a, path, "alignment", alignment, 1, true));
    if (alignment & (alignment - 1) || alignment > 4096)
      return bad(path + ".alignment", "must be a power of two up to 4096");
    arg.alignment =
        std::max<uint64_t>(uint64_t(alignment), (dtypeBits(arg.dtype) + 7) / 8);
    if (!arg.name.empty())
      path += " (" + arg.name + (arg.part.empty() ? "" : " " + arg.part) +
              (arg.layer >= 0 ? format(" layer %lld", (long long)arg.layer)
                              : std::string()) +
              ")";

    if (role == "tokens") {
      arg.role = ArgRole::Tokens;
      ++tokens;
      if (!shapeEq(arg.shape, {-1}) || arg.dtype != DType::I32)
        return bad(path, "tokens must be [-1] i32");
    } else if (role == "logits") {
      arg.role = ArgRole::Logits;
      ++logits;
      if (!shapeEq(arg.shape, {-1, m.vocabSize}) || arg.dtype != DType::F32)
        return bad(path, format("logits must be [-1, %lld] f32 "
                                "(model.vocab_size)",
                                (long long)m.vocabSize));
    } else if (role == "weight") {
      arg.role = ArgRole::Weight;
      // An MXFP4 stack is two arguments naming the group; the checkpoint
      // tensors are "<name>.weight_packed" and "<name>.weight_scale".
      std::string tensor = arg.name;
      if (!arg.part.empty()) {
        if (arg.part != "packed" && arg.part != "scale")
          return bad(path + ".part",
                     "'" + arg.part + "', expected 'packed' or 'scale'");
        tensor += ".weight_" + arg.part;
      }
      auto it = byName.find(tensor);
      if (it == byName.end())
        return bad(path, "no tensor '" + tensor + "' in weights.tensors");
      const TensorSpec &spec = m.tensors[it->second];
      if (!spec.used)
        return bad(path, "tensor '" + tensor + "' is marked unused");
      if (!weightSeen.insert(it->second).second)
        return bad(path, "tensor '" + tensor + "' is passed twice");
      std::vector<int64_t> want = spec.shape;
      if (spec.experts)
        want.insert(want.begin(), spec.experts);
      if (!shapeEq(arg.shape, want) || arg.dtype != spec.dtype)
        return bad(path,
                   format("shape %s %s differs from weights.tensors "
                          "entry %s %s",
                          shapeString(arg.shape).c_str(),
                          manifestName(arg.dtype), shapeString(want).c_str(),
                          manifestName(spec.dtype)));
      arg.ref = int64_t(it->second);
      arg.bytes = spec.bytes * uint64_t(std::max<int64_t>(spec.experts, 1));
    } else if (role == "state") {
      int64_t g = m.findGroup(arg.name);
      if (g < 0)
        return bad(path, "no state group '" + arg.name + "'");
      const StateGroup &group = m.groups[size_t(g)];
      arg.ref = g;
      if (arg.layer < 0 || std::find(group.layers.begin(), group.layers.end(),
                                     arg.layer) == group.layers.end())
        return bad(path, "layer is not one of the group's layers");
      if (!stateSeen.emplace(g, arg.layer, arg.part).second)
        return bad(path, "passed twice");
      if (group.pageSize) {
        int64_t width = group.shape[0];
        if (arg.part == "pool") {
          arg.role = ArgRole::PagePool;
          if (!shapeEq(arg.shape, {-1, group.pageSize, width}) ||
              arg.dtype != group.dtype)
            return bad(path, format("a pool must be [-1, %lld, %lld] %s",
                                    (long long)group.pageSize, (long long)width,
                                    manifestName(group.dtype)));
          m.pagedLayers.push_back(arg.layer);
        } else if (arg.part == "page_table") {
          arg.role = ArgRole::PageTable;
          if (!shapeEq(arg.shape, {-1, -1}) || arg.dtype != DType::I32)
            return bad(path, "a page table must be [-1, -1] i32");
        } else if (arg.part == "length") {
          arg.role = ArgRole::PageLength;
          if (!shapeEq(arg.shape, {-1}) || arg.dtype != DType::I64)
            return bad(path, "a length must be [-1] i64");
        } else {
          return bad(path + ".part", "'" + arg.part +
                                         "', expected 'pool', 'page_table' "
                                         "or 'length'");
        }
      } else if (arg.part == "slots") {
        arg.role = ArgRole::Slots;
        if (!shapeEq(arg.shape, {-1}) || arg.dtype != DType::I32)
          return bad(path, "slots must be [-1] i32");
      } else {
        arg.role = ArgRole::SlotPool;
        if (arg.part != "pool")
          return bad(path + ".part", "'" + arg.part +
                                         "', expected 'pool' or 'slots'");
        std::vector<int64_t> want = {-1};
        want.insert(want.end(), group.shape.begin(), group.shape.end());
        if (!shapeEq(arg.shape, want) || arg.dtype != group.dtype)
          return bad(path, format("shape %s %s differs from the group's %s %s",
                                  shapeString(arg.shape).c_str(),
                                  manifestName(arg.dtype),
                                  shapeString(want).c_str(),
                                  manifestName(group.dtype)));
        uint64_t bytes;
        if (!tensorBytes(group.shape, arg.dtype, bytes))
          return bad(path, "size overflows");
        arg.bytes = bytes;
        // 64-byte aligned regions inside a slot.
        arg.slotOffset = m.slotBytes;
        m.slotBytes += (bytes + 63) / 64 * 64;
      }
    } else {
      return bad(path + ".role", "unknown role '" + role + "'");
    }
    m.args.push_back(std::move(arg));
  }
  if (tokens != 1 || logits != 1)
    return bad("abi.args", "needs exactly one tokens and one logits argument");

  // Every group layer is passed, and a paged layer with all three parts.
  for (size_t g = 0; g < m.groups.size(); ++g) {
    const StateGroup &group = m.groups[g];
    for (int64_t layer : group.layers) {
      if (group.pageSize) {
        for (const char *part : {"pool", "page_table", "length"})
          if (!stateSeen.count({int64_t(g), layer, part}))
            return bad("abi.args",
                       format("%s layer %lld has no '%s' argument",
                              group.kind.c_str(), (long long)layer, part));
      } else {
        for (const char *part : {"pool", "slots"})
          if (!stateSeen.count({int64_t(g), layer, part}))
            return bad("abi.args",
                       format("%s layer %lld has no '%s' argument",
                              group.kind.c_str(), (long long)layer, part));
      }
    }
  }
  if (m.pagedGroup >= 0) {
    const StateGroup &group = m.groups[size_t(m.pagedGroup)];
    uint64_t bytes;
    std::vector<int64_t> page = {group.pageSize, group.shape[0]};
    if (!tensorBytes(page, group.dtype, bytes) ||
        mulOverflow(bytes, m.pagedLayers.size(), m.pageBytes))
      return bad("state.groups", "page size overflows");
    m.pageBytesPerLayer = bytes;
    for (AbiArg &arg : m.args)
      if (arg.role == ArgRole::PagePool)
        arg.bytes = bytes;
  }
  return nullptr;
}

k3rt_status *k3rt::parseManifest(const char *text, Manifest &out) {
  if (!text)
    return makeStatus(K3RT_INVALID_ARGUMENT, "the manifest is NULL");
  json root = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded())
    return makeStatus(K3RT_INVALID_ARGUMENT, "the manifest is not valid JSON");
  if (!root.is_object())
    return makeStatus(K3RT_INVALID_ARGUMENT,
                      "the manifest is not a JSON object");
  Manifest m;
  m.json = text;
  std::string fmt;
  K3RT_RETURN_IF_ERROR(getString(root, "", "format", fmt));
  if (fmt != "k3c-manifest")
    return bad("format", "'" + fmt + "', expected 'k3c-manifest'");
  int64_t version;
  K3RT_RETURN_IF_ERROR(getInt(root, "", "version", version, 0));
  if (version != 1)
    return makeStatus(K3RT_FAILED_PRECONDITION,
                      "manifest version %lld; this runtime reads version 1",
                      (long long)version);
  std::unordered_map<std::string, size_t> byName;
  K3RT_RETURN_IF_ERROR(parseCompiler(root, m));
  K3RT_RETURN_IF_ERROR(parseModel(root, m));
  K3RT_RETURN_IF_ERROR(parseExpertParallel(root));
  K3RT_RETURN_IF_ERROR(parseTargets(root, m));
  K3RT_RETURN_IF_ERROR(parseWeights(root, m, byName));
  K3RT_RETURN_IF_ERROR(parseState(root, m));
  K3RT_RETURN_IF_ERROR(parseAbi(root, m, byName));
  out = std::move(m);
  return nullptr;
}
