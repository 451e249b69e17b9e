/* lib/lessor waiters: matching wake-ups, the lost-wake-up guard, deadlines,
 * shutdown and the timer sleep. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include "lessor/waiters.h"
#include "testutil.h"

struct fake_conn {
	int suspended;
	int resumed;
};

static void on_suspend(void *p)
{
	((struct fake_conn *)p)->suspended++;
}

static void on_resume(void *p)
{
	((struct fake_conn *)p)->resumed++;
}

static char *gpu[] = {"gpu", NULL};
static char *gpu_eu[] = {"gpu", "region:eu", NULL};
static char *build[] = {"build", NULL};

static void claim_waiter(struct lessor_waiter *x, struct fake_conn *c, char **workflows,
                         char **tags, const char *claim_id)
{
	*x = (struct lessor_waiter){.deadline = time_mono() + 60 * USEC_PER_SEC,
	                            .claim = true,
	                            .workflows = workflows,
	                            .tags = tags,
	                            .claim_id = claim_id,
	                            .resume = on_resume,
	                            .userdata = c};
}

START_TEST(test_wake_matches_workflow_and_tags)
{
	lessor_waiters *w = lessor_waiters_new();
	struct fake_conn a = {0}, b = {0}, any = {0};
	struct lessor_waiter xa, xb, xany;

	claim_waiter(&xa, &a, build, gpu, "a");
	claim_waiter(&xb, &b, NULL, gpu_eu, "b");
	claim_waiter(&xany, &any, NULL, NULL, "c");
	ck_assert_int_eq(lessor_waiters_park(w, &xa, lessor_waiters_gen(w), on_suspend, &a), 0);
	ck_assert_int_eq(lessor_waiters_park(w, &xb, lessor_waiters_gen(w), on_suspend, &b), 0);
	ck_assert_int_eq(lessor_waiters_park(w, &xany, lessor_waiters_gen(w), on_suspend, &any), 0);
	ck_assert_int_eq(a.suspended + b.suspended + any.suspended, 3);
	ck_assert_uint_eq(lessor_waiters_count(w), 3);
	/* deploy needing region:eu: only b carries that tag and takes any workflow */
	lessor_waiters_wake(w, "deploy", (char *[]){"region:eu", NULL});
	ck_assert_int_eq(a.resumed, 0);
	ck_assert_int_eq(b.resumed, 1);
	ck_assert(xb.woken);
	ck_assert_int_eq(any.resumed, 0);
	/* untagged build: a and any */
	lessor_waiters_wake(w, "build", NULL);
	ck_assert_int_eq(a.resumed, 1);
	ck_assert_int_eq(any.resumed, 1);
	ck_assert_uint_eq(lessor_waiters_count(w), 0);
	/* nothing left to resume twice */
	lessor_waiters_wake(w, NULL, NULL);
	ck_assert_int_eq(a.resumed + b.resumed + any.resumed, 3);
	lessor_waiters_free(w);
}
END_TEST

/* The hand-off takes the matching claim parked longest, out of every wake,
 * deadline and shutdown until the taker resumes it. */
START_TEST(test_adopt_oldest_match)
{
	lessor_waiters *w = lessor_waiters_new();
	struct fake_conn a = {0}, b = {0}, c = {0}, none = {0};
	struct lessor_waiter xa, xb, xc, xnone;
	uint64_t gen;

	claim_waiter(&xa, &a, build, NULL, "a");
	claim_waiter(&xb, &b, NULL, NULL, "b");
	claim_waiter(&xc, &c, NULL, NULL, "c");
	claim_waiter(&xnone, &none, NULL, NULL, "none");
	xnone.no_runs = true;
	ck_assert_int_eq(lessor_waiters_park(w, &xnone, lessor_waiters_gen(w), on_suspend, &none),
	                 0);
	ck_assert_int_eq(lessor_waiters_park(w, &xa, lessor_waiters_gen(w), on_suspend, &a), 0);
	ck_assert_int_eq(lessor_waiters_park(w, &xb, lessor_waiters_gen(w), on_suspend, &b), 0);
	ck_assert_int_eq(lessor_waiters_park(w, &xc, lessor_waiters_gen(w), on_suspend, &c), 0);
	gen = lessor_waiters_gen(w);
	/* deploy: a takes only build, the claim for no runs takes none: b */
	ck_assert_ptr_eq(lessor_waiters_adopt(w, "deploy", NULL), &xb);
	ck_assert_uint_eq(lessor_waiters_count(w), 3);
	ck_assert_uint_eq(lessor_waiters_gen(w), gen); /* no wake recorded */
	ck_assert_ptr_eq(lessor_waiters_adopt(w, "build", NULL), &xa);
	ck_assert_ptr_null(lessor_waiters_adopt(w, "build", gpu)); /* c has no tag gpu */
	lessor_waiters_wake(w, NULL, NULL);
	lessor_waiters_shutdown(w);
	ck_assert_int_eq(a.resumed + b.resumed, 0); /* theirs to resume */
	ck_assert_int_eq(c.resumed + none.resumed, 2);
	ck_assert_ptr_null(lessor_waiters_adopt(w, NULL, NULL));
	lessor_waiters_resume(&xa);
	lessor_waiters_resume(&xb);
	ck_assert_int_eq(a.resumed + b.resumed, 2);
	ck_assert(xa.woken && xb.woken);
	lessor_waiters_free(w);
}
END_TEST

START_TEST(test_no_lost_wakeup)
{
	lessor_waiters *w = lessor_waiters_new();
	struct fake_conn c = {0};
	struct lessor_waiter x;
	uint64_t seen = lessor_waiters_gen(w);

	claim_waiter(&x, &c, NULL, NULL, "a");
	/* a run arrives between the claimer's look and its park */
	lessor_waiters_wake(w, "build", NULL);
	ck_assert_int_eq(lessor_waiters_park(w, &x, seen, on_suspend, &c), -EAGAIN);
	ck_assert_int_eq(c.suspended, 0);
	ck_assert_int_eq(lessor_waiters_park(w, &x, lessor_waiters_gen(w), on_suspend, &c), 0);
	lessor_waiters_wake_claim(w, "other");
	ck_assert_int_eq(c.resumed, 0);
	lessor_waiters_wake_claim(w, "a");
	ck_assert_int_eq(c.resumed, 1);
	lessor_waiters_free(w);
}
END_TEST

START_TEST(test_deadlines_and_shutdown)
{
	lessor_waiters *w = lessor_waiters_new();
	struct fake_conn soon = {0}, late = {0}, timer = {0};
	struct lessor_waiter xs, xl, xt;
	usec_t now = time_mono(), next;

	claim_waiter(&xs, &soon, NULL, NULL, "s");
	claim_waiter(&xl, &late, NULL, NULL, "l");
	xs.deadline = now + 10 * USEC_PER_MSEC;
	xt = (struct lessor_waiter){
	    .deadline = now + 20 * USEC_PER_MSEC, .resume = on_resume, .userdata = &timer};
	ck_assert_int_eq(lessor_waiters_park(w, &xs, LESSOR_GEN_ANY, on_suspend, &soon), 0);
	ck_assert_int_eq(lessor_waiters_park(w, &xl, LESSOR_GEN_ANY, on_suspend, &late), 0);
	ck_assert_int_eq(lessor_waiters_park(w, &xt, LESSOR_GEN_ANY, on_suspend, &timer), 0);
	/* a timer-only waiter is not woken by runs */
	lessor_waiters_wake(w, NULL, NULL);
	ck_assert_int_eq(timer.resumed, 0);
	ck_assert_int_eq(soon.resumed + late.resumed, 2);
	claim_waiter(&xs, &soon, NULL, NULL, "s");
	xs.deadline = now + 10 * USEC_PER_MSEC;
	ck_assert_int_eq(lessor_waiters_park(w, &xs, LESSOR_GEN_ANY, on_suspend, &soon), 0);
	next = lessor_waiters_expire(w, now + 15 * USEC_PER_MSEC);
	ck_assert_int_eq(soon.resumed, 2);
	ck_assert(!xs.woken); /* the deadline, not a run */
	ck_assert_uint_eq(next, now + 20 * USEC_PER_MSEC);
	lessor_waiters_shutdown(w);
	ck_assert_int_eq(timer.resumed, 1);
	ck_assert_int_eq(lessor_waiters_park(w, &xl, LESSOR_GEN_ANY, on_suspend, &late),
	                 -ESHUTDOWN);
	ck_assert_uint_eq(lessor_waiters_expire(w, now), USEC_INFINITY);
	lessor_waiters_free(w);
}
END_TEST

static void *kicker(void *p)
{
	tu_sleep(50 * USEC_PER_MSEC);
	lessor_waiters_kick(p);
	return NULL;
}

START_TEST(test_sleep_and_kick)
{
	lessor_waiters *w = lessor_waiters_new();
	usec_t t0 = time_mono();
	pthread_t t;

	lessor_waiters_sleep(w, t0 + 30 * USEC_PER_MSEC);
	ck_assert_uint_ge(time_mono() - t0, 30 * USEC_PER_MSEC);
	ck_assert_int_eq(pthread_create(&t, NULL, kicker, w), 0);
	lessor_waiters_sleep(w, time_mono() + 60 * USEC_PER_SEC); /* returns on the kick */
	pthread_join(t, NULL);
	lessor_waiters_free(w);
}
END_TEST

/* A watched waiter whose peer closes is resumed by the timer's sleep, gone;
 * one whose socket stays open is not; a waiter woken otherwise stops being
 * watched (its socket may be reused at once). */
START_TEST(test_hangup_resumes_gone)
{
	lessor_waiters *w = lessor_waiters_new();
	struct fake_conn a = {0}, b = {0};
	struct lessor_waiter xa, xb;
	int pa[2], pb[2];

	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pa), 0);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pb), 0);
	claim_waiter(&xa, &a, NULL, NULL, "a");
	claim_waiter(&xb, &b, NULL, NULL, "b");
	xa.watch_hangup = xb.watch_hangup = true;
	xa.fd = pa[0];
	xb.fd = pb[0];
	ck_assert_int_eq(lessor_waiters_park(w, &xa, LESSOR_GEN_ANY, on_suspend, &a), 0);
	ck_assert_int_eq(lessor_waiters_park(w, &xb, LESSOR_GEN_ANY, on_suspend, &b), 0);
	close(pa[1]);
	/* the first sleep may return on the kick of the parks */
	for (int i = 0; i < 3 && !a.resumed; i++)
		lessor_waiters_sleep(w, time_mono() + 60 * USEC_PER_SEC);
	ck_assert_int_eq(a.resumed, 1);
	ck_assert(xa.gone);
	ck_assert(!xa.woken);
	ck_assert_int_eq(b.resumed, 0);
	ck_assert_uint_eq(lessor_waiters_count(w), 1);
	lessor_waiters_wake_claim(w, "b");
	ck_assert_int_eq(b.resumed, 1);
	ck_assert(!xb.gone);
	close(pb[1]); /* no longer watched: nothing to resume */
	lessor_waiters_sleep(w, time_mono() + 20 * USEC_PER_MSEC);
	ck_assert_int_eq(b.resumed, 1);
	close(pa[0]);
	close(pb[0]);
	lessor_waiters_free(w);
}
END_TEST

static Suite *suite(void)
{
	Suite *s = suite_create("lessor_waiters");
	TCase *tc = tcase_create("waiters");

	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_wake_matches_workflow_and_tags);
	tcase_add_test(tc, test_adopt_oldest_match);
	tcase_add_test(tc, test_no_lost_wakeup);
	tcase_add_test(tc, test_deadlines_and_shutdown);
	tcase_add_test(tc, test_sleep_and_kick);
	tcase_add_test(tc, test_hangup_resumes_gone);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(suite());
}
