/* The poison-pill breaker's state machine. */
#include <check.h>

#include "testutil.h"
#include "worker/breaker.h"

#define MIN5 (5 * USEC_PER_MINUTE)

START_TEST(test_opens_after_threshold)
{
	struct breaker b;

	breaker_init(&b, 3, MIN5, USEC_PER_HOUR);
	ck_assert(!breaker_record(&b, true, 0));
	ck_assert(!breaker_record(&b, true, 0));
	ck_assert(breaker_allows(&b));
	ck_assert(breaker_record(&b, true, 100));
	ck_assert_int_eq(b.state, BREAKER_OPEN);
	ck_assert(!breaker_allows(&b));
	ck_assert(!breaker_tick(&b, 100 + MIN5 - 1));
	ck_assert(breaker_tick(&b, 100 + MIN5));
	ck_assert_int_eq(b.state, BREAKER_HALF_OPEN);
}
END_TEST

START_TEST(test_success_resets_count)
{
	struct breaker b;

	breaker_init(&b, 3, MIN5, USEC_PER_HOUR);
	breaker_record(&b, true, 0);
	breaker_record(&b, true, 0);
	breaker_record(&b, false, 0);
	breaker_record(&b, true, 0);
	breaker_record(&b, true, 0);
	ck_assert_int_eq(b.state, BREAKER_CLOSED);
}
END_TEST

START_TEST(test_half_open_one_trial)
{
	struct breaker b;
	usec_t t = 0;

	breaker_init(&b, 1, MIN5, USEC_PER_HOUR);
	breaker_record(&b, true, t);
	breaker_tick(&b, t += MIN5);
	ck_assert(breaker_allows(&b));
	breaker_run_started(&b);
	ck_assert(!breaker_allows(&b)); /* one trial at a time */
	breaker_run_abandoned(&b);      /* lease lost: no verdict, trial slot free again */
	ck_assert(breaker_allows(&b));
	breaker_run_started(&b);
	/* trial fails: open again with a doubled cooldown */
	ck_assert(breaker_record(&b, true, t));
	ck_assert_int_eq(b.state, BREAKER_OPEN);
	ck_assert(!breaker_tick(&b, t + 2 * MIN5 - 1));
	ck_assert(breaker_tick(&b, t + 2 * MIN5));
	breaker_run_started(&b);
	ck_assert(breaker_record(&b, false, t));
	ck_assert_int_eq(b.state, BREAKER_CLOSED);
	ck_assert_uint_eq(b.cooldown, MIN5); /* reset on close */
}
END_TEST

/* Runs whose child is gone but whose verdict is not in count as failures that
 * may come: with 1 failure and a threshold of 3, one pending run still lets a
 * claim go, two do not, until one verdict is in. */
START_TEST(test_pending_verdicts_hold_claims)
{
	struct breaker b;

	breaker_init(&b, 3, MIN5, USEC_PER_HOUR);
	breaker_run_started(&b);
	ck_assert(!breaker_record(&b, true, 0));
	breaker_pending(&b);
	ck_assert(breaker_allows(&b));
	breaker_pending(&b);
	ck_assert(!breaker_allows(&b));
	breaker_settled(&b);
	ck_assert(!breaker_record(&b, false, 0)); /* a success: the count starts over */
	ck_assert(breaker_allows(&b));
	breaker_settled(&b);
	breaker_settled(&b); /* never below zero */
	ck_assert_uint_eq(b.pending, 0);
	/* no failure in the count: verdicts on their way hold nothing (16 slots of
	 * a healthy workflow have more than 3 runs flushing at once) */
	breaker_init(&b, 3, MIN5, USEC_PER_HOUR);
	for (int i = 0; i < 10; i++)
		breaker_pending(&b);
	ck_assert(breaker_allows(&b));
	breaker_init(&b, 0, MIN5, USEC_PER_HOUR); /* threshold 0: never opens, never holds */
	for (int i = 0; i < 10; i++)
		breaker_pending(&b);
	ck_assert(breaker_allows(&b));
}
END_TEST

START_TEST(test_cooldown_cap)
{
	struct breaker b;
	usec_t t = 0;

	breaker_init(&b, 1, MIN5, USEC_PER_HOUR);
	for (int i = 0; i < 10; i++) {
		breaker_record(&b, true, t);
		ck_assert_uint_le(b.open_until - t, USEC_PER_HOUR); /* never longer than the cap */
		t = b.open_until;
		breaker_tick(&b, t);
		breaker_run_started(&b);
	}
	ck_assert_uint_eq(b.cooldown, USEC_PER_HOUR);
	ck_assert_uint_eq(b.opened_count, 10);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("breaker");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_opens_after_threshold);
	tcase_add_test(tc, test_success_resets_count);
	tcase_add_test(tc, test_half_open_one_trial);
	tcase_add_test(tc, test_cooldown_cap);
	tcase_add_test(tc, test_pending_verdicts_hold_claims);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
