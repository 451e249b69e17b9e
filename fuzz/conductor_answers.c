/* What a Conductor server sends the conductor driver (lib/proto/drv_conductor.c,
 * through drv_conductor-int.h, without HTTP): the batch poll's array of tasks,
 * a task read for the keep-alive, the token answer, and a spooled TaskResult
 * restored (then made again by complete_body and restored once more).  The
 * first byte picks the parser, the second its parameters. */
#include <cJSON.h>
#include <errno.h>
#include <string.h>

#include "fuzz.h"
#include "proto/driver-int.h"
#include "proto/drv_conductor-int.h"
#include "util/macro.h"
#include "util/strutil.h"

DEFINE_FREE_FUNC(cJSON, cJSON_Delete)

static const unsigned max_runs_set[] = {1, 2, 3, 4, 8, 16, 64, 256};
static const size_t max_input_set[] = {0, 1, 2, 16, 64, 1024, 1u << 20, SIZE_MAX};
/* a worker id is 1..128 bytes (V1_WORKER_ID_MAX): short, long, the longest */
static char worker_ids[][129] = {
    "w1", "lessee", "worker-with-a-long-name.build-farm.example.org",
    "k8s-node-"
    "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcd"
    "ef0123456789abcdef0123456"};

/* Two configured workflows, one with its own task type (kept across inputs:
 * the warning about responseTimeoutSeconds is said once per type). */
static struct task_type types[] = {{"build", "build", false, false},
                                   {"deploy", "deploy_t", false, false}};
static struct task_type *type_list[] = {&types[0], &types[1]};

static struct conductor conductor(unsigned fallback_ttl_s, char *worker_id)
{
	return (struct conductor){.worker_id = worker_id,
	                          .fallback_ttl_s = fallback_ttl_s,
	                          .lease_refresh = 2 * USEC_PER_SEC,
	                          .types = type_list,
	                          .n_types = 2};
}

/* UTF-16 code units of valid UTF-8 s, or SIZE_MAX when it is not valid. */
static size_t utf16_units(const char *s)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t units = 0;

	while (*u) {
		size_t l = *u < 0x80 ? 1 : (*u & 0xe0) == 0xc0 ? 2 : (*u & 0xf0) == 0xe0 ? 3 : 4;

		if (*u >= 0x80 && (*u < 0xc2 || *u > 0xf4))
			return SIZE_MAX;
		for (size_t i = 1; i < l; i++)
			if ((u[i] & 0xc0) != 0x80)
				return SIZE_MAX;
		units += l == 4 ? 2 : 1;
		u += l;
	}
	return units;
}

static void check_grant(const struct drv_grant *g, size_t i, const struct task_type *t,
                        unsigned max_runs, size_t max_input)
{
	_cleanup_(cJSON_Deletep) cJSON *in = NULL;

	FUZZ_ASSERT(g->id && g->workflow && streq(g->workflow, t->workflow));
	FUZZ_ASSERT(g->attempt >= 1);
	FUZZ_ASSERT(g->ttl_s >= 1 && g->ttl_s <= DRV_CONDUCTOR_TTL_MAX_S);
	FUZZ_ASSERT(g->input && strlen(g->input) == g->input_len);
	in = cJSON_ParseWithOpts(g->input, NULL, true);
	/* an input is an object or null, within the cap, whatever else */
	FUZZ_ASSERT(cJSON_IsObject(in) || cJSON_IsNull(in));
	FUZZ_ASSERT(g->input_len <= max_input || streq(g->input, "null"));
	/* one over count is refused as it is; else a bad field drops the input */
	if (i >= max_runs)
		FUZZ_ASSERT(g->invalid);
	else if (g->invalid)
		FUZZ_ASSERT(streq(g->input, "null"));
	if (!g->invalid)
		FUZZ_ASSERT(g->usable_for_reject && drv_conductor_valid_id(g->id));
	if (!g->usable_for_reject) {
		FUZZ_ASSERT(g->invalid && !g->priv && !g->lease_key);
		return;
	}
	FUZZ_ASSERT(drv_conductor_valid_id(g->id) && g->priv && g->lease_key);
	FUZZ_ASSERT(streq(g->lease_key, g->id) && streq(g->priv->task_id, g->id));
	FUZZ_ASSERT(drv_conductor_valid_id(g->priv->wf_id));
	FUZZ_ASSERT(g->priv->task_type && streq(g->priv->task_type, t->name));
	FUZZ_ASSERT(g->env);
	for (char **e = g->env; *e; e++)
		FUZZ_ASSERT(strncmp(*e, "LESSEE_CONDUCTOR_", 17) == 0 && strchr(*e, '=') &&
		            !strpbrk(*e, "\n\r"));
}

static void poll_answer(uint8_t p, const char *body, size_t len)
{
	struct task_type *t = &types[(p >> 6) & 1];
	unsigned max_runs = max_runs_set[p & 7];
	size_t max_input = max_input_set[(p >> 3) & 7];
	struct conductor n = conductor(p & 0x80 ? 3600 : 1, "w1");
	struct drv_claim_answer ans = {.queue_depth = -1};

	drv_conductor_poll_parse(&n, t, max_runs, max_input, body, len, &ans);
	FUZZ_ASSERT(ans.a.verdict == DRV_OK || ans.a.verdict == DRV_REFUSED);
	if (ans.a.verdict == DRV_REFUSED)
		FUZZ_ASSERT(ans.n_runs == 0 && ans.malformed);
	FUZZ_ASSERT(!ans.too_large && !ans.has_cancels && !ans.cancels);
	FUZZ_ASSERT(ans.n_runs == 0 || ans.runs);
	for (size_t i = 0; i < ans.n_runs; i++) {
		check_grant(&ans.runs[i], i, t, max_runs, max_input);
		/* the worker's to free, with the driver's run_free */
		drv_conductor_ops.run_free(TAKE_PTR(ans.runs[i].priv));
	}
	drv_claim_answer_done(&ans);
}

/* The read's verdict against cJSON's reading of the same body. */
static void task_read(uint8_t p, const char *body, size_t len)
{
	char *worker_id = worker_ids[p & 3];
	struct conductor n = conductor(20, worker_id);
	size_t buflen = p & 4 ? 1 + (size_t)(p >> 3) : sizeof(((struct drv_answer *)0)->detail);
	char buf[160];
	unsigned ttl = 20;
	const char *why;
	_cleanup_(cJSON_Deletep) cJSON *j = cJSON_ParseWithLength(body, len);
	const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "status");
	const cJSON *w = cJSON_GetObjectItemCaseSensitive(j, "workerId");
	bool lost =
	    cJSON_IsObject(j) && ((cJSON_IsString(s) && !streq(s->valuestring, "IN_PROGRESS")) ||
	                          (cJSON_IsString(w) && !streq(w->valuestring, worker_id)));

	memset(buf, 'x', sizeof(buf));
	why = drv_conductor_task_not_ours(&n, "0c5e2a8e-1a7e-4d1b-9a0a-5b2f0e7c1d3a", body, len,
	                                  &ttl, buf, buflen);
	FUZZ_ASSERT(ttl == 20 || (ttl >= 1 && ttl <= DRV_CONDUCTOR_TTL_MAX_S));
	FUZZ_ASSERT(!why || (why == buf && memchr(buf, '\0', buflen)));
	FUZZ_ASSERT(!why == !lost);
}

static void token(const char *body, size_t len)
{
	char *tok = NULL;
	int q = drv_conductor_token_parse(body, len, &tok);
	_cleanup_(cJSON_Deletep) cJSON *j = cJSON_ParseWithLength(body, len);
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "token");

	if (q < 0) {
		FUZZ_ASSERT(q == -EBADMSG && !tok);
		return;
	}
	/* it goes into a header line: nothing that could end or split it */
	FUZZ_ASSERT(tok && str_in_charset(tok, 1, DRV_CONDUCTOR_TOKEN_MAX, "._~+/=-"));
	FUZZ_ASSERT(cJSON_IsString(t) && streq(t->valuestring, tok));
	free(tok);
}

/* The completion body complete_body makes for run names it again. */
static void round_trip(uint8_t p, const char *run_id, drv_run_t *run, const char *text)
{
	static const char *const statuses[] = {"COMPLETED", "FAILED", "FAILED_WITH_TERMINAL_ERROR"};
	struct conductor n = conductor(20, worker_ids[(p >> 1) & 3]);
	struct drv d = {.ops = &drv_conductor_ops, .priv = &n};
	struct drv_outcome o = {.status = (enum drv_status)((p >> 3) % 3),
	                        .reason = (enum drv_reason)((p >> 5) % 6),
	                        .has_exit_code = true,
	                        .exit_code = p,
	                        .terminal = p & 0x80,
	                        .error = p & 0x10 ? text : NULL,
	                        .output = text,
	                        .duration_ms = 1234};
	_cleanup_free_ char *body = NULL;
	_cleanup_(cJSON_Deletep) cJSON *j = NULL;
	const cJSON *st, *why;
	drv_run_t *again = NULL;
	bool known = false;

	FUZZ_ASSERT(drv_conductor_ops.complete_body(&d, run, &o, &body) == 0 && body);
	j = cJSON_Parse(body);
	FUZZ_ASSERT(cJSON_IsObject(j));
	FUZZ_ASSERT(cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(j, "outputData")));
	st = cJSON_GetObjectItemCaseSensitive(j, "status");
	for (size_t i = 0; i < 3; i++)
		known |= cJSON_IsString(st) && streq(st->valuestring, statuses[i]);
	FUZZ_ASSERT(known);
	why = cJSON_GetObjectItemCaseSensitive(j, "reasonForIncompletion");
	if (o.status != DRV_SUCCEEDED)
		FUZZ_ASSERT(cJSON_IsString(why) && utf16_units(why->valuestring) <= 500);
	FUZZ_ASSERT(drv_conductor_restore(run_id, body, &again) == 0);
	FUZZ_ASSERT(streq(again->task_id, run->task_id) && streq(again->wf_id, run->wf_id));
	drv_conductor_ops.run_free(again);
}

/* The run id is the body's own taskId (p & 1) or one of ours. */
static void restore(uint8_t p, const char *body)
{
	_cleanup_(cJSON_Deletep) cJSON *j = cJSON_Parse(body);
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "taskId");
	const char *run_id =
	    p & 1 && cJSON_IsString(t) ? t->valuestring : "0c5e2a8e-1a7e-4d1b-9a0a-5b2f0e7c1d3a";
	drv_run_t *run = NULL;
	int q = drv_conductor_restore(run_id, body, &run);

	if (q < 0) {
		FUZZ_ASSERT(q == -EBADMSG && !run);
		return;
	}
	FUZZ_ASSERT(run && streq(run->task_id, run_id) && drv_conductor_valid_id(run->task_id));
	FUZZ_ASSERT(drv_conductor_valid_id(run->wf_id) && !run->task_type && run->log.len == 0);
	round_trip(p, run_id, run, body);
	drv_conductor_ops.run_free(run);
}

FUZZ_TARGET(conductor_answers)
{
	char *body;
	size_t n;

	if (size < 2)
		return 0;
	n = size - 2;
	body = fuzz_strndup(data + 2, n);
	switch (data[0] & 3) {
	case 0:
		poll_answer(data[1], body, n);
		break;
	case 1:
		task_read(data[1], body, n);
		break;
	case 2:
		token(body, n);
		break;
	default:
		restore(data[1], body);
		break;
	}
	free(body);
	return 0;
}
