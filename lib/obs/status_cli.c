#include "obs/status_cli.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ev/ev.h"
#include "http/http.h"
#include "util/macro.h"
#include "util/strutil.h"
#include "util/time.h"

#define MAX_DOC (4 * 1024 * 1024)
#define CONNECT_TIMEOUT (2 * USEC_PER_SEC)
#define TIMEOUT (5 * USEC_PER_SEC)
#define CELL_MAX 64 /* bytes of a cell, before "..." */
#define MAX_COLS 6

int status_cli_base_url(const struct sockaddr *addr, socklen_t len, char **ret)
{
	char host[INET6_ADDRSTRLEN], *url;
	int n;

	if (addr->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
		struct sockaddr_in sin;

		memcpy(&sin, addr, sizeof(sin));
		if (sin.sin_addr.s_addr == htonl(INADDR_ANY))
			sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		inet_ntop(AF_INET, &sin.sin_addr, host, sizeof(host));
		n = asprintf(&url, "http://%s:%u", host, ntohs(sin.sin_port));
	} else if (addr->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
		struct sockaddr_in6 sin6;

		memcpy(&sin6, addr, sizeof(sin6));
		if (IN6_IS_ADDR_UNSPECIFIED(&sin6.sin6_addr))
			sin6.sin6_addr = in6addr_loopback;
		inet_ntop(AF_INET6, &sin6.sin6_addr, host, sizeof(host));
		n = asprintf(&url, "http://[%s]:%u", host, ntohs(sin6.sin6_port));
	} else
		return -EAFNOSUPPORT;
	if (n < 0)
		return -ENOMEM;
	*ret = url;
	return 0;
}

/* ---- printing ------------------------------------------------------------ */

/* Strings may come from the API: control characters (C0, DEL, and C1 as
 * UTF-8) become '?', so nothing printed can drive the terminal, and a cell is
 * cut at CELL_MAX bytes on a character boundary. */
static void cell_set(char *cell, const char *s)
{
	const unsigned char *p = (const unsigned char *)(s ? s : "-");
	size_t o = 0;

	for (; *p && o < CELL_MAX; p++) {
		unsigned char c = *p;

		if (c == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) {
			c = '?';
			p++;
		} else if (c < 0x20 || c == 0x7f)
			c = '?';
		cell[o++] = (char)c;
	}
	if (*p) {
		if ((*p & 0xc0) == 0x80) { /* cut inside a character: drop all of it */
			while (o > 0 && ((unsigned char)cell[o - 1] & 0xc0) == 0x80)
				o--;
			if (o > 0)
				o--;
		}
		memcpy(cell + o, "...", 3);
		o += 3;
	}
	cell[o] = '\0';
}

/* Terminal columns, roughly: one per character, not per byte. */
static size_t display_width(const char *s)
{
	size_t n = 0;

	for (; *s; s++)
		n += ((unsigned char)*s & 0xc0) != 0x80;
	return n;
}

typedef char cell_t[CELL_MAX + 4];

struct table {
	size_t ncols, nrows;
	cell_t *cells;
	size_t width[MAX_COLS];
};

static int table_row(struct table *t, ...)
{
	cell_t *nc = realloc(t->cells, (t->nrows + 1) * t->ncols * sizeof(cell_t));
	va_list ap;

	if (!nc)
		return -ENOMEM;
	t->cells = nc;
	va_start(ap, t);
	for (size_t i = 0; i < t->ncols; i++) {
		char *cell = t->cells[t->nrows * t->ncols + i];

		cell_set(cell, va_arg(ap, const char *));
		t->width[i] = MAX(t->width[i], display_width(cell));
	}
	va_end(ap);
	t->nrows++;
	return 0;
}

static void table_print(struct table *t, FILE *out)
{
	for (size_t r = 0; r < t->nrows; r++) {
		for (size_t i = 0; i < t->ncols; i++) {
			const char *cell = t->cells[r * t->ncols + i];

			if (i + 1 == t->ncols) {
				fprintf(out, "%s\n", cell);
				break;
			}
			fprintf(out, "%s%*s", cell, (int)(t->width[i] - display_width(cell) + 2),
			        "");
		}
	}
	free(t->cells);
	t->cells = NULL;
}

static const char *jstr(const cJSON *o, const char *key)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A number as text ("-" when absent); integral values without decimals. */
static const char *jnum(const cJSON *o, const char *key, char *buf, size_t n)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
		return "-";
	snprintf(buf, n, v->valuedouble == floor(v->valuedouble) ? "%.0f" : "%.1f", v->valuedouble);
	return buf;
}

static const char *jage(const cJSON *o, const char *key, char *buf, size_t n)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0 && v->valuedouble < 1e9))
		return "-";
	if (v->valuedouble < 1)
		return "0s";
	return time_format_duration(buf, n, (usec_t)v->valuedouble * USEC_PER_SEC);
}

/* "cgroup (<path>)" or "process group (<why>)"; no row for a daemon that does
 * not say. */
static int kill_mode_row(struct table *t, const cJSON *doc, char *buf, size_t n)
{
	const char *mode = jstr(doc, "kill_mode");
	const char *cg = jstr(doc, "cgroup"), *why = jstr(doc, "kill_mode_reason");

	if (!mode)
		return 0;
	if (streq(mode, "cgroup"))
		snprintf(buf, n, "cgroup%s%.240s%s", cg ? " (" : "", cg ? cg : "", cg ? ")" : "");
	else if (streq(mode, "process_group"))
		snprintf(buf, n, "process group%s%.240s%s", why ? " (" : "", why ? why : "",
		         why ? ")" : "");
	else
		snprintf(buf, n, "%.60s", mode);
	return table_row(t, "kill mode", buf);
}

/* Runs whose child is gone and whose result the API has yet to take hold a
 * place in the reporting queue, not a slot (docs/architecture.md).  A daemon
 * that does not say how many: counted from the runs' states. */
static bool state_reporting(const char *state)
{
	return state &&
	       (streq(state, "flushing") || streq(state, "reporting") || streq(state, "releasing"));
}

static void slots_rows(const cJSON *doc, char *slots, size_t ns, char *rep, size_t nr)
{
	const cJSON *runs = cJSON_GetObjectItemCaseSensitive(doc, "runs"), *run;
	const cJSON *busy = cJSON_GetObjectItemCaseSensitive(doc, "slots_busy");
	const cJSON *reporting = cJSON_GetObjectItemCaseSensitive(doc, "reporting");
	double b = 0, q = 0;
	char n1[32], n2[32];

	cJSON_ArrayForEach(run, runs)
	{
		bool in_queue = state_reporting(jstr(run, "state"));

		b += !in_queue;
		q += in_queue;
	}
	if (cJSON_IsNumber(busy))
		b = busy->valuedouble;
	if (cJSON_IsNumber(reporting))
		q = reporting->valuedouble;
	snprintf(slots, ns, "%.0f of %s in use", b, jnum(doc, "slots", n1, sizeof(n1)));
	if (cJSON_GetObjectItemCaseSensitive(doc, "max_reporting"))
		snprintf(rep, nr, "%.0f (at most %s)", q,
		         jnum(doc, "max_reporting", n2, sizeof(n2)));
	else
		snprintf(rep, nr, "%.0f", q);
}

static int print_summary(const cJSON *doc, FILE *out)
{
	const cJSON *ready = cJSON_GetObjectItemCaseSensitive(doc, "ready");
	const char *reason = jstr(doc, "ready_reason");
	char worker[160], rd[160], slots[64], rep[64], n1[32], n2[32], n3[32], km[320];
	struct table t = {.ncols = 2};
	int r;

	snprintf(worker, sizeof(worker), "%.80s (lessee %.20s)",
	         jstr(doc, "worker_id") ? jstr(doc, "worker_id") : "?",
	         jstr(doc, "version") ? jstr(doc, "version") : "?");
	snprintf(rd, sizeof(rd), "%s%s%.120s", cJSON_IsTrue(ready) ? "yes" : "no",
	         reason && !cJSON_IsTrue(ready) ? ": " : "",
	         reason && !cJSON_IsTrue(ready) ? reason : "");
	slots_rows(doc, slots, sizeof(slots), rep, sizeof(rep));
	r = table_row(&t, "worker", worker);
	r = r < 0 ? r : table_row(&t, "phase", jstr(doc, "phase"));
	r = r < 0 ? r : table_row(&t, "ready", rd);
	r = r < 0 ? r : table_row(&t, "backend", jstr(doc, "io_backend"));
	r = r < 0 ? r : kill_mode_row(&t, doc, km, sizeof(km));
	r = r < 0 ? r : table_row(&t, "slots", slots);
	r = r < 0 ? r : table_row(&t, "reporting", rep);
	r = r < 0 ? r : table_row(&t, "runs done", jnum(doc, "runs_done", n1, sizeof(n1)));
	r = r < 0 ? r : table_row(&t, "queue", jnum(doc, "queue_depth", n2, sizeof(n2)));
	r = r < 0 ? r : table_row(&t, "spooled", jnum(doc, "spool_pending", n3, sizeof(n3)));
	r = r < 0 ? r
	          : table_row(&t, "api",
	                      jstr(cJSON_GetObjectItemCaseSensitive(doc, "config"), "api_url"));
	table_print(&t, out);
	return r;
}

static int print_runs(const cJSON *runs, FILE *out)
{
	struct table t = {.ncols = 6};
	const cJSON *run;
	int r;

	if (cJSON_GetArraySize(runs) == 0) {
		fprintf(out, "\nno runs in flight\n");
		return 0;
	}
	fputc('\n', out);
	r = table_row(&t, "RUN", "WORKFLOW", "ATTEMPT", "STATE", "AGE", "PID");
	cJSON_ArrayForEach(run, runs)
	{
		char a[32], age[TIME_DURATION_MAX], pid[32];

		if (r >= 0 && cJSON_IsObject(run))
			r = table_row(&t, jstr(run, "id"), jstr(run, "workflow"),
			              jnum(run, "attempt", a, sizeof(a)), jstr(run, "state"),
			              jage(run, "age_s", age, sizeof(age)),
			              jnum(run, "pid", pid, sizeof(pid)));
	}
	table_print(&t, out);
	return r;
}

static int print_breakers(const cJSON *breakers, FILE *out)
{
	struct table t = {.ncols = 4};
	const cJSON *b;
	int r;

	if (cJSON_GetArraySize(breakers) == 0) {
		fprintf(out, "\nno workflows configured\n");
		return 0;
	}
	fputc('\n', out);
	r = table_row(&t, "WORKFLOW", "BREAKER", "FAILURES", "RETRY IN");
	cJSON_ArrayForEach(b, breakers)
	{
		char f[32], in[TIME_DURATION_MAX];

		if (r >= 0 && cJSON_IsObject(b))
			r = table_row(&t, jstr(b, "workflow"), jstr(b, "state"),
			              jnum(b, "consecutive_failures", f, sizeof(f)),
			              jage(b, "retry_in_s", in, sizeof(in)));
	}
	table_print(&t, out);
	return r;
}

int status_cli_print(const char *doc, size_t len, FILE *out)
{
	cJSON *j = cJSON_ParseWithLength(doc, len);
	const cJSON *runs, *breakers;
	int r;

	if (!cJSON_IsObject(j) || !jstr(j, "phase")) {
		cJSON_Delete(j);
		return -EBADMSG;
	}
	runs = cJSON_GetObjectItemCaseSensitive(j, "runs");
	breakers = cJSON_GetObjectItemCaseSensitive(j, "breakers");
	r = print_summary(j, out);
	if (r >= 0)
		r = print_runs(cJSON_IsArray(runs) ? runs : NULL, out);
	if (r >= 0)
		r = print_breakers(cJSON_IsArray(breakers) ? breakers : NULL, out);
	cJSON_Delete(j);
	return r;
}

/* ---- fetching ------------------------------------------------------------ */

struct fetch {
	ev_t *ev;
	int error;
	long status;
	char *body;
	size_t body_len;
	char message[256];
};

static void on_response(http_req_t *req, const struct http_response *resp, void *userdata)
{
	struct fetch *f = userdata;

	f->error = resp->error;
	f->status = resp->status;
	if (resp->error)
		snprintf(f->message, sizeof(f->message), "%s",
		         resp->error_message ? resp->error_message : strerror(-resp->error));
	else if ((f->body = malloc(resp->body_len + 1))) {
		memcpy(f->body, resp->body, resp->body_len);
		f->body[resp->body_len] = '\0';
		f->body_len = resp->body_len;
	} else {
		f->error = -ENOMEM;
		snprintf(f->message, sizeof(f->message), "%s", strerror(ENOMEM));
	}
	ev_exit(f->ev, 0);
}

static int fetch(const char *url, struct fetch *f)
{
	const struct http_request rq = {
	    .method = "GET",
	    .url = url,
	    .connect_timeout = CONNECT_TIMEOUT,
	    .timeout = TIMEOUT,
	    .max_response = MAX_DOC,
	    .label = "status",
	};
	const struct http_opts o = {0};
	http_t *h = NULL;
	/* epoll: one request gains nothing from a ring, and this way the client
	 * never competes with a daemon's ring in the same process (valgrind runs
	 * a thread blocked in io_uring_enter as if it were not blocked). */
	int r = ev_new(&f->ev, "epoll");

	if (r >= 0)
		r = http_new(f->ev, &o, &h);
	if (r >= 0)
		r = http_send(h, &rq, on_response, f, NULL);
	if (r >= 0)
		r = ev_run(f->ev);
	http_free(h);
	ev_free(f->ev);
	if (r < 0)
		snprintf(f->message, sizeof(f->message), "%s", strerror(-r));
	return r < 0 ? r : f->error;
}

/* The first line of an error body, made printable. */
static void first_line(const char *body, char *out)
{
	char line[CELL_MAX + 1];

	snprintf(line, sizeof(line), "%.*s", (int)strcspn(body ? body : "", "\r\n"),
	         body ? body : "");
	cell_set(out, line);
}

/* GET <base_url><path>: 0 with f->body on 200; otherwise what went wrong is
 * on err and the result is the transport error or -EPROTO. */
static int get(const char *base_url, const char *path, struct fetch *f, char **url, FILE *err)
{
	cell_t line;
	int r;

	if (asprintf(url, "%s%s", base_url, path) < 0) {
		*url = NULL;
		return -ENOMEM;
	}
	r = fetch(*url, f);
	if (r < 0)
		fprintf(err, "lessee status: cannot reach the daemon at %s: %s\n", *url,
		        f->message);
	else if (f->status != 200) {
		first_line(f->body, line);
		fprintf(err, "lessee status: %s answered HTTP %ld: %s\n", *url, f->status, line);
		r = -EPROTO;
	}
	return r;
}

int status_cli_run(const char *base_url, bool json, FILE *out, FILE *err)
{
	_cleanup_free_ char *url = NULL;
	struct fetch f = {0};
	int r = get(base_url, "/status", &f, &url, err);

	if (r >= 0 && json) {
		cJSON *j = cJSON_ParseWithLength(f.body, f.body_len);

		r = cJSON_IsObject(j) ? 0 : -EBADMSG;
		cJSON_Delete(j);
		if (r >= 0)
			fprintf(out, "%s\n", f.body);
	} else if (r >= 0)
		r = status_cli_print(f.body, f.body_len, out);
	if (r == -EBADMSG)
		fprintf(err, "lessee status: %s did not answer with a status document\n", url);
	free(f.body);
	return r;
}

int status_cli_healthz(const char *base_url, FILE *out, FILE *err)
{
	_cleanup_free_ char *url = NULL;
	struct fetch f = {0};
	cell_t line;
	int r = get(base_url, "/healthz", &f, &url, err);

	if (r >= 0) {
		first_line(f.body, line);
		fprintf(out, "%s\n", line);
	}
	free(f.body);
	return r;
}

void status_cli_usage(FILE *f)
{
	fputs("Usage: lessee status [--json|--healthz] [-c FILE] [--set SECTION.KEY=V]\n"
	      "Ask the running lessee daemon what it is doing, over its status endpoint\n"
	      "(the [status] listen address of the configuration; a wildcard address is\n"
	      "reached over loopback).\n\n"
	      "  (no option)          runs in flight, workflows and their breakers, the API\n"
	      "                       connection and the spool, as tables (GET /status)\n"
	      "      --json           the /status document as the daemon sent it\n"
	      "      --healthz        only whether the daemon is alive (GET /healthz), for\n"
	      "                       container health checks\n"
	      "  -c, --config FILE    the daemon's configuration (for [status] listen)\n"
	      "      --set S.K=V      override a setting, e.g. --set status.listen=127.0.0.1:9500\n"
	      "  -h, --help           this text\n\n"
	      "Exit status: 0 answered, 1 the daemon could not be asked or did not answer\n"
	      "as expected, 2 usage, 78 configuration error.  See lessee(8).\n",
	      f);
}
