/* pbjson on the command line, for pbjson_python.py to hold against Python protobuf's json_format:
 * `pbjson_conv TYPE b2j` reads a binary message of TYPE (a full name, e.g. process.StartRequest)
 * on stdin and writes sbx_pbjson_encode's text; `pbjson_conv TYPE j2b` reads JSON and writes
 * the binary form of what sbx_pbjson_decode made of it. Exit 1 with the error on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cleanup.h"
#include "e2b/filesystem/filesystem.pb-c.h"
#include "e2b/process/process.pb-c.h"
#include "pbjson.h"

static const ProtobufCMessageDescriptor *const types[] = {
    &process__start_request__descriptor,
    &process__start_response__descriptor,
    &process__list_response__descriptor,
    &process__send_signal_request__descriptor,
    &process__send_input_request__descriptor,
    &process__stream_input_request__descriptor,
    &process__update_request__descriptor,
    &filesystem__stat_response__descriptor,
    &filesystem__list_dir_response__descriptor,
    &filesystem__watch_dir_response__descriptor,
    &filesystem__get_watcher_events_response__descriptor,
};

int main(int argc, char **argv)
{
    const ProtobufCMessageDescriptor *d = NULL;
    _cleanup_free_ uint8_t *in = NULL;
    ProtobufCMessage *m = NULL;
    struct sbx_error err = {0};
    size_t n = 0, cap = 1 << 20;

    if (argc != 3)
        return 2;
    for (size_t i = 0; i < SBX_ARRAY_SIZE(types); i++)
        if (strcmp(types[i]->name, argv[1]) == 0)
            d = types[i];
    if (!d || !(in = malloc(cap)))
        return 2;
    n = fread(in, 1, cap, stdin);
    if (strcmp(argv[2], "b2j") == 0) {
        _cleanup_free_ char *text = NULL;
        size_t len;
        if (!(m = protobuf_c_message_unpack(d, NULL, n, in)) ||
            sbx_pbjson_encode(m, &text, &len, &err) < 0) {
            fprintf(stderr, "encode: %s\n", err.msg);
            return 1;
        }
        fwrite(text, 1, len, stdout);
    } else {
        _cleanup_free_ uint8_t *bin = NULL;
        size_t len;
        if (sbx_pbjson_decode(d, (const char *)in, n, &m, &err) < 0) {
            fprintf(stderr, "decode: %s\n", err.msg);
            return 1;
        }
        len = protobuf_c_message_get_packed_size(m);
        bin = malloc(len + 1);
        fwrite(bin, 1, protobuf_c_message_pack(m, bin), stdout);
    }
    protobuf_c_message_free_unpacked(m, NULL);
    return 0;
}
