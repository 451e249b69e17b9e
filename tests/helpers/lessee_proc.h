/* A real lessee daemon for integration tests, pointed at a tu_lessor.
 *
 *   struct tu_lessee *d = NULL;
 *   ck_assert_int_eq(tu_lessee_start(&(struct tu_lessee_opts){.lessor = l,
 *                    .conf = "[workflow.ok]\ncommand = /bin/true\n"}, &d), 0);
 *   ...
 *   ck_assert_int_eq(tu_lessee_stop(d), 0);   // SIGTERM, wait: exit status
 *   tu_lessee_free(d);
 *
 * The daemon runs from tu_lessee_bin() (under $LESSEE_WRAP when set) with a
 * configuration written to its private directory: the lessor's URL and token,
 * short leases and polls suited to tests, spool and run directories inside
 * the private directory, then the caller's text (later keys win).  Its stderr
 * (logfmt, debug) goes to <dir>/lessee.log.  tu_lessee_free stops a running
 * daemon with SIGQUIT and copies the log to our stderr when it did not exit 0. */
#pragma once

#include <stdbool.h>
#include <sys/types.h>

#include "lessor_proc.h"
#include "util/time.h"

struct tu_lessee;

struct tu_lessee_opts {
	const struct tu_lessor *lessor;
	/* Instead of lessor: the API's URL, no token (the caller's conf says the
	 * protocol and any credentials: "[api]\nprotocol = conductor\n..."). */
	const char *url;
	const char *conf;      /* appended to the generated configuration */
	char *const *args;     /* extra command-line arguments, NULL-terminated */
	char *const *env;      /* extra environment "NAME=value", NULL-terminated */
	/* Command prefix for the daemon, NULL-terminated, placed before $LESSEE_WRAP
	 * (so valgrind runs inside it): {"seccomp_wrap", "--errno", "EPERM", "--",
	 * NULL}.  NULL: the words of $LESSEE_DAEMON_WRAP, if set. */
	char *const *wrap;
	/* Start the daemon as PID 1 of a new PID namespace (clone(CLONE_NEWPID),
	 * needs CAP_SYS_ADMIN); it stays our child: tu_lessee_pid() is its pid
	 * here, signals and waits work as usual. */
	bool pid_namespace;
};

/* Returns once the daemon sent READY=1 on the NOTIFY_SOCKET we give it. */
int tu_lessee_start(const struct tu_lessee_opts *opts, struct tu_lessee **ret);
/* Start again with the same directory, configuration and arguments (and wait for READY=1). */
int tu_lessee_restart(struct tu_lessee *d);
int tu_lessee_signal(struct tu_lessee *d, int sig);
/* Wait for exit: the exit status, 128 + signal, or -ETIMEDOUT (left running). */
int tu_lessee_wait(struct tu_lessee *d, usec_t timeout);
/* SIGQUIT (hard stop now) and wait: the exit status (0 = clean, also of
 * sanitizers and valgrind), or the last one when it had already exited. */
int tu_lessee_quit(struct tu_lessee *d);
/* SIGTERM and wait up to 60 s (scaled for valgrind). */
int tu_lessee_stop(struct tu_lessee *d);
struct tu_lessee *tu_lessee_free(struct tu_lessee *d);

pid_t tu_lessee_pid(const struct tu_lessee *d);
const char *tu_lessee_dir(const struct tu_lessee *d);
/* The daemon's log so far (free it). */
char *tu_lessee_log(const struct tu_lessee *d);
/* The daemon's log so far on stderr, for a failing test (d may be NULL). */
void tu_lessee_dump_log(const struct tu_lessee *d);
/* Wait until the log contains needle: 0 or -ETIMEDOUT. */
int tu_lessee_wait_log(const struct tu_lessee *d, const char *needle, usec_t timeout);

/* Replace the caller's part of the configuration (for SIGHUP reload tests). */
int tu_lessee_set_conf(struct tu_lessee *d, const char *conf);
/* The status endpoint's port, from the daemon's log (status.listen = 127.0.0.1:0). */
int tu_lessee_status_port(const struct tu_lessee *d);
/* GET a path of the status endpoint: the body (free it), NULL on transport failure. */
char *tu_lessee_status_get(const struct tu_lessee *d, const char *path, long *ret_status);

/* One scrape of /metrics: the sum of the samples named name whose label
 * `label` is value (label NULL: all of them); 0 when there are none, NAN when
 * the scrape failed. */
double tu_lessee_metric(const struct tu_lessee *d, const char *name, const char *label,
                        const char *value);

/* GET /v1/runs/{id}/log from the lessor: the raw bytes (free them). */
char *tu_lessor_run_log(const struct tu_lessor *l, const char *id, size_t *ret_len);
/* Is this pid still a live (non-zombie) process? */
bool tu_pid_alive(pid_t pid);
/* Can this process start one in a new PID namespace?  false when the kernel
 * or our privileges do not allow it (then skip). */
bool tu_pid_namespace_available(void);
