/* Routing, authentication, body checks, fault injection and replies. */
#include "lessor/api-int.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "log/log.h"
#include "util/strutil.h"
#include "util/time.h"

static const struct lessor_route routes[] = {
    {"POST", "/v1/claims", lessor_h_claim, LESSOR_EP_CLAIMS, true},
    {"POST", "/v1/claims/*/cancel", lessor_h_claim_cancel, LESSOR_EP_NONE, false},
    {"POST", "/v1/runs/*/lease", lessor_h_renew, LESSOR_EP_LEASE, true},
    {"POST", "/v1/leases/renew", lessor_h_renew_batch, LESSOR_EP_LEASE, true},
    {"PATCH", "/v1/runs/*/log", lessor_h_log_append, LESSOR_EP_LOG, false},
    {"GET", "/v1/runs/*/log", lessor_h_log_read, LESSOR_EP_NONE, false},
    {"POST", "/v1/runs/*/complete", lessor_h_complete, LESSOR_EP_COMPLETE, true},
    {"POST", "/v1/completions", lessor_h_complete_batch, LESSOR_EP_COMPLETE, true},
    {"POST", "/v1/runs/*/release", lessor_h_release, LESSOR_EP_RELEASE, true},
    {"POST", "/v1/runs/*/cancel", lessor_h_cancel, LESSOR_EP_NONE, false},
    {"POST", "/v1/runs/*/requeue", lessor_h_requeue, LESSOR_EP_NONE, false},
    {"POST", "/v1/runs", lessor_h_enqueue, LESSOR_EP_NONE, true},
    {"GET", "/v1/runs", lessor_h_list, LESSOR_EP_NONE, false},
    {"GET", "/v1/runs/*", lessor_h_show, LESSOR_EP_NONE, false},
    {"GET", "/v1/stats", lessor_h_stats, LESSOR_EP_NONE, false},
    {"GET", "/v1/workers", lessor_h_workers, LESSOR_EP_NONE, false},
    {"POST", "/v1/admin/faults", lessor_h_faults_set, LESSOR_EP_NONE, true},
    {"DELETE", "/v1/admin/faults", lessor_h_faults_clear, LESSOR_EP_NONE, false},
    {"GET", "/v1/admin/faults", lessor_h_faults_get, LESSOR_EP_NONE, false},
    {"GET", "/healthz", lessor_h_health, LESSOR_EP_NONE, false},
    {"GET", "/ui", lessor_h_ui, LESSOR_EP_NONE, false},
    {"GET", "/ui/", lessor_h_ui, LESSOR_EP_NONE, false},
    {"GET", "/ui/*", lessor_h_ui, LESSOR_EP_NONE, false},
};

int lessor_api_new(const struct lessor_api_config *cfg, lessor_api **ret)
{
	lessor_api *a = calloc(1, sizeof(*a));

	if (!a)
		return -ENOMEM;
	*a = (lessor_api){.store = cfg->store,
	                  .waiters = cfg->waiters,
	                  .tokens = cfg->tokens,
	                  .max_body = cfg->max_body};
	pthread_mutex_init(&a->tokens_lock, NULL);
	if (cfg->enable_faults && !(a->faults = lessor_faults_new())) {
		a->tokens = NULL; /* still the caller's */
		lessor_api_free(a);
		return -ENOMEM;
	}
	*ret = a;
	return 0;
}

lessor_api *lessor_api_free(lessor_api *a)
{
	if (!a)
		return NULL;
	lessor_tokens_free(a->tokens);
	pthread_mutex_destroy(&a->tokens_lock);
	lessor_faults_free(a->faults);
	free(a);
	return NULL;
}

size_t lessor_api_max_body(const lessor_api *a)
{
	return a->max_body;
}

void lessor_api_set_tokens(lessor_api *a, lessor_tokens *t)
{
	lessor_tokens *old;

	pthread_mutex_lock(&a->tokens_lock);
	old = a->tokens;
	a->tokens = t;
	a->tokens_gen++;
	pthread_mutex_unlock(&a->tokens_lock);
	lessor_tokens_free(old);
}

int64_t lessor_now_ms(void)
{
	return (int64_t)(time_real() / USEC_PER_MSEC);
}

int lessor_call_new(lessor_api *a, const char *method, const char *path,
                    const struct lessor_call_io *io, lessor_call **ret)
{
	lessor_call *c = calloc(1, sizeof(*c));

	if (!c)
		return -ENOMEM;
	c->api = a;
	c->io = *io;
	c->method = strdup(method);
	c->path = strdup(path);
	if (!c->method || !c->path) {
		lessor_call_free(c);
		return -ENOMEM;
	}
	*ret = c;
	return 0;
}

lessor_call *lessor_call_free(lessor_call *c)
{
	if (!c)
		return NULL;
	if (c->state_free)
		c->state_free(c->state);
	cJSON_Delete(c->json);
	free(c->reply.body);
	free(c->method);
	free(c->path);
	free(c);
	return NULL;
}

struct lessor_reply *lessor_call_reply(lessor_call *c)
{
	return &c->reply;
}

const char *lessor_call_method(const lessor_call *c)
{
	return c->method;
}

const char *lessor_call_path(const lessor_call *c)
{
	return c->path;
}

/* ---- replies ---- */

int lessor_reply_json(lessor_call *c, unsigned status, cJSON *body)
{
	char *text = body ? cJSON_PrintUnformatted(body) : NULL;

	cJSON_Delete(body);
	free(c->reply.body);
	c->reply.body = NULL;
	if (!text) {
		/* out of memory: a bodiless 503 is all that is left */
		c->reply = (struct lessor_reply){.status = 503, .retry_after_s = 1};
		return LESSOR_CALL_REPLY;
	}
	c->reply.status = status;
	c->reply.content_type = "application/json";
	c->reply.body = text;
	c->reply.len = strlen(text);
	return LESSOR_CALL_REPLY;
}

static cJSON *error_body(const char *code, const char *message)
{
	cJSON *o = cJSON_CreateObject();

	if (o && (!cJSON_AddStringToObject(o, "error", code) ||
	          !cJSON_AddStringToObject(o, "message", message))) {
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

int lessor_reply_error(lessor_call *c, unsigned status, const char *code, const char *fmt, ...)
{
	char message[LESSOR_MSG_MAX + 64];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(message, sizeof(message), fmt, ap);
	va_end(ap);
	return lessor_reply_json(c, status, error_body(code, message));
}

int lessor_reply_invalid(lessor_call *c)
{
	return lessor_reply_error(c, 400, "invalid_request", "%s", c->msg);
}

unsigned lessor_store_error_answer(int r, const char **ret_code, const char **ret_message)
{
	switch (r) {
	case -ENOENT:
		*ret_code = "not_found";
		*ret_message = "no such run";
		return 404;
	case -ESTALE:
		*ret_code = "lease_lost";
		*ret_message = "the lease token is not the run's current lease";
		return 409;
	case -EEXIST:
		*ret_code = "invalid_request";
		*ret_message = "claim_id was used by another worker";
		return 400;
	case -EBUSY:
	case -ENOMEM:
	case -ENOSPC:
		*ret_code = "unavailable";
		*ret_message = "the database is busy or full";
		return 503;
	default:
		*ret_code = "internal";
		*ret_message = "the database failed";
		return 500;
	}
}

int lessor_reply_store_error(lessor_call *c, int r)
{
	const char *code, *message;
	unsigned status = lessor_store_error_answer(r, &code, &message);

	if (status == 503)
		log_warning("%s %s: %s, answering 503", c->method, c->path, strerror(-r));
	else if (status == 500)
		log_error("%s %s: %s", c->method, c->path, strerror(-r));
	lessor_reply_error(c, status, code, "%s", message);
	if (status == 503)
		c->reply.retry_after_s = 1;
	return LESSOR_CALL_REPLY;
}

int lessor_call_park(lessor_call *c, uint64_t seen_gen)
{
	c->waiter.resume = c->io.resume;
	c->waiter.userdata = c->io.userdata;
	c->waiter.fd = c->io.fd ? c->io.fd(c->io.userdata) : -1;
	c->waiter.watch_hangup = c->waiter.fd >= 0;
	return lessor_waiters_park(c->api->waiters, &c->waiter, seen_gen, c->io.suspend,
	                           c->io.userdata);
}

/* ---- routing ---- */

static bool match_pattern(const char *pattern, const char *path, char arg[LESSOR_ARG_MAX])
{
	while (*pattern) {
		if (*pattern == '*') {
			size_t n = strcspn(path, "/");

			if (n == 0 || n >= LESSOR_ARG_MAX)
				return false;
			memcpy(arg, path, n);
			arg[n] = '\0';
			path += n;
			pattern++;
		} else if (*pattern++ != *path++)
			return false;
	}
	return *path == '\0';
}

/* The Allow list of a path: the methods of every route with its pattern. */
static void allow_list(lessor_call *c, const char *pattern)
{
	size_t off = 0;

	for (size_t i = 0; i < ELEMENTSOF(routes); i++)
		if (streq(routes[i].pattern, pattern) && off < sizeof(c->allow))
			off += (size_t)snprintf(c->allow + off, sizeof(c->allow) - off, "%s%s",
			                        off ? ", " : "", routes[i].method);
}

static int route(lessor_call *c)
{
	const char *known = NULL;

	for (size_t i = 0; i < ELEMENTSOF(routes); i++) {
		if (!match_pattern(routes[i].pattern, c->path, c->arg))
			continue;
		if (streq(c->method, routes[i].method)) {
			c->route = &routes[i];
			return 0;
		}
		known = known ? known : routes[i].pattern;
	}
	if (!known)
		return lessor_reply_error(c, 404, "not_found", "no such endpoint");
	allow_list(c, known);
	lessor_reply_error(c, 405, "method_not_allowed", "%s is not allowed here", c->method);
	c->reply.allow = c->allow;
	return LESSOR_CALL_REPLY;
}

/* ---- authentication, body ---- */

/* The bearer token of the request, NULL when there is none. */
static const char *bearer(lessor_call *c)
{
	const char *h = c->io.header(c->io.userdata, "Authorization");

	if (!h || strncasecmp(h, "Bearer ", 7) != 0)
		return NULL;
	h += 7;
	while (*h == ' ')
		h++;
	return h;
}

static void authenticate(lessor_call *c)
{
	pthread_mutex_lock(&c->api->tokens_lock);
	lessor_tokens_check(c->api->tokens, bearer(c), &c->who);
	c->tokens_gen = c->api->tokens_gen;
	pthread_mutex_unlock(&c->api->tokens_lock);
}

bool lessor_call_auth_current(lessor_call *c)
{
	bool current;

	pthread_mutex_lock(&c->api->tokens_lock);
	current = c->tokens_gen == c->api->tokens_gen;
	pthread_mutex_unlock(&c->api->tokens_lock);
	return current;
}

/* The worker endpoints; every other one but the public ones is the admin API. */
static bool worker_endpoint(const struct lessor_route *r)
{
	return r->handler == lessor_h_claim || r->handler == lessor_h_claim_cancel ||
	       r->handler == lessor_h_renew || r->handler == lessor_h_renew_batch ||
	       r->handler == lessor_h_log_append || r->handler == lessor_h_complete ||
	       r->handler == lessor_h_complete_batch || r->handler == lessor_h_release;
}

/* No token: /healthz, and the dashboard's static files (they hold no data;
 * the page sends the admin token on its own API calls). */
static bool public_endpoint(const struct lessor_route *r)
{
	return r->handler == lessor_h_health || r->handler == lessor_h_ui;
}

/* 0, or LESSOR_CALL_REPLY with 401 (no valid token) or 403 (a token of the
 * other kind). */
static int authorize(lessor_call *c)
{
	bool worker;

	if (public_endpoint(c->route))
		return 0;
	authenticate(c);
	if (c->who.role == LESSOR_ROLE_NONE) {
		lessor_reply_error(c, 401, "unauthorized", "a valid bearer token is required");
		c->reply.auth_challenge = true;
		return LESSOR_CALL_REPLY;
	}
	worker = worker_endpoint(c->route);
	if (c->who.role == LESSOR_ROLE_ADMIN && worker)
		return lessor_reply_error(
		    c, 403, "forbidden", "this endpoint needs a worker token, not the admin token");
	if (c->who.role == LESSOR_ROLE_WORKER && !worker)
		return lessor_reply_error(c, 403, "forbidden",
		                          "this endpoint needs the admin token");
	return 0;
}

/* A parked call (long poll) is checked again when it runs again: a token
 * revoked meanwhile gets nothing more. */
static int reauthorize(lessor_call *c)
{
	struct lessor_principal before = c->who;

	if (public_endpoint(c->route))
		return 0;
	authenticate(c);
	if (c->who.role == before.role && streq(c->who.name, before.name))
		return 0;
	lessor_reply_error(c, 401, "unauthorized", "the bearer token was revoked");
	c->reply.auth_challenge = true;
	return LESSOR_CALL_REPLY;
}

int lessor_call_holds(lessor_call *c, const char *id, const char *lease_token)
{
	_cleanup_free_ char *holder = NULL;
	int r;

	if (c->who.role != LESSOR_ROLE_WORKER)
		return 1;
	r = lessor_store_lease_holder(c->api->store, id, lease_token, &holder);
	if (r >= 0)
		return streq(holder, c->who.name);
	return r == -ENOENT ? 0 : r;
}

int lessor_call_check_holder(lessor_call *c, const char *lease_token)
{
	int r = lessor_call_holds(c, c->arg, lease_token);

	if (r > 0)
		return 0;
	if (r < 0)
		return lessor_reply_store_error(c, r);
	return lessor_reply_error(c, 409, "lease_lost",
	                          "the lease token is not the run's current lease");
}

/* Strict JSON (RFC 8259, lib/proto's scanner) in UTF-8, then parsed: cJSON
 * takes bytes that are not UTF-8, which SQLite would keep and serve as JSON
 * no client reads, and PostgreSQL refuse with a 500 at every retry. */
static int parse_json_body(lessor_call *c)
{
	const char *p = c->body, *end = c->body + c->len;
	bool bad_utf8 = false;

	if (c->len == 0 || json_scan_value(&p, end, JSON_SCAN_DEPTH_MAX, &bad_utf8) < 0)
		return lessor_reply_error(c, 400, "invalid_request",
		                          "the body must be a JSON object");
	if (json_scan_ws(p, end) != end)
		return lessor_reply_error(c, 400, "invalid_request",
		                          "trailing bytes after the JSON body");
	if (bad_utf8)
		return lessor_reply_error(c, 400, "invalid_request",
		                          "the body's strings must be UTF-8, without lone UTF-16 "
		                          "surrogates (\\ud800-\\udfff unpaired)");
	c->json = cJSON_ParseWithLength(c->body, (size_t)(p - c->body));
	if (!cJSON_IsObject(c->json))
		return lessor_reply_error(c, 400, "invalid_request",
		                          "the body must be a JSON object");
	return 0;
}

/* The checks before any handler runs; LESSOR_CALL_REPLY when one refused. */
static int prepare(lessor_call *c, bool body_too_large)
{
	int r = route(c);

	if (r != 0)
		return r;
	r = authorize(c);
	if (r != 0)
		return r;
	if (body_too_large)
		return lessor_reply_error(c, 413, "body_too_large",
		                          "the request body exceeds %zu bytes", c->api->max_body);
	if (c->route->json_body)
		return parse_json_body(c);
	return 0;
}

/* An armed fault: delay first (parked, no thread held), then its status. */
static int inject_fault(lessor_call *c)
{
	if (!c->fault_taken) {
		/* the legacy lease and complete faults play an older server for
		 * the batch renewal and completion only: a single renewal or
		 * completion neither sees nor spends them */
		bool single =
		    c->route->handler == lessor_h_renew || c->route->handler == lessor_h_complete;
		bool (*take)(lessor_faults *, enum lessor_endpoint, struct lessor_fault *) =
		    single ? lessor_faults_take_plain : lessor_faults_take;

		if (!take(c->api->faults, c->route->endpoint, &c->fault))
			return 0;
		c->fault_taken = true;
		if (c->fault.delay_ms > 0) {
			c->waiter = (struct lessor_waiter){
			    .deadline = time_mono() + c->fault.delay_ms * USEC_PER_MSEC};
			if (lessor_call_park(c, LESSOR_GEN_ANY) == 0)
				return LESSOR_CALL_SUSPENDED;
		}
	}
	if (c->fault.status == 0)
		return 0;
	lessor_reply_error(c, c->fault.status, "injected", "fault injected by the test");
	c->reply.retry_after_s = c->fault.retry_after_s;
	return LESSOR_CALL_REPLY;
}

bool lessor_call_lose_answer(const lessor_call *c)
{
	return (c->fault_taken && c->fault.lose_answer) || c->waiter.gone;
}

int lessor_call_run(lessor_call *c, const void *body, size_t len, bool body_too_large)
{
	int r;

	c->body = body;
	c->len = len;
	if (c->waiter.gone) /* nobody to answer, nothing to do (a claim takes no run) */
		return LESSOR_CALL_REPLY;
	r = c->route ? reauthorize(c) : prepare(c, body_too_large);
	if (r != 0)
		return r;
	r = inject_fault(c);
	if (r != 0)
		return r;
	return c->route->handler(c);
}
