/* authz: each mode's verdicts on what a request carries (token in the header, the query or the
 * cookie; the sandbox it names; pod overrides), what of the credentials goes on, the counters;
 * and the browser's credentials: the query parameter and the cookie found and taken out. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "authz.h"
#include "credentials.h"
#include "scoped_token.h"
#include "tap.h"

#define SECRET "0123456789abcdef0123456789abcdef-router-test-secret"

static time_t fixed_now(void)
{
    return 1000;
}

static struct sbx_authz *make(enum sbx_authz_mode mode, const char *secret_file, bool require)
{
    struct sbx_authz_opts o = {.mode = mode,
                               .secret_file = secret_file,
                               .require_token = require,
                               .clock = fixed_now,
                               /* never dereferenced: these tests never let it block */
                               .kube = (struct sbx_kube *)(void *)&o};
    struct sbx_authz *a = NULL;
    struct sbx_error e = {0};

    if (sbx_authz_new(&a, &o, &e) < 0)
        printf("# %s\n", e.msg);
    return a;
}

static int check(struct sbx_authz *a, const struct sbx_authz_req *r, const char **msg)
{
    static struct sbx_error e;
    struct sbx_authz_verdict v;
    int rc;

    e = (struct sbx_error){0};
    rc = sbx_authz_check(a, r, false, &v, &e);
    if (msg)
        *msg = e.msg;
    return rc;
}

static void test_allow_all(void)
{
    struct sbx_authz *a = make(SBX_AUTHZ_ALLOW_ALL, NULL, false);
    struct sbx_authz_req r = {.ns = "default", .name = "sb", .overrides = true};
    struct sbx_authz_forward f;
    struct sbx_authz_verdict v = {0};
    uint64_t allow, deny;

    ok(check(a, &r, NULL) == 0, "allow-all: anything passes, overrides too");
    r.sandboxd = true;
    sbx_authz_forward(a, &r, &v, &f);
    ok(f.keep_authorization && f.keep_query_token && !f.set_authorization,
       "to sandboxd the client's credentials go on (they are sandboxd's)");
    r.sandboxd = false;
    sbx_authz_forward(a, &r, &v, &f);
    ok(!f.keep_authorization && !f.keep_query_token, "to a user's port nothing does");
    sbx_authz_stats(a, &allow, &deny);
    ok(allow == 1 && deny == 0, "counted");
    sbx_authz_free(a);
}

static void test_scoped(const char *file)
{
    struct sbx_authz *a = make(SBX_AUTHZ_SCOPED_TOKEN, file, false);
    struct sbx_scoped_key k;
    char tok[512], other[512], expired[512], hdr[600], cookie[700];
    struct sbx_authz_req r = {.ns = "team-a", .name = "box-a"};
    struct sbx_authz_verdict v;
    struct sbx_authz_forward f;
    struct sbx_error e = {0};
    const char *msg = "";
    uint64_t allow, deny;

    if (!ok(a != NULL, "scoped-token authorizer"))
        return;
    sbx_scoped_key_init(&k, SECRET, strlen(SECRET), NULL);
    sbx_scoped_token_mint(&k, "team-a", "box-a", 2000, tok, sizeof(tok), NULL);
    sbx_scoped_token_mint(&k, "team-a", "box-b", 2000, other, sizeof(other), NULL);
    sbx_scoped_token_mint(&k, "team-a", "box-a", 1000, expired, sizeof(expired), NULL);

    ok(check(a, &r, &msg) == -EACCES && !strcmp(msg, "unauthenticated"), "missing: 401 %s", msg);
    snprintf(hdr, sizeof(hdr), "bearer   %s ", tok);
    r.authorization = hdr;
    ok(check(a, &r, NULL) == 0, "its token in the header (scheme in any case, spaces around)");
    r.overrides = true;
    ok(check(a, &r, &msg) == -EPERM && !strcmp(msg, "forbidden"),
       "with a pod IP or UID override: 403");
    r.overrides = false;
    snprintf(hdr, sizeof(hdr), "Bearer %s", other);
    ok(check(a, &r, &msg) == -EPERM, "another sandbox's token: 403 %s", msg);
    r.ns = "team-b";
    r.name = "box-b";
    ok(check(a, &r, NULL) == -EPERM, "the right name in another namespace: 403");
    r.ns = "team-a";
    r.name = "box-a";
    snprintf(hdr, sizeof(hdr), "Bearer %s", expired);
    ok(check(a, &r, &msg) == -EACCES, "expired: 401");
    snprintf(hdr, sizeof(hdr), "Bearer %sx", tok);
    ok(check(a, &r, &msg) == -EACCES, "forged (a changed signature): 401");
    snprintf(hdr, sizeof(hdr), "Basic %s", tok);
    ok(check(a, &r, &msg) == -EACCES, "not a Bearer: as if missing");
    r.authorization = NULL;
    r.query_token = tok;
    ok(sbx_authz_check(a, &r, false, &v, &e) == 0 && v.from == SBX_AUTHZ_FROM_QUERY &&
           v.expires == 2000,
       "by query");
    ok(sbx_cookie_set(&v, "/", false, 1000, cookie, sizeof(cookie)) > 0 &&
           strstr(cookie, SBX_AUTHZ_COOKIE "=v1.") == cookie &&
           strstr(cookie, "; Path=/; HttpOnly; SameSite=Lax; Max-Age=1000"),
       "which sets the cookie, until the token expires: %s", cookie);
    r.sandboxd = true;
    sbx_authz_forward(a, &r, &v, &f);
    ok(!f.keep_authorization && !f.set_authorization && !f.keep_query_token,
       "the router's credential goes on to nobody, sandboxd included");
    r.query_token = NULL;
    snprintf(cookie, sizeof(cookie), "a=1; " SBX_AUTHZ_COOKIE "=%s; b=2", tok);
    r.cookie = cookie;
    ok(sbx_authz_check(a, &r, false, &v, &e) == 0 && v.from == SBX_AUTHZ_FROM_COOKIE, "by cookie");
    ok(sbx_cookie_set(&v, "/", false, 1000, hdr, sizeof(hdr)) == 0,
       "a token from the cookie sets none again");
    snprintf(cookie, sizeof(cookie), SBX_AUTHZ_COOKIE "=%s", other);
    ok(check(a, &r, NULL) == -EPERM, "another sandbox's token by cookie: 403");
    sbx_authz_stats(a, &allow, &deny);
    ok(allow == 3 && deny == 8, "decisions counted: %llu allowed, %llu denied",
       (unsigned long long)allow, (unsigned long long)deny);
    sbx_authz_free(a);
}

static void test_api_modes(void)
{
    struct sbx_authz *a = make(SBX_AUTHZ_TOKENREVIEW, NULL, false);
    struct sbx_authz_req r = {.ns = "default", .name = "sb", .overrides = true};
    struct sbx_authz_verdict v;
    struct sbx_authz_forward f;
    struct sbx_error e = {0};

    ok(check(a, &r, NULL) == 0, "tokenreview without a token and not required: allowed");
    r.authorization = "Bearer abc";
    ok(check(a, &r, NULL) == -EWOULDBLOCK, "a token not yet reviewed needs the API server");
    sbx_authz_free(a);
    a = make(SBX_AUTHZ_TOKENREVIEW, NULL, true);
    r.authorization = NULL;
    ok(check(a, &r, NULL) == -EACCES, "required and missing: 401");
    sbx_authz_free(a);

    a = make(SBX_AUTHZ_SANDBOX_TOKEN, NULL, false);
    ok(check(a, &r, NULL) == -EACCES, "sandbox-token, missing: 401");
    r.authorization = "Bearer abc";
    ok(check(a, &r, NULL) == -EPERM, "with an override: 403 before any API call");
    r.overrides = false;
    ok(check(a, &r, NULL) == -EWOULDBLOCK, "else the Secret is needed");
    r.authorization = NULL;
    r.query_token = "abc";
    r.sandboxd = true;
    sbx_authz_check(a, &r, false, &v, &e);
    sbx_authz_forward(a, &r, &v, &f);
    ok(f.set_authorization && !f.keep_query_token,
       "its token goes to sandboxd as the header sandboxd reads, wherever it came");
    r.sandboxd = false;
    sbx_authz_forward(a, &r, &v, &f);
    ok(!f.set_authorization && !f.keep_authorization, "and to no user's port");
    sbx_authz_free(a);
    ok(make(SBX_AUTHZ_SCOPED_TOKEN, NULL, false) == NULL, "scoped-token needs its secret file");
}

static void test_query(void)
{
    char t[256], buf[64];

    ok(sbx_query_token("/a?x=1&token=ab%2Fc+d&y=2", buf, sizeof(buf)) == 1 &&
           !strcmp(buf, "ab/c d"),
       "the token parameter, decoded: %s", buf);
    ok(sbx_query_token("/a?x=1", buf, sizeof(buf)) == 0 && sbx_query_token("/a", buf, 8) == 0,
       "none");
    ok(sbx_query_token("/a?%74oken=z", buf, sizeof(buf)) == 1 && !strcmp(buf, "z"),
       "its name percent-encoded");
    ok(sbx_query_token("/a?token=a%0ab", buf, sizeof(buf)) == -EINVAL, "a control byte");
    ok(sbx_query_token("/a?token=a%zz", buf, sizeof(buf)) == -EINVAL, "a bad escape");
    ok(sbx_query_token("/a?token=abcdefgh", buf, 4) == -ENOSPC, "too long");
    snprintf(t, sizeof(t), "/p?a=1&token=x&b=2&%%74oken=y&tokens=3");
    ok(sbx_query_strip_token(t) == strlen(t) && !strcmp(t, "/p?a=1&b=2&tokens=3"),
       "every token parameter taken out, the others kept in order: %s", t);
    snprintf(t, sizeof(t), "/p?token=x");
    ok(sbx_query_strip_token(t) == 2 && !strcmp(t, "/p"), "nothing left: no '?'");
    snprintf(t, sizeof(t), "/p");
    ok(sbx_query_strip_token(t) == 2 && !strcmp(t, "/p"), "no query");
}

static void test_cookie(void)
{
    char buf[128];
    const char *v;
    size_t n;

    ok(sbx_cookie_token("a=1;" SBX_AUTHZ_COOKIE "=\"xyz\" ; b=2", &v, &n) && n == 3 &&
           !memcmp(v, "xyz", 3),
       "ours found (quoted, spaces)");
    ok(!sbx_cookie_token("x" SBX_AUTHZ_COOKIE "=1", &v, &n) && !sbx_cookie_token(NULL, &v, &n),
       "not another cookie's name ending like ours");
    ok(sbx_cookie_strip("a=1; " SBX_AUTHZ_COOKIE "=s; b=2", buf, sizeof(buf)) == 8 &&
           !strcmp(buf, "a=1; b=2"),
       "ours taken out: %s", buf);
    ok(sbx_cookie_strip(SBX_AUTHZ_COOKIE "=s", buf, sizeof(buf)) == 0, "only ours: no header");
    ok(sbx_cookie_strip("a=1;b=2;" SBX_AUTHZ_COOKIE "=s", buf, sizeof(buf)) == 8 &&
           !strcmp(buf, "a=1; b=2"),
       "pairs without spaces come out joined by \"; \" (longer than they came): %s", buf);
    ok(sbx_cookie_strip("a=1; b=2", buf, 4) == -ENOSPC, "too small");
    {
        struct sbx_authz_verdict vd = {
            .from = SBX_AUTHZ_FROM_QUERY, .token = "a;b", .token_len = 3};
        ok(sbx_cookie_set(&vd, "/", true, 0, buf, sizeof(buf)) == 0,
           "a token that is no cookie value sets none");
        vd.token = "abc";
        ok(sbx_cookie_set(&vd, "/s/ns/sb/3000/", true, 0, buf, sizeof(buf)) > 0 &&
               !strcmp(buf, SBX_AUTHZ_COOKIE
                       "=abc; Path=/s/ns/sb/3000/; HttpOnly; SameSite=Lax; Secure"),
           "scoped to a path, Secure on TLS, for the session: %s", buf);
    }
}

static void test_http(const char *file)
{
    struct sbx_authz *a = make(SBX_AUTHZ_SCOPED_TOKEN, file, false);
    struct sbx_scoped_key k;
    struct sbx_authz_http *h = malloc(sizeof(*h));
    char tok[512], target[700];
    struct sbx_authz_http_req r = {.ns = "team-a", .name = "box-a", .cookie_path = "/"};

    sbx_scoped_key_init(&k, SECRET, strlen(SECRET), NULL);
    sbx_scoped_token_mint(&k, "team-a", "box-a", time(NULL) + 60, tok, sizeof(tok), NULL);
    snprintf(target, sizeof(target), "/index.html?a=1&token=%s", tok);
    r.target = target;
    ok(sbx_authz_http(a, &r, h) == 0 && h->status == 200 && h->strip_query_token &&
           !h->keep_authorization && !h->authorization[0] &&
           strstr(h->set_cookie, SBX_AUTHZ_COOKIE "=v1.") == h->set_cookie,
       "http: a token by query passes, is taken out, and sets the cookie");
    r.target = "/index.html?token=%zz";
    ok(sbx_authz_http(a, &r, h) < 0 && h->status == 400, "a bad token parameter: 400 %s",
       h->detail);
    r.target = "/index.html";
    ok(sbx_authz_http(a, &r, h) == -EACCES && h->status == 401 &&
           !strcmp(h->detail, "unauthenticated"),
       "none: 401 {\"detail\": \"unauthenticated\"}");
    sbx_authz_free(a);
    a = make(SBX_AUTHZ_ALLOW_ALL, NULL, false);
    r.sandboxd = true;
    r.target = "/files?token=abc";
    ok(sbx_authz_http(a, &r, h) == 0 && h->keep_authorization && !h->strip_query_token &&
           !h->set_cookie[0],
       "allow-all to sandboxd: its credentials untouched, no cookie");
    r.sandboxd = false;
    ok(sbx_authz_http(a, &r, h) == 0 && !h->keep_authorization && h->strip_query_token,
       "allow-all to a user's port: stripped");
    sbx_authz_free(a);
    free(h);
}

int main(void)
{
    char file[] = "/tmp/test_authz_XXXXXX";
    int fd = mkstemp(file);

    if (fd < 0 || write(fd, SECRET "\n", strlen(SECRET) + 1) < 0)
        return 1;
    close(fd);
    test_allow_all();
    test_scoped(file);
    test_api_modes();
    test_query();
    test_cookie();
    test_http(file);
    unlink(file);
    return done_testing();
}
