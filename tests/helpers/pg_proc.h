/* A private PostgreSQL server for tests and benchmarks.
 *
 *   struct tu_pg *pg = NULL;
 *   int r = tu_pg_start(&pg);          // -ENOENT: PostgreSQL is not installed (skip)
 *   char *db = tu_pg_create_db(pg);    // "host=/tmp/... port=5432 user=lessor dbname=t_..."
 *   ... lessor_store_open(db, ...) or `lessor serve --db "$db"` ...
 *   tu_pg_free(pg);                    // stops the server, removes its directory
 *
 * The server runs from the newest /usr/lib/postgresql/N/bin (or
 * $LESSEE_PG_BINDIR; one without initdb counts as not installed): initdb in a fresh temporary directory, then postgres
 * on a unix socket in that directory only (no TCP), trust authentication,
 * fsync off (tests prove logic, not durability).  PostgreSQL refuses to run
 * as root, so as root the directory is given to `nobody` and initdb and
 * postgres run as nobody; no system user is created.  The server dies with
 * the process that started it (PR_SET_PDEATHSIG), so a crashed test leaves
 * nothing behind but its directory. */
#pragma once

struct tu_pg;

/* 0, -ENOENT when no PostgreSQL server binaries are installed, -errno. */
int tu_pg_start(struct tu_pg **ret);
/* The same with fsync and full_page_writes on (PostgreSQL's defaults): for
 * benchmarks that compare commit costs. */
int tu_pg_start_durable(struct tu_pg **ret);
struct tu_pg *tu_pg_free(struct tu_pg *pg);

/* libpq conninfo of the server's `postgres` database. */
const char *tu_pg_conninfo(const struct tu_pg *pg);
/* A new, empty database: its conninfo (free it), NULL on failure. */
char *tu_pg_create_db(struct tu_pg *pg);
/* Runs sql (one or more statements) on the database of conninfo: 0 or -EIO. */
int tu_pg_exec(const char *conninfo, const char *sql);
/* The first column of the first row of a query, as a new string; NULL on
 * failure or no row. */
char *tu_pg_query1(const char *conninfo, const char *sql);
/* Restart the server (same directory, same databases). */
int tu_pg_restart(struct tu_pg *pg);
