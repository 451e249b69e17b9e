/* The scheduler: slots, claims, lease keeping, execution, reporting with retry,
 * the poison-pill breakers, the drain state machine and the spool of results
 * that could not be delivered.  One worker per daemon, on one loop. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "conf/conf.h"
#include "ev/ev.h"
#include "obs/metrics.h"
#include "util/buf.h"

typedef struct worker worker_t;

/* Called once when the worker has nothing left to do after a drain or a hard
 * stop; code is the process exit code to use. */
typedef void (*worker_exit_cb)(worker_t *w, int code, void *userdata);

/* Takes ownership of conf (also on failure). */
int worker_new(ev_t *e, struct conf *conf, worker_exit_cb on_exit, void *userdata,
	       worker_t **ret);
worker_t *worker_free(worker_t *w);

/* Deliver the spool of a previous life, start claiming. */
int worker_start(worker_t *w);
/* SIGTERM/SIGINT: stop claiming, finish and report what runs, then exit 0.
 * A second call (or drain_timeout) turns it into a hard stop. */
void worker_drain(worker_t *w);
/* Kill ladder on every run, release each, spool undeliverable results, exit.
 * now = SIGQUIT: SIGKILL at once instead of TERM + grace. */
void worker_hard_stop(worker_t *w, bool now);
/* SIGHUP: switch to a freshly loaded configuration (takes ownership).  What
 * cannot change live is kept from the running one and logged. */
int worker_reload(worker_t *w, struct conf *next);

/* For the status endpoint and sd_notify. */
enum worker_phase { WORKER_IDLE, WORKER_RUNNING, WORKER_DRAINING, WORKER_STOPPING };
struct worker_info {
	enum worker_phase phase;
	unsigned runs_in_flight; /* every run held: slots_busy + reporting */
	unsigned slots;
	unsigned slots_busy;    /* runs claimed, waiting or running (children alive) */
	unsigned reporting;     /* runs whose child is gone, the API still to answer */
	unsigned max_reporting; /* worker.max_reporting: no claims while reporting >= it */
	uint64_t runs_done;
	bool api_ready;       /* reached recently, auth accepted, not draining */
	usec_t api_last_ok;   /* monotonic; 0 = never */
	const char *io_backend;
	long queue_depth;     /* last reported by the API, -1 = unknown */
	unsigned spool_pending;
};
void worker_get_info(const worker_t *w, struct worker_info *ret);
const char *worker_phase_name(enum worker_phase p);
/* NULL when ready (API reached recently with valid auth, not draining), else
 * why not, as one static line. */
const char *worker_not_ready_reason(const worker_t *w);
const struct conf *worker_conf(const worker_t *w);
/* "cgroup" (each run in its own cgroup, cgroup.kill) or "process_group". */
const char *worker_kill_mode(const worker_t *w);
/* Execution slots: worker.concurrency, or fewer when the runs' file
 * descriptors would not fit under RLIMIT_NOFILE (said at start and reload). */
unsigned worker_slots(const worker_t *w);
metrics_t *worker_metrics(worker_t *w);
/* JSON document for /status: runs in flight with age and state, breakers, config summary. */
int worker_status_json(const worker_t *w, struct buf *out);
