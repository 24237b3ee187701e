#define _GNU_SOURCE /* program_invocation_short_name */

#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum sbx_log_level sbx_log_max_level = SBX_LOG_INFO;
bool sbx_log_json;
const char *sbx_log_name; /* NULL: the name the program was started as */

static const char *const level_names[] = {"error", "warn", "info", "debug"};

int sbx_log_parse_level(const char *s, enum sbx_log_level *ret)
{
    for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
        if (strcmp(s, level_names[i]) == 0) {
            *ret = (enum sbx_log_level)i;
            return 0;
        }
    }
    return -EINVAL;
}

/* Appends s to buf as a JSON string body (without quotes). */
static size_t json_escape(char *buf, size_t size, size_t pos, const char *s)
{
    for (; *s && pos + 7 < size; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            buf[pos++] = '\\';
            buf[pos++] = (char)c;
        } else if (c < 0x20) {
            pos += (size_t)snprintf(buf + pos, size - pos, "\\u%04x", c);
        } else {
            buf[pos++] = (char)c;
        }
    }
    return pos;
}

void sbx_log_write(enum sbx_log_level level, int errnum, const char *fmt, ...)
{
    char msg[1024];
    char line[2304];
    char stamp[40];
    struct timespec ts;
    struct tm tm;
    va_list ap;
    int n;
    size_t len;

    va_start(ap, fmt);
    n = vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if (errnum > 0)
        snprintf(msg + strlen(msg), sizeof(msg) - strlen(msg), ": %s", strerror(errnum));

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);

    if (sbx_log_json) {
        len = (size_t)snprintf(line, sizeof(line),
                               "{\"time\":\"%s.%03ldZ\",\"level\":\"%s\",\"msg\":\"", stamp,
                               ts.tv_nsec / 1000000, level_names[level]);
        len = json_escape(line, sizeof(line), len, msg);
        len += (size_t)snprintf(line + len, sizeof(line) - len, "\"}\n");
    } else {
        len = (size_t)snprintf(
            line, sizeof(line), "%s.%03ldZ %s %s: %s\n", stamp, ts.tv_nsec / 1000000,
            sbx_log_name ? sbx_log_name : program_invocation_short_name, level_names[level], msg);
    }
    if (len >= sizeof(line))
        len = sizeof(line) - 1;
    (void)!write(STDERR_FILENO, line, len);
}
