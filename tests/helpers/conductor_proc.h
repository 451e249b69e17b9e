/* tests/conductor/conductor_emu (an emulation of Conductor's task API,
 * docs/conductor.md) as a child process, and a small HTTP client for it.
 *
 *   struct tu_conductor *c = NULL;
 *   ck_assert_int_eq(tu_conductor_start(NULL, &c), 0);
 *   char *id = tu_conductor_create(c, "{\"taskType\":\"build\"}");
 *   ... a worker polls tu_conductor_url(c) ...
 *   cJSON *t = tu_conductor_wait(c, id, "COMPLETED", 10 * USEC_PER_SEC);
 *   ck_assert_int_eq(tu_conductor_stop(c), 0);   // exit status: also catches leaks
 *   tu_conductor_free(c);
 *
 * On tests/helpers/emu_proc: run from $LESSEE_TEST_AUX/../conductor/conductor_emu
 * under tu_wrap_argv() (valgrind in `make valgrind-check`), bound to 127.0.0.1
 * on a port the kernel picks, reported on --ready-fd (no polling, no port
 * race); its stderr goes to <dir>/conductor.log, copied to our stderr when it
 * exits other than 0.  Functions return 0 / a pointer, or -errno / NULL; none
 * asserts, so benchmarks use them too. */
#pragma once

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "emu_proc.h"
#include "util/time.h"

struct tu_conductor;

struct tu_conductor_opts {
	const char *key_id; /* with key_secret: POST /api/token and X-Authorization on */
	const char *key_secret;
	unsigned token_ttl_s;        /* a token's life (0: the emulator's default, 45 min) */
	unsigned sweep_ms;           /* response-timeout sweep period (0: default, 100 ms) */
	unsigned input_threshold_kb; /* a larger input goes to external storage (0: 3072) */
	bool quiet;                  /* no line per request in the log (benchmarks) */
};

int tu_conductor_start(const struct tu_conductor_opts *opts, struct tu_conductor **ret);
/* SIGTERM and wait: its exit status (0 clean), 128 + signal, -ETIMEDOUT. */
int tu_conductor_stop(struct tu_conductor *c);
/* Stops it if running, removes its directory, frees; NULL is a no-op. */
struct tu_conductor *tu_conductor_free(struct tu_conductor *c);

const char *tu_conductor_url(const struct tu_conductor *c); /* "http://127.0.0.1:PORT" */
const char *tu_conductor_dir(const struct tu_conductor *c);
const char *tu_conductor_log(const struct tu_conductor *c);
pid_t tu_conductor_pid(const struct tu_conductor *c);
/* The emulator binary's path (free it). */
char *tu_conductor_bin(void);

/* One request to tu_conductor_url(c) + path; headers NULL or a NULL-terminated
 * list of "Name: value"; body NULL = none; chunked: send the body with
 * Transfer-Encoding: chunked (as the JS SDK does).  0 or -errno (transport). */
int tu_conductor_http(const struct tu_conductor *c, const char *method, const char *path,
                      const char *const *headers, const char *body, bool chunked,
                      struct tu_http_answer *ret);
/* The same with a JSON body (Content-Type: application/json) and the answer
 * parsed: NULL when it is not JSON (*ret_status is set either way). */
cJSON *tu_conductor_json(const struct tu_conductor *c, const char *method, const char *path,
                         const char *body, long *ret_status);

/* POST /emu/tasks: the first new task's id (free it), NULL unless 200. */
char *tu_conductor_create(const struct tu_conductor *c, const char *body_json);
/* GET /emu/tasks/{id}: the emulator's view of a task, NULL unless 200. */
cJSON *tu_conductor_task(const struct tu_conductor *c, const char *id);
/* POST /emu/tasks/{id}/cancel (terminate its workflow): 0, or -ESRCH
 * (unknown), -EALREADY (it had ended), -EIO. */
int tu_conductor_cancel(const struct tu_conductor *c, const char *id);
/* POST /emu/faults with this JSON ({path?, count, status?, stall_ms?, reset?}):
 * 0 or -EIO. */
int tu_conductor_fault(const struct tu_conductor *c, const char *json);
/* A /emu/stats counter (0 when it never counted), -1 on failure. */
double tu_conductor_stat(const struct tu_conductor *c, const char *name);
/* Until task `id` (or, _workflow, workflow `id`) has `status`: its view, or
 * NULL at timeout (scaled by tu_timeout). */
cJSON *tu_conductor_wait(const struct tu_conductor *c, const char *id, const char *status,
                         usec_t timeout);
cJSON *tu_conductor_wait_workflow(const struct tu_conductor *c, const char *id, const char *status,
                                  usec_t timeout);
