/* A small metrics registry rendered in the Prometheus text format (0.0.4).
 * Families have fixed label names; children are created on first use.
 * Label values are passed as varargs, exactly as many as the family has. */
#pragma once

#include <stddef.h>

#include "util/buf.h"

typedef struct metrics metrics_t;
typedef struct metric metric_t;

metrics_t *metrics_new(void);
metrics_t *metrics_free(metrics_t *m);

/* labels: comma-separated names ("workflow,outcome") or NULL. NULL on ENOMEM. */
metric_t *metrics_counter(metrics_t *m, const char *name, const char *help, const char *labels);
metric_t *metrics_gauge(metrics_t *m, const char *name, const char *help, const char *labels);
/* buckets: upper bounds, ascending, without +Inf. */
metric_t *metrics_histogram(metrics_t *m, const char *name, const char *help,
			    const char *labels, const double *buckets, size_t n_buckets);

void metric_add(metric_t *f, double v, ...);     /* counters and gauges */
void metric_set(metric_t *f, double v, ...);     /* gauges */
void metric_observe(metric_t *f, double v, ...); /* histograms */
/* Create the child for these label values if it is missing, leaving it at zero:
 * a series that exists from the start shows its first increase to rate(). */
void metric_touch(metric_t *f, ...);
/* Current value of a counter/gauge child (0 if absent), histogram: count. */
double metric_get(metric_t *f, ...);
/* Drop every child of a family (gauges rebuilt from scratch). */
void metric_reset(metric_t *f);

int metrics_render(const metrics_t *m, struct buf *out);
