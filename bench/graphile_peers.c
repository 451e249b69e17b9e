/* graphile_peers: graphile-worker on PostgreSQL as a worker that spawns the
 * same command per job (bench/compare/graphile_spawn.mjs), next to the
 * machine's floor for the same command and width (posix_spawn + waitpid),
 * sampled before every round and after them all, its median:
 *
 *   runs/s       N jobs added first, then a runner with W concurrent
 *                handlers, each spawning the command, until all N are done
 *   cpu us/run   the Node process's own user+system CPU over those N runs
 *                (process.cpuUsage: the commands' CPU is not in it)
 *   peak RSS     the Node process's maxRSS at the end (adding the jobs too)
 *
 * PostgreSQL is a private server (tests/helpers/pg_proc.h) with fsync on, a
 * fresh database per round.  The figure for the issue 15 peers table beside
 * bench/e2e, bench/conductor_peers and bench/camunda7_peers; bench/lessor_pg
 * measures graphile-worker as a queue alone.  Figures only, no verdict.
 *
 *   graphile_peers [--runs N] [--rounds R] [--concurrency W]
 *                  [--command "ARGV..."] [--tsv FILE]
 *
 * graphile-worker comes from `make bench-compare` (compare/ next to this
 * binary); exits 77 when it or PostgreSQL is not installed. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "benchutil.h"
#include "pg_proc.h"
#include "testutil.h"
#include "util/macro.h"
#include "util/strutil.h"

#define MAX_ROUNDS 32

static unsigned n_runs = 500, n_rounds = 3, width = 16;
static char *command = "/bin/true";

struct figures {
	double runs_per_s, cpu_us_per_run, peak_rss_kib;
};

static char *compare_dir(const char *argv0)
{
	_cleanup_free_ char *copy = strdup(argv0);
	char *dir = NULL, *slash = copy ? strrchr(copy, '/') : NULL;

	if (slash)
		*slash = '\0';
	if (asprintf(&dir, "%s/compare", slash ? copy : ".") < 0)
		return NULL;
	return dir;
}

/* "host=DIR port=P user=U dbname=D" -> "postgres:///D?host=DIR&port=P&user=U" */
static char *to_url(const char *conninfo)
{
	char host[256], port[16], user[64], db[64], *url = NULL;

	if (sscanf(conninfo, "host=%255s port=%15s user=%63s dbname=%63s", host, port, user, db) !=
	        4 ||
	    asprintf(&url, "postgres:///%s?host=%s&port=%s&user=%s", db, host, port, user) < 0)
		return NULL;
	return url;
}

static double num(const cJSON *o, const char *key)
{
	const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsNumber(j) ? j->valuedouble : -1;
}

static int round_run(const char *dir, struct tu_pg *pg, struct figures *ret)
{
	_cleanup_free_ char *db = tu_pg_create_db(pg), *url = db ? to_url(db) : NULL, *cmd = NULL;
	char line[512];
	FILE *f;
	int r = -EIO;

	if (!url || asprintf(&cmd, "cd '%s' && node graphile_spawn.mjs '%s' %u %u %s", dir, url,
	                     n_runs, width, command) < 0)
		return -ENOMEM;
	f = popen(cmd, "r");
	while (f && fgets(line, sizeof(line), f)) {
		cJSON *j = cJSON_Parse(line);

		if (j && num(j, "rate") > 0) {
			*ret = (struct figures){num(j, "rate"), num(j, "cpu_us_per_run"),
			                        num(j, "peak_rss_kib")};
			r = 0;
		}
		cJSON_Delete(j);
	}
	if (!f || pclose(f) != 0)
		r = -EIO;
	if (r < 0)
		fprintf(stderr, "graphile_peers: a round failed (%s)\n", cmd);
	return r;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: graphile_peers [--runs N] [--rounds R] [--concurrency W] "
	           "[--command \"ARGV...\"] [--tsv FILE]\n");
}

static int parse_args(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"runs", required_argument, NULL, 'n'},
	    {"rounds", required_argument, NULL, 'r'},
	    {"concurrency", required_argument, NULL, 'w'},
	    {"command", required_argument, NULL, 'c'},
	    {"tsv", required_argument, NULL, 't'},
	    {"version", no_argument, NULL, 'V'},
	    {"help", no_argument, NULL, 'h'},
	    {0},
	};
	int o;

	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (o == 'V') {
			printf("graphile_peers %s\n", LESSEE_VERSION);
			return 0;
		} else if (o == 'n')
			n_runs = (unsigned)MAX(atoi(optarg), 1);
		else if (o == 'r')
			n_rounds = (unsigned)CLAMP(atoi(optarg), 1, MAX_ROUNDS);
		else if (o == 'w')
			width = (unsigned)MAX(atoi(optarg), 1);
		else if (o == 'c')
			command = optarg;
		else if (o == 't' && tu_tsv_open(optarg) < 0) {
			perror(optarg);
			return 1;
		} else if (o != 't') {
			usage(o == 'h' ? stdout : stderr);
			return o == 'h' ? 0 : 2;
		}
	}
	return -1;
}

int main(int argc, char **argv)
{
	_cleanup_free_ char *dir = compare_dir(argv[0]), *pkg = NULL;
	_cleanup_(strv_freep) char **cmd_argv = NULL;
	double rate[MAX_ROUNDS], cpu[MAX_ROUNDS], rss[MAX_ROUNDS], fl[2 * MAX_ROUNDS], load[1];
	struct tu_pg *pg = NULL;
	unsigned ok = 0, n_fl = 0;
	int r = parse_args(argc, argv);

	if (r >= 0)
		return r;
	if (strv_split(command, " ", &cmd_argv) < 0 || !cmd_argv || !cmd_argv[0])
		return 2;
	if (!dir || asprintf(&pkg, "%s/node_modules/graphile-worker/package.json", dir) < 0 ||
	    access(pkg, R_OK) < 0 || system("node --version >/dev/null 2>&1") != 0) {
		fprintf(stderr,
		        "graphile_peers: node or graphile-worker is not installed in %s "
		        "(make bench-compare)\n",
		        dir ? dir : "compare/");
		return 77;
	}
	r = tu_pg_start_durable(&pg);
	if (r < 0) {
		fprintf(stderr, "graphile_peers: cannot start PostgreSQL: %s\n", strerror(-r));
		return r == -ENOENT ? 77 : 1;
	}
	if (getloadavg(load, 1) < 1)
		load[0] = -1;
	printf("graphile_peers: `%s` per job, %u jobs x %u rounds, concurrency %u, medians; "
	       "%ld cores, load average %.1f at the start\n",
	       command, n_runs, n_rounds, width, sysconf(_SC_NPROCESSORS_ONLN), load[0]);
	for (unsigned k = 0; k < n_rounds; k++) {
		struct figures f = {0};

		fl[n_fl++] = tu_spawn_rate(NULL, cmd_argv, (int)n_runs, (int)width);
		if (round_run(dir, pg, &f) < 0)
			continue;
		rate[ok] = f.runs_per_s;
		cpu[ok] = f.cpu_us_per_run;
		rss[ok++] = f.peak_rss_kib;
	}
	for (unsigned k = 0; k < n_rounds; k++)
		fl[n_fl++] = tu_spawn_rate(NULL, cmd_argv, (int)n_runs, (int)width);
	tu_pg_free(pg);
	printf("  %-16s %10s %12s %12s %10s\n", "worker", "runs/s", "cpu us/run", "peak RSS",
	       "vs floor");
	double floor = tu_median(fl, n_fl);

	if (ok) {
		struct figures m = {tu_median(rate, ok), tu_median(cpu, ok), tu_median(rss, ok)};

		printf("  %-16s %10.0f %12.0f %9.0f KiB %9.2fx%s\n", "graphile-worker",
		       m.runs_per_s, m.cpu_us_per_run, m.peak_rss_kib, m.runs_per_s / floor,
		       ok < n_rounds ? "  (some rounds failed)" : "");
		tu_tsv_row("graphile_peers", "graphile-worker on PostgreSQL", (int)width,
		           "runs_per_s", m.runs_per_s, floor);
		tu_tsv_row("graphile_peers", "graphile-worker on PostgreSQL", (int)width,
		           "cpu_us_per_run", m.cpu_us_per_run, -1);
		tu_tsv_row("graphile_peers", "graphile-worker on PostgreSQL", (int)width,
		           "peak_rss_kib", m.peak_rss_kib, -1);
	} else {
		printf("  %-16s (every round failed)\n", "graphile-worker");
	}
	printf("  %-16s %10.0f   (posix_spawn + waitpid of the same command, same width)\n",
	       "floor", floor);
	return tu_tsv_close() < 0 || !ok ? 1 : 0;
}
