/* Downloads of regular files: validators (ETag, Last-Modified), conditional requests (304),
 * ranges (RFC 9110 §14): one range as a 206 with Content-Range, several as multipart/byteranges,
 * none satisfiable as 416. Several ranges that together ask for more bytes than the file holds
 * (overlapping or repeated ones), or more than MAX_RANGES of them, are answered with the whole
 * file (200), as RFC 9110 §14.2 allows: a cheap request must not cost a large answer. */
#define _GNU_SOURCE
#include "http_download.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "http_args.h"
#include "http_cond.h"
#include "http_request.h"
#include "metrics.h"

#define MAX_RANGES 16
#define READ_BLOCK (64 * 1024)

struct validators {
    char etag[SBX_HTTP_ETAG_MAX];
    char last_modified[SBX_HTTP_DATE_MAX];
    const char *const *headers; /* more, name and value pairs; NULL-terminated or NULL */
};

static enum MHD_Result queue(struct hctx *c, unsigned status, struct MHD_Response *resp,
                             const struct validators *v)
{
    if (resp) {
        MHD_add_response_header(resp, "ETag", v->etag);
        MHD_add_response_header(resp, "Last-Modified", v->last_modified);
        MHD_add_response_header(resp, "Accept-Ranges", "bytes");
        for (const char *const *h = v->headers; h && h[0] && h[1]; h += 2)
            MHD_add_response_header(resp, h[0], h[1]);
    }
    return sbx_http_queue(c, status, resp);
}

static struct MHD_Response *empty(void)
{
    return MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
}

static bool is_head(struct hctx *c)
{
    return strcmp(c->method, "HEAD") == 0;
}

/* --- multipart/byteranges ----------------------------------------------------------------- */

struct byteranges {
    int fd;
    size_t n;
    struct {
        char head[160]; /* the delimiter and the part's headers */
        size_t head_len;
        uint64_t off, len;
    } parts[MAX_RANGES];
    char tail[64];
    size_t tail_len;
};

static ssize_t byteranges_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct byteranges *b = cls;

    for (size_t i = 0; i <= b->n; i++) {
        const char *head = i < b->n ? b->parts[i].head : b->tail;
        size_t head_len = i < b->n ? b->parts[i].head_len : b->tail_len;
        uint64_t len = i < b->n ? b->parts[i].len : 0;
        if (pos < head_len) {
            size_t n = head_len - pos < max ? head_len - (size_t)pos : max;
            memcpy(buf, head + pos, n);
            return (ssize_t)n;
        }
        pos -= head_len;
        if (pos < len) {
            size_t n = len - pos < max ? (size_t)(len - pos) : max;
            ssize_t r = pread(b->fd, buf, n, (off_t)(b->parts[i].off + pos));
            /* The file shrank under us: the answer cannot be what its length promised. */
            return r > 0 ? r : MHD_CONTENT_READER_END_WITH_ERROR;
        }
        pos -= len;
    }
    return MHD_CONTENT_READER_END_OF_STREAM;
}

static void byteranges_free(void *cls)
{
    struct byteranges *b = cls;

    sbx_closep(&b->fd);
    free(b);
}

/* A boundary that the file's bytes are most unlikely to hold: 24 random hex digits. */
static void make_boundary(char ret[32])
{
    uint8_t raw[12] = {0};
    struct timespec ts;

    if (getrandom(raw, sizeof(raw), GRND_NONBLOCK) != (ssize_t)sizeof(raw)) {
        clock_gettime(CLOCK_REALTIME, &ts);
        memcpy(raw, &ts, sizeof(raw) < sizeof(ts) ? sizeof(raw) : sizeof(ts));
    }
    for (size_t i = 0; i < sizeof(raw); i++)
        snprintf(ret + 2 * i, 3, "%02x", raw[i]);
}

/* The body of a 206 with several ranges; *fd is taken on success. */
static struct MHD_Response *byteranges_response(int *fd, uint64_t size,
                                                const struct sbx_http_range *rg, size_t n,
                                                uint64_t *ret_total)
{
    struct byteranges *b = calloc(1, sizeof(*b));
    struct MHD_Response *resp;
    char boundary[32], ctype[80];
    uint64_t total = 0;

    if (!b)
        return NULL;
    make_boundary(boundary);
    b->n = n;
    for (size_t i = 0; i < n; i++) {
        b->parts[i].head_len = (size_t)snprintf(
            b->parts[i].head, sizeof(b->parts[i].head),
            "%s--%s\r\nContent-Type: application/octet-stream\r\nContent-Range: bytes %" PRIu64
            "-%" PRIu64 "/%" PRIu64 "\r\n\r\n",
            i ? "\r\n" : "", boundary, rg[i].start, rg[i].end, size);
        b->parts[i].off = rg[i].start;
        b->parts[i].len = rg[i].end - rg[i].start + 1;
        total += b->parts[i].head_len + b->parts[i].len;
    }
    b->tail_len = (size_t)snprintf(b->tail, sizeof(b->tail), "\r\n--%s--\r\n", boundary);
    total += b->tail_len;
    b->fd = *fd;
    resp =
        MHD_create_response_from_callback(total, READ_BLOCK, byteranges_read, b, byteranges_free);
    if (!resp) {
        free(b);
        return NULL;
    }
    *fd = -1;
    snprintf(ctype, sizeof(ctype), "multipart/byteranges; boundary=%s", boundary);
    MHD_add_response_header(resp, "Content-Type", ctype);
    *ret_total = total;
    return resp;
}

/* --- the answer ------------------------------------------------------------------------- */

/* The ranges to answer: n >= 1, 0 for the whole file, -1 for none satisfiable. */
static int ranges_of(struct hctx *c, const struct stat *st, const struct validators *v,
                     struct sbx_http_range *rg)
{
    uint64_t size = (uint64_t)st->st_size, sum = 0;
    int n;

    if (!sbx_http_if_range(sbx_http_header(c, "If-Range"), v->etag, st->st_mtim.tv_sec, time(NULL)))
        return 0;
    n = sbx_http_parse_ranges(sbx_http_header(c, "Range"), size, rg, MAX_RANGES);
    for (int i = 0; i < n; i++)
        sum += rg[i].end - rg[i].start + 1;
    return n > 1 && sum > size ? 0 : n;
}

enum MHD_Result sbx_http_send_file(struct hctx *c, int fd, const struct stat *st)
{
    return sbx_http_send_file_with(c, fd, st, NULL);
}

enum MHD_Result sbx_http_send_file_with(struct hctx *c, int fd_in, const struct stat *st,
                                        const char *const *headers)
{
    _cleanup_close_ int fd = fd_in;
    uint64_t size = (uint64_t)st->st_size, body = size;
    struct sbx_http_range rg[MAX_RANGES];
    struct MHD_Response *resp;
    struct validators v;
    unsigned status = 200;
    char buf[96];
    int n;

    v.headers = headers;
    sbx_http_etag(st, v.etag);
    sbx_http_format_date(st->st_mtim.tv_sec, v.last_modified);
    if (sbx_http_not_modified(sbx_http_header(c, "If-None-Match"),
                              sbx_http_header(c, "If-Modified-Since"), v.etag,
                              st->st_mtim.tv_sec)) {
        /* The length a 200 would have (libmicrohttpd 0.9.75 sends a Content-Length with a 304,
         * which RFC 9110 §8.6 allows only at that value); no body is sent. */
        resp = MHD_create_response_from_fd64(size, fd);
        if (resp)
            fd = -1;
        return queue(c, 304, resp, &v);
    }
    n = ranges_of(c, st, &v, rg);
    if (n < 0) {
        resp = empty();
        snprintf(buf, sizeof(buf), "bytes */%" PRIu64, size);
        if (resp)
            MHD_add_response_header(resp, "Content-Range", buf);
        return queue(c, 416, resp, &v);
    }
    if (n > 1) {
        resp = byteranges_response(&fd, size, rg, (size_t)n, &body);
        status = 206;
    } else {
        if (n == 1)
            body = rg[0].end - rg[0].start + 1;
        resp = n == 1 ? MHD_create_response_from_fd_at_offset64(body, fd, rg[0].start)
                      : MHD_create_response_from_fd64(size, fd);
        if (resp)
            fd = -1; /* the response's now */
        if (resp)
            MHD_add_response_header(resp, "Content-Type", "application/octet-stream");
        if (resp && n == 1) {
            snprintf(buf, sizeof(buf), "bytes %" PRIu64 "-%" PRIu64 "/%" PRIu64, rg[0].start,
                     rg[0].end, size);
            MHD_add_response_header(resp, "Content-Range", buf);
            status = 206;
        }
    }
    if (resp && !is_head(c))
        sbx_metrics_bytes_out(body);
    return queue(c, status, resp, &v);
}
