/* Randomness for identifiers and jitter (getrandom; never blocks after boot). */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "util/time.h"

void random_bytes(void *buf, size_t len);
uint64_t random_u64(void);
/* Uniform in [0, n); n > 0. */
uint64_t random_below(uint64_t n);

/* RFC 9562 UUIDv7: time-ordered, 36 chars + NUL. */
#define UUID_STRING_MAX 37
char *uuid_v7(char buf[UUID_STRING_MAX]);

/* Capped exponential backoff with full jitter:
 * uniform in [0, min(cap, base * 2^attempt)], attempt counted from 0.
 * When retry_after is non-zero it is a floor (the server asked for it). */
usec_t backoff_full_jitter(usec_t base, usec_t cap, unsigned attempt, usec_t retry_after);
