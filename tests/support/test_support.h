// Helpers shared by the tests: where the shared data lives, synthetic models
// generated on demand (once per build tree), temporary folders.
#pragma once
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

// MOE_TEST_SANITIZED: built with AddressSanitizer or ThreadSanitizer (g++
// and clang say so differently). Memory figures are then the sanitizer's
// allocator's (its quarantine keeps freed blocks), and code runs about ten
// times slower.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define MOE_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define MOE_TEST_SANITIZED 1
#endif
#endif

// ../shared/data beside the checkout (MOE_SHARED_DATA overrides).
std::filesystem::path shared_data_dir();

// A synthetic model of this preset and seed, written with synth_model_write
// into <build>/test-models/ the first time it is asked for. Safe when several
// test processes ask at once (written to a temporary name, then renamed).
std::filesystem::path test_model_dir(const std::string& preset, unsigned seed = 1);

// A preset's model folder written into a fresh test_temp_dir and removed
// when this object goes: for presets of hundreds of MB, so that a test run
// holds at most one of them on disk at a time (test_model_dir keeps its
// folders for every later test).
class ScratchModel {
public:
    ScratchModel(const std::string& preset, unsigned seed);
    ~ScratchModel();
    ScratchModel(const ScratchModel&) = delete;
    ScratchModel& operator=(const ScratchModel&) = delete;
    const std::filesystem::path& dir() const { return dir_; }

private:
    std::filesystem::path dir_;
};

// A model folder whose tokenizer is only tokenizer.json, in a fresh
// test_temp_dir(tag): the tiny model's weights and config.json (vocab_size
// 32000, so padded far above the tokenizer), a hand-made byte-level BPE of
// 264 ids (the 256 bytes; merges giving 256 "Ġt", 257 "he", 258 "Ġthe";
// 259 <|endoftext|> (BOS in config.json), 260 <|im_start|>, 261 <|im_end|>
// (EOS), 262 <think>, 263 </think>, the last two not special), and
// tokenizer_config.json with `chat_template`, eos_token <|im_end|>, no
// bos_token.
std::filesystem::path tokenizer_json_model_dir(const std::string& tag, const std::string& chat_template);
// That byte-level BPE tokenizer.json, as text.
std::string byte_level_tokenizer_json_text();

// A fresh empty folder under <build>/test-tmp/, named after `tag`, removed
// when the test process exits (kept when MOE_KEEP_TEST_TMP is set).
std::filesystem::path test_temp_dir(const std::string& tag);

// The built moe-server executable.
std::filesystem::path moe_server_binary();

// The message of the MoeError f() throws; "" when it throws none.
std::string moe_error_of(const std::function<void()>& f);
// Runs fn on a thread of its own and waits for it at most `seconds`: a
// hostile input that would hang fails the test instead of stalling the run
// (the thread is then left to the end of the process). Exceptions of fn are
// swallowed: fn records what it needs.
bool finishes_within(int seconds, std::function<void()> fn);
// Checks (Catch2) that a reader's error is one line, starts with "FILE: "
// and contains `what`.
void check_error_line(const std::string& message, const std::filesystem::path& file, const std::string& what);

// Reads a whole file; throws std::runtime_error when it cannot.
std::string read_file(const std::filesystem::path& path);

struct CommandResult {
    int exit_code = -1;
    std::string out;  // stdout
    std::string err;  // stderr
};

// Environment variables set for a command (name, value), on top of the test's.
using CommandEnv = std::vector<std::pair<std::string, std::string>>;
// Runs a program with arguments (no shell), capturing stdout and stderr.
CommandResult run_command(const std::vector<std::string>& argv, const CommandEnv& env = {});
// Runs the built moe-server with these arguments.
CommandResult moe(std::vector<std::string> args, const CommandEnv& env = {});
