// The engine thread and the queue it drains: EngineWorker loads the model on
// its own thread, then runs the queued Tasks (request_queue.h) one at a time
// until it is stopped. It owns the Session; once ready(), HTTP threads may
// call what engine/runtime/session.h lists as safe beside a running request
// (the model, check_prompt, chat_prompt, the statistics, ...) and
// hand everything else to the engine thread as a Task. A task that
// throws becomes its TaskError: 400 for a ContextLengthError (the client's
// prompt), 500 for anything else (requests are validated before they are
// queued, so a later failure is the server's, e.g. a token the tokenizer
// cannot decode). Knows
// nothing of HTTP, JSON or what a task does.
#pragma once
#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "chat/model_chat.h"
#include "engine/runtime/session.h"
#include "server/request_queue.h"

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
