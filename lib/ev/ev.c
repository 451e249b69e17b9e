/* The loop core: fd watch bookkeeping, the timer heap, deferred callbacks,
 * signals (one signalfd), child exits (pidfd, SIGCHLD fallback, orphan reaping)
 * and dispatch.  The backend (ev_epoll.c, ev_uring.c) only manages fd interest
 * and waits.
 *
 * One iteration: wait (not at all when deferred callbacks or a child scan are
 * pending; else until the next timer), take the time, then dispatch deferred
 * callbacks, ready fds (signals and pidfds included), the child scan, expired
 * timers.
 *
 * Removal is safe from any callback: a removed fd watch or child is marked dead
 * and freed at the end of the iteration, and dead objects are never dispatched.
 * Timers and signals are looked up afresh for every dispatch, so they are freed
 * at once. */
#include "ev/ev.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "ev/ev-int.h"
#include "util/macro.h"

#ifndef P_PIDFD
#define P_PIDFD 3
#endif

#define IDX_NONE SIZE_MAX
#define SIGINFO_BATCH 16

struct ev_timer {
	ev_t *e;
	usec_t deadline;
	uint64_t seq; /* arming order: equal deadlines fire first-armed first */
	size_t idx;   /* position in the heap, IDX_NONE when disarmed */
	ev_timer_cb cb;
	void *userdata;
	LIST_ENTRY(ev_timer) link;
};

struct ev_signal {
	ev_t *e;
	int sig;
	ev_signal_cb cb;
	void *userdata;
};

struct ev_child {
	ev_t *e;
	pid_t pid;
	bool fallback; /* no pidfd: reaped when SIGCHLD arrives */
	bool exited;   /* the callback ran (or is running): inert now */
	bool dead;
	bool hashed; /* in the pid table: waiting, neither exited nor removed */
	ev_io_t *io; /* the pidfd watch while waiting */
	ev_child_cb cb;
	void *userdata;
	LIST_ENTRY(ev_child) link;
	LIST_ENTRY(ev_child) fallback_link; /* on the fallback list while waiting */
	ev_child_t *next_hash;
	ev_child_t *next_dead;
};

struct deferred {
	ev_defer_cb cb;
	void *userdata;
	uint64_t seq;
	TAILQ_ENTRY(deferred) link;
};

struct ev {
	const struct ev_backend *backend;
	void *be;
	char *reason;
	usec_t now;
	bool running;
	bool exit_requested;
	int exit_code;
	uint64_t ndispatched; /* user callbacks run so far */

	ev_io_t **fds; /* indexed by fd */
	size_t nfds;
	ev_io_t *ready_head, **ready_tail;
	ev_io_t *dead_io;

	ev_timer_t **heap; /* binary min-heap on (deadline, seq) */
	size_t nheap, heap_alloc, ntimers;
	uint64_t timer_seq;
	LIST_HEAD(, ev_timer) timers;

	TAILQ_HEAD(, deferred) defers;
	uint64_t defer_seq;

	int sigfd;
	ev_io_t *sigfd_io;
	ev_signal_t *sigs[_NSIG];
	sigset_t sig_active; /* the signalfd's mask */
	sigset_t sig_ours;   /* blocked by us, unblocked again when unused */
	bool sig_synced;     /* the masks are sig_active (the last sig_sync() worked) */

	LIST_HEAD(, ev_child) children;
	LIST_HEAD(, ev_child) fallbacks; /* fallback children still waiting */
	ev_child_t **pids;               /* waiting children by pid, chained */
	size_t npids, pids_alloc;
	uint64_t pid_probes;  /* entries visited looking up pids (tests count work) */
	uint64_t sig_applies; /* times the signal masks were set (tests count work) */
	ev_child_t *dead_children;
	unsigned nfallback; /* fallback children still waiting */
	bool reap_orphans;
	bool child_scan; /* SIGCHLD seen, or a fallback child added */
	uint64_t orphans;

	ev_post_cb post_cb;
	void *post_userdata;
	uint64_t iterations;
};

static usec_t usec_add(usec_t a, usec_t b)
{
	return b > USEC_INFINITY - a ? USEC_INFINITY : a + b;
}

/* ---- fd watches ---------------------------------------------------------- */

ev_io_t *ev_io_lookup(ev_t *e, int fd)
{
	return fd >= 0 && (size_t)fd < e->nfds ? e->fds[fd] : NULL;
}

void ev_io_ready(ev_t *e, ev_io_t *w, uint32_t revents)
{
	if (!revents)
		return;
	if (!w->revents) {
		w->next_ready = NULL;
		*e->ready_tail = w;
		e->ready_tail = &w->next_ready;
	}
	w->revents |= revents;
}

static int fds_reserve(ev_t *e, int fd)
{
	size_t n = MAX(MAX(e->nfds * 2, (size_t)fd + 1), (size_t)64);
	ev_io_t **p;

	if ((size_t)fd < e->nfds)
		return 0;
	p = realloc(e->fds, n * sizeof(*p));
	if (!p)
		return -ENOMEM;
	memset(p + e->nfds, 0, (n - e->nfds) * sizeof(*p));
	e->fds = p;
	e->nfds = n;
	return 0;
}

static int io_new(ev_t *e, int fd, uint32_t events, ev_io_cb cb, void *userdata, bool internal,
                  ev_io_t **ret)
{
	_cleanup_free_ ev_io_t *w = NULL;
	struct stat st;
	int r;

	if (fd < 0)
		return -EBADF;
	if (!cb || (events & ~(uint32_t)(EV_READ | EV_WRITE)))
		return -EINVAL;
	if (fstat(fd, &st) < 0)
		return -errno;
	/* Always "ready" to poll(2), refused by epoll: refused on both backends. */
	if (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode))
		return -EPERM;
	if (ev_io_lookup(e, fd))
		return -EEXIST;
	r = fds_reserve(e, fd);
	if (r < 0)
		return r;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	*w = (ev_io_t){.e = e,
	               .fd = fd,
	               .events = events,
	               .cb = cb,
	               .userdata = userdata,
	               .internal = internal};
	r = e->backend->io_add(e->be, w);
	if (r < 0)
		return r;
	e->fds[fd] = w;
	if (ret)
		*ret = w;
	TAKE_PTR(w);
	return 0;
}

int ev_io_add(ev_t *e, int fd, uint32_t events, ev_io_cb cb, void *userdata, ev_io_t **ret)
{
	return io_new(e, fd, events, cb, userdata, false, ret);
}

int ev_io_set_events(ev_io_t *w, uint32_t events)
{
	uint32_t old = w->events;
	int r;

	assert(!w->dead);
	if (events & ~(uint32_t)(EV_READ | EV_WRITE))
		return -EINVAL;
	if (events == old)
		return 0;
	w->events = events;
	r = w->e->backend->io_modify(w->e->be, w, old);
	if (r < 0)
		w->events = old;
	return r;
}

uint32_t ev_io_get_events(const ev_io_t *w)
{
	return w->events;
}

ev_io_t *ev_io_del(ev_io_t *w)
{
	ev_t *e;

	if (!w)
		return NULL;
	e = w->e;
	assert(!w->dead);
	e->backend->io_remove(e->be, w);
	e->fds[w->fd] = NULL;
	w->dead = true;
	if (e->running) {
		w->next_dead = e->dead_io;
		e->dead_io = w;
	} else
		free(w);
	return NULL;
}

/* Every watch in the ready list is popped, live ones dispatched. */
static void dispatch_io(ev_t *e, bool call)
{
	ev_io_t *w;

	while ((w = e->ready_head)) {
		uint32_t revents = w->revents;

		e->ready_head = w->next_ready;
		w->next_ready = NULL;
		w->revents = 0;
		revents &= w->events | EV_ERROR | EV_HUP;
		if (!call || w->dead || !w->events || !revents)
			continue;
		if (!w->internal)
			e->ndispatched++;
		w->cb(w, w->fd, revents, w->userdata);
	}
	e->ready_tail = &e->ready_head;
}

/* ---- timers ---------------------------------------------------------------- */

static bool timer_before(const ev_timer_t *a, const ev_timer_t *b)
{
	return a->deadline < b->deadline || (a->deadline == b->deadline && a->seq < b->seq);
}

static void heap_put(ev_t *e, size_t i, ev_timer_t *t)
{
	e->heap[i] = t;
	t->idx = i;
}

static void heap_up(ev_t *e, size_t i)
{
	ev_timer_t *t = e->heap[i];

	while (i > 0 && timer_before(t, e->heap[(i - 1) / 2])) {
		heap_put(e, i, e->heap[(i - 1) / 2]);
		i = (i - 1) / 2;
	}
	heap_put(e, i, t);
}

static void heap_down(ev_t *e, size_t i)
{
	ev_timer_t *t = e->heap[i];

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= e->nheap)
			break;
		if (c + 1 < e->nheap && timer_before(e->heap[c + 1], e->heap[c]))
			c++;
		if (!timer_before(e->heap[c], t))
			break;
		heap_put(e, i, e->heap[c]);
		i = c;
	}
	heap_put(e, i, t);
}

/* t's key changed: move it up or down to where it belongs. */
static void heap_fix(ev_t *e, ev_timer_t *t)
{
	heap_up(e, t->idx);
	heap_down(e, t->idx);
}

static void heap_remove(ev_t *e, ev_timer_t *t)
{
	size_t i = t->idx;
	ev_timer_t *last = e->heap[--e->nheap];

	t->idx = IDX_NONE;
	if (last == t)
		return;
	heap_put(e, i, last);
	heap_fix(e, last);
}

/* The heap always has room for every timer, so arming never fails. */
static int heap_reserve(ev_t *e, size_t n)
{
	ev_timer_t **p;

	if (n <= e->heap_alloc)
		return 0;
	n = MAX(n, e->heap_alloc * 2);
	p = realloc(e->heap, n * sizeof(*p));
	if (!p)
		return -ENOMEM;
	e->heap = p;
	e->heap_alloc = n;
	return 0;
}

int ev_timer_add(ev_t *e, usec_t after, ev_timer_cb cb, void *userdata, ev_timer_t **ret)
{
	ev_timer_t *t;
	int r;

	if (!cb)
		return -EINVAL;
	r = heap_reserve(e, e->ntimers + 1);
	if (r < 0)
		return r;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	*t = (ev_timer_t){
	    .e = e, .deadline = USEC_INFINITY, .idx = IDX_NONE, .cb = cb, .userdata = userdata};
	LIST_INSERT_HEAD(&e->timers, t, link);
	e->ntimers++;
	(void)ev_timer_arm(t, after);
	if (ret)
		*ret = t;
	return 0;
}

int ev_timer_arm(ev_timer_t *t, usec_t after)
{
	return ev_timer_arm_at(t, usec_add(t->e->now, after));
}

int ev_timer_arm_at(ev_timer_t *t, usec_t mono)
{
	ev_t *e = t->e;

	if (mono == USEC_INFINITY) {
		ev_timer_disarm(t);
		return 0;
	}
	t->deadline = mono;
	t->seq = ++e->timer_seq;
	if (t->idx == IDX_NONE) {
		heap_put(e, e->nheap++, t);
		heap_up(e, t->idx);
	} else
		heap_fix(e, t);
	return 0;
}

void ev_timer_disarm(ev_timer_t *t)
{
	if (t->idx != IDX_NONE)
		heap_remove(t->e, t);
	t->deadline = USEC_INFINITY;
}

bool ev_timer_armed(const ev_timer_t *t)
{
	return t->idx != IDX_NONE;
}

usec_t ev_timer_deadline(const ev_timer_t *t)
{
	return t->deadline;
}

ev_timer_t *ev_timer_del(ev_timer_t *t)
{
	if (!t)
		return NULL;
	ev_timer_disarm(t);
	LIST_REMOVE(t, link);
	t->e->ntimers--;
	free(t);
	return NULL;
}

/* Expired timers in deadline order; one armed during this phase (a callback
 * re-arming itself for "now") waits for the next iteration. */
static void dispatch_timers(ev_t *e)
{
	uint64_t last = e->timer_seq;

	while (e->nheap > 0) {
		ev_timer_t *t = e->heap[0];

		if (t->deadline > e->now || t->seq > last)
			break;
		ev_timer_disarm(t);
		e->ndispatched++;
		t->cb(t, t->userdata);
	}
}

/* ---- deferred callbacks ---------------------------------------------------- */

int ev_defer(ev_t *e, ev_defer_cb cb, void *userdata)
{
	struct deferred *d;

	if (!cb)
		return -EINVAL;
	d = malloc(sizeof(*d));
	if (!d)
		return -ENOMEM;
	*d = (struct deferred){.cb = cb, .userdata = userdata, .seq = e->defer_seq++};
	TAILQ_INSERT_TAIL(&e->defers, d, link);
	return 0;
}

void ev_defer_cancel(ev_t *e, ev_defer_cb cb, void *userdata)
{
	struct deferred *d = TAILQ_FIRST(&e->defers);

	while (d) {
		struct deferred *next = TAILQ_NEXT(d, link);

		if (d->cb == cb && d->userdata == userdata) {
			TAILQ_REMOVE(&e->defers, d, link);
			free(d);
		}
		d = next;
	}
}

/* Those queued before this phase; new ones run in the next iteration. */
static void run_defers(ev_t *e)
{
	uint64_t end = e->defer_seq;
	struct deferred *d;

	while ((d = TAILQ_FIRST(&e->defers)) && d->seq < end) {
		ev_defer_cb cb = d->cb;
		void *userdata = d->userdata;

		TAILQ_REMOVE(&e->defers, d, link);
		free(d);
		e->ndispatched++;
		cb(userdata);
	}
}

/* ---- signals --------------------------------------------------------------- */

static bool chld_needed(const ev_t *e)
{
	return e->nfallback > 0 || e->reap_orphans;
}

static void sigfd_cb(ev_io_t *w, int fd, uint32_t revents, void *userdata)
{
	struct signalfd_siginfo si[SIGINFO_BATCH];
	ev_t *e = userdata;
	ssize_t n = read(fd, si, sizeof(si));

	/* Level-triggered: whatever is left is read in the next iteration. */
	for (ssize_t i = 0; i < n / (ssize_t)sizeof(si[0]); i++) {
		int sig = (int)si[i].ssi_signo;
		ev_signal_t *s = sig > 0 && sig < _NSIG ? e->sigs[sig] : NULL;

		if (sig == SIGCHLD && chld_needed(e))
			e->child_scan = true;
		if (s) {
			e->ndispatched++;
			s->cb(s, &si[i], s->userdata);
		}
	}
}

static int sigfd_update(ev_t *e, const sigset_t *want)
{
	bool any = !sigisemptyset(want);
	int fd, r;

	if (e->sigfd >= 0) {
		if (signalfd(e->sigfd, want, 0) < 0)
			return -errno;
		return ev_io_set_events(e->sigfd_io, any ? EV_READ : 0);
	}
	if (!any)
		return 0;
	fd = signalfd(-1, want, SFD_NONBLOCK | SFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	r = io_new(e, fd, EV_READ, sigfd_cb, e, true, &e->sigfd_io);
	if (r < 0) {
		safe_close(fd);
		return r;
	}
	e->sigfd = fd;
	return 0;
}

/* A signal nobody watches any more: drop what is pending (it arrived while the
 * loop owned it; delivering it now would run its default action), then
 * unblock it if it was not blocked before the loop blocked it. */
static void sig_release(ev_t *e, int sig)
{
	static const struct timespec zero = {0, 0};
	sigset_t one;

	if (sigismember(&e->sig_ours, sig) != 1)
		return;
	sigemptyset(&one);
	sigaddset(&one, sig);
	while (sigtimedwait(&one, NULL, &zero) > 0)
		;
	sigprocmask(SIG_UNBLOCK, &one, NULL);
	sigdelset(&e->sig_ours, sig);
}

static bool sigset_same(const sigset_t *a, const sigset_t *b)
{
	for (int sig = 1; sig < _NSIG; sig++)
		if (sigismember(a, sig) != sigismember(b, sig))
			return false;
	return true;
}

/* Make the blocked set and the signalfd's mask match the registered signals.
 * Nothing to do when they already do: a child watched without a pidfd while
 * the orphan reaper keeps SIGCHLD anyway costs no system call. */
static int sig_sync(ev_t *e)
{
	sigset_t want, old;
	int r;

	sigemptyset(&want);
	for (int sig = 1; sig < _NSIG; sig++)
		if (e->sigs[sig] || (sig == SIGCHLD && chld_needed(e)))
			sigaddset(&want, sig);
	if (e->sig_synced && sigset_same(&want, &e->sig_active))
		return 0;
	if (sigprocmask(SIG_BLOCK, &want, &old) < 0)
		return -errno;
	for (int sig = 1; sig < _NSIG; sig++) {
		bool wanted = sigismember(&want, sig) == 1;
		bool active = sigismember(&e->sig_active, sig) == 1;

		if (wanted && !active && sigismember(&old, sig) != 1)
			sigaddset(&e->sig_ours, sig);
		else if (!wanted && active)
			sig_release(e, sig);
	}
	e->sig_active = want;
	e->sig_applies++;
	r = sigfd_update(e, &want);
	e->sig_synced = r >= 0;
	return r;
}

int ev_signal_add(ev_t *e, int sig, ev_signal_cb cb, void *userdata, ev_signal_t **ret)
{
	sigset_t probe;
	ev_signal_t *s;
	int r;

	sigemptyset(&probe);
	/* sigaddset refuses the C library's reserved real-time signals. */
	if (!cb || sig <= 0 || sig >= _NSIG || sig == SIGKILL || sig == SIGSTOP ||
	    sigaddset(&probe, sig) < 0)
		return -EINVAL;
	if (e->sigs[sig])
		return -EEXIST;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	*s = (ev_signal_t){.e = e, .sig = sig, .cb = cb, .userdata = userdata};
	e->sigs[sig] = s;
	r = sig_sync(e);
	if (r < 0) {
		e->sigs[sig] = NULL;
		(void)sig_sync(e);
		free(s);
		return r;
	}
	if (ret)
		*ret = s;
	return 0;
}

ev_signal_t *ev_signal_del(ev_signal_t *s)
{
	if (!s)
		return NULL;
	s->e->sigs[s->sig] = NULL;
	(void)sig_sync(s->e);
	free(s);
	return NULL;
}

/* ---- children -------------------------------------------------------------- */

/* Waiting children by pid: a chained hash table, grown to keep chains short, so
 * adding a child and finding an exited one cost the same with 10 or 10,000
 * children waiting. */
static size_t pid_slot(const ev_t *e, pid_t pid)
{
	return ((size_t)(uint32_t)pid * UINT32_C(2654435761)) & (e->pids_alloc - 1);
}

static ev_child_t *pid_lookup(ev_t *e, pid_t pid)
{
	if (e->pids_alloc == 0)
		return NULL;
	for (ev_child_t *c = e->pids[pid_slot(e, pid)]; c; c = c->next_hash) {
		e->pid_probes++;
		if (c->pid == pid)
			return c;
	}
	return NULL;
}

static int pid_table_grow(ev_t *e)
{
	size_t n = MAX(e->pids_alloc * 2, (size_t)64), old = e->pids_alloc;
	ev_child_t **t = calloc(n, sizeof(*t)), **prev = e->pids;

	if (!t)
		return -ENOMEM;
	e->pids = t;
	e->pids_alloc = n;
	for (size_t i = 0; i < old; i++)
		while (prev[i]) {
			ev_child_t *c = prev[i];
			size_t k = pid_slot(e, c->pid);

			prev[i] = c->next_hash;
			c->next_hash = t[k];
			t[k] = c;
		}
	free(prev);
	return 0;
}

static int pid_insert(ev_t *e, ev_child_t *c)
{
	size_t k;
	int r;

	if (e->npids >= e->pids_alloc && (r = pid_table_grow(e)) < 0)
		return r;
	k = pid_slot(e, c->pid);
	c->next_hash = e->pids[k];
	e->pids[k] = c;
	c->hashed = true;
	e->npids++;
	return 0;
}

static void pid_remove(ev_t *e, ev_child_t *c)
{
	ev_child_t **pp;

	if (!c->hashed)
		return;
	for (pp = &e->pids[pid_slot(e, c->pid)]; *pp != c; pp = &(*pp)->next_hash)
		e->pid_probes++;
	*pp = c->next_hash;
	c->hashed = false;
	e->npids--;
}

uint64_t ev_pid_probes(const ev_t *e)
{
	return e->pid_probes;
}

uint64_t ev_sig_applies(const ev_t *e)
{
	return e->sig_applies;
}

/* No longer waiting: out of the pid table and the fallback list. */
static void child_unwait(ev_child_t *c)
{
	ev_t *e = c->e;

	pid_remove(e, c);
	c->io = ev_io_del(c->io);
	if (c->fallback && !c->exited && !c->dead) {
		LIST_REMOVE(c, fallback_link);
		if (--e->nfallback == 0)
			(void)sig_sync(e);
	}
}

static void child_exited(ev_child_t *c, const siginfo_t *si)
{
	ev_t *e = c->e;

	child_unwait(c);
	c->exited = true;
	e->ndispatched++;
	c->cb(c, si, c->userdata);
}

/* Reap c if it has exited; the callback runs then.  Returns true if it did. */
static bool child_try_reap(ev_child_t *c, idtype_t idtype, id_t id)
{
	siginfo_t si = {0};

	if (waitid(idtype, id, &si, WEXITED | WNOHANG) < 0) {
		/* Not (or no longer) our child: the status is lost.  Still call
		 * back exactly once, so the owner does not wait forever. */
		si = (siginfo_t){.si_signo = SIGCHLD, .si_errno = errno};
		si.si_pid = c->pid;
	} else if (si.si_pid == 0)
		return false;
	child_exited(c, &si);
	return true;
}

static void child_pidfd_cb(ev_io_t *w, int fd, uint32_t revents, void *userdata)
{
	(void)child_try_reap(userdata, (idtype_t)P_PIDFD, (id_t)fd);
}

/* The waiting (neither exited nor removed) child with this pid. */
static ev_child_t *child_find(ev_t *e, pid_t pid)
{
	return pid_lookup(e, pid);
}

/* Reap each exited child: a watched one (found in the pid table, which the
 * reap cannot have changed: only this thread adds to it) gets its status,
 * any other one is an orphan.  True when every exited child was reaped: none
 * is left for a scan. */
static bool reap_orphans(ev_t *e)
{
	while (e->reap_orphans) {
		siginfo_t si = {0};
		ev_child_t *c;

		if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG) < 0 || si.si_pid == 0)
			return true;
		c = child_find(e, si.si_pid);
		if (c)
			child_exited(c, &si);
		else
			e->orphans++;
	}
	return false;
}

static void child_scan(ev_t *e)
{
	ev_child_t *c;

	e->child_scan = false;
	/* With orphan reaping on, this already reaps watched children too, each
	 * found by its pid: no list to walk then. */
	if (reap_orphans(e))
		return;
	/* The fallback children only, not every child.  Children added by
	 * callbacks go to the head: they are not visited now and have asked for
	 * a scan of their own.  One reaped or removed during the scan is off the
	 * list but keeps its link and its memory until the iteration ends. */
	for (c = LIST_FIRST(&e->fallbacks); c; c = LIST_NEXT(c, fallback_link))
		if (!c->exited && !c->dead)
			(void)child_try_reap(c, P_PID, (id_t)c->pid);
}

int ev_child_add(ev_t *e, pid_t pid, int pidfd, ev_child_cb cb, void *userdata, ev_child_t **ret)
{
	_cleanup_free_ ev_child_t *c = NULL;
	int r;

	if (pid <= 0 || !cb)
		return -EINVAL;
	if (child_find(e, pid))
		return -EEXIST;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	*c =
	    (ev_child_t){.e = e, .pid = pid, .fallback = pidfd < 0, .cb = cb, .userdata = userdata};
	r = pid_insert(e, c);
	if (r < 0)
		return r;
	if (pidfd >= 0)
		r = io_new(e, pidfd, EV_READ, child_pidfd_cb, c, true, &c->io);
	else if (++e->nfallback == 1 && (r = sig_sync(e)) < 0)
		e->nfallback--;
	else {
		/* It may have exited before SIGCHLD was blocked: look once.  Not
		 * when orphans are reaped: SIGCHLD was blocked all along then. */
		LIST_INSERT_HEAD(&e->fallbacks, c, fallback_link);
		e->child_scan = e->child_scan || !e->reap_orphans;
		r = 0;
	}
	if (r < 0) {
		pid_remove(e, c);
		return r;
	}
	LIST_INSERT_HEAD(&e->children, c, link);
	if (ret)
		*ret = c;
	TAKE_PTR(c);
	return 0;
}

ev_child_t *ev_child_del(ev_child_t *c)
{
	ev_t *e;

	if (!c)
		return NULL;
	e = c->e;
	assert(!c->dead);
	child_unwait(c);
	c->dead = true;
	if (e->running) {
		c->next_dead = e->dead_children;
		e->dead_children = c;
	} else {
		LIST_REMOVE(c, link);
		free(c);
	}
	return NULL;
}

static void child_forgotten(ev_child_t *c, const siginfo_t *si, void *userdata)
{
	(void)ev_child_del(c);
}

int ev_child_forget(ev_child_t *c)
{
	if (!c || !c->fallback)
		return -EINVAL;
	if (c->exited)
		(void)ev_child_del(c);
	else {
		c->cb = child_forgotten;
		c->userdata = NULL;
	}
	return 0;
}

bool ev_reaps_children(const ev_t *e)
{
	return e->reap_orphans;
}

int ev_set_reap_orphans(ev_t *e, bool on)
{
	int r;

	if (e->reap_orphans == on)
		return 0;
	e->reap_orphans = on;
	r = sig_sync(e);
	if (r < 0) {
		e->reap_orphans = !on;
		(void)sig_sync(e);
		return r;
	}
	/* Orphans that exited before SIGCHLD was blocked sent no signal. */
	e->child_scan = on;
	return 0;
}

uint64_t ev_orphans_reaped(const ev_t *e)
{
	return e->orphans;
}

/* ---- the loop -------------------------------------------------------------- */

static void bury_dead(ev_t *e)
{
	while (e->dead_io) {
		ev_io_t *w = e->dead_io;

		e->dead_io = w->next_dead;
		free(w);
	}
	while (e->dead_children) {
		ev_child_t *c = e->dead_children;

		e->dead_children = c->next_dead;
		LIST_REMOVE(c, link);
		free(c);
	}
}

static usec_t wait_timeout(ev_t *e, usec_t timeout)
{
	usec_t n, d;

	if (!TAILQ_EMPTY(&e->defers) || e->child_scan)
		return 0;
	if (e->nheap == 0)
		return timeout;
	n = time_mono();
	d = e->heap[0]->deadline;
	return MIN(timeout, d > n ? d - n : 0);
}

int ev_post_set(ev_t *e, ev_post_cb cb, void *userdata)
{
	if (cb && e->post_cb)
		return -EBUSY;
	e->post_cb = cb;
	e->post_userdata = userdata;
	return 0;
}

uint64_t ev_iterations(const ev_t *e)
{
	return e->iterations;
}

int ev_run_once(ev_t *e, usec_t timeout)
{
	uint64_t before = e->ndispatched;
	int r;

	if (e->running)
		return -EBUSY;
	e->running = true;
	r = e->backend->wait(e->be, wait_timeout(e, timeout));
	e->now = time_mono();
	if (r >= 0) {
		run_defers(e);
		dispatch_io(e, true);
		if (e->child_scan)
			child_scan(e);
		dispatch_timers(e);
		if (e->post_cb && e->ndispatched != before)
			e->post_cb(e, e->post_userdata);
	} else
		dispatch_io(e, false);
	bury_dead(e);
	e->iterations++;
	e->running = false;
	return r < 0 ? r : (int)MIN(e->ndispatched - before, (uint64_t)INT32_MAX);
}

int ev_run(ev_t *e)
{
	while (!e->exit_requested) {
		int r = ev_run_once(e, USEC_INFINITY);

		if (r < 0)
			return r;
	}
	e->exit_requested = false;
	return e->exit_code;
}

void ev_exit(ev_t *e, int code)
{
	e->exit_requested = true;
	e->exit_code = code;
}

usec_t ev_now(ev_t *e)
{
	return e->now;
}

/* ---- creation -------------------------------------------------------------- */

static int backend_open(ev_t *e, const char *want)
{
	const char *what = "io_uring";
	int r;

	if (want) {
		const struct ev_backend *b =
		    strcmp(want, "epoll") == 0 ? &ev_backend_epoll : &ev_backend_uring;

		r = b->init(e, &e->be, &what);
		if (r >= 0)
			e->backend = b;
		return r;
	}
	r = ev_backend_uring.init(e, &e->be, &what);
	if (r >= 0) {
		e->backend = &ev_backend_uring;
		return 0;
	}
	errno = -r;
	if (asprintf(&e->reason, "%s: %m", what) < 0) {
		e->reason = NULL;
		return -ENOMEM;
	}
	r = ev_backend_epoll.init(e, &e->be, &what);
	if (r >= 0)
		e->backend = &ev_backend_epoll;
	return r;
}

DEFINE_FREE_FUNC(ev_t, ev_free)

bool ev_backend_known(const char *name)
{
	return !name || !*name || strcmp(name, "io_uring") == 0 || strcmp(name, "epoll") == 0;
}

int ev_new(ev_t **ret, const char *backend)
{
	_cleanup_(ev_freep) ev_t *e = NULL;
	const char *want = backend;
	int r;

	if (!want) {
		want = getenv("LESSEE_IO_BACKEND");
		if (want && !*want)
			want = NULL;
	}
	if (!ev_backend_known(want))
		return -EINVAL;
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->sigfd = -1;
	e->ready_tail = &e->ready_head;
	LIST_INIT(&e->timers);
	TAILQ_INIT(&e->defers);
	LIST_INIT(&e->children);
	LIST_INIT(&e->fallbacks);
	sigemptyset(&e->sig_active);
	sigemptyset(&e->sig_ours);
	e->now = time_mono();
	r = backend_open(e, want);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(e);
	return 0;
}

const char *ev_backend(const ev_t *e)
{
	return e->backend->name;
}

const char *ev_backend_reason(const ev_t *e)
{
	return e->reason;
}

static void free_watches(ev_t *e)
{
	ev_child_t *c;
	ev_timer_t *t;
	struct deferred *d;

	while ((c = LIST_FIRST(&e->children)))
		ev_child_del(c);
	for (int sig = 1; sig < _NSIG; sig++)
		if (e->sigs[sig])
			ev_signal_del(e->sigs[sig]);
	e->reap_orphans = false;
	(void)sig_sync(e);
	while ((t = LIST_FIRST(&e->timers)))
		ev_timer_del(t);
	while ((d = TAILQ_FIRST(&e->defers))) {
		TAILQ_REMOVE(&e->defers, d, link);
		free(d);
	}
	/* The backend goes away as a whole: no per-fd removal needed. */
	for (size_t fd = 0; fd < e->nfds; fd++)
		free(e->fds[fd]);
}

ev_t *ev_free(ev_t *e)
{
	if (!e)
		return NULL;
	assert(!e->running);
	if (e->backend) {
		free_watches(e);
		e->backend->done(e->be);
	}
	safe_close(e->sigfd);
	free(e->fds);
	free(e->heap);
	free(e->pids);
	free(e->reason);
	free(e);
	return NULL;
}
