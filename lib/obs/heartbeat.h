/* The heartbeat (dead man's switch): every interval, while the daemon is
 * healthy, a HEAD request to a URL that an external monitor watches.  When the
 * requests stop (daemon dead, wedged or unhealthy), the monitor alerts.
 *
 * One request at a time: a tick that finds the previous request still in
 * flight is skipped, not queued.  Failures are logged once per change of
 * state (failing / delivered again), never per tick.  The URL is logged as
 * scheme://host only: monitoring URLs usually embed a secret. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "ev/ev.h"
#include "util/time.h"

typedef struct heartbeat heartbeat_t;

struct heartbeat_opts {
	const char *url;     /* http or https */
	usec_t interval;     /* > 0; the first request goes out one interval after start */
	usec_t timeout;      /* per request; 0 = min(interval, 10 s) */
	const char *ca_file; /* extra CA bundle, NULL = system store */
	bool (*healthy)(void *userdata); /* NULL = always healthy */
	void *userdata;
};

struct heartbeat_stats {
	uint64_t sent;              /* requests started */
	uint64_t ok;                /* answered 2xx */
	uint64_t failed;            /* transport error or not 2xx */
	uint64_t skipped_busy;      /* ticks skipped: previous request still in flight */
	uint64_t skipped_unhealthy; /* ticks skipped: not healthy */
};

int heartbeat_new(ev_t *e, const struct heartbeat_opts *o, heartbeat_t **ret);
/* Cancels a request in flight.  NULL-safe. */
heartbeat_t *heartbeat_free(heartbeat_t *hb);
void heartbeat_get_stats(const heartbeat_t *hb, struct heartbeat_stats *ret);
