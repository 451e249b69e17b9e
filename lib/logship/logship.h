/* Shipping one run's log to the API: a bounded in-memory buffer, chunked
 * appends through the run's driver (drv_ops.log_append) at byte offsets,
 * resync to the server's length, a stop when the server takes no more, a
 * visible marker when bytes are dropped or the per-run cap is hit.  A driver
 * without DRV_CAP_LOG_OFFSETS gets its offsets counted here: no resync and no
 * restart marker.
 *
 * A slow API never blocks the child for long: when the buffer passes half its
 * size, logship asks the producer to pause (the pipe fills, the child waits)
 * until the buffer is down to a quarter -- at most max_stall in total over the
 * run's life.  After that budget, bytes that do not fit are dropped and
 * counted, and a marker line "[lessee: N bytes dropped: log shipping fell
 * behind]" takes their place in the stream once there is room again.  So a
 * burst against a healthy API loses nothing, and a slow API costs the run at
 * most max_stall. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ev/ev.h"
#include "proto/driver.h"

typedef struct logship logship_t;

struct logship_params {
	ev_t *ev;
	drv_t *drv;                /* whose log_append ships the bytes */
	drv_run_t *run;            /* the driver's run (owned by the caller, outlives ls) */
	const char *lease_key;     /* the lease's name, hashed into the restart marker */
	uint64_t max_log_bytes;    /* log kept at most, markers included; 0 = unlimited */
	size_t buffer_cap;         /* bytes held in memory; 0 = 4 MiB */
	size_t chunk_max;          /* bytes per append; 0 = 1 MiB */
	usec_t flush_interval;     /* 0 = 1 s */
	usec_t request_timeout;    /* 0 = 30 s */
	/* Pause (true) or resume (false) the producer; NULL = never pause. */
	void (*throttle)(void *ctx, bool pause);
	void *throttle_ctx;
	usec_t max_stall;          /* total pause allowed per run; 0 = 2 s */
	/* The execution's attempt number, for the restart marker; 0 = no marker:
	 * the server's log is taken as this execution's (see logship_new). */
	unsigned attempt;
	/* Resume a stream another logship began (a spooled tail): see logship_resume. */
	const struct logship_resume *resume;
};

#define LOGSHIP_MAYBE_MAX 8

/* Where a stream stands with the server, to be continued by another logship. */
struct logship_resume {
	uint64_t offset;  /* the stream's bytes that follow start here */
	bool synced;      /* offset is known to be the server's; else offset is 0 and
	                   * the first answer decides, as for a fresh execution */
	unsigned n_maybe; /* sizes of first appends that may have been applied */
	uint64_t maybe[LOGSHIP_MAYBE_MAX];
};

enum logship_event {
	LOGSHIP_LEASE_LOST, /* DRV_LOST: the run is no longer ours */
	LOGSHIP_FINISHED,   /* after logship_finish(): everything shipped or given up */
};
typedef void (*logship_event_cb)(logship_t *ls, enum logship_event event, void *userdata);

/* A fresh execution's log starts at offset 0.  When the first definitive
 * answer says the server already holds bytes (DRV_RESYNC with a non-zero length
 * that is not the size of one of our own unanswered first appends), they are
 * an earlier execution's: with p->attempt set, the stream continues after
 * them with the line "\n[lessee: attempt N, execution restarted (lease
 * XXXXXXXX)]\n" (a hash of the lease key), then this execution's bytes. */
int logship_new(const struct logship_params *p, logship_event_cb cb, void *userdata,
		logship_t **ret);
/* Never blocks, never fails: what does not fit is dropped and counted. */
void logship_write(logship_t *ls, const void *data, size_t len);
/* No more writes: ship the rest now, then LOGSHIP_FINISHED (possibly deferred). */
void logship_finish(logship_t *ls);
/* A line "[lessee: text]" into the stream, as the markers lessee writes
 * itself (text under 100 bytes: it fits the room max_log_bytes keeps). */
void logship_note(logship_t *ls, const char *text);
/* Stop sending for good (lease lost, hard stop); pending bytes are discarded. */
void logship_abandon(logship_t *ls);
logship_t *logship_free(logship_t *ls);
/* What the server still lacks (data valid until the next call into ls) and
 * where it goes; dropped bytes become their marker first.  For a hard stop:
 * the caller spools it, then abandons ls. */
void logship_unshipped(logship_t *ls, const void **data, size_t *len,
		       struct logship_resume *where);

struct logship_stats {
	uint64_t acked;     /* log length the server confirmed */
	uint64_t accepted;  /* bytes put into the stream, markers included */
	uint64_t dropped;   /* child bytes dropped because the buffer was full */
	uint64_t truncated; /* child bytes beyond max_log_bytes */
	bool server_limit;  /* the server takes no more (DRV_TOO_LARGE): shipping stopped */
	unsigned requests;
	unsigned retries;
	unsigned no_progress; /* answers that took nothing: sent again after a backoff */
	usec_t stalled;     /* how long the producer was paused, in total */
};
void logship_get_stats(const logship_t *ls, struct logship_stats *ret);
