#define _GNU_SOURCE
#include "auth.h"

#include <errno.h>
#include <fcntl.h>
/* The SHA-256 functions themselves, not the EVP layer (see hasher.c). */
#define OPENSSL_SUPPRESS_DEPRECATED
#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cleanup.h"

#define DIGEST_LEN 32

struct sbx_auth {
    uint8_t digest[DIGEST_LEN]; /* SHA-256 of the token */
    pthread_mutex_t log_lock;   /* guards the three below */
    uint64_t log_second;        /* the second the count is of */
    unsigned log_count;         /* refusals logged in it */
    uint64_t suppressed;        /* not logged since the last that was */
};

static int sha256(const void *data, size_t len, uint8_t out[DIGEST_LEN])
{
    SHA256_CTX c;

    if (!SHA256_Init(&c) || !SHA256_Update(&c, data, len) || !SHA256_Final(out, &c))
        return -EIO;
    return 0;
}

int sbx_auth_new(const char *token, size_t len, struct sbx_auth **ret, struct sbx_error *err)
{
    struct sbx_auth *a;

    if (len == 0)
        return sbx_error_set(err, EINVAL, "the token is empty");
    if (len > SBX_AUTH_MAX_TOKEN)
        return sbx_error_set(err, EINVAL, "the token is longer than %d bytes", SBX_AUTH_MAX_TOKEN);
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)token[i] < 0x21 || (unsigned char)token[i] > 0x7e)
            return sbx_error_set(err, EINVAL,
                                 "the token has a byte that is not visible ASCII at offset %zu", i);
    a = calloc(1, sizeof(*a));
    if (!a)
        return sbx_error_set(err, ENOMEM, "allocate authenticator");
    pthread_mutex_init(&a->log_lock, NULL);
    if (sha256(token, len, a->digest) < 0) {
        sbx_auth_free(a);
        return sbx_error_set(err, EIO, "hash the token");
    }
    *ret = a;
    return 0;
}

/* Reads at most max bytes; -EFBIG when the file holds more. */
static int read_bounded(int fd, char *buf, size_t max, size_t *ret_len)
{
    size_t n = 0;

    for (;;) {
        ssize_t r = read(fd, buf + n, max + 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (r == 0)
            break;
        n += (size_t)r;
        if (n > max)
            return -EFBIG;
    }
    *ret_len = n;
    return 0;
}

int sbx_auth_load_file(const char *path, struct sbx_auth **ret, struct sbx_error *err)
{
    /* The token plus "\r\n" at most, and one byte to notice more. */
    char buf[SBX_AUTH_MAX_TOKEN + 3];
    _cleanup_close_ int fd = -1;
    struct stat st;
    size_t len = 0;
    int r;

    /* O_NONBLOCK: a FIFO must not hang the start-up; it is refused below. */
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return sbx_error_set(err, errno, "token file '%s'", path);
    if (fstat(fd, &st) < 0)
        return sbx_error_set(err, errno, "token file '%s'", path);
    if (!S_ISREG(st.st_mode))
        return sbx_error_set(err, EINVAL, "token file '%s': not a regular file", path);
    r = read_bounded(fd, buf, sizeof(buf) - 1, &len);
    if (r == -EFBIG)
        r = sbx_error_set(err, EINVAL, "token file '%s': longer than %d bytes", path,
                          SBX_AUTH_MAX_TOKEN);
    else if (r < 0)
        r = sbx_error_set(err, -r, "token file '%s'", path);
    if (r == 0) {
        if (len > 0 && buf[len - 1] == '\n')
            len--;
        if (len > 0 && buf[len - 1] == '\r')
            len--;
        r = sbx_auth_new(buf, len, ret, err);
        if (r < 0)
            sbx_error_wrap(err, "token file '%s'", path);
    }
    explicit_bzero(buf, sizeof(buf));
    return r;
}

static bool is_space(char c)
{
    return c == ' ' || c == '\t';
}

enum sbx_auth_verdict sbx_auth_check(const struct sbx_auth *a, const char *value, size_t len)
{
    static const char scheme[] = "bearer";
    const size_t n = sizeof(scheme) - 1;
    size_t i = 0, end = len;

    if (!value)
        return SBX_AUTH_MISSING;
    while (i < end && is_space(value[i]))
        i++;
    while (end > i && is_space(value[end - 1]))
        end--;
    if (i == end)
        return SBX_AUTH_MISSING;
    if (end - i <= n || strncasecmp(value + i, scheme, n) != 0 || !is_space(value[i + n]))
        return SBX_AUTH_MALFORMED;
    i += n;
    while (i < end && is_space(value[i]))
        i++;
    return sbx_auth_check_token(a, value + i, end - i);
}

enum sbx_auth_verdict sbx_auth_check_token(const struct sbx_auth *a, const char *token, size_t len)
{
    uint8_t digest[DIGEST_LEN];

    if (!token || !len)
        return SBX_AUTH_MISSING;
    /* The digest of a candidate of any length takes the same time to compare: only its
     * hashing depends on its length, which the client chose and knows anyway. */
    if (sha256(token, len, digest) < 0)
        return SBX_AUTH_WRONG;
    return CRYPTO_memcmp(digest, a->digest, DIGEST_LEN) == 0 ? SBX_AUTH_OK : SBX_AUTH_WRONG;
}

bool sbx_auth_log_allowed(struct sbx_auth *a, uint64_t now_s, uint64_t *ret_suppressed)
{
    bool allowed;

    pthread_mutex_lock(&a->log_lock);
    if (now_s != a->log_second) {
        a->log_second = now_s;
        a->log_count = 0;
    }
    allowed = a->log_count < SBX_AUTH_LOG_PER_SECOND;
    if (allowed) {
        a->log_count++;
        *ret_suppressed = a->suppressed;
        a->suppressed = 0;
    } else {
        a->suppressed++;
    }
    pthread_mutex_unlock(&a->log_lock);
    return allowed;
}

const char *sbx_auth_verdict_message(enum sbx_auth_verdict v)
{
    switch (v) {
    case SBX_AUTH_OK:
        return "authenticated";
    case SBX_AUTH_MISSING:
        return "missing bearer token";
    case SBX_AUTH_MALFORMED:
        return "malformed authorization: expected \"Bearer <token>\"";
    case SBX_AUTH_WRONG:
        break;
    }
    return "invalid bearer token";
}

void sbx_auth_free(struct sbx_auth *a)
{
    if (!a)
        return;
    pthread_mutex_destroy(&a->log_lock);
    explicit_bzero(a, sizeof(*a));
    free(a);
}
