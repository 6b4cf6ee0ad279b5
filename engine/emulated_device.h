// EmulatedDevice: a TEST DOUBLE standing in for a GPU. It owns its own
// memory, sized by a byte budget: resident experts are copied into it at
// start-up, and a non-resident expert is copied into a staging slot when the
// layer's plan says "copy" (bytes counted). It computes with the CPU kernels
// on a thread of its own (with a pool of as many threads as the CPU side, so
// every kernel splits its work the same way and gives bitwise the CPU's
// results), so its tasks really run while the CPU side runs its own. Used by tests (any placement must give the same logits as all-CPU)
// and by `--emulate-gpu` as a dry run of placement: what would go where, and
// with what hit rate, for that much GPU memory. It never makes anything faster.
#pragma once
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cpu_kernels/thread_pool.h"
#include "engine/expert_device.h"
#include "engine/model_config.h"
#include "engine/weights.h"
#include "placement/residency.h"

class EmulatedDevice final : public ExpertDevice {
public:
    // Copies every resident expert of `residency` into device memory.
    // budget_bytes must hold them plus one staging slot; throws MoeError
    // otherwise. max_tokens: the most tokens one task may carry; threads: the
    // CPU side's thread count.
    EmulatedDevice(const ModelConfig& config, const ModelWeights& weights, const Residency& residency,
                   double budget_bytes, int max_tokens, int threads);
    ~EmulatedDevice() override;

    const char* name() const override { return "emulated"; }
    bool resident(int layer, int expert) const override { return slot_of(layer, expert) >= 0; }
    void start(int layer, const ExpertRows& rows, std::span<const ExpertTask> tasks,
               std::span<const uint8_t> copy) override;
    int staging_slots() const override { return 1; }
    void wait() override;
    double last_busy_ms() const override { return last_busy_ms_; }
    double budget_bytes() const override { return budget_bytes_; }
    double resident_bytes() const override { return double(n_resident_) * double(expert_elems_) * sizeof(bf16); }
    uint64_t copied_bytes() const override { return copied_bytes_; }

private:
    int slot_of(int layer, int expert) const { return slot_[size_t(layer) * n_experts_ + expert]; }
    bf16* slot_memory(int slot) { return memory_.get() + size_t(slot) * expert_elems_; }
    void worker();
    void run_tasks();

    const ModelConfig& config_;
    const ModelWeights& weights_;
    int n_experts_;
    size_t expert_elems_;          // bf16 elements of w1 + w3 + w2
    double budget_bytes_;
    int n_resident_ = 0;
    std::vector<int> slot_;        // (n_layers, n_experts) memory slot, -1 when not resident
    std::unique_ptr<bf16[]> memory_;  // (n_resident + 1, expert_elems): resident slots, then staging
    std::vector<float> scratch_;   // 2 * max_tokens * hidden_dim
    ThreadPool pool_;              // the device's compute: its own threads
    uint64_t copied_bytes_ = 0;
    double last_busy_ms_ = 0;

    std::mutex mutex_;
    std::condition_variable cv_;
    int layer_ = 0;
    ExpertRows rows_;
    std::vector<ExpertTask> tasks_;
    std::vector<uint8_t> copy_;
    uint64_t started_ = 0, finished_ = 0;
    bool stop_ = false;
    std::thread thread_;
};
