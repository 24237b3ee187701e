/* What protobuf-c's unpack lets through but the protobuf encoding forbids. */
#pragma once

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>

/* False when m or a message within it holds a field numbered 0, which protobuf-c 1.4 keeps as
 * an unknown field (its own pack then writes bytes that it refuses to unpack) and other
 * implementations refuse. */
bool sbx_pb_wellformed(const ProtobufCMessage *m);

/* False when a string field of m, or of a message within it, is not UTF-8 (proto3 strings must
 * be; protobuf-c does not check). */
bool sbx_pb_utf8_valid(const ProtobufCMessage *m);

/* Whether a string field of the message of type d encoded in buf[0..n), or of a message within
 * it, holds a NUL byte, which protobuf-c's unpack hides: it hands strings over NUL-terminated,
 * so "a\0b" would reach the code as "a". Returns 1 when one does, with its name written into
 * name (size bytes, size >= 2): fields joined by '.', [i] for the i-th of a repeated field,
 * ["key"] for a map's entry, then " key" when the NUL is in the key ("config.command[1]",
 * "config.env_vars[\"HOME\"]"); 0 when none does; -1 when buf is not such a message. */
int sbx_pb_find_nul(const ProtobufCMessageDescriptor *d, const uint8_t *buf, size_t n, char *name,
                    size_t size);
