/* A run's files cost one mkdir and one directory removal: the run directory's
 * parents are made once (at start, after a reload that moves run_dir, and
 * again only when someone removed them), counted with strace on a real
 * daemon; and a run_dir removed under a running daemon is made again, no run
 * lost.  Real lessee, real lessor. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <regex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "jsonutil.h"
#include "lessee_proc.h"
#include "lessor_proc.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"

#define SEC USEC_PER_SEC
#define NRUNS 12

static char *tmp;
static struct tu_lessor *L;
static struct tu_lessee *D;

static void setup(void)
{
	tmp = tu_tmpdir("runfiles");
	ck_assert_ptr_nonnull(tmp);
	ck_assert_int_eq(tu_lessor_start(&(struct tu_lessor_opts){.sync_normal = true}, &L), 0);
}

static void teardown(void)
{
	D = tu_lessee_free(D);
	L = tu_lessor_free(L);
	rm_rf(tmp);
	free(tmp);
}

static void run_n(int n, const char *workflow)
{
	char body[128], *ids[64];

	ck_assert_int_le(n, (int)ELEMENTSOF(ids));
	snprintf(body, sizeof(body), "{\"workflow\":\"%s\",\"max_attempts\":1}", workflow);
	for (int i = 0; i < n; i++)
		ck_assert_ptr_nonnull(ids[i] = tu_lessor_enqueue(L, body));
	for (int i = 0; i < n; i++) {
		ck_assert_int_eq(tu_lessor_wait_status(L, ids[i], "succeeded", 30 * SEC), 0);
		free(ids[i]);
	}
}

/* Number of entries in a directory (-1 when it cannot be read). */
static int entries(const char *path)
{
	int n = 0;
	DIR *d = opendir(path);
	struct dirent *de;

	if (!d)
		return -1;
	while ((de = readdir(d)))
		n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
	closedir(d);
	return n;
}

/* The run directories are removed off the loop, after the run's end: wait
 * until <run_dir> holds only the daemon's own (empty) lessee-<pid>. */
static void wait_run_dirs_gone(const char *run_dir)
{
	usec_t end = time_mono() + 30 * SEC;

	for (;;) {
		DIR *d = opendir(run_dir);
		struct dirent *de;
		int busy = 0;

		ck_assert_ptr_nonnull(d);
		while ((de = readdir(d))) {
			char sub[PATH_MAX];

			if (de->d_name[0] == '.')
				continue;
			snprintf(sub, sizeof(sub), "%s/%s", run_dir, de->d_name);
			busy += strncmp(de->d_name, "lessee-", 7) || entries(sub) != 0;
		}
		closedir(d);
		if (!busy)
			return;
		ck_assert_msg(time_mono() < end, "run directories still there after 30 s");
		tu_sleep(10 * USEC_PER_MSEC);
	}
}

static pid_t daemon_pid(const char *run_dir)
{
	DIR *d = opendir(run_dir);
	struct dirent *de;
	pid_t pid = -1;

	ck_assert_ptr_nonnull(d);
	while ((de = readdir(d)))
		if (strncmp(de->d_name, "lessee-", 7) == 0)
			pid = (pid_t)atoi(de->d_name + 7);
	closedir(d);
	ck_assert_int_gt(pid, 0);
	return pid;
}

struct counts {
	int run_mkdirs;    /* mkdir of <run_dir>/lessee-<pid>/<run> */
	int parent_mkdirs; /* mkdir of <run_dir>/lessee-<pid> or any of its ancestors */
	int parent_paths;  /* how many distinct such paths there are */
	int dir_removals;  /* rmdir / unlinkat(AT_REMOVEDIR) of anything under run_dir */
	int renames;       /* rename* of anything under run_dir */
	int unlinks;       /* unlinkat of files under run_dir */
};

static bool is_ancestor(const char *path, const char *of)
{
	size_t n = strlen(path);

	return strncmp(path, of, n) == 0 && (of[n] == '/' || of[n] == '\0');
}

/* strace -f -y lines: `PID mkdir("/x/run/lessee-1/a.1.1", 0700) = 0`,
 * `PID unlinkat(5</x/run/lessee-1/a.1.1>, "input.json", 0) = 0`. */
static struct counts count_trace(const char *trace, const char *run_dir)
{
	_cleanup_free_ char *text = NULL, *parent = NULL;
	struct counts c = {0};
	char *save = NULL, *paths[32];
	int npaths = 0;
	regex_t mk, pid;
	regmatch_t m[2];

	ck_assert_int_eq(read_file_capped(trace, 64u << 20, &text, NULL), 0);
	ck_assert_int_eq(regcomp(&mk, "mkdir(at)?\\((AT_FDCWD, )?\"([^\"]*)\"", REG_EXTENDED), 0);
	ck_assert_int_eq(regcomp(&pid, "/lessee-[0-9]+", REG_EXTENDED), 0);
	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		regmatch_t mm[4];

		if (!parent && strstr(line, run_dir) && regexec(&pid, line, 1, m, 0) == 0) {
			const char *at = strstr(line, run_dir);

			ck_assert_int_ge(
			    asprintf(&parent, "%.*s", (int)(line + m[0].rm_eo - at), at), 0);
		}
		if (strstr(line, "rename") && strstr(line, run_dir))
			c.renames++;
		if ((strstr(line, "unlink(") || strstr(line, "unlinkat(")) &&
		    !strstr(line, "AT_REMOVEDIR") && strstr(line, run_dir))
			c.unlinks++;
		if ((strstr(line, "rmdir(") || strstr(line, "AT_REMOVEDIR")) &&
		    strstr(line, run_dir))
			c.dir_removals++;
		if (regexec(&mk, line, 4, mm, 0) != 0)
			continue;
		line[mm[3].rm_eo] = '\0';
		const char *p = line + mm[3].rm_so;

		if (parent && strncmp(p, parent, strlen(parent)) == 0 && p[strlen(parent)] == '/') {
			c.run_mkdirs++;
			continue;
		}
		if (!parent || !is_ancestor(p, parent))
			continue;
		c.parent_mkdirs++;
		bool seen = false;

		for (int i = 0; i < npaths; i++)
			seen |= strcmp(paths[i], p) == 0;
		if (!seen && npaths < (int)ELEMENTSOF(paths))
			paths[npaths++] = strdup(p);
	}
	c.parent_paths = npaths;
	for (int i = 0; i < npaths; i++)
		free(paths[i]);
	regfree(&mk);
	regfree(&pid);
	ck_assert_ptr_nonnull(parent);
	return c;
}

START_TEST(test_one_mkdir_and_one_removal_per_run)
{
	_cleanup_free_ char *trace = NULL, *run_dir = NULL, *asan = NULL;
	struct counts c;

	if (access("/usr/bin/strace", X_OK) < 0) {
		fprintf(stderr, "strace is not installed (apt-get install strace): skipped\n");
		return;
	}
	ck_assert_int_ge(asprintf(&trace, "%s/trace", tmp), 0);
	/* LeakSanitizer cannot work under ptrace; the other case checks leaks */
	ck_assert_int_ge(asprintf(&asan, "ASAN_OPTIONS=%s%sdetect_leaks=0",
	                          getenv("ASAN_OPTIONS") ? getenv("ASAN_OPTIONS") : "",
	                          getenv("ASAN_OPTIONS") ? ":" : ""),
	                 0);
	char *const env[] = {asan, NULL};
	char *const wrap[] = {"/usr/bin/strace",
	                      "-f",
	                      "-qq",
	                      "-y",
	                      "-o",
	                      trace,
	                      "-e",
	                      "trace=mkdir,mkdirat,rmdir,unlink,unlinkat,rename,renameat,renameat2",
	                      NULL};

	ck_assert_int_eq(tu_lessee_start(&(struct tu_lessee_opts){.lessor = L,
	                                                          .wrap = wrap,
	                                                          .env = env,
	                                                          .conf = "[workflow.ok]\n"
	                                                                  "command = /bin/true\n"},
	                                 &D),
	                 0);
	ck_assert_int_ge(asprintf(&run_dir, "%s/run", tu_lessee_dir(D)), 0);
	run_n(NRUNS, "ok");
	wait_run_dirs_gone(run_dir);
	/* strace keeps a SIGTERM to itself: the daemon's own pid names its directory */
	ck_assert_int_eq(kill(daemon_pid(run_dir), SIGTERM), 0);
	ck_assert_int_eq(tu_lessee_wait(D, 30 * SEC), 0);
	c = count_trace(trace, run_dir);
	fprintf(stderr,
	        "%d runs: %d run mkdirs, %d mkdirs of %d parents, %d directory removals, "
	        "%d renames, %d file unlinks\n",
	        NRUNS, c.run_mkdirs, c.parent_mkdirs, c.parent_paths, c.dir_removals, c.renames,
	        c.unlinks);
	/* one each, and the first run's that found no parent yet */
	ck_assert_int_ge(c.run_mkdirs, NRUNS);
	ck_assert_int_le(c.run_mkdirs, NRUNS + 1);
	/* each parent once, at start: not once per run */
	ck_assert_int_eq(c.parent_mkdirs, c.parent_paths);
	/* the run's own directory, once; the daemon's lessee-<pid> at exit */
	ck_assert_int_le(c.dir_removals, NRUNS + 1);
	ck_assert_int_ge(c.dir_removals, NRUNS);
	/* removed, not first renamed aside */
	ck_assert_int_eq(c.renames, 0);
	/* input.json, the one file a /bin/true run leaves */
	ck_assert_int_eq(c.unlinks, NRUNS);
}
END_TEST

/* An operator (or systemd-tmpfiles) removes run_dir while the daemon runs:
 * the next run makes it again and runs. */
START_TEST(test_run_dir_removed_is_made_again)
{
	_cleanup_free_ char *run_dir = NULL;

	ck_assert_int_eq(tu_lessee_start(&(struct tu_lessee_opts){.lessor = L,
	                                                          .conf = "[workflow.ok]\n"
	                                                                  "command = /bin/true\n"},
	                                 &D),
	                 0);
	ck_assert_int_ge(asprintf(&run_dir, "%s/run", tu_lessee_dir(D)), 0);
	run_n(2, "ok");
	wait_run_dirs_gone(run_dir);
	ck_assert_int_eq(rm_rf(run_dir), 0);
	ck_assert_int_eq(access(run_dir, F_OK), -1);
	run_n(3, "ok");
	ck_assert_int_eq(access(run_dir, F_OK), 0);
	/* and the per-daemon level alone */
	wait_run_dirs_gone(run_dir);
	DIR *d = opendir(run_dir);
	struct dirent *de;

	ck_assert_ptr_nonnull(d);
	while ((de = readdir(d)))
		if (strncmp(de->d_name, "lessee-", 7) == 0) {
			char sub[PATH_MAX];

			snprintf(sub, sizeof(sub), "%s/%s", run_dir, de->d_name);
			ck_assert_int_eq(rm_rf(sub), 0);
		}
	closedir(d);
	run_n(2, "ok");
	ck_assert_int_eq(tu_lessee_stop(D), 0);
}
END_TEST

/* A daemon with the pid of a dead predecessor (PID 1 of a container that
 * restarts) removes that predecessor's run directories at start too: its
 * own lessee-<pid> holds nothing of its own yet. */
START_TEST(test_same_pid_predecessor_cleaned)
{
	_cleanup_free_ char *runs = NULL, *left = NULL, *file = NULL, *set = NULL;
	char *args[] = {"--set", NULL, NULL};

	ck_assert_int_ge(asprintf(&runs, "%s/runs", tmp), 0);
	ck_assert_int_ge(asprintf(&left, "%s/lessee-1/r-9.1.1", runs), 0);
	ck_assert_int_ge(asprintf(&file, "%s/big", left), 0);
	ck_assert_int_ge(asprintf(&set, "worker.run_dir=%s", runs), 0);
	args[1] = set;
	ck_assert_int_eq(mkdir_p(left, 0700), 0);
	ck_assert_int_eq(write_file_atomic(file, "x", 1, 0600), 0);
	ck_assert_int_eq(tu_lessee_start(&(struct tu_lessee_opts){.lessor = L,
	                                                          .conf = "[workflow.ok]\n"
	                                                                  "command = /bin/true\n",
	                                                          .args = args,
	                                                          .pid_namespace = true},
	                                 &D),
	                 0);
	ck_assert_int_eq(tu_lessee_wait_log(D, "left by a previous lessee (pid 1)", 10 * SEC), 0);
	ck_assert_int_eq(access(left, F_OK), -1);
	run_n(2, "ok");
	ck_assert_int_eq(tu_lessee_stop(D), 0);
}
END_TEST

/* lessee killed with SIGKILL: its runs' processes run on, out of its reach
 * (only the run's first process gets a parent-death signal).  The next
 * lessee on the same run_dir finds them by the run directory in their
 * environment, kills them before it removes their directories and claims
 * anything, so the run it may be given again never runs twice at once.  A
 * grandchild that made itself a session of its own is found the same way. */
START_TEST(test_killed_predecessor_runs_stopped)
{
	_cleanup_free_ char *runs = NULL, *conf = NULL, *pids = NULL, *text = NULL, *id = NULL;
	pid_t left[2] = {0, 0};
	size_t len = 0;
	usec_t until;

	runs = tu_fmt("%s/runs", tmp);
	pids = tu_fmt("%s/pids", tmp);
	conf = tu_fmt("[worker]\nrun_dir = %s\nlease_ttl = 60s\n"
	              "[workflow.stay]\ncommand = /bin/sh -c 'sleep 1000 & a=$!; "
	              "setsid sleep 1001 & b=$!; echo \"$a $b\" > %s.tmp && mv %s.tmp %s; wait'\n",
	              runs, pids, pids, pids);
	id = tu_lessor_enqueue(L, "{\"workflow\":\"stay\",\"max_attempts\":1}");
	ck_assert_ptr_nonnull(id);
	ck_assert_int_eq(tu_lessee_start(&(struct tu_lessee_opts){.lessor = L, .conf = conf}, &D),
	                 0);
	until = time_mono() + tu_timeout(20 * SEC);
	while (read_file_capped(pids, 256, &text, &len) < 0 && time_mono() < until)
		tu_sleep(20 * USEC_PER_MSEC); /* the file is the event */
	ck_assert_ptr_nonnull(text);
	ck_assert_int_eq(sscanf(text, "%d %d", &left[0], &left[1]), 2);
	ck_assert_int_eq(tu_lessee_signal(D, SIGKILL), 0);
	tu_lessee_wait(D, tu_timeout(10 * SEC));
	D = tu_lessee_free(D);
	for (int i = 0; i < 2; i++)
		ck_assert_msg(tu_pid_alive(left[i]), "pid %d gone with the daemon", left[i]);
	ck_assert_int_eq(tu_lessee_start(&(struct tu_lessee_opts){.lessor = L, .conf = conf}, &D),
	                 0);
	until = time_mono() + tu_timeout(10 * SEC);
	while ((tu_pid_alive(left[0]) || tu_pid_alive(left[1])) && time_mono() < until)
		tu_sleep(20 * USEC_PER_MSEC);
	bool alive[2] = {tu_pid_alive(left[0]), tu_pid_alive(left[1])};

	for (int i = 0; i < 2; i++)
		if (alive[i])
			kill(left[i], SIGKILL); /* nothing left behind by the test */
	for (int i = 0; i < 2; i++)
		ck_assert_msg(!alive[i], "pid %d of the killed lessee's run runs on", left[i]);
	/* each counted once, though a killed one may still be there at the next pass */
	ck_assert_int_eq(tu_lessee_wait_log(
	                     D, "killed 2 processes left running by runs of a previous lessee", 0),
	                 0);
	ck_assert_int_eq(tu_lessee_quit(D), 0);
}
END_TEST

/* What a run leaves that rm_rf cannot walk past by default (a tree deeper
 * than 256, a directory it made mode 000) goes at the run's end. */
START_TEST(test_hostile_trees_removed)
{
	static const char deep[] = "#!/bin/sh\ni=0\nwhile [ $i -lt 300 ]; do\n"
	                           "mkdir d && cd d || exit 1\ni=$((i+1))\ndone\necho x > f\n";
	static const char shut[] = "#!/bin/sh\nmkdir s && echo x > s/f && chmod 000 s . \n";
	_cleanup_free_ char *run_dir = NULL, *conf = NULL, *d = NULL, *s = NULL;

	ck_assert_int_ge(asprintf(&d, "%s/deep.sh", tmp), 0);
	ck_assert_int_ge(asprintf(&s, "%s/shut.sh", tmp), 0);
	ck_assert_int_eq(write_file_atomic(d, deep, strlen(deep), 0755), 0);
	ck_assert_int_eq(write_file_atomic(s, shut, strlen(shut), 0755), 0);
	ck_assert_int_ge(
	    asprintf(&conf, "[workflow.deep]\ncommand = %s\n[workflow.shut]\ncommand = %s\n", d, s),
	    0);
	ck_assert_int_eq(tu_lessee_start(&(struct tu_lessee_opts){.lessor = L, .conf = conf}, &D),
	                 0);
	ck_assert_int_ge(asprintf(&run_dir, "%s/run", tu_lessee_dir(D)), 0);
	run_n(1, "deep");
	run_n(1, "shut");
	wait_run_dirs_gone(run_dir);
	ck_assert_int_eq(tu_lessee_stop(D), 0);
}
END_TEST

static Suite *runfiles_suite(void)
{
	Suite *s = suite_create("runfiles");
	TCase *tc = tcase_create("runfiles");

	tcase_set_timeout(tc, 120);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_add_test(tc, test_one_mkdir_and_one_removal_per_run);
	tcase_add_test(tc, test_run_dir_removed_is_made_again);
	tcase_add_test(tc, test_same_pid_predecessor_cleaned);
	tcase_add_test(tc, test_killed_predecessor_runs_stopped);
	tcase_add_test(tc, test_hostile_trees_removed);
	suite_add_tcase(s, tc);
	return s;
}

int main(void)
{
	return tu_run(runfiles_suite());
}
