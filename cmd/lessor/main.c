/* lessor: the reference orchestration API server and its command-line client.
 * This file only parses options and wires lib/lessor together. */
#include <errno.h>
#include <getopt.h>
#include <arpa/inet.h>
#include <limits.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lessor/cli.h"
#include "lessor/server.h"
#include "lessor/store.h"
#include "log/log.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"
#include "util/time.h"

#define EXIT_USAGE 2
#define EXIT_CONFIG 78

static const char usage_text[] =
    "usage: lessor COMMAND [OPTIONS]\n"
    "\n"
    "The reference orchestration API for lessee, and a client for it.\n"
    "\n"
    "Commands:\n"
    "  serve                     run the API server (see lessor serve --help)\n"
    "  enqueue --workflow W      add a run\n"
    "  list                      list runs, newest first\n"
    "  show ID                   show one run, its outcome and its leases\n"
    "  log ID                    print a run's log\n"
    "  stats                     count runs by status\n"
    "  workers                   list the workers and their last contact\n"
    "  cancel ID                 cancel a pending run, or ask its worker to stop it\n"
    "  requeue ID                revoke a running run's lease and queue it again\n"
    "\n"
    "Client options (every command but serve):\n"
    "  --url URL                 server (default $LESSOR_URL or http://127.0.0.1:8080)\n"
    "  --admin-token-file FILE   the admin token (default $LESSOR_ADMIN_TOKEN_FILE)\n"
    "  --token-file FILE         deprecated name of --admin-token-file\n"
    "                            (default $LESSOR_TOKEN_FILE)\n"
    "  --json                    print the API's JSON instead of text\n"
    "\n"
    "enqueue: --workflow W [--input JSON] [--tag T]... [--max-attempts N]\n"
    "         [--timeout DURATION] [--idempotency-key K]\n"
    "list:    [--status S] [--workflow W] [--limit N]\n"
    "\n"
    "  -h, --help                this text\n"
    "  -V, --version             print the version\n"
    "\n"
    "Exit status: 0 ok, 1 failure, 2 usage error, 78 configuration error (serve).\n";

static const char serve_usage[] =
    "usage: lessor serve [OPTIONS]\n"
    "\n"
    "Serve worker protocol v1 and the admin API from a SQLite database (one server per\n"
    "database) or a PostgreSQL database (any number of servers on one database).\n"
    "\n"
    "  --listen ADDR:PORT        address to listen on (default 127.0.0.1:8080; port 0 = any)\n"
    "  --db FILE                 database (default $XDG_STATE_HOME/lessor/lessor.db, or\n"
    "                            /var/lib/lessor/lessor.db for root, or\n"
    "                            ~/.local/state/lessor/lessor.db)\n"
    "  --db postgresql://...     PostgreSQL: a libpq URI or \"host=... dbname=...\"; no\n"
    "                            password in it (use PGPASSFILE or ~/.pgpass); a pool of\n"
    "                            --threads + 1 connections\n"
    "  --admin-token-file FILE   the admin token: the admin API (enqueue, cancel,\n"
    "                            requeue, runs, logs, stats, workers, faults) and only that\n"
    "  --worker-tokens-file FILE worker tokens, one 'NAME TOKEN' a line ('#' comments);\n"
    "                            the worker endpoints, each token only for the runs it\n"
    "                            claimed; NAME is the worker's identity.  SIGHUP rereads\n"
    "                            both files (a token removed is revoked; a file that does\n"
    "                            not load keeps the previous tokens)\n"
    "  --token-file FILE         deprecated: one token for everything, admin and worker\n"
    "                            (default: no authentication at all)\n"
    "  --max-log-bytes SIZE      per-run log cap (default 64M)\n"
    "  --max-body-bytes SIZE     request body cap (default 4M)\n"
    "  --synchronous full|normal full: every answered write survives power loss (default);\n"
    "                            normal: it survives a crash of lessor, not of the machine\n"
    "  --group-commit yes|no     yes: writes that arrive together share one transaction\n"
    "                            and one fsync (default); no: one each (SQLite)\n"
    "  --threads N               HTTP threads (default 4)\n"
    "  --retry-base DURATION     first retry delay of a retryable failure (default 5s)\n"
    "  --retry-max DURATION      retry delay cap (default 5min)\n"
    "  --max-lease-expiries N    fail a run after N expired leases (default 3)\n"
    "  --tick DURATION           reaper period (default 100ms)\n"
    "  --enable-faults           serve /v1/admin/faults (fault injection for tests)\n"
    "  --ready-fd N              write \"ADDR:PORT\\n\" to fd N and close it once serving\n"
    "  --log-level LEVEL         debug, info, notice, warning, error (default info)\n"
    "  --log-format FORMAT       auto, logfmt, json, journal (default auto)\n"
    "  -h, --help                this text\n";

static int usage_error(const char *fmt, const char *arg)
{
	fprintf(stderr, "lessor: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nTry 'lessor --help'.\n");
	return EXIT_USAGE;
}

static int parse_uint(const char *s, unsigned long min, unsigned long max, unsigned long *ret)
{
	char *end;
	unsigned long v;

	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || v < min || v > max)
		return -ERANGE;
	*ret = v;
	return 0;
}

/* "65536", "64K", "64M", "1G", "64MiB" (binary units). */
static int parse_size(const char *s, uint64_t *ret)
{
	static const struct {
		const char *suffix;
		unsigned shift;
	} units[] = {{"", 0},     {"K", 10}, {"KiB", 10}, {"M", 20},
	             {"MiB", 20}, {"G", 30}, {"GiB", 30}};
	char *end;
	unsigned long long v;

	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -ERANGE;
	for (size_t i = 0; i < ELEMENTSOF(units); i++)
		if (streq(end, units[i].suffix)) {
			if (v > (UINT64_MAX >> units[i].shift))
				return -ERANGE;
			*ret = (uint64_t)v << units[i].shift;
			return 0;
		}
	return -EINVAL;
}

/* The token from a file, trimmed; 0, or an error already reported. */
static int read_token(const char *path, char **ret)
{
	_cleanup_free_ char *raw = NULL;
	char *t;
	int r = read_file_capped(path, 4096, &raw, NULL);

	if (r < 0) {
		fprintf(stderr, "lessor: cannot read token file %s: %s\n", path,
		        r == -EINVAL ? "not a regular file" : strerror(-r));
		return r;
	}
	t = str_trim(raw);
	if (!*t || strpbrk(t, " \t\r\n")) {
		fprintf(stderr, "lessor: token file %s must hold one non-empty token\n", path);
		return -EINVAL;
	}
	*ret = strdup(t);
	explicit_bzero(raw, strlen(raw));
	return *ret ? 0 : -ENOMEM;
}

/* ---- serve ---- */

static char *default_db_path(void)
{
	const char *xdg = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
	char *p = NULL;

	if (xdg && *xdg == '/')
		return asprintf(&p, "%s/lessor/lessor.db", xdg) < 0 ? NULL : p;
	if (geteuid() == 0 || !home || *home != '/')
		return strdup("/var/lib/lessor/lessor.db");
	return asprintf(&p, "%s/.local/state/lessor/lessor.db", home) < 0 ? NULL : p;
}

static int ensure_parent_dir(const char *path)
{
	_cleanup_free_ char *dir = strdup(path);
	char *slash = dir ? strrchr(dir, '/') : NULL;

	if (!dir)
		return -ENOMEM;
	if (!slash || slash == dir)
		return 0;
	*slash = '\0';
	return mkdir_p(dir, 0700);
}

struct serve_opts {
	struct lessor_server_config cfg;
	struct lessor_token_files tokens;
	char *db;
	int ready_fd;
	enum log_format log_format;
	int log_level;
};

enum {
	OPT_LISTEN = 0x100,
	OPT_DB,
	OPT_TOKEN_FILE,
	OPT_ADMIN_TOKEN_FILE,
	OPT_WORKER_TOKENS_FILE,
	OPT_MAX_LOG,
	OPT_MAX_BODY,
	OPT_SYNC,
	OPT_THREADS,
	OPT_GROUP_COMMIT,
	OPT_RETRY_BASE,
	OPT_RETRY_MAX,
	OPT_MAX_EXPIRIES,
	OPT_TICK,
	OPT_FAULTS,
	OPT_READY_FD,
	OPT_LOG_LEVEL,
	OPT_LOG_FORMAT,
	OPT_URL,
	OPT_JSON,
	OPT_WORKFLOW,
	OPT_INPUT,
	OPT_TAG,
	OPT_MAX_ATTEMPTS,
	OPT_TIMEOUT,
	OPT_IDEMPOTENCY,
	OPT_STATUS,
	OPT_LIMIT,
};

static int serve_duration(const char *arg, usec_t *ret)
{
	return time_parse_duration(arg, ret) < 0 || *ret == USEC_INFINITY ? -EINVAL : 0;
}

/* --listen: HOST:PORT, [IPv6]:PORT; HOST an IPv4 address or a name (the
 * server resolves it), PORT 0..65535 in decimal. */
static int check_listen(const char *s)
{
	const char *colon = strrchr(s, ':');
	unsigned long port;
	struct in6_addr a6;
	char host[64];
	size_t hl;

	if (!colon || parse_uint(colon + 1, 0, 65535, &port) < 0 || strlen(colon + 1) > 5)
		return -EINVAL;
	hl = (size_t)(colon - s);
	if (hl == 0 || hl >= sizeof(host))
		return -EINVAL;
	if (s[0] == '[') {
		if (hl < 3 || s[hl - 1] != ']')
			return -EINVAL;
		snprintf(host, sizeof(host), "%.*s", (int)(hl - 2), s + 1);
		return inet_pton(AF_INET6, host, &a6) == 1 ? 0 : -EINVAL;
	}
	snprintf(host, sizeof(host), "%.*s", (int)hl, s);
	/* an IPv4 address or a DNS name: no ':' (IPv6 needs brackets), no blank */
	return host[strspn(host,
	                   "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_")]
	           ? -EINVAL
	           : 0;
}

/* The listen address resolves: 0, or 1 after saying why (before the
 * database is touched, so a typo leaves nothing behind). */
static int resolve_listen(const char *s)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC,
	                         .ai_socktype = SOCK_STREAM,
	                         .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
	const char *colon = strrchr(s, ':');
	struct addrinfo *ai = NULL;
	char host[64];
	int r;

	snprintf(host, sizeof(host), "%.*s", (int)(colon - s), s);
	if (host[0] == '[') {
		memmove(host, host + 1, strlen(host));
		host[strlen(host) - 1] = '\0';
	}
	r = getaddrinfo(host, colon + 1, &hints, &ai);
	if (r != 0) {
		log_error("cannot listen on %s: %s", s, gai_strerror(r));
		return 1;
	}
	freeaddrinfo(ai);
	return 0;
}

/* One option of `serve`; 0, or an exit code. */
static int serve_option(struct serve_opts *o, int c, const char *arg)
{
	unsigned long n;
	uint64_t size;

	switch (c) {
	case OPT_LISTEN:
		if (check_listen(arg) < 0)
			return usage_error(
			    "bad --listen '%s' (ADDR:PORT, [IPv6]:PORT or NAME:PORT, "
			    "port 0..65535)",
			    arg);
		o->cfg.listen = arg;
		return 0;
	case OPT_DB:
		free(o->db);
		o->db = strdup(arg);
		return o->db ? 0 : 1;
	case OPT_TOKEN_FILE:
		o->tokens.legacy = arg;
		return 0;
	case OPT_ADMIN_TOKEN_FILE:
		o->tokens.admin = arg;
		return 0;
	case OPT_WORKER_TOKENS_FILE:
		o->tokens.workers = arg;
		return 0;
	case OPT_MAX_LOG:
		if (parse_size(arg, &size) < 0 || size == 0)
			return usage_error("bad --max-log-bytes '%s'", arg);
		o->cfg.max_log_bytes = size;
		return 0;
	case OPT_MAX_BODY:
		if (parse_size(arg, &size) < 0 || size < 1024 || size > (1u << 30))
			return usage_error("bad --max-body-bytes '%s' (1K..1G)", arg);
		o->cfg.max_body = (size_t)size;
		return 0;
	case OPT_SYNC:
		if (!streq(arg, "full") && !streq(arg, "normal"))
			return usage_error("--synchronous must be full or normal, not '%s'", arg);
		o->cfg.sync_full = streq(arg, "full");
		return 0;
	case OPT_GROUP_COMMIT:
		if (!streq(arg, "yes") && !streq(arg, "no"))
			return usage_error("--group-commit must be yes or no, not '%s'", arg);
		o->cfg.no_group_commit = streq(arg, "no");
		return 0;
	case OPT_THREADS:
		if (parse_uint(arg, 1, 64, &n) < 0)
			return usage_error("bad --threads '%s' (1..64)", arg);
		o->cfg.threads = (unsigned)n;
		return 0;
	case OPT_RETRY_BASE:
		return serve_duration(arg, &o->cfg.retry_base) < 0 || o->cfg.retry_base == 0
		           ? usage_error("bad --retry-base '%s'", arg)
		           : 0;
	case OPT_RETRY_MAX:
		return serve_duration(arg, &o->cfg.retry_max) < 0
		           ? usage_error("bad --retry-max '%s'", arg)
		           : 0;
	case OPT_MAX_EXPIRIES:
		if (parse_uint(arg, 1, 1000, &n) < 0)
			return usage_error("bad --max-lease-expiries '%s' (1..1000)", arg);
		o->cfg.max_lease_expiries = (unsigned)n;
		return 0;
	case OPT_TICK:
		return serve_duration(arg, &o->cfg.tick) < 0 || o->cfg.tick < USEC_PER_MSEC ||
		               o->cfg.tick > USEC_PER_HOUR
		           ? usage_error("bad --tick '%s' (1ms..1h)", arg)
		           : 0;
	case OPT_FAULTS:
		o->cfg.enable_faults = true;
		return 0;
	case OPT_READY_FD:
		if (parse_uint(arg, 3, INT_MAX, &n) < 0)
			return usage_error("bad --ready-fd '%s'", arg);
		o->ready_fd = (int)n;
		return 0;
	case OPT_LOG_LEVEL:
		return log_parse_level(arg, &o->log_level) < 0
		           ? usage_error("unknown --log-level '%s'", arg)
		           : 0;
	case OPT_LOG_FORMAT:
		return log_parse_format(arg, &o->log_format) < 0
		           ? usage_error("unknown --log-format '%s'", arg)
		           : 0;
	default:
		return usage_error("%s", "unknown option");
	}
}

static int serve_parse(int argc, char **argv, struct serve_opts *o)
{
	static const struct option opts[] = {
	    {"listen", required_argument, NULL, OPT_LISTEN},
	    {"db", required_argument, NULL, OPT_DB},
	    {"token-file", required_argument, NULL, OPT_TOKEN_FILE},
	    {"admin-token-file", required_argument, NULL, OPT_ADMIN_TOKEN_FILE},
	    {"worker-tokens-file", required_argument, NULL, OPT_WORKER_TOKENS_FILE},
	    {"max-log-bytes", required_argument, NULL, OPT_MAX_LOG},
	    {"max-body-bytes", required_argument, NULL, OPT_MAX_BODY},
	    {"synchronous", required_argument, NULL, OPT_SYNC},
	    {"threads", required_argument, NULL, OPT_THREADS},
	    {"group-commit", required_argument, NULL, OPT_GROUP_COMMIT},
	    {"retry-base", required_argument, NULL, OPT_RETRY_BASE},
	    {"retry-max", required_argument, NULL, OPT_RETRY_MAX},
	    {"max-lease-expiries", required_argument, NULL, OPT_MAX_EXPIRIES},
	    {"tick", required_argument, NULL, OPT_TICK},
	    {"enable-faults", no_argument, NULL, OPT_FAULTS},
	    {"ready-fd", required_argument, NULL, OPT_READY_FD},
	    {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
	    {"log-format", required_argument, NULL, OPT_LOG_FORMAT},
	    {"help", no_argument, NULL, 'h'},
	    {},
	};
	int c, r;

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) >= 0) {
		if (c == 'h') {
			fputs(serve_usage, stdout);
			return -1;
		}
		if (c == '?')
			return EXIT_USAGE;
		r = serve_option(o, c, optarg);
		if (r != 0)
			return r;
	}
	if (optind < argc)
		return usage_error("unexpected argument '%s'", argv[optind]);
	return 0;
}

static void announce(const struct serve_opts *o, const char *address)
{
	log_info("listening on %s", address);
	if (o->ready_fd >= 0) {
		char line[128];
		int n = snprintf(line, sizeof(line), "%s\n", address);

		if (write_all(o->ready_fd, line, (size_t)n) < 0)
			log_warning("cannot write to --ready-fd %d: %m, ignoring", o->ready_fd);
		close(o->ready_fd);
	}
}

static int load_tokens(const struct lessor_token_files *f, lessor_tokens **ret)
{
	char err[640] = "";
	int r = lessor_tokens_load(f, ret, err, sizeof(err));

	if (r < 0)
		log_error("%s", err);
	return r;
}

static void warn_tokens(const struct serve_opts *o, const lessor_tokens *t, const char *address)
{
	if (!lessor_tokens_required(t))
		log_warning("no token files: ANYONE who can connect to %s may claim, complete "
		            "and enqueue runs; use --admin-token-file and --worker-tokens-file "
		            "outside a test machine",
		            address);
	else if (lessor_tokens_legacy(t))
		log_warning("--token-file is deprecated: its one token is the admin token and "
		            "every worker's at once, so any worker may enqueue, cancel and read "
		            "every run; use --admin-token-file and --worker-tokens-file");
	else if (lessor_tokens_n_workers(t) == 0)
		log_warning("no worker tokens: every worker endpoint answers 401");
}

/* SIGHUP: the token files again; a set that does not load changes nothing. */
static void reload_tokens(const struct serve_opts *o, lessor_server *server)
{
	lessor_tokens *t = NULL;

	if (!o->tokens.admin && !o->tokens.workers && !o->tokens.legacy) {
		log_info("SIGHUP: no token files, nothing to reload");
		return;
	}
	if (load_tokens(&o->tokens, &t) < 0) {
		log_error("SIGHUP: keeping the previous tokens");
		return;
	}
	log_info("SIGHUP: reloaded the tokens: %zu worker tokens", lessor_tokens_n_workers(t));
	warn_tokens(o, t, lessor_server_address(server));
	lessor_server_set_tokens(server, t);
}

static int wait_for_stop(const struct serve_opts *o, lessor_server *server, const sigset_t *set)
{
	int sig = 0;

	for (;;) {
		if (sigwait(set, &sig) != 0)
			continue;
		if (sig == SIGHUP) {
			reload_tokens(o, server);
			continue;
		}
		return sig;
	}
}

static int serve_run(struct serve_opts *o)
{
	lessor_tokens *tokens = NULL;
	lessor_server *server = NULL;
	sigset_t set;
	int r, sig;

	if (resolve_listen(o->cfg.listen) != 0)
		return 1;
	if (load_tokens(&o->tokens, &tokens) < 0)
		return EXIT_CONFIG;
	if (!o->db && !(o->db = default_db_path())) {
		lessor_tokens_free(tokens);
		return 1;
	}
	r = lessor_store_target_is_pg(o->db) ? 0 : ensure_parent_dir(o->db);
	if (r < 0) {
		log_error("cannot create the directory of %s: %s", o->db, strerror(-r));
		lessor_tokens_free(tokens);
		return EXIT_CONFIG;
	}
	o->cfg.db_path = o->db;
	o->cfg.tokens = tokens;
	/* blocked before any thread starts, so all of them inherit the mask */
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	r = lessor_server_start(&o->cfg, &server); /* takes tokens */
	if (r < 0)
		return 1;
	warn_tokens(o, tokens, lessor_server_address(server));
	announce(o, lessor_server_address(server));
	sig = wait_for_stop(o, server, &set);
	log_info("%s: draining and stopping", strsignal(sig));
	lessor_server_stop(server);
	log_info("stopped");
	return 0;
}

static int cmd_serve(int argc, char **argv)
{
	struct serve_opts o = {.cfg = LESSOR_SERVER_CONFIG_DEFAULTS,
	                       .ready_fd = -1,
	                       .log_format = LOG_FORMAT_AUTO,
	                       .log_level = LOG_INFO};
	int r = serve_parse(argc, argv, &o);

	if (r == 0) {
		log_setup("lessor", o.log_format, o.log_level);
		r = serve_run(&o);
	} else if (r < 0)
		r = 0; /* --help */
	free(o.db);
	return r;
}

/* ---- client commands ---- */

#define CLIENT_OPTIONS                                                                             \
	{"url", required_argument, NULL, OPT_URL},                                                 \
	    {"token-file", required_argument, NULL, OPT_TOKEN_FILE},                               \
	    {"admin-token-file", required_argument, NULL, OPT_ADMIN_TOKEN_FILE},                   \
	    {"json", no_argument, NULL, OPT_JSON},                                                 \
	{                                                                                          \
		"help", no_argument, NULL, 'h'                                                     \
	}

struct client_opts {
	struct lessor_cli cli;
	const char *token_file;
	char *token;
	struct lessor_cli_enqueue enq;
	const char *status;
	unsigned long limit;
};

static int client_option(struct client_opts *o, int c, const char *arg)
{
	unsigned long n;
	usec_t u;

	switch (c) {
	case OPT_URL:
		o->cli.url = arg;
		return 0;
	case OPT_TOKEN_FILE:
	case OPT_ADMIN_TOKEN_FILE:
		o->token_file = arg;
		return 0;
	case OPT_JSON:
		o->cli.json = true;
		return 0;
	case OPT_WORKFLOW:
		o->enq.workflow = arg;
		return 0;
	case OPT_INPUT:
		o->enq.input_json = arg;
		return 0;
	case OPT_TAG:
		return strv_extend(&o->enq.tags, arg) < 0 ? 1 : 0;
	case OPT_MAX_ATTEMPTS:
		if (parse_uint(arg, 1, 100, &n) < 0)
			return usage_error("bad --max-attempts '%s' (1..100)", arg);
		o->enq.max_attempts = (unsigned)n;
		return 0;
	case OPT_TIMEOUT:
		if (time_parse_duration(arg, &u) < 0 || u < USEC_PER_SEC || u % USEC_PER_SEC ||
		    u > 7 * 24 * USEC_PER_HOUR)
			return usage_error("bad --timeout '%s' (whole seconds, 1s..7d)", arg);
		o->enq.timeout_s = (unsigned)(u / USEC_PER_SEC);
		return 0;
	case OPT_IDEMPOTENCY:
		o->enq.idempotency_key = arg;
		return 0;
	case OPT_STATUS:
		o->status = arg;
		return 0;
	case OPT_LIMIT:
		return parse_uint(arg, 1, 1000, &o->limit) < 0
		           ? usage_error("bad --limit '%s' (1..1000)", arg)
		           : 0;
	default:
		return EXIT_USAGE;
	}
}

static int client_parse(int argc, char **argv, const struct option *opts, struct client_opts *o)
{
	int c, r;

	while ((c = getopt_long(argc, argv, "h", opts, NULL)) >= 0) {
		if (c == 'h') {
			fputs(usage_text, stdout);
			return -1;
		}
		if (c == '?')
			return EXIT_USAGE;
		r = client_option(o, c, optarg);
		if (r != 0)
			return r;
	}
	if (o->token_file && read_token(o->token_file, &o->token) < 0)
		return 1;
	o->cli.token = o->token;
	return 0;
}

/* Parses options, then runs fn with the single positional argument
 * (want_arg) or none. */
static int client_cmd(int argc, char **argv, const struct option *opts, bool want_arg,
                      int (*fn)(struct client_opts *o, const char *arg))
{
	const char *env_token = getenv("LESSOR_ADMIN_TOKEN_FILE");
	struct client_opts o = {.cli = {.url = getenv("LESSOR_URL"), .out = stdout, .err = stderr},
	                        .token_file = env_token && *env_token ? env_token : NULL};
	int r;

	if (!o.token_file) {
		env_token = getenv("LESSOR_TOKEN_FILE"); /* deprecated */
		o.token_file = env_token && *env_token ? env_token : NULL;
	}
	if (!o.cli.url || !*o.cli.url)
		o.cli.url = "http://127.0.0.1:8080";
	r = client_parse(argc, argv, opts, &o);
	if (r == 0 && argc - optind != (want_arg ? 1 : 0))
		r = usage_error("%s", want_arg ? "expected one run id" : "unexpected argument");
	if (r == 0)
		r = fn(&o, want_arg ? argv[optind] : NULL);
	else if (r < 0)
		r = 0;
	strv_free(o.enq.tags);
	if (o.token)
		explicit_bzero(o.token, strlen(o.token));
	free(o.token);
	return r;
}

static int do_enqueue(struct client_opts *o, const char *arg)
{
	if (!o->enq.workflow)
		return usage_error("%s", "enqueue needs --workflow");
	return lessor_cli_enqueue(&o->cli, &o->enq);
}

static int do_list(struct client_opts *o, const char *arg)
{
	return lessor_cli_list(&o->cli, o->status, o->enq.workflow, (unsigned)o->limit);
}

static int do_show(struct client_opts *o, const char *arg)
{
	return lessor_cli_show(&o->cli, arg);
}

static int do_log(struct client_opts *o, const char *arg)
{
	return lessor_cli_log(&o->cli, arg);
}

static int do_stats(struct client_opts *o, const char *arg)
{
	return lessor_cli_stats(&o->cli);
}

static int do_workers(struct client_opts *o, const char *arg)
{
	return lessor_cli_workers(&o->cli);
}

static int do_cancel(struct client_opts *o, const char *arg)
{
	return lessor_cli_cancel(&o->cli, arg);
}

static int do_requeue(struct client_opts *o, const char *arg)
{
	return lessor_cli_requeue(&o->cli, arg);
}

static const struct option plain_opts[] = {CLIENT_OPTIONS, {}};
static const struct option enqueue_opts[] = {
    CLIENT_OPTIONS,
    {"workflow", required_argument, NULL, OPT_WORKFLOW},
    {"input", required_argument, NULL, OPT_INPUT},
    {"tag", required_argument, NULL, OPT_TAG},
    {"max-attempts", required_argument, NULL, OPT_MAX_ATTEMPTS},
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"idempotency-key", required_argument, NULL, OPT_IDEMPOTENCY},
    {},
};
static const struct option list_opts[] = {
    CLIENT_OPTIONS,
    {"status", required_argument, NULL, OPT_STATUS},
    {"workflow", required_argument, NULL, OPT_WORKFLOW},
    {"limit", required_argument, NULL, OPT_LIMIT},
    {},
};

static const struct {
	const char *name;
	const struct option *opts;
	bool want_arg;
	int (*fn)(struct client_opts *o, const char *arg);
} commands[] = {
    {"enqueue", enqueue_opts, false, do_enqueue}, {"list", list_opts, false, do_list},
    {"show", plain_opts, true, do_show},          {"log", plain_opts, true, do_log},
    {"stats", plain_opts, false, do_stats},       {"workers", plain_opts, false, do_workers},
    {"cancel", plain_opts, true, do_cancel},      {"requeue", plain_opts, true, do_requeue},
};

int main(int argc, char **argv)
{
	const char *cmd = argc > 1 ? argv[1] : NULL;

	if (!cmd)
		return usage_error("%s", "missing command");
	if (streq(cmd, "--version") || streq(cmd, "-V")) {
		printf("lessor %s\n", LESSEE_VERSION);
		return 0;
	}
	if (streq(cmd, "--help") || streq(cmd, "-h")) {
		fputs(usage_text, stdout);
		return 0;
	}
	if (streq(cmd, "serve"))
		return cmd_serve(argc - 1, argv + 1);
	log_setup("lessor", LOG_FORMAT_LOGFMT, LOG_WARNING);
	for (size_t i = 0; i < ELEMENTSOF(commands); i++)
		if (streq(cmd, commands[i].name))
			return client_cmd(argc - 1, argv + 1, commands[i].opts,
			                  commands[i].want_arg, commands[i].fn);
	return usage_error("unknown command '%s'", cmd);
}
