// compare_logits / require_logits_close (see logit_compare.h).
#include "logit_compare.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>

LogitComparison compare_logits(const std::vector<float>& device, const std::vector<float>& cpu, int vocab) {
    LogitComparison r;
    REQUIRE(device.size() == cpu.size());
    REQUIRE(vocab > 0);
    REQUIRE(cpu.size() % size_t(vocab) == 0);
    r.positions = int(cpu.size() / size_t(vocab));
    double scale = 0;
    for (float v : cpu) scale = std::max(scale, std::fabs(double(v)));
    r.tolerance = LOGIT_TOL * (1.0 + scale);
    std::vector<double> per(size_t(r.positions), 0.0);
    for (int p = 0; p < r.positions; p++) {
        double w = 0;
        for (size_t i = size_t(p) * vocab; i < size_t(p + 1) * vocab; i++) {
            if (!std::isfinite(device[i])) r.finite = false;
            w = std::max(w, std::fabs(double(device[i]) - cpu[i]));
        }
        per[size_t(p)] = w;
        r.worst = std::max(r.worst, w);
        const bool over = w > r.tolerance;
        if (over && r.first_over < 0) r.first_over = p;
        r.over += over;
        if (over || p % 16 == 0 || p == r.positions - 1) {
            char cell[48];
            std::snprintf(cell, sizeof cell, " %d:%.4f%s", p, w, over ? "!" : "");
            r.profile += cell;
        }
    }
    std::vector<double> sorted = per;
    std::nth_element(sorted.begin(), sorted.begin() + sorted.size() / 2, sorted.end());
    r.median = sorted.empty() ? 0 : sorted[sorted.size() / 2];
    return r;
}

bool logits_close(const LogitComparison& r) {
    return r.finite && r.over * 10 <= r.positions && r.median <= r.tolerance / 2;
}

void require_logits_close(const std::vector<float>& device, const std::vector<float>& cpu, int vocab) {
    const LogitComparison r = compare_logits(device, cpu, vocab);
    INFO("positions " << r.positions << ", tolerance " << r.tolerance << ", worst " << r.worst << ", median "
                      << r.median << ", over the tolerance " << r.over << " (first " << r.first_over
                      << "); position:error" << r.profile);
    REQUIRE(logits_close(r));
}
