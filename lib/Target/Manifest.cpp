//===- Manifest.cpp - model description, manifest JSON, summary -----------===//

#include "k3/Target/Manifest.h"
#include "k3/Dialect/K3/IR/K3.h"
#include "k3/Version.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <nlohmann/json.hpp>

#include <map>

using namespace mlir;
using namespace mlir::k3;
using ojson = nlohmann::ordered_json;

//===----------------------------------------------------------------------===//
// Reading the module
//===----------------------------------------------------------------------===//

static std::string dtypeName(Type t) {
  if (t.isBF16())
    return "bf16";
  if (t.isF16())
    return "f16";
  if (t.isF32())
    return "f32";
  if (t.isInteger(8))
    return "u8";
  std::string s;
  llvm::raw_string_ostream(s) << t;
  return s;
}

static int64_t dtypeBytes(StringRef dtype) {
  return dtype == "f32" ? 4 : dtype == "u8" ? 1 : 2;
}

/// The ops that finally consume `v`, looking through calls into callees.
static void collectUsers(Value v, ModuleOp module,
                         SmallVectorImpl<Operation *> &users) {
  for (OpOperand &use : v.getUses()) {
    auto call = dyn_cast<func::CallOp>(use.getOwner());
    if (!call) {
      users.push_back(use.getOwner());
      continue;
    }
    auto callee = module.lookupSymbol<func::FuncOp>(call.getCallee());
    if (!callee || callee.isExternal()) {
      users.push_back(call);
      continue;
    }
    collectUsers(callee.getArgument(use.getOperandNumber()), module, users);
  }
}

/// Kind of a body: the k3 op that defines it.
static std::string bodyKind(func::FuncOp fn) {
  std::string kind;
  fn.walk([&](Operation *op) {
    if (isa<KDAOp>(op))
      kind = "kda";
    else if (isa<GatedMLAOp>(op))
      kind = "mla";
    else if (isa<GLUMLPOp>(op))
      kind = "dense";
    else if (isa<LatentMoEOp>(op))
      kind = "moe";
  });
  return kind;
}

/// Tensors and parameter count of a weight reference `name` of `type`.
static WeightGroup describeTensors(StringRef name, Type type) {
  WeightGroup g;
  g.name = name.str();
  ArrayRef<int64_t> shape;
  std::string dtype;
  if (auto mx = dyn_cast<MXFP4Type>(type)) {
    shape = mx.getShape();
    dtype = "mxfp4";
  } else {
    auto t = cast<RankedTensorType>(type);
    shape = t.getShape();
    dtype = dtypeName(t.getElementType());
  }
  ArrayRef<int64_t> per = shape;
  if (name.contains("{e}")) {
    g.experts = shape.front();
    per = shape.drop_front();
  }
  g.parameters = 1;
  for (int64_t d : shape)
    g.parameters *= d;

  auto tensorOf = [](std::string name, std::vector<int64_t> s,
                     std::string dtype, std::string quant) {
    TensorInfo t{std::move(name), std::move(s), std::move(dtype),
                 std::move(quant), 0};
    t.bytes = dtypeBytes(t.dtype);
    for (int64_t d : t.shape)
      t.bytes *= d;
    return t;
  };
  std::vector<int64_t> s(per.begin(), per.end());
  if (dtype == "mxfp4") {
    // K3_SPEC §7.2: packed nibbles [.., N, K/2], E8M0 scales [.., N, K/32].
    std::vector<int64_t> packed = s, scale = s;
    packed.back() /= 2;
    scale.back() /= MXFP4Type::kGroupSize;
    g.tensors.push_back(
        tensorOf(g.name + ".weight_packed", packed, "u8", "mxfp4.packed"));
    g.tensors.push_back(
        tensorOf(g.name + ".weight_scale", scale, "u8", "mxfp4.scale"));
  } else {
    g.tensors.push_back(tensorOf(g.name, s, dtype, "none"));
  }
  return g;
}

static WeightGroup describeWeight(WeightOp op, ModuleOp module) {
  WeightGroup g = describeTensors(op.getName(), op.getType());

  // Active per token (K3_SPEC §1.4): an expert stack contributes top_k of
  // its experts; the embedding table is excluded; everything else is read.
  SmallVector<Operation *> users;
  collectUsers(op.getResult(), module, users);
  g.activeParameters = 0;
  for (Operation *user : users) {
    if (isa<EmbeddingOp>(user))
      continue;
    if (auto moe = dyn_cast<LatentMoEOp>(user);
        moe && g.experts && g.experts == int64_t(moe.getNumExperts())) {
      g.activeParameters = g.parameters / g.experts * int64_t(moe.getTopK());
      break;
    }
    g.activeParameters = g.parameters;
    break;
  }
  return g;
}

static StateGroup describeState(Type type) {
  StateGroup s;
  if (auto kda = dyn_cast<KDAStateType>(type)) {
    bool vFirst = kda.getLayout() == KDAStateLayout::ValueFirst;
    s.shape = {kda.getHeads(), vFirst ? kda.getValueDim() : kda.getKeyDim(),
               vFirst ? kda.getKeyDim() : kda.getValueDim()};
    s.dims = {"heads", vFirst ? "value" : "key", vFirst ? "key" : "value"};
    s.dtype = dtypeName(kda.getElementType());
    s.layout = stringifyKDAStateLayout(kda.getLayout()).str();
  } else if (auto conv = dyn_cast<ConvStateType>(type)) {
    s.shape = {conv.getChannels(), conv.getWidth()};
    s.dims = {"channels", "taps"};
    s.dtype = dtypeName(conv.getElementType());
    s.layout = "channels_major";
  } else if (auto mla = dyn_cast<MLACacheType>(type)) {
    s.shape = {mla.getTokenWidth()};
    s.dims = {"latent+rope"};
    s.dtype = dtypeName(mla.getElementType());
    s.layout = "latent_then_rope";
    s.perToken = true;
    s.pageSize = mla.getPageSize();
  }
  s.bytesPerLayer = dtypeBytes(s.dtype);
  for (int64_t d : s.shape)
    s.bytesPerLayer *= d;
  return s;
}

FailureOr<ModelInfo> mlir::k3::describeModel(ModuleOp module) {
  ModelInfo info;
  auto str = [&](StringRef name) -> std::string {
    auto a = module->getAttrOfType<StringAttr>(name);
    return a ? a.str() : std::string();
  };
  auto num = [&](StringRef name) -> int64_t {
    auto a = module->getAttrOfType<IntegerAttr>(name);
    return a ? a.getInt() : 0;
  };
  info.name = str("k3.model");
  info.modelType = str("k3.model_type");
  info.configHash = str("k3.config_hash");
  info.maxContext = num("k3.max_context");
  info.attnResBlockSize = num("k3.attn_res_block_size");

  auto forward = module.lookupSymbol<func::FuncOp>("forward");
  if (!forward || forward.isExternal() || info.attnResBlockSize <= 0)
    return module.emitError(
        "not an imported k3 model: needs a @forward function and the "
        "k3.attn_res_block_size attribute");

  // Layer map from the calls of @forward.
  std::map<int64_t, LayerInfo> layers;
  forward.walk([&](func::CallOp call) {
    auto l = call->getAttrOfType<IntegerAttr>("k3.layer");
    auto callee = module.lookupSymbol<func::FuncOp>(call.getCallee());
    if (!l || !callee)
      return;
    LayerInfo &li = layers[l.getInt()];
    li.index = l.getInt();
    std::string kind = bodyKind(callee);
    (kind == "kda" || kind == "mla" ? li.mixer : li.ffn) = kind;
  });
  forward.walk([&](AttnResOp op) {
    auto l = op->getAttrOfType<IntegerAttr>("k3.layer");
    auto site = op->getAttrOfType<StringAttr>("k3.site");
    if (!l || !site)
      return;
    int64_t n = op.getCandidates().size();
    if (site.getValue() == "output")
      info.outputCandidates = n;
    else if (site.getValue() == "mixer")
      layers[l.getInt()].preMixerCandidates = n;
    else
      layers[l.getInt()].preFFNCandidates = n;
  });
  for (auto &[l, li] : layers) {
    if (l >= 0 && l < int64_t(layers.size()) && !li.mixer.empty() &&
        !li.ffn.empty()) {
      li.blockBoundary = l % info.attnResBlockSize == 0;
      info.layers.push_back(li);
    }
  }
  if (info.layers.size() != layers.size() || info.layers.empty())
    return forward.emitError("the layer calls of @forward do not form layers "
                             "0..N-1, each with a mixer and an FFN");

  forward.walk([&](EmbeddingOp op) {
    auto t = op.getTable().getType();
    info.vocabSize = t.getDimSize(0);
    info.hiddenSize = t.getDimSize(1);
  });
  module.walk([&](LatentMoEOp op) {
    info.numExperts = op.getNumExperts();
    info.topK = op.getTopK();
    info.expertFormat =
        isa<MXFP4Type>(op.getExpertGate().getType()) ? "mxfp4" : "bf16";
  });

  // Weights, in IR order, once per name.
  llvm::StringSet<> seen;
  module.walk([&](WeightOp op) {
    if (!seen.insert(op.getName()).second)
      return;
    WeightGroup g = describeWeight(op, module);
    int64_t copies = g.experts ? g.experts : 1;
    for (const TensorInfo &t : g.tensors) {
      info.tensorCount += copies;
      info.weightBytes += copies * t.bytes;
    }
    info.totalParameters += g.parameters;
    info.activeParameters += g.activeParameters;
    info.weights.push_back(std::move(g));
  });

  // Tensors the checkpoint holds but the model does not read.
  module.walk([&](UnusedWeightOp op) {
    if (!seen.insert(op.getName()).second)
      return;
    WeightGroup g = describeTensors(op.getName(), op.getType());
    g.used = false;
    g.activeParameters = 0;
    info.tensorCount += 1;
    info.weightBytes += g.tensors.front().bytes;
    info.totalParameters += g.parameters;
    info.weights.push_back(std::move(g));
  });

  // The library ABI (docs/ABI.md): tokens, the weights read, every state
  // argument of @forward in order, the logits.
  info.abi.push_back({"tokens", "", "", -1, {-1}, "i32"});
  for (const WeightGroup &g : info.weights) {
    if (!g.used)
      continue;
    for (const TensorInfo &t : g.tensors) {
      AbiArg a{"weight", g.name, "", -1, t.shape, t.dtype};
      if (t.quantization == "mxfp4.packed")
        a.part = "packed";
      else if (t.quantization == "mxfp4.scale")
        a.part = "scale";
      if (g.experts)
        a.shape.insert(a.shape.begin(), g.experts);
      info.abi.push_back(a);
    }
  }

  // State groups from the annotated arguments of @forward.
  std::map<std::string, size_t> groupIndex;
  for (BlockArgument arg : forward.getArguments()) {
    auto kind = forward.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                     "k3.state");
    auto layer = forward.getArgAttrOfType<IntegerAttr>(arg.getArgNumber(),
                                                       "k3.layer");
    if (!kind || !layer)
      continue;
    auto [it, fresh] = groupIndex.try_emplace(kind.str(), info.states.size());
    if (fresh) {
      info.states.push_back(describeState(arg.getType()));
      info.states.back().kind = kind.str();
      // Snapshots of the KDA state align with the chunks of its prefill.
      if (isa<KDAStateType>(arg.getType()))
        module.walk([&](KDAOp op) {
          info.states.back().chunkSize = op.getChunkSize();
        });
    }
    info.states[it->second].layers.push_back(layer.getInt());
    const StateGroup &g = info.states[it->second];
    if (auto mla = dyn_cast<MLACacheType>(arg.getType())) {
      info.abi.push_back({"state", g.kind, "pool", layer.getInt(),
                          {-1, mla.getPageSize(), mla.getTokenWidth()},
                          g.dtype});
      info.abi.push_back(
          {"state", g.kind, "page_table", layer.getInt(), {-1, -1}, "i32"});
      info.abi.push_back({"state", g.kind, "length", layer.getInt(), {-1}, "i64"});
    } else {
      // The slot pool (one state per sequence slot) and the call's slots.
      std::vector<int64_t> pool = {-1};
      pool.insert(pool.end(), g.shape.begin(), g.shape.end());
      info.abi.push_back({"state", g.kind, "pool", layer.getInt(), pool, g.dtype});
      info.abi.push_back({"state", g.kind, "slots", layer.getInt(), {-1}, "i32"});
    }
  }
  info.abi.push_back({"logits", "", "", -1, {-1, info.vocabSize}, "f32"});
  return info;
}

//===----------------------------------------------------------------------===//
// Manifest JSON
//===----------------------------------------------------------------------===//

/// One line: {"a": 1, "b": [1, 2]}.
static std::string inlineJSON(const ojson &j) {
  if (j.is_object()) {
    std::string s = "{";
    for (auto it = j.begin(); it != j.end(); ++it)
      s += (it == j.begin() ? "" : ", ") + ojson(it.key()).dump() + ": " +
           inlineJSON(it.value());
    return s + "}";
  }
  if (j.is_array()) {
    std::string s = "[";
    for (size_t i = 0; i < j.size(); ++i)
      s += (i ? ", " : "") + inlineJSON(j[i]);
    return s + "]";
  }
  return j.dump();
}

/// Indented JSON that keeps short objects and arrays on one line, so a
/// manifest reads (and greps) one layer, tensor or state group per line.
static void writeJSON(const ojson &j, std::string &out, int indent) {
  std::string flat = inlineJSON(j);
  bool scalars = j.is_array() && llvm::all_of(j, [](const ojson &e) {
                   return e.is_primitive();
                 });
  if (!j.is_structured() || scalars || flat.size() + indent <= 200) {
    out += flat;
    return;
  }
  bool isObject = j.is_object();
  out += isObject ? "{\n" : "[\n";
  size_t i = 0;
  for (auto it = j.begin(); it != j.end(); ++it, ++i) {
    out += std::string(indent + 2, ' ');
    if (isObject)
      out += ojson(it.key()).dump() + ": ";
    writeJSON(it.value(), out, indent + 2);
    out += i + 1 < j.size() ? ",\n" : "\n";
  }
  out += std::string(indent, ' ') + (isObject ? "}" : "]");
}

std::string mlir::k3::manifestJSON(const ModelInfo &info,
                                   ArrayRef<std::string> targets) {
  ojson m;
  m["format"] = "k3c-manifest";
  m["version"] = 1;
  m["compiler"] = {{"name", "k3c"}, {"version", K3C_VERSION}};
  m["model"] = {{"name", info.name},
                {"model_type", info.modelType},
                {"config_sha256", info.configHash},
                {"vocab_size", info.vocabSize},
                {"hidden_size", info.hiddenSize},
                {"num_layers", info.layers.size()},
                {"max_context", info.maxContext}};
  m["targets"] = std::vector<std::string>(targets.begin(), targets.end());

  ojson layers = ojson::array();
  for (const LayerInfo &l : info.layers)
    layers.push_back({{"index", l.index},
                      {"mixer", l.mixer},
                      {"ffn", l.ffn},
                      {"block_boundary", l.blockBoundary},
                      {"attn_res",
                       {{"pre_mixer", l.preMixerCandidates},
                        {"pre_ffn", l.preFFNCandidates}}}});
  m["layers"] = layers;
  m["attn_res"] = {{"block_size", info.attnResBlockSize},
                   {"output_candidates", info.outputCandidates}};
  if (info.numExperts)
    m["moe"] = {{"num_experts", info.numExperts},
                {"top_k", info.topK},
                {"expert_format", info.expertFormat},
                {"ep_degree", 1}}; // every expert in this library

  ojson states = ojson::array();
  int64_t perSequence = 0, perToken = 0;
  for (const StateGroup &s : info.states) {
    int64_t total = s.bytesPerLayer * int64_t(s.layers.size());
    ojson g = {{"kind", s.kind},     {"layers", s.layers},
               {"shape", s.shape},   {"dims", s.dims},
               {"dtype", s.dtype},   {"layout", s.layout}};
    if (s.chunkSize)
      g["chunk_size"] = s.chunkSize;
    if (s.perToken) {
      g["page_size"] = s.pageSize;
      g["bytes_per_token_per_layer"] = s.bytesPerLayer;
      g["bytes_per_token"] = total;
      perToken += total;
    } else {
      g["bytes_per_sequence_per_layer"] = s.bytesPerLayer;
      g["bytes_per_sequence"] = total;
      perSequence += total;
    }
    states.push_back(g);
  }
  m["state"] = {{"groups", states},
                {"bytes_per_sequence", perSequence},
                {"bytes_per_token", perToken}};

  // One entry per checkpoint tensor; an expert stack is one entry whose
  // name holds "{e}" for expert indices 0 .. experts-1.
  ojson tensors = ojson::array();
  for (const WeightGroup &g : info.weights) {
    for (const TensorInfo &t : g.tensors) {
      ojson entry = {{"name", t.name}, {"shape", t.shape}, {"dtype", t.dtype}};
      if (t.quantization != "none")
        entry["quantization"] = t.quantization;
      if (g.experts)
        entry["experts"] = g.experts;
      if (!g.used)
        entry["used"] = false;
      entry["bytes"] = t.bytes;
      tensors.push_back(entry);
    }
  }
  m["weights"] = {{"tensor_count", info.tensorCount},
                  {"bytes", info.weightBytes},
                  {"expert_placeholder", "{e}"},
                  {"tensors", tensors}};
  ojson args = ojson::array();
  for (const AbiArg &a : info.abi) {
    ojson e = {{"role", a.role}};
    if (!a.name.empty())
      e["name"] = a.name;
    if (!a.part.empty())
      e["part"] = a.part;
    if (a.layer >= 0)
      e["layer"] = a.layer;
    e["shape"] = a.shape;
    e["dtype"] = a.dtype;
    args.push_back(e);
  }
  m["abi"] = {{"version", kLibraryAbiVersion},
              {"entry", "k3_forward"},
              {"args", args}};
  m["parameters"] = {{"total", info.totalParameters},
                     {"active_per_token", info.activeParameters},
                     {"active_excludes", {"embedding"}}};
  std::string out;
  writeJSON(m, out, 0);
  return out;
}

//===----------------------------------------------------------------------===//
// Weight list and summary
//===----------------------------------------------------------------------===//

void mlir::k3::printWeightList(const ModelInfo &info, llvm::raw_ostream &os) {
  auto line = [&](StringRef name, const TensorInfo &t) {
    os << name << '\t' << t.dtype << "\t[";
    llvm::interleave(t.shape, os, ",");
    os << "]\t" << t.quantization << '\n';
  };
  for (const WeightGroup &g : info.weights) {
    for (const TensorInfo &t : g.tensors) {
      if (!g.experts) {
        line(t.name, t);
        continue;
      }
      size_t at = t.name.find("{e}");
      for (int64_t e = 0; e < g.experts; ++e)
        line(t.name.substr(0, at) + std::to_string(e) + t.name.substr(at + 3),
             t);
    }
  }
}

/// "0-2,4-6,8" for a sorted list.
static std::string ranges(ArrayRef<int64_t> xs) {
  std::string out;
  for (size_t i = 0; i < xs.size();) {
    size_t j = i;
    while (j + 1 < xs.size() && xs[j + 1] == xs[j] + 1)
      ++j;
    if (!out.empty())
      out += ",";
    out += std::to_string(xs[i]);
    if (j > i)
      out += (j == i + 1 ? "," : "-") + std::to_string(xs[j]);
    i = j + 1;
  }
  return out;
}

static std::string bytes(int64_t n) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  std::string s;
  llvm::raw_string_ostream(s) << llvm::format(u ? "%.2f %s" : "%.0f %s", v,
                                              units[u]);
  return s;
}

static std::string grouped(int64_t n) {
  std::string s = std::to_string(n), out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i && (s.size() - i) % 3 == 0)
      out += ',';
    out += s[i];
  }
  return out;
}

void mlir::k3::printSummary(const ModelInfo &info, llvm::raw_ostream &os) {
  os << "model " << info.name << " (" << info.modelType << "), config sha256 "
     << info.configHash.substr(0, 16) << "\n";
  os << "  vocab " << info.vocabSize << ", hidden " << info.hiddenSize << ", "
     << info.layers.size() << " layers, max context " << info.maxContext
     << "\n";
  std::map<std::string, std::vector<int64_t>> kinds;
  std::vector<int64_t> boundaries;
  int64_t maxCandidates = info.outputCandidates;
  for (const LayerInfo &l : info.layers) {
    kinds["mixer " + l.mixer].push_back(l.index);
    kinds["ffn " + l.ffn].push_back(l.index);
    if (l.blockBoundary)
      boundaries.push_back(l.index);
    maxCandidates = std::max({maxCandidates, l.preMixerCandidates,
                              l.preFFNCandidates});
  }
  for (StringRef k : {"mixer kda", "mixer mla", "ffn dense", "ffn moe"}) {
    auto it = kinds.find(k.str());
    if (it == kinds.end())
      continue;
    os << "  " << llvm::left_justify(k, 10) << " x" << it->second.size()
       << " at layers " << ranges(it->second);
    if (k == "ffn moe")
      os << " (" << info.numExperts << " experts, top-" << info.topK << ", "
         << info.expertFormat << ")";
    os << "\n";
  }
  os << "  attn_res   block size " << info.attnResBlockSize
     << ", blocks stored at layers " << ranges(boundaries)
     << ", output candidates " << info.outputCandidates << ", at most "
     << maxCandidates << "\n";
  os << "  parameters " << grouped(info.totalParameters) << " total, "
     << grouped(info.activeParameters)
     << " active per token (excluding the embedding table)\n";
  os << "  weights    " << grouped(info.tensorCount) << " checkpoint tensors, "
     << bytes(info.weightBytes) << "\n";
  int64_t perSeq = 0, perTok = 0;
  for (const StateGroup &s : info.states)
    (s.perToken ? perTok : perSeq) += s.bytesPerLayer * s.layers.size();
  os << "  state      " << bytes(perSeq) << " per sequence (KDA), "
     << grouped(perTok) << " B per token (MLA latent cache)\n";
}
