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

#define ADMIN "admin-0123456789abcdef"
#define TOK_A "alpha-0123456789abcdef"
#define TOK_B "beta-0123456789abcdef0"
#define OTHER_TOKEN "0123456789abcdef0123456789abcdef"

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

/* A worker request (with the worker token when scoped): its status, and
 * its answer in *ret (may be NULL). */
static long wreq(const char *path, const char *body, cJSON **ret)
{
	_cleanup_free_ char *url = tu_fmt("%s%s", tu_lessor_url(L), path);
	long status = 0;

	if (worker_token)
		ck_assert_int_eq(tu_http_json("POST", url, worker_token, body, &status, ret), 0);
	else
		ck_assert_int_eq(tu_lessor_json(L, "POST", path, body, &status, ret), 0);
	return status;
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

static void fault(const char *body, long want)
{
	long status = 0;

	ck_assert_int_eq(tu_lessor_json(L, "POST", "/v1/admin/faults", body, &status, NULL), 0);
	ck_assert_int_eq(status, want);
}

struct grant {
	char id[64], token[64];
};

/* Enqueues n runs and claims them all with lease_ttl_s ttl. */
static void claim_n(const char *claim_id, int n, unsigned ttl, struct grant *g)
{
	_cleanup_free_ char *body = tu_fmt("{\"claim_id\":\"%s\",\"worker_id\":\"w-1\","
	                                   "\"max_runs\":%d,\"lease_ttl_s\":%u,\"wait_s\":0}",
	                                   claim_id, n, ttl);
	cJSON *j = NULL;

	for (int i = 0; i < n; i++)
		free(tu_lessor_enqueue(L, "{\"workflow\":\"build\"}"));
	ck_assert_int_eq(wreq("/v1/claims", body, &j), 200);
	ck_assert_int_eq(cJSON_GetArraySize(at(j, "runs")), n);
	for (int i = 0; i < n; i++) {
		const cJSON *run = cJSON_GetArrayItem(at(j, "runs"), i);

		snprintf(g[i].id, sizeof(g[i].id), "%s", str_at(run, "id"));
		snprintf(g[i].token, sizeof(g[i].token), "%s", str_at(at(run, "lease"), "token"));
		ck_assert_str_ne(g[i].token, "");
	}
	cJSON_Delete(j);
}

/* {"worker_id", "ttl_s", "leases": [...the n grants...]} */
static char *batch_body(const struct grant *g, size_t n, unsigned ttl)
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

static long batch(const struct grant *g, size_t n, unsigned ttl, cJSON **ret)
{
	_cleanup_free_ char *body = batch_body(g, n, ttl);

	return wreq("/v1/leases/renew", body, ret);
}

/* The i-th entry of a batch answer, which names id. */
static const cJSON *entry(const cJSON *answer, int i, const char *id)
{
	const cJSON *e = cJSON_GetArrayItem(at(answer, "leases"), i);

	ck_assert_ptr_nonnull(e);
	ck_assert_str_eq(str_at(e, "id"), id);
	return e;
}

static void assert_renewed(const cJSON *answer, int i, const char *id, unsigned ttl, bool cancel)
{
	const cJSON *e = entry(answer, i, id);

	ck_assert_ptr_null(at(e, "error"));
	ck_assert(cJSON_IsNumber(at(e, "ttl_s")));
	ck_assert_int_eq(at(e, "ttl_s")->valueint, ttl);
	ck_assert(cJSON_IsBool(at(e, "cancel_requested")));
	ck_assert_int_eq(cJSON_IsTrue(at(e, "cancel_requested")), cancel);
}

static void assert_refused(const cJSON *answer, int i, const char *id, const char *error)
{
	const cJSON *e = entry(answer, i, id);

	ck_assert_str_eq(str_at(e, "error"), error);
	ck_assert_ptr_null(at(e, "ttl_s"));
}

static cJSON *get_run(const char *id)
{
	cJSON *run = tu_lessor_get_run(L, id);

	ck_assert_ptr_nonnull(run);
	return run;
}

static void assert_status(const char *id, const char *want)
{
	cJSON *run = get_run(id);

	ck_assert_str_eq(str_at(run, "status"), want);
	cJSON_Delete(run);
}

static long long expires_ms(const char *id)
{
	cJSON *run = get_run(id);
	long long ms = tu_rfc3339_ms(str_at(run, "lease_expires_at"));

	cJSON_Delete(run);
	ck_assert_int_gt(ms, 0);
	return ms;
}

static int rejected_writes(const char *id)
{
	cJSON *run = get_run(id);
	int n = at(run, "rejected_writes")->valueint;

	cJSON_Delete(run);
	return n;
}

static long renew_one(const struct grant *g)
{
	_cleanup_free_ char *path = tu_fmt("/v1/runs/%s/lease", g->id);
	_cleanup_free_ char *body = tu_fmt("{\"token\":\"%s\",\"ttl_s\":60}", g->token);

	return wreq(path, body, NULL);
}

START_TEST(test_renews_every_lease)
{
	struct grant g[3];
	long long before[2];
	cJSON *j = NULL;

	start();
	claim_n("c-1", 3, 1, g);
	before[0] = expires_ms(g[0].id);
	before[1] = expires_ms(g[1].id);
	ck_assert_int_eq(batch(g, 2, 30, &j), 200);
	ck_assert_int_eq(cJSON_GetArraySize(at(j, "leases")), 2);
	assert_renewed(j, 0, g[0].id, 30, false);
	assert_renewed(j, 1, g[1].id, 30, false);
	cJSON_Delete(j);
	ck_assert_int_ge(expires_ms(g[0].id), before[0] + 25000);
	ck_assert_int_ge(expires_ms(g[1].id), before[1] + 25000);
	/* the lease left out expires after its 1 s; the renewed ones outlive it */
	ck_assert_int_eq(
	    tu_lessor_wait_status(L, g[2].id, "pending", tu_timeout(10 * USEC_PER_SEC)), 0);
	assert_status(g[0].id, "running");
	assert_status(g[1].id, "running");
	ck_assert_int_eq(renew_one(&g[0]), 200);
	ck_assert_int_eq(renew_one(&g[1]), 200);
	ck_assert_int_eq(renew_one(&g[2]), 409);
}
END_TEST

START_TEST(test_each_entry_answers_in_order)
{
	struct grant g[3], v[5];
	cJSON *j = NULL;

	start();
	claim_n("c-1", 3, 60, g);
	v[0] = g[0];
	v[1] = g[1];
	snprintf(v[1].token, sizeof(v[1].token), "%s", OTHER_TOKEN); /* stale */
	v[2] = (struct grant){.id = "r-999", .token = OTHER_TOKEN};
	v[3] = (struct grant){.id = "no-such-run", .token = OTHER_TOKEN};
	v[4] = g[2];
	ck_assert_int_eq(batch(v, 5, 120, &j), 200);
	ck_assert_int_eq(cJSON_GetArraySize(at(j, "leases")), 5);
	assert_renewed(j, 0, g[0].id, 120, false);
	assert_refused(j, 1, g[1].id, "lease_lost");
	assert_refused(j, 2, "r-999", "not_found");
	assert_refused(j, 3, "no-such-run", "not_found");
	assert_renewed(j, 4, g[2].id, 120, false);
	cJSON_Delete(j);
	/* the stale write is counted as a single renewal's is; the lease stands */
	ck_assert_int_eq(rejected_writes(g[1].id), 1);
	ck_assert_int_eq(rejected_writes(g[0].id), 0);
	ck_assert_int_eq(renew_one(&g[1]), 200);
}
END_TEST

START_TEST(test_lease_past_deadline_is_lost)
{
	struct grant g[2];
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
	assert_status(g[1].id, "pending");
}
END_TEST

START_TEST(test_cancel_requested_per_lease)
{
	_cleanup_free_ char *path = NULL;
	struct grant g[3];
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
static void assert_refused_whole(const char *body, const char *names, const struct grant *g,
                                 size_t n)
{
	long long before[8];
	cJSON *j = NULL;

	ck_assert_uint_le(n, ELEMENTSOF(before));
	for (size_t i = 0; i < n; i++)
		before[i] = expires_ms(g[i].id);
	ck_assert_int_eq(wreq("/v1/leases/renew", body, &j), 400);
	ck_assert_str_eq(str_at(j, "error"), "invalid_request");
	ck_assert_msg(strstr(str_at(j, "message"), names), "message '%s' does not name %s",
	              str_at(j, "message"), names);
	ck_assert_ptr_null(at(j, "leases"));
	cJSON_Delete(j);
	for (size_t i = 0; i < n; i++)
		ck_assert_int_eq(expires_ms(g[i].id), before[i]);
}

START_TEST(test_duplicate_id_renews_nothing)
{
	struct grant g[2], v[3];
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

/* tmpl with "@N" as the N-th grant's id and "#N" as its token (free it). */
static char *fill(const char *tmpl, const struct grant *g)
{
	char *s = strdup("");

	ck_assert_ptr_nonnull(s);
	for (const char *p = tmpl; *p; p++) {
		bool var = (*p == '@' || *p == '#') && p[1] >= '0' && p[1] <= '9';
		char *t =
		    var ? tu_fmt("%s%s", s, *p == '@' ? g[p[1] - '0'].id : g[p[1] - '0'].token)
		        : tu_fmt("%s%c", s, *p);

		p += var;
		free(s);
		s = t;
	}
	return s;
}

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
	struct grant g[2];

	start();
	claim_n("c-1", 2, 60, g);
	for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
		_cleanup_free_ char *body = fill(bad[i].body, g);

		assert_refused_whole(body, bad[i].names, g, 2);
	}
}
END_TEST

START_TEST(test_at_most_renew_max)
{
	_cleanup_free_ struct grant *v = calloc(V1_RENEW_MAX + 1, sizeof(*v));
	_cleanup_free_ char *body = NULL;
	cJSON *j = NULL;

	start();
	ck_assert_ptr_nonnull(v);
	claim_n("c-1", 1, 60, v);
	for (int i = 1; i <= V1_RENEW_MAX; i++) {
		v[i] = (struct grant){.token = OTHER_TOKEN};
		snprintf(v[i].id, sizeof(v[i].id), "r-%d", 100000 + i);
	}
	body = batch_body(v, V1_RENEW_MAX + 1, 3000);
	assert_refused_whole(body, "'leases'", v, 1);
	/* exactly V1_RENEW_MAX is fine, each answered */
	ck_assert_int_eq(batch(v, V1_RENEW_MAX, 90, &j), 200);
	ck_assert_int_eq(cJSON_GetArraySize(at(j, "leases")), V1_RENEW_MAX);
	assert_renewed(j, 0, v[0].id, 90, false);
	assert_refused(j, V1_RENEW_MAX - 1, v[V1_RENEW_MAX - 1].id, "not_found");
	cJSON_Delete(j);
}
END_TEST

START_TEST(test_scoped_token_reaches_own_leases)
{
	struct grant a[2], b[1], v[3];
	long status = 0;
	cJSON *j = NULL;

	start_scoped();
	claim_n("c-a", 2, 60, a);
	worker_token = TOK_B;
	claim_n("c-b", 1, 60, b);
	worker_token = TOK_A;
	v[0] = a[0];
	v[1] = b[0];
	v[2] = a[1];
	ck_assert_int_eq(batch(v, 3, 90, &j), 200);
	assert_renewed(j, 0, a[0].id, 90, false);
	assert_refused(j, 1, b[0].id, "lease_lost");
	assert_renewed(j, 2, a[1].id, 90, false);
	cJSON_Delete(j);
	/* beta's lease was left alone: not even counted as refused */
	ck_assert_int_eq(rejected_writes(b[0].id), 0);
	worker_token = TOK_B;
	ck_assert_int_eq(renew_one(&b[0]), 200);
	/* the admin token is not a worker's */
	{
		_cleanup_free_ char *url = tu_fmt("%s/v1/leases/renew", tu_lessor_url(L));
		_cleanup_free_ char *body = batch_body(a, 2, 90);

		ck_assert_int_eq(tu_http_json("POST", url, ADMIN, body, &status, NULL), 0);
		ck_assert_int_eq(status, 403);
		ck_assert_int_eq(tu_http_json("POST", url, NULL, body, &status, NULL), 0);
		ck_assert_int_eq(status, 401);
	}
}
END_TEST

START_TEST(test_legacy_fault_answers_404)
{
	struct grant g[1];
	long long before;
	cJSON *j = NULL;

	start();
	claim_n("c-1", 1, 60, g);
	/* legacy is a lease fault that answers: no status of its own */
	fault("{\"endpoint\":\"lease\",\"legacy\":true,\"status\":503}", 400);
	fault("{\"endpoint\":\"log\",\"legacy\":true}", 400);
	fault("{\"endpoint\":\"lease\",\"legacy\":true,\"count\":2}", 200);
	/* the single renewal is not affected, and does not use the fault up */
	ck_assert_int_eq(renew_one(&g[0]), 200);
	before = expires_ms(g[0].id);
	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(batch(g, 1, 3000, &j), 404);
		ck_assert_str_eq(str_at(j, "error"), "not_found");
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
	struct grant g[2];
	long long before;
	cJSON *j = NULL;

	start();
	claim_n("c-1", 2, 60, g);
	before = expires_ms(g[0].id);
	/* one batch is one request against the fault's count */
	fault("{\"endpoint\":\"lease\",\"status\":503,\"count\":1}", 200);
	ck_assert_int_eq(batch(g, 2, 3000, &j), 503);
	ck_assert_str_eq(str_at(j, "error"), "injected");
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
