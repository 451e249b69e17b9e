/* lessor on SQLite vs PostgreSQL, in one run: claims+completes per second
 * (1 and 16 clients, one keep-alive connection each, claim one run then
 * complete it) and the long-poll wake latency (enqueue sent -> parked claim
 * answered), for
 *
 *   sqlite        one `lessor serve` on a SQLite file, synchronous=full
 *   pg x1         one `lessor serve --db <pg>`
 *   pg x3         three instances on the same database, clients spread
 *                 over them round robin; the wake-up crosses instances (the
 *                 claim is parked on one, the run enqueued through another)
 *
 * PostgreSQL is a private server (tests/helpers/pg_proc.h) with fsync on:
 * both backends pay a flush per commit.  Medians of several rounds; each
 * PostgreSQL figure also as a ratio to SQLite's from the same run.
 *
 * With `make bench-compare` (node and npm), graphile-worker and pg-boss run
 * the same job count with 16 concurrent handlers on the same server
 * (bench/compare/queues.mjs, next to this binary in compare/); their rate is
 * in the 16-client column. */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "benchutil.h"
#include "lessor/client.h"
#include "lessor_proc.h"
#include "log/log.h"
#include "pg_proc.h"
#include "testutil.h"
#include "util/macro.h"
#include "util/time.h"

#define MAX_INSTANCES 3

static unsigned n_rounds = 5;
static unsigned n_runs = 1000;
static unsigned long claim_seq;

struct setup {
	const char *name;
	const char *tag; /* for claim ids */
	struct tu_lessor *l[MAX_INSTANCES];
	unsigned n;
};

struct worker {
	struct tu_lessor *l;
	unsigned index;
	pthread_barrier_t *start;
	unsigned done, errors;
};

static bool claim_and_complete(lessor_client *c, struct worker *w)
{
	char body[256];
	cJSON *resp = NULL;
	const cJSON *g;
	long status = 0;
	bool got = false;

	snprintf(body, sizeof(body),
	         "{\"claim_id\":\"b-%lu\",\"worker_id\":\"bench-%u\",\"max_runs\":1,"
	         "\"lease_ttl_s\":60,\"wait_s\":0}",
	         __atomic_add_fetch(&claim_seq, 1, __ATOMIC_RELAXED), w->index);
	if (lessor_client_json(c, "POST", "/v1/claims", body, &status, &resp) < 0 ||
	    status != 200) {
		w->errors++;
		cJSON_Delete(resp);
		return false;
	}
	cJSON_ArrayForEach(g, cJSON_GetObjectItem(resp, "runs"))
	{
		char path[64], done[192];

		snprintf(path, sizeof(path), "/v1/runs/%s/complete",
		         cJSON_GetObjectItem(g, "id")->valuestring);
		snprintf(
		    done, sizeof(done),
		    "{\"token\":\"%s\",\"status\":\"succeeded\",\"reason\":\"exit\","
		    "\"exit_code\":0}",
		    cJSON_GetObjectItem(cJSON_GetObjectItem(g, "lease"), "token")->valuestring);
		if (lessor_client_json(c, "POST", path, done, &status, NULL) < 0 || status != 200)
			w->errors++;
		else
			w->done++;
		got = true;
	}
	cJSON_Delete(resp);
	return got;
}

static void *worker_main(void *p)
{
	struct worker *w = p;
	lessor_client *c = tu_lessor_client(w->l);
	long status;

	if (c)
		(void)lessor_client_json(c, "GET", "/healthz", NULL, &status, NULL);
	pthread_barrier_wait(w->start);
	while (c && claim_and_complete(c, w))
		;
	lessor_client_free(c);
	return NULL;
}

static double run_round(struct setup *s, unsigned n_clients)
{
	struct worker w[64];
	pthread_t t[64];
	pthread_barrier_t start;
	unsigned done = 0, errors = 0;
	usec_t t0;

	pthread_barrier_init(&start, NULL, n_clients + 1);
	for (unsigned i = 0; i < n_clients; i++) {
		w[i] = (struct worker){.l = s->l[i % s->n], .index = i, .start = &start};
		pthread_create(&t[i], NULL, worker_main, &w[i]);
	}
	pthread_barrier_wait(&start);
	t0 = time_mono();
	for (unsigned i = 0; i < n_clients; i++) {
		pthread_join(t[i], NULL);
		done += w[i].done;
		errors += w[i].errors;
	}
	t0 = time_mono() - t0;
	pthread_barrier_destroy(&start);
	if (errors)
		fprintf(stderr, "lessor_pg: %u failed requests in a round (%s)\n", errors, s->name);
	return (double)done / ((double)t0 / USEC_PER_SEC);
}

static int enqueue_batch(struct setup *s)
{
	lessor_client *c = tu_lessor_client(s->l[0]);
	long status = 0;
	int r = 0;

	for (unsigned i = 0; c && i < n_runs && r == 0; i++)
		if (lessor_client_json(c, "POST", "/v1/runs", "{\"workflow\":\"bench\"}", &status,
		                       NULL) < 0 ||
		    status != 201)
			r = -1;
	lessor_client_free(c);
	return c ? r : -1;
}

static int measure_claims(struct setup *s, unsigned n_clients, double *ret)
{
	double v[64];

	for (unsigned r = 0; r < n_rounds; r++) {
		if (enqueue_batch(s) < 0)
			return -1;
		v[r] = run_round(s, n_clients);
	}
	*ret = tu_median(v, n_rounds);
	return 0;
}

/* ---- long-poll wake latency ---- */

struct poll_arg {
	struct tu_lessor *l;
	unsigned i;
	const char *tag;
	usec_t answered;
	bool got;
	bool finished;
};

static void *poll_main(void *p)
{
	struct poll_arg *a = p;
	lessor_client *c = tu_lessor_client(a->l);
	char body[192];
	cJSON *resp = NULL;
	long status = 0;

	snprintf(body, sizeof(body),
	         "{\"claim_id\":\"lp-%s-%u\",\"worker_id\":\"lp\",\"max_runs\":1,"
	         "\"lease_ttl_s\":60,\"wait_s\":20,\"workflows\":[\"lp\"]}",
	         a->tag, a->i);
	if (c && lessor_client_json(c, "POST", "/v1/claims", body, &status, &resp) == 0)
		a->got = cJSON_GetArraySize(cJSON_GetObjectItem(resp, "runs")) == 1;
	a->answered = time_mono();
	__atomic_store_n(&a->finished, true, __ATOMIC_RELEASE);
	cJSON_Delete(resp);
	lessor_client_free(c);
	return NULL;
}

static bool parked(struct tu_lessor *l)
{
	cJSON *j = NULL;
	long status = 0;
	bool yes;

	(void)tu_lessor_json(l, "GET", "/v1/stats", NULL, &status, &j);
	yes = cJSON_GetObjectItem(j, "parked_requests") &&
	      cJSON_GetObjectItem(j, "parked_requests")->valuedouble >= 1;
	cJSON_Delete(j);
	return yes;
}

/* Parked on the first instance, enqueued through the last one. */
static int measure_wake(struct setup *s, double *ret)
{
	enum { SAMPLES = 21 };
	lessor_client *c = tu_lessor_client(s->l[s->n - 1]);
	double v[SAMPLES];
	unsigned n = 0;

	for (unsigned i = 0; c && i < SAMPLES; i++) {
		struct poll_arg a = {.l = s->l[0], .i = i, .tag = s->tag};
		pthread_t t;
		usec_t sent;
		long status;

		pthread_create(&t, NULL, poll_main, &a);
		while (!parked(s->l[0]) && !__atomic_load_n(&a.finished, __ATOMIC_ACQUIRE))
			tu_sleep(2 * USEC_PER_MSEC);
		sent = time_mono();
		(void)lessor_client_json(c, "POST", "/v1/runs", "{\"workflow\":\"lp\"}", &status,
		                         NULL);
		pthread_join(t, NULL);
		if (a.got)
			v[n++] = (double)(a.answered - sent) / USEC_PER_MSEC;
	}
	lessor_client_free(c);
	if (n == 0)
		return -1;
	*ret = tu_median(v, n);
	return 0;
}

/* ---- setups ---- */

struct result {
	double claims[2]; /* 1 client, 16 clients */
	double wake_ms;
};

static int bench_setup(struct setup *s, struct result *out)
{
	return measure_claims(s, 1, &out->claims[0]) < 0 ||
	               measure_claims(s, 16, &out->claims[1]) < 0 ||
	               measure_wake(s, &out->wake_ms) < 0
	           ? -1
	           : 0;
}

static void stop_setup(struct setup *s)
{
	for (unsigned i = 0; i < s->n; i++)
		s->l[i] = tu_lessor_free(s->l[i]);
}

static int start_setup(struct setup *s, char *db, unsigned n)
{
	char *args[] = {"--db", db, NULL};

	s->n = n;
	for (unsigned i = 0; i < n; i++)
		if (tu_lessor_start(&(struct tu_lessor_opts){.args = db ? args : NULL}, &s->l[i]) <
		    0) {
			fprintf(stderr, "lessor_pg: cannot start %s (%s)\n", tu_lessor_bin(),
			        s->name);
			return -1;
		}
	return 0;
}

static void print_row(const char *name, const struct result *r, const struct result *base)
{
	printf("  %-15s %9.0f runs/s %9.0f runs/s %9.2f ms", name, r->claims[0], r->claims[1],
	       r->wake_ms);
	if (base != r)
		printf("   x%.2f  x%.2f  x%.2f", r->claims[0] / base->claims[0],
		       r->claims[1] / base->claims[1], r->wake_ms / base->wake_ms);
	printf("\n");
}

/* ---- graphile-worker, pg-boss (bench/compare/queues.mjs) ---- */

static char *compare_dir(const char *argv0)
{
	char *dir = NULL, *copy = strdup(argv0), *slash = copy ? strrchr(copy, '/') : NULL;

	if (slash)
		*slash = '\0';
	if (asprintf(&dir, "%s/compare", slash ? copy : ".") < 0)
		dir = NULL;
	free(copy);
	return dir;
}

/* "host=DIR port=P user=U dbname=D" -> "postgres:///D?host=DIR&port=P&user=U" */
static char *to_url(const char *conninfo)
{
	char host[256], port[16], user[64], db[64], *url = NULL;

	if (sscanf(conninfo, "host=%255s port=%15s user=%63s dbname=%63s", host, port, user, db) !=
	        4 ||
	    asprintf(&url, "postgres:///%s?host=%s&port=%s&user=%s", db, host, port, user) < 0)
		return NULL;
	return url;
}

static int run_compare(const char *dir, const char *system, struct tu_pg *pg, struct result *out)
{
	_cleanup_free_ char *db = tu_pg_create_db(pg), *url = db ? to_url(db) : NULL, *cmd = NULL;
	char line[512];
	FILE *f;
	int r = -1;

	if (!url || asprintf(&cmd, "cd '%s' && node queues.mjs %s '%s' %u 16 %u", dir, system, url,
	                     n_runs, n_rounds) < 0)
		return -1;
	f = popen(cmd, "r");
	while (f && fgets(line, sizeof(line), f)) {
		cJSON *j = cJSON_Parse(line);

		if (j && cJSON_IsNumber(cJSON_GetObjectItem(j, "rate"))) {
			*out = (struct result){
			    .claims = {0, cJSON_GetObjectItem(j, "rate")->valuedouble},
			    .wake_ms = cJSON_GetObjectItem(j, "wake_ms")->valuedouble};
			r = 0;
		}
		cJSON_Delete(j);
	}
	if (f && pclose(f) != 0)
		r = -1;
	if (r < 0)
		fprintf(stderr, "lessor_pg: %s failed (%s)\n", system, cmd);
	return r;
}

static void print_compare(const char *name, const struct result *r, const struct result *base)
{
	printf("  %-15s %9s        %9.0f runs/s %9.2f ms          x%.2f  x%.2f\n", name, "-",
	       r->claims[1], r->wake_ms, r->claims[1] / base->claims[1],
	       r->wake_ms / base->wake_ms);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: lessor_pg [--rounds N] [--runs N]\n"
	           "lessor claims+completes/s and long-poll wake latency, SQLite vs PostgreSQL\n"
	           "(1 and 3 instances).  Runs $LESSOR_BIN (default build/default/lessor) and a\n"
	           "private PostgreSQL server from /usr/lib/postgresql/N/bin.\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {{"rounds", required_argument, NULL, 'r'},
	                                     {"runs", required_argument, NULL, 'n'},
	                                     {"version", no_argument, NULL, 'V'},
	                                     {"help", no_argument, NULL, 'h'},
	                                     {}};
	struct setup setups[3] = {{.name = "sqlite", .tag = "sq"},
	                          {.name = "pg x1", .tag = "pg1"},
	                          {.name = "pg x3", .tag = "pg3"}};
	struct result res[3];
	struct tu_pg *pg = NULL;
	int c, r;

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) >= 0)
		switch (c) {
		case 'r':
			n_rounds = (unsigned)CLAMP(atoi(optarg), 1, 64);
			break;
		case 'n':
			n_runs = (unsigned)CLAMP(atoi(optarg), 16, 1000000);
			break;
		case 'V':
			printf("lessor_pg %s\n", LESSEE_VERSION);
			return 0;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	log_setup("lessor_pg", LOG_FORMAT_LOGFMT, LOG_WARNING);
	r = tu_pg_start_durable(&pg);
	if (r < 0) {
		fprintf(stderr, "lessor_pg: cannot start PostgreSQL: %s\n", strerror(-r));
		return r == -ENOENT ? 77 : 1;
	}
	for (size_t i = 0; i < ELEMENTSOF(setups); i++) {
		_cleanup_free_ char *db = i == 0 ? NULL : tu_pg_create_db(pg);

		if ((i > 0 && !db) || start_setup(&setups[i], db, i == 2 ? 3 : 1) < 0 ||
		    bench_setup(&setups[i], &res[i]) < 0) {
			stop_setup(&setups[i]);
			tu_pg_free(pg);
			return 1;
		}
		stop_setup(&setups[i]);
	}
	printf("lessor_pg: median of %u rounds, %u runs per round; %ld cores; synchronous=full, "
	       "PostgreSQL fsync=on\n"
	       "  %-15s %16s %16s %12s   ratios to sqlite\n",
	       n_rounds, n_runs, sysconf(_SC_NPROCESSORS_ONLN), "", "claim+complete 1c", "16c",
	       "wake");
	for (size_t i = 0; i < ELEMENTSOF(setups); i++)
		print_row(setups[i].name, &res[i], &res[0]);
	{
		_cleanup_free_ char *dir = compare_dir(argv[0]), *mods = NULL;
		struct result g, b;

		if (dir && asprintf(&mods, "%s/node_modules/pg-boss", dir) >= 0 &&
		    access(mods, R_OK) == 0) {
			if (run_compare(dir, "graphile", pg, &g) == 0)
				print_compare("graphile-worker", &g, &res[0]);
			if (run_compare(dir, "pgboss", pg, &b) == 0)
				print_compare("pg-boss", &b, &res[0]);
		} else
			printf("  (graphile-worker, pg-boss: not installed, see make "
			       "bench-compare)\n");
	}
	tu_pg_free(pg);
	return 0;
}
