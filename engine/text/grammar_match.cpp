// Matching under a grammar: stacks of grammar positions advanced over code
// points (bytes decoded as they come, a character split over tokens held
// until its last byte), the vocabulary trie (GrammarVocab), the per-context
// token classification a Grammar caches, and GrammarMatcher's masks.
//
// A mask is the union, over the live stacks, of what each stack's top
// context allows. A context is the top GRAMMAR_CONTEXT_FRAMES entries of a
// stack; the first time one is reached, the trie is walked once from a stack
// holding only those entries: a token is ACCEPTED when some path consumes
// all its bytes without popping below them, REJECTED when no path consumes it
// and none gets below them, UNCERTAIN otherwise (some path left the context
// before the token ended). Subtrees are cut as soon as the walk decides them
// whole. A mask then ORs the accepted bitsets and checks only the uncertain
// tokens against the real stacks. The parser is grammar.cpp's.
#include <algorithm>
#include <cstring>
#include <limits>

#include "base/utf8.h"
#include "engine/text/grammar_impl.h"
#include "engine/text/tokenizer.h"

using namespace grammar_detail;

namespace grammar_detail {

void CharClass::finish() {
    std::sort(ranges.begin(), ranges.end());
    std::vector<std::pair<uint32_t, uint32_t>> merged;
    for (const auto& r : ranges) {
        if (!merged.empty() && r.first <= merged.back().second + 1) {
            merged.back().second = std::max(merged.back().second, r.second);
        } else {
            merged.push_back(r);
        }
    }
    ranges = std::move(merged);
    ascii[0] = ascii[1] = 0;
    for (uint32_t c = 0; c < 128; c++) {
        bool in = false;
        for (const auto& r : ranges) in = in || (c >= r.first && c <= r.second);
        if (in != negated) ascii[c / 64] |= uint64_t{1} << (c % 64);
    }
}

bool CharClass::matches(uint32_t cp) const {
    if (cp < 128) return (ascii[cp / 64] >> (cp % 64)) & 1;
    auto it = std::upper_bound(ranges.begin(), ranges.end(), cp,
                               [](uint32_t v, const std::pair<uint32_t, uint32_t>& r) { return v < r.first; });
    const bool in = it != ranges.begin() && cp <= std::prev(it)->second;
    return in != negated;
}

bool CharClass::matches_some(uint32_t lo, uint32_t hi) const {
    for (const auto& r : ranges) {
        if (negated) {
            if (r.first <= lo && hi <= r.second) return false;  // ranges are merged: one covers all or none does
        } else if (r.first <= hi && lo <= r.second) {
            return true;
        }
    }
    return negated;
}

size_t StackHash::operator()(const std::vector<uint32_t>& v) const {
    uint64_t h = 1469598103934665603ull;
    for (uint32_t x : v) h = (h ^ x) * 1099511628211ull;
    return static_cast<size_t>(h);
}

bool StackSet::find(std::span<const uint32_t> s, uint64_t h) const {
    auto same = [&](size_t i) {
        if (hashes_[i] != h) return false;
        const auto t = (*this)[i];
        return t.size() == s.size() && std::equal(t.begin(), t.end(), s.begin());
    };
    if (slots_.empty()) {
        for (size_t i = 0; i < hashes_.size(); i++) {
            if (same(i)) return true;
        }
        return false;
    }
    const size_t mask = slots_.size() - 1;
    for (size_t k = h & mask; slots_[k] != 0; k = (k + 1) & mask) {
        if (same(slots_[k] - 1)) return true;
    }
    return false;
}

void StackSet::index(size_t i) {
    const size_t mask = slots_.size() - 1;
    size_t k = hashes_[i] & mask;
    while (slots_[k] != 0) k = (k + 1) & mask;
    slots_[k] = static_cast<uint32_t>(i + 1);
}

void StackSet::add(std::span<const uint32_t> s) {
    constexpr size_t LINEAR = 16;  // sets this small are searched straight through
    uint64_t h = 1469598103934665603ull ^ s.size();
    for (uint32_t x : s) h = (h ^ x) * 1099511628211ull;
    if (find(s, h)) return;
    if (ends_.size() >= GRAMMAR_MAX_STACKS)
        throw GrammarError("grammar: more than " + std::to_string(GRAMMAR_MAX_STACKS) +
                       " parses alive at once (the grammar is too ambiguous)");
    data_.insert(data_.end(), s.begin(), s.end());
    ends_.push_back(static_cast<uint32_t>(data_.size()));
    hashes_.push_back(h);
    const size_t n = ends_.size();
    if (n < LINEAR) return;
    if (slots_.size() < 2 * n) {
        size_t size = 64;
        while (size < 4 * n) size *= 2;
        slots_.assign(size, 0);
        for (size_t i = 0; i < n; i++) index(i);
    } else {
        index(n - 1);
    }
}

void StackSet::append_key(std::string& key) const {
    key.append(reinterpret_cast<const char*>(ends_.data()), ends_.size() * sizeof(uint32_t));
    key.push_back('|');
    key.append(reinterpret_cast<const char*>(data_.data()), data_.size() * sizeof(uint32_t));
}

bool StackSet::contains_empty() const {
    for (size_t i = 0; i < size(); i++) {
        if ((*this)[i].empty()) return true;
    }
    return false;
}

}  // namespace grammar_detail

namespace {

// Adds to `out` every stack `start` leads to once rules are entered and
// finished alternatives left, down to a terminal on top (or nothing left).
// Iterative: left recursion is refused at parse time, so this ends; a step
// bound guards against grammars whose expansion is huge all the same.
void expand(const Grammar::Impl& g, std::span<const uint32_t> start, StackSet& out, Scratch& sc) {
    constexpr size_t MAX_STEPS = 1 << 20;
    std::vector<uint32_t>& work = sc.work;
    std::vector<uint32_t>& ends = sc.work_ends;
    std::vector<uint32_t>& cur = sc.cur;
    work.assign(start.begin(), start.end());
    ends.assign(1, static_cast<uint32_t>(work.size()));
    size_t steps = 0;
    while (!ends.empty()) {
        ends.pop_back();
        const uint32_t b = ends.empty() ? 0 : ends.back();
        cur.assign(work.begin() + b, work.end());
        work.resize(b);
        while (true) {
            if (++steps > MAX_STEPS) throw GrammarError("grammar: expansion too large (the grammar is too ambiguous)");
            if (++sc.steps > sc.max_steps)
                throw GrammarError("grammar: the allowed tokens take more than " + std::to_string(sc.max_steps) +
                               " expansion steps to work out (the grammar or pattern is too ambiguous)");
            if (cur.empty()) {
                out.add(cur);
                break;
            }
            const uint32_t pos = cur.back();
            const Elem e = g.elems[pos];
            if (e.type == ElemType::END) {
                cur.pop_back();
            } else if (e.type == ElemType::RULE) {
                cur.pop_back();
                if (g.elems[pos + 1].type != ElemType::END) cur.push_back(pos + 1);  // a tail call keeps no frame
                const auto& alts = g.rules[e.value].alts;
                for (size_t i = 1; i < alts.size(); i++) {
                    work.insert(work.end(), cur.begin(), cur.end());
                    work.push_back(alts[i]);
                    ends.push_back(static_cast<uint32_t>(work.size()));
                }
                cur.push_back(alts[0]);
            } else {
                out.add(cur);
                break;
            }
        }
    }
}

// Moves every stack of `in` whose top matches `cp` past it into `out`.
// Empty stacks (a complete parse, or the bottom of a context) match nothing.
void advance_char(const Grammar::Impl& g, const StackSet& in, uint32_t cp, StackSet& out, Scratch& sc) {
    std::vector<uint32_t>& moved = sc.moved;
    for (size_t i = 0; i < in.size(); i++) {
        const auto s = in[i];
        if (s.empty()) continue;
        const Elem e = g.elems[s.back()];
        if (e.type != ElemType::CHARS || !g.classes[e.value].matches(cp)) continue;
        moved.assign(s.begin(), s.end());
        moved.back()++;
        expand(g, moved, out, sc);
    }
}

// Keeps the stacks of `in` whose top can match some code point in [lo, hi].
void filter_partial(const Grammar::Impl& g, const StackSet& in, uint32_t lo, uint32_t hi, StackSet& out) {
    for (size_t i = 0; i < in.size(); i++) {
        const auto s = in[i];
        if (s.empty()) continue;
        const Elem e = g.elems[s.back()];
        if (e.type == ElemType::CHARS && g.classes[e.value].matches_some(lo, hi)) out.add(s);
    }
}

// One byte from state (`in`, u) into `out`; u advances. False when no stack
// survives. Empty stacks in `in` do not carry over.
bool advance_byte(const Grammar::Impl& g, const StackSet& in, Utf8State& u, uint8_t byte, StackSet& out, Scratch& sc) {
    out.clear();
    const Utf8Step st = utf8_feed(u, byte);
    if (st == Utf8Step::INVALID) return false;
    if (st == Utf8Step::COMPLETE) {
        advance_char(g, in, u.cp, out, sc);
    } else {
        filter_partial(g, in, u.lo, u.hi, out);
    }
    return !out.empty();
}

// Whether `bytes` can follow from (`stacks`, u); on success `stacks` and
// `u` hold the state after them.
bool advance_bytes(const Grammar::Impl& g, StackSet& stacks, Utf8State& u, std::string_view bytes, Scratch& sc) {
    StackSet* from = &stacks;
    StackSet* to = &sc.a;
    Utf8State v = u;
    for (char c : bytes) {
        if (!advance_byte(g, *from, v, static_cast<uint8_t>(c), *to, sc)) return false;
        std::swap(from, to);
        if (to == &stacks) to = &sc.b;
    }
    if (from != &stacks) std::swap(stacks, *from);
    u = v;
    return true;
}

void set_range(std::vector<uint64_t>& bits, uint32_t b, uint32_t e) {
    for (uint32_t i = b; i < e; i++) bits[i / 64] |= uint64_t{1} << (i % 64);
}

void add_range(std::vector<std::pair<uint32_t, uint32_t>>& ranges, uint32_t b, uint32_t e) {
    if (b == e) return;
    if (!ranges.empty() && ranges.back().second == b) {
        ranges.back().second = e;
    } else {
        ranges.push_back({b, e});
    }
}

// The distinct parse states one trie walk meets (most nodes of a permissive
// context lead back to the same few), with their transitions on a byte, so
// each state advances over each byte once.
class WalkStates {
public:
    static constexpr uint32_t DEAD = UINT32_MAX;
    WalkStates() { sc_.max_steps = GRAMMAR_MAX_WALK_STEPS; }
    struct State {
        StackSet stacks;
        Utf8State u;
        bool has_empty;   // a parse finished (or left the context) at a character's end
        bool only_empty;  // nothing else
    };

    uint32_t intern(const StackSet& stacks, Utf8State u) {
        key_.clear();
        stacks.append_key(key_);
        const uint32_t fields[4] = {u.cp, u.need, u.lo, u.hi};
        key_.append(reinterpret_cast<const char*>(fields), sizeof(fields));
        auto [it, added] = ids_.emplace(key_, static_cast<uint32_t>(states_.size()));
        if (added) {
            const bool has_empty = u.need == 0 && stacks.contains_empty();
            states_.push_back({stacks, u, has_empty, has_empty && stacks.size() == 1});
        }
        return it->second;
    }
    const State& operator[](uint32_t id) const { return states_[id]; }

    uint32_t next(const Grammar::Impl& g, uint32_t from, uint8_t byte) {
        // The first states get a table of their 256 transitions; the rest
        // (a walk through many distinct states) a hash map.
        const bool tabled = from < TABLED;
        if (tabled) {
            if (tables_.size() < (size_t{from} + 1) * 256) tables_.resize((size_t{from} + 1) * 256, UNKNOWN);
            const uint32_t known = tables_[size_t{from} * 256 + byte];
            if (known != UNKNOWN) return known;
        } else {
            auto it = next_.find((uint64_t{from} << 8) | byte);
            if (it != next_.end()) return it->second;
        }
        Utf8State u = states_[from].u;
        uint32_t to = DEAD;
        if (advance_byte(g, states_[from].stacks, u, byte, tmp_, sc_)) to = intern(tmp_, u);
        if (tabled) {
            tables_[size_t{from} * 256 + byte] = to;
        } else {
            next_.emplace((uint64_t{from} << 8) | byte, to);
        }
        return to;
    }

private:
    static constexpr uint32_t UNKNOWN = UINT32_MAX - 1;
    static constexpr uint32_t TABLED = 1024;
    std::vector<State> states_;
    std::unordered_map<std::string, uint32_t> ids_;
    std::vector<uint32_t> tables_;  // [state][byte] for states below TABLED
    std::unordered_map<uint64_t, uint32_t> next_;
    std::string key_;
    StackSet tmp_;
    Scratch sc_;
};

// Walks the trie from (`start`, u0) and classifies every token. `context`:
// the stacks are a context's top entries, and an empty stack means the walk
// got below them (the tokens that continue past that point are UNCERTAIN);
// otherwise they are whole stacks and an empty one is a finished parse.
void walk_trie(const Grammar::Impl& g, const StackSet& start, Utf8State u0, bool context, Classification& out) {
    const GrammarVocab::Impl& v = g.vocab->impl();
    out.accepted.assign(v.words(), 0);
    out.uncertain.clear();
    struct Level {
        uint32_t state;
        bool beyond;  // some path got below the context before this node's byte
    };
    WalkStates states;
    std::vector<Level> levels{{states.intern(start, u0), false}};
    const auto& nodes = v.nodes;
    uint32_t i = 1;
    while (i < nodes.size()) {
        const TrieNode& n = nodes[i];
        if (levels.size() <= n.depth) levels.resize(n.depth + 1);
        const Level parent = levels[n.depth - 1];
        Level& cur = levels[n.depth];
        // A path that left the context cannot be followed past the character it ended.
        cur.beyond = parent.beyond || (context && states[parent.state].has_empty);
        cur.state = states.next(g, parent.state, n.byte);
        if (cur.state == WalkStates::DEAD) {
            if (cur.beyond) add_range(out.uncertain, n.tok_begin, n.tok_end);
            i = n.subtree_end;
            continue;
        }
        set_range(out.accepted, n.tok_begin, n.tok_here_end);
        if (context && states[cur.state].only_empty) {
            // Only paths below the context go on: the rest of the subtree is theirs.
            add_range(out.uncertain, n.tok_here_end, n.tok_end);
            i = n.subtree_end;
            continue;
        }
        i++;  // the children decide their own tokens
    }
}

}  // namespace

std::shared_ptr<const Classification> Grammar::Impl::classify(std::span<const uint32_t> stack) const {
    // A stack no deeper than a context is classified whole (nothing is
    // uncertain); its key starts with a marker no position equals.
    const bool whole = stack.size() <= GRAMMAR_CONTEXT_FRAMES;
    const auto context = whole ? stack : stack.subspan(stack.size() - GRAMMAR_CONTEXT_FRAMES);
    std::vector<uint32_t> key;
    if (whole) key.push_back(UINT32_MAX);
    key.insert(key.end(), context.begin(), context.end());
    std::lock_guard<std::mutex> lock(cache_mutex);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
    StackSet start;
    start.add(context);
    auto c = std::make_shared<Classification>();
    walk_trie(*this, start, Utf8State{}, !whole, *c);
    if (cache.size() >= GRAMMAR_MAX_CONTEXTS) cache.clear();
    cache.emplace(std::move(key), c);
    return c;
}

GrammarVocab::GrammarVocab(const Tokenizer& tokenizer) : impl_(std::make_unique<Impl>()) {
    Impl& v = *impl_;
    v.tokenizer = &tokenizer;
    v.n_vocab = tokenizer.vocab_size();
    v.bytes.resize(static_cast<size_t>(v.n_vocab));
    v.strips_first.assign(static_cast<size_t>(v.n_vocab), 0);
    for (int id = 0; id < v.n_vocab; id++) {
        if (tokenizer.is_unknown(id) || tokenizer.is_control(id)) {
            v.no_bytes.push_back(id);
            continue;
        }
        v.bytes[id] = tokenizer.token_bytes(id);
        if (!tokenizer.is_byte(id) && !v.bytes[id].empty() && v.bytes[id][0] == ' ') {
            Detokenizer d(tokenizer, true);
            v.strips_first[id] = d.push(id) == std::string_view(v.bytes[id]).substr(1);
        }
        (v.bytes[id].empty() ? v.no_bytes : v.sorted_ids).push_back(id);
    }
    std::stable_sort(v.sorted_ids.begin(), v.sorted_ids.end(), [&](int a, int b) { return v.bytes[a] < v.bytes[b]; });
    // Build the trie in preorder from the sorted strings: the path holds the
    // nodes of the previous token's bytes.
    v.nodes.push_back({0, 0, 0, 0, 0, 0});
    std::vector<uint32_t> path{0};
    std::string_view prev;
    const auto n_tok = static_cast<uint32_t>(v.sorted_ids.size());
    for (uint32_t t = 0; t < n_tok; t++) {
        const std::string_view s = v.bytes[v.sorted_ids[t]];
        size_t lcp = 0;
        while (lcp < s.size() && lcp < prev.size() && s[lcp] == prev[lcp]) lcp++;
        while (path.size() - 1 > lcp) {
            TrieNode& n = v.nodes[path.back()];
            n.subtree_end = static_cast<uint32_t>(v.nodes.size());
            n.tok_end = t;
            path.pop_back();
        }
        for (size_t d = lcp; d < s.size(); d++) {
            path.push_back(static_cast<uint32_t>(v.nodes.size()));
            v.nodes.push_back({0, t, t, 0, static_cast<uint32_t>(d + 1), static_cast<uint8_t>(s[d])});
        }
        v.nodes[path.back()].tok_here_end = t + 1;
        prev = s;
    }
    while (!path.empty()) {
        TrieNode& n = v.nodes[path.back()];
        n.subtree_end = static_cast<uint32_t>(v.nodes.size());
        n.tok_end = n_tok;
        path.pop_back();
    }
}

GrammarVocab::~GrammarVocab() = default;

const Tokenizer& GrammarVocab::tokenizer() const {
    return *impl_->tokenizer;
}

int GrammarVocab::vocab_size() const {
    return impl_->n_vocab;
}

struct GrammarMatcher::State {
    std::shared_ptr<const Grammar> grammar;
    const Grammar::Impl& g;
    const GrammarVocab::Impl& v;
    std::vector<int> end_tokens;
    bool strip_pending;  // the next token with bytes is the reply's first
    StackSet stacks;
    Utf8State u;
    mutable Scratch sc;
    std::vector<uint64_t> bits;

    State(std::shared_ptr<const Grammar> gr, std::span<const int> ends, bool strip)
        : grammar(std::move(gr)),
          g(grammar->impl()),
          v(grammar->vocab().impl()),
          end_tokens(ends.begin(), ends.end()),
          strip_pending(strip) {
        for (const Elem& e : g.elems) {
            if (e.type == ElemType::TOKEN && is_end(static_cast<int>(e.value)))
                throw GrammarError("grammar: <[" + v.tokenizer->id_to_piece(static_cast<int>(e.value)) +
                                   "]> ends the generation, so no text can match it (the reply ends by itself "
                                   "where the grammar is complete)");
        }
        for (uint32_t a : g.rules[g.root].alts) {
            const uint32_t s[1] = {a};
            expand(g, s, stacks, sc);
        }
    }

    bool is_end(int token) const { return std::find(end_tokens.begin(), end_tokens.end(), token) != end_tokens.end(); }
    bool can_end() const { return u.need == 0 && stacks.contains_empty(); }

    std::string_view bytes_of(int token) const {
        std::string_view b = v.bytes[static_cast<size_t>(token)];
        if (strip_pending && v.strips_first[static_cast<size_t>(token)]) b.remove_prefix(1);
        return b;
    }

    // The state after `token` (not an end token) into (out, out_u); false
    // when the grammar does not allow it.
    bool step(int token, StackSet& out, Utf8State& out_u) const {
        out.clear();
        out_u = u;
        const std::string_view bytes = bytes_of(token);
        if (!bytes.empty()) {
            out = stacks;
            if (!advance_bytes(g, out, out_u, bytes, sc)) out.clear();
            if (out_u.need != 0) return !out.empty();  // mid-character: no token element can join it
        }
        if (u.need != 0) return !out.empty();
        std::vector<uint32_t> moved;
        for (size_t i = 0; i < stacks.size(); i++) {
            const auto s = stacks[i];
            if (s.empty()) continue;
            const Elem e = g.elems[s.back()];
            if (e.type != ElemType::TOKEN || e.value != static_cast<uint32_t>(token)) continue;
            moved.assign(s.begin(), s.end());
            moved.back()++;
            expand(g, moved, out, sc);
        }
        return !out.empty();
    }

    bool allows(int token) const {
        if (token < 0 || token >= v.n_vocab) return false;
        if (is_end(token)) return can_end();
        StackSet out;
        Utf8State ou;
        return step(token, out, ou);
    }

    // bits (sorted order) of the tokens with bytes that may come next.
    void compute_bits() {
        // Mid-character, or with many parses alive (a large enum), one walk
        // of the trie from the real stacks costs less than a context each.
        if (u.need != 0 || stacks.size() > GRAMMAR_MAX_CONTEXT_STACKS) {
            Classification c;
            walk_trie(g, stacks, u, false, c);
            bits = std::move(c.accepted);
        } else {
            compute_bits_by_context();
        }
        if (strip_pending) {
            // The first token's bytes lose their space: those tokens are checked one by one.
            StackSet out;
            Utf8State ou;
            for (uint32_t t = 0; t < v.sorted_ids.size(); t++) {
                const int id = v.sorted_ids[t];
                if (!v.strips_first[static_cast<size_t>(id)]) continue;
                if (!bytes_of(id).empty() && step(id, out, ou)) {
                    bits[t / 64] |= uint64_t{1} << (t % 64);
                } else {
                    bits[t / 64] &= ~(uint64_t{1} << (t % 64));
                }
            }
        }
    }

    void compute_bits_by_context() {
        bits.assign(v.words(), 0);
        StackSet one;
        Utf8State ou;
        for (size_t i = 0; i < stacks.size(); i++) {
            const auto s = stacks[i];
            if (s.empty()) continue;
            if (g.elems[s.back()].type != ElemType::CHARS) continue;
            const auto cls = g.classify(s);
            const Classification& c = *cls;
            for (size_t w = 0; w < bits.size(); w++) bits[w] |= c.accepted[w];
            for (const auto& [b, e] : c.uncertain) {
                for (uint32_t t = b; t < e; t++) {
                    if ((bits[t / 64] >> (t % 64)) & 1) continue;
                    one.clear();
                    one.add(s);
                    ou = u;
                    if (advance_bytes(g, one, ou, v.bytes[static_cast<size_t>(v.sorted_ids[t])], sc))
                        bits[t / 64] |= uint64_t{1} << (t % 64);
                }
            }
        }
    }
};

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar, std::span<const int> end_tokens,
                               bool strip_first_space)
    : state_(std::make_unique<State>(std::move(grammar), end_tokens, strip_first_space)) {}

GrammarMatcher::~GrammarMatcher() = default;
GrammarMatcher::GrammarMatcher(GrammarMatcher&&) noexcept = default;

void GrammarMatcher::mask(float* logits) {
    State& st = *state_;
    st.compute_bits();
    const GrammarVocab::Impl& v = st.v;
    const float ninf = -std::numeric_limits<float>::infinity();
    // <[piece]> tokens on top of a stack and the end tokens are decided
    // apart: their logits are kept, everything the bitset does not allow is
    // masked (control tokens and <unk> always), then the kept ones go back.
    std::vector<std::pair<int, float>> kept;
    const bool can_end = st.can_end();
    for (int id : st.end_tokens) {
        if (can_end && id >= 0 && id < v.n_vocab) kept.push_back({id, logits[id]});
    }
    for (size_t i = 0; i < st.stacks.size() && st.u.need == 0; i++) {
        const auto s = st.stacks[i];
        if (s.empty() || st.g.elems[s.back()].type != ElemType::TOKEN) continue;
        const int id = static_cast<int>(st.g.elems[s.back()].value);
        if (!st.is_end(id)) kept.push_back({id, logits[id]});
    }
    bool any = !kept.empty();
    for (uint32_t t = 0; t < v.sorted_ids.size(); t++) {
        if ((st.bits[t / 64] >> (t % 64)) & 1) {
            any = any || !st.is_end(v.sorted_ids[t]);
        } else {
            logits[v.sorted_ids[t]] = ninf;
        }
    }
    for (int id : v.no_bytes) logits[id] = ninf;
    for (int id : st.end_tokens) {
        if (id >= 0 && id < v.n_vocab) logits[id] = ninf;
    }
    for (const auto& [id, value] : kept) logits[id] = value;
    if (!any) throw GrammarError("grammar: no token of the vocabulary can continue the text here");
}

void GrammarMatcher::accept(int token) {
    State& st = *state_;
    if (token < 0 || token >= st.v.n_vocab) throw MoeError("grammar: token " + std::to_string(token) + " out of range");
    if (st.is_end(token)) {
        if (!st.can_end())
            throw MoeError("grammar: end token " + std::to_string(token) + " before the text is complete");
        return;
    }
    StackSet out;
    Utf8State ou;
    if (!st.step(token, out, ou))
        throw MoeError("grammar: token " + std::to_string(token) + " ('" + st.v.tokenizer->id_to_piece(token) +
                       "') is not allowed here");
    st.stacks = std::move(out);
    st.u = ou;
    if (!st.v.bytes[static_cast<size_t>(token)].empty()) st.strip_pending = false;
}

bool GrammarMatcher::allows(int token) const {
    return state_->allows(token);
}

bool GrammarMatcher::can_end() const {
    return state_->can_end();
}

bool GrammarMatcher::must_end() const {
    const State& st = *state_;
    return st.u.need == 0 && st.stacks.size() == 1 && st.stacks[0].empty();
}
