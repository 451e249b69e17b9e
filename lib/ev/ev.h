/* The event loop: one thread, one loop.  fd watches (level-triggered), monotonic
 * timers (a heap), signals (signalfd), child exits (pidfd, SIGCHLD+waitid fallback),
 * deferred callbacks.  Backends: io_uring (liburing) first, epoll as fallback;
 * LESSEE_IO_BACKEND=io_uring|epoll forces one.
 *
 * Rules every user may rely on:
 *  - Removing any watch/timer/signal/child from inside any callback, including its
 *    own, is safe: no callback runs for it after removal returns.
 *  - Callbacks never run re-entrantly from inside an ev_* call other than
 *    ev_run()/ev_run_once().
 *  - All functions return >= 0 on success, -errno on failure. */
#pragma once

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/signalfd.h>
#include <sys/types.h>

#include "util/time.h"

typedef struct ev ev_t;
typedef struct ev_io ev_io_t;
typedef struct ev_timer ev_timer_t;
typedef struct ev_signal ev_signal_t;
typedef struct ev_child ev_child_t;

enum {
	EV_READ = 1u << 0,
	EV_WRITE = 1u << 1,
	/* reported only, never requested: */
	EV_ERROR = 1u << 2,
	EV_HUP = 1u << 3,
};

/* backend: NULL = honour $LESSEE_IO_BACKEND, else try io_uring then epoll.
 * "io_uring" or "epoll" forces one; a forced backend that fails is an error. */
int ev_new(ev_t **ret, const char *backend);
ev_t *ev_free(ev_t *e); /* removes and frees every remaining watch; NULL-safe */
const char *ev_backend(const ev_t *e); /* "io_uring" or "epoll" */
/* Is name one ev_new() takes ("io_uring", "epoll"; NULL or "" = the default)? */
bool ev_backend_known(const char *name);
/* Why the preferred backend was not used ("io_uring_queue_init: Operation not
 * permitted"), or NULL when it was. */
const char *ev_backend_reason(const ev_t *e);

/* Run until ev_exit(); returns the exit code given to ev_exit(). */
int ev_run(ev_t *e);
/* One iteration: wait at most timeout (USEC_INFINITY = block, 0 = poll), dispatch
 * everything ready.  Returns the number of callbacks dispatched, or -errno. */
int ev_run_once(ev_t *e, usec_t timeout);
void ev_exit(ev_t *e, int code);
/* The loop's cached CLOCK_MONOTONIC time, updated once per iteration. */
usec_t ev_now(ev_t *e);

/* fd watches, level-triggered.  events = EV_READ|EV_WRITE (0 = paused).
 * revents may add EV_ERROR / EV_HUP.  The fd is not owned: close it after
 * ev_io_del().  One watch per fd (-EEXIST); regular files and directories are
 * not pollable (-EPERM). */
typedef void (*ev_io_cb)(ev_io_t *w, int fd, uint32_t revents, void *userdata);
int ev_io_add(ev_t *e, int fd, uint32_t events, ev_io_cb cb, void *userdata, ev_io_t **ret);
int ev_io_set_events(ev_io_t *w, uint32_t events);
uint32_t ev_io_get_events(const ev_io_t *w);
ev_io_t *ev_io_del(ev_io_t *w); /* NULL-safe; returns NULL */

/* Timers on CLOCK_MONOTONIC.  A timer is created disarmed or armed and can be
 * re-armed any number of times; it fires once per arming. */
typedef void (*ev_timer_cb)(ev_timer_t *t, void *userdata);
/* Armed to fire `after` usec from now (USEC_INFINITY = created disarmed). */
int ev_timer_add(ev_t *e, usec_t after, ev_timer_cb cb, void *userdata, ev_timer_t **ret);
int ev_timer_arm(ev_timer_t *t, usec_t after);    /* relative to ev_now() */
int ev_timer_arm_at(ev_timer_t *t, usec_t mono); /* absolute CLOCK_MONOTONIC */
void ev_timer_disarm(ev_timer_t *t);
bool ev_timer_armed(const ev_timer_t *t);
usec_t ev_timer_deadline(const ev_timer_t *t); /* USEC_INFINITY if disarmed */
ev_timer_t *ev_timer_del(ev_timer_t *t);

/* Signals via signalfd.  ev_signal_add blocks the signal for the process (one
 * watch per signal); ev_signal_del discards instances still pending and unblocks
 * it again unless it was blocked before. */
typedef void (*ev_signal_cb)(ev_signal_t *s, const struct signalfd_siginfo *si, void *userdata);
int ev_signal_add(ev_t *e, int sig, ev_signal_cb cb, void *userdata, ev_signal_t **ret);
ev_signal_t *ev_signal_del(ev_signal_t *s);

/* Child exits.  pidfd >= 0: watched for readability then reaped with
 * waitid(P_PIDFD) (the watch does not own the pidfd).  pidfd < 0: reaped via the
 * SIGCHLD fallback.  The callback runs exactly once, with si_code CLD_EXITED /
 * CLD_KILLED / CLD_DUMPED and si_status; the watch is then inert (still free it
 * with ev_child_del).  Should the status be lost (waitid fails: someone else
 * reaped it), the callback still runs once, with si_code 0 and si_errno set. */
typedef void (*ev_child_cb)(ev_child_t *c, const siginfo_t *si, void *userdata);
int ev_child_add(ev_t *e, pid_t pid, int pidfd, ev_child_cb cb, void *userdata,
		 ev_child_t **ret);
ev_child_t *ev_child_del(ev_child_t *c);
/* Leave a watch without pidfd to the loop: the child is reaped when it exits,
 * quietly, and the watch freed then.  -EINVAL for a pidfd watch (its pidfd is
 * the owner's). */
int ev_child_forget(ev_child_t *c);

/* Subreaper mode (containers, PID 1): reap every exited child that has no
 * ev_child watch, so orphans never accumulate as zombies.  Installs the SIGCHLD
 * handling if it is not there yet. */
int ev_set_reap_orphans(ev_t *e, bool on);
/* Is every child reaped here, found by its pid when SIGCHLD comes (orphan
 * reaping on)?  Then a child needs no pidfd to be watched in O(1). */
bool ev_reaps_children(const ev_t *e);
/* How many orphans were reaped so far. */
uint64_t ev_orphans_reaped(const ev_t *e);

/* After every iteration that ran at least one callback (not counting this one):
 * work that follows activity, such as a status refresh, without a periodic
 * timer that would wake an idle loop.  One per loop; NULL removes it; -EBUSY if
 * another one is set.  (sd-event's post sources.) */
typedef void (*ev_post_cb)(ev_t *e, void *userdata);
int ev_post_set(ev_t *e, ev_post_cb cb, void *userdata);
/* How many iterations ran so far (each ev_run_once(), each turn of ev_run()). */
uint64_t ev_iterations(const ev_t *e);

/* Run cb once at the start of the next iteration (FIFO).  Keep the userdata alive
 * until it runs, or cancel it: ev_defer_cancel drops every pending (cb, userdata). */
typedef void (*ev_defer_cb)(void *userdata);
int ev_defer(ev_t *e, ev_defer_cb cb, void *userdata);
void ev_defer_cancel(ev_t *e, ev_defer_cb cb, void *userdata);
