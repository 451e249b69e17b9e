#include "lessor/fields.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto/v1.h"
#include "util/macro.h"
#include "util/strutil.h"

_printf_(2, 3) static int fail(char msg[LESSOR_MSG_MAX], const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, LESSOR_MSG_MAX, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/* The field, or NULL when absent or null.  -EINVAL when required and missing. */
static int lookup(const cJSON *o, const char *name, bool required, const cJSON **ret,
                  char msg[LESSOR_MSG_MAX])
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);

	if (cJSON_IsNull(v))
		v = NULL;
	if (!v && required)
		return fail(msg, "'%s' is required", name);
	*ret = v;
	return 0;
}

int lessor_field_int(const cJSON *o, const char *name, bool required, int64_t min, int64_t max,
                     int64_t dflt, int64_t *ret, char msg[LESSOR_MSG_MAX])
{
	const cJSON *v = NULL;
	int r = lookup(o, name, required, &v, msg);

	if (r < 0)
		return r;
	if (!v) {
		*ret = dflt;
		return 0;
	}
	if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
	    v->valuedouble < (double)min || v->valuedouble > (double)max)
		return fail(msg, "'%s' must be an integer in %lld..%lld", name, (long long)min,
		            (long long)max);
	*ret = (int64_t)v->valuedouble;
	return 0;
}

int lessor_field_bool(const cJSON *o, const char *name, bool dflt, bool *ret,
                      char msg[LESSOR_MSG_MAX])
{
	const cJSON *v = NULL;

	(void)lookup(o, name, false, &v, msg);
	if (!v) {
		*ret = dflt;
		return 0;
	}
	if (!cJSON_IsBool(v))
		return fail(msg, "'%s' must be true or false", name);
	*ret = cJSON_IsTrue(v);
	return 0;
}

int lessor_field_str(const cJSON *o, const char *name, bool required, size_t max,
                     bool (*valid)(const char *), const char **ret, char msg[LESSOR_MSG_MAX])
{
	const cJSON *v = NULL;
	int r = lookup(o, name, required, &v, msg);

	if (r < 0)
		return r;
	if (!v) {
		*ret = NULL;
		return 0;
	}
	if (!cJSON_IsString(v))
		return fail(msg, "'%s' must be a string", name);
	if (valid ? !valid(v->valuestring) : strlen(v->valuestring) > max)
		return fail(msg, "'%s' is malformed or too long", name);
	*ret = v->valuestring;
	return 0;
}

int lessor_field_enum(const cJSON *o, const char *name, bool required, const char *const *names,
                      const char **ret, char msg[LESSOR_MSG_MAX])
{
	const char *s;
	int r = lessor_field_str(o, name, required, 64, NULL, &s, msg);

	if (r < 0 || !s) {
		*ret = NULL;
		return r;
	}
	for (size_t i = 0; names[i]; i++)
		if (streq(s, names[i])) {
			*ret = names[i];
			return 0;
		}
	return fail(msg, "'%s' has an unknown value", name);
}

/* Every element of the array v as a string that passes valid (after trimming
 * when trim), into a new strv.  Checks the count against max. */
static int read_strings(const cJSON *v, const char *name, size_t max, bool trim,
                        bool (*valid)(const char *), char ***ret, char msg[LESSOR_MSG_MAX])
{
	char **out = calloc(1, sizeof(char *));
	const cJSON *e;

	if (!out)
		return -ENOMEM;
	if (!cJSON_IsArray(v) || (size_t)cJSON_GetArraySize(v) > max) {
		strv_free(out);
		return fail(msg, "'%s' must be an array of at most %zu strings", name, max);
	}
	cJSON_ArrayForEach(e, v)
	{
		_cleanup_free_ char *copy = cJSON_IsString(e) ? strdup(e->valuestring) : NULL;
		const char *s = copy && trim ? str_trim(copy) : copy;

		if (!s || !valid(s)) {
			strv_free(out);
			return fail(msg, "'%s' holds a malformed entry", name);
		}
		if (strv_extend(&out, s) < 0) {
			strv_free(out);
			return -ENOMEM;
		}
	}
	*ret = out;
	return 0;
}

int lessor_field_tags(const cJSON *o, const char *name, char ***ret, char msg[LESSOR_MSG_MAX])
{
	const cJSON *v = NULL;
	char **tags;
	int r;

	(void)lookup(o, name, false, &v, msg);
	if (!v) {
		*ret = calloc(1, sizeof(char *));
		return *ret ? 0 : -ENOMEM;
	}
	r = read_strings(v, name, V1_TAGS_MAX, true, v1_valid_tag, &tags, msg);
	if (r < 0)
		return r;
	strv_sort_uniq(tags);
	*ret = tags;
	return 0;
}

int lessor_field_ids(const cJSON *o, const char *name, size_t max, char ***ret,
                     char msg[LESSOR_MSG_MAX])
{
	const cJSON *v = NULL;

	(void)lookup(o, name, false, &v, msg);
	if (!v) {
		*ret = NULL;
		return 0;
	}
	return read_strings(v, name, max, false, v1_valid_id, ret, msg);
}

char *lessor_strv_to_json(char *const *v)
{
	cJSON *a = cJSON_CreateArray();
	char *out = NULL;

	if (!a)
		return NULL;
	for (size_t i = 0; v && v[i]; i++)
		if (!cJSON_AddItemToArray(a, cJSON_CreateString(v[i])))
			goto done;
	out = cJSON_PrintUnformatted(a);
done:
	cJSON_Delete(a);
	return out;
}
