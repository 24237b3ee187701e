/* target: the routing keys checked as the reference router checks them, and the upstream they
 * name. */
#include <string.h>

#include "tap.h"
#include "target.h"

static const char *refused(const char *id, const char *ns, const char *port, const char *ip,
                           bool loopback)
{
    static struct sbx_error e;
    struct sbx_route_keys k = {.id = id, .ns = ns, .port = port, .pod_ip = ip};
    struct sbx_target_opts o = {.allow_loopback_pod_ip = loopback, .cluster_domain = "c.local"};
    struct sbx_target t;

    e = (struct sbx_error){0};
    return sbx_target_parse(&k, 9090, &o, &t, &e) < 0 ? e.msg : NULL;
}

static const char *host(const char *id, const char *ns, const char *port, const char *ip)
{
    static struct sbx_target t;
    struct sbx_route_keys k = {.id = id, .ns = ns, .port = port, .pod_ip = ip};
    struct sbx_target_opts o = {.cluster_domain = "c.local"};
    static struct sbx_error e;

    return sbx_target_parse(&k, 9090, &o, &t, &e) < 0 ? e.msg : t.host;
}

int main(void)
{
    struct {
        const char *id, *ns, *port, *ip;
        bool loopback;
        const char *why;
    } bad[] = {
        {NULL, NULL, NULL, NULL, false, "X-Sandbox-ID header is required."},
        {"", NULL, NULL, NULL, false, "X-Sandbox-ID header is required."},
        {"Upper", NULL, NULL, NULL, false, "Invalid sandbox ID format."},
        {"a.b", NULL, NULL, NULL, false, "Invalid sandbox ID format."},
        {"-a", NULL, NULL, NULL, false, "Invalid sandbox ID format."},
        {"a-", NULL, NULL, NULL, false, "Invalid sandbox ID format."},
        {"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", NULL, NULL, NULL,
         false, "Invalid sandbox ID format."},
        {"a", "../x", NULL, NULL, false, "Invalid namespace format."},
        {"a", NULL, "0", NULL, false, "Invalid port format."},
        {"a", NULL, "65536", NULL, false, "Invalid port format."},
        {"a", NULL, "8o", NULL, false, "Invalid port format."},
        {"a", NULL, NULL, "10.0.0", false, "Invalid target IP address."},
        {"a", NULL, NULL, "127.0.0.1", false, "Invalid target IP address."},
        {"a", NULL, NULL, "::1", false, "Invalid target IP address."},
        {"a", NULL, NULL, "169.254.169.254", true, "Invalid target IP address."},
        {"a", NULL, NULL, "0.0.0.0", true, "Invalid target IP address."},
        {"a", NULL, NULL, "::", true, "Invalid target IP address."},
        {"a", NULL, NULL, "fe80::1", true, "Invalid target IP address."},
        {"a", NULL, NULL, "224.0.0.1", true, "Invalid target IP address."},
        {"a", NULL, NULL, "ff02::1", true, "Invalid target IP address."},
        {"a", NULL, NULL, "::ffff:169.254.169.254", true, "Invalid target IP address."},
        {"a", NULL, NULL, "::ffff:127.0.0.1", false, "Invalid target IP address."},
    };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *got = refused(bad[i].id, bad[i].ns, bad[i].port, bad[i].ip, bad[i].loopback);
        ok(got && strcmp(got, bad[i].why) == 0, "refused %s/%s/%s/%s: %s", bad[i].id, bad[i].ns,
           bad[i].port, bad[i].ip, got ? got : "(accepted)");
    }
    ok(!refused("a", NULL, NULL, "127.0.0.1", true), "loopback when allowed");
    ok(!refused("a", NULL, NULL, "::1", true), "IPv6 loopback when allowed");
    ok(strcmp(host("sb-1", NULL, NULL, NULL), "sb-1.default.svc.c.local:9090") == 0,
       "DNS form, default namespace and port: %s", host("sb-1", NULL, NULL, NULL));
    ok(strcmp(host("sb", "team-a", "8888", NULL), "sb.team-a.svc.c.local:8888") == 0,
       "DNS form with namespace and port");
    ok(strcmp(host("sb", NULL, "9090", "10.1.2.3"), "10.1.2.3:9090") == 0, "pod IP");
    ok(strcmp(host("sb", NULL, "9090", "fd00::5"), "[fd00::5]:9090") == 0, "IPv6 pod IP");
    return done_testing();
}
