/* Helper threads for work that must not run on the loop (offload.h;
 * docs/architecture.md, "Off the loop"). */
#include "offload/offload.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/fsuid.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "util/macro.h"

#define MAX_GROUPS 256

struct offload_job {
	offload_job_t *next;
	offload_work_fn work;
	offload_done_fn done;
	void *arg;
	bool set_ids;
	struct offload_creds creds;
	atomic_bool cancelled;
	int result;
};

struct job_list {
	offload_job_t *head, *tail;
};

struct offload {
	ev_t *e;
	int efd;
	ev_io_t *w;
	unsigned pending; /* loop only: submitted, done not run yet */

	pthread_mutex_t lock;    /* everything below */
	pthread_cond_t wake;     /* for threads: a job queued, or shutdown */
	pthread_cond_t finished; /* for the loop: a job done, or a thread gone */
	struct job_list queue, done;
	unsigned queued, n_threads, busy, max_threads;
	bool shutdown, abandoned;

	/* the daemon's own identity, restored after a job that ran as a user */
	uid_t euid;
	gid_t egid;
	gid_t groups[MAX_GROUPS];
	int n_groups;
};

static void list_push(struct job_list *l, offload_job_t *j)
{
	j->next = NULL;
	if (l->tail)
		l->tail->next = j;
	else
		l->head = j;
	l->tail = j;
}

static offload_job_t *list_take(struct job_list *l)
{
	offload_job_t *j = l->head;

	*l = (struct job_list){0};
	return j;
}

static offload_job_t *list_pop(struct job_list *l)
{
	offload_job_t *j = l->head;

	if (j && !(l->head = j->next))
		l->tail = NULL;
	return j;
}

/* ---------------------------------------------------------------- threads */

/* Per thread: raw syscalls, never glibc's setgroups() (which is broadcast to
 * every thread).  Order matters: groups while we still have CAP_SETGID. */
static int creds_enter(const struct offload_creds *c)
{
	if (syscall(SYS_setgroups, 1, &c->gid) < 0)
		return -errno;
	setfsgid(c->gid);
	setfsuid(c->uid);
	if ((uid_t)setfsuid((uid_t)-1) != c->uid || (gid_t)setfsgid((gid_t)-1) != c->gid)
		return -EPERM;
	return 0;
}

/* false when the thread could not get its own identity back: it must not run
 * another job. */
static bool creds_leave(offload_t *o)
{
	setfsuid(o->euid); /* first: back to 0 restores the file capabilities */
	setfsgid(o->egid);
	if (syscall(SYS_setgroups, (size_t)o->n_groups, o->groups) < 0)
		return false;
	return (uid_t)setfsuid((uid_t)-1) == o->euid && (gid_t)setfsgid((gid_t)-1) == o->egid;
}

static bool job_run(offload_t *o, offload_job_t *j)
{
	bool clean = true;

	if (atomic_load(&j->cancelled))
		return true;
	if (j->set_ids) {
		j->result = creds_enter(&j->creds);
		if (j->result >= 0)
			j->work(j->arg);
		clean = creds_leave(o);
	} else
		j->work(j->arg);
	return clean;
}

static void pool_destroy(offload_t *o)
{
	offload_job_t *j, *next;

	for (j = list_take(&o->done); j; j = next) {
		next = j->next;
		free(j);
	}
	pthread_mutex_destroy(&o->lock);
	pthread_cond_destroy(&o->wake);
	pthread_cond_destroy(&o->finished);
	free(o);
}

static void *thread_main(void *userdata)
{
	offload_t *o = userdata;
	offload_job_t *j;
	bool clean = true, last;

	pthread_mutex_lock(&o->lock);
	while (clean) {
		while (!o->queue.head && !o->shutdown)
			pthread_cond_wait(&o->wake, &o->lock);
		if (!(j = list_pop(&o->queue)))
			break;
		o->queued--;
		o->busy++;
		pthread_mutex_unlock(&o->lock);
		clean = job_run(o, j);
		pthread_mutex_lock(&o->lock);
		o->busy--;
		if (o->abandoned) {
			free(j); /* nobody will run its done: the daemon is exiting */
			continue;
		}
		list_push(&o->done, j);
		(void)eventfd_write(o->efd, 1); /* under the lock: efd is open */
		pthread_cond_broadcast(&o->finished);
	}
	o->n_threads--;
	last = o->abandoned && o->n_threads == 0;
	pthread_cond_broadcast(&o->finished);
	pthread_mutex_unlock(&o->lock);
	if (last)
		pool_destroy(o);
	return NULL;
}

/* Called with the lock held.  Signals stay blocked in helper threads: the loop's
 * signalfd only sees signals no thread accepts. */
static int thread_start(offload_t *o)
{
	sigset_t all, old;
	pthread_attr_t attr;
	pthread_t t;
	int q;

	sigfillset(&all);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 2 * 1024 * 1024); /* cJSON recurses */
	pthread_sigmask(SIG_SETMASK, &all, &old);
	q = pthread_create(&t, &attr, thread_main, o);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	if (q != 0)
		return -q;
	o->n_threads++;
	return 0;
}

/* ---------------------------------------------------------------- the loop's side */

static void deliver(offload_t *o)
{
	offload_job_t *j, *next;

	pthread_mutex_lock(&o->lock);
	j = list_take(&o->done);
	pthread_mutex_unlock(&o->lock);
	for (; j; j = next) {
		next = j->next;
		o->pending--;
		j->done(j->arg, atomic_load(&j->cancelled) ? -ECANCELED : j->result);
		free(j);
	}
}

static void on_efd(ev_io_t *w, int fd, uint32_t revents, void *userdata)
{
	eventfd_t v;

	(void)eventfd_read(fd, &v);
	deliver(userdata);
}

int offload_new(ev_t *e, unsigned max_threads, offload_t **ret)
{
	offload_t *o = calloc(1, sizeof(*o));
	pthread_condattr_t ca;
	int q;

	if (!o)
		return -ENOMEM;
	o->e = e;
	o->max_threads = MAX(max_threads, 1u);
	o->euid = geteuid();
	o->egid = getegid();
	o->n_groups = getgroups(MAX_GROUPS, o->groups);
	if (o->n_groups < 0)
		o->n_groups = 0;
	pthread_mutex_init(&o->lock, NULL);
	pthread_cond_init(&o->wake, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&o->finished, &ca);
	pthread_condattr_destroy(&ca);
	o->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (o->efd < 0) {
		q = -errno;
		pool_destroy(o);
		return q;
	}
	q = ev_io_add(e, o->efd, EV_READ, on_efd, o, &o->w);
	if (q < 0) {
		close(o->efd);
		pool_destroy(o);
		return q;
	}
	*ret = o;
	return 0;
}

int offload_submit(offload_t *o, const struct offload_creds *creds, offload_work_fn work,
                   offload_done_fn done, void *arg, offload_job_t **ret)
{
	offload_job_t *j;
	int q = 0;

	if (!o || !work || !done)
		return -EINVAL;
	j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	*j = (offload_job_t){.work = work, .done = done, .arg = arg};
	/* a daemon not running as root can only be the run's own user (conf.c) */
	if (creds && (o->euid == 0 || creds->uid != o->euid || creds->gid != o->egid)) {
		j->set_ids = true;
		j->creds = *creds;
	}
	pthread_mutex_lock(&o->lock);
	if (o->queued + 1 > o->n_threads - o->busy && o->n_threads < o->max_threads)
		q = thread_start(o);
	if (q < 0 && o->n_threads > 0)
		q = 0; /* the threads there will get to it */
	if (q >= 0) {
		list_push(&o->queue, j);
		o->queued++;
		pthread_cond_signal(&o->wake);
	}
	pthread_mutex_unlock(&o->lock);
	if (q < 0) {
		free(j);
		return q;
	}
	o->pending++;
	if (ret)
		*ret = j;
	return 0;
}

void offload_cancel(offload_job_t *j)
{
	if (j)
		atomic_store(&j->cancelled, true);
}

unsigned offload_pending(const offload_t *o)
{
	return o ? o->pending : 0;
}

static struct timespec mono_ts(usec_t u)
{
	return (struct timespec){.tv_sec = (time_t)(u / USEC_PER_SEC),
	                         .tv_nsec = (long)(u % USEC_PER_SEC) * 1000};
}

int offload_drain(offload_t *o, usec_t timeout)
{
	usec_t deadline = timeout == USEC_INFINITY ? USEC_INFINITY : time_mono() + timeout;

	for (;;) {
		deliver(o);
		if (o->pending == 0)
			return 0;
		pthread_mutex_lock(&o->lock);
		while (!o->done.head && time_mono() < deadline) {
			struct timespec ts = mono_ts(deadline);

			if (deadline == USEC_INFINITY)
				pthread_cond_wait(&o->finished, &o->lock);
			else
				pthread_cond_timedwait(&o->finished, &o->lock, &ts);
		}
		bool none = !o->done.head;
		pthread_mutex_unlock(&o->lock);
		if (none)
			return -ETIMEDOUT;
	}
}

offload_t *offload_free(offload_t *o)
{
	offload_job_t *j, *next;
	bool abandon;

	if (!o)
		return NULL;
	pthread_mutex_lock(&o->lock);
	j = list_take(&o->queue);
	o->queued = 0;
	o->shutdown = true;
	pthread_cond_broadcast(&o->wake);
	pthread_mutex_unlock(&o->lock);
	for (; j; j = next) { /* never started */
		next = j->next;
		o->pending--;
		j->done(j->arg, -ECANCELED);
		free(j);
	}
	deliver(o);
	o->w = ev_io_del(o->w);

	/* idle threads leave at once; busy ones may never come back */
	pthread_mutex_lock(&o->lock);
	while (o->n_threads > o->busy)
		pthread_cond_wait(&o->finished, &o->lock);
	abandon = o->n_threads > 0;
	if (abandon) {
		o->abandoned = true;
		o->efd = safe_close(o->efd);
	}
	pthread_mutex_unlock(&o->lock);
	if (abandon)
		return NULL; /* the last thread out frees it */
	deliver(o);
	o->efd = safe_close(o->efd);
	pool_destroy(o);
	return NULL;
}
