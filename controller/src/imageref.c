#include "imageref.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static bool is_lower_alnum(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

bool sbx_image_is_hub(const char *host)
{
    return !strcmp(host, SBX_DOCKER_HUB) || !strcmp(host, "index.docker.io") ||
           !strcmp(host, "registry-1.docker.io");
}

bool sbx_digest_valid(const char *s)
{
    size_t want, n = 0;

    if (!strncmp(s, "sha256:", 7))
        want = 64;
    else if (!strncmp(s, "sha512:", 7))
        want = 128;
    else
        return false;
    for (s += 7; s[n]; n++)
        if (!isxdigit((unsigned char)s[n]) || isupper((unsigned char)s[n]))
            return false;
    return n == want;
}

/* A path component: lower-case alphanumerics separated by ".", "_", "__" or runs of "-". */
static bool component_valid(const char *s, size_t n)
{
    size_t i = 0;

    if (n == 0 || !is_lower_alnum(s[0]) || !is_lower_alnum(s[n - 1]))
        return false;
    while (i < n) {
        if (is_lower_alnum(s[i])) {
            i++;
            continue;
        }
        size_t j = i;
        if (s[i] == '.')
            j = i + 1;
        else if (s[i] == '_')
            j = i + 1 + (i + 1 < n && s[i + 1] == '_');
        else
            while (j < n && s[j] == '-')
                j++;
        if (j == i || j >= n || !is_lower_alnum(s[j]))
            return false;
        i = j;
    }
    return true;
}

bool sbx_image_path_valid(const char *s)
{
    const char *p = s;

    for (;;) {
        const char *slash = strchr(p, '/');
        size_t n = slash ? (size_t)(slash - p) : strlen(p);
        if (!component_valid(p, n))
            return false;
        if (!slash)
            return true;
        p = slash + 1;
    }
}

/* host[:port], or [v6]:port: letters, digits, "-" and "." in the name, digits in the port. */
bool sbx_image_host_valid(const char *s)
{
    const char *colon;

    if (s[0] == '[') {
        const char *end = strchr(s, ']');
        if (!end || end == s + 1)
            return false;
        for (const char *p = s + 1; p < end; p++)
            if (!isxdigit((unsigned char)*p) && *p != ':' && *p != '.')
                return false;
        colon = end[1] ? end + 1 : NULL;
        if (colon && *colon != ':')
            return false;
    } else {
        colon = strchr(s, ':');
        size_t n = colon ? (size_t)(colon - s) : strlen(s);
        if (n == 0 || s[0] == '-' || s[0] == '.')
            return false;
        for (size_t i = 0; i < n; i++)
            if (!isalnum((unsigned char)s[i]) && s[i] != '-' && s[i] != '.')
                return false;
    }
    if (!colon)
        return true;
    size_t digits = strspn(colon + 1, "0123456789");
    return digits > 0 && digits <= 5 && colon[1 + digits] == '\0';
}

static bool tag_valid(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n > 128 || !(isalnum((unsigned char)s[0]) || s[0] == '_'))
        return false;
    for (size_t i = 1; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && !strchr("_.-", s[i]))
            return false;
    return true;
}

/* The first component is a host when it has a "." or ":" or is "localhost" (or has upper case:
 * a path may not), as Docker's reference grammar reads it. */
static bool first_is_host(const char *name, size_t n)
{
    if (n == 9 && !strncmp(name, "localhost", 9))
        return true;
    for (size_t i = 0; i < n; i++)
        if (name[i] == '.' || name[i] == ':' || isupper((unsigned char)name[i]))
            return true;
    return false;
}

static int split_name(const char *name, struct sbx_image_ref *ret, struct sbx_error *err)
{
    const char *slash = strchr(name, '/');
    const char *path = name;
    int n;

    if (slash && first_is_host(name, (size_t)(slash - name))) {
        if ((size_t)(slash - name) >= sizeof(ret->registry))
            return sbx_error_set(err, EINVAL, "registry host too long");
        memcpy(ret->registry, name, (size_t)(slash - name));
        ret->registry[slash - name] = '\0';
        path = slash + 1;
        if (!sbx_image_host_valid(ret->registry))
            return sbx_error_set(err, EINVAL, "bad registry host \"%.100s\"", ret->registry);
        if (sbx_image_is_hub(ret->registry)) {               /* Docker Hub's other names */
            memset(ret->registry, 0, sizeof(ret->registry)); /* copies compare whole */
            strcpy(ret->registry, SBX_DOCKER_HUB);
        }
    } else {
        strcpy(ret->registry, SBX_DOCKER_HUB);
    }
    bool library = !strcmp(ret->registry, SBX_DOCKER_HUB) && !strchr(path, '/');
    n = snprintf(ret->repository, sizeof(ret->repository), "%s%s", library ? "library/" : "", path);
    if (n < 0 || (size_t)n >= sizeof(ret->repository))
        return sbx_error_set(err, EINVAL, "repository name too long");
    if (!sbx_image_path_valid(path))
        return sbx_error_set(err, EINVAL,
                             "bad repository \"%.100s\" (lower-case letters, digits and "
                             "separators)",
                             path);
    return 0;
}

int sbx_image_ref_parse(const char *s, struct sbx_image_ref *ret, struct sbx_error *err)
{
    char buf[600];
    struct sbx_image_ref r = {0};
    int n = snprintf(buf, sizeof(buf), "%s", s ? s : "");
    int rc;

    if (n <= 0)
        return sbx_error_set(err, EINVAL, "empty image reference");
    if ((size_t)n >= sizeof(buf))
        return sbx_error_set(err, EINVAL, "image reference too long");
    char *at = strchr(buf, '@');
    if (at) {
        *at = '\0';
        if (strlen(at + 1) >= sizeof(r.digest) || !sbx_digest_valid(at + 1))
            return sbx_error_set(
                err, EINVAL, "bad digest \"%.100s\" (sha256 or sha512, lower-case hex)", at + 1);
        strcpy(r.digest, at + 1);
    }
    /* A tag follows the last ":" after the last "/" (a ":" before it is a port). */
    char *slash = strrchr(buf, '/'), *colon = strrchr(slash ? slash : buf, ':');
    if (colon) {
        *colon = '\0';
        if (!tag_valid(colon + 1))
            return sbx_error_set(err, EINVAL, "bad tag \"%.100s\"", colon + 1);
        strcpy(r.tag, colon + 1);
    }
    if (!r.tag[0] && !r.digest[0])
        strcpy(r.tag, "latest");
    if ((rc = split_name(buf, &r, err)) < 0)
        return rc;
    *ret = r;
    return 0;
}

const char *sbx_image_ref_endpoint(const struct sbx_image_ref *ref)
{
    return strcmp(ref->registry, SBX_DOCKER_HUB) ? ref->registry : "registry-1.docker.io";
}

const char *sbx_image_ref_reference(const struct sbx_image_ref *ref)
{
    return ref->digest[0] ? ref->digest : ref->tag;
}
