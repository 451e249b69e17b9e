/* Runs and the file descriptor limit (issue 15: 10,000 runs on one daemon),
 * against a real lessor: a run holds one fd (its output pipe; its exit is
 * found by pid, as the daemon reaps every child), the API connections are
 * bounded, and a concurrency whose fds cannot fit under the hard limit is
 * lowered at start, said once, rather than runs failing to start and leases
 * being lost when no socket is left for their renewals. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lessee_proc.h"
#include "lessor_proc.h"
#include "testutil.h"
#include "util/macro.h"

#define SEC USEC_PER_SEC

static struct tu_lessor *L;
static struct tu_lessee *D;

static void setup(void)
{
	ck_assert_int_eq(tu_lessor_start(&(struct tu_lessor_opts){0}, &L), 0);
}

static void teardown(void)
{
	D = tu_lessee_free(D);
	if (L && tu_lessor_pid(L) > 0)
		ck_assert_int_eq(tu_lessor_stop(L), 0);
	L = tu_lessor_free(L);
}

static double renewals(const char *result)
{
	return tu_lessee_metric(D, "lessee_lease_renewals_total", "result", result);
}

/* The lines of the log that contain `needle`, on stderr: why a check failed. */
static void print_lines(const char *log, const char *needle)
{
	for (const char *p = log, *nl; *p; p = nl + 1) {
		nl = strchrnul(p, '\n');
		if (memmem(p, (size_t)(nl - p), needle, strlen(needle)))
			fprintf(stderr, "%.*s\n", (int)(nl - p), p);
		if (!*nl)
			break;
	}
}

/* n runs that write, sleep 2 s (two renewals at lease_refresh 1 s) and write
 * again, queued before a daemon of `concurrency` starts under `nofile`
 * ("--nofile=SOFT:HARD"); all must succeed, with no fd ever missing. */
static void run_under_limit(const char *nofile, int concurrency, int n)
{
	char limit[64], conf[256], **ids = calloc(n, sizeof(*ids));
	char *const wrap[] = {"prlimit", limit, "--", NULL};
	_cleanup_free_ char *log = NULL;
	double failed, lost, ok;

	ck_assert_ptr_nonnull(ids);
	snprintf(limit, sizeof(limit), "%s", nofile);
	for (int i = 0; i < n; i++) {
		ids[i] = tu_lessor_enqueue(L, "{\"workflow\":\"talk\",\"max_attempts\":1}");
		ck_assert_ptr_nonnull(ids[i]);
	}
	/* the helper's 6 s lease, stretched under valgrind, where two slow
	 * daemons take seconds to claim and renew 300 runs */
	snprintf(conf, sizeof(conf),
	         "[worker]\nconcurrency = %d\nlease_ttl = %llus\n[status]\nlisten = 127.0.0.1:0\n"
	         "[workflow.talk]\ncommand = /bin/sh -c 'echo up; sleep 2; echo down'\n",
	         concurrency, (unsigned long long)tu_timeout(6));
	ck_assert_int_eq(
	    tu_lessee_start(&(struct tu_lessee_opts){.lessor = L, .conf = conf, .wrap = wrap}, &D),
	    0);
	for (int i = 0; i < n; i++) {
		ck_assert_int_eq(
		    tu_lessor_wait_status(L, ids[i], "succeeded", tu_timeout(120 * SEC)), 0);
		free(ids[i]);
	}
	free(ids);
	log = tu_lessee_log(D);
	ck_assert_ptr_nonnull(log);
	ck_assert_msg(!strstr(log, "Too many open files"), "an fd was missing");
	failed = renewals("error");
	lost = renewals("lost");
	ok = renewals("ok");
	if (failed != 0)
		print_lines(log, "lease renewal failed");
	if (lost != 0)
		print_lines(log, "lost");
	ck_assert_msg(failed == 0 && lost == 0, "%.0f renewals failed, %.0f leases lost", failed,
	              lost);
	ck_assert_msg(ok >= n, "%.0f renewals for %d runs", ok, n);
}

/* 300 runs under 600 fds: they fit at one fd each beside the daemon's
 * bounded 292 (a pidfd each and a connection per run shipping its log did
 * not). */
START_TEST(test_runs_fit_one_fd_each)
{
	run_under_limit("--nofile=600:600", 300, 300);
	/* in cgroup kill mode a run holds its cgroup directory too: 2 fds.
	 * Under valgrind (LESSEE_WRAP) the daemon gets 588 of the 600: valgrind
	 * keeps 12 for itself, so 300 do not fit there, by design. */
	if (tu_lessee_wait_log(D, "kill mode: cgroup", 0) < 0 && !tu_wrapped())
		ck_assert_int_eq(tu_lessee_wait_log(D, "lowered to", 0), -ETIMEDOUT);
}
END_TEST

/* concurrency 300 under 400 fds: lowered to what fits, said once; the 300
 * runs queued all succeed, the last ones after the first. */
START_TEST(test_concurrency_lowered_to_the_limit)
{
	run_under_limit("--nofile=400:400", 300, 300);
	ck_assert_int_eq(tu_lessee_wait_log(D, "worker.concurrency=300 lowered to ", 0), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("fdlimit");
	TCase *tc = tcase_create("fdlimit");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 240);
	tcase_add_test(tc, test_runs_fit_one_fd_each);
	tcase_add_test(tc, test_concurrency_lowered_to_the_limit);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
