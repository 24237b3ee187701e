/* The C code protoc-c makes of E2B's envd protos (proto/e2b): the services and methods as E2B
 * names them, and the presence of proto3 `optional` fields kept through the oneof rewrite
 * (oneof_optional.cmake): StartRequest.stdin left out means true, sent as false means false. */
#include <string.h>

#include "e2b/filesystem/filesystem.pb-c.h"
#include "e2b/process/process.pb-c.h"
#include "tap.h"

static bool methods_are(const ProtobufCServiceDescriptor *d, const char *name,
                        const char *const *methods, unsigned n)
{
    if (strcmp(d->name, name) != 0 || d->n_methods != n)
        return false;
    for (unsigned i = 0; i < n; i++) {
        bool found = false;
        for (unsigned k = 0; k < d->n_methods; k++)
            found = found || strcmp(d->methods[k].name, methods[i]) == 0;
        if (!found)
            return false;
    }
    return true;
}

static void test_services(void)
{
    static const char *const process[] = {"List",        "Connect",   "Start",      "Update",
                                          "StreamInput", "SendInput", "SendSignal", "CloseStdin"};
    static const char *const fs[] = {"Stat",          "MakeDir",          "Move",
                                     "ListDir",       "Remove",           "WatchDir",
                                     "CreateWatcher", "GetWatcherEvents", "RemoveWatcher"};

    ok(methods_are(&process__process__descriptor, "process.Process", process, 8),
       "process.Process and its eight methods");
    ok(methods_are(&filesystem__filesystem__descriptor, "filesystem.Filesystem", fs, 9),
       "filesystem.Filesystem and its nine methods");
}

/* Field 4 (stdin), varint. */
static const uint8_t stdin_false[] = {0x20, 0x00}, stdin_true[] = {0x20, 0x01};

static void test_presence(void)
{
    Process__StartRequest *r = process__start_request__unpack(NULL, 0, (const uint8_t *)"");

    ok(r && r->_stdin_case == PROCESS__START_REQUEST___STDIN__NOT_SET &&
           r->_tag_case == PROCESS__START_REQUEST___TAG__NOT_SET &&
           r->_pty_case == PROCESS__START_REQUEST___PTY__NOT_SET,
       "an empty StartRequest has stdin, tag and pty unset");
    process__start_request__free_unpacked(r, NULL);

    r = process__start_request__unpack(NULL, sizeof(stdin_false), stdin_false);
    ok(r && r->_stdin_case == PROCESS__START_REQUEST___STDIN_STDIN && !r->stdin,
       "stdin sent as false is set, and false");
    process__start_request__free_unpacked(r, NULL);
    r = process__start_request__unpack(NULL, sizeof(stdin_true), stdin_true);
    ok(r && r->_stdin_case == PROCESS__START_REQUEST___STDIN_STDIN && r->stdin,
       "stdin sent as true is set, and true");
    process__start_request__free_unpacked(r, NULL);

    Process__StartRequest out = PROCESS__START_REQUEST__INIT;
    uint8_t buf[16];
    out._stdin_case = PROCESS__START_REQUEST___STDIN_STDIN;
    out.stdin = 0;
    size_t n = process__start_request__pack(&out, buf);
    ok(n == sizeof(stdin_false) && memcmp(buf, stdin_false, n) == 0,
       "a set false stdin is packed, so a peer tells it from one left out");
    out._stdin_case = PROCESS__START_REQUEST___STDIN__NOT_SET;
    ok(process__start_request__get_packed_size(&out) == 0, "an unset one is left out");
}

static void test_events(void)
{
    Process__ProcessEvent ev = PROCESS__PROCESS_EVENT__INIT;
    Process__ProcessEvent__EndEvent end = PROCESS__PROCESS_EVENT__END_EVENT__INIT;
    uint8_t buf[64];

    end.exit_code = -1; /* sint32: zigzag, one byte */
    end.exited = 0;
    end.status = "signal: killed";
    ev.event_case = PROCESS__PROCESS_EVENT__EVENT_END;
    ev.end = &end;
    size_t n = process__process_event__pack(&ev, buf);
    /* field 3 (end), length; in it field 1 (exit_code) = zigzag(-1) = 1 */
    ok(n == 2 + 2 + 2 + strlen("signal: killed") && buf[0] == 0x1a && buf[2] == 0x08 &&
           buf[3] == 0x01,
       "an end event's exit code -1 is zigzag-encoded");
    Process__ProcessEvent *back = process__process_event__unpack(NULL, n, buf);
    ok(back && back->event_case == PROCESS__PROCESS_EVENT__EVENT_END &&
           back->end->exit_code == -1 && strcmp(back->end->status, "signal: killed") == 0 &&
           back->end->_error_case == PROCESS__PROCESS_EVENT__END_EVENT___ERROR__NOT_SET,
       "and reads back, its error unset");
    process__process_event__free_unpacked(back, NULL);
}

static void test_entry(void)
{
    Filesystem__EntryInfo e = FILESYSTEM__ENTRY_INFO__INIT;
    Google__Protobuf__Timestamp ts = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
    Filesystem__EntryInfo__MetadataEntry kv = FILESYSTEM__ENTRY_INFO__METADATA_ENTRY__INIT;
    Filesystem__EntryInfo__MetadataEntry *kvs[] = {&kv};
    uint8_t buf[256];

    e.name = "a";
    e.path = "/home/user/a";
    e.type = FILESYSTEM__FILE_TYPE__FILE_TYPE_SYMLINK;
    e.size = 5000000000;
    ts.seconds = 1700000000;
    ts.nanos = 5;
    e.modified_time = &ts;
    kv.key = "k";
    kv.value = "v";
    e.n_metadata = 1;
    e.metadata = kvs;
    e._symlink_target_case = FILESYSTEM__ENTRY_INFO___SYMLINK_TARGET_SYMLINK_TARGET;
    e.symlink_target = "";
    size_t n = filesystem__entry_info__pack(&e, buf);
    Filesystem__EntryInfo *b = filesystem__entry_info__unpack(NULL, n, buf);
    ok(b && strcmp(b->path, "/home/user/a") == 0 && b->size == 5000000000 &&
           b->type == FILESYSTEM__FILE_TYPE__FILE_TYPE_SYMLINK && b->modified_time &&
           b->modified_time->seconds == 1700000000 && b->modified_time->nanos == 5 &&
           b->n_metadata == 1 && strcmp(b->metadata[0]->value, "v") == 0 &&
           b->_symlink_target_case == FILESYSTEM__ENTRY_INFO___SYMLINK_TARGET_SYMLINK_TARGET &&
           strcmp(b->symlink_target, "") == 0,
       "an EntryInfo round trip: int64 size, Timestamp, metadata map, an empty symlink target "
       "still set");
    filesystem__entry_info__free_unpacked(b, NULL);
}

int main(void)
{
    test_services();
    test_presence();
    test_events();
    test_entry();
    return done_testing();
}
