/* Small helpers the tests share for reading JSON answers and formatting
 * strings (each asserts with Check where it says so). */
#pragma once

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "util/macro.h"

/* asprintf that asserts: the string (free it). */
_printf_(1, 2) char *tu_fmt(const char *f, ...);
/* o[k] whatever its type; NULL when o has none (or o is NULL). */
const cJSON *tu_jget(const cJSON *o, const char *k);
/* o[k] when it is a string, else NULL. */
const char *tu_jstr(const cJSON *o, const char *k);
/* o[k] when it is a string, else dflt ("" suits ck_assert_str_*, which fail on NULL). */
const char *tu_jstr_or(const cJSON *o, const char *k, const char *dflt);
/* o[k] when it is a number; asserts that it is one. */
double tu_jnum(const cJSON *o, const char *k);
/* o[k] when it is a number, else dflt. */
double tu_jnum_or(const cJSON *o, const char *k, double dflt);
/* o[k] is true (a JSON true, not a truthy value). */
bool tu_jtrue(const cJSON *o, const char *k);
