/* The lessor command line an operator uses on day one (issue 14): `lessor
 * workers`, `lessor list` saying why a run failed, and `lessor serve`
 * refusing a bad --listen before it touches the database.  Against a real
 * `lessor serve` and the real CLI. */
#include <cJSON.h>
#include <check.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lessor_proc.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"

extern char **environ;

static struct tu_lessor *L;
static char *dir;
static char *out, *err;

static void setup(void)
{
	dir = tu_tmpdir("ops");
	ck_assert_ptr_nonnull(dir);
}

static void teardown(void)
{
	if (L && tu_lessor_pid(L) > 0)
		ck_assert_int_eq(tu_lessor_stop(L), 0);
	L = tu_lessor_free(L);
	free(out);
	free(err);
	out = err = NULL;
	rm_rf(dir);
	free(dir);
}

/* Runs `lessor ARGS...` (NULL-terminated); its stdout/stderr in out/err. */
static int lessor(const char *first, ...)
{
	_cleanup_free_ char *op = NULL, *ep = NULL;
	char **argv = tu_wrap_argv();
	posix_spawn_file_actions_t fa;
	const char *a = first;
	va_list ap;
	pid_t pid;
	int status;

	ck_assert_int_ge(asprintf(&op, "%s/out", dir), 0);
	ck_assert_int_ge(asprintf(&ep, "%s/err", dir), 0);
	ck_assert_int_ge(strv_extend(&argv, tu_lessor_bin()), 0);
	va_start(ap, first);
	for (; a; a = va_arg(ap, const char *))
		ck_assert_int_ge(strv_extend(&argv, a), 0);
	va_end(ap);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, op, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	posix_spawn_file_actions_addopen(&fa, 2, ep, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	ck_assert_int_eq(posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ), 0);
	posix_spawn_file_actions_destroy(&fa);
	strv_free(argv);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	free(out);
	free(err);
	ck_assert_int_ge(read_file_capped(op, 1 << 20, &out, NULL), 0);
	ck_assert_int_ge(read_file_capped(ep, 1 << 20, &err, NULL), 0);
	ck_assert(WIFEXITED(status));
	return WEXITSTATUS(status);
}

#define URL "--url", tu_lessor_url(L)

/* A claim as worker_id for up to n runs: the answer's runs (free it). */
static cJSON *claim(const char *worker, const char *extra, int n)
{
	_cleanup_free_ char *body = NULL;
	cJSON *j = NULL;
	long status;

	ck_assert_int_ge(asprintf(&body,
	                          "{\"claim_id\":\"c-%s-%d\",\"worker_id\":\"%s\",\"max_runs\":%d,"
	                          "\"lease_ttl_s\":30%s}",
	                          worker, n, worker, n, extra ? extra : ""),
	                 0);
	ck_assert_int_eq(tu_lessor_json(L, "POST", "/v1/claims", body, &status, &j), 0);
	ck_assert_int_eq(status, 200);
	return j;
}

/* Completes the claimed run `id` of the claim answer j with body_tail. */
static void complete(const cJSON *j, const char *id, const char *body_tail)
{
	const cJSON *run;
	_cleanup_free_ char *path = NULL, *body = NULL;
	long status;

	cJSON_ArrayForEach(run, cJSON_GetObjectItem(j, "runs"))
	{
		const char *token;

		if (!streq(cJSON_GetObjectItem(run, "id")->valuestring, id))
			continue;
		token =
		    cJSON_GetObjectItem(cJSON_GetObjectItem(run, "lease"), "token")->valuestring;
		ck_assert_int_ge(asprintf(&path, "/v1/runs/%s/complete", id), 0);
		ck_assert_int_ge(asprintf(&body, "{\"token\":\"%s\",%s}", token, body_tail), 0);
		ck_assert_int_eq(tu_lessor_json(L, "POST", path, body, &status, NULL), 0);
		ck_assert_int_eq(status, 200);
		return;
	}
	ck_abort_msg("run %s was not claimed", id);
}

/* The line of `lessor list` output for a run id. */
static char *list_line(const char *id)
{
	char needle[64];
	const char *p;

	snprintf(needle, sizeof(needle), "\n%s ", id);
	p = strstr(out, needle);
	ck_assert_msg(p, "no line for %s in:\n%s", id, out);
	p++;
	return strndup(p, strcspn(p, "\n"));
}

START_TEST(test_list_says_why)
{
	static const struct {
		const char *complete, *why;
	} runs[] = {
	    {"\"status\":\"failed\",\"reason\":\"exit\",\"exit_code\":3", "exit 3"},
	    {"\"status\":\"failed\",\"reason\":\"timeout\",\"signal\":\"SIGKILL\"", "timeout"},
	    {"\"status\":\"failed\",\"reason\":\"crash\",\"signal\":\"SIGSEGV\"", "crash SIGSEGV"},
	    {"\"status\":\"failed\",\"reason\":\"spawn_error\",\"error\":\"no such file\"",
	     "spawn_error"},
	    {"\"status\":\"succeeded\",\"reason\":\"exit\",\"exit_code\":0", NULL},
	};
	char id[16];
	cJSON *j;

	ck_assert_int_eq(tu_lessor_start(NULL, &L), 0);
	for (size_t i = 0; i < ELEMENTSOF(runs); i++)
		free(tu_lessor_enqueue(L, "{\"workflow\":\"build\"}"));
	free(tu_lessor_enqueue(L, "{\"workflow\":\"later\"}"));
	j = claim("w1", ",\"workflows\":[\"build\"]", (int)ELEMENTSOF(runs));
	for (size_t i = 0; i < ELEMENTSOF(runs); i++) {
		snprintf(id, sizeof(id), "r-%zu", i + 1);
		complete(j, id, runs[i].complete);
	}
	cJSON_Delete(j);
	ck_assert_int_eq(lessor("list", URL, NULL), 0);
	ck_assert_msg(strstr(out, "REASON"), "no REASON column:\n%s", out);
	for (size_t i = 0; i < ELEMENTSOF(runs); i++) {
		_cleanup_free_ char *line = NULL;

		snprintf(id, sizeof(id), "r-%zu", i + 1);
		line = list_line(id);
		if (runs[i].why)
			ck_assert_msg(strstr(line, runs[i].why), "%s: no '%s' in '%s'", id,
			              runs[i].why, line);
		else
			ck_assert_msg(!strstr(line, "exit"), "%s: '%s'", id, line);
	}
	/* a run that never ran has no reason */
	{
		_cleanup_free_ char *line = list_line("r-6");

		ck_assert_msg(strstr(line, "pending") && !strstr(line, "exit"), "%s", line);
	}
	/* the JSON has it too */
	ck_assert_int_eq(lessor("list", URL, "--json", "--status", "failed", NULL), 0);
	ck_assert_ptr_nonnull(strstr(out, "\"reason\":\t\"crash\""));
	ck_assert_ptr_nonnull(strstr(out, "\"signal\":\t\"SIGSEGV\""));
}
END_TEST

START_TEST(test_workers)
{
	cJSON *j;

	ck_assert_int_eq(tu_lessor_start(NULL, &L), 0);
	ck_assert_int_eq(lessor("workers", URL, NULL), 0);
	ck_assert_msg(startswith(out, "WORKER "), "%s", out);
	ck_assert_int_eq(strchr(out, '\n') - out + 1, (long)strlen(out)); /* the header only */
	free(tu_lessor_enqueue(L, "{\"workflow\":\"build\"}"));
	cJSON_Delete(
	    claim("build-01", ",\"workflows\":[\"build\",\"deploy\"],\"tags\":[\"gpu\"]", 4));
	cJSON_Delete(claim("build-02", NULL, 2));
	ck_assert_int_eq(lessor("workers", URL, NULL), 0);
	{
		_cleanup_free_ char *one = list_line("build-01"), *two = list_line("build-02");

		/* workflows, tags, slots, held */
		ck_assert_msg(strstr(one, "build,deploy") && strstr(one, "gpu") &&
		                  strstr(one, "  4  ") && strstr(one, "  1  "),
		              "%s", one);
		ck_assert_msg(strstr(two, "any") && strstr(two, "  2  "), "%s", two);
	}
	ck_assert_ptr_nonnull(strstr(out, "LAST CONTACT"));
	ck_assert_int_eq(lessor("workers", URL, "--json", NULL), 0);
	j = cJSON_Parse(out);
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "workers")), 2);
	cJSON_Delete(j);
	ck_assert_int_eq(lessor("workers", URL, "extra", NULL), 2);
	ck_assert_int_eq(lessor("--help", NULL), 0);
	ck_assert_ptr_nonnull(strstr(out, "  workers "));
}
END_TEST

/* A bad --listen is refused (exit 2, the address named) before the database
 * or its directory exist. */
START_TEST(test_listen_checked_first)
{
	static const char *const bad[] = {
	    "nope",      "127.0.0.1", "127.0.0.1:", ":8080",     "127.0.0.1:99999", "127.0.0.1:abc",
	    "[::1:8080", "::1:8080",  "[::1]",      "[nope]:80", "127.0.0.1:80x",   "127.0.0.1:-1",
	};
	_cleanup_free_ char *sub = NULL, *db = NULL;
	struct stat st;

	ck_assert_int_ge(asprintf(&sub, "%s/state", dir), 0);
	ck_assert_int_ge(asprintf(&db, "%s/lessor.db", sub), 0);
	for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
		ck_assert_msg(lessor("serve", "--listen", bad[i], "--db", db, NULL) == 2, "%s: %s",
		              bad[i], err);
		ck_assert_msg(strstr(err, "--listen") && strstr(err, bad[i]), "%s: %s", bad[i],
		              err);
		ck_assert_msg(stat(sub, &st) < 0, "--listen %s: %s was created", bad[i], sub);
	}
	/* a name that does not resolve: exit 1, still before the database */
	ck_assert_int_eq(lessor("serve", "--listen", "no-such-host.invalid:8080", "--db", db, NULL),
	                 1);
	ck_assert_msg(strstr(err, "no-such-host.invalid"), "%s", err);
	ck_assert_msg(stat(sub, &st) < 0, "%s was created", sub);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("lessor_ops");
	TCase *t = tcase_create("cli");

	tcase_add_checked_fixture(t, setup, teardown);
	tcase_add_test(t, test_list_says_why);
	tcase_add_test(t, test_workers);
	tcase_add_test(t, test_listen_checked_first);
	suite_add_tcase(s, t);
	return tu_run(s);
}
