/* SHA-256 of a file while it is being written: inline while small, then on a thread of its own
 * that reads back from the page cache what the writer wrote, so that hashing a large upload
 * runs beside receiving it instead of after it. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "error.h"

#define SBX_SHA256_LEN 32

struct sbx_hasher;

/* fd: the file being written, opened for reading too (borrowed; must outlive the hasher). */
int sbx_hasher_new(int fd, struct sbx_hasher **ret, struct sbx_error *err);

/* buf, len: bytes just written to the end of the file. */
void sbx_hasher_update(struct sbx_hasher *h, const void *buf, size_t len);

/* Waits until every byte is hashed. Returns 0 or -errno (the read back failed). */
int sbx_hasher_final(struct sbx_hasher *h, uint8_t out[SBX_SHA256_LEN], struct sbx_error *err);

/* Stops the thread, if any. Accepts NULL. */
void sbx_hasher_free(struct sbx_hasher *h);
