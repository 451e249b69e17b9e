/* A strict parser of the Prometheus text exposition format 0.0.4, for tests:
 * whatever it accepts, Prometheus accepts, and it rejects what Prometheus would
 * reject or silently misread.  Checked:
 *  - every line ends in '\n' (the last one too); no NUL bytes;
 *  - "# HELP name text" (escapes \\ and \n only) and "# TYPE name type" (counter,
 *    gauge, histogram, summary, untyped), at most one of each per family, both
 *    before the family's first sample; other '#' lines are comments;
 *  - metric names [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]*
 *    (no "__" prefix, no duplicates), label values with escapes \\ \" \n only
 *    and valid UTF-8;
 *  - values: decimal floats, NaN, +Inf, -Inf; an optional int64 timestamp;
 *  - all samples of a family together, no sample (name + label set) twice;
 *  - counters: value >= 0, never NaN;
 *  - histograms: only name_bucket (with le), name_sum, name_count; per label
 *    set, buckets in ascending le order with non-decreasing counts, the last
 *    bucket le="+Inf" equal to name_count, name_sum present;
 *  - summaries: name{quantile=...} with 0 <= quantile <= 1, name_sum, name_count.
 *
 * Lookups take label pairs as varargs ending in NULL:
 *   prom_value(doc, "lessee_runs_finished_total", "workflow", "build",
 *              "outcome", "succeeded", NULL) */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum prom_type { PROM_UNTYPED, PROM_COUNTER, PROM_GAUGE, PROM_HISTOGRAM, PROM_SUMMARY };

struct prom_label {
	char *name, *value; /* value unescaped */
};

struct prom_sample {
	char *name;                /* as written: "x_bucket", "x_sum", "x" */
	struct prom_label *labels; /* sorted by name */
	size_t n_labels;
	double value;
	bool has_timestamp;
	int64_t timestamp; /* ms */
	size_t line;       /* 1-based */
};

struct prom_family {
	char *name;
	char *help; /* unescaped; NULL without a HELP line */
	enum prom_type type;
	size_t first, n; /* its samples: doc->samples[first .. first + n) */
};

typedef struct prom_doc {
	struct prom_family *families;
	size_t n_families;
	struct prom_sample *samples;
	size_t n_samples;
} prom_doc_t;

/* 0, -EINVAL with *ret_error = "line N: what is wrong" (caller frees; ret_error
 * may be NULL), or -ENOMEM. */
int prom_parse(const char *text, size_t len, prom_doc_t **ret, char **ret_error);
prom_doc_t *prom_free(prom_doc_t *d);

const char *prom_type_name(enum prom_type t);
const struct prom_family *prom_family(const prom_doc_t *d, const char *name);
/* The sample with this name and exactly these labels, or NULL. */
const struct prom_sample *prom_find(const prom_doc_t *d, const char *name, ...)
    __attribute__((sentinel));
/* Its value, NAN when there is no such sample. */
double prom_value(const prom_doc_t *d, const char *name, ...) __attribute__((sentinel));
/* Over every sample with this name whose labels include these pairs: */
double prom_sum(const prom_doc_t *d, const char *name, ...) __attribute__((sentinel));
size_t prom_count(const prom_doc_t *d, const char *name, ...) __attribute__((sentinel));
/* A label's value, or NULL. */
const char *prom_label(const struct prom_sample *s, const char *name);
