/* See json_scan.h. */
#include "proto/json_scan.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "util/macro.h"

const char *json_scan_ws(const char *p, const char *end)
{
	while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
		p++;
	return p;
}

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static int hex4(const unsigned char *p, const unsigned char *end, unsigned *ret)
{
	unsigned v = 0;

	if (end - p < 4)
		return -EBADMSG;
	for (int i = 0; i < 4; i++) {
		unsigned c = p[i], d;

		if (c >= '0' && c <= '9')
			d = c - '0';
		else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
			d = (c | 0x20) - 'a' + 10;
		else
			return -EBADMSG;
		v = v << 4 | d;
	}
	*ret = v;
	return 0;
}

/* Length of the UTF-8 sequence at p (RFC 3629: no overlongs, no surrogates,
 * nothing above U+10FFFF), 0 when it is not one. */
static size_t utf8_len(const unsigned char *p, const unsigned char *end)
{
	unsigned c = p[0], lo = 0x80, hi = 0xbf;
	size_t n;

	if (c >= 0xc2 && c <= 0xdf)
		n = 2;
	else if (c >= 0xe0 && c <= 0xef) {
		n = 3;
		lo = c == 0xe0 ? 0xa0 : 0x80;
		hi = c == 0xed ? 0x9f : 0xbf;
	} else if (c >= 0xf0 && c <= 0xf4) {
		n = 4;
		lo = c == 0xf0 ? 0x90 : 0x80;
		hi = c == 0xf4 ? 0x8f : 0xbf;
	} else
		return 0;
	if ((size_t)(end - p) < n || p[1] < lo || p[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if (p[i] < 0x80 || p[i] > 0xbf)
			return 0;
	return n;
}

/* A \u escape at p (the backslash); a high surrogate must be followed by an
 * escaped low one.  Returns the bytes taken, 0 when malformed. */
static size_t scan_u_escape(const unsigned char *p, const unsigned char *end, bool *bad_utf8)
{
	unsigned u, v;

	if (hex4(p + 2, end, &u) < 0)
		return 0;
	if (u < 0xd800 || u > 0xdfff)
		return 6;
	if (u <= 0xdbff && end - p >= 12 && p[6] == '\\' && p[7] == 'u' &&
	    hex4(p + 8, end, &v) == 0 && v >= 0xdc00 && v <= 0xdfff)
		return 12;
	*bad_utf8 = true; /* a lone surrogate */
	return 6;
}

/* A string at *pp (its opening quote); *pp moves past the closing one. */
static int scan_string(const char **pp, const char *end, bool *bad_utf8)
{
	const unsigned char *p = (const unsigned char *)*pp + 1, *e = (const unsigned char *)end;
	size_t n;

	while (p < e) {
		if (*p == '"') {
			*pp = (const char *)p + 1;
			return 0;
		}
		if (*p < 0x20)
			break;
		if (*p == '\\') {
			if (e - p < 2)
				break;
			if (p[1] == 'u')
				n = scan_u_escape(p, e, bad_utf8);
			else
				n = strchr("\"\\/bfnrt", p[1]) && p[1] ? 2 : 0;
			if (n == 0)
				break;
			p += n;
		} else if (*p < 0x80)
			p++;
		else if ((n = utf8_len(p, e)) > 0)
			p += n;
		else {
			*bad_utf8 = true;
			p++;
		}
	}
	*pp = (const char *)p;
	return -EBADMSG;
}

static int scan_digits(const char **pp, const char *end)
{
	const char *p = *pp;

	while (p < end && is_digit(*p))
		p++;
	if (p == *pp)
		return -EBADMSG;
	*pp = p;
	return 0;
}

/* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static int scan_number(const char **pp, const char *end)
{
	const char *p = *pp;

	if (p < end && *p == '-')
		p++;
	if (p < end && *p == '0')
		p++;
	else if (p >= end || !is_digit(*p) || scan_digits(&p, end) < 0)
		goto bad;
	if (p < end && *p == '.' && (++p, scan_digits(&p, end) < 0))
		goto bad;
	if (p < end && (*p == 'e' || *p == 'E')) {
		p++;
		if (p < end && (*p == '+' || *p == '-'))
			p++;
		if (scan_digits(&p, end) < 0)
			goto bad;
	}
	*pp = p;
	return 0;
bad:
	*pp = p;
	return -EBADMSG;
}

static int scan_word(const char **pp, const char *end, const char *w)
{
	size_t n = strlen(w);

	if ((size_t)(end - *pp) < n || memcmp(*pp, w, n) != 0)
		return -EBADMSG;
	*pp += n;
	return 0;
}

/* A string, number or literal at p (not blank, not a container). */
static int scan_scalar(const char **pp, const char *end, bool *bad_utf8)
{
	switch (**pp) {
	case '"':
		return scan_string(pp, end, bad_utf8);
	case 't':
		return scan_word(pp, end, "true");
	case 'f':
		return scan_word(pp, end, "false");
	case 'n':
		return scan_word(pp, end, "null");
	default:
		return scan_number(pp, end);
	}
}

/* The open containers, one bit each: 1 = object. */
struct nest {
	uint64_t bits[(JSON_SCAN_DEPTH_MAX + 63) / 64];
	unsigned depth, max;
};

static bool nest_object(const struct nest *n)
{
	unsigned i = n->depth - 1;

	return n->bits[i / 64] >> (i % 64) & 1;
}

static int nest_push(struct nest *n, bool object)
{
	unsigned i = n->depth;

	if (n->depth >= n->max)
		return -EBADMSG;
	if (object)
		n->bits[i / 64] |= UINT64_C(1) << (i % 64);
	else
		n->bits[i / 64] &= ~(UINT64_C(1) << (i % 64));
	n->depth++;
	return 0;
}

/* After '{' or ',' in an object: "key" ':' */
static int scan_key(const char **pp, const char *end, bool *bad_utf8)
{
	*pp = json_scan_ws(*pp, end);
	if (*pp >= end || **pp != '"' || scan_string(pp, end, bad_utf8) < 0)
		return -EBADMSG;
	*pp = json_scan_ws(*pp, end);
	if (*pp >= end || **pp != ':')
		return -EBADMSG;
	(*pp)++;
	return 0;
}

/* Just after a value: ',' (then what comes next is scanned) or the closing
 * bracket(s).  Returns 1 when another value follows, 0 when the outermost
 * container closed. */
static int scan_after_value(const char **pp, const char *end, struct nest *n, bool *bad_utf8)
{
	while (n->depth > 0) {
		bool object = nest_object(n);

		*pp = json_scan_ws(*pp, end);
		if (*pp >= end)
			return -EBADMSG;
		if (**pp == ',') {
			(*pp)++;
			return object ? (scan_key(pp, end, bad_utf8) < 0 ? -EBADMSG : 1) : 1;
		}
		if (**pp != (object ? '}' : ']'))
			return -EBADMSG;
		(*pp)++;
		n->depth--;
	}
	return 0;
}

/* A container was just opened at *pp - 1: its first member, or its end. */
static int scan_open(const char **pp, const char *end, struct nest *n, bool *bad_utf8)
{
	bool object = nest_object(n);

	*pp = json_scan_ws(*pp, end);
	if (*pp < end && **pp == (object ? '}' : ']')) {
		(*pp)++;
		n->depth--;
		return scan_after_value(pp, end, n, bad_utf8);
	}
	return object ? (scan_key(pp, end, bad_utf8) < 0 ? -EBADMSG : 1) : 1;
}

int json_scan_value(const char **pp, const char *end, unsigned max_depth, bool *bad_utf8)
{
	struct nest n = {.max = MIN(max_depth, (unsigned)JSON_SCAN_DEPTH_MAX)};
	const char *p = *pp;
	int r;

	do {
		p = json_scan_ws(p, end);
		if (p >= end)
			r = -EBADMSG;
		else if (*p == '{' || *p == '[') {
			r = nest_push(&n, *p == '{');
			if (r >= 0) {
				p++;
				r = scan_open(&p, end, &n, bad_utf8);
			}
		} else {
			r = scan_scalar(&p, end, bad_utf8);
			if (r >= 0)
				r = scan_after_value(&p, end, &n, bad_utf8);
		}
	} while (r > 0);
	*pp = p;
	return r;
}

int json_iter_open(struct json_iter *it, const char *p, const char *end, char open, unsigned depth)
{
	p = json_scan_ws(p, end);
	*it = (struct json_iter){
	    .p = p, .end = end, .depth = depth, .close = open == '{' ? '}' : ']', .first = true};
	if (p >= end || *p != open || depth > JSON_SCAN_DEPTH_MAX)
		return -EBADMSG;
	it->p++;
	return 0;
}

int json_iter_next(struct json_iter *it, struct json_span *key, bool *bad_utf8)
{
	const char *p = json_scan_ws(it->p, it->end);

	if (p < it->end && *p == it->close) {
		it->p = p + 1;
		return 0;
	}
	if (!it->first) {
		if (p >= it->end || *p != ',')
			goto bad;
		p = json_scan_ws(p + 1, it->end);
	}
	it->first = false;
	if (it->close == '}') {
		key->p = p;
		if (p >= it->end || *p != '"' || scan_string(&p, it->end, bad_utf8) < 0)
			goto bad;
		key->len = (size_t)(p - key->p);
		p = json_scan_ws(p, it->end);
		if (p >= it->end || *p != ':')
			goto bad;
		p = json_scan_ws(p + 1, it->end);
	}
	it->p = p;
	return 1;
bad:
	it->p = p;
	return -EBADMSG;
}

int json_iter_value(struct json_iter *it, struct json_span *val, bool *bad_utf8)
{
	const char *p = it->p;
	int r = json_scan_value(&p, it->end, JSON_SCAN_DEPTH_MAX - it->depth, bad_utf8);

	*val = (struct json_span){it->p, (size_t)(p - it->p)};
	it->p = p;
	return r;
}
