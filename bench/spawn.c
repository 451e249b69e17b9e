/* spawn: how many /bin/true runs per second lib/exec starts and reaps on the loop,
 * next to a plain posix_spawn()+waitpid() loop measured in the same run (the
 * machine's floor), at 1, 2 and 64 in flight, on both loop backends, and with
 * both ways lib/exec can create the child (docs/exec.md says why vfork-like is
 * the default).  Medians of several repetitions; figures only, no verdict. */
#include <errno.h>
#include <getopt.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "benchutil.h"
#include "ev/ev.h"
#include "exec/exec-int.h"
#include "exec/exec.h"
#include "util/macro.h"
#include "util/time.h"

#define MAX_REPS 101

static const char *prog = "/bin/true";
static char *prog_argv[] = {"/bin/true", NULL};

struct config {
	const char *name;
	const char *backend; /* NULL: the posix_spawn floor */
	enum exec_clone_mode mode;
	bool legacy; /* the child as it was before issue 15 (exec_set_legacy_child) */
};

static const struct config configs[] = {
    {"posix_spawn", NULL, EXEC_CLONE_VFORK, false},
    {"io_uring", "io_uring", EXEC_CLONE_VFORK, false},
    {"epoll", "epoll", EXEC_CLONE_VFORK, false},
    {"io_uring/old", "io_uring", EXEC_CLONE_VFORK, true},
    {"epoll/old", "epoll", EXEC_CLONE_VFORK, true},
    {"io_uring/fork", "io_uring", EXEC_CLONE_FORK, false},
    {"epoll/fork", "epoll", EXEC_CLONE_FORK, false},
};

static const int in_flight_levels[] = {1, 2, 64};

/* runs/s of one measurement, or a negative errno. */
static double measure(const struct config *c, int runs, int width)
{
	ev_t *e = NULL;
	double v;
	int r;

	if (c->backend) {
		r = ev_new(&e, c->backend);
		if (r < 0)
			return r;
		exec_set_clone_mode(c->mode);
		exec_set_legacy_child(c->legacy);
	}
	v = tu_spawn_rate(e, prog_argv, runs, width);
	ev_free(e);
	exec_set_clone_mode(EXEC_CLONE_VFORK);
	exec_set_legacy_child(false);
	return v;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: spawn [--runs N] [--reps R]\n"
	           "  Starts and reaps /bin/true N times (default 500) per measurement, R times\n"
	           "  (default 5), and prints the median runs/s per configuration.\n");
}

static int parse_args(int argc, char **argv, int *runs, int *reps)
{
	static const struct option opts[] = {
	    {"runs", required_argument, NULL, 'n'},
	    {"reps", required_argument, NULL, 'r'},
	    {"help", no_argument, NULL, 'h'},
	    {"version", no_argument, NULL, 'V'},
	    {0},
	};
	int c;

	while ((c = getopt_long(argc, argv, "n:r:hV", opts, NULL)) >= 0) {
		switch (c) {
		case 'n':
			*runs = atoi(optarg);
			break;
		case 'r':
			*reps = atoi(optarg);
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("spawn (lessee bench) %s\n", LESSEE_VERSION);
			return 0;
		default:
			usage(stderr);
			return -EINVAL;
		}
	}
	if (*runs < 1 || *reps < 1 || *reps > MAX_REPS || optind != argc) {
		usage(stderr);
		return -EINVAL;
	}
	return 1;
}

int main(int argc, char **argv)
{
	enum { N_CONF = ELEMENTSOF(configs), N_WIDTH = ELEMENTSOF(in_flight_levels) };
	static double samples[N_WIDTH][N_CONF][MAX_REPS];
	int runs = 500, reps = 5, r = parse_args(argc, argv, &runs, &reps);

	if (r <= 0)
		return r < 0 ? 2 : 0;
	/* Repetitions outermost, so drift spreads over every configuration alike. */
	for (int rep = 0; rep < reps; rep++)
		for (int w = 0; w < N_WIDTH; w++)
			for (int c = 0; c < N_CONF; c++) {
				double v = measure(&configs[c], runs, in_flight_levels[w]);

				if (v < 0) {
					fprintf(stderr, "spawn: %s at %d in flight: %s\n",
					        configs[c].name, in_flight_levels[w],
					        strerror((int)-v));
					return 1;
				}
				samples[w][c][rep] = v;
			}
	printf("%s started and reaped, %d runs x %d repetitions, median runs/s "
	       "(ratio to the posix_spawn+waitpid floor)\n",
	       prog, runs, reps);
	printf("%-10s", "in flight");
	for (int c = 0; c < N_CONF; c++)
		printf(" %21s", configs[c].name);
	printf("\n");
	for (int w = 0; w < N_WIDTH; w++) {
		double floor_v = tu_median(samples[w][0], reps);

		printf("%-10d %21.0f", in_flight_levels[w], floor_v);
		for (int c = 1; c < N_CONF; c++) {
			double v = tu_median(samples[w][c], reps);

			printf(" %13.0f (%.2fx)", v, v / floor_v);
		}
		printf("\n");
	}
	return 0;
}
