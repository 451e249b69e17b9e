/* The protocol-driver layer: one operations table per orchestration API, as
 * lib/ev has one per loop backend.  The worker (lib/worker) talks to the API
 * only through this table: it never builds a URL, never reads an HTTP status,
 * never sees a request body.  Every answer comes back as a normalised verdict.
 *
 *   native     protocol v1 (docs/protocol.md), spoken by lessor
 *   conductor  Netflix/Orkes Conductor's task API (docs/conductor.md)
 *   camunda7   Camunda 7 / Operaton / CIB seven external tasks (docs/camunda7.md)
 *
 * A driver instance (drv_t) owns its HTTP client, its credentials and the
 * accounting every request gets (lessee_api_requests_total by endpoint and
 * code, the request duration histogram, the readiness and credential state).
 * Per-run driver data (drv_run_t) is opaque to the worker: the driver makes it
 * when it parses a claim answer (or restores it from a spooled completion)
 * and frees it in run_free.
 *
 * Callbacks run exactly once from the loop, unless the request is cancelled
 * first with drv_cancel(); none runs from inside the call that started it. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ev/ev.h"
#include "util/time.h"

/* Connections to the API at once, at most: more requests wait for one (a
 * run's log, renewals and completions share them; sockets stay bounded
 * whatever the number of runs). */
#define DRV_MAX_CONNECTIONS 128

struct conf;
typedef struct metrics metrics_t;

typedef struct drv drv_t;
typedef struct drv_run drv_run_t; /* per-run driver data, opaque */
typedef struct drv_req drv_req_t; /* a request in flight, for drv_cancel() */

/* What the API's answer means to the worker. */
enum drv_verdict {
	DRV_OK,      /* done; see the answer's fields */
	DRV_LOST,    /* the run is not ours any more (the lease is gone, the task was
		      * cancelled, completed elsewhere or re-locked): kill at once, write
		      * nothing more about it */
	DRV_RETRY,   /* transient (transport error, 5xx, 408, 429, ...): try again;
		      * retry_after is the server's hint (0 = none) */
	DRV_REFUSED, /* the API refuses this request for good (our request is wrong) */
	DRV_DENIED,  /* the API refuses our credentials (after the driver's own
		      * re-authentication, where it has one) */
	DRV_TOO_LARGE, /* log append only: the server will take no more of this log */
	DRV_RESYNC,  /* log append only: the server holds `length` bytes, not what we
		      * assumed; continue from there (drivers with DRV_CAP_LOG_OFFSETS) */
};

/* A driver's capabilities: what the worker may rely on. */
enum {
	DRV_CAP_LOG_OFFSETS = 1u << 0,      /* log appends are placed by byte offset: resync,
	                                     * restart markers, exact lengths */
	DRV_CAP_IDEMPOTENT_CLAIM = 1u << 1, /* a repeated claim gets the same runs */
	DRV_CAP_CLAIM_CANCEL = 1u << 2,     /* an open claim can be cancelled on the server */
	DRV_CAP_SERVER_CANCEL = 1u << 3,    /* claims name held leases and carry cancel events */
	DRV_CAP_SERVER_TTL = 1u << 4,       /* the server decides the lease ttl (else the
	                                     * worker's lease_ttl, or the task's own timeout) */
	DRV_CAP_MULTI_WORKFLOW = 1u << 5,   /* one claim covers several workflows; without
	                                     * it the worker claims per workflow */
	DRV_CAP_RELEASE = 1u << 6,          /* a run can be given back unstarted */
	DRV_CAP_LOG_LENGTH = 1u << 7,       /* the completion carries the log's length */
	DRV_CAP_COMPLETE_CLAIM = 1u << 8,   /* a completion can carry a claim whose
	                                     * answer comes with the completion's
	                                     * (complete_claim; the API may not know it) */
};

/* Every answer.  Only the fields of the operation at hand are meaningful. */
struct drv_answer {
	enum drv_verdict verdict;
	usec_t retry_after;      /* DRV_RETRY: the server's Retry-After, 0 = none */
	int error;               /* transport error (-ETIMEDOUT, ...), 0 = the API answered */
	usec_t elapsed;          /* how long the request took */
	char detail[160];        /* for logs: "HTTP 503", "connection refused", the
				  * server's own error text (capped) */
	/* renew */
	unsigned ttl_s;          /* DRV_OK: the lease's ttl from the server's grant */
	bool cancel;             /* DRV_OK: the API asks to cancel the run */
	/* log append */
	uint64_t length;         /* DRV_OK, DRV_RESYNC: the log's length on the server */
	unsigned code;           /* log append, first answers: 202 (empty) or 416, for
				  * logship's restart detection; 0 = not known */
	/* complete */
	char run_status[32];     /* DRV_OK: what the API now says of the run, "" = unknown */
};

typedef void (*drv_cb)(const struct drv_answer *a, void *userdata);

/* A run the API granted.  Strings are owned by the grant (taken by the
 * worker with TAKE_PTR, or freed by drv_grant_done). */
struct drv_grant {
	char *id;          /* the run's id (native: run id; conductor: taskId) */
	char *workflow;    /* the configured workflow it belongs to */
	unsigned attempt;  /* 1-based */
	unsigned ttl_s;    /* the lease's ttl as granted */
	char *input;       /* JSON text, "null" when absent */
	size_t input_len;
	unsigned timeout_s; /* the run's own timeout, 0 = not given */
	char **env;        /* extra "NAME=value" for the run (driver specific), or NULL */
	/* Set when the run is unusable (bad field); it can still be completed as
	 * rejected when usable_for_reject is true. */
	char *invalid;
	bool usable_for_reject;
	/* A short stable name of this lease (never sent anywhere by the worker):
	 * two grants of one run id differ in it; hashed into spool entry names and
	 * the log's restart marker.  native: the token; conductor: the taskId. */
	char *lease_key;
	drv_run_t *priv;   /* the driver's per-run data; NULL for unusable runs */
};

struct drv_held {
	const char *id;
	drv_run_t *priv;
};

struct drv_claim {
	unsigned max_runs;        /* 1..256; 0 only with held (DRV_CAP_SERVER_CANCEL) */
	char *const *workflows;   /* configured workflow names; without
				   * DRV_CAP_MULTI_WORKFLOW exactly one */
	char *const *tags;        /* worker.tags */
	unsigned lease_ttl_s;     /* worker.lease_ttl */
	usec_t wait;              /* long poll, 0 = none */
	usec_t timeout;           /* the whole request */
	size_t max_response;      /* answer cap */
	size_t max_input;         /* a run's input cap */
	bool repeat;              /* the previous claim got no definitive answer:
				   * ask again for the same (DRV_CAP_IDEMPOTENT_CLAIM) */
	bool send_held;           /* name the held leases (DRV_CAP_SERVER_CANCEL) */
	const struct drv_held *held;
	size_t n_held;
	char *claim_id;           /* NULL: the driver keeps the claim's id (the one
				   * claim_cancel cancels); else the caller's buffer
				   * of UUID_STRING_MAX bytes, one per claim in
				   * flight: set for a new claim, reused for a repeat
				   * (drivers without claim ids ignore it) */
};

struct drv_claim_answer {
	struct drv_answer a;      /* verdict; DRV_REFUSED also for a malformed or
				   * oversized answer (a.detail says which) */
	bool too_large;           /* the answer was over max_response and not read */
	bool malformed;           /* the answer could not be used at all */
	struct drv_grant *runs;
	size_t n_runs;
	long queue_depth;         /* -1 = not given */
	bool no_wait;             /* the driver asked without a long poll (by its own
				   * choice): an empty answer is no sign of an API
				   * without long polls, claim again at once */
	bool has_cancels;         /* the answer carries cancel events (DRV_CAP_SERVER_CANCEL) */
	/* A claim carried by a completion (complete_claim): not_claimed when the
	 * API made no claim (it refused the completion; a.verdict is then DRV_OK),
	 * unsupported when the API does not know claims in completions either
	 * (it ignored it).  DRV_RETRY: the completion got no answer, the claim may
	 * have been granted: ask again with the same claim id. */
	bool not_claimed;
	bool unsupported;
	char **cancels;           /* run ids whose cancel was asked for, or NULL */
};

typedef void (*drv_claim_cb)(struct drv_claim_answer *ans, void *userdata);

/* How a run ended, in the worker's words; each driver maps it to its API. */
enum drv_status { DRV_SUCCEEDED, DRV_FAILED, DRV_CANCELLED };
enum drv_reason {
	DRV_REASON_EXIT,
	DRV_REASON_TIMEOUT,
	DRV_REASON_CRASH,
	DRV_REASON_SPAWN_ERROR,
	DRV_REASON_CANCELLED,
	DRV_REASON_REJECTED,
};

struct drv_outcome {
	enum drv_status status;
	enum drv_reason reason;
	bool has_exit_code;
	int exit_code;
	const char *signal;   /* "SIGSEGV" or NULL */
	bool retryable;       /* exit 75, timeout, crash */
	bool terminal;        /* the exit code is one of the workflow's terminal_exit_codes */
	const char *error;    /* NULL or text */
	uint64_t duration_ms;
	uint64_t log_length;  /* DRV_CAP_LOG_LENGTH */
	const char *output;   /* serialized JSON (the result file) or NULL */
	const char *log_tail; /* the run's last output, for APIs without a log endpoint */
};

enum drv_release_reason {
	DRV_RELEASE_DRAINING,
	DRV_RELEASE_SHUTDOWN,
	DRV_RELEASE_BLOCKED_WORKFLOW,
	DRV_RELEASE_UNSUPPORTED_WORKFLOW,
	DRV_RELEASE_NO_SLOT, /* claimed ahead (worker.prefetch), no slot came free in time */
};

/* The operations table.  Every request op returns 0 with *ret set (ret may be
 * NULL) or a negative errno when nothing was sent (then no callback runs). */
struct drv_ops {
	const char *name; /* "native", "conductor" */
	unsigned caps;

	int (*init)(drv_t *d, const struct conf *c);
	void (*done)(drv_t *d);
	/* The workflows as a reload left them (optional): one added is claimed
	 * from the next claim on, and what a workflow may change live applies
	 * there too.  A request in flight keeps what it was sent with. */
	int (*reload)(drv_t *d, const struct conf *c);

	int (*claim)(drv_t *d, const struct drv_claim *rq, drv_claim_cb cb, void *ud,
		     drv_req_t **ret);
	/* Cancel the last claim on the server (DRV_CAP_CLAIM_CANCEL): the runs it
	 * was granted go back to the queue. */
	int (*claim_cancel)(drv_t *d, drv_cb cb, void *ud, drv_req_t **ret);
	/* Keep the lease (ttl_s: what the worker asks for; timeout: this attempt's
	 * bound; fresh: on a new connection). */
	int (*renew)(drv_t *d, drv_run_t *run, unsigned ttl_s, usec_t timeout, bool fresh,
		     drv_cb cb, void *ud, drv_req_t **ret);
	/* Renewals asked for together go in one request (the worker then renews
	 * the leases due soon with the one due now); optional, NULL = never. */
	bool (*renew_batching)(const drv_t *d);
	/* Append len bytes of the run's log that start at offset. */
	int (*log_append)(drv_t *d, drv_run_t *run, uint64_t offset, const void *data,
			  size_t len, usec_t timeout, drv_cb cb, void *ud, drv_req_t **ret);
	/* The completion's body, made once: sent again on retry, and spooled. */
	int (*complete_body)(drv_t *d, drv_run_t *run, const struct drv_outcome *o, char **ret);
	int (*complete)(drv_t *d, drv_run_t *run, const char *body, drv_cb cb, void *ud,
			drv_req_t **ret);
	/* complete, carrying the claim next (DRV_CAP_COMPLETE_CLAIM; no long poll,
	 * next->claim_id set): cb gets the completion's answer, then ncb the
	 * claim's.  A drv_cancel() stops both.  The body is sent as is on retries
	 * and in the spool: only this send carries the claim. */
	int (*complete_claim)(drv_t *d, drv_run_t *run, const char *body,
	                      const struct drv_claim *next, drv_cb cb, void *ud, drv_claim_cb ncb,
	                      void *nud, drv_req_t **ret);
	/* The claim a completion carries (complete_claim's nud) asks for max_runs
	 * runs instead, while that completion still waits to be sent (joined with
	 * others in one request): one claim for the slots of several completions.
	 * Optional; -EALREADY once it went (or for an unknown nud). */
	int (*complete_claim_extend)(drv_t *d, void *nud, unsigned max_runs);
	/* Give the run back (DRV_CAP_RELEASE); delay_s before it may be claimed again. */
	int (*release)(drv_t *d, drv_run_t *run, enum drv_release_reason why, unsigned delay_s,
		       drv_cb cb, void *ud, drv_req_t **ret);
	/* A spooled completion's per-run data, rebuilt from its body. */
	int (*restore)(drv_t *d, const char *run_id, const char *body, drv_run_t **ret);
	/* Set the log length in a completion body (DRV_CAP_LOG_LENGTH). */
	int (*body_set_log_length)(char **body, uint64_t log_length);
	void (*run_free)(drv_run_t *run);
	/* The lease_key of a run (a restored one has no grant to take it from), or
	 * NULL when the driver has none; optional (NULL op = the run id serves). */
	const char *(*run_lease_key)(const drv_run_t *run);
};

extern const struct drv_ops drv_native_ops;
extern const struct drv_ops drv_conductor_ops;
extern const struct drv_ops drv_camunda7_ops;

/* The driver named by conf->api.protocol (NULL or "native": native). */
int drv_new(ev_t *e, const struct conf *c, metrics_t *m, drv_t **ret);
/* The same with a table of the caller's (a test's scripted driver). */
int drv_new_ops(ev_t *e, const struct conf *c, metrics_t *m, const struct drv_ops *ops,
		drv_t **ret);
drv_t *drv_free(drv_t *d);
/* After a reload (ops->reload, if any): 0 or -errno, the old workflows kept. */
int drv_reload(drv_t *d, const struct conf *c);
const struct drv_ops *drv_ops(const drv_t *d);
bool drv_has(const drv_t *d, unsigned cap);
const struct drv_ops *drv_find(const char *name); /* NULL = unknown protocol */

/* Stop a request in flight; its callback never runs.  NULL-safe. */
void drv_cancel(drv_req_t *req);

/* Readiness: the API answered recently with our credentials accepted. */
bool drv_ready(const drv_t *d, usec_t now);
bool drv_denied(const drv_t *d);
usec_t drv_last_ok(const drv_t *d); /* monotonic; 0 = never */

/* The backoff for a DRV_RETRY answer (full jitter, floored by retry_after). */
usec_t drv_retry_delay(const struct drv_answer *a, unsigned attempt, usec_t base, usec_t cap);

void drv_grant_done(struct drv_grant *g);
void drv_claim_answer_done(struct drv_claim_answer *a);

const char *drv_status_name(enum drv_status s);
const char *drv_reason_name(enum drv_reason r);
const char *drv_release_reason_name(enum drv_release_reason r);
