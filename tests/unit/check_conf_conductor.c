/* lib/conf for the driver layer (issue 12): [api] protocol, the Conductor keys
 * (key_id, key_secret_file, domain), [workflow.X] task_type and
 * terminal_exit_codes: defaults, every refusal, the secret never printed,
 * --check-config's output loading again, reload diffs and the warnings. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "conf/conf.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"

static char *dir;

static void setup(void)
{
	dir = tu_tmpdir("conf-conductor");
	ck_assert_ptr_nonnull(dir);
}

static void teardown(void)
{
	rm_rf(dir);
	free(dir);
}

static char *put(const char *name, const char *text, mode_t mode)
{
	char *path;

	ck_assert_int_ge(asprintf(&path, "%s/%s", dir, name), 0);
	ck_assert_int_eq(write_file_atomic(path, text, strlen(text), mode), 0);
	ck_assert_int_eq(chmod(path, mode), 0);
	return path;
}

/* text after a [worker] section naming the test's directories; %1$s in text is dir. */
static int load(const char *text, struct conf **ret, char **err)
{
	_cleanup_free_ char *body = NULL, *all = NULL, *path = NULL;
	struct conf_source src = {0};

	ck_assert_int_ge(asprintf(&body, text, dir), 0);
	ck_assert_int_ge(asprintf(&all,
	                          "[worker]\nspool_dir = %1$s/spool\nrun_dir = %1$s/run\n"
	                          "lease_refresh = 5s\n%2$s",
	                          dir, body),
	                 0);
	path = put("lessee.conf", all, 0644);
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

static void load_fails(const char *text, const char *needle)
{
	struct conf *c;
	_cleanup_free_ char *err = NULL;

	ck_assert_int_eq(load(text, &c, &err), -EINVAL);
	ck_assert_ptr_null(c);
	ck_assert_ptr_nonnull(err);
	ck_assert_msg(strstr(err, needle), "error '%s' does not say '%s'", err, needle);
}

static bool warned(const struct conf *c, const char *needle)
{
	for (char **w = c->warnings; w && *w; w++)
		if (strstr(*w, needle))
			return true;
	return false;
}

static char *print_str(const struct conf *c)
{
	char *s = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&s, &n);

	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(conf_print(c, f), 0);
	fclose(f);
	return s;
}

#define API "[api]\nurl = http://127.0.0.1:8080\n"
#define CONDUCTOR API "protocol = conductor\n"
#define WF "[workflow.build]\ncommand = /bin/true\n"

START_TEST(test_defaults_native)
{
	_cleanup_conf_ struct conf *c = load_ok(API WF);
	const struct conf_workflow *w = conf_find_workflow(c, "build");

	ck_assert_str_eq(c->api.protocol, "native");
	ck_assert_ptr_null(c->api.key_id);
	ck_assert_ptr_null(c->api.key_secret_file);
	ck_assert_ptr_null(c->api.key_secret);
	ck_assert_ptr_null(c->api.domain);
	/* native polls no task type: nothing to default */
	ck_assert_ptr_null(w->task_type);
	ck_assert_uint_eq(w->n_terminal_exit_codes, 0);
	ck_assert_ptr_null(c->warnings[0]);
}
END_TEST

START_TEST(test_conductor_keys)
{
	_cleanup_free_ char *secret = put("secret", "  s3cr3t-value\n", 0600);
	_cleanup_conf_ struct conf *c =
	    load_ok(CONDUCTOR "key_id = key-1\nkey_secret_file = %1$s/secret\ndomain = prod\n" WF
	                      "terminal_exit_codes = 4 3, 4\n"
	                      "[workflow.deploy]\ncommand = /bin/true\ntask_type = deploy_v2\n");
	const struct conf_workflow *b = conf_find_workflow(c, "build");
	const struct conf_workflow *d = conf_find_workflow(c, "deploy");

	ck_assert_str_eq(c->api.protocol, "conductor");
	ck_assert_str_eq(c->api.key_id, "key-1");
	ck_assert_str_eq(c->api.key_secret_file, secret);
	ck_assert_str_eq(c->api.key_secret, "s3cr3t-value");
	ck_assert_str_eq(c->api.domain, "prod");
	ck_assert_str_eq(b->task_type, "build"); /* the workflow's name by default */
	ck_assert_str_eq(d->task_type, "deploy_v2");
	ck_assert_uint_eq(b->n_terminal_exit_codes, 2); /* sorted, unique */
	ck_assert_int_eq(b->terminal_exit_codes[0], 3);
	ck_assert_int_eq(b->terminal_exit_codes[1], 4);
	ck_assert_uint_eq(d->n_terminal_exit_codes, 0);
	ck_assert_ptr_null(c->warnings[0]);
}
END_TEST

START_TEST(test_protocol_refused)
{
	load_fails(API "protocol = grpc\n" WF,
	           "api.protocol: 'grpc' is not a protocol: native, conductor or camunda7");
	load_fails(API "protocol = \n" WF, "api.protocol: must not be empty");
}
END_TEST

START_TEST(test_terminal_exit_codes_refused)
{
	load_fails(API WF "terminal_exit_codes = 0\n", "workflow.build.terminal_exit_codes: 0");
	load_fails(API WF "terminal_exit_codes = 3 75\n", "75");
	load_fails(API WF "terminal_exit_codes = 256\n", "1..255");
	load_fails(API WF "terminal_exit_codes = three\n", "'three' is not an exit code");
	load_fails(API WF "terminal_exit_codes = -1\n", "'-1' is not an exit code");
	{
		/* an empty value clears what a drop-in or earlier line set */
		_cleanup_conf_ struct conf *c = load_ok(API WF "terminal_exit_codes =\n");

		ck_assert_uint_eq(conf_find_workflow(c, "build")->n_terminal_exit_codes, 0);
	}
}
END_TEST

START_TEST(test_key_pairs_and_protocol)
{
	_cleanup_free_ char *secret = put("secret", "abc\n", 0600);

	load_fails(CONDUCTOR "key_id = k\n" WF, "api.key_id is set but api.key_secret_file is not");
	load_fails(CONDUCTOR "key_secret_file = %1$s/secret\n" WF,
	           "api.key_secret_file is set but api.key_id is not");
	load_fails(API "key_id = k\nkey_secret_file = %1$s/secret\n" WF,
	           "api.key_id: only with api.protocol = conductor");
	load_fails(API "domain = prod\n" WF, "api.domain: only with api.protocol = conductor");
	load_fails(CONDUCTOR "key_id = has space\nkey_secret_file = %1$s/secret\n" WF,
	           "api.key_id: 'has space' is not");
	load_fails(CONDUCTOR "domain = a/b\n" WF, "api.domain: 'a/b' is not");
	load_fails(CONDUCTOR WF "task_type = x?y\n", "workflow.build.task_type: 'x?y' is not");
}
END_TEST

START_TEST(test_key_secret_file_refused)
{
	_cleanup_free_ char *open_secret = put("open", "abc\n", 0644);
	_cleanup_free_ char *empty = put("empty", " \n", 0600);
	_cleanup_free_ char *spaced = put("spaced", "a b\n", 0600);

	load_fails(CONDUCTOR "key_id = k\nkey_secret_file = %1$s/missing\n" WF,
	           "api.key_secret_file: ");
	load_fails(CONDUCTOR "key_id = k\nkey_secret_file = %1$s/open\n" WF,
	           "is accessible by others (mode 0644)");
	load_fails(CONDUCTOR "key_id = k\nkey_secret_file = %1$s/empty\n" WF, "is empty");
	load_fails(CONDUCTOR "key_id = k\nkey_secret_file = %1$s/spaced\n" WF,
	           "holds whitespace, control or non-ASCII bytes");
}
END_TEST

START_TEST(test_task_types)
{
	load_fails(CONDUCTOR WF "[workflow.other]\ncommand = /bin/true\ntask_type = build\n",
	           "task_type 'build' is also the task type of workflow.build");
	{
		/* with native it means nothing: said once, not an error */
		_cleanup_conf_ struct conf *c = load_ok(API WF "task_type = t1\n");

		ck_assert(
		    warned(c, "workflow.build.task_type is ignored with api.protocol = native"));
	}
}
END_TEST

START_TEST(test_print_redacts_and_loads_again)
{
	_cleanup_free_ char *secret = put("secret", "s3cr3t-value\n", 0600);
	_cleanup_conf_ struct conf *c =
	    load_ok(CONDUCTOR "key_id = key-1\nkey_secret_file = %1$s/secret\ndomain = prod\n" WF
	                      "terminal_exit_codes = 4 3\n");
	_cleanup_free_ char *out = print_str(c), *err = NULL, *path = NULL;
	_cleanup_conf_ struct conf *again = NULL;
	struct conf_change *ch = NULL;
	size_t n = 0;
	struct conf_source src = {0};

	ck_assert(strstr(out, "protocol = conductor\n"));
	ck_assert(strstr(out, "key_id = key-1\n"));
	ck_assert(strstr(out, "domain = prod\n"));
	ck_assert(strstr(out, "# key secret: set, 12 bytes, read from "));
	ck_assert(strstr(out, "task_type = build\n"));
	ck_assert(strstr(out, "terminal_exit_codes = 3 4\n"));
	ck_assert_ptr_null(strstr(out, "s3cr3t"));

	path = put("printed.conf", out, 0644);
	src.path = path;
	ck_assert_msg(conf_load(&src, &again, &err) == 0, "%s", err ? err : "?");
	ck_assert_int_eq(conf_diff(c, again, &ch, &n), 0);
	for (size_t i = 0; i < n; i++)
		fprintf(stderr, "unexpected change: %s\n", ch[i].description);
	ck_assert_uint_eq(n, 0);
}
END_TEST

START_TEST(test_diff_and_retain)
{
	_cleanup_free_ char *s1 = put("s1", "one\n", 0600), *s2 = put("s2", "two\n", 0600);
	_cleanup_conf_ struct conf *a =
	    load_ok(CONDUCTOR "key_id = k\nkey_secret_file = %1$s/s1\n" WF);
	_cleanup_conf_ struct conf *b =
	    load_ok(CONDUCTOR "key_id = k\nkey_secret_file = %1$s/s1\n" WF "task_type = t2\n");
	struct conf_change *ch = NULL;
	size_t n = 0;
	bool secret = false, task_type = false;

	/* the same file, new contents: a change that needs a restart, never shown */
	ck_assert_int_eq(write_file_atomic(s1, "ONE\n", 4, 0600), 0);
	conf_free(b);
	b = load_ok(CONDUCTOR "key_id = k\nkey_secret_file = %1$s/s1\n" WF "task_type = t2\n");
	ck_assert_int_eq(conf_diff(a, b, &ch, &n), 0);
	for (size_t i = 0; i < n; i++) {
		ck_assert_ptr_null(strstr(ch[i].description, "ONE"));
		ck_assert_ptr_null(strstr(ch[i].description, "one"));
		if (streq(ch[i].description, "api.key_secret: changed"))
			secret = !ch[i].live;
		if (strstr(ch[i].description, "workflow.build.task_type: build -> t2"))
			task_type = !ch[i].live;
	}
	conf_changes_free(ch, n);
	ck_assert(secret);
	ck_assert(task_type);

	/* the running secret stays until a restart */
	ck_assert_int_eq(conf_retain_restart_fields(b, a), 0);
	ck_assert_str_eq(b->api.key_secret, "one");
}
END_TEST

START_TEST(test_lease_refresh_warning)
{
	struct conf *c;
	_cleanup_free_ char *err = NULL;

	/* 5 s (load()'s): clearly below any responseTimeoutSeconds we expect */
	c = load_ok(CONDUCTOR WF);
	ck_assert_ptr_null(c->warnings[0]);
	conf_free(c);
	c = load_ok(CONDUCTOR "[worker]\nlease_refresh = 30s\n" WF);
	ck_assert(warned(c, "worker.lease_refresh (30s) must be below every task type's "
	                    "responseTimeoutSeconds"));
	conf_free(c);
	/* native: the lease is ours, no such rule */
	c = load_ok(API "[worker]\nlease_refresh = 30s\n" WF);
	ck_assert(!warned(c, "responseTimeoutSeconds"));
	conf_free(c);
}
END_TEST

START_TEST(test_environment)
{
	_cleanup_free_ char *path = put("lessee.conf",
	                                "[worker]\nspool_dir = /tmp/s\nrun_dir = /tmp/r\n"
	                                "lease_refresh = 5s\n" API WF,
	                                0644);
	char *env[] = {(char *)"LESSEE_API_PROTOCOL=conductor", (char *)"LESSEE_API_DOMAIN=d1",
	               NULL};
	struct conf_source src = {.path = path, .env = env};
	_cleanup_conf_ struct conf *c = NULL;
	_cleanup_free_ char *err = NULL;

	ck_assert_msg(conf_load(&src, &c, &err) == 0, "%s", err ? err : "?");
	ck_assert_str_eq(c->api.protocol, "conductor");
	ck_assert_str_eq(c->api.domain, "d1");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("conf_conductor");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_defaults_native);
	tcase_add_test(tc, test_conductor_keys);
	tcase_add_test(tc, test_protocol_refused);
	tcase_add_test(tc, test_terminal_exit_codes_refused);
	tcase_add_test(tc, test_key_pairs_and_protocol);
	tcase_add_test(tc, test_key_secret_file_refused);
	tcase_add_test(tc, test_task_types);
	tcase_add_test(tc, test_print_redacts_and_loads_again);
	tcase_add_test(tc, test_diff_and_retain);
	tcase_add_test(tc, test_lease_refresh_warning);
	tcase_add_test(tc, test_environment);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
