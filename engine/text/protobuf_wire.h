// The protocol-buffer wire format, as far as SentencePiece's ModelProto needs
// it: walking a serialized message's fields (varint, fixed64, fixed32 and
// length-delimited; no groups) and appending fields to one. libsentencepiece
// parses models; the project reads a few fields of them, appends one
// (engine/text/tokenizer.cpp) and builds whole models from GGUF metadata
// (engine/text/gguf_tokenizer.cpp). No schema: callers know their field numbers.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

// Reads a varint at data[*pos] and moves *pos past it; false when it is
// truncated or longer than 10 bytes.
bool pb_read_varint(std::string_view data, size_t* pos, uint64_t* value);

// Calls on_field(field_number, wire_type, payload, raw) for each top-level
// field of a serialized message (payload: the bytes of a length-delimited
// field, the value's bytes otherwise; raw: the whole field, key included).
// False when the bytes are not well formed (fields before the fault were
// already visited).
template <typename F>
bool pb_for_each_field(std::string_view data, F on_field) {
    size_t pos = 0;
    while (pos < data.size()) {
        const size_t field_start = pos;
        uint64_t key = 0;
        if (!pb_read_varint(data, &pos, &key)) return false;
        const auto field = static_cast<uint32_t>(key >> 3);
        const auto wire = static_cast<uint32_t>(key & 7);
        const size_t start = pos;
        uint64_t len = 0;
        switch (wire) {
        case 0:
            if (!pb_read_varint(data, &pos, &len)) return false;
            break;
        case 1:
            if (data.size() - pos < 8) return false;
            pos += 8;
            break;
        case 5:
            if (data.size() - pos < 4) return false;
            pos += 4;
            break;
        case 2:
            if (!pb_read_varint(data, &pos, &len) || len > data.size() - pos) return false;
            on_field(field, wire, data.substr(pos, len), data.substr(field_start, pos + len - field_start));
            pos += len;
            continue;
        default:
            return false;  // groups are not used by sentencepiece_model.proto
        }
        on_field(field, wire, data.substr(start, pos - start), data.substr(field_start, pos - field_start));
    }
    return true;
}

void pb_put_varint(std::string* out, uint64_t v);
// A varint field; a negative int32/int64 goes as its 64-bit two's complement
// (ten bytes), as protobuf encodes it.
void pb_put_varint_field(std::string* out, uint32_t field, uint64_t v);
// A length-delimited field: a string, bytes or an embedded message.
void pb_put_bytes_field(std::string* out, uint32_t field, std::string_view bytes);
// A float field (fixed32, little-endian IEEE bits).
void pb_put_float_field(std::string* out, uint32_t field, float v);
