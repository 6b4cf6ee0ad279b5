// HttpServer: the routes of the OpenAI-compatible API, the metrics and
// model endpoints and the embedded web UI, as one named handler each, and
// the wiring of the rooms they use (see http_server.h): the transport
// (http_transport.h), request -> task mapping (generation_task.h), the
// engine thread and its queue (engine_worker.h). A generation request is
// parsed and mapped to a task on the httplib worker thread, queued, and
// answered from the task's events.
#include "server/http_server.h"

#include <httplib.h>
#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>

#include "base/errors.h"
#include "base/utf8.h"
#include "embedded_files.h"
#include "engine/model/model_source.h"
#include "engine/runtime/session.h"
#include "engine/text/work_budget.h"
#include "server/engine_worker.h"
#include "server/generation_task.h"
#include "server/http_transport.h"
#include "server/metrics.h"
#include "server/openai.h"
#include "server/placement_text.h"

using json = nlohmann::ordered_json;

namespace {

// Allocations from this size up are mapped on their own and given back to
// the system when freed.
constexpr int MMAP_THRESHOLD_BYTES = 256 << 10;

const char* const UI_MISSING_PAGE =
    "<!doctype html><html><head><meta charset=\"utf-8\"><title>moe-server</title></head><body>"
    "<h1>moe-server</h1><p>The web UI is not built into this binary. The OpenAI-compatible API is "
    "served under <code>/v1/</code> (see server/README.md).</p></body></html>";

const char* mime_type(const std::string& name) {
    static const std::pair<const char*, const char*> TYPES[] = {{".html", "text/html; charset=utf-8"},
                                                                {".js", "text/javascript; charset=utf-8"},
                                                                {".css", "text/css; charset=utf-8"},
                                                                {".svg", "image/svg+xml"},
                                                                {".png", "image/png"},
                                                                {".ico", "image/x-icon"},
                                                                {".json", "application/json"},
                                                                {".map", "application/json"},
                                                                {".woff2", "font/woff2"},
                                                                {".txt", "text/plain; charset=utf-8"}};
    for (const auto& [ext, type] : TYPES)
        if (name.size() > std::string_view(ext).size() && name.ends_with(ext)) return type;
    return nullptr;
}

// GET / and /index.html: the web UI's page.
void handle_index(const httplib::Request&, httplib::Response& res) {
    std::string_view page = embedded_file("index.html");
    if (page.empty())
        res.set_content(UI_MISSING_PAGE, "text/html; charset=utf-8");
    else
        res.set_content(page.data(), page.size(), "text/html; charset=utf-8");
}

// Other files of the embedded bundle, by bare name; never the file system.
void handle_asset(const httplib::Request& req, httplib::Response& res) {
    std::string name = req.matches[1];
    const char* type = mime_type(name);
    std::string_view data = type ? embedded_file(name) : std::string_view();
    if (data.empty()) {
        res.status = 404;
        return;
    }
    res.set_content(data.data(), data.size(), type);
}

}  // namespace

struct HttpServer::Impl {
    ServerOptions options;
    std::string model_id;
    int64_t started_at;
    Metrics metrics;
    GenerationTasks tasks;  // before the worker: its tasks use it until the worker is gone
    EngineWorker worker;
    HttpTransport http;

    explicit Impl(ServerOptions o)
        : options(std::move(o)),
          model_id(model_source_id(model_source_parse(options.model_dir.string()))),
          started_at(
              std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                  .count()),
          tasks(metrics),
          worker({.model_dir = options.model_dir, .threads = options.threads},
                 {.threads = options.threads, .ctx = options.ctx, .device = options.device},
                 size_t(std::max(0, options.max_queue))),
          http(options, metrics) {
        add_routes();
    }

    void add_routes() {
        auto route = [this](void (Impl::*handler)(const httplib::Request&, httplib::Response&)) {
            return std::bind_front(handler, this);
        };
        http.get("/health", route(&Impl::handle_health));
        http.get("/metrics", route(&Impl::handle_metrics));
        http.get("/v1/models", route(&Impl::handle_models));
        http.get("/v1/models/(.+)", route(&Impl::handle_model));
        http.get("/v1/experts", route(&Impl::handle_experts));
        http.post("/v1/chat/completions", route(&Impl::handle_chat));
        http.post("/v1/completions", route(&Impl::handle_completion));
        http.post("/tokenize", route(&Impl::handle_tokenize));
        http.post("/detokenize", route(&Impl::handle_detokenize));
        http.post("/apply-template", route(&Impl::handle_apply_template));
        http.get("/", handle_index);
        http.get("/index.html", handle_index);
        http.get("/([A-Za-z0-9_-][A-Za-z0-9_.-]*)", handle_asset);
    }

    // Any thread: cancels the tasks and makes run() return.
    void stop() {
        worker.stop();
        http.stop();
    }

    Session& require_engine() {
        if (!worker.ready()) throw ApiError(503, "The model is still loading; retry in a moment.", "", "model_loading");
        return worker.engine();
    }

    // Queues a generation task and answers from its events.
    void answer(const httplib::Request& req, httplib::Response& res, std::shared_ptr<Task> task,
                OpenAiResponder responder) {
        if (!worker.submit(task))
            throw ApiError(503,
                           "The server is busy: " + std::to_string(options.max_queue) +
                               " requests are already waiting for the engine. Retry shortly.",
                           "", "queue_full");
        send_task_events(req, res, std::move(task), std::move(responder), metrics);
    }

    // ---- routes ------------------------------------------------------------

    void handle_health(const httplib::Request&, httplib::Response& res) {
        if (worker.ready()) {
            send_json(res, {{"status", "ok"}});
        } else {
            res.status = 503;
            res.set_header("Retry-After", "1");
            send_json(res, {{"status", "loading"}});
        }
    }

    void handle_metrics(const httplib::Request&, httplib::Response& res) {
        std::string text = metrics.render(worker.waiting(), worker.running());
        if (worker.ready()) text += Metrics::render_experts(expert_metrics());
        res.set_content(text, "text/plain; version=0.0.4; charset=utf-8");
    }

    void handle_models(const httplib::Request&, httplib::Response& res) {
        send_json(res, {{"object", "list"}, {"data", json::array({model_json()})}});
    }

    void handle_model(const httplib::Request& req, httplib::Response& res) {
        std::string id = req.matches[1];
        if (id != model_id)
            throw ApiError(404, "The model '" + id + "' does not exist; this server serves '" + model_id + "'.",
                           "model", "model_not_found");
        send_json(res, model_json());
    }

    void handle_chat(const httplib::Request& req, httplib::Response& res) {
        Session& e = require_engine();
        ChatRequest chat = chat_request_parse(parse_json_body(req.body), e.ctx());
        ChatTask task = tasks.chat(e, worker.chat(), chat);
        OpenAiResponder responder(Endpoint::CHAT, chat.options, model_id, e.model().tokenizer());
        if (task.tool_calls) responder.parse_tool_calls(*task.tool_calls, task.tool_trigger_token);
        answer(req, res, std::move(task.task), std::move(responder));
    }

    void handle_completion(const httplib::Request& req, httplib::Response& res) {
        Session& e = require_engine();
        CompletionRequest c = completion_request_parse(parse_json_body(req.body), e.ctx(), e.model().tokenizer().vocab_size());
        answer(req, res, tasks.completion(e, c), OpenAiResponder(Endpoint::COMPLETION, c.options, model_id, e.model().tokenizer()));
    }

    void handle_tokenize(const httplib::Request& req, httplib::Response& res) {
        Session& e = require_engine();
        TokenizeRequest t = tokenize_request_parse(parse_json_body(req.body));
        std::vector<int> ids;
        if (t.has_messages) {
            ids = chat_prompt_of(e, worker.chat(), t.chat);
        } else {
            ids = text_tokens(e.model().tokenizer(), t.content, t.add_special);
        }
        release_tokenizer_memory(t.text_bytes);
        json tokens = json::array();
        for (int id : ids) {
            if (t.with_pieces)
                tokens.push_back({{"id", id}, {"piece", utf8_sanitize(e.model().tokenizer().token_bytes(id))}});
            else
                tokens.push_back(id);
        }
        send_json(res, {{"tokens", tokens}});
    }

    void handle_detokenize(const httplib::Request& req, httplib::Response& res) {
        Session& e = require_engine();
        std::vector<int> ids = detokenize_request_parse(parse_json_body(req.body), e.model().tokenizer().vocab_size());
        send_json(res, {{"content", e.model().tokenizer().decode(ids)}});
    }

    // llama.cpp's /apply-template: a chat request's prompt text, as the
    // model's template renders it, without generating.
    void handle_apply_template(const httplib::Request& req, httplib::Response& res) {
        require_engine();
        ChatInput chat = chat_input_parse(parse_json_body(req.body));
        const size_t bytes = chat_input_bytes(chat);
        if (bytes > MAX_TOKENIZE_BYTES)
            throw ApiError(400,
                           "Invalid 'messages': " + std::to_string(bytes) + " bytes of text, but /apply-template " +
                               "renders at most " + std::to_string(MAX_TOKENIZE_BYTES) + " bytes per request.",
                           "messages", "invalid_value");
        send_json(res, {{"prompt", chat_text_of(worker.chat(), chat)}});
    }

    void handle_experts(const httplib::Request&, httplib::Response& res) {
        Session& e = require_engine();
        RoutingCounts rc = e.routing_counts();
        auto matrix = [&](const std::vector<uint64_t>& v) {
            json rows = json::array();
            for (int l = 0; l < rc.n_layers; l++) {
                json row = json::array();
                for (int x = 0; x < rc.n_experts; x++) row.push_back(v.at(size_t(l) * rc.n_experts + x));
                rows.push_back(row);
            }
            return rows;
        };
        const PlacementInfo& p = e.placement();
        Session::Execution ex = e.execution_stats();
        // Where each expert is now: resident (pinned or cached) and, of
        // those, in a cache slot.
        const std::vector<uint8_t> slots = e.expert_slots();
        json resident = json::array(), cached = json::array();
        for (int l = 0; l < rc.n_layers; l++) {
            json row = json::array(), cached_row = json::array();
            for (int x = 0; x < rc.n_experts; x++) {
                const uint8_t where = slots.at(size_t(l) * rc.n_experts + x);
                row.push_back(where != Session::EXPERT_CPU);
                cached_row.push_back(where == Session::EXPERT_CACHED);
            }
            resident.push_back(row);
            cached.push_back(cached_row);
        }
        bool device = p.device != DeviceKind::NONE;
        double gpu_share = ex.total.device_share();
        send_json(res, {{"object", "experts"},
                        {"model", model_id},
                        {"layers", rc.n_layers},
                        {"experts", rc.n_experts},
                        {"top_k", e.model().config().n_experts_active},
                        {"dense_layers", e.model().config().dense_layers},
                        {"counts_total", matrix(rc.total)},
                        {"counts_last", matrix(rc.last)},
                        {"resident", resident},
                        {"cached", cached},
                        {"device", device_kind_name(p.device)},
                        {"device_name", placement_device_name(p)},
                        {"work_share", {{"cpu", 1.0 - gpu_share}, {"gpu", gpu_share}}},
                        {"hit_rate", device ? json(ex.total.hit_rate()) : json(nullptr)},
                        {"placement",
                         {{"plan", plan_kind_name(p.plan)},
                          {"profile", p.profile},
                          {"capacity", p.capacity},
                          {"cache_policy", device ? json(placement_cache_policy(p)) : json(nullptr)},
                          {"cache_slots", p.cache_slots},
                          {"prefetch", p.prefetch},
                          {"budget_bytes", p.budget_bytes},
                          {"expert_bytes", p.expert_bytes},
                          {"dense_bytes", p.dense_bytes},
                          {"kv_bytes", p.kv_bytes},
                          {"activation_bytes", p.activation_bytes},
                          {"margin_bytes", p.margin_bytes},
                          {"staging_slots", p.staging_slots},
                          {"copy_source", placement_copy_source(p)},
                          {"expected_hit_rate", p.expected_hit_rate >= 0 ? json(p.expected_hit_rate) : json(nullptr)},
                          {"latency_model", placement_latency_source(p)}}},
                        {"execution_total", execution_json(ex.total)},
                        {"execution_last", execution_json(ex.last)}});
    }

    // ---- JSON builders -----------------------------------------------------

    json model_json() {
        json m{{"id", model_id}, {"object", "model"}, {"created", started_at}, {"owned_by", "moe-server"}};
        if (worker.ready()) {
            const Session& engine = worker.engine();
            const ModelConfig& c = engine.model().config();
            m["meta"] = {{"n_ctx", engine.ctx()},
                         {"n_vocab", c.vocab_size},
                         {"n_layers", c.n_layers},
                         {"n_experts", c.n_experts},
                         {"n_experts_active", c.n_experts_active},
                         {"architecture", c.architecture},
                         {"chat_template", worker.chat().name()},
                         {"tokenizer", engine.model().tokenizer().source()}};
        }
        return m;
    }

    ExpertMetrics expert_metrics() {
        const Session& engine = worker.engine();
        const PlacementInfo& p = engine.placement();
        return {device_kind_name(p.device),
                placement_device_name(p),
                p.capacity,
                p.n_layers * p.n_experts,
                p.cache_slots,
                engine.execution_stats().total};
    }

    // {"sites": {SITE: {KEY: count}}, KEY: value, ..., "per_layer": {KEY:
    // [ms or count per layer]}}, walking execution_stats_fields().
    static json execution_json(const ExecutionStats& s) {
        json out{{"sites", json::object()}};
        for (const ExecutionField& f : execution_stats_fields()) {
            if (auto* site_value = std::get_if<ExecutionField::PerSite>(&f.value))
                for (int i = 0; i < EXPERT_SITE_COUNT; i++)
                    out["sites"][expert_site_name(ExpertSite(i))][f.key] = (*site_value)(s, ExpertSite(i));
            if (auto* count = std::get_if<ExecutionField::Count>(&f.value)) out[f.key] = s.*count->member;
            if (auto* ms = std::get_if<ExecutionField::Ms>(&f.value)) out[f.key] = s.*(*ms);
            if (auto* layer = std::get_if<ExecutionField::PerLayer>(&f.value)) out["per_layer"][f.key] = s.*layer->ms;
            if (auto* layer = std::get_if<ExecutionField::PerLayerCount>(&f.value))
                out["per_layer"][f.key] = s.*layer->counts;
        }
        return out;
    }
};

HttpServer::HttpServer(ServerOptions options) {
    std::signal(SIGPIPE, SIG_IGN);
#ifdef __GLIBC__
    // A fixed threshold (the default one grows to 32 MiB after the first
    // large free) keeps request-sized blocks (bodies, texts) out of the
    // per-thread arenas, which would keep them after the request.
    mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES);
#endif
    if (options.model_dir.empty()) throw MoeError("serve: no model folder given");
    // A render or tokenization on a request's thread stops when its client is gone.
    work_budget_set_cancel_probe([] {
        const HttpConnection* c = http_connection();
        return c && c->gone();
    });
    impl_ = std::make_unique<Impl>(std::move(options));
}

std::string http_url(const std::string& host, int port) {
    const bool ipv6 = host.find(':') != std::string::npos && host.front() != '[';
    return "http://" + (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port) + "/";
}

HttpServer::~HttpServer() {
    impl_->stop();
    impl_->worker.join();
}

int HttpServer::bind() {
    return impl_->http.bind();
}

int HttpServer::port() const {
    return impl_->http.port();
}

void HttpServer::run() {
    Impl& m = *impl_;
    bind();
    m.worker.start(
        [&m](const Session& engine) {
            std::fprintf(stderr, "moe-server: model '%s' ready (context %d tokens, %d threads) on %s\n",
                         m.model_id.c_str(), engine.ctx(), engine.threads(),
                         http_url(m.options.host, m.http.port()).c_str());
        },
        [&m] { m.stop(); });
    m.http.listen();
    m.worker.stop();
    m.worker.join();
    std::string error = m.worker.load_error();
    if (!error.empty()) throw MoeError(error);
}

void HttpServer::stop() {
    work_budget_stop_all();  // a render or tokenization in flight ends now
    impl_->stop();
}

bool HttpServer::ready() const {
    return impl_->worker.ready();
}

const std::string& HttpServer::model_id() const {
    return impl_->model_id;
}

void HttpServer::with_engine(const std::function<void(Session&)>& fn) {
    impl_->worker.run_between_tasks(fn);
}
