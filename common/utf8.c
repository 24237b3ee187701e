#include "utf8.h"

#include <stdlib.h>
#include <string.h>

size_t sbx_utf8_char(const unsigned char *p)
{
    unsigned c = *p, n, min, cp;

    if (c < 0x80)
        return c ? 1 : 0;
    if (c >= 0xc2 && c <= 0xdf)
        n = 1, min = 0x80, cp = c & 0x1f;
    else if (c >= 0xe0 && c <= 0xef)
        n = 2, min = 0x800, cp = c & 0x0f;
    else if (c >= 0xf0 && c <= 0xf4)
        n = 3, min = 0x10000, cp = c & 0x07;
    else
        return 0;
    for (unsigned i = 1; i <= n; i++) {
        if ((p[i] & 0xc0) != 0x80) /* a NUL stops here too */
            return 0;
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n + 1;
}

bool sbx_utf8_valid(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n;

    while (*p) {
        if ((n = sbx_utf8_char(p)) == 0)
            return false;
        p += n;
    }
    return true;
}

char *sbx_utf8_sanitize(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    char *out = malloc(strlen(s) * 3 + 1), *o = out; /* each bad byte: 3 bytes of U+FFFD */

    if (!out)
        return NULL;
    while (*p) {
        size_t n = sbx_utf8_char(p);
        if (n) {
            memcpy(o, p, n);
            o += n;
            p += n;
        } else {
            memcpy(o, "\xef\xbf\xbd", 3);
            o += 3;
            p++;
        }
    }
    *o = '\0';
    return out;
}
