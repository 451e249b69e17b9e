/* io_uring backend: level-triggered fd watches from one-shot IORING_OP_POLL_ADD.
 *
 * Each watch with interest has at most one poll request in flight.  When it
 * completes, the watch is reported ready and queued for re-arming; the new poll
 * is prepared only at the start of the next wait(), i.e. after the callback ran,
 * so data the callback did not consume completes the new poll at once (level
 * semantics) while consumed data does not produce a spurious report.  Multishot
 * polls are deliberately not used: they fire on wake-ups, which is edge
 * semantics.
 *
 * user_data = gen << 32 | fd.  A watch's gen changes with every poll armed or
 * updated and is cleared when its poll is cancelled, so completions of removed,
 * re-armed or re-added watches are recognised and dropped.  gen 0 is never
 * armed: it tags requests whose completions are ignored (poll removals, where
 * -ENOENT and -EALREADY are normal, and the startup probe).
 *
 * A change of interest while a poll is in flight updates that poll in place
 * (POLL_REMOVE with IORING_POLL_UPDATE_*, Linux 5.13): one SQE instead of a
 * cancel plus a new poll.  The update carries the new gen with UD_UPDATE set;
 * if it fails (the poll had completed; its completion carries the old gen and
 * is dropped), the watch is re-armed, and level semantics report again.
 *
 * Every SQE (arms, updates, removals) is batched into the io_uring_enter()
 * that waits. */
#include <errno.h>
#include <liburing.h>
#include <poll.h>
#include <stdlib.h>

#include "ev/ev-int.h"
#include "util/macro.h"

#define URING_SQ_ENTRIES 256
#define URING_CQ_ENTRIES 4096
#define URING_REAP_BATCH 64
#define UD_IGNORE 0
#define UD_UPDATE (UINT64_C(1) << 31) /* fds are < 2^31 */
#define UD_PROBE UINT64_C(0x7fffffff) /* gen 0: matches no poll */
#define POLL_UPDATE_FLAGS (IORING_POLL_UPDATE_EVENTS | IORING_POLL_UPDATE_USER_DATA)

struct uring_be {
	ev_t *e;
	struct io_uring ring;
	uint32_t next_gen;
	unsigned reported; /* in this round */
	bool lost;         /* a readiness report was dropped: re-armed, not reported */
	LIST_HEAD(, ev_io) arm_queue;
};

static uint64_t watch_ud(const ev_io_t *w)
{
	return (uint64_t)w->gen << 32 | (uint32_t)w->fd;
}

static uint32_t new_gen(struct uring_be *be)
{
	if (++be->next_gen == 0)
		be->next_gen = 1;
	return be->next_gen;
}

static unsigned ev_to_poll(uint32_t events)
{
	return ((events & EV_READ) ? POLLIN : 0u) | ((events & EV_WRITE) ? POLLOUT : 0u);
}

static uint32_t poll_to_ev(int mask)
{
	return ((mask & POLLIN) ? EV_READ : 0u) | ((mask & POLLOUT) ? EV_WRITE : 0u) |
	       ((mask & POLLERR) ? EV_ERROR : 0u) | ((mask & POLLHUP) ? EV_HUP : 0u);
}

/* A free SQE; when the SQ is full, submit what is queued and retry once. */
static struct io_uring_sqe *get_sqe(struct uring_be *be)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&be->ring);

	if (!sqe && io_uring_submit(&be->ring) >= 0)
		sqe = io_uring_get_sqe(&be->ring);
	return sqe;
}

/* A round trip through io_uring_enter (some sandboxes allow io_uring_setup but
 * not io_uring_enter), asking to update a poll that does not exist: a kernel
 * that can update polls in place answers -ENOENT. */
static int uring_smoke_test(struct uring_be *be, const char **ret_what)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&be->ring);
	struct io_uring_cqe *cqe;
	int r;

	io_uring_prep_poll_update(sqe, UD_PROBE, UD_PROBE, POLLIN, POLL_UPDATE_FLAGS);
	io_uring_sqe_set_data64(sqe, UD_IGNORE);
	r = io_uring_submit_and_wait(&be->ring, 1);
	if (r >= 0)
		r = io_uring_peek_cqe(&be->ring, &cqe);
	if (r < 0) {
		*ret_what = "io_uring_enter";
		return r;
	}
	r = cqe->res;
	io_uring_cqe_seen(&be->ring, cqe);
	if (r != -ENOENT) {
		*ret_what = "io_uring poll update (Linux 5.13)";
		return -EOPNOTSUPP;
	}
	return 0;
}

static int uring_check_ops(struct uring_be *be)
{
	struct io_uring_probe *probe = io_uring_get_probe_ring(&be->ring);
	bool ok;

	if (!probe)
		return -EOPNOTSUPP;
	ok = io_uring_opcode_supported(probe, IORING_OP_POLL_ADD) &&
	     io_uring_opcode_supported(probe, IORING_OP_POLL_REMOVE);
	io_uring_free_probe(probe);
	return ok ? 0 : -EOPNOTSUPP;
}

/* Newest first; an older kernel refuses unknown flags with EINVAL.
 * DEFER_TASKRUN (6.1, with SINGLE_ISSUER 6.0): completions are posted only when
 * the loop enters the kernel to wait, i.e. in batches, not by interrupting it;
 * every wait here enters with GETEVENTS, so none is missed.  COOP_TASKRUN
 * (5.19): no IPI to interrupt the loop for completion work.  SUBMIT_ALL
 * (5.18): one bad SQE does not hold back the rest of the batch. */
static const unsigned setup_flags[] = {
    IORING_SETUP_SUBMIT_ALL | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN,
    IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN,
    0,
};

static int uring_queue_init(struct uring_be *be)
{
	int r = -EINVAL;

	for (size_t i = 0; i < ELEMENTSOF(setup_flags) && r == -EINVAL; i++) {
		struct io_uring_params p = {.flags = IORING_SETUP_CQSIZE | setup_flags[i],
		                            .cq_entries = URING_CQ_ENTRIES};

		r = io_uring_queue_init_params(URING_SQ_ENTRIES, &be->ring, &p);
		if (r >= 0 && !(p.features & IORING_FEAT_NODROP)) {
			io_uring_queue_exit(&be->ring);
			return -EOPNOTSUPP;
		}
	}
	return r;
}

static int uring_setup(struct uring_be *be, const char **ret_what)
{
	int r = uring_queue_init(be);

	/* Without NODROP a full CQ loses poll completions, i.e. loses events. */
	if (r == -EOPNOTSUPP) {
		*ret_what = "io_uring_queue_init (no IORING_FEAT_NODROP)";
		return r;
	}
	if (r < 0) {
		*ret_what = "io_uring_queue_init";
		return r;
	}
	/* Saves a file table lookup per io_uring_enter (5.18); optional. */
	(void)io_uring_register_ring_fd(&be->ring);
	if ((r = uring_check_ops(be)) < 0)
		*ret_what = "io_uring_register (probe for IORING_OP_POLL_ADD)";
	else
		r = uring_smoke_test(be, ret_what);
	if (r < 0)
		io_uring_queue_exit(&be->ring);
	return r;
}

static int uring_init(ev_t *e, void **ret, const char **ret_what)
{
	struct uring_be *be = calloc(1, sizeof(*be));
	int r;

	if (!be) {
		*ret_what = "malloc";
		return -ENOMEM;
	}
	be->e = e;
	LIST_INIT(&be->arm_queue);
	r = uring_setup(be, ret_what);
	if (r < 0) {
		free(be);
		return r;
	}
	*ret = be;
	return 0;
}

static void uring_done(void *p)
{
	struct uring_be *be = p;

	/* Closing the ring cancels every poll still in flight. */
	io_uring_queue_exit(&be->ring);
	free(be);
}

static void queue_arm(struct uring_be *be, ev_io_t *w)
{
	if (w->arm_queued || !w->events)
		return;
	LIST_INSERT_HEAD(&be->arm_queue, w, arm_link);
	w->arm_queued = true;
}

static void dequeue_arm(ev_io_t *w)
{
	if (!w->arm_queued)
		return;
	LIST_REMOVE(w, arm_link);
	w->arm_queued = false;
}

/* Cancel the poll in flight.  Its completion (-ECANCELED or a late readiness
 * report) no longer matches w->gen and is dropped. */
static void disarm(struct uring_be *be, ev_io_t *w)
{
	struct io_uring_sqe *sqe;

	if (!w->armed)
		return;
	sqe = get_sqe(be);
	/* With no SQE even after submitting, the poll stays until it fires or the
	 * ring closes; its completion is still dropped. */
	if (sqe) {
		io_uring_prep_poll_remove(sqe, watch_ud(w));
		io_uring_sqe_set_data64(sqe, UD_IGNORE);
	}
	w->armed = 0;
	w->gen = 0;
}

static int uring_io_add(void *p, ev_io_t *w)
{
	w->gen = 0;
	w->armed = 0;
	queue_arm(p, w);
	return 0;
}

/* Change the mask of the poll in flight; false if no SQE could be had. */
static bool update(struct uring_be *be, ev_io_t *w, unsigned mask)
{
	struct io_uring_sqe *sqe = get_sqe(be);
	uint64_t old;

	if (!sqe)
		return false;
	old = watch_ud(w);
	w->gen = new_gen(be);
	w->armed = mask;
	io_uring_prep_poll_update(sqe, old, watch_ud(w), mask,
	                          IORING_POLL_UPDATE_EVENTS | IORING_POLL_UPDATE_USER_DATA);
	io_uring_sqe_set_data64(sqe, watch_ud(w) | UD_UPDATE);
	return true;
}

static int uring_io_modify(void *p, ev_io_t *w, uint32_t old_events)
{
	struct uring_be *be = p;
	unsigned mask = ev_to_poll(w->events);

	if (!w->events) {
		disarm(be, w);
		dequeue_arm(w);
	} else if (!w->armed)
		queue_arm(be, w);
	else if (w->armed != mask && !update(be, w, mask)) {
		disarm(be, w);
		queue_arm(be, w);
	}
	return 0;
}

static void uring_io_remove(void *p, ev_io_t *w)
{
	disarm(p, w);
	dequeue_arm(w);
}

static int flush_arms(struct uring_be *be)
{
	ev_io_t *w;

	while ((w = LIST_FIRST(&be->arm_queue))) {
		struct io_uring_sqe *sqe = get_sqe(be);

		if (!sqe)
			return -EBUSY; /* stays queued, retried on the next wait */
		dequeue_arm(w);
		w->gen = new_gen(be);
		w->armed = ev_to_poll(w->events);
		io_uring_prep_poll_add(sqe, w->fd, w->armed);
		io_uring_sqe_set_data64(sqe, watch_ud(w));
	}
	return 0;
}

static void complete(struct uring_be *be, const struct io_uring_cqe *cqe)
{
	uint64_t ud = io_uring_cqe_get_data64(cqe);
	uint32_t gen = (uint32_t)(ud >> 32);
	ev_io_t *w;

	if (gen == 0)
		return;
	w = ev_io_lookup(be->e, (int)(uint32_t)(ud & ~UD_UPDATE));
	if (!w || w->gen != gen || !w->armed)
		return; /* stale: removed, re-armed, updated or re-added since */
	if (ud & UD_UPDATE) {
		/* -ENOENT/-EALREADY: the poll completed before the update got
		 * to it.  Nothing is in flight for this gen: arm afresh. */
		if (cqe->res < 0) {
			w->armed = 0;
			queue_arm(be, w);
			be->lost = true;
		}
		return;
	}
	w->armed = 0;
	queue_arm(be, w);
	if (cqe->res == -ECANCELED) {
		be->lost = true;
		return;
	}
	ev_io_ready(be->e, w, cqe->res < 0 ? EV_ERROR : poll_to_ev(cqe->res));
	be->reported++;
}

static void reap(struct uring_be *be)
{
	struct io_uring_cqe *cqes[URING_REAP_BATCH];
	unsigned n;

	/* peek_batch also flushes CQEs the kernel held back on CQ overflow. */
	while ((n = io_uring_peek_batch_cqe(&be->ring, cqes, URING_REAP_BATCH)) > 0) {
		for (unsigned i = 0; i < n; i++)
			complete(be, cqes[i]);
		io_uring_cq_advance(&be->ring, n);
	}
}

static int submit_and_wait(struct uring_be *be, usec_t timeout)
{
	struct io_uring_cqe *cqe;
	struct __kernel_timespec ts;

	if (timeout == 0)
		return io_uring_submit_and_get_events(&be->ring);
	if (timeout == USEC_INFINITY)
		return io_uring_submit_and_wait(&be->ring, 1);
	ts.tv_sec = (long long)(timeout / USEC_PER_SEC);
	ts.tv_nsec = (long long)(timeout % USEC_PER_SEC) * 1000;
	return io_uring_submit_and_wait_timeout(&be->ring, &cqe, 1, &ts, NULL);
}

static int wait_round(struct uring_be *be, usec_t timeout)
{
	int r;

	/* Watches left unarmed (no SQE even after submitting) must not sleep
	 * through their events: wait briefly and retry on the next round. */
	if (flush_arms(be) < 0)
		timeout = MIN(timeout, USEC_PER_MSEC);
	r = submit_and_wait(be, timeout);
	/* ETIME: timed out; EINTR: a signal; EBUSY/EAGAIN: the kernel wants the CQ
	 * drained first.  In all of these, reap what is there and go on. */
	if (r < 0 && r != -ETIME && r != -EINTR && r != -EBUSY && r != -EAGAIN)
		return r;
	reap(be);
	return 0;
}

static int uring_wait(void *p, usec_t timeout)
{
	struct uring_be *be = p;
	int r;

	be->reported = 0;
	be->lost = false;
	r = wait_round(be, timeout);
	/* Woken only by completions that were dropped (an update that lost the
	 * race with its poll's completion): the re-armed polls answer at once if
	 * their fds are ready, so ask them now rather than return empty-handed. */
	if (r >= 0 && be->reported == 0 && be->lost)
		r = wait_round(be, 0);
	return r;
}

const struct ev_backend ev_backend_uring = {
    .name = "io_uring",
    .init = uring_init,
    .done = uring_done,
    .io_add = uring_io_add,
    .io_modify = uring_io_modify,
    .io_remove = uring_io_remove,
    .wait = uring_wait,
};
