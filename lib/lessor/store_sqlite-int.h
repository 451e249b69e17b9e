/* Private to lib/lessor/store*.c: the connection, cached statements and the
 * small query helpers the transition and view code is written with. */
#pragma once

#include <pthread.h>
#include <sqlite3.h>
#include <stdarg.h>

#include "lessor/store.h"

#define LESSOR_DB_STMT_MAX 128

struct lessor_db_stmt {
	const char *sql; /* a string literal: its address is the cache key */
	sqlite3_stmt *st;
};

struct lessor_store {
	sqlite3 *db;
	pthread_mutex_t lock;
	struct lessor_db_stmt stmts[LESSOR_DB_STMT_MAX];
	size_t n_stmts;
	struct lessor_store_config cfg;
	int lock_fd;
};

/* Maps a SQLite result to -errno, logging SQLite's own message (it exists only here). */
int lessor_db_error(lessor_store *s, int rc, const char *sql);

/* Prepares sql once (cached by address), binds the arguments described by fmt
 * and steps once.  fmt: 'i' int64_t, 'n' const int64_t * (NULL binds NULL),
 * 's' const char * (NULL binds NULL), 'b' const void * then size_t (a blob).  Returns 1 with the
 * statement in *ret_st (may be NULL) when a row is available, 0 when done, -errno. */
int lessor_db_query(lessor_store *s, sqlite3_stmt **ret_st, const char *sql, const char *fmt, ...);
/* Steps an open query: 1 row, 0 done, -errno. */
int lessor_db_next(lessor_store *s, sqlite3_stmt *st);

/* Runs fn inside BEGIN IMMEDIATE (write) or BEGIN (read) ... COMMIT under the
 * store mutex; rolls back when fn returns < 0 or COMMIT fails. */
typedef int (*lessor_db_fn)(lessor_store *s, void *userdata);
int lessor_db_tx(lessor_store *s, bool write, lessor_db_fn fn, void *userdata);

/* Column helpers: text as a new string ("" never NULL unless the column is NULL). */
char *lessor_db_strdup(sqlite3_stmt *st, int col);
int64_t lessor_db_int(sqlite3_stmt *st, int col);
bool lessor_db_is_null(sqlite3_stmt *st, int col);

/* "r-<seq>" <-> seq.  Returns -ENOENT for anything that cannot be a run id. */
int lessor_run_id_parse(const char *id, int64_t *ret_seq);
void lessor_run_id_format(char buf[LESSOR_RUN_ID_MAX], int64_t seq);
