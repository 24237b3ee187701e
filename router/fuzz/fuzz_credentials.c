/* libFuzzer target for the browser's credentials a client sends (credentials.c): a request
 * target with its query (the `token` parameter) and a Cookie header (the router's cookie), any
 * bytes. Input: a request target, a NUL, a Cookie value.
 *
 * Checked: what the router forwards never holds the credential it took out — after stripping,
 * the target has no `token` parameter and the Cookie no router cookie; stripping again changes
 * nothing; a target without one is left byte for byte, any target keeps its path and every other
 * parameter in order, the Cookie every other pair; a decoded token has no control byte. */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "credentials.h"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The parameters of a query that are not named "token" as written (a percent-encoded name is
 * counted as whatever it decodes to by the code under test: only plain ones are checked). */
static size_t plain_others(const char *target)
{
    const char *q = strchr(target, '?');
    size_t n = 0;

    for (const char *p = q ? q + 1 : NULL; p && *p;) {
        size_t len = strcspn(p, "&");
        if (len && !memchr(p, '%', len) &&
            !(len >= 5 && !memcmp(p, "token", 5) && (len == 5 || p[5] == '=')))
            n++;
        p += len;
        if (*p == '&')
            p++;
    }
    return n;
}

static void check_target(const char *in)
{
    char *t = strdup(in), *again, buf[256];
    size_t len, path = strcspn(in, "?");
    int rc;

    CHECK(t, "strdup");
    rc = sbx_query_token(in, buf, sizeof(buf));
    CHECK(rc >= -ENOSPC && rc <= 1, "query token: %d", rc);
    if (rc == 1)
        for (const char *p = buf; *p; p++)
            CHECK((unsigned char)*p >= 0x20 && *p != 0x7f, "a control byte in a decoded token");
    len = sbx_query_strip_token(t);
    CHECK(len == strlen(t), "stripped length");
    if (rc == 0)
        CHECK(strcmp(t, in) == 0, "no token parameter, yet '%s' became '%s'", in, t);
    CHECK(strncmp(t, in, path) == 0, "the path changed");
    CHECK(sbx_query_token(t, buf, sizeof(buf)) == 0, "a token parameter left in '%s'", t);
    CHECK(plain_others(t) == plain_others(in), "other parameters lost: '%s' from '%s'", t, in);
    again = strdup(t);
    CHECK(again, "strdup");
    sbx_query_strip_token(again);
    CHECK(strcmp(again, t) == 0, "stripping twice differs");
    free(again);
    free(t);
}

static void check_cookie(const char *in)
{
    size_t n = 2 * strlen(in) + 2; /* pairs rejoined by "; " */
    char *out = malloc(n), *again = malloc(n);
    const char *v;
    size_t vlen;
    int len;

    CHECK(out && again, "malloc");
    len = sbx_cookie_strip(in, out, n);
    CHECK(len >= 0 && (size_t)len == strlen(out) && (size_t)len < n, "strip: %d", len);
    CHECK(strlen(in) || !len, "something from nothing");
    CHECK(!sbx_cookie_token(out, &v, &vlen), "the router's cookie left in '%s'", out);
    CHECK(sbx_cookie_strip(out, again, n) == len && strcmp(again, out) == 0,
          "stripping twice differs");
    if (sbx_cookie_token(in, &v, &vlen))
        CHECK(v >= in && v + vlen <= in + strlen(in),
              "the cookie's value is not inside the header");
    free(out);
    free(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 2);
    const char *cookie;

    if (!s || size > 16384) {
        free(s);
        return 0;
    }
    memcpy(s, data, size);
    s[size] = s[size + 1] = '\0';
    cookie = s + strlen(s) + 1 <= s + size ? s + strlen(s) + 1 : s + size + 1;
    check_target(s);
    check_cookie(cookie);
    free(s);
    return 0;
}
