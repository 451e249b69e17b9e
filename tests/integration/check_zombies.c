/* No zombies, whatever the runs leave behind.  A run's command leaves three
 * orphans each time: a background child still in the run's process group
 * (killed with the group when the run ends), a double-forked grandchild that
 * exits on its own while the run goes on, and one that left the group (setsid)
 * and exits after the run is over.  Each is re-parented to lessee:
 *  - as PID 1 of a new PID namespace (a container's init; the kernel gives
 *    every orphan of the namespace to PID 1, and nobody else would reap them);
 *  - as an ordinary process, because it is a child subreaper.
 * After 200 runs through a real lessor, while the daemon still runs, nothing
 * of the runs is left: no zombie, no process but the daemon in its namespace,
 * and lessee_orphans_reaped_total says the daemon reaped them all.  Then
 * SIGTERM (sent from outside the namespace, as `docker stop` does) drains and
 * exits 0.  The test and lessor stay in our namespace. */
#include <cJSON.h>
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lessee_proc.h"
#include "lessor_proc.h"
#include "promparse.h"
#include "testutil.h"
#include "util/buf.h"
#include "util/fileio.h"
#include "util/macro.h"

#define SEC USEC_PER_SEC
#define RUNS 200
#define ORPHANS_PER_RUN 3

static const char conf[] = "[worker]\nconcurrency = 16\n"
                           "[status]\nlisten = 127.0.0.1:0\n"
                           "[workflow.orphans]\n"
                           "command = /bin/sh -c '"
                           "sleep 30 & "
                           "(sleep 0.15 </dev/null >/dev/null 2>&1 &); "
                           "(setsid sleep 0.5 </dev/null >/dev/null 2>&1 &); "
                           "sleep 0.3; echo done'\n";

static struct tu_lessor *L;
static struct tu_lessee *D;

static void teardown(void)
{
	D = tu_lessee_free(D);
	L = tu_lessor_free(L);
}

/* ---- who is left ---------------------------------------------------------- */

struct census {
	int others;  /* processes that are not the daemon */
	int zombies; /* among them */
	struct buf list;
};

static bool same_pid_ns(pid_t a, const struct stat *ns)
{
	char path[64];
	struct stat st;

	snprintf(path, sizeof(path), "/proc/%d/ns/pid", (int)a);
	return stat(path, &st) == 0 && st.st_dev == ns->st_dev && st.st_ino == ns->st_ino;
}

/* State and parent from /proc/PID/stat ("pid (comm) S ppid ..."; comm may
 * hold anything, so parse after its last ')'). */
static bool proc_state(pid_t pid, char *ret_state, pid_t *ret_ppid, char comm[32])
{
	char path[64], *text = NULL, *open, *close;
	int ppid;
	bool ok;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (read_file_capped(path, 4096, &text, NULL) < 0)
		return false;
	open = strchr(text, '(');
	close = strrchr(text, ')');
	ok = open && close && sscanf(close + 1, " %c %d", ret_state, &ppid) == 2;
	if (ok) {
		snprintf(comm, 32, "%.*s", (int)(close - open - 1), open + 1);
		*ret_ppid = ppid;
	}
	free(text);
	return ok;
}

/* Everything in the daemon's PID namespace (when it has its own) or whose
 * parent is the daemon, the daemon itself aside. */
static void take_census(pid_t daemon, bool own_ns, struct census *c)
{
	char path[64];
	struct stat ns;
	DIR *d = opendir("/proc");
	struct dirent *de;

	buf_reset(&c->list);
	c->others = c->zombies = 0;
	snprintf(path, sizeof(path), "/proc/%d/ns/pid", (int)daemon);
	ck_assert_int_eq(stat(path, &ns), 0);
	ck_assert_ptr_nonnull(d);
	while ((de = readdir(d))) {
		pid_t pid = (pid_t)atoi(de->d_name), ppid;
		char state, comm[32];

		if (pid <= 0 || pid == daemon || !proc_state(pid, &state, &ppid, comm))
			continue;
		if (ppid != daemon && !(own_ns && same_pid_ns(pid, &ns)))
			continue;
		c->others++;
		c->zombies += state == 'Z';
		(void)buf_printf(&c->list, " %d(%s,%c,ppid %d)", (int)pid, comm, state, (int)ppid);
	}
	closedir(d);
}

/* Orphans exit a little after their run: wait until nothing is left, or give
 * up and report what is there. */
static void assert_nothing_left(pid_t daemon, bool own_ns)
{
	usec_t end = time_mono() + tu_timeout(15 * SEC);
	struct census c = {.list = BUF_INIT(2048)}; /* the first few, for the message */

	for (;;) {
		take_census(daemon, own_ns, &c);
		if (c.others == 0 || time_mono() > end)
			break;
		tu_sleep(50 * USEC_PER_MSEC);
	}
	ck_assert_msg(c.zombies == 0, "%d zombies left:%.*s", c.zombies, (int)c.list.len,
	              c.list.data);
	ck_assert_msg(c.others == 0, "%d processes left:%.*s", c.others, (int)c.list.len,
	              c.list.data);
	buf_done(&c.list);
}

/* ---- the daemon's own count ------------------------------------------------ */

static double orphans_reaped(void)
{
	long status = 0;
	_cleanup_free_ char *text = tu_lessee_status_get(D, "/metrics", &status);
	prom_doc_t *doc = NULL;
	double v;

	ck_assert_ptr_nonnull(text);
	ck_assert_int_eq(status, 200);
	ck_assert_int_eq(prom_parse(text, strlen(text), &doc, NULL), 0);
	v = prom_value(doc, "lessee_orphans_reaped_total", NULL);
	prom_free(doc);
	return v;
}

/* ---- the test ---------------------------------------------------------------- */

static void run_many(bool pid_namespace)
{
	char *ids[RUNS];
	_cleanup_free_ char *log = NULL;
	pid_t daemon;
	double reaped;

	ck_assert_int_eq(
	    tu_lessor_start(&(struct tu_lessor_opts){.token = "zombie-t0ken", .sync_normal = true},
	                    &L),
	    0);
	ck_assert_int_eq(
	    tu_lessee_start(
	        &(struct tu_lessee_opts){.lessor = L, .conf = conf, .pid_namespace = pid_namespace},
	        &D),
	    0);
	daemon = tu_lessee_pid(D);
	ck_assert_int_gt(tu_lessee_status_port(D), 0);
	log = tu_lessee_log(D);
	ck_assert_ptr_nonnull(strstr(log, pid_namespace
	                                      ? "reaping orphaned processes (running as PID 1)"
	                                      : "reaping orphaned processes (child subreaper)"));

	for (int i = 0; i < RUNS; i++)
		ids[i] = tu_lessor_enqueue(L, "{\"workflow\":\"orphans\",\"max_attempts\":1}");
	for (int i = 0; i < RUNS; i++) {
		ck_assert_ptr_nonnull(ids[i]);
		if (tu_lessor_wait_status(L, ids[i], "succeeded", 120 * SEC) < 0) {
			cJSON *run = tu_lessor_get_run(L, ids[i]);
			_cleanup_free_ char *text = run ? cJSON_Print(run) : NULL;

			cJSON_Delete(run);
			ck_abort_msg("run %d did not succeed: %s", i, text ? text : ids[i]);
		}
		free(ids[i]);
	}

	assert_nothing_left(daemon, pid_namespace);
	reaped = orphans_reaped();
	ck_assert_msg(reaped >= RUNS * ORPHANS_PER_RUN,
	              "the daemon reaped %.0f orphans, expected %d", reaped,
	              RUNS * ORPHANS_PER_RUN);
	ck_assert_int_eq(tu_lessee_signal(D, SIGTERM), 0);
	ck_assert_int_eq(tu_lessee_wait(D, 30 * SEC), 0);
}

START_TEST(test_pid1)
{
	run_many(true);
}
END_TEST

START_TEST(test_subreaper)
{
	run_many(false);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("zombies");
	TCase *tc = tcase_create("orphans");
	bool pid_ns = tu_pid_namespace_available();

	tcase_add_checked_fixture(tc, NULL, teardown);
	tcase_set_timeout(tc, 300);
	if (pid_ns)
		tcase_add_test(tc, test_pid1);
	tcase_add_test(tc, test_subreaper);
	suite_add_tcase(s, tc);
	if (tu_run(s) != 0)
		return EXIT_FAILURE;
	if (!pid_ns) {
		fprintf(stderr,
		        "check_zombies: no PID namespace for us here (CAP_SYS_ADMIN needed): "
		        "the PID 1 case was skipped\n");
		return 77;
	}
	return EXIT_SUCCESS;
}
