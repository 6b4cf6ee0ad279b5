// The inside of grammar.h, shared by the parser (grammar.cpp) and the
// matcher (grammar_match.cpp): the flattened grammar (elements, character
// classes, rules), the vocabulary trie, stacks of grammar positions and the
// per-context token classification cache. Nothing outside engine/text/grammar*
// includes it.
//
// A grammar is one array of elements. Each rule alternative is a run of
// elements closed by END; a position is an index into the array. A parse in
// progress is a stack of positions, bottom first: every entry below the top
// is where an enclosing alternative continues once the rule above it is
// done, and the top is the next element to match, always a terminal (a
// character class or a <[piece]> token) once the stack is expanded; an empty
// stack is a complete `root`. A rule reference at the end of an alternative
// leaves no continuation (a tail call), so repetitions, which the parser
// turns into right-recursive rules, never deepen the stack.
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/text/grammar.h"

namespace grammar_detail {

enum class ElemType : uint8_t {
    END,    // end of an alternative
    RULE,   // value: rule index
    CHARS,  // value: character class index
    TOKEN,  // value: token id (<[piece]>)
};

struct Elem {
    ElemType type;
    uint32_t value;
};

// A set of code points: sorted, merged ranges, maybe negated.
struct CharClass {
    std::vector<std::pair<uint32_t, uint32_t>> ranges;  // inclusive, sorted, disjoint, not adjacent
    bool negated = false;
    uint64_t ascii[2] = {0, 0};  // membership of code points 0..127, negation applied

    void finish();  // sorts and merges ranges, fills ascii
    bool matches(uint32_t cp) const;
    // Whether some code point in [lo, hi] matches (a character whose first
    // bytes have arrived).
    bool matches_some(uint32_t lo, uint32_t hi) const;
};

struct Rule {
    std::string name;            // generated rules: "parent-N"
    std::vector<uint32_t> alts;  // first position of each alternative
    size_t offset = 0;           // where it is defined (or its group starts) in the text
};

// Stacks stored back to back (no allocation once warm), deduplicated on add.
class StackSet {
public:
    size_t size() const { return ends_.size(); }
    bool empty() const { return ends_.empty(); }
    std::span<const uint32_t> operator[](size_t i) const {
        const uint32_t b = i == 0 ? 0 : ends_[i - 1];
        return {data_.data() + b, ends_[i] - b};
    }
    void clear() {
        data_.clear();
        ends_.clear();
        hashes_.clear();
        slots_.clear();
    }
    // Adds `s` unless already present; MoeError past GRAMMAR_MAX_STACKS.
    void add(std::span<const uint32_t> s);
    bool contains_empty() const;
    // Appends the set's contents (a key for maps of sets).
    void append_key(std::string& key) const;

private:
    std::vector<uint32_t> data_;
    std::vector<uint32_t> ends_;
    std::vector<uint64_t> hashes_;
    // Past a few stacks, an open-addressing index of the hashes: slot =
    // stack index + 1, 0 empty; at most half full.
    std::vector<uint32_t> slots_;
    bool find(std::span<const uint32_t> s, uint64_t h) const;
    void index(size_t i);
};

// Most parses alive at once (an ambiguous grammar); MoeError past it.
constexpr size_t GRAMMAR_MAX_STACKS = 4096;
// How many top stack entries a cached classification is computed from. The
// classification of a token only holds while its walk stays inside those
// entries; more entries make fewer tokens context-dependent (inside a JSON
// string three cover the string's own rules) at the cost of more contexts.
constexpr size_t GRAMMAR_CONTEXT_FRAMES = 3;
constexpr size_t GRAMMAR_MAX_CONTEXTS = 4096;
// Past this many live parses a mask walks the trie once from all of them
// rather than looking up (and on a first visit, walking) a context each.
constexpr size_t GRAMMAR_MAX_CONTEXT_STACKS = 64;

// Most expansion steps one walk of the vocabulary trie may take (a mask's
// tokens worked out, about 0.1 s here); MoeError past it. The tests' JSON
// schema, tool-call and grammar walks take at most 75k with Mistral's
// vocabulary; a pattern whose parses multiply at every character
// (`^(.*.....ab|c)+$`, found by fuzz_json_schema) takes 8-13 million per
// token and grows.
constexpr size_t GRAMMAR_MAX_WALK_STEPS = size_t(1) << 22;

// Buffers reused by expansion and walks.
struct Scratch {
    std::vector<uint32_t> work, work_ends;  // expansion's stacks to do, back to back
    std::vector<uint32_t> cur, moved;
    StackSet a, b;
    size_t steps = 0;             // expansion steps taken with this scratch
    size_t max_steps = SIZE_MAX;  // MoeError past it (a walk's GRAMMAR_MAX_WALK_STEPS)
};

// The vocabulary trie: nodes in depth-first preorder, so a node's subtree is
// the nodes up to subtree_end and its tokens one contiguous range of the
// sorted order.
struct TrieNode {
    uint32_t subtree_end;   // first node after the subtree
    uint32_t tok_begin;     // sorted-order range of the tokens under the node
    uint32_t tok_here_end;  // [tok_begin, tok_here_end): tokens whose bytes end here
    uint32_t tok_end;
    uint32_t depth;
    uint8_t byte;
};

// A classification of the trie's tokens (sorted order) from one context.
struct Classification {
    std::vector<uint64_t> accepted;                        // bitset
    std::vector<std::pair<uint32_t, uint32_t>> uncertain;  // ranges [b, e)
};

struct StackHash {
    size_t operator()(const std::vector<uint32_t>& v) const;
};

}  // namespace grammar_detail

struct GrammarVocab::Impl {
    const Tokenizer* tokenizer = nullptr;
    int n_vocab = 0;
    std::vector<std::string> bytes;               // per id: Tokenizer::token_bytes ("" for <unk>)
    std::vector<uint8_t> strips_first;            // per id: loses its leading space as a reply's first token
    std::vector<int> sorted_ids;                  // sorted order -> id, tokens with bytes only
    std::vector<int> no_bytes;                    // the other ids (control tokens, <unk>)
    std::vector<grammar_detail::TrieNode> nodes;  // [0] is the root
    size_t words() const { return (sorted_ids.size() + 63) / 64; }
};

struct Grammar::Impl {
    std::string text;
    std::shared_ptr<const GrammarVocab> vocab;
    std::vector<grammar_detail::Elem> elems;
    std::vector<grammar_detail::CharClass> classes;
    std::vector<grammar_detail::Rule> rules;
    uint32_t root = 0;

    // Stack contexts (the top GRAMMAR_CONTEXT_FRAMES entries, or a whole
    // stack no deeper) -> their classification, filled the first time a
    // generation reaches one.
    // At most GRAMMAR_MAX_CONTEXTS are kept (about 4 KB each at a 32k
    // vocabulary); past that the cache starts over.
    mutable std::mutex cache_mutex;
    mutable std::unordered_map<std::vector<uint32_t>, std::shared_ptr<const grammar_detail::Classification>,
                               grammar_detail::StackHash>
        cache;
    // The classification of a stack's context (computed and cached on first use).
    std::shared_ptr<const grammar_detail::Classification> classify(std::span<const uint32_t> stack) const;
};
