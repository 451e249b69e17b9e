#include "emu_proc.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lessor_proc.h" /* tu_timeout */
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"

#define READY_FD 3

struct tu_emu {
	char *dir;
	char *log;
	char **argv;
	char url[160];
	pid_t pid;
};

char *tu_emu_bin(const char *rel)
{
	const char *aux = getenv("LESSEE_TEST_AUX");
	size_t n;
	char *p;

	/* $LESSEE_TEST_AUX is BUILD/tests/aux; the emulators are BUILD/tests/<dir>/
	 * (textually: aux/ may not exist when only they were built) */
	if (!aux)
		aux = "build/default/tests/aux";
	n = strlen(aux);
	while (n > 0 && aux[n - 1] == '/')
		n--;
	while (n > 0 && aux[n - 1] != '/')
		n--;
	if (asprintf(&p, "%.*s%s", (int)n, aux, rel) < 0)
		return NULL;
	return p;
}

static void dump_log(const struct tu_emu *c)
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

static int build_argv(struct tu_emu *e, const char *rel, const char *const *args)
{
	_cleanup_free_ char *bin = tu_emu_bin(rel);
	char fd[8];

	strv_free(e->argv);
	e->argv = tu_wrap_argv();
	if (!e->argv && !(e->argv = calloc(1, sizeof(char *))))
		return -ENOMEM;
	snprintf(fd, sizeof(fd), "%d", READY_FD);
	if (!bin || add(&e->argv, bin, NULL) < 0 || add(&e->argv, "--ready-fd", fd) < 0)
		return -ENOMEM;
	for (size_t i = 0; args && args[i]; i++)
		if (add(&e->argv, args[i], NULL) < 0)
			return -ENOMEM;
	return 0;
}

static int spawn(struct tu_emu *c, int ready_w)
{
	int r = tu_spawn_logged(c->argv, NULL, c->log, ready_w, READY_FD, &c->pid);

	if (r < 0)
		c->pid = -1;
	return r;
}

/* "127.0.0.1:PORT\n" from the ready pipe. */
static int read_ready(struct tu_emu *c, int fd)
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

static int wait_exit(struct tu_emu *c, usec_t timeout)
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

static int launch(struct tu_emu *c)
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

int tu_emu_new(const char *name, struct tu_emu **ret)
{
	struct tu_emu *e = calloc(1, sizeof(*e));

	if (!e)
		return -ENOMEM;
	e->pid = -1;
	e->dir = tu_tmpdir(name);
	if (!e->dir || asprintf(&e->log, "%s/%s.log", e->dir, name) < 0) {
		tu_emu_free(e);
		return -ENOMEM;
	}
	*ret = e;
	return 0;
}

int tu_emu_launch(struct tu_emu *e, const char *rel, const char *const *args)
{
	int r = build_argv(e, rel, args);

	return r < 0 ? r : launch(e);
}

int tu_emu_stop(struct tu_emu *e)
{
	int r;

	if (e->pid <= 0)
		return -ESRCH;
	kill(e->pid, SIGTERM);
	r = wait_exit(e, tu_timeout(30 * USEC_PER_SEC));
	if (r != 0)
		dump_log(e);
	return r;
}

struct tu_emu *tu_emu_free(struct tu_emu *e)
{
	if (!e)
		return NULL;
	if (e->pid > 0)
		(void)tu_emu_stop(e);
	if (e->dir)
		rm_rf(e->dir);
	free(e->dir);
	free(e->log);
	strv_free(e->argv);
	free(e);
	return NULL;
}

const char *tu_emu_url(const struct tu_emu *e)
{
	return e->url;
}

const char *tu_emu_dir(const struct tu_emu *e)
{
	return e->dir;
}

const char *tu_emu_log(const struct tu_emu *e)
{
	return e->log;
}

pid_t tu_emu_pid(const struct tu_emu *e)
{
	return e->pid;
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

/* WWW-Authenticate, for the tests of a 401's challenge. */
static size_t on_header(char *p, size_t size, size_t n, void *ud)
{
	struct tu_http_answer *a = ud;
	size_t len = size * n;
	static const char name[] = "WWW-Authenticate:";

	if (len > sizeof(name) - 1 && strncasecmp(p, name, sizeof(name) - 1) == 0) {
		size_t i = sizeof(name) - 1, end = len;

		while (i < end && (p[i] == ' ' || p[i] == '\t'))
			i++;
		while (end > i && (p[end - 1] == '\r' || p[end - 1] == '\n'))
			end--;
		free(a->www_authenticate);
		a->www_authenticate = strndup(p + i, end - i);
	}
	return len;
}

void tu_http_answer_done(struct tu_http_answer *a)
{
	free(a->body);
	free(a->ctype);
	free(a->www_authenticate);
	*a = (struct tu_http_answer){0};
}

int tu_emu_http(const struct tu_emu *c, const char *method, const char *path,
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
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, &a);
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

cJSON *tu_emu_json(const struct tu_emu *c, const char *method, const char *path, const char *body,
                   long *ret_status)
{
	static const char *const json[] = {"Content-Type: application/json", NULL};
	struct tu_http_answer a;
	cJSON *j;

	if (ret_status)
		*ret_status = 0;
	if (tu_emu_http(c, method, path, body ? json : NULL, body, false, &a) < 0)
		return NULL;
	if (ret_status)
		*ret_status = a.status;
	j = cJSON_ParseWithLength(a.body, a.len);
	tu_http_answer_done(&a);
	return j;
}

int tu_emu_fault(const struct tu_emu *e, const char *json)
{
	long st;

	cJSON_Delete(tu_emu_json(e, "POST", "/emu/faults", json, &st));
	return st == 204 ? 0 : -EIO;
}

double tu_emu_stat(const struct tu_emu *e, const char *name)
{
	long st;
	cJSON *j = tu_emu_json(e, "GET", "/emu/stats", NULL, &st);
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, name);
	double r = st != 200 ? -1 : cJSON_IsNumber(v) ? v->valuedouble : 0;

	cJSON_Delete(j);
	return r;
}
