/* One run's life as a state x event table (run.c), and the run's files off
 * the loop (runfiles.c).  A run knows its owner only through struct
 * run_host: the shared services (loop, driver, helper threads, cgroups,
 * metrics) and four calls back.  The worker is the host in the daemon; a test
 * can be one (tests/unit/check_worker.c). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "conf/conf.h"
#include "exec/cgroup.h"
#include "exec/exec.h"
#include "logship/logship.h"
#include "obs/metrics.h"
#include "offload/offload.h"
#include "proto/driver.h"
#include "util/tail.h"
#include "worker/breaker.h"

/* A configuration shared by the runs that started under it (SIGHUP swaps the
 * worker's, runs keep theirs). */
struct conf_ref {
	struct conf *conf;
	unsigned refs;
};
struct conf_ref *conf_ref_new(struct conf *c); /* takes c, also on failure */
struct conf_ref *conf_ref_get(struct conf_ref *r);
struct conf_ref *conf_ref_put(struct conf_ref *r);

enum run_state {
	RUN_CLAIMED,
	RUN_WAITING, /* an older lease's execution of the same run id is still alive */
	RUN_READY,   /* claimed ahead of a free slot (worker.prefetch): waits for one */
	RUN_RUNNING,
	RUN_KILLING,
	RUN_FLUSHING,
	RUN_REPORTING,
	RUN_RELEASING,
	RUN_DONE,
	_RUN_STATE_MAX,
};

enum run_event {
	RE_START,      /* start the process */
	RE_REJECT,     /* the API sent something unusable: complete as rejected */
	RE_RELEASE,    /* give it back without running it */
	RE_EXITED,     /* process gone, output read */
	RE_CANCEL,     /* the API asks to cancel */
	RE_LEASE_LOST, /* the driver says DRV_LOST, or the API granted the run again */
	RE_HARD_STOP,
	RE_LOG_FLUSHED,
	RE_REPORTED, /* complete accepted (or refused for good) */
	RE_RELEASED,
	RE_WAIT,  /* an older execution of this run id is alive: start after it */
	RE_READY, /* no slot is free: wait for one, at most worker.prefetch_hold */
	/* the timers: each fires as an event of the table */
	RE_TIMER,    /* the run's timer: a timeout, a bound, a retry's backoff */
	RE_RENEW,    /* the lease renewal is due */
	RE_DEADLINE, /* the local lease deadline (or the result's offer) passed */
	RE_ABANDON,  /* the worker gives up on it (teardown, a stop that overran) */
	_RE_MAX,
};

enum kill_reason { KILL_NONE, KILL_TIMEOUT, KILL_CANCEL, KILL_LEASE_LOST, KILL_SHUTDOWN };

struct run;

struct run_host_ops {
	/* The workflow's failure breaker; NULL when it has none. */
	struct breaker *(*breaker)(void *host, const char *workflow);
	/* The breaker of this workflow changed state. */
	void (*breaker_changed)(void *host, const char *workflow);
	/* A result to deliver at the next start (r is freed right after). */
	void (*spool)(void *host, struct run *r);
	/* r reached DONE: it leaves the host's table (and is freed right after). */
	void (*done)(void *host, struct run *r);
	/* r changed state (before: the one it left), DONE included, before done;
	 * NULL: the host does not count its runs by place. */
	void (*moved)(void *host, struct run *r, enum run_state before);
	/* A run's verdict reached the workflow's breaker without changing its
	 * state: claims held back for it may go; NULL = nothing to do. */
	void (*settled)(void *host, const char *workflow);
	/* r's completion is about to go out for the first time: the host may
	 * have it carry a claim (claim_carry; the same contract), or NULL. */
	int (*carry)(void *host, struct run *r,
	             int (*send)(const struct drv_claim *, drv_claim_cb, void *, void *),
	             void *ctx);
	/* r's renewal just went out: the host may renew the leases due soon with
	 * it (run_renew_due), or NULL. */
	void (*renewing)(void *host, struct run *r);
	/* The completion that carried the claim lane was cancelled. */
	void (*carry_dropped)(void *host, void *lane);
	/* Optional.  why: a run could not start, or its result could not be read,
	 * for want of something of this host's (disk, fds, processes, memory);
	 * NULL: a run started. */
	void (*host_trouble)(void *host, const char *why);
};

struct run_metrics {
	metric_t *started, *finished, *leases_lost, *renewals, *duration, *log_bytes, *log_dropped;
	metric_t *results_refused;
};

struct run_host {
	const struct run_host_ops *ops;
	void *host;
	ev_t *ev;
	drv_t *drv;
	offload_t *offload;
	cgroup_tree_t *cgroups; /* NULL: runs are stopped through their process group */
	bool kill_now;          /* stop children with SIGKILL at once, no grace */
	bool stopping;          /* hard stop: no request is waited for, results are spooled */
	bool tearing_down;      /* the host is going away: abandoned runs keep nothing */
	struct run_metrics m;
};

struct run {
	struct run_host *h;
	struct run *prev, *next; /* the host's table */
	struct run *id_next;     /* the table's chain of runs whose ids hash alike */
	struct run *ready_prev, *ready_next; /* the table's RUN_READY runs, oldest first */
	struct conf_ref *cref;
	const struct conf_workflow *wf; /* NULL for runs released or rejected unstarted */
	char *id, *workflow;
	char *lease_key; /* the driver's name of this lease (drv_grant.lease_key) */
	drv_run_t *priv; /* the driver's per-run data; NULL for unusable runs */
	char **env;      /* the driver's extra variables for the run, or NULL */
	unsigned attempt;
	unsigned timeout_s; /* the run's own, 0 = none */
	char *input;
	size_t input_len;
	char *reject_reason;
	enum drv_release_reason release_reason;

	enum run_state state; /* written by run_dispatch only */
	enum kill_reason kill_reason;
	bool breaker_started; /* counted by breaker_run_started */
	bool verdict_pending; /* counted by breaker_pending: the child is gone */
	bool verdict_given;   /* its verdict is recorded (the breaker is done with it) */
	bool lost;            /* the lease is gone: nothing more is written */
	bool result_refused;  /* the API refused the completion for good: dropped */
	bool log_before_release; /* RELEASING: the log is shipped first */
	bool host_trouble;       /* failed for want of a host resource: a retry, no verdict */
	bool spool_log;       /* the spooled result carries the unshipped log */
	bool log_failed;      /* its log shipper could not be made: output not shipped */

	usec_t claimed_at, started_at;
	usec_t lease_deadline; /* monotonic, local */
	usec_t lease_sent_at;  /* send time of the renewal in flight */
	unsigned lease_retries;
	unsigned lease_ttl_s; /* of the last grant or renewal */
	bool lease_fresh;     /* the last renewal failed in transport: new connection */
	usec_t offer_until;   /* child gone, local deadline passed: the result is
	                       * offered until then (0 = not yet) */
	ev_timer_t *renew_timer, *deadline_timer, *timer;
	drv_req_t *lease_req, *req;
	unsigned req_attempts;
	void *req_carries; /* r->req carries this claim (run_host_ops.carry) */

	char *dir;
	cgroup_run_t *cg; /* the run's own cgroup in cgroup kill mode */
	exec_proc_t *proc;
	logship_t *log;
	struct tail tail; /* the output's end, for drv_outcome.log_tail */
	struct exec_result result;

	offload_job_t *collect_job; /* reading the result file (runfiles.c) */
	bool collecting;
	int collect_then; /* event deferred until the result file is read, -1 = none */

	struct drv_outcome outcome;
	char *error, *output, *body;
	char *log_tail; /* tail's text once the run ended */
	char signame[24];
	char note[96]; /* detail for the next state-change log line */
};

/* Where a run is held (docs/architecture.md, "Slots and the reporting
 * queue"): an execution slot from its claim until its child is gone (CLAIMED,
 * WAITING, RUNNING, KILLING); then, while only the API is waited for (its log
 * flush, its completion and the retries of it, a release: FLUSHING,
 * REPORTING, RELEASING), a place in the reporting queue. */
bool run_holds_slot(enum run_state s);

/* The runs a host holds (r->next order), counted by place. */
struct run_table {
	struct run *head;
	struct run **ids;   /* the runs by id: chained, grown with n (NULL: none yet) */
	size_t n_ids;       /* buckets, a power of two */
	uint64_t id_seed;   /* the ids are the API's: keyed, so none can make chains long */
	unsigned n;         /* every run held */
	unsigned running;   /* of those, holding an execution slot */
	unsigned reporting; /* of those, in the reporting queue */
	unsigned flushing;  /* of those, shipping the last of their log before the
	                     * completion (RUN_FLUSHING) */
	unsigned ready;     /* of those, claimed ahead of a free slot (RUN_READY) */
	struct run *ready_head, *ready_tail; /* those, oldest first */
};
void run_table_add(struct run_table *t, struct run *r);
/* r reached DONE: out of the table (its place was given back by run_table_moved). */
void run_table_remove(struct run_table *t, struct run *r);
/* r left state before (ops->moved).  Returns true when that freed an
 * execution slot or a place in the reporting queue (time to claim). */
bool run_table_moved(struct run_table *t, struct run *r, enum run_state before);
/* The runs of this id (a run re-granted may be held twice), in O(1):
 * for (o = run_table_find(t, id); o; o = run_table_find_next(o, id)). */
struct run *run_table_find(const struct run_table *t, const char *id);
struct run *run_table_find_next(struct run *r, const char *id);
void run_table_free(struct run_table *t);

/* Renew r now if its renewal is due by `by` (monotonic): a wave of renewals
 * that the driver sends in one request. */
void run_renew_due(struct run *r, usec_t by);

/* Takes what it keeps of g (TAKE_PTR); conf is the configuration it runs under. */
struct run *run_new(struct run_host *h, struct conf_ref *conf, struct drv_grant *g,
                    usec_t claim_sent_at);
/* Every change of state: table[state][ev].  An empty cell is ignored (and
 * logged at debug).  On DONE the run leaves the host (ops->done) and is freed. */
void run_dispatch(struct run *r, enum run_event ev);
const char *run_state_name(enum run_state s);
const char *run_event_name(enum run_event ev);
const char *run_outcome_label(const struct run *r);
/* The table's cell, NULL when empty (tests walk it). */
bool run_cell(enum run_state s, enum run_event ev);

/* ---- runfiles.c: a run's files, off the loop (lib/offload) ---- */
struct result_job {
	struct run *run; /* loop only; the job is cancelled when the run is freed */
	char *dir;
	size_t cap;  /* max_output_bytes */
	uid_t owner; /* the run's uid: a result file of anyone else is refused */
	/* written by the helper thread */
	int err;       /* 0, or -errno with why */
	char why[160]; /* "is a FIFO, not a regular file" */
	char *data;    /* NULL: no result file */
	size_t len;
	bool valid_json;
};
void result_job_work(void *arg); /* on a helper thread, as the run's user */
/* The run left no result file: one lstat, on the loop (it opens nothing, so
 * nothing the run left can make it wait), and no helper thread is woken. */
bool runfiles_result_absent(const char *dir);
struct result_job *result_job_free(struct result_job *j);
/* Remove the run directory: input.json and the directory on the loop when
 * that is all there is, else rm_rf on a helper thread. */
void runfiles_remove(offload_t *o, const char *dir);
