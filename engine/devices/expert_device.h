// ExpertDevice: the device side of hybrid expert execution. It holds
// resident slots (the pinned experts, then the cache slots), copies an
// expert's weights into a cache slot or a staging slot when the layer's
// plan says so, runs extra copies (prefetches, fills) on its copy stream,
// and computes its tasks asynchronously while the CPU runs its own. Which
// expert is in which slot is decided by the caller (the hybrid executor's
// CachedPlacement); the device orders the work safely (expert_pipeline.h).
// Implemented by the emulated device (engine/devices/emulated_device.h, a
// test double and dry run) and, when built with CUDA, by the CUDA executor.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>

#include "engine/devices/expert_executor.h"
#include "engine/devices/expert_pipeline.h"

class ExpertDevice {
public:
    virtual ~ExpertDevice() = default;
    virtual const char* name() const = 0;
    // Starts the layer's tasks as ExpertPipeline::start says (from their
    // resident slots, or copied into a cache or staging slot first), then
    // the extra copies, and returns at once. rows are in the memory the
    // device computes from (the backend's: host for the emulated device,
    // device memory for CUDA) and stay valid until wait() returns.
    virtual void start(int layer, const ExpertRows& rows, std::span<const DeviceTask> tasks,
                       std::span<const SlotCopy> extra) = 0;
    // Returns when every task of the last start() has written its output.
    virtual void wait() = 0;
    // The rest is every device's bookkeeping, kept here once:
    // Time the device spent on the last start()'s tasks, copies included,
    // by its own clock; valid after wait().
    double last_busy_ms() const { return last_busy_ms_; }
    // Slots a copied expert runs from: with two or more, the next copy
    // overlaps the current expert's compute (a two-stage pipeline).
    int staging_slots() const { return pipeline_.staging_slots(); }
    double budget_bytes() const { return budget_bytes_; }  // device memory given to experts
    // Held by the resident slots (pinned and cache).
    double resident_bytes() const { return double(pipeline_.n_resident()) * double(slot_bytes_); }
    // Moved by start() so far, extra copies too (excluding the initial load).
    uint64_t copied_bytes() const { return copied_bytes_; }
    int resident_slots() const { return pipeline_.n_resident(); }  // pinned and cache slots
    // What each resident slot holds now (model layers; layer -1: empty).
    std::span<const SlotExpert> slots() const { return pipeline_.residents(); }

protected:
    // slots: what each resident slot holds at start-up (model layers, layer
    // -1: an empty cache slot) of a model of n_layers x n_experts; slot_bytes:
    // one slot (an expert of the largest layer); budget_bytes: the device
    // memory given to experts (the device checks it holds its slots).
    ExpertDevice(int n_layers, int n_experts, std::span<const SlotExpert> slots, int staging_slots,
                 size_t slot_bytes, double budget_bytes)
        : pipeline_(n_layers, n_experts, slots, staging_slots), slot_bytes_(slot_bytes), budget_bytes_(budget_bytes) {}

    ExpertPipeline pipeline_;
    size_t slot_bytes_;
    double budget_bytes_;
    uint64_t copied_bytes_ = 0;
    double last_busy_ms_ = 0;
};
