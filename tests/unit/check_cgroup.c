/* lib/exec/cgroup.h and the cgroup side of exec_spawn: locating our cgroup v2
 * from /proc texts (unified, hybrid, namespaced, subtree mounts), taking a
 * subtree (supervisor/, runs/<pid>/, leftovers of a dead daemon killed and
 * removed), the fallbacks, and a child started in its cgroup whose setsid
 * grandchild dies with the ladder's SIGKILL, in both clone modes.
 *
 * The cases that need a real cgroup make one under ours (root may) and are
 * skipped where that is impossible (exit 77). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "exec/cgroup.h"
#include "exec/exec-int.h"
#include "exec/exec.h"
#include "obs/status_cli.h"
#include "testutil.h"
#include "util/buf.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"

#define WAIT (10 * USEC_PER_SEC)

static char own_dir[PATH_MAX];   /* the cgroup this test process started in */
static char mount_dir[PATH_MAX]; /* the cgroup2 mount */
static char test_dir[PATH_MAX];  /* ours for the test, empty when impossible */
static const char *skip_why;

/* ---------------------------------------------------------------- locate */

static const char hybrid_mi[] =
    "24 29 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n"
    "30 24 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755\n"
    "31 30 0:27 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - "
    "cgroup2 cgroup2 rw,nsdelegate\n"
    "32 30 0:28 / /sys/fs/cgroup/systemd rw,nosuid shared:11 - cgroup cgroup "
    "rw,xattr,name=systemd\n";
static const char hybrid_cg[] = "12:memory:/system.slice/lessee.service\n"
                                "1:name=systemd:/system.slice/lessee.service\n"
                                "0::/system.slice/lessee.service\n";

static char *locate(const char *cg, const char *mi, int want)
{
	char *dir = NULL;

	ck_assert_int_eq(cgroup_locate(cg, mi, &dir), want);
	return dir;
}

START_TEST(test_locate)
{
	_cleanup_free_ char *d1 = NULL, *d2 = NULL, *d3 = NULL, *d4 = NULL, *d5 = NULL;

	d1 = locate(hybrid_cg, hybrid_mi, 0);
	ck_assert_str_eq(d1, "/sys/fs/cgroup/unified/system.slice/lessee.service");
	/* unified, and the root cgroup */
	d2 = locate("0::/\n", "35 24 0:30 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", 0);
	ck_assert_str_eq(d2, "/sys/fs/cgroup");
	/* a container's subtree mounted at its root; a mount point with a space */
	d3 = locate("0::/payload/x\n",
	            "40 1 0:30 /payload /sys/fs/cgroup\\040x rw - cgroup2 cgroup2 rw\n", 0);
	ck_assert_str_eq(d3, "/sys/fs/cgroup x/x");
	d4 = locate("0::/payload\n", "40 1 0:30 /payload /cg rw - cgroup2 cgroup2 rw\n", 0);
	ck_assert_str_eq(d4, "/cg");
	/* optional fields before the separator */
	d5 = locate("0::/a\n", "40 1 0:30 / /cg rw shared:1 master:2 - cgroup2 none rw\n", 0);
	ck_assert_str_eq(d5, "/cg/a");
	/* outside the mounted subtree, a sibling whose name shares the prefix */
	ck_assert_ptr_null(
	    locate("0::/other\n", "40 1 0:30 /payload /cg rw - cgroup2 c rw\n", -EXDEV));
	ck_assert_ptr_null(
	    locate("0::/payload2\n", "40 1 0:30 /payload /cg rw - cgroup2 c rw\n", -EXDEV));
	/* no cgroup2 mount (legacy), no 0:: line */
	ck_assert_ptr_null(locate(hybrid_cg,
	                          "32 30 0:28 / /sys/fs/cgroup/systemd rw - cgroup "
	                          "cgroup rw,name=systemd\n",
	                          -ENOENT));
	ck_assert_ptr_null(locate("1:name=systemd:/\n", hybrid_mi, -ENOENT));
	ck_assert_ptr_null(locate("", "", -ENOENT));
}
END_TEST

/* ---------------------------------------------------------------- a real cgroup */

static int find_own(void)
{
	_cleanup_free_ char *cg = NULL, *mi = NULL, *dir = NULL;
	char *line, *save = NULL;

	if (read_file_capped("/proc/self/cgroup", 1 << 16, &cg, NULL) < 0 ||
	    read_file_capped("/proc/self/mountinfo", 1 << 22, &mi, NULL) < 0 ||
	    cgroup_locate(cg, mi, &dir) < 0)
		return -ENOENT;
	snprintf(own_dir, sizeof(own_dir), "%s", dir);
	for (line = strtok_r(mi, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
		if (strstr(line, " - cgroup2 ") &&
		    sscanf(line, "%*s %*s %*s %*s %4095s", mount_dir) == 1)
			break;
	return 0;
}

static int cg_write(const char *dir, const char *file, const char *text)
{
	char p[PATH_MAX + 64];
	_cleanup_close_ int fd = -1;

	snprintf(p, sizeof(p), "%s/%s", dir, file);
	fd = open(p, O_WRONLY | O_CLOEXEC);
	return fd < 0 ? -errno : write_all(fd, text, strlen(text));
}

static void move_to(const char *dir)
{
	char pid[32];

	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	ck_assert_int_eq(cg_write(dir, "cgroup.procs", pid), 0);
}

/* rmdir -p style, depth first, killing what is left. */
static void cg_remove(const char *dir)
{
	_cleanup_free_ char *cmd = NULL;

	/* find lists parents first; -depth children first */
	if (asprintf(&cmd,
	             "[ -d '%1$s' ] || exit 0; "
	             "find '%1$s' -depth -type d | while read -r d; do "
	             "echo 1 >\"$d/cgroup.kill\" 2>/dev/null; i=0; "
	             "until rmdir \"$d\" 2>/dev/null || [ $i -ge 200 ]; do "
	             "i=$((i+1)); sleep 0.02; done; done",
	             dir) < 0)
		return;
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", dir);
}

static bool exists(const char *fmt, ...) _printf_(1, 2);
static bool exists(const char *fmt, ...)
{
	char p[PATH_MAX * 2];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(p, sizeof(p), fmt, ap);
	va_end(ap);
	return access(p, F_OK) == 0;
}

static void setup(void)
{
	if (!test_dir[0])
		return;
	ck_assert_msg(mkdir(test_dir, 0755) == 0 || errno == EEXIST, "mkdir %s", test_dir);
}

static void teardown(void)
{
	if (!test_dir[0])
		return;
	move_to(own_dir);
	cg_remove(test_dir);
}

static char *cgroup_of(pid_t pid)
{
	char path[64], *text = NULL, *p;

	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
	if (read_file_capped(path, 1 << 16, &text, NULL) < 0)
		return strdup("(gone)");
	p = strstr(text, "0::");
	if (p) {
		memmove(text, p + 3, strlen(p + 3) + 1);
		text[strcspn(text, "\n")] = '\0';
	}
	return text;
}

static bool pid_gone(pid_t pid)
{
	return tu_wait_pid_gone(pid, WAIT);
}

/* ---------------------------------------------------------------- exec */

struct run {
	struct buf out;
	struct exec_result res;
	int exits;
	exec_proc_t *p;
};

static void on_output(exec_proc_t *p, int stream, const void *data, size_t len, void *userdata)
{
	struct run *r = userdata;

	r->out.cap = 1 << 16;
	ck_assert_int_eq(buf_append(&r->out, data, len), 0);
}

static void on_exit_cb(exec_proc_t *p, const struct exec_result *res, void *userdata)
{
	struct run *r = userdata;

	r->res = *res;
	r->exits++;
}

#define RUN_UNTIL(e, cond)                                                                         \
	do {                                                                                       \
		usec_t end_ = time_mono() + WAIT;                                                  \
		while (!(cond)) {                                                                  \
			ck_assert_msg(time_mono() < end_, "timed out waiting for %s", #cond);      \
			ck_assert_int_ge(ev_run_once((e), 100 * USEC_PER_MSEC), 0);                \
		}                                                                                  \
	} while (0)

/* "pid gpid\n" once both run: the main process and a grandchild that left
 * the group and the session. */
static char *escape_argv[] = {"/bin/sh", "-c",
                              "setsid sh -c 'echo $$ >&3; exec sleep 1000' 3>&1 "
                              "</dev/null >/dev/null 2>&1 & sleep 0.1; echo $$; "
                              "exec sleep 1000",
                              NULL};
static char *env[] = {"PATH=/usr/bin:/bin", NULL};

static void read_pids(ev_t *e, struct run *r, pid_t *pid, pid_t *gpid)
{
	int a = 0, b = 0;

	RUN_UNTIL(e, r->out.len > 0 && memchr(r->out.data, '\n', r->out.len) &&
	                 strchr(strchr(r->out.data, '\n') + 1, '\n'));
	ck_assert_int_eq(sscanf(r->out.data, "%d\n%d", &b, &a), 2);
	*gpid = b; /* the grandchild writes first (the parent sleeps) */
	*pid = a;
}

/* The child runs in spec.cgroup; its setsid grandchild too; the ladder's
 * SIGKILL (grace 0 here, and after a TERM that the grandchild never gets)
 * kills both. */
static void escape_and_kill(enum exec_clone_mode mode, usec_t grace)
{
	char run_dir[PATH_MAX + 16];
	struct exec_spec spec = {.path = escape_argv[0],
	                         .argv = escape_argv,
	                         .envp = env,
	                         .stdin_fd = -1,
	                         .cgroup = run_dir};
	struct run r = {0};
	_cleanup_free_ char *cg = NULL, *gcg = NULL;
	const char *step = NULL;
	pid_t pid, gpid;
	ev_t *e = NULL;
	int rc;

	if (!test_dir[0])
		return;
	snprintf(run_dir, sizeof(run_dir), "%s/r1", test_dir);
	ck_assert_int_eq(mkdir(run_dir, 0755), 0);
	ck_assert_int_eq(ev_new(&e, NULL), 0);
	exec_set_clone_mode(mode);
	rc = exec_spawn(e, &spec, on_output, on_exit_cb, &r, &r.p, &step);
	exec_set_clone_mode(EXEC_CLONE_VFORK);
	if (rc == -ENOSYS && mode == EXEC_CLONE_FORK) { /* valgrind has no clone3 */
		ev_free(e);
		(void)rmdir(run_dir);
		return;
	}
	ck_assert_int_eq(rc, 0);
	read_pids(e, &r, &pid, &gpid);
	ck_assert_int_eq(pid, exec_pid(r.p));
	cg = cgroup_of(pid);
	gcg = cgroup_of(gpid);
	ck_assert_msg(strstr(cg, "/r1") && streq(cg, gcg), "child in %s, grandchild in %s", cg,
	              gcg);
	ck_assert_int_eq(exec_kill(r.p, grace), 0);
	RUN_UNTIL(e, r.exits == 1);
	ck_assert(r.res.killed);
	ck_assert_msg(pid_gone(gpid), "the setsid grandchild %d survived", (int)gpid);
	r.p = exec_free(r.p);
	buf_done(&r.out);
	ev_free(e);
	for (int i = 0; i < 500 && rmdir(run_dir) < 0 && errno == EBUSY; i++)
		tu_sleep(20 * USEC_PER_MSEC);
	ck_assert(!exists("%s", run_dir));
}

START_TEST(test_exec_kill_now)
{
	escape_and_kill(EXEC_CLONE_VFORK, 0);
}
END_TEST

START_TEST(test_exec_kill_ladder)
{
	escape_and_kill(EXEC_CLONE_VFORK, 200 * USEC_PER_MSEC);
}
END_TEST

START_TEST(test_exec_kill_fork_mode)
{
	escape_and_kill(EXEC_CLONE_FORK, 0);
}
END_TEST

/* The main process exits by itself: what is left in its cgroup is killed
 * (as its group is), unless keep_group_on_exit. */
START_TEST(test_exec_exit_kills_cgroup)
{
	char *argv[] = {"/bin/sh", "-c",
	                "setsid sh -c 'echo $$; exec sleep 1000' </dev/null & sleep 0.2; exit 4",
	                NULL};
	char run_dir[PATH_MAX + 16];
	struct exec_spec spec = {.path = argv[0],
	                         .argv = argv,
	                         .envp = env,
	                         .stdin_fd = -1,
	                         .cgroup = run_dir,
	                         .output_drain = 100 * USEC_PER_MSEC};
	struct run r = {0};
	const char *step = NULL;
	int gpid = 0;
	ev_t *e = NULL;

	if (!test_dir[0])
		return;
	snprintf(run_dir, sizeof(run_dir), "%s/r2", test_dir);
	ck_assert_int_eq(mkdir(run_dir, 0755), 0);
	ck_assert_int_eq(ev_new(&e, NULL), 0);
	ck_assert_int_eq(exec_spawn(e, &spec, on_output, on_exit_cb, &r, &r.p, &step), 0);
	RUN_UNTIL(e, r.exits == 1);
	ck_assert_int_eq(r.res.exit_code, 4);
	ck_assert_int_eq(sscanf(r.out.data, "%d", &gpid), 1);
	ck_assert_msg(pid_gone(gpid), "the setsid grandchild %d survived its run", gpid);
	r.p = exec_free(r.p);
	buf_done(&r.out);
	ev_free(e);
}
END_TEST

/* A cgroup that is not there: the spawn fails at step "cgroup", nothing runs. */
START_TEST(test_exec_bad_cgroup)
{
	char *argv[] = {"/bin/true", NULL};
	struct exec_spec spec = {.path = argv[0],
	                         .argv = argv,
	                         .envp = env,
	                         .stdin_fd = -1,
	                         .cgroup = "/nonexistent/cgroup"};
	struct run r = {0};
	const char *step = NULL;
	ev_t *e = NULL;

	ck_assert_int_eq(ev_new(&e, NULL), 0);
	ck_assert_int_eq(exec_spawn(e, &spec, on_output, on_exit_cb, &r, &r.p, &step), -ENOENT);
	ck_assert_str_eq(step, "cgroup");
	ck_assert_ptr_null(r.p);
	ev_free(e);
}
END_TEST

/* ---------------------------------------------------------------- the tree */

START_TEST(test_tree)
{
	char why[256] = "", left[PATH_MAX + 64], pid[32];
	_cleanup_free_ char *where = NULL, *cmd = NULL;
	cgroup_tree_t *t = NULL;
	cgroup_run_t *a = NULL, *b = NULL;
	ev_t *e = NULL;
	int gpid = 0;
	FILE *f;

	if (!test_dir[0])
		return;
	/* a dead daemon's run, still with a process in it */
	snprintf(left, sizeof(left), "%s/runs/999999999/old.1", test_dir);
	ck_assert_int_eq(mkdir_p(left, 0755), 0);
	ck_assert_int_ge(asprintf(&cmd,
	                          "sh -c 'echo $$ >\"%s/cgroup.procs\"; exec setsid sleep 1000' "
	                          "</dev/null >/dev/null 2>&1 & echo $!",
	                          left),
	                 0);
	f = popen(cmd, "r");
	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(fscanf(f, "%d", &gpid), 1);
	pclose(f);
	ck_assert_int_eq(ev_new(&e, NULL), 0);
	ck_assert_int_eq(cgroup_tree_open(e, test_dir, &t, why, sizeof(why)), 1);
	ck_assert_str_eq(cgroup_tree_path(t), test_dir);
	where = cgroup_of(getpid());
	ck_assert_msg(strstr(where, "/supervisor"), "we are in %s", where);
	snprintf(pid, sizeof(pid), "%d", (int)getpid());
	ck_assert(exists("%s/runs/%s", test_dir, pid));
	/* two runs with one name: two cgroups */
	ck_assert_int_eq(cgroup_run_new(t, "a/b\n..", &a), 0);
	ck_assert_int_eq(cgroup_run_new(t, "a/b\n..", &b), 0);
	ck_assert_str_ne(cgroup_run_path(a), cgroup_run_path(b));
	ck_assert(strstr(cgroup_run_path(a), "/runs/") && !strstr(cgroup_run_path(a), "\n"));
	ck_assert(exists("%s", cgroup_run_path(a)));
	ck_assert_ptr_null(cgroup_run_free(a));
	ck_assert(exists("%s", cgroup_run_path(b)));
	ck_assert_ptr_null(cgroup_run_free(b));
	/* the leftover is killed and removed from the timer; so is the empty run */
	RUN_UNTIL(e, !exists("%s/runs/999999999", test_dir));
	ck_assert(pid_gone(gpid));
	ck_assert_ptr_null(cgroup_tree_free(t));
	ck_assert(!exists("%s/runs/%s", test_dir, pid));
	ev_free(e);
}
END_TEST

START_TEST(test_tree_fallbacks)
{
	char why[256];
	cgroup_tree_t *t = (cgroup_tree_t *)1;
	ev_t *e = NULL;

	ck_assert_int_eq(ev_new(&e, NULL), 0);
	ck_assert_int_eq(cgroup_tree_open(e, "/tmp", &t, why, sizeof(why)), 0);
	ck_assert_ptr_null(t);
	ck_assert_msg(strstr(why, "no cgroup v2 directory"), "%s", why);
	if (mount_dir[0] && !exists("%s/cgroup.events", mount_dir)) {
		/* the real root: never ours to organise.  systemd-nspawn, started
		 * from the root cgroup, makes a supervisor/ there of its own. */
		bool had = exists("%s/supervisor", mount_dir);

		ck_assert_int_eq(cgroup_tree_open(e, mount_dir, &t, why, sizeof(why)), 0);
		ck_assert_ptr_null(t);
		ck_assert_msg(strstr(why, "root cgroup"), "%s", why);
		ck_assert(had || !exists("%s/supervisor", mount_dir));
	}
	ev_free(e);
}
END_TEST

/* ---------------------------------------------------------------- status */

static char *print_doc(const char *doc)
{
	char *text = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&text, &len);

	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(status_cli_print(doc, strlen(doc), f), 0);
	fclose(f);
	return text;
}

START_TEST(test_status_cli)
{
	_cleanup_free_ char *cg = NULL, *pg = NULL, *old = NULL;

	cg = print_doc("{\"phase\":\"running\",\"kill_mode\":\"cgroup\","
	               "\"cgroup\":\"/sys/fs/cgroup/system.slice/lessee.service\"}");
	ck_assert_msg(strstr(cg, "\nkill mode  cgroup (/sys/fs/cgroup/system.slice/"
	                         "lessee.service)\n"),
	              "%s", cg);
	pg = print_doc("{\"phase\":\"running\",\"kill_mode\":\"process_group\","
	               "\"kill_mode_reason\":\"lessee is in the root cgroup (not delegated)\"}");
	ck_assert_msg(strstr(pg, "\nkill mode  process group (lessee is in the root cgroup "
	                         "(not delegated))\n"),
	              "%s", pg);
	old = print_doc("{\"phase\":\"running\"}");
	ck_assert_ptr_null(strstr(old, "kill mode"));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("cgroup");
	TCase *tc = tcase_create("cgroup");
	int r;

	if (find_own() < 0)
		skip_why = "no cgroup v2 hierarchy";
	else {
		snprintf(test_dir, sizeof(test_dir), "%.3900s/lessee-unit-cgroup-%d", own_dir,
		         (int)getpid());
		if (mkdir(test_dir, 0755) < 0 && errno != EEXIST)
			skip_why = "cannot create a cgroup under ours";
		else if (!exists("%s/cgroup.kill", test_dir))
			skip_why = "no cgroup.kill (Linux 5.14)";
		if (skip_why) {
			(void)rmdir(test_dir);
			test_dir[0] = '\0';
		}
	}
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 30);
	tcase_add_test(tc, test_locate);
	tcase_add_test(tc, test_exec_kill_now);
	tcase_add_test(tc, test_exec_kill_ladder);
	tcase_add_test(tc, test_exec_kill_fork_mode);
	tcase_add_test(tc, test_exec_exit_kills_cgroup);
	tcase_add_test(tc, test_exec_bad_cgroup);
	tcase_add_test(tc, test_tree);
	tcase_add_test(tc, test_tree_fallbacks);
	tcase_add_test(tc, test_status_cli);
	suite_add_tcase(s, tc);
	r = tu_run(s);
	if (test_dir[0])
		cg_remove(test_dir);
	if (r != 0)
		return EXIT_FAILURE;
	if (skip_why) {
		fprintf(stderr, "check_cgroup: %s here: the cgroup cases were skipped\n", skip_why);
		return 77;
	}
	return EXIT_SUCCESS;
}
