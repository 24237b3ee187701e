/* gRPC server reflection (grpc.reflection.v1 and v1alpha, the same messages on the wire) over
 * the descriptor set embedded at build time. */
#pragma once

#include "error.h"
#include "grpc_server.h"

struct sbx_reflection;

/* Indexes a serialized FileDescriptorSet (it must outlive the index). */
int sbx_reflection_new(struct sbx_reflection **ret, const uint8_t *set, size_t len,
                       struct sbx_error *err);
void sbx_reflection_free(struct sbx_reflection *r);

struct Grpc__Reflection__V1__ServerReflectionRequest;

/* Answers one request: *out gets the packed ServerReflectionResponse. -EINVAL when a string of
 * the request is not UTF-8, -ENOMEM. */
int sbx_reflection_answer(const struct sbx_reflection *r,
                          struct Grpc__Reflection__V1__ServerReflectionRequest *q,
                          grpc_byte_buffer **out);

int sbx_grpc_reflection_register(struct sbx_grpc *srv, struct sbx_reflection *r,
                                 struct sbx_error *err);
