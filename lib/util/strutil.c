#include "util/strutil.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
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

bool strv_equal(char *const *a, char *const *b)
{
	size_t i = 0;

	for (; a && b && a[i] && b[i]; i++)
		if (!streq(a[i], b[i]))
			return false;
	return !(a && a[i]) && !(b && b[i]);
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

size_t utf8_seq_len(const void *p, size_t n)
{
	const unsigned char *s = p;
	size_t len;
	uint32_t cp, min;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf)
		len = 2, cp = s[0] & 0x1f, min = 0x80;
	else if ((s[0] & 0xf0) == 0xe0)
		len = 3, cp = s[0] & 0x0f, min = 0x800;
	else if (s[0] >= 0xf0 && s[0] <= 0xf4)
		len = 4, cp = s[0] & 0x07, min = 0x10000;
	else
		return 0;
	if (len > n)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80) /* also stops at a NUL */
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}
