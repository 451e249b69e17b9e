/* Many leases renewed in one request: POST /v1/leases/renew
 * (docs/protocol.md, section 2).  Against a real `lessor serve`: every
 * lease's deadline moves, each entry answers on its own in request order, a
 * malformed request renews nothing, scoped tokens reach only their own
 * leases, and the lease faults (legacy: 404, as an older server) apply. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonutil.h"
#include "lessor_proc.h"
#include "proto/v1.h"
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

/* Enqueues n runs and claims them all with lease_ttl_s ttl. */
static void claim_n(const char *claim_id, int n, unsigned ttl, struct tu_grant *g)
{
	_cleanup_free_ char *body = tu_fmt("{\"claim_id\":\"%s\",\"worker_id\":\"w-1\","
	                                   "\"max_runs\":%d,\"lease_ttl_s\":%u,\"wait_s\":0}",
	                                   claim_id, n, ttl);

	for (int i = 0; i < n; i++)
		free(tu_lessor_enqueue(L, "{\"workflow\":\"build\"}"));
	tu_worker_claim(L, worker_token, body, n, g);
}

/* {"worker_id", "ttl_s", "leases": [...the n grants...]} */
static char *batch_body(const struct tu_grant *g, size_t n, unsigned ttl)
{
	char *s = tu_fmt("{\"worker_id\":\"w-1\",\"ttl_s\":%u,\"leases\":[", ttl);

	for (size_t i = 0; i < n; i++) {
		char *t = tu_fmt("%s%s{\"id\":\"%s\",\"token\":\"%s\"}", s, i ? "," : "", g[i].id,
		                 g[i].token);

		free(s);
		s = t;
	}
	{
		char *t = tu_fmt("%s]}", s);

		free(s);
		s = t;
	}
	return s;
}

static long batch(const struct tu_grant *g, size_t n, unsigned ttl, cJSON **ret)
{
	_cleanup_free_ char *body = batch_body(g, n, ttl);

	return tu_worker_post(L, worker_token, "/v1/leases/renew", body, ret);
}

static void assert_renewed(const cJSON *answer, int i, const char *id, unsigned ttl, bool cancel)
{
	const cJSON *e = tu_worker_entry(answer, "leases", i, id);

	ck_assert_ptr_null(tu_jget(e, "error"));
	ck_assert(cJSON_IsNumber(tu_jget(e, "ttl_s")));
	ck_assert_int_eq(tu_jget(e, "ttl_s")->valueint, ttl);
	ck_assert(cJSON_IsBool(tu_jget(e, "cancel_requested")));
	ck_assert_int_eq(cJSON_IsTrue(tu_jget(e, "cancel_requested")), cancel);
}

static void assert_refused(const cJSON *answer, int i, const char *id, const char *error)
{
	const cJSON *e = tu_worker_entry(answer, "leases", i, id);

	ck_assert_str_eq(tu_jstr_or(e, "error", ""), error);
	ck_assert_ptr_null(tu_jget(e, "ttl_s"));
}

static long long expires_ms(const char *id)
{
	cJSON *run = tu_worker_get_run(L, id);
	long long ms = tu_rfc3339_ms(tu_jstr_or(run, "lease_expires_at", ""));

	cJSON_Delete(run);
	ck_assert_int_gt(ms, 0);
	return ms;
}

START_TEST(test_renews_every_lease)
{
	struct tu_grant g[3];
	long long before[2];
	cJSON *j = NULL;

	start();
	claim_n("c-1", 3, 1, g);
	before[0] = expires_ms(g[0].id);
	before[1] = expires_ms(g[1].id);
	ck_assert_int_eq(batch(g, 2, 30, &j), 200);
	ck_assert_int_eq(cJSON_GetArraySize(tu_jget(j, "leases")), 2);
	assert_renewed(j, 0, g[0].id, 30, false);
	assert_renewed(j, 1, g[1].id, 30, false);
	cJSON_Delete(j);
	ck_assert_int_ge(expires_ms(g[0].id), before[0] + 25000);
	ck_assert_int_ge(expires_ms(g[1].id), before[1] + 25000);
	/* the lease left out expires after its 1 s; the renewed ones outlive it */
	ck_assert_int_eq(
	    tu_lessor_wait_status(L, g[2].id, "pending", tu_timeout(10 * USEC_PER_SEC)), 0);
	tu_worker_assert_status(L, g[0].id, "running");
	tu_worker_assert_status(L, g[1].id, "running");
	ck_assert_int_eq(tu_worker_renew(L, worker_token, &g[0]), 200);
	ck_assert_int_eq(tu_worker_renew(L, worker_token, &g[1]), 200);
	ck_assert_int_eq(tu_worker_renew(L, worker_token, &g[2]), 409);
}
END_TEST

START_TEST(test_each_entry_answers_in_order)
{
	struct tu_grant g[3], v[5];
	cJSON *j = NULL;

	start();
	claim_n("c-1", 3, 60, g);
	v[0] = g[0];
	v[1] = g[1];
	snprintf(v[1].token, sizeof(v[1].token), "%s", TU_OTHER_TOKEN); /* stale */
	v[2] = (struct tu_grant){.id = "r-999", .token = TU_OTHER_TOKEN};
	v[3] = (struct tu_grant){.id = "no-such-run", .token = TU_OTHER_TOKEN};
	v[4] = g[2];
	ck_assert_int_eq(batch(v, 5, 120, &j), 200);
	ck_assert_int_eq(cJSON_GetArraySize(tu_jget(j, "leases")), 5);
	assert_renewed(j, 0, g[0].id, 120, false);
	assert_refused(j, 1, g[1].id, "lease_lost");
	assert_refused(j, 2, "r-999", "not_found");
	assert_refused(j, 3, "no-such-run", "not_found");
	assert_renewed(j, 4, g[2].id, 120, false);
	cJSON_Delete(j);
	/* the stale write is counted as a single renewal's is; the lease stands */
	ck_assert_int_eq(tu_worker_rejected_writes(L, g[1].id), 1);
	ck_assert_int_eq(tu_worker_rejected_writes(L, g[0].id), 0);
	ck_assert_int_eq(tu_worker_renew(L, worker_token, &g[1]), 200);
}
END_TEST

START_TEST(test_lease_past_deadline_is_lost)
{
	struct tu_grant g[2];
	cJSON *j = NULL;

	start();
	claim_n("c-1", 1, 60, g);
	claim_n("c-2", 1, 1, g + 1);
	ck_assert_int_eq(
	    tu_lessor_wait_status(L, g[1].id, "pending", tu_timeout(10 * USEC_PER_SEC)), 0);
	ck_assert_int_eq(batch(g, 2, 60, &j), 200);
	assert_renewed(j, 0, g[0].id, 60, false);
	assert_refused(j, 1, g[1].id, "lease_lost");
	cJSON_Delete(j);
	tu_worker_assert_status(L, g[1].id, "pending");
}
END_TEST

START_TEST(test_cancel_requested_per_lease)
{
	_cleanup_free_ char *path = NULL;
	struct tu_grant g[3];
	long status = 0;
	cJSON *j = NULL;

	start();
	claim_n("c-1", 3, 60, g);
	path = tu_fmt("/v1/runs/%s/cancel", g[1].id);
	ck_assert_int_eq(tu_lessor_json(L, "POST", path, "{}", &status, NULL), 0);
	ck_assert_int_eq(status, 200);
	ck_assert_int_eq(batch(g, 3, 60, &j), 200);
	assert_renewed(j, 0, g[0].id, 60, false);
	assert_renewed(j, 1, g[1].id, 60, true);
	assert_renewed(j, 2, g[2].id, 60, false);
	cJSON_Delete(j);
}
END_TEST

/* A refused request renews nothing: every deadline is where it was. */
static void assert_refused_whole(const char *body, const char *names, const struct tu_grant *g,
                                 size_t n)
{
	long long before[8];
	cJSON *j = NULL;

	ck_assert_uint_le(n, ELEMENTSOF(before));
	for (size_t i = 0; i < n; i++)
		before[i] = expires_ms(g[i].id);
	ck_assert_int_eq(tu_worker_post(L, worker_token, "/v1/leases/renew", body, &j), 400);
	ck_assert_str_eq(tu_jstr_or(j, "error", ""), "invalid_request");
	ck_assert_msg(strstr(tu_jstr_or(j, "message", ""), names), "message '%s' does not name %s",
	              tu_jstr_or(j, "message", ""), names);
	ck_assert_ptr_null(tu_jget(j, "leases"));
	cJSON_Delete(j);
	for (size_t i = 0; i < n; i++)
		ck_assert_int_eq(expires_ms(g[i].id), before[i]);
}

START_TEST(test_duplicate_id_renews_nothing)
{
	struct tu_grant g[2], v[3];
	_cleanup_free_ char *body = NULL;

	start();
	claim_n("c-1", 2, 60, g);
	v[0] = g[0];
	v[1] = g[1];
	v[2] = g[0];
	body = batch_body(v, 3, 3000);
	assert_refused_whole(body, "leases[2].id", g, 2);
}
END_TEST

START_TEST(test_malformed_entry_renews_nothing)
{
	static const struct {
		const char *body, *names;
	} bad[] = {
	    {"{\"ttl_s\":3000,\"leases\":[{\"id\":\"@0\",\"token\":\"#0\"},{\"id\":\"@1\"}]}",
	     "'leases[1].token'"},
	    {"{\"ttl_s\":3000,\"leases\":[{\"id\":\"@0\",\"token\":\"#0\"},"
	     "{\"id\":\"bad id\",\"token\":\"#1\"}]}",
	     "'leases[1].id'"},
	    {"{\"ttl_s\":3000,\"leases\":[{\"id\":\"@0\",\"token\":\"#0\"},\"@1\"]}",
	     "'leases[1]'"},
	    {"{\"ttl_s\":3000,\"leases\":[{\"id\":\"@0\",\"token\":7}]}", "'leases[0].token'"},
	    {"{\"ttl_s\":3000,\"leases\":{\"id\":\"@0\",\"token\":\"#0\"}}", "'leases'"},
	    {"{\"ttl_s\":3000,\"leases\":[]}", "'leases'"},
	    {"{\"ttl_s\":3000}", "'leases'"},
	    {"{\"leases\":[{\"id\":\"@0\",\"token\":\"#0\"}]}", "'ttl_s'"},
	    {"{\"ttl_s\":0,\"leases\":[{\"id\":\"@0\",\"token\":\"#0\"}]}", "'ttl_s'"},
	    {"{\"ttl_s\":3601,\"leases\":[{\"id\":\"@0\",\"token\":\"#0\"}]}", "'ttl_s'"},
	    {"{\"worker_id\":\"bad worker\",\"ttl_s\":30,"
	     "\"leases\":[{\"id\":\"@0\",\"token\":\"#0\"}]}",
	     "'worker_id'"},
	};
	struct tu_grant g[2];

	start();
	claim_n("c-1", 2, 60, g);
	for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
		_cleanup_free_ char *body = tu_worker_fill(bad[i].body, g);

		assert_refused_whole(body, bad[i].names, g, 2);
	}
}
END_TEST

START_TEST(test_at_most_renew_max)
{
	_cleanup_free_ struct tu_grant *v = calloc(V1_RENEW_MAX + 1, sizeof(*v));
	_cleanup_free_ char *body = NULL;
	cJSON *j = NULL;

	start();
	ck_assert_ptr_nonnull(v);
	claim_n("c-1", 1, 60, v);
	for (int i = 1; i <= V1_RENEW_MAX; i++) {
		v[i] = (struct tu_grant){.token = TU_OTHER_TOKEN};
		snprintf(v[i].id, sizeof(v[i].id), "r-%d", 100000 + i);
	}
	body = batch_body(v, V1_RENEW_MAX + 1, 3000);
	assert_refused_whole(body, "'leases'", v, 1);
	/* exactly V1_RENEW_MAX is fine, each answered */
	ck_assert_int_eq(batch(v, V1_RENEW_MAX, 90, &j), 200);
	ck_assert_int_eq(cJSON_GetArraySize(tu_jget(j, "leases")), V1_RENEW_MAX);
	assert_renewed(j, 0, v[0].id, 90, false);
	assert_refused(j, V1_RENEW_MAX - 1, v[V1_RENEW_MAX - 1].id, "not_found");
	cJSON_Delete(j);
}
END_TEST

START_TEST(test_scoped_token_reaches_own_leases)
{
	struct tu_grant a[2], b[1], v[3];
	cJSON *j = NULL;

	tu_worker_start_scoped(&L, &worker_token);
	claim_n("c-a", 2, 60, a);
	worker_token = TU_BETA_TOKEN;
	claim_n("c-b", 1, 60, b);
	worker_token = TU_ALPHA_TOKEN;
	v[0] = a[0];
	v[1] = b[0];
	v[2] = a[1];
	ck_assert_int_eq(batch(v, 3, 90, &j), 200);
	assert_renewed(j, 0, a[0].id, 90, false);
	assert_refused(j, 1, b[0].id, "lease_lost");
	assert_renewed(j, 2, a[1].id, 90, false);
	cJSON_Delete(j);
	/* beta's lease was left alone: not even counted as refused */
	ck_assert_int_eq(tu_worker_rejected_writes(L, b[0].id), 0);
	worker_token = TU_BETA_TOKEN;
	ck_assert_int_eq(tu_worker_renew(L, worker_token, &b[0]), 200);
	/* the admin token is not a worker's */
	{
		_cleanup_free_ char *body = batch_body(a, 2, 90);

		tu_worker_assert_workers_only(L, "/v1/leases/renew", body);
	}
}
END_TEST

START_TEST(test_legacy_fault_answers_404)
{
	struct tu_grant g[1];
	long long before;
	cJSON *j = NULL;

	start();
	claim_n("c-1", 1, 60, g);
	/* legacy is a lease fault that answers: no status of its own */
	tu_worker_fault(L, "{\"endpoint\":\"lease\",\"legacy\":true,\"status\":503}", 400);
	tu_worker_fault(L, "{\"endpoint\":\"log\",\"legacy\":true}", 400);
	tu_worker_fault(L, "{\"endpoint\":\"lease\",\"legacy\":true,\"count\":2}", 200);
	/* the single renewal is not affected, and does not use the fault up */
	ck_assert_int_eq(tu_worker_renew(L, worker_token, &g[0]), 200);
	before = expires_ms(g[0].id);
	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(batch(g, 1, 3000, &j), 404);
		ck_assert_str_eq(tu_jstr_or(j, "error", ""), "not_found");
		cJSON_Delete(j);
		j = NULL;
	}
	ck_assert_int_eq(expires_ms(g[0].id), before);
	ck_assert_int_eq(batch(g, 1, 3000, &j), 200);
	assert_renewed(j, 0, g[0].id, 3000, false);
	cJSON_Delete(j);
}
END_TEST

START_TEST(test_lease_fault_applies)
{
	struct tu_grant g[2];
	long long before;
	cJSON *j = NULL;

	start();
	claim_n("c-1", 2, 60, g);
	before = expires_ms(g[0].id);
	/* one batch is one request against the fault's count */
	tu_worker_fault(L, "{\"endpoint\":\"lease\",\"status\":503,\"count\":1}", 200);
	ck_assert_int_eq(batch(g, 2, 3000, &j), 503);
	ck_assert_str_eq(tu_jstr_or(j, "error", ""), "injected");
	cJSON_Delete(j);
	j = NULL;
	ck_assert_int_eq(expires_ms(g[0].id), before);
	ck_assert_int_eq(batch(g, 2, 3000, &j), 200);
	assert_renewed(j, 0, g[0].id, 3000, false);
	assert_renewed(j, 1, g[1].id, 3000, false);
	cJSON_Delete(j);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("renew_batch");
	TCase *t = tcase_create("batch");

	tcase_add_checked_fixture(t, NULL, teardown);
	tcase_set_timeout(t, 60);
	tcase_add_test(t, test_renews_every_lease);
	tcase_add_test(t, test_each_entry_answers_in_order);
	tcase_add_test(t, test_lease_past_deadline_is_lost);
	tcase_add_test(t, test_cancel_requested_per_lease);
	tcase_add_test(t, test_duplicate_id_renews_nothing);
	tcase_add_test(t, test_malformed_entry_renews_nothing);
	tcase_add_test(t, test_at_most_renew_max);
	tcase_add_test(t, test_scoped_token_reaches_own_leases);
	tcase_add_test(t, test_legacy_fault_answers_404);
	tcase_add_test(t, test_lease_fault_applies);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	return tu_run(suite());
}
