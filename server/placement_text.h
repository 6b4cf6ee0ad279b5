// The words for where experts live: the load line the server and the CLI
// print, and the device's name as /metrics and /v1/experts show it. The
// engine gives the facts (PlacementInfo); this file says them. Must not
// compute anything the engine knows.
#pragma once
#include <string>

#include "engine/runtime/session.h"

// The device's name: the GPU's, "emulated GPU (test double, computes on the
// CPU)", or for none why the CPU serves.
std::string placement_device_name(const PlacementInfo& p);
// One line for logs: device, budget, resident experts, plan, expected hit rate.
std::string placement_summary(const PlacementInfo& p);
