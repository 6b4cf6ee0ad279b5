// Beam search decode loop (see beam_search.h).
//
// Each step ranks the candidates (beam, token) of every live beam by their
// cumulative log-probability and keeps the best w. A kept candidate that
// ends (EOS, a stop string, max_tokens or the context) becomes a finished
// hypothesis scored logprob / length^alpha; the others are the next step's
// live beams, so the width refills from the survivors' children. The w best
// finished hypotheses are kept. Two rules make the result dependable:
//  * the greedy path is protected: the argmax child of the beam that
//    followed the argmax all along is always kept (it takes the w-th place
//    when it ranks lower), so the best hypothesis never scores below greedy
//    decoding, and width 1 is greedy decoding exactly;
//  * early stopping is exact: once w hypotheses are finished, a live beam
//    whose best reachable score (logprob / max_length^alpha: log-probs only
//    fall, and a longer length divides a negative sum by more) does not beat
//    the worst of them is dropped; the search ends when no beam is live.
// Ties rank by beam, then token id: runs are deterministic.
#include "engine/runtime/beam_search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>

#include "base/errors.h"
#include "engine/runtime/sampler.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr double NEG_INF = -std::numeric_limits<double>::infinity();

// NaN logits rank as -inf.
double logit_key(float x) {
    return std::isnan(x) ? NEG_INF : double(x);
}

struct Beam {
    std::vector<int> tokens;  // generated so far
    double logprob = 0;
    int seq = -1;         // KV-cache sequence
    bool greedy = false;  // every token so far was its parent's argmax
    Detokenizer detok;
    StopMatcher stops;
    std::string text;  // emitted so far
};

struct Candidate {
    int beam;
    int token;
    double logprob;  // the beam's plus this token's
};

class BeamDecoder {
public:
    BeamDecoder(BeamModel& model, const BeamRequest& request, int prompt_seq, BeamResult& result)
        : m_(model),
          r_(request),
          result_(result),
          prompt_seq_(prompt_seq),
          width_(request.beam_width),
          n_prompt_(int(request.prompt.size())),
          vocab_(model.config.vocab_size),
          n_text_(std::min(vocab_, model.tokenizer.vocab_size())),
          max_length_(std::min(request.max_tokens, model.state.ctx() - n_prompt_)) {
        if (r_.allowed_tokens.empty()) {
            allowed_.resize(n_text_);
            std::iota(allowed_.begin(), allowed_.end(), 0);
        } else {
            allowed_ = r_.allowed_tokens;
            std::sort(allowed_.begin(), allowed_.end());
            allowed_.erase(std::unique(allowed_.begin(), allowed_.end()), allowed_.end());
        }
        order_.resize(allowed_.size() * size_t(model.pool.size()));
        top_.resize(size_t(width_) * width_);
        n_top_.resize(width_);
        lse_.resize(width_);
        for (int s = width_ - 1; s >= 0; s--) free_seqs_.push_back(model.first_seq + s);
        batch_.reserve(width_);
    }

    void run(const float* logits, const std::function<bool(const BeamStep&)>& on_step) {
        const auto t0 = Clock::now();
        const bool strip = !reply_keeps_leading_space(m_.tokenizer, r_.prompt, r_.continues_prompt);
        Beam root{{}, 0.0, prompt_seq_, true, Detokenizer(m_.tokenizer, strip), StopMatcher(r_.stop), ""};
        live_.push_back(std::move(root));
        bool cancelled = false;
        for (int step = 0;; step++) {
            std::vector<Beam> next = select(logits);
            prune(next);
            assign_sequences(next);
            live_ = std::move(next);
            if (live_.empty()) break;
            logits = forward();
            BeamStep info{step, int(live_.size()), int(finished_.size()), int(live_[0].tokens.size()),
                          m_.state.bytes_in_use()};
            if (!on_step(info)) {
                cancelled = true;
                break;
            }
        }
        result_.decode_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        if (cancelled) {
            for (Beam& b : live_) finish(b, int(b.tokens.size()), FinishReason::CANCELLED);
            for (Beam& b : live_) release(b.seq);
            live_.clear();
        }
        result_.hypotheses.assign(finished_.begin(),
                                  finished_.begin() + std::min<size_t>(finished_.size(), size_t(r_.num_return)));
        result_.finish_reason =
            cancelled ? FinishReason::CANCELLED
                      : (result_.hypotheses.empty() ? FinishReason::STOP : result_.hypotheses[0].finish_reason);
    }

private:
    bool is_eos(int token) const {
        if (r_.ignore_eos) return false;
        const std::vector<int>& eos = m_.config.eos_token_ids;
        return std::find(eos.begin(), eos.end(), token) != eos.end();
    }

    // The w best candidates of this step (the greedy child always among
    // them), turned into children: finished ones go to finished_, the live
    // ones are returned with parent_ set.
    std::vector<Beam> select(const float* logits) {
        const int n_live = int(live_.size());
        const int k = std::min<int>(width_, int(allowed_.size()));
        // Per beam, in parallel: its log-sum-exp and its k best tokens.
        m_.pool.run([&](int thread) {
            int* order = order_.data() + size_t(thread) * allowed_.size();
            for (int i = thread; i < n_live; i += m_.pool.size()) rank_beam(i, logits + size_t(i) * vocab_, k, order);
        });
        candidates_.clear();
        int greedy_beam = -1, greedy_token = -1;
        for (int i = 0; i < n_live; i++) {
            if (!std::isfinite(lse_[i]))
                throw MoeError("beam search: logits of a beam are all -inf or NaN, or hold +inf");
            const Candidate* top = top_.data() + size_t(i) * width_;
            candidates_.insert(candidates_.end(), top, top + n_top_[i]);
            if (live_[i].greedy && n_top_[i] > 0) {
                greedy_beam = i;
                greedy_token = top[0].token;
            }
        }
        if (candidates_.empty()) throw MoeError("beam search: every allowed token has a -inf or NaN logit");
        std::sort(candidates_.begin(), candidates_.end(), [](const Candidate& a, const Candidate& b) {
            if (a.logprob != b.logprob) return a.logprob > b.logprob;
            return a.beam != b.beam ? a.beam < b.beam : a.token < b.token;
        });
        candidates_.resize(std::min<size_t>(candidates_.size(), size_t(width_)));
        if (greedy_beam >= 0) {
            bool kept = std::any_of(candidates_.begin(), candidates_.end(), [&](const Candidate& c) {
                return c.beam == greedy_beam && c.token == greedy_token;
            });
            if (!kept) candidates_.back() = top_[size_t(greedy_beam) * width_];
        }

        std::vector<Beam> next;
        parents_.clear();
        for (const Candidate& c : candidates_) {
            const Beam& parent = live_[c.beam];
            Beam child{parent.tokens,
                       c.logprob,
                       -1,
                       parent.greedy && c.beam == greedy_beam && c.token == greedy_token,
                       parent.detok,
                       parent.stops,
                       parent.text};
            const int length = int(parent.tokens.size()) + 1;
            if (is_eos(c.token)) {
                auto r = child.stops.push(child.detok.flush());
                child.text += r.emit + (r.stopped ? "" : child.stops.flush());
                finish(child, length, FinishReason::STOP);
                continue;
            }
            child.tokens.push_back(c.token);
            auto r = child.stops.push(child.detok.push(c.token));
            child.text += r.emit;
            if (r.stopped) {
                finish(child, length, FinishReason::STOP);
                continue;
            }
            if (length >= max_length_) {
                auto tail = child.stops.push(child.detok.flush());
                child.text += tail.emit;
                if (!tail.stopped) child.text += child.stops.flush();
                finish(child, length, tail.stopped ? FinishReason::STOP : FinishReason::LENGTH);
                continue;
            }
            next.push_back(std::move(child));
            parents_.push_back(c.beam);
        }
        return next;
    }

    // Beam i's log-sum-exp (-inf when every logit is -inf or NaN) and its k
    // best allowed tokens with finite logits, best first. The terms are
    // float exponentials (each within an ulp) summed in double: the sum is
    // as exact as the fp32 logits.
    void rank_beam(int i, const float* row, int k, int* order) {
        float mx = -std::numeric_limits<float>::infinity();
        for (int v = 0; v < n_text_; v++)
            if (row[v] > mx) mx = row[v];  // NaN never compares greater
        double sum = 0;
        if (std::isfinite(mx))
            for (int v = 0; v < n_text_; v++)
                if (!std::isnan(row[v])) sum += double(std::exp(row[v] - mx));
        const double lse = std::isfinite(mx) ? double(mx) + std::log(sum) : (mx > 0 ? NAN : NEG_INF);
        lse_[i] = lse;
        std::copy(allowed_.begin(), allowed_.end(), order);
        std::partial_sort(order, order + k, order + allowed_.size(), [row](int a, int b) {
            double ka = logit_key(row[a]), kb = logit_key(row[b]);
            return ka > kb || (ka == kb && a < b);
        });
        Candidate* top = top_.data() + size_t(i) * width_;
        int n = 0;
        for (int j = 0; j < k && lse > NEG_INF; j++) {
            double key = logit_key(row[order[j]]);
            if (key == NEG_INF) break;
            top[n++] = {i, order[j], live_[i].logprob + (key - lse)};
        }
        n_top_[i] = n;
    }

    double score(double logprob, int length) const {
        return r_.length_penalty == 0.0f ? logprob : logprob / std::pow(double(length), double(r_.length_penalty));
    }

    // Keeps the w best finished hypotheses, best first; an equal score
    // keeps the earlier one ahead.
    void finish(const Beam& b, int length, FinishReason reason) {
        BeamHypothesis h{b.tokens, b.text, b.logprob, length, score(b.logprob, length), reason};
        if (int(finished_.size()) == width_ && !(h.score > finished_.back().score)) return;
        auto at = std::upper_bound(finished_.begin(), finished_.end(), h.score,
                                   [](double s, const BeamHypothesis& x) { return s > x.score; });
        finished_.insert(at, std::move(h));
        if (int(finished_.size()) > width_) finished_.pop_back();
    }

    // Exact early stopping: drops live beams that cannot beat the worst of
    // w finished hypotheses any more.
    void prune(std::vector<Beam>& next) {
        if (int(finished_.size()) < width_) return;
        const double worst = finished_.back().score;
        size_t kept = 0;
        for (size_t i = 0; i < next.size(); i++) {
            if (!(score(next[i].logprob, max_length_) > worst)) continue;
            if (kept != i) {
                next[kept] = std::move(next[i]);
                parents_[kept] = parents_[i];
            }
            kept++;
        }
        next.erase(next.begin() + long(kept), next.end());
        parents_.resize(kept);
    }

    void release(int seq) {
        if (seq == prompt_seq_) return;
        m_.state.clear(seq);
        free_seqs_.push_back(seq);
    }

    // Gives each new beam a KV sequence: the first child of a parent takes
    // the parent's sequence over, the others fork it (shared blocks); the
    // sequences of parents without children are released first, so w
    // sequences always suffice. The prompt's sequence is only ever forked.
    void assign_sequences(std::vector<Beam>& next) {
        std::vector<int> children(live_.size(), 0);
        for (int p : parents_) children[p]++;
        for (size_t i = 0; i < live_.size(); i++)
            if (children[i] == 0) release(live_[i].seq);
        std::vector<bool> handed_over(live_.size(), false);
        for (size_t j = 0; j < next.size(); j++) {
            const Beam& parent = live_[parents_[j]];
            if (!handed_over[parents_[j]] && parent.seq != prompt_seq_) {
                handed_over[parents_[j]] = true;
                next[j].seq = parent.seq;
                continue;
            }
            next[j].seq = free_seqs_.back();
            free_seqs_.pop_back();
            m_.state.fork(next[j].seq, parent.seq, n_prompt_ + int(parent.tokens.size()));
        }
    }

    // One forward pass: every live beam's newest token at its position.
    const float* forward() {
        batch_.clear();
        for (const Beam& b : live_) batch_.add(b.tokens.back(), n_prompt_ + int(b.tokens.size()) - 1, b.seq, true);
        const float* logits = m_.forward(batch_);
        result_.n_steps++;
        result_.n_beam_tokens += batch_.size();
        result_.expert_load.add_step(m_.step_stats);
        return logits;
    }

    BeamModel& m_;
    const BeamRequest& r_;
    BeamResult& result_;
    // vocab_: a logits row's length; n_text_: the ids the tokenizer knows (a
    // padded vocab_size's ids above are never chosen).
    const int prompt_seq_, width_, n_prompt_, vocab_, n_text_;
    const int max_length_;        // a hypothesis ends at this many scored tokens
    std::vector<int> allowed_;    // candidate tokens, ascending
    std::vector<int> order_;      // per pool thread: allowed_ partially sorted by logit
    std::vector<Candidate> top_;  // per live beam: its best candidates (width_ slots)
    std::vector<int> n_top_;      // per live beam: how many
    std::vector<double> lse_;     // per live beam: log-sum-exp of its logits
    std::vector<Candidate> candidates_;
    std::vector<Beam> live_;
    std::vector<int> parents_;  // for each beam select() returned: its parent's index in live_
    std::vector<BeamHypothesis> finished_;
    std::vector<int> free_seqs_;
    Batch batch_;
};

}  // namespace

void ExpertLoad::add_step(const RoutingStats& step) {
    if (histogram.empty()) histogram.assign(BEAM_WIDTH_MAX + 1, 0);
    int mx = 0;
    uint64_t tokens = 0, pairs = 0;
    for (uint64_t c : step.counts()) {
        if (c == 0) continue;
        mx = std::max(mx, int(c));
        tokens += c;
        pairs++;
        histogram[std::min<uint64_t>(c, BEAM_WIDTH_MAX)]++;
    }
    step_max.push_back(mx);
    step_mean.push_back(pairs ? double(tokens) / double(pairs) : 0.0);
}

int ExpertLoad::max() const {
    return step_max.empty() ? 0 : *std::max_element(step_max.begin(), step_max.end());
}

double ExpertLoad::mean() const {
    uint64_t tokens = 0, pairs = 0;
    for (size_t c = 0; c < histogram.size(); c++) {
        tokens += c * histogram[c];
        pairs += histogram[c];
    }
    return pairs ? double(tokens) / double(pairs) : 0.0;
}

BeamRequest beam_request_from(const GenerateRequest& g, int beam_width, float length_penalty, int num_return) {
    BeamRequest b;
    b.prompt = g.prompt;
    b.beam_width = beam_width;
    b.length_penalty = length_penalty;
    b.num_return = num_return;
    b.max_tokens = g.max_tokens;
    b.stop = g.stop;
    b.ignore_eos = g.ignore_eos;
    b.reuse_prefix = g.reuse_prefix;
    b.continues_prompt = g.continues_prompt;
    return b;
}

void beam_request_check(const BeamRequest& r, int vocab_size) {
    if (r.beam_width < 1 || r.beam_width > BEAM_WIDTH_MAX)
        throw MoeError("beam_width must be between 1 and " + std::to_string(BEAM_WIDTH_MAX) + ", got " +
                       std::to_string(r.beam_width));
    if (!std::isfinite(r.length_penalty) || r.length_penalty < 0)
        throw MoeError("length_penalty must be a number >= 0, got " + std::to_string(r.length_penalty));
    if (r.num_return < 1 || r.num_return > r.beam_width)
        throw MoeError("num_return must be between 1 and beam_width (" + std::to_string(r.beam_width) + "), got " +
                       std::to_string(r.num_return));
    if (r.max_tokens < 1) throw MoeError("max_tokens must be at least 1, got " + std::to_string(r.max_tokens));
    for (int t : r.allowed_tokens)
        if (t < 0 || t >= vocab_size)
            throw MoeError("allowed token " + std::to_string(t) + " is outside the vocabulary [0, " +
                           std::to_string(vocab_size) + ")");
}

void beam_search_decode(BeamModel& model, const BeamRequest& request, int prompt_seq, const float* logits,
                        const std::function<bool(const BeamStep&)>& on_step, BeamResult& result) {
    BeamDecoder decoder(model, request, prompt_seq, result);
    decoder.run(logits, on_step);
}
