/* What ships besides the binaries, checked against the code it describes:
 *  - docs/man/lessee.8 and lessee.conf.5 render with man(1) without a warning,
 *    lessee(8) names every option `lessee --help` prints, lessee.conf(5) every
 *    key of lib/conf's key table;
 *  - the Dockerfile (no Docker engine here: it is parsed, not built): two
 *    stages on debian:bookworm-slim, the runtime stage installs a package for
 *    every shared library the built lessee needs (readelf + dpkg), no -dev
 *    package, a non-root numeric user, the status port exposed and the image's
 *    configuration (conf/lessee.conf plus the Dockerfile's ENV) valid and
 *    listening there, STOPSIGNAL SIGTERM, a HEALTHCHECK on `lessee status
 *    --healthz`, ENTRYPOINT the copied binary;
 *  - docs/kubernetes.yaml (libyaml): its ConfigMap is a valid lessee.conf
 *    (conf_load) listening on all addresses, the probes hit /healthz and
 *    /readyz on that port, the grace period exceeds drain_timeout +
 *    kill_grace, the token is a Secret file others cannot read, the spool and
 *    run directories are writable mounts under a read-only root, non-root;
 *  - make install / uninstall (into a DESTDIR): no package installed by
 *    install, build or all (make -n), daemons in sbin and the units' ExecStart=
 *    naming them, the unit directory systemd.pc's, Documentation= in every
 *    unit, the man pages' SEE ALSO naming installed documents, uninstall
 *    leaving only the configuration; the shipped lessee.conf has no live
 *    workflow; run directories on disk (CacheDirectory=); one version
 *    (Makefile, --version, debian/changelog); debian/control's Build-Depends
 *    all installed by scripts/deps.sh build deb, and every library -dev of
 *    its build group among them. */
#include <cJSON.h>
#include <check.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <glob.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml.h>

#include "conf/conf-int.h"
#include "conf/conf.h"
#include "testutil.h"
#include "util/buf.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"

#define SEC USEC_PER_SEC
#define MAX_TEXT (4u << 20)

extern char **environ;

/* ---- helpers ---------------------------------------------------------------- */

static char *src_path(const char *rel)
{
	const char *top = getenv("LESSEE_SRCDIR");
	char *p;

	ck_assert_int_ge(asprintf(&p, "%s/%s", top && *top ? top : ".", rel), 0);
	return p;
}

static char *read_src(const char *rel)
{
	_cleanup_free_ char *path = src_path(rel);
	char *text = NULL;

	ck_assert_msg(read_file_capped(path, MAX_TEXT, &text, NULL) >= 0, "cannot read %s", path);
	return text;
}

struct output {
	char *out, *err;
	int status; /* exit status, or 128 + signal */
};

static void output_done(struct output *o)
{
	free(o->out);
	free(o->err);
}

/* Run argv (PATH searched) with exactly envp; both streams captured. */
static void run_env(char *const *argv, char *const *envp, struct output *ret)
{
	int out[2], err[2], st;
	posix_spawn_file_actions_t fa;
	pid_t pid;

	ck_assert_int_eq(pipe2(out, O_CLOEXEC), 0);
	ck_assert_int_eq(pipe2(err, O_CLOEXEC), 0);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, out[1], STDOUT_FILENO);
	posix_spawn_file_actions_adddup2(&fa, err[1], STDERR_FILENO);
	ck_assert_msg(posix_spawnp(&pid, argv[0], &fa, NULL, argv, envp) == 0, "cannot run %s",
	              argv[0]);
	posix_spawn_file_actions_destroy(&fa);
	close(out[1]);
	close(err[1]);
	/* stderr stays far below a pipe's 64 KiB while we read stdout to its end */
	ck_assert_int_ge(read_fd_capped(out[0], MAX_TEXT, &ret->out, NULL), 0);
	ck_assert_int_ge(read_fd_capped(err[0], MAX_TEXT, &ret->err, NULL), 0);
	close(out[0]);
	close(err[0]);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ret->status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* run_env() with env in front of ours (getenv takes the first). */
static void run(char *const *argv, char *const *env, struct output *ret)
{
	_cleanup_(strv_freep) char **envp = strv_copy(env ? env : (char *const[]){NULL});

	ck_assert_ptr_nonnull(envp);
	for (size_t i = 0; environ[i]; i++)
		ck_assert_int_ge(strv_extend(&envp, environ[i]), 0);
	run_env(argv, envp, ret);
}

/* ---- man pages ------------------------------------------------------------------ */

/* The page as man(1) shows it in an 80-column ASCII terminal; no warning. */
static char *render(const char *rel)
{
	_cleanup_free_ char *path = src_path(rel);
	char *const argv[] = {"man", "--warnings", "-P", "cat", "-l", path, NULL};
	char *const env[] = {"LC_ALL=C", "MANWIDTH=80", "MANROFFSEQ=", NULL};
	struct output o = {0};
	char *page;

	run(argv, env, &o);
	ck_assert_msg(o.status == 0 && !*o.err, "man -l %s: exit %d:\n%s", rel, o.status, o.err);
	page = TAKE_PTR(o.out);
	output_done(&o);
	ck_assert_msg(strstr(page, "NAME") && strlen(page) > 1000, "%s rendered as: %s", rel, page);
	return page;
}

START_TEST(test_man_lessee)
{
	_cleanup_free_ char *page = render("docs/man/lessee.8");
	_cleanup_free_ char *bin = strdup(tu_lessee_bin());
	char *const argv[] = {bin, "--help", NULL};
	struct output o = {0};
	static const char *const sections[] = {"SYNOPSIS", "OPTIONS",     "LESSEE STATUS",
	                                       "SIGNALS",  "EXIT STATUS", "ENVIRONMENT",
	                                       "FILES",    "SEE ALSO",    "THE RUN'S ENVIRONMENT"};
	int options = 0;

	for (size_t i = 0; i < ELEMENTSOF(sections); i++)
		ck_assert_msg(strstr(page, sections[i]), "lessee(8) has no %s", sections[i]);
	run(argv, NULL, &o);
	ck_assert_int_eq(o.status, 0);
	for (const char *p = o.out; (p = strstr(p, "--")); options++) {
		size_t n = 2 + strspn(p + 2, "abcdefghijklmnopqrstuvwxyz-");
		char opt[64];

		snprintf(opt, sizeof(opt), "%.*s", (int)MIN(n, sizeof(opt) - 1), p);
		ck_assert_msg(n > 2 && strstr(page, opt), "lessee(8) does not describe %s", opt);
		p += n;
	}
	ck_assert_int_ge(options, 12); /* the parsing found them */
	output_done(&o);
	for (const char *const *v =
	         (const char *const[]){"LESSEE_RUN_ID", "LESSEE_WORKFLOW", "LESSEE_ATTEMPT",
	                               "LESSEE_WORKER_ID", "LESSEE_INPUT_FILE",
	                               "LESSEE_RESULT_FILE", "LESSEE_DEADLINE_MS",
	                               "LESSEE_IO_BACKEND", NULL};
	     *v; v++)
		ck_assert_msg(strstr(page, *v), "lessee(8) does not mention %s", *v);
}
END_TEST

/* Every --option that `lessor ARGS --help` prints is in the page; the number
 * of options found. */
static int assert_lessor_options(const char *page, const char *cmd)
{
	_cleanup_free_ char *bin = strdup(tu_lessor_bin()), *first = strdup(cmd ? cmd : "--help");
	char *const argv[] = {bin, first, cmd ? "--help" : NULL, NULL};
	struct output o = {0};
	int options = 0;

	run(argv, NULL, &o);
	ck_assert_int_eq(o.status, 0);
	for (const char *p = o.out; (p = strstr(p, "--")); options++) {
		size_t n = 2 + strspn(p + 2, "abcdefghijklmnopqrstuvwxyz-");
		char opt[64];

		snprintf(opt, sizeof(opt), "%.*s", (int)MIN(n, sizeof(opt) - 1), p);
		ck_assert_msg(n > 2 && strstr(page, opt), "lessor(8) does not describe %s", opt);
		p += n;
	}
	/* each command of `lessor --help` has its own entry */
	for (const char *p = cmd ? NULL : strstr(o.out, "Commands:\n");
	     p && *(p = strchr(p, '\n') + 1) == ' ';) {
		char name[32], entry[48];

		ck_assert_int_eq(sscanf(p, " %31s", name), 1);
		snprintf(entry, sizeof(entry), "\n       %s", name);
		ck_assert_msg(strstr(page, entry), "lessor(8) has no entry for the command %s",
		              name);
	}
	output_done(&o);
	return options;
}

START_TEST(test_man_lessor)
{
	_cleanup_free_ char *page = render("docs/man/lessor.8");
	static const char *const sections[] = {
	    "SYNOPSIS", "COMMANDS",    "SERVE OPTIONS", "CLIENT OPTIONS", "TOKENS",  "DASHBOARD",
	    "SIGNALS",  "EXIT STATUS", "ENVIRONMENT",   "FILES",          "SEE ALSO"};

	for (size_t i = 0; i < ELEMENTSOF(sections); i++)
		ck_assert_msg(strstr(page, sections[i]), "lessor(8) has no %s", sections[i]);
	ck_assert_int_ge(assert_lessor_options(page, NULL), 10);
	ck_assert_int_ge(assert_lessor_options(page, "serve"), 18);
	for (const char *const *v =
	         (const char *const[]){"LESSOR_URL", "LESSOR_ADMIN_TOKEN_FILE", "LESSOR_TOKEN_FILE",
	                               "XDG_STATE_HOME", "/var/lib/lessor/lessor.db", "SIGHUP",
	                               "/ui", NULL};
	     *v; v++)
		ck_assert_msg(strstr(page, *v), "lessor(8) does not mention %s", *v);
}
END_TEST

/* A key's entry starts a line: 7 blanks, the name, " (". */
static void assert_key(const char *page, const char *section, const char *name)
{
	char needle[128];

	snprintf(needle, sizeof(needle), "\n       %s (", name);
	ck_assert_msg(strstr(page, needle), "lessee.conf(5) does not describe %s.%s", section,
	              name);
}

START_TEST(test_man_conf)
{
	_cleanup_free_ char *page = render("docs/man/lessee.conf.5");

	for (const char *const *s = (const char *const[]){"\n[api]", "\n[worker]", "\n[status]",
	                                                  "\n[log]", "\n[workflow.NAME]", NULL};
	     *s; s++)
		ck_assert_msg(strstr(page, *s), "lessee.conf(5) has no section %s", *s + 1);
	for (size_t i = 0; i < conf_n_keys; i++) {
		assert_key(page, conf_keys[i].section, conf_keys[i].name);
		if (conf_keys[i].def && *conf_keys[i].def) {
			char def[64];

			snprintf(def, sizeof(def), "default %s)", conf_keys[i].def);
			ck_assert_msg(strstr(page, def), "lessee.conf(5): %s.%s: no '%s'",
			              conf_keys[i].section, conf_keys[i].name, def);
		}
	}
	for (size_t i = 0; i < conf_n_wf_keys; i++)
		assert_key(page, "workflow", conf_wf_keys[i].name);
}
END_TEST

/* ---- the Dockerfile ---------------------------------------------------------------- */

struct instr {
	char *cmd;  /* upper case */
	char *args; /* continuation lines joined */
};

struct stage {
	char *image, *name;
	struct instr *in;
	size_t n;
};

struct dockerfile {
	char **args; /* ARG NAME=default before the first FROM: "NAME=default" */
	struct stage st[8];
	size_t n;
};

static char *expand_args(const struct dockerfile *df, const char *s)
{
	for (size_t i = 0; df->args && df->args[i]; i++) {
		const char *eq = strchr(df->args[i], '=');
		char ref[128];

		snprintf(ref, sizeof(ref), "${%.*s}", (int)(eq - df->args[i]), df->args[i]);
		if (streq(s, ref))
			return strdup(eq + 1);
	}
	return strdup(s);
}

static void df_add(struct dockerfile *df, char *line)
{
	char *sp = line + strcspn(line, " \t"), *args = sp + strspn(sp, " \t");
	struct stage *s;

	*sp = '\0';
	for (char *c = line; *c; c++)
		*c = (char)toupper((unsigned char)*c);
	if (streq(line, "ARG") && df->n == 0) {
		ck_assert_int_ge(strv_extend(&df->args, args), 0);
		return;
	}
	if (streq(line, "FROM")) {
		char image[256] = "", as[16] = "", name[64] = "";

		ck_assert_uint_lt(df->n, ELEMENTSOF(df->st));
		s = &df->st[df->n++];
		ck_assert_int_ge(sscanf(args, "%255s %15s %63s", image, as, name), 1);
		s->image = expand_args(df, image);
		s->name = *name && strcasecmp(as, "AS") == 0 ? strdup(name) : NULL;
		return;
	}
	ck_assert_msg(df->n > 0, "Dockerfile: %s before FROM", line);
	s = &df->st[df->n - 1];
	s->in = realloc(s->in, (s->n + 1) * sizeof(*s->in));
	ck_assert_ptr_nonnull(s->in);
	s->in[s->n++] = (struct instr){.cmd = strdup(line), .args = strdup(args)};
}

static void df_parse(struct dockerfile *df)
{
	_cleanup_free_ char *text = read_src("Dockerfile");
	struct buf line = {0};
	char *save = NULL;

	*df = (struct dockerfile){0};
	for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		size_t n = strlen(l);
		char *t = l + strspn(l, " \t");

		if (*t == '#' || (!*t && line.len == 0))
			continue;
		while (n > 0 && (l[n - 1] == ' ' || l[n - 1] == '\t'))
			l[--n] = '\0';
		if (n > 0 && l[n - 1] == '\\') {
			l[n - 1] = ' ';
			ck_assert_int_ge(buf_appends(&line, line.len ? t : l), 0);
			continue;
		}
		ck_assert_int_ge(buf_appends(&line, line.len ? t : l), 0);
		df_add(df, line.data);
		buf_reset(&line);
	}
	buf_done(&line);
	ck_assert_msg(line.len == 0, "Dockerfile ends inside a continuation");
}

static void df_free(struct dockerfile *df)
{
	for (size_t i = 0; i < df->n; i++) {
		for (size_t j = 0; j < df->st[i].n; j++) {
			free(df->st[i].in[j].cmd);
			free(df->st[i].in[j].args);
		}
		free(df->st[i].in);
		free(df->st[i].image);
		free(df->st[i].name);
	}
	strv_free(df->args);
}

/* The only instruction cmd of a stage (asserted). */
static const char *one(const struct stage *s, const char *cmd)
{
	const char *found = NULL;

	for (size_t i = 0; i < s->n; i++)
		if (streq(s->in[i].cmd, cmd)) {
			ck_assert_msg(!found, "Dockerfile: %s twice in a stage", cmd);
			found = s->in[i].args;
		}
	ck_assert_msg(found, "Dockerfile: no %s in the runtime stage", cmd);
	return found;
}

static bool stage_has(const struct stage *s, const char *cmd, const char *needle)
{
	for (size_t i = 0; i < s->n; i++)
		if (streq(s->in[i].cmd, cmd) && strstr(s->in[i].args, needle))
			return true;
	return false;
}

/* The packages after "apt-get install" in the stage's RUN lines. */
static char **apt_installs(const struct stage *s)
{
	char **pkgs = NULL;

	for (size_t i = 0; i < s->n; i++) {
		const char *p =
		    streq(s->in[i].cmd, "RUN") ? strstr(s->in[i].args, "apt-get install") : NULL;
		_cleanup_(strv_freep) char **words = NULL;

		if (!p)
			continue;
		ck_assert_int_ge(strv_split(p + strlen("apt-get install"), " \t", &words), 0);
		for (size_t w = 0; words[w] && !streq(words[w], "&&"); w++)
			if (words[w][0] != '-')
				ck_assert_int_ge(strv_extend(&pkgs, words[w]), 0);
	}
	ck_assert_msg(pkgs, "the runtime stage installs no package");
	return pkgs;
}

/* dpkg -S: the package that owns path, or NULL. */
static char *dpkg_owner(const char *path)
{
	_cleanup_free_ char *p = strdup(path);
	struct output o = {0};
	char *pkg = NULL;

	run((char *const[]){"dpkg", "-S", p, NULL}, NULL, &o);
	if (o.status == 0)
		pkg = strndup(o.out, strcspn(o.out, ":"));
	output_done(&o);
	return pkg;
}

/* The Debian package that holds the library the binary loads as soname.
 * With merged /usr, dpkg knows some files by /lib/..., others by /usr/lib/...:
 * ask for the real file under both names. */
static char *package_of(const char *bin, const char *soname)
{
	_cleanup_free_ char *b = strdup(bin);
	char *const ldd[] = {"ldd", b, NULL};
	struct output o = {0};
	char path[PATH_MAX], real[PATH_MAX], *pkg;
	const char *p;

	run(ldd, NULL, &o);
	p = strstr(o.out, soname);
	ck_assert_msg(p && sscanf(p + strlen(soname), " => %4095s", path) == 1, "ldd: no %s",
	              soname);
	output_done(&o);
	ck_assert_ptr_nonnull(realpath(path, real));
	pkg = dpkg_owner(real);
	if (!pkg && strncmp(real, "/usr/", 5) == 0)
		pkg = dpkg_owner(real + 4);
	ck_assert_msg(pkg, "dpkg knows no package holding %s", real);
	return pkg;
}

/* readelf -d: the libraries lessee links directly. */
static char **needed_libs(const char *bin)
{
	_cleanup_free_ char *b = strdup(bin);
	char *const argv[] = {"readelf", "-d", b, NULL};
	struct output o = {0};
	char **libs = NULL;

	run(argv, NULL, &o);
	ck_assert_int_eq(o.status, 0);
	for (const char *p = o.out; (p = strstr(p, "Shared library: [")); p++) {
		p += strlen("Shared library: [");
		ck_assert_int_ge(strv_push(&libs, strndup(p, strcspn(p, "]"))), 0);
	}
	output_done(&o);
	ck_assert_ptr_nonnull(libs);
	return libs;
}

START_TEST(test_dockerfile_runtime_libraries)
{
	struct dockerfile df;
	_cleanup_(strv_freep) char **pkgs = NULL, **libs = needed_libs(tu_lessee_bin());

	df_parse(&df);
	pkgs = apt_installs(&df.st[df.n - 1]);
	for (size_t i = 0; pkgs[i]; i++)
		ck_assert_msg(!strstr(pkgs[i], "-dev"), "runtime stage installs %s", pkgs[i]);
	ck_assert(strv_contains(pkgs, "ca-certificates")); /* https:// APIs */
	for (size_t i = 0; libs[i]; i++) {
		_cleanup_free_ char *pkg = NULL;

		/* the sanitizer runtimes of `make SANITIZE=...` are not shipped */
		if (strncmp(libs[i], "libasan", 7) == 0 || strncmp(libs[i], "libubsan", 8) == 0)
			continue;
		pkg = package_of(tu_lessee_bin(), libs[i]);
		ck_assert_msg(streq(pkg, "libc6") || strv_contains(pkgs, pkg),
		              "lessee needs %s (package %s): not installed in the runtime stage",
		              libs[i], pkg);
	}
	df_free(&df);
}
END_TEST

/* "A=1 B=2" or "A 1" (ENV's two forms) into environ-style strings. */
static void env_instr(const char *args, char ***env)
{
	_cleanup_(strv_freep) char **words = NULL;

	ck_assert_int_ge(strv_split(args, " \t", &words), 0);
	if (words[0] && !strchr(words[0], '=') && words[1]) {
		char *kv;

		ck_assert_int_ge(asprintf(&kv, "%s=%s", words[0], words[1]), 0);
		ck_assert_int_ge(strv_push(env, kv), 0);
		return;
	}
	for (size_t i = 0; words[i]; i++)
		ck_assert_int_ge(strv_extend(env, words[i]), 0);
}

/* The ENV LESSEE_WORKER_RUN_USER=NAME of a stage, or NULL. */
static char *stage_run_user(const struct stage *s)
{
	_cleanup_(strv_freep) char **env = NULL;
	const char *v = NULL;

	for (size_t i = 0; i < s->n; i++)
		if (streq(s->in[i].cmd, "ENV"))
			env_instr(s->in[i].args, &env);
	for (char **e = env; e && *e; e++)
		v = startswith(*e, "LESSEE_WORKER_RUN_USER=") ?: v;
	return v && *v ? strdup(v) : NULL;
}

/* A RUN of the stage makes that user: useradd --uid N (N > 0) ... NAME. */
static bool run_user_made(const struct stage *s)
{
	_cleanup_free_ char *name = stage_run_user(s);

	for (size_t i = 0; name && i < s->n; i++) {
		const char *a = s->in[i].args,
		           *u = streq(s->in[i].cmd, "RUN") ? strstr(a, "useradd") : NULL;
		const char *uid = u ? strstr(u, "--uid ") : NULL;
		const char *end = u ? strstr(u, "&&") : NULL;
		const char *at = u ? strstr(u, name) : NULL;

		if (uid && atoi(uid + 6) > 0 && at && (!end || at < end) && (!end || uid < end))
			return true;
	}
	return false;
}

/* The configuration the image starts with: conf/lessee.conf at the default
 * path, the Dockerfile's ENV (but for the run user, who exists only in the
 * image), plus what a user must give: the API URL and a workflow (the shipped
 * file has none live). */
static struct conf *image_conf(const struct stage *s)
{
	_cleanup_(strv_freep) char **env = NULL;
	_cleanup_free_ char *text = read_src("conf/lessee.conf"), *err = NULL;
	_cleanup_free_ char *dir = tu_tmpdir("image"), *path = NULL, *full = NULL;
	struct conf *c = NULL;

	ck_assert_ptr_nonnull(dir);
	ck_assert_int_ge(asprintf(&path, "%s/lessee.conf", dir), 0);
	ck_assert_int_ge(asprintf(&full, "%s\n[workflow.user]\ncommand = /bin/true\n", text), 0);
	ck_assert_int_ge(write_file_atomic(path, full, strlen(full), 0644), 0);

	ck_assert_msg(stage_has(s, "COPY", "conf/lessee.conf /etc/lessee/lessee.conf"),
	              "the image does not ship conf/lessee.conf as /etc/lessee/lessee.conf");
	for (size_t i = 0; i < s->n; i++)
		if (streq(s->in[i].cmd, "ENV"))
			env_instr(s->in[i].args, &env);
	for (char **e = env; e && *e; e++)
		if (startswith(*e, "LESSEE_WORKER_RUN_USER="))
			(*e)[strlen("LESSEE_WORKER_RUN_USER=")] = '\0';
	ck_assert_int_ge(strv_extend(&env, "LESSEE_API_URL=https://orchestrator.example.com"), 0);
	ck_assert_msg(conf_load(&(struct conf_source){.path = path, .env = env}, &c, &err) == 0,
	              "the image's configuration: %s", err ? err : "?");
	ck_assert_int_ge(rm_rf(dir), 0);
	return c;
}

static int listen_port(const struct conf *c)
{
	const char *colon = strrchr(c->status.listen, ':');

	ck_assert_ptr_nonnull(colon);
	return atoi(colon + 1);
}

START_TEST(test_dockerfile)
{
	struct dockerfile df;
	const struct stage *build, *rt;
	struct conf *c;
	cJSON *entry, *health;
	const char *user, *hc, *copy;
	char from[128], dest[256];

	df_parse(&df);
	ck_assert_uint_ge(df.n, 2);
	for (size_t i = 0; i < df.n; i++)
		ck_assert_msg(streq(df.st[i].image, "debian:bookworm-slim"), "stage %zu FROM %s", i,
		              df.st[i].image);
	build = &df.st[0];
	rt = &df.st[df.n - 1];
	ck_assert_ptr_nonnull(build->name);
	ck_assert_msg(stage_has(build, "RUN", "make"), "the build stage does not run make");
	/* the binary comes from the build stage */
	copy = NULL;
	for (size_t i = 0; i < rt->n; i++)
		if (streq(rt->in[i].cmd, "COPY") && strstr(rt->in[i].args, "/lessee "))
			copy = rt->in[i].args;
	ck_assert_ptr_nonnull(copy);
	ck_assert_int_eq(sscanf(copy, "--from=%127s %*s %255s", from, dest), 2);
	ck_assert_str_eq(from, build->name);
	/* root (the capabilities to drop runs need it in a container), and the
	 * runs' user is another, made here, numeric and not root */
	user = one(rt, "USER");
	ck_assert_str_eq(user, "0:0");
	ck_assert_msg(run_user_made(rt), "the runtime stage does not make LESSEE_WORKER_RUN_USER");
	ck_assert_str_eq(one(rt, "STOPSIGNAL"), "SIGTERM");
	/* the image's own configuration is valid and listens where EXPOSE says */
	c = image_conf(rt);
	ck_assert_msg(strncmp(c->status.listen, "0.0.0.0:", 8) == 0, "listen = %s",
	              c->status.listen);
	ck_assert_int_eq(atoi(one(rt, "EXPOSE")), listen_port(c));
	ck_assert_msg(
	    stage_has(rt, "RUN", c->worker.spool_dir) && stage_has(rt, "RUN", c->worker.run_dir),
	    "the image does not create %s and %s", c->worker.spool_dir, c->worker.run_dir);
	conf_free(c);
	/* exec forms: the copied binary; the health check asks /healthz */
	entry = cJSON_Parse(one(rt, "ENTRYPOINT"));
	ck_assert_msg(cJSON_IsArray(entry), "ENTRYPOINT is not an exec form");
	ck_assert_str_eq(cJSON_GetArrayItem(entry, 0)->valuestring, dest);
	hc = strstr(one(rt, "HEALTHCHECK"), "CMD ");
	ck_assert_ptr_nonnull(hc);
	health = cJSON_Parse(hc + 4);
	ck_assert_msg(cJSON_IsArray(health) && cJSON_GetArraySize(health) == 3, "HEALTHCHECK %s",
	              hc);
	ck_assert_str_eq(cJSON_GetArrayItem(health, 0)->valuestring, dest);
	ck_assert_str_eq(cJSON_GetArrayItem(health, 1)->valuestring, "status");
	ck_assert_str_eq(cJSON_GetArrayItem(health, 2)->valuestring, "--healthz");
	cJSON_Delete(entry);
	cJSON_Delete(health);
	df_free(&df);
}
END_TEST

/* ---- docs/kubernetes.yaml ------------------------------------------------------------ */

/* A YAML node as JSON; scalars stay strings. */
static cJSON *yaml_json(yaml_document_t *doc, yaml_node_t *n, int depth)
{
	cJSON *j = NULL;

	ck_assert_msg(n && depth < 64, "YAML too deep or broken");
	switch (n->type) {
	case YAML_SCALAR_NODE:
		return cJSON_CreateString((const char *)n->data.scalar.value);
	case YAML_SEQUENCE_NODE:
		j = cJSON_CreateArray();
		for (yaml_node_item_t *i = n->data.sequence.items.start;
		     i < n->data.sequence.items.top; i++)
			cJSON_AddItemToArray(
			    j, yaml_json(doc, yaml_document_get_node(doc, *i), depth + 1));
		return j;
	case YAML_MAPPING_NODE:
		j = cJSON_CreateObject();
		for (yaml_node_pair_t *p = n->data.mapping.pairs.start;
		     p < n->data.mapping.pairs.top; p++) {
			yaml_node_t *k = yaml_document_get_node(doc, p->key);

			ck_assert(k && k->type == YAML_SCALAR_NODE);
			cJSON_AddItemToObject(
			    j, (const char *)k->data.scalar.value,
			    yaml_json(doc, yaml_document_get_node(doc, p->value), depth + 1));
		}
		return j;
	default:
		ck_abort_msg("empty YAML node");
	}
	return NULL;
}

/* Every document of the file, in order. */
static cJSON *yaml_load(const char *rel)
{
	_cleanup_free_ char *text = read_src(rel);
	yaml_parser_t parser;
	cJSON *docs = cJSON_CreateArray();

	ck_assert(yaml_parser_initialize(&parser));
	yaml_parser_set_input_string(&parser, (const unsigned char *)text, strlen(text));
	for (;;) {
		yaml_document_t doc;
		yaml_node_t *root;

		ck_assert_msg(yaml_parser_load(&parser, &doc), "%s: line %zu: %s", rel,
		              parser.problem_mark.line + 1, parser.problem ? parser.problem : "?");
		root = yaml_document_get_root_node(&doc);
		if (root)
			cJSON_AddItemToArray(docs, yaml_json(&doc, root, 0));
		yaml_document_delete(&doc);
		if (!root)
			break;
	}
	yaml_parser_delete(&parser);
	return docs;
}

/* o["a"]["b"]...: NULL when any step is missing. */
static cJSON *at(cJSON *o, const char *path)
{
	_cleanup_(strv_freep) char **steps = NULL;
	cJSON *j = o;

	ck_assert_int_ge(strv_split(path, ".", &steps), 0);
	for (size_t i = 0; j && steps[i]; i++)
		j = cJSON_GetObjectItemCaseSensitive(j, steps[i]);
	return j;
}

static const char *str_at(cJSON *o, const char *path)
{
	cJSON *j = at(o, path);

	ck_assert_msg(cJSON_IsString(j), "kubernetes.yaml: no %s", path);
	return j->valuestring;
}

/* The element of array whose field key equals value. */
static cJSON *named(cJSON *array, const char *key, const char *value)
{
	cJSON *it;

	cJSON_ArrayForEach(it, array)
	{
		cJSON *k = cJSON_GetObjectItemCaseSensitive(it, key);

		if (cJSON_IsString(k) && streq(k->valuestring, value))
			return it;
	}
	ck_abort_msg("kubernetes.yaml: no %s = %s", key, value);
	return NULL;
}

static bool under(const char *path, const char *dir)
{
	size_t n = strlen(dir);

	return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == '\0');
}

/* The container's volumeMount holding path; asserted. */
static cJSON *mount_of(cJSON *container, const char *path)
{
	cJSON *m, *best = NULL;

	cJSON_ArrayForEach(
	    m, at(container, "volumeMounts")) if (under(path, str_at(m, "mountPath")) &&
	                                          (!best || strlen(str_at(m, "mountPath")) >
	                                                        strlen(str_at(best, "mountPath"))))
	    best = m;
	ck_assert_msg(best, "kubernetes.yaml: nothing is mounted at %s", path);
	return best;
}

/* "token_file = X" as written in the ConfigMap's text. */
static char *conf_text_value(const char *text, const char *key)
{
	for (const char *p = text; (p = strstr(p, key)); p++) {
		const char *v = p + strlen(key);

		if ((p == text || p[-1] == '\n') && *(v += strspn(v, " \t")) == '=') {
			v += 1 + strspn(v + 1, " \t");
			return strndup(v, strcspn(v, "\n"));
		}
	}
	ck_abort_msg("the ConfigMap's lessee.conf sets no %s", key);
	return NULL;
}

/* The ConfigMap's lessee.conf, loaded as the pod would (the token file
 * exists only in the pod: unset here, checked separately). */
static struct conf *configmap_conf(const char *text)
{
	_cleanup_free_ char *dir = tu_tmpdir("k8s"), *path = NULL, *err = NULL;
	char *const env[] = {"LESSEE_WORKER_ID=lessee-7d9f8b6c5d-x2k4p", NULL};
	const struct conf_override unset_token = {.origin = "test", .setting = "api.token_file="};
	struct conf *c = NULL;

	ck_assert_int_ge(asprintf(&path, "%s/lessee.conf", dir), 0);
	ck_assert_int_eq(write_file_atomic(path, text, strlen(text), 0644), 0);
	ck_assert_msg(conf_load(&(struct conf_source){.path = path,
	                                              .env = env,
	                                              .overrides = &unset_token,
	                                              .n_overrides = 1},
	                        &c, &err) == 0,
	              "the ConfigMap's lessee.conf: %s", err ? err : "?");
	rm_rf(dir);
	return c;
}

static void check_probe(cJSON *container, const char *probe, const char *want_path, int port)
{
	cJSON *get = at(container, probe);
	const char *p = str_at(get, "httpGet.port");
	cJSON *named_port = NULL;

	ck_assert_str_eq(str_at(get, "httpGet.path"), want_path);
	if (!isdigit((unsigned char)*p)) {
		named_port = named(at(container, "ports"), "name", p);
		p = str_at(named_port, "containerPort");
	}
	ck_assert_msg(atoi(p) == port, "%s probes port %s, lessee listens on %d", probe, p, port);
}

START_TEST(test_kubernetes)
{
	cJSON *docs = yaml_load("docs/kubernetes.yaml");
	cJSON *cm = named(docs, "kind", "ConfigMap"), *dep = named(docs, "kind", "Deployment");
	cJSON *pod = at(dep, "spec.template.spec"), *ctr, *args, *vol, *m, *caps, *drop;
	cJSON *data = at(cm, "data"), *file = cJSON_GetObjectItemCaseSensitive(data, "lessee.conf");
	const char *conf_path = "/etc/lessee/lessee.conf";
	_cleanup_free_ char *token = NULL, *conf_dir = NULL;
	struct dockerfile df;
	struct conf *c;
	long grace, mode;

	ck_assert_msg(cJSON_IsString(file), "the ConfigMap has no lessee.conf");
	token = conf_text_value(file->valuestring, "token_file");
	c = configmap_conf(file->valuestring);
	ctr = named(at(pod, "containers"), "name", "lessee");

	/* listening on the pod's addresses, probed there on the right paths */
	ck_assert_msg(strncmp(c->status.listen, "0.0.0.0:", 8) == 0, "listen = %s",
	              c->status.listen);
	check_probe(ctr, "livenessProbe", "/healthz", listen_port(c));
	check_probe(ctr, "readinessProbe", "/readyz", listen_port(c));

	/* SIGTERM drains before the kubelet's SIGKILL */
	ck_assert(c->worker.drain_timeout != USEC_INFINITY);
	grace = strtol(str_at(pod, "terminationGracePeriodSeconds"), NULL, 10);
	ck_assert_msg((usec_t)grace * SEC > c->worker.drain_timeout + c->worker.kill_grace,
	              "terminationGracePeriodSeconds %ld <= drain_timeout + kill_grace", grace);

	/* the configuration file is the ConfigMap */
	args = at(ctr, "args");
	for (int i = 0; i + 1 < cJSON_GetArraySize(args); i++)
		if (streq(cJSON_GetArrayItem(args, i)->valuestring, "--config"))
			conf_path = cJSON_GetArrayItem(args, i + 1)->valuestring;
	m = mount_of(ctr, conf_path);
	vol = named(at(pod, "volumes"), "name", str_at(m, "name"));
	ck_assert_str_eq(str_at(vol, "configMap.name"), str_at(cm, "metadata.name"));
	ck_assert_int_ge(asprintf(&conf_dir, "%s/lessee.conf", str_at(m, "mountPath")), 0);
	ck_assert_str_eq(conf_dir, conf_path);

	/* the token: a file from a Secret, not readable by others */
	m = mount_of(ctr, token);
	vol = named(at(pod, "volumes"), "name", str_at(m, "name"));
	ck_assert_ptr_nonnull(at(vol, "secret.secretName"));
	mode = strtol(str_at(vol, "secret.defaultMode"), NULL, 0); /* 0400: octal */
	ck_assert_msg((mode & 077) == 0 && (mode & 0400), "defaultMode %lo", (unsigned long)mode);

	/* the Dockerfile's user (root, for the capabilities that drop runs to
	 * their user: those and no other), nothing writable but the volumes
	 * lessee writes to */
	ck_assert_str_eq(str_at(pod, "securityContext.runAsNonRoot"), "false");
	caps = at(ctr, "securityContext.capabilities.add");
	ck_assert_msg(cJSON_GetArraySize(caps) == 5, "capabilities.add: %d entries",
	              cJSON_GetArraySize(caps));
	for (const char *const *cap =
	         (const char *const[]){"SETUID", "SETGID", "CHOWN", "DAC_OVERRIDE", "KILL", NULL};
	     *cap; cap++) {
		bool found = false;
		const cJSON *it;

		cJSON_ArrayForEach(it, caps) found =
		    found || (cJSON_IsString(it) && streq(it->valuestring, *cap));
		ck_assert_msg(found, "capabilities.add lacks %s", *cap);
	}
	drop = cJSON_GetArrayItem(at(ctr, "securityContext.capabilities.drop"), 0);
	ck_assert_msg(cJSON_IsString(drop) && streq(drop->valuestring, "ALL"),
	              "capabilities.drop is not [ALL]");
	df_parse(&df);
	ck_assert_int_eq(atoi(str_at(pod, "securityContext.runAsUser")),
	                 atoi(one(&df.st[df.n - 1], "USER")));
	df_free(&df);
	ck_assert_str_eq(str_at(ctr, "securityContext.allowPrivilegeEscalation"), "false");
	ck_assert_str_eq(str_at(ctr, "securityContext.readOnlyRootFilesystem"), "true");
	for (const char *const *d =
	         (const char *const[]){c->worker.spool_dir, c->worker.run_dir, NULL};
	     *d; d++) {
		m = mount_of(ctr, *d);
		ck_assert_msg(!cJSON_IsString(at(m, "readOnly")) ||
		                  streq(str_at(m, "readOnly"), "false"),
		              "%s is on a read-only mount", *d);
	}
	conf_free(c);
	cJSON_Delete(docs);
}
END_TEST

/* ---- make install, make uninstall, the version ------------------------------------ */

/* make -C <top> ARGS... with BUILD= the directory of the lessee under test,
 * so that install copies what was tested, and builds nothing: -o keeps make
 * from relinking them (with this make's flags, not a SANITIZE build's) when
 * a source changed since. */
static void run_make(const char *const *args, struct output *o)
{
	_cleanup_free_ char *top = src_path(""), *bin = strdup(tu_lessee_bin());
	_cleanup_free_ char *build = NULL;
	_cleanup_(strv_freep) char **argv = NULL;
	char *slash;

	ck_assert_ptr_nonnull(bin);
	slash = strrchr(bin, '/');
	if (slash)
		*slash = '\0';
	ck_assert_int_ge(asprintf(&build, "BUILD=%s", slash ? bin : "."), 0);
	ck_assert_int_ge(strv_extend(&argv, "make"), 0);
	ck_assert_int_ge(strv_extend(&argv, "--no-print-directory"), 0);
	ck_assert_int_ge(strv_extend(&argv, "-C"), 0);
	ck_assert_int_ge(strv_extend(&argv, top), 0);
	ck_assert_int_ge(strv_extend(&argv, build), 0);
	ck_assert_int_ge(strv_extend(&argv, "-o"), 0);
	ck_assert_int_ge(strv_extend(&argv, tu_lessee_bin()), 0);
	ck_assert_int_ge(strv_extend(&argv, "-o"), 0);
	ck_assert_int_ge(strv_extend(&argv, tu_lessor_bin()), 0);
	for (size_t i = 0; args[i]; i++)
		ck_assert_int_ge(strv_extend(&argv, args[i]), 0);
	run(argv, (char *const[]){"MAKEFLAGS=", "MFLAGS=", NULL}, o);
}

static bool is_exec(const char *dir, const char *path)
{
	_cleanup_free_ char *p = NULL;

	ck_assert_int_ge(asprintf(&p, "%s%s", dir, path), 0);
	return access(p, X_OK) == 0;
}

/* Neither install nor build ever installs packages: that is `make deps`. */
START_TEST(test_install_no_packages)
{
	static const char *const targets[] = {"install", "build", "all", "uninstall"};

	for (size_t i = 0; i < ELEMENTSOF(targets); i++) {
		struct output o = {0};

		run_make((const char *const[]){"-n", targets[i], "DESTDIR=/nonexistent", NULL}, &o);
		ck_assert_msg(o.status == 0, "make -n %s: %s", targets[i], o.err);
		ck_assert_msg(!strstr(o.out, "deps.sh") && !strstr(o.out, "apt-get"),
		              "make %s would install packages:\n%s", targets[i], o.out);
		output_done(&o);
	}
}
END_TEST

/* `make deps` installs the build packages only: the daemons must build without
 * the test ones (fuse3 here), so one missing package must not take every
 * package's compiler flags with it. */
START_TEST(test_build_without_test_packages)
{
	char dir[] = "/tmp/check-pkgconf-XXXXXX";
	_cleanup_free_ char *wrapper = NULL, *setting = NULL, *obj = NULL;
	_cleanup_free_ char *bin = strdup(tu_lessee_bin());
	struct output o = {0};
	FILE *f;

	ck_assert_ptr_nonnull(mkdtemp(dir));
	ck_assert_int_ge(asprintf(&wrapper, "%s/pkg-config", dir), 0);
	f = fopen(wrapper, "we");
	ck_assert_ptr_nonnull(f);
	fputs("#!/bin/sh\nfor a; do [ \"$a\" = fuse3 ] && exit 1; done\n"
	      "exec pkg-config \"$@\"\n",
	      f);
	ck_assert_int_eq(fclose(f), 0);
	ck_assert_int_eq(chmod(wrapper, 0755), 0);
	ck_assert_int_ge(asprintf(&setting, "PKG_CONFIG=%s", wrapper), 0);
	ck_assert_ptr_nonnull(bin);
	*(strrchr(bin, '/') ?: bin) = '\0';
	ck_assert_int_ge(asprintf(&obj, "%s/lib/proto/proto_native.o", bin), 0);
	run_make((const char *const[]){"-n", "-B", setting, obj, NULL}, &o);
	ck_assert_msg(o.status == 0, "make -n build without fuse3: %s", o.err);
	ck_assert_msg(strstr(o.out, "/usr/include/cjson"),
	              "without a test package the build loses cJSON's flags:\n%.2000s", o.out);
	output_done(&o);
	unlink(wrapper);
	rmdir(dir);
}
END_TEST

/* Goals given together run one after another: `make -j2 build bench` must
 * not build the same objects in two makes at once (bench's recipe runs a make
 * of its own), and the daemons link at -O0, where floor() is a call to libm.
 * The build does not depend on the loop backend: the io_uring pass runs it. */
START_TEST(test_goals_one_after_another)
{
	_cleanup_free_ char *top = src_path(""), *dir = tu_tmpdir("goals"), *build = NULL;
	_cleanup_(strv_freep) char **seen = NULL;
	struct output o = {0};
	unsigned compiled = 0;

	if (strcmp(tu_backend(), "io_uring") != 0)
		return;
	ck_assert_int_ge(asprintf(&build, "BUILD=%s", dir), 0);
	run((char *const[]){"make", "--no-print-directory", "-C", top, "-j2", build, "OPT=-O0",
	                    "build", "bench", NULL},
	    (char *const[]){"MAKEFLAGS=", "MFLAGS=", NULL}, &o);
	ck_assert_msg(o.status == 0, "make -j2 build bench failed:\n%.3000s", o.err);
	for (char *l = o.out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		_cleanup_free_ char *line = strndup(l, strcspn(l, "\n"));

		ck_assert_ptr_nonnull(line);
		if (strncmp(line, "  CC ", 5) != 0)
			continue;
		ck_assert_msg(!strv_contains(seen, line), "compiled twice:%s", line + 4);
		ck_assert_int_ge(strv_extend(&seen, line), 0);
		compiled++;
	}
	ck_assert_msg(compiled > 50, "only %u objects compiled:\n%.2000s", compiled, o.out);
	output_done(&o);
	ck_assert_int_eq(rm_rf(dir), 0);
}
END_TEST

/* The value of Key= in a unit file's text (the first one), or NULL. */
static char *unit_value(const char *unit, const char *key)
{
	size_t n = strlen(key);

	for (const char *l = unit; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
		if (strncmp(l, key, n) == 0 && l[n] == '=')
			return strndup(l + n + 1, strcspn(l + n + 1, "\n"));
	return NULL;
}

static char *read_staged(const char *dest, const char *path)
{
	_cleanup_free_ char *p = NULL;
	char *text = NULL;

	ck_assert_int_ge(asprintf(&p, "%s%s", dest, path), 0);
	ck_assert_msg(read_file_capped(p, MAX_TEXT, &text, NULL) >= 0, "not installed: %s", path);
	return text;
}

/* Every /usr/share/doc/lessee/... path a rendered page names is installed;
 * no page names a source-tree path (docs/...) instead. */
static void check_see_also(const char *dest, const char *page_path)
{
	_cleanup_free_ char *page = render(page_path);
	const char *see = strstr(page, "SEE ALSO");
	int docs = 0;

	ck_assert_msg(see, "%s has no SEE ALSO", page_path);
	for (const char *p = see; (p = strstr(p, "docs/")); p += 5)
		ck_assert_msg(p > see && p[-1] == '/', "%s: SEE ALSO names a source path: %.40s",
		              page_path, p);
	for (const char *p = see; (p = strstr(p, "/usr/share/doc/lessee/")); docs++) {
		size_t n = strcspn(p, " \t\n,;:)");
		_cleanup_free_ char *f = NULL;

		while (n > 0 && p[n - 1] == '.')
			n--;
		ck_assert_int_ge(asprintf(&f, "%s%.*s", dest, (int)n, p), 0);
		ck_assert_msg(access(f, R_OK) == 0, "%s: SEE ALSO names %.*s, not installed",
		              page_path, (int)n, p);
		p += n;
	}
	ck_assert_msg(docs > 0, "%s: SEE ALSO names no installed document", page_path);
}

/* make install PREFIX=/usr DESTDIR=...: daemons in sbin, the units run them
 * from there, the unit directory is systemd's, docs installed where the man
 * pages say; make uninstall takes it all back but the configuration. */
START_TEST(test_install_layout)
{
	_cleanup_free_ char *dest = tu_tmpdir("install"), *destdir = NULL, *unitdir = NULL;
	static const char *const units[] = {"lessee.service", "lessee@.service", "lessor.service"};
	struct output o = {0};

	ck_assert_ptr_nonnull(dest);
	ck_assert_int_ge(asprintf(&destdir, "DESTDIR=%s", dest), 0);
	run_make((const char *const[]){"install", "PREFIX=/usr", destdir, NULL}, &o);
	ck_assert_msg(o.status == 0, "make install: %s", o.err);
	output_done(&o);

	ck_assert_msg(is_exec(dest, "/usr/sbin/lessee"), "lessee is not in /usr/sbin");
	ck_assert_msg(is_exec(dest, "/usr/sbin/lessor"), "lessor is not in /usr/sbin");
	ck_assert_msg(!is_exec(dest, "/usr/bin/lessee") && !is_exec(dest, "/usr/bin/lessor"),
	              "a daemon is (also) in /usr/bin");

	/* the unit directory is the one systemd.pc names for PREFIX=/usr */
	run((char *const[]){"pkg-config", "--variable=systemdsystemunitdir", "systemd", NULL}, NULL,
	    &o);
	/* without systemd.pc (no systemd package) the Makefile's fallback */
	unitdir = o.status == 0 ? strndup(o.out, strcspn(o.out, "\n"))
	                        : strdup("/usr/lib/systemd/system");
	output_done(&o);
	for (size_t i = 0; i < ELEMENTSOF(units); i++) {
		_cleanup_free_ char *path = NULL, *unit = NULL, *exec = NULL, *doc = NULL;

		ck_assert_int_ge(asprintf(&path, "%s/%s", unitdir, units[i]), 0);
		unit = read_staged(dest, path);
		exec = unit_value(unit, "ExecStart");
		ck_assert_msg(exec, "%s has no ExecStart=", units[i]);
		exec[strcspn(exec, " ")] = '\0';
		ck_assert_msg(startswith(exec, "/usr/sbin/") && is_exec(dest, exec),
		              "%s: ExecStart=%s is not the installed daemon", units[i], exec);
		doc = unit_value(unit, "Documentation");
		ck_assert_msg(doc, "%s has no Documentation=", units[i]);
	}
	check_see_also(dest, "docs/man/lessee.8");
	check_see_also(dest, "docs/man/lessee.conf.5");

	run_make((const char *const[]){"uninstall", "PREFIX=/usr", destdir, NULL}, &o);
	ck_assert_msg(o.status == 0, "make uninstall: %s", o.err);
	output_done(&o);
	run((char *const[]){"find", dest, "-type", "f", "-o", "-type", "l", NULL}, NULL, &o);
	ck_assert_int_eq(o.status, 0);
	{
		_cleanup_free_ char *conf = NULL;
		size_t n;

		ck_assert_int_ge(asprintf(&conf, "%s/etc/lessee/lessee.conf\n", dest), 0);
		n = strlen(conf);
		ck_assert_msg(!*o.out || (strncmp(o.out, conf, n) == 0 && !o.out[n]),
		              "left after make uninstall:\n%s", o.out);
	}
	output_done(&o);
	ck_assert_int_ge(rm_rf(dest), 0);
}
END_TEST

/* The shipped lessee.conf runs nothing until the operator says so: no live
 * workflow, a commented example instead. */
START_TEST(test_conf_no_workflow)
{
	_cleanup_free_ char *path = src_path("conf/lessee.conf"),
	                    *text = read_src("conf/lessee.conf");
	_cleanup_free_ char *err = NULL;
	char *const env[] = {"LESSEE_API_URL=https://ci.example.com", NULL};
	struct conf *c = NULL;

	int r = conf_load(&(struct conf_source){.path = path, .env = env}, &c, &err);

	ck_assert_msg(r < 0, "conf/lessee.conf runs %zu workflow(s), first '%s'",
	              c ? c->n_workflows : 0, c && c->n_workflows ? c->workflows[0].name : "");
	ck_assert_msg(err && strstr(err, "no [workflow.NAME] section"), "conf/lessee.conf: %s",
	              err ? err : "?");
	ck_assert_msg(strstr(text, "\n#[workflow."), "conf/lessee.conf has no commented example");
}
END_TEST

/* Run directories are on disk, not on a tmpfs: under systemd the unit's
 * CacheDirectory=, else /var/cache/lessee/runs. */
START_TEST(test_run_dir_on_disk)
{
	_cleanup_free_ char *unit = read_src("systemd/lessee.service");
	_cleanup_free_ char *tmpl = read_src("systemd/lessee@.service");
	char *const env_unit[] = {"LESSEE_API_URL=https://ci.example.com",
	                          "CACHE_DIRECTORY=/var/cache/lessee",
	                          "STATE_DIRECTORY=/var/lib/lessee", NULL};
	char *const env_none[] = {"LESSEE_API_URL=https://ci.example.com", NULL};
	_cleanup_free_ char *cache = unit_value(unit, "CacheDirectory");
	_cleanup_free_ char *dir = tu_tmpdir("rundir"), *path = NULL;
	static const char wf[] = "[workflow.w]\ncommand = /bin/true\n";
	struct conf *c = NULL;
	char *err = NULL;

	ck_assert_ptr_nonnull(dir);
	ck_assert_int_ge(asprintf(&path, "%s/lessee.conf", dir), 0);
	ck_assert_int_ge(write_file_atomic(path, wf, strlen(wf), 0644), 0);

	ck_assert_msg(!unit_value(unit, "RuntimeDirectory") &&
	                  !unit_value(tmpl, "RuntimeDirectory"),
	              "a lessee unit still puts the runs in RuntimeDirectory= (a tmpfs)");
	ck_assert_msg(cache && streq(cache, "lessee"), "lessee.service: CacheDirectory=%s", cache);
	ck_assert_msg(conf_load(&(struct conf_source){.path = path, .env = env_unit}, &c, &err) ==
	                  0,
	              "%s", err);
	ck_assert_str_eq(c->worker.run_dir, "/var/cache/lessee/runs");
	conf_free(c);
	ck_assert_msg(conf_load(&(struct conf_source){.path = path, .env = env_none}, &c, &err) ==
	                  0,
	              "%s", err);
	ck_assert_str_eq(c->worker.run_dir, "/var/cache/lessee/runs");
	conf_free(c);
	ck_assert_int_ge(rm_rf(dir), 0);
}
END_TEST

/* The version is written once, in the Makefile: the binaries print it and
 * debian/changelog's latest entry is it. */
static char *makefile_version(void)
{
	_cleanup_free_ char *mk = read_src("Makefile");
	const char *v = strstr(mk, "\nVERSION");
	char *version;

	ck_assert_msg(v, "no VERSION in the Makefile");
	v += strcspn(v, "=") + 1;
	v += strspn(v, " \t");
	version = strndup(v, strcspn(v, " \t\n"));
	ck_assert_msg(version && *version, "empty VERSION");
	return version;
}

START_TEST(test_version)
{
	_cleanup_free_ char *changelog = read_src("debian/changelog");
	_cleanup_free_ char *version = makefile_version(), *bin = strdup(tu_lessee_bin());
	_cleanup_free_ char *lessor = strdup(tu_lessor_bin()), *want = NULL;
	const char *paren = strchr(changelog, '(');
	struct output o = {0};

	ck_assert_msg(paren && startswith(changelog, "lessee ("), "debian/changelog: %.40s",
	              changelog);
	ck_assert_msg(startswith(paren + 1, version) && paren[1 + strlen(version)] == '-',
	              "debian/changelog says %.20s, the Makefile VERSION %s", paren + 1, version);
	ck_assert_int_ge(asprintf(&want, "lessee %s\n", version), 0);
	run((char *const[]){bin, "--version", NULL}, NULL, &o);
	ck_assert_msg(o.status == 0 && streq(o.out, want), "lessee --version: %s", o.out);
	output_done(&o);
	run((char *const[]){lessor, "--version", NULL}, NULL, &o);
	ck_assert_msg(o.status == 0 && strstr(o.out, version), "lessor --version: %s", o.out);
	output_done(&o);
	/* the man pages' footer: .TH NAME SECTION DATE "lessee VERSION" ... */
	for (const char *const *m =
	         (const char *const[]){"docs/man/lessee.8", "docs/man/lessee.conf.5", NULL};
	     *m; m++) {
		_cleanup_free_ char *page = read_src(*m), *th = NULL, *quoted = NULL;
		const char *l = strstr(page, "\n.TH ");

		ck_assert_msg(l, "%s has no .TH", *m);
		th = strndup(l + 1, strcspn(l + 1, "\n"));
		ck_assert_int_ge(asprintf(&quoted, " %s\"", version), 0);
		ck_assert_msg(strstr(th, quoted), "%s: %s, the Makefile VERSION %s", *m, th,
		              version);
	}
}
END_TEST

/* One program's answers to --version and --help, with nothing set up: no
 * environment but PATH, an empty directory, 20 s at most (timeout(1) kills
 * the program's whole process group).  Each answer goes to stdout with exit
 * 0; what is wrong is appended to problems. */
static void check_answers(char *bin, const char *version, struct buf *problems)
{
	char *const envp[] = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C", NULL};

	for (char *const *opt = (char *const[]){"--version", "--help", NULL}; *opt; opt++) {
		char *const argv[] = {"timeout", "-s", "KILL", "20", bin, *opt, NULL};
		struct output o = {0};
		bool ok;

		run_env(argv, envp, &o);
		/* --version: one line with the version; --help: a usage text */
		if (streq(*opt, "--version"))
			ok = strstr(o.out, version) &&
			     strchr(o.out, '\n') == o.out + strlen(o.out) - 1;
		else
			ok = strcasestr(o.out, "usage") != NULL;
		if (o.status != 0 || !ok)
			ck_assert_int_ge(
			    buf_printf(problems,
			               "%s %s: exit %d, stdout \"%.60s\", stderr \"%.60s\"\n", bin,
			               *opt, o.status, o.out, o.err),
			    0);
		output_done(&o);
	}
}

/* Every program the tree builds answers --version and --help: the daemons,
 * the benchmarks, the emulators and the test helpers (a program of
 * bench/ or tests/{aux,chaos,conductor,camunda7}/ per .c file there).
 * make check builds them all, so one missing is a failure too. */
START_TEST(test_every_program_answers)
{
	_cleanup_free_ char *version = makefile_version(), *top = NULL;
	_cleanup_free_ char *lessee = realpath(tu_lessee_bin(), NULL);
	_cleanup_free_ char *lessor = realpath(tu_lessor_bin(), NULL);
	_cleanup_free_ char *src = src_path(""), *dir = tu_tmpdir("answers");
	_cleanup_(strv_freep) char **bins = NULL;
	const char *const dirs[] = {"bench",           "tests/aux",      "tests/chaos",
	                            "tests/conductor", "tests/camunda7", NULL};
	struct buf problems = BUF_INIT(0);
	size_t n = 0;

	ck_assert_ptr_nonnull(lessee);
	ck_assert_ptr_nonnull(lessor);
	top = strndup(lessee, strrchr(lessee, '/') - lessee);
	ck_assert_int_ge(strv_extend(&bins, lessee), 0);
	ck_assert_int_ge(strv_extend(&bins, lessor), 0);
	for (const char *const *d = dirs; *d; d++) {
		_cleanup_free_ char *pattern = NULL;
		glob_t g;

		ck_assert_int_ge(asprintf(&pattern, "%s/%s/*.c", src, *d), 0);
		ck_assert_int_eq(glob(pattern, 0, NULL, &g), 0);
		for (size_t i = 0; i < g.gl_pathc; i++) {
			const char *base = strrchr(g.gl_pathv[i], '/') + 1;
			_cleanup_free_ char *bin = NULL;

			ck_assert_int_ge(
			    asprintf(&bin, "%s/%s/%.*s", top, *d, (int)(strlen(base) - 2), base),
			    0);
			ck_assert_int_ge(strv_extend(&bins, bin), 0);
		}
		globfree(&g);
	}
	ck_assert_int_eq(chdir(dir), 0);
	for (char **b = bins; *b; b++, n++) {
		if (access(*b, X_OK) < 0)
			ck_assert_int_ge(buf_printf(&problems, "%s: not built (%m)\n", *b), 0);
		else
			check_answers(*b, version, &problems);
	}
	ck_assert_int_eq(chdir("/"), 0);
	ck_assert_int_eq(rm_rf(dir), 0);
	ck_assert_msg(n >= 25, "only %zu programs found from %s", n, src);
	ck_assert_msg(problems.len == 0, "of %zu programs, these do not answer:\n%s", n,
	              problems.data);
	buf_done(&problems);
}
END_TEST

/* The words of NAME="..." in scripts/deps.sh (a package group). */
static char *deps_group(const char *script, const char *name)
{
	_cleanup_free_ char *head = NULL;
	const char *p;

	ck_assert_int_ge(asprintf(&head, "\n%s=\"", name), 0);
	p = strstr(script, head);
	ck_assert_msg(p, "scripts/deps.sh has no %s", name);
	p += strlen(head);
	return strndup(p, strcspn(p, "\""));
}

static bool has_word(const char *words, const char *w)
{
	size_t n = strlen(w);

	for (const char *p = words; (p = strstr(p, w)); p += n)
		if ((p == words || isspace((unsigned char)p[-1])) &&
		    (!p[n] || isspace((unsigned char)p[n])))
			return true;
	return false;
}

/* make deb runs scripts/deps.sh build deb, then dpkg-buildpackage, which
 * refuses to start unless every Build-Depends is installed: each must be in
 * one of those two groups (or be systemd, debhelper's own). */
START_TEST(test_deb_build_depends)
{
	_cleanup_free_ char *control = read_src("debian/control"),
	                    *script = read_src("scripts/deps.sh");
	_cleanup_free_ char *build = deps_group(script, "pkgs_build");
	_cleanup_free_ char *deb = deps_group(script, "pkgs_deb");
	_cleanup_free_ char *field = NULL;
	_cleanup_(strv_freep) char **names = NULL;
	/* build-essential, and what only the tests link (TEST_PKGS) */
	static const char build_only[] = "gcc make libc6-dev check libseccomp-dev libyaml-dev";
	const char *p = strstr(control, "\nBuild-Depends:"), *end;
	int n = 0;

	ck_assert_ptr_nonnull(p);
	p += strlen("\nBuild-Depends:");
	for (end = p; (end = strchr(end, '\n')) && isspace((unsigned char)end[1]); end++)
		;
	field = end ? strndup(p, end - p) : strdup(p);
	for (char *save = NULL, *tok = strtok_r(field, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		tok += strspn(tok, " \t\n");
		tok[strcspn(tok, " \t\n(")] = '\0';
		if (startswith(tok, "debhelper-compat"))
			tok[strlen("debhelper")] = '\0';
		ck_assert_msg(
		    has_word(build, tok) || has_word(deb, tok) || streq(tok, "systemd"),
		    "debian/control Build-Depends %s: not in scripts/deps.sh build or deb", tok);
		ck_assert_int_ge(strv_extend(&names, tok), 0);
		n++;
	}
	ck_assert_int_ge(n, 8);
	/* and the other way: every build package the daemons need is a
	 * Build-Depends (build-essential's and the tests' own aside) */
	for (char *save = NULL, *tok = strtok_r(build, " \t\n", &save); tok;
	     tok = strtok_r(NULL, " \t\n", &save)) {
		if (has_word(build_only, tok))
			continue;
		ck_assert_msg(
		    strv_contains(names, tok),
		    "scripts/deps.sh builds with %s, debian/control does not Build-Depend on it",
		    tok);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("packaging");
	TCase *tm = tcase_create("man");
	TCase *td = tcase_create("deploy");
	TCase *ti = tcase_create("install");
	TCase *tg = tcase_create("goals");

	tcase_add_test(tm, test_man_lessee);
	tcase_add_test(tm, test_man_conf);
	tcase_add_test(tm, test_man_lessor);
	tcase_add_test(td, test_dockerfile);
	tcase_add_test(td, test_dockerfile_runtime_libraries);
	tcase_add_test(td, test_kubernetes);
	tcase_add_test(ti, test_install_no_packages);
	tcase_add_test(ti, test_build_without_test_packages);
	tcase_add_test(ti, test_install_layout);
	tcase_add_test(ti, test_conf_no_workflow);
	tcase_add_test(ti, test_run_dir_on_disk);
	tcase_add_test(ti, test_version);
	tcase_add_test(ti, test_every_program_answers);
	tcase_add_test(ti, test_deb_build_depends);
	tcase_add_test(tg, test_goals_one_after_another);
	tcase_set_timeout(ti, 120);
	tcase_set_timeout(tm, 60);
	tcase_set_timeout(td, 60);
	suite_add_tcase(s, tm);
	suite_add_tcase(s, td);
	suite_add_tcase(s, ti);
	tcase_set_timeout(tg, 600);
	suite_add_tcase(s, tg);
	return tu_run(s);
}
