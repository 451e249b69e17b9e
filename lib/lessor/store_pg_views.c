/* The PostgreSQL backend's read-only views, as JSON for the admin API.  A
 * view with several queries runs in one REPEATABLE READ READ ONLY
 * transaction, so it is a consistent snapshot. */
#include "lessor/store_pg-int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/buf.h"
#include "util/strutil.h"

#define LIST_MAX 1000
#define WORKERS_MAX 1000

static int add_columns(cJSON *o, const PGresult *res, int row, const struct lessor_col *cols,
                       size_t n)
{
	for (size_t i = 0; i < n; i++) {
		cJSON *v;

		if (!cols[i].name)
			continue;
		v = lessor_col_value_text(pg_val(res, row, (int)i), cols[i].kind);
		if (!v || !cJSON_AddItemToObject(o, cols[i].name, v)) {
			cJSON_Delete(v);
			return -ENOMEM;
		}
	}
	return 0;
}

static int add_rows(cJSON *a, const PGresult *res, const struct lessor_col *cols, size_t n)
{
	for (int row = 0; row < PQntuples(res); row++) {
		cJSON *o = cJSON_CreateObject();
		int r;

		if (!o || !cJSON_AddItemToArray(a, o)) {
			cJSON_Delete(o);
			return -ENOMEM;
		}
		r = add_columns(o, res, row, cols, n);
		if (r < 0)
			return r;
	}
	return 0;
}

/* ---- one run ---- */

static const char SQL_RUN[] =
    "SELECT seq, workflow, status, input, tags, max_attempts, timeout_s, idempotency_key,"
    " (SELECT COALESCE(MAX(attempt), 0) FROM lessor_leases WHERE run_seq = $1), attempts,"
    " lease_expiries, cancel_requested::int, not_before, lease_expires_at, rejected_writes,"
    " log_length, outcome, reason, exit_code, signal, error, retryable::int, duration_ms,"
    " reported_log_length, output, created_at, updated_at, started_at, finished_at"
    " FROM lessor_runs_all WHERE seq = $1";

static const char SQL_HOLDER[] =
    "SELECT l.attempt, l.worker_id, l.claim_id, l.ttl_s, l.granted_at, l.last_renewed_at,"
    " l.ended_at, l.end_reason, l.detail FROM lessor_runs r JOIN lessor_leases l"
    " ON l.id = r.lease_id WHERE r.seq = $1";

static const char SQL_LEASES[] =
    "SELECT attempt, worker_id, claim_id, ttl_s, granted_at, last_renewed_at, ended_at,"
    " end_reason, detail FROM lessor_leases WHERE run_seq = $1 ORDER BY id";

struct run_view_ctx {
	int64_t seq;
	cJSON *out;
};

static int add_holder(lessor_pg *s, struct pg_conn *c, cJSON *o, int64_t seq)
{
	_cleanup_pgresult_ PGresult *res = NULL;
	cJSON *holder;
	int r;

	r = pg_query(s, c, &res, false, SQL_HOLDER, "i", seq);
	if (r < 0)
		return r;
	if (PQntuples(res) == 0)
		holder = cJSON_CreateNull();
	else if ((holder = cJSON_CreateObject()) &&
	         add_columns(holder, res, 0, lessor_lease_cols, ELEMENTSOF(lessor_lease_cols)) <
	             0) {
		cJSON_Delete(holder);
		return -ENOMEM;
	}
	if (!holder || !cJSON_AddItemToObject(o, "lease", holder)) {
		cJSON_Delete(holder);
		return -ENOMEM;
	}
	return 0;
}

static int run_view_fn(lessor_pg *s, struct pg_conn *c, void *userdata)
{
	struct run_view_ctx *x = userdata;
	_cleanup_pgresult_ PGresult *run = NULL, *leases = NULL;
	cJSON *a;
	int r;

	cJSON_Delete(x->out);
	x->out = NULL;
	r = pg_query(s, c, &run, false, SQL_RUN, "i", x->seq);
	if (r < 0)
		return r;
	if (PQntuples(run) == 0)
		return -ENOENT;
	x->out = cJSON_CreateObject();
	if (!x->out)
		return -ENOMEM;
	r = add_columns(x->out, run, 0, lessor_run_cols, ELEMENTSOF(lessor_run_cols));
	if (r < 0)
		return r;
	r = add_holder(s, c, x->out, x->seq);
	if (r < 0)
		return r;
	a = cJSON_AddArrayToObject(x->out, "leases");
	if (!a)
		return -ENOMEM;
	r = pg_query(s, c, &leases, false, SQL_LEASES, "i", x->seq);
	if (r < 0)
		return r;
	return add_rows(a, leases, lessor_lease_cols, ELEMENTSOF(lessor_lease_cols));
}

int lessor_pg_run_json(void *be, const char *id, cJSON **ret)
{
	struct run_view_ctx x = {0};
	int r;

	if (lessor_run_id_parse(id, &x.seq) < 0)
		return -ENOENT;
	r = pg_run(be, true, true, run_view_fn, &x);
	if (r < 0) {
		cJSON_Delete(x.out);
		return r;
	}
	*ret = x.out;
	return 0;
}

/* ---- lists ---- */

struct list_ctx {
	const char *status, *workflow;
	int64_t limit;
	cJSON *runs;
};

static int list_fn(lessor_pg *s, struct pg_conn *c, void *userdata)
{
	struct list_ctx *x = userdata;
	_cleanup_pgresult_ PGresult *res = NULL;
	int r;

	r = pg_query(s, c, &res, false,
	             "SELECT r.seq, r.workflow, r.status,"
	             " (SELECT COALESCE(MAX(attempt), 0) FROM lessor_leases WHERE run_seq = r.seq),"
	             " r.max_attempts, r.tags, l.worker_id, r.outcome, r.exit_code,"
	             " r.cancel_requested::int, r.created_at, r.updated_at, r.reason, r.signal"
	             " FROM lessor_runs_all r LEFT JOIN lessor_leases l ON l.id = r.lease_id"
	             " WHERE ($1::text IS NULL OR r.status = $1)"
	             " AND ($2::text IS NULL OR r.workflow = $2)"
	             " ORDER BY r.seq DESC LIMIT $3",
	             "ssi", x->status, x->workflow, x->limit);
	if (r < 0)
		return r;
	return add_rows(x->runs, res, lessor_list_cols, ELEMENTSOF(lessor_list_cols));
}

int lessor_pg_list_json(void *be, const char *status, const char *workflow, unsigned limit,
                        cJSON **ret)
{
	cJSON *o = cJSON_CreateObject();
	struct list_ctx x = {.status = status,
	                     .workflow = workflow,
	                     .limit = CLAMP((int64_t)limit, 1, LIST_MAX),
	                     .runs = o ? cJSON_AddArrayToObject(o, "runs") : NULL};
	int r;

	if (!x.runs) {
		cJSON_Delete(o);
		return -ENOMEM;
	}
	r = pg_run(be, false, false, list_fn, &x);
	if (r < 0) {
		cJSON_Delete(o);
		return r;
	}
	*ret = o;
	return 0;
}

static int stats_fn(lessor_pg *s, struct pg_conn *c, void *userdata)
{
	static const char *const names[] = {"pending", "running", "succeeded", "failed",
	                                    "cancelled"};
	cJSON *o = userdata;
	int64_t counts[ELEMENTSOF(names)] = {0}, total = 0;
	_cleanup_pgresult_ PGresult *res = NULL;
	int r;

	r = pg_query(s, c, &res, false,
	             "SELECT status, count(*) FROM lessor_runs GROUP BY status UNION ALL"
	             " SELECT status, count(*) FROM lessor_runs_done GROUP BY status",
	             "");
	if (r < 0)
		return r;
	for (int row = 0; row < PQntuples(res); row++)
		for (size_t i = 0; i < ELEMENTSOF(names); i++)
			if (streq_ptr(pg_val(res, row, 0), names[i]))
				counts[i] += pg_int(res, row, 1);
	for (size_t i = 0; i < ELEMENTSOF(names); i++) {
		total += counts[i];
		if (!cJSON_AddNumberToObject(o, names[i], (double)counts[i]))
			return -ENOMEM;
	}
	return cJSON_AddNumberToObject(o, "total", (double)total) ? 0 : -ENOMEM;
}

static int workers_fn(lessor_pg *s, struct pg_conn *c, void *userdata)
{
	cJSON *a = cJSON_AddArrayToObject(userdata, "workers");
	_cleanup_pgresult_ PGresult *res = NULL;
	int r;

	if (!a)
		return -ENOMEM;
	r = pg_query(s, c, &res, false,
	             "SELECT w.worker_id, w.last_claim_at, w.workflows, w.tags, w.max_runs,"
	             " w.claims, w.runs_granted, (SELECT count(*) FROM lessor_runs r"
	             " JOIN lessor_leases l ON l.id = r.lease_id WHERE r.status = 'running'"
	             " AND l.worker_id = w.worker_id)"
	             " FROM lessor_workers w ORDER BY w.last_claim_at DESC LIMIT $1",
	             "i", (int64_t)WORKERS_MAX);
	if (r < 0)
		return r;
	return add_rows(a, res, lessor_worker_cols, ELEMENTSOF(lessor_worker_cols));
}

static int object_view(lessor_pg *s, pg_fn fn, cJSON **ret)
{
	cJSON *o = cJSON_CreateObject();
	int r;

	if (!o)
		return -ENOMEM;
	r = pg_run(s, false, false, fn, o);
	if (r < 0) {
		cJSON_Delete(o);
		return r;
	}
	*ret = o;
	return 0;
}

int lessor_pg_stats_json(void *be, cJSON **ret)
{
	return object_view(be, stats_fn, ret);
}

int lessor_pg_workers_json(void *be, cJSON **ret)
{
	return object_view(be, workers_fn, ret);
}

/* ---- log ---- */

struct read_log_ctx {
	int64_t seq;
	struct buf b;
};

static int read_log_fn(lessor_pg *s, struct pg_conn *c, void *userdata)
{
	struct read_log_ctx *x = userdata;
	_cleanup_pgresult_ PGresult *run = NULL, *res = NULL;
	int r;

	x->b.len = 0;
	r = pg_query(s, c, &run, false, "SELECT 1 FROM lessor_run_specs WHERE seq = $1", "i",
	             x->seq);
	if (r < 0)
		return r;
	if (PQntuples(run) == 0)
		return -ENOENT;
	r = pg_query(s, c, &res, true,
	             "SELECT data FROM lessor_log_chunks WHERE run_seq = $1 ORDER BY start", "i",
	             x->seq);
	if (r < 0)
		return r;
	for (int row = 0; row < PQntuples(res); row++) {
		r = buf_append(&x->b, PQgetvalue(res, row, 0), (size_t)PQgetlength(res, row, 0));
		if (r < 0)
			return r;
	}
	return 0;
}

int lessor_pg_read_log(void *be, const char *id, char **ret, size_t *ret_len)
{
	struct read_log_ctx x = {.b = BUF_INIT(0)};
	int r;

	if (lessor_run_id_parse(id, &x.seq) < 0)
		return -ENOENT;
	r = pg_run(be, true, true, read_log_fn, &x);
	if (r >= 0)
		r = buf_append(&x.b, "", 0);
	if (r < 0) {
		buf_done(&x.b);
		return r;
	}
	*ret_len = x.b.len;
	*ret = buf_steal(&x.b);
	return 0;
}

/* ---- ownership ---- */

struct owner_ctx {
	int64_t seq; /* 0: a claim */
	const char *key;
	char *worker_id;
};

static int owner_fn(lessor_pg *s, struct pg_conn *c, void *userdata)
{
	struct owner_ctx *x = userdata;
	_cleanup_pgresult_ PGresult *res = NULL;
	int r;

	r = x->seq > 0
	        ? pg_query(s, c, &res, false,
	                   "SELECT worker_id FROM lessor_leases"
	                   " WHERE run_seq = $1 AND token = $2",
	                   "is", x->seq, x->key)
	        : pg_query(s, c, &res, false,
	                   "SELECT worker_id FROM lessor_claims WHERE claim_id = $1", "s", x->key);
	if (r < 0)
		return r;
	if (PQntuples(res) == 0)
		return -ENOENT;
	free(x->worker_id);
	x->worker_id = pg_strdup(res, 0, 0);
	return x->worker_id ? 0 : -ENOMEM;
}

static int owner_view(lessor_pg *s, struct owner_ctx *x, char **ret)
{
	int r = pg_run(s, false, false, owner_fn, x);

	if (r < 0) {
		free(x->worker_id);
		return r;
	}
	*ret = x->worker_id;
	return 0;
}

int lessor_pg_lease_holder(void *be, int64_t seq, const char *lease_token, char **ret_worker_id)
{
	struct owner_ctx x = {.seq = seq, .key = lease_token};

	return owner_view(be, &x, ret_worker_id);
}

int lessor_pg_claim_owner(void *be, const char *claim_id, char **ret_worker_id)
{
	struct owner_ctx x = {.key = claim_id};

	return owner_view(be, &x, ret_worker_id);
}

/* ---- cancel events: which held leases' runs were asked to cancel ---- */

struct cancels_ctx {
	const int64_t *seqs;
	char *const *tokens;
	size_t n;
	int64_t now;
	char **out;
};

static int cancels_fn(lessor_pg *s, struct pg_conn *c, void *userdata)
{
	struct cancels_ctx *x = userdata;

	for (size_t i = 0; i < x->n; i++) {
		_cleanup_pgresult_ PGresult *res = NULL;
		char id[LESSOR_RUN_ID_MAX];
		int r;

		r = pg_query(s, c, &res, false,
		             "SELECT 1 FROM lessor_runs WHERE seq = $2 AND token = $3"
		             " AND status = 'running' AND cancel_requested"
		             " AND lease_expires_at > lessor_now($1)",
		             "nis", PG_CLOCK(s, x->now), x->seqs[i], x->tokens[i]);
		if (r < 0)
			return r;
		if (PQntuples(res) == 0)
			continue;
		lessor_run_id_format(id, x->seqs[i]);
		if (strv_extend(&x->out, id) < 0)
			return -ENOMEM;
	}
	return 0;
}

int lessor_pg_cancels(void *be, const int64_t *seqs, char *const *tokens, size_t n, int64_t now,
                      char ***ret)
{
	struct cancels_ctx x = {.seqs = seqs, .tokens = tokens, .n = n, .now = now};
	int r;

	if (!(x.out = calloc(1, sizeof(char *))))
		return -ENOMEM;
	r = n ? pg_run(be, false, false, cancels_fn, &x) : 0;
	if (r < 0) {
		strv_free(x.out);
		return r;
	}
	*ret = x.out;
	return 0;
}
