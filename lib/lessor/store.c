/* The store's front: picks the backend from the --db target and forwards
 * every call; and the helpers the backends share (run ids, tokens, the
 * retry decision, the view columns). */
#include "lessor/store-int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lessor/json_raw.h"
#include "proto/v1.h"
#include "util/macro.h"
#include "util/random.h"
#include "util/strutil.h"
#include "util/time.h"

struct lessor_store {
	const struct lessor_store_backend *be;
	void *impl;
};

bool lessor_store_target_is_pg(const char *target)
{
	const char *eq, *slash;

	if (startswith(target, "postgresql://") || startswith(target, "postgres://"))
		return true;
	/* a libpq keyword/value conninfo: "host=... dbname=..." (no path has a
	 * keyword before its first '=' and a '/' only after it) */
	eq = strchr(target, '=');
	slash = strchr(target, '/');
	if (!eq || eq == target || (slash && slash < eq))
		return false;
	for (const char *p = target; p < eq; p++)
		if (!(*p >= 'a' && *p <= 'z') && *p != '_')
			return false;
	return true;
}

int lessor_store_open(const char *target, const struct lessor_store_config *cfg, lessor_store **ret)
{
	lessor_store *s = calloc(1, sizeof(*s));
	int r;

	if (!s)
		return -ENOMEM;
	s->be = lessor_store_target_is_pg(target) ? &lessor_store_backend_pg
	                                          : &lessor_store_backend_sqlite;
	r = s->be->open(target, cfg, &s->impl);
	if (r < 0) {
		free(s);
		return r;
	}
	*ret = s;
	return 0;
}

lessor_store *lessor_store_free(lessor_store *s)
{
	if (!s)
		return NULL;
	s->be->free(s->impl);
	free(s);
	return NULL;
}

const char *lessor_store_backend_name(const lessor_store *s)
{
	return s->be->name;
}

void lessor_store_set_notify(lessor_store *s, lessor_store_notify_fn fn, void *userdata)
{
	if (s->be->set_notify)
		s->be->set_notify(s->impl, fn, userdata);
}

void lessor_store_counters(lessor_store *s, struct lessor_store_counters *ret)
{
	s->be->counters(s->impl, ret);
}

int lessor_store_recover(lessor_store *s, int64_t now)
{
	return s->be->recover(s->impl, now);
}

int lessor_store_enqueue(lessor_store *s, const struct lessor_enqueue *e, int64_t now,
                         char ret_id[LESSOR_RUN_ID_MAX], bool *ret_created)
{
	return s->be->enqueue(s->impl, e, now, ret_id, ret_created);
}

int lessor_store_enqueue_claim(lessor_store *s, const struct lessor_enqueue *e,
                               const struct lessor_claim_req *next, int64_t now,
                               char ret_id[LESSOR_RUN_ID_MAX], bool *ret_created, int *ret_claim_r,
                               struct lessor_claim_result *ret_claim)
{
	int r;

	if (s->be->enqueue_claim)
		return s->be->enqueue_claim(s->impl, e, next, now, ret_id, ret_created, ret_claim_r,
		                            ret_claim);
	r = s->be->enqueue(s->impl, e, now, ret_id, ret_created);
	if (r >= 0)
		*ret_claim_r =
		    *ret_created ? s->be->claim(s->impl, next, now, ret_claim) : -EALREADY;
	return r;
}

int lessor_store_claim(lessor_store *s, const struct lessor_claim_req *req, int64_t now,
                       struct lessor_claim_result *ret)
{
	return s->be->claim(s->impl, req, now, ret);
}

int lessor_store_claim_cancel(lessor_store *s, const char *claim_id, int64_t now,
                              unsigned *ret_released)
{
	return s->be->claim_cancel(s->impl, claim_id, now, ret_released);
}

int lessor_store_renew(lessor_store *s, const char *id, const char *token, unsigned ttl_s,
                       int64_t now, bool *ret_cancel_requested)
{
	return s->be->renew(s->impl, id, token, ttl_s, now, ret_cancel_requested);
}

int lessor_store_renew_batch(lessor_store *s, struct lessor_renewal *v, size_t n, unsigned ttl_s,
                             int64_t now)
{
	return s->be->renew_batch(s->impl, v, n, ttl_s, now);
}

int lessor_store_append_log(lessor_store *s, const char *id, const char *token, uint64_t start,
                            const void *data, size_t len, int64_t now, uint64_t *ret_length)
{
	return s->be->append_log(s->impl, id, token, start, data, len, now, ret_length);
}

int lessor_store_complete(lessor_store *s, const char *id, const struct lessor_completion *c,
                          int64_t now, const char **ret_run_status)
{
	return s->be->complete(s->impl, id, c, now, ret_run_status);
}

int lessor_store_complete_claim(lessor_store *s, const char *id, const struct lessor_completion *c,
                                const struct lessor_claim_req *next, int64_t now,
                                const char **ret_run_status, int *ret_claim_r,
                                struct lessor_claim_result *ret_claim)
{
	int r;

	if (s->be->complete_claim)
		return s->be->complete_claim(s->impl, id, c, next, now, ret_run_status, ret_claim_r,
		                             ret_claim);
	r = s->be->complete(s->impl, id, c, now, ret_run_status);
	if (r >= 0)
		*ret_claim_r = s->be->claim(s->impl, next, now, ret_claim);
	return r;
}

/* One item of a batch on its own: a refused completion is its answer. */
static int complete_item(lessor_store *s, struct lessor_complete_item *e, int64_t now)
{
	int r;

	if (e->next)
		r = lessor_store_complete_claim(s, e->id, &e->in, e->next, now, &e->run_status,
		                                &e->claim_r, &e->claim);
	else
		r = lessor_store_complete(s, e->id, &e->in, now, &e->run_status);
	e->answer = r == -ENOENT || r == -ESTALE ? r : 0;
	return e->answer < 0 ? 0 : r;
}

int lessor_store_complete_batch(lessor_store *s, struct lessor_complete_item *v, size_t n,
                                int64_t now)
{
	int r = 0;

	if (s->be->complete_batch)
		return s->be->complete_batch(s->impl, v, n, now);
	for (size_t i = 0; i < n && r >= 0; i++)
		if (!v[i].skip)
			r = complete_item(s, &v[i], now);
	for (size_t i = 0; r < 0 && i < n; i++)
		lessor_claim_result_done(&v[i].claim);
	return r;
}

int lessor_store_release(lessor_store *s, const char *id, const char *token, const char *reason,
                         unsigned delay_s, int64_t now)
{
	return s->be->release(s->impl, id, token, reason, delay_s, now);
}

int lessor_store_cancel(lessor_store *s, const char *id, int64_t now, const char **ret_status)
{
	return s->be->cancel(s->impl, id, now, ret_status);
}

int lessor_store_requeue(lessor_store *s, const char *id, int64_t now)
{
	return s->be->requeue(s->impl, id, now);
}

int lessor_store_tick(lessor_store *s, int64_t last, int64_t now, bool *ret_wake)
{
	return s->be->tick(s->impl, last, now, ret_wake);
}

int lessor_store_run_json(lessor_store *s, const char *id, cJSON **ret)
{
	return s->be->run_json(s->impl, id, ret);
}

int lessor_store_list_json(lessor_store *s, const char *status, const char *workflow,
                           unsigned limit, cJSON **ret)
{
	return s->be->list_json(s->impl, status, workflow, limit, ret);
}

int lessor_store_stats_json(lessor_store *s, cJSON **ret)
{
	return s->be->stats_json(s->impl, ret);
}

int lessor_store_workers_json(lessor_store *s, cJSON **ret)
{
	return s->be->workers_json(s->impl, ret);
}

int lessor_store_read_log(lessor_store *s, const char *id, char **ret, size_t *ret_len)
{
	return s->be->read_log(s->impl, id, ret, ret_len);
}

int lessor_store_lease_holder(lessor_store *s, const char *id, const char *lease_token,
                              char **ret_worker_id)
{
	int64_t seq;

	if (lessor_run_id_parse(id, &seq) < 0 || seq <= 0)
		return -ENOENT;
	return s->be->lease_holder(s->impl, seq, lease_token, ret_worker_id);
}

int lessor_store_claim_owner(lessor_store *s, const char *claim_id, char **ret_worker_id)
{
	return s->be->claim_owner(s->impl, claim_id, ret_worker_id);
}

/* Ids that cannot be runs are left out: they cannot have been asked to cancel. */
int lessor_store_cancels(lessor_store *s, char *const *ids, char *const *tokens, size_t n,
                         int64_t now, char ***ret)
{
	_cleanup_free_ int64_t *seqs = calloc(n + 1, sizeof(*seqs));
	_cleanup_free_ char **toks = calloc(n + 1, sizeof(*toks));
	size_t m = 0;

	if (!seqs || !toks)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		if (lessor_run_id_parse(ids[i], &seqs[m]) >= 0 && seqs[m] > 0)
			toks[m++] = tokens[i];
	return s->be->cancels(s->impl, seqs, toks, m, now, ret);
}

/* ---- shared helpers ---- */

bool lessor_run_status_valid(const char *s)
{
	static const char *const names[] = {"pending", "running", "succeeded", "failed",
	                                    "cancelled"};

	for (size_t i = 0; i < ELEMENTSOF(names); i++)
		if (streq(s, names[i]))
			return true;
	return false;
}

int lessor_run_id_parse(const char *id, int64_t *ret_seq)
{
	const char *p = startswith(id, "r-");
	int64_t v = 0;

	/* canonical decimal only: no sign, no leading zero, at most 18 digits */
	if (!p || *p < '1' || *p > '9' || strlen(p) > 18)
		return -ENOENT;
	for (; *p; p++) {
		if (*p < '0' || *p > '9')
			return -ENOENT;
		v = v * 10 + (*p - '0');
	}
	*ret_seq = v;
	return 0;
}

void lessor_run_id_format(char buf[LESSOR_RUN_ID_MAX], int64_t seq)
{
	snprintf(buf, LESSOR_RUN_ID_MAX, "r-%" PRId64, seq);
}

void lessor_new_token(char buf[LESSOR_TOKEN_LEN + 1])
{
	static const char hex[] = "0123456789abcdef";
	uint8_t b[LESSOR_TOKEN_LEN / 2];

	random_bytes(b, sizeof(b));
	for (size_t i = 0; i < sizeof(b); i++) {
		buf[2 * i] = hex[b[i] >> 4];
		buf[2 * i + 1] = hex[b[i] & 15];
	}
	buf[LESSOR_TOKEN_LEN] = '\0';
}

const char *lessor_static_run_status(const char *s)
{
	static const char *const names[] = {"pending", "running",  "succeeded",
	                                    "failed",  "retrying", "cancelled"};

	for (size_t i = 0; s && i < ELEMENTSOF(names); i++)
		if (streq(s, names[i]))
			return names[i];
	return NULL;
}

char *lessor_tags_to_json(char **tags)
{
	cJSON *a = cJSON_CreateArray();
	char *out;

	if (!a)
		return NULL;
	for (size_t i = 0; tags && tags[i]; i++)
		cJSON_AddItemToArray(a, cJSON_CreateString(tags[i]));
	out = cJSON_PrintUnformatted(a);
	cJSON_Delete(a);
	return out;
}

static int64_t retry_delay(const struct lessor_store_config *cfg, int64_t consumed)
{
	int64_t d = cfg->retry_base_ms;

	for (int64_t i = 1; i < consumed && d < cfg->retry_max_ms; i++)
		d *= 2;
	return MIN(d, cfg->retry_max_ms);
}

const char *lessor_complete_decide(const struct lessor_store_config *cfg, int64_t attempts,
                                   int64_t max_attempts, bool cancel_requested,
                                   const struct lessor_completion *in, int64_t now,
                                   const char **ret_status, int64_t *ret_not_before)
{
	int64_t consumed = attempts + 1;
	int status = v1_status_from_name(in->status);

	*ret_not_before = now;
	if (status == V1_SUCCEEDED || status == V1_CANCELLED) {
		*ret_status = lessor_static_run_status(in->status);
		return *ret_status;
	}
	if (in->retryable && !cancel_requested && consumed < max_attempts) {
		*ret_status = v1_run_status_name(V1_RUN_PENDING);
		*ret_not_before = now + retry_delay(cfg, consumed);
		return v1_run_status_name(V1_RUN_RETRYING);
	}
	*ret_status = v1_run_status_name(V1_RUN_FAILED);
	return *ret_status;
}

/* ---- view columns ---- */

const struct lessor_col lessor_run_cols[29] = {
    {"id", LESSOR_COL_RUNID},
    {"workflow", LESSOR_COL_STR},
    {"status", LESSOR_COL_STR},
    {"input", LESSOR_COL_RAW},
    {"tags", LESSOR_COL_JSON},
    {"max_attempts", LESSOR_COL_INT},
    {"timeout_s", LESSOR_COL_INT},
    {"idempotency_key", LESSOR_COL_STR},
    {"attempt", LESSOR_COL_INT},
    {"attempts_used", LESSOR_COL_INT},
    {"lease_expiries", LESSOR_COL_INT},
    {"cancel_requested", LESSOR_COL_BOOL},
    {"not_before", LESSOR_COL_TIME},
    {"lease_expires_at", LESSOR_COL_TIME},
    {"rejected_writes", LESSOR_COL_INT},
    {"log_length", LESSOR_COL_INT},
    {"outcome", LESSOR_COL_STR},
    {"reason", LESSOR_COL_STR},
    {"exit_code", LESSOR_COL_INT},
    {"signal", LESSOR_COL_STR},
    {"error", LESSOR_COL_STR},
    {"retryable", LESSOR_COL_BOOL},
    {"duration_ms", LESSOR_COL_INT},
    {"reported_log_length", LESSOR_COL_INT},
    {"output", LESSOR_COL_RAW},
    {"created_at", LESSOR_COL_TIME},
    {"updated_at", LESSOR_COL_TIME},
    {"started_at", LESSOR_COL_TIME},
    {"finished_at", LESSOR_COL_TIME},
};

const struct lessor_col lessor_lease_cols[9] = {
    {"attempt", LESSOR_COL_INT},     {"worker_id", LESSOR_COL_STR},
    {"claim_id", LESSOR_COL_STR},    {"ttl_s", LESSOR_COL_INT},
    {"granted_at", LESSOR_COL_TIME}, {"last_renewed_at", LESSOR_COL_TIME},
    {"ended_at", LESSOR_COL_TIME},   {"end_reason", LESSOR_COL_STR},
    {"detail", LESSOR_COL_STR},
};

const struct lessor_col lessor_list_cols[14] = {
    {"id", LESSOR_COL_RUNID},         {"workflow", LESSOR_COL_STR},
    {"status", LESSOR_COL_STR},       {"attempt", LESSOR_COL_INT},
    {"max_attempts", LESSOR_COL_INT}, {"tags", LESSOR_COL_JSON},
    {"worker_id", LESSOR_COL_STR},    {"outcome", LESSOR_COL_STR},
    {"exit_code", LESSOR_COL_INT},    {"cancel_requested", LESSOR_COL_BOOL},
    {"created_at", LESSOR_COL_TIME},  {"updated_at", LESSOR_COL_TIME},
    {"reason", LESSOR_COL_STR},       {"signal", LESSOR_COL_STR},
};

const struct lessor_col lessor_worker_cols[8] = {
    {"worker_id", LESSOR_COL_STR},    {"last_claim_at", LESSOR_COL_TIME},
    {"workflows", LESSOR_COL_JSON},   {"tags", LESSOR_COL_JSON},
    {"max_runs", LESSOR_COL_INT},     {"claims", LESSOR_COL_INT},
    {"runs_granted", LESSOR_COL_INT}, {"runs_held", LESSOR_COL_INT},
};

cJSON *lessor_col_value_text(const char *text, enum lessor_col_kind kind)
{
	char b[TIME_RFC3339_MAX > LESSOR_RUN_ID_MAX ? TIME_RFC3339_MAX : LESSOR_RUN_ID_MAX];
	int64_t v;

	if (!text)
		return cJSON_CreateNull();
	v = streq(text, "t") ? 1 : streq(text, "f") ? 0 : strtoll(text, NULL, 10);
	switch (kind) {
	case LESSOR_COL_STR:
		return cJSON_CreateString(text);
	case LESSOR_COL_INT:
		return cJSON_CreateNumber((double)v);
	case LESSOR_COL_BOOL:
		return cJSON_CreateBool(v != 0);
	case LESSOR_COL_JSON: {
		cJSON *j = cJSON_Parse(text);

		return j ? j : cJSON_CreateNull();
	}
	case LESSOR_COL_RAW:
		return lessor_raw_item(text);
	case LESSOR_COL_TIME:
		return cJSON_CreateString(
		    time_format_rfc3339(b, sizeof(b), (usec_t)v * USEC_PER_MSEC));
	case LESSOR_COL_RUNID:
		lessor_run_id_format(b, v);
		return cJSON_CreateString(b);
	}
	return NULL;
}
