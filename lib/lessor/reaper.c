#include "lessor/reaper.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "log/log.h"
#include "util/macro.h"

struct lessor_reaper {
	lessor_store *store;
	lessor_waiters *waiters;
	usec_t tick;
	pthread_t thread;
	atomic_bool stop;
};

static int64_t now_ms(void)
{
	return (int64_t)(time_real() / USEC_PER_MSEC);
}

static void housekeeping(lessor_reaper *r, int64_t *last)
{
	int64_t now = now_ms();
	bool wake = false;
	int k;

	k = lessor_store_tick(r->store, *last, now, &wake);
	if (k < 0) {
		log_error("housekeeping failed: %s, retrying next tick", strerror(-k));
		return;
	}
	*last = now;
	if (wake)
		lessor_waiters_wake(r->waiters, NULL, NULL);
}

static void *reaper_main(void *userdata)
{
	lessor_reaper *r = userdata;
	int64_t last = now_ms();
	usec_t next_tick = 0;

	while (!atomic_load(&r->stop)) {
		usec_t now = time_mono(), next;

		next = lessor_waiters_expire(r->waiters, now);
		if (now >= next_tick) {
			housekeeping(r, &last);
			next_tick = now + r->tick;
		}
		lessor_waiters_sleep(r->waiters, MIN(next, next_tick));
	}
	return NULL;
}

int lessor_reaper_start(lessor_store *s, lessor_waiters *w, usec_t tick, lessor_reaper **ret)
{
	lessor_reaper *r = calloc(1, sizeof(*r));
	int k;

	if (!r)
		return -ENOMEM;
	*r = (lessor_reaper){.store = s, .waiters = w, .tick = tick};
	atomic_init(&r->stop, false);
	k = pthread_create(&r->thread, NULL, reaper_main, r);
	if (k != 0) {
		free(r);
		return -k;
	}
	*ret = r;
	return 0;
}

lessor_reaper *lessor_reaper_stop(lessor_reaper *r)
{
	if (!r)
		return NULL;
	atomic_store(&r->stop, true);
	lessor_waiters_kick(r->waiters);
	pthread_join(r->thread, NULL);
	free(r);
	return NULL;
}
