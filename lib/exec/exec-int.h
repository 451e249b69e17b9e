/* lib/exec private parts: the child side of a spawn (exec_child.c) and the knob the
 * spawn benchmark uses to compare the two ways of creating the child. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "exec/exec.h"

/* What the child needs, prepared by the parent before the clone: nothing in the
 * child allocates, everything it touches is in here (see docs/exec.md). */
/* What a child that could not get to its program reports. */
struct exec_child_report {
	int32_t err;  /* errno; 0 = the execve happened */
	int32_t step; /* enum exec_step */
};

struct exec_child_args {
	const char *path;
	char *const *argv;
	char *const *envp;
	const char *cwd;
	int fds[3];    /* become the child's 0, 1, 2 (fds[2] may equal fds[1]); -1 = /dev/null */
	int err_fd;    /* exec_child.c's: the error pipe when memory is not shared, or -1 */
	int cgroup_fd; /* the run's cgroup directory, for CLONE_INTO_CGROUP, or -1 */
	int cgroup_procs_fd; /* its cgroup.procs, where the child writes "0", or -1 */
	pid_t parent;        /* getpid() before the clone: the PR_SET_PDEATHSIG race check */
	int pdeathsig;
	uint64_t sig_reset; /* exec_child.c's: signals (bit sig-1) the child sets to SIG_DFL */
	int files_below;    /* exec_child.c's: the child keeps a copy of fds below this only */
	struct exec_child_report report; /* exec_child.c's: written by a child sharing our memory */
	bool set_ids;
	uid_t uid;
	gid_t gid;
	size_t n_rlimits;
	struct {
		int resource;
		uint64_t cur, max; /* the kernel's struct rlimit64 */
	} rlimits[RLIMIT_NLIMITS];
};

enum exec_step {
	EXEC_STEP_SIGACTION,
	EXEC_STEP_SETSID,
	EXEC_STEP_DUP,
	EXEC_STEP_CLOSE_RANGE,
	EXEC_STEP_CHDIR,
	EXEC_STEP_SETRLIMIT,
	EXEC_STEP_SETGROUPS,
	EXEC_STEP_SETGID,
	EXEC_STEP_SETUID,
	EXEC_STEP_NO_NEW_PRIVS,
	EXEC_STEP_PDEATHSIG,
	EXEC_STEP_SIGPROCMASK,
	EXEC_STEP_EXECVE,
	EXEC_STEP_CGROUP,
	EXEC_STEP_CAPSET,
	_EXEC_STEP_MAX,
};

const char *exec_step_name(int step);

enum exec_clone_mode {
	EXEC_CLONE_VFORK, /* CLONE_VM|CLONE_VFORK on a private stack: the default */
	EXEC_CLONE_FORK,  /* fork-like clone3(): copies the page tables */
};

/* Only bench/spawn.c calls this, to measure both ways in one run. */
void exec_set_clone_mode(enum exec_clone_mode mode);

/* The old child setup, for measuring against it in one run (bench/spawn,
 * bench/spawn_scale): the child copies the whole fd table and resets all 62
 * signal dispositions, and the error comes back through a pipe. */
void exec_set_legacy_child(bool on);

/* For tests: the signals (bit sig-1) a child spawned now would set to SIG_DFL. */
uint64_t exec_child_signals_to_reset(void);

/* Close the fds the spawns keep between them (/dev/null, the slots,
 * /proc/self/status).  The next spawn opens them again, as low in the fd table
 * as it then is. */
void exec_child_release(void);
/* No run process is left: exec_child_release() where the slots sit high (taken
 * while the table was full), so that the next spawn takes them low; kept
 * otherwise, for the next run. */
void exec_child_idle(void);

/* Start the child with every signal blocked in the calling thread and the parent's
 * mask restored afterwards.  Returns the pid and the pidfd (none asked for when
 * ret_pidfd is NULL), or -errno when no
 * child was created; *ret_report says whether the execve happened (err 0) or
 * which step failed (the child is then dead but not reaped; with no child, a
 * step the parent did on the child's behalf, or err 0 for the clone itself). */
pid_t exec_child_start(const struct exec_child_args *a, int *ret_pidfd,
                       struct exec_child_report *ret_report);
