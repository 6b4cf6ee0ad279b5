// Tests of the Jinja interpreter (engine/text/jinja.*): every shared chat
// template (../shared/data/chat_templates/, Mistral v0.3's
// tokenizer_config.json, mistral-common's v1 templates) rendered with each
// conversation of tests/support/jinja_conversations.json (and the
// mistral-common sample conversations) must equal Python jinja2's rendering
// under Hugging Face's settings (tests/support/render_jinja_reference.py), or
// fail where jinja2 fails. Small templates exercise each piece of the language
// against jinja2 the same way, and each error and limit is checked on its own.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "alloc_count.h"
#include "base/errors.h"
#include "chat/jinja.h"
#include "chat/model_chat.h"
#include "engine/text/work_budget.h"
#include "test_support.h"

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

namespace {

fs::path tests_source_dir() {
    return fs::path(MOE_TESTS_SOURCE_DIR);
}

// Debian's python3 (python3-jinja2) when installed there, else the PATH's.
std::string python() {
    return fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
}

JinjaRenderOptions fixed_now_options() {
    JinjaRenderOptions options;
    std::tm tm{};
    tm.tm_year = 2026 - 1900;
    tm.tm_mon = 0;
    tm.tm_mday = 15;
    tm.tm_hour = 10;
    tm.tm_min = 30;
    std::time_t t = timegm(&tm);
    gmtime_r(&t, &tm);
    options.now = tm;
    return options;
}

struct Case {
    std::string name;
    JinjaChatInput input;
};

Case case_from_json(const ojson& c) {
    Case out;
    out.name = c.at("name").get<std::string>();
    out.input.messages = c.at("messages");
    out.input.tools = c.value("tools", ojson());
    out.input.add_generation_prompt = c.at("add_generation_prompt").get<bool>();
    out.input.bos_token = "<s>";
    out.input.eos_token = "</s>";
    out.input.extras = c.value("extras", ojson::object());
    return out;
}

// The cases file plus mistral-common's sample conversations (their tools,
// add_generation_prompt true), written to one file for the script.
fs::path write_cases(const fs::path& dir, std::vector<Case>& cases) {
    ojson all = ojson::parse(read_file(tests_source_dir() / "support" / "jinja_conversations.json"));
    fs::path samples = shared_data_dir() / "reference" / "mistral-common";
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(samples)) {
        if (e.path().filename().string().ends_with("__sample.json")) files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
        ojson s = ojson::parse(read_file(f));
        ojson c;
        c["name"] = "mistral_common_" + f.filename().string();
        c["messages"] = s.at("messages");
        c["tools"] = s.value("tools", ojson());
        c["add_generation_prompt"] = true;
        all["cases"].push_back(c);
    }
    for (const auto& c : all["cases"]) cases.push_back(case_from_json(c));
    fs::path path = dir / "cases.json";
    std::ofstream(path) << all.dump();
    return path;
}

// Runs the reference script: {template: {case: {ok, text|error}}}.
ojson reference_renders(const fs::path& dir, const fs::path& cases,
                        const std::vector<std::pair<std::string, fs::path>>& templates) {
    fs::path out = dir / "reference.json";
    std::vector<std::string> argv = {python(), (tests_source_dir() / "support" / "render_jinja_reference.py").string(),
                                     cases.string(), out.string()};
    for (const auto& [name, path] : templates) argv.push_back(name + "=" + path.string());
    CommandResult r = run_command(argv);
    INFO(
        "render_jinja_reference.py needs Python's jinja2 (Debian python3-jinja2; scripts/setup_test_tools.sh installs "
        "it): "
        << r.err);
    REQUIRE(r.exit_code == 0);
    return ojson::parse(read_file(out));
}

std::string template_source(const fs::path& path) {
    std::string text = read_file(path);
    if (path.extension() == ".json") return ojson::parse(text).at("chat_template").get<std::string>();
    return text;
}

// Renders every template with every case and compares with jinja2; returns
// the number of (template, case) pairs that agree.
size_t compare_with_jinja2(const std::vector<std::pair<std::string, fs::path>>& templates,
                           const std::vector<Case>& cases, const ojson& ref) {
    size_t agree = 0;
    JinjaRenderOptions options = fixed_now_options();
    for (const auto& [name, path] : templates) {
        JinjaTemplate tmpl(template_source(path), name);
        for (const auto& c : cases) {
            const ojson& want = ref.at(name).at(c.name);
            std::string error;
            std::string got;
            try {
                got = jinja_render_chat(tmpl, c.input, options);
            } catch (const MoeError& e) {
                error = e.what();
            }
            INFO("template " << name << ", conversation " << c.name);
            if (want.at("ok").get<bool>()) {
                INFO("moe-server error: " << error);
                CHECK(error.empty());
                CHECK(got == want.at("text").get<std::string>());
                agree += error.empty() && got == want.at("text").get<std::string>();
            } else {
                INFO("jinja2 raised " << want.at("error").get<std::string>() << "; moe-server rendered " << got);
                CHECK(!error.empty());
                CHECK(error.find('\n') == std::string::npos);
                agree += !error.empty();
            }
        }
    }
    return agree;
}

std::string render(const std::string& source, const JinjaDict& vars = {}, const JinjaRenderOptions& options = {}) {
    return JinjaTemplate(source, "test template").render(vars, options);
}

std::string render_error(const std::string& source, const JinjaRenderOptions& options = {}) {
    return moe_error_of([&] { render(source, {}, options); });
}

bool contains(const std::string& s, const std::string& part) {
    return s.find(part) != std::string::npos;
}

// The error of rendering `source` with the default limits, on a thread of
// its own, or "(hang)" when it runs for more than a minute.
std::string hostile_render_error(const std::string& source) {
    auto error = std::make_shared<std::string>("(no MoeError)");
    if (!finishes_within(60, [source, error] { *error = render_error(source); })) return "(hang)";
    return *error;
}

}  // namespace

TEST_CASE("every shared chat template renders as jinja2 renders it", "[jinja]") {
    fs::path data = shared_data_dir();
    std::vector<std::pair<std::string, fs::path>> templates;
    for (const auto& e : fs::directory_iterator(data / "chat_templates")) {
        if (e.path().extension() == ".jinja") templates.emplace_back(e.path().stem().string(), e.path());
    }
    std::sort(templates.begin(), templates.end());
    REQUIRE(templates.size() >= 12);
    templates.emplace_back("mistral-7b-instruct-v0.3",
                           data / "tokenizers" / "mistral-7b-instruct-v0.3" / "tokenizer_config.json");
    templates.emplace_back("mistral-common-v1", data / "reference" / "mistral-common" / "chat_template_v1.jinja");
    templates.emplace_back("mistral-common-v1-spm",
                           data / "reference" / "mistral-common" / "chat_template_v1_spm.jinja");
    // More templates to check the same way (a model's own, say): *.jinja in
    // the folder $MOE_JINJA_EXTRA_TEMPLATES.
    if (const char* extra = std::getenv("MOE_JINJA_EXTRA_TEMPLATES")) {
        for (const auto& e : fs::directory_iterator(extra)) {
            if (e.path().extension() == ".jinja") templates.emplace_back("extra-" + e.path().stem().string(), e.path());
        }
    }

    fs::path dir = test_temp_dir("jinja_templates");
    std::vector<Case> cases;
    fs::path cases_path = write_cases(dir, cases);
    REQUIRE(cases.size() >= 10);
    ojson ref = reference_renders(dir, cases_path, templates);

    size_t agree = compare_with_jinja2(templates, cases, ref);
    size_t rendered = 0;
    for (const auto& [name, path] : templates) {
        for (const auto& c : cases) rendered += ref.at(name).at(c.name).at("ok").get<bool>();
    }
    WARN(agree << " of " << templates.size() * cases.size() << " template x conversation pairs agree with jinja2 ("
               << rendered << " rendered, the rest raise in both)");
    CHECK(agree == templates.size() * cases.size());
    // Most pairs must render (not only fail alike).
    CHECK(rendered * 2 > templates.size() * cases.size());
}

TEST_CASE("jinja language pieces render as jinja2 renders them", "[jinja]") {
    // Each snippet is rendered by both with one conversation (the variables
    // messages, tools, bos_token ... are there to use).
    const std::vector<std::string> snippets = {
        // literals, printing (Python's str and repr)
        "{{ 1 }} {{ -2 }} {{ 1.0 }} {{ 1.5e20 }} {{ 0.1 + 0.2 }} {{ 1e-7 }} {{ 123456789012345680.0 }} {{ true }} {{ "
        "none }} {{ None }} {{ False }}",
        "{{ 'a\\'b' }} {{ \"q\\\"d\" }} {{ 'tab\\tnl\\nuni\\u00e9\\x41' }} {{ 'adj' 'acent' }}",
        "{{ [1, 'two', none, true, 2.5, [3]] }} {{ {'k': 'v', 'n': {'x': [1]}} }} {{ (1,) }} {{ (1, 'a') }} {{ "
        "['it\\'s', \"q\\\"\"] }}",
        // arithmetic and operators
        "{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % -3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 7 / 2 }} {{ 6 / 3 }} {{ "
        "2 ** -1 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }}",
        "{{ 'ab' ~ 1 ~ none ~ undefined_thing }} {{ 'ab' * 3 }} {{ [1] * 2 }} {{ [1, 2] + [3] }} {{ 'x' + 'y' }} {{ 1 "
        "+ 1.5 }} {{ true + 1 }}",
        "{{ 1 < 2 }} {{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 == 1.0 }} {{ 1 == true }} {{ 'a' != 'a' }} {{ 2 >= 2 "
        "}} {{ (1, 2) == [1, 2] }}",
        "{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1, 2] }} {{ 'z' not in 'abc' }}",
        "{{ 1 and 'x' }} {{ 0 and 'x' }} {{ '' or 'dflt' }} {{ not 0 }} {{ not not 'a' }} {{ 'yes' if 1 else 'no' }} "
        "{{ 'yes' if 0 }}|",
        "{{ -3 | abs }} {{ - 3 ** 2 }} {{ (-3) ** 2 }} {{ 10 - 2 - 3 }} {{ 2 ** 3 ** 2 }}",
        // subscripts, attributes, slicing
        "{{ 'hello'[1] }} {{ 'hello'[-1] }} {{ 'hello'[1:3] }} {{ 'hello'[::-1] }} {{ 'hello'[::2] }} {{ "
        "[1,2,3,4][-2:] }} {{ [1,2,3,4][:-1] }} {{ 'héllo'[1:3] }} {{ [1,2,3][5] }}|",
        "{{ messages[0].role }} {{ messages[0]['content'] }} {{ messages[-1].role }} {{ messages[0].missing }}|{{ "
        "messages[0].missing is defined }} {{ (messages | length) - 1 }}",
        "{% set d = {'a': 1, 'b': 2} %}{{ d.a }} {{ d['b'] }} {{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 5) }} {{ "
        "d.keys() | list }} {{ d.values() | list }} {{ d.items() | list }}",
        // statements
        "{% for m in messages %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.revindex }}/{{ loop.revindex0 }}/{{ "
        "loop.first }}/{{ loop.last }}/{{ loop.length }}:{{ m.role }};{% endfor %}",
        "{% for x in [1, 2, 3, 4, 5] if x is odd %}{{ x }}{{ ',' if not loop.last }}{% else %}none{% endfor %}|{% for "
        "x in [] %}x{% else %}empty{% endfor %}",
        "{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }} {% endfor %}{% for a, b in [[1, 2], (3, 4)] %}{{ a "
        "+ b }} {% endfor %}",
        "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x "
        "}}{% endfor %} {{ range(3) | list }} {{ range(1, 10, 3) | list }} {{ range(5, 0, -2) | list }}",
        "{% for x in 'abc' %}{{ loop.previtem | default('^') }}{{ x }}{{ loop.nextitem | default('$') }} {% endfor "
        "%}{% for x in [1,2,3] %}{{ loop.cycle('a', 'b') }}{% endfor %}",
        "{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}{% if true %}{% set x = 3 %}{% "
        "endif %}{{ x }}",
        "{% set ns = namespace(count=0, items=[]) %}{% for i in range(3) %}{% set ns.count = ns.count + i %}{% set "
        "ns.items = ns.items + [i] %}{% endfor %}{{ ns.count }} {{ ns.items }}",
        "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = (1, 2) %}{{ t }}{% set block %}inside {{ a }}{% endset %}[{{ "
        "block }}]",
        "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Bob') }} {{ greet('Al', "
        "punct='?') }} {{ greet(name='Cy') }}",
        "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ "
        "messages[0].role }}{% endcall %}",
        "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * (fact(n - 1) | int) }}{% endif %}{% endmacro %}{{ fact(5) "
        "}}",
        // whitespace control, trim_blocks, lstrip_blocks
        "a\n  {% if true %}\n    b\n  {% endif %}\nc\n  {{ 'd' }}  \n{# comment #}\ne  {%- if true -%}  f  {%- endif "
        "-%}  g\n{%+ if true %}h{% endif %}\n{{- ' i ' -}}\n  j",
        "line1\n    {#- strip -#}\n  line2 {% for x in [1, 2] %}\n  item{{ x }}\n{% endfor %}\nend\n",
        // filters
        "{{ '  pad  ' | trim }}|{{ 'xxhixx' | trim('x') }}|{{ 'Hello World' | upper }} {{ 'Hello' | lower }} {{ 'hello "
        "wORLD' | capitalize }} {{ 'hello wORLD-foo (bar' | title }}",
        "{{ [1, 2, 3] | join(', ') }} {{ ['a', 'b'] | join }} {{ messages | map(attribute='role') | join(',') }} {{ "
        "[1, 2, 3] | first }} {{ [1, 2, 3] | last }} {{ 'abc' | first }} {{ [] | first }}|",
        "{{ 'abc' | length }} {{ [1, 2] | count }} {{ {'a': 1} | length }} {{ 'héllo' | length }} {{ undefined_thing | "
        "length }} {{ 'ab' | list }} {{ 42 | string }} {{ [1] | string }}",
        "{{ '42' | int }} {{ '4.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ 3.9 | int }} {{ '2.5' | float }} {{ "
        "'x' | float }} {{ 2.567 | round(2) }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 2.1 | round(0, 'ceil') }}",
        "{{ 'a-b-c' | replace('-', '+') }} {{ 'aaa' | replace('a', 'b', 2) }} {{ undefined_thing | default('dflt') }} "
        "{{ '' | default('empty', true) }} {{ none | d('n') }} {{ 0 | default(5) }}",
        "{{ messages | selectattr('role', 'equalto', 'user') | list | length }} {{ messages | rejectattr('role', 'eq', "
        "'user') | map(attribute='role') | list }} {{ [0, 1, 2, 3] | select('odd') | list }} {{ [0, 1, None, 2] | "
        "select | list }} {{ [1, 2, 3] | reject('even') | list }}",
        "{{ ['b', 'A', 'a', 'B', 'c'] | unique | list }} {{ {'b': 1, 'a': 2, 'C': 3} | dictsort }} {{ [3, 1, 2] | sort "
        "}} {{ [1, 2, 3] | sum }} {{ [1.5, 2] | sum }} {{ [1, 2, 3] | reverse | list }} {{ 'abc' | reverse }}",
        "{{ 'line1\\nline2\\n\\nline4' | indent(2) }}|{{ 'a\\nb' | indent(4, true) }}|{{ 'a\\n\\nb' | indent('> ', "
        "blank=true) }}|{{ 'x y  z' | wordcount }} {{ '<a href=\"x\">&</a>' | escape }} {{ 'safe' | safe }}",
        "{{ {'name': 'f', 'args': {'x': 1, 'y': [1, 2.5, none, true]}, 'u': 'é\"\\n'} | tojson }}|{{ [1, {'a': []}, "
        "{}] | tojson(indent=2) }}|{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}|{{ 'x' | tojson }} {{ 1.0 | tojson "
        "}}|{{ {'a': [1, 2]} | tojson(separators=(',', ':')) }}|{{ {'a': [1]} | tojson(indent=1, separators=(', ', ' = "
        "')) }}"
        "|{{ {'é': 'ü😀\\x7f\\x1f', 'a': 1} | tojson(ensure_ascii=true) }}|{{ 'ü\\x7f' | tojson(ensure_ascii=false) }}",
        "{{ {'a': 1} | items | list }} {{ messages[0] | dictsort | first }} {{ [[1, 'x'], [2, 'y']] | map('first') | "
        "list }} {{ ['a', 'b'] | map('upper') | join }} {{ [-1, 2] | map('abs') | list }}",
        // tests
        "{{ none is none }} {{ 1 is number }} {{ true is number }} {{ 1 is integer }} {{ true is integer }} {{ 1.0 is "
        "float }} {{ 'a' is string }} {{ {} is mapping }} {{ [] is iterable }} {{ 'a' is iterable }} {{ [] is sequence "
        "}} {{ true is boolean }}",
        "{{ x is defined }} {{ x is undefined }} {{ messages is defined }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is "
        "divisibleby 3 }} {{ 9 is divisibleby(2) }} {{ 'a' is in 'cat' }} {{ 2 is in [1, 2] }} {{ 'x' is equalto 'x' "
        "}} {{ 1 is eq 2 }}",
        "{{ true is true }} {{ 1 is true }} {{ false is false }} {{ range is callable }} {{ 'abc' is lower }} {{ 'ABC' "
        "is upper }} {{ none is not none }} {{ 'x' is not string }} {{ 1 is sameas 1 }} {{ 3 is gt 2 }} {{ 3 is lt 2 "
        "}} {{ 'upper' is filter }}",
        // string methods
        "{{ 'hello'.startswith('he') }} {{ 'hello'.endswith(('x', 'lo')) }} {{ '  x  '.strip() }}|{{ '  x  '.lstrip() "
        "}}|{{ '  x  '.rstrip() }}|{{ 'xxaxx'.strip('x') }} {{ '\\n\\nthink\\n'.lstrip('\\n') }}",
        "{{ 'a,b,,c'.split(',') }} {{ ' a  b\\tc '.split() }} {{ 'a b c'.split(' ', 1) }} {{ "
        "'a<x>b<x>c'.split('<x>')[-1] }} {{ 'x'.split('y') }} {{ 'a b  c'.split(none, 1) }}",
        "{{ 'aXbXc'.replace('X', '-') }} {{ 'Hello'.upper() }} {{ 'Hello'.lower() }} {{ 'hello world'.title() }} {{ "
        "'hELLO'.capitalize() }} {{ 'hello'.find('l') }} {{ 'hello'.find('z') }} {{ 'héllo'.find('l') }} {{ "
        "'-'.join(['a', 'b']) }} {{ 'a{}b{}'.format(1, 'x') }} {{ 'hello'.count('l') }}",
        // scoping and Python details
        "{% for i in [1, 2] %}{% if i == 1 %}{% set x = 'a' %}{% endif %}[{{ x }}]{% endfor %}{% macro m() %}{{ y }}{% "
        "endmacro %}{% set y = 1 %}{{ m() }}"
        "{% set z = 5 %}{% macro n() %}{{ z }}{% endmacro %}{% for z in [1] %}{{ n() }}{% endfor %}{% for a in [1] "
        "%}{% for b in [2] %}{{ loop.index }}{{ a }}{% endfor %}{{ loop.length }}{% endfor %}",
        "{{ '%s-%d' % ('a', 3) }} {{ '%05.1f|%-4s|%4d|%x|%%|%r' % (3.14159, 'ab', 7, -255, 'q') }} {{ 'one %s' % 'arg' "
        "}} {{ [1, 2].append }}|{{ (1, 2) | tojson }} {{ 'a' ~ [1] }} {{ [3, 1] | max }} {{ [3, 1] | min }}",
        "{% set a = 'out' %}{% with a = 1, b = a %}{{ a }}{{ b }}{% endwith %}{{ a }}{% for m in messages %}{% "
        "generation %}<{{ m.role }}>{% endgeneration %}{% endfor %}",
        "a\n  {% raw %}{{ not parsed }} {% if %}\n  {%- endraw %}\nb {%- raw -%}  x  {% endraw -%}  c\n    {% raw "
        "%}\nr{% endraw %}\n{% raw -%}\n   {% endraw %}.",
        "{{ ['\\u00a0\\u200b\\u2028\\ue000\\xad\\x7f\\x85\\x01 é😀 \\U000e0041 \\u0600 \\\\ \\'\\\"'] }}",
        "{% set d = {0: 'zero', 512: 'half', 1.5: 'f', none: 'n', true: 't', (1, 2): 'tup', 'k': 'v'} %}{{ d }} {{ "
        "d[0] }} {{ d[1] }} {{ d[1.0] }} {{ d[512] }} "
        "{{ d[none] }} {{ d[(1, 2)] }} {{ 512 in d }} {{ d | length }} {% for k, v in {3: 1, 1: 2} | dictsort %}{{ k "
        "}}{{ v }}{% endfor %} "
        "{{ {1: 'a', 'b': none, 2.5: 1, false: 0} | tojson }} {{ d.get(512) }} {{ d[[1]] }}|{{ {0: 1}.items() | list "
        "}}",
        // globals
        "{{ namespace(a=1).a }} {{ dict(a=1, b='x') }} {{ strftime_now('%Y-%m-%d %H:%M %d %b %Y %A') }} {{ bos_token "
        "}}{{ eos_token }} {{ add_generation_prompt }} {{ tools }} {{ documents }}",
    };
    fs::path dir = test_temp_dir("jinja_snippets");
    std::vector<std::pair<std::string, fs::path>> templates;
    for (size_t i = 0; i < snippets.size(); ++i) {
        fs::path p = dir / ("snippet" + std::to_string(i) + ".jinja");
        std::ofstream(p, std::ios::binary) << snippets[i];
        templates.emplace_back("snippet" + std::to_string(i), p);
    }
    ojson one = {
        {"cases", ojson::array({ojson{{"name", "basic"},
                                      {"add_generation_prompt", true},
                                      {"messages", ojson::array({ojson{{"role", "system"}, {"content", "sys"}},
                                                                 ojson{{"role", "user"}, {"content", "hi"}},
                                                                 ojson{{"role", "assistant"}, {"content", "yo"}},
                                                                 ojson{{"role", "user"}, {"content", "bye"}}})}}})}};
    fs::path cases_path = dir / "cases.json";
    std::ofstream(cases_path) << one.dump();
    std::vector<Case> cases = {case_from_json(one["cases"][0])};
    ojson ref = reference_renders(dir, cases_path, templates);
    for (const auto& [name, path] : templates) {
        INFO(name << ": " << read_file(path));
        INFO("jinja2: " << ref.at(name).at("basic").dump());
        CHECK(ref.at(name).at("basic").at("ok").get<bool>());
    }
    CHECK(compare_with_jinja2(templates, cases, ref) == templates.size());
}

TEST_CASE("jinja never fails but with MoeError on cut or mangled templates", "[jinja]") {
    // Every prefix of every shared template (cut every 5 bytes), and each with
    // one byte replaced by a delimiter, parses and renders or fails with a
    // MoeError; anything else (a crash, another exception) fails the test.
    JinjaChatInput input;
    input.messages = ojson::parse(R"([{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
        {"role": "assistant", "content": "a", "tool_calls": [{"id": "call00001", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]},
        {"role": "tool", "tool_call_id": "call00001", "content": "r"}, {"role": "user", "content": "v"}])");
    input.tools = ojson::parse(
        R"([{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {}}}}])");
    input.add_generation_prompt = true;
    JinjaRenderOptions options = fixed_now_options();
    options.limits.max_steps = 200000;
    size_t tried = 0, failed = 0;
    const char* const delimiters[] = {"{", "}", "%", "(", "[", "'", "|", "-"};
    for (const auto& e : fs::directory_iterator(shared_data_dir() / "chat_templates")) {
        std::string text = read_file(e.path());
        for (size_t cut = 0; cut <= text.size(); cut += 5) {
            for (int variant = 0; variant < 2; ++variant) {
                std::string src = text.substr(0, variant == 0 ? cut : text.size());
                if (variant == 1) {
                    if (cut >= text.size()) continue;
                    src[cut] = delimiters[cut % 8][0];
                }
                ++tried;
                try {
                    JinjaTemplate t(src, "mangled");
                    jinja_render_chat(t, input, options);
                } catch (const MoeError& err) {
                    ++failed;
                    CHECK(std::string(err.what()).find('\n') == std::string::npos);
                }
            }
        }
    }
    CHECK(tried > 5000);
    CHECK(failed > 0);
}

TEST_CASE("jinja values print as Python prints them", "[jinja]") {
    CHECK(render("{{ 1.0 }} {{ 0.1 }} {{ 1e16 }} {{ 1.5e-5 }} {{ 100.0 }} {{ -0.0 }}") ==
          "1.0 0.1 1e+16 1.5e-05 100.0 -0.0");
    CHECK(render("{{ 'abc'[::-1] }}|{{ [1, 2, 3][::-1] }}") == "cba|[3, 2, 1]");
    JinjaDict vars;
    vars.set("m", jinja_from_json(ojson::parse(R"({"z": 1, "a": [true, null, "x'y"]})")));
    CHECK(render("{{ m }}|{{ m | tojson }}", vars) ==
          R"({'z': 1, 'a': [True, None, "x'y"]}|{"z": 1, "a": [true, null, "x'y"]})");
    CHECK(render("{{ missing }}|{{ missing | length }}|{% for x in missing %}x{% endfor %}") == "|0|");
}

TEST_CASE("jinja template errors are one line naming the problem and line", "[jinja]") {
    auto one_line = [](const std::string& e) { return !e.empty() && e.find('\n') == std::string::npos; };

    std::string e = render_error("ok\n{{ 'x' | nofilter }}");
    CHECK(one_line(e));
    CHECK(e.find("test template line 2") != std::string::npos);
    CHECK(e.find("unknown filter 'nofilter'") != std::string::npos);

    e = render_error("{{ 1 is nosuchtest }}");
    CHECK(e.find("unknown test 'nosuchtest'") != std::string::npos);

    e = moe_error_of([] { JinjaTemplate("a\n{% if x %}\nb\n{% for y in z %}", "tpl"); });
    CHECK(one_line(e));
    CHECK(e.find("tpl line") != std::string::npos);
    CHECK(e.find("unclosed block opened on line 4") != std::string::npos);

    e = moe_error_of([] { JinjaTemplate("{{ 1 + }}"); });
    CHECK(e.find("chat template line 1: unexpected") != std::string::npos);
    CHECK(!moe_error_of([] { JinjaTemplate("{% endfor %}"); }).empty());
    CHECK(!moe_error_of([] { JinjaTemplate("{{ 'unterminated }}"); }).empty());
    CHECK(!moe_error_of([] { JinjaTemplate("{% frobnicate %}"); }).empty());
    CHECK(!moe_error_of([] { JinjaTemplate("{{ x "); }).empty());
    CHECK(!moe_error_of([] { JinjaTemplate("{# never closed"); }).empty());

    e = render_error("\n\n{{ raise_exception('Roles must alternate\\nuser/assistant') }}");
    CHECK(one_line(e));
    CHECK(e.find("line 3") != std::string::npos);
    CHECK(e.find("raised an exception: Roles must alternate") != std::string::npos);

    e = render_error("{{ 'a' + 1 }}");
    CHECK(e.find("unsupported operand type(s) for +: 'str' and 'int'") != std::string::npos);
    e = render_error("{{ missing.attr }}");
    CHECK(e.find("'missing' is undefined") != std::string::npos);
    e = render_error("{{ {}.a.b }}");
    CHECK(e.find("has no attribute 'a'") != std::string::npos);
    CHECK(render_error("{{ 1 // 0 }}").find("by zero") != std::string::npos);
    CHECK(render_error("{{ 9223372036854775807 + 1 }}").find("overflow") != std::string::npos);
    CHECK(render_error("{% for x in none %}{% endfor %}").find("not iterable") != std::string::npos);
    CHECK(render_error("{% set a, b = [1, 2, 3] %}").find("too many values to unpack") != std::string::npos);
    CHECK(render_error("{% set x = 1 %}{% set x.a = 2 %}").find("non-namespace") != std::string::npos);
    CHECK(render_error("{{ missing | tojson }}").find("not JSON serializable") != std::string::npos);
}

TEST_CASE("jinja rendering is bounded in steps, output, recursion and nesting", "[jinja]") {
    JinjaRenderOptions small;
    small.limits.max_steps = 100000;
    small.limits.max_output_bytes = 4096;
    small.limits.max_call_depth = 20;

    CHECK(render_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", small)
              .find("steps") != std::string::npos);
    CHECK(render_error("{% for i in range(3000) %}xxxxxxxxxx{% endfor %}", small)
              .find("output exceeds the render limit of 4096 bytes") != std::string::npos);
    CHECK(render_error("{{ 'x' * 10000000000 }}", small).find("render limit") != std::string::npos);
    CHECK(render_error(
              "{% set ns = namespace(s='xx') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", small)
              .find("render limit") != std::string::npos);
    small.limits.max_list_items = 1000;
    CHECK(render_error("{{ range(100000000) | length }}", small).find("range() of more than 1000 items") !=
          std::string::npos);
    CHECK(render_error("{{ [1, 2] * 600 }}", small).find("render limit") != std::string::npos);
    CHECK(render_error("{{ ('x' * 2000) | list | length }}", small).find("limit of 1000 items") != std::string::npos);
    CHECK(render_error("{% for c in 'x' * 2000 %}{% endfor %}", small).find("limit of 1000 items") !=
          std::string::npos);
    CHECK(render_error("{{ (',' * 2000).split(',') | length }}", small).find("limit of 1000 items") !=
          std::string::npos);
    CHECK(render_error("{{ ('a\\n' * 2000).splitlines() | length }}", small).find("limit of 1000 items") !=
          std::string::npos);
    CHECK(render("{{ ('x' * 1000) | list | length }}", {}, small) == "1000");
    CHECK(render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", small)
              .find("nested more than 20 deep") != std::string::npos);
    CHECK(render_error("{{ 'ab' | indent(100000000) }}", small).find("render limit") != std::string::npos);
    CHECK(render_error(
              "{% set ns = namespace(x=[]) %}{% for i in range(400) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}")
              .find("nested more than 256 levels") != std::string::npos);

    std::string deep = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
    CHECK(moe_error_of([&] { JinjaTemplate t(deep); }).find("nested more than") != std::string::npos);
    std::string deep_if;
    for (int i = 0; i < 1000; ++i) deep_if += "{% if true %}";
    CHECK(moe_error_of([&] { JinjaTemplate t(deep_if); }).find("nested more than") != std::string::npos);
    std::string deep_not = "{{ " + std::string(0, ' ');
    for (int i = 0; i < 5000; ++i) deep_not += "not ";
    deep_not += "1 }}";
    CHECK(moe_error_of([&] { JinjaTemplate t(deep_not); }).find("nested more than") != std::string::npos);
    std::string deep_neg = "{{ " + std::string(5000, '-') + "1 }}";
    CHECK(moe_error_of([&] { JinjaTemplate t(deep_neg); }).find("nested more than") != std::string::npos);
    std::string deep_list = "{{ " + std::string(5000, '[') + std::string(5000, ']') + " }}";
    CHECK(moe_error_of([&] { JinjaTemplate t(deep_list); }).find("nested more than") != std::string::npos);

    // The default limits leave real templates room.
    CHECK(render("{% for i in range(100000) %}{% endfor %}ok") == "ok");
}

TEST_CASE("jinja: a value nested without end is refused when built, and freed without recursion", "[jinja]") {
    // A list 200,000 deep through a namespace: refused at 256 levels, not a
    // stack overflow when it is printed or freed.
    std::string e = hostile_render_error(
        "{% set ns = namespace(x=[]) %}{% for i in range(200000) %}{% set ns.x = [ns.x] %}{% endfor %}{{ ns.x }}");
    CHECK(contains(e, "test template line 1: a list or dict nested more than 256 levels deep"));
    e = hostile_render_error(
        "{% set ns = namespace(x={}) %}{% for i in range(200000) %}{% set ns.x = {'a': ns.x} %}{% endfor %}");
    CHECK(contains(e, "nested more than 256 levels deep"));
    // A chain of 50,000 namespaces (each counts as one level): freed when the
    // render ends without recursing through the chain; printing it stops at
    // the walk's depth limit.
    const std::string chain =
        "{% set ns = namespace(h=none) %}{% for i in range(50000) %}{% set ns.h = namespace(next=ns.h) %}"
        "{% endfor %}";
    auto out = std::make_shared<std::string>();
    CHECK(finishes_within(60, [out, chain] { *out = render(chain + "ok"); }));
    CHECK(*out == "ok");
    CHECK(contains(hostile_render_error(chain + "{{ ns.h == ns.h }}{{ [ns.h] == [ns.h] }}{{ ns.h }}"),
                   "value nested more than 256 levels deep"));
}

TEST_CASE("jinja: runaway work ends at the render's budget, deadline or stop", "[jinja]") {
    // The issue's inputs with the default limits: an error, not a thread
    // spinning for hours.
    std::string e = hostile_render_error("{{ range(1000000)|unique|list|length }}");
    CHECK(contains(e, "test template line 1: rendering used more than"));
    e = hostile_render_error(
        "{% set a = range(50000) %}{% set b = range(50000) %}"
        "{% for i in range(1000) %}{{ a == b }}{{ a < b }}{% endfor %}");
    CHECK(contains(e, "rendering used more than 10000000 steps"));
    e = hostile_render_error("{% set a = range(500000) %}{{ ([a] * 50)|sort|length }}");
    CHECK(contains(e, "rendering used more than"));

    // The deadline ends a render whatever its steps.
    JinjaRenderOptions timed;
    timed.limits.max_steps = 0;
    timed.limits.max_time = std::chrono::milliseconds(50);
    e = render_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", timed);
    CHECK(contains(e, "test template line 1: rendering took more than 50 ms"));

    // work_budget_stop_all() (the server's stop, on SIGTERM) ends a render in
    // flight; renders begun after it are not affected.
    JinjaRenderOptions endless;
    endless.limits.max_steps = 0;
    endless.limits.max_time = std::chrono::minutes(10);
    auto error = std::make_shared<std::string>();
    auto started = std::make_shared<std::promise<void>>();
    JinjaDict vars;
    vars.set("started", JinjaValue::from_function("started", [started](JinjaArgs&) {
                 started->set_value();
                 return JinjaValue::none();
             }));
    auto finished = std::async(std::launch::async, [&] {
        *error = moe_error_of([&] {
            render("{{ started() }}{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                   vars, endless);
        });
    });
    started->get_future().wait();
    work_budget_stop_all();
    REQUIRE(finished.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
    CHECK(contains(*error, "test template line 1: rendering was stopped: the server is shutting down"));
    CHECK(render("{% for i in range(1000) %}{% endfor %}ok") == "ok");
}

TEST_CASE("jinja: a value is charged by the size it would have before it is built", "[jinja]") {
    // [L] * 300 is small, but prints as 300 million items: priced as that,
    // it fails before its text is built (the issue saw 2.0 GB).
    global_peak_reset();
    long long before = global_live_bytes();
    std::string e = render_error("{% set L = [0] * 1000000 %}{{ [L] * 300 }}");
    CHECK(contains(e, "test template line 1: rendering"));
    CHECK(global_peak_bytes() - before < (400ll << 20));
    // A shared tree given to tojson (the issue saw 4.4 GB and bad_alloc).
    global_peak_reset();
    before = global_live_bytes();
    e = render_error("{% set a = [1] * 1000 %}{% set b = [a] * 1000 %}{% set c = [b] * 1000 %}{{ c | tojson }}");
    CHECK(contains(e, "test template line 1: rendering"));
    CHECK(global_peak_bytes() - before < (400ll << 20));
    JinjaRenderOptions small;
    small.limits.max_output_bytes = 1 << 20;
    e = render_error("{% set a = ['x' * 100000] * 1000 %}{{ a | tojson(indent=2) }}", small);
    CHECK(contains(e, "rendering would build a string or list of more than 1048576 bytes"));
    e = render_error("{% set a = ['\\n' * 100000] * 1000 %}{{ a }}", small);
    CHECK(contains(e, "rendering would build a string or list of more than 1048576 bytes"));
    // Memory in all, not just any one value: many strings kept alive.
    small = {};
    small.limits.max_bytes = 1 << 20;
    e = render_error("{% set ns = namespace(k=[]) %}{% for i in range(1000) %}"
                     "{% set ns.k = ns.k + ['x' * 10000] %}{% endfor %}",
                     small);
    CHECK(contains(e, "rendering used more than 1048576 bytes"));
    CHECK(render("{% set ns = namespace(k=[]) %}{% for i in range(50) %}{% set ns.k = ns.k + ['x' * 1000] %}"
                 "{% endfor %}{{ ns.k | length }}",
                 {}, small) == "50");
}

TEST_CASE("jinja: a namespace that holds itself is freed when the render ends", "[jinja]") {
    const std::string source =
        "{% set ns = namespace() %}{% set ns.me = ns %}{% set ns.s = 'x' * 8000000 %}"
        "{% set other = namespace(a=ns) %}{% set ns.b = [other, ns] %}{{ ns.me.s | length }}";
    CHECK(render(source) == "8000000");
    const long long before = global_live_bytes();
    for (int i = 0; i < 3; ++i) CHECK(render(source) == "8000000");
    CHECK(global_live_bytes() - before < (1ll << 20));
}

TEST_CASE("jinja: parsing is linear in the template's length", "[jinja]") {
    // 40,000 statements on one line (the issue's model took 5.4 s to load; the
    // line's start was searched for back to the template's start at every
    // tag, quadratic: about a minute on this input before).
    std::string one_line;
    for (int i = 0; i < 40000; ++i) one_line += "{% set x = " + std::to_string(i) + " %}";
    auto out = std::make_shared<std::string>();
    CHECK(finishes_within(30, [out, one_line] { *out = render(one_line + "{{ x }}"); }));
    CHECK(*out == "39999");
}

TEST_CASE("jinja: str.format of a field index too large is a template error naming the field", "[jinja]") {
    CHECK(render_error("\n{{ '{99999999999999999999999}'.format(1) }}") ==
          "test template line 2: format(): field {99999999999999999999999} is too large an index");
    CHECK(render("{{ '{1}{0}'.format('a', 'b') }}") == "ba");
    CHECK(contains(render_error("{{ '{1x}'.format('a', 'b') }}"), "field '1x' is not supported"));
}

TEST_CASE("JinjaChat renders a model folder's template with its special tokens", "[jinja]") {
    fs::path dir = shared_data_dir() / "tokenizers" / "mistral-7b-instruct-v0.3";
    std::optional<JinjaChat> chat = JinjaChat::from_model_dir(dir);
    REQUIRE(chat);
    CHECK(chat->special_tokens().at("bos_token") == "<s>");
    CHECK(chat->special_tokens().at("eos_token") == "</s>");
    CHECK(chat->special_tokens().at("unk_token") == "<unk>");
    CHECK(!chat->special_tokens().contains("pad_token"));  // null in the config
    ojson messages = ojson::parse(
        R"([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}, {"role": "user", "content": "Bye"}])");
    CHECK(chat->render(messages, nullptr, true) == "<s>[INST] Hi[/INST] Hello</s>[INST] Bye[/INST]");
    // The request's variables win over the tokenizer's, as transformers merges them.
    CHECK(chat->render(messages, nullptr, true, ojson{{"bos_token", "<BOS>"}}).starts_with("<BOS>[INST]"));
    CHECK(moe_error_of([&] {
              chat->render(messages, nullptr, true, ojson{{"messages", 1}});
          }).find("'messages' cannot be given") != std::string::npos);
    std::string e = moe_error_of([&] {
        chat->render(ojson::parse(R"([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])"), nullptr,
                     true);
    });
    CHECK(e.find("raised an exception: After the optional system message, conversation roles must alternate") !=
          std::string::npos);
    CHECK(e.find("tokenizer_config.json chat_template line ") != std::string::npos);

    // A folder without a template: none.
    fs::path tmp = test_temp_dir("jinja_chat");
    std::ofstream(tmp / "tokenizer_config.json") << R"({"bos_token": "<s>"})";
    CHECK(!JinjaChat::from_model_dir(tmp));
    // ... unless chat_template.jinja is there (newer transformers save it so).
    std::ofstream(tmp / "chat_template.jinja") << "{{ bos_token }}{% for m in messages %}{{ m.content }}{% endfor %}";
    auto from_file = JinjaChat::from_model_dir(tmp);
    REQUIRE(from_file);
    CHECK(from_file->render(messages, nullptr, false) == "<s>HiHelloBye");
}

TEST_CASE("JinjaChat picks the tool_use template for requests with tools", "[jinja]") {
    nlohmann::json config = nlohmann::json::parse(R"({
        "chat_template": [{"name": "default", "template": "D{{ tools }}"}, {"name": "tool_use", "template": "T{{ tools | length }}{{ additional_special_tokens }}"}],
        "bos_token": {"content": "<|begin|>", "__type": "AddedToken"},
        "additional_special_tokens": ["<a>", {"content": "<b>"}]})");
    auto chat = JinjaChat::from_config(config, "cfg.json");
    REQUIRE(chat);
    CHECK(chat->special_tokens().at("bos_token") == "<|begin|>");
    CHECK(chat->render(ojson::array(), nullptr, false) == "DNone");
    CHECK(chat->render(ojson::array(), ojson::array({ojson{{"type", "function"}}}), false) == "T1['<a>', '<b>']");
    CHECK(chat->render(ojson::array(), ojson::array(), false) == "T0['<a>', '<b>']");

    CHECK(!JinjaChat::from_config(nlohmann::json::object(), "cfg.json"));
    std::string e =
        moe_error_of([] { JinjaChat::from_config(nlohmann::json::parse(R"({"chat_template": 5})"), "cfg.json"); });
    CHECK(e.find("cfg.json: chat_template: expected a string") != std::string::npos);
    e = moe_error_of(
        [] { JinjaChat::from_config(nlohmann::json::parse(R"({"chat_template": [{"name": "x"}]})"), "cfg.json"); });
    CHECK(e.find("cfg.json: chat_template[0]") != std::string::npos);
    e = moe_error_of(
        [] { JinjaChat::from_config(nlohmann::json::parse(R"({"chat_template": "{% if %}"})"), "cfg.json"); });
    CHECK(e.find("cfg.json chat_template line 1") != std::string::npos);
    e = moe_error_of(
        [] { JinjaChat::from_config(nlohmann::json::parse(R"({"chat_template": "x", "eos_token": 3})"), "cfg.json"); });
    CHECK(e.find("cfg.json: eos_token") != std::string::npos);
}
