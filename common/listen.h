/* A listening TCP socket: both families on one socket by default, accepts deferred until the
 * client speaks. sandboxd's REST port and the router listen with it. */
#pragma once

#include "error.h"

/* Listens on host (an IP address; NULL: every address of both families on one dual-stack
 * socket, IPv4 alone where the kernel has no IPv6; an IPv6 address binds IPv6 only) and port
 * (0: any free one), non-blocking, with TCP_DEFER_ACCEPT of defer_s seconds: the kernel wakes us
 * for a connection only once it has sent something, or after that time. Sets *fd and
 * *families ("IPv4 and IPv6", "IPv4 only", ...); returns the bound port or -errno. */
int sbx_listen(const char *host, int port, int defer_s, int *fd, const char **families,
               struct sbx_error *err);
