/* Lease renewals in batches (issue 15, protocol v1 POST /v1/leases/renew,
 * docs/protocol.md), against a real lessor: the renewals due together go in
 * one request, and so do those due within a quarter of lease_refresh of it
 * (runs started at different moments share their renewals); a server
 * without batches (lessor's legacy lease fault) gets one renewal per request,
 * and the runs live on. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lessee_proc.h"
#include "lessor_proc.h"
#include "testutil.h"
#include "util/macro.h"

#define SEC USEC_PER_SEC
#define RUNS 12

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

/* lessee_api_requests_total of one endpoint, any code. */
static double requests(const char *endpoint)
{
	return tu_lessee_metric(D, "lessee_api_requests_total", "endpoint", endpoint);
}

static double renewals_ok(void)
{
	return tu_lessee_metric(D, "lessee_lease_renewals_total", "result", "ok");
}

/* RUNS runs of `sleep 4` (lease_ttl 6 s, lease_refresh 1 s), their starts
 * spread over about 300 ms: a pass of the long poll each. */
static void run_sleepers(void)
{
	char *ids[RUNS];

	ck_assert_int_eq(
	    tu_lessee_start(
	        &(struct tu_lessee_opts){.lessor = L,
	                                 .conf = "[worker]\nconcurrency = 16\n"
	                                         "[status]\nlisten = 127.0.0.1:0\n"
	                                         "[workflow.nap]\ncommand = /bin/sleep 4\n"},
	        &D),
	    0);
	for (int i = 0; i < RUNS; i++) {
		ids[i] = tu_lessor_enqueue(L, "{\"workflow\":\"nap\",\"max_attempts\":1}");
		ck_assert_ptr_nonnull(ids[i]);
		tu_sleep(25 * USEC_PER_MSEC); /* a spread of start times, not a wait */
	}
	for (int i = 0; i < RUNS; i++) {
		ck_assert_int_eq(
		    tu_lessor_wait_status(L, ids[i], "succeeded", tu_timeout(30 * SEC)), 0);
		free(ids[i]);
	}
}

/* About 3 renewals per run, in a handful of requests: each wave renews every
 * lease due within 250 ms of the first, and the runs started over 300 ms. */
START_TEST(test_renewals_go_in_batches)
{
	double batches, single, renewed;

	run_sleepers();
	batches = requests("leases");
	single = requests("lease");
	renewed = renewals_ok();
	fprintf(stderr, "%.0f renewals in %.0f batch requests\n", renewed, batches);
	ck_assert_msg(renewed >= 2 * RUNS, "%.0f renewals for %d runs of 4 s", renewed, RUNS);
	ck_assert_msg(single == 0, "%.0f renewals went alone", single);
	ck_assert_msg(batches * 4 <= renewed, "%.0f batch requests for %.0f renewals", batches,
	              renewed);
}
END_TEST

/* A server without batches: one renewal per request, said once. */
START_TEST(test_older_server_renews_one_by_one)
{
	long status = 0;

	ck_assert_int_eq(tu_lessor_json(L, "POST", "/v1/admin/faults",
	                                "{\"endpoint\":\"lease\",\"legacy\":true,\"count\":100000}",
	                                &status, NULL),
	                 0);
	ck_assert_int_eq(status, 200);
	run_sleepers();
	ck_assert_int_eq(tu_lessee_wait_log(D, "does not renew leases in batches", 0), 0);
	ck_assert(requests("lease") >= 2 * RUNS);
	ck_assert(requests("leases") <= 1);
}
END_TEST

static double renewal_errors(void)
{
	return tu_lessee_metric(D, "lessee_lease_renewals_total", "result", "error");
}

/* While the API fails every renewal (503), each lease retries on its own
 * backoff (250 ms doubling to 1 s, full jitter: about 8 attempts in 2 s); a
 * wave that pulled every lease in backoff along with each renewal that went
 * out made it one attempt per lease every few tens of ms. */
START_TEST(test_failed_renewals_keep_their_backoff)
{
	char *ids[RUNS];
	double e0, e1;
	long status = 0;

	ck_assert_int_eq(
	    tu_lessee_start(
	        &(struct tu_lessee_opts){.lessor = L,
	                                 .conf = "[worker]\nconcurrency = 16\n"
	                                         "[status]\nlisten = 127.0.0.1:0\n"
	                                         "[workflow.nap]\ncommand = /bin/sleep 5\n"},
	        &D),
	    0);
	for (int i = 0; i < RUNS; i++) {
		ids[i] = tu_lessor_enqueue(L, "{\"workflow\":\"nap\",\"max_attempts\":1}");
		ck_assert_ptr_nonnull(ids[i]);
		tu_sleep(25 * USEC_PER_MSEC);
	}
	for (int i = 0; i < RUNS; i++)
		ck_assert_int_eq(tu_lessor_wait_status(L, ids[i], "running", tu_timeout(10 * SEC)),
		                 0);
	ck_assert_int_eq(tu_lessor_json(L, "POST", "/v1/admin/faults",
	                                "{\"endpoint\":\"lease\",\"status\":503,\"count\":1000000}",
	                                &status, NULL),
	                 0);
	for (usec_t end = time_mono() + tu_timeout(10 * SEC); renewal_errors() < RUNS;
	     tu_sleep(20 * USEC_PER_MSEC))
		ck_assert_msg(time_mono() < end, "the renewals never failed");
	e0 = renewal_errors();
	tu_sleep(2 * SEC); /* the span over which the retries are counted */
	e1 = renewal_errors();
	ck_assert_int_eq(tu_lessor_json(L, "DELETE", "/v1/admin/faults", NULL, &status, NULL), 0);
	fprintf(stderr, "%.0f failed renewals of %d leases in 2 s\n", e1 - e0, RUNS);
	ck_assert_msg(e1 - e0 <= 25 * RUNS, "%.0f failed renewals of %d leases in 2 s", e1 - e0,
	              RUNS);
	for (int i = 0; i < RUNS; i++) {
		ck_assert_int_eq(
		    tu_lessor_wait_status(L, ids[i], "succeeded", tu_timeout(30 * SEC)), 0);
		free(ids[i]);
	}
}
END_TEST

/* A wave larger than one small answer: 200 leases renewed together get an
 * answer of about 10 KiB, which must be read whole (a cap of 4 KiB failed
 * every batch of more than about 80, and the leases were lost). */
#define WAVE 200
START_TEST(test_large_wave_renewed)
{
	char *ids[WAVE];
	double renewed;

	for (int i = 0; i < WAVE; i++) {
		ids[i] = tu_lessor_enqueue(L, "{\"workflow\":\"nap\",\"max_attempts\":1}");
		ck_assert_ptr_nonnull(ids[i]);
	}
	ck_assert_int_eq(
	    tu_lessee_start(
	        &(struct tu_lessee_opts){.lessor = L,
	                                 .conf = "[worker]\nconcurrency = 200\n"
	                                         "[status]\nlisten = 127.0.0.1:0\n"
	                                         "[workflow.nap]\ncommand = /bin/sleep 4\n"},
	        &D),
	    0);
	for (int i = 0; i < WAVE; i++) {
		ck_assert_int_eq(
		    tu_lessor_wait_status(L, ids[i], "succeeded", tu_timeout(60 * SEC)), 0);
		free(ids[i]);
	}
	renewed = renewals_ok();
	fprintf(stderr, "%.0f renewals of %d leases in %.0f batch requests, %.0f failed\n", renewed,
	        WAVE, requests("leases"), renewal_errors());
	ck_assert_msg(renewal_errors() == 0, "%.0f renewals failed", renewal_errors());
	ck_assert_msg(renewed >= 2 * WAVE, "%.0f renewals for %d runs of 4 s", renewed, WAVE);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("renewals");
	TCase *tc = tcase_create("renewals");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_renewals_go_in_batches);
	tcase_add_test(tc, test_older_server_renews_one_by_one);
	tcase_add_test(tc, test_failed_renewals_keep_their_backoff);
	tcase_add_test(tc, test_large_wave_renewed);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
