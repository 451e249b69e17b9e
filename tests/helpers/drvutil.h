/* Test helpers for lib/proto's drivers: a driver instance on a URL and one
 * run it holds, made without the worker. */
#pragma once

#include "ev/ev.h"
#include "obs/metrics.h"
#include "proto/driver.h"

/* A driver with table ops (a test may wrap the native one) talking to url,
 * and the run `id` it holds under `token`, rebuilt the way a spooled
 * completion is (ops->restore).  Asserts on failure. */
void tu_driver(ev_t *e, const struct drv_ops *ops, const char *url, const char *id,
               const char *token, metrics_t **ret_m, drv_t **ret_d, drv_run_t **ret_run);
void tu_native_driver(ev_t *e, const char *url, const char *id, const char *token,
                      metrics_t **ret_m, drv_t **ret_d, drv_run_t **ret_run);
