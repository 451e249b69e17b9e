/* A run that cannot start for want of something of this host's (run_dir's
 * file system full: ENOSPC; also EDQUOT, EMFILE, ENFILE, EAGAIN, ENOMEM) is
 * not the run's fault: it is reported as a retry, not a spawn_error that
 * fails it for good; its workflow's breaker gets no verdict; and the daemon
 * takes no more runs for a while, saying why in /readyz, so a full disk does
 * not burn the queue.  Once the disk has room again, the run succeeds on its
 * next attempt.  Real lessee, real lessor, a real tmpfs (root only: skipped
 * otherwise). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "jsonutil.h"
#include "lessee_proc.h"
#include "lessor_proc.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"

#define SEC USEC_PER_SEC

static char *tmp, *runs, *filler;
static struct tu_lessor *L;
static struct tu_lessee *D;

static void setup(void)
{
	static char *const args[] = {"--retry-base", "1s", NULL};

	tmp = tu_tmpdir("hosttrouble");
	ck_assert_ptr_nonnull(tmp);
	runs = tu_fmt("%s/runs", tmp);
	filler = tu_fmt("%s/filler", runs);
	ck_assert_int_eq(mkdir(runs, 0711), 0);
	ck_assert_msg(mount("tmpfs", runs, "tmpfs", 0, "size=256k,mode=0711") == 0, "mount: %m");
	ck_assert_int_eq(tu_lessor_start(&(struct tu_lessor_opts){.args = args}, &L), 0);
}

static void teardown(void)
{
	D = tu_lessee_free(D);
	if (L && tu_lessor_pid(L) > 0)
		ck_assert_int_eq(tu_lessor_stop(L), 0);
	L = tu_lessor_free(L);
	umount2(runs, MNT_DETACH);
	rm_rf(tmp);
	free(filler);
	free(runs);
	free(tmp);
}

/* Fill the file system until a write fails with ENOSPC. */
static void fill(void)
{
	char block[4096];
	int fd = open(filler, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	ck_assert_int_ge(fd, 0);
	memset(block, 'f', sizeof(block));
	while (write(fd, block, sizeof(block)) > 0)
		;
	ck_assert_int_eq(errno, ENOSPC);
	close(fd);
}

static size_t count(const char *hay, const char *needle)
{
	size_t n = 0;

	for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

/* The time of the log line holding needle (its ts=...Z, ms since the
 * epoch); -1 when there is none. */
static long long line_ms(const char *log, const char *needle)
{
	const char *p = strstr(log, needle), *ts;
	struct tm tm = {0};
	int ms = 0;

	if (!p)
		return -1;
	for (ts = p; ts > log && ts[-1] != '\n'; ts--)
		;
	if (sscanf(ts, "ts=%d-%d-%dT%d:%d:%d.%dZ", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
	           &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms) != 7)
		return -1;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	return (long long)timegm(&tm) * 1000 + ms;
}

START_TEST(test_full_run_dir_is_a_retry)
{
	_cleanup_free_ char *conf = NULL, *ready = NULL, *log = NULL;
	char *ids[3], *second;
	long status = 0;
	usec_t until;

	fill();
	/* one slot, two runs claimed ahead of it (worker.prefetch) */
	conf = tu_fmt("[worker]\nconcurrency = 1\nprefetch = 2\nrun_dir = %s\n"
	              "max_consecutive_failures = 1\n[status]\nlisten = 127.0.0.1:0\n"
	              "[workflow.w]\ncommand = /bin/true\n",
	              runs);
	for (int i = 0; i < 3; i++) {
		ids[i] =
		    tu_lessor_enqueue(L, "{\"workflow\":\"w\",\"max_attempts\":8,"
		                         "\"input\":{\"text\":\"a run's input, for input.json\"}}");
		ck_assert_ptr_nonnull(ids[i]);
	}
	ck_assert_int_eq(tu_lessee_start(&(struct tu_lessee_opts){.lessor = L, .conf = conf}, &D),
	                 0);
	/* held back, and saying why, while the disk stays full */
	until = time_mono() + tu_timeout(20 * SEC);
	do {
		free(ready);
		ready = tu_lessee_status_get(D, "/readyz", &status);
	} while ((status != 503 || !ready || !strstr(ready, "No space left on device")) &&
	         time_mono() < until && (tu_sleep(20 * USEC_PER_MSEC), true));
	ck_assert_msg(status == 503 && ready && strstr(ready, "No space left on device"),
	              "/readyz: %ld %s", status, ready ? ready : "-");
	/* one run tried per hold, not the runs claimed ahead one after another */
	ck_assert_int_eq(tu_lessee_wait_log(D, "no claims for 2s", tu_timeout(20 * SEC)), 0);
	log = tu_lessee_log(D);
	ck_assert_ptr_nonnull(log);
	/* the second hold began when the first was over, not at the next run of
	 * the same claim */
	ck_assert_int_ge(line_ms(log, "no claims for 2s") - line_ms(log, "no claims for 1s"), 900);
	second = strstr(log, "no claims for 2s");
	*second = '\0';
	ck_assert_uint_eq(count(log, "could not start"), 2);
	/* room again: the runs run */
	ck_assert_int_eq(unlink(filler), 0);
	for (int i = 0; i < 3; i++) {
		ck_assert_int_eq(
		    tu_lessor_wait_status(L, ids[i], "succeeded", tu_timeout(90 * SEC)), 0);
		free(ids[i]);
	}
	/* not the workflow's failures: no verdict for its breaker (1 failure opens it) */
	ck_assert_double_ge(tu_lessee_metric(D, "lessee_runs_finished_total", "outcome", "retry"),
	                    2);
	ck_assert_double_eq(
	    tu_lessee_metric(D, "lessee_runs_finished_total", "outcome", "spawn_error"), 0);
	ck_assert_double_eq(tu_lessee_metric(D, "lessee_workflow_blocked", "workflow", "w"), 0);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("host_trouble");
	TCase *tc = tcase_create("host_trouble");

	if (geteuid() != 0) {
		fprintf(stderr, "check_host_trouble: needs root to mount a tmpfs: skipped\n");
		return 77;
	}
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 150);
	tcase_add_test(tc, test_full_run_dir_is_a_retry);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
