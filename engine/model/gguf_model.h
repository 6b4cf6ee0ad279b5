// A model in one GGUF file: its ModelConfig from the metadata and its
// weights from the tensors, mapped onto the one tensor table
// (tensor_table.h). Knows the llama architecture's GGUF names (Mixtral and
// Mistral files use it): token_embd, blk.N.attn_{norm,q,k,v,output},
// blk.N.ffn_norm, blk.N.ffn_gate_inp (the router), the experts merged into
// 3-D blk.N.ffn_{gate,up,down}_exps (or, in older files, one tensor per
// expert blk.N.ffn_{gate,up,down}.E), the dense MLP's blk.N.ffn_{gate,up,down},
// output_norm and output (absent when tied).
//
// GGUF llama files store attn_q and attn_k with the rows of each head
// permuted for interleaved (GPT-J) RoPE, where the engine applies Hugging
// Face's rotate-half: the loader puts those rows back in Hugging Face order
// (a copy of each row's bytes, in its own type), so a model gives the same
// logits from its folder and from its GGUF. gguf_llama_row / its inverse are
// that permutation, for the writer too.
//
// Must not tokenize or render templates (text/ reads those keys).
#pragma once
#include <cstdint>
#include <filesystem>

#include "engine/model/gguf.h"
#include "engine/model/model_config.h"
#include "engine/model/weights.h"

// True for a path that names a GGUF file (a regular file ending in .gguf),
// as `--model` takes it.
bool gguf_model_path(const std::filesystem::path& path);

// The ModelConfig of a GGUF file's metadata (general.architecture "llama":
// llama.embedding_length, .feed_forward_length or .expert_feed_forward_length,
// .block_count, .attention.head_count(_kv), .attention.key_length,
// .expert_count, .expert_used_count, .rope.freq_base,
// .attention.layer_norm_rms_epsilon, .context_length, .vocab_size, and
// tokenizer.ggml.bos/eos_token_id), checked as config.json is. MoeError
// naming the file and key.
ModelConfig gguf_model_config(const GgufFile& file);
ModelConfig gguf_model_config(const std::filesystem::path& path);

// Maps the file and views every tensor in place (attn_q / attn_k rows
// reordered into owned memory); the mapping lives in the result. MoeError
// "FILE: TENSOR: what is wrong" for a missing or mis-shaped tensor.
ModelWeights gguf_model_weights(const ModelConfig& config, const std::filesystem::path& path);

// The GGUF row that holds Hugging Face row `hf_row` of a q or k projection
// with heads of head_dim rows: within a head, rotate-half's pair (i,
// i + head_dim/2) sits at rows (2i, 2i + 1).
int64_t gguf_llama_row(int64_t hf_row, int head_dim);
