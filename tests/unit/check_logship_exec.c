/* lib/logship and the executions of one run, against a real lessor: an earlier
 * execution's bytes get a restart marker after them; our own first append
 * whose answer was lost does not; a spooled tail resumes where it stood. */
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
#include "testutil.h"
#include "util/macro.h"

struct env {
	struct tu_lessor *l;
	ev_t *e;
	metrics_t *m;
	drv_t *d; /* the native driver with a lossy log_append */
	drv_run_t *run;
	char *id, *token, *url;
	logship_t *ls;
	int finished, lost;
	unsigned lose_at; /* the answer to this request (1 = the first) is replaced by a
	                   * timeout; the request still reaches the server */
	unsigned sent;
	drv_cb cb;
	void *cb_userdata;
};

static struct env *lossy_env; /* one test at a time */

static void on_lossy(const struct drv_answer *a, void *userdata)
{
	struct env *t = userdata;

	if (t->sent == t->lose_at) {
		t->cb(&(struct drv_answer){.verdict = DRV_RETRY, .error = -ETIMEDOUT},
		      t->cb_userdata);
	} else
		t->cb(a, t->cb_userdata);
}

/* The native log_append, with one answer replaced by a timeout (one request at a time). */
static int append_lossy(drv_t *d, drv_run_t *run, uint64_t offset, const void *data, size_t len,
                        usec_t timeout, drv_cb cb, void *ud, drv_req_t **ret)
{
	struct env *t = lossy_env;

	t->sent++;
	t->cb = cb;
	t->cb_userdata = ud;
	return drv_native_ops.log_append(d, run, offset, data, len, timeout, on_lossy, t, ret);
}

static struct drv_ops lossy_ops;

static void on_event(logship_t *ls, enum logship_event event, void *userdata)
{
	struct env *t = userdata;

	if (event == LOGSHIP_FINISHED)
		t->finished++;
	else
		t->lost++;
}

static void env_up(struct env *t)
{
	long status = 0;
	cJSON *resp = NULL, *run;
	char *id;

	memset(t, 0, sizeof(*t));
	ck_assert_int_eq(tu_lessor_start(&(struct tu_lessor_opts){0}, &t->l), 0);
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
	lossy_ops = drv_native_ops;
	lossy_ops.log_append = append_lossy;
	lossy_env = t;
	tu_driver(t->e, &lossy_ops, tu_lessor_url(t->l), t->id, t->token, &t->m, &t->d, &t->run);
}

static void ship(struct env *t, unsigned attempt, const struct logship_resume *resume,
                 const char *data)
{
	struct logship_params p = {
	    .ev = t->e,
	    .drv = t->d,
	    .run = t->run,
	    .lease_key = t->token,
	    .flush_interval = 50 * USEC_PER_MSEC,
	    .attempt = attempt,
	    .resume = resume,
	};
	usec_t end = time_mono() + tu_timeout(30 * USEC_PER_SEC);

	t->ls = logship_free(t->ls);
	t->finished = t->lost = 0;
	t->sent = 0;
	ck_assert_int_eq(logship_new(&p, on_event, t, &t->ls), 0);
	logship_write(t->ls, data, strlen(data));
	logship_finish(t->ls);
	while (!t->finished && !t->lost) {
		ck_assert_msg(time_mono() < end, "logship never finished");
		ck_assert_int_ge(ev_run_once(t->e, 100 * USEC_PER_MSEC), 0);
	}
	ck_assert_int_eq(t->lost, 0);
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

static char *server_log(struct env *t)
{
	size_t len = 0;
	char *log = tu_lessor_run_log(t->l, t->id, &len);

	ck_assert_ptr_nonnull(log);
	ck_assert_uint_eq(strlen(log), len);
	return log;
}

/* "\n[lessee: attempt N, execution restarted (lease XXXXXXXX)]\n" */
static void assert_marker(const char *p, unsigned attempt, size_t *ret_len)
{
	char head[64];
	const char *q;

	snprintf(head, sizeof(head), "\n[lessee: attempt %u, execution restarted (lease ", attempt);
	ck_assert_msg(strncmp(p, head, strlen(head)) == 0, "no marker at: %s", p);
	q = p + strlen(head);
	ck_assert_uint_eq(strspn(q, "0123456789abcdef"), 8);
	ck_assert_msg(strncmp(q + 8, ")]\n", 3) == 0, "marker ends badly: %s", p);
	*ret_len = (size_t)(q + 11 - p);
}

START_TEST(test_earlier_execution_marked)
{
	struct env t;
	_cleanup_free_ char *log = NULL;
	size_t m;

	env_up(&t);
	ship(&t, 1, NULL, "one\ntwo\nthree\n");
	ship(&t, 1, NULL, "one\n"); /* same lease, a new execution: shorter so far */
	log = server_log(&t);
	ck_assert(strncmp(log, "one\ntwo\nthree\n", 14) == 0);
	assert_marker(log + 14, 1, &m);
	ck_assert_str_eq(log + 14 + m, "one\n");
	env_down(&t);
}
END_TEST

/* Our first append landed but its answer was lost: the 416 that follows
 * gives our own length, which is not an earlier execution. */
START_TEST(test_lost_first_ack_not_marked)
{
	struct env t;
	_cleanup_free_ char *log = NULL;
	struct logship_stats st;

	env_up(&t);
	t.lose_at = 1;
	ship(&t, 3, NULL, "hello world\n");
	log = server_log(&t);
	ck_assert_str_eq(log, "hello world\n");
	logship_get_stats(t.ls, &st);
	ck_assert_uint_eq(st.acked, 12);
	ck_assert_uint_ge(t.sent, 2);
	env_down(&t);
}
END_TEST

/* An earlier execution, then ours: the first answer is a definitive 416; the
 * append after the marker lands but its answer is lost; one marker only. */
START_TEST(test_lost_ack_after_marker)
{
	struct env t;
	_cleanup_free_ char *log = NULL;
	size_t m;

	env_up(&t);
	ship(&t, 1, NULL, "earlier\n");
	t.lose_at = 2;
	ship(&t, 2, NULL, "later\n");
	log = server_log(&t);
	ck_assert(strncmp(log, "earlier\n", 8) == 0);
	assert_marker(log + 8, 2, &m);
	ck_assert_str_eq(log + 8 + m, "later\n");
	ck_assert_uint_ge(t.sent, 3); /* the 416, the lost one, the resync */
	env_down(&t);
}
END_TEST

/* A spooled tail continues at its offset: what the server already has is
 * skipped, the rest appended, no marker. */
START_TEST(test_resume_at_offset)
{
	struct env t;
	_cleanup_free_ char *log = NULL;
	struct logship_resume at = {.offset = 4, .synced = true};

	env_up(&t);
	ship(&t, 1, NULL, "abcdef");
	ship(&t, 1, &at, "efgh"); /* the server got "ef" after we looked */
	log = server_log(&t);
	ck_assert_str_eq(log, "abcdefgh");
	env_down(&t);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("logship_exec");
	TCase *tc = tcase_create("executions");

	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_earlier_execution_marked);
	tcase_add_test(tc, test_lost_first_ack_not_marked);
	tcase_add_test(tc, test_lost_ack_after_marker);
	tcase_add_test(tc, test_resume_at_offset);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
