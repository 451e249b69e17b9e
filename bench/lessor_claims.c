/* lessor throughput: claims+completes per second for 1 and 16 concurrent
 * clients (threads, one keep-alive libcurl handle each) against a real
 * `lessor serve` on a temporary database, with synchronous=full and =normal.
 * Baseline measured in the same run: GET /healthz (HTTP only, no database).
 * Also the long-poll wake latency (enqueue sent -> parked claim answered).
 * Figures only: medians of several rounds. */
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "benchutil.h"
#include "lessor/client.h"
#include "lessor_proc.h"
#include "log/log.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/time.h"

static unsigned n_rounds = 5;
static unsigned long claim_seq; /* claim ids must never repeat (a repeat is a replay) */
static unsigned n_runs = 1000;

enum job { JOB_HEALTH, JOB_CLAIM };

struct worker {
	struct tu_lessor *l;
	enum job job;
	unsigned index;
	unsigned quota; /* JOB_HEALTH: requests to make */
	pthread_barrier_t *start;
	unsigned done;
	unsigned errors;
};

static bool claim_and_complete(lessor_client *c, struct worker *w)
{
	char body[256];
	cJSON *resp = NULL;
	const cJSON *runs, *g;
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
	runs = cJSON_GetObjectItem(resp, "runs");
	cJSON_ArrayForEach(g, runs)
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

	/* one request first so the connection is up before the clock starts */
	if (c)
		(void)lessor_client_json(c, "GET", "/healthz", NULL, &status, NULL);
	pthread_barrier_wait(w->start);
	if (!c)
		return NULL;
	if (w->job == JOB_HEALTH) {
		for (unsigned i = 0; i < w->quota; i++)
			if (lessor_client_json(c, "GET", "/healthz", NULL, &status, NULL) < 0 ||
			    status != 200)
				w->errors++;
			else
				w->done++;
	} else {
		while (claim_and_complete(c, w))
			;
	}
	lessor_client_free(c);
	return NULL;
}

/* Operations per second of one round with n_clients threads. */
static double run_round(struct tu_lessor *l, enum job job, unsigned n_clients)
{
	struct worker *w = calloc(n_clients, sizeof(*w));
	pthread_t *t = calloc(n_clients, sizeof(*t));
	pthread_barrier_t start;
	unsigned done = 0, errors = 0;
	usec_t t0;

	pthread_barrier_init(&start, NULL, n_clients + 1);
	for (unsigned i = 0; i < n_clients; i++) {
		w[i] = (struct worker){
		    .l = l, .job = job, .index = i, .quota = n_runs / n_clients, .start = &start};
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
	free(w);
	free(t);
	if (errors)
		fprintf(stderr, "lessor_claims: %u failed requests in a round\n", errors);
	return (double)done / ((double)t0 / USEC_PER_SEC);
}

static int enqueue_batch(struct tu_lessor *l)
{
	lessor_client *c = tu_lessor_client(l);
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

static int measure(struct tu_lessor *l, enum job job, unsigned n_clients, double *ret)
{
	double v[64];

	for (unsigned r = 0; r < n_rounds; r++) {
		if (job == JOB_CLAIM && enqueue_batch(l) < 0)
			return -1;
		v[r] = run_round(l, job, n_clients);
	}
	*ret = tu_median(v, n_rounds);
	return 0;
}

static int bench_config(const char *name, bool sync_normal)
{
	struct tu_lessor *l = NULL;
	static const unsigned clients[] = {1, 16};
	double health[2], claims[2];

	if (tu_lessor_start(&(struct tu_lessor_opts){.sync_normal = sync_normal}, &l) < 0) {
		fprintf(stderr, "lessor_claims: cannot start %s\n", tu_lessor_bin());
		return -1;
	}
	for (size_t i = 0; i < ELEMENTSOF(clients); i++)
		if (measure(l, JOB_HEALTH, clients[i], &health[i]) < 0 ||
		    measure(l, JOB_CLAIM, clients[i], &claims[i]) < 0) {
			tu_lessor_free(l);
			return -1;
		}
	printf("synchronous=%s\n", name);
	printf("  baseline GET /healthz     1 client: %8.0f req/s   16 clients: %8.0f req/s\n",
	       health[0], health[1]);
	printf("  claim + complete          1 client: %8.0f runs/s  16 clients: %8.0f runs/s\n",
	       claims[0], claims[1]);
	tu_lessor_free(l);
	return 0;
}

/* ---- long-poll wake latency ---- */

struct poll_arg {
	struct tu_lessor *l;
	unsigned i;
	usec_t answered;
	bool got;
};

static void *poll_main(void *p)
{
	struct poll_arg *a = p;
	lessor_client *c = tu_lessor_client(a->l);
	char body[192];
	cJSON *resp = NULL;
	long status = 0;

	snprintf(body, sizeof(body),
	         "{\"claim_id\":\"lp-%u\",\"worker_id\":\"lp\",\"max_runs\":1,\"lease_ttl_s\":60,"
	         "\"wait_s\":20,\"workflows\":[\"lp\"]}",
	         a->i);
	if (c && lessor_client_json(c, "POST", "/v1/claims", body, &status, &resp) == 0)
		a->got = cJSON_GetArraySize(cJSON_GetObjectItem(resp, "runs")) == 1;
	a->answered = time_mono();
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

static int bench_wake(void)
{
	enum { SAMPLES = 21 };
	struct tu_lessor *l = NULL;
	lessor_client *c;
	double v[SAMPLES];
	unsigned n = 0;

	if (tu_lessor_start(NULL, &l) < 0)
		return -1;
	c = tu_lessor_client(l);
	for (unsigned i = 0; c && i < SAMPLES; i++) {
		struct poll_arg a = {.l = l, .i = i};
		pthread_t t;
		usec_t sent;
		long status;

		pthread_create(&t, NULL, poll_main, &a);
		while (!parked(l))
			tu_sleep(2 * USEC_PER_MSEC);
		sent = time_mono();
		(void)lessor_client_json(c, "POST", "/v1/runs", "{\"workflow\":\"lp\"}", &status,
		                         NULL);
		pthread_join(t, NULL);
		if (a.got)
			v[n++] = (double)(a.answered - sent) / USEC_PER_MSEC;
	}
	lessor_client_free(c);
	tu_lessor_free(l);
	if (n == 0)
		return -1;
	printf("long-poll wake (enqueue sent -> parked claim answered, synchronous=full):\n"
	       "  median %.2f ms over %u samples (includes the enqueue's own commit)\n",
	       tu_median(v, n), n);
	return 0;
}

/* The disk's flush latency where the databases live: what synchronous=full pays
 * per commit. */
static int bench_fsync(void)
{
	enum { SAMPLES = 51 };
	char *dir = tu_tmpdir("fsync"), path[512], block[4096] = {0};
	double v[SAMPLES];
	unsigned n = 0;
	int fd;

	if (!dir)
		return -1;
	snprintf(path, sizeof(path), "%s/f", dir);
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	for (; fd >= 0 && n < SAMPLES; n++) {
		usec_t t0 = time_mono();

		if (write(fd, block, sizeof(block)) != (ssize_t)sizeof(block) || fdatasync(fd) < 0)
			break;
		v[n] = (double)(time_mono() - t0) / USEC_PER_MSEC;
	}
	if (fd >= 0)
		close(fd);
	rm_rf(dir);
	free(dir);
	if (n == 0)
		return -1;
	printf("baseline: append 4 KiB + fdatasync in the database directory: median %.3f ms\n",
	       tu_median(v, n));
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: lessor_claims [--rounds N] [--runs N]\n"
	           "Measures lessor claims+completes per second for 1 and 16 clients.\n"
	           "Runs $LESSOR_BIN (default build/default/lessor) on a database in $TMPDIR.\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {{"rounds", required_argument, NULL, 'r'},
	                                     {"runs", required_argument, NULL, 'n'},
	                                     {"help", no_argument, NULL, 'h'},
	                                     {"version", no_argument, NULL, 'V'},
	                                     {}};
	const char *tmp = getenv("TMPDIR");
	struct statfs fs;
	int c;

	while ((c = getopt_long(argc, argv, "hV", opts, NULL)) >= 0)
		switch (c) {
		case 'r':
			n_rounds = (unsigned)CLAMP(atoi(optarg), 1, 64);
			break;
		case 'n':
			n_runs = (unsigned)CLAMP(atoi(optarg), 16, 1000000);
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("lessor_claims %s\n", LESSEE_VERSION);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	log_setup("lessor_claims", LOG_FORMAT_LOGFMT, LOG_WARNING);
	printf("lessor_claims: median of %u rounds, %u runs per round; %ld cores; "
	       "database in %s (fs magic 0x%lx)\n",
	       n_rounds, n_runs, sysconf(_SC_NPROCESSORS_ONLN), tmp ? tmp : "/tmp",
	       statfs(tmp ? tmp : "/tmp", &fs) == 0 ? (unsigned long)fs.f_type : 0UL);
	if (bench_fsync() < 0 || bench_config("full", false) < 0 ||
	    bench_config("normal", true) < 0 || bench_wake() < 0)
		return 1;
	return 0;
}
