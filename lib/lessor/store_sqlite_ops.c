/* State transitions.  Each public function is one transaction (lessor_db_tx),
 * or one savepoint of a transaction it shares with the writes that arrived
 * with it (group commit, store_sqlite.c).
 * A protocol answer such as "stale token" is not a database failure: the
 * transaction still commits (it may have counted the rejected write), so the
 * op functions return < 0 only for SQLite errors and leave the answer in
 * their context. */
#include "lessor/store_sqlite-int.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/macro.h"
#include "util/strutil.h"

#define REAP_BATCH 256

static int end_lease(lessor_sqlite *s, int64_t lease_id, const char *reason, const char *detail,
                     int64_t now)
{
	return lessor_db_query(s, NULL,
	                       "UPDATE leases SET ended_at = ?, end_reason = ?, detail = ?"
	                       " WHERE id = ?",
	                       "issi", now, reason, detail, lease_id);
}

/* Back to the queue.  Without a delay the run keeps its place (its old
 * not_before, already past); with one it is due, and queued, at now + delay. */
static int to_pending(lessor_sqlite *s, int64_t seq, int64_t delay_ms, int64_t now)
{
	return lessor_db_query(s, NULL,
	                       "UPDATE runs SET status = 'pending', lease_id = NULL,"
	                       " lease_expires_at = NULL,"
	                       " not_before = CASE WHEN ?1 > 0 THEN ?2 + ?1 ELSE not_before END,"
	                       " updated_at = ?2 WHERE seq = ?3",
	                       "iii", delay_ms, now, seq);
}

static int fail_run(lessor_sqlite *s, int64_t seq, const char *reason, const char *error,
                    int64_t now)
{
	return lessor_db_query(
	    s, NULL,
	    "UPDATE runs SET status = 'failed', lease_id = NULL,"
	    " lease_expires_at = NULL, outcome = 'failed', reason = ?, error = ?,"
	    " exit_code = NULL, signal = NULL, retryable = 0,"
	    " updated_at = ?, finished_at = ? WHERE seq = ?",
	    "ssiii", reason, error, now, now, seq);
}

/* ---- the held lease: fencing ---- */

struct held {
	int64_t seq;
	int64_t lease_id;
	int64_t attempts;
	int64_t max_attempts;
	int64_t log_length;
	bool cancel_requested;
};

/* 0 when token is the run's current lease; -ENOENT unknown run; -ESTALE
 * otherwise (ret->seq set), with nothing written. */
static int lease_lookup(lessor_sqlite *s, const char *id, const char *token, int64_t now,
                        struct held *ret)
{
	sqlite3_stmt *st;
	int64_t seq;
	int r;

	if (lessor_run_id_parse(id, &seq) < 0)
		return -ENOENT;
	r = lessor_db_query(s, &st,
	                    "SELECT r.lease_id, l.token, r.attempts, r.max_attempts, r.log_length,"
	                    " r.cancel_requested, r.lease_expires_at FROM runs r"
	                    " LEFT JOIN leases l ON l.id = r.lease_id WHERE r.seq = ?",
	                    "i", seq);
	if (r <= 0)
		return r < 0 ? r : -ENOENT;
	/* past its deadline a lease is lost even before the reaper's next tick */
	if (lessor_db_is_null(st, 0) || lessor_db_int(st, 6) <= now ||
	    !streq_ptr((const char *)sqlite3_column_text(st, 1), token)) {
		ret->seq = seq;
		return -ESTALE;
	}
	*ret = (struct held){
	    .seq = seq,
	    .lease_id = lessor_db_int(st, 0),
	    .attempts = lessor_db_int(st, 2),
	    .max_attempts = lessor_db_int(st, 3),
	    .log_length = lessor_db_int(st, 4),
	    .cancel_requested = lessor_db_int(st, 5) != 0,
	};
	return 0;
}

/* A write with a token that is not the run's lease is counted on the run. */
static int count_refused(lessor_sqlite *s, int64_t seq)
{
	int r = lessor_db_query(s, NULL,
	                        "UPDATE runs SET rejected_writes = rejected_writes + 1"
	                        " WHERE seq = ?",
	                        "i", seq);

	return r < 0 ? r : -ESTALE;
}

/* lease_lookup(), and a refused write counted. */
static int held_lease(lessor_sqlite *s, const char *id, const char *token, int64_t now,
                      struct held *ret)
{
	int r = lease_lookup(s, id, token, now, ret);

	return r == -ESTALE ? count_refused(s, ret->seq) : r;
}

/* Splits held_lease()'s result r into a database error (returned) and a
 * protocol answer (*answer). */
static int answer_split(int r, int *answer)
{
	*answer = r;
	return r == -ENOENT || r == -ESTALE ? 0 : r;
}

static int held_or_answer(lessor_sqlite *s, const char *id, const char *token, int64_t now,
                          struct held *h, int *answer)
{
	return answer_split(held_lease(s, id, token, now, h), answer);
}

/* ---- enqueue ---- */

struct enqueue_ctx {
	const struct lessor_enqueue *e;
	int64_t now;
	int64_t seq;
	bool created;
};

static int enqueue_tx(lessor_sqlite *s, void *userdata)
{
	struct enqueue_ctx *c = userdata;
	const struct lessor_enqueue *e = c->e;
	_cleanup_free_ char *tags = lessor_tags_to_json(e->tags);
	int64_t timeout = e->timeout_s;
	sqlite3_stmt *st;
	int r;

	if (!tags)
		return -ENOMEM;
	if (e->idempotency_key) {
		r = lessor_db_query(s, &st, "SELECT seq FROM runs WHERE idempotency_key = ?", "s",
		                    e->idempotency_key);
		if (r != 0) {
			if (r > 0)
				c->seq = lessor_db_int(st, 0);
			return r < 0 ? r : 0;
		}
	}
	r = lessor_db_query(s, NULL,
	                    "INSERT INTO runs (workflow, input, tags, max_attempts, timeout_s,"
	                    " idempotency_key, status, not_before, created_at, updated_at)"
	                    " VALUES (?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?)",
	                    "sssinsiii", e->workflow, e->input_json, tags, (int64_t)e->max_attempts,
	                    timeout > 0 ? &timeout : NULL, e->idempotency_key, c->now, c->now,
	                    c->now);
	if (r < 0)
		return r;
	c->seq = sqlite3_last_insert_rowid(s->db);
	c->created = true;
	for (size_t i = 0; e->tags && e->tags[i]; i++) {
		r = lessor_db_query(s, NULL, "INSERT INTO run_tags (run_seq, tag) VALUES (?, ?)",
		                    "is", c->seq, e->tags[i]);
		if (r < 0)
			return r;
	}
	return 0;
}

int lessor_sqlite_enqueue(void *be, const struct lessor_enqueue *e, int64_t now,
                          char ret_id[LESSOR_RUN_ID_MAX], bool *ret_created)
{
	lessor_sqlite *s = be;
	struct enqueue_ctx c = {.e = e, .now = now};
	int r = lessor_db_tx(s, true, enqueue_tx, &c);

	if (r < 0)
		return r;
	lessor_run_id_format(ret_id, c.seq);
	*ret_created = c.created;
	return 0;
}

/* ---- claim ---- */

/* ?1 now, ?2 workflows JSON array or NULL, ?3 the worker's tags JSON array */
#define ELIGIBLE_WHERE                                                                             \
	" r.status = 'pending' AND r.not_before <= ?1"                                             \
	" AND (?2 IS NULL OR r.workflow IN (SELECT value FROM json_each(?2)))"                     \
	" AND NOT EXISTS (SELECT 1 FROM run_tags t WHERE t.run_seq = r.seq"                        \
	"   AND t.tag NOT IN (SELECT value FROM json_each(?3)))"

struct claim_ctx {
	const struct lessor_claim_req *req;
	int64_t now;
	struct lessor_claim_result *res;
	int answer;
};

static int grant_push(struct lessor_claim_result *res, sqlite3_stmt *st)
{
	struct lessor_grant *g, *n = realloc(res->runs, (res->n_runs + 1) * sizeof(*n));

	if (!n)
		return -ENOMEM;
	res->runs = n;
	g = &n[res->n_runs];
	*g = (struct lessor_grant){0};
	lessor_run_id_format(g->id, lessor_db_int(st, 0));
	g->workflow = lessor_db_strdup(st, 1);
	g->input_json = lessor_db_strdup(st, 2);
	g->tags_json = lessor_db_strdup(st, 3);
	g->attempt = (unsigned)lessor_db_int(st, 4);
	g->timeout_s = (unsigned)lessor_db_int(st, 5);
	res->n_runs++;
	if (!g->workflow || !g->input_json || !g->tags_json)
		return -ENOMEM;
	return 0;
}

/* A claim_id answered before: return what it still holds, with the leases
 * extended as if granted now (the worker counts from this request's send time). */
static int claim_replay(lessor_sqlite *s, struct claim_ctx *c)
{
	sqlite3_stmt *st;
	int r;

	c->res->replay = true;
	r = lessor_db_query(s, &st,
	                    "SELECT r.seq, r.workflow, r.input, r.tags, l.attempt, r.timeout_s,"
	                    " l.token, l.ttl_s FROM leases l JOIN runs r ON r.seq = l.run_seq"
	                    " WHERE l.claim_id = ? AND r.lease_id = l.id AND r.lease_expires_at > ?"
	                    " ORDER BY r.seq",
	                    "si", c->req->claim_id, c->now);
	for (; r > 0; r = lessor_db_next(s, st)) {
		struct lessor_grant *g;

		r = grant_push(c->res, st);
		if (r < 0)
			return r;
		g = &c->res->runs[c->res->n_runs - 1];
		snprintf(g->token, sizeof(g->token), "%s", sqlite3_column_text(st, 6));
		g->ttl_s = (unsigned)lessor_db_int(st, 7);
	}
	if (r < 0)
		return r;
	for (size_t i = 0; i < c->res->n_runs; i++) {
		int64_t seq;

		(void)lessor_run_id_parse(c->res->runs[i].id, &seq);
		r = lessor_db_query(s, NULL, "UPDATE runs SET lease_expires_at = ? WHERE seq = ?",
		                    "ii", c->now + 1000LL * c->res->runs[i].ttl_s, seq);
		if (r < 0)
			return r;
	}
	return 0;
}

/* 1 when the claim_id was seen before (and handled), 0 when new. */
static int claim_lookup(lessor_sqlite *s, struct claim_ctx *c)
{
	sqlite3_stmt *st;
	int r;

	r = lessor_db_query(s, &st, "SELECT worker_id, cancelled FROM claims WHERE claim_id = ?",
	                    "s", c->req->claim_id);
	if (r <= 0)
		return r;
	if (lessor_db_int(st, 1)) {
		c->res->cancelled = true;
		return 1;
	}
	if (!streq((const char *)sqlite3_column_text(st, 0), c->req->worker_id)) {
		c->answer = -EEXIST;
		return 1;
	}
	r = claim_replay(s, c);
	return r < 0 ? r : 1;
}

static int record_worker(lessor_sqlite *s, struct claim_ctx *c)
{
	const struct lessor_claim_req *q = c->req;

	return lessor_db_query(s, NULL,
	                       "INSERT INTO workers (worker_id, last_claim_at, workflows, tags,"
	                       " max_runs, claims) VALUES (?, ?, ?, ?, ?, 1)"
	                       " ON CONFLICT (worker_id) DO UPDATE SET"
	                       " last_claim_at = excluded.last_claim_at,"
	                       " workflows = excluded.workflows, tags = excluded.tags,"
	                       " max_runs = excluded.max_runs, claims = claims + 1",
	                       "sissi", q->worker_id, c->now, q->workflows_json, q->tags_json,
	                       (int64_t)q->max_runs);
}

static int grant_one(lessor_sqlite *s, struct claim_ctx *c, struct lessor_grant *g)
{
	int64_t seq, lease_id;
	int r;

	(void)lessor_run_id_parse(g->id, &seq);
	g->attempt += 1; /* consumed attempts + 1 */
	g->ttl_s = c->req->ttl_s;
	lessor_new_token(g->token);
	r = lessor_db_query(
	    s, NULL,
	    "INSERT INTO leases (run_seq, token, attempt, worker_id, claim_id, ttl_s,"
	    " granted_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
	    "isissii", seq, g->token, (int64_t)g->attempt, c->req->worker_id, c->req->claim_id,
	    (int64_t)g->ttl_s, c->now);
	if (r < 0)
		return r;
	lease_id = sqlite3_last_insert_rowid(s->db);
	return lessor_db_query(s, NULL,
	                       "UPDATE runs SET status = 'running', lease_id = ?,"
	                       " lease_expires_at = ?, started_at = COALESCE(started_at, ?),"
	                       " updated_at = ? WHERE seq = ?",
	                       "iiiii", lease_id, c->now + 1000LL * g->ttl_s, c->now, c->now, seq);
}

static int claim_new(lessor_sqlite *s, struct claim_ctx *c)
{
	const struct lessor_claim_req *q = c->req;
	sqlite3_stmt *st;
	int r;

	/* collect first: updating rows under an open SELECT on them is undefined */
	r = lessor_db_query(s, &st,
	                    "SELECT r.seq, r.workflow, r.input, r.tags, r.attempts, r.timeout_s"
	                    " FROM runs r WHERE" ELIGIBLE_WHERE
	                    " ORDER BY r.not_before, r.seq LIMIT ?4",
	                    "issi", c->now, q->workflows_json, q->tags_json, (int64_t)q->max_runs);
	for (; r > 0; r = lessor_db_next(s, st))
		if ((r = grant_push(c->res, st)) < 0)
			return r;
	if (r < 0)
		return r;
	sqlite3_reset(st);
	for (size_t i = 0; i < c->res->n_runs; i++)
		if ((r = grant_one(s, c, &c->res->runs[i])) < 0)
			return r;
	if (c->res->n_runs == 0)
		return 0;
	r = lessor_db_query(s, NULL,
	                    "INSERT INTO claims (claim_id, worker_id, created_at) VALUES (?, ?, ?)",
	                    "ssi", q->claim_id, q->worker_id, c->now);
	if (r < 0)
		return r;
	return lessor_db_query(s, NULL,
	                       "UPDATE workers SET runs_granted = runs_granted + ?"
	                       " WHERE worker_id = ?",
	                       "is", (int64_t)c->res->n_runs, q->worker_id);
}

/* How many runs ever left and entered 'pending' (kept by the run_counts
 * triggers, store_sqlite.c). */
static int pending_moves(lessor_sqlite *s, int64_t *ret_left, int64_t *ret_entered)
{
	sqlite3_stmt *st;
	int r =
	    lessor_db_query(s, &st,
	                    "SELECT (SELECT n FROM temp.run_counts WHERE status = 'left_pending'),"
	                    " (SELECT n FROM temp.run_counts WHERE status = 'entered_pending')",
	                    "");

	if (r == 0)
		r = -EIO;
	if (r > 0) {
		*ret_left = lessor_db_int(st, 0);
		*ret_entered = lessor_db_int(st, 1);
	}
	return r < 0 ? r : 0;
}

/* When the first pending run not due at now will be. */
static int due_next(lessor_sqlite *s, int64_t now, int64_t *ret)
{
	sqlite3_stmt *st;
	int r = lessor_db_query(s, &st,
	                        "SELECT MIN(not_before) FROM runs"
	                        " WHERE status = 'pending' AND not_before > ?",
	                        "i", now);

	if (r == 0)
		r = -EIO;
	if (r > 0)
		*ret = lessor_db_is_null(st, 0) ? INT64_MAX : lessor_db_int(st, 0);
	return r < 0 ? r : 0;
}

static struct lessor_depth_memo *memo_find(lessor_sqlite *s, const struct lessor_claim_req *q)
{
	for (size_t i = 0; i < LESSOR_DEPTH_MEMO_MAX; i++) {
		struct lessor_depth_memo *m = &s->depth_memo[i];

		if (m->tags_json && streq(m->tags_json, q->tags_json) &&
		    streq_ptr(m->workflows_json, q->workflows_json))
			return m;
	}
	return NULL;
}

static struct lessor_depth_memo *memo_new(lessor_sqlite *s, const struct lessor_claim_req *q)
{
	struct lessor_depth_memo *m = &s->depth_memo[s->depth_memo_next++ % LESSOR_DEPTH_MEMO_MAX];

	free(m->workflows_json);
	free(m->tags_json);
	*m = (struct lessor_depth_memo){.workflows_json =
	                                    q->workflows_json ? strdup(q->workflows_json) : NULL,
	                                .tags_json = strdup(q->tags_json)};
	if (!m->tags_json || (q->workflows_json && !m->workflows_json)) {
		free(m->workflows_json);
		free(m->tags_json);
		*m = (struct lessor_depth_memo){0};
		return NULL;
	}
	return m;
}

/* The depth the memo m proves, or -1 when it proves nothing.  A filter's
 * eligible runs go away only by leaving 'pending' (not_before only falls
 * behind a clock that goes on), so after d departures at least count - d are
 * left: when that is the cap or more, the answer is the cap.  And when every
 * departure since was a run that claims with this filter took (each one it
 * counted), no run entered 'pending' and none became due, exactly
 * count - granted are left. */
static int64_t memo_depth(const struct lessor_depth_memo *m, int64_t now, int64_t left,
                          int64_t entered)
{
	const int64_t cap = LESSOR_QUEUE_DEPTH_CAP;

	if (!m || now < m->now)
		return -1;
	if (m->count - (left - m->left) >= cap)
		return cap;
	if (m->exact && entered == m->entered && now < m->due_next && left - m->left == m->granted)
		return m->count - m->granted;
	return -1;
}

/* A count of the eligible runs (up to twice the cap), remembered. */
static int count_depth(lessor_sqlite *s, struct claim_ctx *c, int64_t left, int64_t entered)
{
	const int64_t cap = LESSOR_QUEUE_DEPTH_CAP;
	struct lessor_depth_memo *m;
	sqlite3_stmt *st;
	int64_t n, due = 0;
	int r;

	r = lessor_db_query(
	    s, &st, "SELECT COUNT(*) FROM (SELECT 1 FROM runs r WHERE" ELIGIBLE_WHERE " LIMIT ?4)",
	    "issi", c->now, c->req->workflows_json, c->req->tags_json, 2 * cap);
	if (r <= 0)
		return r < 0 ? r : -EIO;
	n = lessor_db_int(st, 0);
	c->res->queue_depth = (uint64_t)MIN(n, cap);
	if ((r = due_next(s, c->now, &due)) < 0)
		return r;
	m = memo_find(s, c->req);
	if (!m && !(m = memo_new(s, c->req)))
		return 0; /* no memory for a memo: the next claim counts */
	*m = (struct lessor_depth_memo){.workflows_json = m->workflows_json,
	                                .tags_json = m->tags_json,
	                                .count = n,
	                                .now = c->now,
	                                .left = left,
	                                .entered = entered,
	                                .due_next = due,
	                                .exact = n < 2 * cap};
	return 0;
}

/* Counting is a scan of the eligible runs, so it stops at a cap; and when the
 * claim got fewer runs than it asked for, nothing eligible is left to count.
 * A memo of the filter's last count spares the scan while it proves the
 * answer (memo_depth): a deep queue is counted once in ~cap claims, and a
 * queue that only this filter's claims drain is counted once. */
static int queue_depth(lessor_sqlite *s, struct claim_ctx *c)
{
	struct lessor_depth_memo *m = memo_find(s, c->req);
	int64_t left = 0, entered = 0, d;
	int r;

	if (m)
		m->granted += (int64_t)c->res->n_runs;
	if (c->res->n_runs < c->req->max_runs)
		return 0;
	if ((r = pending_moves(s, &left, &entered)) < 0)
		return r;
	d = memo_depth(m, c->now, left, entered);
	if (d >= 0) {
		c->res->queue_depth = (uint64_t)d;
		return 0;
	}
	return count_depth(s, c, left, entered);
}

static int claim_tx(lessor_sqlite *s, void *userdata)
{
	struct claim_ctx *c = userdata;
	int r;

	r = claim_lookup(s, c);
	if (r != 0)
		return r < 0 ? r : 0;
	if (c->req->record_worker && (r = record_worker(s, c)) < 0)
		return r;
	r = claim_new(s, c);
	if (r < 0)
		return r;
	return queue_depth(s, c);
}

void lessor_claim_result_done(struct lessor_claim_result *r)
{
	for (size_t i = 0; i < r->n_runs; i++) {
		free(r->runs[i].workflow);
		free(r->runs[i].input_json);
		free(r->runs[i].tags_json);
	}
	free(r->runs);
	*r = (struct lessor_claim_result){0};
}

int lessor_sqlite_claim(void *be, const struct lessor_claim_req *req, int64_t now,
                        struct lessor_claim_result *ret)
{
	lessor_sqlite *s = be;
	struct lessor_claim_result res = {0};
	struct claim_ctx c = {.req = req, .now = now, .res = &res};
	int r = lessor_db_tx(s, true, claim_tx, &c);

	if (r >= 0)
		r = c.answer;
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

static int claim_cancel_tx(lessor_sqlite *s, void *userdata)
{
	struct claim_cancel_ctx *c = userdata;
	int64_t seqs[REAP_BATCH], leases[REAP_BATCH];
	sqlite3_stmt *st;
	size_t n = 0;
	int r;

	r = lessor_db_query(
	    s, NULL,
	    "INSERT INTO claims (claim_id, worker_id, created_at, cancelled)"
	    " VALUES (?, '', ?, 1) ON CONFLICT (claim_id) DO UPDATE SET cancelled = 1",
	    "si", c->claim_id, c->now);
	if (r < 0)
		return r;
	/* max_runs caps a claim at 256 runs, so one batch holds them all */
	r = lessor_db_query(
	    s, &st,
	    "SELECT r.seq, l.id FROM leases l JOIN runs r ON r.seq = l.run_seq"
	    " WHERE l.claim_id = ? AND r.lease_id = l.id AND l.last_renewed_at IS NULL",
	    "s", c->claim_id);
	for (; r > 0 && n < REAP_BATCH; r = lessor_db_next(s, st), n++) {
		seqs[n] = lessor_db_int(st, 0);
		leases[n] = lessor_db_int(st, 1);
	}
	if (r < 0)
		return r;
	sqlite3_reset(st);
	for (size_t i = 0; i < n; i++) {
		r = end_lease(s, leases[i], "cancelled", "claim cancelled", c->now);
		if (r >= 0)
			r = to_pending(s, seqs[i], 0, c->now);
		if (r < 0)
			return r;
	}
	c->released = (unsigned)n;
	return 0;
}

int lessor_sqlite_claim_cancel(void *be, const char *claim_id, int64_t now, unsigned *ret_released)
{
	lessor_sqlite *s = be;
	struct claim_cancel_ctx c = {.claim_id = claim_id, .now = now};
	int r = lessor_db_tx(s, true, claim_cancel_tx, &c);

	if (r < 0)
		return r;
	*ret_released = c.released;
	return 0;
}

/* ---- renew ---- */

struct renew_ctx {
	const char *id, *token;
	unsigned ttl_s;
	int64_t now;
	bool cancel_requested;
	int answer;
};

static int renew_tx(lessor_sqlite *s, void *userdata)
{
	struct renew_ctx *c = userdata;
	struct held h;
	int r = held_or_answer(s, c->id, c->token, c->now, &h, &c->answer);

	if (r < 0 || c->answer < 0)
		return r;
	c->cancel_requested = h.cancel_requested;
	r = lessor_db_query(s, NULL,
	                    "UPDATE leases SET last_renewed_at = ?, ttl_s = ? WHERE id = ?", "iii",
	                    c->now, (int64_t)c->ttl_s, h.lease_id);
	if (r < 0)
		return r;
	return lessor_db_query(s, NULL,
	                       "UPDATE runs SET lease_expires_at = ?, updated_at = ? WHERE seq = ?",
	                       "iii", c->now + 1000LL * c->ttl_s, c->now, h.seq);
}

int lessor_sqlite_renew(void *be, const char *id, const char *token, unsigned ttl_s, int64_t now,
                        bool *ret_cancel_requested)
{
	lessor_sqlite *s = be;
	struct renew_ctx c = {.id = id, .token = token, .ttl_s = ttl_s, .now = now};
	int r = lessor_db_tx(s, true, renew_tx, &c);

	if (r < 0)
		return r;
	if (c.answer < 0)
		return c.answer;
	*ret_cancel_requested = c.cancel_requested;
	return 0;
}

/* ---- renew many: each lease as renew_tx, all in one write ---- */

struct renew_batch_ctx {
	struct lessor_renewal *v;
	size_t n;
	unsigned ttl_s;
	int64_t now;
};

static int renew_batch_tx(lessor_sqlite *s, void *userdata)
{
	struct renew_batch_ctx *b = userdata;

	for (size_t i = 0; i < b->n; i++) {
		struct lessor_renewal *e = &b->v[i];
		struct renew_ctx c = {
		    .id = e->id, .token = e->token, .ttl_s = b->ttl_s, .now = b->now};
		int r;

		if (e->skip)
			continue;
		if ((r = renew_tx(s, &c)) < 0)
			return r;
		e->answer = c.answer;
		e->cancel_requested = c.answer == 0 && c.cancel_requested;
	}
	return 0;
}

int lessor_sqlite_renew_batch(void *be, struct lessor_renewal *v, size_t n, unsigned ttl_s,
                              int64_t now)
{
	struct renew_batch_ctx b = {.v = v, .n = n, .ttl_s = ttl_s, .now = now};

	return lessor_db_tx(be, true, renew_batch_tx, &b);
}

/* ---- cancel events: which held leases' runs were asked to cancel ---- */

struct cancels_ctx {
	const int64_t *seqs;
	char *const *tokens;
	size_t n;
	int64_t now;
	char **out;
};

static int cancels_tx(lessor_sqlite *s, void *userdata)
{
	struct cancels_ctx *c = userdata;

	for (size_t i = 0; i < c->n; i++) {
		char id[LESSOR_RUN_ID_MAX];
		sqlite3_stmt *st;
		int r;

		r = lessor_db_query(s, &st,
		                    "SELECT 1 FROM runs r JOIN leases l ON l.id = r.lease_id"
		                    " WHERE r.seq = ? AND l.token = ? AND r.cancel_requested"
		                    " AND r.lease_expires_at > ?",
		                    "isi", c->seqs[i], c->tokens[i], c->now);
		if (r < 0)
			return r;
		lessor_run_id_format(id, c->seqs[i]);
		if (r > 0 && strv_extend(&c->out, id) < 0)
			return -ENOMEM;
	}
	return 0;
}

int lessor_sqlite_cancels(void *be, const int64_t *seqs, char *const *tokens, size_t n,
                          int64_t now, char ***ret)
{
	struct cancels_ctx c = {.seqs = seqs, .tokens = tokens, .n = n, .now = now};
	int r;

	if (!(c.out = calloc(1, sizeof(char *))))
		return -ENOMEM;
	r = n ? lessor_db_tx(be, false, cancels_tx, &c) : 0;
	if (r < 0) {
		strv_free(c.out);
		return r;
	}
	*ret = c.out;
	return 0;
}

/* ---- log ---- */

struct log_ctx {
	const char *id, *token;
	uint64_t start;
	const void *data;
	size_t len;
	int64_t now;
	uint64_t max;
	uint64_t length;
	int answer;
};

static int log_tx(lessor_sqlite *s, void *userdata)
{
	struct log_ctx *c = userdata;
	struct held h;
	uint64_t keep;
	int r = held_or_answer(s, c->id, c->token, c->now, &h, &c->answer);

	if (r < 0 || c->answer < 0)
		return r;
	c->length = (uint64_t)h.log_length;
	if (c->start != c->length) {
		c->answer = -ERANGE;
		return 0;
	}
	keep = c->length >= c->max ? 0 : MIN((uint64_t)c->len, c->max - c->length);
	if (keep < c->len)
		c->answer = -EFBIG;
	if (keep == 0)
		return 0;
	r = lessor_db_query(s, NULL,
	                    "INSERT INTO log_chunks (run_seq, start, data) VALUES (?, ?, ?)", "iib",
	                    h.seq, (int64_t)c->start, c->data, (size_t)keep);
	if (r < 0)
		return r;
	c->length += keep;
	return lessor_db_query(s, NULL,
	                       "UPDATE runs SET log_length = ?, updated_at = ? WHERE seq = ?",
	                       "iii", (int64_t)c->length, c->now, h.seq);
}

int lessor_sqlite_append_log(void *be, const char *id, const char *token, uint64_t start,
                             const void *data, size_t len, int64_t now, uint64_t *ret_length)
{
	lessor_sqlite *s = be;
	struct log_ctx c = {.id = id,
	                    .token = token,
	                    .start = start,
	                    .data = data,
	                    .len = len,
	                    .now = now,
	                    .max = s->cfg.max_log_bytes};
	int r = lessor_db_tx(s, true, log_tx, &c);

	if (r < 0)
		return r;
	if (c.answer == 0 || c.answer == -ERANGE || c.answer == -EFBIG)
		*ret_length = c.length;
	return c.answer;
}

/* ---- complete ---- */

struct complete_ctx {
	const char *id;
	const struct lessor_completion *in;
	int64_t now;
	const char *run_status;
	int answer;
};

/* A second complete with the token that completed run seq gets the same answer. */
static int complete_replay(lessor_sqlite *s, struct complete_ctx *c, int64_t seq)
{
	sqlite3_stmt *st;
	int r = lessor_db_query(s, &st,
	                        "SELECT answer FROM leases WHERE run_seq = ? AND token = ?"
	                        " AND end_reason = 'completed'",
	                        "is", seq, c->in->token);
	if (r <= 0)
		return r;
	c->run_status = lessor_static_run_status((const char *)sqlite3_column_text(st, 0));
	return c->run_status ? 1 : -EIO;
}

static int complete_apply(lessor_sqlite *s, struct complete_ctx *c, const struct held *h)
{
	const struct lessor_completion *in = c->in;
	const char *status;
	int64_t not_before, exit_code = in->exit_code, finished = c->now;
	int r;

	c->run_status =
	    lessor_complete_decide(&s->cfg, h->attempts, h->max_attempts, h->cancel_requested, in,
	                           c->now, &status, &not_before);
	r = lessor_db_query(
	    s, NULL,
	    "UPDATE runs SET status = ?, attempts = attempts + 1, lease_id = NULL,"
	    " lease_expires_at = NULL, not_before = ?, outcome = ?, reason = ?, exit_code = ?,"
	    " signal = ?, error = ?, retryable = ?, duration_ms = ?, reported_log_length = ?,"
	    " output = ?, updated_at = ?, finished_at = ? WHERE seq = ?",
	    "sissnssiiisini", status, not_before, in->status, in->reason,
	    in->has_exit_code ? &exit_code : NULL, in->signal, in->error, (int64_t)in->retryable,
	    in->duration_ms, in->log_length, in->output_json, c->now,
	    streq(status, "pending") ? NULL : &finished, h->seq);
	if (r < 0)
		return r;
	return lessor_db_query(
	    s, NULL,
	    "UPDATE leases SET ended_at = ?, end_reason = 'completed', answer = ?"
	    " WHERE id = ?",
	    "isi", c->now, c->run_status, h->lease_id);
}

static int complete_tx(lessor_sqlite *s, void *userdata)
{
	struct complete_ctx *c = userdata;
	struct held h;
	int r;

	/* The run's current lease cannot have completed it: a repeat is looked
	 * for only when the token is not that (one query less per completion). */
	r = lease_lookup(s, c->id, c->in->token, c->now, &h);
	if (r == -ESTALE) {
		r = complete_replay(s, c, h.seq);
		if (r != 0)
			return r < 0 ? r : 0;
		r = count_refused(s, h.seq);
	}
	r = answer_split(r, &c->answer);
	if (r < 0 || c->answer < 0)
		return r;
	return complete_apply(s, c, &h);
}

int lessor_sqlite_complete(void *be, const char *id, const struct lessor_completion *in,
                           int64_t now, const char **ret_run_status)
{
	lessor_sqlite *s = be;
	struct complete_ctx c = {.id = id, .in = in, .now = now};
	int r = lessor_db_tx(s, true, complete_tx, &c);

	if (r < 0)
		return r;
	if (c.answer < 0)
		return c.answer;
	*ret_run_status = c.run_status;
	return 0;
}

/* ---- a claim riding on another write ---- */

/* The claim next in a savepoint of its own, after the write it rides on (a
 * completion, an enqueue): *ret_claim_r is its result (its grants freed when
 * < 0).  Returns < 0 only when that took the whole transaction with it. */
static int claim_in_savepoint(lessor_sqlite *s, struct claim_ctx *next, int *ret_claim_r)
{
	bool lost;
	int r = lessor_db_nested(s, claim_tx, next, &lost);

	if (r >= 0)
		r = next->answer;
	if (r < 0)
		lessor_claim_result_done(next->res);
	*ret_claim_r = r;
	return lost ? r : 0;
}

/* ---- complete and the claim of its "next" ---- */

struct complete_claim_ctx {
	struct complete_ctx done;
	struct claim_ctx next;
	int claim_r;
};

static int complete_claim_tx(lessor_sqlite *s, void *userdata)
{
	struct complete_claim_ctx *c = userdata;
	int r = complete_tx(s, &c->done);

	if (r < 0 || c->done.answer < 0)
		return r;
	return claim_in_savepoint(s, &c->next, &c->claim_r);
}

int lessor_sqlite_complete_claim(void *be, const char *id, const struct lessor_completion *in,
                                 const struct lessor_claim_req *next, int64_t now,
                                 const char **ret_run_status, int *ret_claim_r,
                                 struct lessor_claim_result *ret_claim)
{
	struct lessor_claim_result res = {0};
	struct complete_claim_ctx c = {.done = {.id = id, .in = in, .now = now},
	                               .next = {.req = next, .now = now, .res = &res}};
	int r = lessor_db_tx(be, true, complete_claim_tx, &c);

	if (r >= 0 && c.done.answer < 0)
		r = c.done.answer;
	if (r < 0) {
		lessor_claim_result_done(&res);
		return r;
	}
	*ret_run_status = c.done.run_status;
	*ret_claim_r = c.claim_r;
	*ret_claim = res;
	return 0;
}

/* ---- complete many, each as complete_tx (with its "next" as
 * complete_claim_tx), all in one write ---- */

struct complete_batch_ctx {
	struct lessor_complete_item *v;
	size_t n;
	int64_t now;
};

static int complete_batch_tx(lessor_sqlite *s, void *userdata)
{
	struct complete_batch_ctx *b = userdata;

	for (size_t i = 0; i < b->n; i++) {
		struct lessor_complete_item *e = &b->v[i];
		struct complete_claim_ctx c = {
		    .done = {.id = e->id, .in = &e->in, .now = b->now},
		    .next = {.req = e->next, .now = b->now, .res = &e->claim}};
		int r;

		if (e->skip)
			continue;
		r = e->next ? complete_claim_tx(s, &c) : complete_tx(s, &c.done);
		if (r < 0)
			return r;
		e->answer = c.done.answer;
		e->run_status = c.done.run_status;
		e->claim_r = c.claim_r;
	}
	return 0;
}

int lessor_sqlite_complete_batch(void *be, struct lessor_complete_item *v, size_t n, int64_t now)
{
	struct complete_batch_ctx b = {.v = v, .n = n, .now = now};
	int r = lessor_db_tx(be, true, complete_batch_tx, &b);

	for (size_t i = 0; r < 0 && i < n; i++)
		lessor_claim_result_done(&v[i].claim);
	return r;
}

/* ---- enqueue and the claim it is handed to ---- */

struct enqueue_claim_ctx {
	struct enqueue_ctx run;
	struct claim_ctx next;
	int claim_r;
};

static int enqueue_claim_tx(lessor_sqlite *s, void *userdata)
{
	struct enqueue_claim_ctx *c = userdata;
	int r = enqueue_tx(s, &c->run);

	if (r < 0 || !c->run.created)
		return r;
	return claim_in_savepoint(s, &c->next, &c->claim_r);
}

int lessor_sqlite_enqueue_claim(void *be, const struct lessor_enqueue *e,
                                const struct lessor_claim_req *next, int64_t now,
                                char ret_id[LESSOR_RUN_ID_MAX], bool *ret_created, int *ret_claim_r,
                                struct lessor_claim_result *ret_claim)
{
	struct lessor_claim_result res = {0};
	struct enqueue_claim_ctx c = {.run = {.e = e, .now = now},
	                              .next = {.req = next, .now = now, .res = &res},
	                              .claim_r = -EALREADY};
	int r = lessor_db_tx(be, true, enqueue_claim_tx, &c);

	if (r < 0) {
		lessor_claim_result_done(&res);
		return r;
	}
	lessor_run_id_format(ret_id, c.run.seq);
	*ret_created = c.run.created;
	*ret_claim_r = c.claim_r;
	*ret_claim = res;
	return 0;
}

/* ---- release ---- */

struct release_ctx {
	const char *id, *token, *reason;
	unsigned delay_s;
	int64_t now;
	int answer;
};

static int release_tx(lessor_sqlite *s, void *userdata)
{
	struct release_ctx *c = userdata;
	struct held h;
	int r = held_or_answer(s, c->id, c->token, c->now, &h, &c->answer);

	if (r < 0 || c->answer < 0)
		return r;
	r = end_lease(s, h.lease_id, "released", c->reason, c->now);
	if (r < 0)
		return r;
	return to_pending(s, h.seq, 1000LL * c->delay_s, c->now);
}

int lessor_sqlite_release(void *be, const char *id, const char *token, const char *reason,
                          unsigned delay_s, int64_t now)
{
	lessor_sqlite *s = be;
	struct release_ctx c = {
	    .id = id, .token = token, .reason = reason, .delay_s = delay_s, .now = now};
	int r = lessor_db_tx(s, true, release_tx, &c);

	return r < 0 ? r : c.answer;
}

/* ---- admin: cancel, requeue ---- */

struct admin_ctx {
	const char *id;
	int64_t now;
	const char *status;
	int answer;
};

/* Reads status and lease of the run named by c->id. */
static int admin_lookup(lessor_sqlite *s, struct admin_ctx *c, int64_t *ret_seq,
                        int64_t *ret_lease_id)
{
	sqlite3_stmt *st;
	int r;

	if (lessor_run_id_parse(c->id, ret_seq) < 0) {
		c->answer = -ENOENT;
		return 0;
	}
	r = lessor_db_query(s, &st, "SELECT status, lease_id FROM runs WHERE seq = ?", "i",
	                    *ret_seq);
	if (r <= 0) {
		c->answer = -ENOENT;
		return r;
	}
	c->status = lessor_static_run_status((const char *)sqlite3_column_text(st, 0));
	if (!c->status)
		return -EIO;
	*ret_lease_id = lessor_db_int(st, 1);
	return 0;
}

static int cancel_tx(lessor_sqlite *s, void *userdata)
{
	struct admin_ctx *c = userdata;
	int64_t seq, lease_id;
	int r = admin_lookup(s, c, &seq, &lease_id);

	if (r < 0 || c->answer < 0)
		return r;
	if (streq(c->status, "running"))
		return lessor_db_query(s, NULL,
		                       "UPDATE runs SET cancel_requested = 1, updated_at = ?"
		                       " WHERE seq = ?",
		                       "ii", c->now, seq);
	if (streq(c->status, "pending")) {
		c->status = "cancelled";
		return lessor_db_query(
		    s, NULL,
		    "UPDATE runs SET status = 'cancelled', outcome = 'cancelled',"
		    " reason = 'cancelled', error = 'cancelled by an operator',"
		    " cancel_requested = 1, updated_at = ?, finished_at = ?"
		    " WHERE seq = ?",
		    "iii", c->now, c->now, seq);
	}
	if (!streq(c->status, "cancelled"))
		c->answer = -EBUSY;
	return 0;
}

int lessor_sqlite_cancel(void *be, const char *id, int64_t now, const char **ret_status)
{
	lessor_sqlite *s = be;
	struct admin_ctx c = {.id = id, .now = now};
	int r = lessor_db_tx(s, true, cancel_tx, &c);

	if (r < 0)
		return r;
	if (c.answer < 0)
		return c.answer;
	*ret_status = c.status;
	return 0;
}

static int requeue_tx(lessor_sqlite *s, void *userdata)
{
	struct admin_ctx *c = userdata;
	int64_t seq, lease_id;
	int r = admin_lookup(s, c, &seq, &lease_id);

	if (r < 0 || c->answer < 0)
		return r;
	if (!streq(c->status, "running")) {
		c->answer = -EBUSY;
		return 0;
	}
	r = end_lease(s, lease_id, "revoked", "requeued by an operator", c->now);
	if (r < 0)
		return r;
	return to_pending(s, seq, 0, c->now);
}

int lessor_sqlite_requeue(void *be, const char *id, int64_t now)
{
	lessor_sqlite *s = be;
	struct admin_ctx c = {.id = id, .now = now};
	int r = lessor_db_tx(s, true, requeue_tx, &c);

	return r < 0 ? r : c.answer;
}

/* ---- housekeeping ---- */

struct tick_ctx {
	int64_t last, now;
	unsigned max_expiries;
	bool wake;
};

static int expire_one(lessor_sqlite *s, struct tick_ctx *c, int64_t seq, int64_t lease_id,
                      int64_t expiries)
{
	char error[96];
	int r;

	r = end_lease(s, lease_id, "expired", NULL, c->now);
	if (r < 0)
		return r;
	r = lessor_db_query(s, NULL, "UPDATE runs SET lease_expiries = ? WHERE seq = ?", "ii",
	                    expiries, seq);
	if (r < 0)
		return r;
	if (expiries >= (int64_t)c->max_expiries) {
		snprintf(error, sizeof(error), "lease expired %" PRId64 " times", expiries);
		return fail_run(s, seq, "lease_expired", error, c->now);
	}
	c->wake = true;
	return to_pending(s, seq, 0, c->now);
}

static int expire_leases(lessor_sqlite *s, struct tick_ctx *c)
{
	int64_t seqs[REAP_BATCH], leases[REAP_BATCH], expiries[REAP_BATCH];
	sqlite3_stmt *st;
	size_t n = 0;
	int r;

	r = lessor_db_query(s, &st,
	                    "SELECT seq, lease_id, lease_expiries FROM runs"
	                    " WHERE status = 'running' AND lease_expires_at <= ? LIMIT ?",
	                    "ii", c->now, (int64_t)REAP_BATCH);
	for (; r > 0; r = lessor_db_next(s, st), n++) {
		seqs[n] = lessor_db_int(st, 0);
		leases[n] = lessor_db_int(st, 1);
		expiries[n] = lessor_db_int(st, 2) + 1;
	}
	if (r < 0)
		return r;
	sqlite3_reset(st);
	for (size_t i = 0; i < n; i++)
		if ((r = expire_one(s, c, seqs[i], leases[i], expiries[i])) < 0)
			return r;
	return 0;
}

static int tick_tx(lessor_sqlite *s, void *userdata)
{
	struct tick_ctx *c = userdata;
	sqlite3_stmt *st;
	int r;

	r = expire_leases(s, c);
	if (r < 0)
		return r;
	/* a retry backoff or release delay that ran out makes a run claimable */
	r = lessor_db_query(s, &st,
	                    "SELECT EXISTS (SELECT 1 FROM runs WHERE status = 'pending'"
	                    " AND not_before > ? AND not_before <= ?)",
	                    "ii", c->last, c->now);
	if (r < 0)
		return r;
	if (r > 0 && lessor_db_int(st, 0))
		c->wake = true;
	sqlite3_reset(st);
	return lessor_db_query(s, NULL, "DELETE FROM claims WHERE created_at < ?", "i",
	                       c->now - LESSOR_CLAIM_RECORD_TTL_MS);
}

int lessor_sqlite_tick(void *be, int64_t last, int64_t now, bool *ret_wake)
{
	lessor_sqlite *s = be;
	struct tick_ctx c = {.last = last, .now = now, .max_expiries = s->cfg.max_lease_expiries};
	int r = lessor_db_tx(s, true, tick_tx, &c);

	if (r < 0)
		return r;
	*ret_wake = c.wake;
	return 0;
}

static int recover_tx(lessor_sqlite *s, void *userdata)
{
	const int64_t *now = userdata;

	return lessor_db_query(s, NULL,
	                       "UPDATE runs SET lease_expires_at = MAX(lease_expires_at,"
	                       " ?1 + 1000 * (SELECT ttl_s FROM leases WHERE id = runs.lease_id))"
	                       " WHERE status = 'running'",
	                       "i", *now);
}

int lessor_sqlite_recover(void *be, int64_t now)
{
	lessor_sqlite *s = be;
	return lessor_db_tx(s, true, recover_tx, &now);
}
