// Test helpers: shared data lookup and on-demand synthetic models.
#include "test_support.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <future>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "base/errors.h"

namespace fs = std::filesystem;

fs::path shared_data_dir() {
    if (const char* env = std::getenv("MOE_SHARED_DATA")) return env;
    return MOE_SHARED_DATA_DIR;
}

namespace {

// The folders test_temp_dir made, removed when the test process exits (a
// run leaves no temporary files behind: the disk of a CI machine is not
// large). Not by a forked child, whose exit is not the test's end. Kept
// when MOE_KEEP_TEST_TMP is set, to look at after a failure.
class TempDirs {
public:
    void add(const fs::path& dir) {
        std::lock_guard<std::mutex> lock(mutex_);
        dirs_.push_back(dir);
    }
    ~TempDirs() {
        if (getpid() != owner_ || std::getenv("MOE_KEEP_TEST_TMP")) return;
        std::error_code ec;
        for (const fs::path& d : dirs_) fs::remove_all(d, ec);
    }

private:
    std::mutex mutex_;
    std::vector<fs::path> dirs_;
    pid_t owner_ = getpid();
};

}  // namespace

fs::path test_temp_dir(const std::string& tag) {
    static std::atomic<int> counter{0};
    static TempDirs made;
    fs::path dir = fs::path(MOE_TEST_BUILD_DIR) / "test-tmp" /
                   (tag + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(dir);
    fs::create_directories(dir);
    made.add(dir);
    return dir;
}

fs::path moe_server_binary() { return MOE_SERVER_BINARY; }

std::string read_file(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read " + path.string());
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

CommandResult run_command(const std::vector<std::string>& argv, const CommandEnv& env) {
    fs::path dir = test_temp_dir("cmd");
    fs::path out = dir / "stdout", err = dir / "stderr";
    pid_t pid = fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
        if (!freopen(out.c_str(), "w", stdout) || !freopen(err.c_str(), "w", stderr)) _exit(127);
        for (const auto& [name, value] : env)
            if (setenv(name.c_str(), value.c_str(), 1) != 0) _exit(127);
        std::vector<char*> args;
        for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
        args.push_back(nullptr);
        execv(args[0], args.data());
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CommandResult r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = read_file(out);
    r.err = read_file(err);
    fs::remove_all(dir);
    return r;
}

CommandResult moe(std::vector<std::string> args, const CommandEnv& env) {
    args.insert(args.begin(), moe_server_binary().string());
    return run_command(args, env);
}

std::string moe_error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const MoeError& e) {
        return e.what();
    }
    return "";
}

bool finishes_within(int seconds, std::function<void()> fn) {
    auto done = std::make_shared<std::promise<void>>();
    std::future<void> finished = done->get_future();
    std::thread([done, fn = std::move(fn)] {
        try {
            fn();
        } catch (...) {
        }
        done->set_value();
    }).detach();
    return finished.wait_for(std::chrono::seconds(seconds)) == std::future_status::ready;
}

void check_error_line(const std::string& message, const fs::path& file, const std::string& what) {
    INFO(message);
    REQUIRE(!message.empty());
    CHECK(message.find('\n') == std::string::npos);
    CHECK(message.rfind(file.string() + ": ", 0) == 0);
    CHECK(message.find(what) != std::string::npos);
}
