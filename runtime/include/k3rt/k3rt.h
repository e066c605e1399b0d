/*===- k3rt.h - the k3c runtime C API -------------------------------------===*
 *
 * k3rt runs a library compiled by k3c (docs/ABI.md): it opens the library,
 * loads and validates the weights against the library's manifest, owns the
 * per-sequence state (KDA slots, MLA pages, snapshots and checkpoints) and
 * runs batched steps that mix prefill chunks and decode tokens of several
 * sequences.
 *
 * Conventions (design/RUNTIME_NOTES.md §2), valid for every function below
 * unless its comment says otherwise:
 *
 *  - Errors. Every call that can fail returns a `k3rt_status *`: NULL means
 *    OK; any other value is owned by the caller and freed with
 *    k3rt_status_free(). Its code (k3rt_code) says what kind of failure it
 *    is and its message names the argument, sequence, position or file at
 *    fault. A NULL handle or out-pointer is INVALID_ARGUMENT. No C++
 *    exception crosses this API and no call aborts the process on bad input.
 *    A call that fails changes nothing (documented exceptions: the
 *    `check_logits` debug mode of k3rt_session_step).
 *  - Ownership. Handles are opaque. `*_open`, `*_load` and `*_create` hand
 *    out a handle owned by the caller, released with the matching
 *    `*_release` (which accepts NULL). Weights and sessions keep the library
 *    (and a session its weights) alive, so handles may be released in any
 *    order. Out-pointers are set to NULL on failure.
 *  - Borrowing. Strings returned by accessors are borrowed: valid as long as
 *    the handle they come from. Input arrays (tokens, entries) are read
 *    during the call only; the runtime keeps no pointer to them.
 *  - Thread safety. Libraries and weights are immutable after creation and
 *    may be shared by any number of threads and sessions (their functions
 *    are thread-safe). A session is thread-compatible: one thread at a
 *    time. Concurrent entry into one session is detected (an atomic busy
 *    flag) and the losing call returns K3RT_FAILED_PRECONDITION without
 *    touching the session. Distinct sessions may run concurrently (GPU
 *    sessions' calls take turns: the process has one GPU workspace and
 *    stream).
 *    Functions without a handle argument are thread-safe.
 *  - Versions. Option and info structs start with `struct_size` (set it to
 *    sizeof the struct); fields are only ever appended, so a caller built
 *    against an older header keeps working (fields it lacks take their
 *    defaults, info structs are filled up to its struct_size). The function
 *    table returned by k3rt_get_api() only grows.
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

/** The API version this header describes. Version 1: libraries, weights,
 * sessions, sequences, steps. Version 2: the function table, snapshots,
 * rollback, verify steps, prefix reuse, config hash checks. Version 3: GPU
 * libraries, step limits, ABORTED. Version 4: weights generated from a seed
 * (k3rt_weights_generate). */
#define K3RT_API_VERSION 4

/** The compiled library ABI version this runtime implements (docs/ABI.md). */
#define K3RT_LIBRARY_ABI_VERSION 2

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
  K3RT_FAILED_PRECONDITION = 9, /**< wrong version or config, session busy,
                                     no state to roll back to, no GPU or a
                                     GPU the library has no code for      */
  K3RT_ABORTED = 10,            /**< DEVICE_LOST: the GPU failed (illegal
                                     address, launch failure, ...); the
                                     session is unusable for the rest of
                                     its life (and the process's GPU
                                     context with it: restart it)          */
  K3RT_OUT_OF_RANGE = 11,       /**< over the context window or a limit   */
  K3RT_INTERNAL = 13,           /**< a bug or an unexpected system error   */
  K3RT_DATA_LOSS = 15           /**< truncated file, NaN/Inf weights/logits */
} k3rt_code;

typedef struct k3rt_status k3rt_status;

/** The code of `status`; K3RT_OK for NULL. Thread-safe; never fails. */
K3RT_API k3rt_code k3rt_status_code(const k3rt_status *status);
/** The message of `status`, borrowed (valid until the status is freed);
 * "" for NULL. Thread-safe; never fails. */
K3RT_API const char *k3rt_status_message(const k3rt_status *status);
/** Frees `status`; NULL is a no-op. A status is freed once, by the thread
 * that holds it. */
K3RT_API void k3rt_status_free(k3rt_status *status);
/** "INVALID_ARGUMENT" etc. (a static string); "UNKNOWN" for an unknown
 * code. Thread-safe; never fails. */
K3RT_API const char *k3rt_code_name(k3rt_code code);

/*===----------------------------------------------------------------------===*
 * Versions
 *===----------------------------------------------------------------------===*/

/** K3RT_API_VERSION of the runtime library actually loaded. Thread-safe. */
K3RT_API uint32_t k3rt_api_version(void);

/** OK if the loaded runtime implements `header_version` (pass
 * K3RT_API_VERSION): every version from 1 up to its own. Otherwise
 * FAILED_PRECONDITION naming both versions. Call once at start-up.
 * Thread-safe. */
K3RT_API K3RT_MUST_USE_RESULT k3rt_status *
k3rt_check_api_version(uint32_t header_version);

/*===----------------------------------------------------------------------===*
 * Library (a k3c-compiled libNAME.so)
 *===----------------------------------------------------------------------===*/

typedef struct k3rt_library k3rt_library;

/** Opens the compiled library at `path` (dlopen), checks k3_abi_version()
 * and parses and validates k3_manifest_json() before anything else is
 * allocated: the manifest format and version, its internal consistency
 * (every rule of docs/ABI.md), the targets ("host", or NVIDIA GPUs such as
 * "sm_90": then libk3rt_cuda.so, k3rt's CUDA runtime, is loaded from
 * $K3RT_CUDA_RUNTIME or next to libk3rt, the driver with dlopen, and device
 * 0 must be of a compute capability the library has code for; weights,
 * state and logits then live in device memory) and the state layouts (known
 * layouts whose dims agree with them: a KDA state in another layout than
 * the one the shape says is a state layout mix-up). With `path` NULL, uses
 * the library linked into the program (its k3_* entry points in the
 * program's global symbol scope).
 * Errors: NOT_FOUND (no such file), INVALID_ARGUMENT (not a shared library,
 * not a k3c library, malformed manifest; the message names the manifest
 * key), FAILED_PRECONDITION (library ABI, manifest version, target or state
 * layout this runtime does not implement; a GPU library without a driver,
 * e.g. "compiled for sm_90: no NVIDIA driver: cannot load libcuda.so.1", or
 * on another GPU: "compiled for sm_90; device 0 (NAME) is sm_80").
 * Ownership: `*out` is the caller's, released with k3rt_library_release.
 * Thread-safe. */
K3RT_API K3RT_MUST_USE_RESULT k3rt_status *
k3rt_library_open(const char *path, k3rt_library **out);

/** Drops the caller's reference; the library is closed when the last
 * weights/session using it is released too. NULL is a no-op. Thread-safe,
 * but the caller's handle must not be used afterwards. */
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
  /* --- API version 2 --- */
  const char *config_sha256;    /**< manifest model.config_sha256, or "" */
  const char *kda_state_layout; /**< "value_first", "key_first" or ""     */
  const char *targets;          /**< manifest targets, comma-separated     */
  int64_t kda_chunk_size; /**< the KDA chunk size if the manifest records
                               it, else 0                                 */
  /* --- API version 3 --- */
  const char *compiler_version; /**< the k3c that compiled the library     */
} k3rt_model_info;

/** Fills `info` (up to info->struct_size). INVALID_ARGUMENT if `library`
 * or `info` is NULL or info->struct_size is not set. Thread-safe. */
K3RT_API K3RT_MUST_USE_RESULT k3rt_status *
k3rt_library_get_info(const k3rt_library *library, k3rt_model_info *info);

/** Computes the config hash k3c records in the manifest (model.config_sha256)
 * from the text of a Hugging Face config.json: the SHA-256 (lower-case hex)
 * of the compact, key-sorted JSON serialisation of the "text_config" object
 * of a kimi_k3 config, or of the whole object of a bare kimi_linear config.
 * `out` receives 64 hex digits and a NUL. INVALID_ARGUMENT for text that is
 * not JSON or not such a config. Thread-safe. (API version 2.) */
K3RT_API K3RT_MUST_USE_RESULT k3rt_status *
k3rt_config_sha256(const char *text, size_t length, char out[65]);

/** Checks the config.json at `config_path` against the library: OK if its
 * hash (k3rt_config_sha256) equals the manifest's model.config_sha256 (or
 * the manifest records none); FAILED_PRECONDITION naming both hashes if
 * they differ; NOT_FOUND / INVALID_ARGUMENT for a missing or malformed
 * file. k3rt_weights_load does this by itself for a config.json in the
 * weights directory. Thread-safe. (API version 2.) */
K3RT_API K3RT_MUST_USE_RESULT k3rt_status *
k3rt_library_check_config(const k3rt_library *library, const char *config_path);

/*===----------------------------------------------------------------------===*
 * Weights
 *===----------------------------------------------------------------------===*/

typedef struct k3rt_weights k3rt_weights;

/** Progress while loading: `stage` is "validate", "map", "assemble" or, for
 * a library compiled for a GPU, "upload" (weight arguments copied to device
 * memory); "generate" for k3rt_weights_generate;
 * `done` of `total` units (shards or expert stacks). Called on the loading
 * thread. */
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
  /* --- API version 2 --- */
  /** Nonzero: do not compare a config.json found in the weights directory
   * with the manifest's config hash. */
  int32_t skip_config_check;
} k3rt_weights_options;

/** Loads the checkpoint at `path` for `library`: a directory holding
 * model.safetensors.index.json plus its shards or model.safetensors, or a
 * single .safetensors file (or an index .json). If the directory holds a
 * config.json, its hash must equal the manifest's model.config_sha256
 * (FAILED_PRECONDITION naming both hashes otherwise; see
 * k3rt_library_check_config). Every shard header is validated against its
 * file and every tensor against the manifest (names, dtypes, shapes) before
 * anything is mapped or allocated; all missing, unexpected, duplicated and
 * mismatching tensors are reported in one message. Vision tower and
 * projector tensors are ignored. Files are mapped read-only; tensors are
 * used in place except expert stacks (assembled into one [E, ...] buffer
 * each) and misaligned tensors (copied). `options` may be NULL.
 * Errors: NOT_FOUND (path), INVALID_ARGUMENT (malformed files, tensors not
 * matching the manifest), DATA_LOSS (truncated shard, NaN/Inf with
 * check_finite), FAILED_PRECONDITION (config hash), RESOURCE_EXHAUSTED.
 * Ownership: `*out` is the caller's (k3rt_weights_release); it keeps
 * `library` alive. Thread-safe (distinct loads may run concurrently). */
K3RT_API K3RT_MUST_USE_RESULT k3rt_status *
k3rt_weights_load(k3rt_library *library, const char *path,
                  const k3rt_weights_options *options, k3rt_weights **out);

/** Weights for `library` made from `seed`, without a checkpoint: every
 * weight argument is allocated (device memory for a library compiled for a
 * GPU) and filled by the library's own generated kernel k3_fill_random
 * (docs/ABI.md), so a 66 GB model is ready in well under a second on an
 * H200 and host memory is never touched. Counter-based: the same seed gives
 * the same bytes in every library of the model, host or GPU. Distributions
 * (uniform): norm gains 1 +- 0.17, MXFP4 codes uniform with E8M0 scales
 * around 1/sqrt(K), linear weights with standard deviation 1/sqrt(fan-in);
 * for benchmarks and smoke runs, not a trained model. Progress stage
 * "generate", one unit per weight argument.
 * Errors: FAILED_PRECONDITION (a library without k3_fill_random),
 * RESOURCE_EXHAUSTED (naming the tensor), ABORTED (a GPU fault).
 * Ownership as k3rt_weights_load. Thread-safe. (API version 4.) */
K3RT_API K3RT_MUST_USE_RESULT k3rt_status *
k3rt_weights_generate(k3rt_library *library, uint64_t seed,
                      const k3rt_weights_options *options, k3rt_weights **out);

/** Drops the caller's reference; NULL is a no-op. The mappings live as long
 * as a session uses them. Thread-safe. */
K3RT_API void k3rt_weights_release(k3rt_weights *weights);

typedef struct k3rt_weights_info {
  size_t struct_size; /**< in: sizeof(k3rt_weights_info)             */
  int64_t num_shards;
  int64_t num_tensors;   /**< tensors matched against the manifest       */
  int64_t num_ignored;   /**< vision / projector tensors skipped         */
  uint64_t mapped_bytes; /**< bytes of all shards mapped                 */
  uint64_t copied_bytes; /**< bytes copied (expert stacks, misaligned)   */
  /* --- API version 4 --- */
  uint64_t generated_bytes; /**< bytes made by k3rt_weights_generate     */
} k3rt_weights_info;

/** Fills `info`. INVALID_ARGUMENT for NULL or an unset struct_size.
 * Thread-safe. */
K3RT_API K3RT_MUST_USE_RESULT k3rt_status *
k3rt_weights_get_info(const k3rt_weights *weights, k3rt_weights_info *info);

/*===----------------------------------------------------------------------===*
 * Session: state pools, sequences, snapshots
 *
 * A session owns three pools, sized once at creation from one byte budget,
 * each in its own unit (none is padded to another's size):
 *  - sequence slots (max_sequences x slot_bytes): the KDA recurrent state
 *    and conv tails of each live sequence, zeroed when handed out;
 *  - snapshot slots (snapshot_slots x slot_bytes): copies of a slot, used
 *    by cached snapshots and by verify checkpoints;
 *  - MLA pages (num_pages x page_bytes), reference counted: shared
 *    copy-on-write by forks, prefix hits and cached snapshots.
 *
 * Snapshots (the policy is the session option `snapshot_interval`): when a
 * sequence's length reaches a multiple of the interval (a multiple of the
 * MLA page size), the runtime copies its KDA state: a step splits each
 * entry at those positions into separate k3_forward calls, so capturing a
 * state costs one copy, never a second pass over the tokens. After the step
 * has completed (and only then), each captured state is published in the
 * session's prefix cache as a node keyed by a hash chain over the
 * interval-sized token blocks from position 0 and holding the block's
 * tokens, its (full, immutable) MLA pages and the state. Cached snapshots
 * outlive the sequence that made them; they are evicted least recently used
 * first when their snapshot slots or pages are needed.
 *
 * A snapshot is exact: a prefix hit compares every token of every block
 * (the hash only finds candidates), and restoring copies the state the
 * model computed for exactly those tokens. Numerically, a sequence resumed
 * from a snapshot is bit-identical to one that computed the same tokens
 * split into the same k3_forward calls; with other splits the results
 * differ by rounding only (~1e-6 relative with f32 activations).
 *===----------------------------------------------------------------------===*/

typedef struct k3rt_session k3rt_session;

typedef struct k3rt_session_options {
  size_t struct_size; /**< sizeof(k3rt_session_options)              */
  /** Bytes for all sequence state: max_sequences sequence slots and
   * snapshot_slots snapshot slots (slot_bytes each), then as many MLA pages
   * (page_bytes each) as fit in the rest, or num_pages if set. Required. */
  uint64_t state_budget_bytes;
  /** Sequence slots = live sequences at most (forks included). Required,
   * > 0. */
  int32_t max_sequences;
  /** Context window: min(manifest max_context, this); 0 = the manifest's. */
  int64_t max_context;
  /** Pages per MLA pool; 0 = as many as the budget allows. */
  int64_t num_pages;
  /** Nonzero (a debug mode): after each step, check the returned logits
   * and fail with DATA_LOSS naming the first non-finite one. The step has
   * run (the sequences have advanced) when this reports, but the snapshots
   * it captured are discarded, not published. */
  int32_t check_logits;
  /* --- API version 2 --- */
  /** The snapshot policy: capture the KDA state of every sequence at each
   * position that is a multiple of this many tokens, and publish it in the
   * prefix cache. 0 (the default) = no snapshots. Must be a multiple of the
   * MLA page size and, if the manifest records it, of the KDA chunk size
   * (so that splitting calls there does not change the kernels' chunking).
   * Needs snapshot_slots > 0. */
  int64_t snapshot_interval;
  /** Snapshot slots: cached snapshots and verify checkpoints share them. */
  int64_t snapshot_slots;
  /** The longest verify entry (K3RT_STEP_VERIFY) allowed; 0 = verify
   * entries are rejected. At most snapshot_slots. */
  int64_t max_verify_tokens;
  /* --- API version 3 --- */
  /** The most tokens one step may carry over all its entries (prefill
   * chunks and decode tokens together); a step over it fails with
   * OUT_OF_RANGE before anything runs. 0 = no limit. */
  int64_t max_step_tokens;
  /** The most entries (sequences) in one step; 0 = max_sequences. */
  int64_t max_step_entries;
  /** A library compiled for a GPU: the CUstream its kernels and the
   * session's copies run on (NULL: streams of the library's own). Every
   * call returns with the stream's work complete. INVALID_ARGUMENT for a
   * host library. */
  void *cuda_stream;
} k3rt_session_options;

/** Creates a session over `weights` (which must come from `library`). The
 * state pools are allocated here, once, and steps allocate no state memory;
 * only a logits scratch of [longest entry, vocab] f32, grown on demand, lies
 * outside the budget.
 * Errors: INVALID_ARGUMENT (options: struct_size, max_sequences <= 0, a
 * zero budget, a snapshot interval that is not a multiple of the page or
 * KDA chunk size, ...), RESOURCE_EXHAUSTED (the slots and at least one page
 * do not fit in the budget; the message gives the sizes).
 * Ownership: `*out` is the caller's (k3rt_session_release); it keeps
 * `library` and `weights` alive. Thread-safe. */
K3RT_API K3RT_MUST_USE_RESULT k3rt_status *
k3rt_session_create(k3rt_library *library, k3rt_weights *weights,
                    const k3rt_session_options *options, k3rt_session **out);

/** Frees the session, its sequences and snapshots. NULL is a no-op. Must not
 * race with any other call on the same session. */
K3RT_API void k3rt_session_release(k3rt_session *session);

typedef struct k3rt_session_info {
  size_t struct_size; /**< in: sizeof(k3rt_session_info)               */
  int64_t max_sequences;
  int64_t max_context;
  int64_t page_size; /**< 0 if the model has no paged state           */
  int64_t num_pages;
  int64_t free_pages; /**< pages not held by anything                 */
  int64_t free_slots; /**< free sequence slots                        */
  int64_t num_sequences; /**< live sequences                              */
  uint64_t state_bytes;  /**< bytes of all pools                          */
  /* --- API version 2 --- */
  int64_t snapshot_interval;
  int64_t snapshot_slots;
  int64_t free_snapshot_slots;
  int64_t cached_snapshots; /**< prefix cache nodes holding a state       */
  int64_t cached_blocks;    /**< prefix cache nodes (with or without)     */
  int64_t cached_pages;  /**< pages held only by the cache (reclaimable) */
  int64_t checkpoints;   /**< snapshot slots held by verify checkpoints  */
  int64_t max_verify_tokens;
  /* --- API version 3 --- */
  int64_t max_step_tokens;  /**< 0 = no limit                           */
  int64_t max_step_entries;
  /** "host", or the GPU the session's memory lives on, e.g. "NVIDIA H200
   * (sm_90, 139.8 GiB, 60.1 GiB free)" at creation. */
  const char *device;
} k3rt_session_info;

/** Fills `info`. Errors: INVALID_ARGUMENT, FAILED_PRECONDITION (busy). */
K3RT_API K3RT_MUST_USE_RESULT k3rt_status *
k3rt_session_get_info(k3rt_session *session, k3rt_session_info *info);

/** Adds an empty sequence `id` (app-chosen). Its slot is zeroed: a slot
 * that held a removed sequence never leaks its state.
 * Errors: ALREADY_EXISTS if `id` is live; RESOURCE_EXHAUSTED if every
 * sequence slot is taken. */
K3RT_API K3RT_MUST_USE_RESULT k3rt_status *
k3rt_sequence_add(k3rt_session *session, int64_t id);

/** Adds sequence `id` for a prompt `tokens[0 .. n_tokens)` and starts it
 * from the deepest cached snapshot whose tokens are exactly a prefix of
 * them: its MLA pages are shared copy-on-write, its KDA state is copied
 * into the new sequence's (otherwise zeroed) slot, and the sequence's
 * length is the number of tokens reused, returned in `*reused` (0 on a
 * miss; a multiple of snapshot_interval). The caller then steps
 * tokens[*reused .. n_tokens). To obtain the logits of the prompt's last
 * token, pass n_tokens - 1 so that at least that token is computed.
 * `tokens` may be NULL if n_tokens is 0; `reused` may be NULL.
 * Errors: as k3rt_sequence_add, plus INVALID_ARGUMENT (n_tokens < 0, a
 * token outside the vocabulary). (API version 2.) */
K3RT_API K3RT_MUST_USE_RESULT k3rt_status *
k3rt_sequence_add_with_prefix(k3rt_session *session, int64_t id,
                              const int32_t *tokens, int64_t n_tokens,
                              int64_t *reused);

/** The number of tokens k3rt_sequence_add_with_prefix would reuse for
 * `tokens[0 .. n_tokens)`, without adding anything (for scheduling).
 * (API version 2.) */
K3RT_API K3RT_MUST_USE_RESULT k3rt_status *
k3rt_session_match_prefix(k3rt_session *session, const int32_t *tokens,
                          int64_t n_tokens, int64_t *reusable);

/** Drops every cached snapshot that no sequence needs (all of them: the
 * cache never pins), returning their snapshot slots and pages.
 * (API version 2.) */
K3RT_API K3RT_MUST_USE_RESULT k3rt_status *
k3rt_session_drop_snapshots(k3rt_session *session);

/** Removes `id`: returns its slot and its checkpoints' snapshot slots and
 * drops its pages (freed when no other sequence or cached snapshot shares
 * them). Snapshots it published stay in the cache.
 * Errors: NOT_FOUND if `id` is not live (never added or already removed;
 * the message says "it was removed" for recently removed ids). */
K3RT_API K3RT_MUST_USE_RESULT k3rt_status *
k3rt_sequence_remove(k3rt_session *session, int64_t id);

/** Forks `child` from the end of `parent`: the child continues exactly like
 * the parent would. MLA pages are shared copy-on-write; KDA state and conv
 * tails are copied into the child's slot. Checkpoints are not inherited.
 * Errors: NOT_FOUND for a missing parent, ALREADY_EXISTS for an existing
 * child, RESOURCE_EXHAUSTED if no slot. */
K3RT_API K3RT_MUST_USE_RESULT k3rt_status *
k3rt_sequence_fork(k3rt_session *session, int64_t parent, int64_t child);

/** Forks `child` from `parent` at `position` (0 .. parent length): the
 * child holds the parent's first `position` tokens. Exact, like
 * k3rt_sequence_rollback: the KDA state at `position` must be available (the
 * parent's length, a verify checkpoint of the parent, position 0, or a
 * cached snapshot on the parent's path); otherwise FAILED_PRECONDITION
 * naming the positions that are available. Errors otherwise as
 * k3rt_sequence_fork, plus OUT_OF_RANGE for a position outside
 * [0, length]. (API version 2.) */
K3RT_API K3RT_MUST_USE_RESULT k3rt_status *
k3rt_sequence_fork_at(k3rt_session *session, int64_t parent, int64_t child,
                      int64_t position);

/** Pops the last `n_tokens` tokens of sequence `id` (speculative decoding
 * rejects drafts): afterwards the sequence is exactly what it was at length
 * L - n_tokens. MLA pages past the new end are dropped (exact for any n).
 * The KDA state is restored exactly from, in this order: a checkpoint of
 * the sequence's last verify step at the target position, the zero state
 * (target 0), or a cached snapshot on the sequence's own token path at the
 * target position. If none exists (e.g. inside an ordinary prefill chunk)
 * the call fails with FAILED_PRECONDITION naming the sequence, its length,
 * the target position and the positions it could roll back to; nothing
 * changes. n_tokens = 0 is a no-op.
 * Errors: NOT_FOUND, INVALID_ARGUMENT (n_tokens < 0), OUT_OF_RANGE
 * (n_tokens > length), FAILED_PRECONDITION (no exact state). (API 2.) */
K3RT_API K3RT_MUST_USE_RESULT k3rt_status *
k3rt_sequence_rollback(k3rt_session *session, int64_t id, int64_t n_tokens);

/** Tokens processed by sequence `id`. Errors: NOT_FOUND. */
K3RT_API K3RT_MUST_USE_RESULT k3rt_status *
k3rt_sequence_length(k3rt_session *session, int64_t id, int64_t *out);

/** What a sequence holds (API version 2). */
typedef struct k3rt_sequence_info {
  size_t struct_size; /**< in: sizeof(k3rt_sequence_info)               */
  int64_t length;
  int64_t num_pages;        /**< pages in its page table                    */
  int64_t checkpoint_first; /**< positions first .. first + count - 1 have */
  int64_t checkpoint_count; /**<   verify checkpoints (count 0: none)       */
  int64_t reused_tokens;    /**< tokens taken from the cache when added      */
  int64_t snapshot_position; /**< deepest cached snapshot with a state on
                                  its path (0 if none)                     */
} k3rt_sequence_info;

/** Fills `info` for sequence `id`. Errors: NOT_FOUND, INVALID_ARGUMENT.
 * (API version 2.) */
K3RT_API K3RT_MUST_USE_RESULT k3rt_status *
k3rt_sequence_get_info(k3rt_session *session, int64_t id,
                       k3rt_sequence_info *info);

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
 * hold the whole state. `shape` may be NULL. For tests and debugging.
 * Errors: NOT_FOUND (sequence, group or layer; the message lists what
 * exists), INVALID_ARGUMENT (out_count too small). */
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

/** A flag ORed into k3rt_step_entry.logits (API version 2): a verify entry
 * (speculative decoding). Its n_tokens (at most the session's
 * max_verify_tokens) run one k3_forward call each, and the KDA state before
 * each of them is kept as a checkpoint in a snapshot slot, so that
 * k3rt_sequence_rollback can pop any 0 .. n_tokens of them exactly. The
 * checkpoints live until the sequence's next step, its removal, or a
 * rollback before them. */
#define K3RT_STEP_VERIFY 0x100
/** The bits of k3rt_step_entry.logits that hold the k3rt_logits_mode. */
#define K3RT_LOGITS_MODE_MASK 0xff

/** One entry of a batch: `n_tokens` tokens of sequence `seq_id` (a prefill
 * chunk, or one decode token). `tokens` is read during the call only. */
typedef struct k3rt_step_entry {
  int64_t seq_id;
  int64_t n_tokens;
  const int32_t *tokens;
  int32_t logits; /**< a k3rt_logits_mode, optionally | K3RT_STEP_VERIFY  */
} k3rt_step_entry;

/** Number of logits rows a step over `entries` returns (0 if an entry has
 * an unknown mode or flag or a negative length). Thread-safe. */
K3RT_API size_t k3rt_step_logits_rows(const k3rt_step_entry *entries,
                                      size_t n_entries);

/** Runs one batch. Everything is validated first (ids live and distinct,
 * n_tokens > 0, every token in [0, vocab), length + n_tokens <= max
 * context, enough pages for the whole batch, counting the pages and
 * snapshot slots that evicting cached snapshots would free, verify entries
 * within max_verify_tokens and their checkpoints within the snapshot slots,
 * `logits_out` large enough); on any error the status names the entry,
 * sequence or token at fault and no state has changed. Then the entries of
 * one token (not verify) run together as one k3_forward call (a decode
 * batch; K3RT_SEPARATE_DECODE=1 at session creation: one call each), every
 * other entry as k3_forward calls of its own (one, or more where the entry
 * crosses a snapshot position, or one per token for a verify entry); each
 * sequence grows by
 * n_tokens; snapshots captured on the way are published when all entries
 * have run. The requested rows are written to `logits_out` in entry order,
 * each `vocab_size` floats; `logits_out_count` is its capacity in floats
 * (it may be NULL/0 if no entry asks for logits).
 * Errors: NOT_FOUND, INVALID_ARGUMENT, OUT_OF_RANGE (context window, verify
 * entry longer than max_verify_tokens), RESOURCE_EXHAUSTED (pages or
 * snapshot slots), FAILED_PRECONDITION (busy; verify entries with
 * max_verify_tokens 0), DATA_LOSS (check_logits). */
K3RT_API K3RT_MUST_USE_RESULT k3rt_status *
k3rt_session_step(k3rt_session *session, const k3rt_step_entry *entries,
                  size_t n_entries, float *logits_out, size_t logits_out_count);

/*===----------------------------------------------------------------------===*
 * The function table (API version 2)
 *
 * k3rt_get_api(version) returns the runtime's table if it implements
 * `version` (1 .. K3RT_API_VERSION), else NULL (the runtime is older than
 * the caller). The table is append-only: entries are never reordered or
 * removed, and an entry added in version N is listed after every entry of
 * versions < N, so a caller built against version N may use every entry up
 * to its own version's last. `version` in the table is the runtime's own.
 * Applications that load k3rt with dlopen need only this one symbol.
 *===----------------------------------------------------------------------===*/

typedef struct k3rt_api {
  uint32_t version;     /**< K3RT_API_VERSION of the runtime             */
  uint32_t struct_size; /**< sizeof(k3rt_api) in the runtime              */
  /* --- version 1 --- */
  k3rt_code (*status_code)(const k3rt_status *);
  const char *(*status_message)(const k3rt_status *);
  void (*status_free)(k3rt_status *);
  const char *(*code_name)(k3rt_code);
  uint32_t (*api_version)(void);
  k3rt_status *(*check_api_version)(uint32_t);
  k3rt_status *(*library_open)(const char *, k3rt_library **);
  void (*library_release)(k3rt_library *);
  k3rt_status *(*library_get_info)(const k3rt_library *, k3rt_model_info *);
  k3rt_status *(*weights_load)(k3rt_library *, const char *,
                               const k3rt_weights_options *, k3rt_weights **);
  void (*weights_release)(k3rt_weights *);
  k3rt_status *(*weights_get_info)(const k3rt_weights *, k3rt_weights_info *);
  k3rt_status *(*session_create)(k3rt_library *, k3rt_weights *,
                                 const k3rt_session_options *,
                                 k3rt_session **);
  void (*session_release)(k3rt_session *);
  k3rt_status *(*session_get_info)(k3rt_session *, k3rt_session_info *);
  k3rt_status *(*sequence_add)(k3rt_session *, int64_t);
  k3rt_status *(*sequence_remove)(k3rt_session *, int64_t);
  k3rt_status *(*sequence_fork)(k3rt_session *, int64_t, int64_t);
  k3rt_status *(*sequence_length)(k3rt_session *, int64_t, int64_t *);
  k3rt_status *(*sequence_read_state)(k3rt_session *, int64_t, const char *,
                                      int64_t, float *, size_t,
                                      k3rt_state_shape *);
  size_t (*step_logits_rows)(const k3rt_step_entry *, size_t);
  k3rt_status *(*session_step)(k3rt_session *, const k3rt_step_entry *,
                               size_t, float *, size_t);
  /* --- version 2 --- */
  const struct k3rt_api *(*get_api)(uint32_t);
  k3rt_status *(*config_sha256)(const char *, size_t, char *);
  k3rt_status *(*library_check_config)(const k3rt_library *, const char *);
  k3rt_status *(*sequence_add_with_prefix)(k3rt_session *, int64_t,
                                           const int32_t *, int64_t,
                                           int64_t *);
  k3rt_status *(*session_match_prefix)(k3rt_session *, const int32_t *,
                                       int64_t, int64_t *);
  k3rt_status *(*session_drop_snapshots)(k3rt_session *);
  k3rt_status *(*sequence_fork_at)(k3rt_session *, int64_t, int64_t, int64_t);
  k3rt_status *(*sequence_rollback)(k3rt_session *, int64_t, int64_t);
  k3rt_status *(*sequence_get_info)(k3rt_session *, int64_t,
                                    k3rt_sequence_info *);
  /* --- version 4 --- */
  k3rt_status *(*weights_generate)(k3rt_library *, uint64_t,
                                   const k3rt_weights_options *,
                                   k3rt_weights **);
  /* Entries of later versions are appended here. */
} k3rt_api;

/** The function table for callers built against `version` (pass
 * K3RT_API_VERSION), or NULL if this runtime is older than `version` (or
 * `version` is 0). The table is static: never freed, valid for the life of
 * the process. Thread-safe. */
K3RT_API const k3rt_api *k3rt_get_api(uint32_t version);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* K3RT_K3RT_H */
