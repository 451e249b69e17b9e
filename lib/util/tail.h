/* The last bytes of a stream (a run's output), bounded: for APIs without a
 * log endpoint, which take the end of the output with a failure. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "util/buf.h"

struct tail {
	struct buf b; /* at most 2 x cap bytes held */
	size_t cap;   /* what tail_text gives at most */
	bool cut;     /* bytes before b were dropped */
};

void tail_init(struct tail *t, size_t cap);
/* Keep the newest cap bytes of everything fed so far. */
int tail_feed(struct tail *t, const void *data, size_t len);
/* The newest cap bytes as a new string of valid UTF-8 (a NUL or a byte that
 * is not UTF-8 becomes U+FFFD): when the stream was cut there, from the
 * first line that starts in them (a line longer than cap: its end, from a
 * character's start).  "" when nothing was fed; NULL = out of memory. */
char *tail_text(const struct tail *t);
void tail_done(struct tail *t);
