/* An emulator under tests/ (tests/conductor/conductor_emu,
 * tests/camunda7/camunda7_emu) as a child process, and a small HTTP client
 * for it: what tu_conductor and tu_camunda7 share.
 *
 *   struct tu_emu *e = NULL;
 *   tu_emu_new("camunda7", &e);                    // its directory and log
 *   tu_emu_launch(e, "camunda7/camunda7_emu", args); // started, port read
 *   tu_emu_http(e, "GET", "/emu/stats", NULL, NULL, false, &answer);
 *   tu_emu_stop(e);                                // exit status: also catches leaks
 *   tu_emu_free(e);
 *
 * The binary runs from $LESSEE_TEST_AUX/../<rel> under tu_wrap_argv()
 * (valgrind in `make valgrind-check`), bound to 127.0.0.1 on a port the
 * kernel picks, reported on --ready-fd (no polling, no port race); its stderr
 * goes to <dir>/<name>.log, copied to our stderr when it exits other than 0.
 * Functions return 0 / a pointer, or -errno / NULL; none asserts, so
 * benchmarks use them too. */
#pragma once

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "util/time.h"

struct tu_emu;

/* One HTTP answer, whatever its status. */
struct tu_http_answer {
	long status;
	char *body; /* NUL-terminated */
	size_t len;
	char *ctype;            /* Content-Type, or NULL */
	char *www_authenticate; /* WWW-Authenticate, or NULL */
	bool chunked_sent;
};
void tu_http_answer_done(struct tu_http_answer *a);

/* The path of BUILD/tests/<rel> (free it). */
char *tu_emu_bin(const char *rel);

/* A private directory (tu_tmpdir(name)) and <dir>/<name>.log; not started. */
int tu_emu_new(const char *name, struct tu_emu **ret);
/* Starts BUILD/tests/<rel> --ready-fd 3 <args...> (args NULL-terminated or
 * NULL) and reads its address: then tu_emu_url() is "http://127.0.0.1:PORT". */
int tu_emu_launch(struct tu_emu *e, const char *rel, const char *const *args);
/* SIGTERM and wait: its exit status (0 clean), 128 + signal, -ETIMEDOUT. */
int tu_emu_stop(struct tu_emu *e);
/* Stops it if running, removes its directory, frees; NULL is a no-op. */
struct tu_emu *tu_emu_free(struct tu_emu *e);

const char *tu_emu_url(const struct tu_emu *e); /* "http://127.0.0.1:PORT" */
const char *tu_emu_dir(const struct tu_emu *e);
const char *tu_emu_log(const struct tu_emu *e);
pid_t tu_emu_pid(const struct tu_emu *e);

/* One request to tu_emu_url(e) + path; headers NULL or a NULL-terminated list
 * of "Name: value"; body NULL = none; chunked: Transfer-Encoding: chunked.
 * 0 or -errno (transport). */
int tu_emu_http(const struct tu_emu *e, const char *method, const char *path,
                const char *const *headers, const char *body, bool chunked,
                struct tu_http_answer *ret);
/* The same with a JSON body (Content-Type: application/json) and the answer
 * parsed: NULL when it is not JSON (*ret_status is set either way). */
cJSON *tu_emu_json(const struct tu_emu *e, const char *method, const char *path, const char *body,
                   long *ret_status);
/* A /emu/stats counter (0 when it never counted), -1 on failure. */
double tu_emu_stat(const struct tu_emu *e, const char *name);
/* POST /emu/faults with this JSON: 0 or -EIO. */
int tu_emu_fault(const struct tu_emu *e, const char *json);
