/* lib/http internals that the unit tests exercise directly (not for other modules). */
#pragma once

#include "util/time.h"

/* Longest Retry-After we honour; larger values are clamped to it, so a hostile
 * or confused server cannot park a client for days. */
#define HTTP_RETRY_AFTER_MAX USEC_PER_HOUR

/* Parse a Retry-After value: delta-seconds ("120") or an HTTP-date
 * ("Wed, 21 Oct 2015 07:28:00 GMT", also RFC 850 and asctime forms), relative to
 * now_real (CLOCK_REALTIME usec).  Returns the delay, clamped to
 * HTTP_RETRY_AFTER_MAX; 0 for a missing, malformed or past value. */
usec_t http_parse_retry_after(const char *value, usec_t now_real);

/* The CURLcode -> -errno table (docs/http.md).  os_errno is CURLINFO_OS_ERRNO,
 * used to refine connect/send/receive failures; 0 when unknown. */
int http_errno_from_curlcode(int code, long os_errno);
