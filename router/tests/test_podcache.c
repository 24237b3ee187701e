/* podcache and resolver: a Pod read as the reference router reads it (its Sandbox's UID from the
 * controller ownerReference, Ready with an IP, the warm-pool label), sandboxd's named ports, the
 * projection keeping what is read, the UID map and name index (unclaimed pods by UID only, a name
 * dropped only while it names the entry, eviction by name only while the address is the failed
 * one); the resolver's order and default ports with its cache off. */
#include <errno.h>
#include <string.h>

#include "podcache.h"
#include "resolver.h"
#include "tap.h"

static json_t *pod(const char *name, const char *uid, const char *ip, bool ready, bool pool)
{
    json_t *p = json_pack("{s:{s:s, s:s, s:s, s:{s:s}, s:[{s:s, s:s, s:s, s:s, s:b}]},"
                          " s:{s:[{s:s, s:[{s:s, s:i}, {s:s, s:i}]}, {s:s, s:[{s:s, s:i}]}]},"
                          " s:{s:s, s:[{s:s, s:s}, {s:s, s:s}]}}",
                          "metadata", "name", name, "namespace", "ns", "uid", "pod-uid", "labels",
                          "agents.x-k8s.io/sandbox-name-hash", "0", "ownerReferences", "apiVersion",
                          "agents.x-k8s.io/v1beta1", "kind", "Sandbox", "name", name, "uid", uid,
                          "controller", 1, "spec", "containers", "name", "main", "ports", "name",
                          "sandboxd-grpc", "containerPort", 19090, "name", "web", "containerPort",
                          3000, "name", "side", "ports", "name", "sandboxd-http", "containerPort",
                          18080, "status", "podIP", ip, "conditions", "type", "Initialized",
                          "status", "True", "type", "Ready", "status", ready ? "True" : "False");

    if (pool)
        json_object_set_new(json_object_get(json_object_get(p, "metadata"), "labels"),
                            SBX_POD_LABEL_POOL, json_string("p"));
    return p;
}

static void reading(void)
{
    struct sbx_pod_entry e;
    json_t *p = pod("sb", "u1", "10.0.0.5", true, false), *ref;

    ok(sbx_pod_entry_from(p, &e) == SBX_POD_ROUTABLE, "a Ready sandbox pod with an IP routes");
    ok(!strcmp(e.uid, "u1") && !strcmp(e.ns, "ns") && !strcmp(e.name, "sb") &&
           !strcmp(e.ip, "10.0.0.5") && !e.unclaimed,
       "keyed by the Sandbox's UID, not the Pod's");
    ok(e.grpc_port == 19090 && e.http_port == 18080, "sandboxd's ports by name, in any container");
    sbx_pod_project(p);
    ok(sbx_pod_entry_from(p, &e) == SBX_POD_ROUTABLE && e.grpc_port == 19090 &&
           e.http_port == 18080 && !strcmp(e.ip, "10.0.0.5"),
       "the projection keeps what is read");
    ok(json_object_size(p) == 2 && json_object_size(json_object_get(p, "metadata")) == 2,
       "projected: its metadata's names (and version, which this one has not), the summary");
    sbx_pod_project(p);
    ok(sbx_pod_entry_from(p, &e) == SBX_POD_ROUTABLE && !strcmp(e.uid, "u1") &&
           !strcmp(e.name, "sb") && !strcmp(e.ns, "ns"),
       "projecting twice changes nothing");
    json_decref(p);

    p = pod("sb", "u1", "10.0.0.5", false, false);
    ok(sbx_pod_entry_from(p, &e) == SBX_POD_UNROUTABLE && !strcmp(e.uid, "u1"),
       "not Ready: its sandbox's, unroutable");
    json_decref(p);
    p = pod("sb", "u1", "", true, false);
    ok(sbx_pod_entry_from(p, &e) == SBX_POD_UNROUTABLE, "no IP: unroutable");
    sbx_pod_project(p);
    ok(sbx_pod_entry_from(p, &e) == SBX_POD_UNROUTABLE && !strcmp(e.uid, "u1") && !*e.ip,
       "unroutable, projected: still its sandbox's (a deletion finds the entry)");
    json_decref(p);
    p = pod("sb", "u1", "10.0.0.5", true, true);
    ok(sbx_pod_entry_from(p, &e) == SBX_POD_ROUTABLE && e.unclaimed, "the warm-pool label read");
    sbx_pod_project(p);
    ok(sbx_pod_entry_from(p, &e) == SBX_POD_ROUTABLE && e.unclaimed, "and kept by the projection");
    json_decref(p);

    p = pod("sb", "u1", "10.0.0.5", true, false);
    ref = json_array_get(json_object_get(json_object_get(p, "metadata"), "ownerReferences"), 0);
    json_object_set_new(ref, "apiVersion", json_string("agents.x-k8s.io.evil/v1"));
    ok(sbx_pod_entry_from(p, &e) == SBX_POD_OTHER, "another group's Sandbox: not ours");
    json_object_set_new(ref, "apiVersion", json_string("agents.x-k8s.io"));
    ok(sbx_pod_entry_from(p, &e) == SBX_POD_ROUTABLE, "a versionless group matches");
    json_object_set_new(ref, "controller", json_false());
    ok(sbx_pod_entry_from(p, &e) == SBX_POD_OTHER, "an owner that is not the controller: not ours");
    sbx_pod_project(p);
    ok(sbx_pod_entry_from(p, &e) == SBX_POD_OTHER, "not ours, projected: not ours");
    json_decref(p);
}

static struct sbx_pod_entry entry(const char *uid, const char *name, const char *ip, bool unclaimed)
{
    struct sbx_pod_entry e = {.grpc_port = 1, .http_port = 2, .unclaimed = unclaimed};

    strcpy(e.uid, uid);
    strcpy(e.ns, "ns");
    strcpy(e.name, name);
    strcpy(e.ip, ip);
    return e;
}

static void table(void)
{
    struct sbx_podcache *pc = sbx_podcache_new();
    struct sbx_pod_entry a = entry("ua", "sb", "10.0.0.1", false), got;
    struct sbx_pod_entry w = entry("uw", "warm", "10.0.0.9", true);
    json_t *p;

    sbx_podcache_upsert(pc, &a);
    sbx_podcache_upsert(pc, &w);
    ok(sbx_podcache_get(pc, "ua", &got) && !strcmp(got.ip, "10.0.0.1"), "by UID");
    ok(sbx_podcache_get_by_name(pc, "ns", "sb", &got) && !strcmp(got.uid, "ua"), "by name");
    ok(sbx_podcache_get(pc, "uw", &got) && !sbx_podcache_get_by_name(pc, "ns", "warm", &got),
       "an unclaimed pod by UID only");
    w.unclaimed = false;
    sbx_podcache_upsert(pc, &w);
    ok(sbx_podcache_get_by_name(pc, "ns", "warm", &got), "claimed: by name too");

    /* The sandbox recreated under its name: a new UID takes the name; the old one's removal
     * leaves it alone. */
    struct sbx_pod_entry b = entry("ub", "sb", "10.0.0.2", false);
    sbx_podcache_upsert(pc, &b);
    ok(sbx_podcache_remove(pc, "ua"), "the old UID removed");
    ok(sbx_podcache_get_by_name(pc, "ns", "sb", &got) && !strcmp(got.uid, "ub"),
       "the name still names the new one");

    ok(!sbx_podcache_invalidate_by_name(pc, "ns", "sb", "10.0.0.1"),
       "eviction by name with another address: kept (a fresh entry)");
    ok(sbx_podcache_invalidate_by_name(pc, "ns", "sb", "10.0.0.2") &&
           !sbx_podcache_get(pc, "ub", &got) && sbx_podcache_len(pc) == 1,
       "eviction by name with its address");

    p = pod("sb", "uc", "10.0.0.3", true, false);
    sbx_podcache_apply(pc, SBX_EVENT_ADDED, p);
    ok(sbx_podcache_get_by_name(pc, "ns", "sb", &got) && got.grpc_port == 19090, "an ADDED pod");
    json_decref(p);
    p = pod("sb", "uc", "10.0.0.3", false, false);
    sbx_podcache_apply(pc, SBX_EVENT_MODIFIED, p);
    ok(!sbx_podcache_get(pc, "uc", &got), "a pod no longer Ready leaves");
    json_decref(p);
    p = pod("sb", "uc", "10.0.0.3", true, false);
    sbx_podcache_apply(pc, SBX_EVENT_MODIFIED, p);
    sbx_podcache_apply(pc, SBX_EVENT_DELETED, p);
    ok(!sbx_podcache_get(pc, "uc", &got) && !sbx_podcache_get_by_name(pc, "ns", "sb", &got),
       "a DELETED pod leaves");
    json_decref(p);
    sbx_podcache_free(pc);
}

static const char *resolve(struct sbx_resolver *r, const char *pod_ip, int port, bool grpc)
{
    static struct sbx_target t;
    static struct sbx_error e;

    memset(&t, 0, sizeof(t));
    e = (struct sbx_error){0};
    strcpy(t.id, "sb");
    strcpy(t.ns, "team");
    strcpy(t.uid, "u1");
    strcpy(t.pod_ip, pod_ip);
    t.port = port ? port : 1;
    t.port_defaulted = port == 0;
    return sbx_resolver_resolve(r, &t, grpc, 0, &e) < 0 ? e.msg : t.host;
}

static void without_cache(void)
{
    struct sbx_resolver_opts o = {.cluster_domain = "c.local"};
    struct sbx_resolver *r = NULL;
    struct sbx_error e = {0};
    struct sbx_target t = {.host = "10.0.0.1:9090", .id = "sb", .ns = "team"};
    char *m;

    ok(sbx_resolver_new(&r, &o, &e) == 0, "a resolver without its cache needs no Kubernetes");
    ok(sbx_resolver_ready(r), "and is ready at once");
    ok(!strcmp(resolve(r, "10.1.2.3", 0, true), "10.1.2.3:9090"), "pod IP, gRPC's default port");
    ok(!strcmp(resolve(r, "10.1.2.3", 0, false), "10.1.2.3:8080"), "pod IP, HTTP's default port");
    ok(!strcmp(resolve(r, "fd00::1", 7, false), "[fd00::1]:7"), "an IPv6 pod IP, the key's port");
    ok(!strcmp(resolve(r, "", 0, true), "sb.team.svc.c.local:9090"), "else the DNS form");
    ok(!sbx_resolver_dial_failed(r, &t, -ETIMEDOUT), "no cache: nothing to evict");
    m = sbx_resolver_metrics(r);
    ok(m && strstr(m, "sandbox_router_resolutions_total{source=\"pod-ip\"} 3\n") &&
           strstr(m, "sandbox_router_resolutions_total{source=\"dns\"} 1\n") &&
           strstr(m, "sandbox_router_cache_synced -1\n"),
       "resolutions counted by source; the cache off");
    free(m);
    sbx_resolver_free(r);
    o.cache_namespace = "Team_A";
    ok(sbx_resolver_new(&r, &o, &e) < 0 && strstr(e.msg, "--cache-namespace"),
       "a namespace no namespace can be: refused, saying why (%s)", e.msg);
}

int main(void)
{
    reading();
    table();
    without_cache();
    return done_testing();
}
