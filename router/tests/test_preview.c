/* preview: the keys a preview URL names, by host and by path, and what is not one. */
#include <errno.h>
#include <string.h>

#include "preview.h"
#include "tap.h"

static int host(const char *h, struct sbx_preview *p)
{
    return sbx_preview_from_host(h, strlen(h), "preview.example.com", p);
}

static int path(const char *t, struct sbx_preview *p)
{
    return sbx_preview_from_path(t, strlen(t), p);
}

static bool keys(const struct sbx_preview *p, const char *port, const char *id, const char *ns)
{
    return strcmp(p->port, port) == 0 && strcmp(p->id, id) == 0 && strcmp(p->ns, ns) == 0;
}

static bool fwd(const struct sbx_preview *p, const char *want)
{
    return want ? p->path && p->path_len == strlen(want) && !memcmp(p->path, want, p->path_len)
                : !p->path;
}

int main(void)
{
    struct sbx_preview p;

    ok(host("3000-my-box.team-a.preview.example.com", &p) == 1 &&
           keys(&p, "3000", "my-box", "team-a") && fwd(&p, NULL),
       "host form: the first dash ends the port");
    ok(host("8080-sb.default.Preview.Example.COM:8443", &p) == 1 &&
           keys(&p, "8080", "sb", "default"),
       "host form: a port after the host, the domain in any case");
    ok(host("8080-sb.default.preview.example.com.", &p) == 1, "host form: the root's dot");
    ok(host("router.example.com", &p) == 0, "another host: not a preview");
    ok(host("preview.example.com", &p) == 0, "the domain itself: not a preview");
    ok(host("xpreview.example.com", &p) == 0, "a longer label: not under the domain");
    ok(host("[::1]:8080", &p) == 0, "an IPv6 literal: not a preview");
    ok(host("sb.default.preview.example.com", &p) == -EINVAL, "no port: refused");
    ok(host("8080-sb.preview.example.com", &p) == -EINVAL, "no namespace: refused");
    ok(host("8080-sb.a.b.preview.example.com", &p) == -EINVAL, "two labels of namespace: refused");
    ok(sbx_preview_from_host("8080-sb.default.x", 17, "", &p) == 0, "no domain: no host form");

    ok(path("/s/default/sb/8888/api/x?q=1", &p) == 1 && keys(&p, "8888", "sb", "default") &&
           fwd(&p, "/api/x?q=1"),
       "path form: the rest forwarded");
    ok(path("/s/default/sb/8888/", &p) == 1 && fwd(&p, "/"), "path form: the root");
    ok(path("/s/default/sb/8888", &p) == 1 && fwd(&p, NULL), "path form without the slash");
    ok(path("/s/default/sb/8888?x", &p) == 1 && fwd(&p, NULL), "with a query, no slash");
    ok(path("/s/default/sb", &p) == -EINVAL, "a missing port: refused");
    ok(path("/s//sb/8888/", &p) == -EINVAL, "an empty namespace: refused");
    ok(path("/s/default?x/sb/8888/", &p) == -EINVAL, "a query inside the prefix: refused");
    ok(path("/static/app.js", &p) == 0 && path("/s", &p) == 0, "other paths: not previews");
    {
        char longname[100];
        memset(longname, 'a', sizeof(longname));
        memcpy(longname, "/s/n/", 5);
        longname[99] = '\0';
        ok(path(longname, &p) == -EINVAL, "a segment too long: refused");
    }
    return done_testing();
}
