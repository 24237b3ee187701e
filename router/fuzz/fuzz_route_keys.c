/* libFuzzer target for the router's routing keys (target.c): what a client sends as
 * X-Sandbox-ID, -Namespace, -Port, -UID and -Pod-IP (or their gRPC metadata), any bytes.
 * Input: a flags byte (bit 0: allow a loopback pod IP; bits 1-5 which keys are present), then
 * the keys' values separated by NUL bytes.
 *
 * Checked against the rules written out independently here: an accepted request names an id and
 * a namespace that are DNS-1123 labels, a port in 1-65535, and a pod IP (when given) that
 * inet_pton parses and that is neither unspecified, link-local, multicast nor (unless allowed)
 * loopback; its upstream is exactly "ip:port", "[ip6]:port" or "<id>.<ns>.svc.<domain>:port".
 * A refusal carries one of the reference's messages. */
#include <arpa/inet.h>
#include <regex.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_check.h"
#include "target.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const messages[] = {
    "X-Sandbox-ID header is required.", "Invalid sandbox ID format.",
    "Invalid namespace format.",        "Invalid port format.",
    "Invalid target IP address.",       "Invalid sandbox UID format.",
};

static bool label(const char *s)
{
    static regex_t rx;
    static bool compiled;

    if (!compiled) {
        CHECK(regcomp(&rx, "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", REG_EXTENDED | REG_NOSUB) == 0,
              "regcomp");
        compiled = true;
    }
    return strlen(s) <= 63 && regexec(&rx, s, 0, NULL, 0) == 0;
}

/* The classes refused, judged on the address's bytes (IPv4-mapped as IPv4). */
static bool ip_allowed(const char *s, bool loopback)
{
    unsigned char a[16];
    const unsigned char *v4 = NULL;

    if (inet_pton(AF_INET, s, a) == 1) {
        v4 = a;
    } else if (inet_pton(AF_INET6, s, a) == 1) {
        static const unsigned char mapped[12] = {[10] = 0xff, [11] = 0xff};
        if (memcmp(a, mapped, 12) == 0) {
            v4 = a + 12;
        } else {
            bool zero = true, one = a[15] == 1;
            for (int i = 0; i < 15; i++)
                zero &= a[i] == 0, one &= a[i] == 0;
            zero &= a[15] == 0;
            if (zero || a[0] == 0xff || (a[0] == 0xfe && (a[1] & 0xc0) == 0x80))
                return false;
            return one ? loopback : true;
        }
    } else {
        return false;
    }
    if ((v4[0] | v4[1] | v4[2] | v4[3]) == 0 || (v4[0] == 169 && v4[1] == 254) ||
        (v4[0] >= 224 && v4[0] <= 239))
        return false;
    return v4[0] == 127 ? loopback : true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *copy, *keys[5] = {0}, *p;
    struct sbx_route_keys k;
    struct sbx_target_opts o = {.cluster_domain = "cluster.local"};
    struct sbx_target t;
    struct sbx_error e = {0};
    char want[SBX_TARGET_HOST_MAX + 64];
    bool known = false;
    uint8_t flags;

    if (size < 1)
        return 0;
    flags = data[0];
    o.allow_loopback_pod_ip = flags & 1;
    copy = calloc(1, size);
    CHECK(copy, "calloc");
    memcpy(copy, data + 1, size - 1);
    p = copy;
    for (int i = 0; i < 5; i++) {
        if (flags & (2u << i))
            keys[i] = p;
        p += strlen(p) + (p < copy + size - 1 ? 1 : 0);
        if (p >= copy + size - 1)
            p = copy + size - 1; /* the rest empty */
    }
    k = (struct sbx_route_keys){keys[0], keys[1], keys[2], keys[3], keys[4]};
    if (sbx_target_parse(&k, 9090, &o, &t, &e) < 0) {
        for (size_t i = 0; i < sizeof(messages) / sizeof(messages[0]); i++)
            known |= strcmp(e.msg, messages[i]) == 0;
        CHECK(known, "refusal with an unknown message: %s", e.msg);
        free(copy);
        return 0;
    }
    CHECK(k.id && label(k.id), "accepted id '%s'", k.id ? k.id : "(none)");
    CHECK(label(k.ns && *k.ns ? k.ns : "default"), "accepted namespace '%s'", k.ns);
    CHECK(t.port >= 1 && t.port <= 65535, "port %d", t.port);
    if (k.pod_ip && *k.pod_ip) {
        CHECK(ip_allowed(k.pod_ip, o.allow_loopback_pod_ip), "accepted pod IP '%s'", k.pod_ip);
        snprintf(want, sizeof(want), strchr(k.pod_ip, ':') ? "[%s]:%d" : "%s:%d", k.pod_ip, t.port);
    } else {
        snprintf(want, sizeof(want), "%s.%s.svc.cluster.local:%d", k.id,
                 k.ns && *k.ns ? k.ns : "default", t.port);
    }
    CHECK(strcmp(t.host, want) == 0, "upstream '%s', not '%s'", t.host, want);
    free(copy);
    return 0;
}
