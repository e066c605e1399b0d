//===- Weights.h - a checkpoint bound to a library's manifest ---*- C++ -*-===//

#ifndef K3RT_LIB_WEIGHTS_H
#define K3RT_LIB_WEIGHTS_H

#include "Device.h"
#include "Library.h"
#include "Safetensors.h"

#include <atomic>
#include <vector>

struct k3rt_weights {
  std::atomic<int> refs{1};
  k3rt_library *library = nullptr; ///< retained
  std::vector<k3rt::MappedFile> maps;
  std::vector<k3rt::Buffer> buffers;
  /// A GPU library: the weight arguments in device memory.
  std::vector<k3rt::Memory> device;
  /// Per ABI argument: the data of a weight argument, nullptr otherwise.
  std::vector<const void *> argData;
  k3rt_weights_info info{};
};

namespace k3rt {

k3rt_status *loadWeights(k3rt_library *library, const char *path,
                         const k3rt_weights_options *options,
                         k3rt_weights **out);
/// k3rt_weights_generate: every weight argument filled by the library's
/// k3_fill_random from `seed`, in device memory for a GPU library.
k3rt_status *generateWeights(k3rt_library *library, uint64_t seed,
                             const k3rt_weights_options *options,
                             k3rt_weights **out);
void retain(k3rt_weights *weights);
void release(k3rt_weights *weights);

/// True for tensors of the vision tower and projector, which the language
/// model library does not read: a dotted component of the name is
/// "vision_tower", "mm_projector" or "multi_modal_projector".
bool isVisionTensor(const std::string &name);

} // namespace k3rt

#endif // K3RT_LIB_WEIGHTS_H
