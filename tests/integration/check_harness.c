/* The test helpers' own promise: a harness that dies, even by SIGKILL, leaves
 * no server of its behind.  A "harness" here is a forked process that starts
 * a server through the helpers (lessor, the Conductor emulator), reports the
 * server's pid and waits; the test kills it with SIGKILL, as a timeout or a
 * crashed bench would end, and waits for the server to exit.  Before the
 * helpers gave their servers a parent-death signal, both outlived it.
 *
 * tu_spawn_logged(), which they now share, also reports a program it could
 * not start as an error of the call, as posix_spawnp() did. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "conductor_proc.h"
#include "lessor_proc.h"
#include "testutil.h"
#include "util/fileio.h"

#define SEC USEC_PER_SEC

static char *tmp;

static void setup(void)
{
	tmp = tu_tmpdir("harness");
	ck_assert_ptr_nonnull(tmp);
}

static void teardown(void)
{
	if (tmp)
		(void)rm_rf(tmp);
	free(tmp);
	tmp = NULL;
}

enum server { LESSOR, CONDUCTOR };

/* The harness: start the server with its files under tmp, write its pid to
 * fd, wait to be killed. */
static _Noreturn void harness(enum server which, int fd)
{
	struct tu_lessor *l = NULL;
	struct tu_conductor *c = NULL;
	pid_t pid = -1;

	setenv("TMPDIR", tmp, 1);
	if (which == LESSOR && tu_lessor_start(NULL, &l) == 0)
		pid = tu_lessor_pid(l);
	if (which == CONDUCTOR && tu_conductor_start(&(struct tu_conductor_opts){0}, &c) == 0)
		pid = tu_conductor_pid(c);
	if (write(fd, &pid, sizeof(pid)) != sizeof(pid) || pid <= 0)
		_exit(1);
	for (;;)
		pause();
}

static pid_t start_harness(enum server which, pid_t *ret_server)
{
	int p[2];
	pid_t h;

	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	h = fork();
	ck_assert_int_ge(h, 0);
	if (h == 0) {
		close(p[0]);
		harness(which, p[1]);
	}
	close(p[1]);
	ck_assert_int_eq(read(p[0], ret_server, sizeof(*ret_server)), sizeof(*ret_server));
	close(p[0]);
	ck_assert_int_gt(*ret_server, 0);
	return h;
}

/* Kill the harness as a timeout would; then the server must go within the
 * bound (it is given 10 s: it only has to stop, not to drain anything). */
static void server_outlives_harness_not(enum server which)
{
	pid_t server, h = start_harness(which, &server);
	int status;
	bool gone;

	ck_assert_int_eq(kill(h, SIGKILL), 0);
	ck_assert_int_eq(waitpid(h, &status, 0), h);
	/* gone or a zombie: the server is not our child (once its harness is
	 * gone it belongs to init, or to a subreaper that reaps it only later);
	 * by /proc, not a pidfd: valgrind does not know pidfd_open */
	gone = tu_wait_pid_gone(server, tu_timeout(10 * SEC));
	if (!gone)
		(void)kill(server, SIGKILL); /* not ours to reap */
	ck_assert_msg(gone, "server %d still running 10 s after its harness was killed",
	              (int)server);
}

/* Our children that have exited and were not reaped. */
static int zombie_children(void)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	int n = 0;

	while (d && (de = readdir(d))) {
		int pid = atoi(de->d_name);
		pid_t ppid;
		char state;

		if (pid > 0 && tu_proc_stat(pid, &state, &ppid) && ppid == getpid() && state == 'Z')
			n++;
	}
	if (d)
		closedir(d);
	return n;
}

START_TEST(test_lessor_dies_with_harness)
{
	server_outlives_harness_not(LESSOR);
}
END_TEST

START_TEST(test_emulator_dies_with_harness)
{
	server_outlives_harness_not(CONDUCTOR);
}
END_TEST

START_TEST(test_spawn_logged_exec_error)
{
	char *argv[] = {"lessee-no-such-program", NULL}, *log = NULL;
	pid_t pid = 0;

	ck_assert_int_ge(asprintf(&log, "%s/log", tmp), 0);
	ck_assert_int_eq(tu_spawn_logged(argv, NULL, log, -1, -1, &pid), -ENOENT);
	ck_assert_int_eq(zombie_children(), 0); /* the failed child was reaped */
	free(log);
}
END_TEST

/* The program runs with its fds as asked: stdin /dev/null, stdout and
 * stderr into the log, the passed fd at its number. */
START_TEST(test_spawn_logged_fds)
{
	char *log = NULL, *text = NULL;
	char *argv[] = {"/bin/sh", "-c",
	                "read x || echo eof; echo out; echo err >&2; echo passed >&3", NULL};
	int p[2], status;
	char buf[16] = "";
	pid_t pid;

	ck_assert_int_ge(asprintf(&log, "%s/log", tmp), 0);
	ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
	ck_assert_int_eq(tu_spawn_logged(argv, NULL, log, p[1], 3, &pid), 0);
	close(p[1]);
	ck_assert_int_eq(waitpid(pid, &status, 0), pid);
	ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	ck_assert_int_eq(read(p[0], buf, sizeof(buf) - 1), 7);
	ck_assert_str_eq(buf, "passed\n");
	close(p[0]);
	ck_assert_int_ge(read_file_capped(log, 4096, &text, NULL), 0);
	ck_assert_str_eq(text, "eof\nout\nerr\n");
	free(text);
	free(log);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("harness");
	TCase *tc = tcase_create("servers");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_lessor_dies_with_harness);
	tcase_add_test(tc, test_emulator_dies_with_harness);
	tcase_add_test(tc, test_spawn_logged_exec_error);
	tcase_add_test(tc, test_spawn_logged_fds);
	suite_add_tcase(s, tc);
	return tu_run(s) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
