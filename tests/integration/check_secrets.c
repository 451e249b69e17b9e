/* The daemon's secrets are out of its runs' reach (issue 11, item 1): the real
 * daemon, a real lessor, a real job (tests/aux/snoop) that tries the daemon's
 * /proc/PID/{maps,mem,environ,fd}, PTRACE_ATTACH and PTRACE_SEIZE, its own
 * inherited fds, the credentials directory and the spool, and prints what it
 * reached.
 *
 * The daemon runs as an unprivileged user made for the test (setpriv), with
 * the token in a systemd-like credentials directory:
 * - same uid: a workflow without user= runs as the daemon's own uid.  Even
 *   so its memory, environment and fds are out of reach (PR_SET_DUMPABLE 0),
 *   and it cannot ptrace it;
 * - shipped: the daemon holds what the shipped units give it (ambient
 *   CAP_SETUID CAP_SETGID CAP_CHOWN CAP_DAC_OVERRIDE CAP_KILL) and
 *   worker.run_user sends runs to another unprivileged user: then the
 *   credentials and the spool are out of reach too.
 * Needs root (to make the users and drop to them): exit 77 otherwise. */
#include <check.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "lessee_proc.h"
#include "lessor_proc.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"

#define SEC USEC_PER_SEC
#define TOKEN "sn00p-s3cret-4f1c9a2e77d0b6"
#define DAEMON_USER "lessee-snoopd"
#define RUN_USER "lessee-snoopr"
#define SECRET_JSON "{\"secret\":\"daemon-only-7c1e\"}"
#define NEEDLE_LINE "snoop mem: found"
#define CAPS "+setuid,+setgid,+chown,+dac_override,+kill"

static struct tu_lessor *L;
static struct tu_lessee *D;
static char *base; /* creds/, spool/, run/, wrap.sh */
static bool made_user[2];
static struct passwd daemon_pw, run_pw;

/* ---------------------------------------------------------------- users */

static bool user_get(const char *name, struct passwd *ret)
{
	struct passwd *pw = getpwnam(name);

	if (!pw)
		return false;
	*ret = *pw;
	ret->pw_name = ret->pw_passwd = ret->pw_gecos = ret->pw_dir = ret->pw_shell = NULL;
	return true;
}

static void user_make(const char *name, struct passwd *ret, bool *made)
{
	_cleanup_free_ char *cmd = NULL;

	if (user_get(name, ret))
		return; /* not ours (or left by a killed run): kept */
	ck_assert_int_ge(asprintf(&cmd,
	                          "useradd --system --user-group --no-create-home "
	                          "--home-dir /nonexistent --shell /usr/sbin/nologin %s",
	                          name),
	                 0);
	ck_assert_msg(system(cmd) == 0, "%s failed", cmd);
	*made = true;
	ck_assert(user_get(name, ret));
}

static void user_remove(const char *name, bool *made)
{
	_cleanup_free_ char *cmd = NULL;

	if (!*made || asprintf(&cmd, "userdel %s", name) < 0)
		return;
	if (system(cmd) != 0)
		fprintf(stderr, "check_secrets: %s failed\n", cmd);
	*made = false;
}

static bool dir_is_empty(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *de;
	bool empty = true;

	ck_assert_msg(d, "%s: %s", path, strerror(errno));
	while ((de = readdir(d)))
		if (!streq(de->d_name, ".") && !streq(de->d_name, ".."))
			empty = false;
	closedir(d);
	return empty;
}

/* ---------------------------------------------------------------- setup */

static void path_at(char *buf, size_t len, const char *name)
{
	ck_assert_int_lt(snprintf(buf, len, "%s/%s", base, name), (int)len);
}

static void mkdir_owned(const char *name, mode_t mode)
{
	char p[512];

	path_at(p, sizeof(p), name);
	ck_assert_int_eq(mkdir(p, mode), 0);
	ck_assert_int_eq(chown(p, daemon_pw.pw_uid, daemon_pw.pw_gid), 0);
	ck_assert_int_eq(chmod(p, mode), 0);
}

/* Like systemd's LoadCredential=: a directory only the daemon's user can
 * read, holding api-token. */
static void make_creds(void)
{
	char p[512];

	mkdir_owned("creds", 0700);
	path_at(p, sizeof(p), "creds/api-token");
	ck_assert_int_eq(write_file_atomic(p, TOKEN, strlen(TOKEN), 0400), 0);
	ck_assert_int_eq(chown(p, daemon_pw.pw_uid, daemon_pw.pw_gid), 0);
	path_at(p, sizeof(p), "creds");
	ck_assert_int_eq(chmod(p, 0500), 0);
}

/* The daemon's private directory (its configuration, the notify socket) goes
 * to its user, then setpriv drops to it, with the given capabilities and the
 * units' umask. */
static void make_wrapper(bool caps)
{
	_cleanup_free_ char *text = NULL;
	char p[512];

	ck_assert_int_ge(
	    asprintf(&text,
	             "#!/bin/sh\n"
	             "for a; do [ \"$prev\" = --config ] && conf=$a; prev=$a; done\n"
	             "d=$(dirname \"$conf\")\n"
	             "chown -R %1$s: \"$d\" && chmod 0711 \"$d\" || exit 125\n"
	             "umask 077\n" /* as the units' UMask= */
	             "exec setpriv --reuid=%1$s --regid=%1$s --clear-groups %2$s -- \"$@\"\n",
	             DAEMON_USER,
	             caps ? "--inh-caps=" CAPS " --ambient-caps=" CAPS " --bounding-set=-all," CAPS
	                  : "--bounding-set=-all"),
	    0);
	path_at(p, sizeof(p), "wrap.sh");
	ck_assert_int_eq(write_file_atomic(p, text, strlen(text), 0755), 0);
}

/* A run's result file is a symbolic link to a secret of the daemon's, or a
 * FIFO that would block whoever opens it for reading. */
static void make_trick_scripts(void)
{
	_cleanup_free_ char *steal = NULL;
	static const char fifo[] = "#!/bin/sh\nmkfifo \"$LESSEE_RESULT_FILE\"\n";
	char p[512];

	path_at(p, sizeof(p), "secret.json");
	ck_assert_int_eq(write_file_atomic(p, SECRET_JSON, strlen(SECRET_JSON), 0600), 0);
	ck_assert_int_eq(chown(p, daemon_pw.pw_uid, daemon_pw.pw_gid), 0);
	ck_assert_int_ge(asprintf(&steal, "#!/bin/sh\nln -s %s \"$LESSEE_RESULT_FILE\"\n", p), 0);
	path_at(p, sizeof(p), "steal.sh");
	ck_assert_int_eq(write_file_atomic(p, steal, strlen(steal), 0755), 0);
	path_at(p, sizeof(p), "fifo.sh");
	ck_assert_int_eq(write_file_atomic(p, fifo, strlen(fifo), 0755), 0);
}

/* An ordinary job: reads its input, fills its directory, writes a result. */
static void make_work_script(void)
{
	static const char text[] =
	    "#!/bin/sh\n"
	    "n=$(cat)\n"
	    "mkdir -p sub/deeper && echo data >sub/deeper/file && chmod 0500 sub\n"
	    "printf '{\"n\":%s,\"uid\":%s}\\n' \"$n\" \"$(id -u)\" "
	    ">\"$LESSEE_RESULT_FILE\"\n";
	char p[512];

	path_at(p, sizeof(p), "work.sh");
	ck_assert_int_eq(write_file_atomic(p, text, strlen(text), 0755), 0);
}

/* Once, in the parent (an unchecked fixture): a failed test skips its own
 * teardown, and the users must not outlive the suite. */
static void users_setup(void)
{
	user_make(DAEMON_USER, &daemon_pw, &made_user[0]);
	user_make(RUN_USER, &run_pw, &made_user[1]);
}

static void users_teardown(void)
{
	user_remove(RUN_USER, &made_user[1]);
	user_remove(DAEMON_USER, &made_user[0]);
}

static void setup(void)
{
	base = tu_tmpdir("secrets");
	ck_assert_ptr_nonnull(base);
	ck_assert_int_eq(chmod(base, 0711), 0); /* as RuntimeDirectoryMode=0711 */
	mkdir_owned("spool", 0700);
	mkdir_owned("run", 0711);
	make_creds();
	make_work_script();
	make_trick_scripts();
	ck_assert_int_eq(tu_lessor_start(&(struct tu_lessor_opts){.token = TOKEN}, &L), 0);
}

static void teardown(void)
{
	int st = D ? tu_lessee_quit(D) : 0;
	int ls = L ? tu_lessor_stop(L) : 0;

	D = tu_lessee_free(D);
	L = tu_lessor_free(L);
	if (base)
		rm_rf(base);
	free(base);
	base = NULL;
	ck_assert_msg(st == 0, "lessee exited with %d", st);
	ck_assert_msg(ls == 0, "lessor exited with %d", ls);
}

static void start_lessee(bool shipped)
{
	_cleanup_free_ char *snoop = tu_aux_bin("snoop"), *conf = NULL, *env0 = NULL, *wrap0 = NULL;
	char *env[] = {NULL, NULL}, *wrap[] = {NULL, NULL};

	make_wrapper(shipped);
	ck_assert_int_ge(asprintf(&wrap0, "%s/wrap.sh", base), 0);
	ck_assert_int_ge(asprintf(&env0, "CREDENTIALS_DIRECTORY=%s/creds", base), 0);
	env[0] = env0;
	wrap[0] = wrap0;
	ck_assert_int_ge(asprintf(&conf,
	                          "[api]\ntoken_file =\n"
	                          "[worker]\nspool_dir = %1$s/spool\nrun_dir = %1$s/run\n%3$s"
	                          "[workflow.snoop]\n"
	                          "command = %2$s --creds %1$s/creds --spool %1$s/spool\n"
	                          "[workflow.work]\ncommand = %1$s/work.sh\n"
	                          "[workflow.steal]\ncommand = %1$s/steal.sh\nuser = " RUN_USER "\n"
	                          "[workflow.fifo]\ncommand = %1$s/fifo.sh\nuser = " RUN_USER "\n"
	                          "[workflow.slow]\ncommand = /bin/sleep 1000\ntimeout = 1s\n",
	                          base, snoop, shipped ? "run_user = " RUN_USER "\n" : ""),
	                 0);
	ck_assert_int_eq(
	    tu_lessee_start(
	        &(struct tu_lessee_opts){.lessor = L, .conf = conf, .env = env, .wrap = wrap}, &D),
	    0);
}

/* Run snoop once: its log. */
static char *snoop(void)
{
	_cleanup_free_ char *id = tu_lessor_enqueue(L, "{\"workflow\":\"snoop\"}");
	size_t len = 0;
	char *log;

	ck_assert_ptr_nonnull(id);
	ck_assert_int_eq(tu_lessor_wait_status(L, id, "succeeded", tu_timeout(60 * SEC)), 0);
	log = tu_lessor_run_log(L, id, &len);
	ck_assert_ptr_nonnull(log);
	fprintf(stderr, "--- what the run reached:\n%s---\n", log);
	return log;
}

static void assert_denied(const char *log, const char *probe)
{
	_cleanup_free_ char *want = NULL;

	ck_assert_int_ge(asprintf(&want, "snoop %s: denied", probe), 0);
	ck_assert_msg(strstr(log, want), "%s: not denied", probe);
}

static void assert_uid(const char *log, uid_t uid)
{
	_cleanup_free_ char *want = NULL;

	ck_assert_int_ge(asprintf(&want, "snoop uid=%u gid=", (unsigned)uid), 0);
	ck_assert_msg(strstr(log, want), "the run did not run as uid %u", (unsigned)uid);
}

/* ---------------------------------------------------------------- tests */

/* A run as the daemon's own uid still reaches none of its memory. */
START_TEST(test_same_uid)
{
	_cleanup_free_ char *log = NULL;

	start_lessee(false);
	log = snoop();
	assert_uid(log, daemon_pw.pw_uid);
	ck_assert_msg(strstr(log, "snoop done"), "snoop did not finish");
	ck_assert_msg(!strstr(log, NEEDLE_LINE), "the run found the token in the daemon's memory");
	assert_denied(log, "maps");
	assert_denied(log, "mem");
	assert_denied(log, "environ");
	assert_denied(log, "daemon-fds");
	assert_denied(log, "ptrace-attach");
	assert_denied(log, "ptrace-seize");
	assert_denied(log, "fds");
	/* the daemon warns: the credential is still the run's to read */
	ck_assert_int_eq(
	    tu_lessee_wait_log(D, "runs as the daemon's own user", tu_timeout(5 * SEC)), 0);
}
END_TEST

/* The shipped design: runs as worker.run_user reach nothing at all. */
START_TEST(test_shipped)
{
	_cleanup_free_ char *log = NULL;

	start_lessee(true);
	log = snoop();
	assert_uid(log, run_pw.pw_uid);
	ck_assert_msg(strstr(log, "snoop done"), "snoop did not finish");
	ck_assert_msg(!strstr(log, TOKEN), "the run found the token");
	ck_assert_msg(!strstr(log, "REACHED"), "the run reached something of the daemon's");
}
END_TEST

/* With runs as another user, an ordinary job still works: the daemon writes
 * its input into the run's directory, reads its result, and removes the
 * directory the run filled (the capabilities the shipped units give it).
 * run_dir starts world-writable, as a Kubernetes emptyDir: the daemon takes
 * it back before any run. */
START_TEST(test_shipped_work)
{
	_cleanup_free_ char *id = NULL, *want = NULL, *rundir = NULL;
	cJSON *run, *out;
	struct stat st;
	char *text, p[512];

	path_at(p, sizeof(p), "run");
	ck_assert_int_eq(chmod(p, 0777), 0);
	start_lessee(true);
	ck_assert_int_eq(stat(p, &st), 0);
	ck_assert_msg((st.st_mode & 07777) == 0755, "run_dir is %04o", st.st_mode & 07777);
	id = tu_lessor_enqueue(L, "{\"workflow\":\"work\",\"input\":42,\"max_attempts\":1}");
	ck_assert_ptr_nonnull(id);
	ck_assert_int_eq(tu_lessor_wait_status(L, id, "succeeded", tu_timeout(30 * SEC)), 0);
	run = tu_lessor_get_run(L, id);
	out = cJSON_GetObjectItemCaseSensitive(run, "output");
	text = cJSON_PrintUnformatted(out);
	ck_assert_int_ge(asprintf(&want, "{\"n\":42,\"uid\":%u}", (unsigned)run_pw.pw_uid), 0);
	ck_assert_str_eq(text ? text : "(none)", want);
	free(text);
	cJSON_Delete(run);
	ck_assert_int_ge(asprintf(&rundir, "%s/run/lessee-%d", base, (int)tu_lessee_pid(D)), 0);
	/* removed when the run is freed, just after it is reported */
	for (usec_t end = time_mono() + tu_timeout(5 * SEC); !dir_is_empty(rundir);) {
		ck_assert_msg(time_mono() < end, "the run's directory was not removed");
		tu_sleep(20 * USEC_PER_MSEC);
	}
}
END_TEST

/* The daemon reads the result file the run made: not through a symbolic link
 * to what only the daemon may read, and a FIFO does not wedge the loop (the
 * next run still starts and ends).  Both fail with the reason (a result the
 * run cannot stand behind fails it), and the secret is nowhere. */
START_TEST(test_result_file)
{
	static const char *const wfs[] = {"steal", "fifo", "work"};

	start_lessee(true);
	for (size_t i = 0; i < ELEMENTSOF(wfs); i++) {
		_cleanup_free_ char *body = NULL, *id = NULL, *text = NULL;
		cJSON *run;

		ck_assert_int_ge(
		    asprintf(&body, "{\"workflow\":\"%s\",\"max_attempts\":1}", wfs[i]), 0);
		id = tu_lessor_enqueue(L, body);
		ck_assert_ptr_nonnull(id);
		ck_assert_msg(tu_lessor_wait_status(L, id, i < 2 ? "failed" : "succeeded",
		                                    tu_timeout(20 * SEC)) == 0,
		              "the %s run did not end %s", wfs[i], i < 2 ? "failed" : "succeeded");
		run = tu_lessor_get_run(L, id);
		text = cJSON_PrintUnformatted(run);
		cJSON_Delete(run);
		ck_assert_msg(!strstr(text, "daemon-only"), "%s: the run got the secret: %s",
		              wfs[i], text);
		if (i < 2)
			ck_assert_msg(strstr(text, i == 0 ? "symbolic link" : "a FIFO"), "%s: %s",
			              wfs[i], text);
	}
}
END_TEST

/* The daemon stops a run of another user on its timeout (CAP_KILL; the
 * test's cgroup is not delegated to the daemon's user, so this is the
 * process-group kill, signals only). */
START_TEST(test_shipped_kill)
{
	_cleanup_free_ char *id = NULL, *text = NULL;
	cJSON *run;

	start_lessee(true);
	ck_assert_int_eq(tu_lessee_wait_log(D, "kill mode: process group", tu_timeout(5 * SEC)), 0);
	id = tu_lessor_enqueue(L, "{\"workflow\":\"slow\",\"max_attempts\":1}");
	ck_assert_ptr_nonnull(id);
	ck_assert_int_eq(tu_lessor_wait_status(L, id, "failed", tu_timeout(20 * SEC)), 0);
	run = tu_lessor_get_run(L, id);
	text = cJSON_PrintUnformatted(run);
	cJSON_Delete(run);
	ck_assert_msg(strstr(text, "\"reason\":\"timeout\""), "%s", text);
}
END_TEST

/* lessee --check-config on a configuration: its stdout and stderr, in *out
 * and *err; the exit status. */
static int check_config(const char *text, char **out, char **err)
{
	_cleanup_free_ char *cmd = NULL;
	char conf[512], o[512], e[512];
	int st;

	path_at(conf, sizeof(conf), "check.conf");
	path_at(o, sizeof(o), "check.out");
	path_at(e, sizeof(e), "check.err");
	ck_assert_int_eq(write_file_atomic(conf, text, strlen(text), 0644), 0);
	ck_assert_int_ge(
	    asprintf(&cmd, "%s --check-config --config %s >%s 2>%s", tu_lessee_bin(), conf, o, e),
	    0);
	st = system(cmd);
	ck_assert_int_eq(read_file_capped(o, 1 << 20, out, NULL), 0);
	ck_assert_int_eq(read_file_capped(e, 1 << 20, err, NULL), 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* --check-config says when a workflow would run as the daemon's own user
 * (here root) and applies worker.run_user to every workflow without user=. */
START_TEST(test_check_config)
{
	_cleanup_free_ char *out = NULL, *err = NULL, *out2 = NULL, *err2 = NULL;
	static const char base_conf[] =
	    "[api]\nurl = http://127.0.0.1:1\n"
	    "[workflow.a]\ncommand = /bin/true\n"
	    "[workflow.b]\ncommand = /bin/true\nuser = " DAEMON_USER "\n";

	ck_assert_int_eq(check_config(base_conf, &out, &err), 0);
	ck_assert_msg(strstr(err, "workflow.a runs as the daemon's own user (uid 0)"), "%s", err);
	ck_assert_msg(!strstr(err, "workflow.b"), "%s", err);
	{
		_cleanup_free_ char *text = NULL;

		ck_assert_int_ge(
		    asprintf(&text, "%s[worker]\nrun_user = " RUN_USER "\n", base_conf), 0);
		ck_assert_int_eq(check_config(text, &out2, &err2), 0);
	}
	ck_assert_msg(!strstr(err2, "runs as"), "%s", err2);
	ck_assert_msg(strstr(out2, "run_user = " RUN_USER "\n"), "%s", out2);
	ck_assert_msg(
	    strstr(out2,
	           "[workflow.a]\ncommand = /bin/true\ntimeout = 30min\nenv =\nuser = " RUN_USER),
	    "%s", out2);
	ck_assert_msg(strstr(out2, "user = " DAEMON_USER "\n"), "%s", out2);
}
END_TEST

/* Copies of needle in the memory of pid (we are root: CAP_SYS_PTRACE reads a
 * non-dumpable process). */
static size_t count_in_memory(pid_t pid, const char *needle)
{
	char path[64], line[512];
	static char buf[1 << 16];
	size_t hits = 0, nl = strlen(needle);
	FILE *maps;
	int mem;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	ck_assert_ptr_nonnull(maps = fopen(path, "re"));
	snprintf(path, sizeof(path), "/proc/%d/mem", (int)pid);
	ck_assert_int_ge(mem = open(path, O_RDONLY | O_CLOEXEC), 0);
	while (fgets(line, sizeof(line), maps)) {
		unsigned long long lo, hi;
		char perms[8];

		/* > 4 GiB: ASan's shadow, untouched pages that would take hours */
		if (sscanf(line, "%llx-%llx %7s", &lo, &hi, perms) != 3 || perms[0] != 'r' ||
		    strstr(line, "[vvar") || hi - lo > (4ULL << 30))
			continue;
		/* overlapping reads, so that no copy straddles two of them unseen */
		for (unsigned long long a = lo; a < hi; a += sizeof(buf) - nl) {
			size_t want = hi - a < sizeof(buf) ? (size_t)(hi - a) : sizeof(buf);
			ssize_t n = pread(mem, buf, want, (off_t)a);

			if (n <= 0)
				break;
			for (const char *p = buf;
			     (p = memmem(p, (size_t)n - (size_t)(p - buf), needle, nl)); p++)
				if (p + nl <= buf + n &&
				    (p - buf < (ssize_t)(sizeof(buf) - nl) || (size_t)n < want))
					hits++;
			if ((size_t)n < want || a + (size_t)n >= hi)
				break;
		}
	}
	fclose(maps);
	close(mem);
	return hits;
}

/* The token lives in one header buffer (and the configuration's copy): the
 * copies libcurl made for each request are wiped when it frees them, so after
 * many requests the daemon's memory holds no more than the ones in use (the
 * header, the long poll's request in flight). */
START_TEST(test_token_copies)
{
	size_t n;

	start_lessee(false);
	for (int i = 0; i < 20; i++) {
		_cleanup_free_ char *id =
		    tu_lessor_enqueue(L, "{\"workflow\":\"work\",\"input\":1}");

		ck_assert_ptr_nonnull(id);
		ck_assert_int_eq(tu_lessor_wait_status(L, id, "succeeded", tu_timeout(30 * SEC)),
		                 0);
	}
	n = count_in_memory(tu_lessee_pid(D), "Bearer " TOKEN);
	fprintf(stderr, "copies of the Authorization header in the daemon: %zu\n", n);
	ck_assert_msg(n <= 4, "%zu copies of the Authorization header in the daemon's memory", n);
}
END_TEST

int main(void)
{
	Suite *s = suite_create("secrets");
	TCase *tc = tcase_create("secrets");
	int r;

	if (geteuid() != 0) {
		fprintf(stderr, "check_secrets: needs root (users, setpriv): skipped\n");
		return 77;
	}
	tcase_add_unchecked_fixture(tc, users_setup, users_teardown);
	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_same_uid);
	tcase_add_test(tc, test_shipped);
	tcase_add_test(tc, test_shipped_work);
	tcase_add_test(tc, test_result_file);
	tcase_add_test(tc, test_token_copies);
	tcase_add_test(tc, test_check_config);
	tcase_add_test(tc, test_shipped_kill);
	suite_add_tcase(s, tc);
	r = tu_run(s);
	return r != 0 ? EXIT_FAILURE : EXIT_SUCCESS;
}
