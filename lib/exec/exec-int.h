/* lib/exec private parts: the child side of a spawn (exec_child.c) and the knob the
 * spawn benchmark uses to compare the two ways of creating the child. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "exec/exec.h"

/* What the child needs, prepared by the parent before the clone: nothing in the
 * child allocates, everything it touches is in here (see docs/exec.md). */
struct exec_child_args {
	const char *path;
	char *const *argv;
	char *const *envp;
	const char *cwd;
	int fds[3];          /* become the child's 0, 1, 2 (fds[2] may equal fds[1]) */
	int err_fd;          /* CLOEXEC write end of the error pipe */
	int cgroup_fd;       /* the run's cgroup directory, for CLONE_INTO_CGROUP, or -1 */
	int cgroup_procs_fd; /* its cgroup.procs, where the child writes "0", or -1 */
	pid_t parent;        /* getpid() before the clone: the PR_SET_PDEATHSIG race check */
	int pdeathsig;
	bool set_ids;
	uid_t uid;
	gid_t gid;
	size_t n_rlimits;
	struct {
		int resource;
		uint64_t cur, max; /* the kernel's struct rlimit64 */
	} rlimits[RLIMIT_NLIMITS];
};

/* What a child that could not get to its program writes to err_fd. */
struct exec_child_report {
	int32_t err;  /* errno */
	int32_t step; /* enum exec_step */
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

/* Start the child with every signal blocked in the calling thread and the parent's
 * mask restored afterwards.  Returns the pid and the pidfd, or -errno when no
 * child was created.  The caller reads err_fd's other end to learn whether the
 * execve happened. */
pid_t exec_child_start(const struct exec_child_args *a, int *ret_pidfd);
