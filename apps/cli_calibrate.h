// `moe-server calibrate` and `moe-server bench latency`: the latency model
// of this machine for a model's experts, and its check against the roofline
// and against a second, independent measurement. The measuring is
// engine/devices/calibration.h's, the fits placement/'s and the file
// profiles/'s; this is the flags, the calibration cache and the printing.
// MoeError propagates to main().
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
