#include "lessor/waiters.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "util/macro.h"
#include "util/strutil.h"

/* The timer sleeps in epoll_wait on the kick (an eventfd, readable exactly
 * while `kicked`: both change under the lock) and on the sockets of the
 * watched waiters, each by its watch_id (the kick's is 0). */
struct lessor_waiters {
	pthread_mutex_t lock;
	int epfd, kickfd;
	struct lessor_waiter *head;
	size_t n;
	uint64_t gen;
	uint64_t last_watch_id;
	bool shutdown;
	bool kicked;
	usec_t sleeping_until;
};

#define HANGUPS_MAX 64 /* hang-ups handled per wake of the timer */

lessor_waiters *lessor_waiters_new(void)
{
	lessor_waiters *w = calloc(1, sizeof(*w));
	struct epoll_event ev = {.events = EPOLLIN, .data.u64 = 0};

	if (!w)
		return NULL;
	pthread_mutex_init(&w->lock, NULL);
	w->sleeping_until = USEC_INFINITY;
	w->epfd = w->kickfd = -1;
	w->epfd = epoll_create1(EPOLL_CLOEXEC);
	w->kickfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (w->epfd < 0 || w->kickfd < 0 || epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->kickfd, &ev) < 0)
		return lessor_waiters_free(w);
	return w;
}

lessor_waiters *lessor_waiters_free(lessor_waiters *w)
{
	if (!w)
		return NULL;
	safe_close(w->kickfd);
	safe_close(w->epfd);
	pthread_mutex_destroy(&w->lock);
	free(w);
	return NULL;
}

/* Under the lock: the timer wakes (once, until it has seen it). */
static void kick_locked(lessor_waiters *w)
{
	if (w->kicked)
		return;
	w->kicked = true;
	(void)!write(w->kickfd, &(uint64_t){1}, sizeof(uint64_t));
}

/* Under the lock.  A socket that cannot be watched is answered at its
 * deadline, as before watching. */
static void watch_locked(lessor_waiters *w, struct lessor_waiter *x)
{
	struct epoll_event ev = {.events = EPOLLRDHUP};

	x->watch_id = 0;
	if (!x->watch_hangup || x->fd < 0)
		return;
	ev.data.u64 = ++w->last_watch_id;
	if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, x->fd, &ev) == 0)
		x->watch_id = ev.data.u64;
}

uint64_t lessor_waiters_gen(lessor_waiters *w)
{
	uint64_t g;

	pthread_mutex_lock(&w->lock);
	g = w->gen;
	pthread_mutex_unlock(&w->lock);
	return g;
}

static void unlink_waiter(lessor_waiters *w, struct lessor_waiter *x)
{
	if (x->prev)
		x->prev->next = x->next;
	else
		w->head = x->next;
	if (x->next)
		x->next->prev = x->prev;
	x->prev = x->next = NULL;
	w->n--;
	/* before resume(): the socket is closed only after that */
	if (x->watch_id)
		(void)epoll_ctl(w->epfd, EPOLL_CTL_DEL, x->fd, NULL);
	x->watch_id = 0;
}

int lessor_waiters_park(lessor_waiters *w, struct lessor_waiter *x, uint64_t seen_gen,
                        void (*suspend)(void *userdata), void *userdata)
{
	int r = 0;

	pthread_mutex_lock(&w->lock);
	if (w->shutdown)
		r = -ESHUTDOWN;
	else if (seen_gen != LESSOR_GEN_ANY && seen_gen != w->gen)
		r = -EAGAIN;
	else {
		/* suspend before linking: no waker can resume what is not suspended yet */
		suspend(userdata);
		x->woken = false;
		x->gone = false;
		watch_locked(w, x);
		x->prev = NULL;
		x->next = w->head;
		if (w->head)
			w->head->prev = x;
		w->head = x;
		w->n++;
		if (x->deadline < w->sleeping_until)
			kick_locked(w);
	}
	pthread_mutex_unlock(&w->lock);
	return r;
}

typedef bool (*match_fn)(const struct lessor_waiter *x, const void *arg);

/* Unlinks every waiter that matches (under the lock) and resumes them after
 * (without it): resume() may run the request on another thread at once. */
static void resume_matching(lessor_waiters *w, match_fn match, const void *arg, bool woken,
                            bool bump_gen, bool gone)
{
	struct lessor_waiter *out = NULL, *x, *next;

	pthread_mutex_lock(&w->lock);
	if (bump_gen)
		w->gen++;
	for (x = w->head; x; x = next) {
		next = x->next;
		if (!match(x, arg))
			continue;
		unlink_waiter(w, x);
		x->woken = woken;
		x->gone = gone;
		x->next = out;
		out = x;
	}
	pthread_mutex_unlock(&w->lock);
	for (x = out; x; x = next) {
		next = x->next; /* x may be freed once resumed */
		x->next = NULL;
		x->resume(x->userdata);
	}
}

struct run_desc {
	const char *workflow;
	char *const *tags;
};

static bool match_run(const struct lessor_waiter *x, const void *arg)
{
	const struct run_desc *d = arg;

	if (!x->claim || x->no_runs)
		return false;
	if (!d->workflow)
		return true;
	if (x->workflows && !strv_contains(x->workflows, d->workflow))
		return false;
	for (size_t i = 0; d->tags && d->tags[i]; i++)
		if (!strv_contains(x->tags, d->tags[i]))
			return false;
	return true;
}

void lessor_waiters_wake(lessor_waiters *w, const char *workflow, char *const *tags)
{
	struct run_desc d = {workflow, tags};

	resume_matching(w, match_run, &d, true, true, false);
}

struct lessor_waiter *lessor_waiters_adopt(lessor_waiters *w, const char *workflow,
                                           char *const *tags)
{
	struct run_desc d = {workflow, tags};
	struct lessor_waiter *found = NULL;

	pthread_mutex_lock(&w->lock);
	/* parked at the head: the last match is the oldest */
	for (struct lessor_waiter *x = w->head; x; x = x->next)
		if (match_run(x, &d))
			found = x;
	if (found && !w->shutdown)
		unlink_waiter(w, found);
	else
		found = NULL;
	pthread_mutex_unlock(&w->lock);
	return found;
}

void lessor_waiters_resume(struct lessor_waiter *x)
{
	x->woken = true;
	x->gone = false;
	x->resume(x->userdata);
}

static bool match_held(const struct lessor_waiter *x, const void *arg)
{
	return x->claim && x->held && strv_contains(x->held, arg);
}

void lessor_waiters_wake_cancel(lessor_waiters *w, const char *id)
{
	resume_matching(w, match_held, id, true, true, false);
}

static bool match_claim_id(const struct lessor_waiter *x, const void *arg)
{
	return x->claim && x->claim_id && streq(x->claim_id, arg);
}

void lessor_waiters_wake_claim(lessor_waiters *w, const char *claim_id)
{
	resume_matching(w, match_claim_id, claim_id, true, true, false);
}

static bool match_due(const struct lessor_waiter *x, const void *arg)
{
	return x->deadline <= *(const usec_t *)arg;
}

usec_t lessor_waiters_expire(lessor_waiters *w, usec_t now)
{
	usec_t next = USEC_INFINITY;

	resume_matching(w, match_due, &now, false, false, false);
	pthread_mutex_lock(&w->lock);
	for (struct lessor_waiter *x = w->head; x; x = x->next)
		next = MIN(next, x->deadline);
	pthread_mutex_unlock(&w->lock);
	return next;
}

static bool match_all(const struct lessor_waiter *x, const void *arg)
{
	return true;
}

void lessor_waiters_shutdown(lessor_waiters *w)
{
	pthread_mutex_lock(&w->lock);
	w->shutdown = true;
	pthread_mutex_unlock(&w->lock);
	resume_matching(w, match_all, NULL, false, true, false);
}

size_t lessor_waiters_count(lessor_waiters *w)
{
	size_t n;

	pthread_mutex_lock(&w->lock);
	n = w->n;
	pthread_mutex_unlock(&w->lock);
	return n;
}

struct hangups {
	uint64_t ids[HANGUPS_MAX];
	size_t n;
};

static bool match_hung_up(const struct lessor_waiter *x, const void *arg)
{
	const struct hangups *h = arg;

	for (size_t i = 0; x->watch_id && i < h->n; i++)
		if (h->ids[i] == x->watch_id)
			return true;
	return false;
}

static int timeout_ms(usec_t until)
{
	usec_t now = time_mono();

	if (until <= now)
		return 0;
	return (int)MIN((until - now + USEC_PER_MSEC - 1) / USEC_PER_MSEC, (usec_t)3600 * 1000);
}

void lessor_waiters_sleep(lessor_waiters *w, usec_t until)
{
	struct epoll_event ev[HANGUPS_MAX];
	struct hangups h = {.n = 0};
	int n = 0;

	pthread_mutex_lock(&w->lock);
	if (!w->kicked) {
		w->sleeping_until = until;
		pthread_mutex_unlock(&w->lock);
		n = epoll_wait(w->epfd, ev, HANGUPS_MAX, timeout_ms(until));
		pthread_mutex_lock(&w->lock);
	}
	if (w->kicked) {
		uint64_t v;

		(void)!read(w->kickfd, &v, sizeof(v));
		w->kicked = false;
	}
	w->sleeping_until = USEC_INFINITY;
	pthread_mutex_unlock(&w->lock);
	for (int i = 0; i < n; i++)
		if (ev[i].data.u64 != 0)
			h.ids[h.n++] = ev[i].data.u64;
	if (h.n > 0)
		resume_matching(w, match_hung_up, &h, false, false, true);
}

void lessor_waiters_kick(lessor_waiters *w)
{
	pthread_mutex_lock(&w->lock);
	kick_locked(w);
	pthread_mutex_unlock(&w->lock);
}
