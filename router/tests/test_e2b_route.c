/* e2b_route: E2B's sandbox IDs, sandbox hosts, API routes and query parameters. */
#include <errno.h>
#include <string.h>

#include "e2b_route.h"
#include "tap.h"

static int host(const char *h, char id[64], char port[8])
{
    return sbx_e2b_from_host(h, strlen(h), "e2b.example.com", id, port);
}

static enum sbx_e2b_op op(const char *method, const char *target, struct sbx_e2b_req *r)
{
    sbx_e2b_parse(method, strlen(method), target, strlen(target), r);
    return r->op;
}

static bool query(const char *q, const char *name, const char *want)
{
    char out[64];

    if (!sbx_e2b_query(q, strlen(q), name, out, sizeof(out)))
        return want == NULL;
    return want && strcmp(out, want) == 0;
}

int main(void)
{
    struct sbx_e2b_req r;
    char id[64], port[8];

    ok(sbx_e2b_id_valid("abc123", 6) && !sbx_e2b_id_valid("Abc", 3) &&
           !sbx_e2b_id_valid("a-b", 3) && !sbx_e2b_id_valid("", 0),
       "IDs: [a-z0-9]+ only");
    {
        char longid[70];
        memset(longid, 'a', sizeof(longid));
        ok(sbx_e2b_id_valid(longid, 63) && !sbx_e2b_id_valid(longid, 64),
           "IDs: one DNS label at most");
    }

    ok(host("49983-abc123.e2b.example.com", id, port) == 1 && !strcmp(id, "abc123") &&
           !strcmp(port, "49983"),
       "host: port and ID");
    ok(host("8080-x1.E2B.example.com:443", id, port) == 1 && !strcmp(port, "8080"),
       "host: a port after it, the domain in any case");
    ok(host("api.e2b.example.com", id, port) == -EINVAL, "the API host is no sandbox host");
    ok(host("49983-ab-c.e2b.example.com", id, port) == -EINVAL, "a dash in the ID: refused");
    ok(host("49983-abc.team.e2b.example.com", id, port) == -EINVAL, "a label more: refused");
    ok(host("x-abc.e2b.example.com", id, port) == -EINVAL, "a port not a number: refused");
    ok(host("123456-abc.e2b.example.com", id, port) == -EINVAL, "a port too long: refused");
    ok(host("49983-abc.other.com", id, port) == 0, "another domain: not ours");
    ok(sbx_e2b_from_host("1-a.x", 5, "", id, port) == 0, "no domain: no hosts");

    ok(op("POST", "/sandboxes", &r) == SBX_E2B_CREATE &&
           op("POST", "/v2/sandboxes", &r) == SBX_E2B_CREATE,
       "create, v1 and v2");
    ok(op("GET", "/v2/sandboxes?state=running&limit=5", &r) == SBX_E2B_LIST && r.query &&
           r.query_len == strlen("state=running&limit=5"),
       "list with its query");
    ok(op("GET", "/sandboxes/abc", &r) == SBX_E2B_GET && !strcmp(r.id, "abc") && !r.bad_id,
       "get one");
    ok(op("DELETE", "/sandboxes/abc", &r) == SBX_E2B_DELETE, "delete");
    ok(op("POST", "/sandboxes/abc/timeout", &r) == SBX_E2B_TIMEOUT, "timeout");
    ok(op("POST", "/v2/sandboxes/abc/connect", &r) == SBX_E2B_CONNECT &&
           op("POST", "/sandboxes/abc/connect", &r) == SBX_E2B_CONNECT,
       "connect, v1 and v2");
    ok(op("POST", "/sandboxes/abc/pause", &r) == SBX_E2B_UNSUPPORTED &&
           op("GET", "/v2/sandboxes/abc/logs", &r) == SBX_E2B_UNSUPPORTED,
       "pause, logs: unsupported");
    ok(op("PUT", "/sandboxes/abc", &r) == SBX_E2B_BAD_METHOD &&
           op("GET", "/sandboxes/abc/timeout", &r) == SBX_E2B_BAD_METHOD,
       "other methods");
    ok(op("GET", "/sandboxes/AB_C", &r) == SBX_E2B_GET && r.bad_id && !*r.id, "a bad ID marked");
    ok(op("GET", "/sandboxesx", &r) == SBX_E2B_NONE && op("GET", "/v1/files", &r) == SBX_E2B_NONE &&
           op("GET", "/", &r) == SBX_E2B_NONE,
       "other paths are not the API's");

    ok(query("a=1&metadata=k%3Dv%26x%3Dy&b", "metadata", "k=v&x=y"), "query: decoded");
    ok(query("state=running,paused", "state", "running,paused"), "query: plain");
    ok(query("x=a+b%2", "x", "a b%2"), "query: '+' a space, a cut escape kept");
    ok(query("x=1", "y", NULL) && query("", "y", NULL), "query: absent");
    {
        char small[4];
        ok(!sbx_e2b_query("x=12345", 7, "x", small, sizeof(small)), "query: too long refused");
    }
    {
        double v;
        ok(sbx_e2b_quantity("2", &v) == 0 && v == 2, "quantity: a number");
        ok(sbx_e2b_quantity("500m", &v) == 0 && v == 0.5, "quantity: milli");
        ok(sbx_e2b_quantity("1.5Gi", &v) == 0 && v == 1.5 * 1024 * 1024 * 1024, "quantity: Gi");
        ok(sbx_e2b_quantity("512M", &v) == 0 && v == 512e6, "quantity: M");
        ok(sbx_e2b_quantity("1e3", &v) == 0 && v == 1000, "quantity: an exponent");
        ok(sbx_e2b_quantity("2E", &v) == 0 && v == 2e18, "quantity: E is exa");
        ok(sbx_e2b_quantity("-1", &v) < 0 && sbx_e2b_quantity("inf", &v) < 0 &&
               sbx_e2b_quantity("0x10", &v) < 0 && sbx_e2b_quantity("1Xi", &v) < 0 &&
               sbx_e2b_quantity("", &v) < 0 && sbx_e2b_quantity("1e999", &v) < 0,
           "quantity: the rest refused");
    }
    return done_testing();
}
