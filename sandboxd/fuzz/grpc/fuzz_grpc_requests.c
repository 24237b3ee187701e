/* libFuzzer target for the gRPC request handlers' decode and validation layer, every request
 * type of process.v1.ProcessService and sandboxd.v1.Processes (and health's and reflection's
 * requests): arbitrary bytes as a message, decoded by sbx_grpc_unpack from a gRPC byte buffer
 * as the handlers receive it, then what the handlers check before anything runs: the UTF-8 of
 * every string (sbx_utf8_valid), a ProcessConfig's launch (sbx_process_launch_from), a
 * ProcessSpec's credentials and limits (sbx_spec_extras_build) and launch (sbx_launch_build),
 * with cwd resolved in a box (fuzz_box.h), and reflection's answer (sbx_reflection_answer). No
 * process is started.
 *
 * Input: one byte choosing the request type, then the message. Checked:
 *   - a message with a string that protobuf-c hands over cut at a NUL byte (told by a
 *     recording allocator: it allocates each string with its length + 1) is refused;
 *   - a decoded message packs and decodes back to the same bytes (protobuf-c round trip);
 *   - sbx_utf8_valid agrees on every string field with a decoder written here from
 *     Unicode's table of well-formed byte sequences;
 *   - a launch that succeeds had valid UTF-8, a command and variable names neither empty nor
 *     holding '='; its argv is the command, its environment holds each request variable (the
 *     last of a repeated key) and one PWD, its working directory is beneath the root; one that
 * fails carries -errno and a message, and invalid UTF-8, no command or a bad name fail with
 * -EINVAL;
 *   - accepted credentials and limits are within their bounds (groups, rlimits, soft <= hard),
 *     and are what the process table is handed;
 *   - reflection answers exactly the requests whose strings are UTF-8, with a response that
 *     decodes and whose strings are UTF-8 too;
 *   - no fd leaks. */
#define _GNU_SOURCE
#include <errno.h>
#include <grpc/byte_buffer.h>
#include <grpc/slice.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "cleanup.h"
#include "fuzz_box.h"
#include "grpc/health/v1/health.pb-c.h"
#include "grpc/reflection/v1/reflection.pb-c.h"
#include "grpc_launch.h"
#include "grpc_process.h"
#include "grpc_reflection.h"
#include "grpc_server.h"
#include "grpc_spec.h"
#include "pb_check.h"
#include "process/v1/process.pb-c.h"
#include "sandboxd/v1/processes.pb-c.h"
#include "utf8.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum kind { PLAIN, P_CONFIG_START, P_CONFIG_EXECUTE, S_SPAWN, S_RUN, REFLECTION };

static const struct {
    const ProtobufCMessageDescriptor *d;
    enum kind kind;
} types[] = {
    {&process__v1__start_request__descriptor, P_CONFIG_START},
    {&process__v1__execute_request__descriptor, P_CONFIG_EXECUTE},
    {&process__v1__write_stdin_request__descriptor, PLAIN},
    {&process__v1__send_signal_request__descriptor, PLAIN},
    {&process__v1__resize_ttyrequest__descriptor, PLAIN},
    {&sandboxd__v1__spawn_request__descriptor, S_SPAWN},
    {&sandboxd__v1__run_request__descriptor, S_RUN},
    {&sandboxd__v1__list_request__descriptor, PLAIN},
    {&sandboxd__v1__get_request__descriptor, PLAIN},
    {&sandboxd__v1__attach_request__descriptor, PLAIN},
    {&sandboxd__v1__wait_request__descriptor, PLAIN},
    {&sandboxd__v1__signal_request__descriptor, PLAIN},
    {&sandboxd__v1__write_stdin_request__descriptor, PLAIN},
    {&sandboxd__v1__resize_request__descriptor, PLAIN},
    {&sandboxd__v1__remove_request__descriptor, PLAIN},
    {&grpc__health__v1__health_check_request__descriptor, PLAIN},
    {&grpc__reflection__v1__server_reflection_request__descriptor, REFLECTION},
};

/* Unicode 15, table 3-7: the well-formed UTF-8 byte sequences. */
static bool ref_utf8(const char *str)
{
    const unsigned char *s = (const unsigned char *)str;

    while (*s) {
        unsigned char c = *s, lo = 0x80, hi = 0xbf;
        int n;

        if (c <= 0x7f) {
            s++;
            continue;
        }
        if (c >= 0xc2 && c <= 0xdf)
            n = 1;
        else if (c == 0xe0)
            n = 2, lo = 0xa0;
        else if ((c >= 0xe1 && c <= 0xec) || c == 0xee || c == 0xef)
            n = 2;
        else if (c == 0xed)
            n = 2, hi = 0x9f;
        else if (c == 0xf0)
            n = 3, lo = 0x90;
        else if (c >= 0xf1 && c <= 0xf3)
            n = 3;
        else if (c == 0xf4)
            n = 3, hi = 0x8f;
        else
            return false;
        if (s[1] < lo || s[1] > hi)
            return false;
        for (int i = 2; i <= n; i++)
            if (s[i] < 0x80 || s[i] > 0xbf)
                return false;
        s += n + 1;
    }
    return true;
}

/* Checks every string field of m (set oneof members, repeated ones, nested messages) with
 * both validators; returns whether all are valid. */
static bool walk_strings(const ProtobufCMessage *m)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    const char *base = (const char *)m;
    bool all = true;

    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        const void *member = base + f->offset;
        size_t n = 1;
        const void *const *items = member;

        if (f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
            *(const uint32_t *)(base + f->quantifier_offset) != f->id)
            continue;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            n = *(const size_t *)(base + f->quantifier_offset);
            items = *(const void *const *const *)member;
        }
        for (size_t k = 0; k < n; k++) {
            const void *v = items[k];

            if (!v)
                continue;
            if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
                all &= walk_strings(v);
            } else {
                bool ours = sbx_utf8_valid(v), ref = ref_utf8(v);

                CHECK(ours == ref, "%s.%s: sbx_utf8_valid says %d, the reference %d", d->name,
                      f->name, ours, ref);
                all &= ref;
            }
        }
    }
    return all;
}

static void round_trip(const ProtobufCMessage *m)
{
    size_t n = protobuf_c_message_get_packed_size(m), n2;
    uint8_t *buf = malloc(n ? n : 1), *buf2;
    ProtobufCMessage *m2;

    CHECK(buf && protobuf_c_message_check(m), "a decoded %s does not check", m->descriptor->name);
    CHECK(protobuf_c_message_pack(m, buf) == n, "packed size");
    m2 = protobuf_c_message_unpack(m->descriptor, NULL, n, buf);
    CHECK(m2, "%s packed into %zu bytes that do not decode", m->descriptor->name, n);
    n2 = protobuf_c_message_get_packed_size(m2);
    buf2 = malloc(n2 ? n2 : 1);
    CHECK(buf2 && protobuf_c_message_pack(m2, buf2) == n2, "packed size");
    CHECK(n == n2 && memcmp(buf, buf2, n) == 0, "%s changed in a round trip", m->descriptor->name);
    protobuf_c_message_free_unpacked(m2, NULL);
    free(buf);
    free(buf2);
}

/* Each allocation protobuf-c makes while decoding, with its size. */
struct rec {
    void *p;
    size_t n;
};

struct recs {
    struct rec *v;
    size_t n, cap;
};

static void *rec_alloc(void *data, size_t n)
{
    struct recs *r = data;
    void *p = malloc(n ? n : 1);

    CHECK(p, "out of memory");
    if (r->n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 64;
        r->v = realloc(r->v, r->cap * sizeof(*r->v));
        CHECK(r->v, "out of memory");
    }
    r->v[r->n++] = (struct rec){p, n};
    return p;
}

static void rec_free(void *data, void *p)
{
    struct recs *r = data;

    for (size_t i = 0; p && i < r->n; i++)
        if (r->v[i].p == p)
            r->v[i].p = NULL;
    free(p);
}

/* Whether a string of m was allocated longer than it reads: cut at a NUL. */
static bool cut_at_nul(const ProtobufCMessage *m, const struct recs *r)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    const char *base = (const char *)m;

    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        const void *const *items = (const void *const *)(base + f->offset);
        size_t n = 1;

        if (f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
            *(const uint32_t *)(base + f->quantifier_offset) != f->id)
            continue;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            n = *(const size_t *)(base + f->quantifier_offset);
            items = *(const void *const *const *)(base + f->offset);
        }
        for (size_t k = 0; k < n; k++) {
            if (!items[k])
                continue;
            if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
                if (cut_at_nul(items[k], r))
                    return true;
                continue;
            }
            for (size_t j = 0; j < r->n; j++)
                if (r->v[j].p == items[k] && r->v[j].n != strlen(items[k]) + 1)
                    return true;
        }
    }
    return false;
}

/* A request protobuf-c would hand over with a string cut at a NUL is refused. */
static void check_nul(const ProtobufCMessageDescriptor *d, const uint8_t *data, size_t size,
                      const ProtobufCMessage *accepted)
{
    struct recs r = {0};
    ProtobufCAllocator a = {.alloc = rec_alloc, .free = rec_free, .allocator_data = &r};
    ProtobufCMessage *m = protobuf_c_message_unpack(d, &a, size, data);

    if (m) {
        CHECK(!accepted || !cut_at_nul(m, &r), "%s with a string cut at a NUL accepted", d->name);
        /* Refused while protobuf-c takes it whole: a NUL must be in there (in a string that a
         * later one of the same field replaced), or a field numbered 0. */
        CHECK(accepted || !sbx_pb_wellformed(m) || memchr(data, 0, size),
              "%s refused without a NUL", d->name);
        protobuf_c_message_free_unpacked(m, &a);
    }
    free(r.v);
}

static struct fuzz_box box;
static struct sbx_reflection *refl;

extern const uint8_t sbx_descriptor_set[];
extern const uint8_t sbx_descriptor_set_end[];

static void box_remove(void)
{
    fuzz_box_remove(&box, NULL);
    sbx_reflection_free(refl);
}

/* A reflection request is answered (a response that decodes, its strings UTF-8) exactly when
 * its own strings are UTF-8. */
static void check_reflection(ProtobufCMessage *q)
{
    bool valid = walk_strings(q);
    grpc_byte_buffer *out = NULL;
    ProtobufCMessage *resp;
    int r = sbx_reflection_answer(refl, (Grpc__Reflection__V1__ServerReflectionRequest *)q, &out);

    CHECK(r == (valid ? 0 : -EINVAL), "reflection answer: %d for a request with UTF-8 %d", r,
          valid);
    if (r < 0)
        return;
    resp = sbx_grpc_unpack(out, &grpc__reflection__v1__server_reflection_response__descriptor);
    grpc_byte_buffer_destroy(out);
    CHECK(resp, "the reflection answer does not decode");
    CHECK(walk_strings(resp), "the reflection answer holds a string that is not UTF-8");
    protobuf_c_message_free_unpacked(resp, NULL);
}

/* What a launch from command, env and cwd must have produced. */
struct want {
    char **command;
    size_t n_command;
    const char *const *keys, *const *values;
    size_t n_env;
    bool utf8;
};

/* Every variable name is neither empty nor holds '='. */
static bool keys_valid(const struct want *w)
{
    for (size_t i = 0; i < w->n_env; i++)
        if (!w->keys[i][0] || strchr(w->keys[i], '='))
            return false;
    return true;
}

static bool env_has(const struct sbx_launch *l, const char *key, const char *value)
{
    size_t kn = strlen(key);

    for (size_t i = l->n_daemon_env; i < l->n_env; i++)
        if (strncmp(l->envp[i], key, kn) == 0 && l->envp[i][kn] == '=' &&
            strcmp(l->envp[i] + kn + 1, value) == 0)
            return true;
    return false;
}

static void check_launch(int r, const struct sbx_launch *l, const struct sbx_error *err,
                         const struct want *w)
{
    size_t pwd = 0;

    if (r < 0) {
        CHECK(err->code == -r && err->msg[0], "launch: %d with code %d and message '%s'", r,
              err->code, err->msg);
        CHECK((w->n_command && w->utf8 && keys_valid(w)) || r == -EINVAL, "launch: %d, not -EINVAL",
              r);
        return;
    }
    CHECK(w->n_command && w->utf8 && keys_valid(w),
          "launched with %zu command words, UTF-8 %d, variable names valid %d", w->n_command,
          w->utf8, keys_valid(w));
    for (size_t i = 0; i < w->n_command; i++)
        CHECK(l->argv[i] == w->command[i], "argv[%zu]", i);
    CHECK(!l->argv[w->n_command], "argv not terminated");
    CHECK(l->envp && !l->envp[l->n_env], "envp not terminated");
    for (size_t i = 0; i < w->n_env; i++) {
        bool later = false;

        for (size_t j = i + 1; j < w->n_env; j++)
            later |= strcmp(w->keys[j], w->keys[i]) == 0;
        CHECK(later || env_has(l, w->keys[i], w->values[i]), "%s=%s missing", w->keys[i],
              w->values[i]);
    }
    for (size_t i = 0; i < l->n_env; i++)
        pwd += strncmp(l->envp[i], "PWD=", 4) == 0;
    CHECK(pwd == 1, "%zu PWD entries", pwd);
    fuzz_fd_under_root(&box, l->cwd_fd);
}

static void check_config(const Process__V1__ProcessConfig *c)
{
    struct sbx_launch l = {.cwd_fd = -1};
    struct sbx_error err = {0};
    const char **keys = NULL, **values = NULL;
    size_t n = c ? c->n_env_vars : 0;
    struct want w = {.command = c ? c->command : NULL,
                     .n_command = c ? c->n_command : 0,
                     .n_env = n,
                     .utf8 = !c || walk_strings(&c->base)};
    int r = sbx_process_launch_from(&box.root, c, &l, &err);

    keys = calloc(n + 1, sizeof(*keys));
    values = calloc(n + 1, sizeof(*values));
    CHECK(keys && values, "out of memory");
    for (size_t i = 0; i < n; i++) {
        keys[i] = c->env_vars[i]->key;
        values[i] = c->env_vars[i]->value;
    }
    w.keys = keys;
    w.values = values;
    check_launch(r, &l, &err, &w);
    sbx_launch_release(&l);
    free(keys);
    free(values);
}

static void check_spec(const Sandboxd__V1__ProcessSpec *spec)
{
    struct sbx_launch_config lc = {0};
    struct sbx_launch l = {.cwd_fd = -1};
    struct sbx_spec_extras x = {0};
    struct sbx_proc_opts o = {0};
    struct sbx_error err = {0};
    struct want w = {0};
    int r;

    if (!spec)
        return; /* answered "spec is required" */
    r = sbx_spec_extras_build(spec, &o, &x, &err);
    if (r < 0) {
        CHECK(r == -EINVAL && err.code == EINVAL && err.msg[0], "extras: %d '%s'", r, err.msg);
    } else {
        const struct sbx_spawn_confine *cf = &o.confine;

        CHECK(spec->n_rlimits <= 64 && cf->n_rlimits == spec->n_rlimits, "%zu rlimits",
              spec->n_rlimits);
        for (size_t i = 0; i < spec->n_rlimits; i++) {
            const Sandboxd__V1__ResourceLimit *rl = spec->rlimits[i];

            CHECK(ref_utf8(rl->name) && sbx_rlimit_resource(rl->name) == cf->rlimits[i].resource,
                  "rlimit '%s' accepted", rl->name);
            CHECK(cf->rlimits[i].lim.rlim_cur <= cf->rlimits[i].lim.rlim_max,
                  "rlimit %s: soft above hard", rl->name);
        }
        CHECK(!spec->user || (cf->set_user && spec->user->n_groups <= 65536 &&
                              cf->n_groups == spec->user->n_groups && cf->uid == spec->user->uid &&
                              cf->gid == spec->user->gid),
              "credentials");
    }
    sbx_spec_extras_release(&x);
    if (r < 0)
        return;
    /* As start() in grpc_jobs.c goes on. */
    lc.command = spec->command;
    lc.n_command = spec->n_command;
    lc.cwd = spec->cwd;
    CHECK(sbx_launch_config_alloc(&lc, spec->n_env, &err) == 0, "alloc: %s", err.msg);
    SBX_LAUNCH_ENV(&lc, spec->env, spec->n_env);
    w.command = spec->command;
    w.n_command = spec->n_command;
    w.keys = lc.keys;
    w.values = lc.values;
    w.n_env = spec->n_env;
    walk_strings(&spec->base);
    /* The tag is checked before, with its own message, and is no part of the launch. */
    w.utf8 = ref_utf8(spec->cwd);
    for (size_t i = 0; i < spec->n_command; i++)
        w.utf8 &= ref_utf8(spec->command[i]);
    for (size_t i = 0; i < spec->n_env; i++)
        w.utf8 &= ref_utf8(spec->env[i]->key) && ref_utf8(spec->env[i]->value);
    r = sbx_launch_build(&box.root, &lc, &l, &err);
    check_launch(r, &l, &err, &w);
    sbx_launch_release(&l);
    sbx_launch_config_release(&lc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int fds = -1;
    ProtobufCMessage *m;
    grpc_byte_buffer *bb;
    grpc_slice s;
    size_t t;

    if (size < 1)
        return 0;
    if (fds < 0) {
        struct sbx_error err = {0};

        fuzz_box_make(&box);
        CHECK(sbx_reflection_new(&refl, sbx_descriptor_set,
                                 (size_t)(sbx_descriptor_set_end - sbx_descriptor_set), &err) == 0,
              "reflection: %s", err.msg);
        atexit(box_remove);
        fds = fuzz_count_fds();
    }
    t = data[0] % SBX_ARRAY_SIZE(types);
    s = grpc_slice_from_copied_buffer((const char *)data + 1, size - 1);
    bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);
    m = sbx_grpc_unpack(bb, types[t].d);
    grpc_byte_buffer_destroy(bb);
    check_nul(types[t].d, data + 1, size - 1, m);
    if (!m)
        return 0; /* answered "malformed ..." */
    round_trip(m);
    switch (types[t].kind) {
    case P_CONFIG_START:
        check_config(((Process__V1__StartRequest *)m)->config);
        break;
    case P_CONFIG_EXECUTE:
        check_config(((Process__V1__ExecuteRequest *)m)->config);
        break;
    case S_SPAWN:
        check_spec(((Sandboxd__V1__SpawnRequest *)m)->spec);
        break;
    case S_RUN:
        check_spec(((Sandboxd__V1__RunRequest *)m)->spec);
        break;
    case REFLECTION:
        check_reflection(m);
        break;
    default:
        walk_strings(m);
    }
    protobuf_c_message_free_unpacked(m, NULL);
    CHECK(fuzz_count_fds() == fds, "fd leak: %d open, %d before", fuzz_count_fds(), fds);
    return 0;
}
