/* Token files, and the constant-time lookup of a presented token. */
#include "lessor/tokens.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/fileio.h"
#include "util/macro.h"
#include "util/strutil.h"

#define TOKENS_MAX 4096
#define FILE_MAX (1u << 20)

struct token {
	enum lessor_role role;
	char name[LESSOR_TOKEN_NAME_MAX + 1];
	char *secret;
};

struct lessor_tokens {
	struct token *v;
	size_t n, cap;
	size_t n_workers;
	bool legacy;
};

_printf_(3, 4) static int fail(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

static void wipe(char *s)
{
	if (s)
		explicit_bzero(s, strlen(s));
}

lessor_tokens *lessor_tokens_free(lessor_tokens *t)
{
	if (!t)
		return NULL;
	for (size_t i = 0; i < t->n; i++) {
		wipe(t->v[i].secret);
		free(t->v[i].secret);
	}
	free(t->v);
	free(t);
	return NULL;
}

bool lessor_tokens_required(const lessor_tokens *t)
{
	return t && t->n > 0;
}

bool lessor_tokens_legacy(const lessor_tokens *t)
{
	return t && t->legacy;
}

size_t lessor_tokens_n_workers(const lessor_tokens *t)
{
	return t ? t->n_workers : 0;
}

/* Constant time in the length of want: no early exit on a mismatch. */
static unsigned char token_differs(const char *want, const char *got, size_t got_len)
{
	size_t n = strlen(want);
	unsigned char d = n != got_len;

	for (size_t i = 0; i < n; i++)
		d |= (unsigned char)want[i] ^ (unsigned char)(i < got_len ? got[i] : 0);
	return d;
}

void lessor_tokens_check(const lessor_tokens *t, const char *presented,
                         struct lessor_principal *ret)
{
	size_t len = presented ? strlen(presented) : 0, match = 0;
	unsigned found = 0;

	*ret = (struct lessor_principal){.role = LESSOR_ROLE_ANY};
	if (!lessor_tokens_required(t))
		return;
	ret->role = LESSOR_ROLE_NONE;
	if (!presented)
		return;
	/* every token is compared, the match selected without a branch */
	for (size_t i = 0; i < t->n; i++) {
		unsigned eq = token_differs(t->v[i].secret, presented, len) == 0;
		size_t mask = (size_t)0 - (size_t)eq;

		match = (match & ~mask) | (i & mask);
		found |= eq;
	}
	if (!found)
		return;
	ret->role = t->v[match].role;
	memcpy(ret->name, t->v[match].name, sizeof(ret->name));
}

/* ---- loading ---- */

static bool valid_name(const char *s)
{
	return str_in_charset(s, 1, LESSOR_TOKEN_NAME_MAX, "._-");
}

static bool valid_secret(const char *s)
{
	size_t n = strlen(s);

	if (n < LESSOR_TOKEN_MIN || n > LESSOR_TOKEN_MAX)
		return false;
	for (; *s; s++)
		if (*s <= ' ' || *s > '~')
			return false;
	return true;
}

/* Takes secret (wiped and freed on failure). */
static int add(lessor_tokens *t, enum lessor_role role, const char *name, char *secret,
               const char *where, char *err, size_t errlen)
{
	int r = 0;

	for (size_t i = 0; i < t->n && r == 0; i++) {
		if (streq(t->v[i].secret, secret))
			r = fail(err, errlen, "%s: the same token is given twice", where);
		else if (role == LESSOR_ROLE_WORKER && streq(t->v[i].name, name))
			r = fail(err, errlen, "%s: worker name '%s' is given twice", where, name);
	}
	if (r == 0 && t->n >= TOKENS_MAX)
		r = fail(err, errlen, "%s: more than %d tokens", where, TOKENS_MAX);
	if (r == 0 && t->n == t->cap) {
		size_t cap = t->cap ? 2 * t->cap : 8;
		struct token *v = realloc(t->v, cap * sizeof(*v));

		if (!v)
			r = -ENOMEM;
		else {
			t->v = v;
			t->cap = cap;
		}
	}
	if (r < 0) {
		wipe(secret);
		free(secret);
		return r;
	}
	t->v[t->n] = (struct token){.role = role, .secret = secret};
	snprintf(t->v[t->n].name, sizeof(t->v[t->n].name), "%s", name);
	t->n++;
	t->n_workers += role == LESSOR_ROLE_WORKER;
	return 0;
}

static int read_text(const char *path, char **ret, size_t *ret_len, char *err, size_t errlen)
{
	int r = read_file_capped(path, FILE_MAX, ret, ret_len);

	if (r < 0) {
		fail(err, errlen, "cannot read %s: %s", path,
		     r == -EINVAL ? "not a regular file" : strerror(-r));
		return r;
	}
	return 0;
}

/* A file of one token (surrounding blanks ignored). */
static int load_single(lessor_tokens *t, enum lessor_role role, const char *path, char *err,
                       size_t errlen)
{
	_cleanup_free_ char *raw = NULL;
	char *s, *secret;
	size_t len = 0;
	int r = read_text(path, &raw, &len, err, errlen);

	if (r < 0)
		return r;
	s = str_trim(raw);
	if (!*s || strpbrk(s, " \t\r\n"))
		r = fail(err, errlen, "%s must hold one non-empty token", path);
	else if (role != LESSOR_ROLE_ANY && !valid_secret(s))
		r = fail(err, errlen, "%s: a token must be %d..%d printable characters", path,
		         LESSOR_TOKEN_MIN, LESSOR_TOKEN_MAX);
	else if (!(secret = strdup(s)))
		r = -ENOMEM;
	else
		r = add(t, role, "", secret, path, err, errlen);
	explicit_bzero(raw, len);
	return r;
}

static int worker_line(lessor_tokens *t, char *line, const char *where, char *err, size_t errlen)
{
	char *name, *secret, *rest, *copy;

	name = strtok_r(line, " \t\r", &rest);
	if (!name || *name == '#')
		return 0;
	secret = strtok_r(NULL, " \t\r", &rest);
	if (!secret || strtok_r(NULL, " \t\r", &rest))
		return fail(err, errlen, "%s: expected 'NAME TOKEN'", where);
	if (!valid_name(name))
		return fail(err, errlen, "%s: a worker name is 1..%d of [A-Za-z0-9._-]", where,
		            LESSOR_TOKEN_NAME_MAX);
	if (!valid_secret(secret))
		return fail(err, errlen, "%s: a token must be %d..%d printable characters", where,
		            LESSOR_TOKEN_MIN, LESSOR_TOKEN_MAX);
	copy = strdup(secret);
	if (!copy)
		return -ENOMEM;
	return add(t, LESSOR_ROLE_WORKER, name, copy, where, err, errlen);
}

static int load_workers(lessor_tokens *t, const char *path, char *err, size_t errlen)
{
	_cleanup_free_ char *raw = NULL;
	char *p, *line, where[512];
	unsigned no = 0;
	size_t len = 0;
	int r = read_text(path, &raw, &len, err, errlen);

	for (p = raw; r >= 0 && p && *p; p = line) {
		line = strchr(p, '\n');
		if (line)
			*line++ = '\0';
		snprintf(where, sizeof(where), "%s line %u", path, ++no);
		r = worker_line(t, p, where, err, errlen);
	}
	if (raw)
		explicit_bzero(raw, len);
	return r;
}

static int check_combination(const struct lessor_token_files *f, char *err, size_t errlen)
{
	if (f->legacy && (f->admin || f->workers))
		return fail(err, errlen,
		            "--token-file cannot be combined with --admin-token-file or "
		            "--worker-tokens-file");
	if (f->workers && !f->admin)
		return fail(err, errlen, "--worker-tokens-file needs --admin-token-file");
	return 0;
}

int lessor_tokens_load(const struct lessor_token_files *f, lessor_tokens **ret, char *err,
                       size_t errlen)
{
	lessor_tokens *t;
	int r = check_combination(f, err, errlen);

	if (r < 0)
		return r;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->legacy = f->legacy != NULL;
	if (f->legacy)
		r = load_single(t, LESSOR_ROLE_ANY, f->legacy, err, errlen);
	if (r >= 0 && f->admin)
		r = load_single(t, LESSOR_ROLE_ADMIN, f->admin, err, errlen);
	if (r >= 0 && f->workers)
		r = load_workers(t, f->workers, err, errlen);
	if (r < 0) {
		if (r == -ENOMEM)
			snprintf(err, errlen, "out of memory");
		lessor_tokens_free(t);
		return r;
	}
	*ret = t;
	return 0;
}
