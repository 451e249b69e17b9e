/* TLS for real (issue 11): a CA and certificates made here with openssl(1),
 * nginx-light terminating TLS on 127.0.0.1 in front of a real lessor, a real
 * lessee daemon talking https to nginx.
 *
 *  - With api.ca_file naming the test CA, a run completes through nginx.
 *  - Verification is on by default: a certificate from a CA lessee does not
 *    trust (the system store only, or a ca_file of another CA), one for another
 *    host name, and an expired one are each refused, with a log line naming
 *    the cause, and the queued run stays queued.
 *  - Mutual TLS: nginx requires a client certificate of a client CA; a lessee
 *    without api.client_cert is refused, one with it completes a run.
 *  - A plain http:// api.url to a host that is not loopback is refused by
 *    --check-config, naming api.allow_insecure_http; with that key set it is
 *    accepted with a warning.  (Only --check-config: nothing here ever sends a
 *    packet to a non-loopback address.) */
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lessee_proc.h"
#include "lessor_proc.h"
#include "test_httpd.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"

#define SEC USEC_PER_SEC

static char *certs; /* the CA, server and client certificates (once per test case) */
static char *ngxdir;
static struct tu_lessor *L;
static struct tu_lessee *D;
static struct test_nginx *N;

/* ---- certificates ---- */

/* CAs: ca (trusted through api.ca_file), other (trusted by nobody), clientca
 * (nginx's for client certificates).  Server certificates, all for
 * IP:127.0.0.1 and DNS:localhost unless said: good (ca), wrongname (ca, only
 * DNS:wrong-name.invalid), expired (ca, valid 2020-01-01 .. 2020-01-02),
 * unknown (other).  client: a clientAuth certificate of clientca.
 * OpenSSL 3.0's `x509 -req` cannot set dates in the past; `ca` can. */
static const char gen_certs[] =
    "set -e\n"
    "cd \"$1\"\n"
    "cat > ca.cnf <<'EOF'\n"
    "[ca]\ndefault_ca = ca_default\n"
    "[ca_default]\ndatabase = index.txt\nnew_certs_dir = .\nserial = serial\n"
    "default_md = sha256\npolicy = policy_any\nunique_subject = no\nemail_in_dn = no\n"
    "[policy_any]\ncommonName = supplied\n"
    "[req]\ndistinguished_name = dn\nprompt = no\n"
    "[dn]\nCN = lessee test\n"
    "[v3_ca]\nbasicConstraints = critical,CA:TRUE\nkeyUsage = critical,keyCertSign,cRLSign\n"
    "subjectKeyIdentifier = hash\n"
    "[srv]\nbasicConstraints = critical,CA:FALSE\nkeyUsage = critical,digitalSignature\n"
    "extendedKeyUsage = serverAuth\nsubjectAltName = IP:127.0.0.1,DNS:localhost\n"
    "[wrongname]\nbasicConstraints = critical,CA:FALSE\nkeyUsage = critical,digitalSignature\n"
    "extendedKeyUsage = serverAuth\nsubjectAltName = DNS:wrong-name.invalid\n"
    "[client]\nbasicConstraints = critical,CA:FALSE\nkeyUsage = critical,digitalSignature\n"
    "extendedKeyUsage = clientAuth\n"
    "EOF\n"
    ": > index.txt\n"
    "echo 1000 > serial\n"
    "ec='-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes'\n"
    "for ca in ca other clientca; do\n"
    "  openssl req -x509 -config ca.cnf -extensions v3_ca $ec -keyout $ca.key -out $ca.pem \\\n"
    "    -days 2 -subj \"/CN=lessee test CA $ca\"\n"
    "done\n"
    "sign() {\n"
    "  n=$1 ca=$2 ext=$3 subj=$4; shift 4\n"
    "  openssl req -new -config ca.cnf $ec -keyout $n.key -out $n.csr -subj \"$subj\"\n"
    "  openssl ca -batch -config ca.cnf -notext -cert $ca.pem -keyfile $ca.key \\\n"
    "    -extensions $ext -in $n.csr -out $n.pem \"$@\"\n"
    "}\n"
    "sign good ca srv /CN=127.0.0.1 -days 2\n"
    "sign wrongname ca wrongname /CN=wrong-name.invalid -days 2\n"
    "sign expired ca srv /CN=127.0.0.1 -startdate 20200101000000Z -enddate 20200102000000Z\n"
    "sign unknown other srv /CN=127.0.0.1 -days 2\n"
    "sign client clientca client /CN=test-worker -days 2\n"
    "chmod 600 *.key\n";

static void certs_make(void)
{
	char *argv[] = {"/bin/sh", "-c", (char *)(uintptr_t)gen_certs, "sh", NULL, NULL};

	certs = tu_tmpdir("tls-certs");
	ck_assert_ptr_nonnull(certs);
	argv[4] = certs;
	ck_assert_msg(test_run_quiet(certs, argv) == 0, "openssl failed: see %s/cmd.log", certs);
}

static void certs_remove(void)
{
	if (certs)
		rm_rf(certs);
	free(certs);
	certs = NULL;
}

static char *cert(const char *name)
{
	char *p;

	ck_assert_int_ge(asprintf(&p, "%s/%s", certs, name), 0);
	return p;
}

/* ---- nginx in front of lessor ---- */

static void setup(void)
{
	ck_assert_msg(test_nginx_binary(), "nginx-light is not installed (scripts/deps.sh test)");
	ck_assert_int_eq(
	    tu_lessor_start(
	        &(struct tu_lessor_opts){.token = "t0ken-for-tests", .sync_normal = true}, &L),
	    0);
	ngxdir = tu_tmpdir("tls-nginx");
	ck_assert_ptr_nonnull(ngxdir);
}

static void teardown(void)
{
	int st = D ? tu_lessee_quit(D) : 0;
	int ls = L ? tu_lessor_stop(L) : 0;

	D = tu_lessee_free(D);
	L = tu_lessor_free(L);
	N = test_nginx_stop(N);
	if (ngxdir)
		rm_rf(ngxdir);
	free(ngxdir);
	ngxdir = NULL;
	ck_assert_msg(st == 0, "lessee exited with %d", st);
	ck_assert_msg(ls == 0, "lessor exited with %d", ls);
}

/* nginx serving certificate `name` (name.pem, name.key), proxying to lessor;
 * client_ca: require a client certificate of that CA. */
static void nginx_start(const char *name, const char *client_ca)
{
	_cleanup_free_ char *block = NULL, *verify = NULL;
	const char *lurl = tu_lessor_url(L);

	if (client_ca)
		ck_assert_int_ge(asprintf(&verify,
		                          "  ssl_client_certificate %s/%s;\n"
		                          "  ssl_verify_client on;\n",
		                          certs, client_ca),
		                 0);
	ck_assert_int_ge(asprintf(&block,
	                          "server {\n"
	                          "  listen 127.0.0.1:@PORT@ ssl http2;\n"
	                          "  ssl_certificate %1$s/%2$s.pem;\n"
	                          "  ssl_certificate_key %1$s/%2$s.key;\n"
	                          "%3$s"
	                          "  client_max_body_size 0;\n"
	                          "  location / {\n"
	                          "    proxy_pass %4$s;\n"
	                          "    proxy_http_version 1.1;\n"
	                          "    proxy_buffering off;\n"
	                          "    proxy_request_buffering off;\n"
	                          "    proxy_read_timeout 120s;\n"
	                          "  }\n"
	                          "}\n",
	                          certs, name, verify ? verify : "", lurl),
	                 0);
	ck_assert_int_eq(test_nginx_start(ngxdir, block, &N), 0);
}

/* A lessee whose api.url is nginx (host: 127.0.0.1 or localhost), then `extra`. */
static void lessee_start(const char *host, const char *extra)
{
	_cleanup_free_ char *conf = NULL;

	ck_assert_int_ge(asprintf(&conf,
	                          "[api]\nurl = https://%s:%d\n%s\n"
	                          "[workflow.ok]\ncommand = /bin/echo through-tls\n",
	                          host, test_nginx_port(N), extra ? extra : ""),
	                 0);
	ck_assert_int_eq(tu_lessee_start(&(struct tu_lessee_opts){.lessor = L, .conf = conf}, &D),
	                 0);
}

static char *enqueue_ok(void)
{
	char *id = tu_lessor_enqueue(L, "{\"workflow\":\"ok\"}");

	ck_assert_ptr_nonnull(id);
	return id;
}

static void expect_succeeded(const char *id)
{
	_cleanup_free_ char *log = NULL;
	int r = tu_lessor_wait_status(L, id, "succeeded", tu_timeout(30 * SEC));

	if (r < 0)
		log = tu_lessee_log(D);
	ck_assert_msg(r == 0, "run %s did not succeed through nginx; lessee log:\n%s", id,
	              log ? log : "");
}

/* The daemon logs `needle` and the run was never claimed. */
static void expect_refused(const char *id, const char *needle)
{
	_cleanup_free_ char *log = NULL;
	cJSON *run;
	const cJSON *st;
	int r = tu_lessee_wait_log(D, needle, tu_timeout(20 * SEC));

	if (r < 0)
		log = tu_lessee_log(D);
	ck_assert_msg(r == 0, "lessee never logged '%s'; its log:\n%s", needle, log ? log : "");
	run = tu_lessor_get_run(L, id);
	ck_assert_ptr_nonnull(run);
	st = cJSON_GetObjectItemCaseSensitive(run, "status");
	ck_assert_msg(cJSON_IsString(st) && streq(st->valuestring, "pending"), "run %s is %s", id,
	              cJSON_IsString(st) ? st->valuestring : "?");
	cJSON_Delete(run);
}

/* ---- server verification ---- */

START_TEST(test_ca_file_run_completes)
{
	_cleanup_free_ char *ca = cert("ca.pem"), *extra = NULL, *id = NULL;

	nginx_start("good", NULL);
	ck_assert_int_ge(asprintf(&extra, "ca_file = %s\n", ca), 0);
	/* _i: 127.0.0.1 (IP SAN), then localhost (DNS SAN) */
	lessee_start(_i == 0 ? "127.0.0.1" : "localhost", extra);
	id = enqueue_ok();
	expect_succeeded(id);
}
END_TEST

/* No ca_file: the system store only, which does not hold the test CA. */
START_TEST(test_verifies_by_default)
{
	_cleanup_free_ char *id = NULL;

	nginx_start("good", NULL);
	lessee_start("127.0.0.1", NULL);
	id = enqueue_ok();
	expect_refused(id, "TLS: the server's certificate is not signed by a trusted CA");
}
END_TEST

START_TEST(test_wrong_ca)
{
	_cleanup_free_ char *ca = cert("ca.pem"), *extra = NULL, *id = NULL;

	nginx_start("unknown", NULL);
	ck_assert_int_ge(asprintf(&extra, "ca_file = %s\n", ca), 0);
	lessee_start("127.0.0.1", extra);
	id = enqueue_ok();
	expect_refused(id, "TLS: the server's certificate is not signed by a trusted CA "
	                   "(unknown CA");
}
END_TEST

START_TEST(test_wrong_host_name)
{
	_cleanup_free_ char *ca = cert("ca.pem"), *extra = NULL, *id = NULL;

	nginx_start("wrongname", NULL);
	ck_assert_int_ge(asprintf(&extra, "ca_file = %s\n", ca), 0);
	lessee_start("127.0.0.1", extra);
	id = enqueue_ok();
	expect_refused(id, "TLS: the server's certificate is not for this host name "
	                   "(host name mismatch");
}
END_TEST

START_TEST(test_expired)
{
	_cleanup_free_ char *ca = cert("ca.pem"), *extra = NULL, *id = NULL;

	nginx_start("expired", NULL);
	ck_assert_int_ge(asprintf(&extra, "ca_file = %s\n", ca), 0);
	lessee_start("127.0.0.1", extra);
	id = enqueue_ok();
	expect_refused(id, "TLS: the server's certificate has expired");
}
END_TEST

/* ---- mutual TLS ---- */

START_TEST(test_mtls_without_client_cert_refused)
{
	_cleanup_free_ char *ca = cert("ca.pem"), *extra = NULL, *id = NULL;

	nginx_start("good", "clientca.pem");
	ck_assert_int_ge(asprintf(&extra, "ca_file = %s\n", ca), 0);
	lessee_start("127.0.0.1", extra);
	id = enqueue_ok();
	/* nginx answers 400 when no client certificate was sent */
	expect_refused(id, "No required SSL certificate was sent");
}
END_TEST

START_TEST(test_mtls_with_client_cert)
{
	_cleanup_free_ char *ca = cert("ca.pem"), *crt = cert("client.pem"),
	                    *key = cert("client.key");
	_cleanup_free_ char *extra = NULL, *id = NULL;

	nginx_start("good", "clientca.pem");
	ck_assert_int_ge(
	    asprintf(&extra, "ca_file = %s\nclient_cert = %s\nclient_key = %s\n", ca, crt, key), 0);
	lessee_start("127.0.0.1", extra);
	id = enqueue_ok();
	expect_succeeded(id);
}
END_TEST

/* A client certificate nginx's client CA did not sign is refused too. */
START_TEST(test_mtls_wrong_client_cert)
{
	_cleanup_free_ char *ca = cert("ca.pem"), *crt = cert("good.pem"), *key = cert("good.key");
	_cleanup_free_ char *extra = NULL, *id = NULL;

	nginx_start("good", "clientca.pem");
	ck_assert_int_ge(
	    asprintf(&extra, "ca_file = %s\nclient_cert = %s\nclient_key = %s\n", ca, crt, key), 0);
	lessee_start("127.0.0.1", extra);
	id = enqueue_ok();
	expect_refused(id, "The SSL certificate error");
}
END_TEST

/* A key that does not belong to the certificate: curl cannot use the pair. */
START_TEST(test_mtls_mismatched_key)
{
	_cleanup_free_ char *ca = cert("ca.pem"), *crt = cert("client.pem"),
	                    *key = cert("good.key");
	_cleanup_free_ char *extra = NULL, *id = NULL;

	nginx_start("good", "clientca.pem");
	ck_assert_int_ge(
	    asprintf(&extra, "ca_file = %s\nclient_cert = %s\nclient_key = %s\n", ca, crt, key), 0);
	lessee_start("127.0.0.1", extra);
	id = enqueue_ok();
	expect_refused(id, "TLS: cannot use the client certificate or key");
}
END_TEST

/* ---- plain http to a remote host: --check-config only ---- */

/* lessee --check-config --config FILE: exit status, stdout+stderr in *out. */
static int check_config(const char *text, char **out)
{
	_cleanup_free_ char *dir = tu_tmpdir("tls-check"), *path = NULL, *logp = NULL;
	char *argv[] = {(char *)(uintptr_t)tu_lessee_bin(), "--check-config", "--config", NULL,
	                NULL};
	size_t len = 0;
	int st;
	pid_t pid;

	ck_assert_ptr_nonnull(dir);
	ck_assert_int_ge(asprintf(&path, "%s/lessee.conf", dir), 0);
	ck_assert_int_ge(asprintf(&logp, "%s/out", dir), 0);
	ck_assert_int_eq(write_file_atomic(path, text, strlen(text), 0644), 0);
	argv[3] = path;
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		if (!freopen(logp, "w", stdout) || dup2(STDOUT_FILENO, STDERR_FILENO) < 0)
			_exit(127);
		execv(argv[0], argv);
		_exit(127);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_int_eq(read_file_capped(logp, 1 << 20, out, &len), 0);
	rm_rf(dir);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

#define PLAIN_REMOTE                                                                               \
	"[api]\nurl = http://192.0.2.1:8080\n%s[worker]\nspool_dir = /nonexistent/s\n"             \
	"run_dir = /nonexistent/r\n[workflow.w]\ncommand = /bin/true\n"

START_TEST(test_check_config_plain_http_remote)
{
	_cleanup_free_ char *refused = NULL, *allowed = NULL, *out1 = NULL, *out2 = NULL;
	int st;

	ck_assert_int_ge(asprintf(&refused, PLAIN_REMOTE, ""), 0);
	st = check_config(refused, &out1);
	ck_assert_msg(st == 78 && strstr(out1, "api.url: plain http:// to 192.0.2.1") &&
	                  strstr(out1, "api.allow_insecure_http = yes"),
	              "--check-config of a plain http:// URL to 192.0.2.1 exited %d:\n%s", st,
	              out1);
	ck_assert_int_ge(asprintf(&allowed, PLAIN_REMOTE, "allow_insecure_http = yes\n"), 0);
	st = check_config(allowed, &out2);
	ck_assert_msg(st == 0 && strstr(out2, "\nallow_insecure_http = yes\n") &&
	                  strstr(out2, "api.url is plain http://"),
	              "--check-config with allow_insecure_http = yes exited %d:\n%s", st, out2);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("tls");
	TCase *tc = tcase_create("tls");
	TCase *cc = tcase_create("check_config");

	tcase_add_unchecked_fixture(tc, certs_make, certs_remove);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_ca_file_run_completes, 0, 2);
	tcase_add_test(tc, test_verifies_by_default);
	tcase_add_test(tc, test_wrong_ca);
	tcase_add_test(tc, test_wrong_host_name);
	tcase_add_test(tc, test_expired);
	tcase_add_test(tc, test_mtls_without_client_cert_refused);
	tcase_add_test(tc, test_mtls_with_client_cert);
	tcase_add_test(tc, test_mtls_wrong_client_cert);
	tcase_add_test(tc, test_mtls_mismatched_key);
	suite_add_tcase(s, tc);
	tcase_add_test(cc, test_check_config_plain_http_remote);
	suite_add_tcase(s, cc);
	return tu_run(s);
}
