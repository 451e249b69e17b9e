/* String helpers. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

static inline bool streq(const char *a, const char *b)
{
	return strcmp(a, b) == 0;
}

static inline bool streq_ptr(const char *a, const char *b)
{
	return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* Returns the rest of s after prefix, or NULL. */
static inline const char *startswith(const char *s, const char *prefix)
{
	size_t n = strlen(prefix);

	return strncmp(s, prefix, n) == 0 ? s + n : NULL;
}

/* Length of the valid UTF-8 sequence at s (n >= 1 bytes there; a NUL is one
 * of 1), 0 when it is none: a bad lead or continuation byte, an overlong
 * form, a surrogate, past U+10FFFF, or cut short. */
size_t utf8_seq_len(const void *s, size_t n);

/* Every byte of s (len bytes, 1..max) is in the set described by allowed(). */
bool str_in_charset(const char *s, size_t min, size_t max, const char *extra);

/* NULL-terminated string vectors. */
char **strv_free(char **v);
static inline void strv_freep(char ***v)
{
	strv_free(*v);
}
size_t strv_length(char *const *v);
int strv_push(char ***v, char *s);     /* takes ownership of s */
int strv_extend(char ***v, const char *s); /* copies s */
char **strv_copy(char *const *v);
bool strv_contains(char *const *v, const char *s);
bool strv_equal(char *const *a, char *const *b); /* NULL is the empty vector */
/* Split on any of sep, trimming blanks; empty parts are dropped. */
int strv_split(const char *s, const char *sep, char ***ret);
void strv_sort_uniq(char **v);

char *str_trim(char *s); /* in place; returns s moved past leading blanks */
