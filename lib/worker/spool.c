/* The spool: completions the daemon could not deliver before it had to exit.
 *
 * One entry per lease: "<run id>@<token hash>.complete" holds the complete
 * body, and "<run id>@<token hash>.log", when present, the log bytes the
 * server still lacked ("lessee-log-tail <offset>\n" then the raw bytes).  Run
 * ids are validated to a charset without '@', so the name parses back.  Each
 * file is written atomically and fsync'd, the log tail first; delivering or
 * refusing an entry removes only that entry's files, never those of another
 * lease of the same run. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"
#include "worker/spool.h"
#include "proto/driver.h"

#define SPOOL_SUFFIX ".complete"
#define SPOOL_LOG_SUFFIX ".log"
#define SPOOL_TMP_INFIX ".tmp" /* write_file_atomic's "<path>.tmpXXXXXX" */
#define TAIL_HEADER "lessee-log-tail "

size_t spool_max_body(uint64_t max_output_bytes)
{
	/* The output is the result file's JSON reprinted by cJSON: a raw control
	 * byte inside a string (which its parser accepts) comes back as \u00XX,
	 * six times as long; nothing grows more.  The rest of the body (fields,
	 * the error text escaped) stays well under the slack. */
	uint64_t cap = 6 * max_output_bytes + SPOOL_BODY_SLACK;

	return cap > SIZE_MAX / 2 ? SIZE_MAX / 2 : (size_t)cap;
}

/* FNV-1a: the file name carries the lease, not the secret itself. */
static uint64_t token_hash(const char *token)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (const unsigned char *p = (const unsigned char *)token; *p; p++)
		h = (h ^ *p) * 0x100000001b3ull;
	return h;
}

int spool_entry_name(const char *run_id, const char *token, char *buf, size_t len)
{
	if (!proto_valid_id(run_id) || !token)
		return -EINVAL;
	if ((size_t)snprintf(buf, len, "%s@%016" PRIx64, run_id, token_hash(token)) >= len)
		return -ENAMETOOLONG;
	return 0;
}

static int entry_path(const char *dir, const char *name, const char *suffix, char *buf, size_t len)
{
	if ((size_t)snprintf(buf, len, "%s/%s%s", dir, name, suffix) >= len)
		return -ENAMETOOLONG;
	return 0;
}

static int unlink_entry_file(const char *dir, const char *name, const char *suffix)
{
	char path[PATH_MAX];
	int r = entry_path(dir, name, suffix, path, sizeof(path));

	if (r < 0)
		return r;
	return unlink(path) < 0 && errno != ENOENT ? -errno : 0;
}

static int write_tail(const char *path, const struct spool_tail *t)
{
	_cleanup_free_ char *data = NULL;
	char head[64 + LOGSHIP_MAYBE_MAX * 21];
	int n = snprintf(head, sizeof(head), TAIL_HEADER "%" PRIu64 " %d %u", t->where.offset,
	                 t->where.synced, t->attempt);

	if (t->len > SPOOL_TAIL_MAX)
		return -EFBIG;
	for (unsigned i = 0; i < t->where.n_maybe && i < LOGSHIP_MAYBE_MAX; i++)
		n += snprintf(head + n, sizeof(head) - (size_t)n, " %" PRIu64, t->where.maybe[i]);
	n += snprintf(head + n, sizeof(head) - (size_t)n, "\n");
	data = malloc((size_t)n + t->len);
	if (!data)
		return -ENOMEM;
	memcpy(data, head, (size_t)n);
	memcpy(data + n, t->data, t->len);
	return write_file_atomic(path, data, (size_t)n + t->len, 0600);
}

int spool_write(const char *dir, const char *name, const char *complete_body, size_t max_body,
                const struct spool_tail *tail)
{
	char path[PATH_MAX];
	size_t len = strlen(complete_body);
	int r;

	if (len > max_body)
		return -EFBIG;
	r = mkdir_p(dir, 0700);
	if (r >= 0 && tail && tail->len > 0) {
		r = entry_path(dir, name, SPOOL_LOG_SUFFIX, path, sizeof(path));
		if (r >= 0)
			r = write_tail(path, tail);
	}
	if (r >= 0)
		r = entry_path(dir, name, SPOOL_SUFFIX, path, sizeof(path));
	if (r >= 0)
		r = write_file_atomic(path, complete_body, len, 0600);
	if (r < 0)
		unlink_entry_file(dir, name, SPOOL_LOG_SUFFIX);
	return r;
}

int spool_remove(const char *dir, const char *name)
{
	int r = unlink_entry_file(dir, name, SPOOL_SUFFIX);

	/* the body first: a crash in between leaves an orphan tail, cleaned at start */
	if (r >= 0)
		r = unlink_entry_file(dir, name, SPOOL_LOG_SUFFIX);
	return r;
}

/* The run id in an entry's stem: "<id>@<hash>", or "<id>" as older lessees named it. */
static char *stem_run_id(const char *stem)
{
	const char *at = strchr(stem, '@');
	char *id = at ? strndup(stem, (size_t)(at - stem)) : strdup(stem);

	if (id && !proto_valid_id(id)) {
		free(id);
		return NULL;
	}
	return id;
}

static char *name_stem(const char *name, const char *suffix)
{
	size_t n = strlen(name), s = strlen(suffix);

	if (n <= s || strcmp(name + n - s, suffix) != 0)
		return NULL;
	return strndup(name, n - s);
}

static int parse_tail_header(const char *p, const char *nl, struct spool_entry *e)
{
	unsigned long long v[3 + LOGSHIP_MAYBE_MAX];
	unsigned n = 0;
	char *end;

	while (p < nl && n < ELEMENTSOF(v)) {
		errno = 0;
		v[n++] = strtoull(p, &end, 10);
		if (errno || end == p || (*end != ' ' && end != nl))
			return -EBADMSG;
		p = end + (end < nl);
	}
	if (n < 3 || p < nl || v[1] > 1 || v[2] > UINT_MAX)
		return -EBADMSG;
	e->where = (struct logship_resume){.offset = v[0], .synced = v[1], .n_maybe = n - 3};
	e->attempt = (unsigned)v[2];
	for (unsigned i = 3; i < n; i++)
		e->where.maybe[i - 3] = v[i];
	return 0;
}

static int read_tail(const char *dir, const char *stem, struct spool_entry *e)
{
	_cleanup_free_ char *data = NULL;
	char path[PATH_MAX], *nl;
	size_t len;
	int r = entry_path(dir, stem, SPOOL_LOG_SUFFIX, path, sizeof(path));

	if (r >= 0)
		r = read_file_capped(path, SPOOL_TAIL_MAX + 512, &data, &len);
	if (r == -ENOENT)
		return 0;
	if (r < 0)
		return r;
	nl = memchr(data, '\n', len);
	if (!nl || !startswith(data, TAIL_HEADER) ||
	    parse_tail_header(data + strlen(TAIL_HEADER), nl, e) < 0)
		return -EBADMSG;
	e->tail_len = len - (size_t)(nl + 1 - data);
	memmove(data, nl + 1, e->tail_len);
	e->tail = TAKE_PTR(data);
	return 0;
}

static int load_entry(const char *dir, const char *stem, size_t max_body, struct spool_entry *e)
{
	char path[PATH_MAX];
	int r = entry_path(dir, stem, SPOOL_SUFFIX, path, sizeof(path));

	if (r >= 0)
		r = read_file_capped(path, max_body, &e->body, NULL);
	if (r >= 0)
		r = read_tail(dir, stem, e);
	return r;
}

void spool_entry_done(struct spool_entry *e)
{
	free(e->name);
	free(e->run_id);
	free(e->body);
	free(e->tail);
	*e = (struct spool_entry){0};
}

int spool_foreach(const char *dir, size_t max_body, spool_fn fn, void *ud)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int r = 0;

	if (!d)
		return errno == ENOENT ? 0 : -errno;
	while ((de = readdir(d)) && r >= 0) {
		struct spool_entry e = {.name = name_stem(de->d_name, SPOOL_SUFFIX)};

		if (!e.name || !(e.run_id = stem_run_id(e.name))) {
			spool_entry_done(&e);
			continue;
		}
		e.error = load_entry(dir, e.name, max_body, &e);
		r = fn(&e, ud); /* takes the entry */
	}
	closedir(d);
	return r;
}

/* A crash leaves write_file_atomic's temporaries, and a tail whose body was
 * never written (or was removed first): neither is an entry. */
static bool stale_name(const char *dir, const char *name)
{
	_cleanup_free_ char *stem = NULL;
	const char *t = strstr(name, SPOOL_SUFFIX SPOOL_TMP_INFIX);
	char path[PATH_MAX];

	if (!t)
		t = strstr(name, SPOOL_LOG_SUFFIX SPOOL_TMP_INFIX);
	if (t)
		return true;
	stem = name_stem(name, SPOOL_LOG_SUFFIX);
	if (!stem || entry_path(dir, stem, SPOOL_SUFFIX, path, sizeof(path)) < 0)
		return false;
	return access(path, F_OK) < 0 && errno == ENOENT;
}

int spool_clean(const char *dir, void (*fn)(const char *name, void *ud), void *ud)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	if (!d)
		return errno == ENOENT ? 0 : -errno;
	while ((de = readdir(d))) {
		char path[PATH_MAX];

		if (de->d_name[0] == '.' || !stale_name(dir, de->d_name) ||
		    (size_t)snprintf(path, sizeof(path), "%s/%s", dir, de->d_name) >= sizeof(path))
			continue;
		if (unlink(path) >= 0) {
			n++;
			if (fn)
				fn(de->d_name, ud);
		}
	}
	closedir(d);
	return n;
}

static int count_one(struct spool_entry *e, void *ud)
{
	(*(int *)ud)++;
	spool_entry_done(e);
	return 0;
}

int spool_count(const char *dir)
{
	int n = 0, r = spool_foreach(dir, SPOOL_BODY_SLACK, count_one, &n);

	return r < 0 ? r : n;
}

/* A v1 body's top-level "log_length" (the native driver's rule). */
int spool_body_set_log_length(char **body, uint64_t log_length)
{
	return drv_native_ops.body_set_log_length(body, log_length);
}
