#define _GNU_SOURCE
#include "e2b_init.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"

#define ANSWER_MAX 512 /* of envd's answer, kept for the error */

struct answer {
    char text[ANSWER_MAX];
    size_t len;
};

static size_t keep(char *p, size_t size, size_t n, void *arg)
{
    struct answer *a = arg;
    size_t take = size * n;

    if (take > sizeof(a->text) - 1 - a->len)
        take = sizeof(a->text) - 1 - a->len;
    memcpy(a->text + a->len, p, take);
    a->len += take;
    a->text[a->len] = '\0';
    return size * n; /* the rest is read and dropped */
}

int e2b_init_push(const char *ip, int port, const char *token, json_t *env, uint64_t timeout_ms,
                  struct sbx_error *err)
{
    json_auto_t *body = json_pack("{s:O}", "envVars", env);
    _cleanup_free_ char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    char url[128], auth[600];
    struct answer a = {0};
    struct curl_slist *h = NULL, *h2;
    CURL *c = curl_easy_init();
    long status = 0;
    CURLcode rc;

    if (!text || !c || (token && strlen(token) > 500)) {
        curl_easy_cleanup(c);
        return sbx_error_set(err, text && c ? EINVAL : ENOMEM, "/init: its request");
    }
    snprintf(url, sizeof(url), strchr(ip, ':') ? "http://[%s]:%d/init" : "http://%s:%d/init", ip,
             port);
    snprintf(auth, sizeof(auth), "X-Access-Token: %s", token ? token : "");
    h = curl_slist_append(NULL, "Content-Type: application/json");
    h2 = h && token ? curl_slist_append(h, auth) : h;
    if (!h2) {
        curl_slist_free_all(h);
        curl_easy_cleanup(c);
        return sbx_error_set(err, ENOMEM, "/init: its headers");
    }
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, text);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*"); /* the pod, never through a proxy */
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, keep);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &a);
    rc = curl_easy_perform(c);
    if (rc == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    if (rc != CURLE_OK)
        return sbx_error_set(err, EIO, "/init at %s:%d: %s", ip, port, curl_easy_strerror(rc));
    if (status < 200 || status >= 300)
        return sbx_error_set(err, EIO, "/init at %s:%d answered %ld: %s", ip, port, status, a.text);
    return 0;
}
