/* lib/util: durations, uuidv7, backoff, buffers, strv, files. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"
#include "util/buf.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/random.h"
#include "util/strutil.h"
#include "util/tail.h"
#include "util/time.h"

START_TEST(test_duration_parse)
{
	static const struct {
		const char *in;
		usec_t want;
	} ok[] = {
	    {"90s", 90 * USEC_PER_SEC},
	    {"5min", 5 * USEC_PER_MINUTE},
	    {"1h", USEC_PER_HOUR},
	    {"250ms", 250 * USEC_PER_MSEC},
	    {"90", 90 * USEC_PER_SEC},
	    {"1h 30min", 90 * USEC_PER_MINUTE},
	    {"1h30min", 90 * USEC_PER_MINUTE},
	    {"2.5s", 2500 * USEC_PER_MSEC},
	    {" 10 s", 10 * USEC_PER_SEC},
	    {"0", 0},
	    {"infinity", USEC_INFINITY},
	    {"3 minutes", 3 * USEC_PER_MINUTE},
	};
	static const char *const bad[] = {"", "s", "10x", "-5s", "1h 30", "1..5s", "abc", "5 m s"};
	usec_t u;

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		ck_assert_msg(time_parse_duration(ok[i].in, &u) == 0, "parse %s", ok[i].in);
		ck_assert_msg(u == ok[i].want, "%s -> %llu", ok[i].in, (unsigned long long)u);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(time_parse_duration(bad[i], &u) < 0, "accepted '%s'", bad[i]);
	ck_assert_int_eq(time_parse_duration("99999999999999999999h", &u), -ERANGE);
}
END_TEST

START_TEST(test_duration_format)
{
	char b[TIME_DURATION_MAX];

	ck_assert_str_eq(time_format_duration(b, sizeof(b), 90 * USEC_PER_SEC), "1min30s");
	ck_assert_str_eq(time_format_duration(b, sizeof(b), 250 * USEC_PER_MSEC), "250ms");
	ck_assert_str_eq(time_format_duration(b, sizeof(b), USEC_INFINITY), "infinity");
	ck_assert_str_eq(time_format_duration(b, sizeof(b), 0), "0");
}
END_TEST

/* One UTF-8 decoder for conf, metrics and the Conductor driver. */
START_TEST(test_utf8_seq_len)
{
	static const struct {
		const char *s;
		size_t n, want;
	} cases[] = {
	    {"a", 1, 1},
	    {"", 1, 1} /* a NUL is one byte */,
	    {"\xc3\xa9", 2, 2},
	    {"\xc3", 1, 0} /* cut short */,
	    {"\xc0\xaf", 2, 0}, /* overlong */
	    {"\xe2\x82\xac", 3, 3},
	    {"\xe0\x80\xaf", 3, 0} /* overlong */,
	    {"\xed\xa0\x80", 3, 0} /* a surrogate */,
	    {"\xf0\x9f\x98\x80", 4, 4},
	    {"\xf4\x90\x80\x80", 4, 0} /* past U+10FFFF */,
	    {"\xe2\x82", 4, 0} /* stops at the NUL */,
	    {"\x80", 1, 0},
	    {"\xff", 1, 0},
	};

	for (size_t i = 0; i < ELEMENTSOF(cases); i++)
		ck_assert_msg(utf8_seq_len(cases[i].s, cases[i].n) == cases[i].want, "case %zu", i);
}
END_TEST

START_TEST(test_uuid_v7)
{
	char a[UUID_STRING_MAX], b[UUID_STRING_MAX];

	uuid_v7(a);
	uuid_v7(b);
	ck_assert_int_eq(strlen(a), 36);
	ck_assert_int_eq(a[14], '7');
	ck_assert(strchr("89ab", a[19]));
	ck_assert_str_ne(a, b);
	/* time-ordered: the first 48 bits never go backwards */
	ck_assert(strncmp(a, b, 13) <= 0);
}
END_TEST

START_TEST(test_backoff)
{
	usec_t base = 100 * USEC_PER_MSEC, cap = 10 * USEC_PER_SEC;

	for (unsigned attempt = 0; attempt < 40; attempt++)
		for (int i = 0; i < 50; i++) {
			usec_t d = backoff_full_jitter(base, cap, attempt, 0);
			usec_t ceil = attempt < 7 ? base << attempt : cap;

			ck_assert_uint_le(d, ceil > cap ? cap : ceil);
		}
	/* Retry-After is a floor */
	ck_assert_uint_ge(backoff_full_jitter(base, cap, 3, 5 * USEC_PER_SEC), 5 * USEC_PER_SEC);
	/* jitter actually spreads: 100 draws are not all equal */
	usec_t first = backoff_full_jitter(base, cap, 5, 0);
	int same = 0;
	for (int i = 0; i < 100; i++)
		same += backoff_full_jitter(base, cap, 5, 0) == first;
	ck_assert_int_lt(same, 100);
}
END_TEST

START_TEST(test_buf_cap)
{
	struct buf b = BUF_INIT(8);

	ck_assert_int_eq(buf_append(&b, "12345678", 8), 0);
	ck_assert_int_eq(buf_append(&b, "9", 1), -E2BIG);
	ck_assert_uint_eq(b.len, 8);
	buf_consume(&b, 3);
	ck_assert_str_eq(b.data, "45678");
	ck_assert_int_eq(buf_printf(&b, "%d", 12), 0);
	ck_assert_str_eq(b.data, "4567812");
	buf_done(&b);
}
END_TEST

/* Found by fuzz/metrics: a cap of SIZE_MAX ("as much as fits") made the
 * allocation cap + 1 = 0 bytes, and the append wrote past it. */
START_TEST(test_buf_cap_size_max)
{
	struct buf b = BUF_INIT(SIZE_MAX);

	ck_assert_int_eq(buf_append(&b, "hello", 5), 0);
	ck_assert_int_eq(buf_appends(&b, ", world"), 0);
	ck_assert_uint_ge(b.alloc, b.len + 1);
	ck_assert_str_eq(b.data, "hello, world");
	buf_done(&b);
}
END_TEST

START_TEST(test_strv)
{
	char **v = NULL;

	ck_assert_int_eq(strv_split(" b, a ,,c, a", ",", &v), 0);
	ck_assert_uint_eq(strv_length(v), 4);
	strv_sort_uniq(v);
	ck_assert_uint_eq(strv_length(v), 3);
	ck_assert_str_eq(v[0], "a");
	ck_assert_str_eq(v[2], "c");
	ck_assert(strv_contains(v, "b"));
	{
		char *same[] = {"a", "b", "c", NULL}, *shorter[] = {"a", "b", NULL};
		char *empty[] = {NULL};

		ck_assert(strv_equal(v, same));
		ck_assert(!strv_equal(v, shorter) && !strv_equal(shorter, v));
		ck_assert(strv_equal(NULL, empty) && !strv_equal(NULL, shorter));
	}
	strv_free(v);
	ck_assert(str_in_charset("r-81.x:y", 1, 128, "._:-"));
	ck_assert(!str_in_charset("r 81", 1, 128, "._:-"));
	ck_assert(!str_in_charset("", 1, 128, "._:-"));
}
END_TEST

/* Under a tight umask (the units' UMask=0077) the directories mkdir_p makes
 * still get the mode asked for: a run of another user must traverse them. */
START_TEST(test_mkdir_p_mode)
{
	_cleanup_free_ char *dir = tu_tmpdir("mkdirp"), *deep = NULL, *mid = NULL;
	mode_t old = umask(077);
	struct stat st;

	ck_assert_ptr_nonnull(dir);
	ck_assert_int_ge(asprintf(&mid, "%s/a", dir), 0);
	ck_assert_int_ge(asprintf(&deep, "%s/a/b/c", dir), 0);
	ck_assert_int_eq(mkdir_p(deep, 0711), 0);
	umask(old);
	ck_assert_int_eq(stat(mid, &st), 0);
	ck_assert_uint_eq(st.st_mode & 07777, 0711);
	ck_assert_int_eq(stat(deep, &st), 0);
	ck_assert_uint_eq(st.st_mode & 07777, 0711);
	ck_assert_int_eq(mkdir_p(deep, 0700), 0); /* an existing one is left alone */
	ck_assert_int_eq(stat(deep, &st), 0);
	ck_assert_uint_eq(st.st_mode & 07777, 0711);
	rm_rf(dir);
}
END_TEST

START_TEST(test_files)
{
	char *dir = tu_tmpdir("util"), path[512], *data;
	size_t len;
	int before = fd_count();

	snprintf(path, sizeof(path), "%s/a/b/c", dir);
	ck_assert_int_eq(mkdir_p(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/a/b/c/f", dir);
	ck_assert_int_eq(write_file_atomic(path, "hello", 5, 0600), 0);
	ck_assert_int_eq(read_file_capped(path, 5, &data, &len), 0);
	ck_assert_str_eq(data, "hello");
	free(data);
	ck_assert_int_eq(read_file_capped(path, 4, &data, &len), -EFBIG);
	snprintf(path, sizeof(path), "%s/a/link", dir);
	ck_assert_int_eq(symlink("/etc", path), 0);
	ck_assert_int_eq(rm_rf(dir), 0);
	ck_assert_int_eq(access(dir, F_OK), -1);
	ck_assert_int_eq(access("/etc/passwd", F_OK), 0); /* the symlink was not followed */
	ck_assert_int_eq(fd_count(), before);
	free(dir);
}
END_TEST

/* A child's verdict: 0 when it exited 0. */
static int child_status(pid_t pid)
{
	int st;

	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* A run may leave a tree deeper than anything sane: removed whole, with a
 * few directory fds at most (four removals run at once on the helper
 * threads, from the daemon's fd reserve). */
START_TEST(test_rm_rf_deep_with_few_fds)
{
	char *dir = tu_tmpdir("util");
	pid_t pid = fork();

	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int fd = open(dir, O_RDONLY | O_DIRECTORY), code = 0;
		struct rlimit rl;

		for (int i = 0; fd >= 0 && i < 600; i++) {
			int sub = mkdirat(fd, "d", 0700) < 0 ? -1 : openat(fd, "d", O_RDONLY);

			close(fd);
			fd = sub;
		}
		if (fd < 0 || mkdirat(fd, "leaf", 0700) < 0)
			code = 2;
		close(fd);
		rl.rlim_cur = rl.rlim_max = (rlim_t)fd_count() + 3 + 24;
		/* valgrind keeps RLIMIT_NOFILE to itself (EPERM): there only the depth */
		if (!code && setrlimit(RLIMIT_NOFILE, &rl) < 0 && !tu_wrapped())
			code = 3;
		if (!code && (rm_rf(dir) < 0 || access(dir, F_OK) == 0))
			code = 1;
		free(dir); /* valgrind checks the child's leaks too */
		_exit(code);
	}
	ck_assert_int_eq(child_status(pid), 0);
	rm_rf(dir);
	free(dir);
}
END_TEST

static bool touch_at(int dfd, const char *name)
{
	int fd = openat(dfd, name, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);

	return fd >= 0 && close(fd) == 0;
}

/* As nobody: top holding sub/f and ro/g, then g made 000, ro 0500, sub and
 * top 000.  0, or -1. */
static int shut_tree(const char *top)
{
	bool ok;
	int fd;

	if (setgid(65534) < 0 || setuid(65534) < 0 || mkdir(top, 0700) < 0 ||
	    (fd = open(top, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		return -1;
	ok = mkdirat(fd, "sub", 0700) == 0 && touch_at(fd, "sub/f") &&
	     mkdirat(fd, "ro", 0700) == 0 && touch_at(fd, "ro/g") &&
	     fchmodat(fd, "ro/g", 0, 0) == 0 && fchmodat(fd, "ro", 0500, 0) == 0 &&
	     fchmodat(fd, "sub", 0, 0) == 0 && fchmod(fd, 0) == 0;
	close(fd);
	return ok ? 0 : -1;
}

/* What a run made unreadable or unwritable (chmod 000, of a subdirectory or
 * of its own directory) is removed by its owner: a daemon that is not root
 * has no DAC override to walk past it. */
START_TEST(test_rm_rf_modes_taken_away)
{
	char *dir = tu_tmpdir("util"), *top = NULL;
	pid_t pid;

	ck_assert_int_ge(asprintf(&top, "%s/top", dir), 0);
	ck_assert_int_eq(chown(dir, 65534, 65534), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int code = shut_tree(top) < 0                         ? 2
		           : rm_rf(top) == 0 && access(top, F_OK) < 0 ? 0
		                                                      : 1;

		free(top); /* valgrind checks the child's leaks too */
		free(dir);
		_exit(code);
	}
	ck_assert_int_eq(child_status(pid), 0);
	rm_rf(dir);
	free(top);
	free(dir);
}
END_TEST

/* The last output of a run: bounded, whole lines once cut, valid UTF-8. */
START_TEST(test_tail)
{
	struct tail t;
	char *s;
	char big[100];

	tail_init(&t, 16);
	s = tail_text(&t);
	ck_assert_str_eq(s, "");
	free(s);
	ck_assert_int_eq(tail_feed(&t, "ab", 2), 0);
	ck_assert_int_eq(tail_feed(&t, "c\nd", 3), 0);
	s = tail_text(&t);
	ck_assert_str_eq(s, "abc\nd"); /* all of it: nothing cut */
	free(s);
	/* past the cap: the newest 16 bytes, from the first line that starts in them */
	ck_assert_int_eq(tail_feed(&t, "ef\nline two\nend\n", 16), 0);
	s = tail_text(&t);
	ck_assert_str_eq(s, "line two\nend\n");
	free(s);
	/* one line longer than the cap: its end, not nothing; never half a character */
	tail_done(&t);
	tail_init(&t, 8);
	ck_assert_int_eq(tail_feed(&t, "xx\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9", 10), 0);
	s = tail_text(&t);
	ck_assert_str_eq(s, "\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9");
	free(s);
	/* bad bytes and NULs: U+FFFD */
	ck_assert_int_eq(tail_feed(&t, "a\xff\0b", 4), 0);
	s = tail_text(&t);
	ck_assert_ptr_nonnull(strstr(s, "a\xef\xbf\xbd\xef\xbf\xbd"
	                                "b"));
	free(s);
	/* many small writes: never more than the cap kept */
	memset(big, 'z', sizeof(big));
	for (int i = 0; i < 1000; i++)
		ck_assert_int_eq(tail_feed(&t, big, sizeof(big)), 0);
	ck_assert_uint_le(t.b.len, 2 * 8);
	tail_done(&t);
}
END_TEST

static Suite *util_suite(void)
{
	Suite *s = suite_create("util");
	TCase *tc = tcase_create("core");

	tcase_add_test(tc, test_duration_parse);
	tcase_add_test(tc, test_duration_format);
	tcase_add_test(tc, test_uuid_v7);
	tcase_add_test(tc, test_utf8_seq_len);
	tcase_add_test(tc, test_tail);
	tcase_add_test(tc, test_backoff);
	tcase_add_test(tc, test_buf_cap);
	tcase_add_test(tc, test_buf_cap_size_max);
	tcase_add_test(tc, test_strv);
	tcase_add_test(tc, test_files);
	tcase_add_test(tc, test_rm_rf_deep_with_few_fds);
	tcase_add_test(tc, test_rm_rf_modes_taken_away);
	tcase_add_test(tc, test_mkdir_p_mode);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(util_suite());
}
