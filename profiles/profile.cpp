// Profile file reader, writer and validator, Fiddler import and the
// fingerprint check (see profile.h and README.md for the format). Every
// refusal names the file, the field (with its layer and expert index) and
// what was expected; nothing here knows how a model runs.
#include "profiles/profile.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "base/errors.h"
#include "base/files.h"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

const char* json_kind(const json& v) {
    if (v.is_number_unsigned() || v.is_number_integer()) return "an integer";
    if (v.is_number_float()) return "a number with a fraction";
    if (v.is_string()) return "a string";
    if (v.is_array()) return "an array";
    if (v.is_object()) return "an object";
    if (v.is_boolean()) return "a boolean";
    return "null";
}

// Field access with messages "<source>: <path>: <what>".
class FieldReader {
public:
    explicit FieldReader(const std::string& source) : source_(source) {}

    [[noreturn]] void fail(const std::string& field, const std::string& what) const {
        throw MoeError(source_ + ": " + field + ": " + what);
    }

    const json& get(const json& obj, const std::string& parent, const char* name) const {
        auto it = obj.find(name);
        if (it == obj.end()) fail(join(parent, name), "missing");
        return *it;
    }
    const json& object(const json& obj, const std::string& parent, const char* name) const {
        const json& v = get(obj, parent, name);
        if (!v.is_object()) fail(join(parent, name), std::string("must be an object, found ") + json_kind(v));
        return v;
    }
    std::string string(const json& obj, const std::string& parent, const char* name) const {
        const json& v = get(obj, parent, name);
        if (!v.is_string()) fail(join(parent, name), std::string("must be a string, found ") + json_kind(v));
        return v.get<std::string>();
    }
    bool boolean(const json& obj, const std::string& parent, const char* name) const {
        const json& v = get(obj, parent, name);
        if (!v.is_boolean()) fail(join(parent, name), std::string("must be true or false, found ") + json_kind(v));
        return v.get<bool>();
    }
    // A non-negative integer; with allow_integral_float, 12.0 counts as 12
    // (files written by Python tools often hold counts as floats).
    uint64_t count(const json& v, const std::string& field, bool allow_integral_float = false) const {
        if (v.is_number_unsigned()) return v.get<uint64_t>();
        if (v.is_number_integer()) {
            int64_t x = v.get<int64_t>();
            if (x < 0) fail(field, std::to_string(x) + " is negative");
            return uint64_t(x);
        }
        if (v.is_number_float()) {
            double d = v.get<double>();
            if (d < 0) fail(field, json(d).dump() + " is negative");
            if (!allow_integral_float || std::floor(d) != d || d > 1.8e19)
                fail(field, json(d).dump() + " is not an integer");
            return uint64_t(d);
        }
        fail(field, std::string("must be a non-negative integer, found ") + json_kind(v));
    }
    uint64_t count(const json& obj, const std::string& parent, const char* name) const {
        return count(get(obj, parent, name), join(parent, name));
    }
    int small_int(const json& obj, const std::string& parent, const char* name, int min) const {
        uint64_t x = count(obj, parent, name);
        if (x < uint64_t(min) || x > uint64_t(INT32_MAX))
            fail(join(parent, name), std::to_string(x) + " is out of range (at least " + std::to_string(min) + ")");
        return int(x);
    }

    // A (n_layers, n_experts) table of counts, row-major.
    std::vector<uint64_t> table(const json& v, const std::string& field, int n_layers, int n_experts,
                                const std::string& dims_from, bool allow_integral_float = false) const {
        if (!v.is_array()) fail(field, std::string("must be an array of layers, found ") + json_kind(v));
        if (int(v.size()) != n_layers)
            fail(field, "has " + std::to_string(v.size()) + " layers, expected " + std::to_string(n_layers) + " (" +
                            dims_from + ")");
        std::vector<uint64_t> out;
        out.reserve(size_t(n_layers) * n_experts);
        for (int l = 0; l < n_layers; l++) {
            const json& row = v[size_t(l)];
            std::string row_field = field + "[" + std::to_string(l) + "]";
            if (!row.is_array()) fail(row_field, std::string("must be an array of experts, found ") + json_kind(row));
            if (int(row.size()) != n_experts)
                fail(row_field, "has " + std::to_string(row.size()) + " experts, expected " +
                                    std::to_string(n_experts) + " (" + dims_from + ")");
            for (int e = 0; e < n_experts; e++)
                out.push_back(count(row[size_t(e)], row_field + "[" + std::to_string(e) + "]", allow_integral_float));
        }
        return out;
    }

    static std::string join(const std::string& parent, const char* name) {
        return parent.empty() ? std::string(name) : parent + "." + name;
    }

private:
    const std::string& source_;
};

uint64_t parse_hash(const FieldReader& r, const std::string& text) {
    bool ok = text.size() == 16;
    for (char c : text) ok = ok && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'));
    if (!ok) r.fail("model.hash", "'" + text + "' is not 16 lower-case hex digits");
    return std::stoull(text, nullptr, 16);
}

json table_json(const std::vector<uint64_t>& t, int n_layers, int n_experts) {
    json rows = json::array();
    for (int l = 0; l < n_layers; l++)
        rows.push_back(std::vector<uint64_t>(t.begin() + size_t(l) * n_experts, t.begin() + size_t(l + 1) * n_experts));
    return rows;
}

// Every MoE layer of a phase table must sum to tokens x top-k: each token is
// routed to exactly top-k experts in every such layer; a dense layer to 0.
void check_layer_sums(const FieldReader& r, const std::vector<uint64_t>& t, const ModelFingerprint& m,
                      const std::string& field, const char* tokens_field, uint64_t tokens) {
    const uint64_t want = tokens * uint64_t(m.n_experts_active);
    for (int l = 0; l < m.n_layers; l++) {
        uint64_t sum = 0;
        for (int e = 0; e < m.n_experts; e++) sum += t[size_t(l) * m.n_experts + e];
        if (!m.layer_is_moe(l)) {
            if (sum != 0)
                r.fail(field + "[" + std::to_string(l) + "]", "sums to " + std::to_string(sum) +
                                                                  ", expected 0: layer " + std::to_string(l) +
                                                                  " is dense (model.dense_layers), it routes nothing");
            continue;
        }
        if (sum != want)
            r.fail(field + "[" + std::to_string(l) + "]", "sums to " + std::to_string(sum) + ", expected workload." +
                                                              tokens_field + " x top-k = " + std::to_string(tokens) +
                                                              " x " + std::to_string(m.n_experts_active) + " = " +
                                                              std::to_string(want));
    }
}

Profile parse_fiddler(const FieldReader& r, const json& j) {
    Profile p;
    p.from_fiddler = true;
    const json& pop = r.get(j, "", "expert_popularity");
    if (!pop.is_array() || pop.empty() || !pop[0].is_array() || pop[0].empty())
        r.fail("expert_popularity", "must be a non-empty array of non-empty per-layer arrays");
    p.model.n_layers = int(pop.size());
    p.model.n_experts = int(pop[0].size());
    p.counts = r.table(pop, "expert_popularity", p.model.n_layers, p.model.n_experts, "the size of layer 0", true);
    p.workload.prompt_format = "fiddler";
    p.workload.prefill_tokens = r.count(r.get(j, "", "total_input_tokens"), "total_input_tokens", true);
    return p;
}

// The "model" object: the fingerprint, each field checked.
ModelFingerprint parse_fingerprint(const FieldReader& r, const json& m) {
    ModelFingerprint f;
    f.architecture = r.string(m, "model", "architecture");
    f.n_layers = r.small_int(m, "model", "n_layers", 1);
    f.n_experts = r.small_int(m, "model", "n_experts", 1);
    f.n_experts_active = r.small_int(m, "model", "n_experts_active", 1);
    if (f.n_experts_active > f.n_experts)
        r.fail("model.n_experts_active",
               std::to_string(f.n_experts_active) + " exceeds n_experts " + std::to_string(f.n_experts));
    f.hash = parse_hash(r, r.string(m, "model", "hash"));
    // Optional (absent: every layer routes), so profiles of Mixtral written
    // before it read unchanged.
    if (const auto dense = m.find("dense_layers"); dense != m.end()) {
        if (!dense->is_array())
            r.fail("model.dense_layers", std::string("must be an array of layer indices, found ") + json_kind(*dense));
        for (size_t i = 0; i < dense->size(); i++) {
            const std::string field = "model.dense_layers[" + std::to_string(i) + "]";
            const uint64_t l = r.count((*dense)[i], field);
            if (l >= uint64_t(f.n_layers))
                r.fail(field, std::to_string(l) + " is not below n_layers " + std::to_string(f.n_layers));
            if (!f.dense_layers.empty() && int(l) <= f.dense_layers.back())
                r.fail(field,
                       std::to_string(l) + " does not ascend (after " + std::to_string(f.dense_layers.back()) + ")");
            f.dense_layers.push_back(int(l));
        }
    }
    return f;
}

Profile parse_ours(const FieldReader& r, const json& j) {
    Profile p;
    std::string format = r.string(j, "", "format");
    if (format != PROFILE_FORMAT) r.fail("format", "'" + format + "', expected '" + PROFILE_FORMAT + "'");
    const json& version = r.get(j, "", "version");
    if (!version.is_number_integer() || version.get<int64_t>() != PROFILE_VERSION)
        r.fail("version",
               version.dump() + " is not supported (this build reads version " + std::to_string(PROFILE_VERSION) + ")");

    p.model = parse_fingerprint(r, r.object(j, "", "model"));

    const json& w = r.object(j, "", "workload");
    ProfileWorkload& wl = p.workload;
    wl.source = r.string(w, "workload", "source");
    wl.prompt_format = r.string(w, "workload", "prompt_format");
    wl.chat_template = r.boolean(w, "workload", "chat_template");
    wl.sampling = r.string(w, "workload", "sampling");
    wl.gen_tokens = r.small_int(w, "workload", "gen_tokens", 1);
    wl.ctx = r.small_int(w, "workload", "ctx", 1);
    wl.prompts_available = r.small_int(w, "workload", "prompts_available", 0);
    wl.prompts_skipped = r.small_int(w, "workload", "prompts_skipped", 0);
    const json& indices = r.get(w, "workload", "prompt_indices");
    if (!indices.is_array())
        r.fail("workload.prompt_indices", std::string("must be an array, found ") + json_kind(indices));
    for (size_t i = 0; i < indices.size(); i++) {
        uint64_t x = r.count(indices[i], "workload.prompt_indices[" + std::to_string(i) + "]");
        if (x >= uint64_t(wl.prompts_available))
            r.fail("workload.prompt_indices[" + std::to_string(i) + "]",
                   std::to_string(x) + " is not below prompts_available " + std::to_string(wl.prompts_available));
        wl.prompt_indices.push_back(int(x));
    }
    uint64_t n_prompts = r.count(w, "workload", "prompts");
    if (n_prompts != wl.prompt_indices.size())
        r.fail("workload.prompts", std::to_string(n_prompts) + " differs from the " +
                                       std::to_string(wl.prompt_indices.size()) + " entries of prompt_indices");
    wl.prefill_tokens = r.count(w, "workload", "prefill_tokens");
    wl.generated_tokens = r.count(w, "workload", "generated_tokens");
    wl.decode_tokens = r.count(w, "workload", "decode_tokens");
    // Each completed prompt samples its first token from the prefill's logits
    // and runs one decode pass for every later token.
    if (wl.decode_tokens + n_prompts != wl.generated_tokens)
        r.fail("workload.decode_tokens", std::to_string(wl.decode_tokens) + ", expected generated_tokens - prompts = " +
                                             std::to_string(wl.generated_tokens) + " - " + std::to_string(n_prompts));
    wl.interrupted = r.boolean(w, "workload", "interrupted");

    const json& c = r.object(j, "", "counts");
    const std::string dims = "model.n_layers x model.n_experts";
    p.prefill = r.table(r.get(c, "counts", "prefill"), "counts.prefill", p.model.n_layers, p.model.n_experts, dims);
    p.decode = r.table(r.get(c, "counts", "decode"), "counts.decode", p.model.n_layers, p.model.n_experts, dims);
    check_layer_sums(r, p.prefill, p.model, "counts.prefill", "prefill_tokens", wl.prefill_tokens);
    check_layer_sums(r, p.decode, p.model, "counts.decode", "decode_tokens", wl.decode_tokens);
    profile_sum_phases(p);
    return p;
}

}  // namespace

std::string fingerprint_hash_hex(uint64_t hash) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016" PRIx64, hash);
    return buf;
}

bool ModelFingerprint::layer_is_moe(int l) const {
    return std::find(dense_layers.begin(), dense_layers.end(), l) == dense_layers.end();
}

std::vector<int> ModelFingerprint::moe_layers() const {
    std::vector<int> out;
    for (int l = 0; l < n_layers; l++)
        if (layer_is_moe(l)) out.push_back(l);
    return out;
}

std::string fingerprint_describe(const ModelFingerprint& f) {
    std::string s = f.architecture.empty() ? std::string("?") : f.architecture;
    s += ", " + std::to_string(f.n_layers) + " layers x " + std::to_string(f.n_experts) + " experts, top-" +
         std::to_string(f.n_experts_active);
    for (size_t i = 0; i < f.dense_layers.size(); i++) {
        s += i ? ", " : ", dense layers ";
        s += std::to_string(f.dense_layers[i]);
    }
    s += ", hash ";
    s += fingerprint_hash_hex(f.hash);
    return s;
}

std::vector<uint64_t> table_rows(const std::vector<uint64_t>& table, int n_experts, const std::vector<int>& layers) {
    std::vector<uint64_t> out;
    out.reserve(layers.size() * size_t(n_experts));
    for (int l : layers)
        out.insert(out.end(), table.begin() + ptrdiff_t(l) * n_experts, table.begin() + ptrdiff_t(l + 1) * n_experts);
    return out;
}

Profile profile_parse(const json& j, const std::string& source) {
    FieldReader r(source);
    if (!j.is_object()) throw MoeError(source + ": not a profile: the top level must be a JSON object");
    if (j.contains("format")) return parse_ours(r, j);
    if (j.contains("expert_popularity")) return parse_fiddler(r, j);
    throw MoeError(source +
                   ": not a profile: neither a moe-server profile (no \"format\") nor a Fiddler "
                   "popularity file (no \"expert_popularity\")");
}

Profile profile_read(const fs::path& path) {
    return profile_parse(file_read_json(path), path.string());
}

json fingerprint_to_json(const ModelFingerprint& m) {
    json model = {{"architecture", m.architecture},
                  {"n_layers", m.n_layers},
                  {"n_experts", m.n_experts},
                  {"n_experts_active", m.n_experts_active},
                  {"hash", fingerprint_hash_hex(m.hash)}};
    if (!m.dense_layers.empty()) model["dense_layers"] = m.dense_layers;
    return model;
}

ModelFingerprint fingerprint_from_json(const json& model, const std::string& source) {
    const FieldReader r(source);
    if (!model.is_object()) r.fail("model", std::string("must be an object, found ") + json_kind(model));
    return parse_fingerprint(r, model);
}

json profile_to_json(const Profile& p) {
    const ModelFingerprint& m = p.model;
    const size_t cells = size_t(m.n_layers) * size_t(m.n_experts);
    if (p.from_fiddler || !p.has_phases())
        throw MoeError("cannot write an imported Fiddler profile: it has no model fingerprint or phase split");
    if (m.n_layers < 1 || m.n_experts < 1 || p.prefill.size() != cells || p.decode.size() != cells)
        throw MoeError("profile tables do not match the fingerprint's " + std::to_string(m.n_layers) + " x " +
                       std::to_string(m.n_experts));
    const ProfileWorkload& w = p.workload;
    return json{
        {"format", PROFILE_FORMAT},
        {"version", PROFILE_VERSION},
        {"model", fingerprint_to_json(m)},
        {"workload",
         {{"source", w.source},
          {"prompt_format", w.prompt_format},
          {"chat_template", w.chat_template},
          {"sampling", w.sampling},
          {"gen_tokens", w.gen_tokens},
          {"ctx", w.ctx},
          {"prompts_available", w.prompts_available},
          {"prompts", w.prompt_indices.size()},
          {"prompt_indices", w.prompt_indices},
          {"prompts_skipped", w.prompts_skipped},
          {"prefill_tokens", w.prefill_tokens},
          {"generated_tokens", w.generated_tokens},
          {"decode_tokens", w.decode_tokens},
          {"interrupted", w.interrupted}}},
        {"counts",
         {{"prefill", table_json(p.prefill, m.n_layers, m.n_experts)},
          {"decode", table_json(p.decode, m.n_layers, m.n_experts)}}},
    };
}

std::string profile_to_text(const Profile& profile) {
    const json j = profile_to_json(profile);
    std::string s = "{\n";
    for (const char* key : {"format", "version", "model"})
        s += " \"" + std::string(key) + "\": " + j[key].dump() + ",\n";
    s += " \"workload\": {\n";
    const json& w = j["workload"];
    size_t i = 0;
    for (const auto& [key, value] : w.items())
        s += "  \"" + key + "\": " + value.dump() + (++i < w.size() ? ",\n" : "\n");
    s += " },\n \"counts\": {\n";
    for (const char* phase : {"prefill", "decode"}) {
        const json& rows = j["counts"][phase];
        s += "  \"" + std::string(phase) + "\": [\n";
        for (size_t l = 0; l < rows.size(); l++) s += "   " + rows[l].dump() + (l + 1 < rows.size() ? ",\n" : "\n");
        s += std::string("  ]") + (std::string(phase) == "prefill" ? ",\n" : "\n");
    }
    return s + " }\n}\n";
}

void profile_write(const Profile& profile, const fs::path& path) {
    file_write_atomic(path, profile_to_text(profile));
}

void profile_check(const Profile& profile, const ModelFingerprint& expected, const std::string& path) {
    const ModelFingerprint& m = profile.model;
    if (profile.from_fiddler) {
        if (m.n_layers != expected.n_layers || m.n_experts != expected.n_experts)
            throw MoeError(path + ": Fiddler popularity table is " + std::to_string(m.n_layers) + " layers x " +
                           std::to_string(m.n_experts) + " experts, the model has " +
                           std::to_string(expected.n_layers) + " x " + std::to_string(expected.n_experts));
        return;
    }
    if (!(m == expected))
        throw MoeError(path + ": profile is for another model: profile " + fingerprint_describe(m) + "; model " +
                       fingerprint_describe(expected));
}

Profile profile_empty(const ModelFingerprint& model) {
    Profile p;
    p.model = model;
    const size_t cells = size_t(model.n_layers) * size_t(model.n_experts);
    p.counts.assign(cells, 0);
    p.prefill.assign(cells, 0);
    p.decode.assign(cells, 0);
    return p;
}

void profile_sum_phases(Profile& p) {
    p.counts.resize(p.prefill.size());
    for (size_t i = 0; i < p.prefill.size(); i++) p.counts[i] = p.prefill[i] + p.decode[i];
}
