// ExpertPipeline (see expert_pipeline.h): the op list of one layer.
#include "engine/devices/expert_pipeline.h"

#include <cstdint>
#include <stdexcept>
#include <string>

std::vector<SlotExpert> ExpertPipeline::slots_of(const Residency& residency) {
    std::vector<SlotExpert> slots;
    for (int l = 0; l < residency.n_layers(); l++)
        for (int e = 0; e < residency.n_experts(); e++)
            if (residency.resident(l, e)) slots.push_back({l, e});
    return slots;
}

ExpertPipeline::ExpertPipeline(const Residency& residency, int staging_slots)
    : ExpertPipeline(residency.n_layers(), residency.n_experts(), slots_of(residency), staging_slots) {}

ExpertPipeline::ExpertPipeline(int n_layers, int n_experts, std::span<const SlotExpert> slots, int staging_slots)
    : n_layers_(n_layers),
      n_experts_(n_experts),
      staging_(staging_slots),
      slot_(size_t(n_layers) * n_experts, -1),
      held_(slots.size()) {
    if (staging_slots < 1)
        throw std::invalid_argument("expert pipeline: " + std::to_string(staging_slots) +
                                    " staging slots; a device needs at least 1");
    for (size_t s = 0; s < slots.size(); s++) {
        const SlotExpert& e = slots[s];
        if (e.layer < 0) continue;
        if (e.layer >= n_layers || e.expert < 0 || e.expert >= n_experts)
            throw std::invalid_argument("expert pipeline: slot " + std::to_string(s) + " holds no expert of the model");
        if (resident_slot(e.layer, e.expert) >= 0)
            throw std::invalid_argument("expert pipeline: expert " + std::to_string(e.expert) + " of layer " +
                                        std::to_string(e.layer) + " is in two slots");
        place(int(s), e.layer, e.expert);
    }
    in_use_.assign(size_t(staging_), 0);
    read_.assign(held_.size(), 0);
    pending_.assign(held_.size(), 0);
}

void ExpertPipeline::place(int slot, int layer, int expert) {
    SlotExpert& h = held_[size_t(slot)];
    if (h.layer >= 0) slot_[size_t(h.layer) * n_experts_ + h.expert] = -1;
    h = {layer, expert};
    slot_[size_t(layer) * n_experts_ + expert] = slot;
}

void ExpertPipeline::check_slot(int slot, const char* what) const {
    if (slot < 0 || slot >= n_resident())
        throw std::invalid_argument(std::string("expert pipeline: ") + what + " into resident slot " +
                                    std::to_string(slot) + " of " + std::to_string(n_resident()));
}

void ExpertPipeline::drain(DeviceQueue& queue, int slot) {
    if (!read_[size_t(slot)]) return;
    queue.record(EVENT_DRAIN, QueueStream::COMPUTE);
    queue.wait(QueueStream::COPY, EVENT_DRAIN);
    // Every compute enqueued so far is behind that wait.
    std::fill(read_.begin(), read_.end(), 0);
}

void ExpertPipeline::start(DeviceQueue& queue, int layer, const ExpertRows& rows, std::span<const DeviceTask> tasks,
                           std::span<const SlotCopy> extra) {
    if (layer < 0 || layer >= n_layers_)
        throw std::invalid_argument("expert pipeline: no layer " + std::to_string(layer));
    for (const DeviceTask& t : tasks) {
        const int e = t.task.expert;
        if (e < 0 || e >= n_experts_)
            throw std::invalid_argument("expert pipeline: layer " + std::to_string(layer) + " has no expert " +
                                        std::to_string(e));
        if (t.copy) {
            if (t.slot >= 0) check_slot(t.slot, "a copy");
            if (resident_slot(layer, e) >= 0)
                throw std::invalid_argument("expert pipeline: expert " + std::to_string(e) + " of layer " +
                                            std::to_string(layer) + " is resident but marked for a copy");
        } else if (t.slot < 0 || t.slot >= n_resident() || resident_slot(layer, e) != t.slot) {
            throw std::invalid_argument("expert pipeline: expert " + std::to_string(e) + " of layer " +
                                        std::to_string(layer) + " is not in resident slot " + std::to_string(t.slot));
        }
    }
    for (size_t i = 0; i < extra.size(); i++) {
        const SlotCopy& c = extra[i];
        check_slot(c.slot, "an extra copy");
        if (c.layer < 0 || c.layer >= n_layers_ || c.expert < 0 || c.expert >= n_experts_)
            throw std::invalid_argument("expert pipeline: an extra copy of no expert of the model");
        // One slot per expert: not one resident already (unless this start
        // overwrites its slot first), nor copied by this layer or an earlier
        // extra copy.
        const int held = resident_slot(c.layer, c.expert);
        bool twice = false, overwritten = false;
        for (const DeviceTask& t : tasks) {
            twice = twice || (t.copy && t.slot >= 0 && c.layer == layer && t.task.expert == c.expert);
            overwritten = overwritten || (t.copy && held >= 0 && t.slot == held);
        }
        for (size_t k = 0; k < i; k++) {
            twice = twice || (extra[k].layer == c.layer && extra[k].expert == c.expert);
            overwritten = overwritten || (held >= 0 && extra[k].slot == held);
        }
        twice = twice || (held >= 0 && !overwritten);
        if (twice)
            throw std::invalid_argument("expert pipeline: an extra copy of expert " + std::to_string(c.expert) +
                                        " of layer " + std::to_string(c.layer) + ", which will already be resident");
    }

    queue.record(EVENT_LAYER_START, QueueStream::COMPUTE);
    for (const DeviceTask& t : tasks) {
        if (t.copy) continue;
        if (pending_[size_t(t.slot)]) {
            // Its weights came by an extra copy: wait for all of them once.
            queue.wait(QueueStream::COMPUTE, EVENT_EXTRA_DONE);
            std::fill(pending_.begin(), pending_.end(), 0);
        }
        queue.compute(layer, rows, t.task, {false, t.slot});
        read_[size_t(t.slot)] = 1;
    }

    // Copy j is enqueued after compute j - S (which recorded event_freed of
    // its slot), so its wait picks up that record.
    int j = 0, k = 0;
    for (const DeviceTask& t : tasks) {
        if (!t.copy) continue;
        WeightSlot to{true, k % staging_};
        if (t.slot < 0) {
            if (in_use_[size_t(to.index)]) queue.wait(QueueStream::COPY, event_freed(to.index));
            k++;
        } else {
            to = {false, t.slot};
            drain(queue, t.slot);
            place(t.slot, layer, t.task.expert);
        }
        if (j == 0) queue.record(EVENT_COPY_START, QueueStream::COPY);
        queue.copy(layer, t.task.expert, to);
        queue.record(event_copied(j), QueueStream::COPY);
        queue.wait(QueueStream::COMPUTE, event_copied(j));
        queue.compute(layer, rows, t.task, to);
        if (to.staging) {
            queue.record(event_freed(to.index), QueueStream::COMPUTE);
            in_use_[size_t(to.index)] = 1;
        } else {
            read_[size_t(to.index)] = 1;
        }
        j++;
    }
    queue.record(EVENT_LAYER_DONE, QueueStream::COMPUTE);
    started_ = true;
    last_copies_ = j;

    for (const SlotCopy& c : extra) {
        drain(queue, c.slot);
        place(c.slot, c.layer, c.expert);
        queue.copy(c.layer, c.expert, {false, c.slot});
        pending_[size_t(c.slot)] = 1;
    }
    if (!extra.empty()) queue.record(EVENT_EXTRA_DONE, QueueStream::COPY);
    last_extra_ = int(extra.size());
}

void ExpertPipeline::wait(DeviceQueue& queue) {
    if (!started_) return;
    queue.host_wait(EVENT_LAYER_DONE);
    // Every compute enqueued so far came before that record on the compute
    // stream: no slot is read any more. Extra copies may still run.
    in_use_.assign(size_t(staging_), 0);
    std::fill(read_.begin(), read_.end(), 0);
    started_ = false;
}
