/* Cancel from the API reaches the child within about a second, not at the
 * next lease renewal (issue 14): the claim long poll carries cancels for the
 * runs this worker holds (docs/protocol.md, "Cancel events"), and a server
 * without it (an older lessor, simulated with the "legacy" claims fault) still
 * cancels through the renewal. */
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
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"

#define SEC USEC_PER_SEC

static struct tu_lessor *L;
static struct tu_lessee *D;
static char *scripts;

static void setup(void)
{
	char path[512];
	static const char text[] = "#!/bin/sh\necho pid=$$\nexec sleep 1000\n";
	char *const args[] = {"--enable-faults", NULL};

	scripts = tu_tmpdir("fastcancel");
	ck_assert_ptr_nonnull(scripts);
	snprintf(path, sizeof(path), "%s/sleeper.sh", scripts);
	ck_assert_int_eq(write_file_atomic(path, text, strlen(text), 0755), 0);
	ck_assert_int_eq(
	    tu_lessor_start(&(struct tu_lessor_opts){.token = "t0ken-for-tests", .args = args}, &L),
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

/* Renewals every 30 s: a cancel that waits for one takes up to 30 s. */
static void start_lessee(unsigned concurrency, const char *lease)
{
	_cleanup_free_ char *conf = NULL;

	ck_assert_int_ge(asprintf(&conf,
	                          "[worker]\nconcurrency = %u\n%s\n"
	                          "[workflow.sleeper]\ncommand = %s/sleeper.sh\n",
	                          concurrency, lease, scripts),
	                 0);
	ck_assert_int_eq(tu_lessee_start(&(struct tu_lessee_opts){.lessor = L, .conf = conf}, &D),
	                 0);
}

static char *enqueue(void)
{
	char *id = tu_lessor_enqueue(L, "{\"workflow\":\"sleeper\"}");

	ck_assert_ptr_nonnull(id);
	return id;
}

/* The child's pid from its shipped log. */
static pid_t child_pid(const char *id)
{
	usec_t end = time_mono() + tu_timeout(15 * SEC);

	do {
		size_t len = 0;
		_cleanup_free_ char *log = tu_lessor_run_log(L, id, &len);
		const char *p = log ? strstr(log, "pid=") : NULL;

		if (p && strchr(p, '\n'))
			return (pid_t)atoi(p + 4);
		tu_sleep(20 * USEC_PER_MSEC);
	} while (time_mono() < end);
	ck_abort_msg("no pid in the log of run %s", id);
	return -1;
}

static void cancel(const char *id)
{
	_cleanup_free_ char *path = NULL;
	long status = 0;

	ck_assert_int_ge(asprintf(&path, "/v1/runs/%s/cancel", id), 0);
	ck_assert_int_eq(tu_lessor_json(L, "POST", path, NULL, &status, NULL), 0);
	ck_assert_int_eq(status, 200);
}

/* From the cancel request to the child's death, in microseconds; the bound
 * of the wait is max. */
static usec_t cancel_latency(const char *id, usec_t max)
{
	pid_t pid = child_pid(id);
	usec_t t0, end;

	/* let the worker's next claim (with this run held) reach its long poll */
	tu_sleep(300 * USEC_PER_MSEC);
	t0 = time_mono();
	cancel(id);
	end = t0 + max;
	while (tu_pid_alive(pid) && time_mono() < end)
		tu_sleep(5 * USEC_PER_MSEC);
	if (tu_pid_alive(pid)) {
		_cleanup_free_ char *log = tu_lessee_log(D);

		fprintf(stderr, "---- lessee log ----\n%s---- end ----\n", log ? log : "");
	}
	ck_assert_msg(!tu_pid_alive(pid), "child %d still alive after %llu ms", (int)pid,
	              (unsigned long long)(max / USEC_PER_MSEC));
	return time_mono() - t0;
}

static void check_fast(unsigned concurrency, unsigned runs)
{
	char *ids[4];

	start_lessee(concurrency, "lease_ttl = 90s\nlease_refresh = 30s\n");
	for (unsigned i = 0; i < runs; i++)
		ids[i] = enqueue();
	for (unsigned i = 0; i < runs; i++)
		ck_assert_int_eq(tu_lessor_wait_status(L, ids[i], "running", tu_timeout(10 * SEC)),
		                 0);
	for (unsigned i = 0; i < runs; i++) {
		usec_t d = cancel_latency(ids[i], tu_timeout(20 * SEC));

		ck_assert_msg(d < tu_timeout(2 * SEC),
		              "cancel took %llu ms with lease_refresh = 30s",
		              (unsigned long long)(d / USEC_PER_MSEC));
		ck_assert_int_eq(
		    tu_lessor_wait_status(L, ids[i], "cancelled", tu_timeout(10 * SEC)), 0);
		free(ids[i]);
	}
}

/* Free slots: the ordinary claim long poll carries the cancel. */
START_TEST(test_cancel_fast_with_free_slots)
{
	check_fast(4, 2);
}
END_TEST

/* Every slot busy: a claim for no runs stays open for the cancels. */
START_TEST(test_cancel_fast_all_slots_busy)
{
	check_fast(1, 1);
	/* the slot freed by the cancel is claimed again at once */
	{
		_cleanup_free_ char *id = enqueue();

		ck_assert_int_eq(tu_lessor_wait_status(L, id, "running", tu_timeout(5 * SEC)), 0);
	}
}
END_TEST

/* An older server ignores "held" and answers without "cancel_requested": the
 * worker never asks it for zero runs, and cancel still works through the
 * renewal. */
START_TEST(test_cancel_old_server)
{
	_cleanup_free_ char *id = NULL, *log = NULL;
	long status = 0;

	ck_assert_int_eq(
	    tu_lessor_json(L, "POST", "/v1/admin/faults",
	                   "{\"endpoint\":\"claims\",\"legacy\":true,\"count\":100000}", &status,
	                   NULL),
	    0);
	ck_assert_int_eq(status, 200);
	start_lessee(1, "lease_ttl = 6s\nlease_refresh = 1s\n");
	id = enqueue();
	ck_assert_int_eq(tu_lessor_wait_status(L, id, "running", tu_timeout(10 * SEC)), 0);
	(void)cancel_latency(id, tu_timeout(10 * SEC));
	ck_assert_int_eq(tu_lessor_wait_status(L, id, "cancelled", tu_timeout(10 * SEC)), 0);
	log = tu_lessee_log(D);
	ck_assert_ptr_null(strstr(log, "claim refused"));
	ck_assert_ptr_null(strstr(log, "cancel events"));
}
END_TEST

/* A server that said it has cancel events yet refuses a claim for none: the
 * worker stops asking, cancel goes through the renewal, claims go on. */
START_TEST(test_claim_for_cancels_refused)
{
	_cleanup_free_ char *id = NULL, *next = NULL;
	long status = 0;

	start_lessee(1, "lease_ttl = 6s\nlease_refresh = 1s\n");
	id = enqueue();
	ck_assert_int_eq(tu_lessor_wait_status(L, id, "running", tu_timeout(10 * SEC)), 0);
	ck_assert_int_eq(tu_lessor_json(L, "POST", "/v1/admin/faults",
	                                "{\"endpoint\":\"claims\",\"status\":400,\"count\":1}",
	                                &status, NULL),
	                 0);
	ck_assert_int_eq(status, 200);
	ck_assert_int_eq(
	    tu_lessee_wait_log(D, "refused a claim for cancel events only", tu_timeout(10 * SEC)),
	    0);
	(void)cancel_latency(id, tu_timeout(10 * SEC));
	ck_assert_int_eq(tu_lessor_wait_status(L, id, "cancelled", tu_timeout(10 * SEC)), 0);
	next = enqueue();
	ck_assert_int_eq(tu_lessor_wait_status(L, next, "running", tu_timeout(10 * SEC)), 0);
}
END_TEST

static cJSON *claim(const char *body, long want)
{
	_cleanup_free_ char *url = NULL;
	long status = 0;
	cJSON *resp = NULL;

	ck_assert_int_ge(asprintf(&url, "%s/v1/claims", tu_lessor_url(L)), 0);
	ck_assert_int_eq(tu_http_json("POST", url, tu_lessor_token(L), body, &status, &resp), 0);
	ck_assert_msg(status == want, "claim %s: HTTP %ld, expected %ld", body, status, want);
	return resp;
}

static int n_cancels(const cJSON *resp, const char *id)
{
	const cJSON *a = cJSON_GetObjectItem(resp, "cancel_requested"), *e;
	int n = 0;

	ck_assert_msg(cJSON_IsArray(a), "no cancel_requested in the answer");
	cJSON_ArrayForEach(e, a)
	{
		ck_assert(cJSON_IsString(e));
		n += streq(e->valuestring, id);
	}
	return n;
}

/* lessor's side: max_runs 0 only with held, cancel_requested only for the
 * current lease, a parked claim for no runs granted nothing. */
START_TEST(test_lessor_held_claims)
{
	_cleanup_free_ char *id = enqueue(), *body = NULL, *stale = NULL;
	cJSON *r, *run;
	const char *token;

	cJSON_Delete(claim("{\"claim_id\":\"c0\",\"worker_id\":\"w\",\"max_runs\":0,"
	                   "\"lease_ttl_s\":60}",
	                   400));
	cJSON_Delete(claim("{\"claim_id\":\"c0\",\"worker_id\":\"w\",\"max_runs\":1,"
	                   "\"lease_ttl_s\":60,\"held\":[{\"id\":\"r-1\"}]}",
	                   400));
	/* no runs asked: the pending run stays pending, the answer comes at wait_s */
	r = claim("{\"claim_id\":\"c1\",\"worker_id\":\"w\",\"max_runs\":0,"
	          "\"lease_ttl_s\":60,\"wait_s\":1,\"held\":[]}",
	          200);
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(r, "runs")), 0);
	ck_assert_int_eq(n_cancels(r, id), 0);
	cJSON_Delete(r);
	r = claim("{\"claim_id\":\"c2\",\"worker_id\":\"w\",\"max_runs\":1,"
	          "\"lease_ttl_s\":60,\"held\":[]}",
	          200);
	run = cJSON_GetArrayItem(cJSON_GetObjectItem(r, "runs"), 0);
	ck_assert_ptr_nonnull(run);
	token = cJSON_GetObjectItem(cJSON_GetObjectItem(run, "lease"), "token")->valuestring;
	cancel(id);
	ck_assert_int_ge(asprintf(&body,
	                          "{\"claim_id\":\"c3\",\"worker_id\":\"w\",\"max_runs\":0,"
	                          "\"lease_ttl_s\":60,\"wait_s\":20,"
	                          "\"held\":[{\"id\":\"%s\",\"token\":\"%s\"}]}",
	                          id, token),
	                 0);
	ck_assert_int_ge(asprintf(&stale,
	                          "{\"claim_id\":\"c4\",\"worker_id\":\"w\",\"max_runs\":0,"
	                          "\"lease_ttl_s\":60,\"wait_s\":1,"
	                          "\"held\":[{\"id\":\"%s\",\"token\":\"0000\"}]}",
	                          id),
	                 0);
	cJSON_Delete(r);
	{
		usec_t t0 = time_mono();

		r = claim(body, 200); /* answered at once, not after wait_s */
		ck_assert_uint_lt(time_mono() - t0, 5 * SEC);
	}
	ck_assert_int_eq(n_cancels(r, id), 1);
	cJSON_Delete(r);
	r = claim(stale, 200);
	ck_assert_int_eq(n_cancels(r, id), 0);
	cJSON_Delete(r);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("fast_cancel");
	TCase *tc = tcase_create("e2e");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_cancel_fast_with_free_slots);
	tcase_add_test(tc, test_cancel_fast_all_slots_busy);
	tcase_add_test(tc, test_cancel_old_server);
	tcase_add_test(tc, test_lessor_held_claims);
	tcase_add_test(tc, test_claim_for_cancels_refused);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
