// Latency curves, their fits, the roofline curve and the nominal GPU (see
// latency_model.h). The fits are small weighted linear least-squares
// problems solved in closed form; no allocation beyond the caller's points.
#include "placement/latency_model.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "profiles/calibration.h"

namespace {

// ---- Nominal desktop GPU (dry runs only; not a measurement) ----------------
// PCIe 4.0 x16: 32 GB/s raw per direction, about 25 GB/s achieved for large
// pinned host-to-device copies; about 10 us per transfer to set up.
constexpr double NOMINAL_PCIE_GB_S = 25.0;
constexpr double NOMINAL_PCIE_LATENCY_MS = 0.01;
// RTX 4090-class card: about 1000 GB/s of memory bandwidth (1008 spec) and
// about 150 TFLOP/s dense bf16 with fp32 accumulation (tensor cores, no
// sparsity); about 20 us of launch overhead for an expert's three GEMMs.
constexpr double NOMINAL_GPU_MEMORY_GB_S = 1000.0;
constexpr double NOMINAL_GPU_BF16_GFLOP_S = 150000.0;
constexpr double NOMINAL_GPU_FIXED_MS = 0.02;

// GB/s -> bytes per ms.
constexpr double BYTES_PER_MS_PER_GB_S = 1e6;

constexpr double INF = std::numeric_limits<double>::infinity();

void check_points(std::span<const TimingPoint> points, const char* what) {
    if (points.size() < 2)
        throw std::invalid_argument(std::string(what) + ": " + std::to_string(points.size()) +
                                    " points (at least 2 needed)");
    for (const TimingPoint& p : points)
        if (!(p.ms > 0) || !std::isfinite(p.ms) || !(p.x > 0) || !std::isfinite(p.x))
            throw std::invalid_argument(std::string(what) + ": point (" + std::to_string(p.x) + ", " +
                                        std::to_string(p.ms) + " ms): x and ms must be positive and finite");
    if (std::all_of(points.begin(), points.end(), [&](const TimingPoint& p) { return p.x == points[0].x; }))
        throw std::invalid_argument(std::string(what) + ": every point has x = " + std::to_string(points[0].x) +
                                    " (at least 2 distinct x needed)");
}

// Weighted linear least squares with up to 5 unknowns: minimise
// sum_i w_i (a_i . theta - y_i)^2 over the unknowns whose bit is set in
// `free` (the others stay 0). Normal equations by Gaussian elimination with
// partial pivoting; false when they are singular.
constexpr int N_PARAMS = 5;  // fixed, stream, per_token, pack, large_per_token
using Params = std::array<double, N_PARAMS>;

struct Row {
    Params a;
    double y, w;
};

bool solve_least_squares(std::span<const Row> rows, unsigned free, Params& theta) {
    int idx[N_PARAMS], k = 0;
    for (int j = 0; j < N_PARAMS; j++)
        if (free & (1u << j)) idx[k++] = j;
    double m[N_PARAMS][N_PARAMS + 1] = {};
    for (const Row& r : rows)
        for (int p = 0; p < k; p++) {
            for (int q = 0; q < k; q++) m[p][q] += r.w * r.a[idx[p]] * r.a[idx[q]];
            m[p][k] += r.w * r.a[idx[p]] * r.y;
        }
    double scale = 0;
    for (int p = 0; p < k; p++) scale = std::max(scale, std::abs(m[p][p]));
    for (int c = 0; c < k; c++) {
        int piv = c;
        for (int r = c + 1; r < k; r++)
            if (std::abs(m[r][c]) > std::abs(m[piv][c])) piv = r;
        if (!(std::abs(m[piv][c]) > 1e-12 * scale)) return false;
        for (int q = 0; q <= k; q++) std::swap(m[c][q], m[piv][q]);
        for (int r = 0; r < k; r++) {
            if (r == c) continue;
            double f = m[r][c] / m[c][c];
            for (int q = c; q <= k; q++) m[r][q] -= f * m[c][q];
        }
    }
    theta = {};
    for (int p = 0; p < k; p++) theta[idx[p]] = m[p][k] / m[p][p];
    return true;
}

// Sum of squared relative errors of a curve over the points.
double relative_sse(const LatencyCurve& c, std::span<const TimingPoint> points) {
    double s = 0;
    for (const TimingPoint& p : points) {
        double e = (c.ms(p.x) - p.ms) / p.ms;
        s += e * e;
    }
    return s;
}

}  // namespace

// For a given knee, the curve is linear in its five parameters: of the
// points below large_from, the first k (by n) are stream-bound, ms = fixed
// + stream, the others compute-bound, ms = fixed + n * per_token; points at
// or above large_from give ms = fixed + pack + n * large_per_token. Every
// knee position and every subset of parameters held at zero (a
// non-negative fit) is solved in closed form; the candidate with the
// smallest true relative error of the curve wins. With exact data the right
// knee reproduces the data exactly.
LatencyCurve latency_curve_fit(std::span<const TimingPoint> points, int large_from) {
    check_points(points, "latency_curve_fit");
    std::vector<TimingPoint> sorted(points.begin(), points.end());
    std::sort(sorted.begin(), sorted.end(), [](const TimingPoint& a, const TimingPoint& b) { return a.x < b.x; });
    size_t n_small = sorted.size();
    if (large_from > 0) {
        n_small =
            size_t(std::count_if(sorted.begin(), sorted.end(), [&](const TimingPoint& p) { return p.x < large_from; }));
        if (sorted.size() - n_small < 2) large_from = 0, n_small = sorted.size();  // too few to fit the segment
    }
    std::vector<Row> rows(sorted.size());
    LatencyCurve best;
    double best_sse = INF;
    for (size_t knee = 0; knee <= n_small; knee++) {
        for (size_t i = 0; i < sorted.size(); i++) {
            double n = sorted[i].x, w = 1.0 / (sorted[i].ms * sorted[i].ms);
            if (i >= n_small)
                rows[i] = {{1.0, 0.0, 0.0, 1.0, n}, sorted[i].ms, w};
            else if (i < knee)
                rows[i] = {{1.0, 1.0, 0.0, 0.0, 0.0}, sorted[i].ms, w};
            else
                rows[i] = {{1.0, 0.0, n, 0.0, 0.0}, sorted[i].ms, w};
        }
        for (unsigned free = 1; free < (1u << N_PARAMS); free++) {
            Params t;
            if (!solve_least_squares(rows, free, t)) continue;
            if (std::any_of(t.begin(), t.end(), [](double v) { return v < 0; })) continue;
            LatencyCurve c{t[0], t[1], t[2], large_from, t[3], t[4]};
            double sse = relative_sse(c, sorted);
            if (sse < best_sse) best_sse = sse, best = c;
        }
    }
    if (!std::isfinite(best_sse))
        throw std::invalid_argument("latency_curve_fit: no non-negative curve fits the points");
    return best;
}

// ms = latency + bytes * (1 / bytes_per_ms): linear in (latency, 1 / rate);
// the latency is held at zero when the free fit would make it negative.
CopyCurve copy_curve_fit(std::span<const TimingPoint> points) {
    check_points(points, "copy_curve_fit");
    std::vector<Row> rows;
    for (const TimingPoint& p : points) rows.push_back({{1.0, p.x, 0.0, 0.0, 0.0}, p.ms, 1.0 / (p.ms * p.ms)});
    for (unsigned free : {3u, 2u}) {
        Params t;
        if (!solve_least_squares(rows, free, t)) continue;
        if (t[0] < 0 || !(t[1] > 0)) continue;
        return {t[0], 1.0 / t[1]};
    }
    throw std::invalid_argument("copy_curve_fit: copy time does not grow with bytes (need distinct sizes)");
}

LatencyCurve latency_curve_roofline(double weight_bytes, double flops_per_token, double bandwidth_gb_s,
                                    double peak_gflop_s) {
    if (!(bandwidth_gb_s > 0) || !(peak_gflop_s > 0))
        throw std::invalid_argument("latency_curve_roofline: bandwidth and peak must be positive");
    return {0.0, weight_bytes / (bandwidth_gb_s * BYTES_PER_MS_PER_GB_S),
            flops_per_token / (peak_gflop_s * BYTES_PER_MS_PER_GB_S)};
}

LatencyModel latency_model_nominal_gpu(const LatencyCurve& cpu, double weight_bytes, double flops_per_token) {
    LatencyModel m;
    m.cpu = cpu;
    m.device = latency_curve_roofline(weight_bytes, flops_per_token, NOMINAL_GPU_MEMORY_GB_S, NOMINAL_GPU_BF16_GFLOP_S);
    m.device.fixed_ms = NOMINAL_GPU_FIXED_MS;
    m.copy = {NOMINAL_PCIE_LATENCY_MS, NOMINAL_PCIE_GB_S * BYTES_PER_MS_PER_GB_S};
    m.has_device = true;
    m.staging_slots = NOMINAL_GPU_STAGING_SLOTS;
    return m;
}

LatencyModel latency_model_from_calibration(const Calibration& c) {
    LatencyModel m;
    m.cpu = c.cpu;
    m.has_device = c.has_device;
    if (c.has_device) {
        m.device = c.device;
        m.copy = c.copy;
    }
    if (c.has_device && c.has_side_by_side) {
        m.cpu_beside_copies = c.cpu_beside_copies;
        m.copy_beside_cpu = c.copy_beside_cpu;
    }
    return m;
}
