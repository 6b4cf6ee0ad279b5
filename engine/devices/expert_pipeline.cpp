// ExpertPipeline (see expert_pipeline.h): the op list of one layer.
#include "engine/devices/expert_pipeline.h"

#include <cstdint>
#include <stdexcept>
#include <string>

ExpertPipeline::ExpertPipeline(const Residency& residency, int staging_slots)
    : n_experts_(residency.n_experts()),
      staging_(staging_slots),
      slot_(size_t(residency.n_layers()) * residency.n_experts(), -1) {
    if (staging_slots < 1)
        throw std::invalid_argument("expert pipeline: " + std::to_string(staging_slots) +
                                    " staging slots; a device needs at least 1");
    for (int l = 0; l < residency.n_layers(); l++)
        for (int e = 0; e < residency.n_experts(); e++)
            if (residency.resident(l, e)) {
                slot_[size_t(l) * n_experts_ + e] = int(residents_.size());
                residents_.push_back({l, e});
            }
    in_use_.assign(size_t(staging_), 0);
}

void ExpertPipeline::start(DeviceQueue& queue, int layer, const ExpertRows& rows, std::span<const ExpertTask> tasks,
                           std::span<const uint8_t> copy) {
    if (tasks.size() != copy.size())
        throw std::invalid_argument("expert pipeline: " + std::to_string(tasks.size()) + " tasks but " +
                                    std::to_string(copy.size()) + " copy flags");
    if (layer < 0 || size_t(layer + 1) * n_experts_ > slot_.size())
        throw std::invalid_argument("expert pipeline: no layer " + std::to_string(layer));
    for (size_t i = 0; i < tasks.size(); i++) {
        const int e = tasks[i].expert;
        if (e < 0 || e >= n_experts_)
            throw std::invalid_argument("expert pipeline: layer " + std::to_string(layer) + " has no expert " +
                                        std::to_string(e));
        if ((resident_slot(layer, e) >= 0) == (copy[i] != 0))
            throw std::invalid_argument(
                "expert pipeline: expert " + std::to_string(e) + " of layer " + std::to_string(layer) +
                (copy[i] ? " is resident but marked for a copy" : " is neither resident nor copied"));
    }

    queue.record(EVENT_LAYER_START, QueueStream::COMPUTE);
    for (size_t i = 0; i < tasks.size(); i++)
        if (!copy[i]) queue.compute(layer, rows, tasks[i], {false, resident_slot(layer, tasks[i].expert)});

    // Copy j is enqueued after compute j - S (which recorded event_freed of
    // its slot), so its wait picks up that record.
    int j = 0;
    for (size_t i = 0; i < tasks.size(); i++) {
        if (!copy[i]) continue;
        const int s = j % staging_;
        if (in_use_[s]) queue.wait(QueueStream::COPY, event_freed(s));
        if (j == 0) queue.record(EVENT_COPY_START, QueueStream::COPY);
        queue.copy(layer, tasks[i].expert, s);
        queue.record(event_copied(s), QueueStream::COPY);
        queue.wait(QueueStream::COMPUTE, event_copied(s));
        queue.compute(layer, rows, tasks[i], {true, s});
        queue.record(event_freed(s), QueueStream::COMPUTE);
        in_use_[s] = 1;
        j++;
    }
    queue.record(EVENT_LAYER_DONE, QueueStream::COMPUTE);
    started_ = true;
    last_copies_ = j;
}

void ExpertPipeline::wait(DeviceQueue& queue) {
    if (!started_) return;
    queue.host_wait(EVENT_LAYER_DONE);
    // Every compute enqueued so far came before that record on the compute
    // stream: no slot is read any more.
    in_use_.assign(size_t(staging_), 0);
    started_ = false;
}
