// Label "client": the official openai npm SDK drives a real moe-server (tiny
// synthetic model with Qwen3's chat template, API key set) through tests/client/openai_sdk.test.mjs.
// The SDK comes from scripts/setup_test_tools.sh (npm, into the build tree);
// when it is missing this test fails and says how to install it.
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>

#include "gpu_kernels/device.h"

#include "server_fixture.h"
#include "support/test_support.h"

namespace fs = std::filesystem;

namespace {

// Runs openai_sdk.test.mjs against a server started with extra_args and
// checks that every check passed.
void run_sdk_checks(const std::vector<std::string>& extra_args, const std::string& tag, const std::string& must_log) {
    fs::path node_modules = MOE_NODE_MODULES;
    INFO("node_modules: " << node_modules);
    REQUIRE(std::string(MOE_NODE_EXECUTABLE) != "");
    INFO("the openai package must be installed there: run scripts/setup_test_tools.sh");
    REQUIRE(fs::exists(node_modules / "openai" / "package.json"));

    const std::string key = "client-test-key";
    std::vector<std::string> args{"--api-key", key};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    // The tiny model with a tool-calling template (Qwen3's, the Hermes format).
    const fs::path model = tokenizer_json_model_dir(
        tag + "-model", read_file(shared_data_dir() / "chat_templates" / "Qwen-Qwen3-0.6B.jinja"));
    ServerProcess server(model, args);
    INFO("server log:\n" << server.log());
    REQUIRE(server.log().find(must_log) != std::string::npos);
    fs::path dir = test_temp_dir(tag);
    std::string cmd = "MOE_BASE_URL=http://127.0.0.1:" + std::to_string(server.port()) + "/v1" + " MOE_API_KEY=" + key +
                      " MOE_MODEL_ID=" + model.filename().string() +
                      " MOE_NODE_MODULES=" + node_modules.string() + " " + MOE_NODE_EXECUTABLE + " " +
                      (fs::path(MOE_SOURCE_DIR) / "tests" / "client" / "openai_sdk.test.mjs").string() + " > " +
                      (dir / "out.txt").string() + " 2>&1";
    int status = std::system(cmd.c_str());
    std::string out = read_file(dir / "out.txt");
    INFO("node output:\n" << out << "\nserver log:\n" << server.log());
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    CHECK(out.find("not ok") == std::string::npos);
    CHECK(out.find("8/8 checks passed") != std::string::npos);
}

}  // namespace

TEST_CASE("openai npm SDK: models, chat, streaming, completions, errors", "[client]") {
    run_sdk_checks({}, "openai-sdk", "ready");
}

// The same checks against a server whose model runs on a CUDA device
// (--gpu-memory): labelled gpu, and skipped where no device exists.
TEST_CASE("openai npm SDK against a server on the GPU (--gpu-memory)", "[gpu]") {
    if (gpu_devices().empty()) {
        std::printf("gpu: skipped: no CUDA device (no driver, or none visible)\n");
        return;
    }
    if (std::string(MOE_NODE_EXECUTABLE).empty() || !fs::exists(fs::path(MOE_NODE_MODULES) / "openai" / "package.json")) {
        // A GPU machine without network (scripts/gpu_check.sh) has no Node.js
        // and no npm packages; elsewhere scripts/setup_test_tools.sh installs them.
        std::printf("gpu: skipped: needs Node.js and the openai npm package (scripts/setup_test_tools.sh)\n");
        return;
    }
    run_sdk_checks({"--gpu-memory", "2"}, "openai-sdk-gpu", "(cuda:0)");
}
