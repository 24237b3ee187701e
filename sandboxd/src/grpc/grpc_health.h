/* grpc.health.v1.Health: Check, List and Watch, NOT_SERVING once draining. */
#pragma once

#include <stdbool.h>

#include "error.h"
#include "grpc_server.h"

struct sbx_health;

int sbx_health_new(struct sbx_health **ret, struct sbx_error *err);
void sbx_health_free(struct sbx_health *h);

/* Sets the status of every service we serve; Watch streams hear of it. Thread-safe. */
void sbx_health_set_serving(struct sbx_health *h, bool serving);

/* Ends every Watch stream with status UNAVAILABLE (the daemon is stopping). Thread-safe. */
void sbx_health_end_watches(struct sbx_health *h);

int sbx_grpc_health_register(struct sbx_grpc *srv, struct sbx_health *h, struct sbx_error *err);
