/* lib/conf: sources and precedence, values, commands, every validation error
 * with its origin, the token, printing and redaction, reload diffs, hostile input. */
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conf/conf-int.h"
#include "conf/conf.h"
#include "testutil.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/random.h"
#include "util/strutil.h"

#define BASE "[api]\nurl = http://127.0.0.1:1\n\n[workflow.w]\ncommand = /bin/true\n"

static char *tmp;

static void setup(void)
{
	tmp = tu_tmpdir("conf");
	ck_assert_ptr_nonnull(tmp);
}

static void teardown(void)
{
	rm_rf(tmp);
	free(tmp);
}

static char *path_in(const char *name)
{
	char *p;

	ck_assert_int_ge(asprintf(&p, "%s/%s", tmp, name), 0);
	return p;
}

static char *put_mode(const char *name, const void *data, size_t len, mode_t mode)
{
	char *p = path_in(name), *d = strdup(p);
	int fd;

	ck_assert_int_eq(mkdir_p(dirname(d), 0755), 0);
	free(d);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write_all(fd, data, len), 0);
	ck_assert_int_eq(fchmod(fd, mode), 0);
	close(fd);
	return p;
}

static void write_some(const char *path, const char *data, size_t len, mode_t mode)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write_all(fd, data, len), 0);
	close(fd);
}

static char *put(const char *name, const char *text)
{
	return put_mode(name, text, strlen(text), 0644);
}

static int load_full(const char *path, char **env, const struct conf_override *ov, size_t n_ov,
                     struct conf **ret, char **err)
{
	struct conf_source src = {.path = path, .env = env, .overrides = ov, .n_overrides = n_ov};

	*ret = NULL;
	*err = NULL;
	return conf_load(&src, ret, err);
}

static struct conf *load_ok(const char *text, char **env)
{
	_cleanup_free_ char *path = put("lessee.conf", text);
	_cleanup_free_ char *err = NULL;
	struct conf *c;
	int r = load_full(path, env, NULL, 0, &c, &err);

	ck_assert_msg(r == 0, "load failed (%d): %s", r, err ? err : "(no message)");
	return c;
}

/* Loads text as tmp/lessee.conf, expects -EINVAL and the error want_fmt with
 * every %1$s replaced by the file's path. */
static void expect_error(const char *text, char **env, const char *want_fmt)
{
	_cleanup_free_ char *path = put("lessee.conf", text);
	_cleanup_free_ char *err = NULL, *want = NULL;
	struct conf *c;
	int r = load_full(path, env, NULL, 0, &c, &err);

	ck_assert_int_ge(asprintf(&want, want_fmt, path), 0);
	ck_assert_msg(r == -EINVAL, "loaded (r=%d) but wanted: %s", r, want);
	ck_assert_ptr_null(c);
	ck_assert_ptr_nonnull(err);
	ck_assert_str_eq(err, want);
}

static char *print_str(const struct conf *c)
{
	char *s = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&s, &n);

	ck_assert_ptr_nonnull(f);
	ck_assert_int_eq(conf_print(c, f), 0);
	fclose(f);
	return s;
}

START_TEST(test_defaults)
{
	_cleanup_conf_ struct conf *c = load_ok(BASE, NULL);
	const struct conf_workflow *w = conf_find_workflow(c, "w");
	char host[256] = "", *dash;
	const struct sockaddr_in *sin = (const struct sockaddr_in *)&c->status.listen_addr;

	ck_assert_str_eq(c->api.url, "http://127.0.0.1:1");
	ck_assert_ptr_null(c->api.token_file);
	ck_assert_ptr_null(c->api.token);
	ck_assert_ptr_null(c->api.ca_file);
	ck_assert_uint_eq(c->api.request_timeout, 30 * USEC_PER_SEC);
	ck_assert_uint_eq(c->worker.concurrency, 4);
	ck_assert_ptr_nonnull(c->worker.tags);
	ck_assert_ptr_null(c->worker.tags[0]);
	ck_assert_uint_eq(c->worker.lease_ttl, 90 * USEC_PER_SEC);
	ck_assert_uint_eq(c->worker.lease_refresh, 30 * USEC_PER_SEC);
	ck_assert_uint_eq(c->worker.long_poll, 20 * USEC_PER_SEC);
	ck_assert_uint_eq(c->worker.poll_interval, 2 * USEC_PER_SEC);
	ck_assert_uint_eq(c->worker.run_timeout, 30 * USEC_PER_MINUTE);
	ck_assert_uint_eq(c->worker.kill_grace, 10 * USEC_PER_SEC);
	ck_assert_uint_eq(c->worker.drain_timeout, USEC_INFINITY);
	ck_assert_uint_eq(c->worker.max_consecutive_failures, 3);
	ck_assert_uint_eq(c->worker.failure_cooldown, 5 * USEC_PER_MINUTE);
	ck_assert_uint_eq(c->worker.failure_cooldown_max, USEC_PER_HOUR);
	ck_assert_uint_eq(c->worker.max_log_bytes, 64ULL << 20);
	ck_assert_uint_eq(c->worker.max_output_bytes, 1ULL << 20);
	ck_assert_str_eq(c->worker.spool_dir, "/var/lib/lessee/spool");
	ck_assert_str_eq(c->worker.run_dir, "/var/cache/lessee/runs");
	ck_assert_str_eq(c->status.listen, "127.0.0.1:9464");
	ck_assert_int_eq(sin->sin_family, AF_INET);
	ck_assert_int_eq(ntohs(sin->sin_port), 9464);
	ck_assert_uint_eq(ntohl(sin->sin_addr.s_addr), INADDR_LOOPBACK);
	ck_assert_ptr_null(c->status.heartbeat_url);
	ck_assert_uint_eq(c->status.heartbeat_interval, USEC_PER_MINUTE);
	ck_assert_int_eq(c->log.level, LOG_INFO);
	ck_assert_int_eq(c->log.format, LOG_FORMAT_AUTO);
	ck_assert_ptr_null(c->warnings[0]);
	ck_assert_ptr_nonnull(c->sources[0]);
	ck_assert_ptr_null(c->sources[1]);

	/* "<hostname>-<8 hex>" */
	ck_assert_int_eq(gethostname(host, sizeof(host) - 1), 0);
	dash = strrchr(c->worker.id, '-');
	ck_assert_ptr_nonnull(dash);
	ck_assert_int_eq(strlen(dash + 1), 8);
	ck_assert_uint_eq(strspn(dash + 1, "0123456789abcdef"), 8);
	ck_assert_int_eq((int)(dash - c->worker.id), (int)strlen(host));
	ck_assert_int_eq(strncmp(c->worker.id, host, strlen(host)), 0);

	ck_assert_uint_eq(c->n_workflows, 1);
	ck_assert_ptr_nonnull(w);
	ck_assert_str_eq(w->argv[0], "/bin/true");
	ck_assert_ptr_null(w->argv[1]);
	ck_assert_uint_eq(w->timeout, 30 * USEC_PER_MINUTE); /* inherited */
	ck_assert_uint_eq(w->max_log_bytes, 64ULL << 20);
	ck_assert_ptr_null(w->env[0]);
	ck_assert_ptr_null(w->user);
	ck_assert_ptr_null(w->working_directory);
}
END_TEST

START_TEST(test_worker_id_default_given_and_random)
{
	_cleanup_free_ char *path = put("lessee.conf", BASE), *err = NULL;
	struct conf_source src = {.path = path, .default_worker_id = "kept-id:1"};
	_cleanup_conf_ struct conf *a = NULL, *b = NULL, *c = NULL;

	ck_assert_int_eq(conf_load(&src, &a, &err), 0);
	ck_assert_str_eq(a->worker.id, "kept-id:1");
	src.default_worker_id = NULL;
	ck_assert_int_eq(conf_load(&src, &b, &err), 0);
	ck_assert_int_eq(conf_load(&src, &c, &err), 0);
	ck_assert_str_ne(b->worker.id, c->worker.id); /* random suffix */
	src.default_worker_id = "bad id";
	ck_assert_int_eq(conf_load(&src, &a, &err), -EINVAL);
	ck_assert_str_eq(err, "default worker id: worker.id: 'bad id' is not 1..128 bytes of "
	                      "[A-Za-z0-9._:@/-]");
}
END_TEST

/* Worker ids are the protocol's (docs/protocol.md): identifiers plus '@' and
 * '/', so the names operators give lessor's workers work for lessee too. */
START_TEST(test_worker_id_protocol_charset)
{
	static const char *const ok[] = {"host/slot-3", "ci@host", "ci@host/slot:2",
	                                 "host.example.org"};
	_cleanup_free_ char *path = put("lessee.conf", BASE);

	for (size_t i = 0; i < ELEMENTSOF(ok); i++) {
		_cleanup_free_ char *err = NULL;
		_cleanup_conf_ struct conf *c = NULL;
		struct conf_source src = {.path = path, .default_worker_id = ok[i]};

		ck_assert_msg(conf_load(&src, &c, &err) == 0, "%s: %s", ok[i], err);
		ck_assert_str_eq(c->worker.id, ok[i]);
	}
}
END_TEST

START_TEST(test_systemd_directories)
{
	char *env[] = {"STATE_DIRECTORY=/var/lib/lx:/var/lib/other",
	               "RUNTIME_DIRECTORY=/run/lx:/run/other", "UNRELATED=1", NULL};
	char *bad_env[] = {"STATE_DIRECTORY=relative", "RUNTIME_DIRECTORY=", NULL};
	char *cache_env[] = {"CACHE_DIRECTORY=/var/cache/lx:/var/cache/other",
	                     "RUNTIME_DIRECTORY=/run/lx", NULL};
	_cleanup_conf_ struct conf *c = load_ok(BASE, env);
	_cleanup_conf_ struct conf *d = load_ok(BASE, bad_env);
	_cleanup_conf_ struct conf *e = load_ok(BASE, cache_env);

	ck_assert_str_eq(c->worker.spool_dir, "/var/lib/lx/spool");
	/* a unit with RuntimeDirectory= only (older units, drop-ins) */
	ck_assert_str_eq(c->worker.run_dir, "/run/lx");
	ck_assert_str_eq(d->worker.spool_dir, "/var/lib/lessee/spool");
	ck_assert_str_eq(d->worker.run_dir, "/var/cache/lessee/runs");
	/* CacheDirectory= (the shipped units): on disk, preferred */
	ck_assert_str_eq(e->worker.run_dir, "/var/cache/lx/runs");
}
END_TEST

/* file < drop-in < environment < override, each layer only replacing what it sets. */
START_TEST(test_precedence)
{
	_cleanup_free_ char *path = put("lessee.conf", BASE "[worker]\nconcurrency = 2\n"
	                                                    "kill_grace = 5s\ntags = a\n");
	_cleanup_free_ char *dropin = NULL;
	char *env[] = {"LESSEE_WORKER_CONCURRENCY=4", "LESSEE_WORKER_TAGS= env , x ", NULL};
	const struct conf_override ov[] = {{"--concurrency", "worker.concurrency=5"}};
	static const unsigned want[] = {2, 3, 4, 5};

	for (int layer = 0; layer < 4; layer++) {
		_cleanup_conf_ struct conf *c = NULL;
		_cleanup_free_ char *err = NULL;

		if (layer == 1)
			dropin = put("lessee.conf.d/50-x.conf", "[worker]\nconcurrency = 3\n");
		ck_assert_int_eq(
		    load_full(path, layer >= 2 ? env : NULL, ov, layer >= 3 ? 1 : 0, &c, &err), 0);
		ck_assert_uint_eq(c->worker.concurrency, want[layer]);
		ck_assert_uint_eq(c->worker.kill_grace, 5 * USEC_PER_SEC);
		ck_assert_str_eq(c->worker.tags[0], layer >= 2 ? "env" : "a");
		if (layer >= 2)
			ck_assert_str_eq(c->worker.tags[1], "x");
		ck_assert_uint_eq(strv_length(c->sources), layer >= 1 ? 2 : 1);
	}
}
END_TEST

START_TEST(test_dropin_order)
{
	_cleanup_free_ char *path = put("lessee.conf", BASE "env = A=1 KEEP=k\n");
	_cleanup_conf_ struct conf *c = NULL;
	_cleanup_free_ char *err = NULL;
	const struct conf_workflow *w;

	/* bytewise: "10-" < "2-" < "20-"; other names are not drop-ins */
	free(
	    put("lessee.conf.d/2-b.conf", "[worker]\nconcurrency = 22\n[workflow.w]\nenv = B=2\n"));
	free(put("lessee.conf.d/10-a.conf", "[worker]\nconcurrency = 10\n"));
	free(put("lessee.conf.d/20-c.conf", "[worker]\nconcurrency = 20\n[workflow.w]\n"
	                                    "env = A=3\n"));
	free(put("lessee.conf.d/99-z.conf.bak", "[worker]\nconcurrency = 99\n"));
	free(put("lessee.conf.d/.99-hidden.conf", "[worker]\nconcurrency = 98\n"));
	free(put("lessee.conf.d/README", "not ini at all"));
	ck_assert_int_eq(load_full(path, NULL, NULL, 0, &c, &err), 0);
	ck_assert_uint_eq(c->worker.concurrency, 20);
	ck_assert_uint_eq(strv_length(c->sources), 4);
	ck_assert_ptr_nonnull(strstr(c->sources[1], "/10-a.conf"));
	ck_assert_ptr_nonnull(strstr(c->sources[2], "/2-b.conf"));
	ck_assert_ptr_nonnull(strstr(c->sources[3], "/20-c.conf"));
	/* env accumulates across files; the last assignment of a name wins */
	w = conf_find_workflow(c, "w");
	ck_assert_uint_eq(strv_length(w->env), 3);
	ck_assert_str_eq(w->env[0], "KEEP=k");
	ck_assert_str_eq(w->env[1], "B=2");
	ck_assert_str_eq(w->env[2], "A=3");
	c = conf_free(c);

	/* an empty env= clears what came before */
	free(put("lessee.conf.d/30-d.conf", "[workflow.w]\nenv =\nenv = ONLY=1\n"));
	ck_assert_int_eq(load_full(path, NULL, NULL, 0, &c, &err), 0);
	w = conf_find_workflow(c, "w");
	ck_assert_uint_eq(strv_length(w->env), 1);
	ck_assert_str_eq(w->env[0], "ONLY=1");
	c = conf_free(c);

	/* a directory named like a drop-in is an error, not silently skipped */
	free(path);
	path = path_in("lessee.conf.d/40-dir.conf");
	ck_assert_int_eq(mkdir(path, 0755), 0);
	free(path);
	path = path_in("lessee.conf");
	ck_assert_int_eq(load_full(path, NULL, NULL, 0, &c, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "/lessee.conf.d/40-dir.conf: cannot read: not a "
	                                  "regular file"));
}
END_TEST

START_TEST(test_durations_and_sizes)
{
	static const struct {
		const char *setting;
		size_t offset;
		uint64_t want;
	} ok[] = {
	    {"worker.run_timeout=90s", offsetof(struct conf, worker.run_timeout),
	     90 * USEC_PER_SEC},
	    {"worker.run_timeout=5min", offsetof(struct conf, worker.run_timeout),
	     5 * USEC_PER_MINUTE},
	    {"worker.run_timeout=1h", offsetof(struct conf, worker.run_timeout), USEC_PER_HOUR},
	    {"worker.run_timeout=1h 30min", offsetof(struct conf, worker.run_timeout),
	     90 * USEC_PER_MINUTE},
	    {"worker.run_timeout=infinity", offsetof(struct conf, worker.run_timeout),
	     USEC_INFINITY},
	    {"worker.poll_interval=250ms", offsetof(struct conf, worker.poll_interval),
	     250 * USEC_PER_MSEC},
	    {"worker.long_poll=0", offsetof(struct conf, worker.long_poll), 0},
	    {"worker.max_log_bytes=64M", offsetof(struct conf, worker.max_log_bytes), 64ULL << 20},
	    {"worker.max_log_bytes=1G", offsetof(struct conf, worker.max_log_bytes), 1ULL << 30},
	    {"worker.max_log_bytes=512K", offsetof(struct conf, worker.max_log_bytes), 512 << 10},
	    {"worker.max_log_bytes=2GiB", offsetof(struct conf, worker.max_log_bytes), 2ULL << 30},
	    {"worker.max_log_bytes=65536", offsetof(struct conf, worker.max_log_bytes), 65536},
	    {"worker.max_log_bytes=4096B", offsetof(struct conf, worker.max_log_bytes), 4096},
	    {"worker.max_log_bytes=1 T", offsetof(struct conf, worker.max_log_bytes), 1ULL << 40},
	};
	static const struct {
		const char *setting, *want;
	} bad[] = {
	    {"worker.run_timeout=abc", "--set: worker.run_timeout: 'abc' is not a duration (like "
	                               "90s, 5min, 1h, 250ms, infinity)"},
	    {"worker.run_timeout=", "--set: worker.run_timeout: '' is not a duration (like 90s, "
	                            "5min, 1h, 250ms, infinity)"},
	    {"worker.run_timeout=500ms", "--set: worker.run_timeout: 500ms is out of range: 1s .. "
	                                 "30d or infinity"},
	    {"worker.kill_grace=infinity", "--set: worker.kill_grace: cannot be infinity"},
	    {"worker.lease_ttl=1500ms", "--set: worker.lease_ttl: must be a whole number of "
	                                "seconds (the protocol counts seconds)"},
	    {"worker.max_log_bytes=1.5G", "--set: worker.max_log_bytes: '1.5G' is not a size (like "
	                                  "65536, 512K, 64M, 1G)"},
	    {"worker.max_log_bytes=64MB", "--set: worker.max_log_bytes: '64MB' is not a size (like "
	                                  "65536, 512K, 64M, 1G)"},
	    {"worker.max_log_bytes=-1", "--set: worker.max_log_bytes: '-1' is not a size (like "
	                                "65536, 512K, 64M, 1G)"},
	    {"worker.max_log_bytes=99999999999999999999", "--set: worker.max_log_bytes: "
	                                                  "'99999999999999999999' is not a size "
	                                                  "(like 65536, 512K, 64M, 1G)"},
	    {"worker.max_log_bytes=16777216T", "--set: worker.max_log_bytes: '16777216T' is not a "
	                                       "size (like 65536, 512K, 64M, 1G)"},
	    {"worker.max_log_bytes=100", "--set: worker.max_log_bytes: 100 is out of range: 1K .. "
	                                 "1T"},
	    {"worker.max_output_bytes=65M", "--set: worker.max_output_bytes: 65M is out of range: "
	                                    "1K .. 64M"},
	};
	_cleanup_free_ char *path = put("lessee.conf", BASE);

	for (size_t i = 0; i < ELEMENTSOF(ok); i++) {
		const struct conf_override ov = {NULL, ok[i].setting};
		_cleanup_conf_ struct conf *c = NULL;
		_cleanup_free_ char *err = NULL;
		uint64_t got;

		ck_assert_msg(load_full(path, NULL, &ov, 1, &c, &err) == 0, "%s: %s", ok[i].setting,
		              err);
		if (strstr(ok[i].setting, "bytes"))
			got = *(uint64_t *)(void *)((char *)c + ok[i].offset);
		else
			got = *(usec_t *)(void *)((char *)c + ok[i].offset);
		ck_assert_msg(got == ok[i].want, "%s gave %llu", ok[i].setting,
		              (unsigned long long)got);
	}
	for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
		const struct conf_override ov = {NULL, bad[i].setting};
		struct conf *c;
		_cleanup_free_ char *err = NULL;

		ck_assert_int_eq(load_full(path, NULL, &ov, 1, &c, &err), -EINVAL);
		ck_assert_str_eq(err, bad[i].want);
	}
}
END_TEST

START_TEST(test_command_words)
{
	static const struct {
		const char *in;
		const char *want[5];
	} ok[] = {
	    {"/bin/echo a  b", {"/bin/echo", "a", "b"}},
	    {"/bin/echo \"two words\" 'single $HOME \\n' x",
	     {"/bin/echo", "two words", "single $HOME \\n", "x"}},
	    {"/bin/echo a\\ b \\\"q", {"/bin/echo", "a b", "\"q"}},
	    {"/bin/echo \"q\\\"uote\" 'it''s'", {"/bin/echo", "q\"uote", "its"}},
	    {"/bin/echo \"\\x41\\t\\\\\" \"\"", {"/bin/echo", "A\t\\", ""}},
	    {"/bin/echo pre\"mid dle\"post", {"/bin/echo", "premid dlepost"}},
	    {"\t/bin/sh -c 'echo \"$1\" | tr a b' sh ",
	     {"/bin/sh", "-c", "echo \"$1\" | tr a b", "sh"}},
	};
	static const struct {
		const char *in, *want;
	} bad[] = {
	    {"/bin/echo \"abc", "has an unterminated double quote"},
	    {"/bin/echo 'abc", "has an unterminated single quote"},
	    {"/bin/echo abc\\", "ends with a lone backslash"},
	    {"/bin/echo \\q", "unknown escape sequence '\\q'"},
	    {"/bin/echo \"\\x00\"", "\\x00 is not allowed"},
	    {"/bin/echo \\xZZ", "unknown escape sequence '\\x'"},
	};
	char problem[CONF_PROBLEM_MAX];

	for (size_t i = 0; i < ELEMENTSOF(ok); i++) {
		char **v = NULL;
		size_t n = 0;

		ck_assert_msg(conf_split_words(ok[i].in, &v, problem) == 0, "%s: %s", ok[i].in,
		              problem);
		for (; ok[i].want[n]; n++)
			ck_assert_str_eq(v[n], ok[i].want[n]);
		ck_assert_ptr_null(v[n]);
		/* quoting gives the same words back */
		for (size_t j = 0; j < n; j++) {
			char *q = NULL, **back = NULL;
			size_t ql = 0;
			FILE *f = open_memstream(&q, &ql);

			conf_write_word(f, v[j]);
			fclose(f);
			ck_assert_int_eq(conf_split_words(q, &back, problem), 0);
			ck_assert_str_eq(back[0], v[j]);
			ck_assert_ptr_null(back[1]);
			strv_free(back);
			free(q);
		}
		strv_free(v);
	}
	for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
		char **v = NULL;

		ck_assert_int_eq(conf_split_words(bad[i].in, &v, problem), -EINVAL);
		ck_assert_str_eq(problem, bad[i].want);
		ck_assert_ptr_null(v);
	}
}
END_TEST

START_TEST(test_command_in_file)
{
	_cleanup_conf_ struct conf *c = load_ok(
	    "[api]\nurl = https://api.example\n[workflow.build]\n"
	    "command = /usr/bin/env \"A B\" \\\n"
	    "# a comment inside a continuation is skipped\n"
	    "    'c d' \\\n"
	    "    e\n"
	    "timeout = 5min\nmax_log_bytes = 1M\nworking_directory = /srv/build\nuser = root\n"
	    "env = A=1 B=\"two words\"\nenv = C=3\n",
	    NULL);
	const struct conf_workflow *w = conf_find_workflow(c, "build");

	ck_assert_ptr_nonnull(w);
	ck_assert_uint_eq(strv_length(w->argv), 4);
	ck_assert_str_eq(w->argv[0], "/usr/bin/env");
	ck_assert_str_eq(w->argv[1], "A B");
	ck_assert_str_eq(w->argv[2], "c d");
	ck_assert_str_eq(w->argv[3], "e");
	ck_assert_uint_eq(w->timeout, 5 * USEC_PER_MINUTE);
	ck_assert_uint_eq(w->max_log_bytes, 1 << 20);
	ck_assert_str_eq(w->working_directory, "/srv/build");
	ck_assert_str_eq(w->user, "root");
	ck_assert_uint_eq(w->uid, 0);
	ck_assert_uint_eq(w->gid, 0);
	ck_assert_str_eq(w->env[0], "A=1");
	ck_assert_str_eq(w->env[1], "B=two words");
	ck_assert_str_eq(w->env[2], "C=3");
	ck_assert_ptr_null(w->env[3]);
	ck_assert_ptr_null(conf_find_workflow(c, "buil"));
	ck_assert_ptr_null(conf_find_workflow(c, "build2"));
}
END_TEST

START_TEST(test_file_errors)
{
	static const struct {
		const char *text, *want;
	} cases[] = {
	    /* values */
	    {BASE "[worker]\nconcurrency = 0\n",
	     "%1$s:7: worker.concurrency: 0 is out of range: 1 .. 10000"},
	    {BASE "[worker]\nconcurrency = 10001\n",
	     "%1$s:7: worker.concurrency: 10001 is out of range: 1 .. 10000"},
	    {BASE "[worker]\nconcurrency = four\n",
	     "%1$s:7: worker.concurrency: 'four' is not a whole number"},
	    {BASE "[worker]\nconcurrency = -1\n",
	     "%1$s:7: worker.concurrency: '-1' is not a whole number"},
	    {BASE "[worker]\nlease_ttl = 1h 1s\n",
	     "%1$s:7: worker.lease_ttl: 1h 1s is out of range: 1s .. 1h"},
	    {BASE "[worker]\nlong_poll = 61s\n",
	     "%1$s:7: worker.long_poll: 61s is out of range: 0 .. 1min"},
	    {BASE "[worker]\ntags = gpu bad!tag\n",
	     "%1$s:7: worker.tags: tag 'bad!tag' is not 1..64 bytes of [A-Za-z0-9._:/=-]"},
	    {BASE "[worker]\nid = has space\n",
	     "%1$s:7: worker.id: 'has space' is not 1..128 bytes of [A-Za-z0-9._:@/-]"},
	    {BASE "[worker]\nspool_dir = var/spool\n",
	     "%1$s:7: worker.spool_dir: 'var/spool' is not an absolute path"},
	    {BASE "[worker]\nrun_dir =\n", "%1$s:7: worker.run_dir: must not be empty"},
	    {BASE "[worker]\nmax_consecutive_failures = 1001\n",
	     "%1$s:7: worker.max_consecutive_failures: 1001 is out of range: 0 .. 1000"},
	    {"[api]\nurl = ftp://x\n[workflow.w]\ncommand = /bin/true\n",
	     "%1$s:2: api.url: 'ftp://x' is not an http:// or https:// URL"},
	    {"[api]\nurl = https://user:pw@host\n[workflow.w]\ncommand = /bin/true\n",
	     "%1$s:2: api.url: must not carry credentials (user@host): use api.token_file"},
	    {"[api]\nurl = https://host/?a=b\n", "%1$s:2: api.url: must not have a query or "
	                                         "fragment"},
	    {"[api]\nurl = https:///path\n", "%1$s:2: api.url: 'https:///path' has no host"},
	    {"[api]\nurl = https://ho st\n", "%1$s:2: api.url: contains a blank, control or "
	                                     "non-ASCII byte"},
	    {"[api]\nca_file = ca.pem\n", "%1$s:2: api.ca_file: 'ca.pem' is not an absolute path"},
	    {BASE "[status]\nlisten = localhost:9464\n",
	     "%1$s:7: status.listen: 'localhost:9464' is not ADDRESS:PORT with an IP address "
	     "(127.0.0.1:9464, [::1]:9464) and a port 0..65535 (0: any free port)"},
	    {BASE "[status]\nlisten = 127.0.0.1:65536\n",
	     "%1$s:7: status.listen: '127.0.0.1:65536' is not ADDRESS:PORT with an IP address "
	     "(127.0.0.1:9464, [::1]:9464) and a port 0..65535 (0: any free port)"},
	    {BASE "[status]\nheartbeat_url = hc-ping.com/x\n",
	     "%1$s:7: status.heartbeat_url: 'hc-ping.com/x' is not an http:// or https:// URL"},
	    {BASE "[log]\nlevel = loud\n", "%1$s:7: log.level: 'loud' is not one of debug info "
	                                   "notice warning error crit alert emerg"},
	    {BASE "[log]\nformat = xml\n", "%1$s:7: log.format: 'xml' is not one of auto logfmt "
	                                   "json journal"},
	    /* workflows */
	    {BASE "timeout = 0\n", "%1$s:6: workflow.w.timeout: 0 is out of range: 1s .. 30d or "
	                           "infinity"},
	    {BASE "command = true\n", "%1$s:6: workflow.w.command: 'true' is not an absolute path "
	                              "(commands run without a shell or PATH search)"},
	    {BASE "command = -/bin/true\n", "%1$s:6: workflow.w.command: '-/bin/true' is not an "
	                                    "absolute path (commands run without a shell or "
	                                    "PATH search)"},
	    {BASE "command =\n", "%1$s:6: workflow.w.command: is empty"},
	    {BASE "command = /bin/echo \"open\n", "%1$s:6: workflow.w.command: has an "
	                                          "unterminated double quote"},
	    {BASE "env = 1BAD=x\n", "%1$s:6: workflow.w.env: '1BAD=x' is not NAME=value"},
	    {BASE "env = NOEQUALS\n", "%1$s:6: workflow.w.env: 'NOEQUALS' is not NAME=value"},
	    {BASE "env = A-B=1\n", "%1$s:6: workflow.w.env: 'A-B' is not a variable name "
	                           "([A-Za-z_][A-Za-z0-9_]*)"},
	    {BASE "env = OK=1 LESSEE_RUN_ID=x\n", "%1$s:6: workflow.w.env: 'LESSEE_RUN_ID': "
	                                          "LESSEE_* variables are set by lessee itself"},
	    {BASE "user = no-such-user-here\n", "%1$s:6: workflow.w.user: unknown user "
	                                        "'no-such-user-here'"},
	    {BASE "user = ../etc\n", "%1$s:6: workflow.w.user: '../etc' is not a user name"},
	    {BASE "working_directory = srv\n", "%1$s:6: workflow.w.working_directory: 'srv' is not "
	                                       "an absolute path"},
	    {BASE "max_log_bytes = 1\n", "%1$s:6: workflow.w.max_log_bytes: 1 is out of range: 1K "
	                                 ".. 1T"},
	    {BASE "[workflow.empty]\n\n", "%1$s:6: workflow.empty: command is not set"},
	    {BASE "[workflow.bad/name]\n", "%1$s:6: workflow name 'bad/name' is not 1..128 bytes "
	                                   "of [A-Za-z0-9._:-]"},
	    {BASE "[workflow]\n", "%1$s:6: a workflow section needs a name: [workflow.NAME]"},
	    {BASE "[workflow.]\n", "%1$s:6: workflow name '' is not 1..128 bytes of "
	                           "[A-Za-z0-9._:-]"},
	    /* structure */
	    {BASE "[apii]\n", "%1$s:6: unknown section [apii]"},
	    {BASE "[api\n", "%1$s:6: malformed section header '[api'"},
	    {BASE "[api]\nurll = http://x\n", "%1$s:7: unknown key 'urll' in [api] (did you mean "
	                                      "'url'?)"},
	    {BASE "[worker]\nconcurency = 2\n", "%1$s:7: unknown key 'concurency' in [worker] (did "
	                                        "you mean 'concurrency'?)"},
	    {BASE "[worker]\nfrobnicate = 2\n", "%1$s:7: unknown key 'frobnicate' in [worker]"},
	    {BASE "comand = /bin/x\n", "%1$s:6: unknown key 'comand' in [workflow.w] (did you mean "
	                               "'command'?)"},
	    {"url = http://x\n", "%1$s:1: assignment before the first [section]"},
	    {BASE "[worker]\njust some words\n", "%1$s:7: expected 'key = value' or '[section]', "
	                                         "got 'just some words'"},
	    {BASE "[worker]\n = 4\n", "%1$s:7: missing key before '='"},
	    {BASE "[worker]\nconcurrency = \\\n  9\\\n  9 \\\n\nid = x\n",
	     "%1$s:7: worker.concurrency: '9 9' is not a whole number"},
	    /* across keys and files */
	    {BASE "[worker]\nlease_refresh = 46s\n",
	     "%1$s:7: worker.lease_refresh (46s) must be at most half of worker.lease_ttl "
	     "(1min30s), so a failed renewal can be retried before the lease runs out"},
	    {BASE "[worker]\nlease_ttl = 50s\n",
	     "%1$s:7: worker.lease_refresh (30s) must be at most half of worker.lease_ttl (50s), "
	     "so a failed renewal can be retried before the lease runs out"},
	    {BASE "[worker]\nfailure_cooldown = 2h\n",
	     "%1$s:7: worker.failure_cooldown_max (1h) is shorter than worker.failure_cooldown "
	     "(2h)"},
	    {"[api]\nurl = http://localhost\n",
	     "%1$s: no [workflow.NAME] section: this worker would run "
	     "nothing"},
	    {"[workflow.w]\ncommand = /bin/true\n", "%1$s: api.url is not set"},
	    {"", "%1$s: api.url is not set\n%1$s: no [workflow.NAME] section: this worker would "
	         "run nothing"},
	    {"[api]\ntoken_file = /nonexistent/token\nurl = http://localhost\n"
	     "[workflow.w]\ncommand = /x\n",
	     "%1$s:2: api.token_file: /nonexistent/token: No such file or directory"},
	};

	for (size_t i = 0; i < ELEMENTSOF(cases); i++)
		expect_error(cases[i].text, NULL, cases[i].want);
}
END_TEST

START_TEST(test_env_and_override_errors)
{
	_cleanup_free_ char *path = put("lessee.conf", BASE);
	static const struct {
		const char *env, *want;
	} env_cases[] = {
	    {"LESSEE_WORKER_CONCURRENCY=0",
	     "LESSEE_WORKER_CONCURRENCY: worker.concurrency: 0 is out of range: 1 .. 10000"},
	    {"LESSEE_WORKER_CONCURENCY=2", "LESSEE_WORKER_CONCURENCY: unknown key 'concurency' in "
	                                   "[worker] (did you mean 'concurrency'?)"},
	    {"LESSEE_API_URL=gopher://x", "LESSEE_API_URL: api.url: 'gopher://x' is not an "
	                                  "http:// or https:// URL"},
	    {"LESSEE_LOG_LEVEL=\xff", "LESSEE_LOG_LEVEL: is not valid UTF-8"},
	    {"LESSEE_LOG_LE\x1bVEL=x", "LESSEE_LOG_LE?VEL: contains a control character"},
	    {"LESSEE_STATUS_LISTEN=1.2.3.4",
	     "LESSEE_STATUS_LISTEN: status.listen: '1.2.3.4' is not "
	     "ADDRESS:PORT with an IP address (127.0.0.1:9464, "
	     "[::1]:9464) and a port 0..65535 (0: any free port)"},
	};
	static const struct {
		struct conf_override ov;
		const char *want;
	} ov_cases[] = {
	    {{"--concurrency", "worker.concurrency=x"},
	     "--concurrency: worker.concurrency: 'x' is not a whole number"},
	    {{NULL, "worker"}, "--set: 'worker' is not section.key=value"},
	    {{NULL, "worker=3"}, "--set: 'worker=3' is not section.key=value"},
	    {{NULL, ".x=3"}, "--set: '.x=3' is not section.key=value"},
	    {{NULL, "worker.=3"}, "--set: 'worker.=3' is not section.key=value"},
	    {{NULL, "nope.key=3"}, "--set: unknown section [nope]"},
	    {{NULL, "workflow.w.comand=/x"},
	     "--set: unknown key 'comand' in [workflow.w] (did you "
	     "mean 'command'?)"},
	    {{"--api-url", "api.url=http://a\tb"},
	     "--api-url: api.url: contains a blank, control "
	     "or non-ASCII byte"},
	    {{NULL, "worker.id=a\x01"}, "--set: contains a control character"},
	    {{NULL, "wor\xffker.id=a"}, "--set: is not valid UTF-8"},
	};

	for (size_t i = 0; i < ELEMENTSOF(env_cases); i++) {
		char *env[] = {(char *)(uintptr_t)env_cases[i].env, NULL};
		struct conf *c;
		_cleanup_free_ char *err = NULL;

		ck_assert_int_eq(load_full(path, env, NULL, 0, &c, &err), -EINVAL);
		ck_assert_str_eq(err, env_cases[i].want);
	}
	for (size_t i = 0; i < ELEMENTSOF(ov_cases); i++) {
		struct conf *c;
		_cleanup_free_ char *err = NULL;

		ck_assert_int_eq(load_full(path, NULL, &ov_cases[i].ov, 1, &c, &err), -EINVAL);
		ck_assert_str_eq(err, ov_cases[i].want);
	}
}
END_TEST

/* Variables outside LESSEE_{API,WORKER,STATUS,LOG}_ are not ours. */
START_TEST(test_env_namespace)
{
	char *env[] = {"LESSEE_IO_BACKEND=epoll",
	               "LESSEE_RUN_ID=r-1",
	               "LESSEE_WORKFLOW=w",
	               "LESSEE_APIURL=x",
	               "LESSEE_WORKER_CONCURRENCY= 7 ",
	               "LESSEE_LOG_LEVEL=debug",
	               "LESSEE_STATUS_LISTEN=",
	               "LESSEE_API_REQUEST_TIMEOUT=5s",
	               NULL};
	_cleanup_conf_ struct conf *c = load_ok(BASE, env);

	ck_assert_uint_eq(c->worker.concurrency, 7);
	ck_assert_int_eq(c->log.level, LOG_DEBUG);
	ck_assert_ptr_null(c->status.listen); /* empty = off */
	ck_assert_int_eq(c->status.listen_addr_len, 0);
	ck_assert_uint_eq(c->api.request_timeout, 5 * USEC_PER_SEC);
}
END_TEST

START_TEST(test_missing_files)
{
	_cleanup_free_ char *missing = path_in("nope.conf"), *err = NULL, *want = NULL;
	_cleanup_conf_ struct conf *c = NULL;
	char *env[] = {"LESSEE_API_URL=http://127.0.0.1:2", NULL};
	const struct conf_override ov[] = {{NULL, "workflow.x.command=/bin/true"}};
	struct conf_source src = {.env = env, .overrides = ov, .n_overrides = 1};

	/* an explicit path must exist */
	ck_assert_int_eq(load_full(missing, env, ov, 1, &c, &err), -EINVAL);
	ck_assert_int_ge(asprintf(&want, "%s: cannot read: No such file or directory", missing), 0);
	ck_assert_str_eq(err, want);
	err = mfree(err);

	/* a directory or a FIFO as the file: an error, never a hang */
	ck_assert_int_eq(load_full(tmp, NULL, NULL, 0, &c, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, ": cannot read: not a regular file"));
	err = mfree(err);
	ck_assert_int_eq(mkfifo(missing, 0600), 0);
	ck_assert_int_eq(load_full(missing, NULL, NULL, 0, &c, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, ": cannot read: not a regular file"));
	err = mfree(err);

	/* the default path may be missing when api.url comes from elsewhere */
	if (access(CONF_DEFAULT_PATH, F_OK) == 0 || access(CONF_DEFAULT_PATH ".d", F_OK) == 0)
		return; /* this machine has a real configuration; the rest is not hermetic */
	ck_assert_int_eq(conf_load(&src, &c, &err), 0);
	ck_assert_str_eq(c->api.url, "http://127.0.0.1:2");
	ck_assert_ptr_null(c->sources[0]);
	c = conf_free(c);
	src.env = NULL;
	ck_assert_int_eq(conf_load(&src, &c, &err), -EINVAL);
	ck_assert_str_eq(err,
	                 CONF_DEFAULT_PATH ": cannot read: No such file or directory, and "
	                                   "neither LESSEE_API_URL nor an override sets api.url");
}
END_TEST

START_TEST(test_token)
{
	_cleanup_free_ char *creds = path_in("creds"), *cenv = NULL, *text = NULL, *err = NULL;
	_cleanup_free_ char *cred_file = NULL, *explicit = NULL, *want = NULL;
	_cleanup_conf_ struct conf *c = NULL;

	ck_assert_int_ge(asprintf(&cenv, "CREDENTIALS_DIRECTORY=%s", creds), 0);
	char *env[] = {cenv, NULL};

	/* no credential file: no token, no error */
	ck_assert_int_eq(mkdir_p(creds, 0700), 0);
	c = load_ok(BASE, env);
	ck_assert_ptr_null(c->api.token);
	c = conf_free(c);

	/* the credential, trimmed */
	cred_file = put_mode("creds/api-token", " s3cr3t-T0ken.x\r\n\n", 18, 0400);
	c = load_ok(BASE, env);
	ck_assert_str_eq(c->api.token, "s3cr3t-T0ken.x");
	ck_assert_str_eq(c->api.token_path, cred_file);
	ck_assert_ptr_null(c->api.token_file);
	c = conf_free(c);

	/* token_file wins over the credential */
	explicit = put_mode("tok", "other\n", 6, 0640);
	ck_assert_int_ge(asprintf(&text, BASE "[api]\ntoken_file = %s\n", explicit), 0);
	c = load_ok(text, env);
	ck_assert_str_eq(c->api.token, "other");
	ck_assert_str_eq(c->api.token_path, explicit);
	c = conf_free(c);

	/* readable by others: refused, naming the line that set token_file */
	ck_assert_int_eq(chmod(explicit, 0644), 0);
	ck_assert_int_ge(asprintf(&want,
	                          "%%1$s:7: api.token_file: %s is accessible by others "
	                          "(mode 0644): chmod o-rwx it",
	                          explicit),
	                 0);
	expect_error(text, env, want);
	want = mfree(want);

	/* the credential checked the same way, named by its path */
	ck_assert_int_eq(chmod(cred_file, 0604), 0);
	ck_assert_int_ge(asprintf(&want,
	                          "%s: api.token_file: %s is accessible by others (mode "
	                          "0604): chmod o-rwx it",
	                          cred_file, cred_file),
	                 0);
	expect_error(BASE, env, want);
	want = mfree(want);

	/* empty, or with inner blanks (an HTTP header injection) */
	ck_assert_int_eq(chmod(explicit, 0600), 0);
	write_some(explicit, " \n\t\n", 4, 0600);
	ck_assert_int_ge(asprintf(&want, "%%1$s:7: api.token_file: %s is empty", explicit), 0);
	expect_error(text, env, want);
	want = mfree(want);
	write_some(explicit, "abc\r\nX-Evil: 1\n", 15, 0600);
	ck_assert_int_ge(asprintf(&want,
	                          "%%1$s:7: api.token_file: %s holds whitespace, control "
	                          "or non-ASCII bytes (it goes into an HTTP header)",
	                          explicit),
	                 0);
	expect_error(text, env, want);
}
END_TEST

START_TEST(test_print_redacts)
{
	_cleanup_free_ char *tok = put_mode("tok", "TOPSECRETVALUE123\n", 18, 0600);
	_cleanup_free_ char *text = NULL, *out = NULL;
	_cleanup_conf_ struct conf *c = NULL;

	ck_assert_int_ge(
	    asprintf(&text,
	             "[api]\nurl = https://api.example/\ntoken_file = %s\n"
	             "[workflow.deploy]\ncommand = /bin/deploy --fast\n"
	             "env = PLAIN=visible-value DB_PASSWORD=hunter2 aws_secret_key=zz9\n"
	             "env = GITHUB_TOKEN=ghp_abc\n",
	             tok),
	    0);
	c = load_ok(text, NULL);
	out = print_str(c);
	ck_assert_ptr_null(strstr(out, "TOPSECRETVALUE123"));
	ck_assert_ptr_null(strstr(out, "hunter2"));
	ck_assert_ptr_null(strstr(out, "zz9"));
	ck_assert_ptr_null(strstr(out, "ghp_abc"));
	ck_assert_ptr_nonnull(strstr(out, "# token: set, 17 bytes, read from "));
	ck_assert_ptr_nonnull(strstr(out, "env = PLAIN=visible-value DB_PASSWORD=(redacted) "
	                                  "aws_secret_key=(redacted) GITHUB_TOKEN=(redacted)\n"));
	ck_assert_ptr_nonnull(strstr(out, "\n[api]\nurl = https://api.example\n"));
	ck_assert_ptr_nonnull(strstr(out, "command = /bin/deploy --fast\n"));
	ck_assert_ptr_nonnull(strstr(out, "\n[workflow.deploy]\n"));
	ck_assert(conf_env_name_is_secret("my_api_key"));
	ck_assert(conf_env_name_is_secret("Credentials"));
	ck_assert(!conf_env_name_is_secret("PATH"));
}
END_TEST

/* What --check-config prints loads back into the same configuration. */
START_TEST(test_print_round_trip)
{
	_cleanup_conf_ struct conf *a =
	    load_ok("[api]\nurl = https://h:8443/base\nrequest_timeout = 1.5s\n"
	            "[worker]\nid = me\ntags = b, a a\nlease_ttl = 60s\nlease_refresh = 250ms\n"
	            "drain_timeout = 1h 30min\nmax_log_bytes = 1536K\n"
	            "[status]\nlisten = [::1]:9999\nheartbeat_url = https://hc/ping\n"
	            "[log]\nlevel = debug\nformat = json\n"
	            "[workflow.b]\ncommand = /bin/sh -c \"echo 'hi there' \\\"$X\\\"\" '' \\t\n"
	            "env = A=\"1 2\" B=\\x01 C=\nuser = 0\n[workflow.a]\ncommand = /bin/cat\n"
	            "timeout = infinity\n",
	            NULL);
	_cleanup_free_ char *out = print_str(a), *out2 = NULL;
	_cleanup_conf_ struct conf *b = load_ok(out, NULL);
	struct conf_change *ch = NULL;
	size_t n = 99;
	const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)&b->status.listen_addr;

	ck_assert_int_eq(conf_diff(a, b, &ch, &n), 0);
	ck_assert_msg(n == 0, "%zu changes, first: %s", n, n ? ch[0].description : "");
	out2 = print_str(b);
	ck_assert_str_eq(strchr(out, '['), strchr(out2, '[')); /* all but the "# read" lines */
	ck_assert_str_eq(b->workflows[0].name, "a");
	ck_assert_str_eq(b->workflows[1].argv[2], "echo 'hi there' \"$X\"");
	ck_assert_str_eq(b->workflows[1].argv[3], "");
	ck_assert_str_eq(b->workflows[1].argv[4], "\t");
	ck_assert_str_eq(b->workflows[1].env[1], "B=\x01");
	ck_assert_str_eq(b->workflows[1].env[2], "C=");
	ck_assert_str_eq(b->worker.tags[0], "a");
	ck_assert_str_eq(b->worker.tags[1], "b");
	ck_assert_ptr_null(b->worker.tags[2]);
	ck_assert_uint_eq(b->api.request_timeout, 1500 * USEC_PER_MSEC);
	ck_assert_int_eq(sin6->sin6_family, AF_INET6);
	ck_assert_int_eq(ntohs(sin6->sin6_port), 9999);
	ck_assert_int_eq(b->status.listen_addr_len, sizeof(struct sockaddr_in6));
	ck_assert_ptr_null(ch);
}
END_TEST

static char *read_src(const char *rel)
{
	const char *top = getenv("LESSEE_SRCDIR");
	_cleanup_free_ char *p = NULL;
	char *text = NULL;

	ck_assert_int_ge(asprintf(&p, "%s/%s", top ? top : ".", rel), 0);
	ck_assert_int_eq(read_file_capped(p, 1 << 20, &text, NULL), 0);
	return text;
}

/* Where "\n<prefix><name> =" stands in [section] of the example, past the "=". */
static const char *example_find(const char *example, const char *section, const char *prefix,
                                const char *name)
{
	_cleanup_free_ char *head = NULL, *line = NULL;
	const char *sec, *end, *at;

	ck_assert_int_ge(asprintf(&head, "\n[%s]\n", section), 0);
	ck_assert_int_ge(asprintf(&line, "\n%s%s =", prefix, name), 0);
	sec = strstr(example, head);
	if (!sec)
		return NULL;
	end = strstr(sec + 1, "\n[");
	at = strstr(sec, line);
	if (!at || (end && at > end))
		return NULL;
	return at + strlen(line);
}

/* The value of "#name = value" in [section] of the example, or of "name =
 * value" for a key the example sets (it must then be what loads), or NULL. */
static char *example_value(const char *example, const char *section, const char *name)
{
	const char *at = example_find(example, section, "#", name);

	if (!at)
		at = example_find(example, section, "", name);
	if (!at)
		return NULL;
	at += strspn(at, " ");
	return strndup(at, strcspn(at, "\n"));
}

/* The shipped example runs nothing (no live workflow: loading it alone says
 * so); with its commented example workflow uncommented it loads, shows every
 * key with its true default, and the reference documents every key. */
START_TEST(test_shipped_conf)
{
	const struct conf_override ov = {"--api-url", "api.url=http://127.0.0.1:8080"};
	_cleanup_free_ char *example = read_src("conf/lessee.conf");
	_cleanup_free_ char *doc = read_src("docs/configuration.md");
	_cleanup_free_ char *path = put("shipped.conf", example), *err = NULL;
	_cleanup_free_ char *used = NULL, *used_path = NULL;
	_cleanup_conf_ struct conf *c = NULL;
	char problem[CONF_PROBLEM_MAX];
	char *at;

	ck_assert_int_eq(load_full(path, NULL, &ov, 1, &c, &err), -EINVAL);
	ck_assert_msg(strstr(err, "no [workflow.NAME] section"), "%s", err);
	free(err);
	err = NULL;
	used = strdup(example);
	at = strstr(used, "\n#[workflow.echo]\n#command = /bin/cat\n");
	ck_assert_msg(at, "conf/lessee.conf has no commented [workflow.echo] example");
	memmove(at + 1, at + 2, strlen(at + 2) + 1); /* [workflow.echo] */
	at = strstr(at + 1, "\n#command");
	memmove(at + 1, at + 2, strlen(at + 2) + 1); /* command = /bin/cat */
	used_path = put("uncommented.conf", used);
	ck_assert_msg(load_full(used_path, NULL, &ov, 1, &c, &err) == 0, "%s", err);
	ck_assert_ptr_nonnull(conf_find_workflow(c, "echo"));
	ck_assert_str_eq(conf_find_workflow(c, "echo")->argv[0], "/bin/cat");
	for (size_t i = 0; i < conf_n_keys; i++) {
		const struct conf_key *k = &conf_keys[i];
		_cleanup_free_ char *v = example_value(example, k->section, k->name);
		_cleanup_free_ char *in_doc = NULL, *shown = NULL, *actual = NULL;
		struct conf scratch = {0};

		ck_assert_int_ge(asprintf(&in_doc, "`%s`", k->name), 0);
		ck_assert_msg(strstr(doc, in_doc), "docs/configuration.md lacks %s", in_doc);
		ck_assert_msg(v, "conf/lessee.conf lacks #%s in [%s]", k->name, k->section);
		if (streq(k->name, "url") || streq(k->name, "id"))
			continue; /* set by the test / random */
		ck_assert_msg(conf_value_parse(k, &scratch, v, problem) == 0, "%s: %s", k->name,
		              problem);
		shown = conf_value_format(k, &scratch, false);
		actual = conf_value_format(k, c, false);
		ck_assert_msg(streq(shown, actual), "conf/lessee.conf: %s = %s, default is %s",
		              k->name, v, actual);
		conf_value_free(k, &scratch);
	}
	for (size_t i = 0; i < conf_n_wf_keys; i++) {
		_cleanup_free_ char *in_doc = NULL, *set = NULL, *commented = NULL;

		ck_assert_int_ge(asprintf(&in_doc, "`%s`", conf_wf_keys[i].name), 0);
		ck_assert_msg(strstr(doc, in_doc), "docs/configuration.md lacks %s", in_doc);
		ck_assert_int_ge(asprintf(&set, "\n%s =", conf_wf_keys[i].name), 0);
		ck_assert_int_ge(asprintf(&commented, "\n#%s =", conf_wf_keys[i].name), 0);
		ck_assert_msg(strstr(example, set) || strstr(example, commented),
		              "conf/lessee.conf lacks %s", conf_wf_keys[i].name);
	}
}
END_TEST

static const struct conf_change *find_change(const struct conf_change *ch, size_t n,
                                             const char *prefix)
{
	for (size_t i = 0; i < n; i++)
		if (startswith(ch[i].description, prefix))
			return &ch[i];
	return NULL;
}

START_TEST(test_diff_and_retain)
{
	_cleanup_free_ char *tok_a = put_mode("a.tok", "aaa", 3, 0600);
	_cleanup_free_ char *tok_b = put_mode("b.tok", "bbb", 3, 0600);
	_cleanup_free_ char *ta = NULL, *tb = NULL, *pa = NULL, *pb = NULL, *err = NULL;
	_cleanup_conf_ struct conf *a = NULL, *b = NULL;
	struct conf_change *ch = NULL;
	size_t n = 0;
	static const struct {
		const char *prefix;
		bool live;
	} want[] = {
	    {"api.url: https://one -> https://two", false},
	    {"api.token_file: ", false},
	    {"api.token: changed", false},
	    {"worker.id: w1 -> w2", false},
	    {"worker.concurrency: 4 -> 8", true},
	    {"worker.tags: (unset) -> gpu", true},
	    {"worker.lease_refresh: 30s -> 20s", true},
	    {"worker.spool_dir: /s1 -> /s2", false},
	    {"status.listen: 127.0.0.1:9464 -> (unset)", false},
	    {"log.level: info -> debug", true},
	    {"workflow.gone: removed", true},
	    {"workflow.keep.command: /bin/a -> /bin/b \"x y\"", true},
	    {"workflow.keep.timeout: 30min -> 1min", true},
	    {"workflow.keep.env: changed (secret values not shown)", true},
	    {"workflow.new: added", true},
	};

	ck_assert_int_ge(
	    asprintf(&ta,
	             "[api]\nurl = https://one\ntoken_file = %s\n[worker]\nid = w1\n"
	             "spool_dir = /s1\n[workflow.keep]\ncommand = /bin/a\n"
	             "env = API_TOKEN=oldsecretvalue\n[workflow.gone]\ncommand = /bin/g\n",
	             tok_a),
	    0);
	ck_assert_int_ge(
	    asprintf(&tb,
	             "[api]\nurl = https://two\ntoken_file = %s\n[worker]\nid = w2\n"
	             "concurrency = 8\ntags = gpu\nlease_refresh = 20s\nspool_dir = /s2\n"
	             "[status]\nlisten =\n[log]\nlevel = debug\n"
	             "[workflow.keep]\ncommand = /bin/b \"x y\"\nenv = API_TOKEN=newsecretvalue\n"
	             "timeout = 1min\n[workflow.new]\ncommand = /bin/n\n",
	             tok_b),
	    0);
	pa = put("a.conf", ta);
	pb = put("b.conf", tb);
	ck_assert_int_eq(load_full(pa, NULL, NULL, 0, &a, &err), 0);
	ck_assert_int_eq(load_full(pb, NULL, NULL, 0, &b, &err), 0);

	ck_assert_int_eq(conf_diff(a, b, &ch, &n), 0);
	ck_assert_uint_eq(n, ELEMENTSOF(want));
	for (size_t i = 0; i < n; i++) {
		ck_assert_msg(startswith(ch[i].description, want[i].prefix), "change %zu: %s", i,
		              ch[i].description);
		ck_assert_msg(ch[i].live == want[i].live, "%s", ch[i].description);
		ck_assert_ptr_null(strstr(ch[i].description, "secretvalue"));
		ck_assert_ptr_null(strstr(ch[i].description, "bbb"));
	}
	ch = conf_changes_free(ch, n);

	/* keep what cannot change live; what remains to apply is all live */
	ck_assert_int_eq(conf_retain_restart_fields(b, a), 0);
	ck_assert_str_eq(b->api.url, "https://one");
	ck_assert_str_eq(b->api.token, "aaa");
	ck_assert_str_eq(b->worker.id, "w1");
	ck_assert_str_eq(b->worker.spool_dir, "/s1");
	ck_assert_str_eq(b->status.listen, "127.0.0.1:9464");
	ck_assert_int_eq(b->status.listen_addr_len, sizeof(struct sockaddr_in));
	ck_assert_uint_eq(b->worker.concurrency, 8);
	ck_assert_int_eq(conf_diff(a, b, &ch, &n), 0);
	for (size_t i = 0; i < n; i++)
		ck_assert_msg(ch[i].live, "%s", ch[i].description);
	ck_assert_ptr_nonnull(find_change(ch, n, "worker.concurrency: 4 -> 8"));
	ck_assert_ptr_null(find_change(ch, n, "api."));
	conf_changes_free(ch, n);

	/* nothing changed: nothing reported */
	ck_assert_int_eq(conf_diff(a, a, &ch, &n), 0);
	ck_assert_uint_eq(n, 0);
	ck_assert_ptr_null(ch);
}
END_TEST

START_TEST(test_warnings)
{
	_cleanup_free_ char *tok = put_mode("tok", "t", 1, 0600), *text = NULL, *text2 = NULL;
	_cleanup_conf_ struct conf *plain = NULL, *local = NULL, *tls = NULL;

	ck_assert_int_ge(asprintf(&text,
	                          "[api]\nurl = http://ci.example\ntoken_file = %s\n"
	                          "allow_insecure_http = yes\n"
	                          "request_timeout = 1min\n[workflow.w]\ncommand = /x\n",
	                          tok),
	                 0);
	plain = load_ok(text, NULL);
	/* request_timeout (1min) > lease_ttl - lease_refresh: no longer a warning,
	 * renewal attempts are bounded by the lease (check_conf_bounds) */
	ck_assert_uint_eq(strv_length(plain->warnings), 1);
	ck_assert_ptr_nonnull(strstr(plain->warnings[0], "unencrypted"));
	ck_assert_int_ge(asprintf(&text2,
	                          "[api]\nurl = http://localhost:8080\ntoken_file = %s\n"
	                          "[workflow.w]\ncommand = /x\n",
	                          tok),
	                 0);
	local = load_ok(text2, NULL);
	ck_assert_ptr_null(local->warnings[0]);
	tls = load_ok("[api]\nurl = https://ci.example\n[workflow.w]\ncommand = /x\n", NULL);
	ck_assert_ptr_null(tls->warnings[0]);
}
END_TEST

START_TEST(test_hostile_input)
{
	size_t big = 2 << 20;
	_cleanup_free_ char *huge = malloc(big), *path = NULL, *err = NULL, *want = NULL;
	struct conf *c = NULL;

	/* a line over 64 KiB, and a continued line over 64 KiB */
	memset(huge, 'a', big);
	memcpy(huge, "[api]\nurl = ", 12);
	huge[70000] = '\0';
	expect_error(huge, NULL, "%1$s:2: line is longer than 65536 bytes");
	for (size_t i = 12; i < 70000; i += 1000)
		memcpy(huge + i, "\\\n", 2);
	expect_error(huge, NULL, "%1$s:68: continued line is longer than 65536 bytes");

	/* a file over 1 MiB */
	for (size_t i = 0; i + 1 < big; i += 64)
		memcpy(huge + i,
		       "# filler comment to make the file large .......................\n", 64);
	path = put_mode("huge.conf", huge, big, 0644);
	ck_assert_int_eq(load_full(path, NULL, NULL, 0, &c, &err), -EINVAL);
	ck_assert_int_ge(asprintf(&want, "%s: cannot read: larger than 1048576 bytes", path), 0);
	ck_assert_str_eq(err, want);
	err = mfree(err);
	free(path);

	/* NUL bytes, control characters, invalid UTF-8 name their line */
	static const char nul[] = "[api]\n# ok\nurl = http://x\0y\n";
	path = put_mode("nul.conf", nul, sizeof(nul) - 1, 0644);
	ck_assert_int_eq(load_full(path, NULL, NULL, 0, &c, &err), -EINVAL);
	ck_assert_ptr_nonnull(strstr(err, "nul.conf:3: line contains a NUL byte"));
	err = mfree(err);
	expect_error("[api]\nurl = http://x\x1b[31m\n", NULL,
	             "%1$s:2: line contains a control "
	             "character");
	expect_error("[api]\nurl = http://\xc3\x28\n", NULL, "%1$s:2: line is not valid UTF-8");
	expect_error("[api]\nurl = http://\xed\xa0\x80\n", NULL, "%1$s:2: line is not valid UTF-8");
	expect_error("[api]\nurl = http://\xc0\xaf\n", NULL, "%1$s:2: line is not valid UTF-8");
	expect_error("[api]\nurl = http://\xf4\x90\x80\x80\n", NULL,
	             "%1$s:2: line is not valid "
	             "UTF-8");
	/* valid UTF-8 passes the text check and fails where the value's syntax says */
	expect_error("[api]\nurl = http://h\xc3\xa9t\xc3\xa9\n", NULL,
	             "%1$s:2: api.url: contains a blank, control or non-ASCII byte");
	/* CRLF line ends are fine */
	c = load_ok("[api]\r\nurl = http://localhost\r\n[workflow.w]\r\ncommand = /bin/true\r\n",
	            NULL);
	ck_assert_str_eq(c->api.url, "http://localhost");
	c = conf_free(c);
}
END_TEST

/* Random bytes and random recombinations of valid lines: never a crash, always
 * either a configuration or an error that names the file. */
/* Found by fuzz/conf_load: a command word with a \xHH escape above 0x7f
 * (not UTF-8 on its own) was printed as the raw byte, so what --check-config
 * prints was refused when loaded again ("line is not valid UTF-8"). */
START_TEST(test_write_word_bad_utf8)
{
	static const char *const words[] = {"\"\\xcc\"",         "\"a\\xcc\\xcc b\"", "\"\\xe2\\x82\"",
	                                    "\"\\xf0\\x9f\\x98\"", "\"caf\\xc3\\xa9\"", "\"\\xc3\\xa9\\xff\""};
	char problem[CONF_PROBLEM_MAX];

	for (size_t i = 0; i < ELEMENTSOF(words); i++) {
		_cleanup_free_ char *q = NULL;
		char **word = NULL, **back = NULL;
		size_t n = 0;
		FILE *f = open_memstream(&q, &n);

		ck_assert_ptr_nonnull(f);
		ck_assert_int_eq(conf_split_words(words[i], &word, problem), 0);
		conf_write_word(f, word[0]);
		ck_assert_int_eq(fclose(f), 0);
		ck_assert_msg(conf_text_problem(q, strlen(q)) == NULL, "%s printed as %s: %s", words[i],
		              q, conf_text_problem(q, strlen(q)));
		ck_assert_int_eq(conf_split_words(q, &back, problem), 0);
		ck_assert_str_eq(back[0], word[0]);
		ck_assert_ptr_null(back[1]);
		strv_free(word);
		strv_free(back);
	}
}
END_TEST

START_TEST(test_fuzz_no_crash)
{
	static const char *const pieces[] = {
	    "[api]\n",
	    "[worker]\n",
	    "[workflow.w]\n",
	    "[status]\n",
	    "[log]\n",
	    "url = http://x\n",
	    "command = /bin/x 'a b' \"c\\\"\" \\\n",
	    "env = A=1 B=\"2\"\n",
	    "concurrency = 3\n",
	    "tags = a,b c\n",
	    "lease_ttl = 90s\n",
	    "\\\n",
	    "#c\n",
	    ";c\n",
	    "=\n",
	    "[\n",
	    "]\n",
	    "\xff\xfe",
	    "\xe2\x82",
	    "\"",
	    "'",
	    "\\",
	    "\n",
	    "listen = [::1]:1\n",
	    "\0",
	};
	char buf[4096];

	for (int iter = 0; iter < 600; iter++) {
		size_t len = 0;
		_cleanup_free_ char *path = NULL, *err = NULL;
		struct conf *c = NULL;
		int r;

		while (len < sizeof(buf) - 64 && random_below(40) != 0) {
			if (iter % 3 == 0) {
				buf[len++] = (char)random_below(256);
			} else {
				const char *p = pieces[random_below(ELEMENTSOF(pieces))];
				size_t pl = p[0] ? strlen(p) : 1;

				memcpy(buf + len, p, pl);
				len += pl;
			}
		}
		path = put_mode("fuzz.conf", buf, len, 0644);
		r = load_full(path, NULL, NULL, 0, &c, &err);
		ck_assert(r == 0 || r == -EINVAL);
		if (r == 0) {
			free(print_str(c));
			conf_free(c);
		} else {
			ck_assert_ptr_nonnull(err);
			ck_assert_msg(startswith(err, path), "%s", err);
		}
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("conf");
	TCase *tc = tcase_create("conf");

	tcase_add_checked_fixture(tc, setup, teardown);
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_defaults);
	tcase_add_test(tc, test_worker_id_default_given_and_random);
	tcase_add_test(tc, test_worker_id_protocol_charset);
	tcase_add_test(tc, test_systemd_directories);
	tcase_add_test(tc, test_precedence);
	tcase_add_test(tc, test_dropin_order);
	tcase_add_test(tc, test_durations_and_sizes);
	tcase_add_test(tc, test_command_words);
	tcase_add_test(tc, test_command_in_file);
	tcase_add_test(tc, test_file_errors);
	tcase_add_test(tc, test_env_and_override_errors);
	tcase_add_test(tc, test_env_namespace);
	tcase_add_test(tc, test_missing_files);
	tcase_add_test(tc, test_token);
	tcase_add_test(tc, test_print_redacts);
	tcase_add_test(tc, test_print_round_trip);
	tcase_add_test(tc, test_shipped_conf);
	tcase_add_test(tc, test_diff_and_retain);
	tcase_add_test(tc, test_warnings);
	tcase_add_test(tc, test_hostile_input);
	tcase_add_test(tc, test_fuzz_no_crash);
	tcase_add_test(tc, test_write_word_bad_utf8);
	suite_add_tcase(s, tc);
	return tu_run(s);
}
