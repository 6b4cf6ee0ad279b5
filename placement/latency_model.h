// The latency model: how long one expert takes on the CPU and on the device
// for n tokens, and how long copying its weights to the device takes. Curves
// are fitted to measurements (`moe-server calibrate`) and cross-checked with
// the roofline (Hierarchical Roofline Model: bytes / measured bandwidth,
// FLOPs / measured peak). Pure arithmetic over plain numbers.
#pragma once
#include <span>
#include <string>

// Time of one expert over n tokens:
//   ms(n) = fixed_ms + max(stream_ms, n * per_token_ms)
// fixed_ms: launch and fork/join overhead; stream_ms: reading the weights
// once (memory-bound side); per_token_ms: the FLOPs of one token
// (compute-bound side).
struct LatencyCurve {
    double fixed_ms = 0;
    double stream_ms = 0;
    double per_token_ms = 0;
    double ms(double n_tokens) const;
};

// Time to copy `bytes` to the device: latency_ms + bytes / bytes_per_ms.
struct CopyCurve {
    double latency_ms = 0;
    double bytes_per_ms = 0;  // 0 = no device to copy to
    double ms(double bytes) const;
};

struct LatencyModel {
    LatencyCurve cpu;
    LatencyCurve device;
    CopyCurve copy;
    bool has_device = false;

    double cpu_ms(int n_tokens) const { return cpu.ms(n_tokens); }
    double device_ms(int n_tokens) const { return device.ms(n_tokens); }
    double copy_ms(double bytes) const { return copy.ms(bytes); }
};

struct TimingPoint {
    double x = 0;   // n_tokens for a LatencyCurve, bytes for a CopyCurve
    double ms = 0;  // measured
};

// Least-squares fits in relative error (every point weighs the same whatever
// its size). Throw std::invalid_argument for fewer than 2 points or a
// non-positive time.
LatencyCurve latency_curve_fit(std::span<const TimingPoint> points);
CopyCurve copy_curve_fit(std::span<const TimingPoint> points);

// The roofline curve of one expert: weight_bytes / bandwidth and
// flops_per_token / peak; fixed_ms = 0.
LatencyCurve latency_curve_roofline(double weight_bytes, double flops_per_token, double bandwidth_gb_s,
                                    double peak_gflop_s);

// A nominal desktop GPU for dry runs (`--emulate-gpu`): PCIe 4.0 x16 copies
// and a device curve of an RTX 4090-class card for the given expert shape.
// Documented in placement/README.md; never presented as a measurement.
LatencyModel latency_model_nominal_gpu(const LatencyCurve& cpu, double weight_bytes, double flops_per_token);
