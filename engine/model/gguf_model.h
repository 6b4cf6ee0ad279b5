// A model in one GGUF file: its ModelConfig from the metadata and its
// weights from the tensors, mapped onto the one tensor table
// (tensor_table.h). Knows the GGUF names of the llama architecture (Mixtral
// and Mistral files use it) and of qwen3moe, qwen2moe and olmoe: token_embd,
// blk.N.attn_{norm,q,k,v,output}, blk.N.attn_{q,k,v}.bias (Qwen2-MoE),
// blk.N.attn_{q,k}_norm (Qwen3 per head, OLMoE full width), blk.N.ffn_norm,
// blk.N.ffn_gate_inp (the router), the experts merged into 3-D
// blk.N.ffn_{gate,up,down}_exps (or, in older files, one tensor per expert
// blk.N.ffn_{gate,up,down}.E), the shared expert's blk.N.ffn_{gate,up,down}_shexp
// and its gate blk.N.ffn_gate_inp_shexp (a vector of dim), the dense MLP's
// blk.N.ffn_{gate,up,down}, output_norm and output (absent when tied).
//
// GGUF llama files store attn_q and attn_k with the rows of each head
// permuted for interleaved (GPT-J) RoPE, where the engine applies Hugging
// Face's rotate-half: the loader puts those rows back in Hugging Face order
// (a copy of each row's bytes, in its own type), so a model gives the same
// logits from its folder and from its GGUF. gguf_llama_row / its inverse are
// that permutation, for the writer too. llama.cpp does not permute the
// qwen3moe, qwen2moe and olmoe archs (NEOX RoPE, rotate-half): their rows
// are read and written as they are.
//
// gguf_model_write is the other direction (`moe-server quantize`).
//
// Must not tokenize or render templates (text/ reads those keys).
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cpu_kernels/quant.h"
#include "engine/formats/gguf.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"

// True for a path that names a GGUF file (a regular file ending in .gguf),
// as `--model` takes it.
bool gguf_model_path(const std::filesystem::path& path);

// The ModelConfig of a GGUF file's metadata (general.architecture "llama",
// "qwen3moe", "qwen2moe" or "olmoe"; ARCH.embedding_length,
// .feed_forward_length, .expert_feed_forward_length (the experts' width),
// .expert_shared_feed_forward_length (qwen2moe), .expert_weights_norm
// (default: true for qwen3moe, else false, as llama.cpp runs them),
// .block_count, .attention.head_count(_kv), .attention.key_length,
// .expert_count, .expert_used_count, .rope.freq_base,
// .attention.layer_norm_rms_epsilon, .context_length, .vocab_size, and
// tokenizer.ggml.bos/eos_token_id), checked as config.json is. MoeError
// naming the file and key.
ModelConfig gguf_model_config(const GgufFile& file);
ModelConfig gguf_model_config(const std::filesystem::path& path);

// Maps the file and views every tensor in place, but for what the CPU reads
// in a layout of its own, copied into the result's HostArena: attn_q /
// attn_k rows reordered, Q8_0 / Q4_K / Q6_K interleaved (Q8_0_R8 / Q4_K_R8 /
// Q6_K_R8). The mapping lives in the result. MoeError "FILE: TENSOR: what
// is wrong" for a missing or mis-shaped tensor.
ModelWeights gguf_model_weights(const ModelConfig& config, const std::filesystem::path& path);

// The GGUF row that holds Hugging Face row `hf_row` of a q or k projection
// with heads of head_dim rows: within a head, rotate-half's pair (i,
// i + head_dim/2) sits at rows (2i, 2i + 1).
int64_t gguf_llama_row(int64_t hf_row, int head_dim);

// `moe-server quantize`'s mixes: the element type of each matrix. Vectors
// (norms) and the routers are F32, as llama.cpp writes them.
//   f32     every matrix F32 (a validation aid: llama.cpp then computes in
//           fp32 throughout, with no activations rounded to bf16)
//   bf16    every matrix BF16
//   q8_0    every matrix Q8_0
//   q4_0    Q4_0, lm_head Q6_K
//   q4_k_m  Q4_K; Q6_K for lm_head, and for attn_v and the experts' down
//           projections in the layers llama.cpp's Q4_K_M also widens (the
//           first and last eighth of the layers and every third between)
//   q5_k_m  the same with Q5_K
// experts_only keeps every matrix that is not an expert's in BF16 (for a GPU
// that holds the dense part). A row that is not whole blocks of the chosen
// type falls back to Q8_0, then to BF16.
enum class QuantMix { F32, BF16, Q8_0, Q4_0, Q4_K_M, Q5_K_M };
std::optional<QuantMix> quant_mix_parse(std::string_view name);
const char* quant_mix_name(QuantMix mix);
DType quant_mix_type(QuantMix mix, bool experts_only, const TensorEntry& entry, int n_layers);

struct GgufWriteOptions {
    QuantMix mix = QuantMix::BF16;
    bool experts_only = false;
    std::string name;                          // general.name
    std::vector<GgufKeyValue> extra_metadata;  // the tokenizer's and chat template's keys
    int threads = 1;                           // rows are converted in parallel
    QuantSearch search = QuantSearch::LEAST_SQUARES;  // how block scales are chosen (cpu_kernels/quant.h)
    // Called after each tensor with the bytes of source weights read so far
    // and in all (a progress bar).
    std::function<void(uint64_t done, uint64_t total)> progress;
};

// Writes the model as a GGUF file in llama.cpp's layout (the llama
// architecture's keys and tensor names, q/k rows permuted for its RoPE,
// experts merged into 3-D tensors), each matrix converted to its type under
// the mix, atomically (gguf_write), a matrix at a time (its rows converted
// on options.threads threads). Reads the source weights of any type.
void gguf_model_write(const std::filesystem::path& out, const ModelConfig& config, const ModelWeights& weights,
                      const GgufWriteOptions& options);
