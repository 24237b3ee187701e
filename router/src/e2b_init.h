/* E2B's /init, which E2B's orchestrator sends envd when a sandbox starts: the router sends it the
 * env vars a create asked for, so every process the sandbox's envd starts sees them. */
#pragma once

#include <jansson.h>
#include <stdint.h>

#include "error.h"

/* POSTs {"envVars": env} to http://<ip>:<port>/init with the envd access token (NULL: none),
 * at most timeout_ms. 0 when envd took it (2xx); -EIO with the answer's status and text, or the
 * transport's error, in err. */
int e2b_init_push(const char *ip, int port, const char *token, json_t *env, uint64_t timeout_ms,
                  struct sbx_error *err);
