// Constrained decoding: GBNF grammars parsed once against a vocabulary
// (Grammar), and the per-request state that masks a sampler's logits so the
// output always parses (GrammarMatcher).
//
// Matching is over the bytes each token decodes to (Tokenizer::token_bytes),
// decoded to code points as they come (a character split over tokens
// matches when its last byte arrives). A grammar may also name one token by
// its piece (<[TOOL_CALLS]>): control tokens decode to nothing, and a
// tool-call envelope starts with one.
//
// What depends only on the vocabulary (every token's bytes, in a trie) is
// GrammarVocab, built once per tokenizer. What depends on the grammar and
// the vocabulary (for each terminal position, the tokens it accepts or
// rejects whatever rules enclose it) is cached in the Grammar the first time
// a generation reaches the position, so a grammar used again (the JSON
// grammar, a schema a client repeats) masks at the price of its few
// context-dependent tokens.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/errors.h"

class Tokenizer;

// A grammar that parsed but cannot be matched: too ambiguous (too many
// parses alive, an expansion or a mask that takes too many steps), asking
// for an end token, or allowing no token of the vocabulary. Like a parse
// error it is the grammar's fault, so the request's (a 400 naming the
// field), not the server's. GrammarMatcher throws it from its constructor
// (the start), from mask() (any step) and accept().
class GrammarError : public MoeError {
public:
    using MoeError::MoeError;
};

// Per tokenizer: the tokens' bytes and their trie. Immutable once built;
// shared by every grammar parsed against it. The tokenizer must outlive it.
class GrammarVocab {
public:
    explicit GrammarVocab(const Tokenizer& tokenizer);
    ~GrammarVocab();
    GrammarVocab(const GrammarVocab&) = delete;
    GrammarVocab& operator=(const GrammarVocab&) = delete;

    const Tokenizer& tokenizer() const;
    int vocab_size() const;

    struct Impl;
    const Impl& impl() const { return *impl_; }

private:
    std::unique_ptr<Impl> impl_;
};

// A parsed, checked grammar. GBNF as llama.cpp's server takes it:
//   rules `name ::= alternatives` (names of letters, digits and '-'), the
//   start rule `root`; "literals" with escapes \n \r \t \\ \" \' \[ \]
//   \xHH \uHHHH \UHHHHHHHH; [character classes] with ranges and a leading
//   ^; . (any character); ( ) groups; | alternatives; postfix * + ? {m}
//   {m,} {m,n}; # comments to the end of the line; <[piece]> one token by
//   its piece.
// Bad input is a MoeError "SOURCE: line L, column C: what", e.g.
// "grammar: line 3, column 9: undefined rule 'valu'": syntax errors,
// undefined or duplicate rules, no `root`, left recursion, an unknown token
// piece, a repetition bound past 1000, more than 100000 elements.
class Grammar {
public:
    static std::shared_ptr<const Grammar> parse(std::string_view gbnf, std::shared_ptr<const GrammarVocab> vocab,
                                                std::string_view source = "grammar");
    ~Grammar();
    Grammar(const Grammar&) = delete;
    Grammar& operator=(const Grammar&) = delete;

    const std::string& text() const;
    const GrammarVocab& vocab() const;

    struct Impl;
    const Impl& impl() const { return *impl_; }

private:
    Grammar();
    std::unique_ptr<Impl> impl_;
};

// One generation under a grammar. Not thread-safe (one per request, on the
// engine thread); the grammar's position cache it fills is guarded inside.
class GrammarMatcher {
public:
    // end_tokens: the ids that end a generation (EOS and the model's other
    // end ids), allowed exactly when the text so far is a complete `root`;
    // a grammar naming one as a <[piece]> could never be matched
    // (GrammarError here, at the start).
    // strip_first_space: the reply's first token loses a leading space
    // (the Detokenizer's rule for a reply that is a text of its own), so the
    // grammar sees the text the user sees.
    GrammarMatcher(std::shared_ptr<const Grammar> grammar, std::span<const int> end_tokens, bool strip_first_space);
    ~GrammarMatcher();
    GrammarMatcher(GrammarMatcher&&) noexcept;

    // Sets the logit of every token the grammar does not allow next to
    // -infinity (logits: vocab_size floats). Throws GrammarError when it
    // allows none (a grammar no token sequence of this vocabulary can
    // continue) or when working the mask out is past the grammar's limits.
    void mask(float* logits);
    // Advances past `token`, which mask() allowed; MoeError otherwise.
    void accept(int token);
    // Whether `token` may come next (without advancing).
    bool allows(int token) const;
    // The text so far is a complete `root`.
    bool can_end() const;
    // Nothing but an end token may follow.
    bool must_end() const;

private:
    struct State;
    std::unique_ptr<State> state_;
};
