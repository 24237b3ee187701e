/* The Connect RPCs of the E2B port: what a service (process.Process, filesystem.Filesystem)
 * registers and what its handlers do with a call. The transport (e2b_rpc.c) reads the request
 * (JSON or binary protobuf, unary or enveloped), checks the access token, resolves the user the
 * request names, and hands the handler a decoded message; the handler answers with
 * sbx_e2b_call_send / _fail / _end, now or later, from any thread. */
#pragma once

#include <protobuf-c/protobuf-c.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct sbx_e2b_call; /* one RPC; opaque */
struct sbx_e2b_server;

/* Runs on a server thread with the decoded request (valid until the handler returns). A unary
 * handler answers once (send or fail), a streaming one sends any number of messages and then
 * ends or fails; either may take a reference and answer later. */
typedef void (*sbx_e2b_fn)(struct sbx_e2b_call *c, const ProtobufCMessage *req);

struct sbx_e2b_method {
    const char *path; /* "/filesystem.Filesystem/Stat" */
    const ProtobufCMessageDescriptor *in, *out;
    bool server_streaming;
    sbx_e2b_fn fn;
    /* Streams: the message sent on a quiet stream every Keepalive-Ping-Interval seconds (the
     * header the SDK sends; envd's ProcessEvent.keepalive and friends); NULL: none. */
    const ProtobufCMessage *keepalive;
    /* The handler applies Connect-Timeout-Ms itself (sbx_e2b_call_timeout_ms: Start's process
     * timeout, as envd treats it); otherwise a stream still open at the deadline fails with
     * deadline_exceeded. */
    bool own_timeout;
    /* Client streams (StreamInput): fn runs for each request message as it arrives (none runs
     * once the call ended), input_end when the request stream ends well; then the handler
     * answers with one send, or fails. Per-call state: sbx_e2b_call_set_data. */
    bool client_streaming;
    void (*input_end)(struct sbx_e2b_call *c);
};

/* Services export their table, e.g. `extern const struct sbx_e2b_method sbx_e2b_fs_methods[];
 * extern const size_t sbx_e2b_fs_n_methods;`, listed in e2b_server.c's `services`. State
 * comes from the server (sbx_e2b_call_server, e2b_server.h: its opts). */

/* The user a request names (Authorization: Basic base64(user:)), or the default user. */
struct sbx_e2b_user {
    char name[64];
    uid_t uid;
    gid_t gid;
    char home[512];
    char shell[256];
    gid_t groups[64]; /* supplementary groups (getgrouplist) */
    size_t n_groups;
};

const struct sbx_e2b_user *sbx_e2b_call_user(struct sbx_e2b_call *c);
struct sbx_e2b_server *sbx_e2b_call_server(struct sbx_e2b_call *c);
/* State of the handler's for this call, freed (free_fn, when not NULL) with the call. */
void sbx_e2b_call_set_data(struct sbx_e2b_call *c, void *data, void (*free_fn)(void *));
void *sbx_e2b_call_data(struct sbx_e2b_call *c);
/* Connect-Timeout-Ms; 0 when the request set none. */
uint64_t sbx_e2b_call_timeout_ms(struct sbx_e2b_call *c);

/* A unary call's answer, or one message of a stream. Any thread. -EPIPE once the call ended
 * or the client went away; -ENOBUFS when a stream's unsent messages exceed the hard bound (the
 * call then fails resource_exhausted); -ENOMEM, -EINVAL (no encoding: the call then fails
 * internal). A message that cannot go always ends the call: no client waits for it. */
int sbx_e2b_call_send(struct sbx_e2b_call *c, const ProtobufCMessage *m);
/* Ends the call with an error (enum sbx_connect_code); a no-op once it ended. Any thread. */
__attribute__((format(printf, 3, 4))) void
sbx_e2b_call_fail(struct sbx_e2b_call *c, int connect_code, const char *fmt, ...);
/* A stream ends well. Any thread. */
void sbx_e2b_call_end(struct sbx_e2b_call *c);

/* Streams outliving the handler. */
struct sbx_e2b_call *sbx_e2b_call_ref(struct sbx_e2b_call *c);
void sbx_e2b_call_unref(struct sbx_e2b_call *c);
/* The client went away (or the call ended). */
bool sbx_e2b_call_gone(struct sbx_e2b_call *c);
/* fn(arg) runs once when the request is over: the client went away, or the answer has been
 * sent (at once if it is over already), unless sbx_e2b_call_off_gone disarmed it first: so a
 * reference given to fn is dropped by exactly one of the two. One callback per call; on a
 * server thread, without the call's lock. Returns true. */
bool sbx_e2b_call_on_gone(struct sbx_e2b_call *c, void (*fn)(void *), void *arg);
/* Disarms the callback of on_gone: true when it was armed (it will not run), false when it ran,
 * runs now, or was never armed. */
bool sbx_e2b_call_off_gone(struct sbx_e2b_call *c);
/* Flow control of a stream: false while its unsent messages exceed the soft bound; then
 * fn(arg) runs once (on a server thread, without the call's lock) when they have been handed
 * to the socket, or the call is gone. Returns true (fn not armed) when there is room. */
bool sbx_e2b_call_writable(struct sbx_e2b_call *c, void (*fn)(void *), void *arg);
