// moe-server entry point: subcommand dispatch. Every error of a subcommand
// ends here as one line on stderr (control characters escaped: the message
// may quote a model file, e.g. a chat template's raise_exception; an engine
// option error says its flag, engine_error_text) and exit code 2 (1 for an
// internal error).
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "apps/cli.h"
#include "apps/cli_calibrate.h"
#include "apps/cli_profile.h"
#include "apps/serve.h"
#include "base/errors.h"
#include "server/openai.h"
#include "server/placement_text.h"

namespace {

// Each subcommand's flags, in the order `moe-server --help` lists them;
// `moe-server SUBCOMMAND --help` prints its own (with the device flags and the
// synth: note where it takes them).
struct Subcommand {
    const char* name;
    int (*run)(const std::vector<std::string>&);
    const char* usage;
    bool device_flags;  // takes --gpu-memory, --emulate-gpu and the cache flags
};

const Subcommand SUBCOMMANDS[] = {
    {"serve", serve_main,
     "  serve        [--model DIR|FILE.gguf] [--host H] [--port P] [--api-key KEY] [--ctx N] [--threads N]\n"
     "               [--max-queue N] [--cors-origin ORIGIN]: OpenAI API + web UI (demo model without --model)\n",
     true},
    {"generate", cli_generate,
     "  generate     --model DIR (--prompt TEXT | --user TEXT | --chat FILE.json) [--max-tokens N]\n"
     "               [--temperature T] [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R]\n"
     "               [--presence-penalty X] [--frequency-penalty X] [--seed N] [--greedy]\n"
     "               [--stop STR]... [--ignore-eos] [--threads N] [--ctx N] [--cpu-isa ISA]\n"
     "               [--beam-width W [--length-penalty A] [--num-return N]]\n",
     true},
    {"tokenize", cli_tokenize, "  tokenize     --model DIR (--text TEXT | --chat FILE.json) [--no-bos]\n", false},
    {"perplexity", cli_perplexity,
     "  perplexity   --model DIR --text FILE [--ctx N] [--chunks] [--json] [--threads N]\n"
     "               (--chunks: llama.cpp's protocol, whole chunks of --ctx, BOS first, second halves scored)\n",
     true},
    {"synth-model", cli_synth_model,
     "  synth-model  --preset tiny|small|mixtral-mini|mixtral-8x7b|qwen3-moe-mini|qwen3-30b-a3b|olmoe-mini|\n"
     "               qwen2-moe-mini --out DIR [--seed N] [--tokenizer FILE (Mixtral presets)] [--shard-mb N]\n",
     false},
    {"quantize", cli_quantize,
     "  quantize     --model DIR|FILE.gguf|synth:PRESET --type f32|bf16|q8_0|q4_0|q4_k_m|q5_k_m --out FILE.gguf\n"
     "               [--experts-only] [--fast-scales] [--threads N]: the model as one GGUF file (tokenizer and\n"
     "               chat template included) that serves alone; --experts-only keeps the dense weights in bf16;\n"
     "               --fast-scales takes each block's scale from its range, without the least-squares search\n"
     "               (several times faster, a little less accurate: for large synthetic benchmark files)\n",
     false},
    {"profile", cli_profile,
     "  profile      --model DIR --prompts FILE --out FILE [--format auto|sharegpt|mtbench|jsonl|text]\n"
     "               [--limit N] [--spread] [--gen-tokens N] [--chat-template on|off] [--ctx N] [--threads N]\n"
     "               [--trace FILE]: expert-popularity profile of a prompt workload, and with --trace\n"
     "               its per-token routing (profiles/README.md)\n",
     false},
    {"calibrate", cli_calibrate,
     "  calibrate    --model DIR [--threads N] [--cpu-isa ISA] [--gpu-device N|none] [--out FILE] [--force]:\n"
     "               measures the CPU expert FFN (and with a CUDA device its copies and expert FFN), fits the\n"
     "               latency model, caches it under $XDG_CACHE_HOME/moe-server/calibration\n",
     false},
    {"bench", cli_bench,
     "  bench        ceiling | kernels [--cpu-isa ISA] [--model DIR] [--kernel all|expert|delta_rule|attention] |\n"
     "               decode|prefill --model DIR [--tokens N] [--predict-next-layer] | server --model DIR |\n"
     "               beam --model DIR [--widths 1,4,8,16] [--tokens N] [--prompt TEXT] [--repeat N] |\n"
     "               latency --model DIR [--threads N] [--cpu-isa ISA] [--reps N] |\n"
     "               placement --model DIR --profile A.json --eval B.json [--seeds N] |\n"
     "               cache --model DIR --trace A.jsonl --eval-trace B.jsonl [--profile P.json]\n"
     "                 [--budgets 10,25,50%] [--cache-share F] [--scope layer|global] [--threads N]\n"
     "                 (or --profile P.json --eval-profile B.json [--sample-requests N] [--sample-prefill N]\n"
     "                 [--sample-decode N] [--seed S]: the eval trace drawn from B's counts) |\n"
     "               gpu [--model DIR] [--gpu-device N] [--reps N] [--type bf16|q8_0|q4_k_m] |\n"
     "               suite --model DIR --step 'decode --tokens 32' [--step ...] [--threads N]: steps of\n"
     "                 decode|prefill|beam|latency|gpu|calibrate in one process, the model loaded once\n"
     "               (JSON lines)\n",
     true},
};

const char* DEVICE_FLAGS =
    "  serve, generate, perplexity, bench decode|prefill|beam|server also take\n"
    "               [--gpu-memory GiB] [--gpu-device N|none] [--profile FILE]: the model on a CUDA device\n"
    "               (dense weights, KV cache and the popular experts; the rest on the CPU); default: device 0\n"
    "               when there is one, its free memory; else the CPU, said in one line\n"
    "               [--emulate-gpu GiB|N%] [--profile FILE]: a dry run of expert placement on an emulated GPU\n"
    "               (a test double that computes on the CPU)\n"
    "               [--cache-policy static|lru|lfu|score] [--cache-share F] [--cache-scope layer|global]\n"
    "               [--prefetch on|off]: the device's expert cache (default lfu, 0.25, global, prefetch on)\n";

const char* SYNTH_NOTE =
    "  --model DIR can also be synth:PRESET[:SEED] (PRESET one of synth-model's, SEED 0 by\n"
    "  default): the random weights synth-model would write, built in memory with no file. A benchmark aid\n"
    "  (a model's real shape where the disk cannot hold it), not a real model: its text is gibberish.\n";

// Every subcommand (sub null), or one with the flags it shares.
std::string usage(const Subcommand* sub) {
    std::string u = "usage: moe-server <subcommand> [flags]\n\n";
    for (const Subcommand& s : SUBCOMMANDS)
        if (!sub || sub == &s) u += s.usage;
    if (!sub || sub->device_flags) u += DEVICE_FLAGS;
    if (!sub || std::strstr(sub->usage, "--model")) u += std::string("\n") + SYNTH_NOTE;
    u += sub ? "\nAll subcommands: moe-server --help; see README.md.\n"
             : "\nRun 'moe-server <subcommand> --help' for one subcommand's flags; see README.md.\n";
    return u;
}

// The one printer of a subcommand's error: "moe-server: <kind>: <what>".
int print_error(const char* kind, const char* what, int exit_code) {
    std::fprintf(stderr, "moe-server: %s: %s\n", kind, escape_control(what).c_str());
    return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
        std::fputs(usage(nullptr).c_str(), argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    std::string name = argv[1];
    std::vector<std::string> words(argv + 2, argv + argc);
    const Subcommand* sub = nullptr;
    for (const Subcommand& s : SUBCOMMANDS)
        if (name == s.name) sub = &s;
    for (const std::string& w : words)
        if (sub && (w == "--help" || w == "-h")) {
            std::fputs(usage(sub).c_str(), stdout);
            return 0;
        }
    try {
        apply_isa_env();
        if (sub) return sub->run(words);
        std::fprintf(stderr, "moe-server: unknown subcommand '%s'\n\n%s", escape_control(name).c_str(),
                     usage(nullptr).c_str());
        return 2;
    } catch (const MoeError& e) {
        return print_error("error", engine_error_text(e).c_str(), 2);
    } catch (const std::filesystem::filesystem_error& e) {
        // A path the user gave that the loaders missed turning into MoeError:
        // still the user's file, so the same one line and exit code.
        return print_error("error", e.what(), 2);
    } catch (const std::exception& e) {
        return print_error("internal error", e.what(), 1);
    }
}
