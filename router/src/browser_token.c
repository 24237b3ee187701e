/* The browser's credentials as strings (browser_token.h). */
#define _GNU_SOURCE
#include "browser_token.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

static int hex(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Percent-decodes s[0..n) ('+' is a space, as in a form's query) into buf. The length, -EINVAL
 * for a bad escape or a control byte, -ENOSPC when it does not fit with its NUL. */
static ssize_t decode(const char *s, size_t n, char *buf, size_t size)
{
    size_t o = 0;

    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '%') {
            int hi = i + 2 < n ? hex(s[i + 1]) : -1, lo = i + 2 < n ? hex(s[i + 2]) : -1;
            if (hi < 0 || lo < 0)
                return -EINVAL;
            c = (unsigned char)(hi * 16 + lo);
            i += 2;
        } else if (c == '+') {
            c = ' ';
        }
        if (c < 0x20 || c == 0x7f)
            return -EINVAL;
        if (o + 1 >= size)
            return -ENOSPC;
        buf[o++] = (char)c;
    }
    buf[o] = '\0';
    return (ssize_t)o;
}

/* Whether the parameter p[0..n) ("key" or "key=value") is a `token` one. */
static bool is_token_param(const char *p, size_t n)
{
    const char *eq = memchr(p, '=', n);
    char key[8];

    return decode(p, eq ? (size_t)(eq - p) : n, key, sizeof(key)) == 5 && strcmp(key, "token") == 0;
}

int sbx_query_token(const char *target, char *buf, size_t size)
{
    const char *q = strchr(target, '?');

    if (!q)
        return 0;
    for (const char *p = q + 1; *p;) {
        size_t n = strcspn(p, "&");
        if (is_token_param(p, n)) {
            const char *eq = memchr(p, '=', n);
            ssize_t r =
                eq ? decode(eq + 1, n - (size_t)(eq + 1 - p), buf, size) : decode("", 0, buf, size);
            return r < 0 ? (int)r : 1;
        }
        p += n;
        if (*p == '&')
            p++;
    }
    return 0;
}

size_t sbx_query_strip_token(char *target)
{
    char *q = strchr(target, '?'), *p;
    bool cut_any = false;

    if (!q)
        return strlen(target);
    /* Each token parameter goes with one '&' beside it; every other byte stays as it came. */
    for (p = q + 1; *p;) {
        size_t n = strcspn(p, "&"), cut = n + (p[n] == '&');
        if (!is_token_param(p, n)) {
            p += cut;
            continue;
        }
        if (!p[n] && p > q + 1) { /* the last one: the '&' before it goes */
            p--;
            cut = n + 1;
        }
        memmove(p, p + cut, strlen(p + cut) + 1);
        cut_any = true;
    }
    if (cut_any && !q[1])
        *q = '\0'; /* nothing left: no '?' either */
    return strlen(target);
}

/* Calls fn on each "name=value" pair of a Cookie header, trimmed; stops when it returns true. */
static bool each_cookie(const char *cookie, bool (*fn)(const char *p, size_t n, void *arg),
                        void *arg)
{
    for (const char *p = cookie; p && *p;) {
        size_t n = strcspn(p, ";");
        const char *s = p, *e = p + n;
        while (s < e && (*s == ' ' || *s == '\t'))
            s++;
        while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
            e--;
        if (e > s && fn(s, (size_t)(e - s), arg))
            return true;
        p += n;
        if (*p == ';')
            p++;
    }
    return false;
}

static bool is_ours(const char *p, size_t n)
{
    size_t k = strlen(SBX_AUTHZ_COOKIE);

    return n > k && memcmp(p, SBX_AUTHZ_COOKIE, k) == 0 && p[k] == '=';
}

struct found {
    const char *v;
    size_t n;
};

static bool find_ours(const char *p, size_t n, void *arg)
{
    struct found *f = arg;
    size_t k = strlen(SBX_AUTHZ_COOKIE) + 1;

    if (!is_ours(p, n))
        return false;
    f->v = p + k;
    f->n = n - k;
    if (f->n >= 2 && f->v[0] == '"' && f->v[f->n - 1] == '"') {
        f->v++;
        f->n -= 2;
    }
    return true;
}

bool sbx_cookie_token(const char *cookie, const char **ret, size_t *ret_len)
{
    struct found f = {0};

    if (!each_cookie(cookie, find_ours, &f) || f.n == 0)
        return false;
    *ret = f.v;
    *ret_len = f.n;
    return true;
}

struct strip {
    char *buf;
    size_t size, len;
    bool full;
};

static bool keep_others(const char *p, size_t n, void *arg)
{
    struct strip *s = arg;
    size_t sep = s->len ? 2 : 0;

    if (is_ours(p, n))
        return false;
    if (s->len + sep + n + 1 > s->size) {
        s->full = true;
        return true;
    }
    memcpy(s->buf + s->len, "; ", sep);
    memcpy(s->buf + s->len + sep, p, n);
    s->len += sep + n;
    s->buf[s->len] = '\0';
    return false;
}

int sbx_cookie_strip(const char *cookie, char *buf, size_t size)
{
    struct strip s = {.buf = buf, .size = size};

    if (size)
        buf[0] = '\0';
    each_cookie(cookie, keep_others, &s);
    return s.full ? -ENOSPC : (int)s.len;
}
