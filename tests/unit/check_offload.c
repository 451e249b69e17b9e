/* lib/offload: jobs on helper threads, completions on the loop, cancellation,
 * per-thread file-system identity, bounded drain.  Both loop backends. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ev/ev.h"
#include "exec/exec.h"
#include "offload/offload.h"
#include "lessor_proc.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"

#define SEC USEC_PER_SEC

static ev_t *E;
static offload_t *O;

static void setup(void)
{
	ck_assert_int_eq(ev_new(&E, NULL), 0);
	ck_assert_int_eq(offload_new(E, 2, &O), 0);
}

static void teardown(void)
{
	O = offload_free(O);
	E = ev_free(E);
}

struct job {
	pthread_t worker; /* the thread the work ran on */
	int block_fd;     /* >= 0: the work reads one byte from it first */
	const char *path; /* the work opens it */
	int open_errno;   /* 0 = opened */
	int done_r;
	int dones;
	bool on_loop;
	atomic_bool ran;
};

static pthread_t loop_thread;

static void work(void *arg)
{
	struct job *j = arg;
	char c;
	int fd;

	j->worker = pthread_self();
	if (j->block_fd >= 0)
		(void)read(j->block_fd, &c, 1);
	if (j->path) {
		fd = open(j->path, O_RDONLY | O_CLOEXEC);
		j->open_errno = fd < 0 ? errno : 0;
		if (fd >= 0)
			close(fd);
	}
	atomic_store(&j->ran, true);
}

static void done(void *arg, int r)
{
	struct job *j = arg;

	j->done_r = r;
	j->dones++;
	j->on_loop = pthread_equal(pthread_self(), loop_thread);
}

static void run_until(int *dones, int want)
{
	usec_t end = time_mono() + tu_timeout(10 * SEC);

	while (*dones < want && time_mono() < end)
		ck_assert_int_ge(ev_run_once(E, 100 * USEC_PER_MSEC), 0);
	ck_assert_int_eq(*dones, want);
}

START_TEST(test_done_on_loop)
{
	struct job j[8];

	loop_thread = pthread_self();
	for (size_t i = 0; i < ELEMENTSOF(j); i++) {
		j[i] = (struct job){.block_fd = -1};
		ck_assert_int_eq(offload_submit(O, NULL, work, done, &j[i], NULL), 0);
	}
	ck_assert_uint_eq(offload_pending(O), ELEMENTSOF(j));
	for (size_t i = 0; i < ELEMENTSOF(j); i++) {
		run_until(&j[i].dones, 1);
		ck_assert_int_eq(j[i].done_r, 0);
		ck_assert(j[i].on_loop);
		ck_assert(!pthread_equal(j[i].worker, loop_thread));
	}
	ck_assert_uint_eq(offload_pending(O), 0);
}
END_TEST

/* A job that blocks does not hold the loop: its done comes when it is done. */
START_TEST(test_blocking_job_leaves_loop_free)
{
	int p[2];
	struct job slow = {.block_fd = -1}, quick = {.block_fd = -1};

	loop_thread = pthread_self();
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	slow.block_fd = p[0];
	ck_assert_int_eq(offload_submit(O, NULL, work, done, &slow, NULL), 0);
	ck_assert_int_eq(offload_submit(O, NULL, work, done, &quick, NULL), 0);
	run_until(&quick.dones, 1); /* the second thread took it */
	ck_assert_int_eq(slow.dones, 0);
	ck_assert_int_eq(offload_drain(O, 100 * USEC_PER_MSEC), -ETIMEDOUT);
	ck_assert_int_eq(write(p[1], "x", 1), 1);
	ck_assert_int_eq(offload_drain(O, tu_timeout(10 * SEC)), 0);
	ck_assert_int_eq(slow.dones, 1);
	ck_assert_int_eq(slow.done_r, 0);
	close(p[0]);
	close(p[1]);
}
END_TEST

/* Cancelled: done still runs once, with -ECANCELED; a job not started never runs. */
START_TEST(test_cancel)
{
	int p[2];
	struct job a = {.block_fd = -1}, b = {.block_fd = -1}, c = {.block_fd = -1};
	offload_job_t *ja, *jc;

	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	a.block_fd = b.block_fd = p[0];
	ck_assert_int_eq(offload_submit(O, NULL, work, done, &a, &ja), 0);
	ck_assert_int_eq(offload_submit(O, NULL, work, done, &b, NULL), 0);
	ck_assert_int_eq(offload_submit(O, NULL, work, done, &c, &jc), 0); /* queued: 2 threads */
	offload_cancel(jc);
	offload_cancel(ja);
	ck_assert_int_eq(write(p[1], "xy", 2), 2);
	ck_assert_int_eq(offload_drain(O, tu_timeout(10 * SEC)), 0);
	ck_assert_int_eq(a.dones, 1);
	ck_assert_int_eq(a.done_r, -ECANCELED);
	ck_assert_int_eq(b.dones, 1);
	ck_assert_int_eq(b.done_r, 0);
	ck_assert_int_eq(c.dones, 1);
	ck_assert_int_eq(c.done_r, -ECANCELED);
	ck_assert(!atomic_load(&c.ran));
	close(p[0]);
	close(p[1]);
}
END_TEST

/* Freeing the pool: jobs not started get done(-ECANCELED) at once; jobs still
 * inside their work (a D-state reap) are abandoned without blocking. */
START_TEST(test_free_cancels_and_abandons)
{
	int p[2];
	struct job a = {.block_fd = -1}, b = {.block_fd = -1}, c = {.block_fd = -1};
	usec_t end = time_mono() + tu_timeout(10 * SEC);

	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	a.block_fd = b.block_fd = p[0];
	ck_assert_int_eq(offload_submit(O, NULL, work, done, &a, NULL), 0);
	ck_assert_int_eq(offload_submit(O, NULL, work, done, &b, NULL), 0);
	ck_assert_int_eq(offload_submit(O, NULL, work, done, &c, NULL), 0);
	tu_sleep(100 * USEC_PER_MSEC); /* both threads inside their job */
	O = offload_free(O);
	ck_assert_int_eq(c.dones, 1);
	ck_assert_int_eq(c.done_r, -ECANCELED);
	ck_assert(!atomic_load(&c.ran));
	close(p[1]); /* the abandoned jobs end; the last thread frees the pool */
	while (!(atomic_load(&a.ran) && atomic_load(&b.ran)) && time_mono() < end)
		tu_sleep(1000);
	ck_assert(atomic_load(&a.ran) && atomic_load(&b.ran));
	tu_sleep(50 * USEC_PER_MSEC);
	ck_assert_int_eq(a.dones + b.dones, 0);
	close(p[0]);
}
END_TEST

/* A job with creds opens files as that user, on that thread only; the thread
 * is the daemon again for the next job. */
START_TEST(test_creds_per_thread)
{
	struct passwd *pw = getpwnam("nobody");
	_cleanup_free_ char *dir = NULL, *path = NULL;
	struct job as_user = {.block_fd = -1}, as_root = {.block_fd = -1};
	struct offload_creds cr;
	int fd;

	if (geteuid() != 0 || !pw) {
		printf("test_creds_per_thread: not root or no user nobody, skipped\n");
		return;
	}
	cr = (struct offload_creds){.uid = pw->pw_uid, .gid = pw->pw_gid};
	O = offload_free(O);
	ck_assert_int_eq(offload_new(E, 1, &O), 0); /* one thread: both jobs on it */
	dir = tu_tmpdir("offload");
	ck_assert_int_eq(chmod(dir, 0755), 0);
	ck_assert_int_ge(asprintf(&path, "%s/root-only", dir), 0);
	ck_assert_int_eq(write_file_atomic(path, "secret", 6, 0600), 0);
	as_user.path = as_root.path = path;
	ck_assert_int_eq(offload_submit(O, &cr, work, done, &as_user, NULL), 0);
	ck_assert_int_eq(offload_submit(O, NULL, work, done, &as_root, NULL), 0);
	ck_assert_int_eq(offload_drain(O, tu_timeout(10 * SEC)), 0);
	ck_assert_int_eq(as_user.done_r, 0);
	ck_assert_int_eq(as_user.open_errno, EACCES);
	ck_assert_int_eq(as_root.open_errno, 0);
	ck_assert(pthread_equal(as_user.worker, as_root.worker));
	/* and the loop thread never changed identity */
	fd = open(path, O_RDONLY | O_CLOEXEC);
	ck_assert_int_ge(fd, 0);
	close(fd);
	rm_rf(dir);
	free(TAKE_PTR(dir));
}
END_TEST

/* exec_free() of a running child with an offload pool: SIGKILL, and the reap
 * happens on a helper thread (the loop does not wait in waitid); nothing is
 * left once the pool is drained. */
START_TEST(test_exec_reap_offloaded)
{
	_cleanup_free_ char *bin = tu_aux_bin("ignore_term");
	char *argv[] = {bin, NULL}, *envp[] = {NULL};
	struct exec_spec spec = {
	    .path = bin, .argv = argv, .envp = envp, .stdin_fd = -1, .offload = O};
	exec_proc_t *p = NULL;
	pid_t pid;

	ck_assert_int_eq(exec_spawn(E, &spec, NULL, NULL, NULL, &p, NULL), 0);
	pid = exec_pid(p);
	ck_assert_int_gt(pid, 0);
	ck_assert_int_eq(kill(pid, 0), 0);
	p = exec_free(p);
	ck_assert_uint_eq(offload_pending(O), 1); /* handed over, not waited for here */
	ck_assert_int_eq(offload_drain(O, tu_timeout(10 * SEC)), 0);
	ck_assert_int_eq(kill(pid, 0), -1); /* reaped: not even a zombie */
	ck_assert_int_eq(errno, ESRCH);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("offload");
	TCase *tc = tcase_create("offload");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_done_on_loop);
	tcase_add_test(tc, test_blocking_job_leaves_loop_free);
	tcase_add_test(tc, test_cancel);
	tcase_add_test(tc, test_free_cancels_and_abandons);
	tcase_add_test(tc, test_creds_per_thread);
	tcase_add_test(tc, test_exec_reap_offloaded);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
