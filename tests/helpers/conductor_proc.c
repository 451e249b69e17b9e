#include "conductor_proc.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lessor_proc.h" /* tu_timeout */
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"

extern char **environ;

#define READY_FD 3

struct tu_conductor {
	char *dir;
	char *log;
	char *secret_file;
	char **argv;
	char url[160];
	pid_t pid;
};

char *tu_conductor_bin(void)
{
	const char *aux = getenv("LESSEE_TEST_AUX");
	size_t n;
	char *p;

	/* $LESSEE_TEST_AUX is BUILD/tests/aux; the emulator is BUILD/tests/conductor/
	 * (textually: aux/ may not exist when only this was built) */
	if (!aux)
		aux = "build/default/tests/aux";
	n = strlen(aux);
	while (n > 0 && aux[n - 1] == '/')
		n--;
	while (n > 0 && aux[n - 1] != '/')
		n--;
	if (asprintf(&p, "%.*sconductor/conductor_emu", (int)n, aux) < 0)
		return NULL;
	return p;
}

static void dump_log(const struct tu_conductor *c)
{
	_cleanup_free_ char *text = NULL;

	if (read_file_capped(c->log, 1 << 20, &text, NULL) >= 0 && text)
		fprintf(stderr, "---- %s ----\n%s---- end ----\n", c->log, text);
}

static int add(char ***argv, const char *a, const char *b)
{
	if (strv_extend(argv, a) < 0 || (b && strv_extend(argv, b) < 0))
		return -ENOMEM;
	return 0;
}

static int build_argv(struct tu_conductor *c, const struct tu_conductor_opts *o)
{
	_cleanup_free_ char *bin = tu_conductor_bin();
	char fd[8], num[24];
	int r;

	c->argv = tu_wrap_argv();
	if (!c->argv && !(c->argv = calloc(1, sizeof(char *))))
		return -ENOMEM;
	snprintf(fd, sizeof(fd), "%d", READY_FD);
	if (!bin || (r = add(&c->argv, bin, NULL)) < 0 || (r = add(&c->argv, "--ready-fd", fd)) < 0)
		return -ENOMEM;
	if (o && o->key_id && (r = add(&c->argv, "--auth-key-id", o->key_id)) < 0)
		return r;
	if (o && o->key_id && (r = add(&c->argv, "--auth-secret-file", c->secret_file)) < 0)
		return r;
	if (o && o->token_ttl_s) {
		snprintf(num, sizeof(num), "%u", o->token_ttl_s);
		if ((r = add(&c->argv, "--token-ttl", num)) < 0)
			return r;
	}
	if (o && o->sweep_ms) {
		snprintf(num, sizeof(num), "%u", o->sweep_ms);
		if ((r = add(&c->argv, "--sweep-ms", num)) < 0)
			return r;
	}
	if (o && o->quiet && (r = add(&c->argv, "--quiet", NULL)) < 0)
		return r;
	return 0;
}

static int spawn(struct tu_conductor *c, int ready_w)
{
	posix_spawn_file_actions_t fa;
	int r;

	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, c->log, O_WRONLY | O_CREAT | O_APPEND,
	                                 0600);
	posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
	posix_spawn_file_actions_adddup2(&fa, ready_w, READY_FD);
	r = -posix_spawnp(&c->pid, c->argv[0], &fa, NULL, c->argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (r < 0)
		c->pid = -1;
	return r;
}

/* "127.0.0.1:PORT\n" from the ready pipe. */
static int read_ready(struct tu_conductor *c, int fd)
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
	snprintf(c->url, sizeof(c->url), "http://%s", buf);
	return 0;
}

static int wait_exit(struct tu_conductor *c, usec_t timeout)
{
	usec_t end = time_mono() + timeout;
	int status;

	for (;;) {
		pid_t p = waitpid(c->pid, &status, WNOHANG);

		if (p == c->pid)
			break;
		if (p < 0)
			return -errno;
		if (time_mono() >= end) {
			kill(c->pid, SIGKILL);
			waitpid(c->pid, &status, 0);
			c->pid = -1;
			dump_log(c);
			return -ETIMEDOUT;
		}
		tu_sleep(5 * USEC_PER_MSEC);
	}
	c->pid = -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int launch(struct tu_conductor *c)
{
	int p[2], r;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	for (int i = 0; i < 2; i++) { /* keep both ends above READY_FD */
		int hi = fcntl(p[i], F_DUPFD_CLOEXEC, 10);

		close(p[i]);
		p[i] = hi;
	}
	r = spawn(c, p[1]);
	close(p[1]);
	if (r >= 0)
		r = read_ready(c, p[0]);
	close(p[0]);
	if (r < 0 && c->pid > 0) {
		kill(c->pid, SIGKILL);
		(void)wait_exit(c, 5 * USEC_PER_SEC);
		dump_log(c);
	}
	return r;
}

int tu_conductor_start(const struct tu_conductor_opts *opts, struct tu_conductor **ret)
{
	struct tu_conductor *c = calloc(1, sizeof(*c));
	int r = -ENOMEM;

	if (!c)
		return -ENOMEM;
	c->pid = -1;
	c->dir = tu_tmpdir("conductor");
	if (!c->dir || asprintf(&c->log, "%s/conductor.log", c->dir) < 0 ||
	    asprintf(&c->secret_file, "%s/key-secret", c->dir) < 0)
		goto fail;
	if (opts && opts->key_id &&
	    (r = write_file_atomic(c->secret_file, opts->key_secret ? opts->key_secret : "",
	                           opts->key_secret ? strlen(opts->key_secret) : 0, 0600)) < 0)
		goto fail;
	if ((r = build_argv(c, opts)) < 0 || (r = launch(c)) < 0)
		goto fail;
	*ret = c;
	return 0;
fail:
	tu_conductor_free(c);
	return r;
}

int tu_conductor_stop(struct tu_conductor *c)
{
	int r;

	if (c->pid <= 0)
		return -ESRCH;
	kill(c->pid, SIGTERM);
	r = wait_exit(c, tu_timeout(30 * USEC_PER_SEC));
	if (r != 0)
		dump_log(c);
	return r;
}

struct tu_conductor *tu_conductor_free(struct tu_conductor *c)
{
	if (!c)
		return NULL;
	if (c->pid > 0)
		(void)tu_conductor_stop(c);
	if (c->dir)
		rm_rf(c->dir);
	free(c->dir);
	free(c->log);
	free(c->secret_file);
	strv_free(c->argv);
	free(c);
	return NULL;
}

const char *tu_conductor_url(const struct tu_conductor *c)
{
	return c->url;
}

const char *tu_conductor_dir(const struct tu_conductor *c)
{
	return c->dir;
}

const char *tu_conductor_log(const struct tu_conductor *c)
{
	return c->log;
}

pid_t tu_conductor_pid(const struct tu_conductor *c)
{
	return c->pid;
}

/* ------------------------------------------------------------- HTTP */

#define ANSWER_MAX (64u << 20)

static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
	struct tu_http_answer *a = ud;
	size_t len = size * n;
	char *b;

	if (a->len + len > ANSWER_MAX || !(b = realloc(a->body, a->len + len + 1)))
		return 0;
	memcpy(b + a->len, p, len);
	a->body = b;
	a->len += len;
	a->body[a->len] = '\0';
	return len;
}

struct upload {
	const char *p;
	size_t left;
};

static size_t on_read(char *buf, size_t size, size_t n, void *ud)
{
	struct upload *u = ud;
	size_t len = MIN(size * n, u->left);

	memcpy(buf, u->p, len);
	u->p += len;
	u->left -= len;
	return len;
}

void tu_http_answer_done(struct tu_http_answer *a)
{
	free(a->body);
	free(a->ctype);
	*a = (struct tu_http_answer){0};
}

int tu_conductor_http(const struct tu_conductor *c, const char *method, const char *path,
                      const char *const *headers, const char *body, bool chunked,
                      struct tu_http_answer *ret)
{
	_cleanup_free_ char *url = NULL;
	struct curl_slist *h = NULL;
	struct upload u = {body, body ? strlen(body) : 0};
	struct tu_http_answer a = {0};
	CURL *e = curl_easy_init();
	CURLcode cc;
	char *ct = NULL;

	if (!e || asprintf(&url, "%s%s", c->url, path) < 0) {
		curl_easy_cleanup(e);
		return -ENOMEM;
	}
	for (size_t i = 0; headers && headers[i]; i++)
		h = curl_slist_append(h, headers[i]);
	curl_easy_setopt(e, CURLOPT_URL, url);
	curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(tu_timeout(60 * USEC_PER_SEC) / 1000));
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, &a);
	if (body && chunked) {
		h = curl_slist_append(h, "Transfer-Encoding: chunked");
		curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(e, CURLOPT_READFUNCTION, on_read);
		curl_easy_setopt(e, CURLOPT_READDATA, &u);
		h = curl_slist_append(h, "Expect:");
		a.chunked_sent = true;
	} else if (body) {
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, body);
	}
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
	cc = curl_easy_perform(e);
	if (cc == CURLE_OK) {
		curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &a.status);
		curl_easy_getinfo(e, CURLINFO_CONTENT_TYPE, &ct);
		a.ctype = ct ? strdup(ct) : NULL;
		if (!a.body)
			a.body = strdup("");
	}
	curl_slist_free_all(h);
	curl_easy_cleanup(e);
	if (cc != CURLE_OK) {
		tu_http_answer_done(&a);
		return cc == CURLE_OPERATION_TIMEDOUT ? -ETIMEDOUT : -ECONNRESET;
	}
	*ret = a;
	return 0;
}

cJSON *tu_conductor_json(const struct tu_conductor *c, const char *method, const char *path,
                         const char *body, long *ret_status)
{
	static const char *const json[] = {"Content-Type: application/json", NULL};
	struct tu_http_answer a;
	cJSON *j;

	if (ret_status)
		*ret_status = 0;
	if (tu_conductor_http(c, method, path, body ? json : NULL, body, false, &a) < 0)
		return NULL;
	if (ret_status)
		*ret_status = a.status;
	j = cJSON_ParseWithLength(a.body, a.len);
	tu_http_answer_done(&a);
	return j;
}

char *tu_conductor_create(const struct tu_conductor *c, const char *body_json)
{
	long st;
	cJSON *j = tu_conductor_json(c, "POST", "/emu/tasks", body_json, &st);
	const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "taskId");
	char *r = st == 200 && cJSON_IsString(id) ? strdup(id->valuestring) : NULL;

	cJSON_Delete(j);
	return r;
}

cJSON *tu_conductor_task(const struct tu_conductor *c, const char *id)
{
	_cleanup_free_ char *path = NULL;
	long st;
	cJSON *j;

	if (asprintf(&path, "/emu/tasks/%s", id) < 0)
		return NULL;
	j = tu_conductor_json(c, "GET", path, NULL, &st);
	if (st != 200) {
		cJSON_Delete(j);
		return NULL;
	}
	return j;
}

static cJSON *wait_for(const struct tu_conductor *c, const char *key, const char *id,
                       const char *status, usec_t timeout)
{
	_cleanup_free_ char *path = NULL;
	long st;
	cJSON *j;

	if (asprintf(&path, "/emu/wait?%s=%s&status=%s&timeout_ms=%llu", key, id, status,
	             (unsigned long long)(tu_timeout(timeout) / USEC_PER_MSEC)) < 0)
		return NULL;
	j = tu_conductor_json(c, "GET", path, NULL, &st);
	if (st != 200) {
		cJSON_Delete(j);
		return NULL;
	}
	return j;
}

cJSON *tu_conductor_wait(const struct tu_conductor *c, const char *id, const char *status,
                         usec_t timeout)
{
	return wait_for(c, "taskId", id, status, timeout);
}

cJSON *tu_conductor_wait_workflow(const struct tu_conductor *c, const char *id, const char *status,
                                  usec_t timeout)
{
	return wait_for(c, "workflowInstanceId", id, status, timeout);
}

int tu_conductor_cancel(const struct tu_conductor *c, const char *id)
{
	_cleanup_free_ char *path = NULL;
	long st;

	if (asprintf(&path, "/emu/tasks/%s/cancel", id) < 0)
		return -ENOMEM;
	cJSON_Delete(tu_conductor_json(c, "POST", path, "{}", &st));
	return st == 200 ? 0 : st == 404 ? -ESRCH : st == 409 ? -EALREADY : -EIO;
}

int tu_conductor_fault(const struct tu_conductor *c, const char *json)
{
	long st;

	cJSON_Delete(tu_conductor_json(c, "POST", "/emu/faults", json, &st));
	return st == 204 ? 0 : -EIO;
}

double tu_conductor_stat(const struct tu_conductor *c, const char *name)
{
	long st;
	cJSON *j = tu_conductor_json(c, "GET", "/emu/stats", NULL, &st);
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, name);
	double r = st != 200 ? -1 : cJSON_IsNumber(v) ? v->valuedouble : 0;

	cJSON_Delete(j);
	return r;
}
