// Sampler and StopMatcher. The sampler applies penalties to the logits, turns
// them into probabilities, truncates (top-k, top-p, min-p) and draws with its
// own seeded mt19937_64, using only integer rng output and a fixed candidate
// order (probability descending, then token id), so a seed gives the same
// tokens on every standard library. sample() must not allocate: every buffer
// is sized in the constructor. Must not know about models or tokenizers.
#include "engine/runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "base/errors.h"
#include "base/utf8.h"

namespace {

constexpr float NEG_INF = -std::numeric_limits<float>::infinity();
constexpr int SORT_CHUNK = 64;  // first partial sort size when looking for the top-p cut

void sampler_check(bool ok, const std::string& what) {
    if (!ok) throw MoeError("sampling parameters: " + what);
}

}  // namespace

Sampler::Sampler(const SamplingParams& params, int vocab_size)
    : params_(params), vocab_size_(vocab_size), rng_(params.seed) {
    sampler_check(vocab_size > 0, "vocab_size must be positive, got " + std::to_string(vocab_size));
    sampler_check(!std::isnan(params.temperature), "temperature is NaN");
    sampler_check(params.top_k >= 0, "top_k must be >= 0, got " + std::to_string(params.top_k));
    sampler_check(params.top_p >= 0.0f && params.top_p <= 1.0f,
                  "top_p must be in [0, 1], got " + std::to_string(params.top_p));
    sampler_check(params.min_p >= 0.0f && params.min_p <= 1.0f,
                  "min_p must be in [0, 1], got " + std::to_string(params.min_p));
    sampler_check(params.repetition_penalty > 0.0f && std::isfinite(params.repetition_penalty),
                  "repetition_penalty must be > 0, got " + std::to_string(params.repetition_penalty));
    sampler_check(std::isfinite(params.presence_penalty), "presence_penalty is not finite");
    sampler_check(std::isfinite(params.frequency_penalty), "frequency_penalty is not finite");
    sampler_check(params.penalty_last_n >= -1,
                  "penalty_last_n must be >= -1, got " + std::to_string(params.penalty_last_n));
    candidates_.resize(vocab_size);
    probs_.resize(vocab_size);
    counts_.assign(vocab_size, 0);
    touched_.reserve(vocab_size);
    logprobs_.resize(vocab_size);
}

// Repetition penalty once per distinct token of the window (llama.cpp / HF),
// then presence (once) and frequency (per occurrence) as OpenAI defines them.
// counts_ is cleared again over the touched tokens only: O(window), not O(vocab).
void Sampler::apply_penalties(float* logits, std::span<const int> history) {
    const float rep = params_.repetition_penalty;
    const float presence = params_.presence_penalty;
    const float frequency = params_.frequency_penalty;
    if (params_.penalty_last_n == 0 || (rep == 1.0f && presence == 0.0f && frequency == 0.0f)) return;
    size_t window =
        params_.penalty_last_n < 0 ? history.size() : std::min(history.size(), size_t(params_.penalty_last_n));
    for (int token : history.subspan(history.size() - window)) {
        if (token < 0 || token >= vocab_size_) {
            for (int t : touched_) counts_[t] = 0;
            touched_.clear();
            throw MoeError("sampler: history token " + std::to_string(token) + " outside vocabulary of " +
                           std::to_string(vocab_size_));
        }
        if (counts_[token]++ == 0) touched_.push_back(token);
    }
    for (int t : touched_) {
        float& l = logits[t];
        if (rep != 1.0f) l = l > 0.0f ? l / rep : l * rep;
        l -= presence + frequency * float(counts_[t]);
        counts_[t] = 0;
    }
    touched_.clear();
}

// Uniform double in [0, 1) from the top 53 bits of one rng output, then a
// walk over the first n_keep candidates in their fixed order.
int Sampler::draw(int n_keep) {
    double total = 0.0;
    for (int i = 0; i < n_keep; ++i) total += probs_[candidates_[i]];
    double u = double(rng_() >> 11) * 0x1.0p-53;
    double target = u * total;
    double cum = 0.0;
    for (int i = 0; i < n_keep; ++i) {
        cum += probs_[candidates_[i]];
        if (target < cum) return candidates_[i];
    }
    // u * total rounded up to total: the last candidate that has any mass.
    int last = n_keep - 1;
    while (last > 0 && probs_[candidates_[last]] == 0.0f) --last;
    return candidates_[last];
}

int Sampler::sample(float* logits, std::span<const int> history) {
    const int n_vocab = vocab_size_;
    apply_penalties(logits, history);

    const bool greedy = params_.temperature <= 0.0f;
    // In double, so even a denormal temperature gives a finite factor.
    const double inv_temp = greedy ? 1.0 : 1.0 / double(params_.temperature);

    // Argmax (ties to the lowest id) and the max of the scaled logits.
    int best = -1;
    for (int i = 0; i < n_vocab; ++i) {
        if (std::isnan(logits[i])) logits[i] = NEG_INF;
        if (logits[i] > NEG_INF && (best < 0 || logits[i] > logits[best])) best = i;
    }
    if (best < 0) throw MoeError("sampler: every logit is -inf or NaN");
    const double max_logit = logits[best];
    // The log-probabilities are worked out only when asked for (ensure_logprobs).
    std::copy_n(logits, n_vocab, logprobs_.begin());
    max_logit_ = max_logit;
    inv_temp_ = inv_temp;
    sampled_ = true;
    logprobs_ready_ = false;
    if (greedy) {
        log_sum_ = std::nan("");
        return best;
    }

    // Softmax over the whole vocabulary; the max is subtracted before scaling
    // so no product overflows.
    double sum = 0.0;
    for (int i = 0; i < n_vocab; ++i) {
        double e = std::exp((double(logits[i]) - max_logit) * inv_temp);
        probs_[i] = float(e);
        sum += e;
    }
    log_sum_ = std::log(sum);
    for (int i = 0; i < n_vocab; ++i) probs_[i] = float(double(probs_[i]) / sum);

    // Candidate order: probability descending, then token id ascending. A
    // total order, so nth_element / sort give the same result everywhere.
    const float* probs = probs_.data();
    auto before = [probs](int a, int b) { return probs[a] > probs[b] || (probs[a] == probs[b] && a < b); };
    std::iota(candidates_.begin(), candidates_.end(), 0);
    auto first = candidates_.begin();
    int n = n_vocab;
    bool sorted = false;
    if (params_.top_k > 0 && params_.top_k < n) {
        n = params_.top_k;
        std::nth_element(first, first + n, candidates_.end(), before);
        std::sort(first, first + n, before);
        sorted = true;
    }

    // Mass of the top-k set: top-p works on the distribution renormalised over it.
    double mass = 0.0;
    for (int i = 0; i < n; ++i) mass += probs[candidates_[i]];

    // min-p keeps a prefix of the sorted order, so filtering first (order
    // preserving) shrinks what top-p has to sort without changing the result.
    if (params_.min_p > 0.0f) {
        const float threshold = params_.min_p * probs[best];
        int kept = 0;
        for (int i = 0; i < n; ++i) {
            if (probs[candidates_[i]] >= threshold) candidates_[kept++] = candidates_[i];
        }
        n = kept;  // >= 1: the best token always passes
    }

    // top-p: the smallest sorted prefix whose renormalised mass reaches top_p.
    // Sorts in growing chunks so a peaked distribution never sorts the vocabulary.
    if (params_.top_p < 1.0f) {
        const double target = double(params_.top_p) * mass;
        double cum = 0.0;
        int scanned = 0;
        int chunk = sorted ? n : std::min(n, SORT_CHUNK);
        for (;;) {
            if (!sorted) std::partial_sort(first, first + chunk, first + n, before);
            for (; scanned < chunk; ++scanned) {
                cum += probs[candidates_[scanned]];
                if (cum >= target) break;
            }
            if (scanned < chunk) {
                n = scanned + 1;
                break;
            }
            if (chunk == n) break;  // min-p (or top-k) set is smaller than the nucleus
            chunk = std::min(n, chunk * 2);
        }
    }
    return draw(n);
}

// logprobs_ holds the last call's logits until this turns them into
// log-softmax(logits * inv_temp), with the same sum (same order) as sampling.
void Sampler::ensure_logprobs() {
    if (logprobs_ready_) return;
    if (std::isnan(log_sum_)) {
        double sum = 0.0;
        for (int i = 0; i < vocab_size_; ++i) sum += std::exp((double(logprobs_[i]) - max_logit_) * inv_temp_);
        log_sum_ = std::log(sum);
    }
    for (int i = 0; i < vocab_size_; ++i)
        logprobs_[i] = float((double(logprobs_[i]) - max_logit_) * inv_temp_ - log_sum_);
    logprobs_ready_ = true;
}

float Sampler::last_logprob(int token) {
    if (!sampled_) throw MoeError("sampler: last_logprob() called before sample()");
    if (token < 0 || token >= vocab_size_) {
        throw MoeError("sampler: logprob token " + std::to_string(token) + " outside vocabulary of " +
                       std::to_string(vocab_size_));
    }
    ensure_logprobs();
    return logprobs_[token];
}

void Sampler::last_top_logprobs(int k, std::vector<std::pair<int, float>>& out) {
    if (!sampled_) throw MoeError("sampler: last_top_logprobs() called before sample()");
    ensure_logprobs();
    out.clear();
    k = std::clamp(k, 0, vocab_size_);
    // candidates_ is scratch between sample() calls.
    std::iota(candidates_.begin(), candidates_.end(), 0);
    const float* logprobs = logprobs_.data();
    std::partial_sort(candidates_.begin(), candidates_.begin() + k, candidates_.end(),
                      [logprobs](int a, int b) { return logprobs[a] > logprobs[b]; });
    for (int i = 0; i < k; i++) out.push_back({candidates_[i], logprobs_[candidates_[i]]});
}

StopMatcher::StopMatcher(std::vector<std::string> stops) {
    for (auto& s : stops) {
        if (!s.empty()) stops_.push_back(std::move(s));
    }
}

StopMatcher::Result StopMatcher::push(std::string_view text) {
    Result result;
    if (stopped_) {
        result.stopped = true;
        return result;
    }
    held_.append(text);

    // A complete stop: emit what precedes the earliest one and end.
    size_t match = std::string::npos;
    for (const auto& stop : stops_) match = std::min(match, held_.find(stop));
    if (match != std::string::npos) {
        result.emit = held_.substr(0, match);
        result.stopped = stopped_ = true;
        held_.clear();
        return result;
    }

    // Hold back the longest tail that is the beginning of some stop string.
    size_t hold = 0;
    for (const auto& stop : stops_) {
        for (size_t len = std::min(stop.size() - 1, held_.size()); len > hold; --len) {
            if (std::string_view(held_).substr(held_.size() - len) == std::string_view(stop).substr(0, len)) {
                hold = len;
                break;
            }
        }
    }
    size_t emit_len = held_.size() - hold;
    emit_len -= utf8_incomplete_tail(std::string_view(held_).substr(0, emit_len));
    result.emit = held_.substr(0, emit_len);
    held_.erase(0, emit_len);
    return result;
}

std::string StopMatcher::flush() {
    std::string out;
    out.swap(held_);
    return out;
}
