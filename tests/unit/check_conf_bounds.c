/* lib/conf: the lease bounds --check-config enforces (issue 10, item 2):
 * settings under which a renewal could not be retried before the local lease
 * ends are refused with a message naming the keys and the bound; settings the
 * daemon makes safe by itself (a long poll longer than the lease, a request
 * timeout longer than the lease, any kill_grace) are accepted. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"

#define BASE "[api]\nurl = http://127.0.0.1:1\n[workflow.w]\ncommand = /bin/true\n[worker]\n"

static char *tmp, *path;

static void setup(void)
{
	tmp = tu_tmpdir("conf-bounds");
	ck_assert_ptr_nonnull(tmp);
	ck_assert_int_ge(asprintf(&path, "%s/lessee.conf", tmp), 0);
}

static void teardown(void)
{
	rm_rf(tmp);
	free(tmp);
	free(path);
}

static int load(const char *worker, struct conf **c, char **err)
{
	_cleanup_free_ char *text = NULL;
	struct conf_source src = {.path = path};

	ck_assert_int_ge(asprintf(&text, BASE "%s", worker), 0);
	ck_assert_int_eq(write_file_atomic(path, text, strlen(text), 0644), 0);
	*c = NULL;
	*err = NULL;
	return conf_load(&src, c, err);
}

static void expect_ok(const char *worker)
{
	struct conf *c;
	_cleanup_free_ char *err = NULL;

	ck_assert_msg(load(worker, &c, &err) == 0, "refused [worker] %s: %s", worker, err);
	conf_free(c);
}

/* Refused, with an error that names every word in want (NULL-terminated). */
static void expect_refused(const char *worker, const char *const *want)
{
	struct conf *c;
	_cleanup_free_ char *err = NULL;

	ck_assert_msg(load(worker, &c, &err) == -EINVAL, "accepted [worker] %s", worker);
	ck_assert_ptr_null(c);
	ck_assert_ptr_nonnull(err);
	for (size_t i = 0; want[i]; i++)
		ck_assert_msg(strstr(err, want[i]), "'%s' not in: %s", want[i], err);
}

START_TEST(test_margin)
{
	ck_assert_uint_eq(conf_lease_margin(90 * USEC_PER_SEC), 9 * USEC_PER_SEC);
	ck_assert_uint_eq(conf_lease_margin(6 * USEC_PER_SEC), 1 * USEC_PER_SEC);
	ck_assert_uint_eq(conf_lease_margin(1 * USEC_PER_SEC), 500 * USEC_PER_MSEC);
	ck_assert_uint_eq(conf_lease_margin(1 * USEC_PER_HOUR), 6 * USEC_PER_MINUTE);
}
END_TEST

START_TEST(test_renew_window_refused)
{
	/* 3s - 1s margin - 1.5s leaves 0.5s: no room to retry a stalled renewal */
	expect_refused("lease_ttl = 3s\nlease_refresh = 1500ms\n",
	               (const char *const[]){"worker.lease_ttl (3s)", "margin (1s)",
	                                     "worker.lease_refresh (1s500ms)", "at least 1s",
	                                     "lessee.conf:7", NULL});
	/* 2s: 1s margin, whatever lease_refresh */
	expect_refused("lease_ttl = 2s\nlease_refresh = 100ms\n",
	               (const char *const[]){"worker.lease_ttl (2s)", "lessee.conf:7", NULL});
	expect_refused("lease_ttl = 1s\nlease_refresh = 100ms\n",
	               (const char *const[]){"worker.lease_ttl (1s)", "margin (500ms)", NULL});
	/* the example: refused, lease_refresh (30s default) named */
	expect_refused(
	    "lease_ttl = 4s\nlong_poll = 10s\n",
	    (const char *const[]){"worker.lease_refresh (30s)", "worker.lease_ttl (4s)", NULL});
}
END_TEST

START_TEST(test_safe_by_construction_accepted)
{
	/* exactly the bound: 3s - 1s - 1s = 1s */
	expect_ok("lease_ttl = 3s\nlease_refresh = 1s\n");
	/* a long poll longer than the lease: the lease counts from the grant */
	expect_ok("lease_ttl = 4s\nlease_refresh = 2s\nlong_poll = 10s\n");
	expect_ok("lease_ttl = 15s\nlease_refresh = 5s\n"); /* default long_poll 20s */
	/* renewal attempts are bounded by the lease, not by request_timeout */
	expect_ok("lease_ttl = 10s\nlease_refresh = 2s\n[api]\nrequest_timeout = 1min\n");
	/* a lost lease is SIGKILLed at once: kill_grace is not bounded by it */
	expect_ok("lease_ttl = 10s\nlease_refresh = 2s\nkill_grace = 1h\n");
	/* the test daemons' and the shipped defaults */
	expect_ok("lease_ttl = 6s\nlease_refresh = 1s\nlong_poll = 2s\n");
	expect_ok("");
}
END_TEST

START_TEST(test_no_stale_request_timeout_warning)
{
	struct conf *c;
	_cleanup_free_ char *err = NULL;

	ck_assert_int_eq(load("[api]\nrequest_timeout = 1h\n", &c, &err), 0);
	for (size_t i = 0; c->warnings[i]; i++)
		ck_assert_msg(!strstr(c->warnings[i], "renewal"), "warning: %s", c->warnings[i]);
	conf_free(c);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("conf_bounds");
	TCase *tc = tcase_create("bounds");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_margin);
	tcase_add_test(tc, test_renew_window_refused);
	tcase_add_test(tc, test_safe_by_construction_accepted);
	tcase_add_test(tc, test_no_stale_request_timeout_warning);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
