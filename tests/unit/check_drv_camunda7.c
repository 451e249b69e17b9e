/* lib/proto/drv_camunda7.c: the pure steps first (fetchAndLock's answer into
 * grants, typed variables both ways, the completion bodies, the retry policy,
 * restore), then op by op against the Camunda 7 emulator
 * (tests/camunda7/camunda7_emu.c, a fresh one per test) with the loop stepped
 * by ev_run_once. */
#include <cJSON.h>
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "jsonutil.h"
#include "proto/driver-int.h"
#include "proto/drv_camunda7-int.h"
#include "testutil.h"
#include "util/macro.h"
#include "util/strutil.h"

#define SEC USEC_PER_SEC

DEFINE_FREE_FUNC(cJSON, cJSON_Delete)
#define _cleanup_json_ _cleanup_(cJSON_Deletep)

/* ---------------------------------------------------------------- pure */

static struct c7_topic topics[] = {
    {.workflow = "build",
     .name = "build",
     .retries = 3,
     .backoff = 10 * SEC,
     .backoff_max = 600 * SEC},
    {.workflow = "deploy",
     .name = "deploy-t",
     .retries = 5,
     .backoff = 1 * SEC,
     .backoff_max = 3 * SEC,
     .local = true},
};
static struct camunda7 n7 = {.worker_id = "w1-0000abcd", .topics = topics, .n_topics = 2};

static void parse(const char *body, unsigned max_runs, size_t max_input,
                  struct drv_claim_answer *ans)
{
	*ans = (struct drv_claim_answer){.queue_depth = -1};
	drv_camunda7_fetch_parse(&n7, max_runs, max_input, 30, body, strlen(body), ans);
}

static void answer_done(struct drv_claim_answer *ans)
{
	for (size_t i = 0; i < ans->n_runs; i++)
		if (ans->runs[i].priv) {
			drv_camunda7_ops.run_free(ans->runs[i].priv);
			ans->runs[i].priv = NULL;
		}
	drv_claim_answer_done(ans);
}

static bool has_env(char **env, const char *kv)
{
	for (; env && *env; env++)
		if (streq(*env, kv))
			return true;
	return false;
}

START_TEST(test_fetch_parse)
{
	struct drv_claim_answer ans;
	_cleanup_json_ cJSON *in = NULL;

	parse("[{\"id\":\"t-1\",\"topicName\":\"build\",\"workerId\":\"w1-0000abcd\","
	      "\"processInstanceId\":\"pi-9\",\"businessKey\":\"order 42\",\"retries\":null,"
	      "\"priority\":5,\"variables\":{"
	      "\"s\":{\"type\":\"String\",\"value\":\"x\",\"valueInfo\":{}},"
	      "\"i\":{\"type\":\"Integer\",\"value\":7},"
	      "\"l\":{\"type\":\"Long\",\"value\":9007199254740991},"
	      "\"sh\":{\"type\":\"Short\",\"value\":3},"
	      "\"d\":{\"type\":\"Double\",\"value\":1.5},"
	      "\"b\":{\"type\":\"Boolean\",\"value\":true},"
	      "\"n\":{\"type\":\"Null\",\"value\":null},"
	      "\"j\":{\"type\":\"Json\",\"value\":\"{\\\"a\\\":[1,2]}\"},"
	      "\"badj\":{\"type\":\"Json\",\"value\":\"{nope\"},"
	      "\"dt\":{\"type\":\"Date\",\"value\":\"2026-01-01T00:00:00.000+0000\","
	      "\"valueInfo\":{}}}},"
	      " {\"id\":\"t-2\",\"topicName\":\"deploy-t\",\"retries\":3,\"variables\":{}}]",
	      4, 1 << 20, &ans);
	ck_assert_int_eq(ans.a.verdict, DRV_OK);
	ck_assert_uint_eq(ans.n_runs, 2);
	ck_assert_str_eq(ans.runs[0].id, "t-1");
	ck_assert_str_eq(ans.runs[0].workflow, "build");
	ck_assert_ptr_null(ans.runs[0].invalid);
	ck_assert_uint_eq(ans.runs[0].attempt, 1);
	ck_assert_uint_eq(ans.runs[0].ttl_s, 30);
	ck_assert_ptr_nonnull(ans.runs[0].priv);
	ck_assert_ptr_nonnull(ans.runs[0].lease_key);
	ck_assert(has_env(ans.runs[0].env, "LESSEE_BUSINESS_KEY=order 42"));
	ck_assert(has_env(ans.runs[0].env, "LESSEE_PROCESS_INSTANCE_ID=pi-9"));
	ck_assert(has_env(ans.runs[0].env, "LESSEE_CAMUNDA7_TOPIC=build"));
	in = cJSON_Parse(ans.runs[0].input);
	ck_assert_ptr_nonnull(in);
	ck_assert_str_eq(tu_jstr(in, "s"), "x");
	ck_assert_int_eq((int)tu_jnum(in, "i"), 7);
	ck_assert(tu_jnum(in, "l") == 9007199254740991.0);
	ck_assert_int_eq((int)tu_jnum(in, "sh"), 3);
	ck_assert(tu_jnum(in, "d") == 1.5);
	ck_assert(tu_jtrue(in, "b"));
	ck_assert(cJSON_IsNull(cJSON_GetObjectItem(in, "n")));
	/* Json parsed; a Json that is not JSON stays the typed value it was */
	ck_assert(cJSON_IsArray(cJSON_GetObjectItem(cJSON_GetObjectItem(in, "j"), "a")));
	ck_assert_str_eq(tu_jstr(cJSON_GetObjectItem(in, "badj"), "type"), "Json");
	/* other types: as given */
	ck_assert_str_eq(tu_jstr(cJSON_GetObjectItem(in, "dt"), "type"), "Date");
	ck_assert_str_eq(tu_jstr(cJSON_GetObjectItem(in, "dt"), "value"),
	                 "2026-01-01T00:00:00.000+0000");
	/* the second: its topic's workflow, retries 3 of policy 5 = third attempt */
	ck_assert_str_eq(ans.runs[1].workflow, "deploy");
	ck_assert_uint_eq(ans.runs[1].attempt, 3);
	ck_assert_str_eq(ans.runs[1].input, "{}");
	ck_assert_str_ne(ans.runs[0].lease_key, ans.runs[1].lease_key);
	answer_done(&ans);
}
END_TEST

START_TEST(test_fetch_parse_refusals)
{
	struct drv_claim_answer ans;

	parse("[]", 4, 1024, &ans);
	ck_assert_int_eq(ans.a.verdict, DRV_OK);
	ck_assert_uint_eq(ans.n_runs, 0);
	answer_done(&ans);
	parse("{\"type\":\"x\"}", 4, 1024, &ans);
	ck_assert_int_eq(ans.a.verdict, DRV_REFUSED);
	ck_assert(ans.malformed);
	answer_done(&ans);
	/* a topic not asked for: nobody to reject it as */
	parse("[{\"id\":\"t-1\",\"topicName\":\"other\",\"variables\":{}}]", 4, 1024, &ans);
	ck_assert_uint_eq(ans.n_runs, 1);
	ck_assert_ptr_nonnull(strstr(ans.runs[0].invalid, "of a topic not asked for"));
	ck_assert(!ans.runs[0].usable_for_reject);
	ck_assert_ptr_null(ans.runs[0].priv);
	answer_done(&ans);
	/* a bad id */
	parse("[{\"id\":\"a/b\",\"topicName\":\"build\"}]", 4, 1024, &ans);
	ck_assert_ptr_nonnull(ans.runs[0].invalid);
	ck_assert(!ans.runs[0].usable_for_reject);
	answer_done(&ans);
	/* over max_input, or variables not an object: rejected by name */
	parse("[{\"id\":\"t-1\",\"topicName\":\"build\",\"variables\":{\"s\":{\"type\":"
	      "\"String\",\"value\":\"0123456789012345678901234567890123456789\"}}},"
	      "{\"id\":\"t-2\",\"topicName\":\"build\",\"variables\":[1]}]",
	      4, 32, &ans);
	ck_assert_uint_eq(ans.n_runs, 2);
	ck_assert_ptr_nonnull(strstr(ans.runs[0].invalid, "worker.max_input_bytes"));
	ck_assert(ans.runs[0].usable_for_reject);
	ck_assert_ptr_nonnull(ans.runs[0].priv);
	ck_assert_str_eq(ans.runs[0].input, "null");
	ck_assert_ptr_nonnull(strstr(ans.runs[1].invalid, "not an object"));
	answer_done(&ans);
	/* malformed after a task: what was read is ours */
	parse("[{\"id\":\"t-1\",\"topicName\":\"build\"}, {\"id\":", 4, 1024, &ans);
	ck_assert_int_eq(ans.a.verdict, DRV_OK);
	ck_assert_uint_eq(ans.n_runs, 1);
	ck_assert_ptr_nonnull(strstr(ans.a.detail, "malformed JSON after 1 tasks"));
	answer_done(&ans);
	/* more than maxTasks: granted, the worker gives them back */
	parse("[{\"id\":\"t-1\",\"topicName\":\"build\"},{\"id\":\"t-2\",\"topicName\":\"build\"}]",
	      1, 1024, &ans);
	ck_assert_uint_eq(ans.n_runs, 2);
	ck_assert_ptr_null(ans.runs[1].invalid);
	answer_done(&ans);
}
END_TEST

static drv_run_t run_of(const char *topic_workflow, long long retries)
{
	const struct c7_topic *t = streq(topic_workflow, "build") ? &topics[0] : &topics[1];

	return (drv_run_t){.task_id = "t-1",
	                   .worker_id = "w1-0000abcd",
	                   .lease_key = "w1-0000abcd/t-1/1",
	                   .retries = retries,
	                   .policy = t->retries,
	                   .backoff = t->backoff,
	                   .backoff_max = t->backoff_max,
	                   .local = t->local};
}

/* The body for an outcome, parsed; *ret_req: its request. */
static cJSON *body_of(const drv_run_t *run, const struct drv_outcome *o, const char *endpoint,
                      cJSON **ret_req)
{
	_cleanup_free_ char *body = NULL;
	cJSON *j;

	ck_assert_int_eq(drv_camunda7_body(run, o, &body), 0);
	j = cJSON_Parse(body);
	ck_assert_ptr_nonnull(j);
	ck_assert_str_eq(tu_jstr(j, "taskId"), "t-1");
	ck_assert_str_eq(tu_jstr(j, "endpoint"), endpoint);
	*ret_req = cJSON_GetObjectItem(j, "request");
	ck_assert_str_eq(tu_jstr(*ret_req, "workerId"), "w1-0000abcd");
	return j;
}

static const cJSON *var(const cJSON *req, const char *set, const char *name, const char *type)
{
	const cJSON *v = cJSON_GetObjectItem(cJSON_GetObjectItem(req, set), name);

	ck_assert_msg(v, "no variable %s in %s", name, set);
	ck_assert_str_eq(tu_jstr(v, "type"), type);
	return cJSON_GetObjectItem(v, "value");
}

START_TEST(test_body_complete)
{
	drv_run_t run = run_of("build", -1), local = run_of("deploy", -1);
	struct drv_outcome o = {
	    .status = DRV_SUCCEEDED,
	    .output = "{\"s\":\"x\",\"i\":7,\"l\":4294967296,\"d\":0.5,\"b\":false,\"n\":null,"
	              "\"o\":{\"k\":[1]},\"a\":[1,2],"
	              "\"t\":{\"type\":\"Date\",\"value\":\"2026-01-01T00:00:00.000+0000\"}}"};
	cJSON *req;
	_cleanup_json_ cJSON *j = body_of(&run, &o, "complete", &req);
	_cleanup_json_ cJSON *k = NULL, *m = NULL;

	ck_assert_str_eq(var(req, "variables", "s", "String")->valuestring, "x");
	ck_assert(var(req, "variables", "i", "Integer")->valuedouble == 7);
	ck_assert(var(req, "variables", "l", "Long")->valuedouble == 4294967296.0);
	ck_assert(var(req, "variables", "d", "Double")->valuedouble == 0.5);
	ck_assert(cJSON_IsFalse(var(req, "variables", "b", "Boolean")));
	ck_assert(cJSON_IsNull(var(req, "variables", "n", "Null")));
	ck_assert_str_eq(var(req, "variables", "o", "Json")->valuestring, "{\"k\":[1]}");
	ck_assert_str_eq(var(req, "variables", "a", "Json")->valuestring, "[1,2]");
	/* a typed value passes as it is */
	ck_assert_str_eq(var(req, "variables", "t", "Date")->valuestring,
	                 "2026-01-01T00:00:00.000+0000");
	ck_assert_ptr_null(cJSON_GetObjectItem(req, "localVariables"));

	/* local_variables = yes */
	k = body_of(&local, &o, "complete", &req);
	ck_assert_ptr_null(cJSON_GetObjectItem(req, "variables"));
	ck_assert_str_eq(var(req, "localVariables", "s", "String")->valuestring, "x");

	/* a result that is not an object: the variable "result"; none: no variables */
	o.output = "42";
	m = body_of(&run, &o, "complete", &req);
	ck_assert(var(req, "variables", "result", "Integer")->valuedouble == 42);
	cJSON_Delete(m);
	o.output = NULL;
	m = body_of(&run, &o, "complete", &req);
	ck_assert_ptr_null(cJSON_GetObjectItem(req, "variables"));
}
END_TEST

START_TEST(test_body_bpmn_error)
{
	drv_run_t run = run_of("build", -1);
	struct drv_outcome o = {.status = DRV_SUCCEEDED,
	                        .output = "{\"bpmn_error\":{\"code\":\"E_CARD\",\"message\":\"card "
	                                  "declined\",\"variables\":{\"why\":\"limit\"}}}"};
	cJSON *req;
	_cleanup_json_ cJSON *j = body_of(&run, &o, "bpmnError", &req);
	_cleanup_json_ cJSON *k = NULL;

	ck_assert_str_eq(tu_jstr(req, "errorCode"), "E_CARD");
	ck_assert_str_eq(tu_jstr(req, "errorMessage"), "card declined");
	ck_assert_str_eq(var(req, "variables", "why", "String")->valuestring, "limit");
	/* no code: an incident saying why */
	o.output = "{\"bpmn_error\":{\"message\":\"x\"}}";
	k = body_of(&run, &o, "failure", &req);
	ck_assert_ptr_nonnull(strstr(tu_jstr(req, "errorMessage"), "bpmn_error"));
	ck_assert_int_eq((int)tu_jnum(req, "retries"), 0);
}
END_TEST

START_TEST(test_body_failure_retries)
{
	drv_run_t fresh = run_of("build", -1), second = run_of("build", 2),
	          last = run_of("build", 1);
	drv_run_t capped = run_of("deploy", 1); /* policy 5: 4 failures before, 1s x 16 > 3s */
	struct drv_outcome exit3 = {.status = DRV_FAILED,
	                            .reason = DRV_REASON_EXIT,
	                            .has_exit_code = true,
	                            .exit_code = 3,
	                            .error = "exited with status 3",
	                            .log_tail = "line 1\nboom\n"};
	struct drv_outcome retry = {.status = DRV_FAILED,
	                            .reason = DRV_REASON_TIMEOUT,
	                            .retryable = true,
	                            .error = "timed out after 1000 ms"};
	cJSON *req;
	_cleanup_json_ cJSON *a = body_of(&fresh, &exit3, "failure", &req);
	_cleanup_json_ cJSON *b = NULL, *c = NULL, *d = NULL, *e = NULL;

	/* not retryable: an incident now */
	ck_assert_str_eq(tu_jstr(req, "errorMessage"), "exited with status 3");
	ck_assert_str_eq(tu_jstr(req, "errorDetails"), "line 1\nboom\n");
	ck_assert_int_eq((int)tu_jnum(req, "retries"), 0);
	ck_assert_int_eq((int)tu_jnum(req, "retryTimeout"), 0);
	/* retryable, retries null: the policy minus one, the base backoff */
	b = body_of(&fresh, &retry, "failure", &req);
	ck_assert_int_eq((int)tu_jnum(req, "retries"), 2);
	ck_assert_int_eq((int)tu_jnum(req, "retryTimeout"), 10000);
	ck_assert_ptr_null(cJSON_GetObjectItem(req, "errorDetails"));
	/* the task's own retries minus one, the backoff doubled per failure before */
	c = body_of(&second, &retry, "failure", &req);
	ck_assert_int_eq((int)tu_jnum(req, "retries"), 1);
	ck_assert_int_eq((int)tu_jnum(req, "retryTimeout"), 20000);
	d = body_of(&last, &retry, "failure", &req);
	ck_assert_int_eq((int)tu_jnum(req, "retries"), 0);
	ck_assert_int_eq((int)tu_jnum(req, "retryTimeout"), 0);
	e = body_of(&capped, &retry, "failure", &req);
	ck_assert_int_eq((int)tu_jnum(req, "retries"), 0);
	cJSON_Delete(e);
	capped.retries = 3; /* 2 failures before: 4 s, capped at 3 s */
	e = body_of(&capped, &retry, "failure", &req);
	ck_assert_int_eq((int)tu_jnum(req, "retries"), 2);
	ck_assert_int_eq((int)tu_jnum(req, "retryTimeout"), 3000);
}
END_TEST

/* UTF-16 code units of s (valid UTF-8). */
static size_t units(const char *s)
{
	size_t n = 0;

	for (const unsigned char *u = (const unsigned char *)s; *u; u++)
		if ((*u & 0xc0) != 0x80)
			n += *u >= 0xf0 ? 2 : 1;
	return n;
}

START_TEST(test_error_message_cap)
{
	drv_run_t run = run_of("build", -1);
	char big[4000] = "", tail[200] = "\x80\x80";
	struct drv_outcome o = {.status = DRV_FAILED, .reason = DRV_REASON_EXIT, .error = big};
	cJSON *req;
	_cleanup_json_ cJSON *a = NULL, *b = NULL;

	/* "é" is one unit in two bytes, U+1F600 two units in four: 666 units at most,
	 * never half a character */
	for (size_t i = 0; i < 700; i++)
		strcat(big, i % 2 ? "\xc3\xa9" : "\xf0\x9f\x98\x80");
	a = body_of(&run, &o, "failure", &req);
	ck_assert_uint_le(units(tu_jstr(req, "errorMessage")), DRV_CAMUNDA7_ERROR_MESSAGE_MAX);
	ck_assert_uint_ge(units(tu_jstr(req, "errorMessage")), DRV_CAMUNDA7_ERROR_MESSAGE_MAX - 1);
	/* a log tail that starts mid-character and holds bad bytes: valid UTF-8 */
	strcat(tail, "ok \xff end");
	o.error = "x";
	o.log_tail = tail;
	b = body_of(&run, &o, "failure", &req);
	ck_assert_str_eq(tu_jstr(req, "errorDetails"), "ok \xef\xbf\xbd end");
}
END_TEST

START_TEST(test_restore)
{
	drv_run_t run = run_of("build", 2);
	struct drv_outcome o = {.status = DRV_SUCCEEDED, .output = "{\"a\":1}"};
	_cleanup_free_ char *body = NULL, *endpoint = NULL, *request = NULL;
	drv_run_t *r = NULL;

	ck_assert_int_eq(drv_camunda7_body(&run, &o, &body), 0);
	ck_assert_int_eq(drv_camunda7_restore("t-1", body, &r), 0);
	ck_assert_str_eq(r->task_id, "t-1");
	ck_assert_str_eq(r->worker_id, "w1-0000abcd"); /* the fence it was sent with */
	ck_assert_str_eq(r->lease_key, "w1-0000abcd/t-1/1");
	drv_camunda7_ops.run_free(r);
	ck_assert_int_eq(drv_camunda7_body_split(body, &endpoint, &request), 0);
	ck_assert_str_eq(endpoint, "complete");
	ck_assert_ptr_nonnull(strstr(request, "\"workerId\":\"w1-0000abcd\""));
	ck_assert_int_eq(drv_camunda7_restore("t-2", body, &r), -EBADMSG);
	ck_assert_int_eq(
	    drv_camunda7_restore("t-1", "{\"taskId\":\"t-1\",\"endpoint\":\"complete\"}", &r),
	    -EBADMSG);
	ck_assert_int_eq(drv_camunda7_restore("t-1",
	                                      "{\"taskId\":\"t-1\",\"endpoint\":\"delete\","
	                                      "\"request\":{\"workerId\":\"w\"}}",
	                                      &r),
	                 -EBADMSG);
	ck_assert_int_eq(drv_camunda7_restore("t-1", "not json", &r), -EBADMSG);
}
END_TEST

START_TEST(test_registered)
{
	const struct drv_ops *o = drv_find("camunda7");

	ck_assert_ptr_eq(o, &drv_camunda7_ops);
	ck_assert(o->caps & DRV_CAP_MULTI_WORKFLOW);
	ck_assert(o->caps & DRV_CAP_RELEASE);
	ck_assert(!(o->caps & DRV_CAP_LOG_OFFSETS));
	ck_assert(!(o->caps & DRV_CAP_SERVER_TTL));
}
END_TEST

/* ---------------------------------------------------------------- main */

int main(void)
{
	Suite *s = suite_create("drv_camunda7");
	TCase *tp = tcase_create("pure");

	tcase_add_test(tp, test_registered);
	tcase_add_test(tp, test_fetch_parse);
	tcase_add_test(tp, test_fetch_parse_refusals);
	tcase_add_test(tp, test_body_complete);
	tcase_add_test(tp, test_body_bpmn_error);
	tcase_add_test(tp, test_body_failure_retries);
	tcase_add_test(tp, test_error_message_cap);
	tcase_add_test(tp, test_restore);
	suite_add_tcase(s, tp);
	return tu_run(s);
}
