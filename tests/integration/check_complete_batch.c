/* Many completions in one request: POST /v1/completions (docs/protocol.md,
 * section 4).  Against a real `lessor serve`: every completion is recorded,
 * each entry answers on its own in request order (its "next" too), a
 * malformed request records nothing, a repeat answers the same, the batch
 * is one commit, scoped tokens reach only their own leases, and the
 * complete faults apply (legacy: 404, as an older server). */
#include <check.h>
#include <stdarg.h>
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

static void enqueue_n(int n)
{
	for (int i = 0; i < n; i++) {
		char *id = tu_lessor_enqueue(L, "{\"workflow\":\"build\"}");

		ck_assert_ptr_nonnull(id);
		free(id);
	}
}

/* Claims n of the pending runs (there must be that many). */
static void claim_n(const char *claim_id, const char *worker, int n, struct tu_grant *g)
{
	_cleanup_free_ char *body = tu_fmt("{\"claim_id\":\"%s\",\"worker_id\":\"%s\","
	                                   "\"max_runs\":%d,\"lease_ttl_s\":60,\"wait_s\":0}",
	                                   claim_id, worker, n);

	tu_worker_claim(L, worker_token, body, n, g);
}

/* One entry of a batch: the run's grant, its status ("succeeded", "failed",
 * "cancelled"; NULL: "succeeded") and its "next" claim body (NULL: none). */
struct item {
	struct tu_grant g;
	const char *status;
	const char *next;
};

#define NEXT(claim_id)                                                                             \
	"{\"claim_id\":\"" claim_id "\",\"worker_id\":\"w-1\",\"max_runs\":1,\"lease_ttl_s\":60,"  \
	"\"workflows\":[\"build\"],\"tags\":[]}"

static void append(char **s, char *t)
{
	char *u = tu_fmt("%s%s", *s, t);

	free(*s);
	free(t);
	*s = u;
}

static char *batch_body(const struct item *v, size_t n)
{
	char *s = strdup("{\"completions\":[");

	for (size_t i = 0; i < n; i++) {
		const char *status = v[i].status ? v[i].status : "succeeded";

		append(&s, tu_fmt("%s{\"id\":\"%s\",\"token\":\"%s\",\"status\":\"%s\","
		                  "\"reason\":\"%s\",\"exit_code\":%d,\"duration_ms\":12,"
		                  "\"log_length\":0,\"output\":{\"n\":%zu}%s%s}",
		                  i ? "," : "", v[i].g.id, v[i].g.token, status,
		                  streq(status, "cancelled") ? "cancelled" : "exit",
		                  streq(status, "succeeded") ? 0 : 3, i,
		                  v[i].next ? ",\"next\":" : "", v[i].next ? v[i].next : ""));
	}
	append(&s, strdup("]}"));
	return s;
}

static long batch(const struct item *v, size_t n, cJSON **ret)
{
	_cleanup_free_ char *body = batch_body(v, n);

	return tu_worker_post(L, worker_token, "/v1/completions", body, ret);
}

static const cJSON *assert_done(const cJSON *answer, int i, const char *id, const char *status)
{
	const cJSON *e = tu_worker_entry(answer, "completions", i, id);

	ck_assert_ptr_null(tu_jget(e, "error"));
	ck_assert_str_eq(tu_jstr_or(e, "run_status", ""), status);
	return e;
}

static void assert_refused(const cJSON *answer, int i, const char *id, const char *error)
{
	const cJSON *e = tu_worker_entry(answer, "completions", i, id);

	ck_assert_str_eq(tu_jstr_or(e, "error", ""), error);
	ck_assert_str_ne(tu_jstr_or(e, "message", ""), "");
	ck_assert_ptr_null(tu_jget(e, "run_status"));
	ck_assert_ptr_null(tu_jget(e, "next"));
}

static long complete_one(const struct tu_grant *g, cJSON **ret)
{
	_cleanup_free_ char *path = tu_fmt("/v1/runs/%s/complete", g->id);
	_cleanup_free_ char *body = tu_fmt("{\"token\":\"%s\",\"status\":\"succeeded\","
	                                   "\"reason\":\"exit\",\"exit_code\":0}",
	                                   g->token);

	return tu_worker_post(L, worker_token, path, body, ret);
}

static int n_pending(void)
{
	long status = 0;
	cJSON *s = NULL;
	int n;

	ck_assert_int_eq(tu_lessor_json(L, "GET", "/v1/stats", NULL, &status, &s), 0);
	ck_assert_int_eq(status, 200);
	n = tu_jget(s, "pending")->valueint;
	cJSON_Delete(s);
	return n;
}

START_TEST(test_records_each_completion)
{
	struct tu_grant g[3];
	struct item v[3];
	cJSON *j = NULL, *run;

	start();
	enqueue_n(3);
	claim_n("c-1", "w-1", 3, g);
	v[0] = (struct item){.g = g[0], .status = "succeeded"};
	v[1] = (struct item){.g = g[1], .status = "failed"};
	v[2] = (struct item){.g = g[2], .status = "cancelled"};
	ck_assert_int_eq(batch(v, 3, &j), 200);
	ck_assert_int_eq(cJSON_GetArraySize(tu_jget(j, "completions")), 3);
	assert_done(j, 0, g[0].id, "succeeded");
	assert_done(j, 1, g[1].id, "failed");
	assert_done(j, 2, g[2].id, "cancelled");
	/* none asked for */
	ck_assert_ptr_null(tu_jget(tu_worker_entry(j, "completions", 0, g[0].id), "next"));
	cJSON_Delete(j);
	tu_worker_assert_status(L, g[0].id, "succeeded");
	tu_worker_assert_status(L, g[1].id, "failed");
	tu_worker_assert_status(L, g[2].id, "cancelled");
	/* every member was recorded as the single completion records it */
	run = tu_worker_get_run(L, g[1].id);
	ck_assert_str_eq(tu_jstr_or(run, "outcome", ""), "failed");
	ck_assert_str_eq(tu_jstr_or(run, "reason", ""), "exit");
	ck_assert_int_eq(tu_jget(run, "exit_code")->valueint, 3);
	ck_assert_int_eq(tu_jget(run, "duration_ms")->valueint, 12);
	ck_assert_int_eq(tu_jget(tu_jget(run, "output"), "n")->valueint, 1);
	cJSON_Delete(run);
	/* the leases ended */
	ck_assert_int_eq(tu_worker_renew(L, worker_token, &g[0]), 409);
}
END_TEST

START_TEST(test_each_entry_answers_in_order)
{
	struct tu_grant g[3];
	struct item v[5];
	cJSON *j = NULL;

	start();
	enqueue_n(3);
	claim_n("c-1", "w-1", 3, g);
	v[0] = (struct item){.g = g[0]};
	v[1] = (struct item){.g = g[1]};
	snprintf(v[1].g.token, sizeof(v[1].g.token), "%s", TU_OTHER_TOKEN); /* stale */
	v[2] = (struct item){.g = {.id = "r-999", .token = TU_OTHER_TOKEN}};
	v[3] = (struct item){.g = {.id = "no-such-run", .token = TU_OTHER_TOKEN}};
	v[4] = (struct item){.g = g[2], .status = "failed"};
	ck_assert_int_eq(batch(v, 5, &j), 200);
	ck_assert_int_eq(cJSON_GetArraySize(tu_jget(j, "completions")), 5);
	assert_done(j, 0, g[0].id, "succeeded");
	assert_refused(j, 1, g[1].id, "lease_lost");
	assert_refused(j, 2, "r-999", "not_found");
	assert_refused(j, 3, "no-such-run", "not_found");
	assert_done(j, 4, g[2].id, "failed");
	cJSON_Delete(j);
	/* the stale write is counted as a single completion's is; the run goes on */
	ck_assert_int_eq(tu_worker_rejected_writes(L, g[1].id), 1);
	ck_assert_int_eq(tu_worker_rejected_writes(L, g[0].id), 0);
	tu_worker_assert_status(L, g[1].id, "running");
	ck_assert_int_eq(tu_worker_renew(L, worker_token, &g[1]), 200);
}
END_TEST

START_TEST(test_next_claims_per_entry)
{
	struct tu_grant g[4], x[1], n0, n1;
	struct item v[4];
	const cJSON *e;
	cJSON *j = NULL;

	start();
	enqueue_n(4);
	claim_n("c-1", "w-1", 3, g);
	claim_n("c-x", "w-2", 1, x);
	enqueue_n(2);
	v[0] = (struct item){.g = g[0], .next = NEXT("c-2")};
	v[1] = (struct item){.g = g[1]};
	v[2] = (struct item){.g = g[2], .next = NEXT("c-x")}; /* w-2's claim_id */
	v[3] = (struct item){.g = {.id = "r-999", .token = TU_OTHER_TOKEN}, .next = NEXT("c-3")};
	ck_assert_int_eq(batch(v, 4, &j), 200);
	e = assert_done(j, 0, g[0].id, "succeeded");
	ck_assert_int_eq(cJSON_GetArraySize(tu_jget(tu_jget(e, "next"), "runs")), 1);
	ck_assert(cJSON_IsNumber(tu_jget(tu_jget(e, "next"), "queue_depth")));
	ck_assert_ptr_null(tu_jget(tu_jget(e, "next"), "error"));
	tu_worker_grant(tu_jget(e, "next"), 0, &n0);
	e = assert_done(j, 1, g[1].id, "succeeded");
	ck_assert_ptr_null(tu_jget(e, "next"));
	/* the claim failed, the completion stands */
	e = assert_done(j, 2, g[2].id, "succeeded");
	ck_assert_int_eq(cJSON_GetArraySize(tu_jget(tu_jget(e, "next"), "runs")), 0);
	ck_assert_str_eq(tu_jstr_or(tu_jget(e, "next"), "error", ""), "invalid_request");
	ck_assert_str_ne(tu_jstr_or(tu_jget(e, "next"), "message", ""), "");
	/* a refused completion claims nothing */
	assert_refused(j, 3, "r-999", "not_found");
	cJSON_Delete(j);
	tu_worker_assert_status(L, g[2].id, "succeeded");
	tu_worker_assert_status(L, n0.id, "running");
	ck_assert_int_eq(tu_worker_renew(L, worker_token, &n0), 200);
	ck_assert_int_eq(tu_worker_renew(L, worker_token, x), 200); /* w-2's lease is left alone */
	ck_assert_int_eq(n_pending(), 1);
	/* the granted lease is a lease like any other */
	v[0] = (struct item){.g = n0, .next = NEXT("c-4")};
	ck_assert_int_eq(batch(v, 1, &j), 200);
	e = assert_done(j, 0, n0.id, "succeeded");
	tu_worker_grant(tu_jget(e, "next"), 0, &n1);
	cJSON_Delete(j);
	ck_assert_int_eq(n_pending(), 0);
	ck_assert_int_eq(tu_worker_renew(L, worker_token, &n1), 200);
}
END_TEST

START_TEST(test_repeat_answers_the_same)
{
	struct tu_grant g[3], n0[2], n1[2];
	struct item v[3];
	cJSON *j = NULL;

	start();
	enqueue_n(5);
	claim_n("c-1", "w-1", 3, g);
	v[0] = (struct item){.g = g[0], .next = NEXT("c-2")};
	v[1] = (struct item){.g = g[1], .status = "failed"};
	v[2] = (struct item){.g = g[2], .next = NEXT("c-3")};
	for (int round = 0; round < 2; round++) {
		struct tu_grant *n = round ? n1 : n0;

		/* the answer was lost: the worker repeats the whole request */
		ck_assert_int_eq(batch(v, 3, &j), 200);
		tu_worker_grant(tu_jget(assert_done(j, 0, g[0].id, "succeeded"), "next"), 0, &n[0]);
		assert_done(j, 1, g[1].id, "failed");
		tu_worker_grant(tu_jget(assert_done(j, 2, g[2].id, "succeeded"), "next"), 0, &n[1]);
		cJSON_Delete(j);
		j = NULL;
	}
	for (int i = 0; i < 2; i++) {
		ck_assert_str_eq(n1[i].id, n0[i].id);
		ck_assert_str_eq(n1[i].token, n0[i].token);
		ck_assert_int_eq(tu_worker_renew(L, worker_token, &n0[i]), 200);
	}
	ck_assert_str_ne(n0[0].id, n0[1].id);
	/* nothing more was granted, nothing counted as refused */
	ck_assert_int_eq(n_pending(), 0);
	ck_assert_int_eq(tu_worker_rejected_writes(L, g[0].id), 0);
}
END_TEST

/* A refused request records nothing: every run is still running under its
 * lease, and nothing was claimed. */
static void assert_refused_whole(const char *body, const char *names, const struct tu_grant *g,
                                 size_t n)
{
	int pending = n_pending();
	cJSON *j = NULL;

	ck_assert_int_eq(tu_worker_post(L, worker_token, "/v1/completions", body, &j), 400);
	ck_assert_str_eq(tu_jstr_or(j, "error", ""), "invalid_request");
	ck_assert_msg(strstr(tu_jstr_or(j, "message", ""), names), "message '%s' does not name %s",
	              tu_jstr_or(j, "message", ""), names);
	ck_assert_ptr_null(tu_jget(j, "completions"));
	cJSON_Delete(j);
	for (size_t i = 0; i < n; i++) {
		tu_worker_assert_status(L, g[i].id, "running");
		ck_assert_int_eq(tu_worker_renew(L, worker_token, &g[i]), 200);
	}
	ck_assert_int_eq(n_pending(), pending);
}

#define OK0 "{\"id\":\"@0\",\"token\":\"#0\",\"status\":\"succeeded\",\"reason\":\"exit\"}"
/* the second entry, valid but for extra (members before the valid ones win) */
#define ONE(extra)                                                                                 \
	"{\"id\":\"@1\",\"token\":\"#1\"" extra ",\"status\":\"succeeded\",\"reason\":\"exit\"}"
#define BODY(second) "{\"completions\":[" OK0 "," second "]}"

START_TEST(test_malformed_request_records_nothing)
{
	static const struct {
		const char *body, *names;
	} bad[] = {
	    {BODY(ONE(",\"status\":\"done\"")), "'completions[1].status'"},
	    {BODY("{\"id\":\"@1\",\"token\":\"#1\",\"status\":\"succeeded\"}"),
	     "'completions[1].reason'"},
	    {BODY("{\"token\":\"#1\",\"status\":\"succeeded\",\"reason\":\"exit\"}"),
	     "'completions[1].id'"},
	    {BODY("{\"id\":\"bad id\",\"token\":\"#1\",\"status\":\"succeeded\","
	          "\"reason\":\"exit\"}"),
	     "'completions[1].id'"},
	    {BODY("{\"id\":\"@1\",\"status\":\"succeeded\",\"reason\":\"exit\"}"),
	     "'completions[1].token'"},
	    {BODY(ONE(",\"exit_code\":256")), "'completions[1].exit_code'"},
	    {BODY(ONE(",\"exit_code\":-1")), "'completions[1].exit_code'"},
	    {BODY(ONE(",\"retryable\":\"yes\"")), "'completions[1].retryable'"},
	    {BODY(ONE(",\"error\":7")), "'completions[1].error'"},
	    {BODY("\"@1\""), "'completions[1]'"},
	    {BODY(ONE(",\"next\":{\"claim_id\":\"c-9\",\"worker_id\":\"w-1\",\"max_runs\":0,"
	              "\"lease_ttl_s\":60}")),
	     "'completions[1].next.max_runs'"},
	    {BODY(ONE(",\"next\":{\"claim_id\":\"c-9\",\"worker_id\":\"w-1\",\"max_runs\":257,"
	              "\"lease_ttl_s\":60}")),
	     "'completions[1].next.max_runs'"},
	    {BODY(ONE(",\"next\":{\"claim_id\":\"c-9\",\"worker_id\":\"w-1\",\"max_runs\":1}")),
	     "'completions[1].next.lease_ttl_s'"},
	    {BODY(ONE(",\"next\":{\"claim_id\":\"c-9\",\"worker_id\":\"w-1\",\"max_runs\":1,"
	              "\"lease_ttl_s\":60,\"wait_s\":5}")),
	     "'completions[1].next.wait_s'"},
	    {BODY(ONE(",\"next\":{\"claim_id\":\"c-9\",\"worker_id\":\"w-1\",\"max_runs\":1,"
	              "\"lease_ttl_s\":60,\"held\":[]}")),
	     "'completions[1].next.held'"},
	    {BODY(ONE(",\"next\":\"c-9\"")), "'completions[1].next'"},
	    {"{\"completions\":[{\"id\":\"@0\",\"token\":\"#0\",\"reason\":\"exit\"}," OK0 "]}",
	     "'completions[0].status'"},
	    {"{\"completions\":{\"id\":\"@0\"}}", "'completions'"},
	    {"{\"completions\":[]}", "'completions'"},
	    {"{\"completions\":null}", "'completions'"},
	    {"{}", "'completions'"},
	};
	struct tu_grant g[2];

	start();
	enqueue_n(3);
	claim_n("c-1", "w-1", 2, g);
	for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
		_cleanup_free_ char *body = tu_worker_fill(bad[i].body, g);

		assert_refused_whole(body, bad[i].names, g, 2);
	}
}
END_TEST

START_TEST(test_duplicate_id_records_nothing)
{
	struct tu_grant g[2];
	struct item v[3];
	_cleanup_free_ char *body = NULL, *names = NULL;

	start();
	enqueue_n(2);
	claim_n("c-1", "w-1", 2, g);
	v[0] = (struct item){.g = g[0]};
	v[1] = (struct item){.g = g[1]};
	v[2] = (struct item){.g = g[0], .status = "failed"};
	body = batch_body(v, 3);
	names = tu_fmt("'completions[2].id' %s is given twice", g[0].id);
	assert_refused_whole(body, names, g, 2);
}
END_TEST

START_TEST(test_at_most_complete_max)
{
	_cleanup_free_ struct item *v = calloc(V1_COMPLETE_MAX + 1, sizeof(*v));
	_cleanup_free_ char *body = NULL;
	cJSON *j = NULL;

	start();
	ck_assert_ptr_nonnull(v);
	enqueue_n(1);
	claim_n("c-1", "w-1", 1, &v[0].g);
	for (int i = 1; i <= V1_COMPLETE_MAX; i++) {
		snprintf(v[i].g.id, sizeof(v[i].g.id), "r-%d", 100000 + i);
		snprintf(v[i].g.token, sizeof(v[i].g.token), "%s", TU_OTHER_TOKEN);
	}
	body = batch_body(v, V1_COMPLETE_MAX + 1);
	assert_refused_whole(body, "'completions'", &v[0].g, 1);
	/* exactly V1_COMPLETE_MAX is fine, each answered */
	ck_assert_int_eq(batch(v, V1_COMPLETE_MAX, &j), 200);
	ck_assert_int_eq(cJSON_GetArraySize(tu_jget(j, "completions")), V1_COMPLETE_MAX);
	assert_done(j, 0, v[0].g.id, "succeeded");
	assert_refused(j, V1_COMPLETE_MAX - 1, v[V1_COMPLETE_MAX - 1].g.id, "not_found");
	cJSON_Delete(j);
}
END_TEST

START_TEST(test_scoped_token_reaches_own_leases)
{
	struct tu_grant a[2], b[1];
	struct item v[3];
	cJSON *j = NULL;

	tu_worker_start_scoped(&L, &worker_token);
	enqueue_n(3);
	claim_n("c-a", "host-a", 2, a);
	worker_token = TU_BETA_TOKEN;
	claim_n("c-b", "host-b", 1, b);
	worker_token = TU_ALPHA_TOKEN;
	v[0] = (struct item){.g = a[0]};
	v[1] = (struct item){.g = b[0]};
	v[2] = (struct item){.g = a[1], .status = "failed"};
	ck_assert_int_eq(batch(v, 3, &j), 200);
	assert_done(j, 0, a[0].id, "succeeded");
	assert_refused(j, 1, b[0].id, "lease_lost");
	assert_done(j, 2, a[1].id, "failed");
	cJSON_Delete(j);
	/* beta's run was left alone: not even counted as refused */
	tu_worker_assert_status(L, b[0].id, "running");
	ck_assert_int_eq(tu_worker_rejected_writes(L, b[0].id), 0);
	worker_token = TU_BETA_TOKEN;
	ck_assert_int_eq(tu_worker_renew(L, worker_token, &b[0]), 200);
	/* a repeat with the completing token, by its worker, answers the same */
	worker_token = TU_ALPHA_TOKEN;
	ck_assert_int_eq(batch(v, 3, &j), 200);
	assert_done(j, 0, a[0].id, "succeeded");
	assert_refused(j, 1, b[0].id, "lease_lost");
	assert_done(j, 2, a[1].id, "failed");
	cJSON_Delete(j);
	/* the admin token is not a worker's */
	{
		_cleanup_free_ char *body = batch_body(v, 1);

		tu_worker_assert_workers_only(L, "/v1/completions", body);
	}
}
END_TEST

static double store_counter(const char *name)
{
	long status = 0;
	cJSON *s = NULL;
	double n;

	ck_assert_int_eq(tu_lessor_json(L, "GET", "/v1/stats", NULL, &status, &s), 0);
	ck_assert_int_eq(status, 200);
	n = cJSON_GetNumberValue(tu_jget(tu_jget(s, "store"), name));
	cJSON_Delete(s);
	return n;
}

/* The point of the batch: N completions (and their claims) are one write,
 * one commit (SQLite: one fsync), on either store; each claim in a
 * savepoint of its own. */
START_TEST(test_batch_is_one_commit)
{
	struct tu_grant g[4];
	struct item v[4];
	double commits, writes;
	cJSON *j = NULL;

	tu_worker_start((char *[]){"--tick", "1h", NULL}, &L, &worker_token);
	enqueue_n(6);
	claim_n("c-1", "w-1", 4, g);
	for (int i = 0; i < 4; i++)
		v[i] = (struct item){.g = g[i],
		                     .next = i % 2 ? NULL : (i ? NEXT("c-3") : NEXT("c-2"))};
	commits = store_counter("commits");
	writes = store_counter("writes");
	ck_assert_int_eq(batch(v, 4, &j), 200);
	for (int i = 0; i < 4; i++)
		assert_done(j, i, g[i].id, "succeeded");
	cJSON_Delete(j);
	ck_assert_msg(store_counter("commits") == commits + 1, "the batch took %.0f commits",
	              store_counter("commits") - commits);
	ck_assert_msg(store_counter("writes") == writes + 1, "the batch took %.0f writes",
	              store_counter("writes") - writes);
	for (int i = 0; i < 4; i++)
		tu_worker_assert_status(L, g[i].id, "succeeded");
	ck_assert_int_eq(n_pending(), 0);
}
END_TEST

START_TEST(test_complete_fault_applies)
{
	struct tu_grant g[2];
	struct item v[2];
	cJSON *j = NULL;

	start();
	enqueue_n(2);
	claim_n("c-1", "w-1", 2, g);
	v[0] = (struct item){.g = g[0]};
	v[1] = (struct item){.g = g[1]};
	/* one batch is one request against the fault's count */
	tu_worker_fault(L, "{\"endpoint\":\"complete\",\"status\":503,\"count\":1}", 200);
	ck_assert_int_eq(batch(v, 2, &j), 503);
	ck_assert_str_eq(tu_jstr_or(j, "error", ""), "injected");
	cJSON_Delete(j);
	j = NULL;
	tu_worker_assert_status(L, g[0].id, "running");
	tu_worker_assert_status(L, g[1].id, "running");
	ck_assert_int_eq(batch(v, 2, &j), 200);
	assert_done(j, 0, g[0].id, "succeeded");
	assert_done(j, 1, g[1].id, "succeeded");
	cJSON_Delete(j);
}
END_TEST

START_TEST(test_legacy_fault_answers_404)
{
	struct tu_grant g[2];
	struct item v[1];
	cJSON *j = NULL;

	start();
	enqueue_n(2);
	claim_n("c-1", "w-1", 2, g);
	v[0] = (struct item){.g = g[1]};
	/* legacy is a complete fault that answers: no status of its own */
	tu_worker_fault(L, "{\"endpoint\":\"complete\",\"legacy\":true,\"status\":503}", 400);
	tu_worker_fault(L, "{\"endpoint\":\"complete\",\"legacy\":true,\"count\":2}", 200);
	/* the single completion is not affected, and does not use the fault up */
	ck_assert_int_eq(complete_one(&g[0], &j), 200);
	ck_assert_str_eq(tu_jstr_or(j, "run_status", ""), "succeeded");
	cJSON_Delete(j);
	j = NULL;
	for (int i = 0; i < 2; i++) {
		ck_assert_int_eq(batch(v, 1, &j), 404);
		ck_assert_str_eq(tu_jstr_or(j, "error", ""), "not_found");
		cJSON_Delete(j);
		j = NULL;
	}
	tu_worker_assert_status(L, g[1].id, "running");
	ck_assert_int_eq(batch(v, 1, &j), 200);
	assert_done(j, 0, g[1].id, "succeeded");
	cJSON_Delete(j);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("complete_batch");
	TCase *t = tcase_create("batch");

	tcase_add_checked_fixture(t, NULL, teardown);
	tcase_set_timeout(t, 60);
	tcase_add_test(t, test_records_each_completion);
	tcase_add_test(t, test_each_entry_answers_in_order);
	tcase_add_test(t, test_next_claims_per_entry);
	tcase_add_test(t, test_repeat_answers_the_same);
	tcase_add_test(t, test_malformed_request_records_nothing);
	tcase_add_test(t, test_duplicate_id_records_nothing);
	tcase_add_test(t, test_at_most_complete_max);
	tcase_add_test(t, test_scoped_token_reaches_own_leases);
	tcase_add_test(t, test_batch_is_one_commit);
	tcase_add_test(t, test_complete_fault_applies);
	tcase_add_test(t, test_legacy_fault_answers_404);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	return tu_run(suite());
}
