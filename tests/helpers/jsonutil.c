#include "jsonutil.h"

#include <check.h>
#include <stdarg.h>
#include <stdio.h>

char *tu_fmt(const char *f, ...)
{
	va_list ap;
	char *s = NULL;
	int r;

	va_start(ap, f);
	r = vasprintf(&s, f, ap);
	va_end(ap);
	ck_assert_int_ge(r, 0);
	return s;
}

const cJSON *tu_jget(const cJSON *o, const char *k)
{
	return cJSON_GetObjectItemCaseSensitive(o, k);
}

const char *tu_jstr(const cJSON *o, const char *k)
{
	return tu_jstr_or(o, k, NULL);
}

const char *tu_jstr_or(const cJSON *o, const char *k, const char *dflt)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);

	return cJSON_IsString(v) ? v->valuestring : dflt;
}

double tu_jnum(const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);

	ck_assert_msg(cJSON_IsNumber(v), "no number %s", k);
	return v->valuedouble;
}

double tu_jnum_or(const cJSON *o, const char *k, double dflt)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);

	return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

bool tu_jtrue(const cJSON *o, const char *k)
{
	return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, k));
}
