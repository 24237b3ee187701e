#include "object.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "log.h"

int sbx_split_key(const char *key, char *ns, size_t nssz, const char **name)
{
    const char *slash = strchr(key, '/');

    if (!slash || (size_t)(slash - key) >= nssz)
        return -EINVAL;
    memcpy(ns, key, (size_t)(slash - key));
    ns[slash - key] = '\0';
    *name = slash + 1;
    return 0;
}

const char *sbx_meta_str(json_t *obj, const char *field)
{
    return json_string_value(json_object_get(json_object_get(obj, "metadata"), field));
}

json_t *sbx_controller_ref(json_t *obj)
{
    json_t *ref;
    size_t i;

    json_array_foreach(json_object_get(json_object_get(obj, "metadata"), "ownerReferences"), i, ref)
    {
        if (json_is_true(json_object_get(ref, "controller")))
            return ref;
    }
    return NULL;
}

bool sbx_controlled_by(json_t *obj, const char *kind, const char *uid)
{
    json_t *ref = sbx_controller_ref(obj);
    const char *k = json_string_value(json_object_get(ref, "kind"));
    const char *u = json_string_value(json_object_get(ref, "uid"));

    return k && !strcmp(k, kind) && (!uid || (u && !strcmp(u, uid)));
}

json_t *sbx_condition(json_t *obj, const char *type)
{
    json_t *cond;
    size_t i;

    json_array_foreach(json_object_get(json_object_get(obj, "status"), "conditions"), i, cond)
    {
        const char *t = json_string_value(json_object_get(cond, "type"));
        if (t && !strcmp(t, type))
            return cond;
    }
    return NULL;
}

bool sbx_is_ready(json_t *obj)
{
    const char *s = json_string_value(json_object_get(sbx_condition(obj, "Ready"), "status"));

    return s && !strcmp(s, "True");
}

int sbx_api_create(struct sbx_kube *k, const char *path, json_t *obj, struct sbx_error *err)
{
    json_auto_t *body = NULL;
    long status;
    int r = sbx_kube_request(k, "POST", path, obj, NULL, &status, &body, err);

    if (r < 0)
        return r;
    if (status == 201 || status == 200) {
        log_info("created %s/%s", path, sbx_meta_str(obj, "name"));
        return 1;
    }
    if (status == 409)
        return 0;
    return sbx_error_set(err, status == 422 || status == 400 ? EINVAL : EIO,
                         "POST %s: HTTP %ld: %s", path, status,
                         json_string_value(json_object_get(body, "message")));
}

int sbx_api_delete(struct sbx_kube *k, const char *path, struct sbx_error *err)
{
    long status;
    int r = sbx_kube_request(k, "DELETE", path, NULL, NULL, &status, NULL, err);

    if (r < 0)
        return r;
    if (status == 404)
        return 0;
    if (status != 200 && status != 202)
        return sbx_error_set(err, EIO, "DELETE %s: HTTP %ld", path, status);
    log_info("deleted %s", path);
    return 1;
}

int sbx_api_get(struct sbx_kube *k, const char *path, json_t **ret, struct sbx_error *err)
{
    json_t *body = NULL;
    long status;
    int r = sbx_kube_request(k, "GET", path, NULL, NULL, &status, &body, err);

    *ret = NULL;
    if (r < 0)
        return r;
    if (status == 404) {
        json_decref(body);
        return 0;
    }
    if (status != 200 || !json_is_object(body)) {
        json_decref(body);
        return sbx_error_set(err, status == 403 ? EACCES : EIO, "GET %s: HTTP %ld", path, status);
    }
    *ret = body;
    return 1;
}

uint64_t sbx_object_rv(json_t *obj)
{
    const char *rv = sbx_meta_str(obj, "resourceVersion");
    char *end;
    unsigned long long v;

    if (!rv || *rv < '0' || *rv > '9')
        return 0;
    errno = 0;
    v = strtoull(rv, &end, 10);
    return errno || *end ? 0 : (uint64_t)v;
}

long sbx_api_patch(struct sbx_kube *k, const char *path, json_t *patch, uint64_t *ret_rv,
                   struct sbx_error *err)
{
    json_auto_t *body = NULL;
    long status;
    int r = sbx_kube_request(k, "PATCH", path, patch, "application/merge-patch+json", &status,
                             ret_rv ? &body : NULL, err);

    if (r < 0)
        return r;
    if (ret_rv)
        *ret_rv = status == 200 ? sbx_object_rv(body) : 0;
    return status;
}

int sbx_api_update_status(struct sbx_kube *k, const char *api_version, const char *ns,
                          const char *plural, const char *name, json_t *old, json_t *want,
                          uint64_t *ret_rv, struct sbx_error *err)
{
    json_auto_t *status = NULL, *patch = NULL;
    const char *key;
    json_t *v;
    char path[800];
    long st;

    if (json_equal(old, want))
        return 0;
    if (!(status = json_deep_copy(want)))
        return sbx_error_set(err, ENOMEM, "status patch");
    json_object_foreach(old, key, v)
    {
        if (!json_object_get(want, key))
            json_object_set_new(status, key, json_null());
    }
    if (!(patch = json_pack("{s:O}", "status", status)))
        return sbx_error_set(err, ENOMEM, "status patch");
    snprintf(path, sizeof(path), "/apis/%s/namespaces/%s/%s/%s/status", api_version, ns, plural,
             name);
    st = sbx_api_patch(k, path, patch, ret_rv, err);
    if (st < 0)
        return (int)st;
    if (st != 200 && st != 404)
        return sbx_error_set(err, EIO, "PATCH %s: HTTP %ld", path, st);
    return 1;
}

void sbx_random_suffix(char *buf, size_t n)
{
    static const char alphabet[] = "abcdefghijklmnopqrstuvwxyz0123456789";
    unsigned char raw[64];

    if (n > sizeof(raw))
        n = sizeof(raw);
    if (getrandom(raw, n, 0) != (ssize_t)n)
        memset(raw, 0, n); /* not a secret: names only need to differ, and 409 catches clashes */
    for (size_t i = 0; i < n; i++)
        buf[i] = alphabet[raw[i] % (sizeof(alphabet) - 1)];
    buf[n] = '\0';
}

int sbx_parse_rfc3339(const char *s, time_t *ret)
{
    struct tm tm = {0};
    const char *end = s ? strptime(s, "%Y-%m-%dT%H:%M:%S", &tm) : NULL;

    if (!end)
        return -EINVAL;
    if (*end == '.')
        for (end++; *end >= '0' && *end <= '9'; end++)
            ;
    if (strcmp(end, "Z") != 0)
        return -EINVAL;
    *ret = timegm(&tm);
    return 0;
}

void sbx_rfc3339(time_t t, char buf[32])
{
    struct tm tm;

    gmtime_r(&t, &tm);
    strftime(buf, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

void sbx_now_rfc3339(char buf[32])
{
    sbx_rfc3339(time(NULL), buf);
}

json_t *sbx_new_condition(const char *type, const char *status, const char *reason,
                          const char *message, json_t *ltt_from, json_t *generation)
{
    json_t *old = sbx_condition(ltt_from, type);
    const char *os = json_string_value(json_object_get(old, "status"));
    const char *ltt = json_string_value(json_object_get(old, "lastTransitionTime"));
    char now[32];

    sbx_now_rfc3339(now);
    if (!os || strcmp(os, status) != 0 || !ltt)
        ltt = now;
    return json_pack("{s:s, s:s, s:s, s:s, s:s, s:O?}", "type", type, "status", status, "reason",
                     reason, "message", message ? message : "", "lastTransitionTime", ltt,
                     "observedGeneration", generation);
}

json_t *sbx_ready_condition(const char *status, const char *reason, const char *message,
                            json_t *ltt_from, json_t *generation)
{
    return sbx_new_condition("Ready", status, reason, message, ltt_from, generation);
}
