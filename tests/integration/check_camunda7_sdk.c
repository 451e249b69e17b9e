/* The official Camunda 7 external task client (camunda-external-task-client-js,
 * pinned in tests/camunda7/sdk/package.json) against the Camunda 7 emulator:
 * the emulation is held to what the real client sends and needs (a
 * Content-Type of exactly application/json, typed variables, 204s without a
 * body).  tests/camunda7/sdk/worker.mjs subscribes to a topic; the tests
 * create tasks through /emu/ and assert what the emulator saw: completions
 * with variables and local variables, failures with retries down to an
 * incident, a bpmnError, a lock extension, basic auth, and an error answer
 * the client reads.
 *
 * The client is installed with `npm ci` into build/camunda7-sdk (or
 * $CAMUNDA7_SDK_CACHE) on first use.  Without node or npm the binary exits
 * 77 (skipped); an npm that cannot install it is a failure. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "camunda7_proc.h"
#include "lessor_proc.h" /* tu_timeout */
#include "jsonutil.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"

#define SEC USEC_PER_SEC
#define SDK_FILES "package.json", "package-lock.json", ".npmrc", "worker.mjs"

extern char **environ;

static char sdk_dir[4096]; /* holds node_modules/ and worker.mjs */
static struct tu_camunda7 *C;
static pid_t worker = -1;
static char *worker_log;

/* ---------------------------------------------------------- the client */

static bool have(const char *cmd)
{
	_cleanup_free_ char *line = NULL;

	if (asprintf(&line, "%s >/dev/null 2>&1", cmd) < 0)
		return false;
	return system(line) == 0;
}

static bool same_file(const char *a, const char *b)
{
	_cleanup_free_ char *x = NULL, *y = NULL;
	size_t nx = 0, ny = 0;

	return read_file_capped(a, 1 << 20, &x, &nx) >= 0 &&
	       read_file_capped(b, 1 << 20, &y, &ny) >= 0 && nx == ny && memcmp(x, y, nx) == 0;
}

static int copy_sdk_files(const char *src)
{
	static const char *const files[] = {SDK_FILES};

	for (size_t i = 0; i < ELEMENTSOF(files); i++) {
		_cleanup_free_ char *from = NULL, *to = NULL, *text = NULL;
		size_t n = 0;
		int r;

		if (asprintf(&from, "%s/tests/camunda7/sdk/%s", src, files[i]) < 0 ||
		    asprintf(&to, "%s/%s", sdk_dir, files[i]) < 0)
			return -ENOMEM;
		if ((r = read_file_capped(from, 1 << 20, &text, &n)) < 0 ||
		    (r = write_file_atomic(to, text, n, 0644)) < 0)
			return r;
	}
	return 0;
}

/* 0: ready; 77: node or npm is missing (why on stderr); else a failure. */
static int sdk_prepare(void)
{
	const char *src = getenv("LESSEE_SRCDIR"), *cache = getenv("CAMUNDA7_SDK_CACHE");
	_cleanup_free_ char *lock_src = NULL, *lock = NULL, *pkg = NULL, *install = NULL;
	bool installed;

	if (!src)
		src = ".";
	if (!have("node --version")) {
		fprintf(stderr, "check_camunda7_sdk: SKIP: node is not installed\n");
		return 77;
	}
	snprintf(sdk_dir, sizeof(sdk_dir), "%s", cache && *cache ? cache : "");
	if (!*sdk_dir)
		snprintf(sdk_dir, sizeof(sdk_dir), "%s/build/camunda7-sdk", src);
	if (asprintf(&lock_src, "%s/tests/camunda7/sdk/package-lock.json", src) < 0 ||
	    asprintf(&lock, "%s/package-lock.json", sdk_dir) < 0 ||
	    asprintf(&pkg, "%s/node_modules/camunda-external-task-client-js/package.json",
	             sdk_dir) < 0)
		return 1;
	installed = access(pkg, R_OK) == 0 && same_file(lock_src, lock);
	if (mkdir_p(sdk_dir, 0755) < 0 || copy_sdk_files(src) < 0) {
		fprintf(stderr, "check_camunda7_sdk: cannot copy the client test files to %s\n",
		        sdk_dir);
		return 1;
	}
	if (installed)
		return 0;
	if (!have("npm --version")) {
		fprintf(stderr, "check_camunda7_sdk: SKIP: npm is not installed\n");
		return 77;
	}
	fprintf(stderr, "check_camunda7_sdk: npm ci in %s\n", sdk_dir);
	if (asprintf(&install,
	             "cd '%s' && timeout 300 npm ci --no-audit --no-fund --fetch-retries=1 "
	             "--loglevel=error",
	             sdk_dir) < 0 ||
	    !have(install) || access(pkg, R_OK) < 0) {
		fprintf(stderr, "check_camunda7_sdk: npm could not install the client into %s\n",
		        sdk_dir);
		return 1;
	}
	return 0;
}

/* ------------------------------------------------------- the worker */

/* node worker.mjs with CAMUNDA_URL and the given NAME=value pairs. */
static void worker_start(const char *const *env)
{
	_cleanup_free_ char *script = NULL;
	posix_spawn_file_actions_t fa;
	char *argv[3];

	ck_assert_int_ge(asprintf(&script, "%s/worker.mjs", sdk_dir), 0);
	ck_assert_int_ge(asprintf(&worker_log, "%s/sdk-worker.log", tu_camunda7_dir(C)), 0);
	/* each test runs in a process of its own (Check's fork mode) or alone */
	setenv("CAMUNDA_URL", tu_camunda7_url(C), 1);
	for (size_t i = 0; env && env[i]; i += 2)
		setenv(env[i], env[i + 1], 1);
	argv[0] = (char *)"node";
	argv[1] = script;
	argv[2] = NULL;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, worker_log,
	                                 O_WRONLY | O_CREAT | O_APPEND, 0600);
	posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
	ck_assert_int_eq(posix_spawnp(&worker, "node", &fa, NULL, argv, environ), 0);
	posix_spawn_file_actions_destroy(&fa);
	for (size_t i = 0; env && env[i]; i += 2)
		unsetenv(env[i]);
}

static void dump_worker_log(void)
{
	_cleanup_free_ char *text = NULL;

	if (worker_log && read_file_capped(worker_log, 1 << 20, &text, NULL) >= 0 && text)
		fprintf(stderr, "---- %s ----\n%s---- end ----\n", worker_log, text);
}

/* SIGTERM: the worker stops its pollers and exits 0. */
static int worker_stop(void)
{
	usec_t end = time_mono() + tu_timeout(20 * SEC);
	int status;

	if (worker <= 0)
		return 0;
	kill(worker, SIGTERM);
	while (waitpid(worker, &status, WNOHANG) == 0) {
		if (time_mono() >= end) {
			kill(worker, SIGKILL);
			waitpid(worker, &status, 0);
			break;
		}
		tu_sleep(10 * USEC_PER_MSEC);
	}
	worker = -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void start_with(const struct tu_camunda7_opts *o)
{
	ck_assert_int_eq(tu_camunda7_start(o, &C), 0);
}

static void start(void)
{
	start_with(NULL);
}

static void teardown(void)
{
	int w = worker_stop();

	if (w != 0)
		dump_worker_log();
	ck_assert_int_eq(w, 0);
	if (C && tu_camunda7_pid(C) > 0)
		ck_assert_int_eq(tu_camunda7_stop(C), 0);
	C = tu_camunda7_free(C);
	free(worker_log);
	worker_log = NULL;
}

/* ---------------------------------------------------------- helpers */

/* The task's view once it is in `state`; the test fails otherwise. */
static cJSON *wait_task(const char *id, const char *state)
{
	cJSON *t = tu_camunda7_wait(C, id, state, 30 * SEC);

	if (!t) {
		dump_worker_log();
		ck_abort_msg("task %s never became %s", id, state);
	}
	return t;
}

static const cJSON *var(const cJSON *t, const char *map, const char *name)
{
	const cJSON *v =
	    cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(t, map), name);

	ck_assert_msg(v != NULL, "no %s.%s", map, name);
	return v;
}

static char *create(const char *body)
{
	char *id = tu_camunda7_create(C, body);

	ck_assert_ptr_nonnull(id);
	return id;
}

static void assert_completed_by_sdk(const char *id, int n)
{
	cJSON *t = wait_task(id, "COMPLETED");
	const cJSON *v;

	ck_assert_str_eq(tu_jstr(t, "workerId"), "sdk-worker");
	v = var(t, "completeVariables", "doubled");
	ck_assert_str_eq(tu_jstr(v, "type"), "Integer"); /* the client sent "integer" */
	ck_assert_int_eq(tu_jnum(v, "value"), 2 * n);
	v = var(t, "completeVariables", "by");
	ck_assert_str_eq(tu_jstr(v, "type"), "String");
	ck_assert_str_eq(tu_jstr(v, "value"), "sdk");
	v = var(t, "completeVariables", "info"); /* an object: Json, as a string */
	ck_assert_str_eq(tu_jstr(v, "type"), "Json");
	{
		cJSON *info = cJSON_Parse(tu_jstr(v, "value"));

		ck_assert_int_eq(tu_jnum(info, "n"), n);
		cJSON_Delete(info);
	}
	v = var(t, "completeLocalVariables", "seen");
	ck_assert_str_eq(tu_jstr(v, "type"), "Boolean");
	ck_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(v, "value")));
	ck_assert_int_eq(tu_jnum(cJSON_GetObjectItemCaseSensitive(t, "counts"), "refused"), 0);
	cJSON_Delete(t);
}

/* ------------------------------------------------------------ tests */

START_TEST(test_sdk_completes_fails_bpmn_and_extends)
{
	char *ok[3], *fail, *bpmn, *ext;
	cJSON *t, *b;

	for (int i = 0; i < 3; i++) {
		_cleanup_free_ char *body =
		    tu_fmt("{\"topicName\":\"sdk_topic\",\"variables\":{\"n\":%d}}", i + 1);

		ok[i] = create(body);
	}
	fail = create("{\"topicName\":\"sdk_topic\",\"retries\":2,\"variables\":{\"mode\":"
	              "\"fail\"}}");
	bpmn = create("{\"topicName\":\"sdk_topic\",\"variables\":{\"mode\":\"bpmn\"}}");
	ext = create("{\"topicName\":\"sdk_topic\",\"variables\":{\"mode\":\"extend\","
	             "\"n\":7}}");
	worker_start(NULL);
	for (int i = 0; i < 3; i++)
		assert_completed_by_sdk(ok[i], i + 1);
	assert_completed_by_sdk(ext, 7);
	t = tu_camunda7_task(C, ext);
	ck_assert_int_eq(tu_jnum(cJSON_GetObjectItemCaseSensitive(t, "counts"), "extendLock"), 1);
	ck_assert_int_eq(tu_jnum(t, "lastNewDuration"), 20000);
	cJSON_Delete(t);
	/* retries 2 → the client reports 1, fetches it again, reports 0: an incident */
	t = wait_task(fail, "INCIDENT");
	ck_assert_int_eq(tu_jnum(cJSON_GetObjectItemCaseSensitive(t, "counts"), "failure"), 2);
	ck_assert_int_eq(tu_jnum(cJSON_GetObjectItemCaseSensitive(t, "counts"), "fetched"), 2);
	ck_assert_str_eq(tu_jstr(t, "errorMessage"), "asked to fail");
	ck_assert_str_eq(tu_jstr(t, "errorDetails"), "sdk details");
	ck_assert_int_eq(tu_jnum(t, "retries"), 0);
	cJSON_Delete(t);
	t = wait_task(bpmn, "BPMN_ERROR");
	b = cJSON_GetObjectItemCaseSensitive(t, "bpmnError");
	ck_assert_str_eq(tu_jstr(b, "code"), "SDK_ERROR");
	ck_assert_str_eq(tu_jstr(b, "message"), "sdk says no");
	ck_assert_str_eq(tu_jstr(var(b, "variables", "why"), "value"), "bpmn");
	cJSON_Delete(t);
	for (int i = 0; i < 3; i++)
		free(ok[i]);
	free(fail);
	free(bpmn);
	free(ext);
}
END_TEST

/* The client's long poll (asyncResponseTimeout) is answered when a task is
 * created while it is held. */
START_TEST(test_sdk_long_poll_answered_by_new_task)
{
	cJSON *w;
	char *id;

	worker_start(NULL);
	w = tu_camunda7_json(C, "GET", "/emu/wait?stat=fetchAndLock&count=2&timeout_ms=30000", NULL,
	                     NULL);
	ck_assert_ptr_nonnull(w);
	cJSON_Delete(w);
	id = create("{\"topicName\":\"sdk_topic\",\"variables\":{\"n\":4}}");
	assert_completed_by_sdk(id, 4);
	free(id);
}
END_TEST

/* The client's basic auth interceptor; the emulator refuses it without. */
START_TEST(test_sdk_basic_auth)
{
	static const char *const env[] = {"SDK_USER", "demo", "SDK_PASSWORD", "s3cr3t", NULL};
	char *id;

	teardown();
	start_with(&(struct tu_camunda7_opts){.user = "demo", .password = "s3cr3t"});
	id = create("{\"topicName\":\"sdk_topic\",\"variables\":{\"n\":2}}");
	worker_start(env);
	assert_completed_by_sdk(id, 2);
	ck_assert_int_eq(tu_camunda7_stat(C, "auth_refused"), 0);
	free(id);
}
END_TEST

/* An error answer the client reads: its EngineError shows the ExceptionDto's
 * message and type, and it polls on. */
START_TEST(test_sdk_reads_engine_errors)
{
	_cleanup_free_ char *log = NULL;
	char *id;
	cJSON *t;

	ck_assert_int_eq(tu_camunda7_fault(C, "{\"path\":\"/engine-rest/external-task/\","
	                                      "\"count\":1,\"status\":500}"),
	                 0);
	id = create("{\"topicName\":\"sdk_topic\",\"variables\":{\"n\":3}}");
	worker_start(NULL);
	assert_completed_by_sdk(id, 3); /* the client polls on after the 500 */
	ck_assert_int_eq(tu_camunda7_stat(C, "faults"), 1);
	t = tu_camunda7_task(C, id);
	ck_assert_ptr_nonnull(t);
	cJSON_Delete(t);
	ck_assert_int_eq(worker_stop(), 0);
	ck_assert_int_ge(read_file_capped(worker_log, 1 << 20, &log, NULL), 0);
	ck_assert_msg(strstr(log, "Response code 500") && strstr(log, "injected fault") &&
	                  strstr(log, "Type: ProcessEngineException"),
	              "the client did not read the error body: %s", log);
	free(id);
}
END_TEST

int main(void)
{
	int r = sdk_prepare();
	Suite *s;
	TCase *t;

	if (r != 0)
		return r;
	s = suite_create("camunda7_sdk");
	t = tcase_create("sdk");
	tcase_add_checked_fixture(t, start, teardown);
	tcase_set_timeout(t, 120);
	tcase_add_test(t, test_sdk_completes_fails_bpmn_and_extends);
	tcase_add_test(t, test_sdk_long_poll_answered_by_new_task);
	tcase_add_test(t, test_sdk_basic_auth);
	tcase_add_test(t, test_sdk_reads_engine_errors);
	suite_add_tcase(s, t);
	return tu_run(s);
}
