// `moe-server calibrate` and `moe-server bench latency`: measure the CPU
// expert FFN of a model on this machine, fit the latency model and check it
// against the roofline and against a second, independent measurement. The
// math lives in placement/ (fits) and profiles/ (the file); this is the
// measuring and the printing. MoeError propagates to main().
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "apps/args.h"
#include "engine/model/weights.h"

int cli_calibrate(const std::vector<std::string>& words);
// calibrate's flags in args. loaded: --model's weights, already loaded (a
// `bench suite` step); null: loaded here.
int calibrate_run(Args& args, std::shared_ptr<const ModelWeights> loaded);
// `bench latency` (its flags, after the word "latency"); loaded as above.
int bench_latency(Args& args, std::shared_ptr<const ModelWeights> loaded = nullptr);

// --threads for the benchmarks and calibrate (defined in cli_bench.cpp):
// 0 or absent means physical cores. (--cpu-isa: apply_isa_flag, apps/cli.h.)
int bench_threads_flag(Args& args);
