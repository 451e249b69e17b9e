/* scale: N concurrent runs on one daemon (issue 15: 10,000, started at the
 * spawn floor's pace; RssAnon after a renewal wave).  Each round:
 *  - the floor: N `/bin/sleep S` started back to back with posix_spawn from
 *    this process (then killed and reaped);
 *  - N runs of the same command queued in a real lessor (--synchronous
 *    normal: the figures are lessee's, not fsync's), then lessee started with
 *    concurrency N: the time from its start until N children run
 *    (lessee_runs_started_total), and its CPU time (utime+stime) over it;
 *  - lessee's RssAnon and VmHWM once all are asleep;
 *  - the same after a renewal wave (lease_refresh, --refresh; waits until
 *    lessee_lease_renewals_total grew by N), with the API requests the wave
 *    took (lessee_api_requests_total, endpoints "leases" and "lease").
 * Medians of the rounds, ratios to the floor; figures only, no verdict.
 * The daemon inherits our RLIMIT_NOFILE: we raise the hard limit to what N
 * runs need (root may) and leave the soft one as it is, so lessee raises its
 * own as it does under systemd. */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "benchutil.h"
#include "exec/exec.h"
#include "lessee_proc.h"
#include "lessor_proc.h"
#include "promparse.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"

extern char **environ;

#define SEC USEC_PER_SEC
#define MAX_ROUNDS 32

static char run_dir[64] = "/dev/shm/lessee-scale-XXXXXX";
static unsigned sleep_s = 600;  /* --sleep: each run's `sleep` */
static unsigned refresh_s = 30; /* --refresh: lease_refresh */

struct round {
	double floor_s, start_s, cpu_s, lessor_cpu_s;
	double rss_anon, hwm, rss_anon_wave, hwm_wave; /* KiB */
	double wave_s, wave_requests, renewed_before;
	double renew_failed; /* renewals that failed or found the lease lost, all round */
};

/* utime + stime of a process, in seconds. */
static double proc_cpu_s(pid_t pid)
{
	char path[64], *s = NULL, *p;
	unsigned long long ut = 0, st = 0;
	double r = NAN;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (read_file_capped(path, 4096, &s, NULL) < 0)
		return NAN;
	p = strrchr(s, ')');
	if (p &&
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) == 2)
		r = (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
	free(s);
	return r;
}

/* A "Key:  N kB" line of /proc/PID/status, in KiB. */
static double proc_status_kib(pid_t pid, const char *key)
{
	char path[64], *s = NULL, *p;
	double kib = NAN;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if (read_file_capped(path, 1 << 16, &s, NULL) < 0)
		return NAN;
	p = strstr(s, key);
	if (p)
		kib = strtod(p + strlen(key), NULL);
	free(s);
	return kib;
}

/* The floor: n sleeps started back to back, seconds; then killed and reaped. */
static double spawn_floor(int n)
{
	char secs[16];
	char *argv[] = {"/bin/sleep", secs, NULL};
	pid_t *pids = calloc((size_t)n, sizeof(*pids));
	usec_t t0, t1;
	int started = 0;

	snprintf(secs, sizeof(secs), "%u", sleep_s);
	if (!pids)
		return NAN;
	t0 = time_mono();
	for (; started < n; started++)
		if (posix_spawn(&pids[started], argv[0], NULL, NULL, argv, environ) != 0)
			break;
	t1 = time_mono();
	for (int i = 0; i < started; i++)
		kill(pids[i], SIGKILL);
	for (int i = 0; i < started; i++)
		waitpid(pids[i], NULL, 0);
	free(pids);
	return started == n ? (double)(t1 - t0) / SEC : NAN;
}

static int free_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = -1;

	if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	if (fd >= 0)
		close(fd);
	return port;
}

/* GET /metrics from the daemon's status endpoint, parsed. */
static prom_doc_t *metrics(int port)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
	                        .sin_port = htons((uint16_t)port),
	                        .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	static const char rq[] = "GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n";
	size_t len = 0, cap = 1 << 16;
	char *buf = malloc(cap), *body;
	prom_doc_t *doc = NULL;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ssize_t k;

	if (!buf || fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    write(fd, rq, sizeof(rq) - 1) != (ssize_t)sizeof(rq) - 1)
		goto out;
	while ((k = read(fd, buf + len, cap - len - 1)) > 0) {
		len += (size_t)k;
		if (len + 1 == cap) {
			char *nb = realloc(buf, cap *= 2);

			if (!nb)
				goto out;
			buf = nb;
		}
	}
	buf[len] = '\0';
	body = strstr(buf, "\r\n\r\n");
	if (body)
		(void)prom_parse(body + 4, strlen(body + 4), &doc, NULL);
out:
	if (fd >= 0)
		close(fd);
	free(buf);
	return doc;
}

static double metric_sum(int port, const char *name, const char *label, const char *value)
{
	prom_doc_t *doc = metrics(port);
	double v = doc ? prom_sum(doc, name, label, value, NULL) : NAN;

	prom_free(doc);
	return isnan(v) && doc ? 0 : v;
}

static double wave_requests(int port)
{
	return metric_sum(port, "lessee_api_requests_total", "endpoint", "leases") +
	       metric_sum(port, "lessee_api_requests_total", "endpoint", "lease");
}

/* Poll until the metric reaches want: 0, or -ETIMEDOUT. */
static int wait_metric(int port, const char *name, const char *label, const char *value,
                       double want, usec_t timeout)
{
	usec_t end = time_mono() + timeout;

	for (;;) {
		double v = metric_sum(port, name, label, value);

		if (!isnan(v) && v >= want)
			return 0;
		if (time_mono() > end)
			return -ETIMEDOUT;
		tu_sleep(20 * USEC_PER_MSEC);
	}
}

static int enqueue_n(struct tu_lessor *l, int n)
{
	static const char body[] = "{\"workflow\":\"sleep\",\"max_attempts\":1}";

	for (int i = 0; i < n; i++) {
		char *id = tu_lessor_enqueue(l, body);

		if (!id)
			return -EIO;
		free(id);
	}
	return 0;
}

static int start_daemon(struct tu_lessor *l, int n, int port, struct tu_lessee **ret)
{
	char conf[512];

	snprintf(conf, sizeof(conf),
	         "[worker]\nconcurrency = %d\nlease_ttl = %us\nlease_refresh = %us\n"
	         "long_poll = 5s\nrun_dir = %s\n[status]\nlisten = 127.0.0.1:%d\n"
	         "[log]\nlevel = warning\n"
	         "[workflow.sleep]\ncommand = /bin/sleep %u\n",
	         n, 3 * refresh_s, refresh_s, run_dir, port, sleep_s);
	return tu_lessee_start(&(struct tu_lessee_opts){.lessor = l, .conf = conf}, ret);
}

/* The renewal wave after the start: every lease renewed once more. */
static int renewal_wave(pid_t pid, int port, int n, struct round *rd)
{
	double r0 = metric_sum(port, "lessee_lease_renewals_total", "result", "ok");
	double q0 = wave_requests(port);
	usec_t t0 = time_mono();
	int r;

	rd->renewed_before = r0;
	r = wait_metric(port, "lessee_lease_renewals_total", "result", "ok", r0 + n,
	                (3 * refresh_s + 120) * SEC);
	rd->renew_failed = metric_sum(port, "lessee_lease_renewals_total", "result", "error") +
	                   metric_sum(port, "lessee_lease_renewals_total", "result", "lost");
	if (r < 0)
		return r;
	rd->wave_s = (double)(time_mono() - t0) / SEC;
	rd->wave_requests = wave_requests(port) - q0;
	rd->rss_anon_wave = proc_status_kib(pid, "RssAnon:");
	rd->hwm_wave = proc_status_kib(pid, "VmHWM:");
	return 0;
}

static int scale_round(int n, struct round *rd)
{
	struct tu_lessor *l = NULL;
	struct tu_lessee *d = NULL;
	char *const args[] = {"--synchronous", "normal", "--threads", "8", NULL};
	int port = free_port(), r;
	double lessor_cpu0 = NAN;
	usec_t t0;
	pid_t pid;

	rd->floor_s = spawn_floor(n);
	r = tu_lessor_start(&(struct tu_lessor_opts){.args = args}, &l);
	if (r >= 0)
		r = enqueue_n(l, n);
	t0 = time_mono();
	lessor_cpu0 = l ? proc_cpu_s(tu_lessor_pid(l)) : NAN;
	if (r >= 0)
		r = start_daemon(l, n, port, &d);
	if (r < 0)
		goto out;
	pid = tu_lessee_pid(d);
	r = wait_metric(port, "lessee_runs_started_total", NULL, NULL, n, 120 * SEC);
	if (r < 0) {
		fprintf(stderr,
		        "the %d runs did not all start in 120 s: %.0f did (RLIMIT_NOFILE?)\n", n,
		        metric_sum(port, "lessee_runs_started_total", NULL, NULL));
		goto out;
	}
	rd->start_s = (double)(time_mono() - t0) / SEC;
	rd->cpu_s = proc_cpu_s(pid);
	rd->lessor_cpu_s = proc_cpu_s(tu_lessor_pid(l)) - lessor_cpu0;
	tu_sleep(SEC); /* all asleep */
	rd->rss_anon = proc_status_kib(pid, "RssAnon:");
	rd->hwm = proc_status_kib(pid, "VmHWM:");
	r = renewal_wave(pid, port, n, rd);
	if (r < 0)
		fprintf(stderr, "no renewal wave of %d leases\n", n);
out:
	if (d)
		(void)tu_lessee_quit(d);
	tu_lessee_free(d);
	tu_lessor_free(l);
	return r;
}

/* Our hard RLIMIT_NOFILE up to what n runs need (root may raise it); the
 * soft one stays, for the daemon to raise. */
static void nofile_for(int n)
{
	struct rlimit rl;
	rlim_t need = (rlim_t)n * 3 + 1024; /* a pipe, a cgroup, a pidfd at most */

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_max != RLIM_INFINITY &&
	    rl.rlim_max < need) {
		rl.rlim_max = need;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			fprintf(stderr, "cannot raise the hard fd limit to %llu: %m\n",
			        (unsigned long long)need);
	}
}

#define MEDIAN(field)                                                                              \
	({                                                                                         \
		double v_[MAX_ROUNDS];                                                             \
		for (int i_ = 0; i_ < reps; i_++)                                                  \
			v_[i_] = rd[i_].field;                                                     \
		tu_median(v_, (size_t)reps);                                                       \
	})

static void bench_scale(int n, int reps)
{
	struct round rd[MAX_ROUNDS] = {0};

	nofile_for(n);
	for (int i = 0; i < reps; i++)
		if (scale_round(n, &rd[i]) < 0)
			fprintf(stderr, "round %d failed\n", i + 1);
	double fl = MEDIAN(floor_s), st = MEDIAN(start_s);
	printf("\n%d concurrent `/bin/sleep %u` runs, lease_refresh %u s (%d rounds, medians)\n", n,
	       sleep_s, refresh_s, reps);
	printf("  start: floor %.2f s (%.0f/s), lessee %.2f s (%.0f/s), floor/lessee %.2f\n", fl,
	       n / fl, st, n / st, fl / st);
	printf("  lessee CPU over the start %.2f s (%.0f us per run); lessor %.2f s\n",
	       MEDIAN(cpu_s), MEDIAN(cpu_s) * 1e6 / n, MEDIAN(lessor_cpu_s));
	printf("  asleep: RssAnon %.1f MiB, VmHWM %.1f MiB\n", MEDIAN(rss_anon) / 1024,
	       MEDIAN(hwm) / 1024);
	printf("  after a renewal wave of %d leases (%.1f s, %.0f requests, %.0f renewals "
	       "before it, %.0f failed or lost): RssAnon %.1f MiB, VmHWM %.1f MiB\n",
	       n, MEDIAN(wave_s), MEDIAN(wave_requests), MEDIAN(renewed_before),
	       MEDIAN(renew_failed), MEDIAN(rss_anon_wave) / 1024, MEDIAN(hwm_wave) / 1024);
	tu_tsv_row("scale", "lessee", n, "start_s", st, fl);
	tu_tsv_row("scale", "lessee", n, "cpu_us_per_run", MEDIAN(cpu_s) * 1e6 / n, NAN);
	tu_tsv_row("scale", "lessee", n, "rss_anon_mib", MEDIAN(rss_anon) / 1024, NAN);
	tu_tsv_row("scale", "lessee", n, "rss_anon_wave_mib", MEDIAN(rss_anon_wave) / 1024, NAN);
	tu_tsv_row("scale", "lessee", n, "vmhwm_wave_mib", MEDIAN(hwm_wave) / 1024, NAN);
	tu_tsv_row("scale", "lessee", n, "wave_requests", MEDIAN(wave_requests), NAN);
	tu_tsv_row("scale", "lessee", n, "renewals_failed", MEDIAN(renew_failed), NAN);
}

static void usage(void)
{
	printf(
	    "usage: scale [--runs N[,N...]] [--rounds R] [--sleep S] [--refresh S] [--tsv FILE]\n"
	    "  --runs: concurrent runs (10000; several: 4096,10000)\n"
	    "  --rounds: rounds per N (3); --sleep: each run's sleep (600 s)\n"
	    "  --refresh: lease_refresh (30 s; lease_ttl is 3 times it)\n"
	    "  LESSEE_BIN, LESSOR_BIN: the daemons (build/default/lessee, ...)\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"runs", required_argument, NULL, 'n'},  {"rounds", required_argument, NULL, 'r'},
	    {"sleep", required_argument, NULL, 's'}, {"refresh", required_argument, NULL, 'f'},
	    {"tsv", required_argument, NULL, 't'},   {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},     {},
	};
	const char *runs = "10000";
	char *list, *save = NULL;
	int reps = 3, c;

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) >= 0)
		switch (c) {
		case 'n':
			runs = optarg;
			break;
		case 'r':
			reps = MIN(atoi(optarg), MAX_ROUNDS);
			break;
		case 's':
			sleep_s = (unsigned)atoi(optarg);
			break;
		case 'f':
			refresh_s = (unsigned)atoi(optarg);
			break;
		case 't':
			if (tu_tsv_open(optarg) < 0)
				return 1;
			break;
		case 'h':
			usage();
			return 0;
		case 'V':
			printf("scale %s\n", LESSEE_VERSION);
			return 0;
		default:
			return 2;
		}
	if (reps <= 0 || sleep_s == 0 || refresh_s == 0)
		return 2;
	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!mkdtemp(run_dir)) {
		perror("mkdtemp /dev/shm");
		return 1;
	}
	printf("loop backend: %s; run directories on tmpfs (%s); lessee %s; lessor --synchronous "
	       "normal\n",
	       tu_backend(), run_dir, tu_lessee_bin());
	list = strdup(runs);
	for (char *tok = list ? strtok_r(list, ",", &save) : NULL; tok;
	     tok = strtok_r(NULL, ",", &save))
		if (atoi(tok) > 0)
			bench_scale(atoi(tok), reps);
	free(list);
	fflush(stdout);
	rm_rf(run_dir);
	return tu_tsv_close() < 0;
}
