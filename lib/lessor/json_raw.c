/* A request body's values as written (json_raw.h). */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "lessor/json_raw.h"

int lessor_raw_member(struct json_span obj, const char *key, struct json_span *ret)
{
	size_t n = strlen(key);
	struct json_iter it;
	struct json_span k, v;
	bool bad = false;

	*ret = (struct json_span){0};
	if (!obj.p || json_iter_open(&it, obj.p, obj.p + obj.len, '{', 1) < 0)
		return 0;
	while (json_iter_next(&it, &k, &bad) > 0) {
		if (memchr(k.p, '\\', k.len))
			return -EINVAL;
		if (json_iter_value(&it, &v, &bad) < 0)
			break;
		if (!ret->p && k.len == n + 2 && memcmp(k.p + 1, key, n) == 0)
			*ret = v;
	}
	return 0;
}

int lessor_raw_elements(struct json_span arr, struct json_span *v, size_t n)
{
	struct json_iter it;
	struct json_span k;
	bool bad = false;
	size_t i = 0;

	if (!arr.p || json_iter_open(&it, arr.p, arr.p + arr.len, '[', 1) < 0)
		return -EINVAL;
	while (i < n && json_iter_next(&it, &k, &bad) > 0)
		if (json_iter_value(&it, &v[i++], &bad) < 0)
			return -EINVAL;
	return i == n ? 0 : -EINVAL;
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
