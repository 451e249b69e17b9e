#include "lessor_proc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pg_proc.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"

#define READY_FD 3

struct tu_lessor {
	char *dir;
	char *db;
	char *log;
	char *token;
	char *token_file;
	bool scoped; /* token_file is --admin-token-file */
	char *workers_file;
	char **args;
	bool sync_normal;
	char listen[128]; /* "127.0.0.1:0" first, then the port it got */
	char url[160];
	pid_t pid;
};

usec_t tu_timeout(usec_t base)
{
	const char *m = getenv("CK_TIMEOUT_MULTIPLIER");
	long v = m ? strtol(m, NULL, 10) : 1;

	return base * (usec_t)(v > 1 ? v : 1);
}

static void dump_log(const struct tu_lessor *l)
{
	_cleanup_free_ char *text = NULL;

	if (read_file_capped(l->log, 1 << 20, &text, NULL) >= 0 && text)
		fprintf(stderr, "---- %s ----\n%s---- end ----\n", l->log, text);
}

/* argv: [wrap...] lessor serve --listen A --db D --ready-fd 3 [--token-file F] [args...] */
static char **build_argv(const struct tu_lessor *l)
{
	char **argv = tu_wrap_argv();
	char fd[8];
	int r = 0;

	if (!argv)
		argv = calloc(1, sizeof(char *));
	if (!argv)
		return NULL;
	snprintf(fd, sizeof(fd), "%d", READY_FD);
	const char *base[] = {tu_lessor_bin(), "serve",      "--listen", l->listen,     "--db",
	                      l->db,           "--ready-fd", fd,         "--log-level", "debug"};
	for (size_t i = 0; i < ELEMENTSOF(base) && r >= 0; i++)
		r = strv_extend(&argv, base[i]);
	if (r >= 0 && l->token_file)
		r = strv_extend(&argv, l->scoped ? "--admin-token-file" : "--token-file") < 0
		        ? -ENOMEM
		        : strv_extend(&argv, l->token_file);
	if (r >= 0 && l->workers_file)
		r = strv_extend(&argv, "--worker-tokens-file") < 0
		        ? -ENOMEM
		        : strv_extend(&argv, l->workers_file);
	if (r >= 0 && l->sync_normal)
		r = strv_extend(&argv, "--synchronous") < 0 ? -ENOMEM
		                                            : strv_extend(&argv, "normal");
	for (size_t i = 0; r >= 0 && l->args && l->args[i]; i++)
		r = strv_extend(&argv, l->args[i]);
	return r < 0 ? strv_free(argv) : argv;
}

static int spawn(struct tu_lessor *l, int ready_w)
{
	char **argv = build_argv(l);
	int r;

	if (!argv)
		return -ENOMEM;
	r = tu_spawn_logged(argv, NULL, l->log, ready_w, READY_FD, &l->pid);
	strv_free(argv);
	if (r < 0)
		l->pid = -1;
	return r;
}

/* Reads "ADDR:PORT\n" from the ready pipe. */
static int read_ready(struct tu_lessor *l, int fd)
{
	char buf[128];
	size_t got = 0;
	usec_t end = time_mono() + tu_timeout(20 * USEC_PER_SEC);

	while (got < sizeof(buf) - 1 && !memchr(buf, '\n', got)) {
		struct pollfd p = {.fd = fd, .events = POLLIN};
		usec_t now = time_mono();
		ssize_t n;

		if (now >= end)
			return -ETIMEDOUT;
		if (poll(&p, 1, (int)((end - now) / USEC_PER_MSEC) + 1) <= 0)
			continue;
		n = read(fd, buf + got, sizeof(buf) - 1 - got);
		if (n <= 0)
			return n == 0 ? -EPIPE : -errno;
		got += (size_t)n;
	}
	buf[got] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	snprintf(l->listen, sizeof(l->listen), "%s", buf);
	snprintf(l->url, sizeof(l->url), "http://%s", buf);
	return 0;
}

static int wait_exit(struct tu_lessor *l, usec_t timeout)
{
	usec_t end = time_mono() + timeout;
	int status;

	for (;;) {
		pid_t p = waitpid(l->pid, &status, WNOHANG);

		if (p == l->pid)
			break;
		if (p < 0)
			return -errno;
		if (time_mono() >= end) {
			kill(l->pid, SIGKILL);
			waitpid(l->pid, &status, 0);
			l->pid = -1;
			dump_log(l);
			return -ETIMEDOUT;
		}
		tu_sleep(5 * USEC_PER_MSEC);
	}
	l->pid = -1;
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	return 128 + WTERMSIG(status);
}

static int launch(struct tu_lessor *l)
{
	int p[2], r;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	/* dup2 onto READY_FD in the child must not be a no-op: keep both ends above it */
	for (int i = 0; i < 2; i++) {
		int hi = fcntl(p[i], F_DUPFD_CLOEXEC, 10);

		close(p[i]);
		p[i] = hi;
	}
	r = spawn(l, p[1]);
	close(p[1]);
	if (r >= 0)
		r = read_ready(l, p[0]);
	close(p[0]);
	if (r < 0 && l->pid > 0) {
		kill(l->pid, SIGKILL);
		(void)wait_exit(l, 5 * USEC_PER_SEC);
		dump_log(l);
	}
	return r;
}

static int write_token(struct tu_lessor *l)
{
	if (asprintf(&l->token_file, "%s/token", l->dir) < 0) {
		l->token_file = NULL;
		return -ENOMEM;
	}
	return write_file_atomic(l->token_file, l->token, strlen(l->token), 0600);
}

static int write_workers(struct tu_lessor *l, const char *text)
{
	if (!l->workers_file && asprintf(&l->workers_file, "%s/worker-tokens", l->dir) < 0) {
		l->workers_file = NULL;
		return -ENOMEM;
	}
	return write_file_atomic(l->workers_file, text, strlen(text), 0600);
}

static int write_tokens(struct tu_lessor *l, const struct tu_lessor_opts *opts)
{
	const char *t = opts->admin_token ? opts->admin_token : opts->token;
	int r;

	l->scoped = opts->admin_token != NULL;
	if (t) {
		l->token = strdup(t);
		if (!l->token)
			return -ENOMEM;
		r = write_token(l);
		if (r < 0)
			return r;
	}
	return opts->worker_tokens ? write_workers(l, opts->worker_tokens) : 0;
}

int tu_lessor_set_worker_tokens(struct tu_lessor *l, const char *text)
{
	int r = write_workers(l, text);

	if (r < 0)
		return r;
	return l->pid > 0 && kill(l->pid, SIGHUP) < 0 ? -errno : 0;
}

int tu_lessor_wait_log(const struct tu_lessor *l, const char *needle, usec_t timeout)
{
	usec_t end = time_mono() + tu_timeout(timeout);

	do {
		_cleanup_free_ char *text = NULL;

		if (read_file_capped(l->log, 16 << 20, &text, NULL) >= 0 && text &&
		    strstr(text, needle))
			return 0;
		tu_sleep(20 * USEC_PER_MSEC);
	} while (time_mono() < end);
	return -ETIMEDOUT;
}

/* $LESSOR_TEST_PG (the conninfo of a PostgreSQL server's maintenance
 * database): each server gets a new database there instead of a SQLite
 * file, so a suite written for SQLite runs against PostgreSQL. */
static char *pg_db(void)
{
	static unsigned n;
	const char *server = getenv("LESSOR_TEST_PG");
	char sql[96], *info = NULL;

	snprintf(sql, sizeof(sql), "l_%d_%u", (int)getpid(), n++);
	if (asprintf(&info, "%s dbname=%s", server, sql) < 0)
		return NULL;
	{
		char create[128];

		snprintf(create, sizeof(create), "CREATE DATABASE %s", sql);
		if (tu_pg_exec(server, create) < 0) {
			free(info);
			return NULL;
		}
	}
	return info;
}

int tu_lessor_start(const struct tu_lessor_opts *opts, struct tu_lessor **ret)
{
	struct tu_lessor *l = calloc(1, sizeof(*l));
	int r = -ENOMEM;

	if (!l)
		return -ENOMEM;
	l->pid = -1;
	l->sync_normal = opts && opts->sync_normal;
	snprintf(l->listen, sizeof(l->listen), "127.0.0.1:0");
	l->dir = tu_tmpdir("lessor");
	if (!l->dir || asprintf(&l->log, "%s/lessor.log", l->dir) < 0)
		goto fail;
	if (getenv("LESSOR_TEST_PG") ? !(l->db = pg_db())
	                             : asprintf(&l->db, "%s/lessor.db", l->dir) < 0)
		goto fail;
	if (opts && opts->args && !(l->args = strv_copy(opts->args)))
		goto fail;
	if (opts && (r = write_tokens(l, opts)) < 0)
		goto fail;
	r = launch(l);
	if (r < 0)
		goto fail;
	*ret = l;
	return 0;
fail:
	tu_lessor_free(l);
	return r;
}

int tu_lessor_stop(struct tu_lessor *l)
{
	int r;

	if (l->pid <= 0)
		return -ESRCH;
	kill(l->pid, SIGTERM);
	r = wait_exit(l, tu_timeout(30 * USEC_PER_SEC));
	if (r != 0)
		dump_log(l);
	return r;
}

int tu_lessor_kill(struct tu_lessor *l)
{
	if (l->pid <= 0)
		return -ESRCH;
	kill(l->pid, SIGKILL);
	return wait_exit(l, tu_timeout(30 * USEC_PER_SEC));
}

int tu_lessor_restart(struct tu_lessor *l)
{
	if (l->pid > 0)
		return -EBUSY;
	return launch(l);
}

struct tu_lessor *tu_lessor_free(struct tu_lessor *l)
{
	if (!l)
		return NULL;
	if (l->pid > 0)
		(void)tu_lessor_stop(l);
	if (l->dir)
		rm_rf(l->dir);
	free(l->dir);
	free(l->db);
	free(l->log);
	free(l->token);
	free(l->token_file);
	free(l->workers_file);
	strv_free(l->args);
	free(l);
	return NULL;
}

const char *tu_lessor_url(const struct tu_lessor *l)
{
	return l->url;
}

const char *tu_lessor_token(const struct tu_lessor *l)
{
	return l->token;
}

const char *tu_lessor_dir(const struct tu_lessor *l)
{
	return l->dir;
}

const char *tu_lessor_db(const struct tu_lessor *l)
{
	return l->db;
}

pid_t tu_lessor_pid(const struct tu_lessor *l)
{
	return l->pid;
}

lessor_client *tu_lessor_client(const struct tu_lessor *l)
{
	lessor_client *c = NULL;

	return lessor_client_new(l->url, l->token, &c) < 0 ? NULL : c;
}

int tu_http_json(const char *method, const char *url, const char *token, const char *body_json,
                 long *ret_status, cJSON **ret_resp)
{
	lessor_client *c = NULL;
	int r = lessor_client_new(url, token, &c);

	if (r < 0)
		return r;
	r = lessor_client_json(c, method, "", body_json, ret_status, ret_resp);
	lessor_client_free(c);
	return r;
}

int tu_lessor_json(const struct tu_lessor *l, const char *method, const char *path,
                   const char *body_json, long *ret_status, cJSON **ret_resp)
{
	_cleanup_free_ char *url = NULL;

	if (asprintf(&url, "%s%s", l->url, path) < 0)
		return -ENOMEM;
	return tu_http_json(method, url, l->token, body_json, ret_status, ret_resp);
}

int tu_lessor_fault(const struct tu_lessor *l, const char *json)
{
	long status = 0;
	int r = tu_lessor_json(l, "POST", "/v1/admin/faults", json, &status, NULL);

	return r < 0 ? r : status == 200 ? 0 : -EIO;
}

char *tu_lessor_enqueue(const struct tu_lessor *l, const char *body_json)
{
	cJSON *j = NULL;
	const cJSON *id;
	long status = 0;
	char *out = NULL;

	if (tu_lessor_json(l, "POST", "/v1/runs", body_json, &status, &j) < 0)
		return NULL;
	id = cJSON_GetObjectItemCaseSensitive(j, "id");
	if ((status == 200 || status == 201) && cJSON_IsString(id))
		out = strdup(id->valuestring);
	cJSON_Delete(j);
	return out;
}

char *tu_lessor_enqueue_wf(const struct tu_lessor *l, const char *workflow, const char *extra_json)
{
	_cleanup_free_ char *body = NULL;
	char *id;

	if (asprintf(&body, "{\"workflow\":\"%s\"%s%s}", workflow, extra_json ? "," : "",
	             extra_json ? extra_json : "") < 0)
		return NULL;
	id = tu_lessor_enqueue(l, body);
	if (!id)
		fprintf(stderr, "cannot enqueue %s\n", body);
	return id;
}

char *tu_lessor_enqueue_one(const struct tu_lessor *l, const char *workflow)
{
	return tu_lessor_enqueue_wf(l, workflow, "\"max_attempts\":1");
}

cJSON *tu_lessor_get_run(const struct tu_lessor *l, const char *id)
{
	char path[256];
	cJSON *j = NULL;
	long status = 0;

	snprintf(path, sizeof(path), "/v1/runs/%s", id);
	if (tu_lessor_json(l, "GET", path, NULL, &status, &j) < 0 || status != 200) {
		cJSON_Delete(j);
		return NULL;
	}
	return j;
}

/* What the run is like when it did not get where a test waited for it. */
static void run_print(const struct tu_lessor *l, const char *id, const char *status)
{
	cJSON *run = tu_lessor_get_run(l, id);
	char *s = run ? cJSON_Print(run) : NULL;

	fprintf(stderr, "run %s did not reach %s:\n%s\n", id, status, s ? s : "?");
	free(s);
	cJSON_Delete(run);
}

int tu_lessor_wait_status(const struct tu_lessor *l, const char *id, const char *status,
                          usec_t timeout)
{
	usec_t end = time_mono() + tu_timeout(timeout);

	do {
		cJSON *run = tu_lessor_get_run(l, id);
		const cJSON *s = cJSON_GetObjectItemCaseSensitive(run, "status");
		bool done = cJSON_IsString(s) && streq(s->valuestring, status);

		cJSON_Delete(run);
		if (done)
			return 0;
		tu_sleep(20 * USEC_PER_MSEC);
	} while (time_mono() < end);
	run_print(l, id, status);
	return -ETIMEDOUT;
}

long long tu_rfc3339_ms(const char *s)
{
	struct tm tm = {0};
	int ms = 0, n = 0;

	if (!s ||
	    sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
	           &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &ms, &n) != 7 ||
	    s[n] != '\0')
		return -1;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	return (long long)timegm(&tm) * 1000 + ms;
}
