// Model: a loaded model, immutable and shared: its config, weights and
// tokenizer, and the grammars parsed against its vocabulary. (How its chats
// are rendered and its tool calls read is chat/model_chat.h's, built from
// source() and tokenizer().) Every method is
// const and safe from any thread; sessions (engine/runtime/session.h) hold
// it by shared_ptr, so several sessions, one after another or at once, run
// one copy (`bench suite`). What changes while requests run (sequence
// state, sampler, statistics, the replies a session generated) is the
// session's. Knows nothing of HTTP or JSON requests.
#pragma once
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "engine/model/cost.h"
#include "engine/model/model_config.h"
#include "engine/model/model_source.h"
#include "engine/text/grammar.h"
#include "engine/text/tokenizer.h"

struct ModelWeights;  // engine/model/weights.h

struct ModelOptions {
    std::filesystem::path model_dir;  // a model folder or GGUF, or synth:PRESET[:SEED] (engine/model/model_source.h)
    int threads = 0;                  // for loading (conversion, synthesis); 0 = physical cores
    // model_dir's weights, already loaded (model_source_shared_weights of the
    // same source): the model reads them and loads nothing. Null: it loads them.
    std::shared_ptr<const ModelWeights> weights = nullptr;
};

class Model {
public:
    // Loads everything; throws MoeError with a one-line reason.
    explicit Model(const ModelOptions& options);
    ~Model();
    Model(const Model&) = delete;
    Model& operator=(const Model&) = delete;

    const ModelConfig& config() const { return config_; }
    const ModelWeights& weights() const { return *weights_; }
    const std::shared_ptr<const ModelWeights>& shared_weights() const { return weights_; }
    // Bytes per weight of the loaded matrices (bf16: 2), for costs and rooflines.
    WeightFormat weight_format() const;
    const Tokenizer& tokenizer() const { return tokenizer_; }
    std::string model_id() const;  // the model folder's name, or synth:PRESET:SEED
    // Where it came from (the --model string, parsed).
    const ModelSource& source() const { return source_; }

    // A GBNF grammar (engine/text/grammar.h) parsed against this model's
    // vocabulary, for GenerateRequest::grammar. The newest
    // GRAMMAR_CACHE_SIZE grammars are kept by their text, with the token
    // masks their generations computed, so a grammar used again (the JSON
    // one, a schema a client repeats) starts warm. source names the grammar
    // in errors. Throws MoeError for a bad grammar.
    std::shared_ptr<const Grammar> grammar(std::string_view gbnf, std::string_view source = "grammar") const;
    static constexpr size_t GRAMMAR_CACHE_SIZE = 16;
    const GrammarVocab& grammar_vocab() const { return *grammar_vocab_; }

private:
    ModelSource source_;
    ModelConfig config_;
    std::shared_ptr<const ModelWeights> weights_;
    Tokenizer tokenizer_;
    std::shared_ptr<const GrammarVocab> grammar_vocab_;
    mutable std::mutex grammar_mutex_;
    mutable std::vector<std::shared_ptr<const Grammar>> grammars_;  // newest last
};

// A model loaded and ready to share between sessions.
std::shared_ptr<const Model> load_model(const ModelOptions& options);
