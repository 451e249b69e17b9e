/* A bounded tail of a stream: appended to a buffer twice the cap, the front
 * dropped when it is full, so each byte is moved at most once on average. */
#include "util/tail.h"

#include <string.h>

#include "util/strutil.h"

void tail_init(struct tail *t, size_t cap)
{
	*t = (struct tail){.b = BUF_INIT(0), .cap = cap ? cap : 1};
}

int tail_feed(struct tail *t, const void *data, size_t len)
{
	const char *p = data;

	if (len >= t->cap) { /* only its end matters */
		buf_reset(&t->b);
		t->cut = true;
		return buf_append(&t->b, p + len - t->cap, t->cap);
	}
	if (t->b.len + len > 2 * t->cap) {
		buf_consume(&t->b, t->b.len - t->cap);
		t->cut = true;
	}
	return buf_append(&t->b, p, len);
}

char *tail_text(const struct tail *t)
{
	const unsigned char *s = (const unsigned char *)t->b.data;
	size_t n = t->b.len, from = n > t->cap ? n - t->cap : 0;
	struct buf out = BUF_INIT(0);
	int q = 0;

	if (t->cut || from > 0) {
		const void *nl = memchr(s + from, '\n', n - from);

		/* a whole line when one starts in the tail (not after its last byte) */
		if (nl && (const unsigned char *)nl + 1 < s + n)
			from = (size_t)((const unsigned char *)nl + 1 - s);
		while (from < n && (s[from] & 0xc0) == 0x80)
			from++;
	}
	for (size_t i = from; i < n && q >= 0;) {
		size_t l = s[i] ? utf8_seq_len(s + i, n - i) : 0;

		q = l ? buf_append(&out, s + i, l) : buf_append(&out, "\xef\xbf\xbd", 3);
		i += l ? l : 1;
	}
	if (q >= 0)
		q = buf_append(&out, "", 0);
	if (q < 0) {
		buf_done(&out);
		return NULL;
	}
	return buf_steal(&out);
}

void tail_done(struct tail *t)
{
	buf_done(&t->b);
}
