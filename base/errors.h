// MoeError: the one exception type the project throws for bad input (files,
// arguments, requests, popularity and calibration files). Its message is a
// single line that names the file, tensor or field and what is wrong.
// Libraries never exit(); main() and the server's request guard catch it in
// one place each. It lives in base/, below every module that throws it
// (cpu_kernels/ and gpu_kernels/ never do).
#pragma once
#include <stdexcept>
#include <string>

struct MoeError : std::runtime_error {
    using std::runtime_error::runtime_error;
};
