/* Strict readers for the fields of a request body (cJSON).  A field that is
 * absent or JSON null takes its default (or is an error when required); a
 * present field of the wrong type or out of range is an error.  On error the
 * readers return -EINVAL and write a message for the client into msg. */
#pragma once

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LESSOR_MSG_MAX 256

/* The protocol's charsets and limits are proto/v1.h's (v1_valid_id, ...),
 * the same the client checks what it sends with. */

int lessor_field_int(const cJSON *o, const char *name, bool required, int64_t min, int64_t max,
                     int64_t dflt, int64_t *ret, char msg[LESSOR_MSG_MAX]);
int lessor_field_bool(const cJSON *o, const char *name, bool dflt, bool *ret,
                      char msg[LESSOR_MSG_MAX]);
/* valid: the charset check; NULL accepts any string of at most max bytes. */
int lessor_field_str(const cJSON *o, const char *name, bool required, size_t max,
                     bool (*valid)(const char *), const char **ret, char msg[LESSOR_MSG_MAX]);
/* One of the NULL-terminated names; *ret points into names. */
int lessor_field_enum(const cJSON *o, const char *name, bool required, const char *const *names,
                      const char **ret, char msg[LESSOR_MSG_MAX]);

/* A list of tags: trimmed, validated, sorted, deduplicated, at most
 * V1_TAGS_MAX.  Absent = empty list (never NULL on success). */
int lessor_field_tags(const cJSON *o, const char *name, char ***ret, char msg[LESSOR_MSG_MAX]);
/* A list of identifiers; absent or null leaves *ret NULL ("any"), [] is an
 * empty list ("none"). */
int lessor_field_ids(const cJSON *o, const char *name, size_t max, char ***ret,
                     char msg[LESSOR_MSG_MAX]);

/* A JSON array of strings as compact text. */
char *lessor_strv_to_json(char *const *v);
