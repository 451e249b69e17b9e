#include "benchutil.h"

#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "exec/exec.h"
#include "util/time.h"

static char *bench_envp[] = {"PATH=/usr/bin:/bin", NULL};

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

double tu_median(double *v, size_t n)
{
	if (n == 0)
		return 0;
	qsort(v, n, sizeof(*v), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int tu_spawn_floor(char *const *argv, int runs, int width)
{
	int started = 0, reaped = 0, status;

	while (reaped < runs) {
		while (started - reaped < width && started < runs) {
			pid_t pid;
			int r = posix_spawn(&pid, argv[0], NULL, NULL, argv, bench_envp);

			if (r != 0)
				return -r;
			started++;
		}
		if (waitpid(-1, &status, 0) < 0)
			return -errno;
		reaped++;
	}
	return 0;
}

struct exec_bench {
	int in_flight, done, failed;
};

static void bench_exit(exec_proc_t *p, const struct exec_result *res, void *userdata)
{
	struct exec_bench *b = userdata;

	if (!res->exited || res->exit_code != 0)
		b->failed++;
	exec_free(p);
	b->in_flight--;
	b->done++;
}

int tu_exec_spawn(ev_t *e, char *const *argv, int runs, int width)
{
	struct exec_spec spec = {.path = argv[0], .argv = argv, .envp = bench_envp, .stdin_fd = -1};
	struct exec_bench b = {0};
	int started = 0, r;

	while (b.done < runs) {
		while (b.in_flight < width && started < runs) {
			exec_proc_t *p;

			r = exec_spawn(e, &spec, NULL, bench_exit, &b, &p, NULL);
			if (r < 0)
				return r;
			started++;
			b.in_flight++;
		}
		r = ev_run_once(e, USEC_INFINITY);
		if (r < 0)
			return r;
	}
	return b.failed ? -EIO : 0;
}

double tu_spawn_rate(ev_t *e, char *const *argv, int runs, int width)
{
	usec_t t0 = time_mono();
	int r = e ? tu_exec_spawn(e, argv, runs, width) : tu_spawn_floor(argv, runs, width);

	t0 = time_mono() - t0;
	if (r < 0)
		return r;
	return (double)runs * (double)USEC_PER_SEC / (double)(t0 ? t0 : 1);
}

static FILE *tsv;

int tu_tsv_open(const char *path)
{
	tsv = fopen(path, "we");
	if (!tsv)
		return -errno;
	fputs("bench\tsystem\tslots\tmetric\tmedian\tfloor\tratio\n", tsv);
	return 0;
}

void tu_tsv_row(const char *bench, const char *system, int slots, const char *metric, double median,
                double floor)
{
	if (!tsv)
		return;
	fprintf(tsv, "%s\t%s\t%d\t%s\t%.6g", bench, system, slots, metric, median);
	if (floor > 0)
		fprintf(tsv, "\t%.6g\t%.4f\n", floor, median / floor);
	else
		fputs("\t-\t-\n", tsv);
}

int tu_tsv_close(void)
{
	int r = 0;

	if (tsv && (ferror(tsv) | fclose(tsv)))
		r = -EIO;
	tsv = NULL;
	return r;
}
