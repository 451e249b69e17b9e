/* The spool on a slow file system, end to end: a real FUSE file system
 * (tests/aux/slowfs) whose fsync sleeps, the real daemon, a real lessor with
 * fault injection, real children.
 *
 * A hard stop spools a run that exited while the log endpoint failed; while
 * the spool's fsyncs sleep, the loop goes on: /healthz answers at once and the
 * lease of another run, still dying under the same stop, is renewed.  The
 * daemon exits 0 once the entry is written, and the next start delivers it.
 * A spool whose fsync never returns holds the exit only for the stop's bound
 * (the exit timer, then 10 s), and the daemon says the result may be lost.
 *
 * Needs root and /dev/fuse (a FUSE mount); skipped (77) without them. */
#include <cJSON.h>
#include <check.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lessee_proc.h"
#include "lessor_proc.h"
#include "promparse.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"

#define SEC USEC_PER_SEC
#define MSEC USEC_PER_MSEC
/* Per fsync (an entry with a log tail takes four); times CK_TIMEOUT_MULTIPLIER,
 * as the bounds below, so that under valgrind the checks still fall inside. */
#define FSYNC_DELAY_MS 2000

static char *root;    /* made in main(), so that main can unmount after a crash */
static char mnt[512]; /* root/mnt, over root/backing */
static pid_t fs_pid;
static struct tu_lessor *L;
static struct tu_lessee *D;

/* ---------------------------------------------------------------- slowfs */

static bool mounted(void)
{
	char parent[600];
	struct stat a, b;

	snprintf(parent, sizeof(parent), "%s/..", mnt);
	return stat(mnt, &a) == 0 && stat(parent, &b) == 0 && a.st_dev != b.st_dev;
}

/* Its wait status, or -1 when it had to be killed (or was not there). */
static int fs_reap(usec_t timeout)
{
	usec_t end = time_mono() + timeout;
	int st = -1;

	while (fs_pid > 0 && time_mono() < end) {
		if (waitpid(fs_pid, &st, WNOHANG) == fs_pid) {
			fs_pid = 0;
			return st;
		}
		tu_sleep(20 * MSEC);
	}
	if (fs_pid > 0) {
		kill(fs_pid, SIGKILL);
		waitpid(fs_pid, NULL, 0);
		fs_pid = 0;
	}
	return -1;
}

/* SIGTERM: fuse_main unmounts and exits; a lazy unmount for whatever is left.
 * slowfs's wait status, as fs_reap(). */
static int fs_unmount(void)
{
	int st = -1;

	if (fs_pid > 0) {
		kill(fs_pid, SIGTERM);
		st = fs_reap(5 * SEC);
	}
	(void)umount2(mnt, MNT_DETACH);
	return st;
}

/* 0, or -errno when FUSE cannot be mounted here (then the caller skips). */
static int fs_mount(long delay_ms)
{
	_cleanup_free_ char *bin = tu_aux_bin("slowfs"), *backing = NULL, *logp = NULL;
	char delay[32];
	usec_t end;

	if (asprintf(&backing, "%s/backing", root) < 0 ||
	    asprintf(&logp, "%s/slowfs.log", root) < 0)
		return -ENOMEM;
	snprintf(delay, sizeof(delay), "%ld", delay_ms);
	(void)unlink(logp);
	(void)mkdir(backing, 0700);
	(void)mkdir(mnt, 0700);
	fs_pid = fork();
	if (fs_pid < 0)
		return -errno;
	if (fs_pid == 0) {
		execl(bin, "slowfs", "--fsync-delay-ms", delay, "--log", logp, backing, mnt,
		      (char *)NULL);
		_exit(127);
	}
	for (end = time_mono() + tu_timeout(10 * SEC); !mounted(); tu_sleep(20 * MSEC)) {
		int st;

		if (waitpid(fs_pid, &st, WNOHANG) == fs_pid) {
			fs_pid = 0;
			return -ENODEV;
		}
		if (time_mono() >= end) {
			(void)fs_unmount();
			return -ETIMEDOUT;
		}
	}
	return 0;
}

/* Lines of slowfs's log that start with this word. */
static int fs_log_count(const char *word)
{
	_cleanup_free_ char *path = NULL, *text = NULL;
	int n = 0;

	ck_assert_int_ge(asprintf(&path, "%s/slowfs.log", root), 0);
	if (read_file_capped(path, 1 << 20, &text, NULL) < 0)
		return 0;
	for (const char *p = text; (p = strstr(p, word)); p++)
		n += p == text || p[-1] == '\n';
	return n;
}

/* ---------------------------------------------------------------- helpers */

static cJSON *admin(const char *method, const char *path, const char *body, long want)
{
	long status = 0;
	cJSON *resp = NULL;

	ck_assert_int_eq(tu_lessor_json(L, method, path, body, &status, &resp), 0);
	ck_assert_msg(status == want, "%s %s: HTTP %ld, expected %ld", method, path, status, want);
	return resp;
}

static char *enqueue(const char *workflow)
{
	char *id = tu_lessor_enqueue_wf(L, workflow, "\"max_attempts\":5");

	ck_assert_ptr_nonnull(id);
	return id;
}

static void wait_status(const char *id, const char *status, usec_t timeout)
{
	ck_assert_msg(tu_lessor_wait_status(L, id, status, timeout) == 0,
	              "run %s did not reach status %s", id, status);
}

static int log_count(const char *needle)
{
	_cleanup_free_ char *log = tu_lessee_log(D);
	int n = 0;

	for (const char *p = log; p && (p = strstr(p, needle)); p++)
		n++;
	return n;
}

static double renewals_ok(void)
{
	_cleanup_free_ char *text = NULL, *err = NULL;
	long status = 0;
	prom_doc_t *doc = NULL;
	double v;

	text = tu_lessee_status_get(D, "/metrics", &status);
	ck_assert_ptr_nonnull(text);
	ck_assert_int_eq(status, 200);
	ck_assert_msg(prom_parse(text, strlen(text), &doc, &err) == 0, "metrics: %s", err);
	v = prom_value(doc, "lessee_lease_renewals_total", "result", "ok", NULL);
	prom_free(doc);
	return isnan(v) ? 0 : v;
}

/* ---------------------------------------------------------------- fixture */

static void setup(void)
{
	char *const args[] = {"--enable-faults", NULL};

	ck_assert_int_eq(
	    tu_lessor_start(&(struct tu_lessor_opts){.token = "t0ken-for-tests", .args = args}, &L),
	    0);
}

static void start_lessee(const char *kill_grace)
{
	_cleanup_free_ char *gen = tu_aux_bin("gen_output"), *stubborn = tu_aux_bin("ignore_term"),
	                    *conf = NULL;

	/* lease_ttl: gen's lease outlives the stop, so the restart delivers it */
	ck_assert_int_ge(
	    asprintf(&conf,
	             "[workflow.gen]\ncommand = %s 20000\n"
	             "[workflow.stubborn]\ncommand = %s\n"
	             "[worker]\nkill_grace = %s\nlease_ttl = %llus\nspool_dir = %s/spool\n"
	             "[status]\nlisten = 127.0.0.1:0\n",
	             gen, stubborn, kill_grace, (unsigned long long)tu_timeout(30), mnt),
	    0);
	ck_assert_int_eq(tu_lessee_start(&(struct tu_lessee_opts){.lessor = L, .conf = conf}, &D),
	                 0);
}

static void teardown(void)
{
	int st = D ? tu_lessee_quit(D) : 0;
	int ls = L ? tu_lessor_stop(L) : 0;
	int fs;

	D = tu_lessee_free(D);
	L = tu_lessor_free(L);
	fs = fs_unmount();
	ck_assert_msg(st == 0, "lessee exited with %d", st);
	ck_assert_msg(ls == 0, "lessor exited with %d", ls);
	/* a sanitizer's report at its exit aborts it (abort_on_error) */
	ck_assert_msg(fs < 0 || !WIFSIGNALED(fs), "slowfs died of signal %d", WTERMSIG(fs));
}

/* ---------------------------------------------------------------- tests */

/* Both are measured while the spool's fsyncs sleep: the loop must not wait. */
static void assert_loop_alive(void)
{
	usec_t t0 = time_mono(), took, end;
	long status = 0;
	_cleanup_free_ char *body = tu_lessee_status_get(D, "/healthz", &status);
	double before;

	took = time_mono() - t0;
	ck_assert_msg(body && status == 200, "/healthz: HTTP %ld", status);
	ck_assert_msg(took < tu_timeout(500 * MSEC),
	              "/healthz took %llu ms while the spool fsync slept",
	              (unsigned long long)(took / MSEC));
	before = renewals_ok();
	end = time_mono() + tu_timeout(3 * SEC); /* lease_refresh is 1s */
	while (renewals_ok() <= before) {
		ck_assert_msg(time_mono() < end,
		              "no lease renewal in 3 s (x%llu) while the spool fsync slept",
		              (unsigned long long)tu_timeout(1));
		tu_sleep(50 * MSEC);
	}
	ck_assert_msg(log_count("result spooled") == 0,
	              "the spool write finished before the checks: they proved nothing");
}

/* A gen run that exits while the log endpoint fails (FLUSHING), then SIGTERM
 * twice: the hard stop spools it.  Returns once the spool's first fsync sleeps. */
static char *flushing_then_hard_stop(void)
{
	char *gen;
	int n;

	cJSON_Delete(admin("POST", "/v1/admin/faults",
	                   "{\"endpoint\":\"log\",\"status\":503,\"count\":100000}", 200));
	gen = enqueue("gen");
	ck_assert_int_eq(tu_lessee_wait_log(D, "running -> flushing", 20 * SEC), 0);
	n = log_count("draining:");
	ck_assert_int_eq(tu_lessee_signal(D, SIGTERM), 0);
	while (log_count("draining:") <= n)
		tu_sleep(20 * MSEC);
	ck_assert_int_eq(tu_lessee_signal(D, SIGTERM), 0);
	for (usec_t end = time_mono() + tu_timeout(10 * SEC); fs_log_count("fsync-begin") == 0;
	     tu_sleep(10 * MSEC))
		ck_assert_msg(time_mono() < end, "the spool write did not start");
	return gen;
}

START_TEST(test_slow_fsync_does_not_stall_loop)
{
	_cleanup_free_ char *stubborn = NULL, *gen = NULL, *log = NULL, *want = malloc(20000);
	uint64_t s = tu_gen_seed(0);
	size_t len = 0;
	cJSON *run;
	char grace[32];

	/* 12 s: the stubborn run outlives the four fsyncs, holding its lease */
	snprintf(grace, sizeof(grace), "%llus", (unsigned long long)tu_timeout(12));
	ck_assert_int_eq(fs_mount((long)tu_timeout(FSYNC_DELAY_MS)), 0);
	start_lessee(grace);
	stubborn = enqueue("stubborn");
	wait_status(stubborn, "running", 20 * SEC);
	gen = flushing_then_hard_stop();
	assert_loop_alive();

	ck_assert_int_eq(tu_lessee_wait(D, 60 * SEC), 0);
	ck_assert_int_eq(log_count("result spooled"), 1);
	ck_assert_int_eq(fs_log_count("fsync-begin"), fs_log_count("fsync-end"));

	cJSON_Delete(admin("DELETE", "/v1/admin/faults", NULL, 200));
	ck_assert_int_eq(tu_lessee_restart(D), 0);
	wait_status(gen, "succeeded", 20 * SEC);
	ck_assert_int_eq(tu_lessee_wait_log(D, "spooled result delivered", 10 * SEC), 0);
	log = tu_lessor_run_log(L, gen, &len);
	ck_assert_ptr_nonnull(log);
	ck_assert_uint_eq(len, 20000);
	tu_gen_fill(&s, want, 20000);
	ck_assert(memcmp(log, want, len) == 0);
	run = tu_lessor_get_run(L, gen);
	ck_assert_ptr_nonnull(run);
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(run, "leases")), 1); /* once */
	cJSON_Delete(run);
}
END_TEST

/* A spool on a file system that never answers: the stop's exit timer
 * (kill_grace + 15 s) ends the wait, teardown gives the write 10 s more, then
 * the daemon exits 0 without it and says the result may be lost. */
START_TEST(test_hung_spool_exit_bounded)
{
	_cleanup_free_ char *gen = NULL;
	/* Under valgrind with io_uring the spool write starts only when the exit
	 * timer ends the loop's wait: valgrind (3.19) keeps its lock for the
	 * whole io_uring_enter, so no other thread of the daemon runs meanwhile.
	 * Only the 10 s teardown wait is left to see then, and it begins before
	 * the write does: half of it, as slack. */
	usec_t least = tu_wrapped() && strcmp(tu_backend(), "io_uring") == 0 ? 5 * SEC : 20 * SEC;
	usec_t t0, took;

	ck_assert_int_eq(fs_mount(120 * 1000), 0);
	start_lessee("1s");
	gen = flushing_then_hard_stop();
	t0 = time_mono();
	ck_assert_int_eq(tu_lessee_wait(D, 90 * SEC), 0);
	took = time_mono() - t0;
	if (took < least || took >= tu_timeout(40 * SEC))
		tu_lessee_dump_log(D);
	ck_assert_msg(took >= least && took < tu_timeout(40 * SEC),
	              "exited %llu ms after the spool write began (exit timer 16 s + 10 s)",
	              (unsigned long long)(took / MSEC));
	ck_assert_int_eq(log_count("hard stop overran"), 1);
	ck_assert_int_eq(log_count("exiting without it: it may be lost"), 1);
	ck_assert_int_eq(log_count("result spooled"), 0);
}
END_TEST

/* ---------------------------------------------------------------- main */

static int probe(void)
{
	int r;

	if (geteuid() != 0 || access("/dev/fuse", R_OK | W_OK) < 0) {
		fprintf(stderr, "check_spool_slowfs: needs root and /dev/fuse, skipped\n");
		return -EPERM;
	}
	r = fs_mount(0);
	if (r < 0) {
		fprintf(stderr, "check_spool_slowfs: cannot mount FUSE here (%s), skipped\n",
		        strerror(-r));
		return r;
	}
	(void)fs_unmount();
	return 0;
}

int main(void)
{
	Suite *s = suite_create("spool_slowfs");
	TCase *tc = tcase_create("e2e");
	int r;

	root = tu_tmpdir("slowfs");
	if (!root)
		return EXIT_FAILURE;
	snprintf(mnt, sizeof(mnt), "%s/mnt", root);
	if (probe() < 0) {
		rm_rf(root);
		return 77;
	}
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 150);
	tcase_add_test(tc, test_slow_fsync_does_not_stall_loop);
	tcase_add_test(tc, test_hung_spool_exit_bounded);
	suite_add_tcase(s, tc);
	r = tu_run(s);
	(void)umount2(mnt, MNT_DETACH); /* a test that died with the mount up */
	rm_rf(root);
	return r;
}
