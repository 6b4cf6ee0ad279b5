// A model folder's tokenizer as model_source_tokenizer picks it: tokenizer.model
// first, else tokenizer.json with tokenizer_config.json's BOS/EOS, checked
// against config.json's vocab_size.
#include <catch2/catch.hpp>
#include <filesystem>
#include <functional>
#include <string>

#include "base/errors.h"
#include "engine/model/model_config.h"
#include "engine/model/model_source.h"
#include "engine/text/hf_tokenizer.h"
#include "test_support.h"

namespace fs = std::filesystem;

namespace {

std::string message_of(const std::function<void()>& fn) {
    try {
        fn();
    } catch (const MoeError& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("model source: a model folder with only tokenizer.json loads it", "[model_source]") {
    const fs::path src = shared_data_dir() / "tokenizers/mistral-7b-instruct-v0.3";
    const fs::path dir = test_temp_dir("hf_tokenizer_folder");
    fs::copy_file(src / "tokenizer.json", dir / "tokenizer.json", fs::copy_options::overwrite_existing);
    fs::copy_file(src / "tokenizer_config.json", dir / "tokenizer_config.json", fs::copy_options::overwrite_existing);
    ModelConfig config;
    config.vocab_size = 32768;
    const Tokenizer tok = model_source_tokenizer(model_source_parse(dir.string()), config);
    CHECK(tok.source() == (dir / "tokenizer.json").string());
    CHECK(tok.bos_id() == 1);  // tokenizer_config.json's bos_token "<s>"
    CHECK(tok.eos_id() == 2);
    CHECK(tok.encode("Hello world") == hf_tokenizer_load_dir(src).encode("Hello world"));
    // tokenizer.model wins when both are there (the SentencePiece path stays as it was).
    fs::copy_file(src / "tokenizer.model.v3", dir / "tokenizer.model", fs::copy_options::overwrite_existing);
    CHECK(model_source_tokenizer(model_source_parse(dir.string()), config).source() ==
          (dir / "tokenizer.model").string());
    // The vocabulary must match config.json's vocab_size, as for tokenizer.model.
    fs::remove(dir / "tokenizer.model");
    config.vocab_size = 32000;
    CHECK(message_of([&] {
              model_source_tokenizer(model_source_parse(dir.string()), config);
          }).find("exceeds the model's vocab_size 32000") != std::string::npos);
}
