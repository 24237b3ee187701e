/* libFuzzer target for E2B's names (e2b_route.c): a Host value, a request target and a query,
 * any bytes. Input: the method's length (first byte, mod 8), the method, then the rest used as
 * the Host value, the target and the query at once.
 *
 * Checked against the rules written out here: an accepted sandbox host gives a port of 1-5
 * digits and an ID of [a-z0-9] that are both in the host; a route's ID, when set, is [a-z0-9];
 * a query value decodes to no more than the bytes it came from; a quantity accepted is a
 * finite non-negative number that began with a digit or a point. */
#define _GNU_SOURCE
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "e2b_route.h"
#include "fuzz_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool only(const char *s, const char *set)
{
    return *s && strspn(s, set) == strlen(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char id[64], port[8], out[128];
    struct sbx_e2b_req r;
    size_t mlen;
    const char *rest;
    size_t rlen;
    int rc;

    if (size < 1)
        return 0;
    mlen = data[0] % 8;
    if (mlen > size - 1)
        mlen = size - 1;
    rest = (const char *)data + 1 + mlen;
    rlen = size - 1 - mlen;

    rc = sbx_e2b_from_host(rest, rlen, "e2b.example.com", id, port);
    CHECK(rc >= -22 && rc <= 1, "from_host returned %d", rc);
    if (rc == 1) {
        CHECK(only(port, "0123456789") && strlen(port) <= 5, "port '%s'", port);
        CHECK(only(id, "abcdefghijklmnopqrstuvwxyz0123456789"), "id '%s'", id);
        CHECK(memmem(rest, rlen, id, strlen(id)) && memmem(rest, rlen, port, strlen(port)),
              "id or port not from the host");
    }

    sbx_e2b_parse((const char *)data + 1, mlen, rest, rlen, &r);
    CHECK(r.op >= SBX_E2B_NONE && r.op <= SBX_E2B_BAD_METHOD, "op %d", (int)r.op);
    CHECK(!*r.id || only(r.id, "abcdefghijklmnopqrstuvwxyz0123456789"), "route id '%s'", r.id);
    CHECK(!r.query || (r.query > rest && r.query + r.query_len == rest + rlen), "query bounds");
    if (sbx_e2b_query(rest, rlen, "x", out, sizeof(out)))
        CHECK(strlen(out) < rlen, "decoded value longer than its input");
    {
        char *q = strndup(rest, rlen);
        double v = -1;
        CHECK(q, "strndup");
        if (sbx_e2b_quantity(q, &v) == 0)
            CHECK(v >= 0 && isfinite(v) && strchr("0123456789.", q[0]), "quantity %s = %g", q, v);
        free(q);
    }
    return 0;
}
