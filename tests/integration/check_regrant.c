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
#include "conf/conf.h"
#include "ev/ev.h"
#include "util/buf.h"
#include "worker/worker-int.h"
#include "jsonutil.h"
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

/* Leases long enough that only the requeue ends one.  kill_grace: long
 * enough that a TERM-trapping first copy is still alive when the run comes
 * back, or 0 (SIGKILL at once, as for any lease loss): the run comes back to
 * the parked claim before the older execution is even known to be lost. */
static const char conf_fmt[] = "[worker]\nlease_ttl = 60s\nkill_grace = %s\n"
                               "[workflow.regrant]\ncommand = %s/job.sh\nenv = LEDGER=%s\n";

static void setup(void)
{
	_cleanup_free_ char *path = NULL;

	scripts = tu_tmpdir("regrant");
	ck_assert_ptr_nonnull(scripts);
	snprintf(ledger, sizeof(ledger), "%s/ledger", scripts);
	ck_assert_int_ge(asprintf(&path, "%s/job.sh", scripts), 0);
	ck_assert_int_eq(write_file_atomic(path, job, strlen(job), 0755), 0);
	ck_assert_int_eq(tu_lessor_start(&(struct tu_lessor_opts){.token = "t0ken-for-tests"}, &L),
	                 0);
}

static void start_lessee(const char *kill_grace)
{
	_cleanup_free_ char *conf = NULL;

	ck_assert_int_ge(asprintf(&conf, conf_fmt, kill_grace, scripts, ledger), 0);
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

static char *enqueue(const char *workflow)
{
	char *id = tu_lessor_enqueue_wf(L, workflow, "\"max_attempts\":1");

	ck_assert_ptr_nonnull(id);
	return id;
}

static void wait_status(const char *id, const char *status, usec_t timeout)
{
	ck_assert_msg(tu_lessor_wait_status(L, id, status, timeout) == 0,
	              "run %s did not reach status %s", id, status);
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
	static const char *const grace[] = {"3s", "0"};
	_cleanup_free_ char *id = NULL, *text = NULL;
	char dir1[512] = "", dir2[512] = "";
	pid_t pid1, pid2;
	cJSON *run, *leases, *out;

	start_lessee(grace[_i]);
	id = enqueue("regrant");
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
	              tu_jstr(run, "error") ? tu_jstr(run, "error") : "(no error)");
	ck_assert_int_eq((int)tu_jnum_or(out, "copy", 0), 2);
	ck_assert_int_eq((int)tu_jnum_or(out, "pid", 0), (int)pid2);
	leases = cJSON_GetObjectItem(run, "leases");
	ck_assert_int_eq(cJSON_GetArraySize(leases), 2);
	ck_assert_str_eq(tu_jstr(cJSON_GetArrayItem(leases, 0), "end_reason"), "revoked");
	ck_assert_str_eq(tu_jstr(cJSON_GetArrayItem(leases, 1), "end_reason"), "completed");
	cJSON_Delete(run);

	ck_assert_int_eq(tu_lessee_wait_log(D, "waiting for the previous execution", 5 * SEC), 0);
	ck_assert_msg(wait_gone(dir1, 5 * SEC), "%s left behind", dir1);
	ck_assert_msg(wait_gone(dir2, 5 * SEC), "%s left behind", dir2);
}
END_TEST

/* ---------------------------------------------------------------- in process
 *
 * The WAITING state itself, whatever makes an older execution slow to die: a
 * worker on this process's loop, against the real lessor, with a stand-in
 * for the older execution (a run of the same id in KILLING, its lease
 * already lost, that ends when the test says).  The real job runs for the
 * new lease and appends a line to a marker file, so "never started" can be
 * checked. */

static ev_t *E;
static worker_t *W;
static bool W_exited;
static char marker[512];

static const char marker_job[] = "#!/bin/sh\necho \"$$\" >> \"$MARK\"\n"
                                 "echo '{\"marked\":true}' > \"$LESSEE_RESULT_FILE\"\n";

static void on_worker_exit(worker_t *w, int code, void *userdata)
{
	W_exited = true;
}

static void setup_inproc(void)
{
	_cleanup_free_ char *path = NULL, *text = NULL, *conf_path = NULL, *token = NULL;
	struct conf *c = NULL;
	char *err = NULL;

	scripts = tu_tmpdir("regrant-inproc");
	ck_assert_ptr_nonnull(scripts);
	snprintf(marker, sizeof(marker), "%s/marker", scripts);
	ck_assert_int_ge(asprintf(&path, "%s/mark.sh", scripts), 0);
	ck_assert_int_eq(write_file_atomic(path, marker_job, strlen(marker_job), 0755), 0);
	ck_assert_int_eq(tu_lessor_start(&(struct tu_lessor_opts){.token = "t0ken-for-tests"}, &L),
	                 0);
	ck_assert_int_ge(asprintf(&token, "%s/token", scripts), 0);
	ck_assert_int_eq(write_file_atomic(token, "t0ken-for-tests", 15, 0600), 0);
	ck_assert_int_ge(asprintf(&text,
	                          "[api]\nurl = %s\ntoken_file = %s\nrequest_timeout = 4s\n"
	                          "[worker]\nid = inproc-worker\nconcurrency = 4\nlease_ttl = 60s\n"
	                          "lease_refresh = 1s\nlong_poll = 2s\npoll_interval = 200ms\n"
	                          "kill_grace = 1s\nspool_dir = %s/spool\nrun_dir = %s/run\n"
	                          "[status]\nlisten =\n[log]\nlevel = info\n"
	                          "[workflow.mark]\ncommand = %s\nenv = MARK=%s\n",
	                          tu_lessor_url(L), token, scripts, scripts, path, marker),
	                 0);
	ck_assert_int_ge(asprintf(&conf_path, "%s/lessee.conf", scripts), 0);
	ck_assert_int_eq(write_file_atomic(conf_path, text, strlen(text), 0644), 0);
	ck_assert_msg(conf_load(&(struct conf_source){.path = conf_path}, &c, &err) == 0,
	              "conf: %s", err ? err : "?");
	ck_assert_int_eq(ev_new(&E, tu_backend()), 0);
	W_exited = false;
	ck_assert_int_eq(worker_new(E, c, on_worker_exit, NULL, &W), 0);
}

static void teardown_inproc(void)
{
	int ls = L ? tu_lessor_stop(L) : 0;

	W = worker_free(W);
	E = ev_free(E);
	L = tu_lessor_free(L);
	if (scripts)
		rm_rf(scripts);
	free(scripts);
	scripts = NULL;
	ck_assert_msg(ls == 0, "lessor exited with %d", ls);
}

/* The stand-in for an older execution of run `id`: KILLING, lease lost. */
static struct run *older_execution(const char *id)
{
	struct drv_grant pr = {
	    .id = strdup(id),
	    .workflow = strdup("mark"),
	    .attempt = 1,
	    .lease_key = strdup("an-older-lease-token"),
	    .ttl_s = 60,
	    .input = strdup("null"),
	    .input_len = 4,
	};
	struct run *r = run_new(&W->host, W->cref, &pr, ev_now(E));

	ck_assert_ptr_nonnull(r);
	worker_run_add(W, r);
	r->state = RUN_KILLING;
	r->lost = true;
	ev_timer_disarm(r->renew_timer);
	ev_timer_disarm(r->deadline_timer);
	return r;
}

/* Its process group is dead: it leaves the run table. */
static void older_execution_ends(struct run *r)
{
	run_dispatch(r, RE_ABANDON);
}

/* The run of this id in the table other than `not`, or NULL. */
static struct run *find_run(const char *id, const struct run * not )
{
	for (struct run *r = W->table.head; r; r = r->next)
		if (r != not &&streq(r->id, id))
			return r;
	return NULL;
}

static bool has_run_in_state(const char *id, const struct run * not, enum run_state st)
{
	struct run *r = find_run(id, not );

	return r && r->state == st;
}

/* Step the loop until cond() or the timeout. */
#define STEP_UNTIL(cond, timeout)                                                                  \
	({                                                                                         \
		usec_t _end = time_mono() + tu_timeout(timeout);                                   \
		bool _ok;                                                                          \
		while (!(_ok = (cond)) && time_mono() < _end)                                      \
			ev_run_once(E, 20 * USEC_PER_MSEC);                                        \
		_ok;                                                                               \
	})

static bool run_status_is(const char *id, const char *status)
{
	cJSON *run = tu_lessor_get_run(L, id);
	bool ok = run && streq_ptr(tu_jstr(run, "status"), status);

	cJSON_Delete(run);
	return ok;
}

/* The n-th lease's field, from the lessor ("" when absent). */
static char *lease_field(const char *id, int n, const char *key)
{
	cJSON *run = tu_lessor_get_run(L, id);
	const char *v = tu_jstr(cJSON_GetArrayItem(cJSON_GetObjectItem(run, "leases"), n), key);
	char *s = strdup(v ? v : "");

	cJSON_Delete(run);
	return s;
}

static bool lease_renewed(const char *id, int n, const char *since)
{
	_cleanup_free_ char *now = lease_field(id, n, "last_renewed_at");

	return *now && !streq(now, since);
}

static bool marked(void)
{
	return access(marker, F_OK) == 0;
}

/* Claim run id while its stand-in older execution lives: the new lease waits,
 * renewed; `lessee status` says "waiting". */
static struct run *claim_while_older_lives(const char *id)
{
	struct run *old = older_execution(id);
	_cleanup_free_ char *renewed = NULL;
	struct buf b = {0};

	ck_assert_int_eq(worker_start(W), 0);
	ck_assert_msg(STEP_UNTIL(has_run_in_state(id, old, RUN_WAITING), 10 * SEC),
	              "the re-granted run is not waiting (state %s)",
	              find_run(id, old) ? run_state_name(find_run(id, old)->state) : "none");
	ck_assert_int_eq(worker_status_json(W, &b), 0);
	ck_assert_msg(strstr(b.data, "\"state\":\"waiting\""), "status: %s", b.data);
	buf_done(&b);
	/* renewed like a run in any other state, and not started meanwhile */
	renewed = lease_field(id, 0, "last_renewed_at");
	ck_assert(STEP_UNTIL(lease_renewed(id, 0, renewed), 5 * SEC));
	ck_assert(has_run_in_state(id, old, RUN_WAITING));
	ck_assert(!marked());
	return old;
}

START_TEST(test_waiting_starts_when_older_ends)
{
	_cleanup_free_ char *id = enqueue("mark");
	struct run *old = claim_while_older_lives(id);

	older_execution_ends(old);
	ck_assert(STEP_UNTIL(run_status_is(id, "succeeded"), 15 * SEC));
	ck_assert(marked());
}
END_TEST

START_TEST(test_waiting_released_on_hard_stop)
{
	_cleanup_free_ char *id = enqueue("mark"), *reason = NULL, *detail = NULL;
	struct run *old = claim_while_older_lives(id);

	worker_hard_stop(W, false);
	ck_assert(STEP_UNTIL(run_status_is(id, "pending"), 10 * SEC));
	reason = lease_field(id, 0, "end_reason");
	detail = lease_field(id, 0, "detail");
	ck_assert_str_eq(reason, "released");
	ck_assert_str_eq(detail, "shutdown");
	ck_assert(!W_exited); /* the older execution still holds the stop */
	older_execution_ends(old);
	ck_assert(STEP_UNTIL(W_exited, 5 * SEC));
	ck_assert(!marked());
}
END_TEST

START_TEST(test_waiting_released_on_drain)
{
	_cleanup_free_ char *id = enqueue("mark"), *reason = NULL, *detail = NULL;
	struct run *old = claim_while_older_lives(id);

	worker_drain(W);
	ck_assert(STEP_UNTIL(run_status_is(id, "pending"), 10 * SEC));
	reason = lease_field(id, 0, "end_reason");
	detail = lease_field(id, 0, "detail");
	ck_assert_str_eq(reason, "released");
	ck_assert_str_eq(detail, "draining");
	older_execution_ends(old);
	ck_assert(STEP_UNTIL(W_exited, 5 * SEC));
	ck_assert(!marked());
}
END_TEST

/* Cancelled while waiting: reported cancelled, never started. */
START_TEST(test_waiting_cancelled)
{
	_cleanup_free_ char *id = enqueue("mark"), *path = NULL;
	struct run *old = claim_while_older_lives(id);
	long status = 0;

	ck_assert_int_ge(asprintf(&path, "/v1/runs/%s/cancel", id), 0);
	ck_assert_int_eq(tu_lessor_json(L, "POST", path, NULL, &status, NULL), 0);
	ck_assert_int_eq(status, 200);
	ck_assert(STEP_UNTIL(run_status_is(id, "cancelled"), 10 * SEC));
	ck_assert(STEP_UNTIL(find_run(id, old) == NULL, 5 * SEC));
	older_execution_ends(old);
	for (int i = 0; i < 10; i++)
		ev_run_once(E, 20 * USEC_PER_MSEC);
	ck_assert(!marked());
}
END_TEST

/* Its lease lost while waiting: gone without starting.  The operator's
 * requeue gives the run back to this worker's parked claim, so a third lease
 * waits in turn and runs once the older execution ends: exactly once. */
START_TEST(test_waiting_lease_lost)
{
	_cleanup_free_ char *id = enqueue("mark"), *path = NULL, *reason = NULL;
	struct run *old = claim_while_older_lives(id), *waiting = find_run(id, old);
	_cleanup_free_ char *token = strdup(waiting->lease_key);
	long status = 0;
	char *text = NULL;
	size_t len = 0;

	ck_assert_int_ge(asprintf(&path, "/v1/runs/%s/requeue", id), 0);
	ck_assert_int_eq(tu_lessor_json(L, "POST", path, NULL, &status, NULL), 0);
	ck_assert_int_eq(status, 200);
	ck_assert(STEP_UNTIL(!find_run(id, old) || !streq(find_run(id, old)->lease_key, token),
	                     10 * SEC));
	ck_assert(!marked());
	reason = lease_field(id, 0, "end_reason");
	ck_assert_str_eq(reason, "revoked");
	ck_assert(STEP_UNTIL(has_run_in_state(id, old, RUN_WAITING), 10 * SEC));
	older_execution_ends(old);
	ck_assert(STEP_UNTIL(run_status_is(id, "succeeded"), 15 * SEC));
	ck_assert_int_eq(read_file_capped(marker, 4096, &text, &len), 0);
	ck_assert_msg(strchr(text, '\n') == text + len - 1, "executed more than once: %s", text);
	free(text);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("regrant");
	TCase *tc = tcase_create("regrant");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_regrant_waits_for_old_copy, 0, 2);
	suite_add_tcase(s, tc);
	tc = tcase_create("waiting");
	tcase_add_checked_fixture(tc, setup_inproc, teardown_inproc);
	tcase_set_timeout(tc, 60);
	tcase_add_test(tc, test_waiting_starts_when_older_ends);
	tcase_add_test(tc, test_waiting_released_on_hard_stop);
	tcase_add_test(tc, test_waiting_released_on_drain);
	tcase_add_test(tc, test_waiting_cancelled);
	tcase_add_test(tc, test_waiting_lease_lost);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
