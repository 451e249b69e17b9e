/* Protocol v1 (docs/protocol.md) as a driver: the URLs, the bodies of
 * proto_native.c, and what each HTTP status means, in one place. */
#include <cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "log/log.h"
#include "proto/drv_native-int.h"
#include "proto/json_scan.h"
#include "proto/proto.h"
#include "util/macro.h"
#include "util/random.h"
#include "util/strutil.h"

#define CLAIM_CANCEL_TIMEOUT (10 * USEC_PER_SEC)

_Static_assert((int)DRV_SUCCEEDED == (int)PROTO_SUCCEEDED && (int)DRV_FAILED == (int)PROTO_FAILED &&
                   (int)DRV_CANCELLED == (int)PROTO_CANCELLED,
               "drv_status and proto_status agree");
_Static_assert((int)DRV_REASON_REJECTED == (int)PROTO_REASON_REJECTED &&
                   (int)DRV_REASON_SPAWN_ERROR == (int)PROTO_REASON_SPAWN_ERROR,
               "drv_reason and proto_reason agree");
_Static_assert((int)DRV_RELEASE_UNSUPPORTED_WORKFLOW == (int)PROTO_RELEASE_UNSUPPORTED_WORKFLOW &&
                   (int)DRV_RELEASE_NO_SLOT == (int)PROTO_RELEASE_NO_SLOT,
               "drv_release_reason and proto_release_reason agree");

static int native_init(drv_t *d, const struct conf *c)
{
	struct native *n = calloc(1, sizeof(*n));

	if (!n)
		return -ENOMEM;
	d->priv = n;
	n->worker_id = strdup(c->worker.id ? c->worker.id : "");
	return n->worker_id ? 0 : -ENOMEM;
}

static void native_done(drv_t *d)
{
	struct native *n = d->priv;

	if (n)
		batch_close_all(d);
	if (n)
		free(n->worker_id);
	free(n);
	d->priv = NULL;
}

static void native_run_free(drv_run_t *run)
{
	if (!run)
		return;
	if (run->token)
		explicit_bzero(run->token, strlen(run->token));
	free(run->token);
	free(run->id);
	free(run);
}

static drv_run_t *run_new(const char *id, char *token)
{
	drv_run_t *run = calloc(1, sizeof(*run));

	if (!run || !(run->id = strdup(id))) {
		free(run);
		return NULL;
	}
	run->token = token;
	return run;
}

static const char *native_run_lease_key(const drv_run_t *run)
{
	return run->token;
}

/* Send hr for rq; on success the operation is the caller's (*ret), on failure
 * it is freed and nothing runs. */
static int start(drv_req_t *rq, const struct http_request *hr, drv_req_t **ret)
{
	return drv_req_start(rq, drv_http_send(rq, hr), ret);
}

/* Send the POST pa for rq; on failure rq is still the caller's. */
int native_post_keep(drv_t *d, const struct post_args *pa, drv_req_t *rq, drv_req_t **ret)
{
	static const char *const headers[] = {"Content-Type: application/json", "Expect:", NULL};
	_cleanup_free_ char *url = NULL;
	int q = proto_url(d->base, pa->path_fmt, pa->id, &url);

	if (q >= 0)
		q = drv_http_send(
		    rq, &(struct http_request){.method = "POST",
		                               .url = url,
		                               .headers = headers,
		                               .body = pa->body,
		                               .body_len = pa->body ? strlen(pa->body) : 0,
		                               .timeout = pa->timeout,
		                               .max_response = pa->max_response ? pa->max_response
		                                                                : SMALL_ANSWER,
		                               .label = pa->label,
		                               .fresh_connect = pa->fresh});
	if (q < 0)
		return q;
	rq->ret = ret;
	if (ret)
		*ret = rq;
	return 0;
}

/* The same; on failure rq is freed and nothing runs. */
int native_post(drv_t *d, const struct post_args *pa, drv_req_t *rq, drv_req_t **ret)
{
	int q = native_post_keep(d, pa, rq, ret);

	if (q < 0)
		drv_req_free(rq);
	return q;
}

static bool lost(long status)
{
	return status == 409 || status == 404;
}

/* ---------------------------------------------------------------- claim */

struct claim_state {
	size_t max_input;
	size_t max_response;
};

static int grant_from(struct proto_run *pr, struct drv_grant *g)
{
	*g = (struct drv_grant){
	    .attempt = pr->attempt,
	    .ttl_s = pr->ttl_s,
	    .input_len = pr->input_len,
	    .timeout_s = pr->timeout_s,
	    .usable_for_reject = pr->usable_for_reject,
	};
	if (pr->id && pr->token && (!pr->invalid || pr->usable_for_reject)) {
		if (!(g->lease_key = strdup(pr->token)) ||
		    !(g->priv = run_new(pr->id, TAKE_PTR(pr->token))))
			return -ENOMEM;
	}
	g->id = TAKE_PTR(pr->id);
	g->workflow = TAKE_PTR(pr->workflow);
	g->input = TAKE_PTR(pr->input);
	g->invalid = TAKE_PTR(pr->invalid);
	return 0;
}

static void claim_ok(const struct claim_state *st, const char *body, size_t len,
                     struct drv_claim_answer *ans)
{
	struct proto_claim_resp cr;
	char *err = NULL;
	int q = proto_claim_parse(body, len, st->max_input, &cr, &err);

	if (q < 0) {
		ans->a.verdict = DRV_REFUSED;
		ans->malformed = true;
		snprintf(ans->a.detail, sizeof(ans->a.detail), "%s", err ? err : strerror(-q));
		free(err);
		return;
	}
	ans->runs = calloc(cr.n_runs + 1, sizeof(*ans->runs));
	for (size_t i = 0; ans->runs && i < cr.n_runs; i++)
		if (grant_from(&cr.runs[i], &ans->runs[ans->n_runs++]) < 0)
			break;
	ans->a.verdict = DRV_OK;
	ans->queue_depth = cr.queue_depth;
	ans->has_cancels = cr.has_cancels;
	ans->cancels = TAKE_PTR(cr.cancels);
	proto_claim_resp_done(&cr);
}

static void on_claim(drv_req_t *rq, const struct http_response *resp)
{
	struct drv_claim_answer ans = {.queue_depth = -1};
	char why[160];

	if (drv_answer_common(resp, &ans.a))
		;
	else if (resp->status == 200)
		claim_ok(rq->state, resp->body, resp->body_len, &ans);
	else if (resp->error == -EMSGSIZE) {
		ans.a.verdict = DRV_REFUSED;
		ans.too_large = true;
		snprintf(ans.a.detail, sizeof(ans.a.detail),
		         "%s; the cap is max_runs x (worker.max_input_bytes + %u) + %u bytes",
		         resp->error_message ? resp->error_message : "answer over its cap",
		         PROTO_RUN_OVERHEAD, PROTO_CLAIM_ENVELOPE);
	} else {
		/* 400, 422 and the like: our request is wrong */
		ans.a.verdict = DRV_REFUSED;
		snprintf(ans.a.detail, sizeof(ans.a.detail), "%s: %.*s",
		         drv_describe(resp, why, sizeof(why)), (int)MIN(resp->body_len, 300),
		         resp->body ? resp->body : "");
	}
	drv_req_claim_answer(rq, &ans);
}

static struct proto_held *held_of(const struct drv_claim *c)
{
	struct proto_held *h = calloc(c->n_held + 1, sizeof(*h));

	for (size_t i = 0; h && i < c->n_held; i++)
		h[i] = (struct proto_held){.id = c->held[i].id, .token = c->held[i].priv->token};
	return h;
}

/* The claim's id: the caller's buffer (a claim ahead) or the driver's; new
 * unless repeated.  A claim for no runs gets a throwaway one: nothing is
 * granted to it, it is never repeated nor cancelled. */
static int claim_req_body(struct native *n, const struct drv_claim *c, char **ret)
{
	_cleanup_free_ struct proto_held *held = held_of(c);
	char fresh[UUID_STRING_MAX];
	char *id = c->claim_id ? c->claim_id : n->claim_id;

	if (!held)
		return -ENOMEM;
	if (c->max_runs == 0)
		uuid_v7(fresh);
	else if (!c->repeat || !id[0])
		uuid_v7(id);
	return proto_claim_body(
	    &(struct proto_claim_req){.claim_id = c->max_runs ? id : fresh,
	                              .worker_id = n->worker_id,
	                              .max_runs = c->max_runs,
	                              .lease_ttl_s = c->lease_ttl_s,
	                              .wait_s = (unsigned)(c->wait / USEC_PER_SEC),
	                              .workflows = c->workflows,
	                              .tags = c->tags,
	                              .send_held = c->send_held,
	                              .held = held,
	                              .n_held = c->n_held},
	    ret);
}

static struct claim_state *claim_state_new(const struct drv_claim *c)
{
	struct claim_state *st = calloc(1, sizeof(*st));

	if (!st)
		return NULL;
	st->max_input = c->max_input;
	st->max_response =
	    c->max_response ? c->max_response : proto_claim_max_response(c->max_runs, c->max_input);
	return st;
}

static int native_claim(drv_t *d, const struct drv_claim *c, drv_claim_cb cb, void *ud,
                        drv_req_t **ret)
{
	_cleanup_free_ char *body = NULL;
	struct claim_state *st;
	drv_req_t *rq;
	int q;

	q = claim_req_body(d->priv, c, &body);
	if (q < 0)
		return q;
	rq = drv_req_new(d, on_claim, NULL, ud);
	st = claim_state_new(c);
	if (!rq || !st) {
		free(st);
		drv_req_free(rq);
		return -ENOMEM;
	}
	rq->claim_cb = cb;
	rq->state = st;
	rq->state_free = free;
	return native_post(d,
	                   &(struct post_args){.path_fmt = "/v1/claims",
	                                       .body = body,
	                                       .label = "claims",
	                                       .timeout = c->timeout,
	                                       .max_response = st->max_response},
	                   rq, ret);
}

static void on_simple(drv_req_t *rq, const struct http_response *resp)
{
	struct drv_answer a;

	if (!drv_answer_common(resp, &a))
		a.verdict = resp->status == 200  ? DRV_OK
		            : lost(resp->status) ? DRV_LOST
		                                 : DRV_REFUSED;
	drv_req_answer(rq, &a);
}

static int native_claim_cancel(drv_t *d, drv_cb cb, void *ud, drv_req_t **ret)
{
	struct native *n = d->priv;
	drv_req_t *rq;

	if (!n->claim_id[0])
		return -ENOENT;
	rq = drv_req_new(d, on_simple, cb, ud);
	if (!rq)
		return -ENOMEM;
	return native_post(d,
	                   &(struct post_args){.path_fmt = "/v1/claims/%s/cancel",
	                                       .id = n->claim_id,
	                                       .body = "{}",
	                                       .label = "claim_cancel",
	                                       .timeout = CLAIM_CANCEL_TIMEOUT},
	                   rq, ret);
}

/* ---------------------------------------------------------------- lease */

/* One renewal alone. */
struct post_args native_lease_args(const drv_run_t *run, const char *body, usec_t timeout,
                                   bool fresh)
{
	return (struct post_args){.path_fmt = "/v1/runs/%s/lease",
	                          .id = run->id,
	                          .body = body,
	                          .label = "lease",
	                          .timeout = timeout,
	                          .fresh = fresh};
}

void native_on_renew(drv_req_t *rq, const struct http_response *resp)
{
	struct drv_answer a;
	bool common = drv_answer_common(resp, &a);

	if (resp->status == 200 &&
	    proto_lease_parse(resp->body, resp->body_len, &a.ttl_s, &a.cancel) >= 0)
		a.verdict = DRV_OK;
	else if (lost(resp->status))
		a.verdict = DRV_LOST;
	else if (!common)
		a.verdict = DRV_RETRY; /* a garbled 200 too: the local deadline decides loss */
	drv_req_answer(rq, &a);
}

static bool native_renew_batching(const drv_t *d)
{
	const struct native *n = d->priv;

	return !n->off[BATCH_RENEW];
}

/* Into this turn's batch (drv_native_batch.c), or alone. */
static int native_renew(drv_t *d, drv_run_t *run, unsigned ttl_s, usec_t timeout, bool fresh,
                        drv_cb cb, void *ud, drv_req_t **ret)
{
	struct native *n = d->priv;
	drv_req_t *rq = drv_req_new_state(d, native_on_renew, cb, ud, sizeof(struct batch_item),
	                                  batch_item_free);
	struct batch_item *it = rq ? rq->state : NULL;
	_cleanup_free_ char *body = NULL;
	struct post_args pa;
	int q;

	if (!rq)
		return -ENOMEM;
	*it = (struct batch_item){.run = run, .ttl_s = ttl_s};
	if (!n->off[BATCH_RENEW] && batch_renew_join(d, rq, timeout, fresh) >= 0) {
		rq->ret = ret;
		if (ret)
			*ret = rq;
		return 0;
	}
	q = proto_lease_body(run->token, ttl_s, &body);
	if (q < 0) {
		drv_req_free(rq);
		return q;
	}
	pa = native_lease_args(run, body, timeout, fresh);
	return native_post(d, &pa, rq, ret);
}

/* ---------------------------------------------------------------- log */

static void on_log(drv_req_t *rq, const struct http_response *resp)
{
	struct drv_answer a;
	bool common = drv_answer_common(resp, &a);
	long s = resp->status;

	if (s == 202 || s == 200 || s == 416) {
		if (proto_log_length_parse(resp->body, resp->body_len, &a.length) < 0)
			a.verdict = DRV_RETRY; /* a garbled answer: as if none came */
		else {
			a.verdict = s == 416 ? DRV_RESYNC : DRV_OK;
			a.code = (unsigned)s;
		}
	} else if (lost(s))
		a.verdict = DRV_LOST;
	else if (s == 413)
		a.verdict = DRV_TOO_LARGE;
	else if (!common)
		a.verdict = DRV_REFUSED; /* 400 and the like: resending cannot help */
	drv_req_answer(rq, &a);
}

static int native_log_append(drv_t *d, drv_run_t *run, uint64_t offset, const void *data,
                             size_t len, usec_t timeout, drv_cb cb, void *ud, drv_req_t **ret)
{
	char range[96], lease[PROTO_TOKEN_MAX + 16];
	const char *headers[] = {"Content-Type: application/octet-stream", range, lease,
	                         "Expect:", NULL};
	_cleanup_free_ char *url = NULL;
	drv_req_t *rq;
	int q = proto_url(d->base, "/v1/runs/%s/log", run->id, &url);

	if (q < 0)
		return q;
	snprintf(range, sizeof(range), "Content-Range: bytes %" PRIu64 "-%" PRIu64 "/*", offset,
	         offset + len - 1);
	snprintf(lease, sizeof(lease), "Lease-Token: %s", run->token);
	if (!(rq = drv_req_new(d, on_log, cb, ud)))
		return -ENOMEM;
	q = start(rq,
	          &(struct http_request){.method = "PATCH",
	                                 .url = url,
	                                 .headers = headers,
	                                 .body = data,
	                                 .body_len = len,
	                                 .timeout = timeout,
	                                 .max_response = SMALL_ANSWER,
	                                 .label = "log"},
	          ret);
	explicit_bzero(lease, sizeof(lease));
	return q;
}

/* ---------------------------------------------------------------- complete */

static int native_complete_body(drv_t *d, drv_run_t *run, const struct drv_outcome *o, char **ret)
{
	struct proto_outcome po = {
	    .status = (enum proto_status)o->status,
	    .reason = (enum proto_reason)o->reason,
	    .has_exit_code = o->has_exit_code,
	    .exit_code = o->exit_code,
	    .signal = o->signal,
	    .retryable = o->retryable,
	    .error = o->error,
	    .duration_ms = o->duration_ms,
	    .log_length = o->log_length,
	    .output = o->output,
	};

	return proto_complete_body(run->token, &po, ret);
}

/* One classification serves the live completion and the spool's delivery;
 * *next: the answer's "next" member (a claim the completion carried). */
static void complete_verdict(const struct http_response *resp, struct drv_answer *a,
                             struct json_span *next)
{
	*next = (struct json_span){0};
	if (drv_answer_common(resp, a))
		;
	else if (resp->status == 200) {
		a->verdict = DRV_OK;
		if (proto_complete_parse(resp->body, resp->body_len, a->run_status,
		                         sizeof(a->run_status), next) < 0)
			a->run_status[0] = '\0';
	} else if (lost(resp->status))
		a->verdict = DRV_LOST;
	else
		a->verdict = DRV_REFUSED;
}

static void on_complete(drv_req_t *rq, const struct http_response *resp)
{
	struct drv_answer a;
	struct json_span next;

	complete_verdict(resp, &a, &next);
	drv_req_answer(rq, &a);
}

/* Into the completions waiting to go (drv_native_batch.c), or alone: rq's
 * state is its batch_item. */
static int complete_send(drv_t *d, drv_req_t *rq, drv_req_t **ret)
{
	struct native *n = d->priv;
	struct batch_item *it = rq->state;

	if (!n->off[BATCH_COMPLETE] && batch_complete_join(d, rq) == 0) {
		rq->ret = ret;
		if (ret)
			*ret = rq;
		return 0;
	}
	return native_post(d,
	                   &(struct post_args){.path_fmt = "/v1/runs/%s/complete",
	                                       .id = it->run->id,
	                                       .body = it->body,
	                                       .label = "complete",
	                                       .max_response = it->max_response},
	                   rq, ret);
}

static int native_complete(drv_t *d, drv_run_t *run, const char *body, drv_cb cb, void *ud,
                           drv_req_t **ret)
{
	drv_req_t *rq =
	    drv_req_new_state(d, on_complete, cb, ud, sizeof(struct batch_item), batch_item_free);
	struct batch_item *it = rq ? rq->state : NULL;

	if (!rq)
		return -ENOMEM;
	*it = (struct batch_item){.run = run, .body = strdup(body), .max_response = SMALL_ANSWER};
	if (!it->body) {
		drv_req_free(rq);
		return -ENOMEM;
	}
	return complete_send(d, rq, ret);
}

/* ------------------------------------------------ complete with a claim */

struct complete_claim_state {
	struct batch_item item; /* first: what a batch knows of it */
	struct claim_state claim;
	drv_claim_cb ncb;
	void *nud;
	char *done;       /* the completion's own body */
	char *claim_body; /* the claim it carries ("next") */
};

static void complete_claim_free(void *state)
{
	struct complete_claim_state *st = state;

	free(st->done);
	free(st->claim_body);
	batch_item_free(st);
}

/* What became of the claim a completion carried. */
static void next_answer(const struct complete_claim_state *st, const struct drv_answer *a,
                        const struct json_span *next, struct drv_claim_answer *ans)
{
	char code[64];

	ans->a = *a;
	if (a->verdict == DRV_RETRY) /* no answer: it may have been granted */
		return;
	ans->a.verdict = DRV_OK;
	if (a->verdict != DRV_OK)
		ans->not_claimed = true; /* the server claims only for a recorded completion */
	else if (!next->p)
		ans->not_claimed = ans->unsupported = true;
	else {
		claim_ok(&st->claim, next->p, next->len, ans);
		/* the server could not make the claim: an empty answer (protocol.md) */
		if (ans->a.verdict == DRV_OK && ans->n_runs == 0 &&
		    proto_claim_error(next->p, next->len, code, sizeof(code)) > 0)
			snprintf(ans->a.detail, sizeof(ans->a.detail), "the claim failed: %s",
			         code);
	}
}

static void on_complete_claim(drv_req_t *rq, const struct http_response *resp)
{
	const struct complete_claim_state *st = rq->state;
	struct drv_claim_answer ans = {.queue_depth = -1};
	struct drv_answer a;
	struct json_span next;

	if (resp->error == -EMSGSIZE) {
		/* the completion is sent again (plain, idempotent); the claim's runs,
		 * unread, return to the queue when their leases expire */
		a = (struct drv_answer){.verdict = DRV_RETRY, .error = resp->error};
		snprintf(a.detail, sizeof(a.detail), "answer over its cap");
		ans.a = a;
		ans.a.verdict = DRV_REFUSED;
		ans.too_large = true;
	} else {
		complete_verdict(resp, &a, &next);
		next_answer(st, &a, &next, &ans);
	}
	drv_req_complete_claim_answer(rq, &a, st->ncb, st->nud, &ans);
}

static int native_complete_claim(drv_t *d, drv_run_t *run, const char *body,
                                 const struct drv_claim *next, drv_cb cb, void *ud,
                                 drv_claim_cb ncb, void *nud, drv_req_t **ret)
{
	drv_req_t *rq = drv_req_new_state(d, on_complete_claim, cb, ud,
	                                  sizeof(struct complete_claim_state), complete_claim_free);
	struct complete_claim_state *st = rq ? rq->state : NULL;
	int q = rq ? claim_req_body(d->priv, next, &st->claim_body) : -ENOMEM;

	if (q >= 0 && !(st->done = strdup(body)))
		q = -ENOMEM;
	if (q >= 0)
		q = proto_complete_splice(body, st->claim_body, &st->item.body);
	if (q < 0) {
		drv_req_free(rq);
		return q;
	}
	st->item.run = run;
	st->claim.max_input = next->max_input;
	st->claim.max_response =
	    SMALL_ANSWER + proto_claim_max_response(next->max_runs, next->max_input);
	st->item.max_response = st->claim.max_response;
	st->ncb = ncb;
	st->nud = nud;
	return complete_send(d, rq, ret);
}

static int body_set_uint(char **body, const char *key, uint64_t value);

static bool carries(const drv_req_t *rq, const void *nud)
{
	const struct complete_claim_state *st = rq->state;

	return rq->on_http == on_complete_claim && st->nud == nud;
}

/* The claim (nud's) of a completion still waiting to go asks for max_runs. */
static int native_complete_claim_extend(drv_t *d, void *nud, unsigned max_runs)
{
	drv_req_t *rq = batch_complete_waiting(d, carries, nud);
	struct complete_claim_state *st = rq ? rq->state : NULL;
	char *both = NULL;
	int q;

	if (!st)
		return -EALREADY;
	q = body_set_uint(&st->claim_body, "\"max_runs\":", max_runs);
	if (q >= 0)
		q = proto_complete_splice(st->done, st->claim_body, &both);
	if (q < 0)
		return q;
	free(st->item.body);
	st->item.body = both;
	st->claim.max_response =
	    SMALL_ANSWER + proto_claim_max_response(max_runs, st->claim.max_input);
	st->item.max_response = st->claim.max_response;
	return 0;
}

/* A server older than the reason no_slot answers 400 to it: from then on
 * such runs go back as "draining", which every server knows, and this one is
 * retried by its run as any refused release. */
static void on_release_no_slot(drv_req_t *rq, const struct http_response *resp)
{
	struct native *n = rq->d->priv;

	if (resp->status == 400 && !n->no_slot_unknown) {
		n->no_slot_unknown = true;
		log_notice("the API refuses the release reason no_slot (400, an older server?): "
		           "runs without a slot go back as draining from now on");
	}
	on_simple(rq, resp);
}

static int native_release(drv_t *d, drv_run_t *run, enum drv_release_reason why, unsigned delay_s,
                          drv_cb cb, void *ud, drv_req_t **ret)
{
	struct native *n = d->priv;
	_cleanup_free_ char *body = NULL;
	drv_req_t *rq;
	int q;

	if (why == DRV_RELEASE_NO_SLOT && n->no_slot_unknown)
		why = DRV_RELEASE_DRAINING;
	q = proto_release_body(run->token, (enum proto_release_reason)why, delay_s, &body);
	if (q < 0)
		return q;
	if (!(rq = drv_req_new(d, why == DRV_RELEASE_NO_SLOT ? on_release_no_slot : on_simple, cb,
	                       ud)))
		return -ENOMEM;
	return native_post(
	    d,
	    &(struct post_args){
	        .path_fmt = "/v1/runs/%s/release", .id = run->id, .body = body, .label = "release"},
	    rq, ret);
}

/* The lease token is in the completion body: it fences the delivery. */
static int native_restore(drv_t *d, const char *run_id, const char *body, drv_run_t **ret)
{
	cJSON *j = cJSON_Parse(body);
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "token");
	char *token = cJSON_IsString(t) && t->valuestring[0] ? strdup(t->valuestring) : NULL;
	drv_run_t *run;

	cJSON_Delete(j);
	if (!token || !proto_valid_id(run_id)) {
		free(token);
		return -EBADMSG;
	}
	run = run_new(run_id, token);
	if (!run) {
		free(token);
		return -ENOMEM;
	}
	*ret = run;
	return 0;
}

/* The number after the first key in body (with its quotes and colon):
 * one that precedes every string that could hold it (proto_complete_body's
 * order; proto_claim_body's, whose strings before it are ids). */
static int body_set_uint(char **body, const char *key, uint64_t value)
{
	char *p = strstr(*body, key), *v, *end, *nb;
	char num[24];
	int n;

	if (!p)
		return -EBADMSG;
	v = p + strlen(key);
	end = v + strspn(v, "0123456789.e+-");
	n = snprintf(num, sizeof(num), "%" PRIu64, value);
	nb = malloc(strlen(*body) - (size_t)(end - v) + (size_t)n + 1);
	if (!nb)
		return -ENOMEM;
	memcpy(nb, *body, (size_t)(v - *body));
	memcpy(nb + (v - *body), num, (size_t)n);
	strcpy(nb + (v - *body) + n, end);
	free(*body);
	*body = nb;
	return 0;
}

static int native_body_set_log_length(char **body, uint64_t log_length)
{
	return body_set_uint(body, "\"log_length\":", log_length);
}

const struct drv_ops drv_native_ops = {
    .name = "native",
    .caps = DRV_CAP_LOG_OFFSETS | DRV_CAP_IDEMPOTENT_CLAIM | DRV_CAP_CLAIM_CANCEL |
            DRV_CAP_SERVER_CANCEL | DRV_CAP_SERVER_TTL | DRV_CAP_MULTI_WORKFLOW | DRV_CAP_RELEASE |
            DRV_CAP_LOG_LENGTH | DRV_CAP_COMPLETE_CLAIM,
    .init = native_init,
    .done = native_done,
    .claim = native_claim,
    .claim_cancel = native_claim_cancel,
    .renew = native_renew,
    .renew_batching = native_renew_batching,
    .log_append = native_log_append,
    .complete_body = native_complete_body,
    .complete = native_complete,
    .complete_claim = native_complete_claim,
    .complete_claim_extend = native_complete_claim_extend,
    .release = native_release,
    .restore = native_restore,
    .body_set_log_length = native_body_set_log_length,
    .run_free = native_run_free,
    .run_lease_key = native_run_lease_key,
};
