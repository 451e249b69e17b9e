/* Private to lib/ev: the fd watch as backends see it, and the backend table.
 *
 * The core (ev.c) owns watch bookkeeping, timers, deferred callbacks, signals,
 * children and dispatch.  A backend only turns fd interest on/off and waits; when
 * it learns that a watch is ready it calls ev_io_ready(), and the core dispatches
 * after the wait returns.  Backends find watches by fd (ev_io_lookup) and tell
 * stale reports apart with the watch's generation number. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/queue.h>

#include "ev/ev.h"

struct ev_io {
	ev_t *e;
	int fd;
	uint32_t events; /* what the user asked for: EV_READ|EV_WRITE, 0 = paused */
	ev_io_cb cb;
	void *userdata;
	bool dead;           /* removed; freed at the end of the iteration */
	bool internal;       /* the loop's own watch (signalfd, pidfd): not counted */
	uint32_t revents;    /* reported in this iteration, not yet dispatched */
	ev_io_t *next_ready; /* the ready list (revents != 0) */
	ev_io_t *next_dead;  /* removed during an iteration, freed at its end */

	/* Backend state.  gen identifies one kernel registration (epoll) or one
	 * armed poll request (io_uring); reports carrying another gen are stale. */
	uint32_t gen;
	uint32_t armed;  /* io_uring: poll mask of the request in flight, 0 = none */
	bool arm_queued; /* io_uring: on the list of polls to submit */
	LIST_ENTRY(ev_io) arm_link;
};

struct ev_backend {
	const char *name;
	/* On failure *ret_what names the call that failed, for ev_backend_reason(). */
	int (*init)(ev_t *e, void **ret, const char **ret_what);
	void (*done)(void *be);
	/* w->events is already the new interest; 0 means no kernel interest. */
	int (*io_add)(void *be, ev_io_t *w);
	int (*io_modify)(void *be, ev_io_t *w, uint32_t old_events);
	void (*io_remove)(void *be, ev_io_t *w);
	/* Wait at most timeout (0 = poll, USEC_INFINITY = block), report ready fds
	 * with ev_io_ready().  An interrupted wait is not an error. */
	int (*wait)(void *be, usec_t timeout);
};

extern const struct ev_backend ev_backend_epoll;
extern const struct ev_backend ev_backend_uring;

/* The live watch on fd, or NULL. */
ev_io_t *ev_io_lookup(ev_t *e, int fd);
/* Called by a backend from wait(): w is ready with revents (EV_*). */
void ev_io_ready(ev_t *e, ev_io_t *w, uint32_t revents);

/* For tests: how many entries the child lookups by pid have visited so far
 * (adding a child, finding an exited one): constant per lookup, whatever the
 * number of children. */
uint64_t ev_pid_probes(const ev_t *e);

/* For tests: how many times the blocked set and the signalfd's mask were set
 * (a sigprocmask and a signalfd call): only when the watched signals change. */
uint64_t ev_sig_applies(const ev_t *e);
