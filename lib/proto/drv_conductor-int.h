/* Private to lib/proto/drv_conductor.c, its tests and its fuzz harness
 * (fuzz/conductor_answers.c): the driver's state and the pure steps that read
 * what a Conductor server sends (the poll answer, a task read for the
 * keep-alive, the token answer) and a spooled TaskResult, each from bytes and
 * the driver's parameters, without HTTP. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "proto/driver.h"
#include "util/buf.h"
#include "util/time.h"

#define DRV_CONDUCTOR_ID_MAX 128     /* a task or workflow id: [A-Za-z0-9._:-] */
#define DRV_CONDUCTOR_TTL_MAX_S 3600 /* as the native driver's lease cap */
#define DRV_CONDUCTOR_TOKEN_MAX (16 * 1024)

struct task_type {
	char *workflow; /* the configured workflow */
	char *name;     /* its Conductor task type */
	bool warned;    /* responseTimeoutSeconds <= lease_refresh, said once */
	bool deep;      /* the last poll brought tasks: the next pops (conductor_claim) */
};

struct conductor {
	char *worker_id;
	char *domain;
	char *key_id, *key_secret; /* NULL: no authentication */
	unsigned token_gen;        /* bumped each time a token is taken */
	unsigned fallback_ttl_s;   /* worker.lease_ttl: for responseTimeoutSeconds 0 */
	usec_t lease_refresh;
	size_t max_task; /* a GET of one task: its inputData and the rest */
	struct task_type **types; /* never moved or freed before done: a poll holds one */
	size_t n_types;
};

struct drv_run {
	char *task_id;
	char *wf_id;
	char *task_type; /* NULL when restored from the spool */
	/* The log: bytes [log_off, log_next) arrived but are not on the server
	 * yet (a partial line, or lines whose request failed). */
	struct buf log;
	uint64_t log_off, log_next;
	uint64_t log_dropped;
};

bool drv_conductor_valid_id(const char *s);

/* The answer of GET /api/tasks/poll/batch/{t->name} (status 200, len bytes of
 * body, NUL-terminated after them) into ans: grants of t->workflow, those
 * beyond max_runs or with a bad field marked invalid; DRV_REFUSED when
 * nothing can be used. */
void drv_conductor_poll_parse(struct conductor *n, struct task_type *t, unsigned max_runs,
                              size_t max_input, const char *body, size_t len,
                              struct drv_claim_answer *ans);

/* What the answer of GET /api/tasks/{task_id} (status 200) says of our hold
 * on the task: NULL when it is still ours, else why not (into buf).  A
 * responseTimeoutSeconds in it sets *ttl_s. */
const char *drv_conductor_task_not_ours(const struct conductor *n, const char *task_id,
                                        const char *body, size_t len, unsigned *ttl_s, char *buf,
                                        size_t buflen);

/* The token of POST /api/token's answer (status 200): -EBADMSG when it has
 * none we can send in a header. */
int drv_conductor_token_parse(const char *body, size_t len, char **ret);

/* A spooled TaskResult's per-run data: -EBADMSG unless it names run_id and a
 * valid workflow instance. */
int drv_conductor_restore(const char *run_id, const char *body, drv_run_t **ret);
