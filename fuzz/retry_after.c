/* Retry-After (lib/http http_parse_retry_after: delta-seconds and the three
 * HTTP-date forms) and the retry delay it floors (http_retry_delay).  The first
 * 8 bytes are the wall clock. */
#include <string.h>

#include "fuzz.h"
#include "http/http-int.h"
#include "http/http.h"

FUZZ_TARGET(retry_after)
{
	struct http_response resp = {.status = 503};
	uint64_t now = UINT64_C(1764633600) * USEC_PER_SEC; /* 2025-12-02 */
	char *v;
	usec_t d;

	if (size >= 8 && (data[0] & 1)) {
		memcpy(&now, data, 8);
		data += 8;
		size -= 8;
	}
	v = fuzz_strndup(data, size);
	d = http_parse_retry_after(v, now);
	FUZZ_ASSERT(d <= HTTP_RETRY_AFTER_MAX);
	resp.retry_after = d;
	for (unsigned attempt = 0; attempt < 70; attempt += 7) {
		usec_t delay =
		    http_retry_delay(&resp, attempt, 100 * USEC_PER_MSEC, 30 * USEC_PER_SEC);

		FUZZ_ASSERT(delay >= d);
		FUZZ_ASSERT(delay <= (d > 30 * USEC_PER_SEC ? d : 30 * USEC_PER_SEC));
	}
	free(v);
	return 0;
}
