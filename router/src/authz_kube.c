#define _GNU_SOURCE
#include "authz_kube.h"

#include <errno.h>
#include <jansson.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube.h"
#include "kubeconfig.h"

/* audiences "a, b" as ["a","b"] (empty entries dropped). */
static json_t *audience_list(const char *audiences)
{
    json_t *l = json_array();
    const char *p = audiences;

    while (l && p && *p) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        const char *s = p;
        while (n && (*s == ' ' || *s == '\t'))
            s++, n--;
        while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
            n--;
        if (n)
            json_array_append_new(l, json_stringn(s, n));
        p = end ? end + 1 : NULL;
    }
    return l;
}

int sbx_authz_tokenreview(struct sbx_kube *k, const char *token, size_t len, const char *audiences,
                          struct sbx_error *err)
{
    json_auto_t *body = NULL, *out = NULL;
    json_t *spec = json_object();
    long status = 0;
    int rc;

    if (spec) {
        json_object_set_new(spec, "token", json_stringn(token, len));
        if (audiences && *audiences)
            json_object_set_new(spec, "audiences", audience_list(audiences));
    }
    body = json_pack("{s:s, s:s, s:o*}", "apiVersion", "authentication.k8s.io/v1", "kind",
                     "TokenReview", "spec", spec);
    if (!body || !json_object_get(spec, "token"))
        return sbx_error_set(err, ENOMEM, "build the TokenReview");
    rc = sbx_kube_request(k, "POST", "/apis/authentication.k8s.io/v1/tokenreviews", body, NULL,
                          &status, &out, err);
    json_object_del(spec, "token"); /* the request's body is gone: keep no copy of the token */
    if (rc < 0)
        return rc;
    if (status != 200 && status != 201)
        return sbx_error_set(err, EIO, "TokenReview answered %ld: %s", status,
                             json_string_value(json_object_get(out, "message"))
                                 ? json_string_value(json_object_get(out, "message"))
                                 : "no message");
    if (json_is_true(json_object_get(json_object_get(out, "status"), "authenticated")))
        return 0;
    return -EACCES;
}

int sbx_authz_sandbox_secret(struct sbx_kube *k, const char *ns, const char *name,
                             uint8_t digest[SBX_DIGEST_LEN], struct sbx_error *err)
{
    json_auto_t *out = NULL;
    char path[512];
    long status = 0;
    char *token = NULL;
    size_t len = 0;
    const char *b64;
    int rc;

    if (snprintf(path, sizeof(path), "/api/v1/namespaces/%s/secrets/%s%s", ns, name,
                 SBX_SANDBOX_TOKEN_SECRET_SUFFIX) >= (int)sizeof(path))
        return sbx_error_set(err, EINVAL, "the sandbox's name is too long");
    if ((rc = sbx_kube_request(k, "GET", path, NULL, NULL, &status, &out, err)) < 0)
        return rc;
    if (status == 404)
        return -ENOENT;
    if (status != 200)
        return sbx_error_set(err, EIO, "reading the token Secret answered %ld: %s", status,
                             json_string_value(json_object_get(out, "message"))
                                 ? json_string_value(json_object_get(out, "message"))
                                 : "no message");
    b64 = json_string_value(json_object_get(json_object_get(out, "data"), SBX_SANDBOX_TOKEN_KEY));
    if (!b64 || sbx_base64_decode(b64, &token, &len, NULL) < 0 || len == 0) {
        free(token);
        return -ENOENT;
    }
    /* sandboxd drops one trailing newline of its token file: so does the comparison. */
    if (len && token[len - 1] == '\n' && --len && token[len - 1] == '\r')
        len--;
    sbx_sha256(token, len, digest);
    OPENSSL_cleanse(token, len);
    free(token);
    return 0;
}
