#include "util/random.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

void random_bytes(void *buf, size_t len)
{
	uint8_t *p = buf;

	while (len > 0) {
		ssize_t n = getrandom(p, len, 0);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			/* getrandom(2) cannot fail otherwise on Linux >= 3.17 */
			abort();
		}
		p += n;
		len -= (size_t)n;
	}
}

uint64_t random_u64(void)
{
	uint64_t v;

	random_bytes(&v, sizeof(v));
	return v;
}

uint64_t random_below(uint64_t n)
{
	uint64_t limit, v;

	if (n <= 1)
		return 0;
	/* reject the short tail so the result is unbiased */
	limit = UINT64_MAX - UINT64_MAX % n;
	do
		v = random_u64();
	while (v >= limit);
	return v % n;
}

char *uuid_v7(char buf[UUID_STRING_MAX])
{
	uint8_t b[16];
	uint64_t ms = time_real() / USEC_PER_MSEC;

	random_bytes(b + 6, 10);
	for (int i = 0; i < 6; i++)
		b[i] = (uint8_t)(ms >> (40 - 8 * i));
	b[6] = (uint8_t)(0x70 | (b[6] & 0x0f)); /* version 7 */
	b[8] = (uint8_t)(0x80 | (b[8] & 0x3f)); /* variant 10 */
	snprintf(buf, UUID_STRING_MAX,
		 "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
		 b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
		 b[15]);
	return buf;
}

usec_t backoff_full_jitter(usec_t base, usec_t cap, unsigned attempt, usec_t retry_after)
{
	usec_t ceiling = base;
	usec_t v;

	for (unsigned i = 0; i < attempt && ceiling < cap; i++)
		ceiling = ceiling > cap / 2 ? cap : ceiling * 2;
	if (ceiling > cap)
		ceiling = cap;
	v = random_below(ceiling + 1);
	return v < retry_after ? retry_after : v;
}
