// Routing traces: the in-memory trace, its JSON-lines file and validator,
// its profile tables, a trace drawn from a profile's counts, and the
// recorder the forward pass reports to (see routing_trace.h and
// profiles/README.md "Routing traces").
#include "profiles/routing_trace.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <ostream>
#include <random>

#include "base/errors.h"
#include "base/files.h"

using json = nlohmann::json;

namespace {

// Refusals name the file and the 1-based line.
[[noreturn]] void fail(const std::filesystem::path& path, size_t line, const std::string& what) {
    throw MoeError(path.string() + ":" + std::to_string(line) + ": " + what);
}

const json& field(const std::filesystem::path& path, size_t line, const json& obj, const char* name) {
    auto it = obj.find(name);
    if (it == obj.end()) fail(path, line, std::string(name) + ": missing");
    return *it;
}

int64_t integer(const std::filesystem::path& path, size_t line, const json& v, const std::string& name, int64_t min,
                int64_t max) {
    if (!v.is_number_integer() && !v.is_number_unsigned()) fail(path, line, name + ": must be an integer");
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)) fail(path, line, name + ": out of range");
    const int64_t x = v.get<int64_t>();
    if (x < min || x > max)
        fail(
            path, line,
            name + ": " + std::to_string(x) + " is outside [" + std::to_string(min) + ", " + std::to_string(max) + "]");
    return x;
}

json header_json(const RoutingTrace& t) {
    return {{"format", TRACE_FORMAT},
            {"version", TRACE_VERSION},
            {"model", fingerprint_to_json(t.model)},
            {"layers", t.layers},
            {"top_k", t.top_k}};
}

json token_json(const RoutingTrace& t, size_t i) {
    const double scale = std::pow(10.0, TRACE_WEIGHT_DECIMALS);
    json e = json::array(), w = json::array();
    for (size_t l = 0; l < t.layers.size(); l++) {
        json er = json::array(), wr = json::array();
        for (int j = 0; j < t.top_k; j++) {
            er.push_back(t.experts[t.row(i, l) + size_t(j)]);
            wr.push_back(std::round(double(t.weights[t.row(i, l) + size_t(j)]) * scale) / scale);
        }
        e.push_back(std::move(er));
        w.push_back(std::move(wr));
    }
    return {{"r", t.request[i]},
            {"ph", t.phase[i] == TracePhase::PREFILL ? "p" : "d"},
            {"pos", t.position[i]},
            {"e", std::move(e)},
            {"w", std::move(w)}};
}

// One (layers, top_k) table of a token line: experts or weights.
void parse_rows(const std::filesystem::path& path, size_t line, const json& v, const char* name, const RoutingTrace& t,
                bool experts, RoutingTrace& out) {
    if (!v.is_array() || v.size() != t.layers.size())
        fail(path, line, std::string(name) + ": must be an array of " + std::to_string(t.layers.size()) + " layers");
    for (size_t l = 0; l < t.layers.size(); l++) {
        const json& row = v[l];
        const std::string where = std::string(name) + "[" + std::to_string(l) + "]";
        if (!row.is_array() || int(row.size()) != t.top_k)
            fail(path, line, where + ": must be an array of " + std::to_string(t.top_k) + " (top_k) entries");
        for (int j = 0; j < t.top_k; j++) {
            const json& x = row[size_t(j)];
            const std::string at = where + "[" + std::to_string(j) + "]";
            if (experts) {
                const int e = int(integer(path, line, x, at, 0, t.model.n_experts - 1));
                for (int k = 0; k < j; k++)
                    if (row[size_t(k)] == x) fail(path, line, at + ": expert " + std::to_string(e) + " chosen twice");
                out.experts.push_back(e);
            } else {
                if (!x.is_number()) fail(path, line, at + ": must be a number");
                const double w = x.get<double>();
                if (!std::isfinite(w) || w < 0) fail(path, line, at + ": must be a finite non-negative weight");
                out.weights.push_back(float(w));
            }
        }
    }
}

// A uniform double in [0, 1) from the generator's top 53 bits.
double uniform01(std::mt19937_64& rng) {
    return double(rng() >> 11) * 0x1p-53;
}

// One MoE layer's inclusion probabilities for top_k of its counts: pi_i =
// k x c_i / sum, an expert whose pi would exceed 1 fixed at 1 and the others
// rescaled to the remaining k - (fixed), repeated until none exceeds 1.
// The caller has checked that at least k experts have counts.
std::vector<double> inclusion_probabilities(std::span<const uint64_t> counts, int k) {
    std::vector<double> pi(counts.size(), 0.0);
    std::vector<bool> fixed(counts.size(), false);
    for (;;) {
        double rest = 0;
        int need = k;
        for (size_t i = 0; i < counts.size(); i++) {
            if (fixed[i])
                need--;
            else
                rest += double(counts[i]);
        }
        bool capped = false;
        for (size_t i = 0; i < counts.size(); i++) {
            if (fixed[i]) continue;
            if (need == 0) {  // k experts already fixed at 1: the rest never chosen
                pi[i] = 0;
                continue;
            }
            pi[i] = double(need) * double(counts[i]) / rest;
            if (pi[i] >= 1.0) {
                pi[i] = 1.0;
                fixed[i] = true;
                capped = true;
            }
        }
        if (!capped) return pi;
    }
}

}  // namespace

RoutingTrace routing_trace_empty(const ModelFingerprint& model) {
    RoutingTrace t;
    t.model = model;
    t.layers = model.moe_layers();
    t.top_k = model.n_experts_active;
    return t;
}

void routing_trace_write(const RoutingTrace& t, const std::filesystem::path& path) {
    const size_t n = t.n_tokens();
    const size_t cells = n * t.layers.size() * size_t(t.top_k);
    if (t.phase.size() != n || t.position.size() != n || t.experts.size() != cells || t.weights.size() != cells)
        throw MoeError(path.string() + ": routing trace arrays do not match its " + std::to_string(n) + " tokens");
    file_write_atomic_stream(path, [&](std::ostream& out) {
        out << header_json(t).dump() << '\n';
        for (size_t i = 0; i < n; i++) out << token_json(t, i).dump() << '\n';
        out << json{{"end", {{"tokens", n}}}}.dump() << '\n';
    });
}

RoutingTrace routing_trace_read(const std::filesystem::path& path) {
    const std::string text = file_read_text(path);
    RoutingTrace t;
    size_t line = 0, at = 0;
    bool ended = false;
    while (at < text.size()) {
        size_t end = text.find('\n', at);
        const bool complete = end != std::string::npos;
        if (!complete) end = text.size();
        const std::string_view piece(text.data() + at, end - at);
        at = end + 1;
        line++;
        if (ended) fail(path, line, "text after the end line");
        if (!complete) fail(path, line, "truncated (the line does not end)");
        json j;
        try {
            j = json_parse_bounded(piece, JSON_FILE_LIMITS, path.string());
        } catch (const JsonError&) {
        }
        if (!j.is_object()) fail(path, line, "not a JSON object (a damaged or truncated line?)");
        if (line == 1) {
            const json& format = field(path, line, j, "format");
            if (format != TRACE_FORMAT) fail(path, line, "format: expected '" + std::string(TRACE_FORMAT) + "'");
            const json& version = field(path, line, j, "version");
            if (version != TRACE_VERSION)
                fail(path, line,
                     "version: " + version.dump() + " is not supported (this build reads version " +
                         std::to_string(TRACE_VERSION) + ")");
            t = routing_trace_empty(
                fingerprint_from_json(field(path, line, j, "model"), path.string() + ":" + std::to_string(line)));
            if (field(path, line, j, "layers") != json(t.layers))
                fail(path, line, "layers: not the model's MoE layers " + json(t.layers).dump());
            if (field(path, line, j, "top_k") != json(t.top_k))
                fail(path, line, "top_k: not the model's n_experts_active " + std::to_string(t.top_k));
            continue;
        }
        if (auto e = j.find("end"); e != j.end()) {
            if (!e->is_object()) fail(path, line, "end: must be an object");
            const int64_t n = integer(path, line, field(path, line, *e, "tokens"), "end.tokens", 0, INT64_MAX);
            if (uint64_t(n) != t.n_tokens())
                fail(path, line,
                     "end.tokens: " + std::to_string(n) + ", but the file holds " + std::to_string(t.n_tokens()) +
                         " token lines");
            ended = true;
            continue;
        }
        const int r = int(integer(path, line, field(path, line, j, "r"), "r", 0, INT32_MAX));
        const json& ph = field(path, line, j, "ph");
        if (ph != "p" && ph != "d") fail(path, line, "ph: must be \"p\" (prefill) or \"d\" (decode)");
        const TracePhase phase = ph == "p" ? TracePhase::PREFILL : TracePhase::DECODE;
        if (!t.request.empty()) {
            if (r < t.request.back())
                fail(path, line, "r: " + std::to_string(r) + " after request " + std::to_string(t.request.back()));
            if (r == t.request.back() && phase == TracePhase::PREFILL && t.phase.back() == TracePhase::DECODE)
                fail(path, line, "ph: a prefill token after the request's decode tokens");
        }
        const int pos = int(integer(path, line, field(path, line, j, "pos"), "pos", 0, INT32_MAX));
        parse_rows(path, line, field(path, line, j, "e"), "e", t, true, t);
        parse_rows(path, line, field(path, line, j, "w"), "w", t, false, t);
        t.request.push_back(r);
        t.phase.push_back(phase);
        t.position.push_back(pos);
    }
    if (line == 0) fail(path, 1, "empty file (expected a routing trace header)");
    if (!ended) fail(path, line, "truncated: no end line after the last token line");
    return t;
}

Profile routing_trace_profile(const RoutingTrace& t) {
    Profile p = profile_empty(t.model);
    const int E = t.model.n_experts;
    int last_request = -1;
    uint64_t requests = 0;
    for (size_t i = 0; i < t.n_tokens(); i++) {
        std::vector<uint64_t>& table = t.phase[i] == TracePhase::PREFILL ? p.prefill : p.decode;
        for (size_t l = 0; l < t.layers.size(); l++)
            for (int j = 0; j < t.top_k; j++) table[size_t(t.layers[l]) * E + t.experts[t.row(i, l) + size_t(j)]]++;
        (t.phase[i] == TracePhase::PREFILL ? p.workload.prefill_tokens : p.workload.decode_tokens)++;
        if (t.request[i] != last_request) requests++;
        last_request = t.request[i];
    }
    p.workload.generated_tokens = p.workload.decode_tokens + requests;
    profile_sum_phases(p);
    return p;
}

RoutingTrace routing_trace_draw(const Profile& profile, const ModelFingerprint& model, const TraceDrawShape& shape,
                                uint64_t seed, const std::string& source) {
    profile_check(profile, model, source);
    if (shape.requests < 1 || shape.prefill < 1 || shape.decode < 0)
        throw MoeError(source + ": a drawn trace needs requests >= 1, prefill >= 1 and decode >= 0 tokens (got " +
                       std::to_string(shape.requests) + ", " + std::to_string(shape.prefill) + ", " +
                       std::to_string(shape.decode) + ")");
    const int64_t per_request = int64_t(shape.prefill) + shape.decode;
    if (per_request * shape.requests > TRACE_DRAW_MAX_TOKENS)
        throw MoeError(source + ": a drawn trace of " + std::to_string(shape.requests) + " x " +
                       std::to_string(per_request) + " tokens is over the limit of " +
                       std::to_string(TRACE_DRAW_MAX_TOKENS));
    RoutingTrace t = routing_trace_empty(model);
    const int E = model.n_experts, k = t.top_k;
    if (k < 1 || k > E)
        throw MoeError(source + ": the model's top-" + std::to_string(k) + " routing over " + std::to_string(E) +
                       " experts cannot be drawn");
    std::vector<std::vector<double>> pi;
    for (int layer : t.layers) {
        const std::span<const uint64_t> row(profile.counts.data() + size_t(layer) * size_t(E), size_t(E));
        const int with_counts = int(std::count_if(row.begin(), row.end(), [](uint64_t c) { return c > 0; }));
        if (with_counts < k)
            throw MoeError(source + ": layer " + std::to_string(layer) + ": " + std::to_string(with_counts) +
                           " experts have counts, a top-" + std::to_string(k) + " draw needs at least " +
                           std::to_string(k));
        pi.push_back(inclusion_probabilities(row, k));
    }
    const size_t n = size_t(per_request) * size_t(shape.requests);
    t.request.reserve(n);
    t.phase.reserve(n);
    t.position.reserve(n);
    t.experts.reserve(n * t.layers.size() * size_t(k));
    t.weights.assign(n * t.layers.size() * size_t(k), 1.0f / float(k));
    std::mt19937_64 rng(seed);
    std::vector<int> order(static_cast<size_t>(E));
    for (int r = 0; r < shape.requests; r++)
        for (int pos = 0; pos < per_request; pos++) {
            t.request.push_back(r);
            t.phase.push_back(pos < shape.prefill ? TracePhase::PREFILL : TracePhase::DECODE);
            t.position.push_back(pos);
            for (const std::vector<double>& p : pi) {
                for (int i = 0; i < E; i++) {  // Fisher-Yates: a uniform random order
                    const int j = std::min(i, int(uniform01(rng) * double(i + 1)));
                    order[size_t(i)] = order[size_t(j)];
                    order[size_t(j)] = i;
                }
                // Systematic: the experts whose interval [acc, acc + pi) holds the
                // next of u, u + 1, ...; at most one point each (pi <= 1).
                const size_t begin = t.experts.size();
                double acc = 0, next = uniform01(rng);
                for (int e : order) {
                    acc += p[size_t(e)];
                    if (p[size_t(e)] > 0 && next < acc && int(t.experts.size() - begin) < k) {
                        t.experts.push_back(e);
                        next += 1;
                    }
                }
                // Rounding can leave the last point just past the sum (k): take
                // the remaining experts with counts in the same order.
                for (int e : order) {
                    if (int(t.experts.size() - begin) == k) break;
                    if (p[size_t(e)] > 0 &&
                        std::find(t.experts.begin() + std::ptrdiff_t(begin), t.experts.end(), e) == t.experts.end())
                        t.experts.push_back(e);
                }
            }
        }
    return t;
}

RoutingTraceRecorder::RoutingTraceRecorder(const ModelFingerprint& model)
    : trace_(routing_trace_empty(model)), layer_index_(size_t(std::max(0, model.n_layers)), -1) {
    for (size_t i = 0; i < trace_.layers.size(); i++) layer_index_[size_t(trace_.layers[i])] = int(i);
}

void RoutingTraceRecorder::set(int request, TracePhase phase) {
    if (request != request_) request_begin_ = trace_.n_tokens();
    request_ = request;
    phase_ = phase;
}

void RoutingTraceRecorder::drop_request() {
    RoutingTrace& t = trace_;
    const size_t n = request_begin_;
    const size_t cells = n * t.layers.size() * size_t(t.top_k);
    t.request.resize(n);
    t.phase.resize(n);
    t.position.resize(n);
    t.experts.resize(cells);
    t.weights.resize(cells);
    pass_begin_ = n;
}

void RoutingTraceRecorder::on_pass(std::span<const int> positions) {
    RoutingTrace& t = trace_;
    pass_begin_ = t.n_tokens();
    for (int pos : positions) {
        t.request.push_back(request_);
        t.phase.push_back(phase_);
        t.position.push_back(pos);
    }
    const size_t cells = t.n_tokens() * t.layers.size() * size_t(t.top_k);
    t.experts.resize(cells, -1);
    t.weights.resize(cells, 0.0f);
}

void RoutingTraceRecorder::on_route(int layer, int n, int k, const int* experts, const float* weights) {
    RoutingTrace& t = trace_;
    if (layer < 0 || size_t(layer) >= layer_index_.size() || layer_index_[size_t(layer)] < 0 || k != t.top_k ||
        pass_begin_ + size_t(n) != t.n_tokens())
        throw MoeError("routing trace: a routing report that does not match the model or the pass");
    const size_t l = size_t(layer_index_[size_t(layer)]);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < k; j++) {
            t.experts[t.row(pass_begin_ + size_t(i), l) + size_t(j)] = experts[i * k + j];
            t.weights[t.row(pass_begin_ + size_t(i), l) + size_t(j)] = weights[i * k + j];
        }
}
