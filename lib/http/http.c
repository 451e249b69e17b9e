/* lib/http: libcurl's multi socket API driven by lib/ev (docs/http.md).
 *
 * One CURLM per http_t.  curl tells us which sockets to watch (socket callback ->
 * ev_io) and when to call it back (timer callback -> one ev timer).  Loop events
 * go back to curl with curl_multi_socket_action(); finished transfers are drained
 * with curl_multi_info_read() and handed to the caller's callback, always from
 * the loop and never while curl is on the stack. */
#include "http/http.h"

#include <assert.h>
#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "http/http-int.h"
#include "log/log.h"
#include "util/buf.h"
#include "util/macro.h"
#include "util/random.h"

#ifndef LESSEE_VERSION
#define LESSEE_VERSION "0"
#endif

#define HTTP_DEFAULT_CONNECT_TIMEOUT (10 * USEC_PER_SEC)
#define HTTP_DEFAULT_TIMEOUT (30 * USEC_PER_SEC)
#define HTTP_DEFAULT_MAX_RESPONSE ((size_t)1024 * 1024)
#define HTTP_FALLBACK_CAPATH "/etc/ssl/certs"

/* A socket curl asked us to watch; attached to it with curl_multi_assign(). */
struct http_sock {
	http_t *h;
	ev_io_t *io;
	struct http_sock *prev, *next;
};

struct http_req {
	http_t *h;
	CURL *easy;
	http_req_t *prev, *next; /* in h->reqs while in flight */
	http_cb cb;
	void *userdata;
	char *body; /* our copy of the request body */
	struct curl_slist *headers;
	struct buf resp; /* response body, cap = max_response */
	int write_error; /* set by the write callback: -EMSGSIZE or -ENOMEM */
	bool in_callback;
	usec_t start;
	const char *label; /* the caller's static string, for the observer */
	char errbuf[CURL_ERROR_SIZE];
};

/* Easy handles kept for reuse, at most. */
#define HTTP_IDLE_EASY 32

struct http {
	ev_t *ev;
	CURLM *multi;
	ev_timer_t *timer;
	char *ca_file;
	char *ca_path;
	char *client_cert;
	char *client_key;
	char *user_agent;
	char *basic_user;
	char *basic_password;
	bool insecure;
	void (*observer)(const char *label, const struct http_response *resp, void *ctx);
	void *observer_ctx;
	http_req_t *reqs;
	struct http_sock *socks;
	CURL *idle[HTTP_IDLE_EASY]; /* easy handles of finished requests, reset */
	unsigned n_idle;
	unsigned n_reqs;
	unsigned dispatching; /* > 0 while finished transfers are handed out */
	bool freed;           /* http_free() ran inside a callback: the dispatcher frees h */
};

/* ---- global init ------------------------------------------------------- */

static pthread_once_t http_once = PTHREAD_ONCE_INIT;
static CURLcode http_global_rc;

static void http_global_init(void)
{
	/* Once per process, never undone: curl_global_cleanup() is not safe while
	 * another thread might still use curl, and the memory is reachable. */
	http_global_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* ---- error mapping ----------------------------------------------------- */

static bool curlcode_is_tls(CURLcode c)
{
	switch (c) {
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CIPHER:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_CRL_BADFILE:
	case CURLE_SSL_ISSUER_ERROR:
	case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
	case CURLE_SSL_INVALIDCERTSTATUS:
	case CURLE_SSL_SHUTDOWN_FAILED:
	case CURLE_SSL_ENGINE_NOTFOUND:
	case CURLE_SSL_ENGINE_SETFAILED:
	case CURLE_SSL_ENGINE_INITFAILED:
	case CURLE_SSL_CLIENTCERT:
	case CURLE_USE_SSL_FAILED:
		return true;
	default:
		return false;
	}
}

/* The socket-level errno curl saw, when it is one a caller can act on. */
static int os_errno_or(long os_errno, int fallback)
{
	switch (os_errno) {
	case ECONNREFUSED:
	case ECONNRESET:
	case ECONNABORTED:
	case EHOSTUNREACH:
	case ENETUNREACH:
	case ENETDOWN:
	case EPIPE:
	case ETIMEDOUT:
	case EADDRNOTAVAIL:
		return (int)-os_errno;
	default:
		return fallback;
	}
}

int http_errno_from_curlcode(int code, long os_errno)
{
	CURLcode c = (CURLcode)code;

	if (curlcode_is_tls(c))
		return -EPROTO;
	switch (c) {
	case CURLE_OK:
		return 0;
	case CURLE_COULDNT_CONNECT:
		return os_errno_or(os_errno, -ECONNREFUSED);
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
		return -EHOSTUNREACH;
	case CURLE_OPERATION_TIMEDOUT:
		return -ETIMEDOUT;
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
		return os_errno_or(os_errno, -ECONNRESET);
	case CURLE_FILESIZE_EXCEEDED:
		return -EMSGSIZE;
	case CURLE_WEIRD_SERVER_REPLY:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
	case CURLE_HTTP3:
	case CURLE_BAD_CONTENT_ENCODING:
	case CURLE_CHUNK_FAILED:
		return -EPROTO;
	case CURLE_UNSUPPORTED_PROTOCOL:
		return -EPROTONOSUPPORT;
	case CURLE_URL_MALFORMAT:
	case CURLE_BAD_FUNCTION_ARGUMENT:
		return -EINVAL;
	case CURLE_OUT_OF_MEMORY:
		return -ENOMEM;
	case CURLE_ABORTED_BY_CALLBACK:
		return -ECANCELED;
	default:
		return -EIO;
	}
}

/* ---- Retry-After ------------------------------------------------------- */

static usec_t retry_after_delta(const char *p)
{
	usec_t secs = 0;

	for (; isdigit((unsigned char)*p); p++) {
		if (secs < HTTP_RETRY_AFTER_MAX / USEC_PER_SEC)
			secs = secs * 10 + (usec_t)(*p - '0');
	}
	p += strspn(p, " \t");
	if (*p)
		return 0;
	return MIN(secs * USEC_PER_SEC, HTTP_RETRY_AFTER_MAX);
}

usec_t http_parse_retry_after(const char *value, usec_t now_real)
{
	const char *p;
	time_t when;
	usec_t at;

	if (!value)
		return 0;
	p = value + strspn(value, " \t");
	if (isdigit((unsigned char)*p))
		return retry_after_delta(p);
	/* Every HTTP-date form (IMF-fixdate, RFC 850, asctime) starts with a day name. */
	if (!isalpha((unsigned char)*p))
		return 0;
	when = curl_getdate(p, NULL);
	if (when <= 0)
		return 0;
	at = (usec_t)when * USEC_PER_SEC;
	if (at <= now_real)
		return 0;
	return MIN(at - now_real, HTTP_RETRY_AFTER_MAX);
}

/* ---- the loop side: sockets and the timer ------------------------------ */

static void http_dispatch_done(http_t *h);

static uint32_t events_from_curl(int what)
{
	return (what == CURL_POLL_IN || what == CURL_POLL_INOUT ? EV_READ : 0) |
	       (what == CURL_POLL_OUT || what == CURL_POLL_INOUT ? EV_WRITE : 0);
}

static int select_from_events(uint32_t revents, uint32_t watched)
{
	int flags =
	    (revents & EV_READ ? CURL_CSELECT_IN : 0) | (revents & EV_WRITE ? CURL_CSELECT_OUT : 0);

	/* On error/hangup let curl do the read/write it was waiting for, so it
	 * sees the real errno (ECONNRESET...) instead of a bare "poll error". */
	if (revents & (EV_ERROR | EV_HUP))
		flags |= (watched & EV_READ ? CURL_CSELECT_IN : 0) |
		         (watched & EV_WRITE ? CURL_CSELECT_OUT : 0);
	if (revents & EV_ERROR)
		flags |= CURL_CSELECT_ERR;
	return flags;
}

static void http_on_io(ev_io_t *w, int fd, uint32_t revents, void *userdata)
{
	struct http_sock *s = userdata;
	http_t *h = s->h;
	int running;

	/* May remove (and free) s through the socket callback. */
	(void)curl_multi_socket_action(h->multi, fd,
	                               select_from_events(revents, ev_io_get_events(w)), &running);
	http_dispatch_done(h);
}

static void http_on_timer(ev_timer_t *t, void *userdata)
{
	http_t *h = userdata;
	int running;

	(void)curl_multi_socket_action(h->multi, CURL_SOCKET_TIMEOUT, 0, &running);
	http_dispatch_done(h);
}

static void sock_free(struct http_sock *s)
{
	http_t *h = s->h;

	if (s->prev)
		s->prev->next = s->next;
	else
		h->socks = s->next;
	if (s->next)
		s->next->prev = s->prev;
	ev_io_del(s->io);
	free(s);
}

static int sock_new(http_t *h, curl_socket_t fd, uint32_t events)
{
	struct http_sock *s = calloc(1, sizeof(*s));
	int r;

	if (!s)
		return -ENOMEM;
	s->h = h;
	r = ev_io_add(h->ev, fd, events, http_on_io, s, &s->io);
	if (r < 0) {
		free(s);
		return r;
	}
	s->next = h->socks;
	if (h->socks)
		h->socks->prev = s;
	h->socks = s;
	if (curl_multi_assign(h->multi, fd, s) != CURLM_OK) {
		sock_free(s);
		return -ENOMEM;
	}
	return 0;
}

/* CURLMOPT_SOCKETFUNCTION.  fd 0 is a valid socket: "no context" is socketp == NULL.
 * Only touches the loop (and curl_multi_assign, which curl allows here). */
static int http_socket_cb(CURL *easy, curl_socket_t fd, int what, void *userp, void *socketp)
{
	http_t *h = userp;
	struct http_sock *s = socketp;

	if (what == CURL_POLL_REMOVE) {
		/* curl drops the assignment itself */
		if (s)
			sock_free(s);
		return 0;
	}
	if (s)
		return ev_io_set_events(s->io, events_from_curl(what)) < 0 ? -1 : 0;
	return sock_new(h, fd, events_from_curl(what)) < 0 ? -1 : 0;
}

/* CURLMOPT_TIMERFUNCTION: one non-repeating timer; never calls back into curl. */
static int http_timer_cb(CURLM *multi, long timeout_ms, void *userp)
{
	http_t *h = userp;

	if (timeout_ms < 0) {
		ev_timer_disarm(h->timer);
		return 0;
	}
	/* 0 = as soon as possible: the loop's next iteration */
	return ev_timer_arm(h->timer, (usec_t)timeout_ms * USEC_PER_MSEC) < 0 ? -1 : 0;
}

/* ---- requests ---------------------------------------------------------- */

static void req_link(http_t *h, http_req_t *req)
{
	req->next = h->reqs;
	if (h->reqs)
		h->reqs->prev = req;
	h->reqs = req;
	h->n_reqs++;
}

static void req_unlink(http_req_t *req)
{
	http_t *h = req->h;

	if (req->prev)
		req->prev->next = req->next;
	else
		h->reqs = req->next;
	if (req->next)
		req->next->prev = req->prev;
	req->prev = req->next = NULL;
	h->n_reqs--;
}

/* An easy handle for a new request: one a finished request left, or a new
 * one (curl_easy_init allocates and sets up some kilobytes each time). */
static CURL *easy_take(http_t *h)
{
	return h->n_idle > 0 ? h->idle[--h->n_idle] : curl_easy_init();
}

/* Out of any multi: kept for the next request with every option reset
 * (curl_easy_reset: its copies of the URL, the credentials, the headers
 * pointer go), or cleaned up. */
static void easy_give(http_t *h, CURL *e)
{
	if (h && !h->freed && h->n_idle < HTTP_IDLE_EASY) {
		curl_easy_reset(e);
		h->idle[h->n_idle++] = e;
	} else
		curl_easy_cleanup(e);
}

static http_req_t *req_free(http_req_t *req)
{
	if (!req)
		return NULL;
	if (req->easy)
		easy_give(req->h, req->easy);
	curl_slist_free_all(req->headers);
	buf_done(&req->resp);
	free(req->body);
	free(req);
	return NULL;
}
DEFINE_FREE_FUNC(http_req_t, req_free);

static size_t http_write_cb(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	http_req_t *req = userdata;
	size_t n = size * nmemb;
	int r = buf_append(&req->resp, ptr, n);

	if (r < 0) {
		/* returning short aborts the transfer with CURLE_WRITE_ERROR */
		req->write_error = r == -E2BIG ? -EMSGSIZE : r;
		return 0;
	}
	return n;
}

static long ms_from_usec(usec_t u)
{
	usec_t ms = (u + USEC_PER_MSEC - 1) / USEC_PER_MSEC;

	return (long)MIN(ms, (usec_t)LONG_MAX);
}

static bool header_name_is(const char *line, const char *name)
{
	size_t n = strlen(name);

	return strncasecmp(line, name, n) == 0 && line[n] == ':';
}

/* Our request headers plus defaults.  A header may not smuggle CR/LF. */
static int req_set_headers(http_req_t *req, const char *const *headers)
{
	bool has_ct = false, has_expect = false;

	for (size_t i = 0; headers && headers[i]; i++) {
		const char *hd = headers[i];
		struct curl_slist *l;

		if (strpbrk(hd, "\r\n") || !strchr(hd, ':') || hd[0] == ':')
			return -EINVAL;
		has_ct = has_ct || header_name_is(hd, "Content-Type");
		has_expect = has_expect || header_name_is(hd, "Expect");
		l = curl_slist_append(req->headers, hd);
		if (!l)
			return -ENOMEM;
		req->headers = l;
	}
	/* No "Expect: 100-continue" round trip for big bodies, and no invented
	 * x-www-form-urlencoded type: "Name:" with no value drops curl's default. */
	if (!has_expect && !(req->headers = curl_slist_append(req->headers, "Expect:")))
		return -ENOMEM;
	if (!has_ct && !(req->headers = curl_slist_append(req->headers, "Content-Type:")))
		return -ENOMEM;
	return 0;
}

static bool method_valid(const char *m)
{
	if (!m || !*m)
		return false;
	for (; *m; m++)
		if (!isupper((unsigned char)*m))
			return false;
	return true;
}

static int url_check(const char *url)
{
	CURLU *u = curl_url();
	char *scheme = NULL, *host = NULL;
	int r = -EINVAL;

	if (!u)
		return -ENOMEM;
	if (curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
	    curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK) {
		if (strcasecmp(scheme, "http") != 0 && strcasecmp(scheme, "https") != 0)
			r = -EPROTONOSUPPORT;
		else if (curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK && *host)
			r = 0;
	}
	curl_free(scheme);
	curl_free(host);
	curl_url_cleanup(u);
	return r;
}

/* GET/HEAD carry no body; POST/PUT/PATCH always send one (maybe empty, with
 * Content-Length: 0); anything else sends one only when given. */
static CURLcode req_set_method(http_req_t *req, const char *method, size_t body_len)
{
	CURL *e = req->easy;
	bool body = body_len > 0 || strcmp(method, "POST") == 0 || strcmp(method, "PUT") == 0 ||
	            strcmp(method, "PATCH") == 0;
	CURLcode c = CURLE_OK;

	if (strcmp(method, "HEAD") == 0)
		return curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
	if (body) {
		c = curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)body_len);
		if (c == CURLE_OK)
			c = curl_easy_setopt(e, CURLOPT_POSTFIELDS, req->body ? req->body : "");
	}
	if (c == CURLE_OK && strcmp(method, "GET") != 0 && strcmp(method, "POST") != 0)
		c = curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
	return c;
}

#define SETOPT(e, opt, val)                                                                        \
	do {                                                                                       \
		if (curl_easy_setopt(e, opt, val) != CURLE_OK)                                     \
			return -ENOMEM;                                                            \
	} while (0)

static int req_set_tls(const http_t *h, CURL *e)
{
	SETOPT(e, CURLOPT_SSLVERSION, (long)CURL_SSLVERSION_TLSv1_2);
	SETOPT(e, CURLOPT_SSL_VERIFYPEER, h->insecure ? 0L : 1L);
	SETOPT(e, CURLOPT_SSL_VERIFYHOST, h->insecure ? 0L : 2L);
	if (h->ca_file) {
		/* CAINFO replaces curl's default bundle; the system store stays
		 * trusted through CAPATH (the hashed directory), so ca_file adds. */
		SETOPT(e, CURLOPT_CAINFO, h->ca_file);
		if (h->ca_path)
			SETOPT(e, CURLOPT_CAPATH, h->ca_path);
	}
	if (h->client_cert) {
		SETOPT(e, CURLOPT_SSLCERT, h->client_cert);
		SETOPT(e, CURLOPT_SSLKEY, h->client_key);
	}
	return 0;
}

static int req_set_transport(const http_t *h, http_req_t *req, const struct http_request *rq)
{
	CURL *e = req->easy;

	SETOPT(e, CURLOPT_PRIVATE, req);
	SETOPT(e, CURLOPT_ERRORBUFFER, req->errbuf);
	SETOPT(e, CURLOPT_NOSIGNAL, 1L);
	SETOPT(e, CURLOPT_URL, rq->url);
	SETOPT(e, CURLOPT_PROTOCOLS_STR, "http,https");
	SETOPT(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
	SETOPT(e, CURLOPT_FOLLOWLOCATION, 0L);
	SETOPT(e, CURLOPT_USERAGENT, h->user_agent);
	SETOPT(e, CURLOPT_HTTPHEADER, req->headers);
	if (h->basic_user) {
		SETOPT(e, CURLOPT_HTTPAUTH, (long)CURLAUTH_BASIC);
		SETOPT(e, CURLOPT_USERNAME, h->basic_user);
		SETOPT(e, CURLOPT_PASSWORD, h->basic_password);
	}
	SETOPT(
	    e, CURLOPT_CONNECTTIMEOUT_MS,
	    ms_from_usec(rq->connect_timeout ? rq->connect_timeout : HTTP_DEFAULT_CONNECT_TIMEOUT));
	SETOPT(e, CURLOPT_TIMEOUT_MS,
	       ms_from_usec(rq->timeout ? rq->timeout : HTTP_DEFAULT_TIMEOUT));
	if (rq->fresh_connect)
		SETOPT(e, CURLOPT_FRESH_CONNECT, 1L);
	/* HTTP/2 when TLS ALPN offers it.  Over https, wait for a connection being
	 * set up to the same host (ALPN says within the handshake whether it can
	 * multiplex) instead of opening a second one.  Never over plain http:
	 * there curl would learn it only from the first response, so every
	 * request would queue behind a slow first one (a long poll). */
	SETOPT(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
	SETOPT(e, CURLOPT_PIPEWAIT, strncasecmp(rq->url, "https:", 6) == 0 ? 1L : 0L);
	/* TCP keepalive probes keep idle pooled connections and long polls alive
	 * through NAT and firewalls. */
	SETOPT(e, CURLOPT_TCP_KEEPALIVE, 1L);
	SETOPT(e, CURLOPT_TCP_KEEPIDLE, 60L);
	SETOPT(e, CURLOPT_TCP_KEEPINTVL, 30L);
	/* the path as built: a protocol id may be "." or "..", which curl would
	 * otherwise fold into another resource (RFC 3986 dot segments) */
	SETOPT(e, CURLOPT_PATH_AS_IS, 1L);
	SETOPT(e, CURLOPT_WRITEFUNCTION, http_write_cb);
	SETOPT(e, CURLOPT_WRITEDATA, req);
	/* refuse early when Content-Length already says it is too big */
	SETOPT(e, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)req->resp.cap);
	return req_set_tls(h, e);
}

static int req_new(http_t *h, const struct http_request *rq, http_req_t **ret)
{
	_cleanup_(req_freep) http_req_t *req = calloc(1, sizeof(*req));
	int r;

	if (!req)
		return -ENOMEM;
	req->h = h;
	req->resp = BUF_INIT(rq->max_response ? rq->max_response : HTTP_DEFAULT_MAX_RESPONSE);
	if (rq->body_len > 0) {
		/* copied now: the caller's buffer may be gone before the send */
		req->body = malloc(rq->body_len);
		if (!req->body)
			return -ENOMEM;
		memcpy(req->body, rq->body, rq->body_len);
	}
	req->easy = easy_take(h);
	if (!req->easy)
		return -ENOMEM;
	r = req_set_headers(req, rq->headers);
	if (r < 0)
		return r;
	r = req_set_transport(h, req, rq);
	if (r < 0)
		return r;
	if (req_set_method(req, rq->method, rq->body_len) != CURLE_OK)
		return -ENOMEM;
	*ret = TAKE_PTR(req);
	return 0;
}

int http_send(http_t *h, const struct http_request *rq, http_cb cb, void *userdata,
              http_req_t **ret)
{
	_cleanup_(req_freep) http_req_t *req = NULL;
	int r;

	assert(h && rq && cb);
	assert(!h->freed);
	if (!rq->url || !method_valid(rq->method) || (rq->body_len > 0 && !rq->body))
		return -EINVAL;
	if (rq->body_len > 0 && (strcmp(rq->method, "GET") == 0 || strcmp(rq->method, "HEAD") == 0))
		return -EINVAL;
	r = url_check(rq->url);
	if (r < 0)
		return r;
	r = req_new(h, rq, &req);
	if (r < 0)
		return r;
	req->cb = cb;
	req->label = rq->label;
	req->userdata = userdata;
	req->start = time_mono();
	/* arms our timer through the timer callback; the transfer starts from the loop */
	if (curl_multi_add_handle(h->multi, req->easy) != CURLM_OK)
		return -ENOMEM;
	req_link(h, req);
	if (ret)
		*ret = req;
	TAKE_PTR(req);
	return 0;
}

void http_cancel(http_req_t *req)
{
	if (!req)
		return;
	assert(!req->in_callback);
	curl_multi_remove_handle(req->h->multi, req->easy);
	req_unlink(req);
	req_free(req);
}

/* ---- completion -------------------------------------------------------- */

static long http_version_major(long v)
{
	switch (v) {
	case CURL_HTTP_VERSION_1_0:
	case CURL_HTTP_VERSION_1_1:
		return 1;
	case CURL_HTTP_VERSION_2_0:
		return 2;
	case CURL_HTTP_VERSION_3:
		return 3;
	default:
		return 0;
	}
}

/* OpenSSL's X509_V_ERR_* values (stable ABI), as curl reports them in
 * CURLINFO_SSL_VERIFYRESULT.  curl checks the host name itself and reports a
 * mismatch as X509_V_ERR_APPLICATION_VERIFICATION. */
static const char *tls_verify_cause(long v)
{
	switch (v) {
	case 1:  /* APPLICATION_VERIFICATION: curl's host name check */
	case 62: /* HOSTNAME_MISMATCH */
	case 64: /* IP_ADDRESS_MISMATCH */
		return "is not for this host name (host name mismatch)";
	case 2:  /* UNABLE_TO_GET_ISSUER_CERT */
	case 18: /* DEPTH_ZERO_SELF_SIGNED_CERT */
	case 19: /* SELF_SIGNED_CERT_IN_CHAIN */
	case 20: /* UNABLE_TO_GET_ISSUER_CERT_LOCALLY */
	case 21: /* UNABLE_TO_VERIFY_LEAF_SIGNATURE */
		return "is not signed by a trusted CA (unknown CA; ca_file adds one)";
	case 9: /* CERT_NOT_YET_VALID */
		return "is not valid yet (is the clock right?)";
	case 10: /* CERT_HAS_EXPIRED */
		return "has expired";
	case 23: /* CERT_REVOKED */
		return "was revoked";
	case 26: /* INVALID_PURPOSE */
		return "is not for a TLS server";
	default:
		return "was refused";
	}
}

/* Say why in words an operator acts on, curl's own text after them. */
static void tls_explain(http_req_t *req, CURLcode rc)
{
	char curl_text[CURL_ERROR_SIZE];
	long v = 0;

	snprintf(curl_text, sizeof(curl_text), "%s",
	         req->errbuf[0] ? req->errbuf : curl_easy_strerror(rc));
	if (rc == CURLE_PEER_FAILED_VERIFICATION) {
		curl_easy_getinfo(req->easy, CURLINFO_SSL_VERIFYRESULT, &v);
		snprintf(req->errbuf, sizeof(req->errbuf),
		         "TLS: the server's certificate %s: %.150s", tls_verify_cause(v),
		         curl_text);
	} else if (rc == CURLE_SSL_CERTPROBLEM)
		snprintf(req->errbuf, sizeof(req->errbuf),
		         "TLS: cannot use the client certificate or key: %.150s", curl_text);
}

static void response_error(http_req_t *req, CURLcode rc, struct http_response *r)
{
	long os_errno = 0;

	curl_easy_getinfo(req->easy, CURLINFO_OS_ERRNO, &os_errno);
	r->error = req->write_error && rc == CURLE_WRITE_ERROR
	               ? req->write_error
	               : http_errno_from_curlcode(rc, os_errno);
	if (r->error == -EMSGSIZE)
		snprintf(req->errbuf, sizeof(req->errbuf),
		         "response body larger than the cap of %zu bytes", req->resp.cap);
	else if (rc == CURLE_PEER_FAILED_VERIFICATION || rc == CURLE_SSL_CERTPROBLEM)
		tls_explain(req, rc);
	else if (!req->errbuf[0])
		snprintf(req->errbuf, sizeof(req->errbuf), "%s", curl_easy_strerror(rc));
	r->error_message = req->errbuf;
	r->status = 0;
}

/* An error answer (3xx, 4xx, 5xx) over the cap is still that answer: a
 * proxy's error page on a 503 is a 503 to retry, not a body to refuse.  Its
 * status stands, with what of the body fit (nothing when Content-Length told
 * curl first).  Only a success's body must be whole. */
static bool error_answer_cut(http_req_t *req, CURLcode rc, struct http_response *r)
{
	long code = 0;

	if (rc != CURLE_FILESIZE_EXCEEDED &&
	    !(rc == CURLE_WRITE_ERROR && req->write_error == -EMSGSIZE))
		return false;
	if (curl_easy_getinfo(req->easy, CURLINFO_RESPONSE_CODE, &code) != CURLE_OK || code < 300)
		return false;
	r->status = code;
	return true;
}

static void response_fill(http_req_t *req, CURLcode rc, struct http_response *r)
{
	long version = 0, connects = 0;
	char *ct = NULL;
	bool answered = rc == CURLE_OK || error_answer_cut(req, rc, r);

	if (!answered)
		response_error(req, rc, r);
	else if (rc == CURLE_OK)
		curl_easy_getinfo(req->easy, CURLINFO_RESPONSE_CODE, &r->status);
	curl_easy_getinfo(req->easy, CURLINFO_HTTP_VERSION, &version);
	curl_easy_getinfo(req->easy, CURLINFO_NUM_CONNECTS, &connects);
	curl_easy_getinfo(req->easy, CURLINFO_CONTENT_TYPE, &ct);
	r->http_version = http_version_major(version);
	r->reused_connection = rc == CURLE_OK && connects == 0;
	r->content_type = ct;
	r->body = req->resp.data && answered ? req->resp.data : "";
	r->body_len = answered ? req->resp.len : 0;
	r->retry_after =
	    http_parse_retry_after(http_response_header(req, "Retry-After"), time_real());
	r->elapsed = time_mono() - req->start;
}

static void req_complete(http_req_t *req, CURLcode rc)
{
	struct http_response r = {0};

	/* Out of the multi first: the connection goes back to the pool, and the
	 * callback may do anything with every other request. */
	curl_multi_remove_handle(req->h->multi, req->easy);
	req_unlink(req);
	response_fill(req, rc, &r);
	req->in_callback = true;
	if (req->h->observer)
		req->h->observer(req->label ? req->label : "", &r, req->h->observer_ctx);
	req->cb(req, &r, req->userdata);
	req_free(req);
}

/* Hand every finished transfer to its callback.  Runs from loop callbacks only,
 * after curl_multi_socket_action() returned.  A callback may call http_free(h):
 * then h lives until the outermost dispatcher is done with it. */
static void http_dispatch_done(http_t *h)
{
	CURLMsg *m;
	int left;

	h->dispatching++;
	while (!h->freed && (m = curl_multi_info_read(h->multi, &left))) {
		char *priv = NULL;

		if (m->msg != CURLMSG_DONE)
			continue;
		if (curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &priv) != CURLE_OK || !priv)
			continue;
		req_complete((http_req_t *)priv, m->data.result);
	}
	if (--h->dispatching == 0 && h->freed)
		free(h);
}

/* ---- the client -------------------------------------------------------- */

unsigned http_in_flight(const http_t *h)
{
	return h ? h->n_reqs : 0;
}

const char *http_response_header(const http_req_t *req, const char *name)
{
	struct curl_header *hd;

	if (!req || !name)
		return NULL;
	if (curl_easy_header(req->easy, name, 0, CURLH_HEADER, -1, &hd) != CURLHE_OK)
		return NULL;
	return hd->value;
}

static char *system_capath(void)
{
	CURL *e = curl_easy_init();
	char *p = NULL, *dup = NULL;
	struct stat st;

	if (e && curl_easy_getinfo(e, CURLINFO_CAPATH, &p) == CURLE_OK && p)
		dup = strdup(p);
	else if (stat(HTTP_FALLBACK_CAPATH, &st) == 0 && S_ISDIR(st.st_mode))
		dup = strdup(HTTP_FALLBACK_CAPATH);
	if (e)
		curl_easy_cleanup(e);
	return dup;
}

static int http_set_opts(http_t *h, const struct http_opts *opts)
{
	h->insecure = opts && opts->insecure;
	h->observer = opts ? opts->observer : NULL;
	h->observer_ctx = opts ? opts->observer_ctx : NULL;
	if (opts && opts->ca_file) {
		if (access(opts->ca_file, R_OK) < 0)
			return -errno;
		h->ca_file = strdup(opts->ca_file);
		h->ca_path = system_capath();
		if (!h->ca_file)
			return -ENOMEM;
	}
	if (opts && (opts->client_cert || opts->client_key)) {
		if (!opts->client_cert || !opts->client_key)
			return -EINVAL;
		if (access(opts->client_cert, R_OK) < 0 || access(opts->client_key, R_OK) < 0)
			return -errno;
		h->client_cert = strdup(opts->client_cert);
		h->client_key = strdup(opts->client_key);
		if (!h->client_cert || !h->client_key)
			return -ENOMEM;
	}
	if (opts && opts->basic_user) {
		h->basic_user = strdup(opts->basic_user);
		h->basic_password = strdup(opts->basic_password ? opts->basic_password : "");
		if (!h->basic_user || !h->basic_password)
			return -ENOMEM;
	}
	h->user_agent =
	    opts && opts->user_agent ? strdup(opts->user_agent) : strdup("lessee/" LESSEE_VERSION);
	if (!h->user_agent)
		return -ENOMEM;
	/* The idle connections kept as many as may be open: curl's default cache
	 * is 4 per transfer in the multi at the moment, so after a burst the
	 * connections beyond it were closed and opened again for the next. */
	if (opts && opts->max_host_connections > 0 &&
	    (curl_multi_setopt(h->multi, CURLMOPT_MAX_HOST_CONNECTIONS,
	                       opts->max_host_connections) != CURLM_OK ||
	     curl_multi_setopt(h->multi, CURLMOPT_MAXCONNECTS, opts->max_host_connections) !=
	         CURLM_OK))
		return -EINVAL;
	return 0;
}

DEFINE_FREE_FUNC(http_t, http_free);

int http_new(ev_t *e, const struct http_opts *opts, http_t **ret)
{
	_cleanup_(http_freep) http_t *h = NULL;
	int r;

	assert(e && ret);
	pthread_once(&http_once, http_global_init);
	if (http_global_rc != CURLE_OK)
		return -EIO;
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->ev = e;
	r = ev_timer_add(e, USEC_INFINITY, http_on_timer, h, &h->timer);
	if (r < 0)
		return r;
	h->multi = curl_multi_init();
	if (!h->multi)
		return -ENOMEM;
	if (curl_multi_setopt(h->multi, CURLMOPT_SOCKETFUNCTION, http_socket_cb) != CURLM_OK ||
	    curl_multi_setopt(h->multi, CURLMOPT_SOCKETDATA, h) != CURLM_OK ||
	    curl_multi_setopt(h->multi, CURLMOPT_TIMERFUNCTION, http_timer_cb) != CURLM_OK ||
	    curl_multi_setopt(h->multi, CURLMOPT_TIMERDATA, h) != CURLM_OK)
		return -ENOMEM;
	r = http_set_opts(h, opts);
	if (r < 0)
		return r;
	if (h->insecure)
		log_warning("HTTP client: TLS certificate verification is DISABLED (insecure); "
		            "never use this outside tests");
	*ret = TAKE_PTR(h);
	return 0;
}

http_t *http_free(http_t *h)
{
	if (!h || h->freed)
		return NULL;
	while (h->reqs)
		http_cancel(h->reqs);
	/* Before the watches go: cleanup may still call the socket callback. */
	if (h->multi)
		curl_multi_cleanup(h->multi);
	h->multi = NULL;
	while (h->n_idle > 0)
		curl_easy_cleanup(h->idle[--h->n_idle]);
	while (h->socks)
		sock_free(h->socks);
	h->timer = ev_timer_del(h->timer);
	free(h->ca_file);
	free(h->ca_path);
	free(h->client_cert);
	free(h->client_key);
	free(h->user_agent);
	free(h->basic_user);
	if (h->basic_password)
		explicit_bzero(h->basic_password, strlen(h->basic_password));
	free(h->basic_password);
	if (h->dispatching > 0)
		h->freed = true; /* the dispatcher up the stack frees h */
	else
		free(h);
	return NULL;
}

bool http_should_retry(const struct http_response *resp)
{
	if (!resp)
		return false;
	switch (resp->error) {
	case 0:
		break;
	/* asking again cannot help, or the caller chose this */
	case -EMSGSIZE:
	case -EINVAL:
	case -EPROTONOSUPPORT:
	case -ECANCELED:
	case -ENOMEM:
		return false;
	default:
		return true;
	}
	if (resp->status == 429)
		return true;
	return resp->status >= 500 && resp->status <= 599 && resp->status != 501 &&
	       resp->status != 505;
}

usec_t http_retry_delay(const struct http_response *resp, unsigned attempt, usec_t base, usec_t cap)
{
	return backoff_full_jitter(base, cap, attempt, resp ? resp->retry_after : 0);
}
