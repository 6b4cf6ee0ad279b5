// WorkBudget: what one piece of work on untrusted text may spend (a chat
// template's render, one tokenization, a tokenizer's load-time work), with
// the deadline and the cancellation that end it early. Steps bound time,
// bytes bound memory: both are charged BEFORE the work or the allocation
// they pay for, so a value is priced by the size it would have before it is
// built, and the work stops with one WorkBudgetError instead of hanging,
// exhausting memory or crashing. The wall-clock deadline, the process-wide
// stop (work_budget_stop_all(), which the server calls when it stops) and a
// cancel probe (the server's "is this request's client gone") are looked at
// every few thousand steps, so they end even a runaway loop promptly.
// The budget is made current on its thread (WorkBudget::Scope) so that the
// code that builds values (engine/text/jinja_value.*, jinja_builtins.*,
// hf_tokenizer.*) charges it without passing it down every call; with no
// budget current the work_charge_* functions charge nothing.
// This file knows nothing of templates or tokenizers: callers put the name
// of their file in front of the error's message.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

#include "base/errors.h"

// Why a piece of work ended early: a limit of its own (the input's fault),
// the process-wide stop (the server is shutting down: a 503, not the
// input's fault), or its cancel probe (the client is gone).
enum class WorkEnd { LIMIT, STOPPED, CANCELLED };

// A budget ran out, or its work was stopped. The message says which limit
// ("used more than 67108864 bytes"), without the file's name; callers that
// add the file's name throw it again with the same `end`.
struct WorkBudgetError : MoeError {
    explicit WorkBudgetError(const std::string& message, WorkEnd end = WorkEnd::LIMIT) : MoeError(message), end(end) {}
    WorkEnd end;
};

struct WorkLimits {
    uint64_t max_steps = 0;         // units of work (a statement, a loop turn, a match, a merge); 0: no limit
    uint64_t max_bytes = 0;         // bytes allocated in all, freed or not; 0: no limit
    uint64_t max_buffer_bytes = 0;  // bytes of any one string or list built; 0: no limit
    std::chrono::milliseconds max_time{0};  // wall time; 0: no limit
};

class WorkBudget {
public:
    // `what` names the work in errors ("rendering", "tokenizing").
    WorkBudget(const WorkLimits& limits, std::string what);

    // Charges n steps; WorkBudgetError when over, past the deadline, stopped or cancelled.
    void step(uint64_t n = 1) {
        steps_ += n;
        if (steps_ > limits_.max_steps && limits_.max_steps) over("steps", limits_.max_steps);
        if (steps_ >= next_check_) check_now();
    }
    // Charges n bytes about to be allocated (a step per 64 of them too).
    void bytes(uint64_t n) {
        bytes_ += n;
        if (bytes_ > limits_.max_bytes && limits_.max_bytes) over("bytes", limits_.max_bytes);
        step(n / 64);
    }
    // A buffer of `size` bytes about to grow by n: checks it against
    // max_buffer_bytes and charges the n bytes.
    void grow(uint64_t size, uint64_t n) {
        if (limits_.max_buffer_bytes && (size + n > limits_.max_buffer_bytes || n > limits_.max_buffer_bytes))
            over_buffer();
        bytes(n);
    }
    // The deadline, the process-wide stop and the cancel probe, now.
    void check_now();

    uint64_t steps_used() const { return steps_; }
    uint64_t bytes_used() const { return bytes_; }
    const WorkLimits& limits() const { return limits_; }

    // Makes a budget the current one of this thread for its lifetime (the
    // one before it comes back after).
    class Scope {
    public:
        explicit Scope(WorkBudget& budget);
        ~Scope();
        Scope(const Scope&) = delete;
        Scope& operator=(const Scope&) = delete;

    private:
        WorkBudget* previous_;
    };

private:
    [[noreturn]] void over(const char* unit, uint64_t limit) const;
    [[noreturn]] void over_buffer() const;

    WorkLimits limits_;
    std::string what_;
    uint64_t steps_ = 0, bytes_ = 0;
    uint64_t next_check_ = 0;  // steps_ at which check_now() runs next
    std::chrono::steady_clock::time_point start_, deadline_, next_probe_;
    uint64_t stop_epoch_;  // work_budget_stop_all()'s count when this budget began
};

// The budget current on this thread (innermost Scope), or nullptr.
WorkBudget* work_budget_current();
// Charge the current budget, if there is one (see WorkBudget).
inline void work_charge_steps(uint64_t n = 1) {
    if (WorkBudget* b = work_budget_current()) b->step(n);
}
inline void work_charge_bytes(uint64_t n) {
    if (WorkBudget* b = work_budget_current()) b->bytes(n);
}
inline void work_charge_grow(uint64_t size, uint64_t n) {
    if (WorkBudget* b = work_budget_current()) b->grow(size, n);
}

// Every budget that exists now fails at its next check ("stopped: the
// server is shutting down"); budgets made later are not affected. Any
// thread, also a signal's watcher; SIGTERM's way to end a hostile render.
void work_budget_stop_all();

// A probe every budget calls now and then (at most every few milliseconds)
// on the thread that charges it: true cancels the work ("cancelled: the
// client is gone"). The server sets one that asks whether the client of the
// connection the thread serves has gone. nullptr: none.
using WorkCancelProbe = bool (*)();
void work_budget_set_cancel_probe(WorkCancelProbe probe);
