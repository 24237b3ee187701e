/* libFuzzer target for pbjson's reader (protobuf's JSON mapping): the Connect JSON an E2B SDK
 * sends to sandboxd's E2B port, read as any message of envd's protos.
 *
 * Input: one byte choosing the message type (its value modulo the table below: process's
 * messages, then filesystem's, as protoc-c declares them, then google.protobuf.Timestamp, then
 * sbxtest.All of tests/e2b/pbjson_test.proto: every scalar type, integer-keyed maps, itself
 * nested, wrappers, Duration and Struct which it refuses), the rest the JSON text. Checked: a
 * refusal is -EINVAL (-EOPNOTSUPP for those two) with a message; what is read is written
 * (sbx_pbjson_encode cannot fail on it: every string came from JSON, so is UTF-8, and every
 * Timestamp is in range), the text is read again to the same binary protobuf
 * (protobuf_c_message_pack) and written again to the same text. Leaks (ASan) catch a piece the
 * reader allocates but does not hang on the message. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "e2b/filesystem/filesystem.pb-c.h"
#include "e2b/process/process.pb-c.h"
#include "fuzz_check.h"
#include "google/protobuf/timestamp.pb-c.h"
#include "pbjson.h"
#include "pbjson_test.pb-c.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const ProtobufCMessageDescriptor *const types[] = {
    &process__pty__descriptor,
    &process__pty__size__descriptor,
    &process__process_config__descriptor,
    &process__process_config__envs_entry__descriptor,
    &process__list_request__descriptor,
    &process__process_info__descriptor,
    &process__list_response__descriptor,
    &process__start_request__descriptor,
    &process__update_request__descriptor,
    &process__update_response__descriptor,
    &process__process_event__descriptor,
    &process__process_event__start_event__descriptor,
    &process__process_event__data_event__descriptor,
    &process__process_event__end_event__descriptor,
    &process__process_event__keep_alive__descriptor,
    &process__start_response__descriptor,
    &process__connect_response__descriptor,
    &process__send_input_request__descriptor,
    &process__send_input_response__descriptor,
    &process__process_input__descriptor,
    &process__stream_input_request__descriptor,
    &process__stream_input_request__start_event__descriptor,
    &process__stream_input_request__data_event__descriptor,
    &process__stream_input_request__keep_alive__descriptor,
    &process__stream_input_response__descriptor,
    &process__send_signal_request__descriptor,
    &process__send_signal_response__descriptor,
    &process__close_stdin_request__descriptor,
    &process__close_stdin_response__descriptor,
    &process__connect_request__descriptor,
    &process__process_selector__descriptor,
    &filesystem__move_request__descriptor,
    &filesystem__move_response__descriptor,
    &filesystem__make_dir_request__descriptor,
    &filesystem__make_dir_response__descriptor,
    &filesystem__remove_request__descriptor,
    &filesystem__remove_response__descriptor,
    &filesystem__stat_request__descriptor,
    &filesystem__stat_response__descriptor,
    &filesystem__entry_info__descriptor,
    &filesystem__entry_info__metadata_entry__descriptor,
    &filesystem__list_dir_request__descriptor,
    &filesystem__list_dir_response__descriptor,
    &filesystem__watch_dir_request__descriptor,
    &filesystem__filesystem_event__descriptor,
    &filesystem__watch_dir_response__descriptor,
    &filesystem__watch_dir_response__start_event__descriptor,
    &filesystem__watch_dir_response__keep_alive__descriptor,
    &filesystem__create_watcher_request__descriptor,
    &filesystem__create_watcher_response__descriptor,
    &filesystem__get_watcher_events_request__descriptor,
    &filesystem__get_watcher_events_response__descriptor,
    &filesystem__remove_watcher_request__descriptor,
    &filesystem__remove_watcher_response__descriptor,
    &google__protobuf__timestamp__descriptor,
    &sbxtest__all__descriptor,
};

static void free_msg(ProtobufCMessage *m)
{
    protobuf_c_message_free_unpacked(m, NULL);
}
SBX_DEFINE_CLEANUP(ProtobufCMessage *, free_msg)

static uint8_t *packed(const ProtobufCMessage *m, size_t *len)
{
    *len = protobuf_c_message_get_packed_size(m);
    uint8_t *b = malloc(*len + 1);
    CHECK(b, "out of memory");
    CHECK(protobuf_c_message_pack(m, b) == *len, "pack wrote another length");
    return b;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    _cleanup_(free_msgp) ProtobufCMessage *m = NULL, *back = NULL;
    _cleanup_free_ char *text = NULL, *text2 = NULL;
    _cleanup_free_ uint8_t *bin = NULL, *bin2 = NULL;
    const ProtobufCMessageDescriptor *d;
    struct sbx_error err = {0};
    size_t len, len2, blen, blen2;
    int r;

    if (size < 1)
        return 0;
    d = types[data[0] % (sizeof(types) / sizeof(*types))];
    r = sbx_pbjson_decode(d, (const char *)data + 1, size - 1, &m, &err);
    if (r < 0) {
        CHECK((r == -EINVAL || r == -EOPNOTSUPP) && err.code == -r && err.msg[0] && !m,
              "refusal %d '%s'", r, err.msg);
        return 0;
    }
    CHECK(m && m->descriptor == d, "no message");
    r = sbx_pbjson_encode(m, &text, &len, &err);
    CHECK(r == 0, "what was read is not written: %s", err.msg);
    CHECK(strlen(text) == len, "length %zu for %zu bytes", len, strlen(text));
    r = sbx_pbjson_decode(d, text, len, &back, &err);
    CHECK(r == 0, "what was written is not read: %s: %s", err.msg, text);
    bin = packed(m, &blen);
    bin2 = packed(back, &blen2);
    CHECK(blen == blen2 && memcmp(bin, bin2, blen) == 0, "another message read back: %s", text);
    r = sbx_pbjson_encode(back, &text2, &len2, &err);
    CHECK(r == 0 && len2 == len && strcmp(text, text2) == 0, "written otherwise: %s", text);
    return 0;
}
