/* The h2c bridge's HTTP/1.1 response reader: see h2c_resp.h. */
#include "h2c_resp.h"

#include <errno.h>
#include <string.h>
#include <strings.h>

void sbx_h2c_resp_init(struct sbx_h2c_resp *p, bool no_body)
{
    p->state = SBX_H2C_RESP_HEAD;
    p->no_body = no_body;
    p->head_done = false;
    p->status = 0;
    p->n_fields = 0;
    p->left = 0;
    p->trailers = 0;
    p->head_len = p->scanned = p->line_len = 0;
    p->crlf = 0;
}

bool sbx_h2c_hop_by_hop(const char *name, size_t len)
{
    static const char *const hop[] = {"connection",        "keep-alive", "proxy-connection",
                                      "transfer-encoding", "upgrade",    "te"};

    for (size_t i = 0; i < sizeof(hop) / sizeof(hop[0]); i++)
        if (strlen(hop[i]) == len && strncasecmp(name, hop[i], len) == 0)
            return true;
    return false;
}

static bool is_tchar(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

static bool field_is(const struct sbx_h2c_resp_field *f, const char *name)
{
    return f->name_len == strlen(name) && strncasecmp(f->name, name, f->name_len) == 0;
}

/* Digits only, no overflow; what Content-Length allows. */
static int parse_length(const char *s, size_t len, uint64_t *ret)
{
    uint64_t v = 0;

    if (!len || len > 19)
        return -EPROTO;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -EPROTO;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    *ret = v;
    return 0;
}

/* "HTTP/1.x SSS reason": the status. */
static int parse_status_line(struct sbx_h2c_resp *p, const char *s, size_t len)
{
    if (len < 12 || memcmp(s, "HTTP/1.", 7) != 0 || (s[7] != '0' && s[7] != '1') || s[8] != ' ')
        return -EPROTO;
    for (int i = 9; i < 12; i++)
        if (s[i] < '0' || s[i] > '9')
            return -EPROTO;
    if (len > 12 && s[12] != ' ')
        return -EPROTO;
    p->status = (unsigned)((s[9] - '0') * 100 + (s[10] - '0') * 10 + (s[11] - '0'));
    return p->status < 100 ? -EPROTO : 0;
}

/* "name: value", value without surrounding blanks; no controls but HTAB in it. */
static int parse_field(struct sbx_h2c_resp *p, const char *s, size_t len)
{
    struct sbx_h2c_resp_field *f;
    const char *colon = memchr(s, ':', len);
    size_t vs, ve;

    if (!colon || colon == s || p->n_fields == SBX_H2C_RESP_FIELDS_MAX)
        return -EPROTO;
    for (const char *c = s; c < colon; c++)
        if (!is_tchar(*c))
            return -EPROTO;
    vs = (size_t)(colon - s) + 1;
    ve = len;
    while (vs < ve && (s[vs] == ' ' || s[vs] == '\t'))
        vs++;
    while (ve > vs && (s[ve - 1] == ' ' || s[ve - 1] == '\t'))
        ve--;
    for (size_t i = vs; i < ve; i++)
        if (((unsigned char)s[i] < 0x20 && s[i] != '\t') || s[i] == 0x7f)
            return -EPROTO;
    f = &p->fields[p->n_fields++];
    *f = (struct sbx_h2c_resp_field){s, s + vs, (size_t)(colon - s), ve - vs};
    return 0;
}

/* How the body is framed, from the parsed fields and the status. */
static int choose_framing(struct sbx_h2c_resp *p)
{
    bool chunked = false, has_length = false;
    uint64_t length = 0;

    for (size_t i = 0; i < p->n_fields; i++) {
        const struct sbx_h2c_resp_field *f = &p->fields[i];
        uint64_t v;
        if (field_is(f, "transfer-encoding")) {
            if (chunked || f->value_len != 7 || strncasecmp(f->value, "chunked", 7) != 0)
                return -EPROTO;
            chunked = true;
        } else if (field_is(f, "content-length")) {
            if (parse_length(f->value, f->value_len, &v) < 0 || (has_length && v != length))
                return -EPROTO;
            has_length = true;
            length = v;
        }
    }
    if (chunked && has_length)
        return -EPROTO;
    if (p->no_body || p->status == 204 || p->status == 304)
        p->state = SBX_H2C_RESP_DONE;
    else if (chunked)
        p->state = SBX_H2C_RESP_CHUNK;
    else if (has_length)
        p->state = length ? SBX_H2C_RESP_LENGTH : SBX_H2C_RESP_DONE;
    else
        p->state = SBX_H2C_RESP_UNTIL_EOF;
    p->left = length;
    return 0;
}

/* Parses the whole head (lines ended by CRLF, the empty line last). */
static int parse_head(struct sbx_h2c_resp *p, size_t end)
{
    size_t i = 0;
    int r;

    p->n_fields = 0;
    while (i + 2 < end) {
        const char *s = p->head + i;
        const char *nl = memchr(s, '\n', end - i);
        size_t len;
        if (!nl || nl == s || nl[-1] != '\r')
            return -EPROTO;
        len = (size_t)(nl - s) - 1;
        if (memchr(s, '\r', len) || memchr(s, '\0', len))
            return -EPROTO;
        r = i == 0 ? parse_status_line(p, s, len) : parse_field(p, s, len);
        if (r < 0)
            return r;
        i += len + 2;
    }
    if (p->status == 101)
        return -EPROTO; /* no upgrades through the bridge */
    if (p->status < 200) {
        p->head_len = p->scanned = 0; /* an interim head: the final one follows */
        return 0;
    }
    p->head_done = true;
    return choose_framing(p);
}

static ssize_t feed_head(struct sbx_h2c_resp *p, const char *in, size_t len)
{
    size_t n = len < sizeof(p->head) - p->head_len ? len : sizeof(p->head) - p->head_len;
    size_t from = p->scanned > 3 ? p->scanned - 3 : 0;
    int r;

    memcpy(p->head + p->head_len, in, n);
    p->head_len += n;
    for (size_t i = from; i + 4 <= p->head_len; i++) {
        if (memcmp(p->head + i, "\r\n\r\n", 4) == 0) {
            size_t end = i + 4, used = n - (p->head_len - end);
            p->head_len = end;
            if ((r = parse_head(p, end)) < 0)
                return r;
            return (ssize_t)used;
        }
    }
    p->scanned = p->head_len;
    if (p->head_len == sizeof(p->head))
        return -E2BIG;
    return (ssize_t)n;
}

/* Collects a line up to its CRLF; 1 when it is whole (p->line, p->line_len without CRLF). */
static int feed_line(struct sbx_h2c_resp *p, char c)
{
    if (c == '\n') {
        if (!p->line_len || p->line[p->line_len - 1] != '\r')
            return -EPROTO;
        p->line_len--;
        return 1;
    }
    if (p->line_len == sizeof(p->line))
        return -E2BIG;
    p->line[p->line_len++] = c;
    return 0;
}

/* A chunk-size line: hex digits, then extensions (ignored). */
static int chunk_size(struct sbx_h2c_resp *p)
{
    uint64_t v = 0;
    size_t i = 0;

    for (; i < p->line_len && i < 16; i++) {
        char c = p->line[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            break;
        v = v * 16 + (uint64_t)d;
    }
    if (i == 0 || (i < p->line_len && p->line[i] != ';' && p->line[i] != ' ' && p->line[i] != '\t'))
        return -EPROTO;
    p->left = v;
    p->state = v ? SBX_H2C_RESP_DATA : SBX_H2C_RESP_TRAILERS;
    return 0;
}

/* One byte of the chunked coding's framing (size lines, CRLFs, trailers). */
static int feed_framing(struct sbx_h2c_resp *p, char c)
{
    int r;

    if (p->state == SBX_H2C_RESP_DATA_END) {
        if (c != "\r\n"[p->crlf])
            return -EPROTO;
        if (++p->crlf == 2) {
            p->crlf = 0;
            p->state = SBX_H2C_RESP_CHUNK;
        }
        return 0;
    }
    if (p->state == SBX_H2C_RESP_TRAILERS && ++p->trailers > SBX_H2C_RESP_HEAD_MAX)
        return -E2BIG;
    if ((r = feed_line(p, c)) <= 0)
        return r;
    if (p->state == SBX_H2C_RESP_CHUNK) {
        r = chunk_size(p);
    } else if (p->line_len == 0) {
        p->state = SBX_H2C_RESP_DONE; /* the empty line after the trailers */
    }
    p->line_len = 0;
    return r;
}

ssize_t sbx_h2c_resp_feed(struct sbx_h2c_resp *p, const char *in, size_t len, char *out,
                          size_t *out_len)
{
    size_t i = 0;
    int r;

    *out_len = 0;
    if (p->state == SBX_H2C_RESP_HEAD)
        return len ? feed_head(p, in, len) : 0;
    while (i < len && p->state != SBX_H2C_RESP_DONE) {
        if (p->state == SBX_H2C_RESP_LENGTH || p->state == SBX_H2C_RESP_DATA ||
            p->state == SBX_H2C_RESP_UNTIL_EOF) {
            size_t n = len - i;
            if (p->state != SBX_H2C_RESP_UNTIL_EOF && n > p->left)
                n = (size_t)p->left;
            memcpy(out + *out_len, in + i, n);
            *out_len += n;
            i += n;
            if (p->state == SBX_H2C_RESP_UNTIL_EOF)
                continue;
            p->left -= n;
            if (!p->left)
                p->state =
                    p->state == SBX_H2C_RESP_LENGTH ? SBX_H2C_RESP_DONE : SBX_H2C_RESP_DATA_END;
            continue;
        }
        if ((r = feed_framing(p, in[i++])) < 0)
            return r;
    }
    return (ssize_t)i;
}

int sbx_h2c_resp_eof(struct sbx_h2c_resp *p)
{
    if (p->state == SBX_H2C_RESP_UNTIL_EOF)
        p->state = SBX_H2C_RESP_DONE;
    return p->state == SBX_H2C_RESP_DONE ? 0 : -EPROTO;
}
