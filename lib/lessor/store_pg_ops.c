/* The PostgreSQL backend's state transitions.  Every statement takes the
 * clock as $1 (lessor_now($1): the database's, or the caller's in tests).
 *
 * Fencing: a write made with a lease names the run, its token and its state
 * ('running', lease not past its deadline) in its WHERE and looks at what it
 * affected; zero rows is a stale token (counted in rejected_writes) or an
 * unknown run.  Claims take candidates with FOR UPDATE SKIP LOCKED, so
 * concurrent claims on any number of instances never grant one run twice;
 * each grant bumps the run's fencing epoch and mints a new token. */
#include "lessor/store_pg-int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/strutil.h"

#define REAP_BATCH 256
#define BACKSTOP_MS 1000

/* Run is not held by token: count the refused write on it, wherever it is.
 * -ESTALE, or -ENOENT when there is no such run.  A run moving from the hot
 * table to the done table between the two snapshots is looked for again. */
static int refuse(lessor_pg *s, struct pg_conn *c, int64_t seq)
{
	for (int i = 0; i < 2; i++) {
		_cleanup_pgresult_ PGresult *res = NULL;
		int r = pg_query(
		    s, c, &res, false,
		    "WITH a AS (UPDATE lessor_runs SET rejected_writes = rejected_writes + 1"
		    "  WHERE seq = $1 RETURNING 1),"
		    " b AS (UPDATE lessor_runs_done SET rejected_writes = rejected_writes + 1"
		    "  WHERE seq = $1 RETURNING 1)"
		    " SELECT (SELECT count(*) FROM a) + (SELECT count(*) FROM b)",
		    "i", seq);

		if (r < 0)
			return r;
		if (pg_int(res, 0, 0) > 0)
			return -ESTALE;
	}
	return -ENOENT;
}

/* Splits a result into a database error (returned) and a protocol answer (*answer). */
static int answer_of(int r, int *answer)
{
	if (r == -ENOENT || r == -ESTALE) {
		*answer = r;
		return 0;
	}
	return r;
}

static int notify_hint(lessor_pg *s, struct pg_conn *c)
{
	return pg_query(s, c, NULL, false, "SELECT pg_notify('" PG_CHANNEL "', $1)", "s",
	                s->instance);
}

/* ---- enqueue ---- */

struct enqueue_ctx {
	const struct lessor_enqueue *e;
	int64_t now;
	const char *tags;
	int64_t seq;
	bool created;
};

static int enqueue_fn(lessor_pg *s, struct pg_conn *c, void *userdata)
{
	struct enqueue_ctx *x = userdata;
	const struct lessor_enqueue *e = x->e;
	int64_t timeout = e->timeout_s;
	_cleanup_pgresult_ PGresult *res = NULL, *old = NULL;
	int r;

	/* an existing key is looked up first, so the run ids stay dense (a
	 * conflicting INSERT would consume a sequence number); ON CONFLICT
	 * covers another instance inserting the same key concurrently */
	r = pg_query(
	    s, c, &res, false,
	    "WITH k AS (SELECT seq FROM lessor_run_specs WHERE idempotency_key = $7),"
	    " s AS (INSERT INTO lessor_run_specs (seq, workflow, input, tags,"
	    "  max_attempts, timeout_s, idempotency_key, created_at)"
	    "  SELECT nextval('lessor_run_seq'), $2::text, $3::text, $4::text,"
	    "  $5::integer, $6::integer, $7::text, lessor_now($1)"
	    "  WHERE NOT EXISTS (SELECT 1 FROM k)"
	    "  ON CONFLICT (idempotency_key) DO NOTHING RETURNING seq, created_at),"
	    " r AS (INSERT INTO lessor_runs (seq, workflow, tags, status, not_before,"
	    "  updated_at) SELECT seq, $2, ARRAY(SELECT json_array_elements_text($4::json)),"
	    "  'pending', created_at, created_at FROM s)"
	    " SELECT seq, pg_notify('" PG_CHANNEL "', $8 || ':' || $2)::text FROM s"
	    " UNION ALL SELECT seq, NULL FROM k",
	    "nsssinss", PG_CLOCK(s, x->now), e->workflow, e->input_json, x->tags,
	    (int64_t)e->max_attempts, timeout > 0 ? &timeout : NULL, e->idempotency_key,
	    s->instance);
	if (r < 0)
		return r;
	if (PQntuples(res) == 1) {
		x->seq = pg_int(res, 0, 0);
		x->created = pg_val(res, 0, 1) != NULL;
		return 0;
	}
	/* the key names an existing run (committed, maybe just now by another instance) */
	r = pg_query(s, c, &old, false,
	             "SELECT seq FROM lessor_run_specs WHERE idempotency_key = $1", "s",
	             e->idempotency_key);
	if (r < 0)
		return r;
	if (PQntuples(old) != 1)
		return -EIO;
	x->seq = pg_int(old, 0, 0);
	return 0;
}

int lessor_pg_enqueue(void *be, const struct lessor_enqueue *e, int64_t now,
                      char ret_id[LESSOR_RUN_ID_MAX], bool *ret_created)
{
	_cleanup_free_ char *tags = lessor_tags_to_json(e->tags);
	struct enqueue_ctx x = {.e = e, .now = now, .tags = tags};
	int r;

	if (!tags)
		return -ENOMEM;
	r = pg_run(be, false, false, enqueue_fn, &x);
	if (r < 0)
		return r;
	lessor_run_id_format(ret_id, x.seq);
	*ret_created = x.created;
	return 0;
}

/* ---- claim ---- */

/* $1 clock, $2 workflows JSON array or NULL, $3 the worker's tags JSON array */
#define ELIGIBLE_WHERE                                                                             \
	" r.status = 'pending' AND r.not_before <= lessor_now($1)"                                 \
	" AND ($2::json IS NULL OR r.workflow IN (SELECT json_array_elements_text($2::json)))"     \
	" AND r.tags <@ ARRAY(SELECT json_array_elements_text($3::json))"

struct claim_ctx {
	const struct lessor_claim_req *req;
	int64_t now;
	struct lessor_claim_result *res;
	int answer;
};

/* Columns: seq, workflow, input, tags, attempt, timeout_s, token, ttl_s. */
static int grants_from(struct lessor_claim_result *out, const PGresult *res)
{
	int n = PQntuples(res);
	struct lessor_grant *g;

	if (n == 0)
		return 0;
	g = calloc((size_t)n, sizeof(*g));
	if (!g)
		return -ENOMEM;
	out->runs = g;
	out->n_runs = (size_t)n;
	for (int i = 0; i < n; i++) {
		lessor_run_id_format(g[i].id, pg_int(res, i, 0));
		g[i].workflow = pg_strdup(res, i, 1);
		g[i].input_json = pg_strdup(res, i, 2);
		g[i].tags_json = pg_strdup(res, i, 3);
		g[i].attempt = (unsigned)pg_int(res, i, 4);
		g[i].timeout_s = (unsigned)pg_int(res, i, 5);
		snprintf(g[i].token, sizeof(g[i].token), "%s", pg_val(res, i, 6) ?: "");
		g[i].ttl_s = (unsigned)pg_int(res, i, 7);
		if (!g[i].workflow || !g[i].input_json || !g[i].tags_json)
			return -ENOMEM;
	}
	return 0;
}

/* A claim_id answered before: what it still holds, the leases extended as
 * if granted now. */
static int claim_replay(lessor_pg *s, struct pg_conn *c, struct claim_ctx *x)
{
	_cleanup_pgresult_ PGresult *res = NULL;
	int r;

	x->res->replay = true;
	r = pg_query(s, c, &res, false,
	             "WITH h AS MATERIALIZED (SELECT r.seq, l.attempt, l.token, l.ttl_s"
	             "  FROM lessor_leases l JOIN lessor_runs r ON r.seq = l.run_seq"
	             "  AND r.lease_id = l.id WHERE l.claim_id = $2 AND r.status = 'running'"
	             "  AND r.lease_expires_at > lessor_now($1) FOR UPDATE OF r),"
	             " u AS (UPDATE lessor_runs r SET lease_expires_at = lessor_now($1)"
	             "  + 1000 * h.ttl_s FROM h WHERE r.seq = h.seq)"
	             " SELECT h.seq, s.workflow, s.input, s.tags, h.attempt, s.timeout_s, h.token,"
	             "  h.ttl_s FROM h JOIN lessor_run_specs s ON s.seq = h.seq ORDER BY h.seq",
	             "ns", PG_CLOCK(s, x->now), x->req->claim_id);
	if (r < 0)
		return r;
	return grants_from(x->res, res);
}

/* 1 when the claim_id was seen before (and handled), 0 when new.  The
 * advisory lock serialises requests with one claim_id across instances. */
static int claim_lookup(lessor_pg *s, struct pg_conn *c, struct claim_ctx *x)
{
	_cleanup_pgresult_ PGresult *res = NULL;
	int r;

	r = pg_query(s, c, NULL, false, "SELECT pg_advisory_xact_lock(1818588020, hashtext($1))",
	             "s", x->req->claim_id);
	if (r < 0)
		return r;
	r = pg_query(s, c, &res, false,
	             "SELECT worker_id, cancelled FROM lessor_claims WHERE claim_id = $1", "s",
	             x->req->claim_id);
	if (r < 0)
		return r;
	if (PQntuples(res) == 0)
		return 0;
	if (pg_int(res, 0, 1)) {
		x->res->cancelled = true;
		return 1;
	}
	if (!streq_ptr(pg_val(res, 0, 0), x->req->worker_id)) {
		x->answer = -EEXIST;
		return 1;
	}
	r = claim_replay(s, c, x);
	return r < 0 ? r : 1;
}

static int record_worker(lessor_pg *s, struct pg_conn *c, struct claim_ctx *x)
{
	const struct lessor_claim_req *q = x->req;

	return pg_query(s, c, NULL, false,
	                "INSERT INTO lessor_workers (worker_id, last_claim_at, workflows, tags,"
	                " max_runs, claims) VALUES ($2, lessor_now($1), $3, $4, $5, 1)"
	                " ON CONFLICT (worker_id) DO UPDATE SET"
	                " last_claim_at = excluded.last_claim_at,"
	                " workflows = excluded.workflows, tags = excluded.tags,"
	                " max_runs = excluded.max_runs, claims = lessor_workers.claims + 1",
	                "nsssi", PG_CLOCK(s, x->now), q->worker_id, q->workflows_json, q->tags_json,
	                (int64_t)q->max_runs);
}

/* A grant's times are its statement's, not its transaction's: the claim's
 * transaction looks up the claim and records the worker first (where it may
 * wait on a row lock), and a lease that another instance's reaper expired
 * meanwhile must not look as if it ended after the new one was granted. */
#define GRANT_NOW "COALESCE($1::bigint, (extract(epoch FROM statement_timestamp()) * 1000)::bigint)"

/* The grant: one statement.  Candidates are locked (SKIP LOCKED: another
 * claim has them), each gets a new lease id, token and epoch, the lease
 * row and the claim record are written, all or nothing. */
static const char SQL_GRANT[] =
    "WITH cand AS MATERIALIZED (SELECT r.seq FROM lessor_runs r WHERE" ELIGIBLE_WHERE
    "  ORDER BY r.not_before, r.seq LIMIT $4 FOR UPDATE SKIP LOCKED),"
    " g AS (UPDATE lessor_runs r SET status = 'running', epoch = r.epoch + 1,"
    "  lease_id = nextval('lessor_leases_id_seq'),"
    "  token = replace(gen_random_uuid()::text, '-', ''),"
    "  lease_expires_at = " GRANT_NOW " + 1000 * $5::bigint,"
    "  started_at = COALESCE(r.started_at, " GRANT_NOW "), updated_at = " GRANT_NOW
    "  FROM cand WHERE r.seq = cand.seq AND r.status = 'pending'"
    "  RETURNING r.seq, r.lease_id, r.token, r.epoch, r.attempts, r.not_before),"
    " l AS (INSERT INTO lessor_leases (id, run_seq, token, epoch, attempt, worker_id,"
    "  claim_id, ttl_s, granted_at) SELECT lease_id, seq, token, epoch, attempts + 1, $6, $7,"
    "  $5, " GRANT_NOW " FROM g),"
    " c AS (INSERT INTO lessor_claims (claim_id, worker_id, created_at)"
    "  SELECT $7, $6, " GRANT_NOW " WHERE EXISTS (SELECT 1 FROM g)),"
    " w AS (UPDATE lessor_workers SET runs_granted = runs_granted + (SELECT count(*) FROM g)"
    "  WHERE worker_id = $6 AND EXISTS (SELECT 1 FROM g))"
    " SELECT g.seq, s.workflow, s.input, s.tags, g.attempts + 1, s.timeout_s, g.token, $5"
    " FROM g JOIN lessor_run_specs s ON s.seq = g.seq ORDER BY g.not_before, g.seq";

static int claim_new(lessor_pg *s, struct pg_conn *c, struct claim_ctx *x)
{
	const struct lessor_claim_req *q = x->req;
	_cleanup_pgresult_ PGresult *res = NULL;
	int r;

	r = pg_query(s, c, &res, false, SQL_GRANT, "nssiiss", PG_CLOCK(s, x->now),
	             q->workflows_json, q->tags_json, (int64_t)q->max_runs, (int64_t)q->ttl_s,
	             q->worker_id, q->claim_id);
	if (r < 0)
		return r;
	return grants_from(x->res, res);
}

static int queue_depth(lessor_pg *s, struct pg_conn *c, struct claim_ctx *x)
{
	_cleanup_pgresult_ PGresult *res = NULL;
	int r;

	if (x->res->n_runs < x->req->max_runs)
		return 0;
	r = pg_query(s, c, &res, false,
	             "SELECT count(*) FROM (SELECT 1 FROM lessor_runs r WHERE" ELIGIBLE_WHERE
	             " LIMIT $4) d",
	             "nssi", PG_CLOCK(s, x->now), x->req->workflows_json, x->req->tags_json,
	             (int64_t)LESSOR_QUEUE_DEPTH_CAP);
	if (r < 0)
		return r;
	x->res->queue_depth = (uint64_t)pg_int(res, 0, 0);
	return 0;
}

static int claim_fn(lessor_pg *s, struct pg_conn *c, void *userdata)
{
	struct claim_ctx *x = userdata;
	int r;

	/* a retried transaction starts from nothing */
	lessor_claim_result_done(x->res);
	x->answer = 0;
	r = claim_lookup(s, c, x);
	if (r != 0)
		return r < 0 ? r : 0;
	if (x->req->record_worker && (r = record_worker(s, c, x)) < 0)
		return r;
	r = claim_new(s, c, x);
	if (r < 0)
		return r;
	return queue_depth(s, c, x);
}

int lessor_pg_claim(void *be, const struct lessor_claim_req *req, int64_t now,
                    struct lessor_claim_result *ret)
{
	struct lessor_claim_result res = {0};
	struct claim_ctx x = {.req = req, .now = now, .res = &res};
	int r = pg_run(be, true, false, claim_fn, &x);

	if (r >= 0)
		r = x.answer;
	if (r < 0) {
		lessor_claim_result_done(&res);
		return r;
	}
	*ret = res;
	return 0;
}

/* ---- claim cancel ---- */

struct claim_cancel_ctx {
	const char *claim_id;
	int64_t now;
	unsigned released;
};

static int claim_cancel_fn(lessor_pg *s, struct pg_conn *c, void *userdata)
{
	struct claim_cancel_ctx *x = userdata;
	_cleanup_pgresult_ PGresult *res = NULL;
	int r;

	r = pg_query(s, c, NULL, false, "SELECT pg_advisory_xact_lock(1818588020, hashtext($1))",
	             "s", x->claim_id);
	if (r < 0)
		return r;
	r = pg_query(s, c, NULL, false,
	             "INSERT INTO lessor_claims (claim_id, worker_id, created_at, cancelled)"
	             " VALUES ($2, '', lessor_now($1), true)"
	             " ON CONFLICT (claim_id) DO UPDATE SET cancelled = true",
	             "ns", PG_CLOCK(s, x->now), x->claim_id);
	if (r < 0)
		return r;
	/* the lease rows are locked too: a renewal in flight either lands
	 * first (and the run stays) or finds the lease gone */
	r = pg_query(
	    s, c, &res, false,
	    "WITH o AS MATERIALIZED (SELECT r.seq, l.id AS lease_id FROM lessor_leases l"
	    "  JOIN lessor_runs r ON r.seq = l.run_seq AND r.lease_id = l.id"
	    "  WHERE l.claim_id = $2 AND r.status = 'running' AND l.last_renewed_at IS NULL"
	    "  FOR UPDATE OF r, l),"
	    " u AS (UPDATE lessor_runs r SET status = 'pending', lease_id = NULL,"
	    "  token = NULL, lease_expires_at = NULL, updated_at = lessor_now($1)"
	    "  FROM o WHERE r.seq = o.seq RETURNING o.lease_id),"
	    " l AS (UPDATE lessor_leases SET ended_at = lessor_now($1),"
	    "  end_reason = 'cancelled', detail = 'claim cancelled'"
	    "  FROM u WHERE lessor_leases.id = u.lease_id)"
	    " SELECT count(*) FROM u",
	    "ns", PG_CLOCK(s, x->now), x->claim_id);
	if (r < 0)
		return r;
	x->released = (unsigned)pg_int(res, 0, 0);
	return x->released > 0 ? notify_hint(s, c) : 0;
}

int lessor_pg_claim_cancel(void *be, const char *claim_id, int64_t now, unsigned *ret_released)
{
	struct claim_cancel_ctx x = {.claim_id = claim_id, .now = now};
	int r = pg_run(be, true, false, claim_cancel_fn, &x);

	if (r < 0)
		return r;
	*ret_released = x.released;
	return 0;
}

/* ---- renew ---- */

struct renew_ctx {
	int64_t seq;
	const char *token;
	unsigned ttl_s;
	int64_t now;
	bool cancel_requested;
	int answer;
};

static int renew_fn(lessor_pg *s, struct pg_conn *c, void *userdata)
{
	struct renew_ctx *x = userdata;
	_cleanup_pgresult_ PGresult *res = NULL;
	int r;

	r = pg_query(s, c, &res, false,
	             "WITH u AS (UPDATE lessor_runs SET lease_expires_at = lessor_now($1)"
	             "  + 1000 * $4::bigint, updated_at = lessor_now($1)"
	             "  WHERE seq = $2 AND token = $3 AND status = 'running'"
	             "  AND lease_expires_at > lessor_now($1) RETURNING cancel_requested),"
	             " l AS (UPDATE lessor_leases SET last_renewed_at = lessor_now($1), ttl_s = $4"
	             "  WHERE token = $3 AND EXISTS (SELECT 1 FROM u))"
	             " SELECT cancel_requested FROM u",
	             "nisi", PG_CLOCK(s, x->now), x->seq, x->token, (int64_t)x->ttl_s);
	if (r < 0)
		return r;
	if (PQntuples(res) != 1)
		return answer_of(refuse(s, c, x->seq), &x->answer);
	x->cancel_requested = pg_int(res, 0, 0) != 0;
	return 0;
}

int lessor_pg_renew(void *be, const char *id, const char *token, unsigned ttl_s, int64_t now,
                    bool *ret_cancel_requested)
{
	struct renew_ctx x = {.token = token, .ttl_s = ttl_s, .now = now};
	int r;

	if (lessor_run_id_parse(id, &x.seq) < 0)
		return -ENOENT;
	r = pg_run(be, false, false, renew_fn, &x);
	if (r < 0)
		return r;
	if (x.answer < 0)
		return x.answer;
	*ret_cancel_requested = x.cancel_requested;
	return 0;
}

/* ---- renew many: each lease as renew_fn, all in one transaction ---- */

struct renew_batch_ctx {
	struct lessor_renewal *v;
	size_t n;
	unsigned ttl_s;
	int64_t now;
};

/* Run again from the start when the transaction is retried: every answer
 * is written anew. */
static int renew_batch_fn(lessor_pg *s, struct pg_conn *c, void *userdata)
{
	struct renew_batch_ctx *b = userdata;

	for (size_t i = 0; i < b->n; i++) {
		struct lessor_renewal *e = &b->v[i];
		struct renew_ctx x = {.token = e->token, .ttl_s = b->ttl_s, .now = b->now};
		int r;

		if (e->skip)
			continue;
		if (lessor_run_id_parse(e->id, &x.seq) < 0)
			x.answer = -ENOENT;
		else if ((r = renew_fn(s, c, &x)) < 0)
			return r;
		e->answer = x.answer;
		e->cancel_requested = x.answer == 0 && x.cancel_requested;
	}
	return 0;
}

int lessor_pg_renew_batch(void *be, struct lessor_renewal *v, size_t n, unsigned ttl_s, int64_t now)
{
	struct renew_batch_ctx b = {.v = v, .n = n, .ttl_s = ttl_s, .now = now};

	return pg_run(be, true, false, renew_batch_fn, &b);
}

/* ---- log ---- */

struct log_ctx {
	int64_t seq;
	const char *token;
	uint64_t start;
	const void *data;
	size_t len, keep;
	int64_t now;
	uint64_t length;
	int answer;
};

/* The append did not happen: a wrong offset on a held lease (-ERANGE, with
 * the real length), or not held. */
static int log_refused(lessor_pg *s, struct pg_conn *c, struct log_ctx *x)
{
	_cleanup_pgresult_ PGresult *res = NULL;
	int r;

	r = pg_query(s, c, &res, false,
	             "SELECT log_length FROM lessor_runs WHERE seq = $2 AND token = $3"
	             " AND status = 'running' AND lease_expires_at > lessor_now($1)",
	             "nis", PG_CLOCK(s, x->now), x->seq, x->token);
	if (r < 0)
		return r;
	if (PQntuples(res) == 1) {
		x->length = (uint64_t)pg_int(res, 0, 0);
		x->answer = -ERANGE;
		return 0;
	}
	return answer_of(refuse(s, c, x->seq), &x->answer);
}

static int log_fn(lessor_pg *s, struct pg_conn *c, void *userdata)
{
	struct log_ctx *x = userdata;
	_cleanup_pgresult_ PGresult *res = NULL;
	int r;

	r = pg_query(s, c, &res, false,
	             "WITH u AS (UPDATE lessor_runs SET log_length = $4::bigint + $5::bigint,"
	             "  updated_at = CASE WHEN $5 > 0 THEN lessor_now($1) ELSE updated_at END"
	             "  WHERE seq = $2 AND token = $3 AND status = 'running'"
	             "  AND lease_expires_at > lessor_now($1) AND log_length = $4 RETURNING seq),"
	             " i AS (INSERT INTO lessor_log_chunks (run_seq, start, data)"
	             "  SELECT seq, $4, $6::bytea FROM u WHERE $5 > 0)"
	             " SELECT 1 FROM u",
	             "nisiib", PG_CLOCK(s, x->now), x->seq, x->token, (int64_t)x->start,
	             (int64_t)x->keep, x->data, x->keep);
	if (r < 0)
		return r;
	if (PQntuples(res) != 1)
		return log_refused(s, c, x);
	x->length = x->start + x->keep;
	if (x->keep < x->len)
		x->answer = -EFBIG;
	return 0;
}

int lessor_pg_append_log(void *be, const char *id, const char *token, uint64_t start,
                         const void *data, size_t len, int64_t now, uint64_t *ret_length)
{
	lessor_pg *s = be;
	uint64_t max = s->cfg.max_log_bytes;
	struct log_ctx x = {.token = token, .start = start, .data = data, .len = len, .now = now};
	int r;

	if (lessor_run_id_parse(id, &x.seq) < 0)
		return -ENOENT;
	/* what fits under the cap if start is the log's length (checked in SQL) */
	x.keep = start >= max ? 0 : (size_t)MIN((uint64_t)len, max - start);
	r = pg_run(s, false, false, log_fn, &x);
	if (r < 0)
		return r;
	if (x.answer == 0 || x.answer == -ERANGE || x.answer == -EFBIG)
		*ret_length = x.length;
	return x.answer;
}

/* ---- complete ---- */

struct complete_ctx {
	int64_t seq;
	const struct lessor_completion *in;
	int64_t now;
	const char *run_status;
	int answer;
};

/* A second complete with the token that completed the run gets the same answer. */
static int complete_replay(lessor_pg *s, struct pg_conn *c, struct complete_ctx *x)
{
	_cleanup_pgresult_ PGresult *res = NULL;
	int r;

	r = pg_query(s, c, &res, false,
	             "SELECT answer FROM lessor_leases WHERE token = $1 AND run_seq = $2"
	             " AND end_reason = 'completed'",
	             "si", x->in->token, x->seq);
	if (r < 0 || PQntuples(res) == 0)
		return r;
	x->run_status = lessor_static_run_status(pg_val(res, 0, 0));
	return x->run_status ? 1 : -EIO;
}

/* Back to the queue for a retry, fenced. */
static const char SQL_COMPLETE_RETRY[] =
    "WITH u AS (UPDATE lessor_runs SET status = 'pending', attempts = attempts + 1,"
    "  lease_id = NULL, token = NULL, lease_expires_at = NULL, not_before = $4,"
    "  outcome = $5, reason = $6, exit_code = $7, signal = $8, error = $9,"
    "  retryable = $10::int::boolean, duration_ms = $11, reported_log_length = $12,"
    "  output = $13, updated_at = lessor_now($1)"
    "  WHERE seq = $2 AND token = $3 AND status = 'running' RETURNING seq),"
    " l AS (UPDATE lessor_leases SET ended_at = lessor_now($1), end_reason = 'completed',"
    "  answer = $14 WHERE token = $3 AND EXISTS (SELECT 1 FROM u))"
    " SELECT $15::text, seq FROM u";

/* Finished: the run leaves the hot table, fenced. */
static const char SQL_COMPLETE_DONE[] =
    "WITH d AS (DELETE FROM lessor_runs WHERE seq = $2 AND token = $3 AND status = 'running'"
    "  RETURNING *),"
    " i AS (INSERT INTO lessor_runs_done (seq, status, attempts, lease_expiries,"
    "  cancel_requested, not_before, rejected_writes, log_length, outcome, reason, exit_code,"
    "  signal, error, retryable, duration_ms, reported_log_length, output, updated_at,"
    "  started_at, finished_at) SELECT seq, $15::text, attempts + 1, lease_expiries,"
    "  cancel_requested, $4::bigint, rejected_writes, log_length, $5::text, $6::text,"
    "  $7::integer, $8::text, $9::text, $10::int::boolean, $11::bigint, $12::bigint,"
    "  $13::text, lessor_now($1), started_at, lessor_now($1) FROM d),"
    " l AS (UPDATE lessor_leases SET ended_at = lessor_now($1), end_reason = 'completed',"
    "  answer = $14::text WHERE token = $3 AND EXISTS (SELECT 1 FROM d))"
    " SELECT $15::text, seq FROM d";

static int complete_apply(lessor_pg *s, struct pg_conn *c, struct complete_ctx *x,
                          const PGresult *held)
{
	const struct lessor_completion *in = x->in;
	_cleanup_pgresult_ PGresult *res = NULL;
	int64_t not_before, exit_code = in->exit_code;
	const char *status;
	int r;

	x->run_status = lessor_complete_decide(&s->cfg, pg_int(held, 0, 0), pg_int(held, 0, 1),
	                                       pg_int(held, 0, 2) != 0, in, pg_int(held, 0, 3),
	                                       &status, &not_before);
	r = pg_query(s, c, &res, false,
	             streq(status, "pending") ? SQL_COMPLETE_RETRY : SQL_COMPLETE_DONE,
	             "nisissnsssiisss", PG_CLOCK(s, x->now), x->seq, in->token, not_before,
	             in->status, in->reason, in->has_exit_code ? &exit_code : NULL, in->signal,
	             in->error, in->retryable ? "1" : "0", in->duration_ms, in->log_length,
	             in->output_json, x->run_status, status);
	if (r < 0)
		return r;
	/* the row is locked by this transaction: anything else is a bug */
	return PQntuples(res) == 1 ? 0 : -EIO;
}

static int complete_fn(lessor_pg *s, struct pg_conn *c, void *userdata)
{
	struct complete_ctx *x = userdata;
	_cleanup_pgresult_ PGresult *held = NULL;
	int r;

	x->answer = 0;
	r = complete_replay(s, c, x);
	if (r != 0)
		return r < 0 ? r : 0;
	r = pg_query(s, c, &held, false,
	             "SELECT r.attempts, s.max_attempts, r.cancel_requested::int, lessor_now($1)"
	             " FROM lessor_runs r JOIN lessor_run_specs s ON s.seq = r.seq"
	             " WHERE r.seq = $2 AND r.token = $3 AND r.status = 'running'"
	             " AND r.lease_expires_at > lessor_now($1) FOR UPDATE OF r",
	             "nis", PG_CLOCK(s, x->now), x->seq, x->in->token);
	if (r < 0)
		return r;
	if (PQntuples(held) == 1)
		return complete_apply(s, c, x, held);
	/* The row lock waited for a transaction that has since committed: the
	 * same completion, resent while the first was in flight, is a replay,
	 * seen now (READ COMMITTED: each statement sees what committed before it). */
	r = complete_replay(s, c, x);
	if (r != 0)
		return r < 0 ? r : 0;
	return answer_of(refuse(s, c, x->seq), &x->answer);
}

int lessor_pg_complete(void *be, const char *id, const struct lessor_completion *in, int64_t now,
                       const char **ret_run_status)
{
	struct complete_ctx x = {.in = in, .now = now};
	int r;

	if (lessor_run_id_parse(id, &x.seq) < 0)
		return -ENOENT;
	r = pg_run(be, true, false, complete_fn, &x);
	if (r < 0)
		return r;
	if (x.answer < 0)
		return x.answer;
	*ret_run_status = x.run_status;
	return 0;
}

/* ---- complete many: each as complete_fn, its "next" as claim_fn in a
 * savepoint, all in one transaction ---- */

struct complete_batch_ctx {
	struct lessor_complete_item *v;
	size_t n;
	int64_t now;
};

/* A claim that fails on its own is that entry's claim answer and undoes only
 * itself; a conflict or a lost connection is the whole transaction's. */
static int batch_claim(lessor_pg *s, struct pg_conn *c, struct lessor_complete_item *e, int64_t now)
{
	struct claim_ctx x = {.req = e->next, .now = now, .res = &e->claim};
	int r = pg_exec_plain(c, "SAVEPOINT next_claim");

	if (r < 0)
		return r;
	r = claim_fn(s, c, &x);
	if (r == -EDEADLK || r == -EBUSY)
		return r;
	e->claim_r = r < 0 ? r : x.answer;
	if (e->claim_r < 0)
		lessor_claim_result_done(&e->claim);
	return pg_exec_plain(c, r < 0 ? "ROLLBACK TO SAVEPOINT next_claim"
	                              : "RELEASE SAVEPOINT next_claim");
}

static int batch_entry(lessor_pg *s, struct pg_conn *c, struct lessor_complete_item *e, int64_t now)
{
	struct complete_ctx x = {.in = &e->in, .now = now};
	int r;

	e->answer = 0;
	if (lessor_run_id_parse(e->id, &x.seq) < 0) {
		e->answer = -ENOENT;
		return 0;
	}
	r = complete_fn(s, c, &x);
	if (r < 0)
		return r;
	if (answer_of(x.answer, &e->answer) < 0)
		return x.answer;
	e->run_status = x.run_status;
	return e->answer == 0 && e->next ? batch_claim(s, c, e, now) : 0;
}

/* Run again from the start when the transaction is retried: every answer
 * and every claim is written anew. */
static int complete_batch_fn(lessor_pg *s, struct pg_conn *c, void *userdata)
{
	struct complete_batch_ctx *b = userdata;

	for (size_t i = 0; i < b->n; i++) {
		struct lessor_complete_item *e = &b->v[i];
		int r;

		if (e->skip)
			continue;
		lessor_claim_result_done(&e->claim);
		r = batch_entry(s, c, e, b->now);
		if (r < 0)
			return r;
	}
	return 0;
}

int lessor_pg_complete_batch(void *be, struct lessor_complete_item *v, size_t n, int64_t now)
{
	struct complete_batch_ctx b = {.v = v, .n = n, .now = now};
	int r = pg_run(be, true, false, complete_batch_fn, &b);

	for (size_t i = 0; r < 0 && i < n; i++)
		lessor_claim_result_done(&v[i].claim);
	return r;
}

/* ---- release ---- */

struct release_ctx {
	int64_t seq;
	const char *token, *reason;
	unsigned delay_s;
	int64_t now;
	int answer;
};

static int release_fn(lessor_pg *s, struct pg_conn *c, void *userdata)
{
	struct release_ctx *x = userdata;
	_cleanup_pgresult_ PGresult *res = NULL;
	int r;

	x->answer = 0;
	r = pg_query(
	    s, c, &res, false,
	    "WITH u AS (UPDATE lessor_runs SET status = 'pending', lease_id = NULL,"
	    "  token = NULL, lease_expires_at = NULL,"
	    "  not_before = CASE WHEN $4::bigint > 0 THEN lessor_now($1) + $4 ELSE not_before END,"
	    "  updated_at = lessor_now($1)"
	    "  WHERE seq = $2 AND token = $3 AND status = 'running'"
	    "  AND lease_expires_at > lessor_now($1) RETURNING seq),"
	    " l AS (UPDATE lessor_leases SET ended_at = lessor_now($1),"
	    "  end_reason = 'released', detail = $5"
	    "  WHERE token = $3 AND EXISTS (SELECT 1 FROM u))"
	    " SELECT seq, pg_notify('" PG_CHANNEL "', $6) FROM u",
	    "nisiss", PG_CLOCK(s, x->now), x->seq, x->token, 1000LL * x->delay_s, x->reason,
	    s->instance);
	if (r < 0)
		return r;
	if (PQntuples(res) != 1)
		return answer_of(refuse(s, c, x->seq), &x->answer);
	return 0;
}

int lessor_pg_release(void *be, const char *id, const char *token, const char *reason,
                      unsigned delay_s, int64_t now)
{
	struct release_ctx x = {.token = token, .reason = reason, .delay_s = delay_s, .now = now};
	int r;

	if (lessor_run_id_parse(id, &x.seq) < 0)
		return -ENOENT;
	r = pg_run(be, false, false, release_fn, &x);
	return r < 0 ? r : x.answer;
}

/* ---- admin: cancel, requeue ---- */

struct admin_ctx {
	int64_t seq;
	int64_t now;
	const char *status;
	int answer;
};

/* The status of a run, locking it while it is in the hot table. */
static int admin_lookup(lessor_pg *s, struct pg_conn *c, struct admin_ctx *x)
{
	_cleanup_pgresult_ PGresult *res = NULL, *done = NULL;
	int r;

	x->answer = 0;
	r = pg_query(s, c, &res, false, "SELECT status FROM lessor_runs WHERE seq = $1 FOR UPDATE",
	             "i", x->seq);
	if (r < 0)
		return r;
	if (PQntuples(res) == 0) {
		r = pg_query(s, c, &done, false,
		             "SELECT status FROM lessor_runs_done WHERE seq = $1", "i", x->seq);
		if (r < 0)
			return r;
		if (PQntuples(done) == 0) {
			x->answer = -ENOENT;
			return 0;
		}
	}
	x->status = lessor_static_run_status(pg_val(done ? done : res, 0, 0));
	return x->status ? 0 : -EIO;
}

static int cancel_fn(lessor_pg *s, struct pg_conn *c, void *userdata)
{
	struct admin_ctx *x = userdata;
	int r = admin_lookup(s, c, x);

	if (r < 0 || x->answer < 0)
		return r;
	if (streq(x->status, "running"))
		return pg_query(s, c, NULL, false,
		                "UPDATE lessor_runs SET cancel_requested = true,"
		                " updated_at = lessor_now($1) WHERE seq = $2",
		                "ni", PG_CLOCK(s, x->now), x->seq);
	if (streq(x->status, "pending")) {
		x->status = "cancelled";
		return pg_query(
		    s, c, NULL, false,
		    "WITH d AS (DELETE FROM lessor_runs WHERE seq = $2 AND status = 'pending'"
		    "  RETURNING *)"
		    " INSERT INTO lessor_runs_done (seq, status, attempts, lease_expiries,"
		    "  cancel_requested, not_before, rejected_writes, log_length, outcome, reason,"
		    "  exit_code, signal, error, retryable, duration_ms, reported_log_length, "
		    "output,"
		    "  updated_at, started_at, finished_at) SELECT seq, 'cancelled', attempts,"
		    "  lease_expiries, true, not_before, rejected_writes, log_length, 'cancelled',"
		    "  'cancelled', exit_code, signal, 'cancelled by an operator', retryable,"
		    "  duration_ms, reported_log_length, output, lessor_now($1), started_at,"
		    "  lessor_now($1) FROM d",
		    "ni", PG_CLOCK(s, x->now), x->seq);
	}
	if (!streq(x->status, "cancelled"))
		x->answer = -EBUSY;
	return 0;
}

int lessor_pg_cancel(void *be, const char *id, int64_t now, const char **ret_status)
{
	struct admin_ctx x = {.now = now};
	int r;

	if (lessor_run_id_parse(id, &x.seq) < 0)
		return -ENOENT;
	r = pg_run(be, true, false, cancel_fn, &x);
	if (r < 0)
		return r;
	if (x.answer < 0)
		return x.answer;
	*ret_status = x.status;
	return 0;
}

static int requeue_fn(lessor_pg *s, struct pg_conn *c, void *userdata)
{
	struct admin_ctx *x = userdata;
	int r = admin_lookup(s, c, x);

	if (r < 0 || x->answer < 0)
		return r;
	if (!streq(x->status, "running")) {
		x->answer = -EBUSY;
		return 0;
	}
	return pg_query(s, c, NULL, false,
	                "WITH o AS MATERIALIZED (SELECT seq, lease_id FROM lessor_runs"
	                "  WHERE seq = $2 AND status = 'running'),"
	                " u AS (UPDATE lessor_runs r SET status = 'pending', lease_id = NULL,"
	                "  token = NULL, lease_expires_at = NULL, updated_at = lessor_now($1)"
	                "  FROM o WHERE r.seq = o.seq RETURNING o.lease_id),"
	                " l AS (UPDATE lessor_leases SET ended_at = lessor_now($1),"
	                "  end_reason = 'revoked', detail = 'requeued by an operator'"
	                "  FROM u WHERE lessor_leases.id = u.lease_id)"
	                " SELECT pg_notify('" PG_CHANNEL "', $3) FROM u",
	                "nis", PG_CLOCK(s, x->now), x->seq, s->instance);
}

int lessor_pg_requeue(void *be, const char *id, int64_t now)
{
	struct admin_ctx x = {.now = now};
	int r;

	if (lessor_run_id_parse(id, &x.seq) < 0)
		return -ENOENT;
	r = pg_run(be, true, false, requeue_fn, &x);
	return r < 0 ? r : x.answer;
}

/* ---- housekeeping ---- */

struct tick_ctx {
	int64_t last, now; /* in caller_clock mode; else filled from the database */
	bool wake;
};

/* Expired leases: requeued, or failed after max_lease_expiries.  Locked
 * rows are someone's renewal in flight: next tick. */
static int expire_leases(lessor_pg *s, struct pg_conn *c, struct tick_ctx *x)
{
	_cleanup_pgresult_ PGresult *res = NULL;
	int r;

	r = pg_query(
	    s, c, &res, false,
	    "WITH o AS MATERIALIZED (SELECT seq, lease_id, lease_expiries + 1 AS n"
	    "  FROM lessor_runs WHERE status = 'running' AND lease_expires_at <= lessor_now($1)"
	    "  ORDER BY seq LIMIT $3 FOR UPDATE SKIP LOCKED),"
	    " d AS (DELETE FROM lessor_runs r USING o WHERE r.seq = o.seq AND o.n >= $2"
	    "  RETURNING r.*, o.n),"
	    " f AS (INSERT INTO lessor_runs_done (seq, status, attempts, lease_expiries,"
	    "  cancel_requested, not_before, rejected_writes, log_length, outcome, reason,"
	    "  exit_code, signal, error, retryable, duration_ms, reported_log_length, output,"
	    "  updated_at, started_at, finished_at) SELECT seq, 'failed', attempts, n,"
	    "  cancel_requested, not_before, rejected_writes, log_length, 'failed', "
	    "'lease_expired',"
	    "  NULL, NULL, 'lease expired ' || n || ' times', false, duration_ms,"
	    "  reported_log_length, output, lessor_now($1), started_at, lessor_now($1) FROM d),"
	    " u AS (UPDATE lessor_runs r SET status = 'pending', lease_id = NULL, token = NULL,"
	    "  lease_expires_at = NULL, lease_expiries = o.n, updated_at = lessor_now($1)"
	    "  FROM o WHERE r.seq = o.seq AND o.n < $2 RETURNING r.seq),"
	    " l AS (UPDATE lessor_leases SET ended_at = lessor_now($1), end_reason = 'expired'"
	    "  FROM o WHERE lessor_leases.id = o.lease_id)"
	    " SELECT count(*) FROM u",
	    "nii", PG_CLOCK(s, x->now), (int64_t)s->cfg.max_lease_expiries, (int64_t)REAP_BATCH);
	if (r < 0)
		return r;
	if (pg_int(res, 0, 0) == 0)
		return 0;
	x->wake = true;
	return notify_hint(s, c);
}

/* One reaper at a time across instances: the others skip this part. */
static int reap(lessor_pg *s, struct pg_conn *c, struct tick_ctx *x)
{
	_cleanup_pgresult_ PGresult *lock = NULL;
	int r;

	r = pg_query(s, c, &lock, false, "SELECT pg_try_advisory_xact_lock(1818588019, 1)", "");
	if (r < 0)
		return r;
	if (!pg_int(lock, 0, 0))
		return 0;
	r = expire_leases(s, c, x);
	if (r < 0)
		return r;
	r = pg_query(s, c, NULL, false,
	             "DELETE FROM lessor_claims WHERE created_at < lessor_now($1) - $2", "ni",
	             PG_CLOCK(s, x->now), LESSOR_CLAIM_RECORD_TTL_MS);
	if (r < 0)
		return r;
	return pg_query(s, c, NULL, false,
	                "UPDATE lessor_meta SET reaped_at = lessor_now($1) WHERE id = 1", "n",
	                PG_CLOCK(s, x->now));
}

/* Every instance: did a retry or release delay run out since the last tick
 * (its long polls must look again)?  And, once a second outside the tests,
 * the backstop for lost hints: is anything claimable at all? */
static int due_check(lessor_pg *s, struct pg_conn *c, struct tick_ctx *x)
{
	_cleanup_pgresult_ PGresult *res = NULL;
	int64_t now;
	int r;

	r = pg_query(s, c, &res, false,
	             "SELECT EXISTS (SELECT 1 FROM lessor_runs WHERE status = 'pending'"
	             "  AND not_before > $2 AND not_before <= lessor_now($1)),"
	             " lessor_now($1),"
	             " $3::int = 1 AND EXISTS (SELECT 1 FROM lessor_runs WHERE status = 'pending'"
	             "  AND not_before <= lessor_now($1))",
	             "nii", PG_CLOCK(s, x->now), x->last,
	             (int64_t)(!s->cfg.caller_clock && x->now - s->last_backstop >= BACKSTOP_MS));
	if (r < 0)
		return r;
	now = pg_int(res, 0, 1);
	if (pg_int(res, 0, 0) || pg_int(res, 0, 2))
		x->wake = true;
	if (!s->cfg.caller_clock) {
		if (x->now - s->last_backstop >= BACKSTOP_MS)
			s->last_backstop = now;
		s->last_tick = now;
	}
	return 0;
}

static int tick_fn(lessor_pg *s, struct pg_conn *c, void *userdata)
{
	struct tick_ctx *x = userdata;
	int r;

	x->wake = false;
	r = reap(s, c, x);
	if (r < 0)
		return r;
	return due_check(s, c, x);
}

int lessor_pg_tick(void *be, int64_t last, int64_t now, bool *ret_wake)
{
	lessor_pg *s = be;
	struct tick_ctx x = {.last = last, .now = now};
	int r;

	if (!s->cfg.caller_clock) {
		/* the database's clock: `last` is its time at our previous tick;
		 * x.now only paces the backstop (an estimate is enough) */
		x.last = s->last_tick ? s->last_tick : INT64_MAX;
		x.now = s->last_tick ? s->last_tick + (now - last) : now;
	}
	r = pg_run(s, true, false, tick_fn, &x);
	if (r < 0)
		return r;
	*ret_wake = x.wake;
	return 0;
}

/* After a restart: when no instance has reaped for a while (all were down),
 * every held lease gets its ttl again from now; with another instance alive
 * nothing changes (the fleet was served all along). */
static int recover_fn(lessor_pg *s, struct pg_conn *c, void *userdata)
{
	const int64_t *now = userdata;
	int r;

	r = pg_query(s, c, NULL, false, "SELECT pg_advisory_xact_lock(1818588019, 1)", "");
	if (r < 0)
		return r;
	return pg_query(s, c, NULL, false,
	                "UPDATE lessor_runs r SET lease_expires_at = GREATEST(r.lease_expires_at,"
	                " lessor_now($1) + 1000 * l.ttl_s) FROM lessor_leases l"
	                " WHERE l.id = r.lease_id AND r.status = 'running'"
	                " AND COALESCE((SELECT reaped_at FROM lessor_meta WHERE id = 1), 0)"
	                "  < lessor_now($1) - $2",
	                "ni", PG_CLOCK(s, *now), (int64_t)10000);
}

int lessor_pg_recover(void *be, int64_t now)
{
	return pg_run(be, true, false, recover_fn, &now);
}
