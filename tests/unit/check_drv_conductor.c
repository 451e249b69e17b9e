/* lib/proto/drv_conductor.c driven op by op against the Conductor emulator
 * (tests/conductor/conductor_emu.c, a fresh one per test), the loop stepped
 * with ev_run_once: claims, the long poll, keep-alive and loss, completions
 * and how the server sees them (/emu/), logs, release, restore, auth, faults. */
#include <cJSON.h>
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conductor_proc.h"
#include "conf/conf.h"
#include "ev/ev.h"
#include "lessor_proc.h" /* tu_timeout */
#include "obs/metrics.h"
#include "proto/driver.h"
#include "proto/drv_conductor-int.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"

#define SEC USEC_PER_SEC

static struct tu_conductor *E;
static ev_t *ev;
static metrics_t *M;
static struct conf *CF;
static drv_t *D;
static char *dir;
static const char *worker_id = "w1";

/* ---- fixture ---- */

static void drv_start(const char *api_extra)
{
	_cleanup_free_ char *text = NULL, *path = NULL, *err = NULL;
	struct conf_source src = {0};

	ck_assert_int_ge(asprintf(&text,
	                          "[api]\nurl = %s\nprotocol = conductor\nrequest_timeout = 10s\n%s"
	                          "[worker]\nid = %s\nspool_dir = %s/spool\nrun_dir = %s/run\n"
	                          "lease_ttl = 20s\nlease_refresh = 2s\n"
	                          "[workflow.build]\ncommand = /bin/true\n"
	                          "[workflow.deploy]\ncommand = /bin/true\ntask_type = deploy_t\n",
	                          tu_conductor_url(E), api_extra, worker_id, dir, dir),
	                 0);
	ck_assert_int_ge(asprintf(&path, "%s/lessee.conf", dir), 0);
	ck_assert_int_eq(write_file_atomic(path, text, strlen(text), 0644), 0);
	src.path = path;
	ck_assert_msg(conf_load(&src, &CF, &err) == 0, "%s", err ? err : "?");
	ck_assert_int_eq(drv_new(ev, CF, M, &D), 0);
	ck_assert_str_eq(drv_ops(D)->name, "conductor");
}

static void start_with(const struct tu_conductor_opts *o, const char *api_extra)
{
	dir = tu_tmpdir("drv-conductor");
	ck_assert_ptr_nonnull(dir);
	ck_assert_int_eq(tu_conductor_start(o, &E), 0);
	ck_assert_int_eq(ev_new(&ev, tu_backend()), 0);
	M = metrics_new();
	ck_assert_ptr_nonnull(M);
	drv_start(api_extra);
}

static void setup(void)
{
	start_with(&(struct tu_conductor_opts){.sweep_ms = 20}, "");
}

static void teardown(void)
{
	D = drv_free(D);
	CF = conf_free(CF);
	ev = ev_free(ev);
	M = metrics_free(M);
	if (E && tu_conductor_pid(E) > 0)
		ck_assert_int_eq(tu_conductor_stop(E), 0); /* clean exit: no leak, no crash */
	E = tu_conductor_free(E);
	rm_rf(dir);
	free(dir);
	worker_id = "w1";
}

_printf_(1, 2) static char *fmt(const char *f, ...)
{
	va_list ap;
	char *s;

	va_start(ap, f);
	ck_assert_int_ge(vasprintf(&s, f, ap), 0);
	va_end(ap);
	return s;
}

static const char *jstr(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

static double jnum(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);

	ck_assert_msg(cJSON_IsNumber(v), "no number %s", k);
	return v->valuedouble;
}

/* ---- stepping the loop until an answer came ---- */

static void step_until(const bool *done)
{
	usec_t end = ev_now(ev) + tu_timeout(20 * SEC);

	while (!*done) {
		ck_assert_msg(ev_now(ev) < end, "no answer in time");
		ck_assert_int_ge(ev_run_once(ev, 100 * USEC_PER_MSEC), 0);
	}
}

struct got {
	bool done;
	struct drv_answer a;
};

static void on_answer(const struct drv_answer *a, void *ud)
{
	struct got *g = ud;

	ck_assert(!g->done); /* exactly once */
	g->done = true;
	g->a = *a;
}

struct got_claim {
	bool done;
	struct drv_claim_answer ans;
	struct drv_grant *runs; /* taken from the answer */
	size_t n_runs;
};

static void on_claim(struct drv_claim_answer *ans, void *ud)
{
	struct got_claim *g = ud;

	ck_assert(!g->done);
	g->done = true;
	g->ans = *ans;
	g->n_runs = ans->n_runs;
	g->runs = calloc(ans->n_runs + 1, sizeof(*g->runs));
	ck_assert_ptr_nonnull(g->runs);
	for (size_t i = 0; i < ans->n_runs; i++) {
		g->runs[i] = ans->runs[i]; /* the worker takes what it keeps */
		ans->runs[i] = (struct drv_grant){0};
	}
	g->ans.runs = NULL;
}

static void got_claim_done(struct got_claim *g)
{
	for (size_t i = 0; i < g->n_runs; i++) {
		drv_ops(D)->run_free(g->runs[i].priv);
		g->runs[i].priv = NULL;
		drv_grant_done(&g->runs[i]);
	}
	free(g->runs);
	*g = (struct got_claim){0};
}

static void claim_wf(const char *workflow, unsigned max, usec_t wait, struct got_claim *g)
{
	char wf[64];
	char *const wfs[] = {wf, NULL};
	char *const tags[] = {NULL};
	struct drv_claim c = {.max_runs = max,
	                      .workflows = wfs,
	                      .tags = tags,
	                      .lease_ttl_s = 20,
	                      .wait = wait,
	                      .timeout = wait + 10 * SEC,
	                      .max_input = 1 << 20};

	snprintf(wf, sizeof(wf), "%s", workflow);
	*g = (struct got_claim){0};
	ck_assert_int_eq(drv_ops(D)->claim(D, &c, on_claim, g, NULL), 0);
	ck_assert(!g->done); /* never from inside the call */
	step_until(&g->done);
}

static void claim(unsigned max, usec_t wait, struct got_claim *g)
{
	claim_wf("build", max, wait, g);
}

/* One task of type "build", claimed: its grant is g->runs[0]. */
static char *claim_one(const char *create_extra, struct got_claim *g)
{
	_cleanup_free_ char *body = fmt("{\"taskType\":\"build\",\"inputData\":{\"n\":1}%s}",
	                                create_extra ? create_extra : "");
	char *id = tu_conductor_create(E, body);

	ck_assert_ptr_nonnull(id);
	claim(1, SEC, g);
	ck_assert_int_eq(g->ans.a.verdict, DRV_OK);
	ck_assert_uint_eq(g->n_runs, 1);
	ck_assert_str_eq(g->runs[0].id, id);
	ck_assert_ptr_nonnull(g->runs[0].priv);
	return id;
}

static void renew(drv_run_t *run, struct got *g)
{
	*g = (struct got){0};
	ck_assert_int_eq(drv_ops(D)->renew(D, run, 20, 5 * SEC, false, on_answer, g, NULL), 0);
	ck_assert(!g->done);
	step_until(&g->done);
}

static void complete(drv_run_t *run, const struct drv_outcome *o, struct got *g)
{
	_cleanup_free_ char *body = NULL;

	ck_assert_int_eq(drv_ops(D)->complete_body(D, run, o, &body), 0);
	*g = (struct got){0};
	ck_assert_int_eq(drv_ops(D)->complete(D, run, body, on_answer, g, NULL), 0);
	step_until(&g->done);
}

static void log_append(drv_run_t *run, uint64_t off, const char *data, struct got *g)
{
	*g = (struct got){0};
	ck_assert_int_eq(
	    drv_ops(D)->log_append(D, run, off, data, strlen(data), 5 * SEC, on_answer, g, NULL),
	    0);
	ck_assert(!g->done);
	step_until(&g->done);
}

static void emu_post(const char *path, const char *body)
{
	long st = 0;
	cJSON *j = tu_conductor_json(E, "POST", path, body, &st);

	ck_assert_msg(st == 200 || st == 204, "POST %s: %ld", path, st);
	cJSON_Delete(j);
}

static double emu_stat(const char *name)
{
	long st = 0;
	cJSON *j = tu_conductor_json(E, "GET", "/emu/stats", NULL, &st);
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, name);
	double n = cJSON_IsNumber(v) ? v->valuedouble : 0;

	ck_assert_int_eq(st, 200);
	cJSON_Delete(j);
	return n;
}

/* Long polls as another worker until it gets a task (the count, 0 or 1). */
static int poll_as(const char *worker)
{
	_cleanup_free_ char *path =
	    fmt("/api/tasks/poll/batch/build?workerid=%s&count=1&timeout=5000", worker);
	int n = 0;

	for (int i = 0; i < 3 && n == 0; i++) {
		long st = 0;
		cJSON *a = tu_conductor_json(E, "GET", path, NULL, &st);

		ck_assert_int_eq(st, 200);
		n = cJSON_GetArraySize(a);
		cJSON_Delete(a);
	}
	return n;
}

static bool env_has(char **env, const char *want)
{
	for (; env && *env; env++)
		if (streq(*env, want))
			return true;
	return false;
}

/* ---- claims ---- */

/* Grants of the "build" tasks test_claim_tasks made, as the server sees them. */
static void check_build_grants(struct got_claim *g)
{
	for (size_t i = 0; i < g->n_runs; i++) {
		struct drv_grant *r = &g->runs[i];
		cJSON *t = tu_conductor_task(E, r->id);
		_cleanup_free_ char *wf =
		    fmt("LESSEE_CONDUCTOR_WORKFLOW_ID=%s", jstr(t, "workflowInstanceId"));
		cJSON *in = cJSON_Parse(r->input);

		ck_assert_str_eq(r->workflow, "build");
		ck_assert_uint_eq(r->attempt, 1);
		ck_assert_uint_eq(r->ttl_s, 30);
		ck_assert_ptr_null(r->invalid);
		ck_assert_str_eq(r->lease_key, r->id);
		ck_assert_int_eq(jnum(in, "n"), 7);
		ck_assert(env_has(r->env, wf));
		ck_assert(env_has(r->env, "LESSEE_CONDUCTOR_TASK_TYPE=build"));
		ck_assert_str_eq(jstr(t, "status"), "IN_PROGRESS");
		ck_assert_str_eq(jstr(t, "workerId"), "w1");
		cJSON_Delete(in);
		cJSON_Delete(t);
	}
	got_claim_done(g);
}

START_TEST(test_claim_tasks)
{
	_cleanup_free_ char *first =
	    tu_conductor_create(E, "{\"taskType\":\"build\",\"inputData\":{\"n\":7},"
	                           "\"responseTimeoutSeconds\":30,\"count\":3}");
	_cleanup_free_ char *other = tu_conductor_create(E, "{\"taskType\":\"deploy_t\"}");
	struct got_claim g;

	ck_assert_ptr_nonnull(first);
	ck_assert_ptr_nonnull(other);
	/* a long poll waits for one task (a poll for five would hold the three
	 * until its timeout), then, tasks coming, a claim pops the rest at once */
	claim(5, SEC, &g);
	ck_assert_int_eq(g.ans.a.verdict, DRV_OK);
	ck_assert_uint_eq(g.n_runs, 1);
	ck_assert(!g.ans.no_wait);
	check_build_grants(&g);
	claim(5, SEC, &g);
	ck_assert_int_eq(g.ans.a.verdict, DRV_OK);
	ck_assert_uint_eq(g.n_runs, 2); /* the build tasks only */
	ck_assert(g.ans.no_wait);
	check_build_grants(&g);
	/* fewer than asked: the next claim waits for one again */
	claim(5, 0, &g);
	ck_assert_uint_eq(g.n_runs, 0);
	got_claim_done(&g);

	/* the other workflow polls its own task type */
	claim_wf("deploy", 5, 0, &g);
	ck_assert_uint_eq(g.n_runs, 1);
	ck_assert_str_eq(g.runs[0].id, other);
	ck_assert_str_eq(g.runs[0].workflow, "deploy");
	ck_assert_str_eq(g.runs[0].input, "{}");
	ck_assert_uint_eq(g.runs[0].ttl_s, 3600); /* the emulator's default, TaskDef's */
	got_claim_done(&g);
}
END_TEST

START_TEST(test_claim_count_and_retry_attempt)
{
	_cleanup_free_ char *id =
	    tu_conductor_create(E, "{\"taskType\":\"build\",\"count\":4,\"retryDelaySeconds\":0,"
	                           "\"responseTimeoutSeconds\":7200}");
	struct got_claim g;
	struct got c;
	_cleanup_free_ char *failed = NULL;

	claim(2, 0, &g); /* count = free slots: no more than asked */
	ck_assert_msg(g.ans.a.verdict == DRV_OK, "%s", g.ans.a.detail);
	ck_assert_uint_eq(g.n_runs, 2);
	ck_assert_uint_eq(g.runs[0].ttl_s, 3600); /* capped as native leases are */
	failed = strdup(g.runs[0].id);
	complete(g.runs[0].priv,
	         &(struct drv_outcome){.status = DRV_FAILED,
	                               .reason = DRV_REASON_EXIT,
	                               .has_exit_code = true,
	                               .exit_code = 1},
	         &c);
	ck_assert_int_eq(c.a.verdict, DRV_OK);
	got_claim_done(&g);
	claim(5, 0, &g);
	ck_assert_uint_eq(g.n_runs, 3); /* two left, and the retry of the failed one */
	for (size_t i = 0; i < g.n_runs; i++) {
		cJSON *t = tu_conductor_task(E, g.runs[i].id);
		const char *from = jstr(t, "retriedTaskId");

		ck_assert_uint_eq(g.runs[i].attempt, from && streq(from, failed) ? 2 : 1);
		cJSON_Delete(t);
	}
	got_claim_done(&g);
}
END_TEST

START_TEST(test_claim_empty_long_poll)
{
	struct got_claim g;

	claim(4, SEC, &g);
	ck_assert_int_eq(g.ans.a.verdict, DRV_OK);
	ck_assert_uint_eq(g.n_runs, 0);
	ck_assert_uint_ge(g.ans.a.elapsed, 900 * USEC_PER_MSEC); /* it waited on the server */
	got_claim_done(&g);
	/* the worker's 20 s long poll is asked as the server's most, 5 s: not a 400 */
	claim(4, 20 * SEC, &g);
	ck_assert_int_eq(g.ans.a.verdict, DRV_OK);
	ck_assert_uint_lt(g.ans.a.elapsed, 10 * SEC);
	got_claim_done(&g);
}
END_TEST

START_TEST(test_claim_5xx_and_reset_retry)
{
	struct got_claim g;

	emu_post("/emu/faults", "{\"path\":\"/api/tasks/poll\",\"count\":1,\"status\":503}");
	claim(1, 0, &g);
	ck_assert_int_eq(g.ans.a.verdict, DRV_RETRY);
	ck_assert_msg(strstr(g.ans.a.detail, "503"), "%s", g.ans.a.detail);
	got_claim_done(&g);
	/* libcurl sends again once on a reused connection that was closed */
	emu_post("/emu/faults", "{\"path\":\"/api/tasks/poll\",\"count\":2,\"reset\":true}");
	claim(1, 0, &g);
	ck_assert_int_eq(g.ans.a.verdict, DRV_RETRY);
	ck_assert_int_ne(g.ans.a.error, 0);
	got_claim_done(&g);
	{
		struct tu_http_answer a = {0};

		ck_assert_int_eq(
		    tu_conductor_http(E, "DELETE", "/emu/faults", NULL, NULL, false, &a), 0);
		tu_http_answer_done(&a);
	}
	claim(1, 0, &g);
	ck_assert_int_eq(g.ans.a.verdict, DRV_OK);
	got_claim_done(&g);
}
END_TEST

START_TEST(test_claim_invalid_input)
{
	_cleanup_free_ char *id = NULL;
	_cleanup_free_ char *big = malloc(3 << 19);
	_cleanup_free_ char *body = NULL;
	struct got_claim g;

	memset(big, 'x', (3 << 19) - 1); /* 1.5 MiB: over max_input, read to say so */
	big[(3 << 19) - 1] = '\0';
	body = fmt("{\"taskType\":\"build\",\"inputData\":{\"big\":\"%s\"}}", big);
	id = tu_conductor_create(E, body);
	ck_assert_ptr_nonnull(id);
	claim(1, 0, &g); /* max_input 1 MiB */
	ck_assert_msg(g.ans.a.verdict == DRV_OK, "%s", g.ans.a.detail);
	ck_assert_uint_eq(g.n_runs, 1);
	ck_assert_str_eq(g.runs[0].id, id);
	ck_assert_ptr_nonnull(g.runs[0].invalid);
	ck_assert_msg(strstr(g.runs[0].invalid, "max_input_bytes"), "%s", g.runs[0].invalid);
	ck_assert(g.runs[0].usable_for_reject);
	ck_assert_ptr_nonnull(g.runs[0].priv);
	got_claim_done(&g);
}
END_TEST

/* ---- keep-alive ---- */

START_TEST(test_renew_ok)
{
	struct got_claim g;
	struct got r;
	_cleanup_free_ char *id = claim_one(",\"responseTimeoutSeconds\":7", &g);
	cJSON *t;

	renew(g.runs[0].priv, &r);
	ck_assert_int_eq(r.a.verdict, DRV_OK);
	ck_assert_uint_eq(r.a.ttl_s, 7);
	t = tu_conductor_task(E, id);
	ck_assert_int_eq(jnum(t, "extendLeases"), 1);
	ck_assert_str_eq(jstr(t, "status"), "IN_PROGRESS");
	cJSON_Delete(t);
	got_claim_done(&g);
}
END_TEST

/* A worker id may be 128 bytes: one over 40 is still ours on the server (the
 * keep-alive's read compared the server's workerId cut to 40 characters for
 * the log, so every run was lost at its first keep-alive; found by
 * fuzz/conductor_answers). */
START_TEST(test_renew_long_worker_id)
{
	static const char long_id[] = "k8s-node-0123456789abcdef0123456789abcdef0123456789abcdef"
	                              "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456";
	struct got_claim g;
	struct got r;
	_cleanup_free_ char *id = NULL;
	cJSON *t;

	ck_assert_uint_eq(strlen(long_id), 128);
	D = drv_free(D);
	CF = conf_free(CF);
	worker_id = long_id;
	drv_start("");
	id = claim_one(NULL, &g);
	renew(g.runs[0].priv, &r);
	ck_assert_msg(r.a.verdict == DRV_OK, "renew: %d: %s", r.a.verdict, r.a.detail);
	t = tu_conductor_task(E, id);
	ck_assert_str_eq(jstr(t, "workerId"), long_id);
	ck_assert_int_eq(jnum(t, "extendLeases"), 1);
	cJSON_Delete(t);
	got_claim_done(&g);
}
END_TEST

/* The keep-alive's read takes the lease's ttl from responseTimeoutSeconds: a
 * number below 1 (no Conductor sends one, but the bytes are the server's) left
 * a ttl of 0, a lease that ended as it was renewed (found by
 * fuzz/conductor_answers); it is ignored as one that is not a number. */
START_TEST(test_task_read_ttl)
{
	static const struct {
		const char *rts;
		unsigned ttl;
	} cases[] = {{"45", 45}, {"1", 1}, {"1e9", 3600}, {"0", 20}, {"-5", 20},
	             {"0.5", 20}, {"1e-300", 20}, {"\"45\"", 20}};
	char w1[] = "w1", buf[160];
	struct conductor n = {.worker_id = w1};

	for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
		_cleanup_free_ char *body =
		    fmt("{\"status\":\"IN_PROGRESS\",\"workerId\":\"w1\","
		        "\"responseTimeoutSeconds\":%s}",
		        cases[i].rts);
		unsigned ttl = 20;

		ck_assert_ptr_null(drv_conductor_task_not_ours(&n, "t1", body, strlen(body), &ttl,
		                                               buf, sizeof(buf)));
		ck_assert_msg(ttl == cases[i].ttl, "responseTimeoutSeconds %s: ttl %u, not %u",
		              cases[i].rts, ttl, cases[i].ttl);
	}
}
END_TEST

START_TEST(test_renew_cancelled_is_lost)
{
	struct got_claim g;
	struct got r;
	_cleanup_free_ char *id = claim_one(NULL, &g);
	_cleanup_free_ char *path = fmt("/emu/tasks/%s/cancel", id);
	cJSON *t;

	emu_post(path, "{}");
	renew(g.runs[0].priv, &r);
	ck_assert_int_eq(r.a.verdict, DRV_LOST);
	ck_assert_msg(strstr(r.a.detail, "is CANCELED on the server"), "%s", r.a.detail);
	t = tu_conductor_task(E, id);
	ck_assert_int_eq(jnum(t, "extendLeases"), 0); /* nothing more said of it */
	cJSON_Delete(t);
	got_claim_done(&g);
}
END_TEST

START_TEST(test_renew_timed_out_and_repolled_are_lost)
{
	struct got_claim g, g2;
	struct got r;
	_cleanup_free_ char *id = claim_one(",\"responseTimeoutSeconds\":1,\"retryCount\":0", &g);
	cJSON *t = tu_conductor_wait(E, id, "TIMED_OUT", 10 * SEC);

	ck_assert_ptr_nonnull(t);
	cJSON_Delete(t);
	renew(g.runs[0].priv, &r);
	ck_assert_int_eq(r.a.verdict, DRV_LOST);
	ck_assert_msg(strstr(r.a.detail, "TIMED_OUT"), "%s", r.a.detail);
	got_claim_done(&g);

	/* given back and polled by another worker: not ours any more */
	free(id);
	id = claim_one(NULL, &g);
	r = (struct got){0};
	ck_assert_int_eq(
	    drv_ops(D)->release(D, g.runs[0].priv, DRV_RELEASE_DRAINING, 0, on_answer, &r, NULL),
	    0);
	step_until(&r.done);
	ck_assert_int_eq(r.a.verdict, DRV_OK);
	ck_assert_int_eq(poll_as("w2"), 1);
	renew(g.runs[0].priv, &r);
	ck_assert_int_eq(r.a.verdict, DRV_LOST);
	ck_assert_msg(strstr(r.a.detail, "for worker w2"), "%s", r.a.detail);
	got_claim_done(&g);
	(void)g2;
}
END_TEST

START_TEST(test_release_requeues)
{
	struct got_claim g;
	struct got r = {0};
	_cleanup_free_ char *id = claim_one(NULL, &g);
	cJSON *t;

	ck_assert(drv_has(D, DRV_CAP_RELEASE));
	ck_assert_int_eq(
	    drv_ops(D)->release(D, g.runs[0].priv, DRV_RELEASE_SHUTDOWN, 0, on_answer, &r, NULL),
	    0);
	step_until(&r.done);
	ck_assert_int_eq(r.a.verdict, DRV_OK);
	t = tu_conductor_task(E, id);
	ck_assert_str_eq(jstr(t, "status"), "SCHEDULED");
	ck_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(t, "queued")));
	cJSON_Delete(t);
	ck_assert_int_eq(jnum(t = tu_conductor_task(E, id), "callbackAfterSeconds"), 6);
	cJSON_Delete(t);
	got_claim_done(&g);
	/* not at once: a long poll we just dropped (5 s at most) must not take it */
	claim(1, 0, &g);
	ck_assert_uint_eq(g.n_runs, 0);
	got_claim_done(&g);
	for (int i = 0; i < 3 && g.n_runs == 0; i++) {
		got_claim_done(&g);
		claim(1, 5 * SEC, &g); /* then it is due again, the same task */
	}
	ck_assert_uint_eq(g.n_runs, 1);
	ck_assert_str_eq(g.runs[0].id, id);
	got_claim_done(&g);
}
END_TEST

/* ---- completion ---- */

START_TEST(test_complete_succeeded)
{
	struct got_claim g;
	struct got c;
	_cleanup_free_ char *id = claim_one(NULL, &g);
	cJSON *t, *out;

	complete(g.runs[0].priv,
	         &(struct drv_outcome){.status = DRV_SUCCEEDED,
	                               .reason = DRV_REASON_EXIT,
	                               .has_exit_code = true,
	                               .output = "{\"answer\":42,\"list\":[1,2]}"},
	         &c);
	ck_assert_int_eq(c.a.verdict, DRV_OK);
	t = tu_conductor_task(E, id);
	ck_assert_str_eq(jstr(t, "status"), "COMPLETED");
	ck_assert_str_eq(jstr(t, "workerId"), "w1");
	out = cJSON_GetObjectItemCaseSensitive(t, "outputData");
	ck_assert_int_eq(jnum(out, "answer"), 42);
	ck_assert_str_eq(jstr(t, "workflowStatus"), "COMPLETED");
	cJSON_Delete(t);
	got_claim_done(&g);

	/* a result that is not an object: under "result" */
	free(id);
	id = claim_one(NULL, &g);
	complete(g.runs[0].priv, &(struct drv_outcome){.status = DRV_SUCCEEDED, .output = "[1,2]"},
	         &c);
	t = tu_conductor_task(E, id);
	out = cJSON_GetObjectItemCaseSensitive(t, "outputData");
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(out, "result")), 2);
	cJSON_Delete(t);
	got_claim_done(&g);
}
END_TEST

START_TEST(test_complete_failed_and_terminal)
{
	struct got_claim g;
	struct got c;
	_cleanup_free_ char *id = claim_one(",\"retryDelaySeconds\":60", &g);
	char long_error[2000];
	cJSON *t, *out;

	memset(long_error, 'e', sizeof(long_error) - 1);
	long_error[sizeof(long_error) - 1] = '\0';
	complete(g.runs[0].priv,
	         &(struct drv_outcome){.status = DRV_FAILED,
	                               .reason = DRV_REASON_EXIT,
	                               .has_exit_code = true,
	                               .exit_code = 3,
	                               .error = long_error},
	         &c);
	ck_assert_int_eq(c.a.verdict, DRV_OK);
	t = tu_conductor_task(E, id);
	ck_assert_str_eq(jstr(t, "status"), "FAILED");
	ck_assert(startswith(jstr(t, "reasonForIncompletion"), "eee"));
	ck_assert_uint_eq(strlen(jstr(t, "reasonForIncompletion")), 500); /* capped as the server */
	out = cJSON_GetObjectItemCaseSensitive(t, "outputData");
	ck_assert_int_eq(jnum(out, "exitCode"), 3);
	ck_assert_str_eq(jstr(t, "workflowStatus"), "RUNNING"); /* Conductor retries it */
	cJSON_Delete(t);
	got_claim_done(&g);

	free(id);
	id = claim_one(NULL, &g);
	complete(g.runs[0].priv,
	         &(struct drv_outcome){.status = DRV_FAILED,
	                               .reason = DRV_REASON_EXIT,
	                               .has_exit_code = true,
	                               .exit_code = 4,
	                               .terminal = true},
	         &c);
	t = tu_conductor_task(E, id);
	ck_assert_str_eq(jstr(t, "status"), "FAILED_WITH_TERMINAL_ERROR");
	ck_assert_str_eq(jstr(t, "reasonForIncompletion"), "exit code 4 (terminal)");
	ck_assert_str_eq(jstr(t, "workflowStatus"), "FAILED"); /* no retry */
	cJSON_Delete(t);
	got_claim_done(&g);

	free(id);
	id = claim_one(NULL, &g);
	complete(g.runs[0].priv,
	         &(struct drv_outcome){.status = DRV_FAILED,
	                               .reason = DRV_REASON_CRASH,
	                               .signal = "SIGSEGV",
	                               .retryable = true},
	         &c);
	t = tu_conductor_task(E, id);
	ck_assert_str_eq(jstr(t, "status"), "FAILED");
	ck_assert_str_eq(jstr(t, "reasonForIncompletion"), "crashed: SIGSEGV");
	cJSON_Delete(t);
	got_claim_done(&g);
}
END_TEST

START_TEST(test_restore_and_fence)
{
	struct got_claim g;
	struct got c;
	_cleanup_free_ char *id = claim_one(NULL, &g), *body = NULL, *path = NULL;
	drv_run_t *run = NULL;
	cJSON *t;

	ck_assert_int_eq(drv_ops(D)->complete_body(
	                     D, g.runs[0].priv,
	                     &(struct drv_outcome){.status = DRV_SUCCEEDED, .output = "{\"k\":1}"},
	                     &body),
	                 0);
	got_claim_done(&g);
	/* a restart: the spooled body is all there is */
	ck_assert_int_eq(drv_ops(D)->restore(D, id, body, &run), 0);
	ck_assert_str_eq(drv_ops(D)->run_lease_key(run), id);
	c = (struct got){0};
	ck_assert_int_eq(drv_ops(D)->complete(D, run, body, on_answer, &c, NULL), 0);
	step_until(&c.done);
	ck_assert_int_eq(c.a.verdict, DRV_OK);
	t = tu_conductor_task(E, id);
	ck_assert_str_eq(jstr(t, "status"), "COMPLETED");
	cJSON_Delete(t);
	drv_ops(D)->run_free(run);
	run = NULL;

	/* a body for another task, or none at all, is refused */
	ck_assert_int_eq(drv_ops(D)->restore(D, "other-id", body, &run), -EBADMSG);
	ck_assert_int_eq(drv_ops(D)->restore(D, id, "not json", &run), -EBADMSG);

	/* a task the server does not know: lost, not retried forever */
	free(body);
	t = tu_conductor_task(E, id);
	body = fmt("{\"taskId\":\"nope\",\"workflowInstanceId\":\"%s\",\"status\":\"COMPLETED\"}",
	           jstr(t, "workflowInstanceId"));
	cJSON_Delete(t);
	ck_assert_int_eq(drv_ops(D)->restore(D, "nope", body, &run), 0);
	c = (struct got){0};
	ck_assert_int_eq(drv_ops(D)->complete(D, run, body, on_answer, &c, NULL), 0);
	step_until(&c.done);
	ck_assert_int_eq(c.a.verdict, DRV_LOST);
	drv_ops(D)->run_free(run);
	(void)path;
}
END_TEST

/* ---- logs ---- */

static const cJSON *emu_logs(const char *id, cJSON **keep)
{
	*keep = tu_conductor_task(E, id);
	return cJSON_GetObjectItemCaseSensitive(*keep, "logs");
}

START_TEST(test_logs_batched)
{
	struct got_claim g;
	struct got l, c;
	_cleanup_free_ char *id = claim_one(NULL, &g);
	drv_run_t *run = g.runs[0].priv;
	const cJSON *logs;
	cJSON *t;
	_cleanup_free_ char *big = malloc(200 * 1024 + 1);
	size_t total;

	log_append(run, 0, "one\ntwo\nthr", &l); /* complete lines go, the rest waits */
	ck_assert_int_eq(l.a.verdict, DRV_OK);
	ck_assert_uint_eq(l.a.length, 11);
	logs = emu_logs(id, &t);
	ck_assert_int_eq(cJSON_GetArraySize(logs), 1);
	ck_assert_str_eq(jstr(cJSON_GetArrayItem(logs, 0), "log"), "one\ntwo");
	cJSON_Delete(t);

	log_append(run, 11, "ee", &l); /* still no newline: answered, nothing sent */
	ck_assert_int_eq(l.a.verdict, DRV_OK);
	ck_assert_uint_eq(l.a.length, 13);
	ck_assert_int_eq(jnum(t = tu_conductor_task(E, id), "logPosts"), 1);
	cJSON_Delete(t);

	log_append(run, 13, "\nfour\n", &l);
	ck_assert_uint_eq(l.a.length, 19);
	logs = emu_logs(id, &t);
	ck_assert_int_eq(cJSON_GetArraySize(logs), 2);
	ck_assert_str_eq(jstr(cJSON_GetArrayItem(logs, 1), "log"), "three\nfour");
	cJSON_Delete(t);

	log_append(run, 13, "\nfour\n", &l); /* resent: known already */
	ck_assert_uint_eq(l.a.length, 19);
	ck_assert_int_eq(jnum(t = tu_conductor_task(E, id), "logPosts"), 2);
	cJSON_Delete(t);

	/* 200 KiB of 100-byte lines: requests of at most 64 KiB, lines whole */
	for (size_t i = 0; i < 2048; i++) {
		memset(big + i * 100, 'a' + (int)(i % 26), 99);
		big[i * 100 + 99] = '\n';
	}
	big[204800] = '\0';
	log_append(run, 19, big, &l);
	ck_assert_int_eq(l.a.verdict, DRV_OK);
	ck_assert_uint_eq(l.a.length, 19 + 204800);
	logs = emu_logs(id, &t);
	ck_assert_int_eq(cJSON_GetArraySize(logs), 2 + 4); /* 655 + 655 + 655 + 83 lines */
	total = 0;
	for (int i = 2; i < cJSON_GetArraySize(logs); i++) {
		const char *s = jstr(cJSON_GetArrayItem(logs, i), "log");

		ck_assert_uint_le(strlen(s), 64 * 1024);
		ck_assert_uint_eq((strlen(s) + 1) % 100, 0);
		total += strlen(s) + 1;
	}
	ck_assert_uint_eq(total, 204800);
	cJSON_Delete(t);

	/* a partial last line rides in the result */
	log_append(run, 19 + 204800, "last words", &l);
	complete(run, &(struct drv_outcome){.status = DRV_SUCCEEDED}, &c);
	logs = emu_logs(id, &t);
	ck_assert_str_eq(jstr(cJSON_GetArrayItem(logs, cJSON_GetArraySize(logs) - 1), "log"),
	                 "last words");
	cJSON_Delete(t);
	got_claim_done(&g);
}
END_TEST

START_TEST(test_log_retry_keeps_lines)
{
	struct got_claim g;
	struct got l;
	_cleanup_free_ char *id = claim_one(NULL, &g);
	drv_run_t *run = g.runs[0].priv;
	const cJSON *logs;
	cJSON *t;

	emu_post("/emu/faults", "{\"path\":\"/api/tasks/\",\"count\":1,\"status\":503}");
	log_append(run, 0, "a\nb\n", &l);
	ck_assert_int_eq(l.a.verdict, DRV_RETRY);
	log_append(run, 0, "a\nb\n", &l); /* the worker tries again: sent once */
	ck_assert_int_eq(l.a.verdict, DRV_OK);
	ck_assert_uint_eq(l.a.length, 4);
	logs = emu_logs(id, &t);
	ck_assert_int_eq(cJSON_GetArraySize(logs), 1);
	ck_assert_str_eq(jstr(cJSON_GetArrayItem(logs, 0), "log"), "a\nb");
	cJSON_Delete(t);
	got_claim_done(&g);
}
END_TEST

/* ---- auth ---- */

static void auth_setup(void)
{
	start_with(
	    &(struct tu_conductor_opts){.sweep_ms = 20, .key_id = "key-1", .key_secret = "s3cret"},
	    "");
}

static void auth_conf(const char *secret)
{
	_cleanup_free_ char *sp = fmt("%s/secret", dir), *extra = NULL;

	ck_assert_int_eq(write_file_atomic(sp, secret, strlen(secret), 0600), 0);
	extra = fmt("key_id = key-1\nkey_secret_file = %s\n", sp);
	D = drv_free(D);
	CF = conf_free(CF);
	drv_start(extra);
}

START_TEST(test_auth_token_and_401)
{
	struct got_claim g;
	_cleanup_free_ char *id = NULL;

	/* without a key the emulator refuses us */
	claim(1, 0, &g);
	ck_assert_int_eq(g.ans.a.verdict, DRV_DENIED);
	got_claim_done(&g);

	auth_conf("s3cret\n");
	id = tu_conductor_create(E, "{\"taskType\":\"build\"}");
	claim(1, 0, &g); /* a token first, then the poll */
	ck_assert_int_eq(g.ans.a.verdict, DRV_OK);
	ck_assert_uint_eq(g.n_runs, 1);
	ck_assert_int_eq(emu_stat("token"), 1);
	got_claim_done(&g);
	claim(1, 0, &g); /* the same token */
	ck_assert_int_eq(emu_stat("token"), 1);
	got_claim_done(&g);

	/* a 401: a new token, the request again, once */
	emu_post("/emu/faults", "{\"path\":\"/api/tasks/poll\",\"count\":1,\"status\":401}");
	claim(1, 0, &g);
	ck_assert_int_eq(g.ans.a.verdict, DRV_OK);
	ck_assert_int_eq(emu_stat("token"), 2);
	got_claim_done(&g);
	/* a 403 that names no token problem is a refusal: no new token */
	emu_post("/emu/faults", "{\"path\":\"/api/tasks/poll\",\"count\":1,\"status\":403}");
	claim(1, 0, &g);
	ck_assert_int_eq(g.ans.a.verdict, DRV_DENIED);
	ck_assert_int_eq(emu_stat("token"), 2);
	got_claim_done(&g);
	emu_post("/emu/faults", "{\"path\":\"/api/tasks/poll\",\"count\":2,\"status\":401}");
	claim(1, 0, &g);
	ck_assert_int_eq(g.ans.a.verdict, DRV_DENIED);
	ck_assert_int_eq(emu_stat("token"), 3);
	got_claim_done(&g);
}
END_TEST

/* Two operations before the first token: both ask for one, the last wins,
 * nothing leaks (the sanitizer builds would say). */
START_TEST(test_auth_two_at_once)
{
	struct got_claim a = {0}, b = {0};
	char wa[] = "build", wb[] = "deploy";
	char *const wfa[] = {wa, NULL}, *const wfb[] = {wb, NULL};
	char *const tags[] = {NULL};
	struct drv_claim ca = {.max_runs = 1,
	                       .workflows = wfa,
	                       .tags = tags,
	                       .timeout = 10 * SEC,
	                       .max_input = 1 << 20};
	struct drv_claim cb = ca;

	cb.workflows = wfb;
	auth_conf("s3cret\n");
	ck_assert_int_eq(drv_ops(D)->claim(D, &ca, on_claim, &a, NULL), 0);
	ck_assert_int_eq(drv_ops(D)->claim(D, &cb, on_claim, &b, NULL), 0);
	step_until(&a.done);
	step_until(&b.done);
	ck_assert_int_eq(a.ans.a.verdict, DRV_OK);
	ck_assert_int_eq(b.ans.a.verdict, DRV_OK);
	ck_assert_int_eq(emu_stat("token"), 2);
	got_claim_done(&a);
	got_claim_done(&b);
}
END_TEST

START_TEST(test_auth_refused_secret)
{
	struct got_claim g;

	auth_conf("wrong\n");
	claim(1, 0, &g);
	ck_assert_int_eq(g.ans.a.verdict, DRV_DENIED);
	ck_assert_msg(strstr(g.ans.a.detail, "/api/token"), "%s", g.ans.a.detail);
	got_claim_done(&g);
}
END_TEST

/* ---- cancel ---- */

START_TEST(test_cancel_in_flight)
{
	struct got_claim g = {0};
	char wf[] = "build";
	char *const wfs[] = {wf, NULL};
	char *const tags[] = {NULL};
	struct drv_claim c = {.max_runs = 1,
	                      .workflows = wfs,
	                      .tags = tags,
	                      .wait = 5 * SEC,
	                      .timeout = 10 * SEC,
	                      .max_input = 1 << 20};
	drv_req_t *rq = NULL;

	ck_assert_int_eq(drv_ops(D)->claim(D, &c, on_claim, &g, &rq), 0);
	ck_assert_ptr_nonnull(rq);
	ck_assert_int_ge(ev_run_once(ev, 50 * USEC_PER_MSEC), 0);
	drv_cancel(rq); /* no callback, nothing leaked */
	ck_assert_int_ge(ev_run_once(ev, 50 * USEC_PER_MSEC), 0);
	ck_assert(!g.done);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("drv_conductor");
	TCase *tc = tcase_create("ops");
	TCase *ta = tcase_create("auth");

	tcase_set_timeout(tc, 60);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_claim_tasks);
	tcase_add_test(tc, test_claim_count_and_retry_attempt);
	tcase_add_test(tc, test_claim_empty_long_poll);
	tcase_add_test(tc, test_claim_5xx_and_reset_retry);
	tcase_add_test(tc, test_claim_invalid_input);
	tcase_add_test(tc, test_renew_ok);
	tcase_add_test(tc, test_renew_long_worker_id);
	tcase_add_test(tc, test_task_read_ttl);
	tcase_add_test(tc, test_renew_cancelled_is_lost);
	tcase_add_test(tc, test_renew_timed_out_and_repolled_are_lost);
	tcase_add_test(tc, test_release_requeues);
	tcase_add_test(tc, test_complete_succeeded);
	tcase_add_test(tc, test_complete_failed_and_terminal);
	tcase_add_test(tc, test_restore_and_fence);
	tcase_add_test(tc, test_logs_batched);
	tcase_add_test(tc, test_log_retry_keeps_lines);
	tcase_add_test(tc, test_cancel_in_flight);
	suite_add_tcase(s, tc);
	tcase_set_timeout(ta, 60);
	tcase_add_checked_fixture(ta, auth_setup, teardown);
	tcase_add_test(ta, test_auth_token_and_401);
	tcase_add_test(ta, test_auth_refused_secret);
	tcase_add_test(ta, test_auth_two_at_once);
	suite_add_tcase(s, ta);
	return tu_run(s);
}
