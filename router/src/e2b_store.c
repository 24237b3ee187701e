#define _GNU_SOURCE
#include "e2b_store.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "clock.h"
#include "kube.h"
#include "kubeconfig.h"
#include "object.h"
#include "target.h"

#define EXT_API       "/apis/extensions.agents.x-k8s.io/v1beta1"
#define SB_API        "/apis/agents.x-k8s.io/v1beta1"
#define LOCATE_SLOTS  256
#define LOCATE_TTL_MS 5000
#define READY_POLL_MS 200

struct located {
    char id[64], ns[64], sandbox[64];
    uint64_t until;
};

struct e2b_store {
    struct e2b_store_opts o;
    char keys_ns[64], keys_name[254], lookup_ns[64];
    pthread_mutex_t lock;
    json_t *keys; /* the Secret's data, as last read */
    uint64_t keys_at, keys_tried;
    struct located located[LOCATE_SLOTS]; /* direct-mapped by the ID's hash */
};

int e2b_store_new(struct e2b_store **ret, const struct e2b_store_opts *o, struct sbx_error *err)
{
    struct e2b_store *s;

    if (!o->kube || !sbx_dns_label_valid(o->keys_ns) || !*o->keys_name ||
        strlen(o->keys_name) >= sizeof(s->keys_name) || strchr(o->keys_name, '/'))
        return sbx_error_set(err, EINVAL, "the API keys' Secret needs a namespace and a name");
    if (!(s = calloc(1, sizeof(*s))))
        return sbx_error_set(err, ENOMEM, "e2b store");
    s->o = *o;
    snprintf(s->keys_ns, sizeof(s->keys_ns), "%s", o->keys_ns);
    snprintf(s->keys_name, sizeof(s->keys_name), "%s", o->keys_name);
    snprintf(s->lookup_ns, sizeof(s->lookup_ns), "%s", o->lookup_ns ? o->lookup_ns : "");
    s->o.keys_ns = s->keys_ns;
    s->o.keys_name = s->keys_name;
    s->o.lookup_ns = s->lookup_ns;
    if (!s->o.keys_ttl_ms)
        s->o.keys_ttl_ms = 10000;
    pthread_mutex_init(&s->lock, NULL);
    *ret = s;
    return 0;
}

void e2b_store_free(struct e2b_store *s)
{
    if (!s)
        return;
    json_decref(s->keys);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

static int fetch_keys(struct e2b_store *s, struct sbx_error *err)
{
    char path[400];
    json_t *sec = NULL;
    int rc;

    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/secrets/%s", s->keys_ns, s->keys_name);
    if ((rc = sbx_api_get(s->o.kube, path, &sec, err)) < 0)
        return rc == -EACCES ? sbx_error_set(err, EIO, "the router may not read the Secret %s/%s",
                                             s->keys_ns, s->keys_name)
                             : rc;
    pthread_mutex_lock(&s->lock);
    json_decref(s->keys);
    s->keys = rc == 1 ? json_incref(json_object_get(sec, "data")) : NULL; /* gone: no keys */
    s->keys_at = sbx_now_ms();
    pthread_mutex_unlock(&s->lock);
    json_decref(sec);
    return 0;
}

/* Looks key up in the cached data; compares every name in constant time for its length. */
static int find_key(struct e2b_store *s, const char *key, size_t len, char ns[64])
{
    const char *name;
    json_t *v;
    int rc = -EACCES;

    pthread_mutex_lock(&s->lock);
    json_object_foreach(s->keys, name, v)
    {
        _cleanup_free_ char *raw = NULL;
        size_t rlen = 0;
        if (strlen(name) != len || CRYPTO_memcmp(name, key, len) != 0 || !json_is_string(v) ||
            sbx_base64_decode(json_string_value(v), &raw, &rlen, NULL) < 0)
            continue;
        while (rlen && (raw[rlen - 1] == '\n' || raw[rlen - 1] == '\r'))
            rlen--;
        raw[rlen] = '\0';
        rc = sbx_dns_label_valid(raw) ? (snprintf(ns, 64, "%s", raw), 0) : -EACCES;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int e2b_store_key_ns(struct e2b_store *s, const char *key, size_t len, char ns[64],
                     struct sbx_error *err)
{
    uint64_t now = sbx_now_ms();
    bool stale, retry;
    int rc;

    if (len == 0 || len > 253)
        return -EACCES;
    pthread_mutex_lock(&s->lock);
    stale = !s->keys_at || now - s->keys_at >= s->o.keys_ttl_ms;
    retry = now - s->keys_tried >= 1000; /* an unknown key reads the Secret again, once a second */
    pthread_mutex_unlock(&s->lock);
    if (stale && (rc = fetch_keys(s, err)) < 0)
        return rc;
    if ((rc = find_key(s, key, len, ns)) != -EACCES || stale || !retry)
        return rc;
    pthread_mutex_lock(&s->lock);
    s->keys_tried = now;
    pthread_mutex_unlock(&s->lock);
    if ((rc = fetch_keys(s, err)) < 0)
        return rc;
    return find_key(s, key, len, ns);
}

int e2b_store_pool(struct e2b_store *s, const char *ns, const char *tmpl, char pool[254],
                   struct sbx_error *err)
{
    json_auto_t *obj = NULL;
    char path[400];
    size_t i;
    json_t *p;
    int rc;

    if (!sbx_dns_label_valid(tmpl))
        return -ENOENT;
    snprintf(path, sizeof(path), EXT_API "/namespaces/%s/sandboxwarmpools/%s", ns, tmpl);
    if ((rc = sbx_api_get(s->o.kube, path, &obj, err)) < 0)
        return rc;
    if (rc == 1) {
        snprintf(pool, 254, "%s", tmpl);
        return 0;
    }
    snprintf(path, sizeof(path), EXT_API "/namespaces/%s/sandboxwarmpools?limit=500", ns);
    if ((rc = sbx_api_get(s->o.kube, path, &obj, err)) < 0)
        return rc;
    json_array_foreach(json_object_get(obj, "items"), i, p)
    {
        json_t *ref = json_object_get(json_object_get(p, "spec"), "sandboxTemplateRef");
        const char *name = sbx_meta_str(p, "name");
        if (name && json_is_string(json_object_get(ref, "name")) &&
            !strcmp(json_string_value(json_object_get(ref, "name")), tmpl)) {
            snprintf(pool, 254, "%s", name);
            return 0;
        }
    }
    return -ENOENT;
}

int e2b_store_create(struct e2b_store *s, const char *ns, json_t *obj, struct sbx_error *err)
{
    char path[300];

    snprintf(path, sizeof(path), EXT_API "/namespaces/%s/sandboxclaims", ns);
    return sbx_api_create(s->o.kube, path, obj, err);
}

time_t e2b_claim_end(json_t *claim)
{
    json_t *lc = json_object_get(json_object_get(claim, "spec"), "lifecycle");
    const char *when = json_string_value(json_object_get(lc, "shutdownTime"));
    time_t t;

    return when && sbx_parse_rfc3339(when, &t) == 0 ? t : 0;
}

const char *e2b_claim_sandbox(json_t *claim)
{
    return json_string_value(
        json_object_get(json_object_get(json_object_get(claim, "status"), "sandbox"), "name"));
}

static struct located *slot(struct e2b_store *s, const char *id)
{
    size_t h = 5381;

    for (const char *p = id; *p; p++)
        h = h * 33 + (unsigned char)*p;
    return &s->located[h % LOCATE_SLOTS];
}

static void forget(struct e2b_store *s, const char *id)
{
    struct located *l = slot(s, id);

    pthread_mutex_lock(&s->lock);
    if (!strcmp(l->id, id))
        l->id[0] = '\0';
    pthread_mutex_unlock(&s->lock);
}

/* Ours and alive: an E2B claim not being deleted and not past its end (deleted when it is). */
static bool alive(struct e2b_store *s, json_t *claim)
{
    time_t end = e2b_claim_end(claim);
    json_t *labels = json_object_get(json_object_get(claim, "metadata"), "labels");
    const char *ns = sbx_meta_str(claim, "namespace"), *name = sbx_meta_str(claim, "name");
    struct sbx_error ignored = {0};

    if (!json_object_get(labels, SBX_E2B_LABEL_ID) || !ns || !name ||
        json_object_get(json_object_get(claim, "metadata"), "deletionTimestamp"))
        return false;
    if (end && end <= time(NULL)) {
        e2b_store_delete(s, ns, name, &ignored);
        return false;
    }
    return true;
}

int e2b_store_get(struct e2b_store *s, const char *ns, const char *id, json_t **ret,
                  struct sbx_error *err)
{
    char path[300];
    json_t *obj = NULL;
    int rc;

    *ret = NULL;
    snprintf(path, sizeof(path), EXT_API "/namespaces/%s/sandboxclaims/%s", ns, id);
    if ((rc = sbx_api_get(s->o.kube, path, &obj, err)) <= 0)
        return rc;
    if (!alive(s, obj)) {
        json_decref(obj);
        return 0;
    }
    *ret = obj;
    return 1;
}

int e2b_store_list(struct e2b_store *s, const char *ns, size_t max, json_t **ret,
                   struct sbx_error *err)
{
    json_auto_t *obj = NULL;
    char path[400];
    json_t *out, *c;
    size_t i;
    int rc;

    snprintf(path, sizeof(path), EXT_API "/namespaces/%s/sandboxclaims?labelSelector=%s&limit=%zu",
             ns, SBX_E2B_LABEL_ID, max);
    if ((rc = sbx_api_get(s->o.kube, path, &obj, err)) < 0)
        return rc;
    if (!(out = json_array()))
        return sbx_error_set(err, ENOMEM, "list");
    json_array_foreach(json_object_get(obj, "items"), i, c)
    {
        if (alive(s, c))
            json_array_append(out, c);
    }
    *ret = out;
    return 0;
}

int e2b_store_delete(struct e2b_store *s, const char *ns, const char *id, struct sbx_error *err)
{
    char path[300];

    forget(s, id);
    snprintf(path, sizeof(path), EXT_API "/namespaces/%s/sandboxclaims/%s", ns, id);
    return sbx_api_delete(s->o.kube, path, err);
}

int e2b_store_set_end(struct e2b_store *s, json_t *claim, time_t end, struct sbx_error *err)
{
    const char *ns = sbx_meta_str(claim, "namespace"), *sb = e2b_claim_sandbox(claim);
    char path[300], when[32];
    long st;

    sbx_rfc3339(end, when);
    json_auto_t *patch = json_pack("{s:{s:{s:s, s:s}}}", "spec", "lifecycle", "shutdownTime", when,
                                   "shutdownPolicy", "Delete");
    json_auto_t *sb_patch =
        json_pack("{s:{s:s, s:s}}", "spec", "shutdownTime", when, "shutdownPolicy", "Delete");
    if (!patch || !sb_patch)
        return sbx_error_set(err, ENOMEM, "patch");
    snprintf(path, sizeof(path), EXT_API "/namespaces/%s/sandboxclaims/%s", ns,
             sbx_meta_str(claim, "name"));
    if ((st = sbx_api_patch(s->o.kube, path, patch, NULL, err)) < 0)
        return (int)st;
    if (st == 404)
        return -ENOENT;
    if (st != 200)
        return sbx_error_set(err, EIO, "PATCH %s: HTTP %ld", path, st);
    /* The claim hands its lifecycle on when its sandbox is chosen; later changes go to the
     * Sandbox from here. */
    if (!sb || !sbx_dns_label_valid(sb))
        return 0;
    snprintf(path, sizeof(path), SB_API "/namespaces/%s/sandboxes/%s", ns, sb);
    if ((st = sbx_api_patch(s->o.kube, path, sb_patch, NULL, err)) < 0)
        return (int)st;
    if (st != 200 && st != 404)
        return sbx_error_set(err, EIO, "PATCH %s: HTTP %ld", path, st);
    return 0;
}

int e2b_store_wait_ready(struct e2b_store *s, const char *ns, const char *id, bool need_ip,
                         uint64_t timeout_ms, json_t **ret, struct sbx_error *err)
{
    uint64_t deadline = sbx_now_ms() + timeout_ms;
    int rc;

    for (;;) {
        json_t *c = NULL;
        if ((rc = e2b_store_get(s, ns, id, &c, err)) < 0)
            return rc;
        if (rc == 0)
            return -ENOENT;
        json_t *ips =
            json_object_get(json_object_get(json_object_get(c, "status"), "sandbox"), "podIPs");
        if (sbx_is_ready(c) && e2b_claim_sandbox(c) && (!need_ip || json_array_size(ips))) {
            *ret = c;
            return 1;
        }
        json_decref(c);
        if (sbx_now_ms() + READY_POLL_MS >= deadline)
            return 0;
        usleep(READY_POLL_MS * 1000);
    }
}

int e2b_store_token(struct e2b_store *s, const char *ns, const char *sandbox, char **ret,
                    struct sbx_error *err)
{
    json_auto_t *sec = NULL;
    char path[400];
    const char *b64;
    size_t len = 0;
    int rc;

    if (!sbx_dns_label_valid(sandbox))
        return -ENOENT;
    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/secrets/%s-sandboxd-token", ns, sandbox);
    if ((rc = sbx_api_get(s->o.kube, path, &sec, err)) < 0)
        return rc;
    b64 = json_string_value(json_object_get(json_object_get(sec, "data"), "token"));
    if (rc == 0 || !b64 || sbx_base64_decode(b64, ret, &len, NULL) < 0)
        return -ENOENT;
    while (len && ((*ret)[len - 1] == '\n' || (*ret)[len - 1] == '\r'))
        len--; /* as sandboxd reads its token file */
    (*ret)[len] = '\0';
    return 0;
}

int e2b_store_sandboxes(struct e2b_store *s, const char *ns, const char *name, json_t **ret,
                        struct sbx_error *err)
{
    json_auto_t *obj = NULL;
    char path[400];
    json_t *out, *sb;
    size_t i;
    int rc;

    if (name && !sbx_dns_label_valid(name))
        return (*ret = json_object()) ? 0 : sbx_error_set(err, ENOMEM, "sandboxes");
    if (name)
        snprintf(path, sizeof(path), SB_API "/namespaces/%s/sandboxes/%s", ns, name);
    else
        snprintf(path, sizeof(path), SB_API "/namespaces/%s/sandboxes?limit=1000", ns);
    if ((rc = sbx_api_get(s->o.kube, path, &obj, err)) < 0)
        return rc;
    if (!(out = json_object()))
        return sbx_error_set(err, ENOMEM, "sandboxes");
    if (name && rc == 1)
        json_object_set(out, name, obj);
    json_array_foreach(name ? NULL : json_object_get(obj, "items"), i, sb)
    {
        if (sbx_meta_str(sb, "name"))
            json_object_set(out, sbx_meta_str(sb, "name"), sb);
    }
    *ret = out;
    return 0;
}

static int locate_api(struct e2b_store *s, const char *id, char ns[64], char sandbox[64],
                      struct sbx_error *err)
{
    json_auto_t *obj = NULL;
    char path[400];
    json_t *c;
    size_t i;
    int rc;

    if (*s->lookup_ns)
        snprintf(path, sizeof(path), EXT_API "/namespaces/%s/sandboxclaims?labelSelector=%s%%3D%s",
                 s->lookup_ns, SBX_E2B_LABEL_ID, id);
    else
        snprintf(path, sizeof(path), EXT_API "/sandboxclaims?labelSelector=%s%%3D%s",
                 SBX_E2B_LABEL_ID, id);
    if ((rc = sbx_api_get(s->o.kube, path, &obj, err)) < 0)
        return rc;
    json_array_foreach(json_object_get(obj, "items"), i, c)
    {
        const char *cns = sbx_meta_str(c, "namespace"), *sb = e2b_claim_sandbox(c);
        if (!cns || !sb || strlen(cns) >= 64 || strlen(sb) >= 64 || !alive(s, c))
            continue;
        snprintf(ns, 64, "%s", cns);
        snprintf(sandbox, 64, "%s", sb);
        return 0;
    }
    return -ENOENT;
}

int e2b_store_locate(struct e2b_store *s, const char *id, char ns[64], char sandbox[64],
                     struct sbx_error *err)
{
    struct located *l = slot(s, id);
    int rc;

    pthread_mutex_lock(&s->lock);
    rc = !strcmp(l->id, id) && sbx_now_ms() < l->until ? 0 : -ENOENT;
    if (rc == 0) {
        memcpy(ns, l->ns, 64);
        memcpy(sandbox, l->sandbox, 64);
    }
    pthread_mutex_unlock(&s->lock);
    if (rc == 0 || (rc = locate_api(s, id, ns, sandbox, err)) < 0)
        return rc;
    pthread_mutex_lock(&s->lock);
    snprintf(l->id, sizeof(l->id), "%s", id);
    memcpy(l->ns, ns, 64);
    memcpy(l->sandbox, sandbox, 64);
    l->until = sbx_now_ms() + LOCATE_TTL_MS;
    pthread_mutex_unlock(&s->lock);
    return 0;
}
