/* lib/exec: spawning, child setup, output, exit reporting, the kill ladder, the
 * environment.  Runs under both loop backends (tests/run.sh). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../aux/emit.h"
#include "exec/exec-int.h"
#include "exec/exec.h"
#include "testutil.h"
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif
#include "util/buf.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"

#define OUT_CAP (64 * 1024 * 1024)
#define WAIT_LONG (30 * USEC_PER_SEC)

static char *child_env[] = {"PATH=/usr/bin:/bin", NULL};

struct run {
	struct buf out[3]; /* [1]: stdout (or both), [2]: stderr */
	uint64_t bytes[3];
	bool count_only; /* bytes[] only, out[] stays empty */
	struct exec_result res;
	int exits;
	size_t max_chunk;
	exec_proc_t *p;
	bool free_in_output;
	bool free_in_exit;
};

/* The fds open here, besides those the spawns keep open between runs (closed
 * first): what a leak check compares. */
static int fds_open(void)
{
	exec_child_release();
	return fd_count();
}

static void run_done(struct run *r)
{
	for (size_t i = 0; i < ELEMENTSOF(r->out); i++)
		buf_done(&r->out[i]);
	exec_free(r->p);
	*r = (struct run){0};
}

static void on_output(exec_proc_t *p, int stream, const void *data, size_t len, void *userdata)
{
	struct run *r = userdata;

	ck_assert_ptr_eq(p, r->p);
	ck_assert(stream == 1 || stream == 2);
	ck_assert_uint_gt(len, 0);
	ck_assert_int_eq(r->exits, 0);
	r->max_chunk = MAX(r->max_chunk, len);
	r->bytes[stream] += len;
	if (!r->count_only) {
		r->out[stream].cap = OUT_CAP;
		ck_assert_int_eq(buf_append(&r->out[stream], data, len), 0);
	}
	if (r->free_in_output)
		r->p = exec_free(p);
}

static void on_exit_cb(exec_proc_t *p, const struct exec_result *res, void *userdata)
{
	struct run *r = userdata;

	ck_assert_ptr_eq(p, r->p);
	ck_assert(!exec_running(p));
	r->res = *res;
	r->exits++;
	if (r->free_in_exit)
		r->p = exec_free(p);
}

static ev_t *loop_new(void)
{
	ev_t *e = NULL;

	ck_assert_int_eq(ev_new(&e, NULL), 0);
	ck_assert_str_eq(ev_backend(e), tu_backend());
	return e;
}

#define RUN_UNTIL(e, cond, timeout)                                                                \
	do {                                                                                       \
		usec_t end_ = time_mono() + (timeout);                                             \
		while (!(cond)) {                                                                  \
			ck_assert_msg(time_mono() < end_, "timed out waiting for %s", #cond);      \
			ck_assert_int_ge(ev_run_once((e), 100 * USEC_PER_MSEC), 0);                \
		}                                                                                  \
	} while (0)

static struct exec_spec spec_for(char *const *argv)
{
	return (struct exec_spec){.path = argv[0], .argv = argv, .envp = child_env, .stdin_fd = -1};
}

static void spawn_ok(ev_t *e, const struct exec_spec *spec, struct run *r)
{
	const char *step = NULL;
	int rc = exec_spawn(e, spec, on_output, on_exit_cb, r, &r->p, &step);

	ck_assert_msg(rc == 0, "spawn %s: %s at %s", spec->path, strerror(-rc), step);
	ck_assert_int_gt(exec_pid(r->p), 0);
	ck_assert(exec_running(r->p));
}

/* Spawn, run to the exit callback. */
static void run_to_exit(ev_t *e, const struct exec_spec *spec, struct run *r)
{
	spawn_ok(e, spec, r);
	RUN_UNTIL(e, r->exits == 1, WAIT_LONG);
}

static const char *out_str(const struct run *r, int stream)
{
	return r->out[stream].data ? r->out[stream].data : "";
}

/* The value of "key=..." in probe's output, or NULL. */
static char *probe_get(const struct run *r, const char *key)
{
	const char *s = out_str(r, 1);
	size_t n = strlen(key);

	for (const char *l = s; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL)
		if (strncmp(l, key, n) == 0 && l[n] == '=')
			return strndup(l + n + 1, strcspn(l + n + 1, "\n"));
	return NULL;
}

static void assert_probe(const struct run *r, const char *key, const char *want)
{
	_cleanup_free_ char *v = probe_get(r, key);

	ck_assert_msg(v, "probe printed no %s:\n%s", key, out_str(r, 1));
	ck_assert_msg(streq(v, want), "%s=%s, want %s", key, v, want);
}

/* Gone = no such process, or a zombie its new parent has yet to reap. */
static bool pid_gone(pid_t pid)
{
	return tu_wait_pid_gone(pid, 10 * USEC_PER_SEC);
}

/* No child of ours left, reaped or not. */
/* No child left, not even a zombie. */
static bool tu_no_children(void)
{
	siginfo_t si;

	return waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 && errno == ECHILD;
}

static void assert_no_children(void)
{
	siginfo_t si;

	ck_assert_int_eq(waitid(P_ALL, 0, &si, WEXITED | WNOHANG), -1);
	ck_assert_int_eq(errno, ECHILD);
}

/* ------------------------------------------------------------------------- */

START_TEST(test_env_build)
{
	char *from[] = {"PATH=/bin",      "HOME=/root",      "LC_ALL=C",
	                "LC_TIME=de",     "SECRET=x",        "NOTIFY_SOCKET=/run",
	                "WATCHDOG_PID=1", "WATCHDOG_USEC=5", "LESSEE_TOKEN=tok",
	                "LISTEN_FDS=3",   "PATH=/second",    "noequals",
	                "=novalue",       "TERM=xterm",      NULL};
	char *extra[] = {"FOO=1", "HOME=/run/x", "LESSEE_RUN_ID=r1", "FOO=2", NULL};
	const char *const allow_secret[] = {"SECRET", "NOTIFY_SOCKET", "LESSEE_*", NULL};
	char **env = NULL;

	ck_assert_int_eq(exec_env_build(from, NULL, extra, &env), 0);
	ck_assert_int_eq(strv_length(env), 7);
	ck_assert_str_eq(env[0], "PATH=/bin"); /* the first of duplicates */
	ck_assert_str_eq(env[1], "HOME=/run/x");
	ck_assert_str_eq(env[2], "LC_ALL=C");
	ck_assert_str_eq(env[3], "LC_TIME=de");
	ck_assert_str_eq(env[4], "TERM=xterm");
	ck_assert_str_eq(env[5], "FOO=2");
	ck_assert_str_eq(env[6], "LESSEE_RUN_ID=r1");
	env = strv_free(env);

	/* forbidden whatever the allowlist says */
	ck_assert_int_eq(exec_env_build(from, allow_secret, NULL, &env), 0);
	ck_assert_int_eq(strv_length(env), 1);
	ck_assert_str_eq(env[0], "SECRET=x");
	env = strv_free(env);

	/* an empty result is an empty vector, not NULL */
	ck_assert_int_eq(exec_env_build(from, (const char *const[]){NULL}, NULL, &env), 0);
	ck_assert_ptr_nonnull(env);
	ck_assert_ptr_null(env[0]);
	env = strv_free(env);

	ck_assert_int_eq(exec_env_build(from, NULL, (char *[]){"NOTIFY_SOCKET=/x", NULL}, &env),
	                 -EPERM);
	ck_assert_int_eq(exec_env_build(from, NULL, (char *[]){"NOVALUE", NULL}, &env), -EINVAL);
	ck_assert_int_eq(exec_env_build(from, NULL, (char *[]){"=x", NULL}, &env), -EINVAL);
	ck_assert_ptr_null(env);

	/* over a base built once: the same environment, no string copied */
	{
		char **base = NULL, **over = NULL;
		char *first[] = {"FOO=1", "HOME=/run/x", NULL};
		char *then[] = {"LESSEE_RUN_ID=r1", "FOO=2", NULL};

		ck_assert_int_eq(exec_env_build(from, NULL, first, &base), 0);
		ck_assert_int_eq(exec_env_build(from, NULL, extra, &env), 0);
		ck_assert_int_eq(exec_env_overlay(base, then, &over), 0);
		ck_assert_int_eq(strv_length(over), strv_length(env));
		for (size_t i = 0; env[i]; i++)
			ck_assert_str_eq(over[i], env[i]);
		ck_assert_ptr_eq(over[0], base[0]);
		ck_assert_ptr_eq(over[5], then[1]);
		free(over);
		env = strv_free(env);
		ck_assert_int_eq(
		    exec_env_overlay(base, (char *[]){"NOTIFY_SOCKET=/x", NULL}, &over), -EPERM);
		ck_assert_int_eq(exec_env_overlay(base, (char *[]){"=x", NULL}, &over), -EINVAL);
		ck_assert_int_eq(exec_env_overlay(NULL, NULL, &over), 0);
		ck_assert_ptr_null(over[0]);
		free(over);
		strv_free(base);
	}

	ck_assert(exec_env_forbidden("NOTIFY_SOCKET"));
	ck_assert(exec_env_forbidden("WATCHDOG_USEC=1"));
	ck_assert(exec_env_forbidden("LESSEE_ANYTHING"));
	ck_assert(exec_env_forbidden("INVOCATION_ID"));
	ck_assert(exec_env_forbidden("CREDENTIALS_DIRECTORY"));
	ck_assert(exec_env_forbidden("JOURNAL_STREAM"));
	ck_assert(exec_env_forbidden("LISTEN_FDNAMES"));
	ck_assert(!exec_env_forbidden("NOTIFY_SOCKETS"));
	ck_assert(!exec_env_forbidden("LESSEE"));
	ck_assert(!exec_env_forbidden("PATH"));
}
END_TEST

/* The daemon's own environment (environ) never reaches the child. */
START_TEST(test_env_child)
{
	char *extra[] = {"LESSEE_RUN_ID=r1", "FOO=bar", NULL};
	char *argv[] = {NULL, NULL};
	_cleanup_free_ char *probe = tu_aux_bin("probe");
	struct exec_spec spec;
	struct run r = {0};
	char **env = NULL;
	ev_t *e = loop_new();

	setenv("NOTIFY_SOCKET", "/run/systemd/notify", 1);
	setenv("WATCHDOG_PID", "1", 1);
	setenv("WATCHDOG_USEC", "30000000", 1);
	setenv("LESSEE_TOKEN", "s3cret-token", 1);
	setenv("INVOCATION_ID", "abc", 1);
	setenv("PATH", "/usr/bin:/bin", 1);
	ck_assert_int_eq(exec_env_build(NULL, NULL, extra, &env), 0);
	argv[0] = probe;
	spec = spec_for(argv);
	spec.envp = env;
	run_to_exit(e, &spec, &r);
	ck_assert(r.res.exited);
	ck_assert_int_eq(r.res.exit_code, 0);
	ck_assert_ptr_null(strstr(out_str(&r, 1), "s3cret"));
	ck_assert_ptr_null(strstr(out_str(&r, 1), "NOTIFY_SOCKET"));
	ck_assert_ptr_null(strstr(out_str(&r, 1), "WATCHDOG_"));
	ck_assert_ptr_null(strstr(out_str(&r, 1), "INVOCATION_ID"));
	ck_assert_ptr_nonnull(strstr(out_str(&r, 1), "\nenv=LESSEE_RUN_ID=r1\n"));
	ck_assert_ptr_nonnull(strstr(out_str(&r, 1), "\nenv=FOO=bar\n"));
	ck_assert_ptr_nonnull(strstr(out_str(&r, 1), "\nenv=PATH=/usr/bin:/bin\n"));
	strv_free(env);
	run_done(&r);
	ev_free(e);
	unsetenv("NOTIFY_SOCKET");
	unsetenv("WATCHDOG_PID");
	unsetenv("WATCHDOG_USEC");
	unsetenv("LESSEE_TOKEN");
	unsetenv("INVOCATION_ID");
}
END_TEST

static void noop_handler(int sig)
{
}

/* The dispositions are learnt at the first spawn (one pread of
 * /proc/self/status, not one per spawn): a signal ignored after that and
 * said with exec_signals_changed() is not ignored in the next child. */
START_TEST(test_signals_changed)
{
	_cleanup_free_ char *probe = tu_aux_bin("probe");
	char *argv[] = {probe, NULL};
	struct sigaction sa = {.sa_handler = SIG_IGN}, old_usr2;
	struct exec_spec spec = spec_for(argv);
	struct run r = {0};
	ev_t *e = loop_new();

	run_to_exit(e, &spec, &r);
	assert_probe(&r, "SigIgn", "0000000000000000");
	run_done(&r);
	ck_assert_int_eq(sigaction(SIGUSR2, &sa, &old_usr2), 0);
	exec_signals_changed();
	run_to_exit(e, &spec, &r);
	assert_probe(&r, "SigIgn", "0000000000000000");
	run_done(&r);
	sigaction(SIGUSR2, &old_usr2, NULL);
	exec_signals_changed();
	ev_free(e);
}
END_TEST

/* Whatever the daemon did to its own signals and fds, the child starts clean. */
START_TEST(test_child_setup)
{
	_cleanup_free_ char *probe = tu_aux_bin("probe");
	_cleanup_free_ char *dir = tu_tmpdir("exec-setup");
	char *argv[] = {probe, NULL};
	/* not RLIMIT_NOFILE: valgrind, which runs the child until its execve, refuses it */
	struct exec_rlimit rl[] = {{RLIMIT_FSIZE, {1 << 20, 2 << 20}}, {RLIMIT_CORE, {0, 0}}};
	struct sigaction sa = {.sa_handler = noop_handler}, old_int, old_pipe, old_usr2;
	struct exec_spec spec = spec_for(argv);
	sigset_t block, old_mask;
	struct run r = {0};
	int leak_fd, leak_pipe[2], in_fd;
	char want_pid[32];
	ev_t *e = loop_new();

	/* fds without O_CLOEXEC, on purpose */
	leak_fd = open("/dev/null", O_RDONLY);
	ck_assert_int_ge(leak_fd, 0);
	ck_assert_int_eq(pipe(leak_pipe), 0);
	in_fd = open("/dev/zero", O_RDONLY);
	ck_assert_int_ge(in_fd, 0);
	/* blocked, ignored and caught signals */
	sigemptyset(&block);
	sigaddset(&block, SIGUSR1);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGCHLD);
	ck_assert_int_eq(sigprocmask(SIG_BLOCK, &block, &old_mask), 0);
	ck_assert_int_eq(sigaction(SIGINT, &sa, &old_int), 0);
	sa.sa_handler = SIG_IGN;
	ck_assert_int_eq(sigaction(SIGPIPE, &sa, &old_pipe), 0);
	ck_assert_int_eq(sigaction(SIGUSR2, &sa, &old_usr2), 0);
	exec_signals_changed(); /* for CK_FORK=no: an earlier test spawned */

	spec.rlimits = rl;
	spec.n_rlimits = ELEMENTSOF(rl);
	spec.cwd = dir;
	spec.stdin_fd = in_fd;
	spec.pdeathsig = SIGTERM;
	run_to_exit(e, &spec, &r);
	ck_assert_msg(r.res.exited && r.res.exit_code == 0, "probe failed: %s", out_str(&r, 1));
	snprintf(want_pid, sizeof(want_pid), "%d", (int)exec_pid(r.p));
	assert_probe(&r, "fds", "0,1,2");
	assert_probe(&r, "pid", want_pid);
	assert_probe(&r, "sid", want_pid);
	assert_probe(&r, "pgid", want_pid);
	assert_probe(&r, "SigBlk", "0000000000000000");
	assert_probe(&r, "SigIgn", "0000000000000000");
	assert_probe(&r, "NoNewPrivs", "1");
	assert_probe(&r, "fsize", "1048576:2097152");
	assert_probe(&r, "core", "0:0");
	assert_probe(&r, "pdeathsig", "15");
	assert_probe(&r, "cwd", dir);
	/* the parent is untouched */
	ck_assert_int_eq(fcntl(leak_fd, F_GETFD), 0);
	run_done(&r);

	/* stdin really is the given fd (here /dev/zero, /dev/null by default) */
	{
		char *cat[] = {"/bin/sh", "-c", "head -c 5 | od -An -tx1", NULL};
		struct run r2 = {0};

		spec = spec_for(cat);
		spec.stdin_fd = in_fd;
		run_to_exit(e, &spec, &r2);
		ck_assert_str_eq(out_str(&r2, 1), " 00 00 00 00 00\n");
		run_done(&r2);
		spec.stdin_fd = -1;
		run_to_exit(e, &spec, &r2);
		ck_assert_str_eq(out_str(&r2, 1), "");
		run_done(&r2);
	}

	ck_assert_int_eq(sigprocmask(SIG_SETMASK, &old_mask, NULL), 0);
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGPIPE, &old_pipe, NULL);
	sigaction(SIGUSR2, &old_usr2, NULL);
	exec_signals_changed();
	close(leak_fd);
	close(leak_pipe[0]);
	close(leak_pipe[1]);
	close(in_fd);
	rm_rf(dir);
	ev_free(e);
}
END_TEST

START_TEST(test_set_ids)
{
	_cleanup_free_ char *probe = tu_aux_bin("probe");
	char *argv[] = {probe, NULL};
	struct exec_spec spec = spec_for(argv);
	struct passwd *pw = getpwnam("nobody");
	char want_uid[16], want_gid[16];
	struct run r = {0};
	ev_t *e;

	if (geteuid() != 0 || !pw) {
		printf("test_set_ids: not root or no user nobody, skipped\n");
		return;
	}
	e = loop_new();
	spec.set_ids = true;
	spec.uid = pw->pw_uid;
	spec.gid = pw->pw_gid;
	spec.cwd = "/";
	run_to_exit(e, &spec, &r);
	ck_assert_msg(r.res.exited && r.res.exit_code == 0, "probe failed: %s", out_str(&r, 1));
	snprintf(want_uid, sizeof(want_uid), "%d", (int)pw->pw_uid);
	snprintf(want_gid, sizeof(want_gid), "%d", (int)pw->pw_gid);
	assert_probe(&r, "uid", want_uid);
	assert_probe(&r, "gid", want_gid);
	assert_probe(&r, "groups", want_gid);
	/* PR_SET_PDEATHSIG survives the id change (it is set after it) */
	assert_probe(&r, "pdeathsig", "9");
	run_done(&r);
	ev_free(e);
}
END_TEST

/* The child sets to SIG_DFL exactly the signals whose disposition is not
 * SIG_DFL here (ignored ones survive execve; caught ones must not run on our
 * memory before it), found with one read instead of 62 sigaction() calls in
 * the child; test_child_setup checks the child's dispositions themselves. */
START_TEST(test_signals_reset_set)
{
	struct sigaction sa = {.sa_handler = noop_handler}, old_int, old_pipe, old_usr2;
	/* SIGKILL, SIGSTOP and glibc's own 32 and 33 are never looked at */
	const uint64_t unreachable = UINT64_C(1) << (SIGKILL - 1) | UINT64_C(1) << (SIGSTOP - 1) |
	                             UINT64_C(1) << 31 | UINT64_C(1) << 32;
	uint64_t want = 0, got;

	ck_assert_int_eq(sigaction(SIGINT, &sa, &old_int), 0);
	sa.sa_handler = SIG_IGN;
	ck_assert_int_eq(sigaction(SIGPIPE, &sa, &old_pipe), 0);
	ck_assert_int_eq(sigaction(SIGUSR2, &sa, &old_usr2), 0);
	for (int sig = 1; sig <= 64; sig++) {
		struct sigaction cur;

		if (sig == SIGKILL || sig == SIGSTOP ||
		    syscall(SYS_rt_sigaction, sig, NULL, &cur, 8) < 0)
			continue;
		if (cur.sa_handler != SIG_DFL)
			want |= UINT64_C(1) << (sig - 1);
	}
	want &= ~unreachable;
	got = exec_child_signals_to_reset() & ~unreachable;
	/* valgrind's own handlers are in /proc's SigCgt (not in what sigaction()
	 * shows us): the child resets those too; only the superset is checked. */
	if (RUNNING_ON_VALGRIND)
		want = (got & want) == want ? got : want;
	ck_assert_msg(got == want, "resets %016llx, not at SIG_DFL: %016llx",
	              (unsigned long long)got, (unsigned long long)want);
	ck_assert(got & (UINT64_C(1) << (SIGPIPE - 1)));
	ck_assert(got & (UINT64_C(1) << (SIGINT - 1)));
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGPIPE, &old_pipe, NULL);
	sigaction(SIGUSR2, &old_usr2, NULL);
	exec_child_release();
}
END_TEST

/* The spawn's own fds (/dev/null, the slots, /proc/self/status) stay open
 * between runs while they sit low in the table: a daemon running one run at a
 * time does not close and open them again for each (12 system calls a run).
 * Taken high (a full table at the first spawn), they are closed with the last
 * run process, and the next spawn takes them low again. */
START_TEST(test_spawn_fds_kept_while_low)
{
	enum { HIGH = 200 };
	int fds[HIGH], base, kept;
	char *argv[] = {"/bin/true", NULL};
	struct exec_spec spec = spec_for(argv);
	struct run r = {0};
	ev_t *e = loop_new();

	base = fds_open();
	run_to_exit(e, &spec, &r);
	run_done(&r);
	kept = fd_count();
	ck_assert_msg(kept > base, "the spawn's fds were closed with its only process");
	for (int i = 0; i < 3; i++) {
		run_to_exit(e, &spec, &r);
		ck_assert(r.res.exited && r.res.exit_code == 0);
		run_done(&r);
		ck_assert_int_eq(fd_count(), kept);
	}
	ck_assert_int_eq(fds_open(), base);

	for (int i = 0; i < HIGH; i++)
		ck_assert_int_ge(fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC), 0);
	run_to_exit(e, &spec, &r);
	for (int i = 0; i < HIGH; i++)
		close(fds[i]);
	run_done(&r);
	ck_assert_int_eq(fd_count(), base);
	run_to_exit(e, &spec, &r);
	run_done(&r);
	ck_assert_int_eq(fd_count(), kept);
	exec_child_release();
	ev_free(e);
}
END_TEST

/* The child does not get a copy of our whole fd table: with a run alive and
 * then 3,000 more fds open here (a daemon's pidfds and pipes), the next child's
 * table (FDSize in /proc/self/status, which an execve does not shrink) is
 * still small.  A copy would be at least 3,000 entries, each closed again by
 * the execve. */
START_TEST(test_child_small_fd_table)
{
	enum { N = 3000 };
	static int fds[N];
	char *argv[] = {"/bin/grep", "^FDSize:", "/proc/self/status", NULL};
	char *sleeper[] = {"/bin/sleep", "1000", NULL};
	struct exec_spec spec = spec_for(argv), spec0 = spec_for(sleeper);
	struct rlimit rl;
	struct run r = {0}, r0 = {0};
	long size;
	ev_t *e;

	if (RUNNING_ON_VALGRIND) {
		fprintf(stderr,
		        "valgrind runs the vfork as a fork: the child copies the table, skipped\n");
		return;
	}
	ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_max < N + 100) {
		fprintf(stderr, "RLIMIT_NOFILE hard limit too low, skipped\n");
		return;
	}
	rl.rlim_cur = MAX(rl.rlim_cur, (rlim_t)N + 100);
	ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
	e = loop_new();
	spawn_ok(e, &spec0, &r0);
	for (int i = 0; i < N; i++)
		ck_assert_int_ge(fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC), 0);
	run_to_exit(e, &spec, &r);
	ck_assert_msg(r.res.exited && r.res.exit_code == 0, "grep: %s", out_str(&r, 1));
	ck_assert_int_eq(sscanf(out_str(&r, 1), "FDSize: %ld", &size), 1);
	ck_assert_msg(size < N, "the child's fd table has %ld entries", size);
	run_done(&r);
	ck_assert_int_eq(exec_kill(r0.p, 0), 0);
	RUN_UNTIL(e, r0.exits == 1, WAIT_LONG);
	run_done(&r0);
	for (int i = 0; i < N; i++)
		close(fds[i]);
	ev_free(e);
}
END_TEST

static void assert_spawn_fails(ev_t *e, const struct exec_spec *spec, int want_err,
                               const char *want_step)
{
	int fds = fds_open();
	const char *step = NULL;
	exec_proc_t *p = NULL;
	int rc = exec_spawn(e, spec, on_output, on_exit_cb, NULL, &p, &step);

	ck_assert_msg(rc == -want_err, "%s: got %d (%s), want -%s", spec->path, rc,
	              rc < 0 ? strerror(-rc) : "ok", strerror(want_err));
	ck_assert_ptr_nonnull(step);
	ck_assert_str_eq(step, want_step);
	ck_assert_ptr_null(p);
	ck_assert_int_eq(fds_open(), fds);
	assert_no_children();
}

START_TEST(test_spawn_errors)
{
	_cleanup_free_ char *dir = tu_tmpdir("exec-errors");
	_cleanup_free_ char *plain = NULL;
	char *missing[] = {"/nonexistent/program", NULL};
	char *sh[] = {"/bin/sh", "-c", "exit 0", NULL};
	char *noexec[] = {NULL, NULL};
	struct exec_rlimit bad_rl = {RLIMIT_FSIZE, {200, 100}};
	struct exec_spec spec;
	ev_t *e = loop_new();

	ck_assert_int_gt(asprintf(&plain, "%s/not-executable", dir), 0);
	ck_assert_int_eq(write_file_atomic(plain, "#!/bin/sh\n", 10, 0644), 0);
	noexec[0] = plain;

	spec = spec_for(missing);
	assert_spawn_fails(e, &spec, ENOENT, "execve");
	spec = spec_for(noexec);
	assert_spawn_fails(e, &spec, EACCES, "execve");
	spec = spec_for(sh);
	spec.cwd = "/nonexistent/dir";
	assert_spawn_fails(e, &spec, ENOENT, "chdir");
	spec = spec_for(sh);
	spec.rlimits = &bad_rl;
	spec.n_rlimits = 1;
	assert_spawn_fails(e, &spec, EINVAL, "setrlimit");
	spec = spec_for(sh);
	spec.stdin_fd = 999;
	assert_spawn_fails(e, &spec, EBADF, "dup");
	if (geteuid() != 0) {
		spec = spec_for(sh);
		spec.set_ids = true;
		assert_spawn_fails(e, &spec, EPERM, "setgroups");
	}
	/* bad arguments never start anything */
	spec = spec_for(sh);
	spec.argv = (char *[]){NULL};
	assert_spawn_fails(e, &spec, EINVAL, "spawn");
	rm_rf(dir);
	ev_free(e);
}
END_TEST

START_TEST(test_exit_status)
{
	_cleanup_free_ char *dir = tu_tmpdir("exec-core");
	_cleanup_free_ char *pattern = NULL;
	char *exit7[] = {"/bin/sh", "-c", "exit 7", NULL};
	char *segv[] = {"/bin/sh", "-c", "kill -SEGV $$", NULL};
	struct exec_rlimit no_core = {RLIMIT_CORE, {0, 0}};
	struct exec_rlimit core = {RLIMIT_CORE, {RLIM_INFINITY, RLIM_INFINITY}};
	struct exec_spec spec = spec_for(exit7);
	struct run r = {0};
	ev_t *e = loop_new();

	run_to_exit(e, &spec, &r);
	ck_assert(r.res.exited);
	ck_assert_int_eq(r.res.exit_code, 7);
	ck_assert_int_eq(r.res.signal, 0);
	ck_assert(!r.res.killed);
	ck_assert(!r.res.core_dumped);
	ck_assert_uint_gt(r.res.duration, 0);
	ck_assert_uint_lt(r.res.duration, WAIT_LONG);
	run_done(&r);

	spec = spec_for(segv);
	spec.rlimits = &no_core;
	spec.n_rlimits = 1;
	run_to_exit(e, &spec, &r);
	ck_assert(!r.res.exited);
	ck_assert_int_eq(r.res.signal, SIGSEGV);
	ck_assert(!r.res.core_dumped);
	ck_assert(!r.res.killed);
	run_done(&r);

	/* CLD_DUMPED, where the kernel writes plain core files */
	if (read_file_capped("/proc/sys/kernel/core_pattern", 4096, &pattern, NULL) == 0 &&
	    pattern[0] != '|') {
		spec.rlimits = &core;
		spec.cwd = dir;
		run_to_exit(e, &spec, &r);
		ck_assert_int_eq(r.res.signal, SIGSEGV);
		ck_assert(r.res.core_dumped);
		run_done(&r);
	}
	rm_rf(dir);
	ev_free(e);
}
END_TEST

#define ORDER_SCRIPT "i=0; while [ $i -lt 200 ]; do echo out$i; echo err$i >&2; i=$((i+1)); done"

static char *order_expect(bool out, bool err)
{
	struct buf b = BUF_INIT(0);

	for (int i = 0; i < 200; i++) {
		if (out)
			ck_assert_int_ge(buf_printf(&b, "out%d\n", i), 0);
		if (err)
			ck_assert_int_ge(buf_printf(&b, "err%d\n", i), 0);
	}
	return buf_steal(&b);
}

START_TEST(test_output_order)
{
	char *argv[] = {"/bin/sh", "-c", ORDER_SCRIPT, NULL};
	_cleanup_free_ char *both = order_expect(true, true);
	_cleanup_free_ char *out = order_expect(true, false);
	_cleanup_free_ char *err = order_expect(false, true);
	struct exec_spec spec = spec_for(argv);
	struct run r = {0};
	ev_t *e = loop_new();

	run_to_exit(e, &spec, &r);
	ck_assert_str_eq(out_str(&r, 1), both);
	ck_assert_ptr_null(r.out[2].data);
	run_done(&r);

	spec.split_stderr = true;
	run_to_exit(e, &spec, &r);
	ck_assert_str_eq(out_str(&r, 1), out);
	ck_assert_str_eq(out_str(&r, 2), err);
	run_done(&r);
	ev_free(e);
}
END_TEST

static void assert_pattern(const struct buf *b, size_t want)
{
	ck_assert_uint_eq(b->len, want);
	for (size_t i = 0; i < want; i++)
		if ((uint8_t)b->data[i] != emit_byte(i))
			ck_abort_msg("byte %zu differs", i);
}

/* Far more than a pipe holds, written before the exit: every byte, in order. */
START_TEST(test_big_output)
{
	_cleanup_free_ char *emit = tu_aux_bin("emit");
	char *argv[] = {emit, "4194304", "1048576", "3", NULL};
	struct exec_spec spec = spec_for(argv);
	struct run r = {0};
	ev_t *e = loop_new();

	spec.split_stderr = true;
	run_to_exit(e, &spec, &r);
	ck_assert(r.res.exited);
	ck_assert_int_eq(r.res.exit_code, 3);
	assert_pattern(&r.out[1], 4194304);
	assert_pattern(&r.out[2], 1048576);
	ck_assert_uint_le(r.max_chunk, 64 * 1024);
	run_done(&r);
	ev_free(e);
}
END_TEST

/* Backpressure: while paused nothing is read, the child blocks on the full
 * pipe instead of finishing; after resume every byte arrives, in order. */
START_TEST(test_output_pause)
{
	_cleanup_free_ char *emit = tu_aux_bin("emit");
	char *argv[] = {emit, "4194304", "0", "0", NULL};
	struct exec_spec spec = spec_for(argv);
	struct run r = {0};
	ev_t *e = loop_new();
	uint64_t seen;

	spawn_ok(e, &spec, &r);
	RUN_UNTIL(e, r.bytes[1] > 0, WAIT_LONG);
	ck_assert_int_eq(exec_output_pause(r.p, true), 0);
	seen = r.bytes[1];
	for (int i = 0; i < 10; i++)
		ck_assert_int_ge(ev_run_once(e, 50 * USEC_PER_MSEC), 0);
	ck_assert_uint_eq(r.bytes[1], seen); /* nothing read while paused */
	ck_assert(exec_running(r.p));        /* the writer waits on the pipe */
	ck_assert_uint_lt(seen, 4194304);
	ck_assert_int_eq(exec_output_pause(r.p, false), 0);
	RUN_UNTIL(e, r.exits == 1, WAIT_LONG);
	ck_assert(r.res.exited);
	assert_pattern(&r.out[1], 4194304);
	run_done(&r);
	ev_free(e);
}
END_TEST

#define MANY 1000
#define MANY_IN_FLIGHT 64

struct many {
	exec_proc_t *p;
	uint64_t got, want;
	bool bad;
	bool exited_ok;
	int *in_flight, *done;
};

static void many_output(exec_proc_t *p, int stream, const void *data, size_t len, void *userdata)
{
	struct many *m = userdata;
	const uint8_t *d = data;

	for (size_t i = 0; i < len; i++)
		if (d[i] != emit_byte(m->got + i))
			m->bad = true;
	m->got += len;
}

static void many_exit(exec_proc_t *p, const struct exec_result *res, void *userdata)
{
	struct many *m = userdata;

	m->exited_ok = res->exited && res->exit_code == 0;
	m->p = exec_free(p);
	(*m->in_flight)--;
	(*m->done)++;
}

#define MANY_MAX_BYTES 190000

/* A file of the first n bytes of the emit.h stream. */
static char *pattern_file(const char *dir, size_t n)
{
	_cleanup_free_ char *data = malloc(n);
	char *path = NULL;

	ck_assert_ptr_nonnull(data);
	for (size_t i = 0; i < n; i++)
		data[i] = (char)emit_byte(i);
	ck_assert_int_gt(asprintf(&path, "%s/pattern", dir), 0);
	ck_assert_int_eq(write_file_atomic(path, data, n, 0644), 0);
	return path;
}

/* A thousand children, many at once: all reaped, every byte read, nothing leaked.
 * head(1) rather than tests/aux/emit: it starts fast in sanitizer builds too. */
START_TEST(test_many)
{
	_cleanup_free_ char *dir = tu_tmpdir("exec-many");
	_cleanup_free_ char *pattern = pattern_file(dir, MANY_MAX_BYTES);
	_cleanup_free_ struct many *m = calloc(MANY, sizeof(*m));
	int in_flight = 0, max_in_flight = 0, done = 0, started = 0, fds;
	uint64_t total = 0, want_total = 0;
	ev_t *e = loop_new();

	fds = fds_open();
	while (done < MANY) {
		while (in_flight < MANY_IN_FLIGHT && started < MANY) {
			struct many *x = &m[started];
			char size[32], *argv[] = {"/usr/bin/head", "-c", size, pattern, NULL};
			struct exec_spec spec = spec_for(argv);
			int rc;

			/* 0 .. 190 KB: none, less than and several times a pipe's worth */
			x->want = (uint64_t)started * 7919 % MANY_MAX_BYTES;
			want_total += x->want;
			snprintf(size, sizeof(size), "%llu", (unsigned long long)x->want);
			x->in_flight = &in_flight;
			x->done = &done;
			rc = exec_spawn(e, &spec, many_output, many_exit, x, &x->p, NULL);
			ck_assert_msg(rc == 0, "spawn %d: %s", started, strerror(-rc));
			started++;
			in_flight++;
		}
		max_in_flight = MAX(max_in_flight, in_flight);
		ck_assert_int_ge(ev_run_once(e, 5 * USEC_PER_SEC), 0);
	}
	for (int i = 0; i < MANY; i++) {
		ck_assert_msg(m[i].exited_ok, "child %d did not exit 0", i);
		ck_assert_msg(m[i].got == m[i].want, "child %d: %llu of %llu bytes", i,
		              (unsigned long long)m[i].got, (unsigned long long)m[i].want);
		ck_assert_msg(!m[i].bad, "child %d: wrong bytes", i);
		total += m[i].got;
	}
	ck_assert_int_eq(max_in_flight, MANY_IN_FLIGHT);
	ck_assert_uint_eq(total, want_total);
	ck_assert_int_eq(fds_open(), fds);
	assert_no_children();
	ev_free(e);
	rm_rf(dir);
}
END_TEST

/* ignore_term prints "<pid> <grandchild pid>" once both run. */
static void spawn_ignore_term(ev_t *e, struct run *r, pid_t *ret_pid, pid_t *ret_gpid)
{
	_cleanup_free_ char *bin = tu_aux_bin("ignore_term");
	char *argv[] = {bin, NULL};
	struct exec_spec spec = spec_for(argv);
	int pid, gpid;

	spawn_ok(e, &spec, r);
	RUN_UNTIL(e, r->out[1].data && strchr(r->out[1].data, '\n'), WAIT_LONG);
	ck_assert_int_eq(sscanf(r->out[1].data, "%d %d", &pid, &gpid), 2);
	ck_assert_int_eq(pid, exec_pid(r->p));
	*ret_pid = pid;
	*ret_gpid = gpid;
}

START_TEST(test_kill_ladder)
{
	struct run r = {0};
	pid_t pid, gpid;
	ev_t *e = loop_new();

	spawn_ignore_term(e, &r, &pid, &gpid);
	ck_assert_int_eq(exec_kill(r.p, 60 * USEC_PER_SEC), 0);
	/* SIGTERM is ignored by both: still there after a while */
	for (int i = 0; i < 3; i++)
		ck_assert_int_ge(ev_run_once(e, 50 * USEC_PER_MSEC), 0);
	ck_assert(exec_running(r.p));
	ck_assert_int_eq(kill(gpid, 0), 0);
	/* a second call shortens the grace; SIGKILL reaches the grandchild too */
	ck_assert_int_eq(exec_kill(r.p, 100 * USEC_PER_MSEC), 0);
	RUN_UNTIL(e, r.exits == 1, WAIT_LONG);
	ck_assert(!r.res.exited);
	ck_assert_int_eq(r.res.signal, SIGKILL);
	ck_assert(r.res.killed);
	ck_assert(pid_gone(pid));
	ck_assert(pid_gone(gpid));
	ck_assert_int_eq(exec_kill(r.p, 0), -ESRCH);
	run_done(&r);
	ev_free(e);
}
END_TEST

/* A later, longer grace must not postpone the SIGKILL (the test would time out). */
START_TEST(test_kill_no_lengthen)
{
	struct run r = {0};
	pid_t pid, gpid;
	ev_t *e = loop_new();

	spawn_ignore_term(e, &r, &pid, &gpid);
	ck_assert_int_eq(exec_kill(r.p, 100 * USEC_PER_MSEC), 0);
	ck_assert_int_eq(exec_kill(r.p, 3600 * USEC_PER_SEC), 0);
	RUN_UNTIL(e, r.exits == 1, WAIT_LONG);
	ck_assert_int_eq(r.res.signal, SIGKILL);
	ck_assert(pid_gone(gpid));
	run_done(&r);
	ev_free(e);
}
END_TEST

START_TEST(test_kill_term_and_now)
{
	char *trap[] = {"/bin/sh", "-c", "trap 'echo TERM; exit 4' TERM; echo up; sleep 30 & wait",
	                NULL};
	char *sleeper[] = {"/bin/sleep", "30", NULL};
	struct exec_spec spec = spec_for(trap);
	struct run r = {0};
	ev_t *e = loop_new();

	/* grace 0: SIGKILL straight away, no SIGTERM first */
	spawn_ok(e, &spec, &r);
	RUN_UNTIL(e, r.out[1].data && strstr(r.out[1].data, "up\n"), WAIT_LONG);
	ck_assert_int_eq(exec_kill(r.p, 0), 0);
	RUN_UNTIL(e, r.exits == 1, WAIT_LONG);
	ck_assert_int_eq(r.res.signal, SIGKILL);
	ck_assert(r.res.killed);
	ck_assert_str_eq(out_str(&r, 1), "up\n");
	run_done(&r);

	/* a program that honours SIGTERM ends on it */
	spec = spec_for(trap);
	spawn_ok(e, &spec, &r);
	RUN_UNTIL(e, r.out[1].data && strstr(r.out[1].data, "up\n"), WAIT_LONG);
	ck_assert_int_eq(exec_kill(r.p, 30 * USEC_PER_SEC), 0);
	RUN_UNTIL(e, r.exits == 1, WAIT_LONG);
	ck_assert(r.res.exited);
	ck_assert_int_eq(r.res.exit_code, 4);
	ck_assert(r.res.killed);
	ck_assert_str_eq(out_str(&r, 1), "up\nTERM\n");
	run_done(&r);

	spec = spec_for(sleeper);
	spawn_ok(e, &spec, &r);
	ck_assert_int_eq(exec_signal(r.p, 0), 0);
	ck_assert_int_eq(exec_signal(r.p, 1000), -EINVAL);
	ck_assert_int_eq(exec_signal(r.p, SIGTERM), 0);
	RUN_UNTIL(e, r.exits == 1, WAIT_LONG);
	ck_assert_int_eq(r.res.signal, SIGTERM);
	ck_assert(r.res.killed);
	ck_assert_int_eq(exec_signal(r.p, SIGTERM), -ESRCH);
	run_done(&r);
	ev_free(e);
}
END_TEST

/* The main process exits, a background grandchild still holds the pipe. */
START_TEST(test_grandchild_holds_pipe)
{
	char *bg[] = {"/bin/sh", "-c", "sleep 60 & echo $!; exit 5", NULL};
	char *escaped[] = {"/bin/sh", "-c", "setsid sleep 60 & echo $!; exit 6", NULL};
	struct exec_spec spec = spec_for(bg);
	struct run r = {0};
	int gpid;
	ev_t *e = loop_new();

	/* default: what is left of the group is killed, EOF follows */
	run_to_exit(e, &spec, &r);
	ck_assert_int_eq(r.res.exit_code, 5);
	ck_assert_int_eq(sscanf(out_str(&r, 1), "%d", &gpid), 1);
	ck_assert(pid_gone(gpid));
	run_done(&r);

	/* keep_group_on_exit: the grandchild lives, the drain window ends the wait */
	spec.keep_group_on_exit = true;
	spec.output_drain = 200 * USEC_PER_MSEC;
	run_to_exit(e, &spec, &r);
	ck_assert_int_eq(r.res.exit_code, 5);
	ck_assert_int_eq(sscanf(out_str(&r, 1), "%d", &gpid), 1);
	ck_assert_int_eq(kill(gpid, 0), 0);
	ck_assert_int_eq(kill(gpid, SIGKILL), 0);
	run_done(&r);

	/* what the group still writes after the leader's exit, within the window, is
	 * delivered before the exit callback */
	{
		char *late[] = {"/bin/sh", "-c", "(sleep 0.2; echo late) & echo early; exit 0",
		                NULL};

		spec = spec_for(late);
		spec.keep_group_on_exit = true;
		spec.output_drain = WAIT_LONG;
		run_to_exit(e, &spec, &r);
		ck_assert_str_eq(out_str(&r, 1), "early\nlate\n");
		run_done(&r);
	}

	/* a grandchild that left the group: out of reach, the drain window ends it */
	spec = spec_for(escaped);
	spec.output_drain = 200 * USEC_PER_MSEC;
	run_to_exit(e, &spec, &r);
	ck_assert_int_eq(r.res.exit_code, 6);
	ck_assert_int_eq(sscanf(out_str(&r, 1), "%d", &gpid), 1);
	ck_assert_int_eq(kill(gpid, SIGKILL), 0);
	run_done(&r);
	ev_free(e);
}
END_TEST

START_TEST(test_free_running)
{
	struct run r = {0};
	pid_t pid, gpid;
	ev_t *e = loop_new();
	int fds = fds_open();

	spawn_ignore_term(e, &r, &pid, &gpid);
	r.p = exec_free(r.p);
	ck_assert(pid_gone(pid));
	ck_assert(pid_gone(gpid));
	ck_assert_int_eq(fds_open(), fds);
	assert_no_children();
	for (int i = 0; i < 3; i++)
		ck_assert_int_ge(ev_run_once(e, 20 * USEC_PER_MSEC), 0);
	ck_assert_int_eq(r.exits, 0);
	run_done(&r);
	ev_free(e);
}
END_TEST

/* exec_free() from inside on_output and on_exit. */
START_TEST(test_free_in_callbacks)
{
	_cleanup_free_ char *emit = tu_aux_bin("emit");
	char *argv[] = {emit, "1000000", NULL};
	struct exec_spec spec = spec_for(argv);
	struct run r = {.free_in_output = true};
	int fds;
	ev_t *e = loop_new();

	fds = fds_open();
	spawn_ok(e, &spec, &r);
	RUN_UNTIL(e, r.p == NULL, WAIT_LONG);
	for (int i = 0; i < 3; i++)
		ck_assert_int_ge(ev_run_once(e, 20 * USEC_PER_MSEC), 0);
	ck_assert_int_eq(r.exits, 0);
	ck_assert_int_eq(fds_open(), fds);
	assert_no_children();
	run_done(&r);

	r = (struct run){.free_in_exit = true};
	run_to_exit(e, &spec, &r);
	ck_assert_ptr_null(r.p);
	ck_assert_uint_eq(r.out[1].len, 1000000);
	ck_assert_int_eq(fds_open(), fds);
	run_done(&r);
	ev_free(e);
}
END_TEST

/* A child that writes faster than we read gets at most a bounded share of each
 * loop iteration: its pipe (made 1 MiB big) is full, yet one iteration reads less
 * than half of it, and the rest comes in later iterations, byte-exact. */
START_TEST(test_noisy_child)
{
	_cleanup_free_ char *emit = tu_aux_bin("emit");
	char *argv[] = {emit, "8388608", "0", "0", "1048576", NULL};
	struct exec_spec spec = spec_for(argv);
	struct run r = {0};
	uint64_t before;
	int iterations = 0;
	ev_t *e = loop_new();

	spawn_ok(e, &spec, &r);
	tu_sleep(300 * USEC_PER_MSEC); /* let it fill the pipe */
	while (r.exits == 0) {
		before = r.bytes[1];
		ck_assert_int_ge(ev_run_once(e, 100 * USEC_PER_MSEC), 0);
		ck_assert_msg(r.bytes[1] - before <= 512 * 1024, "%llu bytes in one iteration",
		              (unsigned long long)(r.bytes[1] - before));
		ck_assert_int_lt(++iterations, 100000);
	}
	ck_assert_msg(r.res.exited && r.res.exit_code == 0, "emit: %s", out_str(&r, 1));
	assert_pattern(&r.out[1], 8388608);
	run_done(&r);
	ev_free(e);
}
END_TEST

/* A loop that reaps every child (the daemon's, a subreaper's): children are
 * watched by pid, each holds one fd (its pipe) instead of two, their
 * statuses come all the same, and one given up while it runs (exec_free) is
 * reaped when it dies, quietly (not counted as an orphan). */
#define BY_PID 20
START_TEST(test_watched_by_pid)
{
	char *sleeper[] = {"/bin/sleep", "30", NULL};
	char *exit7[] = {"/bin/sh", "-c", "exit 7", NULL};
	struct exec_spec spec = spec_for(sleeper);
	struct run r[BY_PID], x = {0};
	ev_t *e = loop_new();
	int fds;

	memset(r, 0, sizeof(r));
	ck_assert_int_eq(ev_set_reap_orphans(e, true), 0);
	ck_assert(ev_reaps_children(e));
	ck_assert_uint_eq(exec_fds_per_run(e, false), 1);
	spawn_ok(e, &spec, &r[0]); /* the spawns' own fds open with the first */
	fds = fd_count() - 1;      /* all but its pipe */
	for (int i = 1; i < BY_PID; i++)
		spawn_ok(e, &spec, &r[i]);
	ck_assert_int_eq(fd_count() - fds, BY_PID);
	spec = spec_for(exit7);
	run_to_exit(e, &spec, &x);
	ck_assert(x.res.exited);
	ck_assert_int_eq(x.res.exit_code, 7);
	run_done(&x);
	for (int i = 0; i < BY_PID; i++)
		r[i].p = exec_free(r[i].p);
	ck_assert_int_le(fd_count(), fds);
	for (usec_t end = time_mono() + WAIT_LONG; !tu_no_children();) {
		ck_assert_msg(time_mono() < end, "the children given up were not reaped");
		ck_assert_int_ge(ev_run_once(e, 100 * USEC_PER_MSEC), 0);
	}
	ck_assert_uint_eq(ev_orphans_reaped(e), 0);
	for (int i = 0; i < BY_PID; i++) {
		ck_assert_int_eq(r[i].exits, 0);
		run_done(&r[i]);
	}
	ev_free(e);
}
END_TEST

static TCase *tcase_new(Suite *s, const char *name)
{
	TCase *tc = tcase_create(name);

	tcase_set_timeout(tc, 120);
	suite_add_tcase(s, tc);
	return tc;
}

static Suite *exec_suite(void)
{
	Suite *s = suite_create("exec");
	TCase *tc;

	tc = tcase_new(s, "env");
	tcase_add_test(tc, test_env_build);
	tcase_add_test(tc, test_env_child);
	tc = tcase_new(s, "setup");
	tcase_add_test(tc, test_child_setup);
	tcase_add_test(tc, test_signals_changed);
	tcase_add_test(tc, test_set_ids);
	tcase_add_test(tc, test_spawn_errors);
	tcase_add_test(tc, test_signals_reset_set);
	tcase_add_test(tc, test_child_small_fd_table);
	tcase_add_test(tc, test_spawn_fds_kept_while_low);
	tc = tcase_new(s, "output");
	tcase_add_test(tc, test_exit_status);
	tcase_add_test(tc, test_output_order);
	tcase_add_test(tc, test_big_output);
	tcase_add_test(tc, test_output_pause);
	tcase_add_test(tc, test_noisy_child);
	tc = tcase_new(s, "many");
	tcase_add_test(tc, test_many);
	tc = tcase_new(s, "bypid");
	tcase_add_test(tc, test_watched_by_pid);
	tc = tcase_new(s, "kill");
	tcase_add_test(tc, test_kill_ladder);
	tcase_add_test(tc, test_kill_no_lengthen);
	tcase_add_test(tc, test_kill_term_and_now);
	tc = tcase_new(s, "lifetime");
	tcase_add_test(tc, test_grandchild_holds_pipe);
	tcase_add_test(tc, test_free_running);
	tcase_add_test(tc, test_free_in_callbacks);
	return s;
}

int main(void)
{
	return tu_run(exec_suite());
}
