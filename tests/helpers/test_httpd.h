/* Local servers for tests and benchmarks (127.0.0.1 only).
 *
 * test_httpd: libmicrohttpd in a child process (one thread per connection), on
 * 127.0.0.1 and a port the kernel picks, plain HTTP or HTTPS.  Endpoints:
 *   /echo                  the request body back, byte-exact; headers X-Method,
 *                          X-Request-Content-Type, X-Request-User-Agent
 *   /bytes?n=N[&chunked=1] N bytes of test_httpd_byte(i), with Content-Length
 *                          (or chunked), generated on the fly (no N-byte buffer)
 *   /sleep?ms=N            answers "slept" after N ms (cut short by stop)
 *   /status?code=C[&retry_after=S][&location=L]
 *                          status C, body "status C", Retry-After: S and
 *                          Location: L verbatim, X-Test-Status: C
 *   any other path /a/b    with opts.files_dir set: 200 and the bytes of the file
 *                          files_dir/a_b ('/' after the first one becomes '_'),
 *                          read at each request (so a test may replace it),
 *                          chunked (no Content-Length); 404 when it is missing
 * It counts TCP connections accepted and requests answered.
 *
 * test_tls_make: a throw-away CA and a server certificate for IP 127.0.0.1 made
 * with openssl(1).  test_nginx: nginx-light as a separate process. */
#pragma once

#include <stdint.h>
#include <sys/types.h>

struct test_httpd;

struct test_httpd_opts {
	const char *cert_file; /* PEM server certificate + key: serve HTTPS */
	const char *key_file;
	const char *files_dir; /* serve canned answers from here (see above) */
};

int test_httpd_start(const struct test_httpd_opts *opts, struct test_httpd **ret);
struct test_httpd *test_httpd_stop(struct test_httpd *s); /* NULL-safe */
int test_httpd_port(const struct test_httpd *s);
/* "http://127.0.0.1:PORT" (or https) followed by the formatted path; free() it. */
char *test_httpd_url(const struct test_httpd *s, const char *path_fmt, ...)
    __attribute__((format(printf, 2, 3)));
unsigned test_httpd_connections(const struct test_httpd *s);
unsigned test_httpd_requests(const struct test_httpd *s);
/* Byte i of every /bytes body. */
static inline uint8_t test_httpd_byte(uint64_t i)
{
	return (uint8_t)(i % 251);
}

/* In dir: NAME-ca.pem, NAME-ca.key (a CA), NAME.pem, NAME.key (a server
 * certificate for IP:127.0.0.1 only, signed by that CA).  0 or -errno. */
int test_tls_make(const char *dir, const char *name);
/* Run a program quietly (output to dir/cmd.log), 0 when it exited 0. */
int test_run_quiet(const char *dir, char *const argv[]);

/* nginx-light: `server_block` is a complete `server { ... }` with "@PORT@" and
 * "@DIR@" substituted; dir is a private writable directory.  Starts nginx in the
 * foreground as a child, waits until the port answers. */
struct test_nginx;
const char *test_nginx_binary(void); /* NULL when nginx is not installed */
int test_nginx_start(const char *dir, const char *server_block, struct test_nginx **ret);
int test_nginx_port(const struct test_nginx *n);
struct test_nginx *test_nginx_stop(struct test_nginx *n); /* NULL-safe */
