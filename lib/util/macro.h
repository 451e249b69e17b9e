/* Small helpers every module uses: cleanup attributes, ownership hand-over, sizes. */
#pragma once

#include <stddef.h>

#include <errno.h>
#include <stdlib.h>
#include <unistd.h>

#define ELEMENTSOF(a) (sizeof(a) / sizeof((a)[0]))
#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define CLAMP(x, lo, hi) ((x) < (lo) ? (lo) : (x) > (hi) ? (hi) : (x))
#define _unused_ __attribute__((unused))
#define _printf_(a, b) __attribute__((format(printf, a, b)))
#define _cleanup_(f) __attribute__((cleanup(f)))
/* The struct of type `type` whose member `member` ptr points to. */
#define container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))
#define _warn_unused_ __attribute__((warn_unused_result))

static inline void freep(void *p)
{
	free(*(void **)p);
}

static inline int safe_close(int fd)
{
	if (fd >= 0) {
		int saved = errno;
		close(fd);
		errno = saved;
	}
	return -1;
}

static inline void closep(int *fd)
{
	safe_close(*fd);
}

#define _cleanup_free_ _cleanup_(freep)
#define _cleanup_close_ _cleanup_(closep)

/* Hand ownership over: returns the value and leaves the variable empty. */
#define TAKE_PTR(p)                                                                                \
	({                                                                                         \
		__typeof__(p) _p = (p);                                                            \
		(p) = NULL;                                                                        \
		_p;                                                                                \
	})
#define TAKE_FD(fd)                                                                                \
	({                                                                                         \
		int _fd = (fd);                                                                    \
		(fd) = -1;                                                                         \
		_fd;                                                                               \
	})

/* Declare a cleanup function for a type that has a foo_free(foo *) returning NULL. */
#define DEFINE_FREE_FUNC(type, func)                                                               \
	static inline void func##p(type **p)                                                       \
	{                                                                                          \
		if (*p)                                                                            \
			func(*p);                                                                  \
	}
