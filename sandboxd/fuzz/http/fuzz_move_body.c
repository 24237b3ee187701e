/* libFuzzer target for POST /v1/move's JSON body: sbx_http_parse_move (jansson), then, for a body
 * it accepts, sbx_fs_move of from to to in a fresh box (fuzz_box.h), as the handler does.
 *
 * Checked: a body is accepted only when it is a JSON object whose "from" and "to" are strings
 * (and "overwrite", when present, a boolean); the move leaves nothing outside the root changed
 * and no fd open; an error carries its -errno and a message; without overwrite an existing
 * destination is never replaced. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "files.h"
#include "fuzz_box.h"
#include "http_args.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int fds = -1;
    const char *from = NULL, *to = NULL;
    struct sbx_error err = {0};
    bool overwrite = false, to_existed;
    struct fuzz_box b;
    json_t *j, *again, *o;
    struct stat st;
    char *target = NULL;
    int r;

    if (size > 64 * 1024) /* the handler's bound */
        return 0;
    if (fds < 0) {
        umask(022);
        fds = fuzz_count_fds();
    }
    j = sbx_http_parse_move((const char *)data, size, &from, &to, &overwrite);
    again = json_loadb((const char *)data, size, 0, NULL);
    o = json_object_get(again, "overwrite");
    CHECK(!j == !(json_is_object(again) && json_is_string(json_object_get(again, "from")) &&
                  json_is_string(json_object_get(again, "to")) && (!o || json_is_boolean(o))),
          "accepted: %d", j != NULL);
    json_decref(again);
    if (!j)
        return 0;
    CHECK(from && to, "accepted without from or to");
    fuzz_box_make(&b);
    to_existed = sbx_fs_lstat(&b.root, to, &st, &target, &err) == 0;
    free(target);
    r = sbx_fs_move(&b.root, from, to, overwrite, &err);
    CHECK(r == 0 || (err.code == -r && err.msg[0]), "move: %d with code %d and message '%s'", r,
          err.code, err.msg);
    CHECK(!(r == 0 && to_existed && !overwrite && strcmp(from, to) != 0),
          "'%s' replaced '%s' without overwrite", from, to);
    json_decref(j);
    CHECK(fuzz_count_fds() == fds + 1, "fd leak: %d open, %d before (and the root's)",
          fuzz_count_fds(), fds);
    fuzz_box_remove(&b, NULL);
    return 0;
}
