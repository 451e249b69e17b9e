/* The official Conductor worker (@io-orkes/conductor-javascript, pinned in
 * tests/conductor/sdk/package.json) against the Conductor emulator: the
 * emulation is held to what the real client sends and needs.  The SDK's
 * TaskManager runs tests/conductor/sdk/worker.mjs; the tests create tasks
 * through /emu/ and assert how they ended, with the SDK's outputData and
 * logs: completed, failed (and retried as a new task), kept alive by the
 * SDK's lease extension past responseTimeoutSeconds, with its token renewed
 * after expiry, and through its fallback from update-v2 to /api/tasks.
 *
 * The SDK is installed with `npm ci` into build/conductor-sdk (or
 * $CONDUCTOR_SDK_CACHE) on first use.  Without node or npm the binary exits
 * 77 (skipped); an npm that cannot install the SDK is a failure. */
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

#include "conductor_proc.h"
#include "lessor_proc.h" /* tu_timeout */
#include "jsonutil.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"

#define SEC USEC_PER_SEC
#define SDK_FILES "package.json", "package-lock.json", ".npmrc", "worker.mjs"

extern char **environ;

static char sdk_dir[4096]; /* holds node_modules/ and worker.mjs */
static struct tu_conductor *C;
static pid_t worker = -1;
static char *worker_log;

/* ---------------------------------------------------------- the SDK */

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

		if (asprintf(&from, "%s/tests/conductor/sdk/%s", src, files[i]) < 0 ||
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
	const char *src = getenv("LESSEE_SRCDIR"), *cache = getenv("CONDUCTOR_SDK_CACHE");
	_cleanup_free_ char *lock_src = NULL, *lock = NULL, *pkg = NULL, *install = NULL;
	bool installed;

	if (!src)
		src = ".";
	if (!have("node --version")) {
		fprintf(stderr, "check_conductor_sdk: SKIP: node is not installed\n");
		return 77;
	}
	snprintf(sdk_dir, sizeof(sdk_dir), "%s", cache && *cache ? cache : "");
	if (!*sdk_dir)
		snprintf(sdk_dir, sizeof(sdk_dir), "%s/build/conductor-sdk", src);
	if (asprintf(&lock_src, "%s/tests/conductor/sdk/package-lock.json", src) < 0 ||
	    asprintf(&lock, "%s/package-lock.json", sdk_dir) < 0 ||
	    asprintf(&pkg, "%s/node_modules/@io-orkes/conductor-javascript/package.json", sdk_dir) <
	        0)
		return 1;
	installed = access(pkg, R_OK) == 0 && same_file(lock_src, lock);
	if (mkdir_p(sdk_dir, 0755) < 0 || copy_sdk_files(src) < 0) {
		fprintf(stderr, "check_conductor_sdk: cannot copy the SDK test files to %s\n",
		        sdk_dir);
		return 1;
	}
	if (installed)
		return 0;
	if (!have("npm --version")) {
		fprintf(stderr, "check_conductor_sdk: SKIP: npm is not installed\n");
		return 77;
	}
	fprintf(stderr, "check_conductor_sdk: npm ci in %s\n", sdk_dir);
	if (asprintf(&install,
	             "cd '%s' && timeout 300 npm ci --no-audit --no-fund --fetch-retries=1 "
	             "--loglevel=error",
	             sdk_dir) < 0 ||
	    !have(install) || access(pkg, R_OK) < 0) {
		fprintf(stderr, "check_conductor_sdk: npm could not install the SDK into %s\n",
		        sdk_dir);
		return 1;
	}
	return 0;
}

/* ------------------------------------------------------- the worker */

/* node worker.mjs with CONDUCTOR_SERVER_URL and the given NAME=value pairs. */
static void worker_start(const char *const *env)
{
	_cleanup_free_ char *script = NULL;
	posix_spawn_file_actions_t fa;
	char *argv[3];

	ck_assert_int_ge(asprintf(&script, "%s/worker.mjs", sdk_dir), 0);
	ck_assert_int_ge(asprintf(&worker_log, "%s/sdk-worker.log", tu_conductor_dir(C)), 0);
	/* each test runs in a process of its own (Check's fork mode) or alone */
	setenv("CONDUCTOR_SERVER_URL", tu_conductor_url(C), 1);
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

static void start_with(const struct tu_conductor_opts *o)
{
	ck_assert_int_eq(tu_conductor_start(o, &C), 0);
}

static void start(void)
{
	start_with(&(struct tu_conductor_opts){.sweep_ms = 20});
}

static void teardown(void)
{
	int w = worker_stop();

	if (w != 0)
		dump_worker_log();
	ck_assert_int_eq(w, 0);
	if (C && tu_conductor_pid(C) > 0)
		ck_assert_int_eq(tu_conductor_stop(C), 0);
	C = tu_conductor_free(C);
	free(worker_log);
	worker_log = NULL;
}

/* ---------------------------------------------------------- helpers */

/* The task's final view once it has `status`; the test fails otherwise. */
static cJSON *wait_task(const char *id, const char *status)
{
	cJSON *t = tu_conductor_wait(C, id, status, 30 * SEC);

	if (!t) {
		dump_worker_log();
		ck_abort_msg("task %s never became %s", id, status);
	}
	return t;
}

static bool has_log(const cJSON *t, const char *needle)
{
	const cJSON *l;

	cJSON_ArrayForEach(l, cJSON_GetObjectItemCaseSensitive(t, "logs"))
	{
		const char *s = tu_jstr(l, "log");

		if (s && strstr(s, needle))
			return true;
	}
	return false;
}

static double emu_stat(const char *name)
{
	long st;
	cJSON *s = tu_conductor_json(C, "GET", "/emu/stats", NULL, &st);
	double v = tu_jnum_or(s, name, -1);

	cJSON_Delete(s);
	return v;
}

static void assert_completed_by_sdk(const char *id, int n)
{
	cJSON *t = wait_task(id, "COMPLETED");
	const cJSON *out = cJSON_GetObjectItemCaseSensitive(t, "outputData");
	char line[32];

	ck_assert_int_eq(tu_jnum_or(out, "n", -1), n);
	ck_assert_int_eq(tu_jnum_or(out, "doubled", -1), 2 * n);
	ck_assert_str_eq(tu_jstr(out, "by"), "sdk");
	snprintf(line, sizeof(line), "sdk saw %d", n);
	ck_assert_msg(has_log(t, line), "no log line '%s'", line);
	ck_assert_str_eq(tu_jstr(t, "workerId"), "sdk-worker");
	cJSON_Delete(t);
}

/* ------------------------------------------------------------ tests */

START_TEST(test_sdk_completes_fails_and_extends)
{
	char *ok[3], *fail, *slow, *retry;
	cJSON *t;

	for (int i = 0; i < 3; i++) {
		char body[160];

		snprintf(body, sizeof(body),
		         "{\"taskType\":\"sdk_task\",\"inputData\":{\"n\":%d},\"retryCount\":0}",
		         i + 1);
		ok[i] = tu_conductor_create(C, body);
		ck_assert_ptr_nonnull(ok[i]);
	}
	fail =
	    tu_conductor_create(C, "{\"taskType\":\"sdk_task\",\"inputData\":{\"n\":9,"
	                           "\"mode\":\"fail\"},\"retryCount\":1,\"retryDelaySeconds\":0}");
	/* runs 3.5 s with a 2 s response timeout: alive only by the SDK's
	 * lease extension (every 0.8 x 2 s) */
	slow = tu_conductor_create(C, "{\"taskType\":\"sdk_task\",\"inputData\":{\"n\":5,"
	                              "\"mode\":\"slow\",\"ms\":3500},\"responseTimeoutSeconds\":2,"
	                              "\"retryCount\":0}");
	worker_start(NULL);
	for (int i = 0; i < 3; i++)
		assert_completed_by_sdk(ok[i], i + 1);
	t = wait_task(fail, "FAILED");
	ck_assert_str_eq(tu_jstr(t, "reasonForIncompletion"), "asked to fail");
	ck_assert(has_log(t, "Error: asked to fail"));
	cJSON_Delete(t);
	/* the retry is a new task, which the SDK fails too: the workflow fails */
	{
		long st;
		cJSON *all = tu_conductor_json(C, "GET", "/emu/tasks?taskType=sdk_task", NULL, &st);
		const cJSON *x;

		retry = NULL;
		cJSON_ArrayForEach(x, cJSON_GetObjectItem(all, "tasks"))
		{
			const char *from = tu_jstr(x, "retriedTaskId");

			if (from && strcmp(from, fail) == 0)
				retry = strdup(tu_jstr(x, "taskId"));
		}
		cJSON_Delete(all);
	}
	ck_assert_ptr_nonnull(retry);
	t = wait_task(retry, "FAILED");
	ck_assert_str_eq(tu_jstr(t, "workflowStatus"), "FAILED");
	cJSON_Delete(t);
	assert_completed_by_sdk(slow, 5);
	t = tu_conductor_task(C, slow);
	ck_assert_int_ge(tu_jnum_or(t, "extendLeases", -1), 1);
	cJSON_Delete(t);
	/* what the SDK sent: update-v2 (the emulator has it), chunked bodies */
	ck_assert_int_ge(emu_stat("update_v2"), 6);
	ck_assert_int_ge(emu_stat("chunked_bodies"), 6);
	for (int i = 0; i < 3; i++)
		free(ok[i]);
	free(fail);
	free(slow);
	free(retry);
}
END_TEST

/* The SDK falls back to POST /api/tasks when update-v2 is 404 (an older server). */
START_TEST(test_sdk_legacy_update_fallback)
{
	long st;
	char *id;

	cJSON_Delete(tu_conductor_json(
	    C, "POST", "/emu/faults",
	    "{\"path\":\"/api/tasks/update-v2\",\"count\":1000000,\"status\":404}", &st));
	ck_assert_int_eq(st, 204);
	id = tu_conductor_create(C, "{\"taskType\":\"sdk_task\",\"inputData\":{\"n\":2}}");
	worker_start(NULL);
	assert_completed_by_sdk(id, 2);
	ck_assert_int_ge(emu_stat("update"), 1);
	ck_assert_int_le(emu_stat("update_v2"), 0); /* every v2 attempt was the fault's */
	free(id);
}
END_TEST

/* Orkes-style auth: a token from POST /api/token, sent as X-Authorization,
 * renewed by the SDK when the server says EXPIRED_TOKEN. */
START_TEST(test_sdk_auth_and_token_renewal)
{
	static const char *const env[] = {"CONDUCTOR_AUTH_KEY", "key-1", "CONDUCTOR_AUTH_SECRET",
	                                  "s3cret", NULL};
	char *first, *later;

	teardown();
	start_with(&(struct tu_conductor_opts){
	    .key_id = "key-1", .key_secret = "s3cret", .token_ttl_s = 1, .sweep_ms = 20});
	first = tu_conductor_create(C, "{\"taskType\":\"sdk_task\",\"inputData\":{\"n\":1}}");
	worker_start(env);
	assert_completed_by_sdk(first, 1);
	/* its update comes after the 1 s token expired */
	later = tu_conductor_create(C, "{\"taskType\":\"sdk_task\",\"inputData\":{\"n\":3,"
	                               "\"mode\":\"slow\",\"ms\":1500}}");
	assert_completed_by_sdk(later, 3);
	ck_assert_int_ge(emu_stat("token"), 2);
	ck_assert_int_ge(emu_stat("auth_refused"), 1);
	free(first);
	free(later);
}
END_TEST

int main(void)
{
	int r = sdk_prepare();
	Suite *s;
	TCase *t;

	if (r != 0)
		return r;
	s = suite_create("conductor_sdk");
	t = tcase_create("sdk");
	tcase_add_checked_fixture(t, start, teardown);
	tcase_set_timeout(t, 120);
	tcase_add_test(t, test_sdk_completes_fails_and_extends);
	tcase_add_test(t, test_sdk_legacy_update_fallback);
	tcase_add_test(t, test_sdk_auth_and_token_renewal);
	suite_add_tcase(s, t);
	return tu_run(s);
}
