/* Image references as the container runtimes read them (imageref.c). */
#include <errno.h>
#include <string.h>

#include "imageref.h"
#include "tap.h"

#define D64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static void parses(const char *s, const char *reg, const char *repo, const char *tag,
                   const char *digest)
{
    struct sbx_image_ref r;
    struct sbx_error err = {0};
    int rc = sbx_image_ref_parse(s, &r, &err);

    ok(rc == 0 && !strcmp(r.registry, reg) && !strcmp(r.repository, repo) && !strcmp(r.tag, tag) &&
           !strcmp(r.digest, digest),
       "\"%s\" is %s / %s : %s @ %s (got %d %s: %s / %s : %s @ %s)", s, reg, repo, tag, digest, rc,
       err.msg, rc ? "" : r.registry, rc ? "" : r.repository, rc ? "" : r.tag, rc ? "" : r.digest);
}

static void refused(const char *s, const char *why)
{
    struct sbx_image_ref r;
    struct sbx_error err = {0};
    int rc = sbx_image_ref_parse(s, &r, &err);

    ok(rc == -EINVAL && strstr(err.msg, why), "\"%s\" refused: %s (%s)", s, why, err.msg);
}

int main(void)
{
    parses("busybox", "docker.io", "library/busybox", "latest", "");
    parses("busybox:1.36", "docker.io", "library/busybox", "1.36", "");
    parses("bitnami/redis", "docker.io", "bitnami/redis", "latest", "");
    parses("docker.io/busybox", "docker.io", "library/busybox", "latest", "");
    parses("index.docker.io/library/busybox:1", "docker.io", "library/busybox", "1", "");
    parses("registry-1.docker.io/x/y", "docker.io", "x/y", "latest", "");
    parses("ghcr.io/org/team/app:v1.2-rc_3", "ghcr.io", "org/team/app", "v1.2-rc_3", "");
    parses("localhost/app", "localhost", "app", "latest", "");
    parses("localhost:5000/app:dev", "localhost:5000", "app", "dev", "");
    parses("127.0.0.1:5000/a/b", "127.0.0.1:5000", "a/b", "latest", "");
    parses("[::1]:5000/app", "[::1]:5000", "app", "latest", "");
    parses("Registry.Example.com/app", "Registry.Example.com", "app", "latest", "");
    parses("busybox@sha256:" D64, "docker.io", "library/busybox", "", "sha256:" D64);
    parses("quay.io/a/b:1@sha256:" D64, "quay.io", "a/b", "1", "sha256:" D64);
    parses("my_org/a__b.c-d--e", "docker.io", "my_org/a__b.c-d--e", "latest", "");
    parses("a/b:_tag", "docker.io", "a/b", "_tag", "");

    refused("", "empty");
    refused("Busybox", "bad repository");
    refused("a//b", "bad repository");
    refused("a/b/", "bad repository");
    refused("a_/b", "bad repository");
    refused("a/-b", "bad repository");
    refused("a___b", "bad repository");
    refused("busybox:", "bad tag");
    refused("busybox:-x", "bad tag");
    refused("busybox:a/b", "bad registry host");
    refused("busybox@sha256:abc", "bad digest");
    refused("busybox@md5:" D64, "bad digest");
    refused("busybox@sha256:" D64 "00", "bad digest");
    refused("busybox@sha256:0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef",
            "bad digest");
    refused("host:port/app", "bad registry host");
    refused("host:123456/app", "bad registry host");
    refused("-host.io/app", "bad registry host");
    refused("[zz]:1/app", "bad registry host");

    char long_tag[200];
    memset(long_tag, 'a', sizeof(long_tag));
    memcpy(long_tag, "app:", 4);
    long_tag[4 + 129] = '\0';
    refused(long_tag, "bad tag");
    char long_ref[700];
    memset(long_ref, 'a', sizeof(long_ref) - 1);
    long_ref[sizeof(long_ref) - 1] = '\0';
    refused(long_ref, "too long");

    struct sbx_image_ref r;
    sbx_image_ref_parse("busybox", &r, NULL);
    ok(!strcmp(sbx_image_ref_endpoint(&r), "registry-1.docker.io"),
       "Docker Hub's API is registry-1.docker.io");
    ok(!strcmp(sbx_image_ref_reference(&r), "latest"), "asked for by tag");
    sbx_image_ref_parse("ghcr.io/a:1@sha256:" D64, &r, NULL);
    ok(!strcmp(sbx_image_ref_endpoint(&r), "ghcr.io"), "another registry is its own API");
    ok(!strcmp(sbx_image_ref_reference(&r), "sha256:" D64), "a digest wins over the tag");
    return done_testing();
}
