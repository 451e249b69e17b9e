/* A strict JSON scanner (RFC 8259) that allocates nothing: it finds where
 * values begin and end, so a big document can be walked and validated without
 * building a tree of it.  Nesting is counted, never recursed.  Decoding the
 * small values it finds is left to cJSON.
 *
 * Strings may carry bad UTF-8 (or lone UTF-16 surrogates in \u escapes):
 * that is reported through *bad_utf8 and the scan goes on, so a caller can
 * refuse one value and keep the rest of the document. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#define JSON_SCAN_DEPTH_MAX 1000 /* as cJSON's CJSON_NESTING_LIMIT */

struct json_span {
	const char *p; /* NULL = absent */
	size_t len;
};

const char *json_scan_ws(const char *p, const char *end);

/* One value at *pp (after optional whitespace), at most max_depth arrays or
 * objects deep (clamped to JSON_SCAN_DEPTH_MAX).  On success *pp is just past
 * it; on -EBADMSG it is where the scan stopped. */
int json_scan_value(const char **pp, const char *end, unsigned max_depth, bool *bad_utf8);

/* Walk one object or array without scanning what the caller descends into:
 *
 *   struct json_iter it;
 *   r = json_iter_open(&it, p, end, '{', 1);      // -EBADMSG: not an object
 *   while ((r = json_iter_next(&it, &key, &bad)) > 0) {
 *           // it.p is at the value: either take it whole...
 *           r = json_iter_value(&it, &val, &bad);
 *           // ...or walk it with json_iter_open(&child, it.p, it.end, '[',
 *           // it.depth + 1) and then set it.p = child.p
 *   }
 *   // r == 0: closed, it.p is just past it; r < 0: malformed at it.p
 *
 * key is the member name as written, quotes included (arrays: untouched);
 * depth is how deep the container itself is (the root is 1).  A "," before a
 * closing bracket is refused by the next json_iter_next or the value scan. */
struct json_iter {
	const char *p, *end;
	unsigned depth;
	char close;
	bool first;
};

int json_iter_open(struct json_iter *it, const char *p, const char *end, char open, unsigned depth);
int json_iter_next(struct json_iter *it, struct json_span *key, bool *bad_utf8);
int json_iter_value(struct json_iter *it, struct json_span *val, bool *bad_utf8);
