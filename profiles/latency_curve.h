// The latency curves of one expert as plain numbers and their formulas: how
// long it takes on the CPU or on the device for n tokens, and how long
// copying its weights to the device takes; and one timed measurement. The
// calibration file (calibration.h) stores them; placement/latency_model.h
// fits them to measurements and plans with them. Pure arithmetic: no
// fitting, no measuring here.
#pragma once

// Time of one expert over n tokens:
//   ms(n) = fixed_ms + max(stream_ms, n * per_token_ms)
// fixed_ms: launch and fork/join overhead; stream_ms: reading the weights
// once (memory-bound side); per_token_ms: the FLOPs of one token
// (compute-bound side); the two sides overlap, hence the max.
//
// Large batches (n >= large_from; 0 = never): the CPU expert FFN switches
// to a blocked path that first repacks each weight block for reuse across
// many tokens and then computes; repacking does not overlap the compute:
//   ms(n) = fixed_ms + pack_ms + n * large_per_token_ms
// large_from is the active kernel table's ffn_packed_min_m (AVX2 48,
// AVX512_BF16 128, AVX-512 and scalar never). The segment exists because a
// switch of that kind (measured on Zen 4 when it sat at n = 32: 2.7x the
// time of n = 16) is a step no single max-form curve fits within 15 %.
// No tokens, no work: ms(n <= 0) = 0.
struct LatencyCurve {
    double fixed_ms = 0;
    double stream_ms = 0;
    double per_token_ms = 0;
    int large_from = 0;
    double pack_ms = 0;
    double large_per_token_ms = 0;
    double ms(double n_tokens) const;
};

// Time to copy `bytes` to the device: latency_ms + bytes / bytes_per_ms
// (0 for no bytes; infinite without a device).
struct CopyCurve {
    double latency_ms = 0;
    double bytes_per_ms = 0;  // 0 = no device to copy to
    double ms(double bytes) const;
};

// One measurement.
struct TimingPoint {
    double x = 0;   // n_tokens for a LatencyCurve, bytes for a CopyCurve
    double ms = 0;  // measured
};
