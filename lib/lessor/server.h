/* `lessor serve`: the store, the API, the reaper and libmicrohttpd wired
 * together.  libmicrohttpd runs a small pool of polling threads (epoll); a
 * long poll suspends its connection (MHD_suspend_connection) instead of
 * holding a thread, and is resumed by the waiters when a run arrives or its
 * deadline passes. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lessor/tokens.h"
#include "util/time.h"

struct lessor_server_config {
	const char *listen; /* "HOST:PORT" or "[V6]:PORT"; port 0 = any free port */
	const char *db_path;
	lessor_tokens *tokens; /* taken, also when start fails; NULL = no authentication */
	size_t max_body;       /* request body cap */
	uint64_t max_log_bytes;
	bool sync_full;       /* synchronous=FULL (else NORMAL) */
	bool no_group_commit; /* SQLite: one transaction per write (to measure against) */
	unsigned threads;     /* HTTP polling threads */
	usec_t retry_base;    /* first retry delay, doubling */
	usec_t retry_max;
	unsigned max_lease_expiries;
	bool enable_faults;
	usec_t tick; /* reaper period */
};

#define LESSOR_SERVER_CONFIG_DEFAULTS                                                              \
	((struct lessor_server_config){                                                            \
	    .listen = "127.0.0.1:8080",                                                            \
	    .max_body = 4u << 20,                                                                  \
	    .max_log_bytes = 64u << 20,                                                            \
	    .sync_full = true,                                                                     \
	    .threads = 4,                                                                          \
	    .retry_base = 5 * USEC_PER_SEC,                                                        \
	    .retry_max = 5 * USEC_PER_MINUTE,                                                      \
	    .max_lease_expiries = 3,                                                               \
	    .tick = 100 * USEC_PER_MSEC,                                                           \
	})

typedef struct lessor_server lessor_server;

int lessor_server_start(const struct lessor_server_config *cfg, lessor_server **ret);
/* The bound address, "127.0.0.1:41234" (the real port when 0 was asked). */
const char *lessor_server_address(const lessor_server *s);
/* Replaces the token set (takes t): requests from now on are checked against
 * it (SIGHUP reload; the old tokens are wiped). */
void lessor_server_set_tokens(lessor_server *s, lessor_tokens *t);
/* Graceful stop: stop accepting, answer parked long polls, let in-flight
 * requests finish (bounded), stop the threads, close the database. */
lessor_server *lessor_server_stop(lessor_server *s);
