/* lib/conf reporting: every error at once with its origin, URLs validated in
 * full, hints for inline comments and keys in the wrong section, duplicate keys,
 * commands and working directories checked before the first run, no $VAR. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conf/conf.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"

#define BASE "[api]\nurl = http://127.0.0.1:1\n\n[workflow.w]\ncommand = /bin/true\n"

static char *tmp;

static void setup(void)
{
	tmp = tu_tmpdir("confrep");
	ck_assert_ptr_nonnull(tmp);
}

static void teardown(void)
{
	rm_rf(tmp);
	free(tmp);
}

static char *put(const char *name, const char *text, mode_t mode)
{
	char *p;

	ck_assert_int_ge(asprintf(&p, "%s/%s", tmp, name), 0);
	ck_assert_int_eq(write_file_atomic(p, text, strlen(text), mode), 0);
	return p;
}

/* Load text as tmp/lessee.conf; *ret_err: what conf_load said, %1$s = the path. */
static int load(const char *text, bool check_files, struct conf **ret, char **ret_err,
                char **ret_path)
{
	char *path = put("lessee.conf", text, 0644);
	struct conf_source src = {.path = path, .check_files = check_files};

	*ret = NULL;
	*ret_err = NULL;
	*ret_path = path;
	return conf_load(&src, ret, ret_err);
}

static void expect_errors(const char *text, bool check_files, const char *want_fmt)
{
	_cleanup_free_ char *err = NULL, *path = NULL, *want = NULL;
	struct conf *c;
	int r = load(text, check_files, &c, &err, &path);

	ck_assert_int_ge(asprintf(&want, want_fmt, path), 0);
	ck_assert_msg(r == -EINVAL, "loaded (r=%d) but wanted: %s", r, want);
	ck_assert_ptr_null(c);
	ck_assert_ptr_nonnull(err);
	ck_assert_str_eq(err, want);
}

static struct conf *expect_ok(const char *text, bool check_files)
{
	_cleanup_free_ char *err = NULL, *path = NULL;
	struct conf *c;
	int r = load(text, check_files, &c, &err, &path);

	ck_assert_msg(r == 0, "failed: %s", err ? err : "?");
	return c;
}

static bool has_warning(const struct conf *c, const char *needle)
{
	for (char **w = c->warnings; *w; w++)
		if (strstr(*w, needle))
			return true;
	return false;
}

START_TEST(test_urls_validated)
{
	static const struct {
		const char *url, *why;
	} bad[] = {
	    {"http://host:99999", "Port number was not a decimal number between 0 and 65535"},
	    {"http://:8080", "No host part in the URL"},
	    {"http://host:abc/", "Port number was not a decimal number between 0 and 65535"},
	    {"http://[::1:8080", "Bad IPv6 address"},
	    {"http://host:0/", "port 0 is not a port to connect to"},
	    {"https://ho^st/", "Bad hostname"},
	};
	static const char *const good[] = {"https://host:65535", "https://[::1]:8443/prefix/",
	                                   "http://127.0.0.1", "http://localhost:65535/p"};

	for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
		_cleanup_free_ char *text = NULL, *want = NULL;

		ck_assert_int_ge(asprintf(&text,
		                          "[api]\nurl = %s\n[workflow.w]\ncommand = /bin/true\n",
		                          bad[i].url),
		                 0);
		ck_assert_int_ge(asprintf(&want, "%%1$s:2: api.url: '%s' is not a valid URL: %s",
		                          bad[i].url, bad[i].why),
		                 0);
		expect_errors(text, false, want);
	}
	for (size_t i = 0; i < ELEMENTSOF(good); i++) {
		_cleanup_free_ char *text = NULL;

		ck_assert_int_ge(asprintf(&text,
		                          "[api]\nurl = %s\n[workflow.w]\ncommand = /bin/true\n",
		                          good[i]),
		                 0);
		conf_free(expect_ok(text, false));
	}
	/* the heartbeat URL goes through the same check */
	expect_errors(BASE "[status]\nheartbeat_url = http://:1/ping\n", false,
	              "%1$s:7: status.heartbeat_url: 'http://:1/ping' is not a valid URL: No host "
	              "part in the URL");
}
END_TEST

/* Every problem at once, each with its line; no knock-on error for a key
 * whose own value was refused. */
START_TEST(test_all_errors_at_once)
{
	expect_errors(
	    "[api]\nurl = http://host:99999\n"
	    "[worker]\nconcurrency = lots\nlease_ttl = 5q\nlease_refresh = 60s\n"
	    "[bogus]\nx = 1\n"
	    "[workflow.a]\ncommand = relative/path\n"
	    "[workflow.b]\ntimeout = 5min\n",
	    false,
	    "%1$s:2: api.url: 'http://host:99999' is not a valid URL: Port number was not a "
	    "decimal number between 0 and 65535\n"
	    "%1$s:4: worker.concurrency: 'lots' is not a whole number\n"
	    "%1$s:5: worker.lease_ttl: '5q' is not a duration (like 90s, 5min, 1h, "
	    "250ms)\n"
	    "%1$s:7: unknown section [bogus]\n"
	    "%1$s:10: workflow.a.command: 'relative/path' is not an absolute path "
	    "(commands run without a shell or PATH search)\n"
	    "%1$s:11: workflow.b: command is not set");
	/* nothing but the two missing pieces */
	expect_errors("", false,
	              "%1$s: api.url is not set\n"
	              "%1$s: no [workflow.NAME] section: this worker would run nothing");
}
END_TEST

START_TEST(test_inline_comments)
{
	_cleanup_conf_ struct conf *c = NULL;

	expect_errors(BASE "[worker]\nconcurrency = 4 # four slots\n", false,
	              "%1$s:7: worker.concurrency: '4 # four slots' is not a whole number (inline "
	              "comments are not supported: put the comment on a line of its own)");
	expect_errors(BASE "[worker]\nkill_grace = 5s ; enough\n", false,
	              "%1$s:7: worker.kill_grace: '5s ; enough' is not a duration (like 90s, 5min, "
	              "1h, 250ms) (inline comments are not supported: put the comment on a line of "
	              "its own)");
	/* a value that takes the comment in as words is loaded, with a warning */
	c = expect_ok(BASE "command = /bin/echo hi # greet\n", false);
	ck_assert_str_eq(c->workflows[0].argv[2], "#");
	ck_assert_msg(has_warning(c, ":6: workflow.w.command: ' #' is part of the value (inline "
	                             "comments are not supported)"),
	              "%s", c->warnings[0] ? c->warnings[0] : "(none)");
}
END_TEST

START_TEST(test_key_in_wrong_section)
{
	expect_errors(
	    BASE "kill_grace = 5s\n", false,
	    "%1$s:6: unknown key 'kill_grace' in [workflow.w] (`kill_grace` is a [worker] "
	    "key)");
	expect_errors(
	    BASE "[api]\nconcurrency = 2\n", false,
	    "%1$s:7: unknown key 'concurrency' in [api] (`concurrency` is a [worker] key)");
	expect_errors(BASE "[worker]\ncommand = /bin/true\n", false,
	              "%1$s:7: unknown key 'command' in [worker] (`command` is a [workflow.NAME] "
	              "key)");
	/* a typo still gets its suggestion */
	expect_errors(BASE "[worker]\nkill_grase = 5s\n", false,
	              "%1$s:7: unknown key 'kill_grase' in [worker] (did you mean 'kill_grace'?)");
}
END_TEST

START_TEST(test_duplicate_keys_warn)
{
	_cleanup_conf_ struct conf *c =
	    expect_ok(BASE "[worker]\nconcurrency = 2\nid = x\nconcurrency = 3\n"
	                   "[workflow.w]\nenv = A=1\nenv = B=2\n",
	              false);
	_cleanup_free_ char *want = NULL;

	ck_assert_uint_eq(c->worker.concurrency, 3);
	ck_assert_int_ge(asprintf(&want,
	                          "%s/lessee.conf:9: worker.concurrency is set again (first at "
	                          "line 7): the last one wins",
	                          tmp),
	                 0);
	ck_assert_msg(has_warning(c, want), "%s", c->warnings[0] ? c->warnings[0] : "(none)");
	ck_assert(!has_warning(c, "env is set again")); /* env assignments accumulate */
	ck_assert_uint_eq(strv_length(c->warnings), 1);
}
END_TEST

START_TEST(test_command_and_workdir_checked)
{
	_cleanup_free_ char *noexec = put("noexec.sh", "#!/bin/sh\n", 0644);
	_cleanup_free_ char *exec = put("ok.sh", "#!/bin/sh\n", 0755);
	_cleanup_free_ char *text = NULL, *want = NULL;
	_cleanup_conf_ struct conf *c = NULL;

	ck_assert_int_ge(
	    asprintf(&text,
	             "[api]\nurl = http://127.0.0.1:1\n"
	             "[workflow.a]\ncommand = /nonexistent/lessee-bin --flag\n"
	             "[workflow.b]\ncommand = %1$s/noexec.sh\n"
	             "[workflow.c]\ncommand = %1$s\n"
	             "[workflow.d]\ncommand = %1$s/ok.sh\n"
	             "working_directory = %1$s/nowhere\n"
	             "[workflow.e]\ncommand = %1$s/ok.sh\nworking_directory = %1$s/ok.sh\n",
	             tmp),
	    0);
	ck_assert_int_ge(
	    asprintf(
	        &want,
	        "%%1$s:4: workflow.a.command: /nonexistent/lessee-bin: No such file or directory\n"
	        "%%1$s:6: workflow.b.command: %1$s/noexec.sh is not executable (mode 0644)\n"
	        "%%1$s:8: workflow.c.command: %1$s is not a regular file\n"
	        "%%1$s:11: workflow.d.working_directory: %1$s/nowhere: No such file or "
	        "directory\n"
	        "%%1$s:14: workflow.e.working_directory: %1$s/ok.sh is not a directory",
	        tmp),
	    0);
	expect_errors(text, true, want);
	/* without check_files (unit tests of parsing), none of this is looked at */
	c = expect_ok(text, false);
	c = conf_free(c);
	free(text);
	ck_assert_int_ge(asprintf(&text,
	                          "[api]\nurl = http://127.0.0.1:1\n"
	                          "[workflow.d]\ncommand = %1$s/ok.sh\nworking_directory = %1$s\n",
	                          tmp),
	                 0);
	c = expect_ok(text, true);
}
END_TEST

START_TEST(test_env_dollar_refused)
{
	_cleanup_conf_ struct conf *c = NULL;

	expect_errors(BASE "env = HOME_COPY=$HOME\n", false,
	              "%1$s:6: workflow.w.env: 'HOME_COPY=$HOME': values are not expanded ($VAR is "
	              "passed as it is written); write \\x24 for a literal '$'");
	expect_errors(BASE "env = \"P=${PATH}:/opt\"\n", false,
	              "%1$s:6: workflow.w.env: 'P=${PATH}:/opt': values are not expanded ($VAR is "
	              "passed as it is written); write \\x24 for a literal '$'");
	/* a '$' that is not a reference, and the escape, are fine */
	c = expect_ok(BASE "env = PRICE=5$ LIT=\\x24HOME\n", false);
	ck_assert_str_eq(c->workflows[0].env[0], "PRICE=5$");
	ck_assert_str_eq(c->workflows[0].env[1], "LIT=$HOME");
}
END_TEST

/* conf_print's output loads again, '$' included. */
START_TEST(test_print_round_trip_dollar)
{
	_cleanup_conf_ struct conf *c = expect_ok(BASE "env = LIT=\\x24HOME\n", false);
	_cleanup_conf_ struct conf *again = NULL;
	_cleanup_free_ char *text = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&text, &n);

	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(conf_print(c, f), 0);
	fclose(f);
	again = expect_ok(text, false);
	ck_assert_str_eq(again->workflows[0].env[0], "LIT=$HOME");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("conf_report");
	TCase *tc = tcase_create("conf_report");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_urls_validated);
	tcase_add_test(tc, test_all_errors_at_once);
	tcase_add_test(tc, test_inline_comments);
	tcase_add_test(tc, test_key_in_wrong_section);
	tcase_add_test(tc, test_duplicate_keys_warn);
	tcase_add_test(tc, test_command_and_workdir_checked);
	tcase_add_test(tc, test_env_dollar_refused);
	tcase_add_test(tc, test_print_round_trip_dollar);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
