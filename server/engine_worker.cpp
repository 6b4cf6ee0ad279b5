// The engine thread's loop, the Task channel and the bounded task queue
// (see engine_worker.h). Cancelled
// tasks that still wait are dropped lazily, so a client that gave up frees
// its place in the queue.
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
    if (const std::string unread = model_unread_text(engine_->model().config()); !unread.empty())
        std::fprintf(stderr, "moe-server: %s\n", unread.c_str());
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

Task::Task(Run run) : run_(std::move(run)), admitted_(std::chrono::steady_clock::now()) {}

void Task::run(Session& engine) {
    run_(engine, *this);
}

void Task::finish(int error_status, const std::string& error) {
    {
        std::lock_guard lock(mutex_);
        if (terminal_) return;
    }
    push(TaskError{error_status, error});
}

void Task::push(TaskEvent event) {
    {
        std::lock_guard lock(mutex_);
        if (terminal_) return;  // nothing may follow the terminal event
        if (!std::holds_alternative<TokenEvent>(event)) terminal_ = true;
        events_.push_back(std::move(event));
    }
    ready_.notify_all();
}

bool Task::wait_events(std::vector<TaskEvent>& out, std::chrono::milliseconds timeout) {
    out.clear();
    std::unique_lock lock(mutex_);
    if (!ready_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
    while (!events_.empty()) {
        out.push_back(std::move(events_.front()));
        events_.pop_front();
    }
    return true;
}

RequestQueue::RequestQueue(size_t max_waiting) : max_waiting_(max_waiting) {}

void RequestQueue::drop_cancelled_locked() {
    for (auto it = waiting_.begin(); it != waiting_.end();) {
        if ((*it)->cancelled()) {
            (*it)->finish(499, "cancelled while waiting in the queue");
            it = waiting_.erase(it);
        } else {
            ++it;
        }
    }
}

bool RequestQueue::push(std::shared_ptr<Task> task, bool force) {
    {
        std::lock_guard lock(mutex_);
        if (shut_down_) return false;
        drop_cancelled_locked();
        // Capacity: the running task plus max_waiting_ behind it.
        if (!force && waiting_.size() >= max_waiting_ + (running_ ? 0 : 1)) return false;
        waiting_.push_back(std::move(task));
    }
    available_.notify_one();
    return true;
}

std::shared_ptr<Task> RequestQueue::pop() {
    std::unique_lock lock(mutex_);
    for (;;) {
        drop_cancelled_locked();
        if (shut_down_) return nullptr;
        if (!waiting_.empty()) {
            running_ = std::move(waiting_.front());
            waiting_.pop_front();
            return running_;
        }
        available_.wait(lock);
    }
}

void RequestQueue::done_running() {
    std::lock_guard lock(mutex_);
    running_.reset();
}

size_t RequestQueue::waiting() const {
    std::lock_guard lock(mutex_);
    size_t n = 0;
    for (const auto& t : waiting_) n += t->cancelled() ? 0 : 1;
    return n;
}

bool RequestQueue::running() const {
    std::lock_guard lock(mutex_);
    return running_ != nullptr;
}

void RequestQueue::shutdown() {
    std::deque<std::shared_ptr<Task>> dropped;
    {
        std::lock_guard lock(mutex_);
        shut_down_ = true;
        dropped.swap(waiting_);
        if (running_) running_->cancel_for_shutdown();
    }
    for (auto& t : dropped) {
        t->cancel_for_shutdown();
        t->finish(503, SHUTTING_DOWN);
    }
    available_.notify_all();
}
