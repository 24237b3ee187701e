#define _GNU_SOURCE
#include "scoped_token.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "cleanup.h"

#define VERSION     "v1"
#define MAC_CONTEXT "agent-sandbox/scoped-token/" VERSION "."
#define MAC_LEN     32

static const char b64url[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

static int b64_value(char c)
{
    const char *p = c ? strchr(b64url, c) : NULL;

    return p ? (int)(p - b64url) : -1;
}

/* Unpadded base64url, as Go's base64.RawURLEncoding decodes it: no '=', no other alphabet, and a
 * length that some encoding has. Returns the bytes written or -EINVAL. */
static ssize_t b64_decode(const char *in, size_t len, uint8_t *out, size_t size)
{
    uint32_t acc = 0;
    size_t n = 0;
    int bits = 0;

    if (len % 4 == 1 || len / 4 * 3 + 2 > size)
        return -EINVAL;
    for (size_t i = 0; i < len; i++) {
        int v = b64_value(in[i]);
        if (v < 0)
            return -EINVAL;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[n++] = (uint8_t)(acc >> bits);
        }
    }
    return (ssize_t)n;
}

static size_t b64_encode(const uint8_t *in, size_t len, char *out)
{
    uint32_t acc = 0;
    size_t n = 0;
    int bits = 0;

    for (size_t i = 0; i < len; i++) {
        acc = (acc << 8) | in[i];
        bits += 8;
        while (bits >= 6) {
            bits -= 6;
            out[n++] = b64url[(acc >> bits) & 63];
        }
    }
    if (bits)
        out[n++] = b64url[(acc << (6 - bits)) & 63];
    out[n] = '\0';
    return n;
}

static bool is_space(uint8_t c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

int sbx_scoped_key_init(struct sbx_scoped_key *k, const void *secret, size_t len,
                        struct sbx_error *err)
{
    const uint8_t *s = secret;

    while (len && is_space(s[0]))
        s++, len--;
    while (len && is_space(s[len - 1]))
        len--;
    if (len < SBX_SCOPED_SECRET_MIN)
        return sbx_error_set(err, EINVAL,
                             "the secret must be at least %d bytes after trimming whitespace, "
                             "got %zu",
                             SBX_SCOPED_SECRET_MIN, len);
    if (len > sizeof(k->key))
        return sbx_error_set(err, EINVAL, "the secret is longer than %zu bytes", sizeof(k->key));
    memcpy(k->key, s, len);
    k->len = len;
    return 0;
}

int sbx_scoped_key_load(struct sbx_scoped_key *k, const char *path, struct sbx_error *err)
{
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
    uint8_t buf[SBX_SCOPED_SECRET_MAX + 1];
    size_t n = 0;
    ssize_t r;
    int rc;

    if (fd < 0)
        return sbx_error_set(err, errno, "open '%s'", path);
    while (n < sizeof(buf) && (r = read(fd, buf + n, sizeof(buf) - n)) != 0) {
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return sbx_error_set(err, errno, "read '%s'", path);
        n += (size_t)r;
    }
    if (n == sizeof(buf))
        return sbx_error_set(err, EINVAL, "'%s' is longer than %d bytes", path,
                             SBX_SCOPED_SECRET_MAX);
    rc = sbx_scoped_key_init(k, buf, n, err);
    OPENSSL_cleanse(buf, sizeof(buf));
    if (rc < 0)
        sbx_error_wrap(err, "'%s'", path);
    return rc;
}

static int sign(const struct sbx_scoped_key *k, const char *payload, size_t len,
                uint8_t mac[MAC_LEN])
{
    size_t clen = strlen(MAC_CONTEXT);
    _cleanup_free_ uint8_t *msg = malloc(clen + len);
    unsigned out = 0;

    if (!msg)
        return -ENOMEM;
    memcpy(msg, MAC_CONTEXT, clen);
    memcpy(msg + clen, payload, len);
    if (!HMAC(EVP_sha256(), k->key, (int)k->len, msg, clen + len, mac, &out) || out != MAC_LEN)
        return -EIO;
    return 0;
}

/* The claims of a verified payload's JSON: an object; "ns" and "name" strings, "exp" an integer
 * (absent or null: empty, 0, as Go leaves a field the JSON does not set). */
static int parse_claims(const uint8_t *json, size_t len, struct sbx_scoped_claims *c)
{
    json_auto_t *o = json_loadb((const char *)json, len, 0, NULL);
    json_t *ns, *name, *exp;

    if (!json_is_object(o))
        return -EINVAL;
    ns = json_object_get(o, "ns");
    name = json_object_get(o, "name");
    exp = json_object_get(o, "exp");
    if ((ns && !json_is_null(ns) && !json_is_string(ns)) ||
        (name && !json_is_null(name) && !json_is_string(name)) ||
        (exp && !json_is_null(exp) && !json_is_integer(exp)))
        return -EINVAL;
    memset(c, 0, sizeof(*c));
    if (json_is_string(ns) && json_string_length(ns) >= sizeof(c->ns))
        return -EINVAL;
    if (json_is_string(name) && json_string_length(name) >= sizeof(c->name))
        return -EINVAL;
    if (json_is_string(ns))
        memcpy(c->ns, json_string_value(ns), json_string_length(ns));
    if (json_is_string(name))
        memcpy(c->name, json_string_value(name), json_string_length(name));
    c->exp = json_is_integer(exp) ? (int64_t)json_integer_value(exp) : 0;
    /* A NUL inside a string would make the comparison with the target's names lie. */
    if (strlen(c->ns) != (json_is_string(ns) ? json_string_length(ns) : 0) ||
        strlen(c->name) != (json_is_string(name) ? json_string_length(name) : 0))
        return -EINVAL;
    return 0;
}

int sbx_scoped_token_verify(const struct sbx_scoped_key *k, const char *token, size_t len,
                            time_t now, struct sbx_scoped_claims *ret, struct sbx_error *err)
{
    uint8_t want[MAC_LEN], got[MAC_LEN + 3], payload[SBX_SCOPED_TOKEN_MAX];
    const char *p, *dot;
    ssize_t n;

    if (len > SBX_SCOPED_TOKEN_MAX || len < 3 || memcmp(token, VERSION ".", 3) != 0)
        return sbx_error_set(err, EACCES, "malformed token");
    p = token + 3;
    dot = memchr(p, '.', len - 3);
    if (!dot)
        return sbx_error_set(err, EACCES, "malformed token");
    n = b64_decode(dot + 1, len - (size_t)(dot + 1 - token), got, sizeof(got));
    if (n < 0)
        return sbx_error_set(err, EACCES, "malformed signature");
    if (sign(k, p, (size_t)(dot - p), want) < 0)
        return sbx_error_set(err, EIO, "compute the token's signature");
    if (n != MAC_LEN || CRYPTO_memcmp(want, got, MAC_LEN) != 0)
        return sbx_error_set(err, EACCES, "signature mismatch");
    n = b64_decode(p, (size_t)(dot - p), payload, sizeof(payload));
    if (n < 0 || parse_claims(payload, (size_t)n, ret) < 0)
        return sbx_error_set(err, EACCES, "malformed claims");
    if ((int64_t)now >= ret->exp) /* exp is exclusive */
        return sbx_error_set(err, EACCES, "token expired");
    return 0;
}

int sbx_scoped_token_mint(const struct sbx_scoped_key *k, const char *ns, const char *name,
                          int64_t exp, char *buf, size_t size, struct sbx_error *err)
{
    json_auto_t *o = json_pack("{s:s, s:s, s:I}", "ns", ns, "name", name, "exp", (json_int_t)exp);
    _cleanup_free_ char *json = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER) : NULL;
    uint8_t mac[MAC_LEN];
    size_t jlen, n;

    if (!json)
        return sbx_error_set(err, ENOMEM, "encode the claims");
    if (!*ns || !*name)
        return sbx_error_set(err, EINVAL, "namespace and name are required");
    jlen = strlen(json);
    if (3 + (jlen + 2) / 3 * 4 + 1 + 44 + 1 > size)
        return sbx_error_set(err, ENOSPC, "the token does not fit");
    memcpy(buf, VERSION ".", 3);
    n = 3 + b64_encode((const uint8_t *)json, jlen, buf + 3);
    if (sign(k, buf + 3, n - 3, mac) < 0)
        return sbx_error_set(err, EIO, "compute the token's signature");
    buf[n++] = '.';
    b64_encode(mac, sizeof(mac), buf + n);
    return 0;
}
