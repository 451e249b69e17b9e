/* camunda7_peers: lessee (its Camunda 7 driver, [api] protocol = camunda7)
 * and the official Camunda 7 Node worker (camunda-external-task-client-js,
 * tests/camunda7/sdk/worker.mjs with SDK_COMMAND) spawning the same command
 * per task at the same concurrency, against the same Camunda 7 emulator
 * (tests/camunda7/camunda7_emu), in one run:
 *
 *   runs/s       N tasks created at once, after the worker's first
 *                fetchAndLock, until all N are COMPLETED in the emulator
 *   cpu us/run   the worker process's own utime+stime over those N runs
 *                (/proc/PID/stat: the commands' CPU is not in it)
 *   peak RSS     the worker process's VmHWM at the end of the round
 *
 * next to the machine's floor for the same command and width (posix_spawn +
 * waitpid), sampled before every round and after them all, its median (a
 * load that comes and goes on a shared machine moves both alike).  Each
 * round starts a fresh emulator and worker; medians of the rounds; lessee's
 * figures also as ratios to the SDK worker's from the same run.  Figures
 * only, no verdict.
 *
 * Both long-poll (asyncResponseTimeout 5 s) and fetch at most the free slots
 * (lessee: maxTasks = free slots; the client: maxParallelExecutions = W); the
 * client sleeps its `interval` after every poll (default 300 ms, 10 ms here so
 * that its pause does not decide the figures).
 *
 *   camunda7_peers [--runs N] [--rounds R] [--concurrency W] [--sdk-dir DIR]
 *                  [--command "ARGV..."]
 *                   [--tsv FILE]
 *
 * The client comes from `make bench-compare` ($(BUILD)/bench/camunda7-sdk,
 * next to this binary) or --sdk-dir; without it (or without node) its column
 * is left out, and so is lessee's when this lessee does not accept
 * protocol = camunda7. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "benchutil.h"
#include "camunda7_proc.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"

#define TASK_TYPE "bench"
#define MAX_ROUNDS 32

extern char **environ;

static unsigned n_runs = 500, n_rounds = 3, width = 16;
static char *command = "/bin/true";
static char sdk_dir[4096];

struct figures {
	double runs_per_s, cpu_us_per_run, peak_rss_kib;
};

struct peer {
	const char *name;
	/* starts the worker against url in dir, its stderr to dir/worker.log */
	int (*start)(const char *url, const char *dir, pid_t *ret);
	const char *missing; /* why it cannot run, or NULL */
};

/* ------------------------------------------------------------ /proc */

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

static double proc_hwm_kib(pid_t pid)
{
	char path[64], *s = NULL, *p;
	double kib = -1;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if (read_file_capped(path, 1 << 16, &s, NULL) < 0)
		return -1;
	p = strstr(s, "VmHWM:");
	if (p)
		kib = (double)strtol(p + 6, NULL, 10);
	free(s);
	return kib;
}

/* ------------------------------------------------------------ workers */

static int spawn_logged(char *const *argv, char *const *envp, const char *dir, pid_t *ret)
{
	_cleanup_free_ char *log = NULL;

	if (asprintf(&log, "%s/worker.log", dir) < 0)
		return -ENOMEM;
	return tu_spawn_logged(argv, envp, log, -1, -1, ret);
}

static int lessee_conf(const char *url, const char *dir, char **ret_path)
{
	_cleanup_free_ char *text = NULL;
	int n;

	n = asprintf(&text,
	             "[api]\nprotocol = camunda7\nurl = %s\nrequest_timeout = 10s\n"
	             "[worker]\nid = lessee-bench\nconcurrency = %u\nlease_ttl = 60s\n"
	             "lease_refresh = 20s\nlong_poll = 5s\nspool_dir = %s/spool\n"
	             "run_dir = %s/run\n[status]\nlisten =\n[log]\nlevel = warning\n"
	             "[workflow." TASK_TYPE "]\ncommand = %s\n",
	             url, width, dir, dir, command);
	if (n < 0 || asprintf(ret_path, "%s/lessee.conf", dir) < 0)
		return -ENOMEM;
	return write_file_atomic(*ret_path, text, (size_t)n, 0644);
}

static int lessee_start(const char *url, const char *dir, pid_t *ret)
{
	_cleanup_free_ char *conf = NULL, *bin = strdup(tu_lessee_bin());
	int r = lessee_conf(url, dir, &conf);
	char *argv[] = {bin, "--config", conf, NULL};

	if (!bin)
		return -ENOMEM;
	return r < 0 ? r : spawn_logged(argv, environ, dir, ret);
}

/* NULL when this lessee takes a camunda7 configuration, else why not. */
static const char *lessee_missing(void)
{
	static char why[256];
	_cleanup_free_ char *dir = tu_tmpdir("peers"), *conf = NULL, *cmd = NULL;
	int r;

	if (!dir || lessee_conf("http://127.0.0.1:1", dir, &conf) < 0 ||
	    asprintf(&cmd, "'%s' --config '%s' --check-config >'%s/check.log' 2>&1",
	             tu_lessee_bin(), conf, dir) < 0)
		return "out of memory";
	r = system(cmd);
	if (r != 0) {
		_cleanup_free_ char *log = NULL, *path = NULL;

		if (asprintf(&path, "%s/check.log", dir) >= 0 &&
		    read_file_capped(path, 4096, &log, NULL) >= 0 && log) {
			char *nl = strchr(log, '\n');

			if (nl)
				*nl = '\0';
			snprintf(why, sizeof(why),
			         "lessee --check-config refuses protocol = camunda7: %s", log);
		} else {
			snprintf(why, sizeof(why), "lessee --check-config failed");
		}
	}
	rm_rf(dir);
	return r != 0 ? why : NULL;
}

static int sdk_start(const char *url, const char *dir, pid_t *ret)
{
	_cleanup_free_ char *script = NULL;
	_cleanup_(strv_freep) char **env = strv_copy(environ);
	char num[16];
	char *argv[] = {"node", NULL, NULL};
	int r = env ? 0 : -ENOMEM;

	if (asprintf(&script, "%s/worker.mjs", sdk_dir) < 0)
		return -ENOMEM;
	argv[1] = script;
	snprintf(num, sizeof(num), "%u", width);
	{
		_cleanup_free_ char *a = NULL, *b = NULL, *c = NULL, *d = NULL, *e = NULL,
		                    *f = NULL;

		if (asprintf(&a, "CAMUNDA_URL=%s", url) < 0 ||
		    asprintf(&b, "SDK_CONCURRENCY=%s", num) < 0 ||
		    asprintf(&c, "SDK_COMMAND=%s", command) < 0 ||
		    asprintf(&d, "SDK_TOPIC=%s", TASK_TYPE) < 0 ||
		    asprintf(&e, "SDK_WORKER_ID=%s", "sdk-bench") < 0 ||
		    asprintf(&f, "SDK_MAX_TASKS=%s", num) < 0)
			return -ENOMEM;
		const char *add[] = {a,
		                     b,
		                     c,
		                     d,
		                     e,
		                     f,
		                     "SDK_INTERVAL_MS=10",
		                     "SDK_ASYNC_TIMEOUT_MS=5000",
		                     "SDK_LOCK_MS=60000"};

		for (size_t i = 0; r >= 0 && i < ELEMENTSOF(add); i++)
			r = strv_extend(&env, add[i]);
	}
	return r < 0 ? r : spawn_logged(argv, env, dir, ret);
}

static const char *sdk_missing(const char *argv0, const char *given)
{
	static char why[sizeof(sdk_dir) + 64];
	_cleanup_free_ char *copy = strdup(argv0), *pkg = NULL;
	char *slash = copy ? strrchr(copy, '/') : NULL;

	if (given)
		snprintf(sdk_dir, sizeof(sdk_dir), "%s", given);
	else
		snprintf(sdk_dir, sizeof(sdk_dir), "%s/camunda7-sdk",
		         slash ? (*slash = 0, copy) : ".");
	if (system("node --version >/dev/null 2>&1") != 0)
		return "node is not installed";
	if (asprintf(&pkg, "%s/node_modules/camunda-external-task-client-js/package.json",
	             sdk_dir) < 0 ||
	    access(pkg, R_OK) < 0) {
		snprintf(why, sizeof(why), "the client is not installed in %s (make bench-compare)",
		         sdk_dir);
		return why;
	}
	return NULL;
}

static int worker_stop(pid_t pid)
{
	usec_t end = time_mono() + 30 * USEC_PER_SEC;
	int status;

	kill(pid, SIGTERM);
	while (waitpid(pid, &status, WNOHANG) == 0) {
		if (time_mono() > end) {
			kill(pid, SIGKILL);
			waitpid(pid, &status, 0);
			return -ETIMEDOUT;
		}
		tu_sleep(10 * USEC_PER_MSEC);
	}
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* ------------------------------------------------------------ a round */

static bool emu_wait(struct tu_camunda7 *c, const char *query, usec_t timeout)
{
	usec_t end = time_mono() + timeout;

	do { /* in slices: the helper's HTTP client gives up after 60 s */
		_cleanup_free_ char *path = NULL;
		long st = 0;

		if (asprintf(&path, "/emu/wait?%s&timeout_ms=20000", query) < 0)
			return false;
		cJSON_Delete(tu_camunda7_json(c, "GET", path, NULL, &st));
		if (st == 200)
			return true;
		if (st != 408)
			return false;
	} while (time_mono() < end);
	return false;
}

static void dump(const char *dir)
{
	_cleanup_free_ char *path = NULL, *text = NULL;

	if (asprintf(&path, "%s/worker.log", dir) >= 0 &&
	    read_file_capped(path, 1 << 16, &text, NULL) >= 0 && text)
		fprintf(stderr, "---- %s ----\n%s---- end ----\n", path, text);
}

static int round_run(const struct peer *p, struct figures *ret)
{
	struct tu_camunda7 *c = NULL;
	_cleanup_free_ char *body = NULL, *done = NULL;
	pid_t pid = -1;
	double cpu0, cpu1;
	usec_t t0, t1;
	long st;
	int r;

	r = tu_camunda7_start(&(struct tu_camunda7_opts){.quiet = true}, &c);
	if (r < 0)
		return r;
	r = p->start(tu_camunda7_url(c), tu_camunda7_dir(c), &pid);
	if (r < 0)
		goto out;
	if (!emu_wait(c, "stat=fetchAndLock&count=1", 60 * USEC_PER_SEC)) {
		r = -ETIMEDOUT;
		goto out;
	}
	cpu0 = proc_cpu_us(pid);
	if (asprintf(&body, "{\"topicName\":\"" TASK_TYPE "\",\"count\":%u}", n_runs) < 0 ||
	    asprintf(&done, "topicName=" TASK_TYPE "&state=COMPLETED&count=%u", n_runs) < 0) {
		r = -ENOMEM;
		goto out;
	}
	t0 = time_mono();
	cJSON_Delete(tu_camunda7_json(c, "POST", "/emu/tasks", body, &st));
	if (st != 200 || !emu_wait(c, done, 600 * USEC_PER_SEC)) {
		r = st != 200 ? -EIO : -ETIMEDOUT;
		goto out;
	}
	t1 = time_mono();
	cpu1 = proc_cpu_us(pid);
	ret->runs_per_s = (double)n_runs * USEC_PER_SEC / (double)(t1 - t0);
	ret->cpu_us_per_run = (cpu1 - cpu0) / n_runs;
	ret->peak_rss_kib = proc_hwm_kib(pid);
out:
	if (r < 0) {
		fprintf(stderr, "camunda7_peers: %s: a round failed: %s\n", p->name, strerror(-r));
		dump(tu_camunda7_dir(c));
	}
	if (pid > 0)
		(void)worker_stop(pid);
	tu_camunda7_free(c);
	return r;
}

/* --tsv: the same medians, and the floor beside the rate. */
static void write_tsv(const struct figures *med, double floor)
{
	static const char *const names[] = {"Camunda 7 official JS client",
	                                    "lessee, camunda7 driver"};

	for (size_t i = 0; i < ELEMENTSOF(names); i++) {
		if (med[i].runs_per_s <= 0)
			continue;
		tu_tsv_row("camunda7_peers", names[i], (int)width, "runs_per_s", med[i].runs_per_s,
		           floor);
		tu_tsv_row("camunda7_peers", names[i], (int)width, "cpu_us_per_run",
		           med[i].cpu_us_per_run, -1);
		tu_tsv_row("camunda7_peers", names[i], (int)width, "peak_rss_kib",
		           med[i].peak_rss_kib, -1);
	}
}

/* ------------------------------------------------------------ main */

static void usage(FILE *f)
{
	fprintf(f, "usage: camunda7_peers [--runs N] [--rounds R] [--concurrency W] "
	           "[--sdk-dir DIR] [--command \"ARGV...\"] [--tsv FILE]\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"runs", required_argument, NULL, 'n'},
	    {"rounds", required_argument, NULL, 'r'},
	    {"concurrency", required_argument, NULL, 'w'},
	    {"sdk-dir", required_argument, NULL, 's'},
	    {"command", required_argument, NULL, 'c'},
	    {"tsv", required_argument, NULL, 't'},
	    {"version", no_argument, NULL, 'V'},
	    {"help", no_argument, NULL, 'h'},
	    {0},
	};
	struct peer peers[] = {
	    {"node client", sdk_start, NULL},
	    {"lessee", lessee_start, NULL},
	};
	struct figures med[ELEMENTSOF(peers)] = {{0}};
	const char *given_sdk = NULL;
	double load[1], floor = -1, fl[3 * MAX_ROUNDS];
	size_t n_fl = 0;
	_cleanup_(strv_freep) char **cmd_argv = NULL;
	int o;

	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 'n':
			n_runs = (unsigned)MAX(atoi(optarg), 1);
			break;
		case 'r':
			n_rounds = (unsigned)CLAMP(atoi(optarg), 1, MAX_ROUNDS);
			break;
		case 'w':
			width = (unsigned)MAX(atoi(optarg), 1);
			break;
		case 's':
			given_sdk = optarg;
			break;
		case 'c':
			command = optarg;
			break;
		case 't':
			if (tu_tsv_open(optarg) < 0) {
				perror(optarg);
				return 1;
			}
			break;
		case 'V':
			printf("camunda7_peers %s\n", LESSEE_VERSION);
			return 0;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (strv_split(command, " ", &cmd_argv) < 0)
		cmd_argv = NULL;
	peers[0].missing = sdk_missing(argv[0], given_sdk);
	peers[1].missing = lessee_missing();
	if (getloadavg(load, 1) < 1)
		load[0] = -1;
	printf("camunda7_peers: `%s` per task, %u tasks x %u rounds, concurrency %u, medians; "
	       "%ld cores, load average %.1f at the start\n",
	       command, n_runs, n_rounds, width, sysconf(_SC_NPROCESSORS_ONLN), load[0]);
	printf("  %-11s %10s %12s %12s   %s\n", "worker", "runs/s", "cpu us/run", "peak RSS",
	       "ratios to the node client");
	for (size_t i = 0; i < ELEMENTSOF(peers); i++) {
		double rate[MAX_ROUNDS], cpu[MAX_ROUNDS], rss[MAX_ROUNDS];
		unsigned ok = 0;

		if (peers[i].missing) {
			printf("  %-11s (left out: %s)\n", peers[i].name, peers[i].missing);
			continue;
		}
		for (unsigned k = 0; k < n_rounds; k++) {
			struct figures f = {0};

			if (cmd_argv && cmd_argv[0]) /* the floor beside every round */
				fl[n_fl++] = tu_spawn_rate(NULL, cmd_argv, (int)n_runs, (int)width);
			if (round_run(&peers[i], &f) < 0)
				continue;
			rate[ok] = f.runs_per_s;
			cpu[ok] = f.cpu_us_per_run;
			rss[ok++] = f.peak_rss_kib;
		}
		if (!ok) {
			printf("  %-11s (every round failed)\n", peers[i].name);
			continue;
		}
		med[i] =
		    (struct figures){tu_median(rate, ok), tu_median(cpu, ok), tu_median(rss, ok)};
		printf("  %-11s %10.0f %12.0f %9.0f KiB", peers[i].name, med[i].runs_per_s,
		       med[i].cpu_us_per_run, med[i].peak_rss_kib);
		if (i > 0 && med[0].runs_per_s > 0)
			printf("   x%.2f runs/s  x%.2f cpu  x%.2f rss",
			       med[i].runs_per_s / med[0].runs_per_s,
			       med[i].cpu_us_per_run / med[0].cpu_us_per_run,
			       med[i].peak_rss_kib / med[0].peak_rss_kib);
		printf("%s\n", ok < n_rounds ? "  (some rounds failed)" : "");
	}
	if (cmd_argv && cmd_argv[0]) {
		for (unsigned k = 0; k < n_rounds; k++)
			fl[n_fl++] = tu_spawn_rate(NULL, cmd_argv, (int)n_runs, (int)width);
		floor = tu_median(fl, n_fl);
		printf("  %-11s %10.0f   (posix_spawn + waitpid of the same command, same width)\n",
		       "floor", floor);
	}
	write_tsv(med, floor);
	return tu_tsv_close() < 0 ? 1 : 0;
}
