/* ev_bench: lib/ev throughput on both backends, measured in the same run.
 *
 *   ev_bench [--runs N] [--quick] [--backend io_uring|epoll]
 *
 * Each figure is the median of N runs, per backend, per wall-clock second and
 * per CPU second of this process (steadier on a shared machine).  Scenarios:
 *   pingpong  P pipes, one token each, every callback passes its token on:
 *             P events per iteration; events/s
 *   idle      one pipe pair ping-ponging while up to 10000 (fd limit allowing)
 *             other watches sit idle:
 *             round trips/s (cost of registered-but-idle watches)
 *   churn     ev_io_add + first event + ev_io_del per round: rounds/s
 *             (short-lived connections)
 *   toggle    EV_WRITE switched on, reported, switched off again: rounds/s
 *             (a writer whose buffer fills and drains)
 *   timers    arm / re-arm / disarm with 1 and with 100000 armed timers:
 *             ops/s (the heap's O(log n)); backend-independent */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "benchutil.h"
#include "ev/ev.h"
#include "util/macro.h"
#include "util/time.h"

#define MAX_RUNS 31

static int runs = 5;
static bool quick;

/* Wall-clock and process CPU time (user + system: the loop's syscalls and the
 * io_uring completion work run in this task).  On a shared machine CPU time per
 * operation is the steadier figure. */
struct rate {
	double per_wall, per_cpu;
};

struct stopwatch {
	usec_t wall, cpu;
};

static usec_t cpu_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (usec_t)ts.tv_sec * USEC_PER_SEC + (usec_t)ts.tv_nsec / 1000;
}

static struct stopwatch sw_start(void)
{
	return (struct stopwatch){.wall = time_mono(), .cpu = cpu_now()};
}

static struct rate sw_rate(struct stopwatch sw, uint64_t count)
{
	double wall = (double)(time_mono() - sw.wall) / 1e6,
	       cpu = (double)(cpu_now() - sw.cpu) / 1e6;

	return (struct rate){(double)count / wall, (double)count / (cpu > 0 ? cpu : 1e-9)};
}

static void die(const char *what, int r)
{
	fprintf(stderr, "ev_bench: %s: %s\n", what, strerror(r < 0 ? -r : r));
	exit(1);
}

static ev_t *loop_new(const char *backend)
{
	ev_t *e;
	int r = ev_new(&e, backend);

	if (r < 0)
		die(backend, r);
	return e;
}

static void xpipe(int p[2])
{
	if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0)
		die("pipe2", errno);
}

/* ---- pingpong: P tokens travelling around P pipes --------------------------- */

struct ring {
	int (*p)[2];
	struct hop {
		struct ring *r;
		int next_fd; /* write end of the next pipe */
	} * hops;
	int n;
	uint64_t events, target;
};

static void ring_cb(ev_io_t *w, int fd, uint32_t revents, void *userdata)
{
	struct hop *h = userdata;
	char c;

	if (read(fd, &c, 1) != 1)
		return;
	h->r->events++;
	if (write(h->next_fd, &c, 1) != 1)
		die("write", errno);
}

static struct rate run_pingpong(const char *backend, int npipes, uint64_t nevents)
{
	struct ring r = {.n = npipes, .target = nevents};
	ev_t *e = loop_new(backend);
	struct stopwatch sw;
	struct rate rate;

	r.p = calloc((size_t)npipes, sizeof(*r.p));
	r.hops = calloc((size_t)npipes, sizeof(*r.hops));
	if (!r.p || !r.hops)
		die("calloc", ENOMEM);
	for (int i = 0; i < npipes; i++)
		xpipe(r.p[i]);
	for (int i = 0; i < npipes; i++) {
		r.hops[i] = (struct hop){.r = &r, .next_fd = r.p[(i + 1) % npipes][1]};
		if (ev_io_add(e, r.p[i][0], EV_READ, ring_cb, &r.hops[i], NULL) < 0)
			die("ev_io_add", errno);
	}
	for (int i = 0; i < npipes; i++)
		if (write(r.p[i][1], "t", 1) != 1)
			die("write", errno);
	sw = sw_start();
	while (r.events < r.target)
		if (ev_run_once(e, USEC_INFINITY) < 0)
			die("ev_run_once", EIO);
	rate = sw_rate(sw, r.events);
	ev_free(e);
	for (int i = 0; i < npipes; i++) {
		close(r.p[i][0]);
		close(r.p[i][1]);
	}
	free(r.p);
	free(r.hops);
	return rate;
}

/* ---- idle: one active pair among many idle watches -------------------------- */

struct pp {
	int a[2], b[2];
	uint64_t trips;
};

static void pp_a(ev_io_t *w, int fd, uint32_t revents, void *userdata)
{
	struct pp *p = userdata;
	char c;

	if (read(fd, &c, 1) == 1 && write(p->b[1], &c, 1) != 1)
		die("write", errno);
}

static void pp_b(ev_io_t *w, int fd, uint32_t revents, void *userdata)
{
	struct pp *p = userdata;
	char c;

	if (read(fd, &c, 1) == 1) {
		p->trips++;
		if (write(p->a[1], &c, 1) != 1)
			die("write", errno);
	}
}

static void never(ev_io_t *w, int fd, uint32_t revents, void *userdata)
{
	abort();
}

static struct rate run_idle(const char *backend, int nidle, uint64_t trips)
{
	struct pp p = {0};
	int(*idle)[2] = calloc((size_t)nidle, sizeof(*idle));
	ev_t *e = loop_new(backend);
	struct stopwatch sw;
	struct rate rate;

	if (!idle)
		die("calloc", ENOMEM);
	for (int i = 0; i < nidle; i++) {
		xpipe(idle[i]);
		if (ev_io_add(e, idle[i][0], EV_READ, never, NULL, NULL) < 0)
			die("ev_io_add idle", errno);
	}
	xpipe(p.a);
	xpipe(p.b);
	if (ev_io_add(e, p.a[0], EV_READ, pp_a, &p, NULL) < 0 ||
	    ev_io_add(e, p.b[0], EV_READ, pp_b, &p, NULL) < 0)
		die("ev_io_add", errno);
	(void)ev_run_once(e, 0); /* arm everything before timing */
	if (write(p.a[1], "t", 1) != 1)
		die("write", errno);
	sw = sw_start();
	while (p.trips < trips)
		if (ev_run_once(e, USEC_INFINITY) < 0)
			die("ev_run_once", EIO);
	rate = sw_rate(sw, p.trips);
	ev_free(e);
	for (int i = 0; i < nidle; i++) {
		close(idle[i][0]);
		close(idle[i][1]);
	}
	free(idle);
	close(p.a[0]);
	close(p.a[1]);
	close(p.b[0]);
	close(p.b[1]);
	return rate;
}

/* ---- churn: a watch per round ------------------------------------------------ */

static void churn_cb(ev_io_t *w, int fd, uint32_t revents, void *userdata)
{
	(*(uint64_t *)userdata)++;
	ev_io_del(w);
}

static struct rate run_churn(const char *backend, uint64_t rounds)
{
	ev_t *e = loop_new(backend);
	uint64_t done = 0;
	int p[2];
	struct stopwatch sw;
	struct rate rate;

	xpipe(p);
	if (write(p[1], "t", 1) != 1) /* always readable */
		die("write", errno);
	sw = sw_start();
	for (uint64_t i = 0; i < rounds; i++) {
		if (ev_io_add(e, p[0], EV_READ, churn_cb, &done, NULL) < 0)
			die("ev_io_add", errno);
		while (done <= i)
			if (ev_run_once(e, USEC_INFINITY) < 0)
				die("ev_run_once", EIO);
	}
	rate = sw_rate(sw, done);
	ev_free(e);
	close(p[0]);
	close(p[1]);
	return rate;
}

/* ---- toggle: EV_WRITE switched on and off, as a writer with a buffer does ---- */

struct toggle {
	ev_io_t *w;
	uint64_t rounds;
};

static void toggle_cb(ev_io_t *w, int fd, uint32_t revents, void *userdata)
{
	struct toggle *t = userdata;

	t->rounds++;
	/* "buffer drained": no more write interest until there is data again */
	(void)ev_io_set_events(w, EV_READ);
}

static struct rate run_toggle(const char *backend, uint64_t rounds)
{
	struct toggle t = {0};
	ev_t *e = loop_new(backend);
	int p[2];
	struct stopwatch sw;
	struct rate rate;

	xpipe(p);
	/* a pipe's write end is never readable: EV_READ keeps a poll armed */
	if (ev_io_add(e, p[1], EV_READ, toggle_cb, &t, &t.w) < 0)
		die("ev_io_add", errno);
	(void)ev_run_once(e, 0);
	sw = sw_start();
	while (t.rounds < rounds) {
		(void)ev_io_set_events(t.w, EV_READ | EV_WRITE); /* "data queued" */
		if (ev_run_once(e, USEC_INFINITY) < 0)
			die("ev_run_once", EIO);
	}
	rate = sw_rate(sw, t.rounds);
	ev_free(e);
	close(p[0]);
	close(p[1]);
	return rate;
}

/* ---- timers ----------------------------------------------------------------- */

static void timer_cb(ev_timer_t *t, void *userdata)
{
}

static struct rate run_timers(int background, uint64_t ops)
{
	ev_t *e = loop_new("epoll");
	ev_timer_t *t;
	struct stopwatch sw;
	struct rate rate;

	srand(1);
	for (int i = 0; i < background; i++)
		if (ev_timer_add(e, USEC_PER_SEC + (usec_t)(rand() % 1000000), timer_cb, NULL,
		                 NULL) < 0)
			die("ev_timer_add", ENOMEM);
	if (ev_timer_add(e, USEC_INFINITY, timer_cb, NULL, &t) < 0)
		die("ev_timer_add", ENOMEM);
	sw = sw_start();
	for (uint64_t i = 0; i < ops; i += 3) {
		(void)ev_timer_arm(t, USEC_PER_SEC + (usec_t)(i % 1000000));
		(void)ev_timer_arm(t, USEC_PER_SEC + (usec_t)((i * 7919) % 1000000));
		ev_timer_disarm(t);
	}
	rate = sw_rate(sw, ops);
	ev_free(e);
	return rate;
}

/* ---- driver ----------------------------------------------------------------- */

typedef struct rate (*scenario_fn)(const char *backend, const void *arg);

struct pingpong_arg {
	int pipes;
};

static struct rate pingpong_fn(const char *b, const void *a)
{
	const struct pingpong_arg *arg = a;

	return run_pingpong(b, arg->pipes, quick ? 20000 : 200000);
}

static int nidle = 10000;

static struct rate idle_fn(const char *b, const void *a)
{
	return run_idle(b, quick ? MIN(nidle, 1000) : nidle, quick ? 5000 : 50000);
}

static struct rate churn_fn(const char *b, const void *a)
{
	return run_churn(b, quick ? 5000 : 50000);
}

static struct rate toggle_fn(const char *b, const void *a)
{
	return run_toggle(b, quick ? 10000 : 100000);
}

static void print_rate(const char *name, const char *backend, const char *unit, double *wall,
                       double *cpu, const char *note)
{
	printf("%-22s %-9s %12.0f %s  %12.0f per cpu-s  (median of %d%s)\n", name, backend,
	       tu_median(wall, runs), unit, tu_median(cpu, runs), runs, note);
	fflush(stdout);
}

static void report(const char *name, const char *backend, const char *unit, scenario_fn fn,
                   const void *arg)
{
	double wall[MAX_RUNS], cpu[MAX_RUNS];

	for (int i = 0; i < runs; i++) {
		struct rate r = fn(backend, arg);

		wall[i] = r.per_wall;
		cpu[i] = r.per_cpu;
	}
	print_rate(name, backend, unit, wall, cpu, "");
}

/* Two fds per idle watch: as many as the fd limit allows, up to 10000. */
static void raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
		(void)getrlimit(RLIMIT_NOFILE, &rl);
	}
	nidle = (int)MIN((rl.rlim_cur - MIN(rl.rlim_cur, 2200)) / 2, (rlim_t)10000);
}

static void usage(FILE *f)
{
	fputs("Usage: ev_bench [--runs N] [--quick] [--backend io_uring|epoll]\n"
	      "Measures lib/ev on both loop backends in one run and prints medians.\n"
	      "  -r, --runs N      runs per figure (default 5, max 31)\n"
	      "  -q, --quick       smaller workloads\n"
	      "  -b, --backend B   only this backend\n"
	      "  -h, --help        this text\n"
	      "  -V, --version     version\n",
	      f);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"runs", required_argument, NULL, 'r'},    {"quick", no_argument, NULL, 'q'},
	    {"backend", required_argument, NULL, 'b'}, {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},       {0}};
	const char *backends[2] = {"io_uring", "epoll"};
	int nb = 2, c;

	while ((c = getopt_long(argc, argv, "r:qb:hV", opts, NULL)) != -1) {
		switch (c) {
		case 'r':
			runs = atoi(optarg);
			if (runs < 1 || runs > MAX_RUNS) {
				fprintf(stderr, "ev_bench: --runs must be 1..%d\n", MAX_RUNS);
				return 2;
			}
			break;
		case 'q':
			quick = true;
			break;
		case 'b':
			backends[0] = optarg;
			nb = 1;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("ev_bench %s\n", LESSEE_VERSION);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	raise_nofile();
	for (int i = 0; i < nb; i++) {
		static const struct pingpong_arg p1 = {1}, p64 = {64}, p1k = {1000};

		report("pingpong pipes=1", backends[i], "events/s", pingpong_fn, &p1);
		report("pingpong pipes=64", backends[i], "events/s", pingpong_fn, &p64);
		report("pingpong pipes=1000", backends[i], "events/s", pingpong_fn, &p1k);
		char idle_name[32];

		snprintf(idle_name, sizeof(idle_name), "idle watches=%d",
		         quick ? MIN(nidle, 1000) : nidle);
		report(idle_name, backends[i], "trips/s", idle_fn, NULL);
		report("churn add/event/del", backends[i], "rounds/s", churn_fn, NULL);
		report("toggle EV_WRITE", backends[i], "rounds/s", toggle_fn, NULL);
	}
	{
		double w1[MAX_RUNS], c1[MAX_RUNS], wn[MAX_RUNS], cn[MAX_RUNS];
		uint64_t ops = quick ? 300000 : 3000000;
		int n = quick ? 10000 : 100000;
		char name[32];

		for (int i = 0; i < runs; i++) {
			struct rate a = run_timers(0, ops), b = run_timers(n, ops);

			w1[i] = a.per_wall;
			c1[i] = a.per_cpu;
			wn[i] = b.per_wall;
			cn[i] = b.per_cpu;
		}
		print_rate("timers armed=1", "-", "ops/s", w1, c1, "; baseline");
		snprintf(name, sizeof(name), "timers armed=%d", n);
		print_rate(name, "-", "ops/s", wn, cn, "");
	}
	return 0;
}
