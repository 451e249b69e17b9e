/* Read-only views of the store as JSON, for the admin API and the CLI.
 * Each view is one read transaction, so it is a consistent snapshot. */
#include "lessor/store_sqlite-int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "lessor/json_raw.h"
#include "util/buf.h"
#include "util/macro.h"
#include "util/strutil.h"
#include "util/time.h"

#define LIST_MAX 1000
#define WORKERS_MAX 1000

static cJSON *col_value(sqlite3_stmt *st, int i, enum lessor_col_kind kind)
{
	char b[TIME_RFC3339_MAX > LESSOR_RUN_ID_MAX ? TIME_RFC3339_MAX : LESSOR_RUN_ID_MAX];
	int64_t v = lessor_db_int(st, i);

	if (lessor_db_is_null(st, i))
		return cJSON_CreateNull();
	switch (kind) {
	case LESSOR_COL_STR:
		return cJSON_CreateString((const char *)sqlite3_column_text(st, i));
	case LESSOR_COL_INT:
		return cJSON_CreateNumber((double)v);
	case LESSOR_COL_BOOL:
		return cJSON_CreateBool(v != 0);
	case LESSOR_COL_JSON: {
		cJSON *j = cJSON_Parse((const char *)sqlite3_column_text(st, i));

		return j ? j : cJSON_CreateNull();
	}
	case LESSOR_COL_RAW:
		return lessor_raw_item((const char *)sqlite3_column_text(st, i));
	case LESSOR_COL_TIME:
		return cJSON_CreateString(
		    time_format_rfc3339(b, sizeof(b), (usec_t)v * USEC_PER_MSEC));
	case LESSOR_COL_RUNID:
		lessor_run_id_format(b, v);
		return cJSON_CreateString(b);
	}
	return NULL;
}

/* Adds column i as cols[i] describes, for every named column. */
static int add_columns(cJSON *o, sqlite3_stmt *st, const struct lessor_col *cols, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		cJSON *v;

		if (!cols[i].name)
			continue;
		v = col_value(st, (int)i, cols[i].kind);
		if (!v || !cJSON_AddItemToObject(o, cols[i].name, v)) {
			cJSON_Delete(v);
			return -ENOMEM;
		}
	}
	return 0;
}

/* Every row of st (already stepped once: r is that result) as an object in a. */
static int add_rows(lessor_sqlite *s, cJSON *a, sqlite3_stmt *st, int r,
                    const struct lessor_col *cols, size_t n)
{
	for (; r > 0; r = lessor_db_next(s, st)) {
		cJSON *o = cJSON_CreateObject();

		if (!o || !cJSON_AddItemToArray(a, o)) {
			cJSON_Delete(o);
			return -ENOMEM;
		}
		r = add_columns(o, st, cols, n);
		if (r < 0)
			return r;
	}
	return r;
}

/* ---- one run ---- */

static const char SQL_RUN[] =
    "SELECT seq, workflow, status, input, tags, max_attempts, timeout_s, idempotency_key,"
    " (SELECT COALESCE(MAX(attempt), 0) FROM leases WHERE run_seq = seq), attempts,"
    " lease_expiries, cancel_requested, not_before, lease_expires_at, rejected_writes,"
    " log_length, outcome, reason, exit_code, signal, error, retryable, duration_ms,"
    " reported_log_length, output, created_at, updated_at, started_at, finished_at"
    " FROM runs WHERE seq = ?";

static const char SQL_LEASES[] =
    "SELECT attempt, worker_id, claim_id, ttl_s, granted_at, last_renewed_at, ended_at,"
    " end_reason, detail FROM leases WHERE run_seq = ? ORDER BY id";

/* The held lease, as "lease": the holder (no token: tokens stay with workers). */
static int add_holder(lessor_sqlite *s, cJSON *o, int64_t seq)
{
	cJSON *a = cJSON_CreateArray(), *holder;
	sqlite3_stmt *st;
	int r;

	if (!a)
		return -ENOMEM;
	r = lessor_db_query(s, &st,
	                    "SELECT l.attempt, l.worker_id, l.claim_id, l.ttl_s, l.granted_at,"
	                    " l.last_renewed_at, l.ended_at, l.end_reason, l.detail"
	                    " FROM runs r JOIN leases l ON l.id = r.lease_id WHERE r.seq = ?",
	                    "i", seq);
	r = add_rows(s, a, st, r, lessor_lease_cols, ELEMENTSOF(lessor_lease_cols));
	holder = cJSON_DetachItemFromArray(a, 0);
	cJSON_Delete(a);
	if (r < 0) {
		cJSON_Delete(holder);
		return r;
	}
	if (!holder)
		holder = cJSON_CreateNull();
	return cJSON_AddItemToObject(o, "lease", holder) ? 0 : -ENOMEM;
}

struct run_view_ctx {
	int64_t seq;
	cJSON *out;
};

static int run_view_tx(lessor_sqlite *s, void *userdata)
{
	struct run_view_ctx *c = userdata;
	cJSON *leases;
	sqlite3_stmt *st;
	int r;

	r = lessor_db_query(s, &st, SQL_RUN, "i", c->seq);
	if (r <= 0)
		return r < 0 ? r : -ENOENT;
	c->out = cJSON_CreateObject();
	if (!c->out)
		return -ENOMEM;
	r = add_columns(c->out, st, lessor_run_cols, ELEMENTSOF(lessor_run_cols));
	if (r < 0)
		return r;
	r = add_holder(s, c->out, c->seq);
	if (r < 0)
		return r;
	leases = cJSON_AddArrayToObject(c->out, "leases");
	if (!leases)
		return -ENOMEM;
	r = lessor_db_query(s, &st, SQL_LEASES, "i", c->seq);
	return add_rows(s, leases, st, r, lessor_lease_cols, ELEMENTSOF(lessor_lease_cols));
}

int lessor_sqlite_run_json(void *be, const char *id, cJSON **ret)
{
	lessor_sqlite *s = be;
	struct run_view_ctx c = {0};
	int r;

	if (lessor_run_id_parse(id, &c.seq) < 0)
		return -ENOENT;
	r = lessor_db_tx(s, false, run_view_tx, &c);
	if (r < 0) {
		cJSON_Delete(c.out);
		return r;
	}
	*ret = c.out;
	return 0;
}

/* ---- lists ---- */

struct list_ctx {
	const char *status, *workflow;
	int64_t limit;
	cJSON *out;
};

static int list_tx(lessor_sqlite *s, void *userdata)
{
	struct list_ctx *c = userdata;
	cJSON *runs = cJSON_AddArrayToObject(c->out, "runs");
	sqlite3_stmt *st;
	int r;

	if (!runs)
		return -ENOMEM;
	r = lessor_db_query(
	    s, &st,
	    "SELECT r.seq, r.workflow, r.status,"
	    " (SELECT COALESCE(MAX(attempt), 0) FROM leases WHERE run_seq = r.seq),"
	    " r.max_attempts, r.tags, l.worker_id, r.outcome, r.exit_code, r.cancel_requested,"
	    " r.created_at, r.updated_at, r.reason, r.signal"
	    " FROM runs r LEFT JOIN leases l ON l.id = r.lease_id"
	    " WHERE (?1 IS NULL OR r.status = ?1) AND (?2 IS NULL OR r.workflow = ?2)"
	    " ORDER BY r.seq DESC LIMIT ?3",
	    "ssi", c->status, c->workflow, c->limit);
	return add_rows(s, runs, st, r, lessor_list_cols, ELEMENTSOF(lessor_list_cols));
}

int lessor_sqlite_list_json(void *be, const char *status, const char *workflow, unsigned limit,
                            cJSON **ret)
{
	lessor_sqlite *s = be;
	struct list_ctx c = {.status = status,
	                     .workflow = workflow,
	                     .limit = CLAMP((int64_t)limit, 1, LIST_MAX),
	                     .out = cJSON_CreateObject()};
	int r;

	if (!c.out)
		return -ENOMEM;
	r = lessor_db_tx(s, false, list_tx, &c);
	if (r < 0) {
		cJSON_Delete(c.out);
		return r;
	}
	*ret = c.out;
	return 0;
}

static int stats_tx(lessor_sqlite *s, void *userdata)
{
	static const char *const names[] = {"pending", "running", "succeeded", "failed",
	                                    "cancelled"};
	cJSON *o = userdata;
	int64_t counts[ELEMENTSOF(names)] = {0}, total = 0;
	sqlite3_stmt *st;
	int r;

	/* kept by triggers (store_sqlite.c): no count of every run */
	r = lessor_db_query(s, &st, "SELECT status, n FROM temp.run_counts", "");
	for (; r > 0; r = lessor_db_next(s, st)) {
		const char *name = (const char *)sqlite3_column_text(st, 0);

		for (size_t i = 0; i < ELEMENTSOF(names); i++)
			if (streq(name, names[i]))
				counts[i] = lessor_db_int(st, 1);
	}
	if (r < 0)
		return r;
	for (size_t i = 0; i < ELEMENTSOF(names); i++) {
		total += counts[i];
		if (!cJSON_AddNumberToObject(o, names[i], (double)counts[i]))
			return -ENOMEM;
	}
	return cJSON_AddNumberToObject(o, "total", (double)total) ? 0 : -ENOMEM;
}

static int workers_tx(lessor_sqlite *s, void *userdata)
{
	cJSON *a = cJSON_AddArrayToObject(userdata, "workers");
	sqlite3_stmt *st;
	int r;

	if (!a)
		return -ENOMEM;
	r = lessor_db_query(s, &st,
	                    "SELECT w.worker_id, w.last_claim_at, w.workflows, w.tags, w.max_runs,"
	                    " w.claims, w.runs_granted, (SELECT COUNT(*) FROM runs r JOIN leases l"
	                    " ON l.id = r.lease_id WHERE r.status = 'running'"
	                    " AND l.worker_id = w.worker_id)"
	                    " FROM workers w ORDER BY w.last_claim_at DESC LIMIT ?",
	                    "i", (int64_t)WORKERS_MAX);
	return add_rows(s, a, st, r, lessor_worker_cols, ELEMENTSOF(lessor_worker_cols));
}

/* Runs a read view that fills a fresh object. */
static int object_view(lessor_sqlite *s, lessor_db_fn fn, cJSON **ret)
{
	cJSON *o = cJSON_CreateObject();
	int r;

	if (!o)
		return -ENOMEM;
	r = lessor_db_tx(s, false, fn, o);
	if (r < 0) {
		cJSON_Delete(o);
		return r;
	}
	*ret = o;
	return 0;
}

int lessor_sqlite_stats_json(void *be, cJSON **ret)
{
	return object_view(be, stats_tx, ret);
}

int lessor_sqlite_workers_json(void *be, cJSON **ret)
{
	return object_view(be, workers_tx, ret);
}

/* ---- log ---- */

struct read_log_ctx {
	int64_t seq;
	struct buf b;
};

static int read_log_tx(lessor_sqlite *s, void *userdata)
{
	struct read_log_ctx *c = userdata;
	sqlite3_stmt *st;
	int r;

	r = lessor_db_query(s, NULL, "SELECT 1 FROM runs WHERE seq = ?", "i", c->seq);
	if (r <= 0)
		return r < 0 ? r : -ENOENT;
	r = lessor_db_query(s, &st, "SELECT data FROM log_chunks WHERE run_seq = ? ORDER BY start",
	                    "i", c->seq);
	for (; r > 0; r = lessor_db_next(s, st)) {
		r = buf_append(&c->b, sqlite3_column_blob(st, 0),
		               (size_t)sqlite3_column_bytes(st, 0));
		if (r < 0)
			return r;
	}
	return r;
}

int lessor_sqlite_read_log(void *be, const char *id, char **ret, size_t *ret_len)
{
	lessor_sqlite *s = be;
	struct read_log_ctx c = {.b = BUF_INIT(0)};
	int r;

	if (lessor_run_id_parse(id, &c.seq) < 0)
		return -ENOENT;
	/* no cap here: what is stored was capped when it was written (possibly
	 * under a larger --max-log-bytes than today's) */
	r = lessor_db_tx(s, false, read_log_tx, &c);
	if (r >= 0)
		r = buf_append(&c.b, "", 0);
	if (r < 0) {
		buf_done(&c.b);
		return r;
	}
	*ret_len = c.b.len;
	*ret = buf_steal(&c.b);
	return 0;
}

/* ---- ownership ---- */

struct owner_ctx {
	const char *sql;
	int64_t seq;
	const char *key;
	char *worker_id;
};

static int owner_tx(lessor_sqlite *s, void *userdata)
{
	struct owner_ctx *c = userdata;
	sqlite3_stmt *st;
	int r;

	r = c->seq > 0 ? lessor_db_query(s, &st, c->sql, "is", c->seq, c->key)
	               : lessor_db_query(s, &st, c->sql, "s", c->key);
	if (r <= 0)
		return r < 0 ? r : -ENOENT;
	c->worker_id = lessor_db_strdup(st, 0);
	return c->worker_id ? 0 : -ENOMEM;
}

static int owner_view(lessor_sqlite *s, struct owner_ctx *c, char **ret)
{
	int r = lessor_db_tx(s, false, owner_tx, c);

	if (r < 0) {
		free(c->worker_id);
		return r;
	}
	*ret = c->worker_id;
	return 0;
}

int lessor_sqlite_lease_holder(void *be, int64_t seq, const char *lease_token, char **ret_worker_id)
{
	struct owner_ctx c = {.sql = "SELECT worker_id FROM leases WHERE run_seq = ? AND token = ?",
	                      .seq = seq,
	                      .key = lease_token};

	return owner_view(be, &c, ret_worker_id);
}

int lessor_sqlite_claim_owner(void *be, const char *claim_id, char **ret_worker_id)
{
	struct owner_ctx c = {.sql = "SELECT worker_id FROM claims WHERE claim_id = ?",
	                      .key = claim_id};

	return owner_view(be, &c, ret_worker_id);
}
