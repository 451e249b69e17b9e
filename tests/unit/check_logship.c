/* lib/logship against a real lessor: offsets, 416 resync, 413, 409, markers,
 * and the bounded backpressure. */
#include <cJSON.h>
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drvutil.h"
#include "lessee_proc.h"
#include "lessor_proc.h"
#include "logship/logship.h"
#include "obs/metrics.h"
#include "proto/driver-int.h" /* drv_req_defer: a scripted append */
#include "testutil.h"
#include "util/macro.h"

struct env {
	struct tu_lessor *l;
	ev_t *e;
	metrics_t *m;
	drv_t *d;       /* the native driver, on the lessor */
	drv_run_t *run; /* the run claimed by hand */
	char *id, *token, *url;
	logship_t *ls;
	int finished, lost;
	int pauses, resumes;
	bool paused;
};

static void on_event(logship_t *ls, enum logship_event event, void *userdata)
{
	struct env *t = userdata;

	if (event == LOGSHIP_FINISHED)
		t->finished++;
	else
		t->lost++;
}

static void on_throttle(void *ctx, bool pause)
{
	struct env *t = ctx;

	ck_assert(pause != t->paused); /* strictly alternating */
	t->paused = pause;
	if (pause)
		t->pauses++;
	else
		t->resumes++;
}

/* A running run on a fresh lessor, claimed by hand: its id and lease token. */
static void env_up(struct env *t, char *const *lessor_args)
{
	long status = 0;
	cJSON *resp = NULL, *run;
	char *id;

	memset(t, 0, sizeof(*t));
	ck_assert_int_eq(tu_lessor_start(&(struct tu_lessor_opts){.args = lessor_args}, &t->l), 0);
	id = tu_lessor_enqueue(t->l, "{\"workflow\":\"w\"}");
	ck_assert_ptr_nonnull(id);
	free(id);
	ck_assert_int_eq(tu_lessor_json(t->l, "POST", "/v1/claims",
					"{\"claim_id\":\"c1\",\"worker_id\":\"w1\",\"max_runs\":1,"
					"\"lease_ttl_s\":300,\"wait_s\":0}",
					&status, &resp),
			 0);
	ck_assert_int_eq(status, 200);
	run = cJSON_GetArrayItem(cJSON_GetObjectItem(resp, "runs"), 0);
	t->id = strdup(cJSON_GetObjectItem(run, "id")->valuestring);
	t->token =
		strdup(cJSON_GetObjectItem(cJSON_GetObjectItem(run, "lease"), "token")->valuestring);
	cJSON_Delete(resp);
	ck_assert_int_ge(asprintf(&t->url, "%s/v1/runs/%s/log", tu_lessor_url(t->l), t->id), 0);
	ck_assert_int_eq(ev_new(&t->e, NULL), 0);
	tu_native_driver(t->e, tu_lessor_url(t->l), t->id, t->token, &t->m, &t->d, &t->run);
}

static void ship_start(struct env *t, uint64_t max_log_bytes, size_t buffer_cap, bool throttle)
{
	struct logship_params p = {
		.ev = t->e,
		.drv = t->d,
		.run = t->run,
		.lease_key = t->token,
		.max_log_bytes = max_log_bytes,
		.buffer_cap = buffer_cap,
		.flush_interval = 50 * USEC_PER_MSEC,
		.throttle = throttle ? on_throttle : NULL,
		.throttle_ctx = t,
	};

	ck_assert_int_eq(logship_new(&p, on_event, t, &t->ls), 0);
}

static void run_until_finished(struct env *t)
{
	usec_t end = time_mono() + tu_timeout(30 * USEC_PER_SEC);

	while (!t->finished && !t->lost) {
		ck_assert_msg(time_mono() < end, "logship never finished");
		ck_assert_int_ge(ev_run_once(t->e, 100 * USEC_PER_MSEC), 0);
	}
}

static void env_down(struct env *t)
{
	logship_free(t->ls);
	drv_ops(t->d)->run_free(t->run);
	drv_free(t->d);
	metrics_free(t->m);
	ev_free(t->e);
	ck_assert_int_eq(tu_lessor_stop(t->l), 0);
	tu_lessor_free(t->l);
	free(t->id);
	free(t->token);
	free(t->url);
}

static char *server_log(struct env *t, size_t *len)
{
	char *log = tu_lessor_run_log(t->l, t->id, len);

	ck_assert_ptr_nonnull(log);
	return log;
}

START_TEST(test_ships_in_order)
{
	struct env t;
	struct logship_stats st;
	_cleanup_free_ char *log = NULL;
	size_t len;

	env_up(&t, NULL);
	ship_start(&t, 0, 0, false);
	logship_write(t.ls, "hello ", 6);
	for (int i = 0; i < 5; i++)
		ck_assert_int_ge(ev_run_once(t.e, 100 * USEC_PER_MSEC), 0);
	logship_write(t.ls, "world\n", 6);
	logship_finish(t.ls);
	run_until_finished(&t);
	log = server_log(&t, &len);
	ck_assert_str_eq(log, "hello world\n");
	logship_get_stats(t.ls, &st);
	ck_assert_uint_eq(st.acked, 12);
	ck_assert_uint_eq(st.dropped, 0);
	env_down(&t);
}
END_TEST

/* Someone (a lost response, a previous life) already put bytes there: the
 * server's 416 length is where we resume, nothing is doubled. */
START_TEST(test_416_resync)
{
	struct env t;
	struct logship_stats st;
	lessor_client *c;
	struct lessor_response resp = {0};
	char path[256], lease[600];
	char *const headers[] = {lease, "Content-Range: bytes 0-5/*", NULL};
	_cleanup_free_ char *log = NULL;
	size_t len;

	env_up(&t, NULL);
	c = tu_lessor_client(t.l);
	snprintf(path, sizeof(path), "/v1/runs/%s/log", t.id);
	snprintf(lease, sizeof(lease), "Lease-Token: %s", t.token);
	ck_assert_int_eq(lessor_client_request(c, "PATCH", path, headers, "hello ", 6, &resp), 0);
	ck_assert_int_eq(resp.status, 202);
	lessor_response_done(&resp);
	lessor_client_free(c);
	ship_start(&t, 0, 0, false);
	logship_write(t.ls, "hello world\n", 12);
	logship_finish(t.ls);
	run_until_finished(&t);
	log = server_log(&t, &len);
	ck_assert_str_eq(log, "hello world\n");
	logship_get_stats(t.ls, &st);
	ck_assert_uint_eq(st.acked, 12);
	ck_assert_uint_ge(st.requests, 2); /* the 416, then the rest */
	env_down(&t);
}
END_TEST

START_TEST(test_max_log_bytes_marker)
{
	struct env t;
	_cleanup_free_ char *log = NULL;
	char data[100];
	size_t len;

	memset(data, 'x', sizeof(data));
	env_up(&t, NULL);
	/* 400 bytes of log: the output is cut where the markers still fit
	 * (256 bytes are kept for them) */
	ship_start(&t, 400, 0, false);
	logship_write(t.ls, data, sizeof(data));
	logship_write(t.ls, data, sizeof(data));
	logship_finish(t.ls);
	run_until_finished(&t);
	log = server_log(&t, &len);
	ck_assert_uint_le(len, 400);
	ck_assert_uint_eq(len, 144 + strlen("\n[lessee: log truncated at 144 bytes]\n"));
	ck_assert_int_eq(memcmp(log, data, 100), 0);
	ck_assert_int_eq(memcmp(log + 100, data, 44), 0);
	ck_assert_str_eq(log + 144, "\n[lessee: log truncated at 144 bytes]\n");
	env_down(&t);
}
END_TEST

/* The server keeps no more (413): shipping stops for the run, it finishes. */
START_TEST(test_413_stops)
{
	struct env t;
	struct logship_stats st;
	char *const args[] = {"--max-log-bytes", "1000", NULL};
	char data[5000];

	memset(data, 'y', sizeof(data));
	env_up(&t, args);
	ship_start(&t, 0, 0, false);
	logship_write(t.ls, data, sizeof(data));
	logship_finish(t.ls);
	run_until_finished(&t);
	ck_assert_int_eq(t.lost, 0);
	logship_get_stats(t.ls, &st);
	ck_assert(st.server_limit);
	ck_assert_uint_le(st.acked, 1000);
	env_down(&t);
}
END_TEST

/* The same cap on both sides (64M each by default): the log as the server
 * keeps it, marker included, fits max_log_bytes, so the marker is never the
 * append the server refuses. */
START_TEST(test_marker_fits_a_server_cap_as_large)
{
	struct env t;
	struct logship_stats st;
	char *const args[] = {"--max-log-bytes", "1000", NULL};
	_cleanup_free_ char *log = NULL;
	char data[5000];
	size_t len;

	memset(data, 'z', sizeof(data));
	env_up(&t, args);
	ship_start(&t, 1000, 0, false);
	logship_write(t.ls, data, sizeof(data));
	logship_finish(t.ls);
	run_until_finished(&t);
	logship_get_stats(t.ls, &st);
	ck_assert(!st.server_limit);
	log = server_log(&t, &len);
	ck_assert_uint_le(len, 1000);
	ck_assert_msg(strstr(log, "\n[lessee: log truncated at ") && len > 8 &&
	                  strcmp(log + len - 8, " bytes]\n") == 0,
	              "%zu bytes, ending %s", len, len > 60 ? log + len - 60 : log);
	ck_assert_uint_eq(st.acked, len);
	env_down(&t);
}
END_TEST

/* A re-executed run: the server holds an earlier execution's 700 bytes,
 * which the new execution learns only from its first append's answer.
 * Output taken meanwhile is cut there, so the log, restart line and
 * truncation marker included, still fits the cap both sides share. */
START_TEST(test_cap_counts_earlier_executions)
{
	struct env t;
	char *const args[] = {"--max-log-bytes", "1000", NULL};
	_cleanup_free_ char *log = NULL;
	char first[700], data[5000];
	size_t len;

	memset(first, 'a', sizeof(first));
	memset(data, 'b', sizeof(data));
	env_up(&t, args);
	ship_start(&t, 1000, 0, false);
	logship_write(t.ls, first, sizeof(first));
	logship_finish(t.ls);
	run_until_finished(&t);
	t.ls = logship_free(t.ls);
	t.finished = 0;
	ck_assert_int_eq(logship_new(&(struct logship_params){.ev = t.e,
	                                                      .drv = t.d,
	                                                      .run = t.run,
	                                                      .lease_key = t.token,
	                                                      .max_log_bytes = 1000,
	                                                      .flush_interval = 50 * USEC_PER_MSEC,
	                                                      .attempt = 2},
	                             on_event, &t, &t.ls),
	                 0);
	logship_write(t.ls, data, sizeof(data));
	logship_finish(t.ls);
	run_until_finished(&t);
	log = server_log(&t, &len);
	ck_assert_uint_le(len, 1000);
	ck_assert_msg(strstr(log, "execution restarted") && len > 8 &&
	                  strcmp(log + len - 8, " bytes]\n") == 0 &&
	                  strstr(log, "[lessee: log truncated at "),
	              "%zu bytes, from the 690th: %.300s", len, log + 690);
	env_down(&t);
}
END_TEST

/* The lease went to someone else: LEASE_LOST, and not one byte more. */
START_TEST(test_409_lease_lost)
{
	struct env t;
	char path[256];
	long status = 0;
	size_t len;
	_cleanup_free_ char *log = NULL;

	env_up(&t, NULL);
	snprintf(path, sizeof(path), "/v1/runs/%s/requeue", t.id);
	ck_assert_int_eq(tu_lessor_json(t.l, "POST", path, NULL, &status, NULL), 0);
	ck_assert_int_eq(status, 200);
	ship_start(&t, 0, 0, false);
	logship_write(t.ls, "late\n", 5);
	logship_finish(t.ls);
	run_until_finished(&t);
	ck_assert_int_eq(t.lost, 1);
	log = server_log(&t, &len);
	ck_assert_uint_eq(len, 0);
	env_down(&t);
}
END_TEST

/* A burst bigger than the buffer against a healthy API: the producer is
 * paused instead of bytes being dropped, and resumed; all of it arrives. */
START_TEST(test_backpressure_no_loss)
{
	struct env t;
	struct logship_stats st;
	size_t n = 3 << 20, len, written = 0;
	_cleanup_free_ char *want = malloc(n), *log = NULL;
	uint64_t s = tu_gen_seed(0);

	tu_gen_fill(&s, want, n);
	env_up(&t, NULL);
	ship_start(&t, 0, 256 << 10, true);
	while (written < n) {
		size_t chunk = MIN((size_t)65536, n - written);

		while (t.paused) /* the producer waits, as a child on a full pipe */
			ck_assert_int_ge(ev_run_once(t.e, 100 * USEC_PER_MSEC), 0);
		logship_write(t.ls, want + written, chunk);
		written += chunk;
	}
	logship_finish(t.ls);
	run_until_finished(&t);
	log = server_log(&t, &len);
	logship_get_stats(t.ls, &st);
	ck_assert_uint_eq(st.dropped, 0);
	ck_assert_uint_eq(len, n);
	ck_assert(memcmp(log, want, n) == 0);
	ck_assert_int_gt(t.pauses, 0);
	ck_assert_int_eq(t.pauses, t.resumes);
	env_down(&t);
}
END_TEST

/* An API slower than the producer: after the stall budget (2 s) logship drops
 * and marks the gap instead of holding the producer back any longer. */
START_TEST(test_stall_budget_then_drop)
{
	struct env t;
	struct logship_stats st;
	char *const args[] = {"--enable-faults", NULL};
	char data[65536];
	size_t len;
	usec_t t0;
	_cleanup_free_ char *log = NULL;
	long status = 0;

	memset(data, 'z', sizeof(data));
	env_up(&t, args);
	ck_assert_int_eq(tu_lessor_json(t.l, "POST", "/v1/admin/faults",
					"{\"endpoint\":\"log\",\"delay_ms\":1000,\"count\":100}",
					&status, NULL),
			 0);
	ck_assert_int_eq(status, 200);
	ship_start(&t, 0, 128 << 10, true);
	t0 = time_mono();
	for (int i = 0; i < 64; i++) { /* 4 MiB, each write waiting while paused */
		while (t.paused)
			ck_assert_int_ge(ev_run_once(t.e, 100 * USEC_PER_MSEC), 0);
		logship_write(t.ls, data, sizeof(data));
	}
	logship_get_stats(t.ls, &st);
	ck_assert_uint_le(st.stalled, 2 * USEC_PER_SEC + 200 * USEC_PER_MSEC);
	ck_assert_uint_gt(st.dropped, 0);
	ck_assert_uint_lt(time_mono() - t0, tu_timeout(10 * USEC_PER_SEC));
	ck_assert_int_eq(tu_lessor_json(t.l, "DELETE", "/v1/admin/faults", NULL, &status, NULL), 0);
	logship_finish(t.ls);
	run_until_finished(&t);
	log = server_log(&t, &len);
	ck_assert_ptr_nonnull(memmem(log, len, "bytes dropped: log shipping fell behind]\n", 40));
	env_down(&t);
}
END_TEST

/* ---- a server whose answers take nothing ---- */

static unsigned stuck_appends;
static enum drv_verdict stuck_verdict;

/* Every append answered at once with the length it was sent at: a 202 with
 * {"length": offset}, or a 416 that names the offset the append had. */
static int stuck_log_append(drv_t *d, drv_run_t *run, uint64_t offset, const void *data, size_t len,
                            usec_t timeout, drv_cb cb, void *ud, drv_req_t **ret)
{
	drv_req_t *rq = drv_req_new(d, NULL, cb, ud);

	(void)run, (void)data, (void)len, (void)timeout;
	if (!rq)
		return -ENOMEM;
	stuck_appends++;
	return drv_req_defer(rq, &(struct drv_answer){.verdict = stuck_verdict, .length = offset},
	                     ret);
}

/* An answer that takes nothing is not sent again at once: that spun at
 * hundreds of requests a second (1 MiB each while the run wrote on). */
START_TEST(test_no_progress_backs_off)
{
	static const enum drv_verdict verdicts[] = {DRV_OK, DRV_RESYNC};
	struct drv_ops ops = drv_native_ops;

	ops.log_append = stuck_log_append;
	for (size_t i = 0; i < ELEMENTSOF(verdicts); i++) {
		struct env t = {0};
		usec_t end;

		stuck_appends = 0;
		stuck_verdict = verdicts[i];
		ck_assert_int_eq(ev_new(&t.e, NULL), 0);
		tu_driver(t.e, &ops, "http://127.0.0.1:1", "r-1", "t0123456789abcdef", &t.m, &t.d,
		          &t.run);
		t.token = strdup("t0123456789abcdef");
		ship_start(&t, 0, 0, false);
		logship_write(t.ls, "hello\n", 6);
		logship_finish(t.ls);
		end = time_mono() + USEC_PER_SEC;
		while (time_mono() < end)
			ck_assert_int_ge(ev_run_once(t.e, 50 * USEC_PER_MSEC), 0);
		ck_assert_msg(stuck_appends >= 1 && stuck_appends <= 20, "%u appends in 1 s",
		              stuck_appends);
		logship_free(t.ls);
		drv_ops(t.d)->run_free(t.run);
		drv_free(t.d);
		metrics_free(t.m);
		ev_free(t.e);
		free(t.token);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("logship");
	TCase *tc = tcase_create("logship");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_ships_in_order);
	tcase_add_test(tc, test_416_resync);
	tcase_add_test(tc, test_max_log_bytes_marker);
	tcase_add_test(tc, test_413_stops);
	tcase_add_test(tc, test_marker_fits_a_server_cap_as_large);
	tcase_add_test(tc, test_cap_counts_earlier_executions);
	tcase_add_test(tc, test_409_lease_lost);
	tcase_add_test(tc, test_backpressure_no_loss);
	tcase_add_test(tc, test_stall_budget_then_drop);
	tcase_add_test(tc, test_no_progress_backs_off);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
