// `moe-server profile`: runs a prompt workload through the engine and writes
// the expert-popularity profile (profiles/README.md). Takes the words after
// the subcommand and returns the exit code; MoeError propagates to main().
#pragma once
#include <string>
#include <vector>

int cli_profile(const std::vector<std::string>& words);
