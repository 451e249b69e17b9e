/* tests/camunda7/camunda7_emu (an emulation of the Camunda 7 external-task
 * REST API, written from the engine's source) as a child process, and a
 * small HTTP client for it (on tests/helpers/emu_proc).
 *
 *   struct tu_camunda7 *c = NULL;
 *   ck_assert_int_eq(tu_camunda7_start(NULL, &c), 0);
 *   char *id = tu_camunda7_create(c, "{\"topicName\":\"build\"}");
 *   ... a worker fetches and locks from tu_camunda7_url(c) ...
 *   cJSON *t = tu_camunda7_wait(c, id, "COMPLETED", 10 * USEC_PER_SEC);
 *   ck_assert_int_eq(tu_camunda7_stop(c), 0);   // exit status: also catches leaks
 *   tu_camunda7_free(c);
 *
 * Task states in the emulator's view (GET /emu/tasks/{id}, "state"):
 * AVAILABLE, LOCKED, FAILED (a failure's retryTimeout not yet passed),
 * INCIDENT (retries 0), COMPLETED, BPMN_ERROR, DELETED (process cancelled).
 * Functions return 0 / a pointer, or -errno / NULL; none asserts. */
#pragma once

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <sys/types.h>

#include "emu_proc.h"
#include "util/time.h"

struct tu_camunda7;

struct tu_camunda7_opts {
	const char *user, *password; /* HTTP basic auth on /engine-rest (both or neither) */
	const char *bearer;          /* or: Authorization: Bearer <this> */
	unsigned sweep_ms;           /* accepted for symmetry; lock expiry is on real time */
	bool quiet;                  /* no line per request in the log (benchmarks) */
	bool no_spin;                /* an engine without the Spin plugin: no Json, Xml types */
};

int tu_camunda7_start(const struct tu_camunda7_opts *o, struct tu_camunda7 **ret);
/* SIGTERM and wait: its exit status (0 clean), 128 + signal, -ETIMEDOUT. */
int tu_camunda7_stop(struct tu_camunda7 *c);
/* Stops it if running, removes its directory, frees; NULL is a no-op. */
struct tu_camunda7 *tu_camunda7_free(struct tu_camunda7 *c);

/* The engine-rest root: "http://127.0.0.1:PORT/engine-rest". */
const char *tu_camunda7_url(const struct tu_camunda7 *c);
const char *tu_camunda7_dir(const struct tu_camunda7 *c);
const char *tu_camunda7_log(const struct tu_camunda7 *c);
pid_t tu_camunda7_pid(const struct tu_camunda7 *c);
/* The emulator binary's path (free it). */
char *tu_camunda7_bin(void);

/* One request to the server root + path ("/engine-rest/external-task/...",
 * "/emu/..."); headers NULL or a NULL-terminated "Name: value" list.  0 or
 * -errno (transport). */
int tu_camunda7_http(const struct tu_camunda7 *c, const char *method, const char *path,
                     const char *const *headers, const char *body, struct tu_http_answer *ret);
/* The same with a JSON body (Content-Type: application/json, and the
 * configured auth) and the answer parsed: NULL when it is not JSON. */
cJSON *tu_camunda7_json(const struct tu_camunda7 *c, const char *method, const char *path,
                        const char *body, long *ret_status);

/* POST /emu/tasks: the first new task's id (free it), NULL unless 200. */
char *tu_camunda7_create(const struct tu_camunda7 *c, const char *body_json);
/* GET /emu/tasks/{id}: the emulator's view of a task, NULL unless 200. */
cJSON *tu_camunda7_task(const struct tu_camunda7 *c, const char *id);
/* POST /emu/tasks/{id}/cancel (its process instance deleted): 0, -ESRCH
 * (unknown), -EALREADY (it had ended), -EIO. */
int tu_camunda7_cancel(const struct tu_camunda7 *c, const char *id);
/* POST /emu/tasks/{id}/expire (its lock ran out a moment ago): 0, -ESRCH,
 * -EALREADY (not locked, or ended), -EIO. */
int tu_camunda7_expire(const struct tu_camunda7 *c, const char *id);
/* POST /emu/faults ({path?, count, status?, stall_ms?, reset?}): 0 or -EIO. */
int tu_camunda7_fault(const struct tu_camunda7 *c, const char *json);
/* A /emu/stats counter (0 when it never counted), -1 on failure. */
double tu_camunda7_stat(const struct tu_camunda7 *c, const char *name);
/* Until task `id` is in `state`: its view, or NULL at timeout (scaled by tu_timeout). */
cJSON *tu_camunda7_wait(const struct tu_camunda7 *c, const char *id, const char *state,
                        usec_t timeout);
/* Until task `id`'s counts[counter] (fetched, lock, extendLock, unlock, complete,
 * failure, bpmnError, refused) reaches n: its view, or NULL at timeout. */
cJSON *tu_camunda7_wait_count(const struct tu_camunda7 *c, const char *id, const char *counter,
                              int n, usec_t timeout);
