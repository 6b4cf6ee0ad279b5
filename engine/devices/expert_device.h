// ExpertDevice: the device side of hybrid expert execution. It holds the
// resident experts, copies a non-resident expert's weights when the layer's
// plan says so, and computes its tasks asynchronously while the CPU runs its
// own. Implemented by the emulated device (engine/devices/emulated_device.h, a test
// double and dry run) and, when built with CUDA, by the CUDA executor.
#pragma once
#include <cstdint>
#include <span>

#include "engine/devices/expert_executor.h"

class ExpertDevice {
public:
    virtual ~ExpertDevice() = default;
    virtual const char* name() const = 0;
    virtual bool resident(int layer, int expert) const = 0;
    // Starts tasks[i] in order and returns at once; copy[i] != 0 copies that
    // expert's weights to the device first (through a staging slot). rows
    // are in the memory the device computes from (the backend's: host for
    // the emulated device, device memory for CUDA) and stay valid until
    // wait() returns.
    virtual void start(int layer, const ExpertRows& rows, std::span<const ExpertTask> tasks,
                       std::span<const uint8_t> copy) = 0;
    // Returns when every task of the last start() has written its output.
    virtual void wait() = 0;
    // Time the device spent on the last start()'s tasks, copies included,
    // by its own clock; valid after wait().
    virtual double last_busy_ms() const = 0;

    // Slots a copied expert runs from: with two or more, the next copy
    // overlaps the current expert's compute (a two-stage pipeline).
    virtual int staging_slots() const = 0;
    virtual double budget_bytes() const = 0;    // device memory given to experts
    virtual double resident_bytes() const = 0;  // held by resident experts
    virtual uint64_t copied_bytes() const = 0;  // moved by start() so far (excluding the initial load)
};
