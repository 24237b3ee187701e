#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auth.h"
#include "tap.h"

static char dir[] = "/tmp/sbx-test-auth-XXXXXX";

static const char *write_file(const char *name, const char *content, size_t len)
{
    static char path[256];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    f = fopen(path, "w");
    if (!f || fwrite(content, 1, len, f) != len || fclose(f) != 0)
        abort();
    return path;
}

static enum sbx_auth_verdict check(const struct sbx_auth *a, const char *value)
{
    return sbx_auth_check(a, value, value ? strlen(value) : 0);
}

/* Loads a token file; on success, the token must be want_token. */
static void load(const char *name, const char *content, size_t len, const char *want_token)
{
    struct sbx_error err = {0};
    struct sbx_auth *a = NULL;
    int r = sbx_auth_load_file(write_file(name, content, len), &a, &err);
    char *hdr = NULL;

    if (want_token) {
        ok(r == 0, "load %s: %s", name, r < 0 ? err.msg : "ok");
        ok(r == 0 && asprintf(&hdr, "Bearer %s", want_token) > 0 && check(a, hdr) == SBX_AUTH_OK,
           "%s: the token is as expected", name);
    } else {
        ok(r == -EINVAL, "load %s: refused (%d): %s", name, r, err.msg);
        ok(!strstr(err.msg, "s3cret"), "%s: the error does not show the token", name);
    }
    free(hdr);
    sbx_auth_free(a);
}

int main(void)
{
    struct sbx_error err = {0};
    struct sbx_auth *a = NULL;
    char big[SBX_AUTH_MAX_TOKEN + 2];
    char *path;

    if (!mkdtemp(dir))
        return 1;
    load("plain", "s3cret-T0ken", 12, "s3cret-T0ken");
    load("newline", "s3cret-T0ken\n", 13, "s3cret-T0ken");
    load("crlf", "s3cret-T0ken\r\n", 14, "s3cret-T0ken");
    load("empty", "", 0, NULL);
    load("only-newline", "\n", 1, NULL);
    load("two-newlines", "s3cret-T0ken\n\n", 14, NULL);
    load("inner-space", "s3cret T0ken", 12, NULL);
    load("nul", "s3cret\0T0ken", 12, NULL);
    memset(big, 'x', sizeof(big));
    load("too-long", big, sizeof(big), NULL);
    big[SBX_AUTH_MAX_TOKEN] = '\0';
    load("longest", big, SBX_AUTH_MAX_TOKEN, big);
    ok(sbx_auth_load_file("/nonexistent/token", &a, &err) == -ENOENT &&
           strstr(err.msg, "/nonexistent/token"),
       "a missing file is ENOENT, named: %s", err.msg);
    ok(sbx_auth_load_file(dir, &a, &err) == -EINVAL, "a directory is refused: %s", err.msg);
    if (asprintf(&path, "%s/fifo", dir) < 0 || mkfifo(path, 0600) < 0)
        return 1;
    ok(sbx_auth_load_file(path, &a, &err) == -EINVAL, "a FIFO is refused at once: %s", err.msg);
    unlink(path);
    free(path);

    ok(sbx_auth_new("tok", 3, &a, &err) == 0, "new");
    ok(check(a, "Bearer tok") == SBX_AUTH_OK, "right token");
    ok(check(a, "bearer tok") == SBX_AUTH_OK, "scheme in lower case");
    ok(check(a, "BEARER   tok  ") == SBX_AUTH_OK, "scheme in upper case, spaces around");
    ok(sbx_auth_check(a, "Bearer tokXYZ", 10) == SBX_AUTH_OK, "not NUL-terminated");
    ok(check(a, NULL) == SBX_AUTH_MISSING, "no header");
    ok(check(a, "") == SBX_AUTH_MISSING, "empty header");
    ok(check(a, "  ") == SBX_AUTH_MISSING, "blank header");
    ok(check(a, "Bearer") == SBX_AUTH_MALFORMED, "scheme alone");
    ok(check(a, "Bearer   ") == SBX_AUTH_MALFORMED, "scheme and spaces");
    ok(check(a, "Basic dG9rOg==") == SBX_AUTH_MALFORMED, "another scheme");
    ok(check(a, "tok") == SBX_AUTH_MALFORMED, "the token without a scheme");
    ok(check(a, "Bearertok") == SBX_AUTH_MALFORMED, "no space after the scheme");
    ok(check(a, "Bearer to") == SBX_AUTH_WRONG, "a prefix of the token");
    ok(check(a, "Bearer tok2") == SBX_AUTH_WRONG, "the token and more");
    ok(check(a, "Bearer TOK") == SBX_AUTH_WRONG, "the token in another case");
    ok(check(a, "Bearer t ok") == SBX_AUTH_WRONG, "the token with a space inside");
    ok(strcmp(sbx_auth_verdict_message(SBX_AUTH_WRONG), "invalid bearer token") == 0, "message");
    {
        uint64_t sup = 99;
        int logged = 0;
        for (int i = 0; i < 3 * SBX_AUTH_LOG_PER_SECOND; i++)
            logged += sbx_auth_log_allowed(a, 1000, &sup);
        ok(logged == SBX_AUTH_LOG_PER_SECOND && sup == 0, "a second logs %d refusals at most",
           SBX_AUTH_LOG_PER_SECOND);
        ok(sbx_auth_log_allowed(a, 1001, &sup) && sup == 2 * SBX_AUTH_LOG_PER_SECOND,
           "the next second logs again, with the count of those not logged (%llu)",
           (unsigned long long)sup);
        ok(sbx_auth_log_allowed(a, 1001, &sup) && sup == 0, "and the count starts over");
    }
    sbx_auth_free(a);
    sbx_auth_free(NULL);
    ok(sbx_auth_new("a b", 3, &a, &err) == -EINVAL, "a space in a token is refused");
    ok(sbx_auth_new("", 0, &a, &err) == -EINVAL, "an empty token is refused");
    rmdir(dir);
    return done_testing();
}
