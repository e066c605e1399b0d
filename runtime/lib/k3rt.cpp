//===- k3rt.cpp - the C API entry points ----------------------------------===//
//
// Thin wrappers: argument checks, the session busy flag, and the calls into
// the C++ implementation. Nothing here throws (the runtime is built without
// exceptions) and nothing aborts on bad input.
//
//===----------------------------------------------------------------------===//

#include "k3rt/k3rt.h"

#include "Library.h"
#include "Session.h"
#include "Status.h"
#include "Weights.h"

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
  if (header_version == K3RT_API_VERSION)
    return nullptr;
  return makeStatus(K3RT_FAILED_PRECONDITION,
                    "the application was built against k3rt API version %u, "
                    "the loaded runtime implements version %d",
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
  copyOut(full, info);
  return nullptr;
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
        owned(s && !s->busy.exchange(true, std::memory_order_acquire)) {}
  ~BusyGuard() {
    if (owned)
      session->busy.store(false, std::memory_order_release);
  }
  BusyGuard(const BusyGuard &) = delete;
  BusyGuard &operator=(const BusyGuard &) = delete;

  /// nullptr if this call owns the session.
  k3rt_status *check(const char *what) const {
    if (!session)
      return makeStatus(K3RT_INVALID_ARGUMENT, "%s: session is NULL", what);
    if (!owned)
      return makeStatus(K3RT_FAILED_PRECONDITION,
                        "%s: the session is in use by another call; a "
                        "session is used by one thread at a time",
                        what);
    return nullptr;
  }

private:
  k3rt_session *session;
  bool owned;
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
  return addSequence(session, id);
}

extern "C" k3rt_status *k3rt_sequence_remove(k3rt_session *session,
                                             int64_t id) {
  BusyGuard guard(session);
  K3RT_RETURN_IF_ERROR(guard.check("k3rt_sequence_remove"));
  return removeSequence(session, id);
}

extern "C" k3rt_status *k3rt_sequence_fork(k3rt_session *session,
                                           int64_t parent, int64_t child) {
  BusyGuard guard(session);
  K3RT_RETURN_IF_ERROR(guard.check("k3rt_sequence_fork"));
  return forkSequence(session, parent, child);
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
  return readState(session, id, group, layer, out, out_count, shape);
}

extern "C" size_t k3rt_step_logits_rows(const k3rt_step_entry *entries,
                                        size_t n_entries) {
  return logitsRows(entries, n_entries);
}

extern "C" k3rt_status *k3rt_session_step(k3rt_session *session,
                                          const k3rt_step_entry *entries,
                                          size_t n_entries, float *logits_out,
                                          size_t logits_out_count) {
  BusyGuard guard(session);
  K3RT_RETURN_IF_ERROR(guard.check("k3rt_session_step"));
  return step(session, entries, n_entries, logits_out, logits_out_count);
}
