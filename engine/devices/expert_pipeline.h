// ExpertPipeline: how a device runs one layer's device tasks, as pure host
// logic over an abstract queue of two streams (DeviceQueue), so the same
// ordering runs on CUDA streams and events (cuda_expert_device.h), on the
// emulated device (emulated_device.h, in order on one thread) and on the
// fake queue of the unit tests. It owns the resident table ((layer, expert)
// -> resident slot) and the staging-slot bookkeeping. It must not touch
// memory, CUDA or the clock: a queue does the work.
//
// The contract, which the placement planner prices:
//   * resident tasks first, in input order, on the compute stream;
//   * then the copied tasks in input order: copied task j (j-th among the
//     layer's copies) runs from staging slot j mod S. Its copy (copy stream)
//     follows the copy of j - 1 and waits for the compute that last read the
//     slot (j - S, or the previous layer's, unless a host wait since then
//     guarantees it finished); its compute waits for its copy.
// So with S >= 2 copy j + 1 overlaps compute j, and the first copy overlaps
// the resident computes. Copied task j ends at
//     copy_end(j)    = max(copy_end(j - 1), compute_end(j - S)) + copy(j)
//     compute_end(j) = max(compute_end(j - 1), copy_end(j)) + compute(j)
// with compute_end(-1) = the residents' compute time (layer start 0).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "engine/devices/expert_executor.h"
#include "placement/latency_model.h"  // DEFAULT_STAGING_SLOTS: two, so one copy overlaps the previous compute
#include "placement/residency.h"

// Where a compute reads its expert's weights: resident slot `index`, or
// staging slot `index`.
struct WeightSlot {
    bool staging = false;
    int index = 0;
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
    // Copy stream: the weights of (layer, expert) into staging slot `slot`.
    virtual void copy(int layer, int expert, int slot) = 0;
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
    static int n_events(int staging_slots) { return 3 + 2 * staging_slots; }
    static bool timing_event(int event) { return event < 3; }
    int event_copied(int slot) const { return 3 + slot; }            // copy into slot done
    int event_freed(int slot) const { return 3 + staging_ + slot; }  // compute from slot done

    // Resident slots 0, 1, ... go to residency's experts in (layer, expert)
    // order. staging_slots >= 1, else std::invalid_argument.
    ExpertPipeline(const Residency& residency, int staging_slots);

    int staging_slots() const { return staging_; }
    int n_resident() const { return int(residents_.size()); }
    // Resident slot of (layer, expert), -1 when not resident.
    int resident_slot(int layer, int expert) const { return slot_[size_t(layer) * n_experts_ + expert]; }
    struct Expert {
        int layer = 0, expert = 0;
    };
    // The expert held by each resident slot, in slot order (for the upload).
    std::span<const Expert> residents() const { return residents_; }

    // Enqueues one layer's tasks on queue as the contract says and returns.
    // copy[i] != 0: tasks[i] is copied (it must not be resident); otherwise
    // it must be resident. Throws std::invalid_argument when not. Two
    // start()s may follow each other without a wait(): slots stay ordered.
    void start(DeviceQueue& queue, int layer, const ExpertRows& rows, std::span<const ExpertTask> tasks,
               std::span<const uint8_t> copy);
    // The host waits for every compute started so far (EVENT_LAYER_DONE).
    void wait(DeviceQueue& queue);
    // Copies in the last start().
    int last_copies() const { return last_copies_; }

private:
    int n_experts_;
    int staging_;
    std::vector<int> slot_;  // (n_layers, n_experts) resident slot, -1 when not resident
    std::vector<Expert> residents_;
    // Per staging slot: a compute from it was enqueued after the last host
    // wait, so a copy into it must wait for event_freed first.
    std::vector<uint8_t> in_use_;
    bool started_ = false;  // EVENT_LAYER_DONE recorded since the last wait()
    int last_copies_ = 0;
};
