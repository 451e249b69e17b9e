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
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"

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

int tu_spawn_logged(char *const argv[], char *const envp[], const char *log, int pass_fd,
                    int pass_at, pid_t *ret_pid)
{
	posix_spawn_file_actions_t fa;
	int r;

	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, log, O_WRONLY | O_CREAT | O_APPEND,
	                                 0600);
	posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
	if (pass_fd >= 0)
		posix_spawn_file_actions_adddup2(&fa, pass_fd, pass_at);
	r = -posix_spawnp(ret_pid, argv[0], &fa, NULL, argv, envp ? envp : environ);
	posix_spawn_file_actions_destroy(&fa);
	return r;
}

void tu_sleep(usec_t u)
{
	struct timespec ts = {.tv_sec = (time_t)(u / USEC_PER_SEC),
	                      .tv_nsec = (long)(u % USEC_PER_SEC) * 1000};

	while (clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &ts) == EINTR)
		;
}

/* Servers and daemons a failed test left behind were re-parented to us (a
 * subreaper): kill and reap them, so nothing outlives the test binary. */
static void reap_leftovers(void)
{
	DIR *d = opendir("/proc");
	struct dirent *de;

	while (d && (de = readdir(d))) {
		char path[300], *stat = NULL, *p;
		int pid = atoi(de->d_name), ppid = 0;

		if (pid <= 0)
			continue;
		snprintf(path, sizeof(path), "/proc/%d/stat", pid);
		if (read_file_capped(path, 4096, &stat, NULL) < 0)
			continue;
		p = strrchr(stat, ')');
		if (p && sscanf(p + 2, "%*c %d", &ppid) == 1 && ppid == getpid())
			kill(pid, SIGKILL);
		free(stat);
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
