/* Work a child can make slow, off the loop: reading a run's result file,
 * removing its directory, reaping a process that ignores SIGKILL for a while.
 *
 * A few helper threads (started on demand, up to max_threads) take jobs from a
 * FIFO queue.  A job's work function runs on a helper thread and must not touch
 * loop state; its done function runs afterwards on the loop (the threads wake
 * the loop through an eventfd watched with ev_io), exactly once per job.
 *
 * A job may run with the file-system identity of a user (creds): the helper
 * thread switches its own fsuid, fsgid and supplementary groups (raw
 * syscalls, which are per thread; glibc's setgroups() would change every
 * thread of the process) before the work and back after it, so a run with
 * user= never gets the daemon to open what that user could not open.
 *
 * All functions return >= 0 on success, -errno on failure. */
#pragma once

#include <stdbool.h>
#include <sys/types.h>

#include "ev/ev.h"

typedef struct offload offload_t;
typedef struct offload_job offload_job_t;

/* On a helper thread. */
typedef void (*offload_work_fn)(void *arg);
/* On the loop, once: r = 0 after the work ran; -ECANCELED after
 * offload_cancel() or offload_free() (the work may or may not have run: free
 * arg, touch nothing else); another -errno when the identity switch failed
 * (the work did not run). */
typedef void (*offload_done_fn)(void *arg, int r);

struct offload_creds {
	uid_t uid;
	gid_t gid; /* fsgid, and the only supplementary group (as lib/exec's set_ids) */
};

int offload_new(ev_t *e, unsigned max_threads, offload_t **ret);
/* Queue a job.  creds NULL = the daemon's own identity.  *ret (optional) stays
 * valid until done has been called. */
int offload_submit(offload_t *o, const struct offload_creds *creds, offload_work_fn work,
                   offload_done_fn done, void *arg, offload_job_t **ret);
/* done will get -ECANCELED; a job that has not started is skipped.  NULL-safe.
 * Only until done has run. */
void offload_cancel(offload_job_t *j);
/* Jobs whose done has not run yet. */
unsigned offload_pending(const offload_t *o);
/* Block (at exit, not from a loop callback that must stay fast) until every job
 * is done, running the done functions, at most timeout: 0 or -ETIMEDOUT. */
int offload_drain(offload_t *o, usec_t timeout);
/* Jobs not started are cancelled (done runs with -ECANCELED, here).  Threads
 * still inside a job (a reaping wait on a process in uninterruptible sleep, a
 * hung file system) are abandoned: their done never runs and the last of them
 * frees the pool.  NULL-safe. */
offload_t *offload_free(offload_t *o);
