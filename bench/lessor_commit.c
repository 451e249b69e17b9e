/* lessor group commit: claim+complete runs per second, lessor CPU per run and
 * commits per run, with `--synchronous full` and `normal`, each with group
 * commit (the default) and with `--group-commit no` (one transaction per
 * write, the old way), all in one run.  The four servers run side by side on
 * their own databases and the rounds are interleaved (one round of each
 * configuration in turn), so a slower moment of the shared machine hits all
 * four alike.  Figures: medians over the rounds, and grouped / one-per-write
 * ratios.  Never a test: figures only. */
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

#define ROUNDS_MAX 64

static unsigned n_rounds = 7;
static unsigned n_runs = 1000;
static unsigned n_clients = 16;
static char threads_arg[16] = "4";
static unsigned long claim_seq;

struct config {
	const char *name;
	bool sync_normal;
	bool grouped;
	struct tu_lessor *l;
	double rate[ROUNDS_MAX];    /* runs/s */
	double cpu_us[ROUNDS_MAX];  /* lessor CPU per run */
	double commits[ROUNDS_MAX]; /* commits per run */
	double writes[ROUNDS_MAX];  /* writes per commit */
};

static struct config configs[] = {
    {.name = "full, group commit", .grouped = true},
    {.name = "full, one tx/write"},
    {.name = "normal, group commit", .sync_normal = true, .grouped = true},
    {.name = "normal, one tx/write", .sync_normal = true},
};

struct client {
	struct tu_lessor *l;
	unsigned index;
	pthread_barrier_t *start;
	unsigned done, errors;
};

/* utime + stime of a process (all its threads), in microseconds. */
static double proc_cpu_us(pid_t pid)
{
	char path[64], *s = NULL, *p;
	unsigned long long ut = 0, st = 0;
	double r = -1;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (read_file_capped(path, 4096, &s, NULL) < 0)
		return -1;
	p = strrchr(s, ')'); /* the comm field may hold blanks */
	if (p &&
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) == 2)
		r = (double)(ut + st) * 1e6 / (double)sysconf(_SC_CLK_TCK);
	free(s);
	return r;
}

/* store.commits and store.writes from /v1/stats. */
static int store_counters(struct tu_lessor *l, double *ret_commits, double *ret_writes)
{
	cJSON *j = NULL, *so;
	long status = 0;
	int r = -1;

	if (tu_lessor_json(l, "GET", "/v1/stats", NULL, &status, &j) == 0 && status == 200 &&
	    (so = cJSON_GetObjectItem(j, "store"))) {
		*ret_commits = cJSON_GetNumberValue(cJSON_GetObjectItem(so, "commits"));
		*ret_writes = cJSON_GetNumberValue(cJSON_GetObjectItem(so, "writes"));
		r = 0;
	}
	cJSON_Delete(j);
	return r;
}

static bool claim_and_complete(lessor_client *c, struct client *w)
{
	char body[256];
	cJSON *resp = NULL;
	const cJSON *g;
	long status = 0;
	bool got = false;

	snprintf(body, sizeof(body),
	         "{\"claim_id\":\"gc-%lu\",\"worker_id\":\"bench-%u\",\"max_runs\":1,"
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

static void *client_main(void *p)
{
	struct client *w = p;
	lessor_client *c = tu_lessor_client(w->l);
	long status;

	/* the connection is up before the clock starts */
	if (c)
		(void)lessor_client_json(c, "GET", "/healthz", NULL, &status, NULL);
	pthread_barrier_wait(w->start);
	while (c && claim_and_complete(c, w))
		;
	lessor_client_free(c);
	return NULL;
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

/* One round: the queue filled, then n_clients threads claim and complete
 * until it is empty. */
static int run_round(struct config *cf, unsigned round)
{
	struct client w[64];
	pthread_t t[64];
	pthread_barrier_t start;
	unsigned done = 0, errors = 0;
	double cpu0, cpu1, c0, w0, c1, w1;
	usec_t t0;

	if (enqueue_batch(cf->l) < 0 || store_counters(cf->l, &c0, &w0) < 0)
		return -1;
	pthread_barrier_init(&start, NULL, n_clients + 1);
	for (unsigned i = 0; i < n_clients; i++) {
		w[i] = (struct client){.l = cf->l, .index = i, .start = &start};
		pthread_create(&t[i], NULL, client_main, &w[i]);
	}
	pthread_barrier_wait(&start);
	cpu0 = proc_cpu_us(tu_lessor_pid(cf->l));
	t0 = time_mono();
	for (unsigned i = 0; i < n_clients; i++) {
		pthread_join(t[i], NULL);
		done += w[i].done;
		errors += w[i].errors;
	}
	t0 = time_mono() - t0;
	cpu1 = proc_cpu_us(tu_lessor_pid(cf->l));
	pthread_barrier_destroy(&start);
	if (store_counters(cf->l, &c1, &w1) < 0 || done == 0)
		return -1;
	if (errors)
		fprintf(stderr, "lessor_commit: %u failed requests (%s)\n", errors, cf->name);
	cf->rate[round] = (double)done / ((double)t0 / USEC_PER_SEC);
	cf->cpu_us[round] = (cpu1 - cpu0) / done;
	/* the stats requests are reads; the reaper's ticks (10/s) are counted too */
	cf->commits[round] = (c1 - c0) / done;
	cf->writes[round] = c1 > c0 ? (w1 - w0) / (c1 - c0) : 0;
	return 0;
}

static int start_all(void)
{
	for (size_t i = 0; i < ELEMENTSOF(configs); i++) {
		/* warning: the helper's debug level logs every request, CPU we do not measure */
		char *args[] = {"--group-commit",
		                configs[i].grouped ? "yes" : "no",
		                "--threads",
		                threads_arg,
		                "--log-level",
		                "warning",
		                NULL};
		struct tu_lessor_opts o = {.sync_normal = configs[i].sync_normal, .args = args};

		if (tu_lessor_start(&o, &configs[i].l) < 0) {
			fprintf(stderr, "lessor_commit: cannot start %s\n", tu_lessor_bin());
			return -1;
		}
	}
	return 0;
}

static double median(const double *v)
{
	double c[ROUNDS_MAX];

	memcpy(c, v, n_rounds * sizeof(*c));
	return tu_median(c, n_rounds);
}

static void report(void)
{
	printf("%-22s %10s %14s %14s %14s\n", "configuration", "runs/s", "lessor CPU/run",
	       "commits/run", "writes/commit");
	for (size_t i = 0; i < ELEMENTSOF(configs); i++)
		printf("%-22s %10.0f %11.0f us %14.2f %14.2f\n", configs[i].name,
		       median(configs[i].rate), median(configs[i].cpu_us),
		       median(configs[i].commits), median(configs[i].writes));
	for (size_t i = 0; i < ELEMENTSOF(configs); i += 2)
		printf("%s: group commit / one tx per write: runs/s x%.2f, lessor CPU/run x%.2f, "
		       "commits/run x%.2f\n",
		       configs[i].sync_normal ? "normal" : "full",
		       median(configs[i].rate) / median(configs[i + 1].rate),
		       median(configs[i].cpu_us) / median(configs[i + 1].cpu_us),
		       median(configs[i].commits) / median(configs[i + 1].commits));
}

static void usage(FILE *f)
{
	fprintf(f, "usage: lessor_commit [--rounds N] [--runs N] [--clients N] [--threads N]\n"
	           "Measures lessor claim+complete with and without group commit, synchronous\n"
	           "full and normal.  Runs $LESSOR_BIN (default build/default/lessor) on\n"
	           "databases in $TMPDIR.\n");
}

static int parse_args(int argc, char **argv)
{
	static const struct option opts[] = {{"rounds", required_argument, NULL, 'r'},
	                                     {"runs", required_argument, NULL, 'n'},
	                                     {"clients", required_argument, NULL, 'c'},
	                                     {"threads", required_argument, NULL, 't'},
	                                     {"version", no_argument, NULL, 'V'},
	                                     {"help", no_argument, NULL, 'h'},
	                                     {}};
	int c;

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) >= 0)
		switch (c) {
		case 'r':
			n_rounds = (unsigned)CLAMP(atoi(optarg), 1, ROUNDS_MAX);
			break;
		case 'n':
			n_runs = (unsigned)CLAMP(atoi(optarg), 16, 1000000);
			break;
		case 'c':
			n_clients = (unsigned)CLAMP(atoi(optarg), 1, 64);
			break;
		case 't':
			snprintf(threads_arg, sizeof(threads_arg), "%d",
			         CLAMP(atoi(optarg), 1, 64));
			break;
		case 'V':
			printf("lessor_commit %s\n", LESSEE_VERSION);
			exit(0);
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return -1;
		}
	return 0;
}

int main(int argc, char **argv)
{
	const char *tmp = getenv("TMPDIR");
	struct statfs fs;
	int r = 0;

	if (parse_args(argc, argv) < 0)
		return 2;
	log_setup("lessor_commit", LOG_FORMAT_LOGFMT, LOG_WARNING);
	printf("lessor_commit: median of %u rounds, %u runs per round, %u clients, lessor "
	       "--threads %s; %ld cores; databases in %s (fs magic 0x%lx)\n",
	       n_rounds, n_runs, n_clients, threads_arg, sysconf(_SC_NPROCESSORS_ONLN),
	       tmp ? tmp : "/tmp",
	       statfs(tmp ? tmp : "/tmp", &fs) == 0 ? (unsigned long)fs.f_type : 0UL);
	if (start_all() < 0)
		r = -1;
	for (unsigned round = 0; r == 0 && round < n_rounds; round++)
		for (size_t i = 0; r == 0 && i < ELEMENTSOF(configs); i++)
			r = run_round(&configs[i], round);
	if (r == 0)
		report();
	for (size_t i = 0; i < ELEMENTSOF(configs); i++)
		tu_lessor_free(configs[i].l);
	return r == 0 ? 0 : 1;
}
