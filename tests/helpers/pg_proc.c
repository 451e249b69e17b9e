#include "pg_proc.h"

#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <grp.h>
#include <libpq-fe.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lessor_proc.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/time.h"

#define PG_PORT "5432"

struct tu_pg {
	char *bindir;
	char *dir;  /* the socket lives here */
	char *data; /* dir/data */
	char *log;  /* dir/postgres.log */
	char *conninfo;
	pid_t pid;
	unsigned n_dbs;
	uid_t uid;
	gid_t gid;
	bool drop;    /* run the server as uid/gid (we are root) */
	bool durable; /* fsync on */
};

static char *find_bindir(void)
{
	const char *env = getenv("LESSEE_PG_BINDIR");
	glob_t g;
	char *out = NULL;

	if (env && *env) {
		char initdb[512];

		snprintf(initdb, sizeof(initdb), "%s/initdb", env);
		return access(initdb, X_OK) == 0 ? strdup(env) : NULL;
	}
	if (glob("/usr/lib/postgresql/*/bin/initdb", 0, NULL, &g) != 0)
		return NULL;
	/* the newest: versions sort numerically, not by name */
	for (size_t i = 0, best = 0; i < g.gl_pathc; i++) {
		unsigned v = (unsigned)atoi(g.gl_pathv[i] + strlen("/usr/lib/postgresql/"));

		if (v > best && access(g.gl_pathv[i], X_OK) == 0) {
			best = v;
			free(out);
			out = strndup(g.gl_pathv[i], strlen(g.gl_pathv[i]) - strlen("/initdb"));
		}
	}
	globfree(&g);
	return out;
}

/* Runs bindir/prog with argv as the server's user; stdout and stderr to the
 * log.  Returns the pid. */
static pid_t spawn_as(struct tu_pg *pg, const char *prog, char **argv)
{
	char path[512];
	pid_t pid;

	snprintf(path, sizeof(path), "%s/%s", pg->bindir, prog);
	pid = fork();
	if (pid != 0)
		return pid;
	{
		int fd = open(pg->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);

		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
		}
	}
	if (pg->drop && (setgroups(0, NULL) < 0 || setgid(pg->gid) < 0 || setuid(pg->uid) < 0))
		_exit(126);
	/* after setuid, which clears it: the server dies with us */
	prctl(PR_SET_PDEATHSIG, SIGQUIT);
	execv(path, argv);
	_exit(127);
}

static int run_as(struct tu_pg *pg, const char *prog, char **argv)
{
	pid_t pid = spawn_as(pg, prog, argv);
	int st;

	if (pid < 0)
		return -errno;
	if (waitpid(pid, &st, 0) < 0)
		return -errno;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -EIO;
}

static int wait_ready(struct tu_pg *pg)
{
	usec_t end = time_mono() + tu_timeout(30 * USEC_PER_SEC);

	while (time_mono() < end) {
		int st;

		if (PQping(pg->conninfo) == PQPING_OK)
			return 0;
		if (waitpid(pg->pid, &st, WNOHANG) == pg->pid) {
			pg->pid = -1;
			return -EIO;
		}
		tu_sleep(20 * USEC_PER_MSEC);
	}
	return -ETIMEDOUT;
}

static int start_server(struct tu_pg *pg)
{
	char *argv[] = {"postgres",
	                "-D",
	                pg->data,
	                "-p",
	                PG_PORT,
	                "-k",
	                pg->dir,
	                "-c",
	                "listen_addresses=",
	                "-c",
	                "fsync=off",
	                "-c",
	                "synchronous_commit=off",
	                "-c",
	                "full_page_writes=off",
	                "-c",
	                "max_connections=200",
	                "-c",
	                "log_min_messages=warning",
	                NULL};

	pg->pid = spawn_as(pg, "postgres", argv);
	if (pg->pid < 0)
		return -errno;
	return wait_ready(pg);
}

static void print_log(const struct tu_pg *pg)
{
	char *text = NULL;

	if (read_file_capped(pg->log, 64 << 10, &text, NULL) >= 0)
		fprintf(stderr, "--- %s\n%s---\n", pg->log, text);
	free(text);
}

static int setup_dir(struct tu_pg *pg)
{
	const char *base = getenv("TMPDIR");
	struct passwd *pw;

	/* short: a unix socket path has at most 107 bytes */
	if (asprintf(&pg->dir, "%s/lessee-pg-XXXXXX", base && strlen(base) < 40 ? base : "/tmp") <
	        0 ||
	    !mkdtemp(pg->dir))
		return -errno;
	if (asprintf(&pg->data, "%s/data", pg->dir) < 0 ||
	    asprintf(&pg->log, "%s/postgres.log", pg->dir) < 0 ||
	    asprintf(&pg->conninfo, "host=%s port=" PG_PORT " user=lessor dbname=postgres",
	             pg->dir) < 0)
		return -ENOMEM;
	if (geteuid() != 0)
		return 0;
	pw = getpwnam("nobody");
	if (!pw)
		return -ENOENT;
	pg->drop = true;
	pg->uid = pw->pw_uid;
	pg->gid = pw->pw_gid;
	if (chown(pg->dir, pg->uid, pg->gid) < 0)
		return -errno;
	return 0;
}

static int start(bool durable, struct tu_pg **ret)
{
	struct tu_pg *pg = calloc(1, sizeof(*pg));
	char *initdb[] = {"initdb", "-D", NULL,   "-U",         "lessor",    "-A",
	                  "trust",  "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions",
	                  NULL};
	int r;

	if (!pg)
		return -ENOMEM;
	pg->pid = -1;
	pg->durable = durable;
	pg->bindir = find_bindir();
	if (!pg->bindir) {
		free(pg);
		return -ENOENT;
	}
	r = setup_dir(pg);
	if (r < 0)
		goto fail;
	initdb[2] = pg->data;
	r = run_as(pg, "initdb", initdb);
	if (r >= 0)
		r = start_server(pg);
	if (r < 0) {
		print_log(pg);
		goto fail;
	}
	*ret = pg;
	return 0;
fail:
	tu_pg_free(pg);
	return r;
}

int tu_pg_start(struct tu_pg **ret)
{
	return start(false, ret);
}

int tu_pg_start_durable(struct tu_pg **ret)
{
	return start(true, ret);
}

static void stop_server(struct tu_pg *pg)
{
	if (pg->pid <= 0)
		return;
	kill(pg->pid, SIGINT); /* fast shutdown */
	waitpid(pg->pid, NULL, 0);
	pg->pid = -1;
}

int tu_pg_restart(struct tu_pg *pg)
{
	stop_server(pg);
	return start_server(pg);
}

struct tu_pg *tu_pg_free(struct tu_pg *pg)
{
	if (!pg)
		return NULL;
	stop_server(pg);
	if (pg->dir)
		rm_rf(pg->dir);
	free(pg->bindir);
	free(pg->dir);
	free(pg->data);
	free(pg->log);
	free(pg->conninfo);
	free(pg);
	return NULL;
}

const char *tu_pg_conninfo(const struct tu_pg *pg)
{
	return pg->conninfo;
}

int tu_pg_exec(const char *conninfo, const char *sql)
{
	PGconn *c = PQconnectdb(conninfo);
	PGresult *res;
	int r = -EIO;

	if (PQstatus(c) == CONNECTION_OK) {
		res = PQexec(c, sql);
		if (PQresultStatus(res) == PGRES_COMMAND_OK ||
		    PQresultStatus(res) == PGRES_TUPLES_OK)
			r = 0;
		else
			fprintf(stderr, "tu_pg_exec: %s", PQerrorMessage(c));
		PQclear(res);
	} else
		fprintf(stderr, "tu_pg_exec: %s", PQerrorMessage(c));
	PQfinish(c);
	return r;
}

char *tu_pg_query1(const char *conninfo, const char *sql)
{
	PGconn *c = PQconnectdb(conninfo);
	PGresult *res = NULL;
	char *out = NULL;

	if (PQstatus(c) == CONNECTION_OK) {
		res = PQexec(c, sql);
		if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) > 0 &&
		    !PQgetisnull(res, 0, 0))
			out = strdup(PQgetvalue(res, 0, 0));
	}
	PQclear(res);
	PQfinish(c);
	return out;
}

char *tu_pg_create_db(struct tu_pg *pg)
{
	char sql[96], *info = NULL;

	snprintf(sql, sizeof(sql), "CREATE DATABASE t_%d_%u", (int)getpid(), pg->n_dbs);
	if (tu_pg_exec(pg->conninfo, sql) < 0)
		return NULL;
	if (asprintf(&info, "host=%s port=" PG_PORT " user=lessor dbname=t_%d_%u", pg->dir,
	             (int)getpid(), pg->n_dbs) < 0)
		return NULL;
	pg->n_dbs++;
	return info;
}
