// ExpertPipeline against FakeQueue, a TEST DOUBLE of a device's CUDA copy
// and compute streams and their events: a virtual clock, two in-order
// streams, events with CUDA's capture rule (a wait waits for the record
// enqueued last before it; a wait for an event never recorded is an error
// here, where CUDA would not wait at all), a host that blocks on host_wait,
// and fake memory (each staging slot holds the expert whose copy wrote it
// last; a compute records whose weights it read, or that a copy was writing
// the slot while it read). Checked: every task computed once from the right
// weights, slot rotation over S = 1, 2, 3, the simulated time equals the
// pipeline formula (written here on its own), copies overlap computes,
// residents overlap the first copy, and slots stay safe across layers with
// and without a host wait in between -- also with copies into cache slots,
// evictions and extra copies (prefetches, fills) that no compute waits for.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/devices/expert_pipeline.h"

namespace {

struct Weights {
    int layer = -1, expert = -1;  // (-1, -1): nothing copied yet
    bool operator==(const Weights&) const = default;
};
const Weights CORRUPT{-2, -2};  // a copy into the slot overlapped the read

// A TEST DOUBLE of CUDA streams and events (see the file comment).
class FakeQueue final : public DeviceQueue {
public:
    enum Kind { COPY, COMPUTE, RECORD, WAIT };
    struct Op {
        Kind kind = RECORD;
        QueueStream stream = QueueStream::COMPUTE;
        double enqueued = 0;  // host time when enqueued: no op starts earlier
        double duration = 0;
        int event = -1;      // RECORD, WAIT
        int waits_for = -1;  // WAIT: the RECORD op captured
        Weights weights;     // COPY: what it writes; COMPUTE: the expert it should read
        WeightSlot slot;     // COPY: staging slot; COMPUTE: where it reads
        ExpertTask task;     // COMPUTE
        int tag = 0;         // COMPUTE: the test's start() call
        bool done = false;
        double start = 0, end = 0;
    };

    // copy_ms / compute_ms: (n_layers, n_experts) durations.
    FakeQueue(int n_experts, int staging_slots, std::vector<double> copy_ms, std::vector<double> compute_ms,
              std::span<const SlotExpert> residents)
        : n_experts_(n_experts),
          n_staging_(staging_slots),
          copy_ms_(std::move(copy_ms)),
          compute_ms_(std::move(compute_ms)),
          last_record_(size_t(ExpertPipeline::n_events(staging_slots)), -1) {
        // The upload at construction: resident slot r holds residents[r].
        for (const SlotExpert& e : residents) resident_.push_back({e.layer, e.expert});
    }

    void copy(int layer, int expert, WeightSlot to) override {
        Op op = make(COPY, QueueStream::COPY);
        if (to.index < 0 || to.index >= (to.staging ? n_staging_ : int(resident_.size())))
            error("copy into slot " + std::to_string(to.index));
        op.weights = {layer, expert};
        op.slot = to;
        op.duration = copy_ms_[size_t(layer) * n_experts_ + expert];
        ops_.push_back(op);
    }
    void compute(int layer, const ExpertRows&, const ExpertTask& task, WeightSlot weights) override {
        Op op = make(COMPUTE, QueueStream::COMPUTE);
        op.weights = {layer, task.expert};
        op.slot = weights;
        op.task = task;
        op.tag = tag;
        op.duration = compute_ms_[size_t(layer) * n_experts_ + task.expert];
        ops_.push_back(op);
    }
    void record(int event, QueueStream stream) override {
        Op op = make(RECORD, stream);
        op.event = event;
        last_record_.at(size_t(event)) = int(ops_.size());
        ops_.push_back(op);
    }
    void wait(QueueStream stream, int event) override {
        Op op = make(WAIT, stream);
        op.event = event;
        op.waits_for = last_record_.at(size_t(event));
        if (op.waits_for < 0) error("stream waits for event " + std::to_string(event) + ", never recorded");
        ops_.push_back(op);
    }
    void host_wait(int event) override {
        int r = last_record_.at(size_t(event));
        if (r < 0) error("host waits for event " + std::to_string(event) + ", never recorded");
        run();
        if (r >= 0 && !ops_[size_t(r)].done) error("host waits for event " + std::to_string(event) + " forever");
        if (r >= 0) host_time = std::max(host_time, ops_[size_t(r)].end);
    }

    // Runs both streams as far as they can go (each op at the earliest time
    // its stream, its enqueue and its event allow); an op blocked for good
    // is an error (deadlock).
    void run() {
        for (bool progress = true; progress;) {
            progress = false;
            for (int s = 0; s < 2; s++) {
                for (; next_[s] < ops_.size(); next_[s]++) {
                    Op& op = ops_[next_[s]];
                    if (int(op.stream) != s) continue;
                    double t = std::max(stream_time_[s], op.enqueued);
                    if (op.kind == WAIT) {
                        if (op.waits_for < 0 || !ops_[size_t(op.waits_for)].done) break;
                        t = std::max(t, ops_[size_t(op.waits_for)].end);
                    }
                    op.start = t;
                    op.end = t + op.duration;
                    op.done = true;
                    stream_time_[s] = op.end;
                    progress = true;
                }
            }
        }
        for (const Op& op : ops_)
            if (!op.done) {
                error("deadlock: an op never ran");
                break;
            }
    }

    // What compute op c read: the weights of the last copy into its slot
    // that ended by the compute's start (a resident slot's upload before
    // any), CORRUPT when a copy into the slot overlapped the compute. Call
    // after run().
    Weights read_by(const Op& c) const {
        Weights w = c.slot.staging ? Weights{} : resident_.at(size_t(c.slot.index));
        double last_end = -1;
        for (const Op& op : ops_) {
            if (op.kind != COPY || op.slot.staging != c.slot.staging || op.slot.index != c.slot.index) continue;
            if (op.start < c.end && op.end > c.start) return CORRUPT;
            if (op.end <= c.start && op.end > last_end) {
                last_end = op.end;
                w = op.weights;
            }
        }
        return w;
    }

    const std::vector<Op>& ops() const { return ops_; }
    const Op& last_record(int event) const { return ops_.at(size_t(last_record_.at(size_t(event)))); }
    const std::vector<std::string>& errors() const { return errors_; }

    double host_time = 0;  // the host's clock: it only moves in host_wait
    int tag = 0;           // set by the test before each start()

private:
    Op make(Kind kind, QueueStream stream) const {
        Op op;
        op.kind = kind;
        op.stream = stream;
        op.enqueued = host_time;
        return op;
    }
    void error(const std::string& what) { errors_.push_back(what); }

    int n_experts_;
    int n_staging_;  // staging slots; their contents are the history of the copies into them
    std::vector<Weights> resident_;  // resident slots' uploads; then the history of the copies into them
    std::vector<double> copy_ms_, compute_ms_;
    std::vector<int> last_record_;  // per event: index of its last RECORD op, -1 before the first
    std::vector<Op> ops_;
    size_t next_[2] = {0, 0};
    double stream_time_[2] = {0, 0};
    std::vector<std::string> errors_;
};

const ExpertRows ROWS{};  // the fake reads no rows

// One start() of the test: a layer's device tasks.
struct LayerCall {
    int layer = 0;
    std::vector<ExpertTask> tasks;
    std::vector<uint8_t> copy;
};

// The call's tasks for the pipeline: residents from their slot, copies
// through a staging slot.
std::vector<DeviceTask> device_tasks(const LayerCall& call, const ExpertPipeline& p) {
    std::vector<DeviceTask> tasks;
    for (size_t i = 0; i < call.tasks.size(); i++)
        tasks.push_back(
            {call.tasks[i], call.copy[i] ? -1 : p.resident_slot(call.layer, call.tasks[i].expert), call.copy[i] != 0});
    return tasks;
}

void start(ExpertPipeline& p, FakeQueue& q, const LayerCall& call) {
    p.start(q, call.layer, ROWS, device_tasks(call, p));
}

// The pipeline formula, on its own: residents back to back from 0; copy j
// starts when the copy stream is free and the compute that read slot
// j mod S before (j - S) has ended; compute j when the compute stream is
// free and copy j has ended.
double expected_makespan(const LayerCall& call, int n_experts, int staging, const std::vector<double>& copy_ms,
                         const std::vector<double>& compute_ms) {
    auto cell = [&](const ExpertTask& t) { return size_t(call.layer) * n_experts + t.expert; };
    double residents = 0;
    for (size_t i = 0; i < call.tasks.size(); i++)
        if (!call.copy[i]) residents += compute_ms[cell(call.tasks[i])];
    std::vector<double> copy_end, compute_end;
    for (size_t i = 0; i < call.tasks.size(); i++) {
        if (!call.copy[i]) continue;
        size_t j = copy_end.size();
        double copy_start =
            std::max(j > 0 ? copy_end[j - 1] : 0.0, j >= size_t(staging) ? compute_end[j - staging] : 0.0);
        copy_end.push_back(copy_start + copy_ms[cell(call.tasks[i])]);
        double compute_start = std::max(j > 0 ? compute_end[j - 1] : residents, copy_end[j]);
        compute_end.push_back(compute_start + compute_ms[cell(call.tasks[i])]);
    }
    return compute_end.empty() ? residents : compute_end.back();
}

// Every task of every call computed exactly once, by its own call, from
// its own expert's weights; residents first in input order, then the copies
// in input order, copy j from staging slot j mod S.
void check_computes(const FakeQueue& q, const ExpertPipeline& p, const std::vector<LayerCall>& calls) {
    std::vector<const FakeQueue::Op*> computes;
    for (const FakeQueue::Op& op : q.ops())
        if (op.kind == FakeQueue::COMPUTE) computes.push_back(&op);
    size_t k = 0;
    for (size_t c = 0; c < calls.size(); c++) {
        const LayerCall& call = calls[c];
        std::vector<std::pair<ExpertTask, WeightSlot>> expected;
        for (size_t i = 0; i < call.tasks.size(); i++)
            if (!call.copy[i])
                expected.push_back({call.tasks[i], {false, p.resident_slot(call.layer, call.tasks[i].expert)}});
        int j = 0;
        for (size_t i = 0; i < call.tasks.size(); i++)
            if (call.copy[i]) expected.push_back({call.tasks[i], {true, j++ % p.staging_slots()}});
        for (const auto& [task, slot] : expected) {
            INFO("call " << c << " layer " << call.layer << " expert " << task.expert);
            REQUIRE(k < computes.size());
            const FakeQueue::Op& op = *computes[k++];
            REQUIRE(op.tag == int(c));
            REQUIRE(op.task.expert == task.expert);
            REQUIRE(op.task.row == task.row);
            REQUIRE(op.task.n_tokens == task.n_tokens);
            REQUIRE(op.slot.staging == slot.staging);
            REQUIRE(op.slot.index == slot.index);
            Weights read = q.read_by(op);
            REQUIRE(read == Weights{call.layer, task.expert});
        }
    }
    REQUIRE(k == computes.size());
}

// A random layer: some of its experts routed (in random order, rows
// grouped), each resident or copied.
LayerCall random_call(int layer, int n_experts, const ExpertPipeline& p, std::mt19937& rng) {
    LayerCall call;
    call.layer = layer;
    std::vector<int> experts(static_cast<size_t>(n_experts));
    for (int e = 0; e < n_experts; e++) experts[size_t(e)] = e;
    std::shuffle(experts.begin(), experts.end(), rng);
    int routed = 1 + int(rng() % uint32_t(n_experts));
    int row = 0;
    for (int i = 0; i < routed; i++) {
        int n = 1 + int(rng() % 5);
        call.tasks.push_back({experts[size_t(i)], n, row});
        call.copy.push_back(p.resident_slot(layer, experts[size_t(i)]) < 0 ? 1 : 0);
        row += n;
    }
    return call;
}

// Random integer durations (exact in doubles) per (layer, expert).
std::vector<double> random_ms(size_t n, std::mt19937& rng) {
    std::vector<double> ms(n);
    for (double& m : ms) m = double(1 + rng() % 6);
    return ms;
}

Residency random_residency(int n_layers, int n_experts, std::mt19937& rng) {
    Residency r(n_layers, n_experts);
    for (int l = 0; l < n_layers; l++)
        for (int e = 0; e < n_experts; e++) r.set(l, e, rng() % 8 < 3);
    return r;
}

}  // namespace

TEST_CASE("expert pipeline: random layers, each task once from its own weights, time as the formula", "[pipeline]") {
    const int n_layers = 6, n_experts = 8;
    for (int staging : {1, 2, 3}) {
        for (uint32_t seed = 1; seed <= 20; seed++) {
            INFO("S = " << staging << ", seed " << seed);
            std::mt19937 rng(seed);
            Residency residency = random_residency(n_layers, n_experts, rng);
            ExpertPipeline p(residency, staging);
            std::vector<double> copy_ms = random_ms(size_t(n_layers) * n_experts, rng);
            std::vector<double> compute_ms = random_ms(size_t(n_layers) * n_experts, rng);
            FakeQueue q(n_experts, staging, copy_ms, compute_ms, p.residents());
            std::vector<LayerCall> calls;
            // Two passes over the layers, a host wait after each layer (as
            // the executor does): slots are reused from layer to layer.
            for (int pass = 0; pass < 2; pass++)
                for (int l = 0; l < n_layers; l++) {
                    calls.push_back(random_call(l, n_experts, p, rng));
                    const LayerCall& call = calls.back();
                    q.tag = int(calls.size()) - 1;
                    double t0 = q.host_time;
                    start(p, q, call);
                    p.wait(q);
                    INFO("layer " << l);
                    REQUIRE(q.host_time - t0 == expected_makespan(call, n_experts, staging, copy_ms, compute_ms));
                    // The device's busy time by its timing events.
                    double first = q.last_record(ExpertPipeline::EVENT_LAYER_START).end;
                    if (p.last_copies() > 0)
                        first = std::min(first, q.last_record(ExpertPipeline::EVENT_COPY_START).end);
                    REQUIRE(q.last_record(ExpertPipeline::EVENT_LAYER_DONE).end - first == q.host_time - t0);
                }
            REQUIRE(q.errors().empty());
            check_computes(q, p, calls);
        }
    }
}

TEST_CASE("expert pipeline: with two slots the next copy overlaps the compute, with one it cannot", "[pipeline]") {
    // Layer 0 of 1: experts 0, 1 resident (2 ms each); 2..5 copied (copies
    // 3 ms, computes 4 ms).
    const int n_experts = 6;
    Residency residency(1, n_experts);
    residency.set(0, 0, true);
    residency.set(0, 1, true);
    LayerCall call;
    int row = 0;
    for (int e : {2, 0, 3, 4, 1, 5}) {
        call.tasks.push_back({e, 2, row});
        call.copy.push_back(e >= 2 ? 1 : 0);
        row += 2;
    }
    std::vector<double> copy_ms(n_experts, 3.0), compute_ms{2, 2, 4, 4, 4, 4};
    for (int staging : {1, 2}) {
        INFO("S = " << staging);
        ExpertPipeline p(residency, staging);
        FakeQueue q(n_experts, staging, copy_ms, compute_ms, p.residents());
        start(p, q, call);
        p.wait(q);
        REQUIRE(q.errors().empty());
        check_computes(q, p, {call});
        std::vector<const FakeQueue::Op*> copies, copied_computes, resident_computes;
        for (const FakeQueue::Op& op : q.ops()) {
            if (op.kind == FakeQueue::COPY) copies.push_back(&op);
            if (op.kind == FakeQueue::COMPUTE) (op.slot.staging ? copied_computes : resident_computes).push_back(&op);
        }
        REQUIRE(copies.size() == 4);
        REQUIRE(resident_computes.size() == 2);
        // The first copy runs while the residents compute (0..4).
        REQUIRE(copies[0]->start == 0);
        REQUIRE(copies[0]->end < resident_computes.back()->end);
        for (size_t j = 0; j + 1 < copies.size(); j++) {
            INFO("copy " << j + 1);
            bool overlaps =
                copies[j + 1]->start < copied_computes[j]->end && copies[j + 1]->end > copied_computes[j]->start;
            REQUIRE(overlaps == (staging == 2));
        }
        // S = 2: residents until 4, then computes at 4, 8, 12, 16, each copy
        // done in time (3, 6, 11, 15): 20. S = 1: the first compute at 4,
        // then copy and compute in series: 8 + 3 + 4 = 15, 22, 29.
        double makespan = q.last_record(ExpertPipeline::EVENT_LAYER_DONE).end;
        REQUIRE(makespan == (staging == 2 ? 20.0 : 29.0));
        REQUIRE(makespan == expected_makespan(call, n_experts, staging, copy_ms, compute_ms));
    }
}

TEST_CASE("expert pipeline: back-to-back layers without a host wait keep slots safe", "[pipeline]") {
    // Each layer copies one expert into slot 0 and computes it for 10 ms;
    // the next layer's copy (1 ms) would overwrite slot 0 at once unless it
    // waits for that compute.
    const int n_layers = 4, n_experts = 4;
    for (int staging : {1, 2, 3}) {
        INFO("S = " << staging);
        Residency residency(n_layers, n_experts);
        ExpertPipeline p(residency, staging);
        std::vector<double> copy_ms(n_layers * n_experts, 1.0), compute_ms(n_layers * n_experts, 10.0);
        FakeQueue q(n_experts, staging, copy_ms, compute_ms, p.residents());
        std::vector<LayerCall> calls;
        for (int l = 0; l < n_layers; l++) {
            LayerCall call{l, {{l % n_experts, 3, 0}}, {1}};
            calls.push_back(call);
            q.tag = l;
            start(p, q, calls.back());
        }
        p.wait(q);
        REQUIRE(q.errors().empty());
        check_computes(q, p, calls);
        // Every layer's one copy goes to slot 0, so layer l's copy waits for
        // layer l - 1's compute: 4 * (1 + 10).
        REQUIRE(q.host_time == n_layers * 11.0);
        // With a host wait after each layer, the copy of the next one needs
        // no event wait: nothing reads the slot any more.
        ExpertPipeline p2(residency, staging);
        FakeQueue q2(n_experts, staging, copy_ms, compute_ms, p2.residents());
        for (int l = 0; l < n_layers; l++) {
            q2.tag = l;
            start(p2, q2, calls[size_t(l)]);
            p2.wait(q2);
        }
        REQUIRE(q2.errors().empty());
        check_computes(q2, p2, calls);
        for (const FakeQueue::Op& op : q2.ops())
            REQUIRE_FALSE((op.kind == FakeQueue::WAIT && op.stream == QueueStream::COPY));
    }
}

TEST_CASE("expert pipeline: many copies per layer over many layers without host waits", "[pipeline]") {
    // Random layers started back to back, one host wait at the end: copies
    // of a layer run ahead into the previous layer's computes wherever the
    // slots allow, and nothing is overwritten early.
    const int n_layers = 5, n_experts = 8;
    for (int staging : {1, 2, 3})
        for (uint32_t seed = 1; seed <= 10; seed++) {
            INFO("S = " << staging << ", seed " << seed);
            std::mt19937 rng(100 + seed);
            Residency residency = random_residency(n_layers, n_experts, rng);
            ExpertPipeline p(residency, staging);
            FakeQueue q(n_experts, staging, random_ms(n_layers * n_experts, rng), random_ms(n_layers * n_experts, rng),
                        p.residents());
            std::vector<LayerCall> calls;
            for (int l = 0; l < n_layers; l++) {
                calls.push_back(random_call(l, n_experts, p, rng));
                q.tag = l;
                start(p, q, calls.back());
            }
            p.wait(q);
            REQUIRE(q.errors().empty());
            check_computes(q, p, calls);
        }
}

TEST_CASE("expert pipeline: the resident table and bad input", "[pipeline]") {
    Residency residency(2, 4);
    residency.set(0, 3, true);
    residency.set(1, 0, true);
    residency.set(1, 2, true);
    ExpertPipeline p(residency, 2);
    REQUIRE(p.n_resident() == 3);
    REQUIRE(p.resident_slot(0, 3) == 0);
    REQUIRE(p.resident_slot(1, 0) == 1);
    REQUIRE(p.resident_slot(1, 2) == 2);
    REQUIRE(p.resident_slot(1, 1) == -1);
    REQUIRE(p.residents().size() == 3);
    REQUIRE(p.residents()[2].layer == 1);
    REQUIRE(p.residents()[2].expert == 2);
    REQUIRE(ExpertPipeline::n_events(2) == 9);
    REQUIRE_THROWS_AS(ExpertPipeline(residency, 0), std::invalid_argument);

    FakeQueue q(4, 2, std::vector<double>(8, 1.0), std::vector<double>(8, 1.0), p.residents());
    const ExpertTask t3{3, 1, 0}, t1{1, 1, 0};
    const std::vector<DeviceTask> copy_resident{{t3, -1, true}}, wrong_slot{{t3, 1, false}}, missing{{t1, -1, false}},
        bad_slot{{t1, 3, true}}, ok{{t3, 0, false}};
    REQUIRE_THROWS_AS(p.start(q, 0, ROWS, copy_resident), std::invalid_argument);
    REQUIRE_THROWS_AS(p.start(q, 0, ROWS, wrong_slot), std::invalid_argument);
    REQUIRE_THROWS_AS(p.start(q, 0, ROWS, missing), std::invalid_argument);
    REQUIRE_THROWS_AS(p.start(q, 0, ROWS, bad_slot), std::invalid_argument);
    REQUIRE_THROWS_AS(p.start(q, 2, ROWS, ok), std::invalid_argument);
    // Extra copies: of a resident expert, twice the same, into no slot.
    const std::vector<SlotCopy> of_resident{{1, 0, 1}}, twice{{0, 1, 1}, {0, 1, 2}}, no_slot{{0, 1, 3}};
    REQUIRE_THROWS_AS(p.start(q, 0, ROWS, ok, of_resident), std::invalid_argument);
    REQUIRE_THROWS_AS(p.start(q, 0, ROWS, ok, twice), std::invalid_argument);
    REQUIRE_THROWS_AS(p.start(q, 0, ROWS, ok, no_slot), std::invalid_argument);
    const std::vector<SlotExpert> held_twice{{0, 1}, {0, 1}};
    REQUIRE_THROWS_AS(ExpertPipeline(2, 4, held_twice, 2), std::invalid_argument);
    REQUIRE(q.ops().empty());  // nothing enqueued by a refused start
}

TEST_CASE("expert pipeline: cache slots, evictions and extra copies, each compute reads its own weights",
          "[pipeline]") {
    // Resident slots: a few pinned, then cache slots (some empty at the
    // start). Each random layer computes its resident experts from their
    // slots, copies the others into a random cache slot (evicting whatever
    // is there, even an expert another task of the layer reads) or a
    // staging slot, then extra copies of random other experts into random
    // cache slots; host waits only now and then. Every compute must read its
    // own expert's weights, never a slot a copy is writing.
    const int n_layers = 4, n_experts = 6, pinned = 3, cache = 4;
    for (int staging : {1, 2})
        for (uint32_t seed = 1; seed <= 40; seed++) {
            INFO("S = " << staging << ", seed " << seed);
            std::mt19937 rng(700 + seed);
            std::vector<SlotExpert> slots;
            for (int k = 0; k < pinned + cache; k++) {
                const int key = (k * 5 + int(seed)) % (n_layers * n_experts);  // distinct: 5 is coprime to 24
                slots.push_back(k < pinned + cache - 1 ? SlotExpert{key / n_experts, key % n_experts} : SlotExpert{});
            }
            ExpertPipeline p(n_layers, n_experts, slots, staging);
            REQUIRE(p.n_resident() == pinned + cache);
            FakeQueue q(n_experts, staging, random_ms(n_layers * n_experts, rng), random_ms(n_layers * n_experts, rng),
                        p.residents());
            std::vector<size_t> tasks_per_call;
            int extras = 0, cache_copies = 0;
            for (int call = 0; call < 12; call++) {
                const int layer = int(rng() % uint32_t(n_layers));
                std::vector<DeviceTask> tasks;
                int row = 0;
                for (int e = 0; e < n_experts; e++) {
                    if (rng() % 2) continue;
                    const int n = 1 + int(rng() % 4);
                    const int slot = p.resident_slot(layer, e);
                    if (slot >= 0) {
                        tasks.push_back({{e, n, row}, slot, false});
                    } else {
                        const bool to_cache = rng() % 3 != 0;
                        tasks.push_back({{e, n, row}, to_cache ? pinned + int(rng() % uint32_t(cache)) : -1, true});
                        cache_copies += to_cache;
                    }
                    row += n;
                }
                // Extra copies: experts resident nowhere and not copied here.
                std::vector<SlotCopy> extra;
                for (int k = 0; k < 2; k++) {
                    const int l = int(rng() % uint32_t(n_layers)), e = int(rng() % uint32_t(n_experts));
                    bool taken = p.resident_slot(l, e) >= 0;
                    for (const DeviceTask& t : tasks) taken = taken || (l == layer && t.task.expert == e);
                    for (const SlotCopy& c : extra) taken = taken || (c.layer == l && c.expert == e);
                    if (!taken) extra.push_back({l, e, pinned + int(rng() % uint32_t(cache))});
                }
                extras += int(extra.size());
                q.tag = call;
                p.start(q, layer, ROWS, tasks, extra);
                tasks_per_call.push_back(tasks.size());
                if (rng() % 3 == 0) p.wait(q);
                // The pinned slots never change.
                for (int k = 0; k < pinned; k++) {
                    REQUIRE(p.residents()[size_t(k)].layer == slots[size_t(k)].layer);
                    REQUIRE(p.residents()[size_t(k)].expert == slots[size_t(k)].expert);
                }
            }
            p.wait(q);
            q.run();
            REQUIRE(q.errors().empty());
            std::vector<size_t> computed(tasks_per_call.size(), 0);
            for (const FakeQueue::Op& op : q.ops()) {
                if (op.kind != FakeQueue::COMPUTE) continue;
                INFO("call " << op.tag << " layer " << op.weights.layer << " expert " << op.weights.expert);
                REQUIRE(q.read_by(op) == op.weights);
                computed[size_t(op.tag)]++;
            }
            REQUIRE(computed == tasks_per_call);
            REQUIRE(cache_copies > 0);
            REQUIRE(extras > 0);
        }
}

TEST_CASE("expert pipeline: a compute from a prefetched slot waits for the prefetch, the layer does not",
          "[pipeline]") {
    // Layer 0 computes expert 0 (pinned, 2 ms) and prefetches layer 1's
    // expert 2 into cache slot 1 (a 10 ms copy). The host's wait for layer 0
    // returns at 2 ms, before the copy ends; layer 1's compute of expert 2
    // from that slot starts only when the copy has ended.
    const int n_layers = 2, n_experts = 4;
    const std::vector<SlotExpert> slots{{0, 0}, {}};
    std::vector<double> copy_ms(n_layers * n_experts, 10.0), compute_ms(n_layers * n_experts, 2.0);
    ExpertPipeline p(n_layers, n_experts, slots, 2);
    FakeQueue q(n_experts, 2, copy_ms, compute_ms, p.residents());
    const std::vector<DeviceTask> layer0{{{0, 1, 0}, 0, false}};
    const std::vector<SlotCopy> prefetch{{1, 2, 1}};
    p.start(q, 0, ROWS, layer0, prefetch);
    REQUIRE(p.last_extra() == 1);
    REQUIRE(p.resident_slot(1, 2) == 1);
    p.wait(q);
    REQUIRE(q.host_time == 2.0);
    const std::vector<DeviceTask> layer1{{{2, 1, 0}, 1, false}};
    p.start(q, 1, ROWS, layer1);
    p.wait(q);
    REQUIRE(q.errors().empty());
    const FakeQueue::Op& last = [&]() -> const FakeQueue::Op& {
        const FakeQueue::Op* c = nullptr;
        for (const FakeQueue::Op& op : q.ops())
            if (op.kind == FakeQueue::COMPUTE) c = &op;
        return *c;
    }();
    REQUIRE(last.start == 10.0);
    REQUIRE(q.read_by(last) == Weights{1, 2});
}

TEST_CASE("expert pipeline: an expert evicted by a copy may come back by an extra copy in the same layer",
          "[pipeline]") {
    // One pool of cache slots: layer 0's copy of expert 3 evicts layer 1's
    // expert 1 from slot 0, and the prefetch of layer 1 brings expert 1
    // back into slot 1, after the computes that read slot 0 and 1.
    const std::vector<SlotExpert> slots{{1, 1}, {0, 2}};
    std::vector<double> ms(2 * 4, 1.0);
    ExpertPipeline p(2, 4, slots, 2);
    FakeQueue q(4, 2, ms, ms, p.residents());
    const std::vector<DeviceTask> tasks{{{2, 1, 0}, 1, false}, {{3, 1, 1}, 0, true}};
    const std::vector<SlotCopy> extra{{1, 1, 1}};
    p.start(q, 0, ROWS, tasks, extra);
    p.wait(q);
    q.run();
    REQUIRE(q.errors().empty());
    REQUIRE(p.resident_slot(0, 3) == 0);
    REQUIRE(p.resident_slot(1, 1) == 1);
    REQUIRE(p.resident_slot(0, 2) == -1);
    for (const FakeQueue::Op& op : q.ops())
        if (op.kind == FakeQueue::COMPUTE) REQUIRE(q.read_by(op) == op.weights);
    // Without the copy into slot 0 the same extra copy is refused: expert 1
    // of layer 1 would be in two slots.
    ExpertPipeline p2(2, 4, slots, 2);
    const std::vector<DeviceTask> no_copy{{{2, 1, 0}, 1, false}};
    REQUIRE_THROWS_AS(p2.start(q, 0, ROWS, no_copy, extra), std::invalid_argument);
}
