/* The status endpoint: libmicrohttpd in "external select" mode with its own
 * epoll set.  We own the listening socket (so a bind failure is a precise
 * -errno and the fd is O_CLOEXEC); MHD owns the connections.  The loop watches
 * MHD's epoll fd for readability and keeps one timer at MHD_get_timeout();
 * either one calls MHD_run(), which never blocks.  MHD's sockets inside that set
 * are edge-triggered, so readiness MHD has not finished with shows up as a zero
 * timeout, not as a readable epoll fd: the timer is what keeps it going. */
#include "obs/status.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log/log.h"
#include "util/macro.h"
#include "util/strutil.h"

#define DEFAULT_CONNECTION_LIMIT STATUS_CONNECTION_LIMIT
#define DEFAULT_PER_IP_LIMIT 16
#define DEFAULT_IDLE_TIMEOUT_S 10
#define DEFAULT_MEMORY_PER_CONN (32 * 1024)
#define DEFAULT_MAX_BODY (16 * 1024 * 1024)
#define LISTEN_BACKLOG 64

#define CT_TEXT "text/plain; charset=utf-8"
#define CT_METRICS "text/plain; version=0.0.4; charset=utf-8"
#define CT_JSON "application/json"

struct status {
	ev_t *ev;
	struct MHD_Daemon *mhd;
	ev_io_t *io;
	ev_timer_t *timer;
	struct status_handlers h;
	size_t max_body;
	uint16_t port;
	uint64_t requests;
};

/* A reply: status code, content type and a body whose buffer is handed to MHD. */
static enum MHD_Result reply(status_t *s, struct MHD_Connection *c, unsigned code,
                             const char *ctype, struct buf *body)
{
	struct MHD_Response *resp;
	enum MHD_Result r;
	size_t len = body->len;
	char *data = buf_steal(body);

	if (!data)
		return MHD_NO; /* ENOMEM: MHD closes the connection */
	resp = MHD_create_response_from_buffer(len, data, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(data);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	if (code == MHD_HTTP_METHOD_NOT_ALLOWED)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
	r = MHD_queue_response(c, code, resp);
	MHD_destroy_response(resp);
	s->requests++;
	return r;
}

static enum MHD_Result reply_text(status_t *s, struct MHD_Connection *c, unsigned code,
                                  const char *fmt, ...) _printf_(4, 5);
static enum MHD_Result reply_text(status_t *s, struct MHD_Connection *c, unsigned code,
                                  const char *fmt, ...)
{
	struct buf b = BUF_INIT(0);
	va_list ap;
	int q;

	va_start(ap, fmt);
	q = buf_vprintf(&b, fmt, ap);
	va_end(ap);
	if (q < 0) {
		buf_done(&b);
		return MHD_NO;
	}
	return reply(s, c, code, CT_TEXT, &b);
}

/* /metrics and /status: render into a capped buffer; a failure is a 500. */
static enum MHD_Result reply_rendered(status_t *s, struct MHD_Connection *c,
                                      int (*render)(struct buf *, void *), const char *ctype)
{
	struct buf b = BUF_INIT(s->max_body);
	int q = render(&b, s->h.userdata);

	if (q < 0) {
		buf_done(&b);
		return reply_text(s, c, MHD_HTTP_INTERNAL_SERVER_ERROR, "cannot render: %s\n",
		                  strerror(-q));
	}
	return reply(s, c, MHD_HTTP_OK, ctype, &b);
}

static enum MHD_Result serve_metrics(status_t *s, struct MHD_Connection *c)
{
	return reply_rendered(s, c, s->h.metrics, CT_METRICS);
}

static enum MHD_Result serve_status(status_t *s, struct MHD_Connection *c)
{
	return reply_rendered(s, c, s->h.status_json, CT_JSON);
}

/* A probe: 200 "<ok_word>" or 503 with the callback's one-line reason. */
static enum MHD_Result reply_probe(status_t *s, struct MHD_Connection *c,
                                   bool (*probe)(const char **, void *), const char *ok_word)
{
	const char *reason = NULL;

	if (!probe || probe(&reason, s->h.userdata))
		return reply_text(s, c, MHD_HTTP_OK, "%s\n", ok_word);
	return reply_text(s, c, MHD_HTTP_SERVICE_UNAVAILABLE, "%s\n",
	                  reason && *reason ? reason : "not ready");
}

static enum MHD_Result serve_healthz(status_t *s, struct MHD_Connection *c)
{
	/* Answering at all proves the loop iterates; the callback may add more. */
	return reply_probe(s, c, s->h.healthy, "ok");
}

static enum MHD_Result serve_readyz(status_t *s, struct MHD_Connection *c)
{
	return reply_probe(s, c, s->h.ready, "ready");
}

static const struct route {
	const char *path;
	enum MHD_Result (*serve)(status_t *s, struct MHD_Connection *c);
} routes[] = {
    {"/metrics", serve_metrics},
    {"/healthz", serve_healthz},
    {"/readyz", serve_readyz},
    {"/status", serve_status},
};

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
	status_t *s = cls;

	/* Answered on the first call, before any request body is read: MHD then
	 * discards the body or closes the connection. */
	if (!streq(method, MHD_HTTP_METHOD_GET) && !streq(method, MHD_HTTP_METHOD_HEAD))
		return reply_text(s, c, MHD_HTTP_METHOD_NOT_ALLOWED,
		                  "only GET and HEAD are served here\n");
	for (size_t i = 0; i < ELEMENTSOF(routes); i++)
		if (streq(url, routes[i].path))
			return routes[i].serve(s, c);
	return reply_text(s, c, MHD_HTTP_NOT_FOUND,
	                  "not found; try /metrics /healthz /readyz /status\n");
}

/* MHD's own complaints (a client over the limits, a reset connection) are
 * about clients, not about us: debug level. */
static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
	char msg[256];
	size_t n;

	vsnprintf(msg, sizeof(msg), fmt, ap);
	n = strlen(msg);
	while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
		msg[--n] = '\0';
	log_debug("status endpoint: %s", msg);
}

/* MHD takes its listening socket out of the epoll set at the connection limit
 * and puts it back only at the start of a later MHD_run().  When this run
 * closed connections, run again next iteration: otherwise, with no
 * connection left to time out, nothing would wake us to accept again. */
static void pump(status_t *s)
{
	MHD_UNSIGNED_LONG_LONG ms = 0;
	unsigned before = status_connections(s);

	MHD_run(s->mhd);
	if (status_connections(s) < before)
		ev_timer_arm(s->timer, 0);
	else if (MHD_get_timeout(s->mhd, &ms) == MHD_YES)
		ev_timer_arm(s->timer, (usec_t)ms * USEC_PER_MSEC);
	else
		ev_timer_disarm(s->timer);
}

static void on_epoll(ev_io_t *w, int fd, uint32_t revents, void *userdata)
{
	pump(userdata);
}

static void on_timer(ev_timer_t *t, void *userdata)
{
	pump(userdata);
}

static int listen_socket(const struct sockaddr *addr, socklen_t len, uint16_t *ret_port)
{
	_cleanup_close_ int fd = -1;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int one = 1;

	if (addr->sa_family != AF_INET && addr->sa_family != AF_INET6)
		return -EAFNOSUPPORT;
	fd = socket(addr->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -errno;
	/* A restart must not fail on the previous life's TIME_WAIT sockets; a port
	 * someone is listening on still gives EADDRINUSE. */
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0)
		return -errno;
	if (bind(fd, addr, len) < 0 || listen(fd, LISTEN_BACKLOG) < 0 ||
	    getsockname(fd, (struct sockaddr *)&ss, &sl) < 0)
		return -errno;
	*ret_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
	                                           : ((struct sockaddr_in *)&ss)->sin_port);
	return TAKE_FD(fd);
}

static unsigned or_default(unsigned v, unsigned def)
{
	return v ? v : def;
}

static int start_mhd(status_t *s, int fd, const struct status_limits *l)
{
	const struct status_limits none = {0};

	if (!l)
		l = &none;
	s->max_body = l->max_body ? l->max_body : DEFAULT_MAX_BODY;
	s->mhd = MHD_start_daemon(
	    MHD_USE_EPOLL | MHD_USE_ERROR_LOG, 0, NULL, NULL, on_request, s,
	    MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_LIMIT,
	    or_default(l->connection_limit, DEFAULT_CONNECTION_LIMIT),
	    MHD_OPTION_PER_IP_CONNECTION_LIMIT, or_default(l->per_ip_limit, DEFAULT_PER_IP_LIMIT),
	    MHD_OPTION_CONNECTION_TIMEOUT, or_default(l->idle_timeout_s, DEFAULT_IDLE_TIMEOUT_S),
	    MHD_OPTION_CONNECTION_MEMORY_LIMIT,
	    (size_t)(l->memory_per_conn ? l->memory_per_conn : DEFAULT_MEMORY_PER_CONN),
	    MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s, MHD_OPTION_END);
	if (!s->mhd) {
		/* MHD closes an adopted listening socket on most failure paths, not on
		 * all: close it only if it is still open (nothing else runs yet). */
		if (fcntl(fd, F_GETFD) >= 0)
			close(fd);
		return -EIO;
	}
	return 0;
}

int status_new(ev_t *e, const struct sockaddr *addr, socklen_t addr_len,
               const struct status_handlers *h, const struct status_limits *limits, status_t **ret)
{
	const union MHD_DaemonInfo *info;
	status_t *s;
	int fd, r;

	assert(h && h->metrics && h->status_json && h->ready);
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->ev = e;
	s->h = *h;
	fd = listen_socket(addr, addr_len, &s->port);
	if (fd < 0) {
		free(s);
		return fd;
	}
	r = start_mhd(s, fd, limits);
	if (r >= 0) {
		info = MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_EPOLL_FD);
		r = info ? ev_io_add(e, info->epoll_fd, EV_READ, on_epoll, s, &s->io) : -EIO;
	}
	if (r >= 0)
		r = ev_timer_add(e, 0, on_timer, s, &s->timer);
	if (r < 0) {
		status_free(s);
		return r;
	}
	*ret = s;
	return 0;
}

status_t *status_free(status_t *s)
{
	if (!s)
		return NULL;
	/* The watch goes before MHD closes the epoll fd it watches. */
	ev_io_del(s->io);
	ev_timer_del(s->timer);
	if (s->mhd)
		MHD_stop_daemon(s->mhd);
	free(s);
	return NULL;
}

uint16_t status_port(const status_t *s)
{
	return s->port;
}

unsigned status_connections(const status_t *s)
{
	const union MHD_DaemonInfo *info =
	    MHD_get_daemon_info(s->mhd, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);

	return info ? info->num_connections : 0;
}

uint64_t status_requests(const status_t *s)
{
	return s->requests;
}
