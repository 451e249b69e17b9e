/* lib/conf, the transport keys (issue 11): a plain http:// api.url to a host
 * that is not loopback is refused unless api.allow_insecure_http says so, and
 * the client certificate keys of mutual TLS (api.client_cert, api.client_key)
 * are validated at load, so --check-config finds their problems.  No test here
 * opens a connection: every address is only parsed. */
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

#define WF "[workflow.w]\ncommand = /bin/true\n"

static char *tmp;

static void setup(void)
{
	tmp = tu_tmpdir("conf-tls");
	ck_assert_ptr_nonnull(tmp);
}

static void teardown(void)
{
	rm_rf(tmp);
	free(tmp);
}

static char *put_mode(const char *name, const char *text, mode_t mode)
{
	char *p;
	int fd;

	ck_assert_int_ge(asprintf(&p, "%s/%s", tmp, name), 0);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write_all(fd, text, strlen(text)), 0);
	ck_assert_int_eq(fchmod(fd, mode), 0);
	close(fd);
	return p;
}

static int load(const char *text, char **env, struct conf **c, char **err, char **path)
{
	struct conf_source src = {.env = env};

	*path = put_mode("lessee.conf", text, 0644);
	src.path = *path;
	*c = NULL;
	*err = NULL;
	return conf_load(&src, c, err);
}

static struct conf *load_ok(const char *text)
{
	_cleanup_free_ char *err = NULL, *path = NULL;
	struct conf *c;
	int r = load(text, NULL, &c, &err, &path);

	ck_assert_msg(r == 0, "%s: load failed (%d): %s", text, r, err ? err : "(no message)");
	return c;
}

/* The error, which must start with the path of the file. */
static char *load_err(const char *text, char **env)
{
	_cleanup_free_ char *path = NULL;
	struct conf *c;
	char *err;
	int r = load(text, env, &c, &err, &path);

	ck_assert_msg(r == -EINVAL, "%s: loaded (r=%d), an error was wanted", text, r);
	ck_assert_ptr_null(c);
	ck_assert_ptr_nonnull(err);
	return err;
}

static char *conf_with_url(const char *url, const char *extra)
{
	char *t;

	ck_assert_int_ge(asprintf(&t, "[api]\nurl = %s\n%s" WF, url, extra ? extra : ""), 0);
	return t;
}

/* ---- plain http to a remote host ---- */

START_TEST(test_plain_http_remote_refused)
{
	static const char *const remote[] = {
	    "http://192.0.2.1:8080",     "http://10.0.0.1",
	    "http://ci.example",         "http://ci.example:80/api",
	    "http://127.evil.example",   "http://127.0.0.1.evil.example",
	    "http://localhost.example",  "http://localhostx",
	    "http://[2001:db8::1]:8080", "http://[::ffff:192.0.2.1]:80",
	    "http://0.0.0.0:8080",       "http://128.0.0.1",
	};

	for (size_t i = 0; i < ELEMENTSOF(remote); i++) {
		_cleanup_free_ char *text = conf_with_url(remote[i], NULL);
		_cleanup_free_ char *err = load_err(text, NULL);

		ck_assert_msg(strstr(err, ":2: api.url: ") && strstr(err, "plain http://") &&
		                  strstr(err, "not loopback") &&
		                  strstr(err, "api.allow_insecure_http = yes"),
		              "%s: %s", remote[i], err);
	}
}
END_TEST

START_TEST(test_plain_http_message)
{
	_cleanup_free_ char *text = conf_with_url("http://192.0.2.1:8080", NULL);
	_cleanup_free_ char *err = load_err(text, NULL), *want = NULL;
	char *env[] = {"LESSEE_API_URL=http://ci.example/x", NULL};
	_cleanup_free_ char *err_env = load_err(text, env);

	ck_assert_int_ge(
	    asprintf(&want,
	             "%s/lessee.conf:2: api.url: plain http:// to 192.0.2.1, which is "
	             "not loopback: the API token, run inputs and logs would cross the "
	             "network unencrypted; use https://, or set "
	             "api.allow_insecure_http = yes to accept that",
	             tmp),
	    0);
	ck_assert_str_eq(err, want);
	/* the origin is wherever the URL came from */
	ck_assert_msg(startswith(err_env, "LESSEE_API_URL: api.url: plain http:// to ci.example,"),
	              "%s", err_env);
}
END_TEST

START_TEST(test_plain_http_loopback_and_https_accepted)
{
	static const char *const ok[] = {
	    "http://127.0.0.1:1",  "http://127.1.2.3",
	    "http://localhost",    "http://LocalHost:80/api",
	    "http://localhost./x", "http://[::1]:8080",
	    "http://[::1]",        "http://[::ffff:127.0.0.1]:80",
	    "https://ci.example",  "https://192.0.2.1:8443",
	};

	for (size_t i = 0; i < ELEMENTSOF(ok); i++) {
		_cleanup_free_ char *text = conf_with_url(ok[i], NULL);
		_cleanup_conf_ struct conf *c = load_ok(text);

		ck_assert_ptr_null(c->warnings[0]);
		ck_assert(!c->api.allow_insecure_http);
	}
}
END_TEST

START_TEST(test_allow_insecure_http)
{
	_cleanup_free_ char *tok = put_mode("tok", "t0ken\n", 0600), *extra = NULL, *text = NULL;
	_cleanup_free_ char *no =
	    conf_with_url("http://192.0.2.1:8080", "allow_insecure_http = no\n");
	_cleanup_free_ char *bad = conf_with_url("https://x", "allow_insecure_http = maybe\n");
	_cleanup_free_ char *err_no = load_err(no, NULL), *err_bad = load_err(bad, NULL);
	_cleanup_conf_ struct conf *c = NULL, *e = NULL;
	char *env[] = {"LESSEE_API_ALLOW_INSECURE_HTTP=true", NULL};
	_cleanup_free_ char *path = NULL, *err = NULL;

	ck_assert_int_ge(asprintf(&extra, "token_file = %s\nallow_insecure_http = yes\n", tok), 0);
	text = conf_with_url("http://192.0.2.1:8080", extra);
	c = load_ok(text);
	ck_assert(c->api.allow_insecure_http);
	/* allowed, still said loudly */
	ck_assert_ptr_nonnull(c->warnings[0]);
	ck_assert_ptr_nonnull(strstr(c->warnings[0], "unencrypted"));
	ck_assert_ptr_nonnull(strstr(err_no, "api.allow_insecure_http = yes"));
	ck_assert_msg(strstr(err_bad, ":3: api.allow_insecure_http: 'maybe' is not a boolean"),
	              "%s", err_bad);
	free(text);
	text = conf_with_url("http://192.0.2.1:8080", NULL);
	ck_assert_int_eq(load(text, env, &e, &err, &path), 0);
	ck_assert(e->api.allow_insecure_http);
}
END_TEST

/* --check-config shows the key, and what it prints loads back the same. */
START_TEST(test_allow_insecure_http_printed)
{
	_cleanup_free_ char *text = conf_with_url("http://192.0.2.1", "allow_insecure_http = on\n");
	_cleanup_conf_ struct conf *c = load_ok(text), *again = NULL;
	_cleanup_free_ char *out = NULL;
	struct conf_change *ch = NULL;
	size_t n = 0, len = 0;
	FILE *f = open_memstream(&out, &len);

	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(conf_print(c, f), 0);
	fclose(f);
	ck_assert_msg(strstr(out, "\nallow_insecure_http = yes\n"), "%s", out);
	again = load_ok(out);
	ck_assert_int_eq(conf_diff(c, again, &ch, &n), 0);
	ck_assert_uint_eq(n, 0);
}
END_TEST

/* ---- client certificates ---- */

START_TEST(test_client_cert_keys)
{
	_cleanup_free_ char *cert = put_mode("client.pem", "cert\n", 0644);
	_cleanup_free_ char *key = put_mode("client.key", "key\n", 0600);
	_cleanup_free_ char *both = NULL, *text = NULL;
	_cleanup_conf_ struct conf *c = NULL;

	ck_assert_int_ge(asprintf(&both, "client_cert = %s\nclient_key = %s\n", cert, key), 0);
	text = conf_with_url("https://ci.example", both);
	c = load_ok(text);
	ck_assert_str_eq(c->api.client_cert, cert);
	ck_assert_str_eq(c->api.client_key, key);
	free(text);
	/* unset by default */
	text = conf_with_url("https://ci.example", NULL);
	conf_free(c);
	c = load_ok(text);
	ck_assert_ptr_null(c->api.client_cert);
	ck_assert_ptr_null(c->api.client_key);
}
END_TEST

static void expect_cert_error(const char *url, const char *extra, const char *want)
{
	_cleanup_free_ char *text = conf_with_url(url, extra);
	_cleanup_free_ char *err = load_err(text, NULL);

	ck_assert_msg(strstr(err, want), "wanted '%s' in: %s", want, err);
}

START_TEST(test_client_cert_errors)
{
	_cleanup_free_ char *cert = put_mode("client.pem", "cert\n", 0644);
	_cleanup_free_ char *key = put_mode("client.key", "key\n", 0600);
	_cleanup_free_ char *open_key = put_mode("open.key", "key\n", 0604);
	_cleanup_free_ char *a = NULL, *b = NULL, *d = NULL, *e = NULL, *g = NULL;

	ck_assert_int_ge(asprintf(&a, "client_cert = %s\n", cert), 0);
	expect_cert_error("https://x", a, ":3: api.client_cert is set but api.client_key is not");
	ck_assert_int_ge(asprintf(&b, "client_key = %s\n", key), 0);
	expect_cert_error("https://x", b, ":3: api.client_key is set but api.client_cert is not");
	ck_assert_int_ge(asprintf(&d, "client_cert = %s\nclient_key = %s\n", cert, open_key), 0);
	expect_cert_error("https://x", d, ":4: api.client_key: ");
	expect_cert_error("https://x", d, "is accessible by others (mode 0604): chmod o-rwx it");
	ck_assert_int_ge(asprintf(&e, "client_cert = %s/none.pem\nclient_key = %s\n", tmp, key), 0);
	expect_cert_error("https://x", e, ":3: api.client_cert: ");
	expect_cert_error("https://x", e, "none.pem: No such file or directory");
	ck_assert_int_ge(asprintf(&g, "client_cert = %s\nclient_key = %s\n", cert, key), 0);
	expect_cert_error("http://127.0.0.1:1", g,
	                  ":3: api.client_cert: client certificates need an https:// api.url");
	expect_cert_error("https://x", "client_cert = rel.pem\n",
	                  ":3: api.client_cert: 'rel.pem' is not an absolute path");
	/* ca_file too is read at load, so --check-config finds a wrong path */
	expect_cert_error("https://x", "ca_file = /nonexistent/ca.pem\n",
	                  ":3: api.ca_file: /nonexistent/ca.pem: No such file or directory");
}
END_TEST

int main(void)
{
	Suite *s = suite_create("conf_tls");
	TCase *tc = tcase_create("conf_tls");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_plain_http_remote_refused);
	tcase_add_test(tc, test_plain_http_message);
	tcase_add_test(tc, test_plain_http_loopback_and_https_accepted);
	tcase_add_test(tc, test_allow_insecure_http);
	tcase_add_test(tc, test_allow_insecure_http_printed);
	tcase_add_test(tc, test_client_cert_keys);
	tcase_add_test(tc, test_client_cert_errors);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
