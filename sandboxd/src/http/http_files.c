/* The REST files API: GET/HEAD/PUT/DELETE /v1/files/{path} (files, directory listings, tar
 * archives), GET /v1/stat/{path}, PUT /v1/dirs/{path}, POST /v1/move. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cleanup.h"
#include "http_args.h"
#include "http_download.h"
#include "http_files.h"
#include "http_multipart.h"
#include "http_request.h"
#include "metrics.h"
#include "utf8.h"
#include "tar.h"

#define MAX_JSON_BODY (64 * 1024)
#define TAR_BLOCK     (64 * 1024)

static const char *const not_found = "path does not exist within the sandbox";

static enum MHD_Result respond_fs_error(struct hctx *c, int r, struct sbx_error *e)
{
    if (r == -ENOENT)
        snprintf(e->msg, sizeof(e->msg), "%s", not_found);
    return sbx_http_respond_errno(c, r, e);
}

static const char *type_name(mode_t m)
{
    return S_ISDIR(m) ? "directory" : "file";
}

/* Sets obj[key] to the name s (a file name: any bytes but NUL). JSON carries only UTF-8: bytes
 * that are not become U+FFFD there, as the reference's encoder writes them, and obj[key_base64]
 * carries the exact bytes, so that a client can still name the file (percent-encoding them). */
static void set_name(json_t *obj, const char *key, const char *prefix, const char *s)
{
    _cleanup_free_ char *full = NULL, *clean = NULL;
    char b64key[64];

    if (!obj || asprintf(&full, "%s%s", prefix, s) < 0) {
        full = NULL;
        return;
    }
    if (sbx_utf8_valid(full)) {
        json_object_set_new(obj, key, json_string(full));
        return;
    }
    clean = sbx_utf8_sanitize(full);
    if (clean)
        json_object_set_new(obj, key, json_string(clean));
    size_t n = strlen(full);
    _cleanup_free_ unsigned char *b64 = malloc(4 * ((n + 2) / 3) + 1);
    if (!b64)
        return;
    EVP_EncodeBlock(b64, (const unsigned char *)full, (int)n);
    snprintf(b64key, sizeof(b64key), "%s_base64", key);
    json_object_set_new(obj, b64key, json_string((const char *)b64));
}

/* RFC 3339 UTC with second precision. */
static void format_time(time_t t, char buf[32])
{
    struct tm tm;

    gmtime_r(&t, &tm);
    strftime(buf, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static json_t *entry_json(const char *name, const struct stat *st)
{
    char when[32], mode[8];
    json_t *j;

    format_time(st->st_mtim.tv_sec, when);
    snprintf(mode, sizeof(mode), "%04o", (unsigned)(st->st_mode & 0777)); /* as the reference */
    j = json_pack("{s:I, s:s, s:s, s:s}", "size", (json_int_t)st->st_size, "type",
                  type_name(st->st_mode), "modified_at", when, "mode", mode);
    set_name(j, "name", "", name);
    return j;
}

static enum MHD_Result list_dir(struct hctx *c, int fd)
{
    struct sbx_fs_entry *e = NULL;
    struct sbx_error err = {0};
    size_t n = 0;
    json_t *entries;
    int r = sbx_fs_list(c->h->o.root, c->path, fd, &e, &n, &err);

    if (r < 0)
        return respond_fs_error(c, r, &err);
    entries = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(entries, entry_json(e[i].name, &e[i].st));
    sbx_fs_entries_free(e, n);
    json_t *j = json_object();
    set_name(j, "path", c->path[0] == '/' ? "" : "/", c->path);
    if (j)
        json_object_set_new(j, "entries", entries);
    else
        json_decref(entries);
    return sbx_http_respond_json(c, 200, j);
}

static ssize_t tar_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct sbx_error err = {0};
    ssize_t n = sbx_tar_pack_read(cls, buf, max, &err);

    (void)pos;
    if (n < 0)
        return MHD_CONTENT_READER_END_WITH_ERROR;
    if (n == 0)
        return MHD_CONTENT_READER_END_OF_STREAM;
    sbx_metrics_bytes_out((uint64_t)n);
    return n;
}

static void tar_free(void *cls)
{
    sbx_tar_pack_free(cls);
}

static enum MHD_Result send_tar(struct hctx *c, int fd)
{
    struct sbx_tar_pack *p = NULL;
    struct sbx_error err = {0};
    struct MHD_Response *resp;
    int r;

    r = sbx_tar_pack_new(fd, &p, &err);
    if (r < 0)
        return respond_fs_error(c, r, &err);
    if (strcmp(c->method, "HEAD") == 0) {
        /* libmicrohttpd 0.9.75 ends a HEAD answer of unknown length with the last chunk of a
         * chunked body ("0\r\n\r\n"), which the client then reads as the start of the next
         * answer on the connection: headers only, from an empty response. */
        sbx_tar_pack_free(p);
        resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        if (resp)
            MHD_add_response_header(resp, "Content-Type", "application/x-tar");
        return sbx_http_queue(c, 200, resp);
    }
    resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, TAR_BLOCK, tar_read, p, tar_free);
    if (!resp) {
        sbx_tar_pack_free(p);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "application/x-tar");
    return sbx_http_queue(c, 200, resp);
}

static bool wants_tar(struct hctx *c)
{
    const char *a = sbx_http_arg(c, "archive");
    return a && strcmp(a, "tar") == 0;
}

static enum MHD_Result get_file(struct hctx *c)
{
    struct sbx_error err = {0};
    struct stat st;
    enum MHD_Result ret;
    int fd = sbx_fs_open(c->h->o.root, c->path, &st, &err);

    if (fd < 0)
        return respond_fs_error(c, fd, &err);
    if (S_ISDIR(st.st_mode)) {
        ret = wants_tar(c) ? send_tar(c, fd) : list_dir(c, fd);
        close(fd);
        return ret;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return sbx_http_respond_error(c, 400, "INVALID_ARGUMENT", "not a regular file");
    }
    return sbx_http_send_file(c, fd, &st);
}

static enum MHD_Result delete_file(struct hctx *c)
{
    const char *rec = sbx_http_arg(c, "recursive");
    struct sbx_error err = {0};
    bool recursive = false;
    struct stat st;
    char *target = NULL, msg[160];
    int r = sbx_fs_lstat(c->h->o.root, c->path, &st, &target, &err);

    free(target);
    if (r < 0)
        return respond_fs_error(c, r, &err);
    if (rec && rec[0] && sbx_http_parse_bool(rec, &recursive) < 0) {
        snprintf(msg, sizeof(msg), "recursive \"%.100s\" must be a boolean", rec);
        return sbx_http_respond_error(c, 400, "INVALID_ARGUMENT", msg);
    }
    r = sbx_fs_delete(c->h->o.root, c->path, recursive, &err);
    if (r < 0)
        return respond_fs_error(c, r, &err);
    return sbx_http_respond_empty(c, 204);
}

/* --- uploads --- */

static int write_part(void *cls, const char *data, size_t len, struct sbx_error *err)
{
    return sbx_fs_writer_write(cls, data, len, err);
}

static bool is_multipart(struct hctx *c)
{
    const char *ct = sbx_http_header(c, "Content-Type");
    return ct && strncasecmp(ct, "multipart/form-data", 19) == 0;
}

/* Checks the request and opens what the body goes into. Returns 0 or an HTTP status already
 * answered (as -1). */
static int upload_begin(struct hctx *c)
{
    struct hreq *r = c->r;
    const char *m = sbx_http_arg(c, "mode"), *cl = sbx_http_header(c, "Content-Length");
    mode_t mode = 0644;
    char msg[160], boundary[SBX_MULTIPART_BOUNDARY_MAX + 1];
    int rc;

    if (m && m[0] && sbx_http_parse_mode(m, &mode) < 0) {
        snprintf(msg, sizeof(msg), "mode \"%.100s\" must match ^0[0-7]{3}$", m);
        sbx_http_respond_error(c, 400, "INVALID_ARGUMENT", msg);
        return -1;
    }
    if (c->h->o.max_upload_bytes && cl && strtoull(cl, NULL, 10) > c->h->o.max_upload_bytes) {
        sbx_http_respond_error(c, 413, "PAYLOAD_TOO_LARGE", "body larger than --max-upload-bytes");
        return -1;
    }
    if (wants_tar(c)) {
        rc = sbx_fs_open_dir(c->h->o.root, c->path, true, &r->err);
        if (rc >= 0) {
            r->tar_dirfd = rc;
            rc = sbx_tar_unpack_new(r->tar_dirfd, &r->tar, &r->err);
        }
    } else {
        rc = sbx_fs_writer_begin(c->h->o.root, c->path, mode, &r->w, &r->err);
        if (rc == 0 && is_multipart(c)) {
            if (sbx_multipart_boundary(sbx_http_header(c, "Content-Type"), boundary) < 0) {
                sbx_http_upload_release(r);
                sbx_http_respond_error(c, 400, "INVALID_ARGUMENT",
                                       "invalid multipart body: no multipart boundary param in "
                                       "Content-Type");
                return -1;
            }
            rc = sbx_multipart_new(boundary, write_part, r->w, &r->mp, &r->err);
        }
    }
    if (rc < 0) {
        sbx_http_upload_release(r);
        respond_fs_error(c, rc, &r->err);
        return -1;
    }
    return 0;
}

static int upload_feed(struct hctx *c, const char *data, size_t n)
{
    struct hreq *r = c->r;

    if (r->tar)
        return sbx_tar_unpack_write(r->tar, data, n, &r->err);
    if (!r->w)
        return sbx_error_set(&r->err, EIO, "no upload open");
    if (r->mp)
        return sbx_multipart_feed(r->mp, data, n, &r->err);
    return sbx_fs_writer_write(r->w, data, n, &r->err);
}

static enum MHD_Result upload_finish(struct hctx *c)
{
    struct hreq *r = c->r;
    uint8_t sha[SBX_SHA256_LEN];
    char hex[2 * SBX_SHA256_LEN + 1], b64[64], buf[96];
    struct MHD_Response *resp;
    uint64_t size = 0;
    int rc;

    /* A refused body leaves nothing behind by the time the answer is read: its temp file (or
     * the tar entry in progress) goes before the answer is queued. */
    if (r->tar) {
        rc = sbx_tar_unpack_finish(r->tar, &r->err);
        if (rc < 0) {
            sbx_http_upload_release(r);
            return respond_fs_error(c, rc, &r->err);
        }
        return sbx_http_respond_json(c, 200, json_pack("{s:I}", "entries", (json_int_t)rc));
    }
    if (r->mp) {
        rc = sbx_multipart_finish(r->mp, &r->err);
        if (rc < 0) {
            sbx_http_upload_release(r);
            return respond_fs_error(c, rc, &r->err);
        }
    }
    rc = sbx_fs_writer_commit(TAKE_PTR(r->w), &size, sha, &r->err);
    if (rc < 0)
        return respond_fs_error(c, rc, &r->err);
    for (size_t i = 0; i < SBX_SHA256_LEN; i++)
        snprintf(hex + 2 * i, 3, "%02x", sha[i]);
    EVP_EncodeBlock((unsigned char *)b64, sha, SBX_SHA256_LEN);
    resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!resp)
        return MHD_NO;
    snprintf(buf, sizeof(buf), "%" PRIu64, size);
    MHD_add_response_header(resp, "X-Sandboxd-Size", buf);
    MHD_add_response_header(resp, "X-Sandboxd-Sha256", hex);
    snprintf(buf, sizeof(buf), "sha-256=:%s:", b64);
    MHD_add_response_header(resp, "Repr-Digest", buf);
    return sbx_http_queue(c, 204, resp);
}

static enum MHD_Result put_file(struct hctx *c)
{
    struct hreq *r = c->r;
    size_t n = *c->upload_data_size;
    int rc;

    if (!r->began) {
        r->began = true;
        /* Refused: answered, or, when not even an answer could be made, the connection is
         * dropped; either way no byte of the body goes anywhere. */
        if (upload_begin(c) < 0)
            return r->responded ? MHD_YES : MHD_NO;
    }
    if (n == 0)
        return upload_finish(c);
    *c->upload_data_size = 0;
    r->received += n;
    sbx_metrics_bytes_in(n);
    if (c->h->o.max_upload_bytes && r->received > c->h->o.max_upload_bytes) {
        sbx_http_upload_release(r);
        return sbx_http_respond_error(c, 413, "PAYLOAD_TOO_LARGE",
                                      "body larger than --max-upload-bytes");
    }
    rc = upload_feed(c, c->upload_data, n);
    if (rc < 0) {
        sbx_http_upload_release(r);
        return respond_fs_error(c, rc, &r->err);
    }
    return MHD_YES;
}

enum MHD_Result sbx_http_files(struct hctx *c)
{
    if (strcmp(c->method, "PUT") == 0)
        return put_file(c);
    if (strcmp(c->method, "DELETE") == 0)
        return delete_file(c);
    return get_file(c);
}

/* --- beyond the reference --- */

static const char *stat_type(mode_t m)
{
    if (S_ISREG(m))
        return "file";
    if (S_ISDIR(m))
        return "directory";
    if (S_ISLNK(m))
        return "symlink";
    return "other";
}

enum MHD_Result sbx_http_stat(struct hctx *c)
{
    struct sbx_error err = {0};
    _cleanup_free_ char *target = NULL;
    char when[32], mode[8];
    struct stat st;
    json_t *j;
    const char *name = strrchr(c->path, '/');
    int r = sbx_fs_lstat(c->h->o.root, c->path, &st, &target, &err);

    if (r < 0)
        return respond_fs_error(c, r, &err);
    format_time(st.st_mtim.tv_sec, when);
    snprintf(mode, sizeof(mode), "%04o", (unsigned)(st.st_mode & 07777));
    j = json_pack("{s:s, s:I, s:s, s:I, s:I, s:s}", "type", stat_type(st.st_mode), "size",
                  (json_int_t)st.st_size, "mode", mode, "uid", (json_int_t)st.st_uid, "gid",
                  (json_int_t)st.st_gid, "modified_at", when);
    set_name(j, "path", "/", c->path);
    set_name(j, "name", "", name ? name + 1 : c->path);
    if (target)
        set_name(j, "symlink_target", "", target);
    return sbx_http_respond_json(c, 200, j);
}

enum MHD_Result sbx_http_dirs(struct hctx *c)
{
    const char *m = sbx_http_arg(c, "mode"), *p = sbx_http_arg(c, "parents");
    struct sbx_error err = {0};
    bool parents = false;
    mode_t mode = 0755;
    int r;

    if (!c->r->began) {
        c->r->began = true;
        if (*c->upload_data_size)
            return sbx_http_respond_error(c, 400, "INVALID_ARGUMENT", "no body expected");
    }
    *c->upload_data_size = 0;
    if (m && m[0] && sbx_http_parse_mode(m, &mode) < 0)
        return sbx_http_respond_error(c, 400, "INVALID_ARGUMENT", "mode must match ^0[0-7]{3}$");
    if (p && p[0] && sbx_http_parse_bool(p, &parents) < 0)
        return sbx_http_respond_error(c, 400, "INVALID_ARGUMENT", "parents must be a boolean");
    r = sbx_fs_mkdir(c->h->o.root, c->path, mode, parents, &err);
    if (r < 0)
        return respond_fs_error(c, r, &err);
    return sbx_http_respond_empty(c, 201);
}

enum MHD_Result sbx_http_move(struct hctx *c)
{
    struct hreq *r = c->r;
    struct sbx_error err = {0};
    const char *from = NULL, *to = NULL;
    bool overwrite = false;
    int rc;
    json_t *j;
    size_t n = *c->upload_data_size;

    if (n) {
        char *nb;
        *c->upload_data_size = 0;
        if (r->body_len + n > MAX_JSON_BODY)
            return sbx_http_respond_error(c, 413, "PAYLOAD_TOO_LARGE", "body larger than 64 KiB");
        nb = realloc(r->body, r->body_len + n + 1);
        if (!nb)
            return MHD_NO;
        r->body = nb;
        memcpy(r->body + r->body_len, c->upload_data, n);
        r->body_len += n;
        r->body[r->body_len] = '\0';
        return MHD_YES;
    }
    j = sbx_http_parse_move(r->body, r->body_len, &from, &to, &overwrite);
    if (!j)
        return sbx_http_respond_error(c, 400, "INVALID_ARGUMENT",
                                      "body must be {\"from\": string, \"to\": string, "
                                      "\"overwrite\": bool}");
    rc = sbx_fs_move(c->h->o.root, from, to, overwrite, &err);
    json_decref(j);
    if (rc < 0)
        return respond_fs_error(c, rc, &err);
    return sbx_http_respond_empty(c, 204);
}
