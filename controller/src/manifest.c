#include "manifest.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "cleanup.h"
#include "imageref.h"

static bool is(const char *a, const char *b)
{
    return a && b && !strcmp(a, b);
}

/* The media type without parameters ("; charset=..."), into buf. */
static const char *bare_type(const char *ct, char *buf, size_t size)
{
    if (!ct)
        return NULL;
    size_t n = strcspn(ct, "; \t");
    if (n >= size)
        return NULL;
    memcpy(buf, ct, n);
    buf[n] = '\0';
    return buf;
}

/* The manifest's kind: 1 index, 0 image, -1 neither. */
static int kind_of(json_t *m, const char *ct)
{
    const char *mt = json_string_value(json_object_get(m, "mediaType"));

    if (is(ct, SBX_MT_OCI_INDEX) || is(ct, SBX_MT_DOCKER_LIST))
        return 1;
    if (is(ct, SBX_MT_OCI_MANIFEST) || is(ct, SBX_MT_DOCKER_IMAGE))
        return 0;
    if (is(mt, SBX_MT_OCI_INDEX) || is(mt, SBX_MT_DOCKER_LIST))
        return 1;
    if (is(mt, SBX_MT_OCI_MANIFEST) || is(mt, SBX_MT_DOCKER_IMAGE))
        return 0;
    if (mt || json_integer_value(json_object_get(m, "schemaVersion")) != 2)
        return -1;
    if (json_is_array(json_object_get(m, "manifests")))
        return 1;
    return json_is_object(json_object_get(m, "config")) ? 0 : -1;
}

static int take_digest(json_t *desc, const char *what, struct sbx_manifest_next *ret,
                       struct sbx_error *err)
{
    const char *d = json_string_value(json_object_get(desc, "digest"));

    if (!d || strlen(d) >= sizeof(ret->digest) || !sbx_digest_valid(d))
        return sbx_error_set(err, EINVAL, "%s: no valid digest", what);
    snprintf(ret->digest, sizeof(ret->digest), "%s", d);
    return 0;
}

static int pick_platform(json_t *list, const char *os, const char *arch,
                         struct sbx_manifest_next *ret, struct sbx_error *err)
{
    char a[64];
    const char *slash = strchr(arch, '/'), *variant = slash ? slash + 1 : NULL;
    json_t *m;
    size_t i;

    snprintf(a, sizeof(a), "%.*s", slash ? (int)(slash - arch) : (int)strlen(arch), arch);
    if (!json_is_array(list))
        return sbx_error_set(err, EINVAL, "index: manifests is not a list");
    json_array_foreach(list, i, m)
    {
        json_t *p = json_object_get(m, "platform");
        const char *v = json_string_value(json_object_get(p, "variant"));
        if (!is(json_string_value(json_object_get(p, "os")), os) ||
            !is(json_string_value(json_object_get(p, "architecture")), a) ||
            (variant && v && strcmp(v, variant)))
            continue;
        ret->is_index = 1;
        return take_digest(m, "index entry", ret, err);
    }
    return sbx_error_set(err, ENOENT, "no %s/%s image in the index", os, arch);
}

int sbx_manifest_decode(const char *body, size_t len, const char *content_type, const char *os,
                        const char *arch, struct sbx_manifest_next *ret, struct sbx_error *err)
{
    char ctbuf[128];
    json_error_t je;
    json_auto_t *m = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
    struct sbx_manifest_next next = {0};
    int r;

    if (!json_is_object(m))
        return sbx_error_set(err, EINVAL, "manifest is not a JSON object");
    switch (kind_of(m, bare_type(content_type, ctbuf, sizeof(ctbuf)))) {
    case 1:
        r = pick_platform(json_object_get(m, "manifests"), os, arch, &next, err);
        break;
    case 0:
        r = take_digest(json_object_get(m, "config"), "manifest config", &next, err);
        break;
    default:
        return sbx_error_set(err, ENOTSUP, "manifest of an unsupported kind (%.80s)",
                             json_string_value(json_object_get(m, "mediaType"))
                                 ?: (content_type ? content_type : "no media type"));
    }
    if (r < 0)
        return r;
    *ret = next;
    return 0;
}

/* A list of strings or null (absent counts as null); a copy or JSON null into *ret. */
static int strings_field(json_t *cfg, const char *name, json_t **ret, struct sbx_error *err)
{
    json_t *v = json_object_get(cfg, name), *e;
    size_t i;

    if (!v || json_is_null(v)) {
        *ret = json_null();
        return 0;
    }
    if (!json_is_array(v))
        return sbx_error_set(err, EINVAL, "image config: %s is not a list", name);
    json_array_foreach(v, i, e)
    {
        if (!json_is_string(e))
            return sbx_error_set(err, EINVAL, "image config: %s[%zu] is not a string", name, i);
    }
    *ret = json_deep_copy(v);
    return *ret ? 0 : sbx_error_set(err, ENOMEM, "image config");
}

int sbx_image_config_decode(const char *body, size_t len, json_t **ret, struct sbx_error *err)
{
    json_auto_t *doc = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL);
    json_auto_t *out = json_object();
    json_t *cfg = json_object_get(doc, "config"), *ep = NULL, *cmd = NULL;
    int r;

    if (!json_is_object(doc))
        return sbx_error_set(err, EINVAL, "image config is not a JSON object");
    if (!out)
        return sbx_error_set(err, ENOMEM, "image config");
    if (cfg && !json_is_null(cfg) && !json_is_object(cfg))
        return sbx_error_set(err, EINVAL, "image config: config is not an object");
    if ((r = strings_field(cfg, "Entrypoint", &ep, err)) < 0)
        return r;
    json_object_set_new(out, "entrypoint", ep);
    if ((r = strings_field(cfg, "Cmd", &cmd, err)) < 0)
        return r;
    json_object_set_new(out, "cmd", cmd);
    json_t *wd = json_object_get(cfg, "WorkingDir");
    if (wd && !json_is_null(wd) && !json_is_string(wd))
        return sbx_error_set(err, EINVAL, "image config: WorkingDir is not a string");
    if (json_string_length(wd) > 0)
        json_object_set(out, "workingDir", wd);
    *ret = TAKE_PTR(out);
    return 0;
}

int sbx_digest_check(const char *digest, const void *body, size_t len, struct sbx_error *err)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    char hex[2 * EVP_MAX_MD_SIZE + 1];
    const EVP_MD *alg = !strncmp(digest, "sha256:", 7)   ? EVP_sha256()
                        : !strncmp(digest, "sha512:", 7) ? EVP_sha512()
                                                         : NULL;

    if (!alg || !sbx_digest_valid(digest))
        return sbx_error_set(err, EINVAL, "unsupported digest \"%.80s\"", digest);
    if (!EVP_Digest(body, len, md, &n, alg, NULL))
        return sbx_error_set(err, ENOMEM, "digest");
    for (unsigned int i = 0; i < n; i++)
        snprintf(hex + 2 * i, 3, "%02x", md[i]);
    if (strcmp(hex, digest + 7) != 0)
        return sbx_error_set(err, EBADMSG, "content does not match its digest %.80s", digest);
    return 0;
}
