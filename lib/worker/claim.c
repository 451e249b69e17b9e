/* Claiming: one claim request in flight at most, only into free slots, batched,
 * with long poll.  A fresh claim_id per claim; a retry of the same claim after a
 * transport error or 5xx reuses it, so a lost response never strands a run. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log/log.h"
#include "util/macro.h"
#include "util/strutil.h"
#include "worker/worker-int.h"

#define CLAIM_RETRY_BASE (1 * USEC_PER_SEC)
#define CLAIM_RETRY_CAP (60 * USEC_PER_SEC)
#define AUTH_RETRY_BASE (30 * USEC_PER_SEC)
#define AUTH_RETRY_CAP (5 * USEC_PER_MINUTE)
#define IDLE_CAP (30 * USEC_PER_SEC)
#define CLAIM_SUMMARY_EVERY (60 * USEC_PER_SEC)

/* The answer to a claim for max_runs runs: their inputs and a little more. */
static size_t claim_max_response(const worker_t *w, unsigned max_runs)
{
	return proto_claim_max_response(max_runs, worker_cur_conf(w)->worker.max_input_bytes);
}

static unsigned free_slots(const worker_t *w)
{
	unsigned c = worker_cur_conf(w)->worker.concurrency;

	return w->n_runs >= c ? 0 : MIN(c - w->n_runs, PROTO_MAX_RUNS);
}

/* The runs of a workflow that hold one of its slots: every one in the table
 * but those being given back. */
static unsigned wf_in_use(const worker_t *w, const char *name)
{
	unsigned n = 0;

	for (const struct run *r = w->runs; r; r = r->next)
		if (r->state != RUN_RELEASING && streq_ptr(r->workflow, name))
			n++;
	return n;
}

/* Free slots of the workflow's own concurrency, UINT_MAX without one. */
static unsigned wf_free_slots(const worker_t *w, const struct conf_workflow *wf)
{
	unsigned used;

	if (!wf->concurrency)
		return UINT_MAX;
	used = wf_in_use(w, wf->name);
	return used >= wf->concurrency ? 0 : wf->concurrency - used;
}

/* The configured workflows whose breaker lets a run in now and that are under
 * their own concurrency; *ret_room: how many runs they can take at most. */
static char **claimable_workflows(worker_t *w, unsigned *ret_room)
{
	const struct conf *c = worker_cur_conf(w);
	char **v = calloc(1, sizeof(char *));
	unsigned room = 0;

	for (size_t i = 0; v && i < c->n_workflows; i++) {
		struct wfstate *s = worker_wfstate(w, c->workflows[i].name);
		unsigned f = wf_free_slots(w, &c->workflows[i]);

		if (!s || !breaker_allows(&s->breaker) || f == 0)
			continue;
		room = f > UINT_MAX - room ? UINT_MAX : room + f;
		if (strv_extend(&v, s->name) < 0)
			v = strv_free(v);
	}
	*ret_room = room;
	return v;
}

static void claim_later(worker_t *w, usec_t delay)
{
	ev_timer_arm(w->claim_timer, delay);
}

/* An empty answer that came back long before the long poll was due: this API
 * does not hold claims, so poll at poll_interval, backing off while idle. */
static void after_empty(worker_t *w, usec_t elapsed)
{
	const struct conf *c = worker_cur_conf(w);
	usec_t delay;

	if (c->worker.long_poll > 0 && elapsed >= c->worker.long_poll / 2) {
		w->idle_polls = 0;
		claim_later(w, 0);
		return;
	}
	delay = c->worker.poll_interval << MIN(w->idle_polls, 4u);
	w->idle_polls++;
	delay = MIN(delay, MAX(IDLE_CAP, c->worker.poll_interval));
	/* +-20% jitter so a fleet does not poll in lockstep */
	delay = delay * 4 / 5 + random_below(delay * 2 / 5 + 1);
	claim_later(w, delay);
}

/* A claim attempt that did not give us an answer we could use: counted by
 * result, kept for /readyz, and logged: the first of a streak at once, then
 * one summary a minute, so a dead API neither floods the log nor goes unseen. */
_printf_(4, 5) static void claim_failed(worker_t *w, const char *result, int prio,
					const char *fmt, ...)
{
	static const char prefix[] = "last claim failed: "; /* as /readyz says it */
	const char *why = w->claim_error + strlen(prefix);
	usec_t now = ev_now(w->ev);
	va_list ap;

	metric_add(w->m_claims, 1, result);
	memcpy(w->claim_error, prefix, strlen(prefix));
	va_start(ap, fmt);
	vsnprintf(w->claim_error + strlen(prefix), sizeof(w->claim_error) - strlen(prefix), fmt,
		  ap);
	va_end(ap);
	if (w->claim_fail_streak++ == 0) {
		log_emit(prio, NULL, "claim failed: %s", why);
		w->claim_fail_logged_at = now;
		w->claim_fail_unlogged = 0;
		return;
	}
	w->claim_fail_unlogged++;
	if (now - w->claim_fail_logged_at < CLAIM_SUMMARY_EVERY)
		return;
	log_emit(prio, NULL, "%u claim%s failed in the last minute: %s", w->claim_fail_unlogged,
		 w->claim_fail_unlogged == 1 ? "" : "s", why);
	w->claim_fail_logged_at = now;
	w->claim_fail_unlogged = 0;
}

static void claim_answered(worker_t *w)
{
	if (w->claim_fail_streak > 0)
		log_notice("claims work again, after %u failed attempt%s", w->claim_fail_streak,
			   w->claim_fail_streak == 1 ? "" : "s");
	w->claim_fail_streak = w->claim_fail_unlogged = 0;
	w->claim_error[0] = '\0';
}

/* ---- cancel events (docs/protocol.md): a claim names the leases we hold and
 * its answer lists those whose cancel the API was asked for ---- */

/* A held lease whose cancel would still change something. */
static bool cancellable(const struct run *r)
{
	return !r->lost && r->kill_reason == KILL_NONE && r->id && r->token &&
	       (r->state == RUN_RUNNING || r->state == RUN_WAITING);
}

static struct proto_held *held_leases(const worker_t *w, size_t *ret_n)
{
	struct proto_held *h = calloc(w->n_runs + 1, sizeof(*h));
	size_t n = 0;

	for (const struct run *r = w->runs; h && r && n < PROTO_HELD_MAX; r = r->next)
		if (cancellable(r))
			h[n++] = (struct proto_held){.id = r->id, .token = r->token};
	*ret_n = n;
	return h;
}

static void cancels_arrived(worker_t *w, const struct proto_claim_resp *cr)
{
	if (cr->has_cancels != w->cancels_known) {
		w->cancels_known = cr->has_cancels;
		if (cr->has_cancels)
			log_info("the API delivers cancel events with claim answers: a cancel "
				 "reaches a run without waiting for its lease renewal");
		else
			log_notice("the API no longer delivers cancel events: a cancel reaches a "
				   "run at its next lease renewal");
	}
	w->in_arrival = true; /* no claim from inside a run's transition */
	for (size_t i = 0; cr->cancels && cr->cancels[i]; i++) {
		struct run *r;

		for (r = w->runs; r; r = r->next)
			if (cancellable(r) && streq(r->id, cr->cancels[i]))
				break;
		if (!r)
			continue;
		snprintf(r->note, sizeof(r->note), "cancel event in a claim answer");
		run_dispatch(r, RE_CANCEL);
	}
	w->in_arrival = false;
}

static void on_claim_ok(worker_t *w, const struct http_response *resp, usec_t sent_at)
{
	struct proto_claim_resp cr;
	char *err = NULL;
	int q;

	q = proto_claim_parse(resp->body, resp->body_len, worker_cur_conf(w)->worker.max_input_bytes,
			      &cr, &err);
	w->claim_id_used = false; /* answered: the next claim is a new one */
	if (q < 0) {
		claim_failed(w, "invalid", LOG_ERR,
			     "claim response unusable (%s); its runs, if any, return to the queue "
			     "when their leases expire",
			     err ? err : strerror(-q));
		free(err);
		claim_later(w, backoff_full_jitter(CLAIM_RETRY_BASE, CLAIM_RETRY_CAP,
						   w->claim_failures++, 0));
		return;
	}
	w->claim_failures = 0;
	claim_answered(w);
	w->queue_depth = cr.queue_depth;
	metric_set(w->m_queue_depth, cr.queue_depth < 0 ? 0 : (double)cr.queue_depth);
	metric_add(w->m_claims, 1, cr.n_runs ? "runs" : "empty");
	cancels_arrived(w, &cr);
	claim_runs_arrived(w, &cr, sent_at);
	if (cr.n_runs == 0 && !(cr.cancels && cr.cancels[0]))
		after_empty(w, ev_now(w->ev) - sent_at);
	else {
		w->idle_polls = 0;
		claim_later(w, 0);
	}
	proto_claim_resp_done(&cr);
}

/* An answer over the cap was cut off while it arrived: as unusable as an
 * invalid one (asking again with the same claim_id would get it again). */
static void on_claim_too_large(worker_t *w, const struct http_response *resp)
{
	w->claim_id_used = false;
	claim_failed(w, "too_large", LOG_ERR,
		     "claim answer too large (%s; the cap is max_runs x (worker.max_input_bytes "
		     "+ %u) + %u bytes), not read; its runs, if any, return to the queue when "
		     "their leases expire",
		     resp->error_message, PROTO_RUN_OVERHEAD, PROTO_CLAIM_ENVELOPE);
	claim_later(w, backoff_full_jitter(CLAIM_RETRY_BASE, CLAIM_RETRY_CAP,
					   w->claim_failures++, 0));
}

/* A claim for cancels only failed: no claim_id to keep, and a short pause, so
 * that a slot coming free is claimed soon (the timer holds claim_kick back).
 * A server that refuses one outright has no cancel events after all. */
static void on_claim_for_cancels_failed(worker_t *w, const struct http_response *resp)
{
	const struct conf *c = worker_cur_conf(w);
	char why[160];

	metric_add(w->m_claims, 1, "error");
	if (resp->status == 400 || resp->status == 422) { /* our request, not a passing fault */
		w->cancels_known = false;
		log_warning("the API refused a claim for cancel events only (%s); a cancel "
			    "reaches a run at its next lease renewal",
			    api_describe(resp, why, sizeof(why)));
	}
	claim_later(w, MIN(backoff_full_jitter(CLAIM_RETRY_BASE, CLAIM_RETRY_CAP,
					       w->claim_failures++, 0),
			   MAX(c->worker.poll_interval, CLAIM_RETRY_BASE)));
}

static void on_claim(http_req_t *req, const struct http_response *resp, void *userdata)
{
	worker_t *w = userdata;
	char why[160];
	bool held_only = w->claim_held_only;

	w->claim_req = NULL;
	w->claim_held_only = false;
	if (held_only && resp->status != 200) {
		on_claim_for_cancels_failed(w, resp);
		return;
	}
	if (resp->status == 200) {
		on_claim_ok(w, resp, w->claim_sent_at);
		return;
	}
	if (resp->error == -EMSGSIZE) {
		on_claim_too_large(w, resp);
		return;
	}
	if (resp->status == 401 || resp->status == 403) {
		w->claim_id_used = false;
		/* logged by api.c once per change of state; /readyz says it too */
		metric_add(w->m_claims, 1, "denied");
		claim_later(w, backoff_full_jitter(AUTH_RETRY_BASE, AUTH_RETRY_CAP,
						   w->claim_failures++, AUTH_RETRY_BASE / 2));
		return;
	}
	if (!http_should_retry(resp)) {
		/* 400 and the like: our request is wrong; a new claim after a pause */
		w->claim_id_used = false;
		claim_failed(w, "rejected", LOG_ERR, "claim refused (%s: %.*s), retrying in a minute",
			     api_describe(resp, why, sizeof(why)), (int)MIN(resp->body_len, 300),
			     resp->body ? resp->body : "");
		claim_later(w, 60 * USEC_PER_SEC);
		return;
	}
	claim_failed(w, "error", LOG_WARNING, "%s, retrying with backoff",
		     api_describe(resp, why, sizeof(why)));
	claim_later(w, http_retry_delay(resp, w->claim_failures++, CLAIM_RETRY_BASE,
					CLAIM_RETRY_CAP));
}

/* Every slot busy (or every workflow at its limit): keep a claim for no runs
 * open, so a cancel of a held run still comes at once.  Only to an API that
 * said it has cancel events, and only with a long poll. */
static void claim_for_cancels(worker_t *w)
{
	const struct conf *c = worker_cur_conf(w);
	_cleanup_free_ char *url = NULL, *body = NULL;
	_cleanup_free_ struct proto_held *held = NULL;
	char *none[] = {NULL};
	char id[UUID_STRING_MAX];
	struct proto_claim_req rq;
	size_t n = 0;

	if (!w->cancels_known || c->worker.long_poll == 0 || w->claim_id_used)
		return;
	held = held_leases(w, &n);
	if (!held || n == 0)
		return;
	uuid_v7(id); /* nothing is granted to it: never reused, never cancelled */
	rq = (struct proto_claim_req){
		.claim_id = id,
		.worker_id = c->worker.id,
		.max_runs = 0,
		.lease_ttl_s = (unsigned)(c->worker.lease_ttl / USEC_PER_SEC),
		.wait_s = (unsigned)(c->worker.long_poll / USEC_PER_SEC),
		.workflows = none,
		.tags = c->worker.tags,
		.send_held = true,
		.held = held,
		.n_held = n,
	};
	if (proto_claim_body(&rq, &body) < 0 || proto_url(w->api.base, "/v1/claims", NULL, &url) < 0)
		return;
	w->claim_sent_at = ev_now(w->ev);
	if (api_post(&w->api, API_CLAIMS, url, body, c->api.request_timeout + c->worker.long_poll,
		     claim_max_response(w, 0), on_claim, w, &w->claim_req) < 0) {
		w->claim_req = NULL;
		return;
	}
	w->claim_held_only = true;
}

/* A slot came free while a claim for cancels only is open: claim for runs. */
static void claim_for_cancels_stop(worker_t *w)
{
	if (!w->claim_req || !w->claim_held_only)
		return;
	http_cancel(w->claim_req);
	w->claim_req = NULL;
	w->claim_held_only = false;
}

void claim_kick(worker_t *w)
{
	const struct conf *c = worker_cur_conf(w);
	char **wfs = NULL;
	_cleanup_free_ char *url = NULL, *body = NULL;
	unsigned slots = free_slots(w), room = 0;
	_cleanup_free_ struct proto_held *held = NULL;
	size_t n_held = 0;
	struct proto_claim_req rq;
	int q;

	if (w->phase != WORKER_RUNNING || ev_timer_armed(w->claim_timer) || w->in_arrival)
		return;
	wfs = slots ? claimable_workflows(w, &room) : NULL;
	if (wfs && wfs[0])
		claim_for_cancels_stop(w);
	if (w->claim_req) {
		strv_free(wfs);
		return;
	}
	if (!wfs || !wfs[0]) {
		/* every slot busy or every workflow blocked (the breaker timer or a
		 * run's end kicks us): only cancels to wait for */
		strv_free(wfs);
		claim_for_cancels(w);
		return;
	}
	held = held_leases(w, &n_held);
	/* never more than the workflows asked for can take (workflow.concurrency) */
	slots = MIN(slots, room);
	if (!w->claim_id_used)
		uuid_v7(w->claim_id);
	rq = (struct proto_claim_req){
		.claim_id = w->claim_id,
		.worker_id = c->worker.id,
		.max_runs = slots,
		.lease_ttl_s = (unsigned)(c->worker.lease_ttl / USEC_PER_SEC),
		.wait_s = (unsigned)(c->worker.long_poll / USEC_PER_SEC),
		.workflows = wfs,
		.tags = c->worker.tags,
		.send_held = held != NULL,
		.held = held,
		.n_held = n_held,
	};
	if ((q = proto_claim_body(&rq, &body)) < 0 ||
	    (q = proto_url(w->api.base, "/v1/claims", NULL, &url)) < 0)
		goto fail;
	w->claim_sent_at = ev_now(w->ev);
	w->claim_id_used = true;
	q = api_post(&w->api, API_CLAIMS, url, body, c->api.request_timeout + c->worker.long_poll,
		     claim_max_response(w, slots), on_claim, w, &w->claim_req);
	if (q < 0)
		goto fail;
	strv_free(wfs);
	return;
fail:
	w->claim_req = NULL;
	strv_free(wfs);
	if (q == -EINVAL || q == -EPROTONOSUPPORT)
		claim_failed(w, "error", LOG_ERR, "cannot send a claim to %s: not a usable URL (%s)",
			     url ? url : w->api.base, strerror(-q));
	else
		claim_failed(w, "error", LOG_ERR, "cannot send a claim: %s", strerror(-q));
	claim_later(w, backoff_full_jitter(CLAIM_RETRY_BASE, CLAIM_RETRY_CAP,
					   w->claim_failures++, 0));
}

static void on_claim_cancel(http_req_t *req, const struct http_response *resp, void *userdata)
{
	worker_t *w = userdata;
	char why[160];

	w->claim_cancels--;
	if (resp->status != 200)
		log_warning("claim cancel not confirmed (%s); any run it held returns to the "
			    "queue when its lease expires",
			    api_describe(resp, why, sizeof(why)));
	worker_maybe_exit(w);
}

void claim_stop(worker_t *w)
{
	_cleanup_free_ char *url = NULL;
	/* a claim for cancels only is granted nothing: no cancel on the server */
	bool open = (w->claim_req && !w->claim_held_only) || w->claim_id_used;

	ev_timer_disarm(w->claim_timer);
	http_cancel(w->claim_req);
	w->claim_req = NULL;
	w->claim_held_only = false;
	if (!open)
		return;
	/* the server may have granted runs to the claim whose answer we dropped */
	w->claim_id_used = false;
	if (proto_url(w->api.base, "/v1/claims/%s/cancel", w->claim_id, &url) < 0 ||
	    api_post(&w->api, API_CLAIM_CANCEL, url, "{}", 10 * USEC_PER_SEC, 4096,
		     on_claim_cancel, w, NULL) < 0)
		return;
	w->claim_cancels++;
}

/* What to do with one run the API handed us. */
static enum run_event triage(worker_t *w, struct run *r)
{
	struct wfstate *s;

	if (r->reject_reason)
		return RE_REJECT;
	if (w->phase != WORKER_RUNNING) {
		r->release_reason = PROTO_RELEASE_DRAINING;
		return RE_RELEASE;
	}
	if (!r->wf) {
		r->release_reason = PROTO_RELEASE_UNSUPPORTED_WORKFLOW;
		return RE_RELEASE;
	}
	s = worker_wfstate(w, r->workflow);
	if (!s || !breaker_allows(&s->breaker)) {
		r->release_reason = PROTO_RELEASE_BLOCKED_WORKFLOW;
		return RE_RELEASE;
	}
	if (r->wf->concurrency && wf_in_use(w, r->workflow) > r->wf->concurrency) {
		/* the API handed more of one workflow than its concurrency: give the
		 * rest back; our next claim leaves the workflow out */
		r->release_reason = PROTO_RELEASE_BLOCKED_WORKFLOW;
		return RE_RELEASE;
	}
	if (w->n_runs > worker_cur_conf(w)->worker.concurrency) {
		/* more than we asked for: not ours to run */
		r->release_reason = PROTO_RELEASE_DRAINING;
		return RE_RELEASE;
	}
	return RE_START;
}

/* ---- one execution per run id ---- */

static struct log_fields run_fields(const struct run *r)
{
	return (struct log_fields){.run_id = r->id, .workflow = r->workflow, .attempt = r->attempt};
}

/* An execution of this run id whose process group may still be alive: its
 * exit callback (process reaped, group SIGKILLed, output at EOF) has not run. */
static struct run *find_busy(worker_t *w, const struct run *r)
{
	for (struct run *o = w->runs; o; o = o->next)
		if (o != r && streq_ptr(o->id, r->id) &&
		    (o->state == RUN_RUNNING || o->state == RUN_KILLING))
			return o;
	return NULL;
}

/* Another lease of this run id that we still think is ours. */
static struct run *find_older(worker_t *w, const struct run *r)
{
	for (struct run *o = w->runs; o; o = o->next)
		if (o != r && !o->lost && o->state != RUN_DONE && streq_ptr(o->id, r->id))
			return o;
	return NULL;
}

/* The same lease delivered twice (a confused API): the copy we hold is it. */
static bool lease_held(worker_t *w, const struct proto_run *pr)
{
	for (struct run *o = w->runs; o; o = o->next)
		if (pr->id && pr->token && streq_ptr(o->id, pr->id) &&
		    streq_ptr(o->token, pr->token))
			return true;
	return false;
}

/* The API granted r's run again: every older lease of it is over (the server
 * holds one lease per run), so its execution stops as on any lease loss. */
static void supersede_older(worker_t *w, struct run *r)
{
	struct run *o;

	for (unsigned n = w->n_runs; n > 0 && (o = find_older(w, r)); n--) {
		struct log_fields f = run_fields(o);

		log_emit(LOG_WARNING, &f,
			 "lease lost (the API granted the run again, attempt %u): stopping the "
			 "older execution, nothing more is written",
			 r->attempt);
		metric_add(w->m_leases_lost, 1);
		run_dispatch(o, RE_LEASE_LOST);
	}
}

/* Start r now, or make it wait for the older execution of its id. */
static enum run_event start_or_wait(worker_t *w, struct run *r)
{
	struct run *busy = find_busy(w, r);
	struct log_fields f = run_fields(r);

	if (!busy)
		return RE_START;
	log_emit(LOG_NOTICE, &f,
		 "waiting for the previous execution of this run (pid %d, %s) to end before "
		 "starting it",
		 busy->proc ? (int)exec_pid(busy->proc) : -1, run_state_name(busy->state));
	snprintf(r->note, sizeof(r->note), "previous execution pid %d still %s",
		 busy->proc ? (int)exec_pid(busy->proc) : -1, run_state_name(busy->state));
	return RE_WAIT;
}

void claim_run_unblocked(worker_t *w, const char *id)
{
	struct run *r;

	if (w->exited || w->phase == WORKER_STOPPING) /* hard stop released the waiters */
		return;
	for (r = w->runs; r; r = r->next)
		if (r->state == RUN_WAITING && streq_ptr(r->id, id))
			break;
	if (!r || find_busy(w, r))
		return;
	snprintf(r->note, sizeof(r->note), "the previous execution has ended");
	run_dispatch(r, triage(w, r));
}

void claim_runs_arrived(worker_t *w, struct proto_claim_resp *resp, usec_t sent_at)
{
	w->in_arrival = true;
	for (size_t i = 0; i < resp->n_runs; i++) {
		struct proto_run *pr = &resp->runs[i];
		enum run_event ev;
		struct run *r;

		if (pr->invalid && !pr->usable_for_reject) {
			log_error("claim returned an unusable run (%s), ignoring it; the API will "
				  "requeue it when its lease expires",
				  pr->invalid);
			continue;
		}
		if (lease_held(w, pr)) {
			log_warning("claim returned run %s with a lease we already hold, ignoring "
				    "the duplicate",
				    pr->id);
			continue;
		}
		r = run_new(w, pr, sent_at);
		if (!r) {
			log_error("out of memory taking run %s; it returns to the queue when its "
				  "lease expires",
				  pr->id ? pr->id : "?");
			continue;
		}
		worker_run_add(w, r);
		supersede_older(w, r);
		ev = triage(w, r);
		run_dispatch(r, ev == RE_START ? start_or_wait(w, r) : ev);
	}
	w->in_arrival = false;
}
