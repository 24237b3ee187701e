#define _GNU_SOURCE
#include "target.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "parse.h"

bool sbx_dns_label_valid(const char *s)
{
    size_t n = s ? strlen(s) : 0;

    if (n == 0 || n > 63)
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))
            continue;
        if (c != '-' || i == 0 || i == n - 1)
            return false;
    }
    return true;
}

static bool v4_allowed(const unsigned char *a, bool allow_loopback)
{
    if (a[0] == 0 && a[1] == 0 && a[2] == 0 && a[3] == 0)
        return false; /* unspecified */
    if (a[0] == 169 && a[1] == 254)
        return false; /* link-local, cloud metadata among it */
    if (a[0] >= 224 && a[0] <= 239)
        return false; /* multicast */
    if (a[0] == 127)
        return allow_loopback;
    return true;
}

bool sbx_pod_ip_valid(const char *s, bool allow_loopback)
{
    unsigned char a[16];
    static const unsigned char v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    static const unsigned char zero[16], one[16] = {[15] = 1};

    if (!s || !*s)
        return false;
    if (inet_pton(AF_INET, s, a) == 1)
        return v4_allowed(a, allow_loopback);
    if (inet_pton(AF_INET6, s, a) != 1)
        return false;
    if (memcmp(a, v4mapped, 12) == 0)
        return v4_allowed(a + 12, allow_loopback);
    if (memcmp(a, zero, 16) == 0)
        return false; /* :: */
    if (a[0] == 0xfe && (a[1] & 0xc0) == 0x80)
        return false; /* fe80::/10 */
    if (a[0] == 0xff)
        return false; /* multicast */
    if (memcmp(a, one, 16) == 0)
        return allow_loopback;
    return true;
}

int sbx_target_parse(const struct sbx_route_keys *k, int default_port,
                     const struct sbx_target_opts *o, struct sbx_target *t, struct sbx_error *err)
{
    const char *ns = k->ns && *k->ns ? k->ns : "default";
    long long port = default_port;

    memset(t, 0, sizeof(*t));
    if (!k->id || !*k->id)
        return sbx_error_set(err, EINVAL, "X-Sandbox-ID header is required.");
    if (!sbx_dns_label_valid(k->id))
        return sbx_error_set(err, EINVAL, "Invalid sandbox ID format.");
    if (!sbx_dns_label_valid(ns))
        return sbx_error_set(err, EINVAL, "Invalid namespace format.");
    if (k->port && *k->port && sbx_parse_int(k->port, 1, 65535, &port) < 0)
        return sbx_error_set(err, EINVAL, "Invalid port format.");
    if (k->pod_ip && *k->pod_ip && !sbx_pod_ip_valid(k->pod_ip, o->allow_loopback_pod_ip))
        return sbx_error_set(err, EINVAL, "Invalid target IP address.");
    if (k->uid && strlen(k->uid) >= sizeof(t->uid))
        return sbx_error_set(err, EINVAL, "Invalid sandbox UID format.");
    snprintf(t->id, sizeof(t->id), "%s", k->id);
    snprintf(t->ns, sizeof(t->ns), "%s", ns);
    snprintf(t->uid, sizeof(t->uid), "%s", k->uid ? k->uid : "");
    t->port = (int)port;
    t->port_defaulted = !(k->port && *k->port);
    if (k->pod_ip && *k->pod_ip) {
        snprintf(t->pod_ip, sizeof(t->pod_ip), "%s", k->pod_ip);
        snprintf(t->host, sizeof(t->host), strchr(k->pod_ip, ':') ? "[%s]:%d" : "%s:%d", k->pod_ip,
                 t->port);
    } else {
        snprintf(t->host, sizeof(t->host), "%s.%s.svc.%s:%d", t->id, t->ns,
                 o->cluster_domain ? o->cluster_domain : "cluster.local", t->port);
    }
    return 0;
}
