// Placement in words (see placement_text.h).
#include "server/placement_text.h"

#include <algorithm>
#include <cstdio>

namespace {

// What the emulated device is, in every line that names it.
constexpr const char* EMULATED_WHAT = "test double, computes on the CPU";

}  // namespace

std::string placement_device_name(const PlacementInfo& p) {
    if (p.device == DeviceKind::EMULATED) return std::string("emulated GPU (") + EMULATED_WHAT + ")";
    return p.device_name;
}

std::string placement_summary(const PlacementInfo& p) {
    if (p.device == DeviceKind::NONE) return "device: none, every expert on the CPU (" + p.device_name + ")";
    constexpr double GIB = double(1u << 30);
    const char* plan = plan_kind_name(p.plan);
    char line[640];
    int n = 0;
    if (p.device == DeviceKind::CUDA)
        n = std::snprintf(line, sizeof line,
                          "device: %s, %.2f GiB: %d of %d experts resident (%.1f MiB each; dense %.2f GiB, KV %.2f "
                          "GiB, activations %.2f GiB, margin %.2f GiB, %d staging slots), plan: %s",
                          p.device_name.c_str(), p.budget_bytes / GIB, p.capacity, p.n_layers * p.n_experts,
                          p.expert_bytes / (1 << 20), p.dense_bytes / GIB, p.kv_bytes / GIB, p.activation_bytes / GIB,
                          p.margin_bytes / GIB, p.staging_slots, plan);
    else if (p.margin_bytes > 0)
        n = std::snprintf(line, sizeof line,
                          "device: %s (%s), %.2f GiB: %d of %d experts resident "
                          "(%.1f MiB each; dense %.2f GiB, KV %.2f GiB, margin %.2f GiB, %d staging slots), plan: %s",
                          device_kind_name(p.device), EMULATED_WHAT, p.budget_bytes / GIB, p.capacity,
                          p.n_layers * p.n_experts, p.expert_bytes / (1 << 20), p.dense_bytes / GIB, p.kv_bytes / GIB,
                          p.margin_bytes / GIB, p.staging_slots, plan);
    else
        n = std::snprintf(line, sizeof line,
                          "device: %s (%s): %d of %d experts resident (%.1f MiB each, "
                          "%.2f GiB with %d staging slots; dense weights and KV not counted), plan: %s",
                          device_kind_name(p.device), EMULATED_WHAT, p.capacity, p.n_layers * p.n_experts,
                          p.expert_bytes / (1 << 20), p.budget_bytes / GIB, p.staging_slots, plan);
    std::string s(line, size_t(std::max(0, std::min(n, int(sizeof line) - 1))));
    if (!p.profile.empty()) s += " from " + p.profile;
    if (p.cache_slots > 0 || p.prefetch) {
        std::snprintf(line, sizeof line, "; cache: %s, %d of the %d slots, prefetch %s", p.cache_policy.c_str(),
                      p.cache_slots, p.capacity, p.prefetch ? "on" : "off");
        s += line;
    }
    if (!p.copy_source.empty()) s += "; copies: " + p.copy_source;
    if (p.expected_hit_rate >= 0) {
        std::snprintf(line, sizeof line, ", expected hit rate %.1f%%", 100.0 * p.expected_hit_rate);
        s += line;
    }
    return s;
}
