// CudaExpertDevice: the device side of hybrid expert execution on a CUDA
// GPU (built only with CUDA: include it only under MOE_HAVE_CUDA). It holds
// resident slots in device memory (the pinned experts, then the cache
// slots; uploaded at construction, within a byte budget), copies an
// expert's weights into a cache slot or one of S staging slots on its own
// copy stream (and the extra copies, prefetches and fills, after the
// layer's own), and computes each expert with
// gpu_expert_ffn on the backend's compute stream (bf16 or block-quantized
// weights, in the model's own types: a slot holds an expert's w1 | w3 | w2
// bytes packed, as large as the largest layer's), in the order of
// ExpertPipeline (expert_pipeline.h): events order copy -> compute and keep
// a slot from being overwritten before its compute has read it, so with
// S >= 2 the next copy overlaps the current compute.
//
// Copies come from the memory-mapped weights one of two ways (CopySource),
// whichever copied faster when measured at construction (copy_source()):
//   * pinned staging: a host memcpy into one of two pinned buffers, run in
//     stream order by a host function on a stage stream (a CUDA driver
//     thread, not the engine's), then a DMA from it on the copy stream; the
//     memcpy of the next expert overlaps the DMA of this one;
//   * registered: the mapped expert weights page-locked in place with
//     cudaHostRegister (read-only), so the DMA reads them directly.
//
// The compute stream and cuBLAS handle are the CUDA backend's, so dense
// ops, gathers, expert computes and combines are ordered on one stream; the
// backend must outlive this device. Must not plan placement or touch the
// rows it is given beyond the tasks' own.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/devices/expert_device.h"
#include "engine/devices/expert_pipeline.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"
#include "engine/devices/device_options.h"
#include "gpu_kernels/gpu_runtime.h"
#include "placement/residency.h"

// How the constructor picks the copy source: measure both (the default),
// or take one (tests of each path).
enum class CopyMode : uint8_t { MEASURE, STAGED, REGISTERED };

class CudaExpertDevice final : public ExpertDevice {
public:
    // Uploads what each resident slot holds at start-up (`slots`, model
    // layers; layer -1: an empty cache slot; the first `pinned_slots` never
    // change) into device memory and chooses the copy source (mode) for the
    // experts a copy may move (all but the pinned). budget_bytes must hold
    // the resident slots plus staging_slots (>= 1) staging slots, and the
    // device must have that plus the scratch free; throws MoeError naming
    // the bytes otherwise. max_tokens: the most tokens one task may carry.
    // compute: the backend's stream, which blas must be bound to. Call with
    // the device current (gpu_set_device) on the engine thread.
    CudaExpertDevice(const ModelConfig& config, const ModelWeights& weights, std::span<const SlotExpert> slots,
                     int pinned_slots, double budget_bytes, int max_tokens, GpuStream compute, GpuBlas& blas,
                     int staging_slots = DEFAULT_STAGING_SLOTS, CopyMode mode = CopyMode::MEASURE);
    // The resident experts of `residency` pinned in (layer, expert) order, no cache slots.
    CudaExpertDevice(const ModelConfig& config, const ModelWeights& weights, const Residency& residency,
                     double budget_bytes, int max_tokens, GpuStream compute, GpuBlas& blas,
                     int staging_slots = DEFAULT_STAGING_SLOTS, CopyMode mode = CopyMode::MEASURE);
    ~CudaExpertDevice() override;
    CudaExpertDevice(const CudaExpertDevice&) = delete;
    CudaExpertDevice& operator=(const CudaExpertDevice&) = delete;

    const char* name() const override { return "cuda"; }
    // rows in device memory (the backend's expert_rows()).
    void start(int layer, const ExpertRows& rows, std::span<const DeviceTask> tasks,
               std::span<const SlotCopy> extra) override;
    // Blocks until every compute of the last start() has finished.
    void wait() override;
    // last_busy_ms(): from the layer's first op (first compute or first
    // copy) to its last compute's end, by the device's timing events.

    // The copy source in use and how it was chosen (CopySource, CopyChoice:
    // device_options.h, beside the PlacementInfo that carries it).
    const CopySourceChoice& copy_source() const { return choice_; }

private:
    // The DeviceQueue the pipeline drives: CUDA streams and events.
    class Queue final : public DeviceQueue {
    public:
        explicit Queue(CudaExpertDevice& device) : d_(device) {}
        void copy(int layer, int expert, WeightSlot to) override;
        void compute(int layer, const ExpertRows& rows, const ExpertTask& task, WeightSlot weights) override;
        void record(int event, QueueStream stream) override;
        void wait(QueueStream stream, int event) override;
        void host_wait(int event) override;

    private:
        CudaExpertDevice& d_;
    };

    // One host memcpy of an expert's w1, w3, w2 into a pinned buffer, run by
    // a host function on the stage stream; lives until that has run.
    struct StageJob {
        void* dst = nullptr;
        ExpertParts parts;  // each to dst + its offset
    };
    static constexpr int PINNED_BUFFERS = 2;  // one fills while the other's DMA runs
    static void run_stage_job(void* job);     // the host function: a memcpy a part

    unsigned char* slot_memory(WeightSlot w) const;
    // Layer `layer`'s expert views (types and shapes are the same for all
    // its experts) pointing into a slot: w1, w3, w2 packed from its start.
    ExpertWeights slot_views(int layer, unsigned char* base) const;
    GpuStream stream(QueueStream s) const { return s == QueueStream::COPY ? copy_.get() : compute_; }
    // Enqueues the copy of one expert's weights to dst (a slot) by the
    // current source, ending on the copy stream.
    void enqueue_copy(const ExpertWeights& w, unsigned char* dst);
    // Waits for every copy enqueued so far (and so every staging memcpy).
    void sync_copies();
    // Page-locks the given experts' weights in place (merged page ranges).
    void register_experts(const std::vector<SlotExpert>& experts);
    // Copies `experts` into the staging slots by `source` and returns GB/s
    // (best of a few rounds after a warm-up).
    double measure_copies(CopySource source, const std::vector<SlotExpert>& experts);
    void choose_copy_source(CopyMode mode, int pinned_slots);

    const ModelConfig& config_;
    const ModelWeights& weights_;
    Queue queue_{*this};
    int max_tokens_;
    GpuStream compute_;
    GpuBlas& blas_;

    GpuBuffer slots_;                   // (n_resident + S, expert): resident slots, then staging; each w1 | w3 | w2
    GpuBuffer scratch_f32_;             // 2 * max_tokens * hidden_dim floats
    GpuBuffer scratch_bf16_;            // max_tokens * max(dim, hidden_dim) bf16
    GpuBuffer scratch_dequant_;         // quantized experts: GPU_DEQUANT_PIECE_ELEMS bf16 (gpu_matmul)
    std::vector<PinnedBuffer> pinned_;  // PINNED_BUFFERS of expert_bytes while staging; empty when registered
    std::vector<HostRegistration> registrations_;
    GpuStreamOwner copy_;                                       // DMAs
    GpuStreamOwner stage_;                                      // host memcpys into the pinned buffers
    std::vector<std::unique_ptr<GpuEvent>> events_;             // the pipeline's
    std::vector<std::unique_ptr<GpuEvent>> staged_, dma_done_;  // per pinned buffer: memcpy into it, DMA out of it done
    bool pinned_used_[PINNED_BUFFERS] = {false, false};         // dma_done_ recorded
    int next_pinned_ = 0;
    std::vector<StageJob> jobs_;  // since the last sync_copies(), or wait() when no extra copy is in flight
    size_t n_jobs_ = 0;
    bool extra_in_flight_ = false;  // a start() enqueued extra copies since the last sync_copies()

    CopySourceChoice choice_;
    bool started_ = false;  // a start() not yet waited for
};
