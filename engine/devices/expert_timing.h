// Timing of the CPU expert FFN over a model's real expert weights, and its
// fit: the measurements behind calibration.h (`moe-server calibrate`, `bench
// latency`) and the quick probe at load when no calibration is cached. Every call runs the next
// (layer, expert) of a cycle, so the weights stream from memory as in
// decoding instead of sitting in cache.
#pragma once
#include <vector>

#include "cpu_kernels/thread_pool.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"
#include "placement/latency_model.h"

// latency_curve_fit of CPU expert FFN timings with the second segment where
// the active kernels switch to their blocked path (ffn_packed_min_m; the
// scalar path never switches and keeps one segment).
LatencyCurve expert_ffn_curve_fit(const std::vector<TimingPoint>& points);

// The (layer, expert) pairs whose flat index % stride == phase, thinned
// evenly over the layers to at most enough experts for cycle_bytes (at least
// 2): more than the caches, less than a large model (mixtral-8x7b cycles over
// 6 experts for 2 GB, not 256 that would not fit in memory).
std::vector<ExpertWeights> expert_cycle(const ModelWeights& w, double expert_bytes, int stride, int phase,
                                        double cycle_bytes);

// Median ms of expert_ffn (active ISA) at each n of ns over `reps`
// sweeps, for each cycle of experts: every call runs the next expert of its
// cycle, and the sweeps of the cycles alternate, so on a shared machine each
// cycle sees the same moments. The warm-up maps every expert's pages and
// runs one sweep of each cycle.
std::vector<std::vector<TimingPoint>> measure_expert_ffn(const ModelConfig& c,
                                                         const std::vector<std::vector<ExpertWeights>>& cycles,
                                                         const std::vector<int>& ns, int reps, ThreadPool& pool);
