//===- DriverTest.cpp - k3c flag parsing ----------------------------------===//

#include "k3/Driver/Driver.h"

#include <gtest/gtest.h>

using namespace mlir::k3;

namespace {

std::string targetError(llvm::StringRef spec) {
  auto t = parseTargets(spec);
  return t ? "" : llvm::toString(t.takeError());
}

TEST(DriverTest, Targets) {
  auto host = parseTargets("host");
  ASSERT_TRUE(bool(host));
  EXPECT_EQ(*host, std::vector<std::string>{"host"});
  auto sms = parseTargets("sm_90,sm_100");
  ASSERT_TRUE(bool(sms));
  EXPECT_EQ(*sms, (std::vector<std::string>{"sm_90", "sm_100"}));
  EXPECT_EQ(targetError("sm_9x"),
            "unknown target 'sm_9x' in --target (expected 'host' or "
            "'sm_<NN>', e.g. sm_90, or a comma list of SM targets)");
  EXPECT_EQ(targetError("sm_90,sm_90"),
            "target 'sm_90' is listed twice in --target");
  EXPECT_EQ(targetError("host,sm_90"),
            "--target=host cannot be combined with GPU targets");
  EXPECT_NE(targetError("cuda"), "");
  EXPECT_NE(targetError("sm_20"), "");
}

} // namespace
