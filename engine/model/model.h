// Model: a loaded model, immutable and shared: its config, weights,
// tokenizer and chat formats (built-in template, Jinja template, tool-call
// format), and the grammars parsed against its vocabulary. Every method is
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
#include "engine/model/model_chat.h"
#include "engine/model/model_config.h"
#include "engine/model/model_source.h"
#include "engine/text/chat_template.h"
#include "engine/text/grammar.h"
#include "engine/text/tokenizer.h"
#include "engine/text/tool_calls.h"

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
    // The built-in chat template (family detection; Mistral's by default).
    const ChatTemplate& chat_template() const { return chat_.builtin(); }
    std::string model_id() const;  // the model folder's name, or synth:PRESET:SEED
    // Non-fatal notes from loading (e.g. "no chat_template: using Mistral's"); empty when none.
    const std::string& load_warning() const { return warning_; }

    // A chat request's prompt, rendered once: by the model's Jinja
    // chat_template when it renders this request (ModelChat::uses_jinja: one
    // span, message -1), else by the built-in renderer (spans per message,
    // replies marked, so a session can carry its own replies' ids). Throws
    // ChatTemplateError for a template error, MoeError as
    // ChatTemplate::render does.
    ChatPrompt chat_prompt(const ChatInput& chat) const { return chat_.prompt(tokenizer_, chat); }
    // Its text (for /apply-template): the Jinja rendering, or the built-in
    // renderer's text with special tokens spelled out.
    std::string chat_text(const ChatInput& chat) const { return chat_.text(chat); }
    // How chats are rendered, for the UI: "jinja (tokenizer_config.json)",
    // "mistral (built-in; jinja (tokenizer_config.json) for tools)", ...
    std::string chat_template_name() const { return chat_.name(); }
    // Whether the model has a Jinja chat template (which alone renders tools).
    bool has_jinja_template() const { return chat_.has_jinja(); }
    // How the template's tool calls look in a reply (engine/text/tool_calls.h;
    // the NONE row without a Jinja template or a known format), and its
    // trigger's control-token id (-1: the trigger is text).
    const ToolCallFormat& tool_call_format() const { return chat_.tool_format(); }
    int tool_call_trigger_token() const { return chat_.tool_trigger_token(); }

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
    std::string warning_;  // before chat_, which fills it
    ModelChat chat_;
    std::shared_ptr<const GrammarVocab> grammar_vocab_;
    mutable std::mutex grammar_mutex_;
    mutable std::vector<std::shared_ptr<const Grammar>> grammars_;  // newest last
};

// A model loaded and ready to share between sessions.
std::shared_ptr<const Model> load_model(const ModelOptions& options);
