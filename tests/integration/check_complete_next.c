/* A completion that claims the freed slot: POST /v1/runs/{id}/complete with
 * "next" (docs/protocol.md, section 4).  Against a real `lessor serve`: the
 * claim follows the recorded completion, an invalid "next" refuses the whole
 * request, a refused completion claims nothing, a repeated one replays. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonutil.h"
#include "lessor_proc.h"
#include "testutil.h"
#include "util/macro.h"
#include "util/strutil.h"
#include "worker_api.h"

static struct tu_lessor *L;
static const char *worker_token; /* scoped tokens: the worker's; else NULL */

static void start(void)
{
	tu_worker_start((char *[]){"--enable-faults", NULL}, &L, &worker_token);
}

static void teardown(void)
{
	tu_worker_stop(&L);
}

/* A worker request (with the worker token when scoped); the answer's JSON. */
static cJSON *wreq(const char *path, const char *body, long want_status)
{
	cJSON *j = NULL;
	long status = tu_worker_post(L, worker_token, path, body, &j);

	ck_assert_msg(status == want_status, "POST %s: %ld, want %ld", path, status, want_status);
	return j;
}

static char *enqueue(void)
{
	char *id = tu_lessor_enqueue(L, "{\"workflow\":\"build\"}");

	ck_assert_ptr_nonnull(id);
	return id;
}

static void claim_one(const char *claim_id, const char *worker, struct tu_grant *g)
{
	_cleanup_free_ char *body = tu_fmt("{\"claim_id\":\"%s\",\"worker_id\":\"%s\","
	                                   "\"max_runs\":1,\"lease_ttl_s\":60,\"wait_s\":0}",
	                                   claim_id, worker);
	cJSON *j = wreq("/v1/claims", body, 200);

	tu_worker_grant(j, 0, g);
	cJSON_Delete(j);
}

#define NEXT(claim_id, extra)                                                                      \
	"{\"claim_id\":\"" claim_id                                                                \
	"\",\"worker_id\":\"w-1\",\"max_runs\":1,\"lease_ttl_s\":60" extra "}"

/* POST /v1/runs/{id}/complete (succeeded) with this "next" (NULL: none). */
static cJSON *complete_next(const struct tu_grant *g, const char *next, long want_status)
{
	_cleanup_free_ char *path = tu_fmt("/v1/runs/%s/complete", g->id);
	_cleanup_free_ char *body =
	    tu_fmt("{\"token\":\"%s\",\"status\":\"succeeded\",\"reason\":\"exit\","
	           "\"exit_code\":0%s%s}",
	           g->token, next ? ",\"next\":" : "", next ? next : "");

	return wreq(path, body, want_status);
}

static int n_runs(const cJSON *next)
{
	ck_assert_msg(cJSON_IsArray(tu_jget(next, "runs")), "next.runs is not an array");
	return cJSON_GetArraySize(tu_jget(next, "runs"));
}

START_TEST(test_grants_next_pending_run)
{
	_cleanup_free_ char *r1 = NULL, *r2 = NULL;
	struct tu_grant g1, g2;
	cJSON *j, *run;

	start();
	r1 = enqueue();
	r2 = enqueue();
	claim_one("c-1", "w-1", &g1);
	j = complete_next(&g1, NEXT("c-2", ",\"workflows\":[\"build\"]"), 200);
	ck_assert_str_eq(tu_jstr_or(j, "run_status", ""), "succeeded");
	ck_assert_int_eq(n_runs(tu_jget(j, "next")), 1);
	ck_assert(cJSON_IsNumber(tu_jget(tu_jget(j, "next"), "queue_depth")));
	ck_assert_ptr_null(tu_jget(tu_jget(j, "next"), "error"));
	tu_worker_grant(tu_jget(j, "next"), 0, &g2);
	cJSON_Delete(j);
	ck_assert_str_eq(g2.id, streq(g1.id, r1) ? r2 : r1);
	tu_worker_assert_status(L, g1.id, "succeeded");
	tu_worker_assert_status(L, g2.id, "running");
	/* the granted lease is a lease like any other, of claim c-2 */
	run = tu_lessor_get_run(L, g2.id);
	ck_assert_str_eq(tu_jstr_or(tu_jget(run, "lease"), "claim_id", ""), "c-2");
	ck_assert_str_eq(tu_jstr_or(tu_jget(run, "lease"), "worker_id", ""), "w-1");
	cJSON_Delete(run);
	ck_assert_int_eq(tu_worker_renew(L, worker_token, &g2), 200);
	cJSON_Delete(complete_next(&g2, NULL, 200));
	tu_worker_assert_status(L, g2.id, "succeeded");
}
END_TEST

START_TEST(test_nothing_pending_answers_empty_next)
{
	_cleanup_free_ char *r1 = NULL;
	struct tu_grant g1;
	cJSON *j;

	start();
	r1 = enqueue();
	claim_one("c-1", "w-1", &g1);
	j = complete_next(&g1, NEXT("c-2", ""), 200);
	ck_assert_str_eq(tu_jstr_or(j, "run_status", ""), "succeeded");
	ck_assert_int_eq(n_runs(tu_jget(j, "next")), 0);
	ck_assert_int_eq(tu_jget(tu_jget(j, "next"), "queue_depth")->valueint, 0);
	ck_assert_ptr_null(tu_jget(tu_jget(j, "next"), "error"));
	cJSON_Delete(j);
	/* without "next" the answer has none */
	j = complete_next(&g1, NULL, 200);
	ck_assert_ptr_null(tu_jget(j, "next"));
	cJSON_Delete(j);
}
END_TEST

START_TEST(test_repeated_completion_replays_next)
{
	_cleanup_free_ char *r1 = NULL, *r2 = NULL, *r3 = NULL;
	struct tu_grant g1, g2, again;
	cJSON *j;

	start();
	r1 = enqueue();
	r2 = enqueue();
	r3 = enqueue();
	claim_one("c-1", "w-1", &g1);
	j = complete_next(&g1, NEXT("c-2", ""), 200);
	tu_worker_grant(tu_jget(j, "next"), 0, &g2);
	cJSON_Delete(j);
	/* the answer was lost: the worker repeats the whole request */
	j = complete_next(&g1, NEXT("c-2", ""), 200);
	ck_assert_str_eq(tu_jstr_or(j, "run_status", ""), "succeeded");
	ck_assert_int_eq(n_runs(tu_jget(j, "next")), 1);
	tu_worker_grant(tu_jget(j, "next"), 0, &again);
	cJSON_Delete(j);
	ck_assert_str_eq(again.id, g2.id);
	ck_assert_str_eq(again.token, g2.token);
	/* nothing more was granted: one run is still pending */
	{
		int pending = 0;
		const char *ids[] = {r1, r2, r3};

		for (size_t i = 0; i < ELEMENTSOF(ids); i++) {
			cJSON *run = tu_lessor_get_run(L, ids[i]);

			pending += streq(tu_jstr_or(run, "status", ""), "pending");
			cJSON_Delete(run);
		}
		ck_assert_int_eq(pending, 1);
	}
	ck_assert_int_eq(tu_worker_renew(L, worker_token, &g2), 200);
}
END_TEST

/* Each of these refuses the whole request: the completion is not recorded. */
START_TEST(test_invalid_next_refuses_completion)
{
	static const struct {
		const char *next, *names;
	} bad[] = {
	    {NEXT("c-2", ",\"wait_s\":5"), "next.wait_s"},
	    {NEXT("c-2", ",\"held\":[]"), "next.held"},
	    {"{\"claim_id\":\"c-2\",\"worker_id\":\"w-1\",\"max_runs\":0,\"lease_ttl_s\":60}",
	     "next.max_runs"},
	    {NEXT("bad claim id", ""), "next.claim_id"},
	    {"{\"claim_id\":\"c-2\",\"worker_id\":\"w-1\",\"max_runs\":1}", "next.lease_ttl_s"},
	    {"\"c-2\"", "next"},
	};
	_cleanup_free_ char *r1 = NULL, *r2 = NULL;
	struct tu_grant g1;

	start();
	r1 = enqueue();
	r2 = enqueue();
	claim_one("c-1", "w-1", &g1);
	for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
		cJSON *j = complete_next(&g1, bad[i].next, 400);

		ck_assert_str_eq(tu_jstr_or(j, "error", ""), "invalid_request");
		ck_assert_msg(strstr(tu_jstr_or(j, "message", ""), bad[i].names),
		              "message '%s' does not name %s", tu_jstr_or(j, "message", ""),
		              bad[i].names);
		ck_assert_ptr_null(tu_jget(j, "next"));
		cJSON_Delete(j);
		tu_worker_assert_status(L, g1.id, "running");
		ck_assert_int_eq(tu_worker_renew(L, worker_token, &g1), 200);
	}
	tu_worker_assert_status(L, streq(g1.id, r1) ? r2 : r1, "pending");
	/* and the valid one still works */
	cJSON_Delete(complete_next(&g1, NEXT("c-2", ",\"wait_s\":0,\"held\":null"), 200));
	tu_worker_assert_status(L, g1.id, "succeeded");
}
END_TEST

START_TEST(test_refused_completion_claims_nothing)
{
	_cleanup_free_ char *r1 = NULL, *r2 = NULL;
	struct tu_grant g1, stale, unknown = {.id = "r-999", .token = "nosuchtoken"};
	cJSON *j;

	start();
	r1 = enqueue();
	r2 = enqueue();
	claim_one("c-1", "w-1", &g1);
	stale = g1;
	snprintf(stale.token, sizeof(stale.token), "%s", "0123456789abcdef0123456789abcdef");
	j = complete_next(&stale, NEXT("c-2", ""), 409);
	ck_assert_str_eq(tu_jstr_or(j, "error", ""), "lease_lost");
	ck_assert_ptr_null(tu_jget(j, "next"));
	cJSON_Delete(j);
	j = complete_next(&unknown, NEXT("c-3", ""), 404);
	ck_assert_ptr_null(tu_jget(j, "next"));
	cJSON_Delete(j);
	tu_worker_assert_status(L, g1.id, "running");
	tu_worker_assert_status(L, streq(g1.id, r1) ? r2 : r1, "pending");
}
END_TEST

START_TEST(test_claim_id_of_another_worker)
{
	_cleanup_free_ char *r1 = NULL, *r2 = NULL, *r3 = NULL;
	struct tu_grant g1, g2;
	cJSON *j;

	start();
	r1 = enqueue();
	r2 = enqueue();
	r3 = enqueue();
	claim_one("c-1", "w-1", &g1);
	claim_one("c-x", "w-2", &g2);
	j = complete_next(&g1, NEXT("c-x", ""), 200);
	ck_assert_str_eq(tu_jstr_or(j, "run_status", ""), "succeeded");
	ck_assert_int_eq(n_runs(tu_jget(j, "next")), 0);
	ck_assert_str_eq(tu_jstr_or(tu_jget(j, "next"), "error", ""), "invalid_request");
	ck_assert_str_ne(tu_jstr_or(tu_jget(j, "next"), "message", ""), "");
	cJSON_Delete(j);
	tu_worker_assert_status(L, g1.id, "succeeded");
	tu_worker_assert_status(L, r3, "pending");
	/* w-2's lease is left alone */
	ck_assert_int_eq(tu_worker_renew(L, worker_token, &g2), 200);
}
END_TEST

START_TEST(test_legacy_fault_ignores_next)
{
	_cleanup_free_ char *r1 = NULL, *r2 = NULL;
	struct tu_grant g1;
	cJSON *j;

	start();
	r1 = enqueue();
	r2 = enqueue();
	claim_one("c-1", "w-1", &g1);
	tu_worker_fault(L, "{\"endpoint\":\"claims\",\"legacy\":true,\"count\":1}", 200);
	j = complete_next(&g1, NEXT("c-2", ""), 200);
	ck_assert_str_eq(tu_jstr_or(j, "run_status", ""), "succeeded");
	ck_assert_ptr_null(tu_jget(j, "next"));
	cJSON_Delete(j);
	tu_worker_assert_status(L, streq(g1.id, r1) ? r2 : r1, "pending");
}
END_TEST

START_TEST(test_claim_cancel_releases_embedded_claim)
{
	_cleanup_free_ char *r1 = NULL, *r2 = NULL;
	struct tu_grant g1, g2;
	cJSON *j;

	start();
	r1 = enqueue();
	r2 = enqueue();
	claim_one("c-1", "w-1", &g1);
	j = complete_next(&g1, NEXT("c-2", ""), 200);
	tu_worker_grant(tu_jget(j, "next"), 0, &g2);
	cJSON_Delete(j);
	j = wreq("/v1/claims/c-2/cancel", "{}", 200);
	ck_assert_int_eq(tu_jget(j, "released")->valueint, 1);
	cJSON_Delete(j);
	tu_worker_assert_status(L, g2.id, "pending");
	ck_assert_int_eq(tu_worker_renew(L, worker_token, &g2), 409);
}
END_TEST

START_TEST(test_scoped_token_names_the_worker)
{
	_cleanup_free_ char *r1 = NULL, *r2 = NULL, *path = NULL, *url = NULL;
	struct tu_grant g1, g2;
	cJSON *j, *run = NULL;
	long status = 0;

	tu_worker_start_scoped(&L, &worker_token);
	r1 = enqueue();
	r2 = enqueue();
	claim_one("c-1", "host-1", &g1);
	j = complete_next(&g1, NEXT("c-2", ""), 200); /* the body says w-1 */
	tu_worker_grant(tu_jget(j, "next"), 0, &g2);
	cJSON_Delete(j);
	path = tu_fmt("/v1/runs/%s", g2.id);
	ck_assert_int_eq(tu_lessor_json(L, "GET", path, NULL, &status, &run), 0);
	ck_assert_int_eq(status, 200);
	ck_assert_str_eq(tu_jstr_or(tu_jget(run, "lease"), "worker_id", ""), "alpha");
	cJSON_Delete(run);
	ck_assert_int_eq(tu_worker_renew(L, worker_token, &g2), 200);
	/* another worker's token does not reach the granted run */
	worker_token = TU_BETA_TOKEN;
	ck_assert_int_eq(tu_worker_renew(L, worker_token, &g2), 409);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("complete_next");
	TCase *t = tcase_create("next");

	tcase_add_checked_fixture(t, NULL, teardown);
	tcase_set_timeout(t, 60);
	tcase_add_test(t, test_grants_next_pending_run);
	tcase_add_test(t, test_nothing_pending_answers_empty_next);
	tcase_add_test(t, test_repeated_completion_replays_next);
	tcase_add_test(t, test_invalid_next_refuses_completion);
	tcase_add_test(t, test_refused_completion_claims_nothing);
	tcase_add_test(t, test_claim_id_of_another_worker);
	tcase_add_test(t, test_legacy_fault_ignores_next);
	tcase_add_test(t, test_claim_cancel_releases_embedded_claim);
	tcase_add_test(t, test_scoped_token_names_the_worker);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	return tu_run(suite());
}
