/* The spool's delivery (spooler.c): results that could not be delivered are
 * written to the spool off the loop, and the entries of a previous life are
 * delivered through the driver at the next start (their log tail first, with
 * log_append, then the completion body with complete), retried with backoff,
 * dropped when the driver's answer says refused or lost.  The entries' files
 * are spool.c's. */
#pragma once

#include <stdbool.h>

#include "conf/conf.h"
#include "ev/ev.h"
#include "obs/metrics.h"
#include "offload/offload.h"
#include "proto/driver.h"
#include "worker/run.h"

typedef struct spooler spooler_t;

struct spooler_params {
	ev_t *ev;
	drv_t *drv;
	offload_t *offload;
	metric_t *m_pending, *m_delivered, *m_dropped;
	/* The configuration in force (spool_dir, max_output_bytes, request_timeout). */
	const struct conf *(*conf)(void *ud);
	/* Something in flight ended: the owner may be done. */
	void (*idle)(void *ud);
	void *ud;
};

int spooler_new(const struct spooler_params *p, spooler_t **ret);
/* Teardown, after the helper threads are stopped: deliveries in flight are
 * dropped (the entries stay for the next start), unfinished writes logged. */
spooler_t *spooler_free(spooler_t *sp);
/* Read the spool a previous life left (and clean a crash's leftovers). */
void spooler_load(spooler_t *sp);
/* Deliver every entry not yet in flight, and keep retrying them. */
void spooler_deliver(spooler_t *sp);
/* Drain or stop: no more deliveries; a tail still shipping stays for the next start. */
void spooler_stop(spooler_t *sp);
/* r's result (r->body, and the unshipped log when r->spool_log) to the spool. */
void spooler_write(spooler_t *sp, struct run *r);
/* Deliveries or writes in flight (forced: the writes are not waited for). */
bool spooler_busy(const spooler_t *sp);
/* A stop that overran: nothing in flight is waited for any more. */
void spooler_force(spooler_t *sp);
unsigned spooler_pending(const spooler_t *sp);
