/* slowfs: a passthrough FUSE file system over a backing directory whose fsync
 * (of files and of directories) sleeps first, as a file system does when a
 * neighbour has dirtied gigabytes of its page cache, or when its server hangs.
 * For the tests that prove the daemon's loop never waits on the spool.
 *
 *   slowfs [--fsync-delay-ms N] [--log FILE] BACKING MOUNTPOINT
 *
 * Runs in the foreground until unmounted or sent SIGTERM/SIGINT.  A sleeping
 * fsync that the kernel interrupts (its caller got a signal, or is exiting)
 * fails with EINTR, as on a network file system mounted "intr": without that,
 * a process with a thread in such a request could not even exit.  With --log,
 * each fsync appends "fsync-begin PATH" and "fsync-end PATH" (or
 * "fsync-interrupted PATH"). */
#define FUSE_USE_VERSION 312

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

static int base = -1; /* the backing directory */
static long delay_ms;
static FILE *logfile;

/* "/a/b" -> "a/b", "/" -> ".": relative to base for the *at() calls. */
static const char *rel(const char *path)
{
	return path[1] ? path + 1 : ".";
}

static int neg(int r)
{
	return r < 0 ? -errno : 0;
}

static void note(const char *what, const char *path)
{
	if (logfile) {
		fprintf(logfile, "%s %s\n", what, path);
		fflush(logfile);
	}
}

/* 0 after the delay, -EINTR when the kernel interrupts the request. */
static int slow_fsync(const char *path)
{
	const struct timespec step = {.tv_nsec = 20 * 1000000};

	note("fsync-begin", path);
	for (long left = delay_ms; left > 0; left -= 20) {
		if (fuse_interrupted()) {
			note("fsync-interrupted", path);
			return -EINTR;
		}
		nanosleep(&step, NULL);
	}
	note("fsync-end", path);
	return 0;
}

static void *fs_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
	cfg->use_ino = 1;
	cfg->entry_timeout = cfg->attr_timeout = cfg->negative_timeout = 0;
	return NULL;
}

static int fs_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
	if (fi)
		return neg(fstat((int)fi->fh, st));
	return neg(fstatat(base, rel(path), st, AT_SYMLINK_NOFOLLOW));
}

static int fs_access(const char *path, int mask)
{
	return neg(faccessat(base, rel(path), mask, AT_SYMLINK_NOFOLLOW));
}

static int fs_readlink(const char *path, char *buf, size_t size)
{
	ssize_t n = readlinkat(base, rel(path), buf, size - 1);

	if (n < 0)
		return -errno;
	buf[n] = '\0';
	return 0;
}

static int fs_mkdir(const char *path, mode_t mode)
{
	return neg(mkdirat(base, rel(path), mode));
}

static int fs_unlink(const char *path)
{
	return neg(unlinkat(base, rel(path), 0));
}

static int fs_rmdir(const char *path)
{
	return neg(unlinkat(base, rel(path), AT_REMOVEDIR));
}

static int fs_symlink(const char *target, const char *path)
{
	return neg(symlinkat(target, base, rel(path)));
}

static int fs_rename(const char *from, const char *to, unsigned int flags)
{
	return neg(renameat2(base, rel(from), base, rel(to), flags));
}

static int fs_chmod(const char *path, mode_t mode, struct fuse_file_info *fi)
{
	if (fi)
		return neg(fchmod((int)fi->fh, mode));
	return neg(fchmodat(base, rel(path), mode, 0));
}

static int fs_chown(const char *path, uid_t uid, gid_t gid, struct fuse_file_info *fi)
{
	if (fi)
		return neg(fchown((int)fi->fh, uid, gid));
	return neg(fchownat(base, rel(path), uid, gid, AT_SYMLINK_NOFOLLOW));
}

static int fs_truncate(const char *path, off_t size, struct fuse_file_info *fi)
{
	int fd, r;

	if (fi)
		return neg(ftruncate((int)fi->fh, size));
	fd = openat(base, rel(path), O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	r = neg(ftruncate(fd, size));
	close(fd);
	return r;
}

static int fs_utimens(const char *path, const struct timespec tv[2], struct fuse_file_info *fi)
{
	if (fi)
		return neg(futimens((int)fi->fh, tv));
	return neg(utimensat(base, rel(path), tv, AT_SYMLINK_NOFOLLOW));
}

static int fs_create(const char *path, mode_t mode, struct fuse_file_info *fi)
{
	int fd = openat(base, rel(path), fi->flags | O_CLOEXEC, mode);

	if (fd < 0)
		return -errno;
	fi->fh = (uint64_t)fd;
	return 0;
}

static int fs_open(const char *path, struct fuse_file_info *fi)
{
	int fd = openat(base, rel(path), (fi->flags & ~O_NOFOLLOW) | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	fi->fh = (uint64_t)fd;
	return 0;
}

static int fs_read(const char *path, char *buf, size_t size, off_t off, struct fuse_file_info *fi)
{
	ssize_t n = pread((int)fi->fh, buf, size, off);

	return n < 0 ? -errno : (int)n;
}

static int fs_write(const char *path, const char *buf, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
	ssize_t n = pwrite((int)fi->fh, buf, size, off);

	return n < 0 ? -errno : (int)n;
}

static int fs_statfs(const char *path, struct statvfs *st)
{
	return neg(fstatvfs(base, st));
}

static int fs_release(const char *path, struct fuse_file_info *fi)
{
	close((int)fi->fh);
	return 0;
}

static int fs_fsync(const char *path, int datasync, struct fuse_file_info *fi)
{
	int r = slow_fsync(path);

	if (r < 0)
		return r;
	return neg(datasync ? fdatasync((int)fi->fh) : fsync((int)fi->fh));
}

static int fs_opendir(const char *path, struct fuse_file_info *fi)
{
	int fd = openat(base, rel(path), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d;

	if (fd < 0)
		return -errno;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -errno;
	}
	fi->fh = (uint64_t)(uintptr_t)d;
	return 0;
}

static int fs_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off,
                      struct fuse_file_info *fi, enum fuse_readdir_flags flags)
{
	DIR *d = (DIR *)(uintptr_t)fi->fh;
	struct dirent *de;

	rewinddir(d);
	while ((de = readdir(d))) {
		struct stat st = {.st_ino = de->d_ino, .st_mode = (mode_t)DTTOIF(de->d_type)};

		if (fill(buf, de->d_name, &st, 0, 0))
			break;
	}
	return 0;
}

static int fs_releasedir(const char *path, struct fuse_file_info *fi)
{
	closedir((DIR *)(uintptr_t)fi->fh);
	return 0;
}

static int fs_fsyncdir(const char *path, int datasync, struct fuse_file_info *fi)
{
	int r = slow_fsync(path);

	if (r < 0)
		return r;
	return neg(fsync(dirfd((DIR *)(uintptr_t)fi->fh)));
}

static const struct fuse_operations ops = {
    .init = fs_init,
    .getattr = fs_getattr,
    .access = fs_access,
    .readlink = fs_readlink,
    .mkdir = fs_mkdir,
    .unlink = fs_unlink,
    .rmdir = fs_rmdir,
    .symlink = fs_symlink,
    .rename = fs_rename,
    .chmod = fs_chmod,
    .chown = fs_chown,
    .truncate = fs_truncate,
    .utimens = fs_utimens,
    .create = fs_create,
    .open = fs_open,
    .read = fs_read,
    .write = fs_write,
    .statfs = fs_statfs,
    .release = fs_release,
    .fsync = fs_fsync,
    .opendir = fs_opendir,
    .readdir = fs_readdir,
    .releasedir = fs_releasedir,
    .fsyncdir = fs_fsyncdir,
};

/* fuse_main, with a thread limit of ours: 3.14's own default warns. */
static int serve(char *prog, const char *mountpoint)
{
	char *fargv[] = {prog, "-o", "fsname=slowfs", NULL};
	struct fuse_args args = FUSE_ARGS_INIT(3, fargv);
	struct fuse_loop_config *cfg;
	struct fuse *f = fuse_new(&args, &ops, sizeof(ops), NULL);
	int r = 1;

	if (!f) {
		fuse_opt_free_args(&args);
		return 1;
	}
	if (fuse_mount(f, mountpoint) == 0) {
		fuse_set_signal_handlers(fuse_get_session(f));
		cfg = fuse_loop_cfg_create();
		if (cfg) {
			fuse_loop_cfg_set_max_threads(cfg, 8);
			r = fuse_loop_mt(f, cfg) == 0 ? 0 : 1;
			fuse_loop_cfg_destroy(cfg);
		}
		fuse_remove_signal_handlers(fuse_get_session(f));
		fuse_unmount(f);
	}
	fuse_destroy(f);
	fuse_opt_free_args(&args); /* what fuse_new added to them */
	return r;
}

static int usage(FILE *f, int code)
{
	fputs("usage: slowfs [--fsync-delay-ms N] [--log FILE] BACKING MOUNTPOINT\n", f);
	return code;
}

int main(int argc, char **argv)
{
	int i = 1;

	if (argc == 2 && strcmp(argv[1], "--version") == 0) {
		printf("slowfs (lessee tests) %s\n", LESSEE_VERSION);
		return 0;
	}
	if (argc == 2 && strcmp(argv[1], "--help") == 0)
		return usage(stdout, 0);
	for (; i + 1 < argc && strncmp(argv[i], "--", 2) == 0; i += 2) {
		if (strcmp(argv[i], "--fsync-delay-ms") == 0)
			delay_ms = atol(argv[i + 1]);
		else if (strcmp(argv[i], "--log") == 0 && !(logfile = fopen(argv[i + 1], "ae")))
			return perror(argv[i + 1]), 1;
		else if (strcmp(argv[i], "--log") != 0)
			return usage(stderr, 2);
	}
	if (argc - i != 2 || delay_ms < 0)
		return usage(stderr, 2);
	base = open(argv[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (base < 0)
		return perror(argv[i]), 1;
	umask(0);
	return serve(argv[0], argv[i + 1]);
}
