// HybridExpertExecutor (see hybrid_executor.h).
#include "engine/devices/hybrid_executor.h"

#include <cassert>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "engine/model/weights.h"

namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

HybridExpertExecutor::HybridExpertExecutor(const ModelConfig& config, Backend& backend, ExpertExecutor& cpu,
                                           ExpertDevice* device, const LatencyModel& model, double expert_bytes)
    : backend_(backend),
      cpu_(cpu),
      device_(device),
      planner_(model, expert_bytes, std::max(1, config.n_experts)),
      expert_bytes_(expert_bytes),
      step_(config.n_layers, std::max(1, config.n_experts)) {
    assert(!device || model.has_device);
    // The planner prices the pipeline the device runs: the same slot count.
    if (device && device->staging_slots() != model.staging_slots)
        throw std::invalid_argument("hybrid executor: the latency model prices " + std::to_string(model.staging_slots) +
                                    " staging slots, the device has " + std::to_string(device->staging_slots()));
    size_t n = size_t(std::max(1, config.n_experts));
    inputs_.resize(n);
    sites_.resize(n);
    cpu_tasks_.reserve(n);
    device_tasks_.reserve(n);
    device_copy_.reserve(n);
}

void HybridExpertExecutor::run_layer(int layer, const ExpertRows& rows, std::span<const ExpertTask> tasks) {
    const size_t n = tasks.size();
    assert(n <= inputs_.size());
    for (size_t i = 0; i < n; i++)
        inputs_[i] = {tasks[i].n_tokens, device_ && device_->resident(layer, tasks[i].expert)};
    auto t_plan = Clock::now();
    PlanCost predicted = planner_.plan({inputs_.data(), n}, {sites_.data(), n});
    step_.planner_ms += ms_between(t_plan, Clock::now());

    cpu_tasks_.clear();
    device_tasks_.clear();
    device_copy_.clear();
    for (size_t i = 0; i < n; i++) {
        ExpertSite site = sites_[i];
        size_t cell = size_t(layer) * step_.n_experts + tasks[i].expert;
        step_.tokens[int(site)][cell] += uint64_t(tasks[i].n_tokens);
        step_.runs[int(site)]++;
        if (site == ExpertSite::CPU) {
            cpu_tasks_.push_back(tasks[i]);
        } else {
            device_tasks_.push_back(tasks[i]);
            device_copy_.push_back(site == ExpertSite::COPY ? 1 : 0);
            if (site == ExpertSite::COPY) step_.copy_bytes += uint64_t(expert_bytes_);
        }
    }

    auto t0 = Clock::now();
    if (!device_tasks_.empty()) device_->start(layer, rows, device_tasks_, device_copy_);
    if (!cpu_tasks_.empty()) {
        try {
            backend_.rows_to_host(cpu_tasks_);
            cpu_.run_layer(layer, backend_.host_rows(), cpu_tasks_);
            backend_.rows_from_host(cpu_tasks_);
        } catch (...) {
            // The device's tasks still read and write the rows: let them
            // finish before the error leaves the layer.
            if (!device_tasks_.empty()) device_->wait();
            throw;
        }
    }
    auto t_cpu = Clock::now();
    if (!device_tasks_.empty()) device_->wait();
    auto t_end = Clock::now();

    step_.layers++;
    step_.predicted_cpu_ms += predicted.cpu_ms;
    step_.predicted_device_ms += predicted.device_ms;
    step_.predicted_ms += predicted.makespan_ms();
    step_.measured_cpu_ms += ms_between(t0, t_cpu);
    step_.measured_ms += ms_between(t0, t_end);
    if (!device_tasks_.empty()) step_.measured_device_ms += device_->last_busy_ms();
    const size_t l = size_t(layer);
    step_.layer_predicted_cpu_ms[l] += predicted.cpu_ms;
    step_.layer_predicted_device_ms[l] += predicted.device_ms;
    step_.layer_measured_cpu_ms[l] += ms_between(t0, t_cpu);
    if (!device_tasks_.empty()) step_.layer_measured_device_ms[l] += device_->last_busy_ms();
}
