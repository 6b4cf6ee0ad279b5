// Request queue: the hand-off between HTTP worker threads and the one engine
// thread (engine_worker.h drains it). A Task carries the work to run on the
// engine thread and a channel of typed events (tokens, then one terminal
// event) back to the HTTP thread that waits for them; RequestQueue is the
// bounded FIFO of tasks not started yet. Knows nothing of HTTP, JSON or
// OpenAI shapes; never runs the model itself.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <variant>
#include <vector>

#include "engine/runtime/beam_search.h"
#include "engine/runtime/session.h"

// The message of the TaskError (503) of a task the shutdown dropped or cut.
inline constexpr const char* SHUTTING_DOWN = "The server is shutting down; the request did not finish.";

// The task failed, was cancelled or never ran.
struct TaskError {
    int status = 500;        // the HTTP status that fits
    std::string message;     // one-line reason
    std::string param = {};  // the request field at fault (a 4xx's), empty for none
};

// Work with nothing to send back is over (HttpServer::with_engine).
struct TaskDone {};

// What a task sends the HTTP thread that waits for it: a TokenEvent for each
// sampled token, then exactly one terminal event: the finished
// GenerateResult or BeamResult (text, usage, timings), TaskDone, or a
// TaskError.
using TaskEvent = std::variant<TokenEvent, GenerateResult, BeamResult, TaskDone, TaskError>;

class Task {
public:
    using Run = std::function<void(Session& engine, Task& task)>;
    explicit Task(Run run);

    // Engine thread: runs the work; it pushes TokenEvents and one result.
    // finish() then guarantees a terminal event (a TaskError) even when
    // run() threw or the task never ran, so a waiting HTTP thread always
    // wakes up.
    void run(Session& engine);
    void finish(int error_status, const std::string& error);

    void push(TaskEvent event);
    // HTTP thread: moves all pending events into out (cleared first); waits
    // up to `timeout` for one. False when none came.
    bool wait_events(std::vector<TaskEvent>& out, std::chrono::milliseconds timeout);

    // Any thread: the client went away or the server stops. The engine sees
    // it in its token callback and stops before the next forward pass.
    void cancel() { cancelled_.store(true); }
    bool cancelled() const { return cancelled_.load(); }
    // Any thread: cancels because the server shuts down, so that the task's
    // work can tell its client it was cut (see cut_by_shutdown()).
    void cancel_for_shutdown() {
        shutdown_.store(true);
        cancel();
    }
    bool cut_by_shutdown() const { return shutdown_.load(); }

    // When the task was admitted (for time-to-first-token as the user sees it).
    std::chrono::steady_clock::time_point admitted() const { return admitted_; }

private:
    Run run_;
    std::atomic<bool> cancelled_{false};
    std::atomic<bool> shutdown_{false};
    std::chrono::steady_clock::time_point admitted_;
    std::mutex mutex_;
    std::condition_variable ready_;
    std::deque<TaskEvent> events_;
    bool terminal_ = false;  // an event other than a TokenEvent was pushed
};

class RequestQueue {
public:
    // max_waiting: tasks that may wait while one runs; 0 = none may wait.
    explicit RequestQueue(size_t max_waiting);

    // Adds a task unless max_waiting tasks (not cancelled) already wait, or
    // the queue is shut down; `force` skips the bound (internal work).
    bool push(std::shared_ptr<Task> task, bool force = false);
    // Engine thread: the next task, cancelled ones skipped (and finished);
    // nullptr once shut down. Records it as the running task.
    std::shared_ptr<Task> pop();
    // Engine thread: the running task is over.
    void done_running();

    size_t waiting() const;
    bool running() const;

    // Cancels the running task (cancel_for_shutdown) and every waiting one
    // (each gets TaskError 503 SHUTTING_DOWN), and makes pop() return nullptr.
    void shutdown();

private:
    void drop_cancelled_locked();

    size_t max_waiting_;
    mutable std::mutex mutex_;
    std::condition_variable available_;
    std::deque<std::shared_ptr<Task>> waiting_;
    std::shared_ptr<Task> running_;
    bool shut_down_ = false;
};
