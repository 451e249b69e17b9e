/* The standard process_* metrics of Prometheus client libraries (CPU seconds,
 * resident and virtual memory, open and max fds, start time), read from
 * /proc/self at each scrape. */
#pragma once

#include "obs/metrics.h"

typedef struct procmetrics procmetrics_t;

/* Registers the families in m.  -ENOMEM. */
int procmetrics_new(metrics_t *m, procmetrics_t **ret);
/* Refresh the values (before metrics_render); what cannot be read keeps its last value. */
void procmetrics_update(procmetrics_t *p);
procmetrics_t *procmetrics_free(procmetrics_t *p);
