/* Registry mirrors (mirrors.c): --registry-mirror's parsing, and the hosts and repositories an
 * image is asked at. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cleanup.h"
#include "mirrors.h"
#include "tap.h"

static void refused(const char *spec, const char *why)
{
    struct sbx_mirrors m;
    struct sbx_error err = {0};
    int rc = sbx_mirrors_parse(spec, &m, &err);

    ok(rc == -EINVAL && strstr(err.msg, why), "\"%s\" refused: %s (%s)", spec, why, err.msg);
}

/* The endpoints of image under spec, as "host repository [mirror]" lines joined by "; ". */
static void asks(const char *spec, const char *image, const char *want)
{
    struct sbx_mirrors m;
    struct sbx_image_ref ref;
    struct sbx_error err = {0};
    struct sbx_registry_endpoint eps[SBX_MIRRORS_MAX + 1];
    char got[4096] = "";

    int rc = sbx_mirrors_parse(spec, &m, &err);
    if (rc == 0)
        rc = sbx_image_ref_parse(image, &ref, &err);
    size_t n = rc == 0 ? sbx_mirrors_endpoints(&m, &ref, eps, SBX_ARRAY_SIZE(eps)) : 0;
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(got);
        snprintf(got + len, sizeof(got) - len, "%s%.100s %.100s %.200s%s", i ? "; " : "",
                 eps[i].host, eps[i].name, eps[i].repository, eps[i].mirror ? " mirror" : "");
    }
    ok(rc == 0 && !strcmp(got, want), "%s under \"%s\": %s (got %d %s: %s)", image, spec, want, rc,
       err.msg, got);
}

static void parse_cases(void)
{
    struct sbx_mirrors m;
    struct sbx_error err = {0};

    ok(sbx_mirrors_parse(NULL, &m, &err) == 0 && m.n == 0, "no flag: no mirrors");
    ok(sbx_mirrors_parse("", &m, &err) == 0 && m.n == 0, "an empty flag: no mirrors");
    ok(sbx_mirrors_parse("docker.io=m.local:5000/hub/cache/,Index.Docker.IO=m2,ghcr.io=[::1]:5001",
                         &m, &err) == 0 &&
           m.n == 3 && !strcmp(m.m[0].registry, "docker.io") &&
           !strcmp(m.m[0].host, "m.local:5000") && !strcmp(m.m[0].prefix, "hub/cache") &&
           !strcmp(m.m[1].registry, "docker.io") && !strcmp(m.m[1].prefix, "") &&
           !strcmp(m.m[2].host, "[::1]:5001"),
       "entries parsed: a trailing \"/\" dropped, Docker Hub's names as one (%s)", err.msg);

    refused("docker.io", "not REGISTRY=MIRROR");
    refused("docker.io=", "not REGISTRY=MIRROR");
    refused("=m.local", "not REGISTRY=MIRROR");
    refused("docker.io=m.local,", "empty entry");
    refused("docker.io=m.local,,ghcr.io=m.local", "empty entry");
    refused(",docker.io=m.local", "empty entry");
    refused("docker.io=https://m.local", "no scheme");
    refused("docker.io=m.local:port", "bad host");
    refused("docker.io=/prefix", "bad host");
    refused("docker io=m.local", "bad host");
    refused("docker.io=m.local/Hub", "bad path prefix");
    refused("docker.io=m.local/a//b", "bad path prefix");
    refused("docker.io=m.local/-a", "bad path prefix");
    refused("docker.io=m.local=x", "bad host");

    char many[64 * 40] = "";
    for (int i = 0; i <= SBX_MIRRORS_MAX; i++) {
        size_t len = strlen(many);
        snprintf(many + len, sizeof(many) - len, "%sr%d.io=m.local", i ? "," : "", i);
    }
    refused(many, "more than 32 mirrors");
    char long_host[300];
    memset(long_host, 'a', sizeof(long_host));
    memcpy(long_host, "docker.io=", 10);
    long_host[sizeof(long_host) - 1] = '\0';
    refused(long_host, "bad host");
}

int main(void)
{
    parse_cases();

    asks("", "python:3", "registry-1.docker.io docker.io library/python");
    asks("docker.io=127.0.0.1:5001/docker.io", "python:3",
         "127.0.0.1:5001 127.0.0.1:5001 docker.io/library/python mirror; "
         "registry-1.docker.io docker.io library/python");
    asks("index.docker.io=m.local", "docker.io/bitnami/redis",
         "m.local m.local bitnami/redis mirror; registry-1.docker.io docker.io bitnami/redis");
    asks("docker.io=a.local/hub,ghcr.io=b.local/ghcr,docker.io=c.local:8443",
         "registry-1.docker.io/library/busybox@sha256:"
         "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
         "a.local a.local hub/library/busybox mirror; c.local:8443 c.local:8443 library/busybox "
         "mirror; registry-1.docker.io docker.io library/busybox");
    asks("docker.io=a.local/hub,GHCR.io=b.local/ghcr/cache", "ghcr.io/org/app:v1",
         "b.local b.local ghcr/cache/org/app mirror; ghcr.io ghcr.io org/app");
    asks("docker.io=a.local/hub", "quay.io/org/app", "quay.io quay.io org/app");
    asks("127.0.0.1:5000=127.0.0.1:5001/local", "127.0.0.1:5000/app:1",
         "127.0.0.1:5001 127.0.0.1:5001 local/app mirror; 127.0.0.1:5000 127.0.0.1:5000 app");

    /* The registry itself is always asked last, however little room is given. */
    struct sbx_mirrors m;
    struct sbx_image_ref ref;
    struct sbx_registry_endpoint eps[2];
    sbx_mirrors_parse("docker.io=a.local,docker.io=b.local,docker.io=c.local", &m, NULL);
    sbx_image_ref_parse("busybox", &ref, NULL);
    size_t n = sbx_mirrors_endpoints(&m, &ref, eps, SBX_ARRAY_SIZE(eps));
    ok(n == 2 && eps[0].mirror && !strcmp(eps[0].host, "a.local") && !eps[1].mirror,
       "room for 2: the first mirror, then the registry (%zu)", n);
    ok(sbx_mirrors_endpoints(NULL, &ref, eps, 2) == 1 && !eps[0].mirror, "no mirrors (NULL)");
    return done_testing();
}
