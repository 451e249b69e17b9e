/* The fuzz harnesses (fuzz/<name>.c) in the normal build: every seed of
 * fuzz/corpus/<name>/ and every input a fuzzer once crashed on,
 * fuzz/regress/<name>/, replayed through the same entry point, so a crash
 * found and fixed stays fixed under `make check` (and ASan/UBSan with
 * SANITIZE=...).  A harness aborts on a failed property; the input being
 * replayed is named on stderr then. */
#include <check.h>
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"

#define HARNESSES(X)                                                                               \
	X(answers)                                                                                 \
	X(claim)                                                                                   \
	X(camunda7_answers)                                                                        \
	X(conductor_answers)                                                                       \
	X(conf_load)                                                                               \
	X(conf_value)                                                                              \
	X(json_scan)                                                                               \
	X(lessor_api)                                                                              \
	X(lessor_fields)                                                                           \
	X(metrics)                                                                                 \
	X(retry_after)                                                                             \
	X(status)

#define DECLARE(name) int fuzz_##name(const uint8_t *data, size_t size);
HARNESSES(DECLARE)

static char current[512];

static void on_fatal(int sig)
{
	static const char pre[] = "check_fuzz_regress: crashed on ";

	if (write(STDERR_FILENO, pre, sizeof(pre) - 1) < 0 ||
	    write(STDERR_FILENO, current, strlen(current)) < 0 || write(STDERR_FILENO, "\n", 1) < 0)
		_exit(99);
	signal(sig, SIG_DFL);
	raise(sig);
}

/* Every regular file of <srcdir>/fuzz/<kind>/<name>/ through fn. */
static unsigned replay(const char *kind, const char *name, int (*fn)(const uint8_t *, size_t))
{
	const char *top = getenv("LESSEE_SRCDIR");
	_cleanup_free_ char *dir = NULL;
	struct dirent **list = NULL;
	unsigned done = 0;
	int n;

	ck_assert_int_ge(asprintf(&dir, "%s/fuzz/%s/%s", top ? top : ".", kind, name), 0);
	n = scandir(dir, &list, NULL, alphasort);
	if (n < 0)
		return 0;
	for (int i = 0; i < n; i++) {
		_cleanup_free_ char *data = NULL;
		size_t len;

		snprintf(current, sizeof(current), "%s/%s", dir, list[i]->d_name);
		if (list[i]->d_name[0] != '.' &&
		    read_file_capped(current, 1 << 20, &data, &len) == 0) {
			fn((const uint8_t *)data, len);
			done++;
		}
		free(list[i]);
	}
	free(list);
	return done;
}

#define TEST(name)                                                                                 \
	START_TEST(test_##name)                                                                    \
	{                                                                                          \
		unsigned seeds = replay("corpus", #name, fuzz_##name);                             \
                                                                                                   \
		ck_assert_msg(seeds > 0, "no seed corpus in fuzz/corpus/" #name);                  \
		(void)replay("regress", #name, fuzz_##name);                                       \
	}                                                                                          \
	END_TEST
HARNESSES(TEST)

static Suite *fuzz_regress_suite(void)
{
	Suite *s = suite_create("fuzz_regress");
	TCase *tc = tcase_create("replay");

	tcase_set_timeout(tc, 120);
#define ADD(name) tcase_add_test(tc, test_##name);
	HARNESSES(ADD)
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	/* conf_load and lessor_api write their files under TMPDIR: one of ours */
	char tmp[] = "/tmp/check_fuzz_regress.XXXXXX";
	int r;

	if (!mkdtemp(tmp) || setenv("TMPDIR", tmp, 1) < 0)
		return 99;
	signal(SIGABRT, on_fatal);
	signal(SIGSEGV, on_fatal);
	r = tu_run(fuzz_regress_suite());
	(void)rm_rf(tmp);
	return r;
}
