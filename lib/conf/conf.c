/* Loading: defaults < main file < drop-ins < environment < overrides, then the
 * checks that involve more than one key.  Every assignment remembers where it
 * came from, so each error names path:line, the variable or the flag. */
#include "conf/conf.h"

#include <arpa/inet.h>
#include <assert.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <linux/capability.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "conf/conf-int.h"
#include "proto/v1.h"
#include "util/buf.h"
#include "util/fileio.h"
#include "util/random.h"
#include "util/strutil.h"

#define FILE_MAX (1024 * 1024)
#define LINE_MAX_BYTES (64 * 1024)
#define DROPINS_MAX 256
/* every configured workflow may be named in one claim */
#define WORKFLOWS_MAX V1_CLAIM_WORKFLOWS_MAX
#define TOKEN_FILE_MAX (16 * 1024)
#define ERRORS_MAX 64 /* reported at once; the rest are counted */

#define MS USEC_PER_MSEC
#define SEC USEC_PER_SEC
#define HOUR USEC_PER_HOUR
#define DAY (24 * USEC_PER_HOUR)
#define KIB 1024ULL
#define MIB (1024ULL * KIB)
#define TIB (1024ULL * 1024 * MIB)
#define C(f) offsetof(struct conf, f)
#define W(f) offsetof(struct conf_workflow, f)
#define LIVE KEY_LIVE
#define INF KEY_INFINITY
#define WHOLE KEY_WHOLE_SECONDS

/* Print order, diff order, and the reference in docs/configuration.md. */
const struct conf_key conf_keys[] = {
    {"api", "url", CONF_URL, C(api.url), 0, 0, 0, NULL},
    {"api", "protocol", CONF_PROTOCOL, C(api.protocol), 0, 0, KEY_REQUIRED, "native"},
    {"api", "token_file", CONF_PATH, C(api.token_file), 0, 0, 0, NULL},
    {"api", "ca_file", CONF_PATH, C(api.ca_file), 0, 0, 0, NULL},
    {"api", "client_cert", CONF_PATH, C(api.client_cert), 0, 0, 0, NULL},
    {"api", "client_key", CONF_PATH, C(api.client_key), 0, 0, 0, NULL},
    {"api", "allow_insecure_http", CONF_BOOL, C(api.allow_insecure_http), 0, 0, 0, "no"},
    {"api", "request_timeout", CONF_DURATION, C(api.request_timeout), SEC, HOUR, LIVE, "30s"},
    {"api", "key_id", CONF_NAME, C(api.key_id), 0, 0, 0, NULL},
    {"api", "key_secret_file", CONF_PATH, C(api.key_secret_file), 0, 0, 0, NULL},
    {"api", "domain", CONF_NAME, C(api.domain), 0, 0, 0, NULL},
    {"api", "user", CONF_LOGIN, C(api.user), 0, 0, 0, NULL},
    {"api", "password_file", CONF_PATH, C(api.password_file), 0, 0, 0, NULL},
    {"worker", "id", CONF_ID, C(worker.id), 0, 0, 0, NULL},
    {"worker", "concurrency", CONF_UINT, C(worker.concurrency), 1, 10000, LIVE, "4"},
    {"worker", "max_reporting", CONF_UINT, C(worker.max_reporting), 0, 65536, LIVE, "0"},
    {"worker", "prefetch", CONF_UINT, C(worker.prefetch), 0, 256, LIVE, "0"},
    {"worker", "prefetch_hold", CONF_DURATION, C(worker.prefetch_hold), 10 * MS, HOUR, LIVE, "1s"},
    {"worker", "tags", CONF_TAGS, C(worker.tags), 0, 0, LIVE, ""},
    {"worker", "lease_ttl", CONF_DURATION, C(worker.lease_ttl), SEC, HOUR, LIVE | WHOLE, "90s"},
    {"worker", "lease_refresh", CONF_DURATION, C(worker.lease_refresh), 100 * MS, HOUR / 2, LIVE,
     "30s"},
    {"worker", "long_poll", CONF_DURATION, C(worker.long_poll), 0, 60 * SEC, LIVE | WHOLE, "20s"},
    {"worker", "poll_interval", CONF_DURATION, C(worker.poll_interval), 10 * MS, HOUR, LIVE, "2s"},
    {"worker", "run_timeout", CONF_DURATION, C(worker.run_timeout), SEC, 30 * DAY, LIVE | INF,
     "30min"},
    {"worker", "max_timeout", CONF_DURATION, C(worker.max_timeout), SEC, 30 * DAY, LIVE | INF,
     "infinity"},
    {"worker", "kill_grace", CONF_DURATION, C(worker.kill_grace), 0, HOUR, LIVE, "10s"},
    {"worker", "drain_timeout", CONF_DURATION, C(worker.drain_timeout), 0, 30 * DAY, LIVE | INF,
     "infinity"},
    {"worker", "max_consecutive_failures", CONF_UINT, C(worker.max_consecutive_failures), 0, 1000,
     LIVE, "3"},
    {"worker", "failure_cooldown", CONF_DURATION, C(worker.failure_cooldown), SEC, 7 * DAY, LIVE,
     "5min"},
    {"worker", "failure_cooldown_max", CONF_DURATION, C(worker.failure_cooldown_max), SEC, 7 * DAY,
     LIVE, "1h"},
    {"worker", "max_log_bytes", CONF_SIZE, C(worker.max_log_bytes), KIB, TIB, LIVE, "64M"},
    {"worker", "max_output_bytes", CONF_SIZE, C(worker.max_output_bytes), KIB, 64 * MIB, LIVE,
     "1M"},
    {"worker", "max_input_bytes", CONF_SIZE, C(worker.max_input_bytes), KIB, 64 * MIB, LIVE, "4M"},
    {"worker", "spool_dir", CONF_PATH, C(worker.spool_dir), 0, 0, KEY_REQUIRED, NULL},
    {"worker", "run_dir", CONF_PATH, C(worker.run_dir), 0, 0, KEY_REQUIRED, NULL},
    {"worker", "run_user", CONF_USER, C(worker.run_user), 0, 0, LIVE, NULL},
    {"status", "listen", CONF_LISTEN, C(status.listen), 0, 0, 0, "127.0.0.1:9464"},
    {"status", "heartbeat_url", CONF_URL, C(status.heartbeat_url), 0, 0, 0, NULL},
    {"status", "heartbeat_interval", CONF_DURATION, C(status.heartbeat_interval), SEC, DAY, 0,
     "1min"},
    {"log", "level", CONF_LEVEL, C(log.level), 0, 0, LIVE, "info"},
    {"log", "format", CONF_FORMAT, C(log.format), 0, 0, 0, "auto"},
};
const size_t conf_n_keys = ELEMENTSOF(conf_keys);

const struct conf_key conf_wf_keys[] = {
    {"workflow", "command", CONF_COMMAND, W(argv), 0, 0, LIVE, NULL},
    {"workflow", "timeout", CONF_DURATION, W(timeout), SEC, 30 * DAY, LIVE | INF, NULL},
    {"workflow", "env", CONF_ENV, W(env), 0, 0, LIVE, NULL},
    {"workflow", "user", CONF_USER, W(user), 0, 0, LIVE, NULL},
    {"workflow", "working_directory", CONF_PATH, W(working_directory), 0, 0, LIVE, NULL},
    {"workflow", "max_log_bytes", CONF_SIZE, W(max_log_bytes), KIB, TIB, LIVE, NULL},
    {"workflow", "max_timeout", CONF_DURATION, W(max_timeout), SEC, 30 * DAY, LIVE | INF, NULL},
    {"workflow", "concurrency", CONF_UINT, W(concurrency), 0, 10000, LIVE, "0"},
    /* the poll loop is made at start: a new task type needs a restart */
    {"workflow", "task_type", CONF_NAME, W(task_type), 0, 0, 0, NULL},
    {"workflow", "terminal_exit_codes", CONF_EXIT_CODES, W(terminal_exit_codes), 0, 0, LIVE, NULL},
    /* camunda7; the fetch is made at start: a new topic needs a restart */
    {"workflow", "topic", CONF_NAME, W(topic), 0, 0, 0, NULL},
    {"workflow", "variables", CONF_NAMES, W(variables), 0, 0, LIVE, ""},
    {"workflow", "retries", CONF_UINT, W(retries), 0, 1000, LIVE, "3"},
    {"workflow", "retry_backoff", CONF_DURATION, W(retry_backoff), 0, DAY, LIVE, "10s"},
    {"workflow", "retry_backoff_max", CONF_DURATION, W(retry_backoff_max), 0, 30 * DAY, LIVE,
     "10min"},
    {"workflow", "local_variables", CONF_BOOL, W(local_variables), 0, 0, LIVE, "no"},
};
const size_t conf_n_wf_keys = ELEMENTSOF(conf_wf_keys);

static const char *const sections[] = {"api", "worker", "status", "log"};

const char *const conf_protocols[] = {"native", "conductor", "camunda7", NULL};

struct wf_state {
	struct conf_workflow wf;
	char *where;            /* where its section first appeared */
	char **origin;          /* per conf_wf_keys entry: where it was last set, NULL = never */
	bool *bad;              /* per conf_wf_keys entry: a value was refused (already reported) */
	const char *moved_name; /* wf.name once wf moved to conf.workflows */
};

struct loader {
	const struct conf_source *src;
	const char *path; /* the main file */
	bool main_missing;
	struct conf *c;
	char **origin; /* per conf_keys entry */
	bool *bad;     /* per conf_keys entry: a value was refused (already reported) */
	struct wf_state *wfs;
	size_t n_wfs;
	char **errors; /* every problem found, in order, never NULL after loader_init */
	size_t n_errors;
	size_t parse_errors; /* of those, found while reading the sources */
};

static const char DEFAULT_ORIGIN[] = "built-in default";

_printf_(3, 4) static int fail(struct loader *L, const char *origin, const char *fmt, ...)
{
	_cleanup_free_ char *msg = NULL;
	char *line = NULL;
	va_list ap;
	int n;

	if (++L->n_errors > ERRORS_MAX)
		return -EINVAL; /* counted, named in the summary */
	va_start(ap, fmt);
	n = vasprintf(&msg, fmt, ap);
	va_end(ap);
	if (n < 0 || asprintf(&line, "%s: %s", origin, msg) < 0)
		return -ENOMEM;
	return strv_push(&L->errors, line) < 0 ? -ENOMEM : -EINVAL;
}

/* Every error, one per line; NULL on ENOMEM. */
static char *errors_join(const struct loader *L)
{
	struct buf b = BUF_INIT(0);

	for (size_t i = 0; L->errors && L->errors[i]; i++)
		if (buf_printf(&b, "%s%s", i ? "\n" : "", L->errors[i]) < 0)
			goto oom;
	if (L->n_errors > ERRORS_MAX &&
	    buf_printf(&b, "\n(%zu more errors not shown)", L->n_errors - ERRORS_MAX) < 0)
		goto oom;
	if (!b.data && buf_appends(&b, "invalid configuration") < 0)
		goto oom;
	return buf_steal(&b);
oom:
	buf_done(&b);
	return NULL;
}

static const char *env_get(char *const *env, const char *name)
{
	size_t n = strlen(name);

	for (; env && *env; env++)
		if (strncmp(*env, name, n) == 0 && (*env)[n] == '=')
			return *env + n + 1;
	return NULL;
}

static const struct conf_key *find_key(const struct conf_key *keys, size_t n, const char *section,
                                       const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (streq(keys[i].section, section) && streq(keys[i].name, name))
			return &keys[i];
	return NULL;
}

static size_t key_index(const char *section, const char *name)
{
	const struct conf_key *k = find_key(conf_keys, conf_n_keys, section, name);

	assert(k);
	return (size_t)(k - conf_keys);
}

/* Edit distance, for "did you mean"; only for short words. */
static size_t distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), row[65], prev, tmp;

	if (la > 64 || lb > 64)
		return SIZE_MAX;
	for (size_t j = 0; j <= lb; j++)
		row[j] = j;
	for (size_t i = 1; i <= la; i++) {
		prev = row[0];
		row[0] = i;
		for (size_t j = 1; j <= lb; j++) {
			tmp = row[j];
			row[j] =
			    MIN(MIN(row[j] + 1, row[j - 1] + 1), prev + (a[i - 1] != b[j - 1]));
			prev = tmp;
		}
	}
	return row[lb];
}

/* The section a key of this exact name belongs to, when it is not ksection. */
static const char *key_home(const char *ksection, const char *key)
{
	for (size_t i = 0; i < conf_n_keys; i++)
		if (streq(conf_keys[i].name, key) && !streq(conf_keys[i].section, ksection))
			return conf_keys[i].section;
	if (!streq(ksection, "workflow") && find_key(conf_wf_keys, conf_n_wf_keys, "workflow", key))
		return "workflow.NAME";
	return NULL;
}

static int unknown_key(struct loader *L, const struct conf_key *keys, size_t n,
                       const char *ksection, const char *section, const char *key,
                       const char *origin)
{
	const char *best = NULL;
	size_t bd = 3;

	const char *home;

	for (size_t i = 0; i < n; i++) {
		size_t d =
		    streq(keys[i].section, ksection) ? distance(key, keys[i].name) : SIZE_MAX;

		if (d < bd)
			bd = d, best = keys[i].name;
	}
	if (!best && (home = key_home(ksection, key)))
		return fail(L, origin, "unknown key '%.80s' in [%.140s] (`%s` is a [%s] key)", key,
		            section, key, home);
	return fail(L, origin, "unknown key '%.80s' in [%.140s]%s%s%s", key, section,
	            best ? " (did you mean '" : "", best ? best : "", best ? "'?)" : "");
}

static int set_origin(char **slot, const char *origin)
{
	char *o = strdup(origin);

	if (!o)
		return -ENOMEM;
	free(*slot);
	*slot = o;
	return 0;
}

/* ---- workflows ---- */

static void workflow_done(struct conf_workflow *wf)
{
	for (size_t i = 0; i < conf_n_wf_keys; i++)
		conf_value_free(&conf_wf_keys[i], wf);
	wf->name = mfree(wf->name);
	wf->spawn_env = strv_free(wf->spawn_env);
}

static void wf_state_done(struct wf_state *s)
{
	workflow_done(&s->wf);
	free(s->where);
	for (size_t i = 0; s->origin && i < conf_n_wf_keys; i++)
		free(s->origin[i]);
	free(s->origin);
	free(s->bad);
}

static int workflow_get(struct loader *L, const char *name, const char *origin,
                        struct wf_state **ret)
{
	struct wf_state *s, *nv;

	for (size_t i = 0; i < L->n_wfs; i++)
		if (streq(L->wfs[i].wf.name, name)) {
			*ret = &L->wfs[i];
			return 0;
		}
	if (!v1_valid_id(name))
		return fail(L, origin, "workflow name '%.80s' is not 1..%d bytes of " V1_ID_CHARSET,
		            name, V1_ID_MAX);
	if (L->n_wfs >= WORKFLOWS_MAX)
		return fail(L, origin, "more than %d workflows", WORKFLOWS_MAX);
	nv = realloc(L->wfs, (L->n_wfs + 1) * sizeof(*nv));
	if (!nv)
		return -ENOMEM;
	L->wfs = nv;
	s = &L->wfs[L->n_wfs];
	*s = (struct wf_state){0};
	s->wf.name = strdup(name);
	s->where = strdup(origin);
	s->origin = calloc(conf_n_wf_keys, sizeof(char *));
	s->bad = calloc(conf_n_wf_keys, sizeof(bool));
	s->wf.env = calloc(1, sizeof(char *));
	L->n_wfs++;
	if (!s->wf.name || !s->where || !s->origin || !s->bad || !s->wf.env)
		return -ENOMEM;
	/* the built-in defaults a workflow's own keys have (no worker-wide one) */
	for (size_t i = 0; i < conf_n_wf_keys; i++) {
		char problem[CONF_PROBLEM_MAX];
		int r;

		if (conf_wf_keys[i].def && (r = conf_value_parse(&conf_wf_keys[i], &s->wf,
		                                                 conf_wf_keys[i].def, problem)) < 0)
			return r;
	}
	*ret = s;
	return 0;
}

/* ---- one assignment, whatever its source ---- */

static bool section_known(const char *section)
{
	for (size_t i = 0; i < ELEMENTSOF(sections); i++)
		if (streq(section, sections[i]))
			return true;
	return false;
}

_printf_(2, 3) static int warn(struct loader *L, const char *fmt, ...);

/* " # note" or " ; note" after a value: a comment in most INI dialects, not here. */
static const char *inline_comment(const char *value)
{
	for (const char *c = value; (c = strpbrk(c, "#;")); c++)
		if (c > value && (c[-1] == ' ' || c[-1] == '\t'))
			return c - 1;
	return NULL;
}

static int assign(struct loader *L, const struct conf_key *k, void *base, char **slot, bool *bad,
                  const char *section, const char *value, const char *origin)
{
	char problem[CONF_PROBLEM_MAX];
	const char *tp = conf_text_problem(value, strlen(value)), *ic = inline_comment(value);
	int r;

	if (tp) {
		*bad = true;
		return fail(L, origin, "%.140s.%s: value %s", section, k->name, tp);
	}
	r = conf_value_parse(k, base, value, problem);
	if (r == -EINVAL) {
		*bad = true;
		return fail(L, origin, "%.140s.%s: %s%s", section, k->name, problem,
		            ic ? " (inline comments are not supported: put the comment on a line "
		                 "of its own)"
		               : "");
	}
	if (r < 0)
		return r;
	*bad = false;
	if (ic && (r = warn(L,
	                    "%s: %.140s.%s: '%.2s' is part of the value (inline comments are not "
	                    "supported)",
	                    origin, section, k->name, ic)) < 0)
		return r;
	return set_origin(slot, origin);
}

static int apply(struct loader *L, const char *section, const char *key, const char *value,
                 const char *origin)
{
	const char *name = startswith(section, "workflow.");
	const struct conf_key *k;
	struct wf_state *s;
	int r;

	if (name) {
		if ((r = workflow_get(L, name, origin, &s)) < 0)
			return r;
		k = find_key(conf_wf_keys, conf_n_wf_keys, "workflow", key);
		if (!k)
			return unknown_key(L, conf_wf_keys, conf_n_wf_keys, "workflow", section,
			                   key, origin);
		return assign(L, k, &s->wf, &s->origin[k - conf_wf_keys], &s->bad[k - conf_wf_keys],
		              section, value, origin);
	}
	if (!section_known(section))
		return fail(L, origin, "unknown section [%.140s]", section);
	k = find_key(conf_keys, conf_n_keys, section, key);
	if (!k)
		return unknown_key(L, conf_keys, conf_n_keys, section, section, key, origin);
	return assign(L, k, L->c, &L->origin[k - conf_keys], &L->bad[k - conf_keys], section, value,
	              origin);
}

/* ---- INI text ---- */

struct ini {
	struct loader *L;
	const char *path;
	char *section;      /* NULL before the first, or after a refused header */
	bool skipping;      /* in a refused section: its assignments say nothing more */
	char **seen;        /* "section.key\tline" of each assignment, for duplicates */
	struct buf logical; /* the current line with its continuations */
	unsigned start;     /* its first line number */
	bool more;          /* the last line ended with a backslash */
};

static int ini_section(struct ini *I, char *line, const char *origin)
{
	size_t n = strlen(line);
	const char *wf;
	struct wf_state *s;
	int r;

	I->section = mfree(I->section);
	I->skipping = true; /* until the header is taken */
	if (n < 3 || line[n - 1] != ']')
		return fail(I->L, origin, "malformed section header '%.80s'", line);
	line[n - 1] = '\0';
	line++;
	wf = startswith(line, "workflow.");
	if (wf) {
		if ((r = workflow_get(I->L, wf, origin, &s)) < 0)
			return r;
	} else if (streq(line, "workflow"))
		return fail(I->L, origin, "a workflow section needs a name: [workflow.NAME]");
	else if (!section_known(line))
		return fail(I->L, origin, "unknown section [%.80s]", line);
	I->skipping = false;
	I->section = strdup(line);
	return I->section ? 0 : -ENOMEM;
}

/* The same key twice in one file is usually a mistake: the first one is dead.
 * env is the exception, its assignments accumulate. */
static int ini_duplicate(struct ini *I, const char *key, const char *origin)
{
	_cleanup_free_ char *id = NULL;
	size_t n;
	int r;

	if (startswith(I->section, "workflow.") && streq(key, "env"))
		return 0;
	if (asprintf(&id, "%s.%s\t", I->section, key) < 0)
		return -ENOMEM;
	n = strlen(id);
	for (char **s = I->seen; s && *s; s++)
		if (strncmp(*s, id, n) == 0)
			return warn(I->L,
			            "%s: %s.%s is set again (first at line %s): the last one wins",
			            origin, I->section, key, *s + n);
	id = mfree(id);
	if ((r = asprintf(&id, "%s.%s\t%u", I->section, key, I->start)) < 0)
		return -ENOMEM;
	return strv_push(&I->seen, TAKE_PTR(id));
}

static int ini_logical(struct ini *I, char *line)
{
	_cleanup_free_ char *origin = NULL;
	char *eq, *key;
	int r;

	if (asprintf(&origin, "%s:%u", I->path, I->start) < 0)
		return -ENOMEM;
	if (line[0] == '[')
		return ini_section(I, line, origin);
	eq = strchr(line, '=');
	if (!eq)
		return fail(I->L, origin, "expected 'key = value' or '[section]', got '%.80s'",
		            line);
	if (I->skipping)
		return 0; /* the header was reported */
	if (!I->section)
		return fail(I->L, origin, "assignment before the first [section]");
	*eq = '\0';
	key = str_trim(line);
	if (!*key)
		return fail(I->L, origin, "missing key before '='");
	if ((r = ini_duplicate(I, key, origin)) < 0)
		return r;
	return apply(I->L, I->section, key, str_trim(eq + 1), origin);
}

static void rtrim(char *s)
{
	size_t n = strlen(s);

	while (n > 0 && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\r'))
		s[--n] = '\0';
}

static int ini_physical(struct ini *I, const char *p, size_t n, unsigned lineno)
{
	_cleanup_free_ char *origin = NULL, *line = NULL;
	const char *tp;
	char *s;
	size_t len;
	int r;

	if (asprintf(&origin, "%s:%u", I->path, lineno) < 0)
		return -ENOMEM;
	if (n > LINE_MAX_BYTES)
		return fail(I->L, origin, "line is longer than %d bytes", LINE_MAX_BYTES);
	if (memchr(p, '\0', n))
		return fail(I->L, origin, "line contains a NUL byte");
	if (!(line = strndup(p, n)))
		return -ENOMEM;
	rtrim(line);
	if ((tp = conf_text_problem(line, strlen(line))))
		return fail(I->L, origin, "line %s", tp);
	s = line + strspn(line, " \t");
	if (*s == '#' || *s == ';' || (!*s && !I->more))
		return 0; /* comment lines are skipped inside continuations too */
	if (!I->more) {
		I->start = lineno;
		buf_reset(&I->logical);
	}
	len = strlen(s);
	I->more = len > 0 && s[len - 1] == '\\';
	if (I->more)
		s[len - 1] = ' ';
	r = buf_append(&I->logical, s, len);
	if (r == -E2BIG)
		return fail(I->L, origin, "continued line is longer than %d bytes", LINE_MAX_BYTES);
	if (r < 0 || I->more)
		return r;
	return ini_logical(I, I->logical.data);
}

/* Does this physical line end with a backslash (before trailing blanks)? */
static bool line_continues(const char *p, size_t n)
{
	while (n > 0 && strchr(" \t\r", p[n - 1]))
		n--;
	return n > 0 && p[n - 1] == '\\';
}

static int ini_parse(struct loader *L, const char *path, const char *text, size_t len)
{
	struct ini I = {.L = L, .path = path, .logical = BUF_INIT(LINE_MAX_BYTES)};
	const char *p = text, *end = text + len;
	unsigned lineno = 0;
	bool discard = false;
	int r = 0;

	/* a refused line is reported and the next one read: every error at once */
	while (p < end && (r >= 0 || r == -EINVAL)) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
		bool was_more = I.more;
		int q;

		++lineno;
		if (discard) /* the rest of a refused continued line */
			q = 0, discard = line_continues(p, n);
		else
			q = ini_physical(&I, p, n, lineno);
		r = r < 0 ? r : q;
		if (q < 0 && q != -EINVAL)
			r = q;
		if (q == -EINVAL) {
			discard = (was_more || I.more) && line_continues(p, n);
			I.more = false;
		}
		p = nl ? nl + 1 : end;
	}
	if ((r >= 0 || r == -EINVAL) && I.more) {
		int q = ini_logical(&I, I.logical.data); /* a backslash on the last line */

		r = r < 0 ? r : q;
	}
	buf_done(&I.logical);
	free(I.section);
	strv_free(I.seen);
	return r;
}

/* ---- files ---- */

/* Regular files only (a FIFO would block us, a directory is a mistake). */
static int open_regular(const char *path, struct stat *st)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);

	if (fd < 0)
		return -errno;
	if (fstat(fd, st) < 0) {
		int r = -errno;

		close(fd);
		return r;
	}
	if (!S_ISREG(st->st_mode)) {
		close(fd);
		return -EBADFD;
	}
	return fd;
}

static const char *io_problem(int r, size_t max)
{
	static char b[64];

	if (r == -EBADFD)
		return "not a regular file";
	if (r == -EFBIG) {
		snprintf(b, sizeof(b), "larger than %zu bytes", max);
		return b;
	}
	return strerror(-r);
}

static int load_file(struct loader *L, const char *path)
{
	_cleanup_free_ char *text = NULL;
	_cleanup_close_ int fd = -1;
	struct stat st;
	size_t len;
	int r;

	fd = open_regular(path, &st);
	r = fd < 0 ? fd : read_fd_capped(fd, FILE_MAX, &text, &len);
	if (r == -ENOENT && path == L->path && !L->src->path) {
		L->main_missing = true; /* the default path: see check_url_given() */
		return 0;
	}
	if (r == -ENOMEM)
		return r;
	if (r < 0)
		return fail(L, path, "cannot read: %s", io_problem(r, FILE_MAX));
	if ((r = strv_extend(&L->c->sources, path)) < 0)
		return r;
	return ini_parse(L, path, text, len);
}

static int load_main(struct loader *L)
{
	return load_file(L, L->path);
}

static int dropin_filter(const struct dirent *d)
{
	const char *ext = strrchr(d->d_name, '.');

	return d->d_name[0] != '.' && ext && streq(ext, ".conf");
}

static int dropin_cmp(const struct dirent **a, const struct dirent **b)
{
	return strcmp((*a)->d_name, (*b)->d_name); /* bytewise: the locale must not reorder */
}

static int load_dropins(struct loader *L)
{
	_cleanup_free_ char *dir = NULL;
	struct dirent **list = NULL;
	int n, r = 0;

	if (asprintf(&dir, "%s.d", L->path) < 0)
		return -ENOMEM;
	n = scandir(dir, &list, dropin_filter, dropin_cmp);
	if (n < 0)
		return errno == ENOENT ? 0
		       : errno == ENOMEM
		           ? -ENOMEM
		           : fail(L, dir, "cannot read drop-in directory: %s", strerror(errno));
	if (n > DROPINS_MAX)
		r = fail(L, dir, "more than %d drop-ins", DROPINS_MAX);
	for (int i = 0; i < n; i++) {
		_cleanup_free_ char *path = NULL;
		int q = 0;

		if (r >= 0 || r == -EINVAL)
			q = asprintf(&path, "%s/%s", dir, list[i]->d_name) < 0 ? -ENOMEM
			                                                       : load_file(L, path);
		if (q < 0 && r >= 0)
			r = q;
		else if (q == -ENOMEM)
			r = q;
		free(list[i]);
	}
	free(list);
	return r;
}

/* ---- environment and overrides ---- */

static int env_one(struct loader *L, const char *entry, const char *section, const char *rest)
{
	const char *eq = strchr(rest, '=');
	_cleanup_free_ char *name = strndup(entry, (size_t)(eq - entry));
	_cleanup_free_ char *key = strndup(rest, (size_t)(eq - rest));
	_cleanup_free_ char *value = strdup(eq + 1);

	const char *tp = conf_text_problem(entry, strlen(entry));

	if (!name || !key || !value)
		return -ENOMEM;
	if (tp) { /* the name is the origin in messages: make it printable */
		for (char *c = name; *c; c++)
			if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f)
				*c = '?';
		return fail(L, name, "%s", tp);
	}
	for (char *c = key; *c; c++)
		*c = (char)tolower((unsigned char)*c);
	return apply(L, section, key, str_trim(value), name);
}

static int load_env(struct loader *L)
{
	for (char *const *e = L->src->env; e && *e; e++) {
		const char *rest = startswith(*e, "LESSEE_");

		if (!rest || !strchr(rest, '='))
			continue;
		for (size_t i = 0; i < ELEMENTSOF(sections); i++) {
			size_t n = strlen(sections[i]);
			int r;

			if (strncasecmp(rest, sections[i], n) != 0 || rest[n] != '_')
				continue;
			if ((r = env_one(L, *e, sections[i], rest + n + 1)) < 0 && r != -EINVAL)
				return r;
			break;
		}
	}
	return 0;
}

static int load_override(struct loader *L, const struct conf_override *o)
{
	const char *origin = o->origin ? o->origin : "--set";
	const char *eq = o->setting ? strchr(o->setting, '=') : NULL, *tp;
	_cleanup_free_ char *left = NULL, *value = NULL;
	char *dot;

	if (!eq)
		return fail(L, origin, "'%.80s' is not section.key=value",
		            o->setting ? o->setting : "");
	if ((tp = conf_text_problem(o->setting, strlen(o->setting))))
		return fail(L, origin, "%s", tp);
	left = strndup(o->setting, (size_t)(eq - o->setting));
	value = strdup(eq + 1);
	if (!left || !value)
		return -ENOMEM;
	dot = strrchr(left, '.');
	if (!dot || dot == left || !dot[1])
		return fail(L, origin, "'%.80s' is not section.key=value", o->setting);
	*dot = '\0';
	return apply(L, left, dot + 1, str_trim(value), origin);
}

static int load_overrides(struct loader *L)
{
	int r = 0;

	for (size_t i = 0; i < L->src->n_overrides && (r >= 0 || r == -EINVAL); i++) {
		int q = load_override(L, &L->src->overrides[i]);

		r = r < 0 && q >= 0 ? r : q;
	}
	return r;
}

/* ---- defaults ---- */

/* The first absolute path of a systemd directory variable ("a:b" lists several). */
static char *systemd_dir(const struct loader *L, const char *var)
{
	const char *v = env_get(L->src->env, var);

	if (!v || v[0] != '/')
		return NULL;
	return strndup(v, strcspn(v, ":"));
}

/* Run directories are on disk, not on a tmpfs (build-sized runs):
 * $CACHE_DIRECTORY/runs under systemd (CacheDirectory=), else a unit's
 * RuntimeDirectory= as before, else /var/cache/lessee/runs. */
static int load_run_dir_default(struct loader *L)
{
	_cleanup_free_ char *cache = systemd_dir(L, "CACHE_DIRECTORY");
	_cleanup_free_ char *runtime = systemd_dir(L, "RUNTIME_DIRECTORY");
	_cleanup_free_ char *dir = NULL;

	if (asprintf(&dir, "%s/runs", cache ? cache : "/var/cache/lessee") < 0)
		return -ENOMEM;
	if (!cache && runtime)
		return apply(L, "worker", "run_dir", runtime, "$RUNTIME_DIRECTORY");
	return apply(L, "worker", "run_dir", dir, cache ? "$CACHE_DIRECTORY" : DEFAULT_ORIGIN);
}

static int load_defaults(struct loader *L)
{
	_cleanup_free_ char *state = systemd_dir(L, "STATE_DIRECTORY");
	_cleanup_free_ char *spool = NULL;
	int r = 0;

	for (size_t i = 0; i < conf_n_keys && r >= 0; i++)
		if (conf_keys[i].def)
			r = apply(L, conf_keys[i].section, conf_keys[i].name, conf_keys[i].def,
			          DEFAULT_ORIGIN);
	if (r < 0)
		return r;
	if (asprintf(&spool, "%s/spool", state ? state : "/var/lib/lessee") < 0)
		return -ENOMEM;
	r = apply(L, "worker", "spool_dir", spool, state ? "$STATE_DIRECTORY" : DEFAULT_ORIGIN);
	if (r < 0)
		return r;
	return load_run_dir_default(L);
}

/* ---- checks across keys ---- */

static const char *origin_of(const struct loader *L, const char *section, const char *name)
{
	const char *o = L->origin[key_index(section, name)];

	return o ? o : DEFAULT_ORIGIN;
}

/* Blame the first key unless it was left at its default. */
static const char *blame(const struct loader *L, const char *a, const char *b)
{
	const char *oa = origin_of(L, "worker", a);

	return streq(oa, DEFAULT_ORIGIN) ? origin_of(L, "worker", b) : oa;
}

static bool key_bad(const struct loader *L, const char *section, const char *name)
{
	return L->bad[key_index(section, name)];
}

static int check_url_given(struct loader *L)
{
	/* the first check after parsing: an error so far may be why something is missing */
	L->parse_errors = L->n_errors;
	if (L->c->api.url || L->parse_errors > 0)
		return 0;
	if (L->main_missing)
		return fail(L, L->path,
		            "cannot read: %s, and neither LESSEE_API_URL nor an override sets "
		            "api.url",
		            strerror(ENOENT));
	return fail(L, L->path, "api.url is not set");
}

usec_t conf_lease_margin(usec_t ttl)
{
	return MAX(ttl / 10, MIN(USEC_PER_SEC, ttl / 2));
}

/* A renewal is due lease_refresh after a grant; the local lease ends at
 * lease_ttl minus its margin, when a still running child is killed.  Between
 * the two there must be room to abandon a stalled renewal and retry it. */
static int fail_renew_window(struct loader *L)
{
	const struct conf_worker *w = &L->c->worker;
	usec_t margin = conf_lease_margin(w->lease_ttl);
	char t[TIME_DURATION_MAX], m[TIME_DURATION_MAX], r[TIME_DURATION_MAX],
	    min[TIME_DURATION_MAX];

	return fail(L, blame(L, "lease_refresh", "lease_ttl"),
	            "worker.lease_ttl (%s) minus its local margin (%s) must exceed "
	            "worker.lease_refresh (%s) by at least %s, so a stalled renewal can be "
	            "abandoned and retried before the run must be killed: lower lease_refresh "
	            "or raise lease_ttl",
	            time_format_duration(t, sizeof(t), w->lease_ttl),
	            time_format_duration(m, sizeof(m), margin),
	            time_format_duration(r, sizeof(r), w->lease_refresh),
	            time_format_duration(min, sizeof(min), CONF_RENEW_WINDOW_MIN));
}

static int check_relations(struct loader *L)
{
	const struct conf_worker *w = &L->c->worker;
	char a[TIME_DURATION_MAX], b[TIME_DURATION_MAX];
	int r = 0;

	if (key_bad(L, "worker", "lease_refresh") || key_bad(L, "worker", "lease_ttl"))
		; /* refused already: the default in its place proves nothing */
	else if (w->lease_refresh > w->lease_ttl / 2)
		r = fail(L, blame(L, "lease_refresh", "lease_ttl"),
		         "worker.lease_refresh (%s) must be at most half of worker.lease_ttl "
		         "(%s), so a failed renewal can be retried before the lease runs out",
		         time_format_duration(a, sizeof(a), w->lease_refresh),
		         time_format_duration(b, sizeof(b), w->lease_ttl));
	else if (w->lease_ttl <
	         conf_lease_margin(w->lease_ttl) + w->lease_refresh + CONF_RENEW_WINDOW_MIN)
		r = fail_renew_window(L);
	if (key_bad(L, "worker", "failure_cooldown_max") ||
	    key_bad(L, "worker", "failure_cooldown"))
		return r;
	if (w->failure_cooldown_max < w->failure_cooldown)
		return fail(L, blame(L, "failure_cooldown_max", "failure_cooldown"),
		            "worker.failure_cooldown_max (%s) is shorter than "
		            "worker.failure_cooldown (%s)",
		            time_format_duration(a, sizeof(a), w->failure_cooldown_max),
		            time_format_duration(b, sizeof(b), w->failure_cooldown));
	return r;
}

static int finalize_id(struct loader *L)
{
	char host[HOST_NAME_MAX + 1] = "", id[128];

	if (L->c->worker.id)
		return 0;
	if (L->src->default_worker_id)
		return apply(L, "worker", "id", L->src->default_worker_id, "default worker id");
	if (gethostname(host, sizeof(host)) < 0 || !host[0])
		snprintf(host, sizeof(host), "lessee");
	host[64] = '\0';
	for (char *c = host; *c; c++)
		if (!isalnum((unsigned char)*c) && !strchr("._:-", *c))
			*c = '-';
	snprintf(id, sizeof(id), "%s-%08x", host, (unsigned)random_u64());
	return apply(L, "worker", "id", id, DEFAULT_ORIGIN);
}

/* Keep the last assignment of each name, in the order of those last assignments. */
static void env_dedup(char **env)
{
	size_t w = 0;

	for (size_t i = 0; env[i]; i++) {
		size_t n = strcspn(env[i], "=") + 1;
		bool later = false;

		for (size_t j = i + 1; env[j] && !later; j++)
			later = strncmp(env[i], env[j], n) == 0;
		if (later)
			free(env[i]);
		else
			env[w++] = env[i];
	}
	env[w] = NULL;
}

/* ---- what the first run would trip over (conf_source.check_files) ---- */

#define WF_COMMAND 0
#define WF_WORKDIR 4

/* A run's argv[0] is exec'd as it is: no PATH search, no shell. */
static int check_command(struct loader *L, const struct wf_state *s)
{
	const char *path = s->wf.argv[0], *origin = s->origin[WF_COMMAND];
	struct stat st;

	if (stat(path, &st) < 0)
		return errno == ENOMEM ? -ENOMEM
		                       : fail(L, origin, "workflow.%s.command: %s: %s", s->wf.name,
		                              path, strerror(errno));
	if (!S_ISREG(st.st_mode))
		return fail(L, origin, "workflow.%s.command: %s is not a regular file", s->wf.name,
		            path);
	/* as lessee's own user: that is who execs it; with user= only the mode bits tell */
	if (!(st.st_mode & 0111) || (!s->wf.user && access(path, X_OK) < 0))
		return fail(L, origin, "workflow.%s.command: %s is not executable (mode %04o)",
		            s->wf.name, path, (unsigned)(st.st_mode & 07777));
	return 0;
}

static int check_workdir(struct loader *L, const struct wf_state *s)
{
	const char *path = s->wf.working_directory, *origin = s->origin[WF_WORKDIR];
	struct stat st;

	if (stat(path, &st) < 0)
		return errno == ENOMEM ? -ENOMEM
		                       : fail(L, origin, "workflow.%s.working_directory: %s: %s",
		                              s->wf.name, path, strerror(errno));
	if (!S_ISDIR(st.st_mode))
		return fail(L, origin, "workflow.%s.working_directory: %s is not a directory",
		            s->wf.name, path);
	return 0;
}

static int check_files(struct loader *L)
{
	int r = 0;

	assert(streq(conf_wf_keys[WF_COMMAND].name, "command"));
	assert(streq(conf_wf_keys[WF_WORKDIR].name, "working_directory"));
	if (!L->src->check_files)
		return 0;
	for (size_t i = 0; i < L->n_wfs && r != -ENOMEM; i++) {
		const struct wf_state *s = &L->wfs[i];

		if (s->wf.argv)
			r = check_command(L, s);
		if (r != -ENOMEM && s->wf.working_directory)
			r = check_workdir(L, s);
	}
	return r;
}

static int wf_cmp(const void *a, const void *b)
{
	return strcmp(((const struct conf_workflow *)a)->name,
	              ((const struct conf_workflow *)b)->name);
}

_printf_(2, 3) static int warn(struct loader *L, const char *fmt, ...);

/* Caps that can never bind, or always do: said once at start, not an error.
 * A timeout inherited from worker.run_timeout is not the workflow's choice. */
static int check_run_caps(struct loader *L, const struct conf_workflow *wf, bool own_timeout)
{
	const struct conf_worker *w = &L->c->worker;
	char t[TIME_DURATION_MAX], m[TIME_DURATION_MAX];
	int r = 0;

	if (own_timeout && wf->max_timeout != USEC_INFINITY && wf->timeout > wf->max_timeout)
		r = warn(L,
		         "workflow.%s: timeout %s is above max_timeout %s: its runs are stopped "
		         "at %s",
		         wf->name, time_format_duration(t, sizeof(t), wf->timeout),
		         time_format_duration(m, sizeof(m), wf->max_timeout), m);
	if (r >= 0 && wf->concurrency > w->concurrency)
		r = warn(L,
		         "workflow.%s: concurrency %u is above worker.concurrency %u: the worker's "
		         "slots are the limit",
		         wf->name, wf->concurrency, w->concurrency);
	return r;
}

static int finalize_workflows(struct loader *L)
{
	size_t timeout = 1, max_log = 5, max_timeout = 6; /* indexes in conf_wf_keys */
	struct conf *c = L->c;
	int r = 0;

	assert(streq(conf_wf_keys[timeout].name, "timeout"));
	assert(streq(conf_wf_keys[max_log].name, "max_log_bytes"));
	assert(streq(conf_wf_keys[max_timeout].name, "max_timeout"));
	if (L->n_wfs == 0)
		return L->parse_errors > 0
		           ? -EINVAL
		           : fail(L, L->path,
		                  "no [workflow.NAME] section: this worker would run nothing");
	for (size_t i = 0; i < L->n_wfs; i++)
		if (!L->wfs[i].wf.argv && !L->wfs[i].bad[WF_COMMAND] &&
		    (r = fail(L, L->wfs[i].where, "workflow.%s: command is not set",
		              L->wfs[i].wf.name)) == -ENOMEM)
			return r;
	if (r < 0)
		return r;
	for (size_t i = 0; i < L->n_wfs; i++) {
		struct wf_state *s = &L->wfs[i];

		if (!s->origin[timeout])
			s->wf.timeout = c->worker.run_timeout;
		if (!s->origin[max_log])
			s->wf.max_log_bytes = c->worker.max_log_bytes;
		if (!s->wf.user && c->worker.run_user) {
			if (!(s->wf.user = strdup(c->worker.run_user)))
				return -ENOMEM;
			s->wf.uid = c->worker.run_uid;
			s->wf.gid = c->worker.run_gid;
		}
		if (!s->origin[max_timeout])
			s->wf.max_timeout = c->worker.max_timeout;
		if ((r = check_run_caps(L, &s->wf, s->origin[timeout] != NULL)) < 0)
			return r;
		env_dedup(s->wf.env);
	}
	c->workflows = calloc(L->n_wfs, sizeof(*c->workflows));
	if (!c->workflows)
		return -ENOMEM;
	for (size_t i = 0; i < L->n_wfs; i++) {
		c->workflows[i] = L->wfs[i].wf;
		L->wfs[i].moved_name = c->workflows[i].name;
		L->wfs[i].wf = (struct conf_workflow){0};
	}
	c->n_workflows = L->n_wfs;
	qsort(c->workflows, c->n_workflows, sizeof(*c->workflows), wf_cmp);
	return 0;
}

/* ---- the token ---- */

/* A secret file's contents, trimmed: one word of printable ASCII (it goes
 * into an HTTP header or a JSON string: `use`).  The raw bytes are wiped. */
static int secret_take(struct loader *L, int fd, const char *path, const char *origin,
                       const char *key, const char *use, char **ret)
{
	_cleanup_free_ char *raw = NULL;
	size_t len = 0;
	char *t;
	int r = read_fd_capped(fd, TOKEN_FILE_MAX, &raw, &len);

	if (r < 0)
		return r == -ENOMEM ? r
		                    : fail(L, origin, "api.%s: %s: %s", key, path,
		                           io_problem(r, TOKEN_FILE_MAX));
	t = str_trim(raw);
	if (!*t)
		r = fail(L, origin, "api.%s: %s is empty", key, path);
	for (const char *c = t; r >= 0 && *c; c++)
		if ((unsigned char)*c <= 0x20 || (unsigned char)*c >= 0x7f)
			r = fail(L, origin,
			         "api.%s: %s holds whitespace, control or non-ASCII bytes "
			         "(it goes into %s)",
			         key, path, use);
	if (r >= 0 && !(*ret = strdup(t)))
		r = -ENOMEM;
	explicit_bzero(raw, len);
	return r;
}

static int token_take(struct loader *L, int fd, const char *path, const char *origin)
{
	int r = secret_take(L, fd, path, origin, "token_file", "an HTTP header", &L->c->api.token);

	if (r >= 0 && !(L->c->api.token_path = strdup(path)))
		r = -ENOMEM;
	return r;
}

/* token_file, else $CREDENTIALS_DIRECTORY/api-token (systemd LoadCredential=). */
static int load_token(struct loader *L)
{
	const char *path = L->c->api.token_file, *dir;
	const char *origin = origin_of(L, "api", "token_file");
	_cleanup_free_ char *cred = NULL;
	_cleanup_close_ int fd = -1;
	struct stat st;

	if (streq(L->c->api.protocol, "conductor"))
		return 0; /* it authenticates with key_id (check_protocol refuses token_file) */
	if (!path) {
		dir = env_get(L->src->env, "CREDENTIALS_DIRECTORY");
		if (!dir || dir[0] != '/')
			return 0;
		if (asprintf(&cred, "%s/api-token", dir) < 0)
			return -ENOMEM;
		path = origin = cred;
	}
	fd = open_regular(path, &st);
	if (fd == -ENOENT && cred)
		return 0;
	if (fd < 0)
		return fail(L, origin, "api.token_file: %s: %s", path, io_problem(fd, 0));
	if (st.st_mode & (S_IROTH | S_IWOTH))
		return fail(L, origin,
		            "api.token_file: %s is accessible by others (mode %04o): "
		            "chmod o-rwx it",
		            path, (unsigned)(st.st_mode & 07777));
	return token_take(L, fd, path, origin);
}

/* Conductor's key secret, read now like the token: a missing or open file is a
 * configuration error, not a failure at the first request. */
static int load_key_secret(struct loader *L)
{
	const char *path = L->c->api.key_secret_file;
	const char *origin = origin_of(L, "api", "key_secret_file");
	_cleanup_close_ int fd = -1;
	struct stat st;

	if (!path || !streq(L->c->api.protocol, "conductor"))
		return 0;
	fd = open_regular(path, &st);
	if (fd < 0)
		return fail(L, origin, "api.key_secret_file: %s: %s", path, io_problem(fd, 0));
	if (st.st_mode & (S_IROTH | S_IWOTH))
		return fail(L, origin,
		            "api.key_secret_file: %s is accessible by others (mode %04o): "
		            "chmod o-rwx it",
		            path, (unsigned)(st.st_mode & 07777));
	return secret_take(L, fd, path, origin, "key_secret_file", "a JSON request",
	                   &L->c->api.key_secret);
}

/* Camunda 7's HTTP basic password, read now like the token. */
static int load_password(struct loader *L)
{
	const char *path = L->c->api.password_file;
	const char *origin = origin_of(L, "api", "password_file");
	_cleanup_close_ int fd = -1;
	struct stat st;

	if (!path || !streq(L->c->api.protocol, "camunda7"))
		return 0;
	fd = open_regular(path, &st);
	if (fd < 0)
		return fail(L, origin, "api.password_file: %s: %s", path, io_problem(fd, 0));
	if (st.st_mode & (S_IROTH | S_IWOTH))
		return fail(L, origin,
		            "api.password_file: %s is accessible by others (mode %04o): "
		            "chmod o-rwx it",
		            path, (unsigned)(st.st_mode & 07777));
	return secret_take(L, fd, path, origin, "password_file", "an HTTP header",
	                   &L->c->api.password);
}

/* ---- the protocol's own keys ---- */

#define WF_TASK_TYPE 8

/* Where a workflow's key was set (its section when it was not); the workflow
 * may have moved to c->workflows already. */
static const char *wf_origin(const struct loader *L, const char *name, size_t key)
{
	for (size_t i = 0; i < L->n_wfs; i++) {
		const struct wf_state *s = &L->wfs[i];

		if (streq_ptr(s->wf.name ? s->wf.name : s->moved_name, name))
			return s->origin[key] ? s->origin[key] : s->where;
	}
	return L->path;
}

/* Where a workflow's own key was set, NULL when it was not. */
static const char *wf_key_set(const struct loader *L, const char *name, size_t key)
{
	for (size_t i = 0; i < L->n_wfs; i++) {
		const struct wf_state *s = &L->wfs[i];

		if (streq_ptr(s->wf.name ? s->wf.name : s->moved_name, name))
			return s->origin[key];
	}
	return NULL;
}

static size_t wf_key_index(const char *name)
{
	for (size_t i = 0; i < conf_n_wf_keys; i++)
		if (streq(conf_wf_keys[i].name, name))
			return i;
	assert(!"no such workflow key");
	return 0;
}

/* The [api] keys of one driver, an error with another; its [workflow.X] keys
 * mean nothing to another driver: said once per workflow, not an error. */
struct driver_keys {
	const char *protocol;
	const char *const *api;
	const char *const *wf;
	const char *what; /* what its workflow keys are about */
};

static const struct driver_keys driver_keys[] = {
    {"conductor", (const char *const[]){"key_id", "key_secret_file", "domain", NULL},
     (const char *const[]){"task_type", NULL}, "the Conductor task type to poll"},
    {"camunda7", (const char *const[]){"user", "password_file", NULL},
     (const char *const[]){"topic", "variables", "retries", "retry_backoff", "retry_backoff_max",
                           "local_variables", NULL},
     "Camunda 7's external tasks"},
};

/* [workflow.X] keys Camunda 7 takes but has no use for */
static const char *const camunda7_ignored[] = {"terminal_exit_codes", NULL};

static bool among(const char *const *names, const char *name)
{
	for (size_t i = 0; names[i]; i++)
		if (streq(names[i], name))
			return true;
	return false;
}

bool conf_key_foreign(const char *protocol, const char *section, const char *name)
{
	bool api = streq(section, "api");

	if (!api && streq(protocol, "camunda7") && among(camunda7_ignored, name))
		return true;
	for (size_t d = 0; d < ELEMENTSOF(driver_keys); d++)
		if (!streq(protocol, driver_keys[d].protocol) &&
		    among(api ? driver_keys[d].api : driver_keys[d].wf, name))
			return true;
	return false;
}

static int check_foreign_keys(struct loader *L)
{
	const struct conf *c = L->c;
	int r = 0;

	for (size_t d = 0; d < ELEMENTSOF(driver_keys); d++) {
		const struct driver_keys *k = &driver_keys[d];

		if (streq(c->api.protocol, k->protocol))
			continue;
		for (size_t i = 0; k->api[i]; i++) {
			_cleanup_free_ char *v =
			    conf_value_format(&conf_keys[key_index("api", k->api[i])], c, false);

			if (!v)
				return -ENOMEM;
			if (*v && (r = fail(L, origin_of(L, "api", k->api[i]),
			                    "api.%s: only with api.protocol = %s", k->api[i],
			                    k->protocol)) == -ENOMEM)
				return r;
		}
		for (size_t w = 0; w < c->n_workflows; w++)
			for (size_t i = 0; k->wf[i]; i++)
				if (wf_key_set(L, c->workflows[w].name, wf_key_index(k->wf[i])) &&
				    warn(L, "workflow.%s.%s is ignored with api.protocol = %s (%s)",
				         c->workflows[w].name, k->wf[i], c->api.protocol,
				         k->what) < 0)
					return -ENOMEM;
	}
	return r;
}

static int check_conductor_keys(struct loader *L)
{
	const struct conf_api *a = &L->c->api;
	int r = 0;

	if (a->key_id && !a->key_secret_file)
		r = fail(L, origin_of(L, "api", "key_id"),
		         "api.key_id is set but api.key_secret_file is not");
	else if (!a->key_id && a->key_secret_file)
		r = fail(L, origin_of(L, "api", "key_secret_file"),
		         "api.key_secret_file is set but api.key_id is not");
	if (r != -ENOMEM && a->token_file)
		r = fail(L, origin_of(L, "api", "token_file"),
		         "api.token_file: Conductor authenticates with api.key_id and "
		         "api.key_secret_file (POST /api/token), not with a bearer token");
	return r;
}

/* Each workflow's task type or topic (`key`, a char * at `offset`): the
 * workflow's name by default, and one workflow's alone. */
static int check_unique_names(struct loader *L, const char *key, size_t offset, const char *what)
{
	struct conf *c = L->c;
	size_t k = wf_key_index(key);
	int r = 0;

#define NAME_OF(i) (*(char **)((char *)&c->workflows[i] + offset))
	for (size_t i = 0; i < c->n_workflows; i++)
		if (!NAME_OF(i) && !(NAME_OF(i) = strdup(c->workflows[i].name)))
			return -ENOMEM;
	for (size_t i = 0; i < c->n_workflows && r != -ENOMEM; i++)
		for (size_t j = 0; j < i && r != -ENOMEM; j++)
			if (streq(NAME_OF(i), NAME_OF(j))) {
				r = fail(
				    L, wf_origin(L, c->workflows[i].name, k),
				    "workflow.%s.%s '%s' is also the %s of workflow.%s: a task "
				    "could not be told apart",
				    c->workflows[i].name, key, NAME_OF(i), what,
				    c->workflows[j].name);
				break;
			}
#undef NAME_OF
	return r;
}

static int check_task_types(struct loader *L)
{
	return check_unique_names(L, "task_type", offsetof(struct conf_workflow, task_type),
	                          "task type");
}

/* Camunda 7: HTTP basic (both halves) or a bearer token; a topic per
 * workflow; a backoff cap not below its base; keys of no meaning warned. */
static int check_camunda7_keys(struct loader *L)
{
	const struct conf *c = L->c;
	const struct conf_api *a = &c->api;
	char x[TIME_DURATION_MAX], y[TIME_DURATION_MAX];
	int r = 0;

	if (a->user && a->token_file)
		r = fail(L, origin_of(L, "api", "user"),
		         "api.user and api.token_file: HTTP basic or a bearer token, not both");
	else if (a->user && !a->password_file)
		r = fail(L, origin_of(L, "api", "user"),
		         "api.user is set but api.password_file is not");
	else if (!a->user && a->password_file)
		r = fail(L, origin_of(L, "api", "password_file"),
		         "api.password_file is set but api.user is not");
	if (r == -ENOMEM || !c->workflows)
		return r;
	if (check_unique_names(L, "topic", offsetof(struct conf_workflow, topic), "topic") ==
	    -ENOMEM)
		return -ENOMEM;
	for (size_t i = 0; i < c->n_workflows && r != -ENOMEM; i++) {
		const struct conf_workflow *w = &c->workflows[i];

		if (w->retry_backoff_max < w->retry_backoff)
			r = fail(
			    L, wf_origin(L, w->name, wf_key_index("retry_backoff_max")),
			    "workflow.%s.retry_backoff_max (%s) is below workflow.%s.retry_backoff "
			    "(%s)",
			    w->name, time_format_duration(x, sizeof(x), w->retry_backoff_max),
			    w->name, time_format_duration(y, sizeof(y), w->retry_backoff));
		for (size_t k = 0; camunda7_ignored[k] && r != -ENOMEM; k++)
			if (wf_key_set(L, w->name, wf_key_index(camunda7_ignored[k])) &&
			    warn(L,
			         "workflow.%s.%s is ignored with api.protocol = camunda7 (every "
			         "failure but exit 75, a timeout and a crash is an incident "
			         "already)",
			         w->name, camunda7_ignored[k]) < 0)
				return -ENOMEM;
	}
	return r;
}

/* lease_refresh is the keep-alive: a task whose responseTimeoutSeconds is not
 * above it times out on the server between two of them.  Each task type is
 * checked again when its first task arrives (lib/proto/drv_conductor.c). */
#define CONDUCTOR_REFRESH_MAX (10 * SEC)

static int check_conductor_refresh(struct loader *L)
{
	const struct conf_worker *w = &L->c->worker;
	char a[TIME_DURATION_MAX], b[TIME_DURATION_MAX];

	if (w->lease_refresh <= CONDUCTOR_REFRESH_MAX)
		return 0;
	return warn(L,
	            "worker.lease_refresh (%s) must be below every task type's "
	            "responseTimeoutSeconds, or Conductor times a task out between two "
	            "keep-alives: with api.protocol = conductor keep it at %s or less (each task "
	            "type is checked again when its first task arrives)",
	            time_format_duration(a, sizeof(a), w->lease_refresh),
	            time_format_duration(b, sizeof(b), CONDUCTOR_REFRESH_MAX));
}

static int check_protocol(struct loader *L)
{
	int r;

	assert(streq(conf_wf_keys[WF_TASK_TYPE].name, "task_type"));
	if (key_bad(L, "api", "protocol"))
		return 0;
	if ((r = check_foreign_keys(L)) == -ENOMEM)
		return r;
	if (streq(L->c->api.protocol, "camunda7"))
		return check_camunda7_keys(L) == -ENOMEM ? -ENOMEM : r;
	if (!streq(L->c->api.protocol, "conductor"))
		return r;
	r = check_conductor_keys(L) == -ENOMEM ? -ENOMEM : r;
	if (r != -ENOMEM && L->c->workflows)
		r = check_task_types(L) == -ENOMEM ? -ENOMEM : r;
	if (r != -ENOMEM && check_conductor_refresh(L) < 0)
		r = -ENOMEM;
	return r;
}

/* ---- transport: plain http, client certificates ---- */

/* The host of an http(s) URL (check_url() validated it): "[::1]" -> "::1". */
static char *url_host(const char *url)
{
	const char *h = strstr(url, "://") + 3;
	size_t n = strcspn(h, "/");

	if (h[0] == '[') {
		const char *end = memchr(h, ']', n);

		return end ? strndup(h + 1, (size_t)(end - h - 1)) : strndup(h, n);
	}
	return strndup(h, strcspn(h, ":/"));
}

/* 127.0.0.0/8, ::1 (also as ::ffff:127.x.y.z) and the name localhost.  IP
 * literals are read strictly (inet_pton): "127.1" or "127.evil.example" are
 * names, and names other than localhost are remote. */
static bool host_is_loopback(const char *host)
{
	struct in6_addr a6;
	struct in_addr a4;

	if (strcasecmp(host, "localhost") == 0 || strcasecmp(host, "localhost.") == 0)
		return true;
	if (inet_pton(AF_INET, host, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	if (inet_pton(AF_INET6, host, &a6) == 1)
		return IN6_IS_ADDR_LOOPBACK(&a6) ||
		       (IN6_IS_ADDR_V4MAPPED(&a6) && a6.s6_addr[12] == 127);
	return false;
}

/* NULL when url is https:// or plain http:// to loopback, else its host. */
static char *url_plain_remote_host(const char *url, int *ret)
{
	char *host;

	*ret = 0;
	if (!startswith(url, "http://"))
		return NULL;
	host = url_host(url);
	if (!host)
		*ret = -ENOMEM;
	else if (host_is_loopback(host))
		host = mfree(host);
	return host;
}

static bool url_is_plain_remote(const char *url)
{
	int r;
	_cleanup_free_ char *host = url_plain_remote_host(url, &r);

	return host || r < 0;
}

static int check_plain_http(struct loader *L)
{
	const struct conf_api *a = &L->c->api;
	int r;
	_cleanup_free_ char *host = url_plain_remote_host(a->url, &r);

	if (r < 0 || !host || a->allow_insecure_http)
		return r;
	return fail(L, origin_of(L, "api", "url"),
	            "api.url: plain http:// to %s, which is not loopback: the API token, run "
	            "inputs and logs would cross the network unencrypted; use https://, or set "
	            "api.allow_insecure_http = yes to accept that",
	            host);
}

/* Readable now, so --check-config finds it; the key not open to others. */
static int check_tls_file(struct loader *L, const char *name, const char *path, bool secret)
{
	const char *origin = origin_of(L, "api", name);
	struct stat st;
	_cleanup_close_ int fd = open_regular(path, &st);

	if (fd < 0)
		return fail(L, origin, "api.%s: %s: %s", name, path, io_problem(fd, 0));
	if (secret && (st.st_mode & (S_IROTH | S_IWOTH)))
		return fail(L, origin,
		            "api.%s: %s is accessible by others (mode %04o): chmod o-rwx it", name,
		            path, (unsigned)(st.st_mode & 07777));
	return 0;
}

static int check_client_cert(struct loader *L)
{
	const struct conf_api *a = &L->c->api;
	int r;

	if (!a->client_cert && !a->client_key)
		return 0;
	if (!a->client_key)
		return fail(L, origin_of(L, "api", "client_cert"),
		            "api.client_cert is set but api.client_key is not");
	if (!a->client_cert)
		return fail(L, origin_of(L, "api", "client_key"),
		            "api.client_key is set but api.client_cert is not");
	if (!startswith(a->url, "https://"))
		return fail(L, origin_of(L, "api", "client_cert"),
		            "api.client_cert: client certificates need an https:// api.url");
	r = check_tls_file(L, "client_cert", a->client_cert, false);
	return r < 0 ? r : check_tls_file(L, "client_key", a->client_key, true);
}

static int check_transport(struct loader *L)
{
	const char *ca = L->c->api.ca_file;
	int r = ca ? check_tls_file(L, "ca_file", ca, false) : 0;

	if (r >= 0)
		r = check_client_cert(L);
	if (r < 0 && r != -EINVAL)
		return r;
	/* no URL (already reported) or one refused by the parser: nothing to judge */
	if (!L->c->api.url || L->parse_errors > 0)
		return r;
	return check_plain_http(L) < 0 ? -EINVAL : r;
}

/* ---- warnings ---- */

_printf_(2, 3) static int warn(struct loader *L, const char *fmt, ...)
{
	char *msg = NULL;
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&msg, fmt, ap);
	va_end(ap);
	return n < 0 ? -ENOMEM : strv_push(&L->c->warnings, msg);
}

/* May lessee drop a run to another user (setgroups, setresgid, setresuid)?
 * Root, or an unprivileged daemon with the capabilities (the shipped units'
 * AmbientCapabilities=). */
static bool can_change_ids(void)
{
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3] = {{0}};
	const uint32_t need = (1U << CAP_SETUID) | (1U << CAP_SETGID);

	if (syscall(SYS_capget, &h, d) < 0)
		return geteuid() == 0;
	return (d[0].effective & need) == need;
}

static int collect_warnings(struct loader *L)
{
	const struct conf *c = L->c;
	int r = 0;

	if (L->n_errors > 0)
		return 0; /* not loaded: the errors are what matters */
	if (url_is_plain_remote(c->api.url))
		r = warn(L,
		         "api.url is plain http:// to a remote host (api.allow_insecure_http = "
		         "yes): %srun inputs, results and logs cross the network unencrypted",
		         c->api.token ? "the API token, " : "");
	for (size_t i = 0; i < c->n_workflows && r >= 0; i++)
		if (c->workflows[i].user && c->workflows[i].uid != geteuid() && !can_change_ids())
			r = warn(L,
			         "workflow.%s: user=%s needs lessee to run as root or with "
			         "CAP_SETUID and CAP_SETGID; its runs will fail to start",
			         c->workflows[i].name, c->workflows[i].user);
	return r;
}

/* ---- the whole load ---- */

static int loader_init(struct loader *L)
{
	L->c = calloc(1, sizeof(*L->c));
	L->origin = calloc(conf_n_keys, sizeof(char *));
	L->bad = calloc(conf_n_keys, sizeof(bool));
	L->errors = calloc(1, sizeof(char *));
	if (!L->c || !L->origin || !L->bad || !L->errors)
		return -ENOMEM;
	L->c->sources = calloc(1, sizeof(char *));
	L->c->warnings = calloc(1, sizeof(char *));
	return L->c->sources && L->c->warnings ? 0 : -ENOMEM;
}

static void loader_done(struct loader *L)
{
	for (size_t i = 0; i < L->n_wfs; i++)
		wf_state_done(&L->wfs[i]);
	free(L->wfs);
	for (size_t i = 0; L->origin && i < conf_n_keys; i++)
		free(L->origin[i]);
	free(L->origin);
	free(L->bad);
	strv_free(L->errors);
	conf_free(L->c);
}

int conf_load(const struct conf_source *src, struct conf **ret, char **ret_error)
{
	static int (*const steps[])(struct loader *) = {
	    loader_init,     load_defaults,    load_main,       load_dropins, load_env,
	    load_overrides,  check_url_given,  finalize_id,     check_files,  finalize_workflows,
	    check_relations, check_protocol,   check_transport, load_token,   load_key_secret,
	    load_password,   collect_warnings,
	};
	static const struct conf_source none = {0};
	struct loader L = {.src = src ? src : &none};
	int r = 0;

	/* a refused value is reported and loading goes on: every error at once */
	L.path = L.src->path ? L.src->path : CONF_DEFAULT_PATH;
	for (size_t i = 0; i < ELEMENTSOF(steps) && (r >= 0 || r == -EINVAL); i++)
		r = steps[i](&L);
	if (r >= 0 && L.n_errors > 0)
		r = -EINVAL;
	if (r >= 0)
		*ret = TAKE_PTR(L.c);
	else if (ret_error && r == -EINVAL)
		*ret_error = errors_join(&L);
	loader_done(&L);
	return r;
}

struct conf *conf_free(struct conf *c)
{
	if (!c)
		return NULL;
	for (size_t i = 0; i < conf_n_keys; i++)
		conf_value_free(&conf_keys[i], c);
	for (size_t i = 0; i < c->n_workflows; i++)
		workflow_done(&c->workflows[i]);
	free(c->workflows);
	if (c->api.token)
		explicit_bzero(c->api.token, strlen(c->api.token));
	free(c->api.token);
	free(c->api.token_path);
	if (c->api.key_secret)
		explicit_bzero(c->api.key_secret, strlen(c->api.key_secret));
	free(c->api.key_secret);
	if (c->api.password)
		explicit_bzero(c->api.password, strlen(c->api.password));
	free(c->api.password);
	strv_free(c->sources);
	strv_free(c->warnings);
	free(c);
	return NULL;
}

const struct conf_workflow *conf_find_workflow(const struct conf *c, const char *name)
{
	struct conf_workflow key = {.name = (char *)(uintptr_t)name};

	if (!c || !name || c->n_workflows == 0)
		return NULL;
	return bsearch(&key, c->workflows, c->n_workflows, sizeof(key), wf_cmp);
}
