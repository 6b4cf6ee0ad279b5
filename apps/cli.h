// The command-line subcommands that run the engine directly (generate,
// tokenize, perplexity, synth-model, bench). Each takes the words after its
// name and returns the process exit code; MoeError propagates to main().
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "apps/args.h"
#include "chat/chat_template.h"
#include "cpu_kernels/isa.h"
#include "engine/model/model_source.h"
#include "engine/runtime/sampler.h"
#include "engine/runtime/session.h"

int cli_generate(const std::vector<std::string>& words);
int cli_tokenize(const std::vector<std::string>& words);
int cli_perplexity(const std::vector<std::string>& words);
int cli_synth_model(const std::vector<std::string>& words);
int cli_quantize(const std::vector<std::string>& words);
int cli_bench(const std::vector<std::string>& words);

// --model DIR | synth:PRESET[:SEED], checked before anything loads
// (engine/model/model_source.h): MoeError "<context>--model is required" when
// absent, the parser's one line for a malformed synthetic name. A synthetic
// source is announced with one stderr line naming it a benchmark aid.
ModelSource parse_model_flag(Args& args, const std::string& context = "");
// The same where --model may be left out (serve, bench server): nothing then.
std::optional<ModelSource> parse_optional_model_flag(Args& args);
// A kernel path's name as the user gave it (source: "--cpu-isa" or
// "MOE_CPU_ISA"): MoeError naming the source when it is unknown or this CPU
// cannot run it. The one check of both.
Isa parse_isa(const std::string& source, const std::string& name);
// MOE_CPU_ISA (when set and not empty): this process runs that path; main()
// applies it before any subcommand, so a bad value is an error, not ignored.
void apply_isa_env();
// --cpu-isa NAME: this process runs that kernel path (overrides MOE_CPU_ISA).
void apply_isa_flag(Args& args);
// Sampling flags shared by the subcommands that generate.
SamplingParams parse_sampling_flags(Args& args);
// --emulate-gpu GiB|N%, --gpu-device, --gpu-memory, --profile FILE and the
// cache flags (--cache-policy static|lru|lfu|score, --cache-share F,
// --cache-scope layer|global, --prefetch on|off), shared by serve,
// generate, perplexity and bench.
DeviceOptions parse_device_flags(Args& args);
// (The cache flags' defaults are DeviceOptions': the best measured.)
// --gpu-device N|none (none = -1); GPU_DEVICE_DEFAULT when absent, else
// *given (when not null) is set.
int parse_gpu_device_flag(Args& args, bool* given = nullptr);
// One stderr line: where experts ran, copies, hit rate, predicted vs measured.
std::string execution_stats_line(const ExecutionStats& stats);
// A chat file: {"messages": [...], "tools": [...], "chat_template_kwargs":
// {...}} (tools and kwargs optional) or a bare array of {role, content};
// content is a string, an array of {"type":"text","text":...} parts, or null
// beside tool_calls. The messages are kept as written for a Jinja template.
ChatInput read_chat_file(const std::string& path);
