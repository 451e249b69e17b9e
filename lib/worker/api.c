/* Requests to the orchestration API: base URL, bearer token, timeouts, and the
 * accounting every request gets (metrics, readiness, auth state changes). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log/log.h"
#include "worker/worker-int.h"

static const char *const endpoint_names[_API_ENDPOINT_MAX] = {
	[API_CLAIMS] = "claims",     [API_CLAIM_CANCEL] = "claim_cancel",
	[API_LEASE] = "lease",       [API_LOG] = "log",
	[API_COMPLETE] = "complete", [API_RELEASE] = "release",
};

static void api_observe(const char *label, const struct http_response *resp, void *ctx)
{
	struct api *a = ctx;
	char code[16];
	bool denied = resp->status == 401 || resp->status == 403;

	if (resp->status)
		snprintf(code, sizeof(code), "%ld", resp->status);
	else
		snprintf(code, sizeof(code), "error");
	metric_add(a->m_requests, 1, label, code);
	metric_observe(a->m_duration, (double)resp->elapsed / USEC_PER_SEC, label);
	if (resp->status == 0 || resp->status >= 500)
		return; /* says nothing about our credentials */
	if (denied != a->auth_denied)
		log_emit(denied ? LOG_ERR : LOG_NOTICE, NULL,
			 denied ? "API refuses our credentials (HTTP %ld): not ready, retrying slowly"
				: "API accepts our credentials again (HTTP %ld): ready",
			 resp->status);
	a->auth_denied = denied;
	if (!denied)
		a->last_ok = ev_now(a->ev);
}

int api_init(struct api *a, ev_t *e, const struct conf *c, metrics_t *m)
{
	static const double buckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
					 1,     2.5,  5,     10,   30,  60};
	struct http_opts o = {.ca_file = c->api.ca_file,
			      .client_cert = c->api.client_cert,
			      .client_key = c->api.client_key,
			      .observer = api_observe,
			      .observer_ctx = a};
	int r;

	*a = (struct api){.ev = e, .timeout = c->api.request_timeout};
	a->base = strdup(c->api.url);
	if (!a->base)
		return -ENOMEM;
	if (c->api.token && asprintf(&a->auth, "Authorization: Bearer %s", c->api.token) < 0) {
		a->auth = NULL;
		return -ENOMEM;
	}
	a->m_requests = metrics_counter(m, "lessee_api_requests_total",
					"Requests to the orchestration API by endpoint and HTTP code",
					"endpoint,code");
	a->m_duration = metrics_histogram(m, "lessee_api_request_duration_seconds",
					  "Duration of requests to the orchestration API",
					  "endpoint", buckets, ELEMENTSOF(buckets));
	r = http_new(e, &o, &a->http);
	return r < 0 ? r : 0;
}

void api_done(struct api *a)
{
	a->http = http_free(a->http);
	free(a->base);
	if (a->auth)
		explicit_bzero(a->auth, strlen(a->auth));
	free(a->auth);
	a->base = a->auth = NULL;
}

static int post(struct api *a, enum api_endpoint ep, const char *url, const char *body,
		usec_t timeout, bool fresh, size_t max_response, http_cb cb, void *userdata,
		http_req_t **ret)
{
	const char *headers[] = {"Content-Type: application/json", "Expect:", a->auth, NULL};
	struct http_request rq = {
		.method = "POST",
		.url = url,
		.headers = headers,
		.body = body,
		.body_len = body ? strlen(body) : 0,
		.timeout = timeout ? timeout : a->timeout,
		.max_response = max_response,
		.label = endpoint_names[ep],
		.fresh_connect = fresh,
	};

	return http_send(a->http, &rq, cb, userdata, ret);
}

int api_post(struct api *a, enum api_endpoint ep, const char *url, const char *body,
	     usec_t timeout, size_t max_response, http_cb cb, void *userdata, http_req_t **ret)
{
	return post(a, ep, url, body, timeout, false, max_response, cb, userdata, ret);
}

int api_post_fresh(struct api *a, enum api_endpoint ep, const char *url, const char *body,
		   usec_t timeout, size_t max_response, http_cb cb, void *userdata,
		   http_req_t **ret)
{
	return post(a, ep, url, body, timeout, true, max_response, cb, userdata, ret);
}

int api_send_log(void *api, const struct http_request *rq, http_cb cb, void *userdata,
		 http_req_t **ret)
{
	struct api *a = api;
	const char *headers[16];
	size_t n = 0;
	struct http_request copy = *rq;

	for (size_t i = 0; rq->headers && rq->headers[i] && n < ELEMENTSOF(headers) - 2; i++)
		headers[n++] = rq->headers[i];
	if (a->auth)
		headers[n++] = a->auth;
	headers[n] = NULL;
	copy.headers = headers;
	copy.label = endpoint_names[API_LOG];
	return http_send(a->http, &copy, cb, userdata, ret);
}

bool api_ready(const struct api *a, usec_t now)
{
	/* "recently": a long poll plus a request timeout, twice over */
	return !a->auth_denied && a->last_ok && now - a->last_ok < 2 * a->timeout + 120 * USEC_PER_SEC;
}

const char *api_describe(const struct http_response *resp, char *buf, size_t len)
{
	if (resp->error)
		snprintf(buf, len, "%s", resp->error_message ? resp->error_message
							       : "transport error");
	else
		snprintf(buf, len, "HTTP %ld", resp->status);
	return buf;
}
