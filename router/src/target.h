/* Where a request goes: the routing keys a client sends (HTTP headers X-Sandbox-ID,
 * -Namespace, -Port, -UID, -Pod-IP, or the same names as gRPC metadata), validated as the
 * reference router validates them, and the upstream address they name. Knows no wire. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "error.h"

#define SBX_TARGET_HOST_MAX 256

/* The routing keys as received (NULL: absent). */
struct sbx_route_keys {
    const char *id, *ns, *port, *uid, *pod_ip;
};

struct sbx_target {
    char id[64], ns[64], uid[64];
    int port;                       /* the key's, else the caller's default */
    bool port_defaulted;            /* no port key: a resolver may pick the Pod's named port */
    char pod_ip[48];                /* "" when not given */
    char host[SBX_TARGET_HOST_MAX]; /* "ip:port", "[ip6]:port" or "<id>.<ns>.svc.<domain>:port" */
};

struct sbx_target_opts {
    bool allow_loopback_pod_ip;
    const char *cluster_domain; /* for the DNS form */
};

/* Checks the keys: a refusal is -EINVAL with the reference's detail as the message ("X-Sandbox-ID
 * header is required.", "Invalid sandbox ID format.", "Invalid namespace format.", "Invalid port
 * format.", "Invalid target IP address."). default_port fills an absent port. */
int sbx_target_parse(const struct sbx_route_keys *k, int default_port,
                     const struct sbx_target_opts *o, struct sbx_target *t, struct sbx_error *err);

/* A DNS-1123 label: [a-z0-9]([-a-z0-9]*[a-z0-9])?, at most 63. */
bool sbx_dns_label_valid(const char *s);

/* An IP literal of a class a pod may have: not unspecified, link-local, multicast, nor (unless
 * allowed) loopback. */
bool sbx_pod_ip_valid(const char *s, bool allow_loopback);
