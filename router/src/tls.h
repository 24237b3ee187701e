/* The router's HTTPS port: TLS on OpenSSL in front of the same gRPC relay and HTTP/1.1 proxy as
 * the plaintext port. Each connection gets a thread that does the handshake (ALPN picks h2 for
 * gRPC, http/1.1 otherwise), then carries the plaintext to and from a socket pair whose other
 * end goes to the relay or the proxy, which never know TLS was there. The certificate and key
 * are read again when their files change (a new connection looks at most once a second), so a
 * renewed certificate needs no restart; a client certificate may be asked for or required. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "error.h"

enum sbx_mtls { SBX_MTLS_OFF, SBX_MTLS_OPTIONAL, SBX_MTLS_REQUIRED };

struct sbx_tls_opts {
    const char *cert_file, *key_file; /* PEM: the chain, then the key */
    const char *client_ca_file;       /* PEM CAs for client certificates (mTLS) */
    enum sbx_mtls mtls;
    uint64_t handshake_timeout_ms;
    unsigned max_connections;
    /* Where the plaintext goes (the fd is theirs); peer is the TLS client's address. */
    void (*h2)(void *arg, int fd);
    void (*h1)(void *arg, int fd, const struct sockaddr *peer, socklen_t len);
    void *arg;
};

struct sbx_tls;

/* Loads the certificate and key (and CAs); a file that does not load is an error here. */
int sbx_tls_new(struct sbx_tls **ret, const struct sbx_tls_opts *o, struct sbx_error *err);

/* Serves an accepted connection (fd taken) on a thread of its own. */
void sbx_tls_add(struct sbx_tls *t, int fd, const struct sockaddr *peer, socklen_t len);

struct sbx_tls_stats {
    uint64_t connections, open, handshake_failures, reloads_ok, reloads_failed;
};
void sbx_tls_stats(struct sbx_tls *t, struct sbx_tls_stats *s);

/* Cuts the connections still open and waits for their threads; frees. Accepts NULL. */
void sbx_tls_free(struct sbx_tls *t);
