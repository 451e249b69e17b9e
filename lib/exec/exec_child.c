/* The child side of exec_spawn(): from the clone to the execve.
 *
 * By default the child shares the parent's memory (CLONE_VM|CLONE_VFORK, like
 * posix_spawn) and runs on a private stack while the parent thread is suspended.
 * Everything it does is therefore a raw system call: no libc wrapper that keeps
 * state (errno aside, which the suspended parent does not look at), no allocation,
 * no sanitizer interceptor (ASan's _exit() would run a leak check in here, its
 * sigaction() ignores some signals), and none of glibc's set*id() broadcast to the
 * parent's other threads.  All signals are blocked around the clone and the child
 * sets every disposition to SIG_DFL before unblocking, so no parent signal handler
 * can ever run on the shared memory. */
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/close_range.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "exec/exec-int.h"
#include "util/macro.h"

/* 32-bit ABIs where the plain calls still take 16-bit ids. */
#ifdef SYS_setgroups32
#define SYS_SETGROUPS SYS_setgroups32
#define SYS_SETRESGID SYS_setresgid32
#define SYS_SETRESUID SYS_setresuid32
#else
#define SYS_SETGROUPS SYS_setgroups
#define SYS_SETRESGID SYS_setresgid
#define SYS_SETRESUID SYS_setresuid
#endif

#define KERNEL_SIGSET_SIZE 8 /* sizeof(kernel sigset_t): _NSIG / 8 */

/* The kernel's struct sigaction for rt_sigaction(): SIG_DFL needs no restorer. */
struct kernel_sigaction {
	void (*handler)(int);
	unsigned long flags;
	void (*restorer)(void);
	uint64_t mask;
};

/* Big enough for the raw calls below, also with sanitizer instrumentation. */
#define CHILD_STACK_SIZE (32 * 1024)

static enum exec_clone_mode clone_mode = EXEC_CLONE_VFORK;

void exec_set_clone_mode(enum exec_clone_mode mode)
{
	clone_mode = mode;
}

const char *exec_step_name(int step)
{
	static const char *const names[_EXEC_STEP_MAX] = {
	    [EXEC_STEP_SIGACTION] = "sigaction",
	    [EXEC_STEP_SETSID] = "setsid",
	    [EXEC_STEP_DUP] = "dup",
	    [EXEC_STEP_CLOSE_RANGE] = "close_range",
	    [EXEC_STEP_CHDIR] = "chdir",
	    [EXEC_STEP_SETRLIMIT] = "setrlimit",
	    [EXEC_STEP_SETGROUPS] = "setgroups",
	    [EXEC_STEP_SETGID] = "setgid",
	    [EXEC_STEP_SETUID] = "setuid",
	    [EXEC_STEP_CAPSET] = "capset",
	    [EXEC_STEP_NO_NEW_PRIVS] = "no_new_privs",
	    [EXEC_STEP_PDEATHSIG] = "pdeathsig",
	    [EXEC_STEP_SIGPROCMASK] = "sigprocmask",
	    [EXEC_STEP_EXECVE] = "execve",
	    [EXEC_STEP_CGROUP] = "cgroup",
	};

	return step >= 0 && step < _EXEC_STEP_MAX ? names[step] : "unknown";
}

#define CHILD_FN __attribute__((no_sanitize_address, noinline))

/* Report the failed step to the parent and die; the parent reaps us. */
CHILD_FN __attribute__((noreturn)) static void child_fail(const struct exec_child_args *a,
                                                          enum exec_step step)
{
	struct exec_child_report rep = {.err = errno ? errno : EIO, .step = (int32_t)step};

	(void)!syscall(SYS_write, a->err_fd, &rep, sizeof(rep));
	for (;;)
		syscall(SYS_exit_group, 127);
}

CHILD_FN static int child_reset_signals(void)
{
	struct kernel_sigaction dfl = {.handler = SIG_DFL};

	for (int sig = 1; sig < _NSIG; sig++) {
		if (sig == SIGKILL || sig == SIGSTOP)
			continue;
		if (syscall(SYS_rt_sigaction, sig, &dfl, NULL, KERNEL_SIGSET_SIZE) < 0)
			return -1;
	}
	return 0;
}

/* Any of our fds below 3 would be overwritten by the dup2()s: move it up first. */
CHILD_FN static int child_move_up(int *fd)
{
	long r;

	if (*fd >= 3)
		return 0;
	r = syscall(SYS_fcntl, *fd, F_DUPFD_CLOEXEC, 3);
	if (r < 0)
		return -1;
	*fd = (int)r;
	return 0;
}

/* 0, 1, 2 from the prepared fds; every other fd (the error pipe included) is
 * CLOEXEC afterwards, so the execve closes them all. */
CHILD_FN static int child_setup_fds(struct exec_child_args *a)
{
	if (child_move_up(&a->err_fd) < 0)
		return -1;
	for (int i = 0; i < 3; i++)
		if (child_move_up(&a->fds[i]) < 0)
			return -1;
	for (int i = 0; i < 3; i++)
		if (syscall(SYS_dup3, a->fds[i], i, 0) < 0)
			return -1;
	return 0;
}

CHILD_FN static int child_close_others(void)
{
	uint64_t nofile[2];

	if (syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC) == 0)
		return 0;
	/* Before Linux 5.11: mark them one by one. */
	if (syscall(SYS_prlimit64, 0, RLIMIT_NOFILE, NULL, nofile) < 0)
		return -1;
	for (uint64_t fd = 3; fd < nofile[0] && fd < INT32_MAX; fd++)
		syscall(SYS_fcntl, (int)fd, F_SETFD, FD_CLOEXEC);
	return 0;
}

CHILD_FN static int child_set_rlimits(const struct exec_child_args *a)
{
	for (size_t i = 0; i < a->n_rlimits; i++) {
		uint64_t lim[2] = {a->rlimits[i].cur, a->rlimits[i].max};

		if (syscall(SYS_prlimit64, 0, a->rlimits[i].resource, lim, NULL) < 0)
			return -1;
	}
	return 0;
}

/* Groups first, then gid, then uid: each later step needs the privilege the
 * previous one has not yet dropped. */
CHILD_FN static void child_set_ids(const struct exec_child_args *a)
{
	gid_t groups[1] = {a->gid};

	if (syscall(SYS_SETGROUPS, 1, groups) < 0)
		child_fail(a, EXEC_STEP_SETGROUPS);
	if (syscall(SYS_SETRESGID, a->gid, a->gid, a->gid) < 0)
		child_fail(a, EXEC_STEP_SETGID);
	if (syscall(SYS_SETRESUID, a->uid, a->uid, a->uid) < 0)
		child_fail(a, EXEC_STEP_SETUID);
}

/* A daemon given capabilities as ambient ones (the shipped units, to drop
 * runs to their user) keeps them across a setresuid between two non-root
 * users, and would hand them on: the ambient set through any execve, the
 * inheritable one through a program with file capabilities.  A run could then
 * setuid back to the daemon's user.  Emptied here (the ambient set follows the
 * permitted one), a run of an unprivileged user starts with none; one of uid 0
 * gets root's again from the execve.  Lowering never fails for want of
 * privilege; a seccomp filter that forbids capset fails the run. */
CHILD_FN static void child_drop_caps(const struct exec_child_args *a)
{
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct none[_LINUX_CAPABILITY_U32S_3] = {{0}};

	if (syscall(SYS_capset, &h, none) < 0)
		child_fail(a, EXEC_STEP_CAPSET);
}

/* After the id change: changing credentials clears the parent-death signal. */
CHILD_FN static void child_set_pdeathsig(const struct exec_child_args *a)
{
	if (syscall(SYS_prctl, PR_SET_PDEATHSIG, (unsigned long)a->pdeathsig, 0UL, 0UL, 0UL) < 0)
		child_fail(a, EXEC_STEP_PDEATHSIG);
	/* The parent may have died before the prctl(): then nobody would send it. */
	if (syscall(SYS_getppid) != a->parent) {
		syscall(SYS_kill, syscall(SYS_getpid), a->pdeathsig);
		for (;;)
			syscall(SYS_exit_group, 127);
	}
}

CHILD_FN __attribute__((noreturn)) static int child_main(void *arg)
{
	struct exec_child_args *a = arg;
	uint64_t empty = 0;

	errno = 0;
	if (child_reset_signals() < 0)
		child_fail(a, EXEC_STEP_SIGACTION);
	/* Into the run's cgroup before anything else ("0" = the writer); the fd
	 * was opened by the daemon, so its credentials decide. */
	if (a->cgroup_procs_fd >= 0 && syscall(SYS_write, a->cgroup_procs_fd, "0", 1) != 1)
		child_fail(a, EXEC_STEP_CGROUP);
	if (syscall(SYS_setsid) < 0)
		child_fail(a, EXEC_STEP_SETSID);
	if (child_setup_fds(a) < 0)
		child_fail(a, EXEC_STEP_DUP);
	if (child_close_others() < 0)
		child_fail(a, EXEC_STEP_CLOSE_RANGE);
	if (a->cwd && syscall(SYS_chdir, a->cwd) < 0)
		child_fail(a, EXEC_STEP_CHDIR);
	if (child_set_rlimits(a) < 0)
		child_fail(a, EXEC_STEP_SETRLIMIT);
	if (a->set_ids)
		child_set_ids(a);
	child_drop_caps(a);
	if (syscall(SYS_prctl, PR_SET_NO_NEW_PRIVS, 1UL, 0UL, 0UL, 0UL) < 0)
		child_fail(a, EXEC_STEP_NO_NEW_PRIVS);
	child_set_pdeathsig(a);
	if (syscall(SYS_rt_sigprocmask, SIG_SETMASK, &empty, NULL, KERNEL_SIGSET_SIZE) < 0)
		child_fail(a, EXEC_STEP_SIGPROCMASK);
	syscall(SYS_execve, a->path, a->argv, a->envp);
	child_fail(a, EXEC_STEP_EXECVE);
}

static pid_t clone_vfork(struct exec_child_args *a, int *pidfd)
{
	/* The child runs here while this thread is suspended (musl's posix_spawn
	 * does the same); under valgrind, which turns this into a fork, it is a
	 * copy. */
	_Alignas(16) char stack[CHILD_STACK_SIZE];

	return clone(child_main, stack + sizeof(stack),
	             CLONE_VM | CLONE_VFORK | CLONE_PIDFD | SIGCHLD, a, pidfd);
}

static pid_t clone_fork(struct exec_child_args *a, int *pidfd)
{
	struct clone_args ca = {
	    .flags = CLONE_PIDFD,
	    .pidfd = (uint64_t)(uintptr_t)pidfd,
	    .exit_signal = SIGCHLD,
	};
	long pid;

	/* clone3 can start the child in its cgroup (Linux 5.7+), no write needed */
	if (a->cgroup_fd >= 0) {
		ca.flags |= CLONE_INTO_CGROUP;
		ca.cgroup = (uint64_t)a->cgroup_fd;
		a->cgroup_procs_fd = -1;
	}
	pid = syscall(SYS_clone3, &ca, sizeof(ca));

	if (pid == 0)
		child_main(a);
	return (pid_t)pid;
}

pid_t exec_child_start(const struct exec_child_args *args, int *ret_pidfd)
{
	struct exec_child_args a = *args; /* the child edits its fd numbers */
	uint64_t all = ~UINT64_C(0), saved;
	int pidfd = -1, saved_errno;
	pid_t pid;

	/* Raw, like glibc's posix_spawn: pthread_sigmask() would leave glibc's own
	 * two internal signals unblocked. */
	if (syscall(SYS_rt_sigprocmask, SIG_SETMASK, &all, &saved, KERNEL_SIGSET_SIZE) < 0)
		return -errno;
	pid = clone_mode == EXEC_CLONE_FORK ? clone_fork(&a, &pidfd) : clone_vfork(&a, &pidfd);
	saved_errno = errno;
	syscall(SYS_rt_sigprocmask, SIG_SETMASK, &saved, NULL, KERNEL_SIGSET_SIZE);
	if (pid < 0)
		return -saved_errno;
	*ret_pidfd = pidfd;
	return pid;
}
