/* The PostgreSQL backend's plumbing: the target check, versioned migrations
 * under an advisory lock, the connection pool with per-connection prepared
 * statements, the transaction wrapper, and the listener that turns other
 * instances' NOTIFY into long-poll wake-ups.
 *
 * Several lessor instances may serve one database.  What keeps them
 * correct is in the SQL (store_pg_ops.c): claims lock candidate rows with
 * FOR UPDATE SKIP LOCKED, every write made with a lease names the run, its
 * token and its state in its WHERE and checks the affected row count, the
 * reaper runs under pg_try_advisory_xact_lock (transaction-scoped, so
 * PgBouncer in transaction mode is fine), and time is the database's now().
 * NOTIFY is only a hint; the reaper's periodic check is the backstop. */
#include "lessor/store_pg-int.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log/log.h"
#include "util/random.h"
#include "util/strutil.h"
#include "util/time.h"

#define PG_PARAMS_MAX 16
#define PG_TX_RETRIES 5
#define PG_DEFAULT_CONNECTIONS 4

/* Migration n brings the schema from version n to n + 1.  Never edit a
 * shipped one.  Times are ms since the epoch (bigint), from lessor_now():
 * the database's clock, or the caller's in caller_clock mode.
 *
 * The hot table (lessor_runs) holds pending and running runs only; finished
 * runs move to lessor_runs_done, the immutable part of a run (input, ...) is
 * in lessor_run_specs and logs in lessor_log_chunks, so the rows that claims
 * scan and renewals update stay few and small.  No index covers a lease
 * column (token, lease_expires_at, log_length, updated_at): renewals and
 * log appends are HOT updates. */
static const char *const migrations[] = {
    /* 0 -> 1 */
    "CREATE FUNCTION lessor_now(caller bigint) RETURNS bigint LANGUAGE sql STABLE AS"
    "  $$ SELECT COALESCE(caller, (extract(epoch FROM now()) * 1000)::bigint) $$;"
    "CREATE SEQUENCE lessor_run_seq;"
    "CREATE TABLE lessor_run_specs ("
    "  seq bigint PRIMARY KEY,"
    "  workflow text NOT NULL,"
    "  input text NOT NULL,"
    "  tags text NOT NULL," /* JSON array text */
    "  max_attempts integer NOT NULL CHECK (max_attempts >= 1),"
    "  timeout_s integer,"
    "  idempotency_key text UNIQUE,"
    "  created_at bigint NOT NULL);"
    "CREATE TABLE lessor_runs ("
    "  seq bigint PRIMARY KEY REFERENCES lessor_run_specs(seq),"
    "  workflow text NOT NULL,"
    "  tags text[] NOT NULL,"
    "  status text NOT NULL CHECK (status IN ('pending','running')),"
    "  epoch bigint NOT NULL DEFAULT 0," /* fencing epoch: +1 per grant */
    "  attempts integer NOT NULL DEFAULT 0,"
    "  lease_expiries integer NOT NULL DEFAULT 0,"
    "  cancel_requested boolean NOT NULL DEFAULT false,"
    "  not_before bigint NOT NULL,"
    "  lease_id bigint, token text, lease_expires_at bigint,"
    "  rejected_writes bigint NOT NULL DEFAULT 0,"
    "  log_length bigint NOT NULL DEFAULT 0,"
    "  outcome text, reason text, exit_code integer, signal text, error text,"
    "  retryable boolean, duration_ms bigint, reported_log_length bigint, output text,"
    "  updated_at bigint NOT NULL, started_at bigint,"
    "  CHECK ((status = 'running') = (lease_id IS NOT NULL AND token IS NOT NULL)))"
    "  WITH (fillfactor = 70);"
    "CREATE INDEX lessor_runs_queue ON lessor_runs (not_before, seq) WHERE status = 'pending';"
    "CREATE INDEX lessor_runs_held ON lessor_runs (seq) WHERE status = 'running';"
    "CREATE TABLE lessor_runs_done ("
    "  seq bigint PRIMARY KEY REFERENCES lessor_run_specs(seq),"
    "  status text NOT NULL CHECK (status IN ('succeeded','failed','cancelled')),"
    "  attempts integer NOT NULL,"
    "  lease_expiries integer NOT NULL,"
    "  cancel_requested boolean NOT NULL,"
    "  not_before bigint NOT NULL,"
    "  rejected_writes bigint NOT NULL,"
    "  log_length bigint NOT NULL,"
    "  outcome text, reason text, exit_code integer, signal text, error text,"
    "  retryable boolean, duration_ms bigint, reported_log_length bigint, output text,"
    "  updated_at bigint NOT NULL, started_at bigint, finished_at bigint NOT NULL);"
    "CREATE INDEX lessor_runs_done_status ON lessor_runs_done (status, seq);"
    "CREATE VIEW lessor_runs_all AS"
    "  SELECT s.seq, s.workflow, s.input, s.tags, s.max_attempts, s.timeout_s,"
    "   s.idempotency_key, s.created_at, r.status, r.attempts, r.lease_expiries,"
    "   r.cancel_requested, r.not_before, r.lease_id, r.lease_expires_at,"
    "   r.rejected_writes, r.log_length, r.outcome, r.reason, r.exit_code, r.signal,"
    "   r.error, r.retryable, r.duration_ms, r.reported_log_length, r.output,"
    "   r.updated_at, r.started_at, r.finished_at"
    "  FROM lessor_run_specs s JOIN ("
    "   SELECT seq, status, attempts, lease_expiries, cancel_requested, not_before,"
    "    lease_id, lease_expires_at, rejected_writes, log_length, outcome, reason,"
    "    exit_code, signal, error, retryable, duration_ms, reported_log_length, output,"
    "    updated_at, started_at, NULL::bigint AS finished_at FROM lessor_runs"
    "   UNION ALL"
    "   SELECT seq, status, attempts, lease_expiries, cancel_requested, not_before,"
    "    NULL::bigint, NULL::bigint, rejected_writes, log_length, outcome, reason,"
    "    exit_code, signal, error, retryable, duration_ms, reported_log_length, output,"
    "    updated_at, started_at, finished_at FROM lessor_runs_done) r ON r.seq = s.seq;"
    "CREATE TABLE lessor_leases ("
    "  id bigserial PRIMARY KEY,"
    "  run_seq bigint NOT NULL REFERENCES lessor_run_specs(seq),"
    "  token text NOT NULL UNIQUE,"
    "  epoch bigint NOT NULL,"
    "  attempt integer NOT NULL,"
    "  worker_id text NOT NULL,"
    "  claim_id text NOT NULL,"
    "  ttl_s integer NOT NULL,"
    "  granted_at bigint NOT NULL,"
    "  last_renewed_at bigint," /* NULL: never renewed (claim cancel) */
    "  ended_at bigint,"
    "  end_reason text CHECK (end_reason IN"
    "    ('completed','released','expired','revoked','cancelled')),"
    "  detail text,"
    "  answer text);"
    "CREATE INDEX lessor_leases_run ON lessor_leases (run_seq);"
    "CREATE INDEX lessor_leases_claim ON lessor_leases (claim_id);"
    "CREATE TABLE lessor_claims ("
    "  claim_id text PRIMARY KEY,"
    "  worker_id text NOT NULL,"
    "  created_at bigint NOT NULL,"
    "  cancelled boolean NOT NULL DEFAULT false);"
    "CREATE INDEX lessor_claims_age ON lessor_claims (created_at);"
    "CREATE TABLE lessor_workers ("
    "  worker_id text PRIMARY KEY,"
    "  last_claim_at bigint NOT NULL,"
    "  workflows text,"
    "  tags text NOT NULL,"
    "  max_runs integer NOT NULL,"
    "  claims bigint NOT NULL DEFAULT 0,"
    "  runs_granted bigint NOT NULL DEFAULT 0);"
    "CREATE TABLE lessor_log_chunks ("
    "  run_seq bigint NOT NULL REFERENCES lessor_run_specs(seq),"
    "  start bigint NOT NULL,"
    "  data bytea NOT NULL,"
    "  PRIMARY KEY (run_seq, start));"
    "CREATE TABLE lessor_meta ("
    "  id integer PRIMARY KEY CHECK (id = 1),"
    "  reaped_at bigint);" /* the last reaper tick of any instance */
    "INSERT INTO lessor_meta VALUES (1, NULL);",
};

/* ---- results ---- */

/* libpq's multi-line messages as one line: "a\n\tb\n" -> "a b" */
static const char *one_line(const char *msg, char *buf, size_t size)
{
	size_t n = 0;

	for (const char *p = msg ? msg : "?"; *p && n + 1 < size; p++) {
		char ch = *p == '\n' || *p == '\t' ? ' ' : *p;

		if (ch != ' ' || (n > 0 && buf[n - 1] != ' '))
			buf[n++] = ch;
	}
	while (n > 0 && buf[n - 1] == ' ')
		n--;
	buf[n] = '\0';
	return buf;
}

const char *pg_val(const PGresult *r, int row, int col)
{
	return PQgetisnull(r, row, col) ? NULL : PQgetvalue(r, row, col);
}

int64_t pg_int(const PGresult *r, int row, int col)
{
	const char *v = pg_val(r, row, col);

	if (!v)
		return 0;
	if (streq(v, "t"))
		return 1;
	if (streq(v, "f"))
		return 0;
	return strtoll(v, NULL, 10);
}

char *pg_strdup(const PGresult *r, int row, int col)
{
	const char *v = pg_val(r, row, col);

	return v ? strdup(v) : NULL;
}

static int result_error(struct pg_conn *c, PGresult *res, const char *sql)
{
	const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
	const char *msg = res ? PQresultErrorMessage(res) : PQerrorMessage(c->conn);
	int r = -EIO;

	if (state && (streq(state, "40001") || streq(state, "40P01")))
		r = -EDEADLK;
	else if (state && streq(state, "23505"))
		r = -EEXIST;
	else if (state && streq(state, "53100"))
		r = -ENOSPC;
	else if (state && streq(state, "53200"))
		r = -ENOMEM;
	/* a lost connection is reconnected for the next request: 503, retry */
	if (PQstatus(c->conn) == CONNECTION_BAD)
		r = -EBUSY;
	if (r != -EDEADLK) {
		char line[512];

		log_error("postgresql: %s (%.80s)", one_line(msg, line, sizeof(line)),
		          sql ? sql : "?");
	}
	PQclear(res);
	return r;
}

/* ---- statements ---- */

static int stmt_index(lessor_pg *s, const char *sql)
{
	int idx = -1;

	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < s->n_stmts; i++)
		if (s->stmts[i] == sql) {
			idx = (int)i;
			break;
		}
	/* every statement is a literal in lib/lessor, so the registry is bounded */
	if (idx < 0 && s->n_stmts < PG_STMT_MAX) {
		idx = (int)s->n_stmts;
		s->stmts[s->n_stmts++] = sql;
	}
	pthread_mutex_unlock(&s->lock);
	return idx;
}

static int prepare(lessor_pg *s, struct pg_conn *c, int idx, const char *sql)
{
	char name[16];
	PGresult *res;

	if (c->prepared[idx])
		return 0;
	snprintf(name, sizeof(name), "l%d", idx);
	res = PQprepare(c->conn, name, sql, 0, NULL);
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		return result_error(c, res, sql);
	PQclear(res);
	c->prepared[idx] = true;
	return 0;
}

int pg_query(lessor_pg *s, struct pg_conn *c, PGresult **ret, bool binary, const char *sql,
             const char *fmt, ...)
{
	char bufs[PG_PARAMS_MAX][24], name[16];
	const char *values[PG_PARAMS_MAX];
	int lengths[PG_PARAMS_MAX], formats[PG_PARAMS_MAX], n = 0, idx, r;
	ExecStatusType st;
	PGresult *res;
	va_list ap;

	idx = stmt_index(s, sql);
	if (idx < 0)
		return -ENOMEM;
	r = prepare(s, c, idx, sql);
	if (r < 0)
		return r;
	va_start(ap, fmt);
	for (; *fmt && n < PG_PARAMS_MAX; fmt++, n++) {
		lengths[n] = 0;
		formats[n] = 0;
		switch (*fmt) {
		case 'i':
			snprintf(bufs[n], sizeof(bufs[n]), "%" PRId64, va_arg(ap, int64_t));
			values[n] = bufs[n];
			break;
		case 'n': {
			const int64_t *v = va_arg(ap, const int64_t *);

			if (v)
				snprintf(bufs[n], sizeof(bufs[n]), "%" PRId64, *v);
			values[n] = v ? bufs[n] : NULL;
			break;
		}
		case 's':
			values[n] = va_arg(ap, const char *);
			break;
		case 'b':
			values[n] = va_arg(ap, const void *);
			lengths[n] = (int)va_arg(ap, size_t);
			formats[n] = 1;
			break;
		default:
			va_end(ap);
			return -EINVAL;
		}
	}
	va_end(ap);
	if (*fmt)
		return -E2BIG; /* more than PG_PARAMS_MAX parameters: a bug */
	snprintf(name, sizeof(name), "l%d", idx);
	res = PQexecPrepared(c->conn, name, n, values, lengths, formats, binary ? 1 : 0);
	st = PQresultStatus(res);
	if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
		return result_error(c, res, sql);
	if (ret)
		*ret = res;
	else
		PQclear(res);
	return 0;
}

int pg_exec_plain(struct pg_conn *c, const char *sql)
{
	PGresult *res = PQexec(c->conn, sql);

	if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK)
		return result_error(c, res, sql);
	PQclear(res);
	return 0;
}

/* ---- connections ---- */

static void on_notice(void *arg, const char *message)
{
	log_debug("postgresql: %s", message);
}

static PGconn *connect_db(const char *target, const char *appname)
{
	/* defaults first: anything in the target overrides them.  A bounded
	 * connect, and TCP keepalives that notice a dead server within a minute
	 * (the LISTEN connection would otherwise wait on it for hours) */
	const char *keys[] = {"connect_timeout",
	                      "keepalives_idle",
	                      "keepalives_interval",
	                      "keepalives_count",
	                      "dbname",
	                      "fallback_application_name",
	                      NULL};
	const char *vals[] = {"10", "30", "10", "3", target, appname, NULL};
	PGconn *conn = PQconnectdbParams(keys, vals, 1);

	if (conn && PQstatus(conn) == CONNECTION_OK) {
		PQsetNoticeProcessor(conn, on_notice, NULL);
		return conn;
	}
	{
		char line[512];

		log_error("postgresql: cannot connect: %s",
		          conn ? one_line(PQerrorMessage(conn), line, sizeof(line))
		               : "out of memory");
	}
	PQfinish(conn);
	return NULL;
}

/* A connection that broke is reset before it is handed out again; its
 * prepared statements are gone with it. */
static int conn_ready(lessor_pg *s, struct pg_conn *c)
{
	if (c->conn && PQstatus(c->conn) == CONNECTION_OK &&
	    PQtransactionStatus(c->conn) == PQTRANS_IDLE)
		return 0;
	PQfinish(c->conn);
	memset(c->prepared, 0, sizeof(c->prepared));
	c->conn = connect_db(s->target, "lessor");
	if (!c->conn)
		return -EBUSY;
	/* --synchronous normal: a commit is answered before its WAL is flushed;
	 * a crash of the database server (not of lessor) may lose the last ones */
	return s->cfg.sync_full ? 0 : pg_exec_plain(c, "SET synchronous_commit = off");
}

static struct pg_conn *conn_get(lessor_pg *s)
{
	struct pg_conn *c = NULL;

	pthread_mutex_lock(&s->lock);
	for (;;) {
		for (size_t i = 0; i < s->n_conns && !c; i++)
			if (!s->conns[i].busy)
				c = &s->conns[i];
		if (c)
			break;
		pthread_cond_wait(&s->freed, &s->lock);
	}
	c->busy = true;
	pthread_mutex_unlock(&s->lock);
	return c;
}

static void conn_put(lessor_pg *s, struct pg_conn *c)
{
	pthread_mutex_lock(&s->lock);
	c->busy = false;
	pthread_cond_signal(&s->freed);
	pthread_mutex_unlock(&s->lock);
}

static int run_once(lessor_pg *s, struct pg_conn *c, bool tx, bool read_only, pg_fn fn,
                    void *userdata)
{
	int r;

	if (tx) {
		r = pg_exec_plain(c, read_only ? "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
		                               : "BEGIN");
		/* nothing was done yet: a connection that broke while idle (the
		 * server restarted, failed over) is replaced and the call retried */
		if (r < 0 && PQstatus(c->conn) == CONNECTION_BAD)
			return -EDEADLK;
		if (r < 0)
			return r;
	}
	r = fn(s, c, userdata);
	if (tx) {
		if (r >= 0) {
			int k = pg_exec_plain(c, "COMMIT");

			if (!read_only)
				atomic_fetch_add(&s->commits, 1);
			if (k < 0)
				r = k;
		}
		if (PQtransactionStatus(c->conn) != PQTRANS_IDLE)
			(void)pg_exec_plain(c, "ROLLBACK");
	}
	return r;
}

int pg_run(lessor_pg *s, bool tx, bool read_only, pg_fn fn, void *userdata)
{
	struct pg_conn *c = conn_get(s);
	int r;

	for (int attempt = 0;; attempt++) {
		r = conn_ready(s, c);
		if (r >= 0)
			r = run_once(s, c, tx, read_only, fn, userdata);
		if (r != -EDEADLK || attempt >= PG_TX_RETRIES)
			break;
	}
	if (r == -EDEADLK)
		log_error("postgresql: transaction still conflicting after %d attempts",
		          PG_TX_RETRIES + 1);
	conn_put(s, c);
	return r;
}

/* ---- migrations ---- */

static int schema_version(lessor_pg *s, struct pg_conn *c, int64_t *ret)
{
	PGresult *res;
	int r;

	r = pg_exec_plain(c, "CREATE TABLE IF NOT EXISTS lessor_schema_migrations ("
	                     " version integer PRIMARY KEY,"
	                     " applied_at timestamptz NOT NULL DEFAULT now())");
	if (r < 0)
		return r;
	res = PQexec(c->conn, "SELECT COALESCE(MAX(version), 0) FROM lessor_schema_migrations");
	if (PQresultStatus(res) != PGRES_TUPLES_OK)
		return result_error(c, res, "schema version");
	*ret = pg_int(res, 0, 0);
	PQclear(res);
	return 0;
}

/* One transaction, under an advisory lock: instances starting together
 * migrate once, the others wait and then see the new version. */
static int migrate_tx(lessor_pg *s, struct pg_conn *c, void *userdata)
{
	char sql[128];
	int64_t v = 0;
	int r;

	snprintf(sql, sizeof(sql), "SELECT pg_advisory_xact_lock(%d, %d)", PG_LOCK_CLASS,
	         PG_LOCK_MIGRATE);
	r = pg_exec_plain(c, sql);
	if (r >= 0)
		r = schema_version(s, c, &v);
	if (r < 0)
		return r;
	if (v > (int64_t)ELEMENTSOF(migrations)) {
		log_error("database schema version %" PRId64 " is newer than this lessor (%zu)", v,
		          ELEMENTSOF(migrations));
		return -EPROTO;
	}
	for (; v < (int64_t)ELEMENTSOF(migrations); v++) {
		r = pg_exec_plain(c, migrations[v]);
		if (r < 0)
			return r;
		snprintf(sql, sizeof(sql),
		         "INSERT INTO lessor_schema_migrations (version) VALUES (%" PRId64 ")",
		         v + 1);
		r = pg_exec_plain(c, sql);
		if (r < 0)
			return r;
		log_info("database migrated to schema version %" PRId64, v + 1);
	}
	return 0;
}

/* ---- the listener ---- */

static void notify(lessor_pg *s, const char *workflow)
{
	lessor_store_notify_fn fn;
	void *ud;

	pthread_mutex_lock(&s->notify_lock);
	fn = s->notify_fn;
	ud = s->notify_userdata;
	pthread_mutex_unlock(&s->notify_lock);
	if (fn)
		fn(ud, workflow);
}

/* Payload: "<instance>" or "<instance>:<workflow>" (an enqueue).  Our own
 * hints are skipped: we woke our long polls ourselves. */
static void on_hint(lessor_pg *s, const char *payload)
{
	const char *rest = startswith(payload, s->instance);

	if (rest && (*rest == '\0' || *rest == ':'))
		return;
	rest = strchr(payload, ':');
	notify(s, rest ? rest + 1 : NULL);
}

/* Waits for notifications on conn until it breaks (-EIO) or we stop (0). */
static int listen_loop(lessor_pg *s, PGconn *conn)
{
	struct pollfd p[2] = {{.fd = PQsocket(conn), .events = POLLIN},
	                      {.fd = s->stop_pipe[0], .events = POLLIN}};

	for (;;) {
		PGnotify *n;

		if (poll(p, 2, -1) < 0 && errno != EINTR)
			return -errno;
		if (p[1].revents)
			return 0;
		if (!PQconsumeInput(conn))
			return -EIO;
		while ((n = PQnotifies(conn))) {
			on_hint(s, n->extra);
			PQfreemem(n);
		}
	}
}

static bool stopping(lessor_pg *s, int timeout_ms)
{
	struct pollfd p = {.fd = s->stop_pipe[0], .events = POLLIN};

	return poll(&p, 1, timeout_ms) > 0;
}

static void listen_tried(lessor_pg *s)
{
	pthread_mutex_lock(&s->notify_lock);
	s->listen_ready = true;
	pthread_cond_broadcast(&s->listen_cond);
	pthread_mutex_unlock(&s->notify_lock);
}

static void *listener_main(void *userdata)
{
	lessor_pg *s = userdata;

	for (bool first = true; !stopping(s, first ? 0 : 1000); first = false) {
		PGconn *conn = connect_db(s->target, "lessor-listen");
		PGresult *res;
		int r = -EIO;

		if (!conn) {
			listen_tried(s);
			continue;
		}
		res = PQexec(conn, "LISTEN " PG_CHANNEL);
		listen_tried(s);
		if (PQresultStatus(res) == PGRES_COMMAND_OK) {
			/* hints sent while we were not listening are lost: look again */
			if (!first)
				notify(s, NULL);
			r = listen_loop(s, conn);
		}
		PQclear(res);
		PQfinish(conn);
		if (r == 0)
			break;
		log_warning("postgresql: the notification connection broke, reconnecting");
	}
	return NULL;
}

static void pg_set_notify(void *be, lessor_store_notify_fn fn, void *userdata)
{
	lessor_pg *s = be;

	pthread_mutex_lock(&s->notify_lock);
	s->notify_fn = fn;
	s->notify_userdata = userdata;
	pthread_mutex_unlock(&s->notify_lock);
}

/* ---- open ---- */

/* Passwords come from PGPASSFILE / ~/.pgpass (or the server trusts the
 * socket peer), never from --db: a command line is visible to every user of
 * the machine (ps, /proc/PID/cmdline). */
static int check_target(const char *target)
{
	char *err = NULL;
	PQconninfoOption *opts = PQconninfoParse(target, &err);
	int r = 0;

	if (!opts) {
		log_error("postgresql: bad connection string: %s", err ? err : "out of memory");
		PQfreemem(err);
		return -EINVAL;
	}
	for (PQconninfoOption *o = opts; o->keyword; o++)
		if (streq(o->keyword, "password") && o->val && *o->val) {
			log_error(
			    "postgresql: --db carries a password; a command line is visible to "
			    "every user of the machine: put it in a password file "
			    "(PGPASSFILE or ~/.pgpass, mode 0600) and leave it out of --db");
			r = -EPERM;
		}
	PQconninfoFree(opts);
	return r;
}

static void pg_free(void *be);

static int start_listener(lessor_pg *s)
{
	struct timespec deadline;
	bool ready;
	int k;

	if (pipe2(s->stop_pipe, O_CLOEXEC) < 0)
		return -errno;
	k = pthread_create(&s->listener, NULL, listener_main, s);
	if (k != 0)
		return -k;
	s->listening = true;
	/* once open returns, another instance's hint reaches us */
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += 10;
	pthread_mutex_lock(&s->notify_lock);
	while (!s->listen_ready &&
	       pthread_cond_timedwait(&s->listen_cond, &s->notify_lock, &deadline) == 0)
		;
	ready = s->listen_ready;
	pthread_mutex_unlock(&s->notify_lock);
	if (!ready)
		log_warning("postgresql: the notification connection is not up yet; long polls "
		            "rely on the periodic check until it is");
	return 0;
}

static int pg_open(const char *target, const struct lessor_store_config *cfg, void **ret)
{
	lessor_pg *s;
	uint8_t id[8];
	int r;

	r = check_target(target);
	if (r < 0)
		return r;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->cfg = *cfg;
	s->stop_pipe[0] = s->stop_pipe[1] = -1;
	pthread_mutex_init(&s->lock, NULL);
	pthread_mutex_init(&s->notify_lock, NULL);
	pthread_cond_init(&s->freed, NULL);
	pthread_cond_init(&s->listen_cond, NULL);
	random_bytes(id, sizeof(id));
	for (size_t i = 0; i < sizeof(id); i++)
		snprintf(s->instance + 2 * i, 3, "%02x", id[i]);
	s->target = strdup(target);
	s->n_conns = cfg->connections ? cfg->connections : PG_DEFAULT_CONNECTIONS;
	s->conns = calloc(s->n_conns, sizeof(*s->conns));
	if (!s->target || !s->conns) {
		r = -ENOMEM;
		goto fail;
	}
	/* connect every pooled connection now: a bad target fails at start */
	for (size_t i = 0; i < s->n_conns; i++)
		if ((r = conn_ready(s, &s->conns[i])) < 0) {
			if (r == -EBUSY)
				r = -ECONNREFUSED;
			goto fail;
		}
	r = pg_run(s, true, false, migrate_tx, NULL);
	if (r < 0)
		goto fail;
	r = start_listener(s);
	if (r < 0)
		goto fail;
	*ret = s;
	return 0;
fail:
	pg_free(s);
	return r;
}

static void pg_free(void *be)
{
	lessor_pg *s = be;

	if (!s)
		return;
	if (s->listening) {
		(void)!write(s->stop_pipe[1], "x", 1);
		pthread_join(s->listener, NULL);
	}
	safe_close(s->stop_pipe[0]);
	safe_close(s->stop_pipe[1]);
	for (size_t i = 0; s->conns && i < s->n_conns; i++)
		PQfinish(s->conns[i].conn);
	free(s->conns);
	free(s->target);
	pthread_cond_destroy(&s->freed);
	pthread_cond_destroy(&s->listen_cond);
	pthread_mutex_destroy(&s->notify_lock);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

static void pg_counters(void *be, struct lessor_store_counters *ret)
{
	lessor_pg *s = be;
	uint64_t n = atomic_load(&s->commits);

	/* one transaction per write: the server groups concurrent commits' WAL
	 * flushes itself (commit_delay, commit_siblings) */
	*ret = (struct lessor_store_counters){.commits = n, .writes = n};
}

const struct lessor_store_backend lessor_store_backend_pg = {
    .name = "postgresql",
    .open = pg_open,
    .free = pg_free,
    .counters = pg_counters,
    .set_notify = pg_set_notify,
    .recover = lessor_pg_recover,
    .enqueue = lessor_pg_enqueue,
    .claim = lessor_pg_claim,
    .claim_cancel = lessor_pg_claim_cancel,
    .renew = lessor_pg_renew,
    .renew_batch = lessor_pg_renew_batch,
    .append_log = lessor_pg_append_log,
    .complete = lessor_pg_complete,
    .complete_batch = lessor_pg_complete_batch,
    .release = lessor_pg_release,
    .cancel = lessor_pg_cancel,
    .requeue = lessor_pg_requeue,
    .tick = lessor_pg_tick,
    .run_json = lessor_pg_run_json,
    .list_json = lessor_pg_list_json,
    .stats_json = lessor_pg_stats_json,
    .workers_json = lessor_pg_workers_json,
    .read_log = lessor_pg_read_log,
    .lease_holder = lessor_pg_lease_holder,
    .claim_owner = lessor_pg_claim_owner,
    .cancels = lessor_pg_cancels,
};
