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
#include <inttypes.h>
#include <linux/capability.h>
#include <linux/close_range.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif

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

#ifndef CLOSE_RANGE_UNSHARE
#define CLOSE_RANGE_UNSHARE (1U << 1)
#endif

#define ALL_SIGNALS UINT64_MAX
#define SIG_BIT(sig) (UINT64_C(1) << ((sig)-1))
/* The child's fds at their low numbers: stdin, stdout, stderr, cgroup.procs. */
#define N_SLOTS 4
/* Slots below this stay open between runs: a child's copy of fewer entries
 * costs less than closing and taking the spawn's six fds again. */
#define SLOTS_KEEP_END 64

static enum exec_clone_mode clone_mode = EXEC_CLONE_VFORK;
static bool legacy_child;

void exec_set_clone_mode(enum exec_clone_mode mode)
{
	clone_mode = mode;
}

void exec_set_legacy_child(bool on)
{
	legacy_child = on;
}

/* Process-wide spawn state, set up by the first spawn: /dev/null (every
 * child's default stdin, and what the slots hold between spawns), the slots,
 * and /proc/self/status kept open to learn the signal dispositions with one
 * pread.  Spawns from two threads at once take turns on the slots. */
static struct {
	pthread_mutex_t lock;
	int null_fd;
	int slots[N_SLOTS];
	int slots_end; /* one above the highest slot */
	int status_fd;
	uint64_t sig_reset; /* signals_to_reset()'s answer, while sig_known */
	bool sig_known;
} spawn = {
    .lock = PTHREAD_MUTEX_INITIALIZER, .null_fd = -1, .slots = {-1, -1, -1, -1}, .status_fd = -1};

/* The slots are taken as low as the fd table allows at that time, and kept
 * while they sit low (exec_child_idle()): a child sharing our fd table until
 * its first system call keeps a copy of the fds below slots_end only, however
 * many fds the daemon holds (a pidfd and a pipe per run). */
static void spawn_init(void)
{
	spawn.null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC | O_NOCTTY);
	if (spawn.null_fd < 0)
		return;
	for (int i = 0; i < N_SLOTS; i++) {
		spawn.slots[i] = fcntl(spawn.null_fd, F_DUPFD_CLOEXEC, 3);
		if (spawn.slots[i] < 0) {
			spawn.slots_end = 0;
			return;
		}
		spawn.slots_end = MAX(spawn.slots_end, spawn.slots[i] + 1);
	}
	spawn.status_fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
}

static void spawn_release_locked(void)
{
	spawn.null_fd = safe_close(spawn.null_fd);
	for (int i = 0; i < N_SLOTS; i++)
		spawn.slots[i] = safe_close(spawn.slots[i]);
	spawn.slots_end = 0;
	spawn.status_fd = safe_close(spawn.status_fd);
}

void exec_child_release(void)
{
	pthread_mutex_lock(&spawn.lock);
	spawn_release_locked();
	pthread_mutex_unlock(&spawn.lock);
}

void exec_child_idle(void)
{
	pthread_mutex_lock(&spawn.lock);
	if (spawn.slots_end > SLOTS_KEEP_END)
		spawn_release_locked();
	pthread_mutex_unlock(&spawn.lock);
}

/* The hex mask after "key:\t" in a /proc status text, or ALL_SIGNALS. */
static uint64_t status_mask(const char *text, const char *key)
{
	const char *p = strstr(text, key);
	char *end;
	uint64_t v;

	if (!p)
		return ALL_SIGNALS;
	errno = 0;
	v = strtoull(p + strlen(key), &end, 16);
	return errno || end == p + strlen(key) ? ALL_SIGNALS : v;
}

/* Which signals the child must set to SIG_DFL: the ignored ones (an ignored
 * disposition survives execve) and the caught ones (execve resets those, but
 * the child must not run a handler of ours on our memory before it gets
 * there).  One pread of /proc/self/status instead of 64 sigaction() calls,
 * at the first spawn and after exec_signals_changed(); when that cannot be
 * had, all of them. */
static uint64_t signals_to_reset(void)
{
	char buf[4096];
	ssize_t n;

	if (legacy_child)
		return ALL_SIGNALS;
	if (spawn.sig_known)
		return spawn.sig_reset;
	if (spawn.status_fd < 0)
		return ALL_SIGNALS;
	n = pread(spawn.status_fd, buf, sizeof(buf) - 1, 0);
	if (n <= 0)
		return ALL_SIGNALS;
	buf[n] = '\0';
	spawn.sig_reset = status_mask(buf, "\nSigIgn:\t") | status_mask(buf, "\nSigCgt:\t");
	spawn.sig_known = true;
	return spawn.sig_reset;
}

void exec_signals_changed(void)
{
	pthread_mutex_lock(&spawn.lock);
	spawn.sig_known = false;
	pthread_mutex_unlock(&spawn.lock);
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
uint64_t exec_child_signals_to_reset(void)
{
	uint64_t v;

	pthread_mutex_lock(&spawn.lock);
	if (spawn.null_fd < 0)
		spawn_init();
	spawn.sig_known = false; /* a fresh look */
	v = signals_to_reset();
	pthread_mutex_unlock(&spawn.lock);
	return v;
}

CHILD_FN __attribute__((noreturn)) static void child_fail(struct exec_child_args *a,
                                                          enum exec_step step)
{
	struct exec_child_report rep = {.err = errno ? errno : EIO, .step = (int32_t)step};

	/* Sharing our memory, the report is just written there: we read it when
	 * the clone returns, i.e. after this child's death. */
	if (a->err_fd < 0)
		a->report = rep;
	else
		(void)!syscall(SYS_write, a->err_fd, &rep, sizeof(rep));
	for (;;)
		syscall(SYS_exit_group, 127);
}

CHILD_FN static int child_reset_signals(uint64_t which)
{
	struct kernel_sigaction dfl = {.handler = SIG_DFL};

	for (int sig = 1; sig < _NSIG && sig <= 64; sig++) {
		if (sig == SIGKILL || sig == SIGSTOP || !(which & SIG_BIT(sig)))
			continue;
		if (syscall(SYS_rt_sigaction, sig, &dfl, NULL, KERNEL_SIGSET_SIZE) < 0)
			return -1;
	}
	return 0;
}

/* Our own copy of the fd table, before anything else touches an fd.  Cloned
 * with CLONE_FILES, we share the daemon's table: close_range() with
 * CLOSE_RANGE_UNSHARE over everything from files_below up copies only the fds
 * below it (Linux 5.9), where our fds were put; the daemon's thousands of
 * pidfds and pipes are neither copied now nor closed again by the execve. */
CHILD_FN static int child_unshare_files(const struct exec_child_args *a)
{
	if (a->files_below <= 0)
		return 0; /* not shared: the clone copied the table */
	if (syscall(SYS_close_range, (unsigned)a->files_below, ~0U, CLOSE_RANGE_UNSHARE) == 0)
		return 0;
	/* Before Linux 5.9: a copy of the whole table (the cost we avoid). */
	return syscall(SYS_unshare, CLONE_FILES) == 0 ? 0 : -1;
}

/* Any of our fds below 3 would be overwritten by the dup2()s: move it up first. */
CHILD_FN static int child_move_up(int *fd)
{
	long r;

	if (*fd < 0 || *fd >= 3)
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
CHILD_FN static void child_set_ids(struct exec_child_args *a)
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
CHILD_FN static void child_drop_caps(struct exec_child_args *a)
{
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct none[_LINUX_CAPABILITY_U32S_3] = {{0}};

	if (syscall(SYS_capset, &h, none) < 0)
		child_fail(a, EXEC_STEP_CAPSET);
}

/* After the id change: changing credentials clears the parent-death signal. */
CHILD_FN static void child_set_pdeathsig(struct exec_child_args *a)
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
	if (child_unshare_files(a) < 0)
		child_fail(a, EXEC_STEP_CLOSE_RANGE);
	if (child_reset_signals(a->sig_reset) < 0)
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
	int flags = CLONE_VM | CLONE_VFORK | (pidfd ? CLONE_PIDFD : 0) | SIGCHLD;

	if (a->files_below > 0)
		flags |= CLONE_FILES;
	return clone(child_main, stack + sizeof(stack), flags, a, pidfd);
}

static pid_t clone_fork(struct exec_child_args *a, int *pidfd)
{
	struct clone_args ca = {
	    .flags = pidfd ? CLONE_PIDFD : 0,
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

/* Does the child really share our memory (and so may share our fd table and
 * write its report into our memory)?  Not in the fork-like mode, and not under
 * valgrind, which runs a vfork as a fork and refuses CLONE_FILES with it. */
static bool shares_memory(void)
{
	return clone_mode == EXEC_CLONE_VFORK && !RUNNING_ON_VALGRIND;
}

/* fd into slot i (the caller holds spawn.lock): the same file, CLOEXEC, at a
 * low number.  *used gets bit i. */
static int slot_put(int *fd, int i, unsigned *used)
{
	if (dup3(*fd, spawn.slots[i], O_CLOEXEC) < 0)
		return -errno;
	*fd = spawn.slots[i];
	*used |= 1u << i;
	return 0;
}

/* The child's fds into the slots; stderr merged with stdout shares its slot,
 * no stdin means /dev/null itself.  Returns the slots used (bits), or -errno. */
static int slots_fill(struct exec_child_args *a, unsigned *used)
{
	bool merged = a->fds[2] == a->fds[1];
	int r = 0;

	if (a->fds[0] < 0)
		a->fds[0] = spawn.null_fd;
	else
		r = slot_put(&a->fds[0], 0, used);
	if (r >= 0)
		r = slot_put(&a->fds[1], 1, used);
	if (r >= 0 && merged)
		a->fds[2] = a->fds[1];
	else if (r >= 0)
		r = slot_put(&a->fds[2], 2, used);
	if (r >= 0 && a->cgroup_procs_fd >= 0)
		r = slot_put(&a->cgroup_procs_fd, 3, used);
	return r;
}

/* Back to /dev/null, so the child's pipe ends are not kept open by us. */
static void slots_clear(unsigned used)
{
	for (int i = 0; i < N_SLOTS; i++)
		if (used & (1u << i))
			(void)dup3(spawn.null_fd, spawn.slots[i], O_CLOEXEC);
}

/* Without shared memory the report comes through a CLOEXEC pipe: EOF once the
 * execve happened, or {errno, step}. */
static void read_report(int fd, struct exec_child_report *rep)
{
	ssize_t n;

	do
		n = read(fd, rep, sizeof(*rep));
	while (n < 0 && errno == EINTR);
	if (n == 0)
		*rep = (struct exec_child_report){0};
	else if (n != (ssize_t)sizeof(*rep) || rep->err <= 0)
		*rep = (struct exec_child_report){.err = n < 0 ? errno : EIO,
		                                  .step = EXEC_STEP_EXECVE};
}

static pid_t clone_blocked(struct exec_child_args *a, int *pidfd)
{
	uint64_t all = ~UINT64_C(0), saved;
	int saved_errno;
	pid_t pid;

	/* Raw, like glibc's posix_spawn: pthread_sigmask() would leave glibc's own
	 * two internal signals unblocked. */
	if (syscall(SYS_rt_sigprocmask, SIG_SETMASK, &all, &saved, KERNEL_SIGSET_SIZE) < 0)
		return -errno;
	pid = clone_mode == EXEC_CLONE_FORK ? clone_fork(a, pidfd) : clone_vfork(a, pidfd);
	saved_errno = errno;
	syscall(SYS_rt_sigprocmask, SIG_SETMASK, &saved, NULL, KERNEL_SIGSET_SIZE);
	return pid < 0 ? -saved_errno : pid;
}

/* With the report pipe (no shared memory): start, then wait for EOF or the
 * report. */
static pid_t start_piped(struct exec_child_args *a, int *pidfd)
{
	int report[2];
	pid_t pid;

	if (a->fds[0] < 0)
		a->fds[0] = spawn.null_fd;
	if (pipe2(report, O_CLOEXEC) < 0)
		return -errno;
	a->err_fd = report[1];
	pid = clone_blocked(a, pidfd);
	close(report[1]);
	if (pid >= 0)
		read_report(report[0], &a->report);
	close(report[0]);
	return pid;
}

/* Sharing memory and, from the clone to the child's first system call, the fd
 * table: the child's fds go into the slots for the clone. */
static pid_t start_shared(struct exec_child_args *a, int *pidfd)
{
	unsigned used = 0;
	pid_t pid;

	if (!legacy_child && spawn.slots_end > 0) {
		int r = slots_fill(a, &used);

		if (r < 0) {
			/* A bad fd given for the child: what the child's dup would say. */
			slots_clear(used);
			a->report = (struct exec_child_report){.err = -r, .step = EXEC_STEP_DUP};
			return r;
		}
		a->files_below = spawn.slots_end;
	} else if (a->fds[0] < 0)
		a->fds[0] = spawn.null_fd;
	pid = clone_blocked(a, pidfd);
	slots_clear(used);
	return pid;
}

pid_t exec_child_start(const struct exec_child_args *args, int *ret_pidfd,
                       struct exec_child_report *ret_report)
{
	struct exec_child_args a = *args; /* the child edits its fd numbers */
	int pidfd = -1;
	pid_t pid;

	pthread_mutex_lock(&spawn.lock);
	if (spawn.null_fd < 0)
		spawn_init();
	if (spawn.null_fd < 0) {
		int r = -errno;

		pthread_mutex_unlock(&spawn.lock);
		return r;
	}
	a.err_fd = -1;
	a.files_below = 0;
	a.report = (struct exec_child_report){0};
	a.sig_reset = signals_to_reset();
	if (shares_memory() && !legacy_child)
		pid = start_shared(&a, ret_pidfd ? &pidfd : NULL);
	else
		pid = start_piped(&a, ret_pidfd ? &pidfd : NULL);
	pthread_mutex_unlock(&spawn.lock);
	*ret_report = a.report;
	if (pid < 0)
		return pid;
	if (ret_pidfd)
		*ret_pidfd = pidfd;
	return pid;
}
