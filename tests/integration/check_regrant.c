/* One run id is executed at most once at a time per daemon (issue 10, item 1).
 *
 * The API may offer a run again while this daemon still holds an older lease
 * of it: an operator requeues it, or the lease is revoked or expires while its
 * child is still dying.  The new lease must wait for the old process group to
 * be dead, and each lease has its own run directory, so the old copy's cleanup
 * cannot remove the new copy's result.  tests/run.sh runs this under both loop
 * backends. */
#include <cJSON.h>
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lessee_proc.h"
#include "lessor_proc.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"

#define SEC USEC_PER_SEC

static struct tu_lessor *L;
static struct tu_lessee *D;
static char *scripts; /* the job script and its ledger */
static char ledger[512];

/* The job.  Every execution appends START/END lines (pid, run directory) to a
 * ledger outside the run directory, and holds a lock for its whole life (its
 * children inherit it): an execution that finds the lock taken writes OVERLAP
 * (another execution of the run is still alive) and waits for it.
 * The first execution traps TERM and runs until SIGKILL, checking that its
 * directory stays; a later one writes its result, waits a second, checks the
 * result file is still there (DIRGONE otherwise) and exits 0. */
static const char job[] =
    "#!/bin/sh\n"
    "dir=$(dirname \"$LESSEE_RESULT_FILE\")\n"
    "exec 9>>\"$LEDGER.lock\"\n"
    "if ! flock -n 9; then echo \"OVERLAP $$\" >> \"$LEDGER\"; flock 9; fi\n"
    "n=$(grep -c '^START' \"$LEDGER\" 2>/dev/null)\n"
    "echo \"START $$ $dir\" >> \"$LEDGER\"\n"
    "echo \"pid=$$\"\n"
    "if [ \"${n:-0}\" -eq 0 ]; then\n"
    "  trap 'echo \"TERM $$\" >> \"$LEDGER\"' TERM\n"
    "  while :; do\n"
    "    [ -d \"$dir\" ] || echo \"DIRGONE $$\" >> \"$LEDGER\"\n"
    "    sleep 0.1\n"
    "  done\n"
    "fi\n"
    "echo \"{\\\"copy\\\":$((n + 1)),\\\"pid\\\":$$}\" > \"$LESSEE_RESULT_FILE\"\n"
    "echo \"copy $((n + 1)) done\"\n"
    "sleep 1\n"
    "[ -f \"$LESSEE_RESULT_FILE\" ] || echo \"DIRGONE $$\" >> \"$LEDGER\"\n"
    "echo \"END $$\" >> \"$LEDGER\"\n";

/* Leases long enough that only the requeue ends one; kill_grace long enough
 * that a TERM-trapping first copy is still alive when the run comes back. */
static const char conf_fmt[] = "[worker]\nlease_ttl = 60s\nkill_grace = 3s\n"
                               "[workflow.regrant]\ncommand = %s/job.sh\nenv = LEDGER=%s\n";

static void setup(void)
{
	_cleanup_free_ char *conf = NULL, *path = NULL;

	scripts = tu_tmpdir("regrant");
	ck_assert_ptr_nonnull(scripts);
	snprintf(ledger, sizeof(ledger), "%s/ledger", scripts);
	ck_assert_int_ge(asprintf(&path, "%s/job.sh", scripts), 0);
	ck_assert_int_eq(write_file_atomic(path, job, strlen(job), 0755), 0);
	ck_assert_int_eq(tu_lessor_start(&(struct tu_lessor_opts){.token = "t0ken-for-tests"}, &L),
	                 0);
	ck_assert_int_ge(asprintf(&conf, conf_fmt, scripts, ledger), 0);
	ck_assert_int_eq(tu_lessee_start(&(struct tu_lessee_opts){.lessor = L, .conf = conf}, &D),
	                 0);
}

static void teardown(void)
{
	int st = D ? tu_lessee_quit(D) : 0;
	int ls = L ? tu_lessor_stop(L) : 0;

	D = tu_lessee_free(D);
	L = tu_lessor_free(L);
	if (scripts)
		rm_rf(scripts);
	free(scripts);
	scripts = NULL;
	ck_assert_msg(st == 0, "lessee exited with %d", st);
	ck_assert_msg(ls == 0, "lessor exited with %d", ls);
}

/* ---------------------------------------------------------------- helpers */

static const char *jstr(const cJSON *o, const char *key)
{
	const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsString(j) ? j->valuestring : NULL;
}

static double jnum(const cJSON *o, const char *key, double dflt)
{
	const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsNumber(j) ? j->valuedouble : dflt;
}

static char *enqueue(const char *workflow)
{
	_cleanup_free_ char *body = NULL;
	char *id;

	ck_assert_int_ge(asprintf(&body, "{\"workflow\":\"%s\",\"max_attempts\":1}", workflow), 0);
	id = tu_lessor_enqueue(L, body);
	ck_assert_msg(id, "enqueue %s", body);
	return id;
}

static void wait_status(const char *id, const char *status, usec_t timeout)
{
	int r = tu_lessor_wait_status(L, id, status, timeout);

	if (r < 0) {
		cJSON *run = tu_lessor_get_run(L, id);
		char *s = run ? cJSON_Print(run) : NULL;

		fprintf(stderr, "run %s did not reach %s:\n%s\n", id, status, s ? s : "?");
		free(s);
		cJSON_Delete(run);
	}
	ck_assert_msg(r == 0, "run %s did not reach status %s", id, status);
}

static void admin_post(const char *fmt, const char *id)
{
	_cleanup_free_ char *path = NULL;
	long status = 0;

	ck_assert_int_ge(asprintf(&path, fmt, id), 0);
	ck_assert_int_eq(tu_lessor_json(L, "POST", path, NULL, &status, NULL), 0);
	ck_assert_msg(status == 200, "POST %s: HTTP %ld", path, status);
}

static char *read_ledger(void)
{
	char *data = NULL;
	size_t len = 0;

	if (read_file_capped(ledger, 1 << 20, &data, &len) < 0)
		return strdup("");
	return data;
}

/* The n-th (from 0) "WORD pid [dir]" line of the ledger: its pid, and its dir. */
static pid_t ledger_line(const char *text, const char *word, int n, char *dir, size_t dirlen)
{
	size_t wl = strlen(word);

	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
		int pid = 0;
		char d[512] = "";

		if (strncmp(p, word, wl) != 0 || p[wl] != ' ' || n-- > 0)
			continue;
		if (sscanf(p + wl + 1, "%d %511s", &pid, d) < 1)
			return -1;
		if (dir)
			snprintf(dir, dirlen, "%s", d);
		return pid;
	}
	return -1;
}

/* Wait for the n-th START line; its pid. */
static pid_t wait_start(int n, char *dir, size_t dirlen, usec_t timeout)
{
	usec_t end = time_mono() + tu_timeout(timeout);

	do {
		_cleanup_free_ char *text = read_ledger();
		pid_t pid = ledger_line(text, "START", n, dir, dirlen);

		if (pid > 0)
			return pid;
		tu_sleep(10 * USEC_PER_MSEC);
	} while (time_mono() < end);
	return -1;
}

static bool wait_gone(const char *path, usec_t timeout)
{
	usec_t end = time_mono() + tu_timeout(timeout);

	while (access(path, F_OK) == 0)
		if (time_mono() > end)
			return false;
		else
			tu_sleep(20 * USEC_PER_MSEC);
	return true;
}

/* ---------------------------------------------------------------- tests */

/* The run is requeued while its first copy runs and traps TERM; this daemon
 * claims it again at once (its long poll is parked).  The second copy starts
 * only once the first is dead, in a directory of its own, and its result is
 * what the API gets. */
START_TEST(test_regrant_waits_for_old_copy)
{
	_cleanup_free_ char *id = enqueue("regrant"), *text = NULL;
	char dir1[512] = "", dir2[512] = "";
	pid_t pid1, pid2;
	cJSON *run, *leases, *out;

	pid1 = wait_start(0, dir1, sizeof(dir1), 15 * SEC);
	ck_assert_msg(pid1 > 0, "the first copy did not start");
	admin_post("/v1/runs/%s/requeue", id);
	pid2 = wait_start(1, dir2, sizeof(dir2), 20 * SEC);
	ck_assert_msg(pid2 > 0, "the second copy did not start");
	/* the lock says it; this says it from outside (the old pid reaped first) */
	ck_assert_msg(!tu_pid_alive(pid1), "copy %d started while copy %d is alive", (int)pid2,
	              (int)pid1);
	wait_status(id, "succeeded", 20 * SEC);

	text = read_ledger();
	ck_assert_msg(!strstr(text, "OVERLAP"), "two copies alive at once:\n%s", text);
	ck_assert_msg(!strstr(text, "DIRGONE"), "a live copy lost its directory:\n%s", text);
	ck_assert_msg(ledger_line(text, "START", 2, NULL, 0) < 0, "a third copy:\n%s", text);
	ck_assert_msg(ledger_line(text, "END", 0, NULL, 0) == pid2, "ledger:\n%s", text);
	ck_assert_msg(!streq(dir1, dir2), "both leases used %s", dir1);

	run = tu_lessor_get_run(L, id);
	out = cJSON_GetObjectItem(run, "output");
	ck_assert_msg(cJSON_IsObject(out), "succeeded without the output it wrote: %s",
	              jstr(run, "error") ? jstr(run, "error") : "(no error)");
	ck_assert_int_eq((int)jnum(out, "copy", 0), 2);
	ck_assert_int_eq((int)jnum(out, "pid", 0), (int)pid2);
	leases = cJSON_GetObjectItem(run, "leases");
	ck_assert_int_eq(cJSON_GetArraySize(leases), 2);
	ck_assert_str_eq(jstr(cJSON_GetArrayItem(leases, 0), "end_reason"), "revoked");
	ck_assert_str_eq(jstr(cJSON_GetArrayItem(leases, 1), "end_reason"), "completed");
	cJSON_Delete(run);

	ck_assert_int_eq(tu_lessee_wait_log(D, "waiting for the previous execution", 5 * SEC), 0);
	ck_assert_msg(wait_gone(dir1, 5 * SEC), "%s left behind", dir1);
	ck_assert_msg(wait_gone(dir2, 5 * SEC), "%s left behind", dir2);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("regrant");
	TCase *tc = tcase_create("regrant");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_regrant_waits_for_old_copy);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
