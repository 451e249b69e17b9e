/* The spool and the exactness of shipped logs, end to end: the real daemon, a
 * real lessor with fault injection, real children.
 *
 * - spool entries belong to one lease: refusing an old lease's entry never
 *   removes a newer lease's result for the same run;
 * - temporaries a crash left in the spool are removed at start;
 * - a result over 8 MiB is spooled and delivered;
 * - a run re-executed after its first execution shipped its log: the log is
 *   the old bytes, one marker line, then the new execution's bytes;
 * - a hard stop while the log is still shipping (FLUSHING): the spool keeps
 *   the unshipped log and the next start appends it before the completion. */
#include <cJSON.h>
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lessee_proc.h"
#include "lessor_proc.h"
#include "jsonutil.h"
#include "testutil.h"
#include "util/buf.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"

#define SEC USEC_PER_SEC

static struct tu_lessor *L;
static struct tu_lessee *D;
static char *scripts; /* the workflows' scripts, and the files they use */

/* ---------------------------------------------------------------- helpers */

static void write_script(const char *name, const char *body)
{
	char path[512];
	_cleanup_free_ char *text = NULL;

	snprintf(path, sizeof(path), "%s/%s", scripts, name);
	ck_assert_int_ge(asprintf(&text, "#!/bin/sh\nS=%s\n%s\n", scripts, body), 0);
	ck_assert_int_eq(write_file_atomic(path, text, strlen(text), 0755), 0);
}

static void touch(const char *name, bool present)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/%s", scripts, name);
	if (present)
		ck_assert_int_eq(write_file_atomic(path, "", 0, 0644), 0);
	else
		ck_assert(unlink(path) == 0 || errno == ENOENT);
}

static void setup(void)
{
	char *const args[] = {"--enable-faults", "--max-body-bytes", "64M", NULL};

	scripts = tu_tmpdir("scripts");
	ck_assert_ptr_nonnull(scripts);
	/* each execution counts itself; waits for the gate; says which it was */
	write_script("gated.sh", "n=$(cat $S/count 2>/dev/null || echo 0); n=$((n+1))\n"
	                         "echo $n > $S/count\n"
	                         "while [ ! -e $S/gate ]; do sleep 0.05; done\n"
	                         "echo \"execution $n\"\n"
	                         "echo \"{\\\"exec\\\":$n}\" > \"$LESSEE_RESULT_FILE\"");
	/* a result of 9 MiB: a JSON string */
	write_script("big.sh", "{ printf '\"'; head -c 9437184 /dev/zero | tr '\\0' a; "
	                       "printf '\"'; } > \"$LESSEE_RESULT_FILE\"");
	/* 10000 bytes, the gate, 10000 more */
	write_script("half.sh", "head -c 10000 /dev/zero | tr '\\0' a\n"
	                        "while [ ! -e $S/gate ]; do sleep 0.05; done\n"
	                        "head -c 10000 /dev/zero | tr '\\0' b");
	/* the first execution ships 204 lines and hangs; the next ones finish */
	write_script("rerun.sh",
	             "n=$(cat $S/count 2>/dev/null || echo 0); n=$((n+1))\n"
	             "echo $n > $S/count\n"
	             "i=1; while [ $i -le 204 ]; do echo \"exec $n line $i\"; i=$((i+1)); "
	             "done\n"
	             "[ $n -gt 1 ] || exec sleep 1000");
	ck_assert_int_eq(
	    tu_lessor_start(&(struct tu_lessor_opts){.token = "t0ken-for-tests", .args = args}, &L),
	    0);
}

static void start_lessee(void)
{
	_cleanup_free_ char *aux = tu_aux_bin(""), *conf = NULL;

	aux[strlen(aux) - 1] = '\0';
	ck_assert_int_ge(
	    asprintf(&conf,
	             "[workflow.gated]\ncommand = %1$s/gated.sh\n"
	             "[workflow.big]\ncommand = %1$s/big.sh\n"
	             "[workflow.rerun]\ncommand = %1$s/rerun.sh\n"
	             "[workflow.gen]\ncommand = %2$s/gen_output 20000\n"
	             "[workflow.half]\ncommand = %1$s/half.sh\n"
	             "[api]\nrequest_timeout = 10s\n"
	             "[worker]\nkill_grace = 3s\nlease_ttl = 30s\nmax_output_bytes = 32M\n"
	             /* one port for every restart: the log keeps the first */
	             "[status]\nlisten = 127.0.0.1:%3$d\n",
	             scripts, aux, tu_free_port()),
	    0);
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

static cJSON *admin(const char *method, const char *path, const char *body, long want)
{
	long status = 0;
	cJSON *resp = NULL;

	ck_assert_int_eq(tu_lessor_json(L, method, path, body, &status, &resp), 0);
	ck_assert_msg(status == want, "%s %s: HTTP %ld, expected %ld", method, path, status, want);
	return resp;
}

static void fault(const char *json)
{
	cJSON_Delete(admin("POST", "/v1/admin/faults", json, 200));
}

static void faults_clear(void)
{
	cJSON_Delete(admin("DELETE", "/v1/admin/faults", NULL, 200));
}

/* Until the fault armed for this endpoint is used up. */
static void wait_fault_used(const char *endpoint, usec_t timeout)
{
	usec_t end = time_mono() + tu_timeout(timeout);

	for (;;) {
		cJSON *f = admin("GET", "/v1/admin/faults", NULL, 200);
		bool armed = cJSON_GetObjectItemCaseSensitive(f, endpoint) != NULL;

		cJSON_Delete(f);
		if (!armed)
			return;
		ck_assert_msg(time_mono() < end, "the %s fault was not used", endpoint);
		tu_sleep(20 * USEC_PER_MSEC);
	}
}

static char *enqueue(const char *workflow)
{
	char *id = tu_lessor_enqueue_wf(L, workflow, "\"max_attempts\":5");

	ck_assert_ptr_nonnull(id);
	return id;
}

static void wait_status(const char *id, const char *status, usec_t timeout)
{
	ck_assert_msg(tu_lessor_wait_status(L, id, status, timeout) == 0,
	              "run %s did not reach status %s", id, status);
}

static int log_count(const char *needle)
{
	_cleanup_free_ char *log = tu_lessee_log(D);
	int n = 0;

	for (const char *p = log; p && (p = strstr(p, needle)); p++)
		n++;
	return n;
}

static void wait_log_count(const char *needle, int n, usec_t timeout)
{
	usec_t end = time_mono() + tu_timeout(timeout);

	while (log_count(needle) < n) {
		ck_assert_msg(time_mono() < end, "the lessee log does not say '%s' %d times",
		              needle, n);
		tu_sleep(20 * USEC_PER_MSEC);
	}
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);

	return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Files in the daemon's spool whose name ends so. */
static int spool_files(const char *suffix)
{
	_cleanup_free_ char *dir = NULL;
	struct dirent *de;
	DIR *d;
	int n = 0;

	ck_assert_int_ge(asprintf(&dir, "%s/spool", tu_lessee_dir(D)), 0);
	d = opendir(dir);
	if (!d)
		return 0;
	while ((de = readdir(d)))
		if (de->d_name[0] != '.' && ends_with(de->d_name, suffix))
			n++;
	closedir(d);
	return n;
}

/* SIGTERM (drain), then SIGTERM again (hard stop), and the exit. */
static void hard_stop(void)
{
	int n = log_count("draining:");

	ck_assert_int_eq(tu_lessee_signal(D, SIGTERM), 0);
	wait_log_count("draining:", n + 1, 5 * SEC);
	ck_assert_int_eq(tu_lessee_signal(D, SIGTERM), 0);
	ck_assert_int_eq(tu_lessee_wait(D, 40 * SEC), 0);
}

/* The daemon's /metrics has this exact line. */
static void assert_metric(const char *line)
{
	_cleanup_free_ char *text = NULL, *want = NULL;
	long status = 0;

	text = tu_lessee_status_get(D, "/metrics", &status);
	ck_assert_ptr_nonnull(text);
	ck_assert_int_eq(status, 200);
	ck_assert_int_ge(asprintf(&want, "\n%s\n", line), 0);
	ck_assert_msg(strstr(text, want), "no '%s' in the metrics:\n%s", line, text);
}

static cJSON *get_run(const char *id)
{
	cJSON *run = tu_lessor_get_run(L, id);

	ck_assert_ptr_nonnull(run);
	return run;
}

/* ---------------------------------------------------------------- tests */

/* Lease 1's result is spooled; the run is requeued; the next start delivers
 * it slowly (the API answers 409 only after lease 2's result was spooled by a
 * hard stop).  Refusing lease 1's entry must leave lease 2's, which the start
 * after delivers. */
START_TEST(test_old_entry_refused_keeps_newer)
{
	_cleanup_free_ char *id = NULL, *path = NULL;
	cJSON *run;
	int failed;

	touch("gate", true);
	fault("{\"endpoint\":\"complete\",\"status\":503,\"count\":100000}");
	start_lessee();
	id = enqueue("gated");
	wait_log_count("report failed (HTTP 503)", 1, 20 * SEC);
	hard_stop();
	ck_assert_int_eq(tu_lessee_wait_log(D, "result spooled", SEC), 0);
	ck_assert_int_eq(spool_files(".complete"), 1);

	ck_assert_int_ge(asprintf(&path, "/v1/runs/%s/requeue", id), 0);
	cJSON_Delete(admin("POST", path, "{}", 200));
	touch("gate", false);
	fault("{\"endpoint\":\"complete\",\"delay_ms\":6000,\"count\":1}");
	failed = log_count("report failed (HTTP 503)");
	ck_assert_int_eq(tu_lessee_restart(D), 0);
	wait_fault_used("complete", 5 * SEC); /* lease 1's entry is on its way */
	fault("{\"endpoint\":\"complete\",\"status\":503,\"count\":100000}");
	touch("gate", true); /* the second execution may finish */
	wait_log_count("report failed (HTTP 503)", failed + 1, 20 * SEC);
	hard_stop();
	ck_assert_int_eq(tu_lessee_wait_log(D, "spooled result refused (HTTP 409", SEC), 0);
	ck_assert_msg(spool_files(".complete") == 1, "lease 2's result is not in the spool (%d)",
	              spool_files(".complete"));

	faults_clear();
	ck_assert_int_eq(tu_lessee_restart(D), 0);
	wait_status(id, "succeeded", 20 * SEC);
	run = get_run(id);
	ck_assert_int_eq((int)tu_jnum_or(cJSON_GetObjectItem(run, "output"), "exec", 0), 2);
	cJSON_Delete(run);
	wait_log_count("spooled result delivered", 1, 10 * SEC);
	ck_assert_int_eq(spool_files(".complete"), 0);
	assert_metric("lessee_spool_delivered_total 1");
}
END_TEST

START_TEST(test_stale_tmp_cleaned)
{
	_cleanup_free_ char *dir = NULL, *a = NULL, *b = NULL;

	start_lessee();
	ck_assert_int_eq(tu_lessee_quit(D), 0);
	ck_assert_int_ge(asprintf(&dir, "%s/spool", tu_lessee_dir(D)), 0);
	ck_assert_int_ge(asprintf(&a, "%s/r-9@0123456789abcdef.complete.tmpAbC123", dir), 0);
	ck_assert_int_ge(asprintf(&b, "%s/r-8.complete.tmpXyZ789", dir), 0);
	ck_assert_int_eq(mkdir_p(dir, 0700), 0);
	ck_assert_int_eq(write_file_atomic(a, "{\"tok", 5, 0600), 0);
	ck_assert_int_eq(write_file_atomic(b, "{", 1, 0600), 0);
	ck_assert_int_eq(tu_lessee_restart(D), 0);
	ck_assert_msg(access(a, F_OK) < 0 && access(b, F_OK) < 0, "stale temporaries are left");
	ck_assert_int_eq(spool_files(""), 0);
}
END_TEST

/* An entry that cannot be read back is said, counted and left in place. */
START_TEST(test_unreadable_entry_counted)
{
	_cleanup_free_ char *dir = NULL, *a = NULL, *b = NULL;

	start_lessee();
	ck_assert_int_eq(tu_lessee_quit(D), 0);
	ck_assert_int_ge(asprintf(&dir, "%s/spool", tu_lessee_dir(D)), 0);
	ck_assert_int_ge(asprintf(&a, "%s/r-7@0000000000000001.complete", dir), 0);
	ck_assert_int_ge(asprintf(&b, "%s/r-7@0000000000000001.log", dir), 0);
	ck_assert_int_eq(mkdir_p(dir, 0700), 0);
	ck_assert_int_eq(write_file_atomic(a, "{\"token\":\"x\"}", 13, 0600), 0);
	ck_assert_int_eq(write_file_atomic(b, "garbage\n", 8, 0600), 0);
	ck_assert_int_eq(tu_lessee_restart(D), 0);
	ck_assert_int_eq(tu_lessee_wait_log(D,
	                                    "cannot read the spooled result r-7@0000000000000001: "
	                                    "Bad message; left in place",
	                                    5 * SEC),
	                 0);
	assert_metric("lessee_spool_dropped_total{reason=\"unreadable\"} 1");
	ck_assert_int_eq(access(a, F_OK), 0);
	ck_assert_int_eq(access(b, F_OK), 0);
}
END_TEST

START_TEST(test_big_result_spooled)
{
	_cleanup_free_ char *id = NULL;
	const cJSON *out;
	cJSON *run;

	fault("{\"endpoint\":\"complete\",\"status\":503,\"count\":100000}");
	start_lessee();
	id = enqueue("big");
	wait_log_count("report failed (HTTP 503)", 1, 30 * SEC);
	hard_stop();
	ck_assert_int_eq(tu_lessee_wait_log(D, "result spooled", SEC), 0);
	faults_clear();
	ck_assert_int_eq(tu_lessee_restart(D), 0);
	wait_log_count("spooled result delivered", 1, 30 * SEC);
	wait_status(id, "succeeded", 10 * SEC);
	run = get_run(id);
	out = cJSON_GetObjectItem(run, "output");
	if (!cJSON_IsString(out)) {
		char *t = cJSON_PrintUnformatted(run);
		fprintf(stderr, "RUN: %.600s\n", t);
		free(t);
	}
	ck_assert(cJSON_IsString(out));
	ck_assert_uint_eq(strlen(out->valuestring), 9437184);
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(run, "leases")), 1);
	cJSON_Delete(run);
	ck_assert_int_eq(spool_files(""), 0);
}
END_TEST

/* An HTTP 408 to a spooled result's delivery is a passing fault, as it is to a
 * live completion (one classification of the answer, the driver's): the
 * entry is kept and delivered again, not dropped as refused. */
START_TEST(test_spool_retries_on_408)
{
	_cleanup_free_ char *id = NULL;

	fault("{\"endpoint\":\"complete\",\"status\":503,\"count\":100000}");
	start_lessee();
	id = enqueue("gen");
	wait_log_count("report failed (HTTP 503)", 1, 30 * SEC);
	hard_stop();
	ck_assert_int_eq(tu_lessee_wait_log(D, "result spooled", SEC), 0);
	faults_clear();
	fault("{\"endpoint\":\"complete\",\"status\":408,\"count\":1}");
	ck_assert_int_eq(tu_lessee_restart(D), 0);
	wait_log_count("not delivered (HTTP 408), retrying", 1, 30 * SEC);
	wait_log_count("spooled result delivered", 1, 30 * SEC);
	wait_status(id, "succeeded", 10 * SEC);
	ck_assert_int_eq(log_count("spooled result refused"), 0);
	ck_assert_int_eq(spool_files(""), 0);
}
END_TEST

static size_t lines_text(struct buf *b, int exec)
{
	for (int i = 1; i <= 204; i++) {
		char line[64];
		int n = snprintf(line, sizeof(line), "exec %d line %d\n", exec, i);

		ck_assert_int_ge(buf_append(b, line, (size_t)n), 0);
	}
	return b->len;
}

/* The log is the first execution's 204 lines, one marker line, then the
 * second execution's 204 lines, byte for byte. */
START_TEST(test_reexecuted_log_marked)
{
	_cleanup_free_ char *id = NULL, *path = NULL, *log = NULL;
	struct buf first = BUF_INIT(0), second = BUF_INIT(0);
	usec_t end;
	size_t len = 0;
	const char *p, *q;
	cJSON *run;

	lines_text(&first, 1);
	lines_text(&second, 2);
	start_lessee();
	id = enqueue("rerun");
	end = time_mono() + tu_timeout(20 * SEC);
	for (;;) { /* the first execution shipped its whole log */
		free(log);
		log = tu_lessor_run_log(L, id, &len);
		if (log && len == first.len)
			break;
		ck_assert_msg(time_mono() < end, "the first execution shipped %zu bytes", len);
		tu_sleep(50 * USEC_PER_MSEC);
	}
	ck_assert_int_ge(asprintf(&path, "/v1/runs/%s/requeue", id), 0);
	cJSON_Delete(admin("POST", path, "{}", 200));
	wait_status(id, "succeeded", 40 * SEC);

	free(log);
	log = tu_lessor_run_log(L, id, &len);
	ck_assert_ptr_nonnull(log);
	ck_assert_msg(len > first.len + second.len, "the log holds %zu bytes:\n%.*s", len, (int)len,
	              log);
	ck_assert(memcmp(log, first.data, first.len) == 0);
	p = log + first.len;
	ck_assert_msg(startswith(p, "\n[lessee: attempt "), "no marker after the old bytes: %.80s",
	              p);
	q = memchr(p + 1, '\n', len - first.len - 1);
	ck_assert_ptr_nonnull(q);
	ck_assert_msg(strstr(p, ", execution restarted (lease ") && strstr(p, ")]\n") == q - 2,
	              "bad marker: %.*s", (int)(q - p), p);
	q++;
	ck_assert_uint_eq(len - (size_t)(q - log), second.len);
	ck_assert(memcmp(q, second.data, second.len) == 0);
	run = get_run(id);
	ck_assert_int_eq((int)tu_jnum_or(run, "log_length", -1), (int)len);
	cJSON_Delete(run);
	buf_done(&first);
	buf_done(&second);
}
END_TEST

/* The run writes 20000 bytes and exits while every log append fails: it sits
 * in FLUSHING.  A hard stop spools the result with the unshipped log; the
 * next start appends it, then completes with the log's length. */
START_TEST(test_hard_stop_flushing_keeps_log)
{
	_cleanup_free_ char *id = NULL, *log = NULL, *want = malloc(20000);
	uint64_t s = tu_gen_seed(0);
	size_t len = 0;
	cJSON *run;

	fault("{\"endpoint\":\"log\",\"status\":503,\"count\":100000}");
	start_lessee();
	id = enqueue("gen");
	ck_assert_int_eq(tu_lessee_wait_log(D, "running -> flushing", 20 * SEC), 0);
	hard_stop();
	ck_assert_int_eq(tu_lessee_wait_log(D, "result spooled", SEC), 0);
	faults_clear();
	ck_assert_int_eq(tu_lessee_restart(D), 0);
	wait_status(id, "succeeded", 20 * SEC);
	log = tu_lessor_run_log(L, id, &len);
	ck_assert_ptr_nonnull(log);
	ck_assert_uint_eq(len, 20000);
	tu_gen_fill(&s, want, 20000);
	ck_assert(memcmp(log, want, len) == 0);
	run = get_run(id);
	ck_assert_int_eq((int)tu_jnum_or(run, "log_length", -1), 20000);
	ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(run, "leases")), 1);
	cJSON_Delete(run);
	wait_log_count("spooled result delivered", 1, 10 * SEC);
	ck_assert_int_eq(spool_files(""), 0);
	assert_metric("lessee_spool_delivered_total 1");
}
END_TEST

/* Half the log is shipped before the API fails: the spool keeps the other
 * half with its offset, and the next start appends exactly that. */
START_TEST(test_hard_stop_flushing_keeps_tail)
{
	_cleanup_free_ char *id = NULL, *log = NULL;
	usec_t end;
	size_t len = 0;
	cJSON *run;

	touch("gate", false);
	start_lessee();
	id = enqueue("half");
	end = time_mono() + tu_timeout(20 * SEC);
	for (;;) { /* the first half is on the server */
		free(log);
		log = tu_lessor_run_log(L, id, &len);
		if (log && len == 10000)
			break;
		ck_assert_msg(time_mono() < end, "the first half did not arrive (%zu bytes)", len);
		tu_sleep(50 * USEC_PER_MSEC);
	}
	fault("{\"endpoint\":\"log\",\"status\":503,\"count\":100000}");
	touch("gate", true);
	ck_assert_int_eq(tu_lessee_wait_log(D, "running -> flushing", 20 * SEC), 0);
	hard_stop();
	ck_assert_int_eq(tu_lessee_wait_log(D, "result spooled", SEC), 0);
	faults_clear();
	ck_assert_int_eq(tu_lessee_restart(D), 0);
	wait_status(id, "succeeded", 20 * SEC);
	free(log);
	log = tu_lessor_run_log(L, id, &len);
	ck_assert_ptr_nonnull(log);
	ck_assert_uint_eq(len, 20000);
	for (size_t i = 0; i < len; i++)
		ck_assert_msg(log[i] == (i < 10000 ? 'a' : 'b'), "byte %zu is %d", i, log[i]);
	run = get_run(id);
	ck_assert_int_eq((int)tu_jnum_or(run, "log_length", -1), 20000);
	cJSON_Delete(run);
	wait_log_count("spooled result delivered", 1, 10 * SEC);
	ck_assert_int_eq(spool_files(""), 0);
}
END_TEST

/* CHECK_SPOOL_ONLY=substring runs only the matching tests (while debugging one). */
#define ADD(tc, t)                                                                                 \
	do {                                                                                       \
		const char *only = getenv("CHECK_SPOOL_ONLY");                                     \
		if (!only || strstr(#t, only))                                                     \
			tcase_add_test(tc, t);                                                     \
	} while (0)

int main(void)
{
	Suite *s = suite_create("spool");
	TCase *tc = tcase_create("e2e");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 150);
	ADD(tc, test_old_entry_refused_keeps_newer);
	ADD(tc, test_stale_tmp_cleaned);
	ADD(tc, test_unreadable_entry_counted);
	ADD(tc, test_big_result_spooled);
	ADD(tc, test_spool_retries_on_408);
	ADD(tc, test_reexecuted_log_marked);
	ADD(tc, test_hard_stop_flushing_keeps_log);
	ADD(tc, test_hard_stop_flushing_keeps_tail);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
