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

int sbx_grpc_reflection_register(struct sbx_grpc *srv, struct sbx_reflection *r,
                                 struct sbx_error *err);
