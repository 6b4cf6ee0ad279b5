// EmulatedDevice (see emulated_device.h): device memory is a host buffer,
// copies are memcpy, compute is expert_ffn_bf16 on the device's own thread.
#include "engine/emulated_device.h"

#include <cassert>
#include <chrono>
#include <cstring>
#include <string>

#include "cpu_kernels/kernels.h"
#include "engine/errors.h"

namespace {

double gib(double bytes) { return bytes / double(1u << 30); }

}  // namespace

EmulatedDevice::EmulatedDevice(const ModelConfig& config, const ModelWeights& weights, const Residency& residency,
                               double budget_bytes, int max_tokens, int threads)
    : config_(config), weights_(weights), n_experts_(config.n_experts),
      expert_elems_(size_t(3) * config.hidden_dim * config.dim), budget_bytes_(budget_bytes),
      slot_(size_t(config.n_layers) * config.n_experts, -1),
      scratch_(size_t(2) * max_tokens * config.hidden_dim), pool_(threads) {
    assert(residency.n_layers() == config.n_layers && residency.n_experts() == config.n_experts);
    n_resident_ = residency.n_resident();
    double need = double(n_resident_ + 1) * double(expert_elems_) * sizeof(bf16);
    if (need > budget_bytes)
        throw MoeError("emulated device: " + std::to_string(n_resident_) + " resident experts plus one staging slot need " +
                       std::to_string(gib(need)) + " GiB, more than its budget of " + std::to_string(gib(budget_bytes)) +
                       " GiB");
    memory_.reset(new bf16[size_t(n_resident_ + 1) * expert_elems_]);
    int slot = 0;
    const size_t mat = size_t(config.hidden_dim) * config.dim;
    for (int l = 0; l < config.n_layers; l++)
        for (int e = 0; e < config.n_experts; e++) {
            if (!residency.resident(l, e)) continue;
            const ExpertWeights& w = weights.layers[l].experts[e];
            bf16* dst = slot_memory(slot);
            std::memcpy(dst, w.w1, mat * sizeof(bf16));
            std::memcpy(dst + mat, w.w3, mat * sizeof(bf16));
            std::memcpy(dst + 2 * mat, w.w2, mat * sizeof(bf16));
            slot_[size_t(l) * n_experts_ + e] = slot++;
        }
    tasks_.reserve(n_experts_);
    copy_.reserve(n_experts_);
    thread_ = std::thread([this] { worker(); });
}

EmulatedDevice::~EmulatedDevice() {
    {
        std::lock_guard lock(mutex_);
        stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
}

void EmulatedDevice::start(int layer, const ExpertRows& rows, std::span<const ExpertTask> tasks,
                           std::span<const uint8_t> copy) {
    assert(tasks.size() == copy.size());
    {
        std::lock_guard lock(mutex_);
        assert(started_ == finished_);
        layer_ = layer;
        rows_ = rows;
        tasks_.assign(tasks.begin(), tasks.end());
        copy_.assign(copy.begin(), copy.end());
        started_++;
    }
    cv_.notify_all();
}

void EmulatedDevice::wait() {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return finished_ == started_; });
}

void EmulatedDevice::worker() {
    std::unique_lock lock(mutex_);
    for (;;) {
        cv_.wait(lock, [&] { return stop_ || started_ != finished_; });
        if (stop_) return;
        lock.unlock();
        run_tasks();
        lock.lock();
        finished_ = started_;
        cv_.notify_all();
    }
}

// Runs on the device thread; tasks_ and copy_ are not touched by start()
// until finished_ catches up.
void EmulatedDevice::run_tasks() {
    auto t0 = std::chrono::steady_clock::now();
    const size_t mat = size_t(config_.hidden_dim) * config_.dim;
    const int staging = n_resident_;
    for (size_t i = 0; i < tasks_.size(); i++) {
        const ExpertTask& t = tasks_[i];
        int slot = slot_of(layer_, t.expert);
        if (copy_[i]) {
            assert(slot < 0);
            const ExpertWeights& w = weights_.layers[layer_].experts[t.expert];
            bf16* dst = slot_memory(staging);
            std::memcpy(dst, w.w1, mat * sizeof(bf16));
            std::memcpy(dst + mat, w.w3, mat * sizeof(bf16));
            std::memcpy(dst + 2 * mat, w.w2, mat * sizeof(bf16));
            copied_bytes_ += 3 * mat * sizeof(bf16);
            slot = staging;
        }
        assert(slot >= 0);
        const bf16* base = slot_memory(slot);
        const size_t at = size_t(t.row) * config_.dim;
        expert_ffn_bf16(rows_.y + at, rows_.x + at, base, base + mat, base + 2 * mat, t.n_tokens, config_.dim,
                        config_.hidden_dim, scratch_.data(), pool_);
    }
    last_busy_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
