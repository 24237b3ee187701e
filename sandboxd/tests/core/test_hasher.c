/* The upload hasher: inline while small, on its thread beyond, the same digest either way. */
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hasher.h"
#include "tap.h"

static void check(size_t total, size_t step)
{
    char path[] = "/tmp/sbx-hasher-XXXXXX";
    int fd = mkstemp(path);
    uint8_t *data = malloc(total), want[SBX_SHA256_LEN], got[SBX_SHA256_LEN];
    struct sbx_hasher *h = NULL;
    struct sbx_error e = {0};
    unsigned int len = 0;

    for (size_t i = 0; i < total; i++)
        data[i] = (uint8_t)(i * 2654435761u >> 13);
    EVP_Digest(data, total, want, &len, EVP_sha256(), NULL);
    ok(fd >= 0 && sbx_hasher_new(fd, &h, &e) == 0, "new");
    for (size_t off = 0; off < total;) {
        size_t n = total - off < step ? total - off : step;
        if (write(fd, data + off, n) != (ssize_t)n)
            ok(0, "write");
        sbx_hasher_update(h, data + off, n);
        off += n;
    }
    ok(sbx_hasher_final(h, got, &e) == 0, "final %s", e.msg);
    ok(memcmp(got, want, SBX_SHA256_LEN) == 0, "sha256 of %zu bytes written %zu at a time", total,
       step);
    sbx_hasher_free(h);
    unlink(path);
    close(fd);
    free(data);
}

static void abandon(void)
{
    char path[] = "/tmp/sbx-hasher-XXXXXX";
    int fd = mkstemp(path);
    static uint8_t block[1 << 20];
    struct sbx_hasher *h = NULL;
    struct sbx_error e = {0};

    ok(sbx_hasher_new(fd, &h, &e) == 0, "new");
    for (int i = 0; i < 16; i++) {
        (void)!write(fd, block, sizeof(block));
        sbx_hasher_update(h, block, sizeof(block));
    }
    sbx_hasher_free(h); /* without final: the thread stops */
    ok(1, "abandoned hasher freed");
    unlink(path);
    close(fd);
}

int main(void)
{
    check(0, 1);
    check(1000, 7);
    check(3u << 20, 65536);         /* inline only */
    check((20u << 20) + 13, 60000); /* crosses to the thread */
    check(9u << 20, 9u << 20);      /* one big write */
    abandon();
    return done_testing();
}
