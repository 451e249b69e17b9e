/* healthz_rmrf: /healthz latency of a real daemon while it removes a run
 * directory of N files (200,000 by default), on both loop backends.
 *
 * Per backend: a baseline (the same client against the same idle daemon, in
 * the same run), then the latency of every /healthz request that was in
 * flight or sent between the run's completion and the disappearance of its
 * directory.  Median and max of each, with the ratio to the baseline, and how
 * long the removal took.  Figures only, no verdict (tests/integration/
 * check_hostile.c holds the bound). */
#include <arpa/inet.h>
#include <errno.h>
#include <glob.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "benchutil.h"
#include "lessee_proc.h"
#include "lessor_proc.h"
#include "testutil.h"
#include "util/macro.h"

#define MSEC USEC_PER_MSEC
#define MAX_SAMPLES 200000

struct sample {
	usec_t sent, took;
};

struct client {
	int port;
	atomic_bool stop;
	struct sample *s;
	size_t n;
	pthread_t thread;
};

static int healthz(int port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	struct timeval tv = {.tv_sec = 10};
	char buf[1024];
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), ok = 0;
	static const char req[] = "GET /healthz HTTP/1.0\r\n\r\n";

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) == 0 &&
	    connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    write(fd, req, sizeof(req) - 1) == (ssize_t)sizeof(req) - 1) {
		ssize_t n, len = 0;

		while ((n = read(fd, buf + len, sizeof(buf) - 1 - (size_t)len)) > 0 &&
		       (size_t)(len += n) < sizeof(buf) - 1)
			;
		buf[len] = '\0';
		ok = strncmp(buf, "HTTP/1.1 200", 12) == 0 || strncmp(buf, "HTTP/1.0 200", 12) == 0;
	}
	if (fd >= 0)
		close(fd);
	return ok ? 0 : -EIO;
}

static void *client_main(void *userdata)
{
	struct client *c = userdata;

	while (!atomic_load(&c->stop) && c->n < MAX_SAMPLES) {
		usec_t t0 = time_mono();

		(void)healthz(c->port);
		c->s[c->n++] = (struct sample){.sent = t0, .took = time_mono() - t0};
		tu_sleep(1 * MSEC);
	}
	return NULL;
}

/* Median and max of the samples that overlap [from, to]. */
static void stats(const struct client *c, usec_t from, usec_t to, double *ret_med, double *ret_max,
                  size_t *ret_n)
{
	double *v = calloc(c->n + 1, sizeof(*v)), mx = 0;
	size_t n = 0;

	for (size_t i = 0; v && i < c->n; i++)
		if (c->s[i].sent + c->s[i].took >= from && c->s[i].sent <= to) {
			v[n++] = (double)c->s[i].took / MSEC;
			mx = MAX(mx, (double)c->s[i].took / MSEC);
		}
	*ret_med = n ? tu_median(v, n) : 0;
	*ret_max = mx;
	*ret_n = n;
	free(v);
}

/* The run directory and what it was renamed to for removal (<dir>.rm-N). */
static bool gone(const char *path)
{
	char pattern[1024];
	glob_t g;
	bool none;

	snprintf(pattern, sizeof(pattern), "%s*", path);
	none = glob(pattern, GLOB_NOSORT, NULL, &g) == GLOB_NOMATCH;
	globfree(&g);
	return none;
}

static int one_backend(const char *backend, int files, usec_t baseline_time)
{
	char env[64], *envv[] = {env, NULL}, *conf = NULL, *aux = tu_aux_bin("many_files"),
	              *id = NULL, *dir = NULL;
	struct tu_lessor *l = NULL;
	struct tu_lessee *d = NULL;
	struct client c = {0};
	double bmed, bmax, rmed, rmax;
	size_t bn, rn;
	usec_t t0, t_done = 0, t_gone = 0;
	int r = -1;

	snprintf(env, sizeof(env), "LESSEE_IO_BACKEND=%s", backend);
	c.s = calloc(MAX_SAMPLES, sizeof(*c.s));
	if (!c.s || asprintf(&conf,
	                     "[status]\nlisten = 127.0.0.1:0\n[worker]\nconcurrency = 1\n"
	                     "[workflow.many]\ncommand = %s %d\n",
	                     aux, files) < 0)
		goto out;
	if (tu_lessor_start(&(struct tu_lessor_opts){.sync_normal = true}, &l) < 0 ||
	    tu_lessee_start(&(struct tu_lessee_opts){.lessor = l, .conf = conf, .env = envv}, &d) <
	        0 ||
	    (c.port = tu_lessee_status_port(d)) <= 0) {
		fprintf(stderr, "%s: cannot start lessor and lessee\n", backend);
		goto out;
	}
	if (pthread_create(&c.thread, NULL, client_main, &c) != 0)
		goto out;
	t0 = time_mono();
	tu_sleep(baseline_time);
	id = tu_lessor_enqueue(l, "{\"workflow\":\"many\"}");
	if (!id || asprintf(&dir, "%s/run/lessee-%d/%s.1", tu_lessee_dir(d), (int)tu_lessee_pid(d),
	                    id) < 0)
		goto stop;
	while (time_mono() < t0 + baseline_time + 300 * USEC_PER_SEC) {
		cJSON *run = t_done ? NULL : tu_lessor_get_run(l, id);
		const cJSON *st = cJSON_GetObjectItem(run, "status");

		if (!t_done && cJSON_IsString(st) && !strcmp(st->valuestring, "succeeded"))
			t_done = time_mono();
		cJSON_Delete(run);
		if (t_done && gone(dir)) {
			t_gone = time_mono();
			break;
		}
		tu_sleep(t_done ? 2 * MSEC : 20 * MSEC);
	}
	tu_sleep(50 * MSEC);
stop:
	atomic_store(&c.stop, true);
	pthread_join(c.thread, NULL);
	if (!t_gone) {
		fprintf(stderr, "%s: the run did not finish or its directory stayed\n", backend);
		goto out;
	}
	stats(&c, t0, t0 + baseline_time, &bmed, &bmax, &bn);
	stats(&c, t_done, t_gone, &rmed, &rmax, &rn);
	printf("%-8s  baseline: %5zu req, median %6.2f ms, max %7.2f ms | removal (%.0f ms): "
	       "%4zu req, median %6.2f ms (x%.1f), max %7.2f ms (x%.1f)\n",
	       backend, bn, bmed, bmax, (double)(t_gone - t_done) / MSEC, rn, rmed,
	       bmed > 0 ? rmed / bmed : 0, rmax, bmax > 0 ? rmax / bmax : 0);
	r = 0;
out:
	tu_lessee_free(d);
	tu_lessor_free(l);
	free(c.s);
	free(conf);
	free(aux);
	free(id);
	free(dir);
	return r;
}

int main(int argc, char **argv)
{
	static const char *const backends[] = {"io_uring", "epoll"};
	int files = 200000, rounds = 1, r = 0;

	if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
		printf("usage: healthz_rmrf [FILES [ROUNDS]]\n"
		       "  /healthz latency while lessee removes a run directory of FILES files "
		       "(200000),\n  ROUNDS times per backend (1); run from the source tree "
		       "(LESSEE_BIN, LESSOR_BIN, LESSEE_TEST_AUX as for tests/run.sh)\n");
		return 0;
	}
	if (argc > 1 && !strcmp(argv[1], "--version")) {
		printf("healthz_rmrf %s\n", LESSEE_VERSION);
		return 0;
	}
	if (argc > 1)
		files = atoi(argv[1]);
	if (argc > 2)
		rounds = atoi(argv[2]);
	if (files <= 0 || rounds <= 0)
		return 2;
	printf("/healthz every ~1 ms; a run leaves %d files in its directory\n", files);
	for (int i = 0; i < rounds; i++)
		for (size_t b = 0; b < ELEMENTSOF(backends); b++)
			if (one_backend(backends[b], files, 2 * USEC_PER_SEC) < 0)
				r = 1;
	return r;
}
