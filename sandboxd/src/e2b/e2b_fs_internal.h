/* What e2b_fs.c, e2b_fs_watch.c and e2b_files.c share beyond e2b_fs.h. */
#pragma once

#include <pthread.h>
#include <stdbool.h>

#include "e2b/filesystem/filesystem.pb-c.h"
#include "e2b_fs.h"
#include "google/protobuf/timestamp.pb-c.h"
#include "userfs.h"

struct e2b_fs_state {
    bool ready;
    struct sbx_e2b_fs_opts o;
    struct sbx_root slash;
    struct sbx_fswatches *watches;
    pthread_mutex_t lock; /* the polling watchers (e2b_fs_watch.c) */
};

extern struct e2b_fs_state sbx_e2b_fs_state;

/* An EntryInfo pointing into a userfs entry (valid while it is), with the metadata map's
 * entries of its own (released with sbx_e2b_fs_entry_pb_release). */
struct e2b_pb_entry {
    Filesystem__EntryInfo e;
    Google__Protobuf__Timestamp t;
    Filesystem__EntryInfo__MetadataEntry *me, **mp;
};

/* Without memory for the metadata map, the entry goes without it. */
void sbx_e2b_fs_entry_pb(const struct sbx_ufs_entry *u, struct e2b_pb_entry *p);
void sbx_e2b_fs_entry_pb_release(struct e2b_pb_entry *p);
/* envd's Connect code for -errno. */
int sbx_e2b_fs_code(int r);

void sbx_e2b_fs_watch_dir(struct sbx_e2b_call *c, const ProtobufCMessage *req);
void sbx_e2b_fs_create_watcher(struct sbx_e2b_call *c, const ProtobufCMessage *req);
void sbx_e2b_fs_get_watcher_events(struct sbx_e2b_call *c, const ProtobufCMessage *req);
void sbx_e2b_fs_remove_watcher(struct sbx_e2b_call *c, const ProtobufCMessage *req);
/* Closes every polling watcher (teardown). */
void sbx_e2b_fs_watchers_clear(void);
