/*===- k3rt.h - the k3c runtime C API -------------------------------------===*
 *
 * k3rt runs a library compiled by k3c (docs/ABI.md): it opens the library,
 * loads and validates the weights against the library's manifest, owns the
 * per-sequence state (KDA slots, MLA pages) and runs batched steps that mix
 * prefill chunks and decode tokens of several sequences.
 *
 * Conventions (design/RUNTIME_NOTES.md §2):
 *
 *  - Every call that can fail returns a `k3rt_status *`: NULL means OK; any
 *    other value is owned by the caller and freed with k3rt_status_free().
 *    No C++ exception crosses this API and no call aborts the process on bad
 *    input.
 *  - Handles are opaque. `*_open`, `*_load` and `*_create` hand out a handle
 *    owned by the caller, released with the matching `*_release` (which
 *    accepts NULL). Weights and sessions keep the library (and a session its
 *    weights) alive, so handles may be released in any order.
 *  - Strings returned by accessors are borrowed: valid as long as the handle
 *    they come from.
 *  - Thread safety: libraries and weights are immutable after creation and
 *    may be shared by any number of threads and sessions. A session is
 *    thread-compatible: one thread at a time. Concurrent entry into one
 *    session is detected (an atomic busy flag) and the losing call returns
 *    K3RT_FAILED_PRECONDITION without touching the session. Distinct
 *    sessions may run concurrently.
 *  - Option structs start with `struct_size` (set it to sizeof the struct);
 *    fields added later are appended, so an older caller keeps working.
 *
 *===----------------------------------------------------------------------===*/

#ifndef K3RT_K3RT_H
#define K3RT_K3RT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define K3RT_API __attribute__((visibility("default")))
#define K3RT_MUST_USE_RESULT __attribute__((warn_unused_result))
#else
#define K3RT_API
#define K3RT_MUST_USE_RESULT
#endif

/** The API version this header describes. */
#define K3RT_API_VERSION 1

/** The compiled library ABI version this runtime implements (docs/ABI.md). */
#define K3RT_LIBRARY_ABI_VERSION 1

/*===----------------------------------------------------------------------===*
 * Status
 *===----------------------------------------------------------------------===*/

/** Status codes (numbered as absl/gRPC codes). */
typedef enum k3rt_code {
  K3RT_OK = 0,
  K3RT_INVALID_ARGUMENT = 3,    /**< bad input from the caller            */
  K3RT_NOT_FOUND = 5,           /**< file, sequence or state not there     */
  K3RT_ALREADY_EXISTS = 6,      /**< sequence id already in use            */
  K3RT_RESOURCE_EXHAUSTED = 8,  /**< out of slots, pages or memory         */
  K3RT_FAILED_PRECONDITION = 9, /**< wrong version, session busy, ...      */
  K3RT_OUT_OF_RANGE = 11,       /**< over the context window               */
  K3RT_INTERNAL = 13,           /**< a bug or an unexpected system error   */
  K3RT_DATA_LOSS = 15           /**< truncated file, NaN/Inf weights/logits */
} k3rt_code;

typedef struct k3rt_status k3rt_status;

/** The code of `status`; K3RT_OK for NULL. */
K3RT_API k3rt_code k3rt_status_code(const k3rt_status *status);
/** The message of `status` (borrowed); "" for NULL. */
K3RT_API const char *k3rt_status_message(const k3rt_status *status);
/** Frees `status`; NULL is a no-op. */
K3RT_API void k3rt_status_free(k3rt_status *status);
/** "INVALID_ARGUMENT" etc.; "UNKNOWN" for an unknown code. */
K3RT_API const char *k3rt_code_name(k3rt_code code);

/*===----------------------------------------------------------------------===*
 * Versions
 *===----------------------------------------------------------------------===*/

/** K3RT_API_VERSION of the runtime library actually loaded. */
K3RT_API uint32_t k3rt_api_version(void);

/** FAILED_PRECONDITION unless the loaded runtime implements `header_version`
 * (pass K3RT_API_VERSION). Call once at start-up. */
K3RT_API K3RT_MUST_USE_RESULT k3rt_status *
k3rt_check_api_version(uint32_t header_version);

/*===----------------------------------------------------------------------===*
 * Library (a k3c-compiled libNAME.so)
 *===----------------------------------------------------------------------===*/

typedef struct k3rt_library k3rt_library;

/** Opens the compiled library at `path` (dlopen), checks k3_abi_version()
 * and parses and validates k3_manifest_json(). Nothing else is allocated.
 * With `path` NULL, uses the library linked into the program (its k3_*
 * entry points in the program's global symbol scope). */
K3RT_API K3RT_MUST_USE_RESULT k3rt_status *
k3rt_library_open(const char *path, k3rt_library **out);

/** Drops the caller's reference; the library is closed when the last
 * weights/session using it is released too. NULL is a no-op. */
K3RT_API void k3rt_library_release(k3rt_library *library);

/** What the manifest says about the model, and the runtime's sizes. */
typedef struct k3rt_model_info {
  size_t struct_size;        /**< in: sizeof(k3rt_model_info)              */
  const char *name;          /**< manifest model.name (borrowed)           */
  const char *manifest_json; /**< the whole manifest text (borrowed)       */
  int64_t vocab_size;
  int64_t hidden_size;
  int64_t num_layers;
  int64_t max_context;  /**< manifest model.max_context               */
  int64_t num_abi_args; /**< entries of abi.args                      */
  int64_t num_tensors;  /**< checkpoint tensors expected (experts expanded) */
  int64_t page_size;    /**< tokens per MLA page; 0 if no paged state */
  uint64_t slot_bytes;  /**< per-sequence state (KDA) of one slot      */
  uint64_t page_bytes;  /**< one page over all paged (MLA) layers      */
} k3rt_model_info;

K3RT_API K3RT_MUST_USE_RESULT k3rt_status *
k3rt_library_get_info(const k3rt_library *library, k3rt_model_info *info);

/*===----------------------------------------------------------------------===*
 * Weights
 *===----------------------------------------------------------------------===*/

typedef struct k3rt_weights k3rt_weights;

/** Progress while loading: `stage` is "validate", "map" or "assemble";
 * `done` of `total` units (shards or expert stacks). */
typedef void (*k3rt_progress_fn)(void *user, const char *stage, uint64_t done,
                                 uint64_t total);

typedef struct k3rt_weights_options {
  size_t struct_size; /**< sizeof(k3rt_weights_options)                 */
  k3rt_progress_fn progress; /**< optional                              */
  void *progress_user;
  /** Nonzero: read every floating-point tensor (and MXFP4 scale) and reject
   * the checkpoint, listing the tensors, if any holds NaN or Inf (E8M0
   * 0xFF). Off by default: it reads the whole checkpoint. */
  int32_t check_finite;
} k3rt_weights_options;

/** Loads the checkpoint at `path` for `library`: a directory holding
 * model.safetensors.index.json plus its shards or model.safetensors, or a
 * single .safetensors file. Every shard header is validated against its
 * file and every tensor against the manifest (names, dtypes, shapes) before
 * anything is mapped or allocated; all missing, unexpected, duplicated and
 * mismatching tensors are reported in one message. Vision tower and
 * projector tensors are ignored. Files are mapped read-only; tensors are
 * used in place except expert stacks (assembled into one [E, ...] buffer
 * each) and misaligned tensors (copied). `options` may be NULL. */
K3RT_API K3RT_MUST_USE_RESULT k3rt_status *
k3rt_weights_load(k3rt_library *library, const char *path,
                  const k3rt_weights_options *options, k3rt_weights **out);

/** NULL is a no-op; the mappings live as long as a session uses them. */
K3RT_API void k3rt_weights_release(k3rt_weights *weights);

typedef struct k3rt_weights_info {
  size_t struct_size; /**< in: sizeof(k3rt_weights_info)             */
  int64_t num_shards;
  int64_t num_tensors;   /**< tensors matched against the manifest       */
  int64_t num_ignored;   /**< vision / projector tensors skipped         */
  uint64_t mapped_bytes; /**< bytes of all shards mapped                 */
  uint64_t copied_bytes; /**< bytes copied (expert stacks, misaligned)   */
} k3rt_weights_info;

K3RT_API K3RT_MUST_USE_RESULT k3rt_status *
k3rt_weights_get_info(const k3rt_weights *weights, k3rt_weights_info *info);

/*===----------------------------------------------------------------------===*
 * Session: state pools and sequences
 *===----------------------------------------------------------------------===*/

typedef struct k3rt_session k3rt_session;

typedef struct k3rt_session_options {
  size_t struct_size; /**< sizeof(k3rt_session_options)              */
  /** Bytes for all sequence state: max_sequences KDA slots, then as many
   * MLA pages as fit in the rest (or num_pages if set). Required. */
  uint64_t state_budget_bytes;
  /** KDA slots = live sequences at most (forks included). Required, > 0. */
  int32_t max_sequences;
  /** Context window: min(manifest max_context, this); 0 = the manifest's. */
  int64_t max_context;
  /** Pages per MLA pool; 0 = as many as the budget allows. */
  int64_t num_pages;
  /** Nonzero (a debug mode): after each step, check the returned logits
   * and fail with DATA_LOSS naming the first non-finite one. The step has
   * run (the sequences have advanced) when this reports. */
  int32_t check_logits;
} k3rt_session_options;

/** Creates a session over `weights` (which must come from `library`). The
 * state pools are allocated here, once, and steps allocate no state memory;
 * only a logits scratch of [longest entry, vocab] f32, grown on demand, lies
 * outside the budget. */
K3RT_API K3RT_MUST_USE_RESULT k3rt_status *
k3rt_session_create(k3rt_library *library, k3rt_weights *weights,
                    const k3rt_session_options *options, k3rt_session **out);

/** NULL is a no-op. Must not race with a call on the same session. */
K3RT_API void k3rt_session_release(k3rt_session *session);

typedef struct k3rt_session_info {
  size_t struct_size; /**< in: sizeof(k3rt_session_info)               */
  int64_t max_sequences;
  int64_t max_context;
  int64_t page_size; /**< 0 if the model has no paged state           */
  int64_t num_pages;
  int64_t free_pages;
  int64_t free_slots;
  int64_t num_sequences; /**< live sequences                              */
  uint64_t state_bytes;  /**< bytes of all pools                          */
} k3rt_session_info;

K3RT_API K3RT_MUST_USE_RESULT k3rt_status *
k3rt_session_get_info(k3rt_session *session, k3rt_session_info *info);

/** Adds an empty sequence `id` (app-chosen). ALREADY_EXISTS if `id` is
 * live; RESOURCE_EXHAUSTED if every slot is taken. The slot is zeroed. */
K3RT_API K3RT_MUST_USE_RESULT k3rt_status *
k3rt_sequence_add(k3rt_session *session, int64_t id);

/** Removes `id`: returns its slot and drops its pages (freed when no other
 * sequence shares them). NOT_FOUND if `id` is not live (never added or
 * already removed). */
K3RT_API K3RT_MUST_USE_RESULT k3rt_status *
k3rt_sequence_remove(k3rt_session *session, int64_t id);

/** Forks `child` from the end of `parent`: the child continues exactly like
 * the parent would. MLA pages are shared copy-on-write; KDA state and conv
 * tails are copied into the child's slot. NOT_FOUND for a missing parent,
 * ALREADY_EXISTS for an existing child, RESOURCE_EXHAUSTED if no slot. */
K3RT_API K3RT_MUST_USE_RESULT k3rt_status *
k3rt_sequence_fork(k3rt_session *session, int64_t parent, int64_t child);

/** Tokens processed by sequence `id`. */
K3RT_API K3RT_MUST_USE_RESULT k3rt_status *
k3rt_sequence_length(k3rt_session *session, int64_t id, int64_t *out);

/** Shape of a state returned by k3rt_sequence_read_state. */
typedef struct k3rt_state_shape {
  size_t struct_size; /**< in: sizeof(k3rt_state_shape)                    */
  int32_t rank;
  int64_t dims[4];
  int64_t count; /**< product of dims                                 */
} k3rt_state_shape;

/** Reads the state `group` ("kda.recurrent", "kda.conv_q", "mla.latent",
 * ... as in the manifest) of `layer` of sequence `id`, converted to f32:
 * per-sequence groups have the group's shape; a paged group gives the first
 * `length` tokens [length, width] gathered from the pages in order. With
 * `out` NULL only `shape` is filled; otherwise `out_count` (floats) must
 * hold the whole state. `shape` may be NULL. For tests and debugging. */
K3RT_API K3RT_MUST_USE_RESULT k3rt_status *
k3rt_sequence_read_state(k3rt_session *session, int64_t id, const char *group,
                         int64_t layer, float *out, size_t out_count,
                         k3rt_state_shape *shape);

/*===----------------------------------------------------------------------===*
 * Step
 *===----------------------------------------------------------------------===*/

/** Which logits of an entry a step returns. */
typedef enum k3rt_logits_mode {
  K3RT_LOGITS_NONE = 0, /**< none (prefill chunk before the last)          */
  K3RT_LOGITS_LAST = 1, /**< the last position's row                      */
  K3RT_LOGITS_ALL = 2   /**< every position's row                         */
} k3rt_logits_mode;

/** One entry of a batch: `n_tokens` tokens of sequence `seq_id` (a prefill
 * chunk, or one decode token). `tokens` is read during the call only. */
typedef struct k3rt_step_entry {
  int64_t seq_id;
  int64_t n_tokens;
  const int32_t *tokens;
  int32_t logits; /**< a k3rt_logits_mode                                */
} k3rt_step_entry;

/** Number of logits rows a step over `entries` returns (0 if an entry has
 * an unknown mode or a negative length). */
K3RT_API size_t k3rt_step_logits_rows(const k3rt_step_entry *entries,
                                      size_t n_entries);

/** Runs one batch. Everything is validated first (ids live and distinct,
 * n_tokens > 0, every token in [0, vocab), length + n_tokens <= max
 * context, enough pages for the whole batch, `logits_out` large enough);
 * on any error the status names the entry, sequence or token at fault and
 * no state has changed. Then each entry runs as one k3_forward call and its
 * sequence grows by n_tokens. The requested rows are written to
 * `logits_out` in entry order, each `vocab_size` floats;
 * `logits_out_count` is its capacity in floats (it may be NULL/0 if no
 * entry asks for logits). */
K3RT_API K3RT_MUST_USE_RESULT k3rt_status *
k3rt_session_step(k3rt_session *session, const k3rt_step_entry *entries,
                  size_t n_entries, float *logits_out, size_t logits_out_count);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* K3RT_K3RT_H */
