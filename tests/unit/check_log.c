/* lib/log: logfmt and JSON lines are well-formed whatever the message holds. */
#include <cJSON.h>
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
	struct log_fields f = {.run_id = "r-1", .workflow = "build", .attempt = 2,
			       .outcome = "crash"};

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

int main(void)
{
	Suite *s = suite_create("log");
	TCase *tc = tcase_create("log");

	tcase_add_test(tc, test_json_lines);
	tcase_add_test(tc, test_logfmt);
	tcase_add_test(tc, test_levels);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
