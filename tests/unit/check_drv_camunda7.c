/* lib/proto/drv_camunda7.c: the pure steps first (fetchAndLock's answer into
 * grants, typed variables both ways, the completion bodies, the retry policy,
 * restore), then op by op against the Camunda 7 emulator
 * (tests/camunda7/camunda7_emu.c, a fresh one per test) with the loop stepped
 * by ev_run_once. */
#include <cJSON.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "camunda7_proc.h"
#include "conf/conf.h"
#include "ev/ev.h"
#include "jsonutil.h"
#include "lessor_proc.h" /* tu_timeout */
#include "obs/metrics.h"
#include "proto/driver-int.h"
#include "proto/drv_camunda7-int.h"
#include "testutil.h"
#include "util/fileio.h"
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
	              "\"big\":12345678901234567,\"o2\":{\"id\":98765432109876543},"
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
	{
		/* numbers as the run wrote them: 17 digits stay 17 digits */
		_cleanup_free_ char *body = NULL;

		ck_assert_int_eq(drv_camunda7_body(&run, &o, &body), 0);
		ck_assert_ptr_nonnull(
		    strstr(body, "\"big\":{\"type\":\"Long\",\"value\":12345678901234567}"));
		ck_assert_ptr_nonnull(strstr(body, "98765432109876543"));
	}

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

/* ---------------------------------------------------------------- emulator */

static struct tu_camunda7 *E;
static ev_t *ev;
static metrics_t *M;
static struct conf *CF;
static drv_t *D;
static char *dir;

static void drv_start(const char *api_extra)
{
	_cleanup_free_ char *text = NULL, *path = NULL, *err = NULL;
	struct conf_source src = {0};

	D = drv_free(D);
	CF = conf_free(CF);
	text = tu_fmt("[api]\nurl = %s\nprotocol = camunda7\nrequest_timeout = 10s\n%s"
	              "[worker]\nid = w1\nspool_dir = %s/spool\nrun_dir = %s/run\n"
	              "lease_ttl = 20s\nlease_refresh = 2s\n"
	              "[workflow.build]\ncommand = /bin/true\nvariables = n s\n"
	              "[workflow.deploy]\ncommand = /bin/true\ntopic = deploy-t\nretries = 2\n"
	              "retry_backoff = 1s\n",
	              tu_camunda7_url(E), api_extra, dir, dir);
	path = tu_fmt("%s/lessee.conf", dir);
	ck_assert_int_eq(write_file_atomic(path, text, strlen(text), 0644), 0);
	src.path = path;
	ck_assert_msg(conf_load(&src, &CF, &err) == 0, "%s", err ? err : "?");
	ck_assert_int_eq(drv_new(ev, CF, M, &D), 0);
	ck_assert_str_eq(drv_ops(D)->name, "camunda7");
}

static void start_with(const struct tu_camunda7_opts *o, const char *api_extra)
{
	dir = tu_tmpdir("drv-camunda7");
	ck_assert_ptr_nonnull(dir);
	ck_assert_int_eq(tu_camunda7_start(o, &E), 0);
	ck_assert_int_eq(ev_new(&ev, tu_backend()), 0);
	M = metrics_new();
	ck_assert_ptr_nonnull(M);
	drv_start(api_extra);
}

static void setup(void)
{
	start_with(NULL, "");
}

static void teardown(void)
{
	D = drv_free(D);
	CF = conf_free(CF);
	ev = ev_free(ev);
	M = metrics_free(M);
	if (E && tu_camunda7_pid(E) > 0)
		ck_assert_int_eq(tu_camunda7_stop(E), 0); /* clean exit: no leak, no crash */
	E = tu_camunda7_free(E);
	rm_rf(dir);
	free(dir);
}

static void step_until(const bool *done)
{
	usec_t end = ev_now(ev) + tu_timeout(20 * SEC);

	while (!*done) {
		ck_assert_msg(ev_now(ev) < end, "no answer in time");
		ck_assert_int_ge(ev_run_once(ev, 100 * USEC_PER_MSEC), 0);
	}
}

struct got {
	bool done;
	struct drv_answer a;
};

static void on_answer(const struct drv_answer *a, void *ud)
{
	struct got *g = ud;

	ck_assert(!g->done); /* exactly once */
	g->done = true;
	g->a = *a;
}

struct got_claim {
	bool done;
	struct drv_claim_answer ans;
	struct drv_grant *runs;
	size_t n_runs;
};

static void on_claim(struct drv_claim_answer *ans, void *ud)
{
	struct got_claim *g = ud;

	ck_assert(!g->done);
	g->done = true;
	g->ans = *ans;
	g->n_runs = ans->n_runs;
	g->runs = calloc(ans->n_runs + 1, sizeof(*g->runs));
	ck_assert_ptr_nonnull(g->runs);
	for (size_t i = 0; i < ans->n_runs; i++) {
		g->runs[i] = ans->runs[i];
		ans->runs[i] = (struct drv_grant){0};
	}
	g->ans.runs = NULL;
}

static void got_claim_done(struct got_claim *g)
{
	for (size_t i = 0; i < g->n_runs; i++) {
		drv_ops(D)->run_free(g->runs[i].priv);
		g->runs[i].priv = NULL;
		drv_grant_done(&g->runs[i]);
	}
	free(g->runs);
	*g = (struct got_claim){0};
}

static void claim_wfs(char *const *wfs, unsigned max, usec_t wait, struct got_claim *g)
{
	char *const tags[] = {NULL};
	struct drv_claim c = {.max_runs = max,
	                      .workflows = wfs,
	                      .tags = tags,
	                      .lease_ttl_s = 20,
	                      .wait = wait,
	                      .timeout = wait + 10 * SEC,
	                      .max_input = 1 << 20};

	*g = (struct got_claim){0};
	ck_assert_int_eq(drv_ops(D)->claim(D, &c, on_claim, g, NULL), 0);
	ck_assert(!g->done); /* never from inside the call */
	step_until(&g->done);
}

static void claim(unsigned max, usec_t wait, struct got_claim *g)
{
	char b[] = "build", d[] = "deploy";
	char *const wfs[] = {b, d, NULL};

	claim_wfs(wfs, max, wait, g);
}

/* One "build" task, claimed: its grant is g->runs[0]. */
static char *claim_one(const char *create_extra, struct got_claim *g)
{
	_cleanup_free_ char *body =
	    tu_fmt("{\"topicName\":\"build\",\"variables\":{\"n\":{\"type\":\"Integer\","
	           "\"value\":1}}%s}",
	           create_extra ? create_extra : "");
	char *id = tu_camunda7_create(E, body);

	ck_assert_ptr_nonnull(id);
	claim(1, 0, g);
	ck_assert_int_eq(g->ans.a.verdict, DRV_OK);
	ck_assert_uint_eq(g->n_runs, 1);
	ck_assert_str_eq(g->runs[0].id, id);
	ck_assert_ptr_nonnull(g->runs[0].priv);
	return id;
}

static void renew(drv_run_t *run, struct got *g)
{
	*g = (struct got){0};
	ck_assert_int_eq(drv_ops(D)->renew(D, run, 20, 5 * SEC, false, on_answer, g, NULL), 0);
	ck_assert(!g->done);
	step_until(&g->done);
}

static void complete(drv_run_t *run, const struct drv_outcome *o, struct got *g)
{
	_cleanup_free_ char *body = NULL;

	ck_assert_int_eq(drv_ops(D)->complete_body(D, run, o, &body), 0);
	*g = (struct got){0};
	ck_assert_int_eq(drv_ops(D)->complete(D, run, body, on_answer, g, NULL), 0);
	step_until(&g->done);
}

static void release(drv_run_t *run, struct got *g)
{
	*g = (struct got){0};
	ck_assert_int_eq(drv_ops(D)->release(D, run, DRV_RELEASE_SHUTDOWN, 0, on_answer, g, NULL),
	                 0);
	step_until(&g->done);
}

/* Another worker's fetchAndLock of topic "build": how many it got. */
static int fetch_as(const char *worker)
{
	_cleanup_free_ char *body =
	    tu_fmt("{\"workerId\":\"%s\",\"maxTasks\":1,\"topics\":[{\"topicName\":\"build\","
	           "\"lockDuration\":20000}]}",
	           worker);
	long st = 0;
	cJSON *a =
	    tu_camunda7_json(E, "POST", "/engine-rest/external-task/fetchAndLock", body, &st);
	int n;

	ck_assert_int_eq(st, 200);
	n = cJSON_GetArraySize(a);
	cJSON_Delete(a);
	return n;
}

/* Every engine request the emulator counted. */
static double engine_requests(void)
{
	static const char *const ops[] = {"fetchAndLock", "extendLock", "unlock",
	                                  "complete",     "failure",    "bpmnError"};
	double n = 0;

	for (size_t i = 0; i < ELEMENTSOF(ops); i++)
		n += tu_camunda7_stat(E, ops[i]);
	return n;
}

static const char *task_str(cJSON *t, const char *k)
{
	ck_assert_ptr_nonnull(t);
	return tu_jstr(t, k);
}

START_TEST(test_claim_tasks)
{
	_cleanup_free_ char *a = tu_camunda7_create(
	    E, "{\"topicName\":\"build\",\"businessKey\":\"order-42\",\"priority\":1,"
	       "\"variables\":{\"n\":{\"type\":\"Integer\",\"value\":7},\"s\":{\"type\":\"String\","
	       "\"value\":\"x\"},\"hidden\":{\"type\":\"String\",\"value\":\"not fetched\"}}}");
	_cleanup_free_ char *b = tu_camunda7_create(
	    E, "{\"topicName\":\"deploy-t\",\"priority\":9,\"variables\":{\"j\":{\"type\":\"Json\","
	       "\"value\":\"{\\\"k\\\":[1,2]}\"}}}");
	struct got_claim g;
	_cleanup_json_ cJSON *in0 = NULL, *in1 = NULL, *t = NULL;
	_cleanup_free_ char *bk = NULL;

	ck_assert_ptr_nonnull(a);
	ck_assert_ptr_nonnull(b);
	claim(4, 0, &g);
	ck_assert_int_eq(g.ans.a.verdict, DRV_OK);
	ck_assert_uint_eq(g.n_runs, 2);
	/* usePriority: the higher priority first */
	ck_assert_str_eq(g.runs[0].id, b);
	ck_assert_str_eq(g.runs[0].workflow, "deploy");
	ck_assert_str_eq(g.runs[1].id, a);
	ck_assert_str_eq(g.runs[1].workflow, "build");
	in0 = cJSON_Parse(g.runs[0].input);
	in1 = cJSON_Parse(g.runs[1].input);
	ck_assert(cJSON_IsArray(cJSON_GetObjectItem(cJSON_GetObjectItem(in0, "j"), "k")));
	ck_assert_int_eq((int)tu_jnum(in1, "n"), 7);
	ck_assert_str_eq(tu_jstr(in1, "s"), "x");
	ck_assert_ptr_null(cJSON_GetObjectItem(in1, "hidden")); /* variables = n s */
	ck_assert(has_env(g.runs[1].env, "LESSEE_BUSINESS_KEY=order-42"));
	t = tu_camunda7_task(E, a);
	bk = tu_fmt("LESSEE_PROCESS_INSTANCE_ID=%s", task_str(t, "processInstanceId"));
	ck_assert(has_env(g.runs[1].env, bk));
	/* locked for us: the worker id and this process's nonce, lease_ttl long */
	ck_assert_str_eq(task_str(t, "state"), "LOCKED");
	ck_assert_ptr_nonnull(startswith(task_str(t, "workerId"), "w1-"));
	ck_assert_uint_eq(strlen(task_str(t, "workerId")), 3 + 8);
	ck_assert_double_le(tu_jnum(t, "lockRemainingMs"), 20000);
	ck_assert_double_gt(tu_jnum(t, "lockRemainingMs"), 15000);
	got_claim_done(&g);
}
END_TEST

/* The breaker leaves a workflow out: its topic is not asked for. */
START_TEST(test_claim_topic_left_out)
{
	_cleanup_free_ char *d = tu_camunda7_create(E, "{\"topicName\":\"deploy-t\"}");
	char b[] = "build";
	char *const only_build[] = {b, NULL};
	struct got_claim g;
	_cleanup_json_ cJSON *t = NULL;

	claim_wfs(only_build, 4, 0, &g);
	ck_assert_int_eq(g.ans.a.verdict, DRV_OK);
	ck_assert_uint_eq(g.n_runs, 0);
	got_claim_done(&g);
	t = tu_camunda7_task(E, d);
	ck_assert_str_eq(task_str(t, "state"), "AVAILABLE");
}
END_TEST

/* asyncResponseTimeout: held until a task comes, or empty after the wait. */
START_TEST(test_claim_long_poll)
{
	struct got_claim g;
	usec_t t0 = time_mono();

	claim(2, 1 * SEC, &g);
	ck_assert_int_eq(g.ans.a.verdict, DRV_OK);
	ck_assert_uint_eq(g.n_runs, 0);
	ck_assert_uint_ge(time_mono() - t0, 900 * USEC_PER_MSEC); /* it was held */
	got_claim_done(&g);
	ck_assert_int_ge(tu_camunda7_stat(E, "fetchAndLock"), 1);
}
END_TEST

START_TEST(test_claim_5xx_retry)
{
	struct got_claim g;

	ck_assert_int_eq(tu_camunda7_fault(E, "{\"path\":\"/engine-rest/external-task/"
	                                      "fetchAndLock\",\"count\":1,\"status\":500}"),
	                 0);
	claim(1, 0, &g);
	ck_assert_int_eq(g.ans.a.verdict, DRV_RETRY);
	ck_assert_ptr_nonnull(strstr(g.ans.a.detail, "injected fault"));
	got_claim_done(&g);
	claim(1, 0, &g);
	ck_assert_int_eq(g.ans.a.verdict, DRV_OK);
	got_claim_done(&g);
}
END_TEST

START_TEST(test_renew_ok_and_lost)
{
	struct got_claim g1, g2;
	struct got r;
	_cleanup_free_ char *a = claim_one(NULL, &g1);
	_cleanup_free_ char *b = NULL;
	_cleanup_json_ cJSON *t = NULL;

	renew(g1.runs[0].priv, &r);
	ck_assert_int_eq(r.a.verdict, DRV_OK);
	ck_assert_uint_eq(r.a.ttl_s, 20);
	t = tu_camunda7_task(E, a);
	ck_assert_int_eq((int)tu_jnum(t, "lastNewDuration"), 20000);
	ck_assert_int_eq((int)tu_jnum(cJSON_GetObjectItem(t, "counts"), "extendLock"), 1);
	/* the lock ran out and another worker locked it: 400, lost */
	ck_assert_int_eq(tu_camunda7_expire(E, a), 0);
	ck_assert_int_eq(fetch_as("other"), 1);
	renew(g1.runs[0].priv, &r);
	ck_assert_int_eq(r.a.verdict, DRV_LOST);
	ck_assert_ptr_nonnull(strstr(r.a.detail, "HTTP 400"));
	/* its process instance cancelled: 404, lost */
	b = claim_one(NULL, &g2);
	ck_assert_int_eq(tu_camunda7_cancel(E, b), 0);
	renew(g2.runs[0].priv, &r);
	ck_assert_int_eq(r.a.verdict, DRV_LOST);
	ck_assert_ptr_nonnull(strstr(r.a.detail, "HTTP 404"));
	got_claim_done(&g1);
	got_claim_done(&g2);
}
END_TEST

START_TEST(test_renew_expired_not_relocked_is_lost)
{
	struct got_claim g;
	struct got r;
	_cleanup_free_ char *a = claim_one(NULL, &g);

	/* "Cannot extend a lock that expired" (ExtendLockOnExternalTaskCmd) */
	ck_assert_int_eq(tu_camunda7_expire(E, a), 0);
	renew(g.runs[0].priv, &r);
	ck_assert_int_eq(r.a.verdict, DRV_LOST);
	got_claim_done(&g);
}
END_TEST

START_TEST(test_renew_5xx_retry_and_401)
{
	struct got_claim g;
	struct got r;
	_cleanup_free_ char *a = claim_one(NULL, &g);
	_cleanup_free_ char *fault =
	    tu_fmt("{\"path\":\"/engine-rest/external-task/%s/extendLock\","
	           "\"count\":1,\"status\":503}",
	           a);

	ck_assert_int_eq(tu_camunda7_fault(E, fault), 0);
	renew(g.runs[0].priv, &r);
	ck_assert_int_eq(r.a.verdict, DRV_RETRY);
	free(fault);
	fault = tu_fmt("{\"path\":\"/engine-rest/external-task/%s/extendLock\",\"count\":1,"
	               "\"status\":403}",
	               a);
	ck_assert_int_eq(tu_camunda7_fault(E, fault), 0);
	renew(g.runs[0].priv, &r);
	ck_assert_int_eq(r.a.verdict, DRV_DENIED);
	renew(g.runs[0].priv, &r);
	ck_assert_int_eq(r.a.verdict, DRV_OK);
	got_claim_done(&g);
}
END_TEST

static void log_append(drv_run_t *run, uint64_t off, const char *data, struct got *g)
{
	*g = (struct got){0};
	ck_assert_int_eq(
	    drv_ops(D)->log_append(D, run, off, data, strlen(data), 5 * SEC, on_answer, g, NULL),
	    0);
	ck_assert(!g->done); /* never from inside the call */
	step_until(&g->done);
}

/* The engine has no log: nothing is sent, whole lines go to lessee's own log
 * (stderr here, the journal under systemd) with the run's id. */
START_TEST(test_log_sends_nothing)
{
	struct got_claim g;
	struct got r = {0};
	_cleanup_free_ char *a = claim_one(NULL, &g);
	_cleanup_free_ char *path = tu_fmt("%s/stderr", dir), *text = NULL;
	_cleanup_free_ char *want = tu_fmt("run_id=%s", a);
	double before = engine_requests();
	int saved = dup(STDERR_FILENO), fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	size_t n = 0;

	ck_assert_int_ge(saved, 0);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(dup2(fd, STDERR_FILENO), STDERR_FILENO);
	log_append(g.runs[0].priv, 0, "hello\nwor", &r);
	ck_assert_int_eq(r.a.verdict, DRV_OK);
	ck_assert_uint_eq(r.a.length, 9);
	log_append(g.runs[0].priv, 9, "ld\n", &r);
	ck_assert_uint_eq(r.a.length, 12);
	ck_assert_int_eq(dup2(saved, STDERR_FILENO), STDERR_FILENO);
	close(saved);
	close(fd);
	ck_assert(engine_requests() == before);
	ck_assert_int_eq(read_file_capped(path, 1 << 20, &text, &n), 0);
	ck_assert_msg(strstr(text, "hello") && strstr(text, "world") && strstr(text, want), "%s",
	              text);
	ck_assert_ptr_null(strstr(text, "wor\"")); /* a partial line waits for its end */
	got_claim_done(&g);
}
END_TEST

START_TEST(test_complete_variables)
{
	struct got_claim g;
	struct got r;
	_cleanup_free_ char *a = claim_one(NULL, &g);
	struct drv_outcome o = {
	    .status = DRV_SUCCEEDED,
	    .output = "{\"ok\":true,\"count\":3,\"big\":1234567890123456,\"obj\":{\"x\":[1]}}"};
	_cleanup_json_ cJSON *t = NULL;
	const cJSON *v;

	complete(g.runs[0].priv, &o, &r);
	ck_assert_int_eq(r.a.verdict, DRV_OK);
	ck_assert_str_eq(r.a.run_status, "completed");
	t = tu_camunda7_wait(E, a, "COMPLETED", 5 * SEC);
	ck_assert_ptr_nonnull(t);
	v = cJSON_GetObjectItem(t, "completeVariables");
	ck_assert_str_eq(tu_jstr(cJSON_GetObjectItem(v, "ok"), "type"), "Boolean");
	ck_assert_str_eq(tu_jstr(cJSON_GetObjectItem(v, "count"), "type"), "Integer");
	ck_assert_str_eq(tu_jstr(cJSON_GetObjectItem(v, "big"), "type"), "Long");
	ck_assert(tu_jnum(cJSON_GetObjectItem(v, "big"), "value") == 1234567890123456.0);
	ck_assert_str_eq(tu_jstr(cJSON_GetObjectItem(v, "obj"), "type"), "Json");
	/* a second completion: the task is gone, lost */
	complete(g.runs[0].priv, &o, &r);
	ck_assert_int_eq(r.a.verdict, DRV_LOST);
	got_claim_done(&g);
}
END_TEST

START_TEST(test_complete_bpmn_error)
{
	struct got_claim g;
	struct got r;
	_cleanup_free_ char *a = claim_one(NULL, &g);
	struct drv_outcome o = {.status = DRV_SUCCEEDED,
	                        .output =
	                            "{\"bpmn_error\":{\"code\":\"E1\",\"message\":\"no stock\","
	                            "\"variables\":{\"sku\":\"A-1\"}}}"};
	_cleanup_json_ cJSON *t = NULL;
	const cJSON *e;

	complete(g.runs[0].priv, &o, &r);
	ck_assert_int_eq(r.a.verdict, DRV_OK);
	t = tu_camunda7_wait(E, a, "BPMN_ERROR", 5 * SEC);
	ck_assert_ptr_nonnull(t);
	e = cJSON_GetObjectItem(t, "bpmnError");
	ck_assert_str_eq(tu_jstr(e, "code"), "E1");
	ck_assert_str_eq(tu_jstr(e, "message"), "no stock");
	got_claim_done(&g);
}
END_TEST

START_TEST(test_complete_failure_to_incident)
{
	struct got_claim g;
	struct got r;
	_cleanup_free_ char *a = claim_one(NULL, &g);
	struct drv_outcome retry = {.status = DRV_FAILED,
	                            .reason = DRV_REASON_EXIT,
	                            .has_exit_code = true,
	                            .exit_code = 75,
	                            .retryable = true,
	                            .error = "exited with status 75",
	                            .log_tail = "trying\nnot yet\n"};
	struct drv_outcome hard = {.status = DRV_FAILED,
	                           .reason = DRV_REASON_EXIT,
	                           .has_exit_code = true,
	                           .exit_code = 2,
	                           .error = "exited with status 2"};
	_cleanup_json_ cJSON *t = NULL;

	complete(g.runs[0].priv, &retry, &r);
	ck_assert_int_eq(r.a.verdict, DRV_OK);
	ck_assert_str_eq(r.a.run_status, "failed");
	t = tu_camunda7_task(E, a);
	ck_assert_int_eq((int)tu_jnum(t, "retries"), 2); /* retries = 3 by default, minus one */
	ck_assert_int_eq((int)tu_jnum(t, "retryTimeout"), 10000);
	ck_assert_str_eq(task_str(t, "errorMessage"), "exited with status 75");
	ck_assert_str_eq(task_str(t, "errorDetails"), "trying\nnot yet\n");
	got_claim_done(&g);
	/* again, after its retryTimeout (the emulator's expire), then a hard failure */
	ck_assert_int_eq(tu_camunda7_expire(E, a), 0);
	claim(1, 0, &g);
	ck_assert_uint_eq(g.n_runs, 1);
	ck_assert_uint_eq(g.runs[0].attempt, 2);
	complete(g.runs[0].priv, &hard, &r);
	ck_assert_int_eq(r.a.verdict, DRV_OK);
	cJSON_Delete(t);
	t = tu_camunda7_wait(E, a, "INCIDENT", 5 * SEC);
	ck_assert_ptr_nonnull(t);
	ck_assert_int_eq((int)tu_jnum(t, "retries"), 0);
	got_claim_done(&g);
}
END_TEST

START_TEST(test_error_message_capped_by_engine_rules)
{
	struct got_claim g;
	struct got r;
	_cleanup_free_ char *a = claim_one(NULL, &g);
	char big[3000] = "";
	struct drv_outcome o = {.status = DRV_FAILED, .reason = DRV_REASON_EXIT, .error = big};
	_cleanup_json_ cJSON *t = NULL;

	for (size_t i = 0; i < 1000; i++)
		strcat(big, i % 3 ? "a" : "\xc3\xa9");
	complete(g.runs[0].priv, &o, &r);
	ck_assert_int_eq(r.a.verdict, DRV_OK);
	t = tu_camunda7_task(E, a);
	ck_assert_uint_eq(units(task_str(t, "errorMessage")), DRV_CAMUNDA7_ERROR_MESSAGE_MAX);
	got_claim_done(&g);
}
END_TEST

START_TEST(test_release_unlocks)
{
	struct got_claim g;
	struct got r;
	_cleanup_free_ char *a = claim_one(NULL, &g);
	_cleanup_json_ cJSON *t = NULL;

	release(g.runs[0].priv, &r);
	ck_assert_int_eq(r.a.verdict, DRV_OK);
	t = tu_camunda7_task(E, a);
	ck_assert_str_eq(task_str(t, "state"), "AVAILABLE");
	ck_assert_int_eq((int)tu_jnum(cJSON_GetObjectItem(t, "counts"), "unlock"), 1);
	got_claim_done(&g);
	/* fetched again at once, by anyone */
	ck_assert_int_eq(fetch_as("other"), 1);
}
END_TEST

/* A completion spooled by this process, restored by the next one: it still
 * carries the old workerId, which is the fence. */
START_TEST(test_restore_and_fence)
{
	struct got_claim g;
	struct got r;
	_cleanup_free_ char *a = claim_one(NULL, &g), *b = NULL;
	_cleanup_free_ char *body_a = NULL, *body_b = NULL;
	struct drv_outcome o = {.status = DRV_SUCCEEDED, .output = "{\"v\":1}"};
	drv_run_t *ra = NULL, *rb = NULL;
	_cleanup_json_ cJSON *t = NULL;

	ck_assert_int_eq(drv_ops(D)->complete_body(D, g.runs[0].priv, &o, &body_a), 0);
	got_claim_done(&g);
	b = claim_one(NULL, &g);
	ck_assert_int_eq(drv_ops(D)->complete_body(D, g.runs[0].priv, &o, &body_b), 0);
	got_claim_done(&g);

	drv_start(""); /* a new incarnation: a new nonce */
	/* a: still locked by the old workerId: delivered */
	ck_assert_int_eq(drv_ops(D)->restore(D, a, body_a, &ra), 0);
	{
		_cleanup_json_ cJSON *ja = cJSON_Parse(body_a);

		ck_assert_str_eq(drv_ops(D)->run_lease_key(ra), tu_jstr(ja, "leaseKey"));
	}
	r = (struct got){0};
	ck_assert_int_eq(drv_ops(D)->complete(D, ra, body_a, on_answer, &r, NULL), 0);
	step_until(&r.done);
	ck_assert_int_eq(r.a.verdict, DRV_OK);
	t = tu_camunda7_wait(E, a, "COMPLETED", 5 * SEC);
	ck_assert_ptr_nonnull(t);
	/* b: its lock ran out and the new incarnation fetched it: refused, lost */
	ck_assert_int_eq(tu_camunda7_expire(E, b), 0);
	claim(1, 0, &g);
	ck_assert_uint_eq(g.n_runs, 1);
	ck_assert_int_eq(drv_ops(D)->restore(D, b, body_b, &rb), 0);
	r = (struct got){0};
	ck_assert_int_eq(drv_ops(D)->complete(D, rb, body_b, on_answer, &r, NULL), 0);
	step_until(&r.done);
	ck_assert_int_eq(r.a.verdict, DRV_LOST);
	ck_assert_ptr_nonnull(strstr(r.a.detail, "HTTP 400"));
	drv_ops(D)->run_free(ra);
	drv_ops(D)->run_free(rb);
	got_claim_done(&g);
}
END_TEST

/* ---- auth ---- */

static void basic_setup(void)
{
	start_with(&(struct tu_camunda7_opts){.user = "demo", .password = "s3cret"}, "");
}

START_TEST(test_auth_basic)
{
	_cleanup_free_ char *pw = tu_fmt("%s/pw", dir), *extra = NULL, *id = NULL;
	struct got_claim g;

	claim(1, 0, &g); /* no credentials: refused */
	ck_assert_int_eq(g.ans.a.verdict, DRV_DENIED);
	got_claim_done(&g);
	ck_assert_int_eq(write_file_atomic(pw, "wrong\n", 6, 0600), 0);
	extra = tu_fmt("user = demo\npassword_file = %s\n", pw);
	drv_start(extra);
	claim(1, 0, &g);
	ck_assert_int_eq(g.ans.a.verdict, DRV_DENIED);
	got_claim_done(&g);
	ck_assert_int_eq(write_file_atomic(pw, "s3cret\n", 7, 0600), 0);
	drv_start(extra);
	free(id);
	id = tu_camunda7_create(E, "{\"topicName\":\"build\"}");
	ck_assert_ptr_nonnull(id);
	claim(1, 0, &g);
	ck_assert_int_eq(g.ans.a.verdict, DRV_OK);
	ck_assert_uint_eq(g.n_runs, 1);
	got_claim_done(&g);
}
END_TEST

static void bearer_setup(void)
{
	start_with(&(struct tu_camunda7_opts){.bearer = "tok-1"}, "");
}

START_TEST(test_auth_bearer)
{
	_cleanup_free_ char *tok = tu_fmt("%s/tok", dir), *extra = tu_fmt("token_file = %s\n", tok);
	struct got_claim g;

	ck_assert_int_eq(write_file_atomic(tok, "tok-1\n", 6, 0600), 0);
	drv_start(extra);
	claim(1, 0, &g);
	ck_assert_int_eq(g.ans.a.verdict, DRV_OK);
	got_claim_done(&g);
	ck_assert_int_eq(write_file_atomic(tok, "tok-2\n", 6, 0600), 0);
	drv_start(extra);
	claim(1, 0, &g);
	ck_assert_int_eq(g.ans.a.verdict, DRV_DENIED);
	ck_assert(drv_denied(D));
	got_claim_done(&g);
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

	TCase *te = tcase_create("emu");

	tcase_add_checked_fixture(te, setup, teardown);
	tcase_set_timeout(te, 60);
	tcase_add_test(te, test_claim_tasks);
	tcase_add_test(te, test_claim_topic_left_out);
	tcase_add_test(te, test_claim_long_poll);
	tcase_add_test(te, test_claim_5xx_retry);
	tcase_add_test(te, test_renew_ok_and_lost);
	tcase_add_test(te, test_renew_expired_not_relocked_is_lost);
	tcase_add_test(te, test_renew_5xx_retry_and_401);
	tcase_add_test(te, test_log_sends_nothing);
	tcase_add_test(te, test_complete_variables);
	tcase_add_test(te, test_complete_bpmn_error);
	tcase_add_test(te, test_complete_failure_to_incident);
	tcase_add_test(te, test_error_message_capped_by_engine_rules);
	tcase_add_test(te, test_release_unlocks);
	tcase_add_test(te, test_restore_and_fence);
	suite_add_tcase(s, te);

	TCase *ta = tcase_create("auth");

	tcase_add_checked_fixture(ta, basic_setup, teardown);
	tcase_add_test(ta, test_auth_basic);
	suite_add_tcase(s, ta);

	TCase *tb = tcase_create("bearer");

	tcase_add_checked_fixture(tb, bearer_setup, teardown);
	tcase_add_test(tb, test_auth_bearer);
	suite_add_tcase(s, tb);
	return tu_run(s);
}
