/* libmicrohttpd glue.  Why a polling-thread pool with suspend/resume and not
 * a thread per connection: a fleet of idle workers each holds a long poll
 * open for ~20 s, and each of those would pin a thread.  Suspended, they cost
 * a socket and a few hundred bytes; the few threads only do real work (which
 * is serialised on the SQLite connection anyway). */
#include "lessor/server.h"

#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "lessor/api.h"
#include "lessor/reaper.h"
#include "lessor/store.h"
#include "lessor/waiters.h"
#include "log/log.h"
#include "util/buf.h"
#include "util/macro.h"

#define DRAIN_TIMEOUT (10 * USEC_PER_SEC)
#define CONNECTION_TIMEOUT_S 120 /* idle keep-alive; > the longest long poll */
#define CONNECTION_LIMIT 4096
#define HOPELESS_FACTOR 64

struct lessor_server {
	lessor_waiters *waiters;
	lessor_store *store;
	lessor_api *api;
	lessor_reaper *reaper;
	struct MHD_Daemon *mhd;
	int listen_fd;
	char address[96];
	atomic_int in_flight;
	atomic_bool stopping;
};

struct request {
	lessor_server *server;
	struct MHD_Connection *conn;
	lessor_call *call;
	struct buf body;
	bool too_large;
};

/* ---- the call's view of the connection ---- */

static const char *io_header(void *userdata, const char *name)
{
	struct request *rq = userdata;

	return MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, name);
}

static const char *io_query(void *userdata, const char *name)
{
	struct request *rq = userdata;

	return MHD_lookup_connection_value(rq->conn, MHD_GET_ARGUMENT_KIND, name);
}

static void io_suspend(void *userdata)
{
	struct request *rq = userdata;

	MHD_suspend_connection(rq->conn);
}

static void io_resume(void *userdata)
{
	struct request *rq = userdata;

	MHD_resume_connection(rq->conn);
}

static int io_fd(void *userdata)
{
	struct request *rq = userdata;
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(rq->conn, MHD_CONNECTION_INFO_CONNECTION_FD);

	return ci ? ci->connect_fd : -1;
}

/* ---- requests ---- */

static struct request *request_new(lessor_server *s, struct MHD_Connection *conn,
                                   const char *method, const char *url)
{
	struct request *rq = calloc(1, sizeof(*rq));
	struct lessor_call_io io = {.header = io_header,
	                            .query = io_query,
	                            .suspend = io_suspend,
	                            .resume = io_resume,
	                            .fd = io_fd,
	                            .userdata = rq};

	if (!rq)
		return NULL;
	rq->server = s;
	rq->conn = conn;
	rq->body = BUF_INIT(lessor_api_max_body(s->api));
	if (lessor_call_new(s->api, method, url, &io, &rq->call) < 0) {
		free(rq);
		return NULL;
	}
	atomic_fetch_add(&s->in_flight, 1);
	return rq;
}

static void request_free(struct request *rq)
{
	atomic_fetch_sub(&rq->server->in_flight, 1);
	lessor_call_free(rq->call);
	buf_done(&rq->body);
	free(rq);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
	if (*con_cls)
		request_free(*con_cls);
	*con_cls = NULL;
}

static void add_header(struct MHD_Response *resp, const char *name, const char *value)
{
	if (value)
		MHD_add_response_header(resp, name, value);
}

static enum MHD_Result send_reply(struct request *rq)
{
	struct lessor_reply *rp = lessor_call_reply(rq->call);
	struct MHD_Response *resp;
	char retry[16];
	enum MHD_Result ret;

	log_debug("%s %s -> %u", lessor_call_method(rq->call), lessor_call_path(rq->call),
	          rp->status);
	if (lessor_call_lose_answer(rq->call))
		return MHD_NO; /* the connection is closed, the answer never leaves */
	if (rp->body)
		resp = MHD_create_response_from_buffer(rp->len, TAKE_PTR(rp->body),
		                                       MHD_RESPMEM_MUST_FREE);
	else
		resp = MHD_create_response_from_buffer(0, (void *)(uintptr_t) "",
		                                       MHD_RESPMEM_PERSISTENT);
	if (!resp)
		return MHD_NO;
	add_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, rp->content_type);
	add_header(resp, MHD_HTTP_HEADER_ALLOW, rp->allow);
	add_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, rp->auth_challenge ? "Bearer" : NULL);
	add_header(resp, "X-Content-Type-Options", "nosniff");
	add_header(resp, "Content-Security-Policy", rp->csp);
	add_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, rp->no_cache ? "no-cache" : NULL);
	if (rp->retry_after_s) {
		snprintf(retry, sizeof(retry), "%u", rp->retry_after_s);
		add_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, retry);
	}
	if (atomic_load(&rq->server->stopping))
		add_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
	ret = MHD_queue_response(rq->conn, rp->status, resp);
	MHD_destroy_response(resp);
	return ret;
}

/* Content-Length: 0 when absent, UINT64_MAX when unparsable. */
static uint64_t declared_length(struct request *rq)
{
	const char *cl =
	    MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
	char *end;
	unsigned long long n;

	if (!cl)
		return 0;
	errno = 0;
	n = strtoull(cl, &end, 10);
	return errno != 0 || *end != '\0' ? UINT64_MAX : n;
}

static enum MHD_Result run_call(struct request *rq)
{
	int r = lessor_call_run(rq->call, rq->body.data, rq->body.len, rq->too_large);

	return r == LESSOR_CALL_SUSPENDED ? MHD_YES : send_reply(rq);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
	struct request *rq = *con_cls;

	if (!rq) {
		uint64_t declared;

		rq = request_new(cls, conn, method, url);
		if (!rq)
			return MHD_NO;
		*con_cls = rq;
		declared = declared_length(rq);
		rq->too_large = declared > rq->body.cap;
		/* A body somewhat over the cap is read and dropped, so the 413 reaches a
		 * client that is still sending; a hopeless one is refused at once and
		 * the connection closed. */
		if (declared / HOPELESS_FACTOR > rq->body.cap)
			return run_call(rq);
		return MHD_YES;
	}
	if (*upload_data_size > 0) {
		/* past the cap the rest is read and dropped, then answered 413 */
		if (!rq->too_large && buf_append(&rq->body, upload_data, *upload_data_size) < 0) {
			rq->too_large = true;
			buf_done(&rq->body);
		}
		*upload_data_size = 0;
		return MHD_YES;
	}
	return run_call(rq);
}

_printf_(2, 0) static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	char line[512];
	size_t n;

	vsnprintf(line, sizeof(line), fmt, ap);
	n = strlen(line);
	while (n > 0 && line[n - 1] == '\n')
		line[--n] = '\0';
	log_warning("microhttpd: %s", line);
}

/* ---- the listening socket ---- */

static int split_listen(const char *listen, char host[64], char port[8])
{
	const char *colon = strrchr(listen, ':');
	size_t hl;

	if (!colon || strlen(colon + 1) == 0 || strlen(colon + 1) >= 8)
		return -EINVAL;
	hl = (size_t)(colon - listen);
	if (hl >= 2 && listen[0] == '[' && listen[hl - 1] == ']') {
		listen++;
		hl -= 2;
	}
	if (hl == 0 || hl >= 64)
		return -EINVAL;
	memcpy(host, listen, hl);
	host[hl] = '\0';
	strcpy(port, colon + 1);
	return 0;
}

static int format_address(int fd, char *buf, size_t len)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char host[NI_MAXHOST], port[NI_MAXSERV];

	if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0)
		return -errno;
	if (getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host), port, sizeof(port),
	                NI_NUMERICHOST | NI_NUMERICSERV) != 0)
		return -EINVAL;
	snprintf(buf, len, ss.ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", host, port);
	return 0;
}

static int open_listener(const char *listen_addr, int *ret_family, int *ret_fd)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC,
	                         .ai_socktype = SOCK_STREAM,
	                         .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
	struct addrinfo *ai = NULL;
	char host[64], port[8];
	int one = 1, fd, r;

	if (split_listen(listen_addr, host, port) < 0 || getaddrinfo(host, port, &hints, &ai) != 0)
		return -EINVAL;
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		r = -errno;
		goto done;
	}
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 512) < 0) {
		r = -errno;
		close(fd);
		goto done;
	}
	*ret_family = ai->ai_family;
	*ret_fd = fd;
	r = 0;
done:
	freeaddrinfo(ai);
	return r;
}

/* ---- lifecycle ---- */

/* Another instance's hint: its run's tags are unknown here, so every parked
 * claim that takes the workflow looks again (all of them for NULL). */
static void wake_long_polls(void *userdata, const char *workflow)
{
	lessor_waiters_wake(userdata, workflow, NULL);
}

static int start_core(lessor_server *s, const struct lessor_server_config *cfg)
{
	struct lessor_store_config sc = {
	    .sync_full = cfg->sync_full,
	    .no_group_commit = cfg->no_group_commit,
	    .max_lease_expiries = cfg->max_lease_expiries,
	    .retry_base_ms = (int64_t)(cfg->retry_base / USEC_PER_MSEC),
	    .retry_max_ms = (int64_t)(cfg->retry_max / USEC_PER_MSEC),
	    .max_log_bytes = cfg->max_log_bytes,
	    /* PostgreSQL: one connection per HTTP thread, one for the reaper */
	    .connections = MAX(cfg->threads, 1u) + 1,
	};
	struct lessor_api_config ac = {
	    .tokens = cfg->tokens, .max_body = cfg->max_body, .enable_faults = cfg->enable_faults};
	int r;

	s->waiters = lessor_waiters_new();
	if (!s->waiters)
		return -ENOMEM;
	r = lessor_store_open(cfg->db_path, &sc, &s->store);
	if (r < 0 && lessor_store_target_is_pg(cfg->db_path))
		return log_errno(LOG_ERR, r, "cannot open the PostgreSQL database: %s",
		                 strerror(-r));
	if (r < 0)
		return log_errno(LOG_ERR, r, "cannot open database %s: %s", cfg->db_path,
		                 r == -EBUSY ? "in use by another lessor" : strerror(-r));
	/* another instance on the same database made a run claimable */
	lessor_store_set_notify(s->store, wake_long_polls, s->waiters);
	r = lessor_store_recover(s->store, (int64_t)(time_real() / USEC_PER_MSEC));
	if (r < 0)
		return r;
	ac.store = s->store;
	ac.waiters = s->waiters;
	r = lessor_api_new(&ac, &s->api);
	if (r < 0)
		return r;
	return lessor_reaper_start(s->store, s->waiters, cfg->tick, &s->reaper);
}

/* A stopping server closes new connections at once.  Not MHD_quiesce_daemon():
 * on an epoll daemon with a thread pool, libmicrohttpd 0.9.75 races its own
 * polling threads for the listening socket's removal and aborts the process
 * when it loses (check_lessor_server). */
static enum MHD_Result on_accept(void *cls, const struct sockaddr *addr, socklen_t addrlen)
{
	lessor_server *s = cls;

	(void)addr;
	(void)addrlen;
	return atomic_load(&s->stopping) ? MHD_NO : MHD_YES;
}

static int start_http(lessor_server *s, const struct lessor_server_config *cfg)
{
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL |
	                 MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
	int family = AF_INET, r;

	r = open_listener(cfg->listen, &family, &s->listen_fd);
	if (r < 0)
		return log_errno(LOG_ERR, r, "cannot listen on %s: %s", cfg->listen, strerror(-r));
	r = format_address(s->listen_fd, s->address, sizeof(s->address));
	if (r < 0)
		return r;
	if (family == AF_INET6)
		flags |= MHD_USE_IPv6;
	s->mhd = MHD_start_daemon(
	    flags, 0, on_accept, s, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, s,
	    MHD_OPTION_LISTEN_SOCKET, s->listen_fd, MHD_OPTION_THREAD_POOL_SIZE,
	    (unsigned)MAX(cfg->threads, 1u), MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
	    MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)CONNECTION_TIMEOUT_S,
	    MHD_OPTION_CONNECTION_LIMIT, (unsigned)CONNECTION_LIMIT, MHD_OPTION_END);
	if (!s->mhd)
		return log_errno(LOG_ERR, -EIO, "cannot start the HTTP server");
	return 0;
}

int lessor_server_start(const struct lessor_server_config *cfg, lessor_server **ret)
{
	lessor_server *s = calloc(1, sizeof(*s));
	int r;

	if (!s) {
		lessor_tokens_free(cfg->tokens);
		return -ENOMEM;
	}
	s->listen_fd = -1;
	atomic_init(&s->in_flight, 0);
	atomic_init(&s->stopping, false);
	r = start_core(s, cfg);
	if (r >= 0)
		r = start_http(s, cfg);
	if (r < 0) {
		if (!s->api) /* else they are the api's */
			lessor_tokens_free(cfg->tokens);
		lessor_server_stop(s);
		return r;
	}
	*ret = s;
	return 0;
}

const char *lessor_server_address(const lessor_server *s)
{
	return s->address;
}

void lessor_server_set_tokens(lessor_server *s, lessor_tokens *t)
{
	lessor_api_set_tokens(s->api, t);
}

static void drain(lessor_server *s)
{
	usec_t end = time_mono() + DRAIN_TIMEOUT;

	atomic_store(&s->stopping, true); /* no new connections (on_accept) */
	/* parked long polls answer now; new ones are not parked */
	lessor_waiters_shutdown(s->waiters);
	while (atomic_load(&s->in_flight) > 0 && time_mono() < end) {
		struct timespec ts = {0, 5 * 1000 * 1000};

		nanosleep(&ts, NULL);
	}
	if (atomic_load(&s->in_flight) > 0)
		log_warning("%d requests still in flight after the drain timeout, closing them",
		            atomic_load(&s->in_flight));
}

lessor_server *lessor_server_stop(lessor_server *s)
{
	if (!s)
		return NULL;
	if (s->mhd) {
		drain(s);
		MHD_stop_daemon(s->mhd);
	}
	/* MHD_stop_daemon() closed the listening socket it was given */
	if (!s->mhd)
		safe_close(s->listen_fd);
	if (s->waiters)
		lessor_waiters_shutdown(s->waiters);
	lessor_reaper_stop(s->reaper);
	lessor_api_free(s->api);
	lessor_store_free(s->store);
	lessor_waiters_free(s->waiters);
	free(s);
	return NULL;
}
