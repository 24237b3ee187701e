/* Protobuf's canonical proto3 JSON mapping (protobuf.dev/programming-guides/json) for protobuf-c
 * messages of any descriptor: what connect-go's JSON codec (Go's protojson) writes and reads, so
 * the E2B SDKs' Connect JSON reaches the same messages envd would see.
 *
 * Written: fields by lowerCamelCase name in field-number order, proto3 defaults left out but a
 * member of a oneof (and so an `optional` field, compiled here as a oneof of its own) whenever it
 * is set, 64-bit integers as strings, enums by name (by number when the value has no name), bytes
 * as padded standard base64, maps with their keys sorted (the last of equal keys wins, as in the
 * binary form), floats in the shortest form that reads back the same ("NaN", "Infinity",
 * "-Infinity" as strings; from 2^63 on with an exponent and negative zero as -0.0, where
 * protojson's plain digits would be an integer too big for, or the integer 0 to, our own reader),
 * google.protobuf.Timestamp as RFC 3339 in UTC with 0, 3, 6 or 9 fractional digits, the wrappers
 * (google.protobuf.Int32Value, ...) as their bare value.
 *
 * Read: a field by its JSON name or its proto name, each at most once, null meaning "not set";
 * unknown fields and unknown enum names are ignored (connect-go discards them: clients and
 * servers need not share one version of the schema); integers as numbers or strings holding a
 * JSON number, refused when fractional or out of range; bytes in standard or URL-safe base64,
 * padded or not; two members of one oneof refused; message nesting limited to
 * SBX_PBJSON_MAX_DEPTH.
 *
 * Not supported (refused with -EOPNOTSUPP): google.protobuf.Any, Duration, Struct, Value,
 * ListValue and FieldMask, none of which the E2B protos use. Limits of the JSON reader
 * (jansson): a string may not hold U+0000 (a protobuf-c string ends at its NUL); an integer
 * written as a number must fit in int64 (a larger uint64 must come as a string, as the writer
 * sends it), and one written with a fraction or exponent is read through a double; the number
 * -0 reads as 0 (-0.0 and the string "-0" as negative zero). */
#pragma once

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>

#include "error.h"

#define SBX_PBJSON_MAX_DEPTH 64

/* m as JSON text: *ret is malloc'ed, NUL-terminated, *ret_len bytes long. -EILSEQ when a string
 * is not UTF-8 (as protojson, which refuses to write such a string), -EINVAL when a Timestamp is
 * out of its range or the nesting too deep, -EOPNOTSUPP for a well-known type listed above,
 * -ENOMEM. */
int sbx_pbjson_encode(const ProtobufCMessage *m, char **ret, size_t *ret_len,
                      struct sbx_error *err);

/* The message of type d that text[0..len) holds. *ret is freed with
 * protobuf_c_message_free_unpacked(*ret, NULL). -EINVAL when the text is not JSON or does not
 * map onto d (the message names the field), -EOPNOTSUPP, -ENOMEM. */
int sbx_pbjson_decode(const ProtobufCMessageDescriptor *d, const char *text, size_t len,
                      ProtobufCMessage **ret, struct sbx_error *err);
