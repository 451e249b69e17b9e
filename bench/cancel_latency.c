/* cancel_latency: from POST /v1/runs/{id}/cancel to the child's end on its
 * SIGTERM (`exec sleep`: SIGTERM ends it at once), p50 and p99, against a real
 * lessor and the real daemon:
 *  - cancel events (docs/protocol.md), every slot busy (concurrency 1: the
 *    claim for no runs carries the cancel);
 *  - cancel events with free slots (concurrency 4, one run: the ordinary claim
 *    long poll carries it);
 *  - the baseline measured in the same run: the same server playing an older
 *    one (the "legacy" claims fault), so the cancel waits for the next lease
 *    renewal, with lease_refresh = 2s (the default 30s would take minutes;
 *    the wait is uniform over the period, so its median is about half of it).
 * Each cancel comes 200 ms + a random part of lease_refresh after the child
 * started.  The ratio is baseline median / median.  Figures only, no verdict.
 *   cancel_latency [-n SAMPLES] [-r LEASE_REFRESH_S] */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "benchutil.h"
#include "lessee_proc.h"
#include "lessor_proc.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"

static struct tu_lessor *L;
static char *dir;

static pid_t child_pid(const char *id)
{
	usec_t end = time_mono() + 15 * USEC_PER_SEC;

	do {
		size_t len = 0;
		char *log = tu_lessor_run_log(L, id, &len);
		const char *p = log ? strstr(log, "pid=") : NULL;
		pid_t pid = p && strchr(p, '\n') ? (pid_t)atoi(p + 4) : -1;

		free(log);
		if (pid > 0)
			return pid;
		tu_sleep(5 * USEC_PER_MSEC);
	} while (time_mono() < end);
	return -1;
}

/* One sample in ms, or < 0. */
static double sample(unsigned refresh_s)
{
	char *id = tu_lessor_enqueue(L, "{\"workflow\":\"sleeper\"}"), path[128];
	long status = 0;
	pid_t pid;
	usec_t t0, end;
	double ms = -1;

	if (!id)
		return -1;
	pid = child_pid(id);
	if (pid < 0)
		goto out;
	/* the next claim, with this run held, is parked by then; the random part
	 * spreads the cancels over the renewal period (the baseline's wait) */
	tu_sleep(200 * USEC_PER_MSEC + (usec_t)random() % (refresh_s * USEC_PER_SEC));
	snprintf(path, sizeof(path), "/v1/runs/%s/cancel", id);
	t0 = time_mono();
	if (tu_lessor_json(L, "POST", path, NULL, &status, NULL) < 0 || status != 200)
		goto out;
	end = t0 + 60 * USEC_PER_SEC;
	while (tu_pid_alive(pid) && time_mono() < end)
		tu_sleep(USEC_PER_MSEC);
	if (!tu_pid_alive(pid))
		ms = (double)(time_mono() - t0) / USEC_PER_MSEC;
	(void)tu_lessor_wait_status(L, id, "cancelled", 30 * USEC_PER_SEC);
out:
	free(id);
	return ms;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Nearest rank. */
static double pct(double *v, size_t n, double p)
{
	size_t k = (size_t)(p / 100 * (double)n + 0.999999);

	qsort(v, n, sizeof(*v), cmp);
	return v[k ? MIN(k, n) - 1 : 0];
}

static int measure(const char *what, unsigned concurrency, unsigned refresh_s, bool legacy, int n,
                   double *ret_p50)
{
	char conf[512];
	struct tu_lessee *d = NULL;
	double *v = calloc((size_t)n, sizeof(double));
	long status = 0;
	int got = 0;

	if (!v)
		return -ENOMEM;
	tu_lessor_json(L, "DELETE", "/v1/admin/faults", NULL, &status, NULL);
	if (legacy && (tu_lessor_json(L, "POST", "/v1/admin/faults",
	                              "{\"endpoint\":\"claims\",\"legacy\":true,\"count\":1000000}",
	                              &status, NULL) < 0 ||
	               status != 200)) {
		free(v);
		return -EIO;
	}
	snprintf(conf, sizeof(conf),
	         "[worker]\nconcurrency = %u\nlease_ttl = %us\nlease_refresh = %us\n"
	         "long_poll = 20s\nkill_grace = 5s\n[log]\nlevel = info\n"
	         "[workflow.sleeper]\ncommand = %s/sleeper.sh\n",
	         concurrency, MAX(4 * refresh_s, 6u), refresh_s, dir);
	if (tu_lessee_start(&(struct tu_lessee_opts){.lessor = L, .conf = conf}, &d) < 0) {
		free(v);
		return -EIO;
	}
	for (int i = 0; i < n; i++) {
		double ms = sample(refresh_s);

		if (ms >= 0)
			v[got++] = ms;
	}
	tu_lessee_stop(d);
	tu_lessee_free(d);
	if (got == 0) {
		free(v);
		return -EIO;
	}
	*ret_p50 = pct(v, (size_t)got, 50);
	printf("%-44s p50 %8.1f ms  p99 %8.1f ms  (n=%d)\n", what, *ret_p50,
	       pct(v, (size_t)got, 99), got);
	free(v);
	return 0;
}

int main(int argc, char **argv)
{
	static const char script[] = "#!/bin/sh\necho pid=$$\nexec sleep 1000\n";
	char path[512], *const args[] = {"--enable-faults", "--synchronous", "normal", NULL};
	static const char usage[] = "usage: cancel_latency [-n SAMPLES] [-r LEASE_REFRESH_S]\n";
	int n = 20, c;
	unsigned refresh = 2;
	double busy = 0, free_slots = 0, base = 0;
	char label[96];

	if (tu_std_answer(argc, argv, "cancel_latency", usage))
		return 0;
	while ((c = getopt(argc, argv, "n:r:")) != -1)
		if (c == 'n')
			n = atoi(optarg);
		else if (c == 'r')
			refresh = (unsigned)atoi(optarg);
		else {
			fputs(usage, stderr);
			return 2;
		}
	if (n < 1 || refresh < 1 || refresh > 1800)
		return 2;
	srandom((unsigned)time_mono());
	dir = tu_tmpdir("cancel-bench");
	snprintf(path, sizeof(path), "%s/sleeper.sh", dir);
	if (!dir || write_file_atomic(path, script, strlen(script), 0755) < 0 ||
	    tu_lessor_start(&(struct tu_lessor_opts){.token = "bench-token", .args = args}, &L) <
	        0) {
		fprintf(stderr, "cancel_latency: setup failed\n");
		return 1;
	}
	printf("cancel -> child ended on SIGTERM, lease_refresh = %us, %d samples each\n", refresh,
	       n);
	snprintf(label, sizeof(label), "cancel events, every slot busy");
	if (measure(label, 1, refresh, false, n, &busy) < 0)
		return 1;
	snprintf(label, sizeof(label), "cancel events, free slots");
	if (measure(label, 4, refresh, false, n, &free_slots) < 0)
		return 1;
	snprintf(label, sizeof(label), "baseline: older server (renewal, %us)", refresh);
	if (measure(label, 1, refresh, true, n, &base) < 0)
		return 1;
	printf("ratio of medians (baseline / cancel events): busy %.1fx, free slots %.1fx\n",
	       base / MAX(busy, 0.001), base / MAX(free_slots, 0.001));
	tu_lessor_stop(L);
	tu_lessor_free(L);
	rm_rf(dir);
	free(dir);
	return 0;
}
