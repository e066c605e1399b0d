//===- k3rt.cpp - the C API entry points ----------------------------------===//
//
// Thin wrappers: argument checks, the session busy flag, and the calls into
// the C++ implementation. Nothing here throws (the runtime is built without
// exceptions) and nothing aborts on bad input.
//
//===----------------------------------------------------------------------===//

#include "k3rt/k3rt.h"

#include "ConfigHash.h"
#include "Library.h"
#include "Session.h"
#include "Status.h"
#include "Weights.h"

#include <cstring>
#include <string>

using namespace k3rt;

//===----------------------------------------------------------------------===//
// Status and versions
//===----------------------------------------------------------------------===//

extern "C" k3rt_code k3rt_status_code(const k3rt_status *status) {
  return status ? status->code : K3RT_OK;
}

extern "C" const char *k3rt_status_message(const k3rt_status *status) {
  return status ? status->message.c_str() : "";
}

extern "C" void k3rt_status_free(k3rt_status *status) { freeStatus(status); }

extern "C" const char *k3rt_code_name(k3rt_code code) {
  switch (code) {
  case K3RT_OK:
    return "OK";
  case K3RT_INVALID_ARGUMENT:
    return "INVALID_ARGUMENT";
  case K3RT_NOT_FOUND:
    return "NOT_FOUND";
  case K3RT_ALREADY_EXISTS:
    return "ALREADY_EXISTS";
  case K3RT_RESOURCE_EXHAUSTED:
    return "RESOURCE_EXHAUSTED";
  case K3RT_FAILED_PRECONDITION:
    return "FAILED_PRECONDITION";
  case K3RT_ABORTED:
    return "ABORTED";
  case K3RT_OUT_OF_RANGE:
    return "OUT_OF_RANGE";
  case K3RT_INTERNAL:
    return "INTERNAL";
  case K3RT_DATA_LOSS:
    return "DATA_LOSS";
  }
  return "UNKNOWN";
}

extern "C" uint32_t k3rt_api_version(void) { return K3RT_API_VERSION; }

extern "C" k3rt_status *k3rt_check_api_version(uint32_t header_version) {
  // Every version up to ours: the API only grows.
  if (header_version >= 1 && header_version <= K3RT_API_VERSION)
    return nullptr;
  return makeStatus(K3RT_FAILED_PRECONDITION,
                    "the application was built against k3rt API version %u, "
                    "the loaded runtime implements versions 1 to %d",
                    header_version, K3RT_API_VERSION);
}

//===----------------------------------------------------------------------===//
// Library
//===----------------------------------------------------------------------===//

extern "C" k3rt_status *k3rt_library_open(const char *path,
                                          k3rt_library **out) {
  return openLibrary(path, out);
}

extern "C" void k3rt_library_release(k3rt_library *library) {
  release(library);
}

extern "C" k3rt_status *k3rt_library_get_info(const k3rt_library *library,
                                              k3rt_model_info *info) {
  if (!library || !info || info->struct_size < sizeof(size_t))
    return makeStatus(K3RT_INVALID_ARGUMENT,
                      "k3rt_library_get_info: library and info must be "
                      "non-NULL, info->struct_size = sizeof(k3rt_model_info)");
  const Manifest &m = library->manifest;
  k3rt_model_info full{};
  full.struct_size = sizeof(full);
  full.name = m.name.c_str();
  full.manifest_json = m.json.c_str();
  full.vocab_size = m.vocabSize;
  full.hidden_size = m.hiddenSize;
  full.num_layers = m.numLayers;
  full.max_context = m.maxContext;
  full.num_abi_args = int64_t(m.args.size());
  full.num_tensors = m.numCheckpointTensors;
  full.page_size = m.pageSize;
  full.slot_bytes = m.slotBytes;
  full.page_bytes = m.pageBytes;
  full.config_sha256 = m.configSha256.c_str();
  full.kda_state_layout = m.kdaLayout.c_str();
  full.targets = m.targetList.c_str();
  full.kda_chunk_size = m.kdaChunkSize;
  full.compiler_version = m.compilerVersion.c_str();
  copyOut(full, info);
  return nullptr;
}

extern "C" k3rt_status *k3rt_config_sha256(const char *text, size_t length,
                                           char out[65]) {
  if (!text || !out)
    return makeStatus(K3RT_INVALID_ARGUMENT,
                      "k3rt_config_sha256: text and out must not be NULL");
  std::string hash;
  K3RT_RETURN_IF_ERROR(configSha256(text, length, "config", hash));
  std::memcpy(out, hash.c_str(), 65);
  return nullptr;
}

extern "C" k3rt_status *k3rt_library_check_config(const k3rt_library *library,
                                                  const char *config_path) {
  if (!library || !config_path)
    return makeStatus(K3RT_INVALID_ARGUMENT,
                      "k3rt_library_check_config: library and config_path "
                      "must not be NULL");
  return checkConfigFile(config_path, library->manifest.configSha256,
                         library->path);
}

//===----------------------------------------------------------------------===//
// Weights
//===----------------------------------------------------------------------===//

extern "C" k3rt_status *k3rt_weights_load(k3rt_library *library,
                                          const char *path,
                                          const k3rt_weights_options *options,
                                          k3rt_weights **out) {
  return loadWeights(library, path, options, out);
}

extern "C" k3rt_status *k3rt_weights_generate(k3rt_library *library,
                                              uint64_t seed,
                                              const k3rt_weights_options *options,
                                              k3rt_weights **out) {
  return generateWeights(library, seed, options, out);
}

extern "C" void k3rt_weights_release(k3rt_weights *weights) {
  release(weights);
}

extern "C" k3rt_status *k3rt_weights_get_info(const k3rt_weights *weights,
                                              k3rt_weights_info *info) {
  if (!weights || !copyOut(weights->info, info))
    return makeStatus(K3RT_INVALID_ARGUMENT,
                      "k3rt_weights_get_info: weights and info must be "
                      "non-NULL, info->struct_size = "
                      "sizeof(k3rt_weights_info)");
  return nullptr;
}

//===----------------------------------------------------------------------===//
// Session
//===----------------------------------------------------------------------===//

namespace {
/// Holds the session's busy flag for one call; a second thread entering the
/// same session sees it taken (RUNTIME_NOTES §2, §3 item 24).
class BusyGuard {
public:
  explicit BusyGuard(k3rt_session *s)
      : session(s),
        owned(s && !s->busy.exchange(true, std::memory_order_acquire)) {
    // A GPU session's call holds the process's GPU for its whole length
    // (Device.h, lockGpu): the stream it sets and the launches it records
    // are its own until it returns.
    if (owned && session->gpu)
      gpu = lockGpu();
  }
  ~BusyGuard() {
    if (owned)
      session->busy.store(false, std::memory_order_release);
  }
  BusyGuard(const BusyGuard &) = delete;
  BusyGuard &operator=(const BusyGuard &) = delete;

  /// nullptr if this call owns the session (and, on a GPU, the session is
  /// not lost: RUNTIME_NOTES §3 item 24).
  k3rt_status *check(const char *what) const {
    if (!session)
      return makeStatus(K3RT_INVALID_ARGUMENT, "%s: session is NULL", what);
    if (!owned)
      return makeStatus(K3RT_FAILED_PRECONDITION,
                        "%s: the session is in use by another call; a "
                        "session is used by one thread at a time",
                        what);
    return checkDevice(session, what, nullptr);
  }

private:
  k3rt_session *session;
  bool owned;
  std::unique_lock<std::recursive_mutex> gpu;
};
} // namespace

extern "C" k3rt_status *k3rt_session_create(k3rt_library *library,
                                            k3rt_weights *weights,
                                            const k3rt_session_options *options,
                                            k3rt_session **out) {
  return createSession(library, weights, options, out);
}

extern "C" void k3rt_session_release(k3rt_session *session) {
  destroySession(session);
}

extern "C" k3rt_status *k3rt_session_get_info(k3rt_session *session,
                                              k3rt_session_info *info) {
  BusyGuard guard(session);
  K3RT_RETURN_IF_ERROR(guard.check("k3rt_session_get_info"));
  return sessionInfo(session, info);
}

extern "C" k3rt_status *k3rt_sequence_add(k3rt_session *session, int64_t id) {
  BusyGuard guard(session);
  K3RT_RETURN_IF_ERROR(guard.check("k3rt_sequence_add"));
  return checkDevice(session, "k3rt_sequence_add", addSequence(session, id));
}

extern "C" k3rt_status *k3rt_sequence_remove(k3rt_session *session,
                                             int64_t id) {
  BusyGuard guard(session);
  K3RT_RETURN_IF_ERROR(guard.check("k3rt_sequence_remove"));
  return checkDevice(session, "k3rt_sequence_remove", removeSequence(session, id));
}

extern "C" k3rt_status *k3rt_sequence_fork(k3rt_session *session,
                                           int64_t parent, int64_t child) {
  BusyGuard guard(session);
  K3RT_RETURN_IF_ERROR(guard.check("k3rt_sequence_fork"));
  return checkDevice(session, "k3rt_sequence_fork", forkSequence(session, parent, child));
}

extern "C" k3rt_status *k3rt_sequence_length(k3rt_session *session, int64_t id,
                                             int64_t *out) {
  BusyGuard guard(session);
  K3RT_RETURN_IF_ERROR(guard.check("k3rt_sequence_length"));
  return sequenceLength(session, id, out);
}

extern "C" k3rt_status *k3rt_sequence_read_state(k3rt_session *session,
                                                 int64_t id, const char *group,
                                                 int64_t layer, float *out,
                                                 size_t out_count,
                                                 k3rt_state_shape *shape) {
  BusyGuard guard(session);
  K3RT_RETURN_IF_ERROR(guard.check("k3rt_sequence_read_state"));
  return checkDevice(session, "k3rt_sequence_read_state", readState(session, id, group, layer, out, out_count, shape));
}

extern "C" size_t k3rt_step_logits_rows(const k3rt_step_entry *entries,
                                        size_t n_entries) {
  return logitsRows(entries, n_entries);
}

extern "C" k3rt_status *
k3rt_sequence_add_with_prefix(k3rt_session *session, int64_t id,
                              const int32_t *tokens, int64_t n_tokens,
                              int64_t *reused) {
  BusyGuard guard(session);
  K3RT_RETURN_IF_ERROR(guard.check("k3rt_sequence_add_with_prefix"));
  return checkDevice(session, "k3rt_sequence_add_with_prefix", addWithPrefix(session, id, tokens, n_tokens, reused));
}

extern "C" k3rt_status *k3rt_session_match_prefix(k3rt_session *session,
                                                  const int32_t *tokens,
                                                  int64_t n_tokens,
                                                  int64_t *reusable) {
  BusyGuard guard(session);
  K3RT_RETURN_IF_ERROR(guard.check("k3rt_session_match_prefix"));
  return matchPrefix(session, tokens, n_tokens, reusable);
}

extern "C" k3rt_status *k3rt_session_drop_snapshots(k3rt_session *session) {
  BusyGuard guard(session);
  K3RT_RETURN_IF_ERROR(guard.check("k3rt_session_drop_snapshots"));
  return checkDevice(session, "k3rt_session_drop_snapshots", dropSnapshots(session));
}

extern "C" k3rt_status *k3rt_sequence_fork_at(k3rt_session *session,
                                              int64_t parent, int64_t child,
                                              int64_t position) {
  BusyGuard guard(session);
  K3RT_RETURN_IF_ERROR(guard.check("k3rt_sequence_fork_at"));
  return checkDevice(session, "k3rt_sequence_fork_at", forkAt(session, parent, child, position));
}

extern "C" k3rt_status *k3rt_sequence_rollback(k3rt_session *session,
                                               int64_t id, int64_t n_tokens) {
  BusyGuard guard(session);
  K3RT_RETURN_IF_ERROR(guard.check("k3rt_sequence_rollback"));
  return checkDevice(session, "k3rt_sequence_rollback", rollback(session, id, n_tokens));
}

extern "C" k3rt_status *k3rt_sequence_get_info(k3rt_session *session,
                                               int64_t id,
                                               k3rt_sequence_info *info) {
  BusyGuard guard(session);
  K3RT_RETURN_IF_ERROR(guard.check("k3rt_sequence_get_info"));
  return sequenceInfo(session, id, info);
}

extern "C" k3rt_status *k3rt_session_step(k3rt_session *session,
                                          const k3rt_step_entry *entries,
                                          size_t n_entries, float *logits_out,
                                          size_t logits_out_count) {
  BusyGuard guard(session);
  K3RT_RETURN_IF_ERROR(guard.check("k3rt_session_step"));
  return checkDevice(session, "k3rt_session_step", step(session, entries, n_entries, logits_out, logits_out_count));
}

//===----------------------------------------------------------------------===//
// The function table
//===----------------------------------------------------------------------===//

// Append-only: a new version adds its entries at the end of k3rt_api (and
// here, in the same order).
static const k3rt_api kApi = {
    K3RT_API_VERSION,
    sizeof(k3rt_api),
    // version 1
    k3rt_status_code,
    k3rt_status_message,
    k3rt_status_free,
    k3rt_code_name,
    k3rt_api_version,
    k3rt_check_api_version,
    k3rt_library_open,
    k3rt_library_release,
    k3rt_library_get_info,
    k3rt_weights_load,
    k3rt_weights_release,
    k3rt_weights_get_info,
    k3rt_session_create,
    k3rt_session_release,
    k3rt_session_get_info,
    k3rt_sequence_add,
    k3rt_sequence_remove,
    k3rt_sequence_fork,
    k3rt_sequence_length,
    k3rt_sequence_read_state,
    k3rt_step_logits_rows,
    k3rt_session_step,
    // version 2
    k3rt_get_api,
    k3rt_config_sha256,
    k3rt_library_check_config,
    k3rt_sequence_add_with_prefix,
    k3rt_session_match_prefix,
    k3rt_session_drop_snapshots,
    k3rt_sequence_fork_at,
    k3rt_sequence_rollback,
    k3rt_sequence_get_info,
    // version 4
    k3rt_weights_generate,
};

extern "C" const k3rt_api *k3rt_get_api(uint32_t version) {
  if (version == 0 || version > K3RT_API_VERSION)
    return nullptr;
  return &kApi;
}
