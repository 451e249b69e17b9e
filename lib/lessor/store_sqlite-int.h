/* Private to lib/lessor/store_sqlite*.c: the SQLite backend's connection,
 * cached statements and the small query helpers its transition and view code
 * is written with. */
#pragma once

#include <pthread.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdatomic.h>

#include "lessor/store-int.h"

#define LESSOR_DB_STMT_MAX 128

struct lessor_db_stmt {
	const char *sql; /* a string literal: its address is the cache key */
	sqlite3_stmt *st;
};

typedef struct lessor_sqlite lessor_sqlite;
struct lessor_db_write; /* a write queued for group commit (store_sqlite.c) */

/* A claim filter's eligible runs as last counted (count, up to twice the
 * cap; exact when below it), at now, when `left` runs had ever left
 * 'pending' and `entered` entered it, and no pending run not due yet is due
 * before due_next; granted: the runs claims with this filter took since (see
 * queue_depth in store_sqlite_ops.c). */
struct lessor_depth_memo {
	char *workflows_json, *tags_json; /* NULL workflows_json: any; tags_json NULL: unused */
	int64_t count, now, left, entered, due_next, granted;
	bool exact;
};
#define LESSOR_DEPTH_MEMO_MAX 8

struct lessor_sqlite {
	sqlite3 *db;
	pthread_mutex_t lock;
	struct lessor_db_stmt stmts[LESSOR_DB_STMT_MAX];
	size_t n_stmts;
	struct lessor_store_config cfg;
	int lock_fd;
	/* under lock; forgotten whenever a write fails (its rollback may have
	 * taken away runs a memo counted) */
	struct lessor_depth_memo depth_memo[LESSOR_DEPTH_MEMO_MAX];
	unsigned depth_memo_next;
	/* group commit: writes queued for the next transaction, and whether a
	 * thread (the leader) is running one; under gc_lock */
	pthread_mutex_t gc_lock;
	struct lessor_db_write *gc_queue, **gc_tail;
	bool gc_leading;
	/* counters (lessor_store_counters) */
	atomic_uint_fast64_t commits, writes, waiting, checkpoints, checkpoints_inline;
	struct lessor_ckpt *ckpt; /* WAL checkpoints off the request path */
};

/* The checkpoint thread and its connection to path (store_sqlite_ckpt.c);
 * stopped before the store's own connection closes. */
int lessor_ckpt_start(lessor_sqlite *s, const char *path);
void lessor_ckpt_stop(lessor_sqlite *s);

/* Forgets every depth memo (under lock). */
void lessor_db_forget_depths(lessor_sqlite *s);

/* The name of a VFS over the default one whose WAL files write each commit's
 * frames with one write (store_sqlite_vfs.c), registered at the first call;
 * NULL (the default VFS then) if it could not be. */
#define LESSOR_SQLITE_VFS "lessor-wal"
const char *lessor_sqlite_vfs(void);

/* The SQL of the migration from schema version from, or NULL (for tests that
 * build an older database). */
const char *lessor_sqlite_migration_sql(unsigned from);

/* Maps a SQLite result to -errno, logging SQLite's own message (it exists only here). */
int lessor_db_error(lessor_sqlite *s, int rc, const char *sql);

/* Prepares sql once (cached by address), binds the arguments described by fmt
 * and steps once.  fmt: 'i' int64_t, 'n' const int64_t * (NULL binds NULL),
 * 's' const char * (NULL binds NULL), 'b' const void * then size_t (a blob).  Returns 1 with the
 * statement in *ret_st (may be NULL) when a row is available, 0 when done, -errno. */
int lessor_db_query(lessor_sqlite *s, sqlite3_stmt **ret_st, const char *sql, const char *fmt, ...);
/* Steps an open query: 1 row, 0 done, -errno. */
int lessor_db_next(lessor_sqlite *s, sqlite3_stmt *st);

/* Runs fn inside BEGIN IMMEDIATE (write) or BEGIN (read) ... COMMIT under the
 * store mutex; rolls back when fn returns < 0 or COMMIT fails.  A write may
 * share its transaction with the writes that queued meanwhile (group
 * commit): fn then runs in a savepoint, rolled back alone when it fails, on
 * another thread; it returns only once the transaction committed, with fn's
 * result or the COMMIT's error. */
typedef int (*lessor_db_fn)(lessor_sqlite *s, void *userdata);
int lessor_db_tx(lessor_sqlite *s, bool write, lessor_db_fn fn, void *userdata);
/* Inside a write transaction's fn: fn in a savepoint of its own, whose
 * failure undoes only fn's statements.  *ret_tx_lost: SQLite rolled the
 * whole transaction back (I/O error, full disk): the caller's fn must fail. */
int lessor_db_nested(lessor_sqlite *s, lessor_db_fn fn, void *userdata, bool *ret_tx_lost);

/* Column helpers: text as a new string ("" never NULL unless the column is NULL). */
char *lessor_db_strdup(sqlite3_stmt *st, int col);
int64_t lessor_db_int(sqlite3_stmt *st, int col);
bool lessor_db_is_null(sqlite3_stmt *st, int col);

/* The backend's operations (store_sqlite_ops.c, store_sqlite_views.c), as in
 * struct lessor_store_backend; be is a lessor_sqlite. */
int lessor_sqlite_recover(void *be, int64_t now);
int lessor_sqlite_enqueue(void *be, const struct lessor_enqueue *e, int64_t now,
                          char ret_id[LESSOR_RUN_ID_MAX], bool *ret_created);
int lessor_sqlite_claim(void *be, const struct lessor_claim_req *req, int64_t now,
                        struct lessor_claim_result *ret);
int lessor_sqlite_claim_cancel(void *be, const char *claim_id, int64_t now, unsigned *ret_released);
int lessor_sqlite_renew(void *be, const char *id, const char *token, unsigned ttl_s, int64_t now,
                        bool *ret_cancel_requested);
int lessor_sqlite_renew_batch(void *be, struct lessor_renewal *v, size_t n, unsigned ttl_s,
                              int64_t now);
int lessor_sqlite_append_log(void *be, const char *id, const char *token, uint64_t start,
                             const void *data, size_t len, int64_t now, uint64_t *ret_length);
int lessor_sqlite_enqueue_claim(void *be, const struct lessor_enqueue *e,
                                const struct lessor_claim_req *next, int64_t now,
                                char ret_id[LESSOR_RUN_ID_MAX], bool *ret_created, int *ret_claim_r,
                                struct lessor_claim_result *ret_claim);
int lessor_sqlite_complete_claim(void *be, const char *id, const struct lessor_completion *in,
                                 const struct lessor_claim_req *next, int64_t now,
                                 const char **ret_run_status, int *ret_claim_r,
                                 struct lessor_claim_result *ret_claim);
int lessor_sqlite_complete(void *be, const char *id, const struct lessor_completion *c, int64_t now,
                           const char **ret_run_status);
int lessor_sqlite_complete_batch(void *be, struct lessor_complete_item *v, size_t n, int64_t now);
int lessor_sqlite_release(void *be, const char *id, const char *token, const char *reason,
                          unsigned delay_s, int64_t now);
int lessor_sqlite_cancel(void *be, const char *id, int64_t now, const char **ret_status);
int lessor_sqlite_requeue(void *be, const char *id, int64_t now);
int lessor_sqlite_tick(void *be, int64_t last, int64_t now, bool *ret_wake);
int lessor_sqlite_run_json(void *be, const char *id, cJSON **ret);
int lessor_sqlite_list_json(void *be, const char *status, const char *workflow, unsigned limit,
                            cJSON **ret);
int lessor_sqlite_stats_json(void *be, cJSON **ret);
int lessor_sqlite_workers_json(void *be, cJSON **ret);
int lessor_sqlite_read_log(void *be, const char *id, char **ret, size_t *ret_len);
int lessor_sqlite_cancels(void *be, const int64_t *seqs, char *const *tokens, size_t n,
                          int64_t now, char ***ret);
int lessor_sqlite_lease_holder(void *be, int64_t seq, const char *lease_token,
                               char **ret_worker_id);
int lessor_sqlite_claim_owner(void *be, const char *claim_id, char **ret_worker_id);
