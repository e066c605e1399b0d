//===- Config.h - a Kimi K3 / Kimi Linear config.json, validated -*- C++ -*-===//
//
// Parses a Hugging Face config.json (the K3 file with text_config and
// vision_config, or a bare kimi_linear text config) into a plain struct and
// checks every value the compiler depends on. No MLIR here: the importer
// turns a TextConfig into a k3 module.
//
//===----------------------------------------------------------------------===//

#ifndef K3_FRONTEND_HF_CONFIG_H
#define K3_FRONTEND_HF_CONFIG_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mlir::k3::hf {

/// Token mixer of one decoder layer (K3_SPEC §1.2).
enum class Mixer { KDA, MLA };
/// Feed-forward block of one decoder layer (K3_SPEC §1.2, §6).
enum class FFN { Dense, MoE };

/// The language model's configuration (`text_config` of K3). Sizes follow the
/// config keys; comments give the key names.
struct TextConfig {
  std::string name;          ///< model name (the config's folder by default)
  std::string modelType;     ///< top-level model_type: kimi_k3 or kimi_linear
  std::string tensorPrefix;  ///< "language_model." inside the K3 wrapper
  std::string configHash;    ///< SHA-256 of the canonical text config

  int64_t vocabSize = 0;             // vocab_size
  int64_t hiddenSize = 0;            // hidden_size
  int64_t numLayers = 0;             // num_hidden_layers
  int64_t maxPositionEmbeddings = 0; // max_position_embeddings
  double rmsNormEps = 0;             // rms_norm_eps
  std::string hiddenAct;             // hidden_act: situ | silu
  double situBeta = 4.0;             // activation_situ_beta
  double situLinearBeta = 25.0;      // activation_situ_linear_beta
  bool tieWordEmbeddings = false;    // tie_word_embeddings

  int64_t attnResBlockSize = 0;   // attn_res_block_size
  int64_t firstKDenseReplace = 0; // first_k_dense_replace
  int64_t moeLayerFreq = 1;       // moe_layer_freq
  int64_t intermediateSize = 0;   // intermediate_size (dense MLP)

  // Stable LatentMoE (K3_SPEC §6).
  int64_t numExperts = 0;          // num_experts
  int64_t topK = 0;                // num_experts_per_token
  int64_t numSharedExperts = 0;    // num_shared_experts
  int64_t moeIntermediateSize = 0; // moe_intermediate_size
  int64_t latentSize = 0;          // routed_expert_hidden_size (0: no latent)
  bool latentNorm = false;         // latent_moe_use_norm
  bool renormalize = true;         // moe_renormalize
  double routedScalingFactor = 1;  // routed_scaling_factor

  // Gated MLA (K3_SPEC §5).
  int64_t mlaHeads = 0;      // num_attention_heads (= num_key_value_heads)
  int64_t qLoraRank = 0;     // q_lora_rank
  int64_t kvLoraRank = 0;    // kv_lora_rank
  int64_t qkNopeHeadDim = 0; // qk_nope_head_dim
  int64_t qkRopeHeadDim = 0; // qk_rope_head_dim (unrotated, NoPE)
  int64_t vHeadDim = 0;      // v_head_dim
  bool mlaOutputGate = true; // mla_use_output_gate
  double mlaNormEps = 1e-6;  // q_a/kv_a_layernorm eps (K3_SPEC §5.4, §11.1)

  // Kimi Delta Attention (K3_SPEC §4), linear_attn_config.
  int64_t kdaHeads = 0;                // num_heads
  int64_t kdaHeadDim = 0;              // head_dim (d_k = d_v)
  int64_t convKernel = 0;              // short_conv_kernel_size
  std::optional<double> gateLowerBound; // gate_lower_bound (absent: softplus)
  bool fullRankOutputGate = true;      // use_full_rank_gate
  int64_t forgetGateRank = 0;          // rank of f_a_proj = head_dim
  int64_t outputGateRank = 0;          // rank of g_a_proj when not full rank
  std::vector<int64_t> kdaLayers;      // kda_layers (1-based)
  std::vector<int64_t> fullAttnLayers; // full_attn_layers (1-based)

  // Routed experts' storage (K3_SPEC §7).
  bool mxfp4Experts = false;   // quantization_config format mxfp4-pack-quantized
  int64_t quantGroupSize = 32; // weights.group_size

  // Derived: the layer map (0-based).
  std::vector<Mixer> mixers;
  std::vector<FFN> ffns;

  bool isMoELayer(int64_t l) const { return ffns[l] == FFN::MoE; }
  int64_t countMixer(Mixer m) const;
  int64_t countFFN(FFN f) const;
};

/// Parses and validates config.json text. `displayName` prefixes every
/// message (usually the file path). Errors name the key at fault. With
/// `strict`, a key that neither k3c nor the published K3 config knows (a
/// misspelt optional key, say) is an error naming its path.
llvm::Expected<TextConfig> parseConfig(llvm::StringRef text,
                                       llvm::StringRef displayName,
                                       bool strict = false);

/// Reads and parses a config.json; the model name defaults to the name of
/// the folder holding it.
llvm::Expected<TextConfig> loadConfig(llvm::StringRef path,
                                      bool strict = false);

} // namespace mlir::k3::hf

#endif // K3_FRONTEND_HF_CONFIG_H
