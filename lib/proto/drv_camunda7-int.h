/* Private to lib/proto/drv_camunda7.c, its tests and its fuzz harness
 * (fuzz/camunda7_answers.c): the driver's state and the pure steps that read
 * what a Camunda 7 engine sends (fetchAndLock's answer) and build what lessee
 * sends back (the completion body, spooled as it is, and its restore), each
 * from bytes and the driver's parameters, without HTTP. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "proto/driver.h"
#include "util/buf.h"
#include "util/time.h"

#define DRV_CAMUNDA7_ID_MAX 128            /* a task id: [A-Za-z0-9._:-] (UUIDs, numbers) */
#define DRV_CAMUNDA7_ERROR_MESSAGE_MAX 666 /* ExternalTaskEntity.MAX_EXCEPTION_MESSAGE_LENGTH */
#define DRV_CAMUNDA7_ERROR_DETAILS_MAX (64 * 1024)
#define DRV_CAMUNDA7_NAME_MAX 255         /* ACT_RU_VARIABLE.NAME_ */
#define DRV_CAMUNDA7_STRING_MAX 4000      /* ACT_RU_VARIABLE.TEXT_, a String's value */
#define DRV_CAMUNDA7_ASYNC_MAX_MS 1800000 /* FetchAndLockHandlerImpl.MAX_REQUEST_TIMEOUT */

struct c7_topic {
	char *workflow;   /* the configured workflow */
	char *name;       /* its topic */
	char **variables; /* fetched, NULL or empty = all */
	unsigned retries; /* policy for a task without retries yet */
	usec_t backoff, backoff_max;
	bool local; /* the result's keys as localVariables */
};

struct camunda7 {
	char *worker_id; /* worker.id + "-" + a nonce of this process */
	struct c7_topic *topics;
	size_t n_topics;
};

struct drv_run {
	char *task_id;
	char *worker_id;   /* the workerId that locked it (a restored run: its own) */
	char *lease_key;   /* workerId/taskId/sequence: every grant its own */
	long long retries; /* the task's retries as fetched, -1 = null (or restored) */
	unsigned policy;   /* the workflow's retries */
	usec_t backoff, backoff_max;
	bool local;
	struct buf line; /* the run's output after its last newline */
};

bool drv_camunda7_valid_id(const char *s);

/* The answer of POST /external-task/fetchAndLock (status 200, len bytes,
 * NUL-terminated after them) into ans: a grant per task, those beyond
 * of a topic not configured or with a bad field marked invalid (more than
 * max_runs are granted all the same: the worker gives back what it has no
 * slot for); ttl_s is the lockDuration asked for;
 * DRV_REFUSED when nothing can be used. */
void drv_camunda7_fetch_parse(struct camunda7 *n, unsigned max_runs, size_t max_input,
                              unsigned ttl_s, const char *body, size_t len,
                              struct drv_claim_answer *ans);

/* A task's variables ({name: {type, value, valueInfo}}) as the run's input
 * object: String, Integer, Long, Short, Double, Boolean and Null as their
 * value, Json parsed, any other type passed as {type, value, valueInfo}. */
char *drv_camunda7_input(const char *variables, size_t len);

/* The completion for an outcome: {"taskId", "leaseKey", "endpoint": "complete" |
 * "bpmnError" | "failure", "request": {the body sent}}. */
int drv_camunda7_body(const drv_run_t *run, const struct drv_outcome *o, char **ret);

/* The retryTimeout (ms) and retries of a retryable failure of run. */
void drv_camunda7_retry(const drv_run_t *run, unsigned *ret_retries, uint64_t *ret_timeout_ms);

/* A spooled completion's per-run data: -EBADMSG unless it names run_id, an
 * endpoint we send and a workerId. */
int drv_camunda7_restore(const char *run_id, const char *body, drv_run_t **ret);

/* The endpoint and the request of a completion body (both new strings). */
int drv_camunda7_body_split(const char *body, char **ret_endpoint, char **ret_request);
