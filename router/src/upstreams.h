/* The upstream connections of the gRPC relay: one channel per sandbox address, shared by every
 * call to it (gRPC multiplexes the calls as streams of one HTTP/2 connection), at most max of
 * them, the least recently used closed beyond. */
#pragma once

#include <grpc/grpc.h>
#include <stdint.h>

#include "error.h"

struct sbx_upstreams;

int sbx_upstreams_new(struct sbx_upstreams **ret, unsigned max, int max_message_bytes,
                      struct sbx_error *err);
void sbx_upstreams_free(struct sbx_upstreams *u);

/* The channel to host ("ip:port" or "name:port"), made on first use; valid until
 * sbx_upstreams_free (an evicted channel is kept alive by the calls on it: gRPC counts them). */
grpc_channel *sbx_upstreams_get(struct sbx_upstreams *u, const char *host, struct sbx_error *err);

/* Channels open, and channels made since the start. */
void sbx_upstreams_count(struct sbx_upstreams *u, uint64_t *open, uint64_t *created);
