//===- Device.h - where a library's kernels run and its memory lives -*- C++ -*-===//
//
// A host library's kernels read host memory; a library compiled for a GPU
// (--target=sm_90) reads device memory. k3rt talks to the GPU through its
// CUDA runtime, libk3rt_cuda.so (runtime/lib/cuda/MgpuRuntime.c), which also
// serves the library's own mgpu* calls: the driver is loaded once, at run
// time, by dlopen (ARCHITECTURE §Runtime; RUNTIME_NOTES §3 item 24).
//
//===----------------------------------------------------------------------===//

#ifndef K3RT_LIB_DEVICE_H
#define K3RT_LIB_DEVICE_H

#include "Safetensors.h"
#include "Status.h"

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace k3rt {

/// Makes the mgpu* symbols a GPU library needs visible before it is opened:
/// loads libk3rt_cuda.so with RTLD_GLOBAL from $K3RT_CUDA_RUNTIME, next to
/// the k3rt library (or program) or from the library path. True if loaded;
/// `why` gets the reason otherwise. Once per process.
bool preloadCudaRuntime(std::string &why);

/// Checks the GPU a library compiled for `targets` (e.g. {"sm_90"}) runs
/// on: a driver, device 0 with code for it (compute capability >= the
/// lowest target's; the PTX in the library covers newer ones) and no driver
/// error so far. FAILED_PRECONDITION naming the library and the device.
k3rt_status *checkGpu(const std::string &library,
                      const std::vector<std::string> &targets);

/// The first CUDA error of the process (sticky), or nullptr.
const char *cudaError();

/// The process's GPU work, one thread at a time: libk3rt_cuda has one
/// workspace arena, one current stream and one recording of launches (its
/// CUDA graphs), so every k3rt call that queues GPU work (a GPU session's
/// calls, weights uploaded or generated on the GPU, copies) holds this lock
/// from its first GPU operation to its last. Distinct sessions may still be
/// called from several threads (k3rt.h); on one GPU their calls take turns.
/// Recursive: a call that holds it may call helpers that take it again.
std::unique_lock<std::recursive_mutex> lockGpu();

/// Waits for a forward call's kernels and rewinds the library's workspace
/// arena: after every forward call.
void cudaWorkspaceReset();

/// The stream k3rt's copies and the library's kernels use (NULL: default).
void cudaSetStream(void *stream);

/// "NVIDIA H200 (sm_90, 139.8 GiB, 138.2 GiB free)" for device 0.
std::string cudaDeviceDescription();

/// Memory on the host (a Buffer) or the GPU (device memory, or page-locked
/// host memory the kernels can read).
class Memory {
public:
  enum class Place { Host, Device, Pinned };

  Memory() = default;
  Memory(const Memory &) = delete;
  Memory &operator=(const Memory &) = delete;
  Memory(Memory &&other) noexcept;
  Memory &operator=(Memory &&other) noexcept;
  ~Memory();

  /// Zeroed memory; RESOURCE_EXHAUSTED naming `what` (and, on the GPU, the
  /// free device memory) if it does not fit.
  static k3rt_status *allocate(uint64_t bytes, const char *what, Place place,
                               Memory &out);

  uint8_t *data() const { return static_cast<uint8_t *>(addr); }
  uint64_t size() const { return length; }
  Place place() const { return where; }

private:
  void release();
  Buffer host; ///< Place::Host
  void *addr = nullptr;
  uint64_t length = 0;
  Place where = Place::Host;
};

/// Copies `n` bytes; with `gpu`, either side may be device memory (the
/// copy goes through the driver and is complete on return). A driver error
/// is left for cudaError().
void copyBytes(bool gpu, void *dst, const void *src, uint64_t n);

/// Zeroes `n` bytes of memory of the given kind.
void zeroBytes(bool gpu, void *dst, uint64_t n);

} // namespace k3rt

#endif // K3RT_LIB_DEVICE_H
