/* lib/http: fresh_connect, for the retry of a stalled lease renewal (issue 10,
 * item 3): the retry must not ride a pooled keep-alive connection that may be
 * black-holed.  Against tests/helpers/test_httpd, under both loop backends. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ev/ev.h"
#include "http/http.h"
#include "lessor_proc.h"
#include "test_httpd.h"
#include "testutil.h"
#include "util/macro.h"

struct env {
	ev_t *e;
	http_t *h;
	struct test_httpd *srv;
	unsigned done;
};

struct result {
	struct env *t;
	int error;
	long status;
	bool reused;
};

static void record_cb(http_req_t *req, const struct http_response *resp, void *userdata)
{
	struct result *r = userdata;

	r->error = resp->error;
	r->status = resp->status;
	r->reused = resp->reused_connection;
	r->t->done++;
}

static void env_up(struct env *t)
{
	memset(t, 0, sizeof(*t));
	ck_assert_int_eq(ev_new(&t->e, NULL), 0);
	ck_assert_int_eq(test_httpd_start(NULL, &t->srv), 0);
	ck_assert_int_eq(http_new(t->e, NULL, &t->h), 0);
}

static void env_down(struct env *t)
{
	t->h = http_free(t->h);
	t->srv = test_httpd_stop(t->srv);
	t->e = ev_free(t->e);
}

/* One GET of path, run to completion. */
static void get(struct env *t, struct result *r, const char *path, bool fresh, usec_t timeout)
{
	char *url = test_httpd_url(t->srv, "%s", path);
	unsigned want = t->done + 1;

	*r = (struct result){.t = t};
	ck_assert_int_eq(
	    http_send(t->h,
	              &(struct http_request){
	                  .method = "GET", .url = url, .timeout = timeout, .fresh_connect = fresh},
	              record_cb, r, NULL),
	    0);
	free(url);
	while (t->done < want)
		ck_assert_int_ge(ev_run_once(t->e, USEC_INFINITY), 0);
}

START_TEST(test_fresh_connect_skips_the_pool)
{
	struct env t;
	struct result a, b, c;

	env_up(&t);
	get(&t, &a, "/bytes?n=10", false, 0);
	get(&t, &b, "/bytes?n=10", true, 0);
	get(&t, &c, "/bytes?n=10", false, 0);
	ck_assert_int_eq(a.status, 200);
	ck_assert_int_eq(b.status, 200);
	ck_assert_int_eq(c.status, 200);
	ck_assert(!a.reused);
	ck_assert_msg(!b.reused, "fresh_connect rode a pooled connection");
	ck_assert(c.reused); /* the pool itself still works */
	ck_assert_uint_eq(test_httpd_connections(t.srv), 2);
	env_down(&t);
}
END_TEST

/* A request stalled on a connection is abandoned by its own timeout; the
 * retry on a new connection is answered at once. */
START_TEST(test_retry_after_stall)
{
	struct env t;
	struct result a, b, c;
	usec_t t0;

	env_up(&t);
	get(&t, &a, "/bytes?n=10", false, 0);
	t0 = time_mono();
	get(&t, &b, "/sleep?ms=20000", false, 300 * USEC_PER_MSEC);
	ck_assert_int_eq(b.error, -ETIMEDOUT);
	ck_assert_uint_lt(time_mono() - t0, tu_timeout(2 * USEC_PER_SEC));
	get(&t, &c, "/bytes?n=10", true, 2 * USEC_PER_SEC);
	ck_assert_int_eq(c.status, 200);
	ck_assert(!c.reused);
	env_down(&t);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("http_fresh");
	TCase *tc = tcase_create("fresh");

	tcase_add_test(tc, test_fresh_connect_skips_the_pool);
	tcase_add_test(tc, test_retry_after_stall);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
