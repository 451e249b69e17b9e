/* The SQLite backend's connection: open, pragmas, migrations, the statement cache and
 * the transaction wrapper every transition goes through. */
#include "lessor/store_sqlite-int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>

#include "log/log.h"
#include "util/macro.h"
#include "util/strutil.h"

/* Migration n brings user_version from n to n + 1.  Never edit a shipped one.
 * One that edits the text of the schema (sqlite_schema, the way SQLite's
 * documentation gives for changing CHECK constraints) sets edits_schema: it
 * runs with writable_schema on and the schema version bumped after it, and
 * its verify query must answer 0. */
static const struct migration {
	const char *sql;
	bool edits_schema;
	const char *verify;
} migrations[] = {
    /* 0 -> 1: the initial schema.  Times are wall-clock ms since the epoch. */
    {.sql = "CREATE TABLE runs ("
            "  seq INTEGER PRIMARY KEY AUTOINCREMENT," /* run id is 'r-' || seq */
            "  workflow TEXT NOT NULL,"
            "  input TEXT NOT NULL,"
            "  tags TEXT NOT NULL DEFAULT '[]',"
            "  max_attempts INTEGER NOT NULL CHECK (max_attempts >= 1),"
            "  timeout_s INTEGER,"
            "  idempotency_key TEXT UNIQUE,"
            "  status TEXT NOT NULL CHECK (status IN"
            "    ('pending','running','succeeded','failed','cancelled')),"
            "  attempts INTEGER NOT NULL DEFAULT 0," /* consumed attempts */
            "  lease_expiries INTEGER NOT NULL DEFAULT 0,"
            "  cancel_requested INTEGER NOT NULL DEFAULT 0,"
            "  not_before INTEGER NOT NULL,"
            "  lease_id INTEGER," /* the held lease while running */
            "  lease_expires_at INTEGER,"
            "  rejected_writes INTEGER NOT NULL DEFAULT 0,"
            "  log_length INTEGER NOT NULL DEFAULT 0,"
            "  outcome TEXT, reason TEXT, exit_code INTEGER, signal TEXT, error TEXT,"
            "  retryable INTEGER, duration_ms INTEGER, reported_log_length INTEGER, output TEXT,"
            "  created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL,"
            "  started_at INTEGER, finished_at INTEGER,"
            "  CHECK ((status = 'running') = (lease_id IS NOT NULL)));"
            "CREATE INDEX runs_queue ON runs(status, seq);"
            "CREATE INDEX runs_due ON runs(status, not_before);"
            "CREATE INDEX runs_expiry ON runs(status, lease_expires_at);"
            "CREATE INDEX runs_workflow ON runs(workflow, seq);"
            "CREATE TABLE run_tags ("
            "  run_seq INTEGER NOT NULL REFERENCES runs(seq),"
            "  tag TEXT NOT NULL,"
            "  PRIMARY KEY (run_seq, tag)) WITHOUT ROWID;"
            "CREATE TABLE leases ("
            "  id INTEGER PRIMARY KEY AUTOINCREMENT,"
            "  run_seq INTEGER NOT NULL REFERENCES runs(seq),"
            "  token TEXT NOT NULL UNIQUE,"
            "  attempt INTEGER NOT NULL,"
            "  worker_id TEXT NOT NULL,"
            "  claim_id TEXT NOT NULL,"
            "  ttl_s INTEGER NOT NULL,"
            "  granted_at INTEGER NOT NULL,"
            "  last_renewed_at INTEGER," /* NULL: never renewed (claim cancel) */
            "  ended_at INTEGER,"
            "  end_reason TEXT CHECK (end_reason IN"
            "    ('completed','released','expired','revoked','cancelled')),"
            "  detail TEXT,"  /* release reason, ... */
            "  answer TEXT);" /* run_status answered to complete, for idempotency */
            "CREATE INDEX leases_run ON leases(run_seq);"
            "CREATE INDEX leases_claim ON leases(claim_id);"
            "CREATE TABLE claims ("
            "  claim_id TEXT PRIMARY KEY,"
            "  worker_id TEXT NOT NULL,"
            "  created_at INTEGER NOT NULL,"
            "  cancelled INTEGER NOT NULL DEFAULT 0);"
            "CREATE INDEX claims_age ON claims(created_at);"
            "CREATE TABLE workers ("
            "  worker_id TEXT PRIMARY KEY,"
            "  last_claim_at INTEGER NOT NULL,"
            "  workflows TEXT," /* JSON array as sent; NULL = omitted */
            "  tags TEXT NOT NULL,"
            "  max_runs INTEGER NOT NULL,"
            "  claims INTEGER NOT NULL DEFAULT 0,"
            "  runs_granted INTEGER NOT NULL DEFAULT 0);"
            "CREATE TABLE log_chunks ("
            "  run_seq INTEGER NOT NULL REFERENCES runs(seq),"
            "  start INTEGER NOT NULL,"
            "  data BLOB NOT NULL,"
            "  PRIMARY KEY (run_seq, start)) WITHOUT ROWID;"},
    /* 1 -> 2: the runs and leases CHECKs compare instead of testing IN (...).
     * SQLite turns an IN list of more than two values into a temporary table,
     * built at every write of the row: 8 % of lessor's CPU per run.  The two
     * forms accept the same values (NULL included), so the rows need no check. */
    {.sql = "UPDATE sqlite_schema SET sql = replace(sql,"
            "  'CHECK (status IN    (''pending'',''running'',''succeeded'',''failed'',"
            "''cancelled''))',"
            "  'CHECK (status = ''pending'' OR status = ''running'' OR status = ''succeeded''"
            " OR status = ''failed'' OR status = ''cancelled'')')"
            " WHERE type = 'table' AND name = 'runs';"
            "UPDATE sqlite_schema SET sql = replace(sql,"
            "  'CHECK (end_reason IN    (''completed'',''released'',''expired'',''revoked'',"
            "''cancelled''))',"
            "  'CHECK (end_reason = ''completed'' OR end_reason = ''released''"
            " OR end_reason = ''expired'' OR end_reason = ''revoked''"
            " OR end_reason = ''cancelled'')')"
            " WHERE type = 'table' AND name = 'leases';",
     .edits_schema = true,
     .verify = "SELECT COUNT(*) FROM sqlite_schema WHERE type = 'table'"
               " AND name IN ('runs', 'leases') AND sql NOT LIKE '%'' OR %'"},
    /* 2 -> 3: the runs are indexed by status only while they are pending
     * (in queue order) or running (by lease deadline), in partial indexes:
     * a claim and a completion each moved a run in three indexes that held
     * every run; now a claim moves it from one to the other and a
     * completion takes it out of one, and finished runs cost nothing. */
    {.sql = "DROP INDEX runs_queue;"
            "DROP INDEX runs_due;"
            "DROP INDEX runs_expiry;"
            "CREATE INDEX runs_pending ON runs(not_before, seq) WHERE status = 'pending';"
            "CREATE INDEX runs_running ON runs(lease_expires_at) WHERE status = 'running';"},
};

const char *lessor_sqlite_migration_sql(unsigned from)
{
	return from < ELEMENTSOF(migrations) ? migrations[from].sql : NULL;
}

int lessor_db_error(lessor_sqlite *s, int rc, const char *sql)
{
	log_error("sqlite: %s (%s)", sqlite3_errmsg(s->db), sql ? sql : "?");
	switch (rc & 0xff) {
	case SQLITE_NOMEM:
		return -ENOMEM;
	case SQLITE_FULL:
		return -ENOSPC;
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
		return -EBUSY;
	case SQLITE_CONSTRAINT:
		return -EEXIST;
	case SQLITE_TOOBIG:
		return -E2BIG;
	default:
		return -EIO;
	}
}

static sqlite3_stmt *stmt_get(lessor_sqlite *s, const char *sql, int *ret_rc)
{
	struct lessor_db_stmt *e;
	int rc;

	for (size_t i = 0; i < s->n_stmts; i++)
		if (s->stmts[i].sql == sql) {
			sqlite3_reset(s->stmts[i].st);
			sqlite3_clear_bindings(s->stmts[i].st);
			return s->stmts[i].st;
		}
	/* every statement is a literal in lib/lessor, so the cache is bounded */
	if (s->n_stmts >= LESSOR_DB_STMT_MAX) {
		*ret_rc = SQLITE_NOMEM;
		return NULL;
	}
	e = &s->stmts[s->n_stmts];
	rc = sqlite3_prepare_v3(s->db, sql, -1, SQLITE_PREPARE_PERSISTENT, &e->st, NULL);
	if (rc != SQLITE_OK) {
		*ret_rc = rc;
		return NULL;
	}
	e->sql = sql;
	s->n_stmts++;
	return e->st;
}

static int bind_args(sqlite3_stmt *st, const char *fmt, va_list ap)
{
	int rc = SQLITE_OK;

	for (int i = 1; *fmt && rc == SQLITE_OK; fmt++, i++) {
		switch (*fmt) {
		case 'i':
			rc = sqlite3_bind_int64(st, i, va_arg(ap, int64_t));
			break;
		case 's': {
			const char *v = va_arg(ap, const char *);

			rc = v ? sqlite3_bind_text(st, i, v, -1, SQLITE_STATIC)
			       : sqlite3_bind_null(st, i);
			break;
		}
		case 'n': { /* nullable integer: const int64_t * */
			const int64_t *v = va_arg(ap, const int64_t *);

			rc = v ? sqlite3_bind_int64(st, i, *v) : sqlite3_bind_null(st, i);
			break;
		}
		case 'b': {
			const void *p = va_arg(ap, const void *);
			size_t n = va_arg(ap, size_t);

			rc = sqlite3_bind_blob64(st, i, p, n, SQLITE_STATIC);
			break;
		}
		default:
			return SQLITE_MISUSE;
		}
	}
	return rc;
}

int lessor_db_next(lessor_sqlite *s, sqlite3_stmt *st)
{
	int rc = sqlite3_step(st);

	if (rc == SQLITE_ROW)
		return 1;
	if (rc == SQLITE_DONE)
		return 0;
	return lessor_db_error(s, rc, sqlite3_sql(st));
}

int lessor_db_query(lessor_sqlite *s, sqlite3_stmt **ret_st, const char *sql, const char *fmt, ...)
{
	sqlite3_stmt *st;
	va_list ap;
	int rc = SQLITE_OK;

	st = stmt_get(s, sql, &rc);
	if (!st)
		return lessor_db_error(s, rc, sql);
	va_start(ap, fmt);
	rc = bind_args(st, fmt, ap);
	va_end(ap);
	if (rc != SQLITE_OK)
		return lessor_db_error(s, rc, sql);
	if (ret_st)
		*ret_st = st;
	return lessor_db_next(s, st);
}

static int exec_plain(lessor_sqlite *s, const char *sql)
{
	int rc = sqlite3_exec(s->db, sql, NULL, NULL, NULL);

	return rc == SQLITE_OK ? 0 : lessor_db_error(s, rc, sql);
}

static const char SQL_BEGIN_IMMEDIATE[] = "BEGIN IMMEDIATE";
static const char SQL_BEGIN[] = "BEGIN";
static const char SQL_COMMIT[] = "COMMIT";
static const char SQL_ROLLBACK[] = "ROLLBACK";

/* no statement may still be stepping when a transaction or savepoint ends */
static void reset_all(lessor_sqlite *s)
{
	for (size_t i = 0; i < s->n_stmts; i++)
		sqlite3_reset(s->stmts[i].st);
}

/* One transaction per call: reads, and writes with --group-commit no. */
static int tx_alone(lessor_sqlite *s, bool write, lessor_db_fn fn, void *userdata)
{
	int r;

	if (write)
		atomic_fetch_add(&s->waiting, 1);
	pthread_mutex_lock(&s->lock);
	if (write) {
		atomic_fetch_sub(&s->waiting, 1);
		atomic_fetch_add(&s->writes, 1);
		atomic_fetch_add(&s->commits, 1);
	}
	r = lessor_db_query(s, NULL, write ? SQL_BEGIN_IMMEDIATE : SQL_BEGIN, "");
	if (r >= 0) {
		r = fn(s, userdata);
		reset_all(s);
		if (r >= 0) {
			int c = lessor_db_query(s, NULL, SQL_COMMIT, "");

			if (c < 0)
				r = c;
		}
		if (r < 0 && !sqlite3_get_autocommit(s->db))
			(void)lessor_db_query(s, NULL, SQL_ROLLBACK, "");
		if (r < 0)
			lessor_db_forget_depths(s);
	}
	pthread_mutex_unlock(&s->lock);
	return r;
}

/* ---- group commit ----
 *
 * A writer queues its write and waits.  When no transaction is running, one
 * waiting writer becomes the leader: it takes the whole queue, runs every
 * write in one transaction, each in its own savepoint, commits once and
 * hands each writer its result.  Writes that arrive during that commit (the
 * fsync, with synchronous=FULL) queue for the next leader's transaction. */

struct lessor_db_write {
	lessor_db_fn fn;
	void *userdata;
	int r;
	bool done;         /* r is final: the writer may return */
	bool lead;         /* the writer is to lead the next transaction */
	pthread_cond_t cv; /* the writer's own wake-up: no herd on a shared one */
	struct lessor_db_write *next;
};

static const char SQL_SAVEPOINT[] = "SAVEPOINT w";
static const char SQL_RELEASE[] = "RELEASE w";
static const char SQL_ROLLBACK_TO[] = "ROLLBACK TO w";

/* fn in a savepoint: when it fails, its own statements are undone and the
 * transaction goes on.  < 0 from the savepoint statements themselves too. */
static int write_in_savepoint(lessor_sqlite *s, struct lessor_db_write *w)
{
	int r = lessor_db_query(s, NULL, SQL_SAVEPOINT, "");

	if (r < 0)
		return r;
	r = w->fn(s, w->userdata);
	reset_all(s);
	if (r < 0)
		lessor_db_forget_depths(s);
	if (r < 0 && !sqlite3_get_autocommit(s->db))
		(void)lessor_db_query(s, NULL, SQL_ROLLBACK_TO, "");
	if (!sqlite3_get_autocommit(s->db)) {
		int k = lessor_db_query(s, NULL, SQL_RELEASE, "");

		if (r >= 0 && k < 0)
			r = k;
	}
	return r;
}

static const char SQL_NESTED[] = "SAVEPOINT n";
static const char SQL_NESTED_RELEASE[] = "RELEASE n";
static const char SQL_NESTED_ROLLBACK_TO[] = "ROLLBACK TO n";

int lessor_db_nested(lessor_sqlite *s, lessor_db_fn fn, void *userdata, bool *ret_tx_lost)
{
	int r = lessor_db_query(s, NULL, SQL_NESTED, "");

	if (r >= 0) {
		r = fn(s, userdata);
		reset_all(s);
		if (r < 0)
			lessor_db_forget_depths(s);
		if (r < 0 && !sqlite3_get_autocommit(s->db))
			(void)lessor_db_query(s, NULL, SQL_NESTED_ROLLBACK_TO, "");
		if (!sqlite3_get_autocommit(s->db)) {
			int k = lessor_db_query(s, NULL, SQL_NESTED_RELEASE, "");

			if (r >= 0 && k < 0)
				r = k;
		}
	}
	*ret_tx_lost = sqlite3_get_autocommit(s->db);
	return r;
}

static void fail_from(struct lessor_db_write *w, struct lessor_db_write *end, int r)
{
	for (; w != end; w = w->next)
		if (w->r >= 0)
			w->r = r;
}

/* Runs the writes from `first` on in one transaction and commits it.  When
 * SQLite rolled the whole transaction back under a write (I/O error, full
 * disk, no memory: rare, and bad news for the others too) the writes before
 * it are lost: they fail with its error, and the rest start a new
 * transaction.  Returns the first write not run (NULL: all). */
static struct lessor_db_write *run_group(lessor_sqlite *s, struct lessor_db_write *first)
{
	struct lessor_db_write *w;
	int r = lessor_db_query(s, NULL, SQL_BEGIN_IMMEDIATE, "");

	atomic_fetch_add(&s->commits, 1);
	if (r < 0) {
		lessor_db_forget_depths(s);
		fail_from(first, NULL, r);
		return NULL;
	}
	if (!first->next) {
		/* alone: no savepoint needed, a failure rolls the transaction back */
		first->r = first->fn(s, first->userdata);
		reset_all(s);
		if (first->r < 0) {
			lessor_db_forget_depths(s);
			if (!sqlite3_get_autocommit(s->db))
				(void)lessor_db_query(s, NULL, SQL_ROLLBACK, "");
			return NULL;
		}
	}
	for (w = first->next ? first : NULL; w; w = w->next) {
		w->r = write_in_savepoint(s, w);
		if (sqlite3_get_autocommit(s->db)) {
			lessor_db_forget_depths(s);
			fail_from(first, w->next, w->r < 0 ? w->r : -EIO);
			return w->next;
		}
	}
	r = lessor_db_query(s, NULL, SQL_COMMIT, "");
	if (r < 0) {
		lessor_db_forget_depths(s);
		/* a failed COMMIT fails every write of the transaction */
		fail_from(first, NULL, r);
		if (!sqlite3_get_autocommit(s->db))
			(void)lessor_db_query(s, NULL, SQL_ROLLBACK, "");
	}
	return NULL;
}

static void run_batch(lessor_sqlite *s, struct lessor_db_write *batch)
{
	pthread_mutex_lock(&s->lock);
	while (batch)
		batch = run_group(s, batch);
	pthread_mutex_unlock(&s->lock);
}

/* The leader: takes the queue, runs it, wakes its writers.  Called and
 * returns with gc_lock held. */
static void lead(lessor_sqlite *s)
{
	struct lessor_db_write *batch = s->gc_queue, *next;
	size_t n = 0;

	s->gc_queue = NULL;
	s->gc_tail = &s->gc_queue;
	s->gc_leading = true;
	for (struct lessor_db_write *w = batch; w; w = w->next)
		n++;
	atomic_fetch_sub(&s->waiting, n);
	atomic_fetch_add(&s->writes, n);
	pthread_mutex_unlock(&s->gc_lock);
	run_batch(s, batch);
	pthread_mutex_lock(&s->gc_lock);
	/* a writer cannot return before we let go of gc_lock: its entry (on its
	 * stack) stays valid until then */
	for (struct lessor_db_write *w = batch; w; w = next) {
		next = w->next;
		w->done = true;
		pthread_cond_signal(&w->cv);
	}
	/* the writes queued meanwhile: their first writer leads the next group */
	s->gc_leading = s->gc_queue != NULL;
	if (s->gc_queue) {
		s->gc_queue->lead = true;
		pthread_cond_signal(&s->gc_queue->cv);
	}
}

static int write_grouped(lessor_sqlite *s, lessor_db_fn fn, void *userdata)
{
	struct lessor_db_write w = {.fn = fn, .userdata = userdata};

	pthread_cond_init(&w.cv, NULL);
	pthread_mutex_lock(&s->gc_lock);
	*s->gc_tail = &w;
	s->gc_tail = &w.next;
	atomic_fetch_add(&s->waiting, 1);
	while (!w.done) {
		if (!s->gc_leading || w.lead) {
			w.lead = false;
			lead(s);
		} else
			pthread_cond_wait(&w.cv, &s->gc_lock);
	}
	pthread_mutex_unlock(&s->gc_lock);
	pthread_cond_destroy(&w.cv);
	return w.r;
}

int lessor_db_tx(lessor_sqlite *s, bool write, lessor_db_fn fn, void *userdata)
{
	if (write && !s->cfg.no_group_commit)
		return write_grouped(s, fn, userdata);
	return tx_alone(s, write, fn, userdata);
}

char *lessor_db_strdup(sqlite3_stmt *st, int col)
{
	const unsigned char *t = sqlite3_column_text(st, col);

	return t ? strdup((const char *)t) : NULL;
}

int64_t lessor_db_int(sqlite3_stmt *st, int col)
{
	return sqlite3_column_int64(st, col);
}

bool lessor_db_is_null(sqlite3_stmt *st, int col)
{
	return sqlite3_column_type(st, col) == SQLITE_NULL;
}

static int query_int(lessor_sqlite *s, const char *sql, int64_t *ret)
{
	sqlite3_stmt *st;
	int r = lessor_db_query(s, &st, sql, "");

	if (r < 0)
		return r;
	*ret = r > 0 ? lessor_db_int(st, 0) : 0;
	sqlite3_reset(st);
	return 0;
}

/* A migration that rewrites the schema's text, inside the migration's
 * transaction: the schema version goes up by one so that SQLite reads the
 * new text. */
static int edit_schema(lessor_sqlite *s, const struct migration *m)
{
	char bump[64];
	int64_t version, left;
	int r = query_int(s, "PRAGMA schema_version", &version);

	if (r < 0)
		return r;
	snprintf(bump, sizeof(bump), "PRAGMA schema_version = %" PRId64, version + 1);
	r = exec_plain(s, "PRAGMA writable_schema = ON");
	if (r >= 0)
		r = exec_plain(s, m->sql);
	if (r >= 0)
		r = query_int(s, m->verify, &left);
	if (r >= 0 && left != 0) {
		log_error("database schema is not the one this migration expects");
		r = -EPROTO;
	}
	if (r >= 0)
		r = exec_plain(s, bump);
	(void)sqlite3_exec(s->db, "PRAGMA writable_schema = OFF", NULL, NULL, NULL);
	return r;
}

static int migrate(lessor_sqlite *s)
{
	int64_t v;
	int r = query_int(s, "PRAGMA user_version", &v);

	if (r < 0)
		return r;
	if (v > (int64_t)ELEMENTSOF(migrations)) {
		log_error("database schema version %" PRId64 " is newer than this lessor (%zu)", v,
		          ELEMENTSOF(migrations));
		return -EPROTO;
	}
	for (; v < (int64_t)ELEMENTSOF(migrations); v++) {
		char set[64];

		snprintf(set, sizeof(set), "PRAGMA user_version = %" PRId64, v + 1);
		r = exec_plain(s, "BEGIN IMMEDIATE");
		if (r >= 0)
			r = migrations[v].edits_schema ? edit_schema(s, &migrations[v])
			                               : exec_plain(s, migrations[v].sql);
		if (r >= 0)
			r = exec_plain(s, set);
		if (r >= 0)
			r = exec_plain(s, "COMMIT");
		if (r < 0) {
			(void)sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
			return r;
		}
		log_info("database migrated to schema version %" PRId64, v + 1);
	}
	return 0;
}

/* The number of runs in each status, kept by triggers as the runs change, so
 * that /v1/stats (a dashboard's, a bench's frequent poll) reads five rows
 * rather than counting every run.  TEMP: this connection's own, in memory,
 * counted afresh at each start, no schema change (one server per database:
 * every write goes through this connection); the counts change within the
 * write transactions, so a rolled-back write leaves them right. */
static const char SQL_RUN_COUNTS[] =
    "PRAGMA temp_store = MEMORY;"
    "CREATE TEMP TABLE run_counts (status TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID;"
    /* one pass over the runs: no index holds the finished ones */
    "INSERT INTO temp.run_counts SELECT status, COUNT(*) FROM main.runs GROUP BY status;"
    "INSERT OR IGNORE INTO temp.run_counts VALUES ('pending', 0), ('running', 0),"
    "  ('succeeded', 0), ('failed', 0), ('cancelled', 0);"
    /* how many runs ever left and entered 'pending' (since the start): see
     * queue_depth */
    "INSERT INTO temp.run_counts VALUES ('left_pending', 0), ('entered_pending', 0);"
    "CREATE TEMP TRIGGER run_counts_insert AFTER INSERT ON main.runs BEGIN"
    "  UPDATE run_counts SET n = n + 1 WHERE status = NEW.status;"
    "  UPDATE run_counts SET n = n + 1 WHERE status = 'entered_' || NEW.status; END;"
    "CREATE TEMP TRIGGER run_counts_update AFTER UPDATE OF status ON main.runs"
    "  WHEN OLD.status IS NOT NEW.status BEGIN"
    "  UPDATE run_counts SET n = n - 1 WHERE status = OLD.status;"
    "  UPDATE run_counts SET n = n + 1 WHERE status = NEW.status;"
    "  UPDATE run_counts SET n = n + 1 WHERE status = 'left_' || OLD.status;"
    "  UPDATE run_counts SET n = n + 1 WHERE status = 'entered_' || NEW.status; END;"
    "CREATE TEMP TRIGGER run_counts_delete AFTER DELETE ON main.runs BEGIN"
    "  UPDATE run_counts SET n = n - 1 WHERE status = OLD.status;"
    "  UPDATE run_counts SET n = n + 1 WHERE status = 'left_' || OLD.status; END;";

static int check_wal(lessor_sqlite *s)
{
	sqlite3_stmt *st;
	int r = lessor_db_query(s, &st, "PRAGMA journal_mode = WAL", "");

	if (r < 0)
		return r;
	if (r == 0 || !streq((const char *)sqlite3_column_text(st, 0), "wal")) {
		log_error("database refuses WAL mode");
		return -EIO;
	}
	sqlite3_reset(st);
	return 0;
}

static int configure(lessor_sqlite *s)
{
	int r;

	/* Before WAL mode, so that a new database gets it (an existing one keeps
	 * its own): a run's claim and completion each dirty about a dozen pages,
	 * and a commit writes each of them whole to the WAL.  1 KiB pages cut
	 * lessor's CPU per run by 11-15 % against SQLite's 4 KiB (bench/e2e
	 * --baseline-lessor; 512 and 2048 were no better). */
	r = exec_plain(s, "PRAGMA page_size = 1024");
	if (r < 0)
		return r;
	r = check_wal(s);
	if (r < 0)
		return r;
	/* WAL + NORMAL: a commit is in the WAL (page cache) before it returns, so
	 * kill -9 loses nothing; FULL also fsyncs the WAL on every commit, so a
	 * power loss loses nothing either. */
	r = exec_plain(s, s->cfg.sync_full ? "PRAGMA synchronous = FULL"
	                                   : "PRAGMA synchronous = NORMAL");
	if (r < 0)
		return r;
	r = exec_plain(s, "PRAGMA foreign_keys = ON");
	if (r < 0)
		return r;
	sqlite3_busy_timeout(s->db, 5000);
	r = migrate(s);
	if (r < 0)
		return r;
	return exec_plain(s, SQL_RUN_COUNTS);
}

/* One server per database: two would each wake only their own long polls. */
static int lock_database(lessor_sqlite *s, const char *path)
{
	/* created here first so the database gets mode 0600: it holds lease tokens */
	s->lock_fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOCTTY, 0600);
	if (s->lock_fd < 0)
		return -errno;
	if (flock(s->lock_fd, LOCK_EX | LOCK_NB) < 0)
		return errno == EWOULDBLOCK ? -EBUSY : -errno;
	return 0;
}

void lessor_db_forget_depths(lessor_sqlite *s)
{
	for (size_t i = 0; i < LESSOR_DEPTH_MEMO_MAX; i++) {
		free(s->depth_memo[i].workflows_json);
		free(s->depth_memo[i].tags_json);
		s->depth_memo[i] = (struct lessor_depth_memo){0};
	}
}

static void sqlite_free(void *be);

static void sqlite_counters(void *be, struct lessor_store_counters *ret)
{
	lessor_sqlite *s = be;

	*ret = (struct lessor_store_counters){.commits = atomic_load(&s->commits),
	                                      .writes = atomic_load(&s->writes),
	                                      .waiting = atomic_load(&s->waiting),
	                                      .checkpoints = atomic_load(&s->checkpoints),
	                                      .checkpoints_inline =
	                                          atomic_load(&s->checkpoints_inline)};
}

static pthread_once_t sqlite_config_once = PTHREAD_ONCE_INIT;

/* Before SQLite's first use in the process: no allocation statistics.  They
 * take a process-wide mutex around every malloc and free SQLite makes, and
 * Debian's SQLite, built without lookaside, makes dozens per statement
 * (3 % of lessor's CPU per run, bench/e2e --baseline-lessor).  Nothing here
 * reads them. */
static void sqlite_global_config(void)
{
	sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}

static int sqlite_open(const char *path, const struct lessor_store_config *cfg, void **ret)
{
	lessor_sqlite *s = calloc(1, sizeof(*s));
	int rc, r;

	if (!s)
		return -ENOMEM;
	s->cfg = *cfg;
	s->lock_fd = -1;
	pthread_mutex_init(&s->lock, NULL);
	pthread_mutex_init(&s->gc_lock, NULL);
	s->gc_tail = &s->gc_queue;
	r = lock_database(s, path);
	if (r < 0)
		goto fail;
	pthread_once(&sqlite_config_once, sqlite_global_config);
	rc = sqlite3_open_v2(path, &s->db,
	                     SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
	                     lessor_sqlite_vfs());
	if (rc != SQLITE_OK) {
		r = s->db ? lessor_db_error(s, rc, "open") : -ENOMEM;
		goto fail;
	}
	sqlite3_extended_result_codes(s->db, 1);
	r = configure(s);
	if (r < 0)
		goto fail;
	r = lessor_ckpt_start(s, path);
	if (r < 0)
		goto fail;
	*ret = s;
	return 0;
fail:
	sqlite_free(s);
	return r;
}

static void sqlite_free(void *be)
{
	lessor_sqlite *s = be;

	if (!s)
		return;
	lessor_ckpt_stop(s);
	for (size_t i = 0; i < s->n_stmts; i++)
		sqlite3_finalize(s->stmts[i].st);
	if (s->db)
		sqlite3_close(s->db);
	/* after sqlite3_close: closing an fd of the file drops SQLite's POSIX locks */
	safe_close(s->lock_fd);
	lessor_db_forget_depths(s);
	pthread_mutex_destroy(&s->lock);
	pthread_mutex_destroy(&s->gc_lock);
	free(s);
}

const struct lessor_store_backend lessor_store_backend_sqlite = {
    .name = "sqlite",
    .open = sqlite_open,
    .free = sqlite_free,
    .counters = sqlite_counters,
    .recover = lessor_sqlite_recover,
    .enqueue = lessor_sqlite_enqueue,
    .claim = lessor_sqlite_claim,
    .claim_cancel = lessor_sqlite_claim_cancel,
    .renew = lessor_sqlite_renew,
    .renew_batch = lessor_sqlite_renew_batch,
    .append_log = lessor_sqlite_append_log,
    .complete = lessor_sqlite_complete,
    .complete_claim = lessor_sqlite_complete_claim,
    .complete_batch = lessor_sqlite_complete_batch,
    .enqueue_claim = lessor_sqlite_enqueue_claim,
    .release = lessor_sqlite_release,
    .cancel = lessor_sqlite_cancel,
    .requeue = lessor_sqlite_requeue,
    .tick = lessor_sqlite_tick,
    .run_json = lessor_sqlite_run_json,
    .list_json = lessor_sqlite_list_json,
    .stats_json = lessor_sqlite_stats_json,
    .workers_json = lessor_sqlite_workers_json,
    .read_log = lessor_sqlite_read_log,
    .lease_holder = lessor_sqlite_lease_holder,
    .claim_owner = lessor_sqlite_claim_owner,
    .cancels = lessor_sqlite_cancels,
};
