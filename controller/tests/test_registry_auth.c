/* Challenges, pull-secret credentials and manifest decoding (registry_auth.c, manifest.c). */
#include <errno.h>
#include <string.h>

#include "cleanup.h"
#include "manifest.h"
#include "registry_auth.h"
#include "tap.h"

#define D64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define E64 "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"

static void challenge(const char *h, int rc, enum sbx_auth_scheme scheme, const char *realm,
                      const char *service, const char *scope)
{
    struct sbx_challenge c = {0};
    struct sbx_error err = {0};
    int r = sbx_challenge_parse(h, &c, &err);

    if (rc < 0) {
        ok(r == rc, "[%s] refused with %d (%d: %s)", h, rc, r, err.msg);
        return;
    }
    ok(r == 0 && c.scheme == scheme && !strcmp(c.realm, realm) && !strcmp(c.service, service) &&
           !strcmp(c.scope, scope),
       "[%s] is %d realm=%s service=%s scope=%s (got %d %s: %d %s %s %s)", h, scheme, realm,
       service, scope, r, err.msg, c.scheme, c.realm, c.service, c.scope);
}

static void challenges(void)
{
    challenge("Bearer realm=\"https://auth.docker.io/token\",service=\"registry.docker.io\","
              "scope=\"repository:library/busybox:pull\"",
              0, SBX_AUTH_BEARER, "https://auth.docker.io/token", "registry.docker.io",
              "repository:library/busybox:pull");
    challenge("bearer  Realm = \"https://t/x?a=1\" , SERVICE=svc", 0, SBX_AUTH_BEARER,
              "https://t/x?a=1", "svc", "");
    challenge("Basic realm=\"Registry Realm\"", 0, SBX_AUTH_BASIC, "Registry Realm", "", "");
    challenge("Basic realm=\"a \\\"quoted\\\" realm\"", 0, SBX_AUTH_BASIC, "a \"quoted\" realm", "",
              "");
    challenge("Basic realm=\"r\", Bearer realm=\"https://t\",service=\"s\"", 0, SBX_AUTH_BEARER,
              "https://t", "s", "");
    challenge("Negotiate abc, Basic realm=x", 0, SBX_AUTH_BASIC, "x", "", "");
    challenge("Bearer realm=\"https://t\",error=\"insufficient_scope\",scope=\"a b\"", 0,
              SBX_AUTH_BEARER, "https://t", "", "a b");
    challenge("", -EINVAL, 0, "", "", "");
    challenge("Bearer service=\"s\"", -EINVAL, 0, "", "", "");
    challenge("Bearer realm=\"unterminated", -EINVAL, 0, "", "", "");
    challenge("Bearer realm=\"https://t\" service=x", -EINVAL, 0, "", "", "");
    challenge("Digest realm=\"x\", nonce=\"y\"", -ENOTSUP, 0, "", "", "");
    challenge("Bearer realm=\"x\",,,", 0, SBX_AUTH_BEARER, "x", "", "");
    char big[2000] = "Bearer realm=\"";
    memset(big + strlen(big), 'a', 1500);
    strcat(big, "\"");
    challenge(big, -ENAMETOOLONG, 0, "", "", "");
}

static void creds(const char *cfg, const char *host, int rc, const char *user, const char *pass)
{
    json_auto_t *j = json_loads(cfg, 0, NULL);
    struct sbx_registry_creds c = {0};
    struct sbx_error err = {0};
    int r = sbx_dockercfg_find(j, host, &c, &err);

    ok(r == rc && (rc != 1 || (!strcmp(c.user, user) && !strcmp(c.pass, pass))),
       "%s in %s: %d %s/%s (got %d %s %s/%s)", host, cfg, rc, user, pass, r, err.msg, c.user,
       c.pass);
}

static void dockercfg(void)
{
    /* "u:p:w" and "hub:secret" in base64 */
    creds("{\"auths\":{\"r.io\":{\"auth\":\"dTpwOnc=\"}}}", "r.io", 1, "u", "p:w");
    creds("{\"auths\":{\"https://r.io/v2/\":{\"username\":\"a\",\"password\":\"b\"}}}", "r.io", 1,
          "a", "b");
    creds("{\"auths\":{\"https://index.docker.io/v1/\":{\"auth\":\"aHViOnNlY3JldA==\"}}}",
          "docker.io", 1, "hub", "secret");
    creds("{\"r.io:5000\":{\"auth\":\"dTpwOnc=\"}}", "r.io:5000", 1, "u", "p:w");
    creds("{\"auths\":{\"r.io:5000\":{\"auth\":\"dTpwOnc=\"}}}", "r.io", 0, "", "");
    creds("{\"auths\":{\"*.r.io\":{\"username\":\"w\"},\"a.r.io\":{\"username\":\"exact\"}}}",
          "a.r.io", 1, "exact", "");
    creds("{\"auths\":{\"*.r.io\":{\"username\":\"w\"}}}", "b.r.io", 1, "w", "");
    creds("{\"auths\":{\"*.r.io\":{\"username\":\"w\"}}}", "a.b.r.io", 0, "", "");
    creds("{\"auths\":{\"*.r.io\":{\"username\":\"w\"}}}", "r.io", 0, "", "");
    creds("{\"auths\":{\"other.io\":{\"auth\":\"dTpwOnc=\"}}}", "r.io", 0, "", "");
    creds("{\"auths\":{\"r.io\":{\"auth\":\"!!!\"}}}", "r.io", -EINVAL, "", "");
    creds("{\"auths\":{\"r.io\":{\"auth\":\"bm9jb2xvbg==\"}}}", "r.io", -EINVAL, "", "");
    creds("{\"auths\":{\"r.io\":{}}}", "r.io", -EINVAL, "", "");
    creds("[]", "r.io", -EINVAL, "", "");
}

static void manifest(const char *body, const char *ct, const char *arch, int rc, int is_index,
                     const char *digest)
{
    struct sbx_manifest_next n = {0};
    struct sbx_error err = {0};
    int r = sbx_manifest_decode(body, strlen(body), ct, "linux", arch, &n, &err);

    ok(r == rc && (rc < 0 || (n.is_index == is_index && !strcmp(n.digest, digest))),
       "%.60s... (%s, %s): %d %d %.20s (got %d %s %d %.20s)", body, ct ? ct : "-", arch, rc,
       is_index, digest, r, err.msg, n.is_index, n.digest);
}

static void manifests(void)
{
    const char *index = "{\"schemaVersion\":2,\"mediaType\":\"" SBX_MT_OCI_INDEX "\","
                        "\"manifests\":[{\"digest\":\"sha256:" D64 "\",\"platform\":{"
                        "\"os\":\"linux\",\"architecture\":\"amd64\"}},{\"digest\":\"sha256:" E64
                        "\",\"platform\":{\"os\":\"linux\",\"architecture\":\"arm64\","
                        "\"variant\":\"v8\"}}]}";
    manifest(index, NULL, "amd64", 0, 1, "sha256:" D64);
    manifest(index, SBX_MT_OCI_INDEX "; charset=utf-8", "arm64", 0, 1, "sha256:" E64);
    manifest(index, NULL, "arm64/v8", 0, 1, "sha256:" E64);
    manifest(index, NULL, "arm64/v7", -ENOENT, 0, "");
    manifest(index, NULL, "s390x", -ENOENT, 0, "");
    const char *image = "{\"schemaVersion\":2,\"config\":{\"mediaType\":\"x\",\"digest\":"
                        "\"sha256:" D64 "\"},\"layers\":[]}";
    manifest(image, SBX_MT_DOCKER_IMAGE, "amd64", 0, 0, "sha256:" D64);
    manifest(image, NULL, "amd64", 0, 0, "sha256:" D64);
    manifest("{\"schemaVersion\":2,\"manifests\":[]}", SBX_MT_DOCKER_LIST, "amd64", -ENOENT, 0, "");
    manifest("{\"schemaVersion\":1,\"name\":\"x\"}", NULL, "amd64", -ENOTSUP, 0, "");
    manifest("{\"schemaVersion\":2,\"config\":{\"digest\":\"sha256:short\"}}", NULL, "amd64",
             -EINVAL, 0, "");
    manifest("{\"schemaVersion\":2,\"manifests\":{}}", SBX_MT_OCI_INDEX, "amd64", -EINVAL, 0, "");
    manifest("[1]", NULL, "amd64", -EINVAL, 0, "");
    manifest("{\"a\":1,\"a\":2}", NULL, "amd64", -EINVAL, 0, "");
}

static void configs(void)
{
    struct sbx_error err = {0};
    json_auto_t *out = NULL;
    const char *cfg = "{\"config\":{\"Entrypoint\":[\"/bin/app\",\"-x\"],\"Cmd\":null,"
                      "\"WorkingDir\":\"/srv\"}}";

    ok(sbx_image_config_decode(cfg, strlen(cfg), &out, &err) == 0 &&
           json_array_size(json_object_get(out, "entrypoint")) == 2 &&
           json_is_null(json_object_get(out, "cmd")) &&
           !strcmp(json_string_value(json_object_get(out, "workingDir")), "/srv"),
       "a config's entrypoint, cmd and working directory (%s)", err.msg);
    json_auto_t *bare = NULL;
    ok(sbx_image_config_decode("{}", 2, &bare, &err) == 0 &&
           json_is_null(json_object_get(bare, "entrypoint")),
       "a config without config: nothing to run");
    const char *bad[] = {"{\"config\":{\"Cmd\":\"sh\"}}", "{\"config\":{\"Entrypoint\":[1]}}",
                         "{\"config\":[]}", "{\"config\":{\"WorkingDir\":3}}", "nope"};
    for (size_t i = 0; i < SBX_ARRAY_SIZE(bad); i++) {
        json_t *o = NULL;
        ok(sbx_image_config_decode(bad[i], strlen(bad[i]), &o, &err) == -EINVAL && !o,
           "%s refused (%s)", bad[i], err.msg);
    }
    /* sha256("abc") */
    const char *abc = "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
    ok(sbx_digest_check(abc, "abc", 3, &err) == 0, "content matching its digest");
    ok(sbx_digest_check(abc, "abd", 3, &err) == -EBADMSG, "content not matching: %s", err.msg);
    ok(sbx_digest_check("md5:00", "abc", 3, &err) == -EINVAL, "an unknown algorithm");
}

int main(void)
{
    challenges();
    dockercfg();
    manifests();
    configs();
    return done_testing();
}
