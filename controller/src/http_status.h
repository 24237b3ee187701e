/* The controller's own HTTP endpoint: /healthz, /readyz (every informer has listed) and
 * /metrics (Prometheus text). An adapter over the controller and the API client. */
#pragma once

#include "controller.h"
#include "error.h"

struct sbx_status_server;

/* Listens on addr ("host:port" or ":port"; port 0 picks one, see sbx_status_server_port). */
int sbx_status_server_start(const char *addr, struct sbx_ctrl *ctrl, struct sbx_kube *kube,
                            struct sbx_status_server **ret, struct sbx_error *err);
int sbx_status_server_port(struct sbx_status_server *s);
void sbx_status_server_stop(struct sbx_status_server *s);
