/* A request body's values as written (json_raw.h). */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "lessor/json_raw.h"

struct json_span lessor_raw_member(struct json_span obj, const char *key)
{
	size_t n = strlen(key);
	struct json_iter it;
	struct json_span k, v;
	bool bad = false;

	if (!obj.p || json_iter_open(&it, obj.p, obj.p + obj.len, '{', 1) < 0)
		return (struct json_span){0};
	while (json_iter_next(&it, &k, &bad) > 0) {
		if (json_iter_value(&it, &v, &bad) < 0)
			break;
		if (k.len == n + 2 && memcmp(k.p + 1, key, n) == 0)
			return v;
	}
	return (struct json_span){0};
}

struct json_span lessor_raw_element(struct json_span arr, size_t i)
{
	struct json_iter it;
	struct json_span k, v;
	bool bad = false;

	if (!arr.p || json_iter_open(&it, arr.p, arr.p + arr.len, '[', 1) < 0)
		return (struct json_span){0};
	while (json_iter_next(&it, &k, &bad) > 0) {
		if (json_iter_value(&it, &v, &bad) < 0)
			break;
		if (i-- == 0)
			return v;
	}
	return (struct json_span){0};
}

char *lessor_raw_text(struct json_span v, const cJSON *j)
{
	char *s;

	if (!v.p)
		return cJSON_PrintUnformatted(j);
	s = malloc(v.len + 1);
	if (s) {
		memcpy(s, v.p, v.len);
		s[v.len] = '\0';
	}
	return s;
}

cJSON *lessor_raw_item(const char *text)
{
	const char *p = text, *end = text + strlen(text);
	bool bad = false;

	if (json_scan_value(&p, end, JSON_SCAN_DEPTH_MAX, &bad) < 0 || bad ||
	    json_scan_ws(p, end) != end)
		return cJSON_CreateNull();
	return cJSON_CreateRaw(text);
}
