/* Run semantics an operator controls (issue 14): max_timeout caps the run's
 * own timeout, exit 75 is a retry (not a breaker failure), per-workflow
 * concurrency within the worker's slots, and one end-of-run log line with
 * every field.  Real lessor, real daemon, real children, both loop backends. */
#include <cJSON.h>
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lessee_proc.h"
#include "lessor_proc.h"
#include "promparse.h"
#include "test_httpd.h"
#include "jsonutil.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"

#define SEC USEC_PER_SEC

static struct tu_lessor *L;
static struct tu_lessee *D;
static char *scripts;

static void write_script(const char *name, const char *body)
{
	char path[512];
	_cleanup_free_ char *text = NULL;

	snprintf(path, sizeof(path), "%s/%s", scripts, name);
	ck_assert_int_ge(asprintf(&text, "#!/bin/sh\n%s\n", body), 0);
	ck_assert_int_eq(write_file_atomic(path, text, strlen(text), 0755), 0);
}

static void setup(void)
{
	_cleanup_free_ char *ledger = NULL;

	scripts = tu_tmpdir("semantics");
	ck_assert_ptr_nonnull(scripts);
	write_script("sleeper.sh", "echo pid=$$\nexec sleep 1000");
	write_script("retry.sh",
	             "read -r line\ncase \"$line\" in *retry*) exit 75;; esac\necho ok");
	write_script("fail.sh", "echo three-bytes-and-more\nexit 3");
	write_script("crash.sh", "kill -SEGV $$");
	/* the ledger: a second run inside the lock at once is an overlap */
	ck_assert_int_ge(
	    asprintf(&ledger,
	             "exec 9>>\"%1$s/ledger.lock\"\n"
	             "if ! flock -n 9; then echo overlap >> \"%1$s/overlaps\"; exit 1; fi\n"
	             "echo \"start $LESSEE_RUN_ID\" >> \"%1$s/ledger\"\n"
	             "sleep 0.4\n"
	             "echo \"end $LESSEE_RUN_ID\" >> \"%1$s/ledger\"",
	             scripts),
	    0);
	write_script("ledger.sh", ledger);
	ck_assert_int_eq(tu_lessor_start(&(struct tu_lessor_opts){.token = "t0ken-for-tests"}, &L),
	                 0);
}

static void teardown(void)
{
	int st = D ? tu_lessee_quit(D) : 0;
	int ls = L ? tu_lessor_stop(L) : 0;

	D = tu_lessee_free(D);
	L = tu_lessor_free(L);
	if (scripts)
		rm_rf(scripts);
	free(scripts);
	scripts = NULL;
	ck_assert_msg(st == 0 || st == 128 + SIGKILL, "lessee exited with %d", st);
	ck_assert_msg(ls == 0, "lessor exited with %d", ls);
}

static void start_lessee(const char *fmt)
{
	_cleanup_free_ char *conf = NULL;

	ck_assert_int_ge(asprintf(&conf, fmt, scripts), 0);
	ck_assert_int_eq(tu_lessee_start(&(struct tu_lessee_opts){.lessor = L, .conf = conf}, &D),
	                 0);
}

static char *enqueue(const char *workflow, const char *extra_json)
{
	char *id = tu_lessor_enqueue_wf(L, workflow, extra_json);

	ck_assert_ptr_nonnull(id);
	return id;
}

static void wait_status(const char *id, const char *status, usec_t timeout)
{
	ck_assert_msg(tu_lessor_wait_status(L, id, status, timeout) == 0,
	              "run %s did not reach status %s", id, status);
}

static prom_doc_t *scrape(void)
{
	_cleanup_free_ char *text = NULL, *err = NULL;
	long status = 0;
	prom_doc_t *doc = NULL;

	text = tu_lessee_status_get(D, "/metrics", &status);
	ck_assert_ptr_nonnull(text);
	ck_assert_int_eq(status, 200);
	ck_assert_msg(prom_parse(text, strlen(text), &doc, &err) == 0, "metrics: %s", err);
	return doc;
}

/* The daemon's log line holding needle (free it), waiting for it. */
static char *log_line(const char *needle)
{
	_cleanup_free_ char *log = NULL;
	const char *p, *b, *e;

	ck_assert_msg(tu_lessee_wait_log(D, needle, tu_timeout(15 * SEC)) == 0,
	              "no log line with %s", needle);
	log = tu_lessee_log(D);
	p = strstr(log, needle);
	ck_assert_ptr_nonnull(p);
	for (b = p; b > log && b[-1] != '\n'; b--)
		;
	e = strchrnul(p, '\n');
	return strndup(b, (size_t)(e - b));
}

static void assert_has(const char *line, const char *what)
{
	ck_assert_msg(strstr(line, what), "'%s' not in: %s", what, line);
}

/* ---------------------------------------------------------------- tests */

/* The API asks for an hour; the operator's cap is 2 s: killed at ~2 s, and the
 * cap is logged. */
START_TEST(test_max_timeout_caps_run_timeout)
{
	_cleanup_free_ char *id = NULL;
	cJSON *run;
	long long started, finished;

	start_lessee("[worker]\nmax_timeout = 2s\n"
	             "[workflow.sleeper]\ncommand = %s/sleeper.sh\n");
	id = enqueue("sleeper", "\"timeout_s\":3600,\"max_attempts\":1");
	wait_status(id, "failed", 15 * SEC);
	run = tu_lessor_get_run(L, id);
	ck_assert_str_eq(tu_jstr(run, "reason"), "timeout");
	started = tu_rfc3339_ms(tu_jstr(run, "started_at"));
	finished = tu_rfc3339_ms(tu_jstr(run, "finished_at"));
	ck_assert_msg(finished - started >= 1800 && finished - started < 6000,
	              "ran %lld ms with max_timeout = 2s", finished - started);
	cJSON_Delete(run);
	ck_assert_int_eq(tu_lessee_wait_log(D, "capped by max_timeout", 5 * SEC), 0);
}
END_TEST

/* A workflow's own max_timeout wins over the worker's. */
START_TEST(test_workflow_max_timeout)
{
	_cleanup_free_ char *id = NULL;
	cJSON *run;
	long long started, finished;

	start_lessee("[worker]\nmax_timeout = 1h\n"
	             "[workflow.sleeper]\ncommand = %s/sleeper.sh\nmax_timeout = 1s\n");
	id = enqueue("sleeper", "\"timeout_s\":600,\"max_attempts\":1");
	wait_status(id, "failed", 15 * SEC);
	run = tu_lessor_get_run(L, id);
	ck_assert_str_eq(tu_jstr(run, "reason"), "timeout");
	started = tu_rfc3339_ms(tu_jstr(run, "started_at"));
	finished = tu_rfc3339_ms(tu_jstr(run, "finished_at"));
	ck_assert_msg(finished - started < 5000, "ran %lld ms with max_timeout = 1s",
	              finished - started);
	cJSON_Delete(run);
}
END_TEST

/* Exit 75 asks for a retry: three in a row with max_consecutive_failures = 2
 * open no breaker (a success of the same workflow is claimed at once, with a
 * one-hour cooldown that would hold it), and they are counted as `retry`. */
START_TEST(test_exit75_is_not_a_breaker_failure)
{
	char *ids[3];
	_cleanup_free_ char *ok = NULL;
	prom_doc_t *doc;

	start_lessee("[worker]\nmax_consecutive_failures = 2\nfailure_cooldown = 1h\n"
	             "failure_cooldown_max = 1h\n"
	             "[status]\nlisten = 127.0.0.1:0\n"
	             "[workflow.retry]\ncommand = %s/retry.sh\n");
	for (int i = 0; i < 3; i++) {
		ids[i] = enqueue("retry", "\"input\":\"retry\",\"max_attempts\":1");
		wait_status(ids[i], "failed", 20 * SEC);
	}
	ok = enqueue("retry", "\"input\":\"fine\",\"max_attempts\":1");
	wait_status(ok, "succeeded", 10 * SEC);
	{
		_cleanup_free_ char *log = tu_lessee_log(D);

		ck_assert_ptr_null(strstr(log, "times in a row"));
		ck_assert_ptr_nonnull(strstr(log, "finished: retry, exit status 75"));
		ck_assert_ptr_nonnull(strstr(log, " outcome=retry exit_code=75"));
	}
	tu_sleep(300 * USEC_PER_MSEC); /* the last report's bookkeeping */
	doc = scrape();
	ck_assert_double_eq(prom_value(doc, "lessee_runs_finished_total", "workflow", "retry",
	                               "outcome", "retry", NULL),
	                    3);
	ck_assert_double_eq(prom_value(doc, "lessee_runs_finished_total", "workflow", "retry",
	                               "outcome", "succeeded", NULL),
	                    1);
	prom_free(doc);
	for (int i = 0; i < 3; i++)
		free(ids[i]);
}
END_TEST

/* workflow.ledger.concurrency = 1 in a worker of 4 slots: never two ledger runs
 * at once, while another workflow still uses the other slots. */
START_TEST(test_workflow_concurrency)
{
	char *ids[6], *sl[2];
	_cleanup_free_ char *overlaps = NULL, *ledger = NULL, *path = NULL;
	size_t len = 0;
	int starts = 0;

	start_lessee("[worker]\nconcurrency = 4\n"
	             "[workflow.ledger]\ncommand = %1$s/ledger.sh\nconcurrency = 1\n"
	             "[workflow.sleeper]\ncommand = %1$s/sleeper.sh\n");
	for (int i = 0; i < 6; i++)
		ids[i] = enqueue("ledger", "\"max_attempts\":1");
	sl[0] = enqueue("sleeper", NULL);
	sl[1] = enqueue("sleeper", NULL);
	wait_status(sl[0], "running", 10 * SEC);
	wait_status(sl[1], "running", 10 * SEC);
	for (int i = 0; i < 6; i++)
		wait_status(ids[i], "succeeded", 30 * SEC);
	ck_assert_int_ge(asprintf(&path, "%s/overlaps", scripts), 0);
	ck_assert_int_eq(read_file_capped(path, 4096, &overlaps, &len), -ENOENT);
	free(path);
	ck_assert_int_ge(asprintf(&path, "%s/ledger", scripts), 0);
	ck_assert_int_eq(read_file_capped(path, 1 << 20, &ledger, &len), 0);
	for (const char *p = ledger; (p = strstr(p, "start ")); p++)
		starts++;
	ck_assert_int_eq(starts, 6);
	for (int i = 0; i < 6; i++)
		free(ids[i]);
	free(sl[0]);
	free(sl[1]);
}
END_TEST

/* An API that hands more runs of a workflow than its concurrency (lessor never
 * does: a scripted server): the surplus is released unstarted, reason
 * blocked_workflow, and the claim after leaves the workflow out. */
START_TEST(test_workflow_concurrency_surplus_released)
{
	static const char answer[] = "{\"runs\":["
	                             "{\"id\":\"r-1\",\"workflow\":\"ledger\",\"attempt\":1,"
	                             "\"lease\":{\"token\":\"t1\",\"ttl_s\":60},\"input\":{}},"
	                             "{\"id\":\"r-2\",\"workflow\":\"ledger\",\"attempt\":1,"
	                             "\"lease\":{\"token\":\"t2\",\"ttl_s\":60},\"input\":{}}]}";
	struct test_httpd *h = NULL;
	_cleanup_free_ char *files = tu_tmpdir("surplus"), *path = NULL, *url = NULL, *conf = NULL,
	                    *log = NULL;

	ck_assert_ptr_nonnull(files);
	ck_assert_int_ge(asprintf(&path, "%s/v1_claims", files), 0);
	ck_assert_int_eq(write_file_atomic(path, answer, strlen(answer), 0644), 0);
	ck_assert_int_eq(test_httpd_start(&(struct test_httpd_opts){.files_dir = files}, &h), 0);
	url = test_httpd_url(h, "%s", "");
	ck_assert_int_ge(asprintf(&conf,
	                          "[api]\nurl = %s\n[worker]\nconcurrency = 4\n"
	                          "[workflow.ledger]\ncommand = %s/sleeper.sh\nconcurrency = 1\n",
	                          url, scripts),
	                 0);
	ck_assert_int_eq(tu_lessee_start(&(struct tu_lessee_opts){.lessor = L, .conf = conf}, &D),
	                 0);
	ck_assert_int_eq(tu_lessee_wait_log(D, "releasing the run unstarted (blocked_workflow)",
	                                    tu_timeout(10 * SEC)),
	                 0);
	log = tu_lessee_log(D);
	for (const char *p = log; *p;) {
		const char *eol = strchrnul(p, '\n');
		_cleanup_free_ char *line = strndup(p, (size_t)(eol - p));

		if (strstr(line, "releasing the run unstarted (blocked_workflow)"))
			assert_has(line, "run_id=r-2");
		if (strstr(line, "-> running"))
			assert_has(line, "run_id=r-1");
		p = *eol ? eol + 1 : eol;
	}
	ck_assert_ptr_nonnull(strstr(log, "claimed -> running (start: pid"));
	ck_assert_int_eq(tu_lessee_quit(D), 0);
	D = tu_lessee_free(D);
	test_httpd_stop(h);
	rm_rf(files);
}
END_TEST

/* The run's end is one line: outcome, exit code or signal, duration, pid, log
 * bytes, attempt. */
START_TEST(test_end_line_logfmt)
{
	_cleanup_free_ char *fail = NULL, *crash = NULL, *line = NULL;

	start_lessee("[workflow.fail]\ncommand = %1$s/fail.sh\n"
	             "[workflow.crash]\ncommand = %1$s/crash.sh\n");
	fail = enqueue("fail", "\"max_attempts\":1");
	wait_status(fail, "failed", 15 * SEC);
	line = log_line("finished: failed");
	assert_has(line, fail);
	assert_has(line, " outcome=failed");
	assert_has(line, " exit_code=3");
	assert_has(line, " duration_ms=");
	assert_has(line, " pid=");
	assert_has(line, " log_bytes=21");
	assert_has(line, " attempt=1");
	ck_assert_ptr_null(strstr(line, "signal="));
	free(line);
	crash = enqueue("crash", "\"max_attempts\":1");
	wait_status(crash, "failed", 15 * SEC);
	line = log_line("finished: crash");
	assert_has(line, crash);
	assert_has(line, " outcome=crash");
	assert_has(line, " signal=SIGSEGV");
	ck_assert_ptr_null(strstr(line, "exit_code="));
}
END_TEST

START_TEST(test_end_line_json)
{
	_cleanup_free_ char *fail = NULL, *line = NULL;
	cJSON *j;

	start_lessee("[log]\nformat = json\n[workflow.fail]\ncommand = %1$s/fail.sh\n");
	fail = enqueue("fail", "\"max_attempts\":1");
	wait_status(fail, "failed", 15 * SEC);
	line = log_line("finished: failed");
	j = cJSON_Parse(line);
	ck_assert_msg(j, "not JSON: %s", line);
	ck_assert_str_eq(tu_jstr(j, "run_id"), fail);
	ck_assert_str_eq(tu_jstr(j, "outcome"), "failed");
	ck_assert(cJSON_IsNumber(cJSON_GetObjectItem(j, "exit_code")));
	ck_assert_int_eq(cJSON_GetObjectItem(j, "exit_code")->valueint, 3);
	ck_assert(cJSON_IsNumber(cJSON_GetObjectItem(j, "duration_ms")));
	ck_assert(cJSON_IsNumber(cJSON_GetObjectItem(j, "pid")));
	ck_assert_int_gt(cJSON_GetObjectItem(j, "pid")->valueint, 1);
	ck_assert(cJSON_IsNumber(cJSON_GetObjectItem(j, "log_bytes")));
	ck_assert_int_eq(cJSON_GetObjectItem(j, "log_bytes")->valueint, 21);
	ck_assert(cJSON_GetObjectItem(j, "attempt") != NULL);
	cJSON_Delete(j);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("run_semantics");
	TCase *tc = tcase_create("e2e");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_max_timeout_caps_run_timeout);
	tcase_add_test(tc, test_workflow_max_timeout);
	tcase_add_test(tc, test_exit75_is_not_a_breaker_failure);
	tcase_add_test(tc, test_workflow_concurrency);
	tcase_add_test(tc, test_workflow_concurrency_surplus_released);
	tcase_add_test(tc, test_end_line_logfmt);
	tcase_add_test(tc, test_end_line_json);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
