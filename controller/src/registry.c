#include "registry.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "bucket.h"
#include "cleanup.h"
#include "manifest.h"
#include "registry_http.h"

#define MISSED_MAX 120 /* bytes of a failed lookup's message that mirrors' failures may take */

struct sbx_registry {
    struct sbx_registry_opts opts;
    char *insecure; /* ",host1,host2," */
    char *ca_file, *user_agent;
    struct sbx_mirrors *mirrors; /* NULL: none */
    atomic_bool cancel;
    pthread_mutex_t mu;
    pthread_cond_t fetched; /* a config fetch ended */
    json_t *fetching;       /* config digests being fetched: one fetch each, the others wait */
    json_t *configs;        /* config digest -> [result, inserted ns] */
    json_t *refs;           /* ref key -> [config digest, expires ns, inserted ns] */
    struct sbx_registry_stats stats;
};

int sbx_registry_new(const struct sbx_registry_opts *opts, struct sbx_registry **ret,
                     struct sbx_error *err)
{
    struct sbx_registry *r = calloc(1, sizeof(*r));

    if (!r)
        return sbx_error_set(err, ENOMEM, "registry client");
    r->opts = *opts;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->fetched, NULL);
    r->fetching = json_object();
    r->configs = json_object();
    r->refs = json_object();
    if (asprintf(&r->insecure, ",%s,", opts->insecure ? opts->insecure : "") < 0)
        r->insecure = NULL;
    r->ca_file = opts->ca_file ? strdup(opts->ca_file) : NULL;
    r->user_agent = strdup(opts->user_agent ? opts->user_agent : "sandboxd");
    if (opts->mirrors && opts->mirrors->n && (r->mirrors = malloc(sizeof(*r->mirrors))))
        *r->mirrors = *opts->mirrors;
    r->opts.mirrors = NULL; /* ours is r->mirrors */
    if (!r->configs || !r->refs || !r->fetching || !r->insecure || !r->user_agent ||
        (opts->ca_file && !r->ca_file) || (opts->mirrors && opts->mirrors->n && !r->mirrors)) {
        sbx_registry_free(r);
        return sbx_error_set(err, ENOMEM, "registry client");
    }
    if (r->opts.cache_max < 1)
        r->opts.cache_max = 1;
    *ret = r;
    return 0;
}

void sbx_registry_free(struct sbx_registry *r)
{
    if (!r)
        return;
    json_decref(r->configs);
    json_decref(r->refs);
    json_decref(r->fetching);
    pthread_cond_destroy(&r->fetched);
    free(r->insecure);
    free(r->ca_file);
    free(r->user_agent);
    free(r->mirrors);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

void sbx_registry_cancel(struct sbx_registry *r)
{
    atomic_store(&r->cancel, true);
}

void sbx_registry_stats(struct sbx_registry *r, struct sbx_registry_stats *ret)
{
    pthread_mutex_lock(&r->mu);
    *ret = r->stats;
    pthread_mutex_unlock(&r->mu);
}

size_t sbx_registry_endpoints(struct sbx_registry *r, const struct sbx_image_ref *ref,
                              struct sbx_registry_endpoint *out, size_t max)
{
    return sbx_mirrors_endpoints(r->mirrors, ref, out, max);
}

/* FNV-1a over the credentials: the cache key's part that keeps a result with its callers. */
static uint64_t creds_id(const struct sbx_registry_query *q)
{
    uint64_t h = 14695981039346656037ull;

    for (size_t i = 0; i < q->ncreds; i++)
        for (int f = 0; f < 3; f++) {
            const struct sbx_registry_creds *c = &q->creds[i];
            const char *s = f == 2 ? c->host : f ? c->pass : c->user;
            for (size_t j = 0; j <= strlen(s); j++) {
                h ^= (unsigned char)s[j];
                h *= 1099511628211ull;
            }
        }
    return h;
}

void sbx_registry_query_key(const struct sbx_registry_query *q, char *buf, size_t size)
{
    snprintf(buf, size, "%016llx|%s/%s|%s|%s/%s", (unsigned long long)creds_id(q), q->ref->registry,
             q->ref->repository, sbx_image_ref_reference(q->ref), q->os, q->arch);
}

/* The oldest entry of cache goes when it is full (a scan: caches are small). Locked. */
static void make_room(json_t *cache, size_t max, size_t at)
{
    while (json_object_size(cache) >= max) {
        const char *key, *oldest = NULL;
        json_int_t when = INT64_MAX;
        json_t *v;
        json_object_foreach(cache, key, v)
        {
            json_int_t t = json_integer_value(json_array_get(v, at));
            if (t < when) {
                when = t;
                oldest = key;
            }
        }
        if (!oldest)
            return;
        json_object_del(cache, oldest);
    }
}

/* The cached result of q's reference, or NULL. Locked. */
static json_t *lookup_locked(struct sbx_registry *r, const char *key)
{
    json_t *e = json_object_get(r->refs, key);

    if (!e)
        return NULL;
    if ((uint64_t)json_integer_value(json_array_get(e, 1)) <= sbx_now_ns()) {
        json_object_del(r->refs, key);
        return NULL;
    }
    json_t *cfg = json_object_get(r->configs, json_string_value(json_array_get(e, 0)));
    return json_array_get(cfg, 0);
}

int sbx_registry_cached(struct sbx_registry *r, const struct sbx_registry_query *q, json_t **ret)
{
    char key[800];

    sbx_registry_query_key(q, key, sizeof(key));
    pthread_mutex_lock(&r->mu);
    json_t *v = lookup_locked(r, key);
    if (v)
        r->stats.hits++;
    *ret = json_incref(v);
    pthread_mutex_unlock(&r->mu);
    return v ? 1 : 0;
}

/* Remembers that key resolved to config digest. */
static void remember(struct sbx_registry *r, const struct sbx_registry_query *q, const char *key,
                     const char *digest)
{
    uint64_t now = sbx_now_ns();
    /* A digest reference never changes what it names; a tag's is trusted for the TTL. */
    uint64_t ttl = q->ref->digest[0] ? UINT64_MAX / 2 : r->opts.tag_ttl_ms * 1000000ull;

    pthread_mutex_lock(&r->mu);
    if (ttl) {
        make_room(r->refs, r->opts.cache_max, 2);
        json_object_set_new(
            r->refs, key, json_pack("[s, I, I]", digest, (json_int_t)(now + ttl), (json_int_t)now));
    }
    pthread_mutex_unlock(&r->mu);
}

/* A status other than 200 of the session's host as an error of the image. */
static int status_error(const struct sbx_reg_session *s, const char *what, long status,
                        struct sbx_error *err)
{
    if (status == 404)
        return sbx_error_set(err, ENOENT, "%s not found (HTTP 404)", what);
    if (status == 403)
        return sbx_error_set(err, EACCES, "registry \"%s\": access denied (HTTP 403)", s->host);
    return sbx_error_set(err, EPROTO, "registry \"%s\": %s of \"%s\" answered HTTP %ld", s->host,
                         what, s->repo, status);
}

/* GET of a manifest by reference (tag or digest), checked against the digest when it is one,
 * decoded. */
static int get_manifest(struct sbx_registry *r, struct sbx_reg_session *s,
                        const struct sbx_registry_query *q, const char *reference,
                        struct sbx_manifest_next *next, struct sbx_error *err)
{
    struct sbx_reg_response resp = {0};
    char path[800];
    int rc;

    snprintf(path, sizeof(path), "/v2/%s/manifests/%s", s->repo, reference);
    pthread_mutex_lock(&r->mu);
    r->stats.manifests++;
    pthread_mutex_unlock(&r->mu);
    if ((rc = sbx_reg_get(s, path, SBX_MANIFEST_ACCEPT, r->opts.manifest_max, &resp, err)) < 0)
        return rc;
    if (resp.status != 200)
        rc = status_error(s, "manifest", resp.status, err);
    else if (!strncmp(reference, "sha", 3))
        rc = sbx_digest_check(reference, resp.body, resp.len, err);
    if (rc >= 0)
        rc = sbx_manifest_decode(resp.body, resp.len, resp.content_type, q->os, q->arch, next, err);
    sbx_reg_response_release(&resp);
    return rc;
}

static int get_config(struct sbx_registry *r, struct sbx_reg_session *s, const char *digest,
                      json_t **ret, struct sbx_error *err)
{
    struct sbx_reg_response resp = {0};
    char path[800];
    int rc;

    snprintf(path, sizeof(path), "/v2/%s/blobs/%s", s->repo, digest);
    pthread_mutex_lock(&r->mu);
    r->stats.configs++;
    pthread_mutex_unlock(&r->mu);
    if ((rc = sbx_reg_get(s, path, NULL, r->opts.config_max, &resp, err)) < 0)
        return rc;
    if (resp.status != 200)
        rc = status_error(s, "config", resp.status, err);
    else if ((rc = sbx_digest_check(digest, resp.body, resp.len, err)) >= 0)
        rc = sbx_image_config_decode(resp.body, resp.len, ret, err);
    sbx_reg_response_release(&resp);
    return rc;
}

/* The config of digest, from the cache, else fetched: one fetch of a digest at a time, which
 * lookups of other references to the same image wait for (it is bounded by the timeout), then
 * cached. */
static int config_of(struct sbx_registry *r, struct sbx_reg_session *s, const char *digest,
                     json_t **ret, struct sbx_error *err)
{
    json_auto_t *result = NULL;
    int rc;

    pthread_mutex_lock(&r->mu);
    for (;;) {
        json_t *hit = json_array_get(json_object_get(r->configs, digest), 0);
        if (hit) {
            *ret = json_incref(hit);
            pthread_mutex_unlock(&r->mu);
            return 0;
        }
        if (!json_object_get(r->fetching, digest))
            break;
        pthread_cond_wait(&r->fetched, &r->mu);
    }
    json_object_set_new(r->fetching, digest, json_true());
    pthread_mutex_unlock(&r->mu);
    rc = get_config(r, s, digest, &result, err);
    if (rc >= 0 && json_object_set_new(result, "digest", json_string(digest)) < 0)
        rc = sbx_error_set(err, ENOMEM, "image config");
    pthread_mutex_lock(&r->mu);
    if (rc >= 0) {
        make_room(r->configs, r->opts.cache_max, 1);
        json_object_set_new(r->configs, digest,
                            json_pack("[O, I]", result, (json_int_t)sbx_now_ns()));
    }
    json_object_del(r->fetching, digest);
    pthread_cond_broadcast(&r->fetched);
    pthread_mutex_unlock(&r->mu);
    if (rc >= 0)
        *ret = TAKE_PTR(result);
    return rc;
}

/* A session with endpoint ep, answering challenges with mine, the credentials given for it. */
static void session_init(struct sbx_registry *r, const struct sbx_registry_endpoint *ep,
                         const struct sbx_registry_creds *mine, size_t nmine,
                         struct sbx_reg_session *s)
{
    char probe[300];

    snprintf(probe, sizeof(probe), ",%.255s,", ep->host);
    *s = (struct sbx_reg_session){.h = curl_easy_init(),
                                  .host = ep->name,
                                  .repo = ep->repository,
                                  .creds = mine,
                                  .ncreds = nmine,
                                  .timeout_ms = r->opts.timeout_ms,
                                  .ca_file = r->ca_file,
                                  .user_agent = r->user_agent,
                                  .cancel = &r->cancel};
    snprintf(s->base, sizeof(s->base), "%s://%.255s", strstr(r->insecure, probe) ? "http" : "https",
             ep->host);
}

/* The credentials of q for endpoint ep into mine: those given for its host ("" is the image's
 * registry's). Returns how many. */
static size_t creds_for(const struct sbx_registry_query *q, const struct sbx_registry_endpoint *ep,
                        struct sbx_registry_creds *mine, size_t max)
{
    size_t n = 0;

    for (size_t i = 0; i < q->ncreds && n < max; i++) {
        const char *host = q->creds[i].host;
        if (host[0] ? !strcasecmp(host, ep->name) : !ep->mirror)
            mine[n++] = q->creds[i];
    }
    return n;
}

/* From endpoint ep: the manifest (through the index), then the config unless cached; *digest
 * the config's. */
static int fetch_at(struct sbx_registry *r, const struct sbx_registry_query *q,
                    const struct sbx_registry_endpoint *ep, char digest[static 160], json_t **ret,
                    struct sbx_error *err)
{
    struct sbx_registry_creds mine[SBX_REGISTRY_CREDS_MAX];
    struct sbx_reg_session s;
    struct sbx_manifest_next next;
    int rc;

    session_init(r, ep, mine, creds_for(q, ep, mine, SBX_ARRAY_SIZE(mine)), &s);
    if (!s.h) {
        rc = sbx_error_set(err, ENOMEM, "curl");
        goto out;
    }
    rc = get_manifest(r, &s, q, sbx_image_ref_reference(q->ref), &next, err);
    if (rc >= 0 && next.is_index) {
        snprintf(digest, 160, "%s", next.digest);
        rc = get_manifest(r, &s, q, digest, &next, err);
        if (rc >= 0 && next.is_index)
            rc = sbx_error_set(err, ENOTSUP, "an index within an index");
    }
    if (rc >= 0)
        rc = config_of(r, &s, next.digest, ret, err);
    if (rc >= 0)
        snprintf(digest, 160, "%s", next.digest);
    pthread_mutex_lock(&r->mu);
    r->stats.tokens += s.tokens;
    pthread_mutex_unlock(&r->mu);
out:
    sbx_reg_session_release(&s);
    explicit_bzero(mine, sizeof(mine));
    return rc;
}

/* Asks each endpoint of q's image in turn until one answers; a failure passes to the next but
 * at the last (the registry itself), whose error is returned, each mirror's named before it. */
static int fetch(struct sbx_registry *r, const struct sbx_registry_query *q, const char *key,
                 json_t **ret, struct sbx_error *err)
{
    struct sbx_registry_endpoint eps[SBX_MIRRORS_MAX + 1];
    size_t n = sbx_mirrors_endpoints(r->mirrors, q->ref, eps, SBX_ARRAY_SIZE(eps));
    char digest[160], missed[sizeof(err->msg)] = "";
    int rc = 0;

    for (size_t i = 0; i < n; i++) {
        rc = fetch_at(r, q, &eps[i], digest, ret, err);
        if (rc >= 0) {
            pthread_mutex_lock(&r->mu);
            r->stats.mirror_hits += eps[i].mirror;
            pthread_mutex_unlock(&r->mu);
            remember(r, q, key, digest);
            return 0;
        }
        if (rc == -ECANCELED || !eps[i].mirror)
            break;
        pthread_mutex_lock(&r->mu);
        r->stats.mirror_misses++;
        pthread_mutex_unlock(&r->mu);
        size_t len = strlen(missed);
        if (len < MISSED_MAX) /* the registry's own failure keeps room after the mirrors' */
            snprintf(missed + len, sizeof(missed) - len, "mirror \"%.60s/%.60s\": %.80s; ",
                     eps[i].host, eps[i].repository, err->msg);
    }
    if (rc < 0 && missed[0] && rc != -ECANCELED) {
        char last[sizeof(err->msg)];
        snprintf(last, sizeof(last), "%s", err->msg);
        sbx_error_set(err, -rc, "%s%s", missed, last);
    }
    return rc;
}

int sbx_registry_resolve(struct sbx_registry *r, const struct sbx_registry_query *q, json_t **ret,
                         struct sbx_error *err)
{
    char key[800];
    int rc;

    if (sbx_registry_cached(r, q, ret))
        return 0;
    if (atomic_load(&r->cancel))
        return sbx_error_set(err, ECANCELED, "registry client stopping");
    sbx_registry_query_key(q, key, sizeof(key));
    rc = fetch(r, q, key, ret, err);
    pthread_mutex_lock(&r->mu);
    if (rc < 0)
        r->stats.failures++;
    else
        r->stats.resolved++;
    pthread_mutex_unlock(&r->mu);
    if (rc < 0 && rc != -ECANCELED)
        sbx_error_wrap(err, "image \"%s/%s:%s\"", q->ref->registry, q->ref->repository,
                       sbx_image_ref_reference(q->ref));
    return rc;
}
