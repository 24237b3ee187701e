#include "yaml_json.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define MAX_DEPTH 64

struct parser {
    yaml_parser_t p;
    struct sbx_error *err;
};

static int fail(struct parser *ps, const char *what)
{
    if (ps->p.error != YAML_NO_ERROR)
        return sbx_error_set(ps->err, EINVAL, "yaml: %s at line %zu",
                             ps->p.problem ? ps->p.problem : "syntax error",
                             ps->p.problem_mark.line + 1);
    return sbx_error_set(ps->err, EINVAL, "yaml: %s", what);
}

static json_t *scalar(const yaml_event_t *ev)
{
    const char *v = (const char *)ev->data.scalar.value;
    size_t len = ev->data.scalar.length;

    if (ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
        if (!strcmp(v, "true"))
            return json_true();
        if (!strcmp(v, "false"))
            return json_false();
        if (!strcmp(v, "null") || !strcmp(v, "~") || len == 0)
            return json_null();
        char *end;
        errno = 0;
        long long n = strtoll(v, &end, 10);
        if (*end == '\0' && errno == 0 && (v[0] == '-' || (v[0] >= '0' && v[0] <= '9')))
            return json_integer(n);
    }
    return json_stringn(v, len);
}

static int parse_node(struct parser *ps, yaml_event_t *ev, int depth, json_t **ret);

/* Reads events until the end of the collection opened by the caller. */
static int parse_collection(struct parser *ps, bool mapping, int depth, json_t **ret)
{
    json_t *out = mapping ? json_object() : json_array();
    yaml_event_t ev;
    int r;

    if (!out)
        return sbx_error_set(ps->err, ENOMEM, "yaml");
    for (;;) {
        json_t *key = NULL, *val = NULL;
        if (!yaml_parser_parse(&ps->p, &ev)) {
            json_decref(out);
            return fail(ps, "parse");
        }
        if (ev.type == (mapping ? YAML_MAPPING_END_EVENT : YAML_SEQUENCE_END_EVENT)) {
            yaml_event_delete(&ev);
            break;
        }
        r = parse_node(ps, &ev, depth + 1, mapping ? &key : &val);
        if (r >= 0 && mapping) {
            if (!yaml_parser_parse(&ps->p, &ev))
                r = fail(ps, "parse");
            else
                r = parse_node(ps, &ev, depth + 1, &val);
        }
        if (r >= 0 && mapping && !json_is_string(key))
            r = sbx_error_set(ps->err, EINVAL, "yaml: mapping key is not a string");
        if (r >= 0)
            r = mapping ? json_object_set_new(out, json_string_value(key), val)
                        : json_array_append_new(out, val);
        else
            json_decref(val);
        json_decref(key);
        if (r < 0) {
            json_decref(out);
            return r == -1 ? sbx_error_set(ps->err, ENOMEM, "yaml") : r;
        }
    }
    *ret = out;
    return 0;
}

/* Consumes ev (already parsed) and whatever belongs to it. */
static int parse_node(struct parser *ps, yaml_event_t *ev, int depth, json_t **ret)
{
    yaml_event_type_t type = ev->type;
    int r = 0;

    if (depth > MAX_DEPTH) {
        yaml_event_delete(ev);
        return sbx_error_set(ps->err, EINVAL, "yaml: nested deeper than %d", MAX_DEPTH);
    }
    switch (type) {
    case YAML_SCALAR_EVENT:
        *ret = scalar(ev);
        if (!*ret)
            r = sbx_error_set(ps->err, EINVAL, "yaml: scalar is not valid UTF-8");
        break;
    case YAML_MAPPING_START_EVENT:
    case YAML_SEQUENCE_START_EVENT:
        yaml_event_delete(ev);
        return parse_collection(ps, type == YAML_MAPPING_START_EVENT, depth, ret);
    case YAML_ALIAS_EVENT:
        r = sbx_error_set(ps->err, EINVAL, "yaml: aliases are not supported");
        break;
    default:
        r = sbx_error_set(ps->err, EINVAL, "yaml: unexpected event %d", (int)type);
    }
    yaml_event_delete(ev);
    return r;
}

int sbx_yaml_to_json(const char *buf, size_t len, json_t **ret, struct sbx_error *err)
{
    struct parser ps = {.err = err};
    yaml_event_t ev;
    int r = -EINVAL;

    if (!yaml_parser_initialize(&ps.p))
        return sbx_error_set(err, ENOMEM, "yaml");
    yaml_parser_set_input_string(&ps.p, (const unsigned char *)buf, len);
    /* stream start, document start, then the root node */
    for (;;) {
        if (!yaml_parser_parse(&ps.p, &ev)) {
            r = fail(&ps, "parse");
            break;
        }
        if (ev.type == YAML_STREAM_START_EVENT || ev.type == YAML_DOCUMENT_START_EVENT) {
            yaml_event_delete(&ev);
            continue;
        }
        if (ev.type == YAML_STREAM_END_EVENT) {
            yaml_event_delete(&ev);
            r = sbx_error_set(err, EINVAL, "yaml: empty document");
            break;
        }
        r = parse_node(&ps, &ev, 0, ret);
        break;
    }
    yaml_parser_delete(&ps.p);
    return r;
}
