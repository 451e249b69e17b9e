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
 * user_data = gen << 32 | fd.  A watch's gen changes with every poll armed and is
 * cleared when its poll is cancelled, so completions of removed, re-armed or
 * re-added watches are recognised and dropped.  gen 0 is never armed: it tags
 * requests whose completions are ignored (poll removals, where -ENOENT and
 * -EALREADY are normal, and the startup NOP).
 *
 * Every SQE (arms, removals) is batched into the io_uring_enter() that waits. */
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

struct uring_be {
	ev_t *e;
	struct io_uring ring;
	uint32_t next_gen;
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

static int uring_smoke_test(struct uring_be *be)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&be->ring);
	struct io_uring_cqe *cqe;
	int r;

	io_uring_prep_nop(sqe);
	io_uring_sqe_set_data64(sqe, UD_IGNORE);
	r = io_uring_submit_and_wait(&be->ring, 1);
	if (r < 0)
		return r;
	r = io_uring_peek_cqe(&be->ring, &cqe);
	if (r < 0)
		return r;
	io_uring_cqe_seen(&be->ring, cqe);
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

static int uring_setup(struct uring_be *be, const char **ret_what)
{
	struct io_uring_params p = {.flags = IORING_SETUP_CQSIZE, .cq_entries = URING_CQ_ENTRIES};
	int r = io_uring_queue_init_params(URING_SQ_ENTRIES, &be->ring, &p);

	if (r < 0) {
		*ret_what = "io_uring_queue_init";
		return r;
	}
	/* Without NODROP a full CQ loses poll completions, i.e. loses events. */
	if (!(p.features & IORING_FEAT_NODROP)) {
		*ret_what = "io_uring_queue_init (no IORING_FEAT_NODROP)";
		r = -EOPNOTSUPP;
	} else if ((r = uring_check_ops(be)) < 0)
		*ret_what = "io_uring_register (probe for IORING_OP_POLL_ADD)";
	/* Some sandboxes allow io_uring_setup but not io_uring_enter. */
	else if ((r = uring_smoke_test(be)) < 0)
		*ret_what = "io_uring_enter";
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

static int uring_io_modify(void *p, ev_io_t *w, uint32_t old_events)
{
	struct uring_be *be = p;

	if (w->armed && w->armed != ev_to_poll(w->events))
		disarm(be, w);
	if (!w->events)
		dequeue_arm(w);
	else if (!w->armed)
		queue_arm(be, w);
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
	w = ev_io_lookup(be->e, (int)(uint32_t)ud);
	if (!w || w->gen != gen || !w->armed)
		return; /* stale: removed, re-armed or re-added since */
	w->armed = 0;
	if (cqe->res != -ECANCELED)
		ev_io_ready(be->e, w, cqe->res < 0 ? EV_ERROR : poll_to_ev(cqe->res));
	queue_arm(be, w);
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

static int uring_wait(void *p, usec_t timeout)
{
	struct uring_be *be = p;
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

const struct ev_backend ev_backend_uring = {
    .name = "io_uring",
    .init = uring_init,
    .done = uring_done,
    .io_add = uring_io_add,
    .io_modify = uring_io_modify,
    .io_remove = uring_io_remove,
    .wait = uring_wait,
};
