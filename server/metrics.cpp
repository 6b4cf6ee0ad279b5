// Prometheus counters and the exposition text (see metrics.h). Every metric
// carries HELP and TYPE lines; histogram buckets are cumulative on output.
#include "server/metrics.h"

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
    static const char* SITES[3] = {"cpu", "device", "copy"};
    std::string out;
    header(out, "moe_device_info", "gauge",
           "The expert device: none (CPU only), cuda (a GPU), or emulated (a dry run that computes on the CPU).");
    out += "moe_device_info{device=\"" + e.device + "\"} 1\n";
    std::string name = e.device_name;
    for (char& ch : name)
        if (ch == '"' || ch == '\\' || ch == '\n') ch = ' ';
    header(out, "moe_device_name_info", "gauge", "The device's name (for none: why the CPU serves).");
    out += "moe_device_name_info{name=\"" + name + "\"} 1\n";
    header(out, "moe_experts_resident", "gauge", "Experts resident on the device.");
    out += "moe_experts_resident " + std::to_string(e.resident) + "\n";
    header(out, "moe_experts", "gauge", "Experts of the model (all layers).");
    out += "moe_experts " + std::to_string(e.total) + "\n";
    header(out, "moe_expert_runs_total", "counter", "Expert executions, by site (cpu, device = resident, copy).");
    for (int s = 0; s < 3; s++)
        out += std::string("moe_expert_runs_total{site=\"") + SITES[s] + "\"} " + std::to_string(e.runs[s]) + "\n";
    header(out, "moe_expert_tokens_total", "counter", "Routed tokens computed, by site.");
    for (int s = 0; s < 3; s++)
        out += std::string("moe_expert_tokens_total{site=\"") + SITES[s] + "\"} " + std::to_string(e.tokens[s]) + "\n";
    header(out, "moe_expert_copy_bytes_total", "counter", "Expert weights copied to the device.");
    out += "moe_expert_copy_bytes_total " + std::to_string(e.copy_bytes) + "\n";
    header(out, "moe_moe_layers_total", "counter", "MoE layer executions.");
    out += "moe_moe_layers_total " + std::to_string(e.layers) + "\n";
    header(out, "moe_expert_phase_predicted_ms_total", "counter", "Latency model's prediction of the expert phases.");
    out += "moe_expert_phase_predicted_ms_total " + number(e.predicted_ms) + "\n";
    header(out, "moe_expert_phase_measured_ms_total", "counter", "Measured wall time of the expert phases.");
    out += "moe_expert_phase_measured_ms_total " + number(e.measured_ms) + "\n";
    header(out, "moe_expert_cpu_predicted_ms_total", "counter", "Predicted time of the CPU side.");
    out += "moe_expert_cpu_predicted_ms_total " + number(e.predicted_cpu_ms) + "\n";
    header(out, "moe_expert_cpu_measured_ms_total", "counter", "Measured time of the CPU side.");
    out += "moe_expert_cpu_measured_ms_total " + number(e.measured_cpu_ms) + "\n";
    header(out, "moe_expert_device_predicted_ms_total", "counter", "Predicted time of the device side.");
    out += "moe_expert_device_predicted_ms_total " + number(e.predicted_device_ms) + "\n";
    header(out, "moe_expert_device_measured_ms_total", "counter", "Measured busy time of the device side.");
    out += "moe_expert_device_measured_ms_total " + number(e.measured_device_ms) + "\n";
    header(out, "moe_expert_layer_ms_total", "counter",
           "Expert phase per MoE layer and side (cpu, device): the latency model's prediction and the measurement.");
    for (size_t l = 0; l < e.layer_measured_cpu_ms.size(); l++) {
        const std::string layer = std::to_string(l);
        auto row = [&](const char* side, const char* kind, double v) {
            out += "moe_expert_layer_ms_total{layer=\"" + layer + "\",side=\"" + side + "\",kind=\"" + kind + "\"} " +
                   number(v) + "\n";
        };
        row("cpu", "predicted", e.layer_predicted_cpu_ms[l]);
        row("cpu", "measured", e.layer_measured_cpu_ms[l]);
        row("device", "predicted", e.layer_predicted_device_ms[l]);
        row("device", "measured", e.layer_measured_device_ms[l]);
    }
    return out;
}
