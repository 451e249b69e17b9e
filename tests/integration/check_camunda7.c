/* lessee end to end against the Camunda 7 emulator (tests/camunda7/):
 * api.protocol = camunda7, a real daemon, real children.  What the engine
 * sees of each run: success with its variables, failures with retries down to
 * an incident, a BPMN error, timeout, crash, a result the engine refuses (an
 * incident, not a lost lock), the lock extended across a run
 * longer than lockDuration, a task re-locked by another worker after its lock
 * expired (lessee kills and stays silent), a cancelled process, drain, hard
 * stop (unlock), a result spooled while the engine refuses it and delivered
 * at restart, the breaker, and HTTP basic authentication. */
#include <cJSON.h>
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "camunda7_proc.h"
#include "jsonutil.h"
#include "lessee_proc.h"
#include "lessor_proc.h" /* tu_timeout */
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"

#define SEC USEC_PER_SEC

static struct tu_camunda7 *E;
static struct tu_lessee *D;
static char *scripts;

static void write_script(const char *name, const char *body)
{
	_cleanup_free_ char *path = tu_fmt("%s/%s", scripts, name);
	_cleanup_free_ char *text = tu_fmt("#!/bin/sh\n%s\n", body);

	ck_assert_int_eq(write_file_atomic(path, text, strlen(text), 0755), 0);
}

static void emu_start(const struct tu_camunda7_opts *o)
{
	ck_assert_int_eq(tu_camunda7_start(o, &E), 0);
}

static void setup(void)
{
	scripts = tu_tmpdir("camunda7-e2e");
	ck_assert_ptr_nonnull(scripts);
	write_script("ok.sh", "in=$(cat)\n"
	                      "echo \"hello from $LESSEE_RUN_ID\"\n"
	                      "printf '{\"got\":%s,\"bk\":\"%s\",\"pi\":\"%s\",\"attempt\":%s}' "
	                      "\"$in\" \"$LESSEE_BUSINESS_KEY\" \"$LESSEE_PROCESS_INSTANCE_ID\" "
	                      "\"$LESSEE_ATTEMPT\" > \"$LESSEE_RESULT_FILE\"");
	write_script("fail.sh", "echo failing on purpose\necho 'the last words' >&2\nexit 3");
	write_script("retry.sh", "echo not yet\nexit 75");
	write_script("bpmn.sh",
	             "echo '{\"bpmn_error\":{\"code\":\"E_STOCK\",\"message\":\"out of "
	             "stock\",\"variables\":{\"sku\":\"A-1\"}}}' > \"$LESSEE_RESULT_FILE\"");
	write_script("crash.sh", "kill -SEGV $$");
	write_script("sleep.sh", "echo $$ > \"$MARK_DIR/$LESSEE_RUN_ID.pid\"\n"
	                         "sleep \"${SLEEP:-1000}\"\necho slept");
	emu_start(NULL);
}

static void teardown(void)
{
	int st = D ? tu_lessee_quit(D) : 0;
	int es = E && tu_camunda7_pid(E) > 0 ? tu_camunda7_stop(E) : 0;

	D = tu_lessee_free(D);
	E = tu_camunda7_free(E);
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
	conf = tu_fmt("[api]\nprotocol = camunda7\n%s", text);
	ck_assert_int_eq(
	    tu_lessee_start(&(struct tu_lessee_opts){.url = tu_camunda7_url(E), .conf = conf}, &D),
	    0);
}

static char *create(const char *json)
{
	char *id = tu_camunda7_create(E, json);

	ck_assert_msg(id, "cannot create %s", json);
	return id;
}

/* Until the task is in state: its view (free it). */
static cJSON *wait_task(const char *id, const char *state)
{
	cJSON *t = tu_camunda7_wait(E, id, state, 30 * SEC);

	if (!t) {
		cJSON *now = tu_camunda7_task(E, id);
		_cleanup_free_ char *s = now ? cJSON_Print(now) : NULL;

		cJSON_Delete(now);
		tu_lessee_dump_log(D);
		ck_abort_msg("task %s never %s; it is %s", id, state, s ? s : "?");
	}
	return t;
}

static void expect_state(const char *id, const char *state)
{
	cJSON *t = tu_camunda7_task(E, id);
	const char *now = tu_jstr(t, "state");

	if (!now || !streq(now, state)) {
		tu_lessee_dump_log(D);
		ck_abort_msg("task %s is %s, not %s", id, now ? now : "?", state);
	}
	cJSON_Delete(t);
}

static int count_of(const cJSON *t, const char *counter)
{
	return (int)tu_jnum(cJSON_GetObjectItemCaseSensitive(t, "counts"), counter);
}

static const cJSON *var(const cJSON *t, const char *set, const char *name)
{
	return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(t, set), name);
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

/* Another worker's fetchAndLock of one task of topic: how many it got. */
static int fetch_as(const char *worker, const char *topic)
{
	_cleanup_free_ char *body =
	    tu_fmt("{\"workerId\":\"%s\",\"maxTasks\":1,\"topics\":[{\"topicName\":\"%s\","
	           "\"lockDuration\":60000}]}",
	           worker, topic);
	long st = 0;
	cJSON *a =
	    tu_camunda7_json(E, "POST", "/engine-rest/external-task/fetchAndLock", body, &st);
	int n;

	ck_assert_int_eq(st, 200);
	n = cJSON_GetArraySize(a);
	cJSON_Delete(a);
	return n;
}

#define SLEEPER(extra) "[workflow.sleep]\ncommand = %1$s/sleep.sh\nenv = MARK_DIR=%1$s " extra "\n"

/* ---- outcomes ---- */

START_TEST(test_success)
{
	_cleanup_free_ char *id = create(
	    "{\"topicName\":\"ok\",\"businessKey\":\"order-7\",\"variables\":{\"n\":{\"type\":"
	    "\"Integer\",\"value\":5}}}");
	cJSON *t, *got = NULL;
	const cJSON *v;

	start_lessee("[workflow.ok]\ncommand = %s/ok.sh\n", scripts);
	t = wait_task(id, "COMPLETED");
	v = var(t, "completeVariables", "got");
	ck_assert_str_eq(tu_jstr(v, "type"), "Json");
	got = cJSON_Parse(tu_jstr(v, "value"));
	ck_assert_int_eq((int)tu_jnum(got, "n"), 5);
	ck_assert_str_eq(tu_jstr(var(t, "completeVariables", "bk"), "value"), "order-7");
	ck_assert_str_eq(tu_jstr(var(t, "completeVariables", "pi"), "value"),
	                 tu_jstr(t, "processInstanceId"));
	ck_assert_str_eq(tu_jstr(var(t, "completeVariables", "attempt"), "type"), "Integer");
	ck_assert_int_eq(count_of(t, "complete"), 1);
	cJSON_Delete(got);
	cJSON_Delete(t);
	ck_assert_int_eq(tu_lessee_wait_log(D, "camunda7: workerId test-worker-", 5 * SEC), 0);
	/* the output is in lessee's own log */
	ck_assert_int_eq(tu_lessee_wait_log(D, "output: hello from", 5 * SEC), 0);
	ck_assert_int_eq(tu_lessee_stop(D), 0);
}
END_TEST

/* Exit 75 retried with the engine's retries counting down, then an incident;
 * any other exit an incident at once, with the output's tail. */
START_TEST(test_failure_retries_to_incident)
{
	_cleanup_free_ char *r = create("{\"topicName\":\"retry\"}");
	_cleanup_free_ char *f = create("{\"topicName\":\"fail\"}");
	cJSON *t;

	start_lessee("[workflow.retry]\ncommand = %1$s/retry.sh\nretries = 2\nretry_backoff = 0\n"
	             "[workflow.fail]\ncommand = %1$s/fail.sh\n",
	             scripts);
	t = wait_task(r, "INCIDENT");
	ck_assert_int_eq(count_of(t, "failure"), 2); /* retries null -> 1 -> 0 */
	ck_assert_str_eq(tu_jstr(t, "errorMessage"), "exited with status 75");
	ck_assert_ptr_nonnull(strstr(tu_jstr(t, "errorDetails"), "not yet"));
	cJSON_Delete(t);
	t = wait_task(f, "INCIDENT");
	ck_assert_int_eq(count_of(t, "failure"), 1);
	ck_assert_int_eq((int)tu_jnum(t, "retries"), 0);
	ck_assert_str_eq(tu_jstr(t, "errorMessage"), "exited with status 3");
	ck_assert_str_eq(tu_jstr(t, "errorDetails"), "failing on purpose\nthe last words\n");
	cJSON_Delete(t);
	ck_assert_int_eq(tu_lessee_wait_log(D, "attempt=2", 10 * SEC), 0);
}
END_TEST

START_TEST(test_bpmn_error)
{
	_cleanup_free_ char *id = create("{\"topicName\":\"bpmn\"}");
	cJSON *t;
	const cJSON *e;

	start_lessee("[workflow.bpmn]\ncommand = %s/bpmn.sh\n", scripts);
	t = wait_task(id, "BPMN_ERROR");
	e = cJSON_GetObjectItemCaseSensitive(t, "bpmnError");
	ck_assert_str_eq(tu_jstr(e, "code"), "E_STOCK");
	ck_assert_str_eq(tu_jstr(e, "message"), "out of stock");
	cJSON_Delete(t);
}
END_TEST

START_TEST(test_timeout_and_crash)
{
	_cleanup_free_ char *slow = create("{\"topicName\":\"sleep\"}");
	_cleanup_free_ char *crash = create("{\"topicName\":\"crash\"}");
	cJSON *t;

	start_lessee(SLEEPER("\ntimeout = 1s\nretries = 1") "[workflow.crash]\ncommand = "
	                                                    "%1$s/crash.sh\nretries = 1\n",
	             scripts);
	/* retryable, but a policy of 1 retry leaves 0: an incident */
	t = wait_task(slow, "INCIDENT");
	ck_assert_str_eq(tu_jstr(t, "errorMessage"), "timed out after 1000 ms");
	cJSON_Delete(t);
	t = wait_task(crash, "INCIDENT");
	ck_assert_str_eq(tu_jstr(t, "errorMessage"), "killed by SIGSEGV");
	cJSON_Delete(t);
}
END_TEST

/* A task lessee cannot take (its variables are over max_input_bytes) is not
 * run: an incident at once, saying why. */
START_TEST(test_refused_input_is_an_incident)
{
	char big[3000];
	_cleanup_free_ char *body = NULL, *id = NULL;
	cJSON *t;

	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	body = tu_fmt("{\"topicName\":\"ok\",\"variables\":{\"big\":{\"type\":\"String\","
	              "\"value\":\"%s\"}}}",
	              big);
	id = create(body);
	start_lessee("[worker]\nmax_input_bytes = 1K\n[workflow.ok]\ncommand = %s/ok.sh\n",
	             scripts);
	t = wait_task(id, "INCIDENT");
	ck_assert_msg(strstr(tu_jstr(t, "errorMessage"), "max_input_bytes"), "%s",
	              tu_jstr(t, "errorMessage"));
	ck_assert_int_eq(count_of(t, "failure"), 1);
	cJSON_Delete(t);
	ck_assert_int_eq(tu_lessee_wait_log(D, "output: hello from", 500 * USEC_PER_MSEC),
	                 -ETIMEDOUT); /* never ran */
}
END_TEST

/* The engine refuses a result it cannot store (a variable that does not
 * convert: VariableValueDto, 400) while the task is still locked by us: not a
 * lost lock.  Dropping it would leave the task locked until lockDuration and
 * run it again and again; it becomes an incident saying why, run once. */
START_TEST(test_result_the_engine_refuses_is_an_incident)
{
	_cleanup_free_ char *id = create("{\"topicName\":\"badvar\"}");
	cJSON *t;

	write_script("badvar.sh", "echo ran >> \"$MARK_DIR/badvar.runs\"\n"
	                          "echo '{\"n\":{\"type\":\"Integer\",\"value\":\"twelve\"}}' "
	                          "> \"$LESSEE_RESULT_FILE\"");
	start_lessee("[workflow.badvar]\ncommand = %1$s/badvar.sh\nenv = MARK_DIR=%1$s\n", scripts);
	t = wait_task(id, "INCIDENT");
	ck_assert_msg(strstr(tu_jstr(t, "errorMessage"), "the engine refused the result") &&
	                  strstr(tu_jstr(t, "errorMessage"), "Cannot convert value 'twelve'"),
	              "%s", tu_jstr(t, "errorMessage"));
	ck_assert_int_eq((int)tu_jnum(t, "retries"), 0);
	ck_assert_int_eq(count_of(t, "fetched"), 1);
	ck_assert_int_eq(count_of(t, "failure"), 1);
	cJSON_Delete(t);
	ck_assert_int_eq(tu_lessee_wait_log(D, "the engine refused the result", 5 * SEC), 0);
	ck_assert_int_eq(tu_lessee_stop(D), 0);
	t = tu_camunda7_task(E, id);
	ck_assert_int_eq(count_of(t, "fetched"), 1);
	cJSON_Delete(t);
}
END_TEST

/* A String over what the engine's table stores (ACT_RU_VARIABLE.TEXT_,
 * varchar(4000)) fails the engine's insert with a 500 that no retry gets
 * past, and the task would run again after each lock: lessee says so at
 * once, an incident naming the variable, run once. */
START_TEST(test_string_over_the_column_is_an_incident)
{
	_cleanup_free_ char *id = create("{\"topicName\":\"long\"}");
	cJSON *t;

	write_script("long.sh", "printf '{\"short\":\"ok\",\"big\":\"' > \"$LESSEE_RESULT_FILE\"\n"
	                        "head -c 4001 /dev/zero | tr '\\0' x >> \"$LESSEE_RESULT_FILE\"\n"
	                        "printf '\"}' >> \"$LESSEE_RESULT_FILE\"");
	start_lessee("[workflow.long]\ncommand = %s/long.sh\n", scripts);
	t = wait_task(id, "INCIDENT");
	ck_assert_msg(strstr(tu_jstr(t, "errorMessage"), "'big'") &&
	                  strstr(tu_jstr(t, "errorMessage"), "4000"),
	              "%s", tu_jstr(t, "errorMessage"));
	ck_assert_int_eq(count_of(t, "fetched"), 1);
	ck_assert_int_eq(count_of(t, "complete"), 0);
	cJSON_Delete(t);
}
END_TEST

/* An engine without the Spin plugin has no Json type, in which lessee sends a
 * result's objects and arrays: the same incident, naming the type. */
START_TEST(test_json_without_spin_is_an_incident)
{
	_cleanup_free_ char *id = NULL;
	cJSON *t;

	tu_camunda7_stop(E);
	E = tu_camunda7_free(E);
	emu_start(&(struct tu_camunda7_opts){.no_spin = true});
	id = create("{\"topicName\":\"ok\"}");
	start_lessee("[workflow.ok]\ncommand = %s/ok.sh\n", scripts);
	t = wait_task(id, "INCIDENT");
	ck_assert_msg(strstr(tu_jstr(t, "errorMessage"), "Unsupported value type 'Json'"), "%s",
	              tu_jstr(t, "errorMessage"));
	ck_assert_int_eq(count_of(t, "fetched"), 1);
	cJSON_Delete(t);
}
END_TEST

/* ---- reload ---- */

/* A workflow added by SIGHUP is fetched from then on, and a changed
 * `variables` list goes with the next fetch (both live, configuration.md). */
START_TEST(test_reload_adds_a_topic_and_changes_variables)
{
	_cleanup_free_ char *conf = NULL, *id = NULL, *b = NULL;
	cJSON *t, *got;

	start_lessee("[workflow.ok]\ncommand = %s/ok.sh\nvariables = n\n", scripts);
	conf = tu_fmt("[api]\nprotocol = camunda7\n[workflow.ok]\ncommand = %1$s/ok.sh\n"
	              "variables = m\n[workflow.bpmn]\ncommand = %1$s/bpmn.sh\n",
	              scripts);
	ck_assert_int_eq(tu_lessee_set_conf(D, conf), 0);
	ck_assert_int_eq(tu_lessee_signal(D, SIGHUP), 0);
	ck_assert_int_eq(tu_lessee_wait_log(D, "workflow.bpmn: added", 10 * SEC), 0);
	b = create("{\"topicName\":\"bpmn\"}");
	t = wait_task(b, "BPMN_ERROR");
	cJSON_Delete(t);
	id = create("{\"topicName\":\"ok\",\"variables\":{\"n\":{\"type\":\"Integer\","
	            "\"value\":1},\"m\":{\"type\":\"Integer\",\"value\":2}}}");
	t = wait_task(id, "COMPLETED");
	got = cJSON_Parse(tu_jstr(var(t, "completeVariables", "got"), "value"));
	ck_assert_ptr_nonnull(got);
	ck_assert_int_eq((int)tu_jnum(got, "m"), 2);
	ck_assert_ptr_null(cJSON_GetObjectItemCaseSensitive(got, "n"));
	cJSON_Delete(got);
	cJSON_Delete(t);
	ck_assert_int_eq(tu_lessee_wait_log(D, "claim failed", 100 * USEC_PER_MSEC), -ETIMEDOUT);
}
END_TEST

/* ---- the lock ---- */

START_TEST(test_lock_extended_past_lock_duration)
{
	/* lease_ttl 6s = lockDuration: a 9 s run lives on extendLock */
	_cleanup_free_ char *id = create("{\"topicName\":\"sleep\"}");
	cJSON *t;

	start_lessee(SLEEPER("SLEEP=9"), scripts);
	t = wait_task(id, "COMPLETED");
	ck_assert_int_ge(count_of(t, "extendLock"), 3);
	ck_assert_int_eq(count_of(t, "fetched"), 1);
	cJSON_Delete(t);
}
END_TEST

/* The lock ran out and another worker fetched the task: lessee's next
 * extendLock is refused (400), the run is killed at once and nothing more is
 * sent about it. */
START_TEST(test_relocked_by_another_worker)
{
	_cleanup_free_ char *id = create("{\"topicName\":\"sleep\"}");
	pid_t pid;
	cJSON *t;

	start_lessee(SLEEPER(""), scripts);
	pid = wait_pid_file(id);
	ck_assert_int_eq(tu_camunda7_expire(E, id), 0);
	ck_assert_int_eq(fetch_as("other", "sleep"), 1);
	wait_dead(pid, 5 * SEC);
	ck_assert_int_eq(tu_lessee_stop(D), 0);
	t = tu_camunda7_task(E, id);
	ck_assert_str_eq(tu_jstr(t, "state"), "LOCKED");
	ck_assert_str_eq(tu_jstr(t, "workerId"), "other");
	ck_assert_int_eq(count_of(t, "complete"), 0);
	ck_assert_int_eq(count_of(t, "failure"), 0);
	ck_assert_int_eq(count_of(t, "unlock"), 0);
	cJSON_Delete(t);
}
END_TEST

START_TEST(test_cancelled_process_kills_the_run)
{
	_cleanup_free_ char *id = create("{\"topicName\":\"sleep\"}");
	pid_t pid;

	start_lessee(SLEEPER(""), scripts);
	pid = wait_pid_file(id);
	ck_assert_int_eq(tu_camunda7_cancel(E, id), 0);
	wait_dead(pid, 5 * SEC); /* the next extendLock (lease_refresh = 1s) is a 404 */
	ck_assert_int_eq(tu_lessee_stop(D), 0);
	expect_state(id, "DELETED");
}
END_TEST

/* ---- stopping ---- */

START_TEST(test_drain_finishes_runs_and_stops_fetching)
{
	_cleanup_free_ char *id = create("{\"topicName\":\"sleep\"}");
	_cleanup_free_ char *later = NULL;
	double fetches;

	start_lessee(SLEEPER("SLEEP=2"), scripts);
	wait_pid_file(id);
	ck_assert_int_eq(tu_lessee_signal(D, SIGTERM), 0);
	ck_assert_int_eq(tu_lessee_wait_log(D, "draining: no new claims", 5 * SEC), 0);
	later = create("{\"topicName\":\"sleep\"}");
	ck_assert_int_eq(tu_lessee_wait(D, 30 * SEC), 0);
	expect_state(id, "COMPLETED");
	/* a fetch open when the drain began may have locked it: given back */
	expect_state(later, "AVAILABLE");
	fetches = tu_camunda7_stat(E, "fetchAndLock");
	tu_sleep(300 * USEC_PER_MSEC); /* nothing fetches any more: the daemon is gone */
	ck_assert(tu_camunda7_stat(E, "fetchAndLock") == fetches);
}
END_TEST

/* Every lock of ours a stop gives back is unlocked once, and no unlock goes
 * to a task we do not hold (the engine would answer 404).  The fetch left
 * open at the stop is woken by our first unlock and may lock the task again
 * for us (FetchAndLockHandlerImpl): that lock is unlocked too, so the task
 * is fetched and unlocked as many times. */
static void expect_each_lock_unlocked_once(const char *id)
{
	cJSON *t = tu_camunda7_task(E, id);
	int unlocks = count_of(t, "unlock");

	if (!streq(tu_jstr(t, "state"), "AVAILABLE") || unlocks != count_of(t, "fetched") ||
	    tu_camunda7_stat(E, "unlock") != unlocks)
		tu_lessee_dump_log(D);
	ck_assert_str_eq(tu_jstr(t, "state"), "AVAILABLE");
	ck_assert_int_ge(unlocks, 1);
	ck_assert_int_eq(unlocks, count_of(t, "fetched"));
	ck_assert(tu_camunda7_stat(E, "unlock") == unlocks);
	cJSON_Delete(t);
}

START_TEST(test_hard_stop_unlocks)
{
	_cleanup_free_ char *id = create("{\"topicName\":\"sleep\"}");
	pid_t pid;

	start_lessee("[worker]\nlease_ttl = 60s\n" SLEEPER(""), scripts);
	pid = wait_pid_file(id);
	ck_assert_int_eq(tu_lessee_quit(D), 0);
	ck_assert(!tu_pid_alive(pid));
	/* unlocked: available at once, not after its 60 s lock */
	expect_each_lock_unlocked_once(id);
	ck_assert_int_eq(fetch_as("other", "sleep"), 1);
}
END_TEST

/* A run in flight, then SIGTERM: with drain_timeout over, or a second
 * SIGTERM once draining, that is a hard stop. */
static void term_with_run_in_flight(const char *worker, bool second_term)
{
	_cleanup_free_ char *id = create("{\"topicName\":\"sleep\"}");
	pid_t pid;

	start_lessee("[worker]\nlease_ttl = 60s\n%2$s\n" SLEEPER(""), scripts, worker);
	pid = wait_pid_file(id);
	ck_assert_int_eq(tu_lessee_signal(D, SIGTERM), 0);
	if (second_term) {
		ck_assert_int_eq(tu_lessee_wait_log(D, "draining: no new claims", 5 * SEC), 0);
		ck_assert_int_eq(tu_lessee_signal(D, SIGTERM), 0);
	}
	ck_assert_int_eq(tu_lessee_wait(D, 30 * SEC), 0);
	ck_assert(!tu_pid_alive(pid));
	expect_each_lock_unlocked_once(id);
}

START_TEST(test_second_term_unlocks_each_lock_once)
{
	term_with_run_in_flight("", true);
}
END_TEST

START_TEST(test_drain_timeout_unlocks_each_lock_once)
{
	term_with_run_in_flight("drain_timeout = 1s", false);
}
END_TEST

/* ---- the spool ---- */

START_TEST(test_spool_delivered_at_restart)
{
	_cleanup_free_ char *id = create("{\"topicName\":\"gate\"}");
	_cleanup_free_ char *go = tu_fmt("%s/go", scripts);
	_cleanup_free_ char *fault = tu_fmt(
	    "{\"path\":\"/engine-rest/external-task/%s/complete\",\"count\":100000,\"status\":503}",
	    id);
	cJSON *t;

	write_script("gate.sh", "echo $$ > \"$MARK_DIR/$LESSEE_RUN_ID.pid\"\n"
	                        "while [ ! -e \"$MARK_DIR/go\" ]; do sleep 0.05; done\n"
	                        "echo '{\"delivered\":\"late\"}' > \"$LESSEE_RESULT_FILE\"");
	/* a lock that outlives the restart: the spooled result's workerId holds it */
	start_lessee("[worker]\nlease_ttl = 60s\n"
	             "[workflow.gate]\ncommand = %1$s/gate.sh\nenv = MARK_DIR=%1$s\n",
	             scripts);
	wait_pid_file(id);
	ck_assert_int_eq(tu_camunda7_fault(E, fault), 0);
	ck_assert_int_eq(write_file_atomic(go, "", 0, 0644), 0);
	ck_assert_int_eq(tu_lessee_wait_log(D, "running -> ", 30 * SEC), 0);
	ck_assert_int_eq(tu_lessee_quit(D), 0); /* a hard stop spools what is undelivered */
	ck_assert_int_eq(tu_lessee_wait_log(D, "result spooled to", 5 * SEC), 0);
	expect_state(id, "LOCKED");
	{
		struct tu_http_answer a = {0};

		ck_assert_int_eq(tu_camunda7_http(E, "DELETE", "/emu/faults", NULL, NULL, &a), 0);
		tu_http_answer_done(&a);
	}
	ck_assert_int_eq(tu_lessee_restart(D), 0);
	t = wait_task(id, "COMPLETED");
	ck_assert_str_eq(tu_jstr(var(t, "completeVariables", "delivered"), "value"), "late");
	ck_assert_int_eq(count_of(t, "fetched"), 1); /* the new incarnation did not run it */
	cJSON_Delete(t);
}
END_TEST

/* ---- the breaker ---- */

START_TEST(test_breaker_leaves_a_topic_out)
{
	_cleanup_free_ char *f1 = create("{\"topicName\":\"fail\",\"count\":3}");
	_cleanup_free_ char *ok = NULL;
	cJSON *all, *e;
	long st;
	int incidents = 0, waiting = 0;

	start_lessee("[worker]\nmax_consecutive_failures = 2\nfailure_cooldown = 1h\n"
	             "failure_cooldown_max = 1h\nconcurrency = 1\n"
	             "[workflow.fail]\ncommand = %1$s/fail.sh\n"
	             "[workflow.ok]\ncommand = %1$s/ok.sh\n",
	             scripts);
	ck_assert_int_eq(tu_lessee_wait_log(D, "workflow fail failed 2 times in a row", 30 * SEC),
	                 0);
	/* the other topic is still fetched */
	ok = create("{\"topicName\":\"ok\"}");
	e = wait_task(ok, "COMPLETED");
	cJSON_Delete(e);
	all = tu_camunda7_json(E, "GET", "/emu/tasks?topicName=fail", NULL, &st);
	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(all, "tasks"))
	{
		if (streq_ptr(tu_jstr(e, "state"), "INCIDENT"))
			incidents++;
		else if (streq_ptr(tu_jstr(e, "state"), "AVAILABLE") && count_of(e, "fetched") == 0)
			waiting++;
	}
	cJSON_Delete(all);
	ck_assert_int_eq(incidents, 2);
	ck_assert_int_eq(waiting, 1);
}
END_TEST

/* ---- auth ---- */

START_TEST(test_basic_auth)
{
	_cleanup_free_ char *pw = tu_fmt("%s/pw", scripts), *id = NULL;
	cJSON *t;

	tu_camunda7_stop(E);
	E = tu_camunda7_free(E);
	emu_start(&(struct tu_camunda7_opts){.user = "lessee", .password = "s3cret"});
	ck_assert_int_eq(write_file_atomic(pw, "s3cret\n", 7, 0600), 0);
	id = create("{\"topicName\":\"ok\"}");
	start_lessee("[api]\nuser = lessee\npassword_file = %1$s/pw\n"
	             "[workflow.ok]\ncommand = %1$s/ok.sh\n",
	             scripts);
	t = wait_task(id, "COMPLETED");
	cJSON_Delete(t);
}
END_TEST

START_TEST(test_basic_auth_refused)
{
	_cleanup_free_ char *pw = tu_fmt("%s/pw", scripts), *id = NULL;

	tu_camunda7_stop(E);
	E = tu_camunda7_free(E);
	emu_start(&(struct tu_camunda7_opts){.user = "lessee", .password = "s3cret"});
	ck_assert_int_eq(write_file_atomic(pw, "wrong\n", 6, 0600), 0);
	id = create("{\"topicName\":\"ok\"}");
	start_lessee("[api]\nuser = lessee\npassword_file = %1$s/pw\n"
	             "[workflow.ok]\ncommand = %1$s/ok.sh\n",
	             scripts);
	ck_assert_int_eq(tu_lessee_wait_log(D, "API refuses our credentials", 30 * SEC), 0);
	expect_state(id, "AVAILABLE");
}
END_TEST

/* worker.prefetch with one slot: while a runs, b is fetched and locked ahead
 * of a free slot; no slot frees within prefetch_hold, so b is unlocked for
 * another worker (once: nothing more is locked ahead while the slot stays
 * busy), and runs here when a has ended. */
START_TEST(test_prefetch_locks_ahead_and_gives_back)
{
	_cleanup_free_ char *a = create("{\"topicName\":\"sleep\"}"), *b = NULL;
	cJSON *t;

	start_lessee("[worker]\nconcurrency = 1\nprefetch = 1\nprefetch_hold = 300ms\n" SLEEPER(
	                 "SLEEP=3") "[workflow.ok]\ncommand = %1$s/ok.sh\n",
	             scripts);
	wait_pid_file(a);
	b = create("{\"topicName\":\"ok\"}");
	ck_assert_int_eq(
	    tu_lessee_wait_log(D, "no slot came free within prefetch_hold", tu_timeout(20 * SEC)),
	    0);
	cJSON_Delete(wait_task(b, "AVAILABLE"));
	t = wait_task(b, "COMPLETED");
	ck_assert_int_eq(count_of(t, "unlock"), 1);
	ck_assert_int_eq(count_of(t, "complete"), 1);
	cJSON_Delete(t);
	cJSON_Delete(wait_task(a, "COMPLETED"));
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
	Suite *s = suite_create("camunda7");

	ADD(s, success);
	ADD(s, failure_retries_to_incident);
	ADD(s, bpmn_error);
	ADD(s, timeout_and_crash);
	ADD(s, refused_input_is_an_incident);
	ADD(s, result_the_engine_refuses_is_an_incident);
	ADD(s, json_without_spin_is_an_incident);
	ADD(s, string_over_the_column_is_an_incident);
	ADD(s, reload_adds_a_topic_and_changes_variables);
	ADD(s, lock_extended_past_lock_duration);
	ADD(s, relocked_by_another_worker);
	ADD(s, cancelled_process_kills_the_run);
	ADD(s, drain_finishes_runs_and_stops_fetching);
	ADD(s, hard_stop_unlocks);
	ADD(s, second_term_unlocks_each_lock_once);
	ADD(s, drain_timeout_unlocks_each_lock_once);
	ADD(s, prefetch_locks_ahead_and_gives_back);
	ADD(s, spool_delivered_at_restart);
	ADD(s, breaker_leaves_a_topic_out);
	ADD(s, basic_auth);
	ADD(s, basic_auth_refused);
	return tu_run(s);
}
