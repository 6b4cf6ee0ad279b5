// RecurrentState (engine/state/recurrent_state.h): the fixed-size state of
// the Gated DeltaNet layers goes on from its length or starts again, is
// never cut back to the middle, forks whole, and sizes itself from the shape.
#include <catch2/catch.hpp>
#include <cstring>

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
    const size_t per_layer = (3 * 64 + 4 * 64) * sizeof(float);
    CHECK(r.bytes_per_sequence() == 3 * per_layer);
    CHECK(RecurrentState::sequence_bytes(3, s) == 3 * per_layer);
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
    for (int pos = 0; pos < 6; pos++) r.prepare_write(0, pos);
    mark(r, 2, 0, 3.0f);
    CHECK(r.reusable_prefix(0, 10) == 6);
    CHECK(r.reusable_prefix(0, 6) == 6);
    CHECK(r.reusable_prefix(0, 5) == 0);  // a state holds no earlier point
    r.truncate(0, 9);                     // beyond its length: nothing to drop
    CHECK(r.length(0) == 6);
    CHECK_THROWS_WITH(r.truncate(0, 4), Catch::Contains("cannot be cut back to position 4 of 6"));

    r.reserve_seqs(3);
    CHECK(r.n_seqs() == 3);
    CHECK(r.length(2) == 0);
    CHECK(all_zero(r, 2, 2));
    r.fork(2, 0, 6);
    CHECK(r.length(2) == 6);
    CHECK(std::memcmp(r.conv(0, 2), r.conv(0, 0), r.bytes_per_sequence()) == 0);
    r.prepare_write(2, 6);  // the fork goes on by itself
    CHECK(r.length(2) == 7);
    CHECK(r.length(0) == 6);
    CHECK_THROWS_WITH(r.fork(1, 0, 3), Catch::Contains("from its length 6, not from position 3"));
    r.fork(1, 0, 0);  // from nothing: an empty sequence
    CHECK(r.length(1) == 0);
    CHECK(all_zero(r, 2, 1));
    r.truncate(0, 0);
    CHECK(r.length(0) == 0);
    CHECK(all_zero(r, 2, 0));
    CHECK_THROWS_AS(r.prepare_write(5, 0), MoeError);
}
