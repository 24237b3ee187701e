/* GET /files (download) and POST /files (upload) of the E2B port, as envd's spec has them
 * (e2b-dev/infra packages/envd/spec/envd.yaml): the file is named by the `path` query parameter
 * (resolved from the user's home as envd does) or, in a multipart upload of several files, by
 * each "file" part's filename; the user by `username` (else the Authorization header's, else
 * the default one). Every file is opened, created and renamed into place as that user
 * (core/userfs.h), so their permissions decide and what is written is theirs. Uploads stream:
 * a multipart body through the incremental parser, each part into its own temp file; a gzip
 * body (Content-Encoding, as the SDK sends with gzip=True) inflated as it comes; nothing is
 * held in memory but the answer's list. Errors are envd's JSON ({"code","message"}). */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>
#include <zlib.h>

#include "cleanup.h"
#include "e2b_fs_internal.h"
#include "e2b_internal.h"
#include "http_download.h"
#include "http_multipart.h"
#include "http_request.h"
#include "metrics.h"
#include "utf8.h"

#define MAX_META      256          /* X-Metadata-* headers (their total size is bounded too) */
#define MAX_FILES     1000         /* "file" parts in one upload */
#define INFLATE_BLOCK (64 * 1024)  /* what a gzip body is inflated into at a time */
#define PSEUDO_BLOCK  (64 * 1024)  /* what a file without a size is read at a time */
#define PSEUDO_MAX    (1ULL << 30) /* and at most, in all: its download fails past it */

/* One upload's state (hreq.state); the writer and the parser are the request's (r->w, r->mp),
 * released with it. */
struct upload {
    struct hreq *r;
    struct sbx_e2b_server *srv;
    struct sbx_e2b_user user;
    struct sbx_cred cred;
    char *path;   /* the query's, resolved; NULL: each part's filename */
    char *cur;    /* the file being written */
    json_t *done; /* envd's EntryInfo of each file written */
    /* a gzip body: the inflater and its output; z_end once a member ended */
    z_stream *z;
    unsigned char *zout;
    bool z_end;
    uint64_t inflated; /* bytes out of the inflater, bounded as the body is */
    /* X-Metadata-<key>: kept on every file (userfs.h); too_many past MAX_META */
    struct sbx_ufs_meta *meta;
    size_t n_meta;
    bool too_many, no_memory;
};

static void upload_drop(void *state)
{
    struct upload *u = state;

    free(u->path);
    free(u->cur);
    json_decref(u->done);
    if (u->z)
        inflateEnd(u->z);
    free(u->z);
    free(u->zout);
    sbx_ufs_meta_free(u->meta, u->n_meta);
    free(u);
}

/* envd's HTTP status for an errno of the file side. */
static unsigned status_of(int r)
{
    switch (-r) {
    case ENOENT:
        return 404;
    case EACCES:
    case EPERM:
    case EROFS:
        return 403;
    case ENOSPC:
    case EDQUOT:
        return 507;
    case EFBIG:
        return 413;
    case EINVAL:
    case EISDIR:
    case ENOTDIR:
    case ENAMETOOLONG:
    case EEXIST:
    case EBUSY:
    case ELOOP:
        return 400;
    default:
        return 500;
    }
}

/* The user the request names; answers 401 (envd's) or 400 when there is none. */
static bool user_of(struct hctx *c, struct sbx_e2b_user *u, enum MHD_Result *ret)
{
    const char *name = sbx_http_arg(c, "username");
    char msg[256], out[384];
    int r = name && name[0] ? sbx_e2b_user_lookup(sbx_e2b_of(c), name, u, msg, sizeof(msg))
                            : sbx_e2b_user_of(c, u, msg, sizeof(msg));

    if (r == 0)
        return true;
    snprintf(out, sizeof(out), "error looking up user '%s': %s", name ? name : "", msg);
    *ret = sbx_e2b_respond_plain_error(c, r == -ENOENT ? 401 : 400, out);
    return false;
}

/* Go's mime.FormatMediaType("inline", {"filename": name}): a token as it is, else a quoted
 * string, else (bytes beyond ASCII) RFC 2231's encoding. */
static char *disposition(const char *name)
{
    static const char *const tspecials = "()<>@,;:\\\"/[]?= ";
    bool token = name[0] != '\0', ascii = true;
    char *out, *o;

    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        if (*p < 0x20 || *p >= 0x7f)
            ascii = token = false;
        else if (strchr(tspecials, *p))
            token = false;
    }
    out = malloc(strlen(name) * 3 + 40);
    if (!out)
        return NULL;
    if (token) {
        sprintf(out, "inline; filename=%s", name);
        return out;
    }
    o = out + sprintf(out, ascii ? "inline; filename=\"" : "inline; filename*=utf-8''");
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        if (ascii) {
            if (*p == '"' || *p == '\\')
                *o++ = '\\';
            *o++ = (char)*p;
        } else if ((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') ||
                   (*p >= 'A' && *p <= 'Z') || strchr("!#$&+-.^_`|~", *p)) {
            *o++ = (char)*p;
        } else {
            o += sprintf(o, "%%%02X", *p);
        }
    }
    if (ascii)
        *o++ = '"';
    *o = '\0';
    return out;
}

/* A file of procfs, sysfs or a FUSE file system may say it is empty (st_size 0) and hold what
 * the kernel makes as it is read: sent as its size says, /proc/cpuinfo came back empty. One
 * byte read tells; such a file goes chunked, read to its end (at positions, as libmicrohttpd
 * asks), without ETag or ranges. A file that never ends is cut at PSEUDO_MAX: the client sees
 * a download that failed, not a short file. */
static ssize_t pseudo_read(void *fd, uint64_t pos, char *buf, size_t max)
{
    ssize_t n;

    if (pos >= PSEUDO_MAX)
        return MHD_CONTENT_READER_END_WITH_ERROR;
    if (max > PSEUDO_MAX - pos)
        max = (size_t)(PSEUDO_MAX - pos);
    do
        n = pread((int)(intptr_t)fd, buf, max, (off_t)pos);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return MHD_CONTENT_READER_END_WITH_ERROR;
    return n ? n : MHD_CONTENT_READER_END_OF_STREAM;
}

static void pseudo_free(void *fd)
{
    close((int)(intptr_t)fd);
}

static bool sizeless(int fd, const struct stat *st)
{
    char b;

    return st->st_size == 0 && pread(fd, &b, 1, 0) == 1;
}

static enum MHD_Result send_sizeless(struct hctx *c, int fd, const char *disp)
{
    struct MHD_Response *resp = MHD_create_response_from_callback(
        MHD_SIZE_UNKNOWN, PSEUDO_BLOCK, pseudo_read, (void *)(intptr_t)fd, pseudo_free);

    if (!resp) {
        close(fd);
        return sbx_e2b_respond_plain_error(c, 500, "out of memory");
    }
    MHD_add_response_header(resp, "Content-Type", "application/octet-stream");
    MHD_add_response_header(resp, "Content-Disposition", disp ? disp : "inline");
    MHD_add_response_header(resp, "Vary", "Accept-Encoding");
    return sbx_http_queue(c, 200, resp);
}

static enum MHD_Result get_file(struct hctx *c)
{
    const char *path = sbx_http_arg(c, "path");
    _cleanup_free_ char *abs = NULL, *disp = NULL;
    struct sbx_error err = {0};
    struct sbx_e2b_user u;
    struct sbx_cred cred;
    enum MHD_Result ret;
    struct stat st;
    int fd;

    *c->upload_data_size = 0;
    if (!sbx_e2b_authorized(c, &ret) || !user_of(c, &u, &ret))
        return ret;
    sbx_e2b_cred_of(&u, &cred);
    if (sbx_e2b_fs_resolve(sbx_e2b_of(c), &u, path ? path : "", &abs, &err) < 0)
        return sbx_e2b_respond_plain_error(c, 400, err.msg);
    fd = sbx_ufs_open_read(&cred, abs, &st, &err);
    if (fd < 0)
        return sbx_e2b_respond_plain_error(c, status_of(fd), err.msg);
    disp = disposition(strrchr(abs, '/') + 1);
    if (sizeless(fd, &st))
        return send_sizeless(c, fd, disp);
    return sbx_http_send_file_with(c, fd, &st,
                                   (const char *const[]){"Content-Disposition",
                                                         disp ? disp : "inline", "Vary",
                                                         "Accept-Encoding", NULL});
}

/* ------------------------------------------------------------------------------------------ */
/* Uploads */

/* Opens the file at path (the query's, else the part's filename) for the next content. */
static int file_begin(struct upload *u, const char *filename)
{
    struct hreq *r = u->r;
    size_t n = json_array_size(u->done);
    int rc;

    free(u->cur);
    u->cur = NULL;
    if (n >= MAX_FILES)
        return sbx_error_set(&r->err, EINVAL, "more than %d files in one upload", MAX_FILES);
    if (u->path)
        u->cur = strdup(u->path);
    else if (!filename[0])
        return sbx_error_set(&r->err, EINVAL, "a \"file\" part has no filename");
    else if ((rc = sbx_e2b_fs_resolve(u->srv, &u->user, filename, &u->cur, &r->err)) < 0)
        return rc;
    if (!u->cur)
        return sbx_error_set(&r->err, ENOMEM, "allocate path");
    for (size_t i = 0; i < n; i++)
        if (strcmp(json_string_value(json_object_get(json_array_get(u->done, i), "path")),
                   u->cur) == 0)
            return sbx_error_set(&r->err, EEXIST,
                                 "you cannot upload multiple files to the same path '%s' in one "
                                 "upload request, only the first specified file was uploaded",
                                 u->cur);
    return sbx_ufs_writer_begin(sbx_e2b_fs_slash(), &u->cred, u->cur, &r->w, &r->err);
}

/* The metadata the file now has, read back as envd answers it (null when none stuck: a file
 * system without extended attributes). */
static json_t *meta_json(struct upload *u)
{
    struct sbx_ufs_meta *m = NULL;
    size_t n = 0;
    json_t *j;

    if (sbx_ufs_meta_get(&u->cred, u->cur, &m, &n, NULL) < 0 || n == 0)
        return json_null();
    j = json_object();
    for (size_t i = 0; j && i < n; i++)
        json_object_set_new(j, m[i].key, json_string(m[i].value));
    sbx_ufs_meta_free(m, n);
    return j ? j : json_null();
}

/* The current file is whole: renamed into place as the user, its metadata set, and listed in
 * the answer. */
static int file_end(struct upload *u)
{
    struct hreq *r = u->r;
    uint64_t size = 0;
    json_t *entry;
    int rc;

    if (!r->w)
        return sbx_error_set(&r->err, EIO, "no file open");
    rc = sbx_ufs_writer_commit(&u->cred, TAKE_PTR(r->w), &size, &r->err);
    if (rc == 0 && u->n_meta)
        rc = sbx_ufs_meta_set(&u->cred, u->cur, u->meta, u->n_meta, &r->err);
    if (rc < 0)
        return rc;
    entry = json_pack("{s:s, s:s, s:s}", "path", u->cur, "name", strrchr(u->cur, '/') + 1, "type",
                      "file");
    if (entry && u->n_meta)
        json_object_set_new(entry, "metadata", meta_json(u));
    if (json_array_append_new(u->done, entry) < 0)
        return sbx_error_set(&r->err, ENOMEM, "allocate answer");
    return 0;
}

static int part_begin(void *cls, const char *filename, struct sbx_error *err)
{
    struct upload *u = cls;
    int rc = file_begin(u, filename);

    if (rc < 0)
        *err = u->r->err;
    return rc;
}

static int part_end(void *cls, struct sbx_error *err)
{
    struct upload *u = cls;
    int rc = file_end(u);

    if (rc < 0)
        *err = u->r->err;
    return rc;
}

static int part_data(void *cls, const char *data, size_t len, struct sbx_error *err)
{
    struct upload *u = cls;

    return sbx_fs_writer_write(u->r->w, data, len, err);
}

static const struct sbx_multipart_parts parts = {part_begin, part_end};

/* Where the body's (inflated) bytes go: the parser, or the one file of a raw upload. */
static int sink(struct upload *u, const char *p, size_t n)
{
    struct hreq *r = u->r;

    if (r->mp)
        return sbx_multipart_feed(r->mp, p, n, &r->err);
    if (!r->w)
        return sbx_error_set(&r->err, EIO, "no file open");
    return sbx_fs_writer_write(r->w, p, n, &r->err);
}

static int gzip_begin(struct upload *u)
{
    u->z = calloc(1, sizeof(*u->z));
    u->zout = malloc(INFLATE_BLOCK);
    /* 16 + MAX_WBITS: a gzip header and trailer, as Go's gzip.Reader reads them. */
    if (!u->z || !u->zout || inflateInit2(u->z, 16 + MAX_WBITS) != Z_OK) {
        free(u->z);
        u->z = NULL;
        return sbx_error_set(&u->r->err, ENOMEM, "allocate gzip reader");
    }
    return 0;
}

/* Inflates n bytes of a gzip body into the sink; several members follow one another. */
static int gzip_feed(struct upload *u, const char *p, size_t n)
{
    uint64_t max = sbx_e2b_fs_max_upload();
    z_stream *z = u->z;

    z->next_in = (unsigned char *)p;
    z->avail_in = (uInt)n;
    while (z->avail_in) {
        int zr, rc;
        size_t out;
        if (u->z_end) {
            inflateReset(z);
            u->z_end = false;
        }
        z->next_out = u->zout;
        z->avail_out = INFLATE_BLOCK;
        zr = inflate(z, Z_NO_FLUSH);
        if (zr != Z_OK && zr != Z_STREAM_END && zr != Z_BUF_ERROR)
            return sbx_error_set(&u->r->err, EINVAL, "error decompressing request body: %s",
                                 z->msg ? z->msg : "invalid gzip data");
        out = INFLATE_BLOCK - z->avail_out;
        u->inflated += out;
        if (max && u->inflated > max)
            return sbx_error_set(&u->r->err, EFBIG, "upload body too large once decompressed");
        if (out && (rc = sink(u, (const char *)u->zout, out)) < 0)
            return rc;
        u->z_end = zr == Z_STREAM_END;
        if (zr == Z_BUF_ERROR && !out)
            break; /* needs more input */
    }
    return 0;
}

/* Refuses the upload: what it wrote so far goes, the answer waits for the body's end. */
static enum MHD_Result refuse(struct hctx *c, unsigned status, const char *msg)
{
    sbx_http_upload_release(c->r);
    return sbx_e2b_respond_plain_error(c, status, msg);
}

/* Keeps one X-Metadata-<key> header: the key lowercased, the first of a repeated one. */
static enum MHD_Result take_metadata(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value)
{
    struct upload *u = cls;
    struct sbx_ufs_meta *nm;
    char *k;

    (void)kind;
    if (strncasecmp(key, "X-Metadata-", 11) != 0 || !key[11])
        return MHD_YES;
    for (size_t i = 0; i < u->n_meta; i++)
        if (strcasecmp(u->meta[i].key, key + 11) == 0)
            return MHD_YES;
    if (u->n_meta == MAX_META) {
        u->too_many = true;
        return MHD_NO;
    }
    nm = realloc(u->meta, (u->n_meta + 1) * sizeof(*nm));
    if (nm)
        u->meta = nm;
    if (!nm || !(k = strdup(key + 11))) {
        u->no_memory = true;
        return MHD_NO;
    }
    for (char *p = k; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    nm[u->n_meta].key = k;
    nm[u->n_meta].value = strdup(value ? value : "");
    if (!nm[u->n_meta].value) {
        free(k);
        u->no_memory = true;
        return MHD_NO;
    }
    u->n_meta++;
    return MHD_YES;
}

/* The request's metadata headers, checked as envd checks them; false when answered. */
static bool metadata_of(struct hctx *c, struct upload *u, enum MHD_Result *ret)
{
    char msg[320];

    MHD_get_connection_values(c->conn, MHD_HEADER_KIND, take_metadata, u);
    if (u->no_memory)
        return *ret = MHD_NO, false;
    if (u->too_many) {
        snprintf(msg, sizeof(msg), "invalid metadata: more than %d keys", MAX_META);
        return *ret = refuse(c, 400, msg), false;
    }
    if (sbx_ufs_meta_check(u->meta, u->n_meta, &u->r->err) < 0) {
        snprintf(msg, sizeof(msg), "invalid metadata: %s", u->r->err.msg);
        return *ret = refuse(c, 400, msg), false;
    }
    return true;
}

/* Checks the request and sets up what its body goes into; false when answered (*ret). */
static bool upload_begin(struct hctx *c, enum MHD_Result *ret)
{
    const char *ct = sbx_http_header(c, "Content-Type"), *path = sbx_http_arg(c, "path");
    const char *enc = sbx_http_header(c, "Content-Encoding"),
               *cl = sbx_http_header(c, "Content-Length");
    char boundary[SBX_MULTIPART_BOUNDARY_MAX + 1], msg[320];
    uint64_t max = sbx_e2b_fs_max_upload();
    struct hreq *r = c->r;
    struct upload *u;
    int rc = 0;

    if (!sbx_e2b_authorized(c, ret))
        return false;
    if (!sbx_e2b_fs_state.ready)
        return *ret = sbx_e2b_respond_plain_error(c, 503, "file uploads are not set up"), false;
    if (!(u = calloc(1, sizeof(*u))) || !(u->done = json_array())) {
        free(u);
        *ret = MHD_NO;
        return false;
    }
    u->r = r;
    u->srv = sbx_e2b_of(c);
    r->state = u;
    r->state_drop = upload_drop;
    if (!user_of(c, &u->user, ret))
        return false;
    sbx_e2b_cred_of(&u->user, &u->cred);
    if (max && cl && strtoull(cl, NULL, 10) > max) {
        snprintf(msg, sizeof(msg), "body larger than %llu bytes", (unsigned long long)max);
        return *ret = refuse(c, 413, msg), false;
    }
    if (enc && enc[0] && strcasecmp(enc, "identity") != 0) {
        if (strcasecmp(enc, "gzip") != 0) {
            snprintf(msg, sizeof(msg), "unsupported Content-Encoding: %.64s", enc);
            return *ret = refuse(c, 400, msg), false;
        }
        if (gzip_begin(u) < 0)
            return *ret = refuse(c, 500, r->err.msg), false;
    }
    if (!metadata_of(c, u, ret))
        return false;
    if (path && path[0] && (rc = sbx_e2b_fs_resolve(u->srv, &u->user, path, &u->path, &r->err)) < 0)
        return *ret = refuse(c, 400, r->err.msg), false;
    if (ct && strncasecmp(ct, "application/octet-stream", 24) == 0) {
        if (!u->path)
            return *ret = refuse(c, 400, "path query parameter is required for raw body upload"),
                   false;
        rc = file_begin(u, "");
    } else if (sbx_multipart_boundary(ct, boundary) == 0) {
        rc = sbx_multipart_new(boundary, part_data, u, &r->mp, &r->err);
        if (rc == 0)
            sbx_multipart_set_parts(r->mp, &parts);
    } else {
        snprintf(msg, sizeof(msg),
                 "unsupported content type: %.64s, expected multipart/form-data (with a "
                 "boundary) or application/octet-stream",
                 ct ? ct : "");
        return *ret = refuse(c, 400, msg), false;
    }
    if (rc < 0)
        return *ret = refuse(c, status_of(rc), r->err.msg), false;
    return true;
}

static enum MHD_Result upload_finish(struct hctx *c)
{
    struct hreq *r = c->r;
    struct upload *u = r->state;
    int rc = 0;

    if (u->z && !u->z_end)
        rc = sbx_error_set(&r->err, EINVAL,
                           "error decompressing request body: unexpected end of gzip data");
    if (rc == 0)
        rc = r->mp ? sbx_multipart_finish(r->mp, &r->err) : file_end(u);

    if (rc < 0)
        return refuse(c, status_of(rc), r->err.msg);
    return sbx_http_respond_json(c, 200, json_incref(u->done));
}

static enum MHD_Result post_file(struct hctx *c)
{
    struct hreq *r = c->r;
    size_t n = *c->upload_data_size;
    uint64_t max = sbx_e2b_fs_max_upload();
    struct upload *u;
    enum MHD_Result ret;
    int rc;

    if (!r->began) {
        r->began = true;
        if (!upload_begin(c, &ret))
            return ret;
    }
    if (n == 0)
        return upload_finish(c);
    u = r->state;
    *c->upload_data_size = 0;
    r->received += n;
    sbx_metrics_bytes_in(n);
    if (max && r->received > max)
        return refuse(c, 413, "upload body too large");
    rc = u->z ? gzip_feed(u, c->upload_data, n) : sink(u, c->upload_data, n);
    if (rc < 0)
        return refuse(c, status_of(rc), r->err.msg);
    return MHD_YES;
}

enum MHD_Result sbx_e2b_files_route(struct hctx *c)
{
    if (strcmp(c->method, "POST") == 0)
        return post_file(c);
    return get_file(c);
}
