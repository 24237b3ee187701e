#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "log.h"
#include "preview.h"
#include "proxy_types.h"

#define KEY_MAX 256

static void set_ufd(struct proxy_conn *c, int fd)
{
    pthread_mutex_lock(&c->p->lock); /* the shutdown may be cutting it */
    if (c->ufd >= 0)
        close(c->ufd);
    c->ufd = fd;
    pthread_mutex_unlock(&c->p->lock);
    if (fd < 0)
        c->host[0] = '\0';
}

/* Reads until a whole head is at the start of the client's buffer: its length; 0 when the
 * client closed, stayed idle past the timeout, or the proxy drains; -ETIMEDOUT for a head
 * begun and not finished in time; -E2BIG for a head larger than the buffer. */
static long read_head(struct proxy_conn *c)
{
    struct pipe *u = &c->up;
    struct sbx_proxy *p = c->p;
    uint64_t start = sbx_now_ms(), begun = 0;

    memmove(u->buf, u->buf + u->wend, u->rend - u->wend);
    u->rend -= u->wend;
    u->woff = u->wend = 0;
    for (;;) {
        size_t end = u->rend ? sbx_http_head_end(u->buf, u->rend) : 0;
        if (end)
            return (long)end;
        if (u->rend == PROXY_BUF)
            return -E2BIG;
        __atomic_store_n(&c->idle, u->rend == 0, __ATOMIC_SEQ_CST);
        if (u->rend == 0 && __atomic_load_n(&p->stopping, __ATOMIC_SEQ_CST))
            return 0;
        uint64_t deadline = u->rend ? begun + p->o.head_timeout_ms : start + p->o.idle_timeout_ms;
        uint64_t now = sbx_now_ms();
        struct pollfd pfd = {.fd = c->cfd, .events = POLLIN};
        if (now >= deadline || poll(&pfd, 1, (int)(deadline - now)) == 0)
            return u->rend ? -ETIMEDOUT : 0;
        ssize_t n = recv(c->cfd, u->buf + u->rend, PROXY_BUF - u->rend, 0);
        if (n <= 0 && !(n < 0 && (errno == EINTR || errno == EAGAIN)))
            return 0;
        if (n > 0 && u->rend == 0)
            begun = sbx_now_ms();
        if (n > 0)
            u->rend += (size_t)n;
        __atomic_store_n(&c->idle, false, __ATOMIC_SEQ_CST);
    }
}

/* A field's value as a string (NULL when absent). */
static const char *field_str(const struct sbx_h1_msg *m, const char *name, char *buf, size_t size)
{
    const struct sbx_h1_field *f = sbx_h1_get(m, name);

    if (!f)
        return NULL;
    snprintf(buf, size, "%.*s", (int)f->value_len, f->value);
    return buf;
}

/* X-Sandbox-Timeout in seconds, as the reference's router reads it: a finite positive number,
 * capped by --proxy-timeout; anything else falls back to the configured wait. */
static uint64_t head_wait(const struct sbx_h1_msg *m, const struct sbx_proxy_opts *o)
{
    char raw[64], *end;
    double v;

    if (!field_str(m, "X-Sandbox-Timeout", raw, sizeof(raw)))
        return o->response_header_timeout_ms;
    v = strtod(raw, &end);
    if (end == raw || *end || !isfinite(v) || v <= 0)
        return o->response_header_timeout_ms;
    if (v * 1000 >= (double)o->proxy_timeout_ms)
        return o->proxy_timeout_ms;
    return v * 1000 < 1 ? 1 : (uint64_t)(v * 1000);
}

static bool is_drop(const struct sbx_h1_msg *m, const struct sbx_h1_field *f, bool upgrade)
{
    static const char *const ours[] = {
        "Host",     "Authorization", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto",
        "Forwarded"};

    for (size_t i = 0; i < sizeof(ours) / sizeof(ours[0]); i++)
        if (f->name_len == strlen(ours[i]) && strncasecmp(f->name, ours[i], f->name_len) == 0)
            return true;
    if (upgrade && f->name_len == 6 && strncasecmp(f->name, "Origin", 6) == 0)
        return true;
    if (f->name_len == 17 && strncasecmp(f->name, "Transfer-Encoding", 17) == 0)
        return false; /* the chunked body passes through as it is */
    return sbx_h1_hop_by_hop(m, f);
}

/* The request as the upstream gets it: origin-form, Host the upstream's, hop-by-hop fields and
 * the client's credential dropped, X-Forwarded-* set, the upgrade asked again. */
static int build_request(struct proxy_conn *c, const struct sbx_h1_msg *m, const char *host,
                         const struct sbx_preview *pv, const struct exchange *x, size_t head_len)
{
    size_t size = head_len + 1024 + proxy_authz_extra(x), n = 0;
    bool upgrade = x->upgrade;
    char *out = malloc(size), target[PROXY_BUF], fwd_host[KEY_MAX];
    const char *path;

#define PUT(...) n += (size_t)snprintf(out + n, size - n, __VA_ARGS__)
    if (!out)
        return -ENOMEM;
    if (pv->path)
        snprintf(target, sizeof(target), "%.*s", (int)pv->path_len, pv->path);
    else
        snprintf(target, sizeof(target), "%.*s", (int)m->target_len, m->target);
    if (x->az && x->az->strip_query_token)
        sbx_query_strip_token(target); /* the router's credential */
    path = sbx_http_target_path(target);
    PUT("%.*s %s HTTP/1.1\r\nHost: %s\r\n", (int)m->method_len, m->method, *path ? path : "/",
        host);
    for (unsigned i = 0; i < m->nfields; i++) {
        const struct sbx_h1_field *f = &m->fields[i];
        char *cookie = NULL;
        if (proxy_authz_cookie(x, f, &cookie)) {
            if (cookie && *cookie)
                PUT("Cookie: %s\r\n", cookie);
            free(cookie);
        } else if (!is_drop(m, f, upgrade)) {
            PUT("%.*s: %.*s\r\n", (int)f->name_len, f->name, (int)f->value_len, f->value);
        }
    }
    if (n < size && x->hooked && sbx_h1_get(m, "Authorization")) {
        /* the hook's traffic: its Authorization is the sandbox's (E2B's Basic user), not ours */
        const struct sbx_h1_field *f = sbx_h1_get(m, "Authorization");
        PUT("Authorization: %.*s\r\n", (int)f->value_len, f->value);
    } else if (n < size) {
        n += proxy_authz_authorization(x, m, out + n, size - n);
    }
    if (upgrade) {
        const struct sbx_h1_field *f = sbx_h1_get(m, "Upgrade");
        PUT("Connection: Upgrade\r\nUpgrade: %.*s\r\n", (int)f->value_len, f->value);
    }
    PUT("X-Forwarded-For: %s\r\nX-Forwarded-Proto: %s\r\n", c->peer, c->tls ? "https" : "http");
    if (field_str(m, "Host", fwd_host, sizeof(fwd_host)))
        PUT("X-Forwarded-Host: %s\r\n", fwd_host);
    PUT("\r\n");
#undef PUT
    free(c->up.pre);
    c->up.pre = out;
    c->up.pre_len = n < size ? n : size - 1;
    c->up.pre_off = 0;
    return 0;
}

static bool is_healthz(const struct sbx_h1_msg *m)
{
    bool get = (m->method_len == 3 && memcmp(m->method, "GET", 3) == 0) ||
               (m->method_len == 4 && memcmp(m->method, "HEAD", 4) == 0);
    return get && m->target_len >= 8 && memcmp(m->target, "/healthz", 8) == 0 &&
           (m->target_len == 8 || m->target[8] == '?');
}

/* A preview request: keys from its Host or its /s/ path, when it sends no X-Sandbox-ID. 1 when
 * it is one (*fwd the path to forward, or NULL: the same), 0 when not, <0 when answered. */
static int preview(struct proxy_conn *c, const struct sbx_h1_msg *m, struct sbx_preview *pv,
                   struct sbx_route_keys *k)
{
    const struct sbx_h1_field *host = sbx_h1_get(m, "Host");
    bool by_path = false;
    int rc = 0;

    if (host)
        rc = sbx_preview_from_host(host->value, host->value_len, c->p->o.preview_domain, pv);
    if (rc == 0)
        by_path = (rc = sbx_preview_from_path(m->target, m->target_len, pv)) == 1;
    if (rc < 0) {
        proxy_answer(c, 400,
                     "Invalid preview URL: <port>-<name>.<namespace>.<domain> or "
                     "/s/<namespace>/<name>/<port>/",
                     true);
        return rc;
    }
    if (by_path && !pv->path) { /* "/s/ns/name/port": relative links need the slash */
        const char *q = memchr(m->target, '?', m->target_len);
        size_t plen = q ? (size_t)(q - m->target) : m->target_len;
        char *loc = malloc(m->target_len + 2);
        if (loc) {
            snprintf(loc, m->target_len + 2, "%.*s/%.*s", (int)plen, m->target,
                     (int)(m->target_len - plen), q ? q : "");
            proxy_redirect(c, loc);
            free(loc);
        }
        return -EAGAIN;
    }
    if (rc == 1)
        *k = (struct sbx_route_keys){.id = pv->id, .ns = pv->ns, .port = pv->port};
    return rc;
}

/* A request whose sandbox could not be resolved: still waking up past the wake timeout (503 with
 * Retry-After), gone, or the wake refused. */
static void unresolved(struct proxy_conn *c, int rc, const char *msg)
{
    char body[600], extra[64];
    size_t n = (size_t)snprintf(body, sizeof(body), "{\"detail\": \"");

    for (; *msg && n < sizeof(body) - 8; msg++) /* the message may quote a name */
        if (*msg == '"' || *msg == '\\')
            n += (size_t)snprintf(body + n, sizeof(body) - n, "\\%c", *msg);
        else if ((unsigned char)*msg >= 0x20)
            body[n++] = *msg;
    snprintf(body + n, sizeof(body) - n, "\"}\n");
    snprintf(extra, sizeof(extra), "Retry-After: %d\r\n", SBX_RESOLVER_RETRY_AFTER_S);
    proxy_reply(c, rc == -ENOENT ? 404 : 503, rc == -ETIMEDOUT ? extra : "", body, true);
}

/* The target of a request from its X-Sandbox-* headers or its preview URL; answers the refusal
 * itself. *path is what to forward as the target (NULL: the request's own). */
static int route(struct proxy_conn *c, const struct sbx_h1_msg *m, struct sbx_target *t,
                 struct sbx_preview *pv, struct exchange *x)
{
    char id[KEY_MAX], ns[KEY_MAX], port[KEY_MAX], uid[KEY_MAX], ip[KEY_MAX];
    struct sbx_route_keys k = {
        .id = field_str(m, "X-Sandbox-ID", id, sizeof(id)),
        .ns = field_str(m, "X-Sandbox-Namespace", ns, sizeof(ns)),
        .port = field_str(m, "X-Sandbox-Port", port, sizeof(port)),
        .uid = field_str(m, "X-Sandbox-UID", uid, sizeof(uid)),
        .pod_ip = field_str(m, "X-Sandbox-Pod-IP", ip, sizeof(ip)),
    };
    struct sbx_error err = {0};
    int rc;

    memset(pv, 0, sizeof(*pv));
    t->host[0] = '\0';
    if (!k.id && (rc = proxy_hook_route(c, m, pv)) != 0) {
        if (rc < 0)
            return rc;
        k = (struct sbx_route_keys){.id = pv->id, .ns = pv->ns, .port = pv->port};
        x->hooked = true;
    }
    if (!k.id && (rc = preview(c, m, pv, &k)) < 0)
        return rc;
    if (sbx_target_parse(&k, c->p->o.default_port, &c->p->o.target, t, &err) < 0) {
        proxy_answer(c, 400, err.msg, true); /* its body unread */
        return -EINVAL;
    }
    return 0;
}

/* Where t is (resolver.h); answers a failure itself. After the request's authorization: a
 * refused one wakes nothing. May wait for a sandbox waking up: this thread is the
 * connection's alone. */
static bool resolve(struct proxy_conn *c, struct sbx_target *t)
{
    struct sbx_error err = {0};
    int rc;

    if (!c->p->o.resolver)
        return true;
    __atomic_store_n(&c->waking, true, __ATOMIC_SEQ_CST);
    rc = sbx_resolver_resolve(c->p->o.resolver, t, false, UINT64_MAX, &err);
    if (rc < 0) {
        unresolved(c, rc, err.msg); /* the connection ends with it: waking stays */
        return false;
    }
    __atomic_store_n(&c->waking, false, __ATOMIC_SEQ_CST);
    return true;
}

/* Has the upstream connection been closed (or sent something unasked) while it sat idle? */
static bool upstream_stale(int fd)
{
    struct pollfd pfd = {.fd = fd, .events = POLLIN};

    return poll(&pfd, 1, 0) != 0;
}

static int connect_upstream(struct proxy_conn *c, const struct sbx_target *t, bool *reused)
{
    struct sbx_error err = {0};
    int fd;

    *reused = false;
    if (c->ufd >= 0 && strcmp(c->host, t->host) == 0 && !upstream_stale(c->ufd)) {
        *reused = true;
        STAT_ADD(c->p, upstream_reused, 1);
        return 0;
    }
    set_ufd(c, -1);
    if ((fd = proxy_dial(c->p, t->host, &err)) < 0) {
        STAT_ADD(c->p, errors_dial, 1);
        log_info("router: %s/%s: %s", t->ns, t->id, err.msg);
        return fd;
    }
    set_ufd(c, fd);
    snprintf(c->host, sizeof(c->host), "%s", t->host);
    return 0;
}

/* Relays the request built in up.pre to t's upstream, and answers a failure before any of the
 * response reached the client. 0 when the exchange ended well. */
static int relay(struct proxy_conn *c, const struct sbx_target *t, struct exchange *x)
{
    char detail[160];
    int rc;

    for (int attempt = 0;; attempt++) {
        if ((rc = connect_upstream(c, t, &x->reused)) < 0) {
            /* A cached address that proved dead is evicted: the caller resolves once more. */
            if (c->p->o.resolver && !x->rerouted && attempt == 0 &&
                sbx_resolver_dial_failed(c->p->o.resolver, t, rc))
                return -EAGAIN;
            snprintf(detail, sizeof(detail), "Could not connect to the backend sandbox: %s", t->id);
            proxy_answer(c, 502, detail, true);
            return rc;
        }
        rc = proxy_exchange(c, x);
        if (rc != -ECONNRESET || !x->reused || x->resp_bytes || x->req.kind != SBX_H1_BODY_NONE ||
            attempt > 0)
            break;
        set_ufd(c, -1); /* closed while it sat idle: once more on a new connection */
        c->up.pre_off = 0;
    }
    if (rc == -EBADMSG) {
        proxy_answer(c, 400, "Malformed chunked request body.", true);
    } else if (rc == -ETIMEDOUT) {
        STAT_ADD(c->p, errors_timeout, 1);
        snprintf(detail, sizeof(detail), "Timed out waiting for the backend sandbox: %s", t->id);
        proxy_answer(c, 504, detail, true);
    } else if (rc < 0) {
        STAT_ADD(c->p, errors_eof, 1);
        snprintf(detail, sizeof(detail), "The backend sandbox %s closed the connection", t->id);
        proxy_answer(c, 502, detail, true);
    }
    return rc;
}

/* Reads what the exchange needs of the request; false when it was refused (and answered). */
static bool prepare(struct proxy_conn *c, const struct sbx_h1_msg *m, struct sbx_target *t,
                    struct exchange *x, size_t head_len)
{
    struct sbx_preview pv;

    if (route(c, m, t, &pv, x) < 0)
        return false;
    if (sbx_h1_request_body(m, &x->req) < 0) {
        proxy_answer(c, 400, "Invalid Content-Length.", true);
        return false;
    }
    if (c->p->o.max_request_body && x->req.kind == SBX_H1_BODY_LENGTH &&
        x->req.left > c->p->o.max_request_body) {
        proxy_answer(c, 413, "Request body too large.", true);
        return false;
    }
    x->upgrade = sbx_h1_has_token(m, "Connection", "upgrade") && sbx_h1_get(m, "Upgrade");
    x->head_request = m->method_len == 4 && memcmp(m->method, "HEAD", 4) == 0;
    x->head_wait_ms = head_wait(m, &c->p->o);
    x->req_done = x->req.kind == SBX_H1_BODY_NONE;
    if ((c->p->o.authz && !proxy_authorize(c, m, t, &pv, x)) || !resolve(c, t))
        return false;
    return build_request(c, m, t->host, &pv, x, head_len) == 0;
}

/* "METHOD /path" of a request for the access log (no query: it may carry a token). */
static void request_line(const struct sbx_h1_msg *m, char *out, size_t size)
{
    size_t path = m->target_len;

    for (size_t i = 0; i < m->target_len; i++)
        if (m->target[i] == '?') {
            path = i;
            break;
        }
    snprintf(out, size, "%.*s %.*s", (int)(m->method_len > 16 ? 16 : m->method_len), m->method,
             (int)(path > 200 ? 200 : path), m->target);
}

/* One request: returns true when the connection may serve another. */
static bool serve_one(struct proxy_conn *c, size_t head_len)
{
    _cleanup_free_ struct sbx_h1_msg *m = malloc(sizeof(*m));
    struct sbx_http_verdict v = {0};
    struct sbx_target t;
    struct exchange x = {0};
    uint64_t start = sbx_now_ms();
    char line[240];
    int rc;

    if (!m)
        return false;
    if (!sbx_h1_parse_request(c->up.buf, head_len, m, &v)) {
        proxy_answer(c, v.status, v.message, true);
        return false;
    }
    x.client_http10 = m->minor == 0;
    x.close_after = x.client_http10 || sbx_h1_has_token(m, "Connection", "close");
    if (is_healthz(m)) {
        rc = sbx_h1_request_body(m, &x.req) == 0 && x.req.kind == SBX_H1_BODY_NONE
                 ? proxy_reply(c, 200, "", "{\"status\":\"ok\"}", x.close_after)
                 : -EINVAL;
        c->up.woff = c->up.wend = head_len;
        return rc == 0 && !x.close_after;
    }
    if (c->p->o.hook && c->p->o.hook->wants(c->p->o.hook->arg, m))
        return proxy_hook_serve(c, m, head_len, x.close_after);
    if (!prepare(c, m, &t, &x, head_len)) {
        proxy_authz_done(&x);
        return false;
    }
    request_line(m, line, sizeof(line)); /* m points into the buffer the exchange reuses */
    c->up.woff = c->up.wend = head_len;
    STAT_ADD(c->p, inflight, 1);
    rc = relay(c, &t, &x);
    if (rc == -EAGAIN) { /* nothing was sent, and m's bytes are still there: once more */
        proxy_authz_done(&x);
        x.rerouted = true;
        rc = prepare(c, m, &t, &x, head_len) ? relay(c, &t, &x) : -EINVAL;
    }
    proxy_authz_done(&x);
    STAT_SUB(c->p, inflight, 1);
    if (x.resp_state == EX_TUNNEL)
        STAT_SUB(c->p, tunnels_open, 1);
    if (rc != 0 || !x.keep_upstream)
        set_ufd(c, -1);
    if (c->p->o.access_log)
        log_info("access: %s \"%s\" %s/%s:%d %d %llums%s", c->peer, line, t.ns, t.id, t.port,
                 x.resp_state == EX_TUNNEL ? 101 : x.status,
                 (unsigned long long)(sbx_now_ms() - start), x.reused ? " reused" : "");
    return rc == 0 && !x.close_after && !__atomic_load_n(&c->p->stopping, __ATOMIC_ACQUIRE);
}

/* Closes as RFC 9112 §9.6 asks: our side first, then what the client still sends is read (for
 * at most a second and 1 MiB), so a last answer is not lost to a reset for unread bytes. */
static void linger_close(struct proxy_conn *c)
{
    uint64_t deadline = sbx_now_ms() + 1000;
    size_t drained = 0;

    shutdown(c->cfd, SHUT_WR);
    while (drained < (1 << 20)) {
        struct pollfd pfd = {.fd = c->cfd, .events = POLLIN};
        uint64_t now = sbx_now_ms();
        ssize_t n;
        if (now >= deadline || poll(&pfd, 1, (int)(deadline - now)) <= 0)
            return;
        if ((n = recv(c->cfd, c->up.buf, PROXY_BUF, 0)) <= 0)
            return;
        drained += (size_t)n;
    }
}

void proxy_conn_serve(struct proxy_conn *c)
{
    for (;;) {
        long head = read_head(c);
        if (head == -E2BIG)
            proxy_answer(c, 431, "Request header fields too large.", true);
        else if (head == -ETIMEDOUT)
            proxy_answer(c, 408, "Request head not received in time.", true);
        if (head <= 0 || !serve_one(c, (size_t)head))
            break;
    }
    set_ufd(c, -1);
    linger_close(c);
}
