#include "grpc_launch.h"

#include <errno.h>
#include <stdio.h>

grpc_status_code sbx_launch_error_status(int r, const struct sbx_error *e, const char *what,
                                         char *msg, size_t size)
{
    grpc_status_code code = sbx_grpc_status(r);

    if (r == -ENOENT)
        snprintf(msg, size, "%s: command or path not found: %s", what, e->msg);
    else if (code == GRPC_STATUS_PERMISSION_DENIED && r != -EXDEV)
        snprintf(msg, size, "%s: permission denied: %s", what, e->msg);
    else if (r == -EINVAL || r == -EXDEV)
        snprintf(msg, size, "%s", e->msg);
    else
        snprintf(msg, size, "%s: %s", what, e->msg);
    return code;
}

void sbx_launch_reply_error(struct sbx_grpc_req *req, int r, const struct sbx_error *e,
                            const char *what)
{
    char msg[512];
    grpc_status_code code = sbx_launch_error_status(r, e, what, msg, sizeof(msg));

    sbx_grpc_reply(req, NULL, code, msg);
}
