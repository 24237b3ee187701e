#define _GNU_SOURCE
#include "e2b_api.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "cleanup.h"
#include "e2b_init.h"
#include "e2b_route.h"
#include "e2b_store.h"
#include "h1.h"
#include "log.h"
#include "object.h"
#include "preview.h"

#define MAX_BODY        (256 * 1024) /* what annotations may hold of metadata and env vars */
#define MAX_LIST        1000
#define CLIENT_ID       "sandboxd"
#define CREATE_TRIES    3 /* IDs drawn again when one was taken */
#define INIT_TIMEOUT_MS 10000

struct sbx_e2b {
    struct sbx_e2b_opts o;
    char domain[254], envd_version[32];
    struct e2b_store *store;
    struct sbx_proxy_hook hook;
};

/* One control-plane request. */
struct call {
    struct sbx_e2b *e;
    const struct sbx_h1_msg *m;
    struct sbx_e2b_req req;
    char ns[64];
    const char *body;
    size_t len;
    struct sbx_proxy_reply *r;
};

static void reply_json(struct sbx_proxy_reply *r, unsigned status, json_t *body)
{
    r->status = status;
    r->body = body ? json_dumps(body, JSON_COMPACT) : NULL;
    if (body && !r->body) {
        r->status = 500;
        r->body = strdup("{\"code\":500,\"message\":\"out of memory\"}");
    }
}

/* E2B's error body: {"code": status, "message": ...}. */
__attribute__((format(printf, 3, 4))) static int fail(struct sbx_proxy_reply *r, unsigned status,
                                                      const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    json_auto_t *b = json_pack("{s:i, s:s}", "code", (int)status, "message", msg);
    reply_json(r, status, b);
    return 0;
}

/* A failure of the API server or of ours: logged, and 500 with its message. */
static int fail_err(struct sbx_proxy_reply *r, const char *what, const struct sbx_error *err)
{
    log_warn(0, "e2b: %s: %s", what, err->msg[0] ? err->msg : "failed");
    return fail(r, 500, "%s: %s", what, err->msg[0] ? err->msg : "failed");
}

static void field(const struct sbx_h1_msg *m, const char *name, char *buf, size_t size)
{
    const struct sbx_h1_field *f = sbx_h1_get(m, name);
    size_t n = f ? (f->value_len < size ? f->value_len : size - 1) : 0;

    if (f)
        memcpy(buf, f->value, n);
    buf[n] = '\0';
}

/* The annotation of claim that holds a JSON object, parsed (a new reference; {} when absent). */
static json_t *annotation_object(json_t *claim, const char *key)
{
    const char *s = json_string_value(
        json_object_get(json_object_get(json_object_get(claim, "metadata"), "annotations"), key));
    json_t *o = s ? json_loads(s, 0, NULL) : NULL;

    if (json_is_object(o))
        return o;
    json_decref(o);
    return json_object();
}

static const char *template_of(json_t *claim)
{
    const char *t = json_string_value(json_object_get(
        json_object_get(json_object_get(claim, "metadata"), "annotations"), SBX_E2B_ANN_TEMPLATE));
    return t ? t : "";
}

/* What E2B's Sandbox answer holds (create, connect); with the envd token when there is one. */
static json_t *sandbox_json(struct call *c, json_t *claim, const char *token)
{
    json_t *o = json_pack("{s:s, s:s?, s:s, s:s, s:s}", "sandboxID", sbx_meta_str(claim, "name"),
                          "alias", template_of(claim), "templateID", template_of(claim), "clientID",
                          CLIENT_ID, "envdVersion", c->e->envd_version);

    if (!o)
        return NULL;
    json_object_set_new(o, "domain", *c->e->domain ? json_string(c->e->domain) : json_null());
    if (token)
        json_object_set_new(o, "envdAccessToken", json_string(token));
    return o;
}

/* The token of the claim's sandbox (its envd's access token), or NULL when it has none. */
static char *token_of(struct call *c, json_t *claim)
{
    const char *sb = e2b_claim_sandbox(claim);
    struct sbx_error err = {0};
    char *token = NULL;

    if (sb && e2b_store_token(c->e->store, c->ns, sb, &token, &err) < 0)
        token = NULL;
    return token;
}

/* The env vars the create asked for, to the sandbox's envd through its /init. */
static int push_env(struct call *c, json_t *claim, const char *token, struct sbx_error *err)
{
    json_auto_t *env = annotation_object(claim, SBX_E2B_ANN_ENV);
    json_t *st = json_object_get(json_object_get(claim, "status"), "sandbox");
    const char *ip = json_string_value(json_array_get(json_object_get(st, "podIPs"), 0));

    if (json_object_size(env) == 0)
        return 0;
    if (!ip)
        return sbx_error_set(err, EAGAIN, "the sandbox has no pod IP");
    return e2b_init_push(ip, c->e->o.envd_port, token, env, INIT_TIMEOUT_MS, err);
}

/* What the sandbox's pod may use, as E2B counts it: whole CPUs (rounded up) and MiB, from
 * its first container's limits, else its requests; 0 when it names none. */
static void sizes(json_t *sandbox, int *cpus, int *mib)
{
    json_t *ct = json_array_get(
        json_object_get(
            json_object_get(json_object_get(json_object_get(sandbox, "spec"), "podTemplate"),
                            "spec"),
            "containers"),
        0);
    json_t *res = json_object_get(ct, "resources");
    double v;

    *cpus = *mib = 0;
    for (int i = 0; i < 2; i++) {
        json_t *set = json_object_get(res, i ? "requests" : "limits");
        const char *cpu = json_string_value(json_object_get(set, "cpu"));
        const char *mem = json_string_value(json_object_get(set, "memory"));
        if (!*cpus && cpu && sbx_e2b_quantity(cpu, &v) == 0 && v < 1e6)
            *cpus = (int)ceil(v);
        if (!*mib && mem && sbx_e2b_quantity(mem, &v) == 0 && v < 0x1p50)
            *mib = (int)(v / 0x1p20);
    }
}

/* GET one and the list's items: E2B's SandboxDetail / ListedSandbox; sandboxes holds the
 * claim's Sandbox by name, for its sizes. */
static json_t *detail_json(struct sbx_e2b *e, json_t *claim, json_t *sandboxes)
{
    const char *started = sbx_meta_str(claim, "creationTimestamp");
    char end[32] = "";
    time_t t = e2b_claim_end(claim);
    const char *sb = e2b_claim_sandbox(claim);
    int cpus, mib;

    sizes(sb ? json_object_get(sandboxes, sb) : NULL, &cpus, &mib);
    if (t)
        sbx_rfc3339(t, end);
    json_t *o = json_pack(
        "{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:i, s:i, s:i, s:o}", "sandboxID",
        sbx_meta_str(claim, "name"), "templateID", template_of(claim), "alias", template_of(claim),
        "clientID", CLIENT_ID, "startedAt", started ? started : "", "endAt", *end ? end : started,
        "envdVersion", e->envd_version, "state", "running", "cpuCount", cpus, "memoryMB", mib,
        "diskSizeMB", 0, "metadata", annotation_object(claim, SBX_E2B_ANN_METADATA));

    if (o)
        json_object_set_new(o, "domain", *e->domain ? json_string(e->domain) : json_null());
    return o;
}

/* The request's body as a JSON object ({} when empty); NULL when refused (answered). */
static json_t *body_object(struct call *c)
{
    json_error_t je;
    json_t *o;

    if (c->len == 0)
        return json_object();
    o = json_loadb(c->body, c->len, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(o)) {
        fail(c->r, 400, "the body is not a JSON object%s%s", o ? "" : ": ", o ? "" : je.text);
        json_decref(o);
        return NULL;
    }
    return o;
}

/* An object of strings ("metadata", "envVars"), or absent/null; false when refused. */
static bool strings_object(struct call *c, json_t *v, const char *name)
{
    const char *k;
    json_t *x;

    if (!v || json_is_null(v))
        return true;
    if (!json_is_object(v)) {
        fail(c->r, 400, "%s must be an object of strings", name);
        return false;
    }
    json_object_foreach(v, k, x)
    {
        if (!json_is_string(x)) {
            fail(c->r, 400, "%s.%.100s must be a string", name, k);
            return false;
        }
    }
    return true;
}

/* The "timeout" member in seconds: *ret, or dflt when absent; false when refused. */
static bool timeout_of(struct call *c, json_t *body, unsigned dflt, bool required, unsigned *ret)
{
    json_t *v = json_object_get(body, "timeout");

    if (!v && !required) {
        *ret = dflt;
        return true;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > c->e->o.max_timeout_s) {
        fail(c->r, 400, "timeout must be a whole number of seconds, 0 to %u",
             c->e->o.max_timeout_s);
        return false;
    }
    *ret = (unsigned)json_integer_value(v);
    return true;
}

/* What a create asks that we cannot give: a refusal's text, or NULL. */
static const char *unsupported(json_t *body)
{
    if (json_is_true(json_object_get(body, "autoPause")))
        return "autoPause is not supported";
    if (json_is_true(json_object_get(body, "autoResume")) ||
        json_is_true(json_object_get(json_object_get(body, "autoResume"), "enabled")))
        return "autoResume is not supported";
    if (json_array_size(json_object_get(body, "volumeMounts")) > 0)
        return "volumeMounts are not supported";
    return NULL;
}

static json_t *new_claim(struct call *c, const char *id, const char *tmpl, const char *pool,
                         unsigned timeout_s, json_t *body)
{
    char end[32];
    json_t *md = json_object_get(body, "metadata"), *env = json_object_get(body, "envVars");
    _cleanup_free_ char *mds = json_is_object(md) ? json_dumps(md, JSON_COMPACT) : strdup("{}");
    _cleanup_free_ char *envs = json_is_object(env) ? json_dumps(env, JSON_COMPACT) : strdup("{}");

    sbx_rfc3339(time(NULL) + timeout_s, end);
    if (!mds || !envs)
        return NULL;
    return json_pack("{s:s, s:s, s:{s:s, s:s, s:{s:s}, s:{s:s, s:s, s:s}}, "
                     "s:{s:{s:s}, s:{s:s, s:s}}}",
                     "apiVersion", "extensions.agents.x-k8s.io/v1beta1", "kind", "SandboxClaim",
                     "metadata", "name", id, "namespace", c->ns, "labels", SBX_E2B_LABEL_ID, id,
                     "annotations", SBX_E2B_ANN_TEMPLATE, tmpl, SBX_E2B_ANN_METADATA, mds,
                     SBX_E2B_ANN_ENV, envs, "spec", "warmPoolRef", "name", pool, "lifecycle",
                     "shutdownTime", end, "shutdownPolicy", "Delete");
}

/* Waits for the claim's sandbox and answers 201, or deletes the claim and answers why not. */
static int finish_create(struct call *c, const char *id, bool has_env)
{
    struct sbx_error err = {0};
    json_auto_t *claim = NULL;
    _cleanup_free_ char *token = NULL;
    int rc = e2b_store_wait_ready(c->e->store, c->ns, id, has_env, c->e->o.create_timeout_ms,
                                  &claim, &err);

    if (rc == 1 && push_env(c, claim, (token = token_of(c, claim)), &err) == 0) {
        json_auto_t *o = sandbox_json(c, claim, token);
        reply_json(c->r, 201, o);
        log_info("e2b: %s/%s: sandbox %s", c->ns, id, e2b_claim_sandbox(claim));
        return 0;
    }
    e2b_store_delete(c->e->store, c->ns, id, &(struct sbx_error){0});
    /* a failure of ours, not the request's: the SDK is told not to make another sandbox */
    snprintf(c->r->extra, sizeof(c->r->extra), "Should-Retry: false\r\n");
    if (rc == 1)
        return fail_err(c->r, "setting the sandbox's env vars", &err);
    if (rc < 0 && rc != -ENOENT)
        return fail_err(c->r, "waiting for the sandbox", &err);
    return fail(c->r, 504, "the sandbox was not ready within %llu ms",
                (unsigned long long)c->e->o.create_timeout_ms);
}

static int op_create(struct call *c)
{
    json_auto_t *body = body_object(c);
    struct sbx_error err = {0};
    const char *tmpl, *why;
    char pool[254], id[SBX_E2B_ID_LEN + 1];
    unsigned timeout_s;
    int rc = 0;

    if (!body)
        return 0;
    tmpl = json_string_value(json_object_get(body, "templateID"));
    if (!tmpl || !*tmpl)
        return fail(c->r, 400, "templateID is required");
    if (!timeout_of(c, body, c->e->o.default_timeout_s, false, &timeout_s) ||
        !strings_object(c, json_object_get(body, "metadata"), "metadata") ||
        !strings_object(c, json_object_get(body, "envVars"), "envVars"))
        return 0;
    if ((why = unsupported(body)))
        return fail(c->r, 400, "%s", why);
    if (timeout_s == 0)
        timeout_s = c->e->o.default_timeout_s;
    rc = e2b_store_pool(c->e->store, c->ns, tmpl, pool, &err);
    if (rc == -ENOENT)
        return fail(c->r, 404, "template '%.200s' not found", tmpl);
    if (rc < 0)
        return fail_err(c->r, "finding the template's pool", &err);
    for (int i = 0; i < CREATE_TRIES && rc == 0; i++) {
        sbx_random_suffix(id, SBX_E2B_ID_LEN);
        id[0] = "abcdefghijklmnopqrstuvwxyz"[(unsigned char)id[0] % 26]; /* a letter first */
        json_auto_t *claim = new_claim(c, id, tmpl, pool, timeout_s, body);
        if (!claim)
            return fail(c->r, 500, "out of memory");
        rc = e2b_store_create(c->e->store, c->ns, claim, &err);
    }
    if (rc == -EINVAL)
        return fail(c->r, 400, "the sandbox was refused: %s", err.msg);
    if (rc <= 0)
        return fail_err(c->r, "creating the claim", &err);
    return finish_create(c, id, json_object_size(json_object_get(body, "envVars")) > 0);
}

/* The claim of the path's ID; NULL when answered (404 or a failure). */
static json_t *find(struct call *c)
{
    struct sbx_error err = {0};
    json_t *claim = NULL;
    int rc;

    if (c->req.bad_id) {
        fail(c->r, 404, "sandbox not found: an ID is [a-z0-9]+");
        return NULL;
    }
    rc = e2b_store_get(c->e->store, c->ns, c->req.id, &claim, &err);
    if (rc < 0)
        fail_err(c->r, "reading the sandbox", &err);
    else if (rc == 0)
        fail(c->r, 404, "sandbox \"%s\" not found", c->req.id);
    return claim;
}

static int op_get(struct call *c)
{
    json_auto_t *claim = find(c), *sandboxes = NULL;
    struct sbx_error err = {0};

    if (!claim)
        return 0;
    if (e2b_claim_sandbox(claim) &&
        e2b_store_sandboxes(c->e->store, c->ns, e2b_claim_sandbox(claim), &sandboxes, &err) < 0)
        return fail_err(c->r, "reading the sandbox", &err);
    json_auto_t *o = detail_json(c->e, claim, sandboxes);
    reply_json(c->r, 200, o);
    return 0;
}

static int op_delete(struct call *c)
{
    struct sbx_error err = {0};
    int rc;

    if (c->req.bad_id)
        return fail(c->r, 404, "sandbox not found: an ID is [a-z0-9]+");
    rc = e2b_store_delete(c->e->store, c->ns, c->req.id, &err);
    if (rc < 0)
        return fail_err(c->r, "deleting the sandbox", &err);
    if (rc == 0)
        return fail(c->r, 404, "sandbox \"%s\" not found", c->req.id);
    c->r->status = 204;
    return 0;
}

static int set_end(struct call *c, json_t *claim, time_t end, unsigned ok)
{
    struct sbx_error err = {0};
    int rc = e2b_store_set_end(c->e->store, claim, end, &err);

    if (rc == -ENOENT)
        return fail(c->r, 404, "sandbox \"%s\" not found", c->req.id);
    if (rc < 0)
        return fail_err(c->r, "setting the timeout", &err);
    c->r->status = ok;
    return 0;
}

static int op_timeout(struct call *c)
{
    json_auto_t *body = body_object(c);
    unsigned timeout_s;

    if (!body || !timeout_of(c, body, 0, true, &timeout_s))
        return 0;
    json_auto_t *claim = find(c);
    return claim ? set_end(c, claim, time(NULL) + timeout_s, 204) : 0;
}

/* A running sandbox's connect: its answer as at create; a timeout given only lengthens it. */
static int op_connect(struct call *c)
{
    json_auto_t *body = body_object(c);
    unsigned timeout_s;

    if (!body || !timeout_of(c, body, 0, false, &timeout_s))
        return 0;
    json_auto_t *claim = find(c);
    if (!claim)
        return 0;
    if (timeout_s && time(NULL) + timeout_s > e2b_claim_end(claim)) {
        set_end(c, claim, time(NULL) + timeout_s, 200);
        if (c->r->status != 200)
            return 0;
        free(c->r->body);
        c->r->body = NULL;
    }
    _cleanup_free_ char *token = token_of(c, claim);
    json_auto_t *o = sandbox_json(c, claim, token);
    reply_json(c->r, 200, o);
    return 0;
}

/* metadata=k1%3Dv1%26k2%3Dv2 (the SDK's form: pairs URL-encoded, then the whole again): true
 * when every pair is in the claim's metadata. */
static bool metadata_matches(json_t *claim, const char *filter)
{
    json_auto_t *md = annotation_object(claim, SBX_E2B_ANN_METADATA);
    size_t len = strlen(filter);

    for (size_t at = 0; at < len;) {
        const char *amp = memchr(filter + at, '&', len - at);
        size_t end = amp ? (size_t)(amp - filter) : len;
        const char *eq = memchr(filter + at, '=', end - at);
        char k[256], v[1024];
        if (eq) {
            size_t klen = (size_t)(eq - filter - at);
            /* each side once more: sbx_e2b_query decodes a "name=value" whole */
            char pair[1400];
            snprintf(pair, sizeof(pair), "k=%.*s&v=%.*s", (int)klen, filter + at,
                     (int)(end - at - klen - 1), eq + 1);
            if (!sbx_e2b_query(pair, strlen(pair), "k", k, sizeof(k)) ||
                !sbx_e2b_query(pair, strlen(pair), "v", v, sizeof(v)))
                return false;
            const char *have = json_string_value(json_object_get(md, k));
            if (!have || strcmp(have, v))
                return false;
        }
        at = end + 1;
    }
    return true;
}

static int op_list(struct call *c)
{
    json_auto_t *claims = NULL, *sandboxes = NULL, *out = json_array();
    struct sbx_error err = {0};
    char filter[2048], state[64];
    bool has_filter, running = true;
    json_t *claim;
    size_t i;

    has_filter = sbx_e2b_query(c->req.query, c->req.query_len, "metadata", filter, sizeof(filter));
    if (sbx_e2b_query(c->req.query, c->req.query_len, "state", state, sizeof(state)))
        running = strstr(state, "running") != NULL; /* ours are never paused */
    if (!out)
        return fail(c->r, 500, "out of memory");
    if (running && (e2b_store_list(c->e->store, c->ns, MAX_LIST, &claims, &err) < 0 ||
                    (json_array_size(claims) &&
                     e2b_store_sandboxes(c->e->store, c->ns, NULL, &sandboxes, &err) < 0)))
        return fail_err(c->r, "listing sandboxes", &err);
    json_array_foreach(claims, i, claim)
    {
        if (!has_filter || metadata_matches(claim, filter))
            json_array_append_new(out, detail_json(c->e, claim, sandboxes));
    }
    reply_json(c->r, 200, out);
    return 0;
}

static int op_unsupported(struct call *c)
{
    return fail(c->r, 501,
                "not supported by sandboxd's E2B API (pause, resume, snapshots, metrics, "
                "logs, refreshes and network updates are not)");
}

static int op_bad_method(struct call *c)
{
    return fail(c->r, 405, "method not allowed");
}

static int (*const ops[])(struct call *) = {
    [SBX_E2B_CREATE] = op_create,
    [SBX_E2B_LIST] = op_list,
    [SBX_E2B_GET] = op_get,
    [SBX_E2B_DELETE] = op_delete,
    [SBX_E2B_TIMEOUT] = op_timeout,
    [SBX_E2B_CONNECT] = op_connect,
    [SBX_E2B_UNSUPPORTED] = op_unsupported,
    [SBX_E2B_BAD_METHOD] = op_bad_method,
};

/* The host a request names (without its port), into buf. */
static void host_of(const struct sbx_h1_msg *m, char *buf, size_t size)
{
    char *colon;

    field(m, "Host", buf, size);
    if ((colon = strrchr(buf, ':')) && !strchr(colon, ']'))
        *colon = '\0';
}

static bool is_api_host(struct sbx_e2b *e, const struct sbx_h1_msg *m)
{
    char host[300];

    host_of(m, host, sizeof(host));
    return *e->domain && !strncasecmp(host, "api.", 4) && !strcasecmp(host + 4, e->domain);
}

static bool wants(void *arg, const struct sbx_h1_msg *m)
{
    struct sbx_e2b *e = arg;
    struct sbx_e2b_req req;
    char host[300], id[64], port[8];

    if (!e->o.api)
        return false;
    if (is_api_host(e, m))
        return true;
    if (sbx_h1_get(m, "X-Sandbox-ID") || sbx_h1_get(m, "E2b-Sandbox-Id"))
        return false;
    field(m, "Host", host, sizeof(host));
    if (sbx_e2b_from_host(host, strlen(host), e->domain, id, port) != 0)
        return false;
    sbx_e2b_parse(m->method, m->method_len, m->target, m->target_len, &req);
    return req.op != SBX_E2B_NONE;
}

/* The API key's namespace, then the operation. */
static int dispatch(struct call *c)
{
    const struct sbx_h1_field *key = sbx_h1_get(c->m, "X-API-Key");
    struct sbx_error err = {0};
    int rc;

    sbx_e2b_parse(c->m->method, c->m->method_len, c->m->target, c->m->target_len, &c->req);
    if (c->req.op == SBX_E2B_NONE)
        return fail(c->r, 404, "no such route in sandboxd's E2B API");
    rc = key ? e2b_store_key_ns(c->e->store, key->value, key->value_len, c->ns, &err) : -EACCES;
    if (rc == -EACCES)
        return fail(c->r, 401, key ? "invalid API key" : "missing API key (the X-API-Key header)");
    if (rc < 0)
        return fail_err(c->r, "reading the API keys", &err);
    return ops[c->req.op](c);
}

static void serve(void *arg, const struct sbx_h1_msg *m, const char *body, size_t len,
                  struct sbx_proxy_reply *r)
{
    struct call c = {.e = arg, .m = m, .body = body, .len = len, .r = r};

    dispatch(&c);
}

/* E2B's sandbox traffic: the keys of the claim's Sandbox. */
static int route(void *arg, const struct sbx_h1_msg *m, struct sbx_preview *k,
                 struct sbx_proxy_reply *r)
{
    struct sbx_e2b *e = arg;
    char host[300], id[64] = "", port[8] = "";
    struct sbx_error err = {0};
    int rc;

    field(m, "Host", host, sizeof(host));
    rc = sbx_e2b_from_host(host, strlen(host), e->domain, id, port);
    if (rc < 0) {
        fail(r, 400, "a sandbox host is <port>-<sandboxid>.%s", e->domain);
        return rc;
    }
    if (rc == 0) {
        const struct sbx_h1_field *f = sbx_h1_get(m, "E2b-Sandbox-Id");
        if (!f)
            return 0;
        if (!sbx_e2b_id_valid(f->value, f->value_len)) {
            fail(r, 400, "E2b-Sandbox-Id is not a sandbox ID ([a-z0-9]+)");
            return -EINVAL;
        }
        memcpy(id, f->value, f->value_len);
        id[f->value_len] = '\0';
        field(m, "E2b-Sandbox-Port", port, sizeof(port));
        if (!*port)
            snprintf(port, sizeof(port), "%d", SBX_E2B_ENVD_PORT);
    }
    memset(k, 0, sizeof(*k));
    rc = e2b_store_locate(e->store, id, k->ns, k->id, &err);
    if (rc == -ENOENT) {
        fail(r, 502, "sandbox \"%s\" was not found", id);
        return rc;
    }
    if (rc < 0) {
        fail_err(r, "finding the sandbox", &err);
        return rc;
    }
    snprintf(k->port, sizeof(k->port), "%s", port); /* sbx_target_parse checks it */
    return 1;
}

int sbx_e2b_new(struct sbx_e2b **ret, const struct sbx_e2b_opts *o, struct sbx_error *err)
{
    struct e2b_store_opts so = {.kube = o->kube,
                                .keys_ns = o->keys_ns,
                                .keys_name = o->keys_name,
                                .lookup_ns = o->lookup_ns};
    struct sbx_e2b *e = calloc(1, sizeof(*e));
    int rc;

    if (!e)
        return sbx_error_set(err, ENOMEM, "e2b");
    e->o = *o;
    snprintf(e->domain, sizeof(e->domain), "%s", o->domain ? o->domain : "");
    snprintf(e->envd_version, sizeof(e->envd_version), "%s",
             o->envd_version && *o->envd_version ? o->envd_version : SBX_E2B_ENVD_VERSION);
    if (!e->o.default_timeout_s)
        e->o.default_timeout_s = 300;
    if (!e->o.max_timeout_s)
        e->o.max_timeout_s = 86400;
    if (!e->o.create_timeout_ms)
        e->o.create_timeout_ms = 60000;
    if (!e->o.envd_port)
        e->o.envd_port = SBX_E2B_ENVD_PORT;
    e->hook = (struct sbx_proxy_hook){
        .wants = wants, .serve = serve, .route = route, .arg = e, .max_body = MAX_BODY};
    if ((rc = e2b_store_new(&e->store, &so, err)) < 0) {
        free(e);
        return rc;
    }
    *ret = e;
    return 0;
}

void sbx_e2b_free(struct sbx_e2b *e)
{
    if (!e)
        return;
    e2b_store_free(e->store);
    free(e);
}

const struct sbx_proxy_hook *sbx_e2b_hook(struct sbx_e2b *e)
{
    return &e->hook;
}
