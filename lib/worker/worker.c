/* The worker: owns the runs, the breakers, the drain state machine and the spool. */
#include <cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log/log.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"
#include "worker/worker-int.h"

#define SPOOL_RETRY_BASE (2 * USEC_PER_SEC)
#define SPOOL_RETRY_CAP (5 * USEC_PER_MINUTE)
#define STOP_SLACK (15 * USEC_PER_SEC)
/* At exit: how long to wait for run directories still being removed and
 * children still being reaped off the loop (a D-state child may never go). */
#define OFFLOAD_EXIT_BOUND (10 * USEC_PER_SEC)
#define OFFLOAD_THREADS 4

/* ---------------------------------------------------------------- conf refs */

struct conf_ref *conf_ref_new(struct conf *c)
{
	struct conf_ref *r = calloc(1, sizeof(*r));

	if (!r) {
		conf_free(c);
		return NULL;
	}
	r->conf = c;
	r->refs = 1;
	return r;
}

struct conf_ref *conf_ref_get(struct conf_ref *r)
{
	r->refs++;
	return r;
}

struct conf_ref *conf_ref_put(struct conf_ref *r)
{
	if (r && --r->refs == 0) {
		conf_free(r->conf);
		free(r);
	}
	return NULL;
}

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

void worker_breaker_changed(worker_t *w, struct wfstate *s)
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
	claim_kick(w);
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

void worker_run_add(worker_t *w, struct run *r)
{
	r->next = w->runs;
	if (w->runs)
		w->runs->prev = r;
	w->runs = r;
	w->n_runs++;
	metric_set(w->m_in_flight, w->n_runs);
}

void worker_run_done(worker_t *w, struct run *r)
{
	if (r->prev)
		r->prev->next = r->next;
	else
		w->runs = r->next;
	if (r->next)
		r->next->prev = r->prev;
	w->n_runs--;
	w->runs_done++;
	metric_set(w->m_in_flight, w->n_runs);
	claim_kick(w);
	worker_maybe_exit(w);
}

/* ---------------------------------------------------------------- spool */

struct spool_item {
	worker_t *w;
	char *run_id;
	char *body;
	http_req_t *req;
	struct spool_item *next;
};

static void spool_gauge(worker_t *w)
{
	metric_set(w->m_spool, w->spool_pending);
}

void worker_spool(worker_t *w, struct run *r)
{
	const struct conf *c = worker_cur_conf(w);
	struct log_fields f = {.run_id = r->id, .workflow = r->workflow, .attempt = r->attempt};
	int q = r->body ? spool_write(c->worker.spool_dir, r->id, r->body) : -ENOMEM;

	if (q < 0) {
		log_emit(LOG_ERR, &f, "cannot spool the result to %s: %s; the run returns to the "
				      "queue when its lease expires",
			 c->worker.spool_dir, strerror(-q));
		return;
	}
	w->spool_pending++;
	spool_gauge(w);
	log_emit(LOG_NOTICE, &f, "result spooled to %s, to be delivered at next start",
		 c->worker.spool_dir);
}

static void spool_item_free(struct spool_item *it)
{
	http_cancel(it->req);
	free(it->run_id);
	free(it->body);
	free(it);
}

static void spool_deliver_all(worker_t *w);

static void on_spool_complete(http_req_t *req, const struct http_response *resp, void *userdata)
{
	struct spool_item *it = userdata, **pp;
	worker_t *w = it->w;
	struct log_fields f = {.run_id = it->run_id};
	char why[160];

	it->req = NULL;
	w->spool_inflight--;
	if (resp->status == 200 || resp->status == 409 || resp->status == 404 ||
	    (resp->status >= 400 && resp->status < 500 && !http_should_retry(resp) &&
	     resp->status != 401 && resp->status != 403)) {
		log_emit(resp->status == 200 ? LOG_INFO : LOG_WARNING, &f,
			 resp->status == 200 ? "spooled result delivered"
					     : "spooled result refused (%s), dropping it",
			 api_describe(resp, why, sizeof(why)));
		spool_remove(worker_cur_conf(w)->worker.spool_dir, it->run_id);
		w->spool_pending--;
		spool_gauge(w);
		for (pp = &w->spool_items; *pp != it; pp = &(*pp)->next)
			;
		*pp = it->next;
		spool_item_free(it);
	} else if (!ev_timer_armed(w->spool_timer)) {
		ev_timer_arm(w->spool_timer, backoff_full_jitter(SPOOL_RETRY_BASE, SPOOL_RETRY_CAP,
								 w->spool_attempt++, 0));
	}
	worker_maybe_exit(w);
}

static void spool_deliver_all(worker_t *w)
{
	for (struct spool_item *it = w->spool_items; it; it = it->next) {
		_cleanup_free_ char *url = NULL;

		if (it->req || proto_url(w->api.base, "/v1/runs/%s/complete", it->run_id, &url) < 0)
			continue;
		if (api_post(&w->api, API_COMPLETE, url, it->body, 0, 4096, on_spool_complete, it,
			     &it->req) >= 0)
			w->spool_inflight++;
		else
			it->req = NULL;
	}
}

static void on_spool_timer(ev_timer_t *t, void *userdata)
{
	worker_t *w = userdata;

	if (w->phase == WORKER_RUNNING)
		spool_deliver_all(w);
}

static int spool_load_one(const char *run_id, char *body, void *userdata)
{
	worker_t *w = userdata;
	struct spool_item *it = calloc(1, sizeof(*it));

	if (!it || !(it->run_id = strdup(run_id))) {
		free(it);
		free(body);
		return -ENOMEM;
	}
	it->w = w;
	it->body = body;
	it->next = w->spool_items;
	w->spool_items = it;
	w->spool_pending++;
	return 0;
}

/* ---------------------------------------------------------------- life */

void worker_maybe_exit(worker_t *w)
{
	if (w->exited || (w->phase != WORKER_DRAINING && w->phase != WORKER_STOPPING))
		return;
	if (w->n_runs > 0 || w->claim_cancels > 0 || w->spool_inflight > 0)
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

	log_warning("drain_timeout reached with %u runs in flight: hard stop", w->n_runs);
	worker_hard_stop(w, false);
}

/* A hard stop that overruns kill_grace by far: spool and drop what is left. */
static void on_exit_timeout(ev_timer_t *t, void *userdata)
{
	worker_t *w = userdata;

	log_error("hard stop overran: %u runs still busy, giving up on them", w->n_runs);
	w->kill_now = true;
	while (w->runs) {
		struct run *r = w->runs;

		if (r->body && (r->state == RUN_REPORTING || r->state == RUN_FLUSHING))
			worker_spool(w, r);
		r->state = RUN_RELEASING;
		run_dispatch(r, RE_RELEASED);
	}
	w->claim_cancels = 0;
	w->spool_inflight = 0;
	worker_maybe_exit(w);
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
	log_notice("draining: no new claims; waiting for %u runs (drain_timeout %s)", w->n_runs,
		   time_format_duration(d, sizeof(d), c->worker.drain_timeout));
	claim_stop(w);
	ev_timer_disarm(w->spool_timer);
	if (c->worker.drain_timeout != USEC_INFINITY)
		ev_timer_arm(w->drain_timer, c->worker.drain_timeout);
	worker_maybe_exit(w);
}

void worker_hard_stop(worker_t *w, bool now)
{
	const struct conf *c = worker_cur_conf(w);
	struct run *r, *next;

	if (w->phase == WORKER_STOPPING && (!now || w->kill_now))
		return;
	w->kill_now = w->kill_now || now;
	if (w->phase != WORKER_STOPPING) {
		log_notice("hard stop: %s %u runs, releasing them", now ? "killing" : "stopping",
			   w->n_runs);
		w->phase = WORKER_STOPPING;
		metric_set(w->m_draining, 1);
		claim_stop(w);
		ev_timer_disarm(w->drain_timer);
		ev_timer_disarm(w->spool_timer);
		ev_timer_arm(w->exit_timer, (w->kill_now ? 0 : c->worker.kill_grace) + STOP_SLACK);
	}
	for (r = w->runs; r; r = next) {
		next = r->next;
		run_dispatch(r, RE_HARD_STOP);
	}
	worker_maybe_exit(w);
}

static void on_claim_timer(ev_timer_t *t, void *userdata)
{
	claim_kick(userdata);
}

/* Remove what a killed predecessor left under run_dir (lessee-<pid> of a dead pid). */
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

		if (!p)
			continue;
		pid = strtol(p, &end, 10);
		if (*end || pid <= 0 || pid == getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
			continue;
		snprintf(path, sizeof(path), "%s/%s", run_dir, de->d_name);
		if (rm_rf(path) >= 0)
			log_info("removed %s, left by a previous lessee (pid %ld)", path, pid);
	}
	closedir(d);
}

static int worker_metrics_init(worker_t *w)
{
	static const double buckets[] = {0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 1800, 3600};
	metrics_t *m = w->metrics;

	w->m_started = metrics_counter(m, "lessee_runs_started_total", "Runs started", "workflow");
	w->m_finished = metrics_counter(m, "lessee_runs_finished_total",
					"Runs finished by workflow and outcome", "workflow,outcome");
	w->m_in_flight = metrics_gauge(m, "lessee_runs_in_flight", "Runs held now", NULL);
	w->m_slots = metrics_gauge(m, "lessee_slots", "Configured concurrency", NULL);
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
	w->m_log_bytes = metrics_counter(m, "lessee_log_bytes_shipped_total",
					 "Log bytes the API confirmed", NULL);
	w->m_spool = metrics_gauge(m, "lessee_spool_pending", "Results waiting in the spool", NULL);
	w->m_queue_depth = metrics_gauge(m, "lessee_queue_depth",
					 "Eligible runs pending, as the API last said", NULL);
	w->m_draining = metrics_gauge(m, "lessee_draining", "1 while draining or stopping", NULL);
	w->m_backend = metrics_gauge(m, "lessee_io_backend", "The event loop backend in use",
				     "backend");
	if (!w->m_started || !w->m_finished || !w->m_in_flight || !w->m_slots || !w->m_claims ||
	    !w->m_leases_lost || !w->m_renewals || !w->m_duration || !w->m_blocked ||
	    !w->m_log_bytes || !w->m_spool || !w->m_queue_depth || !w->m_draining || !w->m_backend)
		return -ENOMEM;
	metric_add(w->m_leases_lost, 0);
	metric_add(w->m_log_bytes, 0);
	metric_set(w->m_in_flight, 0);
	metric_set(w->m_draining, 0);
	metric_set(w->m_spool, 0);
	metric_set(w->m_queue_depth, 0);
	metric_set(w->m_slots, worker_cur_conf(w)->worker.concurrency);
	metric_set(w->m_backend, 1, ev_backend(w->ev));
	return 0;
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
	w->queue_depth = -1;
	w->cref = conf_ref_new(conf);
	w->metrics = metrics_new();
	if (!w->cref || !w->metrics || (q = worker_metrics_init(w)) < 0) {
		worker_free(w);
		return -ENOMEM;
	}
	q = api_init(&w->api, e, conf, w->metrics);
	if (q >= 0)
		q = offload_new(e, OFFLOAD_THREADS, &w->offload);
	if (q >= 0)
		q = ev_timer_add(e, USEC_INFINITY, on_claim_timer, w, &w->claim_timer);
	if (q >= 0)
		q = ev_timer_add(e, USEC_INFINITY, on_drain_timeout, w, &w->drain_timer);
	if (q >= 0)
		q = ev_timer_add(e, USEC_INFINITY, on_exit_timeout, w, &w->exit_timer);
	if (q >= 0)
		q = ev_timer_add(e, USEC_INFINITY, on_breaker_timer, w, &w->breaker_timer);
	if (q >= 0)
		q = ev_timer_add(e, USEC_INFINITY, on_spool_timer, w, &w->spool_timer);
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

int worker_start(worker_t *w)
{
	const struct conf *c = worker_cur_conf(w);
	int q;

	clean_stale_run_dirs(c->worker.run_dir);
	q = spool_foreach(c->worker.spool_dir, spool_load_one, w);
	if (q < 0)
		log_warning("cannot read the spool %s: %s, ignoring", c->worker.spool_dir,
			    strerror(-q));
	if (w->spool_pending)
		log_notice("delivering %u spooled results from a previous run", w->spool_pending);
	spool_gauge(w);
	w->phase = WORKER_RUNNING;
	spool_deliver_all(w);
	claim_kick(w);
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
	metric_set(w->m_slots, next->worker.concurrency);
	for (size_t i = 0; i < w->n_wfs; i++) {
		struct breaker *b = &w->wfs[i].breaker;

		b->threshold = next->worker.max_consecutive_failures;
		b->cooldown_base = next->worker.failure_cooldown;
		b->cooldown_max = MAX(next->worker.failure_cooldown_max, b->cooldown_base);
	}
	for (size_t i = 0; i < next->n_workflows; i++)
		worker_wfstate(w, next->workflows[i].name);
	claim_kick(w);
	return 0;
}

/* Teardown: removals and reaps still running get a bounded wait, then are left. */
static void offload_finish(offload_t *o)
{
	unsigned n = offload_pending(o);

	if (n == 0)
		return;
	log_info("waiting for %u run directory removals or reaps to finish", n);
	if (offload_drain(o, OFFLOAD_EXIT_BOUND) < 0)
		log_warning("%u run directory removals or reaps still busy after %llus, exiting "
			    "anyway",
			    offload_pending(o),
			    (unsigned long long)(OFFLOAD_EXIT_BOUND / USEC_PER_SEC));
}

worker_t *worker_free(worker_t *w)
{
	struct spool_item *it, *nit;

	if (!w)
		return NULL;
	while (w->runs) {
		struct run *r = w->runs;

		/* teardown: no more API traffic, no accounting */
		r->state = RUN_RELEASING;
		r->breaker_started = false;
		free(r->reject_reason);
		r->reject_reason = NULL;
		run_dispatch(r, RE_RELEASED);
	}
	for (it = w->spool_items; it; it = nit) {
		nit = it->next;
		spool_item_free(it);
	}
	offload_finish(w->offload);
	w->offload = offload_free(w->offload);
	http_cancel(w->claim_req);
	ev_timer_del(w->claim_timer);
	ev_timer_del(w->drain_timer);
	ev_timer_del(w->exit_timer);
	ev_timer_del(w->breaker_timer);
	ev_timer_del(w->spool_timer);
	api_done(&w->api);
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
		.runs_in_flight = w->n_runs,
		.slots = worker_cur_conf(w)->worker.concurrency,
		.runs_done = w->runs_done,
		.api_ready = w->phase == WORKER_RUNNING && api_ready(&w->api, ev_now(w->ev)),
		.api_last_ok = w->api.last_ok,
		.io_backend = ev_backend(w->ev),
		.queue_depth = w->queue_depth,
		.spool_pending = w->spool_pending,
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
	if (api_ready(&w->api, ev_now(w->ev)))
		return NULL;
	if (w->api.auth_denied)
		return "the API refuses our credentials";
	return w->api.last_ok ? "API not reached recently" : "API not reached yet";
}

static cJSON *status_runs(const worker_t *w)
{
	cJSON *a = cJSON_CreateArray();

	for (const struct run *r = w->runs; a && r; r = r->next) {
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
	cJSON_AddNumberToObject(o, "slots", info.slots);
	cJSON_AddNumberToObject(o, "runs_done", (double)info.runs_done);
	cJSON_AddNumberToObject(o, "spool_pending", info.spool_pending);
	cJSON_AddNumberToObject(o, "queue_depth", (double)info.queue_depth);
	cJSON_AddItemToObject(o, "runs", status_runs(w));
	cJSON_AddItemToObject(o, "breakers", status_breakers(w));
	cfg = cJSON_AddObjectToObject(o, "config");
	if (cfg) {
		cJSON_AddStringToObject(cfg, "api_url", c->api.url);
		cJSON_AddNumberToObject(cfg, "concurrency", c->worker.concurrency);
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
