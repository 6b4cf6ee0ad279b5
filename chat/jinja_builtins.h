// What Jinja templates call on values: jinja2's filters and tests, Python's
// str and dict methods, attribute and item lookup (jinja2's rules: `a.b`
// tries a method before a key, `a[b]` a key before a method; a missing one is
// undefined, looking into an undefined value is an error) and slicing. Pure
// functions of values: no template state, no output. Errors are JinjaError;
// any string or list built is held to JinjaBuiltinLimits.
#pragma once
#include <string>
#include <string_view>

#include "chat/jinja_value.h"

struct JinjaBuiltinLimits {
    size_t max_bytes = 0;  // longest string a builtin may build
    size_t max_items = 0;  // longest list (range(), ...)
};

bool jinja_has_filter(std::string_view name);
bool jinja_has_test(std::string_view name);
JinjaValue jinja_filter(const std::string& name, const JinjaValue& value, JinjaArgs& args,
                        const JinjaBuiltinLimits& limits);
bool jinja_test(const std::string& name, const JinjaValue& value, JinjaArgs& args, const JinjaBuiltinLimits& limits);

// value.name and value[key].
JinjaValue jinja_attribute(const JinjaValue& value, const std::string& name, const JinjaBuiltinLimits& limits);
JinjaValue jinja_item(const JinjaValue& value, const JinjaValue& key, const JinjaBuiltinLimits& limits);
// value[start:stop:step] of a string, list or tuple (undefined bounds: omitted).
JinjaValue jinja_slice(const JinjaValue& value, const JinjaValue& start, const JinjaValue& stop,
                       const JinjaValue& step);
// The items a for loop or a filter walks: a list's, a string's characters, a
// dict's keys; nothing for undefined. JinjaError for what Python cannot
// iterate, or a string of more characters than limits.max_items.
JinjaList jinja_iterate(const JinjaValue& value, const JinjaBuiltinLimits& limits);
// Python's len(); undefined has length 0.
size_t jinja_length(const JinjaValue& value);
// Python's printf-style `format % args` (args a tuple, or one value):
// %s %r %d %i %f %x %% with flags '-' and '0', a width and a precision.
std::string jinja_percent_format(const std::string& format, const JinjaValue& args, const JinjaBuiltinLimits& limits);
// The error for using an undefined value ("'x' is undefined").
[[noreturn]] void jinja_undefined_error(const JinjaValue& value);
