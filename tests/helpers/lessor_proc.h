/* A real `lessor serve` for tests, and a blocking JSON HTTP client.
 *
 *   struct tu_lessor *l = NULL;
 *   ck_assert_int_eq(tu_lessor_start(&(struct tu_lessor_opts){.token = "s3cret"}, &l), 0);
 *   char *id = tu_lessor_enqueue(l, "{\"workflow\":\"build\"}");
 *   ... lessee talks to tu_lessor_url(l) with tu_lessor_token(l) ...
 *   ck_assert_int_eq(tu_lessor_wait_status(l, id, "succeeded", 10 * USEC_PER_SEC), 0);
 *   ck_assert_int_eq(tu_lessor_stop(l), 0);   // exit status: also catches leaks
 *   tu_lessor_free(l);
 *
 * The server runs from tu_lessor_bin() (prefixed by tu_wrap_argv(), i.e.
 * valgrind under `make valgrind-check`) on a fresh database in a private
 * temporary directory, bound to 127.0.0.1 on a port the kernel picks; start
 * returns once it is serving (it reports its address on --ready-fd, so there
 * is no polling and no port race).  Its stderr goes to <dir>/lessor.log,
 * which is copied to our stderr when it exits other than 0.
 *
 * Functions return 0 / a pointer on success and -errno / NULL on failure;
 * none of them asserts, so they also serve benchmarks. */
#pragma once

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <sys/types.h>

#include "lessor/client.h"
#include "util/time.h"

struct tu_lessor;

struct tu_lessor_opts {
	const char *token; /* NULL: no authentication; else required bearer token
	                    * (--token-file: admin and worker at once, deprecated) */
	/* Scoped tokens instead of .token: --admin-token-file (tu_lessor_token()
	 * then returns it) and --worker-tokens-file with this text ("NAME TOKEN"
	 * lines); either may be NULL. */
	const char *admin_token;
	const char *worker_tokens;
	char *const *args; /* extra `lessor serve` arguments (NULL-terminated), or NULL */
	bool sync_normal;  /* --synchronous normal (faster; still survives kill -9) */
};

/* Start a server; *ret is owned by the caller (tu_lessor_free). */
int tu_lessor_start(const struct tu_lessor_opts *opts, struct tu_lessor **ret);
/* Stop it with SIGTERM and wait: its exit status (0 clean), 128 + signal
 * when killed, -ETIMEDOUT when it did not exit within 30 s (then it is killed). */
int tu_lessor_stop(struct tu_lessor *l);
/* kill -9 and wait (a crash). */
int tu_lessor_kill(struct tu_lessor *l);
/* Start again on the same database, port, token and arguments (after stop/kill). */
int tu_lessor_restart(struct tu_lessor *l);
/* Stops it if running, removes its directory, frees; NULL is a no-op. */
struct tu_lessor *tu_lessor_free(struct tu_lessor *l);

const char *tu_lessor_url(const struct tu_lessor *l);   /* "http://127.0.0.1:PORT" */
const char *tu_lessor_token(const struct tu_lessor *l); /* NULL when none */
const char *tu_lessor_dir(const struct tu_lessor *l);   /* private temp dir */
/* Replace the worker tokens file (atomically) and send SIGHUP; the reload is
 * asynchronous: wait for its effect (or tu_lessor_wait_log). */
int tu_lessor_set_worker_tokens(struct tu_lessor *l, const char *text);
/* Wait until the server's log contains needle: 0 or -ETIMEDOUT. */
int tu_lessor_wait_log(const struct tu_lessor *l, const char *needle, usec_t timeout);
const char *tu_lessor_db(const struct tu_lessor *l);
pid_t tu_lessor_pid(const struct tu_lessor *l); /* -1 when not running */

/* A new keep-alive client for this server (lessor/client.h; free it). */
lessor_client *tu_lessor_client(const struct tu_lessor *l);

/* One request with a JSON body (NULL = none) to a full URL; token NULL = no
 * Authorization.  *ret_resp: the parsed JSON answer or NULL (ret_resp may be
 * NULL).  Returns 0 whatever the HTTP status, -errno on transport failure. */
int tu_http_json(const char *method, const char *url, const char *token, const char *body_json,
                 long *ret_status, cJSON **ret_resp);

/* Against a tu_lessor, path relative ("/v1/stats"), with its token. */
int tu_lessor_json(const struct tu_lessor *l, const char *method, const char *path,
                   const char *body_json, long *ret_status, cJSON **ret_resp);
/* Arms a fault (a lessor started with --enable-faults; docs/lessor.md). */
int tu_lessor_fault(const struct tu_lessor *l, const char *json);

/* POST /v1/runs: the new run's id (free it), NULL unless 201/200. */
char *tu_lessor_enqueue(const struct tu_lessor *l, const char *body_json);
/* {"workflow":workflow,extra_json}: its id, NULL on failure (the body then
 * goes to stderr).  extra_json: members without braces, or NULL. */
char *tu_lessor_enqueue_wf(const struct tu_lessor *l, const char *workflow, const char *extra_json);
/* One run of workflow, max_attempts 1: its id, NULL on failure. */
char *tu_lessor_enqueue_one(const struct tu_lessor *l, const char *workflow);
/* GET /v1/runs/{id}, NULL unless 200. */
cJSON *tu_lessor_get_run(const struct tu_lessor *l, const char *id);
/* Poll GET /v1/runs/{id} until its status is `status`: 0 or -ETIMEDOUT
 * (the run as it then is goes to stderr). */
int tu_lessor_wait_status(const struct tu_lessor *l, const char *id, const char *status,
                          usec_t timeout);

/* Parse the API's RFC 3339 timestamps ("2026-12-01T07:51:43.123Z") to ms
 * since the epoch; -1 when malformed. */
long long tu_rfc3339_ms(const char *s);
/* Scale a timeout by $CK_TIMEOUT_MULTIPLIER (valgrind runs are slow). */
usec_t tu_timeout(usec_t base);
