#include "util/fileio.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/macro.h"
#include "util/strutil.h"

int read_fd_capped(int fd, size_t max, char **ret, size_t *ret_len)
{
	_cleanup_free_ char *buf = NULL;
	size_t len = 0, alloc = 0;

	for (;;) {
		ssize_t n;

		if (len + 1 >= alloc) {
			size_t na = alloc ? alloc * 2 : 4096;
			char *nb;

			if (na > max + 2)
				na = max + 2;
			if (na <= len + 1)
				return -EFBIG;
			nb = realloc(buf, na);
			if (!nb)
				return -ENOMEM;
			buf = nb;
			alloc = na;
		}
		n = read(fd, buf + len, alloc - len - 1);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			break;
		len += (size_t)n;
		if (len > max)
			return -EFBIG;
	}
	if (!buf && !(buf = malloc(1)))
		return -ENOMEM;
	buf[len] = '\0';
	*ret = TAKE_PTR(buf);
	if (ret_len)
		*ret_len = len;
	return 0;
}

/* Opened without waiting (a FIFO's open waits for a writer, for ever) and
 * read only when it is a regular file: else -EINVAL. */
int read_file_capped(const char *path, size_t max, char **ret, size_t *ret_len)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	struct stat st;

	if (fd < 0 || fstat(fd, &st) < 0)
		return -errno;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	return read_fd_capped(fd, max, ret, ret_len);
}

int write_all(int fd, const void *data, size_t len)
{
	const char *p = data;

	while (len > 0) {
		ssize_t n = write(fd, p, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int pwrite_all(int fd, const void *data, size_t len, off_t off)
{
	const char *p = data;

	while (len > 0) {
		ssize_t n = pwrite(fd, p, len, off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		p += n;
		off += n;
		len -= (size_t)n;
	}
	return 0;
}

static int fsync_parent(const char *path)
{
	_cleanup_free_ char *dir = strdup(path);
	char *slash;
	_cleanup_close_ int fd = -1;

	if (!dir)
		return -ENOMEM;
	slash = strrchr(dir, '/');
	if (!slash)
		strcpy(dir, ".");
	else if (slash == dir)
		slash[1] = '\0';
	else
		*slash = '\0';
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fsync(fd) < 0)
		return -errno;
	return 0;
}

int write_file_atomic(const char *path, const void *data, size_t len, mode_t mode)
{
	char tmp[PATH_MAX];
	_cleanup_close_ int fd = -1;
	int r;

	if (snprintf(tmp, sizeof(tmp), "%s.tmpXXXXXX", path) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0)
		return -errno;
	r = write_all(fd, data, len);
	if (r >= 0 && fchmod(fd, mode) < 0)
		r = -errno;
	if (r >= 0 && fsync(fd) < 0)
		r = -errno;
	if (r >= 0 && rename(tmp, path) < 0)
		r = -errno;
	if (r < 0) {
		unlink(tmp);
		return r;
	}
	return fsync_parent(path);
}

/* A directory made here gets exactly mode, not what the umask leaves of it
 * (the units' UMask=0077 would make a run directory's parents untraversable
 * for a run of another user). */
static int mkdir_one(const char *path, mode_t mode)
{
	if (mkdir(path, mode) < 0)
		return errno == EEXIST ? 0 : -errno;
	return chmod(path, mode) < 0 ? -errno : 0;
}

int mkdir_p(const char *path, mode_t mode)
{
	char buf[PATH_MAX];
	size_t len = strlen(path);
	int r;

	if (len == 0 || len >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, path, len + 1);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if ((r = mkdir_one(buf, mode)) < 0)
			return r;
		*p = '/';
	}
	return mkdir_one(buf, mode);
}

/* rm_rf holds at most this many directory fds: a deeper directory is moved
 * up into the top one and emptied there, in a later pass (a run may leave a
 * tree of any depth, and four removals run at once from the fd reserve). */
#define RM_DEPTH_MAX (RM_RF_FDS_MAX - 1)
#define RM_PASSES_MAX 65536

struct rm {
	int top;      /* the directory being emptied */
	dev_t dev;    /* its file system: never crossed */
	unsigned seq; /* names of the directories moved up */
	bool moved;   /* this pass moved one: another pass */
};

/* An entry its owner made unwritable, or a directory unreadable (a run may
 * chmod 000): as the owner, a daemon that is not root gives itself u+rwx
 * back and tries once more; root never needs to. */
static int retry_owner(int dfd, const char *name)
{
	if (errno != EACCES)
		return -errno;
	if (name ? fchmodat(dfd, name, 0700, AT_SYMLINK_NOFOLLOW) < 0 : fchmod(dfd, 0700) < 0)
		return -EACCES;
	return 0;
}

static int unlink_in(int dfd, const char *name, int flags)
{
	if (unlinkat(dfd, name, flags) >= 0 || errno == ENOENT)
		return 0;
	if (retry_owner(dfd, NULL) < 0)
		return -EACCES;
	return unlinkat(dfd, name, flags) >= 0 || errno == ENOENT ? 0 : -errno;
}

static int open_dir_in(int dfd, const char *name)
{
	int flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
	int fd = openat(dfd, name, flags);

	if (fd < 0 && retry_owner(dfd, name) >= 0)
		fd = openat(dfd, name, flags);
	return fd < 0 ? -errno : fd;
}

/* Into the top directory under a new name (its ".." changes: it must be
 * writable), to be emptied in the next pass. */
static int move_up(struct rm *m, int dfd, const char *name)
{
	for (int tries = 0; tries < 1000; tries++) {
		char to[32];

		snprintf(to, sizeof(to), ".rm-%u", m->seq++);
		if (renameat2(dfd, name, m->top, to, RENAME_NOREPLACE) >= 0) {
			m->moved = true;
			return 0;
		}
		if (errno == EACCES && retry_owner(dfd, name) >= 0)
			continue;
		if (errno != EEXIST)
			return -errno;
	}
	return -EEXIST;
}

static int rm_children(struct rm *m, int dfd, int depth);

static int rm_entry(struct rm *m, int dfd, const char *name, int depth)
{
	struct stat st;
	int sub, q;

	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISDIR(st.st_mode))
		return unlink_in(dfd, name, 0);
	if (st.st_dev != m->dev)
		return 0; /* never cross into another mount */
	if (depth >= RM_DEPTH_MAX)
		return move_up(m, dfd, name);
	if ((sub = open_dir_in(dfd, name)) < 0)
		return sub;
	q = rm_children(m, sub, depth + 1);
	return q < 0 ? q : unlink_in(dfd, name, AT_REMOVEDIR);
}

/* Everything in dfd (which it closes); the first error, having tried all. */
static int rm_children(struct rm *m, int dfd, int depth)
{
	DIR *d = fdopendir(dfd);
	struct dirent *de;
	int r = 0;

	if (!d) {
		close(dfd);
		return -errno;
	}
	while ((de = readdir(d))) {
		int q;

		if (streq(de->d_name, ".") || streq(de->d_name, ".."))
			continue;
		q = rm_entry(m, dirfd(d), de->d_name, depth);
		if (q < 0 && r >= 0)
			r = q;
	}
	closedir(d);
	return r;
}

/* Passes over the top directory until one moved nothing up. */
static int rm_top(struct rm *m)
{
	int r = 0;

	for (int pass = 0; pass < RM_PASSES_MAX; pass++) {
		int fd = openat(m->top, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

		if (fd < 0)
			return -errno;
		m->moved = false;
		r = rm_children(m, fd, 1);
		if (!m->moved)
			return r;
	}
	return r < 0 ? r : -ELOOP;
}

int rm_rf(const char *path)
{
	struct stat st;
	struct rm m = {.top = -1};
	int r;

	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (!S_ISDIR(st.st_mode))
		return unlink(path) < 0 ? -errno : 0;
	if ((m.top = open_dir_in(AT_FDCWD, path)) < 0)
		return m.top;
	m.dev = st.st_dev;
	r = rm_top(&m);
	close(m.top);
	if (rmdir(path) < 0 && errno != ENOENT && r >= 0)
		r = -errno;
	return r;
}

int fd_count(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;
	int n = 0;

	if (!d)
		return -errno;
	while ((de = readdir(d)))
		if (de->d_name[0] != '.')
			n++;
	closedir(d);
	return n - 1; /* the directory's own fd */
}
