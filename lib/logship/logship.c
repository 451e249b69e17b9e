#include "logship/logship.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/buf.h"
#include "util/macro.h"
#include "util/random.h"

#define DEFAULT_BUFFER_CAP (4u << 20)
#define DEFAULT_CHUNK_MAX (1u << 20)
#define RETRY_BASE (500 * USEC_PER_MSEC)
#define RETRY_CAP (30 * USEC_PER_SEC)
#define DEFAULT_MAX_STALL (2 * USEC_PER_SEC)

struct logship {
	ev_t *ev;
	drv_t *drv;
	drv_run_t *run;
	bool offsets;       /* the driver places appends by offset (DRV_CAP_LOG_OFFSETS) */
	char *token;        /* the lease key */
	uint64_t max_log_bytes;
	size_t buffer_cap, chunk_max;
	usec_t flush_interval, request_timeout;
	logship_event_cb cb;
	void *userdata;
	void (*throttle)(void *ctx, bool pause);
	void *throttle_ctx;
	usec_t max_stall;
	ev_timer_t *stall_timer;
	usec_t paused_at;
	bool paused;

	struct buf pending; /* stream bytes from offset `base` not yet confirmed */
	uint64_t base;
	drv_req_t *req;
	ev_timer_t *timer;  /* flush interval or retry backoff */
	unsigned attempt;   /* consecutive failed requests */

	size_t inflight_len;   /* bytes in the request in flight */
	unsigned attempt_no;   /* for the restart marker; 0 = none */
	bool synced;           /* base is known to match the server's log */
	unsigned n_maybe;      /* unanswered first appends that may have landed */
	uint64_t maybe[LOGSHIP_MAYBE_MAX];

	uint64_t unmarked_drops;
	uint64_t marked_at; /* where the truncation marker begins, once truncated_marked */
	char last_byte;
	bool finishing, done, abandoned, stopped, truncated_marked;
	struct logship_stats stats;
};

static void send_chunk(logship_t *ls);

static void resume(logship_t *ls)
{
	if (!ls->paused)
		return;
	ls->paused = false;
	ls->stats.stalled += ev_now(ls->ev) - ls->paused_at;
	ev_timer_disarm(ls->stall_timer);
	ls->throttle(ls->throttle_ctx, false);
}

/* Backpressure, within the run's stall budget. */
static void maybe_pause(logship_t *ls)
{
	if (!ls->throttle || ls->paused || ls->stats.stalled >= ls->max_stall ||
	    ls->pending.len < ls->buffer_cap / 2)
		return;
	ls->paused = true;
	ls->paused_at = ev_now(ls->ev);
	ev_timer_arm(ls->stall_timer, ls->max_stall - ls->stats.stalled);
	ls->throttle(ls->throttle_ctx, true);
}

static void on_stall_timer(ev_timer_t *t, void *userdata)
{
	resume(userdata); /* budget spent: from now on, drop instead of waiting */
}

static void emit_finished(logship_t *ls)
{
	if (!ls->finishing || ls->done)
		return;
	ls->done = true;
	ev_timer_disarm(ls->timer);
	ls->cb(ls, LOGSHIP_FINISHED, ls->userdata);
}

static void stream_append(logship_t *ls, const void *data, size_t len)
{
	if (len == 0 || buf_append(&ls->pending, data, len) < 0)
		return;
	ls->stats.accepted += len;
	ls->last_byte = ((const char *)data)[len - 1];
}

_printf_(2, 3) static void stream_marker(logship_t *ls, const char *fmt, ...)
{
	va_list ap;
	char line[160];
	size_t len = (size_t)snprintf(
	    line, sizeof(line), "%s[lessee: ", ls->last_byte && ls->last_byte != '\n' ? "\n" : "");
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line + len, sizeof(line) - len - 2, fmt, ap);
	va_end(ap);
	len += n < 0 ? 0 : MIN((size_t)n, sizeof(line) - len - 3);
	memcpy(line + len, "]\n", 2);
	stream_append(ls, line, len + 2);
}

static void flush_pending_drops(logship_t *ls)
{
	if (ls->unmarked_drops == 0)
		return;
	stream_marker(ls, "%" PRIu64 " bytes dropped: log shipping fell behind",
		      ls->unmarked_drops);
	ls->unmarked_drops = 0;
}

/* Send now when there is a full chunk or we are finishing; else within the
 * flush interval of the oldest unsent byte. */
static void schedule(logship_t *ls)
{
	if (ls->req || ls->abandoned || ls->stopped || ls->done)
		return;
	if (ls->pending.len == 0) {
		emit_finished(ls);
		return;
	}
	if (ls->finishing || ls->pending.len >= ls->chunk_max) {
		ev_timer_disarm(ls->timer);
		send_chunk(ls);
	} else if (!ev_timer_armed(ls->timer))
		ev_timer_arm(ls->timer, ls->flush_interval);
}

/* Room kept under max_log_bytes for the truncation marker (55 bytes at
 * most), a drop marker put in just before it (71) and a note (logship_note,
 * under 100). */
#define MARKER_ROOM 256

/* The log's length at the server once what is pending lands. */
static uint64_t stream_end(const logship_t *ls)
{
	return ls->base + ls->pending.len;
}

/* Where output stops: MARKER_ROOM short of max_log_bytes (set). */
static uint64_t output_limit(const logship_t *ls)
{
	return ls->max_log_bytes > MARKER_ROOM ? ls->max_log_bytes - MARKER_ROOM : 0;
}

/* How much of len bytes of output still fits max_log_bytes: the log as the
 * server keeps it, every execution and marker included, so that a server with
 * the same cap takes the truncation marker too. */
static size_t fits(const logship_t *ls, size_t len)
{
	uint64_t limit = output_limit(ls), end = stream_end(ls);

	if (!ls->max_log_bytes)
		return len;
	if (ls->truncated_marked)
		return 0;
	return end >= limit ? 0 : (size_t)MIN((uint64_t)len, limit - end);
}

/* The truncation marker, where the stream ends now. */
static void mark_truncated(logship_t *ls)
{
	ls->marked_at = stream_end(ls);
	stream_marker(ls, "log truncated at %" PRIu64 " bytes", ls->marked_at);
	ls->truncated_marked = true;
}

void logship_write(logship_t *ls, const void *data, size_t len)
{
	size_t take;

	if (ls->finishing || ls->abandoned || ls->stopped || len == 0)
		return;
	take = fits(ls, len);
	ls->stats.truncated += len - take;
	if (take > 0 && ls->pending.len + take > ls->buffer_cap) {
		ls->stats.dropped += take;
		ls->unmarked_drops += take;
	} else if (take > 0) {
		flush_pending_drops(ls);
		stream_append(ls, data, take);
		maybe_pause(ls);
	}
	if (take < len && !ls->truncated_marked) {
		flush_pending_drops(ls);
		mark_truncated(ls);
	}
	schedule(ls);
}

/* The server's length, known from an answer, may leave less room than the
 * output taken meanwhile: before the first answer of a re-executed run the
 * earlier executions' log was not counted.  What is over is cut here, and
 * the truncation marker still fits. */
static void trim_to_cap(logship_t *ls)
{
	uint64_t limit = output_limit(ls);
	size_t keep;

	/* a marker already in the stream is cut with the rest and put again */
	if (!ls->max_log_bytes || (ls->truncated_marked ? ls->marked_at : stream_end(ls)) <= limit)
		return;
	keep = ls->base < limit ? (size_t)(limit - ls->base) : 0;
	ls->stats.truncated += ls->pending.len - MIN(keep, ls->pending.len);
	if (keep < ls->pending.len) {
		ls->pending.len = keep;
		ls->pending.data[keep] = '\0';
	}
	mark_truncated(ls);
}

/* The server's length is authoritative: skip what it has, or note what it lost. */
static void resync(logship_t *ls, uint64_t server_len)
{
	uint64_t end = ls->base + ls->pending.len;

	if (server_len >= ls->base && server_len <= end) {
		buf_consume(&ls->pending, (size_t)(server_len - ls->base));
	} else if (server_len > end) {
		buf_reset(&ls->pending);
	} else {
		struct buf b = BUF_INIT(0);
		char line[128];
		int n = snprintf(line, sizeof(line),
				 "\n[lessee: %" PRIu64 " bytes lost: the server's log is shorter]\n",
				 ls->base - server_len);

		if (buf_append(&b, line, (size_t)n) >= 0 &&
		    buf_append(&b, ls->pending.data, ls->pending.len) >= 0) {
			ls->stats.accepted += (uint64_t)n;
			buf_done(&ls->pending);
			ls->pending = b;
		} else
			buf_done(&b);
	}
	ls->base = server_len;
	ls->stats.acked = server_len;
	if (ls->pending.len <= ls->buffer_cap / 4)
		resume(ls);
}

static uint32_t token_tag(const char *token)
{
	uint32_t h = 2166136261u;

	for (const unsigned char *p = (const unsigned char *)token; *p; p++)
		h = (h ^ *p) * 16777619u;
	return h;
}

/* Our own first append, answered too late for us to see? */
static bool maybe_ours(const logship_t *ls, uint64_t server_len)
{
	for (unsigned i = 0; i < ls->n_maybe; i++)
		if (ls->maybe[i] == server_len)
			return true;
	return false;
}

/* The first definitive answer of this execution: what the server holds
 * before it, if anything, is an earlier execution's. */
static void first_answer(logship_t *ls, bool resync_answer, uint64_t server_len)
{
	struct buf b = BUF_INIT(0);
	char line[128];
	int n;

	ls->synced = true;
	if (!resync_answer || server_len == 0 || ls->attempt_no == 0 || ls->base != 0 ||
	    maybe_ours(ls, server_len))
		return;
	n = snprintf(line, sizeof(line),
		     "\n[lessee: attempt %u, execution restarted (lease %08" PRIx32 ")]\n",
		     ls->attempt_no, token_tag(ls->token));
	if (buf_append(&b, line, (size_t)n) < 0 ||
	    buf_append(&b, ls->pending.data, ls->pending.len) < 0) {
		buf_done(&b);
		return;
	}
	ls->stats.accepted += (uint64_t)n;
	buf_done(&ls->pending);
	ls->pending = b;
	/* the stream moves to where the server's log ends, after the line */
	ls->marked_at += server_len + (uint64_t)n - ls->base;
	ls->base = server_len;
}

/* No definitive answer: the append may or may not have landed. */
static void note_maybe(logship_t *ls)
{
	if (ls->synced || ls->inflight_len == 0 || maybe_ours(ls, ls->inflight_len))
		return;
	if (ls->n_maybe == LOGSHIP_MAYBE_MAX)
		memmove(ls->maybe, ls->maybe + 1, sizeof(ls->maybe[0]) * --ls->n_maybe);
	ls->maybe[ls->n_maybe++] = ls->inflight_len;
}

static void retry_later(logship_t *ls, const struct drv_answer *a)
{
	ls->stats.retries++;
	ev_timer_arm(ls->timer, drv_retry_delay(a, ls->attempt++, RETRY_BASE, RETRY_CAP));
}

static void give_up(logship_t *ls, bool server_limit)
{
	ls->stopped = true;
	ls->stats.server_limit = server_limit;
	buf_reset(&ls->pending);
	emit_finished(ls);
}

/* A driver without offsets: what it took is what we sent. */
static void acked_locally(logship_t *ls)
{
	buf_consume(&ls->pending, MIN(ls->inflight_len, ls->pending.len));
	ls->base += ls->inflight_len;
	ls->stats.acked = ls->base;
	ls->synced = true;
	if (ls->pending.len <= ls->buffer_cap / 4)
		resume(ls);
}

/* What the server took of an append; false when it took nothing and bytes
 * wait (a 202 or 416 at the offset we sent from): sent again at once, they
 * would spin. */
static bool took(logship_t *ls, const struct drv_answer *a)
{
	uint64_t before = ls->base;
	size_t pending = ls->pending.len;

	if (!ls->offsets)
		acked_locally(ls);
	else {
		if (!ls->synced)
			first_answer(ls, a->verdict == DRV_RESYNC, a->length);
		resync(ls, a->length);
		trim_to_cap(ls);
	}
	return ls->base != before || ls->pending.len != pending || ls->pending.len == 0;
}

static void on_answer(const struct drv_answer *a, void *userdata)
{
	logship_t *ls = userdata;

	ls->req = NULL;
	switch (a->verdict) {
	case DRV_OK:
	case DRV_RESYNC:
		if (!took(ls, a)) {
			ls->stats.no_progress++;
			retry_later(ls, a);
			break;
		}
		ls->attempt = 0;
		schedule(ls);
		break;
	case DRV_LOST:
		logship_abandon(ls);
		ls->cb(ls, LOGSHIP_LEASE_LOST, ls->userdata);
		break;
	case DRV_TOO_LARGE:
		give_up(ls, true);
		break;
	case DRV_RETRY:
	case DRV_DENIED: /* the credentials may come back: keep the bytes */
		note_maybe(ls);
		retry_later(ls, a);
		break;
	default:
		give_up(ls, false); /* our request is wrong: resending cannot help */
		break;
	}
}

static void send_chunk(logship_t *ls)
{
	size_t n = MIN(ls->pending.len, ls->chunk_max);

	ls->stats.requests++;
	ls->inflight_len = n;
	if (drv_ops(ls->drv)->log_append(ls->drv, ls->run, ls->base, ls->pending.data, n,
					 ls->request_timeout, on_answer, ls, &ls->req) < 0) {
		ls->req = NULL;
		retry_later(ls, &(struct drv_answer){.verdict = DRV_RETRY, .error = -EIO});
	}
}

static void on_timer(ev_timer_t *t, void *userdata)
{
	logship_t *ls = userdata;

	if (!ls->req && ls->pending.len > 0 && !ls->abandoned && !ls->stopped)
		send_chunk(ls);
	else
		schedule(ls);
}

int logship_new(const struct logship_params *p, logship_event_cb cb, void *userdata,
		logship_t **ret)
{
	logship_t *ls = calloc(1, sizeof(*ls));
	int r;

	if (!ls)
		return -ENOMEM;
	*ls = (logship_t){
		.ev = p->ev,
		.drv = p->drv,
		.run = p->run,
		.offsets = drv_has(p->drv, DRV_CAP_LOG_OFFSETS),
		.token = strdup(p->lease_key ? p->lease_key : ""),
		.max_log_bytes = p->max_log_bytes,
		.buffer_cap = p->buffer_cap ? p->buffer_cap : DEFAULT_BUFFER_CAP,
		.chunk_max = MIN(p->chunk_max ? p->chunk_max : DEFAULT_CHUNK_MAX, DEFAULT_CHUNK_MAX),
		.flush_interval = p->flush_interval ? p->flush_interval : USEC_PER_SEC,
		.request_timeout = p->request_timeout ? p->request_timeout : 30 * USEC_PER_SEC,
		.cb = cb,
		.userdata = userdata,
		.throttle = p->throttle,
		.throttle_ctx = p->throttle_ctx,
		.max_stall = p->max_stall ? p->max_stall : DEFAULT_MAX_STALL,
	};
	ls->attempt_no = p->attempt;
	if (p->resume) {
		ls->base = ls->stats.acked = p->resume->offset;
		ls->synced = p->resume->synced;
		ls->n_maybe = MIN(p->resume->n_maybe, (unsigned)LOGSHIP_MAYBE_MAX);
		memcpy(ls->maybe, p->resume->maybe, sizeof(ls->maybe[0]) * ls->n_maybe);
	}
	if (!ls->token) {
		logship_free(ls);
		return -ENOMEM;
	}
	r = ev_timer_add(p->ev, USEC_INFINITY, on_timer, ls, &ls->timer);
	if (r >= 0)
		r = ev_timer_add(p->ev, USEC_INFINITY, on_stall_timer, ls, &ls->stall_timer);
	if (r < 0) {
		logship_free(ls);
		return r;
	}
	*ret = ls;
	return 0;
}

static void deferred_finish(void *userdata)
{
	logship_t *ls = userdata;

	if (ls->abandoned || ls->stopped)
		emit_finished(ls);
	else
		schedule(ls);
}

void logship_note(logship_t *ls, const char *text)
{
	if (ls->finishing || ls->abandoned || ls->stopped)
		return;
	flush_pending_drops(ls);
	stream_marker(ls, "%s", text);
	schedule(ls);
}

void logship_finish(logship_t *ls)
{
	if (ls->finishing)
		return;
	if (!ls->abandoned && !ls->stopped)
		flush_pending_drops(ls);
	ls->finishing = true;
	resume(ls);
	/* FINISHED never runs inside the caller's stack */
	ev_defer(ls->ev, deferred_finish, ls);
}

void logship_abandon(logship_t *ls)
{
	ls->abandoned = true;
	resume(ls);
	drv_cancel(ls->req);
	ls->req = NULL;
	ev_timer_disarm(ls->timer);
	buf_reset(&ls->pending);
}

logship_t *logship_free(logship_t *ls)
{
	if (!ls)
		return NULL;
	drv_cancel(ls->req);
	ev_timer_del(ls->timer);
	ev_timer_del(ls->stall_timer);
	ev_defer_cancel(ls->ev, deferred_finish, ls);
	buf_done(&ls->pending);
	if (ls->token)
		explicit_bzero(ls->token, strlen(ls->token));
	free(ls->token);
	free(ls);
	return NULL;
}

void logship_get_stats(const logship_t *ls, struct logship_stats *ret)
{
	*ret = ls->stats;
}

void logship_unshipped(logship_t *ls, const void **data, size_t *len,
		       struct logship_resume *where)
{
	if (!ls->abandoned && !ls->stopped)
		flush_pending_drops(ls);
	*data = ls->pending.data;
	*len = ls->pending.len;
	*where = (struct logship_resume){.offset = ls->base, .synced = ls->synced};
	where->n_maybe = ls->n_maybe;
	memcpy(where->maybe, ls->maybe, sizeof(where->maybe[0]) * ls->n_maybe);
}
