/* The claimer (claim.c): asks the driver for runs into the free slots, turns
 * each grant into a run (run.h) and hands it to its owner's table, routes
 * cancel events to the runs they name.  It reads the owner's run table and
 * knows the owner only through struct claimer_host. */
#pragma once

#include <stdbool.h>

#include "conf/conf.h"
#include "obs/metrics.h"
#include "proto/driver.h"
#include "worker/breaker.h"
#include "worker/run.h"

typedef struct claimer claimer_t;

struct claimer_host_ops {
	/* The configuration new runs start under. */
	struct conf_ref *(*conf)(void *host);
	/* Execution slots: worker.concurrency, or fewer when the fds allow fewer. */
	unsigned (*slots)(void *host);
	/* The workflow's failure breaker; NULL when it has none. */
	struct breaker *(*breaker)(void *host, const char *workflow);
	/* Claiming (not draining or stopping). */
	bool (*running)(void *host);
	/* Runs may still start (not stopping, not gone). */
	bool (*may_start)(void *host);
	/* A new run joins the table. */
	void (*add)(void *host, struct run *r);
	/* Something in flight ended: the owner may be done. */
	void (*idle)(void *host);
};

struct claimer_params {
	const struct claimer_host_ops *ops;
	void *host;
	struct run_host *runs; /* what new runs get as their host */
	const struct run_table *table;
	metric_t *m_claims, *m_queue_depth;
};

int claimer_new(const struct claimer_params *p, claimer_t **ret);
claimer_t *claimer_free(claimer_t *cl);
/* Claim now if there is room. */
/* A run claimed ahead was given back, no slot free within its hold: none is
 * claimed ahead until a slot is seen free. */
void claim_ready_expired(claimer_t *cl);
void claim_kick(claimer_t *cl);
/* A completion about to go out carries a claim (DRV_CAP_COMPLETE_CLAIM) for
 * the slot r leaves and any other free one not promised to a claim in
 * flight: the claimer calls send(claim, cb, lane, ctx), which sends the
 * completion with it (ctx is the caller's).  1: sent with a claim; 0: no
 * claim to carry (send was not called); < 0: send failed.  When the
 * completion is cancelled before its answer, claim_carry_dropped(lane). */
typedef int (*claim_carry_send_fn)(const struct drv_claim *claim, drv_claim_cb cb, void *lane,
                                   void *ctx);
int claim_carry(claimer_t *cl, const struct run *r, claim_carry_send_fn send, void *ctx);
void claim_carry_dropped(claimer_t *cl, void *lane);
/* why: a run could not start (or its result be read) for want of a host
 * resource: no claims for runs for a while, longer at each one in a row
 * (1 s doubling to 1 min); NULL: a run started, the streak is over. */
void claim_host_trouble(claimer_t *cl, const char *why);
/* While claims are held for the host's trouble: why, for /readyz; else NULL. */
const char *claimer_hold(const claimer_t *cl);
/* Drain or stop: abort the open claims, cancel them on the server
 * (DRV_CAP_CLAIM_CANCEL); without that but with DRV_CAP_RELEASE, let them end
 * and release what they bring. */
void claim_stop(claimer_t *cl);
/* A run left the table: start the run of the same id waiting for it, if any. */
void claim_run_unblocked(claimer_t *cl, const char *id);
/* Claim cancels, or claims left to end at a stop, still in flight (the owner
 * waits for them before it exits). */
bool claimer_busy(const claimer_t *cl);
/* Why the last claim failed ("last claim failed: ..."), NULL after a good one. */
const char *claimer_error(const claimer_t *cl);
long claimer_queue_depth(const claimer_t *cl); /* -1 = not known */
