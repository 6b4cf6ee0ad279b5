// Files compiled into the binary (the demo tokenizer, the web UI bundle).
// Lookup by bare file name; an unknown name gives an empty view. Defined by
// the sources that cmake/embed.cmake generates.
#pragma once
#include <string_view>

std::string_view embedded_file(std::string_view name);
