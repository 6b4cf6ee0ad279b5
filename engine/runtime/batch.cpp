// Batch (see batch.h).
#include "engine/runtime/batch.h"

void Batch::reserve(int n) {
    tokens.reserve(n);
    positions.reserve(n);
    seq_ids.reserve(n);
    want_logits.reserve(n);
}

void Batch::clear() {
    tokens.clear();
    positions.clear();
    seq_ids.clear();
    want_logits.clear();
}

void Batch::add(int token, int position, int seq_id, bool logits) {
    tokens.push_back(token);
    positions.push_back(position);
    seq_ids.push_back(seq_id);
    want_logits.push_back(logits ? 1 : 0);
}
