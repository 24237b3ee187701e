/* Reading a request's arguments and headers, and answering it: JSON bodies, errors (one table
 * from errno to status and code), empty answers, each held back until the body has ended; and
 * releasing what an upload holds. */
#include "http_request.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "http_multipart.h"
#include "metrics.h"
#include "tar.h"

enum MHD_Result sbx_http_queue(struct hctx *c, unsigned status, struct MHD_Response *resp)
{
    enum MHD_Result ret;

    if (!resp)
        return MHD_NO;
    c->r->responded = true;
    sbx_metrics_request(SBX_METRIC_HTTP, (int)status);
    if (!c->body_done) {
        /* libmicrohttpd hangs the connection when a response is queued while body remains:
         * keep it for the call that ends the body, and drop the body meanwhile. */
        c->r->pending = resp;
        c->r->pending_status = status;
        return MHD_YES;
    }
    ret = MHD_queue_response(c->conn, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

struct MHD_Response *sbx_http_json_response(json_t *body)
{
    struct MHD_Response *resp;
    char *text = json_dumps(body, JSON_COMPACT);
    char *nl;
    size_t len;

    json_decref(body);
    if (!text)
        return NULL;
    len = strlen(text);
    nl = realloc(text, len + 2);
    if (!nl) {
        free(text);
        return NULL;
    }
    text = nl;
    text[len++] = '\n';
    text[len] = '\0';
    resp = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(text);
        return NULL;
    }
    MHD_add_response_header(resp, "Content-Type", "application/json");
    return resp;
}

enum MHD_Result sbx_http_respond_json(struct hctx *c, unsigned status, json_t *body)
{
    return sbx_http_queue(c, status, sbx_http_json_response(body));
}

enum MHD_Result sbx_http_respond_error(struct hctx *c, unsigned status, const char *code,
                                       const char *msg)
{
    json_t *body = json_pack("{s:s, s:s}", "code", code, "message", msg);
    char safe[512];
    size_t i;

    if (!body) {
        /* The message quotes a client's bytes that are not UTF-8, which JSON cannot carry:
         * they become '?' (an answer without a body would leave the request unanswered). */
        for (i = 0; msg[i] && i < sizeof(safe) - 1; i++)
            safe[i] = (unsigned char)msg[i] < 0x80 ? msg[i] : '?';
        safe[i] = '\0';
        body = json_pack("{s:s, s:s}", "code", code, "message", safe);
    }
    return sbx_http_respond_json(c, status, body);
}

enum MHD_Result sbx_http_respond_empty(struct hctx *c, unsigned status)
{
    return sbx_http_queue(c, status,
                          MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT));
}

/* One table from errno to HTTP status and error code. */
static const struct {
    int err;
    unsigned status;
    const char *code;
} errno_map[] = {
    {EXDEV, 403, "PERMISSION_DENIED"},
    {EACCES, 403, "PERMISSION_DENIED"},
    {EPERM, 403, "PERMISSION_DENIED"},
    {ENOENT, 404, "NOT_FOUND"},
    {EISDIR, 400, "INVALID_ARGUMENT"},
    {EINVAL, 400, "INVALID_ARGUMENT"},
    {ENOTDIR, 400, "INVALID_ARGUMENT"},
    {ENAMETOOLONG, 400, "INVALID_ARGUMENT"},
    {ELOOP, 400, "INVALID_ARGUMENT"},
    {ENOTEMPTY, 409, "CONFLICT"},
    {EBUSY, 409, "CONFLICT"},
    {EEXIST, 409, "CONFLICT"},
    {ENOSPC, 507, "INSUFFICIENT_STORAGE"},
    {EDQUOT, 507, "INSUFFICIENT_STORAGE"},
    {EFBIG, 413, "PAYLOAD_TOO_LARGE"},
    {EROFS, 403, "PERMISSION_DENIED"},
};

enum MHD_Result sbx_http_respond_errno(struct hctx *c, int r, const struct sbx_error *e)
{
    const char *msg = e && e->msg[0] ? e->msg : strerror(-r);

    for (size_t i = 0; i < SBX_ARRAY_SIZE(errno_map); i++) {
        if (errno_map[i].err != -r)
            continue;
        if (-r == EXDEV)
            msg = "path traversal outside sandbox root is forbidden";
        else if (-r == EACCES || -r == EPERM)
            msg = "permission denied";
        return sbx_http_respond_error(c, errno_map[i].status, errno_map[i].code, msg);
    }
    return sbx_http_respond_error(c, 500, "INTERNAL", msg);
}

const char *sbx_http_arg(struct hctx *c, const char *name)
{
    return MHD_lookup_connection_value(c->conn, MHD_GET_ARGUMENT_KIND, name);
}

const char *sbx_http_header(struct hctx *c, const char *name)
{
    return MHD_lookup_connection_value(c->conn, MHD_HEADER_KIND, name);
}

void sbx_http_upload_release(struct hreq *r)
{
    sbx_multipart_free(r->mp);
    r->mp = NULL;
    sbx_fs_writer_abort(r->w);
    r->w = NULL;
    sbx_tar_unpack_free(r->tar);
    r->tar = NULL;
    sbx_closep(&r->tar_dirfd);
    r->tar_dirfd = -1;
}
