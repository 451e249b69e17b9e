/* epoll backend: level-triggered epoll, one registration per watch with interest.
 *
 * A paused watch (events == 0) is deleted from the epoll set rather than kept
 * with an empty mask, because epoll always reports EPOLLHUP/EPOLLERR and a paused
 * watch on a closed pipe would otherwise wake the loop forever. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/epoll.h>

#include "ev/ev-int.h"
#include "util/macro.h"

#define EPOLL_BATCH 128

struct epoll_be {
	ev_t *e;
	int fd;
	uint32_t next_gen;
	struct epoll_event events[EPOLL_BATCH];
};

static int epoll_init(ev_t *e, void **ret, const char **ret_what)
{
	struct epoll_be *be = calloc(1, sizeof(*be));

	if (!be) {
		*ret_what = "malloc";
		return -ENOMEM;
	}
	be->e = e;
	be->fd = epoll_create1(EPOLL_CLOEXEC);
	if (be->fd < 0) {
		int r = -errno;

		free(be);
		*ret_what = "epoll_create1";
		return r;
	}
	*ret = be;
	return 0;
}

static void epoll_done(void *p)
{
	struct epoll_be *be = p;

	safe_close(be->fd);
	free(be);
}

static int epoll_ctl_watch(struct epoll_be *be, int op, ev_io_t *w)
{
	struct epoll_event ev = {
	    .events =
	        ((w->events & EV_READ) ? EPOLLIN : 0u) | ((w->events & EV_WRITE) ? EPOLLOUT : 0u),
	    .data.u64 = (uint64_t)w->gen << 32 | (uint32_t)w->fd,
	};

	return epoll_ctl(be->fd, op, w->fd, &ev) < 0 ? -errno : 0;
}

static int epoll_io_add(void *p, ev_io_t *w)
{
	struct epoll_be *be = p;

	w->gen = ++be->next_gen;
	return w->events ? epoll_ctl_watch(be, EPOLL_CTL_ADD, w) : 0;
}

static int epoll_io_modify(void *p, ev_io_t *w, uint32_t old_events)
{
	struct epoll_be *be = p;

	if (!old_events)
		return epoll_io_add(be, w);
	if (!w->events)
		return epoll_ctl_watch(be, EPOLL_CTL_DEL, w);
	return epoll_ctl_watch(be, EPOLL_CTL_MOD, w);
}

static void epoll_io_remove(void *p, ev_io_t *w)
{
	/* ENOENT/EBADF when the fd was closed before its watch: nothing to undo. */
	if (w->events)
		(void)epoll_ctl_watch(p, EPOLL_CTL_DEL, w);
}

static uint32_t epoll_to_ev(uint32_t ep)
{
	return ((ep & EPOLLIN) ? EV_READ : 0u) | ((ep & EPOLLOUT) ? EV_WRITE : 0u) |
	       ((ep & EPOLLERR) ? EV_ERROR : 0u) | ((ep & EPOLLHUP) ? EV_HUP : 0u);
}

static int timeout_ms(usec_t timeout)
{
	if (timeout == USEC_INFINITY)
		return -1;
	/* Round up: waking before a timer's deadline would only spin. */
	return (int)MIN((timeout + USEC_PER_MSEC - 1) / USEC_PER_MSEC, (usec_t)INT_MAX);
}

static int epoll_wait_be(void *p, usec_t timeout)
{
	struct epoll_be *be = p;
	int n = epoll_wait(be->fd, be->events, EPOLL_BATCH, timeout_ms(timeout));

	if (n < 0)
		return errno == EINTR ? 0 : -errno;
	for (int i = 0; i < n; i++) {
		uint64_t data = be->events[i].data.u64;
		ev_io_t *w = ev_io_lookup(be->e, (int)(uint32_t)data);

		if (w && w->gen == (uint32_t)(data >> 32))
			ev_io_ready(be->e, w, epoll_to_ev(be->events[i].events));
	}
	return n;
}

const struct ev_backend ev_backend_epoll = {
    .name = "epoll",
    .init = epoll_init,
    .done = epoll_done,
    .io_add = epoll_io_add,
    .io_modify = epoll_io_modify,
    .io_remove = epoll_io_remove,
    .wait = epoll_wait_be,
};
