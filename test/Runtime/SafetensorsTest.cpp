//===- SafetensorsTest.cpp - the safetensors reader, bad files 8-12, 15 ---===//
//
// Each test writes one bad file and loads it through the public API; the
// error must name the file and the rule (RUNTIME_NOTES.md §3).
//
//===----------------------------------------------------------------------===//

#include "TestUtil.h"

#include <cstring>
#include <unistd.h>

using namespace k3rt_test;

namespace {

class SafetensorsTest : public ::testing::Test {
protected:
  void SetUp() override { lib = openFake(); }

  /// Loads `bytes` written as the directory's model.safetensors.
  k3rt_status *load(const std::string &bytes) {
    writeFile(dir.file("model.safetensors"), bytes);
    k3rt_weights *w = nullptr;
    k3rt_status *s =
        k3rt_weights_load(lib.get(), dir.path().c_str(), nullptr, &w);
    EXPECT_EQ(s == nullptr, w != nullptr);
    k3rt_weights_release(w);
    return s;
  }

  /// A one-tensor file whose header entry is `entry` over `dataBytes`.
  k3rt_status *loadEntry(const std::string &entry, size_t dataBytes) {
    return load(
        rawSafetensors("{\"t\": " + entry + "}", std::string(dataBytes, '\0')));
  }

  TempDir dir;
  Library lib;
};

TEST_F(SafetensorsTest, ReadsAValidFile) {
  EXPECT_OK(load(safetensorsBytes(fakeWeights())));
}

TEST_F(SafetensorsTest, AcceptsMetadataAndTrailingSpaces) {
  std::string good = safetensorsBytes(fakeWeights());
  // safetensorsBytes writes __metadata__ and pads the header with spaces.
  EXPECT_NE(good.find("__metadata__"), std::string::npos);
  EXPECT_OK(load(good));
}

// 8. Header length over the cap or the file size.
TEST_F(SafetensorsTest, HeaderLengthOverTheCap) {
  std::string bytes(8, '\0');
  uint64_t n = 100000001;
  std::memcpy(&bytes[0], &n, 8);
  bytes += "{}";
  EXPECT_ERROR(load(bytes), K3RT_INVALID_ARGUMENT, "model.safetensors",
               "HeaderTooLarge");
}

TEST_F(SafetensorsTest, HeaderLengthOverTheFileSize) {
  std::string bytes(8, '\0');
  uint64_t n = 1000;
  std::memcpy(&bytes[0], &n, 8);
  bytes += "{}";
  EXPECT_ERROR(load(bytes), K3RT_DATA_LOSS, "runs past the end",
               "InvalidHeaderLength");
}

TEST_F(SafetensorsTest, ShorterThanTheLengthPrefix) {
  EXPECT_ERROR(load("abc"), K3RT_DATA_LOSS, "too short");
}

// 9. Header not starting with '{', bad UTF-8, bad JSON, duplicate keys.
TEST_F(SafetensorsTest, HeaderNotAnObject) {
  EXPECT_ERROR(load(rawSafetensors("[1, 2]", "")), K3RT_INVALID_ARGUMENT,
               "does not start with '{'");
  EXPECT_ERROR(load(rawSafetensors("", "")), K3RT_INVALID_ARGUMENT,
               "does not start with '{'");
}

TEST_F(SafetensorsTest, HeaderBadUtf8) {
  EXPECT_ERROR(load(rawSafetensors("{\"\xff\xfe\": 1}", "")),
               K3RT_INVALID_ARGUMENT, "not valid UTF-8 JSON");
}

TEST_F(SafetensorsTest, HeaderBadJson) {
  EXPECT_ERROR(load(rawSafetensors("{\"t\": {\"dtype\": ", "")),
               K3RT_INVALID_ARGUMENT, "not valid UTF-8 JSON");
}

TEST_F(SafetensorsTest, HeaderDuplicateKey) {
  std::string entry =
      "{\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [0, 2]}";
  EXPECT_ERROR(load(rawSafetensors(
                   "{\"t\": " + entry + ", \"t\": " + entry + "}", "ab")),
               K3RT_INVALID_ARGUMENT, "duplicate key 't'");
}

TEST_F(SafetensorsTest, HeaderEntryMalformed) {
  EXPECT_ERROR(loadEntry("[]", 0), K3RT_INVALID_ARGUMENT,
               "tensor 't' is not an object");
  EXPECT_ERROR(loadEntry("{\"shape\": [1], \"data_offsets\": [0, 1]}", 1),
               K3RT_INVALID_ARGUMENT, "dtype missing");
  EXPECT_ERROR(
      loadEntry("{\"dtype\": \"U8\", \"shape\": [-1], \"data_offsets\": [0, "
                "1]}",
                1),
      K3RT_INVALID_ARGUMENT, "shape entries must be non-negative");
  EXPECT_ERROR(load(rawSafetensors("{\"__metadata__\": {\"a\": 1}}", "")),
               K3RT_INVALID_ARGUMENT, "__metadata__ entry 'a'");
}

// 10. data_offsets: not two entries, inverted, past EOF, overlapping, holes,
// not covering the buffer.
TEST_F(SafetensorsTest, OffsetsNotTwoEntries) {
  EXPECT_ERROR(loadEntry("{\"dtype\": \"U8\", \"shape\": [4], "
                         "\"data_offsets\": [0, 2, 4]}",
                         4),
               K3RT_INVALID_ARGUMENT, "3 entries, expected 2");
}

TEST_F(SafetensorsTest, OffsetsInverted) {
  EXPECT_ERROR(loadEntry("{\"dtype\": \"U8\", \"shape\": [4], "
                         "\"data_offsets\": [4, 0]}",
                         4),
               K3RT_INVALID_ARGUMENT, "inverted");
}

TEST_F(SafetensorsTest, OffsetsPastTheEnd) {
  EXPECT_ERROR(loadEntry("{\"dtype\": \"U8\", \"shape\": [8], "
                         "\"data_offsets\": [0, 8]}",
                         4),
               K3RT_DATA_LOSS, "past the end of the 4-byte data region");
}

TEST_F(SafetensorsTest, OffsetsOverlap) {
  EXPECT_ERROR(
      load(rawSafetensors(
          "{\"a\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [0, "
          "4]}, \"b\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": "
          "[2, 6]}}",
          std::string(6, '\0'))),
      K3RT_INVALID_ARGUMENT, "tensor 'b' [2, 6) overlaps tensor 'a' [0, 4)");
}

TEST_F(SafetensorsTest, OffsetsLeaveAHole) {
  EXPECT_ERROR(
      load(rawSafetensors(
          "{\"a\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [0, "
          "2]}, \"b\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": "
          "[4, 6]}}",
          std::string(6, '\0'))),
      K3RT_INVALID_ARGUMENT, "data bytes [2, 4) before tensor 'b'");
}

TEST_F(SafetensorsTest, OffsetsDoNotCoverTheData) {
  EXPECT_ERROR(loadEntry("{\"dtype\": \"U8\", \"shape\": [2], "
                         "\"data_offsets\": [0, 2]}",
                         5),
               K3RT_INVALID_ARGUMENT, "cover 2 of the 5 data bytes",
               "MetadataIncompleteBuffer");
}

// 11. shape x dtype != end - begin, and overflowing sizes.
TEST_F(SafetensorsTest, SizeDisagreesWithOffsets) {
  EXPECT_ERROR(loadEntry("{\"dtype\": \"BF16\", \"shape\": [2, 3], "
                         "\"data_offsets\": [0, 6]}",
                         6),
               K3RT_INVALID_ARGUMENT, "[2, 3] x BF16 is 12 bytes",
               "TensorInvalidInfo");
}

TEST_F(SafetensorsTest, SizeOverflows) {
  EXPECT_ERROR(loadEntry("{\"dtype\": \"F32\", \"shape\": "
                         "[4294967296, 4294967296], \"data_offsets\": [0, 0]}",
                         0),
               K3RT_INVALID_ARGUMENT, "overflows");
}

// 12. Unknown dtype; misaligned sub-byte dtype.
TEST_F(SafetensorsTest, UnknownDtype) {
  EXPECT_ERROR(loadEntry("{\"dtype\": \"Q4_K\", \"shape\": [4], "
                         "\"data_offsets\": [0, 4]}",
                         4),
               K3RT_INVALID_ARGUMENT, "unknown dtype 'Q4_K'");
}

TEST_F(SafetensorsTest, MisalignedSubByteDtype) {
  EXPECT_ERROR(loadEntry("{\"dtype\": \"F4\", \"shape\": [3], "
                         "\"data_offsets\": [0, 2]}",
                         2),
               K3RT_INVALID_ARGUMENT, "MisalignedSlice");
}

// 15. A truncated shard is a clean error, not a SIGBUS.
TEST_F(SafetensorsTest, TruncatedFile) {
  std::string good = safetensorsBytes(fakeWeights());
  EXPECT_ERROR(load(good.substr(0, good.size() - 10)), K3RT_DATA_LOSS,
               "truncated");
}

TEST_F(SafetensorsTest, FileTruncatedAfterTheHeader) {
  std::string good = safetensorsBytes(fakeWeights());
  uint64_t n;
  std::memcpy(&n, good.data(), 8);
  EXPECT_ERROR(load(good.substr(0, 8 + n)), K3RT_DATA_LOSS, "truncated");
}

TEST_F(SafetensorsTest, NotARegularFile) {
  k3rt_weights *w = nullptr;
  // A directory without either file.
  EXPECT_ERROR(k3rt_weights_load(lib.get(), dir.path().c_str(), nullptr, &w),
               K3RT_NOT_FOUND, "neither model.safetensors.index.json");
  EXPECT_ERROR(
      k3rt_weights_load(lib.get(), "/nonexistent/w.safetensors", nullptr, &w),
      K3RT_NOT_FOUND, "does not exist");
}

} // namespace
