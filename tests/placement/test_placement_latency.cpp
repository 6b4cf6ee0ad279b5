// The latency model: curve evaluation, the fits on synthetic timings from
// known parameters (exact and with +-3 % noise), bad input, the roofline
// curve, the nominal GPU (and its staging slots) and the conversion from a
// calibration file.
#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include "placement/latency_model.h"
#include "profiles/calibration.h"

namespace {

std::vector<TimingPoint> sample(const LatencyCurve& c, double noise, std::mt19937_64& rng) {
    std::uniform_real_distribution<double> d(-noise, noise);
    std::vector<TimingPoint> pts;
    for (int n = 1; n <= 256; n *= 2) pts.push_back({double(n), c.ms(n) * (1 + d(rng))});
    return pts;
}

void require_same_curve(const LatencyCurve& got, const LatencyCurve& want, double rel) {
    REQUIRE(got.large_from == want.large_from);
    REQUIRE(got.fixed_ms == Approx(want.fixed_ms).epsilon(rel).margin(rel * want.stream_ms));
    REQUIRE(got.stream_ms == Approx(want.stream_ms).epsilon(rel));
    REQUIRE(got.per_token_ms == Approx(want.per_token_ms).epsilon(rel));
    REQUIRE(got.pack_ms == Approx(want.pack_ms).epsilon(rel).margin(rel * want.stream_ms));
    REQUIRE(got.large_per_token_ms == Approx(want.large_per_token_ms).epsilon(rel));
}

}  // namespace

TEST_CASE("LatencyCurve: stream-bound, compute-bound, large-batch segment, no tokens", "[placement]") {
    LatencyCurve c{0.2, 0.8, 0.07};
    REQUIRE(c.ms(0) == 0);
    REQUIRE(c.ms(1) == Approx(1.0));
    REQUIRE(c.ms(8) == Approx(1.0));
    REQUIRE(c.ms(100) == Approx(7.2));
    c.large_from = 32;
    c.pack_ms = 1.0;
    c.large_per_token_ms = 0.06;
    REQUIRE(c.ms(16) == Approx(0.2 + 1.12));
    REQUIRE(c.ms(32) == Approx(0.2 + 1.0 + 1.92));
    CopyCurve copy{0.01, 25e6};
    REQUIRE(copy.ms(0) == 0);
    REQUIRE(copy.ms(25e6) == Approx(1.01));
    REQUIRE(std::isinf(CopyCurve{0.01, 0}.ms(1e6)));
}

TEST_CASE("latency_curve_fit recovers exact parameters", "[placement]") {
    std::mt19937_64 rng(1);
    SECTION("single segment, hand-picked") {
        LatencyCurve want{0.2, 0.8, 0.07};
        require_same_curve(latency_curve_fit(sample(want, 0, rng)), want, 1e-6);
    }
    SECTION("with the large-batch segment") {
        LatencyCurve want{0.19, 0.36, 0.071, 32, 1.1, 0.06};
        require_same_curve(latency_curve_fit(sample(want, 0, rng), 32), want, 1e-6);
    }
    SECTION("random parameters with the knee inside the measured range") {
        for (int t = 0; t < 200; t++) {
            std::uniform_real_distribution<double> u(0, 1);
            LatencyCurve want;
            want.fixed_ms = 0.5 * u(rng);
            want.per_token_ms = std::exp(std::log(1e-3) + u(rng) * std::log(1e3));
            // The knee (stream / per_token) leaves at least two compute-bound
            // points below the large-batch segment, or the fit cannot see per_token.
            bool large = t % 2;
            double knee_lo = 2.5, knee_hi = large ? 12.0 : 100.0;
            want.stream_ms = want.per_token_ms * std::exp(std::log(knee_lo) + u(rng) * std::log(knee_hi / knee_lo));
            if (large) {
                want.large_from = 64;
                want.pack_ms = want.stream_ms * u(rng);
                want.large_per_token_ms = want.per_token_ms * (0.5 + u(rng));
            }
            INFO("case " << t);
            require_same_curve(latency_curve_fit(sample(want, 0, rng), want.large_from), want, 1e-6);
        }
    }
}

TEST_CASE("latency_curve_fit with +-3 % noise: close parameters, predictions within 5 %", "[placement]") {
    std::mt19937_64 rng(7);
    for (int t = 0; t < 100; t++) {
        LatencyCurve want = t % 2 ? LatencyCurve{0.19, 0.36, 0.071, 32, 1.1, 0.06} : LatencyCurve{0.05, 2.0, 0.02};
        LatencyCurve got = latency_curve_fit(sample(want, 0.03, rng), want.large_from);
        INFO("case " << t);
        REQUIRE(got.large_from == want.large_from);
        REQUIRE(got.fixed_ms + got.stream_ms == Approx(want.fixed_ms + want.stream_ms).epsilon(0.05));
        REQUIRE(got.per_token_ms == Approx(want.per_token_ms).epsilon(0.15));
        if (want.large_from) REQUIRE(got.large_per_token_ms == Approx(want.large_per_token_ms).epsilon(0.05));
        for (int n = 1; n <= 256; n *= 2) REQUIRE(got.ms(n) == Approx(want.ms(n)).epsilon(0.05));
    }
}

TEST_CASE("latency_curve_fit: a large segment with fewer than two points falls back to one segment", "[placement]") {
    std::mt19937_64 rng(3);
    LatencyCurve want{0.2, 0.8, 0.07};
    LatencyCurve got = latency_curve_fit(sample(want, 0, rng), 256);
    require_same_curve(got, want, 1e-6);
}

TEST_CASE("copy_curve_fit recovers latency and bandwidth", "[placement]") {
    CopyCurve want{0.01, 25e6};
    std::vector<TimingPoint> pts;
    for (double b = 1e5; b <= 4e8; b *= 4) pts.push_back({b, want.ms(b)});
    CopyCurve got = copy_curve_fit(pts);
    REQUIRE(got.latency_ms == Approx(want.latency_ms).epsilon(1e-6));
    REQUIRE(got.bytes_per_ms == Approx(want.bytes_per_ms).epsilon(1e-6));

    std::mt19937_64 rng(5);
    std::uniform_real_distribution<double> d(-0.03, 0.03);
    for (int t = 0; t < 50; t++) {
        std::vector<TimingPoint> noisy;
        for (const TimingPoint& p : pts) noisy.push_back({p.x, p.ms * (1 + d(rng))});
        CopyCurve n = copy_curve_fit(noisy);
        REQUIRE(n.bytes_per_ms == Approx(want.bytes_per_ms).epsilon(0.05));
        REQUIRE(n.latency_ms == Approx(want.latency_ms).epsilon(0.3));
        for (const TimingPoint& p : pts) REQUIRE(n.ms(p.x) == Approx(p.ms).epsilon(0.05));
    }
}

TEST_CASE("the fits reject bad input", "[placement]") {
    std::vector<TimingPoint> one = {{1, 1.0}};
    REQUIRE_THROWS_AS(latency_curve_fit(one), std::invalid_argument);
    REQUIRE_THROWS_AS(copy_curve_fit(one), std::invalid_argument);
    for (double bad : {0.0, -1.0, double(NAN), double(INFINITY)}) {
        std::vector<TimingPoint> pts = {{1, 1.0}, {2, bad}, {4, 1.5}};
        REQUIRE_THROWS_AS(latency_curve_fit(pts), std::invalid_argument);
        REQUIRE_THROWS_AS(copy_curve_fit(pts), std::invalid_argument);
        std::vector<TimingPoint> bad_x = {{1, 1.0}, {bad, 1.2}};
        REQUIRE_THROWS_AS(latency_curve_fit(bad_x), std::invalid_argument);
    }
    std::vector<TimingPoint> same_x = {{1e6, 1.0}, {1e6, 1.1}};
    REQUIRE_THROWS_AS(copy_curve_fit(same_x), std::invalid_argument);
    REQUIRE_THROWS_AS(latency_curve_fit(same_x), std::invalid_argument);
}

TEST_CASE("roofline curve and the nominal GPU", "[placement]") {
    // mixtral-mini expert: 22 MB, 22 MFLOP per token.
    double bytes = 3.0 * 1024 * 3584 * 2, flops = 2.0 * 3 * 1024 * 3584;
    LatencyCurve roof = latency_curve_roofline(bytes, flops, 50.0, 200.0);
    REQUIRE(roof.fixed_ms == 0);
    REQUIRE(roof.stream_ms == Approx(bytes / 50e9 * 1e3));
    REQUIRE(roof.per_token_ms == Approx(flops / 200e9 * 1e3));
    REQUIRE_THROWS_AS(latency_curve_roofline(bytes, flops, 0, 200), std::invalid_argument);

    LatencyCurve cpu{0.2, 0.8, 0.07};
    LatencyModel m = latency_model_nominal_gpu(cpu, bytes, flops);
    REQUIRE(m.has_device);
    REQUIRE(m.staging_slots == 2);  // double buffering
    REQUIRE(m.cpu_ms(4) == cpu.ms(4));
    REQUIRE(m.copy_ms(bytes) == Approx(0.01 + bytes / 25e9 * 1e3));  // PCIe 4.0 x16
    REQUIRE(m.device_ms(1) == Approx(0.02 + bytes / 1000e9 * 1e3));  // 1000 GB/s
    REQUIRE(m.device_ms(100000) == Approx(0.02 + 1e5 * flops / 150e12 * 1e3));
}

TEST_CASE("latency_model_from_calibration carries every curve field", "[placement]") {
    Calibration c;
    c.cpu = {0.1, 0.2, 0.03, 32, 0.5, 0.025};
    LatencyModel m = latency_model_from_calibration(c);
    REQUIRE_FALSE(m.has_device);
    REQUIRE(m.cpu.large_from == 32);
    REQUIRE(m.cpu_ms(64) == Approx(0.1 + 0.5 + 64 * 0.025));
    REQUIRE(m.cpu_ms(2) == Approx(0.1 + 0.2));
    c.has_device = true;
    c.device = {0.02, 0.03, 0.0001};
    c.copy = {0.01, 2e7};
    m = latency_model_from_calibration(c);
    REQUIRE(m.has_device);
    REQUIRE(m.staging_slots == DEFAULT_STAGING_SLOTS);  // not in the file: the caller sets its device's
    REQUIRE(m.device_ms(1) == Approx(0.05));
    REQUIRE(m.copy_ms(2e7) == Approx(1.01));
    // Without side-by-side curves both sides are priced alone.
    REQUIRE_FALSE(m.side_by_side_curves());
    REQUIRE(m.cpu_ms(2, true) == m.cpu_ms(2));
    REQUIRE(m.copy_ms(2e7, true) == m.copy_ms(2e7));
    c.has_side_by_side = true;
    c.cpu_beside_copies = {0.3, 0.6, 0.09};
    c.copy_beside_cpu = {0.01, 1e7};
    m = latency_model_from_calibration(c);
    REQUIRE(m.side_by_side_curves());
    REQUIRE(m.cpu_ms(2, true) == Approx(0.3 + 0.6));
    REQUIRE(m.cpu_ms(2, false) == Approx(0.1 + 0.2));
    REQUIRE(m.copy_ms(2e7, true) == Approx(2.01));
    REQUIRE(m.copy_ms(2e7, false) == Approx(1.01));
}
