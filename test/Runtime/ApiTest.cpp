//===- ApiTest.cpp - the function table, versions, the config hash --------===//

#include "TestUtil.h"

#include <cstddef>
#include <cstring>
#include <string>

using namespace k3rt_test;

namespace {

//===----------------------------------------------------------------------===//
// Versions and the function table
//===----------------------------------------------------------------------===//

TEST(ApiTest, EveryVersionUpToOursIsImplemented) {
  for (uint32_t v = 1; v <= K3RT_API_VERSION; ++v)
    EXPECT_OK(k3rt_check_api_version(v));
  EXPECT_ERROR(k3rt_check_api_version(0), K3RT_FAILED_PRECONDITION);
  EXPECT_ERROR(k3rt_check_api_version(K3RT_API_VERSION + 1),
               K3RT_FAILED_PRECONDITION, "API version 5", "versions 1 to 4");
}

TEST(ApiTest, GetApiReturnsNullForANewerVersion) {
  EXPECT_EQ(k3rt_get_api(0), nullptr);
  EXPECT_EQ(k3rt_get_api(K3RT_API_VERSION + 1), nullptr);
  const k3rt_api *v1 = k3rt_get_api(1);
  const k3rt_api *v2 = k3rt_get_api(2);
  ASSERT_NE(v1, nullptr);
  ASSERT_EQ(v1, v2);
  EXPECT_EQ(v2->version, uint32_t(K3RT_API_VERSION));
  EXPECT_EQ(v2->struct_size, sizeof(k3rt_api));
}

TEST(ApiTest, TheTableHoldsTheExportedFunctions) {
  const k3rt_api *api = k3rt_get_api(K3RT_API_VERSION);
  ASSERT_NE(api, nullptr);
  EXPECT_EQ(api->status_code, &k3rt_status_code);
  EXPECT_EQ(api->library_open, &k3rt_library_open);
  EXPECT_EQ(api->session_step, &k3rt_session_step);
  EXPECT_EQ(api->get_api, &k3rt_get_api);
  EXPECT_EQ(api->sequence_rollback, &k3rt_sequence_rollback);
  EXPECT_EQ(api->sequence_get_info, &k3rt_sequence_get_info);
  EXPECT_EQ(api->weights_generate, &k3rt_weights_generate);
  // No entry is NULL.
  const char *base = reinterpret_cast<const char *>(api);
  for (size_t off = offsetof(k3rt_api, status_code); off < sizeof(k3rt_api);
       off += sizeof(void *)) {
    void *entry;
    std::memcpy(&entry, base + off, sizeof(entry));
    EXPECT_NE(entry, nullptr) << "entry at offset " << off;
  }
  // Calls through the table work like direct ones.
  k3rt_library *lib = nullptr;
  k3rt_status *s = api->library_open(K3RT_FAKE_MODEL, &lib);
  EXPECT_OK(s);
  api->library_release(lib);
}

// Append-only: these offsets are the ABI of the table (a reorder or a
// removal breaks every application built against an older header).
TEST(ApiTest, TheTableLayoutIsFrozen) {
  const size_t p = sizeof(void *);
  EXPECT_EQ(offsetof(k3rt_api, status_code), 8u);
  EXPECT_EQ(offsetof(k3rt_api, session_step), 8 + 21 * p);
  EXPECT_EQ(offsetof(k3rt_api, get_api), 8 + 22 * p);
  EXPECT_EQ(offsetof(k3rt_api, sequence_get_info), 8 + 30 * p);
  EXPECT_EQ(offsetof(k3rt_api, weights_generate), 8 + 31 * p);
  EXPECT_EQ(sizeof(k3rt_api), 8 + 32 * p);
  // Option and info structs only grow too: version 1's fields stay put.
  EXPECT_EQ(offsetof(k3rt_session_options, check_logits), 40u);
  EXPECT_EQ(offsetof(k3rt_session_info, state_bytes), 64u);
  EXPECT_EQ(offsetof(k3rt_model_info, page_bytes), 88u);
  EXPECT_EQ(offsetof(k3rt_weights_options, check_finite), 24u);
  EXPECT_EQ(sizeof(k3rt_step_entry), 32u);
}

//===----------------------------------------------------------------------===//
// SHA-256 and the config hash
//===----------------------------------------------------------------------===//

std::string configHash(const std::string &text) {
  char out[65] = {0};
  k3rt_status *s = k3rt_config_sha256(text.data(), text.size(), out);
  if (s) {
    std::string m = describe(s);
    k3rt_status_free(s);
    return m;
  }
  return out;
}

TEST(ConfigHashTest, Sha256AcrossBlockBoundaries) {
  // Canonical forms {"model_type":"kimi_linear","x":"aaa..."} of 55, 56,
  // 63, 64, 65, 119, 120, 128 and 1000 bytes (the padding cases of
  // FIPS 180-4), against Python's hashlib over the same bytes.
  struct Case {
    int pad;
    const char *sha;
  };
  const Case cases[] = {
      {20, "a7f6e8b70892428a5f11e1abda237172a810d89e66cbd72b5446b79796d12434"},
      {21, "140134091db033012b01fc7611593dcae679fa6014be2896e12df15e9b0d0332"},
      {28, "73810935c54eef62ba1f6c9fce184eaecd318f0358f380ee9916a987cd791158"},
      {29, "bdcce77e4eb03937fcc63fa984f165062ebe9ae37d4c6080c9630f66e6e22490"},
      {30, "f41e3cae723aaaa09bb2e34a4e9470aa651e78357a40b0924c7cb0d605a67b5d"},
      {84, "494d346158f1bac0cc53e4d38e8b5fd26f8e7ea7ef8054ed0817d3ba89a28a68"},
      {85, "ad9ef5b0dcefb7d49f4d2460f39704e046742819a42b3ec41d69efb578bb92c5"},
      {93, "b57a5f10010cc75bde1b6635e209cc42258d711726fbe01c9c86c4e910b8bf30"},
      {965, "8965af142743851048b997e3e8188ae01a5dfc1bfe553ef33039964143caffeb"},
  };
  for (const Case &c : cases)
    EXPECT_EQ(configHash("{\"x\": \"" + std::string(size_t(c.pad), 'a') +
                         "\", \"model_type\": \"kimi_linear\"}"),
              c.sha)
        << "pad " << c.pad;
}

TEST(ConfigHashTest, TheFakeConfigHasTheManifestsHash) {
  EXPECT_EQ(configHash(FAKE_CONFIG_JSON), FAKE_CONFIG_SHA256);
}

TEST(ConfigHashTest, FormattingDoesNotMatterValuesDo) {
  std::string a = "{\"model_type\":\"kimi_k3\",\"text_config\":{\"hidden_size\":"
                  "4,\"model_type\":\"kimi_linear\",\"num_hidden_layers\":4,"
                  "\"vocab_size\":32}}";
  std::string b = "{\n  \"text_config\": {\n    \"vocab_size\": 32,\n"
                  "    \"hidden_size\": 4, \"num_hidden_layers\": 4,\n"
                  "    \"model_type\": \"kimi_linear\"\n  },\n"
                  "  \"model_type\": \"kimi_k3\", \"dtype\": \"bfloat16\"\n}";
  EXPECT_EQ(configHash(a), FAKE_CONFIG_SHA256);
  EXPECT_EQ(configHash(b), FAKE_CONFIG_SHA256); // outside text_config: ignored
  std::string c = b;
  c.replace(c.find("32"), 2, "33");
  EXPECT_NE(configHash(c), FAKE_CONFIG_SHA256);
  // A bare kimi_linear config is hashed whole.
  EXPECT_EQ(configHash("{\"hidden_size\": 4, \"model_type\": \"kimi_linear\", "
                       "\"num_hidden_layers\": 4, \"vocab_size\": 32}"),
            FAKE_CONFIG_SHA256);
}

TEST(ConfigHashTest, BadConfigs) {
  EXPECT_NE(configHash("{").find("INVALID_ARGUMENT: config: not valid JSON"),
            std::string::npos);
  EXPECT_NE(configHash("{\"model_type\": \"llama\"}").find("'llama'"),
            std::string::npos);
  EXPECT_NE(configHash("{\"model_type\": \"kimi_k3\"}").find("'text_config'"),
            std::string::npos);
  EXPECT_ERROR(k3rt_config_sha256(nullptr, 0, nullptr), K3RT_INVALID_ARGUMENT);
}

class ConfigCheckTest : public ::testing::Test {
protected:
  void SetUp() override {
    writeFakeCheckpoint(dir.path());
    lib = openFake();
  }
  k3rt_status *load(const k3rt_weights_options *o = nullptr) {
    k3rt_weights *w = nullptr;
    k3rt_status *s = k3rt_weights_load(lib.get(), dir.path().c_str(), o, &w);
    k3rt_weights_release(w);
    return s;
  }
  TempDir dir;
  Library lib;
};

TEST_F(ConfigCheckTest, TheWeightsConfigMustBeTheLibrarys) {
  EXPECT_OK(load()); // no config.json: nothing to compare
  writeFile(dir.file("config.json"), FAKE_CONFIG_JSON);
  EXPECT_OK(load());
  EXPECT_OK(k3rt_library_check_config(lib.get(),
                                      dir.file("config.json").c_str()));
  std::string other = FAKE_CONFIG_JSON;
  other.replace(other.find("\"vocab_size\": 32"), 16, "\"vocab_size\": 64");
  writeFile(dir.file("config.json"), other);
  std::string hash = configHash(other);
  EXPECT_ERROR(load(), K3RT_FAILED_PRECONDITION, "config.json",
               "its config hash is " + hash,
               "with hash " FAKE_CONFIG_SHA256);
  EXPECT_ERROR(k3rt_library_check_config(lib.get(),
                                         dir.file("config.json").c_str()),
               K3RT_FAILED_PRECONDITION, hash, FAKE_CONFIG_SHA256);
  k3rt_weights_options o{};
  o.struct_size = sizeof(o);
  o.skip_config_check = 1;
  EXPECT_OK(load(&o));
  writeFile(dir.file("config.json"), "{ not json");
  EXPECT_ERROR(load(), K3RT_INVALID_ARGUMENT, "config.json: not valid JSON");
  EXPECT_ERROR(k3rt_library_check_config(lib.get(), "/nonexistent/c.json"),
               K3RT_NOT_FOUND, "/nonexistent/c.json");
}

TEST_F(ConfigCheckTest, ReportedInTheModelInfo) {
  k3rt_model_info info{};
  info.struct_size = sizeof(info);
  ASSERT_OK(k3rt_library_get_info(lib.get(), &info));
  EXPECT_STREQ(info.config_sha256, FAKE_CONFIG_SHA256);
  EXPECT_STREQ(info.kda_state_layout, "value_first");
  EXPECT_STREQ(info.targets, "host");
  EXPECT_EQ(info.kda_chunk_size, 0);
}

} // namespace
