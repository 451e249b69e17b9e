#include "conductor_proc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lessor_proc.h" /* tu_timeout */
#include "util/fileio.h"
#include "util/macro.h"

#define REL "conductor/conductor_emu"

struct tu_conductor {
	struct tu_emu *emu;
};

char *tu_conductor_bin(void)
{
	return tu_emu_bin(REL);
}

static int start_args(struct tu_conductor *c, const struct tu_conductor_opts *o)
{
	_cleanup_free_ char *secret = NULL;
	char ttl[24], sweep[24], threshold[24];
	const char *args[14] = {0};
	size_t n = 0;
	int r;

	if (o && o->key_id) {
		if (asprintf(&secret, "%s/key-secret", tu_emu_dir(c->emu)) < 0)
			return -ENOMEM;
		if ((r = write_file_atomic(secret, o->key_secret ? o->key_secret : "",
		                           o->key_secret ? strlen(o->key_secret) : 0, 0600)) < 0)
			return r;
		args[n++] = "--auth-key-id";
		args[n++] = o->key_id;
		args[n++] = "--auth-secret-file";
		args[n++] = secret;
	}
	if (o && o->token_ttl_s) {
		snprintf(ttl, sizeof(ttl), "%u", o->token_ttl_s);
		args[n++] = "--token-ttl";
		args[n++] = ttl;
	}
	if (o && o->sweep_ms) {
		snprintf(sweep, sizeof(sweep), "%u", o->sweep_ms);
		args[n++] = "--sweep-ms";
		args[n++] = sweep;
	}
	if (o && o->input_threshold_kb) {
		snprintf(threshold, sizeof(threshold), "%u", o->input_threshold_kb);
		args[n++] = "--task-input-threshold-kb";
		args[n++] = threshold;
	}
	if (o && o->quiet)
		args[n++] = "--quiet";
	return tu_emu_launch(c->emu, REL, args);
}

int tu_conductor_start(const struct tu_conductor_opts *opts, struct tu_conductor **ret)
{
	struct tu_conductor *c = calloc(1, sizeof(*c));
	int r;

	if (!c)
		return -ENOMEM;
	if ((r = tu_emu_new("conductor", &c->emu)) < 0 || (r = start_args(c, opts)) < 0) {
		tu_conductor_free(c);
		return r;
	}
	*ret = c;
	return 0;
}

int tu_conductor_stop(struct tu_conductor *c)
{
	return tu_emu_stop(c->emu);
}

struct tu_conductor *tu_conductor_free(struct tu_conductor *c)
{
	if (!c)
		return NULL;
	tu_emu_free(c->emu);
	free(c);
	return NULL;
}

const char *tu_conductor_url(const struct tu_conductor *c)
{
	return tu_emu_url(c->emu);
}

const char *tu_conductor_dir(const struct tu_conductor *c)
{
	return tu_emu_dir(c->emu);
}

const char *tu_conductor_log(const struct tu_conductor *c)
{
	return tu_emu_log(c->emu);
}

pid_t tu_conductor_pid(const struct tu_conductor *c)
{
	return tu_emu_pid(c->emu);
}

int tu_conductor_http(const struct tu_conductor *c, const char *method, const char *path,
                      const char *const *headers, const char *body, bool chunked,
                      struct tu_http_answer *ret)
{
	return tu_emu_http(c->emu, method, path, headers, body, chunked, ret);
}

cJSON *tu_conductor_json(const struct tu_conductor *c, const char *method, const char *path,
                         const char *body, long *ret_status)
{
	return tu_emu_json(c->emu, method, path, body, ret_status);
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
	return tu_emu_fault(c->emu, json);
}

double tu_conductor_stat(const struct tu_conductor *c, const char *name)
{
	return tu_emu_stat(c->emu, name);
}
