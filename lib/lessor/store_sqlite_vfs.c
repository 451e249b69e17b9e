/* A VFS over the default one that writes the frames of a WAL commit to the
 * file with one write.
 *
 * SQLite appends each page of a commit to the WAL as two writes: the frame's
 * 24-byte header, then the page.  A claim or a completion dirties about a
 * dozen pages, so its commit cost some 30 write system calls (on ext4 each
 * takes the inode lock and walks the page cache on its own).  Here the WAL
 * file keeps such a run of frames in a buffer and writes it out whole:
 *  - when the frame that ends a commit (its header's second word, the database
 *    size after the commit, is not zero) has its page written: the write that
 *    completes it writes the buffer, and its error is the commit's, so a
 *    commit fails exactly as it did; SQLite publishes a commit in the
 *    wal-index only after that write returned;
 *  - before anything else is done with the file (a read, a sync, a truncate,
 *    a lock, a close...), so SQLite never sees the file other than it wrote it;
 *  - when the buffer is full (a large transaction), or a write does not follow
 *    the pattern (then it goes through as it came, after the buffer).
 * The database file and the other files are the default VFS's own objects,
 * untouched.  The WAL format is SQLite's documented file format; should a
 * later SQLite write frames another way, nothing matches the pattern and
 * every write goes straight through. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "lessor/store_sqlite-int.h"

#define FRAME_HEADER 24
/* Below 128 KiB: the unix VFS's write takes at most 0x1ffff bytes a call
 * (it masks the length), and a write it sees as 0 bytes long fails as "disk
 * full".  A commit of a run's transitions is 15-30 KiB. */
#define BUFFER_MAX (64 * 1024)

struct wal_file {
	sqlite3_file base;  /* pMethods = wal_methods */
	sqlite3_file *real; /* the default VFS's file, in the same allocation */
	unsigned char *buf;
	size_t len;
	sqlite3_int64 off;   /* of buf[0] in the file */
	bool page_expected;  /* the last write was a frame header */
	bool commit_pending; /* ... of the frame that ends a commit */
};

static sqlite3_vfs *real_vfs;
static sqlite3_vfs wal_vfs;
static sqlite3_io_methods wal_methods;

/* The buffer to the file, the frame pattern's state left as it is. */
static int write_out(struct wal_file *f)
{
	int rc;

	if (f->len == 0)
		return SQLITE_OK;
	rc = f->real->pMethods->xWrite(f->real, f->buf, (int)f->len, f->off);
	f->len = 0;
	return rc;
}

/* The buffer to the file, and the pattern starts afresh. */
static int flush(struct wal_file *f)
{
	f->page_expected = f->commit_pending = false;
	return write_out(f);
}

static uint32_t be32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static bool fits(const struct wal_file *f, int amt, sqlite3_int64 off)
{
	return f->len == 0 ||
	       (off == f->off + (sqlite3_int64)f->len && f->len + (size_t)amt <= BUFFER_MAX);
}

static void append(struct wal_file *f, const void *data, int amt, sqlite3_int64 off)
{
	if (f->len == 0)
		f->off = off;
	memcpy(f->buf + f->len, data, (size_t)amt);
	f->len += (size_t)amt;
}

static int wal_write(sqlite3_file *file, const void *data, int amt, sqlite3_int64 off)
{
	struct wal_file *f = (struct wal_file *)file;
	bool header = amt == FRAME_HEADER && !f->page_expected;
	bool page = f->page_expected && amt <= BUFFER_MAX - FRAME_HEADER;
	bool commit = f->commit_pending;
	int rc = SQLITE_OK;

	if (!f->buf || !(header || page)) {
		rc = flush(f);
		return rc != SQLITE_OK ? rc : f->real->pMethods->xWrite(f->real, data, amt, off);
	}
	if (!fits(f, amt, off) && (rc = write_out(f)) != SQLITE_OK)
		return rc;
	append(f, data, amt, off);
	if (header) {
		f->page_expected = true;
		f->commit_pending = be32((const unsigned char *)data + 4) != 0;
		return SQLITE_OK;
	}
	f->page_expected = f->commit_pending = false;
	return commit ? flush(f) : SQLITE_OK;
}

static int wal_close(sqlite3_file *file)
{
	struct wal_file *f = (struct wal_file *)file;
	int rc = flush(f), rc2 = f->real->pMethods->xClose(f->real);

	sqlite3_free(f->buf);
	f->buf = NULL;
	return rc != SQLITE_OK ? rc : rc2;
}

/* Every other method: the buffer first, then the default VFS's. */
#define FLUSH_OR_RETURN(file)                                                                      \
	struct wal_file *f = (struct wal_file *)(file);                                            \
	int flush_rc = flush(f);                                                                   \
	if (flush_rc != SQLITE_OK)                                                                 \
	return flush_rc

static int wal_read(sqlite3_file *file, void *data, int amt, sqlite3_int64 off)
{
	FLUSH_OR_RETURN(file);
	return f->real->pMethods->xRead(f->real, data, amt, off);
}

static int wal_truncate(sqlite3_file *file, sqlite3_int64 size)
{
	FLUSH_OR_RETURN(file);
	return f->real->pMethods->xTruncate(f->real, size);
}

static int wal_sync(sqlite3_file *file, int flags)
{
	FLUSH_OR_RETURN(file);
	return f->real->pMethods->xSync(f->real, flags);
}

static int wal_file_size(sqlite3_file *file, sqlite3_int64 *ret)
{
	FLUSH_OR_RETURN(file);
	return f->real->pMethods->xFileSize(f->real, ret);
}

static int wal_lock(sqlite3_file *file, int level)
{
	FLUSH_OR_RETURN(file);
	return f->real->pMethods->xLock(f->real, level);
}

static int wal_unlock(sqlite3_file *file, int level)
{
	FLUSH_OR_RETURN(file);
	return f->real->pMethods->xUnlock(f->real, level);
}

static int wal_check_reserved(sqlite3_file *file, int *ret)
{
	FLUSH_OR_RETURN(file);
	return f->real->pMethods->xCheckReservedLock(f->real, ret);
}

static int wal_file_control(sqlite3_file *file, int op, void *arg)
{
	FLUSH_OR_RETURN(file);
	return f->real->pMethods->xFileControl(f->real, op, arg);
}

static int wal_sector_size(sqlite3_file *file)
{
	struct wal_file *f = (struct wal_file *)file;

	return f->real->pMethods->xSectorSize(f->real);
}

static int wal_device_characteristics(sqlite3_file *file)
{
	struct wal_file *f = (struct wal_file *)file;

	return f->real->pMethods->xDeviceCharacteristics(f->real);
}

static sqlite3_io_methods wal_methods = {
    .iVersion = 1,
    .xClose = wal_close,
    .xRead = wal_read,
    .xWrite = wal_write,
    .xTruncate = wal_truncate,
    .xSync = wal_sync,
    .xFileSize = wal_file_size,
    .xLock = wal_lock,
    .xUnlock = wal_unlock,
    .xCheckReservedLock = wal_check_reserved,
    .xFileControl = wal_file_control,
    .xSectorSize = wal_sector_size,
    .xDeviceCharacteristics = wal_device_characteristics,
};

/* A WAL file gets the buffer (without one, if it cannot be had: then every
 * write goes straight through); any other file is the default VFS's object
 * itself, in place. */
static int wal_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *file, int flags,
                    int *ret_flags)
{
	struct wal_file *f = (struct wal_file *)file;
	int rc;

	(void)vfs;
	if (!(flags & SQLITE_OPEN_WAL))
		return real_vfs->xOpen(real_vfs, name, file, flags, ret_flags);
	*f = (struct wal_file){.real = (sqlite3_file *)(f + 1)};
	rc = real_vfs->xOpen(real_vfs, name, f->real, flags, ret_flags);
	if (rc != SQLITE_OK) {
		f->base.pMethods = NULL;
		return rc;
	}
	f->buf = sqlite3_malloc(BUFFER_MAX);
	f->base.pMethods = &wal_methods;
	return SQLITE_OK;
}

static void vfs_register(void)
{
	real_vfs = sqlite3_vfs_find(NULL);
	if (!real_vfs)
		return;
	wal_vfs = *real_vfs;
	wal_vfs.zName = LESSOR_SQLITE_VFS;
	wal_vfs.pNext = NULL;
	wal_vfs.szOsFile = (int)sizeof(struct wal_file) + real_vfs->szOsFile;
	wal_vfs.xOpen = wal_open;
	if (sqlite3_vfs_register(&wal_vfs, 0) != SQLITE_OK)
		real_vfs = NULL;
}

const char *lessor_sqlite_vfs(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;

	pthread_once(&once, vfs_register);
	return real_vfs ? LESSOR_SQLITE_VFS : NULL;
}
