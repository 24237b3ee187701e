/* What pbjson's writer (pbjson_enc.c) and reader (pbjson_dec.c) share: names as protoc derives
 * them, map fields, the well-known types, Timestamp text, base64 and JSON number text. */
#pragma once

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A member of a message at a field's offset (or quantifier offset). */
#define SBX_PBJSON_AT(type, m, off)   (*(type *)((char *)(m) + (off)))
#define SBX_PBJSON_AT_C(type, m, off) (*(const type *)((const char *)(m) + (off)))

/* Messages whose JSON is not an object of their fields. */
enum sbx_pbjson_wkt {
    SBX_PBJSON_PLAIN,
    SBX_PBJSON_TIMESTAMP,
    SBX_PBJSON_WRAPPER,     /* google.protobuf.*Value: the JSON is field 1's value */
    SBX_PBJSON_UNSUPPORTED, /* a JSON form of its own that this mapping lacks */
};
enum sbx_pbjson_wkt sbx_pbjson_wkt(const ProtobufCMessageDescriptor *d);

/* The field's JSON name as protoc's ToJsonName makes it (each '_' dropped and the letter after it
 * upper-cased) written to out, which has room for strlen(proto_name) + 1; its length. */
size_t sbx_pbjson_json_name(const char *proto_name, char *out);
/* Whether key is the JSON name of the field named proto_name. */
bool sbx_pbjson_json_name_is(const char *proto_name, const char *key);

/* The entry type when f is a map field: protoc-c keeps no map_entry option, but protoc names the
 * entry of field foo_bar FooBarEntry, nests it in the field's message and refuses any other
 * nested type of that name, so the name with the key (1) and value (2) fields tells. */
const ProtobufCMessageDescriptor *sbx_pbjson_map_entry(const ProtobufCMessageDescriptor *d,
                                                       const ProtobufCFieldDescriptor *f);

/* Map entries a and b ordered by their keys (field kf): strings bytewise, numbers by value. */
int sbx_pbjson_key_cmp(const ProtobufCFieldDescriptor *kf, const ProtobufCMessage *a,
                       const ProtobufCMessage *b);

/* Bytes one value of type t takes in a message or a repeated field's array. */
size_t sbx_pbjson_elt_size(ProtobufCType t);

/* A new message of type d, initialised, malloc'ed as protobuf-c's unpack allocates; NULL when out
 * of memory. */
ProtobufCMessage *sbx_pbjson_message_new(const ProtobufCMessageDescriptor *d);

/* Timestamp: the range protobuf allows, 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999999Z. */
#define SBX_PBJSON_TS_MIN (-62135596800LL)
#define SBX_PBJSON_TS_MAX 253402300799LL
#define SBX_PBJSON_TS_LEN 40
/* RFC 3339 in UTC ("2026-12-02T10:00:00.120Z"); -EINVAL out of range. */
int sbx_pbjson_ts_format(int64_t secs, int32_t nanos, char out[SBX_PBJSON_TS_LEN]);
/* RFC 3339 with any offset, at most 9 fractional digits; -EINVAL when not one or out of range. */
int sbx_pbjson_ts_parse(const char *s, int64_t *secs, int32_t *nanos);

/* Standard base64 with padding of in[0..n) into out (room for 4 * ((n + 2) / 3) + 1); length. */
size_t sbx_pbjson_b64_encode(const uint8_t *in, size_t n, char *out);
/* Base64 as Go's protojson reads it: URL-safe when '-' or '_' occurs, unpadded when the length is
 * not a multiple of 4, CR and LF skipped. *ret malloc'ed (NULL when empty). -EINVAL, -ENOMEM. */
int sbx_pbjson_b64_decode(const char *s, size_t len, uint8_t **ret, size_t *ret_len);

/* Whether s is exactly one JSON number (no blanks around it). */
bool sbx_pbjson_number_text(const char *s);
/* The integer the JSON number s denotes exactly, as a sign and magnitude: -EINVAL when s is not
 * a JSON number or not integral, -ERANGE when its magnitude passes UINT64_MAX. */
int sbx_pbjson_integer_text(const char *s, bool *neg, uint64_t *mag);
