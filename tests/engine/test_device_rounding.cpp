// The GPU tests' logit criterion (support/logit_compare.h) against the CPU
// with the device's arithmetic: a Backend that multiplies as gpu_matmul
// does, and experts computed as gpu_expert_ffn does. bf16 weights: inputs
// (and the experts' inner activation) rounded to bf16, fp32 accumulation.
// Block-quantized weights (the reference GGUFs): below
// GPU_QUANT_GEMV_MAX_M rows the GEMV's fp32 inputs times the dequantized
// weights; above, inputs and dequantized weights rounded to bf16.
// Both are test doubles of the device's numerics, not of the device. The
// criterion must hold for them on every preset the GPU tests use, and must
// fail for a device that computes one expert per layer from the wrong
// weights (a stale staging slot).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "cpu_kernels/bf16.h"
#include "cpu_kernels/kernels.h"
#include "cpu_kernels/thread_pool.h"
#include "engine/devices/backend.h"
#include "engine/devices/expert_executor.h"
#include "engine/model/model_source.h"
#include "engine/model/weights.h"
#include "engine/runtime/forward.h"
#include "engine/runtime/token_mixer.h"
#include "gpu_kernels/gpu_limits.h"
#include "gpu_kernels/gpu_math.h"
#include "logit_compare.h"
#include "test_support.h"

namespace {

constexpr int MAX_BATCH = 128;
constexpr int CTX = 256;

float round_bf16(float v) { return bf16_to_f32(f32_to_bf16(v)); }

// Whether gpu_matmul rounds its inputs to bf16 for W over m rows.
bool device_rounds(const WeightView& w, int m) {
    return !dtype_quantized(w.type) || m > GPU_QUANT_GEMV_MAX_M;
}

// A block-quantized matrix as the device multiplies by it: dequantized to
// fp32, and rounded to bf16 when `rounded`; computed once per matrix.
class DequantCache {
public:
    const std::vector<float>& values(const WeightView& w, bool rounded) {
        std::vector<float>& v = cache_[{w.data, rounded}];
        if (v.empty()) {
            v.resize(size_t(w.rows * w.cols));
            for (int64_t r = 0; r < w.rows; r++) weight_row_f32(v.data() + r * w.cols, w, r);
            if (rounded)
                for (float& e : v) e = round_bf16(e);
        }
        return v;
    }
    WeightView view(const WeightView& w, bool rounded) {
        return weight_view(DType::F32, values(w, rounded).data(), w.rows, w.cols);
    }

private:
    std::map<std::pair<const void*, bool>, std::vector<float>> cache_;
};

// The CPU backend with bf16-rounded GEMM inputs; everything else delegated.
class RoundingBackend final : public Backend {
public:
    explicit RoundingBackend(std::unique_ptr<Backend> inner) : b_(std::move(inner)) {}
    const char* name() const override { return "cpu, GEMM inputs rounded to bf16"; }
    const ModelWeights& weights() const override { return b_->weights(); }
    StateMemory& state_memory() override { return b_->state_memory(); }
    float* alloc(size_t n) override { return b_->alloc(n); }
    void begin(const Batch& batch, const SequenceState& state) override { b_->begin(batch, state); }
    void embed(float* x) override { b_->embed(x); }
    void rmsnorm(float* out, const float* x, const float* w, int rows, int dim, float eps) override {
        b_->rmsnorm(out, x, w, rows, dim, eps);
    }
    void matmul(float* y, const float* x, const WeightView& w, int m) override {
        const bool round = device_rounds(w, m);
        const WeightView used = dtype_quantized(w.type) ? dequant_.view(w, round) : w;
        if (!round) return b_->matmul(y, x, used, m);
        rounded_.assign(x, x + size_t(m) * size_t(w.cols));
        for (float& v : rounded_) v = round_bf16(v);
        b_->matmul(y, rounded_.data(), used, m);
    }
    void rope(float* x, int n_heads) override { b_->rope(x, n_heads); }
    void split_heads(float* a, float* b, const float* x, int rows, int n_heads, int head_dim) override {
        b_->split_heads(a, b, x, rows, n_heads, head_dim);
    }
    void sigmoid_mul(float* x, const float* gate, size_t n) override { b_->sigmoid_mul(x, gate, n); }
    void delta_net(int layer, float* o, float* qkv, const float* z, const float* b, const float* a,
                   const LinearAttentionWeights& w) override {
        b_->delta_net(layer, o, qkv, z, b, a, w);
    }
    void kv_store(int layer, const float* k, const float* v) override { b_->kv_store(layer, k, v); }
    void attention(int layer, float* out, const float* q, const AttnMask& mask) override {
        b_->attention(layer, out, q, mask);
    }
    void add(float* x, const float* y, size_t n) override { b_->add(x, y, n); }
    void add_bias(float* x, const float* bias, int rows, int width) override { b_->add_bias(x, bias, rows, width); }
    // gpu_expert_ffn's steps: three GEMMs (inputs rounded as above) and the SiLU-mul.
    void mlp(float* y, const float* x, const ExpertWeights& w, int m, float* scratch) override {
        float* h1 = scratch;
        float* h3 = scratch + size_t(m) * size_t(w.w1.rows);
        matmul(h1, x, w.w1, m);
        matmul(h3, x, w.w3, m);
        for (size_t i = 0; i < size_t(m) * size_t(w.w1.rows); i++) h1[i] = gm_silu_mul(h1[i], h3[i]);
        matmul(y, h1, w.w2, m);
    }
    void sigmoid_scale(float* y, const float* gate, int rows, int dim) override {
        b_->sigmoid_scale(y, gate, rows, dim);
    }
    void route(int* experts, float* weights, float* logits, int rows, int n_experts, int k, bool renorm) override {
        b_->route(experts, weights, logits, rows, n_experts, k, renorm);
    }
    void gather(float* out, const float* x, const int* src, int rows, int dim) override {
        b_->gather(out, x, src, rows, dim);
    }
    void combine(float* out, const float* y, const int* slots, const float* w, int rows, int k, int dim) override {
        b_->combine(out, y, slots, w, rows, k, dim);
    }
    const float* to_host(const float* x, size_t n) override { return b_->to_host(x, n); }
    ExpertRows expert_rows() override { return b_->expert_rows(); }
    ExpertRows host_rows() override { return b_->host_rows(); }
    void rows_to_host(std::span<const ExpertTask> tasks) override { b_->rows_to_host(tasks); }
    void rows_from_host(std::span<const ExpertTask> tasks) override { b_->rows_from_host(tasks); }

private:
    std::unique_ptr<Backend> b_;
    std::vector<float> rounded_;
    DequantCache dequant_;
};

// gpu_expert_ffn's arithmetic, row by row on the pool. With stale_slot, the
// last task of every layer reads the next expert's weights.
class RoundingExperts final : public ExpertExecutor {
public:
    RoundingExperts(const ModelConfig& c, const ModelWeights& w, ThreadPool& pool, bool stale_slot)
        : c_(c), w_(w), pool_(pool), stale_(stale_slot) {}
    const char* name() const override { return "bf16-rounding experts"; }
    void run_layer(int layer, const ExpertRows& rows, std::span<const ExpertTask> tasks,
                   const NextLayerGuess&) override {
        const int dim = c_.dim, hidden = c_.hidden_dim;
        for (size_t t = 0; t < tasks.size(); t++) {
            const ExpertTask& task = tasks[t];
            const int e = stale_ && t + 1 == tasks.size() ? (task.expert + 1) % c_.n_experts : task.expert;
            const ExpertWeights& ew = w_.layers[size_t(layer)].experts[size_t(e)];
            // The three matrices are of one kind (bf16 or quantized) in every model here.
            const bool round = device_rounds(ew.w1, task.n_tokens);
            const bool quantized = dtype_quantized(ew.w1.type);
            const WeightView* mats[3] = {&ew.w1, &ew.w3, &ew.w2};
            const std::vector<float>* q[3] = {nullptr, nullptr, nullptr};
            if (quantized)
                for (int m = 0; m < 3; m++) q[m] = &dequant_.values(*mats[m], round);
            // Element (j, i) of matrix m (0: w1, 1: w3, 2: w2) as the device reads it.
            auto at = [&](int m, long j, int i) {
                const WeightView& w = *mats[m];
                return quantized ? (*q[m])[size_t(j * w.cols + i)] : bf16_to_f32(static_cast<const bf16*>(w.row(j))[i]);
            };
            auto rnd = [&](float v) { return round ? round_bf16(v) : v; };
            std::vector<float> x(static_cast<size_t>(dim)), h(static_cast<size_t>(hidden));
            for (int r = task.row; r < task.row + task.n_tokens; r++) {
                for (int i = 0; i < dim; i++) x[size_t(i)] = rnd(rows.x[size_t(r) * dim + i]);
                pool_.parallel_for(hidden, 1, [&](long begin, long end) {
                    for (long j = begin; j < end; j++) {
                        float a = 0, b = 0;
                        for (int i = 0; i < dim; i++) {
                            a += at(0, j, i) * x[size_t(i)];
                            b += at(1, j, i) * x[size_t(i)];
                        }
                        h[size_t(j)] = rnd(a / (1.0f + std::exp(-a)) * b);
                    }
                });
                pool_.parallel_for(dim, 1, [&](long begin, long end) {
                    for (long i = begin; i < end; i++) {
                        float s = 0;
                        for (int j = 0; j < hidden; j++) s += at(2, i, j) * h[size_t(j)];
                        rows.y[size_t(r) * dim + i] = s;
                    }
                });
            }
        }
    }

private:
    const ModelConfig& c_;
    const ModelWeights& w_;
    ThreadPool& pool_;
    bool stale_;
    DequantCache dequant_;
};

std::vector<int> prompt_tokens(int n, int vocab) {
    std::vector<int> t{1};
    for (int i = 1; i < n; i++) t.push_back(1 + (i * 7919 + 13) % (vocab - 1));
    return t;
}

enum class Arithmetic { CPU, DEVICE, DEVICE_STALE_SLOT };

// Prefill, then n_decode steps on `tokens` (filled with the greedy ones when
// empty), as tests/gpu/test_gpu_model.cpp runs them; every position's logits.
std::vector<float> run(const ModelConfig& c, const ModelWeights& w, Arithmetic a, const std::vector<int>& prompt,
                       int n_decode, std::vector<int>& tokens) {
    ThreadPool pool(2);
    std::unique_ptr<Backend> backend = make_cpu_backend(c, w, pool, CTX, MAX_BATCH * c.n_experts_active);
    if (a != Arithmetic::CPU) backend = std::make_unique<RoundingBackend>(std::move(backend));
    std::unique_ptr<SequenceState> cache = make_sequence_state(c, 1, CTX, backend->state_memory());
    CpuExpertExecutor cpu(c, w, pool, MAX_BATCH);
    RoundingExperts device(c, w, pool, a == Arithmetic::DEVICE_STALE_SLOT);
    ExpertExecutor& experts = a == Arithmetic::CPU ? static_cast<ExpertExecutor&>(cpu) : device;
    ForwardPass forward(c, *backend, *cache, experts, MAX_BATCH, MAX_BATCH);
    const int vocab = c.vocab_size;
    Batch batch;
    batch.reserve(MAX_BATCH);
    for (int i = 0; i < int(prompt.size()); i++) batch.add(prompt[i], i, 0, true);
    const float* l = forward.run(batch);
    std::vector<float> out(l, l + prompt.size() * size_t(vocab));
    const float* last = l + (prompt.size() - 1) * size_t(vocab);
    for (int step = 0; step < n_decode; step++) {
        if (int(tokens.size()) <= step) tokens.push_back(int(std::max_element(last, last + vocab) - last));
        batch.clear();
        batch.add(tokens[size_t(step)], int(prompt.size()) + step, 0, true);
        last = forward.run(batch);
        out.insert(out.end(), last, last + vocab);
    }
    return out;
}

}  // namespace

TEST_CASE("the GPU tests' logit criterion holds for the device's bf16 arithmetic and fails for a stale expert slot",
          "[device-rounding][slow]") {
    for (const char* preset : {"tiny", "small", "mixtral-mini"}) {
        INFO(preset);
        // The weights of test_model_dir(preset) (seed 1), built in memory:
        // mixtral-mini's 1.5 GB need no disk.
        const ModelSource source = model_source_parse(std::string("synth:") + preset + ":1");
        const ModelConfig c = model_source_config(source);
        const ModelWeights w = model_source_weights(source, c, 2);
        // The prompt lengths and decode steps of test_gpu_model.cpp.
        const std::vector<int> prompt = prompt_tokens(std::string(preset) == "mixtral-mini" ? 100 : 40, c.vocab_size);
        std::vector<int> tokens;
        const std::vector<float> want = run(c, w, Arithmetic::CPU, prompt, 16, tokens);
        const LogitComparison rounded = compare_logits(run(c, w, Arithmetic::DEVICE, prompt, 16, tokens), want, c.vocab_size);
        INFO("device arithmetic: worst " << rounded.worst << ", median " << rounded.median << ", over "
                                         << rounded.over << "/" << rounded.positions << ", tolerance "
                                         << rounded.tolerance << ";" << rounded.profile);
        CHECK(logits_close(rounded));
        // The rounding alone must move the logits (else this test measures nothing).
        CHECK(rounded.worst > 0);
        if (std::string(preset) != "mixtral-mini") {  // mini's stale run adds nothing but time
            const LogitComparison stale =
                compare_logits(run(c, w, Arithmetic::DEVICE_STALE_SLOT, prompt, 16, tokens), want, c.vocab_size);
            INFO("stale slot: worst " << stale.worst << ", median " << stale.median << ", over " << stale.over << "/"
                                      << stale.positions);
            CHECK_FALSE(logits_close(stale));
        }
    }
}

TEST_CASE("the GPU tests' logit criterion holds for the device's arithmetic on quantized GGUFs", "[device-rounding]") {
    // llama.cpp's reference files, and the files test_gpu_model.cpp runs on
    // the device: the small preset quantized by `quantize`.
    std::vector<std::filesystem::path> files{shared_data_dir() / "reference/gguf/Q8_0.gguf",
                                             shared_data_dir() / "reference/gguf/Q4_K_M.gguf"};
    for (const char* type : {"q8_0", "q4_k_m"}) {
        files.push_back(test_temp_dir("rounding-gguf") / (std::string("small-") + type + ".gguf"));
        CommandResult q = moe({"quantize", "--model", test_model_dir("small").string(), "--type", type, "--out",
                               files.back().string(), "--threads", "2"});
        INFO(q.err);
        REQUIRE(q.exit_code == 0);
    }
    for (const std::filesystem::path& file : files) {
        INFO(file.filename().string());
        const ModelSource source = model_source_parse(file.string());
        const ModelConfig c = model_source_config(source);
        const ModelWeights w = model_source_weights(source, c, 2);
        // The prompt length and decode steps of test_gpu_model.cpp's GGUF case.
        const std::vector<int> prompt = prompt_tokens(100, c.vocab_size);
        std::vector<int> tokens;
        const std::vector<float> want = run(c, w, Arithmetic::CPU, prompt, 16, tokens);
        const LogitComparison device =
            compare_logits(run(c, w, Arithmetic::DEVICE, prompt, 16, tokens), want, c.vocab_size);
        INFO("device arithmetic: worst " << device.worst << ", median " << device.median << ", over " << device.over
                                         << "/" << device.positions << ", tolerance " << device.tolerance << ";"
                                         << device.profile);
        CHECK(logits_close(device));
        CHECK(device.worst > 0);
        const LogitComparison stale =
            compare_logits(run(c, w, Arithmetic::DEVICE_STALE_SLOT, prompt, 16, tokens), want, c.vocab_size);
        INFO("stale slot: worst " << stale.worst << ", median " << stale.median << ", over " << stale.over << "/"
                                  << stale.positions);
        CHECK_FALSE(logits_close(stale));
    }
}
