/* Shared by the benchmarks under bench/: medians and the spawn floors every
 * figure is printed next to. */
#pragma once

#include <stddef.h>

#include "ev/ev.h"

/* Sorts v in place. */
double tu_median(double *v, size_t n);
/* argv[0] started and reaped `runs` times, `width` at a time, with plain
 * posix_spawn + waitpid (the machine's floor): 0 or -errno. */
int tu_spawn_floor(char *const *argv, int runs, int width);
/* The same through lib/exec on the loop e: 0, -EIO if a run failed, or -errno. */
int tu_exec_spawn(ev_t *e, char *const *argv, int runs, int width);
/* runs/s of one of the above, measured on the monotonic clock; e NULL = floor. */
double tu_spawn_rate(ev_t *e, char *const *argv, int runs, int width);

/* --tsv FILE: the figures a bench prints, one row per figure, for
 * scripts/bench_report.sh.  Columns: bench, system, slots, metric, median,
 * floor, ratio (median / floor; "-" in both when the figure has no floor).
 * tu_tsv_open writes the header; rows go nowhere until it is called. */
int tu_tsv_open(const char *path);
void tu_tsv_row(const char *bench, const char *system, int slots, const char *metric, double median,
                double floor);
int tu_tsv_close(void);
