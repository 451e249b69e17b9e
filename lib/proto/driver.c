/* The driver layer's core: which driver a configuration names, the instance
 * every driver shares (HTTP client, credentials, accounting, readiness) and
 * the plumbing of one operation in flight.  The drivers themselves are
 * drv_<name>.c. */
#include "proto/driver.h"

#include <cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/conf.h"
#include "log/log.h"
#include "proto/driver-int.h"
#include "util/buf.h"
#include "util/macro.h"
#include "util/random.h"
#include "util/strutil.h"

/* An error body we read for its message: larger ones are not an error's. */
#define SMALL_ANSWER_MAX (4 * 4096)

DEFINE_FREE_FUNC(cJSON, cJSON_Delete)

/* Every driver this build has (conf_protocols names the same). */
static const struct drv_ops *const drivers[] = {
    &drv_native_ops,
    &drv_conductor_ops,
    &drv_camunda7_ops,
};

const struct drv_ops *drv_find(const char *name)
{
	if (!name)
		return &drv_native_ops;
	for (size_t i = 0; i < ELEMENTSOF(drivers); i++)
		if (streq(drivers[i]->name, name))
			return drivers[i];
	return NULL;
}

/* ---------------------------------------------------------------- accounting */

/* What an answer says of our credentials: logged once per change of state. */
static void drv_credentials_seen(drv_t *d, bool denied, long status)
{
	if (denied != d->auth_denied)
		log_emit(denied ? LOG_ERR : LOG_NOTICE, NULL,
		         denied
		             ? "API refuses our credentials (HTTP %ld): not ready, retrying slowly"
		             : "API accepts our credentials again (HTTP %ld): ready",
		         status);
	d->auth_denied = denied;
	if (!denied)
		d->last_ok = ev_now(d->ev);
}

/* Every answer of the API, whichever driver asked: counted by endpoint and
 * code, timed, and read for what it says about our credentials. */
static void drv_observe(const char *label, const struct http_response *resp, void *ctx)
{
	drv_t *d = ctx;
	char code[16];
	bool denied = resp->status == 401 || resp->status == 403;

	if (resp->status)
		snprintf(code, sizeof(code), "%ld", resp->status);
	else
		snprintf(code, sizeof(code), "error");
	metric_add(d->m_requests, 1, label, code);
	metric_observe(d->m_duration, (double)resp->elapsed / USEC_PER_SEC, label);
	if (resp->status == 0 || resp->status >= 500)
		return; /* says nothing about our credentials */
	if (denied && d->auth_renewable) {
		d->denied_status = resp->status;
		return; /* the driver renews them first: the operation's verdict decides */
	}
	drv_credentials_seen(d, denied, resp->status);
}

static int drv_common_init(drv_t *d, ev_t *e, const struct conf *c, metrics_t *m)
{
	static const double buckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
	                                 1,     2.5,  5,     10,   30,  60};
	struct http_opts o = {.ca_file = c->api.ca_file,
	                      .client_cert = c->api.client_cert,
	                      .client_key = c->api.client_key,
	                      .basic_user = c->api.user,
	                      .basic_password = c->api.password,
	                      .max_host_connections = DRV_MAX_CONNECTIONS,
	                      .observer = drv_observe,
	                      .observer_ctx = d};

	d->ev = e;
	d->timeout = c->api.request_timeout;
	d->base = strdup(c->api.url);
	if (!d->base)
		return -ENOMEM;
	if (c->api.token && asprintf(&d->auth, "Authorization: Bearer %s", c->api.token) < 0) {
		d->auth = NULL;
		return -ENOMEM;
	}
	d->m_requests = metrics_counter(
	    m, "lessee_api_requests_total",
	    "Requests to the orchestration API by endpoint and HTTP code", "endpoint,code");
	d->m_duration = metrics_histogram(m, "lessee_api_request_duration_seconds",
	                                  "Duration of requests to the orchestration API",
	                                  "endpoint", buckets, ELEMENTSOF(buckets));
	if (!d->m_requests || !d->m_duration)
		return -ENOMEM;
	return http_new(e, &o, &d->http);
}

int drv_new_ops(ev_t *e, const struct conf *c, metrics_t *m, const struct drv_ops *ops, drv_t **ret)
{
	drv_t *d = calloc(1, sizeof(*d));
	int q;

	if (!d)
		return -ENOMEM;
	d->ops = ops;
	q = drv_common_init(d, e, c, m);
	if (q >= 0 && ops->init)
		q = ops->init(d, c);
	if (q < 0) {
		drv_free(d);
		return q;
	}
	*ret = d;
	return 0;
}

int drv_reload(drv_t *d, const struct conf *c)
{
	return d->ops->reload ? d->ops->reload(d, c) : 0;
}

int drv_new(ev_t *e, const struct conf *c, metrics_t *m, drv_t **ret)
{
	const struct drv_ops *ops = drv_find(c->api.protocol);

	if (!ops)
		return -EPROTONOSUPPORT;
	return drv_new_ops(e, c, m, ops, ret);
}

drv_t *drv_free(drv_t *d)
{
	if (!d)
		return NULL;
	/* the driver cancels its own requests (a token refresh) with drv_cancel
	 * while the client is there; the worker's are gone by now */
	if (d->ops->done)
		d->ops->done(d);
	d->http = http_free(d->http);
	free(d->base);
	if (d->auth)
		explicit_bzero(d->auth, strlen(d->auth));
	free(d->auth);
	free(d);
	return NULL;
}

const struct drv_ops *drv_ops(const drv_t *d)
{
	return d->ops;
}

bool drv_has(const drv_t *d, unsigned cap)
{
	return (d->ops->caps & cap) == cap;
}

bool drv_ready(const drv_t *d, usec_t now)
{
	/* "recently": a long poll plus a request timeout, twice over */
	return !d->auth_denied && d->last_ok &&
	       now - d->last_ok < 2 * d->timeout + 120 * USEC_PER_SEC;
}

bool drv_denied(const drv_t *d)
{
	return d->auth_denied;
}

usec_t drv_last_ok(const drv_t *d)
{
	return d->last_ok;
}

/* ---------------------------------------------------------------- requests */

drv_req_t *drv_req_new(drv_t *d, void (*on_http)(drv_req_t *, const struct http_response *),
                       drv_cb cb, void *ud)
{
	drv_req_t *rq = calloc(1, sizeof(*rq));

	if (!rq)
		return NULL;
	*rq = (drv_req_t){.d = d, .on_http = on_http, .cb = cb, .ud = ud};
	return rq;
}

drv_req_t *drv_req_new_state(drv_t *d, void (*on_http)(drv_req_t *, const struct http_response *),
                             drv_cb cb, void *ud, size_t size, void (*state_free)(void *))
{
	drv_req_t *rq = drv_req_new(d, on_http, cb, ud);

	if (!rq || !(rq->state = calloc(1, size))) {
		free(rq);
		return NULL;
	}
	rq->state_free = state_free;
	return rq;
}

static void drv_req_deferred(void *userdata);

void drv_req_free(drv_req_t *rq)
{
	if (!rq)
		return;
	if (rq->deferred)
		ev_defer_cancel(rq->d->ev, drv_req_deferred, rq);
	http_cancel(rq->http);
	if (rq->state_free)
		rq->state_free(rq->state);
	free(rq);
}

static void drv_on_http(http_req_t *req, const struct http_response *resp, void *userdata)
{
	drv_req_t *rq = userdata;

	rq->http = NULL;
	rq->on_http(rq, resp);
}

int drv_http_send(drv_req_t *rq, const struct http_request *hr)
{
	rq->label = hr->label;
	const char *headers[16];
	struct http_request copy = *hr;
	size_t n = 0;

	for (size_t i = 0; hr->headers && hr->headers[i] && n < ELEMENTSOF(headers) - 2; i++)
		headers[n++] = hr->headers[i];
	if (rq->d->auth)
		headers[n++] = rq->d->auth;
	headers[n] = NULL;
	copy.headers = headers;
	if (!copy.timeout)
		copy.timeout = rq->d->timeout;
	return http_send(rq->d->http, &copy, drv_on_http, rq, &rq->http);
}

int drv_req_start(drv_req_t *rq, int q, drv_req_t **ret)
{
	if (q < 0) {
		drv_req_free(rq);
		return q;
	}
	rq->ret = ret;
	if (ret)
		*ret = rq;
	return 0;
}

/* The operation is over: the caller's handle goes first, so that the
 * callback may start the next one. */
static void drv_req_end(drv_req_t *rq)
{
	if (rq->ret)
		*rq->ret = NULL;
}

/* A driver that renews its credentials itself gave up: now they are refused. */
static void drv_req_verdict(drv_req_t *rq, const struct drv_answer *a)
{
	if (a->verdict == DRV_DENIED && rq->d->auth_renewable)
		drv_credentials_seen(rq->d, true,
		                     rq->d->denied_status ? rq->d->denied_status : 401);
}

void drv_req_answer(drv_req_t *rq, const struct drv_answer *a)
{
	drv_req_verdict(rq, a);
	drv_req_end(rq);
	rq->cb(a, rq->ud);
	drv_req_free(rq);
}

static void drv_req_deferred(void *userdata)
{
	drv_req_t *rq = userdata;

	rq->deferred = false;
	drv_req_answer(rq, &rq->deferred_answer);
}

int drv_req_defer(drv_req_t *rq, const struct drv_answer *a, drv_req_t **ret)
{
	int q = ev_defer(rq->d->ev, drv_req_deferred, rq);

	rq->deferred_answer = *a;
	rq->deferred = q >= 0;
	return drv_req_start(rq, q, ret);
}

/* What the worker did not take of a claim's answer. */
static void claim_answer_leftovers(drv_t *d, struct drv_claim_answer *a)
{
	for (size_t i = 0; i < a->n_runs; i++)
		if (a->runs[i].priv) {
			d->ops->run_free(a->runs[i].priv);
			a->runs[i].priv = NULL;
		}
	drv_claim_answer_done(a);
}

void drv_req_claim_answer(drv_req_t *rq, struct drv_claim_answer *a)
{
	drv_req_verdict(rq, &a->a);
	drv_req_end(rq);
	rq->claim_cb(a, rq->ud);
	claim_answer_leftovers(rq->d, a);
	drv_req_free(rq);
}

/* The completion first: its run leaves the reporting queue before the runs
 * the claim brought are started (one of them may be a new lease of the same
 * run, which supersedes an older one still reporting). */
void drv_req_complete_claim_answer(drv_req_t *rq, const struct drv_answer *a, drv_claim_cb ncb,
                                   void *nud, struct drv_claim_answer *ca)
{
	drv_req_verdict(rq, a);
	drv_req_end(rq);
	rq->cb(a, rq->ud);
	ncb(ca, nud);
	claim_answer_leftovers(rq->d, ca);
	drv_req_free(rq);
}

/* A request given up before its answer is counted too, as code "aborted":
 * each costs the API a connection (ours is closed with it). */
void drv_cancel(drv_req_t *req)
{
	if (req && req->http)
		metric_add(req->d->m_requests, 1, req->label ? req->label : "", "aborted");
	drv_req_free(req);
}

/* ---------------------------------------------------------------- answers */

const char *drv_describe(const struct http_response *resp, char *buf, size_t len)
{
	if (resp->error)
		snprintf(buf, len, "%s",
		         resp->error_message ? resp->error_message : "transport error");
	else
		snprintf(buf, len, "HTTP %ld", resp->status);
	return buf;
}

void drv_describe_message(const struct http_response *resp, const char *what, size_t msg_max,
                          char *buf, size_t len)
{
	_cleanup_(cJSON_Deletep) cJSON *j = resp->body_len && resp->body_len < SMALL_ANSWER_MAX
	                                        ? cJSON_ParseWithLength(resp->body, resp->body_len)
	                                        : NULL;
	const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "message");
	_cleanup_free_ char *msg = cJSON_IsString(m) ? drv_text_dup(m->valuestring, msg_max) : NULL;
	char base[96];

	drv_describe(resp, base, sizeof(base));
	if (msg)
		snprintf(buf, len, "%s: %s: %s", what, base, msg);
	else if (resp->body_len && !resp->error)
		snprintf(buf, len, "%s: %s: %.*s", what, base, (int)MIN(resp->body_len, 80),
		         resp->body);
	else
		snprintf(buf, len, "%s: %s", what, base);
}

bool drv_answer_common(const struct http_response *resp, struct drv_answer *a)
{
	*a = (struct drv_answer){
	    .retry_after = resp->retry_after,
	    .error = resp->error,
	    .elapsed = resp->elapsed,
	};
	drv_describe(resp, a->detail, sizeof(a->detail));
	if (http_should_retry(resp) || resp->status == 408) {
		a->verdict = DRV_RETRY;
		return true;
	}
	if (resp->status == 401 || resp->status == 403) {
		a->verdict = DRV_DENIED;
		return true;
	}
	return false;
}

usec_t drv_retry_delay(const struct drv_answer *a, unsigned attempt, usec_t base, usec_t cap)
{
	return backoff_full_jitter(base, cap, attempt, a ? a->retry_after : 0);
}

/* ---------------------------------------------------------------- text */

/* n bytes of s as valid UTF-8 (a NUL or a byte that is not UTF-8 becomes
 * U+FFFD), at most max_units UTF-16 code units (Java's chars; 0 = no cap). */
int drv_text_clean(const char *s, size_t n, size_t max_units, struct buf *out)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t units = 0;
	int q = 0;

	for (size_t i = 0; i < n && q >= 0;) {
		size_t l = u[i] ? utf8_seq_len(u + i, n - i) : 0;
		size_t w = l == 4 ? 2 : 1;

		if (max_units && units + w > max_units)
			break;
		units += w;
		q = l ? buf_append(out, u + i, l) : buf_append(out, "\xef\xbf\xbd", 3);
		i += l ? l : 1;
	}
	return q;
}

char *drv_text_dup(const char *s, size_t max_units)
{
	struct buf b = BUF_INIT(0);

	if (drv_text_clean(s, strlen(s), max_units, &b) < 0 || buf_append(&b, "", 0) < 0) {
		buf_done(&b);
		return NULL;
	}
	return b.data ? buf_steal(&b) : strdup("");
}

/* ---------------------------------------------------------------- grants */

void drv_grant_done(struct drv_grant *g)
{
	free(g->id);
	free(g->workflow);
	free(g->input);
	strv_free(g->env);
	free(g->invalid);
	if (g->lease_key)
		explicit_bzero(g->lease_key, strlen(g->lease_key));
	free(g->lease_key);
	*g = (struct drv_grant){0};
}

void drv_claim_answer_done(struct drv_claim_answer *a)
{
	for (size_t i = 0; i < a->n_runs; i++)
		drv_grant_done(&a->runs[i]);
	free(a->runs);
	strv_free(a->cancels);
	a->runs = NULL;
	a->n_runs = 0;
	a->cancels = NULL;
}

/* ---------------------------------------------------------------- names */

static const char *const status_names[] = {
    [DRV_SUCCEEDED] = "succeeded", [DRV_FAILED] = "failed", [DRV_CANCELLED] = "cancelled"};
static const char *const reason_names[] = {
    [DRV_REASON_EXIT] = "exit",           [DRV_REASON_TIMEOUT] = "timeout",
    [DRV_REASON_CRASH] = "crash",         [DRV_REASON_SPAWN_ERROR] = "spawn_error",
    [DRV_REASON_CANCELLED] = "cancelled", [DRV_REASON_REJECTED] = "rejected",
};
static const char *const release_names[] = {
    [DRV_RELEASE_DRAINING] = "draining",
    [DRV_RELEASE_SHUTDOWN] = "shutdown",
    [DRV_RELEASE_BLOCKED_WORKFLOW] = "blocked_workflow",
    [DRV_RELEASE_UNSUPPORTED_WORKFLOW] = "unsupported_workflow",
    [DRV_RELEASE_NO_SLOT] = "no_slot",
};

const char *drv_status_name(enum drv_status s)
{
	return status_names[s];
}

const char *drv_reason_name(enum drv_reason r)
{
	return reason_names[r];
}

const char *drv_release_reason_name(enum drv_release_reason r)
{
	return release_names[r];
}
