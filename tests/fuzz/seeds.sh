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
for t in safetensors gguf gguf_tokenizer model_config tokenizer_config openai_request tool_call_arguments chat_template jinja tokenizer hf_tokenizer grammar json_schema; do mkdir -p "$out/$t"; done

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

# gguf: every real GGUF's header (metadata + tensor infos, not the data), and
# the same header with every array cut to its first 8 elements, so a whole
# header of real keys and tensor infos fits in fuzz.sh's -max_len. gguf_walk
# reads the file's bytes (od) and prints the header's length (mode=len) or
# the shrunk header (mode=shrink).
gguf_walk() {
  od -An -v -t u1 "$2" | LC_ALL=C mawk -v mode="$1" '
    function u(q, k,   v, i) { v = 0; for (i = k - 1; i >= 0; i--) v = v * 256 + b[q + i]; return v }
    function emit(from, to,   i) { if (mode == "shrink") for (i = from; i < to; i++) printf "%c", b[i] }
    function put(v, k,   i) { if (mode == "shrink") for (i = 0; i < k; i++) { printf "%c", v % 256; v = int(v / 256) } }
    function need(q) { if (q > n) { print "gguf_walk: " FILENAME " ends inside its header" > "/dev/stderr"; exit 1 } }
    function str(on,   k) { need(p + 8); k = u(p, 8); need(p + 8 + k); if (on) emit(p, p + 8 + k); p += 8 + k }
    function val(t, on,   e, c, i) {
      if (t == 8) { str(on); return }
      if (t == 9) {
        need(p + 12); e = u(p, 4); c = u(p + 4, 8)
        if (on) { emit(p, p + 4); put(c > 8 ? 8 : c, 8) }
        p += 12
        for (i = 0; i < c; i++) val(e, on && i < 8)
        return
      }
      need(p + size[t]); if (on) emit(p, p + size[t]); p += size[t]
    }
    { for (i = 1; i <= NF; i++) b[n++] = $i }
    END {
      split("1 2 2 4 4 4 1 0 0 8 8 8", s, " "); size[0] = 1
      for (i = 1; i <= 12; i++) size[i] = s[i]
      need(24); nt = u(8, 8); nkv = u(16, 8); emit(0, 24); p = 24
      for (j = 0; j < nkv; j++) { str(1); need(p + 4); t = u(p, 4); emit(p, p + 4); p += 4; val(t, 1) }
      for (j = 0; j < nt; j++) { str(1); need(p + 4); d = u(p, 4); need(p + 4 + 8 * d + 12); emit(p, p + 4 + 8 * d + 12); p += 4 + 8 * d + 12 }
      if (mode == "len") print p
    }'
}
while IFS= read -r f; do
  head -c "$(gguf_walk len "$f")" "$f" | seed gguf
  gguf_walk shrink "$f" | seed gguf
done < <(find "$data/reference/gguf" "$data/reference/llama-cpp-vocab" -name '*.gguf' | sort)
# A tiny hand-made file: one key of every value type (a nested array too),
# general.alignment 64, an f32 and a q8_0 tensor and their data.
le16() { local n=$1 i; for i in 0 1; do printf "\\x$(printf %02x $(((n >> (8 * i)) & 255)))"; done; }
le32() { le16 $(($1 & 65535)); le16 $((($1 >> 16) & 65535)); }
gstr() { le64 ${#1}; printf '%s' "$1"; }
kv() { gstr "$1"; le32 "$2"; }
{
  printf 'GGUF'; le32 3; le64 2; le64 16
  kv u8 0; printf '\x07'; kv i8 1; printf '\xff'; kv u16 2; le16 513; kv i16 3; printf '\xfe\xff'
  kv u32 4; le32 7; kv i32 5; le32 4294967295; kv f32 6; printf '\x00\x00\xc0\x3f'; kv bool 7; printf '\x01'
  kv str 8; gstr 'llama'; kv u64 10; le64 9; kv i64 11; le64 -2; kv f64 12; printf '\x00\x00\x00\x00\x00\x00\xf8\x3f'
  kv tokens 9; le32 8; le64 3; gstr '<unk>'; gstr '<s>'; gstr '</s>'
  kv scores 9; le32 6; le64 2; printf '\x00\x00\x80\x3f\x00\x00\x00\x40'
  kv nested 9; le32 9; le64 2; le32 0; le64 1; printf '\x05'; le32 7; le64 0
  kv general.alignment 4; le32 64
  gstr a.weight; le32 2; le64 4; le64 2; le32 0; le64 0
  gstr b.weight; le32 1; le64 32; le32 8; le64 64
} > "$out/gguf/.handmade"
# Pad the hand-made header to the alignment, then the data (32 + 32 + 34 bytes).
len=$(stat -c %s "$out/gguf/.handmade")
{ cat "$out/gguf/.handmade"; head -c $(((64 - len % 64) % 64)) /dev/zero; head -c 98 /dev/zero | tr '\0' '\21'; } | seed gguf
rm "$out/gguf/.handmade"

# gguf_tokenizer: the gguf seeds (the real vocabularies' headers among them),
# and a small valid "llama" vocabulary with a chat template, by hand:
# <unk> <s> </s> ▁ a b ▁a ab ▁ab, scores 0 0 0 -1 .. -6.
cp "$out"/gguf/* "$out/gguf_tokenizer/"
gbytes() { le64 "$1"; printf "$2"; }  # a string of $1 bytes (UTF-8 needs the count given)
f32() { for b in "$@"; do printf "\\x$b"; done; }
{
  printf 'GGUF'; le32 3; le64 0; le64 7
  kv tokenizer.ggml.model 8; gstr llama
  kv tokenizer.ggml.tokens 9; le32 8; le64 9; gstr '<unk>'; gstr '<s>'; gstr '</s>'
  gbytes 3 '\xe2\x96\x81'; gstr a; gstr b; gbytes 4 '\xe2\x96\x81a'; gstr ab; gbytes 5 '\xe2\x96\x81ab'
  kv tokenizer.ggml.scores 9; le32 6; le64 9; le32 0; le32 0; le32 0
  f32 00 00 80 bf 00 00 00 c0 00 00 40 c0 00 00 80 c0 00 00 a0 c0 00 00 c0 c0
  kv tokenizer.ggml.token_type 9; le32 5; le64 9; for t in 2 3 3 1 1 1 1 1 1; do le32 $t; done
  kv tokenizer.ggml.bos_token_id 4; le32 1
  kv tokenizer.ggml.eos_token_id 4; le32 2
  kv tokenizer.chat_template 8; gstr "{{ '[INST] ' + messages[0]['content'] + ' [/INST]' }}"
} | seed gguf_tokenizer

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

# tool_call_arguments: the arguments of the tool calls in mistral-common's
# samples (JSON text, as OpenAI's clients send it); hand-made ones: nested,
# repeated keys (the last wins, at the first one's place), escapes, numbers
# at a double's edge, deep brackets.
for f in "$data"/reference/mistral-common/*__sample.json; do
  python3 -c 'import json, sys
for m in json.load(open(sys.argv[1])).get("messages", []):
    for c in m.get("tool_calls") or []:
        a = c.get("function", {}).get("arguments")
        print(a if isinstance(a, str) else json.dumps(a), end="\0")' "$f" |
    while IFS= read -r -d '' args; do printf '%s' "$args" | seed tool_call_arguments; done
done
for args in   '{"location":"Paris, France","unit":"celsius"}'   '{"a":{"b":[1,2.5,-3e-7,true,false,null]},"c":"\u00e9\n\"q\""}'   '{"k":1,"j":2,"k":3,"l":{"x":0,"x":{"y":[]}}}'   '{"big":1.7976931348623157e308,"small":-1e-320,"int":18446744073709551615,"neg":-9223372036854775808}'   '[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]'   '{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"a":18,"r":19}'   '{}' '""' '{"x":' ; do
  printf '%s' "$args" | seed tool_call_arguments
done

# chat_template: family, flags, then role byte + content per message, from real prompts.
i=0
while IFS= read -r line && [ $i -lt 8 ]; do
  printf "\\x$(printf %02x $((i % 4)))\\x01\\x01%s\\x1e\\x02Sure.\\x1e\\x01%s" "$line" "$line" | seed chat_template
  i=$((i + 1))
done < "$data/prompts/vicuna_bench_question.jsonl"
{ printf '\x00\x01\x00You are kind.\x1e\x01'; cat "$data/reference/mistral-common/no_tools__text_v1.txt"; } | seed chat_template

# jinja: every shared chat template, and the hostile shapes of issue 34 (nesting
# without end, quadratic filters, values priced by their printed size, a
# namespace holding itself, a huge format index, many statements on one line).
for f in "$data"/chat_templates/*.jinja "$data"/reference/mistral-common/*.jinja; do
  [ -f "$f" ] && seed jinja < "$f"
done
printf '%s' "{% set ns = namespace(x=[]) %}{% for i in range(200000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}" | seed jinja
printf '%s' "{% set ns = namespace(h=none) %}{% for i in range(100000) %}{% set ns.h = namespace(next=ns.h) %}{% endfor %}{{ ns.h }}" | seed jinja
printf '%s' "{{ range(1000000)|unique|list|length }}{% set a = range(100000) %}{{ a == a }}{{ [a, a]|sort }}" | seed jinja
printf '%s' "{% set L = [0] * 1000000 %}{{ [L] * 300 }}" | seed jinja
printf '%s' "{% set a = [1] * 1000 %}{% set b = [a] * 1000 %}{{ ([b] * 1000) | tojson(indent=2) }}" | seed jinja
printf '%s' "{% set ns = namespace() %}{% set ns.me = ns %}{% set ns.s = 'x' * 1000000 %}{{ ns }}" | seed jinja
printf '%s' "{{ '{99999999999999999999999}'.format(1) }}{{ '{0}{1}'.format('a' * 100000, 'b') * 100 }}" | seed jinja
for i in $(seq 400); do printf '{%% set x = %d %%}' "$i"; done | seed jinja

# tokenizer: llama.cpp's tokenizer test strings, Mistral's reference text, real prompts.
for f in "$data"/reference/llama-cpp-vocab/*.inp "$data"/reference/mistral-common/*.txt; do seed tokenizer < "$f"; done
head -n 20 "$data/prompts/mt_bench_question.jsonl" | while IFS= read -r line; do printf '%s' "$line" | seed tokenizer; done
printf '\xf0\x9f\x98\x80 caf\xc3\xa9 \xe2\x80\x8b\t\n\r\x00\xff\xfe <s></s>[INST]' | seed tokenizer

# hf_tokenizer: small tokenizer.json documents of each kind (the real ones are
# megabytes, past -max_len): byte-level BPE with added tokens, SentencePiece-
# flavoured BPE with byte fallback, normalizers and split pre-tokenizers.
echo '{"model":{"type":"BPE","vocab":{"a":0,"b":1,"\u0120":2,"ab":3,"\u0120a":4},"merges":["a b",["\u0120","a"]]},"added_tokens":[{"id":5,"content":"<|end|>","special":true},{"id":6,"content":"<t>","rstrip":true}],"pre_tokenizer":{"type":"ByteLevel","add_prefix_space":false},"decoder":{"type":"ByteLevel"}}' | seed hf_tokenizer
echo '{"model":{"type":"BPE","byte_fallback":true,"unk_token":"<unk>","vocab":{"<unk>":0,"<0x41>":1,"\u2581":2,"h":3,"i":4,"\u2581h":5,"\u2581hi":6},"merges":["\u2581 h","\u2581h i"]},"added_tokens":[{"id":0,"content":"<unk>","special":true}],"normalizer":{"type":"Sequence","normalizers":[{"type":"NFC"},{"type":"Prepend","prepend":"\u2581"},{"type":"Replace","pattern":{"String":" "},"content":"\u2581"}]},"pre_tokenizer":{"type":"Sequence","pretokenizers":[{"type":"Digits","individual_digits":true},{"type":"Split","pattern":{"Regex":"\\p{L}+"},"behavior":"Isolated","invert":false}]},"decoder":{"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"\u2581"},"content":" "},{"type":"ByteFallback"},{"type":"Fuse"},{"type":"Strip","content":" ","start":1,"stop":0}]}}' | seed hf_tokenizer
echo '{"model":{"type":"BPE","vocab":{"x":0,"\u2581":1,"\u2581x":2},"merges":["\u2581 x"]},"pre_tokenizer":{"type":"Metaspace","replacement":"\u2581","prepend_scheme":"first","split":true},"decoder":{"type":"Metaspace","replacement":"\u2581","prepend_scheme":"first"}}' | seed hf_tokenizer
# Amplifying documents (issue 34): stacked ByteLevel steps, a normalizer and a
# decoder Replace by a long string, an id far past the vocabulary.
bl='{"type":"ByteLevel","add_prefix_space":false}'
printf '{"model":{"type":"BPE","vocab":{"a":0,"b":1,"\\u0120":2},"merges":[]},"pre_tokenizer":{"type":"Sequence","pretokenizers":[%s]},"decoder":{"type":"ByteLevel"}}' \
  "$(printf "$bl,%.0s" $(seq 21))$bl" | seed hf_tokenizer
long="$(head -c 4000 /dev/zero | tr '\0' 'b')"
printf '{"model":{"type":"BPE","vocab":{"a":0,"b":1},"merges":[]},"normalizer":{"type":"Replace","pattern":{"String":"a"},"content":"%s"}}' "$long" | seed hf_tokenizer
printf '{"model":{"type":"BPE","vocab":{"a":0,"b":1},"merges":[]},"decoder":{"type":"Replace","pattern":{"String":"a"},"content":"%s"}}' "$long" | seed hf_tokenizer
echo '{"model":{"type":"BPE","vocab":{"a":0,"b":1},"merges":[]},"added_tokens":[{"id":16777215,"content":"<x>"}]}' | seed hf_tokenizer

# grammar: GBNF grammars (JSON, repetitions, classes, a token by its piece);
# json_schema: the ten client schemas of the structured-output tests.
printf '%s\n' 'root ::= object' 'object ::= "{" ws (string ":" ws value ("," ws string ":" ws value)*)? "}"' \
  'value ::= object | array | string | number | ("true" | "false" | "null") ws' \
  'array ::= "[" ws (value ("," ws value)*)? "]" ws' 'string ::= "\"" ([^"\\] | "\\" ["\\/bfnrt])* "\"" ws' \
  'number ::= "-"? [0-9]+ ("." [0-9]+)? ws' 'ws ::= [ \t\n]{0,20}' | seed grammar
printf '%s\n' 'root ::= (greeting | "no") "!"{1,3} # comment' 'greeting ::= [A-Z] [a-z\u00e9]* " " <[</s>]>?' | seed grammar
printf 'root ::= ("a" | "b"){2,5} [^\\x00-\\x1f]+ . "\\U0001F600"\n' | seed grammar
for f in "$root"/tests/data/json_schemas/[0-9]*.json; do seed json_schema < "$f"; done
echo '{"type":"object","properties":{"when":{"type":"string","format":"date-time"},"n":{"type":"integer","minimum":-5,"maximum":1234}},"required":["n"],"additionalProperties":{"type":"boolean"}}' | seed json_schema
echo '{"$defs":{"t":{"type":"object","properties":{"kids":{"type":"array","items":{"$ref":"#/$defs/t"},"maxItems":2}}}},"$ref":"#/$defs/t"}' | seed json_schema
echo '{"type":"string","pattern":"^(ab|c[0-9]{2,4})+$"}' | seed json_schema
echo "seeds: $(find "$out" -type f | wc -l) files in $out"
