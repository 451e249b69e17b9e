/* Private to lib/lessor/store*.c: the backend table every store backend
 * fills (store_sqlite*.c, store_pg*.c), and the helpers they share.
 *
 * store.c owns the public functions: it picks a backend from the --db
 * target, and forwards every call to the backend with its state (`be`).
 * A backend implements the semantics documented in store.h; anything
 * specific to its database (SQL dialect, locking, connections) stays in its
 * own files. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "lessor/store.h"

struct lessor_store_backend {
	const char *name;
	/* target: what --db said (a path, a libpq URI or conninfo) */
	int (*open)(const char *target, const struct lessor_store_config *cfg, void **ret);
	void (*free)(void *be);
	/* Hints that another instance changed the queue (see store.h); NULL when
	 * the backend has a single server per database. */
	void (*set_notify)(void *be, lessor_store_notify_fn fn, void *userdata);

	void (*counters)(void *be, struct lessor_store_counters *ret);
	int (*recover)(void *be, int64_t now);
	int (*enqueue)(void *be, const struct lessor_enqueue *e, int64_t now,
	               char ret_id[LESSOR_RUN_ID_MAX], bool *ret_created);
	int (*claim)(void *be, const struct lessor_claim_req *req, int64_t now,
	             struct lessor_claim_result *ret);
	/* enqueue, then the claim next in the same transaction (one commit);
	 * NULL: lessor_store_enqueue_claim makes them two */
	int (*enqueue_claim)(void *be, const struct lessor_enqueue *e,
	                     const struct lessor_claim_req *next, int64_t now,
	                     char ret_id[LESSOR_RUN_ID_MAX], bool *ret_created, int *ret_claim_r,
	                     struct lessor_claim_result *ret_claim);
	int (*claim_cancel)(void *be, const char *claim_id, int64_t now, unsigned *ret_released);
	int (*renew)(void *be, const char *id, const char *token, unsigned ttl_s, int64_t now,
	             bool *ret_cancel_requested);
	int (*renew_batch)(void *be, struct lessor_renewal *v, size_t n, unsigned ttl_s,
	                   int64_t now);
	int (*append_log)(void *be, const char *id, const char *token, uint64_t start,
	                  const void *data, size_t len, int64_t now, uint64_t *ret_length);
	int (*complete)(void *be, const char *id, const struct lessor_completion *c, int64_t now,
	                const char **ret_run_status);
	/* complete, then the claim next in the same transaction (one commit);
	 * NULL: lessor_store_complete_claim makes them two */
	int (*complete_claim)(void *be, const char *id, const struct lessor_completion *c,
	                      const struct lessor_claim_req *next, int64_t now,
	                      const char **ret_run_status, int *ret_claim_r,
	                      struct lessor_claim_result *ret_claim);
	/* complete (or complete_claim) of each item, all in one transaction;
	 * NULL: lessor_store_complete_batch completes them one by one */
	int (*complete_batch)(void *be, struct lessor_complete_item *v, size_t n, int64_t now);
	int (*release)(void *be, const char *id, const char *token, const char *reason,
	               unsigned delay_s, int64_t now);
	int (*cancel)(void *be, const char *id, int64_t now, const char **ret_status);
	int (*requeue)(void *be, const char *id, int64_t now);
	int (*tick)(void *be, int64_t last, int64_t now, bool *ret_wake);

	int (*run_json)(void *be, const char *id, cJSON **ret);
	int (*list_json)(void *be, const char *status, const char *workflow, unsigned limit,
	                 cJSON **ret);
	int (*stats_json)(void *be, cJSON **ret);
	int (*workers_json)(void *be, cJSON **ret);
	int (*read_log)(void *be, const char *id, char **ret, size_t *ret_len);
	int (*lease_holder)(void *be, int64_t seq, const char *lease_token, char **ret_worker_id);
	int (*claim_owner)(void *be, const char *claim_id, char **ret_worker_id);
	/* Of the held leases (run seq, token), the runs asked to cancel, as run ids. */
	int (*cancels)(void *be, const int64_t *seqs, char *const *tokens, size_t n, int64_t now,
	               char ***ret);
};

extern const struct lessor_store_backend lessor_store_backend_sqlite;
extern const struct lessor_store_backend lessor_store_backend_pg;

/* ---- shared by the backends (store.c) ---- */

#define LESSOR_CLAIM_RECORD_TTL_MS (24 * 3600 * 1000LL)

/* "r-<seq>" <-> seq.  Returns -ENOENT for anything that cannot be a run id. */
int lessor_run_id_parse(const char *id, int64_t *ret_seq);
void lessor_run_id_format(char buf[LESSOR_RUN_ID_MAX], int64_t seq);

/* A fresh lease token: LESSOR_TOKEN_LEN hex digits from the kernel's CSPRNG. */
void lessor_new_token(char buf[LESSOR_TOKEN_LEN + 1]);

/* The static copy of a status name (for answers that outlive a row), or NULL. */
const char *lessor_static_run_status(const char *s);

/* Normalised tags as a JSON array text (free it); NULL on ENOMEM. */
char *lessor_tags_to_json(char **tags);

/* What a completion does to the run holding `attempts` consumed attempts
 * (before this one) of `max_attempts`: returns the answer ("succeeded",
 * "failed", "retrying", "cancelled") and sets the run's next status
 * ("pending" for a retry) and its not_before. */
const char *lessor_complete_decide(const struct lessor_store_config *cfg, int64_t attempts,
                                   int64_t max_attempts, bool cancel_requested,
                                   const struct lessor_completion *in, int64_t now,
                                   const char **ret_status, int64_t *ret_not_before);

/* How admin views render a column. */
enum lessor_col_kind {
	LESSOR_COL_STR,
	LESSOR_COL_INT,
	LESSOR_COL_BOOL,
	LESSOR_COL_JSON, /* stored JSON text, embedded as a value */
	LESSOR_COL_RAW,  /* a run's input or output: the text as the client sent it */
	LESSOR_COL_TIME, /* ms since the epoch, rendered RFC 3339 */
	LESSOR_COL_RUNID,
};

struct lessor_col {
	const char *name; /* NULL: not part of the JSON */
	enum lessor_col_kind kind;
};

/* The columns of the views, in the order every backend selects them. */
extern const struct lessor_col lessor_run_cols[29];
extern const struct lessor_col lessor_lease_cols[9];
extern const struct lessor_col lessor_list_cols[14];
extern const struct lessor_col lessor_worker_cols[8];

/* A column's JSON value from its text (NULL text = SQL NULL): integers and
 * times in decimal, booleans as an integer ("0"/"1") or "t"/"f". */
cJSON *lessor_col_value_text(const char *text, enum lessor_col_kind kind);
