/* Netflix/Orkes Conductor's task API as a driver (docs/conductor.md).  Every
 * server behaviour relied on here was read from conductor-oss/conductor
 * (TaskResource, ExecutionService.poll, WorkflowExecutorOps.updateTask and
 * extendLease, DeciderService.isResponseTimedOut, TaskResult); the comments
 * name the class.
 *
 *   claim     GET  /api/tasks/poll/batch/{taskType}?workerid&count&timeout&domain
 *             (one workflow per claim: its task_type)
 *   renew     GET  /api/tasks/{taskId}: still IN_PROGRESS for our worker id?
 *             (an update of a terminal task is answered 200 and ignored, so
 *             the update's answer cannot say "cancelled"), then
 *             POST /api/tasks IN_PROGRESS + extendLease
 *   log       POST /api/tasks/{taskId}/log, complete lines, batched, capped
 *   complete  POST /api/tasks COMPLETED | FAILED | FAILED_WITH_TERMINAL_ERROR
 *   release   POST /api/tasks IN_PROGRESS + callbackAfterSeconds (back in the
 *             queue after the delay, the same task id)
 *   auth      POST /api/token {keyId, keySecret} -> X-Authorization, fetched
 *             before the first request, again once on a 401 */
#include <cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "conf/conf.h"
#include "log/log.h"
#include "proto/driver-int.h"
#include "proto/drv_conductor-int.h"
#include "proto/json_scan.h"
#include "util/buf.h"
#include "util/macro.h"
#include "util/strutil.h"

#define ID_MAX DRV_CONDUCTOR_ID_MAX
#define SMALL_ANSWER 4096
#define TOKEN_MAX DRV_CONDUCTOR_TOKEN_MAX
#define POLL_TIMEOUT_MAX_MS 5000   /* ExecutionService.MAX_POLL_TIMEOUT_MS: above is a 400 */
#define TTL_MAX_S DRV_CONDUCTOR_TTL_MAX_S
#define REASON_MAX 500             /* TaskResult.setReasonForIncompletion keeps 500 chars */
#define LOG_REQ_MAX (64 * 1024)    /* one log entry (one request) at most */
#define LOG_HELD_MAX (1024 * 1024) /* unsent log kept by the driver for a run */
#define TASK_OVERHEAD (64 * 1024)  /* a task's fields besides its inputData */
#define RELEASE_DELAY_MIN_S (POLL_TIMEOUT_MAX_MS / 1000 + 1)
#define RENEW_STEP_MIN (500 * USEC_PER_MSEC)

DEFINE_FREE_FUNC(cJSON, cJSON_Delete)
#define _cleanup_json_ _cleanup_(cJSON_Deletep)

/* One operation: the request it sends (kept whole, so it can go again after a
 * new token), and what its answer handler needs. */
struct op {
	drv_t *d;
	const char *method, *label;
	const char *const *headers;
	char *url;
	char *body;
	size_t body_len;
	usec_t timeout;
	size_t max_response;
	bool fresh;
	unsigned gen;       /* the token generation the request carried */
	bool token_pending; /* the request in flight is POST /api/token */
	bool reauthed;      /* a 401 was answered with a new token already */
	void (*handler)(drv_req_t *rq, const struct http_response *resp);
	/* claim */
	struct task_type *type;
	unsigned max_runs;
	size_t max_input;
	bool pop; /* a poll for what is there now (timeout 0), see conductor_claim */
	/* renew */
	drv_run_t *run;
	usec_t deadline;
	unsigned ttl_s;
	/* log */
	size_t chunk;
};

static const char *const json_headers[] = {"Content-Type: application/json", "Expect:", NULL};
static const char *const text_headers[] = {"Content-Type: text/plain; charset=utf-8",
                                           "Expect:", NULL};
static const char *const get_headers[] = {"Accept: application/json", NULL};

static struct conductor *C(drv_t *d)
{
	return d->priv;
}

static void *mfree(void *p)
{
	free(p);
	return NULL;
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec * 1000 + (double)(ts.tv_nsec / 1000000);
}

/* ---------------------------------------------------------------- text */

#define text_clean drv_text_clean
#define text_dup drv_text_dup

bool drv_conductor_valid_id(const char *s)
{
	return s && str_in_charset(s, 1, ID_MAX, "._:-");
}

static bool valid_id(const char *s)
{
	return drv_conductor_valid_id(s);
}

/* ---------------------------------------------------------------- runs */

static void conductor_run_free(drv_run_t *run)
{
	if (!run)
		return;
	free(run->task_id);
	free(run->wf_id);
	free(run->task_type);
	buf_done(&run->log);
	free(run);
}

static drv_run_t *run_new(const char *task_id, const char *wf_id, const char *task_type)
{
	drv_run_t *run = calloc(1, sizeof(*run));

	if (!run)
		return NULL;
	run->log = (struct buf)BUF_INIT(0);
	run->task_id = strdup(task_id);
	run->wf_id = strdup(wf_id);
	run->task_type = task_type ? strdup(task_type) : NULL;
	if (!run->task_id || !run->wf_id || (task_type && !run->task_type)) {
		conductor_run_free(run);
		return NULL;
	}
	return run;
}

static const char *conductor_run_lease_key(const drv_run_t *run)
{
	return run->task_id;
}

/* ---------------------------------------------------------------- init */

static struct task_type *type_of(struct conductor *n, const char *workflow);

static void type_free(struct task_type *t)
{
	if (t) {
		free(t->workflow);
		free(t->name);
		free(t);
	}
}

/* The task types of the workflows not yet known: all at init, those a reload
 * added after it (a workflow's task_type is not live; one removed keeps its
 * entry, no longer asked for). */
static int types_add(struct conductor *n, const struct conf *c)
{
	for (size_t i = 0; i < c->n_workflows; i++) {
		const struct conf_workflow *w = &c->workflows[i];
		struct task_type **v, *t;

		if (type_of(n, w->name))
			continue;
		if (!(v = reallocarray(n->types, n->n_types + 1, sizeof(*v))))
			return -ENOMEM;
		n->types = v;
		if (!(t = calloc(1, sizeof(*t))))
			return -ENOMEM;
		t->workflow = strdup(w->name);
		t->name = strdup(w->task_type ? w->task_type : w->name);
		if (!t->workflow || !t->name) {
			type_free(t);
			return -ENOMEM;
		}
		n->types[n->n_types++] = t;
	}
	return 0;
}

static void conductor_done(drv_t *d)
{
	struct conductor *n = d->priv;

	if (!n)
		return;
	for (size_t i = 0; i < n->n_types; i++)
		type_free(n->types[i]);
	free(n->types);
	free(n->worker_id);
	free(n->domain);
	free(n->key_id);
	if (n->key_secret)
		explicit_bzero(n->key_secret, strlen(n->key_secret));
	free(n->key_secret);
	free(n);
	d->priv = NULL;
}

static int conductor_init(drv_t *d, const struct conf *c)
{
	struct conductor *n = calloc(1, sizeof(*n));

	if (!n)
		return -ENOMEM;
	d->priv = n;
	/* the native bearer token has no meaning here (conf refuses token_file) */
	if (d->auth) {
		explicit_bzero(d->auth, strlen(d->auth));
		d->auth = mfree(d->auth);
	}
	n->fallback_ttl_s = (unsigned)MIN(c->worker.lease_ttl / USEC_PER_SEC, TTL_MAX_S);
	n->lease_refresh = c->worker.lease_refresh;
	n->max_task = (size_t)MIN(c->worker.max_input_bytes, 64u << 20) * 2 + TASK_OVERHEAD;
	n->worker_id = strdup(c->worker.id ? c->worker.id : "lessee");
	if (!n->worker_id || (c->api.domain && !(n->domain = strdup(c->api.domain))))
		return -ENOMEM;
	if (c->api.key_id && c->api.key_secret &&
	    (!(n->key_id = strdup(c->api.key_id)) || !(n->key_secret = strdup(c->api.key_secret))))
		return -ENOMEM;
	d->auth_renewable = n->key_id != NULL; /* an expired token is renewed, not a denial */
	return types_add(n, c);
}

static int conductor_reload(drv_t *d, const struct conf *c)
{
	return types_add(C(d), c);
}

static struct task_type *type_of(struct conductor *n, const char *workflow)
{
	for (size_t i = 0; i < n->n_types; i++)
		if (streq(n->types[i]->workflow, workflow))
			return n->types[i];
	return NULL;
}

/* ---------------------------------------------------------------- operations */

static void op_free(void *p)
{
	struct op *o = p;

	if (!o)
		return;
	free(o->url);
	if (o->body)
		explicit_bzero(o->body, o->body_len);
	free(o->body);
	free(o);
}

static void on_any(drv_req_t *rq, const struct http_response *resp);

static drv_req_t *op_new(drv_t *d, void (*handler)(drv_req_t *, const struct http_response *),
                         drv_cb cb, void *ud, struct op **ret)
{
	drv_req_t *rq = drv_req_new_state(d, on_any, cb, ud, sizeof(struct op), op_free);

	if (rq) {
		*ret = rq->state;
		**ret = (struct op){.d = d, .handler = handler};
	}
	return rq;
}

/* base + path (printf-style, ids already checked to be URL-safe). */
_printf_(2, 3) static int op_url(struct op *o, const char *fmt, ...)
{
	_cleanup_free_ char *path = NULL;
	va_list ap;
	int q;

	va_start(ap, fmt);
	q = vasprintf(&path, fmt, ap);
	va_end(ap);
	if (q < 0)
		return -ENOMEM;
	free(o->url);
	return asprintf(&o->url, "%s%s", o->d->base, path) < 0 ? (o->url = NULL, -ENOMEM) : 0;
}

static int send_token(drv_req_t *rq)
{
	struct op *o = rq->state;
	struct conductor *n = C(o->d);
	_cleanup_json_ cJSON *j = cJSON_CreateObject();
	_cleanup_free_ char *url = NULL;
	char *body;
	int q;

	if (!j || !cJSON_AddStringToObject(j, "keyId", n->key_id) ||
	    !cJSON_AddStringToObject(j, "keySecret", n->key_secret))
		return -ENOMEM;
	if (!(body = cJSON_PrintUnformatted(j)) || asprintf(&url, "%s/api/token", o->d->base) < 0) {
		free(body);
		return -ENOMEM;
	}
	/* the token we had is refused or missing: send none with this one */
	if (o->d->auth) {
		explicit_bzero(o->d->auth, strlen(o->d->auth));
		o->d->auth = mfree(o->d->auth);
	}
	o->token_pending = true;
	q = drv_http_send(rq, &(struct http_request){.method = "POST",
	                                             .url = url,
	                                             .headers = json_headers,
	                                             .body = body,
	                                             .body_len = strlen(body),
	                                             .max_response = TOKEN_MAX,
	                                             .label = "token"});
	explicit_bzero(body, strlen(body));
	free(body);
	return q;
}

/* The operation's own request, or a token first when we have none. */
static int op_send(drv_req_t *rq)
{
	struct op *o = rq->state;

	if (C(o->d)->key_id && !o->d->auth)
		return send_token(rq);
	o->token_pending = false;
	o->gen = C(o->d)->token_gen;
	return drv_http_send(rq, &(struct http_request){.method = o->method,
	                                                .url = o->url,
	                                                .headers = o->headers,
	                                                .body = o->body,
	                                                .body_len = o->body_len,
	                                                .timeout = o->timeout,
	                                                .max_response = o->max_response,
	                                                .label = o->label,
	                                                .fresh_connect = o->fresh});
}

/* Start rq; on failure it is freed and nothing runs. */
static int op_start(drv_req_t *rq, drv_req_t **ret)
{
	return drv_req_start(rq, op_send(rq), ret);
}

/* The server's ErrorResponse message, else the body's start, after "HTTP n". */
static void describe(const struct http_response *resp, const char *what, char *buf, size_t len)
{
	drv_describe_message(resp, what, 100, buf, len);
}

int drv_conductor_token_parse(const char *body, size_t len, char **ret)
{
	_cleanup_json_ cJSON *j = cJSON_ParseWithLength(body, len);
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "token");
	char *token;

	if (!cJSON_IsString(t) || !str_in_charset(t->valuestring, 1, TOKEN_MAX, "._~+/=-"))
		return -EBADMSG;
	token = strdup(t->valuestring);
	explicit_bzero(t->valuestring, strlen(t->valuestring));
	if (!token)
		return -ENOMEM;
	*ret = token;
	return 0;
}

static void token_free(char *token)
{
	if (token)
		explicit_bzero(token, strlen(token));
	free(token);
}

/* The answer to POST /api/token: a new X-Authorization, or why not. */
static int token_take(drv_t *d, const struct http_response *resp, struct drv_answer *a)
{
	char *token = NULL;
	int q;

	if (drv_answer_common(resp, a)) { /* 5xx, transport: retry; 401/403: denied */
		describe(resp, "POST /api/token", a->detail, sizeof(a->detail));
		return -EACCES;
	}
	if (resp->status == 404 || resp->status == 405) {
		a->verdict = DRV_REFUSED;
		snprintf(
		    a->detail, sizeof(a->detail),
		    "POST /api/token: HTTP %ld: this server has no token endpoint (Conductor OSS "
		    "has no authentication): unset api.key_id",
		    resp->status);
		return -EACCES;
	}
	q = resp->status == 200 ? drv_conductor_token_parse(resp->body, resp->body_len, &token)
	                        : -EBADMSG;
	if (q == -ENOMEM)
		return q;
	if (q < 0) {
		a->verdict = resp->status == 200 ? DRV_RETRY : DRV_DENIED;
		describe(resp, "POST /api/token", a->detail, sizeof(a->detail));
		if (resp->status == 200)
			snprintf(a->detail, sizeof(a->detail),
			         "POST /api/token: HTTP 200 without a usable token");
		return -EACCES;
	}
	/* two operations may have asked for a token at once: the last one wins */
	if (d->auth) {
		explicit_bzero(d->auth, strlen(d->auth));
		d->auth = mfree(d->auth);
	}
	q = asprintf(&d->auth, "X-Authorization: %s", token);
	token_free(token);
	if (q < 0) {
		d->auth = NULL;
		return -ENOMEM;
	}
	C(d)->token_gen++;
	return 0;
}

static void op_fail(drv_req_t *rq, struct drv_answer *a)
{
	if (rq->claim_cb) {
		struct drv_claim_answer ans = {.a = *a, .queue_depth = -1};

		drv_req_claim_answer(rq, &ans);
	} else
		drv_req_answer(rq, a);
}

/* Orkes answers an expired token 401 (or 403 naming it, the SDK's reading). */
static bool token_refused(const struct http_response *resp)
{
	if (resp->status == 401)
		return true;
	return resp->status == 403 && resp->body &&
	       (strstr(resp->body, "EXPIRED_TOKEN") || strstr(resp->body, "INVALID_TOKEN"));
}

static void on_any(drv_req_t *rq, const struct http_response *resp)
{
	struct op *o = rq->state;
	struct conductor *n = C(o->d);
	struct drv_answer a = {0};
	int q;

	if (o->token_pending) {
		q = token_take(o->d, resp, &a);
		if (q == -ENOMEM) {
			a = (struct drv_answer){.verdict = DRV_RETRY, .error = -ENOMEM};
			snprintf(a.detail, sizeof(a.detail), "out of memory");
		}
		if (q < 0 || (q = op_send(rq)) < 0) {
			if (q >= 0 || a.detail[0] == '\0') {
				a = (struct drv_answer){.verdict = DRV_RETRY, .error = q};
				snprintf(a.detail, sizeof(a.detail), "cannot send: %s",
				         strerror(-q));
			}
			op_fail(rq, &a);
		}
		return;
	}
	if (n->key_id && token_refused(resp) && !o->reauthed) {
		o->reauthed = true;
		/* another operation may have renewed it since this one went out */
		if (o->gen == n->token_gen && o->d->auth) {
			explicit_bzero(o->d->auth, strlen(o->d->auth));
			o->d->auth = mfree(o->d->auth);
		}
		if ((q = op_send(rq)) < 0) {
			a = (struct drv_answer){.verdict = DRV_RETRY, .error = q};
			snprintf(a.detail, sizeof(a.detail), "cannot send: %s", strerror(-q));
			op_fail(rq, &a);
		}
		return;
	}
	o->handler(rq, resp);
}

/* ---------------------------------------------------------------- claim */

/* A JSON string value (the span, quotes included) decoded; NULL if not one. */
static char *span_string(const struct json_span *v)
{
	_cleanup_json_ cJSON *j = v->p ? cJSON_ParseWithLength(v->p, v->len) : NULL;

	return cJSON_IsString(j) ? strdup(j->valuestring) : NULL;
}

/* A JSON integer 0..max; -1 if absent or not one. */
static long long span_int(const struct json_span *v, long long max)
{
	_cleanup_json_ cJSON *j = v->p ? cJSON_ParseWithLength(v->p, v->len) : NULL;

	if (!cJSON_IsNumber(j) || j->valuedouble < 0 || j->valuedouble > (double)max ||
	    j->valuedouble != (double)(long long)j->valuedouble)
		return -1;
	return (long long)j->valuedouble;
}

struct task_fields {
	struct json_span task_id, wf_id, type, def_name, input, retry, resp_timeout, wf_type,
	    ref_name, poll_count, input_path;
	bool input_bad_utf8;
};

static bool key_is(const struct json_span *k, const char *name)
{
	size_t n = strlen(name);

	return k->len == n + 2 && memcmp(k->p + 1, name, n) == 0;
}

/* One task object of the poll's array: the fields we use, as spans. */
static int task_scan(struct json_iter *arr, struct task_fields *f)
{
	struct json_iter it;
	struct json_span k, v;
	bool bad = false;
	int q = json_iter_open(&it, arr->p, arr->end, '{', arr->depth + 1);

	*f = (struct task_fields){0};
	if (q < 0)
		return q;
	while ((q = json_iter_next(&it, &k, &bad)) > 0) {
		bool b = false;
		struct json_span *slot = key_is(&k, "taskId")                   ? &f->task_id
		                         : key_is(&k, "workflowInstanceId")     ? &f->wf_id
		                         : key_is(&k, "taskType")               ? &f->type
		                         : key_is(&k, "taskDefName")            ? &f->def_name
		                         : key_is(&k, "inputData")              ? &f->input
		                         : key_is(&k, "retryCount")             ? &f->retry
		                         : key_is(&k, "responseTimeoutSeconds") ? &f->resp_timeout
		                         : key_is(&k, "workflowType")           ? &f->wf_type
		                         : key_is(&k, "referenceTaskName")      ? &f->ref_name
		                         : key_is(&k, "pollCount")              ? &f->poll_count
		                         : key_is(&k, "externalInputPayloadStoragePath")
		                             ? &f->input_path
		                             : NULL;

		if ((q = json_iter_value(&it, &v, &b)) < 0)
			return q;
		if (slot)
			*slot = v;
		if (slot == &f->input)
			f->input_bad_utf8 = b;
	}
	arr->p = it.p;
	return q;
}

static int env_add(char ***env, const char *name, const char *value)
{
	char *s;

	if (!value || !str_in_charset(value, 1, 255, "._:-"))
		return 0; /* nothing, or nothing we pass on as it is */
	if (asprintf(&s, "%s=%s", name, value) < 0)
		return -ENOMEM;
	return strv_push(env, s);
}

static int grant_env(struct drv_grant *g, const char *wf_id, const struct task_fields *f,
                     const struct task_type *t)
{
	_cleanup_free_ char *wf_type = span_string(&f->wf_type);
	_cleanup_free_ char *ref = span_string(&f->ref_name);
	char retry[24];
	long long r = span_int(&f->retry, INT32_MAX);
	int q;

	snprintf(retry, sizeof(retry), "%lld", r < 0 ? 0 : r);
	if (!(g->env = calloc(1, sizeof(char *))))
		return -ENOMEM;
	q = env_add(&g->env, "LESSEE_CONDUCTOR_WORKFLOW_ID", wf_id);
	if (q >= 0)
		q = env_add(&g->env, "LESSEE_CONDUCTOR_TASK_ID", g->id);
	if (q >= 0)
		q = env_add(&g->env, "LESSEE_CONDUCTOR_TASK_TYPE", t->name);
	if (q >= 0)
		q = env_add(&g->env, "LESSEE_CONDUCTOR_WORKFLOW_TYPE", wf_type);
	if (q >= 0)
		q = env_add(&g->env, "LESSEE_CONDUCTOR_REFERENCE_NAME", ref);
	if (q >= 0)
		q = env_add(&g->env, "LESSEE_CONDUCTOR_RETRY_COUNT", retry);
	return q;
}

static int set_invalid(struct drv_grant *g, const char *fmt, const char *arg)
{
	if (g->invalid)
		return 0; /* the first reason is the one said */
	return asprintf(&g->invalid, fmt, arg) < 0 ? (g->invalid = NULL, -ENOMEM) : 0;
}

/* responseTimeoutSeconds is the lease: 0 (no response timeout) leaves the
 * worker's own lease_ttl; capped as native leases are.  A keep-alive that
 * comes no sooner than the timeout loses every task: said once per type. */
static unsigned grant_ttl(struct conductor *n, struct task_type *t, long long rts)
{
	char a[TIME_DURATION_MAX];

	if (rts > 0 && !t->warned && (usec_t)rts * USEC_PER_SEC <= n->lease_refresh) {
		t->warned = true;
		log_emit(
		    LOG_WARNING, NULL,
		    "conductor: task type %s has responseTimeoutSeconds %lld, not above "
		    "worker.lease_refresh (%s): the server will time its tasks out between two "
		    "keep-alives; lower lease_refresh or raise the task definition's "
		    "responseTimeoutSeconds",
		    t->name, rts, time_format_duration(a, sizeof(a), n->lease_refresh));
	}
	if (rts <= 0)
		return n->fallback_ttl_s;
	return (unsigned)MIN(rts, TTL_MAX_S);
}

static int grant_from(struct conductor *n, struct task_type *t, size_t max_input,
                      const struct task_fields *f, struct drv_grant *g)
{
	_cleanup_free_ char *wf_id = span_string(&f->wf_id);
	_cleanup_free_ char *type = span_string(f->type.p ? &f->type : &f->def_name);
	long long retry = span_int(&f->retry, INT32_MAX);
	int q = 0;

	*g = (struct drv_grant){.attempt = retry >= 0 ? (unsigned)retry + 1 : 1};
	g->id = span_string(&f->task_id);
	if (!(g->workflow = strdup(t->workflow)))
		return -ENOMEM;
	g->ttl_s = grant_ttl(n, t, span_int(&f->resp_timeout, INT32_MAX));
	g->usable_for_reject = valid_id(g->id) && valid_id(wf_id);
	if (!valid_id(g->id))
		q = set_invalid(g, "taskId is missing or not 1..128 bytes of [A-Za-z0-9._:-]%s",
		                "");
	else if (!valid_id(wf_id))
		q = set_invalid(g, "workflowInstanceId of task %s is missing or malformed", g->id);
	if (q >= 0 && (!type || !streq(type, t->name)))
		q = set_invalid(g, "a task of another type than the one polled (%s)", t->name);
	/* TaskModel.toTask: an input over taskInputPayloadSizeThreshold (3 MB by
	 * default) went to external payload storage and inputData is {} */
	if (q >= 0 && f->input_path.p && f->input_path.p[0] == '"')
		q = set_invalid(g,
		                "the task's input is in external payload storage%s, which lessee "
		                "does not read",
		                " (externalInputPayloadStoragePath)");
	if (q >= 0 && f->input.p && f->input.len > max_input)
		q = set_invalid(g, "inputData is larger than worker.max_input_bytes%s", "");
	if (q >= 0 && f->input_bad_utf8)
		q = set_invalid(g, "inputData is not valid UTF-8%s", "");
	if (q >= 0 && f->input.p && f->input.p[0] != '{' && f->input.p[0] != 'n')
		q = set_invalid(g, "inputData is not an object%s", "");
	if (q >= 0 && !g->invalid)
		g->input = f->input.p ? strndup(f->input.p, f->input.len) : strdup("null");
	else if (q >= 0)
		g->input = strdup("null");
	if (q < 0 || !g->input)
		return -ENOMEM;
	g->input_len = strlen(g->input);
	if (!g->id)
		return (g->id = strdup("")) ? 0 : -ENOMEM;
	if (!g->usable_for_reject)
		return 0;
	if (!(g->lease_key = strdup(g->id)) || !(g->priv = run_new(g->id, wf_id, t->name)))
		return -ENOMEM;
	return grant_env(g, wf_id, f, t);
}

static void claim_refuse(struct drv_claim_answer *ans, bool malformed, const char *what)
{
	ans->a.verdict = DRV_REFUSED;
	ans->malformed = malformed;
	snprintf(ans->a.detail, sizeof(ans->a.detail), "poll answer: %s", what);
}

void drv_conductor_poll_parse(struct conductor *n, struct task_type *t, unsigned max_runs,
                              size_t max_input, const char *body, size_t len,
                              struct drv_claim_answer *ans)
{
	const char *end = body + len;
	struct json_iter arr;
	bool bad = false;
	size_t cap;
	int q;

	ans->a.verdict = DRV_OK;
	if (len == 0)
		return; /* older servers: nothing found */
	if ((q = json_iter_open(&arr, body, end, '[', 1)) < 0)
		return claim_refuse(ans, true, "not a JSON array");
	cap = max_runs + 1;
	if (!(ans->runs = calloc(cap, sizeof(*ans->runs))))
		return claim_refuse(ans, false, "out of memory");
	while ((q = json_iter_next(&arr, &(struct json_span){0}, &bad)) > 0) {
		struct task_fields f;
		struct drv_grant *g;

		if ((q = task_scan(&arr, &f)) < 0)
			break;
		if (ans->n_runs == cap) {
			struct drv_grant *nr = realloc(ans->runs, 2 * cap * sizeof(*nr));

			if (!nr)
				return claim_refuse(ans, false, "out of memory");
			ans->runs = nr, cap *= 2;
		}
		g = &ans->runs[ans->n_runs++];
		if (grant_from(n, t, max_input, &f, g) < 0)
			return claim_refuse(ans, false, "out of memory");
		if (ans->n_runs > max_runs && !g->invalid &&
		    asprintf(&g->invalid, "the server granted more than count=%u tasks", max_runs) <
		        0)
			return claim_refuse(ans, false, "out of memory");
	}
	if (q < 0 || json_scan_ws(arr.p, end) != end) {
		/* what was read is ours on the server: hand it over, say the rest */
		if (ans->n_runs == 0)
			claim_refuse(ans, true, "malformed JSON");
		else
			snprintf(ans->a.detail, sizeof(ans->a.detail),
			         "poll answer: malformed JSON after %zu tasks", ans->n_runs);
	}
}

static void claim_parse(drv_req_t *rq, const struct http_response *resp,
                        struct drv_claim_answer *ans)
{
	struct op *o = rq->state;

	ans->a.verdict = DRV_OK;
	if (resp->status == 204)
		return; /* older servers: nothing found */
	drv_conductor_poll_parse(C(o->d), o->type, o->max_runs, o->max_input, resp->body,
	                         resp->body_len, ans);
}

static int poll_url(struct op *o, unsigned count, unsigned timeout_ms)
{
	struct conductor *n = C(o->d);

	return op_url(o, "/api/tasks/poll/batch/%s?workerid=%s&count=%u&timeout=%u%s%s",
	              o->type->name, n->worker_id, count, timeout_ms, n->domain ? "&domain=" : "",
	              n->domain ? n->domain : "");
}

static void on_claim(drv_req_t *rq, const struct http_response *resp)
{
	struct drv_claim_answer ans = {.queue_depth = -1};

	if (resp->error == -EMSGSIZE) {
		ans.a = (struct drv_answer){.verdict = DRV_REFUSED, .error = resp->error};
		ans.too_large = true;
		snprintf(ans.a.detail, sizeof(ans.a.detail),
		         "poll answer over its cap (count x (2 x worker.max_input_bytes + %u)): "
		         "its tasks come back after their responseTimeoutSeconds",
		         TASK_OVERHEAD);
	} else if (drv_answer_common(resp, &ans.a))
		describe(resp, "poll", ans.a.detail, sizeof(ans.a.detail));
	else if (resp->status == 200 || resp->status == 204) {
		struct op *o = rq->state;

		claim_parse(rq, resp, &ans);
		/* deep: a wait brought a task, or a pop was filled; a pop that
		 * found fewer says so, and the worker claims again at once */
		o->type->deep = ans.n_runs > 0 && (!o->pop || ans.n_runs >= o->max_runs);
		ans.no_wait = o->pop;
	} else {
		/* 400 (a timeout over 5 s, ...), 404: our request is wrong */
		ans.a.verdict = DRV_REFUSED;
		describe(resp, "poll", ans.a.detail, sizeof(ans.a.detail));
	}
	drv_req_claim_answer(rq, &ans);
}

static int conductor_claim(drv_t *d, const struct drv_claim *c, drv_claim_cb cb, void *ud,
                           drv_req_t **ret)
{
	struct conductor *n = C(d);
	struct task_type *t;
	unsigned wait_ms = (unsigned)MIN(c->wait / USEC_PER_MSEC, POLL_TIMEOUT_MAX_MS);
	drv_req_t *rq;
	struct op *o;
	int q;

	if (!c->workflows || !c->workflows[0] || c->workflows[1] || c->max_runs == 0)
		return -EINVAL; /* no DRV_CAP_MULTI_WORKFLOW, no DRV_CAP_SERVER_CANCEL */
	if (!(t = type_of(n, c->workflows[0])))
		return -ENOENT;
	if (!(rq = op_new(d, on_claim, NULL, ud, &o)))
		return -ENOMEM;
	rq->claim_cb = cb;
	*o = (struct op){.d = d,
	                 .handler = on_claim,
	                 .method = "GET",
	                 .label = "poll",
	                 .headers = get_headers,
	                 .timeout = c->timeout,
	                 .type = t,
	                 .max_runs = c->max_runs,
	                 .max_input = c->max_input};
	/* room for inputs up to twice the cap: a task over it is read and
	 * refused by name rather than lost with the whole answer */
	o->max_response =
	    c->max_response
	        ? c->max_response
	        : (size_t)c->max_runs * (2 * c->max_input + TASK_OVERHEAD) + SMALL_ANSWER;
	/* A poll for `count` tasks holds until it has them all or its timeout
	 * passes (SqliteQueueDAO.pollMessages), and what it popped meanwhile is
	 * already IN_PROGRESS for us: a lone task would wait out the whole long
	 * poll.  So while tasks keep coming (t->deep) a claim pops what is there
	 * now, as many as the slots; else it waits for one, which it gets as
	 * soon as it arrives. */
	if (wait_ms > 0 && c->max_runs > 1) {
		o->pop = t->deep;
		o->max_runs = t->deep ? c->max_runs : 1;
	}
	q = poll_url(o, o->max_runs, o->pop ? 0 : wait_ms);
	if (q < 0) {
		drv_req_free(rq);
		return q;
	}
	return op_start(rq, ret);
}

/* ---------------------------------------------------------------- results */

/* A TaskResult: the fields every update carries. */
static cJSON *result_new(const struct conductor *n, const drv_run_t *run, const char *status)
{
	cJSON *j = cJSON_CreateObject();

	if (!j || !cJSON_AddStringToObject(j, "taskId", run->task_id) ||
	    !cJSON_AddStringToObject(j, "workflowInstanceId", run->wf_id) ||
	    !cJSON_AddStringToObject(j, "workerId", n->worker_id) ||
	    !cJSON_AddStringToObject(j, "status", status)) {
		cJSON_Delete(j);
		return NULL;
	}
	return j;
}

static int op_post_result(struct op *o, cJSON *j)
{
	char *body = cJSON_PrintUnformatted(j);

	if (!body)
		return -ENOMEM;
	o->method = "POST";
	o->headers = json_headers;
	o->body = body;
	o->body_len = strlen(body);
	o->max_response = SMALL_ANSWER;
	return op_url(o, "/api/tasks");
}

/* 404: the task (or its workflow) is gone: not ours any more. */
static void on_update(drv_req_t *rq, const struct http_response *resp)
{
	struct op *o = rq->state;
	struct drv_answer a;

	if (drv_answer_common(resp, &a))
		describe(resp, o->label, a.detail, sizeof(a.detail));
	else if (resp->status == 200 || resp->status == 204) {
		a.verdict = DRV_OK;
		a.ttl_s = o->ttl_s;
	} else {
		a.verdict = resp->status == 404 ? DRV_LOST : DRV_REFUSED;
		describe(resp, o->label, a.detail, sizeof(a.detail));
	}
	drv_req_answer(rq, &a);
}

/* ---------------------------------------------------------------- renew */

static int renew_extend(drv_req_t *rq)
{
	struct op *o = rq->state;
	_cleanup_json_ cJSON *j = result_new(C(o->d), o->run, "IN_PROGRESS");
	usec_t now = ev_now(o->d->ev);
	int q;

	/* extendLease short-circuits the update: only updateTime moves
	 * (WorkflowExecutorOps.extendLease) */
	if (!j || !cJSON_AddTrueToObject(j, "extendLease"))
		return -ENOMEM;
	free(o->url);
	o->url = NULL;
	if ((q = op_post_result(o, j)) < 0)
		return q;
	o->handler = on_update;
	o->label = "extend_lease";
	o->reauthed = false;
	o->fresh = false;
	o->timeout = o->deadline > now + RENEW_STEP_MIN ? o->deadline - now : RENEW_STEP_MIN;
	return op_send(rq);
}

/* What GET /api/tasks/{id} says of our hold on it: NULL when it is still
 * ours, else why not (into buf). */
const char *drv_conductor_task_not_ours(const struct conductor *n, const char *task_id,
                                        const char *body, size_t len, unsigned *ttl_s,
                                        char *buf, size_t buflen)
{
	_cleanup_json_ cJSON *j = cJSON_ParseWithLength(body, len);
	const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "status");
	const cJSON *w = cJSON_GetObjectItemCaseSensitive(j, "workerId");
	const cJSON *r = cJSON_GetObjectItemCaseSensitive(j, "reasonForIncompletion");
	const cJSON *rts = cJSON_GetObjectItemCaseSensitive(j, "responseTimeoutSeconds");
	_cleanup_free_ char *st = cJSON_IsString(s) ? text_dup(s->valuestring, 40) : NULL;
	_cleanup_free_ char *why = cJSON_IsString(r) ? text_dup(r->valuestring, 90) : NULL;
	_cleanup_free_ char *who = cJSON_IsString(w) ? text_dup(w->valuestring, 40) : NULL;

	if (!cJSON_IsObject(j))
		return NULL; /* unreadable: the extension's answer decides */
	/* below 1 s it would be a ttl of 0: a lease over as it is renewed */
	if (cJSON_IsNumber(rts) && rts->valuedouble >= 1)
		*ttl_s = (unsigned)MIN(rts->valuedouble, TTL_MAX_S);
	if (cJSON_IsString(s) && !streq(s->valuestring, "IN_PROGRESS")) {
		snprintf(buf, buflen, "task %s is %s on the server%s%s", task_id, st ? st : "?",
		         why ? ": " : "", why ? why : "");
		return buf;
	}
	/* the whole id: who is cut for the log, and a worker id may be 128 bytes
	 * (V1_WORKER_ID_MAX) */
	if (cJSON_IsString(w) && !streq(w->valuestring, n->worker_id)) {
		snprintf(buf, buflen, "task %s is IN_PROGRESS for worker %s, not for us", task_id,
		         who ? who : "?");
		return buf;
	}
	return NULL;
}

static void on_task_read(drv_req_t *rq, const struct http_response *resp)
{
	struct op *o = rq->state;
	struct drv_answer a;
	int q;

	if (resp->error == -EMSGSIZE)
		; /* a task too large to read: extend anyway, the next read may tell */
	else if (drv_answer_common(resp, &a)) {
		describe(resp, "GET task", a.detail, sizeof(a.detail));
		return drv_req_answer(rq, &a);
	} else if (resp->status == 404) {
		a.verdict = DRV_LOST;
		snprintf(a.detail, sizeof(a.detail), "task %s is not on the server any more",
		         o->run->task_id);
		return drv_req_answer(rq, &a);
	} else if (resp->status == 200 &&
	           drv_conductor_task_not_ours(C(o->d), o->run->task_id, resp->body,
	                                       resp->body_len, &o->ttl_s, a.detail,
	                                       sizeof(a.detail))) {
		a.verdict = DRV_LOST;
		return drv_req_answer(rq, &a);
	} else if (resp->status != 200) {
		a.verdict = DRV_REFUSED;
		describe(resp, "GET task", a.detail, sizeof(a.detail));
		return drv_req_answer(rq, &a);
	}
	if ((q = renew_extend(rq)) < 0) {
		a = (struct drv_answer){.verdict = DRV_RETRY, .error = q};
		snprintf(a.detail, sizeof(a.detail), "cannot send: %s", strerror(-q));
		drv_req_answer(rq, &a);
	}
}

static int conductor_renew(drv_t *d, drv_run_t *run, unsigned ttl_s, usec_t timeout, bool fresh,
                           drv_cb cb, void *ud, drv_req_t **ret)
{
	struct op *o;
	drv_req_t *rq = op_new(d, on_task_read, cb, ud, &o);
	int q;

	(void)ttl_s; /* the task definition's responseTimeoutSeconds is the lease */
	if (!rq)
		return -ENOMEM;
	o->method = "GET";
	o->label = "task";
	o->headers = get_headers;
	o->run = run;
	o->ttl_s = C(d)->fallback_ttl_s;
	o->max_response = C(d)->max_task;
	o->fresh = fresh;
	timeout = timeout ? timeout : d->timeout;
	o->deadline = ev_now(d->ev) + timeout;
	o->timeout = MAX(timeout / 2, RENEW_STEP_MIN);
	if ((q = op_url(o, "/api/tasks/%s", run->task_id)) < 0) {
		drv_req_free(rq);
		return q;
	}
	return op_start(rq, ret);
}

/* ---------------------------------------------------------------- log */

/* The next entry of the run's held log: up to its last newline within
 * LOG_REQ_MAX, a whole LOG_REQ_MAX of a line longer than that, or 0 when
 * only a partial line is held. */
static size_t log_chunk(const drv_run_t *run, bool all)
{
	size_t n = MIN(run->log.len, (size_t)LOG_REQ_MAX);
	const char *nl;

	if (n == 0)
		return 0;
	for (nl = run->log.data + n; nl > run->log.data && nl[-1] != '\n'; nl--)
		;
	if (nl > run->log.data)
		return (size_t)(nl - run->log.data);
	if (run->log.len >= LOG_REQ_MAX || all)
		return n;
	return 0;
}

static int log_send_next(drv_req_t *rq);

static void on_log(drv_req_t *rq, const struct http_response *resp)
{
	struct op *o = rq->state;
	drv_run_t *run = o->run;
	struct drv_answer a;
	int q;

	if (drv_answer_common(resp, &a))
		describe(resp, "log", a.detail, sizeof(a.detail));
	else if (resp->status == 200 || resp->status == 204) {
		buf_consume(&run->log, o->chunk);
		run->log_off += o->chunk;
		if ((q = log_send_next(rq)) > 0)
			return; /* the next entry is on its way */
		a.verdict = q < 0 ? DRV_RETRY : DRV_OK;
		a.error = q < 0 ? q : 0;
		a.length = run->log_next;
	} else {
		a.verdict = resp->status == 413 ? DRV_TOO_LARGE : DRV_REFUSED;
		describe(resp, "log", a.detail, sizeof(a.detail));
	}
	drv_req_answer(rq, &a);
}

/* 1 when a request went out, 0 when nothing whole is left to send. */
static int log_send_next(drv_req_t *rq)
{
	struct op *o = rq->state;
	drv_run_t *run = o->run;
	struct buf b = BUF_INIT(0);
	size_t n = log_chunk(run, false), len;
	int q;

	if (n == 0)
		return 0;
	o->chunk = n;
	len = n - (run->log.data[n - 1] == '\n'); /* an entry is lines, not their end */
	if (len == 0)
		len = n; /* an empty line: the server refuses an empty body */
	if ((q = text_clean(run->log.data, len, 0, &b)) < 0) {
		buf_done(&b);
		return q;
	}
	free(o->body);
	o->body_len = b.len;
	o->body = b.data ? buf_steal(&b) : NULL;
	buf_done(&b);
	o->reauthed = false;
	q = op_send(rq);
	return q < 0 ? q : 1;
}

/* Take [offset, offset+len) into the held log: a resent part is known already,
 * a gap (the worker dropped some) is noted in the log itself. */
static int log_take(drv_run_t *run, uint64_t offset, const char *data, size_t len)
{
	int q = 0;

	if (offset + len <= run->log_next)
		return 0;
	if (offset < run->log_next) {
		data += run->log_next - offset;
		len -= (size_t)(run->log_next - offset);
		offset = run->log_next;
	}
	if (offset > run->log_next) {
		char note[96];

		snprintf(note, sizeof(note), "%s[lessee: %" PRIu64 " bytes of log not shipped]\n",
		         run->log.len && run->log.data[run->log.len - 1] != '\n' ? "\n" : "",
		         offset - run->log_next);
		q = buf_appends(&run->log, note);
	}
	if (q >= 0 && run->log.len + len > LOG_HELD_MAX) {
		/* the server has not taken any for long: keep the newest */
		size_t drop = MIN(run->log.len, run->log.len + len - LOG_HELD_MAX);

		buf_consume(&run->log, drop);
		run->log_dropped += drop;
	}
	if (q >= 0)
		q = buf_append(&run->log, data, len);
	if (q >= 0)
		run->log_next = offset + len;
	return q;
}

static int conductor_log_append(drv_t *d, drv_run_t *run, uint64_t offset, const void *data,
                                size_t len, usec_t timeout, drv_cb cb, void *ud, drv_req_t **ret)
{
	struct op *o;
	drv_req_t *rq = op_new(d, on_log, cb, ud, &o);
	int q;

	if (!rq)
		return -ENOMEM;
	o->method = "POST";
	o->label = "log";
	o->headers = text_headers;
	o->run = run;
	o->timeout = timeout;
	o->max_response = SMALL_ANSWER;
	q = log_take(run, offset, data, len);
	if (q >= 0)
		q = op_url(o, "/api/tasks/%s/log", run->task_id);
	if (q >= 0 && (q = log_send_next(rq)) == 0) /* only a partial line so far: held */
		return drv_req_defer(
		    rq, &(struct drv_answer){.verdict = DRV_OK, .length = run->log_next}, ret);
	return drv_req_start(rq, q, ret);
}

/* ---------------------------------------------------------------- complete */

static const char *result_status(const struct drv_outcome *o)
{
	if (o->status == DRV_SUCCEEDED)
		return "COMPLETED";
	/* CANCELED is the server's word for a task its workflow's end stopped; a
	 * run the worker stopped by itself is FAILED, so Conductor's retry policy
	 * decides (an update of a task the server already ended is ignored:
	 * WorkflowExecutorOps.updateTask) */
	return o->terminal ? "FAILED_WITH_TERMINAL_ERROR" : "FAILED";
}

/* The worker's own words when it has them ("exited with status 3", "timed
 * out after 1000 ms"), else what the outcome says; "(terminal)" when the
 * exit code is one of terminal_exit_codes. */
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
	if (q >= 0 && o->terminal)
		q = buf_appends(b, " (terminal)");
	return q < 0 ? q : buf_append(b, "", 0);
}

/* The result file as outputData: an object as it is, anything else under
 * "result" (outputData is a map on the server). */
static cJSON *output_data(const struct drv_outcome *o)
{
	cJSON *out = o->output ? cJSON_Parse(o->output) : NULL, *wrap;

	if (cJSON_IsObject(out))
		return out;
	if (!(wrap = cJSON_CreateObject()))
		goto fail;
	if (out && !cJSON_AddItemToObject(wrap, "result", out))
		goto fail;
	if (!out && o->output && !cJSON_AddStringToObject(wrap, "result", o->output))
		goto fail;
	return wrap;
fail:
	cJSON_Delete(out);
	cJSON_Delete(wrap);
	return NULL;
}

static int failure_data(cJSON *out, const struct drv_outcome *o)
{
	if (!cJSON_AddStringToObject(out, "lesseeReason", drv_reason_name(o->reason)))
		return -ENOMEM;
	if (o->has_exit_code && !cJSON_AddNumberToObject(out, "exitCode", o->exit_code))
		return -ENOMEM;
	if (o->signal && !cJSON_AddStringToObject(out, "signal", o->signal))
		return -ENOMEM;
	return cJSON_AddNumberToObject(out, "durationMs", (double)o->duration_ms) ? 0 : -ENOMEM;
}

/* The log still held (a partial last line, or entries the server did not take)
 * rides in the result: one entry, its newest LOG_REQ_MAX. */
static int result_logs(cJSON *j, const drv_run_t *run)
{
	struct buf b = BUF_INIT(0);
	size_t n = run->log.len, from = n > LOG_REQ_MAX ? n - LOG_REQ_MAX : 0;
	cJSON *logs, *e;
	int q;

	if (n == 0)
		return 0;
	n -= run->log.data[n - 1] == '\n';
	if (n <= from)
		return 0;
	q = text_clean(run->log.data + from, n - from, 0, &b);
	if (q >= 0)
		q = buf_append(&b, "", 0);
	if (q < 0 || !(logs = cJSON_AddArrayToObject(j, "logs")) || !(e = cJSON_CreateObject()) ||
	    !cJSON_AddItemToArray(logs, e) || !cJSON_AddStringToObject(e, "log", b.data) ||
	    !cJSON_AddStringToObject(e, "taskId", run->task_id) ||
	    !cJSON_AddNumberToObject(e, "createdTime", now_ms()))
		q = -ENOMEM;
	buf_done(&b);
	return q;
}

static int conductor_complete_body(drv_t *d, drv_run_t *run, const struct drv_outcome *o,
                                   char **ret)
{
	_cleanup_json_ cJSON *j = result_new(C(d), run, result_status(o));
	cJSON *out = output_data(o);
	struct buf reason = BUF_INIT(0);
	_cleanup_free_ char *capped = NULL;
	int q = j && out ? 0 : -ENOMEM;

	if (q >= 0 && !cJSON_AddItemToObject(j, "outputData", out))
		q = -ENOMEM;
	else if (q >= 0)
		out = NULL;
	if (q >= 0 && o->status != DRV_SUCCEEDED) {
		q = reason_text(o, &reason);
		if (q >= 0 && !(capped = text_dup(reason.data, REASON_MAX)))
			q = -ENOMEM;
		if (q >= 0 && !cJSON_AddStringToObject(j, "reasonForIncompletion", capped))
			q = -ENOMEM;
		if (q >= 0)
			q = failure_data(cJSON_GetObjectItemCaseSensitive(j, "outputData"), o);
	}
	if (q >= 0)
		q = result_logs(j, run);
	cJSON_Delete(out);
	buf_done(&reason);
	if (q >= 0 && !(*ret = cJSON_PrintUnformatted(j)))
		q = -ENOMEM;
	return q;
}

static int conductor_complete(drv_t *d, drv_run_t *run, const char *body, drv_cb cb, void *ud,
                              drv_req_t **ret)
{
	struct op *o;
	drv_req_t *rq = op_new(d, on_update, cb, ud, &o);
	int q;

	if (!rq)
		return -ENOMEM;
	o->method = "POST";
	o->label = "update";
	o->headers = json_headers;
	o->run = run;
	o->max_response = SMALL_ANSWER;
	o->body_len = strlen(body);
	if (!(o->body = strdup(body)) || (q = op_url(o, "/api/tasks")) < 0) {
		drv_req_free(rq);
		return -ENOMEM;
	}
	return op_start(rq, ret);
}

/* IN_PROGRESS without extendLease: the task becomes SCHEDULED and is due in
 * its queue again after callbackAfterSeconds, for any worker
 * (WorkflowExecutorOps.updateTask, queueDAO.postpone); the same task id.
 * Never due sooner than RELEASE_DELAY_MIN_S: a release comes at a drain or a
 * stop, when the worker has just dropped a long poll of its own, which the
 * server still holds for up to 5 s and would hand the task to, for nobody. */
static int conductor_release(drv_t *d, drv_run_t *run, enum drv_release_reason why,
                             unsigned delay_s, drv_cb cb, void *ud, drv_req_t **ret)
{
	_cleanup_json_ cJSON *j = result_new(C(d), run, "IN_PROGRESS");
	struct op *o;
	drv_req_t *rq;
	char reason[96];
	int q;

	snprintf(reason, sizeof(reason), "released by lessee (%s)", drv_release_reason_name(why));
	if (!j ||
	    !cJSON_AddNumberToObject(j, "callbackAfterSeconds",
	                             MAX(delay_s, RELEASE_DELAY_MIN_S)) ||
	    !cJSON_AddStringToObject(j, "reasonForIncompletion", reason))
		return -ENOMEM;
	if (!(rq = op_new(d, on_update, cb, ud, &o)))
		return -ENOMEM;
	o->label = "release";
	o->run = run;
	if ((q = op_post_result(o, j)) < 0) {
		drv_req_free(rq);
		return q;
	}
	return op_start(rq, ret);
}

/* A spooled TaskResult names its task and workflow: enough to deliver it.
 * The task id fences it: a retry is a new task, and the server ignores an
 * update of a task it has ended. */
int drv_conductor_restore(const char *run_id, const char *body, drv_run_t **ret)
{
	_cleanup_json_ cJSON *j = cJSON_Parse(body);
	const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "taskId");
	const cJSON *w = cJSON_GetObjectItemCaseSensitive(j, "workflowInstanceId");
	drv_run_t *run;

	if (!cJSON_IsString(t) || !cJSON_IsString(w) || !streq(t->valuestring, run_id) ||
	    !valid_id(run_id) || !valid_id(w->valuestring))
		return -EBADMSG;
	if (!(run = run_new(run_id, w->valuestring, NULL)))
		return -ENOMEM;
	*ret = run;
	return 0;
}

static int conductor_restore(drv_t *d, const char *run_id, const char *body, drv_run_t **ret)
{
	(void)d;
	return drv_conductor_restore(run_id, body, ret);
}

const struct drv_ops drv_conductor_ops = {
    .name = "conductor",
    .caps = DRV_CAP_SERVER_TTL | DRV_CAP_RELEASE,
    .init = conductor_init,
    .done = conductor_done,
    .reload = conductor_reload,
    .claim = conductor_claim,
    .renew = conductor_renew,
    .log_append = conductor_log_append,
    .complete_body = conductor_complete_body,
    .complete = conductor_complete,
    .release = conductor_release,
    .restore = conductor_restore,
    .run_free = conductor_run_free,
    .run_lease_key = conductor_run_lease_key,
};
