//===- Config.cpp - parse and validate config.json ------------------------===//
//
// JSON is read twice: a SAX pass that reports syntax errors with line and
// column and rejects duplicate keys, then a DOM pass. Every value is
// type-checked before it is read (LLVM builds without exceptions), and every
// message names the key path at fault.
//
//===----------------------------------------------------------------------===//

#include "k3/Frontend/HF/Config.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/raw_ostream.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <set>
#include <sstream>

using namespace mlir::k3::hf;
using json = nlohmann::json;

int64_t TextConfig::countMixer(Mixer m) const {
  return llvm::count(mixers, m);
}
int64_t TextConfig::countFFN(FFN f) const { return llvm::count(ffns, f); }

namespace {

//===----------------------------------------------------------------------===//
// Syntax pass: positions of syntax errors, duplicate keys.
//===----------------------------------------------------------------------===//

class SyntaxChecker : public nlohmann::json_sax<json> {
public:
  std::optional<size_t> errorPos;
  std::string error;

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t &) override { return true; }
  bool string(string_t &) override { return true; }
  bool binary(binary_t &) override { return true; }
  bool start_object(std::size_t) override {
    keys.emplace_back();
    return true;
  }
  bool key(string_t &k) override {
    if (!keys.back().insert(k).second) {
      error = "duplicate key '" + pathOf(k) + "'";
      return false;
    }
    current.resize(keys.size());
    current.back() = k;
    return true;
  }
  bool end_object() override {
    keys.pop_back();
    current.resize(keys.size());
    return true;
  }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t position, const std::string &,
                   const nlohmann::detail::exception &ex) override {
    errorPos = position;
    // nlohmann prefixes "[json.exception.parse_error.101] parse error at
    // line L, column C: "; keep only the reason.
    std::string what = ex.what();
    size_t colon = what.find(": ");
    error = colon == std::string::npos ? what : what.substr(colon + 2);
    // Drop "; last read: '...'": the line and column say where.
    size_t lastRead = error.find("; last read: '");
    if (lastRead != std::string::npos) {
      size_t close = error.find("'", lastRead + 14);
      error.erase(lastRead, close == std::string::npos ? std::string::npos
                                                       : close + 1 - lastRead);
    }
    return false;
  }

private:
  std::vector<std::set<std::string>> keys;
  std::vector<std::string> current;

  std::string pathOf(const std::string &k) const {
    std::string p;
    for (size_t i = 0; i + 1 < keys.size() && i < current.size(); ++i)
      p += current[i] + ".";
    return p + k;
  }
};

//===----------------------------------------------------------------------===//
// Typed, path-aware access with the first error kept.
//===----------------------------------------------------------------------===//

/// A JSON object together with its key path ("text_config.linear_attn_config").
struct Node {
  const json *obj;
  std::string path;

  std::string keyPath(llvm::StringRef key) const {
    return path.empty() ? key.str() : path + "." + key.str();
  }
  const json *find(llvm::StringRef key) const {
    auto it = obj->find(key.str());
    return it == obj->end() ? nullptr : &*it;
  }
};

/// A double as JSON would show it (1e-05, nan, inf).
std::string num(double x) {
  std::ostringstream os;
  os << x;
  return os.str();
}

std::string describe(const json &v) {
  std::string s = v.dump();
  if (s.size() > 40)
    s = s.substr(0, 37) + "...";
  return std::string(v.type_name()) + " " + s;
}

/// A message on one line: control characters that came from the input (a
/// key "a\nb", say) written as escapes.
std::string oneLine(llvm::StringRef text) {
  std::string out;
  llvm::raw_string_ostream os(out);
  for (unsigned char c : text) {
    if (c == '\n')
      os << "\\n";
    else if (c == '\t')
      os << "\\t";
    else if (c < 0x20 || c == 0x7f)
      os << llvm::format("\\x%02x", c);
    else
      os << c;
  }
  return out;
}

class Reader {
public:
  explicit Reader(std::string display) : display(std::move(display)) {}

  bool ok() const { return !error; }
  void fail(const llvm::Twine &msg) {
    if (!error)
      error = oneLine(display + ": " + msg.str());
  }
  llvm::Error takeError() {
    return llvm::createStringError(llvm::inconvertibleErrorCode(), *error);
  }

  const json *required(const Node &n, llvm::StringRef key) {
    const json *v = n.find(key);
    if (!v)
      fail("missing required key '" + n.keyPath(key) + "'");
    return v;
  }

  std::optional<Node> object(const Node &n, llvm::StringRef key,
                             bool isRequired = true) {
    const json *v = isRequired ? required(n, key) : n.find(key);
    if (!v)
      return std::nullopt;
    if (!v->is_object()) {
      fail("key '" + n.keyPath(key) + "' must be an object, got " +
           describe(*v));
      return std::nullopt;
    }
    return Node{v, n.keyPath(key)};
  }

  /// A size: a positive integer (or, with `allowZero`, a non-negative one).
  int64_t size(const Node &n, llvm::StringRef key,
               std::optional<int64_t> dflt = std::nullopt,
               bool allowZero = false) {
    const json *v = dflt ? n.find(key) : required(n, key);
    if (!v)
      return dflt.value_or(0);
    std::string k = n.keyPath(key);
    if (!v->is_number_integer()) {
      fail("key '" + k + "' must be an integer, got " + describe(*v));
      return dflt.value_or(0);
    }
    // Unsigned values above INT64_MAX are stored unsigned: reject them too.
    if (v->is_number_unsigned() &&
        v->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) {
      fail("key '" + k + "' is too large: " + v->dump());
      return 0;
    }
    int64_t x = v->get<int64_t>();
    if (x < 0 || (x == 0 && !allowZero)) {
      fail("key '" + k + "' must be " +
           (allowZero ? "non-negative" : "positive") + ", got " +
           std::to_string(x));
      return dflt.value_or(0);
    }
    if (x > kMaxSize) {
      fail("key '" + k + "' is too large: " + std::to_string(x) +
           " (at most " + std::to_string(kMaxSize) + ")");
      return 0;
    }
    return x;
  }

  double number(const Node &n, llvm::StringRef key,
                std::optional<double> dflt = std::nullopt) {
    const json *v = dflt ? n.find(key) : required(n, key);
    if (!v)
      return dflt.value_or(0);
    if (!v->is_number()) {
      fail("key '" + n.keyPath(key) + "' must be a number, got " +
           describe(*v));
      return dflt.value_or(0);
    }
    return v->get<double>();
  }

  double positive(const Node &n, llvm::StringRef key,
                  std::optional<double> dflt = std::nullopt) {
    double x = number(n, key, dflt);
    if (ok() && !(std::isfinite(x) && x > 0))
      fail("key '" + n.keyPath(key) + "' must be a finite positive number, got " +
           num(x));
    return x;
  }

  bool flag(const Node &n, llvm::StringRef key, bool dflt) {
    const json *v = n.find(key);
    if (!v)
      return dflt;
    if (!v->is_boolean()) {
      fail("key '" + n.keyPath(key) + "' must be true or false, got " +
           describe(*v));
      return dflt;
    }
    return v->get<bool>();
  }

  std::string string(const Node &n, llvm::StringRef key,
                     std::optional<std::string> dflt = std::nullopt) {
    const json *v = dflt ? n.find(key) : required(n, key);
    if (!v)
      return dflt.value_or("");
    if (!v->is_string()) {
      fail("key '" + n.keyPath(key) + "' must be a string, got " +
           describe(*v));
      return dflt.value_or("");
    }
    return v->get<std::string>();
  }

  std::vector<int64_t> intList(const Node &n, llvm::StringRef key) {
    const json *v = required(n, key);
    std::vector<int64_t> out;
    if (!v)
      return out;
    if (!v->is_array()) {
      fail("key '" + n.keyPath(key) + "' must be a list of integers, got " +
           describe(*v));
      return out;
    }
    for (auto [i, e] : llvm::enumerate(*v)) {
      if (!e.is_number_integer()) {
        fail("key '" + n.keyPath(key) + "' entry " + llvm::Twine(i) +
             " must be an integer, got " + describe(e));
        return {};
      }
      out.push_back(e.get<int64_t>());
    }
    return out;
  }

private:
  static constexpr int64_t kMaxSize = int64_t(1) << 31;
  std::string display;
  std::optional<std::string> error;
};

//===----------------------------------------------------------------------===//
// The text config
//===----------------------------------------------------------------------===//

/// Builds the layer map from the 1-based KDA / full-attention lists
/// (K3_SPEC §1.2); they must partition 1..num_hidden_layers.
void buildLayerMap(Reader &r, const Node &lin, TextConfig &c) {
  std::vector<int> seen(c.numLayers + 1, 0);
  auto mark = [&](const std::vector<int64_t> &list, llvm::StringRef key,
                  int bit) {
    for (int64_t n : list) {
      if (n < 1 || n > c.numLayers) {
        r.fail("key '" + lin.keyPath(key) + "' lists layer " + llvm::Twine(n) +
               ", outside 1.." + llvm::Twine(c.numLayers) +
               " (num_hidden_layers; the lists are 1-based)");
        return;
      }
      if (seen[n] & bit) {
        r.fail("key '" + lin.keyPath(key) + "' lists layer " + llvm::Twine(n) +
               " twice");
        return;
      }
      seen[n] |= bit;
    }
  };
  mark(c.kdaLayers, "kda_layers", 1);
  mark(c.fullAttnLayers, "full_attn_layers", 2);
  if (!r.ok())
    return;
  for (int64_t n = 1; n <= c.numLayers; ++n) {
    if (seen[n] == 3) {
      r.fail("layer " + llvm::Twine(n) + " is in both '" +
             lin.keyPath("kda_layers") + "' and '" +
             lin.keyPath("full_attn_layers") + "'");
      return;
    }
    if (seen[n] == 0) {
      r.fail("layer " + llvm::Twine(n) + " is in neither '" +
             lin.keyPath("kda_layers") + "' nor '" +
             lin.keyPath("full_attn_layers") + "': together they must cover 1.." +
             llvm::Twine(c.numLayers));
      return;
    }
  }
  for (int64_t n = 1; n <= c.numLayers; ++n)
    c.mixers.push_back(seen[n] == 1 ? Mixer::KDA : Mixer::MLA);
}

/// compressed-tensors quantization_config (K3_SPEC §1.1, §7).
void readQuantization(Reader &r, const Node &q, TextConfig &c) {
  std::string format = r.string(q, "format", std::string());
  std::string method = r.string(q, "quant_method", std::string());
  if (!r.ok())
    return;
  if (format.empty() && method.empty())
    return;
  if (method != "compressed-tensors") {
    r.fail("key '" + q.keyPath("quant_method") + "': unsupported '" + method +
           "' (k3c reads 'compressed-tensors' MXFP4 checkpoints)");
    return;
  }
  if (format != "mxfp4-pack-quantized") {
    r.fail("key '" + q.keyPath("format") + "': unsupported format '" + format +
           "' (k3c reads 'mxfp4-pack-quantized')");
    return;
  }
  c.mxfp4Experts = true;
  std::optional<Node> groups = r.object(q, "config_groups", false);
  if (!groups)
    return;
  for (auto &[name, g] : groups->obj->items()) {
    if (!g.is_object())
      continue;
    Node group{&g, groups->keyPath(name)};
    std::optional<Node> w = r.object(group, "weights", false);
    if (!w)
      continue;
    int64_t bits = r.size(*w, "num_bits", 4);
    std::string type = r.string(*w, "type", std::string("float"));
    int64_t gs = r.size(*w, "group_size", 32);
    if (!r.ok())
      return;
    if (bits != 4 || type != "float") {
      r.fail("key '" + w->keyPath("num_bits") +
             "': MXFP4 needs 4-bit float weights, got " + llvm::Twine(bits) +
             "-bit " + type);
      return;
    }
    if (gs != 32) {
      r.fail("key '" + w->keyPath("group_size") +
             "': MXFP4 shares one E8M0 scale per 32 elements, got " +
             llvm::Twine(gs));
      return;
    }
    c.quantGroupSize = gs;
  }
}

void readText(Reader &r, const Node &t, TextConfig &c) {
  c.vocabSize = r.size(t, "vocab_size");
  c.hiddenSize = r.size(t, "hidden_size");
  c.numLayers = r.size(t, "num_hidden_layers");
  c.maxPositionEmbeddings = r.size(t, "max_position_embeddings");
  c.rmsNormEps = r.positive(t, "rms_norm_eps");
  c.hiddenAct = r.string(t, "hidden_act");
  if (r.ok() && c.hiddenAct != "situ" && c.hiddenAct != "silu")
    r.fail("key '" + t.keyPath("hidden_act") + "': unknown activation '" +
           c.hiddenAct + "' (k3c supports 'situ' and 'silu')");
  if (c.hiddenAct == "situ") {
    c.situBeta = r.positive(t, "activation_situ_beta", 4.0);
    c.situLinearBeta = r.positive(t, "activation_situ_linear_beta", 25.0);
  }
  c.tieWordEmbeddings = r.flag(t, "tie_word_embeddings", c.tieWordEmbeddings);
  c.attnResBlockSize = r.size(t, "attn_res_block_size");
  c.firstKDenseReplace = r.size(t, "first_k_dense_replace", 0, true);
  c.moeLayerFreq = r.size(t, "moe_layer_freq", 1);
  if (!r.ok())
    return;

  // Gated MLA (K3_SPEC §5).
  c.mlaHeads = r.size(t, "num_attention_heads");
  int64_t kvHeads = r.size(t, "num_key_value_heads", c.mlaHeads);
  c.qLoraRank = r.size(t, "q_lora_rank");
  c.kvLoraRank = r.size(t, "kv_lora_rank");
  c.qkNopeHeadDim = r.size(t, "qk_nope_head_dim");
  c.qkRopeHeadDim = r.size(t, "qk_rope_head_dim", 0, true);
  c.vHeadDim = r.size(t, "v_head_dim");
  bool useNope = r.flag(t, "mla_use_nope", false);
  c.mlaOutputGate = r.flag(t, "mla_use_output_gate", false);
  if (!r.ok())
    return;
  if (kvHeads != c.mlaHeads)
    return r.fail("key '" + t.keyPath("num_key_value_heads") + "' (" +
                  llvm::Twine(kvHeads) + ") must equal '" +
                  t.keyPath("num_attention_heads") + "' (" +
                  llvm::Twine(c.mlaHeads) + "): MLA expands the latent per head");
  if (!useNope)
    return r.fail("key '" + t.keyPath("mla_use_nope") +
                  "' must be true: k3c compiles NoPE MLA (K3_SPEC §5.2), "
                  "rotary MLA is not supported");

  // Kimi Delta Attention (K3_SPEC §4).
  std::optional<Node> lin = r.object(t, "linear_attn_config");
  if (!lin)
    return;
  c.kdaHeads = r.size(*lin, "num_heads");
  c.kdaHeadDim = r.size(*lin, "head_dim");
  c.convKernel = r.size(*lin, "short_conv_kernel_size");
  c.fullRankOutputGate = r.flag(*lin, "use_full_rank_gate", false);
  if (lin->find("gate_lower_bound")) {
    double lb = r.number(*lin, "gate_lower_bound");
    if (r.ok() && !(std::isfinite(lb) && lb < 0))
      return r.fail("key '" + lin->keyPath("gate_lower_bound") +
                    "' must be a finite negative number, got " + num(lb));
    c.gateLowerBound = lb;
  }
  c.forgetGateRank = c.kdaHeadDim;
  c.outputGateRank = c.kdaHeadDim;
  c.kdaLayers = r.intList(*lin, "kda_layers");
  c.fullAttnLayers = r.intList(*lin, "full_attn_layers");
  if (!r.ok())
    return;
  buildLayerMap(r, *lin, c);
  if (!r.ok())
    return;

  // Feed-forward kinds (K3_SPEC §1.2): dense below first_k_dense_replace and
  // off the moe_layer_freq grid, LatentMoE elsewhere.
  for (int64_t l = 0; l < c.numLayers; ++l)
    c.ffns.push_back(l >= c.firstKDenseReplace && l % c.moeLayerFreq == 0
                         ? FFN::MoE
                         : FFN::Dense);
  if (c.countFFN(FFN::Dense))
    c.intermediateSize = r.size(t, "intermediate_size");
  if (!c.countFFN(FFN::MoE))
    return;

  // Stable LatentMoE (K3_SPEC §6).
  c.numExperts = r.size(t, "num_experts");
  c.topK = r.size(t, "num_experts_per_token");
  c.numSharedExperts = r.size(t, "num_shared_experts", 0, true);
  c.moeIntermediateSize = r.size(t, "moe_intermediate_size");
  c.latentSize = r.size(t, "routed_expert_hidden_size", 0, true);
  c.latentNorm = r.flag(t, "latent_moe_use_norm", false);
  c.renormalize = r.flag(t, "moe_renormalize", true);
  c.routedScalingFactor = r.positive(t, "routed_scaling_factor", 1.0);
  std::string router = r.string(t, "moe_router_activation_func",
                                std::string("sigmoid"));
  std::string topkMethod = r.string(t, "topk_method", std::string("noaux_tc"));
  int64_t groups = r.size(t, "num_expert_group", 1);
  int64_t topkGroup = r.size(t, "topk_group", 1);
  if (!r.ok())
    return;
  if (router != "sigmoid")
    return r.fail("key '" + t.keyPath("moe_router_activation_func") +
                  "': unknown router activation '" + router +
                  "' (k3c supports 'sigmoid', K3_SPEC §6.1)");
  if (topkMethod != "noaux_tc")
    return r.fail("key '" + t.keyPath("topk_method") + "': unknown method '" +
                  topkMethod + "' (k3c supports 'noaux_tc', K3_SPEC §6.1)");
  if (groups != 1 || topkGroup != 1)
    return r.fail("keys '" + t.keyPath("num_expert_group") + "' and '" +
                  t.keyPath("topk_group") +
                  "' must be 1: grouped top-k is not supported");
  if (c.topK > c.numExperts)
    return r.fail("key '" + t.keyPath("num_experts_per_token") + "' (" +
                  llvm::Twine(c.topK) + ") exceeds '" +
                  t.keyPath("num_experts") + "' (" + llvm::Twine(c.numExperts) +
                  ")");
}

//===----------------------------------------------------------------------===//
// Strict mode: the keys a config may hold.
//===----------------------------------------------------------------------===//

// Top level of the K3 wrapper (models/kimi-k3/config.json).
const char *const kTopKeys[] = {
    "architectures", "auto_map", "bos_token_id", "dtype", "eos_token_id",
    "ignore_index", "image_placeholder", "media_placeholder_token_id",
    "model_type", "pad_token_id", "quantization_config", "text_config",
    "tie_word_embeddings", "torch_dtype", "transformers_version",
    "vision_config"};

// text_config: what k3c reads, the rest of the published config (generic
// transformers fields), and what transformers adds when it parses the config
// (spec §1: rope_parameters, head_dim; ignored).
const char *const kTextKeys[] = {
    "_name_or_path", "activation_situ_beta", "activation_situ_linear_beta",
    "add_cross_attention", "architectures", "attn_res_block_size", "auto_map",
    "bad_words_ids", "begin_suppress_tokens", "bos_token_id",
    "chunk_size_feed_forward", "cross_attention_hidden_size",
    "decoder_start_token_id", "diversity_penalty", "do_sample", "dtype",
    "early_stopping", "encoder_no_repeat_ngram_size", "eos_token_id",
    "exponential_decay_length_penalty", "finetuning_task",
    "first_k_dense_replace", "forced_bos_token_id", "forced_eos_token_id",
    "head_dim", "hidden_act", "hidden_size", "id2label", "initializer_range",
    "intermediate_size", "is_decoder", "is_encoder_decoder", "kv_lora_rank",
    "label2id", "latent_moe_use_norm", "length_penalty", "linear_attn_config",
    "max_length", "max_position_embeddings", "min_length", "mla_use_nope",
    "mla_use_output_gate", "model_type", "moe_intermediate_size",
    "moe_layer_freq", "moe_renormalize", "moe_router_activation_func",
    "no_repeat_ngram_size", "num_attention_heads", "num_beam_groups",
    "num_beams", "num_expert_group", "num_experts", "num_experts_per_token",
    "num_hidden_layers", "num_key_value_heads", "num_nextn_predict_layers",
    "num_return_sequences", "num_shared_experts", "output_attentions",
    "output_hidden_states", "output_scores", "pad_token_id", "prefix",
    "problem_type", "pruned_heads", "q_lora_rank", "qk_nope_head_dim",
    "qk_rope_head_dim", "quantization_config", "remove_invalid_values",
    "repetition_penalty", "return_dict", "return_dict_in_generate",
    "rms_norm_eps", "rope_parameters", "rope_scaling", "rope_theta",
    "routed_expert_hidden_size", "routed_scaling_factor", "sep_token_id",
    "suppress_tokens", "task_specific_params", "temperature",
    "tf_legacy_loss", "tie_encoder_decoder", "tie_word_embeddings",
    "tokenizer_class", "top_k", "top_p", "topk_group", "topk_method",
    "torch_dtype", "torchscript", "transformers_version", "typical_p",
    "use_bfloat16", "use_cache", "use_grouped_topk", "v_head_dim",
    "vocab_size"};

const char *const kLinearKeys[] = {
    "full_attn_layers", "gate_lower_bound", "head_dim", "kda_layers",
    "num_heads", "short_conv_kernel_size", "use_full_rank_gate"};

/// Fails on the first key of `n` not in `known`, suggesting the closest one.
void checkKnownKeys(Reader &r, const Node &n,
                    llvm::ArrayRef<const char *> known) {
  for (auto it = n.obj->begin(); it != n.obj->end() && r.ok(); ++it) {
    llvm::StringRef key = it.key();
    if (llvm::is_contained(known, key))
      continue;
    std::string hint;
    unsigned best = 3;
    for (llvm::StringRef k : known)
      if (unsigned d = key.edit_distance(k); d < best)
        best = d, hint = "; did you mean '" + n.keyPath(k) + "'?";
    r.fail("unknown key '" + n.keyPath(key) + "' (--strict-config" + hint +
           ")");
  }
}

} // namespace

llvm::Expected<TextConfig> mlir::k3::hf::parseConfig(llvm::StringRef text,
                                                     llvm::StringRef display,
                                                     bool strict) {
  Reader r(display.str());
  SyntaxChecker syntax;
  bool parsed = json::sax_parse(text.begin(), text.end(), &syntax);
  if (!parsed || syntax.errorPos) {
    if (syntax.errorPos) {
      // Position is 1-based bytes; report line and column of the byte.
      size_t pos = std::min<size_t>(*syntax.errorPos ? *syntax.errorPos - 1 : 0,
                                    text.size());
      llvm::StringRef before = text.take_front(pos);
      size_t line = before.count('\n') + 1;
      size_t lastNl = before.rfind('\n');
      size_t col = lastNl == llvm::StringRef::npos ? pos + 1 : pos - lastNl;
      r.fail("line " + llvm::Twine(line) + ", column " + llvm::Twine(col) +
             ": not valid JSON: " + syntax.error);
    } else {
      r.fail(syntax.error.empty() ? "not valid JSON" : syntax.error);
    }
    return r.takeError();
  }
  json root = json::parse(text.begin(), text.end(), nullptr,
                          /*allow_exceptions=*/false);
  if (!root.is_object()) {
    r.fail("top level must be a JSON object, got " + std::string(root.type_name()));
    return r.takeError();
  }

  TextConfig c;
  Node top{&root, ""};
  c.modelType = r.string(top, "model_type");
  if (!r.ok())
    return r.takeError();
  std::optional<Node> text_;
  if (c.modelType == "kimi_k3") {
    text_ = r.object(top, "text_config");
    c.tensorPrefix = "language_model.";
    c.tieWordEmbeddings = r.flag(top, "tie_word_embeddings", false);
    if (text_ && text_->find("model_type")) {
      std::string inner = r.string(*text_, "model_type");
      if (r.ok() && inner != "kimi_linear")
        r.fail("key 'text_config.model_type': unknown model_type '" + inner +
               "' (expected 'kimi_linear')");
    }
  } else if (c.modelType == "kimi_linear") {
    text_ = top;
  } else {
    r.fail("key 'model_type': unknown model_type '" + c.modelType +
           "' (k3c compiles 'kimi_k3' and 'kimi_linear')");
  }
  if (!r.ok())
    return r.takeError();

  readText(r, *text_, c);
  if (!r.ok())
    return r.takeError();

  // Quantization lives in text_config for K3 (transformers copies it to the
  // top level too).
  std::optional<Node> quant = r.object(*text_, "quantization_config", false);
  if (!quant && text_->obj != &root)
    quant = r.object(top, "quantization_config", false);
  if (quant)
    readQuantization(r, *quant, c);
  if (!r.ok())
    return r.takeError();

  if (c.mxfp4Experts && c.countFFN(FFN::MoE)) {
    int64_t latent = c.latentSize ? c.latentSize : c.hiddenSize;
    llvm::StringRef latentKey =
        c.latentSize ? "routed_expert_hidden_size" : "hidden_size";
    if (latent % c.quantGroupSize != 0)
      r.fail("key '" + text_->keyPath(latentKey) + "' (" + llvm::Twine(latent) +
             ") is not a multiple of the MXFP4 group size " +
             llvm::Twine(c.quantGroupSize) + " (expert weights are MXFP4)");
    else if (c.moeIntermediateSize % c.quantGroupSize != 0)
      r.fail("key '" + text_->keyPath("moe_intermediate_size") + "' (" +
             llvm::Twine(c.moeIntermediateSize) +
             ") is not a multiple of the MXFP4 group size " +
             llvm::Twine(c.quantGroupSize) + " (expert weights are MXFP4)");
    if (!r.ok())
      return r.takeError();
  }

  if (strict) {
    if (text_->obj != &root)
      checkKnownKeys(r, top, kTopKeys);
    checkKnownKeys(r, *text_, kTextKeys);
    if (std::optional<Node> lin = r.object(*text_, "linear_attn_config", false))
      checkKnownKeys(r, *lin, kLinearKeys);
    if (!r.ok())
      return r.takeError();
  }

  std::array<uint8_t, 32> hash =
      llvm::SHA256::hash(llvm::arrayRefFromStringRef(text_->obj->dump()));
  c.configHash = llvm::toHex(hash, /*LowerCase=*/true);
  return c;
}

llvm::Expected<TextConfig> mlir::k3::hf::loadConfig(llvm::StringRef path,
                                                    bool strict) {
  auto buf = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                         /*RequiresNullTerminator=*/false);
  if (!buf)
    return llvm::createStringError(buf.getError(), "%s: cannot read: %s",
                                   path.str().c_str(),
                                   buf.getError().message().c_str());
  auto cfg = parseConfig((*buf)->getBuffer(), path, strict);
  if (!cfg)
    return cfg.takeError();
  llvm::StringRef dir = llvm::sys::path::parent_path(path);
  cfg->name = dir.empty() ? "model" : llvm::sys::path::filename(dir).str();
  if (cfg->name.empty() || cfg->name == ".")
    cfg->name = "model";
  return cfg;
}
