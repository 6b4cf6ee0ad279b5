// EmulatedDevice (see emulated_device.h): device memory is a host buffer,
// copies are memcpy of each matrix in its own type, compute is expert_ffn on
// the device's own thread, kernel path and pool.
#include "engine/devices/emulated_device.h"

#include <algorithm>
#include <cassert>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>

#include "base/errors.h"
#include "cpu_kernels/kernels.h"
#include "engine/model/cost.h"

namespace {

double gib(double bytes) {
    return bytes / double(1u << 30);
}

const KernelTable& supported_table(Isa isa) {
    if (!isa_supported(isa))
        throw MoeError(std::string("emulated device: this CPU cannot run the ") + isa_name(isa) + " kernel path");
    return kernel_table(isa);
}

}  // namespace

EmulatedDevice::EmulatedDevice(const ModelConfig& config, const ModelWeights& weights, const Residency& residency,
                               double budget_bytes, int max_tokens, int threads, Isa isa, int staging_slots)
    : EmulatedDevice(config, weights, ExpertPipeline::slots_of(residency), budget_bytes, max_tokens, threads, isa,
                     staging_slots) {}

EmulatedDevice::EmulatedDevice(const ModelConfig& config, const ModelWeights& weights,
                               std::span<const SlotExpert> slots, double budget_bytes, int max_tokens, int threads,
                               Isa isa, int staging_slots)
    : ExpertDevice(config.n_layers, std::max(1, config.n_experts), slots, staging_slots,
                   expert_slot_bytes(weights), budget_bytes),
      config_(config),
      weights_(weights),
      max_tokens_(max_tokens),
      kernels_(supported_table(isa)),
      scratch_(size_t(2) * max_tokens * config.hidden_dim),
      pool_(threads) {
    const int n_slots = pipeline_.n_resident() + staging_slots;
    const double need = double(n_slots) * double(slot_bytes_);
    if (need > budget_bytes)
        throw MoeError("emulated device: " + std::to_string(pipeline_.n_resident()) + " resident slots plus " +
                       std::to_string(staging_slots) + " staging slots need " + std::to_string(gib(need)) +
                       " GiB, more than its budget of " + std::to_string(gib(budget_bytes)) + " GiB");
    memory_.reset(new std::byte[size_t(n_slots) * slot_bytes_]);
    for (int r = 0; r < pipeline_.n_resident(); r++) {
        const SlotExpert& e = pipeline_.residents()[size_t(r)];
        if (e.layer >= 0) copy_expert(slot_memory({false, r}), e.layer, e.expert);
    }
    // A copy and a compute per expert, and the extra copies (at most two layers' experts).
    const size_t max_ops = size_t(4) * std::max(1, config.n_experts);
    enqueued_.reserve(max_ops);
    ops_.reserve(max_ops);
    running_.reserve(max_ops);
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

ExpertWeights EmulatedDevice::slot_weights(std::byte* slot, int layer) const {
    return expert_in_slot(weights_.layers[size_t(layer)].experts[0], slot);
}

void EmulatedDevice::copy_expert(std::byte* dst, int layer, int expert) const {
    const ExpertParts p = expert_parts(weights_.layers[size_t(layer)].experts[size_t(expert)]);
    for (int i = 0; i < p.n; i++) std::memcpy(dst + p.part[i].offset, p.part[i].data, p.part[i].bytes);
}

void EmulatedDevice::OpQueue::copy(int layer, int expert, WeightSlot to) {
    Op op;
    op.copy = true;
    op.layer = layer;
    op.task.expert = expert;
    op.weights = to;
    device_.enqueued_.push_back(op);
    device_.copied_bytes_ += device_.weights_.layers[size_t(layer)].experts[size_t(expert)].bytes();
}

void EmulatedDevice::OpQueue::compute(int layer, const ExpertRows& rows, const ExpertTask& task, WeightSlot weights) {
    assert(task.n_tokens <= device_.max_tokens_);
    device_.enqueued_.push_back({false, layer, task, weights, rows});
}

void EmulatedDevice::start(int layer, const ExpertRows& rows, std::span<const DeviceTask> tasks,
                           std::span<const SlotCopy> extra) {
    enqueued_.clear();
    pipeline_.start(queue_, layer, rows, tasks, extra);
    {
        std::lock_guard lock(mutex_);
        ops_.insert(ops_.end(), enqueued_.begin(), enqueued_.end());
        ops_in_ += enqueued_.size();
    }
    cv_.notify_all();
}

void EmulatedDevice::wait() {
    pipeline_.wait(queue_);
}

void EmulatedDevice::wait_for_ops() {
    std::unique_lock lock(mutex_);
    const uint64_t target = ops_in_;
    cv_.wait(lock, [&] { return ops_done_ >= target; });
}

void EmulatedDevice::run(const Op& op) {
    if (op.copy) {
        copy_expert(slot_memory(op.weights), op.layer, op.task.expert);
        return;
    }
    const ExpertTask& t = op.task;
    if (t.n_tokens == 0) return;
    const ExpertWeights w = slot_weights(slot_memory(op.weights), op.layer);
    const size_t row = size_t(t.row) * config_.dim;
    expert_ffn(kernels_, op.rows.y + row, op.rows.x + row, w.w1, w.w3, w.w2, t.n_tokens, scratch_.data(), pool_,
               w.spec);
}

// The device thread: runs the ops in the order they were enqueued, which
// honours every event of the pipeline (each wait follows its record).
void EmulatedDevice::worker() {
    std::unique_lock lock(mutex_);
    for (;;) {
        cv_.wait(lock, [&] { return stop_ || !ops_.empty(); });
        if (stop_) return;
        running_.swap(ops_);
        lock.unlock();
        auto t0 = std::chrono::steady_clock::now();
        for (const Op& op : running_) run(op);
        double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        lock.lock();
        last_busy_ms_ = ms;
        ops_done_ += running_.size();
        running_.clear();
        cv_.notify_all();
    }
}
