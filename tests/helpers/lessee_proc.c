#include "lessee_proc.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "promparse.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"

struct tu_lessee {
	const struct tu_lessor *lessor;
	char *url;
	char *dir;
	char *notify_path;
	int notify_fd; /* our NOTIFY_SOCKET: start waits for READY=1 */
	char *conf_path;
	char *log_path;
	char **argv;
	char **env;
	bool pid_namespace;
	pid_t pid;
	int status; /* last exit status, -1 unknown */
};

static int write_conf(struct tu_lessee *d, const char *extra)
{
	_cleanup_free_ char *text = NULL, *token_path = NULL;
	const char *token = d->lessor ? tu_lessor_token(d->lessor) : NULL;
	int n;

	if (asprintf(&token_path, "%s/token", d->dir) < 0)
		return -ENOMEM;
	if (token && write_file_atomic(token_path, token, strlen(token), 0600) < 0)
		return -EIO;
	n = asprintf(&text,
		     "[api]\nurl = %s\n%s%s%s"
		     "request_timeout = 4s\n"
		     "[worker]\nid = test-worker\nconcurrency = 4\nlease_ttl = 6s\n"
		     "lease_refresh = 1s\nlong_poll = 2s\npoll_interval = 200ms\n"
		     "kill_grace = 1s\nfailure_cooldown = 2s\nfailure_cooldown_max = 8s\n"
		     "spool_dir = %s/spool\nrun_dir = %s/run\n"
		     "[status]\nlisten =\n"
		     "[log]\nlevel = debug\nformat = logfmt\n%s\n",
		     d->lessor ? tu_lessor_url(d->lessor) : d->url, token ? "token_file = " : "",
		     token ? token_path : "", token ? "\n" : "", d->dir, d->dir,
		     extra ? extra : "");
	if (n < 0)
		return -ENOMEM;
	return write_file_atomic(d->conf_path, text, (size_t)n, 0644);
}

static int append_strv(char ***v, char *const *words)
{
	int r = 0;

	for (size_t i = 0; r >= 0 && words && words[i]; i++)
		r = strv_extend(v, words[i]);
	return r;
}

/* [opts.wrap | $LESSEE_DAEMON_WRAP] [$LESSEE_WRAP] lessee --config FILE [opts.args] */
static int build_argv(struct tu_lessee *d, const struct tu_lessee_opts *o)
{
	_cleanup_(strv_freep) char **env_wrap = o->wrap ? NULL : tu_env_argv("LESSEE_DAEMON_WRAP");
	_cleanup_(strv_freep) char **valgrind = tu_wrap_argv();
	int r = 0;

	d->argv = calloc(1, sizeof(char *));
	if (!d->argv)
		return -ENOMEM;
	r = append_strv(&d->argv, o->wrap ? o->wrap : env_wrap);
	r = r < 0 ? r : append_strv(&d->argv, valgrind);
	r = r < 0 ? r : strv_extend(&d->argv, tu_lessee_bin());
	r = r < 0 ? r : strv_extend(&d->argv, "--config");
	r = r < 0 ? r : strv_extend(&d->argv, d->conf_path);
	r = r < 0 ? r : append_strv(&d->argv, o->args);
	d->env = strv_copy(o->env ? o->env : (char *const[]){NULL});
	return r < 0 ? r : d->env ? 0 : -ENOMEM;
}

static void child_exec(const struct tu_lessee *d)
{
	int fd = open(d->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);

	if (fd < 0 || dup2(fd, STDERR_FILENO) < 0)
		_exit(126);
	prctl(PR_SET_PDEATHSIG, SIGKILL); /* a failed test must not leave a daemon */
	for (size_t i = 0; d->env[i]; i++)
		putenv(d->env[i]);
	setenv("NOTIFY_SOCKET", d->notify_path, 1);
	execvp(d->argv[0], d->argv);
	_exit(127);
}

static int notify_open(struct tu_lessee *d)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};

	if (!d->notify_path && asprintf(&d->notify_path, "%s/notify", d->dir) < 0) {
		d->notify_path = NULL;
		return -ENOMEM;
	}
	if (strlen(d->notify_path) >= sizeof(a.sun_path))
		return -ENAMETOOLONG;
	strcpy(a.sun_path, d->notify_path);
	(void)unlink(d->notify_path);
	d->notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (d->notify_fd < 0 || bind(d->notify_fd, (struct sockaddr *)&a, sizeof(a)) < 0)
		return -errno;
	return 0;
}

/* Nobody reads the socket after READY=1.  Were it left open, the daemon's
 * STATUS= updates (one per finished run) would fill its queue
 * (net.unix.max_dgram_qlen, 10 datagrams) and the next sd_notify would block
 * the daemon's loop in sendmsg.  Closed and unlinked, they fail at once. */
static void notify_close(struct tu_lessee *d)
{
	d->notify_fd = safe_close(d->notify_fd);
	if (d->notify_path)
		(void)unlink(d->notify_path);
}

/* Until the daemon says READY=1 (or dies): signals sent before that could
 * find it without its handlers. */
static int wait_ready_msg(struct tu_lessee *d, usec_t timeout)
{
	usec_t end = time_mono() + tu_timeout(timeout);
	char msg[4096];

	while (time_mono() < end) {
		struct pollfd pfd = {.fd = d->notify_fd, .events = POLLIN};
		ssize_t n;

		if (poll(&pfd, 1, 50) > 0 && (n = recv(d->notify_fd, msg, sizeof(msg) - 1, 0)) > 0) {
			msg[n] = '\0';
			if (strstr(msg, "READY=1"))
				return 0;
		}
		if (waitpid(d->pid, NULL, WNOHANG) != 0)
			return -ECHILD;
	}
	return -ETIMEDOUT;
}

static int wait_ready(struct tu_lessee *d, usec_t timeout)
{
	int r = wait_ready_msg(d, timeout);

	notify_close(d);
	return r;
}

/* fork(), or a fork into a new PID namespace where the child is PID 1.  The raw
 * system call, not glibc's clone(): no separate stack (the child runs on a copy
 * of ours, as after fork) and valgrind treats it as a fork. */
static pid_t fork_maybe_newpid(bool newpid)
{
	if (!newpid)
		return fork();
	return (pid_t)syscall(SYS_clone, (unsigned long)(CLONE_NEWPID | SIGCHLD), NULL, NULL, NULL,
			      0UL);
}

/* The child answers through a pipe, not its exit status: under valgrind a
 * forked child's exit status may be valgrind's (--error-exitcode). */
bool tu_pid_namespace_available(void)
{
	int p[2];
	pid_t pid;
	char c = 0;

	if (pipe2(p, O_CLOEXEC) < 0)
		return false;
	pid = fork_maybe_newpid(true);
	if (pid == 0) {
		if (getpid() == 1)
			(void)!write(p[1], "1", 1);
		_exit(0);
	}
	close(p[1]);
	if (pid > 0) {
		while (read(p[0], &c, 1) < 0 && errno == EINTR)
			;
		(void)waitpid(pid, NULL, 0);
	}
	close(p[0]);
	return c == '1';
}

int tu_lessee_restart(struct tu_lessee *d)
{
	pid_t pid;
	int r;

	if (d->pid > 0)
		return -EBUSY;
	r = notify_open(d);
	if (r < 0) {
		notify_close(d);
		return r;
	}
	pid = fork_maybe_newpid(d->pid_namespace);
	if (pid < 0) {
		r = -errno;
		notify_close(d);
		return r;
	}
	if (pid == 0)
		child_exec(d);
	d->pid = pid;
	d->status = -1;
	return wait_ready(d, 30 * USEC_PER_SEC);
}

int tu_lessee_start(const struct tu_lessee_opts *o, struct tu_lessee **ret)
{
	struct tu_lessee *d = calloc(1, sizeof(*d));
	int r;

	if (!d)
		return -ENOMEM;
	d->pid = -1;
	d->notify_fd = -1;
	d->pid_namespace = o->pid_namespace;
	d->dir = tu_tmpdir("lessee");
	if (!d->dir || asprintf(&d->conf_path, "%s/lessee.conf", d->dir) < 0 ||
	    asprintf(&d->log_path, "%s/lessee.log", d->dir) < 0) {
		tu_lessee_free(d);
		return -ENOMEM;
	}
	d->lessor = o->lessor;
	if (!o->lessor && (!o->url || !(d->url = strdup(o->url)))) {
		tu_lessee_free(d);
		return -EINVAL;
	}
	r = write_conf(d, o->conf);
	if (r >= 0)
		r = build_argv(d, o);
	if (r >= 0)
		r = tu_lessee_restart(d);
	if (r < 0) {
		tu_lessee_free(d);
		return r;
	}
	*ret = d;
	return 0;
}

int tu_lessee_signal(struct tu_lessee *d, int sig)
{
	if (d->pid <= 0)
		return -ESRCH;
	return kill(d->pid, sig) < 0 ? -errno : 0;
}

int tu_lessee_wait(struct tu_lessee *d, usec_t timeout)
{
	usec_t end = time_mono() + tu_timeout(timeout);
	int st;

	if (d->pid <= 0)
		return d->status;
	for (;;) {
		pid_t p = waitpid(d->pid, &st, WNOHANG);

		if (p == d->pid)
			break;
		if (p < 0)
			return -errno;
		if (time_mono() > end)
			return -ETIMEDOUT;
		tu_sleep(10 * USEC_PER_MSEC);
	}
	d->pid = -1;
	d->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
	return d->status;
}

int tu_lessee_stop(struct tu_lessee *d)
{
	int r = tu_lessee_signal(d, SIGTERM);

	return r < 0 ? r : tu_lessee_wait(d, 60 * USEC_PER_SEC);
}

int tu_lessee_quit(struct tu_lessee *d)
{
	if (d->pid > 0 && tu_lessee_signal(d, SIGQUIT) >= 0 &&
	    tu_lessee_wait(d, 30 * USEC_PER_SEC) == -ETIMEDOUT) {
		kill(d->pid, SIGKILL);
		tu_lessee_wait(d, 10 * USEC_PER_SEC);
		d->status = -ETIMEDOUT;
	}
	return d->status;
}

/* SIGQUIT (hard stop now) must end the daemon cleanly, whatever it runs:
 * exit 0, or its log is shown (sanitizer reports land there too). */
struct tu_lessee *tu_lessee_free(struct tu_lessee *d)
{
	if (!d)
		return NULL;
	tu_lessee_quit(d);
	if (d->status != 0 && d->status != 128 + SIGKILL && d->log_path) {
		char *log = NULL;

		fprintf(stderr, "lessee exited with %d\n", d->status);
		if (read_file_capped(d->log_path, 4u << 20, &log, NULL) >= 0)
			fprintf(stderr, "---- lessee log (%s) ----\n%s---- end ----\n", d->log_path,
				log);
		free(log);
	}
	safe_close(d->notify_fd);
	free(d->notify_path);
	if (d->dir)
		rm_rf(d->dir);
	free(d->dir);
	free(d->conf_path);
	free(d->url);
	free(d->log_path);
	strv_free(d->argv);
	strv_free(d->env);
	free(d);
	return NULL;
}

pid_t tu_lessee_pid(const struct tu_lessee *d)
{
	return d->pid;
}

const char *tu_lessee_dir(const struct tu_lessee *d)
{
	return d->dir;
}

char *tu_lessee_log(const struct tu_lessee *d)
{
	char *log = NULL;

	if (read_file_capped(d->log_path, 64u << 20, &log, NULL) < 0)
		return NULL;
	return log;
}

void tu_lessee_dump_log(const struct tu_lessee *d)
{
	_cleanup_free_ char *log = d ? tu_lessee_log(d) : NULL;

	fprintf(stderr, "---- lessee log ----\n%s---- end ----\n", log ? log : "");
}

int tu_lessee_wait_log(const struct tu_lessee *d, const char *needle, usec_t timeout)
{
	usec_t end = time_mono() + tu_timeout(timeout);

	do {
		_cleanup_free_ char *log = tu_lessee_log(d);

		if (log && strstr(log, needle))
			return 0;
		tu_sleep(20 * USEC_PER_MSEC);
	} while (time_mono() < end);
	return -ETIMEDOUT;
}

int tu_lessee_set_conf(struct tu_lessee *d, const char *conf)
{
	return write_conf(d, conf);
}

int tu_lessee_status_port(const struct tu_lessee *d)
{
	_cleanup_free_ char *log = NULL;
	const char *p;

	if (tu_lessee_wait_log(d, "status endpoint on port ", 10 * USEC_PER_SEC) < 0 ||
	    !(log = tu_lessee_log(d)) || !(p = strstr(log, "status endpoint on port ")))
		return -ENOENT;
	return atoi(p + strlen("status endpoint on port "));
}

char *tu_lessee_status_get(const struct tu_lessee *d, const char *path, long *ret_status)
{
	int port = tu_lessee_status_port(d);
	char base[64];
	lessor_client *c = NULL;
	struct lessor_response resp = {0};
	char *body = NULL;

	if (port <= 0)
		return NULL;
	snprintf(base, sizeof(base), "http://127.0.0.1:%d", port);
	if (lessor_client_new(base, NULL, &c) >= 0 &&
	    lessor_client_request(c, "GET", path, NULL, NULL, 0, &resp) >= 0) {
		body = resp.body ? resp.body : strdup("");
		resp.body = NULL;
		*ret_status = resp.status;
	}
	lessor_response_done(&resp);
	lessor_client_free(c);
	return body;
}

char *tu_lessor_run_log(const struct tu_lessor *l, const char *id, size_t *ret_len)
{
	lessor_client *c = tu_lessor_client(l);
	struct lessor_response resp = {0};
	char path[256], *body = NULL;

	snprintf(path, sizeof(path), "/v1/runs/%s/log", id);
	if (c && lessor_client_request(c, "GET", path, NULL, NULL, 0, &resp) >= 0 &&
	    resp.status == 200) {
		body = resp.body ? resp.body : strdup("");
		resp.body = NULL;
		*ret_len = resp.len;
	}
	lessor_response_done(&resp);
	lessor_client_free(c);
	return body;
}

bool tu_pid_alive(pid_t pid)
{
	char path[64], *status = NULL;
	bool alive;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if (read_file_capped(path, 1 << 16, &status, NULL) < 0)
		return false;
	alive = !strstr(status, "State:\tZ");
	free(status);
	return alive;
}

double tu_lessee_metric(const struct tu_lessee *d, const char *name, const char *label,
                        const char *value)
{
	long status = 0;
	_cleanup_free_ char *body = tu_lessee_status_get(d, "/metrics", &status);
	prom_doc_t *doc = NULL;
	double n;

	if (!body || status != 200 || prom_parse(body, strlen(body), &doc, NULL) < 0)
		return NAN;
	n = label ? prom_sum(doc, name, label, value, NULL) : prom_sum(doc, name, NULL);
	prom_free(doc);
	return isnan(n) ? 0 : n;
}
