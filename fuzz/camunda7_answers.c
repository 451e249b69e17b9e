/* What a Camunda 7 engine sends the camunda7 driver and what the driver makes
 * of a run's end (lib/proto/drv_camunda7.c, through drv_camunda7-int.h,
 * without HTTP): fetchAndLock's array of locked tasks, a task's typed
 * variables as the run's input, a completion body made from an outcome whose
 * texts are the bytes (then split for sending and restored), and a spooled
 * body restored.  The first byte picks the step, the second its parameters. */
#include <cJSON.h>
#include <errno.h>
#include <string.h>

#include "fuzz.h"
#include "proto/driver-int.h"
#include "proto/drv_camunda7-int.h"
#include "util/macro.h"
#include "util/strutil.h"

DEFINE_FREE_FUNC(cJSON, cJSON_Delete)

static const unsigned max_runs_set[] = {1, 2, 3, 4, 8, 16, 64, 256};
static const size_t max_input_set[] = {0, 1, 2, 16, 64, 1024, 1u << 20, SIZE_MAX};

static struct c7_topic topics[] = {
    {.workflow = "build",
     .name = "build",
     .retries = 3,
     .backoff = 10 * USEC_PER_SEC,
     .backoff_max = 600 * USEC_PER_SEC},
    {.workflow = "deploy",
     .name = "deploy-t",
     .retries = 0,
     .backoff = 0,
     .backoff_max = 0,
     .local = true},
};
static struct camunda7 n7 = {.worker_id = "w1-0000abcd", .topics = topics, .n_topics = 2};

/* UTF-16 code units of valid UTF-8 s, or SIZE_MAX when it is not valid. */
static size_t utf16_units(const char *s)
{
	size_t n = strlen(s), units = 0;

	for (size_t i = 0, l; i < n; i += l) {
		if (!(l = utf8_seq_len(s + i, n - i)))
			return SIZE_MAX;
		units += l == 4 ? 2 : 1;
	}
	return units;
}

static bool json_object(const char *s)
{
	_cleanup_(cJSON_Deletep) cJSON *j = s ? cJSON_ParseWithOpts(s, NULL, true) : NULL;

	return cJSON_IsObject(j);
}

static void check_grant(const struct drv_grant *g, size_t max_input)
{
	FUZZ_ASSERT(g->id && g->workflow && g->input && strlen(g->input) == g->input_len);
	FUZZ_ASSERT(g->attempt >= 1 && g->ttl_s == 30);
	FUZZ_ASSERT(streq(g->input, "null") ||
	            (json_object(g->input) && g->input_len <= max_input));
	if (g->invalid)
		FUZZ_ASSERT(streq(g->input, "null"));
	if (!g->usable_for_reject) {
		FUZZ_ASSERT(g->invalid && !g->priv && !g->lease_key);
		return;
	}
	FUZZ_ASSERT(drv_camunda7_valid_id(g->id) && g->priv && g->lease_key);
	FUZZ_ASSERT(streq(g->workflow, "build") || streq(g->workflow, "deploy"));
	FUZZ_ASSERT(streq(g->priv->task_id, g->id) && streq(g->priv->worker_id, n7.worker_id));
	FUZZ_ASSERT(g->env);
	for (char **e = g->env; *e; e++) {
		FUZZ_ASSERT(strncmp(*e, "LESSEE_", 7) == 0 && strchr(*e, '='));
		for (const unsigned char *c = (const unsigned char *)*e; *c; c++)
			FUZZ_ASSERT(*c >= 0x20 && *c != 0x7f);
		FUZZ_ASSERT(utf16_units(*e) != SIZE_MAX);
	}
}

static void fetch_answer(uint8_t p, const char *body, size_t len)
{
	unsigned max_runs = max_runs_set[p & 7];
	size_t max_input = max_input_set[(p >> 3) & 7];
	struct drv_claim_answer ans = {.queue_depth = -1};

	drv_camunda7_fetch_parse(&n7, max_runs, max_input, 30, body, len, &ans);
	FUZZ_ASSERT(ans.a.verdict == DRV_OK || ans.a.verdict == DRV_REFUSED);
	if (ans.a.verdict == DRV_REFUSED)
		FUZZ_ASSERT(ans.n_runs == 0 && ans.malformed);
	FUZZ_ASSERT(!ans.too_large && !ans.has_cancels && !ans.cancels);
	for (size_t i = 0; i < ans.n_runs; i++) {
		check_grant(&ans.runs[i], max_input);
		drv_camunda7_ops.run_free(TAKE_PTR(ans.runs[i].priv));
	}
	drv_claim_answer_done(&ans);
}

/* What the driver hands drv_camunda7_input has passed cJSON (the fetch
 * answer is parsed first), so lone surrogate escapes never reach it; bytes
 * that are not UTF-8 do (cJSON does not check them). */
static void input(const char *body, size_t len)
{
	_cleanup_(cJSON_Deletep) cJSON *pre = cJSON_ParseWithLength(body, len);
	_cleanup_free_ char *in = pre ? drv_camunda7_input(body, len) : NULL;

	/* an object of variables gives an object, in UTF-8; anything else nothing */
	FUZZ_ASSERT(!in || (json_object(in) && utf16_units(in) != SIZE_MAX));
}

/* The body of an outcome whose texts are the bytes: sent and restored as made. */
static void body_round_trip(uint8_t p, const char *text)
{
	drv_run_t run = {.task_id = "t-1",
	                 .worker_id = "w1-0000abcd",
	                 .lease_key = "w1-0000abcd/t-1/1",
	                 .retries = p & 0x40 ? -1 : p & 7,
	                 .policy = (p >> 3) & 7,
	                 .backoff = (usec_t)(p & 3) * USEC_PER_SEC,
	                 .backoff_max = (usec_t)((p >> 2) & 3) * USEC_PER_SEC,
	                 .local = p & 0x80};
	struct drv_outcome o = {.status = (enum drv_status)(p % 3),
	                        .reason = (enum drv_reason)((p >> 2) % 6),
	                        .retryable = p & 0x20,
	                        .has_exit_code = true,
	                        .exit_code = p,
	                        .error = p & 0x10 ? text : NULL,
	                        .output = text,
	                        .log_tail = text};
	_cleanup_free_ char *body = NULL, *endpoint = NULL, *request = NULL;
	_cleanup_(cJSON_Deletep) cJSON *j = NULL, *rq = NULL;
	const cJSON *m, *r;
	drv_run_t *again = NULL;

	FUZZ_ASSERT(drv_camunda7_body(&run, &o, &body) == 0 && body);
	j = cJSON_ParseWithOpts(body, NULL, true);
	FUZZ_ASSERT(cJSON_IsObject(j));
	FUZZ_ASSERT(drv_camunda7_body_split(body, &endpoint, &request) == 0);
	FUZZ_ASSERT(streq(endpoint, "complete") || streq(endpoint, "failure") ||
	            streq(endpoint, "bpmnError"));
	if (o.status != DRV_SUCCEEDED)
		FUZZ_ASSERT(streq(endpoint, "failure"));
	rq = cJSON_ParseWithOpts(request, NULL, true);
	FUZZ_ASSERT(cJSON_IsObject(rq));
	FUZZ_ASSERT(
	    streq(cJSON_GetObjectItemCaseSensitive(rq, "workerId")->valuestring, run.worker_id));
	m = cJSON_GetObjectItemCaseSensitive(rq, "errorMessage");
	if (m)
		FUZZ_ASSERT(cJSON_IsString(m) && utf16_units(m->valuestring) <= 666);
	r = cJSON_GetObjectItemCaseSensitive(rq, "retries");
	if (streq(endpoint, "failure"))
		FUZZ_ASSERT(cJSON_IsNumber(r) && r->valuedouble >= 0 &&
		            r->valuedouble <= (run.retries < 0 ? run.policy : run.retries));
	FUZZ_ASSERT(drv_camunda7_restore("t-1", body, &again) == 0);
	FUZZ_ASSERT(streq(again->task_id, "t-1") && streq(again->worker_id, run.worker_id));
	FUZZ_ASSERT(streq(drv_camunda7_ops.run_lease_key(again), run.lease_key));
	drv_camunda7_ops.run_free(again);
}

static void restore(const char *body)
{
	drv_run_t *run = NULL;
	int q = drv_camunda7_restore("t-1", body, &run);
	_cleanup_free_ char *endpoint = NULL, *request = NULL;

	if (q < 0) {
		FUZZ_ASSERT(q == -EBADMSG && !run);
		return;
	}
	FUZZ_ASSERT(streq(run->task_id, "t-1") && *run->worker_id);
	drv_camunda7_ops.run_free(run);
	/* what restores can be sent, or is refused as a whole */
	q = drv_camunda7_body_split(body, &endpoint, &request);
	FUZZ_ASSERT(q == 0 || q == -EBADMSG);
	if (q == 0)
		FUZZ_ASSERT(request[0] == '{');
}

FUZZ_TARGET(camunda7_answers)
{
	char *body;
	size_t n;

	if (size < 2)
		return 0;
	n = size - 2;
	body = fuzz_strndup(data + 2, n);
	switch (data[0] & 3) {
	case 0:
		fetch_answer(data[1], body, n);
		break;
	case 1:
		input(body, n);
		break;
	case 2:
		body_round_trip(data[1], body);
		break;
	default:
		restore(body);
		break;
	}
	free(body);
	return 0;
}
