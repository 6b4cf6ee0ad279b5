// EmulatedDevice: a TEST DOUBLE standing in for a GPU. It owns its own
// memory, sized by a byte budget: resident slots (pinned experts, then
// cache slots) filled at start-up, and S staging slots; a copy the
// layer's plan asks for lands in a cache slot or a staging slot, and extra
// copies (prefetches, fills) in cache slots (bytes counted). It follows the
// ExpertPipeline contract of a real device (expert_pipeline.h: residents
// first, then the copies, then the extra copies), running the pipeline's op
// list in order on a thread of its own, copies as memcpy, computes with the
// CPU kernels on a kernel path (ISA) and a pool of threads of its own.
// Its tasks really run while the CPU side runs its own.
//
// The path decides the arithmetic: every path multiplies the same weights
// but sums a dot product in its own order (scalar: one sequential sum; the
// vector paths: partial sums per lane, of their own width), and avx512bf16
// rounds the activations to bf16. The thread count does not: a row's sum
// never depends on which thread's range holds it (cpu_kernels/README.md).
// Two uses:
// * `--emulate-gpu` (device_setup.cpp), a dry run of placement: what would
//   go where, and with what hit rate, for that much GPU memory. It gets the
//   CPU side's own path and thread count, the cheapest, so its tokens and
//   logits are bitwise the CPU's.
// * Tests (tests/apps/test_hybrid_execution.cpp, kernel_paths): another
//   path than the CPU side's (scalar, or avx2 where the CPU side is scalar)
//   and another thread count, so that, like a real GPU, the device sums in
//   another order and any placement must give the all-CPU logits within a
//   tolerance, with the same routing and greedy tokens.
// It never makes anything faster, and its timings mean nothing for a GPU.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "cpu_kernels/isa.h"
#include "cpu_kernels/thread_pool.h"
#include "engine/devices/expert_device.h"
#include "engine/devices/expert_pipeline.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"
#include "placement/residency.h"

class EmulatedDevice final : public ExpertDevice {
public:
    // slots: what each resident slot holds at start-up (model layers; layer
    // -1: an empty cache slot), copied into device memory.
    // budget_bytes must hold them plus staging_slots (>= 1) staging slots;
    // throws MoeError otherwise. max_tokens: the most tokens one task may
    // carry; threads and isa: the pool and kernel path of its computes (isa
    // one this CPU runs; throws MoeError otherwise).
    EmulatedDevice(const ModelConfig& config, const ModelWeights& weights, std::span<const SlotExpert> slots,
                   double budget_bytes, int max_tokens, int threads, Isa isa,
                   int staging_slots = DEFAULT_STAGING_SLOTS);
    // The resident experts of `residency` in (layer, expert) order, no cache slots.
    EmulatedDevice(const ModelConfig& config, const ModelWeights& weights, const Residency& residency,
                   double budget_bytes, int max_tokens, int threads, Isa isa,
                   int staging_slots = DEFAULT_STAGING_SLOTS);
    ~EmulatedDevice() override;

    const char* name() const override { return "emulated"; }
    // The kernel path and thread count its computes run on.
    Isa isa() const { return kernels_.isa; }
    int threads() const { return pool_.size(); }
    // rows in host memory.
    void start(int layer, const ExpertRows& rows, std::span<const DeviceTask> tasks,
               std::span<const SlotCopy> extra) override;
    void wait() override;

private:
    // One op of the pipeline's list; events need nothing, since the ops run
    // in the order they were enqueued.
    struct Op {
        bool copy = false;  // copy (layer, task.expert) into slot `weights`; else compute
        int layer = 0;
        ExpertTask task;
        WeightSlot weights;
        ExpertRows rows;
    };
    // The DeviceQueue the pipeline drives: appends ops for the device thread.
    class OpQueue final : public DeviceQueue {
    public:
        explicit OpQueue(EmulatedDevice& device) : device_(device) {}
        void copy(int layer, int expert, WeightSlot to) override;
        void compute(int layer, const ExpertRows& rows, const ExpertTask& task, WeightSlot weights) override;
        void record(int, QueueStream) override {}
        void wait(QueueStream, int) override {}
        void host_wait(int) override { device_.wait_for_ops(); }

    private:
        EmulatedDevice& device_;
    };

    // Memory slot: resident slots first, then the staging slots.
    std::byte* slot_memory(WeightSlot w) {
        return memory_.get() + size_t(w.staging ? pipeline_.n_resident() + w.index : w.index) * slot_bytes_;
    }
    // Copies an expert's w1, w3, w2 (each in its own type) one after the
    // other into a slot; slot_weights gives the views of a slot holding an
    // expert of that layer.
    void copy_expert(std::byte* dst, int layer, int expert) const;
    ExpertWeights slot_weights(std::byte* slot, int layer) const;
    void run(const Op& op);
    void worker();
    void wait_for_ops();

    const ModelConfig& config_;
    const ModelWeights& weights_;
    OpQueue queue_{*this};
    int max_tokens_;
    const KernelTable& kernels_;           // its computes' kernel path
    std::unique_ptr<std::byte[]> memory_;  // (n_resident + S) slots: resident slots, then staging
    std::vector<float> scratch_;           // 2 * max_tokens * hidden_dim
    ThreadPool pool_;                      // the device's compute: its own threads
    std::vector<Op> enqueued_;             // by the engine thread during start()

    std::mutex mutex_;
    std::condition_variable cv_;
    std::vector<Op> ops_, running_;  // waiting for the device thread; being run by it
    uint64_t ops_in_ = 0, ops_done_ = 0;
    bool stop_ = false;
    std::thread thread_;
};
