/* The worker protocol (v1), client side: build request bodies, parse and
 * validate responses.  Everything parsed here comes from the network and is
 * treated as hostile: types checked, sizes capped, identifiers validated. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/json_scan.h"
#include "proto/v1.h"
#include "util/time.h"

/* The vocabulary is proto/v1.h's; these names stay for their callers. */
#define PROTO_ID_MAX V1_ID_MAX
#define PROTO_TAG_MAX V1_TAG_MAX
#define PROTO_TAGS_MAX V1_TAGS_MAX
#define PROTO_TOKEN_MAX V1_TOKEN_MAX
#define PROTO_ERROR_TEXT_MAX V1_ERROR_TEXT_MAX
#define PROTO_MAX_RUNS V1_MAX_RUNS
#define PROTO_TTL_MAX V1_TTL_MAX
#define PROTO_WAIT_MAX V1_WAIT_MAX

bool proto_valid_id(const char *s);       /* run ids and workflow names: v1_valid_id */
bool proto_valid_tag(const char *s);       /* v1_valid_tag */
bool proto_valid_worker_id(const char *s); /* v1_valid_worker_id */

/* A lease the worker holds, named in a claim so the answer carries its
 * cancellation (docs/protocol.md, "Cancel events"). */
struct proto_held {
	const char *id;
	const char *token;
};

#define PROTO_HELD_MAX V1_HELD_MAX

struct proto_claim_req {
	const char *claim_id;
	const char *worker_id;
	unsigned max_runs;          /* 1..256; 0 only with held, to a server that has cancel events */
	bool send_held;             /* send "held" (maybe empty): asks for "cancel_requested" */
	const struct proto_held *held;
	size_t n_held;
	unsigned lease_ttl_s;       /* 1..3600 */
	unsigned wait_s;            /* 0..60 */
	char *const *workflows;     /* NULL = omit (any); empty vector = none */
	char *const *tags;
};

struct proto_run {
	char *id;
	char *workflow;
	unsigned attempt;
	char *token;
	unsigned ttl_s;
	char *input;       /* JSON text as the server sent it, "null" when absent */
	size_t input_len;
	unsigned timeout_s; /* 0 = not given */
	/* Set when the run is unusable (bad field); id and token are still valid
	 * when usable_for_reject is true, so it can be completed as rejected. */
	char *invalid;
	bool usable_for_reject;
};

struct proto_claim_resp {
	struct proto_run *runs;
	size_t n_runs;
	long queue_depth; /* -1 = not given */
	/* "cancel_requested": the held runs whose cancel was asked for; has_cancels:
	 * the field was there (the server has cancel events) */
	bool has_cancels;
	char **cancels; /* run ids, valid ones only; NULL unless has_cancels */
};

int proto_claim_body(const struct proto_claim_req *rq, char **ret);
/* The largest claim answer worth reading for max_runs runs whose inputs are
 * at most max_input bytes each: their inputs, PROTO_RUN_OVERHEAD per run for
 * the rest of it, and PROTO_CLAIM_ENVELOPE.  SIZE_MAX when that overflows. */
#define PROTO_RUN_OVERHEAD (16u << 10)
#define PROTO_CLAIM_ENVELOPE (64u << 10)
size_t proto_claim_max_response(unsigned max_runs, size_t max_input);
/* -EBADMSG with *ret_error when the response as a whole is malformed (not
 * strict JSON, nested deeper than 1000, "runs" missing, twice or over 256).
 * Single bad runs do not fail the parse: they come back with ->invalid set.
 * A run's input is the server's text of it, byte for byte, at most max_input
 * bytes; nothing of it is copied or built before it is known to fit. */
int proto_claim_parse(const char *body, size_t len, size_t max_input, struct proto_claim_resp *ret,
                      char **ret_error);
void proto_claim_resp_done(struct proto_claim_resp *r);
void proto_run_done(struct proto_run *r);

int proto_lease_body(const char *token, unsigned ttl_s, char **ret);
/* POST /v1/leases/renew (protocol v1 addition): the leases (id, token) to
 * renew for ttl_s each, in one request. */
int proto_renew_batch_body(const char *worker_id, unsigned ttl_s, const struct proto_held *leases,
                           size_t n, char **ret);
struct proto_renewed {
	bool lost;      /* lease_lost or not_found: not ours any more */
	unsigned ttl_s; /* renewed: the lease's ttl */
	bool cancel;    /* renewed: cancel_requested */
};
/* Its answer: one entry per lease asked, in the order asked (the id checked),
 * into out[n]; -EBADMSG when unusable as a whole. */
int proto_renew_batch_parse(const char *body, size_t len, const struct proto_held *asked, size_t n,
                            struct proto_renewed *out);
/* The largest answer to a batch of n renewals worth reading: PROTO_RENEWED_MAX
 * per lease (an id of PROTO_ID_MAX bytes, its ttl_s or error, the server's
 * spacing and members it may add) and a small envelope. */
#define PROTO_RENEWED_MAX 512u
size_t proto_renew_batch_max_response(size_t n);
int proto_lease_parse(const char *body, size_t len, unsigned *ret_ttl_s, bool *ret_cancel);

enum proto_status {
	PROTO_SUCCEEDED = V1_SUCCEEDED,
	PROTO_FAILED = V1_FAILED,
	PROTO_CANCELLED = V1_CANCELLED,
};
enum proto_reason {
	PROTO_REASON_EXIT = V1_REASON_EXIT,
	PROTO_REASON_TIMEOUT = V1_REASON_TIMEOUT,
	PROTO_REASON_CRASH = V1_REASON_CRASH,
	PROTO_REASON_SPAWN_ERROR = V1_REASON_SPAWN_ERROR,
	PROTO_REASON_CANCELLED = V1_REASON_CANCELLED,
	PROTO_REASON_REJECTED = V1_REASON_REJECTED,
};
const char *proto_status_name(enum proto_status s);
const char *proto_reason_name(enum proto_reason r);

struct proto_outcome {
	enum proto_status status;
	enum proto_reason reason;
	bool has_exit_code;
	int exit_code;
	const char *signal;  /* "SIGSEGV" or NULL */
	bool retryable;
	const char *error;   /* NULL or text; cut to 4 KiB (v1_error_text_len) */
	uint64_t duration_ms;
	uint64_t log_length;
	const char *output;  /* serialized JSON or NULL */
};

int proto_complete_body(const char *token, const struct proto_outcome *o, char **ret);
/* run_status: "succeeded" "failed" "retrying" "cancelled" (copied, capped). */
/* A complete answer: its run_status; *ret_next (may be NULL) the span of its
 * "next" member, the answer of a claim the completion carried (p NULL when
 * absent: the server did not know it). */
struct json_span;
int proto_complete_parse(const char *body, size_t len, char *ret_status, size_t status_len,
                         struct json_span *ret_next);
/* body (proto_complete_body's) with claim_body (proto_claim_body's) in it as
 * "next" (protocol v1 addition: a completion that claims the slot it frees). */
int proto_complete_splice(const char *body, const char *claim_body, char **ret);
/* POST /v1/completions (protocol v1 addition): the completions bodies[i]
 * (proto_complete_body's, "next" maybe spliced in) of the runs ids[i], in one
 * request. */
int proto_complete_batch_body(char *const *ids, char *const *bodies, size_t n, char **ret);
struct proto_completed {
	long status;            /* what the single completion would have got:
	                         * 200, 409 (lease_lost) or 404 (not_found) */
	struct json_span entry; /* the entry, answered as that status' body */
};
/* Its answer: one entry per completion asked, in the order asked (the id
 * checked), into out[n]; -EBADMSG when unusable as a whole. */
int proto_complete_batch_parse(const char *body, size_t len, char *const *ids, size_t n,
                               struct proto_completed *out);
/* A claim answer's "error" code (a claim carried by a completion that the
 * server could not make): 1 with the code, 0 when none. */
int proto_claim_error(const char *body, size_t len, char *ret_code, size_t code_len);

enum proto_release_reason {
	PROTO_RELEASE_DRAINING = V1_RELEASE_DRAINING,
	PROTO_RELEASE_SHUTDOWN = V1_RELEASE_SHUTDOWN,
	PROTO_RELEASE_BLOCKED_WORKFLOW = V1_RELEASE_BLOCKED_WORKFLOW,
	PROTO_RELEASE_UNSUPPORTED_WORKFLOW = V1_RELEASE_UNSUPPORTED_WORKFLOW,
	PROTO_RELEASE_NO_SLOT = V1_RELEASE_NO_SLOT,
};
const char *proto_release_reason_name(enum proto_release_reason r);
int proto_release_body(const char *token, enum proto_release_reason reason, unsigned delay_s,
		       char **ret);

/* {"length": N} of log appends (202 and 416). */
int proto_log_length_parse(const char *body, size_t len, uint64_t *ret);
/* The "error" code of an error body, or NULL. Copied into buf. */
const char *proto_error_code(const char *body, size_t len, char *buf, size_t buflen);

/* URL helpers: base has no trailing slash; ids are validated so no escaping. */
int proto_url(const char *base, const char *path_fmt, const char *id, char **ret);
