// The `serve` and `bench server` subcommands: flag parsing, the demo-model
// fallback, signal handling and the in-process HTTP benchmark. main.cpp
// calls these with the words after the subcommand; each returns the exit
// code and prints MoeError messages itself. HTTP handling lives in
// http_server.*; nothing here parses requests.
#pragma once
#include <string>
#include <vector>

// moe-server serve [--model DIR] [--host 127.0.0.1] [--port 8080] [--api-key KEY]
//                  [--ctx N] [--threads N] [--max-queue N] [--cors-origin ORIGIN]
int serve_main(const std::vector<std::string>& args);

// moe-server bench server [--model DIR] [--tokens N] [--ctx N] [--threads N]
//                         [--conversations N]
int bench_server_main(const std::vector<std::string>& args);
