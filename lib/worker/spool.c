/* The spool: completions the daemon could not deliver before it had to exit.
 * One file per run, named after the run id (ids are validated to a safe
 * charset), written atomically and fsync'd; delivered at the next start. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/fileio.h"
#include "util/macro.h"
#include "worker/worker-int.h"

#define SPOOL_SUFFIX ".complete"
#define SPOOL_MAX_BODY (8u << 20)

static int spool_path(const char *dir, const char *run_id, char *buf, size_t len)
{
	if (!proto_valid_id(run_id))
		return -EINVAL;
	if ((size_t)snprintf(buf, len, "%s/%s" SPOOL_SUFFIX, dir, run_id) >= len)
		return -ENAMETOOLONG;
	return 0;
}

int spool_write(const char *dir, const char *run_id, const char *complete_body)
{
	char path[PATH_MAX];
	int r = mkdir_p(dir, 0700);

	if (r < 0)
		return r;
	r = spool_path(dir, run_id, path, sizeof(path));
	if (r < 0)
		return r;
	return write_file_atomic(path, complete_body, strlen(complete_body), 0600);
}

int spool_remove(const char *dir, const char *run_id)
{
	char path[PATH_MAX];
	int r = spool_path(dir, run_id, path, sizeof(path));

	if (r < 0)
		return r;
	return unlink(path) < 0 && errno != ENOENT ? -errno : 0;
}

/* The run id of a spool file name, or NULL when it is not one of ours. */
static char *spool_name_id(const char *name)
{
	size_t n = strlen(name), s = strlen(SPOOL_SUFFIX);
	char *id;

	if (n <= s || strcmp(name + n - s, SPOOL_SUFFIX) != 0)
		return NULL;
	id = strndup(name, n - s);
	if (id && !proto_valid_id(id)) {
		free(id);
		return NULL;
	}
	return id;
}

int spool_foreach(const char *dir, int (*fn)(const char *run_id, char *body, void *ud), void *ud)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int r = 0;

	if (!d)
		return errno == ENOENT ? 0 : -errno;
	while ((de = readdir(d)) && r >= 0) {
		_cleanup_free_ char *id = spool_name_id(de->d_name);
		char path[PATH_MAX], *body = NULL;

		if (!id || spool_path(dir, id, path, sizeof(path)) < 0)
			continue;
		if (read_file_capped(path, SPOOL_MAX_BODY, &body, NULL) < 0)
			continue;
		r = fn(id, body, ud); /* takes body */
	}
	closedir(d);
	return r;
}

static int count_one(const char *run_id, char *body, void *ud)
{
	(*(int *)ud)++;
	free(body);
	return 0;
}

int spool_count(const char *dir)
{
	int n = 0, r = spool_foreach(dir, count_one, &n);

	return r < 0 ? r : n;
}
