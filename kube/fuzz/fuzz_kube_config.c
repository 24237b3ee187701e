/* libFuzzer target for the kubeconfig reader: YAML (libyaml) to JSON (sbx_yaml_to_json), the
 * configuration taken from it (sbx_kube_config_parse), and base64 (sbx_base64_decode).
 *
 * Input: a kubeconfig file (YAML or JSON).
 *
 * Checked: whatever JSON jansson reads from the input (integers, strings of the Basic
 * Multilingual Plane without DEL, nesting within the bound; no reals, which we keep as strings)
 * reads the
 * same through our YAML reader once written out by jansson, YAML being a superset of that JSON;
 * a configuration is accepted only with a server, its paths are absolute (resolved against the
 * file's directory), insecure only when the cluster says true, each *-data field decoded as a
 * strict base64 decoder (written here from RFC 4648) decodes it, and a refusal carries -errno and
 * a message. Every string of the input's YAML goes through base64 too, against the same
 * decoder. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "fuzz_check.h"
#include "kubeconfig.h"
#include "yaml_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define DIR "/etc/kube"

/* RFC 4648 base64, whitespace (space, tab, CR, LF) skipped and padding optional: the output
 * length, or -1 when s is not base64. */
static long ref_base64(const char *s, unsigned char *out)
{
    static const char alpha[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    unsigned vals[4];
    size_t n = 0, pad = 0;
    long len = 0;

    for (; *s; s++) {
        const char *at;
        if (strchr(" \t\r\n", *s))
            continue;
        if (*s == '=') {
            pad++;
            continue;
        }
        if (pad || !(at = strchr(alpha, *s)))
            return -1;
        vals[n++ % 4] = (unsigned)(at - alpha);
        if (n % 4 == 0) {
            out[len++] = (unsigned char)(vals[0] << 2 | vals[1] >> 4);
            out[len++] = (unsigned char)(vals[1] << 4 | vals[2] >> 2);
            out[len++] = (unsigned char)(vals[2] << 6 | vals[3]);
        }
    }
    if (pad > 2 || n % 4 == 1 || (pad && (n + pad) % 4 != 0))
        return -1;
    if (n % 4 >= 2)
        out[len++] = (unsigned char)(vals[0] << 2 | vals[1] >> 4);
    if (n % 4 == 3)
        out[len++] = (unsigned char)(vals[1] << 4 | vals[2] >> 2);
    return len;
}

static void check_base64(const char *s)
{
    _cleanup_free_ unsigned char *want = malloc(strlen(s) + 4);
    struct sbx_error err = {0};
    char *got = NULL;
    size_t len = 0;
    int r;

    CHECK(want, "out of memory");
    long n = ref_base64(s, want);
    r = sbx_base64_decode(s, &got, &len, &err);
    CHECK((r == 0) == (n >= 0), "base64 '%.80s': %d, the reference %ld", s, r, n);
    if (r == 0)
        CHECK((long)len == n && !memcmp(got, want, len) && got[len] == '\0',
              "base64 '%.80s' decoded differently", s);
    else
        CHECK(r == -EINVAL && err.code == EINVAL && err.msg[0], "base64 error %d", r);
    free(got);
}

/* Whether YAML can carry s as jansson writes it: within the Basic Multilingual Plane (beyond,
 * jansson escapes surrogates, which YAML lacks) and without DEL (which JSON leaves raw and YAML
 * does not allow raw). */
static bool yaml_safe(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0xf0 || s[i] == 0x7f)
            return false;
    return true;
}

/* Depth, and whether every value is one our YAML reader gives back as jansson read it. */
static bool plain(json_t *j, int depth)
{
    const char *k;
    json_t *v;
    size_t i;

    if (depth > 60)
        return false;
    switch (json_typeof(j)) {
    case JSON_REAL:
        return false;
    case JSON_STRING:
        return yaml_safe(json_string_value(j), json_string_length(j));
    case JSON_OBJECT:
        json_object_foreach(j, k,
                            v) if (!yaml_safe(k, strlen(k)) || !plain(v, depth + 1)) return false;
        return true;
    case JSON_ARRAY:
        json_array_foreach(j, i, v) if (!plain(v, depth + 1)) return false;
        return true;
    default:
        return true;
    }
}

static void strings_to_base64(json_t *j)
{
    const char *k;
    json_t *v;
    size_t i;

    if (json_is_string(j) && json_string_length(j) < 4096)
        check_base64(json_string_value(j));
    json_object_foreach(j, k, v) strings_to_base64(v);
    json_array_foreach(j, i, v) strings_to_base64(v);
}

static void check_config(const struct sbx_kube_config *c, json_t *doc)
{
    const char *paths[] = {c->ca_file, c->cert_file, c->key_file, c->token_file};

    CHECK(c->server && *c->server, "a configuration without a server");
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
        CHECK(!paths[i] || paths[i][0] == '/', "relative path '%s'", paths[i]);
    CHECK(!c->namespace || *c->namespace, "empty namespace");
    if (c->insecure) {
        _cleanup_free_ char *dump = json_dumps(doc, JSON_COMPACT);
        CHECK(dump && strstr(dump, "\"insecure-skip-tls-verify\":true"), "insecure from nowhere");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    struct sbx_error err = {0};
    struct sbx_kube_config c = {0};
    json_t *doc = NULL, *j;
    int r;

    if (size > 256 * 1024)
        return 0;
    r = sbx_yaml_to_json(buf, size, &doc, &err);
    CHECK(r == 0 ? doc != NULL : r == -EINVAL && err.code == EINVAL && err.msg[0], "yaml: %d '%s'",
          r, err.msg);
    if (r == 0)
        strings_to_base64(doc);

    j = json_loadb(buf, size, JSON_DECODE_ANY, NULL);
    if (j && plain(j, 0)) {
        _cleanup_free_ char *text = json_dumps(j, JSON_ENSURE_ASCII | JSON_ENCODE_ANY);
        json_t *back = NULL;
        CHECK(text, "dump");
        r = sbx_yaml_to_json(text, strlen(text), &back, &err);
        CHECK(r == 0 && json_equal(j, back), "JSON read back as YAML differs (%d '%s'): %s", r,
              err.msg, text);
        json_decref(back);
    }
    json_decref(j);

    r = sbx_kube_config_parse(buf, size, DIR, NULL, &c, &err);
    if (r == 0) {
        check_config(&c, doc);
        sbx_kube_config_release(&c);
    } else {
        CHECK((r == -EINVAL || r == -ENOMEM) && err.code == -r && err.msg[0], "config: %d '%s'", r,
              err.msg);
    }
    json_decref(doc);
    return 0;
}
