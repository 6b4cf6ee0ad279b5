// The curves' formulas (see latency_curve.h).
#include "profiles/latency_curve.h"

#include <algorithm>
#include <limits>

double LatencyCurve::ms(double n_tokens) const {
    if (n_tokens <= 0) return 0;  // no tokens: the expert does not run
    if (large_from > 0 && n_tokens >= large_from) return fixed_ms + pack_ms + n_tokens * large_per_token_ms;
    return fixed_ms + std::max(stream_ms, n_tokens * per_token_ms);
}

double CopyCurve::ms(double bytes) const {
    if (bytes <= 0) return 0;
    if (!(bytes_per_ms > 0)) return std::numeric_limits<double>::infinity();
    return latency_ms + bytes / bytes_per_ms;
}
