/* The gRPC adapter's server: gRPC C core, one completion queue served by a few threads, calls
 * accepted per registered method, UNIMPLEMENTED for everything else. */
#pragma once

#include <grpc/grpc.h>
#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>

#include "error.h"

struct sbx_grpc;

/* Every completion-queue tag starts with this; fn runs on a completion-queue thread. */
struct sbx_grpc_tag {
    void (*fn)(struct sbx_grpc_tag *tag, bool ok);
};

/* An accepted call, handed to the method's handler, which owns it from then on. */
struct sbx_grpc_req {
    struct sbx_grpc *srv;
    grpc_call *call;
    grpc_byte_buffer *payload; /* the request, for non-client-streaming methods (may be NULL) */
    grpc_metadata_array md;
    gpr_timespec deadline;
    void *method_data;
};

typedef void (*sbx_grpc_handler)(struct sbx_grpc_req *req);

struct sbx_grpc_method {
    const char *path; /* "/package.Service/Method" */
    bool client_streaming;
    sbx_grpc_handler handler;
    void *data;  /* handed to the handler as req->method_data */
    int backlog; /* calls waiting to be accepted at once */
};

struct sbx_auth;

struct sbx_grpc_opts {
    int max_recv_bytes;
    int max_streams; /* concurrent streams per connection */
    int threads;
    /* When set, every call but those of grpc.health.v1 and server reflection needs the metadata
     * "authorization: Bearer <token>"; UNAUTHENTICATED otherwise. Borrowed. */
    struct sbx_auth *auth;
    /* Run first on each completion-queue thread (where handlers run), when set; a failure is
     * logged and the thread serves anyway. */
    int (*thread_init)(struct sbx_error *err);
};

int sbx_grpc_new(struct sbx_grpc **ret, const struct sbx_grpc_opts *o, struct sbx_error *err);

/* Registers n methods (copied); before sbx_grpc_start. Returns 0 or -errno. */
int sbx_grpc_register(struct sbx_grpc *s, const struct sbx_grpc_method *m, size_t n,
                      struct sbx_error *err);

/* Adds an insecure listening address ("127.0.0.1:9090", "unix:/path"); before sbx_grpc_start. */
int sbx_grpc_listen(struct sbx_grpc *s, const char *addr, struct sbx_error *err);

/* Starts serving and the completion-queue threads. */
int sbx_grpc_start(struct sbx_grpc *s, struct sbx_error *err);

/* Stops accepting calls; done(arg) runs (on a completion-queue thread) once every running call
 * has finished. Does not block. */
void sbx_grpc_shutdown(struct sbx_grpc *s, void (*done)(void *arg), void *arg);

/* Cancels every running call (the shutdown deadline passed). */
void sbx_grpc_cancel_all(struct sbx_grpc *s);

/* Shuts the completion queue down and joins its threads (after sbx_grpc_shutdown): from then on
 * every start of a batch fails (GRPC_CALL_ERROR), as gRPC would abort on a closed queue. */
void sbx_grpc_close(struct sbx_grpc *s);

/* Closes if need be, and frees everything. Calls may still be held until then. */
void sbx_grpc_free(struct sbx_grpc *s);

/* grpc_call_start_batch on req's call, or GRPC_CALL_ERROR once the server is closed; every batch
 * goes through here. The caller handles a failure as a batch completed with ok == false. */
grpc_call_error sbx_grpc_start_batch(struct sbx_grpc_req *req, const grpc_op *ops, size_t n,
                                     struct sbx_grpc_tag *tag);

/* Releases what an accepted call holds (the call itself too). */
void sbx_grpc_req_free(struct sbx_grpc_req *req);

/* Finishes a unary call: reply (when code is OK) and status in one batch, then frees req. */
void sbx_grpc_reply(struct sbx_grpc_req *req, const ProtobufCMessage *reply, grpc_status_code code,
                    const char *details);

/* Like sbx_grpc_reply, for a call whose end the handler already watches (it started a
 * GRPC_OP_RECV_CLOSE_ON_SERVER of its own). */
void sbx_grpc_reply_watched(struct sbx_grpc_req *req, const ProtobufCMessage *reply,
                            grpc_status_code code, const char *details);

/* Decodes a request payload of type d into *ret (free it with protobuf_c_message_free_unpacked).
 * Refused with -EINVAL: a payload missing or malformed ("malformed <Type>"), and one with a NUL
 * byte in a string field ("<field> contains a NUL byte"), which protobuf-c would hand over cut
 * at the NUL. */
int sbx_grpc_decode(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *d,
                    ProtobufCMessage **ret, struct sbx_error *err);

/* sbx_grpc_decode's message, or NULL when it refuses the payload. */
ProtobufCMessage *sbx_grpc_unpack(grpc_byte_buffer *bb, const ProtobufCMessageDescriptor *d);

/* Decodes req's payload, or answers req INVALID_ARGUMENT with why and returns NULL. */
ProtobufCMessage *sbx_grpc_unpack_req(struct sbx_grpc_req *req,
                                      const ProtobufCMessageDescriptor *d);

static inline void sbx_pb_freep(ProtobufCMessage **m)
{
    if (*m)
        protobuf_c_message_free_unpacked(*m, NULL);
}
#define _cleanup_pb_ __attribute__((cleanup(sbx_pb_freep)))

/* Encodes a message into a new byte buffer. */
grpc_byte_buffer *sbx_grpc_pack(const ProtobufCMessage *m);

/* The status for a core error (-errno). */
grpc_status_code sbx_grpc_status(int r);
