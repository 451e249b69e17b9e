/* A run's process on the loop: spawn, output pipes, exit, the kill ladder.
 * The rules are in docs/exec.md; the child side is exec_child.c. */
#include "exec/exec.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "exec/cgroup.h"
#include "exec/exec-int.h"
#include "offload/offload.h"
#include "util/macro.h"

#ifndef PIDFD_SIGNAL_PROCESS_GROUP
#define PIDFD_SIGNAL_PROCESS_GROUP (1U << 2) /* Linux 6.9 */
#endif

#define OUTPUT_DRAIN_DEFAULT USEC_PER_SEC
/* One read; and at most this much per pipe per loop iteration, so a child that
 * writes without pause cannot starve the other watches. */
#define OUTPUT_CHUNK (64 * 1024)
#define OUTPUT_BUDGET (4 * OUTPUT_CHUNK)

enum proc_state {
	PROC_RUNNING,  /* not reaped yet */
	PROC_DRAINING, /* reaped; reading the pipes to EOF or until the drain deadline */
	PROC_DONE,     /* the exit callback ran (or is running) */
};

enum pipe_status {
	PIPE_MORE,  /* still open, nothing more to read now */
	PIPE_EOF,   /* end of output (or a read error, which ends it the same way) */
	PIPE_FREED, /* on_output called exec_free(): the proc must go, touch nothing */
};

struct exec_pipe {
	int fd; /* our read end, O_NONBLOCK */
	ev_io_t *w;
};

struct exec_proc {
	ev_t *e;
	enum proc_state state;
	pid_t pid;
	int pidfd;
	int cg_fd;                 /* spec.cgroup's directory, or -1 */
	struct exec_pipe pipes[2]; /* [0]: stdout (or both), [1]: stderr when split */
	ev_child_t *child;
	ev_timer_t *kill_timer; /* the ladder's SIGKILL */
	ev_timer_t *drain_timer;
	usec_t start;
	usec_t output_drain;
	struct offload *offload;
	bool keep_group;
	bool sigkill_sent;
	bool in_output; /* inside on_output: exec_free() must leave the memory to us */
	bool paused;    /* exec_output_pause(): the consumer is behind */
	bool freed;
	exec_output_cb on_output;
	exec_exit_cb on_exit;
	void *userdata;
	struct exec_result res;
};

pid_t exec_pid(const exec_proc_t *p)
{
	return p ? p->pid : -1;
}

bool exec_running(const exec_proc_t *p)
{
	return p && p->state == PROC_RUNNING;
}

/* The whole process group.  pidfd_send_signal() names the group by the pidfd's
 * struct pid, so it stays right after the leader was reaped and its number reused;
 * kill(-pgid) is the fallback for kernels before 6.9, and for a child watched
 * without pidfd: the group's number stays taken while a member lives, and the
 * leader is reaped by this loop only, right before its group is signalled. */
static int group_signal(exec_proc_t *p, int sig)
{
	static bool no_pidfd_group;

	if (!no_pidfd_group && p->pidfd >= 0) {
		if (syscall(SYS_pidfd_send_signal, p->pidfd, sig, NULL,
		            PIDFD_SIGNAL_PROCESS_GROUP) == 0)
			return 0;
		if (errno != ENOSYS && errno != EINVAL)
			return -errno;
		no_pidfd_group = true;
	}
	return kill(-p->pid, sig) < 0 ? -errno : 0;
}

/* SIGKILL for the group, and for everything in the run's cgroup (whatever
 * left the group); the group's answer is the result. */
static int group_sigkill(exec_proc_t *p)
{
	int r = group_signal(p, SIGKILL);

	if (p->cg_fd >= 0 && cgroup_kill_fd(p->cg_fd) >= 0 && r == -ESRCH)
		r = 0;
	return r;
}

static void pipe_close(struct exec_pipe *pp)
{
	pp->w = ev_io_del(pp->w);
	pp->fd = safe_close(pp->fd);
}

static bool pipes_open(const exec_proc_t *p)
{
	return p->pipes[0].fd >= 0 || p->pipes[1].fd >= 0;
}

/* Watches, timers, fds: everything but the memory.  Reaping is the caller's job. */
static void proc_teardown(exec_proc_t *p)
{
	for (size_t i = 0; i < ELEMENTSOF(p->pipes); i++)
		pipe_close(&p->pipes[i]);
	p->child = ev_child_del(p->child);
	p->kill_timer = ev_timer_del(p->kill_timer);
	p->drain_timer = ev_timer_del(p->drain_timer);
	p->pidfd = safe_close(p->pidfd);
	p->cg_fd = safe_close(p->cg_fd);
}

/* Synchronously: SIGKILL the group, wait for the leader. */
static void proc_reap_now(exec_proc_t *p)
{
	siginfo_t si;

	(void)group_sigkill(p);
	p->child = ev_child_del(p->child);
	while ((p->pidfd >= 0 ? waitid(P_PIDFD, (id_t)p->pidfd, &si, WEXITED)
	                      : waitid(P_PID, (id_t)p->pid, &si, WEXITED)) < 0 &&
	       errno == EINTR)
		;
	/* ECHILD: someone reaped it already (a subreaper loop), fine. */
	p->state = PROC_DONE;
}

static void reap_work(void *arg)
{
	int *pidfd = arg;
	siginfo_t si;

	while (waitid(P_PIDFD, (id_t)*pidfd, &si, WEXITED) < 0 && errno == EINTR)
		;
}

static void reap_done(void *arg, int r)
{
	int *pidfd = arg;

	safe_close(*pidfd);
	free(pidfd);
}

/* SIGKILL the group and leave the leader to a loop that reaps every child:
 * it is reaped when it dies, quietly. */
static bool proc_reap_forget(exec_proc_t *p)
{
	if (p->pidfd >= 0 || !p->child)
		return false;
	(void)group_sigkill(p);
	if (ev_child_forget(p->child) < 0)
		return false;
	p->child = NULL;
	p->state = PROC_DONE;
	return true;
}

/* SIGKILL the group, reap the leader on a helper thread: a child in
 * uninterruptible sleep (D state) dies only when the kernel lets it. */
static bool proc_reap_later(exec_proc_t *p)
{
	int *pidfd;

	if (proc_reap_forget(p))
		return true;
	if (!p->offload || p->pidfd < 0 || !(pidfd = malloc(sizeof(*pidfd))))
		return false;
	(void)group_sigkill(p);
	p->child = ev_child_del(p->child);
	*pidfd = p->pidfd;
	if (offload_submit(p->offload, NULL, reap_work, reap_done, pidfd, NULL) < 0) {
		free(pidfd);
		return false;
	}
	p->pidfd = -1; /* the job's now */
	p->state = PROC_DONE;
	return true;
}

unsigned exec_fds_per_run(const ev_t *e, bool cgroup)
{
	return 1 + (cgroup ? 1 : 0) + (ev_reaps_children(e) ? 0 : 1);
}

unsigned exec_runs_fitting(unsigned long long limit, unsigned per_run, unsigned reserve)
{
	unsigned long long n = limit > reserve ? (limit - reserve) / MAX(per_run, 1u) : 0;

	return (unsigned)MIN(MAX(n, 1ULL), (unsigned long long)UINT_MAX);
}

/* Run processes in existence: when the last is freed, the spawn's fds are
 * closed if they sit high (exec_child_idle()). */
static unsigned live_procs;

exec_proc_t *exec_free(exec_proc_t *p)
{
	if (!p)
		return NULL;
	if (__atomic_sub_fetch(&live_procs, 1, __ATOMIC_SEQ_CST) == 0)
		exec_child_idle();
	if (p->state == PROC_RUNNING && !proc_reap_later(p))
		proc_reap_now(p);
	p->state = PROC_DONE;
	proc_teardown(p);
	if (p->in_output)
		p->freed = true; /* the read loop frees it when on_output returns */
	else
		free(p);
	return NULL;
}

/* The end: exactly once, after exit and EOF (or the drain deadline). */
static void proc_report(exec_proc_t *p)
{
	struct exec_result res = p->res; /* on_exit may free p */

	p->state = PROC_DONE;
	proc_teardown(p);
	if (p->on_exit)
		p->on_exit(p, &res, p->userdata);
}

static bool deliver(exec_proc_t *p, int stream, const void *data, size_t len)
{
	if (!p->on_output)
		return true;
	p->in_output = true;
	p->on_output(p, stream, data, len, p->userdata);
	p->in_output = false;
	return !p->freed;
}

/* Read what is there, within the budget.  After a short read the pipe is most
 * likely empty: stop there unless the writers are gone (hup), when reading on to
 * the 0 that means EOF saves a loop iteration. */
static enum pipe_status pipe_read(exec_proc_t *p, size_t i, bool hup)
{
	char buf[OUTPUT_CHUNK];
	size_t budget = OUTPUT_BUDGET;

	while (budget > 0 && !p->paused) {
		ssize_t n = read(p->pipes[i].fd, buf, sizeof(buf));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno == EAGAIN ? PIPE_MORE : PIPE_EOF;
		if (n == 0)
			return PIPE_EOF;
		if (!deliver(p, (int)i + 1, buf, (size_t)n))
			return PIPE_FREED;
		budget -= MIN(budget, (size_t)n);
		if ((size_t)n < sizeof(buf) && !hup)
			return PIPE_MORE;
	}
	return PIPE_MORE;
}

static void on_pipe(ev_io_t *w, int fd, uint32_t revents, void *userdata)
{
	exec_proc_t *p = userdata;
	size_t i = fd == p->pipes[0].fd ? 0 : 1;

	switch (pipe_read(p, i, revents & (EV_HUP | EV_ERROR))) {
	case PIPE_FREED:
		free(p);
		return;
	case PIPE_MORE:
		return;
	case PIPE_EOF:
		pipe_close(&p->pipes[i]);
		if (p->state == PROC_DRAINING && !pipes_open(p))
			proc_report(p);
		return;
	}
}

int exec_output_pause(exec_proc_t *p, bool pause)
{
	int r = 0;

	p->paused = pause;
	for (size_t i = 0; i < ELEMENTSOF(p->pipes); i++)
		if (p->pipes[i].w) {
			int q = ev_io_set_events(p->pipes[i].w, pause ? 0 : EV_READ);

			if (q < 0)
				r = q;
		}
	return r;
}

/* Whoever still holds the pipes after the drain window (a grandchild that left
 * the process group, or one we were told to keep) no longer holds the run. */
static void on_drain_timeout(ev_timer_t *t, void *userdata)
{
	exec_proc_t *p = userdata;

	p->paused = false; /* the window is over: read what is left */
	for (size_t i = 0; i < ELEMENTSOF(p->pipes); i++) {
		if (p->pipes[i].fd < 0)
			continue;
		if (pipe_read(p, i, true) == PIPE_FREED) {
			free(p);
			return;
		}
		pipe_close(&p->pipes[i]);
	}
	proc_report(p);
}

static void result_set(struct exec_result *res, const siginfo_t *si, usec_t start)
{
	res->exited = si->si_code == CLD_EXITED;
	res->exit_code = res->exited ? si->si_status : 0;
	res->signal = res->exited ? 0 : si->si_status;
	res->core_dumped = si->si_code == CLD_DUMPED;
	res->duration = time_mono() - start;
}

static void on_child(ev_child_t *c, const siginfo_t *si, void *userdata)
{
	exec_proc_t *p = userdata;
	int r;

	result_set(&p->res, si, p->start);
	p->state = PROC_DRAINING;
	if (!p->keep_group)
		(void)group_sigkill(p);
	if (!pipes_open(p)) {
		proc_report(p);
		return;
	}
	r = ev_timer_add(p->e, p->output_drain, on_drain_timeout, p, &p->drain_timer);
	if (r < 0) /* no way to wait: stop waiting */
		on_drain_timeout(NULL, p);
}

static void on_kill_timeout(ev_timer_t *t, void *userdata)
{
	exec_proc_t *p = userdata;

	p->sigkill_sent = true;
	(void)group_sigkill(p);
}

static int valid_signal(int sig)
{
	return sig >= 0 && sig < _NSIG;
}

int exec_signal(exec_proc_t *p, int sig)
{
	if (!p || !valid_signal(sig))
		return -EINVAL;
	if (p->state == PROC_DONE)
		return -ESRCH;
	if (p->state == PROC_RUNNING && sig != 0)
		p->res.killed = true;
	return group_signal(p, sig);
}

static usec_t deadline_after(ev_t *e, usec_t after)
{
	usec_t now = ev_now(e);

	return after >= USEC_INFINITY - now ? USEC_INFINITY : now + after;
}

/* An empty group is no failure for the ladder: there is nothing left to stop. */
static int ladder_signal(exec_proc_t *p, int sig)
{
	int r = group_signal(p, sig);

	return r == -ESRCH ? 0 : r;
}

static int ladder_sigkill(exec_proc_t *p)
{
	int r;

	p->sigkill_sent = true;
	if (p->kill_timer)
		ev_timer_disarm(p->kill_timer);
	r = group_sigkill(p);
	return r == -ESRCH ? 0 : r;
}

static int ladder_start(exec_proc_t *p, usec_t grace)
{
	int r = ev_timer_add(p->e, grace, on_kill_timeout, p, &p->kill_timer);

	return r < 0 ? r : ladder_signal(p, SIGTERM);
}

/* A second call: the SIGKILL may come sooner, never later. */
static int ladder_shorten(exec_proc_t *p, usec_t grace)
{
	usec_t deadline = deadline_after(p->e, grace);

	if (deadline < ev_timer_deadline(p->kill_timer))
		return ev_timer_arm_at(p->kill_timer, deadline);
	return 0;
}

int exec_kill(exec_proc_t *p, usec_t grace)
{
	int r;

	if (!p)
		return -EINVAL;
	if (p->state == PROC_DONE)
		return -ESRCH;
	if (grace == 0 || p->sigkill_sent)
		r = ladder_sigkill(p);
	else if (p->kill_timer)
		r = ladder_shorten(p, grace);
	else
		r = ladder_start(p, grace);
	if (r >= 0 && p->state == PROC_RUNNING)
		p->res.killed = true;
	return r;
}

/* Spawning. */

/* Our copies of what the child gets, closed once it has them. */
struct spawn_fds {
	int out_w;
	int err_w;
	int cg_procs; /* the run cgroup's cgroup.procs, for the child */
};

static void spawn_fds_close(struct spawn_fds *f)
{
	f->out_w = safe_close(f->out_w);
	f->err_w = safe_close(f->err_w);
	f->cg_procs = safe_close(f->cg_procs);
}

static uint64_t rlim_to_kernel(rlim_t v)
{
	return v == RLIM_INFINITY ? UINT64_MAX : (uint64_t)v;
}

/* The RLIMIT_NOFILE we started with, for our children (exec_nofile_raise). */
static struct rlimit child_nofile;
static bool child_nofile_kept;

int exec_nofile_raise(struct rlimit *ret_now)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return -errno;
	if (!child_nofile_kept) {
		child_nofile = rl;
		child_nofile_kept = true;
	}
	*ret_now = rl;
	if (rl.rlim_cur == rl.rlim_max)
		return 0;
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
		return -errno;
	*ret_now = rl;
	return 0;
}

/* Our children start with the soft limit we started with, not the one we
 * raised for ourselves; the hard limit is ours (it may have been raised since). */
static void child_nofile_add(const struct exec_spec *s, struct exec_child_args *a)
{
	struct rlimit now;

	if (!child_nofile_kept || a->n_rlimits >= ELEMENTSOF(a->rlimits))
		return;
	for (size_t i = 0; i < s->n_rlimits; i++)
		if (s->rlimits[i].resource == RLIMIT_NOFILE)
			return;
	if (getrlimit(RLIMIT_NOFILE, &now) < 0 || now.rlim_cur == child_nofile.rlim_cur)
		return;
	a->rlimits[a->n_rlimits].resource = RLIMIT_NOFILE;
	a->rlimits[a->n_rlimits].cur = rlim_to_kernel(MIN(child_nofile.rlim_cur, now.rlim_max));
	a->rlimits[a->n_rlimits].max = rlim_to_kernel(now.rlim_max);
	a->n_rlimits++;
}

static int child_args_prepare(const struct exec_spec *s, struct exec_child_args *a)
{
	static char *const empty_env[] = {NULL};

	if (!s->path || !s->argv || !s->argv[0] || s->pdeathsig < 0 || s->pdeathsig >= _NSIG)
		return -EINVAL;
	if (s->n_rlimits > ELEMENTSOF(a->rlimits) || (s->n_rlimits > 0 && !s->rlimits))
		return -EINVAL;
	*a = (struct exec_child_args){
	    .path = s->path,
	    .argv = s->argv,
	    .envp = s->envp ? s->envp : empty_env,
	    .cwd = s->cwd,
	    .fds = {-1, -1, -1},
	    .err_fd = -1,
	    .cgroup_fd = -1,
	    .cgroup_procs_fd = -1,
	    .parent = getpid(),
	    .pdeathsig = s->pdeathsig ? s->pdeathsig : SIGKILL,
	    .set_ids = s->set_ids,
	    .uid = s->uid,
	    .gid = s->gid,
	    .n_rlimits = s->n_rlimits,
	};
	for (size_t i = 0; i < s->n_rlimits; i++) {
		if (s->rlimits[i].resource < 0 || s->rlimits[i].resource >= RLIMIT_NLIMITS)
			return -EINVAL;
		a->rlimits[i].resource = s->rlimits[i].resource;
		a->rlimits[i].cur = rlim_to_kernel(s->rlimits[i].lim.rlim_cur);
		a->rlimits[i].max = rlim_to_kernel(s->rlimits[i].lim.rlim_max);
	}
	child_nofile_add(s, a);
	return 0;
}

/* Our end non-blocking for the loop, the child's end blocking as programs expect. */
static int pipe_for_child(int *ret_ours, int *ret_child)
{
	int fds[2];

	if (pipe2(fds, O_CLOEXEC) < 0)
		return -errno;
	if (fcntl(fds[0], F_SETFL, O_NONBLOCK) < 0) {
		int r = -errno;

		close(fds[0]);
		close(fds[1]);
		return r;
	}
	*ret_ours = fds[0];
	*ret_child = fds[1];
	return 0;
}

static int spawn_fds_open(exec_proc_t *p, const struct exec_spec *s, struct exec_child_args *a,
                          struct spawn_fds *f)
{
	int r;

	a->fds[0] = s->stdin_fd >= 0 ? s->stdin_fd : -1; /* -1: /dev/null */
	r = pipe_for_child(&p->pipes[0].fd, &f->out_w);
	if (r < 0)
		return r;
	a->fds[1] = a->fds[2] = f->out_w;
	if (s->split_stderr) {
		r = pipe_for_child(&p->pipes[1].fd, &f->err_w);
		if (r < 0)
			return r;
		a->fds[2] = f->err_w;
	}
	return 0;
}

/* The run's cgroup: our directory fd (for cgroup.kill, and CLONE_INTO_CGROUP)
 * and its cgroup.procs for the child. */
static int spawn_cgroup_open(exec_proc_t *p, const struct exec_spec *s, struct exec_child_args *a,
                             struct spawn_fds *f)
{
	if (!s->cgroup)
		return 0;
	p->cg_fd = open(s->cgroup, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (p->cg_fd < 0)
		return -errno;
	f->cg_procs = openat(p->cg_fd, "cgroup.procs", O_WRONLY | O_CLOEXEC);
	if (f->cg_procs < 0)
		return -errno;
	a->cgroup_fd = p->cg_fd;
	a->cgroup_procs_fd = f->cg_procs;
	return 0;
}

static int spawn_child(exec_proc_t *p, const struct exec_child_args *a, struct spawn_fds *f,
                       const char **step)
{
	struct exec_child_report rep = {0};
	pid_t pid;

	p->start = time_mono();
	/* A loop that reaps every child finds this one by its pid: no pidfd,
	 * one fd less per run. */
	pid = exec_child_start(a, ev_reaps_children(p->e) ? NULL : &p->pidfd, &rep);
	if (pid < 0) {
		*step = rep.err ? exec_step_name(rep.step) : "clone";
		return pid;
	}
	p->pid = pid;
	p->state = PROC_RUNNING;
	/* The child has its copies (or is dead): ours would hold its pipes open. */
	spawn_fds_close(f);
	if (rep.err == 0)
		return 0;
	proc_reap_now(p);
	*step = exec_step_name(rep.step);
	return -rep.err;
}

static int proc_watch(exec_proc_t *p)
{
	int r = ev_child_add(p->e, p->pid, p->pidfd, on_child, p, &p->child);

	for (size_t i = 0; r >= 0 && i < ELEMENTSOF(p->pipes); i++)
		if (p->pipes[i].fd >= 0)
			r = ev_io_add(p->e, p->pipes[i].fd, EV_READ, on_pipe, p, &p->pipes[i].w);
	return r;
}

static exec_proc_t *proc_new(ev_t *e, const struct exec_spec *s, exec_output_cb on_output,
                             exec_exit_cb on_exit, void *userdata)
{
	exec_proc_t *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	__atomic_add_fetch(&live_procs, 1, __ATOMIC_SEQ_CST);
	*p = (exec_proc_t){
	    .e = e,
	    .state = PROC_DONE, /* nothing to reap until the clone */
	    .pid = -1,
	    .pidfd = -1,
	    .cg_fd = -1,
	    .pipes = {{.fd = -1}, {.fd = -1}},
	    .output_drain = s->output_drain ? s->output_drain : OUTPUT_DRAIN_DEFAULT,
	    .keep_group = s->keep_group_on_exit,
	    .offload = s->offload,
	    .on_output = on_output,
	    .on_exit = on_exit,
	    .userdata = userdata,
	};
	return p;
}

int exec_spawn(ev_t *e, const struct exec_spec *spec, exec_output_cb on_output,
               exec_exit_cb on_exit, void *userdata, exec_proc_t **ret, const char **ret_step)
{
	_cleanup_(spawn_fds_close) struct spawn_fds f = {-1, -1, -1};
	struct exec_child_args a;
	const char *step = "spawn";
	exec_proc_t *p;
	int r;

	if (!e || !spec || !ret)
		return -EINVAL;
	r = child_args_prepare(spec, &a);
	if (r < 0)
		goto fail;
	p = proc_new(e, spec, on_output, on_exit, userdata);
	if (!p) {
		r = -ENOMEM;
		goto fail;
	}
	r = spawn_fds_open(p, spec, &a, &f);
	if (r < 0) {
		step = "pipe";
		goto fail_free;
	}
	r = spawn_cgroup_open(p, spec, &a, &f);
	if (r < 0) {
		step = "cgroup";
		goto fail_free;
	}
	r = spawn_child(p, &a, &f, &step);
	if (r < 0)
		goto fail_free;
	r = proc_watch(p);
	if (r < 0) {
		step = "watch";
		goto fail_free;
	}
	*ret = p;
	return 0;
fail_free:
	exec_free(p);
fail:
	if (ret_step)
		*ret_step = step;
	return r;
}
