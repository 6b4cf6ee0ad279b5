// ExpertPipeline: how a device runs one layer's device tasks, as pure host
// logic over an abstract queue of two streams (DeviceQueue), so the same
// ordering runs on CUDA streams and events (cuda_expert_device.h), on the
// emulated device (emulated_device.h, in order on one thread) and on the
// fake queue of the unit tests. It owns the table of what each resident
// slot holds (the pinned experts' slots, then the cache slots, whose
// contents change as copies land in them) and the staging-slot
// bookkeeping. It must not touch memory, CUDA or the clock: a queue does
// the work. Which expert goes where is the caller's decision
// (placement/cached_placement.h); the pipeline orders it safely.
//
// The contract, which the placement planner prices:
//   * tasks computed from a resident slot first, in input order, on the
//     compute stream;
//   * then the copied tasks in input order: copied task j (j-th among the
//     layer's copies) is copied into its cache slot, or into staging slot
//     k mod S when it has none (k-th staging copy); its copy (copy stream)
//     follows the copy of j - 1 and, into a staging slot, waits for the
//     compute that last read that slot (k - S, or the previous layer's,
//     unless a host wait since then guarantees it finished); its compute
//     waits for its copy;
//   * then the extra copies (prefetches, fills) into cache slots, after
//     the layer's last compute is enqueued: they only use the copy
//     stream's time, and a later compute from such a slot waits for them.
//   * A copy into a resident slot that a compute read since the last host
//     wait waits for the computes enqueued so far (a drain): an evicted
//     expert is never overwritten while it is read.
// With only staging copies, copied task j ends at
//     copy_end(j)    = max(copy_end(j - 1), compute_end(j - S)) + copy(j)
//     compute_end(j) = max(compute_end(j - 1), copy_end(j)) + compute(j)
// with compute_end(-1) = the residents' compute time (layer start 0); a
// copy into a cache slot waits for no compute, so it ends no later.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "engine/devices/expert_executor.h"
#include "placement/latency_model.h"  // DEFAULT_STAGING_SLOTS: two, so one copy overlaps the previous compute
#include "placement/residency.h"

// Where a compute reads its expert's weights, or a copy writes them:
// resident slot `index` (pinned or cache), or staging slot `index`.
struct WeightSlot {
    bool staging = false;
    int index = 0;
};

// What a resident slot holds: (layer, expert), or layer -1 when empty.
struct SlotExpert {
    int layer = -1, expert = -1;
};

// One task of a layer on the device. slot >= 0: the resident slot its
// weights are in (copy false) or are copied into first (copy true, a cache
// slot); slot -1 with copy: copied through a staging slot.
struct DeviceTask {
    ExpertTask task;
    int slot = -1;
    bool copy = false;
};

// An extra copy into resident slot `slot` (a cache slot): a prefetch or a fill.
struct SlotCopy {
    int layer = 0, expert = 0, slot = 0;
};

enum class QueueStream : uint8_t { COPY, COMPUTE };

// A device's two in-order streams and its events, as the pipeline drives
// them. Every call only enqueues, except host_wait. Events follow CUDA's
// rules: wait() waits for the record of the event that was enqueued last
// before the wait() call; the pipeline never waits for an event it has not
// recorded.
class DeviceQueue {
public:
    virtual ~DeviceQueue() = default;
    // Copy stream: the weights of (layer, expert) into slot `to`.
    virtual void copy(int layer, int expert, WeightSlot to) = 0;
    // Compute stream: task's rows of rows.y from its rows of rows.x with the
    // expert weights in `weights`.
    virtual void compute(int layer, const ExpertRows& rows, const ExpertTask& task, WeightSlot weights) = 0;
    // Records event on stream: it completes when the stream reaches it.
    virtual void record(int event, QueueStream stream) = 0;
    // stream waits until the event's last record has completed.
    virtual void wait(QueueStream stream, int event) = 0;
    // The host blocks until the event's last record has completed.
    virtual void host_wait(int event) = 0;
};

class ExpertPipeline {
public:
    // Events, numbered 0 .. n_events(S) - 1. The first three are for timing.
    static constexpr int EVENT_LAYER_START = 0;  // compute stream, before the layer's first compute
    static constexpr int EVENT_COPY_START = 1;   // copy stream, before the layer's first copy (if any)
    static constexpr int EVENT_LAYER_DONE = 2;   // compute stream, after the layer's last compute
    static constexpr int EVENT_DRAIN = 3;        // compute stream: the computes enqueued so far (a drain)
    static constexpr int EVENT_EXTRA_DONE = 4;   // copy stream, after the last extra copy
    static int n_events(int staging_slots) { return 5 + 2 * staging_slots; }
    static bool timing_event(int event) { return event < 3; }
    int event_copied(int j) const { return 5 + j % staging_; }       // copy j of a layer done
    int event_freed(int slot) const { return 5 + staging_ + slot; }  // compute from staging slot done

    // slots: what each resident slot holds at the start (the device
    // uploads them), pinned slots then cache slots. std::invalid_argument
    // for staging_slots < 1, an expert outside (n_layers, n_experts) or one
    // held twice.
    ExpertPipeline(int n_layers, int n_experts, std::span<const SlotExpert> slots, int staging_slots);
    // Resident slots 0, 1, ... hold residency's experts in (layer, expert)
    // order; no cache slots.
    ExpertPipeline(const Residency& residency, int staging_slots);
    static std::vector<SlotExpert> slots_of(const Residency& residency);

    int staging_slots() const { return staging_; }
    int n_resident() const { return int(held_.size()); }  // resident slots (pinned and cache)
    // Resident slot holding (layer, expert), -1 when none does.
    int resident_slot(int layer, int expert) const { return slot_[size_t(layer) * n_experts_ + expert]; }
    // What each resident slot holds now, in slot order.
    std::span<const SlotExpert> residents() const { return held_; }

    // Enqueues one layer's tasks and then the extra copies on queue as the
    // contract says, and returns. A task not copied must name the slot
    // holding its expert; a copy's slot (-1: staging) must be a resident
    // slot, and afterwards holds that expert. Throws std::invalid_argument
    // (nothing enqueued) when not. Two start()s may follow each other
    // without a wait(): slots stay ordered.
    void start(DeviceQueue& queue, int layer, const ExpertRows& rows, std::span<const DeviceTask> tasks,
               std::span<const SlotCopy> extra = {});
    // The host waits for every compute started so far (EVENT_LAYER_DONE);
    // extra copies may still run.
    void wait(DeviceQueue& queue);
    // Copies in the last start(): the tasks' and the extra ones.
    int last_copies() const { return last_copies_; }
    int last_extra() const { return last_extra_; }

private:
    void check_slot(int slot, const char* what) const;
    void place(int slot, int layer, int expert);  // slot now holds (layer, expert)
    void drain(DeviceQueue& queue, int slot);     // a copy into `slot` waits for the computes that read it

    int n_layers_, n_experts_;
    int staging_;
    std::vector<int> slot_;         // (n_layers, n_experts) resident slot, -1 when not resident
    std::vector<SlotExpert> held_;  // resident slot -> what it holds
    // Per staging slot: a compute from it was enqueued after the last host
    // wait, so a copy into it must wait for event_freed first.
    std::vector<uint8_t> in_use_;
    std::vector<uint8_t> read_;  // per resident slot: a compute read it since the last host wait
    std::vector<uint8_t>
        pending_;  // per resident slot: an extra copy into it, not yet waited for by the compute stream
    bool any_pending_ = false;
    bool started_ = false;  // EVENT_LAYER_DONE recorded since the last wait()
    int last_copies_ = 0, last_extra_ = 0;
};
