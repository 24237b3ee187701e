/* scoped_token: the reference router's "v1.<payload>.<sig>" tokens. A token minted by the
 * reference's own MintScopedToken (Go, sandbox-router/authz, v0.5.6) verifies here and is minted
 * here byte for byte; expiry is exclusive; any change to a part, a wrong key, version or shape
 * is refused with its reason. */
#include <errno.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <string.h>

#include "scoped_token.h"
#include "tap.h"

#define SECRET "0123456789abcdef0123456789abcdef-router-test-secret\n"
/* MintScopedToken([]byte(SECRET), "team-a", "box-a", ...) by the reference. */
#define GO_TOKEN                                                                                   \
    "v1.eyJucyI6InRlYW0tYSIsIm5hbWUiOiJib3gtYSIsImV4cCI6MzM3Mjk5MzU5MX0."                          \
    "YWPgKyWVJmgsFmYKNILohgNnn9W5PiLPcgVw-fqYjUE"
#define GO_EXP 3372993591LL

static struct sbx_scoped_key key;

static const char *verify(const char *tok, time_t now)
{
    static struct sbx_error e;
    struct sbx_scoped_claims c;

    e = (struct sbx_error){0};
    return sbx_scoped_token_verify(&key, tok, strlen(tok), now, &c, &e) == 0 ? "ok" : e.msg;
}

static void test_reference_vector(void)
{
    struct sbx_scoped_claims c;
    struct sbx_error e = {0};
    char buf[512];

    ok(sbx_scoped_token_verify(&key, GO_TOKEN, strlen(GO_TOKEN), 1700000000, &c, &e) == 0,
       "the reference's token verifies: %s", e.msg);
    ok(!strcmp(c.ns, "team-a") && !strcmp(c.name, "box-a") && c.exp == GO_EXP,
       "its claims: %s/%s until %lld", c.ns, c.name, (long long)c.exp);
    ok(sbx_scoped_token_mint(&key, "team-a", "box-a", GO_EXP, buf, sizeof(buf), &e) == 0 &&
           !strcmp(buf, GO_TOKEN),
       "minting the same claims gives the reference's bytes: %s", buf);
}

static void test_expiry(void)
{
    ok(!strcmp(verify(GO_TOKEN, GO_EXP - 1), "ok"), "valid the second before exp");
    ok(!strcmp(verify(GO_TOKEN, GO_EXP), "token expired"), "expired from exp on");
    ok(!strcmp(verify(GO_TOKEN, GO_EXP + 100), "token expired"), "and after");
}

static void test_tampering(void)
{
    char t[512];
    struct sbx_scoped_key other;

    snprintf(t, sizeof(t), "%s", GO_TOKEN);
    t[10] ^= 1; /* in the payload */
    ok(!strcmp(verify(t, 0), "signature mismatch"), "a changed payload: %s", verify(t, 0));
    snprintf(t, sizeof(t), "%s", GO_TOKEN);
    t[strlen(t) - 3] = t[strlen(t) - 3] == 'A' ? 'B' : 'A';
    ok(!strcmp(verify(t, 0), "signature mismatch"), "a changed signature");
    snprintf(t, sizeof(t), "v2%s", &GO_TOKEN[2]);
    ok(!strcmp(verify(t, 0), "malformed token"), "another version");
    ok(!strcmp(verify("v1.abc", 0), "malformed token"), "two parts");
    ok(!strcmp(verify("", 0), "malformed token"), "empty");
    snprintf(t, sizeof(t), "%s=", GO_TOKEN);
    ok(!strcmp(verify(t, 0), "malformed signature"), "padding is not raw base64url");
    snprintf(t, sizeof(t), "%s.x", GO_TOKEN);
    ok(strcmp(verify(t, 0), "ok") != 0, "a fourth part");
    ok(sbx_scoped_key_init(&other, "another secret, also long enough.", 33, NULL) == 0,
       "another key");
    {
        struct sbx_scoped_claims c;
        struct sbx_error e = {0};
        ok(sbx_scoped_token_verify(&other, GO_TOKEN, strlen(GO_TOKEN), 0, &c, &e) == -EACCES &&
               !strcmp(e.msg, "signature mismatch"),
           "another key's token is refused");
    }
}

/* A token whose payload is json, signed with SECRET here (OpenSSL's HMAC, our own encoder):
 * what the reference's minter would produce for claims it never writes. */
static const char *signed_json(const char *json)
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    static char t[1024];
    char msg[700] = "agent-sandbox/scoped-token/v1.";
    unsigned char mac[32];
    unsigned maclen = 0;
    size_t n = 3, ctx = strlen(msg);

    memcpy(t, "v1.", 3);
    for (size_t pass = 0; pass < 2; pass++) {
        const unsigned char *in = pass ? mac : (const unsigned char *)json;
        size_t len = pass ? sizeof(mac) : strlen(json), bits = 0;
        unsigned acc = 0;
        for (size_t i = 0; i < len; i++) {
            acc = (acc << 8) | in[i];
            for (bits += 8; bits >= 6; bits -= 6)
                t[n++] = a[(acc >> (bits - 6)) & 63];
        }
        if (bits)
            t[n++] = a[(acc << (6 - bits)) & 63];
        t[n] = '\0';
        if (!pass) {
            memcpy(msg + ctx, t + 3, n - 3);
            HMAC(EVP_sha256(), key.key, (int)key.len, (unsigned char *)msg, ctx + n - 3, mac,
                 &maclen);
            t[n++] = '.';
        }
    }
    return t;
}

static void test_claims(void)
{
    char buf[512];
    struct sbx_error e = {0};

    ok(!strcmp(verify(signed_json("{\"ns\":\"a\",\"name\":\"b\",\"exp\":5}"), 4), "ok"),
       "a hand-signed token verifies (the test's signer is right)");
    ok(!strcmp(verify(signed_json("{\"ns\":\"a\",\"name\":\"b\",\"exp\":\"5\"}"), 4),
               "malformed claims"),
       "exp as a string");
    ok(!strcmp(verify(signed_json("{\"ns\":\"a\",\"name\":\"b\",\"exp\":5.5}"), 4),
               "malformed claims"),
       "exp as a fraction");
    ok(!strcmp(verify(signed_json("[1,2]"), 0), "malformed claims"), "not an object");
    ok(!strcmp(verify(signed_json("{\"ns\":\"a\",\"name\":\"b\"}"), 0), "token expired"),
       "no exp is exp 0: expired");
    ok(!strcmp(verify(signed_json("{\"ns\":\"a\\u0000b\",\"name\":\"b\",\"exp\":5}"), 0),
               "malformed claims"),
       "a NUL inside a name");
    ok(sbx_scoped_token_mint(&key, "", "box", 10, buf, sizeof(buf), &e) == -EINVAL,
       "no token without a namespace");
    ok(sbx_scoped_token_mint(&key, "ns", "box", 10, buf, 20, &e) == -ENOSPC, "a small buffer");
    ok(sbx_scoped_token_mint(&key, "ns", "box", 10, buf, sizeof(buf), &e) == 0 &&
           !strcmp(verify(buf, 9), "ok") && !strcmp(verify(buf, 10), "token expired"),
       "a token of ours round-trips");
}

static void test_secret(void)
{
    struct sbx_scoped_key k;
    struct sbx_error e = {0};

    ok(sbx_scoped_key_init(&k, "  short secret \n", 16, &e) == -EINVAL &&
           strstr(e.msg, "at least 32"),
       "a short secret is refused: %s", e.msg);
    ok(sbx_scoped_key_init(&k, "\t" SECRET "  ", strlen(SECRET) + 3, &e) == 0 &&
           k.len == strlen(SECRET) - 1 && !memcmp(k.key, SECRET, k.len),
       "surrounding whitespace is not part of the key");
    ok(sbx_scoped_key_load(&k, "/nonexistent/secret", &e) == -ENOENT, "a missing file: %s", e.msg);
}

int main(void)
{
    struct sbx_error e = {0};

    if (!ok(sbx_scoped_key_init(&key, SECRET, strlen(SECRET), &e) == 0, "key: %s", e.msg))
        return done_testing();
    test_reference_vector();
    test_expiry();
    test_tampering();
    test_claims();
    test_secret();
    return done_testing();
}
