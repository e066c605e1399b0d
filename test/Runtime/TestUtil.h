//===- TestUtil.h - helpers for the k3rt tests ------------------*- C++ -*-===//
//
// Status matchers, temporary directories, a safetensors writer (for good and
// deliberately bad files), the fake library's weights, and the reference
// that computes the fake model's logits from a token history alone.
//
//===----------------------------------------------------------------------===//

#ifndef K3RT_TEST_TESTUTIL_H
#define K3RT_TEST_TESTUTIL_H

#include "FakeModel.h"

#include "k3rt/k3rt.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace k3rt_test {

//===----------------------------------------------------------------------===//
// Status
//===----------------------------------------------------------------------===//

struct StatusDeleter {
  void operator()(k3rt_status *s) const { k3rt_status_free(s); }
};
using Status = std::unique_ptr<k3rt_status, StatusDeleter>;

/// "OK" or "CODE: message".
std::string describe(const k3rt_status *s);

/// Takes ownership of `s`; passes if it is OK.
::testing::AssertionResult isOk(k3rt_status *s);
/// Takes ownership of `s`; passes if it has `code` and its message
/// contains every one of `parts`.
::testing::AssertionResult hasError(k3rt_status *s, k3rt_code code,
                                    std::vector<std::string> parts = {});

#define EXPECT_OK(expr) EXPECT_TRUE(::k3rt_test::isOk(expr))
#define ASSERT_OK(expr) ASSERT_TRUE(::k3rt_test::isOk(expr))
#define EXPECT_ERROR(expr, code, ...)                                          \
  EXPECT_TRUE(::k3rt_test::hasError(expr, code, {__VA_ARGS__}))

//===----------------------------------------------------------------------===//
// Handles
//===----------------------------------------------------------------------===//

struct LibraryDeleter {
  void operator()(k3rt_library *l) const { k3rt_library_release(l); }
};
struct WeightsDeleter {
  void operator()(k3rt_weights *w) const { k3rt_weights_release(w); }
};
struct SessionDeleter {
  void operator()(k3rt_session *s) const { k3rt_session_release(s); }
};
using Library = std::unique_ptr<k3rt_library, LibraryDeleter>;
using Weights = std::unique_ptr<k3rt_weights, WeightsDeleter>;
using Session = std::unique_ptr<k3rt_session, SessionDeleter>;

/// The fake library (asserts success).
Library openFake();

/// The fake library's built-in manifest text.
std::string fakeManifest();

/// Opens the fake library with `manifest` in place of its own (through
/// K3FAKE_MANIFEST); returns the status, `out` set on success.
k3rt_status *openFakeWithManifest(const std::string &manifest,
                                  Library *out = nullptr);

//===----------------------------------------------------------------------===//
// Files
//===----------------------------------------------------------------------===//

/// A fresh directory, removed with its contents on destruction.
class TempDir {
public:
  TempDir();
  ~TempDir();
  const std::string &path() const { return dir; }
  std::string file(const std::string &name) const { return dir + "/" + name; }

private:
  std::string dir;
};

void writeFile(const std::string &path, const std::string &bytes);
std::string readFile(const std::string &path);

struct TensorData {
  std::string name;
  std::string dtype; ///< safetensors spelling
  std::vector<int64_t> shape;
  std::string bytes;
};

/// A valid safetensors file (offsets contiguous, header padded to 8).
std::string safetensorsBytes(const std::vector<TensorData> &tensors);
/// A file with `header` taken as is (length prefix = header size).
std::string rawSafetensors(const std::string &header, const std::string &data);

/// bf16 bits of `f` (round to nearest even).
uint16_t toBF16(float f);
float fromBF16(uint16_t b);

//===----------------------------------------------------------------------===//
// The fake model
//===----------------------------------------------------------------------===//

/// Every checkpoint tensor the fake manifest expects, with deterministic
/// contents; expert stacks expanded to per-expert tensors.
std::vector<TensorData> fakeWeights();
/// Index of `name` in `tensors` (asserts presence).
size_t findTensor(const std::vector<TensorData> &tensors,
                  const std::string &name);

/// What the fake logits show of the weights.
struct FakeWeightSums {
  float embed[FAKE_VOCAB];  ///< embed[tok][0] + embed[tok][3]
  float lmHead[FAKE_VOCAB]; ///< lm_head[tok][1]
  float experts = 0;
  float convWeight = 0;
};
FakeWeightSums fakeWeightSums(const std::vector<TensorData> &tensors);

/// The logits row of position `p` of a sequence whose tokens are
/// `history[0..p]`, computed in a call of `T` tokens in which `p` is the
/// `t`-th.
std::vector<float> referenceRow(const std::vector<int32_t> &history, int64_t p,
                                int64_t T, int64_t t,
                                const FakeWeightSums &sums);

/// Writes fakeWeights() as `dir`/model.safetensors.
void writeFakeCheckpoint(const std::string &dir);

/// Options of a FakeSession beyond the first three.
struct SnapshotConfig {
  int64_t interval = 0;
  int64_t snapshotSlots = 0;
  int64_t maxVerifyTokens = 0;
};

/// A session over the fake library with fake weights.
class FakeSession {
public:
  /// `pages` = 0: as many as `budget` allows. The budget is exactly the
  /// slots, snapshot slots and pages.
  explicit FakeSession(int32_t maxSequences = 4, int64_t pages = 64,
                       int64_t maxContext = 0,
                       SnapshotConfig snapshots = SnapshotConfig());

  k3rt_session *get() const { return session.get(); }
  k3rt_library *library() const { return lib.get(); }
  const FakeWeightSums &sums() const { return weightSums; }

  /// Runs one batch; returns the requested rows (asserting success).
  std::vector<float> step(const std::vector<k3rt_step_entry> &entries);
  /// Prefills/decodes `tokens` for `id` in one entry, all rows returned.
  std::vector<float> feed(int64_t id, const std::vector<int32_t> &tokens);
  int64_t length(int64_t id);
  k3rt_session_info info();
  std::vector<float> readState(int64_t id, const char *group, int64_t layer,
                               k3rt_state_shape *shape = nullptr);

  /// Compares `rows` (`T` rows of one call starting at position `len` of a
  /// sequence whose tokens are `history`) with the reference.
  ::testing::AssertionResult matches(const std::vector<float> &rows,
                                     const std::vector<int32_t> &history,
                                     int64_t len, int64_t T,
                                     size_t firstRow = 0) const;
  /// The same for an entry the runtime split into calls at the multiples
  /// of `interval` (1: one call per token, as a verify entry).
  ::testing::AssertionResult matchesCalls(const std::vector<float> &rows,
                                          const std::vector<int32_t> &history,
                                          int64_t len, int64_t T,
                                          int64_t interval,
                                          size_t firstRow = 0) const;

private:
  TempDir dir;
  Library lib;
  Weights weights;
  Session session;
  FakeWeightSums weightSums;
};

/// Forward calls made by the fake library so far.
long fakeForwardCalls();
/// Installs a hook called on entry to the fake k3_forward.
void setFakeForwardHook(void (*hook)(void *), void *user);

} // namespace k3rt_test

#endif // K3RT_TEST_TESTUTIL_H
