/* Spawning a run's process and watching it on the loop.
 *
 * The child: a new session (its own process group), default signal dispositions,
 * an empty signal mask, stdin from the given fd (or /dev/null), stdout+stderr into
 * one pipe (arrival order kept) or two, no other inherited fd, exactly the
 * environment given, a working directory, optional uid/gid drop, rlimits,
 * PR_SET_NO_NEW_PRIVS, PR_SET_PDEATHSIG.
 *
 * The exit callback runs exactly once, after the process has exited AND its
 * output has been read to EOF (or the output drain window after exit expired:
 * a daemonized grandchild must not hold a run open forever). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/resource.h>
#include <sys/types.h>

#include "ev/ev.h"

typedef struct exec_proc exec_proc_t;

struct exec_rlimit {
	int resource; /* RLIMIT_* */
	struct rlimit lim;
};

struct exec_spec {
	const char *path;  /* absolute, or relative to cwd; no PATH search */
	char *const *argv; /* argv[0] included */
	char *const *envp; /* the child's whole environment (see exec_env_build) */
	const char *cwd;   /* NULL = inherit */
	int stdin_fd;      /* -1 = /dev/null; duplicated, not taken */
	bool split_stderr; /* false: stderr shares stdout's pipe */
	bool set_ids;      /* drop to uid/gid (and supplementary groups = {gid}) */
	uid_t uid;
	gid_t gid;
	const struct exec_rlimit *rlimits;
	size_t n_rlimits;
	int pdeathsig; /* 0 = SIGKILL */
	/* After the main process exits: SIGKILL what is left of its process group
	 * (default true; false leaves stragglers alone). */
	bool keep_group_on_exit;
	usec_t output_drain; /* after exit, wait at most this for EOF; 0 = 1 s */
	/* A cgroup v2 directory (lib/exec/cgroup.h) or NULL.  The child starts in
	 * it, and every SIGKILL of the ladder (and the one after the main process
	 * exits, unless keep_group_on_exit) is also a cgroup.kill there, so what
	 * left the process group dies too. */
	const char *cgroup;
	/* exec_free() of a process still running: SIGKILL, then reap it on this
	 * pool's helper thread instead of blocking the loop; NULL = synchronously. */
	struct offload *offload;
};

struct exec_result {
	bool exited; /* true: exit_code valid; false: signal valid */
	int exit_code;
	int signal;
	bool core_dumped;
	bool killed;     /* the kill ladder (or exec_signal) was used on it */
	usec_t duration; /* spawn to exit, monotonic */
};

/* stream: 1 = stdout (or merged), 2 = stderr when split_stderr. */
typedef void (*exec_output_cb)(exec_proc_t *p, int stream, const void *data, size_t len,
                               void *userdata);
typedef void (*exec_exit_cb)(exec_proc_t *p, const struct exec_result *res, void *userdata);

/* Start it.  On failure to start (missing binary, permission, chdir, setuid...)
 * returns -errno and, when ret_step is given, the name of the step that failed
 * ("execve", "chdir", "setgid", ...); no process is left behind. */
int exec_spawn(ev_t *e, const struct exec_spec *spec, exec_output_cb on_output,
               exec_exit_cb on_exit, void *userdata, exec_proc_t **ret, const char **ret_step);

pid_t exec_pid(const exec_proc_t *p);
bool exec_running(const exec_proc_t *p); /* not yet reaped */

/* The kill ladder: SIGTERM to the whole process group now, SIGKILL to the group
 * (and cgroup.kill of spec.cgroup) after grace.  Calling again may only shorten the grace.  grace 0
 * = SIGKILL now. */
int exec_kill(exec_proc_t *p, usec_t grace);
/* Stop (true) or resume (false) reading the output pipes: backpressure for a
 * consumer that is behind.  After the process exits, the output drain window
 * still applies. */
int exec_output_pause(exec_proc_t *p, bool pause);
/* One signal to the whole process group. */
int exec_signal(exec_proc_t *p, int sig);

/* Frees everything.  A process still running is SIGKILLed with its group (and
 * its cgroup) and reaped: on spec.offload's helper thread when given (the loop
 * never waits for a child stuck in uninterruptible sleep), else synchronously.
 * No callback runs after this.  NULL-safe. */
exec_proc_t *exec_free(exec_proc_t *p);

/* Variables never passed to a child whatever the allowlist says. */
bool exec_env_forbidden(const char *name);
/* Build a child environment: the variables of `from` (NULL = environ) whose names
 * are in allow (NULL = the default allowlist: PATH LANG LANGUAGE LC_* TZ HOME USER
 * LOGNAME SHELL TMPDIR TERM), minus exec_env_forbidden(), then `extra`
 * ("NAME=value", later entries win; LESSEE_* run variables are fine there, a
 * systemd protocol variable is -EPERM, an entry without '=' -EINVAL).
 * NAME=value strings, NULL-terminated; free with strv_free(). */
int exec_env_build(char *const *from, const char *const *allow, char *const *extra, char ***ret);
/* The same over a base already built (exec_env_build), without copying: a
 * NULL-terminated array of pointers into base and extra, which must outlive
 * it; free the array alone with free().  extra as above. */
int exec_env_overlay(char *const *base, char *const *extra, char ***ret);

/* The dispositions the children reset (every signal ignored or caught here)
 * are learnt at the first spawn: a program that ignores or catches a signal
 * after it has spawned says so with this, or its children may inherit an
 * ignored signal.  lessee sets its dispositions before its first run. */
void exec_signals_changed(void);

/* The fds the daemon holds for each running child: its output pipe, its
 * cgroup directory when it has one, and its pidfd unless the loop reaps every
 * child (ev_reaps_children(): then it is found by its pid). */
unsigned exec_fds_per_run(const ev_t *e, bool cgroup);
/* How many runs of per_run fds fit under limit with reserve kept: at least 1. */
unsigned exec_runs_fitting(unsigned long long limit, unsigned per_run, unsigned reserve);

/* Raise this process's RLIMIT_NOFILE soft limit to its hard limit.  The first
 * call remembers the limit the process had: children spawned from then on get
 * it back (a child that started at 1024 keeps 1024, so select() still works
 * for it), unless their spec sets RLIMIT_NOFILE itself.  ret_now: the limit
 * in force afterwards.  0, or -errno (nothing changed, ret_now still set when
 * getrlimit worked). */
int exec_nofile_raise(struct rlimit *ret_now);
