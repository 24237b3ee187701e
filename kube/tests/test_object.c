/* The object helpers (times, conditions, keys, readiness, resourceVersions) and the field
 * projection informers apply. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "informer.h"
#include "object.h"
#include "tap.h"

int main(void)
{
    char ns[16];
    const char *name;
    time_t t;

    ok(sbx_parse_rfc3339("2026-01-02T03:04:05Z", &t) == 0 && t == 1767323045, "RFC 3339");
    ok(sbx_parse_rfc3339("2026-01-02T03:04:05.123456Z", &t) == 0 && t == 1767323045,
       "with a fraction");
    ok(sbx_parse_rfc3339("2026-01-02T03:04:05+01:00", &t) == -EINVAL, "offsets refused");
    ok(sbx_parse_rfc3339("yesterday", &t) == -EINVAL, "garbage refused");
    ok(sbx_parse_rfc3339(NULL, &t) == -EINVAL, "NULL refused");
    char when[32];
    sbx_rfc3339(1767323045, when);
    ok(!strcmp(when, "2026-01-02T03:04:05Z"), "formatted: %s", when);

    /* A condition keeps its lastTransitionTime while its status stays, not when it changes. */
    json_t *was = json_pack("{s:{s:[{s:s, s:s, s:s}]}}", "status", "conditions", "type", "Finished",
                            "status", "True", "lastTransitionTime", when);
    json_t *same = sbx_new_condition("Finished", "True", "PodFailed", "", was, NULL);
    json_t *flip = sbx_new_condition("Finished", "False", "X", "", was, NULL);
    json_t *other = sbx_new_condition("Ready", "True", "X", "", was, NULL);
    ok(!strcmp(json_string_value(json_object_get(same, "lastTransitionTime")), when) &&
           !strcmp(json_string_value(json_object_get(same, "reason")), "PodFailed"),
       "unchanged status: transition time kept");
    ok(strcmp(json_string_value(json_object_get(flip, "lastTransitionTime")), when) != 0,
       "changed status: a new transition time");
    ok(strcmp(json_string_value(json_object_get(other, "lastTransitionTime")), when) != 0 &&
           !strcmp(json_string_value(json_object_get(other, "type")), "Ready"),
       "another type: its own transition time");
    json_decref(was);
    json_decref(same);
    json_decref(flip);
    json_decref(other);

    ok(sbx_split_key("ns/name", ns, sizeof(ns), &name) == 0 && !strcmp(ns, "ns") &&
           !strcmp(name, "name"),
       "key split");
    ok(sbx_split_key("nokey", ns, sizeof(ns), &name) == -EINVAL, "a key without a slash");
    ok(sbx_split_key("a-very-long-namespace/x", ns, sizeof(ns), &name) == -EINVAL,
       "a namespace too long for the buffer");

    char s[9];
    sbx_random_suffix(s, 8);
    ok(strlen(s) == 8 && strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789") == 8,
       "random suffix: %s", s);

    json_t *obj = json_pack("{s:{s:[{s:s, s:s}]}}", "status", "conditions", "type", "Ready",
                            "status", "True");
    ok(sbx_is_ready(obj), "Ready condition read");
    json_t *c = sbx_ready_condition("True", "R", "m", obj, NULL);
    ok(c && !strcmp(json_string_value(json_object_get(c, "status")), "True"), "condition built");
    json_decref(c);
    json_decref(obj);

    /* Field projection keeps the named members only; sbx_object_rv reads etcd's revision. */
    static const char *const keep[] = {"metadata", "status", NULL};
    json_t *pod = json_loads("{\"metadata\":{\"resourceVersion\":\"42\"},\"spec\":{\"x\":1},"
                             "\"status\":{},\"kind\":\"Pod\"}",
                             0, NULL);
    sbx_json_keep(pod, keep);
    ok(json_object_size(pod) == 2 && json_object_get(pod, "metadata") &&
           json_object_get(pod, "status"),
       "projection keeps what it names");
    sbx_json_keep(NULL, keep);
    ok(sbx_object_rv(pod) == 42, "resourceVersion as a number");
    json_object_set_new(json_object_get(pod, "metadata"), "resourceVersion", json_string("4x"));
    ok(sbx_object_rv(pod) == 0, "a resourceVersion that is not a number reads 0");
    json_decref(pod);
    return done_testing();
}
