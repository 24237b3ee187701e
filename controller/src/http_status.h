/* The controller's own HTTP endpoint: /healthz, /readyz (every informer has listed) and
 * /metrics (Prometheus text). An adapter over the controller and the API client. */
#pragma once

#include "controller.h"
#include "error.h"

struct sbx_status_server;

/* Listens on addr ("host:port" or ":port"; port 0 picks one, see sbx_status_server_port).
 * Until sbx_status_server_set_ctrl, /readyz answers 503 (a standby replica) and /metrics
 * holds the client's counters alone. */
int sbx_status_server_start(const char *addr, struct sbx_kube *kube, struct sbx_status_server **ret,
                            struct sbx_error *err);
void sbx_status_server_set_ctrl(struct sbx_status_server *s, struct sbx_ctrl *ctrl);
int sbx_status_server_port(struct sbx_status_server *s);
void sbx_status_server_stop(struct sbx_status_server *s);
