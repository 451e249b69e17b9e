/* Async HTTP client: libcurl's multi socket API driven by lib/ev.
 * Only this module sees CURLcode; callers get -errno style codes and a message. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ev/ev.h"
#include "util/time.h"

typedef struct http http_t;
typedef struct http_req http_req_t;

struct http_response;

struct http_opts {
	const char *ca_file;         /* extra CA bundle (PEM), NULL = system store only */
	const char *client_cert;     /* PEM client certificate (mutual TLS), NULL = none */
	const char *client_key;      /* its unencrypted PEM key; needed with client_cert */
	bool insecure;               /* disable TLS verification: tests only, logged loudly */
	const char *user_agent;      /* NULL = "lessee/<version>" */
	long max_host_connections;   /* 0 = unlimited */
	/* HTTP basic auth on every request, the header made by libcurl; NULL = none.
	 * Both are copied (the password wiped at http_free). */
	const char *basic_user;
	const char *basic_password;
	/* Called for every request that completes (never for cancelled ones), just
	 * before its callback: accounting in one place. */
	void (*observer)(const char *label, const struct http_response *resp, void *ctx);
	void *observer_ctx;
};

struct http_request {
	const char *method;          /* "GET" "POST" "PATCH" "HEAD" ... */
	const char *url;
	const char *const *headers;  /* "Name: value", NULL-terminated; may be NULL */
	const void *body;            /* copied by http_send */
	size_t body_len;
	usec_t connect_timeout;      /* 0 = 10 s */
	usec_t timeout;              /* whole request; 0 = 30 s */
	size_t max_response;         /* response body cap; 0 = 1 MiB.  Larger = -EMSGSIZE */
	const char *label;           /* passed to the observer; NULL = "" */
	bool fresh_connect;          /* a new connection, not one from the pool (after a
				      * stall: the pooled one may be black-holed) */
};

struct http_response {
	int error;                   /* 0, or -errno-style transport error:
				      * -ECONNREFUSED -ETIMEDOUT -EMSGSIZE (over cap)
				      * -EHOSTUNREACH -ECONNRESET -EPROTO (TLS/protocol) -ECANCELED ... */
	const char *error_message;   /* human text when error != 0; a refused server
				      * certificate starts "TLS: the server's certificate"
				      * and names the cause (unknown CA, host name mismatch,
				      * expired, ...), then curl's own words */
	long status;                 /* HTTP status, 0 on transport error */
	const char *body;            /* NUL-terminated; valid only during the callback */
	size_t body_len;
	usec_t retry_after;          /* parsed Retry-After (seconds or HTTP date), 0 = none */
	usec_t elapsed;              /* total request time */
	const char *content_type;
	long http_version;           /* 1, 2 */
	bool reused_connection;      /* served over an existing connection */
};

typedef void (*http_cb)(http_req_t *req, const struct http_response *resp, void *userdata);

int http_new(ev_t *e, const struct http_opts *opts, http_t **ret);
/* Cancels every request in flight (no callbacks) and frees everything. */
http_t *http_free(http_t *h);

/* Start a request.  The callback runs exactly once, from the loop, unless the
 * request is cancelled first.  ret may be NULL. */
int http_send(http_t *h, const struct http_request *rq, http_cb cb, void *userdata,
	      http_req_t **ret);
/* Stop a request in flight and free it; its callback never runs.  NULL-safe.
 * Must not be called on a request whose callback has already started. */
void http_cancel(http_req_t *req);

/* How many requests are in flight. */
unsigned http_in_flight(const http_t *h);

/* Response headers of interest are exposed via http_response; arbitrary ones: */
const char *http_response_header(const http_req_t *req, const char *name);

/* Retry decision for a response: true when a retry makes sense (transport error,
 * 429, 5xx except 501/505).  delay is the full-jitter backoff for this attempt,
 * floored by Retry-After. */
bool http_should_retry(const struct http_response *resp);
usec_t http_retry_delay(const struct http_response *resp, unsigned attempt, usec_t base,
			usec_t cap);
