// Evaluation of a parsed Jinja template (see jinja.h). Scopes follow
// jinja2: a for loop's body and a macro's body are scopes of their own (what
// they set is gone after them), if blocks are not; a macro sees its own
// scope and the template's top level. Python's operator semantics (int
// overflow is an error rather than a big integer). The render runs under a
// WorkBudget made from JinjaLimits and current on its thread: each
// statement, expression and loop iteration costs a step, strings, lists and
// output are charged by their size before they are built (repeat, concat,
// repr, tojson, iteration; a builtin's result as it returns), so time and
// memory are bounded by max_steps, max_bytes and max_time, any one string by
// max_output_bytes; recursion by max_call_depth (macros), the parser's depth
// limit (expressions) and MAX_NESTING (both together). The namespaces a
// render makes are kept and cleared when it ends: their attributes are the
// only values that change, so they are the only way to a reference cycle.
#include "chat/jinja.h"

#include <chrono>
#include <cmath>
#include <unordered_map>

#include "base/errors.h"
#include "chat/jinja_builtins.h"
#include "chat/jinja_parser.h"
#include "engine/text/work_budget.h"

namespace {

enum class Flow { NORMAL, BREAK, CONTINUE };

// raise_exception(): the template's own message, kept apart from JinjaError
// so the report says who raised it.
struct TemplateRaised : std::runtime_error {
    using std::runtime_error::runtime_error;
};

int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
    return q;
}

class Renderer {
public:
    Renderer(const JinjaRenderOptions& options)
        : opt_(options),
          budget_(WorkLimits{options.limits.max_steps, options.limits.max_bytes, options.limits.max_output_bytes,
                             options.limits.max_time},
                  "rendering"),
          scope_(budget_) {
        limits_.max_bytes = options.limits.max_output_bytes;
        limits_.max_items = options.limits.max_list_items;
    }
    Renderer(const Renderer&) = delete;
    Renderer& operator=(const Renderer&) = delete;

    // A namespace may hold itself (or a value that holds it): its attributes
    // go here, while every namespace is still held, so nothing is left in a
    // cycle and no destructor recurses through a chain of namespaces.
    ~Renderer() {
        for (const auto& ns : namespaces_) {
            std::vector<std::pair<JinjaValue, JinjaValue>> items;
            items.swap(ns->items);
        }
    }

    int line = 0;

    std::string run(const std::vector<JinjaStmtPtr>& body, const JinjaDict& variables) {
        frames_.emplace_back();
        install_globals();
        for (const auto& [k, v] : variables.items) {
            if (k.type != JinjaType::STRING) throw JinjaError("template variable names must be strings");
            frames_[0][k.text()] = v;
        }
        std::string out;
        out_ = &out;
        exec_body(body);
        return out;
    }

private:
    using Frame = std::unordered_map<std::string, JinjaValue>;
    const JinjaRenderOptions& opt_;
    WorkBudget budget_;
    WorkBudget::Scope scope_;  // budget_ is the thread's current one while rendering
    std::vector<std::shared_ptr<JinjaDict>> namespaces_;  // every namespace() made
    JinjaBuiltinLimits limits_;
    std::vector<Frame> frames_;
    size_t floor_ = 1;  // lookups see frames [floor_, top] then frame 0
    std::string* out_ = nullptr;
    int call_depth_ = 0;
    int nesting_ = 0;  // statements and expressions being evaluated, one inside another

    // The C++ recursion of evaluation: parse trees are at most
    // JINJA_MAX_PARSE_DEPTH high, but macros stack them.
    static constexpr int MAX_NESTING = 2000;
    struct Nest {
        int& n;
        explicit Nest(int& nesting) : n(nesting) {
            if (++n > MAX_NESTING) {
                --n;
                throw JinjaError("evaluation nested more than " + std::to_string(MAX_NESTING) +
                                 " levels deep (recursive macros?)");
            }
        }
        ~Nest() { --n; }
    };

    void step(size_t n = 1) { budget_.step(n); }

    // Bytes of a list of n items.
    static uint64_t list_bytes(size_t n) { return uint64_t(n) * sizeof(JinjaValue); }

    // A value a builtin or a macro just built (each held its strings to
    // max_output_bytes as it grew them): strings and lists cost by size.
    JinjaValue charge(JinjaValue v) {
        if (v.type == JinjaType::STRING) {
            if (v.text().size() > limits_.max_bytes)
                throw JinjaError("a string exceeds the render limit of " + std::to_string(limits_.max_bytes) +
                                 " bytes");
            budget_.bytes(v.text().size());
        } else if (v.type == JinjaType::LIST) {
            budget_.bytes(list_bytes(v.list->size()));
        }
        return v;
    }

    void emit(const std::string& s) {
        if (out_->size() + s.size() > opt_.limits.max_output_bytes) {
            throw JinjaError("output exceeds the render limit of " + std::to_string(opt_.limits.max_output_bytes) +
                             " bytes");
        }
        budget_.bytes(s.size());
        out_->append(s);
    }

    // A string of a bytes about to grow by b.
    void charge_string(size_t a, size_t b) {
        if (a + b > limits_.max_bytes)
            throw JinjaError("a string would exceed the render limit of " + std::to_string(limits_.max_bytes) +
                             " bytes");
        budget_.bytes(b);
    }

    void install_globals() {
        Frame& g = frames_[0];
        g["raise_exception"] = JinjaValue::from_function("raise_exception", [](JinjaArgs& a) -> JinjaValue {
            throw TemplateRaised(a.positional.empty() ? std::string() : jinja_str(a.positional[0]));
        });
        g["namespace"] = JinjaValue::from_function("namespace", [this](JinjaArgs& a) {
            JinjaDict attrs;
            for (const auto& p : a.positional) {
                if (p.type != JinjaType::DICT) throw JinjaError("namespace() takes a dict or keyword arguments");
                for (const auto& [k, v] : p.dict->items) attrs.set(k, v);
            }
            for (const auto& [k, v] : a.keyword) attrs.set(k, v);
            budget_.bytes(list_bytes(2 * attrs.items.size() + 1));
            JinjaValue ns = JinjaValue::new_namespace(std::move(attrs));
            namespaces_.push_back(ns.dict);
            return ns;
        });
        g["dict"] = JinjaValue::from_function("dict", [](JinjaArgs& a) {
            JinjaDict d;
            for (const auto& p : a.positional) {
                if (p.type != JinjaType::DICT) throw JinjaError("dict() takes a dict or keyword arguments");
                for (const auto& [k, v] : p.dict->items) d.set(k, v);
            }
            for (const auto& [k, v] : a.keyword) d.set(k, v);
            return JinjaValue::from_dict(std::move(d));
        });
        size_t max_items = limits_.max_items;
        g["range"] = JinjaValue::from_function("range", [this, max_items](JinjaArgs& a) {
            std::vector<int64_t> n;
            for (const auto& p : a.positional) {
                if (p.type != JinjaType::INT && p.type != JinjaType::BOOL) throw JinjaError("range() takes integers");
                n.push_back(p.type == JinjaType::BOOL ? p.boolean : p.integer);
            }
            if (n.empty() || n.size() > 3) throw JinjaError("range() takes 1 to 3 integers");
            int64_t start = n.size() == 1 ? 0 : n[0], stop = n.size() == 1 ? n[0] : n[1],
                    stride = n.size() == 3 ? n[2] : 1;
            if (stride == 0) throw JinjaError("range() step must not be zero");
            double count =
                std::ceil((static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(stride));
            if (count > static_cast<double>(max_items))
                throw JinjaError("range() of more than " + std::to_string(max_items) + " items");
            budget_.bytes(list_bytes(count > 0 ? static_cast<size_t>(count) : 0));
            JinjaList items;
            items.reserve(count > 0 ? static_cast<size_t>(count) : 0);
            for (int64_t i = start; stride > 0 ? i < stop : i > stop; i += stride)
                items.push_back(JinjaValue::from_int(i));
            return JinjaValue::from_list(std::move(items));
        });
        std::optional<std::tm> fixed = opt_.now;
        g["strftime_now"] = JinjaValue::from_function("strftime_now", [fixed](JinjaArgs& a) {
            if (a.positional.empty() || a.positional[0].type != JinjaType::STRING)
                throw JinjaError("strftime_now() takes a format string");
            std::tm tm{};
            if (fixed) {
                tm = *fixed;
            } else {
                std::time_t t = std::time(nullptr);
                localtime_r(&t, &tm);
            }
            char buf[512];
            size_t n = std::strftime(buf, sizeof buf, a.positional[0].text().c_str(), &tm);
            if (n == 0 && !a.positional[0].text().empty())
                throw JinjaError("strftime_now(): format too long or empty result");
            return JinjaValue::from_string(std::string(buf, n));
        });
    }

    JinjaValue lookup(const std::string& name) const {
        for (size_t i = frames_.size(); i-- > floor_;) {
            auto it = frames_[i].find(name);
            if (it != frames_[i].end()) return it->second;
        }
        auto it = frames_[0].find(name);
        if (it != frames_[0].end()) return it->second;
        return JinjaValue::undefined("'" + name + "' is undefined");
    }

    void assign(const std::string& name, JinjaValue v) { frames_.back()[name] = std::move(v); }

    void assign_targets(const std::vector<std::string>& targets, const JinjaValue& v) {
        if (targets.size() == 1) {
            assign(targets[0], v);
            return;
        }
        JinjaList items = jinja_iterate(v, limits_);
        if (items.size() != targets.size()) {
            throw JinjaError(items.size() > targets.size()
                                 ? "too many values to unpack (expected " + std::to_string(targets.size()) + ")"
                                 : "not enough values to unpack (expected " + std::to_string(targets.size()) +
                                       ", got " + std::to_string(items.size()) + ")");
        }
        for (size_t i = 0; i < targets.size(); ++i) assign(targets[i], items[i]);
    }

    std::string capture(const std::vector<JinjaStmtPtr>& body) {
        std::string buf;
        std::string* saved = out_;
        out_ = &buf;
        try {
            exec_body(body);
        } catch (...) {
            out_ = saved;
            throw;
        }
        out_ = saved;
        return buf;
    }

    Flow exec_body(const std::vector<JinjaStmtPtr>& body) {
        for (const auto& s : body) {
            Flow f = exec(*s);
            if (f != Flow::NORMAL) return f;
        }
        return Flow::NORMAL;
    }

    Flow exec(const JinjaStmt& s) {
        Nest nest(nesting_);
        step();
        line = s.line;
        switch (s.kind) {
        case JinjaStmtKind::TEXT:
            emit(s.text);
            return Flow::NORMAL;
        case JinjaStmtKind::PRINT:
            emit(jinja_str(eval(*s.expr)));
            return Flow::NORMAL;
        case JinjaStmtKind::IF:
            return jinja_truthy(eval(*s.expr)) ? exec_body(s.body) : exec_body(s.else_body);
        case JinjaStmtKind::FOR:
            return exec_for(s);
        case JinjaStmtKind::SET:
            assign_targets(s.targets, eval(*s.expr));
            return Flow::NORMAL;
        case JinjaStmtKind::SET_ATTR: {
            JinjaValue ns = lookup(s.targets[0]);
            if (ns.type != JinjaType::NAMESPACE)
                throw JinjaError("cannot assign attribute on non-namespace object '" + s.targets[0] + "'");
            ns.dict->set(s.targets[1], eval(*s.expr));
            return Flow::NORMAL;
        }
        case JinjaStmtKind::SET_BLOCK:
            assign(s.targets[0], JinjaValue::from_string(capture(s.body)));
            return Flow::NORMAL;
        case JinjaStmtKind::MACRO:
            assign(s.text, make_macro(s.text, s.params, s.body));
            return Flow::NORMAL;
        case JinjaStmtKind::CALL_BLOCK: {
            JinjaValue caller = make_macro("caller", s.params, s.body);
            const JinjaExpr& call = *s.expr;
            JinjaValue callee = eval(*call.args[0]);
            JinjaArgs args = eval_args(call);
            args.keyword.emplace_back("caller", caller);
            emit(jinja_str(call_value(callee, args)));
            return Flow::NORMAL;
        }
        case JinjaStmtKind::WITH: {
            // Values are computed in the outer scope, then bound in the new one.
            std::vector<JinjaValue> values;
            for (const auto& [name, expr] : s.params) values.push_back(eval(*expr));
            frames_.emplace_back();
            struct Pop {
                std::vector<Frame>& f;
                ~Pop() { f.pop_back(); }
            } pop{frames_};
            for (size_t i = 0; i < values.size(); ++i) assign(s.params[i].first, values[i]);
            return exec_body(s.body);
        }
        case JinjaStmtKind::GENERATION:
            return exec_body(s.body);
        case JinjaStmtKind::BREAK:
            return Flow::BREAK;
        case JinjaStmtKind::CONTINUE:
            return Flow::CONTINUE;
        }
        return Flow::NORMAL;
    }

    Flow exec_for(const JinjaStmt& s) {
        JinjaValue seq = eval(*s.expr);
        if (seq.type == JinjaType::NONE) throw JinjaError("'NoneType' object is not iterable");
        JinjaList items = jinja_iterate(seq, limits_);
        frames_.emplace_back();
        struct Pop {
            std::vector<Frame>& f;
            ~Pop() { f.pop_back(); }
        } pop{frames_};
        if (s.filter) {
            JinjaList kept;
            for (const auto& item : items) {
                step();
                assign_targets(s.targets, item);
                if (jinja_truthy(eval(*s.filter))) kept.push_back(item);
            }
            items = std::move(kept);
        }
        size_t n = items.size();
        for (size_t i = 0; i < n; ++i) {
            step();
            frames_.back().clear();
            assign_targets(s.targets, items[i]);
            JinjaDict loop;
            int64_t idx = static_cast<int64_t>(i), len = static_cast<int64_t>(n);
            auto add = [&loop](const char* key, JinjaValue v) {
                loop.items.emplace_back(JinjaValue::from_string(key), std::move(v));
            };
            add("index", JinjaValue::from_int(idx + 1));
            add("index0", JinjaValue::from_int(idx));
            add("revindex", JinjaValue::from_int(len - idx));
            add("revindex0", JinjaValue::from_int(len - idx - 1));
            add("first", JinjaValue::from_bool(i == 0));
            add("last", JinjaValue::from_bool(i + 1 == n));
            add("length", JinjaValue::from_int(len));
            add("depth", JinjaValue::from_int(1));
            add("depth0", JinjaValue::from_int(0));
            add("previtem", i > 0 ? items[i - 1] : JinjaValue::undefined("there is no previous item"));
            add("nextitem", i + 1 < n ? items[i + 1] : JinjaValue::undefined("there is no next item"));
            add("cycle", JinjaValue::from_function("loop.cycle", [idx](JinjaArgs& a) {
                    if (a.positional.empty()) throw JinjaError("loop.cycle() needs at least one item");
                    return a.positional[static_cast<size_t>(idx) % a.positional.size()];
                }));
            assign("loop", JinjaValue::from_dict(std::move(loop)));
            Flow f = exec_body(s.body);
            if (f == Flow::BREAK) break;
        }
        if (n == 0) {
            frames_.back().clear();
            return exec_body(s.else_body);
        }
        return Flow::NORMAL;
    }

    JinjaValue make_macro(const std::string& name, const std::vector<std::pair<std::string, JinjaExprPtr>>& params,
                          const std::vector<JinjaStmtPtr>& body) {
        const auto* p = &params;
        const auto* b = &body;
        // The caller() of a call block sees the scope it was written in.
        bool is_caller = name == "caller";
        std::vector<Frame> def_frames;
        if (is_caller) def_frames.assign(frames_.begin() + static_cast<std::ptrdiff_t>(floor_), frames_.end());
        return JinjaValue::from_function(name, [this, name, p, b, is_caller, def_frames](JinjaArgs& a) {
            if (++call_depth_ > opt_.limits.max_call_depth) {
                --call_depth_;
                throw JinjaError("macro calls nested more than " + std::to_string(opt_.limits.max_call_depth) +
                                 " deep (endless recursion?)");
            }
            size_t saved_floor = floor_, saved_size = frames_.size();
            int saved_line = line;
            if (is_caller) {
                for (const auto& f : def_frames) frames_.push_back(f);
                floor_ = saved_size;
            }
            frames_.emplace_back();
            if (!is_caller) floor_ = frames_.size() - 1;
            struct Restore {
                Renderer& r;
                size_t floor, size;
                int line;
                ~Restore() {
                    r.frames_.resize(size);
                    r.floor_ = floor;
                    r.line = line;
                    --r.call_depth_;
                }
            } restore{*this, saved_floor, saved_size, saved_line};
            JinjaList varargs;
            for (size_t i = 0; i < a.positional.size(); ++i) {
                if (i < p->size()) {
                    assign((*p)[i].first, a.positional[i]);
                } else {
                    varargs.push_back(a.positional[i]);
                }
            }
            JinjaDict kwargs;
            for (const auto& [k, v] : a.keyword) {
                bool is_param = false;
                for (const auto& param : *p) is_param = is_param || param.first == k;
                if (is_param || k == "caller") {
                    assign(k, v);
                } else {
                    kwargs.set(k, v);
                }
            }
            for (size_t i = 0; i < p->size(); ++i) {
                const auto& [pname, def] = (*p)[i];
                if (frames_.back().count(pname)) continue;
                assign(pname,
                       def ? eval(*def)
                           : JinjaValue::undefined("parameter '" + pname + "' of macro '" + name + "' was not given"));
            }
            assign("varargs", JinjaValue::from_list(std::move(varargs)));
            assign("kwargs", JinjaValue::from_dict(std::move(kwargs)));
            return JinjaValue::from_string(capture(*b));
        });
    }

    JinjaArgs eval_args(const JinjaExpr& e) {
        JinjaArgs args;
        for (size_t i = 1; i < e.args.size(); ++i) args.positional.push_back(eval(*e.args[i]));
        for (const auto& [k, v] : e.kwargs) args.keyword.emplace_back(k, eval(*v));
        return args;
    }

    JinjaValue call_value(const JinjaValue& callee, JinjaArgs& args) {
        if (callee.is_undefined()) jinja_undefined_error(callee);
        if (callee.type != JinjaType::FUNCTION)
            throw JinjaError("'" + std::string(jinja_type_name(callee)) + "' object is not callable");
        return charge((*callee.function)(args));
    }

    JinjaValue eval(const JinjaExpr& e) {
        Nest nest(nesting_);
        step();
        line = e.line;
        switch (e.kind) {
        case JinjaExprKind::LITERAL:
            return e.value;
        case JinjaExprKind::NAME:
            return lookup(e.name);
        case JinjaExprKind::LIST:
        case JinjaExprKind::TUPLE: {
            budget_.bytes(list_bytes(e.args.size()));
            JinjaList items;
            for (const auto& a : e.args) items.push_back(eval(*a));
            return JinjaValue::from_list(std::move(items), e.kind == JinjaExprKind::TUPLE);
        }
        case JinjaExprKind::DICT: {
            budget_.bytes(list_bytes(e.args.size()));
            JinjaDict d;
            for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
                JinjaValue k = eval(*e.args[i]);
                d.set(std::move(k), eval(*e.args[i + 1]));
            }
            return JinjaValue::from_dict(std::move(d));
        }
        case JinjaExprKind::ATTRIBUTE:
            return jinja_attribute(eval(*e.args[0]), e.name, limits_);
        case JinjaExprKind::SUBSCRIPT: {
            JinjaValue obj = eval(*e.args[0]);
            return jinja_item(obj, eval(*e.args[1]), limits_);
        }
        case JinjaExprKind::SLICE: {
            JinjaValue obj = eval(*e.args[0]);
            JinjaValue parts[3];
            for (int i = 0; i < 3; ++i) {
                if (e.args[1 + i]) parts[i] = eval(*e.args[1 + i]);
            }
            return charge(jinja_slice(obj, parts[0], parts[1], parts[2]));
        }
        case JinjaExprKind::CALL: {
            JinjaValue callee = eval(*e.args[0]);
            JinjaArgs args = eval_args(e);
            return call_value(callee, args);
        }
        case JinjaExprKind::FILTER: {
            JinjaValue subject = eval(*e.args[0]);
            JinjaArgs args = eval_args(e);
            line = e.line;
            if (!jinja_has_filter(e.name)) throw JinjaError("unknown filter '" + e.name + "'");
            return charge(jinja_filter(e.name, subject, args, limits_));
        }
        case JinjaExprKind::TEST: {
            JinjaValue subject = eval(*e.args[0]);
            JinjaArgs args = eval_args(e);
            line = e.line;
            if (!jinja_has_test(e.name)) throw JinjaError("unknown test '" + e.name + "'");
            return JinjaValue::from_bool(jinja_test(e.name, subject, args, limits_) != e.negated);
        }
        case JinjaExprKind::UNARY: {
            JinjaValue v = eval(*e.args[0]);
            if (e.name == "not") return JinjaValue::from_bool(!jinja_truthy(v));
            if (v.is_undefined()) jinja_undefined_error(v);
            if (v.type == JinjaType::INT || v.type == JinjaType::BOOL) {
                int64_t i = v.type == JinjaType::BOOL ? v.boolean : v.integer;
                if (e.name == "-" && i == INT64_MIN) throw JinjaError("integer overflow");
                return JinjaValue::from_int(e.name == "-" ? -i : i);
            }
            if (v.type == JinjaType::FLOAT) return JinjaValue::from_float(e.name == "-" ? -v.number : v.number);
            throw JinjaError("bad operand type for unary " + e.name + ": '" + jinja_type_name(v) + "'");
        }
        case JinjaExprKind::BINARY:
            return eval_binary(e);
        case JinjaExprKind::CONDITIONAL:
            if (jinja_truthy(eval(*e.args[1]))) return eval(*e.args[0]);
            return e.args[2] ? eval(*e.args[2]) : JinjaValue::undefined("the conditional expression has no else");
        }
        return JinjaValue();
    }

    [[noreturn]] void unsupported(const std::string& op, const JinjaValue& a, const JinjaValue& b) {
        if (a.is_undefined()) jinja_undefined_error(a);
        if (b.is_undefined()) jinja_undefined_error(b);
        throw JinjaError("unsupported operand type(s) for " + op + ": '" + jinja_type_name(a) + "' and '" +
                         jinja_type_name(b) + "'");
    }

    static int64_t as_int(const JinjaValue& v) { return v.type == JinjaType::BOOL ? v.boolean : v.integer; }
    static bool integral(const JinjaValue& v) { return v.type == JinjaType::INT || v.type == JinjaType::BOOL; }

    JinjaValue repeat(const JinjaValue& seq, int64_t times) {
        if (times < 0) times = 0;
        size_t unit = seq.type == JinjaType::STRING ? seq.text().size() : seq.list->size();
        size_t cap = seq.type == JinjaType::STRING ? limits_.max_bytes : limits_.max_items;
        if (unit > 0 && static_cast<uint64_t>(times) > cap / unit)
            throw JinjaError("a repeated value exceeds the render limit");
        const size_t total = unit * static_cast<size_t>(times);
        if (seq.type == JinjaType::STRING) {
            charge_string(0, total);
            std::string out;
            out.reserve(total);
            for (int64_t i = 0; i < times; ++i) out += seq.text();
            return JinjaValue::from_string(std::move(out));
        }
        budget_.bytes(list_bytes(total));
        JinjaList out;
        out.reserve(total);
        for (int64_t i = 0; i < times; ++i) out.insert(out.end(), seq.list->begin(), seq.list->end());
        return JinjaValue::from_list(std::move(out), seq.tuple);
    }

    JinjaValue eval_binary(const JinjaExpr& e) {
        const std::string& op = e.name;
        JinjaValue a = eval(*e.args[0]);
        if (op == "and") return jinja_truthy(a) ? eval(*e.args[1]) : a;
        if (op == "or") return jinja_truthy(a) ? a : eval(*e.args[1]);
        JinjaValue b = eval(*e.args[1]);
        line = e.line;
        if (op == "~") {
            std::string text = jinja_str(a);
            const std::string right = jinja_str(b);
            charge_string(text.size(), right.size());
            text += right;
            return JinjaValue::from_string(std::move(text));
        }
        if (op == "==") return JinjaValue::from_bool(jinja_equal(a, b));
        if (op == "!=") return JinjaValue::from_bool(!jinja_equal(a, b));
        if (op == "<" || op == "<=" || op == ">" || op == ">=") {
            if (a.is_undefined()) jinja_undefined_error(a);
            if (b.is_undefined()) jinja_undefined_error(b);
            int c = jinja_compare(a, b);
            return JinjaValue::from_bool(op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0);
        }
        if (op == "in" || op == "not in") {
            bool found;
            if (b.type == JinjaType::STRING) {
                if (a.type != JinjaType::STRING)
                    throw JinjaError("'in <string>' requires string as left operand, not " +
                                     std::string(jinja_type_name(a)));
                step((b.text().size() / 64 + 1) * (a.text().size() / 64 + 1));  // the search's worst case
                found = b.text().find(a.text()) != std::string::npos;
            } else if (b.type == JinjaType::DICT) {
                found = b.dict->find(a) != nullptr;
            } else if (b.type == JinjaType::LIST || b.is_undefined()) {
                found = false;
                for (const auto& item : jinja_iterate(b, limits_)) found = found || jinja_equal(item, a);
            } else {
                throw JinjaError("argument of type '" + std::string(jinja_type_name(b)) + "' is not iterable");
            }
            return JinjaValue::from_bool(found == (op == "in"));
        }
        if (op == "+") {
            if (a.type == JinjaType::STRING && b.type == JinjaType::STRING) {
                charge_string(0, a.text().size() + b.text().size());
                return JinjaValue::from_string(a.text() + b.text());
            }
            if (a.type == JinjaType::LIST && b.type == JinjaType::LIST && a.tuple == b.tuple) {
                const size_t n = a.list->size() + b.list->size();
                if (n > limits_.max_items)
                    throw JinjaError("a list would exceed the render limit of " + std::to_string(limits_.max_items) +
                                     " items");
                budget_.bytes(list_bytes(n));
                JinjaList items;
                items.reserve(n);
                items.insert(items.end(), a.list->begin(), a.list->end());
                items.insert(items.end(), b.list->begin(), b.list->end());
                return JinjaValue::from_list(std::move(items), a.tuple);
            }
        }
        if (op == "%" && a.type == JinjaType::STRING)
            return charge(JinjaValue::from_string(jinja_percent_format(a.text(), b, limits_)));
        if (op == "*") {
            if ((a.type == JinjaType::STRING || a.type == JinjaType::LIST) && integral(b)) return repeat(a, as_int(b));
            if ((b.type == JinjaType::STRING || b.type == JinjaType::LIST) && integral(a)) return repeat(b, as_int(a));
        }
        if (!a.is_number() || !b.is_number()) unsupported(op, a, b);
        if (integral(a) && integral(b) && op != "/") {
            int64_t x = as_int(a), y = as_int(b), r = 0;
            bool overflow = false;
            if (op == "+") {
                overflow = __builtin_add_overflow(x, y, &r);
            } else if (op == "-") {
                overflow = __builtin_sub_overflow(x, y, &r);
            } else if (op == "*") {
                overflow = __builtin_mul_overflow(x, y, &r);
            } else if (op == "//" || op == "%") {
                if (y == 0) throw JinjaError("integer division or modulo by zero");
                if (x == INT64_MIN && y == -1) throw JinjaError("integer overflow");
                r = op == "//" ? floor_div(x, y) : x - floor_div(x, y) * y;
            } else if (op == "**") {
                if (y < 0) return JinjaValue::from_float(std::pow(static_cast<double>(x), static_cast<double>(y)));
                r = 1;
                for (int64_t i = 0; i < y && !overflow; ++i) overflow = __builtin_mul_overflow(r, x, &r);
            }
            if (overflow) throw JinjaError("integer overflow in '" + op + "'");
            return JinjaValue::from_int(r);
        }
        double x = jinja_as_double(a), y = jinja_as_double(b);
        if ((op == "/" || op == "//" || op == "%") && y == 0) throw JinjaError("float division by zero");
        if (op == "+") return JinjaValue::from_float(x + y);
        if (op == "-") return JinjaValue::from_float(x - y);
        if (op == "*") return JinjaValue::from_float(x * y);
        if (op == "/") return JinjaValue::from_float(x / y);
        if (op == "//") return JinjaValue::from_float(std::floor(x / y));
        if (op == "%") {
            double m = std::fmod(x, y);
            if (m != 0 && ((m < 0) != (y < 0))) m += y;
            return JinjaValue::from_float(m);
        }
        if (op == "**") return JinjaValue::from_float(std::pow(x, y));
        unsupported(op, a, b);
    }
};

}  // namespace

JinjaTemplate::JinjaTemplate(std::string_view source, std::string name)
    : name_(std::move(name)), source_(source), body_(std::make_shared<const std::vector<JinjaStmtPtr>>(jinja_parse(source, name_))) {}

namespace {

// A message as one line: newlines (a raise_exception text may have them) escaped.
std::string one_line(std::string s) {
    std::string out;
    for (char c : s) {
        if (c == '\n') {
            out += "\\n";
        } else if (c == '\r') {
            out += "\\r";
        } else {
            out += c;
        }
    }
    return out;
}

}  // namespace

std::string JinjaTemplate::render(const JinjaDict& variables, const JinjaRenderOptions& options) const {
    Renderer r(options);
    auto where = [&] {
        std::string w = name_;
        w += " line ";
        w += std::to_string(r.line);
        w += ": ";
        return w;
    };
    try {
        return r.run(*body_, variables);
    } catch (const TemplateRaised& e) {
        std::string msg = where();
        msg += "the template raised an exception: ";
        msg += one_line(e.what());
        throw MoeError(msg);
    } catch (const JinjaError& e) {
        std::string msg = where();
        msg += one_line(e.what());
        throw MoeError(msg);
    } catch (const WorkBudgetError& e) {
        throw WorkBudgetError(where() + e.what(), e.end);
    } catch (const std::bad_alloc&) {
        throw MoeError(where() + "rendering ran out of memory");
    } catch (const std::logic_error& e) {
        // A library's own check (std::stoll out of range, ...): still the template's problem.
        std::string msg = where();
        msg += one_line(e.what());
        throw MoeError(msg);
    }
}

JinjaDict jinja_chat_variables(const JinjaChatInput& input) {
    JinjaDict vars;
    vars.set("messages", jinja_from_json(input.messages));
    vars.set("tools", jinja_from_json(input.tools));
    vars.set("documents", JinjaValue::none());
    vars.set("add_generation_prompt", JinjaValue::from_bool(input.add_generation_prompt));
    if (input.bos_token) vars.set("bos_token", JinjaValue::from_string(*input.bos_token));
    if (input.eos_token) vars.set("eos_token", JinjaValue::from_string(*input.eos_token));
    if (!input.extras.is_null()) {
        if (!input.extras.is_object()) throw MoeError("chat template variables: extras must be a JSON object");
        for (auto it = input.extras.begin(); it != input.extras.end(); ++it) {
            const std::string& key = it.key();
            if (key == "messages" || key == "tools" || key == "documents" || key == "add_generation_prompt" ||
                (key == "bos_token" && input.bos_token) || (key == "eos_token" && input.eos_token)) {
                throw MoeError("chat template variables: '" + key + "' cannot be given as an extra variable");
            }
            vars.set(key, jinja_from_json(it.value()));
        }
    }
    return vars;
}

std::string jinja_render_chat(const JinjaTemplate& tmpl, const JinjaChatInput& input,
                              const JinjaRenderOptions& options) {
    JinjaDict vars;
    try {
        vars = jinja_chat_variables(input);
    } catch (const JinjaError& e) {
        throw MoeError(tmpl.name() + ": " + e.what());
    }
    return tmpl.render(vars, options);
}
