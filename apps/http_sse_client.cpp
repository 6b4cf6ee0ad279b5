// SSE client (see http_sse_client.h).
#include "apps/http_sse_client.h"

#include <cstdint>
#include <string_view>

SseResponse sse_post(httplib::Client& client, const std::string& path, const std::string& body,
                     const httplib::Headers& headers, const std::function<bool(const std::string& data)>& on_data) {
    SseResponse out;
    std::string pending;  // bytes not yet split into lines
    std::string data;     // data lines of the event being read
    bool has_data = false;
    bool ok_status = false;

    httplib::Request req;
    req.method = "POST";
    req.path = path;
    req.headers = headers;
    req.set_header("Content-Type", "application/json");
    req.set_header("Accept", "text/event-stream");
    req.body = body;
    req.response_handler = [&](const httplib::Response& res) {
        out.status = res.status;
        out.content_type = res.get_header_value("Content-Type");
        ok_status = res.status >= 200 && res.status < 300;
        return true;
    };
    req.content_receiver = [&](const char* bytes, size_t n, uint64_t, uint64_t) {
        out.raw.append(bytes, n);
        if (!ok_status) return true;
        pending.append(bytes, n);
        size_t start = 0;
        for (;;) {
            size_t nl = pending.find('\n', start);
            if (nl == std::string::npos) break;
            std::string_view line(pending.data() + start, nl - start);
            start = nl + 1;
            if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
            if (line.empty()) {
                if (has_data && !on_data(data)) {
                    out.cancelled = true;
                    return false;
                }
                data.clear();
                has_data = false;
            } else if (line.starts_with("data:")) {
                line.remove_prefix(5);
                if (line.starts_with(" ")) line.remove_prefix(1);
                if (has_data) data += "\n";
                data.append(line);
                has_data = true;
            }
        }
        pending.erase(0, start);
        return true;
    };
    httplib::Result result = client.send(req);
    if (!result && !out.cancelled) out.status = 0;
    return out;
}
