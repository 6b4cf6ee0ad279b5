// Prometheus counters and the exposition text (see metrics.h). Every metric
// carries HELP and TYPE lines; histogram buckets are cumulative on output.
#include "server/metrics.h"

#include <cstdint>
#include <cstdio>

namespace {

std::string number(double x) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.6g", x);
    return buf;
}

void header(std::string& out, const char* name, const char* type, const char* help) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

}  // namespace

void Metrics::count_request(const std::string& route, int status) {
    std::lock_guard lock(mutex_);
    requests_[{route, status}]++;
}

void Metrics::count_stream_error(int status) {
    std::lock_guard lock(mutex_);
    stream_errors_[status]++;
}

void Metrics::add_prompt_tokens(long n_prompt, long n_cached) {
    std::lock_guard lock(mutex_);
    prompt_tokens_ += uint64_t(n_prompt);
    cached_tokens_ += uint64_t(n_cached);
}

void Metrics::add_generated_tokens(long n) {
    std::lock_guard lock(mutex_);
    generated_tokens_ += uint64_t(n);
}

void Metrics::observe_beam_search(int steps, const std::vector<uint64_t>& histogram, int max_tokens,
                                  double mean_tokens) {
    std::lock_guard lock(mutex_);
    beam_searches_++;
    beam_steps_ += uint64_t(steps);
    for (size_t c = 1; c < histogram.size(); c++) {
        size_t b = 0;
        while (b < EXPERT_TOKEN_BUCKETS.size() && int(c) > EXPERT_TOKEN_BUCKETS[b]) b++;
        expert_token_counts_[b] += histogram[c];
        expert_token_sum_ += c * histogram[c];
    }
    last_beam_max_ = max_tokens;
    last_beam_mean_ = mean_tokens;
}

void Metrics::count_generation(const std::string& finish_reason, double prefill_tok_s, double decode_tok_s) {
    std::lock_guard lock(mutex_);
    generations_[finish_reason]++;
    if (prefill_tok_s > 0) last_prefill_tok_s_ = prefill_tok_s;
    if (decode_tok_s > 0) last_decode_tok_s_ = decode_tok_s;
}

void Metrics::observe_ttft(double seconds) {
    std::lock_guard lock(mutex_);
    ttft_count_++;
    ttft_sum_ += seconds;
    for (size_t i = 0; i < TTFT_BUCKETS.size(); i++) {
        if (seconds <= TTFT_BUCKETS[i]) {
            ttft_counts_[i]++;
            break;
        }
    }
}

std::string Metrics::render(size_t queue_waiting, bool running) const {
    std::lock_guard lock(mutex_);
    std::string out;
    header(out, "moe_http_requests_total", "counter", "HTTP requests answered, by route and status code.");
    for (const auto& [key, n] : requests_)
        out += "moe_http_requests_total{route=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"} " +
               std::to_string(n) + "\n";
    header(out, "moe_stream_errors_total", "counter",
           "Streams that ended in an error event after their HTTP 200, by the status that fits the error.");
    for (const auto& [status, n] : stream_errors_)
        out += "moe_stream_errors_total{status=\"" + std::to_string(status) + "\"} " + std::to_string(n) + "\n";
    header(out, "moe_generations_total", "counter", "Finished generations, by finish reason.");
    for (const auto& [reason, n] : generations_)
        out += "moe_generations_total{finish_reason=\"" + reason + "\"} " + std::to_string(n) + "\n";
    header(out, "moe_prompt_tokens_total", "counter", "Prompt tokens of generation requests.");
    out += "moe_prompt_tokens_total " + std::to_string(prompt_tokens_) + "\n";
    header(out, "moe_prompt_tokens_cached_total", "counter", "Prompt tokens whose KV cache was reused.");
    out += "moe_prompt_tokens_cached_total " + std::to_string(cached_tokens_) + "\n";
    header(out, "moe_generated_tokens_total", "counter", "Generated tokens (counted as they are produced).");
    out += "moe_generated_tokens_total " + std::to_string(generated_tokens_) + "\n";
    header(out, "moe_prompt_tokens_per_second", "gauge", "Prefill speed of the last request.");
    out += "moe_prompt_tokens_per_second " + number(last_prefill_tok_s_) + "\n";
    header(out, "moe_decode_tokens_per_second", "gauge", "Decode speed of the last request.");
    out += "moe_decode_tokens_per_second " + number(last_decode_tok_s_) + "\n";
    header(out, "moe_queue_depth", "gauge", "Requests waiting for the engine.");
    out += "moe_queue_depth " + std::to_string(queue_waiting) + "\n";
    header(out, "moe_requests_running", "gauge", "Requests the engine is running (0 or 1).");
    out += std::string("moe_requests_running ") + (running ? "1" : "0") + "\n";
    header(out, "moe_time_to_first_token_seconds", "histogram",
           "From admission (queue wait included) to the first generated token.");
    uint64_t cumulative = 0;
    for (size_t i = 0; i < TTFT_BUCKETS.size(); i++) {
        cumulative += ttft_counts_[i];
        out += "moe_time_to_first_token_seconds_bucket{le=\"" + number(TTFT_BUCKETS[i]) + "\"} " +
               std::to_string(cumulative) + "\n";
    }
    out += "moe_time_to_first_token_seconds_bucket{le=\"+Inf\"} " + std::to_string(ttft_count_) + "\n";
    out += "moe_time_to_first_token_seconds_sum " + number(ttft_sum_) + "\n";
    out += "moe_time_to_first_token_seconds_count " + std::to_string(ttft_count_) + "\n";

    header(out, "moe_beam_searches_total", "counter", "Finished beam-search requests.");
    out += "moe_beam_searches_total " + std::to_string(beam_searches_) + "\n";
    header(out, "moe_beam_steps_total", "counter", "Beam-search decode steps (one forward pass over the live beams each).");
    out += "moe_beam_steps_total " + std::to_string(beam_steps_) + "\n";
    header(out, "moe_beam_expert_tokens", "histogram",
           "Tokens a routed expert got in one beam-search step, per (step, layer, expert) that got any.");
    cumulative = 0;
    for (size_t i = 0; i < EXPERT_TOKEN_BUCKETS.size(); i++) {
        cumulative += expert_token_counts_[i];
        out += "moe_beam_expert_tokens_bucket{le=\"" + std::to_string(EXPERT_TOKEN_BUCKETS[i]) + "\"} " +
               std::to_string(cumulative) + "\n";
    }
    cumulative += expert_token_counts_.back();
    out += "moe_beam_expert_tokens_bucket{le=\"+Inf\"} " + std::to_string(cumulative) + "\n";
    out += "moe_beam_expert_tokens_sum " + std::to_string(expert_token_sum_) + "\n";
    out += "moe_beam_expert_tokens_count " + std::to_string(cumulative) + "\n";
    header(out, "moe_beam_last_expert_tokens_max", "gauge",
           "Most tokens one routed expert got in one step of the last beam search.");
    out += "moe_beam_last_expert_tokens_max " + std::to_string(last_beam_max_) + "\n";
    header(out, "moe_beam_last_expert_tokens_mean", "gauge",
           "Mean tokens per routed expert per step of the last beam search.");
    out += "moe_beam_last_expert_tokens_mean " + number(last_beam_mean_) + "\n";
    return out;
}

std::string Metrics::render_experts(const ExpertMetrics& e) {
    std::string out;
    header(out, "moe_device_info", "gauge",
           "The expert device: none (CPU only), cuda (a GPU), or emulated (a dry run that computes on the CPU).");
    out += "moe_device_info{device=\"" + e.device + "\"} 1\n";
    std::string name = e.device_name;
    for (char& ch : name)
        if (ch == '"' || ch == '\\' || ch == '\n') ch = ' ';
    header(out, "moe_device_name_info", "gauge", "The device's name (for none: why the CPU serves).");
    out += "moe_device_name_info{name=\"" + name + "\"} 1\n";
    header(out, "moe_experts_resident", "gauge", "Experts resident on the device (pinned and cache slots).");
    out += "moe_experts_resident " + std::to_string(e.resident) + "\n";
    header(out, "moe_expert_cache_slots", "gauge", "Of the resident experts' slots, cache slots (the rest pinned).");
    out += "moe_expert_cache_slots " + std::to_string(e.cache_slots) + "\n";
    header(out, "moe_experts", "gauge", "Experts of the model (all layers).");
    out += "moe_experts " + std::to_string(e.total) + "\n";

    // One counter per execution field; the per-layer fields of a kind share
    // one counter, its rows by layer, then by side (times) and kind.
    const ExecutionStats& s = e.execution;
    std::vector<const ExecutionField*> layer_fields;  // in table order: the times, then the prefetch counts
    for (const ExecutionField& f : execution_stats_fields()) {
        const std::string metric = f.metric;
        if (std::holds_alternative<ExecutionField::PerLayer>(f.value) ||
            std::holds_alternative<ExecutionField::PerLayerCount>(f.value)) {
            layer_fields.push_back(&f);
            continue;
        }
        header(out, f.metric, "counter", f.help);
        if (auto* site_value = std::get_if<ExecutionField::PerSite>(&f.value))
            for (int i = 0; i < EXPERT_SITE_COUNT; i++)
                out += metric + "{site=\"" + expert_site_name(ExpertSite(i)) + "\"} " +
                       std::to_string((*site_value)(s, ExpertSite(i))) + "\n";
        if (auto* count = std::get_if<ExecutionField::Count>(&f.value))
            out += metric + " " + std::to_string(s.*count->member) + "\n";
        if (auto* ms = std::get_if<ExecutionField::Ms>(&f.value)) out += metric + " " + number(s.*(*ms)) + "\n";
    }
    for (size_t first = 0; first < layer_fields.size();) {
        const std::string metric = layer_fields[first]->metric;
        size_t end = first;
        while (end < layer_fields.size() && metric == layer_fields[end]->metric) end++;
        header(out, metric.c_str(), "counter", layer_fields[first]->help);
        for (int l = 0; l < s.n_layers; l++)
            for (size_t i = first; i < end; i++) {
                const std::string row = metric + "{layer=\"" + std::to_string(l) + "\",";
                if (auto* layer = std::get_if<ExecutionField::PerLayer>(&layer_fields[i]->value))
                    out += row + "side=\"" + layer->side + "\",kind=\"" + layer->kind + "\"} " +
                           number((s.*layer->ms)[size_t(l)]) + "\n";
                if (auto* layer = std::get_if<ExecutionField::PerLayerCount>(&layer_fields[i]->value))
                    out += row + "kind=\"" + layer->kind + "\"} " + std::to_string((s.*layer->counts)[size_t(l)]) +
                           "\n";
            }
        first = end;
    }
    return out;
}
