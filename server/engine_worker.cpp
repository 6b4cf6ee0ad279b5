// The engine thread's loop (see engine_worker.h).
#include "server/engine_worker.h"

#include <chrono>
#include <cstdio>
#include <utility>
#include <vector>

#include "base/errors.h"
#include "server/placement_text.h"

EngineWorker::EngineWorker(ModelOptions model, SessionOptions options, size_t max_waiting)
    : model_(std::move(model)), options_(std::move(options)), queue_(max_waiting) {}

EngineWorker::~EngineWorker() {
    stop();
    join();
}

void EngineWorker::start(std::function<void(const Session&)> on_ready, std::function<void()> on_failed) {
    thread_ = std::thread(
        [this, on_ready = std::move(on_ready), on_failed = std::move(on_failed)] { main(on_ready, on_failed); });
}

void EngineWorker::stop() {
    stopped_.store(true);
    queue_.shutdown();
}

void EngineWorker::join() {
    if (thread_.joinable()) thread_.join();
}

std::string EngineWorker::load_error() const {
    std::lock_guard lock(error_mutex_);
    return load_error_;
}

void EngineWorker::main(const std::function<void(const Session&)>& on_ready, const std::function<void()>& on_failed) {
    try {
        std::shared_ptr<const Model> model = load_model(model_);
        std::string warning;
        chat_ = std::make_unique<const ModelChat>(*model, &warning);
        if (!warning.empty()) std::fprintf(stderr, "moe-server: %s\n", warning.c_str());
        engine_ = std::make_unique<Session>(std::move(model), options_);
    } catch (const std::exception& e) {
        {
            std::lock_guard lock(error_mutex_);
            load_error_ = engine_error_text(e);
        }
        on_failed();
        return;
    }
    if (const std::string warning = placement_warning(engine_->placement()); !warning.empty())
        std::fprintf(stderr, "moe-server: %s\n", warning.c_str());
    std::fprintf(stderr, "moe-server: %s\n", placement_summary(engine_->placement()).c_str());
    ready_.store(true);
    on_ready(*engine_);
    while (std::shared_ptr<Task> task = queue_.pop()) {
        if (!task->cancelled()) {
            try {
                task->run(*engine_);
            } catch (const ContextLengthError& e) {
                task->finish(400, e.what());
            } catch (const std::exception& e) {
                task->finish(500, std::string("Internal server error: ") + e.what());
            }
        }
        task->finish(499, "the request was cancelled");
        queue_.done_running();
    }
}

void EngineWorker::run_between_tasks(const std::function<void(Session&)>& fn) {
    while (!ready()) {
        if (stopped()) throw MoeError("the server stopped before the model was ready");
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::string error;
    auto task = std::make_shared<Task>([&](Session& e, Task& t) {
        try {
            fn(e);
        } catch (const std::exception& ex) {
            error = ex.what();
        }
        t.push(TaskDone{});
    });
    if (!queue_.push(task, true)) throw MoeError("the server is shutting down");
    std::vector<TaskEvent> events;
    for (;;) {
        task->wait_events(events, std::chrono::milliseconds(100));
        for (const TaskEvent& event : events) {
            if (const TaskError* e = std::get_if<TaskError>(&event)) throw MoeError(e->message);
            if (std::holds_alternative<TaskDone>(event)) {
                if (!error.empty()) throw MoeError(error);
                return;
            }
        }
    }
}
