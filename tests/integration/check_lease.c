/* Lease handling end to end (issue 10, items 2, 3, 4 and 8): a lost lease kills
 * at once, a stalled or throttled renewal does not lose the lease, a finished
 * result outlives the local deadline, and a long poll never delivers a lease
 * that is already lost.  Real lessor (with --enable-faults), real daemon, real
 * children; tests/run.sh runs it under both loop backends. */
#include <cJSON.h>
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "lessee_proc.h"
#include "lessor_proc.h"
#include "promparse.h"
#include "jsonutil.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"

#define SEC USEC_PER_SEC

static struct tu_lessor *L;
static struct tu_lessee *D;
static char *dir; /* scripts, the execution ledger, the gate file */

/* ---------------------------------------------------------------- helpers */

static char *path_in(const char *name)
{
	char *p;

	ck_assert_int_ge(asprintf(&p, "%s/%s", dir, name), 0);
	return p;
}

static void write_script(const char *name, const char *body)
{
	_cleanup_free_ char *path = path_in(name), *text = NULL;

	ck_assert_int_ge(asprintf(&text, "#!/bin/sh\n%s\n", body), 0);
	ck_assert_int_eq(write_file_atomic(path, text, strlen(text), 0755), 0);
}

/* Every job appends one line per execution to $LEDGER: executions are counted. */
static void setup(void)
{
	char *const args[] = {"--enable-faults", NULL};

	dir = tu_tmpdir("lease");
	ck_assert_ptr_nonnull(dir);
	write_script("slow.sh", "echo \"start $LESSEE_RUN_ID $$\" >> \"$LEDGER\"\n"
	                        "echo pid=$$\nsleep \"${1:-8}\"\n"
	                        "echo '{\"answer\":42}' > \"$LESSEE_RESULT_FILE\"");
	write_script("gate.sh", "echo \"start $LESSEE_RUN_ID $$\" >> \"$LEDGER\"\n"
	                        "echo waiting-for-gate\n"
	                        "while [ ! -e \"$GATE\" ]; do sleep 0.05; done\n"
	                        "echo '{\"answer\":42}' > \"$LESSEE_RESULT_FILE\"");
	ck_assert_int_eq(
	    tu_lessor_start(&(struct tu_lessor_opts){.token = "t0ken-for-tests", .args = args}, &L),
	    0);
}

/* LEASE_TEST_DUMP=1: the daemon's log on stderr, also when the test passed. */
static void dump_log(void)
{
	char *log;

	if (!D || !getenv("LEASE_TEST_DUMP"))
		return;
	log = tu_lessee_log(D);
	fprintf(stderr, "%s", log ? log : "");
	free(log);
}

static void teardown(void)
{
	int st, ls;

	dump_log();
	st = D ? tu_lessee_quit(D) : 0;
	ls = L ? tu_lessor_stop(L) : 0;

	D = tu_lessee_free(D);
	L = tu_lessor_free(L);
	if (dir)
		rm_rf(dir);
	free(dir);
	dir = NULL;
	ck_assert_msg(st == 0, "lessee exited with %d", st);
	ck_assert_msg(ls == 0, "lessor exited with %d", ls);
}

/* The test's workflows and settings on top of lessee_proc's (later keys win). */
static void start_lessee(const char *worker)
{
	_cleanup_free_ char *conf = NULL, *trap = tu_aux_bin("ignore_term");

	ck_assert_int_ge(asprintf(&conf,
	                          "[worker]\n%s\n[status]\nlisten = 127.0.0.1:0\n"
	                          "[workflow.trap]\ncommand = %s\n"
	                          "[workflow.slow]\ncommand = %s/slow.sh\nenv = LEDGER=%s/ledger\n"
	                          "[workflow.slow30]\ncommand = %s/slow.sh 30\n"
	                          "env = LEDGER=%s/ledger\n"
	                          "[workflow.gate]\ncommand = %s/gate.sh\n"
	                          "env = LEDGER=%s/ledger GATE=%s/gate\n",
	                          worker ? worker : "", trap, dir, dir, dir, dir, dir, dir, dir),
	                 0);
	ck_assert_int_eq(tu_lessee_start(&(struct tu_lessee_opts){.lessor = L, .conf = conf}, &D),
	                 0);
}

static char *enqueue(const char *workflow)
{
	char *id = tu_lessor_enqueue_wf(L, workflow, "\"max_attempts\":3");

	ck_assert_ptr_nonnull(id);
	return id;
}

static cJSON *admin(const char *method, const char *path, const char *body, long want)
{
	long status = 0;
	cJSON *resp = NULL;

	ck_assert_int_eq(tu_lessor_json(L, method, path, body, &status, &resp), 0);
	ck_assert_msg(status == want, "%s %s: HTTP %ld, expected %ld", method, path, status, want);
	return resp;
}

static void fault(const char *endpoint, unsigned status, unsigned count, unsigned retry_after_s,
                  unsigned delay_ms)
{
	_cleanup_free_ char *body = NULL;

	ck_assert_int_ge(asprintf(&body,
	                          "{\"endpoint\":\"%s\",\"status\":%u,\"count\":%u,"
	                          "\"retry_after_s\":%u,\"delay_ms\":%u}",
	                          endpoint, status, count, retry_after_s, delay_ms),
	                 0);
	cJSON_Delete(admin("POST", "/v1/admin/faults", body, 200));
}

static void wait_status(const char *id, const char *status, usec_t timeout)
{
	ck_assert_msg(tu_lessor_wait_status(L, id, status, timeout) == 0,
	              "run %s did not reach status %s", id, status);
}

/* The run's shipped log, waiting until it holds needle. */
static char *wait_run_log(const char *id, const char *needle)
{
	usec_t end = time_mono() + tu_timeout(15 * SEC);

	do {
		size_t len = 0;
		char *log = tu_lessor_run_log(L, id, &len);

		if (log && strstr(log, needle))
			return log;
		free(log);
		tu_sleep(20 * USEC_PER_MSEC);
	} while (time_mono() < end);
	ck_abort_msg("no '%s' in the log of run %s", needle, id);
	return NULL;
}

static bool wait_dead(pid_t pid, usec_t timeout)
{
	usec_t end = time_mono() + tu_timeout(timeout);

	while (tu_pid_alive(pid))
		if (time_mono() > end)
			return false;
		else
			tu_sleep(10 * USEC_PER_MSEC);
	return true;
}

/* How many executions the ledger records. */
static int executions(void)
{
	_cleanup_free_ char *path = path_in("ledger"), *text = NULL;
	size_t len = 0;
	int n = 0;

	if (read_file_capped(path, 1 << 20, &text, &len) < 0)
		return 0;
	for (size_t i = 0; i < len; i++)
		n += text[i] == '\n';
	return n;
}

static int n_leases(const char *id)
{
	cJSON *run = tu_lessor_get_run(L, id);
	int n;

	ck_assert_ptr_nonnull(run);
	n = cJSON_GetArraySize(cJSON_GetObjectItem(run, "leases"));
	cJSON_Delete(run);
	return n;
}

static double leases_lost(void)
{
	_cleanup_free_ char *text = NULL, *err = NULL;
	long status = 0;
	prom_doc_t *doc = NULL;
	double v;

	text = tu_lessee_status_get(D, "/metrics", &status);
	ck_assert_ptr_nonnull(text);
	ck_assert_int_eq(status, 200);
	ck_assert_msg(prom_parse(text, strlen(text), &doc, &err) == 0, "metrics: %s", err);
	v = prom_value(doc, "lessee_leases_lost_total", NULL);
	prom_free(doc);
	return v;
}

static int log_count(const char *needle)
{
	_cleanup_free_ char *log = tu_lessee_log(D);
	int n = 0;

	for (const char *p = log; p && (p = strstr(p, needle)); p++)
		n++;
	return n;
}

/* The run's lease_expires_at as the API shows it (free it). */
static char *lease_expiry(const char *id)
{
	cJSON *run = tu_lessor_get_run(L, id);
	char *s;

	ck_assert_ptr_nonnull(run);
	s = tu_jstr(run, "lease_expires_at") ? strdup(tu_jstr(run, "lease_expires_at")) : NULL;
	cJSON_Delete(run);
	ck_assert_ptr_nonnull(s);
	return s;
}

static long long wall_ms(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return (long long)tv.tv_sec * 1000 + tv.tv_usec / 1000;
}

/* A run that succeeded once, on its first lease, with its result. */
static void assert_clean_success(const char *id)
{
	cJSON *run = tu_lessor_get_run(L, id);
	_cleanup_free_ char *out = NULL;

	ck_assert_ptr_nonnull(run);
	out = cJSON_PrintUnformatted(cJSON_GetObjectItem(run, "output"));
	ck_assert_str_eq(tu_jstr(run, "status"), "succeeded");
	ck_assert_str_eq(out, "{\"answer\":42}");
	cJSON_Delete(run);
	ck_assert_int_eq(n_leases(id), 1);
	ck_assert_int_eq(executions(), 1);
	ck_assert_double_eq(leases_lost(), 0);
}

/* ---------------------------------------------------------------- tests */

/* Item 2: the lease is someone else's now, so the whole group gets SIGKILL at
 * once, whatever kill_grace says and whatever the child traps. */
START_TEST(test_lease_loss_kills_at_once)
{
	_cleanup_free_ char *id = NULL, *path = NULL, *log = NULL;
	int pid = 0, gpid = 0;
	usec_t lost_at;

	start_lessee("concurrency = 1\nkill_grace = 5s\n");
	id = enqueue("trap");
	log = wait_run_log(id, "\n");
	ck_assert_int_eq(sscanf(log, "%d %d", &pid, &gpid), 2);
	ck_assert_int_ge(asprintf(&path, "/v1/runs/%s/requeue", id), 0);
	cJSON_Delete(admin("POST", path, NULL, 200));
	/* the next renewal (lease_refresh = 1 s) or log append hears 409 */
	ck_assert_int_eq(tu_lessee_wait_log(D, "lease lost (", 5 * SEC), 0);
	lost_at = time_mono();
	ck_assert_msg(wait_dead(pid, 1 * SEC), "child %d alive %.1fs after the lease was lost", pid,
	              (double)(time_mono() - lost_at) / SEC);
	ck_assert_msg(wait_dead(gpid, 1 * SEC), "grandchild %d alive after the lease was lost",
	              gpid);
	ck_assert_uint_lt(time_mono() - lost_at, tu_timeout(1 * SEC) + 100 * USEC_PER_MSEC);
}
END_TEST

/* Item 3: three renewals in a row held by the API longer than the whole lease
 * (6 s; local deadline 5 s): each attempt is abandoned in time and retried on
 * a fresh connection, the lease is never lost, the run executes once. */
START_TEST(test_stalled_renewal_keeps_lease)
{
	_cleanup_free_ char *id = NULL, *log = NULL, *dlog = NULL;

	start_lessee(NULL);
	id = enqueue("slow");
	log = wait_run_log(id, "pid=");
	fault("lease", 0, 3, 0, 8000);
	wait_status(id, "succeeded", 30 * SEC);
	assert_clean_success(id);
	dlog = tu_lessee_log(D);
	ck_assert_ptr_null(strstr(dlog, "lease lost"));
}
END_TEST

/* Item 3: a 503 with Retry-After: 60 on a renewal of a 6 s lease: the retry
 * still goes out before the local deadline. */
START_TEST(test_retry_after_capped_by_deadline)
{
	_cleanup_free_ char *id = NULL, *log = NULL;

	start_lessee(NULL);
	id = enqueue("slow");
	log = wait_run_log(id, "pid=");
	fault("lease", 503, 1, 60, 0);
	wait_status(id, "succeeded", 30 * SEC);
	assert_clean_success(id);
	ck_assert_int_eq(tu_lessee_wait_log(D, "lease renewal failed (HTTP 503)", 1 * SEC), 0);
}
END_TEST

/* Item 3: after an outage of renewals (4 failures in a row, lease_refresh 8 s)
 * the next renewal leaves within a second of the API's return, not after a
 * backoff grown towards lease_refresh. */
START_TEST(test_renewal_within_a_second_after_outage)
{
	_cleanup_free_ char *id = NULL, *log = NULL, *before = NULL;
	usec_t back, end;

	start_lessee("lease_ttl = 20s\nlease_refresh = 8s\n");
	id = enqueue("slow30");
	log = wait_run_log(id, "pid=");
	fault("lease", 503, 1000000, 0, 0);
	end = time_mono() + tu_timeout(15 * SEC);
	while (log_count("lease renewal failed (HTTP 503)") < 4) {
		ck_assert_msg(time_mono() < end, "renewals did not fail 4 times");
		tu_sleep(20 * USEC_PER_MSEC);
	}
	before = lease_expiry(id);
	cJSON_Delete(admin("DELETE", "/v1/admin/faults", NULL, 200));
	back = time_mono();
	for (;;) {
		_cleanup_free_ char *now = lease_expiry(id);

		if (!streq(now, before))
			break;
		ck_assert_msg(time_mono() - back < tu_timeout(1 * SEC) + 300 * USEC_PER_MSEC,
		              "no renewal within a second of the API's return");
		tu_sleep(20 * USEC_PER_MSEC);
	}
	ck_assert_double_eq(leases_lost(), 0);
}
END_TEST

/* Item 4: the API is down (503 everywhere) from the child's exit until just
 * after the local lease deadline, ~2 s before the server's lease ends
 * (lease_ttl 20 s, margin 2 s): the result is still delivered, on the same
 * lease, and the run executed once. */
START_TEST(test_result_outlives_local_deadline)
{
	_cleanup_free_ char *id = NULL, *log = NULL, *gate = path_in("gate");
	cJSON *run;
	long long expires;

	start_lessee("lease_ttl = 20s\n");
	id = enqueue("gate");
	log = wait_run_log(id, "waiting-for-gate");
	fault("lease", 503, 1000000, 0, 0);
	fault("log", 503, 1000000, 0, 0);
	fault("complete", 503, 1000000, 0, 0);
	fault("claims", 503, 1000000, 0, 0);
	ck_assert_int_eq(write_file_atomic(gate, "", 0, 0644), 0);
	/* the local deadline (lease_ttl minus its margin) passes */
	ck_assert_int_eq(tu_lessee_wait_log(D, "local lease deadline passed", 25 * SEC), 0);
	cJSON_Delete(admin("DELETE", "/v1/admin/faults", NULL, 200));
	run = tu_lessor_get_run(L, id);
	expires = tu_rfc3339_ms(tu_jstr(run, "lease_expires_at"));
	cJSON_Delete(run);
	/* the premise: the server's lease was still valid when the API came back */
	ck_assert_msg(expires > wall_ms(), "the server's lease ended before the API came back");
	wait_status(id, "succeeded", 30 * SEC);
	assert_clean_success(id);
}
END_TEST

/* Item 8: a claim parked longer than the lease (lease_ttl 3 s, long_poll 10 s)
 * delivers a run whose lease counts from the grant, not from the send. */
START_TEST(test_parked_claim_not_dead_on_arrival)
{
	_cleanup_free_ char *id = NULL;
	cJSON *w;
	long long claimed_at = 0;
	usec_t end;

	start_lessee("lease_ttl = 3s\nlease_refresh = 1s\nlong_poll = 10s\n");
	end = time_mono() + tu_timeout(10 * SEC);
	while (!claimed_at) {
		cJSON *it;

		w = admin("GET", "/v1/workers", NULL, 200);
		cJSON_ArrayForEach(it, cJSON_GetObjectItem(w, "workers"))
		{
			if (streq_ptr(tu_jstr(it, "worker_id"), "test-worker"))
				claimed_at = tu_rfc3339_ms(tu_jstr(it, "last_claim_at"));
		}
		cJSON_Delete(w);
		ck_assert_msg(claimed_at || time_mono() < end, "no claim from the daemon");
		if (!claimed_at)
			tu_sleep(20 * USEC_PER_MSEC);
	}
	/* the property itself: the claim has been parked longer than the local
	 * lease (3 s - 1 s margin) and well within its long poll (10 s) */
	while (wall_ms() < claimed_at + 3000)
		tu_sleep(20 * USEC_PER_MSEC);
	id = enqueue("slow");
	wait_status(id, "succeeded", 30 * SEC);
	assert_clean_success(id);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("lease");
	TCase *tc = tcase_create("lease");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_lease_loss_kills_at_once);
	tcase_add_test(tc, test_stalled_renewal_keeps_lease);
	tcase_add_test(tc, test_retry_after_capped_by_deadline);
	tcase_add_test(tc, test_renewal_within_a_second_after_outage);
	tcase_add_test(tc, test_result_outlives_local_deadline);
	tcase_add_test(tc, test_parked_claim_not_dead_on_arrival);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
