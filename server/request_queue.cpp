// Task channel and the bounded task queue (see request_queue.h). Cancelled
// tasks that still wait are dropped lazily, so a client that gave up frees
// its place in the queue.
#include "server/request_queue.h"

#include <utility>

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
