/* The worker: owns the runs, the breakers, the drain state machine and the spool. */
#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "log/log.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"
#include "worker/worker-int.h"

#define STOP_SLACK (15 * USEC_PER_SEC)
/* At exit: how long to wait for spool writes, run directories still being
 * removed and children still being reaped off the loop (a D-state child or a
 * hung file system may never come back). */
#define OFFLOAD_EXIT_BOUND (10 * USEC_PER_SEC)

static void worker_maybe_exit(worker_t *w);

const struct conf *worker_cur_conf(const worker_t *w)
{
	return w->cref->conf;
}

const struct conf *worker_conf(const worker_t *w)
{
	return w->cref->conf;
}

metrics_t *worker_metrics(worker_t *w)
{
	return w->metrics;
}

/* ---------------------------------------------------------------- breakers */

/* The outcomes of run_outcome_label() and no_verdict_label() (run.c), each a
 * series from the start; docs/operations.md lists them. */
static const char *const outcome_labels[] = {"succeeded", "failed",	"timeout",
					     "crash",	  "spawn_error", "rejected",
					     "cancelled", "lease_lost",	"released",
					     "retry"};

static void worker_metrics_zero_workflow(worker_t *w, const char *name)
{
	metric_touch(w->m_started, name);
	for (size_t i = 0; i < ELEMENTSOF(outcome_labels); i++)
		metric_touch(w->m_finished, name, outcome_labels[i]);
	metric_touch(w->m_duration, name);
	metric_touch(w->m_results_refused, name);
}

struct wfstate *worker_wfstate(worker_t *w, const char *name)
{
	const struct conf *c = worker_cur_conf(w);
	struct wfstate *n;

	for (size_t i = 0; i < w->n_wfs; i++)
		if (streq(w->wfs[i].name, name))
			return &w->wfs[i];
	n = realloc(w->wfs, (w->n_wfs + 1) * sizeof(*n));
	if (!n)
		return NULL;
	w->wfs = n;
	n = &w->wfs[w->n_wfs];
	if (!(n->name = strdup(name)))
		return NULL;
	breaker_init(&n->breaker, c->worker.max_consecutive_failures, c->worker.failure_cooldown,
		     c->worker.failure_cooldown_max);
	w->n_wfs++;
	metric_set(w->m_blocked, 0, name);
	worker_metrics_zero_workflow(w, name);
	return n;
}

static void arm_breaker_timer(worker_t *w)
{
	usec_t next = USEC_INFINITY;

	for (size_t i = 0; i < w->n_wfs; i++)
		if (w->wfs[i].breaker.state == BREAKER_OPEN)
			next = MIN(next, w->wfs[i].breaker.open_until);
	if (next == USEC_INFINITY)
		ev_timer_disarm(w->breaker_timer);
	else
		ev_timer_arm_at(w->breaker_timer, next);
}

static void worker_breaker_changed(worker_t *w, struct wfstate *s)
{
	const struct breaker *b = &s->breaker;
	char d[TIME_DURATION_MAX];
	struct log_fields f = {.workflow = s->name};

	if (b->state == BREAKER_OPEN)
		log_emit(LOG_WARNING, &f,
			 "workflow %s failed %u times in a row: not claiming it for %s",
			 s->name, b->failures, time_format_duration(d, sizeof(d), b->open_until - ev_now(w->ev)));
	else if (b->state == BREAKER_HALF_OPEN)
		log_emit(LOG_NOTICE, &f, "workflow %s: cooldown over, trying one run", s->name);
	else
		log_emit(LOG_NOTICE, &f, "workflow %s succeeded again: claiming it normally",
			 s->name);
	metric_set(w->m_blocked, b->state == BREAKER_OPEN ? 1 : 0, s->name);
	arm_breaker_timer(w);
	claim_kick(w->claimer);
}

static void on_breaker_timer(ev_timer_t *t, void *userdata)
{
	worker_t *w = userdata;

	for (size_t i = 0; i < w->n_wfs; i++)
		if (breaker_tick(&w->wfs[i].breaker, ev_now(w->ev)))
			worker_breaker_changed(w, &w->wfs[i]);
	arm_breaker_timer(w);
}

/* ---------------------------------------------------------------- runs */

static void worker_places_metrics(worker_t *w)
{
	metric_set(w->m_in_flight, w->table.n);
	metric_set(w->m_slots_busy, w->table.running);
	metric_set(w->m_reporting, w->table.reporting);
	metric_set(w->m_ready, w->table.ready);
}

void worker_run_add(worker_t *w, struct run *r)
{
	run_table_add(&w->table, r);
	worker_places_metrics(w);
}

static void worker_run_done(worker_t *w, struct run *r)
{
	run_table_remove(&w->table, r);
	w->runs_done++;
	worker_places_metrics(w);
	claim_run_unblocked(w->claimer, r->id);
	claim_kick(w->claimer);
	worker_maybe_exit(w);
}

/* A run changed state: its child gone, it gives its execution slot back (and
 * a run of the same id waiting for that child may start); out of the
 * reporting queue, it makes room there.  Either way a claim may go out now,
 * while the run still reports.  (DONE: worker_run_done does the rest.) */
static void worker_run_moved(worker_t *w, struct run *r, enum run_state before)
{
	bool freed = run_table_moved(&w->table, r, before);

	worker_places_metrics(w);
	if (before == RUN_READY && r->state == RUN_RELEASING &&
	    r->release_reason == DRV_RELEASE_NO_SLOT)
		claim_ready_expired(w->claimer);
	if (!freed || r->state == RUN_DONE)
		return;
	if (run_holds_slot(before) && !run_holds_slot(r->state))
		claim_run_unblocked(w->claimer, r->id);
	claim_kick(w->claimer);
}

/* ---------------------------------------------------------------- hosts */

static struct breaker *host_breaker(void *host, const char *workflow)
{
	struct wfstate *s = worker_wfstate(host, workflow);

	return s ? &s->breaker : NULL;
}

static void host_breaker_changed(void *host, const char *workflow)
{
	struct wfstate *s = worker_wfstate(host, workflow);

	if (s)
		worker_breaker_changed(host, s);
}

static void host_settled(void *host, const char *workflow)
{
	worker_t *w = host;

	claim_kick(w->claimer);
}

static void host_spool(void *host, struct run *r)
{
	worker_t *w = host;

	spooler_write(w->spooler, r);
}

static void host_run_done(void *host, struct run *r)
{
	worker_run_done(host, r);
}

static void host_run_moved(void *host, struct run *r, enum run_state before)
{
	worker_run_moved(host, r, before);
}

static int host_carry(void *host, struct run *r,
                      int (*send)(const struct drv_claim *, drv_claim_cb, void *, void *),
                      void *ctx)
{
	worker_t *w = host;

	return claim_carry(w->claimer, r, send, ctx);
}

/* A renewal went out: with a driver that sends the renewals of one loop turn
 * in one request, the leases due within a quarter of lease_refresh go with it
 * (renewed early, in one request rather than one each).  One look at the
 * table per eighth of that at most: retries after a failed wave do not each
 * walk 10,000 runs. */
static void host_renewing(void *host, struct run *r0)
{
	worker_t *w = host;
	usec_t window = w->cref->conf->worker.lease_refresh / 4, now = ev_now(w->ev), by;

	if (w->renew_wave || !drv_ops(w->drv)->renew_batching ||
	    !drv_ops(w->drv)->renew_batching(w->drv) ||
	    (w->renew_wave_at && now < w->renew_wave_at + window / 8))
		return;
	by = now + window;
	w->renew_wave_at = now;
	w->renew_wave = true;
	for (struct run *r = w->table.head; r; r = r->next)
		if (r != r0)
			run_renew_due(r, by);
	w->renew_wave = false;
}

static void host_carry_dropped(void *host, void *lane)
{
	worker_t *w = host;

	claim_carry_dropped(w->claimer, lane);
}

static void host_trouble(void *host, const char *why)
{
	worker_t *w = host;

	claim_host_trouble(w->claimer, why);
}

static const struct run_host_ops run_host_ops = {
    .breaker = host_breaker,
    .breaker_changed = host_breaker_changed,
    .spool = host_spool,
    .done = host_run_done,
    .moved = host_run_moved,
    .settled = host_settled,
    .carry = host_carry,
    .carry_dropped = host_carry_dropped,
    .renewing = host_renewing,
    .host_trouble = host_trouble,
};

static struct conf_ref *host_conf(void *host)
{
	worker_t *w = host;

	return w->cref;
}

static unsigned host_slots(void *host)
{
	return worker_slots(host);
}

static bool host_running(void *host)
{
	worker_t *w = host;

	return w->phase == WORKER_RUNNING;
}

static bool host_may_start(void *host)
{
	worker_t *w = host;

	return !w->exited && w->phase != WORKER_STOPPING;
}

static void host_add(void *host, struct run *r)
{
	worker_run_add(host, r);
}

static void host_idle(void *host)
{
	worker_maybe_exit(host);
}

static const struct claimer_host_ops claimer_host_ops = {
    .conf = host_conf,
    .slots = host_slots,
    .breaker = host_breaker,
    .running = host_running,
    .may_start = host_may_start,
    .add = host_add,
    .idle = host_idle,
};

static const struct conf *host_cur_conf(void *host)
{
	return worker_cur_conf(host);
}

/* ---------------------------------------------------------------- life */

static void worker_maybe_exit(worker_t *w)
{
	if (w->exited || (w->phase != WORKER_DRAINING && w->phase != WORKER_STOPPING))
		return;
	if (w->table.n > 0 ||
	    (!w->exit_forced && (claimer_busy(w->claimer) || spooler_busy(w->spooler))))
		return;
	w->exited = true;
	ev_timer_disarm(w->drain_timer);
	ev_timer_disarm(w->exit_timer);
	log_info("%s done after %llu runs, exiting", w->phase == WORKER_DRAINING ? "drain" : "stop",
		 (unsigned long long)w->runs_done);
	w->on_exit(w, 0, w->userdata);
}

static void on_drain_timeout(ev_timer_t *t, void *userdata)
{
	worker_t *w = userdata;

	log_warning("drain_timeout reached with %u runs in flight: hard stop", w->table.n);
	worker_hard_stop(w, false);
}

/* A hard stop that overruns kill_grace by far: spool and drop what is left. */
static void on_exit_timeout(ev_timer_t *t, void *userdata)
{
	worker_t *w = userdata;

	log_error("hard stop overran: %u runs still busy, giving up on them", w->table.n);
	w->host.kill_now = true;
	while (w->table.head)
		run_dispatch(w->table.head, RE_ABANDON); /* a result made is spooled */
	w->exit_forced = true; /* spool writes still busy get OFFLOAD_EXIT_BOUND at teardown */
	worker_maybe_exit(w);
}

/* Runs waiting for an older execution of their id, or for a slot, go back
 * unstarted. */
static void release_waiting(worker_t *w, enum drv_release_reason why)
{
	struct run *r, *next;

	for (r = w->table.head; r; r = next) {
		next = r->next;
		if (r->state != RUN_WAITING && r->state != RUN_READY)
			continue;
		r->release_reason = why;
		run_dispatch(r, RE_RELEASE);
	}
}

void worker_drain(worker_t *w)
{
	const struct conf *c = worker_cur_conf(w);
	char d[TIME_DURATION_MAX];

	if (w->phase == WORKER_DRAINING || w->phase == WORKER_STOPPING) {
		worker_hard_stop(w, false);
		return;
	}
	w->phase = WORKER_DRAINING;
	metric_set(w->m_draining, 1);
	log_notice("draining: no new claims; waiting for %u runs (drain_timeout %s)", w->table.n,
		   time_format_duration(d, sizeof(d), c->worker.drain_timeout));
	claim_stop(w->claimer);
	spooler_stop(w->spooler);
	release_waiting(w, DRV_RELEASE_DRAINING);
	if (c->worker.drain_timeout != USEC_INFINITY)
		ev_timer_arm(w->drain_timer, c->worker.drain_timeout);
	worker_maybe_exit(w);
}

void worker_hard_stop(worker_t *w, bool now)
{
	const struct conf *c = worker_cur_conf(w);
	struct run *r, *next;

	if (w->phase == WORKER_STOPPING && (!now || w->host.kill_now))
		return;
	w->host.kill_now = w->host.kill_now || now;
	if (w->phase != WORKER_STOPPING) {
		log_notice("hard stop: %s %u runs, releasing them", now ? "killing" : "stopping",
			   w->table.n);
		w->phase = WORKER_STOPPING;
		w->host.stopping = true;
		metric_set(w->m_draining, 1);
		claim_stop(w->claimer);
		ev_timer_disarm(w->drain_timer);
		spooler_stop(w->spooler);
		ev_timer_arm(w->exit_timer, (w->host.kill_now ? 0 : c->worker.kill_grace) + STOP_SLACK);
	}
	for (r = w->table.head; r; r = next) {
		next = r->next;
		run_dispatch(r, RE_HARD_STOP);
	}
	worker_maybe_exit(w);
}

/* Remove what a killed predecessor left under run_dir: lessee-<pid> of a dead
 * pid, and of our own pid, which at start holds nothing of ours yet (PID 1
 * of a container that restarts has its predecessor's pid). */
static void clean_stale_run_dirs(const char *run_dir)
{
	DIR *d = opendir(run_dir);
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d))) {
		char path[PATH_MAX];
		const char *p = startswith(de->d_name, "lessee-");
		char *end;
		long pid;
		unsigned k;
		int q;

		if (!p)
			continue;
		pid = strtol(p, &end, 10);
		if (*end || pid <= 0 ||
		    (pid != getpid() && (kill((pid_t)pid, 0) == 0 || errno != ESRCH)))
			continue;
		snprintf(path, sizeof(path), "%s/%s", run_dir, de->d_name);
		if ((k = leftovers_kill(run_dir, pid)) > 0)
			log_warning("killed %u processes left running by runs of a previous lessee "
			            "(pid %ld), which died without stopping them",
			            k, pid);
		if ((q = rm_rf(path)) >= 0)
			log_info("removed %s, left by a previous lessee (pid %ld)", path, pid);
		else
			log_warning("cannot remove %s, left by a previous lessee (pid %ld): %s",
			            path, pid, strerror(-q));
	}
	closedir(d);
}

/* Every label value known in advance is a series from the start. */
static void worker_metrics_zero(worker_t *w)
{
	static const char *const claims[] = {"runs",	 "empty",    "invalid", "too_large",
					     "denied", "rejected", "error"};
	static const char *const renewals[] = {"ok", "lost", "error"};
	static const char *const spool[] = {"too_large", "write_failed", "refused", "unreadable"};
	static const char *const dropped[] = {"buffer_full", "max_log_bytes"};

	for (size_t i = 0; i < ELEMENTSOF(claims); i++)
		metric_touch(w->m_claims, claims[i]);
	for (size_t i = 0; i < ELEMENTSOF(renewals); i++)
		metric_touch(w->m_renewals, renewals[i]);
	for (size_t i = 0; i < ELEMENTSOF(spool); i++)
		metric_touch(w->m_spool_dropped, spool[i]);
	for (size_t i = 0; i < ELEMENTSOF(dropped); i++)
		metric_touch(w->m_log_dropped, dropped[i]);
}

static int worker_metrics_init(worker_t *w)
{
	static const double buckets[] = {0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600};
	metrics_t *m = w->metrics;

	w->m_started = metrics_counter(m, "lessee_runs_started_total", "Runs started", "workflow");
	w->m_finished = metrics_counter(m, "lessee_runs_finished_total",
					"Runs finished by workflow and outcome", "workflow,outcome");
	w->m_results_refused = metrics_counter(
	    m, "lessee_results_refused_total",
	    "Finished runs whose result the API refused for good: dropped, never delivered",
	    "workflow");
	w->m_in_flight = metrics_gauge(m, "lessee_runs_in_flight", "Runs held now", NULL);
	w->m_slots = metrics_gauge(
	    m, "lessee_slots",
	    "Execution slots (worker.concurrency, or fewer when the fds do not fit)", NULL);
	w->m_slots_busy = metrics_gauge(m, "lessee_slots_busy",
					"Execution slots in use: runs claimed, waiting or running",
					NULL);
	w->m_reporting = metrics_gauge(m, "lessee_runs_reporting",
				       "Runs in the reporting queue: child gone, log flush, "
				       "completion or release still in flight",
				       NULL);
	w->m_ready = metrics_gauge(m, "lessee_runs_ready",
	                           "Runs claimed ahead of a free slot, waiting for one "
	                           "(worker.prefetch)",
	                           NULL);
	w->m_reporting_max = metrics_gauge(m, "lessee_reporting_max",
					   "Bound of the reporting queue (worker.max_reporting): "
					   "no claims while it is full",
					   NULL);
	w->m_claims = metrics_counter(m, "lessee_claims_total", "Claim requests by result",
				      "result");
	w->m_leases_lost = metrics_counter(m, "lessee_leases_lost_total", "Leases lost", NULL);
	w->m_renewals = metrics_counter(m, "lessee_lease_renewals_total",
					"Lease renewals by result", "result");
	w->m_duration = metrics_histogram(m, "lessee_run_duration_seconds",
					  "Run duration from start to report", "workflow", buckets,
					  ELEMENTSOF(buckets));
	w->m_blocked = metrics_gauge(m, "lessee_workflow_blocked",
				     "1 while the workflow's failure breaker is open", "workflow");
	w->m_log_bytes = metrics_counter(m, "lessee_log_shipped_bytes_total",
					 "Log bytes the API confirmed", NULL);
	w->m_log_dropped = metrics_counter(m, "lessee_log_dropped_bytes_total",
					   "Log bytes of runs not shipped, by reason: buffer_full "
					   "(the child wrote faster than the API took them) or "
					   "max_log_bytes (over the run's cap)",
					   "reason");
	w->m_spool = metrics_gauge(m, "lessee_spool_pending", "Results waiting in the spool", NULL);
	w->m_spool_delivered = metrics_counter(m, "lessee_spool_delivered_total",
					       "Spooled results the API accepted", NULL);
	w->m_spool_dropped = metrics_counter(m, "lessee_spool_dropped_total",
					     "Results not spooled, or spooled and dropped, by reason",
					     "reason");
	w->m_queue_depth = metrics_gauge(m, "lessee_queue_depth",
					 "Eligible runs pending, as the API last said", NULL);
	w->m_draining = metrics_gauge(m, "lessee_draining", "1 while draining or stopping", NULL);
	w->m_backend = metrics_gauge(m, "lessee_io_backend_info", "The event loop backend in use",
				     "backend");
	w->m_build_info = metrics_gauge(m, "lessee_build_info", "lessee's version, always 1",
					"version");
	w->m_kill_mode = metrics_gauge(m, "lessee_kill_mode",
				       "1 for the way runs are stopped: cgroup or process_group",
				       "mode");
	if (!w->m_kill_mode || !w->m_log_dropped || !w->m_build_info || !w->m_slots_busy ||
	    !w->m_reporting || !w->m_reporting_max || !w->m_ready || !w->m_results_refused)
		return -ENOMEM;
	if (!w->m_started || !w->m_finished || !w->m_in_flight || !w->m_slots || !w->m_claims ||
	    !w->m_leases_lost || !w->m_renewals || !w->m_duration || !w->m_blocked ||
	    !w->m_log_bytes || !w->m_spool || !w->m_spool_delivered || !w->m_spool_dropped ||
	    !w->m_queue_depth || !w->m_draining || !w->m_backend)
		return -ENOMEM;
	metric_add(w->m_leases_lost, 0);
	metric_add(w->m_log_bytes, 0);
	worker_places_metrics(w);
	metric_set(w->m_reporting_max, conf_max_reporting(&worker_cur_conf(w)->worker));
	metric_set(w->m_draining, 0);
	metric_set(w->m_spool, 0);
	metric_add(w->m_spool_delivered, 0);
	metric_set(w->m_queue_depth, 0);
	metric_set(w->m_slots, worker_slots(w));
	metric_set(w->m_backend, 1, ev_backend(w->ev));
	metric_set(w->m_build_info, 1, LESSEE_VERSION);
	worker_metrics_zero(w);
	return 0;
}

/* The runs' host, the claimer and the spooler, on the driver and the helper threads. */
static int worker_parts_new(worker_t *w)
{
	int q;

	w->host = (struct run_host){
	    .ops = &run_host_ops,
	    .host = w,
	    .ev = w->ev,
	    .drv = w->drv,
	    .offload = w->offload,
	    .m = {.started = w->m_started,
	          .finished = w->m_finished,
	          .leases_lost = w->m_leases_lost,
	          .renewals = w->m_renewals,
	          .duration = w->m_duration,
	          .log_bytes = w->m_log_bytes,
	          .log_dropped = w->m_log_dropped,
	          .results_refused = w->m_results_refused},
	};
	q = spooler_new(&(struct spooler_params){.ev = w->ev,
						 .drv = w->drv,
						 .offload = w->offload,
						 .m_pending = w->m_spool,
						 .m_delivered = w->m_spool_delivered,
						 .m_dropped = w->m_spool_dropped,
						 .conf = host_cur_conf,
						 .idle = host_idle,
						 .ud = w},
			&w->spooler);
	if (q < 0)
		return q;
	return claimer_new(&(struct claimer_params){.ops = &claimer_host_ops,
						    .host = w,
						    .runs = &w->host,
						    .table = &w->table,
						    .m_claims = w->m_claims,
						    .m_queue_depth = w->m_queue_depth},
			   &w->claimer);
}

int worker_new(ev_t *e, struct conf *conf, worker_exit_cb on_exit, void *userdata,
	       worker_t **ret)
{
	worker_t *w = calloc(1, sizeof(*w));
	int q;

	if (!w) {
		conf_free(conf);
		return -ENOMEM;
	}
	w->ev = e;
	w->on_exit = on_exit;
	w->userdata = userdata;
	w->cref = conf_ref_new(conf);
	w->metrics = metrics_new();
	if (!w->cref || !w->metrics || (q = worker_metrics_init(w)) < 0) {
		worker_free(w);
		return -ENOMEM;
	}
	q = drv_new(e, conf, w->metrics, &w->drv);
	if (q >= 0)
		q = offload_new(e, OFFLOAD_THREADS, &w->offload);
	if (q >= 0)
		q = worker_parts_new(w);
	if (q >= 0)
		q = ev_timer_add(e, USEC_INFINITY, on_drain_timeout, w, &w->drain_timer);
	if (q >= 0)
		q = ev_timer_add(e, USEC_INFINITY, on_exit_timeout, w, &w->exit_timer);
	if (q >= 0)
		q = ev_timer_add(e, USEC_INFINITY, on_breaker_timer, w, &w->breaker_timer);
	for (size_t i = 0; q >= 0 && i < conf->n_workflows; i++)
		if (!worker_wfstate(w, conf->workflows[i].name))
			q = -ENOMEM;
	if (q < 0) {
		worker_free(w);
		return q;
	}
	*ret = w;
	return 0;
}

/* Before READY=1: with Delegate=yes the daemon must have left the unit's
 * cgroup by then (systemd may start ExecReload= in <unit>/.control). */
static void setup_kill_mode(worker_t *w)
{
	bool cg = cgroup_tree_open(w->ev, NULL, &w->cgroups, w->kill_mode_why,
				   sizeof(w->kill_mode_why)) > 0;

	w->host.cgroups = w->cgroups;
	if (cg)
		log_info("kill mode: cgroup: each run in its own cgroup under %s/runs/%d, "
			 "stopped with cgroup.kill",
			 cgroup_tree_path(w->cgroups), (int)getpid());
	else
		log_notice("kill mode: process group (no writable cgroup v2 subtree: %s); what "
			   "leaves a run's process group is out of reach",
			   w->kill_mode_why);
	metric_set(w->m_kill_mode, cg ? 1 : 0, "cgroup");
	metric_set(w->m_kill_mode, cg ? 0 : 1, "process_group");
}

const char *worker_kill_mode(const worker_t *w)
{
	return w->cgroups ? "cgroup" : "process_group";
}

unsigned worker_slots(const worker_t *w)
{
	unsigned c = worker_cur_conf(w)->worker.concurrency;

	return w->fd_slots ? MIN(c, w->fd_slots) : c;
}

/* Each run holds exec_fds_per_run() fds and the daemon keeps
 * WORKER_FD_RESERVE (its API connections are bounded by DRV_MAX_CONNECTIONS):
 * a concurrency beyond what RLIMIT_NOFILE (raised to the hard limit at start)
 * allows is lowered, rather than runs failing to start and leases being lost
 * for want of a socket to renew them. */
static void worker_fit_fds(worker_t *w)
{
	unsigned conc = worker_cur_conf(w)->worker.concurrency;
	unsigned per_run = exec_fds_per_run(w->ev, w->cgroups != NULL);
	struct rlimit rl = {0};

	w->fd_slots = 0;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		w->fd_slots = exec_runs_fitting(rl.rlim_cur, per_run, WORKER_FD_RESERVE);
	metric_set(w->m_slots, worker_slots(w));
	if (worker_slots(w) >= conc)
		return;
	log_warning("worker.concurrency=%u lowered to %u: each run holds %u file descriptors "
	            "and the daemon keeps %u, under a limit of %llu (RLIMIT_NOFILE, hard %llu); "
	            "raise LimitNOFILE= in the unit (or ulimit -Hn) to %llu or more for %u runs",
	            conc, worker_slots(w), per_run, WORKER_FD_RESERVE,
	            (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max,
	            (unsigned long long)conc * per_run + WORKER_FD_RESERVE, conc);
}

int worker_start(worker_t *w)
{
	const struct conf *c = worker_cur_conf(w);

	setup_kill_mode(w);
	worker_fit_fds(w);
	clean_stale_run_dirs(c->worker.run_dir);
	spooler_load(w->spooler);
	w->phase = WORKER_RUNNING;
	spooler_deliver(w->spooler);
	claim_kick(w->claimer);
	return 0;
}

int worker_reload(worker_t *w, struct conf *next)
{
	struct conf_change *ch = NULL;
	size_t n = 0;
	struct conf_ref *nr;
	int q;

	/* the diff first, so restart-only changes are reported before they are undone */
	q = conf_diff(worker_cur_conf(w), next, &ch, &n);
	if (q >= 0)
		q = conf_retain_restart_fields(next, worker_cur_conf(w));
	if (q < 0) {
		conf_changes_free(ch, n);
		conf_free(next);
		return q;
	}
	for (size_t i = 0; i < n; i++)
		log_emit(ch[i].live ? LOG_NOTICE : LOG_WARNING, NULL, "reload: %s%s",
			 ch[i].description, ch[i].live ? "" : " (needs a restart, not applied)");
	if (n == 0)
		log_notice("reload: configuration unchanged");
	conf_changes_free(ch, n);
	nr = conf_ref_new(next);
	if (!nr)
		return -ENOMEM;
	conf_ref_put(w->cref);
	w->cref = nr;
	log_set_max_level(next->log.level);
	worker_fit_fds(w);
	metric_set(w->m_reporting_max, conf_max_reporting(&next->worker));
	for (size_t i = 0; i < w->n_wfs; i++) {
		struct breaker *b = &w->wfs[i].breaker;

		b->threshold = next->worker.max_consecutive_failures;
		b->cooldown_base = next->worker.failure_cooldown;
		b->cooldown_max = MAX(next->worker.failure_cooldown_max, b->cooldown_base);
	}
	for (size_t i = 0; i < next->n_workflows; i++)
		worker_wfstate(w, next->workflows[i].name);
	if ((q = drv_reload(w->drv, next)) < 0)
		log_error("reload: the %s driver cannot take the new workflows (%s): it claims "
		          "for the ones it had",
		          drv_ops(w->drv)->name, strerror(-q));
	claim_kick(w->claimer);
	return 0;
}

/* Teardown: removals and reaps still running get a bounded wait, then are left. */
static void offload_finish(offload_t *o)
{
	unsigned n = offload_pending(o);

	if (n == 0)
		return;
	log_info("waiting for %u spool writes, run directory removals or reaps to finish", n);
	if (offload_drain(o, OFFLOAD_EXIT_BOUND) < 0)
		log_warning("%u spool writes, run directory removals or reaps still busy after "
			    "%llus, exiting anyway",
			    offload_pending(o),
			    (unsigned long long)(OFFLOAD_EXIT_BOUND / USEC_PER_SEC));
}

worker_t *worker_free(worker_t *w)
{
	if (!w)
		return NULL;
	w->exited = true; /* teardown: no exit callback, no run starts */
	/* teardown: no more API traffic, no accounting */
	w->host.tearing_down = true;
	while (w->table.head)
		run_dispatch(w->table.head, RE_ABANDON);
	run_table_free(&w->table);
	w->claimer = claimer_free(w->claimer);
	offload_finish(w->offload);
	w->offload = offload_free(w->offload); /* cancels the jobs not started */
	w->spooler = spooler_free(w->spooler); /* after the threads that may still write */
	ev_timer_del(w->drain_timer);
	ev_timer_del(w->exit_timer);
	ev_timer_del(w->breaker_timer);
	cgroup_tree_free(w->cgroups);
	w->drv = drv_free(w->drv);
	for (size_t i = 0; i < w->n_wfs; i++)
		free(w->wfs[i].name);
	free(w->wfs);
	metrics_free(w->metrics);
	conf_ref_put(w->cref);
	free(w);
	return NULL;
}

/* ---------------------------------------------------------------- status */

const char *worker_phase_name(enum worker_phase p)
{
	static const char *const names[] = {"idle", "running", "draining", "stopping"};

	return names[p];
}

void worker_get_info(const worker_t *w, struct worker_info *ret)
{
	*ret = (struct worker_info){
		.phase = w->phase,
		.runs_in_flight = w->table.n,
		.slots = worker_cur_conf(w)->worker.concurrency,
		.slots_busy = w->table.running,
		.reporting = w->table.reporting,
		.max_reporting = conf_max_reporting(&worker_cur_conf(w)->worker),
		.runs_done = w->runs_done,
		.api_ready = w->phase == WORKER_RUNNING && w->drv && drv_ready(w->drv, ev_now(w->ev)),
		.api_last_ok = w->drv ? drv_last_ok(w->drv) : 0,
		.io_backend = ev_backend(w->ev),
		.queue_depth = claimer_queue_depth(w->claimer),
		.spool_pending = spooler_pending(w->spooler),
	};
}

const char *worker_not_ready_reason(const worker_t *w)
{
	switch (w->phase) {
	case WORKER_IDLE:
		return "not started yet";
	case WORKER_DRAINING:
		return "draining";
	case WORKER_STOPPING:
		return "stopping";
	default:
		break;
	}
	if (claimer_hold(w->claimer)) /* the API may be fine: this host is not */
		return claimer_hold(w->claimer);
	if (drv_ready(w->drv, ev_now(w->ev)))
		return NULL;
	if (drv_denied(w->drv))
		return "the API refuses our credentials";
	if (claimer_error(w->claimer)) /* the why, not only the what */
		return claimer_error(w->claimer);
	return drv_last_ok(w->drv) ? "API not reached recently" : "API not reached yet";
}

static cJSON *status_runs(const worker_t *w)
{
	cJSON *a = cJSON_CreateArray();

	for (const struct run *r = w->table.head; a && r; r = r->next) {
		cJSON *o = cJSON_CreateObject();

		if (!o || !cJSON_AddItemToArray(a, o))
			break;
		cJSON_AddStringToObject(o, "id", r->id);
		cJSON_AddStringToObject(o, "workflow", r->workflow);
		cJSON_AddNumberToObject(o, "attempt", r->attempt);
		cJSON_AddStringToObject(o, "state", run_state_name(r->state));
		cJSON_AddNumberToObject(o, "age_s",
					(double)(ev_now(w->ev) - r->claimed_at) / USEC_PER_SEC);
		if (r->proc)
			cJSON_AddNumberToObject(o, "pid", exec_pid(r->proc));
	}
	return a;
}

static cJSON *status_breakers(const worker_t *w)
{
	cJSON *a = cJSON_CreateArray();

	for (size_t i = 0; a && i < w->n_wfs; i++) {
		const struct breaker *b = &w->wfs[i].breaker;
		cJSON *o = cJSON_CreateObject();

		if (!o || !cJSON_AddItemToArray(a, o))
			break;
		cJSON_AddStringToObject(o, "workflow", w->wfs[i].name);
		cJSON_AddStringToObject(o, "state", breaker_state_name(b->state));
		cJSON_AddNumberToObject(o, "consecutive_failures", b->failures);
		if (b->state == BREAKER_OPEN)
			cJSON_AddNumberToObject(o, "retry_in_s",
						(double)(b->open_until - ev_now(w->ev)) /
							USEC_PER_SEC);
	}
	return a;
}

int worker_status_json(const worker_t *w, struct buf *out)
{
	const struct conf *c = worker_cur_conf(w);
	struct worker_info info;
	cJSON *o = cJSON_CreateObject(), *cfg;
	char *s;
	int q;

	worker_get_info(w, &info);
	if (!o)
		return -ENOMEM;
	cJSON_AddStringToObject(o, "version", LESSEE_VERSION);
	cJSON_AddStringToObject(o, "worker_id", c->worker.id);
	cJSON_AddStringToObject(o, "phase", worker_phase_name(info.phase));
	cJSON_AddBoolToObject(o, "ready", info.api_ready);
	if (!info.api_ready)
		cJSON_AddStringToObject(o, "ready_reason", worker_not_ready_reason(w));
	cJSON_AddStringToObject(o, "io_backend", info.io_backend);
	cJSON_AddStringToObject(o, "kill_mode", worker_kill_mode(w));
	if (w->cgroups)
		cJSON_AddStringToObject(o, "cgroup", cgroup_tree_path(w->cgroups));
	else if (w->phase != WORKER_IDLE)
		cJSON_AddStringToObject(o, "kill_mode_reason", w->kill_mode_why);
	cJSON_AddNumberToObject(o, "slots", info.slots);
	cJSON_AddNumberToObject(o, "slots_busy", info.slots_busy);
	cJSON_AddNumberToObject(o, "reporting", info.reporting);
	cJSON_AddNumberToObject(o, "max_reporting", info.max_reporting);
	cJSON_AddNumberToObject(o, "runs_done", (double)info.runs_done);
	cJSON_AddNumberToObject(o, "spool_pending", info.spool_pending);
	cJSON_AddNumberToObject(o, "queue_depth", (double)info.queue_depth);
	cJSON_AddItemToObject(o, "runs", status_runs(w));
	cJSON_AddItemToObject(o, "breakers", status_breakers(w));
	cfg = cJSON_AddObjectToObject(o, "config");
	if (cfg) {
		cJSON_AddStringToObject(cfg, "api_url", c->api.url);
		cJSON_AddStringToObject(cfg, "protocol", drv_ops(w->drv)->name);
		cJSON_AddNumberToObject(cfg, "concurrency", c->worker.concurrency);
		cJSON_AddNumberToObject(cfg, "max_reporting", conf_max_reporting(&c->worker));
		cJSON_AddNumberToObject(cfg, "lease_ttl_s", (double)(c->worker.lease_ttl / USEC_PER_SEC));
		cJSON_AddNumberToObject(cfg, "workflows", (double)c->n_workflows);
	}
	s = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	if (!s)
		return -ENOMEM;
	q = buf_appends(out, s);
	free(s);
	return q;
}
