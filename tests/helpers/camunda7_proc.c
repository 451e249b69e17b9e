#include "camunda7_proc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lessor_proc.h" /* tu_timeout */
#include "util/fileio.h"
#include "util/macro.h"

#define REL "camunda7/camunda7_emu"

struct tu_camunda7 {
	struct tu_emu *emu;
	char url[200];
	char *auth; /* "Authorization: ..." for tu_camunda7_json, or NULL */
};

char *tu_camunda7_bin(void)
{
	return tu_emu_bin(REL);
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *base64(const char *s)
{
	size_t n = strlen(s), o = 0;
	char *out = malloc(4 * ((n + 2) / 3) + 1);

	if (!out)
		return NULL;
	for (size_t i = 0; i < n; i += 3) {
		unsigned v = (unsigned)(unsigned char)s[i] << 16;

		if (i + 1 < n)
			v |= (unsigned)(unsigned char)s[i + 1] << 8;
		if (i + 2 < n)
			v |= (unsigned char)s[i + 2];
		out[o++] = b64[(v >> 18) & 63];
		out[o++] = b64[(v >> 12) & 63];
		out[o++] = i + 1 < n ? b64[(v >> 6) & 63] : '=';
		out[o++] = i + 2 < n ? b64[v & 63] : '=';
	}
	out[o] = '\0';
	return out;
}

/* The secrets go in files in the emulator's directory, as lessee takes them. */
static int write_secret(struct tu_camunda7 *c, const char *name, const char *value, char **ret)
{
	if (asprintf(ret, "%s/%s", tu_emu_dir(c->emu), name) < 0)
		return -ENOMEM;
	return write_file_atomic(*ret, value, strlen(value), 0600);
}

static int start_args(struct tu_camunda7 *c, const struct tu_camunda7_opts *o)
{
	_cleanup_free_ char *pw = NULL, *tok = NULL, *pair = NULL, *enc = NULL;
	const char *args[8] = {0};
	size_t n = 0;
	int r;

	if (o && o->user) {
		if ((r = write_secret(c, "password", o->password ? o->password : "", &pw)) < 0)
			return r;
		args[n++] = "--basic-user";
		args[n++] = o->user;
		args[n++] = "--basic-password-file";
		args[n++] = pw;
		if (asprintf(&pair, "%s:%s", o->user, o->password ? o->password : "") < 0 ||
		    !(enc = base64(pair)) || asprintf(&c->auth, "Authorization: Basic %s", enc) < 0)
			return -ENOMEM;
	} else if (o && o->bearer) {
		if ((r = write_secret(c, "token", o->bearer, &tok)) < 0)
			return r;
		args[n++] = "--bearer-token-file";
		args[n++] = tok;
		if (asprintf(&c->auth, "Authorization: Bearer %s", o->bearer) < 0)
			return -ENOMEM;
	}
	if (o && o->quiet)
		args[n++] = "--quiet";
	if (o && o->no_spin)
		args[n++] = "--no-spin";
	return tu_emu_launch(c->emu, REL, args);
}

int tu_camunda7_start(const struct tu_camunda7_opts *o, struct tu_camunda7 **ret)
{
	struct tu_camunda7 *c = calloc(1, sizeof(*c));
	int r;

	if (!c)
		return -ENOMEM;
	if ((r = tu_emu_new("camunda7", &c->emu)) < 0 || (r = start_args(c, o)) < 0) {
		tu_camunda7_free(c);
		return r;
	}
	snprintf(c->url, sizeof(c->url), "%s/engine-rest", tu_emu_url(c->emu));
	*ret = c;
	return 0;
}

int tu_camunda7_stop(struct tu_camunda7 *c)
{
	return tu_emu_stop(c->emu);
}

struct tu_camunda7 *tu_camunda7_free(struct tu_camunda7 *c)
{
	if (!c)
		return NULL;
	tu_emu_free(c->emu);
	free(c->auth);
	free(c);
	return NULL;
}

const char *tu_camunda7_url(const struct tu_camunda7 *c)
{
	return c->url;
}

const char *tu_camunda7_dir(const struct tu_camunda7 *c)
{
	return tu_emu_dir(c->emu);
}

const char *tu_camunda7_log(const struct tu_camunda7 *c)
{
	return tu_emu_log(c->emu);
}

pid_t tu_camunda7_pid(const struct tu_camunda7 *c)
{
	return tu_emu_pid(c->emu);
}

int tu_camunda7_http(const struct tu_camunda7 *c, const char *method, const char *path,
                     const char *const *headers, const char *body, struct tu_http_answer *ret)
{
	return tu_emu_http(c->emu, method, path, headers, body, false, ret);
}

cJSON *tu_camunda7_json(const struct tu_camunda7 *c, const char *method, const char *path,
                        const char *body, long *ret_status)
{
	const char *h[3] = {0};
	struct tu_http_answer a;
	size_t n = 0;
	cJSON *j;

	if (ret_status)
		*ret_status = 0;
	if (body)
		h[n++] = "Content-Type: application/json";
	if (c->auth)
		h[n++] = c->auth;
	if (tu_emu_http(c->emu, method, path, h, body, false, &a) < 0)
		return NULL;
	if (ret_status)
		*ret_status = a.status;
	j = cJSON_ParseWithLength(a.body, a.len);
	tu_http_answer_done(&a);
	return j;
}

char *tu_camunda7_create(const struct tu_camunda7 *c, const char *body_json)
{
	long st;
	cJSON *j = tu_camunda7_json(c, "POST", "/emu/tasks", body_json, &st);
	const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "id");
	char *r = st == 200 && cJSON_IsString(id) ? strdup(id->valuestring) : NULL;

	cJSON_Delete(j);
	return r;
}

cJSON *tu_camunda7_task(const struct tu_camunda7 *c, const char *id)
{
	_cleanup_free_ char *path = NULL;
	long st;
	cJSON *j;

	if (asprintf(&path, "/emu/tasks/%s", id) < 0)
		return NULL;
	j = tu_camunda7_json(c, "GET", path, NULL, &st);
	if (st != 200) {
		cJSON_Delete(j);
		return NULL;
	}
	return j;
}

static int task_action(const struct tu_camunda7 *c, const char *id, const char *what)
{
	_cleanup_free_ char *path = NULL;
	long st;

	if (asprintf(&path, "/emu/tasks/%s/%s", id, what) < 0)
		return -ENOMEM;
	cJSON_Delete(tu_camunda7_json(c, "POST", path, "{}", &st));
	return st == 200 ? 0 : st == 404 ? -ESRCH : st == 409 ? -EALREADY : -EIO;
}

int tu_camunda7_cancel(const struct tu_camunda7 *c, const char *id)
{
	return task_action(c, id, "cancel");
}

int tu_camunda7_expire(const struct tu_camunda7 *c, const char *id)
{
	return task_action(c, id, "expire");
}

int tu_camunda7_fault(const struct tu_camunda7 *c, const char *json)
{
	return tu_emu_fault(c->emu, json);
}

double tu_camunda7_stat(const struct tu_camunda7 *c, const char *name)
{
	return tu_emu_stat(c->emu, name);
}

static cJSON *wait_path(const struct tu_camunda7 *c, const char *query, usec_t timeout)
{
	_cleanup_free_ char *path = NULL;
	long st;
	cJSON *j;

	if (asprintf(&path, "/emu/wait?%s&timeout_ms=%llu", query,
	             (unsigned long long)(tu_timeout(timeout) / USEC_PER_MSEC)) < 0)
		return NULL;
	j = tu_camunda7_json(c, "GET", path, NULL, &st);
	if (st != 200) {
		cJSON_Delete(j);
		return NULL;
	}
	return j;
}

cJSON *tu_camunda7_wait(const struct tu_camunda7 *c, const char *id, const char *state,
                        usec_t timeout)
{
	_cleanup_free_ char *q = NULL;

	if (asprintf(&q, "id=%s&state=%s", id, state) < 0)
		return NULL;
	return wait_path(c, q, timeout);
}

cJSON *tu_camunda7_wait_count(const struct tu_camunda7 *c, const char *id, const char *counter,
                              int n, usec_t timeout)
{
	_cleanup_free_ char *q = NULL;

	if (asprintf(&q, "id=%s&counter=%s&count=%d", id, counter, n) < 0)
		return NULL;
	return wait_path(c, q, timeout);
}
