/* What an operator meets on day one: configuration errors reported in full by
 * --check-config, a failing claim logged (rate-limited), counted and named by
 * /readyz, --log-format journal without journald, a bad LESSEE_IO_BACKEND,
 * and a /metrics page whose families exist (zeroed) from the start and pass
 * the strict parser and promtool.  Real lessee, real lessor. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "jsonutil.h" /* tu_fmt */
#include "lessee_proc.h"
#include "lessor_proc.h"
#include "promparse.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"

#define SEC USEC_PER_SEC

static char *tmp;
static struct tu_lessor *L;
static struct tu_lessee *D;

static void setup(void)
{
	tmp = tu_tmpdir("operator");
	ck_assert_ptr_nonnull(tmp);
}

static void teardown(void)
{
	if (D)
		ck_assert_int_eq(tu_lessee_quit(D), 0);
	D = tu_lessee_free(D);
	if (L)
		tu_lessor_stop(L);
	L = tu_lessor_free(L);
	rm_rf(tmp);
	free(tmp);
}

static char *put(const char *name, const char *text, mode_t mode)
{
	char *p;

	ck_assert_int_ge(asprintf(&p, "%s/%s", tmp, name), 0);
	ck_assert_int_eq(write_file_atomic(p, text, strlen(text), mode), 0);
	return p;
}

static char *slurp(const char *path)
{
	char *text = NULL;
	size_t len = 0;

	ck_assert_int_eq(read_file_capped(path, 1 << 20, &text, &len), 0);
	return text;
}

/* Run lessee with args (NULL-terminated) and extra environment: its exit
 * status; *ret_out and *ret_err its stdout and stderr. */
static int run_lessee(char *const *args, const char *env1, char **ret_out, char **ret_err)
{
	_cleanup_free_ char *out = NULL, *err = NULL;
	char *argv[32] = {(char *)(uintptr_t)tu_lessee_bin()};
	size_t n = 1;
	int st = 0;
	pid_t pid;

	for (; args[n - 1] && n < ELEMENTSOF(argv) - 1; n++)
		argv[n] = args[n - 1];
	argv[n] = NULL;
	ck_assert_int_ge(asprintf(&out, "%s/stdout", tmp), 0);
	ck_assert_int_ge(asprintf(&err, "%s/stderr", tmp), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		int e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);

		if (o < 0 || e < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0)
			_exit(127);
		unsetenv("JOURNAL_STREAM");
		unsetenv("NOTIFY_SOCKET");
		if (env1)
			putenv((char *)(uintptr_t)env1);
		/* every call here expects an exit of its own: a daemon that runs
		 * on instead ends by SIGALRM, not by the suite's timeout */
		alarm((unsigned)(tu_timeout(20 * SEC) / SEC));
		execv(argv[0], argv);
		_exit(127);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	*ret_out = slurp(out);
	*ret_err = slurp(err);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static size_t count(const char *hay, const char *needle)
{
	size_t n = 0;

	for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
		n++;
	return n;
}

/* ---- --check-config ---- */

START_TEST(test_check_config_reports_everything)
{
	_cleanup_free_ char *conf = NULL, *path = NULL, *out = NULL, *err = NULL, *want = NULL;
	char *args[] = {"--check-config", "-c", NULL, NULL};

	ck_assert_int_ge(asprintf(&conf,
	                          "[api]\nurl = http://host:99999\n"
	                          "[worker]\nconcurrency = 4 # four\n"
	                          "[workflow.a]\ncommand = %s/nope\nkill_grace = 5s\n",
	                          tmp),
	                 0);
	path = put("lessee.conf", conf, 0644);
	args[2] = path;
	ck_assert_int_eq(run_lessee(args, NULL, &out, &err), 78);
	ck_assert_int_ge(
	    asprintf(&want, "%s:2: api.url: 'http://host:99999' is not a valid URL", path), 0);
	ck_assert_msg(strstr(err, want), "stderr: %s", err);
	ck_assert_msg(strstr(err,
	                     ":4: worker.concurrency: '4 # four' is not a whole number (inline "
	                     "comments are not supported"),
	              "stderr: %s", err);
	ck_assert_msg(strstr(err, ":6: workflow.a.command: "), "stderr: %s", err);
	ck_assert_msg(strstr(err, ": No such file or directory"), "stderr: %s", err);
	ck_assert_msg(strstr(err, ":7: unknown key 'kill_grace' in [workflow.a] (`kill_grace` is a "
	                          "[worker] key)"),
	              "stderr: %s", err);
	ck_assert_str_eq(out, "");
}
END_TEST

START_TEST(test_check_config_prints_warnings)
{
	_cleanup_free_ char *path = NULL, *out = NULL, *err = NULL;
	char *args[] = {"--check-config", "-c", NULL, NULL};

	path = put("lessee.conf",
	           "[api]\nurl = http://127.0.0.1:1\n[worker]\nconcurrency = 2\nconcurrency = 3\n"
	           "[workflow.a]\ncommand = /bin/true\n",
	           0644);
	args[2] = path;
	ck_assert_int_eq(run_lessee(args, NULL, &out, &err), 0);
	ck_assert_msg(strstr(err, "worker.concurrency is set again (first at line 4): the last one "
	                          "wins"),
	              "stderr: %s", err);
	ck_assert_ptr_nonnull(strstr(out, "concurrency = 3"));
}
END_TEST

/* What --check-config prints loads back as it is: the same configuration,
 * with the same warnings as the file it was printed from, and none of its own
 * (keys of another protocol, printed empty, were "ignored with" warnings). */
START_TEST(test_check_config_output_loads_back)
{
	static const char *const protocols[] = {"native", "conductor", "camunda7"};

	for (size_t i = 0; i < ELEMENTSOF(protocols); i++) {
		_cleanup_free_ char *conf = NULL, *path = NULL, *printed = NULL;
		_cleanup_free_ char *out = NULL, *err = NULL, *out2 = NULL, *err2 = NULL;
		char *args[] = {"--check-config", "-c", NULL, NULL};

		ck_assert_int_ge(asprintf(&conf,
		                          "[api]\nurl = http://127.0.0.1:1\nprotocol = %s\n"
		                          "[workflow.a]\ncommand = /bin/true\n",
		                          protocols[i]),
		                 0);
		args[2] = path = put("lessee.conf", conf, 0644);
		ck_assert_int_eq(run_lessee(args, NULL, &out, &err), 0);
		args[2] = printed = put("printed.conf", out, 0644);
		ck_assert_int_eq(run_lessee(args, NULL, &out2, &err2), 0);
		ck_assert_msg(streq(err2, err),
		              "%s: printed, then loaded:\n%s\nwhere the file had:\n%s",
		              protocols[i], err2, err);
		/* a protocol's own keys are printed under it only */
		ck_assert_msg(!!strstr(out, "\ntopic =") == streq(protocols[i], "camunda7"), "%s",
		              out);
		ck_assert_msg(!!strstr(out, "\nkey_id =") == streq(protocols[i], "conductor"), "%s",
		              out);
		ck_assert_msg(!!strstr(out, "\ntask_type =") == streq(protocols[i], "conductor"),
		              "%s", out);
	}
}
END_TEST

START_TEST(test_bad_io_backend)
{
	_cleanup_free_ char *path = NULL, *out = NULL, *err = NULL;
	char *args[] = {"-c", NULL, NULL};

	path = put("lessee.conf",
	           "[api]\nurl = http://127.0.0.1:1\n[status]\nlisten =\n"
	           "[workflow.a]\ncommand = /bin/true\n",
	           0644);
	args[1] = path;
	ck_assert_int_eq(run_lessee(args, "LESSEE_IO_BACKEND=kqueue", &out, &err), 78);
	ck_assert_msg(strstr(err, "LESSEE_IO_BACKEND"), "stderr: %s", err);
	ck_assert_msg(strstr(err, "kqueue"), "stderr: %s", err);
}
END_TEST

/* spool_dir and run_dir are made at start, and one the daemon cannot make
 * stops the start (78): else every run would end in a spawn_error, opening
 * the workflow's breaker, and a result to spool would find nowhere to go. */
START_TEST(test_unusable_dirs_stop_the_start)
{
	static const char *const keys[] = {"run_dir", "spool_dir"};
	_cleanup_free_ char *path = NULL, *file = NULL;

	path = put("lessee.conf",
	           "[api]\nurl = http://127.0.0.1:1\n[status]\nlisten =\n"
	           "[workflow.a]\ncommand = /bin/true\n",
	           0644);
	file = put("a-file", "", 0644);
	for (size_t i = 0; i < ELEMENTSOF(keys); i++) {
		_cleanup_free_ char *set = tu_fmt("worker.%s=%s/under", keys[i], file);
		_cleanup_free_ char *out = NULL, *err = NULL, *want = NULL;
		char *args[] = {"-c", path, "--set", set, NULL};

		ck_assert_int_eq(run_lessee(args, NULL, &out, &err), 78);
		want =
		    tu_fmt("worker.%s %s/under: cannot create it: Not a directory", keys[i], file);
		ck_assert_msg(strstr(err, want), "stderr: %s", err);
	}
}
END_TEST

START_TEST(test_dirs_made_at_start)
{
	_cleanup_free_ char *run = tu_fmt("%s/fresh/run", tmp);
	_cleanup_free_ char *spool = tu_fmt("%s/fresh/spool", tmp);
	_cleanup_free_ char *set_run = tu_fmt("worker.run_dir=%s", run);
	_cleanup_free_ char *set_spool = tu_fmt("worker.spool_dir=%s", spool);
	char *args[] = {"--set", set_run, "--set", set_spool, NULL};
	struct stat st;

	ck_assert_int_eq(tu_lessor_start(NULL, &L), 0);
	ck_assert_int_eq(
	    tu_lessee_start(&(struct tu_lessee_opts){.lessor = L,
	                                             .conf = "[workflow.a]\ncommand = /bin/true\n",
	                                             .args = args},
	                    &D),
	    0);
	ck_assert_int_eq(stat(run, &st), 0);
	ck_assert(S_ISDIR(st.st_mode));
	/* a run dropped to run_user must get through it to its own directory */
	ck_assert_int_eq(st.st_mode & 0777, 0711);
	ck_assert_int_eq(stat(spool, &st), 0);
	ck_assert(S_ISDIR(st.st_mode));
	ck_assert_int_eq(st.st_mode & 0077, 0);
}
END_TEST

/* A reload to a command that is not there is refused, with the reason, and
 * the daemon keeps the configuration it runs. */
START_TEST(test_reload_checks_commands)
{
	ck_assert_int_ge(tu_lessor_start(&(struct tu_lessor_opts){0}, &L), 0);
	ck_assert_int_eq(tu_lessee_start(&(struct tu_lessee_opts){.lessor = L,
	                                                          .conf = "[workflow.a]\ncommand = "
	                                                                  "/bin/true\n"},
	                                 &D),
	                 0);
	ck_assert_int_eq(tu_lessee_set_conf(D, "[workflow.a]\ncommand = /nonexistent/lessee-x\n"),
	                 0);
	ck_assert_int_eq(tu_lessee_signal(D, SIGHUP), 0);
	ck_assert_int_eq(
	    tu_lessee_wait_log(D,
	                       "workflow.a.command: /nonexistent/lessee-x: No such file "
	                       "or directory",
	                       tu_timeout(10 * SEC)),
	    0);
	ck_assert_int_eq(tu_lessee_wait_log(D, "reload failed: keeping the running configuration",
	                                    tu_timeout(10 * SEC)),
	                 0);
}
END_TEST

/* ---- the command line ---- */

START_TEST(test_cli)
{
	_cleanup_free_ char *out = NULL, *err = NULL;

	ck_assert_int_eq(run_lessee((char *[]){"-V", NULL}, NULL, &out, &err), 0);
	ck_assert_str_eq(out, "lessee " LESSEE_VERSION "\n");
	free(out), free(err);
	ck_assert_int_eq(run_lessee((char *[]){"status", "--help", NULL}, NULL, &out, &err), 0);
	ck_assert_msg(startswith(out, "Usage: lessee status "), "%s", out);
	ck_assert_ptr_nonnull(strstr(out, "--healthz"));
	free(out), free(err);
	/* getopt's own messages carry the program's name, not the path it was run by */
	ck_assert_int_eq(run_lessee((char *[]){"--bogus", NULL}, NULL, &out, &err), 2);
	ck_assert_msg(startswith(err, "lessee: unrecognized option '--bogus'"), "%s", err);
	free(out), free(err);
	/* the status command asks a running daemon; --check-config would be ignored */
	ck_assert_int_eq(run_lessee((char *[]){"--check-config", "status", NULL}, NULL, &out, &err),
	                 2);
	ck_assert_msg(startswith(err, "lessee: --check-config does not go with the status command"),
	              "%s", err);
}
END_TEST

/* ---- a failing claim: logged, counted, named ---- */

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

static double claims(const char *result)
{
	prom_doc_t *doc = scrape();
	double v = prom_value(doc, "lessee_claims_total", "result", result, NULL);

	prom_free(doc);
	return v;
}

START_TEST(test_claim_failures_logged_counted_and_ready_says_why)
{
	int port = tu_free_port(); /* nothing listens there */
	_cleanup_free_ char *conf = NULL, *body = NULL, *log = NULL;
	long status = 0;
	usec_t until;

	ck_assert_int_ge(tu_lessor_start(&(struct tu_lessor_opts){0}, &L), 0);
	ck_assert_int_ge(
	    asprintf(&conf,
	             "[api]\nurl = http://127.0.0.1:%d\n[status]\nlisten = 127.0.0.1:0\n"
	             "[workflow.a]\ncommand = /bin/true\n",
	             port),
	    0);
	ck_assert_int_eq(tu_lessee_start(&(struct tu_lessee_opts){.lessor = L, .conf = conf}, &D),
	                 0);
	ck_assert_int_eq(tu_lessee_wait_log(D, "claim failed: ", tu_timeout(10 * SEC)), 0);
	/* counted from the first: a zero before, one per attempt after */
	until = time_mono() + tu_timeout(30 * SEC);
	while (claims("error") < 3 && time_mono() < until)
		tu_sleep(200 * USEC_PER_MSEC);
	ck_assert_double_ge(claims("error"), 3);
	/* logged once, not once per attempt (the summary comes a minute later) */
	log = tu_lessee_log(D);
	ck_assert_uint_eq(count(log, "claim failed: "), 1);
	body = tu_lessee_status_get(D, "/readyz", &status);
	ck_assert_ptr_nonnull(body);
	ck_assert_int_eq(status, 503);
	ck_assert_msg(strstr(body, "last claim failed: "), "readyz: %s", body);
}
END_TEST

/* ---- signals ---- */

/* A signal lessee has no use for (a log rotation script's SIGUSR1, a stray
 * SIGALRM) is logged and ignored: its default action killed the daemon
 * silently, its runs left without an owner until their leases expired. */
START_TEST(test_stray_signals_ignored)
{
	static const int sigs[] = {SIGUSR1, SIGUSR2, SIGALRM, SIGVTALRM, SIGXFSZ, SIGPWR};
	_cleanup_free_ char *body = NULL;
	long status = 0;

	ck_assert_int_ge(tu_lessor_start(&(struct tu_lessor_opts){0}, &L), 0);
	ck_assert_int_eq(
	    tu_lessee_start(&(struct tu_lessee_opts){.lessor = L,
	                                             .conf = "[status]\nlisten = 127.0.0.1:0\n"
	                                                     "[workflow.a]\ncommand = /bin/true\n"},
	                    &D),
	    0);
	for (size_t i = 0; i < ELEMENTSOF(sigs); i++) {
		_cleanup_free_ char *want =
		    tu_fmt("received SIG%s: ignored", sigabbrev_np(sigs[i]));

		ck_assert_int_eq(tu_lessee_signal(D, sigs[i]), 0);
		if (sigs[i] != SIGXFSZ) /* ignored outright: a write past RLIMIT_FSIZE fails */
			ck_assert_msg(tu_lessee_wait_log(D, want, tu_timeout(10 * SEC)) == 0,
			              "no '%s'", want);
	}
	body = tu_lessee_status_get(D, "/healthz", &status);
	ck_assert_int_eq(status, 200);
	ck_assert_int_eq(tu_lessee_signal(D, SIGTERM), 0);
	ck_assert_int_eq(tu_lessee_wait(D, tu_timeout(20 * SEC)), 0);
}
END_TEST

/* ---- logging ---- */

START_TEST(test_journal_without_journald_falls_back)
{
	char *const args[] = {"--log-format", "journal", NULL};
	_cleanup_free_ char *log = NULL;

	if (access("/run/systemd/journal/socket", F_OK) == 0)
		return; /* a journal is there: nothing to fall back from */
	ck_assert_int_ge(tu_lessor_start(&(struct tu_lessor_opts){0}, &L), 0);
	ck_assert_int_eq(tu_lessee_start(&(struct tu_lessee_opts){.lessor = L,
	                                                          .conf = "[workflow.a]\ncommand = "
	                                                                  "/bin/true\n",
	                                                          .args = args},
	                                 &D),
	                 0);
	ck_assert_int_eq(
	    tu_lessee_wait_log(D, "lessee " LESSEE_VERSION " starting", tu_timeout(5 * SEC)), 0);
	log = tu_lessee_log(D);
	ck_assert_uint_eq(count(log, "journald is not reachable"), 1);
}
END_TEST

/* ---- metrics ---- */

static void check_promtool(const char *text)
{
	_cleanup_free_ char *path = NULL, *cmd = NULL;
	int st;

	if (system("command -v promtool >/dev/null 2>&1") != 0) {
		fprintf(stderr, "promtool not installed: skipping its check\n");
		return;
	}
	path = put("metrics.txt", text, 0644);
	ck_assert_int_ge(
	    asprintf(&cmd, "promtool check metrics < '%s' > '%s/promtool.out' 2>&1", path, tmp), 0);
	st = system(cmd);
	if (st != 0) {
		_cleanup_free_ char *o = NULL, *p = NULL;

		ck_assert_int_ge(asprintf(&p, "%s/promtool.out", tmp), 0);
		o = slurp(p);
		ck_abort_msg("promtool check metrics failed: %s", o);
	}
}

START_TEST(test_metrics_complete_from_the_start)
{
	static const char *const claim_results[] = {"runs",   "empty",    "invalid", "too_large",
	                                            "denied", "rejected", "error"};
	static const char *const outcomes[] = {"succeeded", "failed",      "timeout",
	                                       "crash",     "spawn_error", "rejected",
	                                       "cancelled", "lease_lost",  "released"};
	static const char *const process[] = {"process_cpu_seconds_total",
	                                      "process_resident_memory_bytes",
	                                      "process_virtual_memory_bytes",
	                                      "process_open_fds",
	                                      "process_max_fds",
	                                      "process_start_time_seconds"};
	_cleanup_free_ char *text = NULL, *err = NULL;
	const struct prom_family *f;
	prom_doc_t *doc = NULL;
	long status = 0;

	ck_assert_int_ge(tu_lessor_start(&(struct tu_lessor_opts){.token = "tok"}, &L), 0);
	ck_assert_int_eq(tu_lessee_start(&(struct tu_lessee_opts){.lessor = L,
	                                                          .conf = "[status]\nlisten = "
	                                                                  "127.0.0.1:0\n"
	                                                                  "[workflow.a]\ncommand = "
	                                                                  "/bin/true\n"},
	                                 &D),
	                 0);
	text = tu_lessee_status_get(D, "/metrics", &status);
	ck_assert_ptr_nonnull(text);
	ck_assert_int_eq(status, 200);
	ck_assert_msg(prom_parse(text, strlen(text), &doc, &err) == 0, "metrics: %s\n%s", err,
	              text);
	for (size_t i = 0; i < ELEMENTSOF(claim_results); i++)
		ck_assert_msg(
		    prom_find(doc, "lessee_claims_total", "result", claim_results[i], NULL),
		    "no lessee_claims_total{result=\"%s\"}", claim_results[i]);
	ck_assert_double_eq(prom_value(doc, "lessee_claims_total", "result", "denied", NULL), 0);
	for (size_t i = 0; i < ELEMENTSOF(outcomes); i++)
		ck_assert_msg(prom_find(doc, "lessee_runs_finished_total", "outcome", outcomes[i],
		                        "workflow", "a", NULL),
		              "no lessee_runs_finished_total{workflow=\"a\",outcome=\"%s\"}",
		              outcomes[i]);
	ck_assert_ptr_nonnull(prom_find(doc, "lessee_runs_started_total", "workflow", "a", NULL));
	ck_assert_double_eq(prom_value(doc, "lessee_lease_renewals_total", "result", "lost", NULL),
	                    0);
	ck_assert_double_eq(
	    prom_value(doc, "lessee_run_duration_seconds_count", "workflow", "a", NULL), 0);
	ck_assert_double_eq(
	    prom_value(doc, "lessee_log_dropped_bytes_total", "reason", "buffer_full", NULL), 0);
	ck_assert_double_eq(prom_value(doc, "lessee_log_shipped_bytes_total", NULL), 0);
	ck_assert_ptr_null(prom_family(doc, "lessee_log_bytes_shipped_total"));
	ck_assert_ptr_null(prom_family(doc, "lessee_io_backend"));
	ck_assert_double_eq(
	    prom_value(doc, "lessee_io_backend_info", "backend", tu_backend(), NULL), 1);
	ck_assert_double_eq(prom_value(doc, "lessee_build_info", "version", LESSEE_VERSION, NULL),
	                    1);
	for (size_t i = 0; i < ELEMENTSOF(process); i++) {
		ck_assert_msg((f = prom_family(doc, process[i])), "no %s", process[i]);
		ck_assert_uint_eq(f->n, 1);
		ck_assert_msg(doc->samples[f->first].value > 0 || i == 0 /* a fresh process */,
		              "%s = %g", process[i], doc->samples[f->first].value);
	}
	ck_assert_int_eq(prom_family(doc, "process_cpu_seconds_total")->type, PROM_COUNTER);
	ck_assert_double_ge(prom_value(doc, "process_max_fds", NULL),
	                    prom_value(doc, "process_open_fds", NULL));
	/* started within the last hour, in Unix seconds */
	ck_assert_double_ge(prom_value(doc, "process_start_time_seconds", NULL),
	                    (double)(time_real() / USEC_PER_SEC) - 3600);
	check_promtool(text);
	prom_free(doc);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("operator");
	TCase *tc = tcase_create("operator");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_check_config_reports_everything);
	tcase_add_test(tc, test_check_config_prints_warnings);
	tcase_add_test(tc, test_check_config_output_loads_back);
	tcase_add_test(tc, test_bad_io_backend);
	tcase_add_test(tc, test_unusable_dirs_stop_the_start);
	tcase_add_test(tc, test_dirs_made_at_start);
	tcase_add_test(tc, test_cli);
	tcase_add_test(tc, test_reload_checks_commands);
	tcase_add_test(tc, test_claim_failures_logged_counted_and_ready_says_why);
	tcase_add_test(tc, test_stray_signals_ignored);
	tcase_add_test(tc, test_journal_without_journald_falls_back);
	tcase_add_test(tc, test_metrics_complete_from_the_start);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
