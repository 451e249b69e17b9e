#include "util/strutil.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>

#include "util/macro.h"

bool str_in_charset(const char *s, size_t min, size_t max, const char *extra)
{
	size_t n;

	if (!s)
		return false;
	n = strlen(s);
	if (n < min || n > max)
		return false;
	for (const char *p = s; *p; p++)
		if (!isalnum((unsigned char)*p) && !strchr(extra, *p))
			return false;
	return true;
}

char **strv_free(char **v)
{
	if (v)
		for (char **p = v; *p; p++)
			free(*p);
	free(v);
	return NULL;
}

size_t strv_length(char *const *v)
{
	size_t n = 0;

	while (v && v[n])
		n++;
	return n;
}

int strv_push(char ***v, char *s)
{
	size_t n = strv_length(*v);
	char **nv = realloc(*v, (n + 2) * sizeof(char *));

	if (!nv) {
		free(s);
		return -ENOMEM;
	}
	nv[n] = s;
	nv[n + 1] = NULL;
	*v = nv;
	return 0;
}

int strv_extend(char ***v, const char *s)
{
	char *c = strdup(s);

	if (!c)
		return -ENOMEM;
	return strv_push(v, c);
}

char **strv_copy(char *const *v)
{
	char **c = calloc(strv_length(v) + 1, sizeof(char *));

	if (!c)
		return NULL;
	for (size_t i = 0; v && v[i]; i++)
		if (!(c[i] = strdup(v[i])))
			return strv_free(c);
	return c;
}

bool strv_contains(char *const *v, const char *s)
{
	for (size_t i = 0; v && v[i]; i++)
		if (streq(v[i], s))
			return true;
	return false;
}

char *str_trim(char *s)
{
	char *e;

	while (isspace((unsigned char)*s))
		s++;
	e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = '\0';
	return s;
}

int strv_split(const char *s, const char *sep, char ***ret)
{
	_cleanup_free_ char *copy = strdup(s ? s : "");
	char **v = calloc(1, sizeof(char *));
	char *save = NULL, *tok;

	if (!copy || !v) {
		free(v);
		return -ENOMEM;
	}
	for (tok = strtok_r(copy, sep, &save); tok; tok = strtok_r(NULL, sep, &save)) {
		tok = str_trim(tok);
		if (*tok && strv_extend(&v, tok) < 0) {
			strv_free(v);
			return -ENOMEM;
		}
	}
	*ret = v;
	return 0;
}

static int cmpstr(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

void strv_sort_uniq(char **v)
{
	size_t n = strv_length(v), w = 0;

	if (n < 2)
		return;
	qsort(v, n, sizeof(char *), cmpstr);
	for (size_t i = 0; i < n; i++) {
		if (w > 0 && streq(v[w - 1], v[i])) {
			free(v[i]);
			continue;
		}
		v[w++] = v[i];
	}
	v[w] = NULL;
}
