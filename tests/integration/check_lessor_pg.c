/* Several lessor instances on one PostgreSQL database serve one fleet:
 * three `lessor serve --db <pg>` processes, three lessee daemons each talking
 * to a different one, a few hundred runs enqueued through all three, then
 * kill -9 of one instance mid-run; its lessee, cut off, waits until the other
 * instances' reaper expired what it held, drains and stops (spooling what it
 * could not deliver), and starts again against another instance.
 * Every run completes once, no lease is granted twice (no two leases of a
 * run overlap, epochs are unique), the completion came from the run's last
 * lease, and a write with a stale token is refused (and counted).
 *
 * The server is a private one (tests/helpers/pg_proc.h); without PostgreSQL
 * installed the binary exits 77 (tests/run.sh: SKIP).  LESSEE_PG_E2E_RUNS
 * sets the number of runs (default 300). */
#include <cJSON.h>
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>

#include "lessee_proc.h"
#include "lessor_proc.h"
#include "pg_proc.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"

#define SEC USEC_PER_SEC
#define N_INSTANCES 3

static struct tu_pg *pg;

static int n_runs(void)
{
	const char *e = getenv("LESSEE_PG_E2E_RUNS");

	return e && atoi(e) > 0 ? atoi(e) : 300;
}

static long long query_num(const char *db, const char *sql)
{
	_cleanup_free_ char *v = tu_pg_query1(db, sql);

	ck_assert_msg(v, "query failed: %s", sql);
	return atoll(v);
}

static int stat_of(const struct tu_lessor *l, const char *name)
{
	cJSON *o = NULL;
	long status = 0;
	int n = -1;

	if (tu_lessor_json(l, "GET", "/v1/stats", NULL, &status, &o) == 0 && status == 200)
		n = cJSON_GetObjectItem(o, name) ? cJSON_GetObjectItem(o, name)->valueint : -1;
	cJSON_Delete(o);
	return n;
}

/* Wait (on the API's state) until `succeeded` reaches want. */
static int wait_succeeded(const struct tu_lessor *l, int want, usec_t timeout)
{
	usec_t end = time_mono() + tu_timeout(timeout);

	while (time_mono() < end) {
		if (stat_of(l, "succeeded") >= want)
			return 0;
		tu_sleep(50 * USEC_PER_MSEC);
	}
	return -ETIMEDOUT;
}

static char *worker_conf(const char *scripts, int i, const struct tu_lessor *l)
{
	char *c = NULL;

	ck_assert_int_ge(asprintf(&c,
	                          "[api]\nurl = %s\n[worker]\nid = w%d\n"
	                          "[workflow.work]\ncommand = %s/work.sh\n",
	                          tu_lessor_url(l), i, scripts),
	                 0);
	return c;
}

START_TEST(test_three_instances_kill_one)
{
	_cleanup_free_ char *db = tu_pg_create_db(pg), *scripts = tu_tmpdir("pg-scripts");
	_cleanup_free_ char *script = NULL, *stale = NULL;
	struct tu_lessor *L[N_INSTANCES] = {0};
	struct tu_lessee *D[N_INSTANCES] = {0};
	const int n = n_runs();
	char *args[] = {"--db", db, "--tick", "50ms", NULL};
	char id[32], tok[64], body[160];
	long status, held;
	cJSON *run;

	ck_assert_ptr_nonnull(db);
	ck_assert_ptr_nonnull(scripts);
	ck_assert_int_ge(asprintf(&script, "%s/work.sh", scripts), 0);
	ck_assert_int_eq(write_file_atomic(script,
	                                   "#!/bin/sh\necho \"run $LESSEE_RUN_ID\"\n"
	                                   "sleep 0.02\n",
	                                   strlen("#!/bin/sh\necho \"run $LESSEE_RUN_ID\"\n"
	                                          "sleep 0.02\n"),
	                                   0755),
	                 0);
	for (int i = 0; i < N_INSTANCES; i++) {
		struct tu_lessor_opts o = {.token = "s3cret", .args = args, .sync_normal = true};

		ck_assert_int_eq(tu_lessor_start(&o, &L[i]), 0);
	}
	for (int i = 0; i < N_INSTANCES; i++) {
		_cleanup_free_ char *conf = worker_conf(scripts, i, L[i]);

		ck_assert_int_eq(
		    tu_lessee_start(&(struct tu_lessee_opts){.lessor = L[i], .conf = conf}, &D[i]),
		    0);
	}
	/* enqueued through all three: long polls parked on one instance are
	 * woken by another instance's enqueue (NOTIFY) */
	for (int i = 0; i < n; i++) {
		char *rid =
		    tu_lessor_enqueue(L[i % N_INSTANCES], "{\"workflow\":\"work\",\"input\":{}}");

		ck_assert_ptr_nonnull(rid);
		free(rid);
	}
	ck_assert_int_eq(wait_succeeded(L[0], n / 3, 60 * SEC), 0);
	/* instance 2 dies mid-run; its lessee moves to instance 0 */
	ck_assert_int_eq(tu_lessor_kill(L[2]), 128 + SIGKILL);
	ck_assert_int_ge(stat_of(L[0], "pending") + stat_of(L[0], "running"), 1);
	/* its lessee cannot reach anything now: what it held expires (the other
	 * instances' reaper) and is granted again; then it stops (drain, then
	 * hard stop: undelivered results go to its spool) */
	held = query_num(db, "SELECT count(*) FROM lessor_leases WHERE worker_id = 'w2'"
	                     " AND ended_at IS NULL");
	{
		usec_t end = time_mono() + tu_timeout(60 * SEC);

		while (query_num(db, "SELECT count(*) FROM lessor_leases WHERE worker_id = 'w2'"
		                     " AND ended_at IS NULL") > 0 &&
		       time_mono() < end)
			tu_sleep(50 * USEC_PER_MSEC);
	}
	ck_assert_int_eq(query_num(db, "SELECT count(*) FROM lessor_leases WHERE worker_id = 'w2'"
	                               " AND ended_at IS NULL"),
	                 0);
	ck_assert_int_eq(tu_lessee_signal(D[2], SIGTERM), 0);
	ck_assert_int_eq(tu_lessee_wait_log(D[2], "draining: no new claims", 10 * SEC), 0);
	ck_assert_int_eq(tu_lessee_signal(D[2], SIGTERM), 0);
	if (tu_lessee_wait(D[2], tu_timeout(60 * SEC)) != 0)
		tu_lessee_dump_log(D[2]);
	ck_assert_int_eq(tu_lessee_wait(D[2], 0), 0);
	/* ... and starts again against instance 0, delivering its spool there:
	 * results of leases that expired meanwhile are stale */
	{
		_cleanup_free_ char *conf = worker_conf(scripts, 3, L[0]);

		ck_assert_int_eq(tu_lessee_set_conf(D[2], conf), 0);
		ck_assert_int_eq(tu_lessee_restart(D[2]), 0);
	}
	ck_assert_int_eq(wait_succeeded(L[1], n, 120 * SEC), 0);

	/* every run completed once, from its last lease */
	ck_assert_int_eq(query_num(db, "SELECT count(*) FROM lessor_runs_done"
	                               " WHERE status = 'succeeded'"),
	                 n);
	ck_assert_int_eq(query_num(db, "SELECT count(*) FROM lessor_runs"), 0);
	ck_assert_int_eq(query_num(db, "SELECT count(*) FROM lessor_leases"
	                               " WHERE end_reason = 'completed'"),
	                 n);
	ck_assert_int_eq(query_num(db, "SELECT count(*) FROM lessor_leases l"
	                               " WHERE end_reason = 'completed' AND EXISTS (SELECT 1"
	                               " FROM lessor_leases m WHERE m.run_seq = l.run_seq"
	                               " AND m.id > l.id)"),
	                 0);
	/* no lease granted twice: a run's leases never overlap, epochs are unique */
	{
		_cleanup_free_ char *rows = tu_pg_query1(
		    db,
		    "SELECT string_agg(format('run %s: lease %s (%s, %s, %s..%s %s) then lease %s "
		    "(%s, %s..%s %s)', a.run_seq, a.id, a.worker_id, a.epoch, a.granted_at, "
		    "a.ended_at, a.end_reason, b.id, b.worker_id, b.granted_at, b.ended_at, "
		    "b.end_reason), E'\\n') FROM lessor_leases a JOIN lessor_leases b"
		    " ON a.run_seq = b.run_seq AND a.id < b.id"
		    " WHERE a.ended_at IS NULL OR a.ended_at > b.granted_at");

		ck_assert_msg(
		    query_num(db, "SELECT count(*) FROM lessor_leases a JOIN lessor_leases b"
		                  " ON a.run_seq = b.run_seq AND a.id < b.id"
		                  " WHERE a.ended_at IS NULL OR a.ended_at > b.granted_at") == 0,
		    "overlapping leases:\n%s", rows ? rows : "?");
	}
	ck_assert_int_eq(query_num(db, "SELECT count(*) FROM (SELECT 1 FROM lessor_leases"
	                               " GROUP BY run_seq, epoch HAVING count(*) > 1) d"),
	                 0);
	/* what the lost instance's worker held was expired by the others' reaper */
	ck_assert_int_ge(query_num(db, "SELECT count(*) FROM lessor_leases WHERE worker_id = 'w2'"
	                               " AND end_reason = 'expired'"),
	                 held);
	/* each instance served its worker */
	ck_assert_int_eq(query_num(db, "SELECT count(*) FROM lessor_workers"
	                               " WHERE runs_granted > 0 AND worker_id IN"
	                               " ('w0', 'w1', 'w2')"),
	                 3);
	fprintf(stderr,
	        "%d runs, %lld leases (%lld expired), %ld held by the lost instance's worker, "
	        "%lld rejected writes\n",
	        n, query_num(db, "SELECT count(*) FROM lessor_leases"),
	        query_num(db, "SELECT count(*) FROM lessor_leases WHERE end_reason = 'expired'"),
	        held, query_num(db, "SELECT sum(rejected_writes) FROM lessor_runs_done"));

	/* a write with a finished lease's token is refused, on any instance */
	stale = tu_pg_query1(db, "SELECT 'r-' || run_seq || ' ' || token FROM lessor_leases"
	                         " WHERE end_reason = 'completed' ORDER BY id LIMIT 1");
	ck_assert_ptr_nonnull(stale);
	ck_assert_int_eq(sscanf(stale, "%31s %63s", id, tok), 2);
	snprintf(body, sizeof(body), "{\"token\":\"%s\",\"ttl_s\":10}", tok);
	{
		char path[64];
		long before;

		run = tu_lessor_get_run(L[1], id);
		ck_assert_ptr_nonnull(run);
		before = (long)cJSON_GetObjectItem(run, "rejected_writes")->valuedouble;
		cJSON_Delete(run);
		snprintf(path, sizeof(path), "/v1/runs/%s/lease", id);
		ck_assert_int_eq(tu_lessor_json(L[1], "POST", path, body, &status, NULL), 0);
		ck_assert_int_eq(status, 409);
		run = tu_lessor_get_run(L[0], id);
		ck_assert_ptr_nonnull(run);
		ck_assert_int_eq((long)cJSON_GetObjectItem(run, "rejected_writes")->valuedouble,
		                 before + 1);
		ck_assert_str_eq(cJSON_GetObjectItem(run, "status")->valuestring, "succeeded");
		cJSON_Delete(run);
	}
	for (int i = 0; i < N_INSTANCES; i++) {
		ck_assert_int_eq(tu_lessee_stop(D[i]), 0);
		tu_lessee_free(D[i]);
	}
	for (int i = 0; i < 2; i++)
		ck_assert_int_eq(tu_lessor_stop(L[i]), 0);
	for (int i = 0; i < N_INSTANCES; i++)
		tu_lessor_free(L[i]);
	rm_rf(scripts);
}
END_TEST

struct parked_claim {
	const struct tu_lessor *l;
	cJSON *resp;
	long status;
	bool done;
};

static void *parked_claim_main(void *p)
{
	struct parked_claim *c = p;

	(void)tu_lessor_json(c->l, "POST", "/v1/claims",
	                     "{\"claim_id\":\"lp-1\",\"worker_id\":\"lp\",\"max_runs\":1,"
	                     "\"lease_ttl_s\":60,\"wait_s\":20,\"workflows\":[\"x\"]}",
	                     &c->status, &c->resp);
	__atomic_store_n(&c->done, true, __ATOMIC_RELEASE);
	return NULL;
}

/* A long poll parked on instance A is answered when the run is enqueued
 * through instance B.  --tick 1h keeps both reapers (and so the periodic
 * backstop) idle after their first tick: only B's NOTIFY can wake A. */
START_TEST(test_long_poll_woken_across_instances)
{
	_cleanup_free_ char *db = tu_pg_create_db(pg);
	char *args[] = {"--db", db, "--tick", "1h", NULL};
	struct tu_lessor *a = NULL, *b = NULL;
	struct parked_claim c = {0};
	pthread_t t;
	usec_t end, sent;
	char *id;

	ck_assert_ptr_nonnull(db);
	ck_assert_int_eq(tu_lessor_start(&(struct tu_lessor_opts){.args = args}, &a), 0);
	ck_assert_int_eq(tu_lessor_start(&(struct tu_lessor_opts){.args = args}, &b), 0);
	c.l = a;
	ck_assert_int_eq(pthread_create(&t, NULL, parked_claim_main, &c), 0);
	end = time_mono() + tu_timeout(10 * SEC);
	while (stat_of(a, "parked_requests") < 1 && time_mono() < end)
		tu_sleep(5 * USEC_PER_MSEC);
	ck_assert_int_eq(stat_of(a, "parked_requests"), 1);
	sent = time_mono();
	id = tu_lessor_enqueue(b, "{\"workflow\":\"x\"}");
	ck_assert_ptr_nonnull(id);
	pthread_join(t, NULL);
	ck_assert_int_eq(c.status, 200);
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(c.resp, "runs")), 1);
	ck_assert_str_eq(
	    cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(c.resp, "runs"), 0), "id")
	        ->valuestring,
	    id);
	/* well before the poll's own 20 s deadline */
	ck_assert_int_lt(time_mono() - sent, 15 * SEC);
	fprintf(stderr, "cross-instance wake: %.1f ms\n",
	        (double)(time_mono() - sent) / USEC_PER_MSEC);
	cJSON_Delete(c.resp);
	free(id);
	ck_assert_int_eq(tu_lessor_stop(a), 0);
	ck_assert_int_eq(tu_lessor_stop(b), 0);
	tu_lessor_free(a);
	tu_lessor_free(b);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("lessor_pg");
	TCase *tc = tcase_create("multi_instance");
	SRunner *sr;
	int r, failed;

	r = tu_pg_start(&pg);
	if (r == -ENOENT) {
		fprintf(stderr, "SKIP: no PostgreSQL server binaries (Debian: apt-get install "
		                "postgresql)\n");
		return 77;
	}
	if (r < 0) {
		fprintf(stderr, "cannot start a PostgreSQL server: %s\n", strerror(-r));
		return EXIT_FAILURE;
	}
	tcase_set_timeout(tc, 300);
	tcase_add_test(tc, test_three_instances_kill_one);
	tcase_add_test(tc, test_long_poll_woken_across_instances);
	suite_add_tcase(s, tc);
	sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	tu_pg_free(pg);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
