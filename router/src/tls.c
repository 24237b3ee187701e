#define _GNU_SOURCE
#include "tls.h"

#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "tls_internal.h"

/* A file's identity and version: a change in any means it was replaced or rewritten. */
static void stamp(const char *path, struct file_stamp *s)
{
    struct stat st;

    memset(s, 0, sizeof(*s));
    if (path && stat(path, &st) == 0)
        *s = (struct file_stamp){st.st_dev, st.st_ino, st.st_size, st.st_mtim};
}

static bool stamp_eq(const struct file_stamp *a, const struct file_stamp *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
           a->mtime.tv_sec == b->mtime.tv_sec && a->mtime.tv_nsec == b->mtime.tv_nsec;
}

/* ALPN: http/1.1 whenever the client offers it (browsers and curl offer h2 too, but their
 * requests are for the HTTP/1.1 proxy); h2 when it is all a client offers (gRPC's). */
static int select_alpn(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                       const unsigned char *in, unsigned int inlen, void *arg)
{
    bool h2 = false;

    (void)ssl;
    (void)arg;
    for (unsigned i = 0; i < inlen && i + 1 + in[i] <= inlen; i += 1u + in[i]) {
        if (in[i] == 8 && memcmp(in + i + 1, "http/1.1", 8) == 0) {
            *out = in + i + 1;
            *outlen = 8;
            return SSL_TLSEXT_ERR_OK;
        }
        if (in[i] == 2 && memcmp(in + i + 1, "h2", 2) == 0) {
            *out = in + i + 1;
            *outlen = 2;
            h2 = true;
        }
    }
    return h2 ? SSL_TLSEXT_ERR_OK : SSL_TLSEXT_ERR_NOACK; /* none: HTTP/1.1 without ALPN */
}

static SSL_CTX *load(const struct sbx_tls_opts *o, struct sbx_error *err)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    char why[256] = "";

    if (!ctx) {
        sbx_error_set(err, ENOMEM, "TLS: no context");
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_alpn_select_cb(ctx, select_alpn, NULL);
    if (SSL_CTX_use_certificate_chain_file(ctx, o->cert_file) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, o->key_file, SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx) != 1 ||
        (o->mtls != SBX_MTLS_OFF &&
         SSL_CTX_load_verify_locations(ctx, o->client_ca_file, NULL) != 1)) {
        ERR_error_string_n(ERR_get_error(), why, sizeof(why));
        ERR_clear_error();
        SSL_CTX_free(ctx);
        sbx_error_set(err, EINVAL, "TLS: load %s and %s%s%s: %s", o->cert_file, o->key_file,
                      o->mtls != SBX_MTLS_OFF ? " and " : "",
                      o->mtls != SBX_MTLS_OFF ? o->client_ca_file : "", why);
        return NULL;
    }
    if (o->mtls != SBX_MTLS_OFF)
        SSL_CTX_set_verify(ctx,
                           SSL_VERIFY_PEER |
                               (o->mtls == SBX_MTLS_REQUIRED ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0),
                           NULL);
    return ctx;
}

int sbx_tls_new(struct sbx_tls **ret, const struct sbx_tls_opts *o, struct sbx_error *err)
{
    struct sbx_tls *t;

    if (!o->cert_file || !*o->cert_file || !o->key_file || !*o->key_file)
        return sbx_error_set(err, EINVAL, "TLS needs --tls-cert-file and --tls-key-file");
    if (o->mtls != SBX_MTLS_OFF && (!o->client_ca_file || !*o->client_ca_file))
        return sbx_error_set(err, EINVAL, "--mtls-mode needs --tls-client-ca-file");
    if (!(t = calloc(1, sizeof(*t))))
        return sbx_error_set(err, ENOMEM, "allocate TLS");
    t->o = *o;
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->gone, NULL);
    stamp(o->cert_file, &t->cert);
    stamp(o->key_file, &t->key);
    if (!(t->ctx = load(o, err))) {
        sbx_tls_free(t);
        return -EINVAL;
    }
    *ret = t;
    return 0;
}

SSL_CTX *tls_context(struct sbx_tls *t)
{
    struct file_stamp cert, key;
    struct sbx_error err = {0};
    SSL_CTX *ctx;

    pthread_mutex_lock(&t->lock);
    if (sbx_now_ms() - t->checked_ms >= 1000) {
        t->checked_ms = sbx_now_ms();
        stamp(t->o.cert_file, &cert);
        stamp(t->o.key_file, &key);
        if (!stamp_eq(&cert, &t->cert) || !stamp_eq(&key, &t->key)) {
            if ((ctx = load(&t->o, &err))) {
                SSL_CTX_free(t->ctx);
                t->ctx = ctx;
                t->stats.reloads_ok++;
                log_info("router: TLS certificate reloaded from %s", t->o.cert_file);
            } else {
                t->stats.reloads_failed++;
                log_warn(0, "router: %s (the previous certificate stays)", err.msg);
            }
            t->cert = cert; /* a half-written pair is tried again when it changes again */
            t->key = key;
        }
    }
    ctx = t->ctx;
    SSL_CTX_up_ref(ctx);
    pthread_mutex_unlock(&t->lock);
    return ctx;
}

void sbx_tls_stats(struct sbx_tls *t, struct sbx_tls_stats *s)
{
    pthread_mutex_lock(&t->lock);
    *s = t->stats;
    s->open = t->nconns;
    pthread_mutex_unlock(&t->lock);
}

void sbx_tls_free(struct sbx_tls *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->lock);
    t->stopping = true;
    for (struct tls_conn *c = t->conns; c; c = c->next)
        shutdown(c->fd, SHUT_RDWR);
    while (t->nconns > 0)
        pthread_cond_wait(&t->gone, &t->lock);
    pthread_mutex_unlock(&t->lock);
    SSL_CTX_free(t->ctx);
    pthread_mutex_destroy(&t->lock);
    pthread_cond_destroy(&t->gone);
    free(t);
}
