// Device setup at load time: turns EngineOptions' device flags into a
// budget, a static plan (popularity profile or even spread), a latency model
// and the device itself. Today the only device is the emulated one (a test
// double and dry run); the CUDA device plugs in here.
#pragma once
#include <memory>

#include "cpu_kernels/thread_pool.h"
#include "engine/engine.h"
#include "engine/expert_device.h"
#include "engine/weights.h"
#include "placement/latency_model.h"

struct DeviceSetup {
    PlacementInfo info;
    LatencyModel latency;
    std::unique_ptr<ExpertDevice> device;  // null: every expert on the CPU
};

// Throws MoeError for a budget too small for one expert, a device on a dense
// model, or a bad profile.
DeviceSetup device_setup(const EngineOptions& options, const ModelConfig& config, const ModelWeights& weights,
                         int ctx, ThreadPool& pool);
