/* lessor's durable state: runs, leases, claims, workers and logs, behind a
 * backend table (store-int.h) with two backends:
 *
 *   SQLite (a file path): one database (WAL), one server per database (an
 *   flock refuses a second).  Every state transition runs in an IMMEDIATE
 *   transaction, and a caller that got its answer back knows the change is
 *   committed (and, with synchronous=FULL, on disk).  Group commit: the
 *   transitions that arrive while a commit is under way share the next
 *   transaction (and its one fsync), each in its own savepoint, so one that
 *   fails leaves the others alone; a failed commit fails all of them.
 *   Calls are serialised on one connection; any thread may call.
 *
 *   PostgreSQL (a libpq URI "postgresql://..." or a keyword/value conninfo
 *   "host=... dbname=..."): any number of lessor instances on one database,
 *   a pool of connections (cfg.connections), every transition one
 *   transaction (READ COMMITTED) fenced in its WHERE.  See store_pg.c.
 *
 * Time is passed in by the caller as wall-clock milliseconds since the epoch
 * (`now`).  SQLite always uses it, so tests drive the clock.  PostgreSQL uses
 * the database's clock (now(), one clock for every instance) unless
 * cfg.caller_clock is set, which the tests do to drive it too.
 *
 * Errors: -ENOENT unknown run, -ESTALE stale lease token (already counted in
 * the run's rejected_writes), -EEXIST claim_id owned by another worker,
 * -ERANGE log offset mismatch, -EFBIG log cap reached, -EBUSY wrong state for
 * an admin action, -EIO/-ENOSPC/-ENOMEM from SQLite. */
#pragma once

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct lessor_store lessor_store;

struct lessor_store_config {
	bool sync_full;              /* synchronous=FULL: commits survive power loss */
	unsigned max_lease_expiries; /* a run fails after this many expired leases */
	int64_t retry_base_ms;       /* first retry delay; doubles per consumed attempt */
	int64_t retry_max_ms;        /* cap of the retry delay */
	uint64_t max_log_bytes;      /* per-run log cap */
	unsigned connections;        /* PostgreSQL: pool size (0 = 4) */
	bool caller_clock;           /* PostgreSQL: use `now` instead of the database's clock */
	bool no_group_commit;        /* SQLite: one transaction per write (the old way, to
	                              * measure against) instead of group commit */
	unsigned checkpoint_frames;  /* SQLite: WAL frames that wake the checkpoint
	                              * thread (0 = 1000, SQLite's own default) */
};

#define LESSOR_SCHEMA_VERSION 1
#define LESSOR_RUN_ID_MAX 32
#define LESSOR_TOKEN_LEN 32
#define LESSOR_QUEUE_DEPTH_CAP 1000

/* target: a SQLite file path, or a PostgreSQL URI/conninfo (see above).  A
 * PostgreSQL target carrying a password is refused (-EPERM): passwords come
 * from PGPASSFILE / ~/.pgpass, never from the command line. */
int lessor_store_open(const char *target, const struct lessor_store_config *cfg,
                      lessor_store **ret);
lessor_store *lessor_store_free(lessor_store *s);
/* True when target names a PostgreSQL database rather than a file. */
bool lessor_store_target_is_pg(const char *target);
const char *lessor_store_backend_name(const lessor_store *s); /* "sqlite" | "postgresql" */

/* fn(userdata, workflow) is called, from a store thread, when another
 * instance on the same database made a run claimable: a hint for the long
 * polls to look again.  workflow is the new run's (enqueue), NULL when any
 * may have become claimable (release, requeue, expiry, a lost connection).
 * Never called by SQLite. */
typedef void (*lessor_store_notify_fn)(void *userdata, const char *workflow);
void lessor_store_set_notify(lessor_store *s, lessor_store_notify_fn fn, void *userdata);

/* How the store commits, for /v1/stats and the tests: commits is the number
 * of write transactions committed (or tried), writes the number of state
 * transitions they held (writes / commits is the mean group size), waiting
 * the writes queued now for the next transaction.  PostgreSQL commits each
 * write on its own (its server groups the WAL flushes): commits == writes. */
struct lessor_store_counters {
	uint64_t commits;
	uint64_t writes;
	uint64_t waiting;
	uint64_t checkpoints;        /* SQLite: WAL checkpoints by the checkpoint thread */
	uint64_t checkpoints_inline; /* and by a writer, the thread having fallen behind */
};
void lessor_store_counters(lessor_store *s, struct lessor_store_counters *ret);

/* After a restart: give every held lease its full ttl from `now`, so a server
 * outage longer than a ttl does not expire leases nobody could renew.
 * PostgreSQL: only when no instance has reaped for 10 s (all were down). */
int lessor_store_recover(lessor_store *s, int64_t now);

struct lessor_enqueue {
	const char *workflow;
	const char *input_json;      /* valid JSON text */
	char **tags;                 /* normalised: validated, sorted, unique; may be NULL */
	unsigned max_attempts;       /* >= 1 */
	unsigned timeout_s;          /* 0 = worker default */
	const char *idempotency_key; /* NULL = none */
};
/* *ret_created is false when idempotency_key named an existing run (returned). */
int lessor_store_enqueue(lessor_store *s, const struct lessor_enqueue *e, int64_t now,
                         char ret_id[LESSOR_RUN_ID_MAX], bool *ret_created);

struct lessor_claim_req {
	const char *claim_id;
	const char *worker_id;
	unsigned max_runs;
	unsigned ttl_s;
	const char *workflows_json; /* JSON array text, NULL = any workflow */
	const char *tags_json;      /* JSON array text of the worker's tags */
	bool record_worker;         /* count this request in the workers table */
};

struct lessor_grant {
	char id[LESSOR_RUN_ID_MAX];
	char token[LESSOR_TOKEN_LEN + 1];
	char *workflow;
	char *input_json;
	char *tags_json;
	unsigned attempt;
	unsigned ttl_s;
	unsigned timeout_s; /* 0 = none */
};

struct lessor_claim_result {
	struct lessor_grant *runs;
	size_t n_runs;
	uint64_t queue_depth; /* eligible pending runs left for this worker, at most
	                       * LESSOR_QUEUE_DEPTH_CAP (counting is a scan) */
	bool replay;          /* claim_id was answered before: runs are the ones still held */
	bool cancelled;       /* claim_id was cancelled: nothing granted */
};
int lessor_store_claim(lessor_store *s, const struct lessor_claim_req *req, int64_t now,
                       struct lessor_claim_result *ret);
void lessor_claim_result_done(struct lessor_claim_result *r);

/* lessor_store_enqueue, then (when it created the run) lessor_store_claim
 * of next, committed together where the backend can (SQLite: one
 * transaction, one fsync), the claim in a savepoint of its own: the hand-off
 * of a new run to a claim that was waiting for it.  Returns the enqueue's
 * result: < 0, nothing written and nothing claimed; >= 0, the run stands,
 * *ret_claim_r is the claim's (0 with *ret_claim filled, or < 0 as
 * lessor_store_claim fails, nothing claimed; -EALREADY when no run was
 * created, so no claim was made). */
int lessor_store_enqueue_claim(lessor_store *s, const struct lessor_enqueue *e,
                               const struct lessor_claim_req *next, int64_t now,
                               char ret_id[LESSOR_RUN_ID_MAX], bool *ret_created, int *ret_claim_r,
                               struct lessor_claim_result *ret_claim);

/* Releases every run granted to claim_id whose lease was never renewed and
 * marks the claim cancelled, so no later request with that id grants anything. */
int lessor_store_claim_cancel(lessor_store *s, const char *claim_id, int64_t now,
                              unsigned *ret_released);

int lessor_store_renew(lessor_store *s, const char *id, const char *token, unsigned ttl_s,
                       int64_t now, bool *ret_cancel_requested);

/* One lease of a batch renewal: id and token in; skip leaves it alone (the
 * caller answered it); answer (0, -ENOENT or -ESTALE, as lessor_store_renew
 * returns them) and cancel_requested out. */
struct lessor_renewal {
	const char *id, *token;
	bool skip;
	int answer;
	bool cancel_requested;
};
/* Renews each of the n leases as lessor_store_renew does, all in one write
 * transaction (one commit: durable together).  Returns < 0 only for a
 * database error, and then nothing was renewed; each lease's own answer is
 * in v[i].answer. */
int lessor_store_renew_batch(lessor_store *s, struct lessor_renewal *v, size_t n, unsigned ttl_s,
                             int64_t now);

/* Of the n leases (run ids[i] held with tokens[i], current and unexpired),
 * the run ids whose cancel was requested; *ret (a strv, never NULL on
 * success) is the caller's.  Read only: a stale lease is simply left out. */
int lessor_store_cancels(lessor_store *s, char *const *ids, char *const *tokens, size_t n,
                         int64_t now, char ***ret);

/* Appends at byte offset `start`.  *ret_length is the log's length afterwards
 * (also on -ERANGE and -EFBIG; on -EFBIG the part that fit was kept). */
int lessor_store_append_log(lessor_store *s, const char *id, const char *token, uint64_t start,
                            const void *data, size_t len, int64_t now, uint64_t *ret_length);

struct lessor_completion {
	const char *token;
	const char *status; /* succeeded | failed | cancelled */
	const char *reason; /* exit | timeout | crash | spawn_error | cancelled | rejected */
	bool has_exit_code;
	int exit_code;
	const char *signal; /* NULL = none */
	bool retryable;
	const char *error; /* NULL = none */
	int64_t duration_ms;
	int64_t log_length;
	const char *output_json; /* NULL = none */
};
/* *ret_run_status: "succeeded" | "failed" | "retrying" | "cancelled" (static). */
int lessor_store_complete(lessor_store *s, const char *id, const struct lessor_completion *c,
                          int64_t now, const char **ret_run_status);

/* lessor_store_complete, then (when it succeeded) lessor_store_claim of
 * next, committed together where the backend can (SQLite: one transaction,
 * one fsync), the claim in a savepoint of its own.  Returns the completion's
 * result: < 0, nothing written and nothing claimed; >= 0, the completion
 * stands, *ret_claim_r is the claim's (0 with *ret_claim filled, or < 0 as
 * lessor_store_claim fails, nothing claimed). */
int lessor_store_complete_claim(lessor_store *s, const char *id, const struct lessor_completion *c,
                                const struct lessor_claim_req *next, int64_t now,
                                const char **ret_run_status, int *ret_claim_r,
                                struct lessor_claim_result *ret_claim);

/* One completion of a batch: id, in and next (the claim of its "next",
 * NULL for none) in; skip leaves it alone (the caller answered it).  Out:
 * answer (0, -ENOENT or -ESTALE, as lessor_store_complete returns them),
 * run_status, and with next the claim's result as
 * lessor_store_complete_claim gives it (claim_r, and claim when 0). */
struct lessor_complete_item {
	const char *id;
	struct lessor_completion in;
	const struct lessor_claim_req *next;
	bool skip;
	int answer;
	const char *run_status;
	int claim_r;
	struct lessor_claim_result claim;
};
/* Completes each of the n runs as lessor_store_complete (or, with next,
 * lessor_store_complete_claim) does, in order, all in one write transaction
 * (SQLite: one commit, one fsync; PostgreSQL: one commit; each claim in a
 * savepoint of its own).  Returns < 0 only for a database error; then
 * every v[i].claim is empty and nothing was recorded.  A backend without
 * it completes them one by one, each in its own transactions, and stops at
 * the first database error: the ones before it stand (harmless: a
 * completion is idempotent, and the caller repeats the whole batch). */
int lessor_store_complete_batch(lessor_store *s, struct lessor_complete_item *v, size_t n,
                                int64_t now);

int lessor_store_release(lessor_store *s, const char *id, const char *token, const char *reason,
                         unsigned delay_s, int64_t now);

/* Admin.  cancel: pending -> cancelled, running -> cancel_requested, cancelled
 * -> no-op, succeeded/failed -> -EBUSY.  *ret_status is the status afterwards.
 * requeue: revoke the running lease now (-EBUSY when not running). */
int lessor_store_cancel(lessor_store *s, const char *id, int64_t now, const char **ret_status);
int lessor_store_requeue(lessor_store *s, const char *id, int64_t now);

/* Housekeeping, called periodically: expires leases (requeue, or fail after
 * max_lease_expiries), prunes claim records older than a day.  *ret_wake is
 * true when a run became claimable since `last` (requeued, or its retry or
 * release delay ran out), so long polls must re-check. */
int lessor_store_tick(lessor_store *s, int64_t last, int64_t now, bool *ret_wake);

/* Read-only views, as JSON for the admin API. */
int lessor_store_run_json(lessor_store *s, const char *id, cJSON **ret);
int lessor_store_list_json(lessor_store *s, const char *status, const char *workflow,
                           unsigned limit, cJSON **ret);
int lessor_store_stats_json(lessor_store *s, cJSON **ret);
int lessor_store_workers_json(lessor_store *s, cJSON **ret);
int lessor_store_read_log(lessor_store *s, const char *id, char **ret, size_t *ret_len);

/* Ownership, for scoped worker tokens: the worker_id of the lease of run id
 * whose token is lease_token (current or ended), and the worker_id a claim
 * was made by ("" for a claim cancelled before it was made).  -ENOENT when
 * there is no such lease or claim. */
int lessor_store_lease_holder(lessor_store *s, const char *id, const char *lease_token,
                              char **ret_worker_id);
int lessor_store_claim_owner(lessor_store *s, const char *claim_id, char **ret_worker_id);

/* Run status names, for validation. */
bool lessor_run_status_valid(const char *s);
