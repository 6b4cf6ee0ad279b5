// Batch: the entries of one forward pass, (token, position, sequence, wants
// logits) each. Entries of one sequence come in position order. Capacity is
// reserved once and reused.
#pragma once
#include <cstdint>
#include <vector>

struct Batch {
    std::vector<int> tokens;
    std::vector<int> positions;
    std::vector<int> seq_ids;             // sequence (SequenceState slot) of each entry
    std::vector<uint8_t> want_logits;     // compute logits for this entry

    void reserve(int n) {
        tokens.reserve(n);
        positions.reserve(n);
        seq_ids.reserve(n);
        want_logits.reserve(n);
    }
    void clear() {
        tokens.clear();
        positions.clear();
        seq_ids.clear();
        want_logits.clear();
    }
    void add(int token, int position, int seq_id, bool logits) {
        tokens.push_back(token);
        positions.push_back(position);
        seq_ids.push_back(seq_id);
        want_logits.push_back(logits ? 1 : 0);
    }
    int size() const { return int(tokens.size()); }
};
