// MoeError: the one exception type the engine throws for bad input (files,
// arguments, requests). Its message is a single line that names the file,
// tensor or field and what is wrong. Libraries never exit(); main() and the
// server catch it in one place each.
#pragma once
#include <stdexcept>
#include <string>

struct MoeError : std::runtime_error {
    using std::runtime_error::runtime_error;
};
