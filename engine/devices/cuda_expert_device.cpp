// CudaExpertDevice (see cuda_expert_device.h): the pipeline's ops on CUDA
// streams and events, the resident upload and the choice of copy source.
#include "engine/devices/cuda_expert_device.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "base/errors.h"
#include "engine/model/cost.h"
#include "gpu_kernels/gpu_kernels.h"

namespace {

constexpr double GIB = double(1u << 30);
constexpr int PROBE_EXPERTS = 4;  // experts copied per round when measuring a copy source
constexpr int PROBE_ROUNDS = 3;   // timed rounds after one warm-up; the best counts

bool quantized(const ExpertWeights& e) {
    return dtype_quantized(e.w1.type) || dtype_quantized(e.w3.type) || dtype_quantized(e.w2.type);
}

std::string bytes_text(double bytes) {
    char text[64];
    std::snprintf(text, sizeof text, "%.0f bytes (%.2f GiB)", bytes, bytes / GIB);
    return text;
}

}  // namespace

CudaExpertDevice::CudaExpertDevice(const ModelConfig& config, const ModelWeights& weights, const Residency& residency,
                                   double budget_bytes, int max_tokens, GpuStream compute, GpuBlas& blas,
                                   int staging_slots, CopyMode mode)
    : CudaExpertDevice(config, weights, ExpertPipeline::slots_of(residency), residency.n_resident(), budget_bytes,
                       max_tokens, compute, blas, staging_slots, mode) {
    if (residency.n_layers() != config.n_layers || residency.n_experts() != config.n_experts)
        throw std::invalid_argument("CUDA expert device: the residency's shape is not the model's");
}

CudaExpertDevice::CudaExpertDevice(const ModelConfig& config, const ModelWeights& weights,
                                   std::span<const SlotExpert> slots, int pinned_slots, double budget_bytes,
                                   int max_tokens, GpuStream compute, GpuBlas& blas, int staging_slots, CopyMode mode)
    : ExpertDevice(config.n_layers, std::max(1, config.n_experts), slots, staging_slots, expert_slot_bytes(weights),
                   budget_bytes),
      config_(config),
      weights_(weights),
      max_tokens_(max_tokens),
      compute_(compute),
      blas_(blas) {
    if (blas.stream() != compute)
        throw std::invalid_argument("CUDA expert device: the cuBLAS handle must be bound to the compute stream");
    if (pinned_slots < 0 || pinned_slots > pipeline_.n_resident())
        throw std::invalid_argument("CUDA expert device: more pinned slots than resident slots");

    const int n_slots = pipeline_.n_resident() + staging_slots;
    const double need = double(n_slots) * double(slot_bytes_);
    if (need > budget_bytes)
        throw MoeError("CUDA device: " + std::to_string(pipeline_.n_resident()) + " resident slots plus " +
                       std::to_string(staging_slots) + " staging slots need " + bytes_text(need) +
                       ", more than the experts' budget of " + bytes_text(budget_bytes));
    const size_t scratch_f32 = size_t(2) * max_tokens * config.hidden_dim * sizeof(float);
    const size_t scratch_bf16 = size_t(max_tokens) * std::max(config.dim, config.hidden_dim) * sizeof(bf16);
    bool any_quantized = false;
    for (const LayerWeights& L : weights.layers) any_quantized = any_quantized || quantized(L.experts.at(0));
    const size_t scratch_dequant = any_quantized ? GPU_DEQUANT_PIECE_ELEMS * sizeof(bf16) : 0;
    size_t free_bytes = 0, total_bytes = 0;
    gpu_mem_info(&free_bytes, &total_bytes);
    const double device_need = need + double(scratch_f32) + double(scratch_bf16) + double(scratch_dequant);
    if (device_need > double(free_bytes))
        throw MoeError("CUDA device: the experts' slots and scratch need " + bytes_text(device_need) + ", but only " +
                       bytes_text(double(free_bytes)) + " of the device's " + bytes_text(double(total_bytes)) +
                       " are free");
    slots_ = GpuBuffer(size_t(n_slots) * slot_bytes_);
    scratch_f32_ = GpuBuffer(scratch_f32);
    scratch_bf16_ = GpuBuffer(scratch_bf16);
    scratch_dequant_ = GpuBuffer(scratch_dequant);

    for (int e = 0; e < ExpertPipeline::n_events(staging_slots); e++)
        events_.push_back(std::make_unique<GpuEvent>(ExpertPipeline::timing_event(e)));
    for (int k = 0; k < PINNED_BUFFERS; k++) {
        pinned_.emplace_back(slot_bytes_);
        staged_.push_back(std::make_unique<GpuEvent>());
        dma_done_.push_back(std::make_unique<GpuEvent>());
    }
    // One layer's copies and extra copies, twice over: more in flight makes enqueue_copy wait.
    jobs_.resize(size_t(4) * std::max(1, config.n_experts));

    // The residents go up through pinned staging: they are not registered,
    // whichever source the copies use later.
    choice_.source = CopySource::STAGED;
    for (int r = 0; r < pipeline_.n_resident(); r++) {
        const SlotExpert& e = pipeline_.residents()[size_t(r)];
        if (e.layer >= 0)
            enqueue_copy(weights.layers[size_t(e.layer)].experts[size_t(e.expert)], slot_memory({false, r}));
    }
    sync_copies();
    choose_copy_source(mode, pinned_slots);
}

CudaExpertDevice::~CudaExpertDevice() {
    // Nothing may still read the memory about to be freed or unregistered
    // (the compute stream is the backend's; a start() may not have been
    // waited for). A destructor must not throw.
    try {
        gpu_synchronize();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "CUDA expert device: %s\n", e.what());
    }
}

unsigned char* CudaExpertDevice::slot_memory(WeightSlot w) const {
    const size_t slot = size_t(w.staging ? pipeline_.n_resident() + w.index : w.index);
    return slots_.as<unsigned char>() + slot * slot_bytes_;
}

ExpertWeights CudaExpertDevice::slot_views(int layer, unsigned char* base) const {
    return expert_in_slot(weights_.layers[size_t(layer)].experts.at(0), base);
}

void CudaExpertDevice::run_stage_job(void* arg) {
    const StageJob& job = *static_cast<const StageJob*>(arg);
    char* dst = static_cast<char*>(job.dst);
    for (int i = 0; i < job.parts.n; i++)
        std::memcpy(dst + job.parts.part[i].offset, job.parts.part[i].data, job.parts.part[i].bytes);
}

void CudaExpertDevice::enqueue_copy(const ExpertWeights& w, unsigned char* dst) {
    const ExpertParts parts = expert_parts(w);
    if (choice_.source == CopySource::REGISTERED) {
        for (int i = 0; i < parts.n; i++)
            gpu_copy_h2d(dst + parts.part[i].offset, parts.part[i].data, parts.part[i].bytes, copy_.get());
        return;
    }
    // A job's memory must stay put until its host function has run.
    if (n_jobs_ == jobs_.size()) sync_copies();
    const int k = next_pinned_;
    next_pinned_ = (k + 1) % PINNED_BUFFERS;
    StageJob& job = jobs_[n_jobs_++];
    job = {pinned_[size_t(k)].data(), parts};
    // The memcpy into buffer k waits for the DMA out of it (the copy before
    // last); the DMA waits for the memcpy. Each wait is enqueued after its
    // record, so it waits for that record.
    if (pinned_used_[k]) gpu_stream_wait(stage_.get(), *dma_done_[size_t(k)]);
    gpu_launch_host_func(stage_.get(), run_stage_job, &job);
    staged_[size_t(k)]->record(stage_.get());
    gpu_stream_wait(copy_.get(), *staged_[size_t(k)]);
    gpu_copy_h2d(dst, pinned_[size_t(k)].data(), parts.slot_bytes, copy_.get());
    dma_done_[size_t(k)]->record(copy_.get());
    pinned_used_[k] = true;
}

// Every DMA waited for its memcpy, so once the copy stream is idle every
// job has run.
void CudaExpertDevice::sync_copies() {
    copy_.synchronize();
    n_jobs_ = 0;
    extra_in_flight_ = false;
}

void CudaExpertDevice::register_experts(const std::vector<SlotExpert>& experts) {
    const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
    // Whole pages: two registrations must not share one.
    std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
    for (const SlotExpert& e : experts) {
        const ExpertParts parts = expert_parts(weights_.layers[size_t(e.layer)].experts[size_t(e.expert)]);
        for (int i = 0; i < parts.n; i++) {
            const uintptr_t begin = reinterpret_cast<uintptr_t>(parts.part[i].data);
            ranges.push_back({begin / page * page, (begin + parts.part[i].bytes + page - 1) / page * page});
        }
    }
    std::sort(ranges.begin(), ranges.end());
    std::vector<std::pair<uintptr_t, uintptr_t>> merged;
    for (const auto& r : ranges) {
        if (!merged.empty() && r.first <= merged.back().second)
            merged.back().second = std::max(merged.back().second, r.second);
        else
            merged.push_back(r);
    }
    for (const auto& [begin, end] : merged)
        registrations_.emplace_back(reinterpret_cast<const void*>(begin), size_t(end - begin), true);
}

double CudaExpertDevice::measure_copies(CopySource source, const std::vector<SlotExpert>& experts) {
    choice_.source = source;
    double best_s = 0, bytes = 0;
    for (const SlotExpert& e : experts)
        bytes += double(weights_.layers[size_t(e.layer)].experts[size_t(e.expert)].bytes());
    for (int round = 0; round <= PROBE_ROUNDS; round++) {
        auto t0 = std::chrono::steady_clock::now();
        for (size_t i = 0; i < experts.size(); i++) {
            const ExpertWeights& w = weights_.layers[size_t(experts[i].layer)].experts[size_t(experts[i].expert)];
            enqueue_copy(w, slot_memory({true, int(i % size_t(pipeline_.staging_slots()))}));
        }
        sync_copies();
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (round > 0 && (best_s == 0 || s < best_s)) best_s = s;  // round 0 warms up
    }
    return bytes / best_s / 1e9;
}

void CudaExpertDevice::choose_copy_source(CopyMode mode, int pinned_slots) {
    // The experts a copy may ever move: every one not pinned (dense layers have none).
    std::vector<SlotExpert> copied;
    for (int l = 0; l < config_.n_layers; l++)
        for (int e = 0; e < config_.n_experts; e++) {
            const int slot = pipeline_.resident_slot(l, e);
            if (config_.layer_is_moe(l) && (slot < 0 || slot >= pinned_slots)) copied.push_back({l, e});
        }

    choice_ = CopySourceChoice{};
    if (copied.empty()) {
        choice_.choice = CopyChoice::NOTHING_TO_COPY;
    } else if (mode == CopyMode::STAGED) {
        choice_.choice = CopyChoice::BY_CALLER;
    } else if (mode == CopyMode::REGISTERED) {
        choice_.source = CopySource::REGISTERED;
        choice_.choice = CopyChoice::BY_CALLER;
    } else {
        std::vector<SlotExpert> probe(copied.begin(), copied.begin() + std::min<size_t>(copied.size(), PROBE_EXPERTS));
        choice_.staged_gb_s = measure_copies(CopySource::STAGED, probe);
        try {
            register_experts(probe);
            choice_.registered_gb_s = measure_copies(CopySource::REGISTERED, probe);
        } catch (const GpuError& e) {
            choice_.choice = CopyChoice::REGISTER_REFUSED;
            choice_.error = e.what();
        }
        sync_copies();           // no DMA may still read the probe's pages
        registrations_.clear();  // they are registered again with all the others below
        choice_.source = choice_.registered_gb_s > choice_.staged_gb_s ? CopySource::REGISTERED : CopySource::STAGED;
    }
    if (choice_.source == CopySource::REGISTERED) {
        try {
            register_experts(copied);
        } catch (const GpuError& e) {
            registrations_.clear();
            if (mode == CopyMode::REGISTERED) throw;
            choice_.source = CopySource::STAGED;
            choice_.choice = CopyChoice::REGISTER_ALL_REFUSED;
            choice_.error = e.what();
        }
    }
    // Pinned buffers only serve staging.
    if (choice_.source == CopySource::REGISTERED || copied.empty()) pinned_.clear();
}

void CudaExpertDevice::start(int layer, const ExpertRows& rows, std::span<const DeviceTask> tasks,
                             std::span<const SlotCopy> extra) {
    for (const DeviceTask& t : tasks)
        if (t.task.n_tokens > max_tokens_)
            throw std::out_of_range("CUDA expert device: " + std::to_string(t.task.n_tokens) + " tokens for expert " +
                                    std::to_string(t.task.expert) + " of layer " + std::to_string(layer) +
                                    ", more than its scratch holds (" + std::to_string(max_tokens_) + ")");
    pipeline_.start(queue_, layer, rows, tasks, extra);
    started_ = true;
    extra_in_flight_ = extra_in_flight_ || !extra.empty();
}

void CudaExpertDevice::wait() {
    if (!started_) return;
    pipeline_.wait(queue_);
    started_ = false;
    // Every copy of the layer came before a compute it waited for: all
    // staging jobs have run, unless extra copies (which no compute waits
    // for) were enqueued since the copy stream was last idle.
    if (!extra_in_flight_) n_jobs_ = 0;
    const GpuEvent& done = *events_[ExpertPipeline::EVENT_LAYER_DONE];
    double ms = done.ms_since(*events_[ExpertPipeline::EVENT_LAYER_START]);
    if (pipeline_.last_copies() > 0)
        ms = std::max(ms, double(done.ms_since(*events_[ExpertPipeline::EVENT_COPY_START])));
    last_busy_ms_ = ms;
}

void CudaExpertDevice::Queue::copy(int layer, int expert, WeightSlot to) {
    const ExpertWeights& w = d_.weights_.layers[size_t(layer)].experts[size_t(expert)];
    d_.enqueue_copy(w, d_.slot_memory(to));
    d_.copied_bytes_ += w.bytes();
}

void CudaExpertDevice::Queue::compute(int layer, const ExpertRows& rows, const ExpertTask& task, WeightSlot weights) {
    if (task.n_tokens == 0) return;
    const ExpertWeights e = d_.slot_views(layer, d_.slot_memory(weights));
    const size_t row = size_t(task.row) * d_.config_.dim;
    const GpuGemmScratch scratch{d_.scratch_bf16_.as<bf16>(), d_.scratch_dequant_.as<bf16>(),
                                 d_.scratch_dequant_.bytes() / sizeof(bf16)};
    gpu_expert_ffn(d_.blas_, rows.y + row, rows.x + row, e.w1, e.w3, e.w2, task.n_tokens, d_.scratch_f32_.as<float>(),
                   scratch, e.spec);
}

void CudaExpertDevice::Queue::record(int event, QueueStream stream) {
    d_.events_[size_t(event)]->record(d_.stream(stream));
}

void CudaExpertDevice::Queue::wait(QueueStream stream, int event) {
    gpu_stream_wait(d_.stream(stream), *d_.events_[size_t(event)]);
}

void CudaExpertDevice::Queue::host_wait(int event) {
    d_.events_[size_t(event)]->synchronize();
}
