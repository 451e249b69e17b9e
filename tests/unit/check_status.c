/* lib/obs/status and lib/obs/heartbeat on a real loop.
 *
 * The status server runs on an ev loop that the test thread steps; clients
 * are threads doing plain blocking socket I/O (so a request's bytes are
 * exactly what the test says), or raw sockets the test holds open.  The
 * heartbeat's target is a small libmicrohttpd server in its own threads that
 * counts what arrives. */
#include <arpa/inet.h>
#include <check.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ev/ev.h"
#include "log/log.h"
#include "obs/heartbeat.h"
#include "obs/metrics.h"
#include "obs/status.h"
#include "obs/status_cli.h"
#include "promparse.h"
#include "testutil.h"
#include "util/buf.h"
#include "util/fileio.h"
#include "util/strutil.h"

#define DEADLINE (60 * USEC_PER_SEC) /* only ever reached when something is broken */
#define STEP (10 * USEC_PER_MSEC)

/* ---- the server under test ------------------------------------------------ */

struct fx {
	ev_t *ev;
	status_t *st;
	metrics_t *metrics;
	metric_t *scrapes;
	bool ready, healthy, fail_render;
	const char *not_ready_reason;
	char status_doc[2048];
};

static int fx_metrics(struct buf *out, void *userdata)
{
	struct fx *f = userdata;

	if (f->fail_render)
		return -ENOMEM;
	metric_add(f->scrapes, 1);
	return metrics_render(f->metrics, out);
}

static int fx_status(struct buf *out, void *userdata)
{
	struct fx *f = userdata;

	return f->fail_render ? -ENOMEM : buf_appends(out, f->status_doc);
}

static bool fx_ready(const char **ret_reason, void *userdata)
{
	struct fx *f = userdata;

	*ret_reason = f->not_ready_reason;
	return f->ready;
}

static bool fx_healthy(const char **ret_reason, void *userdata)
{
	struct fx *f = userdata;

	*ret_reason = "worker wedged";
	return f->healthy;
}

static struct sockaddr_in loopback(uint16_t port)
{
	return (struct sockaddr_in){
	    .sin_family = AF_INET,
	    .sin_port = htons(port),
	    .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
	};
}

static void fx_start(struct fx *f, const struct status_limits *limits)
{
	const struct status_handlers h = {
	    .metrics = fx_metrics,
	    .status_json = fx_status,
	    .ready = fx_ready,
	    .healthy = fx_healthy,
	    .userdata = f,
	};
	struct sockaddr_in sa = loopback(0);

	*f = (struct fx){.healthy = true, .not_ready_reason = "API not reached yet"};
	snprintf(f->status_doc, sizeof(f->status_doc), "{\"phase\":\"running\",\"runs\":[]}");
	ck_assert_int_eq(ev_new(&f->ev, NULL), 0);
	f->metrics = metrics_new();
	f->scrapes = metrics_counter(f->metrics, "t_scrapes_total", "Scrapes", NULL);
	ck_assert_int_eq(status_new(f->ev, (struct sockaddr *)&sa, sizeof(sa), &h, limits, &f->st),
	                 0);
	ck_assert_uint_ne(status_port(f->st), 0);
}

static void fx_stop(struct fx *f)
{
	status_free(f->st);
	metrics_free(f->metrics);
	ev_free(f->ev);
}

static void step_until(ev_t *e, bool (*cond)(void *), void *arg, const char *what)
{
	usec_t deadline = time_mono() + DEADLINE;

	while (!cond(arg)) {
		ck_assert_msg(time_mono() < deadline, "gave up waiting for: %s", what);
		ck_assert_int_ge(ev_run_once(e, STEP), 0);
	}
}

/* ---- clients -------------------------------------------------------------- */

static int connect_loopback(uint16_t port, bool nonblock)
{
	struct sockaddr_in sa = loopback(port);
	struct timeval tv = {.tv_sec = 60};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0), 0);

	ck_assert_int_ge(fd, 0);
	/* a broken server must fail the test, not hang its thread */
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		ck_assert_msg(nonblock && errno == EINPROGRESS, "connect: %s", strerror(errno));
	return fd;
}

/* One request on its own connection, in a thread. */
struct client {
	pthread_t thread;
	uint16_t port;
	char *request;
	size_t request_len;
	struct buf raw; /* everything the server sent */
	int send_error, recv_error;
	atomic_bool done;
};

static void *client_main(void *p)
{
	struct client *c = p;
	int fd = connect_loopback(c->port, false);
	char chunk[4096];
	size_t off = 0;
	ssize_t n;

	while (off < c->request_len) {
		n = send(fd, c->request + off, c->request_len - off, MSG_NOSIGNAL);
		if (n < 0) {
			c->send_error = errno;
			break;
		}
		off += (size_t)n;
	}
	while ((n = recv(fd, chunk, sizeof(chunk), 0)) > 0)
		buf_append(&c->raw, chunk, (size_t)n);
	if (n < 0)
		c->recv_error = errno;
	close(fd);
	atomic_store(&c->done, true);
	return NULL;
}

static void client_start(struct client *c, uint16_t port, const char *request, size_t len)
{
	*c = (struct client){.port = port, .raw = BUF_INIT(0), .request_len = len};
	c->request = malloc(len);
	ck_assert_ptr_nonnull(c->request);
	memcpy(c->request, request, len);
	ck_assert_int_eq(pthread_create(&c->thread, NULL, client_main, c), 0);
}

static bool client_done(void *p)
{
	return atomic_load(&((struct client *)p)->done);
}

static void client_finish(struct fx *f, struct client *c)
{
	step_until(f->ev, client_done, c, "the client's response");
	pthread_join(c->thread, NULL);
	free(c->request);
}

struct resp {
	int code;
	char content_type[128], allow[64], content_length[32];
	const char *body;
	size_t body_len;
	struct buf raw;
};

static void header_value(const char *head, const char *name, char *out, size_t n)
{
	size_t len = strlen(name);

	*out = '\0';
	for (const char *l = strstr(head, "\r\n"); l && l[2] != '\r'; l = strstr(l + 2, "\r\n"))
		if (strncasecmp(l + 2, name, len) == 0 && l[2 + len] == ':') {
			const char *v = l + 3 + len + strspn(l + 3 + len, " ");

			snprintf(out, n, "%.*s", (int)strcspn(v, "\r"), v);
			return;
		}
}

static void resp_parse(struct resp *r)
{
	const char *end = r->raw.data ? strstr(r->raw.data, "\r\n\r\n") : NULL;

	ck_assert_msg(end, "no complete response: \"%s\"", r->raw.data ? r->raw.data : "");
	ck_assert_int_eq(sscanf(r->raw.data, "HTTP/1.1 %d ", &r->code), 1);
	header_value(r->raw.data, "Content-Type", r->content_type, sizeof(r->content_type));
	header_value(r->raw.data, "Allow", r->allow, sizeof(r->allow));
	header_value(r->raw.data, "Content-Length", r->content_length, sizeof(r->content_length));
	r->body = end + 4;
	r->body_len = r->raw.len - (size_t)(r->body - r->raw.data);
}

/* A complete request/response while the test steps the loop. */
static void fetch_raw(struct fx *f, const char *request, size_t len, struct resp *ret)
{
	struct client c;

	client_start(&c, status_port(f->st), request, len);
	client_finish(f, &c);
	ck_assert_msg(!c.send_error && !c.recv_error, "client: send %s, recv %s",
	              strerror(c.send_error), strerror(c.recv_error));
	*ret = (struct resp){.raw = c.raw};
	resp_parse(ret);
}

static void fetch(struct fx *f, const char *method, const char *path, struct resp *ret)
{
	char rq[512];
	int n = snprintf(rq, sizeof(rq),
	                 "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", method,
	                 path);

	fetch_raw(f, rq, (size_t)n, ret);
}

static void resp_done(struct resp *r)
{
	buf_done(&r->raw);
}

#define ck_assert_body(r, s)                                                                       \
	do {                                                                                       \
		ck_assert_uint_eq((r)->body_len, strlen(s));                                       \
		ck_assert_mem_eq((r)->body, s, strlen(s));                                         \
	} while (0)

/* Has the server closed this connection?  (EOF or reset; never blocks) */
static bool peer_closed(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
	ssize_t n;
	char c;

	if (poll(&p, 1, 0) <= 0)
		return false;
	n = recv(fd, &c, 1, MSG_DONTWAIT | MSG_PEEK);
	return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/* ---- endpoints ------------------------------------------------------------ */

START_TEST(test_metrics_endpoint)
{
	struct fx f;
	struct resp r;
	prom_doc_t *d;
	char *err = NULL;

	fx_start(&f, NULL);
	fetch(&f, "GET", "/metrics", &r);
	ck_assert_int_eq(r.code, 200);
	ck_assert_str_eq(r.content_type, "text/plain; version=0.0.4; charset=utf-8");
	ck_assert_msg(prom_parse(r.body, r.body_len, &d, &err) == 0, "%s", err);
	ck_assert_double_eq(prom_value(d, "t_scrapes_total", NULL), 1);
	prom_free(d);
	resp_done(&r);
	/* a query string does not change the route */
	fetch(&f, "GET", "/metrics?name[]=x", &r);
	ck_assert_int_eq(r.code, 200);
	ck_assert_msg(prom_parse(r.body, r.body_len, &d, &err) == 0, "%s", err);
	ck_assert_double_eq(prom_value(d, "t_scrapes_total", NULL), 2);
	prom_free(d);
	resp_done(&r);
	ck_assert_uint_eq(status_requests(f.st), 2);
	fx_stop(&f);
}
END_TEST

START_TEST(test_probes)
{
	struct fx f;
	struct resp r;

	fx_start(&f, NULL);
	fetch(&f, "GET", "/healthz", &r);
	ck_assert_int_eq(r.code, 200);
	ck_assert_str_eq(r.content_type, "text/plain; charset=utf-8");
	ck_assert_body(&r, "ok\n");
	resp_done(&r);
	fetch(&f, "GET", "/readyz", &r);
	ck_assert_int_eq(r.code, 503);
	ck_assert_body(&r, "API not reached yet\n");
	resp_done(&r);
	f.ready = true;
	fetch(&f, "GET", "/readyz", &r);
	ck_assert_int_eq(r.code, 200);
	ck_assert_body(&r, "ready\n");
	resp_done(&r);
	f.ready = false;
	f.not_ready_reason = "draining";
	fetch(&f, "GET", "/readyz", &r);
	ck_assert_int_eq(r.code, 503);
	ck_assert_body(&r, "draining\n");
	resp_done(&r);
	f.healthy = false;
	fetch(&f, "GET", "/healthz", &r);
	ck_assert_int_eq(r.code, 503);
	ck_assert_body(&r, "worker wedged\n");
	resp_done(&r);
	fx_stop(&f);
}
END_TEST

START_TEST(test_status_endpoint)
{
	struct fx f;
	struct resp r;
	cJSON *j;

	fx_start(&f, NULL);
	fetch(&f, "GET", "/status", &r);
	ck_assert_int_eq(r.code, 200);
	ck_assert_str_eq(r.content_type, "application/json");
	j = cJSON_ParseWithLength(r.body, r.body_len);
	ck_assert_ptr_nonnull(j);
	ck_assert_str_eq(cJSON_GetObjectItem(j, "phase")->valuestring, "running");
	cJSON_Delete(j);
	resp_done(&r);
	fx_stop(&f);
}
END_TEST

START_TEST(test_methods_and_paths)
{
	static const char post[] = "POST /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
	                           "Content-Length: 5\r\n\r\nx=1&y";
	static const char get_body[] =
	    "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
	    "Content-Length: 34\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
	static const char *const refused[] = {"PUT", "DELETE", "OPTIONS", "PATCH", "TRACE"};
	struct fx f;
	struct resp r;

	fx_start(&f, NULL);
	fetch_raw(&f, post, sizeof(post) - 1, &r);
	ck_assert_int_eq(r.code, 405);
	ck_assert_str_eq(r.allow, "GET, HEAD");
	resp_done(&r);
	/* a GET with a body is answered; the body is not read as a second request */
	fetch_raw(&f, get_body, sizeof(get_body) - 1, &r);
	ck_assert_int_eq(r.code, 200);
	ck_assert_ptr_null(memmem(r.body, r.body_len, "HTTP/1.1", 8));
	resp_done(&r);
	for (size_t i = 0; i < ELEMENTSOF(refused); i++) {
		fetch(&f, refused[i], "/status", &r);
		ck_assert_msg(r.code == 405, "%s answered %d", refused[i], r.code);
		resp_done(&r);
	}
	fetch(&f, "GET", "/nope", &r);
	ck_assert_int_eq(r.code, 404);
	resp_done(&r);
	fetch(&f, "GET", "/metrics/", &r);
	ck_assert_int_eq(r.code, 404);
	resp_done(&r);
	/* HEAD: the headers of a GET, no body */
	fetch(&f, "HEAD", "/healthz", &r);
	ck_assert_int_eq(r.code, 200);
	ck_assert_str_eq(r.content_length, "3");
	ck_assert_uint_eq(r.body_len, 0);
	resp_done(&r);
	/* none of that rendered anything */
	ck_assert_double_eq(metric_get(f.scrapes), 0);
	fx_stop(&f);
}
END_TEST

START_TEST(test_render_failures)
{
	const struct status_limits small = {.max_body = 64};
	struct fx f;
	struct resp r;

	fx_start(&f, NULL);
	f.fail_render = true;
	fetch(&f, "GET", "/metrics", &r);
	ck_assert_int_eq(r.code, 500);
	ck_assert_ptr_nonnull(memmem(r.body, r.body_len, "cannot render", 13));
	resp_done(&r);
	fetch(&f, "GET", "/status", &r);
	ck_assert_int_eq(r.code, 500);
	resp_done(&r);
	fx_stop(&f);
	/* a body over the cap is an error, never a truncated 200 */
	fx_start(&f, &small);
	fetch(&f, "GET", "/metrics", &r);
	ck_assert_int_eq(r.code, 500);
	resp_done(&r);
	fetch(&f, "GET", "/healthz", &r);
	ck_assert_int_eq(r.code, 200);
	resp_done(&r);
	fx_stop(&f);
}
END_TEST

/* ---- hostile clients ------------------------------------------------------ */

static bool one_connection(void *p)
{
	return status_connections(((struct fx *)p)->st) == 1;
}

static bool no_connection(void *p)
{
	return status_connections(((struct fx *)p)->st) == 0;
}

struct slow {
	int fd;
};

static bool slow_closed(void *p)
{
	return peer_closed(((struct slow *)p)->fd);
}

/* A client that sends half a header and stalls holds one connection, nothing
 * more: others are answered while it hangs, and it is closed after the idle
 * timeout. */
START_TEST(test_slowloris)
{
	static const char partial[] = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: aa";
	const struct status_limits l = {.idle_timeout_s = 1};
	struct fx f;
	struct slow s;
	struct resp r;
	usec_t t0;

	fx_start(&f, &l);
	s.fd = connect_loopback(status_port(f.st), false);
	ck_assert_int_eq(send(s.fd, partial, sizeof(partial) - 1, MSG_NOSIGNAL),
	                 (ssize_t)sizeof(partial) - 1);
	t0 = time_mono();
	step_until(f.ev, one_connection, &f, "the slow client accepted");
	for (int i = 0; i < 5; i++) {
		fetch(&f, "GET", i % 2 ? "/healthz" : "/metrics", &r);
		ck_assert_int_eq(r.code, 200);
		resp_done(&r);
	}
	/* all five answered while the slow one was still connected */
	ck_assert(!peer_closed(s.fd));
	ck_assert_double_eq(metric_get(f.scrapes), 3);
	step_until(f.ev, slow_closed, &s, "the idle timeout to close the slow client");
	ck_assert_msg(time_mono() - t0 >= 900 * USEC_PER_MSEC,
	              "closed after %llu ms, before the 1 s idle timeout",
	              (unsigned long long)((time_mono() - t0) / USEC_PER_MSEC));
	step_until(f.ev, no_connection, &f, "the server to forget the slow client");
	close(s.fd);
	fx_stop(&f);
}
END_TEST

/* 1 MiB of header against a 32 KiB per-connection budget: refused, and the
 * loop keeps answering others meanwhile. */
START_TEST(test_huge_header)
{
	const size_t big = 1024 * 1024;
	struct buf rq = BUF_INIT(0);
	struct client c;
	struct resp r;
	struct fx f;
	int code = 0;

	fx_start(&f, NULL);
	buf_appends(&rq, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: ");
	for (size_t i = 0; i < big / 64; i++)
		buf_appends(&rq,
		            "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
	buf_appends(&rq, "\r\nConnection: close\r\n\r\n");
	client_start(&c, status_port(f.st), rq.data, rq.len);
	fetch(&f, "GET", "/healthz", &r);
	ck_assert_int_eq(r.code, 200);
	resp_done(&r);
	client_finish(&f, &c);
	/* Refused with 431, or reset while still sending: never served. */
	if (c.raw.data && sscanf(c.raw.data, "HTTP/1.1 %d ", &code) == 1)
		ck_assert_msg(code == 431, "1 MiB header answered %d", code);
	else
		ck_assert_msg(c.send_error || c.recv_error || c.raw.len == 0,
		              "unexpected reply \"%.80s\"", c.raw.data);
	ck_assert_double_eq(metric_get(f.scrapes), 0);
	buf_done(&c.raw);
	buf_done(&rq);
	step_until(f.ev, no_connection, &f, "the refused connection to go");
	fx_stop(&f);
}
END_TEST

/* 200 connections against a limit of 32: it holds the limit, does not crash,
 * leaks no fd, and serves normally once they are gone. */
START_TEST(test_connection_flood)
{
	const struct status_limits l = {
	    .connection_limit = 32, .per_ip_limit = 1000, .idle_timeout_s = 30};
	int fds[200], base;
	unsigned max_seen = 0;
	struct resp r;
	struct fx f;
	usec_t end;

	fx_start(&f, &l);
	base = fd_count();
	for (size_t i = 0; i < ELEMENTSOF(fds); i++)
		fds[i] = connect_loopback(status_port(f.st), true);
	for (end = time_mono() + USEC_PER_SEC; time_mono() < end;) {
		ck_assert_int_ge(ev_run_once(f.ev, STEP), 0);
		max_seen = MAX(max_seen, status_connections(f.st));
	}
	ck_assert_uint_eq(max_seen, 32);
	for (size_t i = 0; i < ELEMENTSOF(fds); i++)
		close(fds[i]);
	step_until(f.ev, no_connection, &f, "the flood to be closed");
	fetch(&f, "GET", "/healthz", &r);
	ck_assert_int_eq(r.code, 200);
	resp_done(&r);
	step_until(f.ev, no_connection, &f, "the last client to go");
	ck_assert_int_eq(fd_count(), base);
	fx_stop(&f);
}
END_TEST

/* ---- setup ---------------------------------------------------------------- */

/* The status line of a GET over any address family, read without a thread:
 * the request fits the socket buffer, the loop is stepped until EOF. */
static const char *get_over(ev_t *e, const struct sockaddr *sa, socklen_t len, const char *path)
{
	static char status_line[16];
	struct buf b = BUF_INIT(1 << 20);
	char rq[256], chunk[4096];
	usec_t deadline = time_mono() + DEADLINE;
	int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	int n = snprintf(rq, sizeof(rq), "GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
	                 path);
	ssize_t got;

	ck_assert_int_ge(fd, 0);
	ck_assert(connect(fd, sa, len) == 0 || errno == EINPROGRESS);
	while (send(fd, rq, (size_t)n, MSG_NOSIGNAL) < 0) {
		ck_assert_int_eq(errno, EAGAIN);
		ck_assert_int_ge(ev_run_once(e, STEP), 0);
	}
	for (;;) {
		ck_assert_msg(time_mono() < deadline, "no answer over family %d", sa->sa_family);
		ck_assert_int_ge(ev_run_once(e, STEP), 0);
		while ((got = recv(fd, chunk, sizeof(chunk), MSG_DONTWAIT)) > 0)
			buf_append(&b, chunk, (size_t)got);
		if (got == 0 || (got < 0 && errno != EAGAIN))
			break;
	}
	close(fd);
	snprintf(status_line, sizeof(status_line), "%.12s", b.data ? b.data : "");
	buf_done(&b);
	return status_line;
}

START_TEST(test_bind_errors)
{
	const struct status_handlers h = {
	    .metrics = fx_metrics, .status_json = fx_status, .ready = fx_ready};
	struct sockaddr_in sa = loopback(0), taken;
	struct sockaddr_in6 sa6 = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
	struct sockaddr_in nothere = loopback(0);
	socklen_t tl = sizeof(taken);
	status_t *st = NULL;
	ev_t *e;
	int fd;

	ck_assert_int_eq(ev_new(&e, NULL), 0);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	ck_assert_int_eq(listen(fd, 1), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&taken, &tl), 0);
	ck_assert_int_eq(status_new(e, (struct sockaddr *)&taken, tl, &h, NULL, &st), -EADDRINUSE);
	ck_assert_ptr_null(st);
	close(fd);
	inet_pton(AF_INET, "192.0.2.1", &nothere.sin_addr); /* TEST-NET-1: not ours */
	ck_assert_int_eq(status_new(e, (struct sockaddr *)&nothere, sizeof(nothere), &h, NULL, &st),
	                 -EADDRNOTAVAIL);
	sa.sin_family = AF_UNIX;
	ck_assert_int_eq(status_new(e, (struct sockaddr *)&sa, sizeof(sa), &h, NULL, &st),
	                 -EAFNOSUPPORT);
	/* IPv6 loopback, when the host has it: bound and answering */
	if (status_new(e, (struct sockaddr *)&sa6, sizeof(sa6), &h, NULL, &st) == 0) {
		ck_assert_uint_ne(status_port(st), 0);
		sa6.sin6_port = htons(status_port(st));
		ck_assert_str_eq(get_over(e, (struct sockaddr *)&sa6, sizeof(sa6), "/healthz"),
		                 "HTTP/1.1 200");
		st = status_free(st);
	}
	ck_assert_ptr_null(status_free(NULL));
	ev_free(e);
}
END_TEST

static bool fd_cloexec(int fd)
{
	int fl = fcntl(fd, F_GETFD);

	return fl >= 0 && (fl & FD_CLOEXEC);
}

/* fds without FD_CLOEXEC, as a bitmap over 0..1023 */
static void inheritable_fds(unsigned char map[1024])
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;

	memset(map, 0, 1024);
	ck_assert_ptr_nonnull(d);
	while ((de = readdir(d))) {
		int fd = atoi(de->d_name);

		if (de->d_name[0] != '.' && fd != dirfd(d) && fd < 1024 && !fd_cloexec(fd))
			map[fd] = 1;
	}
	closedir(d);
}

/* Nothing the server opens (listening socket, epoll fd, connections) would
 * be inherited by a run's process. */
START_TEST(test_fds_cloexec)
{
	unsigned char before[1024], after[1024];
	struct fx f;
	int fd;

	inheritable_fds(before);
	fx_start(&f, NULL);
	fd = connect_loopback(status_port(f.st), false);
	ck_assert_int_eq(send(fd, "GET", 3, MSG_NOSIGNAL), 3);
	step_until(f.ev, one_connection, &f, "the connection accepted");
	inheritable_fds(after);
	for (int i = 0; i < 1024; i++)
		ck_assert_msg(after[i] == before[i], "fd %d is inheritable", i);
	close(fd);
	fx_stop(&f);
}
END_TEST

/* ---- heartbeat ------------------------------------------------------------ */

/* A monitoring service stand-in: counts requests by method, can answer slowly
 * or with an error, and tracks how many were in flight at once. */
struct monitor {
	struct MHD_Daemon *d;
	uint16_t port;
	atomic_uint heads, others, inflight, max_inflight;
	atomic_int code;
	atomic_uint delay_ms;
};

static enum MHD_Result monitor_request(void *cls, struct MHD_Connection *c, const char *url,
                                       const char *method, const char *version, const char *upload,
                                       size_t *upload_size, void **con_cls)
{
	struct monitor *m = cls;
	struct MHD_Response *resp;
	enum MHD_Result r;
	unsigned now;

	if (streq(method, "HEAD") && streq(url, "/ping/s3cr3t-uuid"))
		atomic_fetch_add(&m->heads, 1);
	else
		atomic_fetch_add(&m->others, 1);
	now = atomic_fetch_add(&m->inflight, 1) + 1;
	for (unsigned max = atomic_load(&m->max_inflight);
	     now > max && !atomic_compare_exchange_weak(&m->max_inflight, &max, now);)
		;
	if (atomic_load(&m->delay_ms))
		tu_sleep(atomic_load(&m->delay_ms) * USEC_PER_MSEC);
	atomic_fetch_sub(&m->inflight, 1);
	resp = MHD_create_response_from_buffer(3, (void *)"ok\n", MHD_RESPMEM_PERSISTENT);
	r = MHD_queue_response(c, (unsigned)atomic_load(&m->code), resp);
	MHD_destroy_response(resp);
	return r;
}

static void monitor_start(struct monitor *m)
{
	const union MHD_DaemonInfo *info;

	memset(m, 0, sizeof(*m));
	atomic_store(&m->code, 200);
	m->d = MHD_start_daemon(
	    MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG, 0,
	    NULL, NULL, monitor_request, m, MHD_OPTION_SOCK_ADDR,
	    &(struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)},
	    MHD_OPTION_END);
	ck_assert_ptr_nonnull(m->d);
	info = MHD_get_daemon_info(m->d, MHD_DAEMON_INFO_BIND_PORT);
	m->port = info->port;
}

struct hbfx {
	ev_t *ev;
	struct monitor mon;
	heartbeat_t *hb;
	atomic_bool healthy;
	char url[128];
};

static bool hb_healthy(void *userdata)
{
	return atomic_load(&((struct hbfx *)userdata)->healthy);
}

#define INTERVAL (100 * USEC_PER_MSEC)

static void hb_start(struct hbfx *h)
{
	struct heartbeat_opts o = {
	    .interval = INTERVAL,
	    .timeout = 5 * USEC_PER_SEC,
	    .healthy = hb_healthy,
	    .userdata = h,
	};

	ck_assert_int_eq(ev_new(&h->ev, NULL), 0);
	monitor_start(&h->mon);
	atomic_store(&h->healthy, true);
	snprintf(h->url, sizeof(h->url), "http://user:pw@127.0.0.1:%u/ping/s3cr3t-uuid?x=1",
	         h->mon.port);
	o.url = h->url;
	ck_assert_int_eq(heartbeat_new(h->ev, &o, &h->hb), 0);
}

static void hb_stop(struct hbfx *h)
{
	heartbeat_free(h->hb);
	ev_free(h->ev);
	MHD_stop_daemon(h->mon.d);
}

static struct heartbeat_stats hb_stats(struct hbfx *h)
{
	struct heartbeat_stats s;

	heartbeat_get_stats(h->hb, &s);
	return s;
}

struct wait_heads {
	struct hbfx *h;
	unsigned n;
};

static bool heads_reached(void *p)
{
	struct wait_heads *w = p;

	return atomic_load(&w->h->mon.heads) >= w->n;
}

static bool idle_and_skipped(void *p)
{
	struct wait_heads *w = p;
	struct heartbeat_stats s = hb_stats(w->h);

	return s.skipped_unhealthy >= w->n && s.sent == s.ok + s.failed;
}

/* HEAD at the interval while healthy, nothing while not, again once healthy. */
START_TEST(test_heartbeat_interval_and_health)
{
	struct hbfx h;
	struct wait_heads w = {.h = &h, .n = 5};
	struct heartbeat_stats s;
	unsigned paused_at, heads;
	usec_t t0 = time_mono(), elapsed;

	hb_start(&h);
	step_until(h.ev, heads_reached, &w, "5 heartbeats");
	heads = atomic_load(&h.mon.heads); /* first: a later one needs more time */
	elapsed = time_mono() - t0;
	/* never more often than the interval (the first goes one interval in) */
	ck_assert_msg(heads <= elapsed / INTERVAL, "%u heartbeats in %llu ms", heads,
	              (unsigned long long)(elapsed / USEC_PER_MSEC));
	atomic_store(&h.healthy, false);
	w.n = 2;
	step_until(h.ev, idle_and_skipped, &w, "2 ticks skipped as unhealthy");
	paused_at = atomic_load(&h.mon.heads);
	w.n = 8;
	step_until(h.ev, idle_and_skipped, &w, "8 ticks skipped as unhealthy");
	ck_assert_uint_eq(atomic_load(&h.mon.heads), paused_at);
	atomic_store(&h.healthy, true);
	w.n = paused_at + 3;
	step_until(h.ev, heads_reached, &w, "heartbeats to resume");
	s = hb_stats(&h);
	ck_assert_uint_eq(s.failed, 0);
	ck_assert_uint_eq(atomic_load(&h.mon.others), 0);
	ck_assert_uint_eq(atomic_load(&h.mon.max_inflight), 1);
	hb_stop(&h);
}
END_TEST

static bool busy_skipped(void *p)
{
	struct wait_heads *w = p;

	return hb_stats(w->h).skipped_busy >= w->n;
}

/* A monitor slower than the interval: ticks are skipped, never stacked. */
START_TEST(test_heartbeat_skips_while_in_flight)
{
	struct hbfx h;
	struct wait_heads w = {.h = &h, .n = 6};
	struct heartbeat_stats s;

	hb_start(&h);
	atomic_store(&h.mon.delay_ms, 450);
	step_until(h.ev, busy_skipped, &w, "6 ticks skipped while busy");
	s = hb_stats(&h);
	ck_assert_uint_eq(atomic_load(&h.mon.max_inflight), 1);
	ck_assert_uint_le(s.sent, s.ok + s.failed + 1);
	ck_assert_uint_le(atomic_load(&h.mon.heads), s.sent);
	hb_stop(&h);
}
END_TEST

struct wait_stat {
	struct hbfx *h;
	uint64_t failed, ok;
};

static bool stats_reached(void *p)
{
	struct wait_stat *w = p;
	struct heartbeat_stats s = hb_stats(w->h);

	return s.failed >= w->failed && s.ok >= w->ok;
}

static size_t count_lines(const char *text, const char *a, const char *b)
{
	size_t n = 0;

	for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
		size_t len = strcspn(l, "\n");
		char *line = strndup(l, len);

		n += strstr(line, a) && strstr(line, b);
		free(line);
	}
	return n;
}

/* Failures are logged once per change of state, and the secret in the URL
 * never reaches the log. */
START_TEST(test_heartbeat_failure_logging)
{
	char *dir = tu_tmpdir("hb"), *path, *log = NULL;
	struct wait_stat w;
	struct hbfx h;
	int saved, fd;

	ck_assert_int_ge(asprintf(&path, "%s/stderr", dir), 0);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	saved = dup(STDERR_FILENO);
	dup2(fd, STDERR_FILENO);
	log_setup("check_status", LOG_FORMAT_LOGFMT, LOG_DEBUG);
	hb_start(&h);
	w = (struct wait_stat){.h = &h, .ok = 2};
	step_until(h.ev, stats_reached, &w, "2 heartbeats delivered");
	atomic_store(&h.mon.code, 503);
	w.failed = 4;
	step_until(h.ev, stats_reached, &w, "4 heartbeats failed");
	atomic_store(&h.mon.code, 204);
	w.ok = hb_stats(&h).ok + 3;
	step_until(h.ev, stats_reached, &w, "heartbeats delivered again");
	MHD_stop_daemon(h.mon.d); /* now the connection is refused */
	w.failed = hb_stats(&h).failed + 3;
	step_until(h.ev, stats_reached, &w, "refused heartbeats");
	heartbeat_free(h.hb);
	h.hb = NULL;
	dup2(saved, STDERR_FILENO);
	close(saved);
	close(fd);
	ck_assert_int_ge(read_file_capped(path, 1 << 20, &log, NULL), 0);
	ck_assert_uint_eq(count_lines(log, "heartbeat", "failed: HTTP 503"), 1);
	ck_assert_uint_eq(count_lines(log, "heartbeat", "delivered again"), 1);
	ck_assert_uint_eq(count_lines(log, "heartbeat", "failed:"), 2);
	ck_assert_ptr_nonnull(strstr(log, "http://127.0.0.1:"));
	ck_assert_ptr_null(strstr(log, "s3cr3t"));
	ck_assert_ptr_null(strstr(log, "pw@"));
	free(log);
	ev_free(h.ev);
	rm_rf(dir);
	free(dir);
	free(path);
}
END_TEST

START_TEST(test_heartbeat_invalid)
{
	heartbeat_t *hb = NULL;
	ev_t *e;

	ck_assert_int_eq(ev_new(&e, NULL), 0);
	ck_assert_int_eq(heartbeat_new(e, &(struct heartbeat_opts){.url = "http://x/"}, &hb),
	                 -EINVAL);
	ck_assert_int_eq(heartbeat_new(e, &(struct heartbeat_opts){.interval = 1}, &hb), -EINVAL);
	ck_assert_ptr_null(hb);
	ck_assert_ptr_null(heartbeat_free(NULL));
	ev_free(e);
}
END_TEST

/* ---- lessee status ------------------------------------------------------- */

static const char sample_doc[] =
    "{\"version\":\"0.1.0\",\"worker_id\":\"w1\",\"phase\":\"running\",\"ready\":false,"
    "\"ready_reason\":\"API not reached yet\",\"io_backend\":\"epoll\",\"slots\":4,"
    "\"slots_busy\":1,\"reporting\":1,\"max_reporting\":8,"
    "\"runs_done\":17,\"spool_pending\":0,\"queue_depth\":3,\"runs\":["
    "{\"id\":\"0190a1b2-0000-7000-8000-000000000001\",\"workflow\":\"build\",\"attempt\":1,"
    "\"state\":\"running\",\"age_s\":72.4,\"pid\":4242},"
    "{\"id\":\"0190a1b2-0000-7000-8000-000000000002\",\"workflow\":\"deploy\",\"attempt\":2,"
    "\"state\":\"reporting\",\"age_s\":0.2}],"
    "\"breakers\":[{\"workflow\":\"build\",\"state\":\"closed\",\"consecutive_failures\":0},"
    "{\"workflow\":\"deploy\",\"state\":\"open\",\"consecutive_failures\":3,"
    "\"retry_in_s\":252.7}],"
    "\"config\":{\"api_url\":\"http://127.0.0.1:8080\",\"concurrency\":4,\"lease_ttl_s\":90,"
    "\"workflows\":2}}";

static const char sample_table[] =
    "worker     w1 (lessee 0.1.0)\n"
    "phase      running\n"
    "ready      no: API not reached yet\n"
    "backend    epoll\n"
    "slots      1 of 4 in use\n"
    "reporting  1 (at most 8)\n"
    "runs done  17\n"
    "queue      3\n"
    "spooled    0\n"
    "api        http://127.0.0.1:8080\n"
    "\n"
    "RUN                                   WORKFLOW  ATTEMPT  STATE      AGE      PID\n"
    "0190a1b2-0000-7000-8000-000000000001  build     1        running    1min12s  4242\n"
    "0190a1b2-0000-7000-8000-000000000002  deploy    2        reporting  0s       -\n"
    "\n"
    "WORKFLOW  BREAKER  FAILURES  RETRY IN\n"
    "build     closed   0         -\n"
    "deploy    open     3         4min12s\n";

struct capture {
	FILE *f;
	char *text;
	size_t len;
};

static void capture_open(struct capture *c)
{
	c->text = NULL;
	c->f = open_memstream(&c->text, &c->len);
	ck_assert_ptr_nonnull(c->f);
}

static void capture_close(struct capture *c)
{
	fclose(c->f);
}

START_TEST(test_cli_table)
{
	struct capture out;

	capture_open(&out);
	ck_assert_int_eq(status_cli_print(sample_doc, strlen(sample_doc), out.f), 0);
	capture_close(&out);
	ck_assert_str_eq(out.text, sample_table);
	free(out.text);
	capture_open(&out);
	ck_assert_int_eq(status_cli_print("{\"phase\":\"idle\"}", 16, out.f), 0);
	capture_close(&out);
	ck_assert_ptr_nonnull(strstr(out.text, "\nno runs in flight\n"));
	ck_assert_ptr_nonnull(strstr(out.text, "\nno workflows configured\n"));
	free(out.text);
}
END_TEST

START_TEST(test_cli_not_a_document)
{
	static const char *const bad[] = {
	    "", "[]", "{}", "nonsense", "{\"phase\":7}", "{\"phase\":\"x\""};
	struct capture out;

	capture_open(&out);
	for (size_t i = 0; i < ELEMENTSOF(bad); i++)
		ck_assert_msg(status_cli_print(bad[i], strlen(bad[i]), out.f) == -EBADMSG,
		              "accepted %s", bad[i]);
	capture_close(&out);
	free(out.text);
}
END_TEST

/* Nothing from the document can drive the terminal or stretch the table. */
START_TEST(test_cli_hostile_strings)
{
	struct buf doc = BUF_INIT(0);
	struct capture out;
	char id[200];

	memset(id, 'a', sizeof(id) - 1);
	id[sizeof(id) - 1] = '\0';
	memcpy(id + 63, "\xc3\xa9", 2); /* a 2-byte character across the 64-byte cut */
	buf_printf(
	    &doc,
	    "{\"phase\":\"\\u001b[2J\",\"worker_id\":\"\\u009b31m\",\"runs\":[{\"id\":\"%s\","
	    "\"workflow\":\"\\u001b]0;pwned\\u0007x\",\"state\":\"\\u007f\"}],"
	    "\"breakers\":[{\"workflow\":\"\\r\\n\\t\",\"state\":7}]}",
	    id);
	capture_open(&out);
	ck_assert_int_eq(status_cli_print(doc.data, doc.len, out.f), 0);
	capture_close(&out);
	for (size_t i = 0; i < out.len; i++) {
		unsigned char c = (unsigned char)out.text[i];

		ck_assert_msg(c >= 0x20 || c == '\n', "control byte 0x%02x at %zu", c, i);
		ck_assert_msg(c != 0x7f, "DEL at %zu", i);
		ck_assert_msg(!(c == 0xc2 && (unsigned char)out.text[i + 1] >= 0x80 &&
		                (unsigned char)out.text[i + 1] <= 0x9f),
		              "C1 control at %zu", i);
	}
	ck_assert_ptr_nonnull(strstr(out.text, "?[2J"));
	/* 63 'a', the cut character dropped whole, then the ellipsis */
	memcpy(id + 63, "...", 4);
	ck_assert_ptr_nonnull(strstr(out.text, id));
	ck_assert_ptr_null(strstr(out.text, "aaaa\xc3"));
	free(out.text);
	buf_done(&doc);
}
END_TEST

START_TEST(test_cli_base_url)
{
	struct sockaddr_in sa = loopback(9464);
	struct sockaddr_in6 sa6 = {.sin6_family = AF_INET6, .sin6_port = htons(9464)};
	char *url;

	ck_assert_int_eq(status_cli_base_url((struct sockaddr *)&sa, sizeof(sa), &url), 0);
	ck_assert_str_eq(url, "http://127.0.0.1:9464");
	free(url);
	sa.sin_addr.s_addr = htonl(INADDR_ANY);
	ck_assert_int_eq(status_cli_base_url((struct sockaddr *)&sa, sizeof(sa), &url), 0);
	ck_assert_str_eq(url, "http://127.0.0.1:9464");
	free(url);
	inet_pton(AF_INET, "10.1.2.3", &sa.sin_addr);
	ck_assert_int_eq(status_cli_base_url((struct sockaddr *)&sa, sizeof(sa), &url), 0);
	ck_assert_str_eq(url, "http://10.1.2.3:9464");
	free(url);
	ck_assert_int_eq(status_cli_base_url((struct sockaddr *)&sa6, sizeof(sa6), &url), 0);
	ck_assert_str_eq(url, "http://[::1]:9464");
	free(url);
	inet_pton(AF_INET6, "2001:db8::7", &sa6.sin6_addr);
	ck_assert_int_eq(status_cli_base_url((struct sockaddr *)&sa6, sizeof(sa6), &url), 0);
	ck_assert_str_eq(url, "http://[2001:db8::7]:9464");
	free(url);
	sa.sin_family = AF_UNIX;
	ck_assert_int_eq(status_cli_base_url((struct sockaddr *)&sa, sizeof(sa), &url),
	                 -EAFNOSUPPORT);
}
END_TEST

/* `lessee status` in a thread against the server on the test's loop. */
enum cli_mode { CLI_TABLE, CLI_JSON, CLI_HEALTHZ };

struct cli_job {
	pthread_t thread;
	char *url;
	enum cli_mode mode;
	struct capture out, err;
	int r;
	atomic_bool done;
};

static void *cli_main(void *p)
{
	struct cli_job *j = p;

	if (j->mode == CLI_HEALTHZ)
		j->r = status_cli_healthz(j->url, j->out.f, j->err.f);
	else
		j->r = status_cli_run(j->url, j->mode == CLI_JSON, j->out.f, j->err.f);
	atomic_store(&j->done, true);
	return NULL;
}

static bool cli_done(void *p)
{
	return atomic_load(&((struct cli_job *)p)->done);
}

static int cli_run(struct fx *f, enum cli_mode mode, struct cli_job *j)
{
	struct sockaddr_in sa = loopback(status_port(f->st));

	*j = (struct cli_job){.mode = mode};
	ck_assert_int_eq(status_cli_base_url((struct sockaddr *)&sa, sizeof(sa), &j->url), 0);
	capture_open(&j->out);
	capture_open(&j->err);
	ck_assert_int_eq(pthread_create(&j->thread, NULL, cli_main, j), 0);
	step_until(f->ev, cli_done, j, "lessee status");
	pthread_join(j->thread, NULL);
	capture_close(&j->out);
	capture_close(&j->err);
	free(j->url);
	return j->r;
}

static void cli_done_free(struct cli_job *j)
{
	free(j->out.text);
	free(j->err.text);
}

START_TEST(test_cli_against_server)
{
	struct sockaddr_in sa;
	struct capture out, err;
	struct cli_job j;
	struct fx f;
	char *url;
	int r;

	fx_start(&f, NULL);
	snprintf(f.status_doc, sizeof(f.status_doc), "%s", sample_doc);
	ck_assert_int_eq(cli_run(&f, CLI_TABLE, &j), 0);
	ck_assert_str_eq(j.out.text, sample_table);
	ck_assert_uint_eq(j.err.len, 0);
	cli_done_free(&j);
	ck_assert_int_eq(cli_run(&f, CLI_JSON, &j), 0);
	ck_assert_uint_eq(j.out.len, strlen(sample_doc) + 1);
	ck_assert_mem_eq(j.out.text, sample_doc, strlen(sample_doc));
	cli_done_free(&j);
	f.fail_render = true;
	ck_assert_int_eq(cli_run(&f, CLI_TABLE, &j), -EPROTO);
	ck_assert_ptr_nonnull(strstr(j.err.text, "answered HTTP 500: cannot render"));
	ck_assert_uint_eq(j.out.len, 0);
	cli_done_free(&j);
	f.fail_render = false;
	snprintf(f.status_doc, sizeof(f.status_doc), "not json");
	ck_assert_int_eq(cli_run(&f, CLI_JSON, &j), -EBADMSG);
	ck_assert_ptr_nonnull(strstr(j.err.text, "did not answer with a status document"));
	cli_done_free(&j);
	/* nobody listening any more: unreachable */
	sa = loopback(status_port(f.st));
	fx_stop(&f);
	ck_assert_int_eq(status_cli_base_url((struct sockaddr *)&sa, sizeof(sa), &url), 0);
	capture_open(&out);
	capture_open(&err);
	r = status_cli_run(url, false, out.f, err.f);
	capture_close(&out);
	capture_close(&err);
	ck_assert_int_eq(r, -ECONNREFUSED);
	ck_assert_ptr_nonnull(strstr(err.text, "cannot reach the daemon at http://127.0.0.1:"));
	ck_assert_uint_eq(out.len, 0);
	free(out.text);
	free(err.text);
	free(url);
}
END_TEST

/* `lessee status --healthz`, Docker's HEALTHCHECK: the liveness answer, or 1. */
START_TEST(test_cli_healthz)
{
	struct sockaddr_in sa;
	struct capture out, err;
	struct cli_job j;
	struct fx f;
	char *url;
	int r;

	fx_start(&f, NULL);
	f.fail_render = true; /* /status would fail: /healthz is not /status */
	ck_assert_int_eq(cli_run(&f, CLI_HEALTHZ, &j), 0);
	ck_assert_str_eq(j.out.text, "ok\n");
	ck_assert_uint_eq(j.err.len, 0);
	cli_done_free(&j);
	f.healthy = false;
	ck_assert_int_eq(cli_run(&f, CLI_HEALTHZ, &j), -EPROTO);
	ck_assert_ptr_nonnull(strstr(j.err.text, "/healthz answered HTTP 503: worker wedged"));
	ck_assert_uint_eq(j.out.len, 0);
	cli_done_free(&j);
	sa = loopback(status_port(f.st));
	fx_stop(&f);
	ck_assert_int_eq(status_cli_base_url((struct sockaddr *)&sa, sizeof(sa), &url), 0);
	capture_open(&out);
	capture_open(&err);
	r = status_cli_healthz(url, out.f, err.f);
	capture_close(&out);
	capture_close(&err);
	ck_assert_int_eq(r, -ECONNREFUSED);
	ck_assert_ptr_nonnull(strstr(err.text, "cannot reach the daemon at http://127.0.0.1:"));
	ck_assert_ptr_nonnull(strstr(err.text, "/healthz"));
	ck_assert_uint_eq(out.len, 0);
	free(out.text);
	free(err.text);
	free(url);
}
END_TEST

static Suite *status_suite(void)
{
	Suite *s = suite_create("status");
	TCase *tc = tcase_create("endpoints");
	TCase *th = tcase_create("hostile");
	TCase *tb = tcase_create("heartbeat");
	TCase *tl = tcase_create("cli");

	tcase_add_test(tc, test_metrics_endpoint);
	tcase_add_test(tc, test_probes);
	tcase_add_test(tc, test_status_endpoint);
	tcase_add_test(tc, test_methods_and_paths);
	tcase_add_test(tc, test_render_failures);
	tcase_add_test(tc, test_bind_errors);
	tcase_add_test(tc, test_fds_cloexec);
	tcase_add_test(th, test_slowloris);
	tcase_add_test(th, test_huge_header);
	tcase_add_test(th, test_connection_flood);
	tcase_add_test(tb, test_heartbeat_interval_and_health);
	tcase_add_test(tb, test_heartbeat_skips_while_in_flight);
	tcase_add_test(tb, test_heartbeat_failure_logging);
	tcase_add_test(tb, test_heartbeat_invalid);
	tcase_add_test(tl, test_cli_table);
	tcase_add_test(tl, test_cli_not_a_document);
	tcase_add_test(tl, test_cli_hostile_strings);
	tcase_add_test(tl, test_cli_base_url);
	tcase_add_test(tl, test_cli_against_server);
	tcase_add_test(tl, test_cli_healthz);
	tcase_set_timeout(tl, 120);
	tcase_set_timeout(tc, 120);
	tcase_set_timeout(th, 120);
	tcase_set_timeout(tb, 120);
	suite_add_tcase(s, tc);
	suite_add_tcase(s, th);
	suite_add_tcase(s, tb);
	suite_add_tcase(s, tl);
	return s;
}

int main(void)
{
	return tu_run(status_suite());
}
