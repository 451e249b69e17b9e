/* File helpers that treat every byte read as untrusted: reads are capped. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* Read a whole regular file, at most max bytes; -EFBIG when larger, -EINVAL when
 * it is not a regular file (a FIFO is never waited on).  *ret is NUL-terminated. */
int read_file_capped(const char *path, size_t max, char **ret, size_t *ret_len);
/* Same, from an open fd (read from the current offset). */
int read_fd_capped(int fd, size_t max, char **ret, size_t *ret_len);

/* Write via a temporary file in the same directory + fsync + rename + fsync(dir). */
int write_file_atomic(const char *path, const void *data, size_t len, mode_t mode);

/* write(2) every byte, retrying on EINTR/short writes. */
int write_all(int fd, const void *data, size_t len);
/* The same at offset off, the file offset left where it was. */
int pwrite_all(int fd, const void *data, size_t len, off_t off);

/* Every missing directory of path, each made with exactly mode (umask ignored). */
int mkdir_p(const char *path, mode_t mode);
/* Directory fds one rm_rf holds at most, whatever the tree's depth. */
#define RM_RF_FDS_MAX 17
/* Remove a tree, not following symlinks and not crossing mounts (openat-based). */
int rm_rf(const char *path);

/* How many fds this process has open (from /proc/self/fd), for leak checks. */
int fd_count(void);
