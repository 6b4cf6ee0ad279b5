// Expert-popularity profiles: the versioned JSON file that `moe-server
// profile` writes (model fingerprint, workload, tokens routed to each
// (layer, expert) in prefill and in decode), its reader, writer and
// validator, the import of Fiddler's popularity JSON, and the check that a
// profile belongs to the model at hand. The format is documented in
// profiles/README.md. Plain data and files only: never runs or loads a model
// (the fingerprint of a model is computed in engine/model/fingerprint.h). Every
// refusal is a MoeError naming the file and what is wrong.
#pragma once
#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

inline constexpr const char* PROFILE_FORMAT = "moe-server-expert-popularity";  // the "format" field
inline constexpr int PROFILE_VERSION = 1;  // the "version" this build reads and writes

// What a profile was measured on. Two models with equal fingerprints route
// over the same (layer, expert) grid with the same top-k and have the same
// configuration and tensor shapes (weights' bytes are not hashed).
struct ModelFingerprint {
    std::string architecture;  // config.json "architectures"[0], e.g. "MixtralForCausalLM"
    int n_layers = 0;
    int n_experts = 0;
    int n_experts_active = 0;  // top-k
    uint64_t hash = 0;         // FNV-1a 64 of the canonical config + tensor-shape text
    // Layers that route nothing (a dense MLP among MoE layers: Qwen's
    // mlp_only_layers / decoder_sparse_step), ascending; their table rows
    // are all zero. In the file as model.dense_layers, absent when empty.
    std::vector<int> dense_layers = {};

    bool operator==(const ModelFingerprint&) const = default;
    // Layer l routes tokens to experts.
    bool layer_is_moe(int l) const;
    // The layers that route, ascending.
    std::vector<int> moe_layers() const;
};

// "MixtralForCausalLM, 8 layers x 8 experts, top-2, hash 0123456789abcdef"
// (", dense layers 0, 2" before the hash when there are dense layers).
std::string fingerprint_describe(const ModelFingerprint& fingerprint);
// The hash as 16 lower-case hex digits (its form in the file).
std::string fingerprint_hash_hex(uint64_t hash);

// The fingerprint as the files' "model" object, and back (checked: every
// refusal a MoeError "<source>: model.<field>: <what>"). Profiles and
// routing traces (profiles/routing_trace.h) carry it alike.
nlohmann::json fingerprint_to_json(const ModelFingerprint& fingerprint);
ModelFingerprint fingerprint_from_json(const nlohmann::json& model, const std::string& source);

// How the counts were gathered.
struct ProfileWorkload {
    std::string source;         // the prompt file as given on the command line
    std::string prompt_format;  // sharegpt | mtbench | jsonl | text | fiddler (imported)
    bool chat_template = true;  // prompts went through the model's chat template
    std::string sampling = "greedy";
    int gen_tokens = 0;               // tokens asked for per prompt (--gen-tokens)
    int ctx = 0;                      // context positions; longer prompts were skipped
    int prompts_available = 0;        // usable prompts the source holds (prompt_indices point into them)
    std::vector<int> prompt_indices;  // completed prompts, as indices into the reader's prompt list
    int prompts_skipped = 0;          // too long for the context (prompt + gen_tokens > ctx)
    uint64_t prefill_tokens = 0;      // prompt tokens run, summed over completed prompts
    uint64_t generated_tokens = 0;    // tokens sampled (the first comes from the prefill's logits)
    uint64_t decode_tokens = 0;       // decode forward passes: generated - 1 per prompt
    bool interrupted = false;         // stopped early by Ctrl-C
};

struct Profile {
    ModelFingerprint model;     // a Fiddler import has only n_layers and n_experts (from its table)
    bool from_fiddler = false;  // imported: no fingerprint, no prefill/decode split
    ProfileWorkload workload;
    // (n_layers, n_experts), row-major: tokens routed to each expert.
    std::vector<uint64_t> counts;   // all tokens (prefill + decode); what placement ranks by
    std::vector<uint64_t> prefill;  // prefill only; empty for a Fiddler import
    std::vector<uint64_t> decode;   // decode only; empty for a Fiddler import

    bool has_phases() const { return !prefill.empty(); }
};

// Reads and validates a profile file: ours (any mismatch between the table
// dimensions and the fingerprint, a bad count, a MoE layer's sum that is not
// tokens x top-k, a dense layer's that is not 0, is refused) or a Fiddler popularity file
// ({"total_input_tokens": N, "expert_popularity": [[...], ...]}), whose
// counts become `counts` with no phase split.
Profile profile_read(const std::filesystem::path& path);
// The same from parsed JSON; `source` names it in messages.
Profile profile_parse(const nlohmann::json& j, const std::string& source);

// Our format only (a Fiddler import has no fingerprint to write); counts must
// have the fingerprint's dimensions. profile_write replaces `path`
// atomically (temporary file + rename), so an existing file is never left
// half-written.
nlohmann::json profile_to_json(const Profile& profile);
// The file's text: the same JSON laid out with one line per table row, so a
// profile reads (and diffs) layer by layer.
std::string profile_to_text(const Profile& profile);
void profile_write(const Profile& profile, const std::filesystem::path& path);

// Refuses a profile that does not belong to the model with fingerprint
// `expected`: ours must have an equal fingerprint (the message shows both),
// a Fiddler import must have n_layers x n_experts equal to the model's.
void profile_check(const Profile& profile, const ModelFingerprint& expected, const std::string& path);

// A Profile for `model` with zeroed prefill/decode/counts tables.
Profile profile_empty(const ModelFingerprint& model);
// prefill + decode into counts, after the phase tables changed.
void profile_sum_phases(Profile& profile);

// The rows `layers` of a (n_layers, n_experts) table, in that order: a
// table over the MoE layers only, for the planners.
std::vector<uint64_t> table_rows(const std::vector<uint64_t>& table, int n_experts, const std::vector<int>& layers);
