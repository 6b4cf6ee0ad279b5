// A small server-sent-events client over cpp-httplib, for the benchmark and
// the tests: POSTs a JSON body and hands each "data:" payload to a callback
// as it arrives. Returning false from the callback closes the connection
// (what a browser's abort does). Not used by the server itself.
#pragma once
#include <httplib.h>

#include <functional>
#include <string>

struct SseResponse {
    int status = 0;  // HTTP status; 0 when the connection failed
    std::string content_type;
    std::string raw;         // the whole body as received (framing included)
    bool cancelled = false;  // the callback stopped the stream
};

// Splits "data: X\n\n" frames (LF or CRLF line ends, multi-line data joined
// with "\n"); comments and other fields are skipped. Non-2xx bodies are kept
// in raw, and on_data is not called for them.
SseResponse sse_post(httplib::Client& client, const std::string& path, const std::string& body,
                     const httplib::Headers& headers, const std::function<bool(const std::string& data)>& on_data);
