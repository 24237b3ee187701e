#include "registry_auth.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "cleanup.h"
#include "imageref.h"
#include "kubeconfig.h"

static bool tchar(char c)
{
    return c && (isalnum((unsigned char)c) || strchr("!#$%&'*+-.^_`|~", c));
}

static const char *skip_ws(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

/* One value (token or quoted string) into out; returns the end, or NULL (err set). */
static const char *parse_value(const char *p, char *out, size_t size, struct sbx_error *err)
{
    size_t n = 0;

    if (*p != '"') {
        while (tchar(*p) || *p == '/' || *p == ':' || *p == '=') {
            if (n + 1 >= size) {
                sbx_error_set(err, ENAMETOOLONG, "challenge parameter too long");
                return NULL;
            }
            out[n++] = *p++;
        }
        out[n] = '\0';
        return p;
    }
    for (p++; *p != '"'; p++) {
        if (*p == '\\' && p[1])
            p++;
        if (!*p || *p == '\r' || *p == '\n') {
            sbx_error_set(err, EINVAL, "unterminated quoted string in challenge");
            return NULL;
        }
        if (n + 1 >= size) {
            sbx_error_set(err, ENAMETOOLONG, "challenge parameter too long");
            return NULL;
        }
        out[n++] = *p;
    }
    out[n] = '\0';
    return p + 1;
}

/* The parameter called name goes where the challenge keeps it, if anywhere. */
static char *param_slot(struct sbx_challenge *c, const char *name, size_t n, size_t *size)
{
    static const struct {
        const char *name;
        size_t off, size;
    } slots[] = {
        {"realm", offsetof(struct sbx_challenge, realm),
         sizeof(((struct sbx_challenge *)0)->realm)},
        {"service", offsetof(struct sbx_challenge, service),
         sizeof(((struct sbx_challenge *)0)->service)},
        {"scope", offsetof(struct sbx_challenge, scope),
         sizeof(((struct sbx_challenge *)0)->scope)},
    };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(slots); i++)
        if (strlen(slots[i].name) == n && !strncasecmp(slots[i].name, name, n)) {
            *size = slots[i].size;
            return (char *)c + slots[i].off;
        }
    return NULL;
}

/* The parameters of one challenge, up to the next challenge's scheme or the end. */
static const char *parse_params(const char *p, struct sbx_challenge *c, struct sbx_error *err)
{
    char scratch[1024];

    for (;;) {
        p = skip_ws(p);
        while (*p == ',')
            p = skip_ws(p + 1);
        const char *name = p;
        while (tchar(*p))
            p++;
        size_t n = (size_t)(p - name);
        const char *eq = skip_ws(p);
        if (n == 0 || *eq != '=')
            return n ? name : p; /* the next challenge's scheme, or the end */
        size_t size = sizeof(scratch);
        char *slot = param_slot(c, name, n, &size);
        if (!(p = parse_value(skip_ws(eq + 1), slot ? slot : scratch, size, err)))
            return NULL;
        p = skip_ws(p);
        if (*p && *p != ',') {
            sbx_error_set(err, EINVAL, "challenge: \",\" expected after a parameter");
            return NULL;
        }
    }
}

int sbx_challenge_parse(const char *header, struct sbx_challenge *ret, struct sbx_error *err)
{
    struct sbx_challenge best = {0};
    const char *p = skip_ws(header ? header : "");

    if (!*p)
        return sbx_error_set(err, EINVAL, "empty challenge");
    while (*p) {
        struct sbx_challenge c = {0};
        const char *scheme = p;
        while (tchar(*p))
            p++;
        size_t n = (size_t)(p - scheme);
        if (n == 0 || (*p && *p != ' ' && *p != '\t' && *p != ','))
            return sbx_error_set(err, EINVAL, "challenge: malformed scheme");
        if (n == 6 && !strncasecmp(scheme, "Bearer", 6))
            c.scheme = SBX_AUTH_BEARER;
        else if (n == 5 && !strncasecmp(scheme, "Basic", 5))
            c.scheme = SBX_AUTH_BASIC;
        if (!(p = parse_params(p, &c, err)))
            return -err->code;
        if (c.scheme > best.scheme)
            best = c;
    }
    if (!best.scheme)
        return sbx_error_set(err, ENOTSUP, "challenge offers neither Bearer nor Basic");
    if (best.scheme == SBX_AUTH_BEARER && !best.realm[0])
        return sbx_error_set(err, EINVAL, "Bearer challenge without a realm");
    *ret = best;
    return 0;
}

static bool is_hub(const char *host, size_t n)
{
    static const char *const names[] = {"docker.io", "index.docker.io", "registry-1.docker.io"};

    for (size_t i = 0; i < SBX_ARRAY_SIZE(names); i++)
        if (strlen(names[i]) == n && !strncasecmp(names[i], host, n))
            return true;
    return false;
}

/* Whether the config key (a host, maybe with a scheme, a path, a "*." label) is host's. */
static bool key_matches(const char *key, const char *host)
{
    const char *k = key;

    if (!strncasecmp(k, "https://", 8))
        k += 8;
    else if (!strncasecmp(k, "http://", 7))
        k += 7;
    size_t n = strcspn(k, "/");
    size_t hn = strlen(host);
    if (is_hub(k, n) && is_hub(host, hn))
        return true;
    if (n == hn && !strncasecmp(k, host, n))
        return true;
    /* "*.example.com" against "a.example.com": one label, no port in either */
    if (n > 2 && k[0] == '*' && k[1] == '.') {
        const char *dot = strchr(host, '.');
        return dot && (size_t)(hn - (size_t)(dot - host)) == n - 1 &&
               !strncasecmp(dot, k + 1, n - 1) && dot != host;
    }
    return false;
}

static int entry_creds(const char *key, json_t *e, struct sbx_registry_creds *ret,
                       struct sbx_error *err)
{
    const char *auth = json_string_value(json_object_get(e, "auth"));
    const char *user = json_string_value(json_object_get(e, "username"));
    const char *pass = json_string_value(json_object_get(e, "password"));
    struct sbx_registry_creds c = {0};

    if (auth && *auth) {
        _cleanup_free_ char *plain = NULL;
        size_t len;
        if (sbx_base64_decode(auth, &plain, &len, err) < 0 || strlen(plain) != len)
            return sbx_error_set(err, EINVAL, "docker config \"%.100s\": auth is not base64", key);
        char *colon = strchr(plain, ':');
        if (!colon)
            return sbx_error_set(err, EINVAL, "docker config \"%.100s\": auth is not user:password",
                                 key);
        *colon = '\0';
        user = plain;
        pass = colon + 1;
        if (snprintf(c.user, sizeof(c.user), "%s", user) >= (int)sizeof(c.user) ||
            snprintf(c.pass, sizeof(c.pass), "%s", pass) >= (int)sizeof(c.pass))
            return sbx_error_set(err, EINVAL, "docker config \"%.100s\": credentials too long",
                                 key);
        *ret = c;
        return 1;
    }
    if (!user || !*user)
        return sbx_error_set(err, EINVAL,
                             "docker config \"%.100s\": neither auth nor username given", key);
    if (snprintf(c.user, sizeof(c.user), "%s", user) >= (int)sizeof(c.user) ||
        snprintf(c.pass, sizeof(c.pass), "%s", pass ? pass : "") >= (int)sizeof(c.pass))
        return sbx_error_set(err, EINVAL, "docker config \"%.100s\": credentials too long", key);
    *ret = c;
    return 1;
}

int sbx_dockercfg_find(json_t *cfg, const char *host, struct sbx_registry_creds *ret,
                       struct sbx_error *err)
{
    json_t *auths = json_object_get(cfg, "auths"), *e;
    const char *key;

    if (!json_is_object(auths))
        auths = cfg;
    if (!json_is_object(auths))
        return sbx_error_set(err, EINVAL, "docker config is not an object");
    /* An exact key first: "*.example.com" must not shadow "a.example.com"'s own. */
    for (int pass = 0; pass < 2; pass++) {
        json_object_foreach(auths, key, e)
        {
            bool wild = key[0] == '*';
            if (wild == (pass == 0) || !json_is_object(e) || !key_matches(key, host))
                continue;
            return entry_creds(key, e, ret, err);
        }
    }
    return 0;
}
