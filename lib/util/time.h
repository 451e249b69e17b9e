/* Clocks and durations.  All internal time is microseconds (usec_t). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef uint64_t usec_t;

#define USEC_INFINITY ((usec_t)UINT64_MAX)
#define USEC_PER_MSEC ((usec_t)1000ULL)
#define USEC_PER_SEC ((usec_t)1000000ULL)
#define USEC_PER_MINUTE (60ULL * USEC_PER_SEC)
#define USEC_PER_HOUR (60ULL * USEC_PER_MINUTE)

usec_t time_mono(void);    /* CLOCK_MONOTONIC */
usec_t time_boottime(void); /* CLOCK_BOOTTIME: counts suspend, for leases */
usec_t time_real(void);    /* CLOCK_REALTIME */

/* "90s", "5min", "1h", "250ms", "1h 30min", "2.5s", bare number = seconds.
 * Returns 0 or -EINVAL / -ERANGE. */
int time_parse_duration(const char *s, usec_t *ret);

/* Shortest exact rendering: "90s", "5min", "250ms", "1h30min", "infinity". */
char *time_format_duration(char *buf, size_t len, usec_t u);
#define TIME_DURATION_MAX 64

/* RFC 3339 UTC with milliseconds, e.g. 2026-12-01T07:51:43.123Z */
char *time_format_rfc3339(char *buf, size_t len, usec_t realtime);
#define TIME_RFC3339_MAX 32
