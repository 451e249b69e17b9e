/* lib/log: logfmt and JSON lines are well-formed whatever the message holds;
 * buffered per loop turn, one write per flush, nothing lost at exit or crash. */
#include <cJSON.h>
#include <check.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "log/log.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"

static const char *const hostile = "a \"quoted\" = b\\c\nnew line\ttab\x01 end";

/* Run fn with stderr sent to a file; return what it wrote. */
static char *capture(void (*fn)(void))
{
	char path[] = "/tmp/lessee-test-log-XXXXXX";
	int fd = mkstemp(path), saved = dup(STDERR_FILENO);
	char *out = NULL;

	ck_assert_int_ge(fd, 0);
	dup2(fd, STDERR_FILENO);
	fn();
	dup2(saved, STDERR_FILENO);
	close(saved);
	close(fd);
	ck_assert_int_eq(read_file_capped(path, 1 << 20, &out, NULL), 0);
	unlink(path);
	return out;
}

static void emit_some(void)
{
	struct log_fields f = {
	    .run_id = "r-1", .workflow = "build", .attempt = 2, .outcome = "crash"};

	log_set_worker_id("w 1");
	log_emit(LOG_WARNING, &f, "%s", hostile);
	log_debug("not shown at info");
}

START_TEST(test_json_lines)
{
	_cleanup_free_ char *out = NULL;
	cJSON *j;

	log_setup("test", LOG_FORMAT_JSON, LOG_INFO);
	out = capture(emit_some);
	ck_assert_int_eq(strchr(out, '\n') - out + 1, (long)strlen(out)); /* one line */
	j = cJSON_Parse(out);
	ck_assert_ptr_nonnull(j);
	ck_assert_str_eq(cJSON_GetObjectItem(j, "msg")->valuestring, hostile);
	ck_assert_str_eq(cJSON_GetObjectItem(j, "level")->valuestring, "warning");
	ck_assert_str_eq(cJSON_GetObjectItem(j, "run_id")->valuestring, "r-1");
	ck_assert_str_eq(cJSON_GetObjectItem(j, "attempt")->valuestring, "2");
	ck_assert_str_eq(cJSON_GetObjectItem(j, "worker_id")->valuestring, "w 1");
	cJSON_Delete(j);
}
END_TEST

START_TEST(test_logfmt)
{
	_cleanup_free_ char *out = NULL;

	log_setup("test", LOG_FORMAT_LOGFMT, LOG_INFO);
	out = capture(emit_some);
	ck_assert_int_eq(strchr(out, '\n') - out + 1, (long)strlen(out));
	ck_assert_ptr_nonnull(strstr(out, " level=warning "));
	ck_assert_ptr_nonnull(
	    strstr(out, " msg=\"a \\\"quoted\\\" = b\\\\c\\nnew line\\x09tab\\x01 end\""));
	ck_assert_ptr_nonnull(strstr(out, " worker_id=\"w 1\""));
	ck_assert_ptr_nonnull(strstr(out, " run_id=r-1 workflow=build attempt=2 outcome=crash\n"));
}
END_TEST

START_TEST(test_levels)
{
	int lvl;
	enum log_format fmt;

	ck_assert_int_eq(log_parse_level("debug", &lvl), 0);
	ck_assert_int_eq(lvl, LOG_DEBUG);
	ck_assert_int_eq(log_parse_level("warn", &lvl), 0);
	ck_assert_int_eq(lvl, LOG_WARNING);
	ck_assert_int_lt(log_parse_level("loud", &lvl), 0);
	ck_assert_int_eq(log_parse_format("json", &fmt), 0);
	ck_assert_int_eq(fmt, LOG_FORMAT_JSON);
	/* auto without JOURNAL_STREAM: logfmt */
	unsetenv("JOURNAL_STREAM");
	log_setup("test", LOG_FORMAT_AUTO, LOG_INFO);
	ck_assert_int_eq(log_get_format(), LOG_FORMAT_LOGFMT);
	/* a JOURNAL_STREAM that is not our stderr (inherited by a child): still logfmt */
	setenv("JOURNAL_STREAM", "1:1", 1);
	log_setup("test", LOG_FORMAT_AUTO, LOG_INFO);
	ck_assert_int_eq(log_get_format(), LOG_FORMAT_LOGFMT);
	unsetenv("JOURNAL_STREAM");
}
END_TEST

/* ---- lines buffered per loop turn ---- */

/* stderr to a packet-mode pipe (O_DIRECT): each read returns one write(2),
 * so counting reads counts writes.  The read end is non-blocking. */
static int packet_stderr(int *ret_saved)
{
	int p[2];

	ck_assert_int_eq(pipe2(p, O_DIRECT | O_CLOEXEC), 0);
	ck_assert_int_eq(fcntl(p[0], F_SETFL, O_NONBLOCK), 0);
	*ret_saved = dup(STDERR_FILENO);
	ck_assert_int_ge(dup2(p[1], STDERR_FILENO), 0);
	close(p[1]);
	return p[0];
}

static void restore_stderr(int saved)
{
	dup2(saved, STDERR_FILENO);
	close(saved);
}

/* Writes waiting in the pipe: their count, their bytes appended to out. */
static int drain_writes(int fd, char *out, size_t size)
{
	char pkt[PIPE_BUF];
	size_t used = strlen(out);
	int n = 0;
	ssize_t k;

	while ((k = read(fd, pkt, sizeof(pkt))) > 0) {
		ck_assert_int_lt(used + (size_t)k, size);
		memcpy(out + used, pkt, (size_t)k);
		used += (size_t)k;
		out[used] = '\0';
		ck_assert_int_eq(pkt[k - 1], '\n'); /* whole lines only */
		n++;
	}
	return n;
}

static int count_lines(const char *s)
{
	int n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}

START_TEST(test_buffered_lines_one_write_per_turn)
{
	char out[16384] = "";
	int saved, fd = packet_stderr(&saved);

	log_setup("test", LOG_FORMAT_LOGFMT, LOG_DEBUG);
	log_set_buffered(true);
	for (int i = 0; i < 10; i++)
		log_info("line %d of this turn", i);
	ck_assert_int_eq(drain_writes(fd, out, sizeof(out)), 0); /* nothing yet */
	log_flush();
	ck_assert_int_eq(drain_writes(fd, out, sizeof(out)), 1);
	ck_assert_int_eq(count_lines(out), 10);
	ck_assert_ptr_nonnull(strstr(out, "msg=\"line 0 of this turn\""));
	ck_assert_ptr_nonnull(strstr(out, "msg=\"line 9 of this turn\""));
	log_flush(); /* nothing left: no empty write */
	ck_assert_int_eq(drain_writes(fd, out, sizeof(out)), 0);
	log_set_buffered(false);
	log_info("unbuffered");
	ck_assert_int_eq(drain_writes(fd, out, sizeof(out)), 1);
	restore_stderr(saved);
	close(fd);
}
END_TEST

/* A warning (or worse) goes out at once, with the lines before it, in order. */
START_TEST(test_buffered_warning_flushes_at_once)
{
	char out[16384] = "";
	int saved, fd = packet_stderr(&saved);

	log_setup("test", LOG_FORMAT_JSON, LOG_INFO);
	log_set_buffered(true);
	log_info("before");
	log_notice("also before");
	log_error("the error");
	ck_assert_int_eq(drain_writes(fd, out, sizeof(out)), 1);
	ck_assert_int_eq(count_lines(out), 3);
	ck_assert_ptr_nonnull(strstr(out, "before"));
	ck_assert(strstr(out, "also before") < strstr(out, "the error"));
	log_set_buffered(false);
	restore_stderr(saved);
	close(fd);
}
END_TEST

/* The buffer is bounded: a turn of many lines writes whenever the next line
 * would not fit, each write whole lines and at most PIPE_BUF (atomic on a pipe). */
START_TEST(test_buffered_bounded)
{
	static char out[1 << 17];
	int saved, fd = packet_stderr(&saved), writes;

	out[0] = '\0';
	log_setup("test", LOG_FORMAT_LOGFMT, LOG_INFO);
	log_set_buffered(true);
	for (int i = 0; i < 200; i++)
		log_info("line %d, padded to be long enough to fill a buffer soon: %0100d", i, i);
	writes = drain_writes(fd, out, sizeof(out));
	ck_assert_int_gt(writes, 0);
	log_flush();
	writes += drain_writes(fd, out, sizeof(out));
	ck_assert_int_eq(count_lines(out), 200);
	ck_assert_int_le(writes, (int)(strlen(out) / (PIPE_BUF / 2)) + 1);
	log_set_buffered(false);
	restore_stderr(saved);
	close(fd);
}
END_TEST

enum child_end { END_EXIT, END_ABORT, END_SEGV };

/* A child logs one info line, buffered, and ends: what reached stderr. */
static char *child_lines(enum child_end how, int *ret_status)
{
	char out[4096] = "";
	int p[2];
	pid_t pid;

	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		dup2(p[1], STDERR_FILENO);
		log_setup("test", LOG_FORMAT_LOGFMT, LOG_INFO);
		log_set_buffered(true);
		log_info("last words");
		if (how == END_ABORT)
			abort();
		if (how == END_SEGV)
			raise(SIGSEGV);
		exit(0);
	}
	close(p[1]);
	for (size_t used = 0;;) {
		ssize_t k = read(p[0], out + used, sizeof(out) - 1 - used);

		if (k <= 0)
			break;
		used += (size_t)k;
		out[used] = '\0';
	}
	close(p[0]);
	ck_assert_int_eq(waitpid(pid, ret_status, 0), pid);
	return strdup(out);
}

START_TEST(test_buffered_nothing_lost_at_exit_or_crash)
{
	_cleanup_free_ char *at_exit = NULL, *at_abort = NULL, *at_segv = NULL;
	int st;

	at_exit = child_lines(END_EXIT, &st);
	ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	ck_assert_ptr_nonnull(strstr(at_exit, "msg=\"last words\""));
	at_abort = child_lines(END_ABORT, &st);
	ck_assert(!WIFEXITED(st) || WEXITSTATUS(st) != 0);
	ck_assert_ptr_nonnull(strstr(at_abort, "msg=\"last words\""));
	at_segv = child_lines(END_SEGV, &st);
	ck_assert(!WIFEXITED(st) || WEXITSTATUS(st) != 0);
	ck_assert_ptr_nonnull(strstr(at_segv, "msg=\"last words\""));
}
END_TEST

static void *thread_logs(void *arg)
{
	log_info("from a helper thread");
	return NULL;
}

/* Only the thread that turned buffering on buffers: another thread's line is
 * written at once and never touches the buffer. */
START_TEST(test_buffered_other_thread_writes_at_once)
{
	char out[16384] = "";
	int saved, fd = packet_stderr(&saved);
	pthread_t t;

	log_setup("test", LOG_FORMAT_LOGFMT, LOG_INFO);
	log_set_buffered(true);
	log_info("loop line");
	ck_assert_int_eq(pthread_create(&t, NULL, thread_logs, NULL), 0);
	pthread_join(t, NULL);
	ck_assert_int_eq(drain_writes(fd, out, sizeof(out)), 1);
	ck_assert_ptr_nonnull(strstr(out, "from a helper thread"));
	ck_assert_ptr_null(strstr(out, "loop line"));
	log_set_buffered(false); /* flushes */
	ck_assert_int_eq(drain_writes(fd, out, sizeof(out)), 1);
	ck_assert_ptr_nonnull(strstr(out, "loop line"));
	restore_stderr(saved);
	close(fd);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("log");
	TCase *tc = tcase_create("log");

	tcase_add_test(tc, test_json_lines);
	tcase_add_test(tc, test_logfmt);
	tcase_add_test(tc, test_levels);
	tcase_add_test(tc, test_buffered_lines_one_write_per_turn);
	tcase_add_test(tc, test_buffered_warning_flushes_at_once);
	tcase_add_test(tc, test_buffered_bounded);
	tcase_add_test(tc, test_buffered_nothing_lost_at_exit_or_crash);
	tcase_add_test(tc, test_buffered_other_thread_writes_at_once);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
