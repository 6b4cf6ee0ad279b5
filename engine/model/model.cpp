// Model: loading and the grammar cache (see model.h).
#include "engine/model/model.h"

#include <algorithm>

#include "base/errors.h"
#include "cpu_kernels/thread_pool.h"
#include "engine/model/weights.h"

Model::Model(const ModelOptions& o)
    : source_(model_source_parse(o.model_dir.string())),
      config_(model_source_config(source_)),
      weights_(model_source_shared_weights(source_, config_, o.threads > 0 ? o.threads : physical_core_count(),
                                           o.weights)),
      tokenizer_(model_source_tokenizer(source_, config_)),
      grammar_vocab_(std::make_shared<const GrammarVocab>(tokenizer_)) {}

Model::~Model() = default;

WeightFormat Model::weight_format() const { return ::weight_format(*weights_); }

std::string Model::model_id() const { return model_source_id(source_); }

std::shared_ptr<const Grammar> Model::grammar(std::string_view gbnf, std::string_view source) const {
    {
        std::lock_guard lock(grammar_mutex_);
        auto hit = std::find_if(grammars_.begin(), grammars_.end(), [&](const auto& g) { return g->text() == gbnf; });
        if (hit != grammars_.end()) {
            std::rotate(hit, hit + 1, grammars_.end());  // newest last
            return grammars_.back();
        }
    }
    std::shared_ptr<const Grammar> parsed = Grammar::parse(gbnf, grammar_vocab_, source);  // outside the lock: may throw
    std::lock_guard lock(grammar_mutex_);
    if (grammars_.size() >= GRAMMAR_CACHE_SIZE) grammars_.erase(grammars_.begin());
    grammars_.push_back(parsed);
    return parsed;
}

std::shared_ptr<const Model> load_model(const ModelOptions& options) { return std::make_shared<const Model>(options); }
