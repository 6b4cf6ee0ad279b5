// RecurrentState (engine/state/recurrent_state.h): the fixed-size state of
// the Gated DeltaNet layers goes on from its length or starts again, is cut
// back to the middle only at its checkpoints (reuse points), forks whole,
// and sizes itself from the shape.
#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include "base/errors.h"
#include "engine/state/recurrent_state.h"

namespace {

LinearAttentionShape shape() {
    LinearAttentionShape s;
    s.conv_kernel = 4;
    s.n_k_heads = 2;
    s.n_v_heads = 4;
    s.head_k_dim = 8;
    s.head_v_dim = 8;
    return s;
}

// Writes a mark into every float of seq's state, layer by layer.
void mark(RecurrentState& r, int layers, int seq, float v) {
    const LinearAttentionShape s = shape();
    const size_t conv = size_t(s.conv_kernel - 1) * s.conv_dim(),
                 mat = size_t(s.n_v_heads) * s.head_k_dim * s.head_v_dim;
    for (int l = 0; l < layers; l++) {
        for (size_t i = 0; i < conv; i++) r.conv(l, seq)[i] = v + float(l);
        for (size_t i = 0; i < mat; i++) r.matrices(l, seq)[i] = -v - float(l);
    }
}

bool all_zero(const RecurrentState& r, int layers, int seq) {
    const LinearAttentionShape s = shape();
    const size_t conv = size_t(s.conv_kernel - 1) * s.conv_dim(),
                 mat = size_t(s.n_v_heads) * s.head_k_dim * s.head_v_dim;
    for (int l = 0; l < layers; l++) {
        for (size_t i = 0; i < conv; i++)
            if (r.conv(l, seq)[i] != 0.0f) return false;
        for (size_t i = 0; i < mat; i++)
            if (r.matrices(l, seq)[i] != 0.0f) return false;
    }
    return true;
}

}  // namespace

TEST_CASE("recurrent state: sizes, append, restart and the positions it refuses", "[recurrent_state]") {
    const LinearAttentionShape s = shape();
    RecurrentState r(3, 2, s);
    // Per layer: 3 x (16 + 16 + 32) conv floats and 4 x 8 x 8 matrix floats.
    // A sequence's budget holds the live state and MAX_CHECKPOINTS checkpoints;
    // what is allocated is the live states (no checkpoint made yet).
    const size_t per_layer = (3 * 64 + 4 * 64) * sizeof(float);
    constexpr size_t with_checkpoints = 1 + RecurrentState::MAX_CHECKPOINTS;
    CHECK(r.bytes_per_sequence() == with_checkpoints * 3 * per_layer);
    CHECK(RecurrentState::sequence_bytes(3, s) == with_checkpoints * 3 * per_layer);
    CHECK(r.bytes_per_position() == 0);
    CHECK(r.bytes() == 2 * 3 * per_layer);
    CHECK(all_zero(r, 3, 0));

    for (int pos = 0; pos < 5; pos++) r.prepare_write(0, pos);
    CHECK(r.length(0) == 5);
    mark(r, 3, 0, 1.0f);
    // Going on is the only way forward; a gap or a step back is refused.
    CHECK_THROWS_AS(r.prepare_write(0, 7), MoeError);
    CHECK_THROWS_AS(r.prepare_write(0, 3), MoeError);
    CHECK(r.length(0) == 5);
    // Position 0 starts again from a zero state.
    r.prepare_write(0, 0);
    CHECK(r.length(0) == 1);
    CHECK(all_zero(r, 3, 0));
}

TEST_CASE("recurrent state: prefix reuse only at the length, forks copy the whole state", "[recurrent_state]") {
    RecurrentState r(2, 1, shape());
    const size_t state_bytes = r.bytes();  // one sequence's live state
    for (int pos = 0; pos < 6; pos++) r.prepare_write(0, pos);
    mark(r, 2, 0, 3.0f);
    CHECK(r.reusable_prefix(0, 10) == 6);
    CHECK(r.reusable_prefix(0, 6) == 6);
    CHECK(r.reusable_prefix(0, 5) == 0);  // a state holds no earlier point (no checkpoint)
    r.truncate(0, 9);                     // beyond its length: nothing to drop
    CHECK(r.length(0) == 6);
    CHECK_THROWS_WITH(r.truncate(0, 4), Catch::Contains("cannot be cut back to position 4 of 6"));

    r.reserve_seqs(3);
    CHECK(r.n_seqs() == 3);
    CHECK(r.length(2) == 0);
    CHECK(all_zero(r, 2, 2));
    r.fork(2, 0, 6);
    CHECK(r.length(2) == 6);
    CHECK(std::memcmp(r.conv(0, 2), r.conv(0, 0), state_bytes) == 0);
    r.prepare_write(2, 6);  // the fork goes on by itself
    CHECK(r.length(2) == 7);
    CHECK(r.length(0) == 6);
    CHECK_THROWS_WITH(r.fork(1, 0, 3), Catch::Contains("from its length 6 or a checkpoint, not from position 3"));
    r.fork(1, 0, 0);  // from nothing: an empty sequence
    CHECK(r.length(1) == 0);
    CHECK(all_zero(r, 2, 1));
    r.truncate(0, 0);
    CHECK(r.length(0) == 0);
    CHECK(all_zero(r, 2, 0));
    CHECK_THROWS_AS(r.prepare_write(5, 0), MoeError);
}

TEST_CASE("recurrent state: checkpoints at reuse points, cut back and forked from, dropped when stale",
          "[recurrent_state]") {
    RecurrentState r(2, 2, shape());
    const size_t state_bytes = r.bytes() / 2;
    std::vector<float> at3(state_bytes / sizeof(float)), at5(at3.size());
    for (int pos = 0; pos < 3; pos++) r.prepare_write(0, pos);
    mark(r, 2, 0, 3.0f);
    r.mark_reuse_point(0);
    r.mark_reuse_point(0);  // again at the same length: still one checkpoint
    std::memcpy(at3.data(), r.conv(0, 0), state_bytes);
    for (int pos = 3; pos < 5; pos++) r.prepare_write(0, pos);
    mark(r, 2, 0, 5.0f);
    r.mark_reuse_point(0);
    std::memcpy(at5.data(), r.conv(0, 0), state_bytes);
    for (int pos = 5; pos < 9; pos++) r.prepare_write(0, pos);
    mark(r, 2, 0, 9.0f);
    CHECK(r.checkpoints(0) == std::vector<int>{3, 5});
    CHECK(r.bytes() == 4 * state_bytes);  // two live states, two checkpoints

    // The latest checkpoint at or before the prefix asked about.
    CHECK(r.reusable_prefix(0, 9) == 9);
    CHECK(r.reusable_prefix(0, 8) == 5);
    CHECK(r.reusable_prefix(0, 5) == 5);
    CHECK(r.reusable_prefix(0, 4) == 3);
    CHECK(r.reusable_prefix(0, 2) == 0);
    CHECK_THROWS_WITH(r.truncate(0, 4), Catch::Contains("cannot be cut back to position 4 of 9 (no checkpoint there)"));

    // A fork from a checkpoint starts with its state and no checkpoints of its own.
    r.fork(1, 0, 3);
    CHECK(r.length(1) == 3);
    CHECK(std::memcmp(r.conv(0, 1), at3.data(), state_bytes) == 0);
    CHECK(r.checkpoints(1).empty());
    CHECK(r.length(0) == 9);

    // Cut back to 5: the state there again; the sequence goes on from 5.
    r.truncate(0, 5);
    CHECK(r.length(0) == 5);
    CHECK(std::memcmp(r.conv(0, 0), at5.data(), state_bytes) == 0);
    r.prepare_write(0, 5);
    CHECK(r.checkpoints(0) == std::vector<int>{3, 5});
    // Cut back to 3: the checkpoint at 5 described positions now gone.
    r.truncate(0, 3);
    CHECK(std::memcmp(r.conv(0, 0), at3.data(), state_bytes) == 0);
    CHECK(r.checkpoints(0) == std::vector<int>{3});
    CHECK(r.bytes() == 4 * state_bytes);  // the dropped checkpoint's block kept for the next one

    // At most MAX_CHECKPOINTS, the oldest dropped first.
    for (int pos = 3; pos < 3 + RecurrentState::MAX_CHECKPOINTS + 2; pos++) {
        r.prepare_write(0, pos);
        r.mark_reuse_point(0);
    }
    const std::vector<int> kept = r.checkpoints(0);
    REQUIRE(int(kept.size()) == RecurrentState::MAX_CHECKPOINTS);
    CHECK(kept.back() == r.length(0));
    CHECK(kept.front() == r.length(0) - RecurrentState::MAX_CHECKPOINTS + 1);
    CHECK(r.bytes() == (2 + RecurrentState::MAX_CHECKPOINTS) * state_bytes);

    // Starting again from 0 drops them all: they described the old sequence.
    r.prepare_write(0, 0);
    CHECK(r.checkpoints(0).empty());
    for (int pos = 1; pos < 6; pos++) r.prepare_write(0, pos);
    CHECK(r.reusable_prefix(0, 5) == 0);
}
