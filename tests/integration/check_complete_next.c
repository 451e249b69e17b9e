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

#define ADMIN "admin-0123456789abcdef"
#define TOK_A "alpha-0123456789abcdef"
#define TOK_B "beta-0123456789abcdef0"

static struct tu_lessor *L;
static const char *worker_token; /* scoped tokens: the worker's; else NULL */

static void start(void)
{
	char *args[] = {"--enable-faults", NULL};

	ck_assert_int_eq(tu_lessor_start(&(struct tu_lessor_opts){.args = args}, &L), 0);
	worker_token = NULL;
}

static void start_scoped(void)
{
	ck_assert_int_eq(
	    tu_lessor_start(
	        &(struct tu_lessor_opts){.admin_token = ADMIN,
	                                 .worker_tokens = "alpha " TOK_A "\nbeta " TOK_B "\n"},
	        &L),
	    0);
	worker_token = TOK_A;
}

static void teardown(void)
{
	if (L && tu_lessor_pid(L) > 0)
		ck_assert_int_eq(tu_lessor_stop(L), 0);
	L = tu_lessor_free(L);
}

/* A worker request (with the worker token when scoped); the answer's JSON. */
static cJSON *wreq(const char *path, const char *body, long want_status)
{
	_cleanup_free_ char *url = tu_fmt("%s%s", tu_lessor_url(L), path);
	long status = 0;
	cJSON *j = NULL;

	if (worker_token)
		ck_assert_int_eq(tu_http_json("POST", url, worker_token, body, &status, &j), 0);
	else
		ck_assert_int_eq(tu_lessor_json(L, "POST", path, body, &status, &j), 0);
	ck_assert_msg(status == want_status, "POST %s: %ld, want %ld", path, status, want_status);
	return j;
}

static const cJSON *at(const cJSON *j, const char *name)
{
	return cJSON_GetObjectItemCaseSensitive(j, name);
}

static const char *str_at(const cJSON *j, const char *name)
{
	const cJSON *v = at(j, name);

	return cJSON_IsString(v) ? v->valuestring : "";
}

static char *enqueue(void)
{
	char *id = tu_lessor_enqueue(L, "{\"workflow\":\"build\"}");

	ck_assert_ptr_nonnull(id);
	return id;
}

struct grant {
	char id[64], token[64];
};

/* The i-th run of a claim answer (or of a completion's "next"). */
static void grant_of(const cJSON *answer, int i, struct grant *g)
{
	const cJSON *run = cJSON_GetArrayItem(at(answer, "runs"), i);

	ck_assert_ptr_nonnull(run);
	snprintf(g->id, sizeof(g->id), "%s", str_at(run, "id"));
	snprintf(g->token, sizeof(g->token), "%s", str_at(at(run, "lease"), "token"));
	ck_assert_str_ne(g->token, "");
}

static void claim_one(const char *claim_id, const char *worker, struct grant *g)
{
	_cleanup_free_ char *body = tu_fmt("{\"claim_id\":\"%s\",\"worker_id\":\"%s\","
	                                   "\"max_runs\":1,\"lease_ttl_s\":60,\"wait_s\":0}",
	                                   claim_id, worker);
	cJSON *j = wreq("/v1/claims", body, 200);

	grant_of(j, 0, g);
	cJSON_Delete(j);
}

#define NEXT(claim_id, extra)                                                                      \
	"{\"claim_id\":\"" claim_id                                                                \
	"\",\"worker_id\":\"w-1\",\"max_runs\":1,\"lease_ttl_s\":60" extra "}"

/* POST /v1/runs/{id}/complete (succeeded) with this "next" (NULL: none). */
static cJSON *complete_next(const struct grant *g, const char *next, long want_status)
{
	_cleanup_free_ char *path = tu_fmt("/v1/runs/%s/complete", g->id);
	_cleanup_free_ char *body =
	    tu_fmt("{\"token\":\"%s\",\"status\":\"succeeded\",\"reason\":\"exit\","
	           "\"exit_code\":0%s%s}",
	           g->token, next ? ",\"next\":" : "", next ? next : "");

	return wreq(path, body, want_status);
}

static long renew(const struct grant *g)
{
	_cleanup_free_ char *path = tu_fmt("/v1/runs/%s/lease", g->id);
	_cleanup_free_ char *body = tu_fmt("{\"token\":\"%s\",\"ttl_s\":60}", g->token);
	_cleanup_free_ char *url = tu_fmt("%s%s", tu_lessor_url(L), path);
	long status = 0;

	if (worker_token)
		ck_assert_int_eq(tu_http_json("POST", url, worker_token, body, &status, NULL), 0);
	else
		ck_assert_int_eq(tu_lessor_json(L, "POST", path, body, &status, NULL), 0);
	return status;
}

static void assert_status(const char *id, const char *want)
{
	cJSON *run = tu_lessor_get_run(L, id);

	ck_assert_ptr_nonnull(run);
	ck_assert_str_eq(str_at(run, "status"), want);
	cJSON_Delete(run);
}

static int n_runs(const cJSON *next)
{
	ck_assert_msg(cJSON_IsArray(at(next, "runs")), "next.runs is not an array");
	return cJSON_GetArraySize(at(next, "runs"));
}

START_TEST(test_grants_next_pending_run)
{
	_cleanup_free_ char *r1 = NULL, *r2 = NULL;
	struct grant g1, g2;
	cJSON *j, *run;

	start();
	r1 = enqueue();
	r2 = enqueue();
	claim_one("c-1", "w-1", &g1);
	j = complete_next(&g1, NEXT("c-2", ",\"workflows\":[\"build\"]"), 200);
	ck_assert_str_eq(str_at(j, "run_status"), "succeeded");
	ck_assert_int_eq(n_runs(at(j, "next")), 1);
	ck_assert(cJSON_IsNumber(at(at(j, "next"), "queue_depth")));
	ck_assert_ptr_null(at(at(j, "next"), "error"));
	grant_of(at(j, "next"), 0, &g2);
	cJSON_Delete(j);
	ck_assert_str_eq(g2.id, streq(g1.id, r1) ? r2 : r1);
	assert_status(g1.id, "succeeded");
	assert_status(g2.id, "running");
	/* the granted lease is a lease like any other, of claim c-2 */
	run = tu_lessor_get_run(L, g2.id);
	ck_assert_str_eq(str_at(at(run, "lease"), "claim_id"), "c-2");
	ck_assert_str_eq(str_at(at(run, "lease"), "worker_id"), "w-1");
	cJSON_Delete(run);
	ck_assert_int_eq(renew(&g2), 200);
	cJSON_Delete(complete_next(&g2, NULL, 200));
	assert_status(g2.id, "succeeded");
}
END_TEST

START_TEST(test_nothing_pending_answers_empty_next)
{
	_cleanup_free_ char *r1 = NULL;
	struct grant g1;
	cJSON *j;

	start();
	r1 = enqueue();
	claim_one("c-1", "w-1", &g1);
	j = complete_next(&g1, NEXT("c-2", ""), 200);
	ck_assert_str_eq(str_at(j, "run_status"), "succeeded");
	ck_assert_int_eq(n_runs(at(j, "next")), 0);
	ck_assert_int_eq(at(at(j, "next"), "queue_depth")->valueint, 0);
	ck_assert_ptr_null(at(at(j, "next"), "error"));
	cJSON_Delete(j);
	/* without "next" the answer has none */
	j = complete_next(&g1, NULL, 200);
	ck_assert_ptr_null(at(j, "next"));
	cJSON_Delete(j);
}
END_TEST

START_TEST(test_repeated_completion_replays_next)
{
	_cleanup_free_ char *r1 = NULL, *r2 = NULL, *r3 = NULL;
	struct grant g1, g2, again;
	cJSON *j;

	start();
	r1 = enqueue();
	r2 = enqueue();
	r3 = enqueue();
	claim_one("c-1", "w-1", &g1);
	j = complete_next(&g1, NEXT("c-2", ""), 200);
	grant_of(at(j, "next"), 0, &g2);
	cJSON_Delete(j);
	/* the answer was lost: the worker repeats the whole request */
	j = complete_next(&g1, NEXT("c-2", ""), 200);
	ck_assert_str_eq(str_at(j, "run_status"), "succeeded");
	ck_assert_int_eq(n_runs(at(j, "next")), 1);
	grant_of(at(j, "next"), 0, &again);
	cJSON_Delete(j);
	ck_assert_str_eq(again.id, g2.id);
	ck_assert_str_eq(again.token, g2.token);
	/* nothing more was granted: one run is still pending */
	{
		int pending = 0;
		const char *ids[] = {r1, r2, r3};

		for (size_t i = 0; i < ELEMENTSOF(ids); i++) {
			cJSON *run = tu_lessor_get_run(L, ids[i]);

			pending += streq(str_at(run, "status"), "pending");
			cJSON_Delete(run);
		}
		ck_assert_int_eq(pending, 1);
	}
	ck_assert_int_eq(renew(&g2), 200);
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
	struct grant g1;

	start();
	r1 = enqueue();
	r2 = enqueue();
	claim_one("c-1", "w-1", &g1);
	for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
		cJSON *j = complete_next(&g1, bad[i].next, 400);

		ck_assert_str_eq(str_at(j, "error"), "invalid_request");
		ck_assert_msg(strstr(str_at(j, "message"), bad[i].names),
		              "message '%s' does not name %s", str_at(j, "message"), bad[i].names);
		ck_assert_ptr_null(at(j, "next"));
		cJSON_Delete(j);
		assert_status(g1.id, "running");
		ck_assert_int_eq(renew(&g1), 200);
	}
	assert_status(streq(g1.id, r1) ? r2 : r1, "pending");
	/* and the valid one still works */
	cJSON_Delete(complete_next(&g1, NEXT("c-2", ",\"wait_s\":0,\"held\":null"), 200));
	assert_status(g1.id, "succeeded");
}
END_TEST

START_TEST(test_refused_completion_claims_nothing)
{
	_cleanup_free_ char *r1 = NULL, *r2 = NULL;
	struct grant g1, stale, unknown = {.id = "r-999", .token = "nosuchtoken"};
	cJSON *j;

	start();
	r1 = enqueue();
	r2 = enqueue();
	claim_one("c-1", "w-1", &g1);
	stale = g1;
	snprintf(stale.token, sizeof(stale.token), "%s", "0123456789abcdef0123456789abcdef");
	j = complete_next(&stale, NEXT("c-2", ""), 409);
	ck_assert_str_eq(str_at(j, "error"), "lease_lost");
	ck_assert_ptr_null(at(j, "next"));
	cJSON_Delete(j);
	j = complete_next(&unknown, NEXT("c-3", ""), 404);
	ck_assert_ptr_null(at(j, "next"));
	cJSON_Delete(j);
	assert_status(g1.id, "running");
	assert_status(streq(g1.id, r1) ? r2 : r1, "pending");
}
END_TEST

START_TEST(test_claim_id_of_another_worker)
{
	_cleanup_free_ char *r1 = NULL, *r2 = NULL, *r3 = NULL;
	struct grant g1, g2;
	cJSON *j;

	start();
	r1 = enqueue();
	r2 = enqueue();
	r3 = enqueue();
	claim_one("c-1", "w-1", &g1);
	claim_one("c-x", "w-2", &g2);
	j = complete_next(&g1, NEXT("c-x", ""), 200);
	ck_assert_str_eq(str_at(j, "run_status"), "succeeded");
	ck_assert_int_eq(n_runs(at(j, "next")), 0);
	ck_assert_str_eq(str_at(at(j, "next"), "error"), "invalid_request");
	ck_assert_str_ne(str_at(at(j, "next"), "message"), "");
	cJSON_Delete(j);
	assert_status(g1.id, "succeeded");
	assert_status(r3, "pending");
	ck_assert_int_eq(renew(&g2), 200); /* w-2's lease is left alone */
}
END_TEST

START_TEST(test_legacy_fault_ignores_next)
{
	_cleanup_free_ char *r1 = NULL, *r2 = NULL;
	struct grant g1;
	long status = 0;
	cJSON *j;

	start();
	r1 = enqueue();
	r2 = enqueue();
	claim_one("c-1", "w-1", &g1);
	ck_assert_int_eq(tu_lessor_json(L, "POST", "/v1/admin/faults",
	                                "{\"endpoint\":\"claims\",\"legacy\":true,\"count\":1}",
	                                &status, NULL),
	                 0);
	ck_assert_int_eq(status, 200);
	j = complete_next(&g1, NEXT("c-2", ""), 200);
	ck_assert_str_eq(str_at(j, "run_status"), "succeeded");
	ck_assert_ptr_null(at(j, "next"));
	cJSON_Delete(j);
	assert_status(streq(g1.id, r1) ? r2 : r1, "pending");
}
END_TEST

START_TEST(test_claim_cancel_releases_embedded_claim)
{
	_cleanup_free_ char *r1 = NULL, *r2 = NULL;
	struct grant g1, g2;
	cJSON *j;

	start();
	r1 = enqueue();
	r2 = enqueue();
	claim_one("c-1", "w-1", &g1);
	j = complete_next(&g1, NEXT("c-2", ""), 200);
	grant_of(at(j, "next"), 0, &g2);
	cJSON_Delete(j);
	j = wreq("/v1/claims/c-2/cancel", "{}", 200);
	ck_assert_int_eq(at(j, "released")->valueint, 1);
	cJSON_Delete(j);
	assert_status(g2.id, "pending");
	ck_assert_int_eq(renew(&g2), 409);
}
END_TEST

START_TEST(test_scoped_token_names_the_worker)
{
	_cleanup_free_ char *r1 = NULL, *r2 = NULL, *path = NULL, *url = NULL;
	struct grant g1, g2;
	cJSON *j, *run = NULL;
	long status = 0;

	start_scoped();
	r1 = enqueue();
	r2 = enqueue();
	claim_one("c-1", "host-1", &g1);
	j = complete_next(&g1, NEXT("c-2", ""), 200); /* the body says w-1 */
	grant_of(at(j, "next"), 0, &g2);
	cJSON_Delete(j);
	path = tu_fmt("/v1/runs/%s", g2.id);
	ck_assert_int_eq(tu_lessor_json(L, "GET", path, NULL, &status, &run), 0);
	ck_assert_int_eq(status, 200);
	ck_assert_str_eq(str_at(at(run, "lease"), "worker_id"), "alpha");
	cJSON_Delete(run);
	ck_assert_int_eq(renew(&g2), 200);
	/* another worker's token does not reach the granted run */
	worker_token = TOK_B;
	ck_assert_int_eq(renew(&g2), 409);
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
