/* One server call that outlives its handler (a stream of output, a wait for an exit, a health
 * watch), with its lifetime answered once: who holds it (references), when it is over (its
 * close is watched from the start), what is being sent (one batch in flight, the others queued
 * behind it in order) and what a cancel or a broken send does (nothing more goes out). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "grpc_server.h"

struct sbx_grpc_stream;

/* What the call's owner is told; each runs on a completion-queue thread (or on the thread
 * whose send failed to start), never with the stream's lock held. */
struct sbx_grpc_stream_ops {
    /* A queued send completed: ok when it went out, final when it carried the status. After a
     * send that failed nothing more goes out. Optional. */
    void (*sent)(void *data, bool ok, bool final);
    /* The call is over, once: finished, or cancelled by the client, its deadline or the server
     * (cancelled true). Optional. */
    void (*closed)(void *data, bool cancelled);
    /* The last reference is gone: free data. Optional. */
    void (*release)(void *data);
};

/* Takes over req and watches the call's end. The stream starts with two references: the
 * caller's and the close watch's (dropped after ops->closed). Returns 0, or -ENOMEM (req is
 * then still the caller's). */
int sbx_grpc_stream_new(struct sbx_grpc_req *req, const struct sbx_grpc_stream_ops *ops, void *data,
                        struct sbx_grpc_stream **ret);

void sbx_grpc_stream_ref(struct sbx_grpc_stream *st);
/* Drops a reference; the last one releases data, the call and the stream. Accepts NULL. */
void sbx_grpc_stream_unref(struct sbx_grpc_stream *st);

/* Queues message m (encoded now; initial metadata goes with the first send). flags: gRPC write
 * flags (GRPC_WRITE_BUFFER_HINT). Returns 0; -EPIPE when the call is over, finished or broken,
 * or when gRPC refuses to start the send (the server is closed: the stream breaks), and then
 * nothing was queued and no sent callback follows (the caller may hold a lock it takes);
 * -ENOMEM. */
int sbx_grpc_stream_send(struct sbx_grpc_stream *st, const ProtobufCMessage *m, uint32_t flags);

/* Queues the end of the call: message m when not NULL (only with GRPC_STATUS_OK), then the
 * status with details (may be NULL), once. Returns 0, -EALREADY when the end was queued
 * already, -EPIPE as sbx_grpc_stream_send, -ENOMEM (the call is then cancelled). */
int sbx_grpc_stream_finish(struct sbx_grpc_stream *st, const ProtobufCMessage *m,
                           grpc_status_code code, const char *details);

/* One entry of trailing metadata: a lowercase key and a printable ASCII value. */
struct sbx_grpc_trailer {
    const char *key, *value;
};

#define SBX_GRPC_MAX_TRAILERS 4

/* As sbx_grpc_stream_finish, with n (at most SBX_GRPC_MAX_TRAILERS) entries of trailing
 * metadata sent with the status; copied. */
int sbx_grpc_stream_finish_trailers(struct sbx_grpc_stream *st, const ProtobufCMessage *m,
                                    grpc_status_code code, const char *details,
                                    const struct sbx_grpc_trailer *t, size_t n);

/* True once the call is over (its close was seen) or a send failed. */
bool sbx_grpc_stream_over(struct sbx_grpc_stream *st);

/* The request the stream was made from (its method data, metadata, deadline). */
struct sbx_grpc_req *sbx_grpc_stream_req(struct sbx_grpc_stream *st);
