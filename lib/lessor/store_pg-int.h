/* Private to lib/lessor/store_pg*.c: the PostgreSQL backend's connection
 * pool, statement cache and query helpers. */
#pragma once

#include <libpq-fe.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "lessor/store-int.h"
#include "util/macro.h"

#define PG_STMT_MAX 96
#define PG_CHANNEL "lessor_runs"
/* Advisory lock keys (classid, objid): pg_advisory_xact_lock(PG_LOCK_CLASS, n). */
#define PG_LOCK_CLASS 0x6c657373 /* "less" */
#define PG_LOCK_MIGRATE 0
#define PG_LOCK_REAPER 1
#define PG_LOCK_CLASS_CLAIM 0x6c657374 /* objid: hashtext(claim_id) */

struct pg_conn {
	PGconn *conn;
	bool busy;
	bool prepared[PG_STMT_MAX];
};

typedef struct lessor_pg lessor_pg;

struct lessor_pg {
	char *target;
	struct lessor_store_config cfg;
	char instance[17]; /* NOTIFY payload: our own hints are not for us */

	pthread_mutex_t lock; /* the pool and the statement registry */
	pthread_cond_t freed;
	struct pg_conn *conns;
	size_t n_conns;
	const char *stmts[PG_STMT_MAX]; /* SQL literals by address; index = statement name */
	size_t n_stmts;

	/* the listener: one more connection, LISTEN PG_CHANNEL */
	pthread_t listener;
	bool listening;
	bool listen_ready;          /* the first LISTEN was tried (under notify_lock) */
	pthread_cond_t listen_cond; /* ... signalled then */
	int stop_pipe[2];
	lessor_store_notify_fn notify_fn;
	void *notify_userdata;
	pthread_mutex_t notify_lock;

	int64_t last_tick;            /* database clock at the previous tick */
	int64_t last_backstop;        /* database clock of the previous backstop check */
	atomic_uint_fast64_t commits; /* write transactions committed (or tried) */
};

/* The clock parameter of every statement: NULL (the database's now()) or
 * the caller's `now` in caller_clock mode.  Used as lessor_now($1). */
#define PG_CLOCK(s, now) ((s)->cfg.caller_clock ? &(now) : NULL)

/* Runs sql (a literal: prepared once per connection, by address).  fmt: 'i'
 * int64_t, 'n' const int64_t * (NULL binds NULL), 's' const char * (NULL
 * binds NULL), 'b' const void * then size_t (bytea).  Results come as text,
 * or binary when binary is set.  Returns the result (PQclear it) in *ret
 * (may be NULL), or -errno: -EDEADLK for a serialisation failure or deadlock
 * (pg_tx retries), -EEXIST unique violation, -EIO for the rest. */
/* A statement with no parameters, not prepared (BEGIN, SAVEPOINT...):
 * 0, or -errno as pg_query. */
int pg_exec_plain(struct pg_conn *c, const char *sql);
int pg_query(lessor_pg *s, struct pg_conn *c, PGresult **ret, bool binary, const char *sql,
             const char *fmt, ...);

/* fn inside BEGIN ... COMMIT (tx) or without a transaction (each statement
 * commits by itself), on a pooled connection; retried a few times on -EDEADLK.
 * Rolls back when fn returns < 0 or COMMIT fails. */
typedef int (*pg_fn)(lessor_pg *s, struct pg_conn *c, void *userdata);
int pg_run(lessor_pg *s, bool tx, bool read_only, pg_fn fn, void *userdata);

/* Text of a value, NULL for SQL NULL. */
const char *pg_val(const PGresult *r, int row, int col);
int64_t pg_int(const PGresult *r, int row, int col);
char *pg_strdup(const PGresult *r, int row, int col);

DEFINE_FREE_FUNC(PGresult, PQclear);
#define _cleanup_pgresult_ _cleanup_(PQclearp)

int lessor_pg_recover(void *be, int64_t now);
int lessor_pg_enqueue(void *be, const struct lessor_enqueue *e, int64_t now,
                      char ret_id[LESSOR_RUN_ID_MAX], bool *ret_created);
int lessor_pg_claim(void *be, const struct lessor_claim_req *req, int64_t now,
                    struct lessor_claim_result *ret);
int lessor_pg_claim_cancel(void *be, const char *claim_id, int64_t now, unsigned *ret_released);
int lessor_pg_renew(void *be, const char *id, const char *token, unsigned ttl_s, int64_t now,
                    bool *ret_cancel_requested);
int lessor_pg_renew_batch(void *be, struct lessor_renewal *v, size_t n, unsigned ttl_s,
                          int64_t now);
int lessor_pg_append_log(void *be, const char *id, const char *token, uint64_t start,
                         const void *data, size_t len, int64_t now, uint64_t *ret_length);
int lessor_pg_complete(void *be, const char *id, const struct lessor_completion *c, int64_t now,
                       const char **ret_run_status);
int lessor_pg_complete_batch(void *be, struct lessor_complete_item *v, size_t n, int64_t now);
int lessor_pg_release(void *be, const char *id, const char *token, const char *reason,
                      unsigned delay_s, int64_t now);
int lessor_pg_cancel(void *be, const char *id, int64_t now, const char **ret_status);
int lessor_pg_requeue(void *be, const char *id, int64_t now);
int lessor_pg_tick(void *be, int64_t last, int64_t now, bool *ret_wake);
int lessor_pg_run_json(void *be, const char *id, cJSON **ret);
int lessor_pg_list_json(void *be, const char *status, const char *workflow, unsigned limit,
                        cJSON **ret);
int lessor_pg_stats_json(void *be, cJSON **ret);
int lessor_pg_workers_json(void *be, cJSON **ret);
int lessor_pg_read_log(void *be, const char *id, char **ret, size_t *ret_len);
int lessor_pg_cancels(void *be, const int64_t *seqs, char *const *tokens, size_t n, int64_t now,
                      char ***ret);
int lessor_pg_lease_holder(void *be, int64_t seq, const char *lease_token, char **ret_worker_id);
int lessor_pg_claim_owner(void *be, const char *claim_id, char **ret_worker_id);
