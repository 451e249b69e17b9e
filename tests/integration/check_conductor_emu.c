/* The Conductor emulator's own contract (tests/conductor/conductor_emu.c,
 * docs/conductor.md "What the server does"), over real HTTP: a fresh emulator
 * for every test.  What a worker sees of polls, updates, lease extensions,
 * timeouts and retries, cancellation, logs, errors and auth, each as the
 * Conductor server source has it. */
#include <check.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conductor_proc.h"
#include "lessor_proc.h" /* tu_timeout */
#include "jsonutil.h"
#include "testutil.h"
#include "util/macro.h"

#define SEC USEC_PER_SEC
#define JSON_CT "Content-Type: application/json"

static struct tu_conductor *C;

static void start_with(const struct tu_conductor_opts *o)
{
	ck_assert_int_eq(tu_conductor_start(o, &C), 0);
}

static void start(void)
{
	start_with(&(struct tu_conductor_opts){.sweep_ms = 20});
}

static void teardown(void)
{
	if (C && tu_conductor_pid(C) > 0)
		ck_assert_int_eq(tu_conductor_stop(C), 0); /* clean exit: no leak, no crash */
	C = tu_conductor_free(C);
}

/* GET /api/tasks/poll/batch/T?workerid=W&count=N&timeout=MS: the array. */
static cJSON *poll_batch(const char *type, const char *worker, int count, int timeout_ms,
                         long *ret_status)
{
	_cleanup_free_ char *path = tu_fmt("/api/tasks/poll/batch/%s?workerid=%s&count=%d&timeout=%d",
	                                type, worker, count, timeout_ms);

	return tu_conductor_json(C, "GET", path, NULL, ret_status);
}

static cJSON *poll_ok(const char *type, const char *worker, int count, int timeout_ms)
{
	long st;
	cJSON *a = poll_batch(type, worker, count, timeout_ms, &st);

	ck_assert_int_eq(st, 200);
	ck_assert(cJSON_IsArray(a));
	return a;
}

/* Poll exactly one task of type and return its id (free it). */
static char *poll_one(const char *type, const char *worker)
{
	cJSON *a = poll_ok(type, worker, 1, 1000);
	char *id;

	ck_assert_int_eq(cJSON_GetArraySize(a), 1);
	id = strdup(tu_jstr(cJSON_GetArrayItem(a, 0), "taskId"));
	cJSON_Delete(a);
	return id;
}

/* The workflow id of a task, from the emulator (free it). */
static char *wf_of(const char *id)
{
	cJSON *t = tu_conductor_task(C, id);
	char *w;

	ck_assert_ptr_nonnull(t);
	w = strdup(tu_jstr(t, "workflowInstanceId"));
	cJSON_Delete(t);
	return w;
}

/* POST path with a JSON body: the whole answer (status, body, type). */
static struct tu_http_answer post(const char *path, const char *body, bool chunked)
{
	static const char *const h[] = {JSON_CT, NULL};
	struct tu_http_answer a;

	ck_assert_int_eq(tu_conductor_http(C, "POST", path, h, body, chunked, &a), 0);
	return a;
}

/* A TaskResult for task id with the given extra members. */
static struct tu_http_answer update(const char *id, const char *members)
{
	_cleanup_free_ char *wf = wf_of(id);
	_cleanup_free_ char *body =
	    tu_fmt("{\"taskId\":\"%s\",\"workflowInstanceId\":\"%s\",%s}", id, wf, members);

	return post("/api/tasks", body, false);
}

static void update_ok(const char *id, const char *members)
{
	struct tu_http_answer a = update(id, members);

	ck_assert_int_eq(a.status, 200);
	ck_assert_str_eq(a.body, id); /* TaskResource.updateTask: the id as text */
	ck_assert_ptr_nonnull(a.ctype);
	ck_assert_msg(strncmp(a.ctype, "text/plain", 10) == 0, "type %s", a.ctype);
	tu_http_answer_done(&a);
}

static cJSON *get_task(const char *id, long *ret_status)
{
	_cleanup_free_ char *path = tu_fmt("/api/tasks/%s", id);

	return tu_conductor_json(C, "GET", path, NULL, ret_status);
}

static void assert_api_status(const char *id, const char *status)
{
	long st;
	cJSON *t = get_task(id, &st);

	ck_assert_int_eq(st, 200);
	ck_assert_str_eq(tu_jstr(t, "status"), status);
	cJSON_Delete(t);
}

static void wait_task(const char *id, const char *status)
{
	cJSON *t = tu_conductor_wait(C, id, status, 5 * SEC);

	ck_assert_msg(t, "task %s never became %s", id, status);
	cJSON_Delete(t);
}

static void wait_wf(const char *id, const char *status)
{
	cJSON *t = tu_conductor_wait_workflow(C, id, status, 5 * SEC);

	ck_assert_msg(t, "workflow %s never became %s", id, status);
	cJSON_Delete(t);
}

/* ------------------------------------------------------------------ poll */

START_TEST(test_poll_returns_tasks_up_to_count)
{
	char *a_id = tu_conductor_create(
	    C, "{\"taskType\":\"build\",\"inputData\":{\"commit\":\"abc\"},\"count\":3}");
	char *b_id = tu_conductor_create(C, "{\"taskType\":\"other\"}");
	cJSON *a, *t;

	ck_assert_ptr_nonnull(a_id);
	ck_assert_ptr_nonnull(b_id);
	a = poll_ok("build", "w1", 2, 0);
	ck_assert_int_eq(cJSON_GetArraySize(a), 2);
	t = cJSON_GetArrayItem(a, 0);
	ck_assert_str_eq(tu_jstr(t, "taskId"), a_id); /* oldest first */
	ck_assert_str_eq(tu_jstr(t, "status"), "IN_PROGRESS");
	ck_assert_str_eq(tu_jstr(t, "workerId"), "w1");
	ck_assert_str_eq(tu_jstr(t, "taskType"), "build");
	ck_assert_str_eq(tu_jstr(cJSON_GetObjectItem(t, "inputData"), "commit"), "abc");
	ck_assert_int_eq(tu_jnum(t, "pollCount"), 1);
	ck_assert_int_eq(tu_jnum(t, "retryCount"), 0);
	ck_assert_int_eq(tu_jnum(t, "responseTimeoutSeconds"), 3600); /* TaskDef default */
	ck_assert_ptr_nonnull(tu_jstr(t, "workflowInstanceId"));
	cJSON_Delete(a);
	/* the third, and only it: the other type is another queue */
	a = poll_ok("build", "w1", 5, 0);
	ck_assert_int_eq(cJSON_GetArraySize(a), 1);
	ck_assert_str_ne(tu_jstr(cJSON_GetArrayItem(a, 0), "taskId"), b_id);
	cJSON_Delete(a);
	assert_api_status(a_id, "IN_PROGRESS");
	assert_api_status(b_id, "SCHEDULED");
	free(a_id);
	free(b_id);
}
END_TEST

/* A task in a domain is in the queue "domain:type" (QueueUtils). */
START_TEST(test_domains)
{
	char *plain = tu_conductor_create(C, "{\"taskType\":\"build\"}");
	char *in_d1 = tu_conductor_create(C, "{\"taskType\":\"build\",\"domain\":\"d1\"}");
	long st;
	cJSON *a;

	a = tu_conductor_json(C, "GET",
	                      "/api/tasks/poll/batch/build?count=5&timeout=0&domain=", NULL, &st);
	ck_assert_int_eq(st, 200);
	ck_assert_int_eq(cJSON_GetArraySize(a), 0); /* "" is not "no domain" */
	cJSON_Delete(a);
	a = tu_conductor_json(C, "GET", "/api/tasks/poll/batch/build?count=5&timeout=0&domain=d1",
	                      NULL, &st);
	ck_assert_int_eq(cJSON_GetArraySize(a), 1);
	ck_assert_str_eq(tu_jstr(cJSON_GetArrayItem(a, 0), "taskId"), in_d1);
	ck_assert_str_eq(tu_jstr(cJSON_GetArrayItem(a, 0), "domain"), "d1");
	cJSON_Delete(a);
	a = poll_ok("build", "w1", 5, 0);
	ck_assert_int_eq(cJSON_GetArraySize(a), 1);
	ck_assert_str_eq(tu_jstr(cJSON_GetArrayItem(a, 0), "taskId"), plain);
	cJSON_Delete(a);
	free(plain);
	free(in_d1);
}
END_TEST

/* Empty: 200 [] (not 204) after the long poll's timeout (TaskResource,
 * SqliteQueueDAO.pollMessages); above 5000 ms: 400. */
START_TEST(test_long_poll_empty)
{
	usec_t t0 = time_mono();
	long st;
	cJSON *a = poll_ok("build", "w1", 1, 300), *e;

	ck_assert_int_eq(cJSON_GetArraySize(a), 0);
	ck_assert_uint_ge(time_mono() - t0, 300 * USEC_PER_MSEC);
	cJSON_Delete(a);
	e = poll_batch("build", "w1", 1, 5001, &st);
	ck_assert_int_eq(st, 400);
	ck_assert_str_eq(tu_jstr(e, "message"),
	                 "Long Poll Timeout value cannot be more than 5 seconds");
	ck_assert_int_eq(tu_jnum(e, "status"), 400);
	cJSON_Delete(e);
}
END_TEST

/* Fewer tasks than count: the server keeps popping until the timeout, then
 * answers with what it has. */
START_TEST(test_long_poll_waits_for_count)
{
	usec_t t0;
	cJSON *a;

	free(tu_conductor_create(C, "{\"taskType\":\"build\"}"));
	t0 = time_mono();
	a = poll_ok("build", "w1", 3, 400);
	ck_assert_int_eq(cJSON_GetArraySize(a), 1);
	ck_assert_uint_ge(time_mono() - t0, 400 * USEC_PER_MSEC);
	cJSON_Delete(a);
}
END_TEST

static void *create_later(void *arg)
{
	tu_sleep(200 * USEC_PER_MSEC); /* the poll below is waiting by then */
	free(tu_conductor_create(C, "{\"taskType\":\"build\"}"));
	return NULL;
}

/* A task queued during the long poll is answered at once. */
START_TEST(test_long_poll_wakes_on_new_task)
{
	pthread_t th;
	usec_t t0 = time_mono();
	cJSON *a;

	ck_assert_int_eq(pthread_create(&th, NULL, create_later, NULL), 0);
	a = poll_ok("build", "w1", 1, 5000);
	pthread_join(th, NULL);
	ck_assert_int_eq(cJSON_GetArraySize(a), 1);
	ck_assert_uint_lt(time_mono() - t0, 4 * SEC);
	cJSON_Delete(a);
}
END_TEST

/* ---------------------------------------------------------------- update */

START_TEST(test_complete_with_output_and_logs)
{
	char *id = tu_conductor_create(C, "{\"taskType\":\"build\"}");
	char *p = poll_one("build", "w1");
	cJSON *t, *logs;
	_cleanup_free_ char *many = NULL;

	ck_assert_str_eq(p, id);
	/* 11 log entries: 10 are kept (taskExecLogSizeLimit) */
	many = strdup("");
	for (int i = 0; i < 11; i++) {
		char *n = tu_fmt("%s%s{\"log\":\"line %d\",\"createdTime\":%d}", many, i ? "," : "", i,
		              1000 + i);

		free(many);
		many = n;
	}
	{
		_cleanup_free_ char *m = tu_fmt("\"status\":\"COMPLETED\",\"workerId\":\"w1\","
		                             "\"outputData\":{\"answer\":42},\"logs\":[%s]",
		                             many);

		update_ok(id, m);
	}
	t = tu_conductor_task(C, id);
	ck_assert_str_eq(tu_jstr(t, "status"), "COMPLETED");
	ck_assert_str_eq(tu_jstr(t, "workflowStatus"), "COMPLETED");
	ck_assert_int_eq(tu_jnum(cJSON_GetObjectItem(t, "outputData"), "answer"), 42);
	logs = cJSON_GetObjectItem(t, "logs");
	ck_assert_int_eq(cJSON_GetArraySize(logs), 10);
	ck_assert_str_eq(tu_jstr(cJSON_GetArrayItem(logs, 9), "log"), "line 9");
	ck_assert_str_eq(tu_jstr(cJSON_GetArrayItem(logs, 0), "taskId"), id);
	ck_assert_int_eq(tu_jnum(cJSON_GetArrayItem(logs, 0), "createdTime"), 1000);
	ck_assert_int_gt(tu_jnum(t, "endTime"), 0);
	cJSON_Delete(t);
	free(id);
	free(p);
}
END_TEST

/* The JS SDK sends its bodies chunked. */
START_TEST(test_update_chunked_body)
{
	char *id = tu_conductor_create(C, "{\"taskType\":\"build\"}");
	_cleanup_free_ char *wf = wf_of(id);
	_cleanup_free_ char *body = NULL;
	struct tu_http_answer a;

	free(poll_one("build", "w1"));
	body = tu_fmt("{\"taskId\":\"%s\",\"workflowInstanceId\":\"%s\",\"status\":\"COMPLETED\"}", id,
	           wf);
	a = post("/api/tasks", body, true);
	ck_assert(a.chunked_sent);
	ck_assert_int_eq(a.status, 200);
	ck_assert_str_eq(a.body, id);
	tu_http_answer_done(&a);
	assert_api_status(id, "COMPLETED");
	free(id);
}
END_TEST

START_TEST(test_update_refusals)
{
	char *id = tu_conductor_create(C, "{\"taskType\":\"build\"}");
	_cleanup_free_ char *wf = wf_of(id);
	_cleanup_free_ char *bad = NULL;
	struct tu_http_answer a;
	cJSON *e;

	/* @NotEmpty workflowInstanceId, taskId: 400 with validationErrors */
	a = post("/api/tasks", "{\"status\":\"COMPLETED\"}", false);
	ck_assert_int_eq(a.status, 400);
	e = cJSON_Parse(a.body);
	ck_assert_str_eq(tu_jstr(e, "message"), "Validation failed, check below errors for detail.");
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(e, "validationErrors")), 2);
	cJSON_Delete(e);
	tu_http_answer_done(&a);
	/* a status that is not a TaskResult.Status: not deserializable, 500 */
	a = update(id, "\"status\":\"SCHEDULED\"");
	ck_assert_int_eq(a.status, 500);
	tu_http_answer_done(&a);
	a = post("/api/tasks", "{not json", false);
	ck_assert_int_eq(a.status, 500);
	tu_http_answer_done(&a);
	/* the body must be declared JSON (Spring: 415, mapped to 500) */
	bad = tu_fmt("{\"taskId\":\"%s\",\"workflowInstanceId\":\"%s\",\"status\":\"COMPLETED\"}", id,
	          wf);
	{
		static const char *const text[] = {"Content-Type: text/plain", NULL};

		ck_assert_int_eq(tu_conductor_http(C, "POST", "/api/tasks", text, bad, false, &a),
		                 0);
		ck_assert_int_eq(a.status, 500);
		tu_http_answer_done(&a);
		ck_assert_int_eq(
		    tu_conductor_http(C, "POST", "/api/tasks/update-v2", text, bad, false, &a), 0);
		ck_assert_int_eq(a.status, 500);
		tu_http_answer_done(&a);
	}
	free(bad);
	/* unknown task: 404 NotFoundException */
	bad =
	    tu_fmt("{\"taskId\":\"nope\",\"workflowInstanceId\":\"%s\",\"status\":\"COMPLETED\"}", wf);
	a = post("/api/tasks", bad, false);
	ck_assert_int_eq(a.status, 404);
	e = cJSON_Parse(a.body);
	ck_assert_str_eq(tu_jstr(e, "message"), "No such task found by id: nope");
	ck_assert_int_eq(tu_jnum(e, "status"), 404);
	ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(e, "retryable")));
	cJSON_Delete(e);
	tu_http_answer_done(&a);
	/* none of that touched the task */
	assert_api_status(id, "SCHEDULED");
	free(id);
}
END_TEST

/* reasonForIncompletion: the first 500 characters; FAILED_WITH_TERMINAL_ERROR
 * is not retried. */
START_TEST(test_terminal_error_not_retried_reason_capped)
{
	char *id = tu_conductor_create(C, "{\"taskType\":\"build\",\"retryDelaySeconds\":0}");
	char reason[601];
	_cleanup_free_ char *m = NULL;
	cJSON *t, *a;

	free(poll_one("build", "w1"));
	memset(reason, 'x', 600);
	reason[600] = '\0';
	m = tu_fmt("\"status\":\"FAILED_WITH_TERMINAL_ERROR\",\"reasonForIncompletion\":\"%s\"",
	        reason);
	update_ok(id, m);
	t = tu_conductor_task(C, id);
	ck_assert_str_eq(tu_jstr(t, "status"), "FAILED_WITH_TERMINAL_ERROR");
	ck_assert_uint_eq(strlen(tu_jstr(t, "reasonForIncompletion")), 500);
	ck_assert_str_eq(tu_jstr(t, "workflowStatus"), "FAILED");
	cJSON_Delete(t);
	a = poll_ok("build", "w1", 1, 0);
	ck_assert_int_eq(cJSON_GetArraySize(a), 0); /* no retry */
	cJSON_Delete(a);
	free(id);
}
END_TEST

/* FAILED: retried as a NEW task (new id, retryCount + 1) until retryCount. */
START_TEST(test_failed_retried_as_new_task)
{
	char *id = tu_conductor_create(
	    C, "{\"taskType\":\"build\",\"retryCount\":1,\"retryDelaySeconds\":0,"
	       "\"inputData\":{\"n\":7}}");
	_cleanup_free_ char *wf = wf_of(id);
	cJSON *a, *t;
	char *retry;

	free(poll_one("build", "w1"));
	update_ok(id, "\"status\":\"FAILED\",\"reasonForIncompletion\":\"exit 1\"");
	a = poll_ok("build", "w2", 1, 1000);
	ck_assert_int_eq(cJSON_GetArraySize(a), 1);
	t = cJSON_GetArrayItem(a, 0);
	retry = strdup(tu_jstr(t, "taskId"));
	ck_assert_str_ne(retry, id);
	ck_assert_str_eq(tu_jstr(t, "retriedTaskId"), id);
	ck_assert_str_eq(tu_jstr(t, "workflowInstanceId"), wf);
	ck_assert_int_eq(tu_jnum(t, "retryCount"), 1);
	ck_assert_int_eq(tu_jnum(t, "pollCount"), 1);
	ck_assert_int_eq(tu_jnum(cJSON_GetObjectItem(t, "inputData"), "n"), 7);
	cJSON_Delete(a);
	assert_api_status(id, "FAILED");
	/* the retries are spent: the workflow fails */
	update_ok(retry, "\"status\":\"FAILED\"");
	wait_wf(wf, "FAILED");
	a = poll_ok("build", "w1", 1, 0);
	ck_assert_int_eq(cJSON_GetArraySize(a), 0);
	cJSON_Delete(a);
	free(retry);
	free(id);
}
END_TEST

/* ----------------------------------------------------- leases, timeouts */

START_TEST(test_extend_lease_keeps_task_alive)
{
	char *id = tu_conductor_create(C, "{\"taskType\":\"build\",\"responseTimeoutSeconds\":1,"
	                                  "\"retryCount\":0}");
	usec_t end;
	cJSON *t;

	free(poll_one("build", "w1"));
	/* 2.5 response timeouts with a lease extension every 300 ms; the
	 * extension's outputData and logs are not applied (extendLease) */
	end = time_mono() + 2500 * USEC_PER_MSEC;
	while (time_mono() < end) {
		update_ok(id, "\"status\":\"IN_PROGRESS\",\"extendLease\":true,"
		              "\"outputData\":{\"x\":1},\"logs\":[{\"log\":\"hb\"}]");
		tu_sleep(300 * USEC_PER_MSEC);
	}
	t = tu_conductor_task(C, id);
	ck_assert_str_eq(tu_jstr(t, "status"), "IN_PROGRESS");
	ck_assert_int_ge(tu_jnum(t, "extendLeases"), 5);
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(t, "outputData")), 0);
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(t, "logs")), 0);
	cJSON_Delete(t);
	/* then silence: TIMED_OUT */
	wait_task(id, "TIMED_OUT");
	free(id);
}
END_TEST

START_TEST(test_response_timeout_then_retry)
{
	char *id = tu_conductor_create(C, "{\"taskType\":\"build\",\"responseTimeoutSeconds\":1,"
	                                  "\"retryCount\":1,\"retryDelaySeconds\":0}");
	_cleanup_free_ char *wf = wf_of(id);
	_cleanup_free_ char *want = NULL;
	cJSON *t, *a;
	char *retry;

	free(poll_one("build", "w1"));
	t = tu_conductor_wait(C, id, "TIMED_OUT", 5 * SEC);
	ck_assert_ptr_nonnull(t);
	want =
	    tu_fmt("responseTimeout: 1 exceeded for the taskId: %s with Task Definition: build", id);
	ck_assert_str_eq(tu_jstr(t, "reasonForIncompletion"), want);
	cJSON_Delete(t);
	/* a late result for the timed-out attempt: 200, ignored */
	update_ok(id, "\"status\":\"COMPLETED\"");
	assert_api_status(id, "TIMED_OUT");
	/* the retry: a new task id */
	a = poll_ok("build", "w1", 1, 1000);
	ck_assert_int_eq(cJSON_GetArraySize(a), 1);
	retry = strdup(tu_jstr(cJSON_GetArrayItem(a, 0), "taskId"));
	ck_assert_str_ne(retry, id);
	ck_assert_int_eq(tu_jnum(cJSON_GetArrayItem(a, 0), "retryCount"), 1);
	cJSON_Delete(a);
	/* it times out too: no retry left, the workflow is TIMED_OUT */
	wait_task(retry, "TIMED_OUT");
	wait_wf(wf, "TIMED_OUT");
	a = poll_ok("build", "w1", 1, 0);
	ck_assert_int_eq(cJSON_GetArraySize(a), 0);
	cJSON_Delete(a);
	free(retry);
	free(id);
}
END_TEST

/* IN_PROGRESS without extendLease: SCHEDULED, back in the queue after
 * callbackAfterSeconds, same task id (what a "release" would be). */
START_TEST(test_in_progress_callback_requeues_same_id)
{
	char *id = tu_conductor_create(C, "{\"taskType\":\"build\"}");
	usec_t t0;
	cJSON *a, *t;

	free(poll_one("build", "w1"));
	update_ok(id, "\"status\":\"IN_PROGRESS\",\"callbackAfterSeconds\":1,"
	              "\"outputData\":{\"progress\":50}");
	t = tu_conductor_task(C, id);
	ck_assert_str_eq(tu_jstr(t, "status"), "SCHEDULED");
	ck_assert_int_eq(tu_jnum(cJSON_GetObjectItem(t, "outputData"), "progress"), 50);
	cJSON_Delete(t);
	a = poll_ok("build", "w2", 1, 0);
	ck_assert_int_eq(cJSON_GetArraySize(a), 0); /* not due yet */
	cJSON_Delete(a);
	t0 = time_mono();
	a = poll_ok("build", "w2", 1, 5000);
	ck_assert_int_eq(cJSON_GetArraySize(a), 1);
	ck_assert_uint_lt(time_mono() - t0, 4 * SEC); /* when due, not at the timeout */
	t = cJSON_GetArrayItem(a, 0);
	ck_assert_str_eq(tu_jstr(t, "taskId"), id);
	ck_assert_str_eq(tu_jstr(t, "workerId"), "w2");
	ck_assert_int_eq(tu_jnum(t, "pollCount"), 2);
	ck_assert_int_eq(tu_jnum(t, "callbackAfterSeconds"), 0); /* reset by the poll */
	cJSON_Delete(a);
	/* nothing fences the first worker: its result still lands */
	update_ok(id, "\"status\":\"COMPLETED\",\"workerId\":\"w1\"");
	assert_api_status(id, "COMPLETED");
	free(id);
}
END_TEST

/* ---------------------------------------------------------- cancellation */

START_TEST(test_update_after_cancel)
{
	char *id = tu_conductor_create(C, "{\"taskType\":\"build\"}");
	_cleanup_free_ char *cancel = tu_fmt("/emu/tasks/%s/cancel", id);
	_cleanup_free_ char *wf = wf_of(id);
	_cleanup_free_ char *body = NULL;
	struct tu_http_answer a;
	long st;
	cJSON *t;

	free(poll_one("build", "w1"));
	cJSON_Delete(tu_conductor_json(C, "POST", cancel, "{}", &st));
	ck_assert_int_eq(st, 200);
	assert_api_status(id, "CANCELED");
	/* the update is answered as accepted, and ignored */
	update_ok(id, "\"status\":\"COMPLETED\",\"outputData\":{\"late\":true}");
	update_ok(id, "\"status\":\"IN_PROGRESS\",\"extendLease\":true");
	body = tu_fmt("{\"taskId\":\"%s\",\"workflowInstanceId\":\"%s\",\"status\":\"COMPLETED\"}", id,
	           wf);
	a = post("/api/tasks/update-v2", body, false);
	ck_assert_int_eq(a.status, 204); /* terminal, and no next task */
	tu_http_answer_done(&a);
	t = tu_conductor_task(C, id);
	ck_assert_str_eq(tu_jstr(t, "status"), "CANCELED");
	ck_assert_str_eq(tu_jstr(t, "workflowStatus"), "TERMINATED");
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(t, "outputData")), 0);
	cJSON_Delete(t);
	cJSON_Delete(tu_conductor_json(C, "POST", cancel, "{}", &st));
	ck_assert_int_eq(st, 409);
	free(id);
}
END_TEST

/* update-v2: the next task of the type for the same worker, or 204. */
START_TEST(test_update_v2_chains)
{
	char *first = tu_conductor_create(C, "{\"taskType\":\"build\",\"count\":2}");
	_cleanup_free_ char *wf = wf_of(first);
	_cleanup_free_ char *body = NULL;
	struct tu_http_answer a;
	cJSON *next;
	char *second;

	free(poll_one("build", "w1"));
	body = tu_fmt("{\"taskId\":\"%s\",\"workflowInstanceId\":\"%s\",\"status\":\"IN_PROGRESS\","
	           "\"extendLease\":true,\"workerId\":\"w1\"}",
	           first, wf);
	a = post("/api/tasks/update-v2", body, true);
	ck_assert_int_eq(a.status, 204); /* a lease extension */
	tu_http_answer_done(&a);
	free(body);
	body = tu_fmt("{\"taskId\":\"%s\",\"workflowInstanceId\":\"%s\",\"status\":\"COMPLETED\","
	           "\"workerId\":\"w1\"}",
	           first, wf);
	a = post("/api/tasks/update-v2", body, true);
	ck_assert_int_eq(a.status, 200);
	next = cJSON_Parse(a.body);
	tu_http_answer_done(&a);
	second = strdup(tu_jstr(next, "taskId"));
	ck_assert_str_ne(second, first);
	ck_assert_str_eq(tu_jstr(next, "status"), "IN_PROGRESS");
	ck_assert_str_eq(tu_jstr(next, "workerId"), "w1");
	cJSON_Delete(next);
	{
		_cleanup_free_ char *wf2 = wf_of(second);
		_cleanup_free_ char *b2 = tu_fmt("{\"taskId\":\"%s\",\"workflowInstanceId\":\"%s\","
		                              "\"status\":\"COMPLETED\",\"workerId\":\"w1\"}",
		                              second, wf2);

		a = post("/api/tasks/update-v2", b2, true);
		ck_assert_int_eq(a.status, 204); /* nothing left */
		tu_http_answer_done(&a);
	}
	assert_api_status(first, "COMPLETED");
	assert_api_status(second, "COMPLETED");
	free(second);
	free(first);
}
END_TEST

/* ------------------------------------------------------------------ logs */

START_TEST(test_task_log_endpoint)
{
	char *id = tu_conductor_create(C, "{\"taskType\":\"build\"}");
	_cleanup_free_ char *path = tu_fmt("/api/tasks/%s/log", id);
	struct tu_http_answer a;
	long st;
	cJSON *logs;

	ck_assert_int_eq(tu_conductor_http(C, "GET", path, NULL, NULL, false, &a), 0);
	ck_assert_int_eq(a.status, 204); /* no logs yet */
	tu_http_answer_done(&a);
	/* the body is the line, raw: a JSON string keeps its quotes */
	a = post(path, "\"hello\"", true);
	ck_assert_int_eq(a.status, 200);
	ck_assert_uint_eq(a.len, 0);
	tu_http_answer_done(&a);
	logs = tu_conductor_json(C, "GET", path, NULL, &st);
	ck_assert_int_eq(st, 200);
	ck_assert_int_eq(cJSON_GetArraySize(logs), 1);
	ck_assert_str_eq(tu_jstr(cJSON_GetArrayItem(logs, 0), "log"), "\"hello\"");
	ck_assert_str_eq(tu_jstr(cJSON_GetArrayItem(logs, 0), "taskId"), id);
	ck_assert_int_gt(tu_jnum(cJSON_GetArrayItem(logs, 0), "createdTime"), 0);
	cJSON_Delete(logs);
	/* any task id is taken (ExecutionService.log does not look it up) */
	a = post("/api/tasks/no-such-task/log", "x", false);
	ck_assert_int_eq(a.status, 200);
	tu_http_answer_done(&a);
	free(id);
}
END_TEST

START_TEST(test_get_task_and_unknown_routes)
{
	long st;
	cJSON *e = get_task("missing", &st);
	struct tu_http_answer a;

	ck_assert_int_eq(st, 404);
	ck_assert_str_eq(tu_jstr(e, "message"), "Task not found for taskId: missing");
	cJSON_Delete(e);
	ck_assert_int_eq(tu_conductor_http(C, "GET", "/api/nothing", NULL, NULL, false, &a), 0);
	ck_assert_int_eq(a.status, 404);
	tu_http_answer_done(&a);
	ck_assert_int_eq(tu_conductor_http(C, "DELETE", "/api/tasks", NULL, NULL, false, &a), 0);
	ck_assert_int_eq(a.status, 405);
	tu_http_answer_done(&a);
	/* no authentication configured: no token endpoint, as in OSS Conductor */
	a = post("/api/token", "{\"keyId\":\"k\",\"keySecret\":\"s\"}", false);
	ck_assert_int_eq(a.status, 404);
	tu_http_answer_done(&a);
}
END_TEST

/* ------------------------------------------------------------------ auth */

static struct tu_http_answer poll_with_token(const char *token)
{
	_cleanup_free_ char *h = token ? tu_fmt("X-Authorization: %s", token) : NULL;
	const char *const hs[] = {h, NULL};
	struct tu_http_answer a;

	ck_assert_int_eq(tu_conductor_http(C, "GET",
	                                   "/api/tasks/poll/batch/build?count=1&timeout=0",
	                                   h ? hs : NULL, NULL, false, &a),
	                 0);
	return a;
}

static void assert_401(struct tu_http_answer a, const char *error)
{
	cJSON *e = cJSON_Parse(a.body);

	ck_assert_int_eq(a.status, 401);
	ck_assert_str_eq(tu_jstr(e, "error"), error);
	cJSON_Delete(e);
	tu_http_answer_done(&a);
}

START_TEST(test_auth)
{
	struct tu_http_answer a;
	cJSON *j;
	char *token, *token2;
	usec_t got, now;

	teardown();
	start_with(&(struct tu_conductor_opts){
	    .key_id = "key-1", .key_secret = "s3cret", .token_ttl_s = 1, .sweep_ms = 20});
	assert_401(post("/api/token", "{\"keyId\":\"key-1\",\"keySecret\":\"wrong\"}", false),
	           "INVALID_CREDENTIALS");
	assert_401(poll_with_token(NULL), "INVALID_TOKEN");
	assert_401(poll_with_token("made-up"), "INVALID_TOKEN");
	a = post("/api/token", "{\"keyId\":\"key-1\",\"keySecret\":\"s3cret\"}", true);
	got = time_mono();
	ck_assert_int_eq(a.status, 200);
	j = cJSON_Parse(a.body);
	token = strdup(tu_jstr(j, "token"));
	cJSON_Delete(j);
	tu_http_answer_done(&a);
	a = poll_with_token(token);
	ck_assert_int_eq(a.status, 200);
	ck_assert_str_eq(a.body, "[]");
	tu_http_answer_done(&a);
	/* the test controls need no token */
	token2 = tu_conductor_create(C, "{\"taskType\":\"build\"}");
	ck_assert_ptr_nonnull(token2);
	free(token2);
	/* the token lives 1 s: then EXPIRED_TOKEN, which the SDK renews on */
	now = time_mono();
	if (now < got + 1100 * USEC_PER_MSEC)
		tu_sleep(got + 1100 * USEC_PER_MSEC - now);
	assert_401(poll_with_token(token), "EXPIRED_TOKEN");
	free(token);
}
END_TEST

/* ---------------------------------------------------------------- faults */

START_TEST(test_faults)
{
	long st;
	struct tu_http_answer a;
	cJSON *e;

	cJSON_Delete(tu_conductor_json(C, "POST", "/emu/faults",
	                               "{\"path\":\"/api/tasks/poll\",\"count\":2,\"status\":503}",
	                               &st));
	ck_assert_int_eq(st, 204);
	for (int i = 0; i < 2; i++) {
		e = poll_batch("build", "w1", 1, 0, &st);
		ck_assert_int_eq(st, 503);
		ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(e, "retryable")));
		cJSON_Delete(e);
	}
	cJSON_Delete(poll_ok("build", "w1", 1, 0));
	cJSON_Delete(tu_conductor_json(
	    C, "POST", "/emu/faults", "{\"path\":\"/api/tasks\",\"count\":1,\"reset\":true}", &st));
	ck_assert_int_eq(st, 204);
	ck_assert_int_lt(tu_conductor_http(C, "GET", "/api/tasks/x", NULL, NULL, false, &a), 0);
	e = get_task("x", &st);
	ck_assert_int_eq(st, 404); /* the next one is answered */
	cJSON_Delete(e);
}
END_TEST

/* Concurrent pollers: every task handed out exactly once. */
#define POLLERS 8
#define MANY 300

struct poller {
	char *ids[MANY];
	int n;
	char name[16];
};

static void *poll_until_empty(void *arg)
{
	struct poller *p = arg;

	for (;;) {
		cJSON *a = poll_batch("many", p->name, 5, 200, NULL), *t;

		if (cJSON_GetArraySize(a) == 0) {
			cJSON_Delete(a);
			return NULL;
		}
		cJSON_ArrayForEach(t, a)
		{
			if (p->n < MANY)
				p->ids[p->n++] = strdup(tu_jstr(t, "taskId"));
		}
		cJSON_Delete(a);
	}
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

START_TEST(test_concurrent_polls_hand_out_once)
{
	static struct poller p[POLLERS];
	pthread_t th[POLLERS];
	char *all[MANY * POLLERS];
	int n = 0;
	cJSON *j;
	long st;

	free(tu_conductor_create(C, "{\"taskType\":\"many\",\"count\":300}"));
	for (int i = 0; i < POLLERS; i++) {
		snprintf(p[i].name, sizeof(p[i].name), "w%d", i);
		ck_assert_int_eq(pthread_create(&th[i], NULL, poll_until_empty, &p[i]), 0);
	}
	for (int i = 0; i < POLLERS; i++) {
		pthread_join(th[i], NULL);
		for (int k = 0; k < p[i].n; k++)
			all[n++] = p[i].ids[k];
	}
	ck_assert_int_eq(n, MANY);
	qsort(all, (size_t)n, sizeof(*all), cmp_str);
	for (int i = 1; i < n; i++)
		ck_assert_str_ne(all[i - 1], all[i]);
	for (int i = 0; i < n; i++)
		free(all[i]);
	j = tu_conductor_json(C, "GET", "/emu/wait?taskType=many&status=IN_PROGRESS&count=300",
	                      NULL, &st);
	ck_assert_int_eq(st, 200);
	cJSON_Delete(j);
	ck_assert_int_eq(tu_conductor_stat(C, "poll_nonempty"),
	                 tu_conductor_stat(C, "poll") - POLLERS);
}
END_TEST

/* The test controls the demo and the benchmark wait on. */
START_TEST(test_emu_wait_and_counts)
{
	struct tu_http_answer a;
	long st;
	cJSON *j;

	free(tu_conductor_create(C, "{\"taskType\":\"build\",\"count\":3}"));
	j = tu_conductor_json(C, "GET",
	                      "/emu/wait?taskType=build&status=IN_PROGRESS&count=2&timeout_ms=0",
	                      NULL, &st);
	ck_assert_int_eq(st, 408);
	cJSON_Delete(j);
	cJSON_Delete(poll_ok("build", "w1", 2, 0));
	j = tu_conductor_json(C, "GET", "/emu/wait?taskType=build&status=IN_PROGRESS&count=2", NULL,
	                      &st);
	ck_assert_int_eq(st, 200);
	ck_assert_int_eq(tu_jnum(j, "count"), 2);
	cJSON_Delete(j);
	j = tu_conductor_json(C, "GET", "/emu/wait?stat=poll&count=1", NULL, &st);
	ck_assert_int_eq(st, 200);
	cJSON_Delete(j);
	ck_assert_int_eq(tu_conductor_http(C, "GET", "/emu/counts", NULL, NULL, false, &a), 0);
	ck_assert_int_eq(a.status, 200);
	ck_assert_ptr_nonnull(strstr(a.body, "SCHEDULED 1\n"));
	ck_assert_ptr_nonnull(strstr(a.body, "IN_PROGRESS 2\n"));
	ck_assert_ptr_nonnull(strstr(a.body, "workflow_RUNNING 3\n"));
	tu_http_answer_done(&a);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("conductor_emu");
	TCase *t = tcase_create("api");

	tcase_add_checked_fixture(t, start, teardown);
	tcase_set_timeout(t, 60);
	tcase_add_test(t, test_poll_returns_tasks_up_to_count);
	tcase_add_test(t, test_domains);
	tcase_add_test(t, test_long_poll_empty);
	tcase_add_test(t, test_long_poll_waits_for_count);
	tcase_add_test(t, test_long_poll_wakes_on_new_task);
	tcase_add_test(t, test_complete_with_output_and_logs);
	tcase_add_test(t, test_update_chunked_body);
	tcase_add_test(t, test_update_refusals);
	tcase_add_test(t, test_terminal_error_not_retried_reason_capped);
	tcase_add_test(t, test_failed_retried_as_new_task);
	tcase_add_test(t, test_extend_lease_keeps_task_alive);
	tcase_add_test(t, test_response_timeout_then_retry);
	tcase_add_test(t, test_in_progress_callback_requeues_same_id);
	tcase_add_test(t, test_update_after_cancel);
	tcase_add_test(t, test_update_v2_chains);
	tcase_add_test(t, test_task_log_endpoint);
	tcase_add_test(t, test_get_task_and_unknown_routes);
	tcase_add_test(t, test_auth);
	tcase_add_test(t, test_faults);
	tcase_add_test(t, test_emu_wait_and_counts);
	tcase_add_test(t, test_concurrent_polls_hand_out_once);
	suite_add_tcase(s, t);
	return tu_run(s);
}
