/* The Camunda 7 emulator held to the engine's rules (tests/camunda7/camunda7_emu.c
 * names the engine classes each rule comes from), over real HTTP, a fresh
 * emulator for every test: fetch and lock, maxTasks, priority, the long poll,
 * lock ownership by workerId, lock expiry, retries and incidents, bpmnError,
 * unlock, the error bodies {type, message, code} and their statuses,
 * Content-Type, auth and the fault controls. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "camunda7_proc.h"
#include "jsonutil.h"
#include "lessor_proc.h" /* tu_timeout */
#include "testutil.h"
#include "util/macro.h"

#define SEC USEC_PER_SEC
#define ET "/engine-rest/external-task"

static struct tu_camunda7 *C;

static void start_with(const struct tu_camunda7_opts *o)
{
	ck_assert_int_eq(tu_camunda7_start(o, &C), 0);
}

static void start(void)
{
	start_with(NULL);
}

static void teardown(void)
{
	if (C && tu_camunda7_pid(C) > 0)
		ck_assert_int_eq(tu_camunda7_stop(C), 0); /* clean exit: no leak, no crash */
	C = tu_camunda7_free(C);
}

static char *create(const char *body)
{
	char *id = tu_camunda7_create(C, body);

	ck_assert_ptr_nonnull(id);
	return id;
}

/* POST fetchAndLock for one topic: the answer, status in *st. */
static cJSON *fetch_st(const char *worker, int max, const char *topic, long lock_ms,
                       long timeout_ms, long *st)
{
	_cleanup_free_ char *to =
	    timeout_ms >= 0 ? tu_fmt(",\"asyncResponseTimeout\":%ld", timeout_ms) : strdup("");
	_cleanup_free_ char *body =
	    tu_fmt("{\"workerId\":\"%s\",\"maxTasks\":%d%s,\"topics\":[{\"topicName\":\"%s\","
	           "\"lockDuration\":%ld}]}",
	           worker, max, to, topic, lock_ms);

	return tu_camunda7_json(C, "POST", ET "/fetchAndLock", body, st);
}

static cJSON *fetch(const char *worker, int max, const char *topic, long lock_ms)
{
	long st;
	cJSON *a = fetch_st(worker, max, topic, lock_ms, -1, &st);

	ck_assert_int_eq(st, 200);
	ck_assert(cJSON_IsArray(a));
	return a;
}

/* Fetch exactly one task: its id (free it). */
static char *fetch_one(const char *worker, const char *topic, long lock_ms)
{
	cJSON *a = fetch(worker, 1, topic, lock_ms);
	char *id;

	ck_assert_int_eq(cJSON_GetArraySize(a), 1);
	id = strdup(tu_jstr(cJSON_GetArrayItem(a, 0), "id"));
	cJSON_Delete(a);
	return id;
}

/* POST /external-task/{id}/{what} with body: the status; *ret the error body. */
static long op(const char *id, const char *what, const char *body, cJSON **ret)
{
	_cleanup_free_ char *path = tu_fmt(ET "/%s/%s", id, what);
	struct tu_http_answer a;
	const char *h[] = {"Content-Type: application/json", NULL};
	long st;

	ck_assert_int_eq(tu_camunda7_http(C, "POST", path, body ? h : NULL, body, &a), 0);
	st = a.status;
	if (st == 204) { /* no body, no Content-Type */
		ck_assert_uint_eq(a.len, 0);
		ck_assert_ptr_null(a.ctype);
	} else {
		ck_assert_str_eq(a.ctype, "application/json");
	}
	if (ret)
		*ret = cJSON_ParseWithLength(a.body, a.len);
	tu_http_answer_done(&a);
	return st;
}

/* An ExceptionDto: {type, message, code}; message checked by prefix. */
static void check_err(cJSON *e, const char *type, const char *msg_prefix, int code)
{
	const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "code");

	ck_assert_ptr_nonnull(e);
	ck_assert_str_eq(tu_jstr(e, "type"), type);
	ck_assert_ptr_nonnull(tu_jstr(e, "message"));
	ck_assert_msg(strncmp(tu_jstr(e, "message"), msg_prefix, strlen(msg_prefix)) == 0,
	              "message '%s' does not start with '%s'", tu_jstr(e, "message"), msg_prefix);
	if (code < 0)
		ck_assert(cJSON_IsNull(c));
	else
		ck_assert_int_eq(tu_jnum(e, "code"), code);
	cJSON_Delete(e);
}

static const char *state_of(const char *id, char *buf, size_t len)
{
	cJSON *t = tu_camunda7_task(C, id);

	ck_assert_ptr_nonnull(t);
	snprintf(buf, len, "%s", tu_jstr(t, "state"));
	cJSON_Delete(t);
	return buf;
}

static int count_of(const char *id, const char *counter)
{
	cJSON *t = tu_camunda7_task(C, id);
	int n;

	ck_assert_ptr_nonnull(t);
	n = (int)tu_jnum(cJSON_GetObjectItemCaseSensitive(t, "counts"), counter);
	cJSON_Delete(t);
	return n;
}

START_TEST(test_fetch_locks_up_to_max_tasks)
{
	_cleanup_free_ char *a = create("{\"topicName\":\"build\",\"variables\":{\"s\":{\"type\":"
	                                "\"String\",\"value\":\"x\"},\"n\":5,\"o\":{\"k\":[1]}},"
	                                "\"businessKey\":\"order-1\"}");
	_cleanup_free_ char *b = create("{\"topicName\":\"build\"}");
	_cleanup_free_ char *c = create("{\"topicName\":\"build\"}");
	_cleanup_free_ char *other = create("{\"topicName\":\"other\"}");
	struct tu_http_answer ans;
	const char *h[] = {"Content-Type: application/json", NULL};
	cJSON *arr, *t, *vars;
	char st[32];

	ck_assert_int_eq(tu_camunda7_http(C, "POST", ET "/fetchAndLock", h,
	                                  "{\"workerId\":\"w1\",\"maxTasks\":2,\"topics\":[{"
	                                  "\"topicName\":\"build\",\"lockDuration\":60000}]}",
	                                  &ans),
	                 0);
	ck_assert_int_eq(ans.status, 200);
	ck_assert_str_eq(ans.ctype, "application/json"); /* exactly: the JS client compares */
	arr = cJSON_ParseWithLength(ans.body, ans.len);
	tu_http_answer_done(&ans);
	ck_assert_int_eq(cJSON_GetArraySize(arr), 2);
	t = cJSON_GetArrayItem(arr, 0);
	ck_assert_str_eq(tu_jstr(t, "id"), a);
	ck_assert_str_eq(tu_jstr(t, "workerId"), "w1");
	ck_assert_str_eq(tu_jstr(t, "topicName"), "build");
	ck_assert_str_eq(tu_jstr(t, "businessKey"), "order-1");
	ck_assert_ptr_nonnull(tu_jstr(t, "processInstanceId"));
	ck_assert_ptr_nonnull(tu_jstr(t, "lockExpirationTime"));
	ck_assert_int_eq(strlen(tu_jstr(t, "lockExpirationTime")), 28); /* ...T..:..:...SSS+0000 */
	ck_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(t, "retries")));
	ck_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(t, "errorMessage")));
	vars = cJSON_GetObjectItemCaseSensitive(t, "variables");
	ck_assert_str_eq(tu_jstr(cJSON_GetObjectItemCaseSensitive(vars, "s"), "type"), "String");
	ck_assert_str_eq(tu_jstr(cJSON_GetObjectItemCaseSensitive(vars, "s"), "value"), "x");
	ck_assert(cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(
	    cJSON_GetObjectItemCaseSensitive(vars, "s"), "valueInfo")));
	ck_assert_str_eq(tu_jstr(cJSON_GetObjectItemCaseSensitive(vars, "n"), "type"), "Integer");
	ck_assert_int_eq(tu_jnum(cJSON_GetObjectItemCaseSensitive(vars, "n"), "value"), 5);
	ck_assert_str_eq(tu_jstr(cJSON_GetObjectItemCaseSensitive(vars, "o"), "type"), "Json");
	ck_assert_str_eq(tu_jstr(cJSON_GetObjectItemCaseSensitive(vars, "o"), "value"),
	                 "{\"k\":[1]}");
	ck_assert_str_eq(tu_jstr(cJSON_GetArrayItem(arr, 1), "id"), b);
	cJSON_Delete(arr);
	ck_assert_str_eq(state_of(a, st, sizeof(st)), "LOCKED");
	ck_assert_str_eq(state_of(c, st, sizeof(st)), "AVAILABLE");
	arr = fetch("w2", 5, "build", 60000); /* only c is left; the others are locked */
	ck_assert_int_eq(cJSON_GetArraySize(arr), 1);
	ck_assert_str_eq(tu_jstr(cJSON_GetArrayItem(arr, 0), "id"), c);
	cJSON_Delete(arr);
	arr = fetch("w2", 5, "build", 60000);
	ck_assert_int_eq(cJSON_GetArraySize(arr), 0);
	cJSON_Delete(arr);
	ck_assert_str_eq(state_of(other, st, sizeof(st)), "AVAILABLE");
	ck_assert_int_eq(count_of(a, "fetched"), 1);
}
END_TEST

START_TEST(test_priority_order)
{
	_cleanup_free_ char *p1 = create("{\"topicName\":\"t\",\"priority\":1}");
	_cleanup_free_ char *p5 = create("{\"topicName\":\"t\",\"priority\":5}");
	_cleanup_free_ char *p3 = create("{\"topicName\":\"t\",\"priority\":3}");
	long st;
	cJSON *a = tu_camunda7_json(C, "POST", ET "/fetchAndLock",
	                            "{\"workerId\":\"w\",\"maxTasks\":3,\"usePriority\":true,"
	                            "\"topics\":[{\"topicName\":\"t\",\"lockDuration\":1000}]}",
	                            &st);

	ck_assert_int_eq(st, 200);
	ck_assert_int_eq(cJSON_GetArraySize(a), 3);
	ck_assert_str_eq(tu_jstr(cJSON_GetArrayItem(a, 0), "id"), p5);
	ck_assert_int_eq(tu_jnum(cJSON_GetArrayItem(a, 0), "priority"), 5);
	ck_assert_str_eq(tu_jstr(cJSON_GetArrayItem(a, 1), "id"), p3);
	ck_assert_str_eq(tu_jstr(cJSON_GetArrayItem(a, 2), "id"), p1);
	cJSON_Delete(a);
}
END_TEST

START_TEST(test_topic_filters_variables_and_business_key)
{
	_cleanup_free_ char *a = create("{\"topicName\":\"t\",\"businessKey\":\"k1\",\"variables\":"
	                                "{\"x\":1,\"y\":2},\"localVariables\":{\"l\":true}}");
	_cleanup_free_ char *b = create("{\"topicName\":\"t\",\"businessKey\":\"k2\"}");
	long st;
	cJSON *arr, *vars;

	arr =
	    tu_camunda7_json(C, "POST", ET "/fetchAndLock",
	                     "{\"workerId\":\"w\",\"maxTasks\":5,\"topics\":[{\"topicName\":\"t\","
	                     "\"lockDuration\":1000,\"businessKey\":\"k1\",\"variables\":[\"y\","
	                     "\"nope\",\"l\"]}]}",
	                     &st);
	ck_assert_int_eq(st, 200);
	ck_assert_int_eq(cJSON_GetArraySize(arr), 1);
	ck_assert_str_eq(tu_jstr(cJSON_GetArrayItem(arr, 0), "id"), a);
	vars = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(arr, 0), "variables");
	ck_assert_int_eq(cJSON_GetArraySize(vars), 2); /* y and the local l; x not asked */
	ck_assert_ptr_nonnull(cJSON_GetObjectItemCaseSensitive(vars, "y"));
	ck_assert_str_eq(tu_jstr(cJSON_GetObjectItemCaseSensitive(vars, "l"), "type"), "Boolean");
	cJSON_Delete(arr);
	ck_assert_int_eq(op(a, "unlock", NULL, NULL), 204);
	arr = tu_camunda7_json(
	    C, "POST", ET "/fetchAndLock",
	    "{\"workerId\":\"w\",\"maxTasks\":5,\"topics\":[{\"topicName\":\"t\","
	    "\"lockDuration\":1000,\"businessKey\":\"k1\",\"localVariables\":true}]}",
	    &st);
	vars = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(arr, 0), "variables");
	ck_assert_int_eq(cJSON_GetArraySize(vars), 1); /* only the local one */
	ck_assert_ptr_nonnull(cJSON_GetObjectItemCaseSensitive(vars, "l"));
	cJSON_Delete(arr);
	(void)b;
}
END_TEST

START_TEST(test_long_poll_empty_answers_at_timeout)
{
	usec_t t0 = time_mono();
	long st;
	cJSON *a = fetch_st("w", 1, "t", 1000, 300, &st);

	ck_assert_int_eq(st, 200);
	ck_assert_int_eq(cJSON_GetArraySize(a), 0);
	ck_assert_uint_ge(time_mono() - t0, 250 * USEC_PER_MSEC); /* it was held */
	cJSON_Delete(a);
	/* FetchAndLockHandlerImpl.MAX_REQUEST_TIMEOUT */
	a = fetch_st("w", 1, "t", 1000, 1800001, &st);
	ck_assert_int_eq(st, 400);
	check_err(a, "InvalidRequestException",
	          "The asynchronous response timeout cannot be set to a value greater than "
	          "1800000 milliseconds",
	          -1);
}
END_TEST

struct poller {
	long st;
	cJSON *a;
};

static void *long_fetch(void *arg)
{
	struct poller *p = arg;

	p->a = fetch_st("w", 3, "t", 60000, 60000, &p->st);
	return NULL;
}

START_TEST(test_long_poll_wakes_on_new_task_and_unlock)
{
	struct poller p = {0};
	pthread_t th;
	char *id;

	ck_assert_int_eq(pthread_create(&th, NULL, long_fetch, &p), 0);
	{
		cJSON *w = tu_camunda7_json(C, "GET", "/emu/wait?stat=fetchAndLock&count=1", NULL,
		                            NULL); /* it is in */

		ck_assert_ptr_nonnull(w);
		cJSON_Delete(w);
	}
	id = create("{\"topicName\":\"t\"}");
	pthread_join(th, NULL);
	ck_assert_int_eq(p.st, 200);
	ck_assert_int_eq(cJSON_GetArraySize(p.a), 1); /* answered with what there was */
	ck_assert_str_eq(tu_jstr(cJSON_GetArrayItem(p.a, 0), "id"), id);
	cJSON_Delete(p.a);
	/* an unlock signals held fetches too */
	p = (struct poller){0};
	ck_assert_int_eq(pthread_create(&th, NULL, long_fetch, &p), 0);
	cJSON_Delete(tu_camunda7_json(C, "GET", "/emu/wait?stat=fetchAndLock&count=2", NULL, NULL));
	ck_assert_int_eq(op(id, "unlock", NULL, NULL), 204);
	pthread_join(th, NULL);
	ck_assert_int_eq(cJSON_GetArraySize(p.a), 1);
	cJSON_Delete(p.a);
	free(id);
}
END_TEST

START_TEST(test_lock_owned_by_worker_id)
{
	_cleanup_free_ char *id = create("{\"topicName\":\"t\"}");
	_cleanup_free_ char *got = fetch_one("w1", "t", 60000);
	_cleanup_free_ char *m = NULL;
	cJSON *e, *t;

	ck_assert_str_eq(got, id);
	ck_assert_int_eq(op(id, "complete", "{\"workerId\":\"w2\"}", &e), 400);
	m = tu_fmt(
	    "External Task %s cannot be completed by worker 'w2'. It is locked by worker 'w1'.",
	    id);
	check_err(e, "RestException", m, 0);
	ck_assert_int_eq(op(id, "failure", "{\"workerId\":\"w2\",\"retries\":1}", &e), 400);
	check_err(e, "RestException", "Failure of External Task", 0);
	ck_assert_int_eq(op(id, "bpmnError", "{\"workerId\":\"w2\",\"errorCode\":\"E\"}", &e), 400);
	check_err(e, "RestException", "Bpmn error of External Task", 0);
	ck_assert_int_eq(op(id, "extendLock", "{\"workerId\":\"w2\",\"newDuration\":1000}", &e),
	                 400);
	check_err(e, "RestException", "The lock of the External Task", 0);
	ck_assert_int_eq(count_of(id, "refused"), 4);
	ck_assert_int_eq(op(id, "extendLock", "{\"workerId\":\"w1\",\"newDuration\":120000}", NULL),
	                 204);
	t = tu_camunda7_task(C, id);
	ck_assert_double_gt(tu_jnum(t, "lockRemainingMs"), 60000); /* now + newDuration */
	ck_assert_int_eq(tu_jnum(t, "lastNewDuration"), 120000);
	cJSON_Delete(t);
	ck_assert_int_eq(
	    op(id, "complete",
	       "{\"workerId\":\"w1\",\"variables\":{\"r\":{\"type\":\"Long\",\"value\":"
	       "42}},\"localVariables\":{\"l\":{\"value\":\"s\"}}}",
	       NULL),
	    204);
	t = tu_camunda7_wait(C, id, "COMPLETED", 5 * SEC);
	ck_assert_ptr_nonnull(t);
	ck_assert_str_eq(tu_jstr(cJSON_GetObjectItemCaseSensitive(
	                             cJSON_GetObjectItemCaseSensitive(t, "completeVariables"), "r"),
	                         "type"),
	                 "Long");
	ck_assert_str_eq(
	    tu_jstr(cJSON_GetObjectItemCaseSensitive(
	                cJSON_GetObjectItemCaseSensitive(t, "completeLocalVariables"), "l"),
	            "type"),
	    "String");
	cJSON_Delete(t);
	/* completed: gone from the runtime */
	ck_assert_int_eq(op(id, "complete", "{\"workerId\":\"w1\"}", &e), 404);
	check_err(e, "RestException", "External task with id", 0);
	ck_assert_int_eq(op(id, "extendLock", "{\"workerId\":\"w1\",\"newDuration\":1000}", &e),
	                 404);
	check_err(e, "RestException", "External task with id", 0);
}
END_TEST

START_TEST(test_lock_expiry)
{
	_cleanup_free_ char *id = create("{\"topicName\":\"t\"}");
	_cleanup_free_ char *got = fetch_one("w1", "t", 60000);
	_cleanup_free_ char *again = NULL;
	cJSON *e;
	char st[32];

	ck_assert_int_eq(tu_camunda7_expire(C, id), 0);
	ck_assert_str_eq(state_of(id, st, sizeof(st)), "AVAILABLE");
	/* ExtendLockOnExternalTaskCmd: an expired lock cannot be extended */
	ck_assert_int_eq(op(id, "extendLock", "{\"workerId\":\"w1\",\"newDuration\":1000}", &e),
	                 400);
	check_err(e, "RestException", "Cannot extend a lock that expired", 0);
	/* but completing is only fenced by the workerId: nobody re-locked it */
	ck_assert_int_eq(op(id, "complete", "{\"workerId\":\"w1\"}", NULL), 204);
	free(id);
	id = create("{\"topicName\":\"t\"}");
	free(got);
	got = fetch_one("w1", "t", 60000);
	ck_assert_int_eq(tu_camunda7_expire(C, id), 0);
	again = fetch_one("w2", "t", 60000); /* an expired lock is taken by another worker */
	ck_assert_str_eq(again, id);
	ck_assert_int_eq(op(id, "complete", "{\"workerId\":\"w1\"}", &e), 400);
	check_err(e, "RestException", "External Task", 0);
	ck_assert_int_eq(op(id, "extendLock", "{\"workerId\":\"w1\",\"newDuration\":1000}", &e),
	                 400);
	check_err(e, "RestException", "The lock of the External Task", 0);
	ck_assert_int_eq(op(id, "complete", "{\"workerId\":\"w2\"}", NULL), 204);
	ck_assert_int_eq(tu_camunda7_expire(C, id), -EALREADY);
}
END_TEST

START_TEST(test_lock_runs_out_on_real_time)
{
	_cleanup_free_ char *id = create("{\"topicName\":\"t\"}");
	_cleanup_free_ char *got = fetch_one("w1", "t", 200);
	cJSON *t = tu_camunda7_wait(C, id, "AVAILABLE", 10 * SEC);

	ck_assert_ptr_nonnull(t);
	ck_assert_str_eq(tu_jstr(t, "workerId"), "w1"); /* kept until someone locks it */
	cJSON_Delete(t);
	free(got);
	got = fetch_one("w2", "t", 60000);
	ck_assert_str_eq(got, id);
}
END_TEST

START_TEST(test_cancelled_process_is_404)
{
	_cleanup_free_ char *id = create("{\"topicName\":\"t\"}");
	_cleanup_free_ char *got = fetch_one("w1", "t", 60000);
	_cleanup_free_ char *path = tu_fmt(ET "/%s", id);
	long st;
	cJSON *e;

	ck_assert_int_eq(tu_camunda7_cancel(C, id), 0);
	ck_assert_int_eq(tu_camunda7_cancel(C, id), -EALREADY);
	ck_assert_int_eq(op(id, "extendLock", "{\"workerId\":\"w1\",\"newDuration\":1000}", &e),
	                 404);
	check_err(e, "RestException", "External task with id", 0);
	ck_assert_int_eq(op(id, "complete", "{\"workerId\":\"w1\"}", &e), 404);
	check_err(e, "RestException", "External task with id", 0);
	ck_assert_int_eq(op(id, "failure", "{\"workerId\":\"w1\"}", &e), 404);
	check_err(e, "RestException", "External task with id", 0);
	ck_assert_int_eq(op(id, "unlock", NULL, &e), 404);
	check_err(e, "RestException", "External task with id", 0);
	e = tu_camunda7_json(C, "GET", path, NULL, &st);
	ck_assert_int_eq(st, 404);
	check_err(e, "RestException", "External task with id", -1);
	e = tu_camunda7_wait(C, id, "DELETED", 1 * SEC);
	ck_assert_ptr_nonnull(e);
	cJSON_Delete(e);
}
END_TEST

START_TEST(test_failure_retries_and_incident)
{
	_cleanup_free_ char *id = create("{\"topicName\":\"t\"}");
	_cleanup_free_ char *got = fetch_one("w1", "t", 60000);
	char big[2000], st[32];
	cJSON *t, *a, *e;

	memset(big, 'm', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	{
		_cleanup_free_ char *body = tu_fmt(
		    "{\"workerId\":\"w1\",\"errorMessage\":\"%s\",\"errorDetails\":\"tail of "
		    "output\",\"retries\":2,\"retryTimeout\":0}",
		    big);

		ck_assert_int_eq(op(id, "failure", body, NULL), 204);
	}
	t = tu_camunda7_task(C, id);
	ck_assert_str_eq(tu_jstr(t, "state"), "AVAILABLE");
	ck_assert_int_eq(tu_jnum(t, "retries"), 2);
	ck_assert_int_eq(strlen(tu_jstr(t, "errorMessage")),
	                 666); /* MAX_EXCEPTION_MESSAGE_LENGTH */
	ck_assert_str_eq(tu_jstr(t, "errorDetails"), "tail of output");
	cJSON_Delete(t);
	a = fetch("w1", 1, "t", 60000);
	ck_assert_int_eq(tu_jnum(cJSON_GetArrayItem(a, 0), "retries"), 2);
	ck_assert_int_eq(strlen(tu_jstr(cJSON_GetArrayItem(a, 0), "errorMessage")), 666);
	ck_assert_str_eq(tu_jstr(cJSON_GetArrayItem(a, 0), "errorDetails"), "tail of output");
	cJSON_Delete(a);
	/* retryTimeout: unavailable until it passes, still the worker's */
	ck_assert_int_eq(
	    op(id, "failure", "{\"workerId\":\"w1\",\"retries\":1,\"retryTimeout\":60000}", NULL),
	    204);
	ck_assert_str_eq(state_of(id, st, sizeof(st)), "FAILED");
	a = fetch("w2", 1, "t", 60000);
	ck_assert_int_eq(cJSON_GetArraySize(a), 0);
	cJSON_Delete(a);
	t = tu_camunda7_task(C, id);
	ck_assert_int_eq(tu_jnum(t, "retryTimeout"), 60000);
	ck_assert_str_eq(tu_jstr(t, "errorDetails"), "tail of output"); /* kept: none sent */
	cJSON_Delete(t);
	/* retries 0: an incident; never fetched again */
	ck_assert_int_eq(op(id, "failure",
	                    "{\"workerId\":\"w1\",\"errorMessage\":\"boom\","
	                    "\"retries\":0,\"retryTimeout\":0}",
	                    NULL),
	                 204);
	t = tu_camunda7_wait(C, id, "INCIDENT", 1 * SEC);
	ck_assert_ptr_nonnull(t);
	ck_assert_int_eq(tu_jnum(t, "retries"), 0);
	ck_assert_int_eq(tu_jnum(cJSON_GetObjectItemCaseSensitive(t, "counts"), "failure"), 3);
	cJSON_Delete(t);
	a = fetch("w2", 1, "t", 60000);
	ck_assert_int_eq(cJSON_GetArraySize(a), 0);
	cJSON_Delete(a);
	/* HandleExternalTaskFailureCmd.validateInput: not a BadUserRequestException */
	ck_assert_int_eq(op(id, "failure", "{\"workerId\":\"w1\",\"retries\":-1}", &e), 500);
	check_err(e, "ProcessEngineException", "retries is not greater than or equal to 0", 0);
	ck_assert_int_eq(
	    op(id, "failure", "{\"workerId\":\"w1\",\"retries\":1,\"retryTimeout\":-5}", &e), 500);
	check_err(e, "ProcessEngineException", "retryDuration is not greater than or equal to 0",
	          0);
}
END_TEST

START_TEST(test_bpmn_error)
{
	_cleanup_free_ char *id = create("{\"topicName\":\"t\"}");
	_cleanup_free_ char *got = fetch_one("w1", "t", 60000);
	cJSON *e, *t, *b;

	ck_assert_int_eq(op(id, "bpmnError", "{\"workerId\":\"w1\"}", &e), 500);
	check_err(e, "NullValueException", "errorCode is null", 0);
	ck_assert_int_eq(op(id, "bpmnError",
	                    "{\"workerId\":\"w1\",\"errorCode\":\"NO_STOCK\",\"errorMessage\":"
	                    "\"none left\",\"variables\":{\"left\":{\"type\":\"Integer\",\"value\":"
	                    "0}}}",
	                    NULL),
	                 204);
	t = tu_camunda7_wait(C, id, "BPMN_ERROR", 1 * SEC);
	ck_assert_ptr_nonnull(t);
	b = cJSON_GetObjectItemCaseSensitive(t, "bpmnError");
	ck_assert_str_eq(tu_jstr(b, "code"), "NO_STOCK");
	ck_assert_str_eq(tu_jstr(b, "message"), "none left");
	ck_assert_str_eq(tu_jstr(cJSON_GetObjectItemCaseSensitive(
	                             cJSON_GetObjectItemCaseSensitive(b, "variables"), "left"),
	                         "type"),
	                 "Integer");
	cJSON_Delete(t);
	ck_assert_int_eq(op(id, "complete", "{\"workerId\":\"w1\"}", &e), 404);
	check_err(e, "RestException", "External task with id", 0);
}
END_TEST

START_TEST(test_unlock)
{
	_cleanup_free_ char *id = create("{\"topicName\":\"t\"}");
	_cleanup_free_ char *got = fetch_one("w1", "t", 60000);
	_cleanup_free_ char *m = NULL;
	cJSON *t, *e;

	ck_assert_int_eq(op(id, "unlock", NULL, NULL), 204); /* anyone may: no workerId */
	t = tu_camunda7_task(C, id);
	ck_assert_str_eq(tu_jstr(t, "state"), "AVAILABLE");
	ck_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(t, "workerId")));
	ck_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(t, "lockExpirationTime")));
	cJSON_Delete(t);
	ck_assert_int_eq(op(id, "complete", "{\"workerId\":\"w1\"}", &e), 400);
	m = tu_fmt(
	    "External Task %s cannot be completed by worker 'w1'. It is locked by worker 'null'.",
	    id);
	check_err(e, "RestException", m, 0);
	ck_assert_int_eq(count_of(id, "unlock"), 1);
	/* POST /lock (LockExternalTaskCmd): refused only by another worker's live lock */
	ck_assert_int_eq(op(id, "lock", "{\"workerId\":\"w2\",\"lockDuration\":0}", &e), 400);
	check_err(e, "RestException", "lockDuration is not greater than 0", 0);
	ck_assert_int_eq(op(id, "lock", "{\"workerId\":\"w2\",\"lockDuration\":60000}", NULL), 204);
	ck_assert_int_eq(op(id, "lock", "{\"workerId\":\"w1\",\"lockDuration\":60000}", &e), 400);
	free(m);
	m = tu_fmt("External Task %s cannot be locked by worker 'w1'. It is locked by worker 'w2'.",
	           id);
	check_err(e, "RestException", m, 0);
	ck_assert_int_eq(tu_camunda7_expire(C, id), 0);
	ck_assert_int_eq(op(id, "lock", "{\"workerId\":\"w1\",\"lockDuration\":60000}", NULL), 204);
	t = tu_camunda7_task(C, id);
	ck_assert_str_eq(tu_jstr(t, "workerId"), "w1");
	ck_assert_str_eq(tu_jstr(t, "state"), "LOCKED");
	ck_assert_int_eq(tu_jnum(cJSON_GetObjectItemCaseSensitive(t, "counts"), "lock"), 2);
	cJSON_Delete(t);
}
END_TEST

START_TEST(test_request_validation)
{
	_cleanup_free_ char *id = create("{\"topicName\":\"t\"}");
	_cleanup_free_ char *got = fetch_one("w1", "t", 60000);
	const char *text[] = {"Content-Type: text/plain", NULL};
	struct tu_http_answer a;
	long st;
	cJSON *e;

	/* FetchExternalTasksCmd.validateInput: 500s, not 400s */
	e = tu_camunda7_json(
	    C, "POST", ET "/fetchAndLock",
	    "{\"maxTasks\":1,\"topics\":[{\"topicName\":\"t\",\"lockDuration\":1}]}", &st);
	ck_assert_int_eq(st, 500);
	check_err(e, "NullValueException", "workerId is null", 0);
	e = fetch_st("w", 1, "t", 0, -1, &st);
	ck_assert_int_eq(st, 500);
	check_err(e, "ProcessEngineException", "lockTime is not greater than 0", 0);
	e = fetch_st("w", -1, "t", 10, -1, &st);
	ck_assert_int_eq(st, 500);
	check_err(e, "ProcessEngineException", "maxResults is not greater than or equal to 0", 0);
	/* Jackson: malformed or mistyped → 400 */
	e = tu_camunda7_json(C, "POST", ET "/fetchAndLock", "{\"workerId\":", &st);
	ck_assert_int_eq(st, 400);
	check_err(e, "InvalidRequestException", "", -1);
	e = tu_camunda7_json(C, "POST", ET "/fetchAndLock",
	                     "{\"workerId\":\"w\",\"maxTasks\":\"x\"}", &st);
	ck_assert_int_eq(st, 400);
	check_err(e, "InvalidRequestException", "", -1);
	/* @Consumes(application/json) */
	ck_assert_int_eq(tu_camunda7_http(C, "POST", ET "/fetchAndLock", text, "{}", &a), 0);
	ck_assert_int_eq(a.status, 415);
	tu_http_answer_done(&a);
	/* HandleExternalTaskCmd.validateInput before the task is looked up */
	ck_assert_int_eq(op(id, "complete", "{}", &e), 500);
	check_err(e, "NullValueException", "workerId is null", 0);
	/* the extendLock constructor checks newDuration first: 400 for any id */
	ck_assert_int_eq(
	    op("no-such-task", "extendLock", "{\"workerId\":\"w1\",\"newDuration\":0}", &e), 400);
	check_err(e, "RestException", "lockTime is not greater than 0", 0);
	/* VariableValueDto */
	ck_assert_int_eq(op(id, "complete",
	                    "{\"workerId\":\"w1\",\"variables\":{\"v\":{\"type\":\"Bogus\","
	                    "\"value\":1}}}",
	                    &e),
	                 400);
	check_err(e, "RestException", "Unsupported value type 'Bogus'", -1);
	ck_assert_int_eq(op(id, "complete",
	                    "{\"workerId\":\"w1\",\"variables\":{\"v\":{\"type\":\"Integer\","
	                    "\"value\":\"abc\"}}}",
	                    &e),
	                 400);
	check_err(e, "InvalidRequestException",
	          "Cannot convert value 'abc' of type 'Integer' to java type java.lang.Integer",
	          -1);
	ck_assert_int_eq(op(id, "complete",
	                    "{\"workerId\":\"w1\",\"variables\":{\"v\":{\"type\":\"Json\","
	                    "\"value\":{\"a\":1}}}}",
	                    &e),
	                 400);
	check_err(e, "InvalidRequestException", "Must provide 'null' or String value", -1);
	/* the database: ACT_RU_VARIABLE.TEXT_ varchar(4000) fails the flush */
	{
		char big[4002];
		_cleanup_free_ char *body = NULL;

		memset(big, 'x', 4001);
		big[4001] = '\0';
		body = tu_fmt("{\"workerId\":\"w1\",\"variables\":{\"v\":{\"type\":\"String\","
		              "\"value\":\"%s\"}}}",
		              big);
		ck_assert_int_eq(op(id, "complete", body, &e), 500);
		check_err(e, "ProcessEngineException",
		          "ENGINE-03083 Exception while executing Batch", 0);
	}
	ck_assert_int_eq(count_of(id, "complete"), 0);
	/* GET /external-task/{id} */
	{
		_cleanup_free_ char *path = tu_fmt(ET "/%s", id);

		e = tu_camunda7_json(C, "GET", path, NULL, &st);
		ck_assert_int_eq(st, 200);
		ck_assert_str_eq(tu_jstr(e, "id"), id);
		ck_assert_str_eq(tu_jstr(e, "workerId"), "w1");
		ck_assert_str_eq(tu_jstr(e, "topicName"), "t");
		cJSON_Delete(e);
	}
	e = tu_camunda7_json(C, "GET", ET "/nope", NULL, &st);
	ck_assert_int_eq(st, 404);
	check_err(e, "RestException", "External task with id nope does not exist", -1);
}
END_TEST

START_TEST(test_auth_basic)
{
	struct tu_http_answer a;
	const char *good[] = {"Authorization: Basic ZGVtbzpzM2NyM3Q=", NULL}; /* demo:s3cr3t */
	const char *bad[] = {"Authorization: Basic ZGVtbzpub3Bl", NULL};      /* demo:nope */
	long st;

	start_with(&(struct tu_camunda7_opts){.user = "demo", .password = "s3cr3t"});
	ck_assert_int_eq(tu_camunda7_http(C, "GET", ET "/x", NULL, NULL, &a), 0);
	ck_assert_int_eq(a.status, 401);
	ck_assert_str_eq(a.www_authenticate, "Basic realm=\"default\"");
	ck_assert_uint_eq(a.len, 0);
	tu_http_answer_done(&a);
	ck_assert_int_eq(tu_camunda7_http(C, "GET", ET "/x", bad, NULL, &a), 0);
	ck_assert_int_eq(a.status, 401);
	tu_http_answer_done(&a);
	ck_assert_int_eq(tu_camunda7_http(C, "GET", ET "/x", good, NULL, &a), 0);
	ck_assert_int_eq(a.status, 404); /* through to the resource */
	tu_http_answer_done(&a);
	cJSON_Delete(fetch_st("w", 1, "t", 10, -1, &st)); /* tu_camunda7_json sends it */
	ck_assert_int_eq(st, 200);
	ck_assert_int_eq(tu_camunda7_stat(C, "auth_refused"), 2); /* /emu/ is not behind it */
}
END_TEST

START_TEST(test_auth_bearer)
{
	struct tu_http_answer a;
	const char *good[] = {"Authorization: Bearer tok-1", NULL};
	const char *bad[] = {"Authorization: Bearer tok-2", NULL};

	start_with(&(struct tu_camunda7_opts){.bearer = "tok-1"});
	ck_assert_int_eq(tu_camunda7_http(C, "GET", ET "/x", bad, NULL, &a), 0);
	ck_assert_int_eq(a.status, 401);
	ck_assert_str_eq(a.www_authenticate, "Bearer");
	tu_http_answer_done(&a);
	ck_assert_int_eq(tu_camunda7_http(C, "GET", ET "/x", good, NULL, &a), 0);
	ck_assert_int_eq(a.status, 404);
	tu_http_answer_done(&a);
}
END_TEST

START_TEST(test_faults)
{
	_cleanup_free_ char *id = create("{\"topicName\":\"t\"}");
	struct tu_http_answer a;
	const char *h[] = {"Content-Type: application/json", NULL};
	const char *body = "{\"workerId\":\"w\",\"maxTasks\":1,\"topics\":[{\"topicName\":\"t\","
	                   "\"lockDuration\":1000}]}";
	long st;
	cJSON *e;

	ck_assert_int_eq(tu_camunda7_fault(C,
	                                   "{\"path\":\"/engine-rest/external-task/fetchAndLock\","
	                                   "\"count\":1,\"status\":503}"),
	                 0);
	e = tu_camunda7_json(C, "POST", ET "/fetchAndLock", body, &st);
	ck_assert_int_eq(st, 503);
	check_err(e, "ProcessEngineException", "injected fault", 0);
	ck_assert_int_eq(tu_camunda7_fault(C, "{\"count\":1,\"reset\":true}"), 0);
	ck_assert_int_lt(tu_camunda7_http(C, "POST", ET "/fetchAndLock", h, body, &a), 0);
	ck_assert_int_eq(tu_camunda7_stat(C, "faults"), 2);
	e = tu_camunda7_json(C, "POST", ET "/fetchAndLock", body, &st); /* spent: normal again */
	ck_assert_int_eq(st, 200);
	ck_assert_int_eq(cJSON_GetArraySize(e), 1);
	cJSON_Delete(e);
}
END_TEST

struct grab {
	char worker[8];
	cJSON *got;
};

static void *grab_all(void *arg)
{
	struct grab *g = arg;
	long st;

	g->got = cJSON_CreateArray();
	for (;;) {
		cJSON *a = fetch_st(g->worker, 7, "t", 60000, -1, &st), *t;

		if (st != 200 || cJSON_GetArraySize(a) == 0) {
			cJSON_Delete(a);
			return NULL;
		}
		cJSON_ArrayForEach(t, a)
		    cJSON_AddItemToArray(g->got, cJSON_CreateString(tu_jstr(t, "id")));
		cJSON_Delete(a);
	}
}

START_TEST(test_concurrent_fetches_lock_once)
{
	struct grab g[3] = {{"a", NULL}, {"b", NULL}, {"c", NULL}};
	pthread_t th[3];
	cJSON *seen = cJSON_CreateObject(), *x;
	int total = 0;

	cJSON_Delete(
	    tu_camunda7_json(C, "POST", "/emu/tasks", "{\"topicName\":\"t\",\"count\":60}", NULL));
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(pthread_create(&th[i], NULL, grab_all, &g[i]), 0);
	for (int i = 0; i < 3; i++) {
		pthread_join(th[i], NULL);
		cJSON_ArrayForEach(x, g[i].got)
		{
			ck_assert_ptr_null(cJSON_GetObjectItemCaseSensitive(seen, x->valuestring));
			cJSON_AddTrueToObject(seen, x->valuestring);
			total++;
		}
		cJSON_Delete(g[i].got);
	}
	ck_assert_int_eq(total, 60);
	cJSON_Delete(seen);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("camunda7_emu");
	TCase *t = tcase_create("api");
	TCase *auth = tcase_create("auth");

	tcase_add_checked_fixture(t, start, teardown);
	tcase_set_timeout(t, 60);
	tcase_add_test(t, test_fetch_locks_up_to_max_tasks);
	tcase_add_test(t, test_priority_order);
	tcase_add_test(t, test_topic_filters_variables_and_business_key);
	tcase_add_test(t, test_long_poll_empty_answers_at_timeout);
	tcase_add_test(t, test_long_poll_wakes_on_new_task_and_unlock);
	tcase_add_test(t, test_lock_owned_by_worker_id);
	tcase_add_test(t, test_lock_expiry);
	tcase_add_test(t, test_lock_runs_out_on_real_time);
	tcase_add_test(t, test_cancelled_process_is_404);
	tcase_add_test(t, test_failure_retries_and_incident);
	tcase_add_test(t, test_bpmn_error);
	tcase_add_test(t, test_unlock);
	tcase_add_test(t, test_request_validation);
	tcase_add_test(t, test_faults);
	tcase_add_test(t, test_concurrent_fetches_lock_once);
	suite_add_tcase(s, t);
	tcase_add_checked_fixture(auth, NULL, teardown);
	tcase_set_timeout(auth, 60);
	tcase_add_test(auth, test_auth_basic);
	tcase_add_test(auth, test_auth_bearer);
	suite_add_tcase(s, auth);
	return tu_run(s);
}
