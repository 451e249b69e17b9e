/* bench/http: requests per second through lib/http (on both loop backends)
 * against a local server, with a baseline measured in the same run: the same
 * load driven by plain curl_multi_perform()/curl_multi_poll(), no lib/ev.
 * The ratio shows what our loop integration costs.  Figures only, no verdict.
 *
 *   build/default/bench/http [--requests N] [--runs R] [--server nginx|builtin]
 *                            [--only baseline|io_uring|epoll]
 */
#include <assert.h>
#include <curl/curl.h>
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "benchutil.h"
#include "ev/ev.h"
#include "http/http.h"
#include "test_httpd.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"
#include "util/time.h"

#define BODY_LEN 128
#define MAX_RUNS 25

static const unsigned concurrency[] = {1, 16, 64};

struct load {
	const char *url;
	unsigned total, conc, sent, done, failed;
};

/* ---- lib/http ---------------------------------------------------------- */

struct lib_run {
	struct load *l;
	ev_t *e;
	http_t *h;
};

static void lib_send(struct lib_run *r);

static void lib_done(http_req_t *req, const struct http_response *resp, void *userdata)
{
	struct lib_run *r = userdata;

	if (resp->error || resp->status != 200 || resp->body_len != BODY_LEN)
		r->l->failed++;
	if (++r->l->done == r->l->total)
		ev_exit(r->e, 0);
	else if (r->l->sent < r->l->total)
		lib_send(r);
}

static void lib_send(struct lib_run *r)
{
	struct http_request rq = {.method = "GET", .url = r->l->url};

	r->l->sent++;
	if (http_send(r->h, &rq, lib_done, r, NULL) < 0)
		r->l->failed++;
}

/* requests/s, or a negative errno */
static double run_lib(const char *backend, struct load *l)
{
	struct lib_run r = {.l = l};
	usec_t t0;
	int err;

	err = ev_new(&r.e, backend);
	if (err >= 0)
		err = http_new(r.e, NULL, &r.h);
	if (err < 0) {
		ev_free(r.e);
		return err;
	}
	t0 = time_mono();
	for (unsigned i = 0; i < l->conc && l->sent < l->total; i++)
		lib_send(&r);
	err = ev_run(r.e);
	t0 = time_mono() - t0;
	http_free(r.h);
	ev_free(r.e);
	return err < 0 ? err : (double)l->total * USEC_PER_SEC / (double)t0;
}

/* ---- baseline: curl alone ---------------------------------------------- */

static size_t count_body(char *p, size_t size, size_t n, void *userdata)
{
	*(size_t *)userdata += size * n;
	return size * n;
}

struct base_xfer {
	CURL *easy;
	size_t got;
};

static void base_add(CURLM *m, struct load *l)
{
	struct base_xfer *x = calloc(1, sizeof(*x));

	l->sent++;
	x->easy = curl_easy_init();
	curl_easy_setopt(x->easy, CURLOPT_URL, l->url);
	curl_easy_setopt(x->easy, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(x->easy, CURLOPT_TIMEOUT_MS, 30000L);
	curl_easy_setopt(x->easy, CURLOPT_WRITEFUNCTION, count_body);
	curl_easy_setopt(x->easy, CURLOPT_WRITEDATA, &x->got);
	curl_easy_setopt(x->easy, CURLOPT_PRIVATE, x);
	curl_multi_add_handle(m, x->easy);
}

static void base_finish(CURLM *m, CURLMsg *msg, struct load *l)
{
	struct base_xfer *x = NULL;
	long status = 0;

	curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&x);
	curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &status);
	if (msg->data.result != CURLE_OK || status != 200 || x->got != BODY_LEN)
		l->failed++;
	curl_multi_remove_handle(m, x->easy);
	curl_easy_cleanup(x->easy);
	free(x);
	l->done++;
	if (l->sent < l->total)
		base_add(m, l);
}

static double run_baseline(struct load *l)
{
	CURLM *m = curl_multi_init();
	usec_t t0 = time_mono();
	CURLMsg *msg;
	int running, left;

	for (unsigned i = 0; i < l->conc && l->sent < l->total; i++)
		base_add(m, l);
	while (l->done < l->total) {
		curl_multi_perform(m, &running);
		while ((msg = curl_multi_info_read(m, &left)))
			if (msg->msg == CURLMSG_DONE)
				base_finish(m, msg, l);
		if (l->done < l->total)
			curl_multi_poll(m, NULL, 0, 1000, NULL);
	}
	t0 = time_mono() - t0;
	curl_multi_cleanup(m);
	return (double)l->total * USEC_PER_SEC / (double)t0;
}

/* ---- driver ------------------------------------------------------------ */

struct mode {
	const char *name;
	const char *backend; /* NULL = baseline */
	const char *key;     /* for --only */
};

/* One run of one mode: requests/s, or 0 when it failed. */
static double run_once(const struct mode *m, const char *url, unsigned conc, unsigned total)
{
	struct load l = {.url = url, .total = total, .conc = conc};
	double rps = m->backend ? run_lib(m->backend, &l) : run_baseline(&l);

	if (rps < 0 || l.failed) {
		fprintf(stderr, "%s c=%u: %s, %u failed requests\n", m->name, conc,
		        rps < 0 ? strerror((int)-rps) : "ran", l.failed);
		return 0;
	}
	return rps;
}

struct stats {
	double v[MAX_RUNS];
	double median, min, max;
};

static void stats_finish(struct stats *st, unsigned runs)
{
	st->median = tu_median(st->v, runs); /* sorts */
	st->min = st->v[0];
	st->max = st->v[runs - 1];
}

static void usage(FILE *f)
{
	fprintf(f, "Usage: http [--requests N] [--runs R] [--server nginx|builtin]\n"
	           "            [--only baseline|io_uring|epoll]\n"
	           "Requests/s through lib/http (io_uring, epoll) and plain curl_multi_poll,\n"
	           "with 1, 16 and 64 requests in flight, against a local server.\n"
	           "  --requests N   requests per run (default 20000)\n"
	           "  --runs R       measured runs per figure, median reported (default 5)\n"
	           "  --server S     nginx (nginx-light, static file; default) or builtin\n"
	           "                 (the libmicrohttpd test server, in this process)\n"
	           "  --only M       run one mode (for profiling)\n");
}

struct args {
	unsigned total, runs;
	bool nginx;
	const char *only; /* NULL = every mode */
};

/* 1 = run, 0 = done (help/version), 2 = usage error */
static int parse_args(int argc, char **argv, struct args *a)
{
	static const struct option opts[] = {
	    {"requests", required_argument, NULL, 'n'},
	    {"runs", required_argument, NULL, 'r'},
	    {"server", required_argument, NULL, 's'},
	    {"only", required_argument, NULL, 'o'},
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},
	    {0},
	};
	int c;

	while ((c = getopt_long(argc, argv, "n:r:s:o:hV", opts, NULL)) >= 0) {
		switch (c) {
		case 'n':
			a->total = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 'r':
			a->runs = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 's':
			a->nginx = streq(optarg, "nginx");
			if (!a->nginx && !streq(optarg, "builtin"))
				return 2;
			break;
		case 'o':
			a->only = optarg;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("bench/http " LESSEE_VERSION "\n");
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	return a->total > 0 && a->runs > 0 && a->runs <= MAX_RUNS ? 1 : 2;
}

static const char nginx_static[] = "server {\n"
                                   "  listen 127.0.0.1:@PORT@;\n"
                                   "  location / { root @DIR@/www; }\n"
                                   "}\n";

struct server {
	struct test_httpd *builtin;
	struct test_nginx *nginx;
	char *dir;
	char url[256];
};

static int server_start(struct server *s, bool nginx)
{
	char path[4096], body[BODY_LEN];
	int r;

	if (!nginx) {
		r = test_httpd_start(NULL, &s->builtin);
		snprintf(s->url, sizeof(s->url), "http://127.0.0.1:%d/bytes?n=%d",
		         r < 0 ? 0 : test_httpd_port(s->builtin), BODY_LEN);
		return r;
	}
	s->dir = tu_tmpdir("bench-http");
	if (!s->dir)
		return -errno;
	memset(body, 'x', sizeof(body));
	snprintf(path, sizeof(path), "%s/www", s->dir);
	r = mkdir_p(path, 0755);
	snprintf(path, sizeof(path), "%s/www/small.txt", s->dir);
	if (r >= 0)
		r = write_file_atomic(path, body, sizeof(body), 0644);
	if (r >= 0)
		r = test_nginx_start(s->dir, nginx_static, &s->nginx);
	if (r >= 0)
		snprintf(s->url, sizeof(s->url), "http://127.0.0.1:%d/small.txt",
		         test_nginx_port(s->nginx));
	return r;
}

static void server_stop(struct server *s)
{
	test_httpd_stop(s->builtin);
	test_nginx_stop(s->nginx);
	if (s->dir)
		rm_rf(s->dir);
	free(s->dir);
}

static void print_row(const struct mode *m, unsigned conc, const struct stats *st, double base)
{
	printf("%-26s %4u %12.0f %12.0f %12.0f", m->name, conc, st->median, st->min, st->max);
	if (m->backend && base > 0)
		printf("   %5.2f", st->median / base);
	printf("\n");
}

/* The modes take turns within each round (after one warm-up round), so a
 * background load that comes and goes hits all of them alike. */
static void bench_concurrency(const struct mode *modes, size_t n, const struct args *a,
                              const char *url, unsigned conc)
{
	struct stats st[8] = {0};
	double base = 0;

	assert(n <= ELEMENTSOF(st));
	for (unsigned round = 0; round <= a->runs; round++)
		for (size_t i = 0; i < n; i++)
			if (!a->only || streq(a->only, modes[i].key)) {
				double rps = run_once(&modes[i], url, conc, a->total);

				if (round > 0)
					st[i].v[round - 1] = rps;
			}
	for (size_t i = 0; i < n; i++) {
		if (a->only && !streq(a->only, modes[i].key))
			continue;
		stats_finish(&st[i], a->runs);
		if (!modes[i].backend)
			base = st[i].median;
		print_row(&modes[i], conc, &st[i], base);
	}
}

int main(int argc, char **argv)
{
	static const struct mode modes[] = {
	    {"curl_multi_poll (baseline)", NULL, "baseline"},
	    {"lib/http on io_uring", "io_uring", "io_uring"},
	    {"lib/http on epoll", "epoll", "epoll"},
	};
	struct args a = {.total = 20000, .runs = 5, .nginx = true};
	struct server s = {0};
	int r = parse_args(argc, argv, &a);

	if (r != 1)
		return r;
	curl_global_init(CURL_GLOBAL_DEFAULT);
	r = server_start(&s, a.nginx);
	if (r < 0) {
		fprintf(stderr, "bench/http: server: %s\n", strerror(-r));
		server_stop(&s);
		return 1;
	}
	printf("server: %s  %s  body %d bytes, %u requests/run, median of %u runs\n"
	       "curl %s\n\n",
	       a.nginx ? "nginx-light (separate process)"
	               : "libmicrohttpd test server (in process)",
	       s.url, BODY_LEN, a.total, a.runs, curl_version());
	printf("%-26s %4s %12s %12s %12s   %s\n", "mode", "conc", "median req/s", "min", "max",
	       "vs baseline");
	for (size_t c = 0; c < ELEMENTSOF(concurrency); c++)
		bench_concurrency(modes, ELEMENTSOF(modes), &a, s.url, concurrency[c]);
	server_stop(&s);
	return 0;
}
