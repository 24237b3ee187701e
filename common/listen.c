/* The REST port's listening socket: both families by default, TCP_DEFER_ACCEPT set. */
#define _GNU_SOURCE
#include "listen.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cleanup.h"

static int listen_family(int family, const char *host, int port, bool v6only, int defer_s, int *out)
{
    struct sockaddr_storage ss = {0};
    struct sockaddr_in *in4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
    _cleanup_close_ int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1, v6 = v6only;

    if (fd < 0)
        return -errno;
    ss.ss_family = (sa_family_t)family;
    if (family == AF_INET) {
        in4->sin_port = htons((uint16_t)port);
        if (host && inet_pton(AF_INET, host, &in4->sin_addr) != 1)
            return -EINVAL;
    } else {
        in6->sin6_port = htons((uint16_t)port);
        if (host && inet_pton(AF_INET6, host, &in6->sin6_addr) != 1)
            return -EINVAL;
        if (setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6, sizeof(v6)) < 0)
            return -errno;
    }
    /* SO_REUSEADDR: a restarted daemon binds again while its predecessor's connections sit in
     * TIME_WAIT; not SO_REUSEPORT: a second daemon on the port is refused. */
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&ss,
             family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6)) < 0 ||
        listen(fd, SOMAXCONN) < 0)
        return -errno;
    /* The kernel holds a connection that sends nothing for the head's time before it wakes us:
     * a flood of silent connections never fills the accept queue (a full one drops SYNs, a
     * probe's among them) nor costs the gate an fd. */
    setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &defer_s, sizeof(defer_s));
    *out = TAKE_FD(fd);
    return 0;
}

static int bound_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);

    if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
        return -errno;
    return ntohs(ss.ss_family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                         : ((struct sockaddr_in6 *)&ss)->sin6_port);
}

int sbx_listen(const char *h, int port, int defer_s, int *fd, const char **families,
               struct sbx_error *err)
{
    unsigned char buf[16];
    int r;

    if (!h) {
        r = listen_family(AF_INET6, NULL, port, false, defer_s, fd);
        *families = "IPv4 and IPv6";
        if (r == -EAFNOSUPPORT || r == -EADDRNOTAVAIL || r == -EPROTONOSUPPORT) {
            r = listen_family(AF_INET, NULL, port, false, defer_s, fd);
            *families = "IPv4 only (this kernel has no IPv6)";
        }
    } else if (inet_pton(AF_INET, h, buf) == 1) {
        r = listen_family(AF_INET, h, port, false, defer_s, fd);
        *families = "IPv4 only";
    } else if (inet_pton(AF_INET6, h, buf) == 1) {
        r = listen_family(AF_INET6, h, port, true, defer_s, fd);
        *families = "IPv6 only";
    } else {
        return sbx_error_set(err, EINVAL, "listen host '%s' is not an IP address", h);
    }
    if (r < 0)
        return sbx_error_set(err, -r, "cannot listen on %s port %d", h ? h : "every address", port);
    r = bound_port(*fd);
    if (r < 0) {
        close(*fd);
        *fd = -1;
        return sbx_error_set(err, -r, "read the bound port");
    }
    return r;
}
