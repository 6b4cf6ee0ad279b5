// Kernel benchmarks and this machine's ceilings, printed as JSON lines on
// stdout: each figure sits beside the ceiling measured in the same run and
// their ratio, so results survive a noisy machine. Called by `moe-server
// bench ceiling|kernels`; bench decode / prefill / beam
// (apps/cli_bench.cpp) take their roofline from bench_ceiling(). Not
// tests; knows no model, only the shapes its caller gives.
#pragma once
#include <string>
#include <vector>

#include "cpu_kernels/dtype.h"
#include "cpu_kernels/isa.h"
#include "cpu_kernels/thread_pool.h"

struct Ceiling {
    double read_gbs;    // streaming read of a buffer far larger than the caches, all threads
    double fma_gflops;  // fp32 FMA peak, all threads, widest ISA that runs here
    int threads;
    double fork_join_us;  // one empty ThreadPool::run
    // The median window's read rate at the best stream count: read_gbs is the
    // luckiest moment (a kernel's ratio stays honest); this says how steady
    // the machine was.
    double read_gbs_median;
};

// Measures the ceilings (about 2 s); prints one JSON line when print.
Ceiling bench_ceiling(ThreadPool& pool, bool print);
// That JSON line for ceilings measured earlier (with the widest ISA's
// kernels, as bench_ceiling measures them).
void bench_ceiling_print(const Ceiling& c);

// One expert's shape: w1 and w3 are (hidden_dim, dim), w2 is (dim, hidden_dim).
// label names it in the output ("model" field), e.g. the preset it came from.
struct BenchExpertShape {
    std::string label;
    int dim;
    int hidden_dim;
};

// For the w1/w3 and w2 matrices of each expert shape, each weight type of
// types, each ISA of isas and m = 1, 2, 4, 8, 16, 64, 256: matmul time, GB/s
// of weights (matmul_bytes: the type's own bytes), GFLOP/s and both ratios
// to the ceiling; then the fused expert FFN of each shape and type (and
// Q4_K w1/w3 with a Q6_K w2, as in Q4_K_M files; the same as Q4_K_R8 /
// Q6_K_R8, as moe-server holds them) at m = 1 (decode) and 128. Q8_0_R8,
// Q4_K_R8 and Q6_K_R8 are the forms moe-server holds Q8_0, Q4_K and Q6_K in.
// Quantized weights are one random matrix quantized once, copied. Each
// line also carries read_gbs_paired: a plain read of as many bytes timed
// alternately with the kernel, so bw_ratio_paired compares like moments of a
// noisy machine. Large m on avx512bf16 is measured both through oneDNN
// ("onednn", the default where native) and our packed kernel ("packed"). The
// scalar path runs only m <= 2 (it is the reference, not a contender).
void bench_kernels(ThreadPool& pool, const Ceiling& ceiling, const std::vector<Isa>& isas,
                   const std::vector<BenchExpertShape>& shapes,
                   const std::vector<DType>& types = {DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q5_K,
                                                      DType::Q6_K, DType::Q8_0_R8, DType::Q4_K_R8, DType::Q6_K_R8,
                                                      DType::MXFP4});

// One Gated DeltaNet layer's delta-rule shape: value heads of dk x dv
// states, key heads shared by n_v_heads / n_k_heads of them.
struct BenchDeltaShape {
    std::string label;
    int n_k_heads, n_v_heads, dk, dv;
};

// gated_delta_rule over all value heads of each shape (heads split over the
// pool) for runs of 1, 16, 64 and 512 tokens, each ISA of isas: time,
// tokens/s, GFLOP/s (gated_delta_rule_flops) and its ratio to the FMA
// ceiling. From DELTA_CHUNK_MIN tokens both forms: "chunked" (what the engine
// runs) and "step" (delta_rule_step token by token, the recurrence it
// replaces; its tokens/s is the figure to compare).
void bench_delta_rule(ThreadPool& pool, const Ceiling& ceiling, const std::vector<Isa>& isas,
                      const std::vector<BenchDeltaShape>& shapes);

// One attention layer's shape: query heads sharing n_kv_heads kv heads of
// head_dim; window > 0: a sliding layer's window.
struct BenchAttentionShape {
    std::string label;
    int n_heads, n_kv_heads, head_dim, window = 0;
};

// Causal attention of a prompt (512 and 2048 tokens from position 0) over a
// paged cache of KV_BLOCK-row pages, each ISA of isas: "run" (attention_run,
// what the engine runs for a prompt) and "query" (attention_paged query by
// query, threads over (token, kv head): the path it replaced, and the one
// decode steps take): time, tokens/s, GFLOP/s (QK^T and PV over the
// positions each query sees) and the ratio to the FMA ceiling.
void bench_attention(ThreadPool& pool, const Ceiling& ceiling, const std::vector<Isa>& isas,
                     const std::vector<BenchAttentionShape>& shapes);

// Every path this CPU runs, scalar first.
std::vector<Isa> bench_supported_isas();

// Decode roofline: tokens per second if every byte of weights read per token
// streamed at the measured bandwidth.
double roofline_decode_tok_s(double weight_bytes_per_token, const Ceiling& ceiling);
