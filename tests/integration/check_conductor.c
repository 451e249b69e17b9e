/* lessee end to end against the Conductor emulator (tests/conductor/):
 * api.protocol = conductor, a real daemon, real children.  What the server
 * sees of each run: success with its outputData, failure, a terminal exit
 * code, timeout, crash, keep-alive past responseTimeoutSeconds, logs, a task
 * cancelled on the server (its run killed at once), drain, hard stop, results
 * spooled while the server refuses them and delivered at restart, the
 * breaker, and key authentication. */
#include <cJSON.h>
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conductor_proc.h"
#include "lessee_proc.h"
#include "lessor_proc.h" /* tu_timeout */
#include "jsonutil.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"

#define SEC USEC_PER_SEC

static struct tu_conductor *E;
static struct tu_lessee *D;
static char *scripts;

static void write_script(const char *name, const char *body)
{
	_cleanup_free_ char *path = tu_fmt("%s/%s", scripts, name);
	_cleanup_free_ char *text = tu_fmt("#!/bin/sh\n%s\n", body);

	ck_assert_int_eq(write_file_atomic(path, text, strlen(text), 0755), 0);
}

static void emu_start(const struct tu_conductor_opts *o)
{
	ck_assert_int_eq(tu_conductor_start(o, &E), 0);
}

static void setup(void)
{
	scripts = tu_tmpdir("conductor-e2e");
	ck_assert_ptr_nonnull(scripts);
	write_script("ok.sh", "in=$(cat)\n"
	                      "echo \"hello from $LESSEE_RUN_ID\"\n"
	                      "echo second line\n"
	                      "printf '{\"got\":%s,\"wf\":\"%s\",\"attempt\":%s}' \"$in\" "
	                      "\"$LESSEE_CONDUCTOR_WORKFLOW_ID\" \"$LESSEE_ATTEMPT\" "
	                      "> \"$LESSEE_RESULT_FILE\"");
	write_script("fail.sh", "echo failing on purpose\nexit 3");
	write_script("terminal.sh", "exit 4");
	write_script("crash.sh", "kill -SEGV $$");
	write_script("sleep.sh", "echo $$ > \"$MARK_DIR/$LESSEE_RUN_ID.pid\"\n"
	                         "sleep \"${SLEEP:-1000}\"\necho slept");
	emu_start(&(struct tu_conductor_opts){.sweep_ms = 20});
}

static void teardown(void)
{
	int st = D ? tu_lessee_quit(D) : 0;
	int es = E && tu_conductor_pid(E) > 0 ? tu_conductor_stop(E) : 0;

	D = tu_lessee_free(D);
	E = tu_conductor_free(E);
	if (scripts)
		rm_rf(scripts);
	free(scripts);
	scripts = NULL;
	ck_assert_msg(st == 0 || st == 128 + SIGKILL, "lessee exited with %d", st);
	ck_assert_msg(es == 0, "the emulator exited with %d", es);
}

/* lessee on the emulator; fmt's %1$s is the scripts directory. */
_printf_(1, 2) static void start_lessee(const char *f, ...)
{
	_cleanup_free_ char *text = NULL, *conf = NULL;
	va_list ap;

	va_start(ap, f);
	ck_assert_int_ge(vasprintf(&text, f, ap), 0);
	va_end(ap);
	conf = tu_fmt("[api]\nprotocol = conductor\n%s", text);
	ck_assert_int_eq(
	    tu_lessee_start(&(struct tu_lessee_opts){.url = tu_conductor_url(E), .conf = conf}, &D),
	    0);
}

static char *create(const char *json)
{
	char *id = tu_conductor_create(E, json);

	ck_assert_msg(id, "cannot create %s", json);
	return id;
}

/* Until the task has status: its view (free it). */
static cJSON *wait_task(const char *id, const char *status)
{
	cJSON *t = tu_conductor_wait(E, id, status, 30 * SEC);

	if (!t) {
		cJSON *now = tu_conductor_task(E, id);
		_cleanup_free_ char *s = now ? cJSON_Print(now) : NULL;

		cJSON_Delete(now);
		ck_abort_msg("task %s never %s; it is %s", id, status, s ? s : "?");
	}
	return t;
}

/* The task is in this status now; else the daemon's log says why. */
static void expect_status(const char *id, const char *status)
{
	cJSON *t = tu_conductor_task(E, id);
	const char *now = tu_jstr(t, "status");

	if (!now || !streq(now, status)) {
		_cleanup_free_ char *log = tu_lessee_log(D);

		fprintf(stderr, "--- lessee log ---\n%s--- end ---\n", log ? log : "");
		ck_abort_msg("task %s is %s, not %s", id, now ? now : "?", status);
	}
	cJSON_Delete(t);
}

/* The task's logs, one string (entries joined by '\n'). */
static char *task_logs(const cJSON *t)
{
	const cJSON *logs = cJSON_GetObjectItemCaseSensitive(t, "logs"), *e;
	char *s = strdup("");

	cJSON_ArrayForEach(e, logs)
	{
		char *n = tu_fmt("%s%s\n", s, tu_jstr(e, "log") ? tu_jstr(e, "log") : "");

		free(s);
		s = n;
	}
	return s;
}

/* Wait until the run's script wrote its pid: the pid. */
static pid_t wait_pid_file(const char *id)
{
	_cleanup_free_ char *path = tu_fmt("%s/%s.pid", scripts, id);
	usec_t end = time_mono() + tu_timeout(20 * SEC);

	for (;;) {
		_cleanup_free_ char *text = NULL;
		size_t n;

		if (read_file_capped(path, 64, &text, &n) == 0 && n > 0 && text[n - 1] == '\n')
			return (pid_t)atoi(text);
		ck_assert_msg(time_mono() < end, "run %s never started", id);
		tu_sleep(20 * USEC_PER_MSEC); /* polling a file the child writes */
	}
}

static void wait_dead(pid_t pid, usec_t within)
{
	usec_t end = time_mono() + tu_timeout(within);

	while (tu_pid_alive(pid)) {
		ck_assert_msg(time_mono() < end, "pid %d still alive", (int)pid);
		tu_sleep(20 * USEC_PER_MSEC);
	}
}

/* The poll after the one that brought the first task has reached the
 * server: with long_poll = 5s it is open there for 5 s from now. */
static void wait_open_poll(void)
{
	usec_t end = time_mono() + tu_timeout(20 * SEC);

	while (tu_conductor_stat(E, "poll") < 2) {
		ck_assert_msg(time_mono() < end, "no second poll");
		tu_sleep(10 * USEC_PER_MSEC);
	}
}

#define SLEEPER(extra) "[workflow.sleep]\ncommand = %1$s/sleep.sh\nenv = MARK_DIR=%1$s " extra "\n"

/* ---- outcomes ---- */

START_TEST(test_success)
{
	_cleanup_free_ char *id = create("{\"taskType\":\"ok\",\"inputData\":{\"n\":5}}");
	cJSON *t, *out;
	_cleanup_free_ char *logs = NULL, *hello = tu_fmt("hello from %s", id);

	start_lessee("[workflow.ok]\ncommand = %s/ok.sh\n", scripts);
	t = wait_task(id, "COMPLETED");
	out = cJSON_GetObjectItemCaseSensitive(t, "outputData");
	ck_assert_int_eq(tu_jnum(cJSON_GetObjectItemCaseSensitive(out, "got"), "n"), 5);
	ck_assert_str_eq(tu_jstr(out, "wf"), tu_jstr(t, "workflowInstanceId"));
	ck_assert_int_eq(tu_jnum(out, "attempt"), 1);
	ck_assert_str_eq(tu_jstr(t, "workerId"), "test-worker");
	ck_assert_str_eq(tu_jstr(t, "workflowStatus"), "COMPLETED");
	logs = task_logs(t);
	ck_assert_msg(strstr(logs, hello) && strstr(logs, "second line"), "logs: %s", logs);
	cJSON_Delete(t);
	ck_assert_int_eq(tu_lessee_stop(D), 0);
}
END_TEST

START_TEST(test_failure_retried_by_conductor)
{
	_cleanup_free_ char *id =
	    create("{\"taskType\":\"fail\",\"retryCount\":1,\"retryDelaySeconds\":0}");
	cJSON *t, *wf;

	start_lessee("[workflow.fail]\ncommand = %s/fail.sh\n", scripts);
	t = wait_task(id, "FAILED");
	ck_assert_str_eq(tu_jstr(t, "reasonForIncompletion"), "exited with status 3");
	ck_assert_int_eq(tu_jnum(cJSON_GetObjectItemCaseSensitive(t, "outputData"), "exitCode"), 3);
	/* Conductor's retry is a new task, attempt 2; it fails too and the workflow ends */
	wf = tu_conductor_wait_workflow(E, tu_jstr(t, "workflowInstanceId"), "FAILED", 30 * SEC);
	ck_assert_ptr_nonnull(wf);
	cJSON_Delete(wf);
	cJSON_Delete(t);
	ck_assert_int_eq(tu_lessee_wait_log(D, "attempt=2", 10 * SEC), 0);
}
END_TEST

START_TEST(test_terminal_exit_code)
{
	_cleanup_free_ char *id = create("{\"taskType\":\"terminal\",\"retryCount\":3}");
	cJSON *t;

	start_lessee("[workflow.terminal]\ncommand = %s/terminal.sh\nterminal_exit_codes = 4\n",
	             scripts);
	t = wait_task(id, "FAILED_WITH_TERMINAL_ERROR");
	ck_assert_str_eq(tu_jstr(t, "reasonForIncompletion"), "exited with status 4 (terminal)");
	ck_assert_str_eq(tu_jstr(t, "workflowStatus"), "FAILED"); /* no retry */
	cJSON_Delete(t);
}
END_TEST

START_TEST(test_timeout_and_crash)
{
	_cleanup_free_ char *slow = create("{\"taskType\":\"sleep\",\"retryCount\":0}");
	_cleanup_free_ char *crash = create("{\"taskType\":\"crash\",\"retryCount\":0}");
	cJSON *t;

	start_lessee(SLEEPER("\ntimeout = 1s") "[workflow.crash]\ncommand = %1$s/crash.sh\n",
	             scripts);
	t = wait_task(slow, "FAILED");
	ck_assert_str_eq(tu_jstr(t, "reasonForIncompletion"), "timed out after 1000 ms");
	cJSON_Delete(t);
	t = wait_task(crash, "FAILED");
	ck_assert_str_eq(tu_jstr(t, "reasonForIncompletion"), "killed by SIGSEGV");
	ck_assert_str_eq(tu_jstr(cJSON_GetObjectItemCaseSensitive(t, "outputData"), "signal"),
	                 "SIGSEGV");
	cJSON_Delete(t);
}
END_TEST

/* A task lessee cannot take (its input is over max_input_bytes) is not run:
 * it is failed at once, by name, and Conductor's retry policy decides. */
START_TEST(test_refused_input_fails_the_task)
{
	char big[3000];
	_cleanup_free_ char *body = NULL, *id = NULL, *logs = NULL;
	cJSON *t;

	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	body = tu_fmt("{\"taskType\":\"ok\",\"retryCount\":0,\"inputData\":{\"big\":\"%s\"}}", big);
	id = create(body);
	start_lessee("[worker]\nmax_input_bytes = 1K\n[workflow.ok]\ncommand = %s/ok.sh\n",
	             scripts);
	t = wait_task(id, "FAILED");
	ck_assert_msg(strstr(tu_jstr(t, "reasonForIncompletion"), "max_input_bytes"), "%s",
	              tu_jstr(t, "reasonForIncompletion"));
	logs = task_logs(t);
	ck_assert_ptr_null(strstr(logs, "hello from")); /* never ran */
	cJSON_Delete(t);
}
END_TEST

/* A task whose input the server moved to external payload storage reaches a
 * worker with inputData {}: lessee does not read that storage, so it refuses
 * the task by name rather than run it on an empty input. */
START_TEST(test_external_input_fails_the_task)
{
	char big[3000];
	_cleanup_free_ char *body = NULL, *id = NULL, *logs = NULL;
	cJSON *t;

	tu_conductor_stop(E);
	E = tu_conductor_free(E);
	emu_start(&(struct tu_conductor_opts){.sweep_ms = 20, .input_threshold_kb = 1});
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	body = tu_fmt("{\"taskType\":\"ok\",\"retryCount\":0,\"inputData\":{\"big\":\"%s\"}}", big);
	id = create(body);
	start_lessee("[workflow.ok]\ncommand = %s/ok.sh\n", scripts);
	t = wait_task(id, "FAILED");
	ck_assert_msg(strstr(tu_jstr(t, "reasonForIncompletion"), "external payload storage"), "%s",
	              tu_jstr(t, "reasonForIncompletion"));
	logs = task_logs(t);
	ck_assert_ptr_null(strstr(logs, "hello from")); /* never ran */
	cJSON_Delete(t);
}
END_TEST

/* A workflow added by SIGHUP has its task type polled from then on. */
START_TEST(test_reload_adds_a_task_type)
{
	_cleanup_free_ char *conf = NULL, *id = NULL;
	cJSON *t;

	start_lessee("[workflow.ok]\ncommand = %s/ok.sh\n", scripts);
	conf = tu_fmt("[api]\nprotocol = conductor\n[workflow.ok]\ncommand = %1$s/ok.sh\n"
	              "[workflow.fail]\ncommand = %1$s/fail.sh\n",
	              scripts);
	ck_assert_int_eq(tu_lessee_set_conf(D, conf), 0);
	ck_assert_int_eq(tu_lessee_signal(D, SIGHUP), 0);
	ck_assert_int_eq(tu_lessee_wait_log(D, "workflow.fail: added", 10 * SEC), 0);
	id = create("{\"taskType\":\"fail\",\"retryCount\":0}");
	t = wait_task(id, "FAILED");
	cJSON_Delete(t);
	ck_assert_int_eq(tu_lessee_wait_log(D, "claim failed", 100 * USEC_PER_MSEC), -ETIMEDOUT);
}
END_TEST

/* ---- the lease ---- */

START_TEST(test_keep_alive_past_response_timeout)
{
	/* 3 s of response timeout, a 6 s run: only the keep-alive saves it */
	_cleanup_free_ char *id =
	    create("{\"taskType\":\"sleep\",\"responseTimeoutSeconds\":3,\"retryCount\":0}");
	cJSON *t;

	start_lessee(SLEEPER("SLEEP=6"), scripts);
	t = wait_task(id, "COMPLETED");
	ck_assert_int_ge(tu_jnum(t, "extendLeases"), 3);
	ck_assert_int_eq(tu_jnum(t, "retryCount"), 0);
	cJSON_Delete(t);
}
END_TEST

START_TEST(test_cancel_on_server_kills_at_once)
{
	_cleanup_free_ char *id = create("{\"taskType\":\"sleep\"}");
	pid_t pid;
	cJSON *t;
	double updates;

	start_lessee(SLEEPER(""), scripts);
	pid = wait_pid_file(id);
	ck_assert_int_eq(tu_conductor_cancel(E, id), 0);
	/* the next keep-alive (lease_refresh = 1s) reads CANCELED */
	wait_dead(pid, 5 * SEC);
	ck_assert_int_eq(tu_lessee_wait_log(D, "CANCELED on the server", 5 * SEC), 0);
	t = tu_conductor_task(E, id);
	ck_assert_str_eq(tu_jstr(t, "status"), "CANCELED");
	updates = tu_jnum(t, "updates");
	cJSON_Delete(t);
	/* nothing more is said of it: the worker goes on polling, no result */
	ck_assert_int_eq(tu_lessee_stop(D), 0);
	t = tu_conductor_task(E, id);
	ck_assert_int_eq(tu_jnum(t, "updates"), updates);
	cJSON_Delete(t);
}
END_TEST

/* A Conductor poll for `count` tasks holds until it has them all or its
 * timeout passes, with whatever it popped meanwhile already IN_PROGRESS for
 * us.  An idle worker with 4 free slots must not leave a lone task waiting
 * out a 5 s long poll: it starts at once. */
START_TEST(test_lone_task_not_held_by_long_poll)
{
	_cleanup_free_ char *id = NULL;
	usec_t created;
	cJSON *t;

	start_lessee("[worker]\nlong_poll = 5s\n[workflow.ok]\ncommand = %s/ok.sh\n", scripts);
	/* the worker's poll is open on the server, empty */
	while (tu_conductor_stat(E, "poll") < 1)
		tu_sleep(10 * USEC_PER_MSEC);
	tu_sleep(300 * USEC_PER_MSEC); /* well inside its 5 s */
	created = time_mono();
	id = create("{\"taskType\":\"ok\"}");
	t = wait_task(id, "COMPLETED");
	cJSON_Delete(t);
	/* 5 s when the poll held it; milliseconds when it did not (the slack
	 * is for slow machines; valgrind only checks that it completes) */
	if (tu_timeout(SEC) == SEC)
		ck_assert_msg(time_mono() - created < 4 * SEC,
		              "a lone task waited %.1f s for the long poll to end",
		              (double)(time_mono() - created) / SEC);
}
END_TEST

/* ---- stopping ---- */

START_TEST(test_drain_finishes_runs_and_stops_polling)
{
	_cleanup_free_ char *id = create("{\"taskType\":\"sleep\"}");
	_cleanup_free_ char *later = NULL;
	double polls;

	start_lessee("[worker]\nlong_poll = 5s\n" SLEEPER("SLEEP=2"), scripts);
	wait_pid_file(id);
	/* the poll that followed the first is counted before the drain: one
	 * still on its way when it began would be counted after it */
	wait_open_poll();
	ck_assert_int_eq(tu_lessee_signal(D, SIGTERM), 0);
	ck_assert_int_eq(tu_lessee_wait_log(D, "draining: no new claims", 5 * SEC), 0);
	polls = tu_conductor_stat(E, "poll");
	ck_assert_int_eq(tu_lessee_wait(D, 30 * SEC), 0);
	expect_status(id, "COMPLETED");
	/* no poll after the drain began */
	ck_assert_int_eq(tu_conductor_stat(E, "poll"), polls);
	later = create("{\"taskType\":\"sleep\"}");
	expect_status(later, "SCHEDULED");
}
END_TEST

/* A long poll open when the drain begins is held by the server for up to 5 s
 * and hands over what arrives meanwhile: dropping it on our side loses those
 * tasks until their responseTimeoutSeconds.  The worker must let it end and
 * release what it brings (Conductor has no claim cancel). */
START_TEST(test_drain_poll_in_flight_loses_nothing)
{
	_cleanup_free_ char *id = create("{\"taskType\":\"sleep\"}");
	_cleanup_free_ char *later = NULL;

	start_lessee("[worker]\nlong_poll = 5s\n" SLEEPER("SLEEP=2"), scripts);
	wait_pid_file(id);
	wait_open_poll();
	ck_assert_int_eq(tu_lessee_signal(D, SIGTERM), 0);
	later = create("{\"taskType\":\"sleep\"}");
	ck_assert_int_eq(tu_lessee_wait(D, 30 * SEC), 0);
	expect_status(id, "COMPLETED");
	expect_status(later, "SCHEDULED");
}
END_TEST

START_TEST(test_hard_stop_gives_tasks_back)
{
	_cleanup_free_ char *id = create("{\"taskType\":\"sleep\",\"responseTimeoutSeconds\":600}");
	pid_t pid;
	int got = 0;

	start_lessee("[worker]\nlong_poll = 5s\n" SLEEPER(""), scripts);
	pid = wait_pid_file(id);
	wait_open_poll(); /* it would take the task given back at once */
	ck_assert_int_eq(tu_lessee_quit(D), 0);
	ck_assert(!tu_pid_alive(pid));
	/* given back (IN_PROGRESS + callbackAfterSeconds): due again in seconds,
	 * not after its 600 s response timeout, and not to the long poll lessee
	 * dropped when it stopped */
	expect_status(id, "SCHEDULED");
	for (int i = 0; i < 3 && !got; i++) {
		long st;
		cJSON *a = tu_conductor_json(
		    E, "GET", "/api/tasks/poll/batch/sleep?workerid=other&count=1&timeout=5000",
		    NULL, &st);

		if (cJSON_GetArraySize(a) == 1) {
			ck_assert_str_eq(tu_jstr(cJSON_GetArrayItem(a, 0), "taskId"), id);
			got = 1;
		}
		cJSON_Delete(a);
	}
	ck_assert(got);
}
END_TEST

/* ---- the spool ---- */

START_TEST(test_spool_delivered_at_restart)
{
	_cleanup_free_ char *id = create("{\"taskType\":\"gate\",\"responseTimeoutSeconds\":600}");
	_cleanup_free_ char *go = tu_fmt("%s/go", scripts);
	cJSON *t;

	write_script("gate.sh", "echo $$ > \"$MARK_DIR/$LESSEE_RUN_ID.pid\"\n"
	                        "while [ ! -e \"$MARK_DIR/go\" ]; do sleep 0.05; done\n"
	                        "echo '{\"delivered\":\"late\"}' > \"$LESSEE_RESULT_FILE\"");
	start_lessee("[workflow.gate]\ncommand = %1$s/gate.sh\nenv = MARK_DIR=%1$s\n", scripts);
	wait_pid_file(id);
	/* from now on the server refuses every update: the result cannot go */
	ck_assert_int_eq(tu_conductor_fault(E, "{\"path\":\"/api/tasks\",\"count\":100000,"
	                                       "\"status\":503}"),
	                 0);
	ck_assert_int_eq(write_file_atomic(go, "", 0, 0644), 0);
	ck_assert_int_eq(tu_lessee_wait_log(D, "running -> ", 30 * SEC), 0);
	ck_assert_int_eq(tu_lessee_quit(D), 0); /* a hard stop spools what is undelivered */
	ck_assert_int_eq(tu_lessee_wait_log(D, "result spooled to", 5 * SEC), 0);
	expect_status(id, "IN_PROGRESS");
	{
		struct tu_http_answer a = {0};

		ck_assert_int_eq(
		    tu_conductor_http(E, "DELETE", "/emu/faults", NULL, NULL, false, &a), 0);
		tu_http_answer_done(&a);
	}
	ck_assert_int_eq(tu_lessee_restart(D), 0);
	t = wait_task(id, "COMPLETED");
	ck_assert_str_eq(tu_jstr(cJSON_GetObjectItemCaseSensitive(t, "outputData"), "delivered"),
	                 "late");
	cJSON_Delete(t);
}
END_TEST

/* ---- the breaker ---- */

START_TEST(test_breaker_leaves_a_task_type_out)
{
	_cleanup_free_ char *f1 = create("{\"taskType\":\"fail\",\"retryCount\":0,\"count\":3}");
	_cleanup_free_ char *ok = NULL;
	cJSON *all, *e;
	long st;
	int failed = 0, waiting = 0;

	start_lessee("[worker]\nmax_consecutive_failures = 2\nfailure_cooldown = 1h\n"
	             "failure_cooldown_max = 1h\nconcurrency = 1\n"
	             "[workflow.fail]\ncommand = %1$s/fail.sh\n"
	             "[workflow.ok]\ncommand = %1$s/ok.sh\n",
	             scripts);
	ck_assert_int_eq(tu_lessee_wait_log(D, "workflow fail failed 2 times in a row", 30 * SEC),
	                 0);
	/* the other task type is still polled */
	ok = create("{\"taskType\":\"ok\"}");
	e = wait_task(ok, "COMPLETED");
	cJSON_Delete(e);
	all = tu_conductor_json(E, "GET", "/emu/tasks?taskType=fail", NULL, &st);
	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(all, "tasks"))
	{
		if (streq_ptr(tu_jstr(e, "status"), "FAILED"))
			failed++;
		else if (streq_ptr(tu_jstr(e, "status"), "SCHEDULED") && tu_jnum(e, "pollCount") == 0)
			waiting++;
	}
	cJSON_Delete(all);
	ck_assert_int_eq(failed, 2);
	ck_assert_int_eq(waiting, 1);
}
END_TEST

/* ---- auth ---- */

START_TEST(test_key_auth)
{
	_cleanup_free_ char *id = NULL, *secret = tu_fmt("%s/key-secret", scripts), *log = NULL;
	cJSON *t;

	tu_conductor_stop(E);
	E = tu_conductor_free(E);
	emu_start(&(struct tu_conductor_opts){
	    .sweep_ms = 20, .key_id = "lessee-key", .key_secret = "s3cret-k3y", .token_ttl_s = 2});
	ck_assert_int_eq(write_file_atomic(secret, "s3cret-k3y\n", 11, 0600), 0);
	id = create("{\"taskType\":\"sleep\"}");
	start_lessee(
	    "[api]\nkey_id = lessee-key\nkey_secret_file = %1$s/key-secret\n" SLEEPER("SLEEP=4"),
	    scripts);
	/* a 4 s run with 2 s tokens: renewed on 401 along the way */
	t = wait_task(id, "COMPLETED");
	cJSON_Delete(t);
	ck_assert_int_ge(tu_conductor_stat(E, "token"), 2);
	/* an expired token renewed is no refusal of our credentials: not logged
	 * as one, and readiness never flips */
	log = tu_lessee_log(D);
	ck_assert_ptr_nonnull(log);
	ck_assert_msg(!strstr(log, "API refuses our credentials"),
	              "a renewed token was logged as refused credentials:\n%s", log);
}
END_TEST

/* A key the token endpoint refuses: that is a refusal, logged as one, and no
 * task is polled. */
START_TEST(test_key_refused)
{
	_cleanup_free_ char *id = NULL, *secret = tu_fmt("%s/key-secret", scripts);
	cJSON *t;

	tu_conductor_stop(E);
	E = tu_conductor_free(E);
	emu_start(&(struct tu_conductor_opts){
	    .sweep_ms = 20, .key_id = "lessee-key", .key_secret = "s3cret-k3y", .token_ttl_s = 2});
	ck_assert_int_eq(write_file_atomic(secret, "wrong-secret\n", 13, 0600), 0);
	id = create("{\"taskType\":\"sleep\"}");
	start_lessee(
	    "[api]\nkey_id = lessee-key\nkey_secret_file = %1$s/key-secret\n" SLEEPER("SLEEP=0"),
	    scripts);
	ck_assert_int_eq(tu_lessee_wait_log(D, "API refuses our credentials", 30 * SEC), 0);
	t = tu_conductor_task(E, id);
	ck_assert_ptr_nonnull(t);
	ck_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(t, "status")), "SCHEDULED");
	cJSON_Delete(t);
}
END_TEST

/* One case per test, so CK_RUN_CASE=<name> runs one. */
static TCase *one_case(const char *name)
{
	TCase *tc = tcase_create(name);

	tcase_set_timeout(tc, 120);
	tcase_add_checked_fixture(tc, setup, teardown);
	return tc;
}

#define ADD(s, name)                                                                               \
	do {                                                                                       \
		TCase *tc_ = one_case(#name);                                                      \
		tcase_add_test(tc_, test_##name);                                                  \
		suite_add_tcase(s, tc_);                                                           \
	} while (0)

int main(void)
{
	Suite *s = suite_create("conductor");

	ADD(s, success);
	ADD(s, failure_retried_by_conductor);
	ADD(s, terminal_exit_code);
	ADD(s, timeout_and_crash);
	ADD(s, refused_input_fails_the_task);
	ADD(s, external_input_fails_the_task);
	ADD(s, reload_adds_a_task_type);
	ADD(s, keep_alive_past_response_timeout);
	ADD(s, cancel_on_server_kills_at_once);
	ADD(s, lone_task_not_held_by_long_poll);
	ADD(s, drain_finishes_runs_and_stops_polling);
	ADD(s, drain_poll_in_flight_loses_nothing);
	ADD(s, hard_stop_gives_tasks_back);
	ADD(s, spool_delivered_at_restart);
	ADD(s, breaker_leaves_a_task_type_out);
	ADD(s, key_auth);
	ADD(s, key_refused);
	return tu_run(s);
}
