/* e2e: the whole daemon against a real lessor.
 *  - runs/s for /bin/true at concurrency 1, 16 and 64, next to the floors
 *    measured in the same run: posix_spawn+waitpid of /bin/true, and lib/exec
 *    on the loop, at the same width;
 *  - the daemon's CPU time per run (utime+stime from /proc, over the runs),
 *    and beside it, measured here in the same rounds, what parts of its work
 *    cost without it: the floor's posix_spawn, lib/exec's spawn on the loop,
 *    and a run's files in the run directory (mkdir ... rmdir);
 *  - the daemon's RSS idle, and with 1,000 concurrent `sleep 30` runs.
 * Medians of several rounds; figures only, no verdict.
 * lessor runs with --synchronous normal so the figure is lessee's, not fsync's
 * (bench/lessor_claims measures lessor itself); --sync full runs it as issue
 * 15's table does, each claim and completion durable before it is answered.
 * LESSEE_BIN picks the daemon; --baseline OTHER_LESSEE runs both in every
 * round, back to back, so two builds compare on a shared machine;
 * --baseline-lessor OTHER_LESSOR does the same for lessor (LESSOR_BIN), the
 * same lessee in both arms; both together: the old stack against the new. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "benchutil.h"
#include "lessee_proc.h"
#include "lessor_proc.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"

static char *true_argv[] = {"/bin/true", NULL};

/* utime + stime of a process, in microseconds. */
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

/* This process's CPU time (all its threads), in microseconds; exact, not in
 * ticks. */
static double self_cpu_us(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_SELF, &ru) < 0)
		return -1;
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

static long proc_rss_kib(pid_t pid)
{
	char path[64], *s = NULL, *p;
	long kib = -1;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if (read_file_capped(path, 1 << 16, &s, NULL) < 0)
		return -1;
	p = strstr(s, "VmRSS:");
	if (p)
		kib = strtol(p + 6, NULL, 10);
	free(s);
	return kib;
}

static int dir_entries(const char *path)
{
	DIR *dir = opendir(path);
	struct dirent *de;
	int n = 0;

	if (!dir)
		return -errno;
	while ((de = readdir(dir)))
		n += de->d_name[0] != '.';
	closedir(dir);
	return n;
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

static int enqueue_n(struct tu_lessor *l, const char *workflow, int n)
{
	char body[128];

	snprintf(body, sizeof(body), "{\"workflow\":\"%s\",\"max_attempts\":1}", workflow);
	for (int i = 0; i < n; i++) {
		char *id = tu_lessor_enqueue(l, body);

		if (!id)
			return -EIO;
		free(id);
	}
	return 0;
}

/* The pause before the next look at the count: a quarter of the time the
 * pace so far says is left, at least 5 ms and at most 250 ms.  A poll is a
 * connection to lessor; every 5 ms for a whole round, the bench's own polls
 * took CPU from the daemons it measures.  The end is still seen within 5 ms. */
static usec_t poll_pause(long first, long n, long want, usec_t elapsed)
{
	usec_t left;

	if (n <= first)
		return 5 * USEC_PER_MSEC;
	left = (usec_t)((double)elapsed * (double)(want - n) / (double)(n - first));
	return CLAMP(left / 4, 5 * USEC_PER_MSEC, 250 * USEC_PER_MSEC);
}

static int wait_count(struct tu_lessor *l, const char *key, long want, usec_t timeout)
{
	usec_t start = time_mono(), end = start + timeout;
	long first = -1, n;

	while ((n = stat_count(l, key)) < want) {
		usec_t now = time_mono();

		if (now > end)
			return -ETIMEDOUT;
		if (first < 0)
			first = n;
		tu_sleep(MIN(poll_pause(first, n, want, now - start), end - now));
	}
	return 0;
}

/* Run directories on tmpfs, as under systemd (RuntimeDirectory=): the test
 * helper's default is beside the daemon's log, on whatever /tmp is. */
static char run_dir[64] = "/dev/shm/lessee-bench-XXXXXX";
static char sync_mode[8] = "normal"; /* lessor's --synchronous */
static const char *baseline;         /* --baseline: another lessee to compare with */
static const char *baseline_lessor;  /* --baseline-lessor: another lessor */
static unsigned claim_delay_ms;      /* --claim-delay: every claim answered this late */
static unsigned prefetch;            /* --prefetch: worker.prefetch of this build's arm */
static unsigned round_prefetch;      /* the round's: 0 in a baseline arm */
static int widths[8] = {1, 16, 64};  /* --widths: the concurrencies measured */
static size_t n_widths = 3;

/* "1,16,64": at most 8 widths, each 1..4096. */
static int parse_widths(const char *s)
{
	size_t n = 0;

	for (;;) {
		char *end;
		long v = strtol(s, &end, 10);

		if (end == s || v < 1 || v > 4096 || n >= ELEMENTSOF(widths))
			return -EINVAL;
		widths[n++] = (int)v;
		if (*end == '\0')
			break;
		if (*end != ',')
			return -EINVAL;
		s = end + 1;
	}
	n_widths = n;
	return 0;
}

/* The files a run costs the daemon in run_dir, by the same system calls as
 * lib/worker/run.c and runfiles.c make for a run that leaves nothing: its
 * directory, input.json written, the look for result.json, the input
 * unlinked, the directory removed.  CPU microseconds a run, -1 on failure. */
static double run_dir_cpu_us(int n)
{
	char dir[sizeof(run_dir) + 32], file[sizeof(dir) + 16];
	double c0 = self_cpu_us();
	struct stat st;

	for (int i = 0; i < n; i++) {
		bool written;
		int fd;

		snprintf(dir, sizeof(dir), "%s/files.%d", run_dir, i);
		if (mkdir(dir, 0700) < 0)
			return -1;
		snprintf(file, sizeof(file), "%s/input.json", dir);
		fd = open(file, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd < 0)
			return -1;
		written = pwrite(fd, "{}", 2, 0) == 2;
		close(fd);
		if (!written)
			return -1;
		snprintf(file, sizeof(file), "%s/result.json", dir);
		if (fstatat(AT_FDCWD, file, &st, AT_SYMLINK_NOFOLLOW) == 0 || errno != ENOENT)
			return -1;
		snprintf(file, sizeof(file), "%s/input.json", dir);
		if (unlink(file) < 0 || rmdir(dir) < 0)
			return -1;
	}
	return (self_cpu_us() - c0) / n;
}

/* The spawn rate of the floor (e NULL) or of lib/exec on the loop, and this
 * process's CPU a run meanwhile. */
static double spawn_rate_cpu(ev_t *e, int n, int width, double *ret_cpu)
{
	double c0 = self_cpu_us(), rate = tu_spawn_rate(e, true_argv, n, width);

	*ret_cpu = (self_cpu_us() - c0) / n;
	return rate;
}

static int start_daemon(struct tu_lessor *l, int concurrency, struct tu_lessee **ret)
{
	/* E2E_LOG_LEVEL=info: the daemon's default, two lines per run */
	const char *level = getenv("E2E_LOG_LEVEL") ? getenv("E2E_LOG_LEVEL") : "warning";
	char conf[512], more[64] = "";

	if (round_prefetch) /* a baseline older than the key never gets it */
		snprintf(more, sizeof(more), "prefetch = %u\n", round_prefetch);
	snprintf(conf, sizeof(conf),
	         "[worker]\nconcurrency = %d\nlease_ttl = 60s\nlease_refresh = 20s\n"
	         "long_poll = 5s\nrun_dir = %s\n%s[log]\nlevel = %s\n"
	         "[workflow.true]\ncommand = /bin/true\n"
	         "[workflow.sleep]\ncommand = /bin/sleep 30\n",
	         concurrency, run_dir, more, level);
	return tu_lessee_start(&(struct tu_lessee_opts){.lessor = l, .conf = conf}, ret);
}

struct round {
	double runs_per_s, cpu_us_per_run;
	double lessor_us_per_run; /* lessor's CPU over the same span (the bench's
	                           * few stats polls included, alike in both arms) */
};

/* --claim-delay: lessor answers every claim that much later (its test
 * faults), as an API farther away than the loopback would. */
static int delay_claims(struct tu_lessor *l)
{
	char body[128];
	long status = 0;

	snprintf(body, sizeof(body), "{\"endpoint\":\"claims\",\"count\":1000000,\"delay_ms\":%u}",
	         claim_delay_ms);
	if (tu_lessor_json(l, "POST", "/v1/admin/faults", body, &status, NULL) < 0 || status != 200)
		return -EIO;
	return 0;
}

/* One round: n runs queued first, then the daemon works them off. */
static int e2e_round(int concurrency, int n, struct round *ret)
{
	struct tu_lessor *l = NULL;
	struct tu_lessee *d = NULL;
	char *const args[] = {"--synchronous", sync_mode, "--enable-faults", NULL};
	double cpu0, cpu1, lcpu0, lcpu1;
	usec_t t0, t1;
	int r;

	r = tu_lessor_start(&(struct tu_lessor_opts){.args = args}, &l);
	if (r >= 0 && claim_delay_ms)
		r = delay_claims(l);
	if (r >= 0)
		r = enqueue_n(l, "true", n);
	if (r >= 0)
		r = start_daemon(l, concurrency, &d);
	if (r < 0)
		goto out;
	cpu0 = proc_cpu_us(tu_lessee_pid(d));
	lcpu0 = proc_cpu_us(tu_lessor_pid(l));
	t0 = time_mono();
	r = wait_count(l, "succeeded", n, 300 * USEC_PER_SEC);
	t1 = time_mono();
	cpu1 = proc_cpu_us(tu_lessee_pid(d));
	lcpu1 = proc_cpu_us(tu_lessor_pid(l));
	if (r >= 0) {
		ret->runs_per_s = (double)n * USEC_PER_SEC / (double)(t1 - t0);
		ret->cpu_us_per_run = (cpu1 - cpu0) / n;
		ret->lessor_us_per_run = (lcpu1 - lcpu0) / n;
	}
out:
	if (d && tu_lessee_quit(d) != 0 && r >= 0)
		r = -EIO;
	tu_lessee_free(d);
	tu_lessor_free(l);
	return r;
}

/* Sets the environment variable name to value (NULL: left as it is);
 * returns its old value, to put back with env_restore(). */
static char *env_swap(const char *name, const char *value)
{
	char *saved = getenv(name) ? strdup(getenv(name)) : NULL;

	if (value)
		setenv(name, value, 1);
	return saved;
}

static void env_restore(const char *name, char *saved)
{
	if (saved)
		setenv(name, saved, 1);
	else
		unsetenv(name);
	free(saved);
}

/* One round of the daemon at lessee and the server at lessor (NULL:
 * tu_lessee_bin()'s, tu_lessor_bin()'s). */
static int e2e_round_of(const char *lessee, const char *lessor, int concurrency, int n,
                        struct round *ret)
{
	char *saved_lessee = env_swap("LESSEE_BIN", lessee);
	char *saved_lessor = env_swap("LESSOR_BIN", lessor);
	int r;

	round_prefetch = lessee || lessor ? 0 : prefetch;
	r = e2e_round(concurrency, n, ret);

	env_restore("LESSEE_BIN", saved_lessee);
	env_restore("LESSOR_BIN", saved_lessor);
	return r;
}

/* A round's CPU a run, µs: lessee's, and in this process the floor's
 * (posix_spawn, waitpid), lib/exec's on the loop and a run's files alone. */
struct cpu_split {
	double lessee[32], floor[32], exec[32], files[32];
};

/* Where lessee's CPU a run goes, against what the same work costs without
 * it: the spawn (lib/exec, as lessee spawns) and the run directory's files;
 * the rest is lessee's own (HTTP, JSON, the run table, timers, its pipe). */
static void print_cpu_split(struct cpu_split *split, int reps)
{
	printf("\nCPU a run (us, medians of the same rounds): lessee, and in this process the "
	       "floor's posix_spawn, lib/exec's spawn and a run's files in %s\n",
	       run_dir);
	printf("%-6s %8s %12s %10s %10s %12s\n", "slots", "lessee", "posix_spawn", "lib/exec",
	       "run files", "lessee rest");
	for (size_t w = 0; w < n_widths; w++) {
		double l = tu_median(split[w].lessee, reps), f = tu_median(split[w].floor, reps);
		double x = tu_median(split[w].exec, reps), d = tu_median(split[w].files, reps);

		printf("%-6d %8.0f %12.0f %10.0f %10.0f %12.0f\n", widths[w], l, f, x, d,
		       l - x - d);
	}
}

static void bench_throughput(int n, int reps)
{
	static struct cpu_split split[ELEMENTSOF(widths)];

	printf("end-to-end /bin/true runs through lessor (--synchronous %s) + lessee (%d runs x %d "
	       "rounds, medians)\n",
	       sync_mode, n, reps);
	printf("%-6s %12s %14s %12s %12s %10s %10s %11s\n", "slots", "lessee run/s", "cpu us/run",
	       "floor run/s", "exec run/s", "vs floor", "vs exec", "lessor us/r");
	for (size_t w = 0; w < n_widths; w++) {
		double rate[32], fl[32], ex[32], lc[32];
		ev_t *e = NULL;

		if (ev_new(&e, NULL) < 0)
			return;
		for (int i = 0; i < reps; i++) {
			struct round rd = {0};

			fl[i] = spawn_rate_cpu(NULL, n, widths[w], &split[w].floor[i]);
			ex[i] = spawn_rate_cpu(e, n, widths[w], &split[w].exec[i]);
			split[w].files[i] = run_dir_cpu_us(n);
			round_prefetch = prefetch;
			if (e2e_round(widths[w], n, &rd) < 0)
				fprintf(stderr, "round failed\n");
			rate[i] = rd.runs_per_s;
			split[w].lessee[i] = rd.cpu_us_per_run;
			lc[i] = rd.lessor_us_per_run;
		}
		ev_free(e);
		double r = tu_median(rate, reps), c = tu_median(split[w].lessee, reps);
		double f = tu_median(fl, reps), x = tu_median(ex, reps);
		printf("%-6d %12.0f %14.0f %12.0f %12.0f %9.2fx %9.2fx %11.0f\n", widths[w], r, c,
		       f, x, r / f, r / x, tu_median(lc, reps));
	}
	print_cpu_split(split, reps);
}

/* --baseline, --baseline-lessor: in each round the spawn floor, then the
 * baseline (that lessee, or that lessor), then this build, back to back, so a
 * machine shared with other work loads both alike; the ratios are of
 * medians. */
static void bench_paired(const char *base_lessee, const char *base_lessor, int n, int reps)
{
	printf("end-to-end /bin/true runs through lessor (--synchronous %s, claims %u ms late): "
	       "baseline lessee %s, lessor %s against lessee %s (prefetch %u), lessor %s, paired "
	       "rounds (%d runs x %d rounds, medians)\n",
	       sync_mode, claim_delay_ms, base_lessee ? base_lessee : tu_lessee_bin(),
	       base_lessor ? base_lessor : tu_lessor_bin(), tu_lessee_bin(), prefetch,
	       tu_lessor_bin(), n, reps);
	printf("%-6s %11s %11s %11s %9s %9s %9s %10s %10s %11s %11s %10s\n", "slots", "floor/s",
	       "base run/s", "new run/s", "base/fl", "new/fl", "new/base", "base us/r", "new us/r",
	       "lessor b/r", "lessor n/r", "lessor n/b");
	for (size_t w = 0; w < n_widths; w++) {
		double fl[32], rb[32], rn[32], cb[32], cn[32], lb[32], ln[32];

		for (int i = 0; i < reps; i++) {
			struct round b = {0}, a = {0};

			fl[i] = tu_spawn_rate(NULL, true_argv, n, widths[w]);
			if (e2e_round_of(base_lessee, base_lessor, widths[w], n, &b) < 0 ||
			    e2e_round_of(NULL, NULL, widths[w], n, &a) < 0)
				fprintf(stderr, "round failed\n");
			rb[i] = b.runs_per_s;
			rn[i] = a.runs_per_s;
			cb[i] = b.cpu_us_per_run;
			cn[i] = a.cpu_us_per_run;
			lb[i] = b.lessor_us_per_run;
			ln[i] = a.lessor_us_per_run;
		}
		double f = tu_median(fl, reps), b = tu_median(rb, reps), a = tu_median(rn, reps);
		double mlb = tu_median(lb, reps), mln = tu_median(ln, reps);
		printf("%-6d %11.0f %11.0f %11.0f %8.2fx %8.2fx %8.2fx %10.0f %10.0f %11.0f %11.0f "
		       "%9.2fx\n",
		       widths[w], f, b, a, b / f, a / f, a / b, tu_median(cb, reps),
		       tu_median(cn, reps), mlb, mln, mln / mlb);
	}
}

static void bench_rss(int n)
{
	struct tu_lessor *l = NULL;
	struct tu_lessee *d = NULL;
	char *const args[] = {"--synchronous", "normal", "--threads", "8", NULL};
	long idle, busy;
	int fds = 0;
	char path[64];

	if (tu_lessor_start(&(struct tu_lessor_opts){.args = args}, &l) < 0 ||
	    start_daemon(l, n, &d) < 0) {
		fprintf(stderr, "cannot start\n");
		goto out;
	}
	tu_sleep(2 * USEC_PER_SEC);
	idle = proc_rss_kib(tu_lessee_pid(d));
	if (enqueue_n(l, "sleep", n) < 0 || wait_count(l, "running", n, 120 * USEC_PER_SEC) < 0) {
		fprintf(stderr, "the %d runs did not all start\n", n);
		goto out;
	}
	tu_sleep(USEC_PER_SEC);
	busy = proc_rss_kib(tu_lessee_pid(d));
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)tu_lessee_pid(d));
	fds = dir_entries(path);
	printf("\ndaemon RSS: idle %ld KiB; with %d concurrent `sleep 30` runs %ld KiB "
	       "(%.1f KiB per run), %d fds open\n",
	       idle, n, busy, (double)(busy - idle) / n, fds);
out:
	tu_lessee_free(d);
	tu_lessor_free(l);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"sync", required_argument, NULL, 's'},
	    {"no-rss", no_argument, NULL, 'R'},
	    {"baseline", required_argument, NULL, 'b'},
	    {"baseline-lessor", required_argument, NULL, 'L'},
	    {"claim-delay", required_argument, NULL, 'd'},
	    {"prefetch", required_argument, NULL, 'p'},
	    {"widths", required_argument, NULL, 'w'},
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},
	    {},
	};
	int n = 300, reps = 3, rss_runs = 1000, c;
	bool rss = true;

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) >= 0)
		switch (c) {
		case 's':
			if (strcmp(optarg, "full") && strcmp(optarg, "normal"))
				return 2;
			snprintf(sync_mode, sizeof(sync_mode), "%s", optarg);
			break;
		case 'R':
			rss = false;
			break;
		case 'b':
			baseline = optarg;
			break;
		case 'L':
			baseline_lessor = optarg;
			break;
		case 'd':
			claim_delay_ms = (unsigned)atoi(optarg);
			break;
		case 'p':
			prefetch = (unsigned)atoi(optarg);
			break;
		case 'w':
			if (parse_widths(optarg) < 0)
				return 2;
			break;
		case 'h':
			printf(
			    "usage: e2e [--sync full|normal] [--no-rss] [--baseline LESSEE | "
			    "--baseline-lessor LESSOR] [RUNS [ROUNDS [CONCURRENT_SLEEPS]]]\n"
			    "  RUNS /bin/true runs per round (300), ROUNDS (3), CONCURRENT_SLEEPS "
			    "(1000)\n"
			    "  --sync: lessor's --synchronous (normal); --no-rss: throughput only\n"
			    "  --baseline: each round also runs that lessee binary, back to back\n"
			    "  --baseline-lessor: each round also runs that lessor binary (with "
			    "--baseline: both old in the baseline arm)\n"
			    "  --claim-delay MS: lessor answers each claim MS later (a farther "
			    "API)\n"
			    "  --widths LIST: the concurrencies, comma-separated (1,16,64)\n"
			    "  --prefetch N: worker.prefetch of this build's lessee (0); a "
			    "baseline arm runs without\n"
			    "  LESSEE_BIN, LESSOR_BIN: the daemons (build/default/lessee, ...)\n"
			    "  E2E_LOG_LEVEL: the daemon's log level (warning; info is its "
			    "default)\n");
			return 0;
		case 'V':
			printf("e2e %s\n", LESSEE_VERSION);
			return 0;
		default:
			return 2;
		}
	if (optind < argc)
		n = atoi(argv[optind]);
	if (optind + 1 < argc)
		reps = MIN(atoi(argv[optind + 1]), 32);
	if (optind + 2 < argc)
		rss_runs = atoi(argv[optind + 2]);
	if (n <= 0 || reps <= 0 || rss_runs <= 0)
		return 2;
	signal(SIGPIPE, SIG_IGN);
	if (!mkdtemp(run_dir)) {
		perror("mkdtemp /dev/shm");
		return 1;
	}
	printf("loop backend: %s; run directories on tmpfs (%s); lessee %s\n", tu_backend(),
	       run_dir, tu_lessee_bin());
	if (baseline || baseline_lessor)
		bench_paired(baseline, baseline_lessor, n, reps);
	else
		bench_throughput(n, reps);
	if (rss)
		bench_rss(rss_runs);
	rm_rf(run_dir);
	return 0;
}
