/* The status endpoint: /metrics /healthz /readyz /status over HTTP, served by
 * libmicrohttpd on the daemon's own loop (no MHD threads: its epoll fd is one
 * ev watch, its timeout one ev timer).  Only GET and HEAD; everything a client
 * can grow is bounded (connections in total and per IP, idle time, memory per
 * connection), so a slow or hostile client cannot stall the loop.
 *
 * lib/obs knows nothing of the worker: the caller supplies the content as
 * callbacks. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "ev/ev.h"
#include "util/buf.h"

typedef struct status status_t;

struct status_handlers {
	/* Prometheus text format 0.0.4 for /metrics.  0 or -errno (then 500). */
	int (*metrics)(struct buf *out, void *userdata);
	/* The JSON document for /status.  0 or -errno (then 500). */
	int (*status_json)(struct buf *out, void *userdata);
	/* /readyz: true = 200 "ready"; false = 503 with *ret_reason (one line,
	 * static or owned by the callee until the next call). */
	bool (*ready)(const char **ret_reason, void *userdata);
	/* /healthz beyond "the loop answered": NULL = always healthy. */
	bool (*healthy)(const char **ret_reason, void *userdata);
	void *userdata;
};

#define STATUS_CONNECTION_LIMIT 64 /* the default */

struct status_limits {
	unsigned connection_limit; /* 0 = STATUS_CONNECTION_LIMIT */
	unsigned per_ip_limit;     /* 0 = 16 */
	unsigned idle_timeout_s;   /* 0 = 10: a connection silent this long is closed */
	size_t memory_per_conn;    /* 0 = 32 KiB: request line + headers must fit */
	size_t max_body;           /* 0 = 16 MiB: cap on a rendered /metrics or /status */
};

/* Listen on addr (IPv4 or IPv6; port 0 = the kernel picks, see status_port).
 * limits may be NULL.  A bind failure is returned as -errno (-EADDRINUSE,
 * -EADDRNOTAVAIL, -EACCES) before anything else is set up. */
int status_new(ev_t *e, const struct sockaddr *addr, socklen_t addr_len,
               const struct status_handlers *h, const struct status_limits *limits, status_t **ret);
/* Stops serving, closes every connection and the listening socket.  NULL-safe. */
status_t *status_free(status_t *s);

/* The port actually bound (host order). */
uint16_t status_port(const status_t *s);
/* Connections open now (for tests and debugging). */
unsigned status_connections(const status_t *s);
/* Requests answered so far, by any status code. */
uint64_t status_requests(const status_t *s);
