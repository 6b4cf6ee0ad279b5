// JSON and JSON Schema as GBNF text for the grammar engine (grammar.h): the
// grammar of `response_format` json_object (json_object_gbnf), of a
// json_schema (json_schema_gbnf), and GbnfBuilder, which puts several
// schemas and hand-written rules into one grammar (a tool-call envelope whose
// arguments match one of several tools' parameter schemas). It only writes
// text; Grammar::parse checks and compiles it.
//
// What the grammars produce (always a subset of what the schema accepts, so
// every complete output validates):
// * JSON text with no whitespace before or after the value and at most 20
//   whitespace characters ([ \t\n\r]) between tokens, so a model cannot loop
//   on whitespace. Strings take every JSON escape except \u escapes of
//   surrogates (a character beyond the BMP is written as itself), so a
//   string's length in characters is its count of (escaped) characters.
//   Numbers follow RFC 8259 with at most 16 integer digits, 16 fraction
//   digits and 2 exponent digits; integers are written without fraction or
//   exponent.
// * The schema subset: `type` (a name or an array of names; absent, it is
//   inferred from the keywords present, or any value), `properties` (written
//   in the schema's order: every required property, each optional one
//   present or not), `required` (names not in `properties` are required with
//   the value `additionalProperties` allows), `additionalProperties` (false,
//   true or a schema; absent, an object with `properties` gets no others, as
//   OpenAI's strict mode asks, and one without gets any; other names have at
//   most 64 characters and no escapes, and never repeat a named property),
//   `items` (a schema, or false), `prefixItems`, `minItems`/`maxItems`,
//   `minLength`/`maxLength` (characters), `pattern` (below), `format` (date,
//   time, date-time, uuid), `enum`/`const` (written compactly, the type
//   filtering them), `anyOf`, `oneOf` (as anyOf: the grammar does not make
//   the branches exclusive, so a oneOf needs disjoint branches), `allOf` of
//   one schema, `$ref` to a JSON pointer within the schema ("#",
//   "#/$defs/NAME", "#/definitions/NAME"; recursion becomes recursive rules;
//   a reference that reaches itself before any '{' or '[' is refused, one
//   that can never end, such as a required self-reference inside an object,
//   is not detected), `minimum`/`maximum`/`exclusiveMinimum`/
//   `exclusiveMaximum` on integers (bounds past 16 digits are clamped to
//   them). Annotations (title, description, $comment,
//   examples, default, $schema, $id, deprecated, readOnly, writeOnly) are
//   ignored; a keyword that applies to none of the schema's types is
//   ignored, as JSON Schema says; every other keyword is refused by name.
//   $defs not referenced are not checked. Bounds past the grammar's limit of
//   1000 repetitions: a maximum is lowered to 1000, a minimum is refused.
// * `pattern` is a regular expression subset (ECMA-262, the dialect JSON
//   Schema names): literals, escapes (\t \n \r \f \v \0 \xHH \uHHHH and
//   escaped punctuation), classes ([...], [^...], ranges, \d \w \s and their
//   negations, inside classes too), `.`, groups ( ) and (?: ), alternation,
//   quantifiers * + ? {m} {m,} {m,n} (lazy forms too; at most 1000; another
//   '{' must be escaped, as Python would read "{,n}" as one), and the
//   anchors ^ and $ at the start and end of the pattern or of a top-level
//   alternative. As in JSON Schema a pattern matches anywhere in the string
//   (a search): an alternative without ^ may be preceded by any characters,
//   one without $ followed by any. \d \w \s are their ASCII forms (\s
//   also the Unicode spaces ECMA-262 and Python agree on) and \D \W \S and
//   negated classes holding them ASCII characters only, so the output
//   matches under ECMA-262 and Python's `re` alike. Lookarounds, back
//   references, word boundaries, named groups and \p{...} are refused.
//   Characters are written as JSON requires (", \ and control characters
//   escaped); `pattern` together with minLength/maxLength is refused.
//
// Every problem is a MoeError "WHERE/POINTER: what", e.g.
// "response_format.json_schema.schema/properties/when: unsupported keyword
// 'if'", where WHERE is the caller's name for the schema and POINTER the
// JSON pointer of the offending schema. Nesting deeper than 64 is refused.
#pragma once
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

// One grammar assembled from schemas and rules. Rule names are unique: a
// name already taken gets a suffix (-2, -3, ...), and the name is returned.
// Shared rules are added once, under fixed names: `ws` (whitespace between
// tokens), `json-value`, `json-object`, `json-array`, `json-string`,
// `json-char` (one character of a string), `json-number`, `json-integer`,
// `json-boolean`, `json-null`.
class GbnfBuilder {
public:
    // Adds the rules of `schema` ($ref resolved within it) and returns the
    // name of the rule its instances match. `where` names the schema in
    // errors; `name_prefix` starts the names of its rules.
    std::string add_schema(const nlohmann::ordered_json& schema, std::string_view where, std::string_view name_prefix);
    // Adds a shared rule (one of the names above, with the rules it uses)
    // and returns its name.
    std::string add_shared(std::string_view name);
    // Adds `name ::= body` and returns the name it got. A body already
    // added under another name returns that name instead.
    std::string add_rule(std::string_view name, const std::string& body);
    // The grammar text: `root ::= root_body`, then every rule added.
    std::string gbnf(std::string_view root_body) const;

    // A name no rule has yet, kept for a rule defined later (define_rule):
    // for rules that refer to themselves.
    std::string reserve_rule(std::string_view name);
    void define_rule(const std::string& reserved, const std::string& body);

private:
    std::vector<std::pair<std::string, std::string>> rules_;  // name, body; in the order added
    std::set<std::string> names_;
    std::map<std::string, std::string> by_body_;
};

// A GBNF string literal matching exactly `text` (quoted, escaped).
std::string gbnf_literal(std::string_view text);

// The grammar of `response_format` {"type": "json_object"}: one JSON object.
std::string json_object_gbnf();

// The grammar of a JSON Schema's instances (rule `root`).
std::string json_schema_gbnf(const nlohmann::ordered_json& schema, std::string_view where);
