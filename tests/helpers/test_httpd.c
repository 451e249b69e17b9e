/* Local servers for tests and benchmarks: see test_httpd.h. */
#include "test_httpd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "testutil.h"
#include "util/buf.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"

#define ECHO_MAX ((size_t)64 * 1024 * 1024)
#define PEM_MAX ((size_t)64 * 1024)

/* Shared between the test and the server process. */
struct counters {
	atomic_uint connections;
	atomic_uint requests;
};

/* The server runs in a child process of its own.  Not a thread of the test:
 * under valgrind a thread blocked in io_uring_enter() keeps every other thread
 * of its process from running, so an in-process server would stall whenever
 * the client's loop waits. */
struct test_httpd {
	pid_t pid;
	int port;
	bool tls;
	char *files_dir;  /* NULL = no canned answers */
	char *cert, *key; /* PEM; MHD keeps pointers to them */
	struct counters *n;
	/* in the server process only */
	struct MHD_Daemon *d;
	int stop_fd; /* eventfd: readable once the server is stopping */
};

/* One request's uploaded body. */
struct test_req {
	struct buf body;
	bool too_big;
};

/* ---- responses --------------------------------------------------------- */

static enum MHD_Result queue(struct MHD_Connection *c, unsigned status, struct MHD_Response *r)
{
	enum MHD_Result ret;

	if (!r)
		return MHD_NO;
	ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

static struct MHD_Response *text(const char *s)
{
	return MHD_create_response_from_buffer(strlen(s), (void *)(uintptr_t)s,
	                                       MHD_RESPMEM_MUST_COPY);
}

static const char *arg(struct MHD_Connection *c, const char *name)
{
	return MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, name);
}

static unsigned long long arg_ull(struct MHD_Connection *c, const char *name)
{
	const char *v = arg(c, name);

	return v ? strtoull(v, NULL, 10) : 0;
}

static void add_request_header(struct MHD_Connection *c, struct MHD_Response *r, const char *name,
                               const char *as)
{
	const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);

	if (v)
		MHD_add_response_header(r, as, v);
}

static enum MHD_Result route_echo(struct MHD_Connection *c, const char *method, struct test_req *rq)
{
	struct MHD_Response *r;

	if (rq->too_big)
		return queue(c, MHD_HTTP_CONTENT_TOO_LARGE, text("too big\n"));
	r = MHD_create_response_from_buffer(
	    rq->body.len, rq->body.data ? rq->body.data : (char *)"", MHD_RESPMEM_MUST_COPY);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, "X-Method", method);
	MHD_add_response_header(r, "Content-Type", "application/octet-stream");
	add_request_header(c, r, "Content-Type", "X-Request-Content-Type");
	add_request_header(c, r, "User-Agent", "X-Request-User-Agent");
	return queue(c, MHD_HTTP_OK, r);
}

struct bytes_gen {
	uint64_t n;
};

static ssize_t bytes_read(void *cls, uint64_t pos, char *out, size_t max)
{
	struct bytes_gen *g = cls;
	size_t k;

	if (pos >= g->n)
		return MHD_CONTENT_READER_END_OF_STREAM;
	k = (size_t)MIN((uint64_t)max, g->n - pos);
	for (size_t i = 0; i < k; i++)
		out[i] = (char)test_httpd_byte(pos + i);
	return (ssize_t)k;
}

static enum MHD_Result route_bytes(struct MHD_Connection *c)
{
	struct bytes_gen *g = malloc(sizeof(*g));
	struct MHD_Response *r;

	if (!g)
		return MHD_NO;
	g->n = arg_ull(c, "n");
	r = MHD_create_response_from_callback(arg_ull(c, "chunked") ? MHD_SIZE_UNKNOWN : g->n,
	                                      32 * 1024, bytes_read, g, free);
	if (!r) {
		free(g);
		return MHD_NO;
	}
	MHD_add_response_header(r, "Content-Type", "application/octet-stream");
	return queue(c, arg_ull(c, "status") ? (unsigned)arg_ull(c, "status") : MHD_HTTP_OK, r);
}

static ssize_t file_read(void *cls, uint64_t pos, char *out, size_t max)
{
	int *fd = cls;
	ssize_t n = pread(*fd, out, max, (off_t)pos);

	if (n == 0)
		return MHD_CONTENT_READER_END_OF_STREAM;
	return n < 0 ? MHD_CONTENT_READER_END_WITH_ERROR : n;
}

static void file_free(void *cls)
{
	int *fd = cls;

	safe_close(*fd);
	free(fd);
}

/* A canned answer: files_dir/<path with '/' as '_'>, chunked. */
static enum MHD_Result route_file(struct test_httpd *s, struct MHD_Connection *c, const char *url)
{
	_cleanup_free_ char *path = NULL;
	struct MHD_Response *r;
	int *fd;

	if (!s->files_dir || !*url || asprintf(&path, "%s/%s", s->files_dir, url + 1) < 0)
		return queue(c, MHD_HTTP_NOT_FOUND, text("not found\n"));
	for (char *p = path + strlen(s->files_dir) + 1; *p; p++)
		if (*p == '/')
			*p = '_';
	fd = malloc(sizeof(*fd));
	if (!fd)
		return MHD_NO;
	*fd = open(path, O_RDONLY | O_CLOEXEC);
	if (*fd < 0) {
		free(fd);
		return queue(c, MHD_HTTP_NOT_FOUND, text("not found\n"));
	}
	r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, file_read, fd,
	                                      file_free);
	if (!r) {
		file_free(fd);
		return MHD_NO;
	}
	MHD_add_response_header(r, "Content-Type", "application/json");
	return queue(c, MHD_HTTP_OK, r);
}

static enum MHD_Result route_sleep(struct test_httpd *s, struct MHD_Connection *c)
{
	struct pollfd p = {.fd = s->stop_fd, .events = POLLIN};
	unsigned long long ms = arg_ull(c, "ms");

	(void)poll(&p, 1, (int)MIN(ms, 600000ULL));
	return queue(c, MHD_HTTP_OK, text("slept\n"));
}

static enum MHD_Result route_status(struct MHD_Connection *c)
{
	unsigned long long code = arg_ull(c, "code");
	const char *ra = arg(c, "retry_after"), *loc = arg(c, "location");
	struct MHD_Response *r;
	char body[64];

	if (code < 100 || code > 599)
		return queue(c, MHD_HTTP_BAD_REQUEST, text("bad code\n"));
	snprintf(body, sizeof(body), "status %llu", code);
	r = text(body);
	if (!r)
		return MHD_NO;
	if (ra)
		MHD_add_response_header(r, "Retry-After", ra);
	if (loc)
		MHD_add_response_header(r, "Location", loc);
	MHD_add_response_header(r, "X-Test-Status", body + strlen("status "));
	return queue(c, (unsigned)code, r);
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload_data,
                              size_t *upload_data_size, void **req_cls)
{
	struct test_httpd *s = cls;
	struct test_req *rq = *req_cls;

	if (!rq) {
		rq = calloc(1, sizeof(*rq));
		if (!rq)
			return MHD_NO;
		rq->body = BUF_INIT(ECHO_MAX);
		*req_cls = rq;
		return MHD_YES;
	}
	if (*upload_data_size > 0) {
		if (buf_append(&rq->body, upload_data, *upload_data_size) < 0)
			rq->too_big = true;
		*upload_data_size = 0;
		return MHD_YES;
	}
	atomic_fetch_add(&s->n->requests, 1);
	if (streq(url, "/echo"))
		return route_echo(c, method, rq);
	if (streq(url, "/bytes"))
		return route_bytes(c);
	if (streq(url, "/sleep"))
		return route_sleep(s, c);
	if (streq(url, "/status"))
		return route_status(c);
	if (strncmp(url, "/path/", 6) == 0) /* the path as it came */
		return queue(c, MHD_HTTP_OK, text(url));
	return route_file(s, c, url);
}

static void completed(void *cls, struct MHD_Connection *c, void **req_cls,
                      enum MHD_RequestTerminationCode toe)
{
	struct test_req *rq = *req_cls;

	if (rq) {
		buf_done(&rq->body);
		free(rq);
		*req_cls = NULL;
	}
}

static void notify_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                              enum MHD_ConnectionNotificationCode toe)
{
	struct test_httpd *s = cls;

	if (toe == MHD_CONNECTION_NOTIFY_STARTED)
		atomic_fetch_add(&s->n->connections, 1);
}

/* ---- the daemon -------------------------------------------------------- */

static int load_tls(struct test_httpd *s, const struct test_httpd_opts *opts)
{
	size_t len;
	int r;

	if (!opts || !opts->cert_file)
		return 0;
	if (!MHD_is_feature_supported(MHD_FEATURE_TLS))
		return -EOPNOTSUPP;
	r = read_file_capped(opts->cert_file, PEM_MAX, &s->cert, &len);
	if (r >= 0)
		r = read_file_capped(opts->key_file, PEM_MAX, &s->key, &len);
	s->tls = r >= 0;
	return r;
}

static struct MHD_Daemon *start_daemon(struct test_httpd *s, int lfd)
{
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
	                 MHD_USE_AUTO | (s->tls ? MHD_USE_TLS : 0);

	if (s->tls)
		return MHD_start_daemon(flags, 0, NULL, NULL, handle, s, MHD_OPTION_LISTEN_SOCKET,
		                        lfd, MHD_OPTION_NOTIFY_COMPLETED, completed, s,
		                        MHD_OPTION_NOTIFY_CONNECTION, notify_connection, s,
		                        MHD_OPTION_HTTPS_MEM_CERT, s->cert,
		                        MHD_OPTION_HTTPS_MEM_KEY, s->key, MHD_OPTION_END);
	return MHD_start_daemon(flags, 0, NULL, NULL, handle, s, MHD_OPTION_LISTEN_SOCKET, lfd,
	                        MHD_OPTION_NOTIFY_COMPLETED, completed, s,
	                        MHD_OPTION_NOTIFY_CONNECTION, notify_connection, s, MHD_OPTION_END);
}

/* The server process: serve until SIGTERM (blocked, so it waits in sigwait),
 * or until the test process dies. */
static _Noreturn void serve(struct test_httpd *s, int lfd, pid_t parent)
{
	sigset_t term;
	int sig, code = 0;

	sigemptyset(&term);
	sigaddset(&term, SIGTERM);
	if (prctl(PR_SET_PDEATHSIG, SIGTERM) < 0 || getppid() != parent)
		_exit(1);
	s->stop_fd = eventfd(0, EFD_CLOEXEC);
	s->d = s->stop_fd >= 0 ? start_daemon(s, lfd) : NULL;
	if (!s->d)
		code = 1;
	else
		(void)sigwait(&term, &sig);
	(void)eventfd_write(s->stop_fd, 1);
	if (s->d)
		MHD_stop_daemon(s->d);
	safe_close(s->stop_fd);
	free(s->cert);
	free(s->key);
	free(s->files_dir);
	munmap(s->n, sizeof(*s->n));
	free(s);
	_exit(code);
}

static int listen_loopback(int *ret_port)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 256) < 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &len) < 0) {
		int r = -errno;

		close(fd);
		return r;
	}
	*ret_port = ntohs(a.sin_port);
	return fd;
}

/* Fork the server; the socket already listens, so no readiness wait is needed. */
static int spawn_server(struct test_httpd *s, int lfd)
{
	sigset_t term, old;
	pid_t parent = getpid();

	sigemptyset(&term);
	sigaddset(&term, SIGTERM);
	sigprocmask(SIG_BLOCK, &term, &old);
	s->pid = fork();
	if (s->pid == 0)
		serve(s, lfd, parent);
	sigprocmask(SIG_SETMASK, &old, NULL);
	return s->pid < 0 ? -errno : 0;
}

int test_httpd_start(const struct test_httpd_opts *opts, struct test_httpd **ret)
{
	struct test_httpd *s = calloc(1, sizeof(*s));
	int r, lfd = -1;

	if (!s)
		return -ENOMEM;
	s->stop_fd = -1;
	if (opts && opts->files_dir && !(s->files_dir = strdup(opts->files_dir))) {
		free(s);
		return -ENOMEM;
	}
	s->n = mmap(NULL, sizeof(*s->n), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	r = s->n == MAP_FAILED ? -errno : load_tls(s, opts);
	if (s->n == MAP_FAILED)
		s->n = NULL;
	if (r >= 0)
		r = lfd = listen_loopback(&s->port);
	if (r >= 0)
		r = spawn_server(s, lfd);
	safe_close(lfd);
	if (r < 0) {
		test_httpd_stop(s);
		return r;
	}
	*ret = s;
	return 0;
}

struct test_httpd *test_httpd_stop(struct test_httpd *s)
{
	int st;

	if (!s)
		return NULL;
	if (s->pid > 0) {
		kill(s->pid, SIGTERM);
		while (waitpid(s->pid, &st, 0) < 0 && errno == EINTR)
			;
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
			fprintf(stderr, "test_httpd: server process ended badly (status 0x%x)\n",
			        st);
	}
	if (s->n)
		munmap(s->n, sizeof(*s->n));
	free(s->cert);
	free(s->key);
	free(s->files_dir);
	free(s);
	return NULL;
}

int test_httpd_port(const struct test_httpd *s)
{
	return s->port;
}

char *test_httpd_url(const struct test_httpd *s, const char *path_fmt, ...)
{
	struct buf b = BUF_INIT(0);
	va_list ap;
	int r;

	r = buf_printf(&b, "%s://127.0.0.1:%d", s->tls ? "https" : "http", s->port);
	va_start(ap, path_fmt);
	if (r >= 0)
		r = buf_vprintf(&b, path_fmt, ap);
	va_end(ap);
	if (r < 0) {
		buf_done(&b);
		return NULL;
	}
	return buf_steal(&b);
}

unsigned test_httpd_connections(const struct test_httpd *s)
{
	return atomic_load(&s->n->connections);
}

unsigned test_httpd_requests(const struct test_httpd *s)
{
	return atomic_load(&s->n->requests);
}

/* ---- programs: openssl, nginx ------------------------------------------ */

static int spawn_logged(const char *dir, char *const argv[], pid_t *ret)
{
	char *log = NULL;
	int r;

	if (asprintf(&log, "%s/cmd.log", dir) < 0)
		return -ENOMEM;
	r = tu_spawn_logged(argv, NULL, log, -1, -1, ret);
	free(log);
	return r;
}

static int wait_exit(pid_t pid)
{
	int st;

	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -errno;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -EIO;
}

int test_run_quiet(const char *dir, char *const argv[])
{
	pid_t pid;
	int r = spawn_logged(dir, argv, &pid);

	return r < 0 ? r : wait_exit(pid);
}

static const char tls_cnf[] = "[req]\n"
                              "distinguished_name = dn\n"
                              "prompt = no\n"
                              "[dn]\n"
                              "CN = lessee test\n"
                              "[ca]\n"
                              "basicConstraints = critical,CA:TRUE\n"
                              "keyUsage = critical,keyCertSign,cRLSign\n"
                              "subjectKeyIdentifier = hash\n"
                              "[srv]\n"
                              "basicConstraints = critical,CA:FALSE\n"
                              "keyUsage = critical,digitalSignature\n"
                              "extendedKeyUsage = serverAuth\n"
                              "subjectAltName = IP:127.0.0.1\n";

#define PATH(buf, dir, name, suffix) snprintf(buf, sizeof(buf), "%s/%s%s", dir, name, suffix)

int test_tls_make(const char *dir, const char *name)
{
	char cnf[4096], cak[4096], cap[4096], key[4096], csr[4096], crt[4096], subj[256];
	int r;

	PATH(cnf, dir, name, ".cnf");
	PATH(cak, dir, name, "-ca.key");
	PATH(cap, dir, name, "-ca.pem");
	PATH(key, dir, name, ".key");
	PATH(csr, dir, name, ".csr");
	PATH(crt, dir, name, ".pem");
	snprintf(subj, sizeof(subj), "/CN=lessee test CA %s", name);
	r = write_file_atomic(cnf, tls_cnf, sizeof(tls_cnf) - 1, 0600);
	if (r < 0)
		return r;
	char *ca[] = {"openssl",
	              "req",
	              "-x509",
	              "-config",
	              cnf,
	              "-extensions",
	              "ca",
	              "-newkey",
	              "ec",
	              "-pkeyopt",
	              "ec_paramgen_curve:prime256v1",
	              "-nodes",
	              "-keyout",
	              cak,
	              "-out",
	              cap,
	              "-days",
	              "2",
	              "-subj",
	              subj,
	              NULL};
	char *req[] = {"openssl",
	               "req",
	               "-new",
	               "-config",
	               cnf,
	               "-newkey",
	               "ec",
	               "-pkeyopt",
	               "ec_paramgen_curve:prime256v1",
	               "-nodes",
	               "-keyout",
	               key,
	               "-out",
	               csr,
	               "-subj",
	               "/CN=127.0.0.1",
	               NULL};
	char *sign[] = {"openssl", "x509",        "-req",        "-in",  csr,     "-CA", cap,
	                "-CAkey",  cak,           "-set_serial", "2",    "-days", "2",   "-extfile",
	                cnf,       "-extensions", "srv",         "-out", crt,     NULL};
	r = test_run_quiet(dir, ca);
	if (r >= 0)
		r = test_run_quiet(dir, req);
	if (r >= 0)
		r = test_run_quiet(dir, sign);
	return r;
}

struct test_nginx {
	pid_t pid;
	int port;
};

const char *test_nginx_binary(void)
{
	static const char *const paths[] = {"/usr/sbin/nginx", "/usr/bin/nginx",
	                                    "/usr/local/sbin/nginx"};

	for (size_t i = 0; i < ELEMENTSOF(paths); i++)
		if (access(paths[i], X_OK) == 0)
			return paths[i];
	return NULL;
}

/* Replace every @PORT@ and @DIR@ in t. */
static int expand(struct buf *out, const char *t, const char *dir, int port)
{
	int r = 0;

	while (*t && r >= 0) {
		if (startswith(t, "@PORT@")) {
			r = buf_printf(out, "%d", port);
			t += strlen("@PORT@");
		} else if (startswith(t, "@DIR@")) {
			r = buf_appends(out, dir);
			t += strlen("@DIR@");
		} else
			r = buf_append(out, t++, 1);
	}
	return r;
}

static const char nginx_main[] = "daemon off;\n"
                                 "master_process off;\n"
                                 "worker_processes 1;\n"
                                 "pid @DIR@/nginx.pid;\n"
                                 "error_log @DIR@/error.log warn;\n"
                                 "events { worker_connections 4096; }\n"
                                 "http {\n"
                                 "  access_log off;\n"
                                 "  keepalive_requests 1000000;\n"
                                 "  client_body_temp_path @DIR@/client_body;\n"
                                 "  proxy_temp_path @DIR@/proxy;\n"
                                 "  fastcgi_temp_path @DIR@/fastcgi;\n"
                                 "  uwsgi_temp_path @DIR@/uwsgi;\n"
                                 "  scgi_temp_path @DIR@/scgi;\n";

static int nginx_write_conf(const char *dir, const char *server_block, int port, char **ret)
{
	struct buf b = BUF_INIT(0);
	char *path = NULL;
	int r;

	r = expand(&b, nginx_main, dir, port);
	if (r >= 0)
		r = expand(&b, server_block, dir, port);
	if (r >= 0)
		r = buf_appends(&b, "\n}\n");
	if (r >= 0)
		r = asprintf(&path, "%s/nginx.conf", dir) < 0 ? -ENOMEM : 0;
	if (r >= 0)
		r = write_file_atomic(path, b.data, b.len, 0600);
	buf_done(&b);
	if (r < 0) {
		free(path);
		return r;
	}
	*ret = path;
	return 0;
}

int test_nginx_start(const char *dir, const char *server_block, struct test_nginx **ret)
{
	const char *bin = test_nginx_binary();
	struct test_nginx *n;
	char *conf = NULL, prefix[4096], elog[4096];
	int port = tu_free_port(), r;

	if (!bin)
		return -ENOENT;
	if (port < 0)
		return port;
	r = nginx_write_conf(dir, server_block, port, &conf);
	if (r < 0)
		return r;
	snprintf(prefix, sizeof(prefix), "%s/", dir);
	snprintf(elog, sizeof(elog), "%s/error.log", dir);
	char *argv[] = {(char *)(uintptr_t)bin, "-p", prefix, "-c", conf, "-e", elog, NULL};
	n = calloc(1, sizeof(*n));
	r = n ? spawn_logged(dir, argv, &n->pid) : -ENOMEM;
	free(conf);
	if (r < 0) {
		free(n);
		return r;
	}
	n->port = port;
	r = tu_wait_port(port, 10 * USEC_PER_SEC);
	if (r < 0) {
		test_nginx_stop(n);
		return r;
	}
	*ret = n;
	return 0;
}

int test_nginx_port(const struct test_nginx *n)
{
	return n->port;
}

struct test_nginx *test_nginx_stop(struct test_nginx *n)
{
	if (!n)
		return NULL;
	if (n->pid > 0) {
		kill(n->pid, SIGTERM);
		(void)wait_exit(n->pid);
	}
	free(n);
	return NULL;
}
