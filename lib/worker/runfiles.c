/* What a run leaves in its directory, dealt with off the loop (lib/offload):
 * the result file, read as the run's own user would, and the removal of a
 * directory the run left files in.  The work functions run on helper threads: they touch only their
 * job.  docs/architecture.md, "Off the loop". */
#include <cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log/log.h"
#include "util/fileio.h"
#include "util/macro.h"
#include "worker/run.h"

#define RESULT_NAME "result.json"
#define INPUT_NAME "input.json"

static const char *file_kind(mode_t m)
{
	if (S_ISLNK(m))
		return "a symbolic link";
	if (S_ISFIFO(m))
		return "a FIFO";
	if (S_ISCHR(m))
		return "a character device";
	if (S_ISBLK(m))
		return "a block device";
	if (S_ISSOCK(m))
		return "a socket";
	if (S_ISDIR(m))
		return "a directory";
	return "of an unknown type";
}

static void result_fail(struct result_job *j, int err, const char *fmt, ...) _printf_(3, 4);
static void result_fail(struct result_job *j, int err, const char *fmt, ...)
{
	va_list ap;

	j->err = err;
	va_start(ap, fmt);
	vsnprintf(j->why, sizeof(j->why), fmt, ap);
	va_end(ap);
}

static void result_not_regular(struct result_job *j, mode_t m)
{
	result_fail(j, -EINVAL, "is %s, not a regular file", file_kind(m));
}

static void result_open_failed(struct result_job *j, int err)
{
	if (err == ELOOP)
		result_fail(j, -err, "is a symbolic link, not a regular file");
	else if (err == EACCES || err == EPERM)
		result_fail(j, -err, "is not readable by the run's user");
	else
		result_fail(j, -err, "cannot be opened: %s", strerrordesc_np(err));
}

/* Never blocks on what the child left: the directory and the file are opened
 * without following symlinks, the file non-blocking (a FIFO opens at once and
 * is refused by its type), and only a regular file within the cap is read. */
void result_job_work(void *arg)
{
	struct result_job *j = arg;
	_cleanup_close_ int dfd = -1, fd = -1;
	struct stat st;
	int q;

	dfd = open(j->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return result_fail(j, -errno, "cannot be reached: run directory: %s",
		                   strerrordesc_np(errno));
	if (fstatat(dfd, RESULT_NAME, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		if (errno != ENOENT)
			result_open_failed(j, errno);
		return; /* no result file: no output */
	}
	if (!S_ISREG(st.st_mode))
		return result_not_regular(j, st.st_mode);
	fd = openat(dfd, RESULT_NAME, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0) {
		if (errno != ENOENT)
			result_open_failed(j, errno);
		return;
	}
	if (fstat(fd, &st) < 0)
		return result_fail(j, -errno, "cannot be examined: %s", strerrordesc_np(errno));
	if (!S_ISREG(st.st_mode))
		return result_not_regular(j, st.st_mode);
	/* a hard link to a file the daemon may read (CAP_DAC_OVERRIDE) and the run may not */
	if (st.st_uid != j->owner)
		return result_fail(j, -EPERM, "is not owned by the run's user (uid %u, owner %u)",
		                   (unsigned)j->owner, (unsigned)st.st_uid);
	if ((uint64_t)st.st_size > j->cap)
		return result_fail(j, -EFBIG, "is larger than max_output_bytes (%zu)", j->cap);
	q = read_fd_capped(fd, j->cap, &j->data, &j->len);
	if (q == -EFBIG)
		return result_fail(j, q, "is larger than max_output_bytes (%zu)", j->cap);
	if (q < 0)
		return result_fail(j, q, "cannot be read: %s", strerrordesc_np(-q));
	cJSON *json = cJSON_ParseWithLength(j->data, j->len);

	j->valid_json = json != NULL;
	cJSON_Delete(json);
}

bool runfiles_result_absent(const char *dir)
{
	char path[PATH_MAX];
	struct stat st;

	if ((size_t)snprintf(path, sizeof(path), "%s/" RESULT_NAME, dir) >= sizeof(path))
		return false;
	return lstat(path, &st) < 0 && errno == ENOENT;
}

struct result_job *result_job_free(struct result_job *j)
{
	if (j) {
		free(j->dir);
		free(j->data);
		free(j);
	}
	return NULL;
}

/* ---------------------------------------------------------------- removal */

struct removal {
	int r;
	char dir[];
};

static void remove_work(void *arg)
{
	struct removal *m = arg;

	m->r = rm_rf(m->dir);
}

/* What a run left that cannot go (another mount inside it, a file system
 * error) is said; the next start tries again (clean_stale_run_dirs). */
static void removal_failed(const char *dir, int r)
{
	log_warning("cannot remove the run directory %s: %s", dir, strerror(-r));
}

static void remove_done(void *arg, int r)
{
	struct removal *m = arg;

	if (r >= 0 && m->r < 0)
		removal_failed(m->dir, m->r);
	free(m);
}

/* What a run that wrote nothing leaves: its input file, then the empty
 * directory; two syscalls on the loop, no helper thread.  Anything else the
 * run left (a child controls how much) is removed by rm_rf on a helper thread.
 * The name is never reused (run.c counts its directories) and only the daemon
 * writes in lessee-<pid>, so the path names this tree until it is gone. */
void runfiles_remove(offload_t *o, const char *dir)
{
	char input[PATH_MAX];
	struct removal *m;
	int q;

	snprintf(input, sizeof(input), "%s/" INPUT_NAME, dir);
	if (unlink(input) < 0 && errno != ENOENT)
		goto offload;
	if (rmdir(dir) >= 0 || errno == ENOENT)
		return;
offload:
	m = malloc(sizeof(*m) + strlen(dir) + 1);
	if (m)
		strcpy(m->dir, dir);
	if (!m || offload_submit(o, NULL, remove_work, remove_done, m, NULL) < 0) {
		free(m);
		if ((q = rm_rf(dir)) < 0)
			removal_failed(dir, q);
	}
}
