/* The admin endpoints, for people, the CLI and tests: enqueue, list, show,
 * log, cancel, requeue, stats, workers, fault injection, health. */
#include "lessor/api-int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lessor/faults.h"
#include "proto/v1.h"
#include "util/strutil.h"

#define MAX_ATTEMPTS 100
#define MAX_TIMEOUT_S (7 * 24 * 3600)
#define LIST_DEFAULT 100
#define LIST_MAX 1000

static int reply_run(lessor_call *c, unsigned status, const char *id)
{
	cJSON *run = NULL;
	int r = lessor_store_run_json(c->api->store, id, &run);

	if (r < 0)
		return lessor_reply_store_error(c, r);
	return lessor_reply_json(c, status, run);
}

/* ---- enqueue ---- */

/* input: any JSON value, as sent; absent = {}.  -EINVAL (c->msg), -ENOMEM. */
static int input_text(lessor_call *c, char **ret)
{
	const cJSON *in = cJSON_GetObjectItemCaseSensitive(c->json, "input");
	struct json_span v;

	if (lessor_raw_member(lessor_call_body(c), "input", &v) < 0) {
		snprintf(c->msg, LESSOR_MSG_MAX, LESSOR_RAW_ESCAPED_MSG);
		return -EINVAL;
	}
	*ret = in ? lessor_raw_text(v, in) : strdup("{}");
	return *ret ? 0 : -ENOMEM;
}

static int enqueue_fields(lessor_call *c, struct lessor_enqueue *e, char ***tags)
{
	const cJSON *j = c->json;
	int64_t attempts, timeout;

	if (lessor_field_str(j, "workflow", true, 0, v1_valid_id, &e->workflow, c->msg) < 0 ||
	    lessor_field_tags(j, "tags", tags, c->msg) < 0 ||
	    lessor_field_int(j, "max_attempts", false, 1, MAX_ATTEMPTS, 1, &attempts, c->msg) < 0 ||
	    lessor_field_int(j, "timeout_s", false, 1, MAX_TIMEOUT_S, 0, &timeout, c->msg) < 0 ||
	    lessor_field_str(j, "idempotency_key", false, 0, v1_valid_id, &e->idempotency_key,
	                     c->msg) < 0)
		return -EINVAL;
	e->max_attempts = (unsigned)attempts;
	e->timeout_s = (unsigned)timeout;
	return 0;
}

int lessor_h_enqueue(lessor_call *c)
{
	struct lessor_enqueue e = {0};
	char **tags = NULL;
	_cleanup_free_ char *input = NULL;
	char id[LESSOR_RUN_ID_MAX];
	bool created;
	int r;

	if (enqueue_fields(c, &e, &tags) < 0) {
		strv_free(tags);
		return lessor_reply_invalid(c);
	}
	r = input_text(c, &input);
	if (r < 0) {
		strv_free(tags);
		return r == -EINVAL ? lessor_reply_invalid(c) : lessor_reply_store_error(c, r);
	}
	e.input_json = input;
	e.tags = tags;
	r = lessor_enqueue_hand_off(c, &e, id, &created);
	strv_free(tags);
	if (r < 0)
		return lessor_reply_store_error(c, r);
	return reply_run(c, created ? 201 : 200, id);
}

/* ---- views ---- */

static const char *query(lessor_call *c, const char *name)
{
	const char *v = c->io.query(c->io.userdata, name);

	return v && *v ? v : NULL;
}

static int parse_limit(const char *s, unsigned *ret)
{
	char *end;
	unsigned long v;

	if (!s) {
		*ret = LIST_DEFAULT;
		return 0;
	}
	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || v < 1 || v > LIST_MAX)
		return -EINVAL;
	*ret = (unsigned)v;
	return 0;
}

int lessor_h_list(lessor_call *c)
{
	const char *status = query(c, "status"), *workflow = query(c, "workflow");
	cJSON *o = NULL;
	unsigned limit;
	int r;

	if (status && !lessor_run_status_valid(status))
		return lessor_reply_error(c, 400, "invalid_request", "unknown status");
	if (workflow && !v1_valid_id(workflow))
		return lessor_reply_error(c, 400, "invalid_request", "malformed workflow");
	if (parse_limit(query(c, "limit"), &limit) < 0)
		return lessor_reply_error(c, 400, "invalid_request", "limit must be in 1..%d",
		                          LIST_MAX);
	r = lessor_store_list_json(c->api->store, status, workflow, limit, &o);
	if (r < 0)
		return lessor_reply_store_error(c, r);
	return lessor_reply_json(c, 200, o);
}

int lessor_h_show(lessor_call *c)
{
	return reply_run(c, 200, c->arg);
}

int lessor_h_log_read(lessor_call *c)
{
	char *data;
	size_t len;
	int r = lessor_store_read_log(c->api->store, c->arg, &data, &len);

	if (r < 0)
		return lessor_reply_store_error(c, r);
	free(c->reply.body);
	c->reply = (struct lessor_reply){
	    .status = 200, .content_type = "application/octet-stream", .body = data, .len = len};
	return LESSOR_CALL_REPLY;
}

int lessor_h_stats(lessor_call *c)
{
	struct lessor_store_counters k;
	cJSON *o = NULL, *so;
	int r = lessor_store_stats_json(c->api->store, &o);

	if (r < 0)
		return lessor_reply_store_error(c, r);
	cJSON_AddNumberToObject(o, "parked_requests",
	                        (double)lessor_waiters_count(c->api->waiters));
	/* how the writes were committed: writes / commits is the mean group size */
	lessor_store_counters(c->api->store, &k);
	so = cJSON_AddObjectToObject(o, "store");
	if (so) {
		cJSON_AddNumberToObject(so, "commits", (double)k.commits);
		cJSON_AddNumberToObject(so, "writes", (double)k.writes);
		cJSON_AddNumberToObject(so, "writes_waiting", (double)k.waiting);
		cJSON_AddNumberToObject(so, "checkpoints", (double)k.checkpoints);
		cJSON_AddNumberToObject(so, "checkpoints_inline", (double)k.checkpoints_inline);
	}
	return lessor_reply_json(c, 200, o);
}

int lessor_h_workers(lessor_call *c)
{
	cJSON *o = NULL;
	int r = lessor_store_workers_json(c->api->store, &o);

	if (r < 0)
		return lessor_reply_store_error(c, r);
	return lessor_reply_json(c, 200, o);
}

int lessor_h_health(lessor_call *c)
{
	cJSON *o = cJSON_CreateObject();

	cJSON_AddStringToObject(o, "status", "ok");
	return lessor_reply_json(c, 200, o);
}

/* ---- admin actions ---- */

static int reply_status(lessor_call *c, const char *status)
{
	cJSON *o = cJSON_CreateObject();

	cJSON_AddStringToObject(o, "id", c->arg);
	cJSON_AddStringToObject(o, "status", status);
	return lessor_reply_json(c, 200, o);
}

int lessor_h_cancel(lessor_call *c)
{
	const char *status;
	int r = lessor_store_cancel(c->api->store, c->arg, lessor_now_ms(), &status);

	if (r == -EBUSY)
		return lessor_reply_error(c, 409, "conflict", "the run has already finished");
	if (r < 0)
		return lessor_reply_store_error(c, r);
	/* a claim that holds the run answers now (cancel events, docs/protocol.md) */
	lessor_waiters_wake_cancel(c->api->waiters, c->arg);
	return reply_status(c, status);
}

int lessor_h_requeue(lessor_call *c)
{
	int r = lessor_store_requeue(c->api->store, c->arg, lessor_now_ms());

	if (r == -EBUSY)
		return lessor_reply_error(c, 409, "conflict", "the run is not running");
	if (r < 0)
		return lessor_reply_store_error(c, r);
	lessor_waiters_wake(c->api->waiters, NULL, NULL);
	return reply_status(c, "pending");
}

/* ---- fault injection ---- */

static int faults_reply(lessor_call *c)
{
	cJSON *o = lessor_faults_json(c->api->faults);

	return o ? lessor_reply_json(c, 200, o) : lessor_reply_store_error(c, -ENOMEM);
}

static int faults_disabled(lessor_call *c)
{
	return lessor_reply_error(c, 404, "not_found",
	                          "fault injection is off (lessor serve --enable-faults)");
}

/* {"endpoint": NAME or "all", "status", "count", "retry_after_s", "delay_ms",
 * "every", "legacy", "lose_answer"}: "all" arms the same fault on every worker endpoint, each with
 * its own count.  legacy: claims, or lease or complete without a status. */
int lessor_h_faults_set(lessor_call *c)
{
	const char *name;
	int64_t status, count, retry_after, delay, every;
	struct lessor_fault x;
	bool legacy, lose;
	enum lessor_endpoint ep;
	static const char *const endpoints[] = {"claims",  "lease", "log", "complete",
	                                        "release", "all",   NULL};

	if (!c->api->faults)
		return faults_disabled(c);
	if (lessor_field_enum(c->json, "endpoint", true, endpoints, &name, c->msg) < 0 ||
	    lessor_field_int(c->json, "status", false, 0, 599, 0, &status, c->msg) < 0 ||
	    lessor_field_int(c->json, "count", false, 1, 1000000, 1, &count, c->msg) < 0 ||
	    lessor_field_int(c->json, "retry_after_s", false, 0, 3600, 0, &retry_after, c->msg) <
	        0 ||
	    lessor_field_int(c->json, "delay_ms", false, 0, 600000, 0, &delay, c->msg) < 0 ||
	    lessor_field_int(c->json, "every", false, 1, 1000000, 1, &every, c->msg) < 0 ||
	    lessor_field_bool(c->json, "legacy", false, &legacy, c->msg) < 0 ||
	    lessor_field_bool(c->json, "lose_answer", false, &lose, c->msg) < 0)
		return lessor_reply_invalid(c);
	if (lose && status != 0)
		return lessor_reply_error(c, 400, "invalid_request",
		                          "lose_answer handles the request: no status");
	if (legacy && !streq(name, "claims") && !streq(name, "lease") && !streq(name, "complete"))
		return lessor_reply_error(c, 400, "invalid_request",
		                          "legacy is a claims, lease or complete fault");
	if (legacy && !streq(name, "claims") && status != 0)
		return lessor_reply_error(c, 400, "invalid_request",
		                          "a legacy %s fault answers 404 itself: no status", name);
	if ((status != 0 && status < 100) || (status == 0 && delay == 0 && !legacy && !lose))
		return lessor_reply_error(
		    c, 400, "invalid_request",
		    "a fault needs a status in 100..599, a delay_ms, legacy or lose_answer");
	x = (struct lessor_fault){.status = (unsigned)status,
	                          .count = (unsigned)count,
	                          .retry_after_s = (unsigned)retry_after,
	                          .delay_ms = (unsigned)delay,
	                          .every = (unsigned)every,
	                          .legacy = legacy,
	                          .lose_answer = lose};
	if (lessor_endpoint_from_name(name, &ep) == 0)
		lessor_faults_set(c->api->faults, ep, &x);
	else
		for (int i = 0; i < _LESSOR_EP_MAX; i++)
			lessor_faults_set(c->api->faults, (enum lessor_endpoint)i, &x);
	return faults_reply(c);
}

int lessor_h_faults_clear(lessor_call *c)
{
	if (!c->api->faults)
		return faults_disabled(c);
	lessor_faults_clear(c->api->faults);
	return faults_reply(c);
}

int lessor_h_faults_get(lessor_call *c)
{
	if (!c->api->faults)
		return faults_disabled(c);
	return faults_reply(c);
}
