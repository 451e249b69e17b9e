/* A growable byte buffer with a hard cap: growth past the cap is -E2BIG, never an allocation. */
#pragma once

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

#include "util/macro.h"

struct buf {
	char *data; /* always NUL-terminated when non-NULL */
	size_t len;
	size_t alloc;
	size_t cap; /* 0 = no cap */
};

#define BUF_INIT(c) ((struct buf){.cap = (c)})

int buf_reserve(struct buf *b, size_t extra);
int buf_append(struct buf *b, const void *data, size_t len);
int buf_appends(struct buf *b, const char *s);
int buf_printf(struct buf *b, const char *fmt, ...) _printf_(2, 3);
int buf_vprintf(struct buf *b, const char *fmt, va_list ap) _printf_(2, 0);
/* Drop the first n bytes. */
void buf_consume(struct buf *b, size_t n);
void buf_reset(struct buf *b);
void buf_done(struct buf *b);
/* Hand the data over (NUL-terminated, never NULL on success). */
char *buf_steal(struct buf *b);
