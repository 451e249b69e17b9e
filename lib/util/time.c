#include "util/time.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static usec_t clock_usec(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (usec_t)ts.tv_sec * USEC_PER_SEC + (usec_t)ts.tv_nsec / 1000;
}

usec_t time_mono(void)
{
	return clock_usec(CLOCK_MONOTONIC);
}

usec_t time_boottime(void)
{
	return clock_usec(CLOCK_BOOTTIME);
}

usec_t time_real(void)
{
	return clock_usec(CLOCK_REALTIME);
}

static const struct {
	const char *suffix;
	usec_t mult;
} units[] = {
	/* longest suffixes first so "ms" is not read as "m" + "s" */
	{"usec", 1},
	{"msec", USEC_PER_MSEC},
	{"seconds", USEC_PER_SEC},
	{"second", USEC_PER_SEC},
	{"sec", USEC_PER_SEC},
	{"minutes", USEC_PER_MINUTE},
	{"minute", USEC_PER_MINUTE},
	{"min", USEC_PER_MINUTE},
	{"hours", USEC_PER_HOUR},
	{"hour", USEC_PER_HOUR},
	{"hr", USEC_PER_HOUR},
	{"days", 24 * USEC_PER_HOUR},
	{"day", 24 * USEC_PER_HOUR},
	{"us", 1},
	{"ms", USEC_PER_MSEC},
	{"s", USEC_PER_SEC},
	{"m", USEC_PER_MINUTE},
	{"h", USEC_PER_HOUR},
	{"d", 24 * USEC_PER_HOUR},
};

static int parse_unit(const char **p, usec_t *ret)
{
	size_t n;

	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		n = strlen(units[i].suffix);
		if (strncmp(*p, units[i].suffix, n) == 0 && !isalpha((unsigned char)(*p)[n])) {
			*p += n;
			*ret = units[i].mult;
			return 0;
		}
	}
	return -EINVAL;
}

/* One "<number>[.<fraction>]<unit>" component. */
static int parse_component(const char **p, bool only, usec_t *ret)
{
	char *end;
	unsigned long long whole;
	double frac = 0;
	usec_t mult = USEC_PER_SEC;

	if (!isdigit((unsigned char)**p))
		return -EINVAL;
	errno = 0;
	whole = strtoull(*p, &end, 10);
	if (errno)
		return -ERANGE;
	*p = end;
	if (**p == '.') {
		const char *f = ++*p;
		double scale = 0.1;

		if (!isdigit((unsigned char)*f))
			return -EINVAL;
		for (; isdigit((unsigned char)**p); ++*p, scale /= 10)
			frac += (**p - '0') * scale;
	}
	while (**p == ' ')
		++*p;
	if (**p == '\0') {
		if (!only)
			return -EINVAL; /* "1h 30" is ambiguous */
	} else if (parse_unit(p, &mult) < 0)
		return -EINVAL;
	if (whole > UINT64_MAX / mult)
		return -ERANGE;
	*ret = (usec_t)whole * mult + (usec_t)(frac * (double)mult + 0.5);
	return 0;
}

int time_parse_duration(const char *s, usec_t *ret)
{
	usec_t total = 0, part;
	bool first = true;
	int r;

	if (!s)
		return -EINVAL;
	while (*s == ' ' || *s == '\t')
		s++;
	if (strcmp(s, "infinity") == 0) {
		*ret = USEC_INFINITY;
		return 0;
	}
	if (*s == '\0')
		return -EINVAL;
	while (*s) {
		const char *start = s;

		r = parse_component(&s, first && !strpbrk(start, "abcdefghijklmnopqrstuvwxyz"),
				    &part);
		if (r < 0)
			return r;
		if (total + part < total)
			return -ERANGE;
		total += part;
		first = false;
		while (*s == ' ' || *s == '\t')
			s++;
	}
	*ret = total;
	return 0;
}

char *time_format_duration(char *buf, size_t len, usec_t u)
{
	static const struct {
		const char *suffix;
		usec_t mult;
	} steps[] = {
		{"d", 24 * USEC_PER_HOUR}, {"h", USEC_PER_HOUR}, {"min", USEC_PER_MINUTE},
		{"s", USEC_PER_SEC},       {"ms", USEC_PER_MSEC}, {"us", 1},
	};
	size_t off = 0;

	if (u == USEC_INFINITY) {
		snprintf(buf, len, "infinity");
		return buf;
	}
	if (u == 0) {
		snprintf(buf, len, "0");
		return buf;
	}
	buf[0] = '\0';
	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]) && u > 0 && off < len; i++) {
		if (u < steps[i].mult)
			continue;
		off += (size_t)snprintf(buf + off, len - off, "%llu%s",
					(unsigned long long)(u / steps[i].mult), steps[i].suffix);
		u %= steps[i].mult;
	}
	return buf;
}

char *time_format_rfc3339(char *buf, size_t len, usec_t realtime)
{
	time_t sec = (time_t)(realtime / USEC_PER_SEC);
	struct tm tm;

	gmtime_r(&sec, &tm);
	snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03uZ", tm.tm_year + 1900, tm.tm_mon + 1,
		 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
		 (unsigned)((realtime % USEC_PER_SEC) / 1000));
	return buf;
}
