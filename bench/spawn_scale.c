/* spawn_scale: how long it takes to start N long-running children (`sleep`)
 * that all stay alive, through lib/exec on the loop (each with its output pipe
 * and pidfd watched), next to plain posix_spawn() of the same N in the same run
 * (the floor: no pipes, no watches, no loop).  If spawning cost grew with the
 * number of children already running, the time per start would grow with N; at
 * the floor's pace it stays flat.  Then all of them are killed and reaped.
 * Repeated, medians; figures only, no verdict (docs/exec.md has the method). */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "benchutil.h"
#include "ev/ev.h"
#include "exec/exec-int.h"
#include "exec/exec.h"
#include "util/macro.h"
#include "util/time.h"

#define MAX_REPS 21
#define MAX_N 8
#define LOOP_EVERY 64 /* a loop iteration every this many starts, as a daemon would */

static char *sleep_argv[] = {"/bin/sleep", "3600", NULL};
static char *bench_envp[] = {"PATH=/usr/bin:/bin", NULL};

struct sample {
	double start_us;  /* wall clock per child started */
	double start_cpu; /* this process's CPU (user + system) per child started */
	double stop_us;   /* wall clock per child killed and reaped */
};

/* CPU time of this process so far: spawning's own cost (the clone copies the
 * fd table in the parent), not what the children spend starting up. */
static usec_t cpu_self(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (usec_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * USEC_PER_SEC +
	       (usec_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

#define N_CONFIGS 5
static struct sample samples[MAX_N][N_CONFIGS][MAX_REPS];

struct procs {
	exec_proc_t **p;
	int n, exited;
};

static void on_exit_cb(exec_proc_t *p, const struct exec_result *res, void *userdata)
{
	struct procs *ps = userdata;

	ps->exited++;
}

static int floor_run(int n, struct sample *s)
{
	pid_t *pids = calloc((size_t)n, sizeof(*pids));
	usec_t t0, c0;
	int r = 0;

	if (!pids)
		return -ENOMEM;
	t0 = time_mono();
	c0 = cpu_self();
	for (int i = 0; i < n && r == 0; i++)
		r = -posix_spawn(&pids[i], sleep_argv[0], NULL, NULL, sleep_argv, bench_envp);
	s->start_us = (double)(time_mono() - t0) / n;
	s->start_cpu = (double)(cpu_self() - c0) / n;
	t0 = time_mono();
	for (int i = 0; i < n && pids[i] > 0; i++)
		kill(pids[i], SIGKILL);
	for (int i = 0; i < n && pids[i] > 0; i++)
		while (waitpid(pids[i], NULL, 0) < 0 && errno == EINTR)
			;
	s->stop_us = (double)(time_mono() - t0) / n;
	free(pids);
	return r;
}

static int exec_run(const char *backend, int n, struct sample *s)
{
	struct exec_spec spec = {
	    .path = sleep_argv[0], .argv = sleep_argv, .envp = bench_envp, .stdin_fd = -1};
	struct procs ps = {.p = calloc((size_t)n, sizeof(exec_proc_t *)), .n = n};
	ev_t *e = NULL;
	usec_t t0, c0;
	int r, started = 0;

	if (!ps.p)
		return -ENOMEM;
	r = ev_new(&e, backend);
	/* as the daemon's loop: every child reaped there, found by its pid (no
	 * pidfd: one fd per child, its pipe) */
	if (r >= 0)
		r = ev_set_reap_orphans(e, true);
	t0 = time_mono();
	c0 = cpu_self();
	for (; r >= 0 && started < n; started++) {
		r = exec_spawn(e, &spec, NULL, on_exit_cb, &ps, &ps.p[started], NULL);
		if (r >= 0 && started % LOOP_EVERY == 0)
			r = ev_run_once(e, 0);
	}
	s->start_us = (double)(time_mono() - t0) / n;
	s->start_cpu = (double)(cpu_self() - c0) / n;
	t0 = time_mono();
	for (int i = 0; i < started; i++)
		if (ps.p[i])
			(void)exec_kill(ps.p[i], 0);
	while (r >= 0 && ps.exited < started)
		r = ev_run_once(e, USEC_INFINITY);
	s->stop_us = (double)(time_mono() - t0) / n;
	for (int i = 0; i < started; i++)
		exec_free(ps.p[i]);
	free(ps.p);
	ev_free(e);
	return r < 0 ? r : 0;
}

/* A pipe end per child (the loop reaps every child: no pidfd), and the loop's own. */
static int raise_nofile(int n)
{
	struct rlimit rl = {.rlim_cur = (rlim_t)n + 512, .rlim_max = (rlim_t)n + 512};
	struct rlimit old;

	if (getrlimit(RLIMIT_NOFILE, &old) == 0 && old.rlim_cur >= rl.rlim_cur)
		return 0;
	if (old.rlim_max >= rl.rlim_max)
		rl.rlim_max = old.rlim_max;
	return setrlimit(RLIMIT_NOFILE, &rl) < 0 ? -errno : 0;
}

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: spawn_scale [--reps R] [--only NAME,...] [--tsv FILE] [N...]\n"
	    "  Starts N sleeping children (default 1000 4096 10000) R times (default 3)\n"
	    "  per configuration (--only: posix_spawn, io_uring, epoll, io_uring/old, epoll/old);\n"
	    "  prints median microseconds per start and per stop.\n");
}

/* --only posix_spawn,io_uring,...: the configurations measured (default all). */
static const char *only;

static bool wanted(const char *name)
{
	size_t n = strlen(name);

	for (const char *p = only; p && *p; p += strcspn(p, ","), p += *p == ',')
		if (strncmp(p, name, n) == 0 && (p[n] == ',' || p[n] == '\0'))
			return true;
	return !only;
}

static int parse_args(int argc, char **argv, int *reps, int *ns, int *n_ns)
{
	static const struct option opts[] = {
	    {"reps", required_argument, NULL, 'r'}, {"only", required_argument, NULL, 'o'},
	    {"tsv", required_argument, NULL, 't'},  {"version", no_argument, NULL, 'V'},
	    {"help", no_argument, NULL, 'h'},       {0},
	};
	int c;

	while ((c = getopt_long(argc, argv, "r:h", opts, NULL)) >= 0) {
		if (c == 'V') {
			printf("spawn_scale %s\n", LESSEE_VERSION);
			return 0;
		} else if (c == 'r')
			*reps = atoi(optarg);
		else if (c == 'o')
			only = optarg;
		else if (c == 't' && tu_tsv_open(optarg) < 0) {
			perror(optarg);
			return -errno;
		} else if (c == 't')
			continue;
		else {
			usage(c == 'h' ? stdout : stderr);
			return c == 'h' ? 0 : -EINVAL;
		}
	}
	if (optind < argc)
		*n_ns = 0;
	for (; optind < argc && *n_ns < MAX_N; optind++)
		ns[(*n_ns)++] = atoi(optarg = argv[optind]);
	for (int i = 0; i < *n_ns; i++)
		if (ns[i] < 1)
			return -EINVAL;
	if (*reps < 1 || *reps > MAX_REPS || optind != argc) {
		usage(stderr);
		return -EINVAL;
	}
	return 1;
}

struct config {
	const char *name;
	const char *backend; /* NULL: the posix_spawn floor */
	bool legacy;         /* the child as it was: whole fd table, 62 sigactions */
};

static const struct config configs[N_CONFIGS] = {
    {"posix_spawn", NULL, false},       {"io_uring", "io_uring", false}, {"epoll", "epoll", false},
    {"io_uring/old", "io_uring", true}, {"epoll/old", "epoll", true},
};

static int measure(const struct config *c, int n, struct sample *s)
{
	int r = raise_nofile(n);

	if (r < 0)
		return r;
	if (!c->backend)
		return floor_run(n, s);
	exec_set_legacy_child(c->legacy);
	r = exec_run(c->backend, n, s);
	exec_set_legacy_child(false);
	return r;
}

static double sample_field(const struct sample *s, int what)
{
	return what == 0 ? s->start_us : what == 1 ? s->start_cpu : s->stop_us;
}

static void print_table(int n_ns, const int *ns, int reps)
{
	enum { N_CONF = ELEMENTSOF(configs) };
	static const char *const whats[] = {"start", "cpu", "stop"};
	static const char *const tsv_metrics[] = {"start_us", "start_cpu_us", "stop_us"};

	printf("%s started N times, all alive at once, then killed and reaped; %d repetitions,\n"
	       "median microseconds per child (ratio to the posix_spawn floor): start = wall\n"
	       "clock to start all, cpu = this process's CPU to start all, stop = kill and reap\n"
	       "all; /old = the child as it was before (whole fd table copied, 62 sigactions)\n",
	       sleep_argv[0], reps);
	printf("%-6s %-5s", "N", "");
	for (int c = 0; c < N_CONF; c++)
		printf(" %20s", configs[c].name);
	printf("\n");
	for (int i = 0; i < n_ns; i++)
		for (int what = 0; what < 3; what++) {
			double m[N_CONF];

			for (int c = 0; c < N_CONF; c++) {
				double v[MAX_REPS];

				for (int k = 0; k < reps; k++)
					v[k] = sample_field(&samples[i][c][k], what);
				m[c] = tu_median(v, (size_t)reps);
			}
			for (int c = 0; c < N_CONF; c++)
				if (m[c] > 0)
					tu_tsv_row("spawn_scale", configs[c].name, ns[i],
					           tsv_metrics[what], m[c], c ? m[0] : -1);
			printf("%-6d %-5s %20.1f", ns[i], whats[what], m[0]);
			for (int c = 1; c < N_CONF; c++)
				if (m[c] > 0)
					printf(" %12.1f (%5.2fx)", m[c], m[c] / m[0]);
				else
					printf(" %20s", "-");
			printf("\n");
		}
}

int main(int argc, char **argv)
{
	int ns[MAX_N] = {1000, 4096, 10000}, n_ns = 3, reps = 3;
	int r = parse_args(argc, argv, &reps, ns, &n_ns);

	if (r <= 0)
		return r < 0 ? 2 : 0;
	/* Repetitions outermost, so drift spreads over every configuration alike. */
	for (int rep = 0; rep < reps; rep++)
		for (int i = 0; i < n_ns; i++)
			for (size_t c = 0; c < ELEMENTSOF(configs); c++) {
				if (!wanted(configs[c].name)) {
					samples[i][c][rep] = (struct sample){0};
					continue;
				}
				r = measure(&configs[c], ns[i], &samples[i][c][rep]);
				if (r < 0) {
					fprintf(stderr, "spawn_scale: %s, %d children: %s\n",
					        configs[c].name, ns[i], strerror(-r));
					return 1;
				}
			}
	print_table(n_ns, ns, reps);
	return tu_tsv_close() < 0 ? 1 : 0;
}
