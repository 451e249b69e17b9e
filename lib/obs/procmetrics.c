/* process_* as the Prometheus Go and Python clients define them:
 *   process_cpu_seconds_total      counter  user + system CPU time
 *   process_resident_memory_bytes  gauge    RSS
 *   process_virtual_memory_bytes   gauge    virtual memory size
 *   process_open_fds               gauge    entries of /proc/self/fd
 *   process_max_fds                gauge    RLIMIT_NOFILE soft limit
 *   process_start_time_seconds     gauge    Unix time the process started */
#include "obs/procmetrics.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "util/fileio.h"
#include "util/macro.h"

struct procmetrics {
	metric_t *cpu, *rss, *vsize, *open_fds, *max_fds, *start;
};

struct proc_stat {
	unsigned long long utime, stime, starttime; /* clock ticks */
	unsigned long long vsize;                   /* bytes */
	long long rss;                              /* pages */
};

/* /proc/self/stat: the fields after "(comm)", which may itself hold blanks and ')'. */
static int read_stat(struct proc_stat *ret)
{
	_cleanup_free_ char *text = NULL;
	size_t len = 0;
	const char *p;
	int r = read_file_capped("/proc/self/stat", 4096, &text, &len);

	if (r < 0)
		return r;
	p = strrchr(text, ')');
	if (!p)
		return -EINVAL;
	/* state(3) ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt
	 * utime(14) stime cutime cstime priority nice num_threads itrealvalue
	 * starttime(22) vsize rss(24) */
	if (sscanf(p + 1,
	           " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d "
	           "%*d %llu %llu %lld",
	           &ret->utime, &ret->stime, &ret->starttime, &ret->vsize, &ret->rss) != 5)
		return -EINVAL;
	return 0;
}

static int boot_time(unsigned long long *ret)
{
	_cleanup_free_ char *text = NULL;
	size_t len = 0;
	const char *p;
	int r = read_file_capped("/proc/stat", 1 << 20, &text, &len);

	if (r < 0)
		return r;
	p = strstr(text, "\nbtime ");
	return p && sscanf(p + 7, "%llu", ret) == 1 ? 0 : -EINVAL;
}

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int n = 0;

	if (!d)
		return -errno;
	while ((de = readdir(d)))
		if (de->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1; /* not the one reading the directory */
}

int procmetrics_new(metrics_t *m, procmetrics_t **ret)
{
	procmetrics_t *p = calloc(1, sizeof(*p));
	unsigned long long btime;
	struct proc_stat st;
	long hz = sysconf(_SC_CLK_TCK);

	if (!p)
		return -ENOMEM;
	p->cpu = metrics_counter(m, "process_cpu_seconds_total",
	                         "Total user and system CPU time spent in seconds.", NULL);
	p->rss = metrics_gauge(m, "process_resident_memory_bytes", "Resident memory size in bytes.",
	                       NULL);
	p->vsize =
	    metrics_gauge(m, "process_virtual_memory_bytes", "Virtual memory size in bytes.", NULL);
	p->open_fds =
	    metrics_gauge(m, "process_open_fds", "Number of open file descriptors.", NULL);
	p->max_fds =
	    metrics_gauge(m, "process_max_fds", "Maximum number of open file descriptors.", NULL);
	p->start = metrics_gauge(m, "process_start_time_seconds",
	                         "Start time of the process since unix epoch in seconds.", NULL);
	if (!p->cpu || !p->rss || !p->vsize || !p->open_fds || !p->max_fds || !p->start) {
		free(p);
		return -ENOMEM;
	}
	if (hz > 0 && read_stat(&st) == 0 && boot_time(&btime) == 0)
		metric_set(p->start, (double)btime + (double)st.starttime / (double)hz);
	procmetrics_update(p);
	*ret = p;
	return 0;
}

void procmetrics_update(procmetrics_t *p)
{
	long hz = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
	struct proc_stat st;
	struct rlimit rl;
	int n;

	if (!p)
		return;
	if (hz > 0 && page > 0 && read_stat(&st) == 0) {
		metric_set(p->cpu, (double)(st.utime + st.stime) / (double)hz);
		metric_set(p->rss, (double)st.rss * (double)page);
		metric_set(p->vsize, (double)st.vsize);
	}
	if ((n = count_fds()) >= 0)
		metric_set(p->open_fds, n);
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
		metric_set(p->max_fds, (double)rl.rlim_cur);
}

procmetrics_t *procmetrics_free(procmetrics_t *p)
{
	free(p); /* the families belong to the registry */
	return NULL;
}
