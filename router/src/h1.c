#define _GNU_SOURCE
#include "h1.h"

#include <errno.h>
#include <string.h>
#include <strings.h>

#include "parse.h"

#define LINE_MAX_BYTES    4096  /* a chunk-size line with its extensions, a trailer line */
#define TRAILER_MAX_BYTES 16384 /* the whole trailer section */

static bool is_tchar(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

static bool name_is(const char *s, size_t len, const char *want)
{
    return strlen(want) == len && strncasecmp(s, want, len) == 0;
}

/* Splits the field lines from p to end (each ended by CRLF, the last one empty). */
static bool split_fields(const char *p, const char *end, struct sbx_h1_msg *m)
{
    for (;;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p)), *colon, *a, *b;
        struct sbx_h1_field *f;
        if (!nl || nl == p || nl[-1] != '\r')
            return false;
        if (nl == p + 1)
            return true; /* the empty line */
        colon = memchr(p, ':', (size_t)(nl - p));
        if (!colon || colon == p || m->nfields == SBX_H1_MAX_FIELDS)
            return false;
        for (const char *c = p; c < colon; c++)
            if (!is_tchar((unsigned char)*c))
                return false;
        for (a = colon + 1; a < nl - 1 && (*a == ' ' || *a == '\t'); a++)
            ;
        for (b = nl - 1; b > a && (b[-1] == ' ' || b[-1] == '\t'); b--)
            ;
        for (const char *c = a; c < b; c++)
            if ((unsigned char)*c < 0x20 && *c != '\t')
                return false;
        f = &m->fields[m->nfields++];
        *f = (struct sbx_h1_field){p, a, (size_t)(colon - p), (size_t)(b - a)};
        p = nl + 1;
    }
}

bool sbx_h1_parse_request(const char *buf, size_t len, struct sbx_h1_msg *m,
                          struct sbx_http_verdict *v)
{
    struct sbx_http_head h;
    const char *p = buf, *end = buf + len, *sp1, *sp2, *nl;

    memset(m, 0, sizeof(*m));
    if (!sbx_http_head_check(buf, len, NULL, &h, v))
        return false;
    while (end - p >= 2 && p[0] == '\r' && p[1] == '\n')
        p += 2;
    nl = memchr(p, '\n', (size_t)(end - p));
    sp1 = memchr(p, ' ', (size_t)(nl - p));
    sp2 = memchr(sp1 + 1, ' ', (size_t)(nl - sp1 - 1));
    *m = (struct sbx_h1_msg){.method = p,
                             .method_len = (size_t)(sp1 - p),
                             .target = sp1 + 1,
                             .target_len = (size_t)(sp2 - sp1 - 1),
                             .minor = h.minor};
    if (!split_fields(nl + 1, end, m)) {
        *v = (struct sbx_http_verdict){431, "REQUEST_HEADER_FIELDS_TOO_LARGE",
                                       "more than 128 header fields"};
        return false;
    }
    return true;
}

bool sbx_h1_parse_response(const char *buf, size_t len, struct sbx_h1_msg *m)
{
    const char *end = buf + len, *nl = memchr(buf, '\n', len);
    long long status;
    char code[4];

    memset(m, 0, sizeof(*m));
    /* "HTTP/1.x NNN" then a space and a reason, or the end of the line */
    if (!nl || nl - buf < 13 || nl[-1] != '\r' || strncmp(buf, "HTTP/1.", 7) != 0 ||
        (buf[7] != '0' && buf[7] != '1') || buf[8] != ' ' || (buf[12] != ' ' && buf[12] != '\r'))
        return false;
    memcpy(code, buf + 9, 3);
    code[3] = '\0';
    if (sbx_parse_int(code, 100, 999, &status) < 0)
        return false;
    m->status = (int)status;
    m->minor = buf[7] - '0';
    return split_fields(nl + 1, end, m);
}

const struct sbx_h1_field *sbx_h1_get(const struct sbx_h1_msg *m, const char *name)
{
    for (unsigned i = 0; i < m->nfields; i++)
        if (name_is(m->fields[i].name, m->fields[i].name_len, name))
            return &m->fields[i];
    return NULL;
}

static bool list_has(const char *s, size_t len, const char *token, size_t token_len)
{
    size_t i = 0;

    while (i < len) {
        size_t a, b;
        while (i < len && (s[i] == ' ' || s[i] == '\t' || s[i] == ','))
            i++;
        a = i;
        while (i < len && s[i] != ',')
            i++;
        for (b = i; b > a && (s[b - 1] == ' ' || s[b - 1] == '\t'); b--)
            ;
        if (b - a == token_len && strncasecmp(s + a, token, token_len) == 0)
            return true;
    }
    return false;
}

bool sbx_h1_has_token(const struct sbx_h1_msg *m, const char *name, const char *token)
{
    for (unsigned i = 0; i < m->nfields; i++) {
        const struct sbx_h1_field *f = &m->fields[i];
        if (name_is(f->name, f->name_len, name) &&
            list_has(f->value, f->value_len, token, strlen(token)))
            return true;
    }
    return false;
}

bool sbx_h1_hop_by_hop(const struct sbx_h1_msg *m, const struct sbx_h1_field *f)
{
    static const char *const hop[] = {"Connection", "Keep-Alive",         "Proxy-Connection",
                                      "TE",         "Proxy-Authenticate", "Proxy-Authorization",
                                      "Upgrade",    "Transfer-Encoding"};

    for (size_t i = 0; i < sizeof(hop) / sizeof(hop[0]); i++)
        if (name_is(f->name, f->name_len, hop[i]))
            return true;
    for (unsigned i = 0; i < m->nfields; i++) {
        const struct sbx_h1_field *c = &m->fields[i];
        if (name_is(c->name, c->name_len, "Connection") &&
            list_has(c->value, c->value_len, f->name, f->name_len))
            return true;
    }
    return false;
}

static int framing(const struct sbx_h1_msg *m, struct sbx_h1_body *b, bool response)
{
    const struct sbx_h1_field *cl = NULL;
    long long n;
    char num[20];

    memset(b, 0, sizeof(*b));
    if (sbx_h1_has_token(m, "Transfer-Encoding", "chunked")) {
        b->kind = SBX_H1_BODY_CHUNKED;
        return 0;
    }
    if (response && sbx_h1_get(m, "Transfer-Encoding")) {
        b->kind = SBX_H1_BODY_CLOSE; /* another coding: the body ends with the connection */
        return 0;
    }
    for (unsigned i = 0; i < m->nfields; i++) {
        const struct sbx_h1_field *f = &m->fields[i];
        if (!name_is(f->name, f->name_len, "Content-Length"))
            continue;
        if (cl && (cl->value_len != f->value_len || memcmp(cl->value, f->value, f->value_len)))
            return -EINVAL;
        cl = f;
    }
    if (!cl) {
        b->kind = response ? SBX_H1_BODY_CLOSE : SBX_H1_BODY_NONE;
        return 0;
    }
    if (cl->value_len == 0 || cl->value_len >= sizeof(num))
        return -EINVAL;
    memcpy(num, cl->value, cl->value_len);
    num[cl->value_len] = '\0';
    if (strspn(num, "0123456789") != cl->value_len || sbx_parse_int(num, 0, INT64_MAX, &n) < 0)
        return -EINVAL;
    b->kind = n ? SBX_H1_BODY_LENGTH : SBX_H1_BODY_NONE;
    b->left = (uint64_t)n;
    return 0;
}

int sbx_h1_request_body(const struct sbx_h1_msg *m, struct sbx_h1_body *b)
{
    return framing(m, b, false);
}

int sbx_h1_response_body(const struct sbx_h1_msg *m, bool head_request, struct sbx_h1_body *b)
{
    if (head_request || m->status < 200 || m->status == 204 || m->status == 304) {
        memset(b, 0, sizeof(*b));
        return 0;
    }
    return framing(m, b, true);
}

/* The chunked decoder's states (RFC 9112 §7.1). */
enum {
    CH_SIZE,         /* hex digits of a chunk's size */
    CH_EXT,          /* extensions after the size, to the CR */
    CH_SIZE_LF,      /* the LF ending the size line */
    CH_DATA,         /* the chunk's bytes */
    CH_DATA_CR,      /* the CRLF after them */
    CH_DATA_LF,      /* */
    CH_TRAILER,      /* at the start of a trailer line, or of the final CRLF */
    CH_TRAILER_LINE, /* within a trailer line, to its CR */
    CH_TRAILER_LF,   /* the LF ending a trailer line */
    CH_END_LF,       /* the LF of the final CRLF */
    CH_DONE,
};

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* One byte of the coding's framing (not of data); -EBADMSG when it cannot be. */
static int chunk_byte(struct sbx_h1_body *b, char c)
{
    int h;

    if (++b->line > LINE_MAX_BYTES)
        return -EBADMSG;
    switch (b->state) {
    case CH_SIZE:
        if ((h = hexval(c)) >= 0) {
            if (++b->digits > 15)
                return -EBADMSG; /* past 2^60: no chunk is that large */
            b->left = b->left * 16 + (uint64_t)h;
            return 0;
        }
        if (b->digits == 0)
            return -EBADMSG;
        if (c == '\r') {
            b->state = CH_SIZE_LF;
            return 0;
        }
        if (c != ';' && c != ' ' && c != '\t')
            return -EBADMSG;
        b->state = CH_EXT;
        return 0;
    case CH_EXT:
        if (c == '\r')
            b->state = CH_SIZE_LF;
        else if ((unsigned char)c < 0x20 && c != '\t')
            return -EBADMSG;
        return 0;
    case CH_SIZE_LF:
        if (c != '\n')
            return -EBADMSG;
        b->line = 0;
        b->state = b->left ? CH_DATA : CH_TRAILER;
        return 0;
    case CH_DATA_CR:
        b->state = CH_DATA_LF;
        return c == '\r' ? 0 : -EBADMSG;
    case CH_DATA_LF:
        if (c != '\n')
            return -EBADMSG;
        b->state = CH_SIZE;
        b->line = b->digits = 0;
        return 0;
    case CH_TRAILER:
        b->state = c == '\r' ? CH_END_LF : CH_TRAILER_LINE;
        return (unsigned char)c < 0x20 && c != '\r' ? -EBADMSG : 0;
    case CH_TRAILER_LINE:
        if (c == '\r')
            b->state = CH_TRAILER_LF;
        else if ((unsigned char)c < 0x20 && c != '\t')
            return -EBADMSG;
        return 0;
    case CH_TRAILER_LF:
        if (c != '\n')
            return -EBADMSG;
        b->trailer += b->line;
        b->line = 0;
        b->state = CH_TRAILER;
        return b->trailer > TRAILER_MAX_BYTES ? -EBADMSG : 0;
    case CH_END_LF:
        if (c != '\n')
            return -EBADMSG;
        b->state = CH_DONE;
        return 0;
    }
    return -EBADMSG;
}

static long chunked_feed(struct sbx_h1_body *b, char *buf, size_t len, size_t *out, bool *done)
{
    size_t i = 0, o = 0;

    while (i < len && b->state != CH_DONE) {
        if (b->state == CH_DATA) {
            size_t n = len - i < b->left ? len - i : (size_t)b->left;
            if (b->decode)
                memmove(buf + o, buf + i, n);
            o += n;
            i += n;
            if ((b->left -= n) == 0)
                b->state = CH_DATA_CR;
            continue;
        }
        if (chunk_byte(b, buf[i]) < 0)
            return -EBADMSG;
        if (!b->decode)
            o++;
        i++;
    }
    *out = o;
    *done = b->state == CH_DONE;
    return (long)i;
}

long sbx_h1_body_feed(struct sbx_h1_body *b, char *buf, size_t len, size_t *out, bool *done)
{
    size_t n;

    *done = false;
    switch (b->kind) {
    case SBX_H1_BODY_NONE:
        *out = 0;
        *done = true;
        return 0;
    case SBX_H1_BODY_LENGTH:
        n = len < b->left ? len : (size_t)b->left;
        b->left -= n;
        *out = n;
        *done = b->left == 0;
        return (long)n;
    case SBX_H1_BODY_CLOSE:
        *out = len;
        return (long)len;
    case SBX_H1_BODY_CHUNKED:
        return chunked_feed(b, buf, len, out, done);
    }
    return -EBADMSG;
}
