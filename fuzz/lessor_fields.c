/* lessor's readers of request fields (lib/lessor/fields.c: every type, tags
 * and id lists, their charsets) over a JSON body, and a log append's
 * Content-Range (lessor_parse_content_range).  The first byte picks which,
 * and for Content-Range also the body length. */
#include <cjson/cJSON.h>
#include <string.h>

#include "fuzz.h"
#include "lessor/api-int.h"
#include "lessor/fields.h"
#include "proto/v1.h"
#include "util/strutil.h"

static const char *const names[] = {"id",    "workflow", "tags",      "workflows", "max_runs",
                                    "input", "status",   "retryable", NULL};

static void strv_check_free(char **v, size_t max, bool (*valid)(const char *))
{
	size_t n = 0;
	char *json;

	for (; v && v[n]; n++) {
		FUZZ_ASSERT(valid(v[n]));
		if (n > 0 && valid == v1_valid_tag)
			FUZZ_ASSERT(strcmp(v[n - 1], v[n]) < 0); /* sorted, unique */
	}
	FUZZ_ASSERT(n <= max);
	json = lessor_strv_to_json(v);
	if (json) {
		cJSON *j = cJSON_Parse(json);

		FUZZ_ASSERT(cJSON_IsArray(j) && (size_t)cJSON_GetArraySize(j) == n);
		cJSON_Delete(j);
	}
	free(json);
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

static void fields(const char *body, size_t len)
{
	char msg[LESSOR_MSG_MAX];
	cJSON *o = cJSON_ParseWithLength(body, len);
	int64_t i64;
	bool b;
	const char *s;
	char **v = NULL;

	if (!cJSON_IsObject(o)) {
		cJSON_Delete(o);
		return;
	}
	for (const char *const *n = names; *n; n++) {
		if (lessor_field_int(o, *n, false, -5, 1000, 7, &i64, msg) == 0)
			FUZZ_ASSERT(i64 >= -5 && i64 <= 1000);
		else
			FUZZ_ASSERT(msg[0]);
		(void)lessor_field_int(o, *n, true, INT64_MIN, INT64_MAX, 0, &i64, msg);
		(void)lessor_field_bool(o, *n, true, &b, msg);
		/* with a charset check, the check is the bound */
		if (lessor_field_str(o, *n, false, 16, v1_valid_id, &s, msg) == 0 && s)
			FUZZ_ASSERT(v1_valid_id(s));
		if (lessor_field_str(o, *n, true, 4096, NULL, &s, msg) == 0)
			FUZZ_ASSERT(s && strlen(s) <= 4096);
		static const char *const statuses[] = {"succeeded", "failed", "cancelled", NULL};
		if (lessor_field_enum(o, *n, false, statuses, &s, msg) == 0 && s)
			FUZZ_ASSERT(streq(s, "succeeded") || streq(s, "failed") ||
			            streq(s, "cancelled"));
		if (lessor_field_tags(o, *n, &v, msg) == 0) {
			FUZZ_ASSERT(v);
			strv_check_free(v, V1_TAGS_MAX, v1_valid_tag);
		}
		v = NULL;
		if (lessor_field_ids(o, *n, 3, &v, msg) == 0)
			strv_check_free(v, 3, v1_valid_id);
		v = NULL;
	}
	(void)v1_valid_worker_id(body);
	cJSON_Delete(o);
}

static void content_range(const char *h, size_t len)
{
	uint64_t start = 0;

	if (lessor_parse_content_range(h, len, &start) == 0) {
		FUZZ_ASSERT(strncmp(h, "bytes ", 6) == 0);
		FUZZ_ASSERT(start <= UINT64_MAX - len);
	}
}

FUZZ_TARGET(lessor_fields)
{
	char *s;

	if (size < 1)
		return 0;
	s = fuzz_strndup(data + 1, size - 1);
	if (data[0] & 1)
		content_range(s, data[0] >> 1);
	else
		fields(s, size - 1);
	free(s);
	return 0;
}
