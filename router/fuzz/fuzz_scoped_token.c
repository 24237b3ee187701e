/* libFuzzer target for the scoped-token parser (scoped_token.c): what a client sends as a Bearer
 * token, a `token` query parameter or the router's cookie in --authz-mode=scoped-token.
 * Input: a mode byte, then the bytes. Mode bit 0 clear: the bytes are the token, as a client
 * could send it. Set: the bytes are the payload's JSON, which the harness encodes and signs with
 * the key (its own base64url and OpenSSL's HMAC), so the claims parser sees any JSON.
 *
 * Checked: a refusal is -EACCES with one of the known reasons; an accepted token has claims with
 * no NUL inside, now < exp, and minting those claims again gives a token that verifies to the
 * same claims; an unsigned token is never accepted unless it is exactly such a minted one. */
#include <errno.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"
#include "scoped_token.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define SECRET "fuzz-secret-fuzz-secret-fuzz-secret-0123"
#define NOW    1000000

static const char *const reasons[] = {"malformed token", "malformed signature",
                                      "signature mismatch", "malformed claims", "token expired"};

static size_t b64url(const uint8_t *in, size_t len, char *out)
{
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    unsigned acc = 0, bits = 0;
    size_t n = 0;

    for (size_t i = 0; i < len; i++) {
        acc = (acc << 8) | in[i];
        for (bits += 8; bits >= 6; bits -= 6)
            out[n++] = a[(acc >> (bits - 6)) & 63];
    }
    if (bits)
        out[n++] = a[(acc << (6 - bits)) & 63];
    return n;
}

/* "v1." + b64url(json) + "." + b64url(HMAC(context + that)), malloc'ed. */
static char *sign(const struct sbx_scoped_key *k, const uint8_t *json, size_t len, size_t *ret)
{
    static const char ctx[] = "agent-sandbox/scoped-token/v1.";
    char *t = malloc(3 + len * 2 + 64), *msg = malloc(sizeof(ctx) + len * 2 + 8);
    unsigned char mac[32];
    unsigned maclen = 0;
    size_t n;

    CHECK(t && msg, "malloc");
    memcpy(t, "v1.", 3);
    n = 3 + b64url(json, len, t + 3);
    memcpy(msg, ctx, sizeof(ctx) - 1);
    memcpy(msg + sizeof(ctx) - 1, t + 3, n - 3);
    CHECK(HMAC(EVP_sha256(), k->key, (int)k->len, (unsigned char *)msg, sizeof(ctx) - 1 + n - 3,
               mac, &maclen),
          "hmac");
    t[n++] = '.';
    n += b64url(mac, sizeof(mac), t + n);
    t[n] = '\0';
    free(msg);
    *ret = n;
    return t;
}

static void accepted(const struct sbx_scoped_key *k, const struct sbx_scoped_claims *c)
{
    struct sbx_scoped_claims again;
    struct sbx_error e = {0};
    char t[2048];

    CHECK(NOW < c->exp, "accepted at %d with exp %lld", NOW, (long long)c->exp);
    CHECK(strlen(c->ns) < sizeof(c->ns) && strlen(c->name) < sizeof(c->name), "claims' lengths");
    if (!*c->ns || !*c->name)
        return; /* the minter refuses these; the verifier may see them signed */
    CHECK(sbx_scoped_token_mint(k, c->ns, c->name, c->exp, t, sizeof(t), &e) == 0, "mint: %s",
          e.msg);
    CHECK(sbx_scoped_token_verify(k, t, strlen(t), NOW, &again, &e) == 0, "re-minted: %s", e.msg);
    CHECK(!strcmp(again.ns, c->ns) && !strcmp(again.name, c->name) && again.exp == c->exp,
          "re-minted claims differ");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct sbx_scoped_key k;
    struct sbx_scoped_claims c;
    struct sbx_error e = {0};
    bool known = false, was_signed;
    char *tok;
    size_t len;
    int rc;

    if (size < 1 || size > 8192)
        return 0;
    if (!k.len)
        CHECK(sbx_scoped_key_init(&k, SECRET, strlen(SECRET), &e) == 0, "key: %s", e.msg);
    was_signed = data[0] & 1;
    if (was_signed) {
        tok = sign(&k, data + 1, size - 1, &len);
    } else {
        len = size - 1;
        tok = malloc(len + 1);
        CHECK(tok, "malloc");
        memcpy(tok, data + 1, len);
        tok[len] = '\0';
    }
    rc = sbx_scoped_token_verify(&k, tok, len, NOW, &c, &e);
    if (rc < 0) {
        for (size_t i = 0; i < sizeof(reasons) / sizeof(reasons[0]); i++)
            known |= strcmp(e.msg, reasons[i]) == 0;
        CHECK(rc == -EACCES && known, "refusal %d: %s", rc, e.msg);
    } else {
        accepted(&k, &c);
    }
    free(tok);
    return 0;
}
