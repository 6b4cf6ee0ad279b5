// The README's first-run path: `moe-server serve` with no --model writes and
// serves the demo model (with its banner), and the curl example from
// server/README.md, run byte for byte through bash, streams a reply. curl is
// pointed at the test's port by a curlrc (connect-to), so the command itself
// stays exactly the README's.
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>

#include "server_fixture.h"
#include "support/test_support.h"

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

std::string readme_curl_example() {
    std::string readme = read_file(fs::path(MOE_SOURCE_DIR) / "server" / "README.md");
    const std::string marker = "<!-- curl-example";
    size_t m = readme.find(marker);
    REQUIRE(m != std::string::npos);
    size_t open = readme.find("```sh\n", m);
    REQUIRE(open != std::string::npos);
    open += 6;
    size_t close = readme.find("```", open);
    REQUIRE(close != std::string::npos);
    return readme.substr(open, close - open);
}

}  // namespace

TEST_CASE("README: serve with the demo model, then the curl example streams tokens", "[server]") {
    std::string example = readme_curl_example();
    REQUIRE(example.find("curl") == 0);
    REQUIRE(example.find("localhost:8080") != std::string::npos);

    // The demo model is written once per build tree (like the test models).
    fs::path cache = fs::path(MOE_TEST_BUILD_DIR) / "test-cache";
    ServerProcess server({}, {}, {{"XDG_CACHE_HOME", cache.string()}});
    std::string log = server.log();
    CHECK(log.find("DEMO MODEL") != std::string::npos);
    CHECK(log.find("--model") != std::string::npos);
    CHECK(fs::exists(cache / "moe-server" / "demo-small" / "config.json"));
    auto c = server.client();
    CHECK(get_json(c, "/v1/models").body["data"][0]["id"] == "demo-small");

    fs::path dir = test_temp_dir("readme-curl");
    {
        std::ofstream rc(dir / ".curlrc");
        rc << "connect-to = \"localhost:8080:127.0.0.1:" << server.port() << "\"\n";
    }
    std::ofstream(dir / "example.sh") << example;
    std::string cmd = "cd " + dir.string() + " && CURL_HOME=" + dir.string() + " bash example.sh > out.txt 2> err.txt";
    int status = std::system(cmd.c_str());
    std::string out = read_file(dir / "out.txt");
    INFO("stdout: " << out << "\nstderr: " << read_file(dir / "err.txt"));
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);

    // data: frames, a role chunk, content deltas, a finish chunk, [DONE].
    std::vector<json> chunks;
    bool done = false;
    size_t pos = 0;
    while (pos < out.size()) {
        size_t end = out.find("\n\n", pos);
        REQUIRE(end != std::string::npos);
        std::string frame = out.substr(pos, end - pos);
        REQUIRE(frame.rfind("data: ", 0) == 0);
        if (frame == "data: [DONE]")
            done = true;
        else
            chunks.push_back(json::parse(frame.substr(6)));
        pos = end + 2;
    }
    CHECK(done);
    REQUIRE(chunks.size() >= 3);
    CHECK(chunks.front()["choices"][0]["delta"]["role"] == "assistant");
    int content_chunks = 0;
    for (const json& ch : chunks)
        if (ch["choices"][0]["delta"].contains("content") &&
            !ch["choices"][0]["delta"]["content"].get<std::string>().empty())
            content_chunks++;
    CHECK(content_chunks >= 1);
    CHECK_FALSE(chunks.back()["choices"][0]["finish_reason"].is_null());
}
