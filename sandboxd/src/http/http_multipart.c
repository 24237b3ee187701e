/* A streaming multipart/form-data parser that accepts only whole forms (http_multipart.h).
 *
 * The body is read as RFC 2046 writes it: a preamble, then "--boundary", then parts each
 * introduced by a delimiter "\r\n--boundary" followed by a line end (after optional blanks) and
 * ended by the next delimiter, the last by "\r\n--boundary--", then an epilogue that is ignored.
 * The body is taken to start after a line end, so that it may open with "--boundary" directly.
 * A delimiter is searched for byte by byte across pieces of the body: as "\r" appears only at
 * its start (RFC 2046's boundary characters hold no CR), the bytes of a partial match are always
 * the delimiter's own first bytes: on a mismatch, those of an earlier piece are handed on from
 * the delimiter itself, with nothing buffered. */
#include "http_multipart.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>

#define DELIM_MAX   (4 + SBX_MULTIPART_BOUNDARY_MAX)
#define LINE_MAX_   8192  /* one header line of a part */
#define HEADERS_MAX 16384 /* all header lines of a part */

enum mp_state {
    MP_PREAMBLE,   /* looking for the first delimiter */
    MP_AFTER,      /* a delimiter matched: "--" or a line end must follow */
    MP_PADDING,    /* blanks after a delimiter */
    MP_CLOSE_DASH, /* "-" after a delimiter: the second must follow */
    MP_LF,         /* "\r" after a delimiter: "\n" must follow */
    MP_HEADERS,    /* a part's header lines */
    MP_BODY,       /* a part's content, up to the next delimiter */
    MP_EPILOGUE,   /* after the closing delimiter: ignored */
};

struct sbx_multipart {
    enum mp_state state;
    char delim[DELIM_MAX + 1]; /* "\r\n--" boundary */
    size_t delim_len, matched;
    sbx_multipart_data_fn fn;
    void *cls;
    /* the part being read */
    char line[LINE_MAX_];
    size_t line_len, header_bytes;
    bool named, is_file, in_file;
    bool saw_file;
    const struct sbx_multipart_parts *parts; /* several "file" parts, announced */
    char filename[SBX_MULTIPART_FILENAME_MAX + 1];
    bool filename_cut;
    struct sbx_error fail; /* code != 0 once failed */
};

static bool bchar(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c && strchr("'()+_,-./:=? ", c));
}

static bool tchar(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

static const char *skip_ows(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

static void put(char *out, size_t size, size_t *n, char c, bool *cut)
{
    if (*n < size - 1)
        out[(*n)++] = c;
    else
        *cut = true;
}

/* A parameter value at p (a token or a quoted string) into out (cut at size - 1, *cut set);
 * returns what follows it, or NULL when malformed. */
static const char *param_value(const char *p, char *out, size_t size, bool *cut)
{
    const char *start = p;
    size_t n = 0;

    *cut = false;
    if (*p != '"') {
        for (; tchar(*p); p++)
            put(out, size, &n, *p, cut);
        out[n] = '\0';
        return p > start ? p : NULL;
    }
    for (p++; *p && *p != '"'; p++) {
        if (*p == '\\' && p[1])
            p++;
        put(out, size, &n, *p, cut);
    }
    out[n] = '\0';
    return *p == '"' ? p + 1 : NULL;
}

static bool boundary_ok(const char *b)
{
    size_t n = strlen(b);

    if (n == 0 || n > SBX_MULTIPART_BOUNDARY_MAX || b[n - 1] == ' ')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!bchar(b[i]))
            return false;
    return true;
}

/* Calls fn for each "; name=value" parameter after p until one is malformed or fn says stop. */
static void each_param(const char *p, bool (*fn)(void *, const char *, size_t, const char *, bool),
                       void *cls)
{
    char value[SBX_MULTIPART_FILENAME_MAX + 1];
    bool cut;

    for (;;) {
        const char *name;
        size_t nlen;
        p = skip_ows(p);
        if (*p != ';')
            return;
        p = skip_ows(p + 1);
        for (name = p; tchar(*p); p++)
            ;
        nlen = (size_t)(p - name);
        if (!nlen || *p != '=')
            return;
        p = param_value(p + 1, value, sizeof(value), &cut);
        if (!p || !fn(cls, name, nlen, value, cut))
            return;
    }
}

static bool take_boundary(void *cls, const char *name, size_t nlen, const char *v, bool cut)
{
    char *out = cls;

    if (nlen != 8 || strncasecmp(name, "boundary", 8) != 0)
        return true;
    if (!cut && boundary_ok(v))
        memcpy(out, v, strlen(v) + 1);
    return false;
}

int sbx_multipart_boundary(const char *content_type, char ret[SBX_MULTIPART_BOUNDARY_MAX + 1])
{
    const char *p = content_type ? skip_ows(content_type) : NULL;

    if (!p || strncasecmp(p, "multipart/form-data", 19) != 0)
        return -EINVAL;
    ret[0] = '\0';
    each_param(p + 19, take_boundary, ret);
    return ret[0] ? 0 : -EINVAL;
}

int sbx_multipart_new(const char *boundary, sbx_multipart_data_fn fn, void *cls,
                      struct sbx_multipart **ret, struct sbx_error *err)
{
    struct sbx_multipart *m;

    if (!boundary_ok(boundary))
        return sbx_error_set(err, EINVAL, "invalid multipart boundary");
    m = calloc(1, sizeof(*m));
    if (!m)
        return sbx_error_set(err, ENOMEM, "allocate multipart parser");
    m->delim_len = (size_t)snprintf(m->delim, sizeof(m->delim), "\r\n--%s", boundary);
    m->matched = 2; /* the body starts after a line end */
    m->fn = fn;
    m->cls = cls;
    *ret = m;
    return 0;
}

static int fail(struct sbx_multipart *m, const char *reason)
{
    return sbx_error_set(&m->fail, EINVAL, "invalid multipart body: %s", reason);
}

static bool take_name(void *cls, const char *name, size_t nlen, const char *v, bool cut)
{
    struct sbx_multipart *m = cls;

    if (nlen == 8 && strncasecmp(name, "filename", 8) == 0) {
        snprintf(m->filename, sizeof(m->filename), "%s", v);
        m->filename_cut = cut;
        return true;
    }
    if (nlen != 4 || strncasecmp(name, "name", 4) != 0)
        return true;
    m->named = v[0] != '\0';
    m->is_file = !cut && strcmp(v, "file") == 0;
    return true;
}

/* One header line of a part (without its line end). */
static void header_line(struct sbx_multipart *m, const char *line)
{
    const char *p;

    if (strncasecmp(line, "Content-Disposition:", 20) != 0)
        return;
    p = skip_ows(line + 20);
    if (strncasecmp(p, "form-data", 9) != 0 || tchar(p[9]))
        return;
    each_param(p + 9, take_name, m);
}

/* A parts callback's result: its -errno stops the parse. */
static int part_call(struct sbx_multipart *m, int r)
{
    if (r < 0 && !m->fail.code)
        sbx_error_set(&m->fail, -r, "multipart part");
    return r < 0 ? r : 0;
}

/* The empty line after a part's headers: the part's content follows. */
static int headers_end(struct sbx_multipart *m)
{
    if (!m->named)
        return fail(m, "a part has no name");
    if (m->is_file && m->saw_file && !m->parts)
        return fail(m, "a second \"file\" part");
    m->saw_file |= m->is_file;
    m->in_file = m->is_file;
    m->state = MP_BODY;
    m->matched = 0;
    if (m->in_file && m->parts) {
        if (m->filename_cut)
            return fail(m, "a part's filename is too long");
        return part_call(m, m->parts->begin(m->cls, m->filename, &m->fail));
    }
    return 0;
}

/* Header bytes at p[0..n); returns how many were taken (up to a line's end), or -errno. */
static ssize_t headers(struct sbx_multipart *m, const char *p, size_t n)
{
    const char *nl = memchr(p, '\n', n);
    size_t take = nl ? (size_t)(nl - p) + 1 : n;

    m->header_bytes += take;
    if (m->line_len + take > sizeof(m->line) || m->header_bytes > HEADERS_MAX)
        return fail(m, "part headers too large");
    memcpy(m->line + m->line_len, p, take);
    m->line_len += take;
    if (!nl)
        return (ssize_t)take;
    m->line_len--; /* the '\n' */
    if (m->line_len && m->line[m->line_len - 1] == '\r')
        m->line_len--;
    m->line[m->line_len] = '\0';
    if (memchr(m->line, '\0', m->line_len))
        return fail(m, "NUL byte in part headers");
    if (m->line_len == 0) {
        int r = headers_end(m);
        return r < 0 ? r : (ssize_t)take;
    }
    header_line(m, m->line);
    m->line_len = 0;
    return (ssize_t)take;
}

static int emit(struct sbx_multipart *m, const char *p, size_t n)
{
    int r;

    if (m->state != MP_BODY || !m->in_file || n == 0)
        return 0;
    r = m->fn(m->cls, p, n, &m->fail);
    if (r < 0 && !m->fail.code)
        sbx_error_set(&m->fail, -r, "write part");
    return r < 0 ? r : 0;
}

/* Content (or preamble) bytes at p[0..n) up to a whole delimiter; returns how many were taken,
 * or -errno. Content is handed on in runs as long as the piece allows, not cut at every "\r"
 * (random data has one every 256 bytes: a write each would be most of an upload's cost): the
 * bytes of a partial match that began in this piece stay in the run when they turn out to be
 * content, and only a match carried over from an earlier piece is handed on from the delimiter
 * itself. */
static ssize_t content(struct sbx_multipart *m, const char *p, size_t n)
{
    size_t i = 0, from = 0, at = 0; /* p[from..) not handed on yet; p[at]: where the match began */
    bool carried = m->matched > 0;  /* the match began in an earlier piece */
    int r;

    while (i < n) {
        if (m->matched == 0) {
            const char *cr = memchr(p + i, '\r', n - i);
            if (!cr) {
                i = n;
                break;
            }
            at = (size_t)(cr - p);
            i = at + 1;
            m->matched = 1;
            continue;
        }
        if (p[i] != m->delim[m->matched]) {
            /* The bytes matched so far were content. Those of this piece are in the run; those
             * of an earlier one are the delimiter's first bytes. */
            if (carried && (r = emit(m, m->delim, m->matched)) < 0)
                return r;
            if (carried)
                from = i;
            carried = false;
            m->matched = 0;
            continue;
        }
        i++;
        if (++m->matched == m->delim_len) {
            m->matched = 0;
            if (!carried && (r = emit(m, p + from, at - from)) < 0)
                return r;
            if (m->state == MP_BODY && m->in_file && m->parts &&
                (r = part_call(m, m->parts->end(m->cls, &m->fail))) < 0)
                return r;
            m->state = MP_AFTER;
            return (ssize_t)i;
        }
    }
    /* The end of the piece: a partial match is held back (its bytes are the delimiter's). */
    if (carried)
        return (ssize_t)n; /* every byte of the piece is part of the match */
    if ((r = emit(m, p + from, (m->matched ? at : n) - from)) < 0)
        return r;
    return (ssize_t)n;
}

static int after_delimiter(struct sbx_multipart *m, char c)
{
    static const char *const junk = "a boundary is followed by neither \"--\" nor a line end";

    switch (m->state) {
    case MP_AFTER:
    case MP_PADDING:
        if (c == ' ' || c == '\t')
            m->state = MP_PADDING;
        else if (c == '\r')
            m->state = MP_LF;
        else if (c == '-' && m->state == MP_AFTER)
            m->state = MP_CLOSE_DASH;
        else
            return fail(m, junk);
        return 0;
    case MP_CLOSE_DASH:
        if (c != '-')
            return fail(m, junk);
        m->state = MP_EPILOGUE;
        return 0;
    default: /* MP_LF */
        if (c != '\n')
            return fail(m, junk);
        m->state = MP_HEADERS;
        m->line_len = m->header_bytes = 0;
        m->named = m->is_file = m->in_file = m->filename_cut = false;
        m->filename[0] = '\0';
        return 0;
    }
}

int sbx_multipart_feed(struct sbx_multipart *m, const char *data, size_t len, struct sbx_error *err)
{
    size_t i = 0;

    while (!m->fail.code && i < len && m->state != MP_EPILOGUE) {
        ssize_t took = 1;
        switch (m->state) {
        case MP_PREAMBLE:
        case MP_BODY:
            took = content(m, data + i, len - i);
            break;
        case MP_HEADERS:
            took = headers(m, data + i, len - i);
            break;
        default:
            took = after_delimiter(m, data[i]) < 0 ? -1 : 1;
            break;
        }
        if (took < 0)
            break;
        i += (size_t)took;
    }
    if (m->fail.code) {
        if (err)
            *err = m->fail;
        return -m->fail.code;
    }
    return 0;
}

int sbx_multipart_finish(struct sbx_multipart *m, struct sbx_error *err)
{
    if (!m->fail.code && m->state == MP_BODY)
        fail(m, "a part does not end with its boundary");
    else if (!m->fail.code && m->state != MP_EPILOGUE)
        fail(m, "the body ends before the closing boundary");
    else if (!m->fail.code && !m->saw_file)
        sbx_error_set(&m->fail, EINVAL, "multipart body is missing the required \"file\" part");
    if (m->fail.code) {
        if (err)
            *err = m->fail;
        return -m->fail.code;
    }
    return 0;
}

void sbx_multipart_set_parts(struct sbx_multipart *m, const struct sbx_multipart_parts *parts)
{
    m->parts = parts;
}

void sbx_multipart_free(struct sbx_multipart *m)
{
    free(m);
}
