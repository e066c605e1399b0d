//===- StatusTest.cpp - the status API and versions -----------------------===//

#include "TestUtil.h"

using namespace k3rt_test;

namespace {

TEST(StatusTest, NullIsOk) {
  EXPECT_EQ(k3rt_status_code(nullptr), K3RT_OK);
  EXPECT_STREQ(k3rt_status_message(nullptr), "");
  k3rt_status_free(nullptr); // a no-op
}

TEST(StatusTest, CodeNames) {
  EXPECT_STREQ(k3rt_code_name(K3RT_OK), "OK");
  EXPECT_STREQ(k3rt_code_name(K3RT_INVALID_ARGUMENT), "INVALID_ARGUMENT");
  EXPECT_STREQ(k3rt_code_name(K3RT_NOT_FOUND), "NOT_FOUND");
  EXPECT_STREQ(k3rt_code_name(K3RT_ALREADY_EXISTS), "ALREADY_EXISTS");
  EXPECT_STREQ(k3rt_code_name(K3RT_RESOURCE_EXHAUSTED), "RESOURCE_EXHAUSTED");
  EXPECT_STREQ(k3rt_code_name(K3RT_FAILED_PRECONDITION), "FAILED_PRECONDITION");
  EXPECT_STREQ(k3rt_code_name(K3RT_OUT_OF_RANGE), "OUT_OF_RANGE");
  EXPECT_STREQ(k3rt_code_name(K3RT_INTERNAL), "INTERNAL");
  EXPECT_STREQ(k3rt_code_name(K3RT_DATA_LOSS), "DATA_LOSS");
  EXPECT_STREQ(k3rt_code_name(static_cast<k3rt_code>(77)), "UNKNOWN");
}

TEST(StatusTest, ErrorCarriesCodeAndMessageUntilFreed) {
  k3rt_library *lib = nullptr;
  k3rt_status *s = k3rt_library_open("/nonexistent/libmodel.so", &lib);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(lib, nullptr);
  EXPECT_EQ(k3rt_status_code(s), K3RT_NOT_FOUND);
  EXPECT_NE(
      std::string(k3rt_status_message(s)).find("/nonexistent/libmodel.so"),
      std::string::npos);
  k3rt_status_free(s);
}

// RUNTIME_NOTES §3, 25: header/.so API version mismatch.
TEST(StatusTest, ApiVersion) {
  EXPECT_EQ(k3rt_api_version(), uint32_t(K3RT_API_VERSION));
  EXPECT_OK(k3rt_check_api_version(K3RT_API_VERSION));
  EXPECT_ERROR(k3rt_check_api_version(K3RT_API_VERSION + 1),
               K3RT_FAILED_PRECONDITION, "API version");
}

TEST(StatusTest, NullArgumentsAreErrorsNotCrashes) {
  EXPECT_ERROR(k3rt_library_open(nullptr, nullptr), K3RT_INVALID_ARGUMENT);
  EXPECT_ERROR(k3rt_library_get_info(nullptr, nullptr), K3RT_INVALID_ARGUMENT);
  EXPECT_ERROR(k3rt_weights_load(nullptr, "x", nullptr, nullptr),
               K3RT_INVALID_ARGUMENT);
  EXPECT_ERROR(k3rt_session_create(nullptr, nullptr, nullptr, nullptr),
               K3RT_INVALID_ARGUMENT);
  EXPECT_ERROR(k3rt_sequence_add(nullptr, 1), K3RT_INVALID_ARGUMENT);
  EXPECT_ERROR(k3rt_session_step(nullptr, nullptr, 0, nullptr, 0),
               K3RT_INVALID_ARGUMENT);
  k3rt_library_release(nullptr);
  k3rt_weights_release(nullptr);
  k3rt_session_release(nullptr);
}

} // namespace
