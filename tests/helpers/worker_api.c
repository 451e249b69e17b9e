#include "worker_api.h"

#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonutil.h"
#include "util/macro.h"
#include "util/strutil.h"

void tu_worker_start(char *const *args, struct tu_lessor **ret_l, const char **ret_token)
{
	ck_assert_int_eq(tu_lessor_start(&(struct tu_lessor_opts){.args = args}, ret_l), 0);
	*ret_token = NULL;
}

void tu_worker_start_scoped(struct tu_lessor **ret_l, const char **ret_token)
{
	ck_assert_int_eq(
	    tu_lessor_start(&(struct tu_lessor_opts){.admin_token = TU_ADMIN_TOKEN,
	                                             .worker_tokens = "alpha " TU_ALPHA_TOKEN
	                                                              "\nbeta " TU_BETA_TOKEN "\n"},
	                    ret_l),
	    0);
	*ret_token = TU_ALPHA_TOKEN;
}

void tu_worker_stop(struct tu_lessor **l)
{
	if (*l && tu_lessor_pid(*l) > 0)
		ck_assert_int_eq(tu_lessor_stop(*l), 0);
	*l = tu_lessor_free(*l);
}

long tu_worker_post(const struct tu_lessor *l, const char *token, const char *path,
                    const char *body, cJSON **ret_resp)
{
	_cleanup_free_ char *url = tu_fmt("%s%s", tu_lessor_url(l), path);
	long status = 0;

	if (token)
		ck_assert_int_eq(tu_http_json("POST", url, token, body, &status, ret_resp), 0);
	else
		ck_assert_int_eq(tu_lessor_json(l, "POST", path, body, &status, ret_resp), 0);
	return status;
}

void tu_worker_assert_workers_only(const struct tu_lessor *l, const char *path, const char *body)
{
	_cleanup_free_ char *url = tu_fmt("%s%s", tu_lessor_url(l), path);
	long status = 0;

	ck_assert_int_eq(tu_http_json("POST", url, TU_ADMIN_TOKEN, body, &status, NULL), 0);
	ck_assert_int_eq(status, 403);
	ck_assert_int_eq(tu_http_json("POST", url, NULL, body, &status, NULL), 0);
	ck_assert_int_eq(status, 401);
}

const cJSON *tu_worker_entry(const cJSON *answer, const char *array, int i, const char *id)
{
	const cJSON *e = cJSON_GetArrayItem(tu_jget(answer, array), i);

	ck_assert_ptr_nonnull(e);
	ck_assert_str_eq(tu_jstr_or(e, "id", ""), id);
	return e;
}

long tu_worker_renew(const struct tu_lessor *l, const char *token, const struct tu_grant *g)
{
	_cleanup_free_ char *path = tu_fmt("/v1/runs/%s/lease", g->id);
	_cleanup_free_ char *body = tu_fmt("{\"token\":\"%s\",\"ttl_s\":60}", g->token);

	return tu_worker_post(l, token, path, body, NULL);
}

void tu_worker_grant(const cJSON *answer, int i, struct tu_grant *ret)
{
	const cJSON *run = cJSON_GetArrayItem(tu_jget(answer, "runs"), i);

	ck_assert_ptr_nonnull(run);
	snprintf(ret->id, sizeof(ret->id), "%s", tu_jstr_or(run, "id", ""));
	snprintf(ret->token, sizeof(ret->token), "%s",
	         tu_jstr_or(tu_jget(run, "lease"), "token", ""));
	ck_assert_str_ne(ret->token, "");
}

void tu_worker_claim(const struct tu_lessor *l, const char *token, const char *body, int n,
                     struct tu_grant *ret)
{
	cJSON *j = NULL;

	ck_assert_int_eq(tu_worker_post(l, token, "/v1/claims", body, &j), 200);
	ck_assert_int_eq(cJSON_GetArraySize(tu_jget(j, "runs")), n);
	for (int i = 0; i < n; i++)
		tu_worker_grant(j, i, &ret[i]);
	cJSON_Delete(j);
}

char *tu_worker_fill(const char *tmpl, const struct tu_grant *g)
{
	char *s = strdup("");

	ck_assert_ptr_nonnull(s);
	for (const char *p = tmpl; *p; p++) {
		bool var = (*p == '@' || *p == '#') && p[1] >= '0' && p[1] <= '9';
		char *t =
		    var ? tu_fmt("%s%s", s, *p == '@' ? g[p[1] - '0'].id : g[p[1] - '0'].token)
		        : tu_fmt("%s%c", s, *p);

		p += var;
		free(s);
		s = t;
	}
	return s;
}

void tu_worker_fault(const struct tu_lessor *l, const char *body, long want)
{
	long status = 0;

	ck_assert_int_eq(tu_lessor_json(l, "POST", "/v1/admin/faults", body, &status, NULL), 0);
	ck_assert_int_eq(status, want);
}

cJSON *tu_worker_get_run(const struct tu_lessor *l, const char *id)
{
	cJSON *run = tu_lessor_get_run(l, id);

	ck_assert_ptr_nonnull(run);
	return run;
}

void tu_worker_assert_status(const struct tu_lessor *l, const char *id, const char *want)
{
	cJSON *run = tu_worker_get_run(l, id);

	ck_assert_msg(streq(tu_jstr_or(run, "status", ""), want), "%s is %s, want %s", id,
	              tu_jstr_or(run, "status", ""), want);
	cJSON_Delete(run);
}

int tu_worker_rejected_writes(const struct tu_lessor *l, const char *id)
{
	cJSON *run = tu_worker_get_run(l, id);
	int n = tu_jget(run, "rejected_writes")->valueint;

	cJSON_Delete(run);
	return n;
}
