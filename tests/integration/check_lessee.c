/* lessee end to end: the real daemon, a real lessor, real children.
 * tests/run.sh runs this under both loop backends (the daemon inherits
 * LESSEE_IO_BACKEND). */
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
#include "promparse.h"
#include "jsonutil.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"

#define SEC USEC_PER_SEC

static struct tu_lessor *L;
static struct tu_lessee *D;
static char *scripts; /* directory of the workflows' shell scripts */

/* ---------------------------------------------------------------- helpers */

static void write_script(const char *name, const char *body)
{
	char path[512];
	_cleanup_free_ char *text = NULL;

	snprintf(path, sizeof(path), "%s/%s", scripts, name);
	ck_assert_int_ge(asprintf(&text, "#!/bin/sh\n%s\n", body), 0);
	ck_assert_int_eq(write_file_atomic(path, text, strlen(text), 0755), 0);
}

static const char *path_of(const char *name)
{
	static char path[512];

	snprintf(path, sizeof(path), "%s/%s", scripts, name);
	return path;
}

static void setup_scripts(void)
{
	scripts = tu_tmpdir("scripts");
	ck_assert_ptr_nonnull(scripts);
	write_script("ok.sh", "read -r line\necho \"got $line\"\n"
			      "echo '{\"answer\":42}' > \"$LESSEE_RESULT_FILE\"");
	write_script("fail.sh", "echo failing >&2\nexit 3");
	write_script("tempfail.sh", "exit 75");
	write_script("crash.sh", "kill -SEGV $$");
	write_script("badresult.sh", "echo 'not json' > \"$LESSEE_RESULT_FILE\"");
	write_script("env.sh", "echo \"run=$LESSEE_RUN_ID wf=$LESSEE_WORKFLOW attempt=$LESSEE_ATTEMPT "
			       "worker=$LESSEE_WORKER_ID deadline=$LESSEE_DEADLINE_MS\"\n"
			       "cat \"$LESSEE_INPUT_FILE\"; echo\n"
			       "echo \"notify=${NOTIFY_SOCKET:-unset} cwd=$(pwd)\"");
	/* Ignores SIGTERM and leaves a grandchild that ignores it too. */
	write_script("hang.sh", "trap '' TERM\n"
				"sh -c 'echo gpid=$$; exec sleep 1000' &\n"
				"echo pid=$$\nwhile :; do sleep 1; done");
	write_script("sleeper.sh", "echo pid=$$\nexec sleep 1000");
	write_script("sleep2.sh", "echo pid=$$\nsleep 2");
	write_script("sleep4.sh", "echo pid=$$\nsleep 4\necho done");
	/* its interpreter is missing: the command passes the check at load (an
	 * executable file) and exec fails with ENOENT, a spawn error */
	ck_assert_int_eq(write_file_atomic(path_of("missing.sh"),
					   "#!/nonexistent/lessee-test-interpreter\n", 39, 0755),
			 0);
	write_script("flaky.sh", "read -r line\ncase \"$line\" in *fail*) exit 1;; esac\necho fine");
}

static const char *const base_workflows =
	"[workflow.ok]\ncommand = %1$s/ok.sh\n"
	"[workflow.fail]\ncommand = %1$s/fail.sh\n"
	"[workflow.tempfail]\ncommand = %1$s/tempfail.sh\n"
	"[workflow.crash]\ncommand = %1$s/crash.sh\n"
	"[workflow.badresult]\ncommand = %1$s/badresult.sh\n"
	"[workflow.env]\ncommand = %1$s/env.sh\nenv = CUSTOM=yes\n"
	"[workflow.missing]\ncommand = %1$s/missing.sh\n"
	"[workflow.hang]\ncommand = %1$s/hang.sh\ntimeout = 1s\n"
	"[workflow.sleeper]\ncommand = %1$s/sleeper.sh\n"
	"[workflow.sleep2]\ncommand = %1$s/sleep2.sh\n"
	"[workflow.sleep4]\ncommand = %1$s/sleep4.sh\n"
	"[workflow.flaky]\ncommand = %1$s/flaky.sh\n"
	"[workflow.gen]\ncommand = %2$s/gen_output 5242880\n"
	"[workflow.flood]\ncommand = %2$s/gen_output 20971520\n";

static void start_lessor(char *const *args)
{
	ck_assert_int_eq(tu_lessor_start(&(struct tu_lessor_opts){.token = "t0ken-for-tests",
								   .args = args},
					 &L),
			 0);
}

/* The workflows every test has, then the test's own settings. */
static char *conf_text(const char *extra)
{
	_cleanup_free_ char *aux = tu_aux_bin("");
	char *conf, *all;

	aux[strlen(aux) - 1] = '\0'; /* the directory */
	ck_assert_int_ge(asprintf(&conf, base_workflows, scripts, aux), 0);
	ck_assert_int_ge(asprintf(&all, "%s%s", conf, extra ? extra : ""), 0);
	free(conf);
	return all;
}

static void start_lessee(const char *extra)
{
	_cleanup_free_ char *conf = conf_text(extra);

	ck_assert_int_eq(tu_lessee_start(&(struct tu_lessee_opts){.lessor = L, .conf = conf}, &D),
			 0);
}

static void setup(void)
{
	setup_scripts();
	start_lessor(NULL);
	start_lessee(NULL);
}

/* Every daemon must end cleanly: exit 0 on SIGQUIT, with no sanitizer or
 * valgrind report (they make the exit status non-zero).  A test that killed it
 * with SIGKILL leaves 137, which is not the daemon's fault. */
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
	ck_assert_msg(st == 0 || st == 128 + SIGKILL, "lessee exited with %d", st);
	ck_assert_msg(ls == 0, "lessor exited with %d", ls);
}

static char *enqueue(const char *workflow, const char *extra_json)
{
	char *id = tu_lessor_enqueue_wf(L, workflow, extra_json);

	ck_assert_ptr_nonnull(id);
	return id;
}

static void wait_status(const char *id, const char *status, usec_t timeout)
{
	ck_assert_msg(tu_lessor_wait_status(L, id, status, timeout) == 0,
	              "run %s did not reach status %s", id, status);
}

static char *run_log(const char *id)
{
	size_t len = 0;
	char *log = tu_lessor_run_log(L, id, &len);

	ck_assert_ptr_nonnull(log);
	return log;
}

/* The value of "key=<int>" in a run's shipped log, waiting for it to appear. */
static pid_t log_pid(const char *id, const char *key)
{
	usec_t end = time_mono() + tu_timeout(15 * SEC);
	char needle[32];

	snprintf(needle, sizeof(needle), "%s=", key);
	do {
		_cleanup_free_ char *log = run_log(id);
		const char *p = strstr(log, needle);

		if (p)
			return (pid_t)atoi(p + strlen(needle));
		tu_sleep(50 * USEC_PER_MSEC);
	} while (time_mono() < end);
	ck_abort_msg("no %s in the log of run %s", needle, id);
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

/* How many times the daemon's log says this so far. */
static int log_count(const char *needle)
{
	_cleanup_free_ char *log = tu_lessee_log(D);
	int n = 0;

	for (const char *p = log; p && (p = strstr(p, needle)); p++)
		n++;
	return n;
}

static cJSON *admin(const char *method, const char *path, const char *body, long want)
{
	long status = 0;
	cJSON *resp = NULL;

	ck_assert_int_eq(tu_lessor_json(L, method, path, body, &status, &resp), 0);
	ck_assert_msg(status == want, "%s %s: HTTP %ld, expected %ld", method, path, status, want);
	return resp;
}

/* ---------------------------------------------------------------- tests */

START_TEST(test_outcomes)
{
	_cleanup_free_ char *ok = enqueue("ok", "\"input\":{\"n\":1}");
	_cleanup_free_ char *fail = enqueue("fail", "\"max_attempts\":1");
	_cleanup_free_ char *temp = enqueue("tempfail", "\"max_attempts\":1");
	_cleanup_free_ char *crash = enqueue("crash", "\"max_attempts\":1");
	_cleanup_free_ char *missing = enqueue("missing", "\"max_attempts\":1");
	_cleanup_free_ char *bad = enqueue("badresult", NULL);
	_cleanup_free_ char *log = NULL;
	cJSON *run;

	wait_status(ok, "succeeded", 20 * SEC);
	run = tu_lessor_get_run(L, ok);
	ck_assert_int_eq((int)tu_jnum_or(run, "exit_code", -1), 0);
	ck_assert_int_eq((int)tu_jnum_or(cJSON_GetObjectItem(run, "output"), "answer", 0), 42);
	log = run_log(ok);
	ck_assert_str_eq(log, "got {\"n\":1}\n");
	ck_assert_int_eq((int)tu_jnum_or(run, "log_length", -1), (int)strlen(log));
	cJSON_Delete(run);

	wait_status(fail, "failed", 20 * SEC);
	run = tu_lessor_get_run(L, fail);
	ck_assert_str_eq(tu_jstr(run, "reason"), "exit");
	ck_assert_int_eq((int)tu_jnum_or(run, "exit_code", -1), 3);
	ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(run, "retryable")));
	free(log);
	log = run_log(fail);
	ck_assert_str_eq(log, "failing\n"); /* stderr shipped too */
	cJSON_Delete(run);

	wait_status(temp, "failed", 20 * SEC);
	run = tu_lessor_get_run(L, temp);
	ck_assert_int_eq((int)tu_jnum_or(run, "exit_code", -1), 75);
	ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(run, "retryable")));
	cJSON_Delete(run);

	wait_status(crash, "failed", 20 * SEC);
	run = tu_lessor_get_run(L, crash);
	ck_assert_str_eq(tu_jstr(run, "reason"), "crash");
	ck_assert_str_eq(tu_jstr(run, "signal"), "SIGSEGV");
	ck_assert(cJSON_IsNull(cJSON_GetObjectItem(run, "exit_code")));
	cJSON_Delete(run);

	wait_status(missing, "failed", 20 * SEC);
	run = tu_lessor_get_run(L, missing);
	if (tu_wrapped()) {
		/* "EXEC FAILED: I can't recover from execve() failing": valgrind
		 * ends the child itself, with 101, no execve error to report */
		ck_assert_int_eq((int)tu_jnum_or(run, "exit_code", -1), 101);
	} else {
		ck_assert_str_eq(tu_jstr(run, "reason"), "spawn_error");
		ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(run, "retryable")));
		ck_assert_ptr_nonnull(strstr(tu_jstr(run, "error"), "No such file"));
	}
	cJSON_Delete(run);

	wait_status(bad, "succeeded", 20 * SEC);
	run = tu_lessor_get_run(L, bad);
	ck_assert(cJSON_IsNull(cJSON_GetObjectItem(run, "output")));
	ck_assert_ptr_nonnull(strstr(tu_jstr(run, "error"), "not valid JSON"));
	cJSON_Delete(run);
}
END_TEST

START_TEST(test_child_environment)
{
	_cleanup_free_ char *id = enqueue("env", "\"input\":{\"k\":\"v\"},\"timeout_s\":60");
	_cleanup_free_ char *log = NULL, *expect = NULL;

	wait_status(id, "succeeded", 20 * SEC);
	log = run_log(id);
	ck_assert_int_ge(asprintf(&expect, "run=%s wf=env attempt=1 worker=test-worker deadline=60000",
				  id), 0);
	ck_assert_msg(strstr(log, expect), "log: %s", log);
	ck_assert_msg(strstr(log, "{\"k\":\"v\"}\n"), "input file: %s", log);
	ck_assert_msg(strstr(log, "notify=unset"), "log: %s", log);
	ck_assert_msg(strstr(log, "/run/lessee-"), "cwd not the run directory: %s", log);
	/* the fresh directory is gone once the run is reported */
	{
		char dir[512] = "";
		const char *p = strstr(log, "cwd=");
		usec_t end = time_mono() + tu_timeout(5 * SEC);

		ck_assert_ptr_nonnull(p);
		sscanf(p + 4, "%511s", dir);
		while (access(dir, F_OK) == 0 && time_mono() < end)
			tu_sleep(20 * USEC_PER_MSEC);
		ck_assert_msg(access(dir, F_OK) < 0, "run directory %s left behind", dir);
	}
}
END_TEST

START_TEST(test_timeout_kills_group)
{
	_cleanup_free_ char *id = enqueue("hang", "\"max_attempts\":1");
	pid_t pid = log_pid(id, "pid"), gpid = log_pid(id, "gpid");
	cJSON *run;

	ck_assert(tu_pid_alive(pid));
	wait_status(id, "failed", 20 * SEC);
	run = tu_lessor_get_run(L, id);
	ck_assert_str_eq(tu_jstr(run, "reason"), "timeout");
	ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(run, "retryable")));
	cJSON_Delete(run);
	ck_assert_msg(wait_dead(pid, 5 * SEC), "child %d survived the kill ladder", (int)pid);
	ck_assert_msg(wait_dead(gpid, 5 * SEC), "grandchild %d survived", (int)gpid);
}
END_TEST

START_TEST(test_lease_stolen)
{
	_cleanup_free_ char *id = enqueue("sleeper", NULL), *path = NULL;
	pid_t pid = log_pid(id, "pid");
	cJSON *run, *leases;
	double rejected;

	ck_assert_int_ge(asprintf(&path, "/v1/runs/%s/requeue", id), 0);
	cJSON_Delete(admin("POST", path, NULL, 200));
	/* one lease_refresh (1 s) to notice, kill_grace (1 s) at most to die */
	ck_assert_msg(wait_dead(pid, 4 * SEC), "old holder's child %d still runs", (int)pid);
	ck_assert_int_eq(tu_lessee_wait_log(D, "lease lost", 5 * SEC), 0);
	run = tu_lessor_get_run(L, id);
	rejected = tu_jnum_or(run, "rejected_writes", -1);
	cJSON_Delete(run);
	/* the write that discovered the loss was refused, or none when the run came
	 * back to our parked claim first (a new grant ends the older lease); then silence */
	ck_assert(rejected >= 0 && rejected <= 2);
	tu_sleep(3 * SEC);
	run = tu_lessor_get_run(L, id);
	ck_assert_int_eq((int)tu_jnum_or(run, "rejected_writes", -1), (int)rejected);
	leases = cJSON_GetObjectItem(run, "leases");
	ck_assert_str_eq(tu_jstr(cJSON_GetArrayItem(leases, 0), "end_reason"), "revoked");
	cJSON_Delete(run);
}
END_TEST

START_TEST(test_cancel)
{
	_cleanup_free_ char *id = enqueue("sleeper", NULL), *path = NULL;
	pid_t pid = log_pid(id, "pid");
	cJSON *run;

	ck_assert_int_ge(asprintf(&path, "/v1/runs/%s/cancel", id), 0);
	cJSON_Delete(admin("POST", path, NULL, 200));
	wait_status(id, "cancelled", 10 * SEC);
	ck_assert(wait_dead(pid, 3 * SEC));
	run = tu_lessor_get_run(L, id);
	ck_assert_str_eq(tu_jstr(run, "reason"), "cancelled");
	cJSON_Delete(run);
}
END_TEST

/* The workflows list of this worker's last claim, as a string "[...]" or "omitted". */
static char *last_claim_workflows(void)
{
	cJSON *w = admin("GET", "/v1/workers", NULL, 200), *it;
	char *s = NULL;

	cJSON_ArrayForEach(it, cJSON_GetObjectItem(w, "workers"))
	{
		const cJSON *wf = cJSON_GetObjectItem(it, "workflows");

		if (streq_ptr(tu_jstr(it, "worker_id"), "test-worker"))
			s = wf && !cJSON_IsNull(wf) ? cJSON_PrintUnformatted(wf) : strdup("omitted");
	}
	cJSON_Delete(w);
	ck_assert_ptr_nonnull(s);
	return s;
}

static int wait_claim_without(const char *wf, bool without, usec_t timeout)
{
	usec_t end = time_mono() + tu_timeout(timeout);
	char quoted[64];

	snprintf(quoted, sizeof(quoted), "\"%s\"", wf);
	do {
		_cleanup_free_ char *s = last_claim_workflows();

		if ((strstr(s, quoted) == NULL) == without)
			return 0;
		tu_sleep(50 * USEC_PER_MSEC);
	} while (time_mono() < end);
	return -ETIMEDOUT;
}

/* When the lease the trial ran under was granted.  A claim sent before the
 * breaker opened (a long poll, or one of the claims ahead) may still bring
 * the trial: the daemon gives it back unstarted (a lease that ended
 * "released"), and lessor's started_at is that first grant, not the start. */
static long long trial_lease_granted(const cJSON *run)
{
	const cJSON *l, *ran = NULL;

	cJSON_ArrayForEach(l, cJSON_GetObjectItemCaseSensitive(run, "leases"))
	{
		if (streq_ptr(tu_jstr(l, "end_reason"), "completed"))
			ran = l;
		else
			ck_assert_msg(streq_ptr(tu_jstr(l, "end_reason"), "released"),
				      "the trial had a lease that ended %s", tu_jstr(l, "end_reason"));
	}
	ck_assert_msg(ran, "the trial has no completed lease");
	return tu_rfc3339_ms(tu_jstr(ran, "granted_at"));
}

START_TEST(test_breaker)
{
	char *bad[3], *good[4];
	_cleanup_free_ char *trial = NULL, *trial2 = NULL;
	cJSON *last_bad, *run;
	long long opened, trial_started;

	D = tu_lessee_free(D);
	start_lessee("[worker]\nfailure_cooldown = 3s\n");

	for (int i = 0; i < 3; i++)
		bad[i] = enqueue("flaky", "\"input\":\"fail\",\"max_attempts\":1");
	for (int i = 0; i < 3; i++)
		wait_status(bad[i], "failed", 20 * SEC);
	/* open: flaky leaves the claims while other workflows keep running */
	ck_assert_int_eq(wait_claim_without("flaky", true, 5 * SEC), 0);
	ck_assert_int_eq(tu_lessee_wait_log(D, "failed 3 times in a row", 5 * SEC), 0);
	trial = enqueue("flaky", "\"input\":\"ok\",\"max_attempts\":1");
	for (int i = 0; i < 4; i++)
		good[i] = enqueue("ok", NULL);
	for (int i = 0; i < 4; i++)
		wait_status(good[i], "succeeded", 20 * SEC);
	/* half-open after the cooldown: one trial, it succeeds, closed again */
	wait_status(trial, "succeeded", 15 * SEC);
	ck_assert_int_eq(tu_lessee_wait_log(D, "cooldown over", 5 * SEC), 0);
	ck_assert_int_eq(tu_lessee_wait_log(D, "succeeded again", 5 * SEC), 0);
	/* the trial did not start before the cooldown (3 s) was over */
	last_bad = tu_lessor_get_run(L, bad[2]);
	run = tu_lessor_get_run(L, trial);
	opened = tu_rfc3339_ms(tu_jstr(last_bad, "finished_at"));
	trial_started = trial_lease_granted(run);
	if (!(opened > 0 && trial_started - opened >= 2500)) {
		_cleanup_free_ char *log = tu_lessee_log(D);

		fprintf(stderr, "--- lessee log ---\n%s--- end ---\n", log ? log : "");
	}
	ck_assert_msg(opened > 0 && trial_started - opened >= 2500,
		      "trial started %lld ms after the breaker opened", trial_started - opened);
	cJSON_Delete(last_bad);
	cJSON_Delete(run);
	ck_assert_int_eq(wait_claim_without("flaky", false, 5 * SEC), 0);
	trial2 = enqueue("flaky", "\"input\":\"ok\"");
	wait_status(trial2, "succeeded", 15 * SEC);
	for (int i = 0; i < 3; i++)
		free(bad[i]);
	for (int i = 0; i < 4; i++)
		free(good[i]);
}
END_TEST

/* Until the daemon's /status says `want` slots are busy. */
static int wait_slots_busy(int want, usec_t timeout)
{
	usec_t end = time_mono() + tu_timeout(timeout);

	do {
		long status = 0;
		_cleanup_free_ char *body = tu_lessee_status_get(D, "/status", &status);
		cJSON *j = body ? cJSON_Parse(body) : NULL;
		bool there = status == 200 && tu_jnum_or(j, "slots_busy", -1) == want;

		cJSON_Delete(j);
		if (there)
			return 0;
		tu_sleep(20 * USEC_PER_MSEC);
	} while (time_mono() < end);
	return -ETIMEDOUT;
}

START_TEST(test_drain_reports_everything)
{
	char *ids[25];
	usec_t end;
	int running = 0, succeeded = 0, pending = 0;
	cJSON *stats;

	D = tu_lessee_free(D);
	start_lessee("[worker]\nconcurrency = 20\n[status]\nlisten = 127.0.0.1:0\n");
	for (int i = 0; i < 25; i++)
		ids[i] = enqueue("sleep2", NULL);
	end = time_mono() + tu_timeout(20 * SEC);
	do {
		stats = admin("GET", "/v1/stats", NULL, 200);
		running = (int)tu_jnum_or(cJSON_GetObjectItem(stats, "counts"), "running",
				    tu_jnum_or(stats, "running", 0));
		cJSON_Delete(stats);
		if (running < 20)
			tu_sleep(20 * USEC_PER_MSEC);
	} while (running < 20 && time_mono() < end);
	ck_assert_int_eq(running, 20);
	/* and the daemon holds them all: lessor counts a grant whose answer may
	 * still be on its way (a drain gives such runs back unstarted) */
	ck_assert_int_eq(wait_slots_busy(20, 20 * SEC), 0);
	ck_assert_int_eq(tu_lessee_signal(D, SIGTERM), 0);
	ck_assert_int_eq(tu_lessee_wait(D, 30 * SEC), 0);
	for (int i = 0; i < 25; i++) {
		cJSON *run = tu_lessor_get_run(L, ids[i]);
		const char *st = tu_jstr(run, "status");

		if (streq(st, "succeeded"))
			succeeded++;
		else if (streq(st, "pending") &&
			 cJSON_GetArraySize(cJSON_GetObjectItem(run, "leases")) == 0)
			pending++;
		cJSON_Delete(run);
		free(ids[i]);
	}
	ck_assert_int_eq(succeeded, 20);
	ck_assert_int_eq(pending, 5); /* never claimed after the signal */
}
END_TEST

START_TEST(test_second_sigterm_releases)
{
	char *ids[3];
	pid_t pids[3];
	long status = 0;
	cJSON *resp = NULL;

	for (int i = 0; i < 3; i++)
		ids[i] = enqueue("sleeper", NULL);
	for (int i = 0; i < 3; i++)
		pids[i] = log_pid(ids[i], "pid");
	ck_assert_int_eq(tu_lessee_signal(D, SIGTERM), 0);
	tu_sleep(200 * USEC_PER_MSEC);
	ck_assert_int_eq(tu_lessee_signal(D, SIGTERM), 0);
	ck_assert_int_eq(tu_lessee_wait(D, 20 * SEC), 0);
	for (int i = 0; i < 3; i++) {
		cJSON *run = tu_lessor_get_run(L, ids[i]);

		ck_assert_msg(!tu_pid_alive(pids[i]), "child %d survived", (int)pids[i]);
		ck_assert_str_eq(tu_jstr(run, "status"), "pending");
		ck_assert_int_eq((int)tu_jnum_or(run, "attempts_used", -1), 0);
		cJSON_Delete(run);
	}
	/* claimable at once by anyone */
	ck_assert_int_eq(tu_lessor_json(L, "POST", "/v1/claims",
					"{\"claim_id\":\"c-after\",\"worker_id\":\"other\","
					"\"max_runs\":10,\"lease_ttl_s\":30,\"wait_s\":0}",
					&status, &resp),
			 0);
	ck_assert_int_eq(status, 200);
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(resp, "runs")), 3);
	cJSON_Delete(resp);
	for (int i = 0; i < 3; i++)
		free(ids[i]);
}
END_TEST

START_TEST(test_api_outage)
{
	_cleanup_free_ char *id = NULL;
	cJSON *run, *leases;

	/* a ttl that outlasts the outage plus a slow (valgrind) lessor restart */
	D = tu_lessee_free(D);
	start_lessee("[worker]\nlease_ttl = 30s\n");
	id = enqueue("sleep4", NULL);
	log_pid(id, "pid");
	ck_assert_int_eq(tu_lessor_stop(L), 0);
	tu_sleep(2 * SEC); /* 2 x lease_refresh */
	ck_assert_int_eq(tu_lessor_restart(L), 0);
	wait_status(id, "succeeded", 20 * SEC);
	run = tu_lessor_get_run(L, id);
	leases = cJSON_GetObjectItem(run, "leases");
	ck_assert_int_eq(cJSON_GetArraySize(leases), 1);
	ck_assert_str_eq(tu_jstr(cJSON_GetArrayItem(leases, 0), "end_reason"), "completed");
	cJSON_Delete(run);
	_cleanup_free_ char *log = run_log(id);
	ck_assert_ptr_nonnull(strstr(log, "done\n"));
}
END_TEST

START_TEST(test_sigkill_recovery)
{
	_cleanup_free_ char *id = enqueue("sleep2", NULL);
	pid_t pid = log_pid(id, "pid");
	cJSON *run, *leases;
	long long end0, start1;

	ck_assert_int_eq(tu_lessee_signal(D, SIGKILL), 0);
	ck_assert_int_eq(tu_lessee_wait(D, 5 * SEC), 128 + SIGKILL);
	/* PR_SET_PDEATHSIG: the run does not outlive its daemon */
	ck_assert_msg(wait_dead(pid, 3 * SEC), "orphaned run %d kept running", (int)pid);
	ck_assert_int_eq(tu_lessee_restart(D), 0);
	wait_status(id, "succeeded", 30 * SEC);
	run = tu_lessor_get_run(L, id);
	leases = cJSON_GetObjectItem(run, "leases");
	ck_assert_int_eq(cJSON_GetArraySize(leases), 2);
	ck_assert_str_eq(tu_jstr(cJSON_GetArrayItem(leases, 0), "end_reason"), "expired");
	end0 = tu_rfc3339_ms(tu_jstr(cJSON_GetArrayItem(leases, 0), "ended_at"));
	start1 = tu_rfc3339_ms(tu_jstr(cJSON_GetArrayItem(leases, 1), "granted_at"));
	ck_assert_msg(end0 > 0 && start1 >= end0, "leases overlap: %lld < %lld", start1, end0);
	cJSON_Delete(run);
}
END_TEST

START_TEST(test_spool_delivered_after_restart)
{
	_cleanup_free_ char *id = NULL;
	cJSON *run;

	D = tu_lessee_free(D);
	start_lessee("[worker]\nlease_ttl = 60s\nlease_refresh = 1s\n");
	id = enqueue("sleep2", NULL);
	log_pid(id, "pid");
	ck_assert_int_eq(tu_lessor_stop(L), 0);          /* the API goes away */
	tu_sleep(3 * SEC);                                /* the run ends meanwhile */
	ck_assert_int_eq(tu_lessee_signal(D, SIGTERM), 0); /* drain: report retries */
	tu_sleep(300 * USEC_PER_MSEC);
	ck_assert_int_eq(tu_lessee_signal(D, SIGTERM), 0); /* hard stop: spool it */
	ck_assert_int_eq(tu_lessee_wait(D, 30 * SEC), 0);
	ck_assert_int_eq(tu_lessee_wait_log(D, "result spooled", SEC), 0);
	ck_assert_int_eq(tu_lessor_restart(L), 0);
	ck_assert_int_eq(tu_lessee_restart(D), 0);
	wait_status(id, "succeeded", 20 * SEC);
	ck_assert_int_eq(tu_lessee_wait_log(D, "spooled result delivered", 5 * SEC), 0);
	run = tu_lessor_get_run(L, id);
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(run, "leases")), 1);
	cJSON_Delete(run);
}
END_TEST

START_TEST(test_log_byte_exact)
{
	_cleanup_free_ char *id = enqueue("gen", NULL), *log = NULL, *want = malloc(5242880);
	size_t len = 0;
	uint64_t s = tu_gen_seed(0);

	wait_status(id, "succeeded", 60 * SEC);
	log = tu_lessor_run_log(L, id, &len);
	ck_assert_ptr_nonnull(log);
	ck_assert_uint_eq(len, 5242880);
	tu_gen_fill(&s, want, 5242880);
	ck_assert(memcmp(log, want, len) == 0);
}
END_TEST

START_TEST(test_slow_api_does_not_block)
{
	_cleanup_free_ char *id = NULL, *log = NULL;
	char *const args[] = {"--enable-faults", NULL};
	size_t len = 0;
	cJSON *run;

	teardown();
	setup_scripts();
	start_lessor(args);
	start_lessee(NULL);
	cJSON_Delete(admin("POST", "/v1/admin/faults",
			   "{\"endpoint\":\"log\",\"delay_ms\":1500,\"count\":1000}", 200));
	id = enqueue("flood", NULL);
	wait_status(id, "succeeded", 90 * SEC);
	run = tu_lessor_get_run(L, id);
	/* 20 MiB at 1 MiB per 1.5 s would take 30 s if the pipe were throttled */
	ck_assert_msg(tu_jnum_or(run, "duration_ms", 1e9) < 10000, "the child was held back: %.0f ms",
		      tu_jnum_or(run, "duration_ms", 0));
	cJSON_Delete(run);
	log = tu_lessor_run_log(L, id, &len);
	ck_assert_ptr_nonnull(log);
	ck_assert_msg(memmem(log, len, "bytes dropped: log shipping fell behind]", 40),
		      "no drop marker in %zu bytes", len);
	ck_assert_uint_lt(len, 20971520);
}
END_TEST

START_TEST(test_reload)
{
	_cleanup_free_ char *a = NULL, *b = NULL, *conf = NULL, *extra = NULL, *la = NULL,
			    *lb = NULL;

	write_script("v1.sh", "echo version-one");
	write_script("v2.sh", "echo version-two");
	D = tu_lessee_free(D);
	ck_assert_int_ge(asprintf(&extra, "[workflow.version]\ncommand = %s/v1.sh\n", scripts), 0);
	start_lessee(extra);
	a = enqueue("version", NULL);
	wait_status(a, "succeeded", 20 * SEC);
	free(extra);
	ck_assert_int_ge(asprintf(&extra,
				  "[workflow.version]\ncommand = %s/v2.sh\n"
				  "[worker]\nconcurrency = 6\nid = renamed\n",
				  scripts),
			 0);
	conf = conf_text(extra);
	ck_assert_int_eq(tu_lessee_set_conf(D, conf), 0);
	ck_assert_int_eq(tu_lessee_signal(D, SIGHUP), 0);
	ck_assert_int_eq(tu_lessee_wait_log(D, "worker.concurrency: 4 -> 6", 10 * SEC), 0);
	/* worker.id needs a restart: said, not applied */
	ck_assert_int_eq(tu_lessee_wait_log(D, "(needs a restart, not applied)", 5 * SEC), 0);
	b = enqueue("version", NULL);
	wait_status(b, "succeeded", 20 * SEC);
	la = run_log(a);
	lb = run_log(b);
	ck_assert_str_eq(la, "version-one\n");
	ck_assert_str_eq(lb, "version-two\n");
}
END_TEST

START_TEST(test_auth_refused)
{
	_cleanup_free_ char *extra = NULL, *bad = NULL, *body = NULL;
	long status = 0;

	D = tu_lessee_free(D);
	ck_assert_int_ge(asprintf(&bad, "%s/wrong-token", scripts), 0);
	ck_assert_int_eq(write_file_atomic(bad, "not-the-token", 13, 0600), 0);
	ck_assert_int_ge(asprintf(&extra, "[api]\ntoken_file = %s\n[status]\nlisten = 127.0.0.1:0\n",
				  bad), 0);
	start_lessee(extra);
	ck_assert_int_eq(tu_lessee_wait_log(D, "API refuses our credentials (HTTP 401)", 10 * SEC), 0);
	body = tu_lessee_status_get(D, "/readyz", &status);
	ck_assert_ptr_nonnull(body);
	ck_assert_int_eq(status, 503);
	ck_assert_msg(strstr(body, "credentials"), "readyz said: %s", body);
	tu_sleep(2 * SEC);
	/* one line per change of state, not per attempt */
	ck_assert_int_eq(log_count("refuses our credentials"), 1);
}
END_TEST

START_TEST(test_retry_after_honoured)
{
	_cleanup_free_ char *id = NULL;
	char *const args[] = {"--enable-faults", NULL};
	usec_t t0;

	teardown();
	setup_scripts();
	start_lessor(args);
	start_lessee(NULL);
	cJSON_Delete(admin("POST", "/v1/admin/faults",
			   "{\"endpoint\":\"complete\",\"status\":503,\"count\":2,"
			   "\"retry_after_s\":1}",
			   200));
	t0 = time_mono();
	id = enqueue("ok", "\"input\":1");
	wait_status(id, "succeeded", 30 * SEC);
	/* two refusals, each asking for a second: the result lands after both */
	ck_assert_uint_ge(time_mono() - t0, 2 * SEC);
	ck_assert_int_eq(log_count("report failed (HTTP 503), retrying"), 2);
}
END_TEST

static prom_doc_t *scrape(void)
{
	_cleanup_free_ char *text = NULL, *err = NULL;
	long status = 0;
	prom_doc_t *doc = NULL;

	text = tu_lessee_status_get(D, "/metrics", &status);
	ck_assert_ptr_nonnull(text);
	ck_assert_int_eq(status, 200);
	ck_assert_msg(prom_parse(text, strlen(text), &doc, &err) == 0, "metrics: %s", err);
	return doc;
}

START_TEST(test_metrics_count_exactly)
{
	static const char *const wfs[] = {"ok", "ok", "fail", "crash", "missing"};
	char *ids[5];
	prom_doc_t *doc;
	_cleanup_free_ char *body = NULL;
	long status = 0;

	D = tu_lessee_free(D);
	start_lessee("[status]\nlisten = 127.0.0.1:0\n");
	for (int i = 0; i < 5; i++)
		ids[i] = enqueue(wfs[i], "\"max_attempts\":1");
	for (int i = 0; i < 5; i++) {
		wait_status(ids[i], i < 2 ? "succeeded" : "failed", 20 * SEC);
		free(ids[i]);
	}
	tu_sleep(300 * USEC_PER_MSEC); /* the last report's bookkeeping */
	doc = scrape();
#define V(...) prom_value(doc, __VA_ARGS__, NULL)
	ck_assert_double_eq(V("lessee_runs_started_total", "workflow", "ok"), 2);
	ck_assert_double_eq(V("lessee_runs_started_total", "workflow", "missing"), 1);
	ck_assert_double_eq(V("lessee_runs_finished_total", "workflow", "ok", "outcome", "succeeded"), 2);
	ck_assert_double_eq(V("lessee_runs_finished_total", "workflow", "fail", "outcome", "failed"), 1);
	ck_assert_double_eq(V("lessee_runs_finished_total", "workflow", "crash", "outcome", "crash"), 1);
	ck_assert_double_eq(V("lessee_runs_finished_total", "workflow", "missing", "outcome",
	                      tu_wrapped() ? "failed" : "spawn_error"),
	                    1); /* valgrind: see test_outcomes */
	ck_assert_double_eq(prom_sum(doc, "lessee_runs_finished_total", NULL), 5);
	ck_assert_double_eq(V("lessee_run_duration_seconds_count", "workflow", "ok"), 2);
	ck_assert_double_eq(V("lessee_runs_in_flight"), 0);
	ck_assert_double_eq(V("lessee_slots"), 4);
	ck_assert_double_eq(V("lessee_leases_lost_total"), 0);
	ck_assert_double_eq(V("lessee_draining"), 0);
	ck_assert_double_eq(V("lessee_io_backend_info", "backend", tu_backend()), 1);
	/* five completions, acknowledged, in one request each or fewer together */
	ck_assert_double_eq(
	    prom_sum(doc, "lessee_api_requests_total", "endpoint", "complete", "code", "200", NULL),
	    0);
	ck_assert(prom_sum(doc, "lessee_api_requests_total", "endpoint", "completions", "code",
	                   "200", NULL) >= 1);
	ck_assert(prom_sum(doc, "lessee_api_requests_total", "endpoint", "completions", "code",
	                   "200", NULL) <= 5);
	ck_assert(prom_sum(doc, "lessee_claims_total", "result", "runs", NULL) >= 1);
#undef V
	prom_free(doc);
	body = tu_lessee_status_get(D, "/readyz", &status);
	ck_assert_int_eq(status, 200);
	free(body);
	body = tu_lessee_status_get(D, "/status", &status);
	ck_assert_int_eq(status, 200);
	ck_assert_ptr_nonnull(strstr(body, "\"runs_done\":5"));
}
END_TEST

/* One scrape: the loop's wake-ups and the API requests so far. */
static void scrape_wakeups(double *ret_wakeups, double *ret_requests)
{
	prom_doc_t *doc = scrape();

	*ret_wakeups = prom_value(doc, "lessee_loop_wakeups_total", NULL);
	*ret_requests = prom_sum(doc, "lessee_api_requests_total", NULL);
	prom_free(doc);
}

/* An idle daemon sleeps until something is due (the long poll's end, the
 * watchdog): no periodic tick.  A scrape costs the loop a few wake-ups of its
 * own (accept, read, answer, the close), measured as the difference of two
 * scrapes half a second apart; two scrapes ten seconds apart, with a long poll
 * in flight and nothing else due, may cost no more than that (give or take how
 * the close falls into iterations).  With the old 1 s status tick they cost
 * about eight more.  A window in which an API request
 * completed (the long poll ended) is not idle and is measured again. */
START_TEST(test_idle_no_tick)
{
	double w0, w1, w2, q0, q1, q2;
	int tries = 0;

	D = tu_lessee_free(D);
	start_lessee("[status]\nlisten = 127.0.0.1:0\n[worker]\nlong_poll = 30s\n");
	do {
		ck_assert_int_lt(tries++, 5);
		scrape_wakeups(&w0, &q0);
		tu_sleep(SEC / 2);
		scrape_wakeups(&w1, &q1);
		tu_sleep(10 * SEC); /* the interval in which nothing may happen */
		scrape_wakeups(&w2, &q2);
	} while (q0 != q2);
	ck_assert_msg(w2 - w1 <= (w1 - w0) + 2,
		      "%.0f wake-ups in 10 idle seconds, a scrape alone costs %.0f", w2 - w1,
		      w1 - w0);
}
END_TEST

/* Started with a soft limit of 1024 fds under a hard one of 4096: the daemon
 * takes the hard limit for itself, its runs get the 1024 it started with
 * (select() users keep working), and a concurrency whose fds do not fit
 * (5000 runs x 1 + a reserve > 4096) is lowered, said at start and at each
 * reload. */
START_TEST(test_fd_limits)
{
	char *const wrap[] = {"prlimit", "--nofile=1024:4096", "--", NULL};
	_cleanup_free_ char *conf = NULL, *extra = NULL, *limits = NULL, *id = NULL, *log = NULL;
	char path[64];

	if (tu_wrapped())
		return; /* valgrind keeps the process's fd limit, and 12 fds of it, for itself */

	write_script("limits.sh", "echo \"$(ulimit -Sn) $(ulimit -Hn)\"");
	D = tu_lessee_free(D);
	ck_assert_int_ge(asprintf(&extra,
	                          "[workflow.limits]\ncommand = %s/limits.sh\n"
	                          "[worker]\nconcurrency = 5000\n",
	                          scripts),
	                 0);
	conf = conf_text(extra);
	ck_assert_int_eq(
	    tu_lessee_start(&(struct tu_lessee_opts){.lessor = L, .conf = conf, .wrap = wrap}, &D),
	    0);
	snprintf(path, sizeof(path), "/proc/%d/limits", (int)tu_lessee_pid(D));
	ck_assert_int_eq(read_file_capped(path, 65536, &limits, NULL), 0);
	ck_assert_msg(strstr(limits, "Max open files            4096                 4096"), "%s",
	              limits);
	ck_assert_int_eq(tu_lessee_wait_log(D, "worker.concurrency=5000 lowered to ", 5 * SEC),
	                 0);
	ck_assert_int_eq(log_count("LimitNOFILE="), 1);
	id = enqueue("limits", NULL);
	wait_status(id, "succeeded", 20 * SEC);
	log = run_log(id);
	ck_assert_str_eq(log, "1024 4096\n");
	free(conf);
	free(extra);
	ck_assert_int_ge(asprintf(&extra,
	                          "[workflow.limits]\ncommand = %s/limits.sh\n"
	                          "[worker]\nconcurrency = 5010\n",
	                          scripts),
	                 0);
	conf = conf_text(extra);
	ck_assert_int_eq(tu_lessee_set_conf(D, conf), 0);
	ck_assert_int_eq(tu_lessee_signal(D, SIGHUP), 0);
	ck_assert_int_eq(tu_lessee_wait_log(D, "worker.concurrency: 5000 -> 5010", 10 * SEC), 0);
	ck_assert_int_eq(tu_lessee_wait_log(D, "worker.concurrency=5010 lowered to ", 5 * SEC),
	                 0);
	ck_assert_int_eq(log_count("LimitNOFILE="), 2);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("lessee");
	TCase *tc = tcase_create("e2e");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_outcomes);
	tcase_add_test(tc, test_child_environment);
	tcase_add_test(tc, test_timeout_kills_group);
	tcase_add_test(tc, test_lease_stolen);
	tcase_add_test(tc, test_cancel);
	tcase_add_test(tc, test_breaker);
	tcase_add_test(tc, test_drain_reports_everything);
	tcase_add_test(tc, test_second_sigterm_releases);
	tcase_add_test(tc, test_api_outage);
	tcase_add_test(tc, test_sigkill_recovery);
	tcase_add_test(tc, test_spool_delivered_after_restart);
	tcase_add_test(tc, test_log_byte_exact);
	tcase_add_test(tc, test_slow_api_does_not_block);
	tcase_add_test(tc, test_reload);
	tcase_add_test(tc, test_auth_refused);
	tcase_add_test(tc, test_retry_after_honoured);
	tcase_add_test(tc, test_metrics_count_exactly);
	tcase_add_test(tc, test_idle_no_tick);
	suite_add_tcase(s, tc);
	tc = tcase_create("fdlimits");
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_fd_limits);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
