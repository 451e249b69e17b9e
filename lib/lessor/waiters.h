/* Parked requests: long-poll claims waiting for a run, and requests held by
 * an injected delay.  A parked request costs no thread: the HTTP layer
 * suspends the connection and the waker resumes it.
 *
 * Lost wake-ups are ruled out with a generation counter: a claimer reads
 * lessor_waiters_gen() BEFORE it looks for runs; lessor_waiters_park() refuses
 * (-EAGAIN) when any wake happened since, so the claimer looks again.  Every
 * waker commits its change first and wakes after.
 *
 * The waiters also own the timer the reaper thread sleeps on: deadlines of
 * parked requests and a kick when something changes. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/time.h"

typedef struct lessor_waiters lessor_waiters;

struct lessor_waiter {
	struct lessor_waiter *prev, *next; /* owned by the waiters list */
	usec_t deadline;                   /* CLOCK_MONOTONIC; resumed then at the latest */
	bool claim;                        /* woken by matching runs; false = timer only */
	char *const *workflows;            /* NULL = any workflow (borrowed) */
	char *const *tags;                 /* the claimer's tags (borrowed) */
	const char *claim_id;              /* borrowed */
	char *const *held;                 /* run ids whose cancel wakes it (borrowed), or NULL */
	bool no_runs;                      /* a claim for no runs: new runs do not wake it */
	void (*resume)(void *userdata);    /* called once, from any thread, lock not held */
	void *userdata;
	bool woken; /* set before resume: the wake-up was a match or a cancel, not the deadline */
	/* watch_hangup: fd is the client's socket, open until resumed; its peer
	 * closing resumes the waiter at once with gone set (nobody to answer) */
	bool watch_hangup;
	int fd;
	bool gone;
	uint64_t watch_id; /* the waiters' own, while watched (0: not) */
};

#define LESSOR_GEN_ANY UINT64_MAX

lessor_waiters *lessor_waiters_new(void);
/* All waiters must have been resumed (lessor_waiters_shutdown). */
lessor_waiters *lessor_waiters_free(lessor_waiters *w);

uint64_t lessor_waiters_gen(lessor_waiters *w);

/* Calls suspend(userdata) and links x, under the lock, unless a wake-up
 * happened since seen_gen (-EAGAIN; LESSOR_GEN_ANY never refuses) or the
 * waiters are shut down (-ESHUTDOWN).  x must stay valid until resumed. */
int lessor_waiters_park(lessor_waiters *w, struct lessor_waiter *x, uint64_t seen_gen,
                        void (*suspend)(void *userdata), void *userdata);

/* A run of `workflow` needing `tags` became claimable: resume every claim
 * waiter that could take it.  workflow NULL: resume every claim waiter. */
void lessor_waiters_wake(lessor_waiters *w, const char *workflow, char *const *tags);
/* The hand-off: unlinks, without resuming, the claim waiter parked longest
 * that could take a run of `workflow` needing `tags`, or returns NULL.  The
 * caller owns it until it passes it to lessor_waiters_resume(); neither a
 * wake, its deadline, a hang-up nor the shutdown resumes it meanwhile.  No
 * wake is recorded: the caller grants the run to it, or wakes as usual. */
struct lessor_waiter *lessor_waiters_adopt(lessor_waiters *w, const char *workflow,
                                           char *const *tags);
/* Resumes x (adopted), woken. */
void lessor_waiters_resume(struct lessor_waiter *x);
/* The run `id` was asked to cancel: resume the claim waiters that hold it. */
void lessor_waiters_wake_cancel(lessor_waiters *w, const char *id);
/* Resume the claim waiters of claim_id (the claim was cancelled). */
void lessor_waiters_wake_claim(lessor_waiters *w, const char *claim_id);
/* Resume waiters whose deadline passed; returns the next deadline or USEC_INFINITY. */
usec_t lessor_waiters_expire(lessor_waiters *w, usec_t now);
/* Resume everything now and refuse to park from now on. */
void lessor_waiters_shutdown(lessor_waiters *w);
size_t lessor_waiters_count(lessor_waiters *w);

/* The timer: sleep until `until` (monotonic), an earlier deadline being
 * parked, a kick, or a watched client hanging up (that waiter is resumed
 * here, gone). */
void lessor_waiters_sleep(lessor_waiters *w, usec_t until);
void lessor_waiters_kick(lessor_waiters *w);
