/* A slot is held only while the run's child lives (issue 15), against a real
 * lessor whose answer to one completion is delayed (--enable-faults): with
 * one slot, the next run is claimed, run and reported while the first run's
 * completion is still in flight; /status shows that run in the reporting
 * queue, outside the slots; and a drain still waits for that completion and
 * delivers it before the daemon exits. */
#include <cJSON.h>
#include <check.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "jsonutil.h"
#include "lessee_proc.h"
#include "lessor_proc.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"

#define SEC USEC_PER_SEC

static struct tu_lessor *L;
static struct tu_lessee *D;

static void setup(void)
{
	static char *const args[] = {"--enable-faults", NULL};

	ck_assert_int_eq(tu_lessor_start(&(struct tu_lessor_opts){.args = args}, &L), 0);
}

static void teardown(void)
{
	D = tu_lessee_free(D);
	if (L && tu_lessor_pid(L) > 0)
		ck_assert_int_eq(tu_lessor_stop(L), 0);
	L = tu_lessor_free(L);
}

/* The run's status at lessor now (free it). */
static char *run_status(const char *id)
{
	cJSON *o = tu_lessor_get_run(L, id);
	char *s;

	ck_assert_ptr_nonnull(o);
	s = strdup(tu_jstr(o, "status") ? tu_jstr(o, "status") : "?");
	cJSON_Delete(o);
	return s;
}

START_TEST(test_next_run_while_reporting)
{
	_cleanup_free_ char *a = NULL, *b = NULL, *st = NULL, *body = NULL;
	cJSON *doc, *runs;
	long status = 0;

	/* the first completion is answered 3 s late (the daemon waits up to 10 s) */
	ck_assert_int_eq(tu_lessor_json(L, "POST", "/v1/admin/faults",
	                                 "{\"endpoint\":\"complete\",\"count\":1,\"delay_ms\":3000}",
	                                 &status, NULL),
	                 0);
	ck_assert_int_eq(status, 200);
	a = tu_lessor_enqueue(L, "{\"workflow\":\"ok\",\"max_attempts\":1}");
	b = tu_lessor_enqueue(L, "{\"workflow\":\"ok\",\"max_attempts\":1}");
	ck_assert_ptr_nonnull(a);
	ck_assert_ptr_nonnull(b);
	ck_assert_int_eq(tu_lessee_start(&(struct tu_lessee_opts){
	                                     .lessor = L,
	                                     .conf = "[api]\nrequest_timeout = 10s\n"
	                                             "[worker]\nconcurrency = 1\n"
	                                             "[status]\nlisten = 127.0.0.1:0\n"
	                                             "[workflow.ok]\ncommand = /bin/true\n"},
	                                 &D),
	                 0);
	/* b came after a, through the one slot, and is done... */
	ck_assert_int_eq(tu_lessor_wait_status(L, b, "succeeded", tu_timeout(10 * SEC)), 0);
	/* ...while a's completion is still on its way: a held no slot meanwhile */
	st = run_status(a);
	ck_assert_msg(!streq(st, "succeeded"),
	              "the second run was claimed only after the first one's completion");
	body = tu_lessee_status_get(D, "/status", &status);
	ck_assert_ptr_nonnull(body);
	ck_assert_int_eq(status, 200);
	doc = cJSON_Parse(body);
	ck_assert_ptr_nonnull(doc);
	ck_assert_double_eq(tu_jnum(doc, "slots"), 1);
	ck_assert_double_eq(tu_jnum(doc, "slots_busy"), 0);
	ck_assert_double_eq(tu_jnum(doc, "reporting"), 1);
	ck_assert_double_eq(tu_jnum(doc, "max_reporting"), 2);
	runs = cJSON_GetObjectItemCaseSensitive(doc, "runs");
	ck_assert_int_eq(cJSON_GetArraySize(runs), 1);
	ck_assert_str_eq(tu_jstr(cJSON_GetArrayItem(runs, 0), "id"), a);
	ck_assert_str_eq(tu_jstr(cJSON_GetArrayItem(runs, 0), "state"), "reporting");
	cJSON_Delete(doc);
	/* a drain waits for the reporting run and delivers its result */
	ck_assert_int_eq(tu_lessee_signal(D, SIGTERM), 0);
	ck_assert_int_eq(tu_lessee_wait(D, tu_timeout(30 * SEC)), 0);
	free(st);
	st = run_status(a);
	ck_assert_str_eq(st, "succeeded");
	ck_assert_int_eq(tu_lessee_wait_log(D, "drain done after 2 runs", 0), 0);
}
END_TEST

/* 16 slots of a healthy workflow: more runs are flushing at once than the
 * breaker's threshold (3), and none of them failed: claims go on, no run is
 * given back as if the workflow were blocked, and the claims a completion
 * carries (naming no held leases) do not make the daemon think the API lost
 * its cancel events. */
START_TEST(test_busy_healthy_workflow_not_held)
{
	char *ids[200];
	_cleanup_free_ char *log = NULL;

	for (int i = 0; i < 200; i++) {
		ids[i] = tu_lessor_enqueue(L, "{\"workflow\":\"ok\",\"max_attempts\":1}");
		ck_assert_ptr_nonnull(ids[i]);
	}
	ck_assert_int_eq(
	    tu_lessee_start(&(struct tu_lessee_opts){.lessor = L,
	                                             .conf =
	                                                 "[worker]\nconcurrency = 16\n"
	                                                 "[workflow.ok]\ncommand = /bin/true\n"},
	                    &D),
	    0);
	for (int i = 0; i < 200; i++) {
		ck_assert_int_eq(
		    tu_lessor_wait_status(L, ids[i], "succeeded", tu_timeout(60 * SEC)), 0);
		free(ids[i]);
	}
	log = tu_lessee_log(D);
	ck_assert_ptr_nonnull(log);
	ck_assert_msg(!strstr(log, "(blocked_workflow)"), "runs given back as blocked");
	ck_assert_msg(!strstr(log, "no longer delivers cancel events"),
	              "cancel events thought lost");
}
END_TEST

/* A completion the API refuses for good (a 422: resending cannot help) is
 * dropped; the run's own outcome is still counted, and so is the loss of its
 * result, apart, for an alert: nothing else says the orchestrator never got it. */
START_TEST(test_refused_result_counted)
{
	_cleanup_free_ char *a = NULL;
	long status = 0;

	ck_assert_int_eq(tu_lessor_json(L, "POST", "/v1/admin/faults",
	                                "{\"endpoint\":\"complete\",\"count\":1,\"status\":422}",
	                                &status, NULL),
	                 0);
	ck_assert_int_eq(status, 200);
	a = tu_lessor_enqueue(L, "{\"workflow\":\"ok\",\"max_attempts\":1}");
	ck_assert_ptr_nonnull(a);
	ck_assert_int_eq(
	    tu_lessee_start(&(struct tu_lessee_opts){.lessor = L,
	                                             .conf =
	                                                 "[worker]\nconcurrency = 1\n"
	                                                 "[status]\nlisten = 127.0.0.1:0\n"
	                                                 "[workflow.ok]\ncommand = /bin/true\n"},
	                    &D),
	    0);
	ck_assert_int_eq(tu_lessee_wait_log(D, "finished: succeeded", tu_timeout(10 * SEC)), 0);
	ck_assert_int_eq(tu_lessee_wait_log(D, "the API refused the result for good", 0), 0);
	ck_assert_double_eq(
	    tu_lessee_metric(D, "lessee_runs_finished_total", "outcome", "succeeded"), 1);
	ck_assert_double_eq(tu_lessee_metric(D, "lessee_results_refused_total", "workflow", "ok"),
	                    1);
	/* the end line says what became of the result */
	ck_assert_int_eq(tu_lessee_wait_log(D, "result refused", 0), 0);
}
END_TEST

/* The API's log cap is below the workflow's max_log_bytes: the API answers
 * 413 and keeps what fit; shipping stops, the run goes on and succeeds, and
 * the daemon says why the rest of the output is not in the log. */
START_TEST(test_api_log_cap_said)
{
	static char *const args[] = {"--max-log-bytes", "1K", NULL};
	_cleanup_free_ char *a = NULL;

	tu_lessor_stop(L);
	L = tu_lessor_free(L);
	ck_assert_int_eq(tu_lessor_start(&(struct tu_lessor_opts){.args = args}, &L), 0);
	a = tu_lessor_enqueue(L, "{\"workflow\":\"chatty\",\"max_attempts\":1}");
	ck_assert_ptr_nonnull(a);
	ck_assert_int_eq(
	    tu_lessee_start(&(struct tu_lessee_opts){.lessor = L,
	                                             .conf = "[worker]\nconcurrency = 1\n"
	                                                     "[workflow.chatty]\n"
	                                                     "command = /bin/sh -c 'seq 1 5000'\n"
	                                                     "max_log_bytes = 8K\n"},
	                    &D),
	    0);
	ck_assert_int_eq(tu_lessor_wait_status(L, a, "succeeded", tu_timeout(10 * SEC)), 0);
	ck_assert_int_eq(tu_lessee_wait_log(D, "finished: succeeded", tu_timeout(10 * SEC)), 0);
	ck_assert_int_eq(tu_lessee_wait_log(D, "the API keeps no more of this run's log", 0), 0);
}
END_TEST

/* A hard stop kills a running run and gives it back: what it wrote up to
 * then is shipped before the release, and a marker line ends it, so the log
 * of an execution that was stopped is never cut silently (the bytes still in
 * the daemon's buffer were dropped with the release). */
START_TEST(test_hard_stop_ships_the_log_and_marks_it)
{
	_cleanup_free_ char *dir = tu_tmpdir("hardstop"), *written = NULL, *conf = NULL;
	_cleanup_free_ char *a = NULL, *log = NULL, *text = NULL;
	size_t len = 0, text_len = 0, lines = 0;
	usec_t until;

	ck_assert_ptr_nonnull(dir);
	written = tu_fmt("%s/written", dir);
	/* each line to stdout first, then to the file: a line in the file was
	 * written to the run's output before it */
	conf = tu_fmt("[worker]\nconcurrency = 1\nkill_grace = 1s\n"
	              "[workflow.chatty]\ncommand = /bin/sh -c 'i=0; while :; do i=$((i+1)); "
	              "echo \"line $i\"; echo \"line $i\" >> %s; sleep 0.02; done'\n",
	              written);
	a = tu_lessor_enqueue(L, "{\"workflow\":\"chatty\",\"max_attempts\":1}");
	ck_assert_ptr_nonnull(a);
	ck_assert_int_eq(tu_lessee_start(&(struct tu_lessee_opts){.lessor = L, .conf = conf}, &D),
	                 0);
	until = time_mono() + tu_timeout(20 * SEC);
	while (lines < 30 && time_mono() < until) { /* the file is the event */
		free(text);
		text = NULL;
		lines = 0;
		if (read_file_capped(written, 1 << 20, &text, &text_len) == 0)
			for (const char *p = text; (p = strchr(p, '\n')); p++)
				lines++;
		tu_sleep(20 * USEC_PER_MSEC);
	}
	ck_assert_uint_ge(lines, 30);
	ck_assert_int_eq(tu_lessee_signal(D, SIGQUIT), 0);
	ck_assert_int_eq(tu_lessee_wait(D, tu_timeout(30 * SEC)), 0);
	free(text);
	text = NULL;
	ck_assert_int_eq(read_file_capped(written, 1 << 20, &text, &text_len), 0);
	log = tu_lessor_run_log(L, a, &len);
	ck_assert_ptr_nonnull(log);
	/* every line the run wrote is in the log, in order, then the marker */
	ck_assert_msg(len >= text_len && memcmp(log, text, text_len) == 0,
	              "the log (%zu bytes) lacks what the run wrote (%zu bytes)", len, text_len);
	ck_assert_msg(
	    strstr(log + text_len, "[lessee: execution stopped: the worker is shutting down"),
	    "no marker after the output: %s", log + text_len);
	rm_rf(dir);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("reporting");
	TCase *tc = tcase_create("reporting");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 90);
	tcase_add_test(tc, test_next_run_while_reporting);
	tcase_add_test(tc, test_busy_healthy_workflow_not_held);
	tcase_add_test(tc, test_refused_result_counted);
	tcase_add_test(tc, test_api_log_cap_said);
	tcase_add_test(tc, test_hard_stop_ships_the_log_and_marks_it);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
