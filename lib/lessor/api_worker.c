/* The worker endpoints of protocol v1: claims (long poll), claim cancel,
 * lease renewal (one lease, or many at once), log append, complete (with
 * the claim of its "next"; one run, or many at once), release. */
#include "lessor/api-int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log/log.h"
#include "proto/v1.h"
#include "util/strutil.h"
#include "util/time.h"

/* ---- claims ---- */

struct claim_state {
	struct lessor_claim_req req;
	char **workflows; /* NULL = any */
	char **tags;
	char *workflows_json;
	char *tags_json;
	usec_t deadline;
	bool recorded;
	/* cancel events: the leases the worker holds ("held") */
	bool has_held;
	char **held_ids, **held_tokens;
	size_t n_held;
	/* a run handed over by an enqueue while parked: the claim it made for
	 * this call (handed_r < 0: the store error it met) */
	bool handed;
	int handed_r;
	struct lessor_claim_result handed_res;
};

static void claim_state_free(void *p)
{
	struct claim_state *cs = p;

	if (!cs)
		return;
	strv_free(cs->workflows);
	strv_free(cs->tags);
	free(cs->workflows_json);
	free(cs->tags_json);
	strv_free(cs->held_ids);
	strv_free(cs->held_tokens);
	lessor_claim_result_done(&cs->handed_res);
	free(cs);
}

/* c->msg, a message about a member ("'max_runs' must be ..."), as one about
 * that member of `within` ("'completions[3].next.max_runs' must be ..."). */
static void msg_within(lessor_call *c, const char *within)
{
	char msg[LESSOR_MSG_MAX];

	snprintf(msg, sizeof(msg), "'%s%s%.200s", within,
	         c->msg[0] == '\'' ? "." : "': ", c->msg[0] == '\'' ? c->msg + 1 : c->msg);
	memcpy(c->msg, msg, sizeof(msg));
}

/* "held": [{"id", "token"}, ...], the leases whose cancel the answer reports.
 * A server playing an older one (the "legacy" claims fault) ignores it. */
static int held_fields(lessor_call *c, const cJSON *j, struct claim_state *cs)
{
	const cJSON *h = cJSON_GetObjectItemCaseSensitive(j, "held"), *e;

	if (!h || cJSON_IsNull(h) || (c->fault_taken && c->fault.legacy))
		return 0;
	if (!cJSON_IsArray(h) || cJSON_GetArraySize(h) > V1_HELD_MAX) {
		snprintf(c->msg, LESSOR_MSG_MAX, "'held' must be an array of at most %d leases",
		         V1_HELD_MAX);
		return -EINVAL;
	}
	cs->held_ids = calloc(1, sizeof(char *));
	cs->held_tokens = calloc(1, sizeof(char *));
	if (!cs->held_ids || !cs->held_tokens)
		return -ENOMEM;
	cJSON_ArrayForEach(e, h)
	{
		const char *id, *token;
		int r;

		if ((r = lessor_field_str(e, "id", true, 0, v1_valid_id, &id, c->msg)) < 0 ||
		    (r = lessor_field_str(e, "token", true, 0, v1_valid_token, &token, c->msg)) < 0)
			return r;
		if (strv_extend(&cs->held_ids, id) < 0 || strv_extend(&cs->held_tokens, token) < 0)
			return -ENOMEM;
		cs->n_held++;
	}
	cs->has_held = true;
	return 0;
}

/* A completion's "next" claims at once: it neither waits nor names held
 * leases. */
static int embedded_fields(lessor_call *c, const cJSON *j, int64_t *ret_wait)
{
	const cJSON *held = cJSON_GetObjectItemCaseSensitive(j, "held");

	if (held && !cJSON_IsNull(held)) {
		snprintf(c->msg, LESSOR_MSG_MAX,
		         "'held' is not allowed: the claim of a completion does not wait for "
		         "cancels");
		return -EINVAL;
	}
	if (lessor_field_int(j, "wait_s", false, 0, 0, 0, ret_wait, c->msg) < 0) {
		snprintf(c->msg, LESSOR_MSG_MAX,
		         "'wait_s' must be 0 or absent: the claim of a completion does not wait");
		return -EINVAL;
	}
	return 0;
}

static int body_claim_fields(lessor_call *c, const cJSON *j, bool embedded, struct claim_state *cs,
                             int64_t *ret_wait)
{
	int64_t max_runs, ttl;
	int r;

	if ((r = embedded ? embedded_fields(c, j, ret_wait) : held_fields(c, j, cs)) < 0)
		return r;
	/* a claim for no runs only waits for cancel events */
	if ((r = lessor_field_str(j, "claim_id", true, 0, v1_valid_id, &cs->req.claim_id, c->msg)) <
	        0 ||
	    (r = lessor_field_str(j, "worker_id", true, 0, v1_valid_worker_id, &cs->req.worker_id,
	                          c->msg)) < 0 ||
	    (r = lessor_field_int(j, "max_runs", true, cs->has_held ? 0 : 1, V1_MAX_RUNS, 1,
	                          &max_runs, c->msg)) < 0 ||
	    (r = lessor_field_int(j, "lease_ttl_s", true, 1, V1_TTL_MAX, 0, &ttl, c->msg)) < 0 ||
	    (!embedded &&
	     (r = lessor_field_int(j, "wait_s", false, 0, V1_WAIT_MAX, 0, ret_wait, c->msg)) < 0) ||
	    (r = lessor_field_ids(j, "workflows", V1_CLAIM_WORKFLOWS_MAX, &cs->workflows, c->msg)) <
	        0 ||
	    (r = lessor_field_tags(j, "tags", &cs->tags, c->msg)) < 0)
		return r;
	cs->req.max_runs = (unsigned)max_runs;
	cs->req.ttl_s = (unsigned)ttl;
	return 0;
}

/* The claim body j: the request's own (within NULL), or the member `within`
 * of it ("next", a completion's claim; "completions[3].next"), whose fields
 * the error messages name as "next.max_runs". */
static int claim_fields(lessor_call *c, const cJSON *j, const char *within, struct claim_state *cs,
                        int64_t *ret_wait)
{
	int r = body_claim_fields(c, j, within != NULL, cs, ret_wait);

	if (r == -EINVAL && within && c->msg[0] == '\'')
		msg_within(c, within);
	if (r < 0)
		return r;
	/* a named worker token is the worker's identity, whatever the body says */
	if (c->who.role == LESSOR_ROLE_WORKER)
		cs->req.worker_id = c->who.name;
	return 0;
}

static int claim_prepare(lessor_call *c, const cJSON *j, const char *within, struct claim_state *cs)
{
	int64_t wait_s = 0;
	int r = claim_fields(c, j, within, cs, &wait_s);

	if (r < 0)
		return r;
	cs->tags_json = lessor_strv_to_json(cs->tags);
	if (cs->workflows)
		cs->workflows_json = lessor_strv_to_json(cs->workflows);
	if (!cs->tags_json || (cs->workflows && !cs->workflows_json))
		return -ENOMEM;
	cs->req.tags_json = cs->tags_json;
	cs->req.workflows_json = cs->workflows_json;
	cs->deadline = time_mono() + (usec_t)wait_s * USEC_PER_SEC;
	return 0;
}

/* Parses a claim body into *ret, the caller's (claim_state_free). */
static int claim_parse(lessor_call *c, const cJSON *j, const char *within, struct claim_state **ret)
{
	struct claim_state *cs = calloc(1, sizeof(*cs));
	int r;

	if (!cs)
		return -ENOMEM;
	r = claim_prepare(c, j, within, cs);
	if (r < 0) {
		claim_state_free(cs);
		return r;
	}
	*ret = cs;
	return 0;
}

static cJSON *grant_json(const struct lessor_grant *g)
{
	cJSON *o = cJSON_CreateObject(), *lease;

	if (!o)
		return NULL;
	cJSON_AddStringToObject(o, "id", g->id);
	cJSON_AddStringToObject(o, "workflow", g->workflow);
	cJSON_AddNumberToObject(o, "attempt", g->attempt);
	lease = cJSON_AddObjectToObject(o, "lease");
	if (lease) {
		cJSON_AddStringToObject(lease, "token", g->token);
		cJSON_AddNumberToObject(lease, "ttl_s", g->ttl_s);
	}
	cJSON_AddItemToObject(o, "input", lessor_raw_item(g->input_json));
	cJSON_AddItemToObject(o, "tags", cJSON_Parse(g->tags_json));
	if (g->timeout_s)
		cJSON_AddNumberToObject(o, "timeout_s", g->timeout_s);
	return o;
}

/* The answer to a claim.  cancels: the held runs asked to cancel, sent
 * (maybe empty) when the claim named its held leases; taken, as res is. */
static cJSON *claim_json(const struct claim_state *cs, struct lessor_claim_result *res,
                         char **cancels)
{
	cJSON *o = cJSON_CreateObject(), *runs = cJSON_AddArrayToObject(o, "runs");

	for (size_t i = 0; runs && i < res->n_runs; i++)
		cJSON_AddItemToArray(runs, grant_json(&res->runs[i]));
	cJSON_AddNumberToObject(o, "queue_depth", (double)res->queue_depth);
	if (cs && cs->has_held)
		cJSON_AddItemToObject(o, "cancel_requested", cJSON_Parse("[]"));
	for (size_t i = 0; cancels && cancels[i]; i++)
		cJSON_AddItemToArray(cJSON_GetObjectItem(o, "cancel_requested"),
		                     cJSON_CreateString(cancels[i]));
	strv_free(cancels);
	lessor_claim_result_done(res);
	return o;
}

static int claim_reply(lessor_call *c, struct lessor_claim_result *res, char **cancels)
{
	return lessor_reply_json(c, 200, claim_json(c->state, res, cancels));
}

/* The runs of this look: the claim an enqueue made for it, or its own. */
static int claim_runs(lessor_call *c, struct claim_state *cs, struct lessor_claim_result *res)
{
	int r;

	if (cs->handed) {
		cs->handed = false;
		*res = cs->handed_res;
		cs->handed_res = (struct lessor_claim_result){0};
		return cs->handed_r;
	}
	if (cs->req.max_runs == 0)
		return 0;
	cs->req.record_worker = !cs->recorded;
	r = lessor_store_claim(c->api->store, &cs->req, lessor_now_ms(), res);
	if (r >= 0)
		cs->recorded = true;
	return r;
}

/* One look for runs (none for a claim of max_runs 0) and for the held runs'
 * cancels; LESSOR_CALL_REPLY when answered, 0 when there is nothing yet. */
static int claim_once(lessor_call *c, struct claim_state *cs)
{
	struct lessor_claim_result res = {0};
	char **cancels = NULL;
	int r;

	if (cs->has_held && (r = lessor_store_cancels(c->api->store, cs->held_ids, cs->held_tokens,
	                                              cs->n_held, lessor_now_ms(), &cancels)) < 0)
		return lessor_reply_store_error(c, r);
	r = claim_runs(c, cs, &res);
	if (r < 0) {
		strv_free(cancels);
		return lessor_reply_store_error(c, r); /* -EEXIST: another worker's */
	}
	if (res.n_runs > 0 || res.replay || res.cancelled || (cancels && cancels[0]) ||
	    time_mono() >= cs->deadline)
		return claim_reply(c, &res, cancels);
	strv_free(cancels);
	lessor_claim_result_done(&res);
	return 0;
}

int lessor_h_claim(lessor_call *c)
{
	struct claim_state *cs = c->state;
	int r;

	if (!cs) {
		/* parsed once, kept across wake-ups */
		if ((r = claim_parse(c, c->json, NULL, &cs)) < 0)
			return r == -ENOMEM ? lessor_reply_store_error(c, r)
			                    : lessor_reply_invalid(c);
		c->state = cs;
		c->state_free = claim_state_free;
	}
	for (;;) {
		/* read the generation before looking: a wake in between refuses the park */
		uint64_t gen = lessor_waiters_gen(c->api->waiters);
		struct lessor_claim_result none = {0};

		r = claim_once(c, cs);
		if (r != 0)
			return r;
		c->waiter = (struct lessor_waiter){.deadline = cs->deadline,
		                                   .claim = true,
		                                   .workflows = cs->workflows,
		                                   .tags = cs->tags,
		                                   .claim_id = cs->req.claim_id,
		                                   .held = cs->has_held ? cs->held_ids : NULL,
		                                   .no_runs = cs->req.max_runs == 0};
		r = lessor_call_park(c, gen);
		if (r == 0)
			return LESSOR_CALL_SUSPENDED;
		if (r == -ESHUTDOWN)
			return claim_reply(c, &none, NULL);
	}
}

/* ---- the hand-off of a new run to a parked claim ---- */

static bool granted(const struct lessor_claim_result *res, const char *id)
{
	for (size_t i = 0; i < res->n_runs; i++)
		if (streq(res->runs[i].id, id))
			return true;
	return false;
}

/* The enqueue e, with the claim of the adopted waiter x in its transaction:
 * as lessor_store_enqueue, and *ret_taken true when that claim was granted
 * the new run.  x's call is suspended, and ours until resumed. */
static int enqueue_into(lessor_call *c, const struct lessor_enqueue *e, struct lessor_waiter *x,
                        char id[LESSOR_RUN_ID_MAX], bool *ret_created, bool *ret_taken)
{
	struct claim_state *cs = container_of(x, lessor_call, waiter)->state;
	int claim_r, r;

	cs->req.record_worker = !cs->recorded;
	r = lessor_store_enqueue_claim(c->api->store, e, &cs->req, lessor_now_ms(), id, ret_created,
	                               &claim_r, &cs->handed_res);
	*ret_taken = false;
	if (r < 0 || claim_r == -EALREADY)
		return r; /* no claim made: x looks again */
	cs->handed = true;
	cs->handed_r = claim_r;
	if (claim_r >= 0) {
		cs->recorded = true;
		*ret_taken = granted(&cs->handed_res, id);
	}
	return r;
}

int lessor_enqueue_hand_off(lessor_call *c, const struct lessor_enqueue *e,
                            char id[LESSOR_RUN_ID_MAX], bool *ret_created)
{
	lessor_waiters *w = c->api->waiters;
	struct lessor_waiter *x = lessor_waiters_adopt(w, e->workflow, e->tags);
	bool taken = false;
	int r;

	if (x && lessor_call_auth_current(container_of(x, lessor_call, waiter)))
		r = enqueue_into(c, e, x, id, ret_created, &taken);
	else
		r = lessor_store_enqueue(c->api->store, e, lessor_now_ms(), id, ret_created);
	if (r >= 0 && *ret_created && !taken)
		lessor_waiters_wake(w, e->workflow, e->tags);
	if (x)
		lessor_waiters_resume(x);
	return r;
}

static int released_reply(lessor_call *c, unsigned released)
{
	cJSON *o = cJSON_CreateObject();

	cJSON_AddNumberToObject(o, "released", released);
	return lessor_reply_json(c, 200, o);
}

/* 1 when the caller may cancel the claim c->arg: anyone but a named worker,
 * which may cancel only its own claims (or one not made yet).  Another
 * worker's claim is answered like an unknown one, and left alone. */
static int claim_cancel_allowed(lessor_call *c)
{
	_cleanup_free_ char *owner = NULL;
	int r;

	if (c->who.role != LESSOR_ROLE_WORKER)
		return 1;
	r = lessor_store_claim_owner(c->api->store, c->arg, &owner);
	if (r == -ENOENT)
		return 1;
	if (r < 0)
		return r;
	return streq(owner, c->who.name) || streq(owner, "");
}

int lessor_h_claim_cancel(lessor_call *c)
{
	unsigned released = 0;
	int r;

	if (!v1_valid_id(c->arg))
		return lessor_reply_error(c, 400, "invalid_request", "malformed claim_id");
	r = claim_cancel_allowed(c);
	if (r < 0)
		return lessor_reply_store_error(c, r);
	if (r == 0)
		return released_reply(c, 0);
	r = lessor_store_claim_cancel(c->api->store, c->arg, lessor_now_ms(), &released);
	if (r < 0)
		return lessor_reply_store_error(c, r);
	lessor_waiters_wake_claim(c->api->waiters, c->arg);
	if (released > 0)
		lessor_waiters_wake(c->api->waiters, NULL, NULL);
	return released_reply(c, released);
}

/* ---- lease ---- */

static int token_field(lessor_call *c, const char **ret)
{
	return lessor_field_str(c->json, "token", true, 0, v1_valid_token, ret, c->msg);
}

int lessor_h_renew(lessor_call *c)
{
	const char *token;
	int64_t ttl;
	bool cancel;
	cJSON *o;
	int r;

	if (token_field(c, &token) < 0 ||
	    lessor_field_int(c->json, "ttl_s", true, 1, V1_TTL_MAX, 0, &ttl, c->msg) < 0)
		return lessor_reply_invalid(c);
	if ((r = lessor_call_check_holder(c, token)) != 0)
		return r;
	r = lessor_store_renew(c->api->store, c->arg, token, (unsigned)ttl, lessor_now_ms(),
	                       &cancel);
	if (r < 0)
		return lessor_reply_store_error(c, r);
	o = cJSON_CreateObject();
	cJSON_AddNumberToObject(o, "ttl_s", (double)ttl);
	cJSON_AddBoolToObject(o, "cancel_requested", cancel);
	return lessor_reply_json(c, 200, o);
}

/* ---- renew many leases: POST /v1/leases/renew ---- */

struct renew_batch {
	struct lessor_renewal *v;
	size_t n;
	int64_t ttl_s;
};

static void renew_batch_free(void *p)
{
	struct renew_batch *b = p;

	if (b)
		free(b->v);
	free(b);
}

/* The i-th of "leases": {id, token}; an error names it ("'leases[3].token' ..."). */
static int renewal_entry(lessor_call *c, const cJSON *e, size_t i, struct lessor_renewal *ret)
{
	char within[48];

	snprintf(within, sizeof(within), "leases[%zu]", i);
	if (!cJSON_IsObject(e)) {
		snprintf(c->msg, LESSOR_MSG_MAX, "'%s' must be an object {id, token}", within);
		return -EINVAL;
	}
	if (lessor_field_str(e, "id", true, 0, v1_valid_id, &ret->id, c->msg) >= 0 &&
	    lessor_field_str(e, "token", true, 0, v1_valid_token, &ret->token, c->msg) >= 0)
		return 0;
	msg_within(c, within);
	return -EINVAL;
}

static int by_id(const void *a, const void *b)
{
	const char *const *const *x = a, *const *const *y = b;
	int d = strcmp(**x, **y);

	/* equal ids: in request order, so the later one is the repeat */
	return d ? d : (*x > *y) - (*x < *y);
}

/* An id of a batch's entries (ids[0..n), `what`: "leases") given twice
 * refuses the request: it names the first repeat. */
static int batch_dups(lessor_call *c, const char *const *ids, size_t n, const char *what)
{
	_cleanup_free_ const char *const **p = calloc(n, sizeof(*p));
	size_t first = n;

	if (!p)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		p[i] = &ids[i];
	qsort(p, n, sizeof(*p), by_id);
	for (size_t i = 1; i < n; i++)
		if (streq(*p[i], *p[i - 1]) && (size_t)(p[i] - ids) < first)
			first = (size_t)(p[i] - ids);
	if (first == n)
		return 0;
	snprintf(c->msg, LESSOR_MSG_MAX, "'%s[%zu].id' %s is given twice", what, first, ids[first]);
	return -EINVAL;
}

static int renewal_dups(lessor_call *c, struct renew_batch *b)
{
	_cleanup_free_ const char **ids = calloc(b->n, sizeof(*ids));

	if (!ids)
		return -ENOMEM;
	for (size_t i = 0; i < b->n; i++)
		ids[i] = b->v[i].id;
	return batch_dups(c, ids, b->n, "leases");
}

static int renew_batch_parse(lessor_call *c, struct renew_batch *b)
{
	const cJSON *leases = cJSON_GetObjectItemCaseSensitive(c->json, "leases"), *e;
	const char *worker_id;
	size_t i = 0;
	int r;

	if (lessor_field_int(c->json, "ttl_s", true, 1, V1_TTL_MAX, 0, &b->ttl_s, c->msg) < 0 ||
	    lessor_field_str(c->json, "worker_id", false, 0, v1_valid_worker_id, &worker_id,
	                     c->msg) < 0)
		return -EINVAL;
	b->n = cJSON_IsArray(leases) ? (size_t)cJSON_GetArraySize(leases) : 0;
	if (b->n < 1 || b->n > V1_RENEW_MAX) {
		snprintf(c->msg, LESSOR_MSG_MAX, "'leases' must be an array of 1..%d leases",
		         V1_RENEW_MAX);
		return -EINVAL;
	}
	if (!(b->v = calloc(b->n, sizeof(*b->v))))
		return -ENOMEM;
	cJSON_ArrayForEach(e, leases)
	{
		if ((r = renewal_entry(c, e, i, &b->v[i])) < 0)
			return r;
		i++;
	}
	return renewal_dups(c, b);
}

/* A named worker token renews only the leases granted to it: the others
 * answer lease_lost, as the single renewal, and are left alone. */
static int renewal_holders(lessor_call *c, struct renew_batch *b)
{
	for (size_t i = 0; c->who.role == LESSOR_ROLE_WORKER && i < b->n; i++) {
		int r = lessor_call_holds(c, b->v[i].id, b->v[i].token);

		if (r < 0)
			return r;
		b->v[i].skip = r == 0;
		b->v[i].answer = r == 0 ? -ESTALE : 0;
	}
	return 0;
}

static cJSON *renewal_json(const struct lessor_renewal *e, int64_t ttl_s)
{
	cJSON *o = cJSON_CreateObject();
	const char *code, *message;

	cJSON_AddStringToObject(o, "id", e->id);
	if (e->answer < 0) {
		lessor_store_error_answer(e->answer, &code, &message);
		cJSON_AddStringToObject(o, "error", code);
		return o;
	}
	cJSON_AddNumberToObject(o, "ttl_s", (double)ttl_s);
	cJSON_AddBoolToObject(o, "cancel_requested", e->cancel_requested);
	return o;
}

int lessor_h_renew_batch(lessor_call *c)
{
	struct renew_batch *b;
	cJSON *o, *leases;
	int r;

	/* an older server does not know the path (the legacy lease fault) */
	if (c->fault_taken && c->fault.legacy)
		return lessor_reply_error(c, 404, "not_found", "no such endpoint");
	if (!(b = calloc(1, sizeof(*b))))
		return lessor_reply_store_error(c, -ENOMEM);
	c->state = b;
	c->state_free = renew_batch_free;
	if ((r = renew_batch_parse(c, b)) < 0)
		return r == -ENOMEM ? lessor_reply_store_error(c, r) : lessor_reply_invalid(c);
	if ((r = renewal_holders(c, b)) < 0 ||
	    (r = lessor_store_renew_batch(c->api->store, b->v, b->n, (unsigned)b->ttl_s,
	                                  lessor_now_ms())) < 0)
		return lessor_reply_store_error(c, r);
	o = cJSON_CreateObject();
	leases = cJSON_AddArrayToObject(o, "leases");
	for (size_t i = 0; leases && i < b->n; i++)
		cJSON_AddItemToArray(leases, renewal_json(&b->v[i], b->ttl_s));
	return lessor_reply_json(c, 200, o);
}

/* ---- log ---- */

static bool parse_u64(const char **p, uint64_t *ret)
{
	uint64_t v = 0;
	const char *s = *p;

	if (*s < '0' || *s > '9')
		return false;
	for (; *s >= '0' && *s <= '9'; s++) {
		v = v * 10 + (uint64_t)(*s - '0');
		if (v > (uint64_t)V1_JSON_INT_MAX)
			return false;
	}
	*p = s;
	*ret = v;
	return true;
}

/* "bytes <start>-<end>/STAR" (STAR = "*", or a total length, ignored) covering
 * exactly len bytes. */
int lessor_parse_content_range(const char *h, size_t len, uint64_t *ret_start)
{
	uint64_t start, end, total;
	const char *p = h ? startswith(h, "bytes ") : NULL;

	if (!p || !parse_u64(&p, &start) || *p++ != '-' || !parse_u64(&p, &end) || *p++ != '/')
		return -EINVAL;
	if (!(streq(p, "*") || (parse_u64(&p, &total) && *p == '\0')))
		return -EINVAL;
	if (end < start || end - start + 1 != len)
		return -EINVAL;
	*ret_start = start;
	return 0;
}

static int log_reply(lessor_call *c, unsigned status, const char *code, uint64_t length)
{
	cJSON *o = cJSON_CreateObject();

	if (code) {
		cJSON_AddStringToObject(o, "error", code);
		cJSON_AddStringToObject(o, "message",
		                        status == 416 ? "start is not the log's length"
		                                      : "the log reached its size limit");
	}
	cJSON_AddNumberToObject(o, "length", (double)length);
	return lessor_reply_json(c, status, o);
}

int lessor_h_log_append(lessor_call *c)
{
	const char *token = c->io.header(c->io.userdata, "Lease-Token");
	uint64_t start, length = 0;
	int r;

	if (!token || !v1_valid_token(token))
		return lessor_reply_error(c, 400, "invalid_request", "Lease-Token is required");
	if (c->len == 0)
		return lessor_reply_error(c, 400, "invalid_request", "the body is empty");
	if (lessor_parse_content_range(c->io.header(c->io.userdata, "Content-Range"), c->len,
	                               &start) < 0)
		return lessor_reply_error(c, 400, "invalid_request",
		                          "Content-Range must be 'bytes <start>-<end>/*' "
		                          "matching the body");
	if ((r = lessor_call_check_holder(c, token)) != 0)
		return r;
	r = lessor_store_append_log(c->api->store, c->arg, token, start, c->body, c->len,
	                            lessor_now_ms(), &length);
	if (r == -ERANGE)
		return log_reply(c, 416, "range_mismatch", length);
	if (r == -EFBIG)
		return log_reply(c, 413, "log_limit", length);
	if (r < 0)
		return lessor_reply_store_error(c, r);
	return log_reply(c, 202, NULL, length);
}

/* ---- complete ---- */

static int completion_members(lessor_call *c, const cJSON *j, struct lessor_completion *in)
{
	int64_t exit_code;

	if (lessor_field_str(j, "token", true, 0, v1_valid_token, &in->token, c->msg) < 0 ||
	    lessor_field_enum(j, "status", true, v1_status_names, &in->status, c->msg) < 0 ||
	    lessor_field_enum(j, "reason", true, v1_reason_names, &in->reason, c->msg) < 0 ||
	    lessor_field_int(j, "exit_code", false, -1, V1_EXIT_CODE_MAX, -1, &exit_code, c->msg) <
	        0 ||
	    lessor_field_str(j, "signal", false, 0, v1_valid_signal, &in->signal, c->msg) < 0 ||
	    lessor_field_bool(j, "retryable", false, &in->retryable, c->msg) < 0 ||
	    lessor_field_str(j, "error", false, V1_ERROR_TEXT_MAX, NULL, &in->error, c->msg) < 0 ||
	    lessor_field_int(j, "duration_ms", false, 0, V1_JSON_INT_MAX, 0, &in->duration_ms,
	                     c->msg) < 0 ||
	    lessor_field_int(j, "log_length", false, 0, V1_JSON_INT_MAX, 0, &in->log_length,
	                     c->msg) < 0)
		return -EINVAL;
	/* -1 is the "absent" default, not a value a client may send */
	if (exit_code == -1 && cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(j, "exit_code"))) {
		snprintf(c->msg, sizeof(c->msg), "'exit_code' must be an integer in 0..%d",
		         V1_EXIT_CODE_MAX);
		return -EINVAL;
	}
	in->has_exit_code = exit_code >= 0;
	in->exit_code = (int)exit_code;
	return 0;
}

/* The completion body j, whose text is raw: the request's own (within
 * NULL), or an entry of a batch (within "completions[3]", which the error
 * messages name).  Its "output", as sent, goes into *ret_output (the
 * caller's), in->output_json. */
static int completion_fields(lessor_call *c, const cJSON *j, struct json_span raw,
                             const char *within, struct lessor_completion *in, char **ret_output)
{
	const cJSON *output = cJSON_GetObjectItemCaseSensitive(j, "output");
	struct json_span v;

	if (lessor_raw_member(raw, "output", &v) < 0) {
		snprintf(c->msg, LESSOR_MSG_MAX, LESSOR_RAW_ESCAPED_MSG);
		if (within)
			msg_within(c, within);
		return -EINVAL;
	}
	if (completion_members(c, j, in) < 0) {
		if (within)
			msg_within(c, within);
		return -EINVAL;
	}
	if (!output || cJSON_IsNull(output))
		return 0;
	if (!(*ret_output = lessor_raw_text(v, output)))
		return -ENOMEM;
	in->output_json = *ret_output;
	return 0;
}

/* The completion's "next" (of j, named within it as completions[3].next),
 * a claim made once the completion is recorded: *ret (the caller's) NULL
 * when there is none, or when the legacy claims fault plays a server that
 * does not know the member (it ignores it, unread). */
static int next_parse(lessor_call *c, const cJSON *j, const char *within, struct claim_state **ret)
{
	const cJSON *next = cJSON_GetObjectItemCaseSensitive(j, "next");
	char name[48];
	int r;

	*ret = NULL;
	if (!next || cJSON_IsNull(next) ||
	    lessor_faults_take_legacy(c->api->faults, LESSOR_EP_CLAIMS))
		return 0;
	snprintf(name, sizeof(name), "%s%snext", within ? within : "", within ? "." : "");
	if (!cJSON_IsObject(next)) {
		snprintf(c->msg, LESSOR_MSG_MAX, "'%s' must be an object, a claim", name);
		return -EINVAL;
	}
	r = claim_parse(c, next, name, ret);
	if (r >= 0) /* one claim request of the worker, as a claim's first look */
		(*ret)->req.record_worker = true;
	return r;
}

/* The answer to the claim of "next", made with the completion (r, res):
 * what a claim would have answered, or no runs and the error a claim would
 * have got (the completion stands whatever happened to it). */
static cJSON *next_answer(lessor_call *c, struct claim_state *cs, int r,
                          struct lessor_claim_result *res)
{
	const char *code, *message;
	cJSON *o;

	if (r >= 0)
		return claim_json(cs, res, NULL);
	if (lessor_store_error_answer(r, &code, &message) >= 500)
		log_warning("%s %s: the claim of 'next' failed: %s, answering it as an error",
		            c->method, c->path, strerror(-r));
	o = cJSON_CreateObject();
	cJSON_AddArrayToObject(o, "runs");
	cJSON_AddStringToObject(o, "error", code);
	cJSON_AddStringToObject(o, "message", message);
	return o;
}

/* The answer of a recorded completion, into o: run_status, and the claim of
 * its "next" when it had one (claim_r, res; res is taken). */
static void completed_json(lessor_call *c, cJSON *o, const char *run_status,
                           struct claim_state *next, int claim_r, struct lessor_claim_result *res)
{
	cJSON_AddStringToObject(o, "run_status", run_status);
	if (next)
		cJSON_AddItemToObject(o, "next", next_answer(c, next, claim_r, res));
}

int lessor_h_complete(lessor_call *c)
{
	struct lessor_completion in = {0};
	_cleanup_free_ char *output_json = NULL;
	struct claim_state *next;
	struct lessor_claim_result res = {0};
	const char *run_status;
	int claim_r = 0;
	cJSON *o;
	int r;

	if ((r = completion_fields(c, c->json, lessor_call_body(c), NULL, &in, &output_json)) < 0)
		return r == -ENOMEM ? lessor_reply_store_error(c, r) : lessor_reply_invalid(c);
	/* an invalid "next" refuses the completion too: nothing is written */
	if ((r = next_parse(c, c->json, NULL, &next)) < 0)
		return r == -ENOMEM ? lessor_reply_store_error(c, r) : lessor_reply_invalid(c);
	c->state = next;
	c->state_free = claim_state_free;
	if ((r = lessor_call_check_holder(c, in.token)) != 0)
		return r;
	if (next)
		/* one transaction, one commit: the claim in a savepoint of its own */
		r = lessor_store_complete_claim(c->api->store, c->arg, &in, &next->req,
		                                lessor_now_ms(), &run_status, &claim_r, &res);
	else
		r = lessor_store_complete(c->api->store, c->arg, &in, lessor_now_ms(), &run_status);
	if (r < 0)
		return lessor_reply_store_error(c, r);
	o = cJSON_CreateObject();
	completed_json(c, o, run_status, next, claim_r, &res);
	return lessor_reply_json(c, 200, o);
}

/* ---- complete many runs: POST /v1/completions ---- */

/* What an entry's completion points into, besides the request's JSON. */
struct complete_entry {
	struct claim_state *next; /* NULL: none */
	char *output_json;
};

struct complete_batch {
	struct lessor_complete_item *v;
	struct complete_entry *x;
	size_t n;
};

static void complete_batch_free(void *p)
{
	struct complete_batch *b = p;

	for (size_t i = 0; b && i < b->n; i++) {
		lessor_claim_result_done(&b->v[i].claim);
		claim_state_free(b->x[i].next);
		free(b->x[i].output_json);
	}
	if (b) {
		free(b->v);
		free(b->x);
	}
	free(b);
}

/* The i-th of "completions": a completion body (with its "next") and the
 * run's "id"; an error names it ("'completions[3].status' ..."). */
static int completion_entry(lessor_call *c, const cJSON *e, struct json_span raw, size_t i,
                            struct complete_batch *b)
{
	struct lessor_complete_item *it = &b->v[i];
	struct complete_entry *x = &b->x[i];
	char within[48];
	int r;

	snprintf(within, sizeof(within), "completions[%zu]", i);
	if (!cJSON_IsObject(e)) {
		snprintf(c->msg, LESSOR_MSG_MAX, "'%s' must be an object, a completion with its id",
		         within);
		return -EINVAL;
	}
	if (lessor_field_str(e, "id", true, 0, v1_valid_id, &it->id, c->msg) < 0) {
		msg_within(c, within);
		return -EINVAL;
	}
	if ((r = completion_fields(c, e, raw, within, &it->in, &x->output_json)) < 0 ||
	    (r = next_parse(c, e, within, &x->next)) < 0)
		return r;
	it->next = x->next ? &x->next->req : NULL;
	return 0;
}

static int complete_batch_parse(lessor_call *c, struct complete_batch *b)
{
	const cJSON *all = cJSON_GetObjectItemCaseSensitive(c->json, "completions"), *e;
	size_t n = cJSON_IsArray(all) ? (size_t)cJSON_GetArraySize(all) : 0, i = 0;
	_cleanup_free_ const char **ids = NULL;
	_cleanup_free_ struct json_span *raw = NULL;
	struct json_span raw_all;
	int r;

	if (n < 1 || n > V1_COMPLETE_MAX) {
		snprintf(c->msg, LESSOR_MSG_MAX,
		         "'completions' must be an array of 1..%d completions", V1_COMPLETE_MAX);
		return -EINVAL;
	}
	b->v = calloc(n, sizeof(*b->v));
	b->x = calloc(n, sizeof(*b->x));
	ids = calloc(n, sizeof(*ids));
	raw = calloc(n, sizeof(*raw));
	if (!b->v || !b->x || !ids || !raw)
		return -ENOMEM;
	b->n = n;
	/* each entry as written, found in one walk of the body */
	if (lessor_raw_member(lessor_call_body(c), "completions", &raw_all) < 0 ||
	    lessor_raw_elements(raw_all, raw, n) < 0) {
		snprintf(c->msg, LESSOR_MSG_MAX, LESSOR_RAW_ESCAPED_MSG);
		return -EINVAL;
	}
	cJSON_ArrayForEach(e, all)
	{
		if ((r = completion_entry(c, e, raw[i], i, b)) < 0)
			return r;
		ids[i] = b->v[i].id;
		i++;
	}
	return batch_dups(c, ids, n, "completions");
}

/* A named worker token completes only the runs whose lease was granted to
 * it: the others answer lease_lost, as the single completion, and are left
 * alone. */
static int completion_holders(lessor_call *c, struct complete_batch *b)
{
	for (size_t i = 0; c->who.role == LESSOR_ROLE_WORKER && i < b->n; i++) {
		int r = lessor_call_holds(c, b->v[i].id, b->v[i].in.token);

		if (r < 0)
			return r;
		b->v[i].skip = r == 0;
		b->v[i].answer = r == 0 ? -ESTALE : 0;
	}
	return 0;
}

/* An entry's answer: what the single completion would have answered, with
 * its id; a refusal (its 404 or 409) as the error's code and message. */
static cJSON *completion_json(lessor_call *c, struct lessor_complete_item *e,
                              struct claim_state *next)
{
	cJSON *o = cJSON_CreateObject();
	const char *code, *message;

	cJSON_AddStringToObject(o, "id", e->id);
	if (e->answer < 0) {
		lessor_store_error_answer(e->answer, &code, &message);
		cJSON_AddStringToObject(o, "error", code);
		cJSON_AddStringToObject(o, "message", message);
		return o;
	}
	completed_json(c, o, e->run_status, next, e->claim_r, &e->claim);
	return o;
}

int lessor_h_complete_batch(lessor_call *c)
{
	struct complete_batch *b;
	cJSON *o, *all;
	int r;

	/* an older server does not know the path (the legacy complete fault) */
	if (c->fault_taken && c->fault.legacy)
		return lessor_reply_error(c, 404, "not_found", "no such endpoint");
	if (!(b = calloc(1, sizeof(*b))))
		return lessor_reply_store_error(c, -ENOMEM);
	c->state = b;
	c->state_free = complete_batch_free;
	/* checked whole before anything is written */
	if ((r = complete_batch_parse(c, b)) < 0)
		return r == -ENOMEM ? lessor_reply_store_error(c, r) : lessor_reply_invalid(c);
	if ((r = completion_holders(c, b)) < 0 ||
	    (r = lessor_store_complete_batch(c->api->store, b->v, b->n, lessor_now_ms())) < 0)
		return lessor_reply_store_error(c, r);
	o = cJSON_CreateObject();
	all = cJSON_AddArrayToObject(o, "completions");
	for (size_t i = 0; all && i < b->n; i++)
		cJSON_AddItemToArray(all, completion_json(c, &b->v[i], b->x[i].next));
	return lessor_reply_json(c, 200, o);
}

/* ---- release ---- */

int lessor_h_release(lessor_call *c)
{
	const char *token, *reason;
	int64_t delay;
	cJSON *o;
	int r;

	if (token_field(c, &token) < 0 ||
	    lessor_field_enum(c->json, "reason", true, v1_release_reason_names, &reason, c->msg) <
	        0 ||
	    lessor_field_int(c->json, "delay_s", false, 0, V1_DELAY_MAX, 0, &delay, c->msg) < 0)
		return lessor_reply_invalid(c);
	if ((r = lessor_call_check_holder(c, token)) != 0)
		return r;
	r = lessor_store_release(c->api->store, c->arg, token, reason, (unsigned)delay,
	                         lessor_now_ms());
	if (r < 0)
		return lessor_reply_store_error(c, r);
	if (delay == 0) /* later: the reaper's tick notices the delay running out */
		lessor_waiters_wake(c->api->waiters, NULL, NULL);
	o = cJSON_CreateObject();
	cJSON_AddStringToObject(o, "run_status", v1_run_status_name(V1_RUN_PENDING));
	return lessor_reply_json(c, 200, o);
}
