// The engine thread and the queue it drains: EngineWorker loads the model on
// its own thread, then runs the queued Tasks (below) one at a time
// until it is stopped. It owns the Session; once ready(), HTTP threads may
// call what engine/runtime/session.h lists as safe beside a running request
// (the model, check_prompt, chat_prompt, the statistics, ...) and
// hand everything else to the engine thread as a Task. A task that
// throws becomes its TaskError: 400 for a ContextLengthError (the client's
// prompt), 500 for anything else (requests are validated before they are
// queued, so a later failure is the server's, e.g. a token the tokenizer
// cannot decode). Knows
// nothing of HTTP, JSON or what a task does.
//
// The request queue: the hand-off between HTTP worker threads and the one
// engine thread (EngineWorker drains it). A Task carries the work to run on the
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
#include <thread>
#include <variant>
#include <vector>

#include "chat/model_chat.h"
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

class EngineWorker {
public:
    // max_waiting: tasks that may wait while one runs.
    EngineWorker(ModelOptions model, SessionOptions options, size_t max_waiting);
    // Stops and joins the thread.
    ~EngineWorker();
    EngineWorker(const EngineWorker&) = delete;
    EngineWorker& operator=(const EngineWorker&) = delete;

    // Starts the engine thread. It loads the model (logging the load's
    // warnings and the placement), sets ready(), calls on_ready, then runs
    // tasks until stop(). When loading fails it calls on_failed instead
    // (load_error() says why) and ends.
    void start(std::function<void(const Session&)> on_ready, std::function<void()> on_failed);
    // Any thread: cancels the running and waiting tasks (each gets its
    // TaskError) and makes the engine thread end after the running one.
    void stop();
    // Waits for the engine thread to end (no-op when it never started).
    void join();

    bool ready() const { return ready_.load(); }
    bool stopped() const { return stopped_.load(); }
    // Only once ready().
    Session& engine() { return *engine_; }
    // How the model's chats are rendered and its tool calls read; only once ready().
    const ModelChat& chat() const { return *chat_; }
    // Why loading failed; empty when it did not.
    std::string load_error() const;

    // Queues a task; false when max_waiting tasks already wait or the worker
    // is stopped.
    bool submit(std::shared_ptr<Task> task) { return queue_.push(std::move(task)); }
    size_t waiting() const { return queue_.waiting(); }
    bool running() const { return queue_.running(); }

    // Runs fn on the engine thread between two tasks (past the queue's
    // bound) and waits for it; waits for the model first. Throws MoeError
    // when the worker stops first, or what fn threw.
    void run_between_tasks(const std::function<void(Session&)>& fn);

private:
    void main(const std::function<void(const Session&)>& on_ready, const std::function<void()>& on_failed);

    ModelOptions model_;
    SessionOptions options_;
    RequestQueue queue_;
    std::unique_ptr<Session> engine_;
    std::unique_ptr<const ModelChat> chat_;
    std::thread thread_;
    std::atomic<bool> ready_{false};
    std::atomic<bool> stopped_{false};
    mutable std::mutex error_mutex_;
    std::string load_error_;
};
