/* max_timeout and workflow concurrency in lib/conf (issue 14): defaults,
 * inheritance from [worker], bounds, and the start-up warnings for caps that
 * always or never bind. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"

static char *dir;

static int load(const char *text, struct conf **ret, char **err)
{
	_cleanup_free_ char *path = NULL, *all = NULL;
	const struct conf_override ov = {"--api-url", "api.url=http://127.0.0.1:8080"};
	struct conf_source src = {.path = NULL, .overrides = &ov, .n_overrides = 1};

	ck_assert_int_ge(asprintf(&path, "%s/lessee.conf", dir), 0);
	ck_assert_int_ge(
	    asprintf(&all, "[worker]\nspool_dir = %1$s/spool\nrun_dir = %1$s/run\n%2$s", dir, text),
	    0);
	ck_assert_int_eq(write_file_atomic(path, all, strlen(all), 0644), 0);
	src.path = path;
	*ret = NULL;
	*err = NULL;
	return conf_load(&src, ret, err);
}

static struct conf *load_ok(const char *text)
{
	struct conf *c;
	_cleanup_free_ char *err = NULL;

	ck_assert_msg(load(text, &c, &err) == 0, "%s", err ? err : "?");
	return c;
}

static bool warned(const struct conf *c, const char *needle)
{
	for (char **w = c->warnings; w && *w; w++)
		if (strstr(*w, needle))
			return true;
	return false;
}

static void setup(void)
{
	dir = tu_tmpdir("conf-caps");
	ck_assert_ptr_nonnull(dir);
}

static void teardown(void)
{
	rm_rf(dir);
	free(dir);
}

START_TEST(test_defaults_and_inheritance)
{
	_cleanup_conf_ struct conf *c =
	    load_ok("max_timeout = 1h\n"
	            "[workflow.a]\ncommand = /bin/true\n"
	            "[workflow.b]\ncommand = /bin/true\nmax_timeout = 5min\n"
	            "concurrency = 2\n");
	_cleanup_conf_ struct conf *d = load_ok("[workflow.a]\ncommand = /bin/true\n");

	ck_assert_uint_eq(c->worker.max_timeout, USEC_PER_HOUR);
	ck_assert_uint_eq(conf_find_workflow(c, "a")->max_timeout, USEC_PER_HOUR);
	ck_assert_uint_eq(conf_find_workflow(c, "a")->concurrency, 0);
	ck_assert_uint_eq(conf_find_workflow(c, "b")->max_timeout, 5 * USEC_PER_MINUTE);
	ck_assert_uint_eq(conf_find_workflow(c, "b")->concurrency, 2);
	ck_assert_uint_eq(d->worker.max_timeout, USEC_INFINITY);
	ck_assert_uint_eq(conf_find_workflow(d, "a")->max_timeout, USEC_INFINITY);
	ck_assert(!warned(c, "max_timeout"));
}
END_TEST

START_TEST(test_bounds)
{
	struct conf *c;
	char *err;

	ck_assert_int_lt(load("max_timeout = 0\n[workflow.a]\ncommand = /bin/true\n", &c, &err), 0);
	ck_assert_ptr_nonnull(strstr(err, "max_timeout"));
	free(err);
	ck_assert_int_lt(load("[workflow.a]\ncommand = /bin/true\nconcurrency = -1\n", &c, &err),
	                 0);
	ck_assert_ptr_nonnull(strstr(err, "concurrency"));
	free(err);
	ck_assert_int_lt(load("[workflow.a]\ncommand = /bin/true\nconcurrency = 10001\n", &c, &err),
	                 0);
	free(err);
}
END_TEST

/* 10,000 runs on one daemon (issue 15): both caps are 10000. */
START_TEST(test_ten_thousand)
{
	_cleanup_conf_ struct conf *c = load_ok(
	    "concurrency = 10000\n[workflow.a]\ncommand = /bin/true\nconcurrency = 10000\n");

	ck_assert_uint_eq(c->worker.concurrency, 10000);
	ck_assert_uint_eq(conf_find_workflow(c, "a")->concurrency, 10000);
}
END_TEST

START_TEST(test_warnings)
{
	_cleanup_conf_ struct conf *c =
	    load_ok("concurrency = 2\nmax_timeout = 1h\n"
	            "[workflow.a]\ncommand = /bin/true\ntimeout = 2h\n"
	            "[workflow.b]\ncommand = /bin/true\nconcurrency = 3\n");

	ck_assert(warned(c, "workflow.a: timeout 2h is above max_timeout 1h"));
	ck_assert(warned(c, "workflow.b: concurrency 3 is above worker.concurrency 2"));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("conf_caps");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_defaults_and_inheritance);
	tcase_add_test(tc, test_bounds);
	tcase_add_test(tc, test_warnings);
	tcase_add_test(tc, test_ten_thousand);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
