/* Claiming: only into free slots, batched, with long poll, through the
 * driver.  With DRV_CAP_MULTI_WORKFLOW one claim with the long poll is in
 * flight and it names every claimable workflow; a slot that frees while it is
 * out is claimed at once by a claim ahead (no long poll, its own claim id, up
 * to CLAIM_AHEAD_MAX of them), so it never waits for the first one's answer.
 * Without it each claimable workflow has its
 * own lane, one claim in flight each, sharing the free slots (their sum never
 * exceeds them, and who goes first rotates so no workflow starves).  The
 * claims in flight never ask for more runs than there are free slots.  A claim
 * that got no definitive answer is asked again as a repeat (the driver reuses
 * its claim id where it has idempotent claims), so a lost response never
 * strands a run. */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log/log.h"
#include "util/macro.h"
#include "util/strutil.h"
#include "util/random.h"
#include "worker/claim.h"

#define CLAIM_RETRY_BASE (1 * USEC_PER_SEC)
#define CLAIM_RETRY_CAP (60 * USEC_PER_SEC)
#define AUTH_RETRY_BASE (30 * USEC_PER_SEC)
#define AUTH_RETRY_CAP (5 * USEC_PER_MINUTE)
#define IDLE_CAP (30 * USEC_PER_SEC)
#define CLAIM_SUMMARY_EVERY (60 * USEC_PER_SEC)
#define CLAIM_MAX_RUNS 256 /* struct drv_claim's bound */
#define HELD_MAX 4096
#define HOLD_BASE (1 * USEC_PER_SEC) /* claims held for the host's trouble */
#define HOLD_CAP (60 * USEC_PER_SEC)
/* How long a claim carried by a completion keeps the slot it asks for: a
 * completion answered later than that (a slow API) does not hold the next run
 * back; a claim ahead goes for the slot, and what the carried claim brings
 * after that is run if a slot is free, else given back.  It counts from the
 * completion's joining its batch, not from the send: the native driver, the
 * only one that carries claims, sends a batch within COMPLETE_HOLD (10 ms,
 * drv_native_batch.c), so the answer itself has 15 ms at least. */
#define CARRY_PATIENCE (25 * USEC_PER_MSEC)
/* Claims ahead in flight at once (DRV_CAP_MULTI_WORKFLOW and DRV_CAP_RELEASE). */
#define CLAIM_AHEAD_MAX 3

/* One claim in flight at most per lane: one lane with DRV_CAP_MULTI_WORKFLOW,
 * else one per workflow. */
struct claim_lane {
	struct claimer *cl;
	char *workflow;    /* NULL: every claimable workflow in one claim */
	drv_req_t *req;
	usec_t sent_at;
	unsigned max_runs; /* of the claim in flight */
	bool repeat;       /* sent without a definitive answer: the next asks again */
	bool held_only;    /* the claim in flight asks for no runs, only for cancels */
	bool finishing;    /* stopped, but left to end: what it brings is released */
	bool ahead;        /* a claim ahead: no long poll, its own claim id */
	bool carried;      /* a claim ahead carried by a completion in flight
	                    * (DRV_CAP_COMPLETE_CLAIM); req is the run's */
	char claim_id[UUID_STRING_MAX]; /* a claim ahead's, kept for its repeat */
};

struct claimer {
	struct claimer_params p;
	struct claim_lane **lanes;
	size_t n_lanes;
	unsigned lane_rr; /* which workflow goes first when slots are scarce */
	unsigned claim_failures;
	unsigned idle_polls;
	ev_timer_t *timer;
	ev_timer_t *carry_timer; /* a carried claim's patience ran out: claim_kick */
	/* the last carried claim, which may grow while its completion waits to
	 * go (drv complete_claim_extend), and the workflows it names */
	struct claim_lane *carry_open;
	char **carry_wfs;
	long queue_depth;
	unsigned claim_cancels; /* claim cancels in flight */
	bool in_arrival;        /* handling a claim's runs: no nested claim */
	/* failed claim attempts: the first of a streak is logged, then a summary a minute */
	unsigned claim_fail_streak;   /* failures since the last answer we could use */
	unsigned claim_fail_unlogged; /* of those, not yet in a log line */
	usec_t claim_fail_logged_at;
	char claim_error[256]; /* why the last claim failed, "" after a good one (/readyz) */
	ev_timer_t *hold_timer; /* claims held for the host's trouble: until it fires */
	unsigned hold_streak;   /* holds in a row, no run started between them */
	char hold_why[320];     /* "" when not held (/readyz) */
	bool cancels_known;    /* the API's claim answers carry cancel events */
	bool ahead_idle;       /* a claim ahead came back empty: none until one brings runs */
	bool carry_off;        /* the API does not take claims in completions */
	bool ready_idle;       /* a run claimed ahead waited its whole hold: none
	                        * claimed ahead until a slot is seen free */
};

static const struct conf *claimer_conf(const struct claimer *cl)
{
	return cl->p.ops->conf(cl->p.host)->conf;
}

static struct breaker *claimer_breaker(const struct claimer *cl, const char *workflow)
{
	return cl->p.ops->breaker(cl->p.host, workflow);
}

/* The workflow is configured and its failure breaker lets a run in now. */
static bool workflow_open(const struct claimer *cl, const char *workflow)
{
	struct breaker *b = claimer_breaker(cl, workflow);

	return b && breaker_allows(b);
}

/* Runs a claim may bring now: the execution slots no run holds, none while the
 * reporting queue is full (a dead API stops claims), and never so many that
 * more than concurrency + max_reporting runs would be held at once. */
static unsigned slots_free(const struct claimer *w, unsigned running, unsigned reporting,
                           unsigned n)
{
	const struct conf_worker *c = &claimer_conf(w)->worker;
	unsigned slots = w->p.ops->slots(w->p.host);
	unsigned rep_max = conf_max_reporting(c), held_max = slots + rep_max;

	if (w->hold_why[0] || running >= slots || reporting >= rep_max || n >= held_max)
		return 0;
	return MIN(MIN(slots - running, held_max - n), CLAIM_MAX_RUNS);
}

static unsigned free_slots(const struct claimer *w)
{
	const struct run_table *t = w->p.table;

	return slots_free(w, t->running, t->reporting, t->n - t->ready);
}

/* Runs claimed ahead of a free slot wait in RUN_READY (worker.prefetch): only
 * with one claim for every workflow and where a run not started can be given
 * back. */
static bool prefetch_on(const struct claimer *w)
{
	drv_t *d = w->p.runs->drv;

	return claimer_conf(w)->worker.prefetch > 0 && drv_has(d, DRV_CAP_RELEASE) &&
	       drv_has(d, DRV_CAP_MULTI_WORKFLOW);
}

/* Runs a claim may bring beyond the free slots, to wait for one: none while
 * the reporting queue is full, nor after a hold ran out (the runs are long
 * enough that a run claimed ahead only waits) until a slot is seen free, nor
 * while the API says nothing else is pending (queue_depth 0): a run enqueued
 * then goes to a worker with a free slot, not to wait here. */
static unsigned ready_room(const struct claimer *w)
{
	const struct run_table *t = w->p.table;
	unsigned want = claimer_conf(w)->worker.prefetch;

	if (w->hold_why[0] || !prefetch_on(w) || w->ready_idle || w->queue_depth == 0 ||
	    !w->p.ops->running(w->p.host) ||
	    t->reporting >= conf_max_reporting(&claimer_conf(w)->worker))
		return 0;
	return want > t->ready ? want - t->ready : 0;
}

/* The runs of a workflow that hold one of its slots: claimed, waiting or
 * running (its child alive), as the worker's slots count them. */
static unsigned wf_in_use(const struct claimer *w, const char *name)
{
	unsigned n = 0;

	for (const struct run *r = w->p.table->head; r; r = r->next)
		if (run_holds_slot(r->state) && streq_ptr(r->workflow, name))
			n++;
	return n;
}

/* Free slots of the workflow's own concurrency, UINT_MAX without one. */
static unsigned wf_free_slots(const struct claimer *w, const struct conf_workflow *wf)
{
	unsigned used;

	if (!wf->concurrency)
		return UINT_MAX;
	used = wf_in_use(w, wf->name);
	return used >= wf->concurrency ? 0 : wf->concurrency - used;
}

/* The configured workflows whose breaker lets a run in now and that are under
 * their own concurrency; *ret_room: how many runs they can take at most. */
static char **claimable_workflows(struct claimer *w, unsigned *ret_room)
{
	const struct conf *c = claimer_conf(w);
	char **v = calloc(1, sizeof(char *));
	unsigned room = 0;

	for (size_t i = 0; v && i < c->n_workflows; i++) {
		unsigned f = wf_free_slots(w, &c->workflows[i]);

		if (!workflow_open(w, c->workflows[i].name) || f == 0)
			continue;
		room = f > UINT_MAX - room ? UINT_MAX : room + f;
		if (strv_extend(&v, c->workflows[i].name) < 0)
			v = strv_free(v);
	}
	*ret_room = room;
	return v;
}

static void claim_later(struct claimer *w, usec_t delay)
{
	ev_timer_arm(w->timer, delay);
}

/* An empty answer that came back long before the long poll was due: this API
 * does not hold claims, so poll at poll_interval, backing off while idle. */
static void after_empty(struct claimer *w, usec_t elapsed)
{
	const struct conf *c = claimer_conf(w);
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
_printf_(4, 5) static void claim_failed(struct claimer *w, const char *result, int prio,
					const char *fmt, ...)
{
	static const char prefix[] = "last claim failed: "; /* as /readyz says it */
	const char *why = w->claim_error + strlen(prefix);
	usec_t now = ev_now(w->p.runs->ev);
	va_list ap;

	metric_add(w->p.m_claims, 1, result);
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

static void claim_answered(struct claimer *w)
{
	if (w->claim_fail_streak > 0)
		log_notice("claims work again, after %u failed attempt%s", w->claim_fail_streak,
			   w->claim_fail_streak == 1 ? "" : "s");
	w->claim_fail_streak = w->claim_fail_unlogged = 0;
	w->claim_error[0] = '\0';
}

/* ---- cancel events (DRV_CAP_SERVER_CANCEL): a claim names the leases we
 * hold and its answer lists those whose cancel the API was asked for ---- */

/* A held lease whose cancel would still change something. */
static bool cancellable(const struct run *r)
{
	return !r->lost && r->kill_reason == KILL_NONE && r->id && r->priv &&
	       (r->state == RUN_RUNNING || r->state == RUN_WAITING || r->state == RUN_READY);
}

static struct drv_held *held_leases(const struct claimer *w, size_t *ret_n)
{
	struct drv_held *h = calloc(w->p.table->n + 1, sizeof(*h));
	size_t n = 0;

	for (const struct run *r = w->p.table->head; h && r && n < HELD_MAX; r = r->next)
		if (cancellable(r))
			h[n++] = (struct drv_held){.id = r->id, .priv = r->priv};
	*ret_n = n;
	return h;
}

static void cancels_arrived(struct claimer *w, const struct drv_claim_answer *ans)
{
	if (ans->has_cancels != w->cancels_known) {
		w->cancels_known = ans->has_cancels;
		if (ans->has_cancels)
			log_info("the API delivers cancel events with claim answers: a cancel "
				 "reaches a run without waiting for its lease renewal");
		else
			log_notice("the API no longer delivers cancel events: a cancel reaches a "
				   "run at its next lease renewal");
	}
	w->in_arrival = true; /* no claim from inside a run's transition */
	for (size_t i = 0; ans->cancels && ans->cancels[i]; i++) {
		struct run *r;

		for (r = run_table_find(w->p.table, ans->cancels[i]); r;
		     r = run_table_find_next(r, ans->cancels[i]))
			if (cancellable(r))
				break;
		if (!r)
			continue;
		snprintf(r->note, sizeof(r->note), "cancel event in a claim answer");
		run_dispatch(r, RE_CANCEL);
	}
	w->in_arrival = false;
}

static void claim_runs_arrived(struct claimer *w, struct drv_claim_answer *ans, usec_t sent_at);

static void on_claim_ok(struct claim_lane *l, struct drv_claim_answer *ans)
{
	struct claimer *w = l->cl;

	w->claim_failures = 0;
	claim_answered(w);
	w->queue_depth = ans->queue_depth;
	metric_set(w->p.m_queue_depth, ans->queue_depth < 0 ? 0 : (double)ans->queue_depth);
	metric_add(w->p.m_claims, 1, ans->n_runs ? "runs" : "empty");
	if (drv_has(w->p.runs->drv, DRV_CAP_SERVER_CANCEL))
		cancels_arrived(w, ans);
	claim_runs_arrived(w, ans, l->sent_at);
	if (ans->n_runs > 0)
		w->ahead_idle = false;
	if (l->ahead) {
		/* the claim with the long poll waits for new work; this one only
		 * filled slots that were free */
		if (ans->n_runs == 0)
			w->ahead_idle = true;
		else
			claim_later(w, 0);
		return;
	}
	if (ans->n_runs == 0 && !(ans->cancels && ans->cancels[0]) && !ans->no_wait)
		after_empty(w, ev_now(w->p.runs->ev) - l->sent_at);
	else {
		w->idle_polls = 0;
		claim_later(w, 0);
	}
}

/* A claim for cancels only failed: no claim to repeat, and a short pause, so
 * that a slot coming free is claimed soon (the timer holds claim_kick back).
 * A server that refuses one outright has no cancel events after all. */
static void on_claim_for_cancels_failed(struct claimer *w, const struct drv_answer *a)
{
	const struct conf *c = claimer_conf(w);

	metric_add(w->p.m_claims, 1, "error");
	if (a->verdict == DRV_REFUSED) { /* our request, not a passing fault */
		w->cancels_known = false;
		log_warning("the API refused a claim for cancel events only (%s); a cancel "
			    "reaches a run at its next lease renewal",
			    a->detail);
	}
	claim_later(w, MIN(backoff_full_jitter(CLAIM_RETRY_BASE, CLAIM_RETRY_CAP,
					       w->claim_failures++, 0),
			   MAX(c->worker.poll_interval, CLAIM_RETRY_BASE)));
}

/* An answer we could not use at all, or one the API meant as a refusal: the
 * next claim is a new one. */
static void on_claim_refused(struct claimer *w, const struct drv_claim_answer *ans)
{
	const struct drv_answer *a = &ans->a;

	if (ans->malformed) {
		claim_failed(w, "invalid", LOG_ERR,
			     "claim response unusable (%s); its runs, if any, return to the queue "
			     "when their leases expire",
			     a->detail);
		claim_later(w, backoff_full_jitter(CLAIM_RETRY_BASE, CLAIM_RETRY_CAP,
						   w->claim_failures++, 0));
	} else if (ans->too_large) {
		/* cut off while it arrived: asking again would get it again */
		claim_failed(w, "too_large", LOG_ERR,
			     "claim answer too large (%s), not read; its runs, if any, return to "
			     "the queue when their leases expire",
			     a->detail);
		claim_later(w, backoff_full_jitter(CLAIM_RETRY_BASE, CLAIM_RETRY_CAP,
						   w->claim_failures++, 0));
	} else if (a->verdict == DRV_DENIED) {
		/* logged by the driver once per change of state; /readyz says it too */
		metric_add(w->p.m_claims, 1, "denied");
		claim_later(w, backoff_full_jitter(AUTH_RETRY_BASE, AUTH_RETRY_CAP,
						   w->claim_failures++, AUTH_RETRY_BASE / 2));
	} else {
		/* 400 and the like: our request is wrong; a new claim after a pause */
		claim_failed(w, "rejected", LOG_ERR, "claim refused (%s), retrying in a minute",
			     a->detail);
		claim_later(w, 60 * USEC_PER_SEC);
	}
}

static void on_claim_answer(struct drv_claim_answer *ans, void *userdata)
{
	struct claim_lane *l = userdata;
	struct claimer *w = l->cl;
	bool held_only = l->held_only;
	const struct drv_answer *a = &ans->a;

	l->req = NULL;
	l->held_only = false;
	l->max_runs = 0;
	if (held_only && a->verdict != DRV_OK && !ans->malformed) {
		on_claim_for_cancels_failed(w, a);
		return;
	}
	if (a->verdict != DRV_RETRY)
		l->repeat = false; /* answered: the next claim is a new one */
	if (a->verdict == DRV_OK) {
		on_claim_ok(l, ans);
		return;
	}
	if (a->verdict != DRV_RETRY) {
		on_claim_refused(w, ans);
		return;
	}
	claim_failed(w, "error", LOG_WARNING, "%s, retrying with backoff", a->detail);
	claim_later(w, drv_retry_delay(a, w->claim_failures++, CLAIM_RETRY_BASE, CLAIM_RETRY_CAP));
}

static void on_claim(struct drv_claim_answer *ans, void *userdata)
{
	struct claim_lane *l = userdata;
	bool finishing = l->finishing;

	l->finishing = false;
	on_claim_answer(ans, userdata);
	if (finishing) /* its runs, if any, are being released: the owner may be done */
		l->cl->p.ops->idle(l->cl->p.host);
}

/* ---- lanes ---- */

static struct claim_lane *lane_new(struct claimer *w, const char *workflow)
{
	struct claim_lane **v, *l;

	v = realloc(w->lanes, (w->n_lanes + 1) * sizeof(*v));
	if (!v)
		return NULL;
	w->lanes = v;
	l = calloc(1, sizeof(*l));
	if (!l || (workflow && !(l->workflow = strdup(workflow)))) {
		free(l);
		return NULL;
	}
	l->cl = w;
	w->lanes[w->n_lanes++] = l;
	return l;
}

static struct claim_lane *lane_get(struct claimer *w, const char *workflow)
{
	for (size_t i = 0; i < w->n_lanes; i++)
		if (!w->lanes[i]->ahead && streq_ptr(w->lanes[i]->workflow, workflow))
			return w->lanes[i];
	return lane_new(w, workflow);
}

/* A lane for a claim ahead with none in flight, or NULL (CLAIM_AHEAD_MAX busy). */
static struct claim_lane *lane_ahead(struct claimer *w)
{
	struct claim_lane *l, *idle = NULL;
	unsigned n = 0;

	for (size_t i = 0; i < w->n_lanes; i++) {
		l = w->lanes[i];
		if (!l->ahead)
			continue;
		n++;
		if (l->req || l->carried || l->finishing)
			continue;
		if (l->repeat) /* its last claim got no answer: ask again first */
			return l;
		idle = idle ? idle : l;
	}
	if (idle)
		return idle;
	if (n >= CLAIM_AHEAD_MAX || !(l = lane_new(w, NULL)))
		return NULL;
	l->ahead = true;
	return l;
}

/* A claim ahead that got no answer (or one a completion carried): asked
 * again first, with its claim id, so the runs granted to it come to us. */
static struct claim_lane *lane_repeat(const struct claimer *w)
{
	for (size_t i = 0; i < w->n_lanes; i++) {
		struct claim_lane *l = w->lanes[i];

		if (l->ahead && l->repeat && !l->req && !l->carried && !l->finishing)
			return l;
	}
	return NULL;
}

/* Slots promised to the claims in flight. */
static unsigned lanes_reserved(const struct claimer *w)
{
	unsigned n = 0;

	usec_t now = ev_now(w->p.runs->ev);

	for (size_t i = 0; i < w->n_lanes; i++) {
		const struct claim_lane *l = w->lanes[i];

		if (l->req || (l->carried && now - l->sent_at < CARRY_PATIENCE))
			n += l->max_runs;
	}
	return n;
}

static void claim_send_failed(struct claimer *w, int q)
{
	if (q == -EINVAL || q == -EPROTONOSUPPORT)
		claim_failed(w, "error", LOG_ERR, "cannot send a claim to %s: not a usable URL (%s)",
			     claimer_conf(w)->api.url, strerror(-q));
	else
		claim_failed(w, "error", LOG_ERR, "cannot send a claim: %s", strerror(-q));
	claim_later(w, backoff_full_jitter(CLAIM_RETRY_BASE, CLAIM_RETRY_CAP,
					   w->claim_failures++, 0));
}

/* One claim on lane l: max_runs of the workflows wfs (0 = cancels only). */
static int claim_send(struct claimer *w, struct claim_lane *l, char *const *wfs, unsigned max_runs)
{
	const struct conf *c = claimer_conf(w);
	bool cancels = drv_has(w->p.runs->drv, DRV_CAP_SERVER_CANCEL);
	_cleanup_free_ struct drv_held *held = NULL;
	usec_t wait = l->ahead ? 0 : c->worker.long_poll;
	size_t n_held = 0;
	struct drv_claim rq;
	int q;

	if (cancels && !(held = held_leases(w, &n_held)))
		return -ENOMEM;
	rq = (struct drv_claim){
		.max_runs = max_runs,
		.workflows = wfs,
		.tags = c->worker.tags,
		.lease_ttl_s = (unsigned)(c->worker.lease_ttl / USEC_PER_SEC),
		.wait = wait,
		.timeout = c->api.request_timeout + wait,
		.max_input = c->worker.max_input_bytes,
		.repeat = max_runs > 0 && l->repeat,
		.send_held = cancels,
		.held = held,
		.n_held = n_held,
		.claim_id = l->ahead ? l->claim_id : NULL,
	};
	l->sent_at = ev_now(w->p.runs->ev);
	q = drv_ops(w->p.runs->drv)->claim(w->p.runs->drv, &rq, on_claim, l, &l->req);
	if (q < 0) {
		l->req = NULL;
		return q;
	}
	l->max_runs = max_runs;
	l->held_only = max_runs == 0;
	if (max_runs > 0)
		l->repeat = true;
	return 0;
}

/* Every slot busy (or every workflow at its limit): keep a claim for no runs
 * open, so a cancel of a held run still comes at once.  Only to an API that
 * said it has cancel events, and only with a long poll. */
static void claim_for_cancels(struct claimer *w, struct claim_lane *l)
{
	const struct conf *c = claimer_conf(w);
	char *none[] = {NULL};
	size_t n = 0;
	_cleanup_free_ struct drv_held *held = NULL;

	if (!w->cancels_known || c->worker.long_poll == 0 || l->repeat || l->req)
		return;
	held = held_leases(w, &n);
	if (!held || n == 0)
		return;
	(void)claim_send(w, l, none, 0);
}

/* A slot came free while a claim for cancels only is open: claim for runs. */
static void claim_for_cancels_stop(struct claim_lane *l)
{
	if (!l->req || !l->held_only)
		return;
	drv_cancel(l->req);
	l->req = NULL;
	l->held_only = false;
}

/* A claim ahead can be stopped by letting it end (it has no long poll) and
 * releasing what it brings: its own claim id is not the one claim_cancel
 * cancels. */
static bool ahead_allowed(const struct claimer *w)
{
	return drv_has(w->p.runs->drv, DRV_CAP_RELEASE) && !w->ahead_idle;
}

static bool carry_allowed(const struct claimer *w);

/* The free slots a claim may ask for now: with claims carried by
 * completions, a run that is shipping the last of its log keeps the slot it
 * left for the claim its completion will carry. */
static unsigned slots_to_claim(const struct claimer *w)
{
	unsigned slots = free_slots(w), flushing = w->p.table->flushing;

	if (carry_allowed(w))
		slots = slots > flushing ? slots - flushing : 0;
	return slots + ready_room(w);
}

/* One claim for every claimable workflow (DRV_CAP_MULTI_WORKFLOW): on the
 * lane with the long poll, or, while that one is out, a claim ahead for the
 * slots freed since it was sent. */
static void claim_kick_one(struct claimer *w)
{
	struct claim_lane *l = lane_get(w, NULL);
	char **wfs = NULL;
	unsigned slots = slots_to_claim(w), room = 0, want, reserved;
	int q;

	if (!l)
		return;
	wfs = slots ? claimable_workflows(w, &room) : NULL;
	if (!wfs || !wfs[0]) {
		/* every slot busy or every workflow blocked (the breaker timer or a
		 * run's end kicks us): only cancels to wait for */
		strv_free(wfs);
		if (!l->req)
			claim_for_cancels(w, l);
		return;
	}
	/* never more than the free slots, less what the claims in flight may
	 * bring, nor than the workflows asked for can take (workflow.concurrency) */
	want = MIN(slots, room);
	reserved = lanes_reserved(w);
	if (want > reserved) {
		struct claim_lane *rep = lane_repeat(w);

		if (rep && drv_has(w->p.runs->drv, DRV_CAP_RELEASE))
			q = claim_send(w, rep, wfs, want - reserved);
		else if (!l->req || l->held_only) {
			/* a claim for runs takes the place of the claim for cancels
			 * only; while a carried claim covers the freed slot, that one
			 * stays (aborting it cost a connection on both sides per run) */
			claim_for_cancels_stop(l);
			q = claim_send(w, l, wfs, want - reserved);
		} else if (ahead_allowed(w) && (l = lane_ahead(w)))
			q = claim_send(w, l, wfs, want - reserved);
		else
			q = 0;
		if (q < 0)
			claim_send_failed(w, q);
	}
	strv_free(wfs);
}

/* A claim per workflow (drivers without DRV_CAP_MULTI_WORKFLOW): the free
 * slots not yet promised to a claim in flight are shared among the claimable
 * workflows without one, rounded up from the first, and the first rotates. */
static void claim_kick_lanes(struct claimer *w)
{
	const struct conf *c = claimer_conf(w);
	unsigned slots = free_slots(w), reserved = lanes_reserved(w), avail, n = 0;
	_cleanup_free_ const struct conf_workflow **cand = NULL;

	avail = slots > reserved ? slots - reserved : 0;
	if (avail == 0 || !(cand = calloc(c->n_workflows + 1, sizeof(*cand))))
		return;
	for (size_t i = 0; i < c->n_workflows; i++) {
		const struct conf_workflow *wf = &c->workflows[i];
		struct claim_lane *l = lane_get(w, wf->name);

		if (l && !l->req && workflow_open(w, wf->name) && wf_free_slots(w, wf) > 0)
			cand[n++] = wf;
	}
	for (unsigned k = 0, first = n ? w->lane_rr++ % n : 0; k < n && avail > 0; k++) {
		const struct conf_workflow *wf = cand[(first + k) % n];
		unsigned give = MIN((avail + (n - k) - 1) / (n - k), wf_free_slots(w, wf));
		char *one[] = {wf->name, NULL};
		int q;

		if (give == 0)
			continue;
		q = claim_send(w, lane_get(w, wf->name), one, give);
		if (q < 0) {
			claim_send_failed(w, q);
			return;
		}
		avail -= give;
	}
}

/* ---- claims carried by completions (DRV_CAP_COMPLETE_CLAIM) ---- */

static void carry_closed(struct claim_lane *l)
{
	if (l->cl->carry_open == l)
		l->cl->carry_open = NULL;
}

static void carried_end(struct claim_lane *l)
{
	struct claimer *w = l->cl;
	bool finishing = l->finishing;

	carry_closed(l);
	l->carried = false;
	l->finishing = false;
	l->max_runs = 0;
	claim_later(w, 0);
	if (finishing)
		w->p.ops->idle(w->p.host);
}

static void on_carried(struct drv_claim_answer *ans, void *userdata)
{
	struct claim_lane *l = userdata;
	struct claimer *w = l->cl;

	if (ans->unsupported && !w->carry_off) {
		w->carry_off = true;
		log_info("the API does not take claims in completions (protocol v1 without "
		         "\"next\"): claiming apart");
	}
	if (ans->not_claimed) {
		l->repeat = false;
		carried_end(l);
		return;
	}
	carry_closed(l);
	l->carried = false;
	/* it named no held leases: its answer says nothing of cancel events */
	ans->has_cancels = w->cancels_known;
	on_claim(ans, l);
	/* the long poll may not be out (every slot was busy): look again */
	if (ans->a.verdict == DRV_OK && ans->n_runs == 0)
		claim_later(w, 0);
}

/* The slots free once r (about to report) has left its slot, less those the
 * other runs shipping their logs keep for their own completions. */
static unsigned free_slots_after(const struct claimer *w, const struct run *r)
{
	const struct run_table *t = w->p.table;
	bool leaves = run_holds_slot(r->state) && t->running > 0;
	unsigned slots = slots_free(w, t->running - leaves, t->reporting + leaves, t->n - t->ready);
	unsigned others = t->flushing - (r->state == RUN_FLUSHING && t->flushing > 0);

	return (slots > others ? slots - others : 0) + ready_room(w);
}

static bool carry_allowed(const struct claimer *w)
{
	drv_t *d = w->p.runs->drv;

	return drv_has(d, DRV_CAP_COMPLETE_CLAIM) && drv_has(d, DRV_CAP_MULTI_WORKFLOW) &&
	       drv_has(d, DRV_CAP_RELEASE) && drv_ops(d)->complete_claim && !w->carry_off &&
	       !w->in_arrival && w->p.ops->running(w->p.host);
}

/* The claim a carried lane sends: no long poll, no held leases. */
static struct drv_claim carried_claim(const struct claimer *w, struct claim_lane *l,
                                      char *const *wfs, unsigned max_runs)
{
	const struct conf *c = claimer_conf(w);

	return (struct drv_claim){
	    .max_runs = max_runs,
	    .workflows = wfs,
	    .tags = c->worker.tags,
	    .lease_ttl_s = (unsigned)(c->worker.lease_ttl / USEC_PER_SEC),
	    .timeout = c->api.request_timeout,
	    .max_input = c->worker.max_input_bytes,
	    .repeat = l->repeat,
	    .claim_id = l->claim_id,
	};
}

/* The slots more a completion frees go to the carried claim whose
 * completion has not gone yet (one claim for the completions of one
 * request), when it names the same workflows. */
static bool carry_extend(struct claimer *w, char *const *wfs, unsigned more)
{
	struct claim_lane *l = w->carry_open;
	drv_t *d = w->p.runs->drv;
	unsigned n = l ? l->max_runs + more : 0;

	/* past its patience its slots count as free: they are in more already */
	if (!l || !l->carried || ev_now(w->p.runs->ev) - l->sent_at >= CARRY_PATIENCE ||
	    !drv_ops(d)->complete_claim_extend || n > CLAIM_MAX_RUNS ||
	    !strv_equal(wfs, w->carry_wfs))
		return false;
	if (drv_ops(d)->complete_claim_extend(d, l, n) < 0) {
		w->carry_open = NULL; /* it went: the next carried claim is a new one */
		return false;
	}
	l->max_runs = n;
	return true;
}

/* l carries a claim for wfs from now on: the one later completions extend. */
static void carry_opened(struct claimer *w, struct claim_lane *l, char **wfs)
{
	strv_free(w->carry_wfs);
	w->carry_wfs = wfs;
	w->carry_open = l;
}

int claim_carry(struct claimer *w, const struct run *r, claim_carry_send_fn send, void *ctx)
{
	unsigned slots, room = 0, want, reserved;
	struct claim_lane *l;
	struct drv_claim rq;
	char **wfs;
	int q;

	if (!carry_allowed(w) || (slots = free_slots_after(w, r)) == 0)
		return 0;
	wfs = claimable_workflows(w, &room);
	want = MIN(slots, room);
	reserved = lanes_reserved(w);
	if (wfs && wfs[0] && want > reserved && carry_extend(w, wfs, want - reserved)) {
		strv_free(wfs);
		return 0; /* this completion goes without a claim of its own */
	}
	l = wfs && wfs[0] && want > reserved ? lane_repeat(w) : NULL;
	if (!l && wfs && wfs[0] && want > reserved)
		l = lane_ahead(w);
	if (!l) {
		strv_free(wfs);
		return 0;
	}
	rq = carried_claim(w, l, wfs, want - reserved);
	q = send(&rq, on_carried, l, ctx);
	if (q < 0) {
		strv_free(wfs);
		return q;
	}
	carry_opened(w, l, wfs);
	l->carried = true;
	l->max_runs = rq.max_runs;
	l->repeat = true;
	l->sent_at = ev_now(w->p.runs->ev);
	if (!ev_timer_armed(w->carry_timer))
		ev_timer_arm(w->carry_timer, CARRY_PATIENCE);
	return 1;
}

void claim_carry_dropped(struct claimer *w, void *lane)
{
	struct claim_lane *l = lane;

	(void)w;
	/* no answer: the repeat asks for what it may have been granted */
	carried_end(l);
}

static enum run_event start_or_wait(struct claimer *w, struct run *r);

/* The oldest run claimed ahead whose workflow has room, or NULL. */
static struct run *ready_next(struct claimer *w)
{
	for (struct run *r = w->p.table->ready_head; r; r = r->ready_next)
		if (!r->wf || wf_free_slots(w, r->wf) > 0)
			return r;
	return NULL;
}

/* Runs claimed ahead whose workflow's breaker opened while they waited go
 * back, as those a claim brings for a blocked workflow do. */
static void release_blocked_ready(struct claimer *w)
{
	struct run *r, *next;

	for (r = w->p.table->ready_head; r; r = next) {
		next = r->ready_next;
		if (workflow_open(w, r->workflow))
			continue;
		r->release_reason = DRV_RELEASE_BLOCKED_WORKFLOW;
		run_dispatch(r, RE_RELEASE);
	}
}

/* Slots that came free go to the runs claimed ahead, oldest first; a slot
 * seen free lets runs be claimed ahead again. */
static void start_ready(struct claimer *w)
{
	const struct run_table *t = w->p.table;
	unsigned slots = w->p.ops->slots(w->p.host);
	struct run *r;

	if (t->running < slots)
		w->ready_idle = false;
	/* held for the host's trouble: they wait, at most prefetch_hold */
	if (!t->ready || w->hold_why[0] || !w->p.ops->running(w->p.host) ||
	    !w->p.ops->may_start(w->p.host))
		return;
	w->in_arrival = true; /* no claim from inside a run's transition */
	release_blocked_ready(w);
	for (unsigned n = t->ready;
	     n > 0 && t->running < slots && !w->hold_why[0] && (r = ready_next(w)); n--) {
		snprintf(r->note, sizeof(r->note), "a slot came free");
		run_dispatch(r, start_or_wait(w, r));
	}
	w->in_arrival = false;
}

void claim_ready_expired(struct claimer *w)
{
	w->ready_idle = true;
}

void claim_kick(struct claimer *w)
{
	if (w->in_arrival)
		return;
	start_ready(w);
	if (!w->p.ops->running(w->p.host) || ev_timer_armed(w->timer))
		return;
	if (drv_has(w->p.runs->drv, DRV_CAP_MULTI_WORKFLOW))
		claim_kick_one(w);
	else
		claim_kick_lanes(w);
}

static void on_claim_cancel(const struct drv_answer *a, void *userdata)
{
	struct claimer *w = userdata;

	w->claim_cancels--;
	if (a->verdict != DRV_OK)
		log_warning("claim cancel not confirmed (%s); any run it held returns to the "
			    "queue when its lease expires",
			    a->detail);
	w->p.ops->idle(w->p.host);
}

/* An API that cannot cancel a claim but takes runs back: a claim in flight is
 * left to end (the driver bounds its long poll), and what it brings arrives
 * while we are not running, so it is released at once.  Dropping it instead
 * would leave the runs the server hands to it stranded until the API's own
 * timeout gives them to someone else. */
static bool claim_finish_instead(struct claimer *w, const struct claim_lane *l)
{
	drv_t *d = w->p.runs->drv;

	return (l->req || l->carried) && !l->held_only &&
	       (l->ahead || !drv_has(d, DRV_CAP_CLAIM_CANCEL)) && drv_has(d, DRV_CAP_RELEASE);
}

void claim_stop(struct claimer *w)
{
	bool open = false;
	unsigned finishing = 0;

	ev_timer_disarm(w->timer);
	for (size_t i = 0; i < w->n_lanes; i++) {
		struct claim_lane *l = w->lanes[i];

		if (l->finishing || claim_finish_instead(w, l)) {
			finishing += !l->finishing;
			l->finishing = true;
			continue;
		}
		/* a claim for cancels only is granted nothing: no cancel on the server;
		 * a claim ahead's id is not the one claim_cancel cancels */
		open = open || (!l->ahead && ((l->req && !l->held_only) || l->repeat));
		drv_cancel(l->req);
		l->req = NULL;
		l->held_only = false;
		l->repeat = false;
		l->max_runs = 0;
	}
	if (finishing)
		log_info("%u claim%s in flight left to end (a claim ahead, or the API cannot "
			 "cancel a claim); what %s brings is given back at once",
			 finishing, finishing == 1 ? "" : "s", finishing == 1 ? "it" : "they");
	/* the server may have granted runs to the claim whose answer we dropped */
	if (!open || !drv_has(w->p.runs->drv, DRV_CAP_CLAIM_CANCEL) ||
	    drv_ops(w->p.runs->drv)->claim_cancel(w->p.runs->drv, on_claim_cancel, w, NULL) < 0)
		return;
	w->claim_cancels++;
}

/* What to do with one run the API handed us. */
static enum run_event triage(struct claimer *w, struct run *r)
{
	if (r->reject_reason)
		return RE_REJECT;
	if (!w->p.ops->running(w->p.host)) {
		r->release_reason = DRV_RELEASE_DRAINING;
		return RE_RELEASE;
	}
	if (!r->wf) {
		r->release_reason = DRV_RELEASE_UNSUPPORTED_WORKFLOW;
		return RE_RELEASE;
	}
	if (!workflow_open(w, r->workflow)) {
		r->release_reason = DRV_RELEASE_BLOCKED_WORKFLOW;
		return RE_RELEASE;
	}
	if (r->wf->concurrency && wf_in_use(w, r->workflow) > r->wf->concurrency) {
		/* the API handed more of one workflow than its concurrency: give the
		 * rest back; our next claim leaves the workflow out */
		r->release_reason = DRV_RELEASE_BLOCKED_WORKFLOW;
		return RE_RELEASE;
	}
	if (w->hold_why[0] || w->p.table->running > w->p.ops->slots(w->p.host)) {
		/* claimed ahead of a free slot, or while this host cannot start
		 * runs (claim_host_trouble): it waits, at most prefetch_hold */
		if (prefetch_on(w) && w->p.table->ready < claimer_conf(w)->worker.prefetch)
			return RE_READY;
		/* more than we asked for (a carried claim answered past its
		 * patience, a slot since taken by a claim ahead): not ours to run */
		r->release_reason = DRV_RELEASE_NO_SLOT;
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
static struct run *find_busy(struct claimer *w, const struct run *r)
{
	for (struct run *o = run_table_find(w->p.table, r->id); o;
	     o = run_table_find_next(o, r->id))
		if (o != r && (o->state == RUN_RUNNING || o->state == RUN_KILLING))
			return o;
	return NULL;
}

/* Another lease of this run id that we still think is ours. */
static struct run *find_older(struct claimer *w, const struct run *r)
{
	for (struct run *o = run_table_find(w->p.table, r->id); o;
	     o = run_table_find_next(o, r->id))
		if (o != r && !o->lost && o->state != RUN_DONE)
			return o;
	return NULL;
}

/* The same lease delivered twice (a confused API): the copy we hold is it. */
static bool lease_held(struct claimer *w, const struct drv_grant *g)
{
	if (!g->id || !g->lease_key)
		return false;
	for (struct run *o = run_table_find(w->p.table, g->id); o;
	     o = run_table_find_next(o, g->id))
		if (streq_ptr(o->lease_key, g->lease_key))
			return true;
	return false;
}

/* The API granted r's run again: every older lease of it is over (the server
 * holds one lease per run), so its execution stops as on any lease loss. */
static void supersede_older(struct claimer *w, struct run *r)
{
	struct run *o;

	for (unsigned n = w->p.table->n; n > 0 && (o = find_older(w, r)); n--) {
		struct log_fields f = run_fields(o);

		log_emit(LOG_WARNING, &f,
			 "lease lost (the API granted the run again, attempt %u): stopping the "
			 "older execution, nothing more is written",
			 r->attempt);
		metric_add(w->p.runs->m.leases_lost, 1);
		run_dispatch(o, RE_LEASE_LOST);
	}
}

/* Start r now, or make it wait for the older execution of its id. */
static enum run_event start_or_wait(struct claimer *w, struct run *r)
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

void claim_run_unblocked(struct claimer *w, const char *id)
{
	struct run *r;

	if (!w->p.ops->may_start(w->p.host)) /* hard stop released the waiters */
		return;
	for (r = run_table_find(w->p.table, id); r; r = run_table_find_next(r, id))
		if (r->state == RUN_WAITING)
			break;
	if (!r || find_busy(w, r))
		return;
	snprintf(r->note, sizeof(r->note), "the previous execution has ended");
	run_dispatch(r, triage(w, r));
}

static void claim_runs_arrived(struct claimer *w, struct drv_claim_answer *resp, usec_t sent_at)
{
	w->in_arrival = true;
	for (size_t i = 0; i < resp->n_runs; i++) {
		struct drv_grant *pr = &resp->runs[i];
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
		r = run_new(w->p.runs, w->p.ops->conf(w->p.host), pr, sent_at);
		if (!r) {
			log_error("out of memory taking run %s; it returns to the queue when its "
				  "lease expires",
				  pr->id ? pr->id : "?");
			continue;
		}
		w->p.ops->add(w->p.host, r);
		supersede_older(w, r);
		ev = triage(w, r);
		run_dispatch(r, ev == RE_START ? start_or_wait(w, r) : ev);
	}
	w->in_arrival = false;
}

static void on_timer(ev_timer_t *t, void *userdata)
{
	claim_kick(userdata);
}

/* The oldest carried claim in flight ran out of patience: its slot may be
 * claimed apart; wait for the next one's. */
static void on_carry_timer(ev_timer_t *t, void *userdata)
{
	struct claimer *w = userdata;
	usec_t now = ev_now(w->p.runs->ev), next = USEC_INFINITY;

	for (size_t i = 0; i < w->n_lanes; i++) {
		const struct claim_lane *l = w->lanes[i];

		if (l->carried && now - l->sent_at < CARRY_PATIENCE)
			next = MIN(next, l->sent_at + CARRY_PATIENCE - now);
	}
	if (next != USEC_INFINITY)
		ev_timer_arm(t, next);
	claim_kick(w);
}

/* ---- the host's trouble ---- */

static void on_hold_timer(ev_timer_t *t, void *userdata)
{
	struct claimer *w = userdata;

	(void)t;
	w->hold_why[0] = '\0';
	claim_kick(w);
}

void claim_host_trouble(struct claimer *w, const char *why)
{
	usec_t hold;
	char d[TIME_DURATION_MAX];

	if (!why) {
		if (w->hold_streak > 0)
			log_notice("runs start again, after %u hold%s for this host's trouble",
			           w->hold_streak, w->hold_streak == 1 ? "" : "s");
		w->hold_streak = 0;
		return;
	}
	if (w->hold_why[0]) /* held already: one more of the same batch */
		return;
	hold = MIN(HOLD_BASE << MIN(w->hold_streak, 6u), HOLD_CAP);
	w->hold_streak++;
	time_format_duration(d, sizeof(d), hold);
	snprintf(w->hold_why, sizeof(w->hold_why),
	         "this host cannot start runs (%s): no claims for %s", why, d);
	log_warning("%s", w->hold_why);
	ev_timer_arm(w->hold_timer, hold);
}

const char *claimer_hold(const struct claimer *cl)
{
	return cl->hold_why[0] ? cl->hold_why : NULL;
}

int claimer_new(const struct claimer_params *p, struct claimer **ret)
{
	struct claimer *cl = calloc(1, sizeof(*cl));
	int q;

	if (!cl)
		return -ENOMEM;
	cl->p = *p;
	cl->queue_depth = -1;
	q = ev_timer_add(p->runs->ev, USEC_INFINITY, on_timer, cl, &cl->timer);
	if (q >= 0)
		q = ev_timer_add(p->runs->ev, USEC_INFINITY, on_carry_timer, cl, &cl->carry_timer);
	if (q >= 0)
		q = ev_timer_add(p->runs->ev, USEC_INFINITY, on_hold_timer, cl, &cl->hold_timer);
	if (q < 0) {
		ev_timer_del(cl->timer);
		ev_timer_del(cl->carry_timer);
		free(cl);
		return q;
	}
	*ret = cl;
	return 0;
}

struct claimer *claimer_free(struct claimer *cl)
{
	if (!cl)
		return NULL;
	for (size_t i = 0; i < cl->n_lanes; i++) {
		drv_cancel(cl->lanes[i]->req);
		free(cl->lanes[i]->workflow);
		free(cl->lanes[i]);
	}
	free(cl->lanes);
	ev_timer_del(cl->timer);
	ev_timer_del(cl->carry_timer);
	ev_timer_del(cl->hold_timer);
	strv_free(cl->carry_wfs);
	free(cl);
	return NULL;
}

bool claimer_busy(const struct claimer *cl)
{
	for (size_t i = 0; i < cl->n_lanes; i++)
		if (cl->lanes[i]->finishing)
			return true;
	return cl->claim_cancels > 0;
}

const char *claimer_error(const struct claimer *cl)
{
	return cl->claim_error[0] ? cl->claim_error : NULL;
}

long claimer_queue_depth(const struct claimer *cl)
{
	return cl->queue_depth;
}
