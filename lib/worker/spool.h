/* The spool's files (spool.c): results that could not be delivered, one
 * fsync'd entry per lease.  Delivering them is spooler.c's. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "logship/logship.h"
#include "proto/proto.h"

#define SPOOL_BODY_SLACK (1u << 20) /* a body's fields besides the output */
#define SPOOL_TAIL_MAX (16u << 20)  /* the unshipped log kept with a result */
#define SPOOL_NAME_MAX (PROTO_ID_MAX + 24)

struct spool_tail {
	const void *data;
	size_t len;
	struct logship_resume where; /* where data goes in the run's log */
	unsigned attempt;            /* for logship's restart marker */
};

struct spool_entry {
	int error;  /* < 0: the entry could not be read (body is NULL) */
	char *name; /* "<run id>@<token hash>" */
	char *run_id;
	char *body; /* the complete body */
	char *tail; /* log bytes still to append (see where), or NULL */
	size_t tail_len;
	struct logship_resume where;
	unsigned attempt;
};
typedef int (*spool_fn)(struct spool_entry *e, void *ud); /* takes e's fields */

/* The largest complete body spool_write accepts (and replay reads). */
size_t spool_max_body(uint64_t max_output_bytes);
/* lease_key: the grant's (drv_grant.lease_key), hashed into the name */
int spool_entry_name(const char *run_id, const char *token, char *buf, size_t len);
int spool_write(const char *dir, const char *name, const char *complete_body, size_t max_body,
                const struct spool_tail *tail);
int spool_foreach(const char *dir, size_t max_body, spool_fn fn, void *ud);
void spool_entry_done(struct spool_entry *e);
/* Removes one entry's files, by name. */
int spool_remove(const char *dir, const char *name);
/* Removes temporaries and orphan tails left by a crash; returns how many. */
int spool_clean(const char *dir, void (*fn)(const char *name, void *ud), void *ud);
int spool_count(const char *dir);
/* Sets the body's top-level "log_length" (the first such key: it precedes
 * every string that could hold one). */
int spool_body_set_log_length(char **body, uint64_t log_length);
