/* Requests of one kind asked for together go out as one (protocol v1
 * additions, docs/protocol.md):
 *
 * - renewals asked for in one loop turn: POST /v1/leases/renew at the turn's
 *   end;
 * - completions: POST /v1/completions at the turn's end, or, while
 *   COMPLETE_IN_FLIGHT such requests await their answers, when one of them
 *   is answered: the completions that came meanwhile go together then.
 *
 * Each caller keeps its own operation (its drv_req, cancellable alone) and is
 * answered from its entry, exactly as its single request would have been.  A
 * server without the batch answers 404: the driver says so once and sends
 * one request per operation from then on. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log/log.h"
#include "proto/drv_native-int.h"
#include "proto/json_scan.h"
#include "proto/proto.h"
#include "util/macro.h"
#include "util/strutil.h"

/* Completion requests awaiting their answers before the next waits for one,
 * and how long it waits at most: a slow answer delays the others by no more. */
#define COMPLETE_IN_FLIGHT 1
#define COMPLETE_HOLD (10 * USEC_PER_MSEC)
/* A completion body larger than this goes alone (a big result file). */
#define COMPLETE_ENTRY_MAX (32u << 10)
/* The most a batch of completions holds, bodies summed. */
#define COMPLETE_BATCH_BYTES (512u << 10)
/* An entry's answer beyond its single answer: the id and the spacing. */
#define COMPLETE_ENTRY_OVERHEAD (V1_ID_MAX + 64u)

struct batch {
	enum batch_type t;
	drv_t *d;
	drv_req_t **items; /* NULL once cancelled or answered */
	size_t n, live, max;
	unsigned ttl_s;     /* renewals: every one of the batch's */
	usec_t timeout;     /* renewals: the shortest asked */
	bool fresh;         /* renewals: one asked for a new connection */
	size_t bytes;       /* completions: their bodies */
	bool deferred;      /* batch_send is queued with ev_defer */
	bool held_enough;   /* waited COMPLETE_HOLD: goes whatever is in flight */
	bool sent;          /* no longer open */
	bool answering;     /* its answer is being handed out: items only leave */
	drv_req_t *carrier; /* the HTTP request, once sent */
	char **sent_ids;    /* the ids asked, in order: items[0..n) once sent */
};

static const char *const batch_path[_BATCH_TYPE_MAX] = {"/v1/leases/renew", "/v1/completions"};
static const char *const batch_label[_BATCH_TYPE_MAX] = {"leases", "completions"};
static const char *const batch_what[_BATCH_TYPE_MAX] = {"renew leases", "complete runs"};

static void batch_send(void *userdata);

static struct native *native_of(const struct batch *b)
{
	return b->d->priv;
}

/* b is no longer the batch requests join (sent, or gone). */
static void batch_unopen(struct batch *b)
{
	struct native *n = native_of(b);

	if (n->open[b->t] != b)
		return;
	n->open[b->t] = NULL;
	if (n->hold && b->t == BATCH_COMPLETE)
		ev_timer_disarm(n->hold); /* it bounded this one's wait */
}

static void batch_dispose(struct batch *b)
{
	batch_unopen(b);
	strv_free(b->sent_ids);
	free(b->items);
	free(b);
}

/* Send the open batch of type t at the turn's end (once). */
static void batch_defer(struct batch *b)
{
	if (b->deferred || b->sent)
		return;
	b->deferred = ev_defer(b->d->ev, batch_send, b) >= 0;
	if (!b->deferred)
		log_warning("cannot queue a batch request: %s", strerror(ENOMEM));
}

/* A request of type t was answered or given up: the open batch may go. */
static void batch_kick(drv_t *d, enum batch_type t)
{
	struct native *n = d->priv;

	n->in_flight[t]--;
	if (n->open[t])
		batch_defer(n->open[t]);
}

static void batch_free(struct batch *b)
{
	batch_unopen(b);
	if (b->deferred)
		ev_defer_cancel(b->d->ev, batch_send, b);
	if (b->carrier) {
		drv_cancel(b->carrier);
		batch_kick(b->d, b->t);
	}
	batch_dispose(b);
}

/* An item leaves its batch (answered, cancelled or sent alone). */
static void item_detach(struct batch_item *it)
{
	struct batch *b = it->b;

	if (!b)
		return;
	it->b = NULL;
	b->items[it->idx] = NULL;
	b->live--;
	if (b->live == 0 && !b->answering)
		batch_free(b); /* every request in it was cancelled */
}

void batch_item_free(void *state)
{
	struct batch_item *it = state;

	item_detach(it);
	free(it->body);
	free(it);
}

static struct batch *batch_new(drv_t *d, enum batch_type t)
{
	struct native *n = d->priv;
	struct batch *b = calloc(1, sizeof(*b));
	size_t max = t == BATCH_RENEW ? V1_RENEW_MAX : V1_COMPLETE_MAX;

	if (!b || !(b->items = calloc(max, sizeof(*b->items)))) {
		free(b);
		return NULL;
	}
	b->t = t;
	b->d = d;
	b->max = max;
	b->timeout = USEC_INFINITY;
	n->open[t] = b;
	batch_defer(b);
	if (!b->deferred) {
		batch_free(b);
		return NULL;
	}
	return b;
}

/* The open batch of type t, or a new one when it cannot take the next item
 * (full, or, for renewals, another ttl): the old one goes all the same. */
static struct batch *batch_for(drv_t *d, enum batch_type t, unsigned ttl_s, size_t bytes)
{
	struct native *n = d->priv;
	struct batch *b = n->open[t];

	if (b && b->n < b->max && b->ttl_s == ttl_s && b->bytes + bytes <= COMPLETE_BATCH_BYTES)
		return b;
	if (b) {
		batch_unopen(b); /* not parked any more: batch_send sends it */
		batch_defer(b);
	}
	b = batch_new(d, t);
	if (b)
		b->ttl_s = ttl_s;
	return b;
}

static void item_add(struct batch *b, drv_req_t *rq)
{
	struct batch_item *it = rq->state;

	it->b = b;
	it->idx = b->n;
	b->items[b->n++] = rq;
	b->live++;
}

int batch_renew_join(drv_t *d, drv_req_t *rq, usec_t timeout, bool fresh)
{
	struct batch_item *it = rq->state;
	struct batch *b = batch_for(d, BATCH_RENEW, it->ttl_s, 0);

	if (!b)
		return -ENOMEM;
	item_add(b, rq);
	b->timeout = MIN(b->timeout, timeout ? timeout : d->timeout);
	b->fresh = b->fresh || fresh;
	return 0;
}

int batch_complete_join(drv_t *d, drv_req_t *rq)
{
	struct batch_item *it = rq->state;
	size_t len = strlen(it->body);
	struct batch *b;

	if (len > COMPLETE_ENTRY_MAX)
		return 1;
	b = batch_for(d, BATCH_COMPLETE, 0, len);
	if (!b)
		return -ENOMEM;
	item_add(b, rq);
	b->bytes += len;
	return 0;
}

drv_req_t *batch_complete_waiting(drv_t *d, bool (*match)(const drv_req_t *rq, const void *key),
                                  const void *key)
{
	struct native *n = d->priv;
	struct batch *b = n->open[BATCH_COMPLETE];

	for (size_t i = 0; b && i < b->n; i++)
		if (b->items[i] && match(b->items[i], key))
			return b->items[i];
	return NULL;
}

void batch_close_all(drv_t *d)
{
	struct native *n = d->priv;

	/* their requests were all cancelled with their runs */
	for (size_t t = 0; t < _BATCH_TYPE_MAX; t++)
		if (n->open[t])
			batch_free(n->open[t]);
	n->hold = ev_timer_del(n->hold);
}

/* ---------------------------------------------------------------- answers */

/* The item at i leaves the batch, to be answered by its own request's
 * reading of resp. */
static void item_answer_http(drv_req_t *rq, const struct http_response *resp)
{
	item_detach(rq->state);
	rq->on_http(rq, resp);
}

static void item_answer(drv_req_t *rq, const struct drv_answer *a)
{
	item_detach(rq->state);
	drv_req_answer(rq, a);
}

/* An answer about the whole request (a transport error, 5xx, 429, 401, a
 * refusal): each item gets it, as its own request would have. */
static void items_answer_all(struct batch *b, const struct http_response *resp)
{
	struct drv_answer a;

	if (!drv_answer_common(resp, &a))
		a.verdict = DRV_RETRY; /* renewals: the local deadline decides */
	b->answering = true;
	for (size_t i = 0; i < b->n; i++)
		if (b->items[i] && b->t == BATCH_RENEW)
			item_answer(b->items[i], &a);
		else if (b->items[i])
			item_answer_http(b->items[i], resp);
	batch_dispose(b);
}

/* The items of a batch never sent, or whose request got no usable answer:
 * each as if its own request had failed so (error), to be resent. */
static void items_failed(struct batch *b, int error, const char *why)
{
	items_answer_all(b, &(struct http_response){.error = error, .error_message = why});
}

/* One entry per renewal asked, in order; a garbled answer leaves the local
 * deadline to decide, as for one renewal. */
static void renew_answers(struct batch *b, const struct http_response *resp)
{
	_cleanup_free_ struct proto_held *asked = calloc(b->n + 1, sizeof(*asked));
	_cleanup_free_ struct proto_renewed *got = calloc(b->n + 1, sizeof(*got));
	struct drv_answer common;
	bool ok;

	drv_answer_common(resp, &common);
	for (size_t i = 0; asked && i < b->n; i++)
		asked[i].id = b->sent_ids[i];
	ok = asked && got &&
	     proto_renew_batch_parse(resp->body, resp->body_len, asked, b->n, got) == 0;
	b->answering = true;
	for (size_t i = 0; i < b->n; i++) {
		struct drv_answer a = common;

		if (!b->items[i])
			continue;
		if (!ok) {
			a.verdict = DRV_RETRY;
			snprintf(a.detail, sizeof(a.detail), "unusable batch renewal answer");
		} else if (got[i].lost) {
			a.verdict = DRV_LOST;
			snprintf(a.detail, sizeof(a.detail), "lease_lost");
		} else {
			a.verdict = DRV_OK;
			a.ttl_s = got[i].ttl_s;
			a.cancel = got[i].cancel;
		}
		item_answer(b->items[i], &a);
	}
	batch_dispose(b);
}

/* One entry per completion asked, in order, each read as the answer its
 * single request would have got (a 200 with it as the body, a 409 or a 404);
 * a garbled answer is no answer: every completion is sent again. */
static void complete_answers(struct batch *b, const struct http_response *resp)
{
	_cleanup_free_ struct proto_completed *got = calloc(b->n + 1, sizeof(*got));

	if (!got ||
	    proto_complete_batch_parse(resp->body, resp->body_len, b->sent_ids, b->n, got) < 0) {
		items_failed(b, -EBADMSG, "unusable answer to POST /v1/completions");
		return;
	}
	b->answering = true;
	for (size_t i = 0; i < b->n; i++) {
		_cleanup_free_ char *entry = NULL;
		struct http_response one = *resp;

		if (!b->items[i])
			continue;
		entry = strndup(got[i].entry.p, got[i].entry.len);
		if (!entry) {
			one =
			    (struct http_response){.error = -EIO, .error_message = "out of memory"};
		} else {
			one.status = got[i].status;
			one.body = entry;
			one.body_len = got[i].entry.len;
		}
		item_answer_http(b->items[i], &one);
	}
	batch_dispose(b);
}

/* ---------------------------------------------------------------- alone */

/* One item sent as its own request, the way a server without the batch
 * takes it. */
static int item_alone(drv_t *d, enum batch_type t, drv_req_t *rq, usec_t timeout, bool fresh)
{
	struct batch_item *it = rq->state;
	_cleanup_free_ char *body = NULL;
	struct post_args pa;
	int q;

	if (t == BATCH_COMPLETE)
		return native_post_keep(d,
		                        &(struct post_args){.path_fmt = "/v1/runs/%s/complete",
		                                            .id = it->run->id,
		                                            .body = it->body,
		                                            .label = "complete",
		                                            .max_response = it->max_response},
		                        rq, rq->ret);
	q = proto_lease_body(it->run->token, it->ttl_s, &body);
	if (q < 0)
		return q;
	pa = native_lease_args(it->run, body, timeout, fresh);
	return native_post_keep(d, &pa, rq, rq->ret);
}

/* Each item of b on its own; b is gone after. */
static void items_alone(struct batch *b)
{
	b->answering = true;
	for (size_t i = 0; i < b->n; i++) {
		drv_req_t *rq = b->items[i];
		int q;

		if (!rq)
			continue;
		item_detach(rq->state);
		q = item_alone(b->d, b->t, rq, b->timeout, b->fresh);
		if (q < 0) { /* as if its own request had failed: it is resent */
			char why[96];

			snprintf(why, sizeof(why), "cannot send: %s", strerror(-q));
			rq->on_http(rq,
			            &(struct http_response){.error = -EIO, .error_message = why});
		}
	}
	batch_dispose(b);
}

/* An older server: each request of the batch goes alone, now and from now on. */
static void batch_unsupported(struct batch *b)
{
	struct native *n = native_of(b);

	if (!n->off[b->t])
		log_info("the API does not %s in batches (protocol v1 without %s): one per "
		         "request",
		         batch_what[b->t], batch_path[b->t]);
	n->off[b->t] = true;
	items_alone(b);
}

static void on_batch(drv_req_t *carrier, const struct http_response *resp)
{
	struct batch *b = carrier->ud;
	drv_t *d = b->d;
	enum batch_type t = b->t;
	struct drv_answer a;
	bool common = drv_answer_common(resp, &a);

	b->carrier = NULL;
	if (!common && (resp->status == 404 || resp->status == 405))
		batch_unsupported(b);
	else if (!common && resp->status == 413 && t == BATCH_COMPLETE)
		items_alone(b); /* a server whose body cap is smaller than ours */
	else if (!common && resp->status == 200 && t == BATCH_RENEW)
		renew_answers(b, resp);
	else if (!common && resp->status == 200)
		complete_answers(b, resp);
	else
		items_answer_all(b, resp);
	drv_req_free(carrier);
	batch_kick(d, t);
}

/* ---------------------------------------------------------------- send */

/* The live items to the front, in order: what is sent is items[0..n). */
static int batch_compact(struct batch *b)
{
	size_t k = 0;

	for (size_t i = 0; i < b->n; i++)
		if (b->items[i]) {
			struct batch_item *it = b->items[i]->state;

			it->idx = k;
			b->items[k++] = b->items[i];
		}
	b->n = k;
	b->sent_ids = calloc(k + 1, sizeof(char *));
	if (!b->sent_ids)
		return -ENOMEM;
	for (size_t i = 0; i < k; i++) {
		struct batch_item *it = b->items[i]->state;

		if (!(b->sent_ids[i] = strdup(it->run->id)))
			return -ENOMEM;
	}
	return 0;
}

static int renew_body(const struct batch *b, char **ret)
{
	_cleanup_free_ struct proto_held *leases = calloc(b->n + 1, sizeof(*leases));

	if (!leases)
		return -ENOMEM;
	for (size_t i = 0; i < b->n; i++) {
		struct batch_item *it = b->items[i]->state;

		leases[i] = (struct proto_held){.id = it->run->id, .token = it->run->token};
	}
	return proto_renew_batch_body(native_of(b)->worker_id, b->ttl_s, leases, b->n, ret);
}

static int complete_body(const struct batch *b, char **ret, size_t *ret_max)
{
	_cleanup_free_ char **bodies = calloc(b->n + 1, sizeof(*bodies));

	if (!bodies)
		return -ENOMEM;
	*ret_max = SMALL_ANSWER;
	for (size_t i = 0; i < b->n; i++) {
		struct batch_item *it = b->items[i]->state;

		bodies[i] = it->body;
		*ret_max += it->max_response + COMPLETE_ENTRY_OVERHEAD;
	}
	return proto_complete_batch_body(b->sent_ids, bodies, b->n, ret);
}

/* Completions wait while COMPLETE_IN_FLIGHT requests of theirs are out,
 * unless this batch is full or no longer the open one. */
static bool batch_waits(const struct batch *b)
{
	const struct native *n = native_of(b);

	return b->t == BATCH_COMPLETE && n->in_flight[b->t] >= COMPLETE_IN_FLIGHT &&
	       n->open[b->t] == b && b->n < b->max && !b->held_enough;
}

static void on_hold(ev_timer_t *t, void *userdata)
{
	drv_t *d = userdata;
	struct native *n = d->priv;
	struct batch *b = n->open[BATCH_COMPLETE];

	(void)t;
	if (!b)
		return;
	b->held_enough = true;
	batch_defer(b);
}

/* The open batch of completions waits for an answer, COMPLETE_HOLD at most. */
static int batch_hold(struct batch *b)
{
	struct native *n = native_of(b);

	if (n->hold)
		return ev_timer_armed(n->hold) ? 0 : ev_timer_arm(n->hold, COMPLETE_HOLD);
	return ev_timer_add(b->d->ev, COMPLETE_HOLD, on_hold, b->d, &n->hold);
}

static void batch_send(void *userdata)
{
	struct batch *b = userdata;
	struct native *n = native_of(b);
	_cleanup_free_ char *body = NULL;
	drv_req_t *carrier = NULL;
	size_t max_response = 0;
	int q;

	b->deferred = false;
	if (b->live == 0) {
		batch_free(b);
		return;
	}
	if (n->off[b->t]) { /* the API said so since b was opened */
		items_alone(b);
		return;
	}
	if (batch_waits(b) && batch_hold(b) >= 0)
		return; /* batch_kick or on_hold sends it */
	b->sent = true;
	batch_unopen(b);
	q = batch_compact(b);
	if (q >= 0 && b->t == BATCH_RENEW) {
		q = renew_body(b, &body);
		max_response = proto_renew_batch_max_response(b->n);
	} else if (q >= 0)
		q = complete_body(b, &body, &max_response);
	if (q >= 0 && !(carrier = drv_req_new(b->d, on_batch, NULL, b)))
		q = -ENOMEM;
	if (q >= 0)
		q = native_post(b->d,
		                &(struct post_args){.path_fmt = batch_path[b->t],
		                                    .body = body,
		                                    .label = batch_label[b->t],
		                                    .timeout = b->t == BATCH_RENEW ? b->timeout : 0,
		                                    .max_response = max_response,
		                                    .fresh = b->fresh},
		                carrier, &b->carrier);
	if (q < 0) {
		char why[96];

		snprintf(why, sizeof(why), "cannot send: %s", strerror(-q));
		items_failed(b, -EIO, why);
		return;
	}
	n->in_flight[b->t]++;
}
