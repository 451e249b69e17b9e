/* Nothing a child controls blocks the loop (issue 10, item 6): a result file
 * replaced by a FIFO, a result-file symlink to a root-only file under user=,
 * a run directory of 200k files.  Real lessor, real daemon, real children;
 * tests/run.sh runs this under both loop backends. */
#include <arpa/inet.h>
#include <cJSON.h>
#include <check.h>
#include <errno.h>
#include <glob.h>
#include <netinet/in.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "lessee_proc.h"
#include "lessor_proc.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"

#define SEC USEC_PER_SEC
#define MSEC USEC_PER_MSEC

static struct tu_lessor *L;
static struct tu_lessee *D;
static char *scripts; /* the workflows' scripts; world-readable for user=nobody */
static char *secret_dir;

static void write_script(const char *name, const char *body)
{
	char path[512];
	_cleanup_free_ char *text = NULL;

	snprintf(path, sizeof(path), "%s/%s", scripts, name);
	ck_assert_int_ge(asprintf(&text, "#!/bin/sh\n%s\n", body), 0);
	ck_assert_int_eq(write_file_atomic(path, text, strlen(text), 0755), 0);
}

static void setup(void)
{
	scripts = tu_tmpdir("hostile");
	ck_assert_ptr_nonnull(scripts);
	ck_assert_int_eq(chmod(scripts, 0755), 0);
	ck_assert_int_eq(tu_lessor_start(&(struct tu_lessor_opts){.token = "t0ken-for-tests"}, &L),
	                 0);
}

static void teardown(void)
{
	int st = D ? tu_lessee_quit(D) : 0;
	int ls = L ? tu_lessor_stop(L) : 0;

	D = tu_lessee_free(D);
	L = tu_lessor_free(L);
	if (scripts)
		rm_rf(scripts);
	if (secret_dir)
		rm_rf(secret_dir);
	free(scripts);
	free(secret_dir);
	scripts = secret_dir = NULL;
	ck_assert_msg(st == 0 || st == 128 + SIGKILL, "lessee exited with %d", st);
	ck_assert_msg(ls == 0, "lessor exited with %d", ls);
}

static void start_lessee(const char *workflows)
{
	_cleanup_free_ char *conf = NULL;

	ck_assert_int_ge(asprintf(&conf, "[status]\nlisten = 127.0.0.1:0\n%s", workflows), 0);
	ck_assert_int_eq(tu_lessee_start(&(struct tu_lessee_opts){.lessor = L, .conf = conf}, &D),
	                 0);
}

static char *enqueue(const char *workflow)
{
	char *id = tu_lessor_enqueue_wf(L, workflow, NULL);

	ck_assert_ptr_nonnull(id);
	return id;
}

static void wait_status(const char *id, const char *status, usec_t timeout)
{
	ck_assert_msg(tu_lessor_wait_status(L, id, status, timeout) == 0,
	              "run %s did not reach status %s", id, status);
}

static const char *jstr(const cJSON *o, const char *key)
{
	const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsString(j) ? j->valuestring : "";
}

/* One GET on the status endpoint with a receive timeout, so a stalled loop is
 * a failed request, not a hung test.  Returns the HTTP status (0 = no answer);
 * the body in *ret_body when asked. */
static int status_get(int port, const char *path, usec_t timeout, char **ret_body)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	struct timeval tv = {.tv_sec = (time_t)(timeout / SEC),
	                     .tv_usec = (suseconds_t)(timeout % SEC)};
	_cleanup_close_ int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	char req[256], buf[65536];
	size_t len = 0;
	ssize_t n;
	int status = 0;

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0 ||
	    connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return 0;
	snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n", path);
	if (write(fd, req, strlen(req)) != (ssize_t)strlen(req))
		return 0;
	while (len < sizeof(buf) - 1 && (n = read(fd, buf + len, sizeof(buf) - 1 - len)) > 0)
		len += (size_t)n;
	buf[len] = '\0';
	if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1)
		return 0;
	if (ret_body) {
		const char *b = strstr(buf, "\r\n\r\n");

		*ret_body = strdup(b ? b + 4 : "");
	}
	return status;
}

/* A counter's value in /metrics ("name{labels}" exactly as rendered), -1 if absent. */
static double metric(int port, const char *sample)
{
	_cleanup_free_ char *body = NULL;
	const char *p;

	if (status_get(port, "/metrics", 2 * SEC, &body) != 200)
		return -1;
	for (p = body; (p = strstr(p, sample)); p++)
		if ((p == body || p[-1] == '\n') && p[strlen(sample)] == ' ')
			return strtod(p + strlen(sample) + 1, NULL);
	return -1;
}

/* ---------------------------------------------------------------- FIFO */

/* One run swaps its result file for a FIFO and exits; a plain blocking open()
 * of it would stall the loop forever.  The other run, held meanwhile, must keep
 * its lease (renewed on time, never lost), /healthz must answer, the FIFO run
 * fails with a clear reason and SIGTERM drains. */
START_TEST(test_result_fifo)
{
	_cleanup_free_ char *wfs = NULL, *fifo = NULL, *longrun = NULL;
	cJSON *run;
	double ok0, ok1;
	int port;

	write_script("fifo.sh", "rm -f \"$LESSEE_RESULT_FILE\"\nmkfifo \"$LESSEE_RESULT_FILE\"");
	write_script("long.sh",
	             "echo started\nsleep 8\necho '{\"long\":1}' >\"$LESSEE_RESULT_FILE\"");
	ck_assert_int_ge(asprintf(&wfs,
	                          "[workflow.fifo]\ncommand = %1$s/fifo.sh\n"
	                          "[workflow.long]\ncommand = %1$s/long.sh\n",
	                          scripts),
	                 0);
	start_lessee(wfs);
	port = tu_lessee_status_port(D);
	ck_assert_int_gt(port, 0);

	longrun = enqueue("long");
	wait_status(longrun, "running", 10 * SEC);
	ck_assert_int_eq(tu_lessee_wait_log(D, "pid ", tu_timeout(10 * SEC)), 0);
	fifo = enqueue("fifo");
	wait_status(fifo, "failed", 15 * SEC);
	run = tu_lessor_get_run(L, fifo);
	ck_assert_msg(strstr(jstr(run, "error"), "result file") &&
	                  strstr(jstr(run, "error"), "FIFO"),
	              "error: %s", jstr(run, "error"));
	ck_assert(cJSON_IsNull(cJSON_GetObjectItem(run, "output")));
	cJSON_Delete(run);

	/* the loop is alive: /healthz answers, renewals keep going out */
	ck_assert_int_eq(status_get(port, "/healthz", 2 * SEC, NULL), 200);
	ok0 = metric(port, "lessee_lease_renewals_total{result=\"ok\"}");
	tu_sleep(2500 * MSEC); /* lease_refresh = 1s: this is the property under test */
	ok1 = metric(port, "lessee_lease_renewals_total{result=\"ok\"}");
	ck_assert_msg(ok1 >= ok0 + 2, "renewals %g -> %g in 2.5 s", ok0, ok1);

	wait_status(longrun, "succeeded", 20 * SEC);
	run = tu_lessor_get_run(L, longrun);
	ck_assert_int_eq((int)cJSON_GetObjectItem(run, "attempt")->valuedouble, 1);
	cJSON_Delete(run);
	ck_assert_int_eq((int)metric(port, "lessee_leases_lost_total"), 0);
	ck_assert_int_eq(tu_lessee_stop(D), 0);
}
END_TEST

/* ---------------------------------------------------------------- symlink */

/* A run with user=nobody points its result file at a root-only file: the
 * daemon (root) must not read it for the run. */
/* The daemon's private directory is 0700: let user=nobody reach its run dir. */
static void traversable_run_dir(void)
{
	_cleanup_free_ char *run = NULL;

	ck_assert_int_ge(asprintf(&run, "%s/run", tu_lessee_dir(D)), 0);
	ck_assert_int_eq(chmod(tu_lessee_dir(D), 0711), 0);
	ck_assert(mkdir(run, 0711) == 0 || errno == EEXIST);
	ck_assert_int_eq(chmod(run, 0711), 0);
}

START_TEST(test_result_symlink_root_only)
{
	static const char secret[] = "{\"secret\":\"TOPSECRET-4711\"}";
	_cleanup_free_ char *wfs = NULL, *path = NULL, *id = NULL, *body = NULL, *plain = NULL;
	cJSON *run;
	char *out;

	if (geteuid() != 0 || !getpwnam("nobody")) {
		printf("test_result_symlink_root_only: not root or no user nobody, skipped\n");
		return;
	}
	secret_dir = tu_tmpdir("secret");
	ck_assert_ptr_nonnull(secret_dir);
	ck_assert_int_eq(chmod(secret_dir, 0755), 0); /* only the file's mode protects it */
	ck_assert_int_ge(asprintf(&path, "%s/secret.json", secret_dir), 0);
	ck_assert_int_eq(write_file_atomic(path, secret, strlen(secret), 0600), 0);
	ck_assert_int_ne(access(path, R_OK), -1);
	ck_assert_int_ge(asprintf(&body, "ln -sf %s \"$LESSEE_RESULT_FILE\"", path), 0);
	write_script("steal.sh", body);
	ck_assert_int_ge(asprintf(&wfs,
	                          "[workflow.steal]\ncommand = %1$s/steal.sh\nuser = nobody\n"
	                          "[workflow.plain]\ncommand = %1$s/steal.sh\n",
	                          scripts),
	                 0);
	start_lessee(wfs);
	traversable_run_dir();

	id = enqueue("steal");
	wait_status(id, "failed", 15 * SEC);
	run = tu_lessor_get_run(L, id);
	out = cJSON_PrintUnformatted(run);
	ck_assert_msg(!strstr(out, "TOPSECRET"), "the secret leaked: %s", out);
	ck_assert_msg(strstr(jstr(run, "error"), "result file") &&
	                  strstr(jstr(run, "error"), "symbolic link"),
	              "error: %s", jstr(run, "error"));
	free(out);
	cJSON_Delete(run);

	/* without user= the daemon's own privileges are the run's: a symlink is
	 * still refused (O_NOFOLLOW), so a job cannot make lessee read elsewhere */
	plain = enqueue("plain");
	wait_status(plain, "failed", 15 * SEC);
	run = tu_lessor_get_run(L, plain);
	ck_assert_msg(strstr(jstr(run, "error"), "symbolic link"), "error: %s", jstr(run, "error"));
	cJSON_Delete(run);
}
END_TEST

/* Not a regular file, or over the cap: failed, with the kind in the error.
 * (A device node opened with a blocking open() could be anything; /dev/null
 * just reads as empty, which used to pass as "not valid JSON, ignored".) */
START_TEST(test_result_bad_kinds)
{
	static const struct {
		const char *wf, *script, *want;
	} cases[] = {
	    /* runs have no capabilities (no CAP_MKNOD): a link to the test's node */
	    {"dev", "rm -f \"$LESSEE_RESULT_FILE\"\nln \"$DEV\" \"$LESSEE_RESULT_FILE\"",
	     "is a character device"},
	    {"dir", "mkdir \"$LESSEE_RESULT_FILE\"", "is a directory"},
	    {"big", "head -c 2000 /dev/zero | tr '\\0' ' ' >\"$LESSEE_RESULT_FILE\"",
	     "larger than max_output_bytes"},
	};
	_cleanup_free_ char *wfs = strdup("[worker]\nmax_output_bytes = 1K\n");
	char *ids[ELEMENTSOF(cases)];

	if (geteuid() != 0) {
		printf("test_result_bad_kinds: mknod needs root, skipped\n");
		return;
	}
	_cleanup_free_ char *dev = NULL;

	ck_assert_int_ge(asprintf(&dev, "%s/null-dev", scripts), 0);
	ck_assert_int_eq(mknod(dev, S_IFCHR | 0666, makedev(1, 3)), 0);
	for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
		char name[32], *more = NULL, *script = NULL;

		snprintf(name, sizeof(name), "%s.sh", cases[i].wf);
		ck_assert_int_ge(asprintf(&script, "DEV='%s'\n%s", dev, cases[i].script), 0);
		write_script(name, script);
		free(script);
		ck_assert_int_ge(asprintf(&more, "%s[workflow.%s]\ncommand = %s/%s\n", wfs,
		                          cases[i].wf, scripts, name),
		                 0);
		free(wfs);
		wfs = more;
	}
	start_lessee(wfs);
	for (size_t i = 0; i < ELEMENTSOF(cases); i++)
		ids[i] = enqueue(cases[i].wf);
	for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
		cJSON *run;

		wait_status(ids[i], "failed", 15 * SEC);
		run = tu_lessor_get_run(L, ids[i]);
		ck_assert_msg(strstr(jstr(run, "error"), cases[i].want), "%s: error: %s",
		              cases[i].wf, jstr(run, "error"));
		cJSON_Delete(run);
		free(ids[i]);
	}
}
END_TEST

/* ---------------------------------------------------------------- 200k files */

struct poller {
	int port;
	atomic_bool stop;
	usec_t max, total;
	unsigned n, failed;
	pthread_t thread;
};

static void *poll_healthz(void *userdata)
{
	struct poller *p = userdata;

	while (!atomic_load(&p->stop)) {
		usec_t t0 = time_mono(), dt;

		if (status_get(p->port, "/healthz", 5 * SEC, NULL) != 200)
			p->failed++;
		dt = time_mono() - t0;
		p->max = MAX(p->max, dt);
		p->total += dt;
		p->n++;
		tu_sleep(2 * MSEC);
	}
	return NULL;
}

/* The run directory (and anything named after it). */
static bool dir_gone(const char *path)
{
	char pattern[1024];
	glob_t g;
	bool none;

	snprintf(pattern, sizeof(pattern), "%s*", path);
	none = glob(pattern, GLOB_NOSORT, NULL, &g) == GLOB_NOMATCH;
	globfree(&g);
	return none;
}

/* A run leaves 200k files in its run directory; removing them must not stall
 * the loop: /healthz answers fast throughout.  (bench/healthz_rmrf measures.) */
START_TEST(test_big_run_dir)
{
	_cleanup_free_ char *wfs = NULL, *aux = tu_aux_bin("many_files"), *id = NULL, *dir = NULL;
	struct poller p = {0};
	usec_t end;

	ck_assert_int_ge(asprintf(&wfs, "[workflow.many]\ncommand = %s 200000\n", aux), 0);
	start_lessee(wfs);
	p.port = tu_lessee_status_port(D);
	ck_assert_int_gt(p.port, 0);
	id = enqueue("many");
	wait_status(id, "running", 10 * SEC);
	ck_assert_int_ge(
	    asprintf(&dir, "%s/run/lessee-%d/%s.1", tu_lessee_dir(D), (int)tu_lessee_pid(D), id),
	    0);
	ck_assert_int_eq(pthread_create(&p.thread, NULL, poll_healthz, &p), 0);
	wait_status(id, "succeeded", 60 * SEC);
	end = time_mono() + tu_timeout(30 * SEC);
	while (!dir_gone(dir) && time_mono() < end)
		tu_sleep(10 * MSEC);
	tu_sleep(50 * MSEC);
	atomic_store(&p.stop, true);
	pthread_join(p.thread, NULL);
	ck_assert_msg(dir_gone(dir), "%s is still there", dir);
	printf("test_big_run_dir [%s]: %u /healthz requests, max %.1f ms, mean %.1f ms\n",
	       tu_backend(), p.n, (double)p.max / MSEC, p.n ? (double)p.total / p.n / MSEC : 0.0);
	ck_assert_uint_eq(p.failed, 0);
	ck_assert_msg(p.max < tu_timeout(200 * MSEC), "/healthz took up to %.1f ms",
	              (double)p.max / MSEC);
	ck_assert_int_eq(tu_lessee_stop(D), 0);
}
END_TEST

static Suite *hostile_suite(void)
{
	Suite *s = suite_create("hostile");
	TCase *tc = tcase_create("child");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_result_fifo);
	tcase_add_test(tc, test_result_symlink_root_only);
	tcase_add_test(tc, test_result_bad_kinds);
	tcase_add_test(tc, test_big_run_dir);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(hostile_suite());
}
