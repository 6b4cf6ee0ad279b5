// The latency model: how long one expert takes on the CPU and on the device
// for n tokens, and how long copying its weights to the device takes. Curves
// are fitted to measurements (`moe-server calibrate`) and cross-checked with
// the roofline (Hierarchical Roofline Model: bytes / measured bandwidth,
// FLOPs / measured peak). Pure arithmetic over plain numbers. The curves
// themselves (LatencyCurve, CopyCurve, TimingPoint) are profiles/'s, which
// stores them in the calibration file.
#pragma once
#include <optional>
#include <span>
#include <string>

#include "profiles/latency_curve.h"

struct Calibration;  // profiles/calibration.h

// Staging slots: the device buffers a non-resident expert is copied into
// before it computes there. With S slots the copy of the j-th copied expert
// of a layer waits for the compute of the (j - S)-th (which held the same
// slot), so S = 1 runs copy and compute in series and S = 2 (double
// buffering) lets one copy overlap the previous expert's compute. The
// pipeline is priced in placement/layer_plan.h. A device allocates
// DEFAULT_STAGING_SLOTS unless told otherwise; at most MAX_STAGING_SLOTS
// (more buy nothing: a layer never copies more experts than it routes).
constexpr int DEFAULT_STAGING_SLOTS = 2;
constexpr int MAX_STAGING_SLOTS = 64;

struct LatencyModel {
    LatencyCurve cpu;
    LatencyCurve device;
    CopyCurve copy;
    bool has_device = false;
    // The device's staging slots, in [1, MAX_STAGING_SLOTS]: whoever builds
    // the model for a device sets it to the slots that device allocates, and
    // the device budget (residency.h DeviceBudget::staging) reserves the same
    // number. Meaningless without a device.
    int staging_slots = DEFAULT_STAGING_SLOTS;

    // Side by side: where one layer step both runs experts on the CPU and
    // copies experts to the device, both read host memory at once, and each
    // side takes the curve `calibrate` measured with the other running (the
    // CPU experts while the copy engine streams; copies while the CPU runs
    // experts on every thread). Absent (no device, a calibration file
    // without them, the nominal GPU): the idle curve. placement/layer_plan.h
    // says which steps pay them.
    std::optional<LatencyCurve> cpu_beside_copies;
    std::optional<CopyCurve> copy_beside_cpu;

    double cpu_ms(int n_tokens) const { return cpu.ms(n_tokens); }
    double device_ms(int n_tokens) const { return device.ms(n_tokens); }
    double copy_ms(double bytes) const { return copy.ms(bytes); }
    double cpu_ms(int n_tokens, bool beside_copies) const {
        return beside_copies && cpu_beside_copies ? cpu_beside_copies->ms(n_tokens) : cpu.ms(n_tokens);
    }
    double copy_ms(double bytes, bool beside_cpu) const {
        return beside_cpu && copy_beside_cpu ? copy_beside_cpu->ms(bytes) : copy.ms(bytes);
    }
    bool side_by_side_curves() const { return cpu_beside_copies || copy_beside_cpu; }
};

// Least-squares fits in relative error (every point weighs the same whatever
// its size), all parameters non-negative. latency_curve_fit tries every knee
// position between the stream-bound and the compute-bound points below
// large_from and solves each in closed form (jointly with the large-batch
// segment when large_from > 0 and at least two points lie at or above it),
// so exact data is recovered exactly. large_from: where the kernels switch
// to their blocked path (the caller knows it; 0 = a single segment). Throw
// std::invalid_argument for fewer than 2 distinct x or a non-positive x or
// time.
LatencyCurve latency_curve_fit(std::span<const TimingPoint> points, int large_from = 0);
CopyCurve copy_curve_fit(std::span<const TimingPoint> points);

// The roofline curve of one expert: weight_bytes / bandwidth and
// flops_per_token / peak; fixed_ms = 0, a single segment.
LatencyCurve latency_curve_roofline(double weight_bytes, double flops_per_token, double bandwidth_gb_s,
                                    double peak_gflop_s);

// A nominal desktop GPU for dry runs (`--emulate-gpu`): PCIe 4.0 x16 copies,
// a device curve of an RTX 4090-class card for the given expert shape, and
// NOMINAL_GPU_STAGING_SLOTS (2, double buffering) staging slots.
// Documented in placement/README.md; never presented as a measurement.
constexpr int NOMINAL_GPU_STAGING_SLOTS = 2;
LatencyModel latency_model_nominal_gpu(const LatencyCurve& cpu, double weight_bytes, double flops_per_token);

// The model a calibration file describes (has_device and the device and copy
// curves only when the file has them, the side-by-side curves likewise). The file measures times, not the
// executor's buffers: staging_slots stays DEFAULT_STAGING_SLOTS, and the
// caller sets the slots of the device it runs on.
LatencyModel latency_model_from_calibration(const Calibration& c);
