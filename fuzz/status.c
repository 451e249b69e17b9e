/* The status endpoint (lib/obs/status.c): the input is what a client sends
 * on one connection (request line with its path, headers, anything), over a
 * real loopback socket to the real libmicrohttpd server on the daemon's
 * loop.  The server must answer or close within a bound and never stop
 * serving: every input ends with a well-formed GET /healthz on a second
 * connection, which must get its 200. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ev/ev.h"
#include "fuzz.h"
#include "log/log.h"
#include "obs/metrics.h"
#include "obs/status.h"
#include "util/time.h"

static ev_t *ev;
static status_t *st;
static metrics_t *reg;

static int h_metrics(struct buf *out, void *userdata)
{
	return metrics_render(reg, out);
}

static int h_status(struct buf *out, void *userdata)
{
	return buf_appends(out, "{\"phase\":\"running\"}");
}

static bool h_ready(const char **ret_reason, void *userdata)
{
	*ret_reason = "API not reached yet";
	return false;
}

static void setup(void)
{
	const struct status_handlers h = {
	    .metrics = h_metrics, .status_json = h_status, .ready = h_ready};
	const struct status_limits limits = {.idle_timeout_s = 2};
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};

	if (st)
		return;
	log_set_max_level(LOG_CRIT);
	reg = metrics_new();
	metric_add(metrics_counter(reg, "fuzz_scrapes_total", "Scrapes", "path"), 1, "/m\"\n");
	if (ev_new(&ev, NULL) < 0 ||
	    status_new(ev, (struct sockaddr *)&sa, sizeof(sa), &h, &limits, &st) < 0)
		abort();
}

static int connect_server(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET,
	                         .sin_port = htons(status_port(st)),
	                         .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	if (fd < 0)
		abort();
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno != EINPROGRESS)
		abort();
	return fd;
}

/* Send, half-close, read until the server closes; what it answered. */
static size_t exchange(const void *data, size_t size, char *ans, size_t ans_max)
{
	usec_t deadline = time_mono() + 5 * USEC_PER_SEC;
	size_t sent = 0, got = 0;
	bool closed_write = false;
	int fd = connect_server();

	for (;;) {
		ssize_t n;

		FUZZ_ASSERT(time_mono() < deadline); /* the server must answer or close */
		if (ev_run_once(ev, 100) < 0)
			abort();
		if (sent < size) {
			n = send(fd, (const char *)data + sent, size - sent, MSG_NOSIGNAL);
			if (n > 0)
				sent += (size_t)n;
			else if (n < 0 && errno != EAGAIN && errno != ENOTCONN)
				break; /* the server closed early: fine */
		} else if (!closed_write) {
			shutdown(fd, SHUT_WR);
			closed_write = true;
		}
		char tmp[4096];
		n = recv(fd, tmp, sizeof(tmp), 0);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != ENOTCONN))
			break;
		if (n > 0) {
			size_t k = (size_t)n < ans_max - got ? (size_t)n : ans_max - got;

			memcpy(ans + got, tmp, k);
			got += k;
		}
	}
	close(fd);
	return got;
}

FUZZ_TARGET(status)
{
	static const char probe[] = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
	char ans[256];
	size_t n;

	setup();
	(void)exchange(data, size, ans, sizeof(ans));
	n = exchange(probe, sizeof(probe) - 1, ans, sizeof(ans) - 1);
	ans[n] = '\0';
	if (strncmp(ans, "HTTP/1.1 200", 12) != 0) {
		fprintf(stderr, "the status endpoint stopped answering: '%s'\n", ans);
		abort();
	}
	return 0;
}
