#include "util/buf.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int buf_reserve(struct buf *b, size_t extra)
{
	size_t need, na;
	char *nd;

	if (extra > SIZE_MAX - b->len - 1)
		return -E2BIG;
	need = b->len + extra + 1;
	if (b->cap && b->len + extra > b->cap)
		return -E2BIG;
	if (need <= b->alloc)
		return 0;
	na = b->alloc ? b->alloc : 64;
	while (na < need)
		na = na > SIZE_MAX / 2 ? need : na * 2;
	if (b->cap && na - 1 > b->cap) /* not na > cap + 1: cap may be SIZE_MAX */
		na = b->cap + 1;
	nd = realloc(b->data, na);
	if (!nd)
		return -ENOMEM;
	b->data = nd;
	b->alloc = na;
	return 0;
}

int buf_append(struct buf *b, const void *data, size_t len)
{
	int r = buf_reserve(b, len);

	if (r < 0)
		return r;
	if (len)
		memcpy(b->data + b->len, data, len);
	b->len += len;
	b->data[b->len] = '\0';
	return 0;
}

int buf_appends(struct buf *b, const char *s)
{
	return buf_append(b, s, strlen(s));
}

int buf_vprintf(struct buf *b, const char *fmt, va_list ap)
{
	va_list aq;
	int n, r;

	va_copy(aq, ap);
	n = vsnprintf(NULL, 0, fmt, aq);
	va_end(aq);
	if (n < 0)
		return -EINVAL;
	r = buf_reserve(b, (size_t)n);
	if (r < 0)
		return r;
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	b->len += (size_t)n;
	return 0;
}

int buf_printf(struct buf *b, const char *fmt, ...)
{
	va_list ap;
	int r;

	va_start(ap, fmt);
	r = buf_vprintf(b, fmt, ap);
	va_end(ap);
	return r;
}

void buf_consume(struct buf *b, size_t n)
{
	if (n >= b->len) {
		b->len = 0;
	} else {
		memmove(b->data, b->data + n, b->len - n);
		b->len -= n;
	}
	if (b->data)
		b->data[b->len] = '\0';
}

void buf_reset(struct buf *b)
{
	b->len = 0;
	if (b->data)
		b->data[0] = '\0';
}

void buf_done(struct buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = b->alloc = 0;
}

char *buf_steal(struct buf *b)
{
	char *d;

	if (!b->data && buf_reserve(b, 0) < 0)
		return NULL;
	b->data[b->len] = '\0';
	d = b->data;
	b->data = NULL;
	b->len = b->alloc = 0;
	return d;
}
