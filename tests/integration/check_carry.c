/* A completion carries the claim for the slot it frees (issue 15, protocol v1
 * "next", docs/protocol.md), against a real lessor: with one slot the runs go
 * through without a claim of their own; a server that does not know "next"
 * (lessor's legacy fault) gets the usual claims; a completion whose answer is
 * lost has its claim asked again with the same claim id, so the run granted
 * to it comes to us before its lease would expire; and a drain gives back
 * what a carried claim brings. */
#include <cJSON.h>
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonutil.h"
#include "lessee_proc.h"
#include "lessor_proc.h"
#include "testutil.h"
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

static char *enqueue(void)
{
	char *id = tu_lessor_enqueue(L, "{\"workflow\":\"ok\",\"max_attempts\":1}");

	ck_assert_ptr_nonnull(id);
	return id;
}

static void start_lessee_with(const char *api_extra, const char *worker_extra, const char *command)
{
	char conf[512];

	snprintf(conf, sizeof(conf),
	         "[api]\n%s"
	         "[worker]\nconcurrency = 1\nlease_ttl = 60s\n%s"
	         "[status]\nlisten = 127.0.0.1:0\n"
	         "[workflow.ok]\ncommand = %s\n",
	         api_extra, worker_extra, command);
	ck_assert_int_eq(tu_lessee_start(&(struct tu_lessee_opts){.lessor = L, .conf = conf}, &D),
	                 0);
}

static void start_lessee(const char *api_extra, const char *worker_extra)
{
	start_lessee_with(api_extra, worker_extra, "/bin/true");
}

/* lessee_api_requests_total of one endpoint, any code. */
static double requests(const char *endpoint)
{
	return tu_lessee_metric(D, "lessee_api_requests_total", "endpoint", endpoint);
}

static cJSON *run_of(const char *id)
{
	cJSON *o = tu_lessor_get_run(L, id);

	ck_assert_ptr_nonnull(o);
	return o;
}

#define RUNS 30

/* One slot, RUNS runs queued: each completion brings the next run, so the
 * daemon sends only the claims that found nothing (the first, the last); and
 * the claim for cancels only that stays open while the slot is busy is not
 * given up at each run (it was: a connection opened and closed on both sides
 * per run, the API left holding a parked request). */
START_TEST(test_completions_carry_claims)
{
	char *ids[RUNS];
	double claims, completes, aborted;
	/* Under valgrind a completion's answer can outlast the carry patience
	 * (25 ms): a claim ahead then takes the slot and the carried run goes
	 * back unstarted, one claim more each time (stop 22's note).  Without
	 * carrying there would be one claim per run either way. */
	double bound = tu_wrapped() ? RUNS / 3 : 5;

	for (int i = 0; i < RUNS; i++)
		ids[i] = enqueue();
	start_lessee("", "");
	for (int i = 0; i < RUNS; i++) {
		ck_assert_int_eq(
		    tu_lessor_wait_status(L, ids[i], "succeeded", tu_timeout(30 * SEC)), 0);
		free(ids[i]);
	}
	/* with one slot each completion is alone in its request */
	completes = requests("complete") + requests("completions");
	claims = requests("claims");
	aborted = tu_lessee_metric(D, "lessee_api_requests_total", "code", "aborted");
	if (claims > bound || aborted > 3)
		tu_lessee_dump_log(D);
	ck_assert_double_eq(completes, RUNS);
	ck_assert_msg(claims <= bound, "%.0f claims for %d runs: completions carried no claim",
	              claims, RUNS);
	ck_assert_msg(aborted <= 3, "%.0f requests given up for %d runs", aborted, RUNS);
}
END_TEST

/* A server that ignores "next" (lessor's legacy fault): nothing is claimed by
 * a completion, the daemon says so once and claims apart. */
START_TEST(test_older_server_gets_claims)
{
	char *ids[10];

	ck_assert_int_eq(
	    tu_lessor_fault(L, "{\"endpoint\":\"claims\",\"legacy\":true,\"count\":100000}"), 0);
	for (int i = 0; i < 10; i++)
		ids[i] = enqueue();
	start_lessee("", "");
	for (int i = 0; i < 10; i++) {
		ck_assert_int_eq(
		    tu_lessor_wait_status(L, ids[i], "succeeded", tu_timeout(30 * SEC)), 0);
		free(ids[i]);
	}
	ck_assert_int_eq(tu_lessee_wait_log(D, "does not take claims in completions", 0), 0);
	ck_assert(requests("claims") >= 10);
}
END_TEST

/* The completion that carries the claim is handled, the next run granted to
 * its claim, and the answer lost on the way back (lessor's lose_answer
 * fault): the claim is asked again with its claim id and brings that run,
 * long before its 60 s lease would expire and put it back in the queue. */
START_TEST(test_lost_answer_claim_asked_again)
{
	_cleanup_free_ char *a = NULL, *b = NULL;
	cJSON *o;

	ck_assert_int_eq(
	    tu_lessor_fault(L, "{\"endpoint\":\"complete\",\"lose_answer\":true,\"count\":1}"), 0);
	a = enqueue();
	b = enqueue();
	start_lessee("", "");
	ck_assert_int_eq(tu_lessor_wait_status(L, a, "succeeded", tu_timeout(20 * SEC)), 0);
	ck_assert_int_eq(tu_lessor_wait_status(L, b, "succeeded", tu_timeout(20 * SEC)), 0);
	o = run_of(b);
	ck_assert_double_eq(tu_jnum(o, "attempt"), 1);
	cJSON_Delete(o);
	ck_assert_int_eq(tu_lessee_wait_log(D, "report failed", 0), 0);
}
END_TEST

/* SIGTERM while the only completion, carrying a claim, is held by the
 * server: the drain waits for it, and the run its claim brings is given back
 * unstarted.  No long poll and a long poll_interval, so that no other claim
 * is out when that run is enqueued, after the drain began. */
START_TEST(test_drain_releases_carried_runs)
{
	_cleanup_free_ char *a = NULL, *b = NULL, *body = NULL;
	long status = 0;

	ck_assert_int_eq(
	    tu_lessor_fault(L, "{\"endpoint\":\"complete\",\"count\":1,\"delay_ms\":2000}"), 0);
	a = enqueue();
	start_lessee("request_timeout = 10s\n", "long_poll = 0\npoll_interval = 1min\n");
	/* a's child is gone and its completion is out */
	for (usec_t end = time_mono() + tu_timeout(10 * SEC);; tu_sleep(20 * USEC_PER_MSEC)) {
		free(body);
		body = tu_lessee_status_get(D, "/status", &status);
		if (body && strstr(body, "\"reporting\":1"))
			break;
		ck_assert_msg(time_mono() < end, "the completion never went out");
	}
	ck_assert_int_eq(tu_lessee_signal(D, SIGTERM), 0);
	ck_assert_int_eq(tu_lessee_wait_log(D, "draining: no new claims", tu_timeout(10 * SEC)), 0);
	b = enqueue();
	ck_assert_int_eq(tu_lessee_wait(D, tu_timeout(30 * SEC)), 0);
	ck_assert_int_eq(tu_lessor_wait_status(L, a, "succeeded", 0), 0);
	if (tu_lessor_wait_status(L, b, "pending", 0) != 0)
		tu_lessee_dump_log(D);
	ck_assert_int_eq(tu_lessor_wait_status(L, b, "pending", 0), 0);
	ck_assert_int_eq(tu_lessee_wait_log(D, "releasing the run unstarted (draining)", 0), 0);
}
END_TEST

/* The end of lease n of run id: "end_reason/detail". */
static char *lease_end(const char *id, int n)
{
	cJSON *o = run_of(id);
	const cJSON *l = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "leases"), n);
	char *s = tu_fmt("%s/%s", tu_jstr(l, "end_reason") ?: "", tu_jstr(l, "detail") ?: "");

	cJSON_Delete(o);
	return s;
}

/* a runs 1 s, its completion is answered 600 ms late; the claim ahead
 * brings b 25 ms after a's end, and a's carried claim (past its patience)
 * brings c while b still runs: one of them goes back unstarted.  Returns
 * how the first lease of the one given back ended, "end_reason/detail". */
static char *late_carried_run(void)
{
	_cleanup_free_ char *a = NULL, *b = NULL, *c = NULL;
	char *end;

	ck_assert_int_eq(
	    tu_lessor_fault(L, "{\"endpoint\":\"complete\",\"count\":1,\"delay_ms\":600}"), 0);
	a = enqueue();
	b = enqueue();
	c = enqueue();
	start_lessee_with("", "", "/bin/sleep 1");
	ck_assert_int_eq(tu_lessee_wait_log(D, "releasing the run unstarted", tu_timeout(20 * SEC)),
	                 0);
	for (int i = 0; i < 3; i++)
		ck_assert_int_eq(tu_lessor_wait_status(L, (char *[]){a, b, c}[i], "succeeded",
		                                       tu_timeout(30 * SEC)),
		                 0);
	/* which of b and c went back depends on the order of the grants */
	end = lease_end(c, 0);
	if (streq(end, "completed/")) {
		free(end);
		end = lease_end(b, 0);
	}
	return end;
}

/* The run a late carried claim brings goes back as "no_slot", not as
 * "draining": the daemon is not draining, and an operator (or a test)
 * reading "draining" would think it was. */
START_TEST(test_late_carried_run_back_as_no_slot)
{
	_cleanup_free_ char *end = late_carried_run();

	if (tu_lessee_wait_log(D, "releasing the run unstarted (no_slot)", 0) != 0)
		tu_lessee_dump_log(D);
	ck_assert_int_eq(tu_lessee_wait_log(D, "releasing the run unstarted (no_slot)", 0), 0);
	ck_assert_int_ne(tu_lessee_wait_log(D, "(draining)", 0), 0);
	ck_assert_str_eq(end, "released/no_slot");
}
END_TEST

/* A server older than the reason no_slot answers 400 to it (played by a
 * release fault): the daemon says so once, and the run goes back as
 * "draining", which that server knows. */
START_TEST(test_older_server_release_as_draining)
{
	_cleanup_free_ char *end = NULL;

	ck_assert_int_eq(
	    tu_lessor_fault(L, "{\"endpoint\":\"release\",\"count\":1,\"status\":400}"), 0);
	end = late_carried_run();
	ck_assert_int_eq(tu_lessee_wait_log(D, "refuses the release reason no_slot", 0), 0);
	ck_assert_str_eq(end, "released/draining");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("carry");
	TCase *tc = tcase_create("carry");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_completions_carry_claims);
	tcase_add_test(tc, test_older_server_gets_claims);
	tcase_add_test(tc, test_lost_answer_claim_asked_again);
	tcase_add_test(tc, test_drain_releases_carried_runs);
	tcase_add_test(tc, test_late_carried_run_back_as_no_slot);
	tcase_add_test(tc, test_older_server_release_as_draining);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
