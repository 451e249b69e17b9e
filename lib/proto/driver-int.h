/* Private to the drivers of lib/proto: the instance every driver shares and
 * the HTTP plumbing (credentials header, accounting, readiness) they all use,
 * so each driver file holds only its API's URLs, bodies and status meanings. */
#pragma once

#include "http/http.h"
#include "obs/metrics.h"
#include "proto/driver.h"

struct drv {
	const struct drv_ops *ops;
	ev_t *ev;
	http_t *http;
	char *base;       /* api.url, no trailing '/' */
	char *auth;       /* the whole credentials header line, or NULL; wiped when freed */
	usec_t timeout;   /* api.request_timeout */
	usec_t last_ok;   /* monotonic time of the last answer with valid credentials */
	bool auth_denied; /* the last answer was 401/403 */
	/* the driver renews its credentials on a 401/403 itself (a token that
	 * expired): such an answer is no verdict on them until the operation
	 * ends DRV_DENIED (drv_req_answer) */
	bool auth_renewable;
	long denied_status; /* the last 401/403 held back so */
	metric_t *m_requests, *m_duration;
	void *priv; /* the driver's own state (init sets it, done frees it) */
};

/* One operation in flight.  A driver may chain several HTTP requests in one
 * operation (a token refresh, then the request again); `http` is always the
 * one in flight, so drv_cancel() stops whichever it is. */
struct drv_req {
	drv_t *d;
	http_req_t *http;
	void (*on_http)(drv_req_t *rq, const struct http_response *resp);
	drv_cb cb;
	drv_claim_cb claim_cb;
	void *ud;
	void *state; /* the driver's, freed with state_free */
	void (*state_free)(void *state);
	drv_req_t **ret;   /* cleared when the operation ends */
	const char *label; /* the accounting label of its request in flight */
	bool deferred;     /* deferred_answer is queued with ev_defer */
	struct drv_answer deferred_answer;
};

drv_req_t *drv_req_new(drv_t *d, void (*on_http)(drv_req_t *, const struct http_response *),
                       drv_cb cb, void *ud);
/* drv_req_new with a state of size bytes (zeroed) that state_free frees:
 * rq->state. */
drv_req_t *drv_req_new_state(drv_t *d, void (*on_http)(drv_req_t *, const struct http_response *),
                             drv_cb cb, void *ud, size_t size, void (*state_free)(void *));
/* The operation's first step was taken with q: on failure rq is freed and q
 * returned, else rq is the caller's handle (*ret, cleared when it ends). */
int drv_req_start(drv_req_t *rq, int q, drv_req_t **ret);
/* An answer that needs no request, given from the loop (never from inside
 * the call that started the operation); drv_req_start's contract. */
int drv_req_defer(drv_req_t *rq, const struct drv_answer *a, drv_req_t **ret);
/* Send one HTTP request for rq: adds the credentials header and the
 * accounting label; on completion rq->on_http runs. */
int drv_http_send(drv_req_t *rq, const struct http_request *hr);
/* End the operation: the callback, then free (the caller must not touch rq after). */
void drv_req_answer(drv_req_t *rq, const struct drv_answer *a);
void drv_req_claim_answer(drv_req_t *rq, struct drv_claim_answer *a);
/* The end of a completion that carried a claim: cb with a, then ncb with ca. */
void drv_req_complete_claim_answer(drv_req_t *rq, const struct drv_answer *a, drv_claim_cb ncb,
                                   void *nud, struct drv_claim_answer *ca);
void drv_req_free(drv_req_t *rq);

/* The verdict every API shares: transport errors (but for an answer over its
 * cap, a bad URL, ...), 5xx (but 501 and 505: http_should_retry), 408 and 429
 * are DRV_RETRY (with Retry-After), 401 and 403 DRV_DENIED; anything else is
 * left to the driver (returns false and fills only the common fields). */
bool drv_answer_common(const struct http_response *resp, struct drv_answer *a);
/* "HTTP 503", or the transport error's text. */
const char *drv_describe(const struct http_response *resp, char *buf, size_t len);
/* "what: HTTP 400: " and the server's error {message} (at most msg_max
 * UTF-16 units), else the start of its body. */
void drv_describe_message(const struct http_response *resp, const char *what, size_t msg_max,
                          char *buf, size_t len);

/* n bytes of s as valid UTF-8 (a NUL or a byte that is not UTF-8 becomes
 * U+FFFD), at most max_units UTF-16 code units (Java's chars, what the
 * servers' length limits count; 0 = no cap), appended to out. */
struct buf;
int drv_text_clean(const char *s, size_t n, size_t max_units, struct buf *out);
/* The same of a whole string, as a new one; NULL = out of memory. */
char *drv_text_dup(const char *s, size_t max_units);
