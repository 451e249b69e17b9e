/* latency: enqueue -> child start through lessor + lessee, next to the
 * machine's floor in the same run, and the daemon's RSS against the number
 * of runs alive at once.
 *
 *   enqueue -> start  one run at a time: POST /v1/runs, and the child (`dd`
 *                     writing one byte into a FIFO this bench reads) marks
 *                     its start.  Before each enqueue the previous run has
 *                     succeeded and 20 ms have passed, so the daemon is idle
 *                     with its claim parked (the long poll).  The floor:
 *                     posix_spawn of the same `dd` here, to the same byte.
 *                     p50 / p90 / p99 of the samples, each beside the floor's;
 *                     then each sample split where lessor's 201 arrived: the
 *                     enqueue request (lessor's commit) and the rest (the
 *                     claim answer, lessee, the exec), the rest against the
 *                     floor.  --rounds R: R rounds, each with a fresh lessor
 *                     and lessee, and each figure the median of the rounds'
 *                     own (a p99 of one round is its few slowest samples).
 *   RSS               the daemon's VmRSS and RssAnon with K `sleep` runs
 *                     alive, K stepping up (--rss 0,100,500,1000), and its
 *                     VmHWM at the end; also its VmHWM after the latency
 *                     samples (the "peak RSS" of a daemon working W slots).
 *
 * lessor runs with --synchronous full unless --sync normal.  Figures only,
 * no verdict.  --tsv FILE writes the figures (benchutil.h), --cdf FILE the
 * sorted samples for a CDF plot (gnuplot: index 0 floor, index 1 lessee).
 *
 *   latency [--rounds R] [--samples N] [--slots W] [--sync full|normal]
 *           [--rss K,K,...] [--tsv FILE] [--cdf FILE] */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "benchutil.h"
#include "lessee_proc.h"
#include "lessor/client.h"
#include "lessor_proc.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"

#define MAX_SAMPLES 10000
#define MAX_STEPS 16
#define MAX_ROUNDS 15

static int n_rounds = 1, n_samples = 200, slots = 16, rss_steps[MAX_STEPS] = {0, 100, 500, 1000},
           n_steps = 4;
static char *sync_mode = "full";
static char fifo[4096];
static int fifo_fd = -1;
static char *envp[] = {"PATH=/usr/bin:/bin", NULL};

/* ------------------------------------------------------------ /proc */

static long proc_status_kib(pid_t pid, const char *key)
{
	char path[64], *s = NULL, *p;
	long kib = -1;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if (read_file_capped(path, 1 << 16, &s, NULL) < 0)
		return -1;
	p = strstr(s, key);
	if (p)
		kib = strtol(p + strlen(key), NULL, 10);
	free(s);
	return kib;
}

static long stat_count(struct tu_lessor *l, const char *key)
{
	long status = 0, n = -1;
	cJSON *o = NULL;

	if (tu_lessor_json(l, "GET", "/v1/stats", NULL, &status, &o) == 0 && status == 200) {
		const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);

		n = cJSON_IsNumber(j) ? (long)j->valuedouble : -1;
	}
	cJSON_Delete(o);
	return n;
}

static int wait_count(struct tu_lessor *l, const char *key, long want, usec_t timeout)
{
	usec_t end = time_mono() + timeout;

	while (stat_count(l, key) < want) {
		if (time_mono() > end)
			return -ETIMEDOUT;
		tu_sleep(2 * USEC_PER_MSEC);
	}
	return 0;
}

/* ------------------------------------------------------------ the mark */

/* The byte a child writes when it starts; the time it arrived. */
static int wait_mark(usec_t *ret)
{
	struct pollfd p = {.fd = fifo_fd, .events = POLLIN};
	char c;
	int r;

	do
		r = poll(&p, 1, 30 * 1000);
	while (r < 0 && errno == EINTR);
	if (r == 0)
		return -ETIMEDOUT;
	*ret = time_mono();
	if (r < 0 || read(fifo_fd, &c, 1) != 1)
		return -errno;
	return 0;
}

static double floor_sample(void)
{
	char of[sizeof(fifo) + 4];
	char *argv[] = {"/bin/dd", "if=/dev/zero", of, "bs=1", "count=1", "status=none", NULL};
	usec_t t0, t1;
	pid_t pid;
	int r;

	snprintf(of, sizeof(of), "of=%s", fifo);
	t0 = time_mono();
	if (posix_spawn(&pid, argv[0], NULL, NULL, argv, envp) != 0)
		return -1;
	r = wait_mark(&t1);
	waitpid(pid, NULL, 0);
	return r < 0 ? -1 : (double)(t1 - t0) / USEC_PER_MSEC;
}

/* One enqueue -> start; *ret_enqueue: the part until lessor's 201 answer
 * arrived (its commit, with the fsync under --synchronous full); the rest is
 * the claim answer, lessee and the exec.  The enqueues share one client, as a
 * producer keeps its connection: a client made and freed per enqueue put its
 * connection's set-up and teardown into the first part (0.2-0.35 ms of its
 * p50 here) while the claim answer was already on its way. */
static double lessee_sample(lessor_client *c, struct tu_lessor *l, long done, double *ret_enqueue)
{
	usec_t t0, ta, t1;
	long status = 0;

	if (wait_count(l, "succeeded", done, 30 * USEC_PER_SEC) < 0)
		return -1;
	tu_sleep(20 * USEC_PER_MSEC);
	t0 = time_mono();
	if (lessor_client_json(c, "POST", "/v1/runs", "{\"workflow\":\"mark\",\"max_attempts\":1}",
	                       &status, NULL) < 0 ||
	    status != 201)
		return -1;
	ta = time_mono();
	if (wait_mark(&t1) < 0)
		return -1;
	*ret_enqueue = (double)(ta - t0) / USEC_PER_MSEC;
	return (double)(t1 - t0) / USEC_PER_MSEC;
}

/* ------------------------------------------------------------ daemons */

static int start_pair(int concurrency, struct tu_lessor **l, struct tu_lessee **d)
{
	char *const args[] = {"--synchronous", sync_mode, NULL};
	_cleanup_free_ char *conf = NULL;
	int r;

	if (asprintf(&conf,
	             "[worker]\nconcurrency = %d\nlease_ttl = 300s\nlease_refresh = 100s\n"
	             "long_poll = 30s\n[log]\nlevel = warning\n"
	             "[workflow.mark]\ncommand = /bin/dd if=/dev/zero of=%s bs=1 count=1 "
	             "status=none\n[workflow.sleep]\ncommand = /bin/sleep 600\n",
	             concurrency, fifo) < 0)
		return -ENOMEM;
	r = tu_lessor_start(&(struct tu_lessor_opts){.args = args}, l);
	return r < 0 ? r : tu_lessee_start(&(struct tu_lessee_opts){.lessor = *l, .conf = conf}, d);
}

/* SIGKILL to every process whose parent is pid. */
static void kill_children(pid_t pid)
{
	DIR *proc = opendir("/proc");
	struct dirent *de;

	while (proc && (de = readdir(proc))) {
		int child = atoi(de->d_name);
		pid_t ppid;
		char state;

		if (child > 0 && tu_proc_stat(child, &state, &ppid) && ppid == pid)
			kill(child, SIGKILL);
	}
	if (proc)
		closedir(proc);
}

/* ------------------------------------------------------------ figures */

static void write_cdf(FILE *f, const char *name, const double *v, int n)
{
	fprintf(f, "# %s: ms fraction\n", name);
	for (int i = 0; i < n; i++)
		fprintf(f, "%.4f\t%.5f\n", v[i], (double)(i + 1) / n);
	fprintf(f, "\n\n");
}

static double pct(const double *sorted, int n, double p)
{
	int i = (int)(p * n + 0.999999) - 1;

	return sorted[CLAMP(i, 0, n - 1)];
}

static const double ps[] = {0.50, 0.90, 0.99};
static const char *const names[] = {"p50_ms", "p90_ms", "p99_ms"};

/* One round's percentiles (ps[]) of the whole, the floor's samples, and the
 * two parts split where lessor's 201 arrived, each part sorted on its own (so
 * the parts' percentiles do not add up to the whole's): which side the time
 * beyond the floor is on. */
enum figure { WHOLE, FLOOR, ENQUEUE, REST, N_FIGURES };

struct round_pcts {
	double pct[N_FIGURES][ELEMENTSOF(ps)];
	double hwm_kib; /* the daemon's VmHWM after the samples */
};

static void percentiles(double *v, int n, double *out)
{
	tu_median(v, (size_t)n); /* sorts */
	for (size_t k = 0; k < ELEMENTSOF(ps); k++)
		out[k] = pct(v, n, ps[k]);
}

/* One round: a fresh lessor and lessee, n_samples samples each right after
 * one of the floor's.  ls and fl keep the round's samples (sorted). */
static int latency_round(struct round_pcts *p, double *ls, double *fl)
{
	static double enq[MAX_SAMPLES], rest[MAX_SAMPLES];
	struct tu_lessor *l = NULL;
	struct tu_lessee *d = NULL;
	lessor_client *c = NULL;
	int r = start_pair(slots, &l, &d);

	if (r >= 0 && !(c = tu_lessor_client(l)))
		r = -ENOMEM;
	for (int i = 0; r >= 0 && i < n_samples; i++) {
		fl[i] = floor_sample();
		ls[i] = lessee_sample(c, l, i, &enq[i]);
		if (fl[i] < 0 || ls[i] < 0)
			r = -EIO;
		else
			rest[i] = ls[i] - enq[i];
	}
	if (r >= 0) {
		percentiles(ls, n_samples, p->pct[WHOLE]);
		percentiles(fl, n_samples, p->pct[FLOOR]);
		percentiles(enq, n_samples, p->pct[ENQUEUE]);
		percentiles(rest, n_samples, p->pct[REST]);
		p->hwm_kib = (double)proc_status_kib(tu_lessee_pid(d), "VmHWM:");
	}
	lessor_client_free(c);
	tu_lessee_free(d);
	tu_lessor_free(l);
	return r;
}

/* The median over the rounds of percentile ps[k] of figure f. */
static double median_pct(const struct round_pcts *p, enum figure f, size_t k)
{
	double v[MAX_ROUNDS];

	for (int i = 0; i < n_rounds; i++)
		v[i] = p[i].pct[f][k];
	return tu_median(v, (size_t)n_rounds);
}

static double median_hwm(const struct round_pcts *p)
{
	double v[MAX_ROUNDS];

	for (int i = 0; i < n_rounds; i++)
		v[i] = p[i].hwm_kib;
	return tu_median(v, (size_t)n_rounds);
}

static void print_rounds(const struct round_pcts *p)
{
	printf("  %-8s %12s %12s %12s %12s\n", "round", "p50 ms", "p99 ms", "floor p50",
	       "floor p99");
	for (int i = 0; i < n_rounds; i++)
		printf("  %-8d %12.2f %12.2f %12.2f %12.2f\n", i + 1, p[i].pct[WHOLE][0],
		       p[i].pct[WHOLE][2], p[i].pct[FLOOR][0], p[i].pct[FLOOR][2]);
	printf("  each figure below: the median of the %d rounds' own\n"
	       "  %-8s %12s %12s %8s\n",
	       n_rounds, "", "lessee ms", "floor ms", "ratio");
}

static void print_figures(const char *system, const struct round_pcts *p)
{
	for (size_t k = 0; k < ELEMENTSOF(ps); k++) {
		double a = median_pct(p, WHOLE, k), b = median_pct(p, FLOOR, k);

		printf("  %-8s %12.2f %12.2f %7.2fx\n", names[k], a, b, a / b);
		tu_tsv_row("latency", system, slots, names[k], a, b);
	}
	printf("  split at lessor's 201 answer (each part's own percentiles)\n"
	       "  %-8s %12s %12s %12s %8s\n",
	       "", "enqueue ms", "201->start", "floor ms", "ratio");
	for (size_t k = 0; k < ELEMENTSOF(ps); k++) {
		double e = median_pct(p, ENQUEUE, k), a = median_pct(p, REST, k);
		double b = median_pct(p, FLOOR, k);
		char metric[64];

		printf("  %-8s %12.2f %12.2f %12.2f %7.2fx\n", names[k], e, a, b, a / b);
		snprintf(metric, sizeof(metric), "enqueue_%s", names[k]);
		tu_tsv_row("latency", system, slots, metric, e, -1);
		snprintf(metric, sizeof(metric), "answer_to_start_%s", names[k]);
		tu_tsv_row("latency", system, slots, metric, a, b);
	}
	printf("  daemon VmHWM after the samples: %.0f KiB\n", median_hwm(p));
	tu_tsv_row("latency", system, slots, "peak_rss_kib", median_hwm(p), -1);
}

/* The CDF: every round's samples together. */
static int write_cdfs(const char *path, const char *system, double *fl, double *ls, int n)
{
	FILE *f = fopen(path, "we");

	if (!f)
		return -errno;
	tu_median(fl, (size_t)n); /* sorts */
	tu_median(ls, (size_t)n);
	write_cdf(f, "posix_spawn floor", fl, n);
	write_cdf(f, system, ls, n);
	return ferror(f) | fclose(f) ? -EIO : 0;
}

static int bench_latency(const char *cdf_path)
{
	static double fl[MAX_ROUNDS * MAX_SAMPLES], ls[MAX_ROUNDS * MAX_SAMPLES];
	struct round_pcts p[MAX_ROUNDS];
	char system[64];
	int r = 0;

	for (int i = 0; r >= 0 && i < n_rounds; i++)
		r = latency_round(&p[i], ls + i * n_samples, fl + i * n_samples);
	if (r < 0) {
		fprintf(stderr, "latency: the enqueue -> start samples failed: %s\n", strerror(-r));
		return r;
	}
	snprintf(system, sizeof(system), "lessee + lessor (%s)", sync_mode);
	printf("enqueue -> child start, %d round(s) of %d samples, one at a time, %d slots, lessor "
	       "--synchronous %s\n",
	       n_rounds, n_samples, slots, sync_mode);
	print_rounds(p);
	print_figures(system, p);
	return cdf_path ? write_cdfs(cdf_path, system, fl, ls, n_rounds * n_samples) : 0;
}

static int enqueue_sleeps(struct tu_lessor *l, int n)
{
	for (int i = 0; i < n; i++) {
		char *id = tu_lessor_enqueue(l, "{\"workflow\":\"sleep\",\"max_attempts\":1}");

		if (!id)
			return -EIO;
		free(id);
	}
	return 0;
}

static int bench_rss(void)
{
	struct tu_lessor *l = NULL;
	struct tu_lessee *d = NULL;
	int top = 1, alive = 0, r;
	char system[64];

	for (int i = 0; i < n_steps; i++)
		top = MAX(top, rss_steps[i]);
	r = start_pair(top, &l, &d);
	snprintf(system, sizeof(system), "lessee + lessor (%s)", sync_mode);
	printf("\ndaemon memory with K `sleep` runs alive (KiB)\n  %-8s %10s %10s\n", "K", "VmRSS",
	       "RssAnon");
	for (int i = 0; r >= 0 && i < n_steps; i++) {
		pid_t pid = tu_lessee_pid(d);
		long rss, anon;

		if (rss_steps[i] > alive) {
			r = enqueue_sleeps(l, rss_steps[i] - alive);
			if (r >= 0)
				r = wait_count(l, "running", rss_steps[i], 300 * USEC_PER_SEC);
			alive = rss_steps[i];
		}
		if (r < 0)
			break;
		tu_sleep(USEC_PER_SEC); /* the starts' last reports settle */
		rss = proc_status_kib(pid, "VmRSS:");
		anon = proc_status_kib(pid, "RssAnon:");
		printf("  %-8d %10ld %10ld\n", alive, rss, anon);
		tu_tsv_row("latency", system, alive, "rss_kib", (double)rss, -1);
		tu_tsv_row("latency", system, alive, "rss_anon_kib", (double)anon, -1);
	}
	if (r >= 0) {
		long hwm = proc_status_kib(tu_lessee_pid(d), "VmHWM:");

		printf("  VmHWM at the end: %ld KiB\n", hwm);
		tu_tsv_row("latency", system, top, "hwm_kib", (double)hwm, -1);
	} else {
		fprintf(stderr, "latency: the RSS steps failed: %s\n", strerror(-r));
	}
	/* SIGQUIT takes the daemon down; its `sleep`s would outlive it. */
	if (d)
		kill_children(tu_lessee_pid(d));
	tu_lessee_free(d);
	tu_lessor_free(l);
	return r;
}

/* ------------------------------------------------------------ main */

static int parse_steps(const char *s)
{
	n_steps = 0;
	for (char *end; *s && n_steps < MAX_STEPS; s = end + (*end == ',')) {
		rss_steps[n_steps++] = (int)strtol(s, &end, 10);
		if (end == s || rss_steps[n_steps - 1] < 0)
			return -EINVAL;
	}
	return n_steps > 0 ? 0 : -EINVAL;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: latency [--rounds R] [--samples N] [--slots W] [--sync full|normal] "
	           "[--rss K,K,...] [--tsv FILE] [--cdf FILE]\n");
}

/* Both markers start in the C locale: the floor's dd gets PATH only, and the
 * daemon passes LANG, LANGUAGE and LC_* of its environment (ours) to its
 * runs, where dd's setlocale() then loads the locale's files, about 0.2 ms
 * that is the marker's own work, not the path to its start. */
static void clear_locale(void)
{
	extern char **environ;
	char name[256];

	unsetenv("LANG");
	unsetenv("LANGUAGE");
	for (size_t i = 0; environ[i];)
		if (strncmp(environ[i], "LC_", 3) == 0 && strcspn(environ[i], "=") < sizeof(name)) {
			snprintf(name, sizeof(name), "%.*s", (int)strcspn(environ[i], "="),
			         environ[i]);
			unsetenv(name); /* environ changed: from the start again */
			i = 0;
		} else
			i++;
}

static int raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return -errno;
	rl.rlim_cur = rl.rlim_max;
	return setrlimit(RLIMIT_NOFILE, &rl) < 0 ? -errno : 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"samples", required_argument, NULL, 'n'},
	    {"rounds", required_argument, NULL, 'r'}, /* each with fresh daemons */
	    {"slots", required_argument, NULL, 'w'},
	    {"sync", required_argument, NULL, 's'},
	    {"rss", required_argument, NULL, 'k'},
	    {"tsv", required_argument, NULL, 't'},
	    {"cdf", required_argument, NULL, 'c'},
	    {"version", no_argument, NULL, 'V'},
	    {"help", no_argument, NULL, 'h'},
	    {},
	};
	_cleanup_free_ char *dir = NULL;
	const char *cdf = NULL;
	double load[1];
	int o, r;

	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 'n':
			n_samples = CLAMP(atoi(optarg), 1, MAX_SAMPLES);
			break;
		case 'r':
			n_rounds = CLAMP(atoi(optarg), 1, MAX_ROUNDS);
			break;
		case 'w':
			slots = MAX(atoi(optarg), 1);
			break;
		case 's':
			sync_mode = optarg;
			break;
		case 'k':
			if (parse_steps(optarg) < 0) {
				usage(stderr);
				return 2;
			}
			break;
		case 't':
			if (tu_tsv_open(optarg) < 0) {
				perror(optarg);
				return 1;
			}
			break;
		case 'c':
			cdf = optarg;
			break;
		case 'V':
			printf("latency %s\n", LESSEE_VERSION);
			return 0;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	signal(SIGPIPE, SIG_IGN);
	(void)raise_nofile();
	clear_locale();
	dir = tu_tmpdir("latency");
	if (!dir)
		return 1;
	snprintf(fifo, sizeof(fifo), "%s/mark", dir);
	if (mkfifo(fifo, 0600) < 0 || (fifo_fd = open(fifo, O_RDWR | O_CLOEXEC)) < 0) {
		perror(fifo);
		return 1;
	}
	if (getloadavg(load, 1) < 1)
		load[0] = -1;
	printf("latency: %ld cores, load average %.1f at the start, loop backend %s, both "
	       "markers in the C locale\n",
	       sysconf(_SC_NPROCESSORS_ONLN), load[0], tu_backend());
	r = bench_latency(cdf);
	if (r >= 0)
		r = bench_rss();
	close(fifo_fd);
	rm_rf(dir);
	if (tu_tsv_close() < 0)
		r = -EIO;
	return r < 0 ? 1 : 0;
}
