/* Private to lib/conf: the key tables and the typed value parsers/formatters
 * that loading, printing, diffing and retaining all go through. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "conf/conf.h"

static inline void *mfree(void *p)
{
	free(p);
	return NULL;
}

enum conf_type {
	CONF_PATH,       /* absolute path; empty = unset */
	CONF_URL,        /* http(s) URL; empty = unset */
	CONF_ID,         /* worker id (v1_valid_worker_id); empty = unset (generated) */
	CONF_LISTEN,     /* addr:port of the status endpoint; empty = off */
	CONF_DURATION,   /* usec_t */
	CONF_UINT,       /* unsigned */
	CONF_SIZE,       /* uint64_t bytes: 512, 512K, 64M, 1G, 1GiB */
	CONF_TAGS,       /* char **, sorted and unique */
	CONF_LEVEL,      /* int syslog priority */
	CONF_FORMAT,     /* enum log_format */
	CONF_COMMAND,    /* char ** argv, ExecStart-style words */
	CONF_ENV,        /* char ** NAME=value, assignments accumulate, empty clears */
	CONF_USER,       /* char * user name, resolving uid/gid of the conf_workflow */
	CONF_BOOL,       /* bool: yes/no true/false on/off 1/0 */
	CONF_PROTOCOL,   /* char *, one of conf_protocols */
	CONF_NAME,       /* char *, 1..255 bytes of [A-Za-z0-9._:-]: safe in a URL path */
	CONF_EXIT_CODES, /* workflow only: terminal_exit_codes, sorted unique 1..255 */
	CONF_NAMES,      /* char **, CONF_NAME words, sorted and unique, never NULL */
	CONF_LOGIN,      /* char *, 1..255 bytes of printable ASCII but ':' (HTTP basic) */
};

/* The drivers lib/proto has (drv_find() knows each name), NULL-terminated. */
extern const char *const conf_protocols[];

enum {
	KEY_LIVE = 1 << 0,          /* a change applies without a restart */
	KEY_INFINITY = 1 << 1,      /* a duration may be "infinity" */
	KEY_WHOLE_SECONDS = 1 << 2, /* the protocol carries it in seconds */
	KEY_REQUIRED = 1 << 3,      /* an empty value is an error */
};

struct conf_key {
	const char *section; /* "api" "worker" "status" "log", or "workflow" */
	const char *name;
	enum conf_type type;
	size_t offset; /* into struct conf, or struct conf_workflow for "workflow" */
	uint64_t min, max;
	unsigned flags;
	const char *def; /* built-in default as text; NULL = unset or computed */
};

extern const struct conf_key conf_keys[];
extern const size_t conf_n_keys;
extern const struct conf_key conf_wf_keys[];
extern const size_t conf_n_wf_keys;

#define CONF_PROBLEM_MAX 512

/* A key of another protocol than this one: an error in [api], ignored in a
 * workflow, and not printed by conf_print(). */
bool conf_key_foreign(const char *protocol, const char *section, const char *name);

/* Parse value into the field of base described by k (replacing it, or appending
 * for CONF_ENV).  -EINVAL with a human reason in problem, or -ENOMEM. */
int conf_value_parse(const struct conf_key *k, void *base, const char *value,
                     char problem[CONF_PROBLEM_MAX]);
/* The field as text conf_value_parse accepts again ("" = unset). */
void conf_value_write(FILE *f, const struct conf_key *k, const void *base, bool redact);
char *conf_value_format(const struct conf_key *k, const void *base, bool redact);
void conf_value_free(const struct conf_key *k, void *base);

/* Words of an ExecStart-style line: blanks separate, '...' is literal, "..." and
 * bare text take backslash escapes (\\ \" \' \<blank> \n \t \r \xHH). */
int conf_split_words(const char *s, char ***ret, char problem[CONF_PROBLEM_MAX]);
/* One word quoted (only when needed) so conf_split_words gives it back. */
void conf_write_word(FILE *f, const char *w);

/* NULL when s (n bytes) is clean text: valid UTF-8, no NUL or control byte but tab. */
const char *conf_text_problem(const char *s, size_t n);
