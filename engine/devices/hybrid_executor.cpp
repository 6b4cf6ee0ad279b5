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

std::vector<int> moe_layers_of(const ModelConfig& c) {
    std::vector<int> moe;
    for (int l = 0; l < c.n_layers; l++)
        if (c.is_moe() && c.layer_is_moe(l)) moe.push_back(l);
    return moe;
}

}  // namespace

std::unique_ptr<CachedPlacement> make_cached_placement(const ModelConfig& config, const LatencyModel& model,
                                                       double expert_bytes, const Residency& pinned,
                                                       std::span<const uint64_t> popularity,
                                                       const CachedPlacementConfig& cache) {
    const int E = std::max(1, config.n_experts);
    if (pinned.n_layers() != config.n_layers || pinned.n_experts() != E)
        throw std::invalid_argument("make_cached_placement: the residency's shape is not the model's");
    if (!popularity.empty() && popularity.size() != size_t(config.n_layers) * size_t(E))
        throw std::invalid_argument("make_cached_placement: the popularity's shape is not the model's");
    const std::vector<int> moe = moe_layers_of(config);
    Residency compact(int(moe.size()), E);
    std::vector<uint64_t> counts;
    for (size_t i = 0; i < moe.size(); i++)
        for (int e = 0; e < E; e++) {
            compact.set(int(i), e, pinned.resident(moe[i], e));
            if (!popularity.empty()) counts.push_back(popularity[size_t(moe[i]) * E + e]);
        }
    return std::make_unique<CachedPlacement>(model, expert_bytes, compact, counts, cache);
}

std::vector<SlotExpert> device_slots(const ModelConfig& config, const CachedPlacement& placement) {
    const std::vector<int> moe = moe_layers_of(config);
    std::vector<SlotExpert> slots(size_t(placement.n_slots()));
    for (int s = 0; s < placement.n_slots(); s++) {
        const int k = placement.slot_key(s);
        if (k >= 0) slots[size_t(s)] = {moe[size_t(k / placement.n_experts())], k % placement.n_experts()};
    }
    return slots;
}

HybridExpertExecutor::HybridExpertExecutor(const ModelConfig& config, Backend& backend, ExpertExecutor& cpu,
                                           ExpertDevice* device, std::unique_ptr<CachedPlacement> placement)
    : backend_(backend),
      cpu_(cpu),
      device_(device),
      placement_(std::move(placement)),
      moe_index_(size_t(config.n_layers), -1),
      moe_layers_(moe_layers_of(config)),
      expert_bytes_(placement_ ? placement_->planner().expert_bytes() : 0),
      step_(config.n_layers, std::max(1, config.n_experts)) {
    if (!placement_) throw std::invalid_argument("hybrid executor: no placement");
    for (size_t i = 0; i < moe_layers_.size(); i++) moe_index_[size_t(moe_layers_[i])] = int(i);
    if (placement_->n_layers() != int(moe_layers_.size()) || placement_->n_experts() != std::max(1, config.n_experts))
        throw std::invalid_argument("hybrid executor: the placement is not over the model's MoE layers");
    const LatencyModel& model = placement_->planner().model();
    assert(!device || model.has_device);
    if (device) {
        // The planner prices the pipeline the device runs: the same slot count.
        if (device->staging_slots() != model.staging_slots)
            throw std::invalid_argument("hybrid executor: the latency model prices " +
                                        std::to_string(model.staging_slots) + " staging slots, the device has " +
                                        std::to_string(device->staging_slots()));
        if (device->resident_slots() != placement_->n_slots())
            throw std::invalid_argument("hybrid executor: the device has " + std::to_string(device->resident_slots()) +
                                        " resident slots, the placement " + std::to_string(placement_->n_slots()));
    }
    seen_ = placement_->stats();
    const size_t n = size_t(std::max(1, config.n_experts));
    experts_.resize(n);
    predicted_.resize(n);
    sites_.resize(n);
    cpu_tasks_.reserve(n);
    device_tasks_.reserve(n);
    extra_.reserve(2 * n);
}

bool HybridExpertExecutor::pinned(int layer, int expert) const {
    const int m = moe_index_[size_t(layer)];
    return m >= 0 && placement_->pinned(m, expert);
}

bool HybridExpertExecutor::cached(int layer, int expert) const {
    const int m = moe_index_[size_t(layer)];
    return m >= 0 && placement_->cached(m, expert);
}

void HybridExpertExecutor::run_layer(int layer, const ExpertRows& rows, std::span<const ExpertTask> tasks,
                                     const NextLayerGuess& next) {
    const size_t n = tasks.size();
    const int m = moe_index_[size_t(layer)];
    if (m < 0) throw std::invalid_argument("hybrid executor: layer " + std::to_string(layer) + " has no experts");
    assert(n <= experts_.size());
    for (size_t i = 0; i < n; i++) experts_[i] = {tasks[i].expert, tasks[i].n_tokens};
    auto t_plan = Clock::now();
    const uint64_t useful_before = placement_->stats().layer_prefetches_useful[size_t(m)];
    const PlanCost predicted = placement_->plan(m, {experts_.data(), n}, now_, {sites_.data(), n});
    step_.layer_prefetch_useful[size_t(layer)] +=
        placement_->stats().layer_prefetches_useful[size_t(m)] - useful_before;
    // The next layer's guess, for a prefetch into the copy stream's idle time.
    size_t n_guess = 0;
    int next_m = -1;
    if (device_ && placement_->prefetch() && next.layer >= 0 && next.layer < int(moe_index_.size())) {
        next_m = moe_index_[size_t(next.layer)];
        for (const ExpertTask& t : next.experts)
            if (n_guess < predicted_.size()) predicted_[n_guess++] = {t.expert, t.n_tokens};
    }
    std::span<const ExtraCopy> extra =
        device_ ? placement_->extra_copies(next_m, {predicted_.data(), n_guess}, now_) : std::span<const ExtraCopy>{};
    step_.planner_ms += ms_between(t_plan, Clock::now());
    now_++;

    cpu_tasks_.clear();
    device_tasks_.clear();
    extra_.clear();
    for (size_t i = 0; i < n; i++) {
        const StepSite site = sites_[i];
        const size_t cell = size_t(layer) * step_.n_experts + tasks[i].expert;
        step_.tokens[int(site.site)][cell] += uint64_t(tasks[i].n_tokens);
        step_.runs[int(site.site)]++;
        if (site.site == ExpertSite::CPU) {
            cpu_tasks_.push_back(tasks[i]);
        } else {
            device_tasks_.push_back({tasks[i], site.slot, site.site == ExpertSite::COPY});
            if (site.site == ExpertSite::COPY) step_.copy_bytes += uint64_t(expert_bytes_);
        }
    }
    for (const ExtraCopy& c : extra) {
        const int model_layer = moe_layers_[size_t(c.layer)];
        extra_.push_back({model_layer, c.expert, c.slot});
        step_.copy_bytes += uint64_t(expert_bytes_);
        if (c.prefetch) step_.layer_prefetch_copies[size_t(model_layer)]++;
    }
    const CachedPlacementStats& now = placement_->stats();
    step_.cache_hits += now.cache.cache_hits - seen_.cache.cache_hits;
    step_.cache_evictions += now.cache.evictions - seen_.cache.evictions;
    step_.cache_fills += now.fills - seen_.fills;
    step_.prefetch_copies += now.prefetches - seen_.prefetches;
    step_.prefetch_useful += now.prefetches_useful - seen_.prefetches_useful;
    seen_.cache = now.cache;
    seen_.fills = now.fills;
    seen_.prefetches = now.prefetches;
    seen_.prefetches_useful = now.prefetches_useful;

    const bool on_device = !device_tasks_.empty() || !extra_.empty();
    auto t0 = Clock::now();
    if (on_device) device_->start(layer, rows, device_tasks_, extra_);
    if (!cpu_tasks_.empty()) {
        try {
            backend_.rows_to_host(cpu_tasks_);
            cpu_.run_layer(layer, backend_.host_rows(), cpu_tasks_, {});
            backend_.rows_from_host(cpu_tasks_);
        } catch (...) {
            // The device's tasks still read and write the rows: let them
            // finish before the error leaves the layer.
            if (on_device) device_->wait();
            throw;
        }
    }
    auto t_cpu = Clock::now();
    if (on_device) device_->wait();
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
