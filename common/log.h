/* Logging: one line per event on stderr, text or JSON. */
#pragma once

#include <stdbool.h>

enum sbx_log_level {
    SBX_LOG_ERROR = 0,
    SBX_LOG_WARN,
    SBX_LOG_INFO,
    SBX_LOG_DEBUG,
};

extern enum sbx_log_level sbx_log_max_level;
extern bool sbx_log_json;
/* The program named in text lines, set by its main ("sandboxd"); NULL: the name it was started
 * as. */
extern const char *sbx_log_name;

/* Parses "error", "warn", "info" or "debug"; returns 0 or -EINVAL. */
int sbx_log_parse_level(const char *s, enum sbx_log_level *ret);

/* Writes one line; errnum > 0 appends strerror(errnum). */
void sbx_log_write(enum sbx_log_level level, int errnum, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define sbx_log(level, errnum, ...)                                                                \
    do {                                                                                           \
        if ((level) <= sbx_log_max_level)                                                          \
            sbx_log_write((level), (errnum), __VA_ARGS__);                                         \
    } while (0)

#define log_error(errnum, ...) sbx_log(SBX_LOG_ERROR, errnum, __VA_ARGS__)
#define log_warn(errnum, ...)  sbx_log(SBX_LOG_WARN, errnum, __VA_ARGS__)
#define log_info(...)          sbx_log(SBX_LOG_INFO, 0, __VA_ARGS__)
#define log_debug(...)         sbx_log(SBX_LOG_DEBUG, 0, __VA_ARGS__)
