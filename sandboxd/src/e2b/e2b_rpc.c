/* The Connect route of the E2B port on libmicrohttpd: unary calls (application/json,
 * application/proto), server streams (application/connect+json, +proto: one enveloped request,
 * enveloped answers, the end-of-stream message) and client streams (enveloped requests handed
 * over as they arrive). Checks the head (type, version, timeout, keepalive), reads the body
 * within the size limit, resolves the user and runs the method's handler (e2b_call.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "e2b_call.h"
#include "e2b_internal.h"
#include "http_request.h"
#include "metrics.h"
#include "parse.h"
/* ------------------------------------------------------------------------------------------ */
/* The route */

static const char *header(struct hctx *hc, const char *name, size_t *len)
{
    const char *v = NULL;

    if (MHD_lookup_connection_value_n(hc->conn, MHD_HEADER_KIND, name, strlen(name), &v, len) !=
        MHD_YES)
        return NULL;
    return v;
}

/* The head's checks: content type, protocol version, timeout, keepalive, method. The first
 * refusal is kept in c->early_*. Returns false when the type itself is refused (415). */
static bool check_head(struct hctx *hc, struct sbx_e2b_call *c, char *path)
{
    struct sbx_error e = {0};
    const char *v;
    size_t n = 0;
    long long ka;

    v = header(hc, "Content-Type", &n);
    if (!v || sbx_connect_type_parse(v, n, &c->type, &e) < 0)
        return false;
    c->m = sbx_e2b_method_find(path);
    if (c->m && (c->m->server_streaming || c->m->client_streaming) != c->type.streaming)
        c->m = NULL; /* the wrong kind of call: as an unknown method, below */
    if (!c->m) {
        /* The kind of answer follows the request's type. */
        static const struct sbx_e2b_method unknown_stream = {.server_streaming = true};
        static const struct sbx_e2b_method unknown_unary = {.server_streaming = false};
        c->m = c->type.streaming ? &unknown_stream : &unknown_unary;
        c->early_code = SBX_CONNECT_UNIMPLEMENTED;
        snprintf(c->early_msg, sizeof(c->early_msg), "%.200s is not implemented", path);
        return true;
    }
    if (strcmp(hc->method, "POST") != 0) {
        c->early_code = SBX_CONNECT_UNIMPLEMENTED;
        snprintf(c->early_msg, sizeof(c->early_msg), "only POST is served");
    } else if ((v = header(hc, "Connect-Protocol-Version", &n)) &&
               sbx_connect_version_check(v, n, &e) < 0) {
        c->early_code = SBX_CONNECT_INVALID_ARGUMENT;
        snprintf(c->early_msg, sizeof(c->early_msg), "%s", e.msg);
    } else if ((v = header(hc, "Connect-Timeout-Ms", &n)) &&
               sbx_connect_timeout_parse(v, n, &c->timeout_ms, &e) < 0) {
        c->early_code = SBX_CONNECT_INVALID_ARGUMENT;
        snprintf(c->early_msg, sizeof(c->early_msg), "%s", e.msg);
    } else if (c->m->keepalive && (v = sbx_http_header(hc, "Keepalive-Ping-Interval"))) {
        if (sbx_parse_int(v, 1, SBX_E2B_MAX_KEEPALIVE_S, &ka) < 0) {
            c->early_code = SBX_CONNECT_INVALID_ARGUMENT;
            snprintf(c->early_msg, sizeof(c->early_msg),
                     "Keepalive-Ping-Interval must be 1 to %d seconds", SBX_E2B_MAX_KEEPALIVE_S);
        } else {
            c->keepalive_ms = (uint64_t)ka * 1000;
        }
    }
    return true;
}

/* The first call of the access handler: the head. */
static enum MHD_Result begin(struct hctx *hc)
{
    struct sbx_e2b_call *c;
    enum MHD_Result ret;
    char path[256];
    struct MHD_Response *resp;

    hc->r->began = true;
    if (!sbx_e2b_authorized(hc, &ret))
        return ret;
    snprintf(path, sizeof(path), "%s%s", hc->r->route->prefix, hc->path);
    c = sbx_e2b_call_new(hc);
    if (!c)
        return MHD_NO;
    if (!check_head(hc, c, path)) {
        resp = sbx_http_json_response(
            json_pack("{s:s, s:s}", "code", "unknown", "message",
                      "unsupported content type: application/json, application/proto, "
                      "application/connect+json or application/connect+proto"));
        if (resp)
            MHD_add_response_header(resp, "Accept-Post",
                                    "application/json, application/proto, "
                                    "application/connect+json, application/connect+proto");
        return sbx_http_queue(hc, 415, resp);
    }
    return MHD_YES;
}

/* The request's message: the body, or a stream's one envelope. */
static int request_message(struct hctx *hc, struct sbx_e2b_call *c, ProtobufCMessage **ret,
                           char *msg, size_t len)
{
    struct sbx_connect_reader rd;
    struct sbx_connect_msg m;
    struct sbx_error e = {0};
    const uint8_t *body = (const uint8_t *)hc->r->body;
    size_t n = hc->r->body_len, used = 0;
    int r;

    if (!c->type.streaming)
        return sbx_e2b_call_decode(c, body ? body : (const uint8_t *)"", n, ret, msg, len);
    sbx_connect_reader_init(&rd, c->srv->o.max_message_bytes);
    r = sbx_connect_reader_feed(&rd, body ? body : (const uint8_t *)"", n, &used, &m, &e);
    if (r == 1 && m.flags != 0) {
        snprintf(msg, len, "%s",
                 m.flags & SBX_CONNECT_FLAG_COMPRESSED
                     ? "compressed messages are not supported"
                     : "an end-of-stream message from the client");
        r = -EPROTO;
    } else if (r == 1 && used != n) {
        snprintf(msg, len, "a server stream takes one request message");
        r = -EPROTO;
    } else if (r == 1) {
        r = sbx_e2b_call_decode(c, m.data, m.len, ret, msg, len);
    } else if (r == 0) {
        snprintf(msg, len, "%s",
                 sbx_connect_reader_finish(&rd, &e) < 0 ? e.msg : "no request message");
        r = -EPROTO;
    } else {
        snprintf(msg, len, "%s", e.msg);
    }
    sbx_connect_reader_release(&rd);
    return r;
}

/* The body is whole: decode, run the handler, answer or wait. */
static enum MHD_Result dispatch(struct hctx *hc, struct sbx_e2b_call *c)
{
    ProtobufCMessage *req = NULL;
    char msg[512];
    int r;

    if (c->early_code)
        return sbx_e2b_call_respond_error(hc, c, c->early_code, c->early_msg);
    if (c->too_large)
        return sbx_e2b_call_respond_error(hc, c, SBX_CONNECT_RESOURCE_EXHAUSTED,
                                          "request message larger than the limit");
    if ((r = request_message(hc, c, &req, msg, sizeof(msg))) < 0)
        return sbx_e2b_call_respond_error(
            hc, c, r == -EMSGSIZE ? SBX_CONNECT_RESOURCE_EXHAUSTED : SBX_CONNECT_INVALID_ARGUMENT,
            msg);
    sbx_metrics_bytes_in(hc->r->body_len);
    if (sbx_e2b_user_of(hc, &c->user, msg, sizeof(msg)) < 0) {
        protobuf_c_message_free_unpacked(req, NULL);
        return sbx_e2b_call_respond_error(hc, c, SBX_CONNECT_UNAUTHENTICATED, msg);
    }
    if (c->m->server_streaming) {
        if (c->timeout_ms && !c->m->own_timeout)
            c->deadline_ms = c->last_send_ms + c->timeout_ms;
        sbx_e2b_call_arm(c);
    }
    c->m->fn(c, req);
    protobuf_c_message_free_unpacked(req, NULL);
    return sbx_e2b_call_respond(hc, c);
}

/* A client stream's bytes: each whole message goes to the handler as it arrives. */
static void feed_input(struct hctx *hc, struct sbx_e2b_call *c, const uint8_t *p, size_t n)
{
    struct sbx_error e = {0};
    struct sbx_connect_msg m;
    ProtobufCMessage *req = NULL;
    char msg[512];
    size_t used = 0;
    int r;

    while (n && !sbx_e2b_call_gone(c)) {
        r = sbx_connect_reader_feed(&c->rd, p, n, &used, &m, &e);
        if (r < 0) {
            sbx_e2b_call_fail(
                c, r == -EMSGSIZE ? SBX_CONNECT_RESOURCE_EXHAUSTED : SBX_CONNECT_INVALID_ARGUMENT,
                "%s", e.msg);
            return;
        }
        p += used;
        n -= used;
        if (r == 0)
            return;
        if (m.flags) {
            sbx_e2b_call_fail(c, SBX_CONNECT_INVALID_ARGUMENT, "%s",
                              m.flags & SBX_CONNECT_FLAG_COMPRESSED
                                  ? "compressed messages are not supported"
                                  : "an end-of-stream message from the client");
            return;
        }
        if (sbx_e2b_call_decode(c, m.data, m.len, &req, msg, sizeof(msg)) < 0) {
            sbx_e2b_call_fail(c, SBX_CONNECT_INVALID_ARGUMENT, "%s", msg);
            return;
        }
        sbx_metrics_bytes_in(m.len);
        c->m->fn(c, req);
        protobuf_c_message_free_unpacked(req, NULL);
    }
    (void)hc;
}

/* A client stream's request has begun (its head passed): the checks a unary call makes on its
 * whole body are made here, before the first message. False when it is answered already. */
static bool begin_input(struct hctx *hc, struct sbx_e2b_call *c)
{
    char msg[512];

    c->dispatched = true;
    if (c->early_code) {
        sbx_e2b_call_fail(c, c->early_code, "%s", c->early_msg);
        return false;
    }
    if (sbx_e2b_user_of(hc, &c->user, msg, sizeof(msg)) < 0) {
        sbx_e2b_call_fail(c, SBX_CONNECT_UNAUTHENTICATED, "%s", msg);
        return false;
    }
    sbx_connect_reader_init(&c->rd, c->srv->o.max_message_bytes);
    c->rd_on = true;
    return true;
}

/* Every call of the access handler for a client stream. */
static enum MHD_Result client_stream(struct hctx *hc, struct sbx_e2b_call *c)
{
    struct sbx_error e = {0};
    size_t n = *hc->upload_data_size;

    if (!c->dispatched && !begin_input(hc, c) && !n)
        return sbx_e2b_call_respond(hc, c);
    if (n) {
        *hc->upload_data_size = 0;
        if (c->rd_on)
            feed_input(hc, c, (const uint8_t *)hc->upload_data, n);
        return MHD_YES; /* the rest of a failed call's body is dropped */
    }
    hc->body_done = true;
    if (c->rd_on && !sbx_e2b_call_gone(c)) {
        if (sbx_connect_reader_finish(&c->rd, &e) < 0)
            sbx_e2b_call_fail(c, SBX_CONNECT_INVALID_ARGUMENT, "%s", e.msg);
        else
            c->m->input_end(c);
    }
    /* The answer is there (the handlers here answer at once): one message and the end. */
    return sbx_e2b_call_respond(hc, c);
}

enum MHD_Result sbx_e2b_connect_route(struct hctx *hc)
{
    struct sbx_e2b_call *c = hc->r->state;
    size_t n = *hc->upload_data_size;
    char *nb;

    if (!hc->r->began) {
        enum MHD_Result ret = begin(hc);
        if (hc->r->responded || ret != MHD_YES)
            return ret;
        c = hc->r->state; /* and on with what body came with the head */
    }
    if (!c)
        return MHD_NO;
    if (c->m->client_streaming && !c->early_code)
        return client_stream(hc, c);
    if (c->dispatched) { /* a unary call resumed with its answer */
        hc->body_done = true;
        return sbx_e2b_call_respond(hc, c);
    }
    if (n) {
        *hc->upload_data_size = 0;
        if (c->too_large ||
            hc->r->body_len + n > c->srv->o.max_message_bytes + SBX_CONNECT_PREFIX_LEN) {
            c->too_large = true; /* the rest is dropped; answered at the end */
            return MHD_YES;
        }
        nb = realloc(hc->r->body, hc->r->body_len + n + 1);
        if (!nb)
            return MHD_NO;
        hc->r->body = nb;
        memcpy(hc->r->body + hc->r->body_len, hc->upload_data, n);
        hc->r->body_len += n;
        return MHD_YES;
    }
    hc->body_done = true;
    c->dispatched = true;
    return dispatch(hc, c);
}
