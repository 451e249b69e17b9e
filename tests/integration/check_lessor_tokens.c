/* Scoped tokens in lessor: one admin token, named worker tokens.  A worker
 * token reaches only the worker endpoints and only the runs claimed with it;
 * its name is the worker's identity; removing it and sending SIGHUP revokes
 * it.  Against a real `lessor serve`, a real lessee and the real CLI. */
#include <cJSON.h>
#include <check.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lessee_proc.h"
#include "lessor/client.h"
#include "lessor_proc.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"

#define SEC USEC_PER_SEC
#define ADMIN "admin-0123456789abcdef"
#define TOK_A "alpha-0123456789abcdef"
#define TOK_B "beta-0123456789abcdef0"
#define WORKERS "# name token\nalpha " TOK_A "\n\nbeta\t" TOK_B "\n"

extern char **environ;

static struct tu_lessor *L;
static char *dir;
static char *out; /* the last cli()'s stdout */

static void setup(void)
{
	dir = tu_tmpdir("tokens");
	ck_assert_ptr_nonnull(dir);
}

static void teardown(void)
{
	if (L && tu_lessor_pid(L) > 0)
		ck_assert_int_eq(tu_lessor_stop(L), 0);
	L = tu_lessor_free(L);
	free(out);
	out = NULL;
	rm_rf(dir);
	free(dir);
}

static void start_scoped(void)
{
	ck_assert_int_eq(
	    tu_lessor_start(
	        &(struct tu_lessor_opts){.admin_token = ADMIN, .worker_tokens = WORKERS}, &L),
	    0);
}

/* One request with this token; the HTTP status (the body in *ret if wanted). */
static long call(const char *token, const char *method, const char *path, const char *body,
                 cJSON **ret)
{
	_cleanup_free_ char *url = NULL;
	long status = 0;

	ck_assert_int_ge(asprintf(&url, "%s%s", tu_lessor_url(L), path), 0);
	ck_assert_int_eq(tu_http_json(method, url, token, body, &status, ret), 0);
	return status;
}

static const char *str_at(const cJSON *o, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	return cJSON_IsString(v) ? v->valuestring : "";
}

/* Claims one run with this token; its lease token in lease (or "" when none). */
static long claim(const char *token, const char *claim_id, char lease[64])
{
	char body[256];
	cJSON *j = NULL;
	const cJSON *runs, *first;
	long st;

	snprintf(body, sizeof(body),
	         "{\"claim_id\":\"%s\",\"worker_id\":\"host-1\",\"max_runs\":1,"
	         "\"lease_ttl_s\":60,\"wait_s\":0}",
	         claim_id);
	st = call(token, "POST", "/v1/claims", body, &j);
	runs = cJSON_GetObjectItemCaseSensitive(j, "runs");
	first = cJSON_IsArray(runs) ? cJSON_GetArrayItem(runs, 0) : NULL;
	snprintf(lease, 64, "%s",
	         str_at(cJSON_GetObjectItemCaseSensitive(first, "lease"), "token"));
	cJSON_Delete(j);
	return st;
}

static long renew(const char *token, const char *id, const char *lease)
{
	char path[128], body[128];

	snprintf(path, sizeof(path), "/v1/runs/%s/lease", id);
	snprintf(body, sizeof(body), "{\"token\":\"%s\",\"ttl_s\":60}", lease);
	return call(token, "POST", path, body, NULL);
}

static long complete(const char *token, const char *id, const char *lease)
{
	char path[128], body[256];

	snprintf(path, sizeof(path), "/v1/runs/%s/complete", id);
	snprintf(body, sizeof(body),
	         "{\"token\":\"%s\",\"status\":\"succeeded\",\"reason\":\"exit\",\"exit_code\":0}",
	         lease);
	return call(token, "POST", path, body, NULL);
}

static long release(const char *token, const char *id, const char *lease)
{
	char path[128], body[128];

	snprintf(path, sizeof(path), "/v1/runs/%s/release", id);
	snprintf(body, sizeof(body), "{\"token\":\"%s\",\"reason\":\"draining\"}", lease);
	return call(token, "POST", path, body, NULL);
}

static long log_append(const char *token, const char *id, const char *lease)
{
	_cleanup_free_ char *lt = NULL;
	char path[128];
	char *headers[] = {NULL, "Content-Range: bytes 0-4/*", NULL};
	struct lessor_response resp = {0};
	lessor_client *c = NULL;
	long st;

	ck_assert_int_ge(asprintf(&lt, "Lease-Token: %s", lease), 0);
	headers[0] = lt;
	snprintf(path, sizeof(path), "/v1/runs/%s/log", id);
	ck_assert_int_eq(lessor_client_new(tu_lessor_url(L), token, &c), 0);
	ck_assert_int_eq(lessor_client_request(c, "PATCH", path, headers, "hello", 5, &resp), 0);
	st = resp.status;
	lessor_response_done(&resp);
	lessor_client_free(c);
	return st;
}

static const char *run_status(const char *id, char buf[32])
{
	cJSON *run = tu_lessor_get_run(L, id);

	snprintf(buf, 32, "%s", str_at(run, "status"));
	cJSON_Delete(run);
	return buf;
}

/* ------------------------------------------------------------------ tests */

START_TEST(test_worker_token_refused_on_admin_endpoints)
{
	_cleanup_free_ char *id = NULL;
	char path[128], lease[64];
	static const char *const gets[] = {"/v1/runs", "/v1/stats", "/v1/workers",
	                                   "/v1/admin/faults"};

	start_scoped();
	id = tu_lessor_enqueue(L, "{\"workflow\":\"build\"}"); /* the admin token */
	ck_assert_ptr_nonnull(id);
	ck_assert_int_eq(call(TOK_A, "POST", "/v1/runs", "{\"workflow\":\"evil\"}", NULL), 403);
	for (size_t i = 0; i < ELEMENTSOF(gets); i++)
		ck_assert_int_eq(call(TOK_A, "GET", gets[i], NULL, NULL), 403);
	snprintf(path, sizeof(path), "/v1/runs/%s", id);
	ck_assert_int_eq(call(TOK_A, "GET", path, NULL, NULL), 403);
	snprintf(path, sizeof(path), "/v1/runs/%s/log", id);
	ck_assert_int_eq(call(TOK_A, "GET", path, NULL, NULL), 403);
	snprintf(path, sizeof(path), "/v1/runs/%s/cancel", id);
	ck_assert_int_eq(call(TOK_B, "POST", path, "{}", NULL), 403);
	snprintf(path, sizeof(path), "/v1/runs/%s/requeue", id);
	ck_assert_int_eq(call(TOK_B, "POST", path, "{}", NULL), 403);
	/* nothing of that happened */
	ck_assert_int_eq(call(ADMIN, "GET", "/v1/runs?status=pending", NULL, NULL), 200);
	ck_assert_int_eq(tu_lessor_wait_status(L, id, "pending", SEC), 0);
	/* an unknown token is not authenticated at all; the admin does not claim */
	ck_assert_int_eq(call("nope-0123456789abcdef", "GET", "/v1/runs", NULL, NULL), 401);
	ck_assert_int_eq(call(NULL, "POST", "/v1/runs", "{\"workflow\":\"x\"}", NULL), 401);
	ck_assert_int_eq(claim(ADMIN, "c-admin", lease), 403);
	ck_assert_int_eq(call(NULL, "GET", "/healthz", NULL, NULL), 200);
}
END_TEST

START_TEST(test_worker_touches_only_its_runs)
{
	_cleanup_free_ char *id = NULL;
	char lease[64], other[64], st[32];
	cJSON *j = NULL;

	start_scoped();
	id = tu_lessor_enqueue(L, "{\"workflow\":\"build\"}");
	ck_assert_ptr_nonnull(id);
	ck_assert_int_eq(claim(TOK_A, "c-a1", lease), 200);
	ck_assert_str_ne(lease, "");
	/* beta replays alpha's claim id: refused, nothing handed over */
	ck_assert_int_eq(claim(TOK_B, "c-a1", other), 400);
	ck_assert_str_eq(other, "");
	/* beta cancelling alpha's claim releases nothing */
	ck_assert_int_eq(call(TOK_B, "POST", "/v1/claims/c-a1/cancel", "{}", &j), 200);
	ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(j, "released")->valueint, 0);
	cJSON_Delete(j);
	ck_assert_str_eq(run_status(id, st), "running");
	/* beta with alpha's (stolen) lease token: 409, as for a run that does not exist */
	ck_assert_int_eq(renew(TOK_B, id, lease), 409);
	ck_assert_int_eq(log_append(TOK_B, id, lease), 409);
	ck_assert_int_eq(complete(TOK_B, id, lease), 409);
	ck_assert_int_eq(release(TOK_B, id, lease), 409);
	ck_assert_int_eq(renew(TOK_B, "r-999", lease), 409);
	ck_assert_str_eq(run_status(id, st), "running");
	/* alpha itself */
	ck_assert_int_eq(renew(TOK_A, id, lease), 200);
	ck_assert_int_eq(log_append(TOK_A, id, lease), 202);
	ck_assert_int_eq(complete(TOK_A, id, lease), 200);
	ck_assert_int_eq(complete(TOK_A, id, lease), 200); /* the idempotent retry */
	ck_assert_str_eq(run_status(id, st), "succeeded");
}
END_TEST

START_TEST(test_worker_name_is_identity)
{
	_cleanup_free_ char *id = NULL;
	char lease[64], path[128];
	cJSON *j = NULL, *run, *lease_o;
	const cJSON *w;

	start_scoped();
	id = tu_lessor_enqueue(L, "{\"workflow\":\"build\"}");
	ck_assert_int_eq(claim(TOK_A, "c-a1", lease), 200);
	ck_assert_int_eq(call(ADMIN, "GET", "/v1/workers", NULL, &j), 200);
	w = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(j, "workers"), 0);
	ck_assert_ptr_nonnull(w);
	ck_assert_str_eq(str_at(w, "worker_id"), "alpha"); /* not the body's "host-1" */
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "workers")), 1);
	cJSON_Delete(j);
	snprintf(path, sizeof(path), "/v1/runs/%s", id);
	ck_assert_int_eq(call(ADMIN, "GET", path, NULL, &run), 200);
	lease_o = cJSON_GetObjectItemCaseSensitive(run, "lease");
	ck_assert_str_eq(str_at(lease_o, "worker_id"), "alpha");
	cJSON_Delete(run);
}
END_TEST

START_TEST(test_revoke_by_sighup)
{
	_cleanup_free_ char *id1 = NULL, *id2 = NULL;
	char lease_a[64], lease_b[64], none[64];
	usec_t end;
	long st;

	start_scoped();
	id1 = tu_lessor_enqueue(L, "{\"workflow\":\"build\"}");
	id2 = tu_lessor_enqueue(L, "{\"workflow\":\"build\"}");
	ck_assert_int_eq(claim(TOK_A, "c-a1", lease_a), 200);
	ck_assert_int_eq(claim(TOK_B, "c-b1", lease_b), 200);
	ck_assert_str_ne(lease_b, "");
	/* a broken file keeps the old set, and says why */
	ck_assert_int_eq(tu_lessor_set_worker_tokens(L, "alpha " TOK_A "\nalpha " TOK_B "\n"), 0);
	ck_assert_int_eq(tu_lessor_wait_log(L, "keeping the previous tokens", 10 * SEC), 0);
	ck_assert_int_eq(renew(TOK_B, id2, lease_b), 200);
	/* beta removed */
	ck_assert_int_eq(tu_lessor_set_worker_tokens(L, "alpha " TOK_A "\n"), 0);
	end = time_mono() + tu_timeout(10 * SEC);
	while ((st = renew(TOK_B, id2, lease_b)) == 200 && time_mono() < end)
		tu_sleep(20 * USEC_PER_MSEC);
	ck_assert_int_eq(st, 401);
	ck_assert_int_eq(claim(TOK_B, "c-b2", none), 401);
	ck_assert_int_eq(renew(TOK_A, id1, lease_a), 200);
	ck_assert_int_eq(complete(TOK_A, id1, lease_a), 200);
	ck_assert_int_eq(tu_lessor_wait_status(L, id1, "succeeded", SEC), 0);
	/* and back: a new token for beta works at once after the next reload */
	ck_assert_int_eq(tu_lessor_set_worker_tokens(L, "alpha " TOK_A "\nbeta2 " TOK_B "x\n"), 0);
	end = time_mono() + tu_timeout(10 * SEC);
	while ((st = renew(TOK_B "x", id2, lease_b)) == 401 && time_mono() < end)
		tu_sleep(20 * USEC_PER_MSEC);
	ck_assert_int_eq(st, 409); /* authenticated now, but the run is beta's */
}
END_TEST

struct long_poll {
	long status;
	int n_runs;
};

static void *long_poll_beta(void *p)
{
	struct long_poll *lp = p;
	cJSON *j = NULL;

	lp->status = call(TOK_B, "POST", "/v1/claims",
	                  "{\"claim_id\":\"c-b-long\",\"worker_id\":\"h\",\"max_runs\":1,"
	                  "\"lease_ttl_s\":60,\"wait_s\":30}",
	                  &j);
	lp->n_runs = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "runs"));
	cJSON_Delete(j);
	return NULL;
}

/* beta has been seen by the server (its claim looked once, then parks) */
static bool worker_seen(const char *name)
{
	cJSON *j = NULL, *w;
	bool seen = false;

	ck_assert_int_eq(call(ADMIN, "GET", "/v1/workers", NULL, &j), 200);
	cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(j, "workers")) seen =
	    seen || streq(str_at(w, "worker_id"), name);
	cJSON_Delete(j);
	return seen;
}

START_TEST(test_revoke_parked_long_poll)
{
	_cleanup_free_ char *id = NULL;
	struct long_poll lp = {0};
	char lease[64], st[32];
	pthread_t th;
	usec_t end;

	start_scoped();
	ck_assert_int_eq(pthread_create(&th, NULL, long_poll_beta, &lp), 0);
	end = time_mono() + tu_timeout(10 * SEC);
	while (!worker_seen("beta") && time_mono() < end)
		tu_sleep(10 * USEC_PER_MSEC);
	ck_assert(worker_seen("beta"));
	ck_assert_int_eq(tu_lessor_set_worker_tokens(L, "alpha " TOK_A "\n"), 0);
	ck_assert_int_eq(tu_lessor_wait_log(L, "reloaded the tokens", 10 * SEC), 0);
	/* the run wakes beta's parked claim, which must not get it */
	id = tu_lessor_enqueue(L, "{\"workflow\":\"build\"}");
	ck_assert_ptr_nonnull(id);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	ck_assert_int_eq(lp.status, 401);
	ck_assert_int_eq(lp.n_runs, 0);
	ck_assert_str_eq(run_status(id, st), "pending");
	ck_assert_int_eq(claim(TOK_A, "c-a1", lease), 200);
	ck_assert_str_ne(lease, "");
}
END_TEST

START_TEST(test_legacy_token_file)
{
	_cleanup_free_ char *id = NULL;
	char lease[64];

	ck_assert_int_eq(tu_lessor_start(&(struct tu_lessor_opts){.token = ADMIN}, &L), 0);
	ck_assert_int_eq(tu_lessor_wait_log(L, "--token-file is deprecated", 10 * SEC), 0);
	id = tu_lessor_enqueue(L, "{\"workflow\":\"build\"}");
	ck_assert_ptr_nonnull(id);
	ck_assert_int_eq(claim(ADMIN, "c-1", lease), 200); /* one token, both roles */
	ck_assert_int_eq(renew(ADMIN, id, lease), 200);
	ck_assert(worker_seen("host-1")); /* the body's worker_id, as before */
	ck_assert_int_eq(renew(ADMIN, "r-999", lease), 404);
	ck_assert_int_eq(call(TOK_A, "GET", "/v1/runs", NULL, NULL), 401);
}
END_TEST

START_TEST(test_lessee_with_named_token)
{
	_cleanup_free_ char *id = NULL, *conf = NULL, *tf = NULL;
	struct tu_lessee *d = NULL;
	cJSON *run;

	start_scoped();
	ck_assert_int_ge(asprintf(&tf, "%s/alpha.token", dir), 0);
	ck_assert_int_eq(write_file_atomic(tf, TOK_A "\n", strlen(TOK_A) + 1, 0600), 0);
	ck_assert_int_ge(
	    asprintf(&conf, "[api]\ntoken_file = %s\n[workflow.ok]\ncommand = /bin/true\n", tf), 0);
	ck_assert_int_eq(tu_lessee_start(&(struct tu_lessee_opts){.lessor = L, .conf = conf}, &d),
	                 0);
	id = tu_lessor_enqueue(L, "{\"workflow\":\"ok\"}");
	ck_assert_ptr_nonnull(id);
	ck_assert_int_eq(tu_lessor_wait_status(L, id, "succeeded", 20 * SEC), 0);
	run = tu_lessor_get_run(L, id);
	ck_assert_str_eq(
	    str_at(cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(run, "leases"), 0),
	           "worker_id"),
	    "alpha");
	cJSON_Delete(run);
	ck_assert_int_eq(tu_lessee_stop(d), 0);
	tu_lessee_free(d);
}
END_TEST

/* `lessor ARGS...` with extra environment; exit status, stderr in *ret_err. */
static int cli(char **ret_err, const char *env, const char *first, ...)
{
	_cleanup_free_ char *op = NULL, *ep = NULL;
	char **argv = tu_wrap_argv(), **envp = strv_copy(environ);
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
	if (env)
		ck_assert_int_ge(strv_extend(&envp, env), 0);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, op, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	posix_spawn_file_actions_addopen(&fa, 2, ep, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	ck_assert_int_eq(posix_spawnp(&pid, argv[0], &fa, NULL, argv, envp), 0);
	posix_spawn_file_actions_destroy(&fa);
	strv_free(argv);
	strv_free(envp);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	free(*ret_err);
	*ret_err = NULL;
	free(out);
	out = NULL;
	ck_assert_int_ge(read_file_capped(ep, 1 << 20, ret_err, NULL), 0);
	ck_assert_int_ge(read_file_capped(op, 1 << 20, &out, NULL), 0);
	ck_assert(WIFEXITED(status));
	return WEXITSTATUS(status);
}

START_TEST(test_cli_admin_token)
{
	_cleanup_free_ char *af = NULL, *wf = NULL, *env = NULL, *err = NULL;
	const char *url;

	start_scoped();
	url = tu_lessor_url(L);
	ck_assert_int_ge(asprintf(&af, "%s/admin.token", dir), 0);
	ck_assert_int_ge(asprintf(&wf, "%s/alpha.token", dir), 0);
	ck_assert_int_eq(write_file_atomic(af, ADMIN "\n", strlen(ADMIN) + 1, 0600), 0);
	ck_assert_int_eq(write_file_atomic(wf, TOK_A "\n", strlen(TOK_A) + 1, 0600), 0);
	ck_assert_int_eq(cli(&err, NULL, "enqueue", "--url", url, "--admin-token-file", af,
	                     "--workflow", "build", NULL),
	                 0);
	ck_assert_int_eq(cli(&err, NULL, "list", "--url", url, "--admin-token-file", wf, NULL), 1);
	ck_assert_ptr_nonnull(strstr(err, "403"));
	ck_assert_int_ge(asprintf(&env, "LESSOR_ADMIN_TOKEN_FILE=%s", af), 0);
	ck_assert_int_eq(cli(&err, env, "show", "--url", url, "r-1", NULL), 0);
	ck_assert_int_eq(cli(&err, NULL, "stats", "--url", url, NULL), 1);
	ck_assert_ptr_nonnull(strstr(err, "401"));
	ck_assert_int_eq(cli(&err, NULL, "--help", NULL), 0);
	ck_assert_ptr_nonnull(strstr(out, "--admin-token-file"));
	ck_assert_int_eq(cli(&err, NULL, "serve", "--help", NULL), 0);
	ck_assert_ptr_nonnull(strstr(out, "--admin-token-file"));
	ck_assert_ptr_nonnull(strstr(out, "--worker-tokens-file"));
}
END_TEST

START_TEST(test_bad_token_configuration)
{
	_cleanup_free_ char *af = NULL, *wf = NULL, *err = NULL;

	ck_assert_int_ge(asprintf(&af, "%s/admin.token", dir), 0);
	ck_assert_int_ge(asprintf(&wf, "%s/workers", dir), 0);
	ck_assert_int_eq(write_file_atomic(af, ADMIN "\n", strlen(ADMIN) + 1, 0600), 0);
	/* the admin token may not be a worker's too */
	ck_assert_int_eq(write_file_atomic(wf, "alpha " ADMIN "\n", strlen(ADMIN) + 7, 0600), 0);
	ck_assert_int_eq(cli(&err, NULL, "serve", "--listen", "127.0.0.1:0", "--db",
	                     "/nonexistent/x", "--admin-token-file", af, "--worker-tokens-file", wf,
	                     NULL),
	                 78);
	ck_assert_ptr_nonnull(strstr(err, "line 1"));
	ck_assert_int_eq(write_file_atomic(wf, "al/pha " TOK_A "\n", strlen(TOK_A) + 8, 0600), 0);
	ck_assert_int_eq(cli(&err, NULL, "serve", "--listen", "127.0.0.1:0", "--db",
	                     "/nonexistent/x", "--admin-token-file", af, "--worker-tokens-file", wf,
	                     NULL),
	                 78);
	ck_assert_int_eq(cli(&err, NULL, "serve", "--listen", "127.0.0.1:0", "--db",
	                     "/nonexistent/x", "--token-file", af, "--admin-token-file", af, NULL),
	                 78);
	ck_assert_int_eq(write_file_atomic(wf, "alpha " TOK_A "\n", strlen(TOK_A) + 7, 0600), 0);
	ck_assert_int_eq(cli(&err, NULL, "serve", "--listen", "127.0.0.1:0", "--db",
	                     "/nonexistent/x", "--worker-tokens-file", wf, NULL),
	                 78);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("lessor_tokens");
	TCase *t = tcase_create("scoped");

	tcase_add_checked_fixture(t, setup, teardown);
	tcase_set_timeout(t, 60);
	tcase_add_test(t, test_worker_token_refused_on_admin_endpoints);
	tcase_add_test(t, test_worker_touches_only_its_runs);
	tcase_add_test(t, test_worker_name_is_identity);
	tcase_add_test(t, test_revoke_by_sighup);
	tcase_add_test(t, test_revoke_parked_long_poll);
	tcase_add_test(t, test_legacy_token_file);
	tcase_add_test(t, test_lessee_with_named_token);
	tcase_add_test(t, test_cli_admin_token);
	tcase_add_test(t, test_bad_token_configuration);
	suite_add_tcase(s, t);
	return s;
}

int main(void)
{
	return tu_run(suite());
}
