/* Runs claimed ahead of a free slot (worker.prefetch, issue 15), against a
 * real lessor: with one slot, the next run starts as the running one exits,
 * without waiting for that one's completion to be answered; a run claimed
 * ahead is given back unstarted at a drain, when no slot came free within
 * prefetch_hold (and then none is claimed ahead until a slot frees), and is
 * cancelled without being started when the API asks. */
#include <cJSON.h>
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "jsonutil.h"
#include "lessee_proc.h"
#include "lessor_proc.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"

#define SEC USEC_PER_SEC

static struct tu_lessor *L;
static struct tu_lessee *D;
static char *dir; /* the gate file and the marks of runs that started */

static void setup(void)
{
	static char *const args[] = {"--enable-faults", NULL};

	dir = tu_tmpdir("prefetch");
	ck_assert_ptr_nonnull(dir);
	ck_assert_int_eq(tu_lessor_start(&(struct tu_lessor_opts){.args = args}, &L), 0);
}

static void teardown(void)
{
	D = tu_lessee_free(D);
	if (L && tu_lessor_pid(L) > 0)
		ck_assert_int_eq(tu_lessor_stop(L), 0);
	L = tu_lessor_free(L);
	free(dir);
	dir = NULL;
}

static char *enqueue(const char *workflow)
{
	char *id = tu_lessor_enqueue_one(L, workflow);

	ck_assert_ptr_nonnull(id);
	return id;
}

/* One slot.  Workflow "ok" marks that it ran; "gate" waits for the file
 * "go" in dir. */
static void start_lessee(const char *worker_extra)
{
	_cleanup_free_ char *conf = NULL;

	ck_assert_int_ge(
	    asprintf(&conf,
	             "[worker]\nconcurrency = 1\nprefetch = 1\nlease_ttl = 60s\n%2$s"
	             "[status]\nlisten = 127.0.0.1:0\n"
	             "[workflow.ok]\ncommand = /bin/sh -c 'touch %1$s/ran.$LESSEE_RUN_ID'\n"
	             "[workflow.gate]\ncommand = /bin/sh -c 'while [ ! -e %1$s/go ]; do "
	             "sleep 0.02; done'\n",
	             dir, worker_extra),
	    0);
	ck_assert_int_eq(tu_lessee_start(&(struct tu_lessee_opts){.lessor = L, .conf = conf}, &D),
	                 0);
}

static bool ran(const char *id)
{
	_cleanup_free_ char *path = NULL;
	struct stat st;

	ck_assert_int_ge(asprintf(&path, "%s/ran.%s", dir, id), 0);
	return stat(path, &st) == 0;
}

static void open_gate(void)
{
	_cleanup_free_ char *path = NULL;

	ck_assert_int_ge(asprintf(&path, "%s/go", dir), 0);
	ck_assert_int_eq(write_file_atomic(path, "", 0, 0644), 0);
}

static const char *status_of(const char *id, char *buf, size_t n)
{
	cJSON *o = tu_lessor_get_run(L, id);

	ck_assert_ptr_nonnull(o);
	snprintf(buf, n, "%s", tu_jstr(o, "status") ? tu_jstr(o, "status") : "?");
	cJSON_Delete(o);
	return buf;
}

/* Until the daemon holds n runs claimed ahead (lessee_runs_ready). */
static void wait_ready(double n)
{
	usec_t end = time_mono() + tu_timeout(20 * SEC);

	while (tu_lessee_metric(D, "lessee_runs_ready", NULL, NULL) != n) {
		if (time_mono() >= end)
			tu_lessee_dump_log(D);
		ck_assert_msg(time_mono() < end, "never %.0f runs ready", n);
		tu_sleep(20 * USEC_PER_MSEC);
	}
}

/* a runs (held by its gate) and b is claimed ahead.  Then the server holds
 * every claim and a's completion for 30 s, and a exits: b starts at once,
 * from no claim, and is done while a's completion is still held.  Without
 * prefetch b could only come with a claim, 30 s later. */
START_TEST(test_next_starts_without_a_claim)
{
	_cleanup_free_ char *a = NULL, *b = NULL;
	char st[32];

	a = enqueue("gate");
	b = enqueue("ok");
	start_lessee("prefetch_hold = 1min\n");
	ck_assert_int_eq(tu_lessor_wait_status(L, b, "running", tu_timeout(20 * SEC)), 0);
	ck_assert_int_eq(
	    tu_lessor_fault(L, "{\"endpoint\":\"claims\",\"count\":1000,\"delay_ms\":30000}"), 0);
	ck_assert_int_eq(
	    tu_lessor_fault(L, "{\"endpoint\":\"complete\",\"count\":1,\"delay_ms\":30000}"), 0);
	open_gate();
	ck_assert_int_eq(tu_lessor_wait_status(L, b, "succeeded", tu_timeout(20 * SEC)), 0);
	if (!streq(status_of(a, st, sizeof(st)), "running"))
		tu_lessee_dump_log(D);
	ck_assert_str_eq(status_of(a, st, sizeof(st)), "running");
	ck_assert(ran(b));
}
END_TEST

/* A drain gives the run claimed ahead back at once, unstarted, while the
 * running one is left to finish. */
START_TEST(test_drain_gives_back_ready)
{
	_cleanup_free_ char *a = NULL, *b = NULL;

	a = enqueue("gate");
	b = enqueue("ok");
	start_lessee("prefetch_hold = 1min\n");
	wait_ready(1);
	ck_assert_int_eq(tu_lessee_signal(D, SIGTERM), 0);
	ck_assert_int_eq(tu_lessor_wait_status(L, b, "pending", tu_timeout(20 * SEC)), 0);
	ck_assert_int_eq(tu_lessee_wait_log(D, "releasing the run unstarted (draining)", 0), 0);
	open_gate();
	ck_assert_int_eq(tu_lessee_wait(D, tu_timeout(30 * SEC)), 0);
	ck_assert_int_eq(tu_lessor_wait_status(L, a, "succeeded", 0), 0);
	ck_assert_int_eq(tu_lessor_wait_status(L, b, "pending", 0), 0);
	ck_assert(!ran(b));
}
END_TEST

/* No slot frees within prefetch_hold: the run claimed ahead goes back (to
 * another worker, sooner), and none is claimed ahead again while the slot
 * stays busy (one release, not one per hold).  When the slot frees, b runs. */
START_TEST(test_hold_gives_back_once)
{
	_cleanup_free_ char *a = NULL, *b = NULL;

	a = enqueue("gate");
	b = enqueue("ok");
	start_lessee("prefetch_hold = 300ms\n");
	ck_assert_int_eq(
	    tu_lessee_wait_log(D, "no slot came free within prefetch_hold", tu_timeout(20 * SEC)),
	    0);
	ck_assert_int_eq(tu_lessor_wait_status(L, b, "pending", tu_timeout(20 * SEC)), 0);
	/* the property is over time: five holds with the slot still busy */
	tu_sleep(1500 * USEC_PER_MSEC);
	ck_assert_double_eq(tu_lessee_metric(D, "lessee_api_requests_total", "endpoint", "release"),
	                    1);
	ck_assert_int_eq(tu_lessor_wait_status(L, b, "pending", 0), 0);
	ck_assert(!ran(b));
	open_gate();
	ck_assert_int_eq(tu_lessor_wait_status(L, a, "succeeded", tu_timeout(20 * SEC)), 0);
	ck_assert_int_eq(tu_lessor_wait_status(L, b, "succeeded", tu_timeout(20 * SEC)), 0);
}
END_TEST

/* The API said nothing else was pending (queue_depth 0): a run enqueued
 * while the only slot is busy is not claimed ahead here, where it would
 * wait, but left to a worker with a free slot.  Once the slot frees it runs
 * here. */
START_TEST(test_empty_queue_not_claimed_ahead)
{
	_cleanup_free_ char *a = NULL, *b = NULL;

	a = enqueue("gate");
	start_lessee("prefetch_hold = 1min\n");
	ck_assert_int_eq(tu_lessor_wait_status(L, a, "running", tu_timeout(20 * SEC)), 0);
	b = enqueue("ok");
	/* the property is over time: a claim parked for it would take it at once */
	tu_sleep(1000 * USEC_PER_MSEC);
	ck_assert_int_eq(tu_lessor_wait_status(L, b, "pending", 0), 0);
	ck_assert_double_eq(tu_lessee_metric(D, "lessee_runs_ready", NULL, NULL), 0);
	open_gate();
	ck_assert_int_eq(tu_lessor_wait_status(L, b, "succeeded", tu_timeout(20 * SEC)), 0);
}
END_TEST

/* A cancel of the run claimed ahead reaches it through the claim that stays
 * open for cancels: reported cancelled, never started. */
START_TEST(test_cancel_ready)
{
	_cleanup_free_ char *a = NULL, *b = NULL, *path = NULL;
	long status = 0;

	a = enqueue("gate");
	b = enqueue("ok");
	start_lessee("prefetch_hold = 1min\n");
	wait_ready(1);
	ck_assert_int_ge(asprintf(&path, "/v1/runs/%s/cancel", b), 0);
	ck_assert_int_eq(tu_lessor_json(L, "POST", path, NULL, &status, NULL), 0);
	ck_assert_int_eq(status, 200);
	ck_assert_int_eq(tu_lessor_wait_status(L, b, "cancelled", tu_timeout(20 * SEC)), 0);
	ck_assert(!ran(b));
	wait_ready(0);
	open_gate();
	ck_assert_int_eq(tu_lessor_wait_status(L, a, "succeeded", tu_timeout(20 * SEC)), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("prefetch");
	TCase *tc = tcase_create("prefetch");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_next_starts_without_a_claim);
	tcase_add_test(tc, test_drain_gives_back_ready);
	tcase_add_test(tc, test_hold_gives_back_once);
	tcase_add_test(tc, test_cancel_ready);
	tcase_add_test(tc, test_empty_queue_not_claimed_ahead);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
