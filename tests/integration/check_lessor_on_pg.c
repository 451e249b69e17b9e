/* The lessor suites written for SQLite, run against PostgreSQL: starts a
 * private server (tests/helpers/pg_proc.h) and runs check_lessor_http,
 * check_complete_next, check_complete_batch, check_renew_batch and
 * check_lessor_cli (built next
 * to this binary) with $LESSOR_TEST_PG set, so that every `lessor serve`
 * they start gets a fresh PostgreSQL database instead of a file
 * (tests/helpers/lessor_proc.c).  Exit 77 (skip) without PostgreSQL. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pg_proc.h"
#include "util/macro.h"

static int run_suite(const char *self, const char *name)
{
	_cleanup_free_ char *dir = strdup(self), *path = NULL;
	char *slash = dir ? strrchr(dir, '/') : NULL;
	pid_t pid;
	int st;

	if (!slash)
		return -EINVAL;
	*slash = '\0';
	if (asprintf(&path, "%s/%s", dir, name) < 0)
		return -ENOMEM;
	fprintf(stderr, "== %s on PostgreSQL\n", name);
	pid = fork();
	if (pid == 0) {
		execl(path, name, (char *)NULL);
		_exit(127);
	}
	if (pid < 0 || waitpid(pid, &st, 0) < 0)
		return -errno;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int main(int argc, char **argv)
{
	static const char *const suites[] = {"check_lessor_http", "check_complete_next",
	                                     "check_complete_batch", "check_renew_batch",
	                                     "check_lessor_cli"};
	struct tu_pg *pg = NULL;
	int r = tu_pg_start(&pg), failed = 0;

	if (r == -ENOENT) {
		fprintf(stderr, "SKIP: no PostgreSQL server binaries (Debian: apt-get install "
		                "postgresql)\n");
		return 77;
	}
	if (r < 0) {
		fprintf(stderr, "cannot start a PostgreSQL server: %s\n", strerror(-r));
		return EXIT_FAILURE;
	}
	setenv("LESSOR_TEST_PG", tu_pg_conninfo(pg), 1);
	for (size_t i = 0; i < ELEMENTSOF(suites); i++) {
		r = run_suite(argv[0], suites[i]);
		if (r != 0) {
			fprintf(stderr, "%s on PostgreSQL: exit %d\n", suites[i], r);
			failed++;
		}
	}
	tu_pg_free(pg);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
