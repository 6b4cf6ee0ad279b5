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

    void reserve(int n);
    void clear();
    void add(int token, int position, int seq_id, bool logits);
    int size() const { return int(tokens.size()); }
};
