/* The kill ladder in cgroup mode: a run's job starts a grandchild that leaves
 * the process group (setsid) and then the run is stopped (timeout, cancel,
 * lease lost).  With a writable cgroup v2 subtree the daemon puts each run in
 * its own cgroup and ends the ladder with cgroup.kill: the grandchild is dead
 * afterwards and the run's cgroup is removed; after a kill -9 of the daemon the
 * next one kills what the dead one left.  Without one (the hierarchy
 * mounted read-only, as systemd's ProtectControlGroups=yes does) it falls back
 * to process groups and says so in its status, metrics and log.
 *
 * The test makes a cgroup of its own under its cgroup (root may), starts the
 * daemon in it (a shell writes its pid to cgroup.procs, then execs lessee) and
 * removes it at the end.  Where no writable cgroup v2 with cgroup.kill (Linux
 * 5.14) exists the cgroup cases are skipped (exit 77). */
#include <cJSON.h>
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lessee_proc.h"
#include "lessor_proc.h"
#include "promparse.h"
#include "jsonutil.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"

#define SEC USEC_PER_SEC

static struct tu_lessor *L;
static struct tu_lessee *D;
static char *scripts;           /* the workflow's script and the grandchild's pid file */
static char cg_mount[PATH_MAX]; /* the cgroup2 mount point */
static char cg_test[PATH_MAX];  /* our cgroup for the daemon, empty when none */
static const char *no_cgroup;   /* why the cgroup cases cannot run here */

/* ---------------------------------------------------------------- cgroups */

/* The cgroup2 mount and the cgroup we are in, from mountinfo and /proc/self/cgroup. */
static int find_own_cgroup(char *ret, size_t n)
{
	_cleanup_free_ char *mi = NULL, *cg = NULL;
	char root[PATH_MAX] = "", mnt[PATH_MAX] = "";
	const char *rel;
	char *own, *line, *save = NULL;

	if (read_file_capped("/proc/self/mountinfo", 1 << 22, &mi, NULL) < 0 ||
	    read_file_capped("/proc/self/cgroup", 1 << 16, &cg, NULL) < 0)
		return -EIO;
	for (line = strtok_r(mi, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		const char *dash = strstr(line, " - cgroup2 ");

		if (dash && sscanf(line, "%*s %*s %*s %4095s %4095s", root, mnt) == 2)
			break;
		mnt[0] = '\0';
	}
	own = strstr(cg, "0::/");
	if (!mnt[0] || !own || (own != cg && own[-1] != '\n'))
		return -ENOENT;
	own += 3;
	own[strcspn(own, "\n")] = '\0';
	rel = streq(root, "/") ? own : startswith(own, root);
	if (!rel)
		return -ENOENT;
	snprintf(cg_mount, sizeof(cg_mount), "%s", mnt);
	snprintf(ret, n, "%s%s", mnt, streq(rel, "/") ? "" : rel);
	return 0;
}

static bool exists_at(const char *dir, const char *name)
{
	char p[PATH_MAX + 64];

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return access(p, F_OK) == 0;
}

static void cg_write(const char *dir, const char *file, const char *text)
{
	char p[PATH_MAX + 64];
	int fd;

	snprintf(p, sizeof(p), "%s/%s", dir, file);
	fd = open(p, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	(void)!write(fd, text, strlen(text));
	close(fd);
}

/* Depth first: kill what is left in each, then rmdir (retrying while it empties). */
static void cg_remove(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	usec_t end;

	if (!d)
		return;
	while ((de = readdir(d))) {
		char sub[PATH_MAX + 256];

		if (de->d_type != DT_DIR || de->d_name[0] == '.')
			continue;
		snprintf(sub, sizeof(sub), "%s/%s", dir, de->d_name);
		cg_remove(sub);
	}
	closedir(d);
	cg_write(dir, "cgroup.kill", "1");
	end = time_mono() + 10 * SEC;
	while (rmdir(dir) < 0 && errno == EBUSY && time_mono() < end)
		tu_sleep(20 * USEC_PER_MSEC);
}

/* A cgroup of our own with cgroup.kill, or why not. */
static void cg_probe(void)
{
	char own[PATH_MAX];

	if (find_own_cgroup(own, sizeof(own)) < 0) {
		no_cgroup = "no cgroup v2 hierarchy";
		return;
	}
	snprintf(cg_test, sizeof(cg_test), "%.3900s/lessee-check-cgroup-%d", own, (int)getpid());
	cg_remove(cg_test);
	if (mkdir(cg_test, 0755) < 0) {
		no_cgroup = "cannot create a cgroup under ours";
		cg_test[0] = '\0';
	} else if (!exists_at(cg_test, "cgroup.kill")) {
		no_cgroup = "no cgroup.kill (Linux 5.14)";
		cg_remove(cg_test);
		cg_test[0] = '\0';
	}
}

/* A NULL-terminated copy of the arguments (free with strv_free). */
static char **strv_make(const char *first, ...)
{
	char **v = calloc(16, sizeof(char *));
	va_list ap;
	size_t n = 0;

	ck_assert_ptr_nonnull(v);
	va_start(ap, first);
	for (const char *a = first; a && n < 15; a = va_arg(ap, const char *))
		ck_assert_ptr_nonnull(v[n++] = strdup(a));
	va_end(ap);
	return v;
}

/* The daemon starts in cg_test; ro: with the cgroup2 mount read-only in its own
 * mount namespace (ProtectControlGroups=yes). */
static char **cg_wrap(bool ro)
{
	char *script = NULL;
	char **argv;

	if (ro)
		ck_assert_int_ge(asprintf(&script,
		                          "echo $$ >\"$0/cgroup.procs\" && "
		                          "mount -o remount,bind,ro '%s' && exec \"$@\"",
		                          cg_mount),
		                 0);
	else
		script = strdup("echo $$ >\"$0/cgroup.procs\" && exec \"$@\"");
	ck_assert_ptr_nonnull(script);
	if (ro)
		argv = strv_make("unshare", "-m", "--propagation", "private", "/bin/sh", "-c",
		                 script, cg_test, NULL);
	else
		argv = strv_make("/bin/sh", "-c", script, cg_test, NULL);
	free(script);
	ck_assert_ptr_nonnull(argv);
	return argv;
}

/* ---------------------------------------------------------------- fixture */

static void write_script(const char *name, const char *body)
{
	char path[512];
	_cleanup_free_ char *text = NULL;

	snprintf(path, sizeof(path), "%s/%s", scripts, name);
	ck_assert_int_ge(asprintf(&text, "#!/bin/sh\n%s\n", body), 0);
	ck_assert_int_eq(write_file_atomic(path, text, strlen(text), 0755), 0);
}

static void setup(void)
{
	if (cg_test[0] && mkdir(cg_test, 0755) < 0 && errno != EEXIST)
		ck_abort_msg("mkdir %s: %s", cg_test, strerror(errno));
	scripts = tu_tmpdir("cgroup");
	ck_assert_ptr_nonnull(scripts);
	/* The grandchild leaves the process group and the session, and writes
	 * its own pid; the job then waits. */
	write_script("escape.sh", "setsid sh -c 'echo $$ >\"$0\"; exec sleep 1000' "
	                          "\"$LESSEE_RUN_ID.gpid\" </dev/null >/dev/null 2>&1 &\n"
	                          "echo pid=$$\nexec sleep 1000");
	ck_assert_int_eq(tu_lessor_start(&(struct tu_lessor_opts){.token = "t0ken"}, &L), 0);
}

static void start_lessee(char **wrap)
{
	_cleanup_free_ char *conf = NULL;

	ck_assert_int_ge(asprintf(&conf,
	                          "[worker]\nkill_grace = 1s\n"
	                          "[status]\nlisten = 127.0.0.1:0\n"
	                          "[workflow.escape]\ncommand = %s/escape.sh\n"
	                          "working_directory = %s\n"
	                          "[workflow.escape_timeout]\ncommand = %s/escape.sh\n"
	                          "working_directory = %s\ntimeout = 1s\n",
	                          scripts, scripts, scripts, scripts),
	                 0);
	ck_assert_int_eq(
	    tu_lessee_start(&(struct tu_lessee_opts){.lessor = L, .conf = conf, .wrap = wrap}, &D),
	    0);
}

static void teardown(void)
{
	int st = D ? tu_lessee_quit(D) : 0;

	D = tu_lessee_free(D);
	L = tu_lessor_free(L);
	if (cg_test[0]) /* whatever escaped is killed here, also on main */
		cg_remove(cg_test);
	if (scripts)
		rm_rf(scripts);
	free(scripts);
	scripts = NULL;
	ck_assert_msg(st == 0, "lessee exited with %d", st);
}

/* ---------------------------------------------------------------- helpers */

static char *enqueue(const char *workflow)
{
	char *id = tu_lessor_enqueue_one(L, workflow);

	ck_assert_ptr_nonnull(id);
	return id;
}

static cJSON *admin(const char *method, const char *path)
{
	long status = 0;
	cJSON *resp = NULL;

	ck_assert_int_eq(tu_lessor_json(L, method, path, NULL, &status, &resp), 0);
	ck_assert_msg(status == 200, "%s %s: HTTP %ld", method, path, status);
	return resp;
}

/* The pid the grandchild wrote, once it is there. */
static pid_t grandchild_pid(const char *id)
{
	char path[PATH_MAX];
	usec_t end = time_mono() + tu_timeout(15 * SEC);

	snprintf(path, sizeof(path), "%s/%s.gpid", scripts, id);
	do {
		_cleanup_free_ char *text = NULL;

		if (read_file_capped(path, 64, &text, NULL) >= 0 && strchr(text, '\n'))
			return (pid_t)atoi(text);
		tu_sleep(20 * USEC_PER_MSEC);
	} while (time_mono() < end);
	ck_abort_msg("run %s: the grandchild wrote no pid to %s", id, path);
	return -1;
}

static bool wait_dead(pid_t pid, usec_t timeout)
{
	usec_t end = time_mono() + tu_timeout(timeout);

	while (tu_pid_alive(pid))
		if (time_mono() > end)
			return false;
		else
			tu_sleep(20 * USEC_PER_MSEC);
	return true;
}

static char *proc_cgroup(pid_t pid)
{
	char path[64];
	char *text = NULL;

	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
	if (read_file_capped(path, 1 << 16, &text, NULL) < 0)
		return strdup("(gone)");
	return text;
}

/* The directory of the cgroup a /proc/PID/cgroup text names (under cg_test). */
static char *cgroup_dir_of(const char *where)
{
	const char *p = strstr(where, "/lessee-check-cgroup-");
	const char *base = strrchr(cg_test, '/');
	char *dir = NULL;

	ck_assert_ptr_nonnull(p);
	ck_assert_int_ge(
	    asprintf(&dir, "%.*s%.*s", (int)(base - cg_test), cg_test, (int)strcspn(p, "\n"), p),
	    0);
	return dir;
}

static bool wait_gone(const char *dir, usec_t timeout)
{
	usec_t end = time_mono() + tu_timeout(timeout);

	while (access(dir, F_OK) == 0)
		if (time_mono() > end)
			return false;
		else
			tu_sleep(20 * USEC_PER_MSEC);
	return true;
}

static cJSON *status_doc(void)
{
	long code = 0;
	_cleanup_free_ char *body = tu_lessee_status_get(D, "/status", &code);
	cJSON *j;

	ck_assert_msg(body && code == 200, "GET /status: %ld", code);
	j = cJSON_Parse(body);
	ck_assert_ptr_nonnull(j);
	return j;
}

static double kill_mode_metric(const char *mode)
{
	long code = 0;
	_cleanup_free_ char *text = tu_lessee_status_get(D, "/metrics", &code);
	prom_doc_t *doc = NULL;
	double v;

	ck_assert_ptr_nonnull(text);
	ck_assert_int_eq(prom_parse(text, strlen(text), &doc, NULL), 0);
	v = prom_value(doc, "lessee_kill_mode", "mode", mode, NULL);
	prom_free(doc);
	return v;
}

/* ---------------------------------------------------------------- tests */

enum stop_how { STOP_TIMEOUT, STOP_CANCEL, STOP_LEASE_LOST, _STOP_MAX };
static const char *const stop_names[_STOP_MAX] = {"timeout", "cancel", "lease lost"};

/* The run is stopped while its setsid grandchild lives: in cgroup mode the
 * grandchild dies with the run, and the run's cgroup goes away. */
START_TEST(test_setsid_killed)
{
	enum stop_how how = (enum stop_how)_i;
	_cleanup_free_ char *id = NULL, *path = NULL, *where = NULL, *dir = NULL;
	_cleanup_(strv_freep) char **wrap = NULL;
	pid_t gpid;

	if (!cg_test[0])
		return;
	wrap = cg_wrap(false);
	start_lessee(wrap);
	id = enqueue(how == STOP_TIMEOUT ? "escape_timeout" : "escape");
	gpid = grandchild_pid(id);
	where = proc_cgroup(gpid);
	switch (how) {
	case STOP_TIMEOUT:
		break;
	case STOP_CANCEL:
		ck_assert_int_ge(asprintf(&path, "/v1/runs/%s/cancel", id), 0);
		cJSON_Delete(admin("POST", path));
		break;
	case STOP_LEASE_LOST:
		ck_assert_int_ge(asprintf(&path, "/v1/runs/%s/requeue", id), 0);
		cJSON_Delete(admin("POST", path));
		ck_assert_int_eq(tu_lessee_wait_log(D, "lease lost", tu_timeout(10 * SEC)), 0);
		break;
	default:
		ck_abort();
	}
	/* timeout 1 s or a lease refresh to notice, kill_grace 1 s, slack */
	ck_assert_msg(wait_dead(gpid, 10 * SEC), "%s: the setsid grandchild %d survived the run",
	              stop_names[how], (int)gpid);
	ck_assert_msg(strstr(where, "/lessee-check-cgroup-") && strstr(where, "/runs/"),
	              "the grandchild %d was not in a run cgroup: %s", (int)gpid, where);
	dir = cgroup_dir_of(where);
	ck_assert_msg(wait_gone(dir, 10 * SEC), "%s: the run's cgroup %s was not removed",
	              stop_names[how], dir);
}
END_TEST

/* kill -9 of the daemon: the run's setsid grandchild outlives it in the run's
 * cgroup (its main process dies of PR_SET_PDEATHSIG); the next daemon in the
 * same cgroup kills it and removes what the dead one left. */
START_TEST(test_leftovers_after_crash)
{
	_cleanup_free_ char *id = NULL, *where = NULL, *dir = NULL, *old_runs = NULL;
	_cleanup_(strv_freep) char **wrap = NULL;
	pid_t gpid;

	if (!cg_test[0])
		return;
	wrap = cg_wrap(false);
	start_lessee(wrap);
	id = enqueue("escape");
	gpid = grandchild_pid(id);
	where = proc_cgroup(gpid);
	dir = cgroup_dir_of(where);
	ck_assert_int_ge(asprintf(&old_runs, "%s/runs/%d", cg_test, (int)tu_lessee_pid(D)), 0);
	ck_assert_int_eq(tu_lessee_signal(D, SIGKILL), 0);
	ck_assert_int_eq(tu_lessee_wait(D, tu_timeout(10 * SEC)), 128 + SIGKILL);
	ck_assert_msg(tu_pid_alive(gpid), "the grandchild %d died with the daemon", (int)gpid);
	ck_assert_int_eq(tu_lessee_restart(D), 0);
	ck_assert_int_eq(tu_lessee_wait_log(D, "left by a previous lessee", tu_timeout(5 * SEC)),
	                 0);
	ck_assert_msg(wait_dead(gpid, 10 * SEC), "the grandchild %d survived the restart",
	              (int)gpid);
	ck_assert_msg(wait_gone(dir, 10 * SEC), "%s is still there", dir);
	ck_assert_msg(wait_gone(old_runs, 10 * SEC), "%s is still there", old_runs);
}
END_TEST

/* Which mode is in force: log line at start, /status, the metric. */
START_TEST(test_mode_cgroup)
{
	_cleanup_(strv_freep) char **wrap = NULL;
	cJSON *st;

	if (!cg_test[0])
		return;
	wrap = cg_wrap(false);
	start_lessee(wrap);
	ck_assert_int_eq(tu_lessee_wait_log(D, "kill mode: cgroup", tu_timeout(5 * SEC)), 0);
	st = status_doc();
	ck_assert_str_eq(tu_jstr(st, "kill_mode") ? tu_jstr(st, "kill_mode") : "(none)", "cgroup");
	ck_assert_str_eq(tu_jstr(st, "cgroup") ? tu_jstr(st, "cgroup") : "(none)", cg_test);
	cJSON_Delete(st);
	ck_assert(kill_mode_metric("cgroup") == 1);
	ck_assert(kill_mode_metric("process_group") == 0);
	/* The daemon left the delegated cgroup for a leaf of its own. */
	ck_assert(exists_at(cg_test, "supervisor"));
	{
		_cleanup_free_ char *where = proc_cgroup(tu_lessee_pid(D));

		ck_assert_msg(strstr(where, "/lessee-check-cgroup-") &&
		                  strstr(where, "/supervisor"),
		              "the daemon is in %s", where);
	}
}
END_TEST

/* A cgroup that cannot be written (mount read-only): process groups, said so;
 * the run is still stopped through its group. */
START_TEST(test_fallback_readonly)
{
	_cleanup_(strv_freep) char **wrap = NULL;
	_cleanup_free_ char *id = NULL;
	cJSON *st;
	pid_t gpid;

	if (!cg_test[0])
		return;
	wrap = cg_wrap(true);
	start_lessee(wrap);
	ck_assert_int_eq(tu_lessee_wait_log(D, "kill mode: process group", tu_timeout(5 * SEC)), 0);
	st = status_doc();
	ck_assert_str_eq(tu_jstr(st, "kill_mode") ? tu_jstr(st, "kill_mode") : "(none)", "process_group");
	ck_assert_ptr_null(tu_jstr(st, "cgroup"));
	ck_assert_ptr_nonnull(tu_jstr(st, "kill_mode_reason"));
	cJSON_Delete(st);
	ck_assert(kill_mode_metric("process_group") == 1);
	ck_assert(kill_mode_metric("cgroup") == 0);
	id = enqueue("escape_timeout");
	gpid = grandchild_pid(id);
	ck_assert_int_eq(tu_lessor_wait_status(L, id, "failed", tu_timeout(15 * SEC)), 0);
	/* documented: out of reach of the group signals; teardown kills it */
	ck_assert(tu_pid_alive(gpid));
}
END_TEST

/* In the root cgroup (no cgroup.kill there, and not ours to organise):
 * process groups. */
START_TEST(test_fallback_root)
{
	_cleanup_(strv_freep) char **wrap = NULL;
	cJSON *st;

	wrap = strv_make("/bin/sh", "-c", "echo $$ >\"$0/cgroup.procs\" && exec \"$@\"",
	                 cg_mount[0] ? cg_mount : "/nonexistent", NULL);
	if (!cg_mount[0] || !exists_at(cg_mount, "cgroup.procs"))
		return;
	start_lessee(wrap);
	ck_assert_int_eq(tu_lessee_wait_log(D, "kill mode: process group", tu_timeout(5 * SEC)), 0);
	st = status_doc();
	ck_assert_str_eq(tu_jstr(st, "kill_mode") ? tu_jstr(st, "kill_mode") : "(none)", "process_group");
	cJSON_Delete(st);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("cgroup");
	TCase *tc = tcase_create("cgroup");
	int r;

	cg_probe();
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 60);
	tcase_add_loop_test(tc, test_setsid_killed, 0, _STOP_MAX);
	tcase_add_test(tc, test_leftovers_after_crash);
	tcase_add_test(tc, test_mode_cgroup);
	tcase_add_test(tc, test_fallback_readonly);
	tcase_add_test(tc, test_fallback_root);
	suite_add_tcase(s, tc);
	r = tu_run(s);
	if (cg_test[0])
		cg_remove(cg_test);
	if (r != 0)
		return EXIT_FAILURE;
	if (no_cgroup) {
		fprintf(stderr, "check_cgroup: %s here: the cgroup cases were skipped\n",
		        no_cgroup);
		return 77;
	}
	return EXIT_SUCCESS;
}
