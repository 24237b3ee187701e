/* The E2B port: a second sbx_http server (same gate, head checks and thread pool as the REST
 * port) serving envd's routes from a table of its own, the access token and user checks every
 * route makes, and the plain routes GET /health, POST /init, GET /envs (envd's spec:
 * e2b-dev/infra packages/envd/spec/envd.yaml). */
#define _GNU_SOURCE
#include "e2b_internal.h"

#include <errno.h>
#include <grp.h>
#include <openssl/evp.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "auth.h"
#include "cleanup.h"
#include "e2b_fs.h"
#include "http_request.h"
#include "http_server.h"
#include "log.h"

#define MAX_INIT_BODY (1 << 20)
#define MAX_INIT_ENVS 4096

/* Every service's methods. */
static const struct {
    const struct sbx_e2b_method *methods;
    const size_t *n;
} services[] = {
    {sbx_e2b_process_methods, &sbx_e2b_process_n_methods},
    {sbx_e2b_fs_methods, &sbx_e2b_fs_n_methods},
};

const struct sbx_e2b_method *sbx_e2b_method_find(const char *path)
{
    for (size_t s = 0; s < SBX_ARRAY_SIZE(services); s++)
        for (size_t i = 0; i < *services[s].n; i++)
            if (strcmp(services[s].methods[i].path, path) == 0)
                return &services[s].methods[i];
    return NULL;
}

struct sbx_e2b_server *sbx_e2b_of(struct hctx *c)
{
    return c->h->o.arg;
}

const struct sbx_e2b_opts *sbx_e2b_server_opts(struct sbx_e2b_server *s)
{
    return &s->o;
}

enum MHD_Result sbx_e2b_respond_plain_error(struct hctx *c, unsigned status, const char *msg)
{
    return sbx_http_respond_json(c, status,
                                 json_pack("{s:i, s:s}", "code", (int)status, "message", msg));
}

/* ------------------------------------------------------------------------------------------ */
/* Access token and user */

bool sbx_e2b_authorized(struct hctx *c, enum MHD_Result *ret)
{
    struct sbx_e2b_server *s = sbx_e2b_of(c);
    const char *tok = sbx_http_header(c, "X-Access-Token");
    enum sbx_auth_verdict v = SBX_AUTH_OK;

    pthread_mutex_lock(&s->lock);
    if (s->o.auth || s->token)
        v = sbx_auth_check_token(s->o.auth ? s->o.auth : s->token, tok, tok ? strlen(tok) : 0);
    pthread_mutex_unlock(&s->lock);
    if (v == SBX_AUTH_OK)
        return true;
    /* envd's words, so clients that match on them keep working. */
    *ret = sbx_e2b_respond_plain_error(
        c, 401,
        "unauthorized access, please provide a valid access token or method signing if "
        "supported");
    return false;
}

static int fill_user(const struct passwd *pw, struct sbx_e2b_user *u, char *msg, size_t len)
{
    int n = (int)SBX_ARRAY_SIZE(u->groups);

    if (strlen(pw->pw_name) >= sizeof(u->name) || strlen(pw->pw_dir) >= sizeof(u->home) ||
        strlen(pw->pw_shell) >= sizeof(u->shell)) {
        snprintf(msg, len, "user '%s' has too long a name, home or shell", pw->pw_name);
        return -EINVAL;
    }
    strcpy(u->name, pw->pw_name);
    strcpy(u->home, pw->pw_dir);
    strcpy(u->shell, pw->pw_shell);
    u->uid = pw->pw_uid;
    u->gid = pw->pw_gid;
    if (getgrouplist(pw->pw_name, pw->pw_gid, u->groups, &n) < 0) {
        /* More groups than we carry: the primary one alone, never a partial list. */
        u->groups[0] = pw->pw_gid;
        n = 1;
    }
    u->n_groups = (size_t)n;
    return 0;
}

int sbx_e2b_user_lookup(struct sbx_e2b_server *s, const char *name, struct sbx_e2b_user *u,
                        char *msg, size_t len)
{
    struct passwd pw, *res = NULL;
    char buf[4096], def[64];

    if (!name || !name[0]) {
        pthread_mutex_lock(&s->lock);
        snprintf(def, sizeof(def), "%s", s->default_user);
        pthread_mutex_unlock(&s->lock);
        name = def[0] ? def : NULL;
    }
    if (name)
        getpwnam_r(name, &pw, buf, sizeof(buf), &res);
    else
        getpwuid_r(geteuid(), &pw, buf, sizeof(buf), &res);
    if (!res) {
        snprintf(msg, len, name ? "invalid username: '%s'" : "invalid default user: '%s'",
                 name ? name : "(the daemon's)");
        return -ENOENT;
    }
    return fill_user(res, u, msg, len);
}

int sbx_e2b_user_of(struct hctx *c, struct sbx_e2b_user *u, char *msg, size_t len)
{
    const char *h = sbx_http_header(c, "Authorization");
    unsigned char dec[256];
    size_t n;
    int m;
    char *colon;

    if (!h || strncasecmp(h, "Basic ", 6) != 0)
        return sbx_e2b_user_lookup(sbx_e2b_of(c), NULL, u, msg, len);
    h += 6;
    while (*h == ' ')
        h++;
    n = strlen(h);
    if (n == 0 || n % 4 || n / 4 * 3 >= sizeof(dec) ||
        (m = EVP_DecodeBlock(dec, (const unsigned char *)h, (int)n)) < 0) {
        snprintf(msg, len, "invalid basic authorization header");
        return -EINVAL;
    }
    /* EVP_DecodeBlock counts the padding's bytes as zeros. */
    while (m > 0 && n && h[n - 1] == '=') {
        m--;
        n--;
    }
    dec[m] = '\0';
    if (memchr(dec, '\0', (size_t)m) || !(colon = strchr((char *)dec, ':'))) {
        snprintf(msg, len, "invalid basic authorization header");
        return -EINVAL;
    }
    *colon = '\0';
    if (!dec[0])
        return sbx_e2b_user_lookup(sbx_e2b_of(c), NULL, u, msg, len);
    return sbx_e2b_user_lookup(sbx_e2b_of(c), (const char *)dec, u, msg, len);
}

/* ------------------------------------------------------------------------------------------ */
/* Plain routes */

static enum MHD_Result route_health(struct hctx *c)
{
    *c->upload_data_size = 0;
    return sbx_http_respond_empty(c, 204);
}

static enum MHD_Result route_envs(struct hctx *c)
{
    struct sbx_e2b_server *s = sbx_e2b_of(c);
    struct MHD_Response *resp;
    enum MHD_Result ret;
    json_t *copy;

    *c->upload_data_size = 0;
    if (!sbx_e2b_authorized(c, &ret))
        return ret;
    pthread_mutex_lock(&s->lock);
    copy = json_deep_copy(s->envs);
    pthread_mutex_unlock(&s->lock);
    resp = sbx_http_json_response(copy);
    if (resp)
        MHD_add_response_header(resp, "Cache-Control", "no-store");
    return sbx_http_queue(c, 200, resp);
}

/* Reads body into r->body; false once it is whole. *ret set when refused. */
static bool read_body(struct hctx *c, size_t max, enum MHD_Result *ret)
{
    struct hreq *r = c->r;
    size_t n = *c->upload_data_size;
    char *nb;

    if (!n)
        return false;
    *c->upload_data_size = 0;
    if (r->body_len + n > max) {
        *ret = sbx_e2b_respond_plain_error(c, 413, "request body too large");
        return true;
    }
    nb = realloc(r->body, r->body_len + n + 1);
    if (!nb) {
        *ret = MHD_NO;
        return true;
    }
    r->body = nb;
    memcpy(r->body + r->body_len, c->upload_data, n);
    r->body_len += n;
    r->body[r->body_len] = '\0';
    *ret = MHD_YES;
    return true;
}

/* /init's envVars: an object of at most MAX_INIT_ENVS strings named without '='. */
static bool envs_valid(json_t *envs, char *msg, size_t len)
{
    const char *k;
    json_t *v;

    if (!json_is_object(envs) || json_object_size(envs) > MAX_INIT_ENVS) {
        snprintf(msg, len, "envVars must be an object of at most %d strings", MAX_INIT_ENVS);
        return false;
    }
    json_object_foreach(envs, k, v)
    {
        if (!json_is_string(v) || !k[0] || strchr(k, '=')) {
            snprintf(msg, len, "envVars: '%.64s' must name a string, without '='", k);
            return false;
        }
    }
    return true;
}

/* Checks /init's body; a message in msg when refused. */
static bool init_valid(json_t *j, char *msg, size_t len)
{
    static const char *const strings[] = {"accessToken", "defaultUser", "defaultWorkdir"};
    json_t *envs = json_object_get(j, "envVars"), *v;

    if (!json_is_object(j)) {
        snprintf(msg, len, "body must be a JSON object");
        return false;
    }
    if (envs && !json_is_null(envs) && !envs_valid(envs, msg, len))
        return false;
    for (size_t i = 0; i < SBX_ARRAY_SIZE(strings); i++)
        if ((v = json_object_get(j, strings[i])) && !json_is_null(v) && !json_is_string(v)) {
            snprintf(msg, len, "%s must be a string", strings[i]);
            return false;
        }
    return true;
}

/* Applies a valid /init body; a message in msg when refused. */
static int init_apply(struct sbx_e2b_server *s, json_t *j, char *msg, size_t len)
{
    const char *tok = json_string_value(json_object_get(j, "accessToken"));
    const char *user = json_string_value(json_object_get(j, "defaultUser"));
    const char *wd = json_string_value(json_object_get(j, "defaultWorkdir"));
    json_t *envs = json_object_get(j, "envVars");
    struct sbx_auth *a = NULL;
    struct sbx_error e = {0};

    if ((user && strlen(user) >= sizeof(s->default_user)) ||
        (wd && strlen(wd) >= sizeof(s->default_workdir)))
        return snprintf(msg, len, "defaultUser or defaultWorkdir too long"), -EINVAL;
    if (tok && tok[0] && s->o.auth) {
        /* sandboxd's token stays the one: an /init may repeat it, not replace it. */
        if (sbx_auth_check_token(s->o.auth, tok, strlen(tok)) != SBX_AUTH_OK)
            return snprintf(msg, len, "accessToken differs from sandboxd's token"), -EPERM;
    } else if (tok && tok[0] && sbx_auth_new(tok, strlen(tok), &a, &e) < 0) {
        return snprintf(msg, len, "accessToken: %.200s", e.msg), -EINVAL;
    }
    pthread_mutex_lock(&s->lock);
    if (a) {
        sbx_auth_free(s->token);
        s->token = a;
    }
    if (json_is_object(envs))
        json_object_update(s->envs, envs);
    if (user)
        snprintf(s->default_user, sizeof(s->default_user), "%s", user);
    if (wd)
        snprintf(s->default_workdir, sizeof(s->default_workdir), "%s", wd);
    pthread_mutex_unlock(&s->lock);
    return 0;
}

static enum MHD_Result route_init(struct hctx *c)
{
    struct sbx_e2b_server *s = sbx_e2b_of(c);
    enum MHD_Result ret;
    json_error_t je;
    char msg[256];
    int r;

    if (read_body(c, MAX_INIT_BODY, &ret))
        return ret;
    if (!sbx_e2b_authorized(c, &ret))
        return ret;
    {
        json_auto_t *j =
            c->r->body_len ? json_loadb(c->r->body, c->r->body_len, 0, &je) : json_object();
        if (!j)
            return sbx_e2b_respond_plain_error(c, 400, "body is not valid JSON");
        if (!init_valid(j, msg, sizeof(msg)))
            return sbx_e2b_respond_plain_error(c, 400, msg);
        if ((r = init_apply(s, j, msg, sizeof(msg))) < 0)
            return sbx_e2b_respond_plain_error(c, r == -EPERM ? 401 : 400, msg);
    }
    return sbx_http_respond_empty(c, 204);
}

static enum MHD_Result route_none(struct hctx *c)
{
    *c->upload_data_size = 0;
    return sbx_e2b_respond_plain_error(c, 404, "no such route");
}

static const struct route routes[] = {
    {"/health", "GET HEAD", route_health, ROUTE_OPEN},
    {"/init", "POST", route_init, ROUTE_OPEN},
    {"/envs", "GET", route_envs, ROUTE_OPEN},
    {"/process.Process/", "POST GET", sbx_e2b_connect_route, ROUTE_OPEN},
    {"/filesystem.Filesystem/", "POST GET", sbx_e2b_connect_route, ROUTE_OPEN},
    {"/files", "GET HEAD POST", sbx_e2b_files_route, ROUTE_OPEN},
    {"/", "GET HEAD POST PUT DELETE PATCH OPTIONS", route_none, ROUTE_OPEN},
};

char **sbx_e2b_server_envs(struct sbx_e2b_server *s)
{
    char **out;
    const char *k;
    json_t *v;
    size_t i = 0;

    pthread_mutex_lock(&s->lock);
    out = calloc(json_object_size(s->envs) + 1, sizeof(*out));
    if (out)
        json_object_foreach(s->envs, k, v)
        {
            if (asprintf(&out[i], "%s=%s", k, json_string_value(v)) < 0) {
                out[i] = NULL;
                break;
            }
            i++;
        }
    pthread_mutex_unlock(&s->lock);
    return out;
}

void sbx_e2b_envs_free(char **envs)
{
    for (size_t i = 0; envs && envs[i]; i++)
        free(envs[i]);
    free(envs);
}

int sbx_e2b_start(struct sbx_e2b_server **ret, const struct sbx_e2b_opts *o, struct sbx_error *err)
{
    struct sbx_e2b_server *s = calloc(1, sizeof(*s));
    struct sbx_http_opts ho = {
        .host = o->host,
        .port = o->port,
        .idle_timeout_s = o->idle_timeout_s,
        .head_timeout_ms = o->head_timeout_ms,
        .threads = o->threads,
        .max_connections = o->max_connections,
        .max_per_peer = o->max_per_peer,
        .arg = NULL,
        .routes = routes,
        .n_routes = SBX_ARRAY_SIZE(routes),
        .h2c = true, /* envd serves Connect over HTTP/1.1 and h2c alike */
    };
    int port;

    if (!s || !(s->envs = json_object())) {
        free(s);
        return sbx_error_set(err, ENOMEM, "allocate e2b server");
    }
    s->o = *o;
    if (!s->o.max_message_bytes)
        s->o.max_message_bytes = 4 << 20;
    pthread_mutex_init(&s->lock, NULL);
    ho.arg = s;
    port = sbx_http_start(&s->http, &ho, err);
    if (port < 0) {
        sbx_e2b_stop(s);
        return port;
    }
    *ret = s;
    return port;
}

/* At shutdown the processes are gone, so their streams have ended: what they queued last (the
 * End event) gets this long to reach its client before the connections are cut. */
#define FLUSH_MS 2000

void sbx_e2b_stop(struct sbx_e2b_server *s)
{
    if (!s)
        return;
    for (int i = 0; i < FLUSH_MS / 10 && __atomic_load_n(&s->live_calls, __ATOMIC_ACQUIRE); i++)
        usleep(10 * 1000);
    sbx_http_stop(s->http);
    sbx_auth_free(s->token);
    json_decref(s->envs);
    pthread_mutex_destroy(&s->lock);
    free(s);
}
