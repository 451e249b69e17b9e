/* lib/http: libcurl's multi socket API on lib/ev, against real local servers
 * (tests/helpers/test_httpd: libmicrohttpd, plain and TLS; nginx-light for HTTP/2).
 * tests/run.sh runs this once per loop backend. */
#include <arpa/inet.h>
#include <check.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ev/ev.h"
#include "http/http-int.h"
#include "http/http.h"
#include "test_httpd.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/random.h"
#include "util/strutil.h"

#define MIB ((size_t)1024 * 1024)

struct env {
	ev_t *e;
	http_t *h;
	struct test_httpd *srv;
	char *dir;
	int fds;       /* fd_count() before anything was set up */
	unsigned done; /* callbacks run */
};

/* What a callback saw, copied out (the response is only valid during it). */
struct result {
	struct env *t;
	http_req_t *req;
	int calls;
	struct http_response resp; /* pointers cleared; copies below */
	char *error_message;
	char *body;
	char *content_type;
	char *x_method, *x_req_ct, *x_req_ua, *x_status, *x_conn;
	/* optional action run inside the callback */
	void (*then)(struct result *r);
	void *then_data;
};

static char *dup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

static void record_cb(http_req_t *req, const struct http_response *resp, void *userdata)
{
	struct result *r = userdata;

	ck_assert_ptr_eq(req, r->req);
	ck_assert_ptr_nonnull(resp->body);
	ck_assert_int_eq(resp->body[resp->body_len], '\0');
	r->calls++;
	r->t->done++;
	r->resp = *resp;
	r->resp.error_message = r->resp.body = r->resp.content_type = NULL;
	r->error_message = dup_or_null(resp->error_message);
	r->body = malloc(resp->body_len + 1);
	memcpy(r->body, resp->body, resp->body_len + 1);
	r->content_type = dup_or_null(resp->content_type);
	r->x_method = dup_or_null(http_response_header(req, "X-Method"));
	r->x_req_ct = dup_or_null(http_response_header(req, "x-request-content-type"));
	r->x_req_ua = dup_or_null(http_response_header(req, "X-Request-User-Agent"));
	r->x_status = dup_or_null(http_response_header(req, "X-TEST-STATUS"));
	r->x_conn = dup_or_null(http_response_header(req, "X-Conn"));
	ck_assert_ptr_null(http_response_header(req, "X-Not-There"));
	if (r->then)
		r->then(r);
}

static void result_clear(struct result *r)
{
	free(r->error_message);
	free(r->body);
	free(r->content_type);
	free(r->x_method);
	free(r->x_req_ct);
	free(r->x_req_ua);
	free(r->x_status);
	free(r->x_conn);
	memset(r, 0, sizeof(*r));
}

static void env_up_opts(struct env *t, const struct http_opts *o, const struct test_httpd_opts *so)
{
	memset(t, 0, sizeof(*t));
	t->fds = fd_count();
	ck_assert_int_eq(ev_new(&t->e, NULL), 0);
	ck_assert_str_eq(ev_backend(t->e), tu_backend());
	ck_assert_int_eq(test_httpd_start(so, &t->srv), 0);
	ck_assert_int_eq(http_new(t->e, o, &t->h), 0);
}

static void env_up(struct env *t)
{
	env_up_opts(t, NULL, NULL);
}

static void env_down(struct env *t)
{
	t->h = http_free(t->h);
	t->srv = test_httpd_stop(t->srv);
	t->e = ev_free(t->e);
	if (t->dir) {
		ck_assert_int_eq(rm_rf(t->dir), 0);
		free(t->dir);
	}
	/* every socket, watch and timer fd is gone again */
	ck_assert_int_eq(fd_count(), t->fds);
}

static http_req_t *go(struct env *t, struct result *r, const struct http_request *rq)
{
	r->t = t;
	ck_assert_int_eq(http_send(t->h, rq, record_cb, r, &r->req), 0);
	return r->req;
}

/* GET path (printf-style) on the test server. */
static http_req_t *get(struct env *t, struct result *r, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static http_req_t *get(struct env *t, struct result *r, const char *fmt, ...)
{
	char path[512], *url;
	va_list ap;
	http_req_t *req;

	va_start(ap, fmt);
	vsnprintf(path, sizeof(path), fmt, ap);
	va_end(ap);
	url = test_httpd_url(t->srv, "%s", path);
	req = go(t, r, &(struct http_request){.method = "GET", .url = url});
	free(url);
	return req;
}

static void run_until(struct env *t, unsigned done)
{
	/* a hang is caught by Check's per-test timeout */
	while (t->done < done)
		ck_assert_int_ge(ev_run_once(t->e, USEC_INFINITY), 0);
}

static void run_for(struct env *t, usec_t d)
{
	usec_t end = time_mono() + d;

	for (usec_t now = time_mono(); now < end; now = time_mono())
		ck_assert_int_ge(ev_run_once(t->e, end - now), 0);
}

static void assert_bytes(const struct result *r, size_t n)
{
	ck_assert_int_eq(r->resp.error, 0);
	ck_assert_int_eq(r->resp.status, 200);
	ck_assert_uint_eq(r->resp.body_len, n);
	for (size_t i = 0; i < n; i++)
		if ((uint8_t)r->body[i] != test_httpd_byte(i))
			ck_abort_msg("byte %zu differs", i);
}

/* ---- basics ------------------------------------------------------------ */

START_TEST(test_get_basic)
{
	struct env t;
	struct result r = {0}, e = {0};
	char *url;

	env_up(&t);
	get(&t, &r, "/status?code=200");
	ck_assert_uint_eq(http_in_flight(t.h), 1);
	run_until(&t, 1);
	ck_assert_uint_eq(http_in_flight(t.h), 0);
	ck_assert_int_eq(r.calls, 1);
	ck_assert_int_eq(r.resp.error, 0);
	ck_assert_int_eq(r.resp.status, 200);
	ck_assert_str_eq(r.body, "status 200");
	ck_assert_str_eq(r.x_status, "200");
	ck_assert_int_eq(r.resp.http_version, 1);
	ck_assert(!r.resp.reused_connection);
	ck_assert_uint_eq(r.resp.retry_after, 0);
	ck_assert(!http_should_retry(&r.resp));
	/* the default User-Agent, seen by the server */
	url = test_httpd_url(t.srv, "/echo");
	go(&t, &e, &(struct http_request){.method = "GET", .url = url});
	free(url);
	run_until(&t, 2);
	ck_assert_str_eq(e.x_req_ua, "lessee/" LESSEE_VERSION);
	ck_assert_str_eq(e.x_method, "GET");
	ck_assert_str_eq(e.content_type, "application/octet-stream");
	ck_assert(e.resp.reused_connection);
	result_clear(&r);
	result_clear(&e);
	env_down(&t);
}
END_TEST

START_TEST(test_user_agent_and_headers)
{
	struct env t;
	struct result r = {0};
	const char *hdrs[] = {"Content-Type: application/json", "X-Extra: 1", NULL};
	char *url;

	env_up_opts(&t, &(struct http_opts){.user_agent = "probe/9"}, NULL);
	url = test_httpd_url(t.srv, "/echo");
	go(&t, &r,
	   &(struct http_request){
	       .method = "POST", .url = url, .headers = hdrs, .body = "{}", .body_len = 2});
	free(url);
	run_until(&t, 1);
	ck_assert_str_eq(r.x_req_ua, "probe/9");
	ck_assert_str_eq(r.x_req_ct, "application/json");
	ck_assert_str_eq(r.body, "{}");
	result_clear(&r);
	env_down(&t);
}
END_TEST

START_TEST(test_rejected_at_send)
{
	struct env t;
	const char *crlf[] = {"X-A: 1\r\nX-Injected: 1", NULL};
	const char *noname[] = {": x", NULL};
	http_req_t *req = (http_req_t *)(uintptr_t)1;
	struct {
		const char *method, *url;
		const char *const *headers;
		size_t body_len;
		int want;
	} bad[] = {
	    {"GET", "not a url", NULL, 0, -EINVAL},
	    {"GET", "ftp://127.0.0.1/x", NULL, 0, -EPROTONOSUPPORT},
	    {"GET", "file:///etc/passwd", NULL, 0, -EPROTONOSUPPORT},
	    {"get", "http://127.0.0.1/", NULL, 0, -EINVAL},
	    {"GE T", "http://127.0.0.1/", NULL, 0, -EINVAL},
	    {"", "http://127.0.0.1/", NULL, 0, -EINVAL},
	    {"GET", "http://127.0.0.1/", crlf, 0, -EINVAL},
	    {"GET", "http://127.0.0.1/", noname, 0, -EINVAL},
	    {"GET", "http://127.0.0.1/", NULL, 3, -EINVAL},
	    {"HEAD", "http://127.0.0.1/", NULL, 3, -EINVAL},
	};

	env_up(&t);
	for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
		struct http_request rq = {.method = bad[i].method,
		                          .url = bad[i].url,
		                          .headers = bad[i].headers,
		                          .body = bad[i].body_len ? "abc" : NULL,
		                          .body_len = bad[i].body_len};
		ck_assert_msg(http_send(t.h, &rq, record_cb, NULL, &req) == bad[i].want, "case %zu",
		              i);
		ck_assert_ptr_eq(req, (http_req_t *)(uintptr_t)1); /* ret untouched */
	}
	ck_assert_uint_eq(http_in_flight(t.h), 0);
	run_for(&t, 50 * USEC_PER_MSEC); /* and no callback ever runs (userdata NULL would crash) */
	http_cancel(NULL);
	ck_assert_ptr_null(http_free(NULL));
	env_down(&t);
}
END_TEST

START_TEST(test_no_redirect)
{
	struct env t;
	struct result r = {0};

	env_up(&t);
	get(&t, &r, "/status?code=302&location=/echo");
	run_until(&t, 1);
	ck_assert_int_eq(r.resp.error, 0);
	ck_assert_int_eq(r.resp.status, 302);
	ck_assert_uint_eq(test_httpd_requests(t.srv), 1);
	result_clear(&r);
	env_down(&t);
}
END_TEST

/* ---- connections ------------------------------------------------------- */

#define CHAIN 50

struct chain {
	struct env *t;
	struct result r[CHAIN];
	int next;
};

static void chain_next(struct result *r)
{
	struct chain *c = r->then_data;

	if (c->next < CHAIN) {
		int i = c->next++;
		struct result *n = &c->r[i];

		n->then = chain_next;
		n->then_data = c;
		/* sending from inside a callback */
		get(c->t, n, "/bytes?n=%d", 100 + i);
	}
}

START_TEST(test_keepalive_reuse)
{
	struct env t;
	struct chain c = {.t = &t};

	env_up(&t);
	c.next = 1;
	c.r[0].then = chain_next;
	c.r[0].then_data = &c;
	get(&t, &c.r[0], "/bytes?n=100");
	run_until(&t, CHAIN);
	for (int i = 0; i < CHAIN; i++) {
		assert_bytes(&c.r[i], (size_t)(100 + i));
		ck_assert_msg(c.r[i].resp.reused_connection == (i > 0), "request %d", i);
		result_clear(&c.r[i]);
	}
	/* 50 requests, one TCP connection */
	ck_assert_uint_eq(test_httpd_requests(t.srv), CHAIN);
	ck_assert_uint_eq(test_httpd_connections(t.srv), 1);
	env_down(&t);
}
END_TEST

#define CONCURRENT 64

static void post_distinct(struct env *t, struct result *r, int i, char *body, size_t len)
{
	char *url = test_httpd_url(t->srv, "/echo");

	snprintf(body, len, "request %d ", i);
	for (size_t k = strlen(body); k < len; k++)
		body[k] = (char)('a' + (i + (int)k) % 26);
	go(t, r,
	   &(struct http_request){.method = "POST", .url = url, .body = body, .body_len = len});
	free(url);
}

static void concurrent(long max_host_connections, unsigned want_max_conns)
{
	struct env t;
	struct result *r = calloc(CONCURRENT, sizeof(*r));
	char *bodies[CONCURRENT];

	env_up_opts(&t, &(struct http_opts){.max_host_connections = max_host_connections}, NULL);
	for (int i = 0; i < CONCURRENT; i++) {
		size_t len = 32 + (size_t)i * 997;

		bodies[i] = malloc(len);
		post_distinct(&t, &r[i], i, bodies[i], len);
	}
	ck_assert_uint_eq(http_in_flight(t.h), CONCURRENT);
	run_until(&t, CONCURRENT);
	for (int i = 0; i < CONCURRENT; i++) {
		size_t len = 32 + (size_t)i * 997;

		ck_assert_int_eq(r[i].calls, 1);
		ck_assert_int_eq(r[i].resp.status, 200);
		ck_assert_uint_eq(r[i].resp.body_len, len);
		ck_assert(memcmp(r[i].body, bodies[i], len) == 0);
		free(bodies[i]);
		result_clear(&r[i]);
	}
	ck_assert_uint_eq(test_httpd_requests(t.srv), CONCURRENT);
	ck_assert_uint_le(test_httpd_connections(t.srv), want_max_conns);
	free(r);
	env_down(&t);
}

START_TEST(test_concurrent_64)
{
	concurrent(0, CONCURRENT);
}
END_TEST

START_TEST(test_max_host_connections)
{
	concurrent(4, 4);
}
END_TEST

/* fd 0 is a socket like any other: close stdin so curl's socket gets it. */
START_TEST(test_fd_zero)
{
	struct env t;
	struct result r = {0};
	char link[64] = "";
	int fd;

	env_up(&t);
	close(STDIN_FILENO);
	get(&t, &r, "/bytes?n=5000");
	run_until(&t, 1);
	assert_bytes(&r, 5000);
	/* the pooled connection still sits on fd 0 */
	ck_assert_int_gt(readlink("/proc/self/fd/0", link, sizeof(link) - 1), 0);
	ck_assert_msg(startswith(link, "socket:"), "fd 0 is %s", link);
	result_clear(&r);
	get(&t, &r, "/bytes?n=7000");
	run_until(&t, 2);
	assert_bytes(&r, 7000);
	ck_assert(r.resp.reused_connection);
	result_clear(&r);
	t.h = http_free(t.h);
	fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	ck_assert_int_eq(fd, STDIN_FILENO);
	env_down(&t);
}
END_TEST

/* ---- failures ---------------------------------------------------------- */

START_TEST(test_total_timeout)
{
	struct env t;
	struct result r = {0};
	char *url;

	env_up(&t);
	url = test_httpd_url(t.srv, "/sleep?ms=5000");
	go(&t, &r,
	   &(struct http_request){.method = "GET", .url = url, .timeout = 300 * USEC_PER_MSEC});
	free(url);
	run_until(&t, 1);
	ck_assert_int_eq(r.resp.error, -ETIMEDOUT);
	ck_assert_int_eq(r.resp.status, 0);
	ck_assert_uint_eq(r.resp.body_len, 0);
	ck_assert_ptr_nonnull(r.error_message);
	ck_assert_msg(strstr(r.error_message, "imed out"), "%s", r.error_message);
	ck_assert_uint_ge(r.resp.elapsed, 300 * USEC_PER_MSEC);
	ck_assert_uint_lt(r.resp.elapsed, 5 * USEC_PER_SEC);
	ck_assert(http_should_retry(&r.resp));
	result_clear(&r);
	env_down(&t);
}
END_TEST

START_TEST(test_connect_refused)
{
	struct env t;
	struct result r = {0};
	char url[128];

	env_up(&t);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/", tu_free_port());
	go(&t, &r, &(struct http_request){.method = "GET", .url = url});
	run_until(&t, 1);
	ck_assert_int_eq(r.resp.error, -ECONNREFUSED);
	ck_assert_int_eq(r.resp.status, 0);
	ck_assert(http_should_retry(&r.resp));
	result_clear(&r);
	env_down(&t);
}
END_TEST

/* A listener whose accept queue is full: the kernel drops further SYNs, so a
 * connect hangs until our connect timeout (nothing leaves 127.0.0.1). */
static int full_listener(int *ret_port, int *ret_filler)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int f = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	ck_assert_int_ge(s, 0);
	ck_assert_int_eq(bind(s, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(listen(s, 0), 0);
	ck_assert_int_eq(getsockname(s, (struct sockaddr *)&a, &len), 0);
	ck_assert_int_eq(connect(f, (struct sockaddr *)&a, sizeof(a)), 0);
	*ret_port = ntohs(a.sin_port);
	*ret_filler = f;
	return s;
}

START_TEST(test_connect_timeout)
{
	struct env t;
	struct result r = {0};
	char url[128];
	int port, filler, l;

	env_up(&t);
	l = full_listener(&port, &filler);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/", port);
	go(&t, &r,
	   &(struct http_request){.method = "GET",
	                          .url = url,
	                          .connect_timeout = 300 * USEC_PER_MSEC,
	                          .timeout = 20 * USEC_PER_SEC});
	run_until(&t, 1);
	ck_assert_int_eq(r.resp.error, -ETIMEDOUT);
	ck_assert_msg(strstr(r.error_message, "onnect"), "%s", r.error_message);
	/* the connect timeout ended it, not the 20 s total */
	ck_assert_uint_ge(r.resp.elapsed, 300 * USEC_PER_MSEC);
	ck_assert_uint_lt(r.resp.elapsed, 10 * USEC_PER_SEC);
	close(filler);
	close(l);
	result_clear(&r);
	env_down(&t);
}
END_TEST

static void get_capped(struct env *t, struct result *r, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void get_capped(struct env *t, struct result *r, size_t cap, const char *fmt, ...)
{
	char path[256], *url;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(path, sizeof(path), fmt, ap);
	va_end(ap);
	url = test_httpd_url(t->srv, "%s", path);
	go(t, r, &(struct http_request){.method = "GET", .url = url, .max_response = cap});
	free(url);
}

static void assert_too_big(struct result *r)
{
	ck_assert_int_eq(r->resp.error, -EMSGSIZE);
	ck_assert_int_eq(r->resp.status, 0);
	ck_assert_uint_eq(r->resp.body_len, 0);
	ck_assert_msg(strstr(r->error_message, "cap"), "%s", r->error_message);
	ck_assert(!http_should_retry(&r->resp));
}

START_TEST(test_body_cap)
{
	struct env t;
	struct result r[8] = {{0}};

	env_up(&t);
	get_capped(&t, &r[0], 1000, "/bytes?n=1000");
	get_capped(&t, &r[1], 1000, "/bytes?n=1001");
	get_capped(&t, &r[2], 1000, "/bytes?n=1000&chunked=1");
	get_capped(&t, &r[3], 1000, "/bytes?n=1001&chunked=1");
	get_capped(&t, &r[4], 0, "/bytes?n=%zu", MIB);
	get_capped(&t, &r[5], 0, "/bytes?n=%zu", MIB + 1);
	get_capped(&t, &r[6], 0, "/bytes?n=%zu&chunked=1", MIB + 1);
	get_capped(&t, &r[7], 0, "/bytes?n=%llu", 1ULL << 40); /* claims 1 TiB */
	run_until(&t, 8);
	assert_bytes(&r[0], 1000);
	assert_too_big(&r[1]);
	assert_bytes(&r[2], 1000);
	assert_too_big(&r[3]);
	assert_bytes(&r[4], MIB);
	for (int i = 5; i < 8; i++)
		assert_too_big(&r[i]);
	for (int i = 0; i < 8; i++)
		result_clear(&r[i]);
	env_down(&t);
}
END_TEST

/* The path goes as it is: a run id of "." or ".." (valid in protocol v1) in
 * /v1/runs/{id}/log must not be folded away into another resource. */
START_TEST(test_path_as_is)
{
	static const char *const paths[] = {"/path/runs/../log", "/path/runs/./log"};
	struct env t;
	struct result r[ELEMENTSOF(paths)] = {{0}};

	env_up(&t);
	for (size_t i = 0; i < ELEMENTSOF(paths); i++)
		get(&t, &r[i], "%s", paths[i]);
	run_until(&t, ELEMENTSOF(paths));
	for (size_t i = 0; i < ELEMENTSOF(paths); i++) {
		ck_assert_int_eq(r[i].resp.status, 200);
		ck_assert_str_eq(r[i].body, paths[i]);
		result_clear(&r[i]);
	}
	env_down(&t);
}
END_TEST

/* An error answer over the cap is still that answer: a proxy's error page on
 * a 503 is a 503 to retry, not a body to refuse (which dropped a finished
 * run's result).  Its status stands, with what of the body fit. */
START_TEST(test_error_answer_over_cap)
{
	static const long st[] = {503, 503, 502, 429, 404, 307};
	static const char *const how[] = {"", "&chunked=1", "", "&chunked=1", "", ""};
	struct env t;
	struct result r[ELEMENTSOF(st)] = {{0}};

	env_up(&t);
	for (size_t i = 0; i < ELEMENTSOF(st); i++)
		get_capped(&t, &r[i], 1000, "/bytes?n=10000&status=%ld%s", st[i], how[i]);
	run_until(&t, ELEMENTSOF(st));
	for (size_t i = 0; i < ELEMENTSOF(st); i++) {
		ck_assert_msg(r[i].resp.error == 0, "%ld: error %d", st[i], r[i].resp.error);
		ck_assert_int_eq(r[i].resp.status, st[i]);
		ck_assert_uint_le(r[i].resp.body_len, 1000);
		ck_assert(http_should_retry(&r[i].resp) == (st[i] >= 429 && st[i] != 404));
		result_clear(&r[i]);
	}
	env_down(&t);
}
END_TEST

static long max_rss_kib(void)
{
	struct rusage ru;

	ck_assert_int_eq(getrusage(RUSAGE_SELF, &ru), 0);
	return ru.ru_maxrss;
}

/* A server streaming 2 GiB at a client with a 1 MiB cap: the transfer is cut at
 * the cap, and the process never grows anywhere near the stream's size. */
START_TEST(test_cap_bounds_memory)
{
	struct env t;
	struct result r = {0};
	long before;

	env_up(&t);
	before = max_rss_kib();
	get_capped(&t, &r, MIB, "/bytes?n=%llu&chunked=1", 2ULL << 30);
	run_until(&t, 1);
	assert_too_big(&r);
	ck_assert_int_lt(max_rss_kib() - before, 64 * 1024);
	result_clear(&r);
	env_down(&t);
}
END_TEST

/* ---- bodies ------------------------------------------------------------ */

static void roundtrip(struct env *t, const char *method, size_t len, const char *ctype)
{
	struct result r = {0};
	unsigned before = t->done;
	char *body = malloc(len ? len : 1), *copy = malloc(len ? len : 1), *url, hdr[128];
	const char *hdrs[] = {hdr, NULL};

	random_bytes(body, len);
	if (len > 10)
		memset(body + len / 2, 0, 10); /* NULs in the middle */
	memcpy(copy, body, len);
	snprintf(hdr, sizeof(hdr), "Content-Type: %s", ctype ? ctype : "x/y");
	url = test_httpd_url(t->srv, "/echo");
	go(t, &r,
	   &(struct http_request){.method = method,
	                          .url = url,
	                          .headers = ctype ? hdrs : NULL,
	                          .body = body,
	                          .body_len = len,
	                          .max_response = 2 * MIB});
	free(url);
	memset(body, 'X', len); /* http_send copied it */
	free(body);
	run_until(t, before + 1);
	ck_assert_int_eq(r.resp.status, 200);
	ck_assert_str_eq(r.x_method, method);
	ck_assert_uint_eq(r.resp.body_len, len);
	ck_assert(memcmp(r.body, copy, len) == 0);
	/* curl's invented x-www-form-urlencoded is not sent */
	if (ctype)
		ck_assert_str_eq(r.x_req_ct, ctype);
	else
		ck_assert_ptr_null(r.x_req_ct);
	free(copy);
	result_clear(&r);
}

START_TEST(test_body_roundtrip)
{
	struct env t;

	env_up(&t);
	roundtrip(&t, "POST", MIB, "application/octet-stream");
	roundtrip(&t, "PATCH", MIB, NULL);
	roundtrip(&t, "PUT", 4097, "application/json");
	roundtrip(&t, "POST", 0, NULL);
	roundtrip(&t, "PATCH", 0, NULL);
	roundtrip(&t, "DELETE", 0, NULL);
	roundtrip(&t, "DELETE", 100, NULL);
	env_down(&t);
}
END_TEST

START_TEST(test_head)
{
	struct env t;
	struct result r = {0};
	char *url;

	env_up(&t);
	url = test_httpd_url(t.srv, "/bytes?n=12345");
	go(&t, &r, &(struct http_request){.method = "HEAD", .url = url});
	free(url);
	run_until(&t, 1);
	ck_assert_int_eq(r.resp.error, 0);
	ck_assert_int_eq(r.resp.status, 200);
	ck_assert_uint_eq(r.resp.body_len, 0);
	result_clear(&r);
	env_down(&t);
}
END_TEST

/* ---- cancellation and teardown ----------------------------------------- */

START_TEST(test_cancel_in_flight)
{
	struct env t;
	struct result a = {0}, b = {0}, c = {0}, d = {0}, x = {0};

	env_up(&t);
	get(&t, &a, "/sleep?ms=400");
	get(&t, &b, "/sleep?ms=400");
	get(&t, &c, "/sleep?ms=400");
	get(&t, &d, "/status?code=204");
	/* cancelled before the loop ever ran */
	get(&t, &x, "/status?code=200");
	http_cancel(x.req);
	run_until(&t, 1);
	ck_assert_int_eq(d.calls, 1);
	/* b is now mid-flight: connected, the server is sleeping on it */
	ck_assert_uint_eq(http_in_flight(t.h), 3);
	http_cancel(b.req);
	ck_assert_uint_eq(http_in_flight(t.h), 2);
	run_until(&t, 3);
	ck_assert_str_eq(a.body, "slept\n");
	ck_assert_str_eq(c.body, "slept\n");
	run_for(&t, 100 * USEC_PER_MSEC);
	ck_assert_int_eq(b.calls, 0);
	ck_assert_int_eq(x.calls, 0);
	ck_assert_uint_eq(t.done, 3);
	result_clear(&a);
	result_clear(&c);
	result_clear(&d);
	env_down(&t);
}
END_TEST

static void cancel_other(struct result *r)
{
	struct result *other = r->then_data;

	http_cancel(other->req);
}

/* Two transfers that may finish in the same loop iteration: whichever callback
 * runs first cancels the other, whose result may already be queued in curl. */
struct observed {
	int calls;
	char label[32];
	long status;
	bool before_callback; /* the request's own callback had not run yet */
	struct result *watch;
};

static void observe(const char *label, const struct http_response *resp, void *ctx)
{
	struct observed *o = ctx;

	o->calls++;
	snprintf(o->label, sizeof(o->label), "%s", label);
	o->status = resp->status;
	o->before_callback = o->watch && o->watch->calls == 0;
}

/* The observer sees every completed request with its label, before the
 * request's callback, and never a cancelled one. */
START_TEST(test_observer)
{
	struct observed o = {0};
	struct http_opts opts = {.observer = observe, .observer_ctx = &o};
	struct env t;
	struct result a = {0}, x = {0};
	char *url;

	env_up_opts(&t, &opts, NULL);
	url = test_httpd_url(t.srv, "/status?code=503");
	o.watch = &a;
	go(&t, &a, &(struct http_request){.method = "GET", .url = url, .label = "claims"});
	free(url);
	run_until(&t, 1);
	ck_assert_int_eq(o.calls, 1);
	ck_assert_str_eq(o.label, "claims");
	ck_assert_int_eq(o.status, 503);
	ck_assert(o.before_callback);
	get(&t, &x, "/sleep?ms=300");
	run_for(&t, 50 * USEC_PER_MSEC);
	http_cancel(x.req);
	run_for(&t, 400 * USEC_PER_MSEC);
	ck_assert_int_eq(o.calls, 1);
	result_clear(&a);
	env_down(&t);
}
END_TEST

START_TEST(test_cancel_from_callback)
{
	struct env t;
	struct result a = {0}, b = {0}, s = {0};

	env_up(&t);
	for (int round = 0; round < 20; round++) {
		get(&t, &a, "/bytes?n=%d", 10 + round);
		get(&t, &b, "/bytes?n=%d", 10 + round);
		a.then = b.then = cancel_other;
		a.then_data = &b;
		b.then_data = &a;
		run_until(&t, t.done + 1);
		run_for(&t, 20 * USEC_PER_MSEC);
		ck_assert_int_eq(a.calls + b.calls, 1);
		ck_assert_uint_eq(http_in_flight(t.h), 0);
		result_clear(&a);
		result_clear(&b);
	}
	/* the client is still fine */
	get(&t, &s, "/status?code=200");
	run_until(&t, t.done + 1);
	ck_assert_int_eq(s.resp.status, 200);
	result_clear(&s);
	env_down(&t);
}
END_TEST

START_TEST(test_free_in_flight)
{
	struct env t;
	struct result r[8] = {{0}};

	env_up(&t);
	for (int i = 0; i < 8; i++)
		get(&t, &r[i], "/sleep?ms=3000");
	run_for(&t, 150 * USEC_PER_MSEC);
	ck_assert_uint_eq(http_in_flight(t.h), 8);
	t.h = http_free(t.h);
	/* no stale watch or timer fires afterwards */
	run_for(&t, 100 * USEC_PER_MSEC);
	for (int i = 0; i < 8; i++)
		ck_assert_int_eq(r[i].calls, 0);
	env_down(&t);
}
END_TEST

static void free_client(struct result *r)
{
	struct env *t = r->t;

	t->h = http_free(t->h);
}

START_TEST(test_free_from_callback)
{
	struct env t;
	struct result r[5] = {{0}};

	env_up(&t);
	for (int i = 1; i < 5; i++)
		get(&t, &r[i], "/sleep?ms=3000");
	r[0].then = free_client;
	get(&t, &r[0], "/status?code=200");
	run_until(&t, 1);
	ck_assert_ptr_null(t.h);
	run_for(&t, 100 * USEC_PER_MSEC);
	ck_assert_int_eq(r[0].calls, 1);
	for (int i = 1; i < 5; i++)
		ck_assert_int_eq(r[i].calls, 0);
	result_clear(&r[0]);
	env_down(&t);
}
END_TEST

/* ---- retries ----------------------------------------------------------- */

START_TEST(test_retry_after_header)
{
	struct env t;
	struct result a = {0}, b = {0}, c = {0};
	char date[64];
	time_t when = time(NULL) + 30;
	struct tm tm;

	strftime(date, sizeof(date), "%a,%%20%d%%20%b%%20%Y%%20%H:%M:%S%%20GMT",
	         gmtime_r(&when, &tm));
	env_up(&t);
	get(&t, &a, "/status?code=503&retry_after=7");
	get(&t, &b, "/status?code=429&retry_after=%s", date);
	get(&t, &c, "/status?code=503&retry_after=soon");
	run_until(&t, 3);
	ck_assert_int_eq(a.resp.status, 503);
	ck_assert_uint_eq(a.resp.retry_after, 7 * USEC_PER_SEC);
	ck_assert(http_should_retry(&a.resp));
	ck_assert_uint_ge(http_retry_delay(&a.resp, 0, 100 * USEC_PER_MSEC, USEC_PER_SEC),
	                  7 * USEC_PER_SEC);
	ck_assert_int_eq(b.resp.status, 429);
	ck_assert_uint_ge(b.resp.retry_after, 27 * USEC_PER_SEC);
	ck_assert_uint_le(b.resp.retry_after, 30 * USEC_PER_SEC);
	ck_assert(http_should_retry(&b.resp));
	ck_assert_uint_eq(c.resp.retry_after, 0);
	result_clear(&a);
	result_clear(&b);
	result_clear(&c);
	env_down(&t);
}
END_TEST

START_TEST(test_retry_after_parse)
{
	/* Sun, 06 Nov 1994 08:49:37 GMT */
	usec_t t0 = 784111777ULL * USEC_PER_SEC;
	static const struct {
		const char *v;
		usec_t want;
	} cases[] = {
	    {"120", 120 * USEC_PER_SEC},
	    {"  5 ", 5 * USEC_PER_SEC},
	    {"0", 0},
	    {"3600", HTTP_RETRY_AFTER_MAX},
	    {"86400", HTTP_RETRY_AFTER_MAX},
	    {"99999999999999999999999999", HTTP_RETRY_AFTER_MAX},
	    {"Sun, 06 Nov 1994 08:50:37 GMT", 60 * USEC_PER_SEC},
	    {"Sunday, 06-Nov-94 08:49:47 GMT", 10 * USEC_PER_SEC},
	    {"Sun Nov  6 08:49:57 1994", 20 * USEC_PER_SEC},
	    {"Sun, 06 Nov 1994 08:49:37 GMT", 0}, /* now */
	    {"Sun, 06 Nov 1994 07:00:00 GMT", 0}, /* past */
	    {"Mon, 07 Nov 1994 08:49:37 GMT", HTTP_RETRY_AFTER_MAX},
	    {"-5", 0},
	    {"5s", 0},
	    {"1.5", 0},
	    {"", 0},
	    {"soon", 0},
	    {"+5", 0},
	};

	for (size_t i = 0; i < ELEMENTSOF(cases); i++)
		ck_assert_msg(http_parse_retry_after(cases[i].v, t0) == cases[i].want,
		              "'%s' -> %llu", cases[i].v,
		              (unsigned long long)http_parse_retry_after(cases[i].v, t0));
	ck_assert_uint_eq(http_parse_retry_after(NULL, t0), 0);
}
END_TEST

START_TEST(test_should_retry)
{
	static const struct {
		int error;
		long status;
		bool want;
	} cases[] = {
	    {0, 200, false},          {0, 204, false},       {0, 301, false},
	    {0, 400, false},          {0, 401, false},       {0, 404, false},
	    {0, 409, false},          {0, 429, true},        {0, 500, true},
	    {0, 501, false},          {0, 502, true},        {0, 503, true},
	    {0, 504, true},           {0, 505, false},       {0, 507, true},
	    {-ECONNREFUSED, 0, true}, {-ETIMEDOUT, 0, true}, {-ECONNRESET, 0, true},
	    {-EHOSTUNREACH, 0, true}, {-EPROTO, 0, true},    {-EIO, 0, true},
	    {-EMSGSIZE, 0, false},    {-EINVAL, 0, false},   {-EPROTONOSUPPORT, 0, false},
	    {-ECANCELED, 0, false},
	};
	usec_t base = 100 * USEC_PER_MSEC, cap = 2 * USEC_PER_SEC;
	struct http_response plain = {.status = 503},
	                     floor = {.status = 503, .retry_after = 5 * USEC_PER_SEC};

	for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
		struct http_response r = {.error = cases[i].error, .status = cases[i].status};

		ck_assert_msg(http_should_retry(&r) == cases[i].want, "error %d status %ld",
		              cases[i].error, cases[i].status);
	}
	ck_assert(!http_should_retry(NULL));
	for (unsigned attempt = 0; attempt < 20; attempt++) {
		usec_t ceiling = attempt < 5 ? base << attempt : cap;

		for (int k = 0; k < 20; k++) {
			ck_assert_uint_le(http_retry_delay(&plain, attempt, base, cap),
			                  MIN(ceiling, cap));
			ck_assert_uint_ge(http_retry_delay(&floor, attempt, base, cap),
			                  5 * USEC_PER_SEC);
		}
	}
}
END_TEST

START_TEST(test_errno_mapping)
{
	static const struct {
		CURLcode code;
		long os_errno;
		int want;
	} cases[] = {
	    {CURLE_OK, 0, 0},
	    {CURLE_COULDNT_CONNECT, 0, -ECONNREFUSED},
	    {CURLE_COULDNT_CONNECT, ECONNREFUSED, -ECONNREFUSED},
	    {CURLE_COULDNT_CONNECT, EHOSTUNREACH, -EHOSTUNREACH},
	    {CURLE_COULDNT_CONNECT, ENETUNREACH, -ENETUNREACH},
	    {CURLE_COULDNT_CONNECT, ENOSPC, -ECONNREFUSED},
	    {CURLE_COULDNT_RESOLVE_HOST, 0, -EHOSTUNREACH},
	    {CURLE_OPERATION_TIMEDOUT, 0, -ETIMEDOUT},
	    {CURLE_RECV_ERROR, ECONNRESET, -ECONNRESET},
	    {CURLE_SEND_ERROR, EPIPE, -EPIPE},
	    {CURLE_GOT_NOTHING, 0, -ECONNRESET},
	    {CURLE_PARTIAL_FILE, 0, -ECONNRESET},
	    {CURLE_FILESIZE_EXCEEDED, 0, -EMSGSIZE},
	    {CURLE_PEER_FAILED_VERIFICATION, 0, -EPROTO},
	    {CURLE_SSL_CONNECT_ERROR, 0, -EPROTO},
	    {CURLE_SSL_CACERT_BADFILE, 0, -EPROTO},
	    {CURLE_HTTP2_STREAM, 0, -EPROTO},
	    {CURLE_WEIRD_SERVER_REPLY, 0, -EPROTO},
	    {CURLE_UNSUPPORTED_PROTOCOL, 0, -EPROTONOSUPPORT},
	    {CURLE_URL_MALFORMAT, 0, -EINVAL},
	    {CURLE_OUT_OF_MEMORY, 0, -ENOMEM},
	    {CURLE_ABORTED_BY_CALLBACK, 0, -ECANCELED},
	    {CURLE_WRITE_ERROR, 0, -EIO},
	    {CURLE_QUOTE_ERROR, 0, -EIO},
	};

	for (size_t i = 0; i < ELEMENTSOF(cases); i++)
		ck_assert_msg(http_errno_from_curlcode(cases[i].code, cases[i].os_errno) ==
		                  cases[i].want,
		              "CURLcode %d os_errno %ld", cases[i].code, cases[i].os_errno);
}
END_TEST

/* ---- TLS --------------------------------------------------------------- */

static char *tls_dir_make(void)
{
	char *dir = tu_tmpdir("http-tls");

	ck_assert_ptr_nonnull(dir);
	ck_assert_int_eq(test_tls_make(dir, "a"), 0);
	ck_assert_int_eq(test_tls_make(dir, "b"), 0);
	return dir;
}

static char *path_in(const char *dir, const char *name)
{
	char *p;

	ck_assert_int_ge(asprintf(&p, "%s/%s", dir, name), 0);
	return p;
}

static void tls_get(struct env *t, struct result *r, const struct http_opts *o, const char *host)
{
	char url[256];

	t->h = http_free(t->h);
	ck_assert_int_eq(http_new(t->e, o, &t->h), 0);
	snprintf(url, sizeof(url), "https://%s:%d/status?code=200", host, test_httpd_port(t->srv));
	go(t, r, &(struct http_request){.method = "GET", .url = url});
	run_until(t, t->done + 1);
}

START_TEST(test_tls_verify)
{
	char *dir = tls_dir_make(), *cert = path_in(dir, "a.pem"), *key = path_in(dir, "a.key");
	char *ca_a = path_in(dir, "a-ca.pem"), *ca_b = path_in(dir, "b-ca.pem");
	struct env t;
	struct result r = {0};

	env_up_opts(&t, NULL, &(struct test_httpd_opts){.cert_file = cert, .key_file = key});
	t.dir = dir;
	/* unknown CA: refused */
	tls_get(&t, &r, NULL, "127.0.0.1");
	ck_assert_int_eq(r.resp.error, -EPROTO);
	ck_assert_msg(strstr(r.error_message, "certificate"), "%s", r.error_message);
	result_clear(&r);
	/* the wrong extra CA: refused */
	tls_get(&t, &r, &(struct http_opts){.ca_file = ca_b}, "127.0.0.1");
	ck_assert_int_eq(r.resp.error, -EPROTO);
	result_clear(&r);
	/* the right extra CA: accepted */
	tls_get(&t, &r, &(struct http_opts){.ca_file = ca_a}, "127.0.0.1");
	ck_assert_int_eq(r.resp.error, 0);
	ck_assert_int_eq(r.resp.status, 200);
	result_clear(&r);
	/* right CA, wrong name (the certificate is for IP 127.0.0.1 only) */
	tls_get(&t, &r, &(struct http_opts){.ca_file = ca_a}, "localhost");
	ck_assert_int_eq(r.resp.error, -EPROTO);
	result_clear(&r);
	/* insecure (tests only) */
	tls_get(&t, &r, &(struct http_opts){.insecure = true}, "127.0.0.1");
	ck_assert_int_eq(r.resp.status, 200);
	result_clear(&r);
	/* a ca_file that does not exist is an error at http_new */
	t.h = http_free(t.h);
	ck_assert_int_eq(http_new(t.e, &(struct http_opts){.ca_file = "/nonexistent/ca.pem"}, &t.h),
	                 -ENOENT);
	free(cert);
	free(key);
	free(ca_a);
	free(ca_b);
	env_down(&t);
}
END_TEST

/* The system store stays trusted when ca_file is given: in a private mount
 * namespace the system CA directory is replaced by one that holds only CA "b";
 * a client with ca_file = CA "a" must still accept a server signed by "b". */
struct store_case {
	char *dir, *cert, *key, *ca_a, *ca_b, *certs, *ca_copy;
};

static void store_case_free(struct store_case *c)
{
	free(c->dir);
	free(c->cert);
	free(c->key);
	free(c->ca_a);
	free(c->ca_b);
	free(c->certs);
	free(c->ca_copy);
}

/* One GET against a fresh HTTPS test server with "b"'s certificate; its status. */
static int store_request(const struct store_case *c, const char *ca_file)
{
	struct env t = {0};
	struct result r = {0};
	char url[128];
	int status = -1;

	if (test_httpd_start(&(struct test_httpd_opts){.cert_file = c->cert, .key_file = c->key},
	                     &t.srv) < 0)
		return -1;
	if (ev_new(&t.e, NULL) < 0 ||
	    http_new(t.e, &(struct http_opts){.ca_file = ca_file}, &t.h) < 0)
		return -1;
	snprintf(url, sizeof(url), "https://127.0.0.1:%d/status?code=200", test_httpd_port(t.srv));
	r.t = &t;
	if (http_send(t.h, &(struct http_request){.method = "GET", .url = url}, record_cb, &r,
	              &r.req) == 0)
		while (t.done < 1 && ev_run_once(t.e, USEC_INFINITY) >= 0)
			;
	status = (int)r.resp.status;
	result_clear(&r);
	http_free(t.h);
	ev_free(t.e);
	test_httpd_stop(t.srv);
	return status;
}

/* Runs in a forked child, which starts its own server: a parent's server
 * threads do not exist in a child, and their memory would look leaked. */
static int store_child(struct store_case *c)
{
	char *rehash[] = {"openssl", "rehash", c->certs, NULL};

	if (unshare(CLONE_NEWNS) < 0)
		return errno == EPERM ? 77 : 10;
	if (mount("none", "/", "none", MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount(c->certs, "/etc/ssl/certs", "none", MS_BIND, NULL) < 0)
		return 11;
	if (test_run_quiet(c->dir, rehash) < 0)
		return 12;
	return store_request(c, c->ca_a) == 200 ? 0 : 20;
}

START_TEST(test_tls_system_store_kept)
{
	struct store_case c = {.dir = tls_dir_make()};
	char *data;
	size_t len;
	int st, code;
	pid_t pid;

	c.cert = path_in(c.dir, "b.pem");
	c.key = path_in(c.dir, "b.key");
	c.ca_a = path_in(c.dir, "a-ca.pem");
	c.ca_b = path_in(c.dir, "b-ca.pem");
	c.certs = path_in(c.dir, "system-certs");
	c.ca_copy = path_in(c.dir, "system-certs/b.pem");
	ck_assert_msg(access("/etc/ssl/certs", F_OK) == 0, "no /etc/ssl/certs (ca-certificates)");
	ck_assert_int_eq(mkdir(c.certs, 0755), 0);
	ck_assert_int_eq(read_file_capped(c.ca_b, 65536, &data, &len), 0);
	ck_assert_int_eq(write_file_atomic(c.ca_copy, data, len, 0644), 0);
	free(data);
	/* outside the namespace, CA "a" alone does not vouch for "b"'s server */
	ck_assert_int_eq(store_request(&c, c.ca_a), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		code = store_child(&c);
		store_case_free(&c);
		_exit(code);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert(WIFEXITED(st));
	if (WEXITSTATUS(st) == 77)
		fprintf(stderr,
		        "test_tls_system_store_kept: no mount namespaces here, not checked\n");
	else
		ck_assert_int_eq(WEXITSTATUS(st), 0);
	ck_assert_int_eq(rm_rf(c.dir), 0);
	store_case_free(&c);
}
END_TEST

/* HTTP/2 when the server offers it (nginx-light, TLS + ALPN h2): 16 concurrent
 * requests are multiplexed over one connection. */
static const char nginx_h2[] =
    "server {\n"
    "  listen 127.0.0.1:@PORT@ ssl http2;\n"
    "  ssl_certificate @DIR@/a.pem;\n"
    "  ssl_certificate_key @DIR@/a.key;\n"
    "  location / { add_header X-Conn $connection always; return 200 \"h2\\n\"; }\n"
    "}\n";

START_TEST(test_http2)
{
	char *dir = tls_dir_make(), *ca_a = path_in(dir, "a-ca.pem"), url[128];
	struct test_nginx *ngx = NULL;
	struct result r[16] = {{0}};
	struct env t;

	ck_assert_msg(test_nginx_binary(), "nginx-light is not installed (scripts/deps.sh test)");
	env_up_opts(&t, &(struct http_opts){.ca_file = ca_a}, NULL);
	t.dir = dir;
	ck_assert_int_eq(test_nginx_start(dir, nginx_h2, &ngx), 0);
	snprintf(url, sizeof(url), "https://127.0.0.1:%d/", test_nginx_port(ngx));
	for (int i = 0; i < 16; i++)
		go(&t, &r[i], &(struct http_request){.method = "GET", .url = url});
	run_until(&t, 16);
	ck_assert_ptr_nonnull(r[0].x_conn);
	for (int i = 0; i < 16; i++) {
		ck_assert_int_eq(r[i].resp.error, 0);
		ck_assert_int_eq(r[i].resp.status, 200);
		ck_assert_int_eq(r[i].resp.http_version, 2);
		ck_assert_str_eq(r[i].body, "h2\n");
		/* nginx's $connection: the same TCP connection for all of them */
		ck_assert_str_eq(r[i].x_conn, r[0].x_conn);
	}
	for (int i = 0; i < 16; i++)
		result_clear(&r[i]);
	t.h = http_free(t.h);
	ngx = test_nginx_stop(ngx);
	free(ca_a);
	env_down(&t);
}
END_TEST

static Suite *http_suite(void)
{
	Suite *s = suite_create("http");
	TCase *core = tcase_create("core"), *fail = tcase_create("failures"),
	      *life = tcase_create("lifetime"), *retry = tcase_create("retry"),
	      *tls = tcase_create("tls");

	tcase_add_test(core, test_get_basic);
	tcase_add_test(core, test_user_agent_and_headers);
	tcase_add_test(core, test_rejected_at_send);
	tcase_add_test(core, test_no_redirect);
	tcase_add_test(core, test_keepalive_reuse);
	tcase_add_test(core, test_concurrent_64);
	tcase_add_test(core, test_max_host_connections);
	tcase_add_test(core, test_fd_zero);
	tcase_add_test(core, test_body_roundtrip);
	tcase_add_test(core, test_head);
	tcase_add_test(fail, test_total_timeout);
	tcase_add_test(fail, test_connect_refused);
	tcase_add_test(fail, test_connect_timeout);
	tcase_add_test(fail, test_body_cap);
	tcase_add_test(fail, test_error_answer_over_cap);
	tcase_add_test(fail, test_path_as_is);
	tcase_add_test(fail, test_cap_bounds_memory);
	tcase_add_test(life, test_cancel_in_flight);
	tcase_add_test(life, test_observer);
	tcase_add_test(life, test_cancel_from_callback);
	tcase_add_test(life, test_free_in_flight);
	tcase_add_test(life, test_free_from_callback);
	tcase_add_test(retry, test_retry_after_header);
	tcase_add_test(retry, test_retry_after_parse);
	tcase_add_test(retry, test_should_retry);
	tcase_add_test(retry, test_errno_mapping);
	tcase_add_test(tls, test_tls_verify);
	tcase_add_test(tls, test_tls_system_store_kept);
	tcase_add_test(tls, test_http2);
	tcase_set_timeout(core, 60);
	tcase_set_timeout(fail, 60);
	tcase_set_timeout(life, 60);
	tcase_set_timeout(tls, 120);
	suite_add_tcase(s, core);
	suite_add_tcase(s, fail);
	suite_add_tcase(s, life);
	suite_add_tcase(s, retry);
	suite_add_tcase(s, tls);
	return s;
}

int main(void)
{
	ev_t *e = NULL;
	http_t *h = NULL;

	/* curl_global_init happens once, here in the parent, so each forked test
	 * starts from the same state and its fd count is stable. */
	if (ev_new(&e, NULL) < 0 || http_new(e, NULL, &h) < 0)
		return EXIT_FAILURE;
	http_free(h);
	ev_free(e);
	return tu_run(http_suite());
}
