// Model fingerprint: what a popularity profile records about the model it was
// measured on, computed from the ModelConfig alone (architecture, the
// (layer, expert) grid, top-k, and a 64-bit FNV-1a hash of a canonical text
// of the routing-relevant config fields and of every tensor's name and shape
// as the loader expects them). Weights' bytes are not read, so two
// checkpoints that differ only in their values share a fingerprint.
#pragma once
#include <cstdint>
#include <string>

#include "engine/model/model_config.h"
#include "profiles/profile.h"

ModelFingerprint model_fingerprint(const ModelConfig& config);

// The canonical text that is hashed: one "key=value" line per config field,
// then one "name [d0, d1]" line per tensor.
std::string model_fingerprint_text(const ModelConfig& config);

