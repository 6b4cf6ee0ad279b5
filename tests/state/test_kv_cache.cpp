// The paged KV cache: block tables, forks that share blocks, copy-on-write
// of exactly one block, reference counts freeing blocks, truncation, pool
// growth and exhaustion. Plain numbers, no model.
#include <catch2/catch.hpp>

#include "base/errors.h"
#include "engine/state/kv_cache.h"

namespace {

constexpr int LAYERS = 2, KV_DIM = 8;

// A value that names (layer, k or v, position, column) and the writer.
float mark(int layer, int kv, int pos, int col, int writer) {
    return float(writer * 100000 + layer * 10000 + kv * 5000 + pos * 10 + col % 10);
}

void write_rows(KvCache& c, int seq, int from, int to, int writer) {
    for (int pos = from; pos < to; pos++) {
        c.prepare_write(seq, pos);
        for (int l = 0; l < LAYERS; l++)
            for (int j = 0; j < KV_DIM; j++) {
                c.k(l, seq, pos)[j] = mark(l, 0, pos, j, writer);
                c.v(l, seq, pos)[j] = mark(l, 1, pos, j, writer);
            }
    }
}

// Reads through the read side (block pointers + offsets), as attention does.
float read_k(const KvCache& c, int layer, int seq, int pos, int col) {
    return c.blocks(seq)[pos / KV_BLOCK][c.k_offset(layer) + long(pos % KV_BLOCK) * KV_DIM + col];
}
float read_v(const KvCache& c, int layer, int seq, int pos, int col) {
    return c.blocks(seq)[pos / KV_BLOCK][c.v_offset(layer) + long(pos % KV_BLOCK) * KV_DIM + col];
}

bool rows_are(const KvCache& c, int seq, int from, int to, int writer) {
    for (int pos = from; pos < to; pos++)
        for (int l = 0; l < LAYERS; l++)
            for (int j = 0; j < KV_DIM; j++)
                if (read_k(c, l, seq, pos, j) != mark(l, 0, pos, j, writer) ||
                    read_v(c, l, seq, pos, j) != mark(l, 1, pos, j, writer))
                    return false;
    return true;
}

}  // namespace

TEST_CASE("kv cache: writes allocate blocks in order and read back through the block table", "[kv_cache]") {
    KvCache c(LAYERS, 2, 100, KV_DIM);
    REQUIRE(c.slab_blocks() == 7);  // ceil(100 / 16): one context per slab
    REQUIRE(c.n_blocks() == 2 * 7);
    REQUIRE(c.blocks_in_use() == 0);
    write_rows(c, 0, 0, 40, 1);
    REQUIRE(c.blocks_in_use() == 3);
    REQUIRE(rows_are(c, 0, 0, 40, 1));
    // Written in one go: consecutive blocks whose rows follow each other
    // (attention reads them as one run, like a contiguous cache).
    for (int b = 0; b < 2; b++) {
        REQUIRE(c.blocks(0)[b + 1] == c.blocks(0)[b] + KV_BLOCK * KV_DIM);
        REQUIRE(c.k(1, 0, 16 * b + 15) + KV_DIM == c.k(1, 0, 16 * (b + 1)));
        REQUIRE(c.v(0, 0, 16 * b + 15) + KV_DIM == c.v(0, 0, 16 * (b + 1)));
    }
    write_rows(c, 1, 0, 5, 2);
    REQUIRE(c.blocks_in_use() == 4);
    REQUIRE(rows_are(c, 0, 0, 40, 1));
    REQUIRE(rows_are(c, 1, 0, 5, 2));
    // Freed blocks are handed out again lowest first: sequence 1 holds
    // block 3, then gets blocks 0 and 1 back.
    c.clear(0);
    write_rows(c, 1, 5, 40, 2);
    REQUIRE(c.blocks(1)[1] == c.blocks(1)[0] - 3 * KV_BLOCK * KV_DIM);
    REQUIRE(c.blocks(1)[2] == c.blocks(1)[1] + KV_BLOCK * KV_DIM);
    REQUIRE(rows_are(c, 1, 0, 40, 2));
}

TEST_CASE("kv cache: a fork shares blocks and a write copies exactly one block", "[kv_cache]") {
    KvCache c(LAYERS, 4, 128, KV_DIM);
    write_rows(c, 0, 0, 37, 1);  // 2 full blocks + 5 rows of a third
    REQUIRE(c.blocks_in_use() == 3);

    c.fork(1, 0, 37);
    c.fork(2, 0, 37);
    REQUIRE(c.blocks_in_use() == 3);  // nothing copied
    REQUIRE(rows_are(c, 1, 0, 37, 1));
    REQUIRE(c.cow_copies() == 0);

    // The child writes position 37 in the shared partial block: one copy,
    // holding the 5 rows before it; the parent's rows stay as they were.
    write_rows(c, 1, 37, 40, 2);
    REQUIRE(c.cow_copies() == 1);
    REQUIRE(c.blocks_in_use() == 4);
    REQUIRE(rows_are(c, 1, 0, 37, 1));
    REQUIRE(rows_are(c, 1, 37, 40, 2));
    REQUIRE(rows_are(c, 0, 0, 37, 1));

    // The parent writes on: its block is still shared with sequence 2.
    write_rows(c, 0, 37, 39, 3);
    REQUIRE(c.cow_copies() == 2);
    REQUIRE(rows_are(c, 0, 37, 39, 3));
    REQUIRE(rows_are(c, 1, 37, 40, 2));
    // Sequence 2 is now the only holder of the original block: no copy.
    write_rows(c, 2, 37, 50, 4);
    REQUIRE(c.cow_copies() == 2);
    REQUIRE(rows_are(c, 2, 0, 37, 1));
    REQUIRE(rows_are(c, 2, 37, 50, 4));
    REQUIRE(c.blocks_in_use() == 2 + 3 + 1);  // 2 shared full blocks, 3 partial copies, seq 2's 4th block

    // Forking a prefix that ends on a block boundary shares only whole
    // blocks: the next position starts a fresh block, nothing is copied.
    c.fork(3, 2, 32);
    write_rows(c, 3, 32, 33, 5);
    REQUIRE(c.cow_copies() == 2);
    REQUIRE(rows_are(c, 3, 32, 33, 5));
    REQUIRE(rows_are(c, 3, 0, 32, 1));
    REQUIRE(rows_are(c, 2, 32, 37, 1));
}

TEST_CASE("kv cache: releasing the last holder frees a block, truncate and clear", "[kv_cache]") {
    KvCache c(LAYERS, 3, 64, KV_DIM);
    write_rows(c, 0, 0, 48, 1);
    c.fork(1, 0, 48);
    c.fork(2, 1, 20);
    REQUIRE(c.blocks_in_use() == 3);
    c.clear(0);
    REQUIRE(c.blocks_in_use() == 3);  // still held by 1 (and 2)
    c.truncate(1, 17);                // keeps 2 blocks; the third had only seq 1 left
    REQUIRE(c.blocks_in_use() == 2);
    c.clear(1);
    REQUIRE(c.blocks_in_use() == 2);  // seq 2 holds blocks 0 and 1
    REQUIRE(rows_are(c, 2, 0, 20, 1));
    c.clear(2);
    REQUIRE(c.blocks_in_use() == 0);
    // Fork onto a sequence that already holds blocks releases them first.
    write_rows(c, 0, 0, 16, 1);
    write_rows(c, 1, 0, 40, 2);
    c.fork(1, 0, 16);
    REQUIRE(c.blocks_in_use() == 1);
    REQUIRE(rows_are(c, 1, 0, 16, 1));
}

TEST_CASE("kv cache: the pool grows on request and an exhausted pool is a clear error", "[kv_cache]") {
    KvCache c(LAYERS, 2, 32, KV_DIM, 2);  // slabs of 2 blocks, one of them
    write_rows(c, 0, 0, 32, 1);
    REQUIRE(c.blocks_in_use() == 2);
    const float* first = c.blocks(0)[0];
    try {
        write_rows(c, 1, 0, 1, 2);
        FAIL("expected an exhausted pool");
    } catch (const MoeError& e) {
        REQUIRE(std::string(e.what()).find("blocks") != std::string::npos);
    }
    c.reserve_blocks(4);
    c.reserve_seqs(3);
    REQUIRE(c.n_blocks() == 4);
    REQUIRE(c.n_seqs() == 3);
    REQUIRE(c.blocks(0)[0] == first);  // existing blocks did not move
    write_rows(c, 2, 0, 20, 3);
    REQUIRE(rows_are(c, 0, 0, 32, 1));
    REQUIRE(rows_are(c, 2, 0, 20, 3));
}
