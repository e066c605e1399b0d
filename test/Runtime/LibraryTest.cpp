//===- LibraryTest.cpp - opening libraries, manifest validation -----------===//

#include "TestUtil.h"

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdlib>

using namespace k3rt_test;
using json = nlohmann::json;

namespace {

TEST(LibraryTest, OpensTheFakeLibraryAndReportsItsManifest) {
  Library lib = openFake();
  ASSERT_TRUE(lib);
  k3rt_model_info info{};
  info.struct_size = sizeof(info);
  ASSERT_OK(k3rt_library_get_info(lib.get(), &info));
  EXPECT_STREQ(info.name, "fake-tiny");
  EXPECT_EQ(info.vocab_size, FAKE_VOCAB);
  EXPECT_EQ(info.hidden_size, 4);
  EXPECT_EQ(info.num_layers, 4);
  EXPECT_EQ(info.max_context, FAKE_MAX_CONTEXT);
  EXPECT_EQ(info.num_abi_args, 29);
  // embed, q_conv1d, the unused norm, 3 + 3 experts, lm_head.
  EXPECT_EQ(info.num_tensors, 10);
  EXPECT_EQ(info.page_size, FAKE_PAGE);
  // Per KDA layer: recurrent 32 B + three 24 B tails, each in a 64 B line.
  EXPECT_EQ(info.slot_bytes, 2u * 4u * 64u);
  // Two MLA layers x 4 tokens x 6 bf16.
  EXPECT_EQ(info.page_bytes, 2u * 4u * 6u * 2u);
  EXPECT_EQ(json::parse(info.manifest_json, nullptr, false),
            json::parse(fakeManifest(), nullptr, false));
}

TEST(LibraryTest, GetInfoChecksStructSize) {
  Library lib = openFake();
  k3rt_model_info info{};
  EXPECT_ERROR(k3rt_library_get_info(lib.get(), &info), K3RT_INVALID_ARGUMENT,
               "struct_size");
}

TEST(LibraryTest, GetInfoFillsOnlyWhatAnOlderStructHas) {
  Library lib = openFake();
  k3rt_model_info info{};
  info.struct_size = offsetof(k3rt_model_info, hidden_size);
  info.hidden_size = -7;
  ASSERT_OK(k3rt_library_get_info(lib.get(), &info));
  EXPECT_EQ(info.struct_size, offsetof(k3rt_model_info, hidden_size));
  EXPECT_EQ(info.vocab_size, FAKE_VOCAB);
  EXPECT_EQ(info.hidden_size, -7);
}

TEST(LibraryTest, MissingFile) {
  k3rt_library *lib = nullptr;
  EXPECT_ERROR(k3rt_library_open("/nonexistent/lib.so", &lib), K3RT_NOT_FOUND,
               "/nonexistent/lib.so");
}

TEST(LibraryTest, NoLinkedLibrary) {
  // The test program links no compiled model.
  k3rt_library *lib = nullptr;
  EXPECT_ERROR(k3rt_library_open(nullptr, &lib), K3RT_INVALID_ARGUMENT,
               "(linked library)", "not a k3c library");
  EXPECT_EQ(lib, nullptr);
}

TEST(LibraryTest, NotASharedLibrary) {
  TempDir dir;
  writeFile(dir.file("libtext.so"), "not an ELF file\n");
  k3rt_library *lib = nullptr;
  EXPECT_ERROR(k3rt_library_open(dir.file("libtext.so").c_str(), &lib),
               K3RT_INVALID_ARGUMENT, "cannot load");
  EXPECT_EQ(lib, nullptr);
}

TEST(LibraryTest, MissingEntryPoint) {
  k3rt_library *lib = nullptr;
  EXPECT_ERROR(k3rt_library_open(K3RT_FAKE_NO_FORWARD, &lib),
               K3RT_INVALID_ARGUMENT, "not a k3c library", "k3_forward");
}

TEST(LibraryTest, AbiVersionMismatch) {
  setenv("K3FAKE_ABI_VERSION", "1", 1);
  k3rt_library *lib = nullptr;
  k3rt_status *s = k3rt_library_open(K3RT_FAKE_MODEL, &lib);
  unsetenv("K3FAKE_ABI_VERSION");
  EXPECT_ERROR(s, K3RT_FAILED_PRECONDITION, "ABI version 1",
               "implements version 2");
}

//===----------------------------------------------------------------------===//
// Manifest validation: each case breaks one rule.
//===----------------------------------------------------------------------===//

struct ManifestCase {
  const char *name;
  void (*mutate)(json &);
  k3rt_code code;
  const char *expected;
};

json &arg(json &m, size_t i) { return m["abi"]["args"][i]; }

const ManifestCase manifestCases[] = {
    {"Format", [](json &m) { m["format"] = "other"; }, K3RT_INVALID_ARGUMENT,
     "manifest format"},
    {"Version", [](json &m) { m["version"] = 2; }, K3RT_FAILED_PRECONDITION,
     "manifest version 2"},
    {"AbiVersion", [](json &m) { m["abi"]["version"] = 3; },
     K3RT_FAILED_PRECONDITION, "abi.version is 3"},
    {"Entry", [](json &m) { m["abi"]["entry"] = "main"; },
     K3RT_INVALID_ARGUMENT, "abi.entry"},
    {"NoVocab", [](json &m) { m["model"].erase("vocab_size"); },
     K3RT_INVALID_ARGUMENT, "model.vocab_size: missing"},
    {"VocabNotInteger", [](json &m) { m["model"]["vocab_size"] = "32"; },
     K3RT_INVALID_ARGUMENT, "model.vocab_size: not an integer"},
    {"ZeroContext", [](json &m) { m["model"]["max_context"] = 0; },
     K3RT_INVALID_ARGUMENT, "model.max_context"},
    {"LogitsWidth",
     [](json &m) {
       arg(m, 28)["shape"] = {-1, 31};
     },
     K3RT_INVALID_ARGUMENT, "logits must be [-1, 32] f32"},
    {"TokensDtype", [](json &m) { arg(m, 0)["dtype"] = "i64"; },
     K3RT_INVALID_ARGUMENT, "tokens must be [-1] i32"},
    {"UnknownDtype", [](json &m) { arg(m, 1)["dtype"] = "q4"; },
     K3RT_INVALID_ARGUMENT, "unknown dtype 'q4'"},
    {"WeightNotInTable",
     [](json &m) { arg(m, 1)["name"] = "language_model.model.nope"; },
     K3RT_INVALID_ARGUMENT, "no tensor 'language_model.model.nope'"},
    {"WeightShapeDiffers",
     [](json &m) {
       arg(m, 1)["shape"] = {4, 32};
     },
     K3RT_INVALID_ARGUMENT, "differs from weights.tensors"},
    {"StackWithoutExpertDim",
     [](json &m) {
       arg(m, 3)["shape"] = {4, 16};
     },
     K3RT_INVALID_ARGUMENT, "differs from weights.tensors"},
    {"BadPart", [](json &m) { arg(m, 3)["part"] = "blocks"; },
     K3RT_INVALID_ARGUMENT, "expected 'packed' or 'scale'"},
    {"UnusedWeightPassed",
     [](json &m) {
       m["abi"]["args"].insert(m["abi"]["args"].begin() + 1,
                               json{{"role", "weight"},
                                    {"name", "language_model.model.layers.0."
                                             "self_attention_res_norm.weight"},
                                    {"shape", {4}},
                                    {"dtype", "bf16"}});
     },
     K3RT_INVALID_ARGUMENT, "marked unused"},
    {"PlaceholderWithoutExperts",
     [](json &m) { m["weights"]["tensors"][3].erase("experts"); },
     K3RT_INVALID_ARGUMENT, "exactly one '{e}'"},
    {"UnknownGroup", [](json &m) { arg(m, 6)["name"] = "kda.other"; },
     K3RT_INVALID_ARGUMENT, "no state group 'kda.other'"},
    {"StateLayerOutsideGroup", [](json &m) { arg(m, 6)["layer"] = 1; },
     K3RT_INVALID_ARGUMENT, "not one of the group's layers"},
    {"StateShapeDiffers",
     [](json &m) {
       arg(m, 8)["shape"] = {-1, 3, 4};
     },
     K3RT_INVALID_ARGUMENT, "differs from the group's [-1, 4, 3]"},
    {"StateUnknownPart", [](json &m) { arg(m, 6)["part"] = "tail"; },
     K3RT_INVALID_ARGUMENT, "'tail', expected 'pool' or 'slots'"},
    {"SlotsDtype", [](json &m) { arg(m, 7)["dtype"] = "i64"; },
     K3RT_INVALID_ARGUMENT, "slots must be [-1] i32"},
    {"MissingSlots",
     [](json &m) { m["abi"]["args"].erase(m["abi"]["args"].begin() + 7); },
     K3RT_INVALID_ARGUMENT, "kda.recurrent layer 0 has no 'slots'"},
    {"MissingPageTable",
     [](json &m) { m["abi"]["args"].erase(m["abi"]["args"].begin() + 15); },
     K3RT_INVALID_ARGUMENT, "mla.latent layer 1 has no 'page_table'"},
    {"PageTableRank", [](json &m) { arg(m, 15)["shape"] = {-1}; },
     K3RT_INVALID_ARGUMENT, "a page table must be [-1, -1] i32"},
    {"MissingKdaLayer",
     [](json &m) { m["abi"]["args"].erase(m["abi"]["args"].begin() + 17); },
     K3RT_INVALID_ARGUMENT, "kda.recurrent layer 2 has no 'pool'"},
    {"PoolPageSize",
     [](json &m) {
       arg(m, 14)["shape"] = {-1, 8, 6};
     },
     K3RT_INVALID_ARGUMENT, "a pool must be [-1, 4, 6] bf16"},
    {"StatePassedTwice", [](json &m) { arg(m, 17)["layer"] = 0; },
     K3RT_INVALID_ARGUMENT, "passed twice"},
    {"UnknownRole", [](json &m) { arg(m, 5)["role"] = "bias"; },
     K3RT_INVALID_ARGUMENT, "unknown role 'bias'"},
    {"TwoPagedGroups",
     [](json &m) {
       m["state"]["groups"].push_back(json{{"kind", "mla.other"},
                                           {"layers", json::array()},
                                           {"shape", {6}},
                                           {"dtype", "bf16"},
                                           {"page_size", 4}});
     },
     K3RT_INVALID_ARGUMENT, "more than one paged state group"},
    {"BadAlignment", [](json &m) { arg(m, 1)["alignment"] = 24; },
     K3RT_INVALID_ARGUMENT, "must be a power of two"},
    {"NoLogits",
     [](json &m) { m["abi"]["args"].erase(m["abi"]["args"].begin() + 28); },
     K3RT_INVALID_ARGUMENT, "exactly one tokens and one logits"},
    // What the manifest records about targets, layouts and the config.
    {"NoTargets", [](json &m) { m.erase("targets"); }, K3RT_INVALID_ARGUMENT,
     "manifest targets: missing"},
    // The k3c that compiled the library (RUNTIME_NOTES §3 item 7).
    {"NoCompiler", [](json &m) { m.erase("compiler"); },
     K3RT_FAILED_PRECONDITION,
     "the manifest has no 'compiler' (a library from a k3c before 0.5)"},
    {"OtherCompiler", [](json &m) { m["compiler"]["name"] = "tvm"; },
     K3RT_INVALID_ARGUMENT, "manifest compiler.name: 'tvm', expected 'k3c'"},
    {"CompilerVersionNotSemver",
     [](json &m) { m["compiler"]["version"] = "latest"; },
     K3RT_INVALID_ARGUMENT,
     "manifest compiler.version: 'latest' is not MAJOR.MINOR.PATCH"},
    {"OlderCompiler", [](json &m) { m["compiler"]["version"] = "0.4.9"; },
     K3RT_FAILED_PRECONDITION,
     "the library was compiled by k3c 0.4.9; this runtime opens libraries "
     "of k3c 0.5.x"},
    {"NewerCompiler", [](json &m) { m["compiler"]["version"] = "1.0.0"; },
     K3RT_FAILED_PRECONDITION, "compiled by k3c 1.0.0"},
    // Expert parallelism (RUNTIME_NOTES §3 items 5 and 25).
    {"ExpertParallel", [](json &m) { m["moe"]["ep_degree"] = 8; },
     K3RT_FAILED_PRECONDITION,
     "compiled for expert parallelism over 8 ranks (moe.ep_degree); this "
     "runtime runs every expert in one process"},
    {"ExpertParallelZero", [](json &m) { m["moe"]["ep_degree"] = 0; },
     K3RT_INVALID_ARGUMENT, "moe.ep_degree: 0 is below 1"},
    {"UnknownTarget", [](json &m) { m["targets"] = {"tpu_v5"}; },
     K3RT_FAILED_PRECONDITION,
     "compiled for target 'tpu_v5' (targets [tpu_v5]); this runtime runs "
     "'host' and NVIDIA 'sm_NN' code"},
    {"HostAndGpuTargets", [](json &m) { m["targets"] = {"host", "sm_90"}; },
     K3RT_INVALID_ARGUMENT, "manifest targets: mixes host and GPU targets"},
    {"UnknownKdaLayout",
     [](json &m) { m["state"]["groups"][0]["layout"] = "heads_last"; },
     K3RT_FAILED_PRECONDITION,
     "state layout 'heads_last' is not one this runtime implements "
     "(value_first, key_first)"},
    {"KdaLayoutMixUp",
     [](json &m) { m["state"]["groups"][0]["layout"] = "key_first"; },
     K3RT_FAILED_PRECONDITION,
     "layout 'key_first' means dims [heads, key, value], the manifest says "
     "[heads, value, key] (a state layout mix-up)"},
    {"ConvLayout",
     [](json &m) { m["state"]["groups"][2]["layout"] = "taps_major"; },
     K3RT_FAILED_PRECONDITION, "(kda.conv_k): state layout 'taps_major'"},
    {"ConfigHashNotHex",
     [](json &m) { m["model"]["config_sha256"] = "0"; },
     K3RT_INVALID_ARGUMENT, "model.config_sha256: '0' is not 64"},
};

class ManifestTest : public ::testing::TestWithParam<ManifestCase> {};

TEST_P(ManifestTest, IsRejected) {
  json m = json::parse(fakeManifest(), nullptr, false);
  ASSERT_FALSE(m.is_discarded());
  GetParam().mutate(m);
  EXPECT_ERROR(openFakeWithManifest(m.dump()), GetParam().code,
               GetParam().expected);
}

INSTANTIATE_TEST_SUITE_P(
    Runtime, ManifestTest, ::testing::ValuesIn(manifestCases),
    [](const ::testing::TestParamInfo<ManifestCase> &info) {
      return std::string(info.param.name);
    });

// A GPU library on a machine without a driver (K3RT_CUDA_DRIVER names one
// that does not exist, so that the test means the same on a GPU machine).
TEST(ManifestTest, GpuTargetsWithoutADriver) {
  ::setenv("K3RT_CUDA_DRIVER", "/nonexistent/libcuda.so.1", 1);
  json m = json::parse(fakeManifest(), nullptr, false);
  m["targets"] = {"sm_90", "sm_100"};
  EXPECT_ERROR(openFakeWithManifest(m.dump()), K3RT_FAILED_PRECONDITION,
               "compiled for sm_90,sm_100: no NVIDIA driver: cannot load "
               "/nonexistent/libcuda.so.1");
}

TEST(ManifestTest, NotJson) {
  EXPECT_ERROR(openFakeWithManifest("{\"format\": "), K3RT_INVALID_ARGUMENT,
               "not valid JSON");
  EXPECT_ERROR(openFakeWithManifest("[1, 2]"), K3RT_INVALID_ARGUMENT,
               "not a JSON object");
}

TEST(ManifestTest, TheBuiltInManifestIsAccepted) {
  EXPECT_OK(openFakeWithManifest(fakeManifest()));
}

} // namespace
