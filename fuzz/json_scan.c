/* The allocation-free JSON scanner (lib/proto/json_scan.c), whole values and
 * the object/array iterator, against cJSON: a document the scanner accepts as
 * strict JSON with clean UTF-8 must parse with cJSON too. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <string.h>

#include "fuzz.h"
#include "proto/json_scan.h"

/* Walk every container the iterator way, as proto_claim_parse does. */
static int walk(const char **pp, const char *end, unsigned depth)
{
	struct json_iter it;
	struct json_span key;
	const char *p = json_scan_ws(*pp, end);
	bool bad = false;
	char open;
	int r;

	if (p >= end)
		return -EBADMSG;
	if ((*p != '{' && *p != '[') || depth > 64) {
		const char *v = p;

		r = json_scan_value(&v, end, JSON_SCAN_DEPTH_MAX, &bad);
		FUZZ_ASSERT(v >= p && v <= end);
		if (r >= 0)
			*pp = v;
		return r;
	}
	open = *p;
	r = json_iter_open(&it, p, end, open, depth);
	if (r < 0)
		return r;
	while ((r = json_iter_next(&it, &key, &bad)) > 0) {
		if (open == '{')
			FUZZ_ASSERT(key.p && key.len >= 2 && key.p[0] == '"' &&
			            key.p[key.len - 1] == '"');
		r = walk(&it.p, end, depth + 1);
		if (r < 0)
			return r;
	}
	if (r == 0)
		*pp = it.p;
	return r;
}

FUZZ_TARGET(json_scan)
{
	char *s = fuzz_strndup(data, size);
	const char *p = s, *end = s + size;
	bool bad = false;
	int r;

	r = json_scan_value(&p, end, JSON_SCAN_DEPTH_MAX, &bad);
	FUZZ_ASSERT(p >= s && p <= end);
	if (r >= 0 && !bad && json_scan_ws(p, end) == end && !memchr(s, '\0', size)) {
		cJSON *j = cJSON_ParseWithLength(s, size);

		FUZZ_ASSERT(j);
		cJSON_Delete(j);
	}

	const char *q = s;
	int w = walk(&q, end, 1);
	FUZZ_ASSERT(q >= s && q <= end);
	/* the iterator agrees with the whole-value scan on what is well formed */
	if (r >= 0)
		FUZZ_ASSERT(w >= 0 && q == p);
	free(s);
	return 0;
}
