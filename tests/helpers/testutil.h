/* Shared test helpers (linked into every test and bench binary). */
#pragma once

#include <check.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "util/time.h"

/* A fresh private directory under $TMPDIR (or /tmp); caller frees and rm_rf's. */
char *tu_tmpdir(const char *tag);
/* A TCP port on 127.0.0.1 that was free a moment ago. */
int tu_free_port(void);
/* Poll until something accepts on 127.0.0.1:port, or timeout. */
int tu_wait_port(int port, usec_t timeout);
/* The loop backend this run is for ("io_uring"/"epoll"), from $LESSEE_IO_BACKEND. */
const char *tu_backend(void);
/* Path of a built program: $LESSEE_BIN / $LESSOR_BIN / $LESSEE_TEST_AUX/<name>. */
const char *tu_lessee_bin(void);
const char *tu_lessor_bin(void);
char *tu_aux_bin(const char *name);
/* argv prefix from $LESSEE_WRAP (valgrind under `make valgrind-check`), or NULL. */
char **tu_wrap_argv(void);
/* Do the processes run under $LESSEE_WRAP (valgrind: slower, its own fd
 * limit and exec handling)? */
bool tu_wrapped(void);
/* The blank-separated words of $name as a strv, or NULL when unset or empty. */
char **tu_env_argv(const char *name);
/* Starts argv (argv[0] looked up in $PATH) with envp (NULL: ours), stdin
 * from /dev/null, stdout and stderr appended to log (made 0600), and, when
 * pass_fd >= 0, pass_fd as its fd pass_at.  It gets SIGTERM when the calling
 * thread ends (a parent-death signal), so a harness that is killed leaves no
 * server behind.  0 and *ret_pid, or -errno, also when the program could not
 * be executed. */
int tu_spawn_logged(char *const argv[], char *const envp[], const char *log, int pass_fd,
                    int pass_at, pid_t *ret_pid);
/* A process's state letter and parent from /proc/PID/stat; false when there
 * is no such process. */
bool tu_proc_stat(pid_t pid, char *ret_state, pid_t *ret_ppid);
/* Has pid exited (gone, or a zombie nobody reaped yet)?  Waits up to
 * timeout (not scaled by tu_timeout) for it. */
bool tu_wait_pid_gone(pid_t pid, usec_t timeout);
/* Sleep on the monotonic clock. */
void tu_sleep(usec_t u);
/* The deterministic byte stream of tests/aux/gen_output. */
uint64_t tu_gen_seed(uint64_t seed);
void tu_gen_fill(uint64_t *state, void *buf, size_t n);
/* A program's own answer to "--version" or "--help" as its only argument:
 * "NAME VERSION" or usage on stdout, and true (the program then exits 0).
 * For the benches and helpers that parse their arguments by hand. */
bool tu_std_answer(int argc, char **argv, const char *name, const char *usage);
/* Run a suite with Check, return 0 when all passed: `return tu_run(suite);` */
int tu_run(Suite *s);
