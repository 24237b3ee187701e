/* Strict request heads (RFC 9112): see http_head.h. */
#include "http_head.h"

#include <string.h>
#include <strings.h>

static bool refuse(struct sbx_http_verdict *v, unsigned status, const char *code, const char *msg)
{
    v->status = status;
    v->code = code;
    v->message = msg;
    return false;
}

static bool bad_request(struct sbx_http_verdict *v, const char *msg)
{
    return refuse(v, 400, "BAD_REQUEST", msg);
}

static bool is_tchar(unsigned char ch)
{
    return (ch >= '0' && ch <= '9') || ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'z') ||
           (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

static bool is_digit(unsigned char ch)
{
    return ch >= '0' && ch <= '9';
}

static int hex(unsigned char ch)
{
    if (is_digit(ch))
        return ch - '0';
    ch |= 0x20;
    return ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
}

bool sbx_http_escapes_valid(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (s[i] == '%' &&
            (i + 2 >= len || hex((unsigned char)s[i + 1]) < 0 || hex((unsigned char)s[i + 2]) < 0))
            return false;
    return true;
}

/* uri-host [":" port] (RFC 9110 §7.2); empty is allowed. */
static bool host_valid(const char *s, size_t len)
{
    size_t i = 0;

    if (len && s[0] == '[') {
        for (i = 1; i < len && s[i] != ']'; i++)
            if (hex((unsigned char)s[i]) < 0 && s[i] != ':' && s[i] != '.')
                return false;
        if (i++ == len)
            return false;
    } else {
        /* reg-name: unreserved, sub-delims and percent-escapes (RFC 3986 §3.2.2) */
        for (; i < len && s[i] != ':'; i++)
            if (!is_digit((unsigned char)s[i]) && ((s[i] | 0x20) < 'a' || (s[i] | 0x20) > 'z') &&
                !strchr("-._~!$&'()*+,;=%", s[i]))
                return false;
        if (!sbx_http_escapes_valid(s, i))
            return false;
    }
    if (i == len)
        return true;
    if (s[i++] != ':')
        return false;
    for (; i < len; i++)
        if (!is_digit((unsigned char)s[i]))
            return false;
    return true;
}

static bool name_is(const char *name, size_t len, const char *want)
{
    return len == strlen(want) && strncasecmp(name, want, len) == 0;
}

static const char *value_fault(const char *value, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)value[i];
        if (ch == '\0')
            return "NUL byte in a header field value";
        if (ch == '\r' || ch == '\n')
            return "CR or LF in a header field value";
        if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
            return "control character in a header field value";
    }
    return NULL;
}

void sbx_http_fields_add(struct sbx_http_fields *f, const char *name, size_t name_len,
                         const char *value, size_t value_len)
{
    const char *fault = value_fault(value, value_len);

    if (fault && !f->bad_value)
        f->bad_value = fault;
    if (name_is(name, name_len, "Host")) {
        f->host++;
        f->host_invalid |= !host_valid(value, value_len);
    } else if (name_is(name, name_len, "Content-Length")) {
        bool digits = value_len > 0 && value_len <= 18;
        for (size_t i = 0; digits && i < value_len; i++)
            digits = is_digit((unsigned char)value[i]);
        f->content_length++;
        f->content_length_invalid |= !digits;
    } else if (name_is(name, name_len, "Transfer-Encoding")) {
        f->transfer_encoding++;
        f->transfer_encoding_unknown |= !name_is(value, value_len, "chunked");
    }
}

bool sbx_http_fields_check(const struct sbx_http_fields *f, int minor, struct sbx_http_verdict *v)
{
    if (f->bad_value)
        return bad_request(v, f->bad_value);
    if (minor >= 1 && f->host == 0)
        return bad_request(v, "HTTP/1.1 request without a Host header");
    if (f->host > 1)
        return bad_request(v, "more than one Host header");
    if (f->host_invalid)
        return bad_request(v, "invalid Host header");
    if (f->transfer_encoding && minor == 0)
        return bad_request(v, "Transfer-Encoding in an HTTP/1.0 request");
    if (f->transfer_encoding && f->content_length)
        return bad_request(v, "both Content-Length and Transfer-Encoding");
    if (f->transfer_encoding > 1 || f->transfer_encoding_unknown)
        return refuse(v, 501, "NOT_IMPLEMENTED", "transfer coding other than chunked");
    if (f->content_length > 1)
        return bad_request(v, "more than one Content-Length header");
    if (f->content_length_invalid)
        return bad_request(v, "Content-Length is not a decimal number");
    v->status = 0;
    return true;
}

size_t sbx_http_head_end(const char *buf, size_t len)
{
    size_t i = 0;

    while (i + 1 < len && buf[i] == '\r' && buf[i + 1] == '\n')
        i += 2; /* leading empty lines are not the end */
    for (const char *nl; (nl = memchr(buf + i, '\n', len - i)); i = (size_t)(nl - buf) + 1) {
        size_t at = (size_t)(nl - buf) + 1;
        if (at < len && buf[at] == '\n')
            return at + 1;
        if (at + 1 < len && buf[at] == '\r' && buf[at + 1] == '\n')
            return at + 2;
    }
    return 0;
}

const char *sbx_http_target_path(const char *t)
{
    const char *p;

    if (strncasecmp(t, "http://", 7) == 0)
        p = t + 7;
    else if (strncasecmp(t, "https://", 8) == 0)
        p = t + 8;
    else
        return t;
    return p + strcspn(p, "/?");
}

/* One line of [*p, end): its length without CRLF; *p moves past it. -1: no CRLF ending it
 * (a bare LF, or a CR inside). */
static long next_line(const char **p, const char *end)
{
    const char *nl = memchr(*p, '\n', (size_t)(end - *p));
    const char *line = *p;
    size_t n;

    if (!nl || nl == line || nl[-1] != '\r')
        return -1;
    n = (size_t)(nl - line) - 1;
    if (memchr(line, '\r', n))
        return -1;
    *p = nl + 1;
    return (long)n;
}

static bool check_target(const char *t, size_t len, bool options, struct sbx_http_verdict *v)
{
    const char *path;

    /* Bytes past ASCII pass, as curl sends a UTF-8 name unescaped; the route decides. */
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)t[i] <= 0x20 || (unsigned char)t[i] == 0x7f)
            return bad_request(v, "control character or space in the request target");
    if (!sbx_http_escapes_valid(t, len))
        return bad_request(v, "invalid percent-escape in the request target");
    if (len == 1 && t[0] == '*')
        return options || bad_request(v, "asterisk-form target outside OPTIONS");
    if (t[0] == '/')
        return true;
    path = sbx_http_target_path(t);
    if (path == t)
        return bad_request(v, "request target is neither in origin nor in absolute form");
    if (!host_valid(t + (t[4] == ':' ? 7 : 8), (size_t)(path - t) - (t[4] == ':' ? 7 : 8)))
        return bad_request(v, "invalid authority in the request target");
    return true;
}

static bool check_request_line(const char *line, size_t n, struct sbx_http_head *h,
                               const char **target, size_t *target_len, struct sbx_http_verdict *v)
{
    size_t m = 0, t;
    const char *ver;

    while (m < n && is_tchar((unsigned char)line[m]))
        m++;
    if (m == 0 || m == n || line[m] != ' ')
        return bad_request(v, "request line does not parse (method SP target SP version)");
    t = m + 1;
    *target = line + t;
    while (t < n && line[t] != ' ')
        t++;
    *target_len = t - m - 1;
    if (*target_len == 0 || t + 9 != n)
        return bad_request(v, "request line does not parse (method SP target SP version)");
    ver = line + t + 1;
    if (strncmp(ver, "HTTP/", 5) != 0 || !is_digit((unsigned char)ver[5]) || ver[6] != '.' ||
        !is_digit((unsigned char)ver[7]))
        return bad_request(v, "request line does not parse (method SP target SP version)");
    if (ver[5] != '1' || ver[7] > '1')
        return refuse(v, 505, "HTTP_VERSION_NOT_SUPPORTED", "only HTTP/1.0 and HTTP/1.1");
    h->minor = ver[7] - '0';
    h->head_method = m == 4 && strncmp(line, "HEAD", 4) == 0;
    h->get_method = m == 3 && strncmp(line, "GET", 3) == 0;
    return check_target(*target, *target_len, m == 7 && strncmp(line, "OPTIONS", 7) == 0, v);
}

static bool check_field_line(const char *line, size_t n, struct sbx_http_fields *f,
                             struct sbx_http_verdict *v)
{
    size_t c = 0, a, b;

    if (line[0] == ' ' || line[0] == '\t')
        return bad_request(v, "obsolete line folding in the header");
    while (c < n && is_tchar((unsigned char)line[c]))
        c++;
    if (c == n || line[c] != ':')
        return bad_request(v, "header field name is not a token followed by a colon");
    if (c == 0)
        return bad_request(v, "empty header field name");
    for (a = c + 1; a < n && (line[a] == ' ' || line[a] == '\t'); a++)
        ;
    for (b = n; b > a && (line[b - 1] == ' ' || line[b - 1] == '\t'); b--)
        ;
    sbx_http_fields_add(f, line, c, line + a, b - a);
    return true;
}

bool sbx_http_head_check(const char *buf, size_t len, bool (*is_probe)(const char *, size_t),
                         struct sbx_http_head *h, struct sbx_http_verdict *v)
{
    const char *p = buf, *end = buf + len, *target;
    struct sbx_http_fields f = {0};
    size_t target_len;
    long n;

    memset(h, 0, sizeof(*h));
    while (end - p >= 2 && p[0] == '\r' && p[1] == '\n')
        p += 2;
    if ((n = next_line(&p, end)) < 0)
        return bad_request(v, "request line not ended by CRLF");
    if (!check_request_line(p - n - 2, (size_t)n, h, &target, &target_len, v))
        return false;
    while ((n = next_line(&p, end)) > 0)
        if (!check_field_line(p - n - 2, (size_t)n, &f, v))
            return false;
    if (n < 0)
        return bad_request(v, "header line not ended by CRLF");
    if (!sbx_http_fields_check(&f, h->minor, v))
        return false;
    if (is_probe) {
        const char *path = sbx_http_target_path(target);
        size_t plen = target_len - (size_t)(path - target);
        size_t q = 0;
        while (q < plen && path[q] != '?')
            q++;
        h->probe = (h->head_method || h->get_method) && is_probe(path, q);
    }
    return true;
}
