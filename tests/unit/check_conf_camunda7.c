/* lib/conf for the Camunda 7 driver (issue 13): api.protocol = camunda7, HTTP
 * basic (user, password_file) or a bearer token, never both; [workflow.X]
 * topic, variables, retries, retry_backoff(_max), local_variables; the keys of
 * other drivers refused or warned about; the password never printed. */
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
	dir = tu_tmpdir("conf-camunda7");
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

#define API "[api]\nurl = http://127.0.0.1:8080/engine-rest\n"
#define C7 API "protocol = camunda7\n"
#define WF "[workflow.build]\ncommand = /bin/true\n"

START_TEST(test_defaults)
{
	_cleanup_conf_ struct conf *c = load_ok(C7 WF);
	const struct conf_workflow *w = conf_find_workflow(c, "build");

	ck_assert_str_eq(c->api.protocol, "camunda7");
	ck_assert_str_eq(c->api.url, "http://127.0.0.1:8080/engine-rest");
	ck_assert_ptr_null(c->api.user);
	ck_assert_ptr_null(c->api.password);
	ck_assert_ptr_null(c->api.token);
	ck_assert_str_eq(w->topic, "build"); /* the workflow's name by default */
	ck_assert_ptr_nonnull(w->variables);
	ck_assert_ptr_null(w->variables[0]); /* every variable */
	ck_assert_uint_eq(w->retries, 3);
	ck_assert_uint_eq(w->retry_backoff, 10 * USEC_PER_SEC);
	ck_assert_uint_eq(w->retry_backoff_max, 10 * USEC_PER_MINUTE);
	ck_assert(!w->local_variables);
	ck_assert_ptr_null(c->warnings[0]);
}
END_TEST

START_TEST(test_workflow_keys)
{
	_cleanup_conf_ struct conf *c =
	    load_ok(C7 WF "topic = charge-card\nvariables = amount, customer.id amount\n"
	                  "retries = 5\nretry_backoff = 2s\nretry_backoff_max = 1min\n"
	                  "local_variables = yes\n"
	                  "[workflow.deploy]\ncommand = /bin/true\nretries = 0\n");
	const struct conf_workflow *b = conf_find_workflow(c, "build");
	const struct conf_workflow *d = conf_find_workflow(c, "deploy");

	ck_assert_str_eq(b->topic, "charge-card");
	ck_assert_str_eq(b->variables[0], "amount"); /* sorted, unique */
	ck_assert_str_eq(b->variables[1], "customer.id");
	ck_assert_ptr_null(b->variables[2]);
	ck_assert_uint_eq(b->retries, 5);
	ck_assert_uint_eq(b->retry_backoff, 2 * USEC_PER_SEC);
	ck_assert_uint_eq(b->retry_backoff_max, 60 * USEC_PER_SEC);
	ck_assert(b->local_variables);
	ck_assert_str_eq(d->topic, "deploy");
	ck_assert_uint_eq(d->retries, 0); /* every failure an incident */
	ck_assert_ptr_null(c->warnings[0]);
}
END_TEST

START_TEST(test_workflow_keys_refused)
{
	load_fails(C7 WF "topic = a b\n", "workflow.build.topic: 'a b' is not");
	load_fails(C7 WF "variables = ok bad/name\n",
	           "workflow.build.variables: 'bad/name' is not");
	load_fails(C7 WF "retries = -1\n", "workflow.build.retries");
	load_fails(C7 WF "retries = 1001\n", "workflow.build.retries");
	load_fails(C7 WF "retry_backoff = 2min\nretry_backoff_max = 1min\n",
	           "workflow.build.retry_backoff_max (1min) is below workflow.build.retry_backoff "
	           "(2min)");
	load_fails(C7 WF "[workflow.other]\ncommand = /bin/true\ntopic = build\n",
	           "topic 'build' is also the topic of workflow.build");
}
END_TEST

START_TEST(test_basic_auth)
{
	_cleanup_free_ char *pw = put("pw", "  s3cr3t-pass\n", 0600);
	_cleanup_conf_ struct conf *c =
	    load_ok(C7 "user = demo@example.org\npassword_file = %1$s/pw\n" WF);

	ck_assert_str_eq(c->api.user, "demo@example.org");
	ck_assert_str_eq(c->api.password_file, pw);
	ck_assert_str_eq(c->api.password, "s3cr3t-pass");
	ck_assert_ptr_null(c->api.token);
}
END_TEST

START_TEST(test_bearer_auth)
{
	_cleanup_free_ char *tok = put("tok", "tok-123\n", 0600);
	_cleanup_conf_ struct conf *c = load_ok(C7 "token_file = %1$s/tok\n" WF);

	ck_assert_str_eq(c->api.token, "tok-123");
	ck_assert_ptr_null(c->api.user);
}
END_TEST

START_TEST(test_auth_refused)
{
	_cleanup_free_ char *pw = put("pw", "abc\n", 0600), *tok = put("tok", "t\n", 0600);
	_cleanup_free_ char *open_pw = put("open", "abc\n", 0644);
	_cleanup_free_ char *spaced = put("spaced", "a b\n", 0600);

	load_fails(C7 "user = u\ntoken_file = %1$s/tok\npassword_file = %1$s/pw\n" WF,
	           "api.user and api.token_file: HTTP basic or a bearer token, not both");
	load_fails(C7 "user = u\n" WF, "api.user is set but api.password_file is not");
	load_fails(C7 "password_file = %1$s/pw\n" WF,
	           "api.password_file is set but api.user is not");
	load_fails(C7 "user = a:b\npassword_file = %1$s/pw\n" WF, "api.user: 'a:b' is not");
	load_fails(C7 "user = u\npassword_file = %1$s/missing\n" WF, "api.password_file: ");
	load_fails(C7 "user = u\npassword_file = %1$s/open\n" WF,
	           "is accessible by others (mode 0644)");
	load_fails(C7 "user = u\npassword_file = %1$s/spaced\n" WF,
	           "holds whitespace, control or non-ASCII bytes");
	/* the other drivers' keys */
	load_fails(API "user = u\npassword_file = %1$s/pw\n" WF,
	           "api.user: only with api.protocol = camunda7");
	load_fails(C7 "key_id = k\nkey_secret_file = %1$s/pw\n" WF,
	           "api.key_id: only with api.protocol = conductor");
	load_fails(C7 "domain = prod\n" WF, "api.domain: only with api.protocol = conductor");
	load_fails(API "protocol = conductor\nuser = u\npassword_file = %1$s/pw\n" WF,
	           "api.user: only with api.protocol = camunda7");
}
END_TEST

START_TEST(test_foreign_workflow_keys_warned)
{
	struct conf *c;

	c = load_ok(C7 WF "task_type = t1\nterminal_exit_codes = 3\n");
	ck_assert(warned(c, "workflow.build.task_type is ignored with api.protocol = camunda7"));
	ck_assert(warned(c, "workflow.build.terminal_exit_codes is ignored with api.protocol = "
	                    "camunda7"));
	conf_free(c);
	c = load_ok(API WF "topic = t\nretries = 1\n");
	ck_assert(warned(c, "workflow.build.topic is ignored with api.protocol = native"));
	ck_assert(warned(c, "workflow.build.retries is ignored with api.protocol = native"));
	conf_free(c);
	c = load_ok(API "protocol = conductor\n" WF "variables = a\nlocal_variables = yes\n");
	ck_assert(warned(c, "workflow.build.variables is ignored with api.protocol = conductor"));
	ck_assert(
	    warned(c, "workflow.build.local_variables is ignored with api.protocol = conductor"));
	conf_free(c);
}
END_TEST

START_TEST(test_print_redacts_and_loads_again)
{
	_cleanup_free_ char *pw = put("pw", "s3cr3t-pass\n", 0600);
	_cleanup_conf_ struct conf *c =
	    load_ok(C7 "user = demo\npassword_file = %1$s/pw\n" WF
	               "variables = b a\nretries = 2\nretry_backoff = 3s\n");
	_cleanup_free_ char *out = print_str(c), *err = NULL, *path = NULL;
	_cleanup_conf_ struct conf *again = NULL;
	struct conf_change *ch = NULL;
	size_t n = 0;
	struct conf_source src = {0};

	ck_assert(strstr(out, "protocol = camunda7\n"));
	ck_assert(strstr(out, "user = demo\n"));
	ck_assert(strstr(out, "# password: set, 11 bytes, read from "));
	ck_assert(strstr(out, "topic = build\n"));
	ck_assert(strstr(out, "variables = a b\n"));
	ck_assert(strstr(out, "retries = 2\n"));
	ck_assert(strstr(out, "retry_backoff = 3s\n"));
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
	_cleanup_free_ char *p1 = put("p1", "one\n", 0600);
	_cleanup_conf_ struct conf *a = load_ok(C7 "user = u\npassword_file = %1$s/p1\n" WF);
	_cleanup_conf_ struct conf *b = NULL;
	struct conf_change *ch = NULL;
	size_t n = 0;
	bool password = false, topic = false, retries = false;

	ck_assert_int_eq(write_file_atomic(p1, "ONE\n", 4, 0600), 0);
	b = load_ok(C7 "user = u\npassword_file = %1$s/p1\n" WF "topic = t2\nretries = 7\n");
	ck_assert_int_eq(conf_diff(a, b, &ch, &n), 0);
	for (size_t i = 0; i < n; i++) {
		ck_assert_ptr_null(strstr(ch[i].description, "ONE"));
		ck_assert_ptr_null(strstr(ch[i].description, "one"));
		if (streq(ch[i].description, "api.password: changed"))
			password = !ch[i].live;
		if (strstr(ch[i].description, "workflow.build.topic: build -> t2"))
			topic = !ch[i].live;
		if (strstr(ch[i].description, "workflow.build.retries: 3 -> 7"))
			retries = ch[i].live;
	}
	conf_changes_free(ch, n);
	ck_assert(password);
	ck_assert(topic);
	ck_assert(retries);
	/* the running password stays until a restart */
	ck_assert_int_eq(conf_retain_restart_fields(b, a), 0);
	ck_assert_str_eq(b->api.password, "one");
}
END_TEST

START_TEST(test_environment)
{
	_cleanup_free_ char *path =
	    put("lessee.conf", "[worker]\nspool_dir = /tmp/s\nrun_dir = /tmp/r\n" API WF, 0644);
	char *env[] = {(char *)"LESSEE_API_PROTOCOL=camunda7", NULL};
	struct conf_source src = {.path = path, .env = env};
	_cleanup_conf_ struct conf *c = NULL;
	_cleanup_free_ char *err = NULL;

	ck_assert_msg(conf_load(&src, &c, &err) == 0, "%s", err ? err : "?");
	ck_assert_str_eq(c->api.protocol, "camunda7");
	ck_assert_str_eq(conf_find_workflow(c, "build")->topic, "build");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("conf_camunda7");
	TCase *tc = tcase_create("core");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_defaults);
	tcase_add_test(tc, test_workflow_keys);
	tcase_add_test(tc, test_workflow_keys_refused);
	tcase_add_test(tc, test_basic_auth);
	tcase_add_test(tc, test_bearer_auth);
	tcase_add_test(tc, test_auth_refused);
	tcase_add_test(tc, test_foreign_workflow_keys_warned);
	tcase_add_test(tc, test_print_redacts_and_loads_again);
	tcase_add_test(tc, test_diff_and_retain);
	tcase_add_test(tc, test_environment);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
