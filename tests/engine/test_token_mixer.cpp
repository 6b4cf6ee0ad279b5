// The token-mixer seam (engine/runtime/token_mixer.h) and the sequence state
// (engine/state/sequence_state.h), shown with a second mixer that exists
// only here: a test double, DecayMixer, with a fixed-size recurrent state
// (per sequence one vector s; each position t: s = 0.5 s + xb_t, out_t = s),
// the shape of state a linear-attention mixer keeps. It replaces the
// attention of some layers of the tiny synthetic model; the forward pass,
// the KV cache of the remaining attention layers and the sequence state's
// prefix and fork rules then have to carry it without knowing what it is.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <vector>

#include "base/errors.h"
#include "cpu_kernels/thread_pool.h"
#include "engine/devices/backend.h"
#include "engine/devices/expert_executor.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"
#include "engine/runtime/forward.h"
#include "engine/state/kv_cache.h"
#include "engine/state/sequence_state.h"
#include "engine/runtime/token_mixer.h"
#include "test_support.h"

namespace {

// DecayMixer's state: one vector of dim floats per sequence, and the
// positions it has taken in. Being recurrent, it can only be cut back to
// its whole length or to nothing, and forked at its length.
class DecayCache final : public SequenceCache {
public:
    DecayCache(int dim) : dim_(dim) {}
    const char* kind() const override { return "decay (test double)"; }
    void prepare_write(int seq, int pos) override {
        if (pos == 0) {
            reset(seq);
            return;
        }
        if (pos < len_[size_t(seq)]) throw MoeError("decay state: cannot go back to position " + std::to_string(pos));
    }
    int reusable_prefix(int seq, int n_pos) const override {
        return n_pos >= len_[size_t(seq)] ? len_[size_t(seq)] : 0;
    }
    void truncate(int seq, int n_pos) override {
        if (n_pos == 0) return reset(seq);
        REQUIRE(n_pos >= len_[size_t(seq)]);
    }
    bool cuts_anywhere() const override { return false; }
    void mark_reuse_point(int) override {}
    void fork(int dst, int src, int n_pos) override {
        REQUIRE(reusable_prefix(src, n_pos) == n_pos);
        if (n_pos == 0) return reset(dst);
        s_[size_t(dst)] = s_[size_t(src)];
        len_[size_t(dst)] = len_[size_t(src)];
    }
    void reserve_seqs(int n) override {
        if (int(s_.size()) >= n) return;
        s_.resize(size_t(n), std::vector<float>(size_t(dim_), 0.0f));
        len_.resize(size_t(n), 0);
    }
    void reserve_growth(int, int) override {}
    size_t bytes_per_position() const override { return 0; }
    size_t bytes_per_sequence() const override { return size_t(dim_) * sizeof(float); }
    size_t bytes() const override { return s_.size() * bytes_per_sequence(); }
    size_t bytes_in_use() const override { return bytes(); }
    StateHome home() const override { return StateHome::HOST; }

    std::vector<float>& s(int seq) { return s_[size_t(seq)]; }
    int& len(int seq) { return len_[size_t(seq)]; }

private:
    void reset(int seq) {
        std::fill(s_[size_t(seq)].begin(), s_[size_t(seq)].end(), 0.0f);
        len_[size_t(seq)] = 0;
    }
    int dim_;
    std::vector<std::vector<float>> s_;
    std::vector<int> len_;
};

// On the CPU backend, whose buffers are host memory.
class DecayMixer final : public TokenMixer {
public:
    DecayMixer(DecayCache& cache, int dim) : cache_(cache), dim_(dim) {}
    const char* name() const override { return "decay (test double)"; }
    void run(int, const Batch& batch, float* out, const float* xb) override {
        for (int i = 0; i < batch.size(); i++) {
            const int seq = batch.seq_ids[size_t(i)];
            REQUIRE(batch.positions[size_t(i)] == cache_.len(seq));  // one position after another
            std::vector<float>& s = cache_.s(seq);
            for (int d = 0; d < dim_; d++) {
                s[size_t(d)] = 0.5f * s[size_t(d)] + xb[size_t(i) * dim_ + d];
                out[size_t(i) * dim_ + d] = s[size_t(d)];
            }
            cache_.len(seq)++;
        }
    }

private:
    DecayCache& cache_;
    int dim_;
};

// The tiny model with DecayMixer in its odd layers and attention in the
// others, n_seqs sequences of CTX positions.
struct Mixed {
    static constexpr int CTX = 64, MAX_BATCH = 32;
    ModelConfig config;
    ModelWeights weights;
    ThreadPool pool{2};
    std::unique_ptr<Backend> backend;
    std::unique_ptr<SequenceState> state;
    DecayCache* decay = nullptr;
    CpuExpertExecutor executor;
    std::unique_ptr<ForwardPass> forward;

    explicit Mixed(bool with_decay, int n_seqs = 3)
        : config(model_config_load(test_model_dir("tiny"))),
          weights(weights_load(config, test_model_dir("tiny"))),
          backend(make_cpu_backend(config, weights, pool, CTX, MAX_BATCH * std::max(1, config.n_experts_active))),
          state(make_sequence_state(config, n_seqs, CTX, backend->state_memory())),
          executor(config, weights, pool, MAX_BATCH) {
        LayerMixers mixers = make_layer_mixers(config, *backend, MAX_BATCH);
        if (with_decay) {
            decay = static_cast<DecayCache*>(&state->add(std::make_unique<DecayCache>(config.dim)));
            auto mixer = std::make_shared<DecayMixer>(*decay, config.dim);
            for (int l = 1; l < config.n_layers; l += 2) mixers[size_t(l)] = mixer;
        }
        forward = std::make_unique<ForwardPass>(config, *backend, *state, executor, MAX_BATCH, MAX_BATCH,
                                                std::move(mixers));
    }

    // Logits of entries [from, to) of tokens in sequence seq, one batch.
    std::vector<float> run(const std::vector<int>& tokens, int from, int to, int seq) {
        Batch batch;
        for (int i = from; i < to; i++) batch.add(tokens[size_t(i)], i, seq, true);
        const float* l = forward->run(batch);
        return std::vector<float>(l, l + size_t(to - from) * size_t(config.vocab_size));
    }
};

std::vector<int> some_tokens(int n) {
    std::vector<int> t{1};
    for (int i = 1; i < n; i++) t.push_back(100 + (i * 7919) % 900);
    return t;
}

double max_diff(const float* a, const float* b, int n) {
    double d = 0;
    for (int i = 0; i < n; i++) d = std::max(d, double(std::fabs(a[i] - b[i])));
    return d;
}

double max_abs(const std::vector<float>& a) {
    double m = 0;
    for (float x : a) m = std::max(m, double(std::fabs(x)));
    return m;
}

}  // namespace

TEST_CASE("a second token mixer with a recurrent state plugs into the forward pass", "[mixer]") {
    Mixed mixed(true);
    Mixed plain(false);
    REQUIRE(mixed.config.n_layers >= 2);
    const int vocab = mixed.config.vocab_size;
    const std::vector<int> tokens = some_tokens(20);
    const int n = int(tokens.size());

    // The whole prompt in one batch, in sequence 0.
    const std::vector<float> one = mixed.run(tokens, 0, n, 0);
    REQUIRE(mixed.decay->len(0) == n);
    // The mixer is used: the logits are not attention's.
    const std::vector<float> attention_only = plain.run(tokens, 0, n, 0);
    REQUIRE(max_diff(one.data(), attention_only.data(), n * vocab) > 1e-2 * (1 + max_abs(attention_only)));

    // The same prompt in sequence 1 as a prefill of 7 and then one position
    // at a time: the state carried between passes gives every position the
    // logits of the single pass.
    const double tol = 1e-3 * (1 + max_abs(one));
    std::vector<float> part = mixed.run(tokens, 0, 7, 1);
    REQUIRE(max_diff(part.data(), one.data(), 7 * vocab) <= tol);
    for (int i = 7; i < n; i++) {
        INFO("position " << i);
        part = mixed.run(tokens, i, i + 1, 1);
        REQUIRE(max_diff(part.data(), one.data() + size_t(i) * vocab, vocab) <= tol);
    }
    REQUIRE(mixed.decay->len(1) == n);
    // The same state as the single pass, up to the batch's rounding.
    REQUIRE(max_diff(mixed.decay->s(1).data(), mixed.decay->s(0).data(), mixed.config.dim) <=
            1e-4 * (1 + max_abs(mixed.decay->s(0))));
}

TEST_CASE("the sequence state applies prefix reuse and forks to every cache", "[mixer]") {
    Mixed mixed(true);
    SequenceState& state = *mixed.state;
    REQUIRE(state.caches().size() == 2);
    REQUIRE(state.kv() != nullptr);
    REQUIRE(state.kv()->ctx() == Mixed::CTX);
    const int vocab = mixed.config.vocab_size;
    const std::vector<int> tokens = some_tokens(12);
    mixed.run(tokens, 0, 10, 0);

    // The KV cache can keep any prefix; the recurrent state only all or nothing.
    REQUIRE(state.kv()->reusable_prefix(0, 7) == 7);
    REQUIRE(state.reusable_prefix(0, 7) == 0);
    REQUIRE(state.reusable_prefix(0, 10) == 10);
    REQUIRE(state.reusable_prefix(0, 12) == 10);

    // Memory: per position only the KV cache; per sequence only the decay state.
    const ModelConfig& c = mixed.config;
    const size_t kv_position = size_t(2) * c.n_attention_layers() * c.n_kv_heads * c.head_dim * sizeof(float);
    REQUIRE(state.kv()->bytes_per_position() == kv_position);
    REQUIRE(mixed.decay->bytes_per_sequence() == size_t(c.dim) * sizeof(float));
    REQUIRE(state.bytes() == state.kv()->bytes() + mixed.decay->bytes());
    REQUIRE(state.bytes_in_use() == size_t(1) * KV_BLOCK * kv_position + mixed.decay->bytes());
    REQUIRE(std::string(state_home_name(state.kv()->home())) == "host");

    // A fork continues from the whole state: sequences 1 and 2 forked from 0,
    // then all three decode the same tokens in one batch, equal logits.
    state.fork(1, 0, 10);
    state.fork(2, 0, 10);
    REQUIRE(mixed.decay->len(2) == 10);
    Batch batch;
    for (int seq = 0; seq < 3; seq++) batch.add(tokens[10], 10, seq, true);
    const float* l = mixed.forward->run(batch);
    std::vector<float> three(l, l + size_t(3) * vocab);
    // (Equal up to rounding: a matmul may block rows of a batch differently.)
    const double tol = 1e-4 * (1 + max_abs(three));
    REQUIRE(max_diff(three.data(), three.data() + vocab, vocab) <= tol);
    REQUIRE(max_diff(three.data(), three.data() + 2 * vocab, vocab) <= tol);

    // The same next token as a fresh prefill of 11 tokens in sequence 1.
    state.clear(1);
    REQUIRE(state.reusable_prefix(1, 5) == 0);
    const std::vector<float> fresh = mixed.run(tokens, 0, 11, 1);
    REQUIRE(max_diff(fresh.data() + size_t(10) * vocab, three.data(), vocab) <= 1e-3 * (1 + max_abs(fresh)));

    // Going back inside a recurrent state is refused, not silently wrong.
    REQUIRE_THROWS_AS(mixed.run(tokens, 5, 6, 1), MoeError);
}
