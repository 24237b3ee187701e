/* A WebSocket connection after the upgrade: its socket on the daemon's loop, the client's frames
 * parsed into messages (ws_frame.h), pings answered, a bounded queue of frames to send, the
 * closing handshake with a deadline. One object for every route that upgrades; the set of a
 * server closes them all when it stops. Apart from sbx_ws_open, everything here runs on the loop
 * thread, and so do the callbacks. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"
#include "loop.h"
#include "ws_frame.h"

struct sbx_ws;
struct sbx_ws_set;

struct sbx_ws_ops {
    /* A text or binary message (valid during the call). */
    void (*message)(struct sbx_ws *ws, void *data, const struct sbx_ws_msg *m);
    /* There is room to queue frames: once at the start, then after the queue was full. */
    void (*writable)(struct sbx_ws *ws, void *data);
    /* The connection is gone; nothing of it may be used after this, and no call follows. */
    void (*closed)(struct sbx_ws *ws, void *data);
};

/* max: connections at once; max_msg: longest message a client may send; max_queue: bytes of
 * frames queued to send (a client that reads slowly gets no more than this held for it). */
int sbx_ws_set_new(struct sbx_ws_set **ret, struct sbx_loop *loop, unsigned max, size_t max_msg,
                   size_t max_queue, struct sbx_error *err);
/* Refuses new connections and closes every open one; with the loop stopped, or from its
 * thread. Accepts NULL. */
void sbx_ws_set_free(struct sbx_ws_set *set);
unsigned sbx_ws_set_count(struct sbx_ws_set *set);
/* Whether the set is at its limit (a handshake is refused before it is answered). */
bool sbx_ws_set_full(struct sbx_ws_set *set);

/* Takes a place in the set for a connection about to be upgraded (any thread): 0, -EBUSY at
 * the set's limit, -ESHUTDOWN once it stops. The place is the connection's from sbx_ws_open on;
 * sbx_ws_unreserve gives back one whose upgrade never came. So the limit holds exactly, however
 * many handshakes are answered at once. */
int sbx_ws_reserve(struct sbx_ws_set *set);
void sbx_ws_unreserve(struct sbx_ws_set *set);

/* Takes over the upgraded socket fd (any thread) into a place sbx_ws_reserve took, with the
 * bytes the server read beyond the handshake; release(arg) runs once the connection is over and
 * the fd must be given back (closed by whoever owns it), also when this fails (the place is
 * given back too). Returns 0, -ESHUTDOWN once the set stops, or -errno. */
int sbx_ws_open(struct sbx_ws_set *set, int fd, const uint8_t *extra, size_t n,
                void (*release)(void *arg), void *arg, const struct sbx_ws_ops *ops, void *data,
                struct sbx_error *err);

/* Bytes of payload that can be queued now (0 when the queue is full or the connection closes).
 * Asked while the queue is over half full, it also asks for writable() once it is under half. */
size_t sbx_ws_room(struct sbx_ws *ws);

/* Queues one frame and sends what the socket takes; -ENOBUFS beyond the room, -EPIPE once
 * closing. */
int sbx_ws_send(struct sbx_ws *ws, uint8_t op, const void *buf, size_t len);

/* Stops (or resumes) reading the client's frames: the owner's own queue is full. */
void sbx_ws_pause(struct sbx_ws *ws, bool paused);

/* Begins the closing handshake with code and reason (at most 123 bytes of UTF-8): what is
 * queued goes first; the connection ends when the client answers or after a deadline. */
void sbx_ws_close(struct sbx_ws *ws, uint16_t code, const char *reason);
