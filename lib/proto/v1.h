/* Protocol v1's vocabulary, the one definition lessor (lib/lessor) and the
 * native driver (proto_native.c) share: the character sets and sizes of its
 * identifiers, its bounds, and the names of statuses and reasons
 * (docs/protocol.md).  It depends on util alone, so lib/conf checks the
 * values it will send with the same rules the server applies to them. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

/* Identifiers: run ids, workflow names, claim ids, lease tokens. */
#define V1_ID_MAX 128
#define V1_ID_CHARSET "[A-Za-z0-9._:-]"
#define V1_TOKEN_MAX V1_ID_MAX
/* Worker ids: identifiers plus '@' and '/' ("host/slot-3", "ci@host"). */
#define V1_WORKER_ID_MAX V1_ID_MAX
#define V1_WORKER_ID_CHARSET "[A-Za-z0-9._:@/-]"
/* Tags: at most V1_TAGS_MAX of them in a claim or a run. */
#define V1_TAG_MAX 64
#define V1_TAG_CHARSET "[A-Za-z0-9._:/=-]"
#define V1_TAGS_MAX 32
/* A claim: max_runs 1..V1_MAX_RUNS (0 with "held"), lease_ttl_s
 * 1..V1_TTL_MAX, wait_s 0..V1_WAIT_MAX, at most V1_CLAIM_WORKFLOWS_MAX
 * workflows and V1_HELD_MAX held leases. */
#define V1_MAX_RUNS 256
#define V1_TTL_MAX 3600
#define V1_WAIT_MAX 60
#define V1_CLAIM_WORKFLOWS_MAX 1024
#define V1_HELD_MAX 4096
/* A batch renewal (POST /v1/leases/renew): 1..V1_RENEW_MAX leases. */
#define V1_RENEW_MAX 1024
/* A batch completion (POST /v1/completions): 1..V1_COMPLETE_MAX completions. */
#define V1_COMPLETE_MAX 256
/* A release's delay_s: 0..V1_DELAY_MAX. */
#define V1_DELAY_MAX 3600
/* A completion: "error" at most V1_ERROR_TEXT_MAX bytes of UTF-8, "signal"
 * 1..V1_SIGNAL_MAX bytes of [A-Za-z0-9+-], "exit_code" 0..V1_EXIT_CODE_MAX. */
#define V1_ERROR_TEXT_MAX 4096
#define V1_SIGNAL_MAX 32
#define V1_EXIT_CODE_MAX 255
/* Counts and offsets (duration_ms, log_length, a log's length): integers a
 * JSON double holds exactly. */
#define V1_JSON_INT_MAX (1LL << 53)

bool v1_valid_id(const char *s);
bool v1_valid_token(const char *s);
bool v1_valid_worker_id(const char *s);
bool v1_valid_tag(const char *s);
bool v1_valid_signal(const char *s);

/* How many bytes of s a completion's "error" carries: all of it when it
 * fits in V1_ERROR_TEXT_MAX, else the most that does and ends on a UTF-8
 * character boundary. */
size_t v1_error_text_len(const char *s);

/* A completion's "status" and "reason", a release's "reason", and the
 * "run_status" of their answers.  Each has its names as a NULL-terminated
 * list in enum order; *_name() is NULL and *_from_name() -EINVAL for what
 * is not one of them. */
enum v1_status {
	V1_SUCCEEDED,
	V1_FAILED,
	V1_CANCELLED,
	_V1_STATUS_N,
};

enum v1_reason {
	V1_REASON_EXIT,
	V1_REASON_TIMEOUT,
	V1_REASON_CRASH,
	V1_REASON_SPAWN_ERROR,
	V1_REASON_CANCELLED,
	V1_REASON_REJECTED,
	_V1_REASON_N,
};

enum v1_release_reason {
	V1_RELEASE_DRAINING,
	V1_RELEASE_SHUTDOWN,
	V1_RELEASE_BLOCKED_WORKFLOW,
	V1_RELEASE_UNSUPPORTED_WORKFLOW,
	V1_RELEASE_NO_SLOT,
	_V1_RELEASE_N,
};

/* What the server made of a completion, or "pending" after a release. */
enum v1_run_status {
	V1_RUN_SUCCEEDED,
	V1_RUN_FAILED,
	V1_RUN_CANCELLED,
	V1_RUN_RETRYING,
	V1_RUN_PENDING,
	_V1_RUN_STATUS_N,
};

extern const char *const v1_status_names[];
extern const char *const v1_reason_names[];
extern const char *const v1_release_reason_names[];
extern const char *const v1_run_status_names[];

const char *v1_status_name(enum v1_status s);
const char *v1_reason_name(enum v1_reason r);
const char *v1_release_reason_name(enum v1_release_reason r);
const char *v1_run_status_name(enum v1_run_status s);
int v1_status_from_name(const char *name);
int v1_reason_from_name(const char *name);
int v1_release_reason_from_name(const char *name);
int v1_run_status_from_name(const char *name);
