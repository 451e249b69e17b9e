/* Completions that come together go in one request (issue 15; protocol v1
 * "POST /v1/completions", docs/protocol.md), against a real lessor: while a
 * completion awaits its answer the next ones wait and then go together; each
 * keeps its own answer (a lost lease among them is that run's alone); a
 * server without the batch (lessor's legacy fault) gets one completion per
 * request. */
#include <cJSON.h>
#include <check.h>
#include <math.h>
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
#define RUNS 8

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

static void start_lessee(const char *command)
{
	char conf[512];

	snprintf(conf, sizeof(conf),
	         "[worker]\nconcurrency = %d\nlease_ttl = 60s\n"
	         "[status]\nlisten = 127.0.0.1:0\n"
	         "[workflow.ok]\ncommand = %s\n",
	         RUNS, command);
	ck_assert_int_eq(tu_lessee_start(&(struct tu_lessee_opts){.lessor = L, .conf = conf}, &D),
	                 0);
}

static double requests(const char *endpoint)
{
	return tu_lessee_metric(D, "lessee_api_requests_total", "endpoint", endpoint);
}

/* The first completion request is held by the server (a delay fault): it
 * goes alone or with those of the same loop turn, and every run that ends
 * meanwhile waits for its answer, then all go in one request. */
static void delay_first_completion(void)
{
	char fault[128];

	snprintf(fault, sizeof(fault), "{\"endpoint\":\"complete\",\"count\":1,\"delay_ms\":%d}",
	         tu_wrapped() ? 3000 : 1000);
	ck_assert_int_eq(tu_lessor_fault(L, fault), 0);
}

static void enqueue_all(char **ids, size_t n)
{
	for (size_t i = 0; i < n; i++)
		ck_assert_ptr_nonnull(ids[i] = tu_lessor_enqueue_one(L, "ok"));
}

static void wait_all(char **ids, size_t n, const char *status)
{
	for (size_t i = 0; i < n; i++) {
		if (tu_lessor_wait_status(L, ids[i], status, tu_timeout(30 * SEC)) != 0)
			tu_lessee_dump_log(D);
		ck_assert_int_eq(tu_lessor_wait_status(L, ids[i], status, 0), 0);
		free(ids[i]);
	}
}

START_TEST(test_completions_share_requests)
{
	char *ids[RUNS];

	delay_first_completion();
	enqueue_all(ids, RUNS);
	start_lessee("/bin/true");
	wait_all(ids, RUNS, "succeeded");
	if (requests("complete") + requests("completions") > 2)
		tu_lessee_dump_log(D);
	ck_assert_double_eq(requests("complete"), 0);
	ck_assert_msg(requests("completions") >= 1 && requests("completions") <= 2,
	              "%.0f completion requests for %d runs that ended together",
	              requests("completions"), RUNS);
}
END_TEST

/* lessor's count of the claims the daemon made (GET /v1/workers). */
static double claims_made(void)
{
	cJSON *w = NULL, *it;
	long status = 0;
	double n = -1;

	ck_assert_int_eq(tu_lessor_json(L, "GET", "/v1/workers", NULL, &status, &w), 0);
	ck_assert_int_eq(status, 200);
	cJSON_ArrayForEach(
	    it, cJSON_GetObjectItem(w, "workers")) if (streq_ptr(tu_jstr(it, "worker_id"),
	                                                         "test-worker")) n =
	    tu_jnum(it, "claims");
	cJSON_Delete(w);
	return n;
}

/* Eight runs that end 1 ms apart, each in its own loop turn, while the
 * first one's completion is held by the server: the seven that wait for it
 * go together, and the slots they free are asked for by one claim, carried
 * by the first of them and grown by the others, not by one claim each. */
START_TEST(test_batch_carries_one_claim)
{
	char *ids[RUNS], conf[2048], *p = conf;
	double carried;

	p += sprintf(p,
	             "[worker]\nconcurrency = %d\nlease_ttl = 60s\n"
	             "[status]\nlisten = 127.0.0.1:0\n",
	             RUNS);
	for (int i = 0; i < RUNS; i++)
		p += sprintf(p, "[workflow.w%d]\ncommand = /bin/sleep 0.%03d\n", i, i);
	delay_first_completion();
	for (int i = 0; i < RUNS; i++) {
		char wf[8];

		snprintf(wf, sizeof(wf), "w%d", i);
		ck_assert_ptr_nonnull(ids[i] = tu_lessor_enqueue_one(L, wf));
	}
	ck_assert_int_eq(tu_lessee_start(&(struct tu_lessee_opts){.lessor = L, .conf = conf}, &D),
	                 0);
	wait_all(ids, RUNS, "succeeded");
	/* the claims completions carried: lessor's count less the daemon's own */
	carried = claims_made() - requests("claims");
	ck_assert_msg(carried <= 2, "%.0f claims carried by %.0f completion requests", carried,
	              requests("completions"));
}
END_TEST

/* A lessor without the batch (the legacy fault): the first batch is refused
 * with 404, the daemon says so once, and every completion goes alone. */
START_TEST(test_older_server_one_per_request)
{
	char *ids[RUNS];

	ck_assert_int_eq(
	    tu_lessor_fault(L, "{\"endpoint\":\"complete\",\"legacy\":true,\"count\":100000}"), 0);
	enqueue_all(ids, RUNS);
	start_lessee("/bin/true");
	wait_all(ids, RUNS, "succeeded");
	ck_assert_int_eq(tu_lessee_wait_log(D, "does not complete runs in batches", 0), 0);
	if (isnan(requests("completions")) || !tu_pid_alive(tu_lessee_pid(D)))
		tu_lessee_dump_log(D);
	ck_assert(tu_pid_alive(tu_lessee_pid(D)));
	ck_assert_double_eq(requests("completions"), 1);
	ck_assert_double_eq(requests("complete"), RUNS);
}
END_TEST

/* Two runs whose completions the server holds (a delay fault on the first
 * two completion requests, whichever way they were grouped); b is requeued
 * meanwhile and claimed by another worker, so its entry answers lease_lost:
 * b's result is dropped (the other worker's lease stands), a's is recorded.
 * No long poll, no claims carried by completions (the legacy claims fault),
 * a long poll_interval, and a reporting queue that both runs fill (nothing
 * is claimed while it is full): nothing of lessee's claims b back before
 * the other worker does. */
START_TEST(test_entry_lease_lost_alone)
{
	_cleanup_free_ char *a = NULL, *b = NULL, *body = NULL, *path = NULL;
	char conf[512];
	long status = 0;
	cJSON *o = NULL;

	ck_assert_int_eq(
	    tu_lessor_fault(L, "{\"endpoint\":\"claims\",\"legacy\":true,\"count\":100000}"), 0);
	ck_assert_int_eq(tu_lessor_fault(L, tu_wrapped() ? "{\"endpoint\":\"complete\",\"count\":2,"
	                                                   "\"delay_ms\":4000}"
	                                                 : "{\"endpoint\":\"complete\",\"count\":2,"
	                                                   "\"delay_ms\":1500}"),
	                 0);
	ck_assert_ptr_nonnull(a = tu_lessor_enqueue_one(L, "ok"));
	ck_assert_ptr_nonnull(b = tu_lessor_enqueue_one(L, "ok"));
	snprintf(conf, sizeof(conf),
	         "[worker]\nconcurrency = 2\nmax_reporting = 2\nlease_ttl = 60s\nlong_poll = 0\n"
	         "poll_interval = 1min\n"
	         "[status]\nlisten = 127.0.0.1:0\n"
	         "[workflow.ok]\ncommand = /bin/true\n");
	ck_assert_int_eq(tu_lessee_start(&(struct tu_lessee_opts){.lessor = L, .conf = conf}, &D),
	                 0);
	/* both completions are out, held by the server */
	for (usec_t end = time_mono() + tu_timeout(10 * SEC);; tu_sleep(20 * USEC_PER_MSEC)) {
		free(body);
		body = tu_lessee_status_get(D, "/status", &status);
		if (body && strstr(body, "\"reporting\":2"))
			break;
		ck_assert_msg(time_mono() < end, "the completions never went out");
	}
	path = tu_fmt("/v1/runs/%s/requeue", b);
	ck_assert_int_eq(tu_lessor_json(L, "POST", path, "{}", &status, NULL), 0);
	ck_assert_int_eq(status, 200);
	ck_assert_int_eq(tu_lessor_json(L, "POST", "/v1/claims",
	                                "{\"claim_id\":\"0192f0c9-1a2b-7c3d-8e4f-5a6b7c8d9e0f\","
	                                "\"worker_id\":\"other\",\"max_runs\":1,\"lease_ttl_s\":60,"
	                                "\"workflows\":[\"ok\"],\"tags\":[]}",
	                                &status, &o),
	                 0);
	ck_assert_int_eq(status, 200);
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(o, "runs")), 1);
	cJSON_Delete(o);
	ck_assert_int_eq(tu_lessor_wait_status(L, a, "succeeded", tu_timeout(20 * SEC)), 0);
	if (tu_lessee_wait_log(D, "completion answered", tu_timeout(20 * SEC)) != 0)
		tu_lessee_dump_log(D);
	ck_assert_int_eq(tu_lessee_wait_log(D, "completion answered", 0), 0);
	/* the other worker's lease stands: b is still running, under it */
	ck_assert_int_eq(tu_lessor_wait_status(L, b, "running", 0), 0);
	ck_assert_double_eq(requests("complete"), 0);
	ck_assert(requests("completions") >= 1); /* a retry under valgrind may add one */
}
END_TEST

int main(void)
{
	Suite *s = suite_create("complete_batching");
	TCase *tc = tcase_create("complete_batching");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_completions_share_requests);
	tcase_add_test(tc, test_batch_carries_one_claim);
	tcase_add_test(tc, test_older_server_one_per_request);
	tcase_add_test(tc, test_entry_lease_lost_alone);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
