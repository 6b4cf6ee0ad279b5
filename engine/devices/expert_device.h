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
    // Time the device spent on the last start()'s tasks, copies included,
    // by its own clock; valid after wait().
    virtual double last_busy_ms() const = 0;

    // Slots a copied expert runs from: with two or more, the next copy
    // overlaps the current expert's compute (a two-stage pipeline).
    virtual int staging_slots() const = 0;
    virtual double budget_bytes() const = 0;    // device memory given to experts
    virtual double resident_bytes() const = 0;  // held by the resident slots (pinned and cache)
    virtual uint64_t copied_bytes()
        const = 0;                           // moved by start() so far, extra copies too (excluding the initial load)
    virtual int resident_slots() const = 0;  // pinned and cache slots
    // What each resident slot holds now (model layers; layer -1: empty).
    virtual std::span<const SlotExpert> slots() const = 0;
};
