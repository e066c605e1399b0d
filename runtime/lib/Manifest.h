//===- Manifest.h - the compiled library's manifest, validated --*- C++ -*-===//
//
// The manifest a k3c library embeds (lib/Target/Manifest.cpp writes it; the
// "abi" section is specified in docs/ABI.md), parsed into plain structs and
// checked for internal consistency when the library is opened, so that the
// weight loader and the session can trust it.
//
//===----------------------------------------------------------------------===//

#ifndef K3RT_LIB_MANIFEST_H
#define K3RT_LIB_MANIFEST_H

#include "Status.h"

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace k3rt {

/// Element types of checkpoint tensors and ABI arguments.
enum class DType : uint8_t {
  BF16,
  F16,
  F32,
  F64,
  U8,
  I8,
  U16,
  I16,
  U32,
  I32,
  U64,
  I64,
  Bool,
  F8E4M3,
  F8E5M2,
  F8E8M0,
  F6E2M3,
  F6E3M2,
  F4,
};

/// Size in bits of one element.
unsigned dtypeBits(DType t);
/// Lower-case manifest spelling ("bf16", "u8", ...).
const char *manifestName(DType t);
/// safetensors spelling ("BF16", "U8", ...).
const char *safetensorsName(DType t);
bool parseManifestDType(const std::string &s, DType &out);
bool parseSafetensorsDType(const std::string &s, DType &out);

/// One checkpoint tensor kind of the manifest's weight table. An expert
/// stack (`experts > 0`) stands for `experts` tensors whose names replace
/// "{e}" by 0 .. experts-1, each of `shape`.
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::BF16;
  int64_t experts = 0;
  bool used = true;
  /// "mxfp4.packed", "mxfp4.scale" or empty.
  std::string quantization;
  /// Bytes of one tensor (one expert of a stack).
  uint64_t bytes = 0;
};

/// One state group ("kda.recurrent", "mla.latent", ...).
struct StateGroup {
  std::string kind;
  std::vector<int64_t> layers;
  std::vector<int64_t> shape;
  DType dtype = DType::F32;
  std::string layout;
  /// Tokens per page for a paged (per-token) group; 0 for a group with one
  /// fixed-size state per sequence.
  int64_t pageSize = 0;
  /// The optional "chunk_size" (the KDA kernel's chunk), 0 if absent.
  int64_t chunkSize = 0;
};

enum class ArgRole : uint8_t {
  Tokens,
  Weight,
  SlotPool,   ///< per-sequence states of one kind and layer [slots, ...]
  Slots,      ///< the call's slots [1 or T] i32
  PagePool,   ///< a paged group's pool [num_pages, P, W]
  PageTable,  ///< the call's page tables [1 or T, n] i32
  PageLength, ///< the call's lengths [1 or T] i64
  Logits,
};

/// One argument of k3_forward.
struct AbiArg {
  ArgRole role = ArgRole::Tokens;
  std::string name;
  std::string part;
  int64_t layer = -1;
  std::vector<int64_t> shape; ///< -1 for sizes known at run time
  DType dtype = DType::F32;
  /// Weight: index into Manifest::tensors. State: index into groups.
  int64_t ref = -1;
  /// SlotPool: byte offset of this state inside a sequence's slot.
  uint64_t slotOffset = 0;
  /// Weight, SlotPool (one slot's), PagePool (per page): bytes of the buffer.
  uint64_t bytes = 0;
  /// Byte alignment the data must have: the manifest's optional
  /// "alignment", else the element size. A weight stored less aligned is
  /// copied.
  uint64_t alignment = 1;
};

/// Descriptors are built for ranks up to this.
constexpr int kMaxRank = 8;

struct Manifest {
  std::string json;
  std::string name;
  std::string modelType;
  std::string configSha256;
  /// "targets", and the same comma-separated.
  std::vector<std::string> targets;
  /// compiler.version: the k3c that compiled the library.
  std::string compilerVersion;
  /// Code for NVIDIA GPUs (targets "sm_NN"), not the host.
  bool gpu = false;
  std::string targetList;
  /// The layout of kda.recurrent ("" without KDA layers).
  std::string kdaLayout;
  /// The KDA chunk size if the manifest records it, else 0.
  int64_t kdaChunkSize = 0;
  int64_t vocabSize = 0;
  int64_t hiddenSize = 0;
  int64_t numLayers = 0;
  int64_t maxContext = 0;

  std::vector<TensorSpec> tensors;
  std::vector<StateGroup> groups;
  std::vector<AbiArg> args;

  /// Checkpoint tensors expected (expert stacks expanded).
  int64_t numCheckpointTensors = 0;
  /// Index of the paged group in `groups`, or -1.
  int64_t pagedGroup = -1;
  int64_t pageSize = 0;
  /// Bytes of one sequence's slot (all SlotPool args, 64-byte aligned).
  uint64_t slotBytes = 0;
  /// Bytes of one page of one paged layer, and over all paged layers.
  uint64_t pageBytesPerLayer = 0;
  uint64_t pageBytes = 0;
  /// The paged layers, in ABI order.
  std::vector<int64_t> pagedLayers;

  int64_t findGroup(const std::string &kind) const;
};

/// Parses and validates `text`. Every inconsistency is an INVALID_ARGUMENT
/// naming the manifest key; an ABI version other than 1, a library without
/// host code, an unknown state layout or dims that contradict the layout
/// are a FAILED_PRECONDITION.
k3rt_status *parseManifest(const char *text, Manifest &out);

/// Checked arithmetic for sizes (safetensors `ValidationOverflow`).
bool mulOverflow(uint64_t a, uint64_t b, uint64_t &out);
/// Bytes of `shape` elements of `dtype`; false on overflow, a negative
/// dimension or a sub-byte size that does not end on a byte boundary.
bool tensorBytes(const std::vector<int64_t> &shape, DType dtype,
                 uint64_t &bytes);

} // namespace k3rt

#endif // K3RT_LIB_MANIFEST_H
