#include "lessor/waiters.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "util/macro.h"
#include "util/strutil.h"

struct lessor_waiters {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct lessor_waiter *head;
	size_t n;
	uint64_t gen;
	bool shutdown;
	bool kicked;
	usec_t sleeping_until;
};

lessor_waiters *lessor_waiters_new(void)
{
	lessor_waiters *w = calloc(1, sizeof(*w));
	pthread_condattr_t attr;

	if (!w)
		return NULL;
	pthread_mutex_init(&w->lock, NULL);
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&w->cond, &attr);
	pthread_condattr_destroy(&attr);
	w->sleeping_until = USEC_INFINITY;
	return w;
}

lessor_waiters *lessor_waiters_free(lessor_waiters *w)
{
	if (!w)
		return NULL;
	pthread_cond_destroy(&w->cond);
	pthread_mutex_destroy(&w->lock);
	free(w);
	return NULL;
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
		x->prev = NULL;
		x->next = w->head;
		if (w->head)
			w->head->prev = x;
		w->head = x;
		w->n++;
		if (x->deadline < w->sleeping_until) {
			w->kicked = true;
			pthread_cond_signal(&w->cond);
		}
	}
	pthread_mutex_unlock(&w->lock);
	return r;
}

typedef bool (*match_fn)(const struct lessor_waiter *x, const void *arg);

/* Unlinks every waiter that matches (under the lock) and resumes them after
 * (without it): resume() may run the request on another thread at once. */
static void resume_matching(lessor_waiters *w, match_fn match, const void *arg, bool woken,
                            bool bump_gen)
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

	resume_matching(w, match_run, &d, true, true);
}

static bool match_held(const struct lessor_waiter *x, const void *arg)
{
	return x->claim && x->held && strv_contains(x->held, arg);
}

void lessor_waiters_wake_cancel(lessor_waiters *w, const char *id)
{
	resume_matching(w, match_held, id, true, true);
}

static bool match_claim_id(const struct lessor_waiter *x, const void *arg)
{
	return x->claim && x->claim_id && streq(x->claim_id, arg);
}

void lessor_waiters_wake_claim(lessor_waiters *w, const char *claim_id)
{
	resume_matching(w, match_claim_id, claim_id, true, true);
}

static bool match_due(const struct lessor_waiter *x, const void *arg)
{
	return x->deadline <= *(const usec_t *)arg;
}

usec_t lessor_waiters_expire(lessor_waiters *w, usec_t now)
{
	usec_t next = USEC_INFINITY;

	resume_matching(w, match_due, &now, false, false);
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
	resume_matching(w, match_all, NULL, false, true);
}

size_t lessor_waiters_count(lessor_waiters *w)
{
	size_t n;

	pthread_mutex_lock(&w->lock);
	n = w->n;
	pthread_mutex_unlock(&w->lock);
	return n;
}

void lessor_waiters_sleep(lessor_waiters *w, usec_t until)
{
	struct timespec ts;

	until = MIN(until, time_mono() + USEC_PER_HOUR);
	ts = (struct timespec){.tv_sec = (time_t)(until / USEC_PER_SEC),
	                       .tv_nsec = (long)(until % USEC_PER_SEC) * 1000};
	pthread_mutex_lock(&w->lock);
	w->sleeping_until = until;
	while (!w->kicked)
		if (pthread_cond_timedwait(&w->cond, &w->lock, &ts) == ETIMEDOUT)
			break;
	w->kicked = false;
	w->sleeping_until = USEC_INFINITY;
	pthread_mutex_unlock(&w->lock);
}

void lessor_waiters_kick(lessor_waiters *w)
{
	pthread_mutex_lock(&w->lock);
	w->kicked = true;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}
