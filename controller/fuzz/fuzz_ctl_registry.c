/* libFuzzer target for what a registry (or a pull secret, or a user's pod template) hands the
 * controller's image lookup: manifests (sbx_manifest_decode), image configs
 * (sbx_image_config_decode), WWW-Authenticate challenges (sbx_challenge_parse), Docker configs
 * of pull secrets (sbx_dockercfg_find) and image references (sbx_image_ref_parse).
 *
 * Input: byte 0 chooses the parser (% 5) and, in its higher bits, the content type of a
 * manifest and the architecture asked for; the rest is the bytes parsed.
 *
 * Checked: a decoded manifest leads to a valid digest, a decoded config has entrypoint and cmd
 * null or lists of strings, a challenge taken is Bearer with a realm or Basic, credentials found
 * have bounded strings, a parsed reference has a registry, a valid repository and a tag or a
 * valid digest, and parses again from its parts to the same; every refusal carries -errno (one
 * of those the header names) and a message. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "fuzz_check.h"
#include "imageref.h"
#include "manifest.h"
#include "registry_auth.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void manifest(unsigned sel, const char *s, size_t n)
{
    static const char *const types[] = {NULL,
                                        SBX_MT_OCI_INDEX,
                                        SBX_MT_OCI_MANIFEST,
                                        SBX_MT_DOCKER_LIST,
                                        SBX_MT_DOCKER_IMAGE,
                                        "application/json; charset=utf-8",
                                        SBX_MT_OCI_INDEX ";x=1",
                                        "text/plain"};
    static const char *const arches[] = {"amd64", "arm64", "arm64/v8", "s390x"};
    struct sbx_manifest_next next = {0};
    struct sbx_error err = {0};
    int r = sbx_manifest_decode(s, n, types[sel % 8], "linux", arches[(sel / 8) % 4], &next, &err);

    if (r == 0) {
        CHECK(sbx_digest_valid(next.digest), "digest \"%s\"", next.digest);
        CHECK(next.is_index == 0 || next.is_index == 1, "is_index %d", next.is_index);
    } else {
        CHECK(r == -EINVAL || r == -ENOENT || r == -ENOTSUP, "manifest: %d", r);
        CHECK(err.msg[0] && err.code == -r, "manifest: no message");
    }
}

static bool strings_or_null(json_t *v)
{
    json_t *e;
    size_t i;

    if (json_is_null(v))
        return true;
    if (!json_is_array(v))
        return false;
    json_array_foreach(v, i, e)
    {
        if (!json_is_string(e))
            return false;
    }
    return true;
}

static void config(const char *s, size_t n)
{
    struct sbx_error err = {0};
    json_auto_t *out = NULL;
    int r = sbx_image_config_decode(s, n, &out, &err);

    if (r == 0) {
        CHECK(strings_or_null(json_object_get(out, "entrypoint")), "entrypoint");
        CHECK(strings_or_null(json_object_get(out, "cmd")), "cmd");
        json_t *wd = json_object_get(out, "workingDir");
        CHECK(!wd || json_string_length(wd) > 0, "workingDir");
    } else {
        CHECK(r == -EINVAL && err.msg[0] && !out, "config: %d", r);
    }
}

static void challenge(const char *s)
{
    struct sbx_challenge c;
    struct sbx_error err = {0};
    int r = sbx_challenge_parse(s, &c, &err);

    if (r == 0) {
        CHECK(c.scheme == SBX_AUTH_BASIC || (c.scheme == SBX_AUTH_BEARER && c.realm[0]),
              "scheme %d realm \"%s\"", c.scheme, c.realm);
        CHECK(strlen(c.realm) < sizeof(c.realm) && strlen(c.scope) < sizeof(c.scope), "sizes");
    } else {
        CHECK((r == -EINVAL || r == -ENOTSUP || r == -ENAMETOOLONG) && err.msg[0], "challenge: %d",
              r);
    }
}

static void dockercfg(const char *s, size_t n)
{
    json_auto_t *cfg = json_loadb(s, n, 0, NULL);
    static const char *const hosts[] = {"docker.io", "r.io", "a.r.io", "r.io:5000"};
    struct sbx_registry_creds c;
    struct sbx_error err = {0};

    if (!cfg)
        return;
    for (size_t i = 0; i < SBX_ARRAY_SIZE(hosts); i++) {
        int r = sbx_dockercfg_find(cfg, hosts[i], &c, &err);
        CHECK(r == 0 || r == 1 || (r == -EINVAL && err.msg[0]), "dockercfg: %d", r);
        if (r == 1)
            CHECK(strlen(c.user) < sizeof(c.user) && strlen(c.pass) < sizeof(c.pass), "sizes");
    }
}

static void image_ref(const char *s)
{
    struct sbx_image_ref r, again;
    struct sbx_error err = {0};
    char buf[1000];

    if (sbx_image_ref_parse(s, &r, &err) < 0) {
        CHECK(err.code == EINVAL && err.msg[0], "ref: no message");
        return;
    }
    CHECK(r.registry[0] && r.repository[0], "ref \"%s\": parts", s);
    CHECK(r.tag[0] || sbx_digest_valid(r.digest), "ref \"%s\": tag or digest", s);
    snprintf(buf, sizeof(buf), "%s/%s%s%s%s%s", r.registry, r.repository, r.tag[0] ? ":" : "",
             r.tag, r.digest[0] ? "@" : "", r.digest);
    CHECK(sbx_image_ref_parse(buf, &again, &err) == 0, "ref \"%s\" again as \"%s\": %s", s, buf,
          err.msg);
    CHECK(!memcmp(&r, &again, sizeof(r)), "ref \"%s\" again as \"%s\": differs", s, buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 1 << 16)
        return 0;
    char *s = malloc(size);
    if (!s)
        return 0;
    memcpy(s, data + 1, size - 1);
    s[size - 1] = '\0';
    switch (data[0] % 5) {
    case 0:
        manifest(data[0] / 5, s, size - 1);
        break;
    case 1:
        config(s, size - 1);
        break;
    case 2:
        challenge(s);
        break;
    case 3:
        dockercfg(s, size - 1);
        break;
    default:
        image_ref(s);
    }
    free(s);
    return 0;
}
