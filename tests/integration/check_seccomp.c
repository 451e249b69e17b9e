/* lessee where io_uring is forbidden, as inside containers: Docker's default
 * seccomp profile makes io_uring_* fail with EPERM, a runtime whose profile
 * predates io_uring answers ENOSYS, and some sandboxes allow io_uring_setup
 * but refuse io_uring_enter.  The real daemon runs under tests/aux/seccomp_wrap
 * (a libseccomp filter) with LESSEE_IO_BACKEND removed, so whatever backend
 * tests/run.sh asks for, it has to notice by itself, fall back to epoll, say
 * why in its log, and then do its job: runs succeed and fail, their output and
 * results reach the API, SIGTERM drains. */
#include <cJSON.h>
#include <check.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lessee_proc.h"
#include "lessor_proc.h"
#include "jsonutil.h"
#include "testutil.h"
#include "util/macro.h"

#define SEC USEC_PER_SEC

struct variant {
	char *err;       /* seccomp_wrap --errno */
	char *syscall;   /* seccomp_wrap --syscall, NULL = every io_uring call */
	const char *log; /* what the daemon must say */
};

static const struct variant variants[] = {
    {"EPERM", NULL,
     "event loop: epoll (io_uring unavailable: io_uring_queue_init: Operation not permitted)"},
    {"ENOSYS", NULL,
     "event loop: epoll (io_uring unavailable: io_uring_queue_init: Function not implemented)"},
    {"EPERM", "io_uring_enter",
     "event loop: epoll (io_uring unavailable: io_uring_enter: Operation not permitted)"},
};

/* Workflows as shell one-liners: no script files to manage. */
static const char workflows[] = "[workflow.ok]\n"
                                "command = /bin/sh -c 'read -r line; echo \"got $line\"; "
                                "echo \"{\\\"answer\\\":42}\" > \"$LESSEE_RESULT_FILE\"'\n"
                                "[workflow.fail]\n"
                                "command = /bin/sh -c 'echo failing >&2; exit 3'\n"
                                "[workflow.slow]\n"
                                "command = /bin/sh -c 'echo started; sleep 1; echo finished'\n";

static struct tu_lessor *L;
static struct tu_lessee *D;

static void start(const struct variant *v)
{
	_cleanup_free_ char *wrap_bin = tu_aux_bin("seccomp_wrap");
	char *wrap[] = {wrap_bin, "--errno", v->err, "--syscall", v->syscall, "--", NULL};

	if (!v->syscall) /* drop "--syscall NAME" */
		memmove(&wrap[3], &wrap[5], 2 * sizeof(char *));
	ck_assert_int_eq(tu_lessor_start(&(struct tu_lessor_opts){.token = "seccomp-t0ken"}, &L),
	                 0);
	ck_assert_int_eq(
	    tu_lessee_start(&(struct tu_lessee_opts){.lessor = L, .conf = workflows, .wrap = wrap},
	                    &D),
	    0);
}

static void teardown(void)
{
	D = tu_lessee_free(D);
	L = tu_lessor_free(L);
}

static char *enqueue(const char *body)
{
	char *id = tu_lessor_enqueue(L, body);

	ck_assert_msg(id, "enqueue %s", body);
	return id;
}

/* The run once it reached `status` (free it). */
static cJSON *finished(const char *id, const char *status)
{
	ck_assert_msg(tu_lessor_wait_status(L, id, status, 20 * SEC) == 0,
	              "run %s did not reach status %s", id, status);
	return tu_lessor_get_run(L, id);
}

static char *run_log(const char *id)
{
	size_t len = 0;
	char *log = tu_lessor_run_log(L, id, &len);

	ck_assert_ptr_nonnull(log);
	return log;
}

START_TEST(test_fallback_and_runs)
{
	const struct variant *v = &variants[_i];
	_cleanup_free_ char *ok = NULL, *fail = NULL, *log = NULL, *daemon_log = NULL;
	cJSON *run;

	start(v);
	/* logged before READY=1, which tu_lessee_start waited for */
	daemon_log = tu_lessee_log(D);
	ck_assert_msg(daemon_log && strstr(daemon_log, v->log), "no '%s' in the log:\n%s", v->log,
	              daemon_log ? daemon_log : "(none)");

	ok = enqueue("{\"workflow\":\"ok\",\"input\":{\"n\":1}}");
	fail = enqueue("{\"workflow\":\"fail\",\"max_attempts\":1}");

	run = finished(ok, "succeeded");
	ck_assert_int_eq((int)tu_jnum_or(run, "exit_code", -1), 0);
	ck_assert_int_eq((int)tu_jnum_or(cJSON_GetObjectItem(run, "output"), "answer", -1), 42);
	cJSON_Delete(run);
	log = run_log(ok);
	ck_assert_str_eq(log, "got {\"n\":1}\n");
	free(log);

	run = finished(fail, "failed");
	ck_assert_str_eq(tu_jstr(run, "reason"), "exit");
	ck_assert_int_eq((int)tu_jnum_or(run, "exit_code", -1), 3);
	cJSON_Delete(run);
	log = run_log(fail);
	ck_assert_str_eq(log, "failing\n");
}
END_TEST

/* SIGTERM while a run is going: it finishes and is reported, then exit 0. */
START_TEST(test_drain)
{
	_cleanup_free_ char *id = NULL, *log = NULL;
	usec_t end;
	cJSON *run;

	start(&variants[_i]);
	id = enqueue("{\"workflow\":\"slow\"}");
	end = time_mono() + tu_timeout(15 * SEC);
	do { /* the run has started: its first line reached the API */
		free(log);
		log = run_log(id);
		if (!strstr(log, "started"))
			tu_sleep(20 * USEC_PER_MSEC);
	} while (!strstr(log, "started") && time_mono() < end);
	ck_assert_msg(strstr(log, "started"), "the run did not start: '%s'", log);
	ck_assert_int_eq(tu_lessee_signal(D, SIGTERM), 0);
	ck_assert_int_eq(tu_lessee_wait(D, 20 * SEC), 0);
	run = tu_lessor_get_run(L, id);
	ck_assert_str_eq(tu_jstr(run, "status"), "succeeded");
	cJSON_Delete(run);
	free(log);
	log = run_log(id);
	ck_assert_str_eq(log, "started\nfinished\n");
}
END_TEST

/* The wrapper itself: its options, and that it refuses nonsense. */
static int run_wrapper(char *const *args)
{
	_cleanup_free_ char *bin = tu_aux_bin("seccomp_wrap");
	char *argv[8] = {bin};
	pid_t pid;
	int st;

	for (size_t i = 0; args[i] && i + 2 < ELEMENTSOF(argv); i++)
		argv[i + 1] = args[i];
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int null = open("/dev/null", O_WRONLY | O_CLOEXEC);

		dup2(null, STDOUT_FILENO);
		dup2(null, STDERR_FILENO);
		execv(argv[0], argv);
		_exit(127);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

START_TEST(test_wrapper_options)
{
	ck_assert_int_eq(run_wrapper((char *[]){"--help", NULL}), 0);
	ck_assert_int_eq(run_wrapper((char *[]){"--version", NULL}), 0);
	ck_assert_int_eq(run_wrapper((char *[]){"--errno", "EPERM", "--", "/bin/true", NULL}), 0);
	ck_assert_int_eq(run_wrapper((char *[]){"--errno", "EPERM", "--", "/bin/false", NULL}), 1);
	ck_assert_int_eq(run_wrapper((char *[]){"--errno", "EACCES", "--", "/bin/true", NULL}), 2);
	ck_assert_int_eq(run_wrapper((char *[]){"--errno", "EPERM", "--syscall", "openat", "--",
	                                        "/bin/true", NULL}),
	                 2);
	ck_assert_int_eq(run_wrapper((char *[]){"--", "/bin/true", NULL}), 2);
	ck_assert_int_eq(run_wrapper((char *[]){"--errno", "ENOSYS", NULL}), 2);
	ck_assert_int_eq(run_wrapper((char *[]){"--errno", "EPERM", "--", "/nonexistent", NULL}),
	                 127);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("seccomp");
	TCase *tc = tcase_create("io_uring_forbidden");
	TCase *tw = tcase_create("wrapper");

	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_set_timeout(tc, 90);
	tcase_add_loop_test(tc, test_fallback_and_runs, 0, (int)ELEMENTSOF(variants));
	/* drain: EPERM (Docker) and ENOSYS */
	tcase_add_loop_test(tc, test_drain, 0, 2);
	tcase_add_test(tw, test_wrapper_options);
	suite_add_tcase(s, tc);
	suite_add_tcase(s, tw);
	return tu_run(s);
}
