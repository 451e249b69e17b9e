/* A value of a request body as the client wrote it.  cJSON holds numbers as
 * doubles and strings as C strings: printed again, 2^53 + 1 becomes 2^53, a
 * long integer an exponent, 1e400 null, and "a\u0000b" "a".  A run's input
 * and output are any JSON, kept and served byte for byte (protocol.md), so
 * they are taken from the body's text, found with lib/proto's scanner, and
 * answered as raw cJSON items. */
#pragma once

#include <cjson/cJSON.h>
#include <stddef.h>

#include "proto/json_scan.h"

/* The first member named key of the object at obj (cJSON's choice among
 * duplicates too), as written, in *ret ({NULL, 0}: absent).  -EINVAL when
 * a member name of obj is written with an escape: cJSON compares names
 * decoded ("\u0069nput" is "input"), so which one it took cannot be told.
 * obj must have passed json_scan_value. */
int lessor_raw_member(struct json_span obj, const char *key, struct json_span *ret);
/* What a client is told for that -EINVAL. */
#define LESSOR_RAW_ESCAPED_MSG "member names must be written without escapes"
/* The n elements of the array at arr, in one walk; -EINVAL when it holds
 * fewer. */
int lessor_raw_elements(struct json_span arr, struct json_span *v, size_t n);
/* The value as compact text that parses to the same: the span copied, or, when
 * it is absent (NULL), j printed by cJSON; NULL when out of memory. */
char *lessor_raw_text(struct json_span v, const cJSON *j);
/* An item that prints text as it is; JSON null when text is not one JSON
 * value (a database edited by hand). */
cJSON *lessor_raw_item(const char *text);
