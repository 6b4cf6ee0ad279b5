// HTTP routes, auth, CORS, the engine thread and the streaming pump (see
// http_server.h). A generation request is validated and tokenized on the
// httplib worker thread, queued as a Task, and answered through a chunked
// content provider that waits on the task's events; a client that hangs up
// makes the provider fail, which cancels the task, and the engine stops
// before its next forward pass.
#include "server/http_server.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "embedded_files.h"
#include "engine/runtime/engine.h"
#include "engine/errors.h"
#include "engine/model/model_source.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/openai_response.h"
#include "server/request_queue.h"

using json = nlohmann::ordered_json;

namespace {

using Clock = std::chrono::steady_clock;

// How often a waiting response checks that its client is still there.
constexpr auto CLIENT_POLL = std::chrono::milliseconds(50);

const char* const UI_MISSING_PAGE =
    "<!doctype html><html><head><meta charset=\"utf-8\"><title>moe-server</title></head><body>"
    "<h1>moe-server</h1><p>The web UI is not built into this binary. The OpenAI-compatible API is "
    "served under <code>/v1/</code> (see server/README.md).</p></body></html>";

// Routes as metrics labels: fixed strings only, so an unknown path cannot
// grow the label set.
std::string route_label(const httplib::Request& req) {
    static const char* const KNOWN[] = {"/v1/chat/completions",
                                        "/v1/completions",
                                        "/v1/models",
                                        "/v1/experts",
                                        "/health",
                                        "/metrics",
                                        "/tokenize",
                                        "/detokenize",
                                        "/",
                                        "/index.html"};
    for (const char* r : KNOWN)
        if (req.path == r) return r;
    if (req.path.rfind("/v1/models/", 0) == 0) return "/v1/models/{id}";
    return "other";
}

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

bool needs_auth(const std::string& path) {
    return path.rfind("/v1/", 0) == 0 || path == "/tokenize" || path == "/detokenize" || path == "/metrics";
}

}  // namespace

struct HttpServer::Impl {
    ServerOptions options;
    std::string model_id;
    int64_t started_at;
    httplib::Server svr;
    RequestQueue queue;
    Metrics metrics;
    std::thread engine_thread;
    std::unique_ptr<Engine> engine;
    std::atomic<bool> ready{false};
    std::atomic<bool> stopping{false};
    std::atomic<bool> serving{false};
    int bound_port = -1;
    std::mutex error_mutex;
    std::string load_error;

    explicit Impl(ServerOptions o)
        : options(std::move(o)),
          model_id(model_source_id(model_source_parse(options.model_dir.string()))),
          started_at(
              std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                  .count()),
          queue(size_t(std::max(0, options.max_queue))) {
        setup();
    }

    // ---- helpers -----------------------------------------------------------

    void send_error(httplib::Response& res, const ApiError& e) {
        res.status = e.status;
        if (e.status == 503) res.set_header("Retry-After", "1");
        if (e.status == 401) res.set_header("WWW-Authenticate", "Bearer");
        res.set_content(json_dump(api_error_json(e)), "application/json");
    }

    void send_json(httplib::Response& res, const json& j) { res.set_content(json_dump(j), "application/json"); }

    Engine& require_engine() {
        if (!ready.load()) throw ApiError(503, "The model is still loading; retry in a moment.", "", "model_loading");
        return *engine;
    }

    template <class F>
    httplib::Server::Handler guarded(F f) {
        return [this, f](const httplib::Request& req, httplib::Response& res) {
            try {
                f(req, res);
            } catch (const ApiError& e) {
                send_error(res, e);
            } catch (const MoeError& e) {
                send_error(res, ApiError(400, e.what()));
            } catch (const std::exception& e) {
                send_error(res, ApiError(500, std::string("Internal server error: ") + e.what()));
            }
        };
    }

    bool authorized(const httplib::Request& req) const {
        if (options.api_key.empty()) return true;
        return req.get_header_value("Authorization") == "Bearer " + options.api_key;
    }

    // ---- routes ------------------------------------------------------------

    void setup() {
        size_t workers = std::max<size_t>(8, size_t(std::max(0, options.max_queue)) + 8);
        svr.new_task_queue = [workers] { return new httplib::ThreadPool(workers); };
        svr.set_payload_max_length(options.max_body_bytes);

        svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
            if (!options.cors_origin.empty()) {
                res.set_header("Access-Control-Allow-Origin", options.cors_origin);
                res.set_header("Vary", "Origin");
            }
            if (req.method == "OPTIONS") {
                if (!options.cors_origin.empty()) {
                    res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
                    res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
                    res.set_header("Access-Control-Max-Age", "600");
                }
                res.status = 204;
                return httplib::Server::HandlerResponse::Handled;
            }
            if (needs_auth(req.path) && !authorized(req)) {
                bool given = req.has_header("Authorization");
                send_error(res, ApiError(401,
                                         given ? "Incorrect API key provided."
                                               : "You didn't provide an API key. Send it as 'Authorization: Bearer "
                                                 "KEY' (the server was started with --api-key).",
                                         "", "invalid_api_key"));
                return httplib::Server::HandlerResponse::Handled;
            }
            return httplib::Server::HandlerResponse::Unhandled;
        });

        svr.set_error_handler(
            httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
                if (!res.body.empty() || res.is_chunked_content_provider_)
                    return httplib::Server::HandlerResponse::Unhandled;
                std::string message;
                std::string code;
                switch (res.status) {
                case 404:
                    message = "Invalid URL (" + req.method + " " + req.path + ")";
                    code = "unknown_url";
                    break;
                case 413:
                    message = "The request body is larger than the limit of " + std::to_string(options.max_body_bytes) +
                              " bytes.";
                    code = "request_too_large";
                    break;
                case 414:
                    message = "The request URI is too long.";
                    break;
                default:
                    message = "The request could not be handled (HTTP " + std::to_string(res.status) + ").";
                }
                send_error(res, ApiError(res.status, message, "", code));
                return httplib::Server::HandlerResponse::Handled;
            }));

        svr.set_exception_handler([this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
            std::string what = "unknown exception";
            try {
                std::rethrow_exception(ep);
            } catch (const std::exception& e) {
                what = e.what();
            } catch (...) {
            }
            send_error(res, ApiError(500, "Internal server error: " + what));
        });

        svr.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
            metrics.count_request(route_label(req), res.status);
            if (options.log_requests)
                std::fprintf(stderr, "moe-server: %s %s %s -> %d\n", req.remote_addr.c_str(), req.method.c_str(),
                             req.path.c_str(), res.status);
        });

        svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
            if (ready.load()) {
                send_json(res, {{"status", "ok"}});
            } else {
                res.status = 503;
                res.set_header("Retry-After", "1");
                send_json(res, {{"status", "loading"}});
            }
        });
        svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
            std::string text = metrics.render(queue.waiting(), queue.running());
            if (ready.load()) text += Metrics::render_experts(expert_metrics());
            res.set_content(text, "text/plain; version=0.0.4; charset=utf-8");
        });
        svr.Get("/v1/models", guarded([this](const httplib::Request&, httplib::Response& res) {
                    send_json(res, {{"object", "list"}, {"data", json::array({model_json()})}});
                }));
        svr.Get("/v1/models/(.+)", guarded([this](const httplib::Request& req, httplib::Response& res) {
                    std::string id = req.matches[1];
                    if (id != model_id)
                        throw ApiError(404,
                                       "The model '" + id + "' does not exist; this server serves '" + model_id + "'.",
                                       "model", "model_not_found");
                    send_json(res, model_json());
                }));
        svr.Get("/v1/experts",
                guarded([this](const httplib::Request&, httplib::Response& res) { handle_experts(res); }));
        svr.Post("/v1/chat/completions",
                 guarded([this](const httplib::Request& req, httplib::Response& res) { handle_chat(req, res); }));
        svr.Post("/v1/completions",
                 guarded([this](const httplib::Request& req, httplib::Response& res) { handle_completion(req, res); }));
        svr.Post("/tokenize",
                 guarded([this](const httplib::Request& req, httplib::Response& res) { handle_tokenize(req, res); }));
        svr.Post("/detokenize", guarded([this](const httplib::Request& req, httplib::Response& res) {
                     Engine& e = require_engine();
                     std::vector<int> ids =
                         detokenize_request_parse(parse_json_body(req.body), e.tokenizer().vocab_size());
                     send_json(res, {{"content", e.tokenizer().decode(ids)}});
                 }));
        auto index = [](const httplib::Request&, httplib::Response& res) {
            std::string_view page = embedded_file("index.html");
            if (page.empty())
                res.set_content(UI_MISSING_PAGE, "text/html; charset=utf-8");
            else
                res.set_content(page.data(), page.size(), "text/html; charset=utf-8");
        };
        svr.Get("/", index);
        svr.Get("/index.html", index);
        // Other files of the embedded bundle, by bare name; never the file system.
        svr.Get("/([A-Za-z0-9_-][A-Za-z0-9_.-]*)", [](const httplib::Request& req, httplib::Response& res) {
            std::string name = req.matches[1];
            const char* type = mime_type(name);
            std::string_view data = type ? embedded_file(name) : std::string_view();
            if (data.empty()) {
                res.status = 404;
                return;
            }
            res.set_content(data.data(), data.size(), type);
        });
    }

    json model_json() const {
        json m{{"id", model_id}, {"object", "model"}, {"created", started_at}, {"owned_by", "moe-server"}};
        if (ready.load()) {
            const ModelConfig& c = engine->config();
            m["meta"] = {{"n_ctx", engine->ctx()},
                         {"n_vocab", c.vocab_size},
                         {"n_layers", c.n_layers},
                         {"n_experts", c.n_experts},
                         {"n_experts_active", c.n_experts_active},
                         {"architecture", c.architecture}};
        }
        return m;
    }

    ExpertMetrics expert_metrics() const {
        const PlacementInfo& p = engine->placement();
        ExecutionStats s = engine->execution_stats().total;
        ExpertMetrics m;
        m.device = p.device;
        m.resident = p.capacity;
        m.total = p.n_layers * p.n_experts;
        for (int i = 0; i < 3; i++) {
            m.runs[i] = s.runs[i];
            m.tokens[i] = s.total_tokens(ExpertSite(i));
        }
        m.copy_bytes = s.copy_bytes;
        m.layers = s.layers;
        m.predicted_ms = s.predicted_ms;
        m.measured_ms = s.measured_ms;
        m.predicted_cpu_ms = s.predicted_cpu_ms;
        m.measured_cpu_ms = s.measured_cpu_ms;
        m.predicted_device_ms = s.predicted_device_ms;
        m.measured_device_ms = s.measured_device_ms;
        m.device_name = p.device_name;
        m.layer_predicted_cpu_ms = s.layer_predicted_cpu_ms;
        m.layer_measured_cpu_ms = s.layer_measured_cpu_ms;
        m.layer_predicted_device_ms = s.layer_predicted_device_ms;
        m.layer_measured_device_ms = s.layer_measured_device_ms;
        return m;
    }

    static json execution_json(const ExecutionStats& s) {
        json sites = json::object();
        for (int i = 0; i < 3; i++)
            sites[expert_site_name(ExpertSite(i))] = {{"runs", s.runs[i]}, {"tokens", s.total_tokens(ExpertSite(i))}};
        return {{"sites", sites},
                {"copy_bytes", s.copy_bytes},
                {"layers", s.layers},
                {"predicted_ms", s.predicted_ms},
                {"measured_ms", s.measured_ms},
                {"predicted_cpu_ms", s.predicted_cpu_ms},
                {"measured_cpu_ms", s.measured_cpu_ms},
                {"predicted_device_ms", s.predicted_device_ms},
                {"measured_device_ms", s.measured_device_ms},
                {"per_layer",
                 {{"predicted_cpu_ms", s.layer_predicted_cpu_ms},
                  {"measured_cpu_ms", s.layer_measured_cpu_ms},
                  {"predicted_device_ms", s.layer_predicted_device_ms},
                  {"measured_device_ms", s.layer_measured_device_ms}}}};
    }

    void handle_experts(httplib::Response& res) {
        Engine& e = require_engine();
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
        Engine::Execution ex = e.execution_stats();
        json resident = json::array();
        for (int l = 0; l < rc.n_layers; l++) {
            json row = json::array();
            for (int x = 0; x < rc.n_experts; x++) row.push_back(p.resident.at(size_t(l) * p.n_experts + x) != 0);
            resident.push_back(row);
        }
        bool device = p.device != "none";
        double gpu_share = ex.total.device_share();
        send_json(res, {{"object", "experts"},
                        {"model", model_id},
                        {"layers", rc.n_layers},
                        {"experts", rc.n_experts},
                        {"top_k", e.config().n_experts_active},
                        {"counts_total", matrix(rc.total)},
                        {"counts_last", matrix(rc.last)},
                        {"resident", resident},
                        {"device", p.device},
                        {"device_name", p.device_name},
                        {"work_share", {{"cpu", 1.0 - gpu_share}, {"gpu", gpu_share}}},
                        {"hit_rate", device ? json(ex.total.hit_rate()) : json(nullptr)},
                        {"placement",
                         {{"plan", p.plan},
                          {"profile", p.profile},
                          {"capacity", p.capacity},
                          {"budget_bytes", p.budget_bytes},
                          {"expert_bytes", p.expert_bytes},
                          {"dense_bytes", p.dense_bytes},
                          {"kv_bytes", p.kv_bytes},
                          {"activation_bytes", p.activation_bytes},
                          {"margin_bytes", p.margin_bytes},
                          {"staging_slots", p.staging_slots},
                          {"copy_source", p.copy_source},
                          {"expected_hit_rate", p.expected_hit_rate >= 0 ? json(p.expected_hit_rate) : json(nullptr)},
                          {"latency_model", p.latency_source}}},
                        {"execution_total", execution_json(ex.total)},
                        {"execution_last", execution_json(ex.last)}});
    }

    void handle_tokenize(const httplib::Request& req, httplib::Response& res) {
        Engine& e = require_engine();
        TokenizeRequest t = tokenize_request_parse(parse_json_body(req.body));
        std::vector<int> ids;
        if (t.has_messages) {
            try {
                ids = e.chat_template().encode(e.tokenizer(), t.messages);
            } catch (const MoeError& err) {
                throw ApiError(400, std::string("Invalid 'messages': ") + err.what(), "messages", "invalid_value");
            }
        } else {
            if (t.add_special) ids.push_back(e.tokenizer().bos_id());
            std::vector<int> text = e.tokenizer().encode(t.content);
            ids.insert(ids.end(), text.begin(), text.end());
        }
        json tokens = json::array();
        for (int id : ids) {
            if (t.with_pieces)
                tokens.push_back({{"id", id}, {"piece", utf8_sanitize(e.tokenizer().token_bytes(id))}});
            else
                tokens.push_back(id);
        }
        send_json(res, {{"tokens", tokens}});
    }

    void handle_chat(const httplib::Request& req, httplib::Response& res) {
        Engine& e = require_engine();
        ChatRequest chat = chat_request_parse(parse_json_body(req.body), e.ctx());
        std::vector<int> prompt;
        try {
            prompt = e.chat_prompt(chat.messages).ids;
        } catch (const MoeError& err) {
            throw ApiError(400, std::string("Invalid 'messages': ") + err.what(), "messages", "invalid_value");
        }
        start_generation(res, Endpoint::CHAT, std::move(prompt), chat.options);
    }

    void handle_completion(const httplib::Request& req, httplib::Response& res) {
        Engine& e = require_engine();
        CompletionRequest c = completion_request_parse(parse_json_body(req.body), e.ctx(), e.tokenizer().vocab_size());
        std::vector<int> prompt;
        if (c.has_prompt_tokens) {
            prompt = std::move(c.prompt_tokens);
        } else {
            prompt.push_back(e.tokenizer().bos_id());
            std::vector<int> text = e.tokenizer().encode(c.prompt);
            prompt.insert(prompt.end(), text.begin(), text.end());
        }
        start_generation(res, Endpoint::COMPLETION, std::move(prompt), c.options);
    }

    // ---- generation --------------------------------------------------------

    void start_generation(httplib::Response& res, Endpoint endpoint, std::vector<int> prompt,
                          const GenerationOptions& o) {
        Engine& e = *engine;
        const int ctx = e.ctx();
        const int n_prompt = int(prompt.size());
        const char* what = endpoint == Endpoint::CHAT ? "messages" : "prompt";
        if (n_prompt >= ctx)
            throw ApiError(400,
                           "This model's maximum context length is " + std::to_string(ctx) + " tokens. However, your " +
                               what + " resulted in " + std::to_string(n_prompt) +
                               " tokens, which leaves no room for a reply. Shorten the " + what +
                               " or start the server with a larger --ctx.",
                           what, "context_length_exceeded");
        GenerateRequest g;
        g.prompt = std::move(prompt);
        g.sampling = o.sampling;
        g.max_tokens = std::min(o.max_tokens.value_or(ctx - n_prompt), ctx - n_prompt);
        g.stop = o.stop;
        g.ignore_eos = o.ignore_eos;
        g.top_logprobs = o.top_logprobs;
        g.reuse_prefix = o.cache_prompt;

        const bool is_chat = endpoint == Endpoint::CHAT;
        std::shared_ptr<Task> task;
        if (o.beam_width > 0) {
            BeamRequest b = beam_request_from(g, o.beam_width, o.length_penalty, o.n);
            task = std::make_shared<Task>(
                [this, b, is_chat](Engine& engine_, Task& t) { run_beam_search(engine_, t, b, is_chat); });
        } else {
            task = std::make_shared<Task>(
                [this, g, is_chat](Engine& engine_, Task& t) { run_generation(engine_, t, g, is_chat); });
        }
        if (!queue.push(task))
            throw ApiError(503,
                           "The server is busy: " + std::to_string(options.max_queue) +
                               " requests are already waiting for the engine. Retry shortly.",
                           "", "queue_full");

        struct Pump {
            std::shared_ptr<Task> task;
            OpenAiResponder responder;
            bool started = false;
        };
        auto pump = std::make_shared<Pump>(Pump{task, OpenAiResponder(endpoint, o, model_id, e.tokenizer())});
        // Plain JSON replies use the same chunked provider as streams: only a
        // provider sees the client hang up while the engine works. The status
        // line goes out first, so every error a request can cause is found
        // above, before it is queued.
        if (o.stream) {
            res.set_header("Cache-Control", "no-cache");
            res.set_header("X-Accel-Buffering", "no");
        }
        res.set_chunked_content_provider(
            o.stream ? "text/event-stream" : "application/json",
            [pump](size_t, httplib::DataSink& sink) {
                std::string out;
                if (!pump->started) {
                    pump->started = true;
                    out = pump->responder.start();
                }
                std::vector<TaskEvent> events;
                for (;;) {
                    // is_writable() also notices a peer that closed its end.
                    if (!sink.is_writable() || (!out.empty() && !sink.write(out.data(), out.size()))) {
                        pump->task->cancel();
                        return false;
                    }
                    out.clear();
                    if (pump->responder.finished()) {
                        sink.done();
                        return true;
                    }
                    pump->task->wait_events(events, CLIENT_POLL);
                    for (const TaskEvent& ev : events) out += pump->responder.on_event(ev);
                }
            },
            [task](bool success) {
                if (!success) task->cancel();
            });
    }

    // Engine thread.
    void run_generation(Engine& e, Task& task, const GenerateRequest& g, bool is_chat) {
        bool first = true;
        GenerateResult result = e.generate(g, [&](const TokenEvent& ev) {
            metrics.add_generated_tokens(1);
            if (first) {
                first = false;
                metrics.observe_ttft(std::chrono::duration<double>(Clock::now() - task.admitted()).count());
            }
            TaskEvent event;
            event.kind = TaskEventKind::TOKEN;
            event.token = ev;
            task.push(std::move(event));
            return !task.cancelled();
        });
        if (is_chat && result.finish_reason != FinishReason::CANCELLED) e.remember_reply(result.text, result.tokens);
        metrics.add_prompt_tokens(result.n_prompt, result.n_cached);
        metrics.count_generation(finish_reason_name(result.finish_reason), result.prefill_tok_s(),
                                 result.decode_tok_s());
        TaskEvent done;
        done.kind = TaskEventKind::DONE;
        done.result = std::move(result);
        task.push(std::move(done));
    }

    // Engine thread. No token events: the choices come with DONE.
    void run_beam_search(Engine& e, Task& task, const BeamRequest& b, bool is_chat) {
        BeamResult result = e.beam_search(b, [&](const BeamStep&) { return !task.cancelled(); });
        const bool done = result.finish_reason != FinishReason::CANCELLED && !result.hypotheses.empty();
        if (is_chat && done) e.remember_reply(result.hypotheses[0].text, result.hypotheses[0].tokens);
        if (done) metrics.observe_ttft(std::chrono::duration<double>(Clock::now() - task.admitted()).count());
        int completion = 0;
        for (const BeamHypothesis& h : result.hypotheses) completion += h.length;
        metrics.add_generated_tokens(completion);
        metrics.add_prompt_tokens(result.n_prompt, result.n_cached);
        double prefill_tok_s = result.prefill_ms > 0 ? (result.n_prompt - result.n_cached) * 1000.0 / result.prefill_ms : 0;
        metrics.count_generation(finish_reason_name(result.finish_reason), prefill_tok_s, result.best_tok_s());
        metrics.observe_beam_search(result.n_steps, result.expert_load.histogram, result.expert_load.max(),
                                    result.expert_load.mean());
        TaskEvent event;
        event.kind = TaskEventKind::DONE;
        event.beam = std::move(result);
        task.push(std::move(event));
    }

    void engine_main() {
        try {
            EngineOptions eo;
            eo.model_dir = options.model_dir;
            eo.ctx = options.ctx;
            eo.threads = options.threads;
            eo.device = options.device;
            engine = std::make_unique<Engine>(eo);
        } catch (const std::exception& e) {
            {
                std::lock_guard lock(error_mutex);
                load_error = e.what();
            }
            stop();
            return;
        }
        if (!engine->load_warning().empty()) std::fprintf(stderr, "moe-server: %s\n", engine->load_warning().c_str());
        std::fprintf(stderr, "moe-server: %s\n", engine->placement_summary().c_str());
        ready.store(true);
        std::fprintf(stderr, "moe-server: model '%s' ready (context %d tokens, %d threads) on http://%s:%d/\n",
                     model_id.c_str(), engine->ctx(), engine->threads(), options.host.c_str(), bound_port);
        while (std::shared_ptr<Task> task = queue.pop()) {
            if (!task->cancelled()) {
                try {
                    task->run(*engine);
                } catch (const MoeError& e) {
                    task->finish(400, e.what());
                } catch (const std::exception& e) {
                    task->finish(500, std::string("Internal server error: ") + e.what());
                }
            }
            task->finish(499, "the request was cancelled");
            queue.done_running();
        }
    }

    void stop() {
        stopping.store(true);
        queue.shutdown();
        // A stop() just before listening would be lost: wait until it runs.
        while (serving.load() && !svr.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
        svr.stop();
    }
};

HttpServer::HttpServer(ServerOptions options) {
    std::signal(SIGPIPE, SIG_IGN);
    if (options.model_dir.empty()) throw MoeError("serve: no model folder given");
    impl_ = std::make_unique<Impl>(std::move(options));
}

HttpServer::~HttpServer() {
    if (impl_->engine_thread.joinable()) {
        impl_->stop();
        impl_->engine_thread.join();
    }
}

int HttpServer::bind() {
    Impl& m = *impl_;
    if (m.bound_port > 0) return m.bound_port;
    if (m.options.port == 0) {
        m.bound_port = m.svr.bind_to_any_port(m.options.host);
        if (m.bound_port < 0) m.bound_port = -1;
    } else if (m.svr.bind_to_port(m.options.host, m.options.port)) {
        m.bound_port = m.options.port;
    }
    if (m.bound_port <= 0)
        throw MoeError("serve: cannot listen on " + m.options.host + ":" + std::to_string(m.options.port) +
                       " (address in use or not available)");
    return m.bound_port;
}

int HttpServer::port() const {
    return impl_->bound_port;
}

void HttpServer::run() {
    Impl& m = *impl_;
    bind();
    m.serving.store(true);
    m.engine_thread = std::thread([&m] { m.engine_main(); });
    if (!m.stopping.load()) m.svr.listen_after_bind();
    m.serving.store(false);
    m.queue.shutdown();
    m.engine_thread.join();
    std::lock_guard lock(m.error_mutex);
    if (!m.load_error.empty()) throw MoeError(m.load_error);
}

void HttpServer::stop() {
    impl_->stop();
}

bool HttpServer::ready() const {
    return impl_->ready.load();
}

const std::string& HttpServer::model_id() const {
    return impl_->model_id;
}

void HttpServer::with_engine(const std::function<void(Engine&)>& fn) {
    Impl& m = *impl_;
    while (!m.ready.load()) {
        if (m.stopping.load()) throw MoeError("the server stopped before the model was ready");
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::string error;
    auto task = std::make_shared<Task>([&](Engine& e, Task& t) {
        try {
            fn(e);
        } catch (const std::exception& ex) {
            error = ex.what();
        }
        TaskEvent done;
        done.kind = TaskEventKind::DONE;
        t.push(std::move(done));
    });
    if (!m.queue.push(task, true)) throw MoeError("the server is shutting down");
    std::vector<TaskEvent> events;
    for (;;) {
        task->wait_events(events, std::chrono::milliseconds(100));
        for (const TaskEvent& ev : events) {
            if (ev.kind == TaskEventKind::ERROR) throw MoeError(ev.error);
            if (ev.kind == TaskEventKind::DONE) {
                if (!error.empty()) throw MoeError(error);
                return;
            }
        }
    }
}
