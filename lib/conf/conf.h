/* The daemon's configuration: one validated struct built from, lowest first,
 *   built-in defaults < the main file < FILE.d/ *.conf (lexical order)
 *   < environment LESSEE_<SECTION>_<KEY> < overrides ("section.key=value").
 * The reference for every key is docs/configuration.md.
 *
 * A struct conf is immutable once loaded and read directly by every module.
 * SIGHUP: load a fresh one, conf_diff() old against new, log the changes,
 * conf_retain_restart_fields() and switch to the new one. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "log/log.h"
#include "util/macro.h"
#include "util/time.h"

#define CONF_DEFAULT_PATH "/etc/lessee/lessee.conf"

struct conf_api {
	char *url;              /* http(s)://host[:port][/prefix], no trailing '/' */
	char *token_file;       /* as configured; NULL = unset */
	char *token;            /* read at load, trimmed; NULL = no auth.  Never print it */
	char *token_path;       /* where the token was read from (token_file or credential) */
	char *ca_file;          /* NULL = system store only */
	usec_t request_timeout; /* per request; a long poll adds worker.long_poll */

	/* Mutual TLS: PEM certificate and its unencrypted key, both or neither
	 * (checked at load, https:// only); NULL = none. */
	char *client_cert;
	char *client_key;
	bool allow_insecure_http; /* accept plain http:// to a host that is not loopback */

	/* The driver (lib/proto/driver.h): "native" (protocol v1), "conductor" or
	 * "camunda7"; never NULL once loaded. */
	char *protocol;
	/* conductor: optional key auth (POST /api/token), the secret read at load
	 * from key_secret_file (never print it); the task domain.  NULL = unset. */
	char *key_id;
	char *key_secret_file;
	char *key_secret;
	char *domain;
	/* camunda7: optional HTTP basic auth, the password read at load from
	 * password_file (never print it); NULL = unset.  The bearer token
	 * (token_file) is the other way, never both. */
	char *user;
	char *password_file;
	char *password;
};

struct conf_worker {
	char *id; /* configured, or "<hostname>-<8 hex>" */
	unsigned concurrency;
	unsigned max_reporting; /* runs reporting after their child; 0 = 2 x concurrency */
	unsigned prefetch;      /* runs claimed ahead of a free slot, waiting for one */
	usec_t prefetch_hold;   /* how long such a run may wait before it is given back */
	char **tags;            /* sorted, unique, never NULL (may be empty) */
	usec_t lease_ttl;       /* whole seconds */
	usec_t lease_refresh;   /* <= lease_ttl / 2 */
	usec_t long_poll;       /* whole seconds, 0 = no long poll */
	usec_t poll_interval;
	usec_t run_timeout; /* USEC_INFINITY = none */
	usec_t max_timeout; /* caps every run's timeout, the API's too; USEC_INFINITY = none */
	usec_t kill_grace;
	usec_t drain_timeout;              /* USEC_INFINITY = wait for every run */
	unsigned max_consecutive_failures; /* 0 = circuit breaker off */
	usec_t failure_cooldown;
	usec_t failure_cooldown_max;
	uint64_t max_log_bytes;    /* per run, default of every workflow */
	uint64_t max_output_bytes; /* the run's result file */
	uint64_t max_input_bytes;  /* a run's input in a claim answer; caps the answer */
	char *spool_dir;
	char *run_dir;
	/* runs of workflows without user= run as this user; NULL = as lessee's own */
	char *run_user;
	uid_t run_uid; /* resolved at load when run_user is set */
	gid_t run_gid;
};

/* The reporting queue's bound: runs whose child is gone and whose log, result
 * or release the API has not taken yet; while it is full nothing is claimed. */
static inline unsigned conf_max_reporting(const struct conf_worker *w)
{
	return w->max_reporting ? w->max_reporting : 2 * w->concurrency;
}

struct conf_status {
	char *listen; /* "addr:port"; NULL = no status endpoint */
	struct sockaddr_storage listen_addr;
	socklen_t listen_addr_len; /* 0 when listen is NULL */
	char *heartbeat_url;       /* NULL = none */
	usec_t heartbeat_interval;
};

struct conf_log {
	int level; /* LOG_ERR .. LOG_DEBUG */
	enum log_format format;
};

struct conf_workflow {
	char *name;
	char **argv;    /* argv[0] is an absolute path; no shell, no expansion */
	usec_t timeout; /* effective: the workflow's own, else worker.run_timeout */
	char **env;     /* "NAME=value", names unique (last assignment wins), never NULL */
	char *user;     /* effective: own, else worker.run_user; NULL = lessee's own user */
	uid_t uid;      /* resolved at load when user is set */
	gid_t gid;
	char *working_directory; /* NULL = the run's fresh directory under run_dir */
	uint64_t max_log_bytes;  /* effective: own, else worker.max_log_bytes */
	usec_t max_timeout;   /* effective: own, else worker.max_timeout (USEC_INFINITY = none) */
	unsigned concurrency; /* its runs at once on this worker, 0 = only worker.concurrency */
	/* conductor: the task type polled for this workflow; effective: own, else
	 * the workflow's name */
	char *task_type;
	/* exit codes that fail the run for good (conductor: FAILED_WITH_TERMINAL_ERROR) */
	int *terminal_exit_codes;
	size_t n_terminal_exit_codes;
	/* camunda7: the topic fetched for this workflow (effective: own, else the
	 * workflow's name); the variables fetched (sorted, unique, never NULL;
	 * empty = all); the retries a task gets when the engine has none yet; the
	 * base and cap of retryTimeout, doubling per failed attempt; the result's
	 * keys as local variables instead of process variables. */
	char *topic;
	char **variables;
	unsigned retries;
	usec_t retry_backoff;
	usec_t retry_backoff_max;
	bool local_variables;
	/* lib/worker's cache, made at the workflow's first spawn: env over the
	 * daemon's own allowed variables (exec_env_build), freed with the conf */
	char **spawn_env;
};

struct conf {
	struct conf_api api;
	struct conf_worker worker;
	struct conf_status status;
	struct conf_log log;
	struct conf_workflow *workflows; /* sorted by name */
	size_t n_workflows;
	char **sources;  /* files read, in order (for --check-config), never NULL */
	char **warnings; /* non-fatal findings to log once at start, never NULL */
};

/* One override from the command line.  cmd/lessee maps its flags to these:
 * {"--concurrency", "worker.concurrency=8"}, {"--set", "workflow.x.timeout=5min"}. */
struct conf_override {
	const char *origin;  /* named in errors; NULL = "--set" */
	const char *setting; /* "section.key=value"; section may be "workflow.NAME" */
};

struct conf_source {
	/* NULL = CONF_DEFAULT_PATH, which may be missing when the environment or an
	 * override sets api.url.  An explicit path must exist. */
	const char *path;
	/* environ-style; read for LESSEE_{API,WORKER,STATUS,LOG}_*, CREDENTIALS_DIRECTORY,
	 * STATE_DIRECTORY, CACHE_DIRECTORY, RUNTIME_DIRECTORY.  NULL = empty: cmd/lessee
	 * passes environ. */
	char *const *env;
	const struct conf_override *overrides;
	size_t n_overrides;
	/* worker.id when none is configured; NULL = "<hostname>-<8 random hex>".
	 * On reload pass the running id so an unset id stays the same. */
	const char *default_worker_id;
	/* Also check what the first run would trip over: each workflow's command is an
	 * executable regular file, its working_directory a directory.  cmd/lessee sets
	 * it (--check-config, start, reload); tests of parsing alone leave it off. */
	bool check_files;
};

/* Load and validate.  0 on success.  -EINVAL for any configuration problem, with
 * *ret_error = every problem found, one a line ("\n" between them, at most 64
 * and then a count), each "origin: section.key: what is wrong", origin being
 * "path:line", the environment variable, or the override's flag (cmd/lessee
 * exits 78).  Non-fatal findings go to conf->warnings.
 * Other -errno (-ENOMEM) may leave *ret_error NULL.  ret_error may be NULL. */
int conf_load(const struct conf_source *src, struct conf **ret, char **ret_error);
struct conf *conf_free(struct conf *c);
DEFINE_FREE_FUNC(struct conf, conf_free)
#define _cleanup_conf_ _cleanup_(conf_freep)

/* The effective configuration as INI that conf_load accepts again; the token is
 * shown only as a comment with its length, workflow env values whose name looks
 * secret (TOKEN SECRET PASSWORD PASSWD KEY CREDENTIAL) as "(redacted)". */
int conf_print(const struct conf *c, FILE *f);

const struct conf_workflow *conf_find_workflow(const struct conf *c, const char *name);

/* A lease of ttl is held locally until ttl minus this margin after it was
 * granted (max(ttl/10, min(1 s, ttl/2))): the daemon kills the run that long
 * before the server's lease ends. */
usec_t conf_lease_margin(usec_t ttl);
/* What must be left of the local lease once a renewal is due: room for two
 * renewal attempts of at least half a second each (docs/configuration.md). */
#define CONF_RENEW_WINDOW_MIN (1 * USEC_PER_SEC)

/* Is this variable name one whose value must never be shown? */
bool conf_env_name_is_secret(const char *name);

struct conf_change {
	char *description; /* "worker.concurrency: 4 -> 8"; secrets never shown */
	bool live;         /* applies without a restart (to work started afterwards) */
};

/* What differs between a running and a freshly loaded configuration, in key order.
 * *ret is NULL and *ret_n 0 when nothing changed. */
int conf_diff(const struct conf *old, const struct conf *new, struct conf_change **ret,
              size_t *ret_n);
struct conf_change *conf_changes_free(struct conf_change *c, size_t n);

/* Copy every restart-only field (api.url, the token, worker.id, spool_dir, ...)
 * from the running configuration into the new one, so the daemon can switch to
 * `next` at once and keep running with what it cannot change live. */
int conf_retain_restart_fields(struct conf *next, const struct conf *cur);
