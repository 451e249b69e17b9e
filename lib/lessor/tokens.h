/* lessor's bearer tokens and what each may do: one admin token (the admin
 * API), named worker tokens (the worker endpoints, and only the runs claimed
 * with that token; the name is the worker's identity), or the single
 * deprecated --token-file token that is both.  A set is loaded from files
 * whole and replaced whole (SIGHUP); a presented token is compared against
 * every token of the set, in constant time for each and without an early
 * exit.  See docs/lessor.md, "Tokens". */
#pragma once

#include <stdbool.h>
#include <stddef.h>

enum lessor_role {
	LESSOR_ROLE_NONE,   /* no or an unknown token */
	LESSOR_ROLE_ADMIN,  /* the admin API only */
	LESSOR_ROLE_WORKER, /* the worker endpoints, its own runs only */
	LESSOR_ROLE_ANY,    /* everything: the deprecated --token-file, or no authentication */
};

#define LESSOR_TOKEN_NAME_MAX 64
#define LESSOR_TOKEN_MIN 16 /* bytes, for the admin and worker tokens */
#define LESSOR_TOKEN_MAX 512

struct lessor_principal {
	enum lessor_role role;
	char name[LESSOR_TOKEN_NAME_MAX + 1]; /* a worker token's name, else "" */
};

struct lessor_token_files {
	const char *admin;   /* one token */
	const char *workers; /* "NAME TOKEN" lines, '#' comments */
	const char *legacy;  /* one token for everything (deprecated) */
};

typedef struct lessor_tokens lessor_tokens;

/* All files NULL: a set that requires nothing.  On failure err says why
 * (file and line, never a token). */
int lessor_tokens_load(const struct lessor_token_files *f, lessor_tokens **ret, char *err,
                       size_t errlen);
/* Wipes the tokens; NULL is a no-op. */
lessor_tokens *lessor_tokens_free(lessor_tokens *t);

/* false: no authentication (nothing was configured). */
bool lessor_tokens_required(const lessor_tokens *t);
bool lessor_tokens_legacy(const lessor_tokens *t);
size_t lessor_tokens_n_workers(const lessor_tokens *t);

/* Who presents this bearer token (NULL = none): LESSOR_ROLE_ANY when
 * nothing is required, LESSOR_ROLE_NONE when it matches no token. */
void lessor_tokens_check(const lessor_tokens *t, const char *presented,
                         struct lessor_principal *ret);
