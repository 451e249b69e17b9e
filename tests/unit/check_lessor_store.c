/* lib/lessor store: every state transition, driven with an explicit clock,
 * on each backend: the same cases run on SQLite (TCase "sqlite") and on
 * PostgreSQL (TCase "postgresql", a private server started by main(); the
 * store takes the caller's clock there too, cfg.caller_clock), plus what
 * only one backend has (SQLite's single-server lock; PostgreSQL's several
 * instances on one database, NOTIFY hints, its own clock, HOT updates). */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lessor/store.h"
#include "lessor/store_sqlite-int.h"
#include "jsonutil.h"
#include "lessor_proc.h"
#include "pg_proc.h"
#include "log/log.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"

#define T0 1767225600000LL /* 2026-01-01T00:00:00Z */

static char *dir;  /* SQLite: the database's directory */
static char *path; /* the --db target: a file, or a PostgreSQL conninfo */
static lessor_store *st;
static struct tu_pg *pg; /* NULL: PostgreSQL is not installed */
static struct lessor_store_config cfg;
static const struct lessor_store_config base_cfg = {
    .sync_full = false, /* the unit tests prove logic; durability is tested over HTTP */
    .max_lease_expiries = 3,
    .retry_base_ms = 1000,
    .retry_max_ms = 3000,
    .max_log_bytes = 10,
};

static void setup(void)
{
	log_set_max_level(LOG_WARNING);
	cfg = base_cfg;
	dir = tu_tmpdir("store");
	ck_assert_ptr_nonnull(dir);
	ck_assert_int_ge(asprintf(&path, "%s/lessor.db", dir), 0);
	ck_assert_int_eq(lessor_store_open(path, &cfg, &st), 0);
}

/* A fresh database per test on the shared server; the test's clock. */
static void setup_pg(void)
{
	log_set_max_level(LOG_WARNING);
	cfg = base_cfg;
	cfg.caller_clock = true;
	cfg.connections = 6;
	path = tu_pg_create_db(pg);
	ck_assert_ptr_nonnull(path);
	ck_assert_int_eq(lessor_store_open(path, &cfg, &st), 0);
	ck_assert_str_eq(lessor_store_backend_name(st), "postgresql");
}

static void teardown(void)
{
	st = lessor_store_free(st);
	if (dir)
		rm_rf(dir);
	free(dir);
	dir = NULL;
	free(path);
	path = NULL;
}

/* Enqueue a run of workflow wf with the given (normalised) tags. */
static char *enqueue_full(const char *wf, char *tag1, char *tag2, unsigned attempts)
{
	char *tags[3] = {tag1, tag2, NULL};
	struct lessor_enqueue e = {
	    .workflow = wf, .input_json = "{\"n\":1}", .tags = tags, .max_attempts = attempts};
	char id[LESSOR_RUN_ID_MAX];
	bool created;

	ck_assert_int_eq(lessor_store_enqueue(st, &e, T0, id, &created), 0);
	ck_assert(created);
	return strdup(id);
}

static char *enqueue(const char *wf)
{
	return enqueue_full(wf, NULL, NULL, 1);
}

static struct lessor_claim_result claim_as(const char *claim_id, const char *worker,
                                           const char *workflows, const char *tags, unsigned max,
                                           int64_t now)
{
	struct lessor_claim_req q = {.claim_id = claim_id,
	                             .worker_id = worker,
	                             .max_runs = max,
	                             .ttl_s = 1,
	                             .workflows_json = workflows,
	                             .tags_json = tags ? tags : "[]",
	                             .record_worker = true};
	struct lessor_claim_result r;

	ck_assert_int_eq(lessor_store_claim(st, &q, now, &r), 0);
	return r;
}

static struct lessor_claim_result claim(const char *claim_id, unsigned max, int64_t now)
{
	return claim_as(claim_id, "w1", NULL, NULL, max, now);
}

static cJSON *run_view(const char *id)
{
	cJSON *j = NULL;

	ck_assert_int_eq(lessor_store_run_json(st, id, &j), 0);
	return j;
}

/* A string field's text; anything else as compact JSON.  A run's input and
 * output come as raw items, the text as sent: a string among them too. */
static char *run_str(const char *id, const char *field)
{
	cJSON *j = run_view(id);
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, field);
	cJSON *parsed = cJSON_IsRaw(v) ? cJSON_Parse(v->valuestring) : NULL;
	char *s;

	if (parsed)
		v = parsed;
	s = cJSON_IsString(v) ? strdup(v->valuestring) : cJSON_PrintUnformatted(v);
	cJSON_Delete(parsed);
	cJSON_Delete(j);
	return s;
}

static double run_num(const char *id, const char *field)
{
	cJSON *j = run_view(id);
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, field);
	double d;

	ck_assert_msg(cJSON_IsNumber(v), "%s is not a number", field);
	d = v->valuedouble;
	cJSON_Delete(j);
	return d;
}

static void assert_status(const char *id, const char *want)
{
	_cleanup_free_ char *s = run_str(id, "status");

	ck_assert_str_eq(s, want);
}

static struct lessor_completion done_ok(const char *token)
{
	return (struct lessor_completion){.token = token,
	                                  .status = "succeeded",
	                                  .reason = "exit",
	                                  .has_exit_code = true,
	                                  .exit_code = 0,
	                                  .duration_ms = 5,
	                                  .log_length = 0};
}

static struct lessor_completion done_fail(const char *token, bool retryable)
{
	struct lessor_completion c = done_ok(token);

	c.status = "failed";
	c.exit_code = 3;
	c.retryable = retryable;
	c.error = "exit status 3";
	return c;
}

START_TEST(test_schema_and_lock)
{
	lessor_store *other = NULL;
	sqlite3 *db;

	/* a second server on the same database is refused */
	ck_assert_int_eq(lessor_store_open(path, &cfg, &other), -EBUSY);
	st = lessor_store_free(st);
	ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
	ck_assert_int_eq(sqlite3_exec(db, "PRAGMA user_version = 99", NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
	log_set_max_level(LOG_CRIT); /* the refusal is logged as an error; expected here */
	ck_assert_int_eq(lessor_store_open(path, &cfg, &st), -EPROTO);
	ck_assert_ptr_null(st);
}
END_TEST

static int page_size_of(const char *file)
{
	sqlite3 *db;
	sqlite3_stmt *q;
	int n;

	ck_assert_int_eq(sqlite3_open(file, &db), SQLITE_OK);
	ck_assert_int_eq(sqlite3_prepare_v2(db, "PRAGMA page_size", -1, &q, NULL), SQLITE_OK);
	ck_assert_int_eq(sqlite3_step(q), SQLITE_ROW);
	n = sqlite3_column_int(q, 0);
	sqlite3_finalize(q);
	sqlite3_close(db);
	return n;
}

/* A new database gets 1 KiB pages: a run's transitions dirty a dozen pages,
 * each written whole to the WAL per commit (docs/lessor.md).  A database
 * made with other pages keeps them and works as before. */
START_TEST(test_page_size)
{
	_cleanup_free_ char *old = NULL;
	struct lessor_claim_result r;
	sqlite3 *db;

	st = lessor_store_free(st);
	ck_assert_int_eq(page_size_of(path), 1024);
	ck_assert_int_ge(asprintf(&old, "%s/old.db", dir), 0);
	ck_assert_int_eq(sqlite3_open(old, &db), SQLITE_OK);
	ck_assert_int_eq(sqlite3_exec(db,
	                              "PRAGMA page_size = 4096; PRAGMA journal_mode = WAL;"
	                              " CREATE TABLE t (x); DROP TABLE t;",
	                              NULL, NULL, NULL),
	                 SQLITE_OK);
	sqlite3_close(db);
	ck_assert_int_eq(lessor_store_open(old, &cfg, &st), 0);
	free(enqueue("w"));
	r = claim("c", 1, T0);
	ck_assert_uint_eq(r.n_runs, 1);
	lessor_claim_result_done(&r);
	st = lessor_store_free(st);
	ck_assert_int_eq(page_size_of(old), 4096);
}
END_TEST

static bool opens_ephemeral(sqlite3 *db, const char *sql)
{
	_cleanup_free_ char *explain = NULL;
	sqlite3_stmt *q;
	bool found = false;

	ck_assert_int_ge(asprintf(&explain, "EXPLAIN %s", sql), 0);
	ck_assert_int_eq(sqlite3_prepare_v2(db, explain, -1, &q, NULL), SQLITE_OK);
	while (sqlite3_step(q) == SQLITE_ROW)
		found = found || streq((const char *)sqlite3_column_text(q, 1), "OpenEphemeral");
	sqlite3_finalize(q);
	return found;
}

static int64_t db_int(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *q;
	int64_t v;

	ck_assert_int_eq(sqlite3_prepare_v2(db, sql, -1, &q, NULL), SQLITE_OK);
	ck_assert_int_eq(sqlite3_step(q), SQLITE_ROW);
	v = sqlite3_column_int64(q, 0);
	sqlite3_finalize(q);
	return v;
}

/* The writes of a claim and a completion build no temporary table, and the
 * status and end_reason CHECKs still refuse what they refused (run 1 with
 * lease 1 must exist). */
static void assert_plain_checks(const char *file)
{
	static const char *const writes[] = {
	    "UPDATE runs SET status = 'failed', lease_id = NULL WHERE seq = 1",
	    "INSERT INTO leases (run_seq, token, attempt, worker_id, claim_id, ttl_s, granted_at)"
	    " VALUES (1, 'x', 1, 'w', 'c', 1, 1)",
	    "UPDATE leases SET end_reason = 'completed' WHERE id = 1",
	};
	sqlite3 *db;

	ck_assert_int_eq(sqlite3_open(file, &db), SQLITE_OK);
	ck_assert_int_eq(db_int(db, "PRAGMA user_version"), 3);
	for (size_t i = 0; i < ELEMENTSOF(writes); i++)
		ck_assert_msg(!opens_ephemeral(db, writes[i]), "a temporary table for: %s",
		              writes[i]);
	ck_assert_int_eq(
	    sqlite3_exec(db, "UPDATE runs SET status = 'bogus', lease_id = NULL WHERE seq = 1",
	                 NULL, NULL, NULL),
	    SQLITE_CONSTRAINT);
	ck_assert_int_eq(sqlite3_exec(db, "UPDATE leases SET end_reason = 'bogus' WHERE id = 1",
	                              NULL, NULL, NULL),
	                 SQLITE_CONSTRAINT);
	ck_assert_int_eq(sqlite3_exec(db,
	                              "UPDATE leases SET end_reason = 'expired' WHERE id = 1;"
	                              "UPDATE leases SET end_reason = NULL WHERE id = 1;"
	                              "UPDATE runs SET status = 'succeeded', lease_id = NULL"
	                              " WHERE seq = 1",
	                              NULL, NULL, NULL),
	                 SQLITE_OK);
	sqlite3_close(db);
}

/* A CHECK (x IN (five values)) makes SQLite build a temporary table from the
 * list at every write of the row: its own pager, a zeroed page, a b-tree.
 * The runs and leases CHECKs are plain comparisons instead (docs/lessor.md). */
START_TEST(test_checks_without_temp_tables)
{
	struct lessor_claim_result r;

	free(enqueue("w"));
	r = claim("c", 1, T0);
	ck_assert_uint_eq(r.n_runs, 1);
	lessor_claim_result_done(&r);
	st = lessor_store_free(st);
	assert_plain_checks(path);
}
END_TEST

/* Entries in the indexes on runs by status: a run is in the one of its
 * status while pending or running, and in none once finished, so a change of
 * status moves one index entry at most (not three of every run's). */
START_TEST(test_status_indexes_hold_active_runs)
{
	struct lessor_completion done = {
	    .status = "succeeded", .reason = "exit", .has_exit_code = true};
	struct lessor_claim_result r;
	const char *answer;
	sqlite3 *db;

	for (int i = 0; i < 5; i++)
		free(enqueue("w"));
	r = claim("c", 3, T0);
	ck_assert_uint_eq(r.n_runs, 3);
	for (size_t i = 0; i < 2; i++) {
		done.token = r.runs[i].token;
		ck_assert_int_eq(lessor_store_complete(st, r.runs[i].id, &done, T0 + 1, &answer),
		                 0);
	}
	lessor_claim_result_done(&r);
	st = lessor_store_free(st);
	ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
	/* 2 pending, 1 running, 2 succeeded */
	ck_assert_int_eq(db_int(db, "SELECT COALESCE(SUM(s.ncell), 0) FROM dbstat s"
	                            " JOIN sqlite_schema i ON i.name = s.name"
	                            " WHERE i.type = 'index' AND i.tbl_name = 'runs'"
	                            " AND s.pagetype = 'leaf' AND i.sql LIKE '%status%'"),
	                 3);
	ck_assert_int_eq(db_int(db, "SELECT COUNT(*) FROM runs WHERE status = 'pending'"), 2);
	sqlite3_close(db);
}
END_TEST

/* A database at schema version 1, as the first lessor made it, with one
 * pending run r-1 and an ended lease of it. */
static char *version_1_database(sqlite3 **ret_db)
{
	char *old = NULL;
	sqlite3 *db;

	st = lessor_store_free(st);
	ck_assert_int_ge(asprintf(&old, "%s/old.db", dir), 0);
	ck_assert_int_eq(sqlite3_open(old, &db), SQLITE_OK);
	ck_assert_int_eq(sqlite3_exec(db, lessor_sqlite_migration_sql(0), NULL, NULL, NULL),
	                 SQLITE_OK);
	ck_assert_int_eq(
	    sqlite3_exec(db,
	                 "PRAGMA user_version = 1;"
	                 "INSERT INTO runs (workflow, input, max_attempts, status, not_before,"
	                 " created_at, updated_at) VALUES ('w', '{}', 1, 'pending', 0, 0, 0);"
	                 "INSERT INTO leases (run_seq, token, attempt, worker_id, claim_id, ttl_s,"
	                 " granted_at, ended_at, end_reason) VALUES (1, 't', 1, 'w', 'c0', 1, 0, 0,"
	                 " 'released')",
	                 NULL, NULL, NULL),
	    SQLITE_OK);
	*ret_db = db;
	return old;
}

/* A database of schema version 1 gets the plain CHECKs, and keeps its rows. */
START_TEST(test_checks_migrated)
{
	struct lessor_claim_result r;
	sqlite3 *db;
	_cleanup_free_ char *old = version_1_database(&db);

	sqlite3_close(db);
	ck_assert_int_eq(lessor_store_open(old, &cfg, &st), 0);
	r = claim("c", 1, T0);
	ck_assert_uint_eq(r.n_runs, 1);
	ck_assert_str_eq(r.runs[0].id, "r-1");
	lessor_claim_result_done(&r);
	st = lessor_store_free(st);
	assert_plain_checks(old);
}
END_TEST

/* A version 1 schema whose CHECK text is not the one the migration rewrites
 * is refused, and left as it was. */
START_TEST(test_checks_migration_refuses_other_text)
{
	sqlite3 *db;
	_cleanup_free_ char *old = version_1_database(&db);

	ck_assert_int_eq(
	    sqlite3_exec(db,
	                 "PRAGMA writable_schema = ON;"
	                 "UPDATE sqlite_schema SET sql = replace(sql, 'IN    (', 'IN (')"
	                 " WHERE name = 'runs';"
	                 "PRAGMA writable_schema = OFF",
	                 NULL, NULL, NULL),
	    SQLITE_OK);
	sqlite3_close(db);
	log_set_max_level(LOG_CRIT); /* the refusal is logged as an error; expected here */
	ck_assert_int_eq(lessor_store_open(old, &cfg, &st), -EPROTO);
	ck_assert_int_eq(sqlite3_open(old, &db), SQLITE_OK);
	ck_assert_int_eq(db_int(db, "PRAGMA user_version"), 1);
	ck_assert_int_eq(db_int(db, "SELECT COUNT(*) FROM sqlite_schema WHERE name = 'leases'"
	                            " AND sql LIKE '%end_reason IN    (%'"),
	                 1);
	sqlite3_close(db);
}
END_TEST

/* The write system calls of this process so far, or -1; no Check assertion
 * in here: each writes to Check's own file. */
static long write_syscalls(void)
{
	_cleanup_free_ char *io = NULL;
	const char *p;

	if (read_file_capped("/proc/self/io", 4096, &io, NULL) < 0)
		return -1;
	p = strstr(io, "syscw: ");
	return p ? strtol(p + strlen("syscw: "), NULL, 10) : -1;
}

/* The pages one commit adds to the WAL go to the file in one write, not two
 * per page (a header, then the page): a claim dirties about a dozen pages.
 * With either synchronous setting. */
static void assert_commit_writes_once(bool sync_full)
{
	struct lessor_claim_result r;
	long before;

	st = lessor_store_free(st);
	cfg.sync_full = sync_full;
	ck_assert_int_eq(lessor_store_open(path, &cfg, &st), 0);
	for (int i = 0; i < 3; i++)
		free(enqueue("w"));
	for (int i = 0; i < 3; i++) {
		char claim_id[16];
		struct lessor_claim_req q = {.claim_id = claim_id,
		                             .worker_id = "w1",
		                             .max_runs = 1,
		                             .ttl_s = 1,
		                             .tags_json = "[]"};
		long writes;
		int ret;

		snprintf(claim_id, sizeof(claim_id), "c%d", i);
		/* nothing but the claim between the two counts: a Check assertion
		 * writes too */
		before = write_syscalls();
		ret = lessor_store_claim(st, &q, T0, &r);
		writes = write_syscalls() - before;
		ck_assert_int_ge(before, 0);
		ck_assert_int_eq(ret, 0);
		ck_assert_uint_eq(r.n_runs, 1);
		/* valgrind's own scheduler writes to a pipe around system calls */
		if (!tu_wrapped())
			ck_assert_int_eq(writes, 1);
		lessor_claim_result_done(&r);
	}
}

/* A transaction larger than the WAL file's buffer (a run's input of 1 MiB
 * is a thousand frames) is written out in several writes, whole: SQLite's
 * own write takes at most 128 KiB at a time. */
START_TEST(test_large_commit_written_whole)
{
	const size_t n = 1024 * 1024;
	_cleanup_free_ char *input = malloc(n + 3), *back = NULL;
	struct lessor_enqueue e = {.workflow = "w", .max_attempts = 1};
	char id[LESSOR_RUN_ID_MAX];
	bool created;

	ck_assert_ptr_nonnull(input);
	input[0] = '"';
	for (size_t i = 1; i <= n; i++)
		input[i] = (char)('a' + i * 7 % 26);
	input[n + 1] = '"';
	input[n + 2] = '\0';
	e.input_json = input;
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(lessor_store_enqueue(st, &e, T0, id, &created), 0);
	st = lessor_store_free(st);
	ck_assert_int_eq(lessor_store_open(path, &cfg, &st), 0);
	back = run_str(id, "input"); /* the string, without its quotes */
	input[n + 1] = '\0';
	ck_assert_str_eq(back, input + 1);
}
END_TEST

START_TEST(test_commit_one_wal_write)
{
	assert_commit_writes_once(true);
	assert_commit_writes_once(false);
}
END_TEST

/* SQLite's allocation statistics are off in a process whose first use of
 * SQLite is the store (lessor): they cost a global mutex per allocation. */
START_TEST(test_no_memory_statistics)
{
	ck_assert_int_eq(sqlite3_memory_used(), 0);
}
END_TEST

START_TEST(test_enqueue_and_idempotency_key)
{
	char *tags[] = {"gpu", "region:eu", NULL};
	struct lessor_enqueue e = {.workflow = "build",
	                           .input_json = "[1,2]",
	                           .tags = tags,
	                           .max_attempts = 2,
	                           .timeout_s = 30,
	                           .idempotency_key = "k-1"};
	char id[LESSOR_RUN_ID_MAX], id2[LESSOR_RUN_ID_MAX];
	bool created;
	_cleanup_free_ char *t = NULL, *in = NULL;

	ck_assert_int_eq(lessor_store_enqueue(st, &e, T0, id, &created), 0);
	ck_assert(created);
	e.workflow = "other";
	ck_assert_int_eq(lessor_store_enqueue(st, &e, T0 + 5, id2, &created), 0);
	ck_assert(!created);
	ck_assert_str_eq(id, id2);
	/* the duplicate used up no run id */
	e.idempotency_key = NULL;
	ck_assert_int_eq(lessor_store_enqueue(st, &e, T0 + 6, id2, &created), 0);
	ck_assert(created);
	ck_assert_str_eq(id2, "r-2");
	e.workflow = "build";
	assert_status(id, "pending");
	t = run_str(id, "tags");
	ck_assert_str_eq(t, "[\"gpu\",\"region:eu\"]");
	in = run_str(id, "input");
	ck_assert_str_eq(in, "[1,2]");
	ck_assert_int_eq((int)run_num(id, "timeout_s"), 30);
	ck_assert_int_eq((int)run_num(id, "attempt"), 0);
	ck_assert_int_eq(lessor_store_run_json(st, "r-999", &(cJSON *){NULL}), -ENOENT);
	ck_assert_int_eq(lessor_store_run_json(st, "r-01", &(cJSON *){NULL}), -ENOENT);
	ck_assert_int_eq(lessor_store_run_json(st, "bogus", &(cJSON *){NULL}), -ENOENT);
}
END_TEST

START_TEST(test_routing)
{
	_cleanup_free_ char *a = enqueue("build");
	_cleanup_free_ char *b = enqueue_full("build", "gpu", NULL, 1);
	_cleanup_free_ char *c = enqueue_full("deploy", "gpu", "region:eu", 1);
	struct lessor_claim_result r;

	r = claim_as("c1", "w1", "[]", "[\"gpu\",\"region:eu\"]", 10, T0);
	ck_assert_uint_eq(r.n_runs, 0); /* [] = no workflow */
	lessor_claim_result_done(&r);
	r = claim_as("c2", "w1", "[\"deploy\"]", "[\"gpu\"]", 10, T0);
	ck_assert_uint_eq(r.n_runs, 0); /* c also needs region:eu */
	lessor_claim_result_done(&r);
	r = claim_as("c3", "w1", NULL, "[]", 10, T0);
	ck_assert_uint_eq(r.n_runs, 1); /* untagged worker: untagged runs only */
	ck_assert_str_eq(r.runs[0].id, a);
	lessor_claim_result_done(&r);
	r = claim_as("c4", "w1", "[\"deploy\",\"x\"]", "[\"gpu\",\"region:eu\",\"z\"]", 10, T0);
	ck_assert_uint_eq(r.n_runs, 1);
	ck_assert_str_eq(r.runs[0].id, c);
	ck_assert_str_eq(r.runs[0].workflow, "deploy");
	ck_assert_str_eq(r.runs[0].tags_json, "[\"gpu\",\"region:eu\"]");
	ck_assert_uint_eq(r.queue_depth, 0);
	lessor_claim_result_done(&r);
	assert_status(b, "pending");
}
END_TEST

START_TEST(test_claim_order_and_depth)
{
	_cleanup_free_ char *a = enqueue("w"), *b = enqueue("w"), *c = enqueue("w");
	struct lessor_claim_result r = claim("c1", 2, T0);

	ck_assert_uint_eq(r.n_runs, 2);
	ck_assert_str_eq(r.runs[0].id, a); /* oldest first */
	ck_assert_str_eq(r.runs[1].id, b);
	ck_assert_uint_eq(r.runs[0].attempt, 1);
	ck_assert_uint_eq(r.runs[0].ttl_s, 1);
	ck_assert_uint_eq(strlen(r.runs[0].token), LESSOR_TOKEN_LEN);
	ck_assert_str_ne(r.runs[0].token, r.runs[1].token);
	ck_assert_uint_eq(r.queue_depth, 1);
	lessor_claim_result_done(&r);
	assert_status(c, "pending");
}
END_TEST

START_TEST(test_claim_idempotent)
{
	_cleanup_free_ char *a = enqueue("w"), *b = enqueue("w");
	struct lessor_claim_result r1 = claim("c1", 2, T0), r2;
	struct lessor_claim_req q = {
	    .claim_id = "c1", .worker_id = "w2", .max_runs = 1, .ttl_s = 1, .tags_json = "[]"};
	struct lessor_completion done;
	const char *answer;
	_cleanup_free_ char *c = enqueue("w");

	ck_assert_uint_eq(r1.n_runs, 2);
	r2 = claim("c1", 5, T0 + 500); /* a retry: same runs, same tokens, nothing new */
	ck_assert(r2.replay);
	ck_assert_uint_eq(r2.n_runs, 2);
	for (size_t i = 0; i < 2; i++) {
		ck_assert_str_eq(r1.runs[i].id, r2.runs[i].id);
		ck_assert_str_eq(r1.runs[i].token, r2.runs[i].token);
		ck_assert_uint_eq(r2.runs[i].attempt, 1);
	}
	lessor_claim_result_done(&r2);
	assert_status(c, "pending");
	/* another worker may not reuse the claim_id */
	ck_assert_int_eq(lessor_store_claim(st, &q, T0, &r2), -EEXIST);
	/* the replay extended the leases from its own time (T0 + 500 + 1 s) */
	{
		bool wake;

		ck_assert_int_eq(lessor_store_tick(st, T0, T0 + 1200, &wake), 0);
		assert_status(a, "running");
	}
	done = done_ok(r1.runs[0].token);
	ck_assert_int_eq(lessor_store_complete(st, a, &done, T0 + 1300, &answer), 0);
	r2 = claim("c1", 5, T0 + 1300);
	ck_assert_uint_eq(r2.n_runs, 1); /* only what is still held */
	ck_assert_str_eq(r2.runs[0].id, b);
	lessor_claim_result_done(&r2);
	lessor_claim_result_done(&r1);
}
END_TEST

START_TEST(test_claim_cancel)
{
	_cleanup_free_ char *a = enqueue("w"), *b = enqueue("w");
	struct lessor_claim_result r = claim("c1", 2, T0), r2;
	unsigned released = 99;
	bool cancel;
	_cleanup_free_ char *reason = NULL;
	cJSON *v;

	ck_assert_int_eq(lessor_store_renew(st, b, r.runs[1].token, 5, T0 + 10, &cancel), 0);
	ck_assert(!cancel);
	ck_assert_int_eq(lessor_store_claim_cancel(st, "c1", T0 + 20, &released), 0);
	ck_assert_uint_eq(released, 1); /* only the never-renewed one */
	assert_status(a, "pending");
	assert_status(b, "running");
	v = run_view(a);
	reason = cJSON_PrintUnformatted(cJSON_GetObjectItem(
	    cJSON_GetArrayItem(cJSON_GetObjectItem(v, "leases"), 0), "end_reason"));
	cJSON_Delete(v);
	ck_assert_str_eq(reason, "\"cancelled\"");
	r2 = claim("c1", 2, T0 + 30); /* a cancelled claim grants nothing, ever */
	ck_assert(r2.cancelled);
	ck_assert_uint_eq(r2.n_runs, 0);
	lessor_claim_result_done(&r2);
	/* cancelling a claim before it was answered poisons it too */
	ck_assert_int_eq(lessor_store_claim_cancel(st, "c2", T0 + 40, &released), 0);
	ck_assert_uint_eq(released, 0);
	r2 = claim("c2", 2, T0 + 50);
	ck_assert(r2.cancelled);
	lessor_claim_result_done(&r2);
	lessor_claim_result_done(&r);
}
END_TEST

START_TEST(test_fencing)
{
	_cleanup_free_ char *a = enqueue("w");
	struct lessor_claim_result r = claim("c1", 1, T0);
	struct lessor_completion done = done_ok("not-the-token");
	const char *answer;
	uint64_t len;
	bool cancel;

	ck_assert_int_eq(lessor_store_renew(st, a, "nope", 5, T0, &cancel), -ESTALE);
	ck_assert_int_eq(lessor_store_append_log(st, a, "nope", 0, "x", 1, T0, &len), -ESTALE);
	ck_assert_int_eq(lessor_store_complete(st, a, &done, T0, &answer), -ESTALE);
	ck_assert_int_eq(lessor_store_release(st, a, "nope", "draining", 0, T0), -ESTALE);
	ck_assert_int_eq((int)run_num(a, "rejected_writes"), 4);
	ck_assert_int_eq(lessor_store_renew(st, "r-77", r.runs[0].token, 5, T0, &cancel), -ENOENT);
	ck_assert_int_eq(lessor_store_renew(st, a, r.runs[0].token, 5, T0, &cancel), 0);
	assert_status(a, "running");
	lessor_claim_result_done(&r);
}
END_TEST

START_TEST(test_write_after_deadline_refused)
{
	_cleanup_free_ char *a = enqueue("w");
	struct lessor_claim_result r = claim("c1", 1, T0), r2;
	bool cancel;

	/* the lease (1 s) ran out; the reaper has not run yet: still lost */
	ck_assert_int_eq(lessor_store_renew(st, a, r.runs[0].token, 5, T0 + 999, &cancel), 0);
	ck_assert_int_eq(lessor_store_renew(st, a, r.runs[0].token, 5, T0 + 5999, &cancel),
	                 -ESTALE);
	ck_assert_int_eq((int)run_num(a, "rejected_writes"), 1);
	/* nor does a replay of the claim hand it out again */
	r2 = claim("c1", 1, T0 + 6000);
	ck_assert(r2.replay);
	ck_assert_uint_eq(r2.n_runs, 0);
	lessor_claim_result_done(&r2);
	lessor_claim_result_done(&r);
}
END_TEST

/* Many leases renewed in one write: each answered as lessor_store_renew
 * would answer it (a stale one counted), a skipped one left alone, one
 * commit for them all. */
START_TEST(test_renew_batch)
{
	_cleanup_free_ char *a = enqueue("w"), *b = enqueue("w"), *c = enqueue("w");
	struct lessor_claim_result r = claim("c1", 3, T0); /* ttl 1 s */
	struct lessor_store_counters before, after;
	struct lessor_renewal v[5];
	const char *status;
	bool cancel;

	ck_assert_uint_eq(r.n_runs, 3);
	ck_assert_int_eq(lessor_store_cancel(st, r.runs[2].id, T0, &status), 0);
	v[0] = (struct lessor_renewal){.id = r.runs[0].id, .token = r.runs[0].token};
	v[1] = (struct lessor_renewal){.id = r.runs[1].id, .token = "nope"};
	v[2] = (struct lessor_renewal){.id = "r-77", .token = r.runs[0].token};
	v[3] = (struct lessor_renewal){.id = r.runs[2].id, .token = r.runs[2].token};
	v[4] = (struct lessor_renewal){
	    .id = r.runs[1].id, .token = r.runs[1].token, .skip = true, .answer = -ESTALE};
	lessor_store_counters(st, &before);
	ck_assert_int_eq(lessor_store_renew_batch(st, v, ELEMENTSOF(v), 5, T0 + 500), 0);
	lessor_store_counters(st, &after);
	ck_assert_uint_eq(after.commits - before.commits, 1);
	ck_assert_int_eq(v[0].answer, 0);
	ck_assert(!v[0].cancel_requested);
	ck_assert_int_eq(v[1].answer, -ESTALE);
	ck_assert_int_eq(v[2].answer, -ENOENT);
	ck_assert_int_eq(v[3].answer, 0);
	ck_assert(v[3].cancel_requested);
	ck_assert_int_eq(v[4].answer, -ESTALE); /* untouched */
	ck_assert_int_eq((int)run_num(r.runs[1].id, "rejected_writes"), 1);
	/* the renewed leases last 5 s from T0 + 500; the other one ran out at T0 + 1000 */
	ck_assert_int_eq(
	    lessor_store_renew(st, r.runs[1].id, r.runs[1].token, 5, T0 + 1500, &cancel), -ESTALE);
	v[4].skip = false;
	ck_assert_int_eq(lessor_store_renew_batch(st, v, ELEMENTSOF(v), 5, T0 + 5000), 0);
	ck_assert_int_eq(v[0].answer, 0);
	ck_assert_int_eq(v[3].answer, 0);
	ck_assert_int_eq(v[4].answer, -ESTALE);
	ck_assert_int_eq(
	    lessor_store_renew(st, r.runs[0].id, r.runs[0].token, 5, T0 + 9999, &cancel), 0);
	lessor_claim_result_done(&r);
	(void)a, (void)b, (void)c;
}
END_TEST

START_TEST(test_log_append)
{
	_cleanup_free_ char *a = enqueue("w");
	struct lessor_claim_result r = claim("c1", 1, T0);
	const char *tok = r.runs[0].token;
	uint64_t len = 0;
	char *log;
	size_t n;

	ck_assert_int_eq(lessor_store_append_log(st, a, tok, 0, "hello", 5, T0, &len), 0);
	ck_assert_uint_eq(len, 5);
	ck_assert_int_eq(lessor_store_append_log(st, a, tok, 3, "lo wo", 5, T0, &len), -ERANGE);
	ck_assert_uint_eq(len, 5);
	ck_assert_int_eq(lessor_store_append_log(st, a, tok, 9, "x", 1, T0, &len), -ERANGE);
	/* the cap (10) keeps what fits and refuses the rest */
	ck_assert_int_eq(lessor_store_append_log(st, a, tok, 5, " world", 6, T0, &len), -EFBIG);
	ck_assert_uint_eq(len, 10);
	ck_assert_int_eq(lessor_store_append_log(st, a, tok, 10, "!", 1, T0, &len), -EFBIG);
	ck_assert_uint_eq(len, 10);
	ck_assert_int_eq(lessor_store_read_log(st, a, &log, &n), 0);
	ck_assert_uint_eq(n, 10);
	ck_assert_str_eq(log, "hello worl");
	free(log);
	ck_assert_int_eq((int)run_num(a, "log_length"), 10);
	ck_assert_int_eq(lessor_store_read_log(st, "r-9", &log, &n), -ENOENT);
	lessor_claim_result_done(&r);
}
END_TEST

START_TEST(test_complete_idempotent)
{
	_cleanup_free_ char *a = enqueue("w");
	struct lessor_claim_result r = claim("c1", 1, T0);
	struct lessor_completion done = done_ok(r.runs[0].token), fail;
	const char *answer = NULL;
	uint64_t len;
	bool cancel;
	_cleanup_free_ char *out = NULL;

	done.output_json = "{\"artifact\":\"x.tar\"}";
	ck_assert_int_eq(lessor_store_complete(st, a, &done, T0 + 1, &answer), 0);
	ck_assert_str_eq(answer, "succeeded");
	fail = done_fail(r.runs[0].token, true);
	answer = NULL;
	ck_assert_int_eq(lessor_store_complete(st, a, &fail, T0 + 2, &answer), 0);
	ck_assert_str_eq(answer, "succeeded"); /* same answer, nothing changed */
	assert_status(a, "succeeded");
	out = run_str(a, "output");
	ck_assert_str_eq(out, "{\"artifact\":\"x.tar\"}");
	ck_assert_int_eq((int)run_num(a, "exit_code"), 0);
	ck_assert_int_eq((int)run_num(a, "attempts_used"), 1);
	/* other writes with the finished lease are stale */
	ck_assert_int_eq(lessor_store_renew(st, a, r.runs[0].token, 5, T0, &cancel), -ESTALE);
	ck_assert_int_eq(lessor_store_append_log(st, a, r.runs[0].token, 0, "x", 1, T0, &len),
	                 -ESTALE);
	lessor_claim_result_done(&r);
}
END_TEST

/* Many completions in one write: each answered as lessor_store_complete (or
 * with next, lessor_store_complete_claim) would answer it, a stale one
 * counted, a skipped one left alone, each next claimed after its own
 * completion; on SQLite one commit for them all. */
START_TEST(test_complete_batch)
{
	_cleanup_free_ char *a = enqueue("w"), *b = enqueue("w"), *c = enqueue("w");
	struct lessor_claim_result r = claim("c1", 3, T0);
	struct lessor_claim_req next = {.claim_id = "c2",
	                                .worker_id = "w1",
	                                .max_runs = 1,
	                                .ttl_s = 5,
	                                .tags_json = "[]",
	                                .record_worker = true};
	_cleanup_free_ char *d = enqueue("w");
	struct lessor_store_counters before, after;
	struct lessor_complete_item v[5];

	ck_assert_uint_eq(r.n_runs, 3);
	v[0] = (struct lessor_complete_item){
	    .id = r.runs[0].id, .in = done_ok(r.runs[0].token), .next = &next};
	v[1] = (struct lessor_complete_item){.id = r.runs[1].id, .in = done_ok("nope")};
	v[2] = (struct lessor_complete_item){.id = "r-77", .in = done_ok(r.runs[0].token)};
	v[3] = (struct lessor_complete_item){.id = r.runs[2].id,
	                                     .in = done_fail(r.runs[2].token, false)};
	v[4] = (struct lessor_complete_item){
	    .id = r.runs[1].id, .in = done_ok(r.runs[1].token), .skip = true, .answer = -ESTALE};
	lessor_store_counters(st, &before);
	ck_assert_int_eq(lessor_store_complete_batch(st, v, ELEMENTSOF(v), T0 + 500), 0);
	lessor_store_counters(st, &after);
	if (streq(lessor_store_backend_name(st), "sqlite"))
		ck_assert_uint_eq(after.commits - before.commits, 1);
	ck_assert_int_eq(v[0].answer, 0);
	ck_assert_str_eq(v[0].run_status, "succeeded");
	ck_assert_int_eq(v[0].claim_r, 0);
	ck_assert_uint_eq(v[0].claim.n_runs, 1);
	ck_assert_str_eq(v[0].claim.runs[0].id, d);
	ck_assert_int_eq(v[1].answer, -ESTALE);
	ck_assert_int_eq(v[2].answer, -ENOENT);
	ck_assert_int_eq(v[3].answer, 0);
	ck_assert_str_eq(v[3].run_status, "failed");
	ck_assert_int_eq(v[4].answer, -ESTALE); /* untouched */
	ck_assert_int_eq((int)run_num(r.runs[1].id, "rejected_writes"), 1);
	assert_status(r.runs[0].id, "succeeded");
	assert_status(r.runs[1].id, "running");
	assert_status(r.runs[2].id, "failed");
	assert_status(d, "running");
	/* the same batch again: the same answers, the same claim replayed */
	lessor_claim_result_done(&v[0].claim);
	v[4].skip = false;
	ck_assert_int_eq(lessor_store_complete_batch(st, v, ELEMENTSOF(v), T0 + 600), 0);
	ck_assert_int_eq(v[0].answer, 0);
	ck_assert_str_eq(v[0].run_status, "succeeded");
	ck_assert(v[0].claim.replay);
	ck_assert_uint_eq(v[0].claim.n_runs, 1);
	ck_assert_str_eq(v[0].claim.runs[0].id, d);
	ck_assert_str_eq(v[3].run_status, "failed");
	ck_assert_int_eq(v[4].answer, 0);
	ck_assert_str_eq(v[4].run_status, "succeeded");
	lessor_claim_result_done(&v[0].claim);
	lessor_claim_result_done(&r);
	(void)a, (void)b, (void)c;
}
END_TEST

START_TEST(test_retry_backoff_and_budget)
{
	_cleanup_free_ char *a = enqueue_full("w", NULL, NULL, 3);
	struct lessor_claim_result r = claim("c1", 1, T0), r2;
	struct lessor_completion fail = done_fail(r.runs[0].token, true);
	const char *answer;
	bool wake;

	ck_assert_int_eq(lessor_store_complete(st, a, &fail, T0 + 100, &answer), 0);
	ck_assert_str_eq(answer, "retrying");
	assert_status(a, "pending");
	r2 = claim("c2", 1, T0 + 1099); /* backoff 1 s after the first failure */
	ck_assert_uint_eq(r2.n_runs, 0);
	lessor_claim_result_done(&r2);
	ck_assert_int_eq(lessor_store_tick(st, T0 + 1000, T0 + 1099, &wake), 0);
	ck_assert(!wake);
	ck_assert_int_eq(lessor_store_tick(st, T0 + 1099, T0 + 1100, &wake), 0);
	ck_assert(wake); /* long polls are told the run became due */
	lessor_claim_result_done(&r);
	r = claim("c3", 1, T0 + 1100);
	ck_assert_uint_eq(r.n_runs, 1);
	ck_assert_uint_eq(r.runs[0].attempt, 2);
	fail = done_fail(r.runs[0].token, true);
	ck_assert_int_eq(lessor_store_complete(st, a, &fail, T0 + 1200, &answer), 0);
	ck_assert_str_eq(answer, "retrying");
	r2 = claim("c4", 1, T0 + 3199); /* doubled: 2 s */
	ck_assert_uint_eq(r2.n_runs, 0);
	lessor_claim_result_done(&r2);
	lessor_claim_result_done(&r);
	r = claim("c5", 1, T0 + 3200);
	ck_assert_uint_eq(r.runs[0].attempt, 3);
	fail = done_fail(r.runs[0].token, true);
	ck_assert_int_eq(lessor_store_complete(st, a, &fail, T0 + 3300, &answer), 0);
	ck_assert_str_eq(answer, "failed"); /* budget of 3 spent */
	assert_status(a, "failed");
	ck_assert_int_eq((int)run_num(a, "attempts_used"), 3);
	lessor_claim_result_done(&r);
}
END_TEST

START_TEST(test_not_retryable_and_cap)
{
	_cleanup_free_ char *a = enqueue_full("w", NULL, NULL, 5);
	_cleanup_free_ char *b = enqueue_full("w", NULL, NULL, 9);
	struct lessor_claim_result r = claim("c1", 2, T0), r2;
	struct lessor_completion fail = done_fail(r.runs[0].token, false);
	const char *answer;
	int64_t t = T0;

	ck_assert_int_eq(lessor_store_complete(st, a, &fail, t, &answer), 0);
	ck_assert_str_eq(answer, "failed");
	/* the delay doubles up to retry_max (3 s) and stays there */
	fail = done_fail(r.runs[1].token, true);
	ck_assert_int_eq(lessor_store_complete(st, b, &fail, t, &answer), 0);
	lessor_claim_result_done(&r);
	for (int i = 0, delay = 1000; i < 4; i++, delay = MIN(delay * 2, 3000)) {
		char cid[16];

		snprintf(cid, sizeof(cid), "x%d", i);
		r2 = claim(cid, 1, t + delay - 1);
		ck_assert_uint_eq(r2.n_runs, 0);
		lessor_claim_result_done(&r2);
		snprintf(cid, sizeof(cid), "y%d", i);
		r2 = claim(cid, 1, t + delay);
		ck_assert_uint_eq(r2.n_runs, 1);
		t += delay;
		fail = done_fail(r2.runs[0].token, true);
		ck_assert_int_eq(lessor_store_complete(st, b, &fail, t, &answer), 0);
		lessor_claim_result_done(&r2);
	}
}
END_TEST

START_TEST(test_release)
{
	_cleanup_free_ char *a = enqueue("w");
	struct lessor_claim_result r = claim("c1", 1, T0), r2;

	ck_assert_int_eq(lessor_store_release(st, a, r.runs[0].token, "draining", 5, T0 + 10), 0);
	assert_status(a, "pending");
	r2 = claim("c2", 1, T0 + 5009);
	ck_assert_uint_eq(r2.n_runs, 0);
	lessor_claim_result_done(&r2);
	r2 = claim("c3", 1, T0 + 5010);
	ck_assert_uint_eq(r2.n_runs, 1);
	ck_assert_uint_eq(r2.runs[0].attempt, 1); /* a release consumes no attempt */
	ck_assert_int_eq(lessor_store_release(st, a, r.runs[0].token, "draining", 0, T0), -ESTALE);
	lessor_claim_result_done(&r2);
	lessor_claim_result_done(&r);
}
END_TEST

START_TEST(test_reaper)
{
	_cleanup_free_ char *a = enqueue("w");
	struct lessor_claim_result r = claim("c1", 1, T0), r2;
	_cleanup_free_ char *err = NULL, *reason = NULL;
	int64_t t = T0;
	bool wake;
	cJSON *v;

	ck_assert_int_eq(lessor_store_tick(st, t, t + 999, &wake), 0);
	assert_status(a, "running");
	ck_assert(!wake);
	ck_assert_int_eq(lessor_store_tick(st, t + 999, t + 1000, &wake), 0);
	ck_assert(wake);
	assert_status(a, "pending");
	r2 = claim("c2", 1, t + 1000);
	ck_assert_uint_eq(r2.n_runs, 1);
	ck_assert_str_ne(r2.runs[0].token, r.runs[0].token); /* a new token */
	ck_assert_uint_eq(r2.runs[0].attempt, 1);            /* expiry is not an attempt */
	lessor_claim_result_done(&r2);
	v = run_view(a);
	reason = cJSON_PrintUnformatted(cJSON_GetObjectItem(
	    cJSON_GetArrayItem(cJSON_GetObjectItem(v, "leases"), 0), "end_reason"));
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(v, "leases")), 2);
	cJSON_Delete(v);
	ck_assert_str_eq(reason, "\"expired\"");
	/* the third expiry fails the run */
	for (int i = 0; i < 2; i++) {
		t += 1000;
		ck_assert_int_eq(lessor_store_tick(st, t, t + 1000, &wake), 0);
		if (i == 0) {
			char cid[8];

			snprintf(cid, sizeof(cid), "d%d", i);
			r2 = claim(cid, 1, t + 1000);
			lessor_claim_result_done(&r2);
		}
	}
	assert_status(a, "failed");
	err = run_str(a, "error");
	ck_assert_str_eq(err, "lease expired 3 times");
	ck_assert_int_eq((int)run_num(a, "lease_expiries"), 3);
	lessor_claim_result_done(&r);
}
END_TEST

START_TEST(test_admin_requeue_and_cancel)
{
	_cleanup_free_ char *a = enqueue_full("w", NULL, NULL, 3), *b = enqueue("w");
	struct lessor_claim_result r = claim("c1", 1, T0), r2;
	struct lessor_completion fail;
	const char *status, *answer;
	bool cancel;

	ck_assert_int_eq(lessor_store_requeue(st, a, T0 + 1), 0);
	assert_status(a, "pending");
	ck_assert_int_eq(lessor_store_requeue(st, a, T0 + 1), -EBUSY);
	ck_assert_int_eq(lessor_store_renew(st, a, r.runs[0].token, 5, T0, &cancel), -ESTALE);
	r2 = claim("c2", 1, T0 + 2);
	ck_assert_str_eq(r2.runs[0].id, a);
	ck_assert_uint_eq(r2.runs[0].attempt, 1);
	ck_assert_int_eq(lessor_store_cancel(st, b, T0 + 3, &status), 0);
	ck_assert_str_eq(status, "cancelled");
	ck_assert_int_eq(lessor_store_cancel(st, b, T0 + 3, &status), 0);
	ck_assert_int_eq(lessor_store_cancel(st, a, T0 + 3, &status), 0);
	ck_assert_str_eq(status, "running");
	ck_assert_int_eq(lessor_store_renew(st, a, r2.runs[0].token, 5, T0 + 4, &cancel), 0);
	ck_assert(cancel);
	/* a cancel request is not retried even when the worker calls it retryable */
	fail = done_fail(r2.runs[0].token, true);
	ck_assert_int_eq(lessor_store_complete(st, a, &fail, T0 + 5, &answer), 0);
	ck_assert_str_eq(answer, "failed");
	ck_assert_int_eq(lessor_store_cancel(st, a, T0 + 6, &status), -EBUSY);
	ck_assert_int_eq(lessor_store_cancel(st, "r-404", T0 + 6, &status), -ENOENT);
	lessor_claim_result_done(&r2);
	lessor_claim_result_done(&r);
}
END_TEST

START_TEST(test_restart_recover)
{
	_cleanup_free_ char *a = enqueue("w");
	struct lessor_claim_result r = claim("c1", 1, T0);
	const char *answer;
	bool wake;
	struct lessor_completion done;

	st = lessor_store_free(st);
	ck_assert_int_eq(lessor_store_open(path, &cfg, &st), 0);
	/* back after 60 s: the lease gets its ttl (1 s) again from now */
	ck_assert_int_eq(lessor_store_recover(st, T0 + 60000), 0);
	ck_assert_int_eq(lessor_store_tick(st, T0, T0 + 60999, &wake), 0);
	assert_status(a, "running");
	done = done_ok(r.runs[0].token);
	ck_assert_int_eq(lessor_store_complete(st, a, &done, T0 + 60999, &answer), 0);
	lessor_claim_result_done(&r);
}
END_TEST

/* A deep queue's depth is the cap, then each run that leaves 'pending'
 * (claimed, cancelled) counts, to the exact figure below the cap. */
START_TEST(test_queue_depth_follows_a_deep_queue)
{
	const int n = LESSOR_QUEUE_DEPTH_CAP + 3;
	int pending = n;
	_cleanup_free_ char *last = NULL;
	const char *status;

	for (int i = 0; i < n; i++) {
		free(last);
		last = enqueue("w");
	}
	for (int i = 0; i < 6; i++) {
		_cleanup_free_ char *cid = tu_fmt("deep-%d", i);
		struct lessor_claim_result r = claim(cid, 1, T0 + i);

		ck_assert_uint_eq(r.n_runs, 1);
		pending--;
		ck_assert_uint_eq(r.queue_depth, (uint64_t)MIN(pending, LESSOR_QUEUE_DEPTH_CAP));
		lessor_claim_result_done(&r);
		if (i == 1) { /* a cancel takes one away too */
			ck_assert_int_eq(lessor_store_cancel(st, last, T0 + i, &status), 0);
			pending--;
		}
	}
}
END_TEST

static void claim_depth(const char *claim_id, const char *workflows, int64_t now,
                        const char *want_id, uint64_t want_depth)
{
	struct lessor_claim_result r = claim_as(claim_id, "w1", workflows, "[]", 1, now);

	ck_assert_uint_eq(r.n_runs, 1);
	ck_assert_str_eq(r.runs[0].id, want_id);
	ck_assert_uint_eq(r.queue_depth, want_depth);
	lessor_claim_result_done(&r);
}

/* Below the cap the depth is exact whatever happened between two claims of
 * the same filter: claims with another filter, a run coming back delayed and
 * becoming due later, a new run. */
START_TEST(test_queue_depth_exact_below_the_cap)
{
	char *id[9];
	struct lessor_claim_result r;

	for (int i = 1; i <= 6; i++)
		id[i] = enqueue("w");
	r = claim("c1", 1, T0);
	ck_assert_str_eq(r.runs[0].id, id[1]);
	ck_assert_int_eq(lessor_store_release(st, id[1], r.runs[0].token, "draining", 5, T0 + 1),
	                 0);
	lessor_claim_result_done(&r);
	claim_depth("c2", NULL, T0 + 2, id[2], 4); /* 3..6 due, 1 not yet */
	claim_depth("c3", NULL, T0 + 3, id[3], 3);
	claim_depth("c4", NULL, T0 + 6000, id[4], 3);      /* 5, 6 and 1, due now */
	claim_depth("o1", "[\"w\"]", T0 + 6001, id[5], 2); /* another filter */
	claim_depth("c5", NULL, T0 + 6002, id[6], 1);      /* 1 */
	claim_depth("c6", NULL, T0 + 6003, id[1], 0);
	id[7] = enqueue("w"); /* new runs */
	id[8] = enqueue("w");
	claim_depth("c7", NULL, T0 + 6004, id[7], 1);
	for (int i = 1; i <= 8; i++)
		free(id[i]);
}
END_TEST

static void assert_stats(int pending, int running, int succeeded, int failed, int cancelled)
{
	_cleanup_free_ char *want =
	    tu_fmt("{\"pending\":%d,\"running\":%d,\"succeeded\":%d,\"failed\":%d,"
	           "\"cancelled\":%d,\"total\":%d}",
	           pending, running, succeeded, failed, cancelled,
	           pending + running + succeeded + failed + cancelled);
	_cleanup_free_ char *got = NULL;
	cJSON *j = NULL;

	ck_assert_int_eq(lessor_store_stats_json(st, &j), 0);
	got = cJSON_PrintUnformatted(j);
	cJSON_Delete(j);
	ck_assert_str_eq(got, want);
}

/* The counts by status follow every change, a refused write changes none,
 * and they are the same after a restart. */
START_TEST(test_stats_follow_each_change)
{
	_cleanup_free_ char *a = enqueue_full("w", NULL, NULL, 2), *b = enqueue("w"),
	                    *c = enqueue("w");
	struct lessor_claim_result r;
	struct lessor_completion ok, fail;
	const char *answer;

	assert_stats(3, 0, 0, 0, 0);
	r = claim("c1", 2, T0);
	ck_assert_str_eq(r.runs[0].id, a);
	ck_assert_str_eq(r.runs[1].id, b);
	assert_stats(1, 2, 0, 0, 0);
	fail = done_fail(r.runs[0].token, true);
	ok = done_ok(r.runs[1].token);
	ck_assert_int_eq(lessor_store_complete(st, a, &fail, T0 + 1, &answer), 0);
	ck_assert_str_eq(answer, "retrying");
	ck_assert_int_eq(lessor_store_complete(st, b, &ok, T0 + 1, &answer), 0);
	assert_stats(2, 0, 1, 0, 0);
	/* refused (the token is spent): nothing changes */
	ck_assert_int_lt(lessor_store_complete(st, a, &ok, T0 + 2, &answer), 0);
	assert_stats(2, 0, 1, 0, 0);
	ck_assert_int_eq(lessor_store_cancel(st, c, T0 + 2, &answer), 0);
	assert_stats(1, 0, 1, 0, 1);
	lessor_claim_result_done(&r);
	st = lessor_store_free(st);
	ck_assert_int_eq(lessor_store_open(path, &cfg, &st), 0);
	assert_stats(1, 0, 1, 0, 1);
}
END_TEST

START_TEST(test_views)
{
	_cleanup_free_ char *a = enqueue("build"), *b = enqueue("deploy");
	struct lessor_claim_result r = claim_as("c1", "w1", "[\"build\"]", "[\"t\"]", 1, T0);
	cJSON *j = NULL, *w;
	_cleanup_free_ char *s = NULL;

	lessor_claim_result_done(&r);
	r = claim_as("c2", "w2", NULL, "[]", 1, T0);
	lessor_claim_result_done(&r);
	r = claim_as("c3", "w3", "[]", "[]", 1, T0);
	lessor_claim_result_done(&r);
	ck_assert_int_eq(lessor_store_stats_json(st, &j), 0);
	s = cJSON_PrintUnformatted(j);
	ck_assert_str_eq(s, "{\"pending\":0,\"running\":2,\"succeeded\":0,\"failed\":0,"
	                    "\"cancelled\":0,\"total\":2}");
	cJSON_Delete(j);
	ck_assert_int_eq(lessor_store_list_json(st, "running", "deploy", 10, &j), 0);
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "runs")), 1);
	ck_assert_str_eq(
	    cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "runs"), 0), "worker_id")
	        ->valuestring,
	    "w2");
	cJSON_Delete(j);
	ck_assert_int_eq(lessor_store_workers_json(st, &j), 0);
	w = cJSON_GetObjectItem(j, "workers");
	ck_assert_int_eq(cJSON_GetArraySize(w), 3);
	for (int i = 0; i < 3; i++) {
		cJSON *e = cJSON_GetArrayItem(w, i);
		const char *id = cJSON_GetObjectItem(e, "worker_id")->valuestring;
		char *wf = cJSON_PrintUnformatted(cJSON_GetObjectItem(e, "workflows"));

		/* omitted (any) and [] (none) stay distinguishable */
		ck_assert_str_eq(wf, streq(id, "w1")   ? "[\"build\"]"
		                     : streq(id, "w2") ? "null"
		                                       : "[]");
		ck_assert_int_eq(cJSON_GetObjectItem(e, "runs_held")->valueint,
		                 streq(id, "w3") ? 0 : 1);
		free(wf);
	}
	cJSON_Delete(j);
	(void)a;
	(void)b;
}
END_TEST

/* Ownership lookups for scoped worker tokens: current and ended leases,
 * claims made and claims cancelled before they were made. */
START_TEST(test_owners)
{
	_cleanup_free_ char *a = enqueue("w"), *w = NULL;
	struct lessor_claim_result r = claim_as("c1", "w7", NULL, NULL, 1, T0);
	struct lessor_completion done = done_ok(r.runs[0].token);
	const char *answer;
	unsigned released;

	ck_assert_int_eq(lessor_store_lease_holder(st, a, r.runs[0].token, &w), 0);
	ck_assert_str_eq(w, "w7");
	free(w);
	w = NULL;
	ck_assert_int_eq(lessor_store_complete(st, a, &done, T0 + 1, &answer), 0);
	ck_assert_int_eq(lessor_store_lease_holder(st, a, r.runs[0].token, &w), 0); /* ended */
	ck_assert_str_eq(w, "w7");
	free(w);
	w = NULL;
	ck_assert_int_eq(lessor_store_lease_holder(st, a, "nope", &w), -ENOENT);
	ck_assert_int_eq(lessor_store_lease_holder(st, "r-99", r.runs[0].token, &w), -ENOENT);
	ck_assert_int_eq(lessor_store_lease_holder(st, "bogus", r.runs[0].token, &w), -ENOENT);
	ck_assert_int_eq(lessor_store_claim_owner(st, "c1", &w), 0);
	ck_assert_str_eq(w, "w7");
	free(w);
	w = NULL;
	ck_assert_int_eq(lessor_store_claim_owner(st, "c2", &w), -ENOENT);
	ck_assert_int_eq(lessor_store_claim_cancel(st, "c2", T0 + 2, &released), 0);
	ck_assert_int_eq(lessor_store_claim_owner(st, "c2", &w), 0);
	ck_assert_str_eq(w, "");
	lessor_claim_result_done(&r);
}
END_TEST

/* ---- concurrency: many threads claiming on one store never share a run ---- */

#define N_RUNS 400
#define N_THREADS 4

struct claimer {
	int index;
	lessor_store *store; /* NULL: st */
	char ids[N_RUNS][LESSOR_RUN_ID_MAX];
	size_t n;
};

static void *claimer_main(void *p)
{
	struct claimer *c = p;
	lessor_store *s = c->store ? c->store : st;

	for (int round = 0;; round++) {
		char cid[32];
		struct lessor_claim_req q = {.claim_id = cid,
		                             .worker_id = "w",
		                             .max_runs = 1 + (unsigned)(round % 7),
		                             .ttl_s = 60,
		                             .tags_json = "[]"};
		struct lessor_claim_result r;

		snprintf(cid, sizeof(cid), "t%d-%d", c->index, round);
		if (lessor_store_claim(s, &q, T0, &r) < 0)
			return (void *)1;
		if (r.n_runs == 0)
			return NULL;
		for (size_t i = 0; i < r.n_runs; i++) {
			struct lessor_completion done = done_ok(r.runs[i].token);
			const char *answer;

			memcpy(c->ids[c->n++], r.runs[i].id, LESSOR_RUN_ID_MAX);
			if (lessor_store_complete(s, r.runs[i].id, &done, T0, &answer) < 0)
				return (void *)1;
		}
		lessor_claim_result_done(&r);
	}
}

START_TEST(test_concurrent_claims)
{
	static struct claimer c[N_THREADS];
	pthread_t t[N_THREADS];
	static char seen[N_RUNS + 1];
	size_t total = 0;

	/* static (big), and without forking shared by both backends' runs */
	memset(seen, 0, sizeof(seen));
	for (int i = 0; i < N_RUNS; i++)
		free(enqueue("w"));
	for (int i = 0; i < N_THREADS; i++) {
		c[i] = (struct claimer){.index = i};
		ck_assert_int_eq(pthread_create(&t[i], NULL, claimer_main, &c[i]), 0);
	}
	for (int i = 0; i < N_THREADS; i++) {
		void *rv;

		pthread_join(t[i], &rv);
		ck_assert_ptr_null(rv);
		for (size_t k = 0; k < c[i].n; k++) {
			int n = atoi(c[i].ids[k] + 2);

			ck_assert_int_le(n, N_RUNS);
			ck_assert_msg(!seen[n], "run %s granted twice", c[i].ids[k]);
			seen[n] = 1;
		}
		total += c[i].n;
	}
	ck_assert_uint_eq(total, N_RUNS);
}
END_TEST

/* ---- PostgreSQL only ---- */

struct opener {
	lessor_store *s;
	int r;
};

static void *opener_main(void *p)
{
	struct opener *o = p;

	o->r = lessor_store_open(path, &cfg, &o->s);
	return NULL;
}

START_TEST(test_pg_instances_and_schema)
{
	_cleanup_free_ char *fresh = tu_pg_create_db(pg), *n = NULL;
	struct opener o[3] = {0};
	pthread_t t[3];
	lessor_store *other = NULL;
	char *uri;

	/* several servers on one database: that is the point */
	ck_assert_int_eq(lessor_store_open(path, &cfg, &other), 0);
	other = lessor_store_free(other);
	/* instances starting together on a new database migrate it once */
	free(path);
	path = strdup(fresh);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, opener_main, &o[i]), 0);
	for (int i = 0; i < 3; i++) {
		pthread_join(t[i], NULL);
		ck_assert_int_eq(o[i].r, 0);
		lessor_store_free(o[i].s);
	}
	n = tu_pg_query1(path, "SELECT count(*) || ':' || max(version)"
	                       " FROM lessor_schema_migrations");
	ck_assert_str_eq(n, "1:1");
	/* a database from a newer lessor is refused */
	ck_assert_int_eq(tu_pg_exec(path, "INSERT INTO lessor_schema_migrations VALUES (99)"), 0);
	log_set_max_level(LOG_CRIT); /* the refusals are logged as errors; expected here */
	ck_assert_int_eq(lessor_store_open(path, &cfg, &other), -EPROTO);
	/* a password on the command line is refused, whatever the syntax */
	ck_assert_int_eq(lessor_store_open("postgresql://u:secret@localhost/db", &cfg, &other),
	                 -EPERM);
	ck_assert_int_eq(lessor_store_open("host=/tmp dbname=x password=secret", &cfg, &other),
	                 -EPERM);
	ck_assert_ptr_null(other);
	ck_assert_int_ge(asprintf(&uri, "%s?x", "postgresql://localhost/db"), 0);
	ck_assert(lessor_store_target_is_pg(uri));
	ck_assert(lessor_store_target_is_pg("host=/run/postgresql dbname=lessor"));
	ck_assert(!lessor_store_target_is_pg("/var/lib/lessor/lessor.db"));
	ck_assert(!lessor_store_target_is_pg("./a=b/lessor.db"));
	free(uri);
}
END_TEST

/* Claims from two instances (store handles, each with its own pool) and
 * several threads each never share a run. */
START_TEST(test_pg_concurrent_instances)
{
	lessor_store *second = NULL, *mine = st;
	static struct claimer c[N_THREADS];
	pthread_t t[N_THREADS];
	static char seen[N_RUNS + 1];
	size_t total = 0;

	/* static (big), and without forking shared by both backends' runs */
	memset(seen, 0, sizeof(seen));
	ck_assert_int_eq(lessor_store_open(path, &cfg, &second), 0);
	for (int i = 0; i < N_RUNS; i++)
		free(enqueue("w"));
	for (int i = 0; i < N_THREADS; i++) {
		c[i] = (struct claimer){.index = i, .store = i % 2 ? second : mine};
		ck_assert_int_eq(pthread_create(&t[i], NULL, claimer_main, &c[i]), 0);
	}
	for (int i = 0; i < N_THREADS; i++) {
		void *rv;

		pthread_join(t[i], &rv);
		ck_assert_ptr_null(rv);
		for (size_t k = 0; k < c[i].n; k++) {
			int n = atoi(c[i].ids[k] + 2);

			ck_assert_int_le(n, N_RUNS);
			ck_assert_msg(!seen[n], "run %s granted twice", c[i].ids[k]);
			seen[n] = 1;
		}
		total += c[i].n;
	}
	ck_assert_uint_eq(total, N_RUNS);
	lessor_store_free(second);
}
END_TEST

static pthread_mutex_t hint_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hint_cond = PTHREAD_COND_INITIALIZER;
static int hints;

static char hint_workflow[32];

static void on_hint(void *userdata, const char *workflow)
{
	pthread_mutex_lock(&hint_lock);
	hints++;
	snprintf(hint_workflow, sizeof(hint_workflow), "%s", workflow ? workflow : "(any)");
	pthread_cond_broadcast(&hint_cond);
	pthread_mutex_unlock(&hint_lock);
}

static int wait_hints(int want)
{
	struct timespec ts;
	int got;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += 10;
	pthread_mutex_lock(&hint_lock);
	while (hints < want && pthread_cond_timedwait(&hint_cond, &hint_lock, &ts) == 0)
		;
	got = hints;
	pthread_mutex_unlock(&hint_lock);
	return got;
}

/* Another instance's enqueue and release reach this instance as hints (its
 * long polls look again); its own do not (it woke them itself). */
START_TEST(test_pg_notify_across_instances)
{
	lessor_store *other = NULL;
	struct lessor_claim_result r;
	_cleanup_free_ char *a = NULL;

	ck_assert_int_eq(lessor_store_open(path, &cfg, &other), 0);
	lessor_store_set_notify(st, on_hint, NULL);
	a = enqueue("w"); /* our own: no hint */
	{
		struct lessor_enqueue e = {.workflow = "w", .input_json = "{}", .max_attempts = 1};
		char id[LESSOR_RUN_ID_MAX];
		bool created;

		ck_assert_int_eq(lessor_store_enqueue(other, &e, T0, id, &created), 0);
	}
	ck_assert_int_eq(wait_hints(1), 1);
	ck_assert_str_eq(hint_workflow, "w"); /* an enqueue names its workflow */
	r = claim("c1", 1, T0);
	ck_assert_uint_eq(r.n_runs, 1);
	ck_assert_int_eq(lessor_store_release(other, r.runs[0].id, r.runs[0].token, "x", 0, T0), 0);
	ck_assert_int_ge(wait_hints(2), 2);
	ck_assert_str_eq(hint_workflow, "(any)"); /* a release does not */
	lessor_claim_result_done(&r);
	lessor_store_set_notify(st, NULL, NULL);
	lessor_store_free(other);
}
END_TEST

/* Production mode: the database's clock, whatever `now` the caller passes. */
START_TEST(test_pg_database_clock)
{
	lessor_store *db_clock = NULL;
	struct lessor_claim_req q = {
	    .claim_id = "c1", .worker_id = "w", .max_runs = 1, .ttl_s = 30, .tags_json = "[]"};
	struct lessor_claim_result r;
	struct lessor_completion done;
	const char *answer;
	bool cancel, wake;
	_cleanup_free_ char *a = NULL;
	cJSON *v;
	long long created;

	cfg.caller_clock = false;
	ck_assert_int_eq(lessor_store_open(path, &cfg, &db_clock), 0);
	{
		struct lessor_enqueue e = {.workflow = "w", .input_json = "{}", .max_attempts = 1};
		char id[LESSOR_RUN_ID_MAX];
		bool cr;

		ck_assert_int_eq(lessor_store_enqueue(db_clock, &e, 0, id, &cr), 0);
		a = strdup(id);
	}
	/* a caller clock of 0 (1970) or far ahead changes nothing */
	ck_assert_int_eq(lessor_store_claim(db_clock, &q, 0, &r), 0);
	ck_assert_uint_eq(r.n_runs, 1);
	ck_assert_int_eq(lessor_store_tick(db_clock, 0, INT64_MAX / 2, &wake), 0);
	ck_assert_int_eq(lessor_store_renew(db_clock, a, r.runs[0].token, 30, 0, &cancel), 0);
	done = done_ok(r.runs[0].token);
	ck_assert_int_eq(lessor_store_complete(db_clock, a, &done, 0, &answer), 0);
	ck_assert_str_eq(answer, "succeeded");
	ck_assert_int_eq(lessor_store_run_json(db_clock, a, &v), 0);
	created = tu_rfc3339_ms(cJSON_GetObjectItem(v, "created_at")->valuestring);
	cJSON_Delete(v);
	ck_assert_int_gt(created, T0); /* a real date, from the server */
	lessor_claim_result_done(&r);
	lessor_store_free(db_clock);
}
END_TEST

/* Renewals and log appends touch no indexed column: HOT updates. */
START_TEST(test_pg_hot_updates)
{
	_cleanup_free_ char *a = enqueue("w"), *hot = NULL;
	struct lessor_claim_result r = claim("c1", 1, T0);
	uint64_t len;
	bool cancel;

	for (int i = 0; i < 20; i++)
		ck_assert_int_eq(lessor_store_renew(st, a, r.runs[0].token, 5, T0 + i, &cancel), 0);
	ck_assert_int_eq(lessor_store_append_log(st, a, r.runs[0].token, 0, "x", 1, T0, &len), 0);
	lessor_claim_result_done(&r);
	st = lessor_store_free(st); /* a backend flushes its statistics when it exits */
	for (int i = 0; i < 400; i++) {
		free(hot);
		hot = tu_pg_query1(path, "SELECT n_tup_hot_upd FROM pg_stat_user_tables"
		                         " WHERE relname = 'lessor_runs'");
		if (hot && atoi(hot) >= 21)
			break;
		tu_sleep(50 * USEC_PER_MSEC);
	}
	ck_assert_ptr_nonnull(hot);
	ck_assert_int_ge(atoi(hot), 21);
}
END_TEST

/* Connections that break (server restart, failover, an admin's
 * pg_terminate_backend) are replaced: the next calls work, and the LISTEN
 * connection comes back and wakes the long polls (hints may have been lost). */
START_TEST(test_pg_connections_replaced)
{
	_cleanup_free_ char *a = enqueue("w");
	struct lessor_claim_result r;
	bool cancel;

	hints = 0;
	lessor_store_set_notify(st, on_hint, NULL);
	log_set_max_level(LOG_CRIT); /* the broken connections are logged; expected here */
	/* (the timeout: wait until they are gone, so the next calls meet dead
	 * connections, not dying ones) */
	ck_assert_int_eq(tu_pg_exec(path, "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity"
	                                  " WHERE datname = current_database()"
	                                  " AND pid <> pg_backend_pid()"),
	                 0);
	r = claim("c1", 1, T0); /* a transaction: retried on a fresh connection */
	ck_assert_uint_eq(r.n_runs, 1);
	ck_assert_int_eq(lessor_store_renew(st, a, r.runs[0].token, 5, T0, &cancel), 0);
	ck_assert_int_ge(wait_hints(1), 1);
	lessor_store_set_notify(st, NULL, NULL);
	lessor_claim_result_done(&r);
}
END_TEST

static void add_shared(TCase *tc)
{
	tcase_add_test(tc, test_enqueue_and_idempotency_key);
	tcase_add_test(tc, test_routing);
	tcase_add_test(tc, test_claim_order_and_depth);
	tcase_add_test(tc, test_claim_idempotent);
	tcase_add_test(tc, test_claim_cancel);
	tcase_add_test(tc, test_fencing);
	tcase_add_test(tc, test_write_after_deadline_refused);
	tcase_add_test(tc, test_renew_batch);
	tcase_add_test(tc, test_log_append);
	tcase_add_test(tc, test_complete_idempotent);
	tcase_add_test(tc, test_complete_batch);
	tcase_add_test(tc, test_retry_backoff_and_budget);
	tcase_add_test(tc, test_not_retryable_and_cap);
	tcase_add_test(tc, test_release);
	tcase_add_test(tc, test_reaper);
	tcase_add_test(tc, test_admin_requeue_and_cancel);
	tcase_add_test(tc, test_restart_recover);
	tcase_add_test(tc, test_views);
	tcase_add_test(tc, test_stats_follow_each_change);
	tcase_add_test(tc, test_queue_depth_follows_a_deep_queue);
	tcase_add_test(tc, test_queue_depth_exact_below_the_cap);
	tcase_add_test(tc, test_owners);
	tcase_add_test(tc, test_concurrent_claims);
}

static Suite *suite(void)
{
	Suite *s = suite_create("lessor_store");
	TCase *tc = tcase_create("sqlite");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_schema_and_lock);
	tcase_add_test(tc, test_page_size);
	tcase_add_test(tc, test_checks_without_temp_tables);
	tcase_add_test(tc, test_checks_migrated);
	tcase_add_test(tc, test_status_indexes_hold_active_runs);
	tcase_add_test(tc, test_checks_migration_refuses_other_text);
	tcase_add_test(tc, test_no_memory_statistics);
	tcase_add_test(tc, test_commit_one_wal_write);
	tcase_add_test(tc, test_large_commit_written_whole);
	add_shared(tc);
	suite_add_tcase(s, tc);
	if (!pg)
		return s;
	tc = tcase_create("postgresql");
	tcase_add_checked_fixture(tc, setup_pg, teardown);
	tcase_set_timeout(tc, 60);
	add_shared(tc);
	tcase_add_test(tc, test_pg_instances_and_schema);
	tcase_add_test(tc, test_pg_concurrent_instances);
	tcase_add_test(tc, test_pg_notify_across_instances);
	tcase_add_test(tc, test_pg_database_clock);
	tcase_add_test(tc, test_pg_hot_updates);
	tcase_add_test(tc, test_pg_connections_replaced);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	SRunner *sr;
	int r, failed;

	/* one server for the whole binary, started before Check forks */
	r = tu_pg_start(&pg);
	if (r == -ENOENT)
		fprintf(stderr, "SKIP: the PostgreSQL cases (no PostgreSQL server binaries; "
		                "Debian: apt-get install postgresql)\n");
	else if (r < 0) {
		fprintf(stderr, "cannot start a PostgreSQL server: %s\n", strerror(-r));
		return EXIT_FAILURE;
	}
	sr = srunner_create(suite());
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	tu_pg_free(pg);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
