#define _GNU_SOURCE
#include "grpc_reflection.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "google/protobuf/descriptor.pb-c.h"
#include "grpc/reflection/v1/reflection.pb-c.h"
#include "pb_check.h"

#define MAX_FILES 64

struct symbol {
    char *name; /* fully qualified, no leading dot */
    size_t file;
};

struct sbx_reflection {
    Google__Protobuf__FileDescriptorSet *set;
    ProtobufCBinaryData *files; /* each FileDescriptorProto serialized */
    struct symbol *symbols;
    size_t n_symbols, cap_symbols;
    char **services;
    size_t n_services;
};

static int add_symbol(struct sbx_reflection *r, const char *scope, const char *name, size_t file)
{
    struct symbol *s;

    if (r->n_symbols == r->cap_symbols) {
        size_t cap = r->cap_symbols ? r->cap_symbols * 2 : 64;
        s = realloc(r->symbols, cap * sizeof(*s));
        if (!s)
            return -ENOMEM;
        r->symbols = s;
        r->cap_symbols = cap;
    }
    s = &r->symbols[r->n_symbols];
    if (asprintf(&s->name, "%s%s%s", scope, scope[0] ? "." : "", name) < 0)
        return -ENOMEM;
    s->file = file;
    r->n_symbols++;
    return 0;
}

static int add_message(struct sbx_reflection *r, const char *scope,
                       const Google__Protobuf__DescriptorProto *m, size_t file)
{
    int rc = add_symbol(r, scope, m->name, file);
    const char *full;

    if (rc < 0)
        return rc;
    full = r->symbols[r->n_symbols - 1].name;
    for (size_t i = 0; i < m->n_nested_type && rc == 0; i++)
        rc = add_message(r, full, m->nested_type[i], file);
    for (size_t i = 0; i < m->n_enum_type && rc == 0; i++)
        rc = add_symbol(r, full, m->enum_type[i]->name, file);
    return rc;
}

static int index_file(struct sbx_reflection *r, size_t idx)
{
    const Google__Protobuf__FileDescriptorProto *f = r->set->file[idx];
    const char *pkg = f->package ? f->package : "";
    int rc = 0;

    for (size_t i = 0; i < f->n_message_type && rc == 0; i++)
        rc = add_message(r, pkg, f->message_type[i], idx);
    for (size_t i = 0; i < f->n_enum_type && rc == 0; i++)
        rc = add_symbol(r, pkg, f->enum_type[i]->name, idx);
    for (size_t i = 0; i < f->n_service && rc == 0; i++) {
        const Google__Protobuf__ServiceDescriptorProto *s = f->service[i];
        char **sv = realloc(r->services, (r->n_services + 1) * sizeof(char *));
        if (!sv)
            return -ENOMEM;
        r->services = sv;
        rc = add_symbol(r, pkg, s->name, idx);
        if (rc < 0)
            return rc;
        r->services[r->n_services++] = r->symbols[r->n_symbols - 1].name;
        /* The service's name, copied: adding symbols may move the array that holds it. */
        char *svc = strdup(r->symbols[r->n_symbols - 1].name);
        if (!svc)
            return -ENOMEM;
        for (size_t j = 0; j < s->n_method && rc == 0; j++)
            rc = add_symbol(r, svc, s->method[j]->name, idx);
        free(svc);
    }
    return rc;
}

int sbx_reflection_new(struct sbx_reflection **ret, const uint8_t *set, size_t len,
                       struct sbx_error *err)
{
    struct sbx_reflection *r = calloc(1, sizeof(*r));
    int rc = 0;

    if (!r)
        return sbx_error_set(err, ENOMEM, "allocate reflection");
    r->set = google__protobuf__file_descriptor_set__unpack(NULL, len, set);
    if (!r->set || r->set->n_file > MAX_FILES) {
        sbx_reflection_free(r);
        return sbx_error_set(err, EINVAL, "embedded descriptor set is malformed");
    }
    r->files = calloc(r->set->n_file, sizeof(*r->files));
    if (!r->files)
        rc = -ENOMEM;
    for (size_t i = 0; i < r->set->n_file && rc == 0; i++) {
        const ProtobufCMessage *m = &r->set->file[i]->base;
        r->files[i].len = protobuf_c_message_get_packed_size(m);
        r->files[i].data = malloc(r->files[i].len ? r->files[i].len : 1);
        if (!r->files[i].data) {
            rc = -ENOMEM;
            break;
        }
        protobuf_c_message_pack(m, r->files[i].data);
        rc = index_file(r, i);
    }
    if (rc < 0) {
        sbx_reflection_free(r);
        return sbx_error_set(err, -rc, "index descriptors");
    }
    *ret = r;
    return 0;
}

void sbx_reflection_free(struct sbx_reflection *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n_symbols; i++)
        free(r->symbols[i].name);
    free(r->symbols);
    free(r->services);
    if (r->files && r->set)
        for (size_t i = 0; i < r->set->n_file; i++)
            free(r->files[i].data);
    free(r->files);
    if (r->set)
        google__protobuf__file_descriptor_set__free_unpacked(r->set, NULL);
    free(r);
}

static long find_file(const struct sbx_reflection *r, const char *name)
{
    for (size_t i = 0; i < r->set->n_file; i++)
        if (strcmp(r->set->file[i]->name, name) == 0)
            return (long)i;
    return -1;
}

static long find_symbol(const struct sbx_reflection *r, const char *name)
{
    if (name[0] == '.')
        name++;
    for (size_t i = 0; i < r->n_symbols; i++)
        if (strcmp(r->symbols[i].name, name) == 0)
            return (long)r->symbols[i].file;
    return -1;
}

/* Collects file idx and its transitive dependencies, each once, the file itself first. */
static void collect(const struct sbx_reflection *r, size_t idx, bool *seen, size_t *out, size_t *n)
{
    const Google__Protobuf__FileDescriptorProto *f = r->set->file[idx];

    if (seen[idx])
        return;
    seen[idx] = true;
    out[(*n)++] = idx;
    for (size_t i = 0; i < f->n_dependency; i++) {
        long d = find_file(r, f->dependency[i]);
        if (d >= 0)
            collect(r, (size_t)d, seen, out, n);
    }
}

/* Builds the answer to one request into resp; strings point into r or req. */
struct answer {
    Grpc__Reflection__V1__ServerReflectionResponse resp;
    Grpc__Reflection__V1__FileDescriptorResponse fds;
    Grpc__Reflection__V1__ListServiceResponse list;
    Grpc__Reflection__V1__ServiceResponse svc[MAX_FILES];
    Grpc__Reflection__V1__ServiceResponse *svcp[MAX_FILES];
    Grpc__Reflection__V1__ExtensionNumberResponse ext;
    Grpc__Reflection__V1__ErrorResponse error;
    ProtobufCBinaryData files[MAX_FILES];
    char msg[256];
};

static void answer_error(struct answer *a, grpc_status_code code, const char *what,
                         const char *name)
{
    int n = snprintf(a->msg, sizeof(a->msg), "%s not found: ", what);
    size_t len = strlen(name), room = sizeof(a->msg) - 1 - (size_t)n;

    /* A long name is cut before a character, not inside one: the message stays UTF-8. */
    if (len > room)
        for (len = room; len && ((unsigned char)name[len] & 0xc0) == 0x80; len--)
            ;
    memcpy(a->msg + n, name, len);
    a->msg[(size_t)n + len] = '\0';
    grpc__reflection__v1__error_response__init(&a->error);
    a->error.error_code = (int32_t)code;
    a->error.error_message = a->msg;
    a->resp.message_response_case =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ERROR_RESPONSE;
    a->resp.error_response = &a->error;
}

static void answer_files(const struct sbx_reflection *r, struct answer *a, long idx)
{
    bool seen[MAX_FILES] = {0};
    size_t list[MAX_FILES], n = 0;

    collect(r, (size_t)idx, seen, list, &n);
    grpc__reflection__v1__file_descriptor_response__init(&a->fds);
    for (size_t i = 0; i < n; i++)
        a->files[i] = r->files[list[i]];
    a->fds.n_file_descriptor_proto = n;
    a->fds.file_descriptor_proto = a->files;
    a->resp.message_response_case =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_FILE_DESCRIPTOR_RESPONSE;
    a->resp.file_descriptor_response = &a->fds;
}

static void answer(const struct sbx_reflection *r, Grpc__Reflection__V1__ServerReflectionRequest *q,
                   struct answer *a)
{
    long idx;

    grpc__reflection__v1__server_reflection_response__init(&a->resp);
    a->resp.valid_host = q->host;
    a->resp.original_request = q;
    switch (q->message_request_case) {
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_BY_FILENAME:
        idx = find_file(r, q->file_by_filename);
        if (idx < 0)
            answer_error(a, GRPC_STATUS_NOT_FOUND, "file", q->file_by_filename);
        else
            answer_files(r, a, idx);
        break;
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_SYMBOL:
        idx = find_symbol(r, q->file_containing_symbol);
        if (idx < 0)
            answer_error(a, GRPC_STATUS_NOT_FOUND, "symbol", q->file_containing_symbol);
        else
            answer_files(r, a, idx);
        break;
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_ALL_EXTENSION_NUMBERS_OF_TYPE:
        if (find_symbol(r, q->all_extension_numbers_of_type) < 0) {
            answer_error(a, GRPC_STATUS_NOT_FOUND, "type", q->all_extension_numbers_of_type);
            break;
        }
        /* We declare no extensions. */
        grpc__reflection__v1__extension_number_response__init(&a->ext);
        a->ext.base_type_name = q->all_extension_numbers_of_type;
        a->resp.message_response_case =
            GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ALL_EXTENSION_NUMBERS_RESPONSE;
        a->resp.all_extension_numbers_response = &a->ext;
        break;
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_LIST_SERVICES:
        grpc__reflection__v1__list_service_response__init(&a->list);
        for (size_t i = 0; i < r->n_services && i < MAX_FILES; i++) {
            grpc__reflection__v1__service_response__init(&a->svc[i]);
            a->svc[i].name = r->services[i];
            a->svcp[i] = &a->svc[i];
            a->list.n_service++;
        }
        a->list.service = a->svcp;
        a->resp.message_response_case =
            GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_LIST_SERVICES_RESPONSE;
        a->resp.list_services_response = &a->list;
        break;
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_EXTENSION:
        answer_error(a, GRPC_STATUS_NOT_FOUND, "extension",
                     q->file_containing_extension ? q->file_containing_extension->containing_type
                                                  : "");
        break;
    default:
        grpc__reflection__v1__error_response__init(&a->error);
        a->error.error_code = GRPC_STATUS_INVALID_ARGUMENT;
        a->error.error_message = (char *)"invalid message_request";
        a->resp.message_response_case =
            GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ERROR_RESPONSE;
        a->resp.error_response = &a->error;
        break;
    }
}

int sbx_reflection_answer(const struct sbx_reflection *r,
                          Grpc__Reflection__V1__ServerReflectionRequest *q, grpc_byte_buffer **out)
{
    struct answer *a;

    if (!sbx_pb_utf8_valid(&q->base))
        return -EINVAL;
    a = malloc(sizeof(*a));
    if (!a)
        return -ENOMEM;
    answer(r, q, a);
    *out = sbx_grpc_pack(&a->resp.base);
    free(a);
    return *out ? 0 : -ENOMEM;
}

/* One ServerReflectionInfo stream: receive a request, send its answer, repeat. */
struct rstream {
    struct sbx_grpc_tag recv_tag, send_tag, close_tag;
    struct sbx_reflection *r;
    struct sbx_grpc_req *req;
    grpc_byte_buffer *in, *out;
    grpc_slice details;
    int refs;
    int cancelled;
    bool finished;
};

static void rstream_unref(struct rstream *s)
{
    if (__atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    if (s->in)
        grpc_byte_buffer_destroy(s->in);
    if (s->out)
        grpc_byte_buffer_destroy(s->out);
    sbx_grpc_req_free(s->req);
    free(s);
}

static void rstream_batch(struct rstream *s, grpc_op *ops, size_t n, struct sbx_grpc_tag *tag)
{
    __atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED);
    if (sbx_grpc_start_batch(s->req, ops, n, tag) != GRPC_CALL_OK)
        rstream_unref(s);
}

static void rstream_recv(struct rstream *s, bool initial)
{
    grpc_op ops[2];
    size_t n = 0;

    memset(ops, 0, sizeof(ops));
    if (initial)
        ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[n].op = GRPC_OP_RECV_MESSAGE;
    ops[n++].data.recv_message.recv_message = &s->in;
    rstream_batch(s, ops, n, &s->recv_tag);
}

static void rstream_finish(struct rstream *s, grpc_status_code code, const char *msg)
{
    grpc_op op;

    memset(&op, 0, sizeof(op));
    s->finished = true;
    s->details = grpc_slice_from_static_string(msg);
    op.op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    op.data.send_status_from_server.status = code;
    op.data.send_status_from_server.status_details = &s->details;
    rstream_batch(s, &op, 1, &s->send_tag);
}

static void rstream_received(struct sbx_grpc_tag *tag, bool ok)
{
    struct rstream *s = (struct rstream *)((char *)tag - offsetof(struct rstream, recv_tag));
    _cleanup_pb_ ProtobufCMessage *m = NULL;
    grpc_op op;
    int r;

    if (!ok) {
        rstream_unref(s);
        return;
    }
    if (!s->in) {
        rstream_finish(s, GRPC_STATUS_OK, ""); /* the client is done */
        rstream_unref(s);
        return;
    }
    m = sbx_grpc_unpack(s->in, &grpc__reflection__v1__server_reflection_request__descriptor);
    grpc_byte_buffer_destroy(s->in);
    s->in = NULL;
    r = m ? sbx_reflection_answer(s->r, (Grpc__Reflection__V1__ServerReflectionRequest *)m, &s->out)
          : -EBADMSG;
    if (r < 0) {
        rstream_finish(s,
                       r == -ENOMEM ? GRPC_STATUS_RESOURCE_EXHAUSTED : GRPC_STATUS_INVALID_ARGUMENT,
                       r == -ENOMEM   ? "out of memory"
                       : r == -EINVAL ? "string field contains invalid UTF-8"
                                      : "malformed ServerReflectionRequest");
        rstream_unref(s);
        return;
    }
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_SEND_MESSAGE;
    op.data.send_message.send_message = s->out;
    rstream_batch(s, &op, 1, &s->send_tag);
    rstream_unref(s);
}

static void rstream_sent(struct sbx_grpc_tag *tag, bool ok)
{
    struct rstream *s = (struct rstream *)((char *)tag - offsetof(struct rstream, send_tag));

    if (s->out)
        grpc_byte_buffer_destroy(s->out);
    s->out = NULL;
    if (ok && !s->finished)
        rstream_recv(s, false);
    rstream_unref(s);
}

static void rstream_closed(struct sbx_grpc_tag *tag, bool ok)
{
    struct rstream *s = (struct rstream *)((char *)tag - offsetof(struct rstream, close_tag));

    (void)ok;
    rstream_unref(s);
}

static void handle_info(struct sbx_grpc_req *req)
{
    struct rstream *s = calloc(1, sizeof(*s));
    grpc_op op;

    if (!s) {
        sbx_grpc_reply(req, NULL, GRPC_STATUS_RESOURCE_EXHAUSTED, "out of memory");
        return;
    }
    s->recv_tag.fn = rstream_received;
    s->send_tag.fn = rstream_sent;
    s->close_tag.fn = rstream_closed;
    s->r = req->method_data;
    s->req = req;
    s->refs = 1;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    op.data.recv_close_on_server.cancelled = &s->cancelled;
    rstream_batch(s, &op, 1, &s->close_tag);
    rstream_recv(s, true);
    rstream_unref(s);
}

int sbx_grpc_reflection_register(struct sbx_grpc *srv, struct sbx_reflection *r,
                                 struct sbx_error *err)
{
    const struct sbx_grpc_method methods[] = {
        {"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", true, handle_info, r, 2},
        {"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", true, handle_info, r, 2},
    };

    return sbx_grpc_register(srv, methods, SBX_ARRAY_SIZE(methods), err);
}
