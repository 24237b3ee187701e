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
