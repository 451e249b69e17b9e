/* Private to lib/worker: the shapes shared by its files. */
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
#include "proto/proto.h"
#include "util/random.h"
#include "worker/breaker.h"
#include "worker/worker.h"

/* A configuration shared by the runs that started under it (SIGHUP swaps the
 * worker's, runs keep theirs). */
struct conf_ref {
	struct conf *conf;
	unsigned refs;
};
struct conf_ref *conf_ref_new(struct conf *c);
struct conf_ref *conf_ref_get(struct conf_ref *r);
struct conf_ref *conf_ref_put(struct conf_ref *r);

/* ---- spool.c: results that could not be delivered, one fsync'd entry per lease ---- */
#define SPOOL_BODY_SLACK (1u << 20) /* a body's fields besides the output */
#define SPOOL_TAIL_MAX (16u << 20)  /* the unshipped log kept with a result */
#define SPOOL_NAME_MAX (PROTO_ID_MAX + 24)

struct spool_tail {
	const void *data;
	size_t len;
	struct logship_resume where; /* where data goes in the run's log */
	unsigned attempt;            /* for logship's restart marker */
};

struct spool_entry {
	int error;    /* < 0: the entry could not be read (body is NULL) */
	char *name;   /* "<run id>@<token hash>" */
	char *run_id;
	char *body;   /* the complete body */
	char *tail;   /* log bytes still to append (see where), or NULL */
	size_t tail_len;
	struct logship_resume where;
	unsigned attempt;
};
typedef int (*spool_fn)(struct spool_entry *e, void *ud); /* takes e's fields */

/* The largest complete body spool_write accepts (and replay reads). */
size_t spool_max_body(uint64_t max_output_bytes);
/* lease_key: the grant's (drv_grant.lease_key), hashed into the name */
int spool_entry_name(const char *run_id, const char *token, char *buf, size_t len);
int spool_write(const char *dir, const char *name, const char *complete_body, size_t max_body,
		const struct spool_tail *tail);
int spool_foreach(const char *dir, size_t max_body, spool_fn fn, void *ud);
void spool_entry_done(struct spool_entry *e);
/* Removes one entry's files, by name. */
int spool_remove(const char *dir, const char *name);
/* Removes temporaries and orphan tails left by a crash; returns how many. */
int spool_clean(const char *dir, void (*fn)(const char *name, void *ud), void *ud);
int spool_count(const char *dir);
/* Sets the body's top-level "log_length" (the first such key: it precedes
 * every string that could hold one). */
int spool_body_set_log_length(char **body, uint64_t log_length);

/* ---- run.c: one run's life as a state x event table ---- */
enum run_state {
	RUN_CLAIMED,
	RUN_WAITING, /* an older lease's execution of the same run id is still alive */
	RUN_RUNNING,
	RUN_KILLING,
	RUN_FLUSHING,
	RUN_REPORTING,
	RUN_RELEASING,
	RUN_DONE,
	_RUN_STATE_MAX,
};

enum run_event {
	RE_START,       /* start the process */
	RE_REJECT,      /* the API sent something unusable: complete as rejected */
	RE_RELEASE,     /* give it back without running it */
	RE_EXITED,      /* process gone, output read */
	RE_TIMEOUT,
	RE_CANCEL,      /* cancel_requested */
	RE_LEASE_LOST,  /* 409/404 or local deadline passed */
	RE_HARD_STOP,
	RE_LOG_FLUSHED,
	RE_REPORTED,    /* complete accepted (or refused for good) */
	RE_RELEASED,
	RE_WAIT,        /* an older execution of this run id is alive: start after it */
	_RE_MAX,
};

enum kill_reason { KILL_NONE, KILL_TIMEOUT, KILL_CANCEL, KILL_LEASE_LOST, KILL_SHUTDOWN };

struct run {
	worker_t *w;
	struct run *prev, *next;
	struct conf_ref *cref;
	const struct conf_workflow *wf; /* NULL for runs released or rejected unstarted */
	char *id, *workflow;
	char *lease_key;   /* the driver's name of this lease (drv_grant.lease_key) */
	drv_run_t *priv;   /* the driver's per-run data; NULL for unusable runs */
	char **env;        /* the driver's extra variables for the run, or NULL */
	unsigned attempt;
	unsigned timeout_s;  /* the run's own, 0 = none */
	char *input;
	size_t input_len;
	char *reject_reason;
	enum drv_release_reason release_reason;

	enum run_state state;
	enum kill_reason kill_reason;
	bool breaker_started; /* counted by breaker_run_started */
	bool lost;            /* the lease is gone: nothing more is written */
	bool spool_log;       /* the spooled result carries the unshipped log */

	usec_t claimed_at, started_at;
	usec_t lease_deadline;  /* monotonic, local */
	usec_t lease_sent_at;   /* send time of the renewal in flight */
	unsigned lease_retries;
	unsigned lease_ttl_s;   /* of the last grant or renewal */
	bool lease_fresh;       /* the last renewal failed in transport: new connection */
	usec_t offer_until;     /* child gone, local deadline passed: the result is
				 * offered until then (0 = not yet) */
	ev_timer_t *renew_timer, *deadline_timer, *timer;
	drv_req_t *lease_req, *req;
	unsigned req_attempts;

	char *dir;
	cgroup_run_t *cg; /* the run's own cgroup in cgroup kill mode */
	exec_proc_t *proc;
	logship_t *log;
	struct exec_result result;

	offload_job_t *collect_job; /* reading the result file (runfiles.c) */
	bool collecting;
	int collect_then; /* event deferred until the result file is read, -1 = none */

	struct drv_outcome outcome;
	char *error, *output, *body;
	char signame[24];
	char note[96]; /* detail for the next state-change log line */
};

struct run *run_new(worker_t *w, struct drv_grant *g, usec_t claim_sent_at);
void run_dispatch(struct run *r, enum run_event ev);
const char *run_state_name(enum run_state s);
const char *run_outcome_label(const struct run *r);

/* ---- worker.c: what run.c and claim.c need from the worker ---- */
struct wfstate {
	char *name;
	struct breaker breaker;
};

struct worker {
	ev_t *ev;
	struct conf_ref *cref;
	metrics_t *metrics;
	drv_t *drv;
	enum worker_phase phase;
	bool kill_now;
	worker_exit_cb on_exit;
	void *userdata;
	bool exited;

	struct run *runs;
	unsigned n_runs;
	uint64_t runs_done;
	struct wfstate *wfs;
	size_t n_wfs;

	/* claim.c: one lane with DRV_CAP_MULTI_WORKFLOW, else one per workflow */
	struct claim_lane **lanes;
	size_t n_lanes;
	unsigned lane_rr;       /* which workflow goes first when slots are scarce */
	unsigned claim_failures;
	unsigned idle_polls;
	ev_timer_t *claim_timer;
	long queue_depth;
	unsigned claim_cancels; /* claim cancels in flight */
	bool in_arrival;        /* handling a claim's runs: no nested claim */
	/* failed claim attempts: the first of a streak is logged, then a summary a minute */
	unsigned claim_fail_streak;   /* failures since the last answer we could use */
	unsigned claim_fail_unlogged; /* of those, not yet in a log line */
	usec_t claim_fail_logged_at;
	char claim_error[256]; /* why the last claim failed, "" after a good one (/readyz) */
	bool cancels_known;     /* the API's claim answers carry "cancel_requested" */

	/* spool delivery */
	struct spool_item *spool_items;
	unsigned spool_inflight;
	unsigned spool_pending;
	struct spool_job *spool_jobs; /* results being written to the spool, off the loop */
	bool exit_forced;             /* the hard stop overran: no more waiting for them */
	ev_timer_t *spool_timer;
	unsigned spool_attempt;

	ev_timer_t *drain_timer, *exit_timer, *breaker_timer;
	offload_t *offload; /* file work and reaping a child can make slow */

	/* kill mode: a cgroup per run when we have a subtree, else process groups */
	cgroup_tree_t *cgroups;
	char kill_mode_why[256]; /* why process groups */
	metric_t *m_kill_mode;

	metric_t *m_started, *m_finished, *m_in_flight, *m_slots, *m_claims, *m_leases_lost,
		*m_renewals, *m_duration, *m_blocked, *m_log_bytes, *m_spool, *m_queue_depth,
		*m_draining, *m_backend, *m_spool_delivered, *m_spool_dropped, *m_log_dropped,
		*m_build_info;
};

const struct conf *worker_cur_conf(const worker_t *w);
struct wfstate *worker_wfstate(worker_t *w, const char *name);
void worker_run_add(worker_t *w, struct run *r);
void worker_run_done(worker_t *w, struct run *r);
void worker_maybe_exit(worker_t *w);
void worker_breaker_changed(worker_t *w, struct wfstate *s);
void worker_spool(worker_t *w, struct run *r);

/* ---- runfiles.c: a run's files, off the loop (lib/offload) ---- */
struct result_job {
	struct run *run; /* loop only; the job is cancelled when the run is freed */
	char *dir;
	size_t cap; /* max_output_bytes */
	uid_t owner; /* the run's uid: a result file of anyone else is refused */
	/* written by the helper thread */
	int err;       /* 0, or -errno with why */
	char why[160]; /* "is a FIFO, not a regular file" */
	char *data;    /* NULL: no result file */
	size_t len;
	bool valid_json;
};
void result_job_work(void *arg); /* on a helper thread, as the run's user */
struct result_job *result_job_free(struct result_job *j);
/* Rename the directory aside and remove it on a helper thread. */
void runfiles_remove(worker_t *w, const char *dir);

/* ---- claim.c ---- */
struct claim_lane {
	char *workflow;   /* NULL: every claimable workflow in one claim */
	drv_req_t *req;
	usec_t sent_at;
	unsigned max_runs; /* of the claim in flight */
	bool repeat;      /* sent without a definitive answer: the next asks again */
	bool held_only;   /* the claim in flight asks for no runs, only for cancels */
	worker_t *w;
};
void claim_kick(worker_t *w);    /* claim now if there is room */
void claim_stop(worker_t *w);    /* drain: abort the open claim, cancel it on the server */
void claim_free(worker_t *w); /* teardown */
/* A run left the table: start the run of the same id waiting for it, if any. */
void claim_run_unblocked(worker_t *w, const char *id);
