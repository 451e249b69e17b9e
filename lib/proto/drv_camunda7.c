/* Camunda 7's external tasks as a driver (docs/camunda7.md): Camunda 7,
 * Operaton, CIB seven.  What the engine does was read from operaton/operaton
 * (engine-rest ExternalTaskRestServiceImpl, ExternalTaskResourceImpl and its
 * DTOs, FetchAndLockHandlerImpl; engine HandleExternalTaskCmd,
 * ExtendLockOnExternalTaskCmd, UnlockExternalTaskCmd, ExternalTaskEntity);
 * the comments name the class.
 *
 *   claim     POST {url}/external-task/fetchAndLock: every claimable
 *             workflow's topic in one fetch (DRV_CAP_MULTI_WORKFLOW: the
 *             worker leaves a tripped breaker's workflow out), maxTasks = the
 *             free slots, lockDuration = lease_ttl, asyncResponseTimeout =
 *             the long poll
 *   renew     POST /external-task/{id}/extendLock {workerId, newDuration}
 *   log       nothing is sent: the engine has no log; whole lines go to
 *             lessee's own log (the journal) with the run's id, and the
 *             tail of the run's output goes with a failure as errorDetails
 *   complete  POST /external-task/{id}/complete | bpmnError | failure
 *   release   POST /external-task/{id}/unlock
 *
 * The fence is the workerId: the engine refuses (400) an extendLock,
 * complete, bpmnError or failure from any workerId but the one that holds the
 * lock (HandleExternalTaskCmd.validateWorkerViolation).  Ours is the worker
 * id plus a nonce of this process, so a completion spooled by a previous
 * incarnation carries that incarnation's workerId: delivered while the task is
 * still locked by it (or unlocked and not fetched again) it counts; once
 * anyone else, this process included, fetched the task, the engine refuses it
 * and it is dropped as lost. */
#include <cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "conf/conf.h"
#include "log/log.h"
#include "proto/driver-int.h"
#include "proto/drv_camunda7-int.h"
#include "proto/json_scan.h"
#include "util/buf.h"
#include "util/macro.h"
#include "util/random.h"
#include "util/strutil.h"

#define ID_MAX DRV_CAMUNDA7_ID_MAX
#define SMALL_ANSWER 4096
#define TASK_OVERHEAD (64 * 1024) /* a task's fields besides its variables */
#define ENV_VALUE_MAX 1024
#define LINE_MAX_HELD (64 * 1024) /* a longer line is logged in parts */
#define TASK_ANSWER (64 * 1024)   /* GET /external-task/{id}: no variables */

DEFINE_FREE_FUNC(cJSON, cJSON_Delete)
#define _cleanup_json_ _cleanup_(cJSON_Deletep)

static const char *const json_headers[] = {"Content-Type: application/json",
                                           "Accept: application/json", "Expect:", NULL};
static const char *const bare_headers[] = {"Accept: application/json", "Expect:", NULL};

struct op {
	drv_t *d;
	char *url;
	char *body;
	const char *label;
	const char *endpoint; /* complete: which one, for run_status */
	bool has_variables;   /* complete, bpmnError: a 400 may be about them */
	char *refusal;        /* the engine's words when it refused them */
	drv_run_t *run;
	unsigned ttl_s;
	unsigned max_runs;
	size_t max_input;
};

static struct camunda7 *C(drv_t *d)
{
	return d->priv;
}

static char *mfree_str(char *p)
{
	free(p);
	return NULL;
}

/* Valid UTF-8 throughout (no NUL: s is a C string). */
static bool utf8_valid(const char *s)
{
	size_t n = strlen(s);

	for (size_t i = 0, l; i < n; i += l)
		if (!(l = utf8_seq_len(s + i, n - i)))
			return false;
	return true;
}

bool drv_camunda7_valid_id(const char *s)
{
	return s && str_in_charset(s, 1, ID_MAX, "._:-");
}

/* ---------------------------------------------------------------- runs */

static void c7_run_free(drv_run_t *run)
{
	if (!run)
		return;
	free(run->task_id);
	free(run->worker_id);
	free(run->lease_key);
	buf_done(&run->line);
	free(run);
}

static drv_run_t *run_new(const char *task_id, const char *worker_id, const char *lease_key)
{
	drv_run_t *run = calloc(1, sizeof(*run));

	if (!run)
		return NULL;
	run->task_id = strdup(task_id);
	run->worker_id = strdup(worker_id);
	run->lease_key = strdup(lease_key);
	run->retries = -1;
	run->line = (struct buf)BUF_INIT(0);
	if (!run->task_id || !run->worker_id || !run->lease_key) {
		c7_run_free(run);
		return NULL;
	}
	return run;
}

static const char *c7_run_lease_key(const drv_run_t *run)
{
	return run->lease_key;
}

/* ---------------------------------------------------------------- init */

static void topics_free(struct c7_topic *t, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(t[i].workflow);
		free(t[i].name);
		strv_free(t[i].variables);
	}
	free(t);
}

static void c7_done(drv_t *d)
{
	struct camunda7 *n = d->priv;

	if (!n)
		return;
	topics_free(n->topics, n->n_topics);
	free(n->worker_id);
	free(n);
	d->priv = NULL;
}

static int topics_init(struct camunda7 *n, const struct conf *c)
{
	n->topics = calloc(c->n_workflows + 1, sizeof(*n->topics));
	if (!n->topics)
		return -ENOMEM;
	for (size_t i = 0; i < c->n_workflows; i++) {
		const struct conf_workflow *w = &c->workflows[i];
		struct c7_topic *t = &n->topics[n->n_topics++];

		*t = (struct c7_topic){.retries = w->retries,
		                       .backoff = w->retry_backoff,
		                       .backoff_max = w->retry_backoff_max,
		                       .local = w->local_variables};
		t->workflow = strdup(w->name);
		t->name = strdup(w->topic ? w->topic : w->name);
		if (!t->workflow || !t->name)
			return -ENOMEM;
		if (w->variables && w->variables[0] && !(t->variables = strv_copy(w->variables)))
			return -ENOMEM;
	}
	return 0;
}

static int c7_init(drv_t *d, const struct conf *c)
{
	struct camunda7 *n = calloc(1, sizeof(*n));
	uint32_t nonce;

	if (!n)
		return -ENOMEM;
	d->priv = n;
	random_bytes(&nonce, sizeof(nonce));
	/* the fence: no other process, a restarted lessee included, has it */
	if (asprintf(&n->worker_id, "%s-%08" PRIx32, c->worker.id ? c->worker.id : "lessee",
	             nonce) < 0) {
		n->worker_id = NULL;
		return -ENOMEM;
	}
	log_emit(LOG_NOTICE, NULL, "camunda7: workerId %s (worker.id and a nonce of this process)",
	         n->worker_id);
	return topics_init(n, c);
}

/* The topics again, from the reloaded workflows: a pointer to one lives only
 * within a callback (a claim's body, a task's grant), so the table is made
 * anew; on failure the old one stays. */
static int c7_reload(drv_t *d, const struct conf *c)
{
	struct camunda7 *n = C(d);
	struct c7_topic *old = n->topics;
	size_t n_old = n->n_topics;
	int q;

	n->topics = NULL;
	n->n_topics = 0;
	if ((q = topics_init(n, c)) < 0) {
		topics_free(n->topics, n->n_topics);
		n->topics = old;
		n->n_topics = n_old;
		return q;
	}
	topics_free(old, n_old);
	return 0;
}

static struct c7_topic *topic_named(struct camunda7 *n, const char *name)
{
	for (size_t i = 0; i < n->n_topics; i++)
		if (streq(n->topics[i].name, name))
			return &n->topics[i];
	return NULL;
}

static struct c7_topic *topic_of(struct camunda7 *n, const char *workflow)
{
	for (size_t i = 0; i < n->n_topics; i++)
		if (streq(n->topics[i].workflow, workflow))
			return &n->topics[i];
	return NULL;
}

/* ---------------------------------------------------------------- operations */

static void op_free(void *p)
{
	struct op *o = p;

	if (!o)
		return;
	free(o->url);
	free(o->body);
	free(o->refusal);
	free(o);
}

static drv_req_t *op_new(drv_t *d, void (*on_http)(drv_req_t *, const struct http_response *),
                         drv_cb cb, void *ud, struct op **ret)
{
	drv_req_t *rq = drv_req_new_state(d, on_http, cb, ud, sizeof(struct op), op_free);

	if (rq) {
		*ret = rq->state;
		(*ret)->d = d;
	}
	return rq;
}

/* method base + path with body (NULL: none), which rq then owns. */
static int op_send(drv_req_t *rq, const char *method, const char *path, const char *id,
                   const char *endpoint, char *body, usec_t timeout, size_t max_response)
{
	struct op *o = rq->state;

	free(o->url);
	free(o->body);
	o->body = body;
	if (asprintf(&o->url, "%s%s%s%s%s", o->d->base, path, id ? id : "", endpoint ? "/" : "",
	             endpoint ? endpoint : "") < 0) {
		o->url = NULL;
		return -ENOMEM;
	}
	return drv_http_send(rq,
	                     &(struct http_request){.method = method,
	                                            .url = o->url,
	                                            .headers = body ? json_headers : bare_headers,
	                                            .body = body,
	                                            .body_len = body ? strlen(body) : 0,
	                                            .timeout = timeout,
	                                            .max_response = max_response,
	                                            .label = o->label});
}

/* POST base + path with body (NULL: none); on failure rq is freed. */
static int op_post(drv_req_t *rq, const char *path, const char *id, const char *endpoint,
                   char *body, usec_t timeout, size_t max_response, drv_req_t **ret)
{
	return drv_req_start(
	    rq, op_send(rq, "POST", path, id, endpoint, body, timeout, max_response), ret);
}

/* The engine's error {type, message}, else the body's start, after "HTTP n". */
static void describe(const struct http_response *resp, const char *what, char *buf, size_t len)
{
	drv_describe_message(resp, what, 110, buf, len);
}

/* ---------------------------------------------------------------- input */

static bool key_is(const struct json_span *k, const char *name)
{
	size_t n = strlen(name);

	return k->len == n + 2 && memcmp(k->p + 1, name, n) == 0;
}

/* A JSON string span decoded; NULL if not one (or out of memory). */
static char *span_string(const struct json_span *v)
{
	_cleanup_json_ cJSON *j = v->p ? cJSON_ParseWithLength(v->p, v->len) : NULL;

	return cJSON_IsString(j) ? strdup(j->valuestring) : NULL;
}

/* The type of a typed value, one of ours, or NULL. */
static const char *plain_type(const struct json_span *type)
{
	static const char *const plain[] = {"String",  "Integer", "Long", "Short", "Double",
	                                    "Boolean", "Number",  "Null", "Json"};
	_cleanup_free_ char *t = span_string(type);

	for (size_t i = 0; t && i < ELEMENTSOF(plain); i++)
		if (strcasecmp(t, plain[i]) == 0)
			return plain[i];
	return NULL;
}

/* One typed value {type, value, valueInfo} (the span v) as the run sees it,
 * appended to out: numbers are copied as written, never through a double. */
static int input_value(const struct json_span *v, unsigned depth, struct buf *out)
{
	struct json_iter it;
	struct json_span k, x, type = {0}, value = {0};
	bool bad = false;
	const char *t;
	int q;

	if (v->p[0] != '{' || json_iter_open(&it, v->p, v->p + v->len, '{', depth) < 0)
		return buf_append(out, v->p, v->len); /* not typed: as it is */
	while ((q = json_iter_next(&it, &k, &bad)) > 0) {
		if ((q = json_iter_value(&it, &x, &bad)) < 0)
			break;
		if (key_is(&k, "type"))
			type = x;
		else if (key_is(&k, "value"))
			value = x;
	}
	t = q == 0 ? plain_type(&type) : NULL;
	if (!t)
		return buf_append(out, v->p, v->len); /* Date, Bytes, Object, File...: as given */
	if (streq(t, "Null") || !value.p)
		return buf_appends(out, "null");
	if (streq(t, "Json")) {
		_cleanup_free_ char *text = span_string(&value);
		const char *p = text, *end = text ? text + strlen(text) : NULL;

		/* the string holds JSON: that JSON, else the typed value as given */
		if (text && json_scan_value(&p, end, 64, &bad) == 0 && !bad &&
		    json_scan_ws(p, end) == end)
			return buf_appends(out, text);
		return buf_append(out, v->p, v->len);
	}
	return buf_append(out, value.p, value.len);
}

char *drv_camunda7_input(const char *variables, size_t len)
{
	const char *end = variables + len;
	struct json_iter it;
	struct json_span k, v;
	struct buf out = BUF_INIT(0);
	bool bad = false, first = true;
	int q;

	const char *p = json_scan_ws(variables, end);

	if ((size_t)(end - p) >= 4 && memcmp(p, "null", 4) == 0 && json_scan_ws(p + 4, end) == end)
		return strdup("{}");
	if (json_iter_open(&it, variables, end, '{', 1) < 0)
		return NULL;
	q = buf_appends(&out, "{");
	while (q >= 0 && (q = json_iter_next(&it, &k, &bad)) > 0) {
		if ((q = json_iter_value(&it, &v, &bad)) < 0)
			break;
		q = buf_appends(&out, first ? "" : ",");
		if (q >= 0)
			q = buf_append(&out, k.p, k.len);
		if (q >= 0)
			q = buf_appends(&out, ":");
		if (q >= 0)
			q = input_value(&v, 2, &out);
		first = false;
	}
	if (q >= 0 && json_scan_ws(it.p, end) != end)
		q = -EBADMSG;
	if (q >= 0)
		q = buf_append(&out, "}", 2); /* with the NUL */
	if (q >= 0 && bad) { /* bytes that are not UTF-8 (only in strings): U+FFFD */
		struct buf clean = BUF_INIT(0);

		q = drv_text_clean(out.data, out.len - 1, 0, &clean); /* not the NUL */
		if (q >= 0)
			q = buf_append(&clean, "", 1);
		buf_done(&out);
		out = clean;
	}
	if (q < 0) {
		buf_done(&out);
		return NULL;
	}
	return buf_steal(&out);
}

/* ---------------------------------------------------------------- claim */

static int env_add(char ***env, const char *name, const cJSON *v)
{
	char *s;

	if (!cJSON_IsString(v) || !*v->valuestring || strlen(v->valuestring) > ENV_VALUE_MAX)
		return 0;
	for (const unsigned char *c = (const unsigned char *)v->valuestring; *c; c++)
		if (*c < 0x20 || *c == 0x7f)
			return 0; /* nothing we pass on as it is */
	if (!utf8_valid(v->valuestring))
		return 0;
	if (asprintf(&s, "%s=%s", name, v->valuestring) < 0)
		return -ENOMEM;
	return strv_push(env, s);
}

static int grant_env(struct drv_grant *g, const cJSON *task)
{
	static const char *const vars[][2] = {
	    {"LESSEE_BUSINESS_KEY", "businessKey"},
	    {"LESSEE_PROCESS_INSTANCE_ID", "processInstanceId"},
	    {"LESSEE_CAMUNDA7_TASK_ID", "id"},
	    {"LESSEE_CAMUNDA7_TOPIC", "topicName"},
	    {"LESSEE_CAMUNDA7_PROCESS_DEFINITION_KEY", "processDefinitionKey"},
	    {"LESSEE_CAMUNDA7_ACTIVITY_ID", "activityId"},
	    {"LESSEE_CAMUNDA7_TENANT_ID", "tenantId"},
	};
	int q = 0;

	if (!(g->env = calloc(1, sizeof(char *))))
		return -ENOMEM;
	for (size_t i = 0; i < ELEMENTSOF(vars) && q >= 0; i++)
		q = env_add(&g->env, vars[i][0],
		            cJSON_GetObjectItemCaseSensitive(task, vars[i][1]));
	return q;
}

static int set_invalid(struct drv_grant *g, const char *fmt, const char *arg)
{
	if (g->invalid)
		return 0; /* the first reason is the one said */
	return asprintf(&g->invalid, fmt, arg) < 0 ? (g->invalid = NULL, -ENOMEM) : 0;
}

/* retries: null until a failure set them (ExternalTaskEntity.areRetriesLeft). */
static long long task_retries(const cJSON *task)
{
	const cJSON *r = cJSON_GetObjectItemCaseSensitive(task, "retries");

	if (!cJSON_IsNumber(r) || r->valuedouble < 0 || r->valuedouble > INT32_MAX)
		return -1;
	return (long long)r->valuedouble;
}

/* The task's "variables" as written (absent: p NULL). */
static struct json_span variables_span(const char *raw, size_t len)
{
	struct json_iter it;
	struct json_span k, v, found = {0};
	bool bad = false;
	int q;

	if (json_iter_open(&it, raw, raw + len, '{', 2) < 0)
		return found;
	while ((q = json_iter_next(&it, &k, &bad)) > 0 && json_iter_value(&it, &v, &bad) >= 0)
		if (key_is(&k, "variables"))
			found = v;
	return found;
}

static int grant_from(struct camunda7 *n, size_t max_input, unsigned ttl_s, const char *raw,
                      size_t raw_len, bool bad_utf8, struct drv_grant *g)
{
	static uint64_t seq; /* lease keys: every grant its own */
	_cleanup_json_ cJSON *task = cJSON_ParseWithLength(raw, raw_len);
	const cJSON *id = cJSON_GetObjectItemCaseSensitive(task, "id");
	const cJSON *topic = cJSON_GetObjectItemCaseSensitive(task, "topicName");
	const cJSON *vars = cJSON_GetObjectItemCaseSensitive(task, "variables");
	struct json_span vspan = variables_span(raw, raw_len);
	struct c7_topic *t = cJSON_IsString(topic) ? topic_named(n, topic->valuestring) : NULL;
	long long retries = task_retries(task);
	int q = 0;

	*g = (struct drv_grant){.attempt = 1, .ttl_s = ttl_s};
	g->id = strdup(cJSON_IsString(id) ? id->valuestring : "");
	g->workflow = strdup(t ? t->workflow : "");
	if (!g->id || !g->workflow)
		return -ENOMEM;
	if (t && retries >= 0 && retries < t->retries)
		g->attempt = (unsigned)(t->retries - retries) + 1;
	g->usable_for_reject = drv_camunda7_valid_id(g->id) && t;
	if (!cJSON_IsObject(task))
		q = set_invalid(g, "a task that is not a JSON object%s", "");
	else if (!drv_camunda7_valid_id(g->id))
		q = set_invalid(g, "id is missing or not 1..128 bytes of [A-Za-z0-9._:-]%s", "");
	else if (!t)
		q = set_invalid(g, "task %s is of a topic not asked for", g->id);
	if (q >= 0 && bad_utf8)
		q = set_invalid(g, "the variables of task %s are not valid UTF-8", g->id);
	if (q >= 0 && vars && !cJSON_IsObject(vars) && !cJSON_IsNull(vars))
		q = set_invalid(g, "the variables of task %s are not an object", g->id);
	if (q >= 0 && !g->invalid) {
		g->input =
		    cJSON_IsObject(vars) ? drv_camunda7_input(vspan.p, vspan.len) : strdup("{}");
		if (!g->input)
			return -ENOMEM;
		if (strlen(g->input) > max_input) {
			g->input = mfree_str(g->input);
			q = set_invalid(g,
			                "the variables of task %s are larger than "
			                "worker.max_input_bytes",
			                g->id);
		}
	}
	if (q >= 0 && !g->input)
		g->input = strdup("null");
	if (q < 0 || !g->input)
		return -ENOMEM;
	g->input_len = strlen(g->input);
	if (!g->usable_for_reject)
		return 0;
	if (asprintf(&g->lease_key, "%s/%s/%" PRIu64, n->worker_id, g->id, ++seq) < 0) {
		g->lease_key = NULL;
		return -ENOMEM;
	}
	if (!(g->priv = run_new(g->id, n->worker_id, g->lease_key)))
		return -ENOMEM;
	g->priv->retries = retries;
	g->priv->policy = t->retries;
	g->priv->backoff = t->backoff;
	g->priv->backoff_max = t->backoff_max;
	g->priv->local = t->local;
	return grant_env(g, task);
}

static void claim_refuse(struct drv_claim_answer *ans, bool malformed, const char *what)
{
	ans->a.verdict = DRV_REFUSED;
	ans->malformed = malformed;
	snprintf(ans->a.detail, sizeof(ans->a.detail), "fetchAndLock answer: %s", what);
}

void drv_camunda7_fetch_parse(struct camunda7 *n, unsigned max_runs, size_t max_input,
                              unsigned ttl_s, const char *body, size_t len,
                              struct drv_claim_answer *ans)
{
	const char *end = body + len;
	struct json_iter arr;
	bool bad = false;
	size_t cap = MAX(max_runs, 1u) + 1;
	int q;

	ans->a.verdict = DRV_OK;
	if ((q = json_iter_open(&arr, body, end, '[', 1)) < 0)
		return claim_refuse(ans, true, "not a JSON array");
	if (!(ans->runs = calloc(cap, sizeof(*ans->runs))))
		return claim_refuse(ans, false, "out of memory");
	while ((q = json_iter_next(&arr, &(struct json_span){0}, &bad)) > 0) {
		struct json_span v;
		bool b = false;
		struct drv_grant *g;

		if ((q = json_iter_value(&arr, &v, &b)) < 0)
			break;
		if (ans->n_runs == cap) {
			struct drv_grant *nr = realloc(ans->runs, 2 * cap * sizeof(*nr));

			if (!nr)
				return claim_refuse(ans, false, "out of memory");
			ans->runs = nr, cap *= 2;
		}
		g = &ans->runs[ans->n_runs++];
		/* more than maxTasks: granted all the same, the worker gives back
		 * what it has no slot for (unlock) */
		if (grant_from(n, max_input, ttl_s, v.p, v.len, b, g) < 0)
			return claim_refuse(ans, false, "out of memory");
	}
	if (q < 0 || json_scan_ws(arr.p, end) != end) {
		/* what was read is locked for us: hand it over, say the rest */
		if (ans->n_runs == 0)
			claim_refuse(ans, true, "malformed JSON");
		else
			snprintf(ans->a.detail, sizeof(ans->a.detail),
			         "fetchAndLock answer: malformed JSON after %zu tasks",
			         ans->n_runs);
	}
}

static void on_claim(drv_req_t *rq, const struct http_response *resp)
{
	struct op *o = rq->state;
	struct drv_claim_answer ans = {.queue_depth = -1};

	if (resp->error == -EMSGSIZE) {
		ans.a = (struct drv_answer){.verdict = DRV_REFUSED, .error = resp->error};
		ans.too_large = true;
		snprintf(ans.a.detail, sizeof(ans.a.detail),
		         "fetchAndLock answer over its cap (maxTasks x (2 x worker.max_input_bytes "
		         "+ %u)): its tasks come back when their locks expire",
		         TASK_OVERHEAD);
	} else if (drv_answer_common(resp, &ans.a))
		describe(resp, "fetchAndLock", ans.a.detail, sizeof(ans.a.detail));
	else if (resp->status == 200)
		drv_camunda7_fetch_parse(C(o->d), o->max_runs, o->max_input, o->ttl_s, resp->body,
		                         resp->body_len, &ans);
	else {
		/* 400: our request is wrong (an asyncResponseTimeout over 30 min, ...) */
		ans.a.verdict = DRV_REFUSED;
		describe(resp, "fetchAndLock", ans.a.detail, sizeof(ans.a.detail));
	}
	drv_req_claim_answer(rq, &ans);
}

static int claim_body(struct camunda7 *n, const struct drv_claim *c, char **ret)
{
	_cleanup_json_ cJSON *j = cJSON_CreateObject();
	cJSON *topics;
	uint64_t wait_ms = MIN(c->wait / USEC_PER_MSEC, (usec_t)DRV_CAMUNDA7_ASYNC_MAX_MS);

	if (!j || !cJSON_AddStringToObject(j, "workerId", n->worker_id) ||
	    !cJSON_AddNumberToObject(j, "maxTasks", c->max_runs) ||
	    !cJSON_AddTrueToObject(j, "usePriority") ||
	    (wait_ms && !cJSON_AddNumberToObject(j, "asyncResponseTimeout", (double)wait_ms)) ||
	    !(topics = cJSON_AddArrayToObject(j, "topics")))
		return -ENOMEM;
	for (size_t i = 0; c->workflows[i]; i++) {
		struct c7_topic *t = topic_of(n, c->workflows[i]);
		cJSON *e = cJSON_CreateObject();

		if (!t) {
			cJSON_Delete(e);
			return -ENOENT;
		}
		if (!e || !cJSON_AddItemToArray(topics, e) ||
		    !cJSON_AddStringToObject(e, "topicName", t->name) ||
		    !cJSON_AddNumberToObject(e, "lockDuration", (double)c->lease_ttl_s * 1000))
			return -ENOMEM;
		if (t->variables && t->variables[0]) {
			cJSON *v = cJSON_AddArrayToObject(e, "variables");

			for (size_t k = 0; v && t->variables[k]; k++)
				if (!cJSON_AddItemToArray(v, cJSON_CreateString(t->variables[k])))
					v = NULL;
			if (!v)
				return -ENOMEM;
		}
	}
	return (*ret = cJSON_PrintUnformatted(j)) ? 0 : -ENOMEM;
}

static int c7_claim(drv_t *d, const struct drv_claim *c, drv_claim_cb cb, void *ud, drv_req_t **ret)
{
	struct op *o;
	drv_req_t *rq;
	char *body = NULL;
	int q;

	if (!c->workflows || !c->workflows[0] || c->max_runs == 0)
		return -EINVAL; /* no DRV_CAP_SERVER_CANCEL: a claim asks for runs */
	if ((q = claim_body(C(d), c, &body)) < 0)
		return q;
	if (!(rq = op_new(d, on_claim, NULL, ud, &o))) {
		free(body);
		return -ENOMEM;
	}
	rq->claim_cb = cb;
	o->label = "fetch_and_lock";
	o->max_runs = c->max_runs;
	o->max_input = c->max_input;
	o->ttl_s = c->lease_ttl_s;
	return op_post(rq, "/external-task/fetchAndLock", NULL, NULL, body, c->timeout,
	               c->max_response ? c->max_response
	                               : (size_t)c->max_runs * (2 * c->max_input + TASK_OVERHEAD) +
	                                     SMALL_ANSWER,
	               ret);
}

/* ---------------------------------------------------------------- renew */

static int refusal_check(drv_req_t *rq, const struct http_response *resp);

/* 400: locked by another workerId, not locked, or the lock expired
 * (ExtendLockOnExternalTaskCmd); 404: the task is gone (completed elsewhere,
 * its process instance cancelled): either way not ours.  But a 400 to a
 * request with variables may be about them (refusal_check). */
static void on_task_answer(drv_req_t *rq, const struct http_response *resp)
{
	struct op *o = rq->state;
	struct drv_answer a;

	if (drv_answer_common(resp, &a))
		describe(resp, o->label, a.detail, sizeof(a.detail));
	else if (resp->status == 400 && o->has_variables && refusal_check(rq, resp) >= 0)
		return;
	else if (resp->status == 204 || resp->status == 200) {
		a.verdict = DRV_OK;
		a.ttl_s = o->ttl_s;
		if (o->endpoint)
			snprintf(a.run_status, sizeof(a.run_status), "%s", o->endpoint);
	} else {
		a.verdict = resp->status == 400 || resp->status == 404 ? DRV_LOST : DRV_REFUSED;
		describe(resp, o->label, a.detail, sizeof(a.detail));
	}
	drv_req_answer(rq, &a);
}

static int c7_renew(drv_t *d, drv_run_t *run, unsigned ttl_s, usec_t timeout, bool fresh, drv_cb cb,
                    void *ud, drv_req_t **ret)
{
	_cleanup_json_ cJSON *j = cJSON_CreateObject();
	struct op *o;
	drv_req_t *rq;
	char *body;

	(void)fresh;
	if (!j || !cJSON_AddStringToObject(j, "workerId", run->worker_id) ||
	    !cJSON_AddNumberToObject(j, "newDuration", (double)ttl_s * 1000) ||
	    !(body = cJSON_PrintUnformatted(j)))
		return -ENOMEM;
	if (!(rq = op_new(d, on_task_answer, cb, ud, &o))) {
		free(body);
		return -ENOMEM;
	}
	o->label = "extend_lock";
	o->ttl_s = ttl_s;
	o->run = run;
	return op_post(rq, "/external-task/", run->task_id, "extendLock", body, timeout,
	               SMALL_ANSWER, ret);
}

/* ---------------------------------------------------------------- log */

/* One line (n bytes, without its newline) of the run's output into lessee's
 * own log, as valid UTF-8. */
static void line_emit(const drv_run_t *run, const char *p, size_t n)
{
	struct buf b = BUF_INIT(0);

	if (drv_text_clean(p, n, 0, &b) >= 0 && buf_append(&b, "", 0) >= 0)
		log_emit(LOG_INFO, &(struct log_fields){.run_id = run->task_id}, "output: %s",
		         b.data);
	buf_done(&b);
}

/* Whole lines of what the run held and data; the rest held (all of it when
 * `all`, or when it grew over LINE_MAX_HELD). */
static int lines_emit(drv_run_t *run, const char *data, size_t len, bool all)
{
	const char *nl;
	int q = buf_append(&run->line, data, len);

	if (q < 0)
		return q;
	while (run->line.len && (nl = memchr(run->line.data, '\n', run->line.len))) {
		size_t n = (size_t)(nl - run->line.data);

		line_emit(run, run->line.data, n);
		buf_consume(&run->line, n + 1);
	}
	if (run->line.len && (all || run->line.len > LINE_MAX_HELD)) {
		line_emit(run, run->line.data, run->line.len);
		buf_reset(&run->line);
	}
	return 0;
}

/* The engine keeps no log: taken here and answered from the loop, nothing
 * sent (the tail rides in a failure's errorDetails). */
static int c7_log_append(drv_t *d, drv_run_t *run, uint64_t offset, const void *data, size_t len,
                         usec_t timeout, drv_cb cb, void *ud, drv_req_t **ret)
{
	drv_req_t *rq = drv_req_new(d, NULL, cb, ud);
	int q;

	(void)timeout;
	if (!rq)
		return -ENOMEM;
	if ((q = lines_emit(run, data, len, false)) < 0)
		return drv_req_start(rq, q, ret);
	return drv_req_defer(rq, &(struct drv_answer){.verdict = DRV_OK, .length = offset + len},
	                     ret);
}

/* ---------------------------------------------------------------- complete */

static bool is_typed(const cJSON *v)
{
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(v, "type");
	const cJSON *x;

	if (!cJSON_IsObject(v) || !cJSON_IsString(t) || !cJSON_HasObjectItem(v, "value"))
		return false;
	cJSON_ArrayForEach(x, v)
	{
		if (!streq(x->string, "type") && !streq(x->string, "value") &&
		    !streq(x->string, "valueInfo"))
			return false;
	}
	return true;
}

/* {"type": type, "value": value_json} as text. */
static char *typed_text(const char *type, const char *value_json)
{
	char *s;

	return asprintf(&s, "{\"type\":\"%s\",\"value\":%s}", type, value_json) < 0 ? NULL : s;
}

/* A JSON string of text (cleaned to valid UTF-8). */
static char *json_quoted(const char *text, size_t n)
{
	struct buf b = BUF_INIT(0);
	_cleanup_json_ cJSON *j = NULL;
	char *s = NULL;

	if (drv_text_clean(text, n, 0, &b) >= 0 && buf_append(&b, "", 0) >= 0 &&
	    (j = cJSON_CreateString(b.data)))
		s = cJSON_PrintUnformatted(j);
	buf_done(&b);
	return s;
}

/* A JSON number (span) as Integer (32 bits), Long (64 bits) or Double. */
static const char *number_type(const struct json_span *v)
{
	char text[32];
	long long x;
	char *end;

	if (v->len >= sizeof(text) || memchr(v->p, '.', v->len) || memchr(v->p, 'e', v->len) ||
	    memchr(v->p, 'E', v->len))
		return "Double";
	memcpy(text, v->p, v->len);
	text[v->len] = '\0';
	errno = 0;
	x = strtoll(text, &end, 10);
	if (errno || *end)
		return "Double";
	return x >= INT32_MIN && x <= INT32_MAX ? "Integer" : "Long";
}

/* A result value (the span v, as the run wrote it) as a typed variable's
 * JSON text: numbers, objects and arrays are copied as written, never
 * through a double; an object of the form {type, value[, valueInfo]} is sent
 * as it is. */
static char *typed_span(const struct json_span *v)
{
	_cleanup_free_ char *q = NULL;

	switch (v->p[0]) {
	case '"': {
		_cleanup_json_ cJSON *j = cJSON_ParseWithLength(v->p, v->len);

		q = cJSON_IsString(j) ? json_quoted(j->valuestring, strlen(j->valuestring)) : NULL;
		return q ? typed_text("String", q) : NULL;
	}
	case 't':
	case 'f':
		return typed_text("Boolean", v->p[0] == 't' ? "true" : "false");
	case 'n':
		return typed_text("Null", "null");
	case '{': {
		_cleanup_json_ cJSON *j = cJSON_ParseWithLength(v->p, v->len);

		if (is_typed(j)) {
			struct buf b = BUF_INIT(0);

			if (drv_text_clean(v->p, v->len, 0, &b) < 0 || buf_append(&b, "", 0) < 0) {
				buf_done(&b);
				return NULL;
			}
			return buf_steal(&b);
		}
		q = json_quoted(v->p, v->len);
		return q ? typed_text("Json", q) : NULL;
	}
	case '[':
		q = json_quoted(v->p, v->len);
		return q ? typed_text("Json", q) : NULL;
	default: {
		_cleanup_free_ char *num = strndup(v->p, v->len);

		return num ? typed_text(number_type(v), num) : NULL;
	}
	}
}

/* The members of the JSON object text (len bytes) as typed variables under
 * name in req; -EBADMSG when it is not an object. */
static int add_variables(cJSON *req, const char *name, const char *text, size_t len)
{
	cJSON *vars = cJSON_AddObjectToObject(req, name);
	struct json_iter it;
	struct json_span k, v;
	bool bad = false;
	int q;

	if (!vars)
		return -ENOMEM;
	if (json_iter_open(&it, text, text + len, '{', 1) < 0)
		return -EBADMSG;
	while ((q = json_iter_next(&it, &k, &bad)) > 0) {
		_cleanup_free_ char *key = NULL, *typed = NULL;

		if ((q = json_iter_value(&it, &v, &bad)) < 0)
			break;
		key = span_string(&k);
		typed = key ? typed_span(&v) : NULL;
		if (!typed || !cJSON_AddRawToObject(vars, key, typed))
			return -ENOMEM;
	}
	return q < 0 ? -EBADMSG : 0;
}

/* The span of member name of the object text (NULL p when absent). */
static struct json_span member_span(const char *text, size_t len, const char *name)
{
	struct json_iter it;
	struct json_span k, v, found = {0};
	bool bad = false;

	if (json_iter_open(&it, text, text + len, '{', 1) < 0)
		return found;
	while (json_iter_next(&it, &k, &bad) > 0 && json_iter_value(&it, &v, &bad) >= 0)
		if (key_is(&k, name))
			found = v;
	return found;
}

/* The result file as the completion's variables: an object's keys, anything
 * else as the one variable "result". */
static int result_variables(cJSON *req, const drv_run_t *run, const cJSON *out, const char *raw)
{
	const char *set = run->local ? "localVariables" : "variables";
	_cleanup_free_ char *wrapped = NULL, *text = NULL;
	struct json_span whole;
	const char *p;

	if (!raw)
		return 0;
	if (cJSON_IsObject(out))
		return add_variables(req, set, raw, strlen(raw));
	/* {"result": <it>}: as written when it is JSON, else as a string */
	p = json_scan_ws(raw, raw + strlen(raw));
	whole = (struct json_span){.p = p, .len = strlen(p)};
	while (whole.len && strchr(" \t\r\n", whole.p[whole.len - 1]))
		whole.len--;
	text = out && whole.len ? strndup(whole.p, whole.len) : json_quoted(raw, strlen(raw));
	if (!text || asprintf(&wrapped, "{\"result\":%s}", text) < 0)
		return -ENOMEM;
	return add_variables(req, set, wrapped, strlen(wrapped));
}

/* The worker's own words ("exited with status 3", "timed out after 1000
 * ms"), else what the outcome says. */
static int reason_text(const struct drv_outcome *o, struct buf *b)
{
	int q;

	if (o->error)
		q = buf_appends(b, o->error);
	else if (o->reason == DRV_REASON_EXIT)
		q = o->has_exit_code ? buf_printf(b, "exit code %d", o->exit_code)
		                     : buf_appends(b, "exited");
	else if (o->reason == DRV_REASON_CRASH)
		q = buf_printf(b, "crashed%s%s", o->signal ? ": " : "", o->signal ? o->signal : "");
	else
		q = buf_appends(b, drv_reason_name(o->reason));
	return q < 0 ? q : buf_append(b, "", 0);
}

void drv_camunda7_retry(const drv_run_t *run, unsigned *ret_retries, uint64_t *ret_timeout_ms)
{
	unsigned left = run->retries < 0 ? run->policy : (unsigned)MIN(run->retries, 1000000);
	unsigned failed = left < run->policy ? run->policy - left : 0; /* failures before */
	usec_t t = run->backoff;

	left = left > 0 ? left - 1 : 0;
	for (unsigned i = 0; i < failed && t < run->backoff_max; i++)
		t = t > USEC_INFINITY / 2 ? USEC_INFINITY : t * 2;
	*ret_retries = left;
	*ret_timeout_ms = left ? MIN(t, run->backoff_max) / USEC_PER_MSEC : 0;
}

static int failure_request(cJSON *req, const drv_run_t *run, const struct drv_outcome *o,
                           const char *why)
{
	struct buf b = BUF_INIT(0);
	_cleanup_free_ char *msg = NULL, *details = NULL;
	unsigned retries = 0;
	uint64_t timeout_ms = 0;
	int q = why ? buf_appends(&b, why) : reason_text(o, &b);

	if (q >= 0 && why)
		q = buf_append(&b, "", 0);
	if (q >= 0 && !(msg = drv_text_dup(b.data, DRV_CAMUNDA7_ERROR_MESSAGE_MAX)))
		q = -ENOMEM;
	buf_done(&b);
	if (q < 0)
		return q;
	/* exit 75, a timeout, a crash (and a run the worker stopped): again
	 * later; anything else an incident now */
	if (!why && (o->retryable || o->status == DRV_CANCELLED))
		drv_camunda7_retry(run, &retries, &timeout_ms);
	if (o->log_tail && *o->log_tail) {
		size_t n = strlen(o->log_tail), from = n > DRV_CAMUNDA7_ERROR_DETAILS_MAX
		                                           ? n - DRV_CAMUNDA7_ERROR_DETAILS_MAX
		                                           : 0;

		while (from < n && ((unsigned char)o->log_tail[from] & 0xc0) == 0x80)
			from++;
		if (!(details = drv_text_dup(o->log_tail + from, 0)))
			return -ENOMEM;
	}
	if (!cJSON_AddStringToObject(req, "errorMessage", msg) ||
	    (details && !cJSON_AddStringToObject(req, "errorDetails", details)) ||
	    !cJSON_AddNumberToObject(req, "retries", retries) ||
	    !cJSON_AddNumberToObject(req, "retryTimeout", (double)timeout_ms))
		return -ENOMEM;
	return 0;
}

/* {"bpmn_error": {"code", "message"?, "variables"?}}: the code is required;
 * raw is the result file the variables are copied from as written. */
static int bpmn_error_request(cJSON *req, const cJSON *e, const char *raw)
{
	const cJSON *code = cJSON_GetObjectItemCaseSensitive(e, "code");
	const cJSON *msg = cJSON_GetObjectItemCaseSensitive(e, "message");
	const cJSON *vars = cJSON_GetObjectItemCaseSensitive(e, "variables");
	struct json_span es = member_span(raw, strlen(raw), "bpmn_error");
	struct json_span vs = es.p ? member_span(es.p, es.len, "variables") : es;
	_cleanup_free_ char *m =
	    cJSON_IsString(msg) ? drv_text_dup(msg->valuestring, DRV_CAMUNDA7_ERROR_MESSAGE_MAX)
	                        : NULL;

	if (cJSON_IsString(msg) && !m)
		return -ENOMEM;
	if (!cJSON_AddStringToObject(req, "errorCode", code->valuestring) ||
	    (m && !cJSON_AddStringToObject(req, "errorMessage", m)))
		return -ENOMEM;
	return cJSON_IsObject(vars) && vs.p ? add_variables(req, "variables", vs.p, vs.len) : 0;
}

static bool bpmn_error_valid(const cJSON *e)
{
	const cJSON *code = cJSON_GetObjectItemCaseSensitive(e, "code");

	return cJSON_IsObject(e) && cJSON_IsString(code) && *code->valuestring;
}

/* The text is one JSON value as json_scan reads it (stricter than cJSON, which
 * takes any byte below 0x21 for blank). */
static bool json_strict(const char *text)
{
	const char *p = text, *end = text + strlen(text);
	bool bad = false;

	return json_scan_value(&p, end, JSON_SCAN_DEPTH_MAX, &bad) == 0 && !bad &&
	       json_scan_ws(p, end) == end;
}

/* The result as the run wrote it, so numbers keep every digit; or, when only
 * cJSON's lenient parser took it (a control byte between tokens, bytes that
 * are not UTF-8), cJSON's reprint of it made valid UTF-8 and parsed again:
 * the variables still go, the result is never lost for its bytes. */
static int result_text(const char *raw, cJSON **out, char **canon)
{
	_cleanup_free_ char *printed = NULL;

	*out = raw ? cJSON_Parse(raw) : NULL;
	if (!*out || json_strict(raw))
		return 0;
	printed = cJSON_PrintUnformatted(*out);
	cJSON_Delete(*out);
	*out = NULL;
	if (!printed || !(*canon = drv_text_dup(printed, 0)))
		return -ENOMEM;
	*out = cJSON_Parse(*canon);
	return *out ? 0 : -EBADMSG;
}

/* UTF-16 code units of valid UTF-8 text (what an nvarchar counts; a
 * varchar in characters counts no more). */
static size_t utf16_units(const char *s)
{
	size_t n = 0;

	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		n += (*p & 0xc0) != 0x80 ? 1 + (*p >= 0xf0) : 0;
	return n;
}

/* What the engine's table cannot store, which it would refuse with a 500
 * from the database at every attempt (ACT_RU_VARIABLE: NAME_ varchar(255),
 * a String's TEXT_ varchar(4000), 2000 on Oracle, which lessee cannot
 * know): why into buf, or false. */
static bool beyond_the_table(const cJSON *req, char *buf, size_t len)
{
	static const char *const sets[] = {"variables", "localVariables"};

	for (size_t i = 0; i < ELEMENTSOF(sets); i++) {
		const cJSON *v;

		cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(req, sets[i]))
		{
			/* each typed value went in as the raw text add_variables made */
			_cleanup_json_ cJSON *typed =
			    cJSON_IsRaw(v) ? cJSON_Parse(v->valuestring) : NULL;
			const cJSON *t = cJSON_GetObjectItemCaseSensitive(typed, "type");
			const cJSON *x = cJSON_GetObjectItemCaseSensitive(typed, "value");
			size_t n = utf16_units(v->string);

			if (n > DRV_CAMUNDA7_NAME_MAX) {
				snprintf(
				    buf, len,
				    "a result variable's name is %zu characters long: the engine "
				    "stores at most %d",
				    n, DRV_CAMUNDA7_NAME_MAX);
				return true;
			}
			if (cJSON_IsString(t) && strcasecmp(t->valuestring, "String") == 0 &&
			    cJSON_IsString(x) &&
			    (n = utf16_units(x->valuestring)) > DRV_CAMUNDA7_STRING_MAX) {
				snprintf(buf, len,
				         "the result's String variable '%.64s' is %zu characters "
				         "long: the engine stores at most %d (give it as "
				         "{\"type\": \"Json\" or \"Object\", ...} instead)",
				         v->string, n, DRV_CAMUNDA7_STRING_MAX);
				return true;
			}
		}
	}
	return false;
}

int drv_camunda7_body(const drv_run_t *run, const struct drv_outcome *o, char **ret)
{
	_cleanup_json_ cJSON *j = cJSON_CreateObject();
	_cleanup_json_ cJSON *out = NULL;
	_cleanup_free_ char *canon = NULL;
	int q = result_text(o->output, &out, &canon);
	const char *raw = canon ? canon : o->output;
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(out, "bpmn_error");
	cJSON *req = cJSON_CreateObject();
	const char *endpoint = "failure";
	char why[DRV_CAMUNDA7_ERROR_MESSAGE_MAX];

	if (q < 0 || !j || !req || !cJSON_AddItemToObject(j, "request", req)) {
		cJSON_Delete(req);
		return q < 0 ? q : -ENOMEM;
	}
	if (!cJSON_AddStringToObject(req, "workerId", run->worker_id))
		return -ENOMEM;
	if (o->status == DRV_SUCCEEDED && e && bpmn_error_valid(e)) {
		endpoint = "bpmnError";
		q = bpmn_error_request(req, e, raw);
	} else if (o->status == DRV_SUCCEEDED && e)
		q = failure_request(req, run, o,
		                    "the result's bpmn_error is not an object with a non-empty "
		                    "string code");
	else if (o->status == DRV_SUCCEEDED) {
		endpoint = "complete";
		q = result_variables(req, run, out, raw);
	} else
		q = failure_request(req, run, o, NULL);
	if (q >= 0 && !streq(endpoint, "failure") && beyond_the_table(req, why, sizeof(why))) {
		cJSON_DeleteItemFromObjectCaseSensitive(j, "request");
		if (!(req = cJSON_AddObjectToObject(j, "request")) ||
		    !cJSON_AddStringToObject(req, "workerId", run->worker_id))
			return -ENOMEM;
		endpoint = "failure";
		q = failure_request(req, run, o, why);
	}
	if (q < 0 || !cJSON_AddStringToObject(j, "taskId", run->task_id) ||
	    !cJSON_AddStringToObject(j, "leaseKey", run->lease_key) ||
	    !cJSON_AddStringToObject(j, "endpoint", endpoint) ||
	    !(*ret = cJSON_PrintUnformatted(j)))
		return q < 0 ? q : -ENOMEM;
	return 0;
}

static int c7_complete_body(drv_t *d, drv_run_t *run, const struct drv_outcome *o, char **ret)
{
	(void)d;
	(void)lines_emit(run, "", 0, true); /* a last line without its newline */
	return drv_camunda7_body(run, o, ret);
}

static bool endpoint_known(const char *s)
{
	return streq(s, "complete") || streq(s, "failure") || streq(s, "bpmnError");
}

int drv_camunda7_body_split(const char *body, char **ret_endpoint, char **ret_request)
{
	const char *end = body + strlen(body);
	struct json_iter it;
	struct json_span k, v, ep = {0}, rq = {0};
	bool bad = false;
	_cleanup_free_ char *e = NULL;
	char *r;
	int q;

	/* the request as it was made: through cJSON its numbers could change */
	if (json_iter_open(&it, body, end, '{', 1) < 0)
		return -EBADMSG;
	while ((q = json_iter_next(&it, &k, &bad)) > 0) {
		if ((q = json_iter_value(&it, &v, &bad)) < 0)
			return -EBADMSG;
		if (key_is(&k, "endpoint"))
			ep = v;
		else if (key_is(&k, "request"))
			rq = v;
	}
	if (q < 0 || bad || !ep.p || !rq.p || rq.p[0] != '{')
		return -EBADMSG;
	if (!(e = span_string(&ep)) || !endpoint_known(e))
		return -EBADMSG;
	if (!(r = strndup(rq.p, rq.len)))
		return -ENOMEM;
	*ret_endpoint = TAKE_PTR(e);
	*ret_request = r;
	return 0;
}

/* ---------------------------------------------------------------- refused results */

/* The engine converts a request's variables before it looks at the lock
 * (ExternalTaskResourceImpl: VariableValueDto.toMap, then the command), and
 * answers 400 for both a value it cannot take ("Unsupported value type 'Json'"
 * without the Spin plugin, "Cannot convert value ...") and a lock that is not
 * ours.  The task says which: still locked by our workerId, the result is what
 * it refuses.  Dropped, the task would stay locked until lockDuration and then
 * run again with the same result, for ever; it becomes an incident instead:
 * a failure with no retries left, in the engine's words. */
static void on_refusal_failure(drv_req_t *rq, const struct http_response *resp)
{
	struct op *o = rq->state;
	struct drv_answer a;

	if (drv_answer_common(resp, &a))
		describe(resp, o->label, a.detail, sizeof(a.detail));
	else if (resp->status == 204 || resp->status == 200) {
		a.verdict = DRV_OK;
		snprintf(a.run_status, sizeof(a.run_status), "incident");
		log_emit(LOG_WARNING, &(struct log_fields){.run_id = o->run->task_id},
		         "camunda7: the engine refused the result (%s): reported as a failure "
		         "with no retries left (an incident)",
		         o->refusal);
	} else {
		a.verdict = resp->status == 400 || resp->status == 404 ? DRV_LOST : DRV_REFUSED;
		describe(resp, o->label, a.detail, sizeof(a.detail));
	}
	drv_req_answer(rq, &a);
}

static int refusal_failure(drv_req_t *rq)
{
	struct op *o = rq->state;
	_cleanup_json_ cJSON *j = cJSON_CreateObject();
	_cleanup_free_ char *msg = NULL, *text = NULL;
	char *body;

	/* objects and arrays go as Json, a type only the Spin plugin adds */
	if (asprintf(&text, "the engine refused the result: %s%s", o->refusal,
	             strstr(o->refusal, "type 'Json'") ? " (the engine needs the Spin plugin)"
	                                               : "") < 0)
		return -ENOMEM;
	if (!j || !(msg = drv_text_dup(text, DRV_CAMUNDA7_ERROR_MESSAGE_MAX)) ||
	    !cJSON_AddStringToObject(j, "workerId", o->run->worker_id) ||
	    !cJSON_AddStringToObject(j, "errorMessage", msg) ||
	    !cJSON_AddStringToObject(j, "errorDetails", text) ||
	    !cJSON_AddNumberToObject(j, "retries", 0) ||
	    !cJSON_AddNumberToObject(j, "retryTimeout", 0) || !(body = cJSON_PrintUnformatted(j)))
		return -ENOMEM;
	rq->on_http = on_refusal_failure;
	o->label = "failure";
	return op_send(rq, "POST", "/external-task/", o->run->task_id, "failure", body, 0,
	               SMALL_ANSWER);
}

/* GET /external-task/{id}: whose lock is it now? */
static void on_refusal_task(drv_req_t *rq, const struct http_response *resp)
{
	struct op *o = rq->state;
	_cleanup_json_ cJSON *t = NULL;
	const cJSON *w;
	struct drv_answer a;
	int q;

	if (drv_answer_common(resp, &a)) {
		describe(resp, "GET external-task", a.detail, sizeof(a.detail));
		return drv_req_answer(rq, &a);
	}
	if (resp->status == 200)
		t = cJSON_ParseWithLength(resp->body, resp->body_len);
	w = cJSON_GetObjectItemCaseSensitive(t, "workerId");
	if (!cJSON_IsString(w) || !streq(w->valuestring, o->run->worker_id)) {
		a.verdict = resp->status == 200 || resp->status == 404 ? DRV_LOST : DRV_REFUSED;
		snprintf(a.detail, sizeof(a.detail), "%s; task: %s", o->refusal,
		         resp->status == 404   ? "gone"
		         : resp->status != 200 ? "unreadable"
		         : cJSON_IsString(w)   ? "locked by another worker"
		                               : "not locked");
		return drv_req_answer(rq, &a);
	}
	if ((q = refusal_failure(rq)) < 0) {
		a = (struct drv_answer){.verdict = DRV_RETRY, .error = q};
		snprintf(a.detail, sizeof(a.detail), "cannot send: %s", strerror(-q));
		drv_req_answer(rq, &a);
	}
}

/* A 400 to complete or bpmnError: ask whose lock the task is under. */
static int refusal_check(drv_req_t *rq, const struct http_response *resp)
{
	struct op *o = rq->state;
	char why[DRV_CAMUNDA7_ERROR_MESSAGE_MAX + 160];

	drv_describe_message(resp, o->label, DRV_CAMUNDA7_ERROR_MESSAGE_MAX, why, sizeof(why));
	if (!(o->refusal = strdup(why)))
		return -ENOMEM;
	o->has_variables = false; /* once */
	rq->on_http = on_refusal_task;
	o->label = "external_task";
	return op_send(rq, "GET", "/external-task/", o->run->task_id, NULL, NULL, 0, TASK_ANSWER);
}

/* ---------------------------------------------------------------- complete */

static int c7_complete(drv_t *d, drv_run_t *run, const char *body, drv_cb cb, void *ud,
                       drv_req_t **ret)
{
	_cleanup_free_ char *endpoint = NULL;
	char *request = NULL;
	struct op *o;
	drv_req_t *rq;
	int q = drv_camunda7_body_split(body, &endpoint, &request);

	if (q < 0)
		return q;
	if (!(rq = op_new(d, on_task_answer, cb, ud, &o))) {
		free(request);
		return -ENOMEM;
	}
	o->label = streq(endpoint, "complete")    ? "complete"
	           : streq(endpoint, "bpmnError") ? "bpmn_error"
	                                          : "failure";
	o->endpoint = streq(endpoint, "complete")    ? "completed"
	              : streq(endpoint, "bpmnError") ? "bpmn_error"
	                                             : "failed";
	o->has_variables = !streq(endpoint, "failure");
	o->run = run;
	return op_post(rq, "/external-task/", run->task_id, endpoint, request, 0, SMALL_ANSWER,
	               ret);
}

/* ---------------------------------------------------------------- release */

/* unlock: no workerId, no delay (UnlockExternalTaskCmd); the task is
 * available again at once, to any worker. */
static int c7_release(drv_t *d, drv_run_t *run, enum drv_release_reason why, unsigned delay_s,
                      drv_cb cb, void *ud, drv_req_t **ret)
{
	struct op *o;
	drv_req_t *rq = op_new(d, on_task_answer, cb, ud, &o);

	(void)why, (void)delay_s;
	if (!rq)
		return -ENOMEM;
	o->label = "unlock";
	o->run = run;
	return op_post(rq, "/external-task/", run->task_id, "unlock", NULL, 0, SMALL_ANSWER, ret);
}

/* ---------------------------------------------------------------- restore */

int drv_camunda7_restore(const char *run_id, const char *body, drv_run_t **ret)
{
	_cleanup_json_ cJSON *j = cJSON_Parse(body);
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "taskId");
	const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "endpoint");
	const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "request");
	const cJSON *w = cJSON_GetObjectItemCaseSensitive(r, "workerId");
	const cJSON *k = cJSON_GetObjectItemCaseSensitive(j, "leaseKey");
	drv_run_t *run;

	if (!cJSON_IsString(t) || !streq(t->valuestring, run_id) ||
	    !drv_camunda7_valid_id(run_id) || !cJSON_IsString(e) ||
	    !endpoint_known(e->valuestring) || !cJSON_IsString(w) || !*w->valuestring)
		return -EBADMSG;
	if (!(run = run_new(run_id, w->valuestring,
	                    cJSON_IsString(k) && *k->valuestring ? k->valuestring : run_id)))
		return -ENOMEM;
	*ret = run;
	return 0;
}

static int c7_restore(drv_t *d, const char *run_id, const char *body, drv_run_t **ret)
{
	(void)d;
	return drv_camunda7_restore(run_id, body, ret);
}

const struct drv_ops drv_camunda7_ops = {
    .name = "camunda7",
    .caps = DRV_CAP_MULTI_WORKFLOW | DRV_CAP_RELEASE,
    .init = c7_init,
    .done = c7_done,
    .reload = c7_reload,
    .claim = c7_claim,
    .renew = c7_renew,
    .log_append = c7_log_append,
    .complete_body = c7_complete_body,
    .complete = c7_complete,
    .release = c7_release,
    .restore = c7_restore,
    .run_free = c7_run_free,
    .run_lease_key = c7_run_lease_key,
};
