/* The lessor command line: usage, exit codes and output against a real server. */
#include <check.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lessor/client.h"
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
	dir = tu_tmpdir("cli");
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

START_TEST(test_usage_and_exit_codes)
{
	ck_assert_int_eq(lessor("--version", NULL), 0);
	ck_assert_str_eq(out, "lessor " LESSEE_VERSION "\n");
	ck_assert_int_eq(lessor("--help", NULL), 0);
	ck_assert_ptr_nonnull(strstr(out, "Commands:"));
	ck_assert_int_eq(lessor("serve", "--help", NULL), 0);
	ck_assert_ptr_nonnull(strstr(out, "--listen"));
	ck_assert_int_eq(lessor(NULL), 2);
	ck_assert_int_eq(lessor("bogus", NULL), 2);
	ck_assert_ptr_nonnull(strstr(err, "unknown command"));
	ck_assert_int_eq(lessor("serve", "--bogus", NULL), 2);
	ck_assert_int_eq(lessor("serve", "--threads", "0", NULL), 2);
	ck_assert_int_eq(lessor("serve", "--max-log-bytes", "12X", NULL), 2);
	ck_assert_int_eq(lessor("serve", "--synchronous", "off", NULL), 2);
	ck_assert_int_eq(lessor("list", "--limit", "0", NULL), 2);
	ck_assert_int_eq(lessor("enqueue", NULL), 2);
	ck_assert_int_eq(lessor("enqueue", "--workflow", "w", "--timeout", "1.5s", NULL), 2);
	ck_assert_int_eq(lessor("show", NULL), 2);
	ck_assert_int_eq(lessor("show", "r-1", "r-2", NULL), 2);
}
END_TEST

START_TEST(test_enqueue_list_show_stats)
{
	ck_assert_int_eq(tu_lessor_start(NULL, &L), 0);
	ck_assert_int_eq(lessor("enqueue", URL, "--workflow", "build", "--input",
	                        "{\"a\":9007199254740993}", "--tag", "x", "--tag", "gpu",
	                        "--max-attempts", "2", "--timeout", "90s", "--idempotency-key",
	                        "k1", NULL),
	                 0);
	ck_assert_str_eq(out, "r-1\n");
	ck_assert_int_eq(
	    lessor("enqueue", URL, "--workflow", "other", "--idempotency-key", "k1", NULL), 0);
	ck_assert_str_eq(out, "r-1\n"); /* same key, same run */
	ck_assert_int_eq(lessor("enqueue", URL, "--json", "--workflow", "deploy", NULL), 0);
	ck_assert_ptr_nonnull(strstr(out, "\"id\":\t\"r-2\""));
	ck_assert_int_eq(lessor("list", URL, NULL), 0);
	ck_assert(startswith(out, "ID "));
	ck_assert_ptr_nonnull(strstr(out, "\nr-2  pending  deploy"));
	ck_assert_ptr_nonnull(strstr(out, "\nr-1  pending  build "));
	ck_assert_int_eq(lessor("list", URL, "--status", "pending", "--workflow", "deploy", NULL),
	                 0);
	ck_assert_ptr_null(strstr(out, "r-1"));
	ck_assert_ptr_nonnull(strstr(out, "r-2"));
	ck_assert_int_eq(lessor("show", URL, "r-1", NULL), 0);
	ck_assert_ptr_nonnull(strstr(out, "workflow:         build\n"));
	ck_assert_ptr_nonnull(strstr(out, "attempt:          0 of 2\n"));
	ck_assert_ptr_nonnull(strstr(out, "tags:             gpu,x\n"));
	/* every digit, both ways (cJSON's doubles made it 9007199254740992) */
	ck_assert_msg(strstr(out, "input:            {\"a\":9007199254740993}\n"), "%s", out);
	ck_assert_ptr_nonnull(strstr(out, "timeout_s:        90\n"));
	ck_assert_int_eq(lessor("show", URL, "--json", "r-1", NULL), 0);
	ck_assert_ptr_nonnull(strstr(out, "\"max_attempts\":\t2"));
	ck_assert_int_eq(lessor("cancel", URL, "r-2", NULL), 0);
	ck_assert_str_eq(out, "r-2 cancelled\n");
	ck_assert_int_eq(lessor("stats", URL, NULL), 0);
	ck_assert_ptr_nonnull(strstr(out, "pending          1\n"));
	ck_assert_ptr_nonnull(strstr(out, "cancelled        1\n"));
	ck_assert_int_eq(lessor("requeue", URL, "r-1", NULL), 1); /* not running */
	ck_assert_ptr_nonnull(strstr(err, "409 conflict"));
	ck_assert_int_eq(lessor("show", URL, "r-404", NULL), 1);
	ck_assert_ptr_nonnull(strstr(err, "404 not_found"));
	ck_assert_int_eq(lessor("show", URL, "../etc", NULL), 1);
	ck_assert_int_eq(lessor("enqueue", URL, "--workflow", "w", "--input", "{nope", NULL), 1);
	ck_assert_int_eq(lessor("enqueue", URL, "--workflow", "w", "--tag", "bad tag", NULL), 1);
	ck_assert_ptr_nonnull(strstr(err, "400 invalid_request"));
}
END_TEST

START_TEST(test_log_prints_bytes)
{
	const char data[] = "line one\nline \xc3\xa9 two\n";
	cJSON *j = NULL;
	long status;
	lessor_client *c;
	struct lessor_response resp;
	char tok[96], range[64];
	const char *token;

	ck_assert_int_eq(tu_lessor_start(NULL, &L), 0);
	free(tu_lessor_enqueue(L, "{\"workflow\":\"w\"}"));
	ck_assert_int_eq(tu_lessor_json(L, "POST", "/v1/claims",
	                                "{\"claim_id\":\"c\",\"worker_id\":\"w\",\"max_runs\":1,"
	                                "\"lease_ttl_s\":30}",
	                                &status, &j),
	                 0);
	token =
	    cJSON_GetObjectItem(
	        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "runs"), 0), "lease"),
	        "token")
	        ->valuestring;
	snprintf(tok, sizeof(tok), "Lease-Token: %s", token);
	snprintf(range, sizeof(range), "Content-Range: bytes 0-%zu/*", sizeof(data) - 2);
	c = tu_lessor_client(L);
	ck_assert_int_eq(lessor_client_request(c, "PATCH", "/v1/runs/r-1/log",
	                                       (char *[]){tok, range, NULL}, data, sizeof(data) - 1,
	                                       &resp),
	                 0);
	ck_assert_int_eq(resp.status, 202);
	lessor_response_done(&resp);
	lessor_client_free(c);
	cJSON_Delete(j);
	ck_assert_int_eq(lessor("log", URL, "r-1", NULL), 0);
	ck_assert_str_eq(out, data);
}
END_TEST

START_TEST(test_token_and_unreachable)
{
	_cleanup_free_ char *tf = NULL, *dead = NULL;
	int port = tu_free_port();

	ck_assert_int_eq(tu_lessor_start(&(struct tu_lessor_opts){.token = "t0ken"}, &L), 0);
	ck_assert_int_eq(lessor("stats", URL, NULL), 1);
	ck_assert_ptr_nonnull(strstr(err, "401"));
	ck_assert_int_ge(asprintf(&tf, "%s/token", tu_lessor_dir(L)), 0);
	ck_assert_int_eq(lessor("stats", URL, "--token-file", tf, NULL), 0);
	setenv("LESSOR_URL", tu_lessor_url(L), 1);
	setenv("LESSOR_TOKEN_FILE", tf, 1);
	ck_assert_int_eq(lessor("list", NULL), 0);
	unsetenv("LESSOR_URL");
	unsetenv("LESSOR_TOKEN_FILE");
	ck_assert_int_eq(lessor("stats", "--token-file", "/nonexistent/token", URL, NULL), 1);
	/* a FIFO is refused at once, not waited on for a writer */
	free(tf);
	ck_assert_int_ge(asprintf(&tf, "%s/fifo", dir), 0);
	ck_assert_int_eq(mkfifo(tf, 0600), 0);
	ck_assert_int_eq(lessor("stats", "--token-file", tf, URL, NULL), 1);
	ck_assert_msg(strstr(err, "not a regular file"), "%s", err);
	ck_assert_int_ge(asprintf(&dead, "http://127.0.0.1:%d", port), 0);
	ck_assert_int_eq(lessor("stats", "--url", dead, NULL), 1);
	ck_assert_ptr_nonnull(strstr(err, "cannot talk to"));
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("lessor_cli");
	TCase *tc = tcase_create("cli");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_usage_and_exit_codes);
	tcase_add_test(tc, test_enqueue_list_show_stats);
	tcase_add_test(tc, test_log_prints_bytes);
	tcase_add_test(tc, test_token_and_unreachable);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(suite());
}
