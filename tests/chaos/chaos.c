/* chaos: lessor, three lessee daemons and a few thousand runs under combined
 * faults; afterwards, did every run happen exactly once at a time, and is
 * everything the API holds byte-exact?  `make chaos` (full size) and
 * `make chaos-short` (CI); not part of `make check`.
 *
 * Parameters (environment, defaults in brackets):
 *   CHAOS_RUNS [3000]      runs enqueued, spread over the first 3/4 of the window
 *   CHAOS_WINDOW [600]     seconds of faults
 *   CHAOS_CONCURRENCY [8]  runs per daemon
 *   CHAOS_PREFETCH [0]     runs each daemon claims ahead of a free slot
 *                          (worker.prefetch; they wait there at most 1 s)
 *   CHAOS_LINE_US [10000]  pause unit between two output lines of a job (20..200
 *                          lines, 1..6 units each: 0.2 s to 12 s, 4 s on average)
 *   CHAOS_KILL_GRACE [2s]  lessee's kill_grace (lease_ttl is 6s, its margin 1s)
 *   CHAOS_SETTLE [300]     seconds allowed after the window for every run to end
 *   CHAOS_SEED [1]         the fault schedule's seed
 *   CHAOS_KEEP             keep the directories even when everything passed
 *
 * The job (tests/aux/ledger.c) appends START/BEAT/TERM/END lines with its pid
 * and CLOCK_MONOTONIC time to a shared ledger and flocks a per-run lock file;
 * its log and result are pure functions of the run id (tests/aux/ledger.h).
 *
 * Faults during the window, one every 2-6 s, in a seeded random order: 5xx
 * on every worker endpoint (a burst, an outage, or sprinkled: every N-th
 * request), stalls longer than a lease on lease/complete/log (a few, or all
 * renewals / all results for a while), kill -9 of a lessee (restarted on its
 * spool), kill -9 of lessor (restarted on its database), a drain (SIGTERM,
 * restart) and a hard stop (SIGTERM twice or SIGQUIT, restart).  Then every run must end, every
 * daemon drains, lessor stops, and the checks below are printed.  Safety checks (their failure
 * fails the program): runs lost, overlapping executions, results and logs not
 * byte-exact, leftover job processes, non-empty spools, nonzero exit codes.
 * Re-executions are counted, not failed. */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../aux/ledger.h"
#include "lessee_proc.h"
#include "lessor_proc.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"

#define NDAEMONS 3
#define LEASE_TTL_S 6
#define MAX_ATTEMPTS 3

struct chaos_cfg {
	unsigned runs, window_s, concurrency, prefetch, line_us, settle_s, seed;
	const char *kill_grace;
	bool keep;
};

struct chaos {
	struct chaos_cfg cfg;
	struct tu_lessor *lessor;
	struct tu_lessee *d[NDAEMONS];
	bool broken[NDAEMONS]; /* could not be restarted: left alone */
	char *dir, *ledger, *locks;
	char **ids;
	unsigned enqueued;
	uint64_t rng;
	/* events done */
	unsigned n_5xx, n_stall, n_kill_lessee, n_kill_lessor, n_drain, n_hard, n_crash;
	/* exit codes checked / not 0 */
	unsigned exits, exit_nonzero;
};

struct chaos_result {
	unsigned lost, failed, succeeded, overlaps, overlaps_same_daemon, reexecuted, executions,
	    result_mismatch, log_mismatch, markers, leftover, spool, term_trapped;
};

static unsigned env_uint(const char *name, unsigned def)
{
	const char *v = getenv(name);

	return v && *v ? (unsigned)strtoul(v, NULL, 10) : def;
}

static uint64_t rnd(struct chaos *c)
{
	c->rng ^= c->rng << 13;
	c->rng ^= c->rng >> 7;
	c->rng ^= c->rng << 17;
	return c->rng;
}

static unsigned rnd_below(struct chaos *c, unsigned n)
{
	return (unsigned)(rnd(c) % n);
}

static double elapsed_s(usec_t t0)
{
	return (double)(time_mono() - t0) / USEC_PER_SEC;
}

/* ---- exit codes ---- */

static void record_exit(struct chaos *c, const char *what, int i, int status)
{
	c->exits++;
	if (status == 0)
		return;
	c->exit_nonzero++;
	printf("chaos: %s %d exited %d\n", what, i, status);
}

/* ---- starting and restarting ---- */

static int start_lessor(struct chaos *c)
{
	static char *const args[] = {"--enable-faults",
	                             "--max-lease-expiries",
	                             "10",
	                             "--retry-base",
	                             "1s",
	                             "--retry-max",
	                             "4s",
	                             NULL};

	return tu_lessor_start(
	    &(struct tu_lessor_opts){.token = "chaos-token", .args = args, .sync_normal = true},
	    &c->lessor);
}

static int start_lessee(struct chaos *c, int i)
{
	_cleanup_free_ char *conf = NULL, *job = tu_aux_bin("ledger");

	if (!job || asprintf(&conf,
	                     "[worker]\nid = chaos-%d\nconcurrency = %u\nprefetch = %u\n"
	                     "lease_ttl = %ds\nkill_grace = %s\n"
	                     "[log]\nlevel = info\n"
	                     "[workflow.chaos]\ncommand = %s %s %s %u\n",
	                     i, c->cfg.concurrency, c->cfg.prefetch, LEASE_TTL_S, c->cfg.kill_grace,
	                     job, c->ledger, c->locks, c->cfg.line_us) < 0)
		return -ENOMEM;
	return tu_lessee_start(&(struct tu_lessee_opts){.lessor = c->lessor, .conf = conf},
	                       &c->d[i]);
}

static void restart_lessee(struct chaos *c, int i)
{
	for (int try = 0; try < 3 && !c->broken[i]; try++) {
		int r = tu_lessee_restart(c->d[i]);

		if (r >= 0)
			return;
		/* -ECHILD: it died before READY=1 and the helper reaped it, but still
		 * holds its pid (then -EBUSY): give up on this daemon */
		c->broken[i] = r == -ECHILD || r == -EBUSY;
		printf("chaos: lessee %d did not restart: %s\n", i, strerror(-r));
		c->exits++;
		c->exit_nonzero++;
		if (r == -ETIMEDOUT) { /* started, never READY: still our child */
			tu_lessee_signal(c->d[i], SIGKILL);
			tu_lessee_wait(c->d[i], 10 * USEC_PER_SEC);
		}
		tu_sleep(USEC_PER_SEC);
	}
}

static void restart_lessor(struct chaos *c)
{
	for (int try = 0; try < 5; try++) {
		int r = tu_lessor_restart(c->lessor);

		if (r >= 0)
			return;
		printf("chaos: lessor did not restart: %s\n", strerror(-r));
		tu_sleep(USEC_PER_SEC);
	}
}

/* A daemon that exited on its own (a crash) is reported and restarted. */
static void check_crashed(struct chaos *c)
{
	for (int i = 0; i < NDAEMONS; i++) {
		int st = c->broken[i] ? -ETIMEDOUT : tu_lessee_wait(c->d[i], 0);

		if (st == -ETIMEDOUT)
			continue;
		if (st < 0) { /* not our child any more (reaped by a failed restart) */
			printf("chaos: lessee %d is lost: %s\n", i, strerror(-st));
			c->broken[i] = true;
			c->exits++;
			c->exit_nonzero++;
			continue;
		}
		c->n_crash++;
		record_exit(c, "lessee (unasked)", i, st == 0 ? -1 : st);
		restart_lessee(c, i);
	}
}

/* ---- faults ---- */

static void arm(struct chaos *c, const char *body)
{
	long status = 0;

	if (tu_lessor_json(c->lessor, "POST", "/v1/admin/faults", body, &status, NULL) < 0 ||
	    status != 200)
		printf("chaos: arming %s: HTTP %ld\n", body, status);
}

static const char *const worker_eps[] = {"claims", "lease", "log", "complete", "release"};

/* 5xx on every worker endpoint: a burst of a few each, or an outage. */
static void fault_5xx_n(struct chaos *c, unsigned min, unsigned spread)
{
	static const unsigned codes[] = {500, 502, 503};

	for (size_t i = 0; i < ELEMENTSOF(worker_eps); i++) {
		unsigned code = codes[rnd_below(c, ELEMENTSOF(codes))];
		char body[160];

		snprintf(body, sizeof(body),
		         "{\"endpoint\":\"%s\",\"status\":%u,\"count\":%u,\"retry_after_s\":%u}",
		         worker_eps[i], code, min + rnd_below(c, spread), code == 503 ? 1 : 0);
		arm(c, body);
	}
	c->n_5xx++;
}

static void fault_5xx(struct chaos *c)
{
	fault_5xx_n(c, 2, 7);
}

static void fault_outage(struct chaos *c)
{
	fault_5xx_n(c, 30, 100);
}

/* 503 on every N-th request to every endpoint, for a while. */
static void fault_sprinkle(struct chaos *c)
{
	char body[160];

	snprintf(body, sizeof(body),
	         "{\"endpoint\":\"all\",\"status\":503,\"retry_after_s\":1,\"count\":%u,"
	         "\"every\":%u}",
	         10 + rnd_below(c, 30), 2 + rnd_below(c, 5));
	arm(c, body);
	c->n_5xx++;
}

/* Requests held longer than a lease, then handled normally. */
static void fault_stall_n(struct chaos *c, const char *ep, unsigned count)
{
	char body[160];

	snprintf(body, sizeof(body), "{\"endpoint\":\"%s\",\"delay_ms\":%u,\"count\":%u}", ep,
	         (LEASE_TTL_S + 2) * 1000 + rnd_below(c, 3000), count);
	arm(c, body);
	c->n_stall++;
}

/* A few requests to lease, complete or log. */
static void fault_stall(struct chaos *c)
{
	static const char *const eps[] = {"lease", "complete", "log"};

	fault_stall_n(c, eps[rnd_below(c, ELEMENTSOF(eps))], 1 + rnd_below(c, 3));
}

/* Every renewal for a while: leases are lost while their children run. */
static void fault_stall_leases(struct chaos *c)
{
	fault_stall_n(c, "lease", 20 + rnd_below(c, 60));
}

/* Every completion and log shipment for a while: finished runs wait. */
static void fault_stall_results(struct chaos *c)
{
	fault_stall_n(c, "complete", 10 + rnd_below(c, 30));
	fault_stall_n(c, "log", 10 + rnd_below(c, 30));
}

static void fault_kill_lessee(struct chaos *c)
{
	int i = (int)rnd_below(c, NDAEMONS);

	tu_lessee_signal(c->d[i], SIGKILL);
	tu_lessee_wait(c->d[i], 10 * USEC_PER_SEC);
	tu_sleep((300 + rnd_below(c, 1200)) * USEC_PER_MSEC);
	restart_lessee(c, i);
	c->n_kill_lessee++;
}

static void fault_kill_lessor(struct chaos *c)
{
	tu_lessor_kill(c->lessor);
	tu_sleep((200 + rnd_below(c, 1800)) * USEC_PER_MSEC);
	restart_lessor(c);
	c->n_kill_lessor++;
}

static void stop_and_record(struct chaos *c, int i, const char *what, usec_t timeout)
{
	int st = tu_lessee_wait(c->d[i], timeout);

	if (st == -ETIMEDOUT) {
		printf("chaos: lessee %d: %s did not end within %llus\n", i, what,
		       (unsigned long long)(timeout / USEC_PER_SEC));
		tu_lessee_signal(c->d[i], SIGKILL);
		tu_lessee_wait(c->d[i], 10 * USEC_PER_SEC);
	}
	record_exit(c, what, i, st);
}

static void fault_drain(struct chaos *c)
{
	int i = (int)rnd_below(c, NDAEMONS);

	tu_lessee_signal(c->d[i], SIGTERM);
	stop_and_record(c, i, "drain", 120 * USEC_PER_SEC);
	restart_lessee(c, i);
	c->n_drain++;
}

static void fault_hard_stop_n(struct chaos *c, bool quit)
{
	int i = (int)rnd_below(c, NDAEMONS);

	if (!quit) {
		tu_lessee_signal(c->d[i], SIGTERM);
		tu_sleep((100 + rnd_below(c, 900)) * USEC_PER_MSEC);
		tu_lessee_signal(c->d[i], SIGTERM);
	} else
		tu_lessee_signal(c->d[i], SIGQUIT);
	stop_and_record(c, i, quit ? "hard stop (SIGQUIT)" : "hard stop (2 x SIGTERM)",
	                60 * USEC_PER_SEC);
	restart_lessee(c, i);
	c->n_hard++;
}

static void fault_hard_stop(struct chaos *c)
{
	fault_hard_stop_n(c, false);
}

static void fault_quit(struct chaos *c)
{
	fault_hard_stop_n(c, true);
}

/* The faults are dealt from a shuffled deck, so that every kind comes up
 * once in each round of ELEMENTSOF(deck) faults, even in a short window. */
static void fault_any(struct chaos *c, usec_t t0)
{
	struct fault {
		const char *name;
		void (*fn)(struct chaos *);
	};
	static struct fault deck[] = {
	    {"5xx burst", fault_5xx},
	    {"5xx outage", fault_outage},
	    {"5xx sprinkle", fault_sprinkle},
	    {"stall", fault_stall},
	    {"stall leases", fault_stall_leases},
	    {"stall results", fault_stall_results},
	    {"kill -9 lessee", fault_kill_lessee},
	    {"kill -9 lessor", fault_kill_lessor},
	    {"drain", fault_drain},
	    {"hard stop", fault_hard_stop},
	    {"quit", fault_quit},
	    {"5xx burst", fault_5xx},
	    {"stall leases", fault_stall_leases},
	};
	static size_t dealt = ELEMENTSOF(deck);

	if (dealt == ELEMENTSOF(deck)) {
		for (size_t i = ELEMENTSOF(deck) - 1; i > 0; i--) {
			size_t j = rnd_below(c, (unsigned)i + 1);
			struct fault t = deck[i];

			deck[i] = deck[j];
			deck[j] = t;
		}
		dealt = 0;
	}
	printf("chaos: %6.1fs %s\n", elapsed_s(t0), deck[dealt].name);
	deck[dealt++].fn(c);
}

/* ---- runs ---- */

static void enqueue_upto(struct chaos *c, unsigned target)
{
	while (c->enqueued < target) {
		char body[200];
		char *id;

		snprintf(body, sizeof(body),
		         "{\"workflow\":\"chaos\",\"input\":{\"n\":%u},\"max_attempts\":%d,"
		         "\"idempotency_key\":\"chaos-%u\"}",
		         c->enqueued, MAX_ATTEMPTS, c->enqueued);
		id = tu_lessor_enqueue(c->lessor, body);
		if (!id)
			return; /* lessor down for a moment: later, same key */
		c->ids[c->enqueued++] = id;
	}
}

static int stat_count(const cJSON *s, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, name);

	return cJSON_IsNumber(v) ? v->valueint : -1;
}

/* Until every run is terminal: 0, or -ETIMEDOUT. */
static int wait_all_terminal(struct chaos *c, usec_t timeout)
{
	usec_t end = time_mono() + timeout;

	while (time_mono() < end) {
		cJSON *s = NULL;
		long status = 0;
		bool done = false;

		enqueue_upto(c, c->cfg.runs);
		check_crashed(c);
		if (c->enqueued == c->cfg.runs &&
		    tu_lessor_json(c->lessor, "GET", "/v1/stats", NULL, &status, &s) >= 0 &&
		    status == 200)
			done = stat_count(s, "pending") == 0 && stat_count(s, "running") == 0;
		cJSON_Delete(s);
		if (done)
			return 0;
		tu_sleep(500 * USEC_PER_MSEC);
	}
	return -ETIMEDOUT;
}

/* ---- the ledger ---- */

struct lrec {
	char kind; /* S(TART) B(EAT) T(ERM) E(ND) O(VERLAP) */
	char *id, *worker;
	int pid;
	long long t;
};

static int lrec_cmp(const void *a, const void *b)
{
	const struct lrec *x = a, *y = b;
	int r = strcmp(x->id, y->id);

	if (r != 0)
		return r;
	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	return x->t < y->t ? -1 : x->t > y->t;
}

struct lexec {
	int pid;
	const char *worker;
	long long start, last; /* last: its last line; a lower bound of its end */
	bool overlap_flag;
};

static int lexec_cmp(const void *a, const void *b)
{
	const struct lexec *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

/* One run id's executions (recs[0..n), sorted by pid then time) into ex[],
 * sorted by start: did two of them run at once?  The flock says so directly
 * (OVERLAP); the intervals [START, last line] say so when one started before
 * another's last line.  Returns the index of the first execution that began
 * while another lived (*ret_other: that one, the earlier with the latest
 * line), or -1. */
static ssize_t id_overlaps(const struct lrec *recs, size_t n, struct lexec *ex, size_t *ret_nex,
                           size_t *ret_other)
{
	size_t nex = 0, holder = 0;
	long long horizon = 0;

	for (size_t i = 0; i < n; i++) {
		if (i == 0 || recs[i].pid != recs[i - 1].pid)
			ex[nex++] = (struct lexec){
			    .pid = recs[i].pid, .worker = recs[i].worker, .start = recs[i].t};
		struct lexec *e = &ex[nex - 1];

		e->last = recs[i].t > e->last ? recs[i].t : e->last;
		e->overlap_flag |= recs[i].kind == 'O';
	}
	qsort(ex, nex, sizeof(*ex), lexec_cmp);
	*ret_nex = nex;
	for (size_t i = 0; i < nex; i++) {
		if (nex > 1 && ((i > 0 && ex[i].start < horizon) || ex[i].overlap_flag)) {
			*ret_other = i > 0 ? holder : 1; /* 0: its holder wrote START late */
			return (ssize_t)i;
		}
		if (ex[i].last > horizon) {
			horizon = ex[i].last;
			holder = i;
		}
	}
	return -1;
}

static bool pid_is_job(const struct chaos *c, int pid)
{
	char path[64], *cmd = NULL;
	size_t len = 0;
	bool job = false;

	if (!tu_pid_alive(pid))
		return false;
	snprintf(path, sizeof(path), "/proc/%d/cmdline", pid);
	if (read_file_capped(path, 1 << 16, &cmd, &len) >= 0)
		job = memmem(cmd, len, c->ledger, strlen(c->ledger)) != NULL;
	free(cmd);
	return job;
}

static int check_ledger(struct chaos *c, struct chaos_result *res)
{
	_cleanup_free_ char *text = NULL;
	_cleanup_free_ struct lrec *recs = NULL;
	_cleanup_free_ struct lexec *ex = NULL;
	size_t len = 0, n = 0, cap = 0;
	char *save = NULL;

	if (read_file_capped(c->ledger, 1u << 30, &text, &len) < 0)
		return -EIO;
	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char kind[16], *id = NULL, *worker = NULL;
		int pid;
		long long t;

		if (sscanf(line, "%15s %ms %*s %d %lld %ms", kind, &id, &pid, &t, &worker) != 5) {
			printf("chaos: bad ledger line: %s\n", line);
			free(id);
			free(worker);
			continue;
		}
		if (n == cap) {
			cap = cap ? 2 * cap : 4096;
			struct lrec *nr = realloc(recs, cap * sizeof(*recs));

			if (!nr)
				return -ENOMEM;
			recs = nr;
		}
		recs[n++] =
		    (struct lrec){.kind = kind[0], .id = id, .worker = worker, .pid = pid, .t = t};
	}
	qsort(recs, n, sizeof(*recs), lrec_cmp);
	ex = calloc(n ? n : 1, sizeof(*ex));
	if (!ex)
		return -ENOMEM;
	for (size_t i = 0, j; i < n; i = j) {
		size_t nex = 0, other = 0;
		ssize_t o;

		for (j = i; j < n && streq(recs[j].id, recs[i].id); j++)
			res->term_trapped += recs[j].kind == 'T';
		o = id_overlaps(recs + i, j - i, ex, &nex, &other);
		if (o >= 0) {
			bool same = streq(ex[o].worker, ex[other].worker);

			res->overlaps++;
			res->overlaps_same_daemon += same;
			if (res->overlaps <= 5)
				printf("chaos: overlap: run %s, %zu executions: pid %d (%s) "
				       "started while "
				       "pid %d (%s) lived%s\n",
				       recs[i].id, nex, ex[o].pid, ex[o].worker, ex[other].pid,
				       ex[other].worker, ex[o].overlap_flag ? " (flock)" : "");
		}
		res->executions += (unsigned)nex;
		res->reexecuted += nex > 1;
	}
	for (size_t i = 0; i < n; i++)
		if ((i == 0 || recs[i].pid != recs[i - 1].pid) && pid_is_job(c, recs[i].pid)) {
			if (res->leftover++ < 5)
				printf("chaos: leftover: job pid %d of run %s still alive\n",
				       recs[i].pid, recs[i].id);
		}
	for (size_t i = 0; i < n; i++) {
		free(recs[i].id);
		free(recs[i].worker);
	}
	return 0;
}

/* ---- logs ---- */

/* Is this log line (without its '\n') lessee's marker for a re-execution?
 * ADAPT HERE when the marker's wording is settled: today any line that starts
 * with "[lessee: " and says "restarted" counts, e.g.
 *   [lessee: attempt 2, execution restarted] */
static bool is_restart_marker(const char *line, size_t len)
{
	static const char prefix[] = "[lessee: ";

	return len >= strlen(prefix) && memcmp(line, prefix, strlen(prefix)) == 0 &&
	       line[len - 1] == ']' && memmem(line, len, "restarted", strlen("restarted"));
}

/* Is it lessee's line for an execution a hard stop killed?  It ends that
 * execution's output, and the next execution's restart marker follows it. */
static bool is_stop_marker(const char *line, size_t len)
{
	static const char prefix[] = "[lessee: execution stopped: ";

	return len >= strlen(prefix) && memcmp(line, prefix, strlen(prefix)) == 0 &&
	       line[len - 1] == ']';
}

static bool is_prefix(const char *full, size_t flen, const char *p, size_t n)
{
	return n <= flen && memcmp(full, p, n) == 0;
}

/* Is a run's log exact?  It must be E1 M E2 M ... Ek: the outputs of the run's
 * executions separated by restart markers M (is_restart_marker, each a line of
 * its own), every Ei a prefix of the run's full deterministic output F and the
 * last one F itself.  lessee starts a marker on a new line: when Ei ends in the
 * middle of a line, the '\n' it adds before M is not part of Ei.  An execution
 * a hard stop killed ends with lessee's stop line (is_stop_marker), right
 * before the next M.  Any other "[lessee: " line (bytes dropped, bytes lost,
 * ...) makes the log inexact: the job never writes one.  *ret_markers: the
 * restart markers seen. */
static bool log_exact(const char *id, const char *log, size_t len, unsigned *ret_markers)
{
	size_t flen = 0, seg = 0;
	_cleanup_free_ char *full = chaos_output(id, &flen);
	unsigned markers = 0;
	bool stopped = false; /* a stop line ended the last segment: M comes next */

	if (!full)
		return false;
	for (size_t p = 0; p < len;) {
		const char *nl = memchr(log + p, '\n', len - p);
		size_t e = nl ? (size_t)(nl - log) + 1 : len; /* the line is [p, e) */
		size_t body = nl ? e - p - 1 : e - p;

		if (body >= 9 && memcmp(log + p, "[lessee: ", 9) == 0) {
			bool stop = is_stop_marker(log + p, body);

			/* M starts with a '\n' of its own: after a stop line, an empty line */
			if ((!stop && !is_restart_marker(log + p, body)) ||
			    (stopped &&
			     (stop || (p != seg && !(p == seg + 1 && log[seg] == '\n')))))
				return false;
			if (!stopped && !is_prefix(full, flen, log + seg, p - seg) &&
			    !(p > seg && is_prefix(full, flen, log + seg, p - seg - 1)))
				return false;
			markers += !stop;
			stopped = stop;
			seg = e;
		} else if (stopped && !(body == 0 && p == seg))
			return false;
		p = e;
	}
	*ret_markers = markers;
	return !stopped && len - seg == flen && memcmp(full, log + seg, flen) == 0;
}

static void explain_log(const char *id, const char *log, size_t len)
{
	size_t flen = 0, d = 0;
	_cleanup_free_ char *full = chaos_output(id, &flen);

	if (!full)
		return;
	while (d < len && d < flen && log[d] == full[d])
		d++;
	printf("chaos: log of %s not exact: %zu bytes, expected %zu, first difference at %zu: "
	       "\"%.60s\"\n",
	       id, len, flen, d, d < len ? log + d : "(end)");
	/* and lessee's own lines, where they are */
	for (const char *p = log; (p = memmem(p, len - (size_t)(p - log), "[lessee: ", 9)); p++) {
		const char *nl = memchr(p, '\n', len - (size_t)(p - log));

		printf("chaos:   at %zu: %.*s\n", (size_t)(p - log),
		       (int)(nl ? nl - p : (ptrdiff_t)(len - (size_t)(p - log))), p);
	}
}

/* The log check on made-up logs, so that a change to the marker's wording
 * cannot silently make it accept everything or nothing. */
static bool log_check_self_test(void)
{
	static const char id[] = "r-self";
	static const char marker[] = "[lessee: attempt 2, execution restarted]\n";
	static const char stop[] = "[lessee: execution stopped: the worker is shutting down; the "
	                           "run goes back to the queue]\n";
	size_t flen = 0, cut;
	_cleanup_free_ char *full = chaos_output(id, &flen);
	_cleanup_free_ char *buf = malloc(3 * flen + 256);
	unsigned m = 0;
	bool ok = true;
	size_t n;

	if (!full || !buf)
		return false;
	cut = (size_t)((const char *)memchr(full + flen / 2, '\n', flen / 2) - full) + 1;
	ok &= log_exact(id, full, flen, &m) && m == 0;
	/* a first execution cut after a whole line, the marker, the second in full */
	n = 0;
	memcpy(buf + n, full, cut), n += cut;
	memcpy(buf + n, marker, strlen(marker)), n += strlen(marker);
	memcpy(buf + n, full, flen), n += flen;
	ok &= log_exact(id, buf, n, &m) && m == 1;
	/* cut in the middle of a line: lessee adds the '\n' before its marker */
	n = 0;
	memcpy(buf + n, full, cut - 5), n += cut - 5;
	buf[n++] = '\n';
	memcpy(buf + n, marker, strlen(marker)), n += strlen(marker);
	memcpy(buf + n, full, flen), n += flen;
	ok &= log_exact(id, buf, n, &m) && m == 1;
	/* no marker: today's duplicated log (issue 10, item 9) */
	n = 0;
	memcpy(buf + n, full, cut), n += cut;
	memcpy(buf + n, full, flen), n += flen;
	ok &= !log_exact(id, buf, n, &m);
	/* the output resumed where the server's log ended instead of from the start */
	n = 0;
	memcpy(buf + n, full, cut), n += cut;
	memcpy(buf + n, marker, strlen(marker)), n += strlen(marker);
	memcpy(buf + n, full + cut, flen - cut), n += flen - cut;
	ok &= !log_exact(id, buf, n, &m);
	/* incomplete, empty, another marker */
	ok &= !log_exact(id, full, cut, &m) && !log_exact(id, "", 0, &m);
	n = 0;
	memcpy(buf + n, full, cut), n += cut;
	n += (size_t)sprintf(buf + n, "[lessee: 12 bytes dropped: log shipping fell behind]\n");
	memcpy(buf + n, full + cut, flen - cut), n += flen - cut;
	ok &= !log_exact(id, buf, n, &m);
	/* an execution a hard stop killed: its line, then the next one's marker */
	n = 0;
	memcpy(buf + n, full, cut), n += cut;
	n += (size_t)sprintf(buf + n, "%s\n", stop);
	memcpy(buf + n, marker, strlen(marker)), n += strlen(marker);
	memcpy(buf + n, full, flen), n += flen;
	ok &= log_exact(id, buf, n, &m) && m == 1;
	/* ...but output after the stop line, before a marker, is not exact */
	n = 0;
	memcpy(buf + n, full, cut), n += cut;
	n += (size_t)sprintf(buf + n, "%s", stop);
	memcpy(buf + n, full, flen), n += flen;
	ok &= !log_exact(id, buf, n, &m);
	return ok;
}

/* ---- runs at the end ---- */

static const char *str_field(const cJSON *o, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	return cJSON_IsString(v) ? v->valuestring : "";
}

static int int_field(const cJSON *o, const char *name)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	return cJSON_IsNumber(v) ? v->valueint : -1;
}

static bool result_exact(const char *id, const cJSON *output)
{
	char buf[512];
	cJSON *want;
	bool ok;

	chaos_result(id, buf, sizeof(buf));
	want = cJSON_Parse(buf);
	ok = want && output && cJSON_Compare(output, want, true);
	cJSON_Delete(want);
	return ok;
}

static void check_run(struct chaos *c, const char *id, struct chaos_result *res)
{
	cJSON *run = tu_lessor_get_run(c->lessor, id);
	const char *status = run ? str_field(run, "status") : "(unreadable)";
	bool terminal =
	    streq(status, "succeeded") || streq(status, "failed") || streq(status, "cancelled");
	bool failed = streq(status, "failed");
	size_t len = 0;
	char *log;
	unsigned markers = 0;

	res->failed += failed;
	if (!terminal ||
	    (failed && int_field(run, "attempts_used") < int_field(run, "max_attempts"))) {
		if (res->lost++ < 5)
			printf("chaos: lost: run %s %s reason=%s error=\"%s\" attempts_used=%d "
			       "lease_expiries=%d\n",
			       id, status, str_field(run, "reason"), str_field(run, "error"),
			       int_field(run, "attempts_used"), int_field(run, "lease_expiries"));
	}
	if (streq(status, "succeeded")) {
		res->succeeded++;
		if (!result_exact(id, cJSON_GetObjectItemCaseSensitive(run, "output"))) {
			char *out =
			    cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(run, "output"));

			if (res->result_mismatch++ < 5)
				printf("chaos: result of %s not exact: %s (error \"%s\")\n", id,
				       out ? out : "null", str_field(run, "error"));
			free(out);
		}
		log = tu_lessor_run_log(c->lessor, id, &len);
		if (!log || !log_exact(id, log, len, &markers)) {
			if (res->log_mismatch++ < 5)
				explain_log(id, log ? log : "", log ? len : 0);
		}
		res->markers += markers;
		free(log);
	}
	cJSON_Delete(run);
}

static unsigned spool_files;

static int count_file(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	if (type == FTW_F) {
		spool_files++;
		printf("chaos: spool file left: %s\n", path);
	}
	return 0;
}

static unsigned count_spool(const struct tu_lessee *d)
{
	_cleanup_free_ char *path = NULL;

	if (asprintf(&path, "%s/spool", tu_lessee_dir(d)) < 0)
		return 0;
	spool_files = 0;
	(void)nftw(path, count_file, 16, FTW_PHYS);
	return spool_files;
}

/* ---- report ---- */

static unsigned verdict(const char *name, unsigned value, bool safety, unsigned *failed)
{
	bool bad = safety && value > 0;

	printf("  %-28s %8u  %s\n", name, value, !safety ? "(reported)" : bad ? "FAIL" : "ok");
	*failed += bad;
	return !bad && safety;
}

/* The table and the figures; the number of failed checks, *ret_passed the others. */
static unsigned report(const struct chaos *c, const struct chaos_result *r, double secs,
                       unsigned *ret_passed)
{
	unsigned passed = 0, failed = 0;

	printf("chaos: %u runs, %.0fs, faults: 5xx=%u stall=%u kill_lessee=%u kill_lessor=%u "
	       "drain=%u hard_stop=%u crash=%u; succeeded=%u failed=%u executions=%u "
	       "term_trapped=%u markers=%u exits_checked=%u overlaps_same_daemon=%u\n",
	       c->cfg.runs, secs, c->n_5xx, c->n_stall, c->n_kill_lessee, c->n_kill_lessor,
	       c->n_drain, c->n_hard, c->n_crash, r->succeeded, r->failed, r->executions,
	       r->term_trapped, r->markers, c->exits, r->overlaps_same_daemon);
	printf("  %-28s %8s  %s\n", "check", "count", "verdict");
	passed += verdict("runs lost", r->lost, true, &failed);
	passed += verdict("overlapping executions", r->overlaps, true, &failed);
	passed += verdict("runs re-executed", r->reexecuted, false, &failed);
	passed += verdict("results not byte-exact", r->result_mismatch, true, &failed);
	passed += verdict("logs not byte-exact", r->log_mismatch, true, &failed);
	passed += verdict("leftover job processes", r->leftover, true, &failed);
	passed += verdict("spool files left", r->spool, true, &failed);
	passed += verdict("nonzero exit codes", c->exit_nonzero, true, &failed);
	printf("chaos: runs=%u lost=%u overlaps=%u reexecuted=%u result_mismatch=%u "
	       "log_mismatch=%u leftover=%u spool=%u exit_nonzero=%u\n",
	       c->cfg.runs, r->lost, r->overlaps, r->reexecuted, r->result_mismatch,
	       r->log_mismatch, r->leftover, r->spool, c->exit_nonzero);
	*ret_passed = passed;
	return failed;
}

/* The daemons' directories (logs, spools, lessor's database) into ours, which
 * stays, before the helpers remove theirs. */
static void keep_artifacts(const struct chaos *c)
{
	char cmd[8192];
	int n =
	    snprintf(cmd, sizeof(cmd), "cp -a '%s' '%s/lessor'", tu_lessor_dir(c->lessor), c->dir);

	for (int i = 0; i < NDAEMONS; i++)
		n += snprintf(cmd + n, sizeof(cmd) - (size_t)n, " && cp -a '%s' '%s/lessee-%d'",
		              tu_lessee_dir(c->d[i]), c->dir, i);
	if (n >= (int)sizeof(cmd) || system(cmd) != 0)
		printf("chaos: could not copy the daemons' directories\n");
	printf("chaos: kept: %s (ledger, lessor/, lessee-N/: logs, spools, database)\n", c->dir);
}

/* ---- main ---- */

static int setup(struct chaos *c)
{
	int r;

	c->dir = tu_tmpdir("chaos");
	if (!c->dir || asprintf(&c->ledger, "%s/ledger", c->dir) < 0 ||
	    asprintf(&c->locks, "%s/locks", c->dir) < 0 || mkdir(c->locks, 0755) < 0)
		return -ENOMEM;
	c->ids = calloc(c->cfg.runs + 1, sizeof(char *));
	if (!c->ids)
		return -ENOMEM;
	r = start_lessor(c);
	if (r < 0) {
		printf("chaos: lessor did not start: %s\n", strerror(-r));
		return r;
	}
	for (int i = 0; i < NDAEMONS; i++) {
		r = start_lessee(c, i);
		if (r < 0) {
			printf("chaos: lessee %d did not start: %s\n", i, strerror(-r));
			return r;
		}
	}
	return 0;
}

/* The fault window: runs enqueued over its first 3/4, a fault every 2-6 s. */
static void window(struct chaos *c)
{
	usec_t t0 = time_mono(), span = c->cfg.window_s * USEC_PER_SEC;
	usec_t next = t0 + 2 * USEC_PER_SEC;

	while (time_mono() < t0 + span) {
		usec_t now = time_mono();
		double frac = (double)(now - t0) / (0.75 * (double)span);

		enqueue_upto(c, frac >= 1 ? c->cfg.runs : (unsigned)(frac * c->cfg.runs));
		check_crashed(c);
		if (now >= next) {
			fault_any(c, t0);
			next = time_mono() + (2000 + rnd_below(c, 4000)) * USEC_PER_MSEC;
		}
		tu_sleep(100 * USEC_PER_MSEC);
	}
	tu_lessor_json(c->lessor, "DELETE", "/v1/admin/faults", NULL, NULL, NULL);
	printf("chaos: window over after %.0fs: %u enqueued\n", elapsed_s(t0), c->enqueued);
}

static void finish(struct chaos *c, struct chaos_result *res)
{
	for (int i = 0; i < NDAEMONS; i++) {
		if (c->broken[i])
			continue;
		tu_lessee_signal(c->d[i], SIGTERM);
		stop_and_record(c, i, "final drain", 120 * USEC_PER_SEC);
		res->spool += count_spool(c->d[i]);
	}
	for (unsigned i = 0; i < c->enqueued; i++)
		check_run(c, c->ids[i], res);
	if (check_ledger(c, res) < 0)
		printf("chaos: cannot read the ledger %s\n", c->ledger);
	record_exit(c, "lessor", 0, tu_lessor_stop(c->lessor));
}

static const char usage[] =
    "usage: chaos (no arguments; the parameters are environment variables:\n"
    "       CHAOS_RUNS CHAOS_WINDOW CHAOS_CONCURRENCY CHAOS_PREFETCH CHAOS_LINE_US\n"
    "       CHAOS_KILL_GRACE CHAOS_SETTLE CHAOS_SEED CHAOS_KEEP; `make chaos` sets\n"
    "       up the rest)\n";

int main(int argc, char **argv)
{
	struct chaos c = {
	    .cfg = {.runs = env_uint("CHAOS_RUNS", 3000),
	            .window_s = env_uint("CHAOS_WINDOW", 600),
	            .concurrency = env_uint("CHAOS_CONCURRENCY", 8),
	            .prefetch = env_uint("CHAOS_PREFETCH", 0),
	            .line_us = env_uint("CHAOS_LINE_US", 10000),
	            .settle_s = env_uint("CHAOS_SETTLE", 300),
	            .seed = env_uint("CHAOS_SEED", 1),
	            .kill_grace = getenv("CHAOS_KILL_GRACE") ? getenv("CHAOS_KILL_GRACE") : "2s",
	            .keep = getenv("CHAOS_KEEP") != NULL},
	};
	struct chaos_result res = {0};
	usec_t t0 = time_mono();
	unsigned passed = 0, failed;

	if (tu_std_answer(argc, argv, "chaos (lessee tests)", usage))
		return 0;
	if (argc > 1) {
		fputs(usage, stderr);
		return 2;
	}
	signal(SIGPIPE, SIG_IGN);
	setvbuf(stdout, NULL, _IOLBF, 0);
	c.rng = chaos_mix(c.cfg.seed ? c.cfg.seed : 1);
	printf("chaos: runs=%u window=%us concurrency=%u x %d daemons, prefetch=%u, "
	       "lease_ttl=%ds, kill_grace=%s, seed=%u, backend=%s\n",
	       c.cfg.runs, c.cfg.window_s, c.cfg.concurrency, NDAEMONS, c.cfg.prefetch, LEASE_TTL_S,
	       c.cfg.kill_grace, c.cfg.seed,
	       getenv("LESSEE_IO_BACKEND") ? getenv("LESSEE_IO_BACKEND") : "auto");
	if (!log_check_self_test()) {
		printf("chaos: the log check fails its self-test (is_restart_marker?)\n");
		return 2;
	}
	if (setup(&c) < 0)
		return 2;
	window(&c);
	if (wait_all_terminal(&c, c.cfg.settle_s * USEC_PER_SEC) < 0)
		printf("chaos: runs still not terminal %us after the window\n", c.cfg.settle_s);
	else
		printf("chaos: all runs ended after %.0fs\n", elapsed_s(t0));
	finish(&c, &res);
	failed = report(&c, &res, elapsed_s(t0), &passed);
	if (failed || c.cfg.keep)
		keep_artifacts(&c);
	for (int i = 0; i < NDAEMONS; i++)
		if (!c.broken[i])
			tu_lessee_free(c.d[i]);
	tu_lessor_free(c.lessor);
	if (!failed && !c.cfg.keep)
		rm_rf(c.dir);
	for (unsigned i = 0; i < c.enqueued; i++)
		free(c.ids[i]);
	free(c.ids);
	free(c.dir);
	free(c.ledger);
	free(c.locks);
	printf("%u passed, %u failed\n", passed, failed);
	return failed ? 1 : 0;
}
