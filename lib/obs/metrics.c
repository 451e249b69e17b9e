#include "obs/metrics.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/strutil.h"

enum metric_type { METRIC_COUNTER, METRIC_GAUGE, METRIC_HISTOGRAM };

struct child {
	char **values;
	double value;     /* counter/gauge; histogram: sum */
	uint64_t count;   /* histogram */
	uint64_t *bucket; /* histogram: per-bucket (non-cumulative) counts */
	struct child *next;
};

struct metric {
	enum metric_type type;
	char *name, *help;
	char **labels;
	size_t n_labels;
	double *buckets;
	size_t n_buckets;
	struct child *children, **tail;
	struct metric *next;
};

struct metrics {
	struct metric *first, **tail;
};

metrics_t *metrics_new(void)
{
	metrics_t *m = calloc(1, sizeof(*m));

	if (m)
		m->tail = &m->first;
	return m;
}

static void children_free(struct metric *f)
{
	struct child *c = f->children, *n;

	for (; c; c = n) {
		n = c->next;
		strv_free(c->values);
		free(c->bucket);
		free(c);
	}
	f->children = NULL;
	f->tail = &f->children;
}

metrics_t *metrics_free(metrics_t *m)
{
	struct metric *f, *n;

	if (!m)
		return NULL;
	for (f = m->first; f; f = n) {
		n = f->next;
		children_free(f);
		free(f->name);
		free(f->help);
		strv_free(f->labels);
		free(f->buckets);
		free(f);
	}
	free(m);
	return NULL;
}

static metric_t *family_new(metrics_t *m, enum metric_type type, const char *name,
			    const char *help, const char *labels)
{
	struct metric *f = calloc(1, sizeof(*f));

	if (!f)
		return NULL;
	f->type = type;
	f->name = strdup(name);
	f->help = strdup(help);
	f->tail = &f->children;
	if (!f->name || !f->help || strv_split(labels ? labels : "", ",", &f->labels) < 0) {
		free(f->name);
		free(f->help);
		free(f);
		return NULL;
	}
	f->n_labels = strv_length(f->labels);
	*m->tail = f;
	m->tail = &f->next;
	return f;
}

metric_t *metrics_counter(metrics_t *m, const char *name, const char *help, const char *labels)
{
	return family_new(m, METRIC_COUNTER, name, help, labels);
}

metric_t *metrics_gauge(metrics_t *m, const char *name, const char *help, const char *labels)
{
	return family_new(m, METRIC_GAUGE, name, help, labels);
}

metric_t *metrics_histogram(metrics_t *m, const char *name, const char *help,
			    const char *labels, const double *buckets, size_t n_buckets)
{
	struct metric *f = family_new(m, METRIC_HISTOGRAM, name, help, labels);

	if (!f)
		return NULL;
	f->buckets = malloc(n_buckets * sizeof(double));
	if (f->buckets) {
		memcpy(f->buckets, buckets, n_buckets * sizeof(double));
		f->n_buckets = n_buckets;
	}
	return f;
}

static bool values_match(const struct child *c, const char *const *values, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!streq(c->values[i], values[i]))
			return false;
	return true;
}

/* The exposition format is UTF-8 and Prometheus drops a whole scrape over one
 * bad byte.  Each byte that does not start a valid sequence becomes U+FFFD,
 * before the lookup, so values that would render alike are one child.
 * *ret = NULL when s is valid as it is. */
static int utf8_fix(const char *s, char **ret)
{
	const unsigned char *p = (const unsigned char *)s;
	struct buf b = BUF_INIT(0);
	bool bad = false;

	*ret = NULL;
	for (size_t n; *p && !bad; p += n)
		bad = (n = utf8_seq_len(p, 4)) == 0;
	if (!bad)
		return 0;
	for (p = (const unsigned char *)s; *p;) {
		size_t n = utf8_seq_len(p, 4);

		if (n ? buf_append(&b, p, n) < 0 : buf_appends(&b, "\xef\xbf\xbd") < 0) {
			buf_done(&b);
			return -ENOMEM;
		}
		p += n ? n : 1;
	}
	*ret = buf_steal(&b);
	return 0;
}

static struct child *child_find(struct metric *f, const char *const *values, size_t n,
				bool create)
{
	struct child *c;

	for (c = f->children; c; c = c->next)
		if (values_match(c, values, n))
			return c;
	if (!create || !(c = calloc(1, sizeof(*c))))
		return NULL;
	c->values = calloc(n + 1, sizeof(char *));
	c->bucket = f->n_buckets ? calloc(f->n_buckets, sizeof(uint64_t)) : NULL;
	for (size_t i = 0; c->values && i < n; i++)
		c->values[i] = strdup(values[i]);
	if (!c->values || (f->n_buckets && !c->bucket) || strv_length(c->values) != n) {
		strv_free(c->values);
		free(c->bucket);
		free(c);
		return NULL;
	}
	*f->tail = c;
	f->tail = &c->next;
	return c;
}

/* Find or create the child for these label values; NULL on ENOMEM. */
static struct child *child_get(struct metric *f, va_list ap, bool create)
{
	const char *values[16];
	char *fixed[16] = {0};
	struct child *c = NULL;
	size_t n = f->n_labels < 16 ? f->n_labels : 16, i;

	for (i = 0; i < n; i++) {
		values[i] = va_arg(ap, const char *);
		if (!values[i])
			values[i] = "";
		if (utf8_fix(values[i], &fixed[i]) < 0)
			break;
		if (fixed[i])
			values[i] = fixed[i];
	}
	if (i == n)
		c = child_find(f, values, n, create);
	for (i = 0; i < n; i++)
		free(fixed[i]);
	return c;
}

#define WITH_CHILD(f, last, create, body)                                                          \
	do {                                                                                       \
		va_list ap;                                                                        \
		struct child *c;                                                                   \
		va_start(ap, last);                                                                \
		c = child_get(f, ap, create);                                                      \
		va_end(ap);                                                                        \
		if (c) {                                                                           \
			body;                                                                      \
		}                                                                                  \
	} while (0)

void metric_add(metric_t *f, double v, ...)
{
	if (f)
		WITH_CHILD(f, v, true, c->value += v);
}

void metric_set(metric_t *f, double v, ...)
{
	if (f)
		WITH_CHILD(f, v, true, c->value = v);
}

void metric_observe(metric_t *f, double v, ...)
{
	if (!f)
		return;
	WITH_CHILD(f, v, true, {
		size_t i = 0;

		while (i < f->n_buckets && v > f->buckets[i])
			i++;
		if (i < f->n_buckets)
			c->bucket[i]++;
		c->count++;
		c->value += v;
	});
}

void metric_touch(metric_t *f, ...)
{
	if (f)
		WITH_CHILD(f, f, true, (void)c);
}

double metric_get(metric_t *f, ...)
{
	double r = 0;

	if (f)
		WITH_CHILD(f, f, false, r = f->type == METRIC_HISTOGRAM ? (double)c->count : c->value);
	return r;
}

void metric_reset(metric_t *f)
{
	if (f)
		children_free(f);
}

/* Rendering stops at the first failed append (over the caller's cap, or
 * ENOMEM) and reports it: a truncated scrape must not go out as a good one. */
struct sink {
	struct buf *b;
	int r;
};

static void emit(struct sink *out, const void *p, size_t n)
{
	if (out->r >= 0)
		out->r = buf_append(out->b, p, n);
}

static void emits(struct sink *out, const char *s)
{
	emit(out, s, strlen(s));
}

static void emitf(struct sink *out, const char *fmt, ...) _printf_(2, 3);
static void emitf(struct sink *out, const char *fmt, ...)
{
	va_list ap;

	if (out->r < 0)
		return;
	va_start(ap, fmt);
	out->r = buf_vprintf(out->b, fmt, ap);
	va_end(ap);
}

static void render_escaped(struct sink *out, const char *s, bool label)
{
	for (; *s; s++) {
		if (*s == '\\')
			emits(out, "\\\\");
		else if (*s == '\n')
			emits(out, "\\n");
		else if (label && *s == '"')
			emits(out, "\\\"");
		else
			emit(out, s, 1);
	}
}

static void render_value(struct sink *out, double v)
{
	if (isinf(v))
		emits(out, v > 0 ? "+Inf" : "-Inf");
	else if (isnan(v))
		emits(out, "NaN");
	else if (v == floor(v) && fabs(v) < 1e15)
		emitf(out, "%.0f", v);
	else
		emitf(out, "%.9g", v);
}

/* name{l1="v1",...,extra_key="extra_val"} value */
static void render_sample(struct sink *out, const struct metric *f, const char *suffix,
			  const struct child *c, const char *extra_key, const char *extra_val,
			  double v)
{
	bool any = f->n_labels > 0 || extra_key;

	emitf(out, "%s%s", f->name, suffix);
	if (any)
		emit(out, "{", 1);
	for (size_t i = 0; i < f->n_labels; i++) {
		emitf(out, "%s%s=\"", i ? "," : "", f->labels[i]);
		render_escaped(out, c->values[i], true);
		emit(out, "\"", 1);
	}
	if (extra_key)
		emitf(out, "%s%s=\"%s\"", f->n_labels ? "," : "", extra_key, extra_val);
	if (any)
		emit(out, "}", 1);
	emit(out, " ", 1);
	render_value(out, v);
	emit(out, "\n", 1);
}

static void render_histogram(struct sink *out, const struct metric *f, const struct child *c)
{
	uint64_t cum = 0;
	char le[32];

	for (size_t i = 0; i < f->n_buckets; i++) {
		cum += c->bucket[i];
		snprintf(le, sizeof(le), "%.9g", f->buckets[i]);
		render_sample(out, f, "_bucket", c, "le", le, (double)cum);
	}
	render_sample(out, f, "_bucket", c, "le", "+Inf", (double)c->count);
	render_sample(out, f, "_sum", c, NULL, NULL, c->value);
	render_sample(out, f, "_count", c, NULL, NULL, (double)c->count);
}

int metrics_render(const metrics_t *m, struct buf *b)
{
	static const char *const types[] = {"counter", "gauge", "histogram"};
	struct sink sink = {.b = b}, *out = &sink;

	for (const struct metric *f = m->first; f; f = f->next) {
		emitf(out, "# HELP %s ", f->name);
		render_escaped(out, f->help, false);
		emitf(out, "\n# TYPE %s %s\n", f->name, types[f->type]);
		for (const struct child *c = f->children; c; c = c->next) {
			if (f->type == METRIC_HISTOGRAM)
				render_histogram(out, f, c);
			else
				render_sample(out, f, "", c, NULL, NULL, c->value);
		}
	}
	return out->r < 0 ? out->r : 0;
}
