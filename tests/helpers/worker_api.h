/* The worker API of a real `lessor serve` (lessor_proc.h) as its
 * integration tests drive it, asserting with Check:
 *
 *   static struct tu_lessor *L;
 *   static const char *worker_token;
 *
 *   tu_worker_start_scoped(&L, &worker_token);   // worker_token: alpha's
 *   ck_assert_int_eq(tu_worker_post(L, worker_token, "/v1/claims", body, &j), 200);
 *   tu_worker_grant(j, 0, &g);
 *   ck_assert_int_eq(tu_worker_renew(L, TU_BETA_TOKEN, &g), 409);
 *   tu_worker_stop(&L);                          // the Check teardown
 *
 * The server and the token a request goes with are the caller's (a test
 * switches workers by passing another token); nothing here keeps state. */
#pragma once

#include <cjson/cJSON.h>

#include "lessor_proc.h"

/* The tokens of tu_worker_start_scoped(): the admin's, and the workers
 * "alpha" and "beta". */
#define TU_ADMIN_TOKEN "admin-0123456789abcdef"
#define TU_ALPHA_TOKEN "alpha-0123456789abcdef"
#define TU_BETA_TOKEN "beta-0123456789abcdef0"
/* A well-formed lease token that no run holds. */
#define TU_OTHER_TOKEN "0123456789abcdef0123456789abcdef"

/* A run a claim granted: its id and lease token. */
struct tu_grant {
	char id[64], token[64];
};

/* Starts a lessor without tokens, with these extra `lessor serve`
 * arguments (NULL-terminated, or NULL): *ret_l, and *ret_token = NULL
 * (worker requests then need none). */
void tu_worker_start(char *const *args, struct tu_lessor **ret_l, const char **ret_token);
/* Starts a lessor with scoped tokens (TU_ADMIN_TOKEN; workers alpha and
 * beta): *ret_l, and *ret_token = TU_ALPHA_TOKEN. */
void tu_worker_start_scoped(struct tu_lessor **ret_l, const char **ret_token);
/* Stops *l when it runs, asserting it exits cleanly (no leaks), frees it
 * and sets *l = NULL; *l NULL is a no-op. */
void tu_worker_stop(struct tu_lessor **l);

/* POST path with a JSON body as a worker: with token when not NULL (scoped
 * tokens), else with l's own.  The HTTP status; the answer in *ret_resp
 * (ret_resp may be NULL). */
long tu_worker_post(const struct tu_lessor *l, const char *token, const char *path,
                    const char *body, cJSON **ret_resp);
/* POST /v1/claims with body, which must grant n runs: their grants in ret[0..n). */
void tu_worker_claim(const struct tu_lessor *l, const char *token, const char *body, int n,
                     struct tu_grant *ret);
/* The i-th run of a claim answer (or of a completion's "next"): it must be
 * there, with a lease token. */
void tu_worker_grant(const cJSON *answer, int i, struct tu_grant *ret);
/* The i-th entry of a batch answer's array ("leases", "completions"): it
 * must be there and name id. */
const cJSON *tu_worker_entry(const cJSON *answer, const char *array, int i, const char *id);
/* POST /v1/runs/{id}/lease for g with ttl_s 60: the HTTP status. */
long tu_worker_renew(const struct tu_lessor *l, const char *token, const struct tu_grant *g);
/* tmpl with "@N" as the N-th grant's id and "#N" as its token, N a digit
 * (free it): request bodies with grants in them, valid or not. */
char *tu_worker_fill(const char *tmpl, const struct tu_grant *g);
/* Asserts POST path with body answers 403 to TU_ADMIN_TOKEN and 401 to no
 * token: only a worker's token reaches it (tu_worker_start_scoped()). */
void tu_worker_assert_workers_only(const struct tu_lessor *l, const char *path, const char *body);

/* Arms a fault (POST /v1/admin/faults, docs/lessor.md) and asserts the
 * answer's status is want (200, or 400 for a fault the server refuses). */
void tu_worker_fault(const struct tu_lessor *l, const char *body, long want);
/* GET /v1/runs/{id}, which must answer (free it). */
cJSON *tu_worker_get_run(const struct tu_lessor *l, const char *id);
/* Asserts the run's status. */
void tu_worker_assert_status(const struct tu_lessor *l, const char *id, const char *want);
/* The run's count of writes refused for a stale lease. */
int tu_worker_rejected_writes(const struct tu_lessor *l, const char *id);
