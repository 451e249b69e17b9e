/* lib/worker/spool.c on a real directory: one entry per lease, removal by
 * name, the log tail round trip, crash leftovers, the body's log_length. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "worker/worker-int.h"

static char *dir;

static void setup(void)
{
	dir = tu_tmpdir("spool");
	ck_assert_ptr_nonnull(dir);
}

static void teardown(void)
{
	rm_rf(dir);
	free(dir);
}

struct seen {
	int n;
	struct spool_entry e[4];
};

static int collect(struct spool_entry *e, void *ud)
{
	struct seen *s = ud;

	ck_assert_int_lt(s->n, 4);
	s->e[s->n++] = *e;
	return 0;
}

static void seen_done(struct seen *s)
{
	for (int i = 0; i < s->n; i++)
		spool_entry_done(&s->e[i]);
}

static void name_of(const char *id, const char *token, char *buf)
{
	ck_assert_int_eq(spool_entry_name(id, token, buf, SPOOL_NAME_MAX), 0);
}

START_TEST(test_entries_per_lease)
{
	char a[SPOOL_NAME_MAX], b[SPOOL_NAME_MAX];
	struct seen s = {0};

	name_of("r-1", "token-one", a);
	name_of("r-1", "token-two", b);
	ck_assert_str_ne(a, b);
	ck_assert_int_eq(spool_write(dir, a, "{\"token\":\"token-one\"}", 1024, NULL), 0);
	ck_assert_int_eq(spool_write(dir, b, "{\"token\":\"token-two\"}", 1024, NULL), 0);
	ck_assert_int_eq(spool_count(dir), 2);
	ck_assert_int_eq(spool_remove(dir, a), 0);
	ck_assert_int_eq(spool_foreach(dir, 1024, collect, &s), 0);
	ck_assert_int_eq(s.n, 1);
	ck_assert_str_eq(s.e[0].run_id, "r-1");
	ck_assert_str_eq(s.e[0].name, b);
	ck_assert_str_eq(s.e[0].body, "{\"token\":\"token-two\"}");
	ck_assert_ptr_null(s.e[0].tail);
	seen_done(&s);
}
END_TEST

START_TEST(test_body_cap_shared)
{
	char a[SPOOL_NAME_MAX];
	struct seen s = {0};

	name_of("r-2", "t", a);
	ck_assert_int_eq(spool_write(dir, a, "0123456789", 9, NULL), -EFBIG);
	ck_assert_int_eq(spool_count(dir), 0);
	ck_assert_int_eq(spool_write(dir, a, "0123456789", 10, NULL), 0);
	/* read with a smaller cap (a lowered max_output_bytes): said, not skipped */
	ck_assert_int_eq(spool_foreach(dir, 5, collect, &s), 0);
	ck_assert_int_eq(s.n, 1);
	ck_assert_int_eq(s.e[0].error, -EFBIG);
	seen_done(&s);
	ck_assert_uint_ge(spool_max_body(64u << 20), 6 * (size_t)(64u << 20));
}
END_TEST

START_TEST(test_tail_round_trip)
{
	char a[SPOOL_NAME_MAX], path[4096];
	struct spool_tail t = {
	    .data = "bin\0ary\n",
	    .len = 8,
	    .attempt = 3,
	    .where = {.offset = 77, .synced = false, .n_maybe = 2, .maybe = {5, 9}}};
	struct seen s = {0};

	name_of("r-3", "tok", a);
	ck_assert_int_eq(spool_write(dir, a, "{}", 1024, &t), 0);
	ck_assert_int_eq(spool_foreach(dir, 1024, collect, &s), 0);
	ck_assert_int_eq(s.n, 1);
	ck_assert_int_eq(s.e[0].error, 0);
	ck_assert_uint_eq(s.e[0].tail_len, 8);
	ck_assert(memcmp(s.e[0].tail, "bin\0ary\n", 8) == 0);
	ck_assert_uint_eq(s.e[0].where.offset, 77);
	ck_assert(!s.e[0].where.synced);
	ck_assert_uint_eq(s.e[0].where.n_maybe, 2);
	ck_assert_uint_eq(s.e[0].where.maybe[1], 9);
	ck_assert_uint_eq(s.e[0].attempt, 3);
	seen_done(&s);
	ck_assert_int_eq(spool_remove(dir, a), 0);
	snprintf(path, sizeof(path), "%s/%s.log", dir, a);
	ck_assert_int_eq(access(path, F_OK), -1);
}
END_TEST

START_TEST(test_clean_leftovers)
{
	char a[SPOOL_NAME_MAX], p[4096];
	struct spool_tail t = {.data = "x", .len = 1};
	const char *junk[] = {"r-4@0123456789abcdef.complete.tmpAbC123",
	                      "r-4@0123456789abcdef.log.tmpAbC123", "r-5@00000000000000ff.log"};

	for (size_t i = 0; i < ELEMENTSOF(junk); i++) {
		snprintf(p, sizeof(p), "%s/%s", dir, junk[i]);
		ck_assert_int_eq(write_file_atomic(p, "j", 1, 0600), 0);
	}
	name_of("r-6", "tok", a);
	ck_assert_int_eq(spool_write(dir, a, "{}", 1024, &t), 0);
	ck_assert_int_eq(spool_clean(dir, NULL, NULL), 3);
	ck_assert_int_eq(spool_count(dir), 1);
	snprintf(p, sizeof(p), "%s/%s.log", dir, a);
	ck_assert_int_eq(access(p, F_OK), 0); /* a live entry's tail stays */
}
END_TEST

START_TEST(test_set_log_length)
{
	char *body = strdup("{\"token\":\"a\\\"log_length\\\":1\",\"log_length\":12,"
	                    "\"output\":{\"log_length\":3}}");

	ck_assert_int_eq(spool_body_set_log_length(&body, 20000), 0);
	ck_assert_str_eq(body, "{\"token\":\"a\\\"log_length\\\":1\",\"log_length\":20000,"
	                       "\"output\":{\"log_length\":3}}");
	free(body);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("spool_unit");
	TCase *tc = tcase_create("spool");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_entries_per_lease);
	tcase_add_test(tc, test_body_cap_shared);
	tcase_add_test(tc, test_tail_round_trip);
	tcase_add_test(tc, test_clean_leftovers);
	tcase_add_test(tc, test_set_log_length);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
