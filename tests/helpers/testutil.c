#include "testutil.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"

extern char **environ;

char *tu_tmpdir(const char *tag)
{
	const char *base = getenv("TMPDIR");
	char *p;

	if (asprintf(&p, "%s/lessee-test-%s-XXXXXX", base ? base : "/tmp", tag) < 0)
		return NULL;
	if (!mkdtemp(p)) {
		free(p);
		return NULL;
	}
	return p;
}

int tu_free_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = -1;

	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	close(fd);
	return port;
}

int tu_wait_port(int port, usec_t timeout)
{
	usec_t end = time_mono() + timeout;

	do {
		struct sockaddr_in a = {.sin_family = AF_INET,
		                        .sin_port = htons((uint16_t)port),
		                        .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		int r = connect(fd, (struct sockaddr *)&a, sizeof(a));

		close(fd);
		if (r == 0)
			return 0;
		tu_sleep(10 * USEC_PER_MSEC);
	} while (time_mono() < end);
	return -ETIMEDOUT;
}

bool tu_std_answer(int argc, char **argv, const char *name, const char *usage)
{
	if (argc != 2)
		return false;
	if (streq(argv[1], "--version"))
		printf("%s %s\n", name, LESSEE_VERSION);
	else if (streq(argv[1], "--help"))
		fputs(usage, stdout);
	else
		return false;
	return true;
}

const char *tu_backend(void)
{
	const char *b = getenv("LESSEE_IO_BACKEND");

	return b && *b ? b : "io_uring";
}

static const char *env_or(const char *name, const char *fallback)
{
	const char *v = getenv(name);

	return v && *v ? v : fallback;
}

const char *tu_lessee_bin(void)
{
	return env_or("LESSEE_BIN", "build/default/lessee");
}

const char *tu_lessor_bin(void)
{
	return env_or("LESSOR_BIN", "build/default/lessor");
}

char *tu_aux_bin(const char *name)
{
	char *p;

	if (asprintf(&p, "%s/%s", env_or("LESSEE_TEST_AUX", "build/default/tests/aux"), name) < 0)
		return NULL;
	return p;
}

char **tu_wrap_argv(void)
{
	return tu_env_argv("LESSEE_WRAP");
}

bool tu_wrapped(void)
{
	const char *w = getenv("LESSEE_WRAP");

	return w && *w;
}

char **tu_env_argv(const char *name)
{
	const char *w = getenv(name);
	char **v = NULL;

	if (!w || !*w)
		return NULL;
	if (strv_split(w, " ", &v) < 0)
		return NULL;
	return v;
}

/* In a child after fork: fd becomes target, without close-on-exec, and is
 * closed itself; false when fd < 0 (an open that failed) or that fails. */
static bool fd_onto(int fd, int target)
{
	if (fd < 0)
		return false;
	if (fd == target)
		return fcntl(fd, F_SETFD, 0) == 0;
	return dup2(fd, target) == target && close(fd) == 0;
}

/* The child of tu_spawn_logged(): it gets SIGTERM when the thread that forked
 * it ends, so a harness killed by SIGKILL or a timeout leaves no server
 * behind (all of ours stop on SIGTERM, blocked or not: they sigwait for it).
 * Whatever fails is written to err_w as an errno. */
static _Noreturn void spawned(char *const argv[], char *const envp[], const char *log, int pass_fd,
                              int pass_at, pid_t parent, int err_w)
{
	int e;

	if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0 || getppid() != parent)
		_exit(127);
	if ((pass_fd >= 0 && !fd_onto(pass_fd, pass_at)) ||
	    !fd_onto(open("/dev/null", O_RDONLY), STDIN_FILENO) ||
	    !fd_onto(open(log, O_WRONLY | O_CREAT | O_APPEND, 0600), STDOUT_FILENO) ||
	    dup2(STDOUT_FILENO, STDERR_FILENO) < 0)
		goto fail;
	execvpe(argv[0], argv, envp);
fail:
	e = errno;
	(void)!write(err_w, &e, sizeof(e));
	_exit(127);
}

/* A close-on-exec pipe with both ends at least at fd min. */
static int pipe_above(int p[2], int min)
{
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	for (int i = 0; i < 2; i++) {
		int hi = fcntl(p[i], F_DUPFD_CLOEXEC, min);

		close(p[i]);
		p[i] = hi;
	}
	if (p[0] >= 0 && p[1] >= 0)
		return 0;
	safe_close(p[0]);
	safe_close(p[1]);
	return -EMFILE;
}

int tu_spawn_logged(char *const argv[], char *const envp[], const char *log, int pass_fd,
                    int pass_at, pid_t *ret_pid)
{
	pid_t parent = getpid(), pid;
	int p[2], e = 0, r;

	/* above every fd the child is given (0-2, pass_at) */
	r = pipe_above(p, MAX(pass_at, STDERR_FILENO) + 1);
	if (r < 0)
		return r;
	pid = fork();
	if (pid == 0)
		spawned(argv, envp ? envp : environ, log, pass_fd, pass_at, parent, p[1]);
	if (pid < 0)
		e = errno;
	safe_close(p[1]);
	/* EOF: the exec closed the pipe; an int: the child's errno before it */
	while (pid > 0 && read(p[0], &e, sizeof(e)) < 0 && errno == EINTR)
		;
	safe_close(p[0]);
	if (pid > 0 && e)
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
	if (e)
		return -e;
	*ret_pid = pid;
	return 0;
}

void tu_sleep(usec_t u)
{
	struct timespec ts = {.tv_sec = (time_t)(u / USEC_PER_SEC),
	                      .tv_nsec = (long)(u % USEC_PER_SEC) * 1000};

	while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) == EINTR)
		;
}

bool tu_proc_stat(pid_t pid, char *ret_state, pid_t *ret_ppid)
{
	char path[64], *stat = NULL, *p;
	int ppid = 0;
	bool ok;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (read_file_capped(path, 4096, &stat, NULL) < 0)
		return false;
	p = strrchr(stat, ')'); /* the comm field may hold blanks and parentheses */
	ok = p && sscanf(p + 1, " %c %d", ret_state, &ppid) == 2;
	free(stat);
	*ret_ppid = ppid;
	return ok;
}

bool tu_wait_pid_gone(pid_t pid, usec_t timeout)
{
	usec_t end = time_mono() + timeout;

	for (;;) {
		char state;
		pid_t ppid;

		if (!tu_proc_stat(pid, &state, &ppid) || state == 'Z' || state == 'X')
			return true;
		if (time_mono() >= end)
			return false;
		tu_sleep(10 * USEC_PER_MSEC);
	}
}

/* Servers and daemons a failed test left behind were re-parented to us (a
 * subreaper): kill and reap them, so nothing outlives the test binary. */
static void reap_leftovers(void)
{
	DIR *d = opendir("/proc");
	struct dirent *de;

	while (d && (de = readdir(d))) {
		int pid = atoi(de->d_name);
		pid_t ppid;
		char state;

		if (pid > 0 && tu_proc_stat(pid, &state, &ppid) && ppid == getpid())
			kill(pid, SIGKILL);
	}
	if (d)
		closedir(d);
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
}

int tu_run(Suite *s)
{
	SRunner *sr = srunner_create(s);
	int failed;

	/* Only when each test runs in its own process (not under valgrind's
	 * CK_FORK=no): the tests themselves must see orphans go to init. */
	bool forking = srunner_fork_status(sr) == CK_FORK;

	if (forking)
		prctl(PR_SET_CHILD_SUBREAPER, 1);
	srunner_run_all(sr, CK_NORMAL);
	if (forking)
		reap_leftovers();
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

uint64_t tu_gen_seed(uint64_t seed)
{
	return seed ? seed : 88172645463325252ULL;
}

void tu_gen_fill(uint64_t *s, void *buf, size_t n)
{
	unsigned char *p = buf;

	for (size_t i = 0; i < n; i++) {
		*s ^= *s << 13;
		*s ^= *s >> 7;
		*s ^= *s << 17;
		p[i] = (unsigned char)*s;
	}
}
