// Reading varints and appending fields in the protocol-buffer wire format
// (see protobuf_wire.h).
#include "engine/text/protobuf_wire.h"

#include <cstring>

bool pb_read_varint(std::string_view data, size_t* pos, uint64_t* value) {
    *value = 0;
    for (int shift = 0; shift < 64 && *pos < data.size(); shift += 7) {
        const auto byte = static_cast<uint8_t>(data[(*pos)++]);
        *value |= static_cast<uint64_t>(byte & 0x7F) << shift;
        if ((byte & 0x80) == 0) return true;
    }
    return false;
}

void pb_put_varint(std::string* out, uint64_t v) {
    while (v >= 0x80) {
        *out += static_cast<char>((v & 0x7F) | 0x80);
        v >>= 7;
    }
    *out += static_cast<char>(v);
}

void pb_put_varint_field(std::string* out, uint32_t field, uint64_t v) {
    pb_put_varint(out, uint64_t(field) << 3 | 0);
    pb_put_varint(out, v);
}

void pb_put_bytes_field(std::string* out, uint32_t field, std::string_view bytes) {
    pb_put_varint(out, uint64_t(field) << 3 | 2);
    pb_put_varint(out, bytes.size());
    out->append(bytes);
}

void pb_put_float_field(std::string* out, uint32_t field, float v) {
    static_assert(sizeof(float) == 4);
    pb_put_varint(out, uint64_t(field) << 3 | 5);
    uint32_t bits = 0;
    std::memcpy(&bits, &v, 4);
    for (int i = 0; i < 4; ++i) *out += static_cast<char>((bits >> (8 * i)) & 0xFF);
}
