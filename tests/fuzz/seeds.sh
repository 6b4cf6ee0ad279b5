#!/usr/bin/env bash
# Writes the seed corpus of every fuzzer into OUT/<target>/ from the real
# files of ../shared/data (MOE_SHARED_DATA overrides) plus small hand-made
# inputs. Nothing here is committed: scripts/fuzz.sh runs it each time.
# Usage: tests/fuzz/seeds.sh OUT
set -euo pipefail
out="$1"
root="$(cd "$(dirname "$0")/../.." && pwd)"
data="${MOE_SHARED_DATA:-$root/../shared/data}"
[ -d "$data" ] || { echo "seeds: $data missing (see tests/README.md)" >&2; exit 1; }
rm -rf "$out"
for t in safetensors model_config tokenizer_config openai_request chat_template tokenizer; do mkdir -p "$out/$t"; done

# 8 bytes little-endian.
le64() { local n=$1 i; for i in 0 1 2 3 4 5 6 7; do printf "\\x$(printf %02x $(((n >> (8 * i)) & 255)))"; done; }
# A JSON string literal of a file's text.
json_string() { printf '"'; sed -e 's/\\/\\\\/g' -e 's/"/\\"/g' -e 's/\t/\\t/g' "$1" | awk '{ printf "%s\\n", $0 }'; printf '"'; }
# Standard input becomes one seed of target $1, named by its hash (as libFuzzer names inputs).
seed() {
  local tmp
  tmp=$(mktemp "$out/$1/.seed.XXXXXX")
  cat > "$tmp"
  mv "$tmp" "$out/$1/$(sha1sum < "$tmp" | cut -c1-40)"
}

# safetensors: the head (length + JSON header) of every real shard; tiny hand-made files.
while IFS= read -r f; do
  len=$(od -An -t u8 -N8 "$f" | tr -d ' ')
  head -c $((8 + len)) "$f" | seed safetensors
done < <(find "$data" -name '*.safetensors' | sort)
st() { { le64 ${#1}; printf '%s' "$1"; printf '%*s' "$2" ''; } | seed safetensors; }
st '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}' 8
st '{"__metadata__":{"format":"pt"},"a":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]},"b":{"dtype":"F16","shape":[0],"data_offsets":[8,8]}}' 8
st '{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}}' 8

# config.json: every real one, generation_config.json too; hand-made dense and MoE ones.
find "$data" \( -name 'config.json' -o -name '*.config.json' -o -name 'generation_config.json' \) | sort |
  while IFS= read -r f; do seed model_config < "$f"; done
echo '{"architectures":["MistralForCausalLM"],"hidden_size":64,"intermediate_size":128,"num_hidden_layers":1,"num_attention_heads":4,"vocab_size":32000}' | seed model_config
echo '{"architectures":["MixtralForCausalLM"],"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":32000,"num_local_experts":4,"num_experts_per_tok":2,"eos_token_id":[2,3],"rope_theta":1e6,"head_dim":16}' | seed model_config

# tokenizer_config.json: the real ones; every real chat template raw and inside a config.
find "$data" -name 'tokenizer_config.json' | sort | while IFS= read -r f; do seed tokenizer_config < "$f"; done
for f in "$data"/chat_templates/*.jinja "$data"/reference/mistral-common/*.jinja; do
  seed tokenizer_config < "$f"
  { printf '{"chat_template": '; json_string "$f"; printf '}'; } | seed tokenizer_config
done
echo '{"chat_template":[{"name":"tool_use","template":"x"},{"name":"default","template":"[INST]"}]}' | seed tokenizer_config

# OpenAI requests: the real chat samples of mistral-common; one body per endpoint and option.
for f in "$data"/reference/mistral-common/*__sample.json; do seed openai_request < "$f"; done
for body in \
  '{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}],"max_tokens":16,"temperature":0.7,"top_p":0.9,"stop":["\n"],"seed":1}' \
  '{"messages":[{"role":"user","content":[{"type":"text","text":"Hi"}]}],"stream":true,"stream_options":{"include_usage":true},"logprobs":true,"top_logprobs":2}' \
  '{"messages":[{"role":"user","content":"Hi"}],"beam_width":4,"n":2,"length_penalty":1.0,"temperature":0}' \
  '{"prompt":"Once upon a time","max_tokens":8,"ignore_eos":true,"cache_prompt":false,"frequency_penalty":0.5}' \
  '{"prompt":[1,415,2936],"max_tokens":1}' \
  '{"content":"hello","add_special":true,"with_pieces":true}' \
  '{"tokens":[1,22557,28808]}' \
  '{"messages":[{"role":"user","content":"Hi"}],"temperature":1e400,"top_k":-1,"max_tokens":1e20}'; do
  printf '%s' "$body" | seed openai_request
done

# chat_template: family, flags, then role byte + content per message, from real prompts.
i=0
while IFS= read -r line && [ $i -lt 8 ]; do
  printf "\\x$(printf %02x $((i % 4)))\\x01\\x01%s\\x1e\\x02Sure.\\x1e\\x01%s" "$line" "$line" | seed chat_template
  i=$((i + 1))
done < "$data/prompts/vicuna_bench_question.jsonl"
{ printf '\x00\x01\x00You are kind.\x1e\x01'; cat "$data/reference/mistral-common/no_tools__text_v1.txt"; } | seed chat_template

# tokenizer: llama.cpp's tokenizer test strings, Mistral's reference text, real prompts.
for f in "$data"/reference/llama-cpp-vocab/*.inp "$data"/reference/mistral-common/*.txt; do seed tokenizer < "$f"; done
head -n 20 "$data/prompts/mt_bench_question.jsonl" | while IFS= read -r line; do printf '%s' "$line" | seed tokenizer; done
printf '\xf0\x9f\x98\x80 caf\xc3\xa9 \xe2\x80\x8b\t\n\r\x00\xff\xfe <s></s>[INST]' | seed tokenizer
echo "seeds: $(find "$out" -type f | wc -l) files in $out"
