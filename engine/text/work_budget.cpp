// WorkBudget (see work_budget.h): the counters, the periodic check of the
// deadline, the process-wide stop and the cancel probe, and the thread's
// current budget.
#include "engine/text/work_budget.h"

#include <atomic>

namespace {

// Steps between two looks at the clock, the stop count and the probe: a
// few microseconds of work, so a stop is seen at once and the look is free.
constexpr uint64_t CHECK_EVERY_STEPS = 1024;
// The probe may make a system call: at most this often.
constexpr std::chrono::milliseconds PROBE_EVERY{20};

std::atomic<uint64_t> g_stop_epoch{0};
std::atomic<WorkCancelProbe> g_probe{nullptr};
thread_local WorkBudget* t_current = nullptr;

}  // namespace

WorkBudget::WorkBudget(const WorkLimits& limits, std::string what)
    : limits_(limits), what_(std::move(what)), stop_epoch_(g_stop_epoch.load()) {
    start_ = std::chrono::steady_clock::now();
    deadline_ = limits_.max_time.count() > 0 ? start_ + limits_.max_time : std::chrono::steady_clock::time_point::max();
    next_probe_ = start_ + PROBE_EVERY;
    next_check_ = CHECK_EVERY_STEPS;
}

void WorkBudget::check_now() {
    next_check_ = steps_ + CHECK_EVERY_STEPS;
    if (g_stop_epoch.load(std::memory_order_relaxed) != stop_epoch_)
        throw WorkBudgetError(what_ + " was stopped: the server is shutting down", WorkEnd::STOPPED);
    const auto now = std::chrono::steady_clock::now();
    if (now > deadline_)
        throw WorkBudgetError(what_ + " took more than " + std::to_string(limits_.max_time.count()) +
                              " ms (a runaway loop?)");
    if (now >= next_probe_) {
        next_probe_ = now + PROBE_EVERY;
        const WorkCancelProbe probe = g_probe.load(std::memory_order_relaxed);
        if (probe && probe()) throw WorkBudgetError(what_ + " was cancelled: the client is gone", WorkEnd::CANCELLED);
    }
}

void WorkBudget::over(const char* unit, uint64_t limit) const {
    throw WorkBudgetError(what_ + " used more than " + std::to_string(limit) + " " + unit +
                          (unit[0] == 's' ? " (a runaway loop?)" : ""));
}

void WorkBudget::over_buffer() const {
    throw WorkBudgetError(what_ + " would build a string or list of more than " +
                          std::to_string(limits_.max_buffer_bytes) + " bytes");
}

WorkBudget::Scope::Scope(WorkBudget& budget) : previous_(t_current) {
    t_current = &budget;
}

WorkBudget::Scope::~Scope() {
    t_current = previous_;
}

WorkBudget* work_budget_current() {
    return t_current;
}

void work_budget_stop_all() {
    g_stop_epoch.fetch_add(1);
}

void work_budget_set_cancel_probe(WorkCancelProbe probe) {
    g_probe.store(probe);
}
