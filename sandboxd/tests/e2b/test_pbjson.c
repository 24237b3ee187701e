/* pbjson (protobuf's JSON mapping) over E2B's messages: exact texts protojson writes for known
 * messages, the reader's accepted forms and each class of refusal, round trips checked on the
 * binary form. What the E2B protos lack comes from sbxtest.All (pbjson_test.proto: every scalar
 * type, maps of other keys, recursion) and descriptor.proto's messages (proto2, compiled into
 * sbx_proto: optional fields with has_, required fields). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "e2b/filesystem/filesystem.pb-c.h"
#include "e2b/process/process.pb-c.h"
#include "google/protobuf/descriptor.pb-c.h"
#include "pbjson.h"
#include "google/protobuf/duration.pb-c.h"
#include "pbjson_test.pb-c.h"
#include "tap.h"

static void free_msg(ProtobufCMessage *m)
{
    protobuf_c_message_free_unpacked(m, NULL);
}
SBX_DEFINE_CLEANUP(ProtobufCMessage *, free_msg)

#define _cleanup_msg_ _cleanup_(free_msgp)

/* m's binary form, malloc'ed. */
static uint8_t *packed(const ProtobufCMessage *m, size_t *len)
{
    *len = protobuf_c_message_get_packed_size(m);
    uint8_t *b = malloc(*len + 1);
    protobuf_c_message_pack(m, b);
    return b;
}

static bool same_binary(const ProtobufCMessage *a, const ProtobufCMessage *b)
{
    size_t la, lb;
    _cleanup_free_ uint8_t *pa = packed(a, &la);
    _cleanup_free_ uint8_t *pb = packed(b, &lb);
    return la == lb && memcmp(pa, pb, la) == 0;
}

/* m is written as want; reading that back gives m's binary form again. */
static void encodes_as(const ProtobufCMessage *m, const char *want, const char *what)
{
    _cleanup_free_ char *s = NULL;
    _cleanup_msg_ ProtobufCMessage *back = NULL;
    struct sbx_error err = {0};
    size_t len = 0;
    int r = sbx_pbjson_encode(m, &s, &len, &err);

    if (!ok(r == 0 && strcmp(s, want) == 0 && len == strlen(want), "%s: %s", what, want))
        printf("#   got %d %s (%s)\n", r, r == 0 ? s : "", err.msg);
    if (r < 0)
        return;
    r = sbx_pbjson_decode(m->descriptor, s, len, &back, &err);
    ok(r == 0 && same_binary(m, back), "%s: reads back (%s)", what, r ? err.msg : "");
}

static ProtobufCMessage *decodes(const ProtobufCMessageDescriptor *d, const char *text,
                                 const char *what)
{
    ProtobufCMessage *m = NULL;
    struct sbx_error err = {0};
    int r = sbx_pbjson_decode(d, text, strlen(text), &m, &err);

    if (!ok(r == 0 && m, "%s: read %s", what, text))
        printf("#   %d %s\n", r, err.msg);
    return m;
}

static void refused(const ProtobufCMessageDescriptor *d, const char *text, int code,
                    const char *msg_part, const char *what)
{
    ProtobufCMessage *m = NULL;
    struct sbx_error err = {0};
    int r = sbx_pbjson_decode(d, text, strlen(text), &m, &err);

    if (!ok(r == -code && !m && err.code == code && strstr(err.msg, msg_part), "%s: %s refused",
            what, text))
        printf("#   %d %s\n", r, err.msg);
    free_msg(m);
}

static void test_start_request(void)
{
    Process__ProcessConfig__EnvsEntry b = PROCESS__PROCESS_CONFIG__ENVS_ENTRY__INIT,
                                      a = PROCESS__PROCESS_CONFIG__ENVS_ENTRY__INIT;
    Process__ProcessConfig__EnvsEntry *envs[] = {&a, &b}; /* sorted: the read back is */
    char *args[] = {"-l", "-c", "echo \"hi\"\n"};
    Process__ProcessConfig cfg = PROCESS__PROCESS_CONFIG__INIT;
    Process__StartRequest req = PROCESS__START_REQUEST__INIT;

    encodes_as(&req.base, "{}", "empty start request");
    b.key = "B";
    b.value = "2";
    a.key = "A";
    a.value = "";
    cfg.cmd = "/bin/bash";
    cfg.n_args = 3;
    cfg.args = args;
    cfg.n_envs = 2;
    cfg.envs = envs;
    cfg._cwd_case = PROCESS__PROCESS_CONFIG___CWD_CWD;
    cfg.cwd = ""; /* optional and set: written though empty */
    req.process = &cfg;
    req._stdin_case = PROCESS__START_REQUEST___STDIN_STDIN;
    req.stdin = 0;
    encodes_as(
        &req.base,
        "{\"process\":{\"cmd\":\"/bin/bash\",\"args\":[\"-l\",\"-c\",\"echo \\\"hi\\\"\\n\"],"
        "\"envs\":{\"A\":\"\",\"B\":\"2\"},\"cwd\":\"\"},\"stdin\":false}",
        "start request");
}

static void test_events(void)
{
    Process__ProcessEvent__DataEvent data = PROCESS__PROCESS_EVENT__DATA_EVENT__INIT;
    Process__ProcessEvent__EndEvent end = PROCESS__PROCESS_EVENT__END_EVENT__INIT;
    Process__ProcessEvent__KeepAlive ka = PROCESS__PROCESS_EVENT__KEEP_ALIVE__INIT;
    Process__ProcessEvent__StartEvent st = PROCESS__PROCESS_EVENT__START_EVENT__INIT;
    Process__ProcessEvent ev = PROCESS__PROCESS_EVENT__INIT;
    Process__StartResponse resp = PROCESS__START_RESPONSE__INIT;
    uint8_t bin[] = {'h', 'i', '\n', 0xfb, 0xff};

    resp.event = &ev;
    ev.event_case = PROCESS__PROCESS_EVENT__EVENT_START;
    ev.start = &st;
    encodes_as(&resp.base, "{\"event\":{\"start\":{}}}", "start event, pid 0");
    st.pid = 4242;
    encodes_as(&resp.base, "{\"event\":{\"start\":{\"pid\":4242}}}", "start event");
    ev.event_case = PROCESS__PROCESS_EVENT__EVENT_DATA;
    ev.data = &data;
    data.output_case = PROCESS__PROCESS_EVENT__DATA_EVENT__OUTPUT_STDOUT;
    data.stdout = (ProtobufCBinaryData){sizeof(bin), bin};
    encodes_as(&resp.base, "{\"event\":{\"data\":{\"stdout\":\"aGkK+/8=\"}}}", "data event");
    data.output_case = PROCESS__PROCESS_EVENT__DATA_EVENT__OUTPUT_PTY;
    data.pty = (ProtobufCBinaryData){0, NULL};
    encodes_as(&resp.base, "{\"event\":{\"data\":{\"pty\":\"\"}}}", "empty pty data (a oneof)");
    ev.event_case = PROCESS__PROCESS_EVENT__EVENT_END;
    ev.end = &end;
    end.exit_code = -1;
    end.exited = 1;
    end.status = "signal: killed";
    end._error_case = PROCESS__PROCESS_EVENT__END_EVENT___ERROR_ERROR;
    end.error = "caf\xc3\xa9 \x01";
    encodes_as(&resp.base,
               "{\"event\":{\"end\":{\"exitCode\":-1,\"exited\":true,\"status\":\"signal: killed\","
               "\"error\":\"caf\xc3\xa9 \\u0001\"}}}",
               "end event");
    ev.event_case = PROCESS__PROCESS_EVENT__EVENT_KEEPALIVE;
    ev.keepalive = &ka;
    encodes_as(&resp.base, "{\"event\":{\"keepalive\":{}}}", "keepalive");
}

static void test_entry_info(void)
{
    Filesystem__EntryInfo__MetadataEntry md = FILESYSTEM__ENTRY_INFO__METADATA_ENTRY__INIT;
    Filesystem__EntryInfo__MetadataEntry *mds[] = {&md};
    Google__Protobuf__Timestamp ts = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
    Filesystem__EntryInfo e = FILESYSTEM__ENTRY_INFO__INIT;
    Filesystem__StatResponse resp = FILESYSTEM__STAT_RESPONSE__INIT;

    e.name = "link";
    e.type = FILESYSTEM__FILE_TYPE__FILE_TYPE_SYMLINK;
    e.path = "/home/user/link";
    e.size = 9007199254740993LL; /* past a double's integers: why 64-bit goes as a string */
    e.mode = 0777;
    e.permissions = "Lrwxrwxrwx";
    e.owner = "user";
    e.group = "user";
    ts.seconds = 1700000000;
    ts.nanos = 120000000;
    e.modified_time = &ts;
    e._symlink_target_case = FILESYSTEM__ENTRY_INFO___SYMLINK_TARGET_SYMLINK_TARGET;
    e.symlink_target = "/tmp/x";
    md.key = "k";
    md.value = "v";
    e.n_metadata = 1;
    e.metadata = mds;
    resp.entry = &e;
    encodes_as(&resp.base,
               "{\"entry\":{\"name\":\"link\",\"type\":\"FILE_TYPE_SYMLINK\","
               "\"path\":\"/home/user/link\",\"size\":\"9007199254740993\",\"mode\":511,"
               "\"permissions\":\"Lrwxrwxrwx\",\"owner\":\"user\",\"group\":\"user\","
               "\"modifiedTime\":\"2023-11-14T22:13:20.120Z\",\"symlinkTarget\":\"/tmp/x\","
               "\"metadata\":{\"k\":\"v\"}}}",
               "stat response");

    /* Timestamp's fraction: 0, 3, 6 or 9 digits; the range's ends */
    static const struct {
        int64_t s;
        int32_t n;
        const char *want;
    } tss[] = {
        {0, 0, "\"1970-01-01T00:00:00Z\""},
        {-1, 999999999, "\"1969-12-31T23:59:59.999999999Z\""},
        {951782400, 1000, "\"2000-02-29T00:00:00.000001Z\""},
        {-62135596800LL, 0, "\"0001-01-01T00:00:00Z\""},
        {253402300799LL, 10, "\"9999-12-31T23:59:59.000000010Z\""},
    };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(tss); i++) {
        ts.seconds = tss[i].s;
        ts.nanos = tss[i].n;
        encodes_as(&ts.base, tss[i].want, "timestamp");
    }

    /* out of range: refused, as protojson refuses it */
    _cleanup_free_ char *s = NULL;
    struct sbx_error err = {0};
    size_t len;
    ts.seconds = 253402300800LL;
    ts.nanos = 0;
    ok(sbx_pbjson_encode(&resp.base, &s, &len, &err) == -EINVAL && strstr(err.msg, "modified_time"),
       "timestamp past 9999 refused (%s)", err.msg);
    ts.seconds = 0;
    ts.nanos = -1;
    ok(sbx_pbjson_encode(&ts.base, &s, &len, &err) == -EINVAL, "negative nanos refused");
    ts.nanos = 0;
    e.name = "bad\xff";
    ok(sbx_pbjson_encode(&resp.base, &s, &len, &err) == -EILSEQ && strstr(err.msg, "name"),
       "a string not utf-8 refused (%s)", err.msg);
}

static void test_enums_and_maps(void)
{
    Process__ProcessSelector sel = PROCESS__PROCESS_SELECTOR__INIT;
    Process__SendSignalRequest req = PROCESS__SEND_SIGNAL_REQUEST__INIT;
    Process__ProcessConfig__EnvsEntry e[3] = {PROCESS__PROCESS_CONFIG__ENVS_ENTRY__INIT,
                                              PROCESS__PROCESS_CONFIG__ENVS_ENTRY__INIT,
                                              PROCESS__PROCESS_CONFIG__ENVS_ENTRY__INIT};
    Process__ProcessConfig__EnvsEntry *envs[] = {&e[0], &e[1], &e[2]};
    Process__ProcessConfig cfg = PROCESS__PROCESS_CONFIG__INIT;

    req.process = &sel;
    sel.selector_case = PROCESS__PROCESS_SELECTOR__SELECTOR_PID;
    sel.pid = 0;
    req.signal = PROCESS__SIGNAL__SIGNAL_SIGKILL;
    encodes_as(&req.base, "{\"process\":{\"pid\":0},\"signal\":\"SIGNAL_SIGKILL\"}",
               "signal by name, oneof pid 0 written");
    req.signal = 7;
    encodes_as(&req.base, "{\"process\":{\"pid\":0},\"signal\":7}", "unnamed enum value");

    /* the binary form's last entry of a key wins; keys sorted bytewise */
    e[0].key = "Z";
    e[0].value = "first";
    e[1].key = "\xc3\xa9";
    e[1].value = "x";
    e[2].key = "Z";
    e[2].value = "last";
    cfg.n_envs = 3;
    cfg.envs = envs;
    _cleanup_free_ char *s = NULL;
    struct sbx_error err = {0};
    size_t len;
    int r = sbx_pbjson_encode(&cfg.base, &s, &len, &err);
    ok(r == 0 && strcmp(s, "{\"envs\":{\"Z\":\"last\",\"\xc3\xa9\":\"x\"}}") == 0,
       "map: sorted, last duplicate wins: %s", r ? err.msg : s);
}

static void test_reading(void)
{
    _cleanup_msg_ ProtobufCMessage *m1 =
        decodes(&process__process_event__end_event__descriptor,
                "{\"exit_code\":3,\"exited\":true,\"status\":null,\"unknown\":{\"a\":[1]},"
                "\"error\":\"\"}",
                "proto names, null, unknown field");
    Process__ProcessEvent__EndEvent *end = (void *)m1;
    ok(end && end->exit_code == 3 && end->exited && strcmp(end->status, "") == 0 &&
           end->_error_case == PROCESS__PROCESS_EVENT__END_EVENT___ERROR_ERROR &&
           strcmp(end->error, "") == 0,
       "end event read; empty optional error present");

    _cleanup_msg_ ProtobufCMessage *m2 =
        decodes(&process__start_request__descriptor,
                "{\"process\":{\"cmd\":\"ls\",\"args\":[\"-l\"],\"envs\":{\"B\":\"\",\"A\":\"1\"}},"
                "\"tag\":\"t\",\"stdin\":false,\"pty\":{\"size\":{\"cols\":\"80\",\"rows\":24.0}}}",
                "start request");
    Process__StartRequest *sr = (void *)m2;
    ok(sr && sr->process && strcmp(sr->process->cmd, "ls") == 0 && sr->process->n_args == 1 &&
           sr->process->n_envs == 2 && sr->_tag_case && strcmp(sr->tag, "t") == 0 &&
           sr->_stdin_case && !sr->stdin && sr->_pty_case && sr->pty->size->cols == 80 &&
           sr->pty->size->rows == 24 && !sr->process->_cwd_case,
       "start request read, presence of optional fields kept");
    ok(sr && strcmp(sr->process->envs[0]->key, "A") == 0 &&
           strcmp(sr->process->envs[1]->key, "B") == 0,
       "map entries in key order");

    _cleanup_msg_ ProtobufCMessage *m3 =
        decodes(&filesystem__entry_info__descriptor,
                "{\"size\":\"-12\",\"type\":2,\"modifiedTime\":\"2023-11-14T23:13:20.5+01:00\","
                "\"symlink_target\":null}",
                "entry info");
    Filesystem__EntryInfo *ei = (void *)m3;
    ok(ei && ei->size == -12 && ei->type == 2 && ei->modified_time &&
           ei->modified_time->seconds == 1700000000 && ei->modified_time->nanos == 500000000 &&
           !ei->_symlink_target_case,
       "int64 from a string, enum from a number, timestamp with an offset");

    static const struct {
        const char *text;
        int64_t size;
    } sizes[] = {
        {"{\"size\":12}", 12},
        {"{\"size\":\"1e2\"}", 100},
        {"{\"size\":1.0}", 1},
        {"{\"size\":\"-9223372036854775808\"}", INT64_MIN},
        {"{\"size\":9223372036854775807}", INT64_MAX},
        {"{\"size\":\"0.0e99999999999\"}", 0},
        {"{\"size\":\"1200e-2\"}", 12},
    };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(sizes); i++) {
        _cleanup_msg_ ProtobufCMessage *m =
            decodes(&filesystem__entry_info__descriptor, sizes[i].text, "int64");
        ok(m && ((Filesystem__EntryInfo *)m)->size == sizes[i].size, "int64 %s", sizes[i].text);
    }

    /* enums: unknown names are dropped, as connect-go's reader (DiscardUnknown) drops them */
    _cleanup_msg_ ProtobufCMessage *m4 = decodes(&process__send_signal_request__descriptor,
                                                 "{\"signal\":\"SIGNAL_SIGHUP\"}", "unknown");
    ok(m4 && ((Process__SendSignalRequest *)m4)->signal == 0, "unknown enum name: unset");
    _cleanup_msg_ ProtobufCMessage *m4b = decodes(&process__send_signal_request__descriptor,
                                                  "{\"signal\":\"9\"}", "a number as a name");
    ok(m4b && ((Process__SendSignalRequest *)m4b)->signal == 0,
       "an enum number in a string is a name");
    _cleanup_msg_ ProtobufCMessage *m5 = decodes(&process__send_signal_request__descriptor,
                                                 "{\"signal\":\"SIGNAL_SIGTERM\"}", "named");
    ok(m5 && ((Process__SendSignalRequest *)m5)->signal == 15, "enum by name");

    /* bytes: standard or URL-safe, padded or not */
    static const char *const b64[] = {"+/8=", "+/8", "-_8=", "-_8"};
    for (size_t i = 0; i < SBX_ARRAY_SIZE(b64); i++) {
        char text[64];
        snprintf(text, sizeof(text), "{\"stdin\":\"%s\"}", b64[i]);
        _cleanup_msg_ ProtobufCMessage *m =
            decodes(&process__process_input__descriptor, text, "bytes");
        Process__ProcessInput *in = (void *)m;
        ok(in && in->input_case == PROCESS__PROCESS_INPUT__INPUT_STDIN && in->stdin.len == 2 &&
               in->stdin.data[0] == 0xfb && in->stdin.data[1] == 0xff,
           "base64 %s", b64[i]);
    }

    /* a oneof member given as null does not count */
    _cleanup_msg_ ProtobufCMessage *m6 =
        decodes(&process__process_event__descriptor, "{\"start\":null,\"data\":{}}", "oneof null");
    ok(m6 && ((Process__ProcessEvent *)m6)->event_case == PROCESS__PROCESS_EVENT__EVENT_DATA,
       "oneof: the member with a value is set");

    /* proto2: optional fields' has_, a double, a uint64 */
    _cleanup_msg_ ProtobufCMessage *m7 =
        decodes(&google__protobuf__uninterpreted_option__descriptor,
                "{\"positiveIntValue\":\"18446744073709551615\",\"doubleValue\":\"-Infinity\","
                "\"identifierValue\":\"x\",\"name\":[{\"namePart\":\"a\",\"isExtension\":false}]}",
                "proto2");
    Google__Protobuf__UninterpretedOption *uo = (void *)m7;
    ok(uo && uo->has_positive_int_value && uo->positive_int_value == UINT64_MAX &&
           uo->has_double_value && isinf(uo->double_value) && uo->double_value < 0 &&
           !uo->has_negative_int_value && uo->n_name == 1 && !uo->name[0]->is_extension,
       "proto2 message read");
}

static void test_refusals(void)
{
    const ProtobufCMessageDescriptor *ee = &process__process_event__end_event__descriptor;
    const ProtobufCMessageDescriptor *ei = &filesystem__entry_info__descriptor;
    const ProtobufCMessageDescriptor *pi = &process__process_input__descriptor;
    const ProtobufCMessageDescriptor *pc = &process__process_config__descriptor;

    refused(ee, "", EINVAL, "empty", "empty payload");
    refused(ee, "{\"exitCode\":1", EINVAL, "invalid json", "truncated");
    refused(ee, "{} x", EINVAL, "invalid json", "trailing bytes");
    refused(ee, "[]", EINVAL, "not an object", "a list for a message");
    refused(ee, "\"x\"", EINVAL, "not an object", "a string for a message");
    refused(ee, "{\"exitCode\":1,\"exit_code\":2}", EINVAL, "twice", "a field by both names");
    refused(ee, "{\"exitCode\":1,\"exitCode\":2}", EINVAL, "invalid json", "a key twice");
    refused(ee, "{\"exitCode\":1.5}", EINVAL, "not an integer", "a fraction");
    refused(ee, "{\"exitCode\":\"1.5\"}", EINVAL, "not an integer", "a fraction as a string");
    refused(ee, "{\"exitCode\":\" 1\"}", EINVAL, "not an integer", "a blank in a number string");
    refused(ee, "{\"exitCode\":\"01\"}", EINVAL, "not an integer", "a leading zero");
    refused(ee, "{\"exitCode\":2147483648}", EINVAL, "out of range", "past int32");
    refused(ee, "{\"exitCode\":\"-2147483649\"}", EINVAL, "out of range", "below int32");
    refused(ee, "{\"exitCode\":true}", EINVAL, "not an integer", "a bool for an integer");
    refused(ee, "{\"exited\":1}", EINVAL, "not a boolean", "a number for a bool");
    refused(ee, "{\"exited\":\"true\"}", EINVAL, "not a boolean", "a string for a bool");
    refused(ee, "{\"status\":5}", EINVAL, "'status': not a string", "a number for a string");
    refused(ee, "{\"status\":\"a\\u0000b\"}", EINVAL, "invalid json", "a NUL in a string");
    refused(&process__process_selector__descriptor, "{\"pid\":-1}", EINVAL, "out of range",
            "a negative uint32");
    refused(&process__process_selector__descriptor, "{\"pid\":\"4294967296\"}", EINVAL,
            "out of range", "past uint32");
    refused(&process__process_selector__descriptor, "{\"pid\":1,\"tag\":\"x\"}", EINVAL, "oneof",
            "two members of a oneof");
    refused(&process__process_event__descriptor, "{\"start\":{},\"end\":{}}", EINVAL, "oneof",
            "two events");
    refused(ei, "{\"size\":\"9223372036854775808\"}", EINVAL, "out of range", "past int64");
    refused(ei, "{\"size\":\"99999999999999999999999\"}", EINVAL, "out of range", "past uint64");
    refused(ei, "{\"type\":[1]}", EINVAL, "not an enum", "a list for an enum");
    refused(ei, "{\"modifiedTime\":\"2023-02-29T00:00:00Z\"}", EINVAL, "rfc 3339", "no such day");
    refused(ei, "{\"modifiedTime\":\"2023-01-01T00:00:00.1234567891Z\"}", EINVAL, "rfc 3339",
            "ten fractional digits");
    refused(ei, "{\"modifiedTime\":\"2023-01-01 00:00:00Z\"}", EINVAL, "rfc 3339", "no T");
    refused(ei, "{\"modifiedTime\":\"2023-01-01T00:00:00\"}", EINVAL, "rfc 3339", "no zone");
    refused(ei, "{\"modifiedTime\":\"0000-12-31T23:59:59Z\"}", EINVAL, "rfc 3339", "year 0");
    refused(ei, "{\"modifiedTime\":1700000000}", EINVAL, "rfc 3339", "a number for a timestamp");
    refused(ei, "{\"metadata\":[]}", EINVAL, "not a map", "a list for a map");
    refused(ei, "{\"metadata\":{\"a\":null}}", EINVAL, "null map value", "a null map value");
    refused(ei, "{\"metadata\":{\"a\":1}}", EINVAL, "not a string", "a number as a map value");
    refused(pc, "{\"args\":\"x\"}", EINVAL, "not a list", "a string for a list");
    refused(pc, "{\"args\":[\"x\",null]}", EINVAL, "null in a list", "null in a list");
    refused(pi, "{\"stdin\":\"a\"}", EINVAL, "not base64", "one base64 character");
    refused(pi, "{\"stdin\":\"+-==\"}", EINVAL, "not base64", "two base64 alphabets");
    refused(pi, "{\"stdin\":\"QQ=\"}", EINVAL, "not base64", "padding that does not fit");
    refused(pi, "{\"stdin\":\"QQ==QQ==\"}", EINVAL, "not base64", "data past padding");
    refused(pi, "{\"stdin\":\"QQ!!\"}", EINVAL, "not base64", "not the alphabet");
    refused(pi, "{\"stdin\":[]}", EINVAL, "not a base64 string", "a list for bytes");
    refused(&process__start_response__descriptor, "{\"event\":{\"end\":{\"exitCode\":\"x\"}}}",
            EINVAL, "'event': 'end': 'exit_code': not an integer", "the path in the message");
    refused(&google__protobuf__uninterpreted_option__descriptor,
            "{\"name\":[{\"namePart\":\"a\"}]}", EINVAL, "required 'is_extension' missing",
            "a proto2 required field missing");
    refused(&google__protobuf__uninterpreted_option__descriptor, "{\"doubleValue\":\"1e400\"}",
            EINVAL, "out of range", "a double past its range");
    refused(&google__protobuf__uninterpreted_option__descriptor, "{\"doubleValue\":\"nan\"}",
            EINVAL, "not a number", "nan spelt otherwise");
}

/* google.protobuf.DescriptorProto nests itself: depth is bounded both ways. */
static char *nested(int depth)
{
    size_t cap = (size_t)depth * 32 + 16, n = 0;
    char *s = malloc(cap);
    for (int i = 0; i < depth; i++)
        n += (size_t)snprintf(s + n, cap - n, "{\"nestedType\":[");
    n += (size_t)snprintf(s + n, cap - n, "{}");
    for (int i = 0; i < depth; i++)
        n += (size_t)snprintf(s + n, cap - n, "]}");
    return s;
}

static void test_depth(void)
{
    _cleanup_free_ char *ok_text = nested(SBX_PBJSON_MAX_DEPTH);
    _cleanup_free_ char *deep = nested(SBX_PBJSON_MAX_DEPTH + 1);
    _cleanup_msg_ ProtobufCMessage *m =
        decodes(&google__protobuf__descriptor_proto__descriptor, ok_text, "nesting at the limit");
    _cleanup_free_ char *s = NULL;
    struct sbx_error err = {0};
    size_t len;

    ok(m && sbx_pbjson_encode(m, &s, &len, &err) == 0 && strcmp(s, ok_text) == 0,
       "nesting at the limit written back");
    refused(&google__protobuf__descriptor_proto__descriptor, deep, EINVAL, "deeper than",
            "nesting past the limit");
}

static void test_floats(void)
{
    static const struct {
        double v;
        const char *want;
    } cases[] = {
        {0.1, "0.1"},
        {-2.5, "-2.5"},
        {1e18, "1000000000000000000"},
        {1e19, "1e+19"}, /* protojson: 10000000000000000000, which jansson cannot read */
        {1e21, "1e+21"},
        {123456789012345678.0, "123456789012345680"},
        {0.000001, "0.000001"},
        {1e-7, "1e-7"},
        {1.5e-300, "1.5e-300"},
        {5e-324, "5e-324"},
        {1.7976931348623157e308, "1.7976931348623157e+308"},
        {NAN, "\"NaN\""},
        {INFINITY, "\"Infinity\""},
    };
    Google__Protobuf__UninterpretedOption uo = GOOGLE__PROTOBUF__UNINTERPRETED_OPTION__INIT;

    uo.has_double_value = 1;
    for (size_t i = 0; i < SBX_ARRAY_SIZE(cases); i++) {
        char want[96];
        uo.double_value = cases[i].v;
        snprintf(want, sizeof(want), "{\"doubleValue\":%s}", cases[i].want);
        encodes_as(&uo.base, want, "double");
    }
    /* negative zero as Python writes it: protojson's -0 jansson reads as the integer 0 */
    uo.double_value = -0.0;
    encodes_as(&uo.base, "{\"doubleValue\":-0.0}", "negative zero");
    uo.has_double_value = 0;
    uo.has_positive_int_value = 1;
    uo.positive_int_value = UINT64_MAX;
    encodes_as(&uo.base, "{\"positiveIntValue\":\"18446744073709551615\"}", "uint64");
}

static const char all_in[] =
    "{\"i32\":-5,\"s32\":\"-6\",\"sf32\":7,\"u32\":4294967295,\"f32\":\"8\",\"i64\":\"-9\","
    "\"s64\":10,\"sf64\":\"-11\",\"u64\":\"18446744073709551615\",\"f64\":\"12\",\"fl\":0.1,"
    "\"db\":\"1e-7\",\"b\":true,\"s\":\"x\",\"by\":\"AQ\",\"color\":\"COLOR_BLUE\","
    "\"r_i64\":[\"1\",2],\"rFl\":[\"NaN\",\"-Infinity\",1.5],\"rB\":[true,false],"
    "\"rBy\":[\"\",\"AQID\"],\"rColor\":[\"COLOR_RED\",-2,\"COLOR_GREEN\",7],"
    "\"rTs\":[\"1970-01-01T00:00:01Z\"],\"mI32\":{\"10\":\"a\",\"-1\":\"b\",\"+02\":\"c\"},"
    "\"mU64\":{\"18446744073709551615\":{\"i32\":1}},\"m_bool\":{\"true\":1,\"false\":0},"
    "\"mS64\":{\"-3\":\"AA==\"},\"mColor\":{\"a\":\"COLOR_RED\",\"b\":\"NOPE\",\"c\":5},"
    "\"child\":{\"child\":{\"b\":true}},\"oAll\":{}}";
static const char all_out[] =
    "{\"i32\":-5,\"s32\":-6,\"sf32\":7,\"u32\":4294967295,\"f32\":8,\"i64\":\"-9\","
    "\"s64\":\"10\",\"sf64\":\"-11\",\"u64\":\"18446744073709551615\",\"f64\":\"12\",\"fl\":0.1,"
    "\"db\":1e-7,\"b\":true,\"s\":\"x\",\"by\":\"AQ==\",\"color\":\"COLOR_BLUE\","
    "\"rI64\":[\"1\",\"2\"],\"rFl\":[\"NaN\",\"-Infinity\",1.5],\"rB\":[true,false],"
    "\"rBy\":[\"\",\"AQID\"],\"rColor\":[\"COLOR_RED\",\"COLOR_BLUE\",7],"
    "\"rTs\":[\"1970-01-01T00:00:01Z\"],\"mI32\":{\"-1\":\"b\",\"2\":\"c\",\"10\":\"a\"},"
    "\"mU64\":{\"18446744073709551615\":{\"i32\":1}},\"mBool\":{\"false\":0,\"true\":1},"
    "\"mS64\":{\"-3\":\"AA==\"},\"mColor\":{\"a\":\"COLOR_RED\",\"c\":5},"
    "\"child\":{\"child\":{\"b\":true}},\"oAll\":{}}";

/* Every scalar type, lists, maps of other keys, a oneof's message, nesting: read, then written
 * as protojson writes it (unknown enum names dropped from the list and the map). */
static void test_all_types(void)
{
    _cleanup_msg_ ProtobufCMessage *m = decodes(&sbxtest__all__descriptor, all_in, "all types");
    Sbxtest__All *a = (void *)m;

    if (!ok(a, "all types read"))
        return;
    ok(a->u64 == UINT64_MAX && a->sf64 == -11 && a->n_r_color == 3 && a->n_m_color == 2 &&
           a->n_m_i32 == 3 && a->m_i32[0]->key == -1 && a->m_i32[1]->key == 2 &&
           a->m_i32[2]->key == 10 && a->pick_case == SBXTEST__ALL__PICK_O_ALL && a->child &&
           a->child->child && a->child->child->b && isnan(a->r_fl[0]),
       "all types: values");
    encodes_as(m, all_out, "all types");

    static const char *const more[] = {
        "{\"oFl\":\"-0\"}",
        "{\"fl\":-0.0}",
        "{\"oS\":\"\"}",
        "{\"oFl\":0}",
        "{\"fl\":3.4028234e38,\"db\":-1.7976931348623157e308}",
        "{\"rFl\":[1e-45,1.17549435e-38]}",
        "{\"mI32\":{\"-2147483648\":\"\"}}",
        "{\"f64\":1e19}",
    };
    for (size_t i = 0; i < SBX_ARRAY_SIZE(more); i++) {
        _cleanup_msg_ ProtobufCMessage *m2 = decodes(&sbxtest__all__descriptor, more[i], "more");
        _cleanup_free_ char *s = NULL;
        size_t len;
        if (m2 && sbx_pbjson_encode(m2, &s, &len, NULL) == 0)
            encodes_as(m2, s, "reads back");
    }

    const ProtobufCMessageDescriptor *d = &sbxtest__all__descriptor;
    refused(d, "{\"mI32\":{\"1\":\"a\",\"01\":\"b\"}}", EINVAL, "duplicate map key",
            "one integer key twice");
    refused(d, "{\"mBool\":{\"true\":1,\"false\":2,\"yes\":3}}", EINVAL, "not a boolean",
            "a bool key not true or false");
    refused(d, "{\"mI32\":{\"x\":\"a\"}}", EINVAL, "not an integer", "a key not a number");
    refused(d, "{\"mI32\":{\"1.0\":\"a\"}}", EINVAL, "not an integer", "a key with a point");
    refused(d, "{\"mI32\":{\"2147483648\":\"a\"}}", EINVAL, "out of range", "a key past int32");
    refused(d, "{\"mU64\":{\"-1\":{}}}", EINVAL, "out of range", "a negative uint64 key");
    refused(d, "{\"mU64\":{\"1\":null}}", EINVAL, "null map value", "a null message value");
    refused(d, "{\"fl\":3.5e38}", EINVAL, "out of range", "past float");
    refused(d, "{\"fl\":\"1e39\"}", EINVAL, "out of range", "past float as a string");
    refused(d, "{\"db\":\"1e309\"}", EINVAL, "out of range", "past double as a string");
    refused(d, "{\"db\":\" 1\"}", EINVAL, "not a number", "a blank before a double");
    refused(d, "{\"db\":true}", EINVAL, "not a number", "a bool for a double");
    refused(d, "{\"i64\":1e300}", EINVAL, "out of range", "a huge real for an int64");
    refused(d, "{\"u64\":-1}", EINVAL, "out of range", "a negative uint64");
    refused(d, "{\"u64\":18446744073709551615}", EINVAL, "invalid json",
            "a uint64 past int64 as a number (jansson's limit)");
    refused(d, "{\"f32\":\"4294967296\"}", EINVAL, "out of range", "past fixed32");
    refused(d, "{\"sf32\":\"-2147483649\"}", EINVAL, "out of range", "below sfixed32");
    refused(d, "{\"color\":2147483648}", EINVAL, "out of range", "an enum number past int32");
    refused(d, "{\"color\":1.5}", EINVAL, "not an integer", "a fractional enum number");
    refused(d, "{\"oFl\":1,\"oS\":\"\"}", EINVAL, "oneof", "a oneof given twice");
    refused(d, "{\"oAll\":{},\"o_fl\":null,\"oS\":\"x\"}", EINVAL, "oneof",
            "a oneof given twice, one null");
    refused(d, "{\"rTs\":[null]}", EINVAL, "null in a list", "a null timestamp in a list");
    refused(d, "{\"rB\":[1]}", EINVAL, "not a boolean", "a number in a bool list");
    refused(d, "{\"child\":[]}", EINVAL, "not an object", "a list for a message");
}

/* Wrappers are their bare value, written even when zero; Duration and Struct are refused. */
static void test_well_known(void)
{
    const ProtobufCMessageDescriptor *d = &sbxtest__all__descriptor;
    const char *w = "{\"wI32\":0,\"wU64\":\"5\",\"wS\":\"\",\"wBy\":\"AQ==\",\"wB\":false,"
                    "\"rWDb\":[1.5,\"NaN\"]}";
    _cleanup_msg_ ProtobufCMessage *m = decodes(d, w, "wrappers");
    _cleanup_msg_ ProtobufCMessage *n =
        decodes(d, "{\"wI32\":null,\"dur\":null,\"st\":null}", "nulls");
    Sbxtest__All *a = (void *)m;

    ok(a && a->w_i32 && a->w_i32->value == 0 && a->w_u64->value == 5 && a->w_by->value.len == 1 &&
           a->n_r_w_db == 2 && isnan(a->r_w_db[1]->value),
       "wrappers read");
    if (m)
        encodes_as(m, w, "wrappers");
    if (n)
        encodes_as(n, "{}", "null wrapper and unsupported types: not set");
    refused(d, "{\"dur\":\"1s\"}", EOPNOTSUPP, "no json mapping for 'google.protobuf.Duration'",
            "a Duration");
    refused(d, "{\"st\":{}}", EOPNOTSUPP, "google.protobuf.Struct", "a Struct");
    refused(d, "{\"wI32\":{\"value\":1}}", EINVAL, "not an integer", "a wrapper as an object");

    Google__Protobuf__Duration dur = GOOGLE__PROTOBUF__DURATION__INIT;
    Sbxtest__All all = SBXTEST__ALL__INIT;
    _cleanup_free_ char *s = NULL;
    struct sbx_error err = {0};
    size_t len;
    all.dur = &dur;
    ok(sbx_pbjson_encode(&all.base, &s, &len, &err) == -EOPNOTSUPP && strstr(err.msg, "Duration"),
       "a Duration not written (%s)", err.msg);
}

int main(void)
{
    test_start_request();
    test_events();
    test_entry_info();
    test_enums_and_maps();
    test_reading();
    test_refusals();
    test_depth();
    test_floats();
    test_all_types();
    test_well_known();
    return done_testing();
}
