#include "mirrors.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Copies n bytes of s into out (size bytes) as a string; false when it does not fit. */
static bool copy(char *out, size_t size, const char *s, size_t n)
{
    if (n >= size)
        return false;
    memcpy(out, s, n);
    out[n] = '\0';
    return true;
}

/* The mirror part of an entry: host[:port][/prefix], a trailing "/" allowed. */
static int parse_mirror(const char *s, size_t n, struct sbx_mirror *m, struct sbx_error *err)
{
    const char *slash = memchr(s, '/', n);
    size_t hn = slash ? (size_t)(slash - s) : n;

    if (n >= 3 && memmem(s, n, "://", 3))
        return sbx_error_set(err, EINVAL,
                             "mirror \"%.*s\": no scheme (plain-HTTP hosts go in "
                             "--insecure-registries)",
                             (int)(n < 200 ? n : 200), s);
    if (!copy(m->host, sizeof(m->host), s, hn) || !sbx_image_host_valid(m->host))
        return sbx_error_set(err, EINVAL, "mirror \"%.*s\": bad host (host[:port])",
                             (int)(n < 200 ? n : 200), s);
    if (!slash)
        return 0;
    size_t pn = n - hn - 1;
    if (pn && s[n - 1] == '/')
        pn--;
    if (pn == 0)
        return 0;
    if (!copy(m->prefix, sizeof(m->prefix), slash + 1, pn) || !sbx_image_path_valid(m->prefix))
        return sbx_error_set(err, EINVAL,
                             "mirror \"%.*s\": bad path prefix (lower-case letters, digits and "
                             "separators)",
                             (int)(n < 200 ? n : 200), s);
    return 0;
}

/* One REGISTRY=MIRROR entry of n bytes. */
static int parse_entry(const char *s, size_t n, struct sbx_mirror *m, struct sbx_error *err)
{
    const char *eq = memchr(s, '=', n);

    *m = (struct sbx_mirror){0};
    if (!eq || eq == s || eq == s + n - 1)
        return sbx_error_set(err, EINVAL, "\"%.*s\": not REGISTRY=MIRROR", (int)(n < 200 ? n : 200),
                             s);
    size_t rn = (size_t)(eq - s);
    if (!copy(m->registry, sizeof(m->registry), s, rn) || !sbx_image_host_valid(m->registry))
        return sbx_error_set(err, EINVAL, "registry \"%.*s\": bad host (host[:port])",
                             (int)(rn < 200 ? rn : 200), s);
    for (char *p = m->registry; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    if (sbx_image_is_hub(m->registry))
        strcpy(m->registry, SBX_DOCKER_HUB);
    return parse_mirror(eq + 1, n - rn - 1, m, err);
}

int sbx_mirrors_parse(const char *spec, struct sbx_mirrors *ret, struct sbx_error *err)
{
    const char *p = spec ? spec : "";
    int r;

    ret->n = 0;
    while (*p) {
        size_t n = strcspn(p, ",");
        if (n == 0)
            return sbx_error_set(err, EINVAL, "an empty entry");
        if (ret->n == SBX_MIRRORS_MAX)
            return sbx_error_set(err, EINVAL, "more than %d mirrors", SBX_MIRRORS_MAX);
        if ((r = parse_entry(p, n, &ret->m[ret->n], err)) < 0)
            return r;
        ret->n++;
        p += n;
        if (*p == ',' && !*++p)
            return sbx_error_set(err, EINVAL, "an empty entry");
    }
    return 0;
}

size_t sbx_mirrors_endpoints(const struct sbx_mirrors *m, const struct sbx_image_ref *ref,
                             struct sbx_registry_endpoint *out, size_t max)
{
    size_t n = 0;

    for (size_t i = 0; m && i < m->n && n + 1 < max; i++) {
        const struct sbx_mirror *e = &m->m[i];
        if (strcasecmp(e->registry, ref->registry) != 0)
            continue;
        struct sbx_registry_endpoint *o = &out[n++];
        *o = (struct sbx_registry_endpoint){.mirror = true};
        snprintf(o->host, sizeof(o->host), "%s", e->host);
        snprintf(o->name, sizeof(o->name), "%s", e->host);
        snprintf(o->repository, sizeof(o->repository), "%s%s%s", e->prefix, e->prefix[0] ? "/" : "",
                 ref->repository);
    }
    if (n < max) {
        struct sbx_registry_endpoint *o = &out[n++];
        *o = (struct sbx_registry_endpoint){.mirror = false};
        snprintf(o->host, sizeof(o->host), "%s", sbx_image_ref_endpoint(ref));
        snprintf(o->name, sizeof(o->name), "%s", ref->registry);
        snprintf(o->repository, sizeof(o->repository), "%s", ref->repository);
    }
    return n;
}
